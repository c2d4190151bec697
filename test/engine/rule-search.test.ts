/**
 * Search by a rule over several examples (`searchRule`), on both backends: the
 * reference's best_score and sum_scores recommend strategies, discovery and context,
 * each computed in this file from the documented formulas
 * (https://qdrant.tech/documentation/concepts/explore/, "Best score strategy", "Sum
 * scores strategy", "Discovery search", "Context search"). Exact mode must give the
 * same scores as the rule applied to every point; the graph must find points scoring
 * at least the exact k-th best for nearly every slot; filters and quantized indexes
 * too; bad examples fail with the engine's codes.
 */

import test from 'ava';

import type { Backend, Distance, RuleQuery, ScoreRule, VectorIndex } from '../../bindings/engine';
import { loadEngine } from '../../bindings/index';
import { labelsFrom, randomVectors, row, silentLogger } from './helpers';

const BACKENDS: Backend[] = ['native', 'wasm'];
const DIM = 16;
const N = 2000;
const K = 10;

const sigmoid01 = (x: number): number => 0.5 * (x / (1 + Math.abs(x)) + 1);

/** The reference's similarity (larger better, not post-processed). */
function similarity(distance: Distance, a: Float32Array, b: Float32Array): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  let l2 = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
    l2 += (a[i] - b[i]) ** 2;
  }
  if (distance === 'Cosine') return dot / Math.sqrt(na * nb);
  if (distance === 'Dot') return dot;
  return -l2;
}

function byRule(rule: ScoreRule, positives: number, s: number[]): number {
  switch (rule) {
    case 'best_score': {
      const p = Math.max(-Infinity, ...s.slice(0, positives));
      const n = Math.max(-Infinity, ...s.slice(positives));
      return p > n ? sigmoid01(p) : -sigmoid01(n);
    }
    case 'sum_scores':
      return s.slice(0, positives).reduce((a, b) => a + b, 0) - s.slice(positives).reduce((a, b) => a + b, 0);
    case 'discover': {
      let rank = 0;
      for (let j = 1; j + 1 < s.length; j += 2) rank += Math.sign(s[j] - s[j + 1]);
      return rank + sigmoid01(s[0]);
    }
    case 'context': {
      let total = 0;
      for (let j = 0; j + 1 < s.length; j += 2) {
        const x = Math.min(s[j] - s[j + 1] - 2 ** -23, 0);
        total += x / (1 + Math.abs(x));
      }
      return total;
    }
  }
}

function truth(distance: Distance, data: Float32Array, q: RuleQuery, allow?: (i: number) => boolean): { label: number; score: number }[] {
  const examples: Float32Array[] = [];
  for (let j = 0; j < q.examples.length / DIM; j++) examples.push(row(q.examples, DIM, j));
  const out: { label: number; score: number }[] = [];
  for (let i = 0; i < N; i++) {
    if (allow && !allow(i)) continue;
    const v = row(data, DIM, i);
    out.push({ label: i, score: byRule(q.rule, q.positives, examples.map((e) => similarity(distance, e, v))) });
  }
  return out.sort((a, b) => b.score - a.score || a.label - b.label);
}

const close = (a: number, b: number): boolean => Math.abs(a - b) <= 1e-3 * (1 + Math.abs(b));

const SHAPES: { rule: ScoreRule; count: number; positives: number }[] = [
  { rule: 'best_score', count: 3, positives: 2 },
  { rule: 'sum_scores', count: 3, positives: 1 },
  { rule: 'discover', count: 5, positives: 0 },
  { rule: 'context', count: 4, positives: 0 },
];

/** Examples near stored points (as ids used as examples are), seeded per case. */
function examplesNear(data: Float32Array, count: number, seed: number): Float32Array {
  const noise = randomVectors(count, DIM, seed);
  const out = new Float32Array(count * DIM);
  for (let j = 0; j < count; j++) {
    const p = (seed * 131 + j * 977) % N;
    for (let t = 0; t < DIM; t++) out[j * DIM + t] = data[p * DIM + t] + 0.3 * noise[j * DIM + t];
  }
  return out;
}

for (const backend of BACKENDS) {
  for (const distance of ['Cosine', 'Euclid'] as Distance[]) {
    test(`${backend} ${distance}: rules by graph and by exact scan match the documented formulas`, async (t) => {
      const engine = loadEngine({ backend, logger: silentLogger });
      const data = randomVectors(N, DIM, 5);
      const indexes: [string, VectorIndex][] = [
        ['f32', engine.createIndex({ dim: DIM, distance })],
        ['int8', engine.createIndex({ dim: DIM, distance, quantization: { kind: 'scalar' } })],
      ];
      try {
        for (const [, idx] of indexes) await idx.add(labelsFrom(0, N), data, 2);
        for (const [name, idx] of indexes) {
          let hits = 0;
          let asked = 0;
          for (const [si, shape] of SHAPES.entries()) {
            for (let rep = 0; rep < 4; rep++) {
              const q: RuleQuery = { rule: shape.rule, positives: shape.positives, examples: examplesNear(data, shape.count, 10 + si * 10 + rep) };
              const want = truth(distance, data, q);
              const exact = await idx.searchRule(q, { k: K, exact: true });
              t.is(exact.labels.length, K);
              for (let i = 0; i < K; i++) {
                const own = want.find((w) => w.label === Number(exact.labels[i]))!.score;
                t.true(close(exact.scores[i], own), `${name} ${shape.rule}: score of ${exact.labels[i]} ${exact.scores[i]} vs ${own}`);
                t.true(close(exact.scores[i], want[i].score), `${name} ${shape.rule}: rank ${i} ${exact.scores[i]} vs ${want[i].score}`);
              }
              const graph = await idx.searchRule(q, { k: K, ef: 128, oversampling: 2 });
              const kth = want[K - 1].score;
              hits += Array.from(graph.scores).filter((s) => s >= kth - 1e-3 * (1 + Math.abs(kth))).length;
              asked += K;
              // A filter: only allowed labels come back, the best of them first.
              const allowed = (i: number): boolean => i % 37 === 0;
              const allow = BigUint64Array.from(Array.from({ length: N }, (_, i) => i).filter(allowed).map(BigInt));
              const filtered = await idx.searchRule(q, { k: K, allow });
              t.true(Array.from(filtered.labels).every((l) => allowed(Number(l))));
              const wantF = truth(distance, data, q, allowed);
              t.true(close(filtered.scores[0], wantF[0].score), `${name} ${shape.rule} filtered`);
            }
          }
          t.true(hits / asked >= 0.9, `${name} recall ${hits / asked}`);
        }
        const idx = indexes[0][1];
        const bad = (q: RuleQuery) => idx.searchRule(q, { k: 3 });
        const e1 = await t.throwsAsync(bad({ rule: 'context', positives: 0, examples: new Float32Array(DIM * 3) }));
        t.is((e1 as { code?: string }).code, 'QUIVER_INVALID_ARGUMENT');
        const e2 = await t.throwsAsync(bad({ rule: 'best_score', positives: 1, examples: new Float32Array(DIM + 1) }));
        t.is((e2 as { code?: string }).code, 'QUIVER_DIMENSION_MISMATCH');
        const e3 = await t.throwsAsync(bad({ rule: 'nearest' as ScoreRule, positives: 0, examples: new Float32Array(DIM) }));
        t.is((e3 as { code?: string }).code, 'QUIVER_INVALID_ARGUMENT');
      } finally {
        for (const [, idx] of indexes) idx.close();
      }
    });
  }
}
