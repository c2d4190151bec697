/**
 * Contract tests of collections, aliases and payload indexes against a real bin/quiver:
 * every answer is validated against the reference's v1.18 OpenAPI schemas (see
 * test/support/openapi.ts) and its meaning is checked against the reference's behaviour.
 * One server for the whole file; each test works on collections of its own.
 */

import test, { type ExecutionContext } from 'ava';

import { ContractClient } from '../support/contract';
import { DEADLINE_MS, waitFor } from '../support/wait';
import { ALIASES, COLLECTION, COLLECTION_ALIASES, COUNT, EXISTS, INDEX, INDEX_FIELD, POINTS, QUERY, SCROLL } from '../support/routes';

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

function info(t: ExecutionContext, name: string) {
  return api.ok(t, 'GET', COLLECTION, { params: { collection_name: name } });
}

async function exists(t: ExecutionContext, name: string): Promise<boolean> {
  const r = await api.ok(t, 'GET', EXISTS, { params: { collection_name: name } });
  return r?.exists;
}

async function listed(t: ExecutionContext): Promise<string[]> {
  const r = await api.ok(t, 'GET', '/collections');
  return (r?.collections ?? []).map((c: { name: string }) => c.name);
}

async function aliasesOf(t: ExecutionContext, collection?: string): Promise<Array<{ alias_name: string; collection_name: string }>> {
  const r = collection === undefined ? await api.ok(t, 'GET', '/aliases') : await api.ok(t, 'GET', COLLECTION_ALIASES, { params: { collection_name: collection } });
  return r?.aliases ?? [];
}

const notFound = (name: string) => `Not found: Collection \`${name}\` doesn't exist!`;

// -- collections ------------------------------------------------------------------------------

for (const distance of ['Cosine', 'Euclid', 'Dot', 'Manhattan'] as const) {
  test(`create a single-vector collection with ${distance} distance, then GET it as CollectionInfo`, async (t) => {
    const name = `c-single-${distance.toLowerCase()}`;
    t.is(await create(t, name, { vectors: { size: 5, distance } }), true);
    const ci = await info(t, name);
    t.deepEqual(ci.config.params.vectors, { size: 5, distance });
    t.is(ci.status, 'green');
    t.is(ci.optimizer_status, 'ok');
    t.is(ci.points_count, 0);
    t.is(ci.config.params.shard_number, 1);
    t.deepEqual(ci.payload_schema, {});
    t.true(await exists(t, name));
    t.true((await listed(t)).includes(name));
  });
}

test('create with named vectors, per-vector and collection hnsw_config, optimizers_config and scalar quantization', async (t) => {
  const name = 'c-named';
  const body = {
    vectors: {
      image: { size: 4, distance: 'Dot', hnsw_config: { m: 8, ef_construct: 64 } },
      text: { size: 3, distance: 'Euclid', quantization_config: { binary: { always_ram: true } } },
    },
    hnsw_config: { m: 12, ef_construct: 50, full_scan_threshold: 1000 },
    optimizers_config: { deleted_threshold: 0.3, vacuum_min_vector_number: 200, indexing_threshold: 5000, flush_interval_sec: 2 },
    quantization_config: { scalar: { type: 'int8', quantile: 0.95, always_ram: true } },
    on_disk_payload: false,
  };
  t.is(await create(t, name, body), true);
  const ci = await info(t, name);
  const cfg = ci.config;
  t.like(cfg.params.vectors.image, { size: 4, distance: 'Dot', hnsw_config: { m: 8, ef_construct: 64 } });
  t.like(cfg.params.vectors.text, { size: 3, distance: 'Euclid', quantization_config: { binary: { always_ram: true } } });
  t.deepEqual(Object.keys(cfg.params.vectors).sort(), ['image', 'text']);
  t.is(cfg.params.on_disk_payload, false);
  t.like(cfg.hnsw_config, { m: 12, ef_construct: 50, full_scan_threshold: 1000 });
  t.like(cfg.optimizer_config, { deleted_threshold: 0.3, vacuum_min_vector_number: 200, indexing_threshold: 5000, flush_interval_sec: 2 });
  t.deepEqual(cfg.quantization_config, { scalar: { type: 'int8', quantile: 0.95, always_ram: true } });
});

