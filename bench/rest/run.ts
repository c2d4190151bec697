/**
 * `npm run bench:rest [-- --quick] [--n N] [--queries N] [--efs 64,128] ...`
 *
 * The REST overhead benchmark (issue 3). Starts a real server (`node bin/quiver`) on a
 * free port with a temporary storage directory, and on the synthetic 100k x 128-d
 * Gaussian-mixture set of the engine benchmark (bench/engine/datasets.ts) measures:
 *
 *  - upsert throughput (points/s, wait=true): batches of 1000 with one client, batches
 *    of 1000 with 2 concurrent clients, batches of 100 with one client, each into a
 *    fresh collection (Cosine, m=16, ef_construct=100), then how long the first
 *    collection takes to turn green (the background optimizer builds its HNSW index);
 *  - query throughput (queries/s) and recall@10 of POST /collections/{c}/points/query
 *    with params.hnsw_ef at 1 and 8 requests in flight, against the exact ground truth;
 *  - in the same run, the in-process engine (loadEngine from dist/bindings/index.js)
 *    built on the same data with the same m/ef_construct (2 build threads), searched
 *    with 1, 2 and 8 outstanding async calls at the same ef,
 *
 * and prints the ratios REST(c=1) / engine(1), REST(c=8) / engine(2 outstanding) (the
 * pairing the targets were written against) and REST(c=8) / engine(8 outstanding): two
 * outstanding calls leave the pool idle during each hop, eight keep it busy, so the
 * last is the engine's saturated figure.
 * Results go to bench/results/rest-<tag>.{json,md}.
 *
 * With `--auth`, runs the authentication-cost benchmark instead (bench/rest/auth.ts).
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import type { Engine, VectorIndex } from '../../bindings/engine';
import { Dataset, EF_CONSTRUCT, K, M, REPO_ROOT, errMsg, parseArgs, splitRows } from '../engine/common';
import { loadDataset } from '../engine/datasets';
import { groundTruth, metricSpace, recallAtK, MetricSpace } from '../engine/groundtruth';
import { coresAvailable, forceGc, percentile } from '../engine/measure';
import { loadQuiver } from '../engine/quiver';
import { runAuth } from './auth';
import { runHybridBench } from './hybrid';
import { runBackends } from './backends';
import { RestClient, makeClient, runConcurrent } from './client';
import { ChannelMode, GrpcBenchClient, GrpcVariant, H2Channels, encodeHealth, encodeQuery, encodeUpsert, makeGrpcClient, variantParts } from './grpc';
import { FloatFormat, RestOptions, parseRestArgs } from './options';
import { ProfileSummary, Window, newestProfile, summarizeProfile } from './profile';
import { CollectionState, EngineBuild, QueryRow, RestResults, UpsertRow, markdown } from './report';
import { QuiverServer, ServerCpu, cpuDelta, freePort } from './server';
import { findH2load, grpcFrame, runH2load, writeBody } from './h2load';
import { findWrk, prepareWrk, runWrk } from './wrk';

/**
 * Warm-up before the timed passes: this many passes over the queries through each path.
 * V8 needs thousands of requests to optimise the server's request path: with a
 * 200-query warm-up the first timed passes of a run were up to 2.4x slower than the
 * later ones (3,384 -> 5,750 -> 8,261 queries/s at c=8).
 */
const WARMUP_PASSES = 3;

/** The collection the query passes ask (the batch-1000 one-client upsert's). */
const H2LOAD_COLLECTION = 'bench_b1000_c1';

function nowUs(): number {
  return Number(process.hrtime.bigint() / 1000n);
}

function cpuFlags(): string {
  try {
    const line = fs.readFileSync('/proc/cpuinfo', 'utf8').split('\n').find((l) => l.startsWith('flags'));
    if (!line) return 'unknown';
    const flags = new Set(line.split(':')[1].trim().split(/\s+/));
    return ['sse4_2', 'avx', 'avx2', 'fma', 'avx512f'].filter((f) => flags.has(f)).join(' ');
  } catch {
    return 'unknown';
  }
}

const round = (x: number, d = 3) => Math.round(x * 10 ** d) / 10 ** d;

// -- JSON bodies ------------------------------------------------------------------------

/** Shortest decimal that reads back as the same float32. */
function shortFloat(v: number): string {
  for (let p = 6; p < 9; p++) {
    const s = Number(v.toPrecision(p));
    if (Math.fround(s) === v) return String(s);
  }
  return String(Number(v.toPrecision(9)));
}

/** The JSON text of each base vector: `full` as JSON.stringify writes the float32 values as doubles (what a JS or numpy client sends), `short` with the fewest digits that round-trip. */
function vectorTexts(base: Float32Array, dim: number, n: number, format: FloatFormat): string[] {
  const out: string[] = new Array(n);
  for (let i = 0; i < n; i++) {
    const row = base.subarray(i * dim, (i + 1) * dim);
    if (format === 'full') out[i] = JSON.stringify(Array.from(row));
    else {
      const parts: string[] = new Array(dim);
      for (let j = 0; j < dim; j++) parts[j] = shortFloat(row[j]);
      out[i] = `[${parts.join(',')}]`;
    }
  }
  return out;
}

/** `{"points":[{"id":i,"vector":[...]}, ...]}` per batch, as ready Buffers. */
function upsertBodies(texts: string[], batch: number): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < texts.length; at += batch) {
    const end = Math.min(texts.length, at + batch);
    const parts: string[] = [];
    for (let i = at; i < end; i++) parts.push(`{"id":${i},"vector":${texts[i]}}`);
    out.push(Buffer.from(`{"points":[${parts.join(',')}]}`));
  }
  return out;
}

/** The same bodies as upsertBodies(vectorTexts(...), batch), one batch's texts at a time. */
function upsertBodiesByBatch(base: Float32Array, dim: number, n: number, batch: number, format: FloatFormat): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < n; at += batch) {
    const end = Math.min(n, at + batch);
    const texts = vectorTexts(base.subarray(at * dim, end * dim), dim, end - at, format);
    out.push(Buffer.from(`{"points":[${texts.map((t, j) => `{"id":${at + j},"vector":${t}}`).join(',')}]}`));
  }
  return out;
}

