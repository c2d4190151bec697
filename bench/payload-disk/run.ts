/**
 * `npm run bench:payload-disk [-- --n 1000000 --payload 1024 --requests 2000 --hnsw --tag NAME]`
 *
 * `on_disk_payload: true` against `false`, one after the other on the same machine
 * (issue 19's must-hold: with 1M points of 1 KiB payloads the server's RSS in on-disk
 * mode stays under 25% of in-memory mode). For each mode: a real server (`node
 * bin/quiver`, bench/rest/server.ts), one collection of 4-d vectors (so the vectors
 * weigh little next to the payloads) with `on_disk_payload` set and, unless `--hnsw`,
 * `indexing_threshold: 0` (no HNSW graph, whose links would weigh more than the
 * vectors: the comparison is of payload memory), N points loaded
 * through REST in batches of 1000 (`wait=true`, two in flight), each with a payload of
 * about `--payload` bytes of JSON: `{i, group: "g<i % 100>", flag, text}`. Then:
 *  - RSS after the load (the server's VmRSS), and after a restart on the same storage
 *    (steady state: nothing of the load in flight, payloads as the mode keeps them),
 *    each read once the server has been quiet for QUIET_MS and RSS has stopped moving,
 *    with the server's heapUsed / heapTotal / external beside it (process.memoryUsage()
 *    written by bench/payload-disk/mem-probe.cjs, loaded with `node --require`);
 *  - load time;
 *  - at concurrency 1 after the restart: retrieve (`POST /points`, 10 random ids,
 *    `with_payload`), scroll (`limit 10`, `with_payload`, from a random id) and scroll
 *    filtered on the unindexed field `group` (1% of the points match; limit 10), each
 *    p50/p95/p99.
 * Results go to bench/results/payload-disk-<tag>.{json,md}.
 *
 * `--index-disk` compares instead payload indexes kept on disk (`on_disk: true`) against
 * in memory, payloads on disk in both (`npm run bench:payload-disk -- --index-disk --n
 * 1000000 --payload 128 --requests 1000 --tag NAME`): two servers, each a collection with
 * a keyword index on `group` (100 values) and an integer index on `i` created before the
 * load, loaded one after the other; RSS after the load and after a restart; then, with
 * both servers up, filtered requests sent to one and the other in turn (the order
 * alternating): scroll 10 on a `group` match (1% of the points), exact count of an `i`
 * range of 1000 values, and a search with both (a `group` match and an `i` range of 10%),
 * each p50/p95/p99, and their answers compared between the servers. Results go to
 * bench/results/payload-index-disk-<tag>.{json,md}.
 *
 * `--index-disk --text-geo` does the same with a full-text index on `body` (8 words of a
 * vocabulary of 1000, skewed: word k is drawn with probability ~ 1/sqrt(k)) and a geo
 * index on `loc` (uniform over latitudes -60..60, all longitudes) instead: requests are
 * a scroll of 10 filtered on `match: {text}` of one word among w100..w999 (about 0.2 to
 * 0.8% of the points) and a search (limit 10) filtered on a geo_radius of 500 km.
 */
import * as fs from 'fs';
import * as path from 'path';
import { REPO_ROOT } from '../engine/common';
import { percentile } from '../engine/measure';
import { makeClient, runConcurrent, type RestClient } from '../rest/client';
import { QuiverServer, dirBytes, settledRss } from '../rest/server';

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

const C = 'payload_bench';
const BATCH = 1000;

interface Memory {
  rss_mb: number;
  heap_used_mb: number;
  heap_total_mb: number;
  external_mb: number;
  array_buffers_mb: number;
}

interface ModeResult {
  on_disk_payload: boolean;
  memory_after_load: Memory;
  memory_after_restart: Memory;
  load_seconds: number;
  points_per_second: number;
  rss_after_load_mb: number;
  rss_after_restart_mb: number;
  restart_seconds: number;
  storage_mb: number;
  retrieve: Stats;
  scroll: Stats;
  scroll_filtered: Stats;
}

interface Stats {
  p50_us: number;
  p95_us: number;
  p99_us: number;
  mean_us: number;
}

