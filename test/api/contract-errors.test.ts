/**
 * Contract tests of error answers against a real bin/quiver: the reference envelope
 * `{"status": {"error": "..."}, "time": ...}` (validated against the v1.18 spec's
 * ErrorResponse), the reference's status codes and messages, and that a rejected
 * request changes nothing (counts, payloads and vectors are read back after each one).
 */

import test, { type ExecutionContext } from 'ava';

import { ContractClient } from '../support/contract';
import { ALIASES, BATCH, COLLECTION, COUNT, DELETE, INDEX, PAYLOAD, PAYLOAD_CLEAR, PAYLOAD_DELETE, POINT, POINTS, QUERY, QUERY_BATCH, RECOMMEND, RECOMMEND_BATCH, SCROLL, SEARCH, SEARCH_BATCH, VECTORS, VECTORS_DELETE } from '../support/routes';

let api: ContractClient;

test.before(async () => {
  api = await ContractClient.start();
});

test.after.always(async () => {
  await api?.stop();
});

const FORMAT = /^Format error in JSON body: ./;
const VALIDATION = /^Validation error in JSON body: ./;
const dimError = (expected: number, got: number) => `Wrong input: Vector dimension error: expected dim: ${expected}, got ${got}`;
const notFound = (name: string) => `Not found: Collection \`${name}\` doesn't exist!`;
const inColl = (collection_name: string) => ({ collection_name });

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

interface Snapshot {
  count: number;
  points: Array<{ id: unknown; payload: unknown; vector: unknown }>;
}

/** Everything a write could change: the count and every point with payload and vectors. */
async function snapshot(t: ExecutionContext, name: string): Promise<Snapshot> {
  const count = (await api.ok(t, 'POST', COUNT, { params: inColl(name), body: { exact: true } }))?.count;
  const scroll = await api.ok(t, 'POST', SCROLL, { params: inColl(name), body: { limit: 1000, with_payload: true, with_vector: true } });
  return { count, points: scroll?.points ?? [] };
}

/** A 4-dim Dot collection with points 1..3 (payload {n: id}). */
async function seeded(t: ExecutionContext, name: string, vectors: unknown = { size: 4, distance: 'Dot' }): Promise<Snapshot> {
  await api.ok(t, 'PUT', COLLECTION, { params: inColl(name), body: { vectors } });
  const named = !(typeof vectors === 'object' && vectors !== null && 'size' in vectors);
  const vec = (i: number) => (named ? { a: [i, 0, 0, 0], b: [0, i] } : [i, 0, 0, 0]);
  await api.ok(t, 'PUT', POINTS, {
    params: inColl(name),
    query: { wait: true },
    body: { points: [1, 2, 3].map((i) => ({ id: i, vector: vec(i), payload: { n: i } })) },
  });
  return snapshot(t, name);
}

async function unchanged(t: ExecutionContext, name: string, before: Snapshot, what: string): Promise<void> {
  t.deepEqual(await snapshot(t, name), before, `${what} changed the collection`);
}

// -- the envelope and malformed bodies -----------------------------------------------------------

test('an error is {"status": {"error"}, "time"} with no result, for 400, 404, 409 and 422', async (t) => {
  await seeded(t, 'e-envelope');
  const replies = [
    await api.send('PUT', COLLECTION, { params: inColl('e-envelope-x'), raw: '{' }),
    await api.send('GET', COLLECTION, { params: inColl('e-envelope-missing') }),
    await api.send('PUT', COLLECTION, { params: inColl('e-envelope'), body: { vectors: { size: 4, distance: 'Dot' } } }),
    await api.send('PUT', COLLECTION, { params: inColl('e-envelope-y'), body: { vectors: { size: 0, distance: 'Dot' } } }),
  ];
  t.deepEqual(replies.map((r) => r.status), [400, 404, 409, 422]);
  for (const r of replies) {
    t.regex(r.contentType, /^application\/json/);
    t.deepEqual(Object.keys(r.body ?? {}).sort(), ['status', 'time'], `${r.request}: ${r.text}`);
    t.deepEqual(Object.keys(r.body?.status ?? {}), ['error']);
    t.is(typeof r.body?.status?.error, 'string');
    t.true(typeof r.body?.time === 'number' && r.body.time >= 0);
    t.deepEqual(api.openapi.validate(r.request.split(' ')[0] as Method, COLLECTION, r.status, r.body), []);
  }
});

