/**
 * A recovery's source keeps forwarding writes to the target for a grace period after the
 * transfer ends (ts/transfer/outgoing.ts, FORWARD_GRACE_MS). When the target restarts
 * inside that period, a forward fails and the target is marked Dead; writes after that
 * must not reach it. Before the fix (a regression of 9f1b684) they did once it was back:
 * it applied writes with a gap below them, its clocks' high-water mark passed the writes
 * it missed, and the next wal_delta recovery started above them, so acknowledged writes
 * were never sent and the replica came back Active without them (found by
 * `npm run bench:faults -- --cycles 40 --seed 7`).
 *
 * The test restarts the target right after a recovery (so within the grace), writes while
 * it is down and after it is back, waits for everything Active again, and reads every
 * acknowledged point through the target's own replica. Without the fix it loses the
 * writes when the restart lands within the grace, as it does here on a 2-core machine.
 */
import test from 'ava';

import { api, change, Cluster } from './harness';
import { waitFor } from '../support/wait';

const NAME = 'grace';
/** The source's forwarding grace after a transfer ends (FORWARD_GRACE_MS of ts/transfer/outgoing.ts). */
const GRACE_MS = 3000;
const vec = (i: number) => [1, (i % 7) / 7, (i % 5) / 5, (i % 3) / 3];

async function put(url: string, ids: number[], v: number): Promise<void> {
  const r = await api(url, 'PUT', `/collections/${NAME}/points?wait=true`, { points: ids.map((id) => ({ id, vector: vec(id), payload: { v } })) }, 30_000);
  if (r.status !== 200 || r.body?.result?.status !== 'completed') throw new Error(`write ${ids.join(',')}: ${r.status} ${JSON.stringify(r.body)}`);
}

/** Every running peer sees every replica Active and no transfer. */
async function settled(c: Cluster): Promise<void> {
  await waitFor('every replica Active, no transfer', async () => {
    for (const p of c.running()) {
      const r = await api(p.url, 'GET', `/collections/${NAME}/cluster`, undefined, 3000).catch(() => null);
      if (r === null || r.status !== 200) return false;
      const v = r.body.result;
      if ((v.shard_transfers ?? []).length > 0) return false;
      const states = [...v.local_shards, ...v.remote_shards].map((s: { state: string }) => s.state);
      if (states.length === 0 || !states.every((s: string) => s === 'Active')) return false;
    }
    return true;
  }, 60_000, 20);
}

test.serial('a target restarted within its source\'s forwarding grace gets no write after a missed one: nothing acknowledged is lost', async (t) => {
  const c = await Cluster.start(3, { SERVICE__TELEMETRY_DISABLED: 'true' });
  t.teardown(() => c.destroy());
  t.is((await change(c.peers[0].url, 'PUT', `/collections/${NAME}`, { vectors: { size: 4, distance: 'Dot' }, shard_number: 1, replication_factor: 2 })).status, 200);
  await waitFor('the collection on every peer', async () => (await Promise.all(c.peers.map((p) => api(p.url, 'GET', `/collections/${NAME}`)))).every((x) => x.status === 200));
  await settled(c);
  const holders: number[] = [];
  for (const p of c.peers) if ((await api(p.url, 'GET', `/collections/${NAME}/cluster`)).body.result.local_shards.length > 0) holders.push(p.index);
  t.is(holders.length, 2);
  const victim = holders.find((i) => i !== 0) ?? holders[1];
  const source = holders.find((i) => i !== victim)!;
  const S = c.peers[source].url;
  await put(S, Array.from({ length: 20 }, (_, i) => i), 1);

  // A first recovery: the victim misses writes while down and is recovered from the source.
  await c.kill(victim, 'SIGKILL');
  await put(S, [1000, 1001, 1002], 2);
  await c.startPeer(victim);
  await settled(c);
  const recovered = Date.now();

  // At once (within the source's forwarding grace): a restart, writes it misses, writes once it is back.
  await c.kill(victim, 'SIGTERM');
  const acked = [...Array.from({ length: 20 }, (_, i) => i), 1000, 1001, 1002];
  for (const id of [2000, 2001, 2002, 2003, 2004]) {
    await put(S, [id], 3);
    acked.push(id);
  }
  await c.startPeer(victim);
  // Writes go on through the rest of the source's grace (3 s from the recovery's end; not
  // a wait: the window where forwards could reach the target again), and 10 more after it.
  for (let k = 0; Date.now() - recovered < GRACE_MS + 500 || k < 10; k++) {
    await put(S, [3000 + k], 4);
    acked.push(3000 + k);
  }
  await settled(c);

  // Every acknowledged point, read through the victim's own replica.
  const V = c.peers[victim].url;
  const missing: number[] = [];
  for (const id of acked) {
    const g = await api(V, 'POST', `/collections/${NAME}/points`, { ids: [id] });
    if (g.status !== 200 || g.body.result.length === 0) missing.push(id);
  }
  t.deepEqual(missing, [], 'acknowledged points missing on the restarted replica');
});
