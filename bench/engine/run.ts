/**
 * `npm run bench:engine [-- --quick] [--datasets ...] [--libs ...]`
 *
 * Builds and queries Quiver (native, WASM, int8, binary) and the peers (hnswlib-node,
 * usearch) in this one process, and the anchors (FAISS HNSW, hnswlib built with
 * -march=native) in Python child processes (anchors.ts / anchors.py), all with M=16
 * and ef_construct=100 (or `--m` / `--ef-construct`); the builds run one at a time, the
 * timed search passes in turns across all libraries (measureSideBySide). Writes
 * bench/results/engine-<tag>.{json,md} plus one QPS-vs-recall SVG per data set.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import type { Engine } from '../../bindings/engine';
import {
  ALL_LIBS,
  Dataset,
  K,
  LibKey,
  Options,
  REPO_ROOT,
  errMsg,
  fmt,
  fmtInt,
  nowSec,
  parseArgs,
} from './common';
import { DatasetSkip, loadDataset } from './datasets';
import { groundTruth, metricSpace, recallAtK } from './groundtruth';
import { BuildOutcome, HnswlibRunner, MemoryInfo, QuiverRunner, Runner, Series, UsearchRunner, hnswlibVersion, querySet, usearchKernels, usearchVersion } from './libs';
import { ANCHOR_KEYS, ANCHOR_SERIES, AnchorRunner, anchorsInfo } from './anchors';
import { eventLoopProbe } from './eventloop';
import { coresAvailable, forceGc, percentile } from './measure';
import { loadQuiver } from './quiver';
import { DatasetInfo, Results, Row, datasetInfo, markdown, plotFor, sparseSection } from './report';
import { sparseBench } from './sparse';
import { machineInfo } from './machine';
import { runScale } from './scale';

const WARMUP = 300;
const WARMUP_QUICK = 100;

type RunnerOrSkip = Runner | { skip: string };

let nativeEngine: Engine | null = null;

async function makeRunners(opts: Options, notes: string[]): Promise<Map<LibKey, RunnerOrSkip>> {
  const runners = new Map<LibKey, RunnerOrSkip>();
  const wantNative = opts.libs.some((l) => l.startsWith('quiver-native'));
  const native: Engine | string | null = wantNative ? await loadQuiver(opts.loader, 'native') : null;
  if (native && typeof native !== 'string') nativeEngine = native;
  const wasm: Engine | string | null = opts.libs.includes('quiver-wasm') ? await loadQuiver(opts.loader, 'wasm') : null;
  const quiver = (key: LibKey, engine: Engine | string | null, make: (e: Engine) => Runner) => {
    if (!opts.libs.includes(key)) return;
    if (engine === null) return;
    runners.set(key, typeof engine === 'string' ? { skip: engine } : make(engine));
  };
  const hnsw = opts.hnsw;
  quiver('quiver-native', native, (e) => new QuiverRunner('quiver-native', 'quiver-native', e, { kind: 'none' }, [{ label: 'quiver-native', options: {} }], hnsw));
  quiver('quiver-native-int8', native, (e) =>
    new QuiverRunner('quiver-native-int8', 'quiver-native int8', e, { kind: 'scalar' }, [
      { label: 'quiver-native int8', options: { rescore: true } },
      { label: 'quiver-native int8 x2', options: { oversampling: 2, rescore: true }, oversampling: 2 },
      { label: 'quiver-native int8 x3', options: { oversampling: 3, rescore: true }, oversampling: 3 },
    ], hnsw),
  );
  quiver('quiver-native-binary', native, (e) =>
    new QuiverRunner('quiver-native-binary', 'quiver-native binary', e, { kind: 'binary' }, [
      { label: 'quiver-native binary', options: { rescore: true } },
      { label: 'quiver-native binary x2', options: { oversampling: 2, rescore: true }, oversampling: 2 },
      { label: 'quiver-native binary x4', options: { oversampling: 4, rescore: true }, oversampling: 4 },
      { label: 'quiver-native binary x8', options: { oversampling: 8, rescore: true }, oversampling: 8 },
    ], hnsw),
  );
  quiver('quiver-wasm', wasm, (e) => new QuiverRunner('quiver-wasm', 'quiver-wasm', e, { kind: 'none' }, [{ label: 'quiver-wasm', options: {} }], hnsw));
  if (opts.libs.includes('hnswlib')) {
    try {
      runners.set('hnswlib', new HnswlibRunner(hnsw));
    } catch (e) {
      runners.set('hnswlib', { skip: `hnswlib-node not usable (npm install; it compiles with node-gyp): ${errMsg(e).split('\n')[0]}` });
    }
  }
  if (opts.libs.includes('usearch')) {
    try {
      runners.set('usearch', new UsearchRunner(path.join(opts.dataDir, 'tmp'), hnsw));
    } catch (e) {
      runners.set('usearch', { skip: `usearch not usable: ${errMsg(e).split('\n')[0]}` });
    }
  }
  if (ANCHOR_KEYS.some((k) => opts.libs.includes(k))) {
    const info = anchorsInfo(opts);
    for (const k of ANCHOR_KEYS) {
      if (!opts.libs.includes(k)) continue;
      const i = info[k];
      runners.set(k, 'skip' in i ? { skip: i.skip } : new AnchorRunner(k, i, opts));
    }
  }
  for (const [k, r] of runners) if ('skip' in r) notes.push(`${k} skipped: ${r.skip}`);
  return runners;
}

function seriesLabelOf(key: LibKey): string {
  switch (key) {
    case 'hnswlib':
      return 'hnswlib-node';
    case 'quiver-native-int8':
      return 'quiver-native int8';
    case 'quiver-native-binary':
      return 'quiver-native binary';
    case 'faiss':
    case 'hnswlib-native':
      return ANCHOR_SERIES[key];
    default:
      return key;
  }
}

function baseRow(ds: Dataset, series: string, lib: LibKey): Omit<Row, 'kind'> {
  return { dataset: ds.key, series, lib, nBase: ds.nBase, nQuery: ds.nQuery, dim: ds.dim, distance: ds.distance, k: K };
}

/** One library's index of one data set, built and kept while the series are measured. */
interface Live {
  runner: Runner;
  outcome: BuildOutcome;
  common: ReturnType<typeof buildFields>;
}

