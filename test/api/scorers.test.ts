/**
 * Queries scored by a rule over several examples, through REST: the `best_score` and
 * `sum_scores` recommend strategies (`/points/recommend`, its batch and the Query API's
 * `recommend`), discovery (`/points/discover`, its batch, the Query API's `discover`)
 * and context search (`/points/discover` without a target, the Query API's `context`),
 * also inside a prefetch. Every answer is validated against the v1.18 document, and
 * its points and scores against the rules applied by hand to every point here, as the
 * reference defines them (https://qdrant.tech/documentation/concepts/explore/: "Best
 * score strategy", "Sum scores strategy", "Discovery search", "Context search"; the
 * server's source decides where the page and the document differ: best_score's
 * negative branch is -sigmoid(best negative), not its negated square). Example ids are
 * left out of the results; exact search equals the brute force, graph search finds
 * nearly as good points; sparse vectors are scored by exact scan; bad input gets the
 * reference's 400.
 */

import test, { type ExecutionContext } from 'ava';

import { ContractClient, spec } from '../support/contract';
import { COLLECTION, QUERY, QUERY_BATCH, RECOMMEND, RECOMMEND_BATCH, POINTS } from '../support/routes';
import { waitFor } from '../support/wait';

const DISCOVER = '/collections/{collection_name}/points/discover';
const DISCOVER_BATCH = '/collections/{collection_name}/points/discover/batch';

const DIM = 8;
const N = 400;
let api: ContractClient;

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}
const r = rng(9);
const vec = (): number[] => Array.from({ length: DIM }, () => Math.fround(r() * 2 - 1));
const data = new Map<number, number[]>(Array.from({ length: N }, (_, i) => [i + 1, vec()]));

type Distance = 'Cosine' | 'Euclid';
const norm = (v: number[]) => {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / n);
};
/** The reference's similarity: the dot product of normalised vectors for Cosine, the negated squared distance for Euclid. */
function sim(d: Distance, a: number[], b: number[]): number {
  if (d === 'Cosine') {
    const x = norm(a);
    const y = norm(b);
    return x.reduce((s, v, i) => s + v * y[i], 0);
  }
  return -a.reduce((s, v, i) => s + (v - b[i]) ** 2, 0);
}
const sigmoid = (x: number) => 0.5 * (x / (1 + Math.abs(x)) + 1);

type Ex = number | number[];
const vecOf = (e: Ex): number[] => (typeof e === 'number' ? data.get(e)! : e);
const ids = (xs: Ex[]): number[] => xs.filter((e): e is number => typeof e === 'number');

type Rule = { best: [Ex[], Ex[]] } | { sum: [Ex[], Ex[]] } | { discover: [Ex, Array<[Ex, Ex]>] } | { context: Array<[Ex, Ex]> };

function score(d: Distance, rule: Rule, v: number[]): number {
  const s = (e: Ex) => sim(d, vecOf(e), v);
  if ('best' in rule) {
    const p = Math.max(-Infinity, ...rule.best[0].map(s));
    const n = Math.max(-Infinity, ...rule.best[1].map(s));
    return p > n ? sigmoid(p) : -sigmoid(n);
  }
  if ('sum' in rule) return rule.sum[0].reduce<number>((a, e) => a + s(e), 0) - rule.sum[1].reduce<number>((a, e) => a + s(e), 0);
  if ('discover' in rule) {
    const rank = rule.discover[1].reduce<number>((a, [p, n]) => a + Math.sign(s(p) - s(n)), 0);
    return rank + sigmoid(s(rule.discover[0]));
  }
  return rule.context.reduce<number>((a, [p, n]) => {
    const x = Math.min(s(p) - s(n) - 2 ** -23, 0);
    return a + x / (1 + Math.abs(x));
  }, 0);
}

function examplesOf(rule: Rule): Ex[] {
  if ('best' in rule) return [...rule.best[0], ...rule.best[1]];
  if ('sum' in rule) return [...rule.sum[0], ...rule.sum[1]];
  if ('discover' in rule) return [rule.discover[0], ...rule.discover[1].flat()];
  return rule.context.flat();
}

