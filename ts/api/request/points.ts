/**
 * The points requests of the reference's API in their JSON form (the REST bodies;
 * gRPC messages are translated to this form first), parsed into typed collection
 * calls: writes (upsert, delete, payload and vector operations, batch), reads
 * (retrieve, scroll, count), queries (query, search, recommend), scroll order.
 *
 * Owns: validation of every field, so a bad request is refused before anything is
 * written and the same input gets the same answer through every API. Must never: know
 * a transport, hold state or touch disk.
 */

import type { UpdateMode, WriteCondition } from '../../collection/replica-operation';
import type { ForKeys, OrderBy, ReplicaOperation, ScrollRequest, SearchRequest, Selector, WithVector } from '../../collection/collection';
import type { OrderedScrollRequest } from '../../collection/replica';
import type { Filter } from '../../shard/filter';
import type { ContextPair, Discover, Example, Fusion, LookupFrom, Prefetch, QueryKind, QueryRequest, Recommend } from '../../collection/query';
import { DEFAULT_RRF_K, MAX_PREFETCH_COUNT, MAX_PREFETCH_DEPTH } from '../../collection/hybrid';
import type { PointKey } from '../../shard/id-tracker';
import type { NamedVectors, PointWrite, SparseVec, SparseVectors } from '../../shard/operations';
import { looksSparse, pointSparse, sparseVector } from './sparse';
import { formulaQuery, mmrOf, sampleOf } from './formula';
import type { Payload, WithPayload } from '../../shard/payload-store';
import { BadInputError, BadRequestError, FormatError, ValidationError } from '../../common/errors';
import { MAX_ENGINE_COUNT } from '../../shard/limits';
import {
  denseVector,
  engineCount,
  filter,
  isObj,
  keyPath,
  payload,
  pointId,
  pointIds,
  pointVectors,
  refuse,
  refuseInference,
  shardKeySelector,
  uint,
  withPayload,
  withVector,
  type Obj,
} from './parse';

// -- write bodies ---------------------------------------------------------------------------

const UPDATE_MODES: readonly UpdateMode[] = ['upsert', 'insert_only', 'update_only'];