test('named vectors called `image` and `text` (as in the reference docs) take points like any other name', async (t) => {
  const name = 'c-named-image-text';
  await create(t, name, { vectors: { image: { size: 4, distance: 'Dot' }, text: { size: 3, distance: 'Euclid' } } });
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: name },
    query: { wait: true },
    body: { points: [{ id: 1, vector: { image: [1, 0, 0, 0], text: [0, 1, 0] } }] },
  });
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: name },
    query: { wait: true },
    body: { batch: { ids: [2], vectors: { image: [[0, 1, 0, 0]], text: [[1, 0, 0]] } } },
  });
  t.is((await info(t, name)).points_count, 2);
  const q = await api.ok(t, 'POST', QUERY, { params: { collection_name: name }, body: { query: [0, 1, 0], using: 'text', limit: 1 } });
  t.deepEqual(q?.points.map((p: { id: number }) => p.id), [1]);
});

test('create with binary quantization for the whole collection', async (t) => {
  const name = 'c-binary';
  t.is(await create(t, name, { vectors: { size: 16, distance: 'Cosine' }, quantization_config: { binary: { always_ram: false } } }), true);
  const ci = await info(t, name);
  t.deepEqual(ci.config.quantization_config, { binary: { always_ram: false } });
});

test('a collection created without optional settings reports the reference defaults', async (t) => {
  const name = 'c-defaults';
  await create(t, name, { vectors: { size: 2, distance: 'Dot' } });
  const cfg = (await info(t, name)).config;
  t.like(cfg.hnsw_config, { m: 16, ef_construct: 100, full_scan_threshold: 10000 });
  t.like(cfg.optimizer_config, { deleted_threshold: 0.2, vacuum_min_vector_number: 1000, flush_interval_sec: 5 });
  t.like(cfg.wal_config, { wal_capacity_mb: 32, wal_segments_ahead: 0 });
  t.like(cfg.params, { shard_number: 1, replication_factor: 1, write_consistency_factor: 1 });
  t.is(cfg.quantization_config ?? null, null);
});

test('GET /collections lists every collection; exists answers false for a missing one', async (t) => {
  await create(t, 'c-list-1', { vectors: { size: 2, distance: 'Dot' } });
  await create(t, 'c-list-2', { vectors: { size: 2, distance: 'Dot' } });
  const names = await listed(t);
  t.true(names.includes('c-list-1'));
  t.true(names.includes('c-list-2'));
  t.is(new Set(names).size, names.length, 'no name twice');
  t.false(await exists(t, 'c-list-missing'));
  t.false(names.includes('c-list-missing'));
});

test('PATCH changes optimizer and collection params and GET shows them', async (t) => {
  const name = 'c-patch';
  await create(t, name, { vectors: { size: 3, distance: 'Cosine' } });
  t.is(
    await api.ok(t, 'PATCH', COLLECTION, {
      params: { collection_name: name },
      body: { optimizers_config: { deleted_threshold: 0.5, indexing_threshold: 2000 }, params: { on_disk_payload: false } },
    }),
    true,
  );
  const cfg = (await info(t, name)).config;
  t.like(cfg.optimizer_config, { deleted_threshold: 0.5, indexing_threshold: 2000 });
  t.is(cfg.params.on_disk_payload, false);
  t.deepEqual(cfg.params.vectors, { size: 3, distance: 'Cosine' });
  // An empty update is accepted and changes nothing.
  t.is(await api.ok(t, 'PATCH', COLLECTION, { params: { collection_name: name }, body: {} }), true);
  t.like((await info(t, name)).config.optimizer_config, { deleted_threshold: 0.5 });
});

