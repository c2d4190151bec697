/**
 * Snapshot jobs (ours): a snapshot created or recovered with `wait=false` runs as a job
 * with an id, whose state, phase, bytes done and total, rate, ETA and error can be read
 * (`GET /snapshots/jobs`, `GET /snapshots/jobs/{id}`) while it runs and after it ended.
 *
 * Progress: the snapshot code reports bytes through `currentProgress()` (the job's
 * AsyncLocalStorage context, read once where an archive is written, downloaded or
 * unpacked): bytes count for the current phase (`writing`, `downloading`, `unpacking`),
 * whose total is known ahead (the archive's exact tar size when writing; the file's or
 * the answer's size when reading). When a job completes, `bytes_done` and
 * `bytes_total` are the size of the archive it wrote or read. While a job runs, a line
 * is logged and the metrics are updated every second (`PROGRESS_EVERY_MS`).
 *
 * Persistence: every job is written to `<storage>/snapshot-jobs.json` when it starts and
 * ends (atomically); at start-up a job the file shows running was cut short by the stop
 * and is marked failed ("interrupted: the node stopped while the job ran"). The last
 * `KEEP_FINISHED` finished jobs are kept.
 *
 * Owns: job ids, states, the progress arithmetic and the file. Must never: know HTTP or
 * do the snapshot work itself (snapshots.ts does, under the job's context).
 */

import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import * as path from 'node:path';
import type { Logger } from 'pino';

import { NotFoundError, QuiverError } from '../common/errors';
import { readJson, writeFileAtomic } from '../common/files';
import { runCounting, runScoped } from '../common/work';

export type JobKind = 'create_collection_snapshot' | 'create_shard_snapshot' | 'create_full_snapshot' | 'recover_collection_snapshot' | 'recover_shard_snapshot';
export type JobState = 'running' | 'completed' | 'failed';
/** Who started a job: a `wait=false` API call, or a snapshot schedule (schedule.ts). */
export type JobOrigin = 'api' | 'schedule';

/** A job as the API shows it. */
export interface JobView {
  id: string;
  kind: JobKind;
  origin: JobOrigin;
  /** For a scheduled shard snapshot in cluster mode: the run (slot) it was for, as consensus names it (ISO). Null otherwise. */
  due: string | null;
  collection: string | null;
  shard_id: number | null;
  state: JobState;
  /** What the job is doing: `starting`, `pinning`, `writing`, `writing <collection>`, `storing`, `downloading`, `unpacking`, `validating`, `applying`, `done`. */
  phase: string;
  started_at: string;
  finished_at: string | null;
  /** Bytes of the current phase done, and its total when known. */
  bytes_done: number;
  bytes_total: number | null;
  /** Bytes per second of the current phase (average since it began). */
  rate_bytes_per_sec: number;
  /** Seconds left in the current phase at that rate, when its total is known. */
  eta_sec: number | null;
  /**
   * Steps that move no archive bytes count their own units meanwhile (the bytes keep the
   * last byte phase's figures): `pinning` counts `checkpoint bytes` (the shards' state and
   * index files written for the snapshot), `applying` counts `points checked` (points and
   * vector labels reconciled while the recovered shards load). Null outside such a step.
   */
  unit: string | null;
  units_done: number | null;
  units_total: number | null;
  /** When the progress last changed. */
  updated_at: string;
  error: string | null;
  /** The job's outcome: the snapshot's description for a create, true for a recovery. */
  result: unknown;
}

/** What the snapshot code reports into. */
export interface JobProgress {
  /** A new phase that moves bytes; its bytes start at 0 (total: null when not known). */
  phase(name: string, total?: number | null): void;
  /** A new step that moves no bytes of its own: the name changes, the bytes stay. */
  step(name: string): void;
  /** A step that moves no archive bytes but counts its own units (total: null when not known ahead). */
  work(name: string, unit: string, total?: number | null): void;
  add(bytes: number): void;
  /** Units of the current `work` step done. */
  addUnits(units: number): void;
}

