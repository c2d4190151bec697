/**
 * Point operations of one shard, in the resolved form that is written to the WAL and
 * applied: every id is a canonical point key, every vector a validated Float32Array,
 * and operations that the API selects by filter are already resolved to ids (so
 * replaying the WAL applies exactly what was applied the first time, whatever the
 * payloads look like at replay time).
 *
 * Owns: the operation types and their byte encoding. Must never: validate user input
 * (the collection layer does) or touch shard state.
 *
 * Record layout, format 2: `u8 format(=2) | u64 peer | u32 clock | u64 tick | u32
 * header length | header (UTF-8 JSON) | f32 data`, integers little-endian. Bytes 1-20
 * are the operation's clock tag (clocks.ts), at a fixed place so a history scan reads
 * it without parsing the rest. The header holds ids, payloads and, per vector name,
 * which points carry a vector; the vectors themselves follow as raw little-endian f32
 * (JSON would be several times larger and slower for the bulk of an upsert). Sparse
 * vectors, when an operation has any, follow the dense data: the header's `s` lists per
 * name the rows carrying one and their entry counts, and each row's data is its indices
 * (u32) then its values (f32). Records without `s` (all records written before sparse
 * vectors) decode as before.
 *
 * Format 1 (before clock tags) is the same without the tag: `u8 format(=1) | u32
 * header length | header | f32 data`. WALs written before tags still decode (tag
 * null); new records are always format 2.
 */

import type { ClockTag } from './clocks';
import type { Payload } from './payload-store';
import type { PointKey } from './id-tracker';
import { normalizePointId } from './id-tracker';

/** Vectors by name ("" is the unnamed vector). */
export type NamedVectors = Map<string, Float32Array>;

/** A sparse vector as written: dimension ids and their values, the same length. */
export interface SparseVec {
  indices: Uint32Array;
  values: Float32Array;
}

/** Sparse vectors by name (sparse vectors are always named). */
export type SparseVectors = Map<string, SparseVec>;

export interface PointWrite {
  id: PointKey;
  vectors: NamedVectors;
  payload: Payload | null;
  /** Sparse vectors of the point (absent: none). */
  sparse?: SparseVectors;
}

export type ShardOperation =
  | { kind: 'upsert'; points: PointWrite[] }
  | { kind: 'delete'; ids: PointKey[] }
  | { kind: 'set_payload'; ids: PointKey[]; payload: Payload; key: string | null }
  | { kind: 'overwrite_payload'; ids: PointKey[]; payload: Payload }
  | { kind: 'delete_payload'; ids: PointKey[]; keys: string[] }
  | { kind: 'clear_payload'; ids: PointKey[] }
  | { kind: 'update_vectors'; points: Array<{ id: PointKey; vectors: NamedVectors; sparse?: SparseVectors }> }
  | { kind: 'delete_vectors'; ids: PointKey[]; names: string[] };

/** Records without a clock tag (written before tags existed). */
const FORMAT_UNTAGGED = 1;
const FORMAT_TAGGED = 2;
const TAG_BYTES = 20;

interface Header {
  k: ShardOperation['kind'];
  ids: string[];
  /** Per point payloads (upsert), or the operation's payload. */
  p?: Array<Payload | null> | Payload;
  key?: string | null;
  keys?: string[];
  names?: string[];
  /** Per vector name and length: the length and the indexes (into ids) of points carrying such a vector. */
  v?: Array<{ n: string; d: number; rows: number[] }>;
  /**
   * Per sparse vector name: the rows carrying it and each one's entry count. Their data
   * follows the dense vectors: per row, the indices (u32) then the values (f32).
   */
  s?: Array<{ n: string; rows: number[]; lens: number[] }>;
}

function idText(k: PointKey): string {
  return k.kind === 'num' ? k.value.toString() : k.value;
}

function idFrom(s: string): PointKey {
  return normalizePointId(/^[0-9]+$/.test(s) ? BigInt(s) : s);
}

function vectorTable(points: Array<{ vectors: NamedVectors }>): { table: NonNullable<Header['v']>; chunks: Float32Array[] } {
  const byName = new Map<string, { n: string; d: number; rows: number[] }>();
  const chunks: Float32Array[] = [];
  const perName = new Map<string, Float32Array[]>();
  points.forEach((p, i) => {
    for (const [name, vec] of p.vectors) {
      // One entry per name and length: a multivector's length is its rows times the
      // dimension, so the lists of one name may differ (a name may have several entries).
      const key = `${vec.length}\u0000${name}`;
      let e = byName.get(key);
      if (!e) {
        e = { n: name, d: vec.length, rows: [] };
        byName.set(key, e);
        perName.set(key, []);
      }
      e.rows.push(i);
      perName.get(key)!.push(vec);
    }
  });
  for (const list of perName.values()) chunks.push(...list);
  return { table: [...byName.values()], chunks };
}