test('PATCH sets read_fan_out_factor and read_fan_out_delay_ms; GET shows them once set, as the reference does', async (t) => {
  const name = 'c-patch-fan-out';
  const patch = (params: unknown) => api.ok(t, 'PATCH', COLLECTION, { params: { collection_name: name }, body: { params } });
  await create(t, name, { vectors: { size: 2, distance: 'Dot' }, replication_factor: 1 });
  const before = (await info(t, name)).config.params;
  t.false('read_fan_out_factor' in before, 'unset: absent');
  t.false('read_fan_out_delay_ms' in before, 'unset: absent');
  t.is(await patch({ read_fan_out_factor: 2 }), true);
  let params = (await info(t, name)).config.params;
  t.is(params.read_fan_out_factor, 2);
  t.false('read_fan_out_delay_ms' in params);
  t.is(await patch({ read_fan_out_delay_ms: 30, read_fan_out_factor: 0 }), true);
  params = (await info(t, name)).config.params;
  t.like(params, { read_fan_out_factor: 0, read_fan_out_delay_ms: 30, replication_factor: 1, on_disk_payload: true });
  // null leaves a setting as it is (as for the other params).
  t.is(await patch({ read_fan_out_factor: null }), true);
  t.is((await info(t, name)).config.params.read_fan_out_factor, 0);
  // The reference's types: uint32 and uint64, at least 0; anything else does not deserialize (400).
  for (const bad of [{ read_fan_out_factor: -1 }, { read_fan_out_factor: 1.5 }, { read_fan_out_factor: '2' }, { read_fan_out_factor: 2 ** 32 }, { read_fan_out_delay_ms: -5 }]) {
    await api.error(t, 400, 'PATCH', COLLECTION, { params: { collection_name: name }, body: { params: bad } }, /^Format error in JSON body: params\.read_fan_out_/);
  }
  t.deepEqual((await info(t, name)).config.params, params, 'a refused PATCH changes nothing');
  // The reference's create body has no such field (nor a params object): Quiver refuses unknown fields.
  await api.error(t, 400, 'PUT', COLLECTION, { params: { collection_name: 'c-create-fan-out' }, body: { vectors: { size: 2, distance: 'Dot' }, read_fan_out_factor: 1 } }, /unknown field `read_fan_out_factor`/);
});

test('PATCH of hnsw_config settings that need no rebuild is applied', async (t) => {
  const name = 'c-patch-hnsw-light';
  await create(t, name, { vectors: { size: 3, distance: 'Cosine' } });
  t.is(await api.ok(t, 'PATCH', COLLECTION, { params: { collection_name: name }, body: { hnsw_config: { full_scan_threshold: 500 } } }), true);
  t.like((await info(t, name)).config.hnsw_config, { m: 16, ef_construct: 100, full_scan_threshold: 500 });
});

// The reference rebuilds the index; Quiver refuses for now (README: "changing `m`,
// `ef_construct` or quantization of an existing collection" answers 400). Marked failing
// so that it turns red, to be made a plain test, once the rebuild is served.
test('PATCH of hnsw_config m/ef_construct is applied and the graph rebuilt, as the reference does', async (t) => {
  const name = 'c-patch-hnsw';
  // A 1 KiB indexing threshold: 300 points of 3 floats get an HNSW index.
  await create(t, name, { vectors: { size: 3, distance: 'Cosine' }, optimizers_config: { indexing_threshold: 1 } });
  const points = Array.from({ length: 300 }, (_, i) => ({ id: i, vector: [Math.cos(i), Math.sin(i), 1 + (i % 7)] }));
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: name }, query: { wait: true }, body: { points } });
  t.is(await api.ok(t, 'PATCH', COLLECTION, { params: { collection_name: name }, body: { hnsw_config: { m: 32, ef_construct: 200 } } }), true);
  t.like((await info(t, name)).config.hnsw_config, { m: 32, ef_construct: 200 });
  const ci = await waitFor('the rebuilt graph (green)', async () => {
    const now = await info(t, name);
    return now.status === 'green' && now;
  }, DEADLINE_MS, 25).catch(() => info(t, name));
  t.is(ci.status, 'green');
  t.is(ci.points_count, 300);
  t.true(ci.indexed_vectors_count > 0);
  const res = await api.ok(t, 'POST', QUERY, { params: { collection_name: name }, body: { query: [Math.cos(5), Math.sin(5), 6], limit: 1 } });
  t.is(res.points[0].id, 5);
});

test('a rejected PATCH leaves the configuration as it was', async (t) => {
  const name = 'c-patch-hnsw-refused';
  await create(t, name, { vectors: { size: 3, distance: 'Cosine' } });
  await api.error(t, 422, 'PATCH', COLLECTION, { params: { collection_name: name }, body: { hnsw_config: { m: 32 }, optimizers_config: { deleted_threshold: 1.5 } } }, /^Validation error in JSON body: /);
  const cfg = (await info(t, name)).config;
  t.like(cfg.hnsw_config, { m: 16, ef_construct: 100 });
  t.like(cfg.optimizer_config, { deleted_threshold: 0.2 });
});

