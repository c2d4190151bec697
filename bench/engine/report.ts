import { sparseMarkdown, type SparseBenchResult } from './sparse';
/**
 * Result rows, the Markdown report (tables + ratios) and the SVG QPS-vs-recall plots.
 */
import { fmt, fmtInt, type Dataset, type GroundTruth } from './common';
import type { ScaleBuild, ScaleInfo } from './scale';

export interface Row {
  dataset: string;
  /** Display name of the curve, e.g. "quiver-native", "quiver-native binary x4". */
  series: string;
  lib: string;
  kind: 'query' | 'build-only' | 'skipped';
  skipped?: string;
  nBase: number;
  nQuery: number;
  dim: number;
  distance: string;
  quantization?: string;
  oversampling?: number;
  ef?: number;
  k: number;
  recall?: number;
  qps?: number;
  p50Us?: number;
  p99Us?: number;
  queryMode?: string;
  batchQps?: number;
  batchRecall?: number;
  /** Process CPU seconds / wall seconds during the batch call. */
  batchCpuPerWall?: number;
  batchLabel?: string;
  buildSeconds?: number;
  buildThreads?: number;
  buildThreadsNote?: string;
  buildCpuSeconds?: number;
  /** Process CPU seconds / wall seconds during the build: the parallelism actually used. */
  buildCpuPerWall?: number;
  buildMaxEventLoopLagMs?: number;
  buildLagTicks?: number;
  buildP99LagMs?: number;
  bytesPerVector?: number | null;
  bytesMethod?: string;
  memoryDetail?: Record<string, number | string>;
  rssDeltaBytesPerVector?: number;
}

export interface DatasetInfo {
  key: string;
  name: string;
  description: string;
  source: string;
  dim: number;
  distance: string;
  nBase: number;
  nQuery: number;
  prepareSeconds: number;
  originalPrepareSeconds?: number;
  cached: boolean;
  groundTruthSeconds: number;
  groundTruthCached: boolean;
  groundTruthWorkers: number;
  skipped?: string;
}

/** What the report shows of a data set and its ground truth. */
export function datasetInfo(ds: Dataset, gt: GroundTruth): DatasetInfo {
  return {
    key: ds.key,
    name: ds.name,
    description: ds.description,
    source: ds.source,
    dim: ds.dim,
    distance: ds.distance,
    nBase: ds.nBase,
    nQuery: ds.nQuery,
    prepareSeconds: ds.prepareSeconds,
    originalPrepareSeconds: ds.originalPrepareSeconds,
    cached: ds.cached,
    groundTruthSeconds: gt.seconds,
    groundTruthCached: gt.cached,
    groundTruthWorkers: gt.workers,
  };
}

export interface Results {
  tag: string;
  date: string;
  mode: 'quick' | 'full';
  args: string[];
  machine: Record<string, unknown>;
  libraries: Record<string, Record<string, string>>;
  parameters: Record<string, unknown>;
  datasets: DatasetInfo[];
  rows: Row[];
  eventLoop: Record<string, unknown> | null;
  notes: string[];
  totalSeconds: number;
  loadAverageAtEnd: number[];
  coresAvailableAtEnd?: number;
  /** The sparse-vector rows (absent when not run). */
  sparse?: SparseBenchResult | { skipped: string };
  /** `--scale` runs (bench/engine/scale.ts): builds per round, process RSS, load. */
  scale?: ScaleInfo;
}

type Curve = { series: string; points: { ef: number; recall: number; qps: number }[] };

/** The anchor curves (named by bench/engine/anchors.ts). */
const ANCHORS = [
  { series: 'faiss-hnsw', name: 'FAISS IndexHNSWFlat', batch: 'search(all queries, 1 thread)' },
  { series: 'hnswlib-native', name: 'hnswlib -march=native', batch: 'knn_query(all queries, 1 thread)' },
] as const;

export interface AnchorRatio {
  anchor: string;
  /** Quiver native searchBatch vs the anchor's one-call batch, QPS interpolated at recall 0.95. */
  batch: { quiver: number | null; anchor: number | null; ratio: number | null; note: string };
  /** One awaited Quiver call per query vs one anchor call per query (from Python). */
  perCall: { quiver: number | null; anchor: number | null; ratio: number | null; note: string };
  /** The batch ratio with QPS per CPU second of the call (see batchCpuCurves). */
  batchCpu: { quiver: number | null; anchor: number | null; ratio: number | null; note: string };
}

