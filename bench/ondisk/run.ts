/**
 * `npm run bench:ondisk [-- --n 1000000 --dim 768 --queries 500 --efs 64,128 --modes disk,memory,f32,graph --m 16 --ef-construct 100 --root DIR --tag NAME]`
 *
 * On-disk dense vectors against in-memory vectors, both with int8 (scalar) quantization
 * kept in RAM (issue 20's must-hold: with 1M x 768 on disk, RSS <= 0.4x the raw f32
 * bytes, recall@10 >= 0.95 at ef 128, QPS >= 0.5x the in-memory mode once the page cache
 * is warm). For each mode, one after the other on the same machine and the same data:
 *  - a real server (`node bin/quiver` of this checkout, or of `--root DIR`), one
 *    collection `{size: dim, distance: Cosine, on_disk: <mode>}` with
 *    `quantization_config.scalar {type: int8, always_ram: true}` (mode `f32`: no
 *    quantization, in memory: the recall the graph alone reaches on this data; mode
 *    `graph`: as `disk`, plus `hnsw_config.on_disk: true`, the graph's level-0 links in
 *    a memory-mapped file too) and
 *    `hnsw_config {m, ef_construct}` when `--m` / `--ef-construct` are given (else the
 *    collection defaults, m 16 / ef_construct 100);
 *  - N points loaded through REST (batches of `--batch`, wait=true, two in flight), then
 *    a wait until the optimizer has indexed every vector (`indexed_vectors_count`);
 *  - RSS once the server is quiet and RSS has stopped moving ("after the load"), then
 *    after a restart on the same storage (steady state, page cache warm);
 *  - a warm-up pass over the queries, then per ef: recall@10 against exact brute force
 *    (computed in this process by worker threads over the same f32 values, independent
 *    of the engine, cached under bench/data), QPS at concurrency 1 and 8 (best of
 *    `--reps` passes, modes measured one after the other), and the largest RSS sampled
 *    while the queries ran.
 * Data: a clustered synthetic set (no 1M x 768 real set is reachable from a package
 * registry here): 1000 centres ~ N(0,1), within-cluster sd decaying over the dimensions
 * (0.1 + 0.9 * exp(-j / 64)), values rounded to 4 decimals so the JSON the server parses
 * gives exactly the f32 values the ground truth uses.
 * Results: bench/results/ondisk-<tag>.{json,md}, rewritten after each mode (a run stopped
 * part-way keeps the modes that finished, marked partial).
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { REPO_ROOT } from '../engine/common';
import { groundTruth, metricSpace, recallAtK } from '../engine/groundtruth';
import type { Dataset } from '../engine/common';
import { makeData } from './data';
import { makeClient, runConcurrent, type RestClient } from '../rest/client';
import { QuiverServer, dirBytes, settledRss } from '../rest/server';

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

const C = 'ondisk_bench';
/**
 * disk: on_disk + int8; memory: int8, originals in memory; f32: no quantization, in memory (the graph's own recall);
 * graph: on_disk + int8 + hnsw_config.on_disk (originals and level-0 links in mapped files).
 */
type Mode = 'disk' | 'memory' | 'f32' | 'graph';
const MODES: readonly Mode[] = ['disk', 'memory', 'f32', 'graph'];
const MODE_LABEL: Record<Mode, string> = {
  disk: 'on_disk: true, int8',
  memory: 'on_disk: false, int8',
  f32: 'on_disk: false, no quantization',
  graph: 'on_disk: true, int8, hnsw_config.on_disk: true',
};
const K = 10;
const QUIET_MS = 5000;
const mb = (b: number | null) => (b === null ? NaN : Math.round(b / 1048576));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** JSON text of one row: the 4-decimal values print as their shortest decimal (what the server parses back to the same f32). */
function rowJson(a: Float32Array, i: number, dim: number): string {
  const parts = new Array<string>(dim);
  for (let j = 0; j < dim; j++) parts[j] = String(Math.round(a[i * dim + j] * 1e4) / 1e4);
  return `[${parts.join(',')}]`;
}


interface EfResult {
  ef: number;
  recall: number;
  qps_c1: number;
  qps_c8: number;
}