function stats(us: Float64Array): Stats {
  let sum = 0;
  for (const x of us) sum += x;
  return {
    p50_us: Math.round(percentile(us, 50)),
    p95_us: Math.round(percentile(us, 95)),
    p99_us: Math.round(percentile(us, 99)),
    mean_us: Math.round(sum / us.length),
  };
}


const mb = (b: number | null) => (b === null ? NaN : Math.round(b / 1048576));

/** How long the server is left quiet before RSS is read (its idle collection runs after 2 quiet seconds). */
const QUIET_MS = 6000;
const PROBE = path.join(REPO_ROOT, 'bench', 'payload-disk', 'mem-probe.cjs');

function probeFile(server: QuiverServer): string {
  return path.join(server.dir, 'memory.json');
}

/** The server's process.memoryUsage() as the probe last wrote it. */
function memory(server: QuiverServer, rss: number | null): Memory {
  const m = JSON.parse(fs.readFileSync(probeFile(server), 'utf8')) as NodeJS.MemoryUsage;
  return { rss_mb: mb(rss), heap_used_mb: mb(m.heapUsed), heap_total_mb: mb(m.heapTotal), external_mb: mb(m.external), array_buffers_mb: mb(m.arrayBuffers) };
}


/** Loads points 0..n-1 (`point(j)`) through REST in batches of BATCH, wait=true, two in flight; returns the seconds it took. */
async function loadPoints(client: RestClient, n: number, point: (j: number) => unknown, label: string): Promise<number> {
  const t = await runConcurrent(Math.ceil(n / BATCH), 2, async (b) => {
    const from = b * BATCH;
    const points = [];
    for (let j = from; j < Math.min(n, from + BATCH); j++) points.push(point(j));
    await client.json('PUT', `/collections/${C}/points?wait=true`, { points });
    if (from % 100_000 === 0) console.log(`  ${label}: ${from} points`);
  });
  return t.seconds;
}

async function timed(n: number, f: (i: number) => Promise<void>): Promise<Float64Array> {
  const us = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await f(i);
    us[i] = Number(process.hrtime.bigint() - t0) / 1000;
  }
  return us;
}