/** Quiver native against each anchor present in the rows, at recall@10 = 0.95. */
export function anchorRatios(rows: Row[], dataset: string, target = 0.95): AnchorRatio[] {
  const cs = curves(rows, dataset);
  const bs = batchCurves(rows, dataset);
  const out: AnchorRatio[] = [];
  const r = (a: number | null, b: number | null) => (a !== null && b !== null && b > 0 ? a / b : null);
  for (const a of ANCHORS) {
    const ac = cs.find((c) => c.series === a.series);
    const ab = bs.find((c) => c.series === a.series);
    if (!ac && !ab) continue;
    const qb = qpsAtRecall(bs.find((c) => c.series === 'quiver-native'), target);
    const anb = qpsAtRecall(ab, target);
    const qc = qpsAtRecall(cs.find((c) => c.series === 'quiver-native'), target);
    const anc = qpsAtRecall(ac, target);
    const cpu = batchCpuCurves(rows, dataset);
    const qcpu = qpsAtRecall(cpu.find((c) => c.series === 'quiver-native'), target);
    const acpu = qpsAtRecall(cpu.find((c) => c.series === a.series), target);
    out.push({
      anchor: a.series,
      batch: { quiver: qb.qps, anchor: anb.qps, ratio: r(qb.qps, anb.qps), note: `quiver ${qb.note}; anchor ${anb.note}` },
      perCall: { quiver: qc.qps, anchor: anc.qps, ratio: r(qc.qps, anc.qps), note: `quiver ${qc.note}; anchor ${anc.note}` },
      batchCpu: { quiver: qcpu.qps, anchor: acpu.qps, ratio: r(qcpu.qps, acpu.qps), note: `quiver ${qcpu.note}; anchor ${acpu.note}` },
    });
  }
  return out;
}

function anchorSummary(res: Results): string[] {
  const lines: string[] = [];
  for (const ds of res.datasets) {
    if (ds.skipped) continue;
    for (const a of anchorRatios(res.rows, ds.key)) {
      const x = (v: number | null) => (v === null ? 'n/a' : `**${v.toFixed(2)}×**`);
      lines.push(`| ${ds.key} | ${a.anchor} | ${fmtInt(a.batch.quiver)} | ${fmtInt(a.batch.anchor)} | ${x(a.batch.ratio)} | ${a.batchCpu.ratio === null ? 'n/a' : `${a.batchCpu.ratio.toFixed(2)}×`} | ${fmtInt(a.perCall.quiver)} | ${fmtInt(a.perCall.anchor)} | ${x(a.perCall.ratio)} |`);
    }
  }
  if (!lines.length) return [];
  return [
    '## Quiver native against the anchors at recall@10 = 0.95',
    '',
    'QPS interpolated log-linearly on each QPS/recall curve between the two efs around 0.95 (as for every ratio below). *Batch*: all queries in one call on one thread (Quiver `searchBatch` on its worker thread; FAISS `search`, hnswlib `knn_query` with one thread). *Batch ratio by CPU time*: the same with queries per CPU second of the call (steadier than wall time when other work takes the core part of the time; Quiver\'s CPU is its whole process\'s, the anchors\' their child\'s). *Per call*: one query per call (Quiver: one awaited `search()`; the anchors: one call from a Python loop).',
    '',
    '| data set | anchor | quiver-native batch QPS | anchor batch QPS | batch ratio | batch ratio by CPU time | quiver-native per-call QPS | anchor per-call QPS | per-call ratio |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|',
    ...lines,
    '',
  ];
}

export function curves(rows: Row[], dataset: string): Curve[] {
  const out = new Map<string, Curve>();
  for (const r of rows) {
    if (r.dataset !== dataset || r.kind !== 'query' || r.recall === undefined || r.qps === undefined || r.ef === undefined) continue;
    if (!out.has(r.series)) out.set(r.series, { series: r.series, points: [] });
    out.get(r.series)!.points.push({ ef: r.ef, recall: r.recall, qps: r.qps });
  }
  for (const c of out.values()) c.points.sort((a, b) => a.ef - b.ef);
  return [...out.values()];
}

/** The same curves from the batch columns (one call for all queries). */
export function batchCurves(rows: Row[], dataset: string): Curve[] {
  const out = new Map<string, Curve>();
  for (const r of rows) {
    if (r.dataset !== dataset || r.kind !== 'query' || r.batchRecall === undefined || r.batchQps === undefined || r.ef === undefined) continue;
    if (!out.has(r.series)) out.set(r.series, { series: r.series, points: [] });
    out.get(r.series)!.points.push({ ef: r.ef, recall: r.batchRecall, qps: r.batchQps });
  }
  for (const c of out.values()) c.points.sort((a, b) => a.ef - b.ef);
  return [...out.values()];
}

/**
 * The batch curves with QPS per CPU second (queries / CPU seconds of the call) instead of
 * per wall second: on a machine where other work takes the core away part of the time,
 * this is the steadier figure of a one-thread call.
 */
export function batchCpuCurves(rows: Row[], dataset: string): Curve[] {
  return batchCurves(rows, dataset).map((c) => {
    const pts = c.points.flatMap((p) => {
      const r = rows.find((x) => x.dataset === dataset && x.kind === 'query' && x.series === c.series && x.ef === p.ef);
      const cpw = r?.batchCpuPerWall;
      return cpw && cpw > 0 ? [{ ...p, qps: p.qps / cpw }] : [];
    });
    return { series: c.series, points: pts };
  });
}

