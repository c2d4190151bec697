/**
 * Recommend over a multivector, through the Query API's `{recommend: ...}`, a prefetch
 * and `/points/recommend`, each answer validated against the v1.18 document. The
 * reference's average_vector strategy for multivectors: the query is every positive
 * example's rows, then, when there are negatives, every negative example's rows negated,
 * scored by MaxSim. Checked against that computation written here, with and without a
 * graph; the examples themselves are left out of the results.
 */

import test, { type ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { startQuiver } from './helpers';
import { ContractClient, spec } from '../support/contract';
import { COLLECTION, POINTS, QUERY, RECOMMEND } from '../support/routes';

const storage = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-mvrec-api-'));
let api: ContractClient;

test.before(async () => {
  const server = await startQuiver({ SERVICE__STORAGE__STORAGE_PATH: storage });
  api = new ContractClient(server.url, spec(), server);
});

test.after.always(async () => {
  await api?.stop();
  fs.rmSync(storage, { recursive: true, force: true });
});

const DIM = 6;

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const list = (r: () => number, rows: number): number[][] => Array.from({ length: rows }, () => Array.from({ length: DIM }, () => Math.fround(r() * 2 - 1)));
const norm = (v: number[]) => {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / n);
};

function maxSim(q: number[][], doc: number[][], cosine: boolean): number {
  const d = cosine ? doc.map(norm) : doc;
  return (cosine ? q.map(norm) : q).reduce((s, qv) => s + Math.max(...d.map((dv) => dv.reduce((a, x, i) => a + x * qv[i], 0))), 0);
}

/** The reference's average_vector query over multivectors: positives' rows, then negatives' rows negated. */
function recoQuery(pos: number[][][], neg: number[][][]): number[][] {
  return [...pos.flat(), ...neg.flat().map((row) => row.map((x) => -x))];
}

function brute(docs: Map<number, number[][]>, q: number[][], cosine: boolean, k: number, exclude: number[]): Array<{ id: number; score: number }> {
  return [...docs]
    .filter(([id]) => !exclude.includes(id))
    .map(([id, doc]) => ({ id, score: maxSim(q, doc, cosine) }))
    .sort((a, b) => b.score - a.score || a.id - b.id)
    .slice(0, k);
}

function checkTop(t: ExecutionContext, got: Array<{ id: number; score: number }>, want: Array<{ id: number; score: number }>, what: string): void {
  t.deepEqual(
    got.map((p) => p.id),
    want.map((w) => w.id),
    what,
  );
  got.forEach((p, i) => t.true(Math.abs(p.score - want[i].score) < 1e-4 * Math.max(1, Math.abs(want[i].score)), `${what}: ${p.score} vs ${want[i].score}`));
}

test('recommend over a multivector: average_vector as the reference builds it, with and without a graph', async (t) => {
  const flat = { vectors: { size: DIM, distance: 'Dot', multivector_config: { comparator: 'max_sim' }, hnsw_config: { m: 0 } } };
  const named = { vectors: { colbert: { size: DIM, distance: 'Cosine', multivector_config: { comparator: 'max_sim' } }, dense: { size: DIM, distance: 'Dot' } } };
  for (const [name, body] of [['mvr-flat', flat], ['mvr-named', named]] as const) {
    t.deepEqual(spec().validateSchema('CreateCollection', body), []);
    t.is(await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: name }, body }), true);
  }
  const r = rng(5);
  const docs = new Map<number, number[][]>();
  for (let id = 1; id <= 120; id++) docs.set(id, list(r, 1 + Math.floor(r() * 4)));
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: 'mvr-flat' }, query: { wait: true }, body: { points: [...docs].map(([id, vector]) => ({ id, vector })) } });
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: 'mvr-named' },
    query: { wait: true },
    body: { points: [...docs].map(([id, v]) => ({ id, vector: { colbert: v, dense: v[0] } })) },
  });

  // Positives only (ids and a raw list): their rows, concatenated.
  const raw = list(r, 2);
  const posOnly = recoQuery([docs.get(3)!, docs.get(8)!, raw], []);
  const body1 = { query: { recommend: { positive: [3, 8, raw] } }, limit: 5 };
  t.deepEqual(spec().validateSchema('QueryRequest', body1), []);
  checkTop(t, (await api.ok(t, 'POST', QUERY, { params: { collection_name: 'mvr-flat' }, body: body1 })).points, brute(docs, posOnly, false, 5, [3, 8]), 'positives, no graph');

  // With negatives: the negatives' rows negated follow.
  const withNeg = recoQuery([docs.get(3)!, raw], [docs.get(11)!]);
  const body2 = { query: { recommend: { positive: [3, raw], negative: [11], strategy: 'average_vector' } }, using: 'colbert', limit: 5, params: { exact: true } };
  t.deepEqual(spec().validateSchema('QueryRequest', body2), []);
  checkTop(t, (await api.ok(t, 'POST', QUERY, { params: { collection_name: 'mvr-named' }, body: body2 })).points, brute(docs, withNeg, true, 5, [3, 11]), 'negatives, exact over a graph collection');
  checkTop(t, (await api.ok(t, 'POST', QUERY, { params: { collection_name: 'mvr-flat' }, body: { ...body2, using: undefined } })).points, brute(docs, withNeg, false, 5, [3, 11]), 'negatives, no graph');

  // The same through /points/recommend (its RecommendExample takes ids, plain and sparse vectors).
  const rec = { positive: [3, 8], negative: [11], using: 'colbert', limit: 5, params: { exact: true } };
  t.deepEqual(spec().validateSchema('RecommendRequest', rec), []);
  const idsOnly = recoQuery([docs.get(3)!, docs.get(8)!], [docs.get(11)!]);
  checkTop(t, await api.ok(t, 'POST', RECOMMEND, { params: { collection_name: 'mvr-named' }, body: rec }), brute(docs, idsOnly, true, 5, [3, 8, 11]), '/points/recommend');

  // As a prefetch's query: the outer query re-scores its candidates with a list.
  const outer = list(r, 2);
  const hybrid = { prefetch: [{ query: { recommend: { positive: [3, raw], negative: [11] } }, limit: 20 }], query: outer, limit: 5 };
  t.deepEqual(spec().validateSchema('QueryRequest', hybrid), []);
  const cands = new Map(brute(docs, withNeg, false, 20, [3, 11]).map((p) => [p.id, docs.get(p.id)!]));
  checkTop(t, (await api.ok(t, 'POST', QUERY, { params: { collection_name: 'mvr-flat' }, body: hybrid })).points, brute(cands, outer, false, 5, []), 'prefetch recommend');

  // A list of another dimension among the examples is refused, naming the dimension.
  await api.error(t, 400, 'POST', QUERY, { params: { collection_name: 'mvr-flat' }, body: { query: { recommend: { positive: [3, [[1, 2]]] } } } }, /expected dim: 6, got 2/);
});
