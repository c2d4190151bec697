/**
 * Scheduled snapshots (ours): `snapshots.schedule` in the configuration, each entry a
 * collection (or the full storage) snapshotted every `interval_sec` or on a `cron`
 * expression (cron-parser, UTC), with retention (`keep_last`, `max_age_sec`).
 *
 * - Each run is a snapshot job (jobs.ts, origin `schedule`): visible in
 *   `GET /snapshots/jobs`, written to the configured snapshot store (local or S3) like
 *   any snapshot, published only complete (a run killed midway leaves nothing listed).
 * - Timing: the next run is due one period after the last successful run (or after the
 *   schedule was first seen, for one that never succeeded). A run that fell due while
 *   the node was down runs at start ("missed run").
 * - Failures are logged, counted (metrics), and retried with backoff: 1 s, 2 s, 4 s ...
 *   up to 5 min, until a run succeeds; the regular timing then resumes.
 * - Retention runs only after a successful run, and only over the snapshots this
 *   schedule made (recorded in `<storage>/snapshot-schedules.json`; snapshots made any
 *   other way are never touched): a snapshot is kept when it is one of the newest
 *   `keep_last`, or younger than `max_age_sec` (either may be unset; with neither,
 *   nothing is deleted). So a failed run never deletes an older good snapshot, and the
 *   snapshot just made is always kept.
 * - Cluster mode has its own scheduler (cluster-schedule.ts): each shard once per run, by
 *   one peer claimed through consensus.
 *
 * Owns: timing, the state file, retention. Must never: write archives (snapshots.ts) or
 * know HTTP.
 */

import * as path from 'node:path';

import { CronExpressionParser } from 'cron-parser';
import type { Logger } from 'pino';

import { NotFoundError } from '../common/errors';
import { readJson, writeFileAtomic } from '../common/files';
import type { SnapshotSchedule } from '../config/types';
import type { SnapshotJobs } from './jobs';
import { Snapshots } from './snapshots';

const STATE_FILE = 'snapshot-schedules.json';
const BACKOFF_BASE_MS = 1_000;
const BACKOFF_MAX_MS = 5 * 60_000;
/** setTimeout's limit is about 24.8 days: longer waits are taken in steps. */
const MAX_TIMER_MS = 24 * 3600_000;

/** What the schedules report to metrics (the API layer's registry). */
export interface ScheduleMetrics {
  run(schedule: string, result: 'completed' | 'failed'): void;
  deleted(schedule: string, count: number): void;
  lastSuccess(schedule: string, at: number): void;
}

interface Made {
  name: string;
  /** The store folder it is in ('' for full snapshots): a schedule may name an alias, whose collection can change. */
  dir: string;
  /** Milliseconds since the epoch. */
  at: number;
}

interface ScheduleState {
  /** When the schedule was first seen (the base of its first run). */
  since: number;
  lastSuccess: number | null;
  made: Made[];
}

/** The name a schedule goes by in logs, metrics and the state file. */
export function scheduleKey(s: SnapshotSchedule): string {
  return s.collection === null ? 'full' : `collection:${s.collection}`;
}

/** The first due time strictly after `after` (ms). */
export function nextDue(s: SnapshotSchedule, after: number): number {
  if (s.interval_sec !== null) return after + s.interval_sec * 1000;
  const e = CronExpressionParser.parse(s.cron as string, { currentDate: new Date(after), tz: 'UTC' });
  return e.next().getTime();
}

/** The snapshots to delete of `made` (newest last) at `now`: those neither among the newest keep_last nor younger than max_age_sec. */
export function expired(s: SnapshotSchedule, made: readonly Made[], now: number): Made[] {
  if (s.keep_last === null && s.max_age_sec === null) return [];
  const newestFirst = [...made].sort((a, b) => b.at - a.at);
  return newestFirst.filter((m, i) => {
    const recentEnough = s.keep_last !== null && i < s.keep_last;
    const youngEnough = s.max_age_sec !== null && now - m.at < s.max_age_sec * 1000;
    return !(recentEnough || youngEnough) && i > 0;
  });
}

class Runner {
  private timer: NodeJS.Timeout | null = null;
  private failures = 0;
  private stopped = false;

  constructor(
    readonly schedule: SnapshotSchedule,
    readonly key: string,
    private readonly owner: SnapshotScheduler,
  ) {}

  /** Arms the timer for the next run: a missed one (due in the past) at once. */
  arm(): void {
    if (this.stopped) return;
    const state = this.owner.stateOf(this.key);
    const base = state.lastSuccess ?? state.since;
    let due = nextDue(this.schedule, base);
    if (this.failures > 0) due = Date.now() + Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (this.failures - 1));
    else if (due <= Date.now()) this.owner.logger.info({ schedule: this.key, due: new Date(due).toISOString() }, 'scheduled snapshot missed while the node was down: running it now');
    this.wait(due);
  }

  private wait(due: number): void {
    const ms = Math.max(0, due - Date.now());
    this.timer = setTimeout(() => {
      this.timer = null;
      if (due > Date.now()) this.wait(due);
      else void this.runOnce();
    }, Math.min(ms, MAX_TIMER_MS));
    this.timer.unref();
  }

  private async runOnce(): Promise<void> {
    const ok = await this.owner.runSchedule(this);
    if (this.stopped) return;
    this.failures = ok ? 0 : this.failures + 1;
    this.arm();
  }

  /** No more runs; a run in progress is not waited for (its job ends with the node: jobs.ts close). */
  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  get isStopped(): boolean {
    return this.stopped;
  }
}