/** QPS at a target recall: log-linear interpolation between the two efs around it. */
export function qpsAtRecall(c: Curve | undefined, target: number): { qps: number | null; note: string } {
  if (!c || c.points.length === 0) return { qps: null, note: 'no data' };
  const p = c.points;
  if (p[0].recall >= target) return { qps: p[0].qps, note: `already ${fmt(p[0].recall)} at ef=${p[0].ef} (lower bound)` };
  for (let i = 1; i < p.length; i++) {
    if (p[i].recall >= target) {
      const a = p[i - 1];
      const b = p[i];
      const t = b.recall === a.recall ? 1 : (target - a.recall) / (b.recall - a.recall);
      const q = Math.exp(Math.log(a.qps) + t * (Math.log(b.qps) - Math.log(a.qps)));
      return { qps: q, note: `between ef=${a.ef} and ef=${b.ef}` };
    }
  }
  return { qps: null, note: `never reaches ${target} (max ${fmt(Math.max(...p.map((x) => x.recall)))})` };
}

function firstAtRecall(c: Curve | undefined, target: number): { ef: number; recall: number; qps: number } | null {
  if (!c) return null;
  return c.points.find((x) => x.recall >= target) ?? null;
}

function ratio(a: number | null | undefined, b: number | null | undefined): string {
  if (a === null || a === undefined || b === null || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b === 0) return 'n/a';
  return `${(a / b).toFixed(2)}×`;
}

function esc(s: string): string {
  return s.replace(/\|/g, '\\|');
}

/** The markdown of the sparse rows, to append to the report. */
export function sparseSection(res: Results): string {
  if (res.sparse === undefined) return '';
  if ('skipped' in res.sparse) return `\n## Sparse vectors\n\nskipped: ${res.sparse.skipped}\n`;
  return `\n${sparseMarkdown(res.sparse)}`;
}

export function markdown(res: Results): string {
  const L: string[] = [];
  const m = res.machine;
  L.push(`# Quiver engine benchmark — ${res.tag} (${res.mode})`);
  L.push('');
  L.push(`Machine: ${m.cpuModel} × ${m.cores} cores, ${m.memoryGiB} GiB, ${m.os} ${m.kernel}, Node ${m.node}. Load average at start ${(m.loadAverageAtStart as number[]).join('/')} and end ${res.loadAverageAtEnd.join('/')}; cores this process could get (busy-thread probe) at start ${m.coresAvailableAtStart ?? '?'} and end ${res.coresAvailableAtEnd ?? '?'} of ${m.cores} — other work on the machine skews the numbers. Total run ${fmt(res.totalSeconds, 1)} s.`);
  L.push('');
  L.push(`Parameters: M=${res.parameters.m}, ef_construct=${res.parameters.efConstruct}${res.parameters.seed !== undefined ? `, seed=${res.parameters.seed} (level draws of Quiver and hnswlib; FAISS and usearch take none)` : ''}, k=${res.parameters.k}, ef ∈ {${(res.parameters.efs as number[]).join(', ')}}, build threads=${res.parameters.buildThreads}.`);
  L.push('');
  L.push('Libraries:');
  for (const [name, info] of Object.entries(res.libraries)) {
    L.push(`- **${name}**: ${Object.entries(info).map(([k, v]) => `${k}: ${v}`).join('; ')}`);
  }
  L.push('');
  L.push('Columns: *QPS* = queries per second with one query in flight at a time (sequential, one caller; Quiver awaits each `search()` of the async API, the peers are synchronous calls); *p50/p99* = per-query latency; *batch QPS* = all queries in one call (Quiver `searchBatch`, usearch `search(matrix, threads)`), with *batch CPU/wall* showing how many cores that call used; *recall@10* against exact brute force (ties at the 10th distance count as hits); *build s* = wall seconds of the add call(s); *threads asked* = the thread count passed to the build (hnswlib-node: 1, it has no parallel insert); *CPU/wall* = process CPU seconds over wall seconds during the build, i.e. the parallelism actually used (a backend may ignore the thread count, and a busy machine lowers it); *loop lag* = largest delay of a 10 ms `setInterval` during the build; *bytes/vector* by the method named; *RSS Δ/vector* = resident-set growth across the build divided by the vector count (approximate).');
  L.push('');
  L.push(...anchorSummary(res));
  if (res.scale) L.push(...scaleSection(res, res.scale));
  if (res.eventLoop) {
    const e = res.eventLoop as Record<string, unknown>;
    L.push(`**Event loop during a Quiver native build** (${e.source}): ${fmtInt(e.n as number)} points × ${e.dim}-d, build ${fmt(e.buildSeconds as number, 2)} s, max setInterval(10 ms) lag **${fmt(e.maxLagMs as number, 1)} ms** (p99 ${fmt(e.p99LagMs as number, 1)} ms) over ${e.ticks} ticks.${e.note ? ` ${e.note}.` : ''}`);
    L.push('');
  }
  for (const ds of res.datasets) {
    L.push(`## ${ds.name} (\`${ds.key}\`)`);
    L.push('');
    if (ds.skipped) {
      L.push(`Skipped: ${ds.skipped}`);
      L.push('');
      continue;
    }
    L.push(`${fmtInt(ds.nBase)} base × ${fmtInt(ds.nQuery)} queries, ${ds.dim}-d, ${ds.distance}. ${ds.description}. Source: ${ds.source}. Preparation: ${ds.cached ? `cached (originally ${fmt(ds.originalPrepareSeconds, 1)} s)` : `${fmt(ds.prepareSeconds, 1)} s`}; ground truth: ${ds.groundTruthCached ? 'cached' : `${fmt(ds.groundTruthSeconds, 1)} s on ${ds.groundTruthWorkers} workers`}.`);
    L.push('');
    const rows = res.rows.filter((r) => r.dataset === ds.key);
    const skipped = rows.filter((r) => r.kind === 'skipped');
    // Build / memory table: one line per series (first row of each) plus build-only rows.
    L.push('| library | build s | threads asked | CPU/wall | loop lag ms | bytes/vector | method | RSS Δ/vector |');
    L.push('|---|---:|---:|---:|---:|---:|---|---:|');
    const seen = new Set<string>();
    for (const r of rows) {
      if (r.kind === 'skipped') continue;
      const key = r.kind === 'build-only' ? `${r.series}#b` : r.lib;
      if (seen.has(key)) continue;
      seen.add(key);
      // Series that share one build (e.g. int8 searched two ways) share one line.
      const names = r.kind === 'build-only' ? [r.series] : [...new Set(rows.filter((x) => x.kind === 'query' && x.lib === r.lib).map((x) => x.series))];
      L.push(`| ${esc(names.join(' / '))} | ${fmt(r.buildSeconds, 2)} | ${r.buildThreads ?? '–'} | ${fmt(r.buildCpuPerWall, 2)} | ${fmt(r.buildMaxEventLoopLagMs, 0)} | ${fmt(r.bytesPerVector ?? undefined, 1)} | ${esc(r.bytesMethod ?? '–')} | ${r.rssDeltaBytesPerVector !== undefined && r.rssDeltaBytesPerVector >= 0 ? fmt(r.rssDeltaBytesPerVector, 0) : '–'} |`);
    }
    for (const r of skipped) L.push(`| ${esc(r.series)} | skipped: ${esc(r.skipped ?? '')} | | | | | | |`);
    L.push('');
    L.push('| library | ef | recall@10 | QPS | p50 µs | p99 µs | batch QPS | batch CPU/wall | batch recall |');
    L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const r of rows) {
      if (r.kind !== 'query') continue;
      L.push(`| ${esc(r.series)} | ${r.ef} | ${fmt(r.recall, 4)} | ${fmtInt(r.qps)} | ${fmt(r.p50Us, 0)} | ${fmt(r.p99Us, 0)} | ${fmtInt(r.batchQps)} | ${fmt(r.batchCpuPerWall, 2)} | ${fmt(r.batchRecall, 4)} |`);
    }
    L.push('');
    L.push(...ratiosSection(rows, ds.key));
    L.push('');
    L.push(`![QPS vs recall](engine-${res.tag}${res.scale ? '' : `-${ds.key}`}.svg)`);
    L.push('');
  }
  if (res.notes.length) {
    L.push('## Notes');
    L.push('');
    for (const n of res.notes) L.push(`- ${n}`);
    L.push('');
  }
  return L.join('\n');
}

