/**
 * `on_disk_payload` through a real bin/quiver: two collections with the same points,
 * one keeping payloads on disk and one in memory, answer retrieve, scroll with filters
 * on unindexed fields (checked against a filter applied by hand), and payload set /
 * overwrite / delete / clear alike; the on-disk one keeps everything across a restart
 * and a kill -9 after acknowledged writes, and through a snapshot round trip. The
 * collection info validates against the v1.18 document; gRPC creates an on-disk
 * collection and reads its payloads back.
 */

import test, { type ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { mapToJson } from '../../ts/api/grpc/convert/value';
import { QdrantGrpc } from '../grpc/client';
import { freePort, startServer, type Server } from '../crash/server';
import { spec } from '../support/contract';
import { call as callOn, ok as okOn } from './helpers';

type Json = Record<string, any>;

let dir: string;
let server: Server;
let grpcPort: number;

const N = 120;
const COLOURS = ['red', 'green', 'blue', 'violet'];
const payloadOf = (i: number): Json => ({ i, colour: COLOURS[i % 4], tags: i % 3 === 0 ? ['a', 'b'] : ['c'], body: `text of point ${i} `.repeat(8), nested: { even: i % 2 === 0 } });
const points = Array.from({ length: N }, (_, i) => ({ id: i + 1, vector: [i % 7, 1, (i * 13) % 5, 2], payload: payloadOf(i) }));

// Calls to the server of the moment (the test restarts it).
const call = (method: string, p: string, body?: unknown) => callOn(server, method, p, body);
const ok = (t: ExecutionContext, method: string, p: string, body?: unknown) => okOn(t, server, method, p, body);

async function all(t: ExecutionContext, c: string, filter?: unknown): Promise<Json[]> {
  const r = await ok(t, 'POST', `/collections/${c}/points/scroll`, { limit: 10_000, with_payload: true, with_vector: true, ...(filter ? { filter } : {}) });
  return r.points;
}

async function start(): Promise<Server> {
  return startServer(dir, { SERVICE__SERVICE__GRPC_PORT: String(grpcPort) });
}

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-ondisk-'));
  grpcPort = await freePort();
  server = await start();
});

