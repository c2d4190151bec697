/**
 * Contract test of qdrant.Points over a real bin/quiver: every served method is called,
 * its answer decoded with the contract's types (test/grpc/client.ts) and compared with
 * the REST answer to the same request over the same data (same points, same payloads and
 * vectors, same scores in the same order); writes made through gRPC on one collection
 * and through REST on its twin leave both the same; every error kind answers its status
 * code with the REST text, and a refused request changes nothing.
 *
 * One server for the file. The read-only collections `pts` (unnamed vectors, integer and
 * UUID ids) and `named` (two named vectors) are filled once in `before` through REST;
 * tests that write use collections of their own.
 */

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import test, { type ExecutionContext } from 'ava';

import { mapToJson } from '../../ts/api/grpc/convert/value';
import { randomVector, rng } from '../support/vectors';
import { codeName, PROTO_DIR, startGrpcQuiver, type GrpcQuiver, type QdrantGrpc } from './client';

let q: GrpcQuiver;
let g: QdrantGrpc;

type Id = number | string;
type Json = Record<string, any>;

const DIM = 4;
const N = 60;
const CITIES = ['Berlin', 'London', 'Paris', 'Rome'];
const uuid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;

/** The points of `pts`: integer ids, and UUIDs for every fifth. */
const data = (() => {
  const next = rng(17);
  return Array.from({ length: N }, (_, i) => ({
    id: i % 5 === 4 ? uuid(i) : i + 1,
    vector: randomVector(next, DIM),
    payload: { i, city: CITIES[i % 4], price: i * 0.25, tags: i % 3 === 0 ? ['a', 'b'] : ['c'], meta: { even: i % 2 === 0, rank: N - i } } as Json,
  }));
})();

const named = (() => {
  const next = rng(5);
  return Array.from({ length: 20 }, (_, i) => ({
    id: i + 1,
    vector: i % 4 === 3 ? { text: randomVector(next, 2) } : { image: randomVector(next, DIM), text: randomVector(next, 2) },
    payload: { kind: i % 2 === 0 ? 'cat' : 'dog', i },
  }));
})();

// -- REST, for the twin of each call --------------------------------------------------------

async function rest(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${q.server.url}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? undefined : JSON.parse(text) };
}

