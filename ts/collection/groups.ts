/**
 * Grouped queries (the query, search and recommend APIs' `/groups` forms): the best
 * `limit` groups of points sharing a value of the payload key `group_by`, each with its
 * best `group_size` hits, and optionally the point of another collection whose id is
 * the group's value (`with_lookup`).
 *
 * How: as the reference does, by repeated ordinary queries of the collection (so shards,
 * peers, filters, prefetches and every query kind work as they do without groups), each
 * asking only for the group key's payload and excluding the points already seen. First
 * rounds exclude points whose every value belongs to a group that is already full,
 * until `limit` groups are known; then rounds ask only for points of the best groups
 * that are not full yet. Unlike the reference, rounds go on (each asking twice as many
 * points as the one before) until the best groups are full or a round finds nothing,
 * so over an exact ranking the answer is the brute-force grouping of that ranking.
 * Queries over prefetches stop after MAX_HYBRID_ROUNDS rounds, as the reference's do
 * after ten, since each round fuses a different candidate set. The final hits' payload
 * and vectors are read once, at the end.
 *
 * Group values: a string or an integer; an array holds several (the point joins each
 * group once). A point with any other value under the key (a float, a bool, an object,
 * null, a nested array) is in no group, as the reference skips it. A JSON number with
 * an integral value is an integer here (payloads are JS values: `1.0` reads as `1`),
 * where the reference skips a float written `1.0`.
 *
 * Owns: the grouping and the rounds. Must never: parse a request body or reach a replica
 * except through the reads it is given.
 */

import { TimeoutError } from '../common/errors';
import { normalizePointId, type PointKey } from '../shard/id-tracker';
import { parseKey, rawValues, type Condition, type Filter, type PointId } from '../shard/filter';
import { MAX_ENGINE_COUNT } from '../shard/limits';
import type { Payload, WithPayload } from '../shard/payload-store';
import type { Prefetch, QueryRequest } from './query';
import type { ReadOptions, ScoredRecord, VectorsOut, WithVector } from './replica';
import type { ShardKey } from './shard-keys';

/** A hit as the API returns it (collection.ts's ScoredOut). */
type ScoredOut = ScoredRecord & { shard_key?: ShardKey };

/** A point as the API returns it (collection.ts's RecordOut). */
export interface RecordOut {
  id: number | string;
  payload?: Payload;
  vector?: VectorsOut;
  shard_key?: ShardKey;
}

/** The value a group shares: a string or an integer. */
export type GroupId = string | number;

/** `with_lookup`: the collection whose points have the groups' values as ids, and what to return of them. */
export interface WithLookup {
  collection: string;
  withPayload: WithPayload;
  withVector: WithVector;
}

/** A grouped query: `query.limit` is the number of groups. */
export interface GroupsRequest {
  query: QueryRequest;
  groupBy: string;
  groupSize: number;
  withLookup: WithLookup | null;
}

export interface PointGroup {
  id: GroupId;
  hits: Array<ScoredOut & { order_value?: number }>;
  lookup?: RecordOut;
}

/** Which scores are better: larger, smaller, or none (the order the collection answers in). */
export type ScoreOrder = 'desc' | 'asc' | null;

/** Rounds of a query over prefetches at most (the reference stops after 5 + 5). */
export const MAX_HYBRID_ROUNDS = 10;

/** What the rounds read through: the collection's own query (strict mode already passed), its records, another collection's. */
export interface GroupReads {
  query(req: QueryRequest, opts: ReadOptions): Promise<Array<ScoredOut & { order_value?: number }>>;
  /** Records of this collection by id text. */
  records(ids: PointKey[], withPayload: WithPayload, withVector: WithVector, opts: ReadOptions): Promise<Map<string, RecordOut>>;
  /** Records of the `with_lookup` collection by id text. */
  lookup(ids: PointKey[], withPayload: WithPayload, withVector: WithVector, opts: ReadOptions): Promise<Map<string, RecordOut>>;
}

type KeyPath = ReturnType<typeof parseKey>;

/** An integer the reference takes as a group id (an i64 or a u64). */
function isGroupInteger(v: number): boolean {
  return Number.isInteger(v) && v >= -(2 ** 63) && v < 2 ** 64;
}

/**
 * The groups a payload puts its point in, distinct, in the order of its values; null when
 * some value is neither a string nor an integer (the point is in no group).
 */
