/**
 * Custom sharding on a single node, against a real bin/quiver: `sharding_method:
 * custom`, shard keys created, listed and dropped (`/collections/{c}/shards`), `shard_key`
 * on writes and reads (one key, a list, a target with a fallback, none), the same id
 * under two keys being two points, points of a key spread over that key's shards by the
 * crc32c of the id, the reference's refusals (status and message, nothing changed),
 * the keys surviving a restart, and a collection snapshot (and a keyed shard's snapshot)
 * carrying the keys through recovery. Every answer is checked against the reference's
 * OpenAPI schema.
 *
 * One server on a storage folder of the test's own (it is restarted); tests are serial
 * and share the collection `tenants`.
 */

import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';

import test, { type ExecutionContext } from 'ava';

import { crc32c } from '../../ts/common/crc32c';
import { startServer, type Server } from '../crash/server';
import { ContractClient, spec } from '../support/contract';
import { COLLECTION, COUNT, DELETE, POINT, POINTS, QUERY, QUERY_BATCH, RECOMMEND, SCROLL, SEARCH, BATCH, PAYLOAD, VECTORS } from '../support/routes';

const SHARDS = '/collections/{collection_name}/shards';
const SHARDS_DELETE = '/collections/{collection_name}/shards/delete';
const CLUSTER = '/collections/{collection_name}/cluster';
const SNAPSHOTS = '/collections/{collection_name}/snapshots';
const SNAPSHOT_RECOVER = '/collections/{collection_name}/snapshots/recover';
const SHARD_SNAPSHOTS = '/collections/{collection_name}/shards/{shard_id}/snapshots';
const SHARD_SNAPSHOT_RECOVER = '/collections/{collection_name}/shards/{shard_id}/snapshots/recover';

const C = 'tenants';
const AUTO = 'plain';
const at = (collection_name: string) => ({ collection_name });

let dir = '';
let server: Server | null = null;
let api: ContractClient;

async function launch(): Promise<void> {
  server = await startServer(dir);
  api = new ContractClient(server.url, spec());
}

test.before(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-shard-keys-'));
  await launch();
});

test.after.always(async () => {
  await server?.stop('SIGTERM');
  if (dir !== '') await fs.rm(dir, { recursive: true, force: true });
});

/** The shard a point id goes to among `n` shards of its key: crc32c of the id's key text, as for auto sharding. */
function slot(id: number, n: number): number {
  return crc32c(Buffer.from(`n:${id}`, 'utf8')) % n;
}

const vec = (id: number) => [1 + (id % 3), 1 + (id % 5)];

async function keys(t: ExecutionContext, name = C): Promise<unknown> {
  return (await api.ok(t, 'GET', SHARDS, { params: at(name) })).shard_keys;
}

async function countOf(t: ExecutionContext, shard_key?: unknown, filter?: unknown): Promise<number> {
  const body: Record<string, unknown> = { exact: true };
  if (shard_key !== undefined) body.shard_key = shard_key;
  if (filter !== undefined) body.filter = filter;
  return (await api.ok(t, 'POST', COUNT, { params: at(C), body })).count;
}

interface ShardView {
  shard_id: number;
  shard_key?: string | number;
  points_count: number;
  state: string;
}

async function localShards(t: ExecutionContext, name = C): Promise<ShardView[]> {
  const info = await api.ok(t, 'GET', CLUSTER, { params: at(name) });
  t.deepEqual(info.remote_shards, [], 'a single node has no remote shards');
  t.is(info.shard_count, info.local_shards.length);
  return info.local_shards as ShardView[];
}

test.serial('a custom-sharded collection starts with no shard and no key; GET shows sharding_method custom', async (t) => {
  t.true(await api.ok(t, 'PUT', COLLECTION, { params: at(C), body: { vectors: { size: 2, distance: 'Dot' }, sharding_method: 'custom', shard_number: 2 } }));
  const info = await api.ok(t, 'GET', COLLECTION, { params: at(C) });
  t.is(info.config.params.sharding_method, 'custom');
  t.is(info.config.params.shard_number, 2, 'the default number of shards per key');
  t.is(info.points_count, 0);
  t.deepEqual(await keys(t), []);
  t.deepEqual(await localShards(t), []);
  // Reads of a collection without keys find nothing; a write without a key is refused.
  t.is(await countOf(t), 0);
  t.deepEqual((await api.ok(t, 'POST', SCROLL, { params: at(C), body: {} })).points, []);
  await api.error(t, 400, 'PUT', POINTS, { params: at(C), query: { wait: true }, body: { points: [{ id: 1, vector: [1, 1] }] } }, 'Wrong input: Shard key not specified');

  // An auto-sharded collection lists no keys at all (shard_keys left out, as the reference does).
  t.true(await api.ok(t, 'PUT', COLLECTION, { params: at(AUTO), body: { vectors: { size: 2, distance: 'Dot' } } }));
  t.is((await api.ok(t, 'GET', COLLECTION, { params: at(AUTO) })).config.params.sharding_method, 'auto');
  t.deepEqual(await api.ok(t, 'GET', SHARDS, { params: at(AUTO) }), {});
});