/** Progress is logged and the metrics updated this often while a job runs. */
export const PROGRESS_EVERY_MS = 1_000;
/** Finished jobs kept (the oldest forgotten first). */
export const KEEP_FINISHED = 100;
const FILE_NAME = 'snapshot-jobs.json';

const context = new AsyncLocalStorage<JobProgress>();

/** The progress of the job this code runs in, or null outside a job (wait=true). */
export function currentProgress(): JobProgress | null {
  return context.getStore() ?? null;
}

/** What a job registry reports to metrics (the API layer's Prometheus registry). */
export interface JobMetrics {
  started(kind: JobKind): void;
  finished(kind: JobKind, state: 'completed' | 'failed', bytes: number): void;
  /** The progress of the running jobs, as fractions of their phase (null: total unknown). */
  progress(running: Array<{ id: string; kind: JobKind; phase: string; bytes: number; ratio: number | null }>): void;
}

class Job implements JobProgress {
  phaseName = 'starting';
  phaseStarted = Date.now();
  bytes = 0;
  total: number | null = null;
  updated = Date.now();
  state: JobState = 'running';
  finished: number | null = null;
  error: string | null = null;
  result: unknown = null;
  /** The rate of a finished job, fixed when it ended. */
  finalRate: number | null = null;
  origin: JobOrigin = 'api';
  due: number | null = null;
  unit: string | null = null;
  unitsDone = 0;
  unitsTotal: number | null = null;

  constructor(
    readonly id: string,
    readonly kind: JobKind,
    readonly collection: string | null,
    readonly shardId: number | null,
    readonly started: number,
  ) {}

  phase(name: string, total: number | null = null): void {
    this.unit = null;
    this.phaseName = name;
    this.phaseStarted = Date.now();
    this.bytes = 0;
    this.total = total;
    this.updated = Date.now();
  }

  step(name: string): void {
    this.unit = null;
    this.phaseName = name;
    this.updated = Date.now();
  }

  work(name: string, unit: string, total: number | null = null): void {
    this.phaseName = name;
    this.unit = unit;
    this.unitsDone = 0;
    this.unitsTotal = total;
    this.updated = Date.now();
  }

  add(bytes: number): void {
    this.bytes += bytes;
    this.updated = Date.now();
  }

  addUnits(units: number): void {
    // Timers a job's work created (a recovered shard's flusher) keep its context: their counts go nowhere once it ended.
    if (this.unit === null || this.state !== 'running') return;
    this.unitsDone += units;
    this.updated = Date.now();
  }

  view(): JobView {
    const seconds = (Date.now() - this.phaseStarted) / 1000;
    const rate = this.finalRate ?? (seconds > 0 ? this.bytes / seconds : 0);
    let eta: number | null = null;
    if (this.state !== 'running') eta = this.state === 'completed' ? 0 : null;
    else if (this.total !== null && rate > 0) eta = Math.max(0, (this.total - this.bytes) / rate);
    return {
      id: this.id,
      kind: this.kind,
      origin: this.origin,
      due: this.due === null ? null : new Date(this.due).toISOString(),
      collection: this.collection,
      shard_id: this.shardId,
      state: this.state,
      phase: this.phaseName,
      started_at: new Date(this.started).toISOString(),
      finished_at: this.finished === null ? null : new Date(this.finished).toISOString(),
      bytes_done: this.bytes,
      bytes_total: this.total,
      rate_bytes_per_sec: Math.round(rate),
      eta_sec: eta === null ? null : +eta.toFixed(1),
      unit: this.unit,
      units_done: this.unit === null ? null : this.unitsDone,
      units_total: this.unit === null ? null : this.unitsTotal,
      updated_at: new Date(this.updated).toISOString(),
      error: this.error,
      result: this.result,
    };
  }