/** Every point but the example ids, by the rule, best first (ties by id). */
function brute(d: Distance, rule: Rule, keep?: (id: number) => boolean): Array<{ id: number; score: number }> {
  const skip = new Set(ids(examplesOf(rule)));
  return [...data]
    .filter(([id]) => !skip.has(id) && (keep === undefined || keep(id)))
    .map(([id, v]) => ({ id, score: score(d, rule, v) }))
    .sort((a, b) => b.score - a.score || a.id - b.id);
}

const close = (a: number, b: number) => Math.abs(a - b) <= 2e-4 * Math.max(1, Math.abs(b));

/** Exact answers: the same scores rank by rank, each point's score its own, no example among them. */
function checkExact(t: ExecutionContext, d: Distance, rule: Rule, got: Array<{ id: number; score: number }>, limit: number, what: string, keep?: (id: number) => boolean): void {
  const want = brute(d, rule, keep);
  t.is(got.length, Math.min(limit, want.length), `${what}: count`);
  const own = new Map(want.map((w) => [w.id, w.score]));
  got.forEach((p, i) => {
    t.true(own.has(p.id), `${what}: ${p.id} is an example or filtered out`);
    t.true(close(p.score, own.get(p.id)!), `${what}: score of ${p.id} ${p.score} vs ${own.get(p.id)}`);
    t.true(close(p.score, want[i].score), `${what}: rank ${i} ${p.score} vs ${want[i].score}`);
  });
}

const pairs = (xs: Array<[Ex, Ex]>) => xs.map(([positive, negative]) => ({ positive, negative }));

/** The Query API's body for a rule. */
function queryOf(rule: Rule): object {
  if ('best' in rule) return { recommend: { positive: rule.best[0], negative: rule.best[1], strategy: 'best_score' } };
  if ('sum' in rule) return { recommend: { positive: rule.sum[0], negative: rule.sum[1], strategy: 'sum_scores' } };
  if ('discover' in rule) return { discover: { target: rule.discover[0], context: pairs(rule.discover[1]) } };
  return { context: pairs(rule.context) };
}

const RULES: Rule[] = [
  { best: [[3, 17, vec()], [40, 41]] },
  { best: [[], [5, 6]] },
  { sum: [[3, vec()], [9]] },
  { discover: [7, [[11, 12], [13, vec()], [14, 15]]] },
  { discover: [vec(), []] },
  { context: [[21, 22], [23, 24]] },
];

test.before(async (t) => {
  api = await ContractClient.start();
  const points = [...data].map(([id, vector]) => ({ id, vector, payload: { even: id % 2 === 0, g: id % 3 } }));
  for (const [name, distance, extra] of [
    ['sc_cos', 'Cosine', {}],
    // A graph (indexing from 1 KiB) over int8 codes, rescored on the originals.
    ['sc_euc', 'Euclid', { optimizers_config: { indexing_threshold: 1 }, quantization_config: { scalar: { type: 'int8', quantile: 0.99, always_ram: true } } }],
  ] as const) {
    await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: name }, body: { vectors: { size: DIM, distance }, ...extra } });
    await api.ok(t, 'PUT', POINTS, { params: { collection_name: name }, query: { wait: true }, body: { points } });
  }
  await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: 'sc_sparse' }, body: { vectors: { d: { size: DIM, distance: 'Dot' } }, sparse_vectors: { s: {} } } });
  await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: 'sc_multi' }, body: { vectors: { size: DIM, distance: 'Dot', multivector_config: { comparator: 'max_sim' } } } });
  await waitFor('sc_euc indexed', async () => {
    const ci = (await api.send('GET', COLLECTION, { params: { collection_name: 'sc_euc' } })).body?.result;
    return ci?.status === 'green' && ci?.indexed_vectors_count === N;
  });
});

test.after.always(async () => {
  await api?.stop();
});

