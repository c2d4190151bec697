/**
 * Exact brute-force ground truth (worker pool over all cores), cached in bench/data/,
 * and recall@k against it.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { Worker } from 'worker_threads';
import { Dataset, GroundTruth, nowSec } from './common';
import type { GtJob } from './gt-worker';

/** Prepared copies used for distance checks: normalised for Cosine, as-is for Euclid. */
export interface MetricSpace {
  metric: 'cos' | 'l2';
  dim: number;
  base: Float32Array;
  queries: Float32Array;
}

function normalised(src: Float32Array, dim: number, shared: boolean): Float32Array {
  const out = shared ? new Float32Array(new SharedArrayBuffer(src.byteLength)) : new Float32Array(src.length);
  const n = src.length / dim;
  for (let i = 0; i < n; i++) {
    let s = 0;
    for (let j = 0; j < dim; j++) s += src[i * dim + j] * src[i * dim + j];
    const inv = s > 0 ? 1 / Math.sqrt(s) : 0;
    for (let j = 0; j < dim; j++) out[i * dim + j] = src[i * dim + j] * inv;
  }
  return out;
}

function sharedCopy(src: Float32Array): Float32Array {
  const out = new Float32Array(new SharedArrayBuffer(src.byteLength));
  out.set(src);
  return out;
}

export function metricSpace(ds: Dataset): MetricSpace {
  const metric = ds.distance === 'Cosine' ? 'cos' : 'l2';
  return {
    metric,
    dim: ds.dim,
    base: metric === 'cos' ? normalised(ds.base, ds.dim, true) : sharedCopy(ds.base),
    queries: metric === 'cos' ? normalised(ds.queries, ds.dim, true) : sharedCopy(ds.queries),
  };
}

export function distance(space: MetricSpace, qi: number, bi: number): number {
  const { dim, base, queries } = space;
  let s = 0;
  if (space.metric === 'cos') {
    for (let j = 0; j < dim; j++) s += queries[qi * dim + j] * base[bi * dim + j];
    return 1 - s;
  }
  for (let j = 0; j < dim; j++) {
    const a = queries[qi * dim + j] - base[bi * dim + j];
    s += a * a;
  }
  return s;
}

/** FNV-1a over the raw bytes (as u32 words) of base and queries: cache key for the ground truth. */
function fingerprint(ds: Dataset): string {
  let h = 0x811c9dc5;
  for (const arr of [ds.base, ds.queries]) {
    const u = new Uint32Array(arr.buffer, arr.byteOffset, arr.length);
    for (let i = 0; i < u.length; i++) {
      h ^= u[i];
      h = Math.imul(h, 0x01000193) >>> 0;
    }
  }
  return h.toString(16).padStart(8, '0');
}

/** The cache file of a data set's ground truth (keyed by a hash of its vectors). */
export function groundTruthFile(ds: Dataset, k: number, dataDir: string): string {
  return path.join(dataDir, `gt-${ds.key}-${ds.nBase}-${ds.nQuery}-k${k}-${fingerprint(ds)}.bin`);
}

/** The cached ground truth, or null. */
export function readGroundTruth(file: string, nq: number, k: number): GroundTruth | null {
  if (!fs.existsSync(file)) return null;
  const buf = fs.readFileSync(file);
  if (buf.length !== nq * k * 12) return null;
  const ab = new ArrayBuffer(buf.length);
  new Uint8Array(ab).set(buf);
  return { k, ids: new Int32Array(ab, 0, nq * k), dists: new Float64Array(ab.slice(nq * k * 4)), seconds: 0, cached: true, workers: 0 };
}

