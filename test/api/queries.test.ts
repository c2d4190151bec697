/**
 * The query kinds that work on gathered candidates, and the distance matrix, through
 * REST against a real bin/quiver (two shards, so every answer is merged across shards):
 *
 * - `formula`: a table of expressions using every function, each checked against a
 *   direct evaluation written here over the same candidates (the prefetches asked as
 *   plain queries) and payloads; the error cases of the reference answer 400;
 * - `sample: random`: distinct points, the filter respected, the limit honoured, and a
 *   random pick of a prefetch's candidates;
 * - `mmr`: against maximal marginal relevance computed here over the exact candidates;
 * - `/points/search/matrix/pairs` and `/offsets`: against pairwise scores computed here.
 *
 * Every answer is validated against the v1.18 document (ContractClient) and the request
 * bodies against its schemas.
 */

import test, { type ExecutionContext } from 'ava';

import { ContractClient, spec } from '../support/contract';
import { higherIsBetter, normalize, randomVector, rng, score, type Distance } from '../support/vectors';
import { COLLECTION, INDEX, POINTS, QUERY } from '../support/routes';

const MATRIX_PAIRS = '/collections/{collection_name}/points/search/matrix/pairs';
const MATRIX_OFFSETS = '/collections/{collection_name}/points/search/matrix/offsets';

let api: ContractClient;
const C = 'qk';
const N = 160;
const DIM_A = 8;
const DIM_E = 4;
const TAGS = ['x', 'y', 'z', 'w'];

type Json = Record<string, any>;
interface Hit {
  id: number;
  score: number;
  payload?: Json;
  vector?: Record<string, number[]>;
}

const next = rng(2828);
const data = Array.from({ length: N }, (_, i) => {
  const payload: Json = {
    i,
    tag: TAGS[i % 4],
    price: Math.round(next() * 1000) / 10 + 1,
    loc: { lat: 40 + next() * 10, lon: -5 + next() * 10 },
    at: new Date(Date.UTC(2026, 0, 1) + Math.round((next() - 0.5) * 20 * 86_400) * 1000).toISOString(),
    one: [i % 7],
    many: [1, 2],
    meta: { rank: (i * 37) % 101 },
    words: `${TAGS[i % 4]} apple${i % 3}`,
  };
  if (i % 5 === 0) delete payload.price;
  return { id: i, vector: { a: randomVector(next, DIM_A), e: randomVector(next, DIM_E) }, payload };
});
const byId = new Map(data.map((p) => [p.id, p]));
const qa = randomVector(next, DIM_A);
const qe = randomVector(next, DIM_E);

test.before(async (t) => {
  api = await ContractClient.start();
  await api.ok(t, 'PUT', COLLECTION, {
    params: { collection_name: C },
    body: { vectors: { a: { size: DIM_A, distance: 'Cosine' }, e: { size: DIM_E, distance: 'Euclid' } }, shard_number: 2 },
  });
  await api.ok(t, 'PUT', INDEX, { params: { collection_name: C }, query: { wait: true }, body: { field_name: 'tag', field_schema: 'keyword' } });
  await api.ok(t, 'PUT', INDEX, { params: { collection_name: C }, query: { wait: true }, body: { field_name: 'words', field_schema: { type: 'text', tokenizer: 'word' } } });
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: C }, query: { wait: true }, body: { points: data } });
});

test.after.always(async () => {
  await api?.stop();
});

function checkBody(t: ExecutionContext, schema: string, body: unknown): void {
  t.deepEqual(spec().validateSchema(schema, body), [], `${schema}: ${JSON.stringify(body).slice(0, 200)}`);
}

async function query(t: ExecutionContext, body: Json): Promise<Hit[]> {
  checkBody(t, 'QueryRequest', body);
  const r = await api.ok(t, 'POST', QUERY, { params: { collection_name: C }, body });
  return (r?.points ?? []) as Hit[];
}

const close = (a: number, b: number) => Math.abs(a - b) <= 1e-4 * Math.max(1, Math.abs(b));

// -- formula ----------------------------------------------------------------------------------

const P0 = { query: qa, using: 'a', limit: 40, params: { exact: true } };
const P1 = { query: qe, using: 'e', limit: 40, params: { exact: true } };