export class SnapshotScheduler {
  private readonly state = new Map<string, ScheduleState>();
  private readonly runners: Runner[] = [];
  private writing: Promise<void> = Promise.resolve();
  readonly logger: Logger;

  private constructor(
    private readonly file: string,
    private readonly snapshots: Snapshots,
    private readonly jobs: SnapshotJobs,
    logger: Logger,
    private readonly metrics: ScheduleMetrics | null,
  ) {
    this.logger = logger.child({ component: 'snapshot-schedule' });
  }

  /** Starts every schedule of `schedules` (missed runs at once). */
  static async start(schedules: readonly SnapshotSchedule[], storagePath: string, snapshots: Snapshots, jobs: SnapshotJobs, logger: Logger, metrics: ScheduleMetrics | null): Promise<SnapshotScheduler> {
    const s = new SnapshotScheduler(path.join(storagePath, STATE_FILE), snapshots, jobs, logger, metrics);
    const saved = await readJson<Record<string, ScheduleState>>(s.file).catch((err: unknown) => {
      s.logger.warn({ err, file: s.file }, 'snapshot schedule state unreadable: schedules start afresh');
      return null;
    });
    const now = Date.now();
    for (const schedule of schedules) {
      const key = scheduleKey(schedule);
      const st = saved?.[key];
      s.state.set(key, st ? { since: st.since, lastSuccess: st.lastSuccess, made: (st.made ?? []).map((m) => ({ ...m, dir: m.dir ?? '' })) } : { since: now, lastSuccess: null, made: [] });
      if (st?.lastSuccess) metrics?.lastSuccess(key, st.lastSuccess);
    }
    // State of schedules no longer configured is kept (their snapshots stay; a schedule put back resumes its retention).
    for (const [key, st] of Object.entries(saved ?? {})) if (!s.state.has(key)) s.state.set(key, st);
    await s.save();
    for (const schedule of schedules) {
      const r = new Runner(schedule, scheduleKey(schedule), s);
      s.runners.push(r);
      s.logger.info({ schedule: r.key, every: schedule.interval_sec, cron: schedule.cron, keepLast: schedule.keep_last, maxAgeSec: schedule.max_age_sec }, 'snapshot schedule on');
      r.arm();
    }
    return s;
  }

  stateOf(key: string): ScheduleState {
    return this.state.get(key)!;
  }

  /** One run of a schedule: the snapshot as a job, then (on success) retention. Resolves whether the snapshot was made. */
  async runSchedule(r: Runner): Promise<boolean> {
    const s = r.schedule;
    let dir = '';
    const job = await this.jobs.run(
      s.collection === null ? 'create_full_snapshot' : 'create_collection_snapshot',
      s.collection === null ? {} : { collection: s.collection },
      async () => {
        if (s.collection === null) return this.snapshots.createFull();
        dir = Snapshots.collectionDir(this.snapshots.collectionName(s.collection));
        return this.snapshots.createCollection(s.collection);
      },
      'schedule',
    );
    if (job.state !== 'completed') {
      this.metrics?.run(r.key, 'failed');
      this.logger.error({ schedule: r.key, job: job.id, error: job.error }, 'scheduled snapshot failed: retrying with backoff; no snapshot deleted');
      return false;
    }
    const name = (job.result as { name: string }).name;
    const state = this.stateOf(r.key);
    const now = Date.now();
    state.made.push({ name, dir, at: now });
    state.lastSuccess = now;
    this.metrics?.run(r.key, 'completed');
    this.metrics?.lastSuccess(r.key, now);
    await this.save();
    this.logger.info({ schedule: r.key, snapshot: name }, 'scheduled snapshot made');
    if (r.isStopped) return true;
    await this.retain(r);
    return true;
  }

  /** Deletes this schedule's snapshots that retention no longer keeps (and forgets those already gone). */
  private async retain(r: Runner): Promise<void> {
    const state = this.stateOf(r.key);
    const drop = expired(r.schedule, state.made, Date.now());
    let deleted = 0;
    for (const m of drop) {
      try {
        await this.snapshots.delete(m.dir, m.name);
        deleted++;
      } catch (err) {
        if (!(err instanceof NotFoundError)) {
          this.logger.warn({ schedule: r.key, snapshot: m.name, err }, 'retention could not delete a snapshot: kept for the next run');
          continue;
        }
      }
      state.made = state.made.filter((x) => x.name !== m.name);
    }
    if (drop.length > 0) {
      await this.save();
      this.metrics?.deleted(r.key, deleted);
      this.logger.info({ schedule: r.key, deleted, kept: state.made.length }, 'snapshot retention applied');
    }
  }

  close(): void {
    for (const r of this.runners) r.stop();
  }

  private save(): Promise<void> {
    const data = JSON.stringify(Object.fromEntries(this.state), null, 1);
    this.writing = this.writing.catch(() => undefined).then(() => writeFileAtomic(this.file, data));
    return this.writing;
  }
}
