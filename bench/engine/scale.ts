/**
 * `npm run bench:engine -- --scale`: the 1M-point figures (issue 20).
 *
 * The `scale` data set (bench/engine/datasets.ts: 1,000,000 × 128-d Gaussian mixture with
 * 1000 clusters, Cosine, 1000 queries; no real set of that size ships in a package
 * registry this project can reach, see bench/README.md). Exact ground truth from
 * the Quiver engine's exact scan (a flat index, `searchBatch({ exact: true })`, 40
 * candidates per query re-ranked here in float64), cached in bench/data.
 *
 * Each library runs in a process of its own (scale-child.ts; the anchors in their Python
 * child), one after another, so the resident set measured is that library's; with
 * `--build-rounds N` every library is built N times, rounds alternating between the
 * libraries, and only round 1 answers the queries. Every library builds with
 * `--threads` (2) threads: Quiver `add(…, 2)`, usearch `add(…, 2)`, FAISS
 * `omp_set_num_threads(2)`, hnswlib `add_items(num_threads=2)`; all search on one thread.
 * The load average (`/proc/loadavg`) is recorded before and after every child.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { spawn } from 'child_process';
import type { Engine } from '../../bindings/engine';
import { Dataset, EF_CONSTRUCT, GroundTruth, K, M, Options, REPO_ROOT, errMsg, fmt, fmtInt, nowSec } from './common';
import { loadDataset } from './datasets';
import { MetricSpace, distance, groundTruth, groundTruthFile, metricSpace, readGroundTruth, recallAtK, writeGroundTruth } from './groundtruth';
import { machineInfo } from './machine';
import { coresAvailable, forceGc } from './measure';
import { loadQuiver } from './quiver';
import { DatasetInfo, Results, Row, datasetInfo, markdown, plotFor } from './report';
import type { ScaleChildResult, ScaleJob } from './scale-child';

const WARMUP = 300;
/** Candidates per query asked from the exact scan, re-ranked in float64 here. */
const GT_CANDIDATES = 40;

export interface ScaleBuild {
  lib: string;
  label: string;
  round: number;
  buildSeconds: number;
  cpuPerWall: number;
  threads: number;
  threadsNote: string;
  bytesPerVector: number | null;
  bytesMethod: string;
  rssProcess: string;
  rssBaselineBytes: number;
  rssAfterBuildBytes: number;
  rssPeakBytes: number;
  rssAfterQueriesBytes?: number;
  loadBefore: number[];
  loadAfter: number[];
  childWallSeconds: number;
  failed?: string;
}

export interface ScaleInfo {
  groundTruth: { method: string; seconds: number; cached: boolean };
  builds: ScaleBuild[];
  uptimeAtStart: string;
  uptimeAtEnd: string;
}

function loadavg(): number[] {
  return os.loadavg().map((x) => Math.round(x * 100) / 100);
}

function uptime(): string {
  const l = fs.readFileSync('/proc/loadavg', 'utf8').trim().split(/\s+/);
  return `${new Date().toISOString()} load average ${l.slice(0, 3).join(', ')} (running/total tasks ${l[3]})`;
}

/**
 * Exact top-k by the engine's exact scan: a flat index (no graph) over the base vectors,
 * the queries split over two concurrent searchBatch calls with `exact: true`; each
 * query's GT_CANDIDATES best are re-scored here in float64 and the best k kept, so
 * the distances have the same precision as the JavaScript brute force's.
 */
async function exactGroundTruth(engine: Engine, ds: Dataset, space: MetricSpace, k: number): Promise<{ ids: Int32Array; dists: Float64Array }> {
  const idx = engine.createIndex({ dim: ds.dim, distance: ds.distance, flat: true });
  try {
    const labels = new BigUint64Array(ds.nBase);
    for (let i = 0; i < ds.nBase; i++) labels[i] = BigInt(i);
    await idx.add(labels, ds.base.slice(), 2);
    const nq = ds.nQuery;
    const half = Math.ceil(nq / 2);
    const parts = await Promise.all(
      [0, half].map((from) => idx.searchBatch(ds.queries.slice(from * ds.dim, Math.min(nq, from + half) * ds.dim), { k: GT_CANDIDATES, exact: true })),
    );
    const res = parts.flat();
    const ids = new Int32Array(nq * k);
    const dists = new Float64Array(nq * k);
    for (let q = 0; q < nq; q++) {
      const cand = Array.from(res[q].labels, (l) => Number(l)).map((id) => ({ id, d: distance(space, q, id) }));
      cand.sort((a, b) => a.d - b.d || a.id - b.id);
      for (let j = 0; j < k; j++) {
        ids[q * k + j] = cand[j].id;
        dists[q * k + j] = cand[j].d;
      }
    }
    return { ids, dists };
  } finally {
    idx.close();
  }
}