/** The `result` of a REST call that must succeed. */
async function restOk(t: ExecutionContext, method: string, path: string, body?: unknown): Promise<any> {
  const r = await rest(method, path, body);
  if (r.status !== 200) t.fail(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.result;
}

// -- gRPC answers in REST's shapes ------------------------------------------------------------

function idOf(p: Json | undefined): Id | undefined {
  if (p === undefined) return undefined;
  return p.point_id_options === 'uuid' ? p.uuid : Number(p.num);
}

function vectorsOf(v: Json): unknown {
  const one = (x: Json) => x.dense.data;
  if (v.vectors_options === 'vector') return one(v.vector);
  return Object.fromEntries(Object.entries(v.vectors.vectors ?? {}).map(([k, x]) => [k, one(x as Json)]));
}

/** A RetrievedPoint or ScoredPoint as REST writes the same record (scores to 32 bits: the contract's `float`). */
function asRest(p: Json): Json {
  const out: Json = { id: idOf(p.id) };
  if (p.version !== undefined) out.version = Number(p.version);
  if (p.score !== undefined) out.score = p.score;
  if (p.payload !== undefined) out.payload = mapToJson(p.payload, 'payload');
  if (p.vectors !== undefined) out.vector = vectorsOf(p.vectors);
  if (p.shard_key !== undefined) out.shard_key = p.shard_key.keyword ?? Number(p.shard_key.number);
  if (p.order_value !== undefined) out.order_value = p.order_value.int !== undefined ? Number(p.order_value.int) : p.order_value.float;
  return out;
}

/** REST records with the score a `float` field carries, and payloads of only what gRPC can send back (an empty one is none). */
function restShape(p: Json): Json {
  const out: Json = { ...p };
  if (typeof out.score === 'number') out.score = Math.fround(out.score);
  if (out.vector !== undefined && out.vector !== null) {
    out.vector = Array.isArray(out.vector) ? out.vector.map(Math.fround) : Object.fromEntries(Object.entries(out.vector).map(([k, v]) => [k, (v as number[]).map(Math.fround)]));
  }
  return out;
}

function sameRecords(t: ExecutionContext, viaGrpc: Json[], viaRest: Json[], what: string): void {
  t.deepEqual(viaGrpc.map(asRest), viaRest.map(restShape), what);
}

const pid = (id: Id) => (typeof id === 'number' ? { num: String(id) } : { uuid: id });
const inC = (collection_name: string) => ({ collection_name });
const cityIs = (city: string) => ({ field: { key: 'city', match: { keyword: city } } });
const dense = (data: number[]) => ({ dense: { data } });

async function expectCode(t: ExecutionContext, rpc: string, req: object, code: string, message?: RegExp): Promise<string> {
  const err = await g.fail('Points', rpc, req);
  t.is(codeName(err.code), code, `${rpc}: ${err.details}`);
  if (message !== undefined) t.regex(err.details, message, rpc);
  return err.details;
}

async function fill(t: ExecutionContext, name: string, body: object, points: object[]): Promise<void> {
  await restOk(t, 'PUT', `/collections/${name}`, body);
  await restOk(t, 'PUT', `/collections/${name}/points?wait=true`, { points });
}

const PLAIN_CONFIG = { vectors: { size: DIM, distance: 'Dot' } };
const NAMED_CONFIG = { vectors: { image: { size: DIM, distance: 'Cosine' }, text: { size: 2, distance: 'Euclid' } } };

test.before(async (t) => {
  q = await startGrpcQuiver();
  g = q.client();
  await fill(t, 'pts', PLAIN_CONFIG, data);
  for (const [field, schema] of [['i', 'integer'], ['price', 'float'], ['city', 'keyword']]) {
    await restOk(t, 'PUT', '/collections/pts/index?wait=true', { field_name: field, field_schema: schema });
  }
  await fill(t, 'named', NAMED_CONFIG, named);
});

test.after.always(async () => {
  await q?.stop();
});

// -- reads --------------------------------------------------------------------------------------

test('Get: the same records as POST /points, with every payload and vector selector', async (t) => {
  const ids = [1, uuid(4), 7, 424242, uuid(9)];
  const cases: Array<[object, object]> = [
    [{}, {}],
    [{ with_payload: { enable: false }, with_vectors: { enable: true } }, { with_payload: false, with_vector: true }],
    [{ with_payload: { include: { fields: ['city', 'meta.rank'] } } }, { with_payload: { include: ['city', 'meta.rank'] } }],
    [{ with_payload: { exclude: { fields: ['tags'] } } }, { with_payload: { exclude: ['tags'] } }],
  ];
  for (const [gm, rm] of cases) {
    const viaGrpc = await g.call('Points', 'Get', { ...inC('pts'), ids: ids.map(pid), ...gm });
    t.is(typeof viaGrpc.time, 'number');
    const viaRest = await restOk(t, 'POST', '/collections/pts/points', { ids, ...rm });
    sameRecords(t, viaGrpc.result, viaRest, JSON.stringify(gm));
  }
  const sel = await g.call('Points', 'Get', { ...inC('named'), ids: [pid(1), pid(4)], with_vectors: { include: { names: ['text'] } } });
  sameRecords(t, sel.result, await restOk(t, 'POST', '/collections/named/points', { ids: [1, 4], with_vector: ['text'] }), 'named vectors, some');
  t.deepEqual(Object.keys(vectorsOf(sel.result[0].vectors) as object), ['text']);
});

test('Scroll: pages, filters and order_by as POST /points/scroll, next_page_offset included', async (t) => {
  let offset: Json | undefined;
  let restOffset: Id | null = null;
  const seen: Id[] = [];
  for (let page = 0; page < 20; page++) {
    const viaGrpc = await g.call('Points', 'Scroll', { ...inC('pts'), limit: 17, ...(offset ? { offset } : {}), with_vectors: { enable: true } });
    const viaRest = await restOk(t, 'POST', '/collections/pts/points/scroll', { limit: 17, offset: restOffset, with_vector: true });
    sameRecords(t, viaGrpc.result, viaRest.points, `page ${page}`);
    t.is(idOf(viaGrpc.next_page_offset) ?? null, viaRest.next_page_offset);
    seen.push(...viaGrpc.result.map((p: Json) => idOf(p.id)));
    if (viaGrpc.next_page_offset === undefined) break;
    offset = viaGrpc.next_page_offset;
    restOffset = viaRest.next_page_offset;
  }
  t.is(seen.length, N, 'every point once');

  const filter = { must: [{ field: { key: 'price', range: { gte: 2, lt: 9 } } }], must_not: [cityIs('Rome')] };
  const restFilter = { must: [{ key: 'price', range: { gte: 2, lt: 9 } }], must_not: [{ key: 'city', match: { value: 'Rome' } }] };
  const f = await g.call('Points', 'Scroll', { ...inC('pts'), filter, limit: 100, with_payload: { include: { fields: ['i'] } } });
  sameRecords(t, f.result, (await restOk(t, 'POST', '/collections/pts/points/scroll', { filter: restFilter, limit: 100, with_payload: ['i'] })).points, 'filter');
  t.true(f.result.length > 5);

  for (const [dir, start] of [['Desc', { float: 10 }], ['Asc', { integer: '3' }]] as const) {
    const o = await g.call('Points', 'Scroll', { ...inC('pts'), limit: 6, order_by: { key: dir === 'Desc' ? 'price' : 'i', direction: dir, start_from: start } });
    const r = await restOk(t, 'POST', '/collections/pts/points/scroll', {
      limit: 6,
      order_by: { key: dir === 'Desc' ? 'price' : 'i', direction: dir.toLowerCase(), start_from: 'float' in start ? start.float : Number(start.integer) },
    });
    sameRecords(t, o.result, r.points, `order_by ${dir}`);
    t.is(o.next_page_offset, undefined);
  }
});

test('Count: the same counts as POST /points/count, with and without a filter', async (t) => {
  const all = await g.call('Points', 'Count', { ...inC('pts'), exact: true });
  t.deepEqual(all.result, { count: String(N) });
  const should = { should: [cityIs('London'), cityIs('Rome')] };
  const some = await g.call('Points', 'Count', { ...inC('pts'), filter: should });
  const r = await restOk(t, 'POST', '/collections/pts/points/count', { filter: { should: [{ key: 'city', match: { value: 'London' } }, { key: 'city', match: { value: 'Rome' } }] } });
  t.is(Number(some.result.count), r.count);
  t.is(r.count, N / 2);
  // has_id with UUIDs and integers, through the same filter code.
  const ids = await g.call('Points', 'Count', { ...inC('pts'), filter: { must: [{ has_id: { has_id: [pid(1), pid(uuid(4)), pid(99999)] } }] } });
  t.is(ids.result.count, '2');
});

test('Query: nearest by vector and by id, recommend, filters, params, threshold, offset, using; the same hits and scores as REST', async (t) => {
  const cases: Array<[string, object, object]> = [
    ['pts', { query: { nearest: dense([1, 0.5, -0.5, 0]) }, limit: '5', with_payload: { enable: true } }, { query: [1, 0.5, -0.5, 0], limit: 5, with_payload: true }],
    ['pts', { query: { nearest: { id: pid(3) } }, limit: '4', with_vectors: { enable: true } }, { query: 3, limit: 4, with_vector: true }],
    ['pts', { query: { nearest: { id: pid(uuid(9)) } }, limit: '4' }, { query: uuid(9), limit: 4 }],
    [
      'pts',
      { query: { recommend: { positive: [{ id: pid(1) }, dense([0, 1, 0, 0])], negative: [{ id: pid(2) }] } }, limit: '6', filter: { must: [cityIs('Berlin')] } },
      { query: { recommend: { positive: [1, [0, 1, 0, 0]], negative: [2] } }, limit: 6, filter: { must: [{ key: 'city', match: { value: 'Berlin' } }] } },
    ],
    [
      'pts',
      { query: { nearest: dense([0, 0, 1, 1]) }, params: { hnsw_ef: '32', exact: true }, score_threshold: 0.1, offset: '2', limit: '10' },
      { query: [0, 0, 1, 1], params: { hnsw_ef: 32, exact: true }, score_threshold: 0.1, offset: 2, limit: 10 },
    ],
    ['pts', { filter: { must: [cityIs('Rome')] }, limit: '100' }, { filter: { must: [{ key: 'city', match: { value: 'Rome' } }] }, limit: 100 }],
    ['pts', { query: { order_by: { key: 'i', direction: 'Desc' } }, limit: '3' }, { query: { order_by: { key: 'i', direction: 'desc' } }, limit: 3 }],
    ['named', { query: { nearest: dense([1, 0, 0, 0]) }, using: 'image', limit: '5', with_vectors: { include: { names: ['image'] } } }, { query: [1, 0, 0, 0], using: 'image', limit: 5, with_vector: ['image'] }],
    ['named', { query: { nearest: dense([0, 0]) }, using: 'text', limit: '30' }, { query: [0, 0], using: 'text', limit: 30 }],
    // Hybrid: two named prefetches fused (RRF, RRF with k and weights, DBSF), nested, and re-scored.
    [
      'named',
      { prefetch: [{ query: { nearest: dense([1, 0, 0, 0]) }, using: 'image', limit: '8' }, { query: { nearest: dense([0, 1]) }, using: 'text', limit: '8' }], query: { fusion: 'RRF' }, limit: '6', with_payload: { enable: true } },
      { prefetch: [{ query: [1, 0, 0, 0], using: 'image', limit: 8 }, { query: [0, 1], using: 'text', limit: 8 }], query: { fusion: 'rrf' }, limit: 6, with_payload: true },
    ],
    [
      'named',
      { prefetch: [{ query: { nearest: dense([1, 0, 0, 0]) }, using: 'image', limit: '8' }, { query: { nearest: dense([0, 1]) }, using: 'text', limit: '8' }], query: { rrf: { k: 10, weights: [2, 1] } }, limit: '6' },
      { prefetch: [{ query: [1, 0, 0, 0], using: 'image', limit: 8 }, { query: [0, 1], using: 'text', limit: 8 }], query: { rrf: { k: 10, weights: [2, 1] } }, limit: 6 },
    ],
    [
      'named',
      {
        prefetch: [{ prefetch: [{ query: { nearest: dense([0, 0, 1, 0]) }, using: 'image', limit: '10', filter: { must: [{ field: { key: 'kind', match: { keyword: 'cat' } } }] } }, { query: { nearest: { id: pid(2) } }, using: 'text' }], query: { fusion: 'DBSF' }, limit: '7' }],
        query: { nearest: dense([0, 1, 0, 0]) },
        using: 'image',
        offset: '1',
        limit: '4',
      },
      {
        prefetch: [{ prefetch: [{ query: [0, 0, 1, 0], using: 'image', limit: 10, filter: { must: [{ key: 'kind', match: { value: 'cat' } }] } }, { query: 2, using: 'text' }], query: { fusion: 'dbsf' }, limit: 7 }],
        query: [0, 1, 0, 0],
        using: 'image',
        offset: 1,
        limit: 4,
      },
    ],
  ];
  for (const [coll, gm, rm] of cases) {
    const viaGrpc = await g.call('Points', 'Query', { ...inC(coll), ...gm });
    const viaRest = await restOk(t, 'POST', `/collections/${coll}/points/query`, rm);
    t.true(viaRest.points.length > 0, JSON.stringify(rm));
    sameRecords(t, viaGrpc.result, viaRest.points, JSON.stringify(rm));
  }
});

test('QueryBatch, Search, SearchBatch, Recommend, RecommendBatch: the same answers as their REST routes', async (t) => {
  const qb = await g.call('Points', 'QueryBatch', {
    ...inC('pts'),
    query_points: [
      { query: { nearest: dense([0, 0, 0, 1]) }, limit: '2' },
      { ...inC('pts'), query: { nearest: dense([0, 1, 0, 0]) }, limit: '3', filter: { must_not: [cityIs('London')] } },
    ],
  });
  const qr = await restOk(t, 'POST', '/collections/pts/points/query/batch', {
    searches: [
      { query: [0, 0, 0, 1], limit: 2 },
      { query: [0, 1, 0, 0], limit: 3, filter: { must_not: [{ key: 'city', match: { value: 'London' } }] } },
    ],
  });
  t.is(qb.result.length, 2);
  qb.result.forEach((b: Json, i: number) => sameRecords(t, b.result, qr[i].points, `query batch ${i}`));

  const s = await g.call('Points', 'Search', { ...inC('pts'), vector: [1, 1, 0, 0], limit: '4', with_payload: { enable: true }, filter: { must: [{ field: { key: 'i', range: { lte: 30 } } }] } });
  sameRecords(t, s.result, await restOk(t, 'POST', '/collections/pts/points/search', { vector: [1, 1, 0, 0], limit: 4, with_payload: true, filter: { must: [{ key: 'i', range: { lte: 30 } }] } }), 'search');
  const sn = await g.call('Points', 'Search', { ...inC('named'), vector: [0, 1, 0, 0], vector_name: 'image', limit: '2' });
  sameRecords(t, sn.result, await restOk(t, 'POST', '/collections/named/points/search', { vector: { name: 'image', vector: [0, 1, 0, 0] }, limit: 2 }), 'named search');

  const sb = await g.call('Points', 'SearchBatch', { ...inC('pts'), search_points: [{ vector: [1, 0, 0, 0], limit: '1' }, { vector: [0, 0, 1, 0], limit: '3', with_payload: { include: { fields: ['city'] } } }] });
  const sbr = await restOk(t, 'POST', '/collections/pts/points/search/batch', { searches: [{ vector: [1, 0, 0, 0], limit: 1 }, { vector: [0, 0, 1, 0], limit: 3, with_payload: ['city'] }] });
  sb.result.forEach((b: Json, i: number) => sameRecords(t, b.result, sbr[i], `search batch ${i}`));

  const rc = await g.call('Points', 'Recommend', { ...inC('pts'), positive: [pid(1), pid(uuid(4))], negative: [pid(2)], positive_vectors: [dense([0, 0, 0, 1])], limit: '5', with_payload: { enable: true } });
  sameRecords(t, rc.result, await restOk(t, 'POST', '/collections/pts/points/recommend', { positive: [1, uuid(4), [0, 0, 0, 1]], negative: [2], limit: 5, with_payload: true }), 'recommend');
  const rn = await g.call('Points', 'Recommend', { ...inC('named'), positive: [pid(1)], using: 'image', limit: '3' });
  sameRecords(t, rn.result, await restOk(t, 'POST', '/collections/named/points/recommend', { positive: [1], using: 'image', limit: 3 }), 'recommend using');

  const rb = await g.call('Points', 'RecommendBatch', { ...inC('pts'), recommend_points: [{ positive: [pid(3)], limit: '2' }, { positive: [pid(6)], negative: [pid(7)], limit: '3' }] });
  const rbr = await restOk(t, 'POST', '/collections/pts/points/recommend/batch', { searches: [{ positive: [3], limit: 2 }, { positive: [6], negative: [7], limit: 3 }] });
  rb.result.forEach((b: Json, i: number) => sameRecords(t, b.result, rbr[i], `recommend batch ${i}`));
});

test('Discover, DiscoverBatch, discover and context queries, best_score and sum_scores: the same answers as REST', async (t) => {
  const ctx = (p: Id, n: Id) => ({ positive: { id: pid(p) }, negative: { id: pid(n) } });
  const d = await g.call('Points', 'Discover', {
    ...inC('pts'),
    target: { single: { id: pid(1) } },
    context: [ctx(2, 3), { positive: { vector: dense([0, 0, 1, 0]) }, negative: { id: pid(uuid(4)) } }],
    limit: '5',
    with_payload: { enable: true },
    filter: { must_not: [cityIs('Rome')] },
  });
  const dr = await restOk(t, 'POST', '/collections/pts/points/discover', {
    target: 1,
    context: [{ positive: 2, negative: 3 }, { positive: [0, 0, 1, 0], negative: uuid(4) }],
    limit: 5,
    with_payload: true,
    filter: { must_not: [{ key: 'city', match: { value: 'Rome' } }] },
  });
  t.is(dr.length, 5);
  sameRecords(t, d.result, dr, 'discover');
  const db = await g.call('Points', 'DiscoverBatch', { ...inC('pts'), discover_points: [{ context: [ctx(6, 7)], limit: '3' }, { target: { single: { vector: dense([1, 0, 0, 0]) } }, limit: '2', offset: '1' }] });
  const dbr = await restOk(t, 'POST', '/collections/pts/points/discover/batch', { searches: [{ context: [{ positive: 6, negative: 7 }], limit: 3 }, { target: [1, 0, 0, 0], limit: 2, offset: 1 }] });
  db.result.forEach((b: Json, i: number) => sameRecords(t, b.result, dbr[i], `discover batch ${i}`));

  const vi = (id: Id) => ({ id: pid(id) });
  const pair = (p: Id, n: Id) => ({ positive: vi(p), negative: vi(n) });
  const queries: Array<[Json, Json]> = [
    [{ discover: { target: vi(7), context: { pairs: [pair(8, 9)] } } }, { discover: { target: 7, context: [{ positive: 8, negative: 9 }] } }],
    [{ context: { pairs: [pair(8, 9), pair(12, 13)] } }, { context: [{ positive: 8, negative: 9 }, { positive: 12, negative: 13 }] }],
    [{ recommend: { positive: [vi(1)], negative: [vi(2), { dense: { data: [0, 1, 0, 0] } }], strategy: 'BestScore' } }, { recommend: { positive: [1], negative: [2, [0, 1, 0, 0]], strategy: 'best_score' } }],
    [{ recommend: { positive: [vi(1), vi(3)], strategy: 'SumScores' } }, { recommend: { positive: [1, 3], strategy: 'sum_scores' } }],
  ];
  for (const [viaGrpc, viaRest] of queries) {
    const got = await g.call('Points', 'Query', { ...inC('pts'), query: viaGrpc, limit: '4' });
    const want = await restOk(t, 'POST', '/collections/pts/points/query', { query: viaRest, limit: 4 });
    t.is(want.points.length, 4);
    sameRecords(t, got.result, want.points, Object.keys(viaRest)[0]);
  }
  // In a prefetch too.
  const pq = await g.call('Points', 'Query', { ...inC('pts'), prefetch: [{ query: queries[0][0], limit: '20' }], query: queries[1][0], limit: '3' });
  sameRecords(t, pq.result, (await restOk(t, 'POST', '/collections/pts/points/query', { prefetch: { query: queries[0][1], limit: 20 }, query: queries[1][1], limit: 3 })).points, 'prefetch');
  const rc = await g.call('Points', 'Recommend', { ...inC('pts'), negative: [pid(1)], strategy: 'BestScore', limit: '3' });
  sameRecords(t, rc.result, await restOk(t, 'POST', '/collections/pts/points/recommend', { negative: [1], strategy: 'best_score', limit: 3 }), 'recommend best_score');
  await expectCode(t, 'Discover', { ...inC('pts'), limit: '3' }, 'INVALID_ARGUMENT', /target and\/or context_pairs must be specified/);
  await expectCode(t, 'Query', { ...inC('pts'), query: { discover: { context: { pairs: [pair(1, 2)] } } } }, 'INVALID_ARGUMENT', /missing field `target`/);
});

// -- writes -------------------------------------------------------------------------------------

/** Every point of a collection through REST: ids, payloads, vectors. */
async function contents(t: ExecutionContext, name: string): Promise<Json[]> {
  return (await restOk(t, 'POST', `/collections/${name}/points/scroll`, { limit: 1000, with_vector: true, with_payload: true })).points;
}

/** Two collections with the same points: `g_<tag>` written through gRPC, `r_<tag>` through REST. */
async function twins(t: ExecutionContext, tag: string, config: object, points: object[]): Promise<[string, string]> {
  await fill(t, `g_${tag}`, config, points);
  await fill(t, `r_${tag}`, config, points);
  return [`g_${tag}`, `r_${tag}`];
}

test('Upsert: points with payloads, UUID and integer ids, named vectors; the same collection as PUT /points', async (t) => {
  for (const [name, config] of [['g_up', PLAIN_CONFIG], ['r_up', PLAIN_CONFIG], ['g_upn', NAMED_CONFIG], ['r_upn', NAMED_CONFIG]] as const) {
    await restOk(t, 'PUT', `/collections/${name}`, config);
  }
  const pts = data.slice(0, 12);
  const up = await g.call('Points', 'Upsert', {
    ...inC('g_up'),
    wait: true,
    points: pts.map((p) => ({ id: pid(p.id), vectors: { vector: dense(p.vector) }, payload: jsonPayload(p.payload) })),
  });
  t.is(up.result.status, 'Completed');
  t.regex(up.result.operation_id, /^\d+$/);
  t.is(typeof up.time, 'number');
  await restOk(t, 'PUT', '/collections/r_up/points?wait=true', { points: pts });
  t.deepEqual(await contents(t, 'g_up'), await contents(t, 'r_up'));

  // Not waiting: acknowledged (the point is there once applied).
  const ack = await g.call('Points', 'Upsert', { ...inC('g_up'), points: [{ id: pid(1000), vectors: { vector: dense([1, 2, 3, 4]) } }] });
  t.is(ack.result.status, 'Acknowledged');

  const np = named.slice(0, 8);
  await g.call('Points', 'Upsert', {
    ...inC('g_upn'),
    wait: true,
    points: np.map((p) => ({ id: pid(p.id), vectors: { vectors: { vectors: Object.fromEntries(Object.entries(p.vector).map(([k, v]) => [k, dense(v)])) } }, payload: jsonPayload(p.payload) })),
  });
  await restOk(t, 'PUT', '/collections/r_upn/points?wait=true', { points: np });
  t.deepEqual(await contents(t, 'g_upn'), await contents(t, 'r_upn'));
});

/** A JSON payload as a map of Values (the test's own encoder, independent of the server's). */
function jsonPayload(o: Json): Json {
  const value = (x: unknown): Json => {
    if (x === null) return { null_value: 'NULL_VALUE' };
    if (typeof x === 'boolean') return { bool_value: x };
    if (typeof x === 'string') return { string_value: x };
    if (typeof x === 'number') return Number.isInteger(x) ? { integer_value: String(x) } : { double_value: x };
    if (Array.isArray(x)) return { list_value: { values: x.map(value) } };
    return { struct_value: { fields: jsonPayload(x as Json) } };
  };
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, value(v)]));
}

