/**
 * Hybrid queries through REST against a real bin/quiver: prefetches (nested), the
 * fusions (RRF with its k and weights, DBSF), re-scoring prefetched candidates with a
 * vector or a payload order, thresholds, limits and offsets, filters at every level,
 * batches, lookup_from and the refusals. Every answer is validated against the v1.18
 * document (ContractClient), and every fused result against a fusion computed here from
 * the results of the same prefetches asked as plain queries, or against brute force.
 *
 * The collection has two named dense vectors and two shards, so every prefetch is merged
 * across shards before it is fused.
 */

import test, { type ExecutionContext } from 'ava';

import { ContractClient } from '../support/contract';
import { normalize, randomVector, rng, score } from '../support/vectors';
import { COLLECTION, COUNT, INDEX, POINTS, QUERY, QUERY_BATCH, RECOMMEND } from '../support/routes';

let api: ContractClient;

const C = 'hy';
const OTHER = 'hy_lookup';
const N = 240;
const DIM_A = 8;
const DIM_B = 6;
const EPS = 1e-5;

type Id = number;
interface Hit {
  id: Id;
  score: number;
  version?: number;
  payload?: Record<string, unknown>;
  vector?: Record<string, number[]>;
}

const next = rng(1818);
const data = Array.from({ length: N }, (_, i) => ({
  id: i,
  vector: { a: randomVector(next, DIM_A), b: randomVector(next, DIM_B) },
  payload: { i, group: ['x', 'y', 'z'][i % 3] },
}));
const other = Array.from({ length: 10 }, (_, i) => ({ id: 1000 + i, vector: { v: randomVector(next, DIM_A) } }));
const qa = randomVector(next, DIM_A);
const qb = randomVector(next, DIM_B);
const qa2 = randomVector(next, DIM_A);

const inC = (collection_name: string) => ({ collection_name });
const ids = (hs: Hit[]) => hs.map((h) => h.id);
const EXACT = { exact: true };

test.before(async (t) => {
  api = await ContractClient.start();
  await api.ok(t, 'PUT', COLLECTION, {
    params: inC(C),
    body: { vectors: { a: { size: DIM_A, distance: 'Cosine' }, b: { size: DIM_B, distance: 'Dot' } }, shard_number: 2 },
  });
  await api.ok(t, 'PUT', INDEX, { params: inC(C), query: { wait: true }, body: { field_name: 'i', field_schema: 'integer' } });
  await api.ok(t, 'PUT', POINTS, { params: inC(C), query: { wait: true }, body: { points: data } });
  await api.ok(t, 'PUT', COLLECTION, { params: inC(OTHER), body: { vectors: { v: { size: DIM_A, distance: 'Cosine' } } } });
  await api.ok(t, 'PUT', POINTS, { params: inC(OTHER), query: { wait: true }, body: { points: other } });
});

test.after.always(async () => {
  await api?.stop();
});

async function query(t: ExecutionContext, body: object): Promise<Hit[]> {
  const r = await api.ok(t, 'POST', QUERY, { params: inC(C), body });
  return r.points as Hit[];
}

/** Best first, equal scores by id: the order Quiver answers fused lists in. */
const order = (a: Hit, b: Hit) => (a.score !== b.score ? b.score - a.score : a.id - b.id);

/** RRF as the reference defines it: Σ 1 / ((rank + 1) / w + k - 1), rank from 0, in 32-bit floats. */
function rrfHere(lists: Hit[][], k = 2, weights: number[] | null = null): Hit[] {
  const acc = new Map<Id, number>();
  lists.forEach((l, li) => {
    const w = weights ? weights[li] : 1;
    l.forEach((h, rank) => {
      const s = w <= 0 ? 0 : Math.fround(1 / Math.fround(Math.fround((rank + 1) / w) + k - 1));
      acc.set(h.id, Math.fround((acc.get(h.id) ?? 0) + s));
    });
  });
  return [...acc].map(([id, score]) => ({ id, score })).sort(order);
}

