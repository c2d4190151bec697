/**
 * Issue 18's vector forms in a cluster (test/cluster/harness.ts, 2 peers, 2 shards, RF 2):
 * a named vector (dense or sparse) added and removed through consensus reaches every
 * peer's config and replicas; multivector lists of several lengths and uint8 vectors travel the replica
 * wire (every replica holds the same content: equal digests), and a query through either
 * peer with `consistency=all` scores them by MaxSim as a brute force here does.
 */

import test from 'ava';

import { Cluster, api, change, waitFor } from './harness';
import { allActiveEverywhere, digests } from './replicas';

const DIM = 3;

function maxSim(q: number[][], doc: number[][]): number {
  return q.reduce((s, qv) => s + Math.max(...doc.map((dv) => dv.reduce((a, x, i) => a + x * qv[i], 0))), 0);
}

test.serial('2 peers: named vectors added and removed through consensus; multivectors and uint8 replicate and score as MaxSim', async (t) => {
  const c = await Cluster.start(2);
  t.teardown(() => c.destroy());
  const created = await change(c.peers[0].url, 'PUT', '/collections/v', { vectors: { a: { size: DIM, distance: 'Dot' } }, shard_number: 2, replication_factor: 2 });
  t.is(created.status, 200, JSON.stringify(created.body));
  await waitFor('every replica Active', () => allActiveEverywhere(c, 'v'));

  // Added through peer 1: every peer's config has it.
  for (const [name, body] of [
    ['m', { dense: { size: DIM, distance: 'Dot', multivector_config: { comparator: 'max_sim' } } }],
    ['u', { dense: { size: DIM, distance: 'Euclid', datatype: 'uint8' } }],
    ['s', { sparse: { modifier: 'none' } }],
  ] as const) {
    const r = await change(c.peers[1].url, 'PUT', `/collections/v/vectors/${name}?wait=true`, body);
    t.is(r.status, 200, JSON.stringify(r.body));
  }
  await waitFor('every peer has the new vectors', async () =>
    (await Promise.all(c.peers.map((p) => api(p.url, 'GET', '/collections/v')))).every((r) => r.status === 200 && Object.keys(r.body.result.config.params.vectors).sort().join() === 'a,m,u' && r.body.result.config.params.sparse_vectors?.s?.modifier === 'none'),
  );

  const docs = new Map<number, number[][]>();
  for (let id = 1; id <= 40; id++) docs.set(id, Array.from({ length: 1 + (id % 4) }, (_, r) => [Math.fround(Math.sin(id + r)), Math.fround(Math.cos(id * 2 + r)), Math.fround(((id + r) % 5) - 2 + id * 0.01 + r * 0.001)]));
  const points = [...docs].map(([id, m]) => ({ id, vector: { a: m[0], m, u: [id * 10.6, -3, 300], s: { indices: [id % 3], values: [id] } } }));
  const up = await change(c.peers[0].url, 'PUT', '/collections/v/points?wait=true', { points });
  t.is(up.status, 200, JSON.stringify(up.body));

  // Replicas agree, shard by shard.
  const d = await digests(c, 'v', 2);
  t.is(d.size, 2);
  for (const [shard, byPeer] of d) t.is(new Set(byPeer.values()).size, 1, `shard ${shard}: ${JSON.stringify([...byPeer])}`);

  const q = [
    [1, 0, 0],
    [0, 0, 1],
  ];
  const want = [...docs].map(([id, m]) => ({ id, score: maxSim(q, m) })).sort((x, y) => y.score - x.score || x.id - y.id).slice(0, 5);
  for (const p of c.peers) {
    const r = await api(p.url, 'POST', '/collections/v/points/query?consistency=all', { query: q, using: 'm', limit: 5 });
    t.is(r.status, 200, JSON.stringify(r.body));
    t.deepEqual(
      r.body.result.points.map((h: { id: number }) => h.id),
      want.map((w) => w.id),
    );
    r.body.result.points.forEach((h: { score: number }, i: number) => t.true(Math.abs(h.score - want[i].score) < 1e-4));
    const got = await api(p.url, 'POST', '/collections/v/points?consistency=all', { ids: [7], with_vector: ['m', 'u'] });
    t.deepEqual(got.body.result[0].vector.u, [74, 0, 255]);
    t.is(got.body.result[0].vector.m.length, docs.get(7)!.length);
    // The sparse name added through consensus takes writes on every replica: dimension 1 holds ids 1, 4, 7, ...
    const sp = await api(p.url, 'POST', '/collections/v/points/query?consistency=all', { query: { indices: [1], values: [1] }, using: 's', limit: 3 });
    t.deepEqual(
      sp.body.result.points.map((h: { id: number; score: number }) => [h.id, h.score]),
      [
        [40, 40],
        [37, 37],
        [34, 34],
      ],
    );
  }

  // Removed through peer 0: gone from every peer's config and points.
  const del = await change(c.peers[0].url, 'DELETE', '/collections/v/vectors/a?wait=true');
  t.is(del.status, 200, JSON.stringify(del.body));
  const delSparse = await change(c.peers[1].url, 'DELETE', '/collections/v/vectors/s?wait=true');
  t.is(delSparse.status, 200, JSON.stringify(delSparse.body));
  await waitFor('every peer dropped `a`', async () =>
    (await Promise.all(c.peers.map((p) => api(p.url, 'GET', '/collections/v')))).every((r) => r.status === 200 && Object.keys(r.body.result.config.params.vectors).sort().join() === 'm,u' && r.body.result.config.params.sparse_vectors === undefined),
  );
  for (const p of c.peers) {
    const got = await api(p.url, 'POST', '/collections/v/points?consistency=all', { ids: [7], with_vector: true });
    t.deepEqual(Object.keys(got.body.result[0].vector).sort(), ['m', 'u']);
  }
});
