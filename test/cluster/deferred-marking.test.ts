/**
 * A Dead marking that consensus could not take (one peer of two down) outlives a restart
 * of the peer that deferred it: with replication factor 2 on two peers, the consensus
 * leader is killed, a write through the other peer goes on without it (acknowledged once
 * the marking is deferred: a follower without a leader has no log entry for it, which a
 * leader would have kept), then that peer is killed too before consensus could take the
 * marking. Both come back: it leaves the other's replica out and marks it Dead, and
 * recovery gives it the write. When the deferred marking lived in memory only, both
 * replicas came back Active and one never got the write.
 */

import test from 'ava';

import { Cluster, api, change, waitFor } from './harness';
import { digests, states } from './replicas';

const DIM = 4;
const vec = (i: number) => [Math.sin(i), Math.cos(i), Math.sin(i * 0.7 + 1), Math.cos(i * 1.3 + 2)];
const points = (ids: number[]) => ids.map((id) => ({ id, vector: vec(id), payload: { id } }));

test('a write acknowledged while the other peer of two was down reaches it after both peers were killed and restarted', async (t) => {
  const c = await Cluster.start(2);
  t.teardown(() => c.destroy());
  const created = await change(c.peers[0].url, 'PUT', '/collections/pm', { vectors: { size: DIM, distance: 'Dot' }, shard_number: 1, replication_factor: 2 });
  t.is(created.status, 200, JSON.stringify(created.body));
  await waitFor('both peers have both replicas Active', async () => {
    const st = await states(c, 0, 'pm').catch(() => ({}));
    return Object.values(st).length === 2 && Object.values(st).every((s) => s === 'Active');
  });
  const first = await api(c.peers[0].url, 'PUT', '/collections/pm/points?wait=true', { points: points([1, 2, 3, 4, 5]) });
  t.is(first.status, 200, JSON.stringify(first.body));

  const lost = await c.waitLeader();
  const survivor = 1 - lost;
  await c.kill(lost);
  // No majority: the marking of the lost peer's replica is deferred, and the write is acknowledged.
  const alone = await api(c.peers[survivor].url, 'PUT', '/collections/pm/points?wait=true', { points: points([100]) }, 60_000);
  t.is(alone.status, 200, JSON.stringify(alone.body));
  await c.kill(survivor);

  // Both come back (neither is ready alone: no majority).
  await Promise.all([c.startPeer(0), c.startPeer(1)]);
  await c.waitVoters(2);
  const d = await waitFor('both replicas identical and Active, the write acknowledged alone among them', async () => {
    const st = await states(c, survivor, 'pm').catch(() => null);
    if (st === null || Object.values(st).length !== 2 || !Object.values(st).every((s) => s === 'Active')) return false;
    const byPeer = (await digests(c, 'pm', 1)).get(0);
    if (byPeer === undefined || byPeer.size !== 2 || new Set(byPeer.values()).size !== 1) return false;
    return byPeer;
  });
  t.true([...d.values()].every((v) => v.startsWith('6:')), JSON.stringify([...d]));
});
