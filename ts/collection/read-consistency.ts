/**
 * Reading one shard from several of its replicas: how many must answer for a read
 * consistency, which replicas are asked and when, and how their answers become one.
 *
 * Owns: the levels of `?consistency=` as counts of answers (a factor n: n; `quorum`:
 * half plus one; `majority` and `all`: every replica); asking replicas in the order
 * given (this peer's first), the next one when a replica fails for reasons of its own
 * (`isReplicaFault`), extra ones at once (`read_fan_out_factor`) and one more when the
 * first round is slow (`read_fan_out_delay_ms`); turning several answers into one by
 * point version (the newest of each point wins) or, with `majority`, keeping only what
 * most answers hold. Must never: choose which replicas serve reads (ReplicaSet does, by
 * their states), know a transport, or answer from fewer replicas than the level needs.
 *
 * One replica asked for one answer (a single node) costs nothing: its call is returned
 * as it is, with no timer and no resolution.
 */

import { QuiverError, ShardUnavailableError, type ErrorKind } from '../common/errors';
import type { CollectionParams } from './config';
import { compareIds, type OrderedRecord, type PointId, type PointRecord, type ReadConsistency, type Replica, type ScoredRecord } from './replica';

/** Error kinds that describe the request, not the replica: every replica would answer the same, so a read does not try another. */
const REQUEST_FAULTS: ReadonlySet<string> = new Set<ErrorKind>(['bad_input', 'bad_request', 'not_found', 'validation', 'format', 'forbidden', 'already_exists']);

/**
 * Whether a replica's failure may be the replica's own (then another replica is asked,
 * and a replica that failed a write is marked Dead). Neither a request's fault nor
 * `write_unconfirmed` is: that replica applied the write, another one missed it.
 */
export function isReplicaFault(err: unknown): boolean {
  return !(err instanceof QuiverError && (REQUEST_FAULTS.has(err.kind) || err.kind === 'write_unconfirmed'));
}

/** A replica applied the write but one it forwards writes to missed it and could not be taken out (WriteUnconfirmedError, or its kind from another peer). */
export function isUnconfirmedWrite(err: unknown): boolean {
  return err instanceof QuiverError && err.kind === 'write_unconfirmed';
}

/** How answers are combined: `all` keeps what any answer holds (the newest version), `majority` what most answers hold. */
export type ResolveMode = 'all' | 'majority';

/** Replicas asked beyond those needed: `factor` at once, and one more after `delayMs` (0: never) when the read is still waiting. */
export interface FanOut {
  factor: number;
  delayMs: number;
}

/** A collection's fan-out settings; unset ones ask no extra replica. */
export function fanOutOf(params: Pick<CollectionParams, 'read_fan_out_factor' | 'read_fan_out_delay_ms'>): FanOut {
  return { factor: params.read_fan_out_factor ?? 0, delayMs: params.read_fan_out_delay_ms ?? 0 };
}

/** Node's timers take at most 2^31 - 1 ms (a longer one fires at once): a longer delay is never reached. */
const MAX_DELAY_MS = 2 ** 31 - 1;

/** Answers that must agree. */
function majorityOf(n: number): number {
  return Math.floor(n / 2) + 1;
}

/** How many answers a level needs out of `replicaCount` replicas, and how they are resolved (at least 1). */
export function answersNeeded(consistency: ReadConsistency, replicaCount: number): { needed: number; mode: ResolveMode } {
  if (consistency === 'majority') return { needed: Math.max(1, replicaCount), mode: 'majority' };
  if (consistency === 'all') return { needed: Math.max(1, replicaCount), mode: 'all' };
  if (consistency === 'quorum') return { needed: majorityOf(replicaCount), mode: 'all' };
  return { needed: Math.max(1, Math.min(consistency.factor, replicaCount)), mode: 'all' };
}

function label(c: ReadConsistency): string {
  return `\`${typeof c === 'object' ? c.factor : c}\``;
}

