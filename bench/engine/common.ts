/**
 * Shared types and helpers of the engine benchmark harness.
 */
import * as path from 'path';

export type BenchDistance = 'Cosine' | 'Euclid';

export interface Dataset {
  key: string;
  name: string;
  description: string;
  source: string;
  dim: number;
  distance: BenchDistance;
  nBase: number;
  nQuery: number;
  /** nBase * dim, row-major. */
  base: Float32Array;
  /** nQuery * dim, row-major. */
  queries: Float32Array;
  /** Seconds spent preparing the data this run (0 when it came from the cache). */
  prepareSeconds: number;
  /** Seconds the original preparation took (from the cache's meta), when known. */
  originalPrepareSeconds?: number;
  cached: boolean;
  /** The cache file the vectors came from (float32 LE, base rows then query rows), when there is one. */
  file?: string;
}

export interface GroundTruth {
  k: number;
  /** nQuery * k base indices, best first. */
  ids: Int32Array;
  /** nQuery * k distances (smaller is closer; Cosine uses 1 - cos), best first. */
  dists: Float64Array;
  seconds: number;
  cached: boolean;
  workers: number;
}

/** `sparse`: the sparse-vector rows (bench/engine/sparse.ts), run on the native engine. */
export const ALL_DATASETS = ['mnist', 'embeddings', 'synthetic', 'sparse'] as const;
/**
 * Data sets run only when named in --datasets: `ondisk768`, the clustered 768-d set of
 * `npm run bench:ondisk` (bench/ondisk/data.ts), 100,000 base vectors and 1000 queries.
 */
export const EXTRA_DATASETS = ['ondisk768'] as const;
export const ALL_LIBS = [
  'quiver-native',
  'quiver-native-int8',
  'quiver-native-binary',
  'quiver-wasm',
  'hnswlib',
  'usearch',
  // Anchors, run in a Python child process (bench/engine/anchors.py):
  'faiss',
  'hnswlib-native',
] as const;
export type LibKey = (typeof ALL_LIBS)[number];

export const M = 16;
export const EF_CONSTRUCT = 100;
/**
 * The graph parameters every library of a run is built with. `seed` sets the level
 * draws of Quiver and hnswlib (node and native); FAISS and usearch take no seed (their
 * levels come from their own fixed generators), so it does not change their graphs.
 */
export interface HnswParams {
  m: number;
  efConstruct: number;
  seed: number;
}
export const DEFAULT_HNSW: HnswParams = { m: M, efConstruct: EF_CONSTRUCT, seed: 42 };
export const K = 10;
export const EFS = [16, 32, 64, 128, 256];

export interface Options {
  quick: boolean;
  datasets: string[];
  libs: LibKey[];
  efs: number[];
  /** Threads for the main (multi-threaded) build of Quiver and usearch. */
  buildThreads: number;
  /** Also build Quiver native and usearch with 1 thread (build-only rows). */
  singleThreadBuilds: boolean;
  /** Module path of the Quiver loader (default: ../../bindings/index relative to this file). */
  loader: string;
  dataDir: string;
  resultsDir: string;
  /** Suffix for result file names (default: today's date). */
  tag: string;
  python: string;
  /** Allow `pip install` of the embeddings package and of the anchors (scripts/install-bench-anchors.sh) when missing. */
  pipInstall: boolean;
  /** Run the event-loop lag probe (100k-point Quiver native build). */
  eventLoop: boolean;
  /** Timed passes over the queries per (library, ef); the fastest counts. */
  reps: number;
  /** `--m` / `--ef-construct` / `--seed` (default M, EF_CONSTRUCT, 42), the same for every library. */
  hnsw: HnswParams;
  /**
   * `--scale`: the 1M-point run (bench/engine/scale.ts): the `scale` data set only, each
   * library in its own child process (so process RSS is its own), builds with
   * `buildThreads` threads for every library (FAISS too, through OpenMP).
   */
  scale: boolean;
  /** Base vectors of the `scale` set (default 1,000,000). */
  scaleN: number;
  /** `--scale`: how many times each library is built, alternating libraries (round 1 also queries). */
  buildRounds: number;
}

export const REPO_ROOT = path.resolve(__dirname, '..', '..', '..');

export function today(): string {
  const d = new Date();
  const p = (n: number) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
}

