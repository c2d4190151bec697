/**
 * Named vector CRUD through REST (`PUT` and `DELETE /collections/{name}/vectors/{vector_name}`),
 * every body a valid v1.18 VectorNameConfig and every answer validated against the
 * document: a vector added to a collection with points (plain, uint8, multivector) takes
 * writes and queries at once; a deleted one is gone from the config, the points and
 * queries; refusals (an existing name, a bad body, the last vector, a missing name) are
 * 400 and change nothing; a restart (clean, then killed) keeps the names, and a name
 * deleted and created again with another size does not get the old vectors back. Sparse
 * names likewise: added (with a modifier, with a datatype) to a collection with points,
 * written and searched, deleted, and re-created without the old values, across restarts.
 */

import test, { type ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { startQuiver } from './helpers';
import { ContractClient, spec } from '../support/contract';
import { COLLECTION, POINTS, QUERY } from '../support/routes';

const VECTOR = '/collections/{collection_name}/vectors/{vector_name}';
const storage = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-vn-api-'));
let api: ContractClient;

async function start(): Promise<ContractClient> {
  const server = await startQuiver({ SERVICE__STORAGE__STORAGE_PATH: storage });
  return new ContractClient(server.url, spec(), server);
}

test.before(async () => {
  api = await start();
});

test.after.always(async () => {
  await api?.stop();
  fs.rmSync(storage, { recursive: true, force: true });
});

const C = { collection_name: 'vn' };

function addVector(t: ExecutionContext, name: string, body: unknown) {
  t.deepEqual(spec().validateSchema('VectorNameConfig', body), [], 'the body is a v1.18 VectorNameConfig');
  return api.ok(t, 'PUT', VECTOR, { params: { ...C, vector_name: name }, query: { wait: true }, body });
}

async function vectorsOf(t: ExecutionContext, ids: number[]): Promise<Array<Record<string, unknown>>> {
  const got = await api.ok(t, 'POST', POINTS, { params: C, body: { ids, with_vector: true } });
  return got.map((p: { vector: Record<string, unknown> }) => p.vector);
}

async function names(t: ExecutionContext): Promise<string[]> {
  const info = await api.ok(t, 'GET', COLLECTION, { params: C });
  return Object.keys(info.config.params.vectors).sort();
}

test.serial('named vectors: add (plain, uint8, multivector), use, delete, refusals, restarts', async (t) => {
  t.is(await api.ok(t, 'PUT', COLLECTION, { params: C, body: { vectors: { a: { size: 4, distance: 'Dot' } } } }), true);
  await api.ok(t, 'PUT', POINTS, { params: C, query: { wait: true }, body: { points: [1, 2, 3].map((id) => ({ id, vector: { a: [id, 0, 0, 1] } })) } });

  // Add `b` (uint8, Cosine) and `m` (multivector) to a collection that has points.
  t.deepEqual(await addVector(t, 'b', { dense: { size: 3, distance: 'Cosine', datatype: 'uint8' } }), { operation_id: null, status: 'completed' });
  t.deepEqual(await addVector(t, 'm', { dense: { size: 2, distance: 'Dot', multivector_config: { comparator: 'max_sim' } } }), { operation_id: null, status: 'completed' });
  t.deepEqual(await names(t), ['a', 'b', 'm']);
  const info = await api.ok(t, 'GET', COLLECTION, { params: C });
  t.deepEqual(info.config.params.vectors.b, { size: 3, distance: 'Cosine', datatype: 'uint8' });
  t.deepEqual(info.config.params.vectors.m, { size: 2, distance: 'Dot', multivector_config: { comparator: 'max_sim' } });
  // Existing points have no vector of the new names until written.
  t.deepEqual(await vectorsOf(t, [1]), [{ a: [1, 0, 0, 1] }]);
  await api.ok(t, 'PUT', '/collections/{collection_name}/points/vectors', {
    params: C,
    query: { wait: true },
    body: { points: [{ id: 1, vector: { b: [10.7, 0, 3], m: [[1, 0], [0, 1]] } }, { id: 2, vector: { b: [0, 5, 0], m: [[2, 2]] } }] },
  });
  t.deepEqual(await vectorsOf(t, [1, 2]), [
    { a: [1, 0, 0, 1], b: [10, 0, 3], m: [[1, 0], [0, 1]] },
    { a: [2, 0, 0, 1], b: [0, 5, 0], m: [[2, 2]] },
  ]);
  // MaxSim of [[1, 1]]: point 1 scores 1, point 2 scores 4.
  const q = await api.ok(t, 'POST', QUERY, { params: C, body: { query: [[1, 1]], using: 'm', limit: 5 } });
  t.deepEqual(
    q.points.map((p: { id: number; score: number }) => [p.id, p.score]),
    [
      [2, 4],
      [1, 1],
    ],
  );

  // Refusals: 400, nothing changed.
  await api.error(t, 400, 'PUT', VECTOR, { params: { ...C, vector_name: 'b' }, body: { dense: { size: 3, distance: 'Dot' } } }, /already exists/);
  await api.error(t, 400, 'PUT', VECTOR, { params: { ...C, vector_name: 's' }, body: { sparse: { index: {} } } }, /sparse: unknown field `index`/);
  await api.error(t, 400, 'PUT', VECTOR, { params: { ...C, vector_name: 'x' }, body: { dense: { size: 3 } } }, /distance/);
  await api.error(t, 404, 'PUT', VECTOR, { params: { collection_name: 'nope', vector_name: 'x' }, body: { dense: { size: 3, distance: 'Dot' } } });
  await api.error(t, 400, 'DELETE', VECTOR, { params: { ...C, vector_name: 'zzz' } }, /Not existing vector name error: zzz/);
  t.deepEqual(await names(t), ['a', 'b', 'm']);

  // Delete `a`: gone from the config, the points and queries.
  t.deepEqual(await api.ok(t, 'DELETE', VECTOR, { params: { ...C, vector_name: 'a' }, query: { wait: true } }), { operation_id: null, status: 'completed' });
  t.deepEqual(await names(t), ['b', 'm']);
  t.deepEqual(await vectorsOf(t, [1, 3]), [{ b: [10, 0, 3], m: [[1, 0], [0, 1]] }, {}]);
  await api.error(t, 400, 'POST', QUERY, { params: C, body: { query: [1, 0, 0, 0], using: 'a' } }, /Not existing vector name error: a/);

  // A clean restart keeps it all.
  await api.stop();
  api = await start();
  t.deepEqual(await names(t), ['b', 'm']);
  t.deepEqual(await vectorsOf(t, [1, 2]), [
    { b: [10, 0, 3], m: [[1, 0], [0, 1]] },
    { b: [0, 5, 0], m: [[2, 2]] },
  ]);

  // `a` again, with another size: the old vectors do not come back, new ones go in;
  // after a kill (WAL replay) too.
  await addVector(t, 'a', { dense: { size: 2, distance: 'Euclid' } });
  t.deepEqual(await vectorsOf(t, [1]), [{ b: [10, 0, 3], m: [[1, 0], [0, 1]] }]);
  await api.ok(t, 'PUT', '/collections/{collection_name}/points/vectors', { params: C, query: { wait: true }, body: { points: [{ id: 3, vector: { a: [3, 4] } }] } });
  await api.server!.stop('SIGKILL');
  api = await start();
  t.deepEqual(await names(t), ['a', 'b', 'm']);
  t.deepEqual(await vectorsOf(t, [1, 3]), [{ b: [10, 0, 3], m: [[1, 0], [0, 1]] }, { a: [3, 4] }]);
  const near = await api.ok(t, 'POST', QUERY, { params: C, body: { query: [0, 0], using: 'a', limit: 3 } });
  t.deepEqual(
    near.points.map((p: { id: number; score: number }) => [p.id, p.score]),
    [[3, 5]],
  );

  // The last vector cannot go.
  await api.ok(t, 'DELETE', VECTOR, { params: { ...C, vector_name: 'a' } });
  await api.ok(t, 'DELETE', VECTOR, { params: { ...C, vector_name: 'm' } });
  await api.error(t, 400, 'DELETE', VECTOR, { params: { ...C, vector_name: 'b' } }, /only vector/);
  t.deepEqual(await names(t), ['b']);
});

const S = { collection_name: 'vns' };

async function sparseInfo(t: ExecutionContext): Promise<Record<string, unknown> | undefined> {
  return (await api.ok(t, 'GET', COLLECTION, { params: S })).config.params.sparse_vectors;
}

async function sparseOf(t: ExecutionContext, ids: number[]): Promise<Array<Record<string, unknown>>> {
  const got = await api.ok(t, 'POST', POINTS, { params: S, body: { ids, with_vector: true } });
  return got.map((p: { vector: Record<string, unknown> }) => p.vector);
}

async function sparseTop(t: ExecutionContext, using: string, indices: number[], values: number[]): Promise<Array<[number, number]>> {
  const q = await api.ok(t, 'POST', QUERY, { params: S, body: { query: { indices, values }, using, limit: 10 } });
  return q.points.map((p: { id: number; score: number }) => [p.id, p.score]);
}

function addSparse(t: ExecutionContext, name: string, body: unknown) {
  t.deepEqual(spec().validateSchema('VectorNameConfig', body), [], 'the body is a v1.18 VectorNameConfig');
  return api.ok(t, 'PUT', VECTOR, { params: { ...S, vector_name: name }, query: { wait: true }, body });
}

test.serial('named sparse vectors: add (modifier, datatype), write, search, delete, re-create, restarts', async (t) => {
  t.is(await api.ok(t, 'PUT', COLLECTION, { params: S, body: { vectors: { d: { size: 2, distance: 'Dot' } }, sparse_vectors: { s1: {} } } }), true);
  await api.ok(t, 'PUT', POINTS, {
    params: S,
    query: { wait: true },
    body: { points: [1, 2, 3].map((id) => ({ id, vector: { d: [id, 1], s1: { indices: [id], values: [id] } } })) },
  });

  t.deepEqual(await addSparse(t, 's2', { sparse: { modifier: 'idf' } }), { operation_id: null, status: 'completed' });
  t.deepEqual(await addSparse(t, 's3', { sparse: { datatype: 'float16' } }), { operation_id: null, status: 'completed' });
  t.deepEqual(await sparseInfo(t), { s1: {}, s2: { modifier: 'idf' }, s3: { index: { datatype: 'float16' } } });
  // Existing points have no vector of the new names until written.
  t.deepEqual(await sparseOf(t, [1]), [{ d: [1, 1], s1: { indices: [1], values: [1] } }]);
  await api.ok(t, 'PUT', '/collections/{collection_name}/points/vectors', {
    params: S,
    query: { wait: true },
    body: {
      points: [
        { id: 1, vector: { s2: { indices: [7], values: [1] }, s3: { indices: [4, 9], values: [0.5, 2] } } },
        { id: 2, vector: { s2: { indices: [8], values: [1] }, s3: { indices: [9], values: [3] } } },
      ],
    },
  });
  // Point 1: 0.5 * 2 + 2 * 1 = 3; point 2: 3 * 1 = 3; a tie goes by id.
  t.deepEqual(await sparseTop(t, 's3', [4, 9], [2, 1]), [
    [1, 3],
    [2, 3],
  ]);
  // IDF over the new name: one of the two points with an s2 vector has dimension 7, so idf = ln(1 + (2 - 1 + 0.5) / (1 + 0.5)).
  const idf = await sparseTop(t, 's2', [7], [1]);
  t.is(idf.length, 1);
  t.true(Math.abs(idf[0][1] - Math.log(2)) < 1e-5, `idf score ${idf[0][1]}`);

  // Refusals: 400, nothing changed.
  await api.error(t, 400, 'PUT', VECTOR, { params: { ...S, vector_name: 's1' }, body: { sparse: {} } }, /already exists/);
  await api.error(t, 400, 'PUT', VECTOR, { params: { ...S, vector_name: 'd' }, body: { sparse: {} } }, /already exists/);
  await api.error(t, 400, 'PUT', VECTOR, { params: { ...S, vector_name: 's2' }, body: { dense: { size: 2, distance: 'Dot' } } }, /already exists/);
  await api.error(t, 400, 'PUT', VECTOR, { params: { ...S, vector_name: 'x' }, body: { sparse: { modifier: 'bm25' } } }, /sparse\.modifier: unknown variant/);
  await api.error(t, 400, 'PUT', VECTOR, { params: { ...S, vector_name: 'x' }, body: { sparse: { datatype: 'int4' } } }, /sparse\.datatype: unknown variant/);
  t.deepEqual(Object.keys((await sparseInfo(t)) ?? {}).sort(), ['s1', 's2', 's3']);

  // Delete s1: gone from the config, the points and queries; then re-created at once
  // (no write between): the old values do not come back, and s3's index stays whole.
  t.deepEqual(await api.ok(t, 'DELETE', VECTOR, { params: { ...S, vector_name: 's1' }, query: { wait: true } }), { operation_id: null, status: 'completed' });
  t.deepEqual(Object.keys((await sparseInfo(t)) ?? {}).sort(), ['s2', 's3']);
  t.deepEqual(await sparseOf(t, [3]), [{ d: [3, 1] }]);
  await api.error(t, 400, 'POST', QUERY, { params: S, body: { query: { indices: [1], values: [1] }, using: 's1' } }, /Not existing vector name error: s1/);
  await addSparse(t, 's1', { sparse: {} });
  t.deepEqual(await sparseTop(t, 's1', [1, 2, 3], [1, 1, 1]), []);

  // A clean restart keeps it all.
  await api.stop();
  api = await start();
  t.deepEqual(await sparseInfo(t), { s2: { modifier: 'idf' }, s3: { index: { datatype: 'float16' } }, s1: {} });
  t.deepEqual(await sparseOf(t, [1, 2]), [
    { d: [1, 1], s2: { indices: [7], values: [1] }, s3: { indices: [4, 9], values: [0.5, 2] } },
    { d: [2, 1], s2: { indices: [8], values: [1] }, s3: { indices: [9], values: [3] } },
  ]);
  t.deepEqual(await sparseTop(t, 's1', [1, 2, 3], [1, 1, 1]), []);

  // New s1 values go in; after a kill (WAL replay) the old ones still stay away.
  await api.ok(t, 'PUT', '/collections/{collection_name}/points/vectors', { params: S, query: { wait: true }, body: { points: [{ id: 3, vector: { s1: { indices: [5], values: [2] } } }] } });
  await api.server!.stop('SIGKILL');
  api = await start();
  t.deepEqual(await sparseTop(t, 's1', [1, 2, 3, 5], [1, 1, 1, 1]), [[3, 2]]);
  t.deepEqual(await sparseTop(t, 's3', [9], [1]), [
    [2, 3],
    [1, 2],
  ]);

  // A name dropped and another added with no write between (each checkpointed): the
  // indexes of the names that stay are kept whole, across a clean restart.
  await api.stop();
  api = await start();
  await api.ok(t, 'DELETE', VECTOR, { params: { ...S, vector_name: 's2' }, query: { wait: true } });
  await addSparse(t, 's4', { sparse: {} });
  await api.stop();
  api = await start();
  t.deepEqual(await sparseTop(t, 's1', [5], [1]), [[3, 2]]);
  t.deepEqual(await sparseTop(t, 's3', [9], [1]), [
    [2, 3],
    [1, 2],
  ]);
  t.deepEqual(await sparseTop(t, 's4', [5, 9], [1, 1]), []);

  // Every sparse name can go: the config then shows none.
  for (const n of ['s1', 's3', 's4']) await api.ok(t, 'DELETE', VECTOR, { params: { ...S, vector_name: n }, query: { wait: true } });
  t.is(await sparseInfo(t), undefined);
  t.deepEqual(await sparseOf(t, [1]), [{ d: [1, 1] }]);
});