interface Vars {
  id: number;
  s0: number | undefined;
  s1: number | undefined;
  p: Json;
}

const haversine = (a: { lat: number; lon: number }, b: { lat: number; lon: number }) => {
  const r = Math.PI / 180;
  const h = Math.sin(((b.lat - a.lat) * r) / 2) ** 2 + Math.cos(a.lat * r) * Math.cos(b.lat * r) * Math.sin(((b.lon - a.lon) * r) / 2) ** 2;
  return 2 * 6371008.8 * Math.asin(Math.sqrt(h));
};
const T0 = Date.UTC(2026, 0, 1) / 1000;
const secs = (s: string) => Math.floor(Date.parse(s) / 1000);
const ORIGIN = { lat: 45, lon: 0 };
const price = (v: Vars, dflt?: number) => {
  if (v.p.price !== undefined) return v.p.price as number;
  if (dflt !== undefined) return dflt;
  throw new Error('no price');
};

/** Each formula with its value computed directly from the point's scores and payload. */
const FORMULAS: Array<{ name: string; formula: unknown; defaults?: Json; value: (v: Vars) => number }> = [
  { name: 'constant', formula: 2.5, value: () => 2.5 },
  { name: '$score', formula: '$score', value: (v) => v.s0 ?? 0 },
  { name: '$score[1] with a default', formula: { neg: '$score[1]' }, defaults: { '$score[1]': -50 }, value: (v) => -(v.s1 ?? -50) },
  { name: 'payload with a default', formula: { sum: ['$score', { mult: [0.01, 'price'] }] }, defaults: { price: 3 }, value: (v) => (v.s0 ?? 0) + 0.01 * price(v, 3) },
  { name: 'a one-value array and a nested key', formula: { sum: ['one', { mult: ['meta.rank', 0.001] }] }, value: (v) => v.p.one[0] + v.p.meta.rank * 0.001 },
  {
    name: 'conditions',
    formula: { sum: ['$score', { mult: [0.5, { key: 'tag', match: { any: ['x', 'y'] } }] }, { mult: [0.25, { key: 'i', range: { gte: 100 } }] }] },
    value: (v) => (v.s0 ?? 0) + (['x', 'y'].includes(v.p.tag) ? 0.5 : 0) + (v.p.i >= 100 ? 0.25 : 0),
  },
  // Full-text matching as the index tokenizes: every token, in any order (a substring test would match none).
  { name: 'a full-text condition', formula: { sum: ['$score', { key: 'words', match: { text: 'apple1 x' } }] }, value: (v) => (v.s0 ?? 0) + (v.p.tag === 'x' && v.p.i % 3 === 1 ? 1 : 0) },
  { name: 'has_id condition', formula: { sum: ['$score', { has_id: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10] }] }, value: (v) => (v.s0 ?? 0) + (v.id >= 1 && v.id <= 10 ? 1 : 0) },
  { name: 'abs and neg', formula: { abs: { neg: { sum: ['$score[1]', -1] } } }, defaults: { '$score[1]': 0 }, value: (v) => Math.abs(-((v.s1 ?? 0) - 1)) },
  { name: 'sqrt and pow', formula: { sum: [{ sqrt: 'meta.rank' }, { pow: { base: '$score', exponent: 2 } }] }, value: (v) => Math.sqrt(v.p.meta.rank) + (v.s0 ?? 0) ** 2 },
  { name: 'exp, log10, ln', formula: { sum: [{ exp: '$score' }, { log10: { sum: ['meta.rank', 1] } }, { ln: { sum: ['one', 1] } }] }, value: (v) => Math.exp(v.s0 ?? 0) + Math.log10(v.p.meta.rank + 1) + Math.log(v.p.one[0] + 1) },
  { name: 'div', formula: { div: { left: 'meta.rank', right: { sum: ['one', 1] } } }, value: (v) => v.p.meta.rank / (v.p.one[0] + 1) },
  { name: 'div by zero with a default', formula: { div: { left: 'meta.rank', right: 'one', by_zero_default: -7 } }, value: (v) => (v.p.meta.rank === 0 ? 0 : v.p.one[0] === 0 ? -7 : v.p.meta.rank / v.p.one[0]) },
  // Without a price the condition is 0, and the product ends before `price` is read (else: no value, an error).
  { name: 'mult stops at a zero', formula: { mult: [{ must_not: [{ is_empty: { key: 'price' } }] }, 'price'] }, value: (v) => (v.p.price === undefined ? 0 : price(v)) },
  { name: 'geo_distance', formula: { geo_distance: { origin: ORIGIN, to: 'loc' } }, value: (v) => haversine(ORIGIN, v.p.loc) },
  {
    name: 'gauss_decay of a distance',
    formula: { gauss_decay: { x: { geo_distance: { origin: ORIGIN, to: 'loc' } }, scale: 300000, midpoint: 0.3 } },
    value: (v) => Math.exp((Math.log(0.3) / 300000 ** 2) * haversine(ORIGIN, v.p.loc) ** 2),
  },
  {
    name: 'exp_decay of datetimes',
    formula: { exp_decay: { x: { datetime_key: 'at' }, target: { datetime: '2026-01-01T00:00:00Z' }, scale: 86400, midpoint: 0.5 } },
    value: (v) => Math.exp((Math.log(0.5) / 86400) * Math.abs(secs(v.p.at) - T0)),
  },
  {
    name: 'lin_decay with defaults of its own',
    formula: { sum: [{ lin_decay: { x: 'meta.rank', target: 50, scale: 40 } }, { lin_decay: { x: '$score', midpoint: 0.2 } }] },
    value: (v) => Math.max(0, 1 - (0.5 / 40) * Math.abs(v.p.meta.rank - 50)) + Math.max(0, 1 - 0.8 * Math.abs(v.s0 ?? 0)),
  },
];

