/**
 * Contract tests of points against a real bin/quiver: writes (upsert in both forms,
 * delete, payload and vector operations, batch), reads (get, retrieve, scroll, count)
 * and similarity (query in its forms, query batch, and the legacy search / recommend
 * routes the v1.18 spec still documents). Every answer is validated against the
 * reference's OpenAPI schemas, and its meaning against brute force over the same data.
 *
 * One server for the file. The read-only collection `search` (300 points, HNSW built,
 * scalar quantization) is filled once in `before`; tests that write use collections of
 * their own.
 */

import test, { type ExecutionContext } from 'ava';

import { ContractClient } from '../support/contract';
import { DEADLINE_MS, waitFor } from '../support/wait';
import { f32, higherIsBetter, inRankOrder, normalize, randomVector, ranked, recommendVector, rng, score, type Distance } from '../support/vectors';
import { BATCH, COLLECTION, COUNT, DELETE, INDEX, PAYLOAD, PAYLOAD_CLEAR, PAYLOAD_DELETE, POINT, POINTS, QUERY, QUERY_BATCH, RECOMMEND, RECOMMEND_BATCH, SCROLL, SEARCH, SEARCH_BATCH, VECTORS, VECTORS_DELETE } from '../support/routes';

let api: ContractClient;

type Id = number | string;
interface Point {
  id: Id;
  vector: number[];
  payload: Record<string, unknown>;
}

const EPS = 1e-4;
const DIM = 8;
const N = 300;
const SEARCH_COLL = 'search';
const GROUPS = ['red', 'green', 'blue'];

/** The points of the `search` collection, as sent. */
const data: Point[] = (() => {
  const next = rng(42);
  return Array.from({ length: N }, (_, i) => ({
    id: i,
    vector: randomVector(next, DIM),
    payload: { i, group: GROUPS[i % 3], price: i * 0.5, even: i % 2 === 0, meta: { rank: N - i, tag: `t${i % 5}` } },
  }));
})();
const byId = new Map(data.map((p) => [p.id, p]));

const inColl = (collection_name: string) => ({ collection_name });
const ids = (points: Array<{ id: Id }>) => points.map((p) => p.id);

async function waitIndexed(t: ExecutionContext, name: string, count: number): Promise<void> {
  await waitFor(`collection ${name} green with ${count} indexed vectors`, async () => {
    const ci = (await api.send('GET', COLLECTION, { params: inColl(name) })).body?.result;
    return ci?.status === 'green' && ci?.indexed_vectors_count === count;
  }).catch((err: Error) => t.fail(err.message));
}

test.before(async (t) => {
  api = await ContractClient.start();
  await api.ok(t, 'PUT', COLLECTION, {
    params: inColl(SEARCH_COLL),
    body: {
      vectors: { size: DIM, distance: 'Cosine' },
      hnsw_config: { m: 16, ef_construct: 100 },
      // 1 KiB: the HNSW index is built once 32 vectors of 8 floats are there.
      optimizers_config: { indexing_threshold: 1 },
      quantization_config: { scalar: { type: 'int8', quantile: 0.99, always_ram: true } },
    },
  });
  for (const [field, schema] of [['i', 'integer'], ['price', 'float'], ['group', 'keyword']]) {
    await api.ok(t, 'PUT', INDEX, { params: inColl(SEARCH_COLL), query: { wait: true }, body: { field_name: field, field_schema: schema } });
  }
  for (let from = 0; from < N; from += 100) {
    await api.ok(t, 'PUT', POINTS, { params: inColl(SEARCH_COLL), query: { wait: true }, body: { points: data.slice(from, from + 100) } });
  }
  await waitIndexed(t, SEARCH_COLL, N);
});

test.after.always(async () => {
  await api?.stop();
});

async function createCollection(t: ExecutionContext, name: string, vectors: unknown, extra: Record<string, unknown> = {}): Promise<void> {
  await api.ok(t, 'PUT', COLLECTION, { params: inColl(name), body: { vectors, ...extra } });
}

async function upsert(t: ExecutionContext, name: string, points: unknown[], wait = true) {
  return api.ok(t, 'PUT', POINTS, { params: inColl(name), query: { wait }, body: { points } });
}

async function count(t: ExecutionContext, name: string, filter?: unknown): Promise<number> {
  return (await api.ok(t, 'POST', COUNT, { params: inColl(name), body: filter === undefined ? {} : { filter } }))?.count;
}

async function getPoint(t: ExecutionContext, name: string, id: Id) {
  return api.ok(t, 'GET', POINT, { params: { collection_name: name, id } });
}

async function scrollAll(t: ExecutionContext, name: string, body: Record<string, unknown> = {}) {
  return (await api.ok(t, 'POST', SCROLL, { params: inColl(name), body: { limit: 1000, ...body } }))?.points ?? [];
}

/** Brute-force top-k of the `search` collection (Cosine). */
function exact(query: number[], k: number, keep: (p: Point) => boolean = () => true, offset = 0) {
  return ranked<Id>('Cosine', data.filter(keep), query).slice(offset, offset + k);
}

function closeTo(t: ExecutionContext, actual: number, expected: number, what: string, eps = EPS): void {
  t.true(Math.abs(actual - expected) <= eps, `${what}: ${actual} is not within ${eps} of ${expected}`);
}

function checkScores(t: ExecutionContext, points: Array<{ id: Id; score: number }>, query: number[], distance: Distance = 'Cosine', vectors: Map<Id, number[]> = new Map(data.map((p) => [p.id, p.vector]))): void {
  t.true(inRankOrder(distance, points.map((p) => p.score)), `scores not in rank order: ${points.map((p) => p.score).join(', ')}`);
  for (const p of points) closeTo(t, p.score, score(distance, vectors.get(p.id)!, query), `score of ${p.id}`);
}

function closeVector(t: ExecutionContext, actual: unknown, expected: number[], what: string): void {
  t.true(Array.isArray(actual) && actual.length === expected.length, `${what}: ${JSON.stringify(actual)} vs ${JSON.stringify(expected)}`);
  if (!Array.isArray(actual)) return;
  for (let i = 0; i < expected.length; i++) closeTo(t, actual[i] as number, expected[i], `${what}[${i}]`, 1e-5);
}

