/**
 * `npm run bench:rest -- --auth [--n 20000] [--queries 1000] [--ef 64] [--concurrency 1,8] [--reps 10]`
 * (or `node dist/bench/rest/auth.js [same flags]` after `npm run build:ts`)
 *
 * The cost of access control per request: REST query throughput with and without
 * authentication, in one run, on one loaded data set.
 *
 *  1. A loader server (no keys) takes `--n` points of the synthetic 128-d set (with a
 *     payload `{"user": "u<i>", "user_raw": "u<i>"}`), a keyword payload index on
 *     `user` (not on `user_raw`), builds its HNSW index (waits for green), and stops
 *     (graceful: last checkpoint).
 *  2. Two servers start on copies of that storage, so both hold the same HNSW graph:
 *     `plain` without keys, and `auth` with SERVICE__SERVICE__API_KEY and
 *     SERVICE__SERVICE__JWT_RBAC=true. Both run for the whole measurement (the idle one
 *     costs nothing).
 *  3. The same query bodies (`POST /collections/bench/points/query`, limit 10,
 *     `hnsw_ef` ef) are sent at each concurrency for each variant:
 *       - `none`: the plain server, no credentials;
 *       - `api-key`: the auth server, `api-key: <key>`;
 *       - `jwt`: `Authorization: Bearer <token>`, one HS256 token (jose) with
 *         `access: [{collection: bench, access: r}]`, the same on every request (the
 *         server verifies its signature once and caches the claims);
 *       - `jwt-uncached`: as `jwt` but a distinct token (a `jti` claim) on every request,
 *         so every request pays the signature check;
 *       - `jwt-value-exists`: the `jwt` token plus `value_exists` on the indexed field
 *         (one point lookup through the payload index per request);
 *       - `jwt-value-exists-unindexed`: the same on `user_raw`, which has no payload
 *         index (the lookup scans every point's payload).
 *     Passes are interleaved (rep -> concurrency -> variant, the variant order rotated
 *     each rep) so drift in machine load hits every variant alike; the best of `--reps`
 *     passes counts, the median is reported too. Server CPU per request (main thread /
 *     other threads, from /proc) is summed over all passes of a variant.
 *
 * Results: bench/results/rest-auth-<tag>.{json,md}.
 */
import { execFileSync } from 'child_process';
import * as crypto from 'crypto';
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { SignJWT } from 'jose';
import { Dataset, EF_CONSTRUCT, K, M, REPO_ROOT, errMsg, parseArgs, today } from '../engine/common';
import { loadDataset } from '../engine/datasets';
import { MetricSpace, groundTruth, metricSpace, recallAtK } from '../engine/groundtruth';
import { coresAvailable, percentile } from '../engine/measure';
import { RestClient, makeClient, runConcurrent } from './client';
import { QuiverServer, ServerCpu, cpuDelta } from './server';

const COLLECTION = 'bench';
const WARMUP_QUERIES = 200;

export const VARIANTS = ['none', 'api-key', 'jwt', 'jwt-uncached', 'jwt-value-exists', 'jwt-value-exists-unindexed'] as const;
export type VariantKey = (typeof VARIANTS)[number];

const VARIANT_LABEL: Record<VariantKey, string> = {
  none: 'no auth (server without keys)',
  'api-key': 'api key (`api-key` header)',
  jwt: 'JWT `r` on the collection (Bearer, same token)',
  'jwt-uncached': 'JWT, a new token every request (signature checked each time)',
  'jwt-value-exists': 'JWT + `value_exists` (indexed keyword field)',
  'jwt-value-exists-unindexed': 'JWT + `value_exists` (field without payload index)',
};

export interface AuthBenchOptions {
  n: number;
  queries: number;
  ef: number;
  concurrency: number[];
  reps: number;
  /** Untimed queries sent to the same server with the same credentials right before each timed pass. */
  prewarm: number;
  variants: VariantKey[];
  /** optimizers_config.indexing_threshold (KB) of the collection: low, so every point ends up in the HNSW graph. */
  indexingThresholdKb: number;
  client: 'raw' | 'http';
  dataDir: string;
  resultsDir: string;
  tag: string;
}

export const AUTH_USAGE = `usage: npm run bench:rest -- --auth [--n 20000] [--queries 1000] [--ef 64] [--concurrency 1,8] [--reps 10] [--prewarm 100]
         [--variants ${VARIANTS.join(',')}] [--indexing-threshold-kb 1000] [--client raw|http] [--tag NAME]`;

