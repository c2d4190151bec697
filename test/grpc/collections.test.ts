/**
 * qdrant.Collections over a real bin/quiver (gRPC on): each of the 14 RPCs called, its
 * answer decoded with the contract's types and checked (against what REST answers for
 * the same state where both exist), and the status code of each error kind: NOT_FOUND,
 * INVALID_ARGUMENT (the same message as the REST 400/422 for the same request),
 * ALREADY_EXISTS, UNIMPLEMENTED, RESOURCE_EXHAUSTED (a message over
 * service.max_request_size_mb), DEADLINE_EXCEEDED.
 *
 * One server; tests are serial and each uses collections of its own.
 */

import test, { type ExecutionContext } from 'ava';

import { codeName, startGrpcQuiver, type CallError, type GrpcQuiver, type QdrantGrpc } from './client';

let q: GrpcQuiver;
let c: QdrantGrpc;

test.before(async () => {
  q = await startGrpcQuiver({ SERVICE__SERVICE__MAX_REQUEST_SIZE_MB: '1' });
  c = q.client();
});

test.after.always(async () => {
  await q?.stop();
});

async function rest(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${q.server.url}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? null : JSON.parse(text) };
}

/** The gRPC code REST's status stands for. */
const CODE_OF_HTTP: Record<number, string> = { 400: 'INVALID_ARGUMENT', 404: 'NOT_FOUND', 409: 'ALREADY_EXISTS', 422: 'INVALID_ARGUMENT', 501: 'UNIMPLEMENTED', 403: 'PERMISSION_DENIED' };

/** The gRPC error answers as REST answers the same request: the matching code and the same message. */
function sameAsRest(t: ExecutionContext, err: CallError, r: { status: number; body: any }, code: string): void {
  t.is(codeName(err.code), code, err.details);
  t.is(CODE_OF_HTTP[r.status], code, JSON.stringify(r.body));
  t.is(err.details, r.body.status.error);
}

const NAMED = { params_map: { map: { image: { size: '4', distance: 'Dot' }, text: { size: '2', distance: 'Cosine', hnsw_config: { m: '32' }, on_disk: false } } } };

