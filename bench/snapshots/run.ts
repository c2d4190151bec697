/**
 * `npm run bench:snapshots [-- --points 1000000] [--dim 128] [--out bench/results/snapshots-<date>]`
 *
 * The snapshot benchmark. Starts a real server (`node bin/quiver`, bench/rest/server.ts)
 * with a temporary data directory, loads N random vectors with small payloads through
 * REST, and measures, each with wall time, MiB/s (archive bytes / seconds) and the
 * server's peak RSS growth above its RSS just before the operation (VmRSS sampled every
 * 20 ms by a worker thread of this process):
 *
 *  1. create:          POST /collections/{c}/snapshots?wait=true
 *  2. download:        GET /collections/{c}/snapshots/{name}, streamed to a file; size and
 *                      SHA-256 checked against the snapshot's description
 *  3. upload+recover:  POST /collections/{c2}/snapshots/upload?priority=snapshot, a
 *                      multipart body streamed from that file; then until c2 has N points
 *  4. recover file://: PUT /collections/{c3}/snapshots/recover with
 *                      file://<snapshots_path>/<c>/<name>, priority snapshot
 *  5. full storage:    POST /snapshots?wait=true (c and c2), then its download
 *
 * By default the collection has `indexing_threshold: 0` (no HNSW graph), so the bench
 * measures snapshot I/O rather than graph building; `--index` keeps HNSW.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { execFileSync } from 'child_process';
import { REPO_ROOT, errMsg, today } from '../engine/common';
import { coresAvailable, percentile } from '../engine/measure';
import { RawClient, runConcurrent } from '../rest/client';
import { QuiverServer, ServerCpu, cpuDelta } from '../rest/server';
import { PhaseRow, RSS_GROWTH_LIMIT_MIB, RssFigures, SnapshotResults, markdown } from './report';
import type { MemWindow } from './rss-worker';
import { MemSampler, downloadToFile, uploadMultipart } from './transfer';

interface Options {
  points: number;
  dim: number;
  batch: number;
  concurrency: number;
  index: boolean;
  full: boolean;
  out: string;
  keepStorage: boolean;
  settleMs: number;
  /** A built checkout to compare recoveries with (its server runs beside this one's). */
  base: string | null;
  baseLabel: string | null;
  rounds: number;
}

const USAGE = `usage: npm run bench:snapshots -- [--points 1000000] [--dim 128] [--batch 1000] [--concurrency 3]
         [--index] [--no-full] [--settle-ms 1500] [--keep-storage] [--out bench/results/snapshots-<date>]
         [--base <built checkout> [--base-label TEXT] [--rounds 3]]`;

function parseOptions(argv: string[]): Options {
  const o: Options = {
    points: 1_000_000,
    dim: 128,
    batch: 1000,
    concurrency: 3,
    index: false,
    full: true,
    out: path.join(REPO_ROOT, 'bench', 'results', `snapshots-${today()}`),
    keepStorage: false,
    settleMs: 1500,
    base: null,
    baseLabel: null,
    rounds: 3,
  };
  const intArg = (v: string | undefined, name: string) => {
    const n = Number(String(v).replace(/[_,]/g, ''));
    if (!Number.isInteger(n) || n <= 0) throw new Error(`${name}: expected a positive integer, got ${v}\n${USAGE}`);
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const next = () => argv[++i];
    switch (a) {
      case '--points':
        o.points = intArg(next(), a);
        break;
      case '--dim':
        o.dim = intArg(next(), a);
        break;
      case '--batch':
        o.batch = intArg(next(), a);
        break;
      case '--concurrency':
        o.concurrency = intArg(next(), a);
        break;
      case '--index':
        o.index = true;
        break;
      case '--no-full':
        o.full = false;
        break;
      case '--settle-ms':
        o.settleMs = Number(next());
        break;
      case '--keep-storage':
        o.keepStorage = true;
        break;
      case '--base': {
        const v = next();
        if (!v) throw new Error(`--base needs the path of a built checkout\n${USAGE}`);
        o.base = path.resolve(v);
        break;
      }
      case '--base-label':
        o.baseLabel = next() ?? null;
        break;
      case '--rounds':
        o.rounds = intArg(next(), a);
        break;
      case '--out': {
        const v = next();
        if (!v) throw new Error(`--out needs a path\n${USAGE}`);
        o.out = path.resolve(v.replace(/\.(json|md)$/, ''));
        break;
      }
      case '-h':
      case '--help':
        console.log(USAGE);
        process.exit(0);
        break;
      default:
        throw new Error(`unknown option ${a}\n${USAGE}`);
    }
  }
  return o;
}