test.serial('shard keys are created with fresh shard ids (shard_number by default, shards_number when given) and listed in order', async (t) => {
  t.true(await api.ok(t, 'PUT', SHARDS, { params: at(C), body: { shard_key: 'acme' } }));
  t.true(await api.ok(t, 'PUT', SHARDS, { params: at(C), query: { timeout: 10 }, body: { shard_key: 7, shards_number: 1, replication_factor: 1, initial_state: 'Active' } }));
  t.deepEqual(await keys(t), [{ key: 'acme' }, { key: 7 }]);
  const shards = await localShards(t);
  t.deepEqual(
    shards.map((s) => [s.shard_id, s.shard_key, s.state]),
    [
      [1, 'acme', 'Active'],
      [2, 'acme', 'Active'],
      [3, 7, 'Active'],
    ],
  );
});

test.serial('refusals: the reference\'s status and message, and nothing changes', async (t) => {
  const before = JSON.stringify(await keys(t));
  // Creating or dropping keys.
  await api.error(t, 400, 'PUT', SHARDS, { params: at(C), body: { shard_key: 'acme' } }, 'Bad request: Sharding key "acme" already exists for collection tenants');
  await api.error(t, 400, 'PUT', SHARDS, { params: at(C), body: { shard_key: 7 } }, 'Bad request: Sharding key 7 already exists for collection tenants');
  await api.error(t, 400, 'POST', SHARDS_DELETE, { params: at(C), body: { shard_key: 'nobody' } }, 'Bad request: Sharding key "nobody" does not exist for collection tenants');
  // The string "7" is another key than the integer 7.
  await api.error(t, 400, 'POST', SHARDS_DELETE, { params: at(C), body: { shard_key: '7' } }, 'Bad request: Sharding key "7" does not exist for collection tenants');
  await api.error(t, 400, 'PUT', SHARDS, { params: at(AUTO), body: { shard_key: 'x' } }, 'Bad request: Shard Key cannot be created with Auto sharding method');
  await api.error(t, 400, 'POST', SHARDS_DELETE, { params: at(AUTO), body: { shard_key: 'x' } }, 'Bad request: Shard Key cannot be created with Auto sharding method');
  await api.error(t, 404, 'PUT', SHARDS, { params: at('missing'), body: { shard_key: 'x' } }, 'Not found: Collection `missing` doesn\'t exist!');
  await api.error(t, 400, 'PUT', SHARDS, { params: at(C), body: { shard_key: 'new', placement: [] } }, /^Bad request: Sharding key "new" placement cannot be empty/);
  await api.error(t, 400, 'PUT', SHARDS, { params: at(C), body: { shard_key: 'new', placement: [123] } }, 'Bad request: Peer 123 does not exist');
  await api.error(t, 400, 'PUT', SHARDS, { params: at(C), body: { shard_key: 'new', initial_state: 'Dead' } }, 'Bad request: Initial state cannot be Dead, only Active or Partial are allowed');
  await api.error(t, 400, 'PUT', SHARDS, { params: at(C), body: { shard_key: 'new', initial_state: 'Partial' } }, /^Wrong input: initial_state: `Partial` is not supported/);
  await api.error(t, 400, 'PUT', SHARDS, { params: at(C), body: { shard_key: 'new', shards_number: 0 } }, /^Format error in JSON body: shards_number: /);
  await api.error(t, 400, 'PUT', SHARDS, { params: at(C), body: { shard_key: -1 } }, /^Format error in JSON body: shard_key: /);
  await api.error(t, 400, 'PUT', SHARDS, { params: at(C), body: { shards_number: 1 } }, 'Format error in JSON body: missing field `shard_key`');
  t.is(JSON.stringify(await keys(t)), before, 'no refused request changed the keys');
  t.is((await localShards(t)).length, 3);

  // Points: a write needs a key that exists; a read names existing keys.
  const one = { points: [{ id: 1, vector: [1, 1] }] };
  await api.error(t, 400, 'PUT', POINTS, { params: at(C), query: { wait: true }, body: one }, 'Wrong input: Shard key not specified');
  await api.error(t, 400, 'PUT', POINTS, { params: at(C), query: { wait: true }, body: { ...one, shard_key: 'nobody' } }, 'Wrong input: Shard key "nobody" not found');
  await api.error(t, 400, 'PUT', POINTS, { params: at(C), query: { wait: true }, body: { ...one, shard_key: [] } }, 'Wrong input: Empty shard keys selection');
  await api.error(t, 400, 'PUT', POINTS, { params: at(C), query: { wait: true }, body: { ...one, shard_key: ['acme', 'nobody'] } }, 'Wrong input: Shard key "nobody" not found');
  await api.error(t, 400, 'POST', DELETE, { params: at(C), query: { wait: true }, body: { filter: {} } }, 'Wrong input: Shard key not specified');
  await api.error(t, 400, 'PUT', POINTS, { params: at(AUTO), query: { wait: true }, body: { ...one, shard_key: 'acme' } }, 'Wrong input: Shard key "acme" not found');
  await api.error(t, 400, 'PUT', POINTS, { params: at(C), query: { wait: true }, body: { ...one, shard_key: { target: 'a' } } }, 'Format error in JSON body: shard_key: missing field `fallback`');
  await api.error(t, 400, 'PUT', POINTS, { params: at(C), query: { wait: true }, body: { ...one, shard_key: 1.5 } }, /^Format error in JSON body: shard_key: /);
  await api.error(t, 400, 'POST', COUNT, { params: at(C), body: { shard_key: 'nobody' } }, 'Bad request: Shard key "nobody" not found');
  await api.error(t, 400, 'POST', SCROLL, { params: at(AUTO), body: { shard_key: 1 } }, 'Bad request: Shard key 1 not found');
  await api.error(t, 400, 'POST', QUERY, { params: at(C), body: { query: [1, 1], shard_key: ['acme', 'nobody'] } }, 'Bad request: Shard key "nobody" not found');
  await api.error(t, 404, 'POST', QUERY, { params: at(C), body: { query: [1, 1], shard_key: { target: 'x', fallback: 'y' } } }, 'Not found: Neither target shard key "x" nor fallback shard key "y" exist');
  t.is(await countOf(t), 0, 'no refused write stored a point');
});