/** DBSF: per list (s - (μ - 3σ)) / 6σ with the sample σ, summed per point. */
function dbsfHere(lists: Hit[][]): Hit[] {
  const acc = new Map<Id, number>();
  for (const l of lists) {
    const xs = l.map((h) => h.score);
    const mu = xs.reduce((a, b) => a + b, 0) / xs.length;
    const sd = Math.sqrt(xs.reduce((a, b) => a + (b - mu) ** 2, 0) / (xs.length - 1));
    l.forEach((h) => {
      const s = xs.length === 1 || sd === 0 ? 0.5 : (h.score - (mu - 3 * sd)) / (6 * sd);
      acc.set(h.id, (acc.get(h.id) ?? 0) + s);
    });
  }
  return [...acc].map(([id, score]) => ({ id, score })).sort(order);
}

function sameHits(t: ExecutionContext, got: Hit[], want: Hit[], what: string): void {
  t.deepEqual(ids(got), ids(want), `${what}: ids`);
  got.forEach((h, i) => t.true(Math.abs(h.score - want[i].score) < EPS, `${what}: score of ${h.id}: ${h.score} vs ${want[i]?.score}`));
}

const A = (limit: number, extra: object = {}) => ({ query: qa, using: 'a', limit, params: EXACT, ...extra });
const B = (limit: number, extra: object = {}) => ({ query: qb, using: 'b', limit, params: EXACT, ...extra });

test('RRF of two dense prefetches equals the fusion of the same queries asked alone', async (t) => {
  const [la, lb] = [await query(t, A(30)), await query(t, B(30))];
  t.is(la.length, 30);
  const got = await query(t, { prefetch: [A(30), B(30)], query: { fusion: 'rrf' }, limit: 12 });
  sameHits(t, got, rrfHere([la, lb]).slice(0, 12), 'rrf');
  // The points of both lists score more than any of one list's: the fusion is not a copy of either.
  t.notDeepEqual(ids(got), ids(la).slice(0, 12));

  const k = await query(t, { prefetch: [A(30), B(30)], query: { rrf: { k: 60 } }, limit: 12 });
  sameHits(t, k, rrfHere([la, lb], 60).slice(0, 12), 'rrf k=60');
  const w = await query(t, { prefetch: [A(30), B(30)], query: { rrf: { weights: [3, 0.5] } }, limit: 12 });
  sameHits(t, w, rrfHere([la, lb], 2, [3, 0.5]).slice(0, 12), 'rrf weighted');
  // A single prefetch object (not a list) is one prefetch.
  const one = await query(t, { prefetch: A(5), query: { fusion: 'rrf' } });
  sameHits(t, one, rrfHere([la.slice(0, 5)]), 'rrf of one prefetch');
});

test('DBSF of two dense prefetches equals the distribution-based fusion computed here', async (t) => {
  const [la, lb] = [await query(t, A(25)), await query(t, B(40))];
  const got = await query(t, { prefetch: [A(25), B(40)], query: { fusion: 'dbsf' }, limit: 15 });
  sameHits(t, got, dbsfHere([la, lb]).slice(0, 15), 'dbsf');
});

test('limit, offset, score_threshold and payload/vectors of the fused page', async (t) => {
  const full = rrfHere([await query(t, A(30)), await query(t, B(30))]);
  const page = await query(t, { prefetch: [A(30), B(30)], query: { fusion: 'rrf' }, offset: 5, limit: 7, with_payload: true, with_vector: ['b'] });
  sameHits(t, page, full.slice(5, 12), 'offset 5 limit 7');
  for (const h of page) {
    t.deepEqual(h.payload, data[h.id].payload);
    t.deepEqual(Object.keys(h.vector ?? {}), ['b']);
    t.true(h.vector!.b.every((x, i) => Math.abs(x - data[h.id].vector.b[i]) < 1e-6));
    t.is(typeof h.version, 'number');
  }
  const cut = full[9].score;
  const thr = await query(t, { prefetch: [A(30), B(30)], query: { fusion: 'rrf' }, limit: 100, score_threshold: cut });
  sameHits(t, thr, full.filter((h) => h.score >= cut), 'threshold');
  t.true(thr.length >= 10 && thr.length < full.length);
  // Prefetch thresholds cut each prefetch before the fusion.
  const la = await query(t, A(30));
  const ta = la[11].score;
  const got = await query(t, { prefetch: [A(30, { score_threshold: ta }), B(30)], query: { fusion: 'rrf' }, limit: 100 });
  sameHits(t, got, rrfHere([la.filter((h) => h.score >= ta), await query(t, B(30))]), 'prefetch threshold');
  // An offset past the fused list is an empty page.
  t.deepEqual(await query(t, { prefetch: [A(3), B(3)], query: { fusion: 'rrf' }, offset: 50 }), []);
});