const round = (x: number, d = 3) => Math.round(x * 10 ** d) / 10 ** d;
const MiB = 2 ** 20;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// -- data -----------------------------------------------------------------------------------

/** mulberry32: a small seeded PRNG. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const POOL_BITS = 16;
/** Random numbers in [-1, 1) as JSON text (5 decimals), drawn from to build vectors cheaply. */
function numberPool(rand: () => number): string[] {
  return Array.from({ length: 1 << POOL_BITS }, () => (rand() * 2 - 1).toFixed(5));
}

/** The upsert body of batch `b`: ids b*batch ..; vectors from the pool; payload {"i": id, "tag": "t<id % 100>"}. */
function batchBody(b: number, o: Options, pool: string[]): Buffer {
  const rand = prng(0x5eed + b);
  const start = b * o.batch;
  const end = Math.min(o.points, start + o.batch);
  const parts: string[] = [];
  const row: string[] = new Array(o.dim);
  const mask = (1 << POOL_BITS) - 1;
  for (let id = start; id < end; id++) {
    for (let j = 0; j < o.dim; j++) row[j] = pool[(rand() * 4294967296) & mask];
    parts.push(`{"id":${id},"vector":[${row.join(',')}],"payload":{"i":${id},"tag":"t${id % 100}"}}`);
  }
  return Buffer.from(`{"points":[${parts.join(',')}]}`);
}

// -- REST helpers -----------------------------------------------------------------------------

interface CollectionState {
  status: string;
  pointsCount: number;
  indexedVectorsCount: number;
  segmentsCount: number;
}

async function info(client: RawClient, name: string): Promise<CollectionState> {
  const r = await client.json<{ status: string; points_count: number; indexed_vectors_count: number; segments_count: number }>('GET', `/collections/${name}`);
  return { status: r.status, pointsCount: r.points_count, indexedVectorsCount: r.indexed_vectors_count, segmentsCount: r.segments_count };
}

/** Polls until `name` exists with `n` points; resolves with the seconds waited. */
async function waitPoints(client: RawClient, name: string, n: number, timeoutSec: number): Promise<{ seconds: number; state: CollectionState }> {
  const t0 = performance.now();
  for (;;) {
    const s = await info(client, name).catch(() => null);
    const seconds = (performance.now() - t0) / 1000;
    if (s && s.pointsCount === n) return { seconds, state: s };
    if (seconds > timeoutSec) throw new Error(`collection ${name}: ${s ? `${s.pointsCount} points` : 'missing'} after ${timeoutSec} s, expected ${n}`);
    await sleep(50);
  }
}

async function waitGreen(client: RawClient, name: string, timeoutSec: number): Promise<number> {
  const t0 = performance.now();
  for (;;) {
    const s = await info(client, name);
    const seconds = (performance.now() - t0) / 1000;
    if (s.status === 'green') return seconds;
    if (seconds > timeoutSec) throw new Error(`collection ${name} still ${s.status} after ${timeoutSec} s`);
    await sleep(200);
  }
}

interface Description {
  name: string;
  size: number;
  checksum?: string;
  creation_time: string | null;
}

/** A few points of `name` (payload and vector), to compare recovered collections with the source. */
async function samplePoints(client: RawClient, name: string, ids: number[]): Promise<string> {
  const pts = await client.json<Array<{ id: number; payload: unknown; vector: unknown }>>('POST', `/collections/${name}/points`, { ids, with_payload: true, with_vector: true });
  pts.sort((a, b) => a.id - b.id);
  return JSON.stringify(pts.map((p) => [p.id, p.payload, p.vector]));
}

/** The checkout the server ran from: HEAD and how many files under ts/, crates/, bindings/ differ from it. */
function gitState(): string {
  try {
    const head = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO_ROOT, encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'ts', 'crates', 'bindings'], { cwd: REPO_ROOT, encoding: 'utf8' }).split('\n').filter((l) => l.trim()).length;
    const addon = fs.readdirSync(path.join(REPO_ROOT, 'crates', 'quiver-node')).find((f) => f.endsWith('.node'));
    const built = addon ? `; native addon ${addon} built ${fs.statSync(path.join(REPO_ROOT, 'crates', 'quiver-node', addon)).mtime.toISOString()}` : '';
    return (dirty ? `${head} + ${dirty} uncommitted file(s) under ts/, crates/, bindings/` : head) + built;
  } catch {
    return 'unknown';
  }
}

