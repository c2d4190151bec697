/**
 * Hybrid queries of the query API: a query over the results of its prefetches (nested to
 * any depth), which it fuses (reciprocal rank fusion, distribution-based score fusion)
 * or re-scores (a vector query or a payload order over the prefetched candidates only).
 *
 * Owns: the plan of such a query and the two fusions, computed as the reference defines
 * them. Fusions at every depth run on lists already merged across shards; the reference
 * fuses nested prefetches per shard (its answer then depends on shard_number, its issue
 * 10640), so for several shards Quiver's nested fusions are the single-shard answer. Every leaf runs as an ordinary collection-level read (a search, an ordered scroll
 * or a scroll), merged across shards by the collection; re-scoring is an ordinary search
 * restricted to the candidates by a `has_id` filter. So fusion happens after each
 * prefetch's results are gathered from every shard, as the reference fuses, and replicas
 * (local or remote) need no call beyond their ordinary reads. Must never: parse a request
 * (ts/api does) or reach a replica (it asks the collection through `HybridReads`).
 */

import type { Filter } from '../shard/filter';
import type { PointKey } from '../shard/id-tracker';
import type { WithPayload } from '../shard/payload-store';
import type { ContextPair, Discover, Example, Fusion, LookupFrom, Prefetch, QueryKind, QueryRequest, Recommend } from './query';
import { exampleIds, recommendMultivector, recommendSparseVector, recommendVector } from './query';
import { examplesOf, rulePlan, scoresNothing, searchRule } from './scorers';
import type { SparseVec } from '../shard/operations';
import { keyToJson, type OrderBy, type PointId, type SearchRequest, type WithVector } from './replica';
import type { Distance } from '../../bindings/engine';
import { formulaScores, mmrSearch, randomPick } from './query-kinds';

/** The reference's default `k` of reciprocal rank fusion. */
export const DEFAULT_RRF_K = 2;
/** The deepest nesting of prefetches the reference plans (deeper: 400 before any work). */
export const MAX_PREFETCH_DEPTH = 64;
/** Ours: the most prefetches one query may hold, counted at every depth (more: 400 before any work). */
export const MAX_PREFETCH_COUNT = 1024;

/** What a fused or re-scored list is made of: a point and its score. */
export interface Scored {
  id: PointId;
  score: number;
}

/** The collection-level reads a hybrid query is made of; each is merged across the shards it covers. */
export interface HybridReads<T extends Scored> {
  search(req: SearchRequest): Promise<T[]>;
  /** The first `limit` points matching `filter` in payload order, scored 0 (with `order_value`). */
  ordered(orderBy: OrderBy, filter: Filter | null, limit: number, withPayload: WithPayload, withVector: WithVector): Promise<T[]>;
  /** The first `limit` points matching `filter` in id order, scored 0. */
  scroll(filter: Filter | null, limit: number, withPayload: WithPayload, withVector: WithVector): Promise<T[]>;
  /** The vectors of examples of a query over `using` (ids looked up here, or in `lookupFrom`'s collection). */
  vectors(examples: Example[], using: string, lookupFrom: LookupFrom | null): Promise<Float32Array[]>;
  /** Whether `using` names a sparse vector; then `sparse` gives its examples' sparse vectors. */
  isSparse(using: string): boolean;
  /** The row dimension when `using` names a multivector, else null. */
  multivectorDim(using: string): number | null;
  sparse(examples: Example[], using: string, lookupFrom: LookupFrom | null): Promise<SparseVec[]>;
  /** The points of a page with their scores, payload and vectors as asked, in the page's order; points gone since are left out. */
  shape(page: T[], withPayload: WithPayload, withVector: WithVector): Promise<T[]>;
  /** Up to `limit` points matching `filter`, chosen at random without repeats, scored 0. */
  sample(filter: Filter | null, limit: number): Promise<T[]>;
  /** The distance of the dense vector `using`. */
  distance(using: string): Distance;
  /** The ids of up to `limit` points matching `filter` (an internal read of the query: no limit of strict mode applies). */
  matching(filter: Filter, limit: number): Promise<PointId[]>;
}

// -- fusion -------------------------------------------------------------------------------

/** Best first; equal scores by id (numbers before UUIDs), so the order is the same on every run. */
export function byScoreThenId(a: Scored, b: Scored): number {
  if (a.score !== b.score) return b.score - a.score;
  if (typeof a.id === typeof b.id) return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  return typeof a.id === 'number' ? -1 : 1;
}