const queryVec = (seed: number) => randomVector(rng(seed), DIM);

// -- upsert, get, retrieve -------------------------------------------------------------------------

test('upsert in the points form and the batch form, with integer and UUID ids; versions are the operation ids', async (t) => {
  const name = 'w-upsert';
  await createCollection(t, name, { size: 3, distance: 'Dot' });
  const r1 = await upsert(t, name, [
    { id: 1, vector: [1, 2, 3], payload: { a: 1, s: 'x' } },
    { id: 'F0E1D2C3-B4A5-4697-8877-665544332211', vector: [0.5, 0, -1] },
  ]);
  t.is(r1?.status, 'completed');
  t.true(Number.isInteger(r1?.operation_id));
  const r2 = await api.ok(t, 'PUT', POINTS, {
    params: inColl(name),
    query: { wait: true },
    body: {
      batch: {
        ids: [2, 3, '123e4567-e89b-12d3-a456-426614174000'],
        vectors: [[0, 1, 0], [0, 0, 1], [1, 1, 1]],
        payloads: [{ b: true }, null, { nested: { k: [1, 2] } }],
      },
    },
  });
  t.is(r2?.status, 'completed');
  t.true(r2?.operation_id > r1?.operation_id, 'operation ids grow');
  t.is(await count(t, name), 5);

  const p1 = await getPoint(t, name, 1);
  t.deepEqual(p1, { ...p1, id: 1, payload: { a: 1, s: 'x' }, vector: [1, 2, 3] });
  // A UUID comes back lower-case and hyphenated, whatever form it was sent in.
  const uuid = 'f0e1d2c3-b4a5-4697-8877-665544332211';
  const pu = await getPoint(t, name, uuid);
  t.is(pu?.id, uuid);
  t.deepEqual(pu?.payload, {});
  t.deepEqual(pu?.vector, [0.5, 0, -1]);
  t.deepEqual((await getPoint(t, name, '123e4567-e89b-12d3-a456-426614174000'))?.payload, { nested: { k: [1, 2] } });
  t.deepEqual((await getPoint(t, name, 3))?.payload, {});

  // Upsert replaces the whole point, payload included.
  const r3 = await upsert(t, name, [{ id: 1, vector: [3, 2, 1], payload: { c: 3 } }]);
  t.true(r3?.operation_id > r2?.operation_id);
  t.deepEqual((await getPoint(t, name, 1))?.payload, { c: 3 });
  t.deepEqual((await getPoint(t, name, 1))?.vector, [3, 2, 1]);
  t.is(await count(t, name), 5);

  // Each point's version is the operation that last wrote it.
  const res = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: [1, 1, 1], limit: 10 } });
  const version = new Map(res?.points.map((p: { id: Id; version: number }) => [p.id, p.version]));
  t.is(version.get(1), r3.operation_id);
  t.is(version.get(2), r2.operation_id);
  t.is(version.get(uuid), r1.operation_id);
});

test('upsert with wait=false is acknowledged and the points arrive', async (t) => {
  const name = 'w-nowait';
  await createCollection(t, name, { size: 2, distance: 'Euclid' });
  const r = await upsert(t, name, [{ id: 10, vector: [1, 1] }, { id: 11, vector: [2, 2] }], false);
  t.true(['acknowledged', 'completed'].includes(r?.status));
  const count = async (): Promise<number> => (await api.send('POST', COUNT, { params: inColl(name), body: {} })).body?.result?.count ?? 0;
  await waitFor('both points counted', async () => (await count()) >= 2, DEADLINE_MS, 20).catch(() => undefined);
  t.is(await count(), 2);
});

test('named vectors: upsert in both forms, get, and with_vector by name', async (t) => {
  const name = 'w-named';
  await createCollection(t, name, { img: { size: 4, distance: 'Dot' }, txt: { size: 3, distance: 'Euclid' } });
  await upsert(t, name, [{ id: 1, vector: { img: [1, 0, 0, 0], txt: [1, 2, 3] }, payload: { k: 1 } }]);
  await api.ok(t, 'PUT', POINTS, {
    params: inColl(name),
    query: { wait: true },
    body: { batch: { ids: [2, 3], vectors: { img: [[0, 1, 0, 0], [0, 0, 1, 0]], txt: [[0, 0, 0], [1, 1, 1]] } } },
  });
  t.deepEqual((await getPoint(t, name, 1))?.vector, { img: [1, 0, 0, 0], txt: [1, 2, 3] });
  const only = await api.ok(t, 'POST', POINTS, { params: inColl(name), body: { ids: [2, 3], with_vector: ['txt'], with_payload: false } });
  t.deepEqual(
    only?.slice().sort((a: { id: number }, b: { id: number }) => a.id - b.id).map((p: { id: number; vector: unknown }) => [p.id, p.vector]),
    [
      [2, { txt: [0, 0, 0] }],
      [3, { txt: [1, 1, 1] }],
    ],
  );
});

test('named vectors are optional per point: a point may carry some or none of them', async (t) => {
  const name = 'w-optional';
  await createCollection(t, name, { x: { size: 2, distance: 'Dot' }, y: { size: 2, distance: 'Dot' } });
  await upsert(t, name, [
    { id: 1, vector: { x: [1, 0] } },
    { id: 2, vector: {} },
    { id: 3, vector: { x: [0, 1], y: [1, 1] } },
  ]);
  t.is(await count(t, name), 3);
  t.deepEqual((await getPoint(t, name, 1))?.vector, { x: [1, 0] });
  t.deepEqual((await getPoint(t, name, 2))?.vector, {});
  const q = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: [1, 1], using: 'y' } });
  t.deepEqual(ids(q?.points ?? []), [3]);
  const qx = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: [1, 1], using: 'x' } });
  t.deepEqual(ids(qx?.points ?? []).slice().sort(), [1, 3]);
  t.is(await count(t, name, { must: [{ has_vector: 'y' }] }), 1);
});

test('a Cosine collection keeps vectors normalized, as the reference does', async (t) => {
  const name = 'w-cosine';
  await createCollection(t, name, { size: 3, distance: 'Cosine' });
  await upsert(t, name, [{ id: 1, vector: [3, 4, 0] }]);
  closeVector(t, (await getPoint(t, name, 1))?.vector, [0.6, 0.8, 0], 'stored vector');
});