test.serial('Create, Get, CollectionExists, List: a named-vector collection as REST shows it', async (t) => {
  const created = await c.call('Collections', 'Create', {
    collection_name: 'named',
    vectors_config: NAMED,
    hnsw_config: { ef_construct: '64' },
    optimizers_config: { indexing_threshold: '5000', max_optimization_threads: { value: '2' } },
    wal_config: { wal_capacity_mb: '16' },
    quantization_config: { scalar: { type: 'Int8', quantile: 0.99, always_ram: true } },
    shard_number: 2,
    on_disk_payload: false,
  });
  t.is(created.result, true);
  t.is(typeof created.time, 'number');

  // A payload index (through REST) shows in payload_schema with its parameters.
  t.is((await rest('PUT', '/collections/named/index?wait=true', { field_name: 'city', field_schema: { type: 'keyword', is_tenant: true } })).status, 200);
  t.is((await rest('PUT', '/collections/named/index?wait=true', { field_name: 'body', field_schema: { type: 'text', tokenizer: 'prefix', min_token_len: 2, stopwords: 'english' } })).status, 200);
  t.is((await rest('PUT', '/collections/named/points?wait=true', { points: [{ id: 1, vector: { image: [1, 0, 0, 0], text: [0, 1] }, payload: { city: 'Oslo', body: 'the north' } }] })).status, 200);

  const { result: info } = await c.call('Collections', 'Get', { collection_name: 'named' });
  const r = (await rest('GET', '/collections/named')).body.result;
  t.is(info.status, 'Green');
  t.deepEqual(info.optimizer_status, { ok: true });
  t.is(info.points_count, '1');
  t.is(info.points_count, String(r.points_count));
  t.is(info.segments_count, String(r.segments_count));
  t.is(info.indexed_vectors_count, String(r.indexed_vectors_count));
  const p = info.config.params;
  t.is(p.shard_number, 2);
  t.is(p.on_disk_payload, false);
  t.is(p.sharding_method, 'Auto');
  t.is(p.replication_factor, r.config.params.replication_factor);
  t.is(p.write_consistency_factor, r.config.params.write_consistency_factor);
  t.is(p.vectors_config.config, 'params_map');
  t.like(p.vectors_config.params_map.map.image, { size: '4', distance: 'Dot' });
  t.like(p.vectors_config.params_map.map.text, { size: '2', distance: 'Cosine', on_disk: false });
  t.is(p.vectors_config.params_map.map.text.hnsw_config.m, '32');
  t.like(info.config.hnsw_config, { m: String(r.config.hnsw_config.m), ef_construct: '64', full_scan_threshold: String(r.config.hnsw_config.full_scan_threshold) });
  t.like(info.config.optimizer_config, { indexing_threshold: '5000', deleted_threshold: r.config.optimizer_config.deleted_threshold });
  t.deepEqual(info.config.optimizer_config.max_optimization_threads.value, '2');
  t.like(info.config.wal_config, { wal_capacity_mb: '16', wal_segments_ahead: String(r.config.wal_config.wal_segments_ahead) });
  t.is(info.config.quantization_config.scalar.type, 'Int8');
  t.is(info.config.quantization_config.scalar.always_ram, true);
  t.true(Math.abs(info.config.quantization_config.scalar.quantile - 0.99) < 1e-6);
  t.like(info.payload_schema.city, { data_type: 'Keyword', points: '1' });
  t.is(info.payload_schema.city.params.keyword_index_params.is_tenant, true);
  t.like(info.payload_schema.body, { data_type: 'Text', points: '1' });
  t.like(info.payload_schema.body.params.text_index_params, { tokenizer: 'Prefix', min_token_len: '2' });
  t.deepEqual(info.payload_schema.body.params.text_index_params.stopwords.languages, ['english']);

  t.deepEqual((await c.call('Collections', 'CollectionExists', { collection_name: 'named' })).result, { exists: true });
  t.deepEqual((await c.call('Collections', 'CollectionExists', { collection_name: 'nothing' })).result, { exists: false });
  const names = (await c.call('Collections', 'List', {})).collections.map((x: { name: string }) => x.name);
  t.true(names.includes('named'));
  t.deepEqual(names.sort(), (await rest('GET', '/collections')).body.result.collections.map((x: { name: string }) => x.name).sort());
});

test.serial('Create refuses what REST refuses, with the same message: ALREADY_EXISTS, INVALID_ARGUMENT', async (t) => {
  const single = { params: { size: '3', distance: 'Euclid' } };
  t.is((await c.call('Collections', 'Create', { collection_name: 'dup', vectors_config: single })).result, true);
  sameAsRest(t, await c.fail('Collections', 'Create', { collection_name: 'dup', vectors_config: single }), await rest('PUT', '/collections/dup', { vectors: { size: 3, distance: 'Euclid' } }), 'ALREADY_EXISTS');

  // No vectors; an unknown distance; size 0 (a validation error: REST 422); product quantization; hnsw m = 1.
  sameAsRest(t, await c.fail('Collections', 'Create', { collection_name: 'bad' }), await rest('PUT', '/collections/bad', {}), 'INVALID_ARGUMENT');
  sameAsRest(
    t,
    await c.fail('Collections', 'Create', { collection_name: 'bad', vectors_config: { params: { size: '3' } } }),
    await rest('PUT', '/collections/bad', { vectors: { size: 3, distance: 'UnknownDistance' } }),
    'INVALID_ARGUMENT',
  );
  sameAsRest(
    t,
    await c.fail('Collections', 'Create', { collection_name: 'bad', vectors_config: { params: { distance: 'Dot' } } }),
    await rest('PUT', '/collections/bad', { vectors: { size: 0, distance: 'Dot' } }),
    'INVALID_ARGUMENT',
  );
  sameAsRest(
    t,
    await c.fail('Collections', 'Create', { collection_name: 'bad', vectors_config: single, quantization_config: { product: { compression: 'x16' } } }),
    await rest('PUT', '/collections/bad', { vectors: { size: 3, distance: 'Euclid' }, quantization_config: { product: { compression: 'x16' } } }),
    'INVALID_ARGUMENT',
  );
  sameAsRest(
    t,
    await c.fail('Collections', 'Create', { collection_name: 'bad', vectors_config: single, hnsw_config: { m: '1' } }),
    await rest('PUT', '/collections/bad', { vectors: { size: 3, distance: 'Euclid' }, hnsw_config: { m: 1 } }),
    'INVALID_ARGUMENT',
  );
  t.false((await c.call('Collections', 'CollectionExists', { collection_name: 'bad' })).result.exists, 'nothing was created');
});