async function buildLive(opts: Options, ds: Dataset, runner: Runner): Promise<Live> {
  const b = await runner.build(ds, opts.buildThreads);
  const mem = b.built.memory();
  console.log(
    `  ${runner.label.padEnd(22)} build ${fmt(b.seconds, 2)} s (${b.threads} thr, CPU/wall ${fmt(b.cpuSeconds / b.seconds, 2)}, loop lag ${fmt(b.maxLagMs, 0)} ms), ${fmt(mem.bytesPerVector ?? undefined, 1)} B/vec [${mem.method}]`,
  );
  return { runner, outcome: b, common: buildFields(b, mem, ds) };
}

/** One series of one library under measurement. */
interface Entry {
  live: Live;
  s: Series;
  rows: Row[];
  line: string[];
  failed?: string;
}

/**
 * Measures every series of every built library side by side: for each ef, the passes
 * over all queries take turns (pass 1 of every series, then pass 2 of every series, ...),
 * and each series keeps its best pass. A shared machine's load comes and goes over
 * seconds; taking turns gives every library the same moments, so the ratios between
 * them do not depend on which one ran while the machine was busy. (Each library's
 * build still runs alone, before any search.)
 */
async function measureSideBySide(opts: Options, ds: Dataset, lives: Live[], space: ReturnType<typeof metricSpace>, gt: Awaited<ReturnType<typeof groundTruth>>, rows: Row[], notes: string[]): Promise<void> {
  const qs = querySet(ds);
  const entries: Entry[] = lives.flatMap((live) => live.outcome.built.series.map((s) => ({ live, s, rows: [], line: [] })));
  const fail = (e: Entry, err: unknown) => {
    e.failed = errMsg(err);
    console.log(`  ${e.s.label.padEnd(22)} FAILED: ${e.failed}`);
    notes.push(`${e.s.label} on ${ds.key} failed: ${e.failed}`);
  };
  for (const ef of opts.efs) {
    forceGc();
    type Best = { t?: Awaited<ReturnType<Series['run']>>; bt?: { seconds: number; ids: number[][]; cpuSeconds?: number }; cpuPerWall: number; batchError?: string };
    const best = new Map<Entry, Best>();
    for (const e of entries) {
      if (e.failed) continue;
      try {
        await e.s.setEf(ef);
        await e.s.run(qs, ef, Math.min(opts.quick ? WARMUP_QUICK : WARMUP, qs.n)); // warm-up
        best.set(e, { cpuPerWall: 0 });
      } catch (err) {
        fail(e, err);
      }
    }
    // Best of `reps` passes over all queries (other load on the machine only slows a pass down).
    for (let rep = 0; rep < opts.reps; rep++) {
      for (const e of entries) {
        const b = best.get(e);
        if (!b || e.failed) continue;
        try {
          const t = await e.s.run(qs, ef);
          if (!b.t || t.seconds < b.t.seconds) b.t = t;
        } catch (err) {
          fail(e, err);
          continue;
        }
        if (e.s.batch && b.batchError === undefined) {
          try {
            const cpu0 = process.cpuUsage();
            const pass = await e.s.batch.run(qs, ef);
            const cpu = process.cpuUsage(cpu0);
            if (!b.bt || pass.seconds < b.bt.seconds) {
              b.bt = pass;
              b.cpuPerWall = (pass.cpuSeconds ?? (cpu.user + cpu.system) / 1e6) / pass.seconds;
            }
          } catch (err) {
            b.batchError = errMsg(err);
          }
        }
      }
    }
    for (const e of entries) {
      const b = best.get(e);
      if (!b?.t || e.failed) continue;
      const t = b.t;
      let recall: number;
      try {
        recall = recallAtK(space, gt, t.results.map((r) => e.s.toIds(r)), K);
      } catch (err) {
        fail(e, err);
        continue;
      }
      const row: Row = {
        ...baseRow(ds, e.s.label, e.live.runner.key),
        kind: 'query',
        quantization: e.s.quantization,
        oversampling: e.s.oversampling,
        ef,
        recall,
        qps: qs.n / t.seconds,
        p50Us: percentile(t.latUs, 50),
        p99Us: percentile(t.latUs, 99),
        queryMode: e.s.queryMode,
        ...e.live.common,
      };
      if (e.s.batch) {
        if (b.batchError !== undefined || !b.bt) {
          row.batchLabel = `failed: ${b.batchError ?? 'no pass'}`;
        } else {
          try {
            row.batchRecall = recallAtK(space, gt, b.bt.ids, K);
            row.batchQps = qs.n / b.bt.seconds;
            row.batchCpuPerWall = b.cpuPerWall;
            row.batchLabel = e.s.batch.label;
          } catch (err) {
            row.batchLabel = `failed: ${errMsg(err)}`;
          }
        }
      }
      e.rows.push(row);
      e.line.push(`ef ${ef}: ${fmt(recall, 3)}/${fmtInt(row.qps)}`);
    }
  }
  // Rows in library order, each library's efs together (the report reads them so).
  for (const e of entries) {
    console.log(`    ${e.s.label.padEnd(24)} recall/QPS  ${e.line.join('  ')}`);
    rows.push(...e.rows);
    if (e.failed) rows.push({ ...baseRow(ds, e.s.label, e.live.runner.key), kind: 'skipped', skipped: `failed: ${e.failed}` });
  }
}