test('payload and vector writes, Delete and UpdateBatch leave the collection as their REST twins do', async (t) => {
  const [gc, rc] = await twins(t, 'w', NAMED_CONFIG, named);
  const steps: Array<[string, object, string, string, object]> = [
    ['SetPayload', { payload: jsonPayload({ color: 'red', n: 1 }), points_selector: { points: { ids: [pid(1), pid(2)] } } }, 'POST', 'points/payload', { payload: { color: 'red', n: 1 }, points: [1, 2] }],
    ['SetPayload', { payload: jsonPayload({ w: 2 }), points_selector: { points: { ids: [pid(1)] } }, key: 'nested' }, 'POST', 'points/payload', { payload: { w: 2 }, points: [1], key: 'nested' }],
    ['SetPayload', { payload: jsonPayload({ fr: true }), points_selector: { filter: { must: [{ field: { key: 'kind', match: { keyword: 'dog' } } }] } } }, 'POST', 'points/payload', { payload: { fr: true }, filter: { must: [{ key: 'kind', match: { value: 'dog' } }] } }],
    ['OverwritePayload', { payload: jsonPayload({ only: 'this' }), points_selector: { points: { ids: [pid(3)] } } }, 'PUT', 'points/payload', { payload: { only: 'this' }, points: [3] }],
    ['DeletePayload', { keys: ['color', 'nested.w'], points_selector: { points: { ids: [pid(1)] } } }, 'POST', 'points/payload/delete', { keys: ['color', 'nested.w'], points: [1] }],
    ['ClearPayload', { points: { points: { ids: [pid(5)] } } }, 'POST', 'points/payload/clear', { points: [5] }],
    ['UpdateVectors', { points: [{ id: pid(6), vectors: { vectors: { vectors: { text: dense([6, 8]) } } } }] }, 'PUT', 'points/vectors', { points: [{ id: 6, vector: { text: [6, 8] } }] }],
    ['DeleteVectors', { points_selector: { points: { ids: [pid(7)] } }, vectors: { names: ['text'] } }, 'POST', 'points/vectors/delete', { points: [7], vector: ['text'] }],
    ['Delete', { points: { points: { ids: [pid(8), pid(9)] } } }, 'POST', 'points/delete', { points: [8, 9] }],
    ['Delete', { points: { filter: { must: [{ field: { key: 'i', range: { gte: 17 } } }] } } }, 'POST', 'points/delete', { filter: { must: [{ key: 'i', range: { gte: 17 } }] } }],
  ];
  for (const [rpc, gm, method, path, rm] of steps) {
    const r = await g.call('Points', rpc, { ...inC(gc), wait: true, ...gm });
    t.is(r.result.status, 'Completed', rpc);
    await restOk(t, method, `/collections/${rc}/${path}?wait=true`, rm);
    t.deepEqual(await contents(t, gc), await contents(t, rc), `after ${rpc} ${JSON.stringify(rm)}`);
  }

  const batch = await g.call('Points', 'UpdateBatch', {
    ...inC(gc),
    wait: true,
    operations: [
      { upsert: { points: [{ id: pid(50), vectors: { vectors: { vectors: { image: dense([1, 1, 1, 1]), text: dense([1, 1]) } } }, payload: jsonPayload({ t: 1 }) }] } },
      { set_payload: { payload: jsonPayload({ extra: 1 }), points_selector: { points: { ids: [pid(50)] } } } },
      { overwrite_payload: { payload: jsonPayload({ t: 2 }), points_selector: { points: { ids: [pid(50)] } } } },
      { delete_payload: { keys: ['i'], points_selector: { points: { ids: [pid(10)] } } } },
      { update_vectors: { points: [{ id: pid(50), vectors: { vectors: { vectors: { text: dense([0, 2]) } } } }] } },
      { delete_vectors: { points_selector: { points: { ids: [pid(11)] } }, vectors: { names: ['image'] } } },
      { clear_payload: { points: { points: { ids: [pid(12)] } } } },
      { delete_points: { points: { points: { ids: [pid(13)] } } } },
      { delete_deprecated: { points: { ids: [pid(14)] } } },
      { clear_payload_deprecated: { points: { ids: [pid(15)] } } },
    ],
  });
  t.is(batch.result.length, 10);
  t.true(batch.result.every((r: Json) => r.status === 'Completed'));
  await restOk(t, 'POST', `/collections/${rc}/points/batch?wait=true`, {
    operations: [
      { upsert: { points: [{ id: 50, vector: { image: [1, 1, 1, 1], text: [1, 1] }, payload: { t: 1 } }] } },
      { set_payload: { payload: { extra: 1 }, points: [50] } },
      { overwrite_payload: { payload: { t: 2 }, points: [50] } },
      { delete_payload: { keys: ['i'], points: [10] } },
      { update_vectors: { points: [{ id: 50, vector: { text: [0, 2] } }] } },
      { delete_vectors: { points: [11], vector: ['image'] } },
      { clear_payload: { points: [12] } },
      { delete: { points: [13] } },
      { delete: { points: [14] } },
      { clear_payload: { points: [15] } },
    ],
  });
  t.deepEqual(await contents(t, gc), await contents(t, rc), 'after the batch');
});