/**
 * Reads through `call` from `replicas` (in preference order) until the consistency's
 * number of answers is in, and resolves them into one with `resolve` (not called when
 * one answer is needed: it is the result).
 *
 * The first `needed + fanOut.factor` replicas are asked at once; a replica's own
 * failure asks the next unused one; a request fault (bad input, not found, ...) is
 * thrown at once. When `fanOut.delayMs` passes with the read still waiting, one more
 * replica is asked. The first `needed` answers win; later ones are dropped. When
 * `needed` answers can no longer come (too few replicas, too many failed) the read
 * fails with a ShardUnavailableError (503) naming `where`, the counts and the first failure.
 *
 * `replicaCount` is how many replicas the shard has, serving reads or not (the levels
 * count from it, as the reference does: `all` fails while a replica is down); it
 * defaults to the replicas given.
 */
export function readConsistent<T>(
  replicas: readonly Replica[],
  consistency: ReadConsistency,
  fanOut: FanOut,
  call: (r: Replica) => Promise<T>,
  resolve: (answers: T[], mode: ResolveMode) => T,
  where: string,
  replicaCount: number = replicas.length,
): Promise<T> {
  const { needed, mode } = answersNeeded(consistency, replicaCount);
  if (needed === 1 && replicas.length === 1) return call(replicas[0]);
  const notEnough = (answered: number, detail: string) =>
    new ShardUnavailableError(`${where} does not have enough active replicas for read consistency ${label(consistency)}: ${answered} of ${needed} needed answers; ${detail}`);
  if (replicas.length < needed) {
    return Promise.reject(notEnough(0, `${replicas.length} of ${replicaCount} replicas serve reads`));
  }

  return new Promise<T>((settleOk, settleErr) => {
    const answers: Array<{ at: number; value: T }> = [];
    let asked = 0;
    let pending = 0;
    let failed = 0;
    let firstFailure: unknown = null;
    let done = false;
    let timer: ReturnType<typeof setTimeout> | null = null;

    const finish = (settle: () => void): void => {
      done = true;
      if (timer !== null) clearTimeout(timer);
      timer = null;
      settle();
    };

    const answered = (at: number, value: T): void => {
      pending--;
      if (done) return;
      answers.push({ at, value });
      if (answers.length < needed) return;
      // In preference order, so the result does not depend on which replica was quicker.
      const values = answers.sort((a, b) => a.at - b.at).map((a) => a.value);
      finish(() => {
        try {
          settleOk(needed === 1 ? values[0] : resolve(values, mode));
        } catch (err) {
          settleErr(err);
        }
      });
    };

    const failedWith = (err: unknown): void => {
      pending--;
      if (done) return;
      if (!isReplicaFault(err)) return finish(() => settleErr(err));
      failed++;
      firstFailure ??= err;
      if (asked < replicas.length) ask();
      if (answers.length + pending + (replicas.length - asked) < needed) {
        const first = firstFailure instanceof Error ? firstFailure.message : String(firstFailure);
        finish(() => settleErr(notEnough(answers.length, `${failed} of ${replicas.length} replicas failed, the first with: ${first}`)));
      }
    };

    function ask(): void {
      const at = asked++;
      pending++;
      let p: Promise<T>;
      try {
        p = call(replicas[at]);
      } catch (err) {
        p = Promise.reject(err);
      }
      p.then((v) => answered(at, v), failedWith);
    }

    const first = Math.min(replicas.length, needed + Math.max(0, fanOut.factor));
    while (asked < first) ask();
    if (fanOut.delayMs > 0 && fanOut.delayMs <= MAX_DELAY_MS && asked < replicas.length) {
      timer = setTimeout(() => {
        timer = null;
        if (!done && asked < replicas.length) ask();
      }, fanOut.delayMs);
    }
  });
}

// -- resolution -------------------------------------------------------------------------
// Answers come in preference order. A point is known by its id; of several copies the
// highest version wins (on a tie, the earlier answer's). `majority` keeps a point only
// when most answers hold it (whatever their versions).