/** The `--scale` run's build rounds, memory and machine load. */
function scaleSection(res: Results, sc: ScaleInfo): string[] {
  const L: string[] = [];
  const mib = (b: number | undefined) => (b === undefined || !Number.isFinite(b) ? '–' : fmtInt(b / 2 ** 20));
  const n = res.datasets[0]?.nBase ?? 0;
  L.push('## Build with 2 threads, memory and machine load (`--scale`)');
  L.push('');
  L.push(`Machine load: at start \`${sc.uptimeAtStart}\`, at end \`${sc.uptimeAtEnd}\` (2 cores shared with other work: compare the rows of this run with each other only). Ground truth: ${sc.groundTruth.method}.`);
  L.push('');
  L.push('Each library ran in a process of its own, one after another; *RSS baseline* = that process with the library loaded and no data, *RSS after build* = with the index built and the input vectors freed (after a forced GC), *RSS Δ/vector* = the difference ÷ vectors, *peak* = VmHWM (includes the input and any copy of it while building). Load average = 1/5/15-minute `/proc/loadavg` before → after the library\'s process.');
  L.push('');
  L.push('| library | round | build s | threads | CPU/wall | build CPU s | bytes/vector | RSS baseline MiB | RSS after build MiB | RSS Δ/vector | peak RSS MiB | load before → after |');
  L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|');
  for (const b of sc.builds) {
    if (b.failed) {
      L.push(`| ${esc(b.lib)} | ${b.round} | failed: ${esc(b.failed)} | | | | | | | | | ${b.loadBefore.join('/')} → ${b.loadAfter.join('/')} |`);
      continue;
    }
    L.push(`| ${esc(b.label)} | ${b.round} | ${fmt(b.buildSeconds, 1)} | ${b.threads} | ${fmt(b.cpuPerWall, 2)} | ${fmt(b.buildSeconds * b.cpuPerWall, 1)} | ${fmt(b.bytesPerVector ?? undefined, 1)} | ${mib(b.rssBaselineBytes)} | ${mib(b.rssAfterBuildBytes)} | ${n ? fmt((b.rssAfterBuildBytes - b.rssBaselineBytes) / n, 0) : '–'} | ${mib(b.rssPeakBytes)} | ${b.loadBefore.join('/')} → ${b.loadAfter.join('/')} |`);
  }
  L.push('');
  const q = sc.builds.filter((b) => b.lib === 'quiver-native' && !b.failed);
  const best = (xs: ScaleBuild[]) => (xs.length ? Math.min(...xs.map((x) => x.buildSeconds)) : null);
  const qb = best(q);
  for (const other of [...new Set(sc.builds.map((b) => b.lib))].filter((l) => l !== 'quiver-native')) {
    const o = sc.builds.filter((b) => b.lib === other && !b.failed);
    const ob = best(o);
    if (qb === null || ob === null) continue;
    const perRound = q
      .map((x) => {
        const y = o.find((z) => z.round === x.round);
        return y ? `round ${x.round}: ${fmt(x.buildSeconds, 1)} / ${fmt(y.buildSeconds, 1)} s = ${ratio(x.buildSeconds, y.buildSeconds)}` : null;
      })
      .filter(Boolean);
    L.push(`- Build time quiver-native / ${o[0].label}: best ${fmt(qb, 1)} s / ${fmt(ob, 1)} s = **${ratio(qb, ob)}** (${perRound.join('; ')})`);
    const cpu = (xs: ScaleBuild[]) => Math.min(...xs.map((x) => x.buildSeconds * x.cpuPerWall));
    L.push(`- Build CPU seconds quiver-native / ${o[0].label} (least of the rounds; steadier than wall time when other work takes the cores, but it counts the threads' waiting as well as their work): ${fmt(cpu(q), 1)} / ${fmt(cpu(o), 1)} = ${ratio(cpu(q), cpu(o))}`);
  }
  const qr = q[0];
  for (const other of [...new Set(sc.builds.map((b) => b.lib))].filter((l) => l !== 'quiver-native')) {
    const o = sc.builds.find((b) => b.lib === other && !b.failed);
    if (!qr || !o) continue;
    L.push(`- RSS after build, quiver-native / ${o.label}: ${mib(qr.rssAfterBuildBytes - qr.rssBaselineBytes)} / ${mib(o.rssAfterBuildBytes - o.rssBaselineBytes)} MiB over baseline = ${ratio(qr.rssAfterBuildBytes - qr.rssBaselineBytes, o.rssAfterBuildBytes - o.rssBaselineBytes)}; bytes/vector ${fmt(qr.bytesPerVector ?? undefined, 1)} / ${fmt(o.bytesPerVector ?? undefined, 1)}`);
  }
  L.push('');
  return L;
}

