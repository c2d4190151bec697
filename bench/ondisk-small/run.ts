/**
 * `node dist/bench/ondisk-small/run.js [--n 200000 --dim 768 --queries 200 --ef 128 --modes disk,memory]`
 *
 * On-disk dense vectors (`on_disk: true` with int8 quantization) against the same
 * collection in memory, one server after the other on the same machine, same data and
 * seed. For each mode: a real server (`node bin/quiver`), one collection of `dim`-d
 * Cosine vectors with `quantization_config: {scalar: {type: int8, always_ram: true}}`,
 * `hnsw_config: {m: 16, ef_construct: 100}` and `on_disk` set; N clustered points
 * (200 centres, seeded) loaded through REST in batches of 500 (`wait=true`, two in
 * flight); wait for green; then a restart on the same storage and, after it:
 *  - RSS once the server is quiet (VmRSS, RssAnon, RssFile from /proc/<pid>/status);
 *  - `queries` queries at `hnsw_ef: ef`, limit 10, one at a time (QPS), RSS after them;
 *  - recall@10 against the server's exact search (`exact: true`, run after the
 *    measured queries: it reads every original).
 * Prints a JSON summary; the figures go into bench/results by hand.
 */
import * as fs from 'fs';
import * as path from 'path';
import { makeClient, type RestClient } from '../rest/client';
import { QuiverServer } from '../rest/server';

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function gauss(r: () => number): number {
  const u = Math.max(r(), 1e-12);
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * r());
}

const N = Number(arg('n', '200000'));
const DIM = Number(arg('dim', '768'));
const Q = Number(arg('queries', '200'));
const EF = Number(arg('ef', '128'));
const C = 'ondisk_bench';
const BATCH = 500;
const CENTRES = 200;

const centres: Float32Array[] = (() => {
  const r = rng(1);
  return Array.from({ length: CENTRES }, () => Float32Array.from({ length: DIM }, () => gauss(r)));
})();

/** Point i: a centre plus noise, the same for every run. */
function point(i: number): number[] {
  const r = rng(1000 + i);
  const c = centres[i % CENTRES];
  const out = new Array<number>(DIM);
  for (let d = 0; d < DIM; d++) out[d] = Math.round((c[d] + 0.6 * gauss(r)) * 1e4) / 1e4;
  return out;
}

function query(j: number): number[] {
  const r = rng(5_000_000 + j);
  const c = centres[Math.floor(r() * CENTRES)];
  return Array.from({ length: DIM }, (_, d) => c[d] + 0.6 * gauss(r));
}

function status(pid: number): { rss: number; anon: number; file: number } {
  const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(s)?.[1] ?? NaN) * 1024;
  return { rss: kb('VmRSS'), anon: kb('RssAnon'), file: kb('RssFile') };
}

const mb = (b: number) => Math.round(b / 1048576);

async function settled(server: QuiverServer): Promise<{ rss: number; anon: number; file: number }> {
  await new Promise((r) => setTimeout(r, 6000));
  let last = status(server.pid);
  for (let i = 0; i < 20; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    const now = status(server.pid);
    if (Math.abs(now.rss - last.rss) < 8 << 20) return now;
    last = now;
  }
  return last;
}

async function waitGreen(client: RestClient): Promise<void> {
  for (;;) {
    const info = await client.json<{ status: string; indexed_vectors_count: number; points_count: number }>('GET', `/collections/${C}`);
    if (info.status === 'green') return;
    await new Promise((r) => setTimeout(r, 1000));
  }
}