export function groupIdsOf(payload: unknown, path: KeyPath): GroupId[] | null {
  const out: GroupId[] = [];
  const seen = new Set<string>();
  for (const raw of rawValues(payload, path)) {
    for (const v of Array.isArray(raw) ? raw : [raw]) {
      if (typeof v === 'string' || (typeof v === 'number' && isGroupInteger(v))) {
        const k = groupKey(v);
        if (!seen.has(k)) {
          seen.add(k);
          out.push(v);
        }
      } else return null;
    }
  }
  return out;
}

function groupKey(id: GroupId): string {
  return typeof id === 'string' ? `s${id}` : `n${id}`;
}

interface Hit {
  hit: ScoredOut & { order_value?: number };
  seq: number;
}

interface Group {
  id: GroupId;
  hits: Hit[];
  ids: Set<string>;
}

/** The groups found so far. */
class Aggregator {
  private readonly groups = new Map<string, Group>();
  private seq = 0;
  /** Every point seen, in a group or not (excluded from later rounds). */
  readonly seen: PointId[] = [];
  private readonly seenText = new Set<string>();

  constructor(
    private readonly size: number,
    private readonly order: ScoreOrder,
  ) {}

  get count(): number {
    return this.groups.size;
  }

  private better(a: Hit, b: Hit): number {
    if (this.order === 'desc' && a.hit.score !== b.hit.score) return b.hit.score - a.hit.score;
    if (this.order === 'asc' && a.hit.score !== b.hit.score) return a.hit.score - b.hit.score;
    return a.seq - b.seq;
  }

  add(hit: ScoredOut & { order_value?: number }, ids: GroupId[] | null): void {
    const text = String(hit.id);
    if (!this.seenText.has(text)) {
      this.seenText.add(text);
      this.seen.push(hit.id);
    }
    if (ids === null) return;
    const h: Hit = { hit, seq: this.seq++ };
    for (const id of ids) {
      const k = groupKey(id);
      let g = this.groups.get(k);
      if (!g) this.groups.set(k, (g = { id, hits: [], ids: new Set() }));
      if (g.ids.has(text)) continue;
      g.ids.add(text);
      g.hits.push(h);
    }
  }

  full(g: Group): boolean {
    return g.hits.length >= this.size;
  }

  /** Ids of the full groups. */
  fullIds(): GroupId[] {
    return [...this.groups.values()].filter((g) => this.full(g)).map((g) => g.id);
  }

  /** The best `n` groups by their best hit (ties: the one found first), each with its hits in order. */
  best(n: number): Group[] {
    const ranked = [...this.groups.values()].map((g) => {
      const hits = [...g.hits].sort((a, b) => this.better(a, b));
      return { g, hits };
    });
    ranked.sort((a, b) => this.better(a.hits[0], b.hits[0]));
    return ranked.slice(0, n).map(({ g, hits }) => ({ ...g, hits: hits.slice(0, this.size) }));
  }
}

/** The conditions on the key that restrict a round to some groups: `except` (not only these) or `any` (one of these), per value type. */
function onGroups(key: string, ids: GroupId[], how: 'except' | 'any'): Condition[] {
  const strings = ids.filter((v): v is string => typeof v === 'string');
  const ints = ids.filter((v): v is number => typeof v === 'number');
  const out: Condition[] = [];
  if (ints.length > 0) out.push({ key, match: how === 'any' ? { any: ints } : { except: ints } });
  if (strings.length > 0) out.push({ key, match: how === 'any' ? { any: strings } : { except: strings } });
  return out;
}

/** `any` over several value types: one of the conditions holds. */
function anyOf(conds: Condition[]): Condition[] {
  return conds.length <= 1 ? conds : [{ should: conds }];
}

function roundFilter(user: Filter | null, key: string, groups: Condition[], seen: PointId[]): Filter {
  const must: Condition[] = [];
  if (user) must.push(user);
  must.push(...groups);
  const mustNot: Condition[] = [{ is_empty: { key } }];
  if (seen.length > 0) mustNot.push({ has_id: [...seen] });
  return { must, must_not: mustNot };
}

/** Prefetch limits grown by `factor` at every depth (the reference grows them by the number of groups). */
function scaled(ps: Prefetch[] | undefined, factor: number): Prefetch[] | undefined {
  if (ps === undefined) return undefined;
  return ps.map((p) => ({ ...p, limit: Math.min(p.limit * factor, MAX_ENGINE_COUNT), prefetch: scaled(p.prefetch, factor) ?? [] }));
}

/** `opts` with the time left of `deadline` (ms since the epoch), or a timeout when none is left. */
function remaining(opts: ReadOptions, deadline: number | null, total: number | null): ReadOptions {
  if (deadline === null) return opts;
  const left = (deadline - Date.now()) / 1000;
  if (left <= 0) throw new TimeoutError(`grouped query did not finish within ${total} s`);
  return { ...opts, timeout: left };
}