test.after.always(async () => {
  if (server) await server.stop('SIGTERM');
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test.serial('on-disk and in-memory twins answer alike; filters on unindexed fields match a filter applied by hand; payload edits; restart; kill -9; snapshot', async (t) => {
  for (const [name, onDisk] of [['disk', true], ['mem', false]] as const) {
    await ok(t, 'PUT', `/collections/${name}`, { vectors: { size: 4, distance: 'Euclid' }, on_disk_payload: onDisk, shard_number: 2, optimizers_config: { flush_interval_sec: 1 } });
    await ok(t, 'PUT', `/collections/${name}/points?wait=true`, { points });
    // An indexed field as well: candidates from the index, the rest of the filter from disk.
    await ok(t, 'PUT', `/collections/${name}/index?wait=true`, { field_name: 'tags', field_schema: 'keyword' });
  }
  const info = await ok(t, 'GET', '/collections/disk');
  t.deepEqual(spec().validateSchema('CollectionInfo', info), []);
  t.is(info.config.params.on_disk_payload, true);
  t.is(info.points_count, N);

  // Retrieve.
  const got = await ok(t, 'POST', '/collections/disk/points', { ids: [1, 50, 120, 999], with_payload: true });
  t.deepEqual(
    got.map((p: Json) => [p.id, p.payload]).sort((a: any[], b: any[]) => a[0] - b[0]),
    [1, 50, 120].map((id) => [id, payloadOf(id - 1)]),
  );
  const part = await ok(t, 'POST', '/collections/disk/points', { ids: [5], with_payload: { include: ['nested.even', 'colour'] } });
  t.deepEqual(part[0].payload, { colour: COLOURS[4 % 4], nested: { even: true } });

  // Filters on unindexed fields (and one mixed with an indexed one), against a hand-applied filter.
  const cases: Array<[unknown, (p: Json) => boolean]> = [
    [{ must: [{ key: 'colour', match: { value: 'red' } }] }, (p) => p.colour === 'red'],
    [{ must: [{ key: 'i', range: { gte: 30, lt: 70 } }], must_not: [{ key: 'nested.even', match: { value: true } }] }, (p) => p.i >= 30 && p.i < 70 && !p.nested.even],
    [{ must: [{ key: 'tags', match: { value: 'a' } }, { key: 'colour', match: { any: ['green', 'violet'] } }] }, (p) => p.tags.includes('a') && ['green', 'violet'].includes(p.colour)],
  ];
  for (const [filter, pred] of cases) {
    const want = points.filter((p) => pred(p.payload)).map((p) => p.id);
    const disk = await all(t, 'disk', filter);
    t.deepEqual(
      disk.map((p) => p.id),
      want,
      JSON.stringify(filter),
    );
    t.deepEqual(disk, await all(t, 'mem', filter));
    const n = await ok(t, 'POST', '/collections/disk/points/count', { filter, exact: true });
    t.is(n.count, want.length);
    const hits = await ok(t, 'POST', '/collections/disk/points/query', { query: [0, 1, 0, 2], filter, limit: 5, with_payload: true });
    t.deepEqual(hits.points, (await ok(t, 'POST', '/collections/mem/points/query', { query: [0, 1, 0, 2], filter, limit: 5, with_payload: true })).points);
  }

  // Payload edits, to both twins.
  const edits: Array<[string, string, unknown]> = [
    ['POST', 'payload', { payload: { colour: 'black', extra: [1, 2] }, points: [1, 2, 3] }],
    ['POST', 'payload', { payload: { deep: true }, key: 'nested', filter: { must: [{ key: 'colour', match: { value: 'blue' } }] } }],
    ['PUT', 'payload', { payload: { replaced: 'yes' }, points: [10] }],
    ['POST', 'payload/delete', { keys: ['body', 'nested.even'], points: [11, 12] }],
    ['POST', 'payload/clear', { points: [13] }],
    ['POST', 'delete', { points: [14, 15] }],
  ];
  for (const [method, op, body] of edits) {
    for (const c of ['disk', 'mem']) await ok(t, method, `/collections/${c}/points/${op}?wait=true`, body);
  }
  const expected = await all(t, 'mem');
  t.deepEqual(await all(t, 'disk'), expected);
  t.deepEqual((await all(t, 'disk', { must: [{ key: 'colour', match: { value: 'black' } }] })).map((p) => p.id), [1, 2, 3]);
  t.deepEqual((await all(t, 'disk', { must: [{ key: 'nested.deep', match: { value: true } }] })).map((p) => p.id), points.filter((p) => p.payload.colour === 'blue' && ![1, 2, 3, 14, 15].includes(p.id)).map((p) => p.id));

  // Restart (clean) keeps everything.
  await server.stop('SIGTERM');
  server = await start();
  t.deepEqual(await all(t, 'disk'), expected, 'after a restart');

  // kill -9 right after acknowledged writes: none is lost.
  await ok(t, 'PUT', '/collections/disk/points?wait=true', { points: [{ id: 500, vector: [1, 1, 1, 1], payload: { late: 'upsert' } }] });
  await ok(t, 'POST', '/collections/disk/points/payload?wait=true', { payload: { late: 'set' }, points: [20] });
  await ok(t, 'PUT', '/collections/disk/points/payload?wait=true', { payload: { late: 'overwrite' }, points: [21] });
  const acknowledged = await all(t, 'disk');
  t.is(acknowledged.length, expected.length + 1);
  await server.stop('SIGKILL');
  server = await start();
  t.deepEqual(await all(t, 'disk'), acknowledged, 'after kill -9');

  // Snapshot round trip: into a new collection with on_disk_payload (from the snapshot's config).
  const snap = await ok(t, 'POST', '/collections/disk/snapshots?wait=true');
  // Writes after the snapshot are not in it.
  await ok(t, 'PUT', '/collections/disk/points?wait=true', { points: [{ id: 501, vector: [1, 1, 1, 1], payload: { after: 'snapshot' } }] });
  const location = `file://${path.join(dir, 'snapshots', 'disk', snap.name)}`;
  await ok(t, 'PUT', '/collections/restored/snapshots/recover?wait=true', { location, priority: 'snapshot' });
  t.deepEqual(await all(t, 'restored'), acknowledged, 'the recovered collection holds the snapshot');
  t.is((await ok(t, 'GET', '/collections/restored')).config.params.on_disk_payload, true);

  // Switching off on_disk_payload moves the payloads into memory; they stay the same.
  await ok(t, 'PATCH', '/collections/restored', { params: { on_disk_payload: false } });
  t.deepEqual(await all(t, 'restored'), acknowledged);
  await server.stop('SIGTERM');
  server = await start();
  t.deepEqual(await all(t, 'restored'), acknowledged, 'after the switch and a restart');
  t.is((await ok(t, 'GET', '/collections/restored')).config.params.on_disk_payload, false);
});

test.serial('gRPC: a collection created with on_disk_payload keeps payloads that Get and Scroll return as REST does', async (t) => {
  const g = new QdrantGrpc(`127.0.0.1:${grpcPort}`);
  try {
    const created = await g.call('Collections', 'Create', { collection_name: 'g_disk', vectors_config: { params: { size: '4', distance: 'Euclid' } }, on_disk_payload: true });
    t.is(created.result, true);
    const info = await g.call('Collections', 'Get', { collection_name: 'g_disk' });
    t.is(info.result.config.params.on_disk_payload, true);
    await ok(t, 'PUT', '/collections/g_disk/points?wait=true', { points: points.slice(0, 20) });
    const r = await g.call('Points', 'Get', { collection_name: 'g_disk', ids: [{ num: '3' }, { num: '7' }], with_payload: { enable: true } });
    const byId = new Map(r.result.map((p: Json) => [Number(p.id.num), mapToJson(p.payload, 'payload')]));
    t.deepEqual(byId.get(3), payloadOf(2));
    t.deepEqual(byId.get(7), payloadOf(6));
    const s = await g.call('Points', 'Scroll', {
      collection_name: 'g_disk',
      filter: { must: [{ field: { key: 'colour', match: { keyword: 'green' } } }] },
      with_payload: { enable: true },
      limit: 100,
    });
    t.deepEqual(
      s.result.map((p: Json) => Number(p.id.num)),
      points.slice(0, 20).filter((p) => p.payload.colour === 'green').map((p) => p.id),
    );
  } finally {
    g.close();
  }
});