function runChild(job: ScaleJob): Promise<ScaleChildResult> {
  const jobFile = `${job.out}.job.json`;
  fs.writeFileSync(jobFile, JSON.stringify(job));
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [path.join(__dirname, 'scale-child.js'), jobFile], { stdio: ['ignore', 'inherit', 'pipe'] });
    let err = '';
    p.stderr.on('data', (d: Buffer) => {
      err = (err + d.toString()).slice(-4000);
      process.stderr.write(d);
    });
    const kill = () => p.kill('SIGKILL');
    process.once('exit', kill);
    p.on('exit', (code, sig) => {
      process.removeListener('exit', kill);
      fs.rmSync(jobFile, { force: true });
      if (code !== 0) return reject(new Error(`scale-child (${job.lib}) exited ${code ?? sig}: ${err.trim().split('\n').slice(-2).join(' | ')}`));
      try {
        const r = JSON.parse(fs.readFileSync(job.out, 'utf8')) as ScaleChildResult;
        fs.rmSync(job.out, { force: true });
        resolve(r);
      } catch (e) {
        reject(e);
      }
    });
  });
}

export async function runScale(opts: Options, argv: string[]): Promise<void> {
  const tStart = nowSec();
  const tag = opts.tag;
  const notes: string[] = [];
  const machine = machineInfo();
  const uptimeAtStart = uptime();
  machine.coresAvailableAtStart = Math.round((await coresAvailable()) * 100) / 100;
  console.log(`Quiver engine benchmark (--scale): ${machine.cpuModel} × ${machine.cores} (${machine.coresAvailableAtStart} free now), Node ${machine.node}; ${uptimeAtStart}`);
  console.log(`  libs: ${opts.libs.join(', ')}; ef: ${opts.efs.join(', ')}; M=${M}, ef_construct=${EF_CONSTRUCT}; build threads ${opts.buildThreads}; build rounds ${opts.buildRounds}`);

  // Data and ground truth, in this process; then everything but the normalised copy
  // used for recall is dropped before the libraries run.
  const t0 = nowSec();
  const loaded = loadDataset('scale', opts);
  if ('skipped' in loaded) throw new Error(`scale data set: ${loaded.skipped}`);
  let ds: Dataset | null = loaded;
  const space = metricSpace(ds);
  const gtFile = groundTruthFile(ds, K, opts.dataDir);
  let gt: GroundTruth | null = readGroundTruth(gtFile, ds.nQuery, K);
  let gtMethod = 'cached';
  if (!gt) {
    const g0 = nowSec();
    const engine = await loadQuiver(opts.loader, 'native');
    if (typeof engine !== 'string') {
      const r = await exactGroundTruth(engine, ds, space, K);
      gt = { k: K, ids: r.ids, dists: r.dists, seconds: nowSec() - g0, cached: false, workers: 1 };
      writeGroundTruth(gtFile, r);
      gtMethod = `Quiver native exact scan (flat index, searchBatch exact: true, ${GT_CANDIDATES} candidates re-ranked in float64)`;
    } else {
      gt = await groundTruth(ds, space, K, opts.dataDir);
      gtMethod = `JavaScript brute force on ${gt.workers} workers (native engine unavailable: ${engine})`;
    }
    gtMethod = `${gtMethod}, ${fmt(gt.seconds, 1)} s`;
  }
  const dsInfo: DatasetInfo = datasetInfo(ds, gt);
  const dsJob: ScaleJob['ds'] = {
    key: ds.key,
    name: ds.name,
    description: ds.description,
    source: ds.source,
    dim: ds.dim,
    distance: ds.distance,
    nBase: ds.nBase,
    nQuery: ds.nQuery,
    prepareSeconds: 0,
    cached: true,
    file: ds.file as string,
  };
  if (!dsJob.file || !fs.existsSync(dsJob.file)) throw new Error('the scale data set has no cache file');
  console.log(`  ${ds.name}: ${fmtInt(ds.nBase)} × ${ds.dim}-d ${ds.distance}, ${ds.nQuery} queries; data ${ds.cached ? 'cached' : `prepared in ${fmt(ds.prepareSeconds, 1)} s`}; ground truth ${gtMethod} [${fmt(nowSec() - t0, 1)} s]`);
  ds = null;
  forceGc();

  const rows: Row[] = [];
  const builds: ScaleBuild[] = [];
  const libraries: Record<string, Record<string, string>> = {};
  const stem = path.join(opts.resultsDir, `engine-${tag}`);
  fs.mkdirSync(opts.resultsDir, { recursive: true });
  /** The results so far (rewritten after every library's process, so a stopped run keeps what it measured). */
  const write = async (final: boolean): Promise<Results> => {
    const res: Results = {
      tag,
      date: new Date().toISOString(),
      mode: 'full',
      args: argv,
      machine,
      libraries,
      parameters: { m: M, efConstruct: EF_CONSTRUCT, k: K, efs: opts.efs, buildThreads: opts.buildThreads, buildRounds: opts.buildRounds, warmupQueries: WARMUP, repsBestOf: opts.reps, scale: true },
      datasets: [dsInfo],
      rows,
      eventLoop: null,
      notes: final ? notes : [...notes, 'PARTIAL: the run had not finished when this was written.'],
      totalSeconds: nowSec() - tStart,
      loadAverageAtEnd: loadavg(),
      coresAvailableAtEnd: final ? Math.round((await coresAvailable()) * 100) / 100 : undefined,
      scale: { groundTruth: { method: gtMethod, seconds: gt!.seconds, cached: gt!.cached }, builds, uptimeAtStart, uptimeAtEnd: uptime() },
    };
    fs.writeFileSync(`${stem}.json`, JSON.stringify(res, null, 2));
    fs.writeFileSync(`${stem}.md`, markdown(res));
    fs.writeFileSync(`${stem}.svg`, plotFor(res, dsInfo));
    return res;
  };
  const tmpDir = path.join(opts.dataDir, 'tmp');
  fs.mkdirSync(tmpDir, { recursive: true });
  const base = (lib: string, series: string) => ({ dataset: dsInfo.key, series, lib, nBase: dsInfo.nBase, nQuery: dsInfo.nQuery, dim: dsInfo.dim, distance: dsInfo.distance, k: K });
  for (let round = 1; round <= opts.buildRounds; round++) {
    console.log(`\n[round ${round}${round > 1 ? ', builds only' : ''}]`);
    for (const lib of opts.libs) {
      const loadBefore = loadavg();
      const job: ScaleJob = { lib, ds: dsJob, threads: opts.buildThreads, buildOnly: round > 1, warmup: WARMUP, opts, out: path.join(tmpDir, `scale-${lib}-${process.pid}-${round}.json`) };
      let r: ScaleChildResult;
      try {
        r = await runChild(job);
      } catch (e) {
        const msg = errMsg(e);
        console.log(`  ${lib} FAILED: ${msg}`);
        notes.push(`${lib} (round ${round}) failed: ${msg}`);
        if (round === 1) rows.push({ ...base(lib, lib), kind: 'skipped', skipped: `failed: ${msg}` });
        builds.push({ lib, label: lib, round, buildSeconds: NaN, cpuPerWall: NaN, threads: opts.buildThreads, threadsNote: '', bytesPerVector: null, bytesMethod: '', rssProcess: '', rssBaselineBytes: NaN, rssAfterBuildBytes: NaN, rssPeakBytes: NaN, loadBefore, loadAfter: loadavg(), childWallSeconds: NaN, failed: msg });
        await write(false);
        continue;
      }
      const loadAfter = loadavg();
      libraries[lib] = r.info;
      const b: ScaleBuild = {
        lib,
        label: r.label,
        round,
        buildSeconds: r.build.seconds,
        cpuPerWall: r.build.cpuSeconds / r.build.seconds,
        threads: r.build.threads,
        threadsNote: r.build.threadsNote,
        bytesPerVector: r.memory.bytesPerVector,
        bytesMethod: r.memory.method,
        rssProcess: r.rss.process,
        rssBaselineBytes: r.rss.baselineBytes,
        rssAfterBuildBytes: r.rss.afterBuildBytes,
        rssPeakBytes: r.rss.peakBytes,
        rssAfterQueriesBytes: r.rss.afterQueriesBytes,
        loadBefore,
        loadAfter,
        childWallSeconds: r.wallSeconds,
      };
      builds.push(b);
      console.log(`  ${r.label.padEnd(22)} round ${round}: build ${fmt(b.buildSeconds, 2)} s, ${fmt(b.bytesPerVector ?? undefined, 1)} B/vec, RSS after build ${fmt(b.rssAfterBuildBytes / 2 ** 20, 0)} MiB (baseline ${fmt(b.rssBaselineBytes / 2 ** 20, 0)}), load ${loadBefore.join('/')} → ${loadAfter.join('/')}`);
      const common = {
        buildSeconds: r.build.seconds,
        buildThreads: r.build.threads,
        buildThreadsNote: r.build.threadsNote,
        buildCpuSeconds: r.build.cpuSeconds,
        buildCpuPerWall: r.build.cpuSeconds / r.build.seconds,
        buildMaxEventLoopLagMs: r.build.maxLagMs,
        buildLagTicks: r.build.lagTicks,
        buildP99LagMs: r.build.p99LagMs,
        bytesPerVector: r.memory.bytesPerVector,
        bytesMethod: r.memory.method,
        memoryDetail: r.memory.detail,
        // Process RSS with the index built and its input freed, less the same process
        // with the library loaded and no data: the library's whole footprint.
        rssDeltaBytesPerVector: (r.rss.afterBuildBytes - r.rss.baselineBytes) / dsInfo.nBase,
      };
      if (round > 1) {
        rows.push({ ...base(lib, `${r.label} (build, round ${round})`), kind: 'build-only', ...common });
        await write(false);
        continue;
      }
      for (const s of r.series) {
        for (const p of s.points) {
          const row: Row = {
            ...base(lib, s.label),
            kind: 'query',
            quantization: s.quantization,
            oversampling: s.oversampling,
            ef: p.ef,
            recall: recallAtK(space, gt, p.ids, K),
            qps: dsInfo.nQuery / p.seconds,
            p50Us: p.p50Us,
            p99Us: p.p99Us,
            queryMode: s.queryMode,
            ...common,
          };
          if (p.batch && 'failed' in p.batch) row.batchLabel = `failed: ${p.batch.failed}`;
          else if (p.batch) {
            row.batchQps = dsInfo.nQuery / p.batch.seconds;
            row.batchCpuPerWall = p.batch.cpuPerWall;
            row.batchRecall = recallAtK(space, gt, p.batch.ids, K);
            row.batchLabel = p.batch.label;
          }
          rows.push(row);
        }
        console.log(`    ${s.label.padEnd(24)} recall ${rows.filter((x) => x.series === s.label && x.kind === 'query').map((x) => `ef ${x.ef}: ${fmt(x.recall, 3)}`).join('  ')}`);
      }
      await write(false);
    }
  }

  notes.push(
    `Each library ran in a process of its own, one after another (${opts.buildRounds > 1 ? `${opts.buildRounds} build rounds alternating between the libraries; round 1 also answered the queries` : 'one build each'}): Quiver and usearch in a Node child (bench/engine/scale-child.ts), the anchors in their Python child. RSS Δ/vector = (that process's RSS with the index built and the input vectors freed − its RSS with the library loaded and no data) ÷ vectors, after a forced GC (Node) or gc.collect() (Python).`,
    'QPS are single-caller, one-query-at-a-time numbers; Quiver pays an async hop per query (napi async work) that the synchronous peers do not. Batch columns: one call for all queries on one thread (usearch: the build threads).',
    'usearch (JS binding) fixes expansion_search at construction, so each ef loads the saved graph into a new Index; its bytes/vector is the save() file size.',
  );
  const results = await write(true);
  console.log(`\nwrote ${[`${stem}.json`, `${stem}.md`, `${stem}.svg`].map((f) => path.relative(REPO_ROOT, f)).join(', ')} in ${fmt(results.totalSeconds, 1)} s total`);
}
