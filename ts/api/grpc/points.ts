/**
 * The `qdrant.Points` service of the public gRPC API (points_service.proto, 30 RPCs).
 *
 * Each handler is the twin of a REST route (ts/api/rest/points.ts, and the payload index
 * routes of ts/api/rest/collections.ts): it translates the message into the JSON form of
 * the same REST request (./convert), runs the same parser of ts/api/request, makes the
 * same collection or dispatcher call, and translates the result into the response
 * message.
 *
 * Owns: that list of handlers. Must never: hold query, write or validation logic (a
 * handler does nothing its REST twin does not do), or import ts/api/rest.
 */

import type { ForKeys, ReplicaOperation } from '../../collection/collection';
import type { GroupsRequest } from '../../collection/groups';
import type { QueryRequest } from '../../collection/query';
import { parseQueryGroups, parseRecommendGroups, parseSearchGroups } from '../request/groups';
import {
  groupsResultOut,
  queryGroupsToJson,
  recommendGroupsToJson,
  searchGroupsToJson,
  type QueryPointGroupsMsg,
  type RecommendPointGroupsMsg,
  type SearchPointGroupsMsg,
} from './convert/groups';
import type { Dispatcher } from '../../storage/dispatcher';
import type { TableOfContent } from '../../storage/toc';
import { lookupCollections } from '../guard';
import { readParams, readTimeout, shardKeySelector, writeParams, type Obj } from '../request/parse';
import { createIndexBody } from '../request/payload-index';
import { parseFacet } from '../request/facet';
import { matrixOffsets, matrixPairs, parseMatrix } from '../request/matrix';
import type { FacetHit } from '../../collection/facet';
import {
  batchOf,
  batchOp,
  deletePayloadOp,
  deleteVectorsOp,
  keyed,
  parseCount,
  parseDiscover,
  parseQuery,
  parseRecommend,
  parseRetrieve,
  parseScroll,
  parseSearch,
  selector,
  setPayloadOp,
  updateVectorsOp,
  upsertOp,
} from '../request/points';
import { fieldSchemaToJson, type CreateFieldIndexMsg } from './convert/field-index';
import { filterToJson, pointIdToJson, type FilterMsg, type PointIdMsg } from './convert/filter';
import {
  pointIdOut,
  pointIdsToJson,
  pointToJson,
  put,
  putSelector,
  readQuery,
  retrievedPointOut,
  scoredPointOut,
  shardKeySelectorToJson,
  updateResultOut,
  vectorsToJson,
  withPayloadToJson,
  withVectorsToJson,
  writeQuery,
  type PointsSelectorMsg,
  type PointStructMsg,
  type ReadConsistencyMsg,
  type ShardKeySelectorMsg,
  type VectorsMsg,
  type WithPayloadMsg,
  type WithVectorsMsg,
  type WriteOrderingMsg,
} from './convert/points';
import { checkBatchItem, discoverPointsToJson, orderByToJson, queryPointsToJson, recommendPointsToJson, searchPointsToJson, type DiscoverPointsMsg, type OrderByMsg, type QueryPointsMsg, type RecommendPointsMsg, type SearchPointsMsg } from './convert/query';
import { num, seconds, snakeEnum, timeoutSeconds } from './convert/common';
import { parseVectorNameConfig } from '../../collection/config';
import { mapToJson, type ValueMap } from './convert/value';
import type { GrpcCallContext, GrpcMethod, GrpcService } from './method';

type Long = string | number;
type Json = Record<string, unknown>;

interface InCollection {
  collection_name?: string;
}

interface WriteMsg extends InCollection {
  wait?: boolean;
  ordering?: WriteOrderingMsg;
  timeout?: Long;
  shard_key_selector?: ShardKeySelectorMsg;
}

interface ReadMsg extends InCollection {
  read_consistency?: ReadConsistencyMsg;
  timeout?: Long;
  shard_key_selector?: ShardKeySelectorMsg;
}

interface PointVectorsMsg {
  id?: PointIdMsg;
  vectors?: VectorsMsg;
}