test.serial('writes and reads by key: the same id under two keys is two points; a key\'s points hash over its own shards', async (t) => {
  // acme: ids 1..40 on its 2 shards; 7: ids 1..10 with other payloads.
  const acme = Array.from({ length: 40 }, (_, k) => ({ id: k + 1, vector: vec(k + 1), payload: { owner: 'acme', n: k + 1 } }));
  await api.ok(t, 'PUT', POINTS, { params: at(C), query: { wait: true }, body: { points: acme, shard_key: 'acme' } });
  await api.ok(t, 'PUT', POINTS, {
    params: at(C),
    query: { wait: true },
    body: { batch: { ids: Array.from({ length: 10 }, (_, k) => k + 1), vectors: Array.from({ length: 10 }, () => [-1, -1]), payloads: Array.from({ length: 10 }, (_, k) => ({ owner: 'seven', n: k + 1 })) }, shard_key: 7 },
  });

  // Counts: a key alone, a list, everything (no key): the same id under two keys counts twice.
  t.is(await countOf(t, 'acme'), 40);
  t.is(await countOf(t, 7), 10);
  t.is(await countOf(t, ['acme', 7]), 50);
  t.is(await countOf(t), 50);
  t.is(await countOf(t, 7, { must: [{ key: 'n', range: { lte: 3 } }] }), 3);

  // Within a key, the crc32c of the id picks one of the key's shards; the other key's shard holds its own points.
  const shards = await localShards(t);
  const onShard = (i: number) => acme.filter((p) => slot(p.id, 2) === i).length;
  t.deepEqual(shards.map((s) => s.points_count), [onShard(0), onShard(1), 10]);
  t.true(onShard(0) > 0 && onShard(1) > 0, 'both shards of the key hold points');

  // Retrieve by key: the key's own point, with its shard_key.
  t.deepEqual(await api.ok(t, 'POST', POINTS, { params: at(C), body: { ids: [1], shard_key: 'acme' } }), [{ id: 1, payload: { owner: 'acme', n: 1 }, shard_key: 'acme' }]);
  t.deepEqual(await api.ok(t, 'POST', POINTS, { params: at(C), body: { ids: [1, 2, 33], shard_key: 7, with_vector: true } }), [
    { id: 1, payload: { owner: 'seven', n: 1 }, vector: [-1, -1], shard_key: 7 },
    { id: 2, payload: { owner: 'seven', n: 2 }, vector: [-1, -1], shard_key: 7 },
  ]);
  // Without a key, an id under two keys comes back once (as the reference answers).
  const both = await api.ok(t, 'POST', POINTS, { params: at(C), body: { ids: [3, 35] } });
  t.deepEqual(both.map((r: { id: number }) => r.id), [3, 35]);
  t.is(both[1].shard_key, 'acme');
  const got = await api.ok(t, 'GET', POINT, { params: { ...at(C), id: 35 } });
  t.is(got.shard_key, 'acme');

  // Scroll: one key's points; all keys' ids once each, paged.
  const seven = await api.ok(t, 'POST', SCROLL, { params: at(C), body: { shard_key: [7], limit: 100 } });
  t.deepEqual(seven.points.map((p: { id: number }) => p.id), Array.from({ length: 10 }, (_, k) => k + 1));
  t.true(seven.points.every((p: { shard_key: unknown; payload: { owner: string } }) => p.shard_key === 7 && p.payload.owner === 'seven'));
  const seen: number[] = [];
  let offset: number | null = null;
  do {
    const body: Record<string, unknown> = { limit: 7 };
    if (offset !== null) body.offset = offset;
    const page: { points: Array<{ id: number }>; next_page_offset: number | null } = await api.ok(t, 'POST', SCROLL, { params: at(C), body });
    seen.push(...page.points.map((p) => p.id));
    offset = page.next_page_offset;
  } while (offset !== null);
  t.deepEqual(seen, Array.from({ length: 40 }, (_, k) => k + 1), 'every id once, in order, across pages');

  // Similarity: a key's points only, each with its key.
  const near7 = await api.ok(t, 'POST', QUERY, { params: at(C), body: { query: [-1, -1], limit: 100, shard_key: 7 } });
  t.is(near7.points.length, 10);
  t.true(near7.points.every((p: { shard_key: unknown }) => p.shard_key === 7));
  const nearAll = await api.ok(t, 'POST', QUERY, { params: at(C), body: { query: [1, 1], limit: 100 } });
  t.is(nearAll.points.length, 40, 'ids under two keys come back once');
  t.is(nearAll.points.filter((p: { shard_key: unknown }) => p.shard_key === 'acme').length, 40, 'at their best score: acme\'s points point the query\'s way');
  const legacy = await api.ok(t, 'POST', SEARCH, { params: at(C), body: { vector: [1, 1], limit: 3, shard_key: 7, with_payload: true } });
  t.true(legacy.every((p: { payload: { owner: string } }) => p.payload.owner === 'seven'));
  // A query by point id looks the id up under the same key (id 1 of key 7 points to [-1, -1]).
  const byId = await api.ok(t, 'POST', QUERY, { params: at(C), body: { query: 1, limit: 1, shard_key: 7, with_vector: true } });
  t.deepEqual(byId.points[0].vector, [-1, -1]);
  const rec = await api.ok(t, 'POST', RECOMMEND, { params: at(C), body: { positive: [1], limit: 2, shard_key: 'acme' } });
  t.true(rec.every((p: { shard_key: unknown }) => p.shard_key === 'acme'));
  const batch = await api.ok(t, 'POST', QUERY_BATCH, { params: at(C), body: { searches: [{ query: [1, 1], limit: 2, shard_key: 7 }, { query: [1, 1], limit: 2, shard_key: 'acme' }] } });
  t.deepEqual(batch.map((r: { points: Array<{ shard_key: unknown }> }) => r.points.map((p) => p.shard_key)), [[7, 7], ['acme', 'acme']]);

  // A target key with a fallback: the fallback while the target does not exist.
  const fb = await api.ok(t, 'POST', SCROLL, { params: at(C), body: { shard_key: { target: 'newcomer', fallback: 7 }, limit: 100 } });
  t.is(fb.points.length, 10);
  await api.ok(t, 'POST', PAYLOAD, { params: at(C), query: { wait: true }, body: { points: [1], payload: { via: 'fallback' }, shard_key: { target: 'newcomer', fallback: 7 } } });
  t.deepEqual((await api.ok(t, 'POST', POINTS, { params: at(C), body: { ids: [1], shard_key: 7 } }))[0].payload, { owner: 'seven', n: 1, via: 'fallback' });
  t.deepEqual((await api.ok(t, 'POST', POINTS, { params: at(C), body: { ids: [1], shard_key: 'acme' } }))[0].payload, { owner: 'acme', n: 1 }, 'the other key\'s point 1 is untouched');

  // Writes that name points check them under the key: id 33 exists under acme only.
  await api.error(t, 404, 'PUT', VECTORS, { params: at(C), query: { wait: true }, body: { points: [{ id: 33, vector: [2, 2] }], shard_key: 7 } }, 'Not found: No point with id 33 found');
  await api.ok(t, 'PUT', VECTORS, { params: at(C), query: { wait: true }, body: { points: [{ id: 33, vector: [2, 2] }], shard_key: 'acme' } });

  // A batch: each operation with its own key.
  await api.ok(t, 'POST', BATCH, {
    params: at(C),
    query: { wait: true },
    body: {
      operations: [
        { upsert: { points: [{ id: 100, vector: [1, 0], payload: { owner: 'acme' } }], shard_key: 'acme' } },
        { delete: { points: [10], shard_key: 7 } },
        { set_payload: { payload: { tagged: true }, filter: { must: [{ key: 'n', match: { value: 2 } }] }, shard_key: [7, 'acme'] } },
      ],
    },
  });
  t.is(await countOf(t, 'acme'), 41);
  t.is(await countOf(t, 7), 9);
  t.is(await countOf(t, undefined, { must: [{ key: 'tagged', match: { value: true } }] }), 2, 'the list of keys wrote to both');

  // A filter delete under one key leaves the other key's points alone.
  await api.ok(t, 'POST', DELETE, { params: at(C), query: { wait: true }, body: { filter: { must: [{ key: 'n', range: { lte: 5 } }] }, shard_key: 7 } });
  t.is(await countOf(t, 7), 4);
  t.is(await countOf(t, 'acme'), 41);
});

