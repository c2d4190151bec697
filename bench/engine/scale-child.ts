/**
 * One library of a `bench:engine --scale` run, in a process of its own (started by
 * scale.ts), so that the process's resident set is that library's:
 *
 *   node dist/bench/engine/scale-child.js <job.json>
 *
 * Loads the library (baseline RSS), reads the data set's cache file, builds with the
 * job's threads, frees its input, measures RSS again (after a forced GC), then runs the
 * ef sweep (one query at a time and one batch call, best of `reps` passes after a
 * warm-up) and writes the timings and returned ids to job.out. Recall is computed by the
 * parent against the exact ground truth. The anchors (FAISS, hnswlib-native) run in the
 * Python child that AnchorRunner starts; their RSS figures are that process's.
 */
import * as fs from 'fs';
import type { Engine } from '../../bindings/engine';
import { Dataset, LibKey, Options, errMsg } from './common';
import { AnchorRunner, anchorsInfo } from './anchors';
import { QuiverRunner, Runner, UsearchRunner, querySet, usearchKernels, usearchVersion } from './libs';
import { forceGc, percentile, rss } from './measure';
import { loadQuiver } from './quiver';

export interface ScaleJob {
  lib: LibKey;
  ds: Omit<Dataset, 'base' | 'queries'> & { file: string };
  threads: number;
  buildOnly: boolean;
  warmup: number;
  opts: Options;
  out: string;
}

export interface ScalePoint {
  ef: number;
  seconds: number;
  p50Us: number;
  p99Us: number;
  ids: number[][];
  batch?: { label: string; seconds: number; cpuPerWall: number; ids: number[][] } | { label: string; failed: string };
}

export interface ScaleSeries {
  label: string;
  quantization: string;
  oversampling?: number;
  queryMode: string;
  points: ScalePoint[];
}

export interface ScaleChildResult {
  lib: LibKey;
  label: string;
  info: Record<string, string>;
  build: { seconds: number; cpuSeconds: number; threads: number; threadsNote: string; maxLagMs: number; p99LagMs: number; lagTicks: number };
  memory: { bytesPerVector: number | null; method: string; detail: Record<string, number | string> };
  /**
   * Resident set of the process that holds the index (this one, or the anchors' Python
   * child): with the library loaded and no data (baseline), after the build with the
   * input freed, and the peak (VmHWM, which includes the input and any copy of it).
   */
  rss: { process: string; baselineBytes: number; afterBuildBytes: number; peakBytes: number; afterQueriesBytes?: number };
  series: ScaleSeries[];
  wallSeconds: number;
}

function peakRss(): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

function readRows(file: string, fromRow: number, rows: number, dim: number): Float32Array {
  const out = new Float32Array(rows * dim);
  const fd = fs.openSync(file, 'r');
  try {
    const bytes = new Uint8Array(out.buffer);
    let done = 0;
    while (done < bytes.length) {
      const n = fs.readSync(fd, bytes, done, Math.min(bytes.length - done, 1 << 30), fromRow * dim * 4 + done);
      if (n <= 0) throw new Error(`short read of ${file}`);
      done += n;
    }
  } finally {
    fs.closeSync(fd);
  }
  return out;
}

async function makeRunner(job: ScaleJob): Promise<Runner> {
  const { lib, opts } = job;
  const quiver = async (backend: 'native' | 'wasm'): Promise<Engine> => {
    const e = await loadQuiver(opts.loader, backend);
    if (typeof e === 'string') throw new Error(e);
    return e;
  };
  switch (lib) {
    case 'quiver-native':
      return new QuiverRunner(lib, 'quiver-native', await quiver('native'), { kind: 'none' }, [{ label: 'quiver-native', options: {} }]);
    case 'quiver-native-int8':
      return new QuiverRunner(lib, 'quiver-native int8', await quiver('native'), { kind: 'scalar' }, [
        { label: 'quiver-native int8', options: { rescore: true } },
        { label: 'quiver-native int8 x2', options: { oversampling: 2, rescore: true }, oversampling: 2 },
      ]);
    case 'quiver-native-binary':
      return new QuiverRunner(lib, 'quiver-native binary', await quiver('native'), { kind: 'binary' }, [
        { label: 'quiver-native binary x4', options: { oversampling: 4, rescore: true }, oversampling: 4 },
      ]);
    case 'quiver-wasm':
      return new QuiverRunner(lib, 'quiver-wasm', await quiver('wasm'), { kind: 'none' }, [{ label: 'quiver-wasm', options: {} }]);
    case 'usearch': {
      const r = new UsearchRunner(`${opts.dataDir}/tmp`);
      r.info = { ...r.info, version: usearchVersion(), kernels: usearchKernels() };
      return r;
    }
    case 'faiss':
    case 'hnswlib-native': {
      const i = anchorsInfo(opts)[lib];
      if ('skip' in i) throw new Error(i.skip);
      return new AnchorRunner(lib, i, opts);
    }
    default:
      throw new Error(`--scale does not run ${lib}`);
  }
}

