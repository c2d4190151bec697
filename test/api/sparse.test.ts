/**
 * Sparse vectors through the REST API of a real bin/quiver: the collection config
 * (`sparse_vectors`) as the reference accepts and shows it (answers validated against
 * the v1.18 document), points with sparse vectors through every write, queries
 * (`/points/query` plain and `nearest`, `/points/search` with a NamedSparseVector)
 * compared with a brute-force scorer written here (exact top-k, ties by id), with
 * filters, deletes and vector updates; IDF against a hand-computed example; the
 * reference's validation answers.
 */

import test, { type ExecutionContext } from 'ava';

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { startQuiver } from './helpers';
import { ContractClient, spec } from '../support/contract';
import { mulberry32 } from '../support/rng';
import { bruteForce, randomSparse, type Sparse } from '../support/sparse';
import { COLLECTION, COUNT, POINTS, QUERY, RECOMMEND, SCROLL, SEARCH, VECTORS, VECTORS_DELETE, DELETE } from '../support/routes';

let api: ContractClient;

test.before(async () => {
  api = await ContractClient.start();
});

test.after.always(async () => {
  await api?.stop();
});

function create(t: ExecutionContext, name: string, body: unknown) {
  return api.ok(t, 'PUT', COLLECTION, { params: { collection_name: name }, body });
}

function hits(r: Array<{ id: number; score: number }>): Array<{ id: number; score: number }> {
  return r.map((p) => ({ id: p.id, score: p.score }));
}

test('create bodies with sparse_vectors are accepted as the reference accepts them, and GET shows them', async (t) => {
  t.is(await create(t, 'sp-only', { sparse_vectors: { 'sparse-text': {} } }), true);
  const only = await api.ok(t, 'GET', COLLECTION, { params: { collection_name: 'sp-only' } });
  t.deepEqual(only.config.params.sparse_vectors, { 'sparse-text': {} });
  t.deepEqual(only.config.params.vectors, {});
  const body = {
    vectors: { dense: { size: 4, distance: 'Dot' } },
    sparse_vectors: {
      text: { index: { on_disk: false, full_scan_threshold: 100, datatype: 'float32' }, modifier: 'none' },
      bm25: { modifier: 'idf' },
      half: { index: { datatype: 'float16' } },
      small: { index: { datatype: 'uint8', on_disk: false } },
    },
  };
  t.is(await create(t, 'sp-mixed', body), true);
  const mixed = await api.ok(t, 'GET', COLLECTION, { params: { collection_name: 'sp-mixed' } });
  t.deepEqual(mixed.config.params.sparse_vectors, body.sparse_vectors);
  // PATCH changes a sparse vector's index settings and modifier; an unknown name is refused.
  t.is(await api.ok(t, 'PATCH', COLLECTION, { params: { collection_name: 'sp-mixed' }, body: { sparse_vectors: { text: { modifier: 'idf', index: { full_scan_threshold: 7 } } } } }), true);
  const patched = await api.ok(t, 'GET', COLLECTION, { params: { collection_name: 'sp-mixed' } });
  t.deepEqual(patched.config.params.sparse_vectors.text, { index: { on_disk: false, full_scan_threshold: 7, datatype: 'float32' }, modifier: 'idf' });
  await api.error(t, 400, 'PATCH', COLLECTION, { params: { collection_name: 'sp-mixed' }, body: { sparse_vectors: { nope: {} } } }, /Not existing vector name error: nope/);
  await api.error(t, 400, 'PATCH', COLLECTION, { params: { collection_name: 'sp-mixed' }, body: { sparse_vectors: { text: { index: { datatype: 'float16' } } } } }, /sparse_vectors\.text\.index\.datatype: changing the datatype/);
  // The same datatype again changes nothing and is fine.
  t.is(await api.ok(t, 'PATCH', COLLECTION, { params: { collection_name: 'sp-mixed' }, body: { sparse_vectors: { text: { index: { datatype: 'float32' } } } } }), true);
  // Bad configs: unknown modifier or datatype, a name shared with a dense vector.
  await api.error(t, 400, 'PUT', COLLECTION, { params: { collection_name: 'sp-bad1' }, body: { sparse_vectors: { a: { modifier: 'bm25' } } } }, /sparse_vectors\.a\.modifier/);
  await api.error(t, 400, 'PUT', COLLECTION, { params: { collection_name: 'sp-bad2' }, body: { sparse_vectors: { a: { index: { datatype: 'int4' } } } } }, /sparse_vectors\.a\.index\.datatype/);
  await api.error(t, 400, 'PUT', COLLECTION, { params: { collection_name: 'sp-bad3' }, body: { vectors: { a: { size: 2, distance: 'Dot' } }, sparse_vectors: { a: {} } } }, /sparse_vectors\.a/);
  await api.error(t, 404, 'GET', COLLECTION, { params: { collection_name: 'sp-bad3' } });
  // Sparse indexes are held in memory: an on-disk one is refused, on create and on update.
  await api.error(t, 400, 'PUT', COLLECTION, { params: { collection_name: 'sp-bad4' }, body: { sparse_vectors: { a: { index: { on_disk: true } } } } }, /sparse_vectors\.a\.index\.on_disk: true is not supported: Quiver keeps sparse indexes in memory/);
  await api.error(t, 404, 'GET', COLLECTION, { params: { collection_name: 'sp-bad4' } });
  await api.error(t, 400, 'PATCH', COLLECTION, { params: { collection_name: 'sp-mixed' }, body: { sparse_vectors: { text: { index: { on_disk: true } } } } }, /on_disk: true is not supported/);
});

