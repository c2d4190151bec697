/**
 * Sparse vectors in a cluster of two real peers: writes reach the remote replica over
 * the replica wire, queries through either peer merge the local and the remote shard
 * exactly as the brute-force scorer says (ties by id), and each shard transfer method
 * (stream_records, snapshot, wal_delta) brings the sparse vectors to the new replica
 * (same digest as its source, which covers sparse vectors; queries through the target
 * peer, now local, still exact).
 */

import test from 'ava';

import { mulberry32 } from '../support/rng';
import { bruteForce, randomSparse, type Sparse } from '../support/sparse';
import { Cluster } from './harness';
import { call, clusterOp, createCollection, peerIds, sameContent, shardReplicas, transferEnd, waitSettledEverywhere } from './transfer-support';

let cluster: Cluster | null = null;

test.before(async () => {
  cluster = await Cluster.start(2);
});

test.after.always(async () => {
  await cluster?.destroy();
});

test('sparse vectors across peers: remote writes and reads, and every transfer method', async (t) => {
  const c = cluster!;
  const ids = await peerIds(c);
  const r = mulberry32(99);
  const store = new Map<number, Sparse>();
  const name = 'sparse_cluster';
  await createCollection(c, name, { sparse_vectors: { text: {} }, shard_number: 3, replication_factor: 1 });
  const points = [];
  for (let id = 1; id <= 300; id++) {
    const v = randomSparse(r, 10, 80);
    store.set(id, v);
    points.push({ id, vector: { '': [1, 0, 0, 0], text: v } });
  }
  // The unnamed dense vector and a sparse one: the dense one goes under "".
  const up = await call(c.peers[0].url, 'PUT', `/collections/${name}/points?wait=true`, { points });
  t.is(up.status, 200, JSON.stringify(up.body));
  const check = async (label: string) => {
    for (const p of c.peers) {
      for (let i = 0; i < 6; i++) {
        const q = randomSparse(r, 5, 80);
        const got = await call(p.url, 'POST', `/collections/${name}/points/query`, { query: q, using: 'text', limit: 8 });
        t.is(got.status, 200, JSON.stringify(got.body));
        t.deepEqual(
          got.body.result.points.map((x: { id: number; score: number }) => ({ id: x.id, score: x.score })),
          bruteForce(store, q, 8),
          `${label}, through peer ${p.index}`,
        );
      }
    }
  };
  await check('one replica per shard');

  const methods = ['stream_records', 'snapshot', 'wal_delta'];
  for (let shard = 0; shard < 3; shard++) {
    const holder = Object.keys(await shardReplicas(c, 0, name, shard))[0];
    const to = ids.find((x) => x !== holder)!;
    const op = await clusterOp(c, 0, name, { replicate_shard: { shard_id: shard, from_peer_id: Number(holder), to_peer_id: Number(to), method: methods[shard] } });
    t.is(op.status, 200, JSON.stringify(op.body));
    t.is((await transferEnd(c, 0, name, shard, to))[to], 'Active', `${methods[shard]} of shard ${shard}`);
  }
  await waitSettledEverywhere(c, name);
  const counts = await sameContent(t, c, name, 3);
  t.deepEqual([...counts.values()], [2, 2, 2]);
  await check('two replicas per shard after the transfers');
});