async function main(): Promise<void> {
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8')) as ScaleJob;
  const t0 = performance.now();
  const runner = await makeRunner(job);
  const anchor = job.lib === 'faiss' || job.lib === 'hnswlib-native';
  const baseline = await rss();
  const { ds: d } = job;
  // The anchors read the cache file themselves: this process needs only the queries.
  const ds: Dataset = {
    ...d,
    base: anchor ? new Float32Array(0) : readRows(d.file, 0, d.nBase, d.dim),
    queries: readRows(d.file, d.nBase, d.nQuery, d.dim),
  };
  const b = await runner.build(ds, job.threads);
  ds.base = new Float32Array(0); // the input is freed before the resident set is read
  const afterBuild = await rss();
  const mem = b.built.memory();
  const result: ScaleChildResult = {
    lib: job.lib,
    label: runner.label,
    info: runner.info,
    build: { seconds: b.seconds, cpuSeconds: b.cpuSeconds, threads: b.threads, threadsNote: b.threadsNote, maxLagMs: b.maxLagMs, p99LagMs: b.p99LagMs, lagTicks: b.lagTicks },
    memory: mem,
    rss: anchor
      ? {
          process: 'the anchors’ Python child (bench/engine/anchors.py)',
          baselineBytes: Number(mem.detail.rssBaselineBytes),
          afterBuildBytes: Number(mem.detail.rssAfterBuildBytes),
          peakBytes: Number(mem.detail.rssPeakBytes),
        }
      : { process: 'a Node process of its own (bench/engine/scale-child.ts)', baselineBytes: baseline, afterBuildBytes: afterBuild, peakBytes: peakRss() },
    series: [],
    wallSeconds: 0,
  };
  console.log(`  ${runner.label.padEnd(22)} build ${b.seconds.toFixed(2)} s (${b.threads} thr, CPU/wall ${(b.cpuSeconds / b.seconds).toFixed(2)}), RSS ${(result.rss.baselineBytes / 2 ** 20).toFixed(0)} → ${(result.rss.afterBuildBytes / 2 ** 20).toFixed(0)} MiB`);
  try {
    if (!job.buildOnly) {
      const qs = querySet(ds);
      for (const s of b.built.series) {
        const ser: ScaleSeries = { label: s.label, quantization: s.quantization, oversampling: s.oversampling, queryMode: s.queryMode, points: [] };
        forceGc();
        for (const ef of job.opts.efs) {
          await s.setEf(ef);
          await s.run(qs, ef, Math.min(job.warmup, qs.n));
          let t = await s.run(qs, ef);
          for (let rep = 1; rep < job.opts.reps; rep++) {
            const t2 = await s.run(qs, ef);
            if (t2.seconds < t.seconds) t = t2;
          }
          const p: ScalePoint = { ef, seconds: t.seconds, p50Us: percentile(t.latUs, 50), p99Us: percentile(t.latUs, 99), ids: t.results.map((r) => s.toIds(r)) };
          if (s.batch) {
            try {
              let best = { seconds: Infinity, ids: [] as number[][], cpuPerWall: 0 };
              for (let rep = 0; rep < job.opts.reps; rep++) {
                const c0 = process.cpuUsage();
                const pass = await s.batch.run(qs, ef);
                const c = process.cpuUsage(c0);
                if (pass.seconds < best.seconds) best = { seconds: pass.seconds, ids: pass.ids, cpuPerWall: (pass.cpuSeconds ?? (c.user + c.system) / 1e6) / pass.seconds };
              }
              p.batch = { label: s.batch.label, ...best };
            } catch (e) {
              p.batch = { label: s.batch.label, failed: errMsg(e) };
            }
          }
          ser.points.push(p);
        }
        console.log(`    ${s.label.padEnd(24)} QPS ${ser.points.map((p) => `ef ${p.ef}: ${Math.round(qs.n / p.seconds)}`).join('  ')}`);
        result.series.push(ser);
      }
      if (!anchor) result.rss.afterQueriesBytes = await rss();
    }
  } finally {
    b.built.close();
  }
  result.wallSeconds = (performance.now() - t0) / 1000;
  fs.writeFileSync(job.out, JSON.stringify(result));
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(errMsg(e));
    process.exit(1);
  },
);