test('GET one point returns its payload and vector; a missing point is 404', async (t) => {
  const p = await getPoint(t, SEARCH_COLL, 7);
  t.is(p?.id, 7);
  t.deepEqual(p?.payload, byId.get(7)!.payload);
  closeVector(t, p?.vector, f32(normalize(byId.get(7)!.vector)), 'vector of 7');
  await api.error(t, 404, 'GET', POINT, { params: { collection_name: SEARCH_COLL, id: 123456 } }, 'Not found: No point with id 123456 found');
  await api.error(t, 404, 'GET', POINT, { params: { collection_name: SEARCH_COLL, id: '00000000-0000-0000-0000-000000000000' } }, /^Not found: No point with id 00000000-0000-0000-0000-000000000000 found$/);
});

test('retrieve many: payload by default, vectors on request, payload projections, missing ids skipped', async (t) => {
  const res = await api.ok(t, 'POST', POINTS, { params: inColl(SEARCH_COLL), body: { ids: [3, 1, 99999, 2] } });
  t.deepEqual(ids(res ?? []).slice().sort(), [1, 2, 3]);
  for (const p of res ?? []) {
    t.deepEqual(p.payload, byId.get(p.id)!.payload);
    t.true(p.vector === undefined || p.vector === null, 'no vector unless asked');
  }
  const withVec = await api.ok(t, 'POST', POINTS, { params: inColl(SEARCH_COLL), body: { ids: [4], with_vector: true, with_payload: false } });
  t.is(withVec?.length, 1);
  t.true(withVec?.[0].payload === undefined || withVec?.[0].payload === null, 'no payload when with_payload is false');
  closeVector(t, withVec?.[0].vector, f32(normalize(byId.get(4)!.vector)), 'vector of 4');

  const include = await api.ok(t, 'POST', POINTS, { params: inColl(SEARCH_COLL), body: { ids: [5], with_payload: { include: ['group', 'meta.tag'] } } });
  t.deepEqual(include?.[0].payload, { group: GROUPS[5 % 3], meta: { tag: 't0' } });
  const exclude = await api.ok(t, 'POST', POINTS, { params: inColl(SEARCH_COLL), body: { ids: [5], with_payload: { exclude: ['meta', 'price'] } } });
  t.deepEqual(exclude?.[0].payload, { i: 5, group: GROUPS[5 % 3], even: false });
  const list = await api.ok(t, 'POST', POINTS, { params: inColl(SEARCH_COLL), body: { ids: [6], with_payload: ['i', 'even'] } });
  t.deepEqual(list?.[0].payload, { i: 6, even: true });
});

// -- delete, payload and vector operations ------------------------------------------------------------

test('delete by ids (missing ids are fine) and by filter', async (t) => {
  const name = 'w-delete';
  await createCollection(t, name, { size: 2, distance: 'Dot' });
  await upsert(
    t,
    name,
    Array.from({ length: 10 }, (_, i) => ({ id: i, vector: [i, 1], payload: { g: i % 2 === 0 ? 'even' : 'odd' } })),
  );
  const r = await api.ok(t, 'POST', DELETE, { params: inColl(name), query: { wait: true }, body: { points: [0, 1, 424242] } });
  t.is(r?.status, 'completed');
  t.deepEqual(ids(await scrollAll(t, name)), [2, 3, 4, 5, 6, 7, 8, 9]);
  await api.ok(t, 'POST', DELETE, { params: inColl(name), query: { wait: true }, body: { filter: { must: [{ key: 'g', match: { value: 'odd' } }] } } });
  t.deepEqual(ids(await scrollAll(t, name)), [2, 4, 6, 8]);
  t.is(await count(t, name), 4);
  await api.error(t, 404, 'GET', POINT, { params: { collection_name: name, id: 3 } });
});

test('set payload merges (also under a key and by filter), overwrite replaces, delete removes keys, clear empties', async (t) => {
  const name = 'w-payload';
  await createCollection(t, name, { size: 2, distance: 'Dot' });
  await upsert(t, name, [
    { id: 1, vector: [1, 0], payload: { a: 1, b: { c: 2 }, tag: 'x' } },
    { id: 2, vector: [0, 1], payload: { a: 2, tag: 'y' } },
    { id: 3, vector: [1, 1], payload: { a: 3, tag: 'x' } },
  ]);
  const p = (id: number) => getPoint(t, name, id).then((r) => r?.payload);

  t.is((await api.ok(t, 'POST', PAYLOAD, { params: inColl(name), query: { wait: true }, body: { payload: { n: 10, a: 100 }, points: [1] } }))?.status, 'completed');
  t.deepEqual(await p(1), { a: 100, b: { c: 2 }, tag: 'x', n: 10 });

  await api.ok(t, 'POST', PAYLOAD, { params: inColl(name), query: { wait: true }, body: { payload: { d: 4 }, points: [1], key: 'b' } });
  t.deepEqual(await p(1), { a: 100, b: { c: 2, d: 4 }, tag: 'x', n: 10 });

  await api.ok(t, 'POST', PAYLOAD, { params: inColl(name), query: { wait: true }, body: { payload: { seen: true }, filter: { must: [{ key: 'tag', match: { value: 'x' } }] } } });
  t.is((await p(1)).seen, true);
  t.is((await p(3)).seen, true);
  t.false('seen' in (await p(2)));

  t.is((await api.ok(t, 'PUT', PAYLOAD, { params: inColl(name), query: { wait: true }, body: { payload: { only: 'this' }, points: [2] } }))?.status, 'completed');
  t.deepEqual(await p(2), { only: 'this' });

  t.is((await api.ok(t, 'POST', PAYLOAD_DELETE, { params: inColl(name), query: { wait: true }, body: { keys: ['a', 'b.c'], points: [1] } }))?.status, 'completed');
  t.deepEqual(await p(1), { b: { d: 4 }, tag: 'x', n: 10, seen: true });

  await api.ok(t, 'POST', PAYLOAD_DELETE, { params: inColl(name), query: { wait: true }, body: { keys: ['seen'], filter: { must: [{ key: 'tag', match: { value: 'x' } }] } } });
  t.false('seen' in (await p(3)));

  t.is((await api.ok(t, 'POST', PAYLOAD_CLEAR, { params: inColl(name), query: { wait: true }, body: { points: [1, 3] } }))?.status, 'completed');
  t.deepEqual(await p(1), {});
  t.deepEqual(await p(3), {});
  t.deepEqual(await p(2), { only: 'this' });
  // Vectors are untouched by payload operations.
  t.deepEqual((await getPoint(t, name, 1))?.vector, [1, 0]);
});