test('CreateFieldIndex and DeleteFieldIndex change payload_schema as the REST index routes do', async (t) => {
  await restOk(t, 'PUT', '/collections/g_idx', PLAIN_CONFIG);
  await restOk(t, 'PUT', '/collections/r_idx', PLAIN_CONFIG);
  const created = await g.call('Points', 'CreateFieldIndex', { ...inC('g_idx'), field_name: 'city', field_type: 'FieldTypeKeyword', wait: true });
  t.deepEqual(created.result, { status: 'Completed' });
  await g.call('Points', 'CreateFieldIndex', { ...inC('g_idx'), field_name: 'n', wait: true, field_index_params: { integer_index_params: { lookup: true, range: false } } });
  await g.call('Points', 'CreateFieldIndex', {
    ...inC('g_idx'),
    field_name: 'body',
    wait: true,
    field_type: 'FieldTypeText',
    field_index_params: { text_index_params: { tokenizer: 'Whitespace', lowercase: true, min_token_len: '2' } },
  });
  await restOk(t, 'PUT', '/collections/r_idx/index?wait=true', { field_name: 'city', field_schema: 'keyword' });
  await restOk(t, 'PUT', '/collections/r_idx/index?wait=true', { field_name: 'n', field_schema: { type: 'integer', lookup: true, range: false } });
  await restOk(t, 'PUT', '/collections/r_idx/index?wait=true', { field_name: 'body', field_schema: { type: 'text', tokenizer: 'whitespace', lowercase: true, min_token_len: 2 } });
  const schema = async (n: string) => (await restOk(t, 'GET', `/collections/${n}`)).payload_schema;
  t.deepEqual(await schema('g_idx'), await schema('r_idx'));
  t.deepEqual(Object.keys(await schema('g_idx')).sort(), ['body', 'city', 'n']);

  t.deepEqual((await g.call('Points', 'DeleteFieldIndex', { ...inC('g_idx'), field_name: 'city', wait: true })).result, { status: 'Completed' });
  await rest('DELETE', '/collections/r_idx/index/city?wait=true');
  t.deepEqual(await schema('g_idx'), await schema('r_idx'));

  await expectCode(t, 'CreateFieldIndex', { ...inC('g_idx'), field_name: 'x' }, 'INVALID_ARGUMENT', /Can't auto-detect field type/);
  await expectCode(t, 'CreateFieldIndex', { ...inC('g_idx'), field_name: 'x', field_index_params: { integer_index_params: { lookup: false, range: false } } }, 'INVALID_ARGUMENT', /can't be both disabled/);
  await expectCode(t, 'CreateFieldIndex', { ...inC('nope'), field_name: 'x', field_type: 'FieldTypeKeyword' }, 'NOT_FOUND', /Collection `nope` doesn't exist/);
  t.deepEqual(Object.keys(await schema('g_idx')).sort(), ['body', 'n'], 'refused requests changed nothing');
});

// -- errors -------------------------------------------------------------------------------------

test('error kinds answer their status with the REST message, and a refused write changes nothing', async (t) => {
  await fill(t, 'g_err', PLAIN_CONFIG, data.slice(0, 5));
  const before = await contents(t, 'g_err');
  const point = (id: object, v: number[]) => ({ id, vectors: { vector: dense(v) } });

  await expectCode(t, 'Get', { ...inC('missing'), ids: [pid(1)] }, 'NOT_FOUND', /^Not found: Collection `missing` doesn't exist!$/);
  await expectCode(t, 'Query', { ...inC('missing') }, 'NOT_FOUND');
  // A stored point as an example that is not there: REST's 404, over gRPC NOT_FOUND.
  const noPoint = await expectCode(t, 'Query', { ...inC('g_err'), query: { nearest: { id: pid(4242) } } }, 'NOT_FOUND');
  t.is(noPoint, (await rest('POST', '/collections/g_err/points/query', { query: 4242 })).body.status.error);

  // The same REST request and its text.
  const dim = await expectCode(t, 'Upsert', { ...inC('g_err'), wait: true, points: [point(pid(100), [1, 2, 3, 4]), point(pid(101), [1, 2, 3])] }, 'INVALID_ARGUMENT');
  const dimRest = await rest('PUT', '/collections/g_err/points?wait=true', { points: [{ id: 100, vector: [1, 2, 3, 4] }, { id: 101, vector: [1, 2, 3] }] });
  t.is(dim, dimRest.body.status.error);

  const cases: Array<[string, object, RegExp]> = [
    ['Upsert', { points: [point(pid(1), [])] }, /a vector needs at least one value/],
    ['Upsert', { points: [{ id: pid(1), vectors: { vector: { sparse: { indices: [1], values: [1] } } } }] }, /a sparse vector must be given under its name/],
    ['Upsert', { points: [point(pid(1), [1, 2, 3, 4])], update_filter: { must: [{ field: { key: 'city' } }] } }, /update_filter/],
    ['Upsert', { points: [point(pid(1), [1, 2, 3, 4])], update_mode: 7 }, /update_mode: unknown variant/],
    ['Upsert', { points: [point({ uuid: 'not-a-uuid' }, [1, 2, 3, 4])] }, /is not a UUID/],
    ['Upsert', { points: [point(pid(1), [1, 2, 3, 4])], ordering: { type: 'Strong' }, timeout: '0', shard_key_selector: { shard_keys: [{ keyword: 'k' }] } }, /^Wrong input: Shard key "k" not found$/],
    ['Delete', {}, /expected `points` or `filter`/],
    ['SetPayload', { payload: jsonPayload({ a: 1 }), points_selector: { points: { ids: [pid(1)] } }, key: 'a[0]' }, /unsupported payload key/],
    ['OverwritePayload', { payload: jsonPayload({ a: 1 }), points_selector: { points: { ids: [pid(1)] } }, key: 'a' }, /overwrite payload does not take a `key`/],
    ['DeleteVectors', { points_selector: { points: { ids: [pid(1)] } } }, /vector: expected an array of vector names/],
    ['Get', { read_consistency: { factor: '0' } }, /consistency: expected a positive integer/],
    ['Scroll', { limit: 0 }, /limit: value 0 invalid/],
    ['Scroll', { filter: { must: [{ field: { key: 'a[0]', match: { keyword: 'x' } } }] } }, /unsupported key path/],
    ['Search', { vector: [1, 0, 0, 0] }, /limit: value 0 invalid/],
    ['Query', { prefetch: [{ query: { nearest: dense([1, 0, 0, 0]) } }] }, /A query is needed to merge the prefetches/],
    ['Query', { query: { relevance_feedback: {} } }, /`relevance_feedback` queries are not supported/],
    ['Recommend', { limit: '3' }, /At least one positive/],
    ['QueryBatch', { query_points: [{ ...inC('other'), query: { nearest: dense([1, 0, 0, 0]) } }] }, /differs from the batch's collection/],
    ['UpdateBatch', { operations: [{ upsert: { points: [point(pid(200), [1, 1, 1, 1])] } }, {}] }, /operations\[1\]: expected an object with one operation/],
    ['UpdateBatch', { operations: [{ upsert: { points: [point(pid(200), [1, 1, 1, 1])] } }, { upsert: { points: [point(pid(201), [1])] } }] }, /dimension/],
  ];
  for (const [rpc, m, message] of cases) {
    const details = await expectCode(t, rpc, { ...inC('g_err'), wait: true, ...m }, 'INVALID_ARGUMENT', message);
    t.notRegex(details, /^Service internal error/);
  }
  t.deepEqual(await contents(t, 'g_err'), before, 'no refused request changed anything');

  // An integer id past 2^53 - 1: exact on the wire, refused with REST's words for the same JSON.
  const big = await expectCode(t, 'Upsert', { ...inC('g_err'), wait: true, points: [point({ num: '18446744073709551615' }, [1, 2, 3, 4])] }, 'INVALID_ARGUMENT', /beyond 2\^53 - 1/);
  const bigRest = await fetch(`${q.server.url}/collections/g_err/points?wait=true`, { method: 'PUT', headers: { 'content-type': 'application/json' }, body: '{"points":[{"id":18446744073709551615,"vector":[1,2,3,4]}]}' });
  t.is(big, ((await bigRest.json()) as Json).status.error);
  t.deepEqual(await contents(t, 'g_err'), before);
});

test('CreateVectorName and DeleteVectorName change the collection as REST does; datatype and multivector forms translate both ways', async (t) => {
  await restOk(t, 'PUT', '/collections/g_vn', { vectors: { a: { size: 2, distance: 'Dot' } } });
  const created = await g.call('Points', 'CreateVectorName', {
    ...inC('g_vn'),
    vector_name: 'colbert',
    wait: true,
    dense_config: { size: '2', distance: 'Dot', multivector_config: { comparator: 'MaxSim' }, datatype: 'Float16' },
  });
  t.is(created.result.status, 'Completed');
  const info = await restOk(t, 'GET', '/collections/g_vn');
  t.deepEqual(info.config.params.vectors.colbert, { size: 2, distance: 'Dot', datatype: 'float16', multivector_config: { comparator: 'max_sim' } });
  // Collection info over gRPC shows the new vector with its datatype and multivector config.
  const gi = await g.call('Collections', 'Get', inC('g_vn'));
  const colbert = gi.result.config.params.vectors_config.params_map.map.colbert;
  t.like(colbert, { size: '2', distance: 'Dot', datatype: 'Float16', multivector_config: { comparator: 'MaxSim' } });
  // A list written and read over gRPC: multi_dense both ways; MaxSim scores it.
  await g.call('Points', 'Upsert', {
    ...inC('g_vn'),
    wait: true,
    points: [{ id: pid(1), vectors: { vectors: { vectors: { a: dense([1, 0]), colbert: { multi_dense: { vectors: [{ data: [1, 0] }, { data: [0, 2] }] } } } } } }],
  });
  const got = await g.call('Points', 'Get', { ...inC('g_vn'), ids: [pid(1)], with_vectors: { enable: true } });
  t.deepEqual(
    got.result[0].vectors.vectors.vectors.colbert.multi_dense.vectors.map((v: Json) => v.data),
    [
      [1, 0],
      [0, 2],
    ],
  );
  const hit = await g.call('Points', 'Query', { ...inC('g_vn'), using: 'colbert', query: { nearest: { multi_dense: { vectors: [{ data: [1, 1] }] } } } });
  t.is(hit.result[0].score, 2);
  // The same refusals as REST, with REST's message.
  const dup = await g.fail('Points', 'CreateVectorName', { ...inC('g_vn'), vector_name: 'a', dense_config: { size: '2', distance: 'Dot' } });
  t.is(codeName(dup.code), 'INVALID_ARGUMENT');
  const r = await rest('PUT', '/collections/g_vn/vectors/a', { dense: { size: 2, distance: 'Dot' } });
  t.is(dup.details, r.body.status.error);
  const deleted = await g.call('Points', 'DeleteVectorName', { ...inC('g_vn'), vector_name: 'colbert', wait: true });
  t.is(deleted.result.status, 'Completed');
  t.deepEqual(Object.keys((await restOk(t, 'GET', '/collections/g_vn')).config.params.vectors), ['a']);
  const missing = await g.fail('Points', 'DeleteVectorName', { ...inC('g_vn'), vector_name: 'colbert' });
  t.is(codeName(missing.code), 'INVALID_ARGUMENT');
});

test('CreateVectorName with a sparse config adds a sparse vector as REST does; DeleteVectorName drops it', async (t) => {
  await restOk(t, 'PUT', '/collections/g_vns', { vectors: { a: { size: 2, distance: 'Dot' } } });
  const created = await g.call('Points', 'CreateVectorName', { ...inC('g_vns'), vector_name: 'text', wait: true, sparse_config: { modifier: 'Idf', datatype: 'Float16' } });
  t.is(created.result.status, 'Completed');
  t.deepEqual((await restOk(t, 'GET', '/collections/g_vns')).config.params.sparse_vectors, { text: { modifier: 'idf', index: { datatype: 'float16' } } });
  const plain = await g.call('Points', 'CreateVectorName', { ...inC('g_vns'), vector_name: 'plain', wait: true, sparse_config: {} });
  t.is(plain.result.status, 'Completed');
  t.deepEqual((await restOk(t, 'GET', '/collections/g_vns')).config.params.sparse_vectors.plain, {});
  await restOk(t, 'PUT', '/collections/g_vns/points?wait=true', { points: [{ id: 1, vector: { a: [1, 0], plain: { indices: [3], values: [2] } } }] });
  const hit = await restOk(t, 'POST', '/collections/g_vns/points/query', { query: { indices: [3], values: [1.5] }, using: 'plain' });
  t.deepEqual(
    hit.points.map((p: Json) => [p.id, p.score]),
    [[1, 3]],
  );
  // A name in use (dense or sparse) is refused with REST's message.
  const dup = await g.fail('Points', 'CreateVectorName', { ...inC('g_vns'), vector_name: 'a', sparse_config: {} });
  t.is(codeName(dup.code), 'INVALID_ARGUMENT');
  t.is(dup.details, (await rest('PUT', '/collections/g_vns/vectors/a', { sparse: {} })).body.status.error);
  const deleted = await g.call('Points', 'DeleteVectorName', { ...inC('g_vns'), vector_name: 'text', wait: true });
  t.is(deleted.result.status, 'Completed');
  t.deepEqual(Object.keys((await restOk(t, 'GET', '/collections/g_vns')).config.params.sparse_vectors), ['plain']);
});

test('custom sharding: shard_key_selector writes and reads by key, and hits carry their shard key, as REST', async (t) => {
  await restOk(t, 'PUT', '/collections/g_keys', { vectors: { size: DIM, distance: 'Dot' }, sharding_method: 'custom', shard_number: 1 });
  await restOk(t, 'PUT', '/collections/g_keys/shards', { shard_key: 'eu' });
  await restOk(t, 'PUT', '/collections/g_keys/shards', { shard_key: 7 });
  const up = (key: object, ids: number[], base: number) =>
    g.call('Points', 'Upsert', { ...inC('g_keys'), wait: true, shard_key_selector: key, points: ids.map((id) => ({ id: pid(id), vectors: { vector: dense([base, id, 0, 1]) }, payload: jsonPayload({ base }) })) });
  await up({ shard_keys: [{ keyword: 'eu' }] }, [1, 2, 3], 1);
  await up({ shard_keys: [{ number: '7' }] }, [1, 4], 2);
  // A target with a fallback: the target's shards are active, so the write goes there.
  await up({ shard_keys: [{ keyword: 'eu' }], fallback: { number: '7' } }, [5], 3);
  await expectCode(t, 'Upsert', { ...inC('g_keys'), points: [{ id: pid(9), vectors: { vector: dense([1, 1, 1, 1]) } }] }, 'INVALID_ARGUMENT', /^Wrong input: Shard key not specified$/);

  const all = await g.call('Points', 'Scroll', { ...inC('g_keys'), limit: 100 });
  sameRecords(t, all.result, (await restOk(t, 'POST', '/collections/g_keys/points/scroll', { limit: 100 })).points, 'scroll over every key');
  t.true(all.result.length >= 5);
  const eu = await g.call('Points', 'Get', { ...inC('g_keys'), ids: [pid(1), pid(4), pid(5)], shard_key_selector: { shard_keys: [{ keyword: 'eu' }] } });
  sameRecords(t, eu.result, await restOk(t, 'POST', '/collections/g_keys/points', { ids: [1, 4, 5], shard_key: 'eu' }), 'get under eu');
  t.deepEqual(eu.result.map((p: Json) => [idOf(p.id), p.shard_key.keyword]), [[1, 'eu'], [5, 'eu']]);
  const hits = await g.call('Points', 'Query', { ...inC('g_keys'), query: { nearest: dense([0, 1, 0, 0]) }, limit: '10', shard_key_selector: { shard_keys: [{ keyword: 'eu' }, { number: '7' }] } });
  sameRecords(t, hits.result, (await restOk(t, 'POST', '/collections/g_keys/points/query', { query: [0, 1, 0, 0], limit: 10, shard_key: ['eu', 7] })).points, 'query over two keys');
  t.true(hits.result.some((p: Json) => p.shard_key?.number === '7'));
  // Id 1 under two keys is two points.
  const count = async (k: object) => (await g.call('Points', 'Count', { ...inC('g_keys'), shard_key_selector: { shard_keys: [k] } })).result.count;
  t.deepEqual([await count({ keyword: 'eu' }), await count({ number: '7' })], ['4', '2']);
});

// -- payload numbers and nesting in answers; requests the decoder cannot read ---------------------

/** Numbers no integer type holds exactly, and the integers around int64's edges as JSON has them. */
const NUMBERS: Json = { big: 1e300, two64: 2 ** 64, neg: -0.5, two63: 2 ** 63, minus2_63: -(2 ** 63), safe: Number.MAX_SAFE_INTEGER, int: 42 };

test('payload numbers such as 1e300, 2^64 and -0.5 come back as exact doubles from every answer that carries payloads', async (t) => {
  await restOk(t, 'PUT', '/collections/g_nums', PLAIN_CONFIG);
  // Point 1 written over REST (2^64 as JSON's 18446744073709551616), point 2 over gRPC (as doubles).
  const r = await fetch(`${q.server.url}/collections/g_nums/points?wait=true`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: '{"points": [{"id": 1, "vector": [1, 0, 0, 0], "payload": {"big": 1e300, "two64": 18446744073709551616, "neg": -0.5, "two63": 9223372036854775808, "minus2_63": -9223372036854775808, "safe": 9007199254740991, "int": 42}}]}',
  });
  t.is(r.status, 200, await r.text());
  const asDoubles = Object.fromEntries(Object.entries(NUMBERS).map(([k, v]) => [k, Number.isSafeInteger(v) ? { integer_value: String(v) } : { double_value: v }]));
  await g.call('Points', 'Upsert', { ...inC('g_nums'), wait: true, points: [{ id: pid(2), vectors: { vector: dense([0, 1, 0, 0]) }, payload: asDoubles }] });

  const check = (points: Json[], what: string) => {
    t.is(points.length, 2, what);
    for (const p of points) {
      for (const k of ['big', 'two64', 'neg', 'two63', 'minus2_63']) t.is(p.payload[k].kind, 'double_value', `${what}: ${k}`);
      for (const k of ['safe', 'int']) t.is(p.payload[k].kind, 'integer_value', `${what}: ${k}`);
      t.deepEqual(mapToJson(p.payload, 'payload'), NUMBERS, what);
    }
  };
  const all = { with_payload: { enable: true } };
  check((await g.call('Points', 'Get', { ...inC('g_nums'), ids: [pid(1), pid(2)], ...all })).result, 'Get');
  check((await g.call('Points', 'Scroll', { ...inC('g_nums'), limit: 10, ...all })).result, 'Scroll');
  check((await g.call('Points', 'Query', { ...inC('g_nums'), query: { nearest: dense([1, 1, 0, 0]) }, limit: '10', ...all })).result, 'Query');
  check((await g.call('Points', 'QueryBatch', { ...inC('g_nums'), query_points: [{ query: { nearest: dense([1, 1, 0, 0]) }, limit: '10', ...all }] })).result[0].result, 'QueryBatch');
  check((await g.call('Points', 'Search', { ...inC('g_nums'), vector: [1, 1, 0, 0], limit: '10', ...all })).result, 'Search');
  check((await g.call('Points', 'SearchBatch', { ...inC('g_nums'), search_points: [{ vector: [1, 1, 0, 0], limit: '10', ...all }] })).result[0].result, 'SearchBatch');
  await restOk(t, 'PUT', '/collections/g_nums/points?wait=true', { points: [{ id: 3, vector: [1, 1, 1, 1] }] });
  check((await g.call('Points', 'Recommend', { ...inC('g_nums'), positive: [pid(3)], limit: '10', ...all })).result, 'Recommend');
  check((await g.call('Points', 'RecommendBatch', { ...inC('g_nums'), recommend_points: [{ positive: [pid(3)], limit: '10', ...all }] })).result[0].result, 'RecommendBatch');
});

test('a stored payload nested deeper than protobuf carries: INVALID_ARGUMENT naming the point, never INTERNAL; leaving it out works', async (t) => {
  let deep: unknown = 'leaf';
  for (let i = 0; i < 60; i++) deep = { d: deep };
  // REST takes it (a JSON body may nest 127 levels).
  await fill(t, 'g_deep', PLAIN_CONFIG, [{ id: 1, vector: [1, 0, 0, 0], payload: { deep, flat: 1 } }]);
  const refusal = /^Wrong input: the payload of point 1 nests deeper than a gRPC answer can carry here/;
  await expectCode(t, 'Get', { ...inC('g_deep'), ids: [pid(1)], with_payload: { enable: true } }, 'INVALID_ARGUMENT', refusal);
  await expectCode(t, 'Scroll', { ...inC('g_deep'), limit: '10', with_payload: { enable: true } }, 'INVALID_ARGUMENT', refusal);
  await expectCode(t, 'Query', { ...inC('g_deep'), query: { nearest: dense([1, 0, 0, 0]) }, with_payload: { enable: true } }, 'INVALID_ARGUMENT', refusal);
  const without = await g.call('Points', 'Get', { ...inC('g_deep'), ids: [pid(1)], with_payload: { exclude: { fields: ['deep'] } } });
  t.deepEqual(mapToJson(without.result[0].payload, 'payload'), { flat: 1 });
  const metrics = await (await fetch(`${q.server.url}/metrics`)).text();
  t.notRegex(metrics, /grpc_responses_total\{method="\/qdrant\.Points\/(Get|Scroll|Query)",code="INTERNAL"\}/);
});

/** A length-delimited protobuf field: its tag, its length, its bytes. */
function field(no: number, bytes: Buffer): Buffer {
  const varint = (n: number) => {
    const out: number[] = [];
    while (n > 0x7f) {
      out.push((n & 0x7f) | 0x80);
      n >>>= 7;
    }
    out.push(n);
    return Buffer.from(out);
  };
  return Buffer.concat([varint((no << 3) | 2), varint(bytes.length), bytes]);
}

/** CountPoints of `collection` whose Filter nests `levels` Filters, each the `filter` of a `must` Condition of the one around it. */
function nestedCount(collection: string, levels: number): Buffer {
  let filter: Buffer = Buffer.alloc(0);
  for (let i = 0; i < levels; i++) filter = field(2, field(4, filter)); // Filter.must[0] = Condition{ filter }
  return Buffer.concat([field(1, Buffer.from(collection)), field(2, filter)]);
}

/** Points/Count with `bytes` sent as they are (hand-made, not encoded by a client library). */
async function rawCount(bytes: Buffer): Promise<{ code: string; details: string; count?: string }> {
  const def = protoLoader.loadSync('qdrant.proto', { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true, includeDirs: [PROTO_DIR] });
  const count = (def['qdrant.Points'] as unknown as Record<string, protoLoader.MethodDefinition<object, any>>).Count;
  const raw = new grpc.Client(q.target, grpc.credentials.createInsecure());
  try {
    return await new Promise((resolve) => {
      raw.makeUnaryRequest('/qdrant.Points/Count', (b: Buffer) => b, (b: Buffer) => count.responseDeserialize(b), bytes, (err, res) => {
        resolve(err ? { code: codeName(err.code), details: err.details } : { code: 'OK', details: '', count: res?.result?.count });
      });
    });
  } finally {
    raw.close();
  }
}

test('a request the decoder cannot read (a Filter nested 150 levels, bytes cut short) is INVALID_ARGUMENT, not INTERNAL, and counted', async (t) => {
  const nested = await rawCount(nestedCount('pts', 150));
  t.is(nested.code, 'INVALID_ARGUMENT', nested.details);
  t.is(nested.details, 'Wrong input: the request could not be decoded: maximum nesting depth exceeded');
  const cut = nestedCount('pts', 3);
  const short = await rawCount(cut.subarray(0, cut.length - 2));
  t.is(short.code, 'INVALID_ARGUMENT', short.details);
  t.regex(short.details, /^Wrong input: the request could not be decoded: index out of range/);
  // The same hand-made message, nested as deep as the decoder goes (and an empty filter matches all).
  const ok = await rawCount(nestedCount('pts', 40));
  t.deepEqual(ok, { code: 'OK', details: '', count: String(N) });
  const metrics = await (await fetch(`${q.server.url}/metrics`)).text();
  t.regex(metrics, /^grpc_responses_total\{method="\/qdrant\.Points\/Count",code="INVALID_ARGUMENT"\} [2-9]\d*$/m);
  t.notRegex(metrics, /grpc_responses_total\{method="\/qdrant\.Points\/Count",code="INTERNAL"\}/);
});
