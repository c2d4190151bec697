/**
 * Snapshot recovery in cluster mode on real peers (ts/snapshots/cluster.ts):
 *
 * - SPEC 3.3b "No copies of data in the cluster": three peers, replication factor 1, a
 *   collection snapshot on every peer; one peer is killed for good and removed with
 *   force; its shard has no replica left (reads and writes that need it answer 503); a
 *   new empty peer joins with --bootstrap, the dead peer's snapshot is uploaded to it,
 *   and the collection is whole again: every point, payload and search.
 * - The priorities on a replicated shard (SPEC 2.5): `snapshot` makes the other replicas
 *   follow the snapshot, `replica` keeps or copies the existing data, `no_sync` restores
 *   this replica alone.
 * - `--snapshot` and `--storage-snapshot` on the first peer of a new cluster (the
 *   collections and alias through consensus), refused on a peer that joins.
 */

import test from 'ava';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import { startServer } from '../crash/server';
import { Cluster, api, change, waitFor } from './harness';
import { allActive, allActiveEverywhere, digests, scrollAll, states } from './replicas';

const DIM = 4;

function points(from: number, n: number, tag = 'a'): Array<{ id: number; vector: number[]; payload: { i: number; tag: string } }> {
  return Array.from({ length: n }, (_, k) => {
    const i = from + k;
    return { id: i, vector: [Math.sin(i), Math.cos(i), 1 + (i % 5), (i % 7) - 3], payload: { i, tag } };
  });
}

/** Uploads `file` as a snapshot (multipart part `snapshot`) to `route` of `url`. */
async function upload(url: string, route: string, file: string): Promise<{ status: number; body: any }> {
  const form = new FormData();
  form.append('snapshot', new Blob([new Uint8Array(await fs.readFile(file))], { type: 'application/octet-stream' }), path.basename(file));
  const res = await fetch(url + route, { method: 'POST', body: form, headers: { connection: 'close' }, signal: AbortSignal.timeout(60_000) });
  const text = await res.text();
  try {
    return { status: res.status, body: JSON.parse(text) };
  } catch {
    return { status: res.status, body: text };
  }
}

const errorOf = (r: { body: any }) => String(r.body?.status?.error ?? r.body);

/** Peer index → its peer id. */
async function peerIds(c: Cluster, among: number[]): Promise<Map<number, string>> {
  const out = new Map<number, string>();
  for (const i of among) out.set(i, String((await c.info(i)).peer_id));
  return out;
}

/** Every point of `name` (id → payload) through `url`. */
async function contents(url: string, name: string, q = ''): Promise<Map<number, unknown>> {
  return new Map((await scrollAll(url, name, q)).map((p) => [p.id, p.payload]));
}