/**
 * Reciprocal rank fusion: a point scores, from each list it is in, 1 / ((rank + 1) / w + k - 1)
 * with rank from 0 and w its list's weight (1 without weights, so 1 / (rank + k)); a
 * weight of 0 or less adds nothing. Only ranks count, not the lists' scores. Sums in 32-bit
 * floats, as the reference does.
 */
export function rrf<T extends Scored>(lists: T[][], k: number, weights: number[] | null): T[] {
  const byId = new Map<string, T>();
  lists.forEach((list, i) => {
    const w = weights === null ? 1 : weights[i];
    list.forEach((p, rank) => {
      const add = w <= 0 ? 0 : Math.fround(1 / Math.fround(Math.fround((rank + 1) / w) + k - 1));
      const key = idKey(p.id);
      const seen = byId.get(key);
      if (seen) seen.score = Math.fround(seen.score + add);
      else byId.set(key, { ...p, score: add });
    });
  });
  return [...byId.values()].sort(byScoreThenId);
}

/**
 * Distribution-based score fusion: each list's scores are mapped by (s - (m - 3σ)) / 6σ,
 * with m the mean and σ the sample standard deviation (n - 1) of that list's scores (a
 * list of one point scores 0.5, a list of equal scores all 0.5), then summed per point.
 * Values beyond three σ are not clamped, as the reference leaves them. The scores are
 * taken as the lists carry them, larger better, whatever the distance: on Euclid and
 * Manhattan vectors (distances, smaller better) this ranks the farthest points first,
 * which is what the reference computes too (its issue 10611, open).
 */
export function dbsf<T extends Scored>(lists: T[][]): T[] {
  const byId = new Map<string, T>();
  for (const list of lists) {
    const norm = distributionNorm(list.map((p) => p.score));
    list.forEach((p, i) => {
      const key = idKey(p.id);
      const seen = byId.get(key);
      if (seen) seen.score = Math.fround(seen.score + norm[i]);
      else byId.set(key, { ...p, score: norm[i] });
    });
  }
  return [...byId.values()].sort(byScoreThenId);
}

function distributionNorm(scores: number[]): number[] {
  const n = scores.length;
  if (n === 0) return [];
  if (n === 1) return [0.5];
  let mean = 0;
  for (const s of scores) mean += s;
  mean /= n;
  let sq = 0;
  for (const s of scores) sq += (s - mean) * (s - mean);
  const std = Math.sqrt(sq / (n - 1));
  const lo = mean - 3 * std;
  const hi = mean + 3 * std;
  if (lo === hi) return scores.map(() => 0.5);
  return scores.map((s) => Math.fround((s - lo) / (hi - lo)));
}

export function fuse<T extends Scored>(lists: T[][], fusion: Fusion): T[] {
  return fusion.method === 'rrf' ? rrf(lists, fusion.k, fusion.weights) : dbsf(lists);
}

export function idKey(id: PointId): string {
  return typeof id === 'number' ? `n${id}` : `u${id}`;
}

// -- shape checks (the parser runs them; the collection runs them again for typed callers) --

/** Depth of the deepest prefetch (a query without prefetches: 0) and how many there are in all. */
export function prefetchShape(ps: readonly Prefetch[]): { depth: number; count: number } {
  let depth = 0;
  let count = 0;
  const stack: Array<[readonly Prefetch[], number]> = [[ps, 1]];
  while (stack.length > 0) {
    const [level, d] = stack.pop()!;
    if (level.length === 0) continue;
    depth = Math.max(depth, d);
    count += level.length;
    for (const p of level) stack.push([p.prefetch, d + 1]);
  }
  return { depth, count };
}

// -- running a plan ---------------------------------------------------------------------------

/** Both filters (either may be absent). */
export function bothFilters(a: Filter | null, b: Filter | null): Filter | null {
  if (a === null) return b;
  if (b === null) return a;
  return { must: [a, b] };
}

function onlyIds(ids: PointId[]): Filter {
  return { must: [{ has_id: ids }] };
}

export interface Level {
  query: QueryKind;
  using: string;
  filter: Filter | null;
  /** How many results the level keeps (its limit, plus the offset at the top). */
  keep: number;
  scoreThreshold: number | null;
  params: Pick<SearchRequest, 'hnswEf' | 'exact' | 'quantization'>;
  lookupFrom: LookupFrom | null;
  prefetch: Prefetch[];
}