/** `update_filter` and `update_mode` of an upsert or vector update; none when neither changes anything. */
function writeCondition(b: Obj, modes: boolean): WriteCondition | undefined {
  let mode: UpdateMode = 'upsert';
  if (modes && b.update_mode !== undefined && b.update_mode !== null) {
    if (!UPDATE_MODES.includes(b.update_mode as UpdateMode)) {
      throw new FormatError(`update_mode: unknown variant ${JSON.stringify(b.update_mode)}, expected one of ${UPDATE_MODES.map((m) => `\`${m}\``).join(', ')}`);
    }
    mode = b.update_mode as UpdateMode;
  }
  const f = b.update_filter === undefined || b.update_filter === null ? null : filter(b.update_filter, 'update_filter');
  if (f === null && mode === 'upsert') return undefined;
  return { filter: f, mode };
}

/** An upsert body (`PointInsertOperations`) as the operation, with its write condition. */
export function upsertOp(b: Obj): ReplicaOperation {
  const points = upsertPoints(b);
  const condition = writeCondition(b, true);
  return condition === undefined ? { kind: 'upsert', points } : { kind: 'upsert', points, condition };
}

/** An `UpdateVectors` body as the operation, with its `update_filter`. */
export function updateVectorsOp(b: Obj): ReplicaOperation {
  const points = updateVectorPoints(b);
  const condition = writeCondition(b, false);
  return condition === undefined ? { kind: 'update_vectors', points } : { kind: 'update_vectors', points, condition };
}

/** The points of an upsert body (its `update_filter` and `update_mode`: upsertOp). */
export function upsertPoints(b: Obj): PointWrite[] {
  if (b.update_mode !== undefined && b.update_mode !== null && !UPDATE_MODES.includes(b.update_mode as UpdateMode)) {
    throw new FormatError(`update_mode: unknown variant ${JSON.stringify(b.update_mode)}, expected one of ${UPDATE_MODES.map((m) => `\`${m}\``).join(', ')}`);
  }
  if (Array.isArray(b.points)) {
    return b.points.map((p: unknown, i: number) => {
      const where = `points[${i}]`;
      if (!isObj(p)) throw new FormatError(`${where}: expected an object`);
      if (p.id === undefined) throw new FormatError(`${where}: missing field \`id\``);
      if (p.vector === undefined) throw new FormatError(`${where}: missing field \`vector\``);
      return {
        id: pointId(p.id, `${where}.id`),
        vectors: pointVectors(p.vector, `${where}.vector`),
        payload: p.payload === undefined || p.payload === null ? null : payload(p.payload, `${where}.payload`),
        ...withSparse(pointSparse(p.vector, `${where}.vector`)),
      };
    });
  }
  if (isObj(b.batch)) {
    const batch = b.batch;
    const ids = pointIds(batch.ids, 'batch.ids');
    const n = ids.length;
    const vectors: NamedVectors[] = ids.map(() => new Map());
    const sparse: Array<SparseVectors | undefined> = ids.map(() => undefined);
    const rows = (x: unknown, name: string, field: string) => {
      if (!Array.isArray(x)) throw new FormatError(`${field}: expected an array of vectors`);
      if (x.length !== n) throw new BadInputError(`${field} has ${x.length} vectors for ${n} ids`);
      x.forEach((v, i) => {
        if (name !== '' && looksSparse(v)) (sparse[i] ??= new Map()).set(name, sparseVector(v, `${field}[${i}]`));
        else vectors[i].set(name, denseVector(v, `${field}[${i}]`));
      });
    };
    if (Array.isArray(batch.vectors)) rows(batch.vectors, '', 'batch.vectors');
    else if (isObj(batch.vectors)) for (const [name, x] of Object.entries(batch.vectors)) rows(x, name, `batch.vectors.${name}`);
    else throw new FormatError('batch: missing field `vectors`');
    let payloads: Array<Payload | null> = ids.map(() => null);
    if (batch.payloads !== undefined && batch.payloads !== null) {
      if (!Array.isArray(batch.payloads)) throw new FormatError('batch.payloads: expected an array');
      if (batch.payloads.length !== n) throw new BadInputError(`batch.payloads has ${batch.payloads.length} payloads for ${n} ids`);
      payloads = batch.payloads.map((p: unknown, i: number) => (p === null ? null : payload(p, `batch.payloads[${i}]`)));
    }
    return ids.map((id, i) => ({ id, vectors: vectors[i], payload: payloads[i], ...withSparse(sparse[i]) }));
  }
  throw new FormatError('expected `points` or `batch`');
}

/** `{points: [...]}` and/or `{filter: {...}}`; `required` says one of them must be there. */
export function selector(b: Obj): Selector {
  const ids = b.points === undefined || b.points === null ? null : pointIds(b.points, 'points');
  const f = filter(b.filter);
  if (ids === null && f === null) throw new FormatError('expected `points` or `filter`');
  return { ids, filter: f };
}

function vectorNames(x: unknown, field: string): string[] {
  if (!Array.isArray(x) || !x.every((n) => typeof n === 'string')) throw new FormatError(`${field}: expected an array of vector names`);
  return x as string[];
}

/** `{sparse}` when a point has sparse vectors, else nothing (the field stays absent). */
function withSparse(sparse: SparseVectors | undefined): { sparse?: SparseVectors } {
  return sparse === undefined ? {} : { sparse };
}

export function updateVectorPoints(b: Obj): Array<{ id: PointKey; vectors: NamedVectors; sparse?: SparseVectors }> {
  if (!Array.isArray(b.points)) throw new FormatError('missing field `points`');
  return b.points.map((p: unknown, i: number) => {
    if (!isObj(p)) throw new FormatError(`points[${i}]: expected an object`);
    return { id: pointId(p.id, `points[${i}].id`), vectors: pointVectors(p.vector, `points[${i}].vector`), ...withSparse(pointSparse(p.vector, `points[${i}].vector`)) };
  });
}