test('update vectors replaces only the named vectors given; delete vectors removes them', async (t) => {
  const name = 'w-vectors';
  await createCollection(t, name, { img: { size: 2, distance: 'Dot' }, txt: { size: 3, distance: 'Dot' } });
  await upsert(t, name, [
    { id: 1, vector: { img: [1, 0], txt: [1, 0, 0] }, payload: { k: 1 } },
    { id: 2, vector: { img: [0, 1], txt: [0, 1, 0] } },
  ]);
  t.is((await api.ok(t, 'PUT', VECTORS, { params: inColl(name), query: { wait: true }, body: { points: [{ id: 1, vector: { img: [5, 5] } }] } }))?.status, 'completed');
  t.deepEqual((await getPoint(t, name, 1))?.vector, { img: [5, 5], txt: [1, 0, 0] });
  t.deepEqual((await getPoint(t, name, 1))?.payload, { k: 1 });

  t.is((await api.ok(t, 'POST', VECTORS_DELETE, { params: inColl(name), query: { wait: true }, body: { points: [2], vector: ['txt'] } }))?.status, 'completed');
  t.deepEqual((await getPoint(t, name, 2))?.vector, { img: [0, 1] });
  // The point is still there, and a search over `txt` no longer finds it.
  t.is(await count(t, name), 2);
  const q = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: [0, 1, 0], using: 'txt', limit: 10 } });
  t.deepEqual(ids(q?.points ?? []), [1]);
  const qi = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: [0, 1], using: 'img', limit: 10 } });
  t.deepEqual(ids(qi?.points ?? []), [1, 2]);

  // Update vectors of an unnamed-vector collection.
  await createCollection(t, 'w-vectors-1', { size: 2, distance: 'Euclid' });
  await upsert(t, 'w-vectors-1', [{ id: 'aaaaaaaa-0000-4000-8000-000000000001', vector: [1, 1] }]);
  await api.ok(t, 'PUT', VECTORS, { params: inColl('w-vectors-1'), query: { wait: true }, body: { points: [{ id: 'aaaaaaaa-0000-4000-8000-000000000001', vector: [7, 8] }] } });
  t.deepEqual((await getPoint(t, 'w-vectors-1', 'aaaaaaaa-0000-4000-8000-000000000001'))?.vector, [7, 8]);
});

test('batch update applies its operations in order and answers one UpdateResult each', async (t) => {
  const name = 'w-batch';
  await createCollection(t, name, { a: { size: 2, distance: 'Dot' }, b: { size: 2, distance: 'Dot' } });
  const operations = [
    { upsert: { points: [{ id: 1, vector: { a: [1, 0], b: [0, 1] }, payload: { x: 1 } }, { id: 2, vector: { a: [0, 1], b: [1, 0] }, payload: { x: 2 } }] } },
    { upsert: { batch: { ids: [3, 4], vectors: { a: [[1, 1], [2, 2]], b: [[1, 1], [2, 2]] }, payloads: [{ x: 3 }, { x: 4 }] } } },
    { set_payload: { payload: { y: 'set' }, points: [1, 2] } },
    { overwrite_payload: { payload: { z: 'over' }, points: [2] } },
    { delete_payload: { keys: ['x'], points: [1] } },
    { clear_payload: { points: [3] } },
    { update_vectors: { points: [{ id: 4, vector: { a: [9, 9] } }] } },
    { delete_vectors: { points: [1], vector: ['b'] } },
    { delete: { points: [3] } },
  ];
  const res = await api.ok(t, 'POST', BATCH, { params: inColl(name), query: { wait: true }, body: { operations } });
  t.is(res?.length, operations.length);
  t.true((res ?? []).every((r: { status: string }) => r.status === 'completed'));
  const all = await scrollAll(t, name, { with_vector: true });
  t.deepEqual(all.map((p: { id: Id; payload: unknown; vector: unknown }) => [p.id, p.payload, p.vector]), [
    [1, { y: 'set' }, { a: [1, 0] }],
    [2, { z: 'over' }, { a: [0, 1], b: [1, 0] }],
    [4, { x: 4 }, { a: [9, 9], b: [2, 2] }],
  ]);
});

// -- scroll and count ---------------------------------------------------------------------------------

test('scroll pages through every point in id order with limit and next_page_offset', async (t) => {
  const seen: Id[] = [];
  let offset: Id | null = null;
  let pages = 0;
  do {
    const body: Record<string, unknown> = { limit: 128, with_payload: false };
    if (offset !== null) body.offset = offset;
    const page = await api.ok(t, 'POST', SCROLL, { params: inColl(SEARCH_COLL), body });
    t.true((page?.points.length ?? 0) <= 128);
    seen.push(...ids(page?.points ?? []));
    offset = page?.next_page_offset ?? null;
    pages++;
  } while (offset !== null && pages < 10);
  t.is(pages, 3);
  t.deepEqual(seen, data.map((p) => p.id));

  // The offset is inclusive: the page starts at that id.
  const from = await api.ok(t, 'POST', SCROLL, { params: inColl(SEARCH_COLL), body: { offset: 250, limit: 3 } });
  t.deepEqual(ids(from?.points ?? []), [250, 251, 252]);
  t.is(from?.next_page_offset, 253);
  t.deepEqual(from?.points[0].payload, byId.get(250)!.payload);
  // Default limit is 10.
  const dflt = await api.ok(t, 'POST', SCROLL, { params: inColl(SEARCH_COLL), body: {} });
  t.is(dflt?.points.length, 10);
  t.is(dflt?.next_page_offset, 10);
});