async function runMode(onDisk: boolean, N: number, payloadBytes: number, R: number, hnsw: boolean): Promise<ModeResult> {
  const server = await QuiverServer.start({ nodeArgs: ['--require', PROBE], keepStorage: true, env: {} });
  let client: RestClient = makeClient('raw', server.url, 2);
  const rnd = rng(42);
  const filler = 'abcdefghijklmnopqrstuvwxyz0123456789 ';
  const base = Array.from({ length: payloadBytes * 2 }, (_, k) => filler[(k * 7 + (k >> 5)) % filler.length]).join('');
  const payload = (i: number) => {
    const p = { i, group: `g${i % 100}`, flag: i % 2 === 0, text: '' };
    const room = payloadBytes - JSON.stringify(p).length;
    const s = (i * 13) % payloadBytes;
    p.text = base.slice(s, s + Math.max(0, room));
    return p;
  };
  let restarted: QuiverServer | null = null;
  try {
    await client.json('PUT', `/collections/${C}`, { vectors: { size: 4, distance: 'Dot' }, on_disk_payload: onDisk, ...(hnsw ? {} : { optimizers_config: { indexing_threshold: 0 } }) });
    const load = await loadPoints(client, N, (j) => ({ id: j, vector: [rnd(), rnd(), rnd(), rnd()], payload: payload(j) }), onDisk ? 'on disk' : 'in memory');
    const rssLoad = await settledRss(server, QUIET_MS);
    const memLoad = memory(server, rssLoad);
    console.log(`  loaded ${N} in ${load.toFixed(1)} s; RSS ${mb(rssLoad)} MB`);
    client.close();
    const storage = path.join(server.dir, 'storage');
    await server.stop();
    const r0 = Date.now();
    restarted = await QuiverServer.start({ nodeArgs: ['--require', PROBE], keepStorage: false, env: {}, storageFrom: storage });
    const restartSec = (Date.now() - r0) / 1000;
    fs.rmSync(server.dir, { recursive: true, force: true });
    client = makeClient('raw', restarted.url, 1);
    const info = await client.json<{ points_count: number }>('GET', `/collections/${C}`);
    if (info.points_count !== N) throw new Error(`after the restart the collection has ${info.points_count} points, not ${N}`);
    const rssRestart = await settledRss(restarted, QUIET_MS);
    const memRestart = memory(restarted, rssRestart);
    const storageMb = mb(dirBytes(path.join(restarted.dir, 'storage')));
    // Correctness spot check: a retrieved payload is the one written.
    const check = await client.json<Array<{ id: number; payload: unknown }>>('POST', `/collections/${C}/points`, { ids: [7, N - 1], with_payload: true });
    for (const p of check) if (JSON.stringify(p.payload) !== JSON.stringify(payload(p.id))) throw new Error(`point ${p.id}: payload differs after the restart`);
    const q = rng(7);
    const ids = () => Array.from({ length: 10 }, () => Math.floor(q() * N));
    // Warm-up pass of each kind, then the measured ones.
    for (let i = 0; i < 50; i++) {
      await client.json('POST', `/collections/${C}/points`, { ids: ids(), with_payload: true });
      await client.json('POST', `/collections/${C}/points/scroll`, { limit: 10, with_payload: true, offset: Math.floor(q() * N) });
    }
    const retrieve = await timed(R, async () => {
      await client.json('POST', `/collections/${C}/points`, { ids: ids(), with_payload: true });
    });
    const scroll = await timed(R, async () => {
      await client.json('POST', `/collections/${C}/points/scroll`, { limit: 10, with_payload: true, offset: Math.floor(q() * N) });
    });
    const filtered = await timed(Math.max(50, Math.floor(R / 4)), async () => {
      const r = await client.json<{ points: unknown[] }>('POST', `/collections/${C}/points/scroll`, {
        limit: 10,
        with_payload: true,
        // Starting at least 10,000 points before the end (or at 0 with fewer points), so a
        // group (a hundredth of the points) has 10 matches after the offset.
        offset: Math.floor(q() * Math.max(0, N - 10_000)),
        filter: { must: [{ key: 'group', match: { value: `g${Math.floor(q() * 100)}` } }] },
      });
      if (r.points.length !== 10) throw new Error(`a filtered scroll found ${r.points.length} points, not 10`);
    });
    return {
      on_disk_payload: onDisk,
      memory_after_load: memLoad,
      memory_after_restart: memRestart,
      load_seconds: load,
      points_per_second: Math.round(N / load),
      rss_after_load_mb: mb(rssLoad),
      rss_after_restart_mb: mb(rssRestart),
      restart_seconds: restartSec,
      storage_mb: storageMb,
      retrieve: stats(retrieve),
      scroll: stats(scroll),
      scroll_filtered: stats(filtered),
    };
  } finally {
    client.close();
    if (restarted) await restarted.stop();
    else await server.stop();
  }
}

// ---------------------------------------------------------------------------------
// --index-disk: payload indexes on disk against in memory

interface IndexSide {
  index_on_disk: boolean;
  load_seconds: number;
  rss_after_load_mb: number;
  rss_after_restart_mb: number;
  memory_after_load: Memory;
  memory_after_restart: Memory;
  restart_seconds: number;
  storage_mb: number;
}

const KEYWORD_RANGE_KINDS = ['scroll_keyword', 'count_range', 'search_keyword_and_range'] as const;
const TEXT_GEO_KINDS = ['scroll_text', 'search_geo_radius'] as const;
type IndexKind = (typeof KEYWORD_RANGE_KINDS)[number] | (typeof TEXT_GEO_KINDS)[number];

/** The indexed fields of each --index-disk mode. */
function indexFields(textGeo: boolean): Array<[string, string]> {
  return textGeo
    ? [
        ['body', 'text'],
        ['loc', 'geo'],
      ]
    : [
        ['group', 'keyword'],
        ['i', 'integer'],
      ];
}

/** `body` of point i (--text-geo): 8 words w<k>, k skewed towards small numbers. */
function bodyOf(i: number): string {
  const r = rng(1000 + i);
  return Array.from({ length: 8 }, () => `w${Math.floor(1000 * r() ** 2)}`).join(' ');
}