// -- collection helpers ------------------------------------------------------------------

interface CollectionInfo {
  status: string;
  points_count: number;
  indexed_vectors_count: number;
  segments_count: number;
}

function collectionBody(opts: RestOptions, dim: number): Record<string, unknown> {
  const b: Record<string, unknown> = {
    vectors: { size: dim, distance: 'Cosine' },
    hnsw_config: { m: M, ef_construct: EF_CONSTRUCT },
  };
  if (opts.indexingThresholdKb !== null) b.optimizers_config = { indexing_threshold: opts.indexingThresholdKb };
  return b;
}

async function info(client: RestClient, name: string): Promise<CollectionState> {
  const r = await client.json<CollectionInfo>('GET', `/collections/${name}`);
  return { status: r.status, pointsCount: r.points_count, indexedVectorsCount: r.indexed_vectors_count, segmentsCount: r.segments_count };
}

async function waitGreen(client: RestClient, name: string, timeoutSec: number): Promise<{ seconds: number; state: CollectionState }> {
  const t0 = performance.now();
  for (;;) {
    const s = await info(client, name);
    const seconds = (performance.now() - t0) / 1000;
    if (s.status === 'green') return { seconds, state: s };
    if (seconds > timeoutSec) throw new Error(`collection ${name} still ${s.status} after ${timeoutSec} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// -- phases -------------------------------------------------------------------------------

interface Ctx {
  opts: RestOptions;
  server: QuiverServer;
  client: RestClient;
  /** gRPC clients by variant (empty with --no-grpc). */
  grpc: Map<GrpcVariant, GrpcBenchClient>;
  grpcPort: number | null;
  windows: Window[];
}

async function timedWindow<T>(ctx: Ctx, name: string, fn: () => Promise<T>): Promise<{ value: T; cpu: ServerCpu | null }> {
  const c0 = ctx.server.cpu();
  const startUs = nowUs();
  const value = await fn();
  ctx.windows.push({ name, startUs, endUs: nowUs() });
  return { value, cpu: cpuDelta(c0, ctx.server.cpu()) };
}

/** An upsert run's row from its timing, and its summary line on the console (`unit`: what one call is called). */
function upsertRow(
  head: Pick<UpsertRow, 'transport' | 'grpcLib' | 'channels' | 'label' | 'collection' | 'batch' | 'clients'>,
  bodies: Buffer[],
  n: number,
  t: { seconds: number; latUs: Float64Array; clientCpuSec: number },
  cpu: { mainSec: number; otherSec: number } | null,
  after: UpsertRow['afterUpsert'],
  unit: string,
): UpsertRow {
  const bytes = bodies.reduce((s, b) => s + b.length, 0);
  const row: UpsertRow = {
    ...head,
    points: n,
    requests: bodies.length,
    bodyMiB: round(bytes / 2 ** 20, 1),
    bytesPerPoint: Math.round(bytes / n),
    seconds: round(t.seconds),
    pointsPerSec: Math.round(n / t.seconds),
    p50Ms: round(percentile(t.latUs, 50) / 1000, 2),
    p99Ms: round(percentile(t.latUs, 99) / 1000, 2),
    clientCpuSec: round(t.clientCpuSec),
    serverMainCpuSec: cpu ? round(cpu.mainSec, 2) : null,
    serverOtherCpuSec: cpu ? round(cpu.otherSec, 2) : null,
    afterUpsert: after,
    green: null,
    deleteSeconds: null,
  };
  console.log(
    `    ${row.pointsPerSec.toLocaleString('en-US')} points/s (${row.seconds} s; p50 ${row.p50Ms} ms, p99 ${row.p99Ms} ms per ${unit}; ` +
      `server CPU main ${row.serverMainCpuSec ?? '–'} s, other threads ${row.serverOtherCpuSec ?? '–'} s; client CPU ${row.clientCpuSec} s); ` +
      `after: ${after.status}, ${after.indexedVectorsCount} indexed, ${after.segmentsCount} segments`,
  );
  return row;
}

async function upsertRun(ctx: Ctx, name: string, bodies: Buffer[], batch: number, clients: number, n: number, dim: number, keep: boolean): Promise<UpsertRow> {
  const { client, opts } = ctx;
  await client.json('PUT', `/collections/${name}`, collectionBody(opts, dim));
  const label = `batch ${batch}, ${clients} client${clients > 1 ? 's' : ''}`;
  console.log(`  upsert ${label}: ${n.toLocaleString('en-US')} points in ${bodies.length} requests ...`);
  const pathQ = `/collections/${name}/points?wait=true`;
  const { value: t, cpu } = await timedWindow(ctx, `upsert ${label}`, () =>
    runConcurrent(bodies.length, clients, async (i) => {
      const r = await client.request('PUT', pathQ, bodies[i]);
      if (r.status !== 200) throw new Error(`upsert: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 300)}`);
      const res = (JSON.parse(r.body.toString('utf8')) as { result: { status: string } }).result;
      if (res.status !== 'completed') throw new Error(`upsert with wait=true answered status ${res.status}`);
    }),
  );
  const after = await info(client, name);
  if (after.pointsCount !== n) throw new Error(`${name}: points_count ${after.pointsCount} after upserting ${n}`);
  const row = upsertRow({ transport: 'REST', label, collection: name, batch, clients }, bodies, n, t, cpu, after, 'request');
  if (keep) {
    const { value: g, cpu: gcpu } = await timedWindow(ctx, `index ${label}`, () => waitGreen(client, name, 3600));
    row.green = {
      seconds: round(g.seconds, 2),
      state: g.state,
      serverMainCpuSec: gcpu ? round(gcpu.mainSec, 2) : null,
      serverOtherCpuSec: gcpu ? round(gcpu.otherSec, 2) : null,
    };
    console.log(
      `    green after ${row.green.seconds} s more (${g.state.indexedVectorsCount.toLocaleString('en-US')} of ${g.state.pointsCount.toLocaleString('en-US')} vectors in the HNSW index, ` +
        `${g.state.segmentsCount} segments; server CPU other threads ${row.green.serverOtherCpuSec ?? '–'} s)`,
    );
  } else {
    const t0 = performance.now();
    await client.json('DELETE', `/collections/${name}`);
    row.deleteSeconds = round((performance.now() - t0) / 1000, 2);
  }
  return row;
}

/** The gRPC twin of an upsert run: the same points, batches and clients through Points/Upsert (wait=true) into a fresh collection (made and deleted through REST), deleted afterwards. */
async function grpcUpsertRun(ctx: Ctx, name: string, base: Float32Array, batch: number, clients: number, n: number, dim: number): Promise<UpsertRow> {
  const { client, opts } = ctx;
  // The upserts' calls carry 1000 (or 100) points each: the client's cost per call hardly
  // matters, so one client does them: grpc-js (what an application uses), a channel per client.
  const variants = [...ctx.grpc.keys()];
  const variant = variants.find((v) => v === 'grpc-js:per-worker') ?? variants.find((v) => v.startsWith('grpc-js')) ?? variants[0];
  const g = ctx.grpc.get(variant)!;
  const { lib, channels } = variantParts(variant);
  const bodies: Buffer[] = [];
  for (let at = 0; at < n; at += batch) bodies.push(encodeUpsert(name, base, dim, at, Math.min(n, at + batch)));
  await client.json('PUT', `/collections/${name}`, collectionBody(opts, dim));
  await g.connect(clients);
  const label = `batch ${batch}, ${clients} client${clients > 1 ? 's' : ''}`;
  console.log(`  gRPC upsert ${label}: ${n.toLocaleString('en-US')} points in ${bodies.length} calls ...`);
  const { value: t, cpu } = await timedWindow(ctx, `upsert gRPC ${label}`, () => runConcurrent(bodies.length, clients, (i, lane) => g.upsert(bodies[i], lane)));
  const after = await info(client, name);
  if (after.pointsCount !== n) throw new Error(`${name}: points_count ${after.pointsCount} after upserting ${n} through gRPC`);
  const row = upsertRow({ transport: 'gRPC', grpcLib: lib, channels: clients > 1 ? channels : undefined, label, collection: name, batch, clients }, bodies, n, t, cpu, after, 'call');
  const t0 = performance.now();
  await client.json('DELETE', `/collections/${name}`);
  row.deleteSeconds = round((performance.now() - t0) / 1000, 2);
  return row;
}

interface QueryPass {
  qps: number;
  latUs: Float64Array;
  ids: number[][];
  clientCpuSec: number;
  serverCpu: ServerCpu | null;
  /** Queries answered in the pass when it is not one per query of the set (engine passes of several cycles). */
  requests?: number;
}

async function restPass(ctx: Ctx, name: string, bodies: Buffer[], nq: number, concurrency: number, windowName: string | null): Promise<QueryPass> {
  const ids: number[][] = new Array(nq);
  const pathQ = `/collections/${name}/points/query`;
  return timedPass(ctx, nq, concurrency, windowName, ids, async (i) => {
    const r = await ctx.client.request('POST', pathQ, bodies[i]);
    if (r.status !== 200) throw new Error(`query: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 300)}`);
    const pts = (JSON.parse(r.body.toString('utf8')) as { result: { points: Array<{ id: number }> } }).result.points;
    ids[i] = pts.map((p) => p.id);
  });
}

/** The floor of a REST round trip: GET /readyz goes through the same HTTP server and Koa middleware, with no body, no storage and no engine. */
async function baselinePass(ctx: Ctx, n: number, concurrency: number, windowName: string | null): Promise<QueryPass> {
  return timedPass(ctx, n, concurrency, windowName, [], async () => {
    const r = await ctx.client.request('GET', '/readyz');
    if (r.status !== 200) throw new Error(`readyz: HTTP ${r.status}`);
  });
}

/** Points/Query through gRPC with prebuilt request bytes, c calls in flight over the channels of `mode`. */
async function grpcPass(ctx: Ctx, mode: GrpcVariant, bodies: Buffer[], nq: number, concurrency: number, windowName: string | null): Promise<QueryPass> {
  const g = ctx.grpc.get(mode)!;
  await g.connect(concurrency);
  const ids: number[][] = new Array(nq);
  return timedPass(ctx, nq, concurrency, windowName, ids, async (i, lane) => {
    ids[i] = await g.query(bodies[i], lane);
  });
}

/** The floor of a gRPC call: Qdrant/HealthCheck through the same server, wrapper (metrics, deadline) and codec, with no storage or engine. */
async function grpcBaselinePass(ctx: Ctx, mode: GrpcVariant, n: number, concurrency: number, windowName: string | null): Promise<QueryPass> {
  const g = ctx.grpc.get(mode)!;
  await g.connect(concurrency);
  const body = encodeHealth();
  return timedPass(ctx, n, concurrency, windowName, [], (_i, lane) => g.health(body, lane));
}

async function timedPass(ctx: Ctx, n: number, concurrency: number, windowName: string | null, ids: number[][], job: (i: number, lane: number) => Promise<void>): Promise<QueryPass> {
  const c0 = ctx.server.cpu();
  const startUs = nowUs();
  const t = await runConcurrent(n, concurrency, job);
  if (windowName) ctx.windows.push({ name: windowName, startUs, endUs: nowUs() });
  return { qps: n / t.seconds, latUs: t.latUs, ids, clientCpuSec: t.clientCpuSec, serverCpu: cpuDelta(c0, ctx.server.cpu()) };
}

/** A query pass driven by wrk: `seconds` of POSTs of `bodies` in turn over `concurrency` connections. */
async function wrkPass(ctx: Ctx, name: string, files: { script: string; bodiesFile: string }, concurrency: number, windowName: string | null): Promise<{ qps: number; p50Us: number; p99Us: number; requests: number; clientCpuSec: number; serverCpu: ServerCpu | null }> {
  const c0 = ctx.server.cpu();
  const startUs = nowUs();
  const w = await runWrk({ url: ctx.server.url, path: `/collections/${name}/points/query`, script: files.script, bodiesFile: files.bodiesFile, connections: concurrency, seconds: ctx.opts.wrkSeconds });
  if (windowName) ctx.windows.push({ name: windowName, startUs, endUs: nowUs() });
  return { ...w, serverCpu: cpuDelta(c0, ctx.server.cpu()) };
}

/** A query pass driven by h2load (bench/rest/h2load.ts): REST over HTTP/1.1 or gRPC, one query body throughout, c in flight. */
async function h2loadPass(ctx: Ctx, api: 'REST' | 'gRPC', file: string, grpcAnswerBytes: number | null, concurrency: number, channels: ChannelMode): Promise<QueryRow> {
  const c0 = ctx.server.cpu();
  const shared = api === 'gRPC' && channels === 'shared';
  const h = await runH2load({
    url: api === 'REST' ? `${ctx.server.url}/collections/${H2LOAD_COLLECTION}/points/query` : `http://127.0.0.1:${ctx.grpcPort}/qdrant.Points/Query`,
    bodyFile: file,
    contentType: api === 'REST' ? 'application/json' : 'application/grpc',
    grpc: api === 'gRPC',
    clients: shared ? 1 : concurrency,
    streams: shared ? concurrency : 1,
    seconds: ctx.opts.wrkSeconds,
  });
  const cpu = cpuDelta(c0, ctx.server.cpu());
  // h2load does not read grpc-status: every answer of the one query must be its 10-hit message (an error has none).
  if (grpcAnswerBytes !== null && Math.abs(h.bodyBytesPerRequest - grpcAnswerBytes) > 0.01) {
    throw new Error(`h2load gRPC pass: ${h.bodyBytesPerRequest.toFixed(2)} answer bytes per call, expected ${grpcAnswerBytes} (some calls failed?)`);
  }
  return {
    via: api === 'REST' ? 'h2load-rest' : 'h2load-grpc',
    channels: api === 'gRPC' && concurrency > 1 ? channels : undefined,
    concurrency,
    ef: 0,
    qps: Math.round(h.qps),
    p50Us: Math.round(h.meanUs),
    p99Us: Math.round(h.maxUs),
    recall: null,
    clientCpuUsPerQuery: Math.round((h.clientCpuSec / h.requests) * 1e6),
    serverMainCpuUsPerQuery: cpu ? Math.round((cpu.mainSec / h.requests) * 1e6) : null,
    serverOtherCpuUsPerQuery: cpu ? Math.round((cpu.otherSec / h.requests) * 1e6) : null,
    passes: [],
  };
}