test.serial('dropping a key deletes its points and shards; the key can come back, empty, on new shard ids; keys survive a restart', async (t) => {
  t.true(await api.ok(t, 'POST', SHARDS_DELETE, { params: at(C), query: { timeout: 10 }, body: { shard_key: 7 } }));
  t.deepEqual(await keys(t), [{ key: 'acme' }]);
  t.is(await countOf(t), 41);
  t.deepEqual((await localShards(t)).map((s) => s.shard_id), [1, 2]);
  await api.error(t, 400, 'POST', COUNT, { params: at(C), body: { shard_key: 7 } }, 'Bad request: Shard key 7 not found');
  t.deepEqual((await fs.readdir(path.join(dir, 'storage', 'collections', C))).filter((e) => /^[0-9]+$/.test(e)).sort(), ['1', '2'], 'the dropped shard\'s folder is gone');

  // Again: a fresh shard id (3 was the dropped key's), no points.
  t.true(await api.ok(t, 'PUT', SHARDS, { params: at(C), body: { shard_key: 7, shards_number: 1 } }));
  const now = await localShards(t);
  t.deepEqual(now.map((s) => [s.shard_id, s.shard_key]), [
    [1, 'acme'],
    [2, 'acme'],
    [4, 7],
  ]);
  t.is(now[2].points_count, 0);
  t.is(await countOf(t, 7), 0);
  await api.ok(t, 'PUT', POINTS, { params: at(C), query: { wait: true }, body: { points: [{ id: 5, vector: [0, 1], payload: { owner: 'seven again' } }], shard_key: 7 } });

  await server!.stop('SIGTERM');
  await launch();
  t.deepEqual(await keys(t), [{ key: 'acme' }, { key: 7 }]);
  t.deepEqual((await localShards(t)).map((s) => [s.shard_id, s.shard_key]), [
    [1, 'acme'],
    [2, 'acme'],
    [4, 7],
  ]);
  t.is(await countOf(t, 'acme'), 41);
  t.deepEqual(await api.ok(t, 'POST', POINTS, { params: at(C), body: { ids: [5], shard_key: 7 } }), [{ id: 5, payload: { owner: 'seven again' }, shard_key: 7 }]);
  // The next key still gets an id never used before.
  t.true(await api.ok(t, 'PUT', SHARDS, { params: at(C), body: { shard_key: 'later', shards_number: 1 } }));
  t.deepEqual((await localShards(t)).map((s) => s.shard_id), [1, 2, 4, 5]);
  t.true(await api.ok(t, 'POST', SHARDS_DELETE, { params: at(C), body: { shard_key: 'later' } }));
});