function fsOf(dir: string): string {
  try {
    const out = execFileSync('df', ['-hT', dir], { encoding: 'utf8' }).trim().split('\n').pop()!.split(/\s+/);
    return `${out[1]} (${out[0]}, ${out[4]} free)`;
  } catch {
    return 'unknown';
  }
}

// -- phases -----------------------------------------------------------------------------------

interface Ctx {
  o: Options;
  server: QuiverServer;
  client: RawClient;
  sampler: MemSampler;
  phases: PhaseRow[];
  problems: string[];
}

function rssFigures(w: MemWindow): RssFigures {
  const k = (x: number) => round(x / 1024, 1);
  return {
    baselineMiB: k(w.baseline.vmRss),
    peakMiB: k(w.peak.vmRss),
    growthMiB: k(w.peak.vmRss - w.baseline.vmRss),
    anonBaselineMiB: k(w.baseline.rssAnon),
    anonPeakMiB: k(w.peak.rssAnon),
    anonGrowthMiB: k(w.peak.rssAnon - w.baseline.rssAnon),
    fileGrowthMiB: k(w.peak.rssFile - w.baseline.rssFile),
    endMiB: k(w.last.vmRss),
    settledMiB: null,
    retainedMiB: null,
    transientMiB: null,
    peakAtSec: round(w.atPeak.t / 1000, 2),
    samples: w.samples,
    maxGapMs: Math.round(w.maxGapMs),
    series: w.series,
  };
}

/**
 * Runs one measured operation: settles, opens an RSS window (baseline sample), runs
 * `fn`, closes the window. `fn` resolves with the archive bytes it moved and details.
 */
async function phase(
  ctx: Ctx,
  key: string,
  label: string,
  request: string,
  fn: () => Promise<{ bytes: number; details?: PhaseRow['details'] }>,
  target: { server: QuiverServer; sampler: MemSampler } = ctx,
): Promise<PhaseRow> {
  await sleep(ctx.o.settleMs);
  console.log(`${label}: ${request} ...`);
  await target.sampler.begin();
  const c0: ServerCpu | null = target.server.cpu();
  const t0 = performance.now();
  let res: { bytes: number; details?: PhaseRow['details'] };
  try {
    res = await fn();
  } catch (e) {
    await target.sampler.end().catch(() => undefined);
    throw e;
  }
  const seconds = (performance.now() - t0) / 1000;
  const w = await target.sampler.end();
  const cpu = cpuDelta(c0, target.server.cpu());
  const rss = rssFigures(w);
  // What the server still holds a moment later (for a recovery: the new collection's data).
  await sleep(ctx.o.settleMs);
  const settled = target.server.rss();
  if (settled !== null) {
    rss.settledMiB = round(settled / MiB, 1);
    rss.retainedMiB = round(rss.settledMiB - rss.baselineMiB, 1);
    rss.transientMiB = round(rss.peakMiB - Math.max(rss.settledMiB, rss.baselineMiB), 1);
  }
  const row: PhaseRow = {
    key,
    label,
    request,
    seconds: round(seconds),
    archiveBytes: res.bytes,
    archiveMiB: round(res.bytes / MiB, 1),
    mibPerSec: round(res.bytes / MiB / seconds, 1),
    rss,
    serverMainCpuSec: cpu ? round(cpu.mainSec, 2) : null,
    serverOtherCpuSec: cpu ? round(cpu.otherSec, 2) : null,
    details: res.details ?? {},
  };
  console.log(
    `  ${row.seconds} s, ${row.archiveMiB} MiB, ${row.mibPerSec} MiB/s; RSS ${rss.baselineMiB} -> peak ${rss.peakMiB} MiB (growth ${rss.growthMiB} MiB: anon ${rss.anonGrowthMiB}, file ${rss.fileGrowthMiB}; ` +
      `peak at ${rss.peakAtSec} s, end ${rss.endMiB} MiB, ${ctx.o.settleMs} ms later ${rss.settledMiB} MiB; ${rss.samples} samples, max gap ${rss.maxGapMs} ms); server CPU main ${row.serverMainCpuSec} s, other ${row.serverOtherCpuSec} s`,
  );
  if (Object.keys(row.details).length) console.log(`  ${JSON.stringify(row.details)}`);
  // The base build's figures (--base) are there to compare with, not this build's problems.
  if (rss.growthMiB >= RSS_GROWTH_LIMIT_MIB && target.server === ctx.server) {
    ctx.problems.push(
      `${label} (\`${request}\`): the server's RSS grew by ${rss.growthMiB} MiB (≥ ${RSS_GROWTH_LIMIT_MIB} MB), from ${rss.baselineMiB} to ${rss.peakMiB} MiB ` +
        `(RssAnon +${rss.anonGrowthMiB} MiB, RssFile +${rss.fileGrowthMiB} MiB; peak ${rss.peakAtSec} s into a ${row.seconds} s operation) with a ${row.archiveMiB} MiB archive.`,
    );
  }
  ctx.phases.push(row);
  return row;
}