test('JSON that does not parse is 400 "Format error in JSON body: ..." on every route with a body', async (t) => {
  const before = await seeded(t, 'e-badjson');
  const routes: Array<[Method, string]> = [
    ['PUT', COLLECTION],
    ['PATCH', COLLECTION],
    ['PUT', POINTS],
    ['POST', POINTS],
    ['POST', DELETE],
    ['POST', PAYLOAD],
    ['PUT', PAYLOAD],
    ['PUT', VECTORS],
    ['POST', BATCH],
    ['POST', SCROLL],
    ['POST', COUNT],
    ['POST', QUERY],
    ['POST', SEARCH],
    ['POST', RECOMMEND],
    ['PUT', INDEX],
  ];
  for (const [method, pattern] of routes) {
    for (const raw of ['{"points": [', 'not json', '{"a": 1,}']) {
      await api.error(t, 400, method, pattern, { params: inColl('e-badjson'), query: method === 'GET' ? {} : { wait: true }, raw }, FORMAT);
    }
  }
  await api.error(t, 400, 'POST', ALIASES, { raw: '[{' }, FORMAT);
  await unchanged(t, 'e-badjson', before, 'bad JSON');
});

test('values of the wrong type are 400 "Format error in JSON body: ..."', async (t) => {
  const before = await seeded(t, 'e-types');
  const p = inColl('e-types');
  await api.error(t, 400, 'PUT', COLLECTION, { params: inColl('e-types-new'), body: { vectors: { size: 'four', distance: 'Dot' } } }, FORMAT);
  await api.error(t, 400, 'PUT', COLLECTION, { params: inColl('e-types-new'), body: { vectors: { size: 4, distance: 'Cosinus' } } }, FORMAT);
  await api.error(t, 400, 'PUT', COLLECTION, { params: inColl('e-types-new'), body: { vectors: { size: -4, distance: 'Dot' } } }, FORMAT);
  await api.error(t, 400, 'PUT', COLLECTION, { params: inColl('e-types-new'), body: { vectors: { size: 4, distance: 'Dot' }, hnsw_config: { m: 'many' } } }, FORMAT);
  t.false((await api.ok(t, 'GET', '/collections/{collection_name}/exists', { params: inColl('e-types-new') }))?.exists);

  const upserts: unknown[] = [
    { points: [{ id: -1, vector: [1, 0, 0, 0] }] },
    { points: [{ id: 1.5, vector: [1, 0, 0, 0] }] },
    { points: [{ id: 'not-a-uuid', vector: [1, 0, 0, 0] }] },
    { points: [{ id: true, vector: [1, 0, 0, 0] }] },
    { points: [{ id: 9, vector: ['a', 0, 0, 0] }] },
    { points: [{ id: 9, vector: [1, 0, 0, 0], payload: [1, 2] }] },
    { points: [{ id: 9 }] },
    { points: { id: 9, vector: [1, 0, 0, 0] } },
    { batch: { ids: [9], vectors: 'x' } },
  ];
  for (const body of upserts) await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body }, FORMAT);
  await api.error(t, 400, 'POST', QUERY, { params: p, body: { query: [1, 0, 0, 0], limit: 'ten' } }, FORMAT);
  await api.error(t, 400, 'POST', QUERY, { params: p, body: { query: [1, 0, 0, 0], with_payload: 5 } }, FORMAT);
  await api.error(t, 400, 'POST', QUERY, { params: p, body: { query: [1, 0, 0, 0], filter: { must: 'x' } } }, FORMAT);
  await api.error(t, 400, 'POST', SEARCH, { params: p, body: { vector: [1, 0, 0, 0] } }, FORMAT);
  await api.error(t, 400, 'POST', SCROLL, { params: p, body: { offset: { id: 1 } } }, FORMAT);
  await api.error(t, 400, 'POST', POINTS, { params: p, body: { ids: 'all' } }, FORMAT);
  await api.error(t, 400, 'POST', PAYLOAD, { params: p, query: { wait: true }, body: { payload: 'x', points: [1] } }, FORMAT);
  await api.error(t, 400, 'POST', DELETE, { params: p, query: { wait: true }, body: { points: [{}] } }, FORMAT);
  await api.error(t, 400, 'POST', DELETE, { params: p, query: { wait: true }, body: { filter: { must: [{ key: 'n', range: 'big' }] } } }, FORMAT);
  await unchanged(t, 'e-types', before, 'wrongly typed requests');
});