test('filters: the query filter applies to every prefetch, each prefetch filter to its own', async (t) => {
  const low = { must: [{ key: 'i', range: { lt: 120 } }] };
  const onlyX = { must: [{ key: 'group', match: { value: 'x' } }] };
  const both = { must: [low, onlyX] };
  const la = await query(t, A(20, { filter: both }));
  const lb = await query(t, B(20, { filter: low }));
  t.true(la.every((h) => h.id < 120 && h.id % 3 === 0));
  const got = await query(t, { prefetch: [A(20, { filter: onlyX }), B(20)], query: { fusion: 'dbsf' }, filter: low, limit: 30 });
  sameHits(t, got, dbsfHere([la, lb]).slice(0, 30), 'filtered dbsf');
});

test('a vector query over prefetches re-scores the candidates only (nested prefetches, brute force)', async (t) => {
  const inner = rrfHere([await query(t, A(20)), await query(t, B(20))]).slice(0, 15);
  const c = await query(t, B(10, { query: randomVector(rng(5), DIM_B) }));
  const candidates = new Set([...ids(inner), ...ids(c)]);
  const got = await query(t, {
    prefetch: [{ prefetch: [A(20), B(20)], query: { fusion: 'rrf' }, limit: 15 }, B(10, { query: randomVector(rng(5), DIM_B) })],
    query: qa2,
    using: 'a',
    limit: 8,
    params: EXACT,
  });
  const brute = [...candidates].map((id) => ({ id, score: score('Cosine', data[id].vector.a, qa2) })).sort(order);
  sameHits(t, got, brute.slice(0, 8), 'nested re-score');
  // Re-scored over the whole collection, the best points differ: the candidates bound the answer.
  const all = data.map((p) => ({ id: p.id, score: score('Cosine', p.vector.a, qa2) })).sort(order);
  t.notDeepEqual(ids(got), ids(all.slice(0, 8)));
  // With an offset and a threshold.
  // A hair below the sixth score: the engine's f32 score of that point may round either
  // side of this test's double (the WASM kernels sum in another order than AVX2).
  const cut = brute[5].score - 1e-5;
  const page = await query(t, { prefetch: [A(20), B(20)], query: { nearest: qa2 }, using: 'a', offset: 2, limit: 50, score_threshold: cut, params: EXACT });
  const c2 = new Set([...ids(await query(t, A(20))), ...ids(await query(t, B(20)))]);
  const brute2 = [...c2].map((id) => ({ id, score: score('Cosine', data[id].vector.a, qa2) })).sort(order).filter((h) => h.score >= cut);
  sameHits(t, page, brute2.slice(2), 're-score with offset and threshold');
  // Three levels deep.
  const deep = await query(t, { prefetch: { prefetch: { prefetch: [A(10), B(10)], query: { fusion: 'rrf' }, limit: 6 }, query: qa2, using: 'a', limit: 4, params: EXACT }, query: { fusion: 'dbsf' } });
  const l3 = rrfHere([await query(t, A(10)), await query(t, B(10))]).slice(0, 6);
  const l2 = l3.map((h) => ({ id: h.id, score: score('Cosine', data[h.id].vector.a, qa2) })).sort(order).slice(0, 4);
  sameHits(t, deep, dbsfHere([l2]), 'three levels');
});

