/**
 * Recovery by `wal_delta` on real peers: a replica that missed writes while its peer was
 * down gets only the operations it lacks (read from the source's WAL by clock tags), and
 * the transfer switches to `stream_records` when the WAL no longer holds them.
 */

import test from 'ava';

import { Cluster, api, change, waitFor } from './harness';
import { allActive, digests, metric } from './replicas';

function points(from: number, n: number, dim: number): Array<{ id: number; vector: number[]; payload: { i: number } }> {
  return Array.from({ length: n }, (_, k) => ({ id: from + k, vector: Array.from({ length: dim }, (_, d) => Math.sin(from + k + d)), payload: { i: from + k } }));
}

async function write(c: Cluster, i: number, name: string, from: number, n: number, dim: number): Promise<void> {
  for (let b = 0; b < n; b += 250) {
    const r = await api(c.peers[i].url, 'PUT', `/collections/${name}/points?wait=true`, { points: points(from + b, Math.min(250, n - b), dim) });
    if (r.status !== 200) throw new Error(`upsert: ${r.status} ${JSON.stringify(r.body)}`);
  }
}

/** Every peer's transfers by method, summed. */
async function outcomes(c: Cluster): Promise<{ walDelta: number; stream: number; switched: number }> {
  let walDelta = 0;
  let stream = 0;
  let switched = 0;
  for (const p of c.running()) {
    walDelta += await metric(p.url, 'cluster_transfers_finished_total', { method: 'wal_delta' });
    stream += await metric(p.url, 'cluster_transfers_finished_total', { method: 'stream_records' });
    switched += await metric(p.url, 'cluster_transfers_switched_total');
  }
  return { walDelta, stream, switched };
}

async function agree(t: { is: (a: unknown, b: unknown, m?: string) => void }, c: Cluster, name: string, shards: number, expected: number): Promise<void> {
  const d = await digests(c, name, shards);
  let total = 0;
  for (const [shard, byPeer] of d) {
    const values = [...byPeer.values()];
    t.is(new Set(values).size, 1, `shard ${shard}: replicas differ ${JSON.stringify([...byPeer])}`);
    total += Number(values[0].split(':')[0]);
  }
  t.is(total, expected);
}

test.serial('a replica that missed writes, deletes and payload changes comes back by wal_delta: only the missed operations, identical replicas', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const created = await change(c.peers[0].url, 'PUT', '/collections/w', { vectors: { size: 8, distance: 'Cosine' }, shard_number: 2, replication_factor: 3 });
  t.is(created.status, 200, JSON.stringify(created.body));
  await waitFor('both peers have every replica Active', () => allActive(c, 1, 'w'));
  await write(c, 0, 'w', 0, 3000, 8);

  await c.kill(2);
  await waitFor('the stopped peer\'s replicas are Dead', async () => {
    const r = await api(c.peers[0].url, 'GET', '/collections/w/cluster');
    return r.body.result.remote_shards.filter((s: { state: string }) => s.state === 'Dead').length === 2;
  });
  // What it misses: new points, overwritten points, deletes, payload changes.
  await write(c, 0, 'w', 2500, 1500, 8);
  t.is((await api(c.peers[0].url, 'POST', '/collections/w/points/delete?wait=true', { points: Array.from({ length: 200 }, (_, k) => k * 3) })).status, 200);
  t.is((await api(c.peers[0].url, 'POST', '/collections/w/points/payload?wait=true', { payload: { tag: 'late' }, filter: { must: [{ key: 'i', range: { gte: 1000, lt: 1300 } }] } })).status, 200);

  await c.startPeer(2);
  await waitFor('every replica Active again', async () => (await allActive(c, 0, 'w')) && (await allActive(c, 2, 'w')));
  await waitFor('both transfers counted', async () => (await outcomes(c)).walDelta >= 2);
  const o = await outcomes(c);
  t.is(o.walDelta, 2, JSON.stringify(o));
  t.is(o.switched, 0);
  t.is(o.stream, 0);
  await agree(t, c, 'w', 2, 4000 - 200);
  const late = await api(c.peers[2].url, 'POST', '/collections/w/points/count?consistency=1', { exact: true, filter: { must: [{ key: 'tag', match: { value: 'late' } }] } });
  t.is(late.body.result.count, 300);
});

test.serial('wal_delta switches to stream_records when the source\'s WAL no longer holds what the replica missed', async (t) => {
  // A 1 MB WAL segment: checkpoints drop the old segments while the peer is down.
  const c = await Cluster.start(3, { SERVICE__STORAGE__WAL__WAL_CAPACITY_MB: '1' });
  t.teardown(() => c.destroy());
  const created = await change(c.peers[0].url, 'PUT', '/collections/s', { vectors: { size: 256, distance: 'Dot' }, shard_number: 1, replication_factor: 3, optimizers_config: { flush_interval_sec: 1 } });
  t.is(created.status, 200, JSON.stringify(created.body));
  await waitFor('both peers have every replica Active', () => allActive(c, 1, 's'));
  await write(c, 0, 's', 0, 500, 256);
  const before = (await wal(c, 2)).last;
  await c.kill(2);
  await waitFor('the stopped peer\'s replica is Dead', async () => (await api(c.peers[0].url, 'GET', '/collections/s/cluster')).body.result.remote_shards.filter((s: { state: string }) => s.state === 'Dead').length === 1);
  // About 1 KiB per point: 6000 points fill several segments; then the checkpoints drop the oldest.
  await write(c, 0, 's', 500, 6000, 256);
  await waitFor('the source\'s WAL dropped what the stopped peer missed first', async () => (await wal(c, 0)).oldest > before + 1);
  await c.startPeer(2);
  await waitFor('the replica is Active again', async () => (await allActive(c, 0, 's')) && (await allActive(c, 2, 's')));
  await waitFor('the transfer counted', async () => (await outcomes(c)).stream >= 1);
  const o = await outcomes(c);
  t.is(o.switched, 1, JSON.stringify(o));
  t.is(o.stream, 1);
  t.is(o.walDelta, 0);
  await agree(t, c, 's', 1, 6500);
});

/** The operations peer `i`'s WAL of shard 0 still holds (ours: in the shard's digest). */
async function wal(c: Cluster, i: number): Promise<{ oldest: number; last: number }> {
  const r = await api(c.peers[i].url, 'GET', '/collections/s/shards/0/digest');
  return r.body.result.wal;
}
