/**
 * The similarity requests of `qdrant.Points` (Query, Search, Recommend and their batch
 * items; points.proto) to the JSON bodies of the same REST requests, which
 * `parseQuery`, `parseSearch` and `parseRecommend` of ts/api/request/points.ts parse
 * for both APIs.
 *
 * Owns: those translations, including the kinds of query Quiver does not serve (they are
 * carried over under their REST names, so the parser refuses them with the REST error).
 * Must never: decide what a query means or whether it is valid.
 */

import { formulaToJson, type FormulaMsg } from './formula';
import { FormatError } from '../../../common/errors';
import { filterToJson, pointIdToJson, timestampToRfc3339, type FilterMsg, type PointIdMsg, type TimestampMsg } from './filter';
import { int64, snakeEnum } from './common';
import { mapToJson, valueToJson } from './value';
import {
  put,
  shardKeySelectorToJson,
  vectorToJson,
  withPayloadToJson,
  withVectorsToJson,
  type ReadConsistencyMsg,
  type ShardKeySelectorMsg,
  type VectorFormsMsg,
  type VectorMsg,
  type WithPayloadMsg,
  type WithVectorsMsg,
} from './points';

type Long = string | number;
type Json = Record<string, unknown>;

export interface SearchParamsMsg {
  hnsw_ef?: Long;
  exact?: boolean;
  quantization?: { ignore?: boolean; rescore?: boolean; oversampling?: number };
  indexed_only?: boolean;
  acorn?: { enable?: boolean; max_selectivity?: number };
}

interface LookupLocationMsg {
  collection_name?: string;
  vector_name?: string;
  shard_key_selector?: ShardKeySelectorMsg;
}

interface VectorInputMsg extends VectorFormsMsg {
  variant?: string;
  id?: PointIdMsg;
}

interface StartFromMsg {
  value?: string;
  float?: number;
  integer?: Long;
  timestamp?: TimestampMsg;
  datetime?: string;
}

export interface OrderByMsg {
  key?: string;
  direction?: string | number;
  start_from?: StartFromMsg;
}

interface QueryMsg {
  variant?: string;
  nearest?: VectorInputMsg;
  recommend?: { positive?: VectorInputMsg[]; negative?: VectorInputMsg[]; strategy?: string | number };
  discover?: { target?: VectorInputMsg; context?: ContextInputMsg };
  context?: ContextInputMsg;
  order_by?: OrderByMsg;
  fusion?: string | number;
  sample?: string | number;
  nearest_with_mmr?: { nearest?: VectorInputMsg; mmr?: { diversity?: number; candidates_limit?: number } };
  rrf?: { k?: number; weights?: number[] };
  formula?: FormulaMsg;
  [other: string]: unknown;
}

/** ContextInput: pairs of VectorInputs. */
interface ContextInputMsg {
  pairs?: Array<{ positive?: VectorInputMsg; negative?: VectorInputMsg }>;
}

/** VectorExample (DiscoverPoints): a point id or a vector. */
interface VectorExampleMsg {
  example?: string;
  id?: PointIdMsg;
  vector?: VectorMsg;
}

export interface DiscoverPointsMsg extends Similar {
  target?: { target?: string; single?: VectorExampleMsg };
  context?: Array<{ positive?: VectorExampleMsg; negative?: VectorExampleMsg }>;
  using?: string;
  lookup_from?: LookupLocationMsg;
}

/** What every similarity request of the contract carries. */
interface Similar {
  collection_name?: string;
  filter?: FilterMsg;
  params?: SearchParamsMsg;
  score_threshold?: number;
  limit?: Long;
  offset?: Long;
  with_payload?: WithPayloadMsg;
  with_vectors?: WithVectorsMsg;
  read_consistency?: ReadConsistencyMsg;
  shard_key_selector?: ShardKeySelectorMsg;
  timeout?: Long;
}

/** PrefetchQuery: a prefetch of a hybrid query, nested to any depth. */
export interface PrefetchQueryMsg {
  prefetch?: PrefetchQueryMsg[];
  query?: QueryMsg;
  using?: string;
  filter?: FilterMsg;
  params?: SearchParamsMsg;
  score_threshold?: number;
  limit?: Long;
  lookup_from?: LookupLocationMsg;
}