/**
 * One timed pass of the in-process engine: whole cycles over the queries, `concurrency`
 * searches outstanding, until at least `seconds` have passed (one cycle at 0). Recall is
 * read from the first cycle's answers; QPS, latencies and CPU are over the whole pass.
 */
async function enginePass(index: VectorIndex, rows: Float32Array[], ef: number, concurrency: number, seconds: number): Promise<QueryPass> {
  const ids: number[][] = new Array(rows.length);
  const lat: Float64Array[] = [];
  let spent = 0;
  let cpu = 0;
  let cycles = 0;
  do {
    const first = cycles === 0;
    const t = await runConcurrent(rows.length, concurrency, async (i) => {
      const r = await index.search(rows[i], { k: K, ef });
      if (first) ids[i] = Array.from(r.labels, Number);
    });
    lat.push(t.latUs);
    spent += t.seconds;
    cpu += t.clientCpuSec;
    cycles++;
  } while (spent < seconds);
  const latUs = new Float64Array(rows.length * cycles);
  lat.forEach((l, j) => latUs.set(l, j * rows.length));
  return { qps: latUs.length / spent, latUs, ids, clientCpuSec: cpu, serverCpu: null, requests: latUs.length };
}

// -- main ---------------------------------------------------------------------------------

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  // `--auth`: the authentication-cost benchmark (bench/rest/auth.ts), with its own flags.
  if (argv.includes('--auth')) return runAuth(argv.filter((a) => a !== '--auth'), 'npm run bench:rest -- --auth');
  // `--hybrid`: the hybrid-query cost benchmark (bench/rest/hybrid.ts), with its own flags.
  if (argv.includes('--hybrid')) return runHybridBench(argv.filter((a) => a !== '--hybrid'));
  if (argv.some((a) => a === '--backends' || a.startsWith('--backends='))) return runBackends(argv);
  const opts = parseRestArgs(argv);
  const started = new Date();
  console.log(`REST benchmark${opts.quick ? ' (quick)' : ''}: ${opts.n.toLocaleString('en-US')} points x 128-d, ${opts.queries} queries, ef ${opts.efs.join(',')}`);
  const machine = {
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    cpuFlags: cpuFlags(),
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    kernel: os.release(),
    node: process.version,
    loadAverageAtStart: os.loadavg().map((x) => round(x, 2)),
    coresAvailableAtStart: round(await coresAvailable(), 2),
    loadAverageAtEnd: [] as number[],
    coresAvailableAtEnd: 0,
  };
  console.log(`  machine: ${machine.cores} cores (${machine.cpuModel}); load ${machine.loadAverageAtStart.join(' ')}; cores available now ≈ ${machine.coresAvailableAtStart}`);

  // Data: the engine benchmark's full synthetic set (100k base, 1000 queries), of which
  // the first n base vectors and the first `queries` queries are used. The generator
  // writes base rows first, so a prefix is the same data whatever n is.
  // With --points: the 1M `scale` set of `bench:engine --scale` (the same cache file).
  const eopts = parseArgs([]);
  eopts.dataDir = opts.dataDir;
  const setKey = opts.points === null ? 'synthetic' : 'scale';
  const full = loadDataset(setKey, eopts);
  if ('skipped' in full) throw new Error(`${setKey} data set: ${full.skipped}`);
  const dim = full.dim;
  const ds: Dataset = {
    ...full,
    nBase: opts.n,
    nQuery: opts.queries,
    base: full.base.subarray(0, opts.n * dim),
    queries: full.queries.subarray(0, opts.queries * dim),
  };
  const space: MetricSpace = metricSpace(ds);
  const gt = await groundTruth(ds, space, K, opts.dataDir);
  console.log(`  data: ${ds.name} (${ds.distance}); ground truth ${gt.cached ? 'cached' : `computed in ${round(gt.seconds, 1)} s`}`);

  const t0 = performance.now();
  // --points: bodies built batch by batch, so the texts of all points never sit in the heap at once.
  const texts = opts.points === null ? vectorTexts(ds.base, dim, opts.n, opts.floatFormat) : [];
  let bodies1000: Buffer[] | null = opts.points === null ? upsertBodies(texts, 1000) : upsertBodiesByBatch(ds.base, dim, opts.n, 1000, opts.floatFormat);
  const prepSeconds = (performance.now() - t0) / 1000;
  console.log(`  upsert bodies (${opts.floatFormat} floats): ${round(bodies1000.reduce((s, b) => s + b.length, 0) / 2 ** 20, 1)} MiB for batches of 1000, built in ${round(prepSeconds, 1)} s`);

  if (opts.cpuProfDir) fs.mkdirSync(opts.cpuProfDir, { recursive: true });
  const grpcPort = opts.grpc ? await freePort() : null;
  const server = await QuiverServer.start({
    nodeArgs: opts.cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${opts.cpuProfDir}`, `--cpu-prof-interval=${opts.cpuProfIntervalUs}`] : [],
    keepStorage: opts.keepStorage,
    env: {
      ...(grpcPort === null ? {} : { SERVICE__SERVICE__GRPC_PORT: String(grpcPort) }),
      ...(opts.backend === null ? {} : { QUIVER_ENGINE: opts.backend }),
    },
  });
  const onExit = () => server.killNow();
  process.once('exit', onExit);
  const serverRssAtStart = server.rss();
  console.log(`  server: pid ${server.pid}, ${server.url}, storage ${server.dir}`);
  const maxConc = Math.max(...opts.concurrency, opts.upsertClients, 2);
  const client = makeClient(opts.client, server.url, maxConc);
  const grpcClients = new Map<GrpcVariant, GrpcBenchClient>();
  if (grpcPort !== null) for (const v of opts.grpcClients) grpcClients.set(v, makeGrpcClient(`127.0.0.1:${grpcPort}`, v));
  const closeClients = () => {
    client.close();
    for (const g of grpcClients.values()) g.close();
  };
  const grpcOn = grpcClients.size > 0;
  const ctx: Ctx = { opts, server, client, grpc: grpcClients, grpcPort, windows: [] };
  // At one call in flight the channel modes are the same: one variant per library measures it.
  const grpcModesAt = (c: number): GrpcVariant[] => {
    const all = [...grpcClients.keys()];
    return c === 1 ? all.filter((v, i) => all.findIndex((w) => variantParts(w).lib === variantParts(v).lib) === i) : all;
  };

  const upserts: UpsertRow[] = [];
  const queries: QueryRow[] = [];
  let engineBuild: EngineBuild | null = null;
  let engineSkip: string | null = null;
  let wrkSkip: string | null = null;
  let enginePassSeconds = 0;
  const engineOnePass: QueryRow[] = [];
  let h2loadSkip: string | null = null;
  let profile: ProfileSummary | null = null;
  let stopInfo: { code: number | null; seconds: number } | null = null;
  let requestBytes: { rest: number; grpc: number } | null = null;
  const main = H2LOAD_COLLECTION;
  try {
    // -- upserts ----------------------------------------------------------------------------
    console.log('upsert (wait=true):');
    // Each REST run is followed by its gRPC twin (same points, batch and clients).
    upserts.push(await upsertRun(ctx, main, bodies1000, 1000, 1, opts.n, dim, true));
    if (grpcOn) upserts.push(await grpcUpsertRun(ctx, 'bench_grpc_b1000_c1', ds.base, 1000, 1, opts.n, dim));
    if (opts.upsertVariants) {
      upserts.push(await upsertRun(ctx, `bench_b1000_c${opts.upsertClients}`, bodies1000, 1000, opts.upsertClients, opts.n, dim, false));
      if (grpcOn) upserts.push(await grpcUpsertRun(ctx, `bench_grpc_b1000_c${opts.upsertClients}`, ds.base, 1000, opts.upsertClients, opts.n, dim));
      bodies1000 = null;
      const bodies100 = upsertBodies(texts, 100);
      upserts.push(await upsertRun(ctx, 'bench_b100_c1', bodies100, 100, 1, opts.n, dim, false));
      if (grpcOn) upserts.push(await grpcUpsertRun(ctx, 'bench_grpc_b100_c1', ds.base, 100, 1, opts.n, dim));
    }
    bodies1000 = null;
    const mainState = await info(client, main);
    if (mainState.status !== 'green') await waitGreen(client, main, 3600);
    const serverRssAfterUpserts = server.rss();
    const serverPeakAfterUpserts = server.peakRss();

    if (opts.query) {
      // -- in-process engine on the same data -------------------------------------------------
      forceGc();
      const engine: Engine | string = await loadQuiver(opts.loader, opts.backend ?? 'native');
      let index: VectorIndex | null = null;
      if (typeof engine === 'string') {
        engineSkip = engine;
        console.log(`  in-process engine skipped: ${engine}`);
      } else {
        index = engine.createIndex({ dim, distance: 'Cosine', m: M, efConstruct: EF_CONSTRUCT, seed: 42 });
        const labels = new BigUint64Array(opts.n);
        for (let i = 0; i < opts.n; i++) labels[i] = BigInt(i);
        const base = ds.base.slice();
        const cpu0 = process.cpuUsage();
        const b0 = performance.now();
        await index.add(labels, base, opts.engineThreads);
        const seconds = (performance.now() - b0) / 1000;
        const cpu = process.cpuUsage(cpu0);
        engineBuild = { seconds: round(seconds, 2), threads: opts.engineThreads, cpuPerWall: round((cpu.user + cpu.system) / 1e6 / seconds, 2), backend: engine.backend };
        console.log(`  in-process engine (${engine.backend}) built in ${engineBuild.seconds} s with ${opts.engineThreads} threads (CPU/wall ${engineBuild.cpuPerWall})`);
      }

      // -- queries ------------------------------------------------------------------------------
      const rows = splitRows(ds.queries, dim);
      const qTexts = vectorTexts(ds.queries, dim, opts.queries, opts.floatFormat);
      const qBodies = new Map<number, Buffer[]>();
      for (const ef of opts.efs) qBodies.set(ef, qTexts.map((q) => Buffer.from(`{"query":${q},"limit":${K},"params":{"hnsw_ef":${ef}}}`)));
      const gBodies = new Map<number, Buffer[]>();
      if (grpcOn) for (const ef of opts.efs) gBodies.set(ef, rows.map((q) => encodeQuery(main, q, K, ef)));
      if (grpcOn) {
        const ef0 = opts.efs[0];
        requestBytes = {
          rest: Math.round(qBodies.get(ef0)!.reduce((s, b) => s + b.length, 0) / opts.queries),
          grpc: Math.round(gBodies.get(ef0)!.reduce((s, b) => s + b.length, 0) / opts.queries),
        };
      }

      const wrkFound = opts.wrk ? findWrk() : { missing: 'disabled with --no-wrk' };
      if ('missing' in wrkFound) wrkSkip = wrkFound.missing;
      enginePassSeconds = opts.enginePassSeconds ?? ('bin' in wrkFound ? opts.wrkSeconds : 0);
      const wrkFiles = new Map<number, { script: string; bodiesFile: string }>();
      if ('bin' in wrkFound) for (const ef of opts.efs) wrkFiles.set(ef, prepareWrk(path.join(server.dir, 'wrk'), `ef${ef}`, qBodies.get(ef)!));
      // h2load rows: REST and gRPC, one query (the first) per ef, for the same server by one C load generator.
      const h2Found = !opts.h2load ? { missing: 'disabled with --no-h2load' } : !grpcOn ? { missing: 'no gRPC (--no-grpc)' } : findH2load();
      if ('missing' in h2Found) h2loadSkip = h2Found.missing;
      const h2Files = new Map<number, { rest: string; grpc: string; grpcAnswerBytes: number }>();
      if ('bin' in h2Found) {
        const probe = new H2Channels(`127.0.0.1:${grpcPort}`, 'shared');
        for (const ef of opts.efs) {
          const answer = await probe.call('/qdrant.Points/Query', gBodies.get(ef)![0], 0);
          h2Files.set(ef, {
            rest: writeBody(path.join(server.dir, 'h2load'), `ef${ef}.json`, qBodies.get(ef)![0]),
            grpc: writeBody(path.join(server.dir, 'h2load'), `ef${ef}.grpc`, grpcFrame(gBodies.get(ef)![0])),
            grpcAnswerBytes: 5 + answer.length,
          });
        }
        probe.close();
      }
      const h2Channels = (c: number): ChannelMode[] => (c === 1 ? ['per-worker'] : [...new Set(grpcModesAt(c).map((v) => variantParts(v).channels))]);
      console.log(`query (k=${K}, ${opts.queries} queries, best of ${opts.reps} passes${wrkSkip ? `; wrk rows skipped: ${wrkSkip}` : ''}${h2loadSkip ? `; h2load rows skipped: ${h2loadSkip}` : ''}):`);
      const cMax = Math.max(...opts.concurrency);
      for (let w = 0; w < WARMUP_PASSES; w++) {
        await baselinePass(ctx, opts.queries, cMax, null);
        for (const mode of grpcModesAt(cMax)) await grpcBaselinePass(ctx, mode, opts.queries, cMax, null);
        for (const ef of opts.efs) {
          await restPass(ctx, main, qBodies.get(ef)!, opts.queries, cMax, null);
          for (const mode of grpcModesAt(cMax)) await grpcPass(ctx, mode, gBodies.get(ef)!, opts.queries, cMax, null);
          if (index) await enginePass(index, rows, ef, Math.max(...opts.engineConcurrency), 0);
        }
      }
      const best = new Map<string, { row: QueryRow; pass: QueryPass }>();
      const bestWrk = new Map<string, QueryRow>();
      const bestH2 = new Map<string, QueryRow>();
      const keep = (key: string, make: (p: QueryPass) => QueryRow, p: QueryPass) => {
        const cur = best.get(key);
        if (cur) cur.row.passes.push(Math.round(p.qps));
        if (!cur || p.qps > cur.pass.qps) {
          const row = make(p);
          row.passes = cur ? cur.row.passes : [Math.round(p.qps)];
          best.set(key, { row, pass: p });
        }
      };
      // Passes are interleaved (rep -> ef -> mode) so drift in machine load hits all modes alike.
      for (let rep = 0; rep < opts.reps; rep++) {
        for (const c of opts.concurrency) {
          const p = await baselinePass(ctx, opts.queries, c, rep === 0 ? `baseline GET /readyz c=${c}` : null);
          keep(`baseline-${c}`, (pp) => queryRow('baseline', c, 0, pp, space), p);
          for (const mode of grpcModesAt(c)) {
            const g = await grpcBaselinePass(ctx, mode, opts.queries, c, rep === 0 ? `baseline gRPC HealthCheck c=${c} ${mode}` : null);
            keep(`grpc-baseline-${mode}-${c}`, (pp) => queryRow('grpc-baseline', c, 0, pp, space, mode), g);
          }
        }
        for (const ef of opts.efs) {
          for (const c of opts.concurrency) {
            const p = await restPass(ctx, main, qBodies.get(ef)!, opts.queries, c, rep === 0 ? `query REST c=${c} ef=${ef}` : null);
            keep(`rest-${c}-${ef}`, (pp) => queryRow('rest', c, ef, pp, space), p);
            for (const mode of grpcModesAt(c)) {
              const g = await grpcPass(ctx, mode, gBodies.get(ef)!, opts.queries, c, rep === 0 ? `query gRPC c=${c} ef=${ef} ${mode}` : null);
              keep(`grpc-${mode}-${c}-${ef}`, (pp) => queryRow('grpc', c, ef, pp, space, mode), g);
            }
            const files = wrkFiles.get(ef);
            if (files) {
              const w = await wrkPass(ctx, main, files, c, rep === 0 ? `query wrk c=${c} ef=${ef}` : null);
              const cur = bestWrk.get(`${c}-${ef}`);
              const passes = cur ? [...cur.passes, Math.round(w.qps)] : [Math.round(w.qps)];
              if (!cur || w.qps > cur.qps) {
                bestWrk.set(`${c}-${ef}`, {
                  via: 'wrk',
                  concurrency: c,
                  ef,
                  qps: Math.round(w.qps),
                  p50Us: Math.round(w.p50Us),
                  p99Us: Math.round(w.p99Us),
                  recall: null,
                  clientCpuUsPerQuery: Math.round((w.clientCpuSec / w.requests) * 1e6),
                  serverMainCpuUsPerQuery: w.serverCpu ? Math.round((w.serverCpu.mainSec / w.requests) * 1e6) : null,
                  serverOtherCpuUsPerQuery: w.serverCpu ? Math.round((w.serverCpu.otherSec / w.requests) * 1e6) : null,
                  passes,
                });
              } else cur.passes = passes;
            }
            const hf = h2Files.get(ef);
            if (hf) {
              const keepH2 = (key: string, row: QueryRow) => {
                const cur = bestH2.get(key);
                row.ef = ef;
                row.passes = cur ? [...cur.passes, row.qps] : [row.qps];
                if (!cur || row.qps > cur.qps) bestH2.set(key, row);
                else cur.passes = row.passes;
              };
              keepH2(`rest-${c}-${ef}`, await h2loadPass(ctx, 'REST', hf.rest, null, c, 'per-worker'));
              for (const ch of h2Channels(c)) keepH2(`grpc-${ch}-${c}-${ef}`, await h2loadPass(ctx, 'gRPC', hf.grpc, hf.grpcAnswerBytes, c, ch));
            }
          }
          if (index) {
            for (const c of opts.engineConcurrency) {
              const p = await enginePass(index, rows, ef, c, enginePassSeconds);
              keep(`engine-${c}-${ef}`, (pp) => queryRow('engine', c, ef, pp, space), p);
              // One cycle, as every engine pass was before passes matched wrk's: shown beside, not compared.
              if (enginePassSeconds > 0) keep(`engine1-${c}-${ef}`, (pp) => queryRow('engine', c, ef, pp, space), await enginePass(index, rows, ef, c, 0));
            }
          }
        }
      }
      function queryRow(via: QueryRow['via'], c: number, ef: number, p: QueryPass, sp: MetricSpace, variant?: GrpcVariant): QueryRow {
        const nq = opts.queries;
        const parts = variant === undefined ? undefined : variantParts(variant);
        return {
          via,
          grpcLib: parts?.lib,
          channels: parts === undefined || c === 1 ? undefined : parts.channels,
          concurrency: c,
          ef,
          qps: Math.round(p.qps),
          p50Us: Math.round(percentile(p.latUs, 50)),
          p99Us: Math.round(percentile(p.latUs, 99)),
          recall: via === 'baseline' || via === 'grpc-baseline' ? null : round(recallAtK(sp, gt, p.ids, K), 4),
          // Engine rows: the benchmark process's CPU over all its threads (the engine's searches and the harness's calls).
          clientCpuUsPerQuery: Math.round((p.clientCpuSec / (p.requests ?? nq)) * 1e6),
          serverMainCpuUsPerQuery: p.serverCpu ? Math.round((p.serverCpu.mainSec / nq) * 1e6) : null,
          serverOtherCpuUsPerQuery: p.serverCpu ? Math.round((p.serverCpu.otherSec / nq) * 1e6) : null,
          passes: [],
        };
      }
      for (const c of opts.concurrency) queries.push(best.get(`baseline-${c}`)!.row);
      for (const c of opts.concurrency) for (const mode of grpcModesAt(c)) queries.push(best.get(`grpc-baseline-${mode}-${c}`)!.row);
      for (const ef of opts.efs) {
        for (const c of opts.concurrency) queries.push(best.get(`rest-${c}-${ef}`)!.row);
        for (const c of opts.concurrency) for (const mode of grpcModesAt(c)) queries.push(best.get(`grpc-${mode}-${c}-${ef}`)!.row);
        for (const c of opts.concurrency) {
          const w = bestWrk.get(`${c}-${ef}`);
          if (w) queries.push(w);
        }
        for (const c of opts.concurrency) {
          const r = bestH2.get(`rest-${c}-${ef}`);
          if (r) queries.push(r);
          for (const ch of h2Channels(c)) {
            const g = bestH2.get(`grpc-${ch}-${c}-${ef}`);
            if (g) queries.push(g);
          }
        }
        for (const c of opts.engineConcurrency) {
          const b = best.get(`engine-${c}-${ef}`);
          if (b) queries.push(b.row);
          const one = best.get(`engine1-${c}-${ef}`);
          if (one) engineOnePass.push(one.row);
        }
      }
      for (const q of queries) {
        console.log(
          `  ${q.via === 'baseline' ? `GET /readyz c=${q.concurrency}` : q.via === 'grpc-baseline' ? `gRPC HealthCheck c=${q.concurrency} (${q.grpcLib}${q.channels ? ` ${q.channels}` : ''})` : q.via === 'rest' ? `REST   c=${q.concurrency} ef=${q.ef}` : q.via === 'grpc' ? `gRPC   c=${q.concurrency} ef=${q.ef} (${q.grpcLib}${q.channels ? ` ${q.channels}` : ''})` : q.via === 'wrk' ? `wrk    c=${q.concurrency} ef=${q.ef}` : q.via === 'h2load-rest' ? `h2load REST c=${q.concurrency} ef=${q.ef}` : q.via === 'h2load-grpc' ? `h2load gRPC c=${q.concurrency} ef=${q.ef}${q.channels ? ` ${q.channels}` : ''}` : `engine ${q.concurrency} outstanding ef=${q.ef}`}: ` +
            `${q.qps.toLocaleString('en-US')} QPS, ${q.recall === null ? '' : `recall@10 ${q.recall}, `}p50 ${q.p50Us} µs, p99 ${q.p99Us} µs` +
            `${q.serverMainCpuUsPerQuery === null ? '' : `, server CPU µs/request main ${q.serverMainCpuUsPerQuery} other ${q.serverOtherCpuUsPerQuery}`}` +
            `${q.clientCpuUsPerQuery === null ? '' : `, client ${q.clientCpuUsPerQuery}`} (passes: ${q.passes.join(', ')})`,
        );
      }
      index?.close();
    }

    machine.loadAverageAtEnd = os.loadavg().map((x) => round(x, 2));
    machine.coresAvailableAtEnd = round(await coresAvailable(), 2);
    closeClients();
    const rssAtEnd = server.rss();
    const rssPeakAtEnd = server.peakRss();
    stopInfo = await server.stop();
    process.off('exit', onExit);
    if (opts.cpuProfDir) {
      const file = newestProfile(opts.cpuProfDir);
      if (file) profile = summarizeProfile(file, ctx.windows, REPO_ROOT);
      else console.log(`  no .cpuprofile found in ${opts.cpuProfDir}`);
    }

    const results: RestResults = {
      benchmark: 'rest',
      tag: opts.tag,
      startedAt: started.toISOString(),
      finishedAt: new Date().toISOString(),
      quick: opts.quick,
      machine,
      params: {
        n: opts.n,
        dim,
        queries: opts.queries,
        k: K,
        m: M,
        efConstruct: EF_CONSTRUCT,
        efs: opts.efs,
        concurrency: opts.concurrency,
        engineConcurrency: opts.engineConcurrency,
        reps: opts.reps,
        floatFormat: opts.floatFormat,
        clientKind: opts.client,
        indexingThresholdKb: opts.indexingThresholdKb,
        engineThreads: opts.engineThreads,
        wrkSeconds: opts.query && wrkSkip === null ? opts.wrkSeconds : null,
        wrkSkip,
        enginePassSeconds: engineBuild && opts.query ? enginePassSeconds : null,
        grpc: grpcOn ? { clients: opts.grpcClients, queryRequestBytes: requestBytes } : null,
        h2loadSeconds: opts.query && h2loadSkip === null ? opts.wrkSeconds : null,
        h2loadSkip,
        client:
          opts.client === 'raw'
            ? 'keep-alive TCP connections, one per request in flight, HTTP/1.1 written and read directly (bench/rest/client.ts RawClient), bodies prebuilt as Buffers'
            : `node:http keep-alive agent (Node ${process.version}), bodies prebuilt as Buffers`,
      },
      dataset: { key: ds.key, name: ds.name, description: ds.description, distance: ds.distance, groundTruthCached: gt.cached },
      server: {
        command: 'node bin/quiver',
        backend: opts.backend ?? 'native',
        env: `SERVICE__SERVICE__HTTP_PORT=<free port>${grpcOn ? ' SERVICE__SERVICE__GRPC_PORT=<free port>' : ''} SERVICE__SERVICE__HOST=127.0.0.1 SERVICE__STORAGE__STORAGE_PATH=<temp dir> SERVICE__LOG_LEVEL=WARN`,
        rssAtStartMiB: serverRssAtStart === null ? null : Math.round(serverRssAtStart / 2 ** 20),
        rssAfterUpsertsMiB: serverRssAfterUpserts === null ? null : Math.round(serverRssAfterUpserts / 2 ** 20),
        rssPeakAfterUpsertsMiB: serverPeakAfterUpserts === null ? null : Math.round(serverPeakAfterUpserts / 2 ** 20),
        rssPeakMiB: rssPeakAtEnd === null ? null : Math.round(rssPeakAtEnd / 2 ** 20),
        rssAtEndMiB: rssAtEnd === null ? null : Math.round(rssAtEnd / 2 ** 20),
        shutdownSeconds: stopInfo ? round(stopInfo.seconds, 2) : null,
        exitCode: stopInfo ? stopInfo.code : null,
        logTail: server.logTail(),
      },
      upserts,
      engineBuild,
      engineSkip,
      queries,
      engineOnePass,
      profile,
    };
    fs.mkdirSync(opts.resultsDir, { recursive: true });
    const jsonPath = path.join(opts.resultsDir, `rest-${opts.tag}.json`);
    const mdPath = path.join(opts.resultsDir, `rest-${opts.tag}.md`);
    fs.writeFileSync(jsonPath, JSON.stringify(results, null, 2) + '\n');
    const md = markdown(results);
    fs.writeFileSync(mdPath, md);
    console.log('');
    console.log(md);
    console.log(`wrote ${path.relative(process.cwd(), jsonPath)} and ${path.relative(process.cwd(), mdPath)}`);
  } catch (e) {
    closeClients();
    const tail = server.logTail();
    await server.stop(5000).catch(() => undefined);
    if (tail.length) console.error(`server log tail:\n${tail.join('\n')}`);
    throw e;
  }
}

main().catch((e) => {
  console.error(`bench:rest failed: ${e instanceof Error && e.stack ? e.stack : errMsg(e)}`);
  process.exit(1);
});
