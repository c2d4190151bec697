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
 * Encoding: `u8 format(=1) | u8 selected (0 | 1) | [selected: u32 length | JSON
 * {filter, ids}] | the ShardOperation encoding`. A selected operation is encoded as the
 * ShardOperation over its explicit ids (none for a filter alone) plus the filter, so the
 * id and payload encoding is the WAL's.
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

export type ReplicaOperation =
  | { kind: 'upsert'; points: PointWrite[] }
  | { kind: 'update_vectors'; points: Array<{ id: PointKey; vectors: NamedVectors; sparse?: SparseVectors }> }
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

/** `op` with its selector resolved by `resolve` (the points of the applying shard). */
export function resolveOperation(op: ReplicaOperation, resolve: (sel: Selector) => PointKey[]): ShardOperation {
  if (!isSelected(op)) return op;
  return overIds(op, resolve(op.select));
}

/** A resolved operation as a ReplicaOperation over exactly its ids (what a transfer source forwards). */
export function fromShardOperation(op: ShardOperation): ReplicaOperation {
  if (op.kind === 'upsert' || op.kind === 'update_vectors') return op;
  const { ids, ...fields } = op;
  return { ...fields, select: { ids, filter: null } } as SelectedOperation;
}

const FORMAT = 1;

export function encodeReplicaOperation(op: ReplicaOperation): Buffer {
  if (!isSelected(op)) return Buffer.concat([Buffer.from([FORMAT, 0]), encodeOperation(op, null)]);
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
  if (buf[1] !== 1 || buf.length < 6) throw new OperationFormatError('replica operation has an unknown shape');
  const hlen = buf.readUInt32LE(2);
  if (6 + hlen > buf.length) throw new OperationFormatError('replica operation header runs past its end');
  const head = JSON.parse(buf.subarray(6, 6 + hlen).toString('utf8')) as { filter: Filter | null; ids: boolean };
  const op = decodeOperation(buf.subarray(6 + hlen));
  if (op.kind === 'upsert' || op.kind === 'update_vectors') throw new OperationFormatError(`replica operation ${op.kind} cannot carry a selector`);
  const { ids, ...fields } = op;
  return { ...fields, select: { ids: head.ids ? ids : null, filter: head.filter } } as SelectedOperation;
}
