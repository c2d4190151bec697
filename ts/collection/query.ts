/**
 * The typed form of a similarity or listing query (query, search and recommend APIs,
 * and their batch forms), as an API hands it to the collection.
 *
 * Owns: the query kinds and the reference's average_vector recommendation. Must never:
 * parse a request body (ts/api does) or read stored points (the collection resolves
 * example ids to vectors through its replicas).
 */

import { markMultivector } from '../common/multivector';
import type { PointKey } from '../shard/id-tracker';
import type { SparseVec } from '../shard/operations';
import type { OrderBy, SearchRequest } from './replica';
import type { ShardSelector } from './shard-keys';
import type { Formula } from './formula';

/** A vector, a sparse vector, or the id of a stored point whose vector is meant. */
export type Example = { vector: Float32Array } | { id: PointKey } | { sparse: SparseVec };

/**
 * A recommendation: by the average_vector strategy (`strategy` absent: one search for
 * the average vector), or by `best_score` / `sum_scores` (a search scored by the rule
 * over every example, scorers.ts).
 */
export interface Recommend {
  positive: Example[];
  negative: Example[];
  strategy?: 'best_score' | 'sum_scores';
}

/** A pair of examples: points should be nearer the positive than the negative. */
export interface ContextPair {
  positive: Example;
  negative: Example;
}

/** Discovery: near the target, within the zones the context pairs mark (scorers.ts). */
export interface Discover {
  target: Example;
  context: ContextPair[];
}

/**
 * How the results of several prefetches become one list (hybrid.ts computes both):
 * reciprocal rank fusion with its `k` and optional weight per prefetch, or
 * distribution-based score fusion.
 */
export type Fusion = { method: 'rrf'; k: number; weights: number[] | null } | { method: 'dbsf' };

/**
 * Nearest to a vector or point, a recommendation, no vector at all (points by id, or by
 * payload order), a fusion of prefetches, discovery (a target and context pairs) or a
 * context search (pairs only).
 */
export type QueryKind =
  | { nearest: Example; mmr?: Mmr }
  | { recommend: Recommend }
  | { orderBy: OrderBy }
  | { none: true }
  | { fusion: Fusion }
  | { formula: Formula }
  | { sample: 'random' }
  | { discover: Discover }
  | { context: ContextPair[] };

/**
 * Maximal marginal relevance over a nearest query (mmr.ts): `lambda` = 1 - diversity, and
 * how many nearest candidates it picks from (null: the query's limit).
 */
export interface Mmr {
  lambda: number;
  candidatesLimit: number | null;
}

/** `lookup_from`: example ids name points of another collection, and their vector `vector` (default: the query's `using`). */
export interface LookupFrom {
  collection: string;
  vector: string | null;
  shards: ShardSelector | null;
}

/**
 * One prefetch of a hybrid query: a query over the collection (a leaf) or over the
 * results of its own prefetches, whose best `limit` feed the level above.
 */
export interface Prefetch extends Pick<SearchRequest, 'using' | 'filter' | 'limit' | 'scoreThreshold' | 'hnswEf' | 'exact' | 'quantization'> {
  prefetch: Prefetch[];
  query: QueryKind;
  lookupFrom: LookupFrom | null;
}

/** One query: its kind, and what every similarity request shares (limit, filter, params, what to return). */
export interface QueryRequest extends Omit<SearchRequest, 'vector' | 'exclude'> {
  query: QueryKind;
  /** Sub-queries whose results the query re-scores or fuses (absent or empty: it runs over the collection). */
  prefetch?: Prefetch[];
  lookupFrom?: LookupFrom | null;
}

export function exampleIds(xs: Example[]): PointKey[] {
  return xs.filter((e): e is { id: PointKey } => 'id' in e).map((e) => e.id);
}

function average(vs: Float32Array[]): Float32Array {
  const out = new Float32Array(vs[0].length);
  for (const v of vs) for (let i = 0; i < v.length; i++) out[i] += v[i] / vs.length;
  return out;
}

/** The reference's average_vector recommendation: avg(pos) + (avg(pos) - avg(neg)); avg(pos) without negatives. */
export function recommendVector(positive: Float32Array[], negative: Float32Array[]): Float32Array {
  const pos = average(positive);
  if (negative.length === 0) return pos;
  const neg = average(negative);
  const out = new Float32Array(pos.length);
  for (let i = 0; i < pos.length; i++) out[i] = pos[i] + (pos[i] - neg[i]);
  return out;
}

/**
 * average_vector over a multivector, as the reference defines it: the query is the list of
 * every positive example's rows, followed, when there are negatives, by every negative
 * example's rows negated (MaxSim then scores it). A plain vector given as an example is
 * one row. The result is marked as a list of rows of dimension `dim`.
 */
export function recommendMultivector(positive: Float32Array[], negative: Float32Array[], dim: number): Float32Array {
  const total = [...positive, ...negative].reduce((n, v) => n + v.length, 0);
  const out = new Float32Array(total);
  let at = 0;
  for (const v of positive) {
    out.set(v, at);
    at += v.length;
  }
  for (const v of negative) for (let i = 0; i < v.length; i++) out[at++] = -v[i];
  return markMultivector(out, total / dim);
}

/** The average of sparse vectors by dimension (a dimension a vector lacks counts as 0). */
function averageSparse(vs: SparseVec[]): Map<number, number> {
  const out = new Map<number, number>();
  for (const v of vs) v.indices.forEach((d, i) => out.set(d, (out.get(d) ?? 0) + v.values[i] / vs.length));
  return out;
}

/** average_vector for sparse vectors: avg(pos) + (avg(pos) - avg(neg)) over the union of their dimensions; avg(pos) without negatives. */
export function recommendSparseVector(positive: SparseVec[], negative: SparseVec[]): SparseVec {
  const pos = averageSparse(positive);
  const out = new Map(pos);
  if (negative.length > 0) {
    const neg = averageSparse(negative);
    for (const d of new Set([...pos.keys(), ...neg.keys()])) out.set(d, 2 * (pos.get(d) ?? 0) - (neg.get(d) ?? 0));
  }
  const dims = [...out.keys()].sort((a, b) => a - b);
  return { indices: Uint32Array.from(dims), values: Float32Array.from(dims.map((d) => out.get(d)!)) };
}