function keyOf(b: Obj): string | null {
  if (b.key === undefined || b.key === null) return null;
  return keyPath(b.key, 'key');
}

export function setPayloadOp(b: Obj, overwrite: boolean): ReplicaOperation {
  if (b.payload === undefined) throw new FormatError('missing field `payload`');
  const p = payload(b.payload, 'payload');
  const sel = selector(b);
  const key = keyOf(b);
  if (overwrite) {
    if (key !== null) throw new BadInputError('overwrite payload does not take a `key`; use set payload to write under a key');
    return { kind: 'overwrite_payload', select: sel, payload: p };
  }
  return { kind: 'set_payload', select: sel, payload: p, key };
}

export function deletePayloadOp(b: Obj): ReplicaOperation {
  if (!Array.isArray(b.keys)) throw new FormatError('keys: expected an array of strings');
  const keys = b.keys.map((k: unknown, i: number) => keyPath(k, `keys[${i}]`));
  return { kind: 'delete_payload', select: selector(b), keys };
}

export function deleteVectorsOp(b: Obj): ReplicaOperation {
  const names = vectorNames(b.vector, 'vector');
  return { kind: 'delete_vectors', select: selector(b), names };
}

/** One operation of `POST /points/batch`, parsed, with the shard keys it names. */
export function batchOp(o: unknown, i: number): ForKeys<ReplicaOperation> {
  const where = `operations[${i}]`;
  if (!isObj(o) || Object.keys(o).length !== 1) throw new FormatError(`${where}: expected an object with one operation`);
  const [kind, arg] = Object.entries(o)[0];
  if (!isObj(arg)) throw new FormatError(`${where}.${kind}: expected an object`);
  return { req: batchOpOf(kind, arg, where), shards: shardKeySelector(arg.shard_key, `${where}.${kind}.shard_key`) };
}

function batchOpOf(kind: string, arg: Obj, where: string): ReplicaOperation {
  switch (kind) {
    case 'upsert':
      return upsertOp(arg);
    case 'delete':
      return { kind: 'delete', select: selector(arg) };
    case 'set_payload':
      return setPayloadOp(arg, false);
    case 'overwrite_payload':
      return setPayloadOp(arg, true);
    case 'delete_payload':
      return deletePayloadOp(arg);
    case 'clear_payload':
      return { kind: 'clear_payload', select: selector(arg) };
    case 'update_vectors':
      return updateVectorsOp(arg);
    case 'delete_vectors':
      return deleteVectorsOp(arg);
    default:
      throw new FormatError(
        `${where}: unknown variant \`${kind}\`, expected one of \`upsert\`, \`delete\`, \`set_payload\`, \`overwrite_payload\`, \`delete_payload\`, \`clear_payload\`, \`update_vectors\`, \`delete_vectors\``,
      );
  }
}

// -- search bodies ---------------------------------------------------------------------------

/** What every similarity request shares: everything of a SearchRequest but the vector and exclusions. */
type Common = Omit<SearchRequest, 'using' | 'vector' | 'exclude'>;