test('a query parameter of the wrong type is 400', async (t) => {
  const before = await seeded(t, 'e-query');
  const r = await api.error(t, 400, 'PUT', POINTS, { params: inColl('e-query'), query: { wait: 'maybe' }, body: { points: [{ id: 9, vector: [1, 0, 0, 0] }] } });
  t.regex(r, /^Deserialize error in query parameters: /);
  await unchanged(t, 'e-query', before, 'a bad ?wait=');
});

// -- vector dimensions ---------------------------------------------------------------------------

test('a vector of the wrong size is 400 "Wrong input: Vector dimension error: expected dim: X, got Y"', async (t) => {
  const before = await seeded(t, 'e-dim');
  const p = inColl('e-dim');
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { points: [{ id: 9, vector: [1, 2, 3] }] } }, dimError(4, 3));
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { batch: { ids: [9], vectors: [[1, 2, 3, 4, 5]] } } }, dimError(4, 5));
  await api.error(t, 400, 'PUT', VECTORS, { params: p, query: { wait: true }, body: { points: [{ id: 1, vector: [1, 2] }] } }, dimError(4, 2));
  await api.error(t, 400, 'POST', QUERY, { params: p, body: { query: [1, 2, 3] } }, dimError(4, 3));
  await api.error(t, 400, 'POST', QUERY, { params: p, body: { query: { nearest: [1, 2, 3, 4, 5, 6] } } }, dimError(4, 6));
  await api.error(t, 400, 'POST', SEARCH, { params: p, body: { vector: [1], limit: 3 } }, dimError(4, 1));
  await api.error(t, 400, 'POST', RECOMMEND, { params: p, body: { positive: [[1, 2]], limit: 3 } }, dimError(4, 2));
  await api.error(t, 400, 'POST', QUERY_BATCH, { params: p, body: { searches: [{ query: [1, 0, 0, 0] }, { query: [1, 0, 0] }] } }, dimError(4, 3));
  await api.error(t, 400, 'POST', SEARCH_BATCH, { params: p, body: { searches: [{ vector: [1, 0, 0, 0], limit: 1 }, { vector: [1, 0], limit: 1 }] } }, dimError(4, 2));
  await unchanged(t, 'e-dim', before, 'wrong vector sizes');
});

test('a named vector of the wrong size is the same 400', async (t) => {
  const before = await seeded(t, 'e-dim-named', { a: { size: 4, distance: 'Dot' }, b: { size: 2, distance: 'Euclid' } });
  const p = inColl('e-dim-named');
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { points: [{ id: 9, vector: { a: [1, 0, 0, 0], b: [1, 2, 3] } }] } }, dimError(2, 3));
  await api.error(t, 400, 'PUT', VECTORS, { params: p, query: { wait: true }, body: { points: [{ id: 1, vector: { a: [1, 2, 3] } }] } }, dimError(4, 3));
  await api.error(t, 400, 'POST', QUERY, { params: p, body: { query: [1, 2, 3], using: 'b' } }, dimError(2, 3));
  await api.error(t, 400, 'POST', SEARCH, { params: p, body: { vector: { name: 'a', vector: [1, 2] }, limit: 1 } }, dimError(4, 2));
  await unchanged(t, 'e-dim-named', before, 'wrong named vector sizes');
});

test('an unknown vector name is 400 "Wrong input: Not existing vector name error: ..."', async (t) => {
  const before = await seeded(t, 'e-vname', { a: { size: 4, distance: 'Dot' }, b: { size: 2, distance: 'Euclid' } });
  const p = inColl('e-vname');
  const msg = /^Wrong input: Not existing vector name error: /;
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { points: [{ id: 9, vector: { a: [1, 0, 0, 0], nope: [1, 2] } }] } }, 'Wrong input: Not existing vector name error: nope');
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { points: [{ id: 9, vector: [1, 0, 0, 0] }] } }, msg);
  await api.error(t, 400, 'POST', QUERY, { params: p, body: { query: [1, 2], using: 'nope' } }, 'Wrong input: Not existing vector name error: nope');
  await api.error(t, 400, 'POST', SEARCH, { params: p, body: { vector: { name: 'nope', vector: [1, 2] }, limit: 1 } }, 'Wrong input: Not existing vector name error: nope');
  await api.error(t, 400, 'PUT', VECTORS, { params: p, query: { wait: true }, body: { points: [{ id: 1, vector: { nope: [1, 2] } }] } }, 'Wrong input: Not existing vector name error: nope');
  await unchanged(t, 'e-vname', before, 'unknown vector names');
});

