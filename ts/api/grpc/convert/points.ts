/**
 * The parts of `qdrant.Points` messages (points.proto) that many requests share, to the
 * JSON form of the same REST request, and the results back to messages: point ids,
 * vectors, points, selectors, `with_payload` / `with_vectors`, shard key selectors, the
 * query parameters (`wait`, `ordering`, `consistency`, `timeout`), and records, scored
 * points and update results.
 *
 * Owns: those translations. Must never: validate what it translates (the parsers of
 * ts/api/request do, for REST and gRPC alike), or drop a field the REST form has: a
 * field Quiver does not serve is carried over so the parser refuses it as REST does.
 */

import type { ParsedUrlQuery } from 'node:querystring';

import type { RecordOut, ScoredOut, UpdateResult } from '../../../collection/collection';
import { FormatError } from '../../../common/errors';
import { filterToJson, pointIdToJson, type FilterMsg, type PointIdMsg } from './filter';
import { shardKeyOut, shardKeyToJson, type ShardKeyMsg } from './common';
import { jsonToMap, mapToJson, valueToJson, type ValueMap, type ValueMsg } from './value';

type Long = string | number;
type Json = Record<string, unknown>;

// -- input --------------------------------------------------------------------------------

export interface DenseVectorMsg {
  data?: number[];
}

/** The vector forms `Vector` and `VectorInput` share: dense, sparse, multi-dense and the inference inputs. */
export interface VectorFormsMsg {
  dense?: DenseVectorMsg;
  sparse?: { values?: number[]; indices?: number[] };
  multi_dense?: { vectors?: DenseVectorMsg[] };
  document?: { text?: string; model?: string; options?: ValueMap };
  image?: { image?: ValueMsg; model?: string; options?: ValueMap };
  object?: { object?: ValueMsg; model?: string; options?: ValueMap };
}

export interface VectorMsg extends VectorFormsMsg {
  vector?: string;
  data?: number[];
  indices?: { data?: number[] };
  vectors_count?: number;
}

export interface VectorsMsg {
  vectors_options?: string;
  vector?: VectorMsg;
  vectors?: { vectors?: Record<string, VectorMsg> };
}

export interface PointStructMsg {
  id?: PointIdMsg;
  payload?: ValueMap;
  vectors?: VectorsMsg;
}

export interface PointsSelectorMsg {
  points_selector_one_of?: string;
  points?: { ids?: PointIdMsg[] };
  filter?: FilterMsg;
}

export interface WithPayloadMsg {
  selector_options?: string;
  enable?: boolean;
  include?: { fields?: string[] };
  exclude?: { fields?: string[] };
}

export interface WithVectorsMsg {
  selector_options?: string;
  enable?: boolean;
  include?: { names?: string[] };
}

export interface ShardKeySelectorMsg {
  shard_keys?: ShardKeyMsg[];
  fallback?: ShardKeyMsg;
}

export interface ReadConsistencyMsg {
  value?: string;
  type?: string;
  factor?: Long;
}

export interface WriteOrderingMsg {
  type?: string;
}

function present<T>(x: T | undefined | null): x is T {
  return x !== undefined && x !== null;
}

/** Sets `out[key]` only when `value` is not undefined (the JSON body leaves it out). */
export function put(out: Json, key: string, value: unknown): void {
  if (value !== undefined) out[key] = value;
}

/** Object options of inference inputs (model options), as JSON. */
function options(m: ValueMap, field: string): Json | undefined {
  return m === undefined ? undefined : mapToJson(m, field);
}

/**
 * One `Vector` to its JSON form: a dense vector is an array, a multi-vector an array
 * of arrays, a sparse one `{indices, values}`, an inference input the REST object
 * (the parser refuses what Quiver does not serve, with the REST error). A Vector with
 * none of the `vector` oneof set is read from the deprecated fields (`data`, with
 * `indices` for sparse and `vectors_count` for multi-vectors), as older clients send it.
 */
export function vectorToJson(v: VectorMsg | undefined, field: string): unknown {
  if (!present(v)) return undefined;
  switch (v.vector) {
    case 'dense':
      return v.dense?.data ?? [];
    case 'sparse':
      return { indices: v.sparse?.indices ?? [], values: v.sparse?.values ?? [] };
    case 'multi_dense':
      return (v.multi_dense?.vectors ?? []).map((d) => d.data ?? []);
    case 'document':
      return { text: v.document?.text ?? '', model: v.document?.model ?? '', options: options(v.document?.options, `${field}.document.options`) };
    case 'image':
      return { image: valueToJson(v.image?.image, `${field}.image.image`), model: v.image?.model ?? '', options: options(v.image?.options, `${field}.image.options`) };
    case 'object':
      return { object: valueToJson(v.object?.object, `${field}.object.object`), model: v.object?.model ?? '', options: options(v.object?.options, `${field}.object.options`) };
    default: {
      const data = v.data ?? [];
      if (present(v.indices)) return { indices: v.indices.data ?? [], values: data };
      if (present(v.vectors_count)) {
        const n = v.vectors_count;
        if (n === 0 || data.length % n !== 0) throw new FormatError(`${field}: ${data.length} values do not split into ${n} vectors`);
        const size = data.length / n;
        return Array.from({ length: n }, (_, i) => data.slice(i * size, (i + 1) * size));
      }
      return data;
    }
  }
}

