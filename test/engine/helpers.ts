/**
 * Data and measurements shared by the engine conformance suite.
 *
 * Owns: seeded random vectors (so a failing run replays exactly), brute-force
 * reference search in plain TypeScript, and recall. Must never: call an engine.
 */

import type { Distance, Engine, SearchResult } from '../../bindings/engine';
import { mulberry32 } from '../support/rng';

/** mulberry32: a small seeded PRNG. */
export const rng = mulberry32;

/** n * dim values uniform in [-1, 1). */
export function randomVectors(n: number, dim: number, seed: number): Float32Array {
  const r = rng(seed);
  const out = new Float32Array(n * dim);
  for (let i = 0; i < out.length; i++) out[i] = r() * 2 - 1;
  return out;
}

/**
 * Embedding-like data: points of a random `latent`-dimensional space projected into
 * `dim` dimensions plus a little noise. Like real embeddings (and unlike uniform
 * noise) near neighbours are much nearer than the rest, which is what quantization
 * relies on. `projectionSeed` fixes the space, so data and queries can share it.
 */
export function embeddingLike(n: number, dim: number, latent: number, seed: number, projectionSeed = 77): Float32Array {
  const r = rng(seed);
  const proj = randomVectors(dim, latent, projectionSeed);
  const out = new Float32Array(n * dim);
  const z = new Float64Array(latent);
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < latent; j++) z[j] = r() * 2 - 1;
    for (let d = 0; d < dim; d++) {
      let s = 0;
      for (let j = 0; j < latent; j++) s += proj[d * latent + j] * z[j];
      out[i * dim + d] = s + (r() * 2 - 1) * 0.1;
    }
  }
  return out;
}

export function labelsFrom(start: number, n: number): BigUint64Array {
  const out = new BigUint64Array(n);
  for (let i = 0; i < n; i++) out[i] = BigInt(start + i);
  return out;
}

export function row(data: Float32Array, dim: number, i: number): Float32Array {
  return data.slice(i * dim, (i + 1) * dim);
}

/** The reference score of `a` against `b` (Cosine/Dot: larger is better; Euclid/Manhattan: distances). */
export function referenceScore(distance: Distance, a: Float32Array, b: Float32Array): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  let l2 = 0;
  let l1 = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
    l2 += (a[i] - b[i]) ** 2;
    l1 += Math.abs(a[i] - b[i]);
  }
  switch (distance) {
    case 'Cosine':
      return dot / Math.sqrt(na * nb);
    case 'Dot':
      return dot;
    case 'Euclid':
      return Math.sqrt(l2);
    case 'Manhattan':
      return l1;
  }
}

/** Brute force over `data` (labels = row numbers + labelBase), restricted to `allow` when given. */
export function bruteForce(
  distance: Distance,
  data: Float32Array,
  dim: number,
  query: Float32Array,
  k: number,
  allow?: Set<bigint>,
  labelBase = 0,
): bigint[] {
  const higher = distance === 'Cosine' || distance === 'Dot';
  const scored: [bigint, number][] = [];
  for (let i = 0; i < data.length / dim; i++) {
    const label = BigInt(i + labelBase);
    if (allow && !allow.has(label)) continue;
    scored.push([label, referenceScore(distance, row(data, dim, i), query)]);
  }
  scored.sort((x, y) => (higher ? y[1] - x[1] : x[1] - y[1]));
  return scored.slice(0, k).map(([l]) => l);
}

/** Fraction of `truth` found in `got`. */
export function recall(truth: ArrayLike<bigint>, got: ArrayLike<bigint>): number {
  const want = new Set(Array.from(truth));
  if (want.size === 0) return 1;
  let hit = 0;
  for (const l of Array.from(got)) if (want.has(l)) hit++;
  return hit / want.size;
}

/** Mean recall@k of engine search with `options` against exact engine search. */
export async function meanRecall(
  search: (q: Float32Array, exact: boolean) => Promise<SearchResult>,
  queries: Float32Array,
  dim: number,
): Promise<number> {
  let sum = 0;
  const n = queries.length / dim;
  for (let i = 0; i < n; i++) {
    const q = row(queries, dim, i);
    const [truth, got] = await Promise.all([search(q, true), search(q, false)]);
    sum += recall(truth.labels, got.labels);
  }
  return sum / n;
}

/**
 * Runs `work` while a 5 ms interval timer measures how late the event loop serves it
 * (and calls `onTick` on every tick, to check that sync calls do not wait either).
 */
export async function measureLag<T>(
  work: () => Promise<T>,
  onTick: () => void = () => undefined,
): Promise<{ result: T; maxLagMs: number; ticks: number }> {
  const period = 5;
  let last = performance.now();
  let maxLagMs = 0;
  let ticks = 0;
  const timer = setInterval(() => {
    const now = performance.now();
    maxLagMs = Math.max(maxLagMs, now - last - period);
    last = now;
    ticks++;
    onTick();
  }, period);
  try {
    const result = await work();
    return { result, maxLagMs, ticks };
  } finally {
    clearInterval(timer);
  }
}

export const silentLogger = { info: () => undefined };

export type EngineFactory = () => Engine;