test('scroll from an offset id that does not exist starts at the next id', async (t) => {
  const name = 'w-scroll-gap';
  await createCollection(t, name, { size: 2, distance: 'Dot' });
  await upsert(t, name, [10, 20, 30, 40].map((id) => ({ id, vector: [id, 1] })));
  const page = await api.ok(t, 'POST', SCROLL, { params: inColl(name), body: { offset: 15, limit: 2, with_payload: false } });
  t.deepEqual(ids(page?.points ?? []), [20, 30]);
  t.is(page?.next_page_offset, 40);
  const end = await api.ok(t, 'POST', SCROLL, { params: inColl(name), body: { offset: 41, limit: 2 } });
  t.deepEqual(end?.points, []);
  t.is(end?.next_page_offset, null);
});

test('an upsert naming an id twice keeps the last one', async (t) => {
  const name = 'w-dup-ids';
  await createCollection(t, name, { size: 2, distance: 'Dot' });
  await upsert(t, name, [
    { id: 1, vector: [1, 0], payload: { v: 'first' } },
    { id: 1, vector: [0, 1], payload: { v: 'last' } },
  ]);
  t.is(await count(t, name), 1);
  const p = await getPoint(t, name, 1);
  t.deepEqual(p?.payload, { v: 'last' });
  t.deepEqual(p?.vector, [0, 1]);
});

test('query without a query returns points in id order, filtered, with offset', async (t) => {
  const res = await api.ok(t, 'POST', QUERY, {
    params: inColl(SEARCH_COLL),
    body: { filter: { must: [{ key: 'group', match: { value: 'blue' } }] }, limit: 4, offset: 1, with_payload: ['i'] },
  });
  t.deepEqual(ids(res?.points ?? []), [5, 8, 11, 14]);
  t.deepEqual(res?.points.map((p: { payload: unknown }) => p.payload), [{ i: 5 }, { i: 8 }, { i: 11 }, { i: 14 }]);
});

test('scroll puts integer ids before UUIDs, and filters, projects payload and returns vectors', async (t) => {
  const name = 'w-scroll';
  await createCollection(t, name, { size: 2, distance: 'Dot' });
  await upsert(t, name, [
    { id: 'ffffffff-0000-4000-8000-000000000000', vector: [1, 0], payload: { k: 'u2', n: 1 } },
    { id: 20, vector: [0, 1], payload: { k: 'i20', n: 2 } },
    { id: '00000000-0000-4000-8000-000000000001', vector: [1, 1], payload: { k: 'u1', n: 3 } },
    { id: 3, vector: [2, 1], payload: { k: 'i3', n: 4 } },
  ]);
  t.deepEqual(ids(await scrollAll(t, name)), [3, 20, '00000000-0000-4000-8000-000000000001', 'ffffffff-0000-4000-8000-000000000000']);
  const page = await api.ok(t, 'POST', SCROLL, { params: inColl(name), body: { limit: 2, with_payload: { include: ['k'] }, with_vector: true } });
  t.deepEqual(page?.points.map((p: { id: Id; payload: unknown; vector: unknown }) => [p.id, p.payload, p.vector]), [
    [3, { k: 'i3' }, [2, 1]],
    [20, { k: 'i20' }, [0, 1]],
  ]);
  t.is(page?.next_page_offset, '00000000-0000-4000-8000-000000000001');
  const filtered = await scrollAll(t, name, { filter: { must: [{ key: 'n', range: { gte: 2, lte: 3 } }] }, with_payload: { exclude: ['n'] } });
  t.deepEqual(filtered.map((p: { id: Id; payload: unknown }) => [p.id, p.payload]), [
    [20, { k: 'i20' }],
    ['00000000-0000-4000-8000-000000000001', { k: 'u1' }],
  ]);
});

test('scroll with order_by on an integer and a float index: direction, start_from, order_value', async (t) => {
  const asc = await api.ok(t, 'POST', SCROLL, { params: inColl(SEARCH_COLL), body: { limit: 5, order_by: 'i', with_payload: false } });
  t.deepEqual(ids(asc?.points ?? []), [0, 1, 2, 3, 4]);
  t.deepEqual(asc?.points.map((p: { order_value: number }) => p.order_value), [0, 1, 2, 3, 4]);

  const desc = await api.ok(t, 'POST', SCROLL, { params: inColl(SEARCH_COLL), body: { limit: 4, order_by: { key: 'price', direction: 'desc' } } });
  t.deepEqual(ids(desc?.points ?? []), [299, 298, 297, 296]);
  t.deepEqual(desc?.points.map((p: { order_value: number }) => p.order_value), [149.5, 149, 148.5, 148]);
  t.deepEqual(desc?.points[0].payload, byId.get(299)!.payload);

  const start = await api.ok(t, 'POST', SCROLL, { params: inColl(SEARCH_COLL), body: { limit: 3, order_by: { key: 'i', direction: 'asc', start_from: 100 } } });
  t.deepEqual(ids(start?.points ?? []), [100, 101, 102]);

  const filtered = await api.ok(t, 'POST', SCROLL, {
    params: inColl(SEARCH_COLL),
    body: { limit: 3, order_by: { key: 'i', direction: 'desc' }, filter: { must: [{ key: 'group', match: { value: 'green' } }] } },
  });
  t.deepEqual(ids(filtered?.points ?? []), [298, 295, 292]);
});

test('scroll with order_by on a field without a range index is 400', async (t) => {
  await api.error(t, 400, 'POST', SCROLL, { params: inColl(SEARCH_COLL), body: { order_by: 'even' } }, /^Bad request: /);
});

test('count: all points, with a filter, exact and approximate', async (t) => {
  t.is(await count(t, SEARCH_COLL), N);
  t.is(await count(t, SEARCH_COLL, { must: [{ key: 'group', match: { value: 'red' } }] }), 100);
  t.is(await count(t, SEARCH_COLL, { must: [{ key: 'even', match: { value: true } }], must_not: [{ key: 'i', range: { lt: 100 } }] }), 100);
  t.is(await count(t, SEARCH_COLL, { should: [{ has_id: [1, 2, 3, 100000] }] }), 3);
  const exactTrue = await api.ok(t, 'POST', COUNT, { params: inColl(SEARCH_COLL), body: { exact: true, filter: { must: [{ key: 'price', range: { gte: 100 } }] } } });
  t.is(exactTrue?.count, 100);
  const approx = await api.ok(t, 'POST', COUNT, { params: inColl(SEARCH_COLL), body: { exact: false } });
  t.true(Number.isInteger(approx?.count));
});

