/**
 * Scheduled snapshots in cluster mode (ours; the single-node scheduler is schedule.ts).
 *
 * The schedule is cluster-wide: every peer has the same `snapshots.schedule`. Each run
 * snapshots every shard of the collection once, by one peer, into that peer's configured
 * snapshot store (local folder or S3), as a shard snapshot
 * (`<collection>/shards/<id>/<collection>-shard-<id>-<peer>-<time>.snapshot`: the peer id
 * keeps apart the snapshots two peers sharing one store make in the same second; names
 * written before it had none stay listed and are deleted by retention all the same).
 * Which peer is decided through consensus:
 *
 * - **Runs are slots.** A run's identity is its due time, the same on every peer: an
 *   interval schedule is due at every multiple of `interval_sec` since the epoch, a cron
 *   schedule at its cron times (UTC). The run due now is the latest slot not after now.
 * - **Claims.** A peer holding an Active replica of a shard proposes
 *   `claimScheduledRun` (collection/shard, slot, itself); the state machine grants the
 *   first claim of a slot and refuses every other (ts/storage/cluster-state.ts), so two
 *   peers never both run it. To avoid needless refused proposals the slot's preferred
 *   peer (one of the shard's Active replicas, by slot and shard: the work spreads) claims
 *   at once and the others only after `CLAIM_GRACE_MS`, or at once when the preferred
 *   peer does not answer health checks.
 * - **Take-over.** A claim whose peer has counted as down (three failed health checks in
 *   a row) for TAKEOVER_AFTER_MS, left the cluster or
 *   no longer holds an Active replica of the shard is taken over: another peer claims the
 *   same slot with `takeover_of` (granted only while that peer still holds the claim). A
 *   peer that restarts with a claim of its own unfinished takes it over from itself.
 * - **Outcome.** The claimant snapshots the shard as a snapshot job (origin `schedule`),
 *   then proposes `finishScheduledRun` with the snapshot (or none: failed). A failed run
 *   may be claimed again: by the peer that failed after a backoff (1 s, 2 s, 4 s ...
 *   5 min), by another peer holding an Active replica at once.
 * - **Missed runs.** A peer that starts (or a cluster that comes back) finds the slot due
 *   now not done and runs it at once: a schedule newly configured runs at its first start.
 * - **Retention per shard**, over the snapshots this schedule made of that shard
 *   wherever they are (the list is in the consensus state): after a successful run the
 *   claimant picks the ones `keep_last` / `max_age_sec` no longer keep (the snapshot just
 *   made always stays) and the finish moves them to the shard's `deleting` list; each
 *   peer deletes its own from its store and proposes `forgetScheduledSnapshot`. A failed
 *   run deletes nothing.
 *
 * Owns: slots, the choice of the claiming peer, take-over, retention's choice. Must
 * never: write archives (snapshots.ts does), or grant a claim itself (consensus does).
 */

import { CronExpressionParser } from 'cron-parser';
import type { Logger } from 'pino';

import { isActive } from '../collection/replica-state';
import { NotFoundError } from '../common/errors';
import type { SnapshotSchedule } from '../config/types';
import type { ScheduledShard, ScheduledSnapshot } from '../storage/cluster-state';
import type { MetadataConsensus } from '../storage/metadata-consensus';
import { DEAD_AFTER_MS } from '../transfer/supervisor';
import type { SnapshotJobs } from './jobs';
import { expired, scheduleKey, type ScheduleMetrics } from './schedule';
import { Snapshots } from './snapshots';

/**
 * How long (ms) a claim's holder must have counted as down (three failed health checks
 * in a row) before another peer takes its run over: the supervisor's DEAD_AFTER_MS. A
 * holder that misses checks while it runs (a loaded peer) would otherwise snapshot the
 * slot beside the peer that took it over.
 */
export const TAKEOVER_AFTER_MS = DEAD_AFTER_MS;

/**
 * Whether `self` takes over a run claimed by `holder`: its own claim left by a restart,
 * or a holder that left the cluster, holds no Active replica of the shard any more
 * (`active`), or has counted as down for TAKEOVER_AFTER_MS (`holderDownForMs`, from
 * its third failed health check in a row). A holder that stopped answering only
 * moments ago may still be running the slot (a loaded peer misses checks), so one
 * missed round is not enough.
 */