function sparseTable(points: Array<{ sparse?: SparseVectors }>): { table: NonNullable<Header['s']>; chunks: Array<Uint32Array | Float32Array> } | null {
  const byName = new Map<string, { n: string; rows: number[]; lens: number[]; data: Array<Uint32Array | Float32Array> }>();
  points.forEach((p, i) => {
    if (!p.sparse) return;
    for (const [name, v] of p.sparse) {
      let e = byName.get(name);
      if (!e) byName.set(name, (e = { n: name, rows: [], lens: [], data: [] }));
      e.rows.push(i);
      e.lens.push(v.indices.length);
      e.data.push(v.indices, v.values);
    }
  });
  if (byName.size === 0) return null;
  const chunks: Array<Uint32Array | Float32Array> = [];
  for (const e of byName.values()) chunks.push(...e.data);
  return { table: [...byName.values()].map(({ n, rows, lens }) => ({ n, rows, lens })), chunks };
}

/**
 * Encodes `op` as a WAL record carrying `tag` (format 2), or without a tag (format 1,
 * as records were before tags): the form an operation travels in before the replica
 * that applies it tags it (ts/collection/replica-operation.ts).
 */
export function encodeOperation(op: ShardOperation, tag: ClockTag | null): Buffer {
  let header: Header;
  let chunks: Array<Float32Array | Uint32Array> = [];
  switch (op.kind) {
    case 'upsert': {
      const t = vectorTable(op.points);
      chunks = t.chunks;
      header = { k: op.kind, ids: op.points.map((p) => idText(p.id)), p: op.points.map((p) => p.payload), v: t.table };
      const st = sparseTable(op.points);
      if (st) {
        header.s = st.table;
        chunks = [...chunks, ...st.chunks];
      }
      break;
    }
    case 'update_vectors': {
      const t = vectorTable(op.points);
      chunks = t.chunks;
      header = { k: op.kind, ids: op.points.map((p) => idText(p.id)), v: t.table };
      const st = sparseTable(op.points);
      if (st) {
        header.s = st.table;
        chunks = [...chunks, ...st.chunks];
      }
      break;
    }
    case 'delete':
    case 'clear_payload':
      header = { k: op.kind, ids: op.ids.map(idText) };
      break;
    case 'set_payload':
      header = { k: op.kind, ids: op.ids.map(idText), p: op.payload, key: op.key };
      break;
    case 'overwrite_payload':
      header = { k: op.kind, ids: op.ids.map(idText), p: op.payload };
      break;
    case 'delete_payload':
      header = { k: op.kind, ids: op.ids.map(idText), keys: op.keys };
      break;
    case 'delete_vectors':
      header = { k: op.kind, ids: op.ids.map(idText), names: op.names };
      break;
  }
  const json = Buffer.from(JSON.stringify(header), 'utf8');
  let floats = 0;
  for (const c of chunks) floats += c.length;
  const tagBytes = tag === null ? 0 : TAG_BYTES;
  const start = 1 + tagBytes + 4;
  const out = Buffer.allocUnsafe(start + json.length + floats * 4);
  if (tag === null) {
    out.writeUInt8(FORMAT_UNTAGGED, 0);
  } else {
    out.writeUInt8(FORMAT_TAGGED, 0);
    out.writeBigUInt64LE(tag.peer, 1);
    out.writeUInt32LE(tag.clock, 9);
    out.writeBigUInt64LE(tag.tick, 13);
  }
  out.writeUInt32LE(json.length, 1 + tagBytes);
  json.copy(out, start);
  let at = start + json.length;
  for (const run of byteRuns(chunks)) {
    out.set(run, at);
    at += run.byteLength;
  }
  return out;
}

/**
 * The bytes of `chunks` in order, as few views as possible: chunks that follow each
 * other in one buffer (the vectors of a request body read into one arena, see
 * ts/api/rest/json-numbers.ts) make one run, copied at once.
 */
export function byteRuns(chunks: ReadonlyArray<Float32Array | Uint32Array>): Uint8Array[] {
  const runs: Uint8Array[] = [];
  for (let i = 0; i < chunks.length; ) {
    const first = chunks[i];
    let end = first.byteOffset + first.byteLength;
    let j = i + 1;
    while (j < chunks.length && chunks[j].buffer === first.buffer && chunks[j].byteOffset === end) end += chunks[j++].byteLength;
    runs.push(new Uint8Array(first.buffer, first.byteOffset, end - first.byteOffset));
    i = j;
  }
  return runs;
}