test('sparse queries through query, nearest and search equal brute force, with filters, deletes and vector updates', async (t) => {
  const c = 'sp-random';
  t.is(await create(t, c, { vectors: { d: { size: 2, distance: 'Dot' } }, sparse_vectors: { text: { index: { full_scan_threshold: 20 } } } }), true);
  const r = mulberry32(42);
  const store = new Map<number, Sparse>();
  const group = new Map<number, number>();
  const points = [];
  for (let id = 1; id <= 400; id++) {
    const withSparse = r() < 0.9;
    const v = randomSparse(r, 12, 120);
    if (withSparse) store.set(id, v);
    group.set(id, id % 3);
    points.push({ id, vector: withSparse ? { d: [r(), r()], text: v } : { d: [r(), r()] }, payload: { g: id % 3 } });
  }
  // In random order: ties must come out by id, not by the order points were stored in.
  points.sort(() => r() - 0.5);
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: c }, query: { wait: 'true' }, body: { points } });

  const compare = async (label: string) => {
    for (let i = 0; i < 12; i++) {
      const q = randomSparse(r, 6, 120);
      const limit = 1 + Math.floor(r() * 12);
      const want = bruteForce(store, q, limit);
      t.true(want.length > 0, 'the query matches something');
      t.deepEqual(hits(await api.ok(t, 'POST', QUERY, { params: { collection_name: c }, body: { query: q, using: 'text', limit } }).then((x) => x.points)), want, `${label}: query`);
      t.deepEqual(hits(await api.ok(t, 'POST', QUERY, { params: { collection_name: c }, body: { query: { nearest: q }, using: 'text', limit } }).then((x) => x.points)), want, `${label}: nearest`);
      t.deepEqual(hits(await api.ok(t, 'POST', SEARCH, { params: { collection_name: c }, body: { vector: { name: 'text', vector: q }, limit } })), want, `${label}: search`);
      const g = i % 3;
      const filter = { must: [{ key: 'g', match: { value: g } }] };
      const wantF = bruteForce(store, q, limit, (id) => group.get(id) === g);
      t.deepEqual(hits(await api.ok(t, 'POST', QUERY, { params: { collection_name: c }, body: { query: q, using: 'text', limit, filter } }).then((x) => x.points)), wantF, `${label}: filtered`);
      // A narrow filter (under full_scan_threshold) scans the allowed points directly.
      const few = [...store.keys()].filter(() => r() < 0.03);
      const wantFew = bruteForce(store, q, limit, (id) => few.includes(id));
      t.deepEqual(
        hits(await api.ok(t, 'POST', QUERY, { params: { collection_name: c }, body: { query: q, using: 'text', limit, filter: { must: [{ has_id: few }] } } }).then((x) => x.points)),
        wantFew,
        `${label}: narrow filter`,
      );
    }
  };
  await compare('initial');

  // Deletes, vector updates (sparse replaced, dense left), vector deletes, upserts without the sparse vector.
  const gone = [...store.keys()].filter(() => r() < 0.2);
  await api.ok(t, 'POST', DELETE, { params: { collection_name: c }, query: { wait: 'true' }, body: { points: gone } });
  for (const id of gone) {
    store.delete(id);
    group.delete(id);
  }
  const updates = [...group.keys()].filter(() => r() < 0.2).map((id) => ({ id, vector: { text: randomSparse(r, 10, 120) } }));
  await api.ok(t, 'PUT', VECTORS, { params: { collection_name: c }, query: { wait: 'true' }, body: { points: updates } });
  for (const u of updates) store.set(u.id, u.vector.text);
  const stripped = [...store.keys()].filter(() => r() < 0.1);
  await api.ok(t, 'POST', VECTORS_DELETE, { params: { collection_name: c }, query: { wait: 'true' }, body: { points: stripped, vector: ['text'] } });
  for (const id of stripped) store.delete(id);
  const plain = [...store.keys()].slice(0, 10);
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: c }, query: { wait: 'true' }, body: { points: plain.map((id) => ({ id, vector: { d: [1, 1] }, payload: { g: group.get(id) } })) } });
  for (const id of plain) store.delete(id);
  await compare('after writes');

  // has_vector sees sparse vectors.
  t.is((await api.ok(t, 'POST', COUNT, { params: { collection_name: c }, body: { filter: { must: [{ has_vector: 'text' }] } } })).count, store.size);

  // with_vector returns the sparse vector, indices ascending.
  const some = [...store.keys()].slice(0, 5);
  const got = await api.ok(t, 'POST', POINTS, { params: { collection_name: c }, body: { ids: some, with_vector: ['text'] } });
  for (const p of got) {
    const v = store.get(p.id)!;
    const order = v.indices.map((d, i) => [d, v.values[i]]).sort((a, b) => a[0] - b[0]);
    t.deepEqual(p.vector.text, { indices: order.map((e) => e[0]), values: order.map((e) => e[1]) });
  }
  const page = await api.ok(t, 'POST', SCROLL, { params: { collection_name: c }, body: { limit: 3, with_vector: true } });
  t.true(page.points.every((p: { vector: Record<string, unknown> }) => Array.isArray(p.vector.d)));
  // Recommendations over the sparse vector (average_vector): 2 avg(pos) - avg(neg) over the union of dimensions, examples left out.
  const [p1, p2, n1] = some;
  const extra = randomSparse(r, 6, 120);
  const avg = (vs: Sparse[]) => {
    const m = new Map<number, number>();
    for (const v of vs) v.indices.forEach((d, i) => m.set(d, (m.get(d) ?? 0) + Math.fround(v.values[i]) / vs.length));
    return m;
  };
  const pos = avg([store.get(p1)!, store.get(p2)!, extra]);
  const neg = avg([store.get(n1)!]);
  const dims = [...new Set([...pos.keys(), ...neg.keys()])];
  const rec: Sparse = { indices: dims, values: dims.map((d) => Math.fround(2 * (pos.get(d) ?? 0) - (neg.get(d) ?? 0))) };
  const wantRec = bruteForce(store, rec, 5, (id) => ![p1, p2, n1].includes(id));
  t.true(wantRec.length > 0);
  const body = { query: { recommend: { positive: [p1, p2, extra], negative: [n1] } }, using: 'text', limit: 5 };
  t.deepEqual(hits(await api.ok(t, 'POST', QUERY, { params: { collection_name: c }, body }).then((x) => x.points)), wantRec, 'recommend through query');
  t.deepEqual(hits(await api.ok(t, 'POST', RECOMMEND, { params: { collection_name: c }, body: { positive: [p1, p2, extra], negative: [n1], using: 'text', limit: 5 } })), wantRec, 'legacy recommend');

  // Nearest to a stored point's sparse vector (the point itself left out).
  const probe = some[0];
  const want = bruteForce(store, store.get(probe)!, 6, (id) => id !== probe);
  t.deepEqual(hits(await api.ok(t, 'POST', QUERY, { params: { collection_name: c }, body: { query: probe, using: 'text', limit: 6 } }).then((x) => x.points)), want);
});

