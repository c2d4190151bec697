/**
 * Prometheus metrics of the public gRPC API, on the node's one registry (the one
 * `GET /metrics` serves, ts/api/rest/stats.ts): calls answered by method and status
 * code, and their durations.
 *
 * Owns: those two metrics. Must never: label by anything unbounded: the method label is
 * the call's path (`/qdrant.Points/Upsert`) of one of the contract's methods, the code
 * label a gRPC status name.
 */

import { Counter, type Registry } from 'prom-client';

import { DurationHistogram } from '../duration-histogram';

export class GrpcMetrics {
  private readonly responses: Counter<'method' | 'code'>;
  private readonly durations: DurationHistogram;

  constructor(registry: Registry, prefix: string | null) {
    const p = prefix ?? '';
    this.responses = new Counter({
      name: `${p}grpc_responses_total`,
      help: 'gRPC calls answered, by method (its path) and status code',
      labelNames: ['method', 'code'],
      registers: [registry],
    });
    this.durations = new DurationHistogram(
      `${p}grpc_responses_duration_seconds`,
      'Time to answer a gRPC call, by method (its path) and status code',
      [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      registry,
    );
  }

  /** The children of each (method, code), made on first use and kept (a bounded set: the contract's methods times the status codes). */
  private readonly series = new Map<string, { responses: { inc(): void }; durations: { observe(v: number): void } }>();

  observe(method: string, code: string, seconds: number): void {
    // prom-client hashes the label object on every inc/observe; as REST's stats do, the
    // series are looked up by one string key instead (the histogram's take no label work at all).
    const key = `${method} ${code}`;
    let series = this.series.get(key);
    if (series === undefined) {
      series = { responses: this.responses.labels({ method, code }), durations: this.durations.series({ method, code }) };
      this.series.set(key, series);
    }
    series.responses.inc();
    series.durations.observe(seconds);
  }
}
