/**
 * Point writes as they travel to a replica: plain data with a byte encoding, so the
 * same operation can be applied by this peer's shard or sent to another peer.
 *
 * Owns: ReplicaOperation (the ShardOperation of ts/shard/operations.ts, except that
 * operations choosing points by ids or by a filter carry their Selector unresolved),
 * its encoding, and its resolution into a ShardOperation. Resolution runs on the
 * replica that applies the operation, under that replica's update lock, so a filter
 * selects exactly the points the shard holds when the write is logged. Must never:
 * validate user input (the collection does, before anything is sent) or touch a shard.
 *
 * Encoding: `u8 format(=1) | u8 shape (0 | 1 | 2) | [shape 1: u32 length | JSON
 * {filter, ids}] | [shape 2: u32 length | JSON {filter, mode}] | the ShardOperation
 * encoding`. A selected operation (shape 1) is encoded as the ShardOperation over its
 * explicit ids (none for a filter alone) plus the filter, so the id and payload encoding
 * is the WAL's. A conditional upsert or vector update (shape 2: `update_filter`,
 * `update_mode`) carries its condition the same way; each replica evaluates it against
 * the points it holds, under its lock, and logs the plain write it resolved to.
 */

import type { Filter } from '../shard/filter';
import type { PointKey } from '../shard/id-tracker';
import { decodeOperation, encodeOperation, OperationFormatError, type NamedVectors, type PointWrite, type ShardOperation, type SparseVectors } from '../shard/operations';
import type { Payload } from '../shard/payload-store';

/** Points chosen by explicit ids or by a filter (ids may carry a filter too). */
export interface Selector {
  ids: PointKey[] | null;
  filter: Filter | null;
}

/** The reference's `update_mode` of an upsert. */
export type UpdateMode = 'upsert' | 'insert_only' | 'update_only';

/**
 * A conditional write's condition: `filter` (update_filter) decides which existing points
 * are written; `mode` whether new points are inserted and existing ones updated at all.
 */
export interface WriteCondition {
  filter: Filter | null;
  mode: UpdateMode;
}

export type ReplicaOperation =
  | { kind: 'upsert'; points: PointWrite[]; condition?: WriteCondition }
  | { kind: 'update_vectors'; points: Array<{ id: PointKey; vectors: NamedVectors; sparse?: SparseVectors }>; condition?: WriteCondition }
  | { kind: 'delete'; select: Selector }
  | { kind: 'set_payload'; select: Selector; payload: Payload; key: string | null }
  | { kind: 'overwrite_payload'; select: Selector; payload: Payload }
  | { kind: 'delete_payload'; select: Selector; keys: string[] }
  | { kind: 'clear_payload'; select: Selector }
  | { kind: 'delete_vectors'; select: Selector; names: string[] };

/** The operations that choose their points with a Selector. */
export type SelectedOperation = Extract<ReplicaOperation, { select: Selector }>;

export function isSelected(op: ReplicaOperation): op is SelectedOperation {
  return op.kind !== 'upsert' && op.kind !== 'update_vectors';
}

/** The ShardOperation of `op` over `ids` (the points its selector chose): the same fields, with ids for the selector. */
function overIds(op: SelectedOperation, ids: PointKey[]): ShardOperation {
  const { select: _chosen, ...fields } = op;
  return { ...fields, ids } as ShardOperation;
}

/**
 * The points of a conditional write that are written, by the reference's rule: `upsert`
 * writes new points and the existing ones the filter holds on; `insert_only` writes new
 * points only (the filter plays no part); `update_only` writes the existing points the
 * filter holds on (all existing ones without a filter). A vector update carries mode
 * `upsert`: the existing points the filter does not hold on are left alone.
 */
function kept<P extends { id: PointKey }>(points: P[], cond: WriteCondition, resolve: (sel: Selector) => PointKey[]): P[] {
  const ids = points.map((p) => p.id);
  const existing = new Set(resolve({ ids, filter: null }).map((k) => k.key));
  if (cond.mode === 'insert_only') return points.filter((p) => !existing.has(p.id.key));
  const matching = cond.filter === null ? existing : new Set(resolve({ ids, filter: cond.filter }).map((k) => k.key));
  if (cond.mode === 'update_only') return points.filter((p) => matching.has(p.id.key));
  return points.filter((p) => !existing.has(p.id.key) || matching.has(p.id.key));
}

