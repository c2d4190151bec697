/**
 * Counters of the REST requests served: Prometheus metrics (prom-client) and the
 * per-route figures `/telemetry` reports.
 *
 * Owns: the process's metric registry and what each request adds to it. Must never:
 * label by raw path (one time series per collection name or point id would grow
 * without bound): requests are labelled by route pattern, and those that matched no
 * route share one label.
 */

import { REPLICA_STATES } from '../../collection/replica-state';
import type { JobMetrics } from '../../snapshots/jobs';
import type { ScheduleMetrics } from '../../snapshots/schedule';
import type { ReplicationView } from '../../transfer/view';
import type { Logger } from 'pino';
import { Counter, Gauge, Registry, collectDefaultMetrics } from 'prom-client';

import { DurationHistogram } from '../duration-histogram';

/** What the storage gauges read at scrape time. */
export interface StorageFigures {
  collections(): Array<{ name: string; points: number; indexedVectors: number; segments: number; optimizing: boolean }>;
}

/** Label of requests that matched no route. */
export const UNMATCHED_ROUTE = 'unmatched';

export interface RouteFigures {
  count: number;
  avg_duration_micros: number;
}

interface RouteTally {
  count: number;
  totalMicros: number;
}

/** One (method, route, status): its labels, answers not yet added to the counter, its histogram child and its route's figures. */
interface Series {
  readonly labels: { method: string; endpoint: string; status: string };
  uncounted: number;
  readonly durations: { observe(v: number): void };
  /** The figures of its "METHOD route" (shared by its statuses); null for unmatched requests. */
  readonly figures: RouteTally | null;
}

export class RequestStats {
  readonly registry = new Registry();
  private readonly responses: Counter<'method' | 'endpoint' | 'status'>;
  private readonly durations: DurationHistogram;
  /** Keyed by "METHOD /route/{pattern}": count and total duration. */
  private readonly perRoute = new Map<string, RouteTally>();
  /**
   * Each (method, route, status) seen, by method, then route (null: unmatched), then
   * status: no key string is built per request. `order` holds them as first seen.
   */
  private readonly series = new Map<string, Map<string | null, Map<number, Series>>>();
  private readonly order: Series[] = [];

  private readonly prefix: string;