export function parseAuthArgs(argv: string[]): AuthBenchOptions {
  const o: AuthBenchOptions = {
    n: 20_000,
    queries: 1000,
    ef: 64,
    concurrency: [1, 8],
    reps: 10,
    prewarm: 100,
    variants: [...VARIANTS],
    indexingThresholdKb: 1000,
    client: 'raw',
    dataDir: path.join(REPO_ROOT, 'bench', 'data'),
    resultsDir: path.join(REPO_ROOT, 'bench', 'results'),
    tag: today(),
  };
  const ints = (v: string | undefined, flag: string, min = 1): number[] => {
    if (v === undefined || v.startsWith('--')) throw new Error(`${flag} needs a value`);
    return v
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)
      .map((s) => {
        const x = Number(s.replace(/_/g, ''));
        if (!Number.isInteger(x) || x < min) throw new Error(`${flag}: bad value ${s}`);
        return x;
      });
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const [flag, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const val = () => (inline !== undefined ? inline : argv[++i]);
    switch (flag) {
      case '--auth':
        break;
      case '--n':
        o.n = ints(val(), flag)[0];
        break;
      case '--queries':
        o.queries = ints(val(), flag)[0];
        break;
      case '--ef':
      case '--efs':
        o.ef = ints(val(), flag)[0];
        break;
      case '--concurrency':
        o.concurrency = ints(val(), flag);
        break;
      case '--reps':
        o.reps = ints(val(), flag)[0];
        break;
      case '--prewarm':
        o.prewarm = ints(val(), flag, 0)[0];
        break;
      case '--variants': {
        const vs = String(val())
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
        for (const v of vs) if (!(VARIANTS as readonly string[]).includes(v)) throw new Error(`--variants: unknown ${v} (known: ${VARIANTS.join(', ')})`);
        o.variants = VARIANTS.filter((v) => vs.includes(v));
        if (!o.variants.includes('none')) o.variants.unshift('none');
        break;
      }
      case '--indexing-threshold-kb':
        o.indexingThresholdKb = ints(val(), flag, 0)[0];
        break;
      case '--client': {
        const v = val();
        if (v !== 'raw' && v !== 'http') throw new Error('--client is raw or http');
        o.client = v;
        break;
      }
      case '--data-dir':
        o.dataDir = path.resolve(String(val()));
        break;
      case '--results-dir':
        o.resultsDir = path.resolve(String(val()));
        break;
      case '--tag':
        o.tag = String(val());
        break;
      case '-h':
      case '--help':
        console.log(AUTH_USAGE);
        process.exit(0);
        break;
      default:
        throw new Error(`unknown argument ${a}\n${AUTH_USAGE}`);
    }
  }
  if (o.n > 100_000) throw new Error('--n: at most 100000 (the points are a prefix of the 100k synthetic set)');
  if (o.queries > 1000) throw new Error('--queries: at most 1000 (the synthetic set has 1000 queries)');
  return o;
}

// -- helpers ------------------------------------------------------------------------------

const round = (x: number, d = 3) => Math.round(x * 10 ** d) / 10 ** d;

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

function gitHead(): string | null {
  try {
    return execFileSync('git', ['rev-parse', 'HEAD'], { cwd: REPO_ROOT, encoding: 'utf8' }).trim();
  } catch {
    return null;
  }
}

async function call<T>(client: RestClient, method: string, p: string, body?: unknown, headers?: Record<string, string>): Promise<T> {
  const r = await client.request(method, p, body === undefined ? undefined : Buffer.from(JSON.stringify(body)), headers);
  if (r.status !== 200) throw new Error(`${method} ${p}: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 500)}`);
  return (JSON.parse(r.body.toString('utf8')) as { result: T }).result;
}

interface CollectionState {
  status: string;
  pointsCount: number;
  indexedVectorsCount: number;
  segmentsCount: number;
}

async function collectionState(client: RestClient, headers?: Record<string, string>): Promise<CollectionState> {
  const r = await call<{ status: string; points_count: number; indexed_vectors_count: number; segments_count: number }>(
    client,
    'GET',
    `/collections/${COLLECTION}`,
    undefined,
    headers,
  );
  return { status: r.status, pointsCount: r.points_count, indexedVectorsCount: r.indexed_vectors_count, segmentsCount: r.segments_count };
}