// -- not found -----------------------------------------------------------------------------------

test('every route on a missing collection is 404 "Not found: Collection `x` doesn\'t exist!"', async (t) => {
  const name = 'e-nothing-here';
  const p = inColl(name);
  const calls: Array<[Method, string, unknown]> = [
    ['GET', COLLECTION, undefined],
    ['PATCH', COLLECTION, { optimizers_config: { deleted_threshold: 0.3 } }],
    ['GET', '/collections/{collection_name}/aliases', undefined],
    ['PUT', POINTS, { points: [{ id: 1, vector: [1] }] }],
    ['POST', POINTS, { ids: [1] }],
    ['POST', DELETE, { points: [1] }],
    ['POST', PAYLOAD, { payload: { a: 1 }, points: [1] }],
    ['PUT', PAYLOAD, { payload: { a: 1 }, points: [1] }],
    ['POST', PAYLOAD_DELETE, { keys: ['a'], points: [1] }],
    ['POST', PAYLOAD_CLEAR, { points: [1] }],
    ['PUT', VECTORS, { points: [{ id: 1, vector: [1] }] }],
    ['POST', VECTORS_DELETE, { points: [1], vector: [''] }],
    ['POST', BATCH, { operations: [{ delete: { points: [1] } }] }],
    ['POST', SCROLL, {}],
    ['POST', COUNT, {}],
    ['POST', QUERY, { query: [1] }],
    ['POST', QUERY_BATCH, { searches: [{ query: [1] }] }],
    ['POST', SEARCH, { vector: [1], limit: 1 }],
    ['POST', SEARCH_BATCH, { searches: [{ vector: [1], limit: 1 }] }],
    ['POST', RECOMMEND, { positive: [1], limit: 1 }],
    ['POST', RECOMMEND_BATCH, { searches: [{ positive: [1], limit: 1 }] }],
    ['PUT', INDEX, { field_name: 'a', field_schema: 'keyword' }],
  ];
  for (const [method, pattern, body] of calls) await api.error(t, 404, method, pattern, { params: p, body }, notFound(name));
  await api.error(t, 404, 'GET', POINT, { params: { collection_name: name, id: 1 } }, notFound(name));
  t.false((await api.ok(t, 'GET', '/collections/{collection_name}/exists', { params: p }))?.exists);
});

test('a missing point is 404 "Not found: No point with id N found" for get, query by id and recommend', async (t) => {
  const before = await seeded(t, 'e-nopoint');
  const p = inColl('e-nopoint');
  await api.error(t, 404, 'GET', POINT, { params: { collection_name: 'e-nopoint', id: 77 } }, 'Not found: No point with id 77 found');
  await api.error(t, 404, 'POST', QUERY, { params: p, body: { query: 77 } }, 'Not found: No point with id 77 found');
  await api.error(t, 404, 'POST', QUERY, { params: p, body: { query: { recommend: { positive: [1], negative: [78] } } } }, 'Not found: No point with id 78 found');
  await api.error(t, 404, 'POST', RECOMMEND, { params: p, body: { positive: [79], limit: 2 } }, 'Not found: No point with id 79 found');
  await unchanged(t, 'e-nopoint', before, 'reads of missing points');
});

test('creating an existing collection is 409 "Wrong input: Collection `x` already exists!"', async (t) => {
  const before = await seeded(t, 'e-exists');
  await api.error(t, 409, 'PUT', COLLECTION, { params: inColl('e-exists'), body: { vectors: { size: 4, distance: 'Dot' } } }, 'Wrong input: Collection `e-exists` already exists!');
  await api.error(t, 409, 'PUT', COLLECTION, { params: inColl('e-exists'), body: { vectors: { size: 8, distance: 'Cosine' } } }, 'Wrong input: Collection `e-exists` already exists!');
  await unchanged(t, 'e-exists', before, 'a duplicate create');
  t.deepEqual((await api.ok(t, 'GET', COLLECTION, { params: inColl('e-exists') }))?.config.params.vectors, { size: 4, distance: 'Dot' });
});