test('modifier idf weighs query values by ln((N - n + 0.5) / (n + 0.5) + 1) of the live points', async (t) => {
  const c = 'sp-idf';
  t.is(await create(t, c, { sparse_vectors: { bm: { modifier: 'idf' } } }), true);
  const points = [
    { id: 1, vector: { bm: { indices: [1, 2], values: [1, 1] } } },
    { id: 2, vector: { bm: { indices: [1], values: [1] } } },
    { id: 3, vector: { bm: { indices: [1], values: [2] } } },
    { id: 4, vector: { bm: { indices: [3], values: [1] } } },
    { id: 5, vector: { bm: { indices: [1, 3], values: [1, 1] } } },
  ];
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: c }, query: { wait: 'true' }, body: { points } });
  await api.ok(t, 'POST', DELETE, { params: { collection_name: c }, query: { wait: 'true' }, body: { points: [5] } });
  // By hand: N = 4 points carry `bm`; dimension 1 is in 3 of them, dimension 2 in 1.
  const idf1 = Math.log((4 - 3 + 0.5) / (3 + 0.5) + 1);
  const idf2 = Math.log((4 - 1 + 0.5) / (1 + 0.5) + 1);
  const res = await api.ok(t, 'POST', QUERY, { params: { collection_name: c }, body: { query: { indices: [2, 1], values: [1, 1] }, using: 'bm' } });
  const want = [
    { id: 1, score: idf1 + idf2 },
    { id: 3, score: 2 * idf1 },
    { id: 2, score: idf1 },
  ];
  t.is(res.points.length, 3);
  res.points.forEach((p: { id: number; score: number }, i: number) => {
    t.is(p.id, want[i].id);
    t.true(Math.abs(p.score - want[i].score) < 1e-5, `${p.score} vs ${want[i].score}`);
  });
});