function searchParams(x: unknown): Pick<Common, 'hnswEf' | 'exact' | 'quantization'> {
  if (x === undefined || x === null) return {};
  if (!isObj(x)) throw new FormatError('params: expected an object');
  const out: Pick<Common, 'hnswEf' | 'exact' | 'quantization'> = {};
  if (x.hnsw_ef !== undefined && x.hnsw_ef !== null) out.hnswEf = engineCount(x.hnsw_ef, 'params.hnsw_ef', 0, 1);
  if (x.exact !== undefined && x.exact !== null) {
    if (typeof x.exact !== 'boolean') throw new FormatError('params.exact: expected a boolean');
    out.exact = x.exact;
  }
  if (x.quantization !== undefined && x.quantization !== null) {
    const q = x.quantization;
    if (!isObj(q)) throw new FormatError('params.quantization: expected an object');
    const qo: NonNullable<SearchRequest['quantization']> = {};
    for (const key of ['ignore', 'rescore'] as const) {
      const v = q[key];
      if (v === undefined || v === null) continue;
      if (typeof v !== 'boolean') throw new FormatError(`params.quantization.${key}: expected a boolean`);
      qo[key] = v;
    }
    if (q.oversampling !== undefined && q.oversampling !== null) {
      if (typeof q.oversampling !== 'number' || !(q.oversampling >= 1)) throw new ValidationError('params.quantization.oversampling: must be 1 or larger');
      // A multiplier of k: the engine keeps k × oversampling candidates, a 32-bit count (and takes the factor as a 32-bit float).
      if (q.oversampling > MAX_ENGINE_COUNT) throw new ValidationError(`params.quantization.oversampling: value ${q.oversampling} invalid, must be ${MAX_ENGINE_COUNT} or smaller`);
      qo.oversampling = q.oversampling;
    }
    out.quantization = qo;
  }
  // Served only as their defaults (off): a value that would change the search is refused.
  if (x.indexed_only !== undefined && x.indexed_only !== null) {
    if (typeof x.indexed_only !== 'boolean') throw new FormatError('params.indexed_only: expected a boolean');
    if (x.indexed_only) throw new BadInputError('params.indexed_only: searching only indexed segments is not supported by Quiver (every search covers all points)');
  }
  if (x.acorn !== undefined && x.acorn !== null) {
    const a = x.acorn;
    if (!isObj(a)) throw new FormatError('params.acorn: expected an object');
    if (a.max_selectivity !== undefined && a.max_selectivity !== null) {
      if (typeof a.max_selectivity !== 'number') throw new FormatError('params.acorn.max_selectivity: expected a number');
      if (!(a.max_selectivity >= 0 && a.max_selectivity <= 1)) throw new ValidationError(`params.acorn.max_selectivity: value ${a.max_selectivity} invalid, must be from 0 to 1`);
    }
    if (a.enable !== undefined && a.enable !== null) {
      if (typeof a.enable !== 'boolean') throw new FormatError('params.acorn.enable: expected a boolean');
      if (a.enable) throw new BadInputError('params.acorn.enable: ACORN search is not supported by Quiver');
    }
  }
  return out;
}

/** A query of `kind` over `using`, with the fields every similarity request shares read from `b`. */
function queryRequest(b: Obj, defaultLimit: number | null, using: string, kind: QueryKind): QueryRequest {
  let limit: number;
  if (b.limit === undefined || b.limit === null) {
    if (defaultLimit === null) throw new FormatError('missing field `limit`');
    limit = defaultLimit;
  } else limit = engineCount(b.limit, 'limit', 0, 1);
  let scoreThreshold: number | null = null;
  if (b.score_threshold !== undefined && b.score_threshold !== null) {
    if (typeof b.score_threshold !== 'number') throw new FormatError('score_threshold: expected a number');
    scoreThreshold = b.score_threshold;
  }
  const params = searchParams(b.params);
  // Every field set in one order (absent ones undefined), never spread: see parseQuery.
  return {
    using,
    query: kind,
    filter: filter(b.filter),
    limit,
    offset: engineCount(b.offset, 'offset', 0),
    scoreThreshold,
    hnswEf: params.hnswEf,
    exact: params.exact,
    quantization: params.quantization,
    withPayload: withPayload(b.with_payload, false),
    withVector: withVector(b.with_vector, false),
  };
}

function example(x: unknown, field: string): Example {
  // A Float32Array: a vector the REST body reader read as float32 (ts/api/rest/json-numbers.ts).
  if (Array.isArray(x) || x instanceof Float32Array) return { vector: denseVector(x, field) };
  if (typeof x === 'number' || typeof x === 'string') return { id: pointId(x, field) };
  if (looksSparse(x)) return { sparse: sparseVector(x, field) };
  refuseInference(x, field);
  throw new FormatError(`${field}: expected a vector (array of numbers) or a point id`);
}

function examples(x: unknown, field: string): Example[] {
  if (x === undefined || x === null) return [];
  if (!Array.isArray(x)) throw new FormatError(`${field}: expected an array`);
  return x.map((e, i) => example(e, `${field}[${i}]`));
}