/** One record per id, the newest; in the order ids first appear. */
function newest<R extends { id: PointId; version: number }>(answers: ReadonlyArray<readonly R[]>, mode: ResolveMode): R[] {
  const best = new Map<PointId, R>();
  const holders = new Map<PointId, number>();
  for (const answer of answers) {
    for (const r of answer) {
      const had = best.get(r.id);
      // A Map keeps a key where it was first set, so replacing keeps the first answer's order.
      if (had === undefined || r.version > had.version) best.set(r.id, r);
      holders.set(r.id, (holders.get(r.id) ?? 0) + 1);
    }
  }
  const out = [...best.values()];
  if (mode === 'all') return out;
  const least = majorityOf(answers.length);
  return out.filter((r) => (holders.get(r.id) ?? 0) >= least);
}

/** Records by id: in the first answer's order (the request's), then ids only later answers have. */
export function resolveRetrieve(answers: PointRecord[][], mode: ResolveMode): PointRecord[] {
  return newest(answers, mode);
}

/** Search hits, best first (`higherIsBetter`: the distance's direction), at most `limit` (each answer is a replica's page). */
export function resolveSearch(limit: number, higherIsBetter: boolean): (answers: ScoredRecord[][], mode: ResolveMode) => ScoredRecord[] {
  return (answers, mode) =>
    newest(answers, mode)
      .sort(higherIsBetter ? (a, b) => b.score - a.score : (a, b) => a.score - b.score)
      .slice(0, limit);
}

/**
 * A page in id order, at most `limit`, and the id the next page starts from: the
 * smallest id beyond the page that any answer shows (a point past the page, or an
 * answer's own `next`), null when none does. An answer's `next` at or before the
 * page's last id (a replica whose page ended early on points the majority dropped)
 * is not taken, so pages never repeat a point.
 */
export function resolveScroll(
  limit: number,
): (answers: Array<{ points: PointRecord[]; next: PointId | null }>, mode: ResolveMode) => { points: PointRecord[]; next: PointId | null } {
  return (answers, mode) => {
    const all = newest(answers.map((a) => a.points), mode).sort((a, b) => compareIds(a.id, b.id));
    const points = all.slice(0, limit);
    const last = points.length > 0 ? points[points.length - 1].id : null;
    let next: PointId | null = all.length > limit ? all[limit].id : null;
    for (const a of answers) {
      if (a.next === null || (last !== null && compareIds(a.next, last) <= 0)) continue;
      if (next === null || compareIds(a.next, next) < 0) next = a.next;
    }
    return { points, next };
  };
}

/** Points in payload-value order (`direction` of the request's order_by), at most `limit`. */
export function resolveScrollOrdered(limit: number, direction: 'asc' | 'desc'): (answers: OrderedRecord[][], mode: ResolveMode) => OrderedRecord[] {
  return (answers, mode) =>
    newest(answers, mode)
      .sort(direction === 'desc' ? (a, b) => b.orderValue - a.orderValue : (a, b) => a.orderValue - b.orderValue)
      .slice(0, limit);
}

/** Counts: the smallest (`all`), or the median (`majority`; of an even number, the upper one). */
export function resolveCount(answers: number[], mode: ResolveMode): number {
  if (mode === 'all') return Math.min(...answers);
  const sorted = [...answers].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** Facet counts: each value's count resolved as resolveCount resolves counts (a value an answer lacks counts 0 there); zeros dropped. */
export function resolveFacet(answers: Array<Array<[string | number | boolean, number]>>, mode: ResolveMode): Array<[string | number | boolean, number]> {
  if (answers.length === 1) return answers[0];
  const per = new Map<string | number | boolean, number[]>();
  answers.forEach((a, i) => {
    for (const [v, n] of a) {
      let xs = per.get(v);
      if (!xs) per.set(v, (xs = new Array<number>(answers.length).fill(0)));
      xs[i] = n;
    }
  });
  const out: Array<[string | number | boolean, number]> = [];
  for (const [v, xs] of per) {
    const n = resolveCount(xs, mode);
    if (n > 0) out.push([v, n]);
  }
  return out;
}

/** Whether any point matches: in any answer (`all`), or in most answers (`majority`). */
export function resolveAnyMatch(answers: boolean[], mode: ResolveMode): boolean {
  if (mode === 'all') return answers.some((a) => a);
  return answers.filter((a) => a).length >= majorityOf(answers.length);
}
