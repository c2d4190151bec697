/**
 * The one interface through which a collection reads and writes a replica of a shard,
 * wherever the replica lives: LocalReplica (local-replica.ts) wraps this peer's
 * LocalShard; a remote replica (ts/api/p2p/points.ts) sends the same calls
 * to another peer over p2p gRPC.
 *
 * Owns: what crosses that boundary, all of it plain data a remote peer can receive and
 * answer: reads whose records come back fully shaped (id, version, payload and vectors
 * as asked), writes as ReplicaOperation values (replica-operation.ts), and the options
 * a request carries (UpdateOptions, ReadOptions). Must never: hand out shard internals
 * (offsets, labels, stored payload objects) or take closures.
 */

import type { SparseVec } from '../shard/operations';
import type { ClockTag } from '../shard/clocks';
import type { Filter } from '../shard/filter';
import type { PointKey } from '../shard/id-tracker';
import type { Payload, WithPayload } from '../shard/payload-store';
import type { ReplicaOperation } from './replica-operation';
import type { EveryField } from '../common/fields';

/** A point id as the API writes it: an integer (at most 2^53 - 1) or a UUID string. */
export type PointId = number | string;

export type WithVector = boolean | string[];

/** A sparse vector as the API writes it. */
export interface SparseOut {
  indices: number[];
  values: number[];
}

/** A vector as output: its values, or a multivector's rows. */
export type VectorOut = number[] | number[][];
/** Vectors of a shaped point: a bare array (or rows) when the collection has only the unnamed vector, else by name (sparse ones as `{indices, values}`). */
export type VectorsOut = VectorOut | Record<string, VectorOut | SparseOut>;

/** A point read by id or by scroll, shaped as asked; `payload` and `vector` are absent when not asked for. */
export interface PointRecord {
  id: PointId;
  version: number;
  payload?: Payload;
  vector?: VectorsOut;
}

/**
 * A search hit, shaped as asked. Its keys are in the order of the API's ScoredPoint
 * (id, version, score, payload, vector), so it is answered as it is.
 */
export interface ScoredRecord {
  id: PointId;
  version: number;
  score: number;
  payload?: Payload;
  vector?: VectorsOut;
}

/** A point of a scroll by payload value, with the value it was ordered by. */
export interface OrderedRecord extends PointRecord {
  orderValue: number;
}

/**
 * A search scored by a rule over examples instead of nearness to `vector` (which is then
 * empty): `examples` holds the example vectors one after another, in the order
 * bindings/engine.ts `RuleQuery` gives; scores are larger-better whatever the distance.
 */
export interface SearchRule {
  rule: 'best_score' | 'sum_scores' | 'discover' | 'context';
  positives: number;
  examples: Float32Array;
}

/** Nearest points to a vector. */
export interface SearchRequest {
  using: string;
  vector: Float32Array;
  filter: Filter | null;
  limit: number;
  offset: number;
  scoreThreshold: number | null;
  hnswEf?: number;
  exact?: boolean;
  quantization?: { ignore?: boolean; rescore?: boolean; oversampling?: number };
  withPayload: WithPayload;
  withVector: WithVector;
  /** Points never returned (the examples of a recommendation, the point of a query by id). */
  exclude?: PointKey[];
  /** A sparse query over the sparse vector `using` (then `vector` is empty and unused). */
  sparse?: SparseVec;
  /** A search by a rule over examples (then `vector` is empty and unused). */
  rule?: SearchRule;
  /** A search by a rule over sparse examples of the sparse vector `using` (an exact scan; `vector` is empty and unused). */
  sparseRule?: { rule: SearchRule['rule']; positives: number; examples: SparseVec[] };
}

/** A search made from a query that adds nothing but its vector. */
const NO_MORE: Pick<SearchRequest, 'exclude' | 'sparse' | 'rule' | 'sparseRule'> = Object.freeze({});

/** What a search takes from the query it is made from (every field of SearchRequest but the vector and what the query kind adds). */
export type SearchBase = Pick<SearchRequest, 'using' | 'filter' | 'limit' | 'offset' | 'scoreThreshold' | 'hnswEf' | 'exact' | 'quantization' | 'withPayload' | 'withVector'>;

/**
 * A search made from a query: every field of SearchRequest, in one order, those the kind
 * does not use undefined. Built field by field, never as `{ ...query, vector }`: V8 gives
 * each object made by a spread and then extended a map of its own, so every later read of
 * its fields on the way to the engine missed the inline caches (about 5% of the event
 * loop's time per query under load, docs/rest.md).
 */
export function searchRequestOf(base: SearchBase, vector: Float32Array, more: Pick<SearchRequest, 'exclude' | 'sparse' | 'rule' | 'sparseRule'> = NO_MORE): SearchRequest {
  const out: EveryField<SearchRequest> = {
    using: base.using,
    vector,
    filter: base.filter,
    limit: base.limit,
    offset: base.offset,
    scoreThreshold: base.scoreThreshold,
    hnswEf: base.hnswEf,
    exact: base.exact,
    quantization: base.quantization,
    withPayload: base.withPayload,
    withVector: base.withVector,
    exclude: more.exclude,
    sparse: more.sparse,
    rule: more.rule,
    sparseRule: more.sparseRule,
  };
  return out;
}