function ratiosSection(rows: Row[], dataset: string): string[] {
  const L: string[] = [];
  const cs = curves(rows, dataset);
  const get = (s: string) => cs.find((c) => c.series === s);
  const native = get('quiver-native');
  const wasm = get('quiver-wasm');
  const hnsw = get('hnswlib-node');
  const us = get('usearch');
  const int8 = get('quiver-native int8');
  const T = 0.95;
  L.push(`### Ratios (${dataset})`);
  L.push('');
  const at = (c: Curve | undefined) => qpsAtRecall(c, T);
  const fa = (c: Curve | undefined) => firstAtRecall(c, T);
  const desc = (c: Curve | undefined) => {
    const f = fa(c);
    return f ? `ef=${f.ef}: ${fmtInt(f.qps)} QPS @ ${fmt(f.recall, 3)}` : 'never ≥ 0.95';
  };
  L.push(`At recall@10 = ${T} (QPS interpolated log-linearly between the efs around it; "first ef" = the first ef with recall ≥ ${T}):`);
  L.push('');
  L.push('| ratio | interpolated @0.95 | at each one\'s first ef ≥ 0.95 |');
  L.push('|---|---:|---:|');
  const pair = (name: string, a: Curve | undefined, b: Curve | undefined) => {
    const fa1 = fa(a);
    const fb1 = fa(b);
    L.push(`| ${name} | ${ratio(at(a).qps, at(b).qps)} | ${ratio(fa1?.qps, fb1?.qps)} |`);
  };
  const bs = batchCurves(rows, dataset);
  const nativeBatch = bs.find((c) => c.series === 'quiver-native');
  const wasmBatch = bs.find((c) => c.series === 'quiver-wasm');
  const usBatch = bs.find((c) => c.series === 'usearch');
  pair('Quiver native QPS / hnswlib-node QPS (one awaited call per query)', native, hnsw);
  pair('Quiver native QPS / usearch QPS (one awaited call per query)', native, us);
  pair('Quiver WASM QPS / Quiver native QPS (one awaited call per query)', wasm, native);
  pair('Quiver native searchBatch on one worker thread / hnswlib-node QPS', nativeBatch, hnsw);
  pair('Quiver native searchBatch on one worker thread / usearch QPS', nativeBatch, us);
  pair('Quiver native searchBatch on one worker thread / usearch search(matrix) with the build threads (its batch CPU/wall column)', nativeBatch, usBatch);
  pair('Quiver WASM searchBatch / Quiver native searchBatch', wasmBatch, nativeBatch);
  for (const a of ANCHORS) {
    const ab = bs.find((c) => c.series === a.series);
    const ac = get(a.series);
    if (!ab && !ac) continue;
    pair(`Quiver native searchBatch on one worker thread / ${a.name} ${a.batch} (anchor)`, nativeBatch, ab);
    pair(`Quiver native QPS (one awaited call per query) / ${a.name} one call per query from Python (anchor)`, native, ac);
  }
  L.push('');
  for (const [n, c] of [['quiver-native', native], ['quiver-wasm', wasm], ['hnswlib-node', hnsw], ['usearch', us], ['quiver-native int8', int8]] as const) {
    if (!c) continue;
    const a = at(c);
    L.push(`- ${n}: ${a.qps === null ? 'n/a' : fmtInt(a.qps)} QPS at 0.95 (${a.note}); first ef ≥ 0.95 → ${desc(c)}`);
  }
  for (const [n, c] of [['quiver-native searchBatch', nativeBatch], ...ANCHORS.map((a) => [`${a.series} batch`, bs.find((x) => x.series === a.series)] as const)] as const) {
    if (!c) continue;
    const a = at(c);
    L.push(`- ${n}: ${a.qps === null ? 'n/a' : fmtInt(a.qps)} QPS at 0.95 (${a.note}); first ef ≥ 0.95 → ${desc(c)}`);
  }
  if (native && wasm) {
    const per = native.points
      .map((p) => {
        const w = wasm.points.find((x) => x.ef === p.ef);
        return w ? `ef=${p.ef}: ${(w.qps / p.qps).toFixed(2)}×` : null;
      })
      .filter(Boolean);
    if (per.length) L.push(`- WASM / native QPS at the same ef: ${per.join(', ')}`);
  }
  const firstRow = (series: string, kind: Row['kind'] = 'query') => rows.find((r) => r.dataset === dataset && r.series === series && r.kind === kind);
  const nRow = firstRow('quiver-native');
  const uRow = firstRow('usearch');
  if (nRow && uRow) {
    L.push(`- Build time Quiver native / usearch (${nRow.buildThreads} vs ${uRow.buildThreads} threads): ${fmt(nRow.buildSeconds, 2)} s / ${fmt(uRow.buildSeconds, 2)} s = ${ratio(nRow.buildSeconds, uRow.buildSeconds)}`);
  }
  const n1 = firstRow('quiver-native (build, 1 thread)', 'build-only');
  const u1 = firstRow('usearch (build, 1 thread)', 'build-only');
  if (n1 && u1) L.push(`- Build time at 1 thread, Quiver native / usearch: ${fmt(n1.buildSeconds, 2)} s / ${fmt(u1.buildSeconds, 2)} s = ${ratio(n1.buildSeconds, u1.buildSeconds)}`);
  const hRow = firstRow('hnswlib-node');
  if (n1 && hRow) L.push(`- Build time at 1 thread, Quiver native / hnswlib-node: ${fmt(n1.buildSeconds, 2)} s / ${fmt(hRow.buildSeconds, 2)} s = ${ratio(n1.buildSeconds, hRow.buildSeconds)}`);
  for (const a of ANCHORS) {
    const aRow = firstRow(a.series);
    if (!aRow) continue;
    if (n1) L.push(`- Build time at 1 thread, Quiver native / ${a.series}: ${fmt(n1.buildSeconds, 2)} s / ${fmt(aRow.buildSeconds, 2)} s = ${ratio(n1.buildSeconds, aRow.buildSeconds)}`);
    else if (nRow) L.push(`- Build time Quiver native (${nRow.buildThreads} threads) / ${a.series} (${aRow.buildThreads ?? 1} thread${aRow.buildThreads === 1 ? '' : 's'}): ${fmt(nRow.buildSeconds, 2)} s / ${fmt(aRow.buildSeconds, 2)} s = ${ratio(nRow.buildSeconds, aRow.buildSeconds)}${aRow.buildThreads === 1 || aRow.buildThreads === undefined ? ' (no 1-thread Quiver build in this run)' : ''}`);
  }
  const iRow = firstRow('quiver-native int8');
  if (iRow && nRow && int8 && native) {
    L.push(`- int8 bytes/vector vs f32: ${fmt(iRow.bytesPerVector ?? undefined, 1)} / ${fmt(nRow.bytesPerVector ?? undefined, 1)} = ${ratio(iRow.bytesPerVector, nRow.bytesPerVector)} (scored vectors: ${fmt(iRow.memoryDetail?.vectorBytesPerVector as number, 1)} vs ${fmt(nRow.memoryDetail?.vectorBytesPerVector as number, 1)}; f32 originals in memory: ${fmt(iRow.memoryDetail?.originalBytesPerVector as number, 1)}${iRow.memoryDetail?.originalsOnDisk ? ', moved to a mapped file by moveOriginalsToDisk' : ''})`);
    L.push(`- int8 recall@10 by ef (f32 in brackets): ${int8.points.map((p) => `ef=${p.ef}: ${fmt(p.recall, 3)} [${fmt(native.points.find((x) => x.ef === p.ef)?.recall, 3)}]`).join(', ')}`);
  }
  for (const s of ['quiver-native int8 x2', 'quiver-native int8 x3', 'quiver-native binary x2', 'quiver-native binary x4']) {
    const c = get(s);
    if (c) L.push(`- ${s} recall@10 by ef: ${c.points.map((p) => `ef=${p.ef}: ${fmt(p.recall, 3)}`).join(', ')}`);
  }
  return L;
}

