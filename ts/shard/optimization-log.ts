/**
 * What `GET /collections/{name}/optimizations` reports of a vector store's optimizer
 * jobs (ts/shard/vector-store.ts): the running job with its progress, the last finished
 * ones, and a stable id for each engine index (the reference's segments).
 *
 * Owns: those records and their reference shapes (Optimization, ProgressTree,
 * OptimizationSegmentInfo). Must never: start or stop a job.
 */

import { randomUUID } from 'node:crypto';

/** The reference's OptimizationSegmentInfo: an engine index and its live points. */
export interface SegmentInfo {
  uuid: string;
  points_count: number;
}

export type TrackerStatus = 'optimizing' | 'done' | { cancelled: string } | { error: string };

/** The reference's ProgressTree. */
export interface ProgressTree {
  name: string;
  started_at?: string | null;
  finished_at?: string | null;
  duration_sec?: number | null;
  done?: number | null;
  total?: number | null;
  children?: ProgressTree[];
}

/** The reference's Optimization. */
export interface OptimizationInfo {
  uuid: string;
  optimizer: string;
  status: TrackerStatus;
  segments: SegmentInfo[];
  progress: ProgressTree;
}

/** The reference's PendingOptimization. */
export interface PendingInfo {
  optimizer: string;
  segments: SegmentInfo[];
}

const ids = new WeakMap<object, string>();

/** A stable id of an engine index for as long as it lives. */
export function segmentUuid(index: object): string {
  let id = ids.get(index);
  if (id === undefined) {
    id = randomUUID();
    ids.set(index, id);
  }
  return id;
}

/** How many finished jobs a store remembers (the reference's default `completed_limit`). */
const KEEP_COMPLETED = 16;

/** One store's running job and its last finished ones. */
export class OptimizationLog {
  private current: { info: OptimizationInfo; started: number } | null = null;
  private readonly finished: OptimizationInfo[] = [];

  start(optimizer: string, segments: SegmentInfo[], total: number): void {
    const started = Date.now();
    this.current = {
      started,
      info: { uuid: randomUUID(), optimizer, status: 'optimizing', segments, progress: { name: optimizer, started_at: new Date(started).toISOString(), done: 0, total, children: [] } },
    };
  }

  progress(done: number, total: number): void {
    if (this.current === null) return;
    this.current.info.progress.done = done;
    this.current.info.progress.total = total;
  }

  end(status: TrackerStatus): void {
    const c = this.current;
    if (c === null) return;
    this.current = null;
    const now = Date.now();
    const done = status === 'done' ? c.info.progress.total : c.info.progress.done;
    const info: OptimizationInfo = { ...c.info, status, progress: { ...c.info.progress, done, finished_at: new Date(now).toISOString(), duration_sec: (now - c.started) / 1000 } };
    this.finished.unshift(info);
    if (this.finished.length > KEEP_COMPLETED) this.finished.length = KEEP_COMPLETED;
  }

  running(): OptimizationInfo | null {
    return this.current === null ? null : structuredClone(this.current.info);
  }

  /** The finished jobs, newest first. */
  completed(): OptimizationInfo[] {
    return structuredClone(this.finished);
  }
}