function levelOf(p: Prefetch): Level {
  return {
    query: p.query,
    using: p.using,
    filter: p.filter,
    keep: p.limit,
    scoreThreshold: p.scoreThreshold,
    params: { hnswEf: p.hnswEf, exact: p.exact, quantization: p.quantization },
    lookupFrom: p.lookupFrom,
    prefetch: p.prefetch,
  };
}

/**
 * A query with prefetches: each prefetch runs (leaves as collection reads with the
 * filters of every level above them and the query's excluded example ids), then this
 * level fuses or re-scores their results. The top level's page is cut by `offset`, and
 * payload and vectors are read for that page only.
 */
export async function runHybrid<T extends Scored>(reads: HybridReads<T>, req: QueryRequest, exclude: PointKey[]): Promise<T[]> {
  const top: Level = {
    query: req.query,
    using: req.using,
    filter: null,
    keep: req.offset + req.limit,
    scoreThreshold: req.scoreThreshold,
    params: { hnswEf: req.hnswEf, exact: req.exact, quantization: req.quantization },
    lookupFrom: req.lookupFrom ?? null,
    prefetch: req.prefetch ?? [],
  };
  const wants = req.withPayload !== false || (req.withVector !== false && !(Array.isArray(req.withVector) && req.withVector.length === 0));
  const best = await runLevel(reads, top, req.filter, exclude);
  const page = best.slice(req.offset, req.offset + req.limit);
  if (!wants || page.length === 0) return page;
  return reads.shape(page, req.withPayload, req.withVector);
}

/** One level: a leaf reads the collection; a level with prefetches combines theirs. */
async function runLevel<T extends Scored>(reads: HybridReads<T>, level: Level, inherited: Filter | null, exclude: PointKey[]): Promise<T[]> {
  const filter = bothFilters(inherited, level.filter);
  if (level.prefetch.length === 0) return leaf(reads, level, filter, exclude);
  const lists = await Promise.all(level.prefetch.map((p) => runLevel(reads, levelOf(p), filter, exclude)));
  const q = level.query;
  if ('fusion' in q) {
    const t = level.scoreThreshold;
    const fused = fuse(lists, q.fusion);
    return (t === null ? fused : fused.filter((p) => p.score >= t)).slice(0, level.keep);
  }
  if ('formula' in q) return formulaScores(reads, q.formula, lists, level.scoreThreshold, level.keep);
  // Re-scoring: the query runs over the prefetched candidates only.
  const ids = candidates(lists);
  if (ids.length === 0) return [];
  if ('sample' in q) return randomPick(distinctPoints(lists), level.keep).map((p) => ({ ...p, score: 0 }));
  if ('nearest' in q && q.mmr !== undefined) return mmrSearch(reads, { nearest: q.nearest, mmr: q.mmr }, level, queryVector, onlyIds(ids), []);
  if ('orderBy' in q) return reads.ordered(q.orderBy, onlyIds(ids), level.keep, false, false);
  if ('none' in q) return reads.scroll(onlyIds(ids), level.keep, false, false);
  const plan = rulePlan(q);
  if (plan !== null && scoresNothing(plan)) return reads.scroll(onlyIds(ids), level.keep, false, false);
  const vector = await queryVector(reads, q, level);
  return reads.search({ using: level.using, ...vector, filter: onlyIds(ids), limit: level.keep, offset: 0, scoreThreshold: level.scoreThreshold, ...level.params, withPayload: false, withVector: false });
}

async function leaf<T extends Scored>(reads: HybridReads<T>, level: Level, filter: Filter | null, exclude: PointKey[]): Promise<T[]> {
  const q = level.query;
  const withoutExamples = exclude.length === 0 ? filter : bothFilters(filter, { must_not: [{ has_id: exclude.map(keyToJson) }] });
  if ('none' in q) return reads.scroll(withoutExamples, level.keep, false, false);
  if ('orderBy' in q) return reads.ordered(q.orderBy, withoutExamples, level.keep, false, false);
  if ('fusion' in q) throw new Error('a fusion without prefetches reached the plan'); // the parser refuses it
  if ('formula' in q) throw new Error('a formula without prefetches reached the plan'); // the parser refuses it
  if ('sample' in q) return reads.sample(withoutExamples, level.keep);
  if ('nearest' in q && q.mmr !== undefined) return mmrSearch(reads, { nearest: q.nearest, mmr: q.mmr }, level, queryVector, filter, exclude);
  const plan = rulePlan(q);
  if (plan !== null && scoresNothing(plan)) return reads.scroll(withoutExamples, level.keep, false, false);
  const vector = await queryVector(reads, q, level);
  return reads.search({ using: level.using, ...vector, filter, limit: level.keep, offset: 0, scoreThreshold: level.scoreThreshold, ...level.params, withPayload: false, withVector: false, exclude });
}