test('PATCH of a missing collection is 404', async (t) => {
  await api.error(t, 404, 'PATCH', COLLECTION, { params: { collection_name: 'c-patch-missing' }, body: { optimizers_config: { deleted_threshold: 0.5 } } }, notFound('c-patch-missing'));
});

test('DELETE removes a collection: true, then exists false, GET 404, and a second DELETE answers 200 false', async (t) => {
  const name = 'c-delete';
  await create(t, name, { vectors: { size: 2, distance: 'Euclid' } });
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: name }, query: { wait: true }, body: { points: [{ id: 1, vector: [1, 2] }] } });
  t.is(await api.ok(t, 'DELETE', COLLECTION, { params: { collection_name: name } }), true);
  t.false(await exists(t, name));
  t.false((await listed(t)).includes(name));
  await api.error(t, 404, 'GET', COLLECTION, { params: { collection_name: name } }, notFound(name));
  t.is(await api.ok(t, 'DELETE', COLLECTION, { params: { collection_name: name } }), false);
  // The name can be used again, and the new collection starts empty.
  await create(t, name, { vectors: { size: 3, distance: 'Dot' } });
  const ci = await info(t, name);
  t.is(ci.points_count, 0);
  t.deepEqual(ci.config.params.vectors, { size: 3, distance: 'Dot' });
});

test('creating an existing collection is 409 and leaves it as it was', async (t) => {
  const name = 'c-dup';
  await create(t, name, { vectors: { size: 2, distance: 'Dot' } });
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: name }, query: { wait: true }, body: { points: [{ id: 7, vector: [1, 1] }] } });
  await api.error(t, 409, 'PUT', COLLECTION, { params: { collection_name: name }, body: { vectors: { size: 9, distance: 'Cosine' } } }, `Wrong input: Collection \`${name}\` already exists!`);
  const ci = await info(t, name);
  t.deepEqual(ci.config.params.vectors, { size: 2, distance: 'Dot' });
  t.is(ci.points_count, 1);
});

test('GET of a missing collection is 404 with the reference message', async (t) => {
  await api.error(t, 404, 'GET', COLLECTION, { params: { collection_name: 'c-never' } }, notFound('c-never'));
});

// -- aliases ------------------------------------------------------------------------------------

test('aliases: create, list (all and per collection), rename, delete', async (t) => {
  await create(t, 'c-al-a', { vectors: { size: 2, distance: 'Dot' } });
  await create(t, 'c-al-b', { vectors: { size: 2, distance: 'Dot' } });
  t.is(
    await api.ok(t, 'POST', ALIASES, {
      body: {
        actions: [
          { create_alias: { collection_name: 'c-al-a', alias_name: 'al-a1' } },
          { create_alias: { collection_name: 'c-al-a', alias_name: 'al-a2' } },
          { create_alias: { collection_name: 'c-al-b', alias_name: 'al-b1' } },
        ],
      },
    }),
    true,
  );
  const all = await aliasesOf(t);
  for (const a of [
    { alias_name: 'al-a1', collection_name: 'c-al-a' },
    { alias_name: 'al-a2', collection_name: 'c-al-a' },
    { alias_name: 'al-b1', collection_name: 'c-al-b' },
  ]) {
    t.true(all.some((x) => x.alias_name === a.alias_name && x.collection_name === a.collection_name), `${a.alias_name} listed`);
  }
  const ofA = await aliasesOf(t, 'c-al-a');
  t.deepEqual(ofA.map((a) => a.alias_name).sort(), ['al-a1', 'al-a2']);
  t.true(ofA.every((a) => a.collection_name === 'c-al-a'));
  t.deepEqual((await aliasesOf(t, 'c-al-b')).map((a) => a.alias_name), ['al-b1']);

  t.is(await api.ok(t, 'POST', ALIASES, { body: { actions: [{ rename_alias: { old_alias_name: 'al-a1', new_alias_name: 'al-a1-renamed' } }] } }), true);
  t.deepEqual((await aliasesOf(t, 'c-al-a')).map((a) => a.alias_name).sort(), ['al-a1-renamed', 'al-a2']);
  await api.error(t, 404, 'GET', COLLECTION, { params: { collection_name: 'al-a1' } }, notFound('al-a1'));
  t.deepEqual((await info(t, 'al-a1-renamed')).config.params.vectors, { size: 2, distance: 'Dot' });

  t.is(await api.ok(t, 'POST', ALIASES, { body: { actions: [{ delete_alias: { alias_name: 'al-a2' } }] } }), true);
  t.deepEqual((await aliasesOf(t, 'c-al-a')).map((a) => a.alias_name), ['al-a1-renamed']);
  t.false((await aliasesOf(t)).some((a) => a.alias_name === 'al-a2'));
  // An alias is not a collection of its own.
  t.false((await listed(t)).includes('al-a1-renamed'));
});