let candidates: Vars[] = [];

test.serial('formula: the prefetches asked as plain queries give the candidates', async (t) => {
  const l0 = await query(t, P0);
  const l1 = await query(t, P1);
  const all = new Map<number, Vars>();
  for (const h of l0) all.set(h.id, { id: h.id, s0: h.score, s1: undefined, p: byId.get(h.id)!.payload });
  for (const h of l1) {
    const v = all.get(h.id) ?? { id: h.id, s0: undefined, s1: undefined, p: byId.get(h.id)!.payload };
    v.s1 = h.score;
    all.set(h.id, v);
  }
  candidates = [...all.values()];
  t.true(candidates.length > 40 && candidates.length < 80, `${candidates.length} candidates, from two lists that overlap in part`);
  t.true(candidates.some((v) => v.p.tag === 'x' && v.p.i % 3 === 1), 'some candidates match the full-text condition');
});

for (const f of FORMULAS) {
  test.serial(`formula: ${f.name}`, async (t) => {
    const q: Json = { formula: f.formula };
    if (f.defaults) q.defaults = f.defaults;
    const hits = await query(t, { prefetch: [P0, P1], query: q, limit: 12, with_payload: ['i'] });
    const expected = candidates.map((v) => ({ id: v.id, score: f.value(v) })).sort((a, b) => b.score - a.score || a.id - b.id).slice(0, 12);
    t.is(hits.length, expected.length);
    hits.forEach((h, k) => {
      const v = candidates.find((c) => c.id === h.id);
      t.truthy(v, `${h.id} is a candidate`);
      t.true(close(h.score, f.value(v!)), `${f.name}: point ${h.id} scored ${h.score}, computed ${f.value(v!)}`);
      t.true(close(h.score, expected[k].score), `${f.name}: rank ${k} scored ${h.score}, expected ${expected[k].score}`);
      t.is(h.payload?.i, h.id);
    });
  });
}

test.serial('formula: score_threshold, offset and a nested prefetch', async (t) => {
  const f = { sum: ['$score', { mult: [0.5, { key: 'tag', match: { value: 'x' } }] }] };
  const value = (v: Vars) => (v.s0 ?? 0) + (v.p.tag === 'x' ? 0.5 : 0);
  const expected = candidates.map((v) => ({ id: v.id, score: value(v) })).sort((a, b) => b.score - a.score || a.id - b.id);
  const hits = await query(t, { prefetch: [P0, P1], query: { formula: f }, limit: 5, offset: 3 });
  t.deepEqual(hits.map((h) => h.id), expected.slice(3, 8).map((e) => e.id));
  const above = await query(t, { prefetch: [P0, P1], query: { formula: f }, limit: 100, score_threshold: 0.6 });
  t.deepEqual(above.map((h) => h.id), expected.filter((e) => e.score >= 0.6).map((e) => e.id));
  // A formula inside a prefetch, re-scored by a vector above it.
  const nested = await query(t, { prefetch: { prefetch: [P0, P1], query: { formula: f }, limit: 10 }, query: qa, using: 'a', limit: 10 });
  t.deepEqual(nested.map((h) => h.id).sort((x, y) => x - y), expected.slice(0, 10).map((e) => e.id).sort((x, y) => x - y));
});