/** `Vectors` (one unnamed vector, or named ones) to the `vector` field of a REST point. */
export function vectorsToJson(v: VectorsMsg | undefined, field: string): unknown {
  if (!present(v)) return undefined;
  if (v.vectors_options === 'vector') return vectorToJson(v.vector ?? {}, field);
  if (v.vectors_options === 'vectors') {
    const out: Json = {};
    for (const [name, x] of Object.entries(v.vectors?.vectors ?? {})) {
      Object.defineProperty(out, name, { value: vectorToJson(x, `${field}.${name}`), writable: true, enumerable: true, configurable: true });
    }
    return out;
  }
  return undefined;
}

/** A PointStruct to a point of the REST upsert body. */
export function pointToJson(p: PointStructMsg, field: string): Json {
  const out: Json = {};
  put(out, 'id', pointIdToJson(p.id));
  put(out, 'vector', vectorsToJson(p.vectors, `${field}.vector`));
  // An empty map is not on the wire at all: no payload, as a REST point without one.
  if (p.payload !== undefined && p.payload !== null) out.payload = mapToJson(p.payload, `${field}.payload`);
  return out;
}

export function pointIdsToJson(ids: PointIdMsg[] | undefined): unknown[] {
  return (ids ?? []).map(pointIdToJson);
}

/** A PointsSelector into `out` as REST spells it: `points: [ids]` or `filter: {...}`. */
export function putSelector(out: Json, s: PointsSelectorMsg | undefined, field: string): void {
  if (!present(s)) return;
  if (s.points_selector_one_of === 'points') out.points = pointIdsToJson(s.points?.ids);
  else if (s.points_selector_one_of === 'filter') put(out, 'filter', filterToJson(s.filter ?? {}, `${field}.filter`));
}

export function withPayloadToJson(w: WithPayloadMsg | undefined): unknown {
  if (!present(w)) return undefined;
  switch (w.selector_options) {
    case 'enable':
      return w.enable ?? false;
    case 'include':
      return { include: w.include?.fields ?? [] };
    case 'exclude':
      return { exclude: w.exclude?.fields ?? [] };
    default:
      return undefined;
  }
}

export function withVectorsToJson(w: WithVectorsMsg | undefined): unknown {
  if (!present(w)) return undefined;
  switch (w.selector_options) {
    case 'enable':
      return w.enable ?? false;
    case 'include':
      return w.include?.names ?? [];
    default:
      return undefined;
  }
}

/**
 * A ShardKeySelector to REST's `shard_key`: one key, a list of keys, or (with a
 * fallback) `{target, fallback}`, which takes exactly one target key.
 */
export function shardKeySelectorToJson(s: ShardKeySelectorMsg | undefined, field = 'shard_key_selector'): unknown {
  if (!present(s)) return undefined;
  const keys = (s.shard_keys ?? []).map((k, i) => shardKeyToJson(k, `${field}.shard_keys[${i}]`));
  if (present(s.fallback)) {
    if (keys.length !== 1) throw new FormatError(`${field}: a fallback shard key needs exactly one target shard key, got ${keys.length}`);
    return { target: keys[0], fallback: shardKeyToJson(s.fallback, `${field}.fallback`) };
  }
  return keys.length === 1 ? keys[0] : keys;
}

const CONSISTENCY: Record<string, string> = { All: 'all', Majority: 'majority', Quorum: 'quorum' };
const ORDERING: Record<string, string> = { Weak: 'weak', Medium: 'medium', Strong: 'strong' };

function enumName(table: Record<string, string>, v: string | number | undefined, dflt: string): string {
  if (v === undefined) return dflt;
  // An enum value this contract does not name arrives as its number: passed on, the parser refuses it.
  return table[String(v)] ?? String(v);
}

/**
 * The query parameters of a read (`consistency`, `timeout`), as REST's query string holds
 * them; `timeoutS` is the timeout the call gets (the request's, bounded by the client's
 * deadline), null for none.
 */
export function readQuery(r: { read_consistency?: ReadConsistencyMsg }, timeoutS: number | null): ParsedUrlQuery {
  const q: ParsedUrlQuery = {};
  const c = r.read_consistency;
  if (present(c)) {
    if (c.value === 'factor' || (c.value === undefined && c.factor !== undefined)) q.consistency = String(c.factor ?? '0');
    else if (c.value === 'type' || (c.value === undefined && c.type !== undefined)) q.consistency = enumName(CONSISTENCY, c.type, 'all');
  }
  if (timeoutS !== null) q.timeout = String(timeoutS);
  return q;
}