test.serial('no copies of data in the cluster: a peer lost for good is removed, a new peer recovers its shard from the dead peer\'s snapshot, and the collection is whole again', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const created = await change(c.peers[0].url, 'PUT', '/collections/lost', { vectors: { size: DIM, distance: 'Euclid' }, shard_number: 3, replication_factor: 1 });
  t.is(created.status, 200, JSON.stringify(created.body));
  await waitFor('every peer has the collection', async () => (await Promise.all(c.peers.map((p) => api(p.url, 'GET', '/collections/lost')))).every((r) => r.status === 200));
  const all = points(0, 600);
  for (let b = 0; b < all.length; b += 200) {
    const r = await api(c.peers[b % 3].url, 'PUT', '/collections/lost/points?wait=true', { points: all.slice(b, b + 200) });
    t.is(r.status, 200, JSON.stringify(r.body));
  }
  await change(c.peers[1].url, 'PUT', '/collections/lost/index?wait=true', { field_name: 'tag', field_schema: 'keyword' });

  // A collection snapshot on every peer: each holds that peer's replicas.
  const snapshotOf = new Map<number, string>();
  for (const i of [0, 1, 2]) {
    const r = await api(c.peers[i].url, 'POST', '/collections/lost/snapshots');
    t.is(r.status, 200, JSON.stringify(r.body));
    snapshotOf.set(i, path.join(c.peers[i].dir, 'snapshots', 'lost', r.body.result.name));
  }
  const ids = await peerIds(c, [0, 1, 2]);
  const before = await states(c, 0, 'lost');
  const victim = 2;
  const lostShards = Object.keys(before).filter((k) => k.endsWith(`/${ids.get(victim)}`)).map((k) => Number(k.split('/')[0]));
  t.is(lostShards.length, 1, JSON.stringify(before));

  // The peer is lost for good and removed: its shard has no replica left.
  await c.kill(victim);
  const removed = await change(c.peers[0].url, 'DELETE', `/cluster/peer/${ids.get(victim)}?force=true`);
  t.is(removed.status, 200, JSON.stringify(removed.body));
  await waitFor('the shard has no replica, seen from both peers', async () => {
    for (const i of [0, 1]) if (Object.keys(await states(c, i, 'lost')).some((k) => k.startsWith(`${lostShards[0]}/`))) return false;
    return true;
  });
  const count = await api(c.peers[0].url, 'POST', '/collections/lost/points/count', { exact: true });
  t.is(count.status, 503, JSON.stringify(count.body));
  t.regex(errorOf(count), new RegExp(`shard ${lostShards[0]} of collection \`lost\` has no replica that serves reads \\(it has no replica left: .*recover the shard from a snapshot\\)`));
  const write = await api(c.peers[1].url, 'PUT', '/collections/lost/points?wait=true', { points: points(10_000, 30) });
  t.is(write.status, 503, JSON.stringify(write.body));
  t.regex(errorOf(write), /has no replica that accepts writes/);
  const query = await api(c.peers[1].url, 'POST', '/collections/lost/points/query', { query: all[0].vector, limit: 3 });
  t.is(query.status, 503);

  // A new, empty peer joins and recovers the lost shard from the dead peer's snapshot.
  await c.addPeerSlot();
  await c.startPeer(3, 0);
  await c.waitVoters(3);
  await waitFor('the new peer has the collection', async () => (await api(c.peers[3].url, 'GET', '/collections/lost')).status === 200);
  const up = await upload(c.peers[3].url, '/collections/lost/snapshots/upload', snapshotOf.get(victim)!);
  t.is(up.status, 200, JSON.stringify(up.body));
  t.is(up.body.result, true);
  const newId = String((await c.info(3)).peer_id);
  t.deepEqual(await states(c, 3, 'lost'), { ...Object.fromEntries(Object.entries(before).filter(([k]) => !k.endsWith(`/${ids.get(victim)}`))), [`${lostShards[0]}/${newId}`]: 'Active' });
  await waitFor('every peer sees every replica Active', async () => (await Promise.all([0, 1, 3].map((i) => allActive(c, i, 'lost')))).every(Boolean));

  // Operational: every point and payload, through every peer; searches; writes.
  const expected = new Map(all.map((p) => [p.id, p.payload]));
  for (const i of [0, 1, 3]) t.deepEqual(await contents(c.peers[i].url, 'lost'), expected, `through peer ${i}`);
  for (const p of [all[7], all[301], all[599]]) {
    const q = await api(c.peers[0].url, 'POST', '/collections/lost/points/query', { query: p.vector, limit: 1, with_payload: true });
    t.is(q.status, 200, JSON.stringify(q.body));
    t.is(q.body.result.points[0].id, p.id);
  }
  const filtered = await api(c.peers[3].url, 'POST', '/collections/lost/points/count', { exact: true, filter: { must: [{ key: 'tag', match: { value: 'a' } }] } });
  t.is(filtered.body.result.count, all.length);
  const more = await api(c.peers[1].url, 'PUT', '/collections/lost/points?wait=true', { points: points(10_000, 30) });
  t.is(more.status, 200, JSON.stringify(more.body));
  t.is((await api(c.peers[3].url, 'POST', '/collections/lost/points/count', { exact: true })).body.result.count, all.length + 30);

  // Refusals: an incompatible snapshot (another collection's shard count), a shard the collection lacks.
  const created2 = await change(c.peers[0].url, 'PUT', '/collections/other', { vectors: { size: DIM, distance: 'Euclid' }, shard_number: 2, replication_factor: 1 });
  t.is(created2.status, 200);
  const bad = await upload(c.peers[0].url, '/collections/other/snapshots/upload', snapshotOf.get(0)!);
  t.is(bad.status, 400, JSON.stringify(bad.body));
  t.regex(errorOf(bad), /Snapshot is not compatible with existing collection: the snapshot has 3 shards, the collection 2/);
  const noShard = await api(c.peers[0].url, 'PUT', '/collections/lost/shards/7/snapshots/recover', { location: `file://${snapshotOf.get(0)}` });
  t.is(noShard.status, 404, JSON.stringify(noShard.body));
  const missing = await api(c.peers[0].url, 'PUT', '/collections/lost/snapshots/recover', { location: `file://${path.join(c.peers[0].dir, 'snapshots', 'nowhere.snapshot')}` });
  t.is(missing.status, 400, JSON.stringify(missing.body));
  t.regex(errorOf(missing), /does not exist/);
});