/** `op` with its selector or write condition resolved by `resolve` (the points of the applying shard). */
export function resolveOperation(op: ReplicaOperation, resolve: (sel: Selector) => PointKey[]): ShardOperation {
  if (!isSelected(op)) {
    if (op.condition === undefined) return op;
    if (op.kind === 'upsert') return { kind: 'upsert', points: kept(op.points, op.condition, resolve) };
    return { kind: 'update_vectors', points: kept(op.points, op.condition, resolve) };
  }
  return overIds(op, resolve(op.select));
}

/** A resolved operation as a ReplicaOperation over exactly its ids (what a transfer source forwards). */
export function fromShardOperation(op: ShardOperation): ReplicaOperation {
  if (op.kind === 'upsert' || op.kind === 'update_vectors') return op;
  const { ids, ...fields } = op;
  return { ...fields, select: { ids, filter: null } } as SelectedOperation;
}

const FORMAT = 1;

function withHead(shape: number, head: object, body: Buffer): Buffer {
  const h = Buffer.from(JSON.stringify(head), 'utf8');
  const len = Buffer.alloc(4);
  len.writeUInt32LE(h.length, 0);
  return Buffer.concat([Buffer.from([FORMAT, shape]), len, h, body]);
}

export function encodeReplicaOperation(op: ReplicaOperation): Buffer {
  if (!isSelected(op)) {
    const plain: ShardOperation = op.kind === 'upsert' ? { kind: 'upsert', points: op.points } : { kind: 'update_vectors', points: op.points };
    if (op.condition === undefined) return Buffer.concat([Buffer.from([FORMAT, 0]), encodeOperation(plain, null)]);
    return withHead(2, { filter: op.condition.filter, mode: op.condition.mode }, encodeOperation(plain, null));
  }
  const head = Buffer.from(JSON.stringify({ filter: op.select.filter, ids: op.select.ids !== null }), 'utf8');
  const len = Buffer.alloc(4);
  len.writeUInt32LE(head.length, 0);
  return Buffer.concat([Buffer.from([FORMAT, 1]), len, head, encodeOperation(overIds(op, op.select.ids ?? []), null)]);
}

export function decodeReplicaOperation(buf: Buffer): ReplicaOperation {
  if (buf.length < 2 || buf[0] !== FORMAT) throw new OperationFormatError('replica operation has an unknown format');
  if (buf[1] === 0) {
    const op = decodeOperation(buf.subarray(2));
    if (op.kind !== 'upsert' && op.kind !== 'update_vectors') throw new OperationFormatError(`replica operation ${op.kind} has no selector`);
    return op;
  }
  if ((buf[1] !== 1 && buf[1] !== 2) || buf.length < 6) throw new OperationFormatError('replica operation has an unknown shape');
  const hlen = buf.readUInt32LE(2);
  if (6 + hlen > buf.length) throw new OperationFormatError('replica operation header runs past its end');
  if (buf[1] === 2) {
    const head = JSON.parse(buf.subarray(6, 6 + hlen).toString('utf8')) as { filter: Filter | null; mode: UpdateMode };
    if (!['upsert', 'insert_only', 'update_only'].includes(head.mode)) throw new OperationFormatError(`replica operation has an unknown update mode ${JSON.stringify(head.mode)}`);
    const op = decodeOperation(buf.subarray(6 + hlen));
    if (op.kind !== 'upsert' && op.kind !== 'update_vectors') throw new OperationFormatError(`replica operation ${op.kind} cannot carry a write condition`);
    return { ...op, condition: { filter: head.filter, mode: head.mode } } as ReplicaOperation;
  }
  const head = JSON.parse(buf.subarray(6, 6 + hlen).toString('utf8')) as { filter: Filter | null; ids: boolean };
  const op = decodeOperation(buf.subarray(6 + hlen));
  if (op.kind === 'upsert' || op.kind === 'update_vectors') throw new OperationFormatError(`replica operation ${op.kind} cannot carry a selector`);
  const { ids, ...fields } = op;
  return { ...fields, select: { ids: head.ids ? ids : null, filter: head.filter } } as SelectedOperation;
}