async function waitGreen(client: RestClient, timeoutSec: number, headers?: Record<string, string>): Promise<{ seconds: number; state: CollectionState }> {
  const t0 = performance.now();
  for (;;) {
    const state = await collectionState(client, headers);
    const seconds = (performance.now() - t0) / 1000;
    if (state.status === 'green') return { seconds, state };
    if (seconds > timeoutSec) throw new Error(`collection ${COLLECTION} still ${state.status} after ${timeoutSec} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** `{"points":[{"id":i,"vector":[...],"payload":{...}}, ...]}` per batch of 1000. */
function upsertBodies(base: Float32Array, dim: number, n: number): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < n; at += 1000) {
    const parts: string[] = [];
    for (let i = at; i < Math.min(n, at + 1000); i++) {
      const v = JSON.stringify(Array.from(base.subarray(i * dim, (i + 1) * dim)));
      parts.push(`{"id":${i},"vector":${v},"payload":{"user":"u${i}","user_raw":"u${i}"}}`);
    }
    out.push(Buffer.from(`{"points":[${parts.join(',')}]}`));
  }
  return out;
}

// -- credentials ----------------------------------------------------------------------------

interface Tokens {
  apiKey: string;
  /** Claims of the collection-scoped read token. */
  claims: Record<string, unknown>;
  jwt: string;
  valueExists: string;
  valueExistsUnindexed: string;
  /** The user named by the value_exists claims (an existing point's payload value). */
  lookupUser: string;
  expSeconds: number;
}

async function sign(secret: Uint8Array, claims: Record<string, unknown>, exp: number): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setExpirationTime(exp).sign(secret);
}

async function makeTokens(n: number): Promise<Tokens & { secret: Uint8Array }> {
  const apiKey = crypto.randomBytes(24).toString('base64url');
  const secret = new TextEncoder().encode(apiKey);
  const exp = Math.floor(Date.now() / 1000) + 6 * 3600;
  const claims = { sub: 'bench', access: [{ collection: COLLECTION, access: 'r' }] };
  const lookupUser = `u${Math.floor(n / 2) + 17}`;
  return {
    apiKey,
    secret,
    claims,
    expSeconds: exp,
    lookupUser,
    jwt: await sign(secret, claims, exp),
    valueExists: await sign(secret, { ...claims, value_exists: { collection: COLLECTION, matches: [{ key: 'user', value: lookupUser }] } }, exp),
    valueExistsUnindexed: await sign(secret, { ...claims, value_exists: { collection: COLLECTION, matches: [{ key: 'user_raw', value: lookupUser }] } }, exp),
  };
}

/** Headers of each request of one pass (index i), prebuilt before the timing. */
type HeaderFn = (i: number) => Record<string, string> | undefined;

// -- measurement --------------------------------------------------------------------------------

interface Pass {
  qps: number;
  latUs: Float64Array;
  ids: number[][];
  serverCpu: ServerCpu | null;
}

async function queryPass(client: RestClient, server: QuiverServer, bodies: Buffer[], concurrency: number, headers: HeaderFn): Promise<Pass> {
  const nq = bodies.length;
  const ids: number[][] = new Array(nq);
  const pathQ = `/collections/${COLLECTION}/points/query`;
  const c0 = server.cpu();
  const t = await runConcurrent(nq, concurrency, async (i) => {
    const r = await client.request('POST', pathQ, bodies[i], headers(i));
    if (r.status !== 200) throw new Error(`query: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 300)}`);
    const pts = (JSON.parse(r.body.toString('utf8')) as { result: { points: Array<{ id: number }> } }).result.points;
    ids[i] = pts.map((p) => p.id);
  });
  return { qps: nq / t.seconds, latUs: t.latUs, ids, serverCpu: cpuDelta(c0, server.cpu()) };
}

export interface AuthRow {
  variant: VariantKey;
  label: string;
  concurrency: number;
  /** Best pass. */
  qps: number;
  /** Best pass QPS / the no-auth best pass QPS at the same concurrency. */
  ratio: number;
  /** 1e6/QPS - 1e6/QPS(no auth): time added per request at this throughput, µs. */
  addedUsPerRequest: number;
  medianQps: number;
  /** Median pass QPS / the no-auth median pass QPS. */
  medianRatio: number;
  p50Us: number;
  p99Us: number;
  /** Server CPU over every timed pass of this variant, per request. */
  serverMainCpuUsPerRequest: number | null;
  serverOtherCpuUsPerRequest: number | null;
  recall: number;
  /** Queries of the best pass whose top-10 ids equal those of the no-auth best pass. */
  sameIdsAsNone: number;
  passes: number[];
}

export interface AuthResults {
  benchmark: 'rest-auth';
  tag: string;
  command: string;
  gitHead: string | null;
  startedAt: string;
  finishedAt: string;
  machine: Record<string, unknown>;
  params: {
    n: number;
    dim: number;
    queries: number;
    k: number;
    m: number;
    efConstruct: number;
    ef: number;
    concurrency: number[];
    reps: number;
    prewarm: number;
    variants: VariantKey[];
    indexingThresholdKb: number;
    client: string;
    warmupQueries: number;
  };
  dataset: { key: string; name: string; description: string; distance: string };
  load: { upsertSeconds: number; greenSeconds: number; state: CollectionState; restartGreenSeconds: { plain: number; auth: number }; stateAfterRestart: { plain: CollectionState; auth: CollectionState } };
  servers: { plain: Record<string, unknown>; auth: Record<string, unknown> };
  checks: Record<string, number>;
  tokens: { claims: Record<string, unknown>; valueExistsUser: string; alg: string; jwtBytes: number; apiKeyChars: number };
  rows: AuthRow[];
}

export async function runAuth(argv: string[], invokedAs: string): Promise<void> {
  const opts = parseAuthArgs(argv);
  const command = `${invokedAs}${argv.length ? ' ' + argv.join(' ') : ''}`;
  const started = new Date();
  console.log(
    `REST auth benchmark: ${opts.n.toLocaleString('en-US')} points x 128-d, ${opts.queries} queries, ef ${opts.ef}, ` +
      `concurrency ${opts.concurrency.join(',')}, best of ${opts.reps} interleaved passes; variants ${opts.variants.join(', ')}`,
  );
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

  // Data: a prefix of the engine benchmark's 100k synthetic set (see run.ts).
  const eopts = parseArgs([]);
  eopts.dataDir = opts.dataDir;
  const full = loadDataset('synthetic', eopts);
  if ('skipped' in full) throw new Error(`synthetic data set: ${full.skipped}`);
  const dim = full.dim;
  const ds: Dataset = { ...full, nBase: opts.n, nQuery: opts.queries, base: full.base.subarray(0, opts.n * dim), queries: full.queries.subarray(0, opts.queries * dim) };
  const space: MetricSpace = metricSpace(ds);
  const gt = await groundTruth(ds, space, K, opts.dataDir);
  console.log(`  data: ${ds.name} (${ds.distance}); ground truth ${gt.cached ? 'cached' : `computed in ${round(gt.seconds, 1)} s`}`);

  const tokens = await makeTokens(opts.n);

  // -- 1. load once -------------------------------------------------------------------------
  const loader = await QuiverServer.start({ nodeArgs: [], keepStorage: true, env: {} });
  const killLoader = () => loader.killNow();
  process.once('exit', killLoader);
  console.log(`  loader server: pid ${loader.pid}, ${loader.url}`);
  const lc = makeClient(opts.client, loader.url, 2);
  let upsertSeconds = 0;
  let green: { seconds: number; state: CollectionState };
  try {
    await call(lc, 'PUT', `/collections/${COLLECTION}`, {
      vectors: { size: dim, distance: 'Cosine' },
      hnsw_config: { m: M, ef_construct: EF_CONSTRUCT },
      optimizers_config: { indexing_threshold: opts.indexingThresholdKb },
    });
    const bodies = upsertBodies(ds.base, dim, opts.n);
    const t0 = performance.now();
    for (const b of bodies) {
      const r = await lc.request('PUT', `/collections/${COLLECTION}/points?wait=true`, b);
      if (r.status !== 200) throw new Error(`upsert: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 300)}`);
    }
    upsertSeconds = (performance.now() - t0) / 1000;
    await call(lc, 'PUT', `/collections/${COLLECTION}/index?wait=true`, { field_name: 'user', field_schema: 'keyword' });
    green = await waitGreen(lc, 3600);
    console.log(
      `  loaded ${opts.n} points (with payload) in ${round(upsertSeconds, 2)} s, keyword index on "user"; green ${round(green.seconds, 2)} s later: ` +
        `${green.state.indexedVectorsCount} indexed, ${green.state.segmentsCount} segment(s)`,
    );
  } finally {
    lc.close();
    await loader.stop();
    process.off('exit', killLoader);
  }
  const storage = path.join(loader.dir, 'storage');

  // -- 2. two servers on copies of that storage -----------------------------------------------
  const authEnv = { SERVICE__SERVICE__API_KEY: tokens.apiKey, SERVICE__SERVICE__JWT_RBAC: 'true' };
  let plain: QuiverServer | null = null;
  let auth: QuiverServer | null = null;
  const killAll = () => {
    plain?.killNow();
    auth?.killNow();
  };
  process.once('exit', killAll);
  try {
    plain = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {}, storageFrom: storage });
    auth = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: authEnv, storageFrom: storage });
  } finally {
    fs.rmSync(loader.dir, { recursive: true, force: true });
  }
  console.log(`  plain server: pid ${plain.pid}, ${plain.url}; auth server: pid ${auth.pid}, ${auth.url} (api key + jwt_rbac)`);
  const maxC = Math.max(...opts.concurrency);
  const plainClient = makeClient(opts.client, plain.url, maxC);
  const authClient = makeClient(opts.client, auth.url, maxC);
  const keyHeader = { 'api-key': tokens.apiKey };
  const results: AuthRow[] = [];
  try {
    const pg = await waitGreen(plainClient, 600);
    const ag = await waitGreen(authClient, 600, keyHeader);
    for (const [name, g] of [
      ['plain', pg],
      ['auth', ag],
    ] as const) {
      if (g.state.pointsCount !== opts.n) throw new Error(`${name} server: points_count ${g.state.pointsCount} after restart, expected ${opts.n}`);
    }
    console.log(`  after restart: plain ${pg.state.indexedVectorsCount} indexed / ${pg.state.segmentsCount} segment(s); auth ${ag.state.indexedVectorsCount} / ${ag.state.segmentsCount}`);

    // -- sanity: the auth server really asks, and the tokens really work -----------------------
    const qBodies = Array.from({ length: opts.queries }, (_, i) =>
      Buffer.from(`{"query":${JSON.stringify(Array.from(ds.queries.subarray(i * dim, (i + 1) * dim)))},"limit":${K},"params":{"hnsw_ef":${opts.ef}}}`),
    );
    const qPath = `/collections/${COLLECTION}/points/query`;
    const status = async (headers?: Record<string, string>) => (await authClient.request('POST', qPath, qBodies[0], headers)).status;
    const badSecret = new TextEncoder().encode(tokens.apiKey + 'x');
    const checks: Record<string, number> = {
      noCredentials: await status(),
      wrongApiKey: await status({ 'api-key': 'not-the-key' }),
      apiKey: await status(keyHeader),
      jwt: await status({ authorization: `Bearer ${tokens.jwt}` }),
      jwtBadSignature: await status({ authorization: `Bearer ${await sign(badSecret, tokens.claims, tokens.expSeconds)}` }),
      jwtOtherCollection: await status({ authorization: `Bearer ${await sign(tokens.secret, { access: [{ collection: 'other', access: 'r' }] }, tokens.expSeconds)}` }),
      jwtValueExists: await status({ authorization: `Bearer ${tokens.valueExists}` }),
      jwtValueExistsNoMatch: await status({
        authorization: `Bearer ${await sign(tokens.secret, { ...tokens.claims, value_exists: { collection: COLLECTION, matches: [{ key: 'user', value: 'nobody' }] } }, tokens.expSeconds)}`,
      }),
      jwtValueExistsUnindexed: await status({ authorization: `Bearer ${tokens.valueExistsUnindexed}` }),
      plainNoCredentials: (await plainClient.request('POST', qPath, qBodies[0])).status,
    };
    const expect: Record<string, number> = {
      noCredentials: 401,
      wrongApiKey: 401,
      apiKey: 200,
      jwt: 200,
      jwtBadSignature: 403,
      jwtOtherCollection: 403,
      jwtValueExists: 200,
      jwtValueExistsNoMatch: 401,
      jwtValueExistsUnindexed: 200,
      plainNoCredentials: 200,
    };
    for (const k of Object.keys(expect)) if (checks[k] !== expect[k]) throw new Error(`sanity check ${k}: HTTP ${checks[k]}, expected ${expect[k]}`);
    console.log(`  checks: ${Object.entries(checks).map(([k, v]) => `${k} ${v}`).join(', ')}`);

    // -- 3. the variants ---------------------------------------------------------------------------
    let freshSerial = 0;
    /** A distinct token per request (jti), signed before the pass. */
    const freshTokens = async (count: number): Promise<Array<Record<string, string>>> => {
      const out: Array<Record<string, string>> = new Array(count);
      for (let i = 0; i < count; i++) out[i] = { authorization: `Bearer ${await sign(tokens.secret, { ...tokens.claims, jti: `p${freshSerial++}` }, tokens.expSeconds)}` };
      return out;
    };
    const constant = (h: Record<string, string> | undefined): HeaderFn => () => h;
    const setup = async (v: VariantKey, count: number): Promise<{ client: RestClient; server: QuiverServer; headers: HeaderFn }> => {
      switch (v) {
        case 'none':
          return { client: plainClient, server: plain!, headers: constant(undefined) };
        case 'api-key':
          return { client: authClient, server: auth!, headers: constant(keyHeader) };
        case 'jwt':
          return { client: authClient, server: auth!, headers: constant({ authorization: `Bearer ${tokens.jwt}` }) };
        case 'jwt-uncached': {
          const hs = await freshTokens(count);
          return { client: authClient, server: auth!, headers: (i) => hs[i] };
        }
        case 'jwt-value-exists':
          return { client: authClient, server: auth!, headers: constant({ authorization: `Bearer ${tokens.valueExists}` }) };
        case 'jwt-value-exists-unindexed':
          return { client: authClient, server: auth!, headers: constant({ authorization: `Bearer ${tokens.valueExistsUnindexed}` }) };
      }
    };

    const warm = Math.min(opts.queries, WARMUP_QUERIES);
    for (const v of opts.variants) {
      const s = await setup(v, warm);
      await queryPass(s.client, s.server, qBodies.slice(0, warm), maxC, s.headers);
    }

    interface Acc {
      passes: Pass[];
      mainSec: number;
      otherSec: number;
      cpuKnown: boolean;
      requests: number;
    }
    const acc = new Map<string, Acc>();
    const keyOf = (v: VariantKey, c: number) => `${v}@${c}`;
    for (const v of opts.variants) for (const c of opts.concurrency) acc.set(keyOf(v, c), { passes: [], mainSec: 0, otherSec: 0, cpuKnown: true, requests: 0 });
    const tRun = performance.now();
    for (let rep = 0; rep < opts.reps; rep++) {
      const order = opts.variants.map((_, i) => opts.variants[(i + rep) % opts.variants.length]);
      const line: string[] = [];
      for (const c of opts.concurrency) {
        for (const v of order) {
          // The server not queried sits idle meanwhile, and V8 on an idle process may shrink its heap and
          // drop compiled code (without this the baseline read up to 2x slower in trial runs): a short untimed run first, so each timed pass starts warm (with
          // its own fresh tokens for jwt-uncached, so the timed pass's tokens are still unseen).
          if (opts.prewarm > 0) {
            const nw = Math.min(opts.prewarm, opts.queries);
            const w = await setup(v, nw);
            await queryPass(w.client, w.server, qBodies.slice(0, nw), c, w.headers);
          }
          const s = await setup(v, opts.queries);
          const p = await queryPass(s.client, s.server, qBodies, c, s.headers);
          const a = acc.get(keyOf(v, c))!;
          // Only the best pass's result ids are needed.
          const best = a.passes.reduce((m, x) => Math.max(m, x.qps), 0);
          a.passes.push(p.qps > best ? p : { ...p, ids: [] });
          a.requests += opts.queries;
          if (p.serverCpu) {
            a.mainSec += p.serverCpu.mainSec;
            a.otherSec += p.serverCpu.otherSec;
          } else a.cpuKnown = false;
          line.push(`${v}@${c} ${Math.round(p.qps)}`);
        }
      }
      console.log(`  rep ${rep + 1}/${opts.reps}: ${line.join(', ')}`);
    }
    console.log(`  timed passes took ${round((performance.now() - tRun) / 1000, 1)} s`);

    const median = (xs: number[]) => {
      const s = [...xs].sort((a, b) => a - b);
      return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    };
    for (const c of opts.concurrency) {
      const bestOf = (v: VariantKey) => acc.get(keyOf(v, c))!.passes.reduce((m, x) => (x.qps > m.qps ? x : m));
      const none = bestOf('none');
      const noneMedian = median(acc.get(keyOf('none', c))!.passes.map((p) => p.qps));
      for (const v of opts.variants) {
        const a = acc.get(keyOf(v, c))!;
        const b = bestOf(v);
        const med = median(a.passes.map((p) => p.qps));
        let same = 0;
        for (let i = 0; i < opts.queries; i++) if (b.ids[i].length === none.ids[i].length && b.ids[i].every((id, j) => id === none.ids[i][j])) same++;
        results.push({
          variant: v,
          label: VARIANT_LABEL[v],
          concurrency: c,
          qps: Math.round(b.qps),
          ratio: round(b.qps / none.qps, 3),
          addedUsPerRequest: round(1e6 / b.qps - 1e6 / none.qps, 1),
          medianQps: Math.round(med),
          medianRatio: round(med / noneMedian, 3),
          p50Us: Math.round(percentile(b.latUs, 50)),
          p99Us: Math.round(percentile(b.latUs, 99)),
          serverMainCpuUsPerRequest: a.cpuKnown ? round((a.mainSec / a.requests) * 1e6, 1) : null,
          serverOtherCpuUsPerRequest: a.cpuKnown ? round((a.otherSec / a.requests) * 1e6, 1) : null,
          recall: round(recallAtK(space, gt, b.ids, K), 4),
          sameIdsAsNone: same,
          passes: a.passes.map((p) => Math.round(p.qps)),
        });
      }
    }
    for (const r of results) {
      console.log(
        `  c=${r.concurrency} ${r.variant}: ${r.qps.toLocaleString('en-US')} QPS (x${r.ratio.toFixed(3)}, ${r.addedUsPerRequest >= 0 ? '+' : ''}${r.addedUsPerRequest} µs/request; median x${r.medianRatio.toFixed(3)}), ` +
          `p50 ${r.p50Us} µs, p99 ${r.p99Us} µs, server CPU µs/request main ${r.serverMainCpuUsPerRequest ?? '–'} other ${r.serverOtherCpuUsPerRequest ?? '–'}, recall ${r.recall}, same ids ${r.sameIdsAsNone}/${opts.queries}`,
      );
    }

    machine.loadAverageAtEnd = os.loadavg().map((x) => round(x, 2));
    machine.coresAvailableAtEnd = round(await coresAvailable(), 2);
    plainClient.close();
    authClient.close();
    const plainRss = plain.rss();
    const authRss = auth.rss();
    const plainStop = await plain.stop();
    const authStop = await auth.stop();
    process.off('exit', killAll);

    const envCommon =
      'SERVICE__SERVICE__HTTP_PORT=<free port> SERVICE__SERVICE__HOST=127.0.0.1 SERVICE__STORAGE__STORAGE_PATH=<temp dir>/storage (a copy of the loader\'s) SERVICE__LOG_LEVEL=WARN SERVICE__TELEMETRY_DISABLED=true';
    const out: AuthResults = {
      benchmark: 'rest-auth',
      tag: opts.tag,
      command,
      gitHead: gitHead(),
      startedAt: started.toISOString(),
      finishedAt: new Date().toISOString(),
      machine,
      params: {
        n: opts.n,
        dim,
        queries: opts.queries,
        k: K,
        m: M,
        efConstruct: EF_CONSTRUCT,
        ef: opts.ef,
        concurrency: opts.concurrency,
        reps: opts.reps,
        prewarm: opts.prewarm,
        variants: opts.variants,
        indexingThresholdKb: opts.indexingThresholdKb,
        client:
          opts.client === 'raw'
            ? 'keep-alive TCP connections, one per request in flight, HTTP/1.1 written and read directly (bench/rest/client.ts RawClient), bodies and headers prebuilt'
            : `node:http keep-alive agent (Node ${process.version}), bodies and headers prebuilt`,
        warmupQueries: warm,
      },
      dataset: { key: ds.key, name: ds.name, description: ds.description, distance: ds.distance },
      load: {
        upsertSeconds: round(upsertSeconds, 2),
        greenSeconds: round(green.seconds, 2),
        state: green.state,
        restartGreenSeconds: { plain: round(pg.seconds, 2), auth: round(ag.seconds, 2) },
        stateAfterRestart: { plain: pg.state, auth: ag.state },
      },
      servers: {
        plain: { command: 'node bin/quiver', env: envCommon, rssAtEndMiB: plainRss === null ? null : Math.round(plainRss / 2 ** 20), exitCode: plainStop.code },
        auth: {
          command: 'node bin/quiver',
          env: `${envCommon} SERVICE__SERVICE__API_KEY=<random 32 chars> SERVICE__SERVICE__JWT_RBAC=true`,
          rssAtEndMiB: authRss === null ? null : Math.round(authRss / 2 ** 20),
          exitCode: authStop.code,
        },
      },
      checks,
      tokens: { claims: tokens.claims, valueExistsUser: tokens.lookupUser, alg: 'HS256', jwtBytes: tokens.jwt.length, apiKeyChars: tokens.apiKey.length },
      rows: results,
    };
    fs.mkdirSync(opts.resultsDir, { recursive: true });
    const jsonPath = path.join(opts.resultsDir, `rest-auth-${opts.tag}.json`);
    const mdPath = path.join(opts.resultsDir, `rest-auth-${opts.tag}.md`);
    fs.writeFileSync(jsonPath, JSON.stringify(out, null, 2) + '\n');
    const md = authMarkdown(out);
    fs.writeFileSync(mdPath, md);
    console.log('');
    console.log(md);
    console.log(`wrote ${path.relative(process.cwd(), jsonPath)} and ${path.relative(process.cwd(), mdPath)}`);
  } catch (e) {
    plainClient.close();
    authClient.close();
    const tails = [...plain.logTail().map((l) => `plain: ${l}`), ...auth.logTail().map((l) => `auth: ${l}`)];
    await plain.stop(5000).catch(() => undefined);
    await auth.stop(5000).catch(() => undefined);
    process.off('exit', killAll);
    if (tails.length) console.error(`server log tails:\n${tails.join('\n')}`);
    throw e;
  }
}

// -- report -------------------------------------------------------------------------------------

const int = (x: number) => Math.round(x).toLocaleString('en-US');

export function authMarkdown(r: AuthResults): string {
  const p = r.params;
  const m = r.machine as { cores: number; cpuModel: string; cpuFlags: string; memoryGiB: number; kernel: string; node: string; loadAverageAtStart: number[]; loadAverageAtEnd: number[]; coresAvailableAtStart: number; coresAvailableAtEnd: number };
  const L: string[] = [];
  L.push(`# REST benchmark: the cost of authentication per request (${r.tag})`);
  L.push('');
  L.push('```sh');
  L.push(r.command);
  L.push('```');
  L.push('');
  L.push(
    `${int(p.n)} points × ${p.dim}-d (${r.dataset.name}, ${r.dataset.distance}; a prefix of the 100k set, smaller than the main REST benchmark's 100k to keep the run short), ` +
      `payload \`{"user": "u<i>", "user_raw": "u<i>"}\` with a keyword index on \`user\` only; ${p.queries} queries, k=${p.k}, \`hnsw_ef\` ${p.ef}, m=${p.m}, ef_construct=${p.efConstruct}, ` +
      `indexing_threshold ${p.indexingThresholdKb} KB (every point in the HNSW graph: ${r.load.stateAfterRestart.auth.indexedVectorsCount.toLocaleString('en-US')} indexed, ${r.load.stateAfterRestart.auth.segmentsCount} segment(s)).`,
  );
  L.push('');
  L.push(
    `The points were loaded once into a server without keys (${r.load.upsertSeconds} s of upserts, green ${r.load.greenSeconds} s later), which was then stopped; two servers started on copies of its storage, so both answer from the same HNSW graph: ` +
      `**plain** (no keys) and **auth** (\`SERVICE__SERVICE__API_KEY=<32 random chars>\`, \`SERVICE__SERVICE__JWT_RBAC=true\`; audit log off, the default). Both ran throughout; each pass queries one of them.`,
  );
  L.push('');
  L.push(`Client: ${p.client}. Machine: ${m.cores} cores (${m.cpuModel}; ${m.cpuFlags}), ${m.memoryGiB} GiB, Linux ${m.kernel}, Node ${m.node}. Load average ${m.loadAverageAtStart.join(' ')} at start, ${m.loadAverageAtEnd.join(' ')} at end; cores this process could get ≈ ${m.coresAvailableAtStart} at start, ${m.coresAvailableAtEnd} at end. Client and both servers share these cores, and the machine is shared: every figure is noisy.`);
  L.push('');
  L.push('Variants (all `POST /collections/bench/points/query` with the same bodies):');
  L.push('');
  L.push('| variant | server | credentials |');
  L.push('|---|---|---|');
  const cred: Record<VariantKey, string> = {
    none: 'none',
    'api-key': '`api-key: <key>` (the server compares SHA-256 digests in constant time)',
    jwt: `\`Authorization: Bearer <jwt>\`, HS256 (jose), claims \`${JSON.stringify(r.tokens.claims)}\` + \`exp\`; the same token every request (${r.tokens.jwtBytes} chars; the server caches verified tokens' claims)`,
    'jwt-uncached': 'as `jwt`, plus a distinct `jti` per request (tokens signed before the pass), so every request pays the HMAC check and the JWS decode',
    'jwt-value-exists': `as \`jwt\`, plus \`value_exists: {collection: bench, matches: [{key: user, value: ${r.tokens.valueExistsUser}}]}\`: a count through the keyword payload index on every request`,
    'jwt-value-exists-unindexed': 'as the previous one on `user_raw`, which has no payload index: the count scans every point\'s payload on every request',
  };
  for (const v of p.variants) L.push(`| \`${v}\` | ${v === 'none' ? 'plain' : 'auth'} | ${cred[v]} |`);
  L.push('');
  L.push(
    `Sanity checks before timing (HTTP status): ${Object.entries(r.checks)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}.`,
  );
  L.push('');
  L.push('## Query throughput');
  L.push('');
  L.push(
    `Best of ${p.reps} passes over the ${p.queries} queries per (variant, in flight), after a ${p.warmupQueries}-query warm-up per variant, each pass preceded by ${p.prewarm} untimed queries with the same server, credentials and concurrency (the server not in use idles meanwhile, and an idle V8 may shrink its heap and drop compiled code; without this the baseline's passes read up to 2× slower in trial runs); passes interleaved (rep → in flight → variant, the variant order rotated every rep). ` +
      `"ratio" is QPS / no-auth QPS at the same concurrency; "+µs/request" is 1e6/QPS − 1e6/QPS(no auth), the time each request added at that throughput. ` +
      `The median columns use the median pass instead of the best. Latency percentiles are of the best pass. Server CPU µs/request is summed over all ${p.reps} passes of the variant (main thread / all other threads, from /proc in 10 ms ticks: ±${round(10_000 / (p.reps * p.queries), 1)} µs of rounding, but differences of ≈ 20 µs between the two servers are within their run-to-run spread, so small CPU differences are best read among the auth-server variants). ` +
      `"same ids": queries whose top-${p.k} ids equal the no-auth run's.`,
  );
  for (const c of p.concurrency) {
    L.push('');
    L.push(`### ${c} request${c > 1 ? 's' : ''} in flight`);
    L.push('');
    L.push('| variant | QPS | ratio | +µs/request | median QPS | median ratio | p50 µs | p99 µs | server CPU µs/request main / other | recall@10 | same ids | QPS of each pass |');
    L.push('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|');
    for (const row of r.rows.filter((x) => x.concurrency === c)) {
      const plus = row.variant === 'none' ? '–' : `${row.addedUsPerRequest >= 0 ? '+' : ''}${row.addedUsPerRequest}`;
      const cpu = row.serverMainCpuUsPerRequest === null ? '–' : `${row.serverMainCpuUsPerRequest} / ${row.serverOtherCpuUsPerRequest}`;
      L.push(
        `| \`${row.variant}\` | ${int(row.qps)} | ${row.ratio.toFixed(3)} | ${plus} | ${int(row.medianQps)} | ${row.medianRatio.toFixed(3)} | ${int(row.p50Us)} | ${int(row.p99Us)} | ${cpu} | ${row.recall.toFixed(4)} | ${row.sameIdsAsNone}/${p.queries} | ${row.passes.map(int).join(', ')} |`,
      );
    }
  }
  L.push('');
  L.push(`Git HEAD at the run: ${r.gitHead ?? 'unknown'} (the working tree may hold other uncommitted changes). Started ${r.startedAt}, finished ${r.finishedAt}.`);
  L.push('');
  return L.join('\n');
}

if (require.main === module) {
  runAuth(process.argv.slice(2), 'node dist/bench/rest/auth.js').catch((e) => {
    console.error(`bench:rest --auth failed: ${e instanceof Error && e.stack ? e.stack : errMsg(e)}`);
    process.exit(1);
  });
}