export interface QueryPointsMsg extends Similar {
  prefetch?: PrefetchQueryMsg[];
  query?: QueryMsg;
  using?: string;
  lookup_from?: LookupLocationMsg;
}

export interface SearchPointsMsg extends Similar {
  vector?: number[];
  vector_name?: string;
  sparse_indices?: { data?: number[] };
}

export interface RecommendPointsMsg extends Similar {
  positive?: PointIdMsg[];
  negative?: PointIdMsg[];
  positive_vectors?: VectorMsg[];
  negative_vectors?: VectorMsg[];
  strategy?: string | number;
  using?: string;
  lookup_from?: LookupLocationMsg;
}

function present<T>(x: T | undefined | null): x is T {
  return x !== undefined && x !== null;
}

/** A name of the contract's enum in its REST spelling (`BestScore` → `best_score`); a number this contract does not name stays one. */
export function searchParamsToJson(p: SearchParamsMsg | undefined): Json | undefined {
  if (!present(p)) return undefined;
  const out: Json = {};
  if (present(p.hnsw_ef)) out.hnsw_ef = int64(p.hnsw_ef);
  put(out, 'exact', p.exact ?? undefined);
  if (present(p.quantization)) {
    const q: Json = {};
    put(q, 'ignore', p.quantization.ignore ?? undefined);
    put(q, 'rescore', p.quantization.rescore ?? undefined);
    put(q, 'oversampling', p.quantization.oversampling ?? undefined);
    out.quantization = q;
  }
  put(out, 'indexed_only', p.indexed_only ?? undefined);
  if (present(p.acorn)) {
    const a: Json = {};
    put(a, 'enable', p.acorn.enable ?? undefined);
    put(a, 'max_selectivity', p.acorn.max_selectivity ?? undefined);
    out.acorn = a;
  }
  return out;
}

function lookupToJson(l: LookupLocationMsg | undefined): Json | undefined {
  if (!present(l)) return undefined;
  const out: Json = { collection: l.collection_name ?? '' };
  put(out, 'vector', l.vector_name ?? undefined);
  put(out, 'shard_key', shardKeySelectorToJson(l.shard_key_selector, 'lookup_from.shard_key_selector'));
  return out;
}

/** A VectorInput (an id, or a vector of some kind) to the JSON the query API takes. */
function vectorInputToJson(v: VectorInputMsg | undefined, field: string): unknown {
  if (!present(v)) return undefined;
  switch (v.variant) {
    case 'id':
      return pointIdToJson(v.id);
    case 'dense':
      return v.dense?.data ?? [];
    case 'sparse':
      return { indices: v.sparse?.indices ?? [], values: v.sparse?.values ?? [] };
    case 'multi_dense':
      return (v.multi_dense?.vectors ?? []).map((d) => d.data ?? []);
    case 'document':
      return { text: v.document?.text ?? '', model: v.document?.model ?? '', options: mapToJson(v.document?.options, `${field}.options`) };
    case 'image':
      return { image: valueToJson(v.image?.image, `${field}.image`), model: v.image?.model ?? '', options: mapToJson(v.image?.options, `${field}.options`) };
    case 'object':
      return { object: valueToJson(v.object?.object, `${field}.object`), model: v.object?.model ?? '', options: mapToJson(v.object?.options, `${field}.options`) };
    default:
      throw new FormatError(`${field}: a VectorInput with none of its variants set`);
  }
}

function startFromToJson(s: StartFromMsg | undefined, field: string): unknown {
  if (!present(s)) return undefined;
  switch (s.value) {
    case 'float':
      return s.float ?? 0;
    case 'integer':
      return int64(s.integer);
    case 'timestamp':
      return timestampToRfc3339(s.timestamp ?? {}, `${field}.timestamp`);
    case 'datetime':
      return s.datetime ?? '';
    default:
      return undefined;
  }
}

/** An OrderBy (scroll, or an order_by query) to REST's `{key, direction, start_from}`. */
export function orderByToJson(o: OrderByMsg | undefined, field: string): Json | undefined {
  if (!present(o)) return undefined;
  const out: Json = { key: o.key ?? '' };
  if (present(o.direction)) out.direction = snakeEnum(o.direction);
  put(out, 'start_from', startFromToJson(o.start_from, `${field}.start_from`));
  return out;
}

/**
 * A Query to the `query` of the REST body. Kinds Quiver does not serve (relevance
 * feedback) keep their REST key: the
 * parser refuses them by that key, with the REST error, before reading their contents.
 */