interface ModeResult {
  mode: Mode;
  load_seconds: number;
  index_seconds: number;
  rss_after_load_mb: number;
  rss_after_restart_mb: number;
  rss_max_during_queries_mb: number;
  storage_mb: number;
  collection_config: unknown;
  efs: EfResult[];
}


async function waitIndexed(client: RestClient, n: number, log: (s: string) => void): Promise<void> {
  let lastLog = 0;
  for (;;) {
    const info = await client.json<{ status: string; indexed_vectors_count: number; points_count: number }>('GET', `/collections/${C}`);
    if (info.indexed_vectors_count >= n && info.status === 'green') return;
    // Green with every point stored but not all indexed: the optimizer has nothing left to
    // do (the points fit under the indexing threshold), so waiting would never end.
    if (info.status === 'green' && info.points_count >= n && info.indexed_vectors_count < n) {
      throw new Error(`the collection is green with ${info.indexed_vectors_count} of ${n} vectors indexed: --n is below the indexing threshold (storage.optimizers.indexing_threshold_kb, 20,000 KiB by default), so the points stay in the appendable segment; use a larger --n`);
    }
    if (Date.now() - lastLog > 30_000) {
      log(`    indexed ${info.indexed_vectors_count} of ${n} (status ${info.status})`);
      lastLog = Date.now();
    }
    await sleep(1000);
  }
}