async function loadIndexed(onDisk: boolean, N: number, payloadBytes: number, textGeo: boolean): Promise<{ side: IndexSide; server: QuiverServer }> {
  const server = await QuiverServer.start({ nodeArgs: ['--require', PROBE], keepStorage: true, env: {} });
  let client: RestClient = makeClient('raw', server.url, 2);
  const rnd = rng(42);
  const filler = 'abcdefghijklmnopqrstuvwxyz0123456789 ';
  const payload = (i: number) => {
    const p: Record<string, unknown> = textGeo
      ? { i, group: `g${i % 100}`, body: bodyOf(i), loc: { lat: rnd() * 120 - 60, lon: rnd() * 360 - 180 }, text: '' }
      : { i, group: `g${i % 100}`, text: '' };
    const room = payloadBytes - JSON.stringify(p).length;
    p.text = filler.repeat(Math.ceil(payloadBytes / filler.length)).slice((i * 7) % filler.length).slice(0, Math.max(0, room));
    return p;
  };
  let restarted: QuiverServer | null = null;
  try {
    await client.json('PUT', `/collections/${C}`, { vectors: { size: 4, distance: 'Dot' }, on_disk_payload: true, optimizers_config: { indexing_threshold: 0 } });
    for (const [field, type] of indexFields(textGeo)) {
      await client.json('PUT', `/collections/${C}/index?wait=true`, { field_name: field, field_schema: { type, on_disk: onDisk } });
    }
    const load = await loadPoints(client, N, (j) => ({ id: j, vector: [rnd(), rnd(), rnd(), rnd()], payload: payload(j) }), `index on_disk ${onDisk}`);
    const rssLoad = await settledRss(server, QUIET_MS);
    const memLoad = memory(server, rssLoad);
    console.log(`  loaded ${N} in ${load.toFixed(1)} s; RSS ${mb(rssLoad)} MB`);
    client.close();
    const storage = path.join(server.dir, 'storage');
    await server.stop();
    const r0 = Date.now();
    restarted = await QuiverServer.start({ nodeArgs: ['--require', PROBE], keepStorage: false, env: {}, storageFrom: storage });
    const restartSec = (Date.now() - r0) / 1000;
    fs.rmSync(server.dir, { recursive: true, force: true });
    client = makeClient('raw', restarted.url, 1);
    const info = await client.json<{ points_count: number; payload_schema: Record<string, { points: number; params?: { on_disk?: boolean } }> }>('GET', `/collections/${C}`);
    if (info.points_count !== N) throw new Error(`after the restart the collection has ${info.points_count} points, not ${N}`);
    for (const [f] of indexFields(textGeo)) {
      if (info.payload_schema[f]?.points !== N || (info.payload_schema[f].params?.on_disk ?? false) !== onDisk) throw new Error(`index ${f} after the restart: ${JSON.stringify(info.payload_schema[f])}`);
    }
    const rssRestart = await settledRss(restarted, QUIET_MS);
    const side: IndexSide = {
      index_on_disk: onDisk,
      load_seconds: load,
      rss_after_load_mb: mb(rssLoad),
      rss_after_restart_mb: mb(rssRestart),
      memory_after_load: memLoad,
      memory_after_restart: memory(restarted, rssRestart),
      restart_seconds: restartSec,
      storage_mb: mb(dirBytes(path.join(restarted.dir, 'storage'))),
    };
    console.log(JSON.stringify(side));
    const out = { side, server: restarted };
    restarted = null;
    return out;
  } finally {
    client.close();
    if (restarted) await restarted.stop();
  }
}

