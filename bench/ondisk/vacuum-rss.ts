/**
 * `npm run bench:vacuum-rss -- --before DIR [--n 200000 --dim 768 --delete 0.3 --m 16 --ef-construct 64 --indexing-threshold KB --tag NAME]`
 *
 * The memory a vacuum of an on-disk collection takes, for two builds side by side: the
 * server of `--before DIR` (another built checkout, e.g. the branch point) and this
 * checkout's. Issue 20: with `on_disk: true` the f32 originals live in a mapped file,
 * so the optimizer's copy step must not pull them all into the heap at once.
 *  1. One server of this checkout: a collection `{size: dim, distance: Cosine,
 *     on_disk: true}` with int8 scalar quantization kept in RAM, N points loaded through
 *     REST, indexed, stopped. Its storage is the starting point of both runs.
 *  2. For each build, at the same time (the same machine load for both): a server
 *     started on a copy of that storage, RSS settled, the peak RSS reset
 *     (`/proc/<pid>/clear_refs` 5), then `--delete` of the points deleted (ids spread
 *     evenly) so the vacuum runs; VmRSS, RssAnon, RssFile and VmHWM sampled every 100 ms
 *     until the collection is green again with every live vector indexed.
 * Data: the clustered synthetic set of bench/ondisk/run.ts (bench/ondisk/data.ts's generator).
 * Results: bench/results/vacuum-rss-<tag>.{json,md}.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { REPO_ROOT } from '../engine/common';
import { makeClient, type RestClient } from '../rest/client';
import { QuiverServer, settledRss } from '../rest/server';
import { makeData } from './data';

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

const C = 'vacuum_bench';
const mb = (b: number | null) => (b === null ? NaN : Math.round(b / 1048576));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The clustered set of bench/ondisk/run.ts (bench/ondisk/data.ts), as JSON rows of 4-decimal values. */
function rows(n: number, dim: number): (i: number) => string {
  const { base } = makeData(n, 0, dim);
  return (i) => {
    const parts = new Array<string>(dim);
    for (let j = 0; j < dim; j++) parts[j] = String(base[i * dim + j]);
    return `[${parts.join(',')}]`;
  };
}

interface Info {
  status: string;
  indexed_vectors_count: number;
  points_count: number;
}

async function info(client: RestClient): Promise<Info> {
  return client.json<Info>('GET', `/collections/${C}`);
}

interface Mem {
  rss: number;
  anon: number;
  file: number;
  hwm: number;
}

function mem(pid: number): Mem | null {
  try {
    const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(s)?.[1] ?? NaN) * 1024;
    return { rss: kb('VmRSS'), anon: kb('RssAnon'), file: kb('RssFile'), hwm: kb('VmHWM') };
  } catch {
    return null;
  }
}

interface RunResult {
  build: string;
  root: string;
  rss_before_mb: number;
  anon_before_mb: number;
  vacuum_seconds: number;
  max_rss_mb: number;
  max_anon_mb: number;
  max_file_mb: number;
  vm_hwm_mb: number;
  rss_after_mb: number;
  samples: number;
  points_after: number;
}