// -- validation ----------------------------------------------------------------------------------

test('values that parse but break a rule are 422 "Validation error in JSON body: ..."', async (t) => {
  const fresh = inColl('e-invalid-new');
  await api.error(t, 422, 'PUT', COLLECTION, { params: fresh, body: { vectors: { size: 0, distance: 'Cosine' } } }, VALIDATION);
  await api.error(t, 422, 'PUT', COLLECTION, { params: fresh, body: { vectors: { size: 4, distance: 'Cosine' }, hnsw_config: { ef_construct: 3 } } }, VALIDATION);
  await api.error(t, 422, 'PUT', COLLECTION, { params: fresh, body: { vectors: { size: 4, distance: 'Cosine', hnsw_config: { ef_construct: 1 } } } }, VALIDATION);
  await api.error(t, 422, 'PUT', COLLECTION, { params: fresh, body: { vectors: { size: 4, distance: 'Cosine' }, optimizers_config: { deleted_threshold: 1.5 } } }, VALIDATION);
  await api.error(t, 422, 'PUT', COLLECTION, { params: fresh, body: { vectors: { size: 4, distance: 'Cosine' }, shard_number: 0 } }, VALIDATION);
  t.false((await api.ok(t, 'GET', '/collections/{collection_name}/exists', { params: fresh }))?.exists, 'no collection was created');

  const before = await seeded(t, 'e-invalid');
  const p = inColl('e-invalid');
  await api.error(t, 422, 'PATCH', COLLECTION, { params: p, body: { hnsw_config: { ef_construct: 2 } } }, VALIDATION);
  await api.error(t, 422, 'PATCH', COLLECTION, { params: p, body: { optimizers_config: { deleted_threshold: -0.5 } } }, VALIDATION);
  await api.error(t, 422, 'POST', SEARCH, { params: p, body: { vector: [1, 0, 0, 0], limit: 0 } }, VALIDATION);
  await api.error(t, 422, 'POST', SCROLL, { params: p, body: { limit: 0 } }, VALIDATION);
  await api.error(t, 422, 'POST', QUERY, { params: p, body: { query: [1, 0, 0, 0], limit: 0 } }, VALIDATION);
  await api.error(t, 422, 'POST', QUERY, { params: p, body: { query: [1, 0, 0, 0], params: { quantization: { oversampling: 0.5 } } } }, VALIDATION);
  const cfg = (await api.ok(t, 'GET', COLLECTION, { params: p }))?.config;
  t.like(cfg?.hnsw_config, { ef_construct: 100 });
  t.like(cfg?.optimizer_config, { deleted_threshold: 0.2 });
  await unchanged(t, 'e-invalid', before, 'invalid requests');
});

// -- a rejected write changes nothing ------------------------------------------------------------

test('an upsert whose last point is bad writes none of its points', async (t) => {
  const before = await seeded(t, 'e-atomic-upsert');
  const p = inColl('e-atomic-upsert');
  const good = [10, 11, 12].map((id) => ({ id, vector: [id, 1, 1, 1], payload: { good: true } }));
  // Points form: wrong size, wrong type, bad id, bad payload at the end.
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { points: [...good, { id: 13, vector: [1, 2, 3] }] } }, dimError(4, 3));
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { points: [...good, { id: 13, vector: [1, 2, 'x', 4] }] } }, FORMAT);
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { points: [...good, { id: 'nope', vector: [1, 2, 3, 4] }] } }, FORMAT);
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { points: [...good, { id: 13, vector: [1, 2, 3, 4], payload: 7 }] } }, FORMAT);
  // A number too large for any float: 1e400 is not finite.
  const raw = `{"points":[${good.map((g) => JSON.stringify(g)).join(',')},{"id":13,"vector":[1,2,3,1e400]}]}`;
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, raw }, FORMAT);
  // Changing points that exist is refused just the same: point 1 keeps its vector.
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { points: [{ id: 1, vector: [9, 9, 9, 9], payload: { changed: true } }, { id: 2, vector: [1] }] } }, dimError(4, 1));
  // Batch form: the last vector or payload is bad.
  const ids = [10, 11, 12, 13];
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { batch: { ids, vectors: [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3], [4, 4, 4]] } } }, dimError(4, 3));
  await api.error(t, 400, 'PUT', POINTS, {
    params: p,
    query: { wait: true },
    raw: `{"batch":{"ids":[10,11,12,13],"vectors":[[1,1,1,1],[2,2,2,2],[3,3,3,3],[4,4,4,1e400]]}}`,
  }, FORMAT);
  await api.error(t, 400, 'PUT', POINTS, { params: p, query: { wait: true }, body: { batch: { ids, vectors: [[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3], [4, 4, 4, 4]], payloads: [{}, {}, {}, 'x'] } } }, FORMAT);
  await unchanged(t, 'e-atomic-upsert', before, 'a rejected upsert');
});