test('an alias can be used wherever a collection name is', async (t) => {
  await create(t, 'c-al-use', { vectors: { size: 3, distance: 'Cosine' } });
  await api.ok(t, 'POST', ALIASES, { body: { actions: [{ create_alias: { collection_name: 'c-al-use', alias_name: 'al-use' } }] } });
  const viaAlias = { collection_name: 'al-use' };
  await api.ok(t, 'PUT', POINTS, {
    params: viaAlias,
    query: { wait: true },
    body: { points: [{ id: 1, vector: [1, 0, 0], payload: { k: 'a' } }, { id: 2, vector: [0, 1, 0], payload: { k: 'b' } }] },
  });
  // The writes through the alias are in the collection.
  t.is((await api.ok(t, 'POST', COUNT, { params: { collection_name: 'c-al-use' }, body: {} })).count, 2);
  t.is((await api.ok(t, 'POST', COUNT, { params: viaAlias, body: { exact: true } })).count, 2);
  const ci = await info(t, 'al-use');
  t.is(ci.points_count, 2);
  t.deepEqual(ci.config.params.vectors, { size: 3, distance: 'Cosine' });
  const q = await api.ok(t, 'POST', QUERY, { params: viaAlias, body: { query: [1, 0, 0], limit: 1, with_payload: true } });
  t.deepEqual(q.points.map((p: { id: number }) => p.id), [1]);
  t.deepEqual(q.points[0].payload, { k: 'a' });
  const s = await api.ok(t, 'POST', SCROLL, { params: viaAlias, body: { limit: 10 } });
  t.deepEqual(s.points.map((p: { id: number }) => p.id), [1, 2]);
  const one = await api.ok(t, 'GET', '/collections/{collection_name}/points/{id}', { params: { collection_name: 'al-use', id: 2 } });
  t.is(one.id, 2);
  await api.ok(t, 'PUT', INDEX, { params: viaAlias, query: { wait: true }, body: { field_name: 'k', field_schema: 'keyword' } });
  t.is((await info(t, 'c-al-use')).payload_schema.k?.data_type, 'keyword');
  t.deepEqual((await aliasesOf(t, 'al-use')).map((a) => a.alias_name), ['al-use']);
});

test('an alias whose name is an existing collection is 409; an alias of a missing collection is 404; neither changes anything', async (t) => {
  await create(t, 'c-al-clash-1', { vectors: { size: 2, distance: 'Dot' } });
  await create(t, 'c-al-clash-2', { vectors: { size: 2, distance: 'Dot' } });
  const before = await aliasesOf(t);
  await api.error(t, 409, 'POST', ALIASES, { body: { actions: [{ create_alias: { collection_name: 'c-al-clash-1', alias_name: 'c-al-clash-2' } }] } }, 'Wrong input: Collection `c-al-clash-2` already exists!');
  await api.error(t, 404, 'POST', ALIASES, { body: { actions: [{ create_alias: { collection_name: 'c-al-nothing', alias_name: 'al-nothing' } }] } }, notFound('c-al-nothing'));
  const after = await aliasesOf(t);
  t.false(after.some((a) => a.alias_name === 'c-al-clash-2' || a.alias_name === 'al-nothing'));
  t.is(after.filter((a) => a.collection_name.startsWith('c-al-clash')).length, before.filter((a) => a.collection_name.startsWith('c-al-clash')).length);
  t.deepEqual((await info(t, 'c-al-clash-2')).config.params.vectors, { size: 2, distance: 'Dot' });
});