  static from(v: JobView): Job {
    const j = new Job(v.id, v.kind, v.collection, v.shard_id, Date.parse(v.started_at));
    j.phaseName = v.phase;
    j.bytes = v.bytes_done;
    j.total = v.bytes_total;
    j.updated = Date.parse(v.updated_at);
    j.state = v.state;
    j.finished = v.finished_at === null ? null : Date.parse(v.finished_at);
    j.error = v.error;
    j.result = v.result;
    j.finalRate = v.rate_bytes_per_sec;
    j.origin = v.origin ?? 'api';
    j.due = typeof v.due === 'string' ? Date.parse(v.due) : null;
    j.unit = v.unit ?? null;
    j.unitsDone = v.units_done ?? 0;
    j.unitsTotal = v.units_total ?? null;
    return j;
  }
}

export class SnapshotJobs {
  private readonly jobs = new Map<string, Job>();
  private ticker: NodeJS.Timeout | null = null;
  private closed = false;
  private writing: Promise<void> = Promise.resolve();

  private constructor(
    private readonly file: string,
    private readonly logger: Logger,
    private metrics: JobMetrics | null,
  ) {}

  /** The jobs of `storagePath`; jobs left running by a stop are marked failed (and saved so). */
  static async open(storagePath: string, logger: Logger): Promise<SnapshotJobs> {
    const jobs = new SnapshotJobs(path.join(storagePath, FILE_NAME), logger.child({ component: 'snapshot-jobs' }), null);
    const saved = await readJson<{ jobs?: JobView[] }>(jobs.file).catch((err: unknown) => {
      jobs.logger.warn({ err, file: jobs.file }, 'snapshot jobs file unreadable: starting with no jobs');
      return null;
    });
    let interrupted = 0;
    for (const v of saved?.jobs ?? []) {
      const j = Job.from(v);
      if (j.state === 'running') {
        j.state = 'failed';
        j.error = 'interrupted: the node stopped while the job ran';
        j.finished = Date.now();
        interrupted++;
      }
      jobs.jobs.set(j.id, j);
    }
    if (interrupted > 0) {
      jobs.logger.warn({ jobs: interrupted }, 'snapshot jobs interrupted by the last stop marked failed');
      await jobs.save();
    }
    return jobs;
  }

  /** Where the metrics go (set once the API's registry exists). */
  setMetrics(metrics: JobMetrics): void {
    this.metrics = metrics;
  }

  /**
   * Starts `work` as a job in the background, under the job's progress context, and
   * returns the job's id once the job is recorded (on disk too). `work` resolves with
   * the job's result.
   */
  async start(kind: JobKind, target: { collection?: string; shardId?: number }, work: () => Promise<unknown>, origin: JobOrigin = 'api'): Promise<string> {
    return (await this.launch(kind, target, work, origin)).id;
  }

  /** Runs `work` as a job and resolves with the job once it ended (completed or failed). `due`: the scheduled run it is for (cluster-schedule.ts). */
  async run(kind: JobKind, target: { collection?: string; shardId?: number }, work: () => Promise<unknown>, origin: JobOrigin, due: number | null = null): Promise<JobView> {
    const { id, finished } = await this.launch(kind, target, work, origin, due);
    await finished;
    return this.jobs.get(id)?.view() ?? this.get(id);
  }