async function runMode(onDisk: boolean) {
  const server = await QuiverServer.start({ nodeArgs: [], keepStorage: true, env: {} });
  let client: RestClient = makeClient('raw', server.url, 2);
  let restarted: QuiverServer | null = null;
  try {
    const config = {
      vectors: { size: DIM, distance: 'Cosine', on_disk: onDisk },
      quantization_config: { scalar: { type: 'int8', always_ram: true } },
      hnsw_config: { m: 16, ef_construct: 100 },
    };
    await client.json('PUT', `/collections/${C}`, config);
    const t0 = Date.now();
    let next = 0;
    const lane = async () => {
      for (;;) {
        const from = next;
        if (from >= N) return;
        next += BATCH;
        const points = [];
        for (let j = from; j < Math.min(N, from + BATCH); j++) points.push({ id: j, vector: point(j) });
        await client.json('PUT', `/collections/${C}/points?wait=true`, { points });
        if (from % 50_000 === 0) console.log(`  ${onDisk ? 'on disk' : 'in memory'}: ${from} points, ${((Date.now() - t0) / 1000).toFixed(0)} s`);
      }
    };
    await Promise.all([lane(), lane()]);
    const loadSec = (Date.now() - t0) / 1000;
    await waitGreen(client);
    const greenSec = (Date.now() - t0) / 1000;
    const rssBuilt = status(server.pid);
    console.log(`  loaded in ${loadSec.toFixed(0)} s, green after ${greenSec.toFixed(0)} s; RSS ${mb(rssBuilt.rss)} MB`);
    client.close();
    const storage = path.join(server.dir, 'storage');
    await server.stop();
    restarted = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {}, storageFrom: storage });
    fs.rmSync(server.dir, { recursive: true, force: true });
    client = makeClient('raw', restarted.url, 1);
    const info = await client.json<{ points_count: number; config: { params: { vectors: { on_disk?: boolean } } } }>('GET', `/collections/${C}`);
    if (info.points_count !== N) throw new Error(`after the restart: ${info.points_count} points, not ${N}`);
    const afterLoad = await settled(restarted);
    const queries = Array.from({ length: Q }, (_, j) => query(j));
    // Warm-up (the first queries fault in the codes' and the originals' pages).
    for (let j = 0; j < Math.min(50, Q); j++) await client.json('POST', `/collections/${C}/points/query`, { query: queries[j], limit: 10, params: { hnsw_ef: EF } });
    const got: number[][] = [];
    const q0 = process.hrtime.bigint();
    for (let j = 0; j < Q; j++) {
      const r = await client.json<{ points: Array<{ id: number }> }>('POST', `/collections/${C}/points/query`, { query: queries[j], limit: 10, params: { hnsw_ef: EF } });
      got.push(r.points.map((p) => p.id));
    }
    const qSec = Number(process.hrtime.bigint() - q0) / 1e9;
    const afterQueries = status(restarted.pid);
    let hit = 0;
    for (let j = 0; j < Q; j++) {
      const r = await client.json<{ points: Array<{ id: number }> }>('POST', `/collections/${C}/points/query`, { query: queries[j], limit: 10, params: { exact: true } });
      const truth = new Set(r.points.map((p) => p.id));
      hit += got[j].filter((id) => truth.has(id)).length;
    }
    return {
      on_disk: onDisk,
      shown_on_disk: info.config.params.vectors.on_disk ?? null,
      load_sec: Math.round(loadSec),
      green_sec: Math.round(greenSec),
      rss_built_mb: mb(rssBuilt.rss),
      after_restart: { rss_mb: mb(afterLoad.rss), anon_mb: mb(afterLoad.anon), file_mb: mb(afterLoad.file) },
      after_queries: { rss_mb: mb(afterQueries.rss), anon_mb: mb(afterQueries.anon), file_mb: mb(afterQueries.file) },
      qps: Math.round(Q / qSec),
      recall_at_10: hit / (Q * 10),
      ids: got,
    };
  } finally {
    client.close();
    if (restarted) await restarted.stop();
    else await server.stop().catch(() => undefined);
  }
}

async function main(): Promise<void> {
  const raw = (N * DIM * 4) / 1048576;
  console.log(`${N} x ${DIM} (raw f32 ${raw.toFixed(0)} MB), ${Q} queries at ef ${EF}`);
  const modes = arg('modes', 'disk,memory').split(',');
  // In the order given (run both orders to see what the machine's load did to each).
  let disk: Awaited<ReturnType<typeof runMode>> | null = null;
  let mem: Awaited<ReturnType<typeof runMode>> | null = null;
  for (const m of modes) {
    if (m === 'disk') disk = await runMode(true);
    if (m === 'memory') mem = await runMode(false);
  }
  if (!disk || !mem) {
    console.log(JSON.stringify({ n: N, dim: DIM, queries: Q, ef: EF, raw_f32_mb: Math.round((N * DIM * 4) / 1048576), result: { ...(disk ?? mem), ids: undefined } }, null, 2));
    return;
  }
  let same = 0;
  for (let j = 0; j < Q; j++) same += disk.ids[j].filter((id) => mem.ids[j].includes(id)).length;
  const strip = ({ ids: _ids, ...rest }: typeof disk) => rest;
  console.log(JSON.stringify({ n: N, dim: DIM, queries: Q, ef: EF, raw_f32_mb: Math.round(raw), on_disk: strip(disk), in_memory: strip(mem), same_ids_fraction: same / (Q * 10) }, null, 2));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