const BAD: Array<{ name: string; body: Json; message: RegExp; status?: number }> = [
  { name: 'a variable neither in the payload nor in the defaults', body: { prefetch: [P0], query: { formula: { sum: ['$score', 'nothing_here'] } } }, message: /nothing_here.*no value/ },
  { name: 'a payload value that is not a number', body: { prefetch: [P0], query: { formula: { mult: [1, 'tag'] } } }, message: /tag.*not a number/ },
  { name: 'a payload array of several values', body: { prefetch: [P0], query: { formula: { sum: ['many'] } } }, message: /many.*not a number/ },
  { name: 'the square root of a negative number', body: { prefetch: [P0], query: { formula: { sqrt: { neg: { sum: ['meta.rank', 1] } } } } }, message: /non-finite/ },
  { name: 'a division by zero without a default', body: { prefetch: [P0], query: { formula: { div: { left: 1, right: { mult: ['$score', 0] } } } } }, message: /non-finite/ },
  { name: 'the logarithm of zero', body: { prefetch: [P0], query: { formula: { ln: { mult: [0, '$score'] } } } }, message: /non-finite/ },
  { name: 'an overflowing power', body: { prefetch: [P0], query: { formula: { pow: { base: 10, exponent: 400 } } } }, message: /non-finite/ },
  { name: 'a geo distance to a number', body: { prefetch: [P0], query: { formula: { geo_distance: { origin: ORIGIN, to: 'price' } } } }, message: /geo point/ },
  { name: 'a formula without prefetches', body: { query: { formula: '$score' } }, message: /prefetch/ },
  { name: 'an exp_decay midpoint of 1', body: { prefetch: [P0], query: { formula: { exp_decay: { x: 1, midpoint: 1 } } } }, message: /midpoint/ },
  { name: 'a lin_decay scale of 0', body: { prefetch: [P0], query: { formula: { lin_decay: { x: 1, scale: 0 } } } }, message: /scale/ },
  { name: 'an unknown reserved word', body: { prefetch: [P0], query: { formula: '$points' } }, message: /reserved/ },
  { name: 'an invalid datetime', body: { prefetch: [P0], query: { formula: { datetime: 'yesterday' } } }, message: /datetime/ },
  { name: 'an invalid condition', body: { prefetch: [P0], query: { formula: { key: 'tag', nothing: 1 } } }, message: /condition/ },
];

for (const b of BAD) {
  test(`formula: ${b.name} is refused`, async (t) => {
    await api.error(t, b.status ?? 400, 'POST', QUERY, { params: { collection_name: C }, body: b.body }, b.message);
  });
}

test('formula: deep nesting is refused with a 400, not a failure', async (t) => {
  const nest = (n: number) => {
    let f: unknown = '$score';
    for (let i = 0; i < n; i++) f = { neg: f };
    return f;
  };
  // Deeper than Quiver's bound on formulas (64), within the JSON body's (127 levels of objects).
  await api.error(t, 400, 'POST', QUERY, { params: { collection_name: C }, body: { prefetch: [P0], query: { formula: nest(90) } } }, /nested deeper/);
  const raw = `{"prefetch": ${JSON.stringify(P0)}, "query": {"formula": ${'{"neg": '.repeat(5000)}"$score"${'}'.repeat(5000)}}}`;
  await api.error(t, 400, 'POST', QUERY, { params: { collection_name: C }, raw });
  let g: unknown = '$score';
  for (let i = 0; i < 40; i++) g = { neg: g };
  const hits = await query(t, { prefetch: [P0], query: { formula: g }, limit: 3 });
  t.is(hits.length, 3);
});