test.serial('Get, Update, Delete of a missing collection: NOT_FOUND as REST', async (t) => {
  sameAsRest(t, await c.fail('Collections', 'Get', { collection_name: 'ghost' }), await rest('GET', '/collections/ghost'), 'NOT_FOUND');
  sameAsRest(
    t,
    await c.fail('Collections', 'Update', { collection_name: 'ghost', optimizers_config: { indexing_threshold: '10' } }),
    await rest('PATCH', '/collections/ghost', { optimizers_config: { indexing_threshold: 10 } }),
    'NOT_FOUND',
  );
  const del = await c.call('Collections', 'Delete', { collection_name: 'ghost' });
  t.is(del.result, (await rest('DELETE', '/collections/ghost')).body.result);
});

test.serial('Update changes what REST changes; a bad update is refused and changes nothing', async (t) => {
  t.is((await c.call('Collections', 'Create', { collection_name: 'upd', vectors_config: { params: { size: '2', distance: 'Dot' } } })).result, true);
  const u = await c.call('Collections', 'Update', {
    collection_name: 'upd',
    optimizers_config: { indexing_threshold: '777', max_optimization_threads: { setting: 'Auto' } },
    params: { on_disk_payload: false },
    hnsw_config: { ef_construct: '55' },
    vectors_config: { params: { on_disk: false } },
    quantization_config: { binary: { always_ram: true } },
  });
  t.is(u.result, true);
  const r = (await rest('GET', '/collections/upd')).body.result;
  t.is(r.config.optimizer_config.indexing_threshold, 777);
  t.is(r.config.optimizer_config.max_optimization_threads, null);
  t.is(r.config.params.on_disk_payload, false);
  t.is(r.config.hnsw_config.ef_construct, 55);
  t.is(r.config.params.vectors.on_disk, false);
  t.deepEqual(r.config.quantization_config, { binary: { always_ram: true } });

  // Quantization off again (QuantizationConfigDiff.disabled).
  await c.call('Collections', 'Update', { collection_name: 'upd', quantization_config: { disabled: {} } });
  t.is((await rest('GET', '/collections/upd')).body.result.config.quantization_config, null);

  sameAsRest(
    t,
    await c.fail('Collections', 'Update', { collection_name: 'upd', params: { replication_factor: 1, write_consistency_factor: 5 } }),
    await rest('PATCH', '/collections/upd', { params: { replication_factor: 1, write_consistency_factor: 5 } }),
    'INVALID_ARGUMENT',
  );
  sameAsRest(
    t,
    await c.fail('Collections', 'Update', { collection_name: 'upd', vectors_config: { params_map: { map: { nope: { on_disk: true } } } } }),
    await rest('PATCH', '/collections/upd', { vectors: { nope: { on_disk: true } } }),
    'INVALID_ARGUMENT',
  );
  // Graphs are held in memory, and on-disk vectors need quantization: on_disk: true on an unquantized vector is refused, the same over both APIs.
  sameAsRest(
    t,
    await c.fail('Collections', 'Update', { collection_name: 'upd', vectors_config: { params: { on_disk: true } } }),
    await rest('PATCH', '/collections/upd', { vectors: { '': { on_disk: true } } }),
    'INVALID_ARGUMENT',
  );
  // hnsw_config.on_disk (the graph in a mapped file) is taken over gRPC as over REST.
  await c.call('Collections', 'Update', { collection_name: 'upd', hnsw_config: { on_disk: true } });
  t.is((await rest('GET', '/collections/upd')).body.result.config.hnsw_config.on_disk, true);
  t.is((await rest('PATCH', '/collections/upd', { hnsw_config: { on_disk: false } })).status, 200);
  t.is((await rest('GET', '/collections/upd')).body.result.config.hnsw_config.on_disk, false);
  const onDisk = await c.fail('Collections', 'Create', { collection_name: 'od', vectors_config: { params: { size: '2', distance: 'Dot', on_disk: true } } });
  t.regex(onDisk.details, /vectors\.on_disk: true needs quantization in Quiver/);
  t.false((await c.call('Collections', 'CollectionExists', { collection_name: 'od' })).result.exists);
  t.is((await rest('GET', '/collections/upd')).body.result.config.params.vectors.on_disk, false, 'a refused update changes nothing');
  t.is((await rest('GET', '/collections/upd')).body.result.config.params.write_consistency_factor, 1);

  const d = await c.call('Collections', 'Delete', { collection_name: 'upd' });
  t.is(d.result, true);
  t.false((await c.call('Collections', 'CollectionExists', { collection_name: 'upd' })).result.exists);
});