test('bad sparse input is refused as the reference refuses it, naming the field, and changes nothing', async (t) => {
  const c = 'sp-valid';
  t.is(await create(t, c, { vectors: { d: { size: 2, distance: 'Dot' } }, sparse_vectors: { text: {} } }), true);
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: c }, query: { wait: 'true' }, body: { points: [{ id: 1, vector: { text: { indices: [3, 1], values: [1, 2] } } }] } });
  const put = (vector: unknown) => ({ params: { collection_name: c }, query: { wait: 'true' }, body: { points: [{ id: 2, vector }] } });
  await api.error(t, 422, 'PUT', POINTS, put({ text: { indices: [1, 1], values: [1, 2] } }), /points\[0\]\.vector\.text\.indices: must be unique/);
  await api.error(t, 422, 'PUT', POINTS, put({ text: { indices: [1, 2], values: [1] } }), /points\[0\]\.vector\.text\.values: must be the same length as indices/);
  await api.error(t, 400, 'PUT', POINTS, put({ text: { indices: [1, -2], values: [1, 1] } }), /points\[0\]\.vector\.text\.indices\[1\]/);
  await api.error(t, 400, 'PUT', POINTS, put({ text: { indices: [1], values: ['x'] } }), /points\[0\]\.vector\.text\.values\[0\]/);
  await api.error(t, 400, 'PUT', POINTS, put({ text: { indices: [1], values: [1e39] } }), /points\[0\]\.vector\.text\.values\[0\]/);
  await api.error(t, 400, 'PUT', POINTS, put({ nope: { indices: [1], values: [1] } }), /Not existing vector name error: nope/);
  await api.error(t, 400, 'PUT', POINTS, put({ d: { indices: [1], values: [1] } }), /Conversion between sparse and regular vectors failed/);
  await api.error(t, 400, 'PUT', POINTS, put({ text: [1, 2] }), /Conversion between sparse and regular vectors failed/);
  await api.error(t, 422, 'POST', QUERY, { params: { collection_name: c }, body: { query: { indices: [1, 1], values: [1, 1] }, using: 'text' } }, /query\.indices: must be unique/);
  await api.error(t, 400, 'POST', QUERY, { params: { collection_name: c }, body: { query: { indices: [1], values: [1] }, using: 'd' } }, /Conversion between sparse and regular vectors failed/);
  await api.error(t, 422, 'POST', SEARCH, { params: { collection_name: c }, body: { vector: { name: 'text', vector: { indices: [1], values: [] } }, limit: 3 } }, /vector\.vector\.values: must be the same length as indices/);
  t.is((await api.ok(t, 'POST', COUNT, { params: { collection_name: c }, body: {} })).count, 1);
  // float16: values are rounded to float16 (round to nearest even); beyond its range refused.
  t.is(await create(t, 'sp-half', { sparse_vectors: { h: { index: { datatype: 'float16' } } } }), true);
  const half = (vector: unknown) => ({ params: { collection_name: 'sp-half' }, query: { wait: 'true' }, body: { points: [{ id: 1, vector }] } });
  await api.error(t, 400, 'PUT', POINTS, half({ h: { indices: [1, 2], values: [1, 70000] } }), /float16 range/);
  await api.ok(t, 'PUT', POINTS, half({ h: { indices: [1, 2, 3], values: [0.1, 65504, 1 + 2 ** -11] } }));
  const hp = await api.ok(t, 'POST', POINTS, { params: { collection_name: 'sp-half' }, body: { ids: [1], with_vector: true } });
  // 0.1 is 0x2E66 in float16 = 0.0999755859375; 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to even, 1.
  t.deepEqual(hp[0].vector, { h: { indices: [1, 2, 3], values: [0.0999755859375, 65504, 1] } });
  const p = await api.ok(t, 'POST', POINTS, { params: { collection_name: c }, body: { ids: [1], with_vector: true } });
  t.deepEqual(p[0].vector, { text: { indices: [1, 3], values: [2, 1] } });
});

