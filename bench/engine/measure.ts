/**
 * Measurement helpers: event-loop lag, CPU time, RSS, forced GC, timed query loops.
 */
import * as os from 'os';
import * as v8 from 'v8';
import * as vm from 'vm';
import { Worker } from 'worker_threads';

/**
 * How many cores this process can get right now: one busy thread per core for `ms`,
 * then process CPU time / wall time. Other work on the machine shows up as < cores.
 */
export async function coresAvailable(ms = 500): Promise<number> {
  const n = os.cpus().length;
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: n }, () =>
      new Promise<void>((resolve, reject) => {
        const w = new Worker(`const e = Date.now() + ${ms}; let x = 0; while (Date.now() < e) x++;`, { eval: true });
        w.once('exit', () => resolve());
        w.once('error', reject);
      }),
    ),
  );
  const c = process.cpuUsage(c0);
  return (c.user + c.system) / 1000 / (performance.now() - t0);
}

let gcFn: (() => void) | null = null;
/** Forces a full GC (enables --expose-gc at run time; no node flag needed). */
export function forceGc(): void {
  if (!gcFn) {
    v8.setFlagsFromString('--expose-gc');
    gcFn = vm.runInNewContext('gc') as () => void;
  }
  gcFn();
  gcFn();
}

/**
 * Resident set size after a settled GC: collect, let native finalizers (napi
 * wrappers of freed indexes) run, collect again.
 */
export async function rss(): Promise<number> {
  forceGc();
  await new Promise((r) => setTimeout(r, 30));
  forceGc();
  await new Promise((r) => setImmediate(r));
  return process.memoryUsage().rss;
}

/** setInterval(…, 10) probe: the largest delay of a tick past its due time. */
export class LagMonitor {
  private timer: NodeJS.Timeout | null = null;
  private last = 0;
  maxLagMs = 0;
  ticks = 0;
  private lags: number[] = [];
  constructor(private readonly intervalMs = 10) {}
  start(): this {
    this.last = performance.now();
    this.timer = setInterval(() => {
      const now = performance.now();
      const lag = now - this.last - this.intervalMs;
      if (lag > this.maxLagMs) this.maxLagMs = lag;
      if (this.lags.length < 1_000_000) this.lags.push(lag);
      this.last = now;
      this.ticks++;
    }, this.intervalMs);
    return this;
  }
  /** Stops the probe; counts the time since the last tick too (covers a blocked loop). */
  stop(): { maxLagMs: number; p99LagMs: number; ticksOver20Ms: number; ticks: number } {
    const now = performance.now();
    const pending = now - this.last - this.intervalMs;
    if (pending > this.maxLagMs) this.maxLagMs = pending;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    const sorted = Float64Array.from(this.lags).sort();
    const p99 = sorted.length ? sorted[Math.min(sorted.length - 1, Math.ceil(0.99 * sorted.length) - 1)] : Math.max(0, pending);
    const over = this.lags.filter((l) => l > 20).length;
    return { maxLagMs: Math.max(0, this.maxLagMs), p99LagMs: Math.max(0, p99), ticksOver20Ms: over, ticks: this.ticks };
  }
}

export interface BuildMeasure<T> {
  value: T;
  seconds: number;
  cpuSeconds: number;
  maxLagMs: number;
  p99LagMs: number;
  ticksOver20Ms: number;
  lagTicks: number;
}

/** Times fn (sync or async) with wall clock, process CPU time and the event-loop probe. */
export async function measureBuild<T>(fn: () => T | Promise<T>): Promise<BuildMeasure<T>> {
  // Let the event loop settle so the probe starts clean.
  await new Promise((r) => setTimeout(r, 20));
  const mon = new LagMonitor(10).start();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const value = await fn();
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  // One more turn so a tick that was due during a blocking call is observed.
  await new Promise((r) => setImmediate(r));
  const lag = mon.stop();
  return { value, seconds, cpuSeconds: (cpu.user + cpu.system) / 1e6, maxLagMs: lag.maxLagMs, p99LagMs: lag.p99LagMs, ticksOver20Ms: lag.ticksOver20Ms, lagTicks: lag.ticks };
}

export interface LoopTiming<R> {
  results: R[];
  seconds: number;
  /** Per-query latencies in microseconds. */
  latUs: Float64Array;
}

export function timeSyncLoop<R>(n: number, fn: (i: number) => R): LoopTiming<R> {
  const results: R[] = new Array(n);
  const latUs = new Float64Array(n);
  const t0 = process.hrtime.bigint();
  let t = t0;
  for (let i = 0; i < n; i++) {
    results[i] = fn(i);
    const t2 = process.hrtime.bigint();
    latUs[i] = Number(t2 - t) / 1000;
    t = t2;
  }
  return { results, seconds: Number(t - t0) / 1e9, latUs };
}

export async function timeAsyncLoop<R>(n: number, fn: (i: number) => Promise<R>): Promise<LoopTiming<R>> {
  const results: R[] = new Array(n);
  const latUs = new Float64Array(n);
  const t0 = process.hrtime.bigint();
  let t = t0;
  for (let i = 0; i < n; i++) {
    results[i] = await fn(i);
    const t2 = process.hrtime.bigint();
    latUs[i] = Number(t2 - t) / 1000;
    t = t2;
  }
  return { results, seconds: Number(t - t0) / 1e9, latUs };
}

export function percentile(values: Float64Array, p: number): number {
  if (values.length === 0) return NaN;
  const s = Float64Array.from(values).sort();
  const idx = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[idx];
}