async function queryPass(client: RestClient, ds: Dataset, ef: number, concurrency: number, out?: number[][]): Promise<number> {
  const { dim, nQuery } = ds;
  const bodies = Array.from({ length: nQuery }, (_, q) => Buffer.from(`{"query":${rowJson(ds.queries, q, dim)},"limit":${K},"params":{"hnsw_ef":${ef}}}`));
  let next = 0;
  const t0 = process.hrtime.bigint();
  const lane = async () => {
    for (;;) {
      const q = next++;
      if (q >= nQuery) return;
      const r = await client.request('POST', `/collections/${C}/points/query`, bodies[q], { 'content-type': 'application/json' });
      if (r.status !== 200) throw new Error(`query answered ${r.status}: ${r.body.toString('utf8').slice(0, 300)}`);
      if (out) {
        const parsed = JSON.parse(r.body.toString('utf8')) as { result: { points: Array<{ id: number }> } };
        out[q] = parsed.result.points.map((p) => p.id);
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, lane));
  const sec = Number(process.hrtime.bigint() - t0) / 1e9;
  return nQuery / sec;
}

/** `hnsw_config` of the collection: only the fields given on the command line. */
interface HnswArgs {
  m?: number;
  ef_construct?: number;
}

async function runMode(mode: Mode, ds: Dataset, opts: { batch: number; efs: number[]; reps: number; root?: string; hnsw: HnswArgs }, space: ReturnType<typeof metricSpace>, gt: Awaited<ReturnType<typeof groundTruth>>): Promise<ModeResult> {
  const log = (s: string) => console.log(`[${mode}] ${s}`);
  const server = await QuiverServer.start({ nodeArgs: [], keepStorage: true, env: {}, root: opts.root });
  let client: RestClient = makeClient('http', server.url, 8);
  let restarted: QuiverServer | null = null;
  const { dim, nBase: n } = ds;
  try {
    const config = {
      vectors: { size: dim, distance: 'Cosine', on_disk: mode === 'disk' || mode === 'graph' },
      ...(Object.keys(opts.hnsw).length > 0 || mode === 'graph' ? { hnsw_config: { ...opts.hnsw, ...(mode === 'graph' ? { on_disk: true } : {}) } } : {}),
      // f32: the reference point without quantization (what the graph alone reaches).
      ...(mode === 'f32' ? {} : { quantization_config: { scalar: { type: 'int8', always_ram: true } } }),
    };
    await client.json('PUT', `/collections/${C}`, config);
    const t0 = Date.now();
    const { seconds: load } = await runConcurrent(Math.ceil(n / opts.batch), 2, async (b) => {
      const from = b * opts.batch;
      const parts: string[] = [];
      for (let i = from; i < Math.min(n, from + opts.batch); i++) parts.push(`{"id":${i},"vector":${rowJson(ds.base, i, dim)}}`);
      const r = await client.request('PUT', `/collections/${C}/points?wait=true`, Buffer.from(`{"points":[${parts.join(',')}]}`), { 'content-type': 'application/json' });
      if (r.status !== 200) throw new Error(`upsert answered ${r.status}: ${r.body.toString('utf8').slice(0, 300)}`);
      // Every 100,000 points (a batch that crosses the mark; batch sizes need not divide it).
      if (Math.floor(from / 100_000) !== Math.floor((from + opts.batch) / 100_000)) log(`  ${Math.min(n, from + opts.batch)} points sent (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
    });
    log(`loaded ${n} in ${load.toFixed(1)} s; waiting for the index`);
    await waitIndexed(client, n, log);
    const indexed = (Date.now() - t0) / 1000 - load;
    const rssLoad = await settledRss(server, QUIET_MS, 30);
    log(`indexed after ${indexed.toFixed(1)} more s; RSS ${mb(rssLoad)} MB`);
    client.close();
    const storage = path.join(server.dir, 'storage');
    await server.stop();
    restarted = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {}, storageFrom: storage, root: opts.root });
    fs.rmSync(server.dir, { recursive: true, force: true });
    client = makeClient('http', restarted.url, 8);
    await waitIndexed(client, n, log);
    const rssRestart = await settledRss(restarted, QUIET_MS, 30);
    const storageMb = mb(dirBytes(path.join(restarted.dir, 'storage')));
    log(`restarted; RSS ${mb(rssRestart)} MB; storage ${storageMb} MB`);
    const info = await client.json<{ config: unknown }>('GET', `/collections/${C}`);
    // RSS sampled while queries run.
    let rssMax = 0;
    const srv = restarted;
    const sampler = setInterval(() => {
      const r = srv.rss();
      if (r !== null && r > rssMax) rssMax = r;
    }, 200);
    const efs: EfResult[] = [];
    try {
      await queryPass(client, ds, opts.efs[opts.efs.length - 1], 8); // warm the page cache
      for (const ef of opts.efs) {
        const ids: number[][] = [];
        await queryPass(client, ds, ef, 8, ids);
        const recall = recallAtK(space, gt, ids, K);
        let c1 = 0;
        let c8 = 0;
        for (let r = 0; r < opts.reps; r++) {
          c1 = Math.max(c1, await queryPass(client, ds, ef, 1));
          c8 = Math.max(c8, await queryPass(client, ds, ef, 8));
        }
        efs.push({ ef, recall: Number(recall.toFixed(4)), qps_c1: Math.round(c1), qps_c8: Math.round(c8) });
        log(`ef ${ef}: recall@10 ${recall.toFixed(4)}, QPS c=1 ${Math.round(c1)}, c=8 ${Math.round(c8)}`);
      }
    } finally {
      clearInterval(sampler);
    }
    return {
      mode,
      load_seconds: load,
      index_seconds: indexed,
      rss_after_load_mb: mb(rssLoad),
      rss_after_restart_mb: mb(rssRestart),
      rss_max_during_queries_mb: mb(rssMax),
      storage_mb: storageMb,
      collection_config: (info as { config: unknown }).config,
      efs,
    };
  } catch (e) {
    const s = restarted ?? server;
    console.error(s.logTail().join('\n'));
    throw e;
  } finally {
    client.close();
    if (restarted) await restarted.stop();
    else await server.stop();
  }
}

async function main(): Promise<void> {
  const n = Number(arg('n', '1000000'));
  const dim = Number(arg('dim', '768'));
  const nq = Number(arg('queries', '500'));
  const batch = Number(arg('batch', '256'));
  const reps = Number(arg('reps', '2'));
  const efs = arg('efs', '64,128').split(',').map(Number);
  const modes = arg('modes', 'disk,memory').split(',') as Mode[];
  for (const m of modes) if (!MODES.includes(m)) throw new Error(`--modes: ${m} is not one of ${MODES.join(', ')}`);
  const hnsw: HnswArgs = {};
  for (const [flag, key] of [['m', 'm'], ['ef-construct', 'ef_construct']] as const) {
    const v = arg(flag, '');
    if (v === '') continue;
    const x = Number(v);
    if (!Number.isInteger(x) || x < 1) throw new Error(`--${flag}: ${v} is not a positive integer`);
    hnsw[key] = x;
  }
  const rootArg = arg('root', '');
  const root = rootArg ? path.resolve(rootArg) : undefined;
  const tag = arg('tag', new Date().toISOString().slice(0, 10));
  console.log(`on-disk vectors bench: ${n} x ${dim}, ${nq} queries, efs ${efs.join(',')}, modes ${modes.join(',')}, hnsw_config ${JSON.stringify(hnsw)}, server ${root ?? REPO_ROOT}; load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  const ds = makeData(n, nq, dim);
  console.log(`data generated in ${ds.prepareSeconds.toFixed(1)} s`);
  const space = metricSpace(ds);
  const gt = await groundTruth(ds, space, K, path.join(REPO_ROOT, 'bench', 'data'));
  console.log(`ground truth: ${gt.cached ? 'cached' : `${gt.seconds.toFixed(1)} s on ${gt.workers} workers`}`);
  const results: ModeResult[] = [];
  // Written after every mode, so a run stopped part-way keeps the modes that finished.
  const report = (): string => {
    const rawMb = (n * dim * 4) / 1048576;
    const disk = results.find((r) => r.mode === 'disk');
    const memory = results.find((r) => r.mode === 'memory');
    const checks: string[] = [];
    if (disk) {
      const ratio = disk.rss_after_restart_mb / rawMb;
      const ratioQ = disk.rss_max_during_queries_mb / rawMb;
      checks.push(`RSS on disk / raw f32 bytes: ${ratio.toFixed(3)} after a restart, ${ratioQ.toFixed(3)} at most during queries (must be <= 0.4: ${Math.max(ratio, ratioQ) <= 0.4 ? 'holds' : 'DOES NOT HOLD'})`);
      const e128 = disk.efs.find((e) => e.ef === 128);
      if (e128) checks.push(`recall@10 at ef 128 on disk: ${e128.recall} (must be >= 0.95: ${e128.recall >= 0.95 ? 'holds' : 'DOES NOT HOLD'})`);
    }
    const graph = results.find((r) => r.mode === 'graph');
    if (graph) {
      const ratio = graph.rss_after_restart_mb / rawMb;
      const ratioQ = graph.rss_max_during_queries_mb / rawMb;
      checks.push(`RSS with the graph on disk too / raw f32 bytes: ${ratio.toFixed(3)} after a restart, ${ratioQ.toFixed(3)} at most during queries (must be <= 0.4: ${Math.max(ratio, ratioQ) <= 0.4 ? 'holds' : 'DOES NOT HOLD'})`);
      const g128 = graph.efs.find((e) => e.ef === 128);
      if (g128) checks.push(`recall@10 at ef 128 with the graph on disk: ${g128.recall} (must be >= 0.95: ${g128.recall >= 0.95 ? 'holds' : 'DOES NOT HOLD'})`);
    }
    if (graph && disk) {
      checks.push(`RSS after a restart with the graph on disk too / vectors on disk only: ${(graph.rss_after_restart_mb / disk.rss_after_restart_mb).toFixed(3)} (${graph.rss_after_restart_mb} / ${disk.rss_after_restart_mb} MB)`);
      for (const e of graph.efs) {
        const d = disk.efs.find((x) => x.ef === e.ef);
        if (d) checks.push(`graph on disk / vectors on disk only at ef ${e.ef}: QPS c=1 ${(e.qps_c1 / d.qps_c1).toFixed(2)}, c=8 ${(e.qps_c8 / d.qps_c8).toFixed(2)}; recall ${e.recall} vs ${d.recall}`);
      }
    }
    if (graph && memory) {
      for (const e of graph.efs) {
        const m = memory.efs.find((x) => x.ef === e.ef);
        if (!m) continue;
        const r1 = e.qps_c1 / m.qps_c1;
        const r8 = e.qps_c8 / m.qps_c8;
        checks.push(`QPS with the graph on disk / in memory at ef ${e.ef}: c=1 ${r1.toFixed(2)}, c=8 ${r8.toFixed(2)} (must be >= 0.5: ${Math.min(r1, r8) >= 0.5 ? 'holds' : 'DOES NOT HOLD'})`);
      }
    }
    if (disk && memory) {
      for (const e of disk.efs) {
        const m = memory.efs.find((x) => x.ef === e.ef);
        if (!m) continue;
        const r1 = e.qps_c1 / m.qps_c1;
        const r8 = e.qps_c8 / m.qps_c8;
        checks.push(`QPS on disk / in memory at ef ${e.ef}: c=1 ${r1.toFixed(2)}, c=8 ${r8.toFixed(2)} (must be >= 0.5: ${Math.min(r1, r8) >= 0.5 ? 'holds' : 'DOES NOT HOLD'})`);
      }
    }
    const pending = modes.slice(results.length);
    const out = { n, dim, queries: nq, batch, reps, efs, hnsw_config: hnsw, modes_not_run_yet: pending, date: new Date().toISOString(), loadavg_end: os.loadavg(), raw_f32_mb: Math.round(rawMb), data: ds.description, results, checks };
    const dir = path.join(REPO_ROOT, 'bench', 'results');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, `ondisk-${tag}.json`), JSON.stringify(out, null, 2) + '\n');
    const cols = results.map((r) => r.mode);
    const row = (name: string, f: (r: ModeResult) => string | number) => `| ${name} | ${results.map(f).join(' | ')} |`;
    const md = [
      `# On-disk vectors against in-memory vectors, int8 in RAM (${out.date})`,
      '',
      ...(pending.length > 0 ? [`Partial: written after mode ${results[results.length - 1].mode}; modes ${pending.join(', ')} had not run yet.`, ''] : []),
      `Command: \`npm run bench:ondisk -- ${process.argv.slice(2).join(' ')}\` (bench/ondisk/run.ts). ${n.toLocaleString('en-US')} x ${dim}-d Cosine (${ds.description}); ` +
        `raw f32 bytes ${Math.round(rawMb)} MB; hnsw_config ${Object.keys(hnsw).length > 0 ? JSON.stringify(hnsw) : 'the defaults (m 16, ef_construct 100)'}. Each mode in turn: a real server, loaded through REST (batches of ${batch}, wait=true, two in flight), ` +
        `indexed, restarted on the same storage; recall@10 of ${nq} queries against exact brute force; QPS best of ${reps} passes at concurrency 1 and 8 ` +
        `after a warm-up pass. 2 cores shared with other work (load average at the end ${os.loadavg().map((x) => x.toFixed(1)).join(' ')}).`,
      '',
      `| | ${cols.map((c) => MODE_LABEL[c]).join(' | ')} |`,
      `|---|${cols.map(() => '---').join('|')}|`,
      row('load (s)', (r) => r.load_seconds.toFixed(1)),
      row('indexing after the load (s)', (r) => r.index_seconds.toFixed(1)),
      row('RSS after the load (MB)', (r) => r.rss_after_load_mb),
      row('RSS after a restart (MB)', (r) => r.rss_after_restart_mb),
      row('largest RSS during queries (MB)', (r) => r.rss_max_during_queries_mb),
      row('storage on disk (MB)', (r) => r.storage_mb),
      ...efs.flatMap((ef) => [
        row(`ef ${ef}: recall@10`, (r) => r.efs.find((e) => e.ef === ef)?.recall ?? '–'),
        row(`ef ${ef}: QPS c=1 / c=8`, (r) => {
          const e = r.efs.find((x) => x.ef === ef);
          return e ? `${e.qps_c1} / ${e.qps_c8}` : '–';
        }),
      ]),
      '',
      ...checks.map((c) => `- ${c}`),
      '',
    ].join('\n');
    fs.writeFileSync(path.join(dir, `ondisk-${tag}.md`), md);
    return md;
  };
  let md = '';
  for (const mode of modes) {
    results.push(await runMode(mode, ds, { batch, efs, reps, root, hnsw }, space, gt));
    md = report();
  }
  console.log(md);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