// -- side by side with a base build ------------------------------------------------------------

const AB_OPS = [
  { op: 'upload', label: 'upload + recover (new collection)' },
  { op: 'file', label: 'recover file:// (new collection)' },
  { op: 'replace', label: 'recover file:// replacing a collection' },
] as const;

/**
 * `--base`: starts the server of the base checkout beside this one, gives it the same
 * archive (a hard link in its snapshots folder), and times the three recoveries on
 * both, `--rounds` times, interleaved: in each round, operation after operation, the
 * two servers one after the other, the order flipped every time. Each recovered
 * collection is checked and deleted (untimed) before the next. Rows also go to the
 * phase table; the summary gives medians and their ratio.
 */
async function compareWithBase(ctx: Ctx, snap: Description, archive: string, sampleIds: number[], reference: string, checks: string[]): Promise<NonNullable<SnapshotResults['ab']>> {
  const o = ctx.o;
  const baseRoot = o.base!;
  const base = await QuiverServer.start({ root: baseRoot, nodeArgs: [], keepStorage: o.keepStorage, env: {} });
  const baseClient = new RawClient(base.url);
  const baseSampler = new MemSampler(base.pid, 20);
  let baseGit = 'unknown';
  try {
    baseGit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: baseRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    /* not a git checkout (e.g. a `git archive` export): --base-label says what it is */
  }
  console.log(`A/B: base server from ${baseRoot} (${o.baseLabel ?? baseGit}), pid ${base.pid}, ${base.url}`);
  const baseArchive = path.join(base.dir, 'snapshots', 'ab', snap.name);
  fs.mkdirSync(path.dirname(baseArchive), { recursive: true });
  try {
    fs.linkSync(archive, baseArchive);
  } catch {
    fs.copyFileSync(archive, baseArchive);
  }
  const targets = [
    { tag: 'new', server: ctx.server, client: ctx.client, sampler: ctx.sampler, archive },
    { tag: 'base', server: base, client: baseClient, sampler: baseSampler, archive: baseArchive },
  ];
  const rows: NonNullable<SnapshotResults['ab']>['rows'] = [];
  try {
    for (let roundNo = 1; roundNo <= o.rounds; roundNo++) {
      for (const [i, { op, label }] of AB_OPS.entries()) {
        const order = (roundNo + i) % 2 === 0 ? targets : [...targets].reverse();
        for (const t of order) {
          const name = `ab_${op}_${roundNo}`;
          const location = `file://${t.archive}`;
          if (op === 'replace') {
            await t.client.json('PUT', `/collections/${name}/snapshots/recover?wait=true`, { location, priority: 'snapshot' });
            await waitPoints(t.client, name, o.points, 600);
          }
          const request =
            op === 'upload'
              ? `POST /collections/${name}/snapshots/upload?priority=snapshot (multipart, streamed)`
              : `PUT /collections/${name}/snapshots/recover {"location":"file://…/${snap.name}","priority":"snapshot"}${op === 'replace' ? ' (existing)' : ''}`;
          const row = await phase(
            ctx,
            `ab-${op}`,
            `A/B round ${roundNo}: ${label} [${t.tag}]`,
            request,
            async () => {
              if (op === 'upload') {
                const u = await uploadMultipart(`${t.server.url}/collections/${name}/snapshots/upload?priority=snapshot&wait=true`, 'snapshot', t.archive);
                if (u.status !== 200) throw new Error(`upload [${t.tag}]: HTTP ${u.status} ${u.body.slice(0, 500)}`);
              } else {
                await t.client.json('PUT', `/collections/${name}/snapshots/recover?wait=true`, { location, priority: 'snapshot' });
              }
              const w = await waitPoints(t.client, name, o.points, 600);
              return { bytes: snap.size, details: { pointsWaitSec: round3(w.seconds) } };
            },
            t,
          );
          const same = (await samplePoints(t.client, name, sampleIds)) === reference;
          if (!same) ctx.problems.push(`A/B round ${roundNo}, ${label} [${t.tag}]: sampled points differ from the source`);
          rows.push({ round: roundNo, op, tag: t.tag, seconds: row.seconds, mibPerSec: row.mibPerSec, mainCpuSec: row.serverMainCpuSec, otherCpuSec: row.serverOtherCpuSec, same });
          await t.client.json('DELETE', `/collections/${name}`);
        }
      }
    }
  } finally {
    baseClient.close();
    await baseSampler.stop().catch(() => undefined);
    const stopped = await base.stop();
    if (stopped.code !== 0) ctx.problems.push(`the base server exited with code ${stopped.code} after SIGTERM`);
  }
  const median = (xs: number[]) => {
    const v = [...xs].sort((a, b) => a - b);
    return v.length % 2 ? v[(v.length - 1) / 2] : (v[v.length / 2 - 1] + v[v.length / 2]) / 2;
  };
  const summary = AB_OPS.map(({ op, label }) => {
    const of = (tag: string) => rows.filter((r) => r.op === op && r.tag === tag);
    const n = of('new');
    const b = of('base');
    const nSec = median(n.map((r) => r.seconds));
    const bSec = median(b.map((r) => r.seconds));
    const cpu = (rs: typeof rows) => median(rs.map((r) => (r.mainCpuSec ?? NaN) + (r.otherCpuSec ?? NaN)));
    return {
      op,
      label,
      newMedianSec: round3(nSec),
      baseMedianSec: round3(bSec),
      newMedianMiBs: round(snap.size / MiB / nSec, 1),
      baseMedianMiBs: round(snap.size / MiB / bSec, 1),
      newBestMiBs: Math.max(...n.map((r) => r.mibPerSec)),
      baseBestMiBs: Math.max(...b.map((r) => r.mibPerSec)),
      speedup: round(bSec / nSec, 2),
      newMedianCpuSec: round(cpu(n), 2),
      baseMedianCpuSec: round(cpu(b), 2),
    };
  });
  const allSame = rows.every((r) => r.same);
  checks.push(`A/B: ${rows.length} recoveries (${o.rounds} rounds × ${AB_OPS.length} operations × 2 builds), points ${sampleIds.join(', ')} ${allSame ? 'identical to the source after every one' : '**differ** after some (see problems)'}`);
  return { base: baseRoot, baseLabel: o.baseLabel, baseGit, rounds: o.rounds, rows, summary };
}