test('a payload or vector write naming a missing point is 404 and changes none of the points it names', async (t) => {
  const before = await seeded(t, 'e-atomic-payload');
  const p = inColl('e-atomic-payload');
  const missing = 'Not found: No point with id 404 found';
  await api.error(t, 404, 'POST', PAYLOAD, { params: p, query: { wait: true }, body: { payload: { x: 1 }, points: [404] } }, missing);
  await api.error(t, 404, 'POST', PAYLOAD, { params: p, query: { wait: true }, body: { payload: { x: 1 }, points: [1, 2, 404] } }, missing);
  await api.error(t, 404, 'PUT', PAYLOAD, { params: p, query: { wait: true }, body: { payload: { x: 1 }, points: [1, 404] } }, missing);
  await api.error(t, 404, 'POST', PAYLOAD_DELETE, { params: p, query: { wait: true }, body: { keys: ['n'], points: [1, 404] } }, missing);
  await api.error(t, 404, 'POST', PAYLOAD_CLEAR, { params: p, query: { wait: true }, body: { points: [1, 404] } }, missing);
  await api.error(t, 404, 'PUT', VECTORS, { params: p, query: { wait: true }, body: { points: [{ id: 1, vector: [7, 7, 7, 7] }, { id: 404, vector: [7, 7, 7, 7] }] } }, missing);
  await api.error(t, 400, 'PUT', VECTORS, { params: p, query: { wait: true }, body: { points: [{ id: 1, vector: [7, 7, 7, 7] }, { id: 2, vector: [7, 7, 7] }] } }, dimError(4, 3));
  await unchanged(t, 'e-atomic-payload', before, 'a write naming a missing point');
});

test('a batch update with a malformed operation applies none of its operations', async (t) => {
  const before = await seeded(t, 'e-atomic-batch');
  const p = inColl('e-atomic-batch');
  const first = [
    { upsert: { points: [{ id: 50, vector: [1, 1, 1, 1] }] } },
    { set_payload: { payload: { touched: true }, points: [1] } },
    { delete: { points: [2] } },
  ];
  await api.error(t, 400, 'POST', BATCH, { params: p, query: { wait: true }, body: { operations: [...first, { upsert: { points: [{ id: 'bad id', vector: [1, 1, 1, 1] }] } }] } }, FORMAT);
  await api.error(t, 400, 'POST', BATCH, { params: p, query: { wait: true }, body: { operations: [...first, { explode: {} }] } }, FORMAT);
  await api.error(t, 400, 'POST', BATCH, { params: p, query: { wait: true }, body: { operations: [...first, { set_payload: { points: [1] } }] } }, FORMAT);
  await unchanged(t, 'e-atomic-batch', before, 'a malformed batch');
});

test('a rejected delete, search or index request changes nothing', async (t) => {
  const before = await seeded(t, 'e-atomic-misc');
  const p = inColl('e-atomic-misc');
  await api.error(t, 400, 'POST', DELETE, { params: p, query: { wait: true }, body: { points: [1, 'not-an-id'] } }, FORMAT);
  await api.error(t, 400, 'POST', DELETE, { params: p, query: { wait: true }, body: {} }, FORMAT);
  await api.error(t, 400, 'POST', QUERY, { params: p, raw: '{"query":[1,0,0,1e400]}' }, FORMAT);
  await api.error(t, 400, 'PUT', INDEX, { params: p, query: { wait: true }, body: { field_name: 'n', field_schema: 'no-such-type' } }, FORMAT);
  t.deepEqual((await api.ok(t, 'GET', COLLECTION, { params: p }))?.payload_schema, {});
  await unchanged(t, 'e-atomic-misc', before, 'rejected requests');
});

