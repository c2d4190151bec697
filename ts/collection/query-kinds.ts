/**
 * The query kinds of the query API that work on candidates at the collection level:
 * `formula` (a score computed over the prefetches' candidates, formula.ts), `sample:
 * random` (random points, or a random pick of the candidates) and a nearest query's
 * `mmr` (maximal marginal relevance over the nearest candidates, mmr.ts). hybrid.ts
 * runs them at any level of a plan, through the same collection reads as the rest.
 *
 * Owns: gathering what each needs (the candidates' scores per prefetch, their payloads,
 * their vectors) and ordering the answer. Must never: parse a request or reach a replica.
 */

import { BadInputError } from '../common/errors';
import type { Distance } from '../../bindings/engine';
import type { Filter } from '../shard/filter';
import type { PointKey } from '../shard/id-tracker';
import type { Payload, WithPayload } from '../shard/payload-store';
import { conditionsOf, evaluate, readsPayload, type Formula } from './formula';
import { mmrSelect } from './mmr';
import type { Example, Mmr } from './query';
import type { PointId, SearchRequest, VectorsOut, WithVector } from './replica';

interface Scored {
  id: PointId;
  score: number;
}

/** The reads these kinds use (a part of hybrid.ts's HybridReads). */
interface Reads<T extends Scored> {
  search(req: SearchRequest): Promise<T[]>;
  matching(filter: Filter, limit: number): Promise<PointId[]>;
  shape(page: T[], withPayload: WithPayload, withVector: WithVector): Promise<T[]>;
  isSparse(using: string): boolean;
  multivectorDim(using: string): number | null;
  distance(using: string): Distance;
}

/** What of a plan's level these kinds read. */
interface LevelOf {
  using: string;
  keep: number;
  scoreThreshold: number | null;
  params: Pick<SearchRequest, 'hnswEf' | 'exact' | 'quantization'>;
}

type VectorOf<T extends Scored, L> = (reads: never, q: { nearest: Example }, level: L) => Promise<{ vector: Float32Array }>;

function key(id: PointId): string {
  return typeof id === 'number' ? `n${id}` : `u${id}`;
}

function byScoreThenId(a: Scored, b: Scored): number {
  if (a.score !== b.score) return b.score - a.score;
  if (typeof a.id === typeof b.id) return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  return typeof a.id === 'number' ? -1 : 1;
}

/** `n` of `items` chosen at random without repeats (all of them, shuffled, when there are no more). */
export function randomPick<X>(items: readonly X[], n: number): X[] {
  const a = [...items];
  const k = Math.min(n, a.length);
  for (let i = 0; i < k; i++) {
    const j = i + Math.floor(Math.random() * (a.length - i));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a.slice(0, k);
}

/**
 * A formula over the candidates of `lists` (one per prefetch, in the prefetches' order):
 * each distinct point is scored with its score in each list (`$score[i]`; absent where
 * it is not in list i) and its payload; best first, cut by the threshold and to `keep`.
 * A point deleted since its prefetch is left out.
 */
export async function formulaScores<T extends Scored>(reads: Reads<T>, f: Formula, lists: T[][], threshold: number | null, keep: number): Promise<T[]> {
  const byId = new Map<string, { point: T; scores: Array<number | undefined> }>();
  lists.forEach((list, i) => {
    for (const p of list) {
      const k = key(p.id);
      let e = byId.get(k);
      if (e === undefined) {
        e = { point: p, scores: [] };
        byId.set(k, e);
      }
      if (e.scores[i] === undefined) e.scores[i] = p.score;
    }
  });
  const entries = [...byId.values()];
  if (entries.length === 0) return [];
  let payloads: Map<string, Payload> | null = null;
  if (readsPayload(f.expr)) {
    payloads = new Map();
    for (const r of await reads.shape(entries.map((e) => e.point), true, false)) payloads.set(key(r.id), (r as { payload?: Payload }).payload ?? {});
  }
  // Each condition is decided by the shards, as a filter over the candidates: with the
  // payload indexes (full-text ones included) and the vectors, as a filter is anywhere.
  const ids = entries.map((e) => e.point.id);
  const holding = new Map<Filter, Set<string>>();
  await Promise.all(
    conditionsOf(f.expr).map(async (c) => {
      const found = await reads.matching({ must: [{ has_id: ids }, c] }, ids.length);
      holding.set(c, new Set(found.map(key)));
    }),
  );
  const out: T[] = [];
  for (const e of entries) {
    const payload = payloads === null ? {} : payloads.get(key(e.point.id));
    if (payload === undefined) continue;
    const k = key(e.point.id);
    const score = evaluate(f, { id: e.point.id, scores: e.scores, payload, holds: (c) => holding.get(c)?.has(k) === true });
    if (threshold !== null && !(score >= threshold)) continue;
    out.push({ ...e.point, score });
  }
  return out.sort(byScoreThenId).slice(0, keep);
}

/** The `using` vector of a record read with that vector (a multivector's rows flattened), or null when the point has none. */
export function vectorOf(v: VectorsOut | undefined, using: string): Float32Array | null {
  if (v === undefined) return null;
  let x: unknown = v;
  if (!Array.isArray(v)) x = (v as Record<string, unknown>)[using];
  else if (using !== '') return null;
  if (!Array.isArray(x) || x.length === 0) return null;
  if (Array.isArray(x[0])) return Float32Array.from((x as number[][]).flat());
  if (typeof x[0] !== 'number') return null;
  return Float32Array.from(x as number[]);
}

/**
 * A nearest query with maximal marginal relevance: the `candidates_limit` (default: the
 * level's `keep`) nearest points matching `filter`, then MMR's choice of `keep` of them,
 * each with its search score (the reference reports the score to the query, not MMR's).
 */
export async function mmrSearch<T extends Scored, L extends LevelOf>(
  reads: Reads<T>,
  q: { nearest: Example; mmr: Mmr },
  level: L,
  vectorOfQuery: VectorOf<T, L>,
  filter: Filter | null,
  exclude: PointKey[],
): Promise<T[]> {
  if (reads.isSparse(level.using)) throw new BadInputError('mmr: maximal marginal relevance over sparse vectors is not supported by Quiver; it works on dense vectors and multivectors');
  const distance = reads.distance(level.using);
  const { vector } = await (vectorOfQuery as unknown as (r: Reads<T>, q: { nearest: Example }, l: L) => Promise<{ vector: Float32Array }>)(reads, q, level);
  const limit = q.mmr.candidatesLimit ?? level.keep;
  const found = await reads.search({ using: level.using, vector, filter, limit, offset: 0, scoreThreshold: level.scoreThreshold, ...level.params, withPayload: false, withVector: false, exclude });
  if (found.length === 0 || level.keep === 0) return [];
  const shaped = await reads.shape(found, false, [level.using]);
  const vectors = new Map<string, Float32Array>();
  for (const r of shaped) {
    const v = vectorOf((r as { vector?: VectorsOut }).vector, level.using);
    if (v !== null) vectors.set(key(r.id), v);
  }
  const cands = found.filter((p) => vectors.has(key(p.id)));
  const chosen = mmrSelect(distance, vector, cands.map((p) => vectors.get(key(p.id))!), q.mmr.lambda, level.keep, reads.multivectorDim(level.using));
  return chosen.map((i) => cands[i]);
}