function recommendInput(o: Obj, field: string): Recommend {
  const strategy = o.strategy ?? 'average_vector';
  if (strategy !== 'average_vector' && strategy !== 'best_score' && strategy !== 'sum_scores') {
    throw new FormatError(`${field}strategy: unknown variant ${JSON.stringify(strategy)}, expected one of \`average_vector\`, \`best_score\`, \`sum_scores\``);
  }
  const rec: Recommend = { positive: examples(o.positive, `${field}positive`), negative: examples(o.negative, `${field}negative`) };
  if (strategy === 'average_vector') {
    if (rec.positive.length === 0) throw new BadInputError('At least one positive vector ID required');
    return rec;
  }
  // best_score and sum_scores score every example: negatives alone are enough.
  if (rec.positive.length === 0 && rec.negative.length === 0) throw new BadRequestError('At least one positive or negative vector ID required with this strategy');
  return { ...rec, strategy };
}

/** A context pair `{positive, negative}`. */
function contextPair(x: unknown, field: string): ContextPair {
  if (!isObj(x)) throw new FormatError(`${field}: expected an object with \`positive\` and \`negative\``);
  if (x.positive === undefined || x.positive === null) throw new FormatError(`${field}: missing field \`positive\``);
  if (x.negative === undefined || x.negative === null) throw new FormatError(`${field}: missing field \`negative\``);
  return { positive: example(x.positive, `${field}.positive`), negative: example(x.negative, `${field}.negative`) };
}

/** The Query API's `ContextInput`: one pair, a list of pairs, or null (no pairs). */
function contextInput(x: unknown, field: string): ContextPair[] {
  if (x === undefined || x === null) return [];
  if (Array.isArray(x)) return x.map((p, i) => contextPair(p, `${field}[${i}]`));
  return [contextPair(x, field)];
}

/** The Query API's `DiscoverInput`: `{target, context}`. */
function discoverInput(x: unknown, field: string): Discover {
  if (!isObj(x)) throw new FormatError(`${field}: expected an object`);
  if (x.target === undefined || x.target === null) throw new FormatError(`${field}: missing field \`target\``);
  if (!('context' in x)) throw new FormatError(`${field}: missing field \`context\``);
  return { target: example(x.target, `${field}.target`), context: contextInput(x.context, `${field}.context`) };
}

function queryKind(x: unknown): QueryKind {
  if (x === undefined || x === null) return { none: true };
  if (Array.isArray(x) || x instanceof Float32Array || typeof x === 'number' || typeof x === 'string') return { nearest: example(x, 'query') };
  if (isObj(x)) {
    if ('nearest' in x) {
      if (x.mmr !== undefined && x.mmr !== null) return { nearest: example(x.nearest, 'query.nearest'), mmr: mmrOf(x.mmr) };
      return { nearest: example(x.nearest, 'query.nearest') };
    }
    if ('recommend' in x) {
      if (!isObj(x.recommend)) throw new FormatError('query.recommend: expected an object');
      return { recommend: recommendInput(x.recommend, 'query.recommend.') };
    }
    if ('discover' in x) return { discover: discoverInput(x.discover, 'query.discover') };
    if ('context' in x) return { context: contextInput(x.context, 'query.context') };
    if ('order_by' in x) return { orderBy: orderBy(x.order_by, 'query.order_by') };
    if ('fusion' in x) return { fusion: fusionOf(x.fusion) };
    if ('rrf' in x) return { fusion: rrfOf(x.rrf) };
    if ('indices' in x) return { nearest: { sparse: sparseVector(x, 'query') } };
    if ('formula' in x) return { formula: formulaQuery(x) };
    if ('sample' in x) return { sample: sampleOf(x.sample) };
    const kind = Object.keys(x)[0];
    throw new FormatError(`query: \`${kind}\` queries are not supported by Quiver; use a vector, a point id, \`nearest\`, \`recommend\`, \`discover\` or \`context\``);
  }
  throw new FormatError('query: expected a vector, a point id or a query object');
}

function usingOf(b: Obj): string {
  return b.using === undefined || b.using === null ? '' : String(b.using);
}