test('an unknown route is 404', async (t) => {
  const r = await api.send('GET', '/collections/{collection_name}/no-such-thing', { params: inColl('x') });
  t.is(r.status, 404);
  const r2 = await api.send('POST', '/no/such/route', { body: {} });
  t.is(r2.status, 404);
});

// -- inputs the fuzz suite (test/fuzz/fuzz_api.py) found answering 500 ----------------------------

test('a with_payload key that is not a payload path is 400 on every read, also when points match', async (t) => {
  await seeded(t, 'e-with-payload');
  const p = inColl('e-with-payload');
  const cases: Array<[unknown, string]> = [
    [['n', ''], 'with_payload[1]: payload key must be a non-empty string, got an empty one'],
    [{ include: ['a[0]'] }, 'with_payload.include[0]: unsupported payload key "a[0]" (segments are names optionally followed by one [], array indexes and quoted keys are not supported)'],
    [{ exclude: [''] }, 'with_payload.exclude[0]: payload key must be a non-empty string, got an empty one'],
  ];
  for (const [withPayload, message] of cases) {
    const expected = `Format error in JSON body: ${message}`;
    await api.error(t, 400, 'POST', SCROLL, { params: p, body: { with_payload: withPayload } }, expected);
    await api.error(t, 400, 'POST', QUERY, { params: p, body: { with_payload: withPayload } }, expected);
    await api.error(t, 400, 'POST', QUERY, { params: p, body: { query: [1, 0, 0, 0], with_payload: withPayload, with_vector: true } }, expected);
    await api.error(t, 400, 'POST', SEARCH, { params: p, body: { vector: [1, 0, 0, 0], limit: 3, with_payload: withPayload } }, expected);
    await api.error(t, 400, 'POST', RECOMMEND, { params: p, body: { positive: [1], limit: 3, with_payload: withPayload } }, expected);
    await api.error(t, 400, 'POST', POINTS, { params: p, body: { ids: [1, 2], with_payload: withPayload } }, expected);
  }
  const ok = await api.ok(t, 'POST', SCROLL, { params: p, body: { with_payload: ['n', 'a[]'] } });
  t.deepEqual(ok?.points?.map((x: { payload: unknown }) => x.payload), [{ n: 1 }, { n: 2 }, { n: 3 }], 'valid keys still select');
});

test('a search batch whose later search is malformed is 400 and the node stays up (an earlier failing search crashed it)', async (t) => {
  const p = inColl('e-batch-crash');
  await api.ok(t, 'PUT', COLLECTION, { params: p, body: { vectors: { a: { size: 2, distance: 'Dot' } } } });
  await api.ok(t, 'PUT', POINTS, { params: p, query: { wait: true }, body: { points: [{ id: 1, vector: { a: [1, 2] } }] } });
  // The first search fails while it runs (no unnamed vector), the second while it is parsed.
  const searches = [
    { vector: [1, 2], limit: 1 },
    { vector: 'x', limit: 1 },
  ];
  await api.error(t, 400, 'POST', SEARCH_BATCH, { params: p, body: { searches } }, 'Format error in JSON body: missing field `vector` (an array of numbers, or {"name": ..., "vector": [...]})');
  await api.error(t, 422, 'POST', SEARCH_BATCH, { params: p, body: { searches: [searches[0], { vector: [1, 2], limit: 1e12 }] } }, /^Validation error in JSON body: limit: /);
  await new Promise((resolve) => setTimeout(resolve, 200));
  const health = await fetch(`${api.url}/healthz`);
  t.is(await health.text(), 'healthz check passed');
  const found = await api.ok(t, 'POST', SEARCH_BATCH, { params: p, body: { searches: [{ vector: { name: 'a', vector: [1, 2] }, limit: 1 }] } });
  t.deepEqual(found?.[0]?.map((x: { id: number }) => x.id), [1]);
});