// -- sample ----------------------------------------------------------------------------------

test('sample: distinct random points matching the filter, as many as asked', async (t) => {
  const filter = { must: [{ key: 'tag', match: { value: 'x' } }] };
  const matching = data.filter((p) => p.payload.tag === 'x').map((p) => p.id);
  const a = await query(t, { query: { sample: 'random' }, filter, limit: 15, with_payload: true });
  t.is(a.length, 15);
  t.is(new Set(a.map((h) => h.id)).size, 15);
  for (const h of a) {
    t.is(h.payload?.tag, 'x');
    t.is(h.score, 0);
  }
  const b = await query(t, { query: { sample: 'random' }, filter, limit: 15 });
  t.notDeepEqual(a.map((h) => h.id), b.map((h) => h.id), 'two samples of 15 out of 40 differ');
  const all = await query(t, { query: { sample: 'random' }, filter, limit: 100 });
  t.deepEqual(all.map((h) => h.id).sort((x, y) => x - y), matching);
  const whole = await query(t, { query: { sample: 'random' }, limit: N + 10 });
  t.is(new Set(whole.map((h) => h.id)).size, N);
});

test('sample: a random pick of the prefetch candidates', async (t) => {
  const l0 = new Set((await query(t, { ...P0, limit: 20 })).map((h) => h.id));
  const hits = await query(t, { prefetch: { ...P0, limit: 20 }, query: { sample: 'random' }, limit: 8 });
  t.is(hits.length, 8);
  t.is(new Set(hits.map((h) => h.id)).size, 8);
  for (const h of hits) t.true(l0.has(h.id));
  t.is((await query(t, { prefetch: { ...P0, limit: 5 }, query: { sample: 'random' }, limit: 8 })).length, 5);
  await api.error(t, 400, 'POST', QUERY, { params: { collection_name: C }, body: { query: { sample: 'sequential' } } }, /random/);
});

// -- mmr -------------------------------------------------------------------------------------

/** The similarity MMR ranks by: larger is closer (Euclid: minus the squared distance). */
function sim(d: Distance, a: number[], b: number[]): number {
  if (d === 'Cosine') return normalize(a).reduce((s, x, i) => s + x * normalize(b)[i], 0);
  if (d === 'Euclid') return -a.reduce((s, x, i) => s + (x - b[i]) ** 2, 0);
  return a.reduce((s, x, i) => s + x * b[i], 0);
}

function mmrHere(d: Distance, q: number[], cands: Array<{ id: number; v: number[] }>, lambda: number, limit: number): number[] {
  const chosen: typeof cands = [];
  const left = [...cands];
  while (chosen.length < limit && left.length > 0) {
    let best = 0;
    let bestScore = -Infinity;
    left.forEach((c, k) => {
      const rel = sim(d, q, c.v);
      const div = chosen.length === 0 ? 0 : Math.max(...chosen.map((s) => sim(d, c.v, s.v)));
      const s = chosen.length === 0 ? rel : lambda * rel - (1 - lambda) * div;
      if (s > bestScore) {
        bestScore = s;
        best = k;
      }
    });
    chosen.push(left.splice(best, 1)[0]);
  }
  return chosen.map((c) => c.id);
}

for (const [using, d, q] of [['a', 'Cosine', qa], ['e', 'Euclid', qe]] as const) {
  test(`mmr over ${d}: the reference's greedy selection over the nearest candidates, with their search scores`, async (t) => {
    const ranked = data
      .map((p) => ({ id: p.id, v: p.vector[using], s: score(d, q, p.vector[using]) }))
      .sort((a, b) => (higherIsBetter(d) ? b.s - a.s : a.s - b.s));
    for (const diversity of [0, 0.5, 0.9]) {
      const hits = await query(t, { query: { nearest: q, mmr: { diversity, candidates_limit: 30 } }, using, limit: 8, params: { exact: true } });
      const expected = mmrHere(d, q, ranked.slice(0, 30), 1 - diversity, 8);
      t.deepEqual(hits.map((h) => h.id), expected, `diversity ${diversity}`);
      for (const h of hits) t.true(close(h.score, ranked.find((r) => r.id === h.id)!.s), `score of ${h.id} is its distance to the query`);
    }
    // Without candidates_limit the limit is the number of candidates: the plain nearest list.
    const plain = await query(t, { query: { nearest: q, mmr: { diversity: 0.7 } }, using, limit: 6, params: { exact: true } });
    t.deepEqual(plain.map((h) => h.id).sort((x, y) => x - y), ranked.slice(0, 6).map((r) => r.id).sort((x, y) => x - y));
  });
}

