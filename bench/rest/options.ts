/**
 * Command-line options of the REST benchmark (`npm run bench:rest -- ...`).
 */
import * as path from 'path';
import { REPO_ROOT, today } from '../engine/common';
import { GRPC_VARIANTS, type GrpcVariant } from './grpc';

export type FloatFormat = 'full' | 'short';

export interface RestOptions {
  quick: boolean;
  /** Points upserted (a prefix of the 100k synthetic base set, or with `--points` of the 1M `scale` set). */
  n: number;
  /**
   * `--points N`: N points (≤ 1,000,000) from the engine benchmark's `scale` set (1M × 128-d,
   * 1000 clusters; generated and cached on first use), bodies built batch by batch; the
   * run is the batch-1000 one-client upsert and the REST/engine/wrk query rows (no upsert
   * variants, gRPC or h2load rows). null: the default run on the 100k synthetic set.
   */
  points: number | null;
  /** Queries (a prefix of the set's 1000 queries). */
  queries: number;
  efs: number[];
  /** Requests in flight for the REST query runs. */
  concurrency: number[];
  /** Outstanding async searches for the in-process engine runs. */
  engineConcurrency: number[];
  /** Timed passes over the queries per (mode, concurrency, ef); the fastest counts. */
  reps: number;
  /** Concurrent clients of the second batch-1000 upsert run. */
  upsertClients: number;
  /** Also run the 2-client batch-1000 and the batch-100 upserts. */
  upsertVariants: boolean;
  /** Run the query phase (REST and in-process engine). */
  query: boolean;
  /** How vector numbers are written in JSON bodies. */
  floatFormat: FloatFormat;
  /** optimizers_config.indexing_threshold (KB) of the benchmark collections; null = server default. */
  indexingThresholdKb: number | null;
  /** Build threads of the in-process engine index. */
  engineThreads: number;
  loader: string;
  dataDir: string;
  resultsDir: string;
  tag: string;
  /** Run the server with --cpu-prof into this directory and summarise the profile per phase. */
  cpuProfDir: string | null;
  /** Sampling interval of that profile, microseconds. */
  cpuProfIntervalUs: number;
  /** HTTP client: `raw` (keep-alive sockets, minimal parsing) or `http` (node:http agent). */
  client: 'raw' | 'http';
  keepStorage: boolean;
  /** Also drive the query runs with wrk (bench/rest/wrk.ts) when it is installed. */
  wrk: boolean;
  /** Length of each wrk pass. */
  wrkSeconds: number;
  /**
   * Length of each timed pass of the in-process engine, seconds (whole cycles over the
   * queries, at least one); null: as long as a wrk pass when wrk runs, else one cycle.
   * The engine's best pass is compared with wrk's best: passes of equal length keep a
   * short pass's luck (a fast moment of a noisy machine) out of the ratio.
   */
  enginePassSeconds: number | null;
  /** Also measure the public gRPC API (bench/rest/grpc.ts): upserts and queries beside REST's. */
  grpc: boolean;
  /** gRPC clients of the query runs, `<lib>:<channels>` (bench/rest/grpc.ts); at concurrency 1 one per library runs. */
  grpcClients: GrpcVariant[];
  /** Also drive REST and gRPC queries with h2load (bench/rest/h2load.ts) when it is installed; passes as long as wrk's. */
  h2load: boolean;
  /** Engine backend of the server and the in-process engine (QUIVER_ENGINE); null: the loader's default (native). */
  backend: 'native' | 'wasm' | null;
}

export const USAGE = `usage: npm run bench:rest -- [--quick] [--n 100000 | --points 1000000] [--queries 1000] [--efs 64,128]
         [--concurrency 1,8] [--engine-concurrency 1,2,8] [--reps 3] [--upsert-clients 2] [--no-upsert-variants]
         [--no-query] [--float-format full|short] [--indexing-threshold-kb N] [--engine-threads 2]
         [--backend native|wasm] [--client raw|http] [--no-wrk] [--wrk-seconds 2] [--engine-pass-seconds S] [--no-h2load] [--no-grpc] [--grpc-clients grpc-js:per-worker,grpc-js:shared,h2:per-worker,h2:shared] [--server-cpu-prof DIR] [--server-cpu-prof-interval 250] [--keep-storage] [--loader path/to/bindings/index] [--tag NAME]
       npm run bench:rest -- --backends native,wasm [...]   (the run once per backend, then both side by side: bench/rest/backends.ts)
       npm run bench:rest -- --auth [...]   (authentication cost per request: bench/rest/auth.ts, --auth --help)`;