test('a uint8 sparse vector stores values truncated and saturated to 0..=255: reads and scores equal brute force over them, also after a restart', async (t) => {
  const storage = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-sparse-u8-'));
  t.teardown(() => fs.rmSync(storage, { recursive: true, force: true }));
  let own: ContractClient | null = null;
  const start = async () => {
    const server = await startQuiver({ SERVICE__STORAGE__STORAGE_PATH: storage });
    own = new ContractClient(server.url, spec(), server);
    return own;
  };
  t.teardown(async () => {
    await own?.stop();
  });
  let api2 = await start();
  const c = 'sp-u8';
  t.is(await api2.ok(t, 'PUT', COLLECTION, { params: { collection_name: c }, body: { sparse_vectors: { s: { index: { datatype: 'uint8' } } } } }), true);
  const r = mulberry32(8);
  const toU8 = (x: number) => (x <= 0 ? 0 : x >= 255 ? 255 : Math.trunc(x));
  const stored = new Map<number, Sparse>();
  const points = [];
  for (let id = 1; id <= 300; id++) {
    const v = randomSparse(r, 10, 80);
    // Fractions, negatives and values past 255 (exact in f32, so JSON carries them as given).
    const values = v.values.map((x) => Math.fround(x * 37.3 + (r() < 0.1 ? 300 : 0)));
    points.push({ id, vector: { s: { indices: v.indices, values } } });
    stored.set(id, { indices: v.indices, values: values.map(toU8) });
  }
  await api2.ok(t, 'PUT', POINTS, { params: { collection_name: c }, query: { wait: 'true' }, body: { points } });
  const queries = Array.from({ length: 15 }, () => randomSparse(r, 6, 80));
  const check = async (label: string) => {
    for (const q of queries) {
      const limit = 10;
      const want = bruteForce(stored, q, limit);
      t.true(want.length > 0);
      t.deepEqual(hits(await api2.ok(t, 'POST', QUERY, { params: { collection_name: c }, body: { query: q, using: 's', limit } }).then((x) => x.points)), want, label);
    }
    const got = await api2.ok(t, 'POST', POINTS, { params: { collection_name: c }, body: { ids: [1, 2, 3], with_vector: true } });
    for (const p of got) {
      const want = stored.get(p.id)!;
      const order = want.indices.map((d, i) => [d, want.values[i]]).sort((a, b) => a[0] - b[0]);
      t.deepEqual(p.vector.s, { indices: order.map((e) => e[0]), values: order.map((e) => e[1]) }, `${label}: read back`);
    }
  };
  await check('live');
  await api2.stop();
  own = null;
  api2 = await start();
  await check('after a restart');
});