test('mmr: with a filter, over a prefetch, and its bounds', async (t) => {
  const filter = { must: [{ key: 'tag', match: { value: 'y' } }] };
  const ranked = data
    .filter((p) => p.payload.tag === 'y')
    .map((p) => ({ id: p.id, v: p.vector.a, s: score('Cosine', qa, p.vector.a) }))
    .sort((a, b) => b.s - a.s);
  const hits = await query(t, { query: { nearest: qa, mmr: { diversity: 0.6, candidates_limit: 20 } }, using: 'a', filter, limit: 5, params: { exact: true } });
  t.deepEqual(hits.map((h) => h.id), mmrHere('Cosine', qa, ranked.slice(0, 20), 0.4, 5));
  const pre = await query(t, { prefetch: { query: qa, using: 'a', filter, limit: 20, params: { exact: true } }, query: { nearest: qa, mmr: { diversity: 0.6 } }, using: 'a', limit: 5, params: { exact: true } });
  t.deepEqual(pre.map((h) => h.id), mmrHere('Cosine', qa, ranked.slice(0, 5), 0.4, 5));
  await api.error(t, 422, 'POST', QUERY, { params: { collection_name: C }, body: { query: { nearest: qa, mmr: { diversity: 1.5 } }, using: 'a' } }, /diversity/);
  await api.error(t, 422, 'POST', QUERY, { params: { collection_name: C }, body: { query: { nearest: qa, mmr: { candidates_limit: 20000 } }, using: 'a' } }, /candidates_limit/);
});

// -- distance matrix ---------------------------------------------------------------------------

interface Offsets {
  offsets_row: number[];
  offsets_col: number[];
  scores: number[];
  ids: number[];
}

/** Each sampled point's `limit` nearest others in the sample, computed here. */
function matrixHere(d: Distance, using: 'a' | 'e', ids: number[], limit: number): Array<{ a: number; b: number; score: number }> {
  const out: Array<{ a: number; b: number; score: number }> = [];
  for (const a of ids) {
    const row = ids
      .filter((b) => b !== a)
      .map((b) => ({ a, b, score: score(d, byId.get(a)!.vector[using], byId.get(b)!.vector[using]) }))
      .sort((x, y) => (higherIsBetter(d) ? y.score - x.score : x.score - y.score) || x.b - y.b);
    out.push(...row.slice(0, limit));
  }
  return out;
}

function samePairs(t: ExecutionContext, got: Array<{ a: number; b: number; score: number }>, want: Array<{ a: number; b: number; score: number }>): void {
  t.is(got.length, want.length);
  got.forEach((p, k) => {
    t.is(p.a, want[k].a);
    t.true(close(p.score, want[k].score), `pair ${k}: ${p.score} vs ${want[k].score}`);
    // A tie may swap two neighbours; the neighbour's own score must match.
    t.true(close(p.score, want.find((w) => w.a === p.a && w.b === p.b)?.score ?? NaN), `pair ${p.a}-${p.b} is among the nearest`);
  });
}

for (const [using, d] of [['a', 'Cosine'], ['e', 'Euclid']] as const) {
  test(`matrix over ${d}: pairs and offsets against pairwise scores computed here`, async (t) => {
    const filter = { must_not: [{ key: 'tag', match: { value: 'w' } }] };
    const body = { filter, sample: 25, limit: 4, using };
    checkBody(t, 'SearchMatrixRequest', body);
    const pairs = (await api.ok(t, 'POST', MATRIX_PAIRS, { params: { collection_name: C }, body })).pairs as Array<{ a: number; b: number; score: number }>;
    const sampled = [...new Set(pairs.map((p) => p.a))];
    t.is(sampled.length, 25);
    for (const id of sampled) t.not(byId.get(id)!.payload.tag, 'w');
    samePairs(t, pairs, matrixHere(d, using, sampled, 4));

    const off = (await api.ok(t, 'POST', MATRIX_OFFSETS, { params: { collection_name: C }, body })) as Offsets;
    t.is(off.ids.length, 25);
    t.is(new Set(off.ids).size, 25);
    t.is(off.scores.length, 25 * 4);
    t.is(off.offsets_row.length, off.scores.length);
    t.is(off.offsets_col.length, off.scores.length);
    for (const id of off.ids) t.not(byId.get(id)!.payload.tag, 'w');
    const asPairs = off.scores.map((s, k) => ({ a: off.ids[off.offsets_row[k]], b: off.ids[off.offsets_col[k]], score: s }));
    samePairs(t, asPairs, matrixHere(d, using, off.ids, 4));
  });
}