function queryToJson(q: QueryMsg | undefined): unknown {
  if (!present(q)) return undefined;
  switch (q.variant) {
    case 'nearest':
      return { nearest: vectorInputToJson(q.nearest, 'query.nearest') };
    case 'recommend': {
      const r = q.recommend ?? {};
      const out: Json = {
        positive: (r.positive ?? []).map((v, i) => vectorInputToJson(v, `query.recommend.positive[${i}]`)),
        negative: (r.negative ?? []).map((v, i) => vectorInputToJson(v, `query.recommend.negative[${i}]`)),
      };
      if (present(r.strategy)) out.strategy = snakeEnum(r.strategy);
      return { recommend: out };
    }
    case 'order_by':
      return { order_by: orderByToJson(q.order_by, 'query.order_by') };
    case 'fusion':
      return { fusion: snakeEnum(q.fusion ?? 'RRF') };
    case 'sample':
      return { sample: snakeEnum(q.sample ?? 'Random') };
    case 'nearest_with_mmr': {
      const m = q.nearest_with_mmr ?? {};
      return { nearest: vectorInputToJson(m.nearest, 'query.nearest'), mmr: { ...(m.mmr ?? {}) } };
    }
    case 'rrf': {
      // An Rrf without weights means equal weights (a repeated field has no absent form).
      const r = q.rrf ?? {};
      const out: Json = {};
      if (present(r.k)) out.k = r.k;
      if (present(r.weights) && r.weights.length > 0) out.weights = r.weights;
      return { rrf: out };
    }
    case 'formula':
      return formulaToJson(q.formula, 'query');
    case 'discover': {
      const d = q.discover ?? {};
      return { discover: { target: vectorInputToJson(d.target, 'query.discover.target'), context: contextToJson(d.context, 'query.discover.context') } };
    }
    case 'context':
      return { context: contextToJson(q.context, 'query.context') };
    case 'relevance_feedback':
      return { [q.variant]: {} };
    default:
      throw new FormatError('query: a Query with none of its variants set');
  }
}

/** A ContextInput to REST's list of `{positive, negative}` pairs (absent: none). */
function contextToJson(c: ContextInputMsg | undefined, field: string): Json[] {
  return (c?.pairs ?? []).map((p, i) => ({
    positive: vectorInputToJson(p.positive, `${field}.pairs[${i}].positive`),
    negative: vectorInputToJson(p.negative, `${field}.pairs[${i}].negative`),
  }));
}

/** A VectorExample to REST's RecommendExample: a point id or a vector. */
function vectorExampleToJson(v: VectorExampleMsg | undefined, field: string): unknown {
  if (!present(v)) return undefined;
  if (v.example === 'id' || (v.example === undefined && present(v.id))) return pointIdToJson(v.id);
  if (v.example === 'vector' || (v.example === undefined && present(v.vector))) return vectorToJson(v.vector, `${field}.vector`);
  throw new FormatError(`${field}: a VectorExample with none of its variants set`);
}

/** DiscoverPoints to the body of `POST /points/discover`; `limit` is required there, and 0 when not on the wire. */
export function discoverPointsToJson(r: DiscoverPointsMsg): Json {
  const out: Json = {};
  put(out, 'target', vectorExampleToJson(r.target?.single, 'target.single'));
  if (present(r.context) && r.context.length > 0) {
    out.context = r.context.map((p, i) => ({ positive: vectorExampleToJson(p.positive, `context[${i}].positive`), negative: vectorExampleToJson(p.negative, `context[${i}].negative`) }));
  }
  put(out, 'using', r.using ?? undefined);
  put(out, 'lookup_from', lookupToJson(r.lookup_from));
  out.limit = int64(r.limit);
  return similarToJson({ ...r, limit: undefined }, out);
}

/** The fields every similarity body shares. */
function similarToJson(r: Similar, out: Json): Json {
  put(out, 'filter', filterToJson(r.filter));
  put(out, 'params', searchParamsToJson(r.params));
  put(out, 'score_threshold', r.score_threshold ?? undefined);
  if (present(r.limit)) out.limit = int64(r.limit);
  if (present(r.offset)) out.offset = int64(r.offset);
  put(out, 'with_payload', withPayloadToJson(r.with_payload));
  put(out, 'with_vector', withVectorsToJson(r.with_vectors));
  put(out, 'shard_key', shardKeySelectorToJson(r.shard_key_selector));
  return out;
}