export function claimLeft(holder: string, self: string, holderInCluster: boolean, active: readonly string[], holderDownForMs: number): boolean {
  return holder === self || !holderInCluster || !active.includes(holder) || holderDownForMs >= TAKEOVER_AFTER_MS;
}

/** How often each peer looks at the schedules (claims, take-overs, deletions). */
export const TICK_MS = 500;
/** How long the peers that are not a slot's preferred one wait before claiming it. */
export const CLAIM_GRACE_MS = 3_000;
const BACKOFF_BASE_MS = 1_000;
const BACKOFF_MAX_MS = 5 * 60_000;
const PROPOSE_TIMEOUT_MS = 10_000;

/** The latest due time of `s` not after `now` (ms): the run due now. */
export function currentSlot(s: SnapshotSchedule, now: number): number {
  if (s.interval_sec !== null) {
    const period = s.interval_sec * 1000;
    return Math.floor(now / period) * period;
  }
  const e = CronExpressionParser.parse(s.cron as string, { currentDate: new Date(now + 1), tz: 'UTC' });
  return e.prev().getTime();
}

const shardKey = (collection: string, shard: number): string => `${collection}/${shard}`;

/** A small deterministic mix of a slot and a shard key (which Active replica is preferred). */
function pick(slot: number, key: string, n: number): number {
  let h = Math.floor(slot / 1000) >>> 0;
  for (let i = 0; i < key.length; i++) h = (Math.imul(h ^ key.charCodeAt(i), 16777619) + 0x9e3779b9) >>> 0;
  return h % n;
}

export interface ClusterScheduleDeps {
  consensus: MetadataConsensus;
  snapshots: Snapshots;
  jobs: SnapshotJobs;
  logger: Logger;
  metrics: ScheduleMetrics | null;
  /** Whether a peer answers health checks (it has not failed three in a row). */
  alive: (peer: string) => boolean;
  /** How long (ms) a peer has not answered health checks (0 while it answers). */
  downFor: (peer: string) => number;
}

export class ClusterSnapshotScheduler {
  private timer: NodeJS.Timeout | null = null;
  private stopped = false;
  private ticking = false;
  /** Runs this peer is doing now (shard keys per schedule). */
  private readonly running = new Set<string>();
  /** Deletions in progress here. */
  private readonly deleting = new Set<string>();
  /** After a failure here: failures in a row and when this peer may claim that shard's run again. */
  private readonly backoff = new Map<string, { failures: number; until: number }>();
  /**
   * Runs this process snapshotted whose finish consensus has not taken (the proposal
   * failed): the claim is still this peer's, so the next tick proposes the finish again
   * instead of taking its own claim for one left by a restart and snapshotting the slot a
   * second time.
   */
  private readonly unrecorded = new Map<string, { slot: number; made: ScheduledSnapshot; drop: string[] }>();
  private readonly logger: Logger;

  private constructor(
    private readonly schedules: readonly SnapshotSchedule[],
    private readonly deps: ClusterScheduleDeps,
  ) {
    this.logger = deps.logger.child({ component: 'snapshot-schedule' });
  }

  static start(schedules: readonly SnapshotSchedule[], deps: ClusterScheduleDeps): ClusterSnapshotScheduler {
    const s = new ClusterSnapshotScheduler(schedules, deps);
    for (const sc of schedules) {
      s.logger.info({ schedule: scheduleKey(sc), every: sc.interval_sec, cron: sc.cron, keepLast: sc.keep_last, maxAgeSec: sc.max_age_sec, mode: 'cluster' }, 'snapshot schedule on: each shard by one peer, claimed through consensus');
    }
    s.arm();
    return s;
  }

  private get self(): string {
    return this.deps.consensus.peerId;
  }