test('every rule through the Query API equals the brute force (exact), with a filter too', async (t) => {
  for (const [name, d] of [['sc_cos', 'Cosine'], ['sc_euc', 'Euclid']] as const) {
    for (const rule of RULES) {
      const body = { query: queryOf(rule), limit: 7, params: { exact: true }, with_payload: true };
      t.deepEqual(spec().validateSchema('QueryRequest', body), []);
      const what = `${name} ${JSON.stringify(Object.keys(rule))}`;
      checkExact(t, d, rule, (await api.ok(t, 'POST', QUERY, { params: { collection_name: name }, body })).points, 7, what);
      const filtered = { ...body, filter: { must: [{ key: 'even', match: { value: true } }] }, offset: 2 };
      const got = (await api.ok(t, 'POST', QUERY, { params: { collection_name: name }, body: filtered })).points;
      const want = brute(d, rule, (id) => id % 2 === 0).slice(2, 9);
      t.deepEqual(got.map((p: { score: number }) => Math.round(p.score * 1e4)), want.map((w) => Math.round(w.score * 1e4)), `${what} filtered, offset 2`);
    }
  }
});

test('graph search by rule finds points as good as the exact k-th best', async (t) => {
  let hits = 0;
  let asked = 0;
  for (const rule of RULES) {
    const want = brute('Euclid', rule);
    const body = { query: queryOf(rule), limit: 10, params: { hnsw_ef: 128, quantization: { rescore: true, oversampling: 2 } } };
    const got = (await api.ok(t, 'POST', QUERY, { params: { collection_name: 'sc_euc' }, body })).points as Array<{ id: number; score: number }>;
    const own = new Map(want.map((w) => [w.id, w.score]));
    for (const p of got) t.true(own.has(p.id) && close(p.score, own.get(p.id)!), `graph score of ${p.id}`);
    const kth = want[9].score;
    hits += got.filter((p) => p.score >= kth - 1e-4 * Math.max(1, Math.abs(kth))).length;
    asked += 10;
  }
  t.true(hits / asked >= 0.9, `graph recall ${hits / asked}`);
});

test('/points/recommend and its batch take best_score and sum_scores', async (t) => {
  const best: Rule = RULES[0];
  const body = { positive: [3, 17, (best as { best: [Ex[], Ex[]] }).best[0][2]], negative: [40, 41], strategy: 'best_score', limit: 5, params: { exact: true } };
  t.deepEqual(spec().validateSchema('RecommendRequest', body), []);
  checkExact(t, 'Cosine', best, await api.ok(t, 'POST', RECOMMEND, { params: { collection_name: 'sc_cos' }, body }), 5, 'recommend best_score');
  const sum: Rule = { sum: [[3, 4], [9]] };
  const batch = { searches: [body, { positive: [3, 4], negative: [9], strategy: 'sum_scores', limit: 4, params: { exact: true } }] };
  t.deepEqual(spec().validateSchema('RecommendRequestBatch', batch), []);
  const [a, b] = await api.ok(t, 'POST', RECOMMEND_BATCH, { params: { collection_name: 'sc_cos' }, body: batch });
  checkExact(t, 'Cosine', best, a, 5, 'batch best_score');
  checkExact(t, 'Cosine', sum, b, 4, 'batch sum_scores');
  // Negatives alone are enough for these strategies, not for average_vector.
  checkExact(t, 'Cosine', RULES[1], await api.ok(t, 'POST', RECOMMEND, { params: { collection_name: 'sc_cos' }, body: { negative: [5, 6], strategy: 'best_score', limit: 3, params: { exact: true } } }), 3, 'negatives only');
  await api.error(t, 400, 'POST', RECOMMEND, { params: { collection_name: 'sc_cos' }, body: { positive: [], strategy: 'sum_scores', limit: 3 } }, 'Bad request: At least one positive or negative vector ID required with this strategy');
  await api.error(t, 400, 'POST', RECOMMEND, { params: { collection_name: 'sc_cos' }, body: { positive: [1], strategy: 'worst_score', limit: 3 } }, /unknown variant/);
});