async function vacuumRun(build: string, root: string, storage: string, n: number, del: number[]): Promise<RunResult> {
  const log = (s: string) => console.log(`[${build}] ${s}`);
  const server = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {}, storageFrom: storage, root });
  let client = makeClient('http', server.url, 4);
  try {
    for (;;) {
      const i = await info(client);
      if (i.status === 'green' && i.indexed_vectors_count >= n) break;
      await sleep(500);
    }
    const before = await settledRss(server, 5000, 30);
    // A new client: the quiet wait outlasts the server's keep-alive, which closes idle connections.
    client.close();
    client = makeClient('http', server.url, 4);
    const anonBefore = mem(server.pid)?.anon ?? NaN;
    // Reset the peak (VmHWM) to the current RSS: what follows is the vacuum's.
    fs.writeFileSync(`/proc/${server.pid}/clear_refs`, '5');
    const peak: Mem = { rss: 0, anon: 0, file: 0, hwm: 0 };
    let samples = 0;
    const sampler = setInterval(() => {
      const m = mem(server.pid);
      if (!m) return;
      samples++;
      peak.rss = Math.max(peak.rss, m.rss);
      peak.anon = Math.max(peak.anon, m.anon);
      peak.file = Math.max(peak.file, m.file);
      peak.hwm = Math.max(peak.hwm, m.hwm);
    }, 100);
    const t0 = Date.now();
    try {
      for (let at = 0; at < del.length; at += 5000) {
        const ids = del.slice(at, at + 5000);
        const r = await client.request('POST', `/collections/${C}/points/delete?wait=true`, Buffer.from(JSON.stringify({ points: ids })), { 'content-type': 'application/json' });
        if (r.status !== 200) throw new Error(`delete answered ${r.status}: ${r.body.toString('utf8').slice(0, 300)}`);
      }
      log(`deleted ${del.length}; waiting for the vacuum`);
      let sawBusy = false;
      let lastLog = Date.now();
      for (;;) {
        const i = await info(client);
        if (i.status !== 'green') sawBusy = true;
        if (sawBusy && i.status === 'green' && i.indexed_vectors_count >= n - del.length) break;
        if (!sawBusy && Date.now() - t0 > 60_000) throw new Error('the vacuum never started (status stayed green)');
        if (Date.now() - lastLog > 30_000) {
          log(`  status ${i.status}, indexed ${i.indexed_vectors_count}, RSS max so far ${mb(peak.rss)} MB`);
          lastLog = Date.now();
        }
        await sleep(250);
      }
    } finally {
      clearInterval(sampler);
    }
    const seconds = (Date.now() - t0) / 1000;
    const end = mem(server.pid);
    const points = (await info(client)).points_count;
    log(`vacuum done in ${seconds.toFixed(1)} s; RSS max ${mb(peak.rss)} MB (anon ${mb(peak.anon)}), VmHWM ${mb(end?.hwm ?? null)} MB`);
    return {
      build,
      root,
      rss_before_mb: mb(before),
      anon_before_mb: mb(anonBefore),
      vacuum_seconds: Number(seconds.toFixed(1)),
      max_rss_mb: mb(peak.rss),
      max_anon_mb: mb(peak.anon),
      max_file_mb: mb(peak.file),
      vm_hwm_mb: mb(Math.max(peak.hwm, end?.hwm ?? 0)),
      rss_after_mb: mb(end?.rss ?? null),
      samples,
      points_after: points,
    };
  } catch (e) {
    console.error(server.logTail().join('\n'));
    throw e;
  } finally {
    client.close();
    await server.stop();
  }
}