  private arm(): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      void this.tick().finally(() => this.arm());
    }, TICK_MS);
    this.timer.unref();
  }

  close(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  private async tick(): Promise<void> {
    if (this.ticking || this.stopped || !this.deps.consensus.ready()) return;
    this.ticking = true;
    try {
      const now = Date.now();
      for (const s of this.schedules) {
        if (s.collection === null) continue; // refused by the configuration check in cluster mode
        const sk = scheduleKey(s);
        const state = this.deps.consensus.clusterState;
        const collection = state.resolve(s.collection);
        // Deletions retention left to this peer, whatever collection they were of.
        for (const [key, runs] of Object.entries(state.scheduledAll()[sk] ?? {})) this.deleteOwn(sk, key, runs);
        if (collection === undefined) continue;
        const slot = currentSlot(s, now);
        for (const shard of state.collection(collection)!.shards) {
          const key = shardKey(collection, shard.id);
          const runKey = `${sk} ${key}`;
          if (this.running.has(runKey)) continue;
          const rec = state.scheduledShard(sk, key);
          if (rec !== undefined && rec.slot > slot) continue;
          if (rec !== undefined && rec.slot === slot && rec.state === 'done') continue;
          if (!isActive(shard.replicas[this.self] ?? 'Dead')) continue;
          const active = Object.keys(shard.replicas)
            .filter((p) => isActive(shard.replicas[p]) && Object.prototype.hasOwnProperty.call(state.peers, p))
            .sort();
          const pending = this.unrecorded.get(runKey);
          if (pending !== undefined) {
            if (rec?.slot === pending.slot && rec.state === 'claimed' && rec.peer === this.self) {
              this.running.add(runKey);
              void this.record(sk, key, pending.slot, pending.made, pending.drop).finally(() => this.running.delete(runKey));
              continue;
            }
            this.unrecorded.delete(runKey); // the claim moved on: the snapshot stays, outside retention
          }
          let takeoverOf: string | undefined;
          if (rec !== undefined && rec.slot === slot && rec.state === 'claimed') {
            const holder = rec.peer;
            if (!claimLeft(holder, this.self, Object.prototype.hasOwnProperty.call(state.peers, holder), active, this.deps.downFor(holder))) continue;
            takeoverOf = holder;
          } else {
            const b = this.backoff.get(runKey);
            if (b !== undefined && now < b.until) continue;
            // The preferred peer claims at once; the others once it is down, or after the grace.
            const preferred = active[pick(slot, key, active.length)];
            if (preferred !== this.self && this.deps.alive(preferred) && now - slot < CLAIM_GRACE_MS) continue;
          }
          this.running.add(runKey);
          void this.claimAndRun(s, sk, collection, shard.id, key, slot, takeoverOf).finally(() => this.running.delete(runKey));
        }
      }
    } catch (err) {
      this.logger.warn({ err }, 'snapshot schedule: a look at the schedules failed; trying again');
    } finally {
      this.ticking = false;
    }
  }

  private async claimAndRun(s: SnapshotSchedule, sk: string, collection: string, shard: number, key: string, slot: number, takeoverOf: string | undefined): Promise<void> {
    const c = this.deps.consensus;
    try {
      await c.propose({ op: 'claimScheduledRun', schedule: sk, key, slot, peer: this.self, ...(takeoverOf !== undefined ? { takeover_of: takeoverOf } : {}) }, PROPOSE_TIMEOUT_MS);
    } catch (err) {
      // Refused: another peer has it (the usual case), or consensus is unavailable (tried again next tick).
      this.logger.debug({ schedule: sk, shard: key, slot: new Date(slot).toISOString(), err: (err as Error).message }, 'snapshot schedule: run not claimed');
      return;
    }
    const due = new Date(slot).toISOString();
    if (takeoverOf !== undefined) this.logger.warn({ schedule: sk, shard: key, due, from: takeoverOf }, takeoverOf === this.self ? 'scheduled snapshot: resuming a run this peer claimed before it stopped' : 'scheduled snapshot: taking over the run of a peer that is down');
    else if (Date.now() - slot > CLAIM_GRACE_MS + TICK_MS * 4) this.logger.info({ schedule: sk, shard: key, due }, 'scheduled snapshot missed while the cluster was down: running it now');
    const dir = Snapshots.shardDir(collection, shard);
    const job = await this.deps.jobs.run('create_shard_snapshot', { collection, shardId: shard }, () => this.deps.snapshots.createShard(collection, shard, this.self), 'schedule', slot);
    const runKey = `${sk} ${key}`;
    if (job.state !== 'completed') {
      const b = this.backoff.get(runKey) ?? { failures: 0, until: 0 };
      b.failures++;
      b.until = Date.now() + Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (b.failures - 1));
      this.backoff.set(runKey, b);
      this.deps.metrics?.run(sk, 'failed');
      this.logger.error({ schedule: sk, shard: key, due, job: job.id, error: job.error }, 'scheduled snapshot failed: retrying with backoff; no snapshot deleted');
      await c.propose({ op: 'finishScheduledRun', schedule: sk, key, slot, peer: this.self, made: null, drop: [] }, PROPOSE_TIMEOUT_MS).catch((err: unknown) => {
        this.logger.warn({ schedule: sk, shard: key, err }, 'scheduled snapshot: could not record the failure (the run is taken over when this peer is down)');
      });
      return;
    }
    this.backoff.delete(runKey);
    const now = Date.now();
    const made: ScheduledSnapshot = { name: (job.result as { name: string }).name, peer: this.self, at: now };
    const kept = c.clusterState.scheduledShard(sk, key)?.made ?? [];
    const drop = expired(s, [...kept, made].map((m) => ({ name: m.name, dir, at: m.at })), now).map((m) => m.name);
    await this.record(sk, key, slot, made, drop);
  }

  /** Proposes the finish of a run this process snapshotted; when consensus does not take it, the next tick tries again while the claim is still this peer's. */
  private async record(sk: string, key: string, slot: number, made: ScheduledSnapshot, drop: string[]): Promise<void> {
    const runKey = `${sk} ${key}`;
    try {
      await this.deps.consensus.propose({ op: 'finishScheduledRun', schedule: sk, key, slot, peer: this.self, made, drop }, PROPOSE_TIMEOUT_MS);
    } catch (err) {
      // The snapshot exists but is not recorded yet: retention does not see it until it is (kept, outside retention, if the claim moves on first).
      if (!this.unrecorded.has(runKey)) this.logger.error({ schedule: sk, shard: key, snapshot: made.name, err }, 'scheduled snapshot made but not recorded through consensus: trying again while the claim is this peer\'s; otherwise it is kept, outside retention');
      this.unrecorded.set(runKey, { slot, made, drop });
      return;
    }
    this.unrecorded.delete(runKey);
    this.deps.metrics?.run(sk, 'completed');
    this.deps.metrics?.lastSuccess(sk, made.at);
    this.logger.info({ schedule: sk, shard: key, due: new Date(slot).toISOString(), snapshot: made.name, dropped: drop.length }, 'scheduled snapshot made');
  }

  /** Deletes from this peer's store the snapshots of a shard that retention dropped and that are this peer's. */
  private deleteOwn(sk: string, key: string, runs: ScheduledShard): void {
    for (const m of runs.deleting) {
      if (m.peer !== this.self) continue;
      const id = `${sk} ${key} ${m.name}`;
      if (this.deleting.has(id)) continue;
      this.deleting.add(id);
      const slash = key.lastIndexOf('/');
      const dir = Snapshots.shardDir(key.slice(0, slash), Number(key.slice(slash + 1)));
      void (async () => {
        try {
          await this.deps.snapshots.delete(dir, m.name).catch((err: unknown) => {
            if (!(err instanceof NotFoundError)) throw err;
          });
          this.deps.metrics?.deleted(sk, 1);
          await this.deps.consensus.propose({ op: 'forgetScheduledSnapshot', schedule: sk, key, name: m.name, peer: this.self }, PROPOSE_TIMEOUT_MS);
          this.logger.info({ schedule: sk, shard: key, snapshot: m.name }, 'snapshot retention: deleted');
        } catch (err) {
          this.logger.warn({ schedule: sk, shard: key, snapshot: m.name, err }, 'snapshot retention could not delete a snapshot: trying again');
        } finally {
          this.deleting.delete(id);
        }
      })();
    }
  }
}