async function indexMain(N: number, P: number, R: number, tag: string, textGeo: boolean): Promise<void> {
  const date = new Date().toISOString();
  const INDEX_KINDS: readonly IndexKind[] = textGeo ? TEXT_GEO_KINDS : KEYWORD_RANGE_KINDS;
  const disk = await loadIndexed(true, N, P, textGeo);
  let mem: { side: IndexSide; server: QuiverServer } | null = null;
  try {
    mem = await loadIndexed(false, N, P, textGeo);
    const clients = [makeClient('raw', disk.server.url, 1), makeClient('raw', mem.server.url, 1)];
    const q = rng(11);
    const request = (kind: IndexKind): [string, unknown] => {
      if (kind === 'scroll_text') {
        const w = `w${100 + Math.floor(q() * 900)}`;
        return [`/collections/${C}/points/scroll`, { limit: 10, with_payload: true, filter: { must: [{ key: 'body', match: { text: w } }] } }];
      }
      if (kind === 'search_geo_radius') {
        const center = { lat: q() * 100 - 50, lon: q() * 360 - 180 };
        return [`/collections/${C}/points/query`, { query: [q(), q(), q(), q()], limit: 10, filter: { must: [{ key: 'loc', geo_radius: { center, radius: 500_000 } }] } }];
      }
      const g = `g${Math.floor(q() * 100)}`;
      if (kind === 'scroll_keyword') return [`/collections/${C}/points/scroll`, { limit: 10, with_payload: true, filter: { must: [{ key: 'group', match: { value: g } }] } }];
      if (kind === 'count_range') {
        const x = Math.floor(q() * (N - 1000));
        return [`/collections/${C}/points/count`, { exact: true, filter: { must: [{ key: 'i', range: { gte: x, lt: x + 1000 } }] } }];
      }
      const x = Math.floor(q() * (N * 0.9));
      return [
        `/collections/${C}/points/query`,
        { query: [q(), q(), q(), q()], limit: 10, filter: { must: [{ key: 'group', match: { value: g } }, { key: 'i', range: { gte: x, lt: x + N / 10 } }] } },
      ];
    };
    // the same request to both servers must give the same answer
    for (const kind of INDEX_KINDS) {
      for (let i = 0; i < 5; i++) {
        const [p, body] = request(kind);
        const [a, b] = await Promise.all(clients.map((c) => c.json('POST', p, body)));
        if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${kind}: the servers answer ${JSON.stringify(body)} differently`);
      }
    }
    const us: Record<string, [number[], number[]]> = {};
    for (const kind of INDEX_KINDS) us[kind] = [[], []];
    const WARM = 50;
    for (let i = 0; i < R + WARM; i++) {
      for (const kind of INDEX_KINDS) {
        const [p, body] = request(kind);
        const order = i % 2 === 0 ? [0, 1] : [1, 0];
        for (const s of order) {
          const t0 = process.hrtime.bigint();
          await clients[s].json('POST', p, body);
          const dt = Number(process.hrtime.bigint() - t0) / 1000;
          if (i >= WARM) us[kind][s].push(dt);
        }
      }
    }
    for (const c of clients) c.close();
    const lat: Record<string, { on_disk: Stats; in_memory: Stats; p50_ratio: number; p95_ratio: number }> = {};
    for (const kind of INDEX_KINDS) {
      const d = stats(Float64Array.from(us[kind][0]));
      const m = stats(Float64Array.from(us[kind][1]));
      lat[kind] = { on_disk: d, in_memory: m, p50_ratio: Number((d.p50_us / m.p50_us).toFixed(2)), p95_ratio: Number((d.p95_us / m.p95_us).toFixed(2)) };
    }
    const out = {
      n: N,
      payload_bytes: P,
      requests: R,
      indexes: Object.fromEntries(indexFields(textGeo)),
      date,
      sides: [disk.side, mem.side],
      rss_ratio_after_load: Number((disk.side.rss_after_load_mb / mem.side.rss_after_load_mb).toFixed(3)),
      rss_ratio_after_restart: Number((disk.side.rss_after_restart_mb / mem.side.rss_after_restart_mb).toFixed(3)),
      latency: lat,
    };
    console.log(JSON.stringify(out, null, 2));
    const dir = path.join(REPO_ROOT, 'bench', 'results');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, `payload-index-disk-${tag}.json`), JSON.stringify(out, null, 2) + '\n');
    const row = (name: string, f: (m: IndexSide) => string | number) => `| ${name} | ${f(disk.side)} | ${f(mem!.side)} | |`;
    const heap = (m: Memory) => `${m.heap_used_mb} / ${m.heap_total_mb} / ${m.external_mb}`;
    const lrow = (name: string, k: IndexKind) =>
      `| ${name}, p50 / p95 / p99 µs | ${lat[k].on_disk.p50_us} / ${lat[k].on_disk.p95_us} / ${lat[k].on_disk.p99_us} | ${lat[k].in_memory.p50_us} / ${lat[k].in_memory.p95_us} / ${lat[k].in_memory.p99_us} | p50 ${lat[k].p50_ratio}, p95 ${lat[k].p95_ratio} |`;
    // What the two reports' descriptions share.
    const servers = `Two servers, each one collection of 4-d vectors (no HNSW graph), payloads on disk (\`on_disk_payload: true\`) of ${P} bytes of JSON `;
    const load =
      `\`on_disk: true\` on one server and \`false\` on the other; ${N} points loaded through REST (batches of ${BATCH}, wait=true, two in flight), ` +
      'one server after the other; RSS read once the server has been quiet and RSS has stopped moving, after the load and after a restart ' +
      `on the same storage. Then both servers up, and ${R} rounds (after 50 of warm-up), each sending the same request to one server and then ` +
      'the other (which goes first alternates): ';
    const same = 'The servers gave the same answers to the same requests (checked before the timed rounds). 2 cores shared with other work.';
    const textGeoText =
      `Command: \`npm run bench:payload-disk -- --index-disk --text-geo --n ${N} --payload ${P} --requests ${R} --tag ${tag}\` (bench/payload-disk/run.ts). ` +
      servers +
      '`{i, group, body, loc, text}`: `body` 8 words of a vocabulary of 1000 (`w<k>`, skewed towards small k), `loc` uniform over latitudes -60..60 and all ' +
      'longitudes; a full-text index on `body` and a geo index on `loc` created before the load with ' +
      load +
      'a scroll of 10 points with payload filtered on `match: {text: "w<k>"}` (k among 100..999: 0.2 to 0.8% ' +
      'of the points), and a search (limit 10) filtered on a geo_radius of 500 km around a random centre (latitude -50..50). ' +
      same;
    const md = [
      `# Payload indexes on disk against in memory${textGeo ? ': full-text and geo' : ''} (${date})`,
      '',
      textGeo
        ? textGeoText
        : `Command: \`npm run bench:payload-disk -- --index-disk --n ${N} --payload ${P} --requests ${R} --tag ${tag}\` (bench/payload-disk/run.ts). ` +
        servers +
        '`{i, group: "g<i % 100>", text}`, a keyword index on `group` and an integer index on `i` created before the load with ' +
        load +
        'a scroll of 10 points with payload filtered on a `group` value (1% of the points), an exact count ' +
        'over an `i` range of 1000 values, and a search (limit 10) filtered on a `group` value and an `i` range of 10% of the points. ' +
        same,
      '',
      '| | index on_disk: true | index on_disk: false | on disk / in memory |',
      '|---|---|---|---|',
      row('load time (s)', (m) => m.load_seconds.toFixed(1)),
      `| RSS after the load (MB) | ${disk.side.rss_after_load_mb} | ${mem.side.rss_after_load_mb} | ${out.rss_ratio_after_load} |`,
      `| RSS after a restart (MB) | ${disk.side.rss_after_restart_mb} | ${mem.side.rss_after_restart_mb} | ${out.rss_ratio_after_restart} |`,
      row('after the load: heapUsed / heapTotal / external (MB)', (m) => heap(m.memory_after_load)),
      row('after a restart: heapUsed / heapTotal / external (MB)', (m) => heap(m.memory_after_restart)),
      row('restart (s)', (m) => m.restart_seconds.toFixed(1)),
      row('storage on disk (MB)', (m) => m.storage_mb),
      ...(textGeo
        ? [lrow('scroll 10 filtered on a word of `body` (match text)', 'scroll_text'), lrow('search filtered on a geo_radius of 500 km on `loc`', 'search_geo_radius')]
        : [
            lrow('scroll 10 filtered on `group`', 'scroll_keyword'),
            lrow('count of an `i` range of 1000', 'count_range'),
            lrow('search filtered on `group` and an `i` range', 'search_keyword_and_range'),
          ]),
      '',
    ].join('\n');
    fs.writeFileSync(path.join(dir, `payload-index-disk-${tag}.md`), md);
  } finally {
    await disk.server.stop();
    if (mem) await mem.server.stop();
  }
}

async function main(): Promise<void> {
  const N = Number(arg('n', '1000000'));
  // The filtered scroll pages 10 points of one of 100 groups.
  if (!(N >= 1000)) throw new Error(`--n: at least 1000 points (got ${arg('n', '1000000')})`);
  const P = Number(arg('payload', '1024'));
  const R = Number(arg('requests', '2000'));
  const tag = arg('tag', new Date().toISOString().slice(0, 10));
  if (process.argv.includes('--index-disk')) {
    await indexMain(N, P, R, tag, process.argv.includes('--text-geo'));
    return;
  }
  const hnsw = process.argv.includes('--hnsw');
  const out: Record<string, unknown> = { n: N, payload_bytes: P, requests: R, hnsw, date: new Date().toISOString() };
  const modes: ModeResult[] = [];
  for (const onDisk of [true, false]) {
    console.log(`on_disk_payload: ${onDisk}`);
    modes.push(await runMode(onDisk, N, P, R, hnsw));
    console.log(JSON.stringify(modes[modes.length - 1]));
  }
  const [disk, mem] = modes;
  out.modes = modes;
  out.rss_ratio_after_load = Number((disk.rss_after_load_mb / mem.rss_after_load_mb).toFixed(3));
  out.rss_ratio_after_restart = Number((disk.rss_after_restart_mb / mem.rss_after_restart_mb).toFixed(3));
  out.holds = (out.rss_ratio_after_load as number) < 0.25 && (out.rss_ratio_after_restart as number) < 0.25;
  console.log(JSON.stringify(out, null, 2));

  const dir = path.join(REPO_ROOT, 'bench', 'results');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, `payload-disk-${tag}.json`), JSON.stringify(out, null, 2) + '\n');
  const row = (name: string, f: (m: ModeResult) => string | number) => `| ${name} | ${f(disk)} | ${f(mem)} |`;
  const heap = (m: Memory) => `${m.heap_used_mb} / ${m.heap_total_mb} / ${m.external_mb}`;
  const lat = (s: Stats) => `${s.p50_us} / ${s.p95_us} / ${s.p99_us}`;
  const md = [
    `# On-disk payloads against in-memory payloads (${out.date})`,
    '',
    `Command: \`npm run bench:payload-disk -- --n ${N} --payload ${P} --requests ${R}${hnsw ? ' --hnsw' : ''}\` (bench/payload-disk/run.ts). ` +
      `For each mode, one after the other: a real server, one collection of 4-d vectors with \`on_disk_payload\` set ` +
      `(${hnsw ? 'HNSW built as by default' : 'indexing_threshold 0: no HNSW graph, so that payload memory is what differs'}), ${N} points ` +
      `with payloads of ${P} bytes of JSON loaded through REST (batches of ${BATCH}, wait=true, two in flight), then a restart on the same ` +
      'storage and, at concurrency 1, retrieve (10 random ids), scroll (limit 10 from a random id) and scroll filtered on the unindexed ' +
      'field `group` (1% of points match), all with the payload. RSS is read once the server has been quiet for ' +
      `${QUIET_MS / 1000} s and RSS has stopped moving; heap figures are the server's process.memoryUsage() at that time. ` +
      '2 cores shared with other work.',
    '',
    '| | on_disk_payload: true | on_disk_payload: false |',
    '|---|---|---|',
    row('load time (s)', (m) => m.load_seconds.toFixed(1)),
    row('points / s', (m) => m.points_per_second),
    row('RSS after the load (MB)', (m) => m.rss_after_load_mb),
    row('RSS after a restart (MB)', (m) => m.rss_after_restart_mb),
    row('after the load: heapUsed / heapTotal / external (MB)', (m) => heap(m.memory_after_load)),
    row('after a restart: heapUsed / heapTotal / external (MB)', (m) => heap(m.memory_after_restart)),
    row('restart (s)', (m) => m.restart_seconds.toFixed(1)),
    row('storage on disk (MB)', (m) => m.storage_mb),
    row('retrieve 10 ids, p50 / p95 / p99 µs', (m) => lat(m.retrieve)),
    row('scroll 10, p50 / p95 / p99 µs', (m) => lat(m.scroll)),
    row('scroll 10 filtered on an unindexed field, p50 / p95 / p99 µs', (m) => lat(m.scroll_filtered)),
    '',
    `RSS on disk / in memory: **${out.rss_ratio_after_load}** after the load, **${out.rss_ratio_after_restart}** after a restart ` +
      `(must be < 0.25: ${out.holds ? 'holds' : 'DOES NOT HOLD'}).`,
    '',
  ].join('\n');
  fs.writeFileSync(path.join(dir, `payload-disk-${tag}.md`), md);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