async function buildOnly(opts: Options, ds: Dataset, runner: Runner, threads: number, label: string, rows: Row[]): Promise<void> {
  const b = await runner.build(ds, threads);
  const mem = b.built.memory();
  b.built.close();
  forceGc();
  console.log(`  ${label.padEnd(30)} build ${fmt(b.seconds, 2)} s (CPU/wall ${fmt(b.cpuSeconds / b.seconds, 2)})`);
  rows.push({
    ...baseRow(ds, label, runner.key),
    kind: 'build-only',
    ...buildFields(b, mem, ds),
  });
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  let opts: Options;
  try {
    opts = parseArgs(argv);
  } catch (e) {
    console.error(errMsg(e));
    process.exit(2);
  }
  if (opts.scale) {
    await runScale(opts, argv);
    return;
  }
  const tag = opts.quick && !argv.some((a) => a.startsWith('--tag')) ? `${opts.tag}-quick` : opts.tag;
  const tStart = nowSec();
  const notes: string[] = [];
  const machine = machineInfo();
  machine.coresAvailableAtStart = Math.round((await coresAvailable()) * 100) / 100;
  console.log(`Quiver engine benchmark (${opts.quick ? 'quick' : 'full'}): ${machine.cpuModel} × ${machine.cores} (${machine.coresAvailableAtStart} free now), Node ${machine.node}`);
  console.log(`  datasets: ${opts.datasets.join(', ')}; libs: ${opts.libs.join(', ')}; ef: ${opts.efs.join(', ')}; M=${opts.hnsw.m}, ef_construct=${opts.hnsw.efConstruct}, seed=${opts.hnsw.seed}`);

  const runners = await makeRunners(opts, notes);
  const libraries: Record<string, Record<string, string>> = {};
  for (const [k, r] of runners) libraries[k] = 'skip' in r ? { skipped: r.skip } : r.info;
  if (opts.libs.includes('hnswlib') && !libraries.hnswlib?.skipped) libraries.hnswlib = { ...libraries.hnswlib, version: hnswlibVersion() };
  if (opts.libs.includes('usearch') && !libraries.usearch?.skipped) libraries.usearch = { ...libraries.usearch, version: usearchVersion(), kernels: usearchKernels() };

  const rows: Row[] = [];
  const datasets: DatasetInfo[] = [];
  let eventLoop: Record<string, unknown> | null = null;

  let sparse: Results['sparse'];
  for (const key of opts.datasets) {
    console.log(`\n[${key}]`);
    if (key === 'sparse') {
      try {
        if (!nativeEngine) throw new Error('the sparse rows need the native engine (quiver-native in --libs)');
        sparse = await sparseBench(nativeEngine, opts.dataDir, opts.quick, opts.pipInstall);
      } catch (e) {
        sparse = { skipped: errMsg(e) };
        console.log(`  skipped: ${errMsg(e)}`);
      }
      continue;
    }
    const t0 = nowSec();
    let ds: Dataset | DatasetSkip;
    try {
      ds = loadDataset(key, opts);
    } catch (e) {
      ds = { key, skipped: errMsg(e) };
    }
    if ('skipped' in ds) {
      console.log(`  skipped: ${ds.skipped}`);
      notes.push(`dataset ${key} skipped: ${ds.skipped}`);
      datasets.push({ key, name: key, description: '', source: '', dim: 0, distance: '', nBase: 0, nQuery: 0, prepareSeconds: 0, cached: false, groundTruthSeconds: 0, groundTruthCached: false, groundTruthWorkers: 0, skipped: ds.skipped });
      continue;
    }
    const space = metricSpace(ds);
    const gt = await groundTruth(ds, space, K, opts.dataDir);
    console.log(
      `  ${ds.name}: ${fmtInt(ds.nBase)} × ${ds.dim}-d ${ds.distance}, ${ds.nQuery} queries; data ${ds.cached ? 'cached' : `prepared in ${fmt(ds.prepareSeconds, 1)} s`}; ground truth ${gt.cached ? 'cached' : `${fmt(gt.seconds, 1)} s (${gt.workers} workers)`} [${fmt(nowSec() - t0, 1)} s]`,
    );
    datasets.push(datasetInfo(ds, gt));

    const lives: Live[] = [];
    try {
      for (const lib of ALL_LIBS) {
        if (!opts.libs.includes(lib)) continue;
        const r = runners.get(lib);
        if (!r) continue;
        if ('skip' in r) {
          rows.push({ ...baseRow(ds, seriesLabelOf(lib), lib), kind: 'skipped', skipped: r.skip });
          console.log(`  ${seriesLabelOf(lib).padEnd(22)} skipped: ${r.skip}`);
          continue;
        }
        try {
          forceGc(); // each build's RSS growth without the last one's garbage
          lives.push(await buildLive(opts, ds, r));
        } catch (e) {
          const msg = errMsg(e);
          rows.push({ ...baseRow(ds, r.label, lib), kind: 'skipped', skipped: `failed: ${msg}` });
          console.log(`  ${r.label.padEnd(22)} FAILED: ${msg}`);
          notes.push(`${r.label} on ${ds.key} failed: ${msg}`);
          forceGc();
        }
      }
      await measureSideBySide(opts, ds, lives, space, gt, rows, notes);
    } finally {
      for (const l of lives) {
        try {
          l.outcome.built.close();
        } catch (e) {
          notes.push(`${l.runner.label} on ${ds.key}: close failed: ${errMsg(e)}`);
        }
      }
      forceGc();
    }
    const nativeRow = rows.find((x) => x.dataset === key && x.series === 'quiver-native' && x.kind === 'query');
    if (key === 'synthetic' && nativeRow) {
      eventLoop = {
        source: `quiver-native build of the synthetic set, await add(..., ${nativeRow.buildThreads})`,
        n: ds.nBase,
        dim: ds.dim,
        threads: nativeRow.buildThreads,
        buildSeconds: nativeRow.buildSeconds,
        maxLagMs: nativeRow.buildMaxEventLoopLagMs,
        p99LagMs: nativeRow.buildP99LagMs,
        intervalMs: 10,
        ticks: nativeRow.buildLagTicks,
        note: ds.nBase < 100_000 ? `quick mode: ${ds.nBase} points (the full run uses 100k; or run npm run bench:eventloop)` : '100k-point build',
      };
    }
    if (opts.singleThreadBuilds) {
      for (const lib of ['quiver-native', 'usearch'] as LibKey[]) {
        const r = runners.get(lib);
        if (!r || 'skip' in r || !opts.libs.includes(lib)) continue;
        const label = `${seriesLabelOf(lib)} (build, 1 thread)`;
        try {
          await buildOnly(opts, ds, r, 1, label, rows);
        } catch (e) {
          rows.push({ ...baseRow(ds, label, lib), kind: 'skipped', skipped: `failed: ${errMsg(e)}` });
        }
      }
    }
    console.log(`  [${key} done in ${fmt(nowSec() - t0, 1)} s]`);
  }

  if (opts.eventLoop && !opts.quick && nativeEngine && (!eventLoop || (eventLoop.n as number) < 100_000)) {
    // The synthetic set was not run at full size: probe a separate 100k-point build.
    const syn = loadDataset('synthetic', { ...opts, quick: false });
    if (!('skipped' in syn)) {
      console.log('\n[event loop] 100k-point Quiver native build with a 10 ms setInterval probe');
      const r = await eventLoopProbe(nativeEngine, syn.base, syn.dim, opts.buildThreads);
      eventLoop = { source: 'separate probe: quiver-native build of the 100k synthetic set, await add(..., threads)', ...r };
      console.log(`  ${fmtInt(r.n)} points, build ${fmt(r.buildSeconds, 2)} s, max lag ${fmt(r.maxLagMs, 1)} ms`);
    }
  }
  if (!opts.eventLoop) eventLoop = null;

  notes.push(
    'QPS are single-caller, one-query-at-a-time numbers; Quiver pays an async hop per query (napi async work / worker message) that the synchronous peers do not.',
    'hnswlib-node takes plain JS number[] vectors (converted before timing; its per-element N-API marshalling is inside the timing) and builds single-threaded: addPoint() is the only insert API in 3.0.0.',
    'usearch (JS binding) fixes expansion_search at construction and exposes no setter, so each ef loads the saved graph into a new Index({expansion_search: ef}); its bytes/vector is the save() file size (the binding has no memory-usage call).',
  );
  if (ANCHOR_KEYS.some((k) => opts.libs.includes(k))) {
    notes.push(
      'Anchors (faiss-hnsw, hnswlib-native) run in a Python child process (bench/engine/anchors.py) on the same dataset file; Cosine sets are normalised there and indexed with inner product. They build and search on one thread. Their build, batch and per-query times are taken in the child around the library calls; their one-at-a-time QPS include a Python loop and the binding\'s call overhead per query (a few µs), so the batch columns (one call for all queries) are the engine-to-engine comparison. Their bytes/vector come from the library (faiss serialize_index() size, hnswlib index_file_size()); RSS Δ is the child\'s.',
    );
  }
  const results: Results = {
    tag,
    date: new Date().toISOString(),
    mode: opts.quick ? 'quick' : 'full',
    args: argv,
    machine,
    libraries,
    parameters: { m: opts.hnsw.m, efConstruct: opts.hnsw.efConstruct, seed: opts.hnsw.seed, k: K, efs: opts.efs, buildThreads: opts.buildThreads, singleThreadBuilds: opts.singleThreadBuilds, warmupQueries: opts.quick ? WARMUP_QUICK : WARMUP, repsBestOf: opts.reps },
    datasets,
    rows,
    eventLoop,
    notes,
    totalSeconds: nowSec() - tStart,
    loadAverageAtEnd: os.loadavg().map((x) => Math.round(x * 100) / 100),
    coresAvailableAtEnd: Math.round((await coresAvailable()) * 100) / 100,
    ...(sparse !== undefined ? { sparse } : {}),
  };
  fs.mkdirSync(opts.resultsDir, { recursive: true });
  const stem = path.join(opts.resultsDir, `engine-${tag}`);
  fs.writeFileSync(`${stem}.json`, JSON.stringify(results, null, 2));
  fs.writeFileSync(`${stem}.md`, markdown(results) + sparseSection(results));
  const written = [`${stem}.json`, `${stem}.md`];
  for (const d of datasets) {
    if (d.skipped) continue;
    const svg = plotFor(results, d);
    const f = `${stem}-${d.key}.svg`;
    fs.writeFileSync(f, svg);
    written.push(f);
  }
  console.log(`\nwrote ${written.map((f) => path.relative(REPO_ROOT, f)).join(', ')} in ${fmt(results.totalSeconds, 1)} s total`);
}

main().then(
  () => process.exit(0), // a WASM engine's worker would otherwise keep the process alive
  (e) => {
    console.error(e);
    process.exit(1);
  },
);

/** The build columns every row of one library and data set carries. */
function buildFields(b: BuildOutcome, mem: MemoryInfo, ds: Dataset) {
  return {
    buildSeconds: b.seconds,
    buildThreads: b.threads,
    buildThreadsNote: b.threadsNote,
    buildCpuSeconds: b.cpuSeconds,
    buildCpuPerWall: b.cpuSeconds / b.seconds,
    buildMaxEventLoopLagMs: b.maxLagMs,
    buildLagTicks: b.lagTicks,
    buildP99LagMs: b.p99LagMs,
    bytesPerVector: mem.bytesPerVector,
    bytesMethod: mem.method,
    memoryDetail: mem.detail,
    rssDeltaBytesPerVector: b.rssDeltaBytes / ds.nBase,
  };
}