/** An empty dense vector: the search of a sparse query carries its vector in `sparse`. */
const NO_VECTOR = new Float32Array(0);

/** What a level searches with: a dense vector, a sparse one when `using` names a sparse vector, or a rule over examples. */
export async function queryVector<T extends Scored>(reads: HybridReads<T>, q: { nearest: Example } | { recommend: Recommend } | { discover: Discover } | { context: ContextPair[] }, level: Level): Promise<Pick<SearchRequest, 'vector' | 'sparse' | 'rule' | 'sparseRule'>> {
  const plan = rulePlan(q);
  if (plan !== null && reads.isSparse(level.using)) {
    return { vector: NO_VECTOR, sparseRule: { rule: plan.rule, positives: plan.positives, examples: await reads.sparse(plan.examples, level.using, level.lookupFrom) } };
  }
  if (plan !== null) return { vector: NO_VECTOR, rule: searchRule(plan, await reads.vectors(plan.examples, level.using, level.lookupFrom)) };
  if ('discover' in q || 'context' in q) throw new Error('a rule query without a plan'); // rulePlan covers both
  if (reads.isSparse(level.using)) {
    if ('nearest' in q) return { vector: NO_VECTOR, sparse: (await reads.sparse([q.nearest], level.using, level.lookupFrom))[0] };
    const { positive, negative } = q.recommend;
    const vs = await reads.sparse([...positive, ...negative], level.using, level.lookupFrom);
    return { vector: NO_VECTOR, sparse: recommendSparseVector(vs.slice(0, positive.length), vs.slice(positive.length)) };
  }
  if ('nearest' in q) {
    if ('vector' in q.nearest) return { vector: q.nearest.vector };
    const [v] = await reads.vectors([q.nearest], level.using, level.lookupFrom);
    return { vector: v };
  }
  const { positive, negative } = q.recommend;
  const vs = await reads.vectors([...positive, ...negative], level.using, level.lookupFrom);
  const dim = reads.multivectorDim(level.using);
  if (dim !== null) return { vector: recommendMultivector(vs.slice(0, positive.length), vs.slice(positive.length), dim) };
  return { vector: recommendVector(vs.slice(0, positive.length), vs.slice(positive.length)) };
}

/** The distinct points of the lists, each as first seen. */
function distinctPoints<T extends Scored>(lists: T[][]): T[] {
  const seen = new Map<string, T>();
  for (const list of lists) for (const p of list) if (!seen.has(idKey(p.id))) seen.set(idKey(p.id), p);
  return [...seen.values()];
}

/** The distinct ids of the lists, in first-seen order. */
export function candidates(lists: Scored[][]): PointId[] {
  const seen = new Set<string>();
  const out: PointId[] = [];
  for (const list of lists) {
    for (const p of list) {
      const k = idKey(p.id);
      if (seen.has(k)) continue;
      seen.add(k);
      out.push(p.id);
    }
  }
  return out;
}

/** The example ids of a query and of its prefetches at every depth that are looked up in this collection (not through `lookup_from`). */
export function referencedIds(req: { query: QueryKind; lookupFrom?: LookupFrom | null; prefetch?: Prefetch[] }, collection: string): PointKey[] {
  const out: PointKey[] = [];
  const visit = (query: QueryKind, lookupFrom: LookupFrom | null | undefined, prefetch: readonly Prefetch[] | undefined) => {
    const here = lookupFrom === null || lookupFrom === undefined || lookupFrom.collection === collection;
    if (here) {
      out.push(...exampleIds(examplesOf(query)));
    }
    for (const p of prefetch ?? []) visit(p.query, p.lookupFrom, p.prefetch);
  };
  visit(req.query, req.lookupFrom, req.prefetch);
  return out;
}