/** A body of the query API: a query over the collection, or over the results of its prefetches. */
export function parseQuery(b: Obj): QueryRequest {
  checkPrefetchShape(b);
  const using = usingOf(b);
  const req = queryRequest(b, 10, using, queryKind(b.query));
  const prefetch = prefetchList(b.prefetch, 'prefetch');
  checkQueryShape(req.query, using, prefetch, req.scoreThreshold);
  // Not `{ ...req, prefetch, lookupFrom }`: V8 gives an object spread and then extended a
  // map of its own each time, so every later read of the request's fields (collection,
  // replica, shard) missed the inline caches.
  req.prefetch = prefetch;
  req.lookupFrom = lookupFrom(b.lookup_from);
  return req;
}

function fusionOf(x: unknown): Fusion {
  if (x === 'rrf') return { method: 'rrf', k: DEFAULT_RRF_K, weights: null };
  if (x === 'dbsf') return { method: 'dbsf' };
  throw new FormatError(`query.fusion: unknown variant ${JSON.stringify(x)}, expected \`rrf\` or \`dbsf\``);
}

function rrfOf(x: unknown): Fusion {
  if (!isObj(x)) throw new FormatError('query.rrf: expected an object');
  const k = uint(x.k, 'query.rrf.k', DEFAULT_RRF_K, 1);
  let weights: number[] | null = null;
  if (x.weights !== undefined && x.weights !== null) {
    if (!Array.isArray(x.weights)) throw new FormatError('query.rrf.weights: expected an array of numbers');
    weights = x.weights.map((w, i) => {
      if (typeof w !== 'number' || !Number.isFinite(w)) throw new FormatError(`query.rrf.weights[${i}]: expected a number, got ${JSON.stringify(w)}`);
      return w;
    });
  }
  return { method: 'rrf', k, weights };
}

/** `lookup_from`: `{collection, vector?, shard_key?}`. */
function lookupFrom(x: unknown, field = 'lookup_from'): LookupFrom | null {
  if (x === undefined || x === null) return null;
  if (!isObj(x)) throw new FormatError(`${field}: expected an object`);
  if (typeof x.collection !== 'string') throw new FormatError(`${field}: missing field \`collection\``);
  if (x.vector !== undefined && x.vector !== null && typeof x.vector !== 'string') throw new FormatError(`${field}.vector: expected a string`);
  return { collection: x.collection, vector: typeof x.vector === 'string' ? x.vector : null, shards: shardKeySelector(x.shard_key, `${field}.shard_key`) };
}

/**
 * The depth and number of a body's prefetches, counted without recursion before any of
 * them is parsed: deeper than the reference plans, or more than Quiver takes, is refused.
 */
function checkPrefetchShape(b: Obj): void {
  let depth = 0;
  let count = 0;
  const stack: Array<[unknown, number]> = [[b.prefetch, 1]];
  while (stack.length > 0) {
    const [x, d] = stack.pop()!;
    if (x === undefined || x === null) continue;
    const list = Array.isArray(x) ? x : [x];
    if (list.length === 0) continue;
    depth = Math.max(depth, d);
    count += list.length;
    if (count > MAX_PREFETCH_COUNT) throw new BadInputError(`a query holds more than ${MAX_PREFETCH_COUNT} prefetches (at every depth), more than Quiver allows`);
    for (const p of list) if (isObj(p)) stack.push([p.prefetch, d + 1]);
  }
  if (depth > MAX_PREFETCH_DEPTH) throw new BadInputError(`prefetches depth ${depth} exceeds max depth ${MAX_PREFETCH_DEPTH}`);
}

/** `prefetch`: one object or a list of them. */
function prefetchList(x: unknown, field: string): Prefetch[] {
  if (x === undefined || x === null) return [];
  if (Array.isArray(x)) return x.map((p, i) => prefetchOf(p, `${field}[${i}]`));
  return [prefetchOf(x, field)];
}