test.serial('priorities on a replicated shard: snapshot makes the other replicas follow it, replica keeps or copies the existing data, no_sync restores one replica alone', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  t.is((await change(c.peers[0].url, 'PUT', '/collections/p', { vectors: { size: DIM, distance: 'Dot' }, shard_number: 1, replication_factor: 2 })).status, 200);
  await waitFor('every peer has the collection', async () => (await Promise.all(c.peers.map((p) => api(p.url, 'GET', '/collections/p')))).every((r) => r.status === 200));
  const ids = await peerIds(c, [0, 1, 2]);
  const holders = Object.keys(await states(c, 0, 'p')).map((k) => k.split('/')[1]);
  const [h1, h2] = holders.map((id) => [...ids].find(([, v]) => v === id)![0]);
  const other = [0, 1, 2].find((i) => i !== h1 && i !== h2)!;
  t.is((await api(c.peers[0].url, 'PUT', '/collections/p/points?wait=true', { points: points(0, 100) })).status, 200);
  const snap = await api(c.peers[h1].url, 'POST', '/collections/p/shards/0/snapshots');
  t.is(snap.status, 200, JSON.stringify(snap.body));
  const file = path.join(c.peers[h1].dir, 'snapshots', 'p', 'shards', '0', snap.body.result.name);
  t.is((await api(c.peers[0].url, 'PUT', '/collections/p/points?wait=true', { points: points(100, 100, 'b') })).status, 200);

  // snapshot: h1's replica takes the snapshot's 100 points; h2's follows it (Dead, then recovered from h1).
  const bySnapshot = await api(c.peers[h1].url, 'PUT', '/collections/p/shards/0/snapshots/recover', { location: `file://${file}`, priority: 'snapshot' });
  t.is(bySnapshot.status, 200, JSON.stringify(bySnapshot.body));
  await waitFor('both replicas Active again as every peer sees them, with the snapshot\'s content', async () => {
    if (!(await allActiveEverywhere(c, 'p'))) return false;
    const d = (await digests(c, 'p', 1)).get(0)!;
    return d.size === 2 && new Set(d.values()).size === 1 && [...d.values()][0].startsWith('100:');
  });
  t.is((await api(c.peers[other].url, 'POST', '/collections/p/points/count?consistency=all', { exact: true })).body.result.count, 100);

  // replica: the active replica on h1 is kept as it is; a peer without a replica gets one, copied from the existing data.
  t.is((await api(c.peers[0].url, 'PUT', '/collections/p/points?wait=true', { points: points(100, 100, 'c') })).status, 200);
  const kept = await api(c.peers[h1].url, 'PUT', '/collections/p/shards/0/snapshots/recover', { location: `file://${file}` });
  t.is(kept.status, 200, JSON.stringify(kept.body));
  t.is((await api(c.peers[h1].url, 'GET', '/collections/p/shards/0/digest')).body.result.points_count, 200);
  const copy = path.join(c.peers[other].dir, 'snapshots', 'copied.snapshot');
  await fs.mkdir(path.dirname(copy), { recursive: true });
  await fs.copyFile(file, copy);
  const byReplica = await api(c.peers[other].url, 'PUT', '/collections/p/shards/0/snapshots/recover', { location: `file://${copy}`, priority: 'replica' });
  t.is(byReplica.status, 200, JSON.stringify(byReplica.body));
  await waitFor('three Active replicas as every peer sees them, identical, with the existing 200 points', async () => {
    if (!(await allActiveEverywhere(c, 'p'))) return false;
    const d = (await digests(c, 'p', 1)).get(0)!;
    return d.size === 3 && new Set(d.values()).size === 1 && [...d.values()][0].startsWith('200:');
  });
  const got = await contents(c.peers[other].url, 'p', '?consistency=all');
  t.deepEqual(got.get(150), { i: 150, tag: 'c' });

  // no_sync: h2's replica takes the snapshot alone; the others keep theirs (replicas now differ: the misuse the SPEC warns of).
  const noSync = await upload(c.peers[h2].url, '/collections/p/shards/0/snapshots/upload?priority=no_sync', file);
  t.is(noSync.status, 200, JSON.stringify(noSync.body));
  const after = await digests(c, 'p', 1);
  t.true(after.get(0)!.get(ids.get(h2)!)!.startsWith('100:'));
  t.true(after.get(0)!.get(ids.get(h1)!)!.startsWith('200:'));
  t.true(await allActive(c, h2, 'p'));

  // A collection that does not exist is created through consensus from the snapshot's
  // configuration: with priority snapshot this peer's replica takes the data and the
  // other replica (replication_factor 2) follows it; with replica it stays empty (SPEC 2.5).
  const whole = await api(c.peers[h1].url, 'POST', '/collections/p/snapshots');
  t.is(whole.status, 200);
  const wholeCopy = path.join(c.peers[other].dir, 'snapshots', 'whole.snapshot');
  await fs.copyFile(path.join(c.peers[h1].dir, 'snapshots', 'p', whole.body.result.name), wholeCopy);
  const fresh = await api(c.peers[other].url, 'PUT', '/collections/fresh/snapshots/recover', { location: `file://${wholeCopy}`, priority: 'snapshot' });
  t.is(fresh.status, 200, JSON.stringify(fresh.body));
  await waitFor('two Active replicas of the new collection, identical, with the snapshot\'s 200 points', async () => {
    if (!(await allActive(c, h1, 'fresh'))) return false;
    const d = (await digests(c, 'fresh', 1)).get(0)!;
    return d.size === 2 && d.has(ids.get(other)!) && new Set(d.values()).size === 1 && [...d.values()][0].startsWith('200:');
  });
  const empty = await api(c.peers[other].url, 'PUT', '/collections/empty/snapshots/recover', { location: `file://${wholeCopy}` });
  t.is(empty.status, 200, JSON.stringify(empty.body));
  const info = await api(c.peers[h2].url, 'GET', '/collections/empty');
  t.is(info.status, 200);
  t.deepEqual(info.body.result.config.params.vectors, { size: DIM, distance: 'Dot' });
  t.is((await api(c.peers[h2].url, 'POST', '/collections/empty/points/count', { exact: true })).body.result.count, 0);
});