test('order_by over prefetches orders the candidates by payload; a point id as query is excluded', async (t) => {
  const la = await query(t, A(12));
  const got = await query(t, { prefetch: A(12), query: { order_by: { key: 'i', direction: 'desc' } }, limit: 5 });
  t.deepEqual(ids(got), ids(la).sort((x, y) => y - x).slice(0, 5));

  const byId = await query(t, { prefetch: [{ query: 7, using: 'a', limit: 20, params: EXACT }, B(20)], query: { fusion: 'rrf' }, limit: 40 });
  t.false(ids(byId).includes(7), 'the example point is not among the results');
  const asVector = await query(t, { prefetch: [A(20, { query: data[7].vector.a, filter: { must_not: [{ has_id: [7] }] } }), B(20, { filter: { must_not: [{ has_id: [7] }] } })], query: { fusion: 'rrf' }, limit: 40 });
  sameHits(t, byId, asVector, 'id query = its vector without the point');
});

test('query batch runs hybrid queries, each as it runs alone', async (t) => {
  const one = { prefetch: [A(15), B(15)], query: { fusion: 'rrf' }, limit: 6 };
  const two = { prefetch: [A(15), B(15)], query: { fusion: 'dbsf' }, limit: 4, with_payload: true };
  const r = await api.ok(t, 'POST', QUERY_BATCH, { params: inC(C), body: { searches: [one, two, A(3)] } });
  t.is(r.length, 3);
  sameHits(t, r[0].points, await query(t, one), 'batch[0]');
  t.deepEqual(r[1].points, await query(t, two));
  sameHits(t, r[2].points, await query(t, A(3)), 'batch[2]');
});