async function main(): Promise<void> {
  const n = Number(arg('n', '200000'));
  const dim = Number(arg('dim', '768'));
  const fraction = Number(arg('delete', '0.3'));
  const m = Number(arg('m', '16'));
  const efc = Number(arg('ef-construct', '64'));
  const batch = Number(arg('batch', '256'));
  const threshold = arg('indexing-threshold', '');
  const beforeArg = arg('before', '');
  if (!beforeArg) throw new Error('--before DIR: a built checkout to compare with (e.g. the branch point)');
  const before = path.resolve(beforeArg);
  const tag = arg('tag', new Date().toISOString().slice(0, 10));
  console.log(`vacuum RSS bench: ${n} x ${dim}, delete ${fraction}, m ${m}, ef_construct ${efc}; before ${before}, after ${REPO_ROOT}; load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
  const row = rows(n, dim);

  // 1. Build the on-disk collection once.
  const t0 = Date.now();
  const builder = await QuiverServer.start({ nodeArgs: [], keepStorage: true, env: {}, root: REPO_ROOT });
  const client = makeClient('http', builder.url, 4);
  try {
    await client.json('PUT', `/collections/${C}`, {
      vectors: { size: dim, distance: 'Cosine', on_disk: true },
      hnsw_config: { m, ef_construct: efc },
      quantization_config: { scalar: { type: 'int8', always_ram: true } },
      // Small smoke runs only: the default threshold (10,000 KiB) keeps a few thousand vectors unindexed.
      ...(threshold ? { optimizers_config: { indexing_threshold: Number(threshold) } } : {}),
    });
    let next = 0;
    const lane = async () => {
      for (;;) {
        const from = next;
        if (from >= n) return;
        next += batch;
        const parts: string[] = [];
        for (let i = from; i < Math.min(n, from + batch); i++) parts.push(`{"id":${i},"vector":${row(i)}}`);
        const r = await client.request('PUT', `/collections/${C}/points?wait=true`, Buffer.from(`{"points":[${parts.join(',')}]}`), { 'content-type': 'application/json' });
        if (r.status !== 200) throw new Error(`upsert answered ${r.status}: ${r.body.toString('utf8').slice(0, 300)}`);
        if (from % 50_000 === 0) console.log(`  ${from} points sent (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
      }
    };
    await Promise.all([lane(), lane()]);
    console.log(`loaded in ${((Date.now() - t0) / 1000).toFixed(0)} s; indexing`);
    let lastLog = Date.now();
    for (;;) {
      const i = await info(client);
      if (i.status === 'green' && i.indexed_vectors_count >= n) break;
      if (Date.now() - lastLog > 30_000) {
        console.log(`  indexed ${i.indexed_vectors_count} of ${n} (${((Date.now() - t0) / 1000).toFixed(0)} s)`);
        lastLog = Date.now();
      }
      await sleep(1000);
    }
    console.log(`indexed after ${((Date.now() - t0) / 1000).toFixed(0)} s`);
  } finally {
    client.close();
    await builder.stop();
  }
  const storage = path.join(builder.dir, 'storage');
  const buildSeconds = (Date.now() - t0) / 1000;

  // 2. Both builds vacuum a copy of it at the same time.
  const del: number[] = [];
  for (let i = 0; i < n && del.length < Math.round(n * fraction); i++) if (i % 10 < Math.round(fraction * 10)) del.push(i);
  const results = await Promise.all([vacuumRun('before', before, storage, n, del), vacuumRun('after', REPO_ROOT, storage, n, del)]);
  fs.rmSync(builder.dir, { recursive: true, force: true });

  const rawMb = (n * dim * 4) / 1048576;
  const [b, a] = results;
  const out = { n, dim, delete: fraction, deleted: del.length, m, ef_construct: efc, raw_f32_mb: Math.round(rawMb), build_seconds: Math.round(buildSeconds), date: new Date().toISOString(), loadavg_end: os.loadavg(), results };
  const dir = path.join(REPO_ROOT, 'bench', 'results');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, `vacuum-rss-${tag}.json`), JSON.stringify(out, null, 2) + '\n');
  const line = (name: string, f: (r: RunResult) => number, ratio = true) => `| ${name} | ${f(b)} | ${f(a)} | ${ratio ? (f(a) / f(b)).toFixed(2) : ''} |`;
  const md = [
    `# Vacuum of an on-disk collection: RSS before and after the paged copy (${out.date})`,
    '',
    `Command: \`npm run bench:vacuum-rss -- ${process.argv.slice(2).join(' ')}\` (bench/ondisk/vacuum-rss.ts). ${n.toLocaleString('en-US')} x ${dim}-d Cosine, ` +
      `\`on_disk: true\`, int8 scalar quantization in RAM, hnsw m ${m}, ef_construct ${efc}; raw f32 bytes ${Math.round(rawMb)} MB. ` +
      `The collection is built once (${Math.round(buildSeconds)} s), then two servers start on copies of its storage at the same time: ` +
      `\`before\` = ${b.root}, \`after\` = ${a.root}. Each deletes ${del.length.toLocaleString('en-US')} points (${fraction * 100}%, ids with i % 10 < ${Math.round(fraction * 10)}), ` +
      `which makes the vacuum run, with its peak RSS reset (clear_refs 5) just before; /proc/<pid>/status sampled every 100 ms until the collection is green again. ` +
      `2 cores shared with other work (load average at the end ${os.loadavg().map((x) => x.toFixed(1)).join(' ')}): times are noisy, the memory figures are not timing.`,
    '',
    '| | before | after | after / before |',
    '|---|---|---|---|',
    line('RSS before the deletes (MB)', (r) => r.rss_before_mb),
    line('RssAnon before the deletes (MB)', (r) => r.anon_before_mb),
    line('largest VmRSS sampled during the vacuum (MB)', (r) => r.max_rss_mb),
    line('largest RssAnon (heap, not file pages) (MB)', (r) => r.max_anon_mb),
    line('largest RssFile (mapped originals, addon) (MB)', (r) => r.max_file_mb),
    line('VmHWM since the reset (MB)', (r) => r.vm_hwm_mb),
    line('RSS after the vacuum (MB)', (r) => r.rss_after_mb),
    line('vacuum time, deletes included (s)', (r) => r.vacuum_seconds),
    line('samples', (r) => r.samples, false),
    '',
    `- growth of the peak over the quiet RSS: before ${b.max_rss_mb - b.rss_before_mb} MB, after ${a.max_rss_mb - a.rss_before_mb} MB; ` +
      `largest VmRSS / raw f32 bytes: before ${(b.max_rss_mb / rawMb).toFixed(3)}, after ${(a.max_rss_mb / rawMb).toFixed(3)}`,
    '',
  ].join('\n');
  fs.writeFileSync(path.join(dir, `vacuum-rss-${tag}.md`), md);
  console.log(md);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
