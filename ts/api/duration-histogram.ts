/**
 * Request-duration histograms for the API layers' metrics (REST: ts/api/rest/stats.ts;
 * gRPC: ts/api/grpc/metrics.ts).
 *
 * Owns: observing durations into series made once per label set, and exporting them in
 * prom-client's histogram form. Must never: make a series per request (label sets are
 * bounded by the callers: route patterns, methods, status codes).
 */

import type { Registry } from 'prom-client';

/** One labelled series of a DurationHistogram: counts per bucket (not cumulative), the last one +Inf. */
export class DurationSeries {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(
    readonly labels: Readonly<Record<string, string>>,
    private readonly bounds: Float64Array,
  ) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(v: number): void {
    // A duration that is no number (never one of a clock's differences) would make `_sum` NaN for good; prom-client throws on it.
    if (!Number.isFinite(v)) return;
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && v > bounds[i]) i++;
    this.counts[i]++;
    this.sum += v;
    this.count++;
  }
}

/**
 * A Prometheus histogram of request durations whose series are made once per label set
 * and observed without any label handling: prom-client's Histogram converts, checks and
 * hashes the labels on every observe, even of a child made by labels() (about 3% of the
 * event loop's time per query under load). It registers in a prom-client Registry as a
 * metric of its own and is exported exactly as prom-client exports a histogram
 * (cumulative `_bucket` lines with `le` first, then `+Inf`, `_sum`, `_count`).
 */
export class DurationHistogram {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly bounds: Float64Array;
  private readonly all: DurationSeries[] = [];
  private readonly byKey = new Map<string, DurationSeries>();

  constructor(
    readonly name: string,
    readonly help: string,
    buckets: readonly number[],
    registry: Registry,
  ) {
    this.bounds = Float64Array.from(buckets);
    registry.registerMetric(this as unknown as Parameters<Registry['registerMetric']>[0]);
  }

  /** Every series back to no observations (prom-client's reset, as Registry.resetMetrics calls it). */
  reset(): void {
    for (const s of this.all) {
      s.counts.fill(0);
      s.sum = 0;
      s.count = 0;
    }
  }

  /**
   * The series of `labels`, made on the first call for that label set (in any key
   * order) and the same one after: two series with one label set would export twice.
   * The callers keep what it returns, so this runs once per label set, not per request.
   */
  series(labels: Readonly<Record<string, string>>): DurationSeries {
    const key = JSON.stringify(Object.keys(labels).sort().map((k) => [k, labels[k]]));
    let s = this.byKey.get(key);
    if (s === undefined) {
      s = new DurationSeries({ ...labels }, this.bounds);
      this.byKey.set(key, s);
      this.all.push(s);
    }
    return s;
  }

  private values(splay: boolean): Array<{ value: number; labels: Record<string, string | number>; sharedLabels?: Record<string, string>; metricName: string; exemplar: null | undefined }> {
    const out: Array<{ value: number; labels: Record<string, string | number>; sharedLabels?: Record<string, string>; metricName: string; exemplar: null | undefined }> = [];
    // As prom-client: bucket lines carry a null exemplar (none recorded), sum and count none.
    const line = (metricName: string, value: number, own: Record<string, string | number>, shared: Readonly<Record<string, string>>, exemplar: null | undefined) => {
      out.push(splay ? { value, labels: { ...own, ...shared }, metricName, exemplar } : { value, labels: own, sharedLabels: { ...shared }, metricName, exemplar });
    };
    for (const s of this.all) {
      if (s.count === 0) continue;
      let acc = 0;
      for (let i = 0; i < this.bounds.length; i++) {
        acc += s.counts[i];
        line(`${this.name}_bucket`, acc, { le: this.bounds[i] }, s.labels, null);
      }
      line(`${this.name}_bucket`, s.count, { le: '+Inf' }, s.labels, null);
      line(`${this.name}_sum`, s.sum, {}, s.labels, undefined);
      line(`${this.name}_count`, s.count, {}, s.labels, undefined);
    }
    return out;
  }

  getForPromString() {
    return { name: this.name, help: this.help, type: this.type, values: this.values(false), aggregator: this.aggregator };
  }

  get() {
    return { name: this.name, help: this.help, type: this.type, values: this.values(true), aggregator: this.aggregator };
  }
}