test.serial('a collection snapshot carries the keys: recovered under another name, keys, shard ids and points come back; a keyed shard\'s snapshot goes back into its shard only', async (t) => {
  const snap = await api.ok(t, 'POST', SNAPSHOTS, { params: at(C), query: { wait: true } });
  const location = `file://${path.join(dir, 'snapshots', C, snap.name)}`;
  t.true(await api.ok(t, 'PUT', SNAPSHOT_RECOVER, { params: at('restored'), query: { wait: true }, body: { location, priority: 'snapshot' } }));
  const info = await api.ok(t, 'GET', COLLECTION, { params: at('restored') });
  t.is(info.config.params.sharding_method, 'custom');
  t.deepEqual(await keys(t, 'restored'), [{ key: 'acme' }, { key: 7 }]);
  const orig = await localShards(t);
  const back = await localShards(t, 'restored');
  t.deepEqual(back.map((s) => [s.shard_id, s.shard_key, s.points_count]), orig.map((s) => [s.shard_id, s.shard_key, s.points_count]));
  const acmeOrig = await api.ok(t, 'POST', SCROLL, { params: at(C), body: { shard_key: 'acme', limit: 100, with_vector: true } });
  const acmeBack = await api.ok(t, 'POST', SCROLL, { params: at('restored'), body: { shard_key: 'acme', limit: 100, with_vector: true } });
  t.deepEqual(acmeBack, acmeOrig);
  // The recovered collection takes keyed writes and new keys (ids after the snapshot's).
  await api.ok(t, 'PUT', POINTS, { params: at('restored'), query: { wait: true }, body: { points: [{ id: 77, vector: [1, 1] }], shard_key: 7 } });
  t.true(await api.ok(t, 'PUT', SHARDS, { params: at('restored'), body: { shard_key: 'fresh', shards_number: 1 } }));
  t.deepEqual((await localShards(t, 'restored')).map((s) => s.shard_id), [1, 2, 4, 5]);
  // Replica priority into a new collection: the configuration and its keys, no points.
  t.true(await api.ok(t, 'PUT', SNAPSHOT_RECOVER, { params: at('shape_only'), query: { wait: true }, body: { location, priority: 'replica' } }));
  t.deepEqual(await keys(t, 'shape_only'), [{ key: 'acme' }, { key: 7 }]);
  t.is((await api.ok(t, 'POST', COUNT, { params: at('shape_only'), body: {} })).count, 0);

  // Shard 4 (key 7): its snapshot goes back into shard 4, not into shard 1 (key acme).
  const s4 = await api.ok(t, 'POST', SHARD_SNAPSHOTS, { params: { ...at(C), shard_id: 4 }, query: { wait: true } });
  await api.ok(t, 'PUT', POINTS, { params: at(C), query: { wait: true }, body: { points: [{ id: 6, vector: [0, 1] }], shard_key: 7 } });
  t.is(await countOf(t, 7), 2);
  const s4Location = `file://${path.join(dir, 'snapshots', C, 'shards', '4', s4.name)}`;
  await api.error(t, 400, 'PUT', SHARD_SNAPSHOT_RECOVER, { params: { ...at(C), shard_id: 1 }, query: { wait: true }, body: { location: s4Location, priority: 'snapshot' } }, /^Wrong input: Snapshot is not compatible with the shard/);
  t.true(await api.ok(t, 'PUT', SHARD_SNAPSHOT_RECOVER, { params: { ...at(C), shard_id: 4 }, query: { wait: true }, body: { location: s4Location, priority: 'snapshot' } }));
  t.is(await countOf(t, 7), 1, 'shard 4 is back at its snapshot state');
  t.is(await countOf(t, 'acme'), 41, 'the other key is untouched');
});