// -- query ------------------------------------------------------------------------------------------

test('query by vector returns the exact top 10 by default, best first, with exact scores', async (t) => {
  const q = queryVec(1);
  const res = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q } });
  const want = exact(q, 10);
  t.is(res?.points.length, 10);
  t.deepEqual(ids(res?.points ?? []), ids(want));
  checkScores(t, res?.points ?? [], q);
  // No payload and no vector unless asked.
  for (const p of res?.points ?? []) {
    t.true(p.payload === undefined || p.payload === null);
    t.true(p.vector === undefined || p.vector === null);
  }
});

test('query with params.exact and with params.hnsw_ef', async (t) => {
  for (let s = 2; s < 6; s++) {
    const q = queryVec(s);
    const ex = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, limit: 20, params: { exact: true } } });
    t.deepEqual(ids(ex?.points ?? []), ids(exact(q, 20)));
    checkScores(t, ex?.points ?? [], q);
    const hnsw = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, limit: 20, params: { hnsw_ef: 128, exact: false } } });
    t.is(hnsw?.points.length, 20);
    const truth = new Set(ids(exact(q, 20)));
    const recall = ids(hnsw?.points ?? []).filter((id) => truth.has(id)).length / 20;
    t.true(recall >= 0.9, `recall ${recall}`);
    t.true(inRankOrder('Cosine', (hnsw?.points ?? []).map((p: { score: number }) => p.score)));
  }
});

test('query with quantization rescore and oversampling returns exact scores', async (t) => {
  const q = queryVec(7);
  const res = await api.ok(t, 'POST', QUERY, {
    params: inColl(SEARCH_COLL),
    body: { query: q, limit: 10, params: { hnsw_ef: 128, quantization: { ignore: false, rescore: true, oversampling: 3 } } },
  });
  t.is(res?.points.length, 10);
  checkScores(t, res?.points ?? [], q);
  t.is(res?.points[0].id, exact(q, 1)[0].id);
  const ignored = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, limit: 10, params: { quantization: { ignore: true } } } });
  checkScores(t, ignored?.points ?? [], q);
});

test('query by point id and by {nearest}: the point itself is left out', async (t) => {
  const self = byId.get(17)!;
  const res = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: 17, limit: 5, params: { exact: true } } });
  t.deepEqual(ids(res?.points ?? []), ids(exact(self.vector, 5, (p) => p.id !== 17)));
  checkScores(t, res?.points ?? [], self.vector);

  const q = queryVec(8);
  const nearest = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: { nearest: q }, limit: 5, params: { exact: true } } });
  t.deepEqual(ids(nearest?.points ?? []), ids(exact(q, 5)));
  const nearestId = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: { nearest: 17 }, limit: 5, params: { exact: true } } });
  t.deepEqual(ids(nearestId?.points ?? []), ids(res?.points ?? []));
});

test('query {recommend} by ids and vectors: average_vector, examples left out', async (t) => {
  const pos = [10, 20];
  const neg = [30];
  const target = recommendVector(
    pos.map((id) => normalize(byId.get(id)!.vector)),
    neg.map((id) => normalize(byId.get(id)!.vector)),
  );
  const res = await api.ok(t, 'POST', QUERY, {
    params: inColl(SEARCH_COLL),
    body: { query: { recommend: { positive: pos, negative: neg, strategy: 'average_vector' } }, limit: 8, params: { exact: true } },
  });
  t.deepEqual(ids(res?.points ?? []), ids(exact(target, 8, (p) => ![...pos, ...neg].includes(p.id as number))));
  checkScores(t, res?.points ?? [], target);

  const v = queryVec(9);
  const mixed = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: { recommend: { positive: [v, 10] } }, limit: 5, params: { exact: true } } });
  // A vector example is used as sent; a point example as stored (normalized).
  const mixedTarget = recommendVector([v, normalize(byId.get(10)!.vector)], []);
  t.deepEqual(ids(mixed?.points ?? []), ids(exact(mixedTarget, 5, (p) => p.id !== 10)));
});

test('query with a filter returns only matching points, ranked among them', async (t) => {
  const q = queryVec(11);
  const filter = { must: [{ key: 'group', match: { value: 'blue' } }, { key: 'price', range: { gte: 20, lt: 120 } }] };
  const keep = (p: Point) => p.payload.group === 'blue' && (p.payload.price as number) >= 20 && (p.payload.price as number) < 120;
  const res = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, filter, limit: 7, with_payload: true, params: { exact: true } } });
  t.deepEqual(ids(res?.points ?? []), ids(exact(q, 7, keep)));
  for (const p of res?.points ?? []) t.deepEqual(p.payload, byId.get(p.id)!.payload);
  const approx = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, filter, limit: 7 } });
  t.true((approx?.points ?? []).every((p: { id: Id }) => keep(byId.get(p.id)!)));
  t.is(approx?.points.length, 7);
});

test('query score_threshold and offset', async (t) => {
  const q = queryVec(12);
  const all = exact(q, N);
  const threshold = all[14].score;
  const res = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, limit: 100, score_threshold: threshold, params: { exact: true } } });
  const want = all.filter((p) => p.score >= threshold - 1e-6);
  t.true(Math.abs((res?.points.length ?? 0) - want.length) <= 1, `${res?.points.length} vs ${want.length}`);
  t.true((res?.points ?? []).every((p: { score: number }) => p.score >= threshold - 1e-6));
  t.deepEqual(ids(res?.points ?? []).slice(0, 14), ids(all).slice(0, 14));

  const page2 = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, limit: 5, offset: 5, params: { exact: true } } });
  t.deepEqual(ids(page2?.points ?? []), ids(all.slice(5, 10)));
  const none = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, limit: 5, score_threshold: 1.01 } });
  t.deepEqual(none?.points, []);
});