test.serial('UpdateAliases (create, rename, delete), ListAliases, ListCollectionAliases', async (t) => {
  await c.call('Collections', 'Create', { collection_name: 'aliased', vectors_config: { params: { size: '2', distance: 'Dot' } } });
  const ok = await c.call('Collections', 'UpdateAliases', {
    actions: [{ create_alias: { collection_name: 'aliased', alias_name: 'a1' } }, { create_alias: { collection_name: 'aliased', alias_name: 'a2' } }],
  });
  t.is(ok.result, true);
  await c.call('Collections', 'UpdateAliases', { actions: [{ rename_alias: { old_alias_name: 'a2', new_alias_name: 'a3' } }] });
  const mine = await c.call('Collections', 'ListCollectionAliases', { collection_name: 'aliased' });
  t.deepEqual(mine.aliases, [
    { alias_name: 'a1', collection_name: 'aliased' },
    { alias_name: 'a3', collection_name: 'aliased' },
  ]);
  t.deepEqual(mine.aliases, (await rest('GET', '/collections/aliased/aliases')).body.result.aliases);
  const all = await c.call('Collections', 'ListAliases', {});
  t.deepEqual(all.aliases, (await rest('GET', '/aliases')).body.result.aliases);
  // An alias reads as its collection.
  t.is((await c.call('Collections', 'Get', { collection_name: 'a1' })).result.config.params.vectors_config.params.size, '2');
  await c.call('Collections', 'UpdateAliases', { actions: [{ delete_alias: { alias_name: 'a1' } }] });
  t.deepEqual((await c.call('Collections', 'ListCollectionAliases', { collection_name: 'aliased' })).aliases, [{ alias_name: 'a3', collection_name: 'aliased' }]);

  sameAsRest(
    t,
    await c.fail('Collections', 'UpdateAliases', { actions: [{ create_alias: { collection_name: 'no-such', alias_name: 'x' } }] }),
    await rest('POST', '/collections/aliases', { actions: [{ create_alias: { collection_name: 'no-such', alias_name: 'x' } }] }),
    'NOT_FOUND',
  );
  sameAsRest(
    t,
    await c.fail('Collections', 'UpdateAliases', { actions: [{}] }),
    await rest('POST', '/collections/aliases', { actions: [{}] }),
    'INVALID_ARGUMENT',
  );
  sameAsRest(t, await c.fail('Collections', 'ListCollectionAliases', { collection_name: 'no-such' }), await rest('GET', '/collections/no-such/aliases'), 'NOT_FOUND');
});

