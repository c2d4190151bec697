/**
 * Brute-force vector math for the contract tests: the scores the reference reports for
 * each distance, and exact top-k lists to compare search answers with.
 */

export type Distance = 'Cosine' | 'Euclid' | 'Dot' | 'Manhattan';

/** A seeded PRNG (mulberry32), so every run sees the same data. */
export { mulberry32 as rng } from './rng';

export function randomVector(next: () => number, dim: number): number[] {
  return Array.from({ length: dim }, () => Math.round((next() * 2 - 1) * 1000) / 1000);
}

/** What Quiver and the reference keep of a number: a 32-bit float. */
export function f32(v: number[]): number[] {
  return Array.from(Float32Array.from(v));
}

export function normalize(v: number[]): number[] {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return n === 0 ? v.slice() : v.map((x) => x / n);
}

export function dot(a: number[], b: number[]): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/**
 * The score the reference reports: cosine similarity, Euclidean distance (not
 * squared), dot product, Manhattan distance.
 */
export function score(distance: Distance, a: number[], b: number[]): number {
  switch (distance) {
    case 'Cosine':
      return dot(normalize(a), normalize(b));
    case 'Dot':
      return dot(a, b);
    case 'Euclid':
      return Math.sqrt(a.reduce((s, x, i) => s + (x - b[i]) ** 2, 0));
    case 'Manhattan':
      return a.reduce((s, x, i) => s + Math.abs(x - b[i]), 0);
  }
}

/** Whether a larger score is a better match. */
export function higherIsBetter(distance: Distance): boolean {
  return distance === 'Cosine' || distance === 'Dot';
}

export interface Scored<Id> {
  id: Id;
  score: number;
}

/** Every point scored against `query`, best first (ties by id order of the input). */
export function ranked<Id>(distance: Distance, points: Array<{ id: Id; vector: number[] }>, query: number[]): Array<Scored<Id>> {
  const out = points.map((p) => ({ id: p.id, score: score(distance, p.vector, query) }));
  const higher = higherIsBetter(distance);
  return out.sort((a, b) => (higher ? b.score - a.score : a.score - b.score));
}

/** Whether scores are in the order the distance ranks them (ties allowed). */
export function inRankOrder(distance: Distance, scores: number[]): boolean {
  const higher = higherIsBetter(distance);
  for (let i = 1; i < scores.length; i++) if (higher ? scores[i] > scores[i - 1] : scores[i] < scores[i - 1]) return false;
  return true;
}

/** The reference's average_vector recommendation: avg(positive) + (avg(positive) - avg(negative)). */
export function recommendVector(positive: number[][], negative: number[][]): number[] {
  const avg = (vs: number[][]) => vs[0].map((_, i) => vs.reduce((s, v) => s + v[i], 0) / vs.length);
  const p = avg(positive);
  if (negative.length === 0) return p;
  const n = avg(negative);
  return p.map((x, i) => x + (x - n[i]));
}