test('query with_payload include/exclude and with_vector', async (t) => {
  const q = queryVec(13);
  const top = exact(q, 3);
  const inc = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, limit: 3, params: { exact: true }, with_payload: { include: ['group', 'meta.rank'] } } });
  t.deepEqual(ids(inc?.points ?? []), ids(top));
  for (const p of inc?.points ?? []) {
    const full = byId.get(p.id)!.payload as { group: string; meta: { rank: number } };
    t.deepEqual(p.payload, { group: full.group, meta: { rank: full.meta.rank } });
  }
  const exc = await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, limit: 3, params: { exact: true }, with_payload: { exclude: ['meta', 'i'] }, with_vector: true } });
  for (const p of exc?.points ?? []) {
    const full = byId.get(p.id)!;
    t.deepEqual(p.payload, { group: full.payload.group, price: full.payload.price, even: full.payload.even });
    closeVector(t, p.vector, f32(normalize(full.vector)), `vector of ${p.id}`);
  }
});

test('query named vectors with `using`: each vector with its own distance; with_vector by name', async (t) => {
  const name = 'q-named';
  await createCollection(t, name, { img: { size: 3, distance: 'Dot' }, txt: { size: 2, distance: 'Euclid' } });
  const next = rng(5);
  const pts = Array.from({ length: 30 }, (_, i) => ({ id: i + 1, vector: { img: randomVector(next, 3), txt: randomVector(next, 2) }, payload: { n: i } }));
  await upsert(t, name, pts);
  const img = new Map<Id, number[]>(pts.map((p) => [p.id, p.vector.img]));
  const txt = new Map<Id, number[]>(pts.map((p) => [p.id, p.vector.txt]));

  const qi = [0.3, -0.2, 0.9];
  const ri = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: qi, using: 'img', limit: 5 } });
  t.deepEqual(ids(ri?.points ?? []), ids(ranked('Dot', pts.map((p) => ({ id: p.id, vector: p.vector.img })), qi).slice(0, 5)));
  checkScores(t, ri?.points ?? [], qi, 'Dot', img);

  const qt = [0.1, 0.1];
  const rt = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: qt, using: 'txt', limit: 5, with_vector: ['txt'] } });
  t.deepEqual(ids(rt?.points ?? []), ids(ranked('Euclid', pts.map((p) => ({ id: p.id, vector: p.vector.txt })), qt).slice(0, 5)));
  checkScores(t, rt?.points ?? [], qt, 'Euclid', txt);
  for (const p of rt?.points ?? []) {
    t.deepEqual(Object.keys(p.vector ?? {}), ['txt']);
    closeVector(t, p.vector?.txt, txt.get(p.id)!, `txt of ${p.id}`);
  }
  // Euclid: the threshold is a largest distance.
  const cut = ranked('Euclid', pts.map((p) => ({ id: p.id, vector: p.vector.txt })), qt)[3].score;
  const rc = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: qt, using: 'txt', limit: 30, score_threshold: cut + 1e-6 } });
  t.is(rc?.points.length, 4);
  t.true((rc?.points ?? []).every((p: { score: number }) => p.score <= cut + 1e-6));
  // By id with `using`.
  const byIdRes = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: 3, using: 'txt', limit: 3 } });
  t.deepEqual(ids(byIdRes?.points ?? []), ids(ranked('Euclid', pts.filter((p) => p.id !== 3).map((p) => ({ id: p.id, vector: p.vector.txt })), txt.get(3)!).slice(0, 3)));
});

for (const distance of ['Cosine', 'Euclid', 'Dot', 'Manhattan'] as const) {
  test(`query on a ${distance} collection scores and orders as the reference`, async (t) => {
    const name = `q-${distance.toLowerCase()}`;
    await createCollection(t, name, { size: 3, distance });
    const pts = [
      { id: 1, vector: [1, 0, 0] },
      { id: 2, vector: [0, 2, 0] },
      { id: 3, vector: [1, 1, 1] },
      { id: 4, vector: [-1, 0.5, 0] },
      { id: 5, vector: [0.2, 0.1, -3] },
    ];
    await upsert(t, name, pts);
    const q = [0.5, 1, -0.5];
    const res = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: q, limit: 5 } });
    t.deepEqual(ids(res?.points ?? []), ids(ranked(distance, pts, q)));
    checkScores(t, res?.points ?? [], q, distance, new Map(pts.map((p) => [p.id, p.vector])));
    t.is(higherIsBetter(distance), res?.points[0].score >= res?.points[4].score);
  });
}

test('query batch answers one result per request, each as the single query would', async (t) => {
  const q1 = queryVec(21);
  const q2 = queryVec(22);
  const searches = [
    { query: q1, limit: 3, params: { exact: true } },
    { query: q2, limit: 4, filter: { must: [{ key: 'even', match: { value: true } }] }, params: { exact: true }, with_payload: ['i'] },
    { query: 5, limit: 2, params: { exact: true } },
  ];
  const res = await api.ok(t, 'POST', QUERY_BATCH, { params: inColl(SEARCH_COLL), body: { searches } });
  t.is(res?.length, 3);
  t.deepEqual(ids(res?.[0].points ?? []), ids(exact(q1, 3)));
  t.deepEqual(ids(res?.[1].points ?? []), ids(exact(q2, 4, (p) => p.payload.even === true)));
  for (const p of res?.[1].points ?? []) t.deepEqual(p.payload, { i: p.id });
  t.deepEqual(ids(res?.[2].points ?? []), ids(exact(byId.get(5)!.vector, 2, (p) => p.id !== 5)));
});

// -- legacy search and recommend (documented in the v1.18 spec) ------------------------------------------

test('search: by vector, with filter, offset, score_threshold and projections; the result is a bare array', async (t) => {
  const q = queryVec(31);
  const res = await api.ok(t, 'POST', SEARCH, { params: inColl(SEARCH_COLL), body: { vector: q, limit: 6, params: { exact: true } } });
  t.true(Array.isArray(res));
  t.deepEqual(ids(res ?? []), ids(exact(q, 6)));
  checkScores(t, res ?? [], q);

  const f = await api.ok(t, 'POST', SEARCH, {
    params: inColl(SEARCH_COLL),
    body: { vector: q, limit: 4, offset: 2, filter: { must_not: [{ key: 'group', match: { value: 'red' } }] }, with_payload: { include: ['group'] }, with_vector: true, params: { exact: true } },
  });
  const want = exact(q, 4, (p) => p.payload.group !== 'red', 2);
  t.deepEqual(ids(f ?? []), ids(want));
  for (const p of f ?? []) {
    t.deepEqual(p.payload, { group: byId.get(p.id)!.payload.group });
    closeVector(t, p.vector, f32(normalize(byId.get(p.id)!.vector)), `vector of ${p.id}`);
  }
  const th = exact(q, 5)[4].score;
  const thr = await api.ok(t, 'POST', SEARCH, { params: inColl(SEARCH_COLL), body: { vector: q, limit: 50, score_threshold: th - 1e-6, params: { exact: true } } });
  t.deepEqual(ids(thr ?? []), ids(exact(q, 5)));
});