test('matrix: the defaults (sample 10, limit 3), a sample larger than the matches, and the bounds', async (t) => {
  const pairs = (await api.ok(t, 'POST', MATRIX_PAIRS, { params: { collection_name: C }, body: { using: 'a' } })).pairs as unknown[];
  t.is(pairs.length, 30);
  const few = { must: [{ has_id: [3, 5, 8] }] };
  const off = (await api.ok(t, 'POST', MATRIX_OFFSETS, { params: { collection_name: C }, body: { using: 'e', filter: few, sample: 10, limit: 5 } })) as Offsets;
  t.deepEqual([...off.ids].sort((a, b) => a - b), [3, 5, 8]);
  t.is(off.scores.length, 6);
  await api.error(t, 422, 'POST', MATRIX_PAIRS, { params: { collection_name: C }, body: { using: 'a', sample: 1 } }, /sample/);
  await api.error(t, 422, 'POST', MATRIX_OFFSETS, { params: { collection_name: C }, body: { using: 'a', limit: 0 } }, /limit/);
  await api.error(t, 400, 'POST', MATRIX_PAIRS, { params: { collection_name: C }, body: { using: 'nope' } });
  await api.error(t, 404, 'POST', MATRIX_PAIRS, { params: { collection_name: 'missing' }, body: {} });
});

test('matrix: points without the vector are never sampled', async (t) => {
  const P = 'qk_partial';
  await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: P }, body: { vectors: { a: { size: 2, distance: 'Dot' }, e: { size: 2, distance: 'Euclid' } } } });
  const points = Array.from({ length: 8 }, (_, i) => ({ id: i + 1, vector: i % 2 === 0 ? { a: [i, 1], e: [1, i] } : { a: [1, i] } }));
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: P }, query: { wait: true }, body: { points } });
  const all = (await api.ok(t, 'POST', MATRIX_OFFSETS, { params: { collection_name: P }, body: { using: 'e', sample: 10, limit: 1 } })) as Offsets;
  // A has_vector condition in a formula: 1 for the points that have `e`.
  const f = await api.ok(t, 'POST', QUERY, { params: { collection_name: P }, body: { prefetch: { query: [1, 1], using: 'a', limit: 8 }, query: { formula: { sum: [{ has_vector: 'e' }, { mult: ['$score', 0.001] }] } }, limit: 8 } });
  t.deepEqual((f.points as Hit[]).slice(0, 4).map((h) => h.id).sort((a, b) => a - b), [1, 3, 5, 7]);
  t.true((f.points as Hit[]).every((h) => (h.score >= 1) === (h.id % 2 === 1)));
  t.deepEqual([...all.ids].sort((a, b) => a - b), [1, 3, 5, 7]);
  // Samples of 2: whichever points are drawn first, the answer holds 2 points that have `e`.
  for (let k = 0; k < 6; k++) {
    const two = (await api.ok(t, 'POST', MATRIX_OFFSETS, { params: { collection_name: P }, body: { using: 'e', sample: 2, limit: 1 } })) as Offsets;
    t.is(two.ids.length, 2);
    for (const id of two.ids) t.is(id % 2, 1);
    t.is(two.scores[0], score('Euclid', [1, two.ids[0] - 1], [1, two.ids[1] - 1]));
  }
});