// ---------------------------------------------------------------- SVG

/** The QPS-vs-recall plot of one data set of a results object. */
export function plotFor(res: Results, d: DatasetInfo): string {
  const p = res.parameters as { m: number; efConstruct: number; efs: number[] };
  return svgPlot(
    `${d.name} — QPS vs recall@10`,
    `${fmtInt(d.nBase)} × ${d.dim}-d ${d.distance}, ${d.nQuery} queries, M=${p.m}, ef_construct=${p.efConstruct}, ef ${p.efs.join('/')}; ${res.machine.cpuModel} × ${res.machine.cores}; ${res.tag}`,
    [
      ...curves(res.rows, d.key),
      // Quiver's engine speed on one thread without the per-call hop between threads.
      ...batchCurves(res.rows, d.key)
        .filter((c) => c.series === 'quiver-native' || ANCHORS.some((a) => a.series === c.series))
        .map((c) => ({ ...c, series: `${c.series} batch, 1 thr` })),
    ],
    anchorRatios(res.rows, d.key).flatMap((a) => [
      `@0.95 native / ${a.anchor}:`,
      `  batch ${a.batch.ratio === null ? 'n/a' : `${a.batch.ratio.toFixed(2)}×`}, per call ${a.perCall.ratio === null ? 'n/a' : `${a.perCall.ratio.toFixed(2)}×`}`,
    ]),
  );
}