test('create_alias on an existing alias points it at the new collection', async (t) => {
  await create(t, 'c-al-move-1', { vectors: { size: 2, distance: 'Dot' } });
  await create(t, 'c-al-move-2', { vectors: { size: 3, distance: 'Dot' } });
  await api.ok(t, 'POST', ALIASES, { body: { actions: [{ create_alias: { collection_name: 'c-al-move-1', alias_name: 'al-move' } }] } });
  t.is(await api.ok(t, 'POST', ALIASES, { body: { actions: [{ create_alias: { collection_name: 'c-al-move-2', alias_name: 'al-move' } }] } }), true);
  t.deepEqual((await aliasesOf(t)).filter((a) => a.alias_name === 'al-move'), [{ alias_name: 'al-move', collection_name: 'c-al-move-2' }]);
  t.deepEqual((await info(t, 'al-move')).config.params.vectors, { size: 3, distance: 'Dot' });
  t.deepEqual(await aliasesOf(t, 'c-al-move-1'), []);
});

test('rename_alias of a missing alias is 404 "Not found: Alias x does not exists!"', async (t) => {
  await api.error(t, 404, 'POST', ALIASES, { body: { actions: [{ rename_alias: { old_alias_name: 'al-ghost', new_alias_name: 'al-ghost-2' } }] } }, 'Not found: Alias al-ghost does not exists!');
  t.false((await aliasesOf(t)).some((a) => a.alias_name === 'al-ghost-2'));
});

// The reference's delete_alias removes the name if it is there and answers true either
// way (AliasPersistence::remove returns Ok(None) for a missing alias).
test('delete_alias of a missing alias answers 200 true', async (t) => {
  t.is(await api.ok(t, 'POST', ALIASES, { body: { actions: [{ delete_alias: { alias_name: 'al-never-made' } }] } }), true);
});

test('creating a collection named like an existing alias is 400 and creates nothing', async (t) => {
  await create(t, 'c-al-owner', { vectors: { size: 2, distance: 'Dot' } });
  await api.ok(t, 'POST', ALIASES, { body: { actions: [{ create_alias: { collection_name: 'c-al-owner', alias_name: 'al-taken' } }] } });
  await api.error(
    t,
    400,
    'PUT',
    COLLECTION,
    { params: { collection_name: 'al-taken' }, body: { vectors: { size: 7, distance: 'Cosine' } } },
    "Wrong input: Can't create collection with name al-taken. Alias with the same name already exists",
  );
  t.false((await listed(t)).includes('al-taken'));
  t.deepEqual((await info(t, 'al-taken')).config.params.vectors, { size: 2, distance: 'Dot' });
});

test('aliases of a missing collection is 404; deleting a collection drops its aliases', async (t) => {
  await api.error(t, 404, 'GET', COLLECTION_ALIASES, { params: { collection_name: 'c-al-none' } }, notFound('c-al-none'));
  await create(t, 'c-al-drop', { vectors: { size: 2, distance: 'Dot' } });
  await api.ok(t, 'POST', ALIASES, { body: { actions: [{ create_alias: { collection_name: 'c-al-drop', alias_name: 'al-drop' } }] } });
  t.true((await aliasesOf(t)).some((a) => a.alias_name === 'al-drop'));
  t.is(await api.ok(t, 'DELETE', COLLECTION, { params: { collection_name: 'c-al-drop' } }), true);
  t.false((await aliasesOf(t)).some((a) => a.alias_name === 'al-drop'));
  await api.error(t, 404, 'GET', COLLECTION, { params: { collection_name: 'al-drop' } }, notFound('al-drop'));
});

// -- payload indexes ---------------------------------------------------------------------------------