test('grouped: /points/recommend/groups with best_score and the Query API\'s discover by groups rank larger scores first under Euclid', async (t) => {
  const best: Rule = { best: [[3, 17], [40]] };
  const body = { positive: [3, 17], negative: [40], strategy: 'best_score', group_by: 'g', group_size: 3, limit: 3, params: { exact: true } };
  t.deepEqual(spec().validateSchema('RecommendGroupsRequest', body), []);
  const res = await api.ok(t, 'POST', '/collections/{collection_name}/points/recommend/groups', { params: { collection_name: 'sc_euc' }, body });
  const want = brute('Euclid', best);
  t.is(res.groups.length, 3);
  for (const g of res.groups as Array<{ id: number; hits: Array<{ id: number; score: number }> }>) {
    t.deepEqual(g.hits.map((h) => h.id), want.filter((w) => w.id % 3 === g.id).slice(0, 3).map((w) => w.id), `group ${g.id}`);
  }
  const firsts = (res.groups as Array<{ hits: Array<{ score: number }> }>).map((g) => g.hits[0].score);
  t.deepEqual(firsts, [...firsts].sort((a, b) => b - a), 'groups by their best hit, larger first');
  const disc: Rule = { discover: [7, [[11, 12]]] };
  const qg = { query: queryOf(disc), group_by: 'g', group_size: 2, limit: 3, params: { exact: true } };
  const got = await api.ok(t, 'POST', '/collections/{collection_name}/points/query/groups', { params: { collection_name: 'sc_euc' }, body: qg });
  const wantD = brute('Euclid', disc);
  t.is(got.groups.length, 3);
  for (const g of got.groups as Array<{ id: number; hits: Array<{ id: number }> }>) {
    t.deepEqual(g.hits.map((h) => h.id), wantD.filter((w) => w.id % 3 === g.id).slice(0, 2).map((w) => w.id), `discover group ${g.id}`);
  }
});

test('/points/discover and its batch: discovery with a target, context without', async (t) => {
  const disc: Rule = { discover: [7, [[11, 12], [14, 15]]] };
  const body = { target: 7, context: [{ positive: 11, negative: 12 }, { positive: 14, negative: 15 }], limit: 6, params: { exact: true }, with_payload: ['even'] };
  t.deepEqual(spec().validateSchema('DiscoverRequest', body), []);
  const got = await api.ok(t, 'POST', DISCOVER, { params: { collection_name: 'sc_cos' }, body });
  checkExact(t, 'Cosine', disc, got, 6, 'discover');
  t.true(got.every((p: { payload: object }) => 'even' in p.payload));
  const ctx: Rule = { context: [[21, 22], [23, 24]] };
  const ctxBody = { context: [{ positive: 21, negative: 22 }, { positive: 23, negative: 24 }], limit: 5, params: { exact: true } };
  const targetOnly = { target: [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8], limit: 3, params: { exact: true } };
  const batch = { searches: [body, ctxBody, targetOnly] };
  t.deepEqual(spec().validateSchema('DiscoverRequestBatch', batch), []);
  const [a, b, c] = await api.ok(t, 'POST', DISCOVER_BATCH, { params: { collection_name: 'sc_euc' }, body: batch });
  checkExact(t, 'Euclid', disc, a, 6, 'batch discover');
  checkExact(t, 'Euclid', ctx, b, 5, 'batch context');
  checkExact(t, 'Euclid', { discover: [targetOnly.target, []] }, c, 3, 'batch target only');
  // Context scores are losses: at most 0.
  t.true(b.every((p: { score: number }) => p.score <= 0));
  await api.error(t, 400, 'POST', DISCOVER, { params: { collection_name: 'sc_cos' }, body: { limit: 3 } }, 'Bad request: target and/or context_pairs must be specified');
  await api.error(t, 400, 'POST', DISCOVER, { params: { collection_name: 'sc_cos' }, body: { target: 1, context: [{ positive: 2 }], limit: 3 } }, /missing field `negative`/);
  await api.error(t, 404, 'POST', DISCOVER, { params: { collection_name: 'sc_cos' }, body: { target: 100000, limit: 3 } }, /No point with id 100000 found/);
  await api.error(t, 400, 'POST', DISCOVER, { params: { collection_name: 'sc_cos' }, body: { target: [1, 2], limit: 3 } }, /dim/);
});

