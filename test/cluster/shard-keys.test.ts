/**
 * Custom sharding in cluster mode, on three real bin/quiver peers (test/cluster/harness.ts):
 * creating and dropping shard keys are consensus operations. Key A is placed on peer 0
 * only, key B on peers 1 and 2; every peer then shows the same keys and the same
 * placement, each shard with its key (GET /collections/{c}/cluster, checked against the
 * reference's schema); exactly the peers a key's shards are placed on hold local
 * replicas of them (their shard folders), also after a restart; a peer that holds a
 * key's only replica serves writes and reads of that key; refusals come back through
 * consensus with the reference's messages; dropping a key removes its shards everywhere.
 */

import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import test from 'ava';

import { spec } from '../support/contract';
import { Cluster, api, change, waitFor } from './harness';

const C = 'tenants';

interface View {
  peer_id: number;
  shard_count: number;
  local_shards: Array<{ shard_id: number; shard_key?: string | number; points_count: number; state: string }>;
  remote_shards: Array<{ shard_id: number; shard_key?: string | number; peer_id: number; state: string }>;
}

/** One peer's view of the placement as `shard:key@peer` entries, sorted. */
function placementOf(v: View): string[] {
  return [
    ...v.local_shards.map((s) => `${s.shard_id}:${String(s.shard_key)}@${v.peer_id}`),
    ...v.remote_shards.map((s) => `${s.shard_id}:${String(s.shard_key)}@${s.peer_id}`),
  ].sort();
}

/** The numbered shard folders of the collection on a peer's disk. */
async function shardFolders(c: Cluster, i: number): Promise<string[]> {
  const entries = await fs.readdir(path.join(c.peers[i].dir, 'storage', 'collections', C)).catch(() => [] as string[]);
  return entries.filter((e) => /^[0-9]+$/.test(e)).sort();
}