test.serial('CollectionClusterInfo: the shards of this peer, as REST shows them', async (t) => {
  await c.call('Collections', 'Create', { collection_name: 'clustered', vectors_config: { params: { size: '2', distance: 'Dot' } }, shard_number: 3 });
  await rest('PUT', '/collections/clustered/points?wait=true', { points: [1, 2, 3, 4, 5].map((id) => ({ id, vector: [id, 1] })) });
  const info = await c.call('Collections', 'CollectionClusterInfo', { collection_name: 'clustered' });
  const r = (await rest('GET', '/collections/clustered/cluster')).body.result;
  t.is(info.peer_id, String(r.peer_id));
  t.is(info.shard_count, '3');
  t.deepEqual(
    info.local_shards.map((s: any) => ({ shard_id: s.shard_id ?? 0, points_count: s.points_count ?? '0', state: s.state ?? 'Active' })),
    r.local_shards.map((s: any) => ({ shard_id: s.shard_id, points_count: String(s.points_count), state: s.state })),
  );
  t.is(info.local_shards.reduce((n: number, s: any) => n + Number(s.points_count ?? 0), 0), 5);
  t.is(info.remote_shards, undefined);
  sameAsRest(t, await c.fail('Collections', 'CollectionClusterInfo', { collection_name: 'no-such' }), await rest('GET', '/collections/no-such/cluster'), 'NOT_FOUND');
});

test.serial('UpdateCollectionClusterSetup: answers as REST on a single node; resharding operations are UNIMPLEMENTED', async (t) => {
  await c.call('Collections', 'Create', { collection_name: 'setup', vectors_config: { params: { size: '2', distance: 'Dot' } } });
  const restDrop = await rest('POST', '/collections/setup/cluster', { drop_replica: { shard_id: 0, peer_id: 7 } });
  const drop = await c.fail('Collections', 'UpdateCollectionClusterSetup', { collection_name: 'setup', drop_replica: { shard_id: 0, peer_id: '7' } });
  sameAsRest(t, drop, restDrop, CODE_OF_HTTP[restDrop.status]);
  sameAsRest(t, await c.fail('Collections', 'UpdateCollectionClusterSetup', { collection_name: 'setup' }), await rest('POST', '/collections/setup/cluster', {}), 'INVALID_ARGUMENT');
  const rp = await c.fail('Collections', 'UpdateCollectionClusterSetup', { collection_name: 'setup', replicate_points: { from_shard_key: { keyword: 'a' }, to_shard_key: { keyword: 'b' } } });
  t.is(codeName(rp.code), 'UNIMPLEMENTED');
  t.regex(rp.details, /^Not implemented: `replicate_points`/);
  const moved = await c.fail('Collections', 'UpdateCollectionClusterSetup', { collection_name: 'setup', move_shard: { shard_id: 0, to_shard_id: 1, from_peer_id: '1', to_peer_id: '2' } });
  t.is(codeName(moved.code), 'UNIMPLEMENTED');
  t.regex(moved.details, /to_shard_id/);
});