/**
 * PrefetchQuery messages to REST's `prefetch` list. Walked without recursion, so a
 * message nested deeper than the parser takes reaches the parser (which refuses it by
 * its depth) instead of exhausting the stack here.
 */
function prefetchesToJson(ps: PrefetchQueryMsg[], field: string): Json[] {
  const top: Json[] = [];
  const stack: Array<[PrefetchQueryMsg[], Json[], string]> = [[ps, top, field]];
  while (stack.length > 0) {
    const [msgs, into, where] = stack.pop()!;
    msgs.forEach((p, i) => {
      const at = `${where}[${i}]`;
      const out: Json = {};
      if (p.prefetch !== undefined && p.prefetch !== null && p.prefetch.length > 0) {
        const inner: Json[] = [];
        out.prefetch = inner;
        stack.push([p.prefetch, inner, `${at}.prefetch`]);
      }
      put(out, 'query', queryToJson(p.query));
      put(out, 'using', p.using ?? undefined);
      put(out, 'filter', filterToJson(p.filter));
      put(out, 'params', searchParamsToJson(p.params));
      put(out, 'score_threshold', p.score_threshold ?? undefined);
      if (present(p.limit)) out.limit = int64(p.limit);
      put(out, 'lookup_from', lookupToJson(p.lookup_from));
      into.push(out);
    });
  }
  return top;
}

/** QueryPoints to the body of `POST /points/query`. */
export function queryPointsToJson(r: QueryPointsMsg): Json {
  const out: Json = {};
  if (r.prefetch !== undefined && r.prefetch.length > 0) out.prefetch = prefetchesToJson(r.prefetch, 'prefetch');
  put(out, 'query', queryToJson(r.query));
  put(out, 'using', r.using ?? undefined);
  put(out, 'lookup_from', lookupToJson(r.lookup_from));
  return similarToJson(r, out);
}

/** SearchPoints to the body of `POST /points/search`; `limit` is required there, and 0 when not on the wire. */
export function searchPointsToJson(r: SearchPointsMsg): Json {
  const values = r.vector ?? [];
  const vector = present(r.sparse_indices) ? { indices: r.sparse_indices.data ?? [], values } : values;
  const out: Json = { vector: present(r.vector_name) ? { name: r.vector_name, vector } : vector };
  out.limit = int64(r.limit);
  return similarToJson({ ...r, limit: undefined }, out);
}

/** RecommendPoints to the body of `POST /points/recommend` (ids and vectors together, as REST lists them). */
export function recommendPointsToJson(r: RecommendPointsMsg): Json {
  const examples = (ids: PointIdMsg[] | undefined, vectors: VectorMsg[] | undefined, field: string) => [
    ...(ids ?? []).map(pointIdToJson),
    ...(vectors ?? []).map((v, i) => vectorToJson(v, `${field}_vectors[${i}]`)),
  ];
  const out: Json = {
    positive: examples(r.positive, r.positive_vectors, 'positive'),
    negative: examples(r.negative, r.negative_vectors, 'negative'),
  };
  if (present(r.strategy)) out.strategy = snakeEnum(r.strategy);
  put(out, 'using', r.using ?? undefined);
  put(out, 'lookup_from', lookupToJson(r.lookup_from));
  out.limit = int64(r.limit);
  return similarToJson({ ...r, limit: undefined }, out);
}

/**
 * Checks an item of a batch (QueryBatch, SearchBatch, RecommendBatch): the contract
 * reuses the single request's message, whose collection, consistency and timeout belong
 * to the batch. An item naming another collection, or its own consistency or timeout,
 * is refused rather than silently overruled.
 */
export function checkBatchItem(item: Similar, collection: string, field: string): void {
  if (present(item.collection_name) && item.collection_name !== '' && item.collection_name !== collection) {
    throw new FormatError(`${field}.collection_name: \`${item.collection_name}\` differs from the batch's collection \`${collection}\``);
  }
  if (present(item.read_consistency)) throw new FormatError(`${field}.read_consistency: set read_consistency on the batch, not on its items`);
  if (present(item.timeout)) throw new FormatError(`${field}.timeout: set timeout on the batch, not on its items`);
}