test.serial('three peers: shard keys through consensus, placed on the peers asked for, visible everywhere; local replicas follow; drop removes them', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const ids = await Promise.all([0, 1, 2].map(async (i) => String((await c.info(i)).peer_id)));
  const views = () => Promise.all([0, 1, 2].map(async (i) => (await api(c.peers[i].url, 'GET', `/collections/${C}/cluster`)).body.result as View));

  const created = await change(c.peers[1].url, 'PUT', `/collections/${C}`, { vectors: { size: 2, distance: 'Dot' }, sharding_method: 'custom' });
  t.is(created.status, 200, JSON.stringify(created.body));
  await waitFor('the collection on every peer', async () => (await Promise.all([0, 1, 2].map((i) => api(c.peers[i].url, 'GET', `/collections/${C}`)))).every((r) => r.status === 200));
  for (const v of await views()) t.is(v.shard_count, 0, 'a custom-sharded collection starts without shards');
  t.is((await api(c.peers[2].url, 'GET', `/collections/${C}`)).body.result.config.params.sharding_method, 'custom');

  // Key A on peer 0 only (asked through peer 2); key B on peers 1 and 2, two replicas of one shard (asked through peer 0).
  const a = await change(c.peers[2].url, 'PUT', `/collections/${C}/shards`, { shard_key: 'A', shards_number: 1, replication_factor: 1, placement: [Number(ids[0])] });
  t.is(a.status, 200, JSON.stringify(a.body));
  const b = await change(c.peers[0].url, 'PUT', `/collections/${C}/shards?timeout=20`, { shard_key: 'B', shards_number: 1, replication_factor: 2, placement: [Number(ids[1]), Number(ids[2])] });
  t.is(b.status, 200, JSON.stringify(b.body));

  const expected = [`1:A@${ids[0]}`, `2:B@${ids[1]}`, `2:B@${ids[2]}`].sort();
  await waitFor('every peer describes the same placement with keys', async () => (await views()).every((v) => placementOf(v).join() === expected.join()));
  for (let i = 0; i < 3; i++) {
    const r = await api(c.peers[i].url, 'GET', `/collections/${C}/cluster`);
    t.deepEqual(spec().validate('GET', '/collections/{collection_name}/cluster', r.status, r.body), [], `peer ${i}: the view matches the reference's schema`);
    const listed = await api(c.peers[i].url, 'GET', `/collections/${C}/shards`);
    t.deepEqual(listed.body.result, { shard_keys: [{ key: 'A' }, { key: 'B' }] }, `peer ${i} lists both keys`);
    t.deepEqual(spec().validate('GET', '/collections/{collection_name}/shards', listed.status, listed.body), []);
  }
  // Local replicas where the placement puts them, and nowhere else.
  await waitFor('shard folders where the placement puts them', async () => {
    const f = await Promise.all([0, 1, 2].map((i) => shardFolders(c, i)));
    return f[0].join() === '1' && f[1].join() === '2' && f[2].join() === '2';
  });

  // Refusals come back through consensus with the reference's messages, and change nothing.
  const dup = await change(c.peers[1].url, 'PUT', `/collections/${C}/shards`, { shard_key: 'A' });
  t.is(dup.status, 400);
  t.is(dup.body.status.error, 'Bad request: Sharding key "A" already exists for collection tenants');
  const stranger = await change(c.peers[1].url, 'PUT', `/collections/${C}/shards`, { shard_key: 'C', placement: [987654321] });
  t.is(stranger.status, 400);
  t.is(stranger.body.status.error, 'Bad request: Peer 987654321 does not exist');
  const unknown = await change(c.peers[2].url, 'POST', `/collections/${C}/shards/delete`, { shard_key: 'Z' });
  t.is(unknown.status, 400);
  t.is(unknown.body.status.error, 'Bad request: Sharding key "Z" does not exist for collection tenants');
  const noKey = await api(c.peers[0].url, 'PUT', `/collections/${C}/points?wait=true`, { points: [{ id: 1, vector: [1, 0] }] });
  t.is(noKey.status, 400);
  t.is(noKey.body.status.error, 'Wrong input: Shard key not specified');
  t.is((await api(c.peers[0].url, 'GET', `/collections/${C}/shards`)).body.result.shard_keys.length, 2);

  // Peer 0 holds key A's only replica: writes and reads of key A through it work.
  const points = Array.from({ length: 12 }, (_, k) => ({ id: k + 1, vector: [1, k], payload: { n: k + 1 } }));
  const put = await api(c.peers[0].url, 'PUT', `/collections/${C}/points?wait=true`, { points, shard_key: 'A' });
  t.is(put.status, 200, JSON.stringify(put.body));
  t.is((await api(c.peers[0].url, 'POST', `/collections/${C}/points/count`, { shard_key: 'A' })).body.result.count, 12);
  const got = await api(c.peers[0].url, 'POST', `/collections/${C}/points`, { ids: [3], shard_key: 'A' });
  t.deepEqual(got.body.result, [{ id: 3, payload: { n: 3 }, shard_key: 'A' }]);
  const near = await api(c.peers[0].url, 'POST', `/collections/${C}/points/query`, { query: [0, 1], limit: 2, shard_key: 'A' });
  t.deepEqual(near.body.result.points.map((p: { id: number; shard_key: string }) => `${p.id}:${p.shard_key}`), ['12:A', '11:A']);
  await waitFor('peer 0 counts key A\'s points in its local shard', async () => (await views())[0].local_shards.find((s) => s.shard_id === 1)?.points_count === 12);

  // Key B through peer 0, which holds none of its replicas: both replicas (peers 1 and 2) get the points.
  const bPoints = Array.from({ length: 8 }, (_, k) => ({ id: k + 1, vector: [k, 1], payload: { b: k + 1 } }));
  const putB = await api(c.peers[0].url, 'PUT', `/collections/${C}/points?wait=true`, { points: bPoints, shard_key: 'B' });
  t.is(putB.status, 200, JSON.stringify(putB.body));
  for (let i = 0; i < 3; i++) {
    t.is((await api(c.peers[i].url, 'POST', `/collections/${C}/points/count?consistency=all`, { shard_key: 'B' })).body.result.count, 8, `key B through peer ${i}`);
    t.is((await api(c.peers[i].url, 'POST', `/collections/${C}/points/count`, { shard_key: 'A' })).body.result.count, 12, `key A through peer ${i}`);
    // No key: every key's shards (the same id under two keys counts twice).
    t.is((await api(c.peers[i].url, 'POST', `/collections/${C}/points/count`, {})).body.result.count, 20, `every key through peer ${i}`);
    const b3 = await api(c.peers[i].url, 'POST', `/collections/${C}/points`, { ids: [3], shard_key: 'B' });
    t.deepEqual(b3.body.result, [{ id: 3, payload: { b: 3 }, shard_key: 'B' }]);
  }
  const dB = await Promise.all([1, 2].map(async (i) => (await api(c.peers[i].url, 'GET', `/collections/${C}/shards/2/digest`)).body.result));
  t.is(dB[0].points_count, 8);
  t.is(dB[0].digest, dB[1].digest, 'both replicas of key B hold the same points');

  // A restarted peer keeps the keys and its local replica.
  await c.kill(2, 'SIGTERM');
  await c.startPeer(2);
  await waitFor('peer 2 back with both keys and its replica of B', async () => {
    const r = await api(c.peers[2].url, 'GET', `/collections/${C}/cluster`);
    return r.status === 200 && placementOf(r.body.result as View).join() === expected.join() && (r.body.result as View).local_shards.map((s) => s.shard_id).join() === '2';
  });
  t.deepEqual(await shardFolders(c, 2), ['2']);

  // Dropping key A (through peer 1, which holds none of it): gone from every peer, with peer 0's replica and its points.
  const dropped = await change(c.peers[1].url, 'POST', `/collections/${C}/shards/delete`, { shard_key: 'A' });
  t.is(dropped.status, 200, JSON.stringify(dropped.body));
  t.is(dropped.body.result, true);
  const remaining = [`2:B@${ids[1]}`, `2:B@${ids[2]}`].sort();
  await waitFor('key A gone from every peer', async () => (await views()).every((v) => placementOf(v).join() === remaining.join()));
  await waitFor('peer 0 removed its replica of key A', async () => (await shardFolders(c, 0)).length === 0);
  for (let i = 0; i < 3; i++) t.deepEqual((await api(c.peers[i].url, 'GET', `/collections/${C}/shards`)).body.result, { shard_keys: [{ key: 'B' }] });
  const gone = await api(c.peers[0].url, 'POST', `/collections/${C}/points/count`, { shard_key: 'A' });
  t.is(gone.status, 400);
  t.is(gone.body.status.error, 'Bad request: Shard key "A" not found');

  // A key created again gets a shard id never used before, placed over every peer when no placement is given.
  t.is((await change(c.peers[2].url, 'PUT', `/collections/${C}/shards`, { shard_key: 'A', shards_number: 2, replication_factor: 1 })).status, 200);
  await waitFor('key A back on new shard ids 3 and 4', async () => {
    const v = await views();
    const shards = new Set(v.flatMap((x) => [...x.local_shards, ...x.remote_shards].filter((s) => s.shard_key === 'A').map((s) => s.shard_id)));
    return [...shards].sort().join() === '3,4' && v.every((x) => x.shard_count === 3);
  });
});