/** Points in id order from `offset` (inclusive). */
export interface ScrollRequest {
  offset: PointKey | null;
  limit: number;
  filter: Filter | null;
  withPayload: WithPayload;
  withVector: WithVector;
}

export interface OrderBy {
  key: string;
  direction: 'asc' | 'desc';
  start_from: number | string | null;
}

/** Points by the value of a range-indexed payload field. */
export interface OrderedScrollRequest {
  orderBy: OrderBy;
  limit: number;
  filter: Filter | null;
  withPayload: WithPayload;
  withVector: WithVector;
}

export interface RetrieveRequest {
  /** Distinct ids, all of this replica's shard; records come back in this order, missing ones left out. */
  ids: PointKey[];
  withPayload: WithPayload;
  withVector: WithVector;
}

/** `?ordering=` of a write: which replica orders concurrent writes (SPEC 4.4). */
export type WriteOrdering = 'weak' | 'medium' | 'strong';

/** How a write is carried out, from the request's query parameters. */
export interface UpdateOptions {
  /** Answer once the write is durable (`completed`) rather than applied (`acknowledged`). */
  wait: boolean;
  ordering: WriteOrdering;
  /** Seconds the caller waits at most; null: the default. */
  timeout: number | null;
}

/** `?consistency=` of a read: how many replicas must answer, and how their answers are resolved (SPEC 4.4). */
export type ReadConsistency = { factor: number } | 'majority' | 'quorum' | 'all';

/** How a read is carried out, from the request's query parameters. */
export interface ReadOptions {
  consistency: ReadConsistency;
  /** Seconds the caller waits at most; null: the default. */
  timeout: number | null;
}

/** A read with no `consistency` or `timeout` parameter (shared: never modified). */
export const DEFAULT_READ: ReadOptions = Object.freeze({ consistency: Object.freeze({ factor: 1 }), timeout: null });

/** A write with no parameters: `wait=false&ordering=weak`. */
export const DEFAULT_UPDATE: UpdateOptions = Object.freeze({ wait: false, ordering: 'weak' as const, timeout: null });

/**
 * One replica of one shard.
 *
 * Options travel with every call. With one replica per shard (this version) a local
 * replica meets any read consistency, and `ordering` has no leader to choose; a local
 * read or write cannot be cancelled once started (the engine runs it on the libuv pool),
 * so `timeout` is not applied here: a remote replica bounds its call with it.
 */
export interface Replica {
  /** Id of the peer that holds it. */
  readonly peer: string;
  /** Whether it lives in this process. */
  readonly isLocal: boolean;

  /**
   * Applies one operation under the replica's own update lock (selectors are resolved
   * there) and resolves with its operation id. A rejected operation changes nothing.
   * With `tag` (a replicated write: the same tag goes to every replica of the shard) the
   * replica skips an operation whose tag it has seen, so sending it again is harmless.
   */
  update(op: ReplicaOperation, opts: UpdateOptions, tag?: ClockTag): Promise<number>;

  retrieve(req: RetrieveRequest, opts: ReadOptions): Promise<PointRecord[]>;
  /** Hits `offset .. offset + limit` of this replica, best first, after `scoreThreshold` and `exclude`. */
  search(req: SearchRequest, opts: ReadOptions): Promise<ScoredRecord[]>;
  /** Up to `limit` points in id order, and the id of the next one (null after the last). */
  scroll(req: ScrollRequest, opts: ReadOptions): Promise<{ points: PointRecord[]; next: PointId | null }>;
  /** Up to `limit` points in payload-value order. */
  scrollOrdered(req: OrderedScrollRequest, opts: ReadOptions): Promise<OrderedRecord[]>;
  count(filter: Filter | null, opts: ReadOptions): Promise<number>;
  /** Whether any point matches (stops at the first). */
  anyMatch(filter: Filter | null, opts: ReadOptions): Promise<boolean>;
  /** Points per value of the payload index on `req.key` among those matching `req.filter`, as [value, count] pairs. */
  facet(req: FacetShardRequest, opts: ReadOptions): Promise<FacetCounts>;
}

/** What one replica counts for a facet request. */
export interface FacetShardRequest {
  key: string;
  filter: Filter | null;
}

/** [value, count] pairs, values distinct, in no particular order. */
export type FacetCounts = Array<[string | number | boolean, number]>;

/** The reference's point id order: integers ascending, then UUIDs ascending (as compareKeys orders keys). */
export function compareIds(a: PointId, b: PointId): number {
  if (typeof a === 'number') {
    if (typeof b !== 'number') return -1;
    return a - b;
  }
  if (typeof b === 'number') return 1;
  // UUIDs are stored lower-case and hyphenated: text order is their 128-bit order.
  return a < b ? -1 : a > b ? 1 : 0;
}

export function keyToJson(k: PointKey): PointId {
  if (k.kind === 'uuid') return k.value;
  // Ids above 2^53 - 1 cannot be a JSON number a JS client reads exactly; they are
  // refused at the API (see README), so every stored integer id fits here.
  return Number(k.value);
}