/** Writes a ground truth where readGroundTruth finds it. */
export function writeGroundTruth(file: string, gt: { ids: Int32Array; dists: Float64Array }): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const out = Buffer.alloc(gt.ids.length * 12);
  Buffer.from(gt.ids.buffer, gt.ids.byteOffset, gt.ids.byteLength).copy(out, 0);
  Buffer.from(gt.dists.buffer, gt.dists.byteOffset, gt.dists.byteLength).copy(out, gt.ids.length * 4);
  fs.writeFileSync(`${file}.tmp`, out);
  fs.renameSync(`${file}.tmp`, file);
}

export async function groundTruth(ds: Dataset, space: MetricSpace, k: number, dataDir: string): Promise<GroundTruth> {
  const fp = fingerprint(ds);
  const file = path.join(dataDir, `gt-${ds.key}-${ds.nBase}-${ds.nQuery}-k${k}-${fp}.bin`);
  const nq = ds.nQuery;
  if (fs.existsSync(file)) {
    const buf = fs.readFileSync(file);
    if (buf.length === nq * k * 12) {
      const ab = new ArrayBuffer(buf.length);
      new Uint8Array(ab).set(buf);
      return {
        k,
        ids: new Int32Array(ab, 0, nq * k),
        dists: new Float64Array(ab.slice(nq * k * 4)),
        seconds: 0,
        cached: true,
        workers: 0,
      };
    }
  }
  const t0 = nowSec();
  const workers = Math.max(1, Math.min(os.cpus().length, nq));
  const per = Math.ceil(nq / workers);
  const ids = new Int32Array(nq * k);
  const dists = new Float64Array(nq * k);
  const jobs: Promise<void>[] = [];
  for (let w = 0; w < workers; w++) {
    const qStart = w * per;
    const qEnd = Math.min(nq, qStart + per);
    if (qStart >= qEnd) continue;
    const job: GtJob = {
      base: space.base.buffer as SharedArrayBuffer,
      queries: space.queries.buffer as SharedArrayBuffer,
      dim: ds.dim,
      nBase: ds.nBase,
      k,
      metric: space.metric,
      qStart,
      qEnd,
    };
    jobs.push(
      new Promise<void>((resolve, reject) => {
        const worker = new Worker(path.join(__dirname, 'gt-worker.js'), { workerData: { gtJob: job } });
        worker.once('message', (m: { ids: Int32Array; dists: Float64Array }) => {
          ids.set(m.ids, qStart * k);
          dists.set(m.dists, qStart * k);
          resolve();
        });
        worker.once('error', reject);
        worker.once('exit', (code) => {
          if (code !== 0) reject(new Error(`ground-truth worker exited ${code}`));
        });
      }),
    );
  }
  await Promise.all(jobs);
  const seconds = nowSec() - t0;
  fs.mkdirSync(dataDir, { recursive: true });
  const out = Buffer.alloc(nq * k * 12);
  Buffer.from(ids.buffer).copy(out, 0);
  Buffer.from(dists.buffer).copy(out, nq * k * 4);
  fs.writeFileSync(`${file}.tmp`, out);
  fs.renameSync(`${file}.tmp`, file);
  return { k, ids, dists, seconds, cached: false, workers };
}

/**
 * recall@k with ties: a returned label counts when its exact distance is no larger than
 * the k-th true neighbour's (so equally distant duplicates are not penalised); each
 * label counts once, at most k per query.
 */
export function recallAtK(space: MetricSpace, gt: GroundTruth, results: ArrayLike<number>[], k: number): number {
  let hits = 0;
  const nq = results.length;
  for (let qi = 0; qi < nq; qi++) {
    const kth = gt.dists[qi * gt.k + k - 1];
    const tol = 1e-5 * Math.max(1, Math.abs(kth));
    const seen = new Set<number>();
    const r = results[qi];
    let h = 0;
    for (let i = 0; i < Math.min(k, r.length); i++) {
      const id = r[i];
      if (id < 0 || id >= space.base.length / space.dim || seen.has(id)) continue;
      seen.add(id);
      if (distance(space, qi, id) <= kth + tol) h++;
    }
    hits += Math.min(h, k);
  }
  return hits / (nq * k);
}
