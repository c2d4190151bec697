/**
 * Named vector CRUD through REST (`PUT` and `DELETE /collections/{name}/vectors/{vector_name}`),
 * every body a valid v1.18 VectorNameConfig and every answer validated against the
 * document: a vector added to a collection with points (plain, uint8, multivector) takes
 * writes and queries at once; a deleted one is gone from the config, the points and
 * queries; refusals (an existing name, sparse, the last vector, a missing name) are 400
 * and change nothing; a restart (clean, then killed) keeps the names, and a name deleted
 * and created again with another size does not get the old vectors back.
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
  await api.error(t, 400, 'PUT', VECTOR, { params: { ...C, vector_name: 's' }, body: { sparse: {} } }, /sparse vectors are not supported/);
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