test('payload indexes of every type: created, shown in payload_schema with point counts, used by filters, deleted', async (t) => {
  const name = 'c-index';
  await create(t, name, { vectors: { size: 2, distance: 'Dot' } });
  const uuids = ['0b6a36a7-8b8a-4ae0-b2c4-0ad0b0e0e0f1', '7c3a9c2e-1111-4d1a-9a0e-2d2b4b4b4b4b'];
  const points = [
    { id: 1, vector: [1, 0], payload: { city: 'Berlin', n: 1, price: 1.5, ok: true, uid: uuids[0], ts: '2024-01-01T00:00:00Z', desc: 'quick brown fox' } },
    { id: 2, vector: [0, 1], payload: { city: 'Paris', n: 2, price: 2.5, ok: false, uid: uuids[1], ts: '2024-06-01T12:00:00Z', desc: 'lazy dog' } },
    { id: 3, vector: [1, 1], payload: { city: 'Berlin', n: 3, price: 3.5, ok: true, ts: '2025-01-01T00:00:00Z' } },
    { id: 4, vector: [1, 2], payload: { other: 1 } },
  ];
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: name }, query: { wait: true }, body: { points } });

  const schemas: Array<[string, unknown, string, number]> = [
    ['city', 'keyword', 'keyword', 3],
    ['n', 'integer', 'integer', 3],
    ['price', 'float', 'float', 3],
    ['ok', 'bool', 'bool', 3],
    ['uid', 'uuid', 'uuid', 2],
    ['ts', 'datetime', 'datetime', 3],
    ['desc', { type: 'text', tokenizer: 'word', lowercase: true }, 'text', 2],
  ];
  for (const [field, schema] of schemas) {
    const r = await api.ok(t, 'PUT', INDEX, { params: { collection_name: name }, query: { wait: true }, body: { field_name: field, field_schema: schema } });
    t.is(r?.status, 'completed', `index ${field}`);
  }
  const ps = (await info(t, name)).payload_schema;
  t.deepEqual(Object.keys(ps).sort(), schemas.map((s) => s[0]).sort());
  for (const [field, , dataType, count] of schemas) {
    t.is(ps[field]?.data_type, dataType, `${field} data_type`);
    t.is(ps[field]?.points, count, `${field} indexed points`);
  }
  t.like(ps.desc.params, { type: 'text', tokenizer: 'word' });

  // Filters over the indexed fields count the right points.
  const count = async (filter: unknown) => (await api.ok(t, 'POST', COUNT, { params: { collection_name: name }, body: { filter, exact: true } })).count;
  t.is(await count({ must: [{ key: 'city', match: { value: 'Berlin' } }] }), 2);
  t.is(await count({ must: [{ key: 'n', range: { gte: 2 } }] }), 2);
  t.is(await count({ must: [{ key: 'price', range: { lt: 3 } }] }), 2);
  t.is(await count({ must: [{ key: 'ok', match: { value: false } }] }), 1);
  t.is(await count({ must: [{ key: 'uid', match: { value: uuids[1] } }] }), 1);
  t.is(await count({ must: [{ key: 'ts', range: { gte: '2024-03-01T00:00:00Z' } }] }), 2);
  t.is(await count({ must: [{ key: 'desc', match: { text: 'fox' } }] }), 1);

  // A new point is indexed too.
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: name }, query: { wait: true }, body: { points: [{ id: 5, vector: [2, 2], payload: { city: 'Rome', n: 9 } }] } });
  const ps2 = (await info(t, name)).payload_schema;
  t.is(ps2.city.points, 4);
  t.is(ps2.n.points, 4);

  for (const [field] of schemas.slice(0, 3)) {
    const r = await api.ok(t, 'DELETE', INDEX_FIELD, { params: { collection_name: name, field_name: field }, query: { wait: true } });
    t.is(r?.status, 'completed', `drop ${field}`);
  }
  const ps3 = (await info(t, name)).payload_schema;
  t.deepEqual(Object.keys(ps3).sort(), ['desc', 'ok', 'ts', 'uid']);
  // Filtering still works without the index.
  t.is(await count({ must: [{ key: 'city', match: { value: 'Berlin' } }] }), 2);
});

test('payload index routes on a missing collection are 404', async (t) => {
  await api.error(t, 404, 'PUT', INDEX, { params: { collection_name: 'c-index-missing' }, body: { field_name: 'a', field_schema: 'keyword' } }, notFound('c-index-missing'));
  await api.error(t, 404, 'DELETE', INDEX_FIELD, { params: { collection_name: 'c-index-missing', field_name: 'a' } }, notFound('c-index-missing'));
});

test('an index created with wait=false is acknowledged and then shows up', async (t) => {
  const name = 'c-index-nowait';
  await create(t, name, { vectors: { size: 2, distance: 'Dot' } });
  const r = await api.ok(t, 'PUT', INDEX, { params: { collection_name: name }, body: { field_name: 'k', field_schema: 'keyword' } });
  t.true(['acknowledged', 'completed'].includes(r?.status));
  const ps: Record<string, { data_type: string }> = await waitFor('the index in payload_schema', async () => {
    const now = (await info(t, name)).payload_schema;
    return now.k !== undefined && now;
  }, DEADLINE_MS, 20).catch(async () => (await info(t, name)).payload_schema);
  t.is(ps.k?.data_type, 'keyword');
});
