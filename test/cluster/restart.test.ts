/**
 * Process tests of a cluster peer's restart and of peers that must agree: local data of
 * collections created after the last consensus snapshot survives a restart (it replays the
 * entries after that snapshot; it must not first bring local storage back to the
 * snapshot's older state), and peers with different local settings apply alike.
 */

import test from 'ava';

import { Cluster, api, change, waitFor } from './harness';

const vectors = { size: 4, distance: 'Cosine' };

test.serial('one peer: points of a collection created after the last consensus snapshot survive a restart (SIGTERM and SIGKILL)', async (t) => {
  const c = await Cluster.start(1);
  t.teardown(() => c.destroy());
  t.is((await change(c.peers[0].url, 'PUT', '/collections/kept', { vectors })).status, 200);
  const points = Array.from({ length: 10 }, (_, i) => ({ id: i + 1, vector: [1, i, 0, 0] }));
  t.is((await api(c.peers[0].url, 'PUT', '/collections/kept/points?wait=true', { points })).status, 200);

  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    await c.kill(0, signal);
    await c.startPeer(0);
    await waitFor('the peer ready again', async () => (await api(c.peers[0].url, 'GET', '/readyz')).status === 200);
    const count = await api(c.peers[0].url, 'POST', '/collections/kept/points/count', {});
    t.is(count.status, 200, JSON.stringify(count.body));
    t.is(count.body.result.count, 10, `points after a restart (${signal})`);
  }
});

test.serial('two peers with different storage.max_collections hold the same collections (the proposer\'s limit decides, on every peer)', async (t) => {
  const c = await Cluster.prepare(2);
  t.teardown(() => c.destroy());
  await c.startPeer(0);
  await c.startPeer(1, 0, { SERVICE__STORAGE__MAX_COLLECTIONS: '1' });
  await c.waitVoters(2);
  for (const name of ['one', 'two']) t.is((await change(c.peers[0].url, 'PUT', `/collections/${name}`, { vectors })).status, 200);
  const names = async (i: number) => ((await api(c.peers[i].url, 'GET', '/collections')).body.result.collections as Array<{ name: string }>).map((x) => x.name).sort().join();
  await waitFor('both peers list both collections', async () => (await names(0)) === 'one,two' && (await names(1)) === 'one,two').catch(() => undefined);
  t.is(await names(0), 'one,two');
  t.is(await names(1), 'one,two', 'the peer with the lower local limit applied the same state');
});
