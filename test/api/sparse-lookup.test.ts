/**
 * `lookup_from` over sparse vectors, through REST: example ids of a `nearest`,
 * `recommend` (average_vector) or discovery query over a sparse vector name the
 * points of another collection, whose sparse vector (`lookup_from.vector`, default the
 * query's `using`) is the example, as the dense path does. Answers are checked against
 * dot products computed here; the example ids do not exist in the queried collection,
 * so a lookup that ignored `lookup_from` answers 404.
 */

import test from 'ava';

import { ContractClient, spec } from '../support/contract';
import { COLLECTION, POINTS, QUERY, RECOMMEND } from '../support/routes';

const HERE = 'sl_here';
const THERE = 'sl_there';
let api: ContractClient;

type Sparse = Map<number, number>;
/** Point i of the queried collection: small integer weights on a few of 12 dimensions. */
const here = new Map<number, Sparse>(
  Array.from({ length: 40 }, (_, k) => {
    const m: Sparse = new Map();
    for (let d = 0; d < 12; d++) if ((k * 7 + d * 3) % 5 < 2) m.set(d, ((k + d) % 7) - 2);
    return [k + 1, m];
  }),
);
/** The examples: ids 1001.. of the other collection, under the sparse vector `t`. */
const there = new Map<number, Sparse>([
  [1001, new Map([[0, 3], [4, 1], [9, 2]])],
  [1002, new Map([[1, 2], [4, -1], [11, 3]])],
  [1003, new Map([[2, 1], [3, 2], [7, 1]])],
]);
const wire = (m: Sparse) => ({ indices: [...m.keys()], values: [...m.values()] });
const dot = (a: Sparse, b: Sparse) => [...a].reduce((s, [i, x]) => s + x * (b.get(i) ?? 0), 0);
const close = (a: number, b: number) => Math.abs(a - b) <= 1e-4 * Math.max(1, Math.abs(b));
/** Every point of the queried collection by `score`, best first, ties by id. */
const brute = (score: (m: Sparse) => number) =>
  [...here].map(([id, m]) => ({ id, score: score(m) })).sort((a, b) => b.score - a.score || a.id - b.id);

test.before(async (t) => {
  api = await ContractClient.start();
  await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: HERE }, body: { sparse_vectors: { s: {} } } });
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: HERE }, query: { wait: true }, body: { points: [...here].map(([id, m]) => ({ id, vector: { s: wire(m) } })) } });
  await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: THERE }, body: { vectors: { d: { size: 2, distance: 'Dot' } }, sparse_vectors: { t: {} } } });
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: THERE }, query: { wait: true }, body: { points: [...there].map(([id, m]) => ({ id, vector: { t: wire(m), d: [1, 0] } })) } });
});

test.after.always(async () => {
  await api?.stop();
});

const top = async (body: object) => {
  t0(body);
  return (await api.send('POST', QUERY, { params: { collection_name: HERE }, body })).body;
};
function t0(body: object): void {
  const errs = spec().validateSchema('QueryRequest', body);
  if (errs.length > 0) throw new Error(`invalid body: ${JSON.stringify(errs)}`);
}

test('nearest, recommend and discover over a sparse vector take their examples from lookup_from', async (t) => {
  const lookup = { collection: THERE, vector: 't' };
  const cases: Array<[string, object, (m: Sparse) => number]> = [
    ['nearest', { query: 1001, using: 's', lookup_from: lookup, limit: 6 }, (m) => dot(there.get(1001)!, m)],
    ['recommend', { query: { recommend: { positive: [1002] } }, using: 's', lookup_from: lookup, limit: 6 }, (m) => dot(there.get(1002)!, m)],
    ['prefetch nearest', { prefetch: [{ query: 1003, using: 's', lookup_from: lookup, limit: 10 }], query: { fusion: 'rrf' }, limit: 10 }, (m) => dot(there.get(1003)!, m)],
  ];
  for (const [what, body, score] of cases) {
    const res = await top(body);
    t.is(res?.status, 'ok', `${what}: ${JSON.stringify(res)}`);
    const got = res.result.points as Array<{ id: number; score: number }>;
    const want = brute(score);
    if (what.startsWith('prefetch')) {
      // Fusion rescores by rank: the prefetch's order is the brute force's.
      t.deepEqual(got.map((p) => p.id), want.slice(0, 10).map((w) => w.id), what);
      continue;
    }
    t.is(got.length, 6, what);
    got.forEach((p, i) => t.true(close(p.score, want[i].score), `${what} rank ${i}: ${p.score} vs ${want[i].score}`));
  }
  // Discovery by the reference's rule: the context pair's rank plus the sigmoid of the target's score.
  const sigmoid = (x: number) => 0.5 * (x / (1 + Math.abs(x)) + 1);
  const [a, b, c] = [there.get(1001)!, there.get(1002)!, there.get(1003)!];
  const disc = await top({ query: { discover: { target: 1001, context: [{ positive: 1002, negative: 1003 }] } }, using: 's', lookup_from: lookup, limit: 5 });
  t.is(disc?.status, 'ok', JSON.stringify(disc));
  const want = brute((m) => Math.sign(dot(b, m) - dot(c, m)) + sigmoid(dot(a, m)));
  (disc.result.points as Array<{ score: number }>).forEach((p, i) => t.true(close(p.score, want[i].score), `discover rank ${i}: ${p.score} vs ${want[i].score}`));
  // The recommend route too.
  const rec = await api.ok(t, 'POST', RECOMMEND, { params: { collection_name: HERE }, body: { positive: [1001], using: 's', lookup_from: lookup, limit: 3 } });
  const wantRec = brute((m) => dot(a, m));
  (rec as Array<{ score: number }>).forEach((p, i) => t.true(close(p.score, wantRec[i].score), `recommend route rank ${i}`));
});

test('a sparse lookup_from with a missing point, a dense source vector or no such collection is refused', async (t) => {
  await api.error(t, 404, 'POST', QUERY, { params: { collection_name: HERE }, body: { query: 5, using: 's', lookup_from: { collection: THERE, vector: 't' } } }, /^Not found: No point with id 5 found/);
  await api.error(t, 400, 'POST', QUERY, { params: { collection_name: HERE }, body: { query: 1001, using: 's', lookup_from: { collection: THERE, vector: 'd' } } }, /Conversion between sparse and regular vectors failed: "d" is a dense vector/);
  await api.error(t, 404, 'POST', QUERY, { params: { collection_name: HERE }, body: { query: 1001, using: 's', lookup_from: { collection: 'sl_nope', vector: 't' } } }, /^Not found: Collection `sl_nope` doesn't exist!/);
});