/** The query parameters of a write (`wait`, `ordering`, `timeout`); `timeoutS` as for readQuery. */
export function writeQuery(r: { wait?: boolean; ordering?: WriteOrderingMsg }, timeoutS: number | null): ParsedUrlQuery {
  const q: ParsedUrlQuery = {};
  if (present(r.wait)) q.wait = r.wait ? 'true' : 'false';
  if (present(r.ordering)) q.ordering = enumName(ORDERING, r.ordering.type, 'weak');
  if (timeoutS !== null) q.timeout = String(timeoutS);
  return q;
}

// -- output -------------------------------------------------------------------------------

export interface PointIdOut {
  num?: number | string;
  uuid?: string;
}

/**
 * A uint64 of an answer for the codec: a number while it is a safe integer (protobufjs
 * then encodes it without parsing a decimal string, a few µs per hit), else its decimal
 * string. Either way the wire carries the same varint.
 */
function uint64Out(x: number | bigint): number | string {
  return typeof x === 'number' && Number.isSafeInteger(x) ? x : String(x);
}

export function pointIdOut(id: number | string | bigint): PointIdOut {
  return typeof id === 'string' ? { uuid: id } : { num: uint64Out(id) };
}

function denseOut(v: ArrayLike<number>): { dense: { data: number[] } } {
  return { dense: { data: Array.from(v) } };
}

/** A vector's output: dense, or a multivector's rows as MultiDenseVector. */
function vectorOut(v: number[] | number[][]): Json {
  if (v.length > 0 && Array.isArray(v[0])) return { multi_dense: { vectors: (v as number[][]).map((row) => ({ data: row })) } };
  return denseOut(v as number[]);
}

/** A record's vectors (an array for the unnamed vector, else by name) to VectorsOutput. */
export function vectorsOut(v: RecordOut['vector']): Json {
  if (Array.isArray(v)) return { vector: vectorOut(v) };
  const named: Json = {};
  for (const [name, x] of Object.entries(v ?? {})) named[name] = Array.isArray(x) ? vectorOut(x as number[] | number[][]) : { sparse: { values: x.values, indices: x.indices } };
  return { vectors: { vectors: named } };
}

/** An order-by value: an integer when it is one (as REST's JSON shows it), else a float. */
function orderValueOut(v: number): Json {
  return Number.isSafeInteger(v) ? { int: String(v) } : { float: v };
}

/** The payload of point `id` in a point message enclosed by `depth` messages (1 in a GetResponse, 2 in a batch's BatchResult). */
function payloadOut(payload: Record<string, unknown>, id: number | string | bigint, depth: number): Json {
  // The map's values sit inside the point message.
  return jsonToMap(payload, { depth: depth + 1, what: `the payload of point ${String(id)}` });
}

/**
 * A record (retrieve, scroll) to a RetrievedPoint enclosed by `depth` messages (1: it is
 * an item of the response); `payload` and `vectors` only when asked for.
 */
export function retrievedPointOut(r: RecordOut & { order_value?: number }, depth: number): Json {
  const out: Json = { id: pointIdOut(r.id) };
  if (r.payload !== undefined) out.payload = payloadOut(r.payload, r.id, depth);
  if (r.vector !== undefined) out.vectors = vectorsOut(r.vector);
  if (r.shard_key !== undefined) out.shard_key = shardKeyOut(r.shard_key);
  if (r.order_value !== undefined) out.order_value = orderValueOut(r.order_value);
  return out;
}

/**
 * A search hit to a ScoredPoint enclosed by `depth` messages (1 in a response, 2 in a
 * batch's BatchResult); a hit of an order_by query carries the value it was ordered by.
 */
export function scoredPointOut(r: ScoredOut & { order_value?: number }, depth: number): Json {
  const out: Json = { id: pointIdOut(r.id), score: r.score, version: uint64Out(r.version) };
  if (r.payload !== undefined) out.payload = payloadOut(r.payload, r.id, depth);
  if (r.vector !== undefined) out.vectors = vectorsOut(r.vector);
  if (r.shard_key !== undefined) out.shard_key = shardKeyOut(r.shard_key);
  if (r.order_value !== undefined) out.order_value = orderValueOut(r.order_value);
  return out;
}

const STATUS: Record<UpdateResult['status'], string> = { acknowledged: 'Acknowledged', completed: 'Completed' };

/** An update's answer to UpdateResult (`operation_id` left out when there is none, as for payload indexes). */
export function updateResultOut(r: { operation_id: number | null; status: UpdateResult['status'] }): Json {
  const out: Json = { status: STATUS[r.status] };
  if (r.operation_id !== null && r.operation_id !== undefined) out.operation_id = String(r.operation_id);
  return out;
}
