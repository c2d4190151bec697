/**
 * Process tests of a cluster peer's restart: local data of collections created after the
 * last consensus snapshot survives (a restart replays the entries after that snapshot; it
 * must not first bring local storage back to the snapshot's older state).
 */

import test from 'ava';

import { Cluster, api, waitFor } from './harness';

const vectors = { size: 4, distance: 'Cosine' };

test.serial('one peer: points of a collection created after the last consensus snapshot survive a restart (SIGTERM and SIGKILL)', async (t) => {
  const c = await Cluster.start(1);
  t.teardown(() => c.destroy());
  t.is((await api(c.peers[0].url, 'PUT', '/collections/kept', { vectors })).status, 200);
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
