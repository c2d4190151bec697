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

/** Larger is more similar, whatever the distance (the order the engine ranks by). */
export function similarity(distance: Distance, a: Float32Array, b: Float32Array): number {
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

/** The score a search reports for a similarity: Cosine and Dot as they are, Euclid and Manhattan as distances. */
export function reportedScore(distance: Distance, sim: number): number {
  if (distance === 'Euclid') return Math.fround(Math.sqrt(Math.max(0, -sim)));
  if (distance === 'Manhattan') return Math.fround(-sim);
  return Math.fround(sim);
}

/** Vectors as the engine compares them (Cosine ones normalized). */
export function prepared(distance: Distance, vs: readonly Float32Array[]): Float32Array[] {
  return distance === 'Cosine' ? vs.map(normalized) : [...vs];
}

/**
 * Maximal marginal relevance: the index of the candidate most similar to the query
 * first, then repeatedly the one maximizing λ·sim(query, c) − (1 − λ)·max over the chosen
 * s of sim(c, s), until `limit` are chosen. Returns the chosen indexes in order.
 */
export function mmrSelect(distance: Distance, query: Float32Array, candidates: readonly Float32Array[], lambda: number, limit: number): number[] {
  const n = candidates.length;
  if (n === 0 || limit <= 0) return [];
  const q = distance === 'Cosine' ? normalized(query) : query;
  const vs = prepared(distance, candidates);
  const relevance = vs.map((v) => similarity(distance, q, v));
  // The best similarity of each remaining candidate to the chosen ones, kept up to date as each is chosen.
  const closest = new Float64Array(n).fill(-Infinity);
  const left = new Set<number>(Array.from({ length: n }, (_, i) => i));
  const chosen: number[] = [];
  let first = 0;
  for (let i = 1; i < n; i++) if (relevance[i] > relevance[first]) first = i;
  const choose = (i: number) => {
    chosen.push(i);
    left.delete(i);
    for (const j of left) closest[j] = Math.max(closest[j], similarity(distance, vs[i], vs[j]));
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
 * best first (equal ones by index), with the scores a search would report.
 */
export function nearestInSample(distance: Distance, sample: readonly Float32Array[], limit: number): MatrixEntry[] {
  const vs = prepared(distance, sample);
  const out: MatrixEntry[] = [];
  for (let i = 0; i < vs.length; i++) {
    const row: Array<{ col: number; sim: number }> = [];
    for (let j = 0; j < vs.length; j++) if (j !== i) row.push({ col: j, sim: similarity(distance, vs[i], vs[j]) });
    row.sort((a, b) => b.sim - a.sim || a.col - b.col);
    for (const r of row.slice(0, limit)) out.push({ row: i, col: r.col, score: reportedScore(distance, r.sim) });
  }
  return out;
}