export function parseRestArgs(argv: string[]): RestOptions {
  const o: RestOptions = {
    quick: false,
    n: 100_000,
    points: null,
    queries: 1000,
    efs: [64, 128],
    concurrency: [1, 8],
    engineConcurrency: [1, 2, 8],
    reps: 3,
    upsertClients: 2,
    upsertVariants: true,
    query: true,
    floatFormat: 'full',
    indexingThresholdKb: null,
    engineThreads: 2,
    loader: path.resolve(__dirname, '..', '..', 'bindings', 'index'),
    dataDir: path.join(REPO_ROOT, 'bench', 'data'),
    resultsDir: path.join(REPO_ROOT, 'bench', 'results'),
    tag: today(),
    cpuProfDir: null,
    cpuProfIntervalUs: 250,
    client: 'raw',
    keepStorage: false,
    wrk: true,
    wrkSeconds: 2,
    enginePassSeconds: null,
    grpc: true,
    grpcClients: [...GRPC_VARIANTS],
    h2load: true,
    backend: null,
  };
  const set = new Set<string>();
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
    set.add(flag);
    switch (flag) {
      case '--quick':
        o.quick = true;
        break;
      case '--n':
        o.n = ints(val(), flag)[0];
        break;
      case '--points':
        o.points = ints(val(), flag)[0];
        if (o.points > 1_000_000) throw new Error('--points: at most 1000000 (the points are a prefix of the 1M scale set)');
        break;
      case '--queries':
        o.queries = ints(val(), flag)[0];
        break;
      case '--ef':
      case '--efs':
        o.efs = ints(val(), flag);
        break;
      case '--concurrency':
        o.concurrency = ints(val(), flag);
        break;
      case '--engine-concurrency':
        o.engineConcurrency = ints(val(), flag);
        break;
      case '--reps':
        o.reps = ints(val(), flag)[0];
        break;
      case '--upsert-clients':
        o.upsertClients = ints(val(), flag)[0];
        break;
      case '--no-upsert-variants':
        o.upsertVariants = false;
        break;
      case '--no-query':
        o.query = false;
        break;
      case '--float-format': {
        const v = val();
        if (v !== 'full' && v !== 'short') throw new Error('--float-format is full or short');
        o.floatFormat = v;
        break;
      }
      case '--indexing-threshold-kb':
        o.indexingThresholdKb = ints(val(), flag, 0)[0];
        break;
      case '--engine-threads':
        o.engineThreads = ints(val(), flag)[0];
        break;
      case '--server-cpu-prof':
        o.cpuProfDir = path.resolve(String(val()));
        break;
      case '--server-cpu-prof-interval':
        o.cpuProfIntervalUs = ints(val(), flag)[0];
        break;
      case '--client': {
        const v = val();
        if (v !== 'raw' && v !== 'http') throw new Error('--client is raw or http');
        o.client = v;
        break;
      }
      case '--keep-storage':
        o.keepStorage = true;
        break;
      case '--no-wrk':
        o.wrk = false;
        break;
      case '--wrk-seconds':
        o.wrkSeconds = ints(val(), flag)[0];
        break;
      case '--engine-pass-seconds': {
        const text = val();
        const v = Number(text);
        if (text.trim() === '' || !Number.isFinite(v) || v < 0 || v > 60) throw new Error('--engine-pass-seconds: a number of seconds from 0 (one cycle over the queries) to 60');
        o.enginePassSeconds = v;
        break;
      }
      case '--no-h2load':
        o.h2load = false;
        break;
      case '--no-grpc':
        o.grpc = false;
        break;
      case '--grpc-clients': {
        const v = String(val())
          .split(',')
          .map((x) => x.trim())
          .filter(Boolean);
        if (v.length === 0 || v.some((x) => !(GRPC_VARIANTS as string[]).includes(x))) throw new Error(`--grpc-clients: a list of ${GRPC_VARIANTS.join(', ')}`);
        o.grpcClients = [...new Set(v)] as GrpcVariant[];
        break;
      }
      case '--loader':
        o.loader = path.resolve(String(val()));
        break;
      case '--data-dir':
        o.dataDir = path.resolve(String(val()));
        break;
      case '--results-dir':
        o.resultsDir = path.resolve(String(val()));
        break;
      case '--backend': {
        const v = String(val());
        if (v !== 'native' && v !== 'wasm') throw new Error(`--backend: native or wasm, got ${v}`);
        o.backend = v;
        break;
      }
      case '--tag':
        o.tag = String(val());
        break;
      case '-h':
      case '--help':
        console.log(USAGE);
        process.exit(0);
        break;
      default:
        throw new Error(`unknown argument ${a}\n${USAGE}`);
    }
  }
  if (o.quick) {
    if (!set.has('--n')) o.n = 20_000;
    if (!set.has('--queries')) o.queries = 200;
    if (!set.has('--reps')) o.reps = 2;
    if (!set.has('--tag')) o.tag = `${o.tag}-quick`;
  }
  if (o.points !== null) {
    if (set.has('--n') || o.quick) throw new Error('--points replaces --n and --quick');
    for (const f of ['--upsert-clients', '--grpc-clients']) if (set.has(f)) throw new Error(`--points runs no upsert variants and no gRPC rows: ${f} does not apply`);
    o.n = o.points;
    // One copy of the upsert bodies (~2.5 KB a point) is all the client holds: the
    // variants and the gRPC twins would each need another.
    o.upsertVariants = false;
    o.grpc = false;
    o.h2load = false;
  }
  if (o.points === null && o.n > 100_000) throw new Error('--n: at most 100000 (the points are a prefix of the 100k synthetic set; --points N takes up to 1M of the scale set)');
  if (o.queries > 1000) throw new Error('--queries: at most 1000 (the synthetic set has 1000 queries)');
  return o;
}