test('formula: its conditions are internal reads, not held to strict mode query limits', async (t) => {
  const S = 'qk_strict';
  await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: S }, body: { vectors: { size: 2, distance: 'Dot' }, strict_mode_config: { enabled: true, max_query_limit: 5 } } });
  const points = Array.from({ length: 20 }, (_, i) => ({ id: i + 1, vector: [Math.cos(i), Math.sin(i)], payload: { odd: i % 2 === 1 } }));
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: S }, query: { wait: true }, body: { points } });
  const hits = (await api.ok(t, 'POST', QUERY, {
    params: { collection_name: S },
    body: { prefetch: [{ query: [1, 0], limit: 5 }, { query: [-1, 0], limit: 5 }], query: { formula: { sum: ['$score', '$score[1]', { key: 'odd', match: { value: true } }] } }, limit: 5 },
  })).points as Hit[];
  t.is(hits.length, 5);
  const p = new Map(points.map((x) => [x.id, x]));
  for (const h of hits) {
    const v = p.get(h.id)!.vector;
    // The point is in one of the two prefetches (its score there is its dot with that query; 0 from the other).
    const expected = Math.max(v[0], -v[0]) + (p.get(h.id)!.payload.odd ? 1 : 0);
    t.true(close(h.score, expected), `${h.id}: ${h.score} vs ${expected}`);
  }
});

/** MaxSim of `q`'s rows against `d`'s, Cosine: the sum over q's rows of the best cosine to one of d's rows. */
function maxSim(q: number[][], d: number[][]): number {
  return q.reduce((s, r) => s + Math.max(...d.map((x) => normalize(r).reduce((a, v, i) => a + v * normalize(x)[i], 0))), 0);
}

test('multivectors: mmr and the matrix by MaxSim, each point of a pair taken as the query', async (t) => {
  const M = 'qk_multi';
  await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: M }, body: { vectors: { m: { size: 3, distance: 'Cosine', multivector_config: { comparator: 'max_sim' } } }, shard_number: 2 } });
  const gen = rng(31);
  const points = Array.from({ length: 40 }, (_, i) => ({ id: i + 1, vector: { m: Array.from({ length: 1 + (i % 3) }, () => randomVector(gen, 3)) } }));
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: M }, query: { wait: true }, body: { points } });
  const rows = new Map(points.map((p) => [p.id, p.vector.m]));
  const q = [randomVector(gen, 3), randomVector(gen, 3)];
  const ranked = points.map((p) => ({ id: p.id, s: maxSim(q, p.vector.m) })).sort((a, b) => b.s - a.s);

  const mq = { query: { nearest: q, mmr: { diversity: 0.5, candidates_limit: 15 } }, using: 'm', limit: 6, params: { exact: true } };
  checkBody(t, 'QueryRequest', mq);
  const hits = (await api.ok(t, 'POST', QUERY, { params: { collection_name: M }, body: mq })).points as Hit[];
  // MMR here: relevance MaxSim(q, c); diversity MaxSim(c, s) with the candidate as the query.
  const cands = ranked.slice(0, 15);
  const chosen: number[] = [];
  while (chosen.length < 6) {
    let best = -1;
    let bestScore = -Infinity;
    for (const c of cands) {
      if (chosen.includes(c.id)) continue;
      const s = chosen.length === 0 ? c.s : 0.5 * c.s - 0.5 * Math.max(...chosen.map((id) => maxSim(rows.get(c.id)!, rows.get(id)!)));
      if (s > bestScore) {
        bestScore = s;
        best = c.id;
      }
    }
    chosen.push(best);
  }
  t.deepEqual(hits.map((h) => h.id), chosen);
  for (const h of hits) t.true(close(h.score, ranked.find((r) => r.id === h.id)!.s));

  const off = (await api.ok(t, 'POST', MATRIX_OFFSETS, { params: { collection_name: M }, body: { using: 'm', sample: 12, limit: 2 } })) as Offsets;
  t.is(off.ids.length, 12);
  off.scores.forEach((s, k) => {
    const a = off.ids[off.offsets_row[k]];
    const b = off.ids[off.offsets_col[k]];
    t.true(close(s, maxSim(rows.get(a)!, rows.get(b)!)), `${a} → ${b}`);
    const best = off.ids.filter((id) => id !== a).map((id) => maxSim(rows.get(a)!, rows.get(id)!)).sort((x, y) => y - x);
    t.true(close(s, best[k % 2]), `row of ${a}, neighbour ${k % 2}`);
  });
});