/** One operation of UpdateBatchPoints (points.proto `PointsUpdateOperation`). */
interface UpdateOperationMsg {
  operation?: string;
  [member: string]: unknown;
}

const C = '/collections/{collection_name}';

const inCollection = (r: InCollection) => ({ collection_name: r.collection_name });
const inVector = (r: InCollection & { vector_name?: string }) => ({ collection_name: r.collection_name, vector_name: r.vector_name });

/** CreateVectorNameRequest's vector part and the name. */
interface VectorNameMsg {
  vector_name?: string;
  dense_config?: { size?: string | number; distance?: string; multivector_config?: { comparator?: string }; datatype?: string };
  sparse_config?: { modifier?: string; datatype?: string };
}

/** The REST body (VectorNameConfig) of a CreateVectorName request; the parser judges it as REST's. */
function vectorNameConfigToJson(r: VectorNameMsg): Json {
  if (r.sparse_config !== undefined) {
    const c = r.sparse_config;
    const sparse: Json = {};
    if (c.modifier !== undefined) sparse.modifier = snakeEnum(c.modifier);
    if (c.datatype !== undefined && c.datatype !== 'Default') sparse.datatype = snakeEnum(c.datatype);
    return { sparse };
  }
  if (r.dense_config === undefined) return {};
  const d = r.dense_config;
  const dense: Json = { size: num(d.size ?? '0'), distance: d.distance ?? 'UnknownDistance' };
  if (d.multivector_config !== undefined) dense.multivector_config = { comparator: snakeEnum(d.multivector_config.comparator ?? 'MaxSim') };
  if (d.datatype !== undefined && d.datatype !== 'Default') dense.datatype = snakeEnum(d.datatype);
  return { dense };
}

/** Fields of a write's body that every REST write body shares: `shard_key`. */
/** FacetHit of the proto: the value in its oneof, the count as a uint64. */
function facetHitOut(h: FacetHit): { value: Record<string, unknown>; count: string } {
  const value =
    typeof h.value === 'string' ? { string_value: h.value } : typeof h.value === 'number' ? { integer_value: String(h.value) } : { bool_value: h.value };
  return { value, count: String(h.count) };
}

/** SearchMatrixPoints. */
interface MatrixMsg extends ReadMsg {
  filter?: FilterMsg;
  sample?: Long | null;
  limit?: Long | null;
  using?: string | null;
}

/** SearchMatrixPoints to the body of `POST /points/search/matrix/*`. */
function matrixBody(r: MatrixMsg): Json {
  const b: Json = keyedBody(r);
  put(b, 'filter', filterToJson(r.filter));
  put(b, 'sample', r.sample === undefined || r.sample === null ? undefined : Number(r.sample));
  put(b, 'limit', r.limit === undefined || r.limit === null ? undefined : Number(r.limit));
  put(b, 'using', r.using ?? undefined);
  return b;
}

function keyedBody(r: { shard_key_selector?: ShardKeySelectorMsg }, field = 'shard_key_selector'): Json {
  const out: Json = {};
  put(out, 'shard_key', shardKeySelectorToJson(r.shard_key_selector, field));
  return out;
}

// -- request bodies, as REST spells them ----------------------------------------------------

interface UpsertMsg extends WriteMsg {
  points?: PointStructMsg[];
  update_filter?: FilterMsg;
  update_mode?: string | number;
}

/** `PointStructList` and UpsertPoints: REST's `{points, shard_key, update_filter, update_mode}`. */
function upsertBody(r: Omit<UpsertMsg, 'wait' | 'ordering' | 'timeout'>, field: string): Json {
  const out = keyedBody(r, `${field}shard_key_selector`);
  out.points = (r.points ?? []).map((p, i) => pointToJson(p, `${field}points[${i}]`));
  put(out, 'update_filter', filterToJson(r.update_filter, `${field}update_filter`));
  if (r.update_mode !== undefined && r.update_mode !== null) out.update_mode = snakeEnum(r.update_mode);
  return out;
}