test.serial('CreateShardKey, ListShardKeys, DeleteShardKey; and as cluster operations', async (t) => {
  await c.call('Collections', 'Create', { collection_name: 'keyed', vectors_config: { params: { size: '2', distance: 'Dot' } }, sharding_method: 'Custom' });
  t.is((await c.call('Collections', 'Get', { collection_name: 'keyed' })).result.config.params.sharding_method, 'Custom');
  t.is((await c.call('Collections', 'CreateShardKey', { collection_name: 'keyed', request: { shard_key: { keyword: 'eu' } } })).result, true);
  t.is((await c.call('Collections', 'CreateShardKey', { collection_name: 'keyed', request: { shard_key: { number: '7' }, shards_number: 2 } })).result, true);
  t.is((await c.call('Collections', 'UpdateCollectionClusterSetup', { collection_name: 'keyed', create_shard_key: { shard_key: { keyword: 'us' } } })).result, true);
  const listed = await c.call('Collections', 'ListShardKeys', { collection_name: 'keyed' });
  const keys = listed.shard_keys.map((k: any) => k.key.keyword ?? Number(k.key.number));
  t.deepEqual(keys, (await rest('GET', '/collections/keyed/shards')).body.result.shard_keys.map((k: any) => k.key));
  t.deepEqual([...keys].sort(), [7, 'eu', 'us'].sort());

  sameAsRest(
    t,
    await c.fail('Collections', 'CreateShardKey', { collection_name: 'keyed', request: { shard_key: { keyword: 'eu' } } }),
    await rest('PUT', '/collections/keyed/shards', { shard_key: 'eu' }),
    CODE_OF_HTTP[(await rest('PUT', '/collections/keyed/shards', { shard_key: 'eu' })).status],
  );
  sameAsRest(t, await c.fail('Collections', 'CreateShardKey', { collection_name: 'keyed', request: {} }), await rest('PUT', '/collections/keyed/shards', {}), 'INVALID_ARGUMENT');
  sameAsRest(
    t,
    await c.fail('Collections', 'CreateShardKey', { collection_name: 'keyed', request: { shard_key: { keyword: 'x' }, initial_state: 'Dead' } }),
    await rest('PUT', '/collections/keyed/shards', { shard_key: 'x', initial_state: 'Dead' }),
    'INVALID_ARGUMENT',
  );

  t.is((await c.call('Collections', 'DeleteShardKey', { collection_name: 'keyed', request: { shard_key: { keyword: 'eu' } } })).result, true);
  t.is((await c.call('Collections', 'UpdateCollectionClusterSetup', { collection_name: 'keyed', delete_shard_key: { shard_key: { number: '7' } } })).result, true);
  t.deepEqual((await c.call('Collections', 'ListShardKeys', { collection_name: 'keyed' })).shard_keys.map((k: any) => k.key.keyword), ['us']);
  const restMissing = await rest('POST', '/collections/keyed/shards/delete', { shard_key: 'eu' });
  sameAsRest(t, await c.fail('Collections', 'DeleteShardKey', { collection_name: 'keyed', request: { shard_key: { keyword: 'eu' } } }), restMissing, CODE_OF_HTTP[restMissing.status]);
  // An auto-sharded collection has no keys.
  await c.call('Collections', 'Create', { collection_name: 'unkeyed', vectors_config: { params: { size: '2', distance: 'Dot' } } });
  t.is((await c.call('Collections', 'ListShardKeys', { collection_name: 'unkeyed' })).shard_keys, undefined);
  sameAsRest(t, await c.fail('Collections', 'ListShardKeys', { collection_name: 'no-such' }), await rest('GET', '/collections/no-such/shards'), 'NOT_FOUND');
});

test.serial('a message over service.max_request_size_mb is RESOURCE_EXHAUSTED and changes nothing', async (t) => {
  const big = 'x'.repeat(1_200_000);
  const err = await c.fail('Collections', 'Create', { collection_name: 'huge', vectors_config: { params: { size: '2', distance: 'Dot' } }, metadata: { blob: { string_value: big } } });
  t.is(codeName(err.code), 'RESOURCE_EXHAUSTED');
  t.false((await c.call('Collections', 'CollectionExists', { collection_name: 'huge' })).result.exists);
});

test.serial('a call whose deadline has passed is DEADLINE_EXCEEDED', async (t) => {
  const err = await c.fail('Collections', 'List', {}, { deadlineMs: 0 });
  t.is(codeName(err.code), 'DEADLINE_EXCEEDED');
});