test('sparse vectors: every rule by exact scan equals the brute force over dot products', async (t) => {
  const sr = rng(31);
  const sparse = new Map<number, Map<number, number>>();
  for (let id = 1; id <= 120; id++) {
    const m = new Map<number, number>();
    for (let k = 0; k < 4; k++) m.set(Math.floor(sr() * 30), Math.fround(sr()));
    sparse.set(id, m);
  }
  const wire = (m: Map<number, number>) => ({ indices: [...m.keys()], values: [...m.values()] });
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: 'sc_sparse' }, query: { wait: true }, body: { points: [...sparse].map(([id, m]) => ({ id, vector: { s: wire(m) } })) } });
  const dot = (a: Map<number, number>, b: Map<number, number>) => [...a].reduce((s, [d, v]) => s + v * (b.get(d) ?? 0), 0);
  const raw = new Map([[3, 0.5], [7, 1]]);
  type SEx = number | Map<number, number>;
  const of = (e: SEx) => (typeof e === 'number' ? sparse.get(e)! : e);
  const ex = (e: SEx) => (typeof e === 'number' ? e : wire(e));
  const cases: Array<{ query: object; examples: SEx[]; score: (s: (e: SEx) => number) => number }> = [
    { query: { recommend: { positive: [1, raw], negative: [2], strategy: 'best_score' } }, examples: [1, raw, 2], score: (s) => (Math.max(s(1), s(raw)) > s(2) ? sigmoid(Math.max(s(1), s(raw))) : -sigmoid(s(2))) },
    { query: { recommend: { positive: [1, 4], negative: [2], strategy: 'sum_scores' } }, examples: [1, 4, 2], score: (s) => s(1) + s(4) - s(2) },
    { query: { discover: { target: 5, context: [{ positive: 6, negative: raw }] } }, examples: [5, 6, raw], score: (s) => Math.sign(s(6) - s(raw)) + sigmoid(s(5)) },
    { query: { context: [{ positive: 8, negative: 9 }] }, examples: [8, 9], score: (s) => { const x = Math.min(s(8) - s(9) - 2 ** -23, 0); return x / (1 + Math.abs(x)); } },
  ];
  for (const k of cases) {
    const body = { query: JSON.parse(JSON.stringify(k.query, (_key, v) => (v instanceof Map ? ex(v) : v))), using: 's', limit: 6 };
    t.deepEqual(spec().validateSchema('QueryRequest', body), []);
    const got = (await api.ok(t, 'POST', QUERY, { params: { collection_name: 'sc_sparse' }, body })).points as Array<{ id: number; score: number }>;
    const skip = new Set(k.examples.filter((e): e is number => typeof e === 'number'));
    const want = [...sparse].filter(([id]) => !skip.has(id)).map(([id, m]) => ({ id, score: k.score((e) => dot(of(e), m)) })).sort((a, b) => b.score - a.score || a.id - b.id).slice(0, 6);
    t.deepEqual(got.map((p) => p.id), want.map((w) => w.id), JSON.stringify(k.query, (_key, v) => (v instanceof Map ? [...v] : v)));
    got.forEach((p, i) => t.true(close(p.score, want[i].score), `sparse rank ${i}: ${p.score} vs ${want[i].score}`));
  }
  // In a prefetch, over the sparse vector, re-scored by a dense-free context query.
  const pf = { prefetch: { query: { context: [{ positive: 8, negative: 9 }] }, using: 's', limit: 10 }, query: { recommend: { positive: [1], strategy: 'sum_scores' } }, using: 's', limit: 3 };
  t.deepEqual(spec().validateSchema('QueryRequest', pf), []);
  const loss = (m: Map<number, number>) => {
    const x = Math.min(dot(sparse.get(8)!, m) - dot(sparse.get(9)!, m) - 2 ** -23, 0);
    return x / (1 + Math.abs(x));
  };
  const pool = [...sparse].filter(([id]) => ![1, 8, 9].includes(id)).map(([id, m]) => ({ id, m, score: loss(m) })).sort((a, b) => b.score - a.score || a.id - b.id).slice(0, 10);
  const wantPf = pool.map((p) => ({ id: p.id, score: dot(sparse.get(1)!, p.m) })).sort((a, b) => b.score - a.score || a.id - b.id).slice(0, 3);
  const gotPf = (await api.ok(t, 'POST', QUERY, { params: { collection_name: 'sc_sparse' }, body: pf })).points as Array<{ id: number; score: number }>;
  t.deepEqual(gotPf.map((p) => p.id), wantPf.map((w) => w.id), 'sparse prefetch');
});