const COLORS: Record<string, string> = {
  'quiver-native': '#d62728',
  'quiver-wasm': '#ff7f0e',
  'quiver-native int8': '#9467bd',
  'quiver-native int8 x2': '#6a3d9a',
  'quiver-native int8 x3': '#17becf',
  'quiver-native batch, 1 thr': '#d62728',
  'quiver-native binary x2': '#8c564b',
  'quiver-native binary x4': '#e377c2',
  'hnswlib-node': '#1f77b4',
  usearch: '#2ca02c',
  'faiss-hnsw': '#393b79',
  'faiss-hnsw batch, 1 thr': '#393b79',
  'hnswlib-native': '#bcbd22',
  'hnswlib-native batch, 1 thr': '#bcbd22',
};
const FALLBACK = ['#17becf', '#7f7f7f', '#843c39', '#637939'];

function xmlEsc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

export function svgPlot(title: string, subtitle: string, cs: Curve[], notes: string[] = []): string {
  const W = 900;
  const H = 560;
  const ml = 80, mr = 250, mt = 70, mb = 60;
  const pw = W - ml - mr;
  const ph = H - mt - mb;
  const pts = cs.flatMap((c) => c.points);
  const out: string[] = [];
  out.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">`);
  out.push(`<rect width="${W}" height="${H}" fill="#ffffff"/>`);
  out.push(`<text x="${ml}" y="28" font-size="18" font-weight="bold">${xmlEsc(title)}</text>`);
  out.push(`<text x="${ml}" y="50" font-size="12" fill="#444">${xmlEsc(subtitle)}</text>`);
  if (pts.length === 0) {
    out.push(`<text x="${ml}" y="${mt + 40}" font-size="14">no data</text></svg>`);
    return out.join('\n');
  }
  // x: recall. The range follows the full-precision curves; quantized curves that fall
  // further left are clipped at the frame and flagged in the legend.
  const f32 = cs.filter((c) => !/int8|binary/.test(c.series)).flatMap((c) => c.points);
  const minR = Math.min(...(f32.length ? f32 : pts).map((p) => p.recall));
  const x0 = minR >= 0.9 ? Math.min(0.98, Math.floor((minR - 0.005) * 100) / 100) : Math.floor(minR * 20) / 20;
  const x1 = 1.0;
  // y: log10 QPS
  const lo = Math.min(...pts.map((p) => p.qps));
  const hi = Math.max(...pts.map((p) => p.qps));
  const y0 = Math.floor(Math.log10(lo));
  const y1 = Math.max(y0 + 1, Math.ceil(Math.log10(hi)));
  const X = (r: number) => ml + ((r - x0) / (x1 - x0)) * pw;
  const Y = (q: number) => mt + ph - ((Math.log10(q) - y0) / (y1 - y0)) * ph;
  // grid + ticks
  out.push(`<g stroke="#e5e5e5" stroke-width="1">`);
  const xStep = x1 - x0 > 0.5 ? 0.1 : x1 - x0 > 0.12 ? 0.05 : x1 - x0 > 0.05 ? 0.02 : 0.01;
  const xTicks: number[] = [];
  for (let r = x0; r <= x1 + 1e-9; r += xStep) xTicks.push(Math.round(r * 100) / 100);
  for (const r of xTicks) out.push(`<line x1="${X(r)}" y1="${mt}" x2="${X(r)}" y2="${mt + ph}"/>`);
  const yTicks: number[] = [];
  for (let e = y0; e <= y1; e++) for (const m of [1, 2, 5]) {
    const v = m * 10 ** e;
    if (Math.log10(v) >= y0 - 1e-9 && Math.log10(v) <= y1 + 1e-9) yTicks.push(v);
  }
  for (const v of yTicks) out.push(`<line x1="${ml}" y1="${Y(v)}" x2="${ml + pw}" y2="${Y(v)}" stroke="${Number.isInteger(Math.log10(v)) ? '#cfcfcf' : '#eeeeee'}"/>`);
  out.push(`</g>`);
  out.push(`<rect x="${ml}" y="${mt}" width="${pw}" height="${ph}" fill="none" stroke="#333"/>`);
  for (const r of xTicks) out.push(`<text x="${X(r)}" y="${mt + ph + 18}" font-size="12" text-anchor="middle">${r.toFixed(2)}</text>`);
  for (const v of yTicks) out.push(`<text x="${ml - 8}" y="${Y(v) + 4}" font-size="12" text-anchor="end">${v >= 1000 ? `${v / 1000}k` : v}</text>`);
  out.push(`<text x="${ml + pw / 2}" y="${H - 15}" font-size="14" text-anchor="middle">recall@10</text>`);
  out.push(`<text transform="translate(22 ${mt + ph / 2}) rotate(-90)" font-size="14" text-anchor="middle">queries / s (one at a time, log scale)</text>`);
  // curves
  out.push(`<clipPath id="plot"><rect x="${ml}" y="${mt}" width="${pw}" height="${ph}"/></clipPath>`);
  let fi = 0;
  const legend: string[] = [];
  cs.forEach((c, i) => {
    const color = COLORS[c.series] ?? FALLBACK[fi++ % FALLBACK.length];
    const dash = c.series.includes('binary') ? ' stroke-dasharray="6 3"' : c.series.includes('int8') ? ' stroke-dasharray="2 2"' : c.series.includes('batch, 1 thr') ? ' stroke-dasharray="10 4"' : '';
    const d = c.points.map((p, j) => `${j === 0 ? 'M' : 'L'}${X(p.recall).toFixed(1)},${Y(p.qps).toFixed(1)}`).join(' ');
    out.push(`<g clip-path="url(#plot)">`);
    out.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="2"${dash}/>`);
    for (const p of c.points) {
      out.push(`<circle cx="${X(p.recall).toFixed(1)}" cy="${Y(p.qps).toFixed(1)}" r="3.5" fill="${color}"><title>${xmlEsc(c.series)} ef=${p.ef}: recall ${p.recall.toFixed(4)}, ${Math.round(p.qps)} QPS</title></circle>`);
    }
    out.push(`</g>`);
    const cMin = Math.min(...c.points.map((p) => p.recall));
    const off = cMin < x0 ? ` (recall ${cMin < x0 && Math.max(...c.points.map((p) => p.recall)) < x0 ? 'all' : 'partly'} < ${x0.toFixed(2)}: off chart)` : '';
    if (c.series === 'quiver-native') {
      for (const p of c.points) out.push(`<text x="${(X(p.recall) + 5).toFixed(1)}" y="${(Y(p.qps) - 6).toFixed(1)}" font-size="10" fill="${color}">ef ${p.ef}</text>`);
    }
    const ly = mt + 10 + i * 26;
    legend.push(`<line x1="${ml + pw + 15}" y1="${ly}" x2="${ml + pw + 45}" y2="${ly}" stroke="${color}" stroke-width="2"${dash}/>`);
    legend.push(`<circle cx="${ml + pw + 30}" cy="${ly}" r="3.5" fill="${color}"/>`);
    legend.push(`<text x="${ml + pw + 52}" y="${ly + 4}" font-size="13">${xmlEsc(c.series)}</text>`);
    if (off) legend.push(`<text x="${ml + pw + 52}" y="${ly + 15}" font-size="9" fill="#666">${xmlEsc(off.trim())}</text>`);
  });
  out.push(...legend);
  notes.forEach((n, j) => {
    const y = mt + 10 + cs.length * 26 + 8 + j * 15;
    out.push(`<text x="${ml + pw + 15}" y="${y}" font-size="11" fill="#222" xml:space="preserve">${xmlEsc(n)}</text>`);
  });
  out.push('</svg>');
  return out.join('\n');
}
