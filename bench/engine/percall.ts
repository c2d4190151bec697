/**
 * `node dist/bench/engine/percall.js [--datasets mnist,embeddings,synthetic] [--reps 5]`
 *
 * The per-call path, side by side in one process, passes interleaved:
 * 1. the hop: per-call µs of the addon's async search (napi async work on the libuv
 *    pool, thread wake-ups, result copy) against its synchronous searchNow, on a 16-point
 *    index where the search itself costs next to nothing;
 * 2. per data set, at the smallest ef of each library that reaches recall@10 0.95:
 *    one awaited `index.search()` per query through the Engine interface (quiver-native,
 *    with the fast path of bindings/native.ts), the addon's async search alone (the hop
 *    on every call, as before the fast path), and hnswlib-node's synchronous searchKnn;
 *    a 1 ms setInterval probe measures the event loop's largest lag during each series.
 * Writes bench/results/percall-<tag>.{json,md}.
 */
import * as fs from 'fs';
import * as path from 'path';
import { addonPath } from '../../bindings/artifacts';
import type { Engine, SearchResult, VectorIndex } from '../../bindings/engine';
import { FAST_PATH_MAX_US, TURN_BUDGET_US, loadAddon, unpackHits } from '../../bindings/native';
import { EF_CONSTRUCT, K, M, REPO_ROOT, errMsg, fmt, parseArgs } from './common';
import { loadDataset } from './datasets';
import { groundTruth, metricSpace, recallAtK } from './groundtruth';
import { percentile } from './measure';
import { loadQuiver } from './quiver';

const EFS = [10, 11, 12, 13, 14, 16, 18, 20, 22, 24, 28, 32, 36, 40, 48, 56, 64, 72, 80, 96, 112, 128, 160, 192, 256];
const TARGET = 0.95;

/** The addon's index as it is (its search results packed in one ArrayBuffer: `unpackHits`). */
type RawIndex = {
  search(q: Float32Array, o: object): Promise<ArrayBuffer>;
  searchNow(q: Float32Array, o: object): ArrayBuffer | null;
  close(): void;
};

interface Timed {
  seconds: number;
  maxLagMs: number;
  /** Ticks of the 1 ms probe that came more than 1 ms late, and all ticks. */
  over1: number;
  ticks: number;
  /** Longest time the calls held the event loop without a turn. */
  maxStretchMs: number;
  /** Each turn's hold (ms). */
  holds: number[];
}

/** Runs fn n times (awaiting each), with a 1 ms interval probe of the event loop. */
async function timed(n: number, fn: (i: number) => unknown, cpu?: number[]): Promise<Timed> {
  await new Promise((r) => setTimeout(r, 5));
  let last = performance.now();
  let maxLagMs = 0;
  let over1 = 0;
  let ticks = 0;
  const probe = setInterval(() => {
    const now = performance.now();
    const lag = now - last - 1;
    if (lag > maxLagMs) maxLagMs = lag;
    if (lag > 1) over1++;
    ticks++;
    last = now;
  }, 1);
  // The longest stretch the loop below holds the event loop: from the first call of an
  // event-loop turn to the end of the last call made in the same turn (calls whose
  // Promise is already resolved chain in microtasks without a turn). A setImmediate,
  // queued only while calls run, marks where a turn ended.
  let turn = 0;
  let queued = false;
  const endTurn = () => {
    queued = false;
    turn++;
  };
  let seenTurn = -1;
  let stretchStart = 0;
  let maxStretchMs = 0;
  let lastEnd = 0;
  let lastCpu = -1;
  const holds: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    const start = performance.now();
    if (turn !== seenTurn) {
      if (lastEnd > stretchStart) holds.push(lastEnd - stretchStart);
      if (cpu) {
        const c = processCpuMs();
        if (lastCpu >= 0) cpu.push(c - lastCpu);
        lastCpu = c;
      }
      seenTurn = turn;
      stretchStart = start;
    }
    if (!queued) {
      queued = true;
      setImmediate(endTurn);
    }
    const r = fn(i);
    const issued = performance.now();
    if (issued - stretchStart > maxStretchMs) maxStretchMs = issued - stretchStart;
    lastEnd = issued;
    if (r instanceof Promise) await r;
    const end = performance.now();
    if (turn === seenTurn) {
      lastEnd = end;
      if (end - stretchStart > maxStretchMs) maxStretchMs = end - stretchStart;
    }
  }
  if (lastEnd > stretchStart) holds.push(lastEnd - stretchStart);
  const seconds = (performance.now() - t0) / 1000;
  const pending = performance.now() - last - 1;
  if (pending > maxLagMs) maxLagMs = pending;
  clearInterval(probe);
  return { seconds, maxLagMs: Math.max(0, maxLagMs), over1, ticks, maxStretchMs, holds };
}