test('search on a named vector ({name, vector}) and search batch', async (t) => {
  const name = 's-named';
  await createCollection(t, name, { a: { size: 2, distance: 'Dot' }, b: { size: 2, distance: 'Manhattan' } });
  const pts = [
    { id: 1, vector: { a: [1, 0], b: [0, 0] } },
    { id: 2, vector: { a: [0, 1], b: [1, 1] } },
    { id: 3, vector: { a: [1, 1], b: [3, 3] } },
  ];
  await upsert(t, name, pts);
  const ra = await api.ok(t, 'POST', SEARCH, { params: inColl(name), body: { vector: { name: 'a', vector: [1, 0.5] }, limit: 3 } });
  t.deepEqual(ids(ra ?? []), [3, 1, 2]);
  checkScores(t, ra ?? [], [1, 0.5], 'Dot', new Map(pts.map((p) => [p.id, p.vector.a])));
  const rb = await api.ok(t, 'POST', SEARCH, { params: inColl(name), body: { vector: { name: 'b', vector: [1, 1] }, limit: 2 } });
  t.deepEqual(ids(rb ?? []), [2, 1]);
  t.deepEqual((rb ?? []).map((p: { score: number }) => p.score), [0, 2]);

  const q = queryVec(32);
  const batch = await api.ok(t, 'POST', SEARCH_BATCH, {
    params: inColl(SEARCH_COLL),
    body: { searches: [{ vector: q, limit: 3, params: { exact: true } }, { vector: q, limit: 2, offset: 3, params: { exact: true } }] },
  });
  t.is(batch?.length, 2);
  t.deepEqual(ids(batch?.[0] ?? []), ids(exact(q, 3)));
  t.deepEqual(ids(batch?.[1] ?? []), ids(exact(q, 2, () => true, 3)));
});

test('recommend and recommend batch: average_vector over positive and negative examples', async (t) => {
  const pos = [40, 41, 42];
  const neg = [43];
  const target = recommendVector(
    pos.map((id) => normalize(byId.get(id)!.vector)),
    neg.map((id) => normalize(byId.get(id)!.vector)),
  );
  const keep = (p: Point) => ![...pos, ...neg].includes(p.id as number);
  const res = await api.ok(t, 'POST', RECOMMEND, { params: inColl(SEARCH_COLL), body: { positive: pos, negative: neg, limit: 6, params: { exact: true }, with_payload: true } });
  t.true(Array.isArray(res));
  t.deepEqual(ids(res ?? []), ids(exact(target, 6, keep)));
  checkScores(t, res ?? [], target);
  for (const p of res ?? []) t.deepEqual(p.payload, byId.get(p.id)!.payload);

  const onlyPos = recommendVector([normalize(byId.get(50)!.vector)], []);
  const batch = await api.ok(t, 'POST', RECOMMEND_BATCH, {
    params: inColl(SEARCH_COLL),
    body: {
      searches: [
        { positive: pos, negative: neg, limit: 3, params: { exact: true } },
        { positive: [50], limit: 4, filter: { must: [{ key: 'group', match: { value: 'green' } }] }, params: { exact: true } },
      ],
    },
  });
  t.is(batch?.length, 2);
  t.deepEqual(ids(batch?.[0] ?? []), ids(exact(target, 3, keep)));
  t.deepEqual(ids(batch?.[1] ?? []), ids(exact(onlyPos, 4, (p) => p.id !== 50 && p.payload.group === 'green')));
});

test('recommend on a named vector with `using`', async (t) => {
  const name = 'r-named';
  await createCollection(t, name, { v: { size: 2, distance: 'Euclid' } });
  const pts = [
    { id: 1, vector: { v: [0, 0] } },
    { id: 2, vector: { v: [1, 0] } },
    { id: 3, vector: { v: [5, 5] } },
    { id: 4, vector: { v: [0.9, 0.1] } },
  ];
  await upsert(t, name, pts);
  const res = await api.ok(t, 'POST', RECOMMEND, { params: inColl(name), body: { positive: [2], using: 'v', limit: 2 } });
  t.deepEqual(ids(res ?? []), [4, 1]);
  const q = await api.ok(t, 'POST', QUERY, { params: inColl(name), body: { query: { recommend: { positive: [2] } }, using: 'v', limit: 2 } });
  t.deepEqual(ids(q?.points ?? []), [4, 1]);
});

// -- wire shape ------------------------------------------------------------------------------------------

test('payload and vector are left out of a point, not null, when they were not asked for (the reference skips None)', async (t) => {
  const q = queryVec(41);
  const answers: Array<[string, Array<Record<string, unknown>>]> = [
    ['query', (await api.ok(t, 'POST', QUERY, { params: inColl(SEARCH_COLL), body: { query: q, limit: 2 } }))?.points ?? []],
    ['search', (await api.ok(t, 'POST', SEARCH, { params: inColl(SEARCH_COLL), body: { vector: q, limit: 2 } })) ?? []],
    ['recommend', (await api.ok(t, 'POST', RECOMMEND, { params: inColl(SEARCH_COLL), body: { positive: [1], limit: 2 } })) ?? []],
    ['retrieve', (await api.ok(t, 'POST', POINTS, { params: inColl(SEARCH_COLL), body: { ids: [1, 2], with_payload: false } })) ?? []],
    ['scroll', (await api.ok(t, 'POST', SCROLL, { params: inColl(SEARCH_COLL), body: { limit: 2, with_payload: false } }))?.points ?? []],
  ];
  const extra: string[] = [];
  for (const [what, points] of answers) {
    t.is(points.length, 2, what);
    for (const p of points) {
      for (const k of ['payload', 'vector']) if (k in p) extra.push(`${what}: point ${String(p.id)} has "${k}": ${JSON.stringify(p[k])}`);
    }
  }
  t.deepEqual(extra, []);
});