test('rules inside prefetches, lookup_from, and what is refused', async (t) => {
  // A discovery prefetch re-scored by a context query over its candidates.
  const disc: Rule = { discover: [7, [[11, 12]]] };
  const ctx: Rule = { context: [[21, 22]] };
  const body = { prefetch: { query: queryOf(disc), limit: 30, params: { exact: true } }, query: queryOf(ctx), limit: 5 };
  t.deepEqual(spec().validateSchema('QueryRequest', body), []);
  const got = (await api.ok(t, 'POST', QUERY, { params: { collection_name: 'sc_cos' }, body })).points;
  const cands = new Set(brute('Cosine', disc).slice(0, 30).map((p) => p.id));
  const skip = new Set([7, 11, 12, 21, 22]);
  checkExact(t, 'Cosine', ctx, got, 5, 'prefetch', (id) => cands.has(id) && !skip.has(id));
  // Example ids read from another collection (same vectors here): nothing is excluded.
  const lk = { target: 7, context: [{ positive: 11, negative: 12 }], limit: 4, params: { exact: true }, lookup_from: { collection: 'sc_euc' } };
  const viaLookup = await api.ok(t, 'POST', DISCOVER, { params: { collection_name: 'sc_cos' }, body: lk });
  const all = [...data].map(([id, v]) => ({ id, score: score('Cosine', disc, v) })).sort((a, b) => b.score - a.score || a.id - b.id);
  viaLookup.forEach((p: { id: number; score: number }, i: number) => t.true(close(p.score, all[i].score), `lookup_from rank ${i}`));
  // A context query without pairs scores every point 0.
  const none = (await api.ok(t, 'POST', QUERY, { params: { collection_name: 'sc_cos' }, body: { query: { context: [] }, limit: 3 } })).points;
  t.deepEqual(none.map((p: { id: number; score: number }) => [p.id, p.score]), [[1, 0], [2, 0], [3, 0]]);
  await api.error(t, 400, 'POST', QUERY, { params: { collection_name: 'sc_multi' }, body: { query: { recommend: { positive: [[[1, 0, 0, 0, 0, 0, 0, 0]]], strategy: 'best_score' } } } }, /The `best_score` recommend strategy queries over the multivector \(unnamed\) are not supported by Quiver/);
  await api.error(t, 400, 'POST', QUERY, { params: { collection_name: 'sc_cos' }, body: { query: { discover: { target: 1 } } } }, /missing field `context`/);
  // A score threshold keeps scores at or above it, larger being better whatever the
  // distance (Euclid here): the rule's score is not a distance.
  const rule: Rule = { discover: [7, [[11, 12], [14, 15]]] };
  const want = brute('Euclid', rule);
  const threshold = want[12].score;
  const withThreshold = { query: queryOf(rule), limit: 50, score_threshold: threshold, params: { exact: true } };
  const kept = (await api.ok(t, 'POST', QUERY, { params: { collection_name: 'sc_euc' }, body: withThreshold })).points;
  t.is(kept.length, want.filter((w) => w.score >= threshold).length);
  t.true(kept.length >= 13 && kept.every((p: { score: number }) => p.score >= threshold));
});