/** The groups of `req`, best first, hits best first, with payload, vectors and lookups as asked. */
export async function runGroups(reads: GroupReads, req: GroupsRequest, order: ScoreOrder, opts: ReadOptions): Promise<PointGroup[]> {
  const path = parseKey(req.groupBy, 'group_by');
  const limit = req.query.limit;
  const agg = new Aggregator(req.groupSize, order);
  const hybrid = (req.query.prefetch?.length ?? 0) > 0;
  const deadline = opts.timeout === null ? null : Date.now() + opts.timeout * 1000;
  // The top-level key is enough to read the group values (and always selectable).
  const keyPayload = [path[0].name];
  let batch = Math.min(limit * req.groupSize, MAX_ENGINE_COUNT);
  for (let round = 0; !hybrid || round < MAX_HYBRID_ROUNDS; round++) {
    let groups: Condition[];
    if (agg.count >= limit) {
      const unfilled = agg.best(limit).filter((g) => g.hits.length < req.groupSize).map((g) => g.id);
      if (unfilled.length === 0) break;
      groups = anyOf(onGroups(req.groupBy, unfilled, 'any'));
    } else {
      groups = onGroups(req.groupBy, agg.fullIds(), 'except');
    }
    const page = await reads.query(
      {
        ...req.query,
        filter: roundFilter(req.query.filter, req.groupBy, groups, agg.seen),
        limit: batch,
        offset: 0,
        withPayload: keyPayload,
        withVector: false,
        ...(hybrid ? { prefetch: scaled(req.query.prefetch, limit) } : {}),
      },
      remaining(opts, deadline, opts.timeout),
    );
    for (const p of page) agg.add(p, groupIdsOf(p.payload ?? {}, path));
    // A short page may be an approximate search's (a filtered graph search can find fewer
    // than there are): only an empty one says the candidates ran out.
    if (page.length === 0) break;
    batch = Math.min(batch * 2, MAX_ENGINE_COUNT);
  }

  const best = agg.best(limit);
  const wp = req.query.withPayload;
  const wv = req.query.withVector;
  const asked = !(wp === false || wp === undefined || wp === null) || !(wv === false || wv === undefined || wv === null);
  const ids = new Map<string, PointKey>();
  for (const g of best) for (const h of g.hits) ids.set(String(h.hit.id), normalizePointId(h.hit.id));
  const records = asked && ids.size > 0 ? await reads.records([...ids.values()], wp, wv, remaining(opts, deadline, opts.timeout)) : new Map<string, RecordOut>();

  let lookups = new Map<string, RecordOut>();
  const lookupIds = new Map<string, PointKey>();
  if (req.withLookup !== null) {
    for (const g of best) {
      const key = asPointKey(g.id);
      if (key !== null) lookupIds.set(groupKey(g.id), key);
    }
    const distinct = new Map([...lookupIds.values()].map((k) => [pointKeyText(k), k]));
    if (distinct.size > 0) lookups = await reads.lookup([...distinct.values()], req.withLookup.withPayload, req.withLookup.withVector, remaining(opts, deadline, opts.timeout));
  }

  return best.map((g) => {
    const out: PointGroup = { id: g.id, hits: g.hits.map(({ hit }) => shapeHit(hit, asked ? records.get(String(hit.id)) : undefined)) };
    const key = lookupIds.get(groupKey(g.id));
    const found = key === undefined ? undefined : lookups.get(pointKeyText(key));
    if (found !== undefined) out.lookup = found;
    return out;
  });
}

/** A hit as the API returns it: the round's id, version and score, the payload and vectors read at the end. */
function shapeHit(hit: ScoredOut & { order_value?: number }, rec: RecordOut | undefined): ScoredOut & { order_value?: number } {
  const out: ScoredOut & { order_value?: number } = { id: hit.id, version: hit.version, score: hit.score };
  if (rec?.payload !== undefined) out.payload = rec.payload;
  if (rec?.vector !== undefined) out.vector = rec.vector;
  if (hit.shard_key !== undefined) out.shard_key = hit.shard_key;
  if (hit.order_value !== undefined) out.order_value = hit.order_value;
  return out;
}

/** A group value as a point id: an unsigned integer or a UUID string; anything else has no lookup. */
function asPointKey(id: GroupId): PointKey | null {
  try {
    return normalizePointId(id);
  } catch {
    return null;
  }
}

function pointKeyText(k: PointKey): string {
  return k.kind === 'num' ? k.value.toString() : k.value;
}