export function parseArgs(argv: string[]): Options {
  const o: Options = {
    quick: false,
    datasets: [...ALL_DATASETS],
    libs: [...ALL_LIBS],
    efs: [...EFS],
    buildThreads: 2,
    singleThreadBuilds: true,
    loader: path.resolve(__dirname, '..', '..', 'bindings', 'index'),
    dataDir: path.join(REPO_ROOT, 'bench', 'data'),
    resultsDir: path.join(REPO_ROOT, 'bench', 'results'),
    tag: today(),
    python: process.env.PYTHON || 'python3',
    pipInstall: true,
    eventLoop: true,
    reps: 3,
    hnsw: { ...DEFAULT_HNSW },
    scale: false,
    scaleN: 1_000_000,
    buildRounds: 1,
  };
  let singleSet = false;
  let libsSet = false;
  let repsSet = false;
  const list = (v: string | undefined, flag: string): string[] => {
    if (v === undefined || v.startsWith('--')) throw new Error(`${flag} needs a value`);
    return v.split(',').map((s) => s.trim()).filter(Boolean);
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const [flag, inline] = a.includes('=') ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)] : [a, undefined];
    const val = () => (inline !== undefined ? inline : argv[++i]);
    switch (flag) {
      case '--quick':
        o.quick = true;
        break;
      case '--datasets': {
        const ds = list(val(), flag);
        const known: readonly string[] = [...ALL_DATASETS, ...EXTRA_DATASETS];
        for (const d of ds) if (!known.includes(d)) throw new Error(`unknown dataset ${d} (known: ${known.join(',')})`);
        o.datasets = ds;
        break;
      }
      case '--libs': {
        const ls = list(val(), flag);
        const out: LibKey[] = [];
        for (const l of ls) {
          // Short aliases.
          const expanded =
            l === 'quiver' ? ['quiver-native', 'quiver-native-int8', 'quiver-native-binary', 'quiver-wasm']
            : l === 'peers' ? ['hnswlib', 'usearch']
            : l === 'anchors' ? ['faiss', 'hnswlib-native']
            : [l];
          for (const e of expanded) {
            if (!(ALL_LIBS as readonly string[]).includes(e)) throw new Error(`unknown lib ${e} (known: ${ALL_LIBS.join(',')}, quiver, peers, anchors)`);
            if (!out.includes(e as LibKey)) out.push(e as LibKey);
          }
        }
        o.libs = out;
        libsSet = true;
        break;
      }
      case '--ef':
      case '--efs':
        o.efs = list(val(), flag).map((s) => {
          const n = Number(s);
          if (!Number.isInteger(n) || n < 1) throw new Error(`bad ef ${s}`);
          return n;
        });
        break;
      case '--threads':
        o.buildThreads = Number(val());
        if (!Number.isInteger(o.buildThreads) || o.buildThreads < 1) throw new Error('--threads must be a positive integer');
        break;
      case '--single-thread-builds':
        o.singleThreadBuilds = true;
        singleSet = true;
        break;
      case '--no-single-thread-builds':
        o.singleThreadBuilds = false;
        singleSet = true;
        break;
      case '--loader':
        o.loader = path.resolve(String(val()));
        break;
      case '--data-dir':
        o.dataDir = path.resolve(String(val()));
        break;
      case '--results-dir':
        o.resultsDir = path.resolve(String(val()));
        break;
      case '--tag':
        o.tag = String(val());
        break;
      case '--python':
        o.python = String(val());
        break;
      case '--no-pip':
        o.pipInstall = false;
        break;
      case '--reps':
        o.reps = Number(val());
        repsSet = true;
        if (!Number.isInteger(o.reps) || o.reps < 1) throw new Error('--reps must be a positive integer');
        break;
      case '--m':
      case '--ef-construct':
      case '--seed': {
        const v = Number(val());
        const min = flag === '--m' ? 2 : flag === '--ef-construct' ? 4 : 0;
        if (!Number.isSafeInteger(v) || v < min) throw new Error(`${flag} must be an integer >= ${min}`);
        if (flag === '--m') o.hnsw.m = v;
        else if (flag === '--ef-construct') o.hnsw.efConstruct = v;
        else o.hnsw.seed = v;
        break;
      }
      case '--no-eventloop':
        o.eventLoop = false;
        break;
      case '--scale':
        o.scale = true;
        break;
      case '--scale-n':
        o.scaleN = Number(val());
        if (!Number.isInteger(o.scaleN) || o.scaleN < 1000) throw new Error('--scale-n must be an integer >= 1000');
        break;
      case '--build-rounds':
        o.buildRounds = Number(val());
        if (!Number.isInteger(o.buildRounds) || o.buildRounds < 1) throw new Error('--build-rounds must be a positive integer');
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
  if (o.quick && !singleSet) o.singleThreadBuilds = false;
  if (o.quick && !repsSet) o.reps = 2;
  if (o.scale) {
    if (o.hnsw.m !== M || o.hnsw.efConstruct !== EF_CONSTRUCT || o.hnsw.seed !== DEFAULT_HNSW.seed) throw new Error('--scale builds with M, ef_construct and seed fixed (bench/engine/scale.ts); --m / --ef-construct / --seed are for the default run');
    if (o.quick) throw new Error('--scale and --quick do not go together (use --scale-n for a smaller scale run)');
    o.datasets = ['scale'];
    // The comparison: Quiver native against usearch and FAISS, all built with 2 threads.
    if (!libsSet) o.libs = ['quiver-native', 'usearch', 'faiss'];
    for (const l of o.libs) if (l === 'hnswlib') throw new Error('--scale: hnswlib-node is left out (it takes number[] vectors and builds on one thread; use hnswlib-native)');
    o.singleThreadBuilds = false;
    o.eventLoop = false;
  }
  return o;
}

