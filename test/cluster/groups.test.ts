/**
 * Grouped queries in a cluster of two real peers, with the shards of one collection on
 * both: through either peer, the groups equal the test's brute-force grouping of the
 * exact ranking (test/support/groups.ts), so the rounds cross the replica wire with their
 * exclusion filters as they run locally; `with_lookup` reads points on both peers.
 */

import test from 'ava';

import { bruteForceGroups, groupsShape, type RankedPoint } from '../support/groups';
import { mulberry32 } from '../support/rng';
import { Cluster } from './harness';
import { call, createCollection, DIM, shardReplicas } from './transfer-support';

let cluster: Cluster | null = null;

test.before(async () => {
  cluster = await Cluster.start(2);
});

test.after.always(async () => {
  await cluster?.destroy();
});

test('groups across shards on two peers equal the brute-force grouping, through either peer; with_lookup reads both', async (t) => {
  const c = cluster!;
  const name = 'groups_cluster';
  await createCollection(c, name, { shard_number: 4, replication_factor: 1 });
  const holders = new Set<string>();
  for (let s = 0; s < 4; s++) for (const peer of Object.keys(await shardReplicas(c, 0, name, s))) holders.add(peer);
  t.is(holders.size, 2, 'the shards are on both peers');

  const r = mulberry32(4242);
  const vec = () => Array.from({ length: DIM }, () => r() * 2 - 1);
  const G = ['a', 'b', 'c', 8, 9, 11, 12];
  const pick = () => G[Math.floor(r() * G.length)];
  const points = [];
  for (let id = 1; id <= 200; id++) {
    const x = r();
    const g = x < 0.6 ? pick() : x < 0.85 ? [pick(), pick()] : x < 0.92 ? 2.5 : undefined;
    const pid = id % 7 === 0 ? `00000000-0000-4000-8000-${String(id).padStart(12, '0')}` : id;
    points.push({ id: pid, vector: vec(), payload: g === undefined ? { n: id } : { g, n: id } });
  }
  const up = await call(c.peers[0].url, 'PUT', `/collections/${name}/points?wait=true`, { points });
  t.is(up.status, 200, JSON.stringify(up.body));

  for (let round = 0; round < 3; round++) {
    const q = vec();
    const cases = [
      { limit: 3, group_size: 4 },
      { limit: 20, group_size: 30 },
    ];
    for (const p of c.peers) {
      const ranked = await call(p.url, 'POST', `/collections/${name}/points/query`, { query: q, limit: 1000, with_payload: true, params: { exact: true } });
      t.is(ranked.status, 200, JSON.stringify(ranked.body));
      const ranking = ranked.body.result.points as RankedPoint[];
      t.is(ranking.length, 200);
      for (const k of cases) {
        const got = await call(p.url, 'POST', `/collections/${name}/points/query/groups`, { query: q, group_by: 'g', params: { exact: true }, ...k });
        t.is(got.status, 200, JSON.stringify(got.body));
        t.deepEqual(groupsShape(got.body.result.groups), bruteForceGroups(ranking, 'g', k.limit, k.group_size), `peer ${p.index}, ${JSON.stringify(k)}`);
      }
      // Group values 8, 9, 11 and 12 are ids of points of the same collection, wherever their shard is.
      const lk = await call(p.url, 'POST', `/collections/${name}/points/search/groups`, { vector: q, group_by: 'g', limit: 10, group_size: 1, with_lookup: { collection: name, with_payload: ['n'] } });
      t.is(lk.status, 200, JSON.stringify(lk.body));
      for (const g of lk.body.result.groups as Array<{ id: string | number; lookup?: { id: number; payload: unknown } }>) {
        if (typeof g.id === 'number') t.deepEqual(g.lookup, { id: g.id, payload: { n: g.id } }, `lookup of ${g.id} through peer ${p.index}`);
        else t.is(g.lookup, undefined);
      }
    }
  }
});