  constructor(metricsPrefix: string | null) {
    const prefix = metricsPrefix ?? '';
    this.prefix = prefix;
    collectDefaultMetrics({ register: this.registry, prefix });
    const order = this.order;
    this.responses = new Counter({
      name: `${prefix}rest_responses_total`,
      help: 'REST requests answered, by method, route pattern and status code',
      labelNames: ['method', 'endpoint', 'status'],
      registers: [this.registry],
      // Counted in `record` and added here, when the counter is read (a scrape): an
      // inc() per request hashes the labels every time.
      collect() {
        for (const s of order) {
          if (s.uncounted === 0) continue;
          this.inc(s.labels, s.uncounted);
          s.uncounted = 0;
        }
      },
    });
    this.durations = new DurationHistogram(
      `${prefix}rest_responses_duration_seconds`,
      'Time to answer a REST request, by method, route pattern and status code',
      [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      this.registry,
    );
  }

  /** Gauges read from the storage at each scrape (collections, points, optimizer state). */
  addStorageGauges(storage: StorageFigures): void {
    const prefix = this.prefix;
    const reg = [this.registry];
    new Gauge({
      name: `${prefix}collections_total`,
      help: 'Collections on this node',
      registers: reg,
      collect() {
        this.set(storage.collections().length);
      },
    });
    const perCollection = (name: string, help: string, value: (c: ReturnType<StorageFigures['collections']>[number]) => number) =>
      new Gauge({
        name: `${prefix}${name}`,
        help,
        labelNames: ['collection'],
        registers: reg,
        collect() {
          this.reset();
          for (const c of storage.collections()) this.set({ collection: c.name }, value(c));
        },
      });
    perCollection('collection_points', 'Points stored in a collection on this node', (c) => c.points);
    perCollection('collection_indexed_vectors', 'Vectors in HNSW indexes (the rest are searched by exact scan)', (c) => c.indexedVectors);
    perCollection('collection_segments', 'Engine indexes (segments) of a collection on this node', (c) => c.segments);
    perCollection('collection_optimizing', '1 while an optimizer job (index build, vacuum) is due or running (status yellow)', (c) => (c.optimizing ? 1 : 0));
  }

  /**
   * Snapshot jobs (ts/snapshots/jobs.ts): started and finished counts by kind (and
   * outcome), bytes of finished jobs, and for each running job (only those: the label
   * set stays bounded) its bytes and the fraction of its phase done, updated every second.
   */
  snapshotJobMetrics(): JobMetrics {
    const prefix = this.prefix;
    const registers = [this.registry];
    const started = new Counter({ name: `${prefix}snapshot_jobs_started_total`, help: 'Snapshot jobs started (wait=false creates and recoveries), by kind', labelNames: ['kind'], registers });
    const finished = new Counter({ name: `${prefix}snapshot_jobs_finished_total`, help: 'Snapshot jobs finished, by kind and state (completed, failed)', labelNames: ['kind', 'state'], registers });
    const bytes = new Counter({ name: `${prefix}snapshot_job_bytes_total`, help: 'Archive bytes written or read by finished snapshot jobs, by kind', labelNames: ['kind'], registers });
    const running = new Gauge({ name: `${prefix}snapshot_jobs_running`, help: 'Snapshot jobs running', registers });
    const done = new Gauge({ name: `${prefix}snapshot_job_bytes_done`, help: 'Bytes done in the current phase of a running snapshot job', labelNames: ['job_id', 'kind', 'phase'], registers });
    const ratio = new Gauge({ name: `${prefix}snapshot_job_progress_ratio`, help: 'Fraction of the current phase of a running snapshot job done (absent while its total is unknown)', labelNames: ['job_id', 'kind', 'phase'], registers });
    return {
      started: (kind) => started.inc({ kind }),
      finished: (kind, state, n) => {
        finished.inc({ kind, state });
        bytes.inc({ kind }, n);
      },
      progress: (jobs) => {
        running.set(jobs.length);
        done.reset();
        ratio.reset();
        for (const j of jobs) {
          done.set({ job_id: j.id, kind: j.kind, phase: j.phase }, j.bytes);
          if (j.ratio !== null) ratio.set({ job_id: j.id, kind: j.kind, phase: j.phase }, j.ratio);
        }
      },
    };
  }

  /** Scheduled snapshots (ts/snapshots/schedule.ts), labelled by schedule (`collection:<name>` or `full`: bounded by the configuration). */
  snapshotScheduleMetrics(): ScheduleMetrics {
    const prefix = this.prefix;
    const registers = [this.registry];
    const runs = new Counter({ name: `${prefix}snapshot_schedule_runs_total`, help: 'Runs of snapshot schedules, by schedule and result (completed, failed)', labelNames: ['schedule', 'result'], registers });
    const deleted = new Counter({ name: `${prefix}snapshot_schedule_deleted_total`, help: 'Snapshots deleted by the retention of a schedule', labelNames: ['schedule'], registers });
    const last = new Gauge({ name: `${prefix}snapshot_schedule_last_success_timestamp_seconds`, help: 'When a schedule last made a snapshot (Unix time)', labelNames: ['schedule'], registers });
    return {
      run: (schedule, result) => runs.inc({ schedule, result }),
      deleted: (schedule, n) => deleted.inc({ schedule }, n),
      lastSuccess: (schedule, at) => last.set({ schedule }, at / 1000),
    };
  }

  /** The HTTP front's connections by state (front.ts), and the requests it answered itself. */
  addFrontMetrics(front: { counts(): Record<'idle' | 'reading' | 'answering' | 'relayed', number>; served: number }): void {
    new Gauge({
      name: `${this.prefix}rest_connections`,
      help: 'REST connections the HTTP front holds, by state: idle (between requests), reading (a request), answering (the lane answers), relayed (node:http answers)',
      labelNames: ['state'],
      registers: [this.registry],
      collect() {
        for (const [state, n] of Object.entries(front.counts())) this.set({ state }, n);
      },
    });
    new Counter({
      name: `${this.prefix}rest_front_answered_total`,
      help: 'Requests the HTTP front read and answered itself (the direct lane), without node:http',
      registers: [this.registry],
      collect() {
        // The front keeps the tally; the counter shows it.
        this.reset();
        this.inc(front.served);
      },
    });
  }

  /** Consensus figures read at each scrape (as the reference names them); cluster_enabled 0 on a single node. */
  addClusterGauges(cluster: (() => { peers: number; term: number; commit: number; pending: number; voter: boolean; leader: boolean }) | null): void {
    const prefix = this.prefix;
    const reg = [this.registry];
    const gauge = (name: string, help: string, value: (f: NonNullable<ReturnType<NonNullable<typeof cluster>>>) => number) =>
      new Gauge({
        name: `${prefix}${name}`,
        help,
        registers: reg,
        collect() {
          if (cluster !== null) this.set(value(cluster()));
        },
      });
    new Gauge({
      name: `${prefix}cluster_enabled`,
      help: '1 when this node runs in cluster mode',
      registers: reg,
      collect() {
        this.set(cluster === null ? 0 : 1);
      },
    });
    if (cluster === null) return;
    gauge('cluster_peers_total', 'Peers in the cluster', (f) => f.peers);
    gauge('cluster_term', 'Current consensus term', (f) => f.term);
    gauge('cluster_commit', 'Index of the last committed consensus entry this peer knows', (f) => f.commit);
    gauge('cluster_pending_operations_total', 'Consensus entries committed but not applied here, plus calls waiting for theirs', (f) => f.pending);
    gauge('cluster_voter', '1 when this peer votes (0 while it is a learner)', (f) => (f.voter ? 1 : 0));
    gauge('cluster_leader', '1 when this peer is the leader', (f) => (f.leader ? 1 : 0));
  }

  /** Cluster mode: replicas per state, transfers this peer drives with their progress, calls between peers. */
  addReplicationMetrics(states: () => Record<string, number>, view: ReplicationView): void {
    const prefix = this.prefix;
    const reg = [this.registry];
    new Gauge({
      name: `${prefix}cluster_replicas`,
      help: 'Replicas of every shard of every collection, by state, as this peer knows the placement',
      labelNames: ['state'],
      registers: reg,
      collect() {
        this.reset();
        for (const st of REPLICA_STATES) this.set({ state: st }, 0);
        for (const [st, n] of Object.entries(states())) this.set({ state: st }, n);
      },
    });
    new Gauge({
      name: `${prefix}cluster_transfers_outgoing`,
      help: 'Shard transfers this peer is the source of',
      registers: reg,
      collect() {
        this.set(view.transfers().length);
      },
    });
    new Gauge({
      name: `${prefix}cluster_transfer_points_sent`,
      help: 'Points (operations, for wal_delta) sent so far by a shard transfer this peer drives',
      labelNames: ['collection', 'shard', 'to', 'method'],
      registers: reg,
      collect() {
        this.reset();
        for (const t of view.transfers()) this.set({ collection: t.collection, shard: String(t.shard), to: t.to, method: t.method }, t.pointsSent);
      },
    });
    new Gauge({
      name: `${prefix}cluster_transfers_finished_total`,
      help: 'Shard transfers this peer drove that finished (the target Active), by method',
      labelNames: ['method'],
      registers: reg,
      collect() {
        this.reset();
        for (const [method, n] of Object.entries(view.transferOutcomes().finished)) this.set({ method }, n);
      },
    });
    new Gauge({
      name: `${prefix}cluster_transfers_failed_total`,
      help: 'Shard transfers this peer drove that failed and were aborted, by method',
      labelNames: ['method'],
      registers: reg,
      collect() {
        this.reset();
        for (const [method, n] of Object.entries(view.transferOutcomes().failed)) this.set({ method }, n);
      },
    });
    new Gauge({
      name: `${prefix}cluster_transfers_switched_total`,
      help: 'wal_delta transfers this peer drove that went on as stream_records (the WAL could not resolve the difference)',
      registers: reg,
      collect() {
        this.set(view.transferOutcomes().switched);
      },
    });
    new Gauge({
      name: `${prefix}cluster_transfer_bytes_sent`,
      help: 'Snapshot archive bytes a shard transfer by snapshot this peer drives has sent (known once the target restored it)',
      labelNames: ['collection', 'shard', 'to', 'method'],
      registers: reg,
      collect() {
        this.reset();
        for (const t of view.transfers()) this.set({ collection: t.collection, shard: String(t.shard), to: t.to, method: t.method }, t.bytesSent);
      },
    });
    new Gauge({
      name: `${prefix}cluster_transfer_points_total`,
      help: 'Points (operations, for wal_delta) a shard transfer this peer drives has to send',
      labelNames: ['collection', 'shard', 'to', 'method'],
      registers: reg,
      collect() {
        this.reset();
        for (const t of view.transfers()) this.set({ collection: t.collection, shard: String(t.shard), to: t.to, method: t.method }, t.pointsTotal);
      },
    });
    new Gauge({
      name: `${prefix}cluster_p2p_calls`,
      help: 'Calls this peer made to other peers\' points service, by method and outcome',
      labelNames: ['method', 'outcome'],
      registers: reg,
      collect() {
        for (const [method, c] of Object.entries(view.p2pCalls())) {
          this.set({ method, outcome: 'ok' }, c.calls - c.failures);
          this.set({ method, outcome: 'failed' }, c.failures);
        }
      },
    });
  }

  /** Counts one answered request; `route` is its pattern, or null when none matched. */
  record(method: string, route: string | null, status: number, seconds: number): void {
    let byRoute = this.series.get(method);
    if (byRoute === undefined) this.series.set(method, (byRoute = new Map()));
    let byStatus = byRoute.get(route);
    if (byStatus === undefined) byRoute.set(route, (byStatus = new Map()));
    let series = byStatus.get(status);
    if (series === undefined) {
      // The histogram series of one (method, route, status) is made once and kept (a
      // bounded set: routes are patterns).
      const labels = { method, endpoint: route ?? UNMATCHED_ROUTE, status: String(status) };
      let figures: RouteTally | null = null;
      if (route !== null) {
        const routeKey = `${method} ${route}`;
        figures = this.perRoute.get(routeKey) ?? { count: 0, totalMicros: 0 };
        this.perRoute.set(routeKey, figures);
      }
      series = { labels, uncounted: 0, durations: this.durations.series(labels), figures };
      byStatus.set(status, series);
      this.order.push(series);
    }
    series.uncounted++;
    series.durations.observe(seconds);
    const figures = series.figures;
    if (figures === null) return;
    figures.count += 1;
    figures.totalMicros += seconds * 1e6;
  }

  /** Per-route request counts and mean durations, for /telemetry. */
  restFigures(): Record<string, RouteFigures> {
    const out: Record<string, RouteFigures> = {};
    for (const [key, { count, totalMicros }] of [...this.perRoute].sort(([a], [b]) => a.localeCompare(b))) {
      out[key] = { count, avg_duration_micros: Math.round((totalMicros / count) * 1000) / 1000 };
    }
    return out;
  }
}

/** What every answered request leaves: its metrics and one log line (Koa's request log and the direct lane both call this). */
export function requestDone(logger: Logger, stats: RequestStats, method: string, path: string, route: string | null, status: number, seconds: number): void {
  stats.record(method, route, status, seconds);
  logger.info({ method, path, route, status, ms: Math.round(seconds * 1e6) / 1000 }, 'request');
}