export const USAGE = `usage: npm run bench:engine -- [--quick] [--datasets mnist,embeddings,synthetic,sparse,ondisk768]
         [--libs quiver-native,quiver-native-int8,quiver-native-binary,quiver-wasm,hnswlib,usearch,faiss,hnswlib-native | quiver | peers | anchors]
         [--efs 16,32,64,128,256] [--reps 3] [--m 16] [--ef-construct 100] [--seed 42] [--threads 2] [--[no-]single-thread-builds] [--no-eventloop]
         [--loader path/to/bindings/index] [--tag NAME] [--python python3] [--no-pip]
       npm run bench:engine -- --scale [--scale-n 1000000] [--build-rounds 2] [--libs quiver-native,usearch,faiss] [--threads 2] [--tag NAME]`;

/** The number after `name` in `argv` (`dflt` when absent); throws unless it is a number of at least `min`. For the small bench tools' flags. */
export function numberFlag(argv: readonly string[], name: string, dflt: number, min: number): number {
  const i = argv.indexOf(name);
  if (i < 0) return dflt;
  const text = argv[i + 1] ?? '';
  const v = Number(text);
  if (text.trim() === '' || !Number.isFinite(v) || v < min) throw new Error(`${name}: a number, at least ${min}`);
  return v;
}

/** mulberry32: small, fast, seeded PRNG with uniform output in [0, 1). */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Standard normal deviates from a uniform PRNG (Box-Muller). */
export function gaussian(rand: () => number): () => number {
  let spare: number | null = null;
  return () => {
    if (spare !== null) {
      const s = spare;
      spare = null;
      return s;
    }
    let u = 0;
    while (u === 0) u = rand();
    const v = rand();
    const r = Math.sqrt(-2 * Math.log(u));
    spare = r * Math.sin(2 * Math.PI * v);
    return r * Math.cos(2 * Math.PI * v);
  };
}

export function shuffleInPlace<T>(a: T[], rand: () => number): void {
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    const t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

export function nowSec(): number {
  return Number(process.hrtime.bigint()) / 1e9;
}

export function fmt(n: number | null | undefined, digits = 3): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  return n.toFixed(digits);
}

export function fmtInt(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n)) return '–';
  return Math.round(n).toLocaleString('en-US');
}

export function errMsg(e: unknown): string {
  if (e instanceof Error) return (e as NodeJS.ErrnoException).code ? `${(e as NodeJS.ErrnoException).code}: ${e.message}` : e.message;
  return String(e);
}

/** Copy rows [i*dim, (i+1)*dim) into their own Float32Arrays (a fresh buffer each). */
export function splitRows(flat: Float32Array, dim: number): Float32Array[] {
  const n = flat.length / dim;
  const rows: Float32Array[] = new Array(n);
  for (let i = 0; i < n; i++) rows[i] = flat.slice(i * dim, (i + 1) * dim);
  return rows;
}
