/**
 * Multi-example scoring in the engine (`npx tsc -p bench/tsconfig.json && node dist/bench/engine/rules.js`):
 * single-caller queries per second of a `best_score` recommendation (3 positive and 2
 * negative examples, the graph walked with the rule as its scorer) against an
 * `average_vector` one over the same examples (one search for the average vector), and
 * of discovery (a target and 2 pairs) and context (2 pairs), on the same index, with the
 * recall of each against its own exact answer (a hit is a result scoring at least the
 * exact 10th best, since context ties many points at 0).
 *
 * Data: embedding-like synthetic vectors (a random 16-dimensional space projected to 64
 * dimensions plus noise), 20,000 points, Cosine; examples are stored points, so the
 * queries look like a recommendation by ids. Native backend, ef 64 (RULES_EF=... to
 * change it), top 10.
 */
import * as fs from 'fs';
import * as path from 'path';

import type { RuleQuery, ScoreRule, SearchOptions, VectorIndex } from '../../bindings/engine';
import { loadEngine } from '../../bindings/index';
import { REPO_ROOT, fmt, fmtInt, mulberry32, nowSec, today } from './common';

const N = 20_000;
const DIM = 64;
const LATENT = 16;
const QUERIES = 300;
const K = 10;
const EF = Number(process.env.RULES_EF ?? 64);

function data(seed: number): Float32Array {
  const r = mulberry32(seed);
  const proj = Float32Array.from({ length: DIM * LATENT }, () => r() * 2 - 1);
  const out = new Float32Array(N * DIM);
  const z = new Float32Array(LATENT);
  for (let i = 0; i < N; i++) {
    for (let j = 0; j < LATENT; j++) z[j] = r() * 2 - 1;
    for (let d = 0; d < DIM; d++) {
      let s = 0;
      for (let j = 0; j < LATENT; j++) s += proj[d * LATENT + j] * z[j];
      out[i * DIM + d] = s + (r() * 2 - 1) * 0.1;
    }
  }
  return out;
}

interface Row {
  what: string;
  qps: number;
  recall: number;
}

async function timed(n: number, run: (i: number) => Promise<unknown>): Promise<number> {
  const started = nowSec();
  for (let i = 0; i < n; i++) await run(i);
  return n / (nowSec() - started);
}

async function main(): Promise<void> {
  const engine = loadEngine({ backend: 'native' });
  const vectors = data(1);
  const idx: VectorIndex = engine.createIndex({ dim: DIM, distance: 'Cosine' });
  const labels = BigUint64Array.from({ length: N }, (_, i) => BigInt(i));
  const b0 = nowSec();
  await idx.add(labels, vectors);
  const build = nowSec() - b0;
  const r = mulberry32(2);
  const pick = (count: number) => {
    const out = new Float32Array(count * DIM);
    for (let j = 0; j < count; j++) {
      const p = Math.floor(r() * N);
      out.set(vectors.subarray(p * DIM, (p + 1) * DIM), j * DIM);
    }
    return out;
  };
  const shapes: Array<[ScoreRule, number, number]> = [
    ['best_score', 5, 3],
    ['sum_scores', 5, 3],
    ['discover', 5, 0],
    ['context', 4, 0],
  ];
  const graph: SearchOptions = { k: K, ef: EF };
  const rows: Row[] = [];
  for (const [rule, count, positives] of shapes) {
    const qs: RuleQuery[] = Array.from({ length: QUERIES }, () => ({ rule, positives, examples: pick(count) }));
    const truth = await Promise.all(qs.map((q) => idx.searchRule(q, { k: K, exact: true })));
    const got: Float32Array[] = [];
    const qps = await timed(QUERIES, async (i) => got.push((await idx.searchRule(qs[i], graph)).scores));
    let hits = 0;
    got.forEach((s, i) => {
      const kth = truth[i].scores[K - 1];
      hits += Array.from(s).filter((x) => x >= kth - 1e-5 * Math.max(1, Math.abs(kth))).length;
    });
    rows.push({ what: `${rule} (${count} examples)`, qps, recall: hits / (QUERIES * K) });
    if (rule === 'best_score') {
      // average_vector over the same examples: the average of the positives, pushed away from the negatives' average.
      const avg = qs.map((q) => {
        const v = new Float32Array(DIM);
        for (let d = 0; d < DIM; d++) {
          let p = 0;
          let n = 0;
          for (let j = 0; j < positives; j++) p += q.examples[j * DIM + d] / positives;
          for (let j = positives; j < count; j++) n += q.examples[j * DIM + d] / (count - positives);
          v[d] = p + (p - n);
        }
        return v;
      });
      const truthAvg = await Promise.all(avg.map((v) => idx.search(v, { k: K, exact: true })));
      const gotAvg: Float32Array[] = [];
      const qpsAvg = await timed(QUERIES, async (i) => gotAvg.push((await idx.search(avg[i], graph)).scores));
      let h = 0;
      gotAvg.forEach((s, i) => {
        const kth = truthAvg[i].scores[K - 1];
        h += Array.from(s).filter((x) => x >= kth - 1e-5).length;
      });
      rows.push({ what: `average_vector (${count} examples, one search)`, qps: qpsAvg, recall: h / (QUERIES * K) });
    }
  }
  idx.close();
  const lines = [
    `# Multi-example scoring in the engine, ${today()}`,
    '',
    `Native backend (${engine.kernels}), ${fmtInt(N)} embedding-like points of ${DIM} dimensions, Cosine, m 16, ef_construct 100 (built in ${fmt(build, 2)} s); ${QUERIES} queries per row, one caller, top ${K}, ef ${EF}. Examples are stored points. Recall: results scoring at least the exact 10th best. Command: \`npx tsc -p bench/tsconfig.json && node dist/bench/engine/rules.js\`.`,
    '',
    '| query | QPS | recall@10 |',
    '|---|---:|---:|',
    ...rows.map((row) => `| ${row.what} | ${fmtInt(Math.round(row.qps))} | ${fmt(row.recall, 3)} |`),
    '',
  ];
  const out = path.join(REPO_ROOT, 'bench', 'results', `rules-${today()}.md`);
  fs.writeFileSync(out, lines.join('\n'));
  console.log(lines.join('\n'));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