test.serial('--snapshot and --storage-snapshot on the first peer of a new cluster: collections and aliases through consensus; refused on a peer that joins', async (t) => {
  // Snapshots made on a single node.
  const c = await Cluster.prepare(3);
  t.teardown(() => c.destroy());
  const single = path.join(c.root, 'single');
  await fs.mkdir(single, { recursive: true });
  const s = await startServer(single);
  const vectors = { size: DIM, distance: 'Cosine' };
  t.is((await api(s.url, 'PUT', '/collections/src', { vectors, shard_number: 2 })).status, 200);
  t.is((await api(s.url, 'PUT', '/collections/src/points?wait=true', { points: points(0, 150) })).status, 200);
  t.is((await api(s.url, 'PUT', '/collections/keyed', { vectors, sharding_method: 'custom' })).status, 200);
  t.is((await api(s.url, 'PUT', '/collections/keyed/shards', { shard_key: 'x' })).status, 200);
  t.is((await api(s.url, 'PUT', '/collections/keyed/points?wait=true', { points: points(0, 40), shard_key: 'x' })).status, 200);
  t.is((await api(s.url, 'POST', '/collections/aliases', { actions: [{ create_alias: { collection_name: 'keyed', alias_name: 'k' } }] })).status, 200);
  const one = await api(s.url, 'POST', '/collections/src/snapshots');
  const full = await api(s.url, 'POST', '/snapshots');
  t.is(full.status, 200);
  await s.stop('SIGTERM');
  const oneFile = path.join(single, 'snapshots', 'src', one.body.result.name);
  const fullFile = path.join(single, 'snapshots', full.body.result.name);

  await c.startPeer(0, null, {}, ['--snapshot', `${oneFile}:copy`, '--storage-snapshot', fullFile]);
  await c.startPeer(1, 0);
  await c.waitVoters(2);
  for (const i of [0, 1]) {
    await waitFor(`peer ${i} has the recovered collections`, async () => {
      const r = await api(c.peers[i].url, 'GET', '/collections');
      return r.status === 200 && r.body.result.collections.length === 3;
    });
    t.is((await api(c.peers[i].url, 'POST', '/collections/copy/points/count', { exact: true })).body.result.count, 150);
    t.is((await api(c.peers[i].url, 'POST', '/collections/src/points/count', { exact: true })).body.result.count, 150);
    t.is((await api(c.peers[i].url, 'POST', '/collections/k/points/count', { exact: true, shard_key: 'x' })).body.result.count, 40);
    t.deepEqual((await api(c.peers[i].url, 'GET', '/collections/keyed/shards')).body.result.shard_keys, [{ key: 'x' }]);
  }
  // Placed through consensus: every shard's replica on the first peer, Active.
  const id0 = String((await c.info(0)).peer_id);
  t.deepEqual(await states(c, 1, 'copy'), { [`0/${id0}`]: 'Active', [`1/${id0}`]: 'Active' });
  t.deepEqual(await contents(c.peers[1].url, 'copy'), new Map(points(0, 150).map((p) => [p.id, p.payload])));

  // A peer that joins may not recover at start-up.
  const refused = await c.startPeer(2, 0, {}, ['--snapshot', `${oneFile}:again`]).then(
    () => null,
    (err: Error) => err.message,
  );
  t.truthy(refused);
  t.regex(refused!, /--snapshot and --storage-snapshot cannot be used on a peer that joins a cluster/);
});