test('lookup_from takes the example vector from another collection, which is not excluded', async (t) => {
  const src = other[3];
  const got = await query(t, { query: src.id, using: 'a', lookup_from: { collection: OTHER, vector: 'v' }, limit: 5, params: EXACT });
  sameHits(t, got, await query(t, A(5, { query: src.vector.v })), 'lookup nearest');
  const hy = await query(t, { prefetch: [{ query: src.id, using: 'a', lookup_from: { collection: OTHER, vector: 'v' }, limit: 10, params: EXACT }, B(10)], query: { fusion: 'rrf' }, limit: 5 });
  sameHits(t, hy, rrfHere([await query(t, A(10, { query: src.vector.v })), await query(t, B(10))]).slice(0, 5), 'lookup in a prefetch');
  const rec = await api.ok(t, 'POST', RECOMMEND, { params: inC(C), body: { positive: [src.id], using: 'a', lookup_from: { collection: OTHER, vector: 'v' }, limit: 4, params: EXACT } });
  sameHits(t, rec, await query(t, A(4, { query: normalize(src.vector.v) })), 'recommend with lookup');
  await api.error(t, 404, 'POST', QUERY, { params: inC(C), body: { query: src.id, using: 'a', lookup_from: { collection: 'nope', vector: 'v' } } }, /^Not found: Collection `nope` doesn't exist!/);
  await api.error(t, 404, 'POST', QUERY, { params: inC(C), body: { query: 5, using: 'a', lookup_from: { collection: OTHER, vector: 'v' } } }, /^Not found: No point with id 5 found/);
  await api.error(t, 400, 'POST', QUERY, { params: inC(C), body: { query: src.id, using: 'b', lookup_from: { collection: OTHER, vector: 'v' } } }, /Vector dimension error/);
});

test('refused hybrid bodies: the reference status and words, nothing run', async (t) => {
  const before = await api.ok(t, 'POST', COUNT, { params: inC(C), body: {} });
  const deep = (n: number): object => (n === 0 ? A(3) : { prefetch: deep(n - 1), query: { fusion: 'rrf' } });
  const cases: Array<[object, number, RegExp]> = [
    [{ prefetch: [A(3)] }, 400, /^Bad request: A query is needed to merge the prefetches/],
    [{ prefetch: [A(3)], query: { fusion: 'rrf' }, using: 'a' }, 400, /^Bad request: Fusion queries cannot be combined with the 'using' field/],
    [{ query: { fusion: 'rrf' } }, 400, /^Wrong input: cannot apply Fusion without prefetches/],
    [{ prefetch: [{ query: { fusion: 'dbsf' } }], query: { fusion: 'rrf' } }, 400, /^Wrong input: cannot apply Fusion without prefetches/],
    [{ prefetch: [A(3), B(3)], query: { rrf: { weights: [1] } } }, 400, /^Wrong input: Number of weights in RRF should match number of pre-fetches: got 1, expected 2/],
    [{ prefetch: [A(3)], query: { rrf: { k: 0 } } }, 422, /query\.rrf\.k: value 0 invalid/],
    [{ prefetch: [A(3)], query: { fusion: 'mean' } }, 400, /unknown variant "mean"/],
    [{ prefetch: [A(3)], query: { order_by: 'i' }, score_threshold: 0.1 }, 400, /^Bad request: Can't use score_threshold with an order_by query/],
    [{ prefetch: [A(3, { query: [1, 2] })], query: { fusion: 'rrf' } }, 400, /^Wrong input: Vector dimension error: expected dim: 8, got 2/],
    [{ prefetch: [A(3, { using: 'c' })], query: { fusion: 'rrf' } }, 400, /Not existing vector name error: c/],
    [{ prefetch: [{ query: 99999, using: 'a' }], query: { fusion: 'rrf' } }, 404, /^Not found: No point with id 99999 found/],
    [{ prefetch: 'x', query: { fusion: 'rrf' } }, 400, /prefetch: expected an object/],
    [{ prefetch: [A(0)], query: { fusion: 'rrf' } }, 422, /limit: value 0 invalid/],
    [deep(65), 400, /^Wrong input: prefetches depth 65 exceeds max depth 64$/],
    [{ prefetch: Array.from({ length: 1025 }, () => A(1)), query: { fusion: 'rrf' } }, 400, /more than 1024 prefetches/],
  ];
  for (const [body, status, message] of cases) await api.error(t, status, 'POST', QUERY, { params: inC(C), body }, message);
  // 64 levels are planned and answered.
  const at64 = await query(t, deep(64));
  sameHits(t, at64, rrfHere([await query(t, A(3))]), 'depth 64: each level keeps the ranks');
  t.deepEqual(await api.ok(t, 'POST', COUNT, { params: inC(C), body: {} }), before);
});

test('custom sharding: a hybrid query over the keys it names; hits carry their shard key', async (t) => {
  const K = 'hy_keys';
  await api.ok(t, 'PUT', COLLECTION, { params: inC(K), body: { vectors: { a: { size: DIM_A, distance: 'Cosine' }, b: { size: DIM_B, distance: 'Dot' } }, sharding_method: 'custom' } });
  for (const key of ['eu', 'us']) await api.ok(t, 'PUT', '/collections/{collection_name}/shards', { params: inC(K), body: { shard_key: key } });
  await api.ok(t, 'PUT', POINTS, { params: inC(K), query: { wait: true }, body: { points: data.slice(0, 60), shard_key: 'eu' } });
  await api.ok(t, 'PUT', POINTS, { params: inC(K), query: { wait: true }, body: { points: data.slice(60, 120), shard_key: 'us' } });
  const q = async (body: object) => (await api.ok(t, 'POST', QUERY, { params: inC(K), body })).points as Array<Hit & { shard_key?: string }>;
  const both = await q({ prefetch: [A(15), B(15)], query: { fusion: 'rrf' }, limit: 10, with_payload: true });
  sameHits(t, both, rrfHere([await q(A(15)), await q(B(15))]).slice(0, 10), 'both keys');
  for (const h of both) t.is(h.shard_key, h.id < 60 ? 'eu' : 'us');
  const us = await q({ prefetch: [A(15), B(15)], query: { fusion: 'rrf' }, limit: 10, shard_key: 'us' });
  sameHits(t, us, rrfHere([await q({ ...A(15), shard_key: 'us' }), await q({ ...B(15), shard_key: 'us' })]).slice(0, 10), 'key us');
  t.true(us.every((h) => h.id >= 60 && h.shard_key === 'us'));
});