function selectorBody(r: { shard_key_selector?: ShardKeySelectorMsg }, s: PointsSelectorMsg | undefined, field: string): Json {
  const out = keyedBody(r, `${field}shard_key_selector`);
  putSelector(out, s, field);
  return out;
}

interface SetPayloadMsg extends WriteMsg {
  payload?: ValueMap;
  points_selector?: PointsSelectorMsg;
  key?: string;
}

function setPayloadBody(r: Omit<SetPayloadMsg, 'wait' | 'ordering' | 'timeout'>, field: string): Json {
  const out = selectorBody(r, r.points_selector, `${field}points_selector`);
  // A map that is empty is not on the wire: an empty payload, which is what a REST body must hold.
  out.payload = mapToJson(r.payload, `${field}payload`);
  put(out, 'key', r.key ?? undefined);
  return out;
}

interface DeletePayloadMsg extends WriteMsg {
  keys?: string[];
  points_selector?: PointsSelectorMsg;
}

function deletePayloadBody(r: Omit<DeletePayloadMsg, 'wait' | 'ordering' | 'timeout'>, field: string): Json {
  const out = selectorBody(r, r.points_selector, `${field}points_selector`);
  out.keys = r.keys ?? [];
  return out;
}

interface UpdateVectorsMsg extends WriteMsg {
  points?: PointVectorsMsg[];
  update_filter?: FilterMsg;
}

function updateVectorsBody(r: Omit<UpdateVectorsMsg, 'wait' | 'ordering' | 'timeout'>, field: string): Json {
  const out = keyedBody(r, `${field}shard_key_selector`);
  out.points = (r.points ?? []).map((p, i) => {
    const point: Json = {};
    put(point, 'id', pointIdToJson(p.id));
    put(point, 'vector', vectorsToJson(p.vectors, `${field}points[${i}].vectors`));
    return point;
  });
  put(out, 'update_filter', filterToJson(r.update_filter, `${field}update_filter`));
  return out;
}

interface DeleteVectorsMsg extends WriteMsg {
  points_selector?: PointsSelectorMsg;
  vectors?: { names?: string[] };
}

function deleteVectorsBody(r: Omit<DeleteVectorsMsg, 'wait' | 'ordering' | 'timeout'>, field: string): Json {
  const out = selectorBody(r, r.points_selector, `${field}points_selector`);
  if (r.vectors !== undefined && r.vectors !== null) out.vector = r.vectors.names ?? [];
  return out;
}

/** One PointsUpdateOperation to one operation of REST's `POST /points/batch` (`{kind: {...}}`). */
function batchOperationBody(o: UpdateOperationMsg, i: number): Json {
  const field = `operations[${i}].`;
  const arg = (o.operation === undefined ? {} : o[o.operation] ?? {}) as any;
  switch (o.operation) {
    case 'upsert':
      return { upsert: upsertBody(arg, `${field}upsert.`) };
    case 'delete_deprecated':
      return { delete: selectorBody({}, arg, `${field}delete_deprecated`) };
    case 'set_payload':
      return { set_payload: setPayloadBody(arg, `${field}set_payload.`) };
    case 'overwrite_payload':
      return { overwrite_payload: setPayloadBody(arg, `${field}overwrite_payload.`) };
    case 'delete_payload':
      return { delete_payload: deletePayloadBody(arg, `${field}delete_payload.`) };
    case 'clear_payload_deprecated':
      return { clear_payload: selectorBody({}, arg, `${field}clear_payload_deprecated`) };
    case 'update_vectors':
      return { update_vectors: updateVectorsBody(arg, `${field}update_vectors.`) };
    case 'delete_vectors':
      return { delete_vectors: deleteVectorsBody(arg, `${field}delete_vectors.`) };
    case 'delete_points':
      return { delete: selectorBody(arg, arg.points, `${field}delete_points.points`) };
    case 'clear_payload':
      return { clear_payload: selectorBody(arg, arg.points, `${field}clear_payload.points`) };
    default:
      // No operation set: the parser refuses the empty object as it refuses `{}` in a REST batch.
      return {};
  }
}

