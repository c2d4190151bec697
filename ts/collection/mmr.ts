/**
 * Similarities between dense vectors as the engine ranks them, and the two computations
 * built on them at the collection level: maximal marginal relevance (a nearest query's
 * `mmr`) and the distance matrix of a sample (`/points/search/matrix/*`).
 *
 * Owns: the similarity of each distance (larger is more similar: Cosine and Dot as
 * scored, Euclid as minus the squared distance, Manhattan as minus the distance), the
 * score a search would report for a pair, MMR's greedy selection, and the neighbours of
 * each point of a sample. Must never: read stored points (the collection gives it the
 * vectors).
 */

import type { Distance } from '../../bindings/engine';

/** The most candidates an MMR query may ask for, as the reference bounds it. */
export const MAX_MMR_CANDIDATES = 16384;

function dot(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/** `v` scaled to length 1 (a zero vector stays as it is), as the engine stores Cosine vectors. */
export function normalized(v: Float32Array): Float32Array {
  const n = Math.sqrt(dot(v, v));
  if (n === 0) return v;
  const out = new Float32Array(v.length);
  for (let i = 0; i < v.length; i++) out[i] = v[i] / n;
  return out;
}

/** Each row of a flat list of rows of `dim` scaled to length 1. */
function normalizedRows(v: Float32Array, dim: number): Float32Array {
  const out = new Float32Array(v.length);
  for (let at = 0; at < v.length; at += dim) out.set(normalized(v.subarray(at, at + dim)), at);
  return out;
}

/** Larger is more similar, whatever the distance (the order the engine ranks by). */
function plain(distance: Distance, a: Float32Array, b: Float32Array): number {
  switch (distance) {
    case 'Cosine':
    case 'Dot':
      return dot(a, b);
    case 'Euclid': {
      let s = 0;
      for (let i = 0; i < a.length; i++) s += (a[i] - b[i]) * (a[i] - b[i]);
      return -s;
    }
    case 'Manhattan': {
      let s = 0;
      for (let i = 0; i < a.length; i++) s += Math.abs(a[i] - b[i]);
      return -s;
    }
  }
}

/**
 * The similarity of `b` to `a` taken as the query: for plain vectors (`rowDim` null) as
 * the distance ranks; for multivectors (flat rows of `rowDim`) MaxSim, the sum over a's
 * rows of the best similarity to one of b's rows (not symmetric).
 */
export function similarity(distance: Distance, a: Float32Array, b: Float32Array, rowDim: number | null = null): number {
  if (rowDim === null) return plain(distance, a, b);
  let total = 0;
  for (let i = 0; i < a.length; i += rowDim) {
    const row = a.subarray(i, i + rowDim);
    let best = -Infinity;
    for (let j = 0; j < b.length; j += rowDim) best = Math.max(best, plain(distance, row, b.subarray(j, j + rowDim)));
    total += best;
  }
  return total;
}

/** The score a search reports for a similarity: Cosine and Dot as they are, Euclid and Manhattan as distances. */
export function reportedScore(distance: Distance, sim: number): number {
  if (distance === 'Euclid') return Math.fround(Math.sqrt(Math.max(0, -sim)));
  if (distance === 'Manhattan') return Math.fround(-sim);
  return Math.fround(sim);
}

/** Vectors as the engine compares them (Cosine ones normalized, row by row for multivectors). */
export function prepared(distance: Distance, vs: readonly Float32Array[], rowDim: number | null = null): Float32Array[] {
  if (distance !== 'Cosine') return [...vs];
  return vs.map((v) => (rowDim === null ? normalized(v) : normalizedRows(v, rowDim)));
}

/**
 * Maximal marginal relevance: the index of the candidate most similar to the query
 * first, then repeatedly the one maximizing λ·sim(query, c) − (1 − λ)·max over the chosen
 * s of sim(c, s) (the candidate as the query of the pair, as the reference computes it),
 * until `limit` are chosen. Returns the chosen indexes in order.
 */
export function mmrSelect(distance: Distance, query: Float32Array, candidates: readonly Float32Array[], lambda: number, limit: number, rowDim: number | null = null): number[] {
  const n = candidates.length;
  if (n === 0 || limit <= 0) return [];
  const [q] = prepared(distance, [query], rowDim);
  const vs = prepared(distance, candidates, rowDim);
  const relevance = vs.map((v) => similarity(distance, q, v, rowDim));
  // The best similarity of each remaining candidate to the chosen ones, kept up to date as each is chosen.
  const closest = new Float64Array(n).fill(-Infinity);
  const left = new Set<number>(Array.from({ length: n }, (_, i) => i));
  const chosen: number[] = [];
  let first = 0;
  for (let i = 1; i < n; i++) if (relevance[i] > relevance[first]) first = i;
  const choose = (i: number) => {
    chosen.push(i);
    left.delete(i);
    for (const j of left) closest[j] = Math.max(closest[j], similarity(distance, vs[j], vs[i], rowDim));
  };
  choose(first);
  while (chosen.length < limit && left.size > 0) {
    let best = -1;
    let bestScore = -Infinity;
    for (const j of left) {
      const s = lambda * relevance[j] - (1 - lambda) * closest[j];
      if (best === -1 || s > bestScore) {
        best = j;
        bestScore = s;
      }
    }
    choose(best);
  }
  return chosen;
}

/** One entry of a distance matrix: row and column indexes into the sample, and the pair's score. */
export interface MatrixEntry {
  row: number;
  col: number;
  score: number;
}

/**
 * For each vector of a sample (in its order), its `limit` nearest others of the sample,
 * best first (equal ones by index), with the scores a search would report (with that
 * vector as the query: MaxSim of its rows for multivectors).
 */
export function nearestInSample(distance: Distance, sample: readonly Float32Array[], limit: number, rowDim: number | null = null): MatrixEntry[] {
  const vs = prepared(distance, sample, rowDim);
  const out: MatrixEntry[] = [];
  for (let i = 0; i < vs.length; i++) {
    const row: Array<{ col: number; sim: number }> = [];
    for (let j = 0; j < vs.length; j++) if (j !== i) row.push({ col: j, sim: similarity(distance, vs[i], vs[j], rowDim) });
    row.sort((a, b) => b.sim - a.sim || a.col - b.col);
    for (const r of row.slice(0, limit)) out.push({ row: i, col: r.col, score: reportedScore(distance, r.sim) });
  }
  return out;
}