  private async launch(kind: JobKind, target: { collection?: string; shardId?: number }, work: () => Promise<unknown>, origin: JobOrigin, due: number | null = null): Promise<{ id: string; finished: Promise<void> }> {
    const job = new Job(randomUUID(), kind, target.collection ?? null, target.shardId ?? null, Date.now());
    job.origin = origin;
    job.due = due;
    this.jobs.set(job.id, job);
    this.metrics?.started(kind);
    await this.save();
    this.logger.info({ job: job.id, kind, origin, collection: job.collection, shard: job.shardId, ...(due !== null ? { due: new Date(due).toISOString() } : {}) }, 'snapshot job started');
    this.tick();
    const finished = runScoped(context, job, async () => {
      try {
        if (this.closed) throw new Error('the node is stopping');
        // Units counted deep in the work (ts/common/work.ts) go to the job; they count only in a `work` step.
        const result = await runCounting((n) => job.addUnits(n), work);
        if (job.state !== 'running') return; // marked failed by close()
        job.result = result ?? true;
        job.state = 'completed';
        job.phaseName = 'done';
        job.unit = null;
      } catch (err) {
        if (job.state !== 'running') return; // marked failed by close()
        job.state = 'failed';
        job.error = err instanceof QuiverError ? err.message : `${(err as Error)?.message ?? String(err)}`;
      }
      job.finished = Date.now();
      job.updated = job.finished;
      job.finalRate = job.bytes / Math.max(1e-3, (job.finished - job.phaseStarted) / 1000);
      this.metrics?.finished(kind, job.state as 'completed' | 'failed', job.bytes);
      const v = job.view();
      if (job.state === 'completed') this.logger.info({ job: job.id, kind, bytes: v.bytes_done, seconds: (job.finished - job.started) / 1000 }, 'snapshot job completed');
      else this.logger.error({ job: job.id, kind, error: job.error }, 'snapshot job failed');
      this.forgetOld();
      await this.save().catch((err: unknown) => this.logger.error({ err }, 'snapshot jobs file not written'));
      this.report();
    });
    return { id: job.id, finished };
  }

  list(): JobView[] {
    return [...this.jobs.values()].sort((a, b) => b.started - a.started).map((j) => j.view());
  }

  get(id: string): JobView {
    const j = this.jobs.get(id);
    if (j === undefined) throw new NotFoundError(`Snapshot job ${id} not found`);
    return j.view();
  }

  /**
   * At a stop: jobs still running are marked failed (their work ends with the process)
   * and saved so; nothing is recorded after this.
   */
  async close(): Promise<void> {
    this.stopTicker();
    if (this.closed) return;
    this.closed = true;
    const cut = this.running();
    for (const j of cut) {
      j.state = 'failed';
      j.error = 'interrupted: the node stopped while the job ran';
      j.finished = Date.now();
      j.finalRate = 0;
    }
    if (cut.length > 0) this.logger.warn({ jobs: cut.map((j) => j.id) }, 'snapshot jobs interrupted by the stop');
    // A node that never ran a job leaves no file behind.
    if (this.jobs.size === 0) return;
    await this.save(true).catch((err: unknown) => this.logger.error({ err }, 'snapshot jobs file not written'));
  }

  private stopTicker(): void {
    if (this.ticker !== null) clearInterval(this.ticker);
    this.ticker = null;
  }

  private running(): Job[] {
    return [...this.jobs.values()].filter((j) => j.state === 'running');
  }

  /** Logs and measures the running jobs every PROGRESS_EVERY_MS while there are any. */
  private tick(): void {
    if (this.ticker !== null) return;
    this.ticker = setInterval(() => {
      this.report();
      for (const j of this.running()) {
        const v = j.view();
        this.logger.info({ job: j.id, kind: j.kind, phase: v.phase, bytes: v.bytes_done, of: v.bytes_total, bytesPerSec: v.rate_bytes_per_sec, etaSec: v.eta_sec }, 'snapshot job progress');
      }
      if (this.running().length === 0) this.stopTicker();
    }, PROGRESS_EVERY_MS);
    this.ticker.unref();
  }

  private report(): void {
    this.metrics?.progress(this.running().map((j) => ({ id: j.id, kind: j.kind, phase: j.phaseName, bytes: j.bytes, ratio: j.total ? Math.min(1, j.bytes / j.total) : null })));
  }

  private forgetOld(): void {
    const finished = [...this.jobs.values()].filter((j) => j.state !== 'running').sort((a, b) => a.started - b.started);
    for (const j of finished.slice(0, Math.max(0, finished.length - KEEP_FINISHED))) this.jobs.delete(j.id);
  }

  /** Writes every job to the file (one write at a time, in order). */
  private save(evenClosed = false): Promise<void> {
    if (this.closed && !evenClosed) return this.writing;
    const data = JSON.stringify({ jobs: [...this.jobs.values()].map((j) => j.view()) }, null, 1);
    this.writing = this.writing.catch(() => undefined).then(() => writeFileAtomic(this.file, data));
    return this.writing;
  }
}