// -- the service ------------------------------------------------------------------------------

/** The Points service over the table of collections, with the dispatcher for payload indexes (local, or through consensus). */
export function pointsService(toc: TableOfContent, dispatcher: Dispatcher): GrpcService {
  const collection = (r: InCollection) => toc.get(r.collection_name ?? '');

  /** A write of one operation: `PUT|POST /collections/{name}/points...`. */
  const write = <R extends WriteMsg>(access: string, toBody: (r: R) => Json, parse: (b: Obj) => ReplicaOperation): GrpcMethod<R> => ({
    access,
    params: inCollection,
    async handle(r, ctx) {
      const started = process.hrtime.bigint();
      const opts = writeParams({ query: writeQuery(r, timeoutSeconds(r.timeout, ctx)) });
      const c = collection(r);
      const b = toBody(r);
      const op = parse(b);
      const result = await c.update(op, opts, shardKeySelector(b.shard_key));
      return { result: updateResultOut(result), time: seconds(started) };
    },
  });

  /** A grouped query: `POST /collections/{name}/points/{query,search,recommend}/groups`. */
  /** One similarity request (Query, Search, Recommend, Discover); `lookups`: it may name `lookup_from` collections. */
  const similar = <R extends ReadMsg>(access: string, toBody: (r: R) => Json, parse: (b: Obj) => QueryRequest, lookups: boolean): GrpcMethod<R> => ({
    access,
    params: inCollection,
    async handle(r, ctx) {
      const started = process.hrtime.bigint();
      const opts = readParams({ query: readQuery(r, timeoutSeconds(r.timeout, ctx)) });
      const c = collection(r);
      const q = keyed(parse)(toBody(r));
      const points = await c.query(q.req, opts, q.shards, lookups ? lookupCollections(toc, ctx.access) : null);
      return { result: points.map((p) => scoredPointOut(p, 1)), time: seconds(started) };
    },
  });

  /** A batch of similarity requests: `items` picks the batch's list, whose members share its collection, consistency and timeout. */
  const similarBatch = <R extends ReadMsg, I extends Parameters<typeof checkBatchItem>[0]>(
    access: string,
    field: string,
    items: (r: R) => I[] | undefined,
    toBody: (item: I) => Json,
    parse: (b: Obj) => QueryRequest,
    lookups: boolean,
  ): GrpcMethod<R> => ({
    access,
    params: inCollection,
    async handle(r, ctx) {
      const started = process.hrtime.bigint();
      const opts = readParams({ query: readQuery(r, timeoutSeconds(r.timeout, ctx)) });
      const c = collection(r);
      const list = items(r) ?? [];
      list.forEach((item, i) => checkBatchItem(item, r.collection_name ?? '', `${field}[${i}]`));
      const reqs = batchOf({ searches: list.map(toBody) }, 'searches').map(keyed(parse));
      const results = await c.queryBatch(reqs, opts, lookups ? lookupCollections(toc, ctx.access) : null);
      return { result: results.map((points) => ({ result: points.map((p) => scoredPointOut(p, 2)) })), time: seconds(started) };
    },
  });

  const groups = <R extends ReadMsg>(access: string, toBody: (r: R) => Json, parse: (b: Obj) => ForKeys<GroupsRequest>): GrpcMethod<R> => ({
    access,
    params: inCollection,
    async handle(r, ctx) {
      const started = process.hrtime.bigint();
      const opts = readParams({ query: readQuery(r, timeoutSeconds(r.timeout, ctx)) });
      const c = collection(r);
      const q = parse(toBody(r));
      const found = await c.queryGroups(q.req, opts, q.shards, lookupCollections(toc, ctx.access));
      return { result: groupsResultOut(found), time: seconds(started) };
    },
  });

  return {
    // -- writes ---------------------------------------------------------------------------
    Upsert: write<UpsertMsg>(`PUT ${C}/points`, (r) => upsertBody(r, ''), upsertOp),
    Delete: write<WriteMsg & { points?: PointsSelectorMsg }>(`POST ${C}/points/delete`, (r) => selectorBody(r, r.points, 'points'), (b) => ({ kind: 'delete', select: selector(b) })),
    SetPayload: write<SetPayloadMsg>(`POST ${C}/points/payload`, (r) => setPayloadBody(r, ''), (b) => setPayloadOp(b, false)),
    OverwritePayload: write<SetPayloadMsg>(`PUT ${C}/points/payload`, (r) => setPayloadBody(r, ''), (b) => setPayloadOp(b, true)),
    DeletePayload: write<DeletePayloadMsg>(`POST ${C}/points/payload/delete`, (r) => deletePayloadBody(r, ''), (b) => deletePayloadOp(b)),
    ClearPayload: write<WriteMsg & { points?: PointsSelectorMsg }>(`POST ${C}/points/payload/clear`, (r) => selectorBody(r, r.points, 'points'), (b) => ({ kind: 'clear_payload', select: selector(b) })),
    UpdateVectors: write<UpdateVectorsMsg>(`PUT ${C}/points/vectors`, (r) => updateVectorsBody(r, ''), updateVectorsOp),
    DeleteVectors: write<DeleteVectorsMsg>(`POST ${C}/points/vectors/delete`, (r) => deleteVectorsBody(r, ''), (b) => deleteVectorsOp(b)),

    UpdateBatch: {
      access: `POST ${C}/points/batch`,
      params: inCollection,
      async handle(r: WriteMsg & { operations?: UpdateOperationMsg[] }, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const opts = writeParams({ query: writeQuery(r, timeoutSeconds(r.timeout, ctx)) });
        const c = collection(r);
        const b = { operations: (r.operations ?? []).map(batchOperationBody) };
        const ops = batchOf(b, 'operations').map((o, i) => batchOp(o, i));
        const results = await c.updateBatch(ops, opts);
        return { result: results.map(updateResultOut), time: seconds(started) };
      },
    },

    // -- payload indexes (the REST routes of ts/api/rest/collections.ts) -------------------
    CreateFieldIndex: {
      access: `PUT ${C}/index`,
      params: inCollection,
      async handle(r: WriteMsg & CreateFieldIndexMsg, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const query = writeQuery(r, timeoutSeconds(r.timeout, ctx));
        const { wait } = writeParams({ query });
        const b: Json = { field_name: r.field_name ?? '' };
        put(b, 'field_schema', fieldSchemaToJson(r));
        const { field, schema } = createIndexBody(b);
        await dispatcher.createPayloadIndex(r.collection_name ?? '', field, schema, readTimeout({ query }));
        return { result: updateResultOut({ operation_id: null, status: wait ? 'completed' : 'acknowledged' }), time: seconds(started) };
      },
    },
    DeleteFieldIndex: {
      access: `DELETE ${C}/index/{field_name}`,
      params: (r: InCollection & { field_name?: string }) => ({ collection_name: r.collection_name, field_name: r.field_name }),
      async handle(r: WriteMsg & { field_name?: string }, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const query = writeQuery(r, timeoutSeconds(r.timeout, ctx));
        const { wait } = writeParams({ query });
        await dispatcher.dropPayloadIndex(r.collection_name ?? '', r.field_name ?? '', readTimeout({ query }));
        return { result: updateResultOut({ operation_id: null, status: wait ? 'completed' : 'acknowledged' }), time: seconds(started) };
      },
    },

    // -- reads ----------------------------------------------------------------------------
    Get: {
      access: `POST ${C}/points`,
      params: inCollection,
      async handle(r: ReadMsg & { ids?: PointIdMsg[]; with_payload?: WithPayloadMsg; with_vectors?: WithVectorsMsg }, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const opts = readParams({ query: readQuery(r, timeoutSeconds(r.timeout, ctx)) });
        const c = collection(r);
        const b: Json = { ids: pointIdsToJson(r.ids), ...keyedBody(r) };
        put(b, 'with_payload', withPayloadToJson(r.with_payload));
        put(b, 'with_vector', withVectorsToJson(r.with_vectors));
        const { req, shards } = parseRetrieve(b);
        const records = await c.retrieve(req.ids, req.withPayload, req.withVector, opts, shards);
        return { result: records.map((p) => retrievedPointOut(p, 1)), time: seconds(started) };
      },
    },

    Scroll: {
      access: `POST ${C}/points/scroll`,
      params: inCollection,
      async handle(r: ReadMsg & { filter?: FilterMsg; offset?: PointIdMsg; limit?: number; with_payload?: WithPayloadMsg; with_vectors?: WithVectorsMsg; order_by?: OrderByMsg }, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const opts = readParams({ query: readQuery(r, timeoutSeconds(r.timeout, ctx)) });
        const c = collection(r);
        const b: Json = keyedBody(r);
        put(b, 'filter', filterToJson(r.filter));
        put(b, 'offset', r.offset === undefined ? undefined : pointIdToJson(r.offset));
        put(b, 'limit', r.limit ?? undefined);
        put(b, 'with_payload', withPayloadToJson(r.with_payload));
        put(b, 'with_vector', withVectorsToJson(r.with_vectors));
        put(b, 'order_by', orderByToJson(r.order_by, 'order_by'));
        const { req, shards } = parseScroll(b);
        const page = 'ordered' in req ? await c.scrollOrdered(req.ordered, opts, shards) : await c.scroll(req.plain, opts, shards);
        const out: Json = { result: page.points.map((p) => retrievedPointOut(p, 1)), time: 0 };
        if (page.next_page_offset !== null) out.next_page_offset = pointIdOut(page.next_page_offset);
        out.time = seconds(started);
        return out;
      },
    },

    Count: {
      access: `POST ${C}/points/count`,
      params: inCollection,
      async handle(r: ReadMsg & { filter?: FilterMsg; exact?: boolean }, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const opts = readParams({ query: readQuery(r, timeoutSeconds(r.timeout, ctx)) });
        const c = collection(r);
        const b: Json = keyedBody(r);
        put(b, 'filter', filterToJson(r.filter));
        put(b, 'exact', r.exact ?? undefined);
        const { req, shards } = parseCount(b);
        const count = await c.count(req.filter, opts, shards, req.exact);
        return { result: { count: String(count) }, time: seconds(started) };
      },
    },

    // -- similarity -----------------------------------------------------------------------
    Query: similar<QueryPointsMsg>(`POST ${C}/points/query`, queryPointsToJson, parseQuery, true),
    QueryBatch: similarBatch<ReadMsg & { query_points?: QueryPointsMsg[] }, QueryPointsMsg>(`POST ${C}/points/query/batch`, 'query_points', (r) => r.query_points, queryPointsToJson, parseQuery, true),
    Search: similar<SearchPointsMsg>(`POST ${C}/points/search`, searchPointsToJson, parseSearch, false),
    SearchBatch: similarBatch<ReadMsg & { search_points?: SearchPointsMsg[] }, SearchPointsMsg>(`POST ${C}/points/search/batch`, 'search_points', (r) => r.search_points, searchPointsToJson, parseSearch, false),
    Recommend: similar<RecommendPointsMsg>(`POST ${C}/points/recommend`, recommendPointsToJson, parseRecommend, true),
    RecommendBatch: similarBatch<ReadMsg & { recommend_points?: RecommendPointsMsg[] }, RecommendPointsMsg>(`POST ${C}/points/recommend/batch`, 'recommend_points', (r) => r.recommend_points, recommendPointsToJson, parseRecommend, true),

    // -- groups, discovery -------------------------------------------------------------------
    SearchGroups: groups<SearchPointGroupsMsg>(`POST ${C}/points/search/groups`, searchGroupsToJson, parseSearchGroups),
    RecommendGroups: groups<RecommendPointGroupsMsg>(`POST ${C}/points/recommend/groups`, recommendGroupsToJson, parseRecommendGroups),
    QueryGroups: groups<QueryPointGroupsMsg>(`POST ${C}/points/query/groups`, queryGroupsToJson, parseQueryGroups),
    Discover: similar<DiscoverPointsMsg>(`POST ${C}/points/discover`, discoverPointsToJson, parseDiscover, true),
    DiscoverBatch: similarBatch<ReadMsg & { discover_points?: DiscoverPointsMsg[] }, DiscoverPointsMsg>(`POST ${C}/points/discover/batch`, 'discover_points', (r) => r.discover_points, discoverPointsToJson, parseDiscover, true),
    Facet: {
      access: `POST ${C}/facet`,
      params: inCollection,
      async handle(r: ReadMsg & { key?: string; filter?: FilterMsg; limit?: Long; exact?: boolean }, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const opts = readParams({ query: readQuery(r, timeoutSeconds(r.timeout, ctx)) });
        const c = collection(r);
        const b: Json = keyedBody(r);
        put(b, 'key', r.key ?? undefined);
        put(b, 'filter', filterToJson(r.filter));
        put(b, 'limit', r.limit === undefined || r.limit === null ? undefined : Number(r.limit));
        put(b, 'exact', r.exact ?? undefined);
        const { req, shards } = parseFacet(b);
        const hits = await c.facet(req, opts, shards);
        return { hits: hits.map(facetHitOut), time: seconds(started) };
      },
    },
    SearchMatrixPairs: {
      access: `POST ${C}/points/search/matrix/pairs`,
      params: inCollection,
      async handle(r: MatrixMsg, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const opts = readParams({ query: readQuery(r, timeoutSeconds(r.timeout, ctx)) });
        const c = collection(r);
        const { req, shards } = parseMatrix(matrixBody(r));
        const { pairs } = matrixPairs(await c.searchMatrix(req, opts, shards));
        return { result: { pairs: pairs.map((p) => ({ a: pointIdOut(p.a), b: pointIdOut(p.b), score: p.score })) }, time: seconds(started) };
      },
    },
    SearchMatrixOffsets: {
      access: `POST ${C}/points/search/matrix/offsets`,
      params: inCollection,
      async handle(r: MatrixMsg, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const opts = readParams({ query: readQuery(r, timeoutSeconds(r.timeout, ctx)) });
        const c = collection(r);
        const { req, shards } = parseMatrix(matrixBody(r));
        const m = matrixOffsets(await c.searchMatrix(req, opts, shards));
        return {
          result: { offsets_row: m.offsets_row.map(String), offsets_col: m.offsets_col.map(String), scores: m.scores, ids: m.ids.map(pointIdOut) },
          time: seconds(started),
        };
      },
    },
    CreateVectorName: {
      access: `PUT ${C}/vectors/{vector_name}`,
      params: inVector,
      async handle(r: WriteMsg & VectorNameMsg, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const query = writeQuery(r, timeoutSeconds(r.timeout, ctx));
        const { wait } = writeParams({ query });
        const params = parseVectorNameConfig(vectorNameConfigToJson(r));
        await dispatcher.createVectorName(r.collection_name ?? '', r.vector_name ?? '', params, readTimeout({ query }));
        return { result: updateResultOut({ operation_id: null, status: wait ? 'completed' : 'acknowledged' }), time: seconds(started) };
      },
    },
    DeleteVectorName: {
      access: `DELETE ${C}/vectors/{vector_name}`,
      params: inVector,
      async handle(r: WriteMsg & VectorNameMsg, ctx: GrpcCallContext) {
        const started = process.hrtime.bigint();
        const query = writeQuery(r, timeoutSeconds(r.timeout, ctx));
        const { wait } = writeParams({ query });
        await dispatcher.deleteVectorName(r.collection_name ?? '', r.vector_name ?? '', readTimeout({ query }));
        return { result: updateResultOut({ operation_id: null, status: wait ? 'completed' : 'acknowledged' }), time: seconds(started) };
      },
    },
  };
}