export class OperationFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'OperationFormatError';
  }
}

/** Byte offset of the header length: after the format byte, and the tag in format 2. */
function headerAt(buf: Buffer): number {
  const format = buf.length > 0 ? buf.readUInt8(0) : -1;
  const at = format === FORMAT_TAGGED ? 1 + TAG_BYTES : format === FORMAT_UNTAGGED ? 1 : -1;
  if (at < 0) throw new OperationFormatError(`WAL record has an unknown format ${format}`);
  if (buf.length < at + 4) throw new OperationFormatError('WAL record is cut short');
  return at;
}

/** The clock tag of a WAL record, or null for a record written before tags (format 1). */
export function recordTag(buf: Buffer): ClockTag | null {
  if (headerAt(buf) === 1) return null;
  return { peer: buf.readBigUInt64LE(1), clock: buf.readUInt32LE(9), tick: buf.readBigUInt64LE(13) };
}

/** A WAL record's operation and clock tag (null for records written before tags). */
export function decodeRecord(buf: Buffer): { op: ShardOperation; tag: ClockTag | null } {
  return { op: decodeOperation(buf), tag: recordTag(buf) };
}

export function decodeOperation(buf: Buffer): ShardOperation {
  const lenAt = headerAt(buf);
  const hlen = buf.readUInt32LE(lenAt);
  const hstart = lenAt + 4;
  if (hstart + hlen > buf.length) throw new OperationFormatError('WAL record header runs past its end');
  const h = JSON.parse(buf.subarray(hstart, hstart + hlen).toString('utf8')) as Header;
  const ids = h.ids.map(idFrom);
  let at = hstart + hlen;
  const readVectors = (): NamedVectors[] => {
    const out: NamedVectors[] = ids.map(() => new Map());
    for (const e of h.v ?? []) {
      for (const row of e.rows) {
        const bytes = e.d * 4;
        if (at + bytes > buf.length) throw new OperationFormatError('WAL record vectors run past its end');
        // Copy into an aligned buffer: the record's f32 data need not be 4-aligned.
        const v = new Float32Array(e.d);
        Buffer.from(v.buffer).set(buf.subarray(at, at + bytes));
        out[row].set(e.n, v);
        at += bytes;
      }
    }
    return out;
  };
  /** The sparse vectors after the dense ones (null when the record has none). */
  const readSparse = (): Array<SparseVectors | undefined> | null => {
    if (!h.s) return null;
    const out: Array<SparseVectors | undefined> = ids.map(() => undefined);
    for (const e of h.s) {
      e.rows.forEach((row, j) => {
        const len = e.lens[j];
        if (at + len * 8 > buf.length) throw new OperationFormatError('WAL record sparse vectors run past its end');
        const indices = new Uint32Array(len);
        Buffer.from(indices.buffer).set(buf.subarray(at, at + len * 4));
        at += len * 4;
        const values = new Float32Array(len);
        Buffer.from(values.buffer).set(buf.subarray(at, at + len * 4));
        at += len * 4;
        let m = out[row];
        if (!m) out[row] = m = new Map();
        m.set(e.n, { indices, values });
      });
    }
    return out;
  };
  switch (h.k) {
    case 'upsert': {
      const vs = readVectors();
      const ss = readSparse();
      const ps = h.p as Array<Payload | null>;
      return { kind: 'upsert', points: ids.map((id, i) => (ss?.[i] ? { id, vectors: vs[i], payload: ps[i], sparse: ss[i] } : { id, vectors: vs[i], payload: ps[i] })) };
    }
    case 'update_vectors': {
      const vs = readVectors();
      const ss = readSparse();
      return { kind: 'update_vectors', points: ids.map((id, i) => (ss?.[i] ? { id, vectors: vs[i], sparse: ss[i] } : { id, vectors: vs[i] })) };
    }
    case 'delete':
    case 'clear_payload':
      return { kind: h.k, ids };
    case 'set_payload':
      return { kind: 'set_payload', ids, payload: h.p as Payload, key: h.key ?? null };
    case 'overwrite_payload':
      return { kind: 'overwrite_payload', ids, payload: h.p as Payload };
    case 'delete_payload':
      return { kind: 'delete_payload', ids, keys: h.keys ?? [] };
    case 'delete_vectors':
      return { kind: 'delete_vectors', ids, names: h.names ?? [] };
    default:
      throw new OperationFormatError(`WAL record has an unknown operation ${JSON.stringify((h as { k: unknown }).k)}`);
  }
}