function prefetchOf(x: unknown, field: string): Prefetch {
  if (!isObj(x)) throw new FormatError(`${field}: expected an object`);
  const using = usingOf(x);
  const prefetch = prefetchList(x.prefetch, `${field}.prefetch`);
  const req = queryRequest(x, 10, using, queryKind(x.query));
  checkQueryShape(req.query, using, prefetch, req.scoreThreshold);
  return {
    prefetch,
    query: req.query,
    using,
    filter: req.filter,
    limit: req.limit,
    scoreThreshold: req.scoreThreshold,
    hnswEf: req.hnswEf,
    exact: req.exact,
    quantization: req.quantization,
    lookupFrom: lookupFrom(x.lookup_from, `${field}.lookup_from`),
  };
}

/** The reference's rules for a query and its prefetches, at every level. */
function checkQueryShape(query: QueryKind, using: string, prefetch: Prefetch[], scoreThreshold: number | null): void {
  if (prefetch.length > 0 && 'none' in query) throw new BadRequestError("A query is needed to merge the prefetches. Can't have prefetches without defining a query.");
  if (scoreThreshold !== null) {
    if ('orderBy' in query) throw new BadRequestError("Can't use score_threshold with an order_by query.");
    if ('none' in query) throw new BadRequestError("A query is needed to use the score_threshold. Can't have score_threshold without defining a query.");
  }
  if ('fusion' in query) {
    if (using !== '') throw new BadRequestError("Fusion queries cannot be combined with the 'using' field.");
    if (prefetch.length === 0) throw new BadInputError('cannot apply Fusion without prefetches');
    const w = query.fusion.method === 'rrf' ? query.fusion.weights : null;
    if (w !== null && w.length !== prefetch.length) throw new BadInputError(`Number of weights in RRF should match number of pre-fetches: got ${w.length}, expected ${prefetch.length}`);
  }
  if ('formula' in query && prefetch.length === 0) throw new BadRequestError('A formula query rescores the results of prefetches: it needs at least one prefetch.');
}

/** `vector` of the legacy search: an array, or `{name, vector}`. */
function legacyVector(x: unknown): { using: string; vector: Float32Array } | { using: string; sparse: SparseVec } {
  if (Array.isArray(x) || x instanceof Float32Array) return { using: '', vector: denseVector(x, 'vector') };
  if (isObj(x)) {
    if ('indices' in x) throw new FormatError('vector: a sparse query names its vector: {"name": ..., "vector": {"indices": [...], "values": [...]}}');
    if (looksSparse(x.vector)) {
      if (typeof x.name !== 'string') throw new FormatError('vector: missing field `name`');
      return { using: x.name, sparse: sparseVector(x.vector, 'vector.vector') };
    }
    if (typeof x.name === 'string' && (Array.isArray(x.vector) || x.vector instanceof Float32Array)) return { using: x.name, vector: denseVector(x.vector, 'vector.vector') };
  }
  throw new FormatError('missing field `vector` (an array of numbers, or {"name": ..., "vector": [...]})');
}

/** A body of the legacy search API: a query nearest to its vector. */
export function parseSearch(b: Obj): QueryRequest {
  if (b.vector === undefined) throw new FormatError('missing field `vector`');
  const v = legacyVector(b.vector);
  return queryRequest(b, null, v.using, { nearest: 'sparse' in v ? { sparse: v.sparse } : { vector: v.vector } });
}

/** A body of the legacy recommend API. */
export function parseRecommend(b: Obj): QueryRequest {
  const using = usingOf(b);
  const rec = recommendInput(b, '');
  const req = queryRequest(b, null, using, { recommend: rec });
  req.lookupFrom = lookupFrom(b.lookup_from);
  return req;
}

/**
 * A body of the legacy discover API (`DiscoverRequest`): a target with context pairs is
 * discovery, pairs alone a context search; one of them is needed. It has no
 * `score_threshold` (the reference's has none).
 */