/**
 * CPU time (ms) this process has run, all threads (getrusage, µs resolution): an upper
 * bound of the event-loop thread's. Not /proc/thread-self/schedstat: the kernel brings
 * a running thread's total there up to date only when the thread sleeps or at a
 * scheduler tick (4 ms here), so a loop that never sleeps read as 0 or 4 ms per turn.
 */
function processCpuMs(): number {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e3;
}

function ids(labels: BigUint64Array): number[] {
  return Array.from(labels, (x) => Number(x));
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const opts = parseArgs(argv);
  if (!argv.includes('--datasets')) opts.datasets = ['mnist', 'embeddings', 'synthetic'];
  const reps = argv.includes('--reps') ? opts.reps : 5;
  const engine = await loadQuiver(opts.loader, 'native');
  if (typeof engine === 'string') throw new Error(engine);
  const file = addonPath();
  if (!file) throw new Error('native addon not built');
  const addon = loadAddon(file) as unknown as { NativeIndex: new (o: object) => RawIndex & { add(l: BigUint64Array, v: Float32Array, t?: number): Promise<void> } };
  // eslint-disable-next-line @typescript-eslint/no-var-requires
  const hnswlib = require('hnswlib-node') as typeof import('hnswlib-node');
  const out: Record<string, unknown> = { date: new Date().toISOString(), node: process.version, kernels: engine.kernels, reps, fastPathMaxUs: FAST_PATH_MAX_US, turnBudgetUs: TURN_BUDGET_US };
  const md: string[] = [];

  // ---- 1. the hop ----
  {
    const dim = 128;
    const tiny = new addon.NativeIndex({ dim, distance: 'Cosine', m: M, efConstruct: EF_CONSTRUCT, seed: 1 });
    const n = 16;
    const v = new Float32Array(n * dim).map((_, i) => Math.sin(i));
    await tiny.add(BigUint64Array.from({ length: n }, (_, i) => BigInt(i)), v);
    const q = v.slice(0, dim);
    const o = { k: K, ef: 16 };
    const calls = 20000;
    const asyncUs: number[] = [];
    const syncUs: number[] = [];
    const computeUs: number[] = [];
    for (let rep = 0; rep < reps; rep++) {
      const a = await timed(calls, () => tiny.search(q, o));
      asyncUs.push((a.seconds * 1e6) / calls);
      const s = await timed(calls, () => tiny.searchNow(q, o));
      syncUs.push((s.seconds * 1e6) / calls);
      computeUs.push(unpackHits(tiny.searchNow(q, o)!).computeUs ?? NaN);
    }
    const best = (a: number[]) => Math.min(...a);
    const hop = { asyncUs: best(asyncUs), syncUs: best(syncUs), searchUs: best(computeUs), hopUs: best(asyncUs) - best(syncUs), allAsyncUs: asyncUs, allSyncUs: syncUs };
    out.hop = hop;
    console.log(`hop: async search ${fmt(hop.asyncUs, 1)} µs/call, searchNow ${fmt(hop.syncUs, 1)} µs/call (search itself ${fmt(hop.searchUs, 1)} µs) → hop ${fmt(hop.hopUs, 1)} µs`);
    md.push(
      '## The hop (16-point 128-d index, ef 16, k 10)',
      '',
      `best of ${reps} interleaved passes of ${calls} calls each:`,
      '',
      '| call | µs per call |',
      '|---|---:|',
      `| \`await addon.search()\` (napi async work on the libuv pool) | ${fmt(hop.asyncUs, 1)} |`,
      `| \`addon.searchNow()\` (synchronous, same search) | ${fmt(hop.syncUs, 1)} |`,
      `| the search itself (computeUs) | ${fmt(hop.searchUs, 1)} |`,
      `| **hop** (async − sync) | **${fmt(hop.hopUs, 1)}** |`,
      '',
      `all passes, async: ${asyncUs.map((x) => fmt(x, 1)).join(', ')}; sync: ${syncUs.map((x) => fmt(x, 1)).join(', ')}`,
      '',
    );
    tiny.close();
  }

  // ---- 2. per data set ----
  md.push(
    `## Per call at recall@10 ≥ ${TARGET} (M ${M}, ef_construct ${EF_CONSTRUCT}, f32, smallest ef of each library reaching the target)`,
    '',
    `QPS: best of ${reps} interleaved passes over all queries, one call at a time. Longest hold: the longest stretch the series' calls kept the event loop without a turn (from the first call of a turn to the end of the last call in it; all passes). Max lag: largest delay of a 1 ms setInterval tick during the series (all passes), with the count of ticks more than 1 ms late: on this shared, loaded machine it includes the OS descheduling the process, so the async-only series is the control.`,
    '',
    '| data set | quiver ef | recall | quiver `await search()` QPS | longest hold ms | max lag ms (ticks > 1 ms / ticks) | addon async only QPS | longest hold ms | max lag ms (…) | hnswlib-node ef | recall | hnswlib-node `searchKnn` QPS | longest hold ms | max lag ms (…) | **ratio quiver / hnswlib-node** | ratio before (async only / hnswlib-node) |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  );
  const sets: Record<string, unknown>[] = [];
  const holdLines: string[] = [];
  const cpuLines: string[] = [];
  for (const key of opts.datasets) {
    const ds = loadDataset(key, opts);
    if ('skipped' in ds) {
      console.log(`${key}: skipped: ${ds.skipped}`);
      md.push(`| ${key} | skipped: ${ds.skipped} | | | | | | | | | | | | | | |`);
      continue;
    }
    const space = metricSpace(ds);
    const gt = await groundTruth(ds, space, K, opts.dataDir);
    const rows: Float32Array[] = [];
    for (let i = 0; i < ds.nQuery; i++) rows.push(ds.queries.slice(i * ds.dim, (i + 1) * ds.dim));
    const arrays = rows.map((r) => Array.from(r));
    const labels = BigUint64Array.from({ length: ds.nBase }, (_, i) => BigInt(i));

    const t0 = performance.now();
    const qIdx: VectorIndex = (engine as Engine).createIndex({ dim: ds.dim, distance: ds.distance, m: M, efConstruct: EF_CONSTRUCT, seed: 42 });
    await qIdx.add(labels, ds.base.slice(), 2);
    // The same graph through the raw addon: a second index built identically (same seed,
    // but 2 build threads make graphs differ slightly), used only for the async-only series.
    const raw = new addon.NativeIndex({ dim: ds.dim, distance: ds.distance, m: M, efConstruct: EF_CONSTRUCT, seed: 42 });
    await raw.add(labels, ds.base.slice(), 2);
    const h = new hnswlib.HierarchicalNSW(ds.distance === 'Cosine' ? 'cosine' : 'l2', ds.dim);
    h.initIndex(ds.nBase, M, EF_CONSTRUCT, 42);
    for (let i = 0; i < ds.nBase; i++) h.addPoint(Array.from(ds.base.subarray(i * ds.dim, (i + 1) * ds.dim)), i);
    console.log(`${key}: ${ds.nBase} × ${ds.dim}-d built in ${fmt((performance.now() - t0) / 1000, 1)} s`);

    // Recall per ef; pick each library's smallest ef reaching the target.
    const pick = async (recallAt: (ef: number) => Promise<number>): Promise<{ ef: number; recall: number }> => {
      let last = { ef: EFS[EFS.length - 1], recall: 0 };
      for (const ef of EFS) {
        const r = await recallAt(ef);
        last = { ef, recall: r };
        if (r >= TARGET) return last;
      }
      return last;
    };
    const qPick = await pick(async (ef) => {
      const res: number[][] = [];
      for (const r of rows) res.push(ids((await qIdx.search(r, { k: K, ef })).labels));
      return recallAtK(space, gt, res, K);
    });
    const rPick = await pick(async (ef) => {
      const res: number[][] = [];
      for (const r of rows) res.push(ids(unpackHits(await raw.search(r, { k: K, ef })).labels));
      return recallAtK(space, gt, res, K);
    });
    const hPick = await pick(async (ef) => {
      h.setEf(ef);
      return recallAtK(space, gt, arrays.map((a) => h.searchKnn(a, K).neighbors), K);
    });
    h.setEf(hPick.ef);

    const n = ds.nQuery;
    const qo = { k: K, ef: qPick.ef };
    const ro = { k: K, ef: rPick.ef };
    const qQps: number[] = [];
    const rQps: number[] = [];
    const hQps: number[] = [];
    let qLag = 0;
    let rLag = 0;
    let hLag = 0;
    const over = { q: 0, r: 0, h: 0, qt: 0, rt: 0, ht: 0 };
    const stretch = { q: 0, r: 0, h: 0 };
    const holds: { q: number[]; r: number[] } = { q: [], r: [] };
    for (let rep = 0; rep < reps; rep++) {
      const a = await timed(n, (i) => qIdx.search(rows[i], qo));
      qQps.push(n / a.seconds);
      qLag = Math.max(qLag, a.maxLagMs);
      over.q += a.over1;
      stretch.q = Math.max(stretch.q, a.maxStretchMs);
      holds.q.push(...a.holds);
      over.qt += a.ticks;
      const b = await timed(n, (i) => raw.search(rows[i], ro));
      rQps.push(n / b.seconds);
      rLag = Math.max(rLag, b.maxLagMs);
      over.r += b.over1;
      stretch.r = Math.max(stretch.r, b.maxStretchMs);
      holds.r.push(...b.holds);
      over.rt += b.ticks;
      const c = await timed(n, (i) => h.searchKnn(arrays[i], K));
      hQps.push(n / c.seconds);
      hLag = Math.max(hLag, c.maxLagMs);
      over.h += c.over1;
      stretch.h = Math.max(stretch.h, c.maxStretchMs);
      over.ht += c.ticks;
    }
    // One more, untimed pass each: the process's CPU time between consecutive turn
    // starts (an upper bound of the CPU work one turn did, blind to OS descheduling).
    const cpuQ: number[] = [];
    const cpuR: number[] = [];
    await timed(n, (i) => qIdx.search(rows[i], qo), cpuQ);
    await timed(n, (i) => raw.search(rows[i], ro), cpuR);
    // Search cost per query at the chosen ef (from the engine's own timing).
    const costs = Float64Array.from(rows.slice(0, 200).map((r) => { const p = raw.searchNow(r, ro); return p === null ? NaN : (unpackHits(p).computeUs ?? NaN); }));
    const best = (a: number[]) => Math.max(...a);
    const dist = (h: number[]) => {
      const f = Float64Array.from(h);
      return { turns: h.length, p50: percentile(f, 50), p99: percentile(f, 99), p999: percentile(f, 99.9), over1: h.filter((x) => x > 1).length };
    };
    const cq = dist(cpuQ);
    const cr = dist(cpuR);
    const hq = dist(holds.q);
    const hr = dist(holds.r);
    const s = {
      dataset: key,
      nBase: ds.nBase,
      dim: ds.dim,
      distance: ds.distance,
      quiver: { ef: qPick.ef, recall: qPick.recall, qps: best(qQps), allQps: qQps, maxLagMs: qLag, ticksOver1Ms: over.q, ticks: over.qt, maxStretchMs: stretch.q },
      asyncOnly: { ef: rPick.ef, recall: rPick.recall, qps: best(rQps), allQps: rQps, maxLagMs: rLag, ticksOver1Ms: over.r, ticks: over.rt, maxStretchMs: stretch.r },
      hnswlib: { ef: hPick.ef, recall: hPick.recall, qps: best(hQps), allQps: hQps, maxLagMs: hLag, ticksOver1Ms: over.h, ticks: over.ht, maxStretchMs: stretch.h },
      searchUsMedian: percentile(costs, 50),
      searchUsP99: percentile(costs, 99),
      ratio: best(qQps) / best(hQps),
      holdsQuiver: hq,
      holdsAsyncOnly: hr,
      turnCpuQuiver: { ...cq, max: Math.max(0, ...cpuQ) },
      turnCpuAsyncOnly: { ...cr, max: Math.max(0, ...cpuR) },
      ratioBefore: best(rQps) / best(hQps),
    };
    sets.push(s);
    console.log(
      `${key}: quiver ef ${qPick.ef} (recall ${fmt(qPick.recall)}) ${fmt(s.quiver.qps, 0)} QPS lag ${fmt(qLag, 2)} ms (${over.q}/${over.qt} ticks > 1 ms) held ${fmt(stretch.q, 3)} ms | async-only ef ${rPick.ef} ${fmt(s.asyncOnly.qps, 0)} QPS lag ${fmt(rLag, 2)} ms (${over.r}/${over.rt}) held ${fmt(stretch.r, 3)} ms | hnswlib-node ef ${hPick.ef} (recall ${fmt(hPick.recall)}) ${fmt(s.hnswlib.qps, 0)} QPS lag ${fmt(hLag, 2)} ms held ${fmt(stretch.h, 1)} ms | ratio ${fmt(s.ratio, 2)} (before ${fmt(s.ratioBefore, 2)}); search median ${fmt(s.searchUsMedian, 1)} µs`,
    );
    cpuLines.push(
      `| ${key} | ${cq.turns} | ${fmt(cq.p50, 3)} | ${fmt(cq.p99, 3)} | ${fmt(cq.p999, 3)} | ${fmt(Math.max(0, ...cpuQ), 3)} | ${cq.over1} | ${cr.turns} | ${fmt(cr.p50, 3)} | ${fmt(cr.p99, 3)} | ${fmt(Math.max(0, ...cpuR), 3)} | ${cr.over1} |`,
    );
    holdLines.push(
      `| ${key} | ${hq.turns} | ${fmt(hq.p50, 3)} | ${fmt(hq.p99, 3)} | ${fmt(hq.p999, 3)} | ${fmt(stretch.q, 3)} | ${hq.over1} | ${hr.turns} | ${fmt(hr.p50, 3)} | ${fmt(hr.p99, 3)} | ${fmt(hr.p999, 3)} | ${fmt(stretch.r, 3)} | ${hr.over1} |`,
    );
    md.push(
      `| ${key} (${ds.nBase} × ${ds.dim}-d ${ds.distance}) | ${qPick.ef} | ${fmt(qPick.recall)} | ${fmt(s.quiver.qps, 0)} | ${fmt(stretch.q, 3)} | ${fmt(qLag, 2)} (${over.q}/${over.qt}) | ${fmt(s.asyncOnly.qps, 0)} | ${fmt(stretch.r, 3)} | ${fmt(rLag, 2)} (${over.r}/${over.rt}) | ${hPick.ef} | ${fmt(hPick.recall)} | ${fmt(s.hnswlib.qps, 0)} | ${fmt(stretch.h, 1)} | ${fmt(hLag, 2)} (${over.h}/${over.ht}) | **${fmt(s.ratio, 2)}×** | ${fmt(s.ratioBefore, 2)}× |`,
    );
    qIdx.close();
    raw.close();
  }
  out.sets = sets;
  md.push(
    '',
    '### How long the event loop is held per turn (ms)',
    '',
    'Each event-loop turn in which the series made calls, from its first call to the end of its last: quiver `await search()` (inline searches chain until the turn budget, then the next one waits for the next turn) against the addon\'s async search alone (one call per turn). Wall-clock time, so an OS deschedule on this loaded machine lands in it as well; the control shows that floor.',
    '',
    '| data set | quiver turns | p50 | p99 | p99.9 | max | turns > 1 ms | async-only turns | p50 | p99 | p99.9 | max | turns > 1 ms |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...holdLines,
    '',
    '### CPU time per turn (ms)',
    '',
    'One extra untimed pass per series: the process\'s CPU time (process.cpuUsage(), all threads) between the starts of consecutive turns in which the series made calls. It is blind to the OS descheduling the process, and an upper bound of the event-loop thread\'s work in one turn: it includes whatever else the loop ran in between and every other thread\'s time, so for the async-only series the pool thread\'s searches as well.',
    '',
    '| data set | quiver turns | p50 | p99 | p99.9 | max | turns > 1 ms | async-only turns | p50 | p99 | max | turns > 1 ms |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...cpuLines,
    `Search cost at the chosen ef (engine computeUs, first 200 queries): ${sets.map((s) => `${s.dataset} median ${fmt(s.searchUsMedian as number, 1)} µs, p99 ${fmt(s.searchUsP99 as number, 1)} µs`).join('; ')}.`,
    '',
    `Fast path bounds (bindings/native.ts): a search runs inline when its estimated cost (up at once to a dearer search, down by a running mean) is below ${FAST_PATH_MAX_US} µs; inline searches of one event-loop turn stop at ${TURN_BUDGET_US} µs, and the next one waits for the next turn (setImmediate); a dearer search, or one while others are on the pool or clients are concurrent, takes the hop. hnswlib-node's searchKnn is synchronous: its lag column is the whole loop of ${'queries'} without a turn.`,
  );
  const stem = path.join(opts.resultsDir, `percall-${opts.tag}`);
  fs.mkdirSync(path.dirname(stem), { recursive: true });
  fs.writeFileSync(`${stem}.json`, JSON.stringify(out, null, 2));
  const header = [
    `# Per-call search: one awaited search() per query (${opts.tag})`,
    '',
    `Command: \`npx tsc -p bench/tsconfig.json; node dist/bench/engine/percall.js ${argv.join(' ')}\` — node ${process.version}, quiver kernels ${engine.kernels}, one process, passes interleaved (quiver, async only, hnswlib-node).`,
    '',
  ];
  fs.writeFileSync(`${stem}.md`, [...header, ...md, ''].join('\n'));
  console.log(`wrote ${path.relative(REPO_ROOT, stem)}.{json,md}`);
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(errMsg(e));
    process.exit(1);
  },
);