const round3 = (x: number) => round(x, 3);

// -- main -------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const o = parseOptions(argv);
  const started = new Date();
  const vectorMiB = (o.points * o.dim * 4) / MiB;
  console.log(`snapshot benchmark: ${o.points.toLocaleString('en-US')} points x ${o.dim}-d (${round(vectorMiB, 0)} MiB of f32 vectors), ${o.index ? 'HNSW kept' : 'indexing_threshold 0 (no HNSW)'}`);
  const machine: SnapshotResults['machine'] = {
    cpuModel: os.cpus()[0]?.model ?? 'unknown',
    cores: os.cpus().length,
    memoryGiB: round(os.totalmem() / 2 ** 30, 1),
    kernel: os.release(),
    node: process.version,
    loadAverageAtStart: os.loadavg().map((x) => round(x, 2)),
    coresAvailableAtStart: round(await coresAvailable(), 2),
    loadAverageAtEnd: [],
    coresAvailableAtEnd: 0,
    dataDirFs: fsOf(os.tmpdir()),
    git: gitState(),
  };
  console.log(`  machine: ${machine.cores} cores (${machine.cpuModel}); load ${machine.loadAverageAtStart.join(' ')}; cores available ≈ ${machine.coresAvailableAtStart}; ${os.tmpdir()} on ${machine.dataDirFs}`);

  const server = await QuiverServer.start({ nodeArgs: [], keepStorage: o.keepStorage, env: {} });
  const onExit = () => server.killNow();
  process.once('exit', onExit);
  const onSignal = () => {
    server.killNow();
    process.exit(130);
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  const rssEmpty = server.rss();
  const snapshotsPath = path.join(server.dir, 'snapshots');
  const downloads = path.join(server.dir, 'downloads');
  fs.mkdirSync(downloads, { recursive: true });
  console.log(`  server: pid ${server.pid}, ${server.url}, data ${server.dir}`);
  const client = new RawClient(server.url);
  const sampler = new MemSampler(server.pid, 20);
  const ctx: Ctx = { o, server, client, sampler, phases: [], problems: [] };
  const checks: string[] = [];
  const c = 'bench_snap';
  const c2 = 'bench_snap_uploaded';
  const c3 = 'bench_snap_file';

  try {
    // -- load ------------------------------------------------------------------------------
    const collectionBody: Record<string, unknown> = { vectors: { size: o.dim, distance: 'Cosine' } };
    if (!o.index) collectionBody.optimizers_config = { indexing_threshold: 0 };
    await client.json('PUT', `/collections/${c}`, collectionBody);
    const pool = numberPool(prng(42));
    const nBatches = Math.ceil(o.points / o.batch);
    let bodyBytes = 0;
    let done = 0;
    let lastLog = performance.now();
    console.log(`load: ${nBatches} batches of ${o.batch}, ${o.concurrency} in flight ...`);
    const path1 = `/collections/${c}/points?wait=true`;
    const load = await runConcurrent(nBatches, o.concurrency, async (b) => {
      const body = batchBody(b, o, pool);
      bodyBytes += body.length;
      const r = await client.request('PUT', path1, body);
      if (r.status !== 200) throw new Error(`upsert: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 300)}`);
      done++;
      if (performance.now() - lastLog > 10_000) {
        lastLog = performance.now();
        console.log(`  ${(done * o.batch).toLocaleString('en-US')} points ...`);
      }
    });
    let state = await info(client, c);
    if (state.pointsCount !== o.points) throw new Error(`${c}: points_count ${state.pointsCount} after loading ${o.points}`);
    let greenSeconds: number | null = null;
    if (o.index) {
      console.log('  waiting for green (HNSW build) ...');
      greenSeconds = round(await waitGreen(client, c, 6 * 3600), 1);
      state = await info(client, c);
    }
    const loadRow: SnapshotResults['load'] = {
      seconds: round(load.seconds, 1),
      pointsPerSec: Math.round(o.points / load.seconds),
      bodyMiB: round(bodyBytes / MiB, 1),
      p50Ms: round(percentile(load.latUs, 50) / 1000, 1),
      p99Ms: round(percentile(load.latUs, 99) / 1000, 1),
      greenSeconds,
      state,
      serverRssEmptyMiB: rssEmpty === null ? null : round(rssEmpty / MiB, 0),
      serverRssAfterMiB: server.rss() === null ? null : round(server.rss()! / MiB, 0),
    };
    console.log(
      `  loaded in ${loadRow.seconds} s (${loadRow.pointsPerSec.toLocaleString('en-US')} points/s, ${loadRow.bodyMiB} MiB of JSON); ${state.status}, ${state.segmentsCount} segments, ` +
        `${state.indexedVectorsCount} indexed; server RSS ${loadRow.serverRssEmptyMiB} MiB before, ${loadRow.serverRssAfterMiB} MiB after`,
    );
    const sampleIds = [0, 1, 7, Math.floor(o.points / 3), Math.floor(o.points / 2), o.points - 1];
    const reference = await samplePoints(client, c, sampleIds);

    // -- 1. create -------------------------------------------------------------------------
    // The server checkpoints every flush_interval_sec (5 s) on its own; rewriting one
    // point (same content) right before makes sure the snapshot's checkpoint has work to
    // do, as after any write, whatever the timer did meanwhile. 1b then measures a
    // snapshot with nothing written since the last checkpoint.
    const touch = async () => {
      const r = await client.request('PUT', path1, batchBody(0, { ...o, points: 1 }, pool));
      if (r.status !== 200) throw new Error(`upsert: HTTP ${r.status}`);
    };
    let desc: Description | null = null;
    await sleep(o.settleMs);
    await touch();
    await phase(ctx, 'create', '1. create (after a write)', `POST /collections/${c}/snapshots?wait=true`, async () => {
      desc = await client.json<Description>('POST', `/collections/${c}/snapshots?wait=true`);
      return { bytes: desc.size, details: { name: desc.name } };
    });
    const snap = desc! as Description;
    let desc2: Description | null = null;
    await phase(ctx, 'create-again', '1b. create (nothing written since)', `POST /collections/${c}/snapshots?wait=true`, async () => {
      desc2 = await client.json<Description>('POST', `/collections/${c}/snapshots?wait=true`);
      return { bytes: desc2.size, details: { name: desc2.name } };
    });
    await client.json('DELETE', `/collections/${c}/snapshots/${encodeURIComponent((desc2! as Description).name)}?wait=true`);
    if (!snap.checksum) ctx.problems.push(`the description of ${snap.name} has no checksum`);
    console.log(`  snapshot ${snap.name}: ${round(snap.size / MiB, 1)} MiB, sha256 ${snap.checksum}`);

    // -- 2. download -----------------------------------------------------------------------
    const file = path.join(downloads, snap.name);
    await phase(ctx, 'download', '2. download', `GET /collections/${c}/snapshots/{name}`, async () => {
      const d = await downloadToFile(`${server.url}/collections/${c}/snapshots/${encodeURIComponent(snap.name)}`, file);
      const sizeOk = d.bytes === snap.size && fs.statSync(file).size === snap.size && (d.contentLength === null || d.contentLength === snap.size);
      const shaOk = d.sha256 === snap.checksum;
      if (!sizeOk) ctx.problems.push(`download of ${snap.name}: ${d.bytes} bytes (Content-Length ${d.contentLength}), the description says ${snap.size}`);
      if (!shaOk) ctx.problems.push(`download of ${snap.name}: SHA-256 ${d.sha256}, the description says ${snap.checksum}`);
      checks.push(`download: ${d.bytes.toLocaleString('en-US')} bytes, size ${sizeOk ? 'equal to' : '**differs from**'} the description's, SHA-256 ${shaOk ? 'equal to' : '**differs from**'} the description's checksum`);
      return { bytes: d.bytes, details: { firstByteSec: round(d.firstByteSec, 3), sizeOk, sha256Ok: shaOk } };
    });

    // -- 3. upload + recover -------------------------------------------------------------------
    await phase(ctx, 'upload', '3. upload + recover', `POST /collections/${c2}/snapshots/upload?priority=snapshot (multipart, streamed)`, async () => {
      const u = await uploadMultipart(`${server.url}/collections/${c2}/snapshots/upload?priority=snapshot&wait=true`, 'snapshot', file);
      if (u.status !== 200) throw new Error(`upload: HTTP ${u.status} ${u.body.slice(0, 500)}`);
      const w = await waitPoints(client, c2, o.points, 600);
      return {
        bytes: snap.size,
        details: { bodySentSec: round(u.sentSec, 2), answeredSec: round(u.seconds, 2), pointsWaitSec: round(w.seconds, 2), multipartBytes: u.bodyBytes },
      };
    });

    // -- 4. recover from file:// ----------------------------------------------------------------
    const location = `file://${path.join(snapshotsPath, c, snap.name)}`;
    await phase(ctx, 'recover-file', '4. recover file://', `PUT /collections/${c3}/snapshots/recover {"location":"file://<snapshots_path>/${c}/<name>","priority":"snapshot"}`, async () => {
      const t0 = performance.now();
      await client.json('PUT', `/collections/${c3}/snapshots/recover?wait=true`, { location, priority: 'snapshot' });
      const answeredSec = (performance.now() - t0) / 1000;
      const w = await waitPoints(client, c3, o.points, 600);
      return { bytes: snap.size, details: { answeredSec: round(answeredSec, 2), pointsWaitSec: round(w.seconds, 2) } };
    });

    // -- 4b. recover file:// over an existing collection (c2 is replaced by the same data) --
    await phase(ctx, 'recover-replace', '4b. recover file:// replacing a collection', `PUT /collections/${c2}/snapshots/recover (existing, same snapshot, priority snapshot)`, async () => {
      const t0 = performance.now();
      await client.json('PUT', `/collections/${c2}/snapshots/recover?wait=true`, { location, priority: 'snapshot' });
      const answeredSec = (performance.now() - t0) / 1000;
      const w = await waitPoints(client, c2, o.points, 600);
      return { bytes: snap.size, details: { answeredSec: round(answeredSec, 2), pointsWaitSec: round(w.seconds, 2) } };
    });

    for (const name of [c2, c3]) {
      const s = await info(client, name);
      const same = (await samplePoints(client, name, sampleIds)) === reference;
      checks.push(`${name}: ${s.pointsCount.toLocaleString('en-US')} points (${s.status}, ${s.segmentsCount} segments); points ${sampleIds.join(', ')} ${same ? 'identical to' : '**differ from**'} the source's (payload and vector)`);
      if (s.pointsCount !== o.points) ctx.problems.push(`${name}: ${s.pointsCount} points after recovery, expected ${o.points}`);
      if (!same) ctx.problems.push(`${name}: sampled points differ from the source collection after recovery`);
    }

    // -- 4c. the same recoveries side by side with the base build ------------------------------
    const ab = o.base === null ? null : await compareWithBase(ctx, snap, path.join(snapshotsPath, c, snap.name), sampleIds, reference, checks);

    // -- 5. full storage -------------------------------------------------------------------------
    let full: SnapshotResults['fullSnapshot'] = null;
    if (o.full) {
      // Keep c and c2 (two copies of the data: a full-storage archive of about twice the collection's).
      await client.json('DELETE', `/collections/${c3}`);
      fs.rmSync(file, { force: true });
      let fdesc: Description | null = null;
      await phase(ctx, 'full-create', '5a. full-storage create', 'POST /snapshots?wait=true', async () => {
        fdesc = await client.json<Description>('POST', '/snapshots?wait=true');
        return { bytes: fdesc.size, details: { name: fdesc.name, collections: `${c}, ${c2}` } };
      });
      const fd = fdesc! as Description;
      full = { name: fd.name, bytes: fd.size, sha256: fd.checksum ?? '' };
      const ffile = path.join(downloads, fd.name);
      await phase(ctx, 'full-download', '5b. full-storage download', 'GET /snapshots/{name}', async () => {
        const d = await downloadToFile(`${server.url}/snapshots/${encodeURIComponent(fd.name)}`, ffile);
        const ok = d.bytes === fd.size && d.sha256 === fd.checksum;
        checks.push(`full-storage download: ${d.bytes.toLocaleString('en-US')} bytes, size and SHA-256 ${ok ? 'equal to' : '**differ from**'} the description's`);
        if (!ok) ctx.problems.push(`download of ${fd.name}: ${d.bytes} bytes / ${d.sha256}, the description says ${fd.size} / ${fd.checksum}`);
        return { bytes: d.bytes, details: { firstByteSec: round(d.firstByteSec, 3), sizeAndSha256Ok: ok } };
      });
      fs.rmSync(ffile, { force: true });
    }

    machine.loadAverageAtEnd = os.loadavg().map((x) => round(x, 2));
    machine.coresAvailableAtEnd = round(await coresAvailable(), 2);
    await sampler.stop();
    client.close();
    const logTail = server.logTail();
    const pid = server.pid;
    const stop = await server.stop();
    process.off('exit', onExit);
    if (stop.code !== 0) ctx.problems.push(`the server exited with code ${stop.code} after SIGTERM`);

    const outRel = path.relative(REPO_ROOT, o.out);
    const results: SnapshotResults = {
      benchmark: 'snapshots',
      tag: path.basename(o.out).replace(/^snapshots-/, ''),
      startedAt: started.toISOString(),
      finishedAt: new Date().toISOString(),
      argv,
      commands: [
        'npm run build:addon   # the native addon the server needs (once)',
        ...(o.base ? ['# --base: a checkout of the code to compare, built (npx tsc -p tsconfig.json, and its native addon)'] : []),
        `npm run bench:snapshots${argv.length ? ` -- ${argv.map((x) => (/[\s"']/.test(x) ? JSON.stringify(x) : x)).join(' ')}` : ''}`,
        '# = tsc -p tsconfig.json (prebench:snapshots), then node dist/bench/snapshots/run.js',
      ],
      machine,
      params: {
        points: o.points,
        dim: o.dim,
        distance: 'Cosine',
        batch: o.batch,
        concurrency: o.concurrency,
        index: o.index,
        collectionBody,
        payload: '{"i": <id>, "tag": "t<id % 100>"}',
        vectors: 'uniform random in [-1, 1), 5 decimals, seeded',
        full: o.full,
      },
      load: loadRow,
      server: {
        command: 'node bin/quiver',
        env: `SERVICE__LOG_LEVEL=WARN, storage and snapshots under a fresh temp dir in ${os.tmpdir()} (removed at the end)`,
        pid,
        storageDir: server.dir,
        shutdownSeconds: round(stop.seconds, 2),
        exitCode: stop.code,
        logTail,
      },
      snapshot: { name: snap.name, bytes: snap.size, sha256: snap.checksum ?? '' },
      fullSnapshot: full,
      phases: ctx.phases,
      ab,
      checks,
      problems: ctx.problems,
    };
    fs.mkdirSync(path.dirname(o.out), { recursive: true });
    fs.writeFileSync(`${o.out}.json`, JSON.stringify(results, null, 2) + '\n');
    const md = markdown(results);
    fs.writeFileSync(`${o.out}.md`, md);
    console.log('');
    console.log(md);
    console.log(`wrote ${outRel}.json and ${outRel}.md`);
  } catch (e) {
    client.close();
    await sampler.stop().catch(() => undefined);
    const tail = server.logTail();
    await server.stop(5000).catch(() => undefined);
    if (tail.length) console.error(`server log tail:\n${tail.join('\n')}`);
    throw e;
  }
}

main().catch((e) => {
  console.error(`bench:snapshots failed: ${e instanceof Error && e.stack ? e.stack : errMsg(e)}`);
  process.exit(1);
});