export function parseDiscover(b: Obj): QueryRequest {
  const using = usingOf(b);
  const target = b.target === undefined || b.target === null ? null : example(b.target, 'target');
  let context: ContextPair[] = [];
  if (b.context !== undefined && b.context !== null) {
    if (!Array.isArray(b.context)) throw new FormatError('context: expected an array of {positive, negative} pairs');
    context = b.context.map((p, i) => contextPair(p, `context[${i}]`));
  }
  if (target === null && context.length === 0) throw new BadRequestError('target and/or context_pairs must be specified');
  const kind: QueryKind = target === null ? { context } : { discover: { target, context } };
  const { score_threshold: _ignored, ...rest } = b;
  const req = queryRequest(rest, null, using, kind);
  req.lookupFrom = lookupFrom(b.lookup_from);
  return req;
}

/** A body of a similarity API parsed by `parse`, with the shard keys it names. */
export function keyed<T>(parse: (b: Obj) => T): (b: Obj) => ForKeys<T> {
  return (b) => ({ req: parse(b), shards: shardKeySelector(b.shard_key) });
}

export function batchOf(b: Obj, key: string): Obj[] {
  const list = b[key];
  if (!Array.isArray(list)) throw new FormatError(`missing field \`${key}\``);
  return list.map((x, i) => {
    if (!isObj(x)) throw new FormatError(`${key}[${i}]: expected an object`);
    return x;
  });
}

export function orderBy(x: unknown, field: string): OrderBy {
  if (typeof x === 'string') return { key: x, direction: 'asc', start_from: null };
  if (!isObj(x) || typeof x.key !== 'string') throw new FormatError(`${field}: expected a key or {"key": ..., "direction": ..., "start_from": ...}`);
  const direction = x.direction ?? 'asc';
  if (direction !== 'asc' && direction !== 'desc') throw new FormatError(`${field}.direction: unknown variant ${JSON.stringify(direction)}, expected \`asc\` or \`desc\``);
  const sf = x.start_from ?? null;
  if (sf !== null && typeof sf !== 'number' && typeof sf !== 'string') throw new FormatError(`${field}.start_from: expected a number or an RFC 3339 datetime`);
  return { key: x.key, direction, start_from: sf };
}

// -- read bodies -----------------------------------------------------------------------------

/** A body of `POST /points` (retrieve by ids). */
export function parseRetrieve(b: Obj): ForKeys<{ ids: PointKey[]; withPayload: WithPayload; withVector: WithVector }> {
  if (b.ids === undefined) throw new FormatError('missing field `ids`');
  const ids = pointIds(b.ids, 'ids');
  return { req: { ids, withPayload: withPayload(b.with_payload, true), withVector: withVector(b.with_vector, false) }, shards: shardKeySelector(b.shard_key) };
}

/** A body of `POST /points/scroll`: in id order from `offset`, or by a payload value (`order_by`). */
export function parseScroll(b: Obj): ForKeys<{ ordered: OrderedScrollRequest } | { plain: ScrollRequest }> {
  const shards = shardKeySelector(b.shard_key);
  if (b.order_by !== undefined && b.order_by !== null) {
    return {
      req: {
        ordered: {
          orderBy: orderBy(b.order_by, 'order_by'),
          limit: uint(b.limit, 'limit', 10, 1),
          filter: filter(b.filter),
          withPayload: withPayload(b.with_payload, true),
          withVector: withVector(b.with_vector, false),
        },
      },
      shards,
    };
  }
  return {
    req: {
      plain: {
        offset: b.offset === undefined || b.offset === null ? null : pointId(b.offset, 'offset'),
        limit: uint(b.limit, 'limit', 10, 1),
        filter: filter(b.filter),
        withPayload: withPayload(b.with_payload, true),
        withVector: withVector(b.with_vector, false),
      },
    },
    shards,
  };
}

/** A body of `POST /points/count` (absent: `{}`). */
export function parseCount(b: Obj): ForKeys<{ filter: Filter | null; exact: boolean }> {
  if (b.exact !== undefined && b.exact !== null && typeof b.exact !== 'boolean') throw new FormatError('exact: expected a boolean');
  // Counts are always exact here; `exact` (default true, as the reference's) matters to strict mode's search_allow_exact.
  return { req: { filter: filter(b.filter), exact: b.exact !== false }, shards: shardKeySelector(b.shard_key) };
}
