/**
 * Fault tests of cluster mode with real peers:
 *  - chaos: collections created through random peers while random peers (the leader half
 *    the time) are killed with SIGKILL and restarted; every acknowledged create is on
 *    every peer at the end, nothing unacknowledged half-exists, and no term ever had two
 *    leaders;
 *  - a follower whose consensus log cannot be written (its storage/raft on a full tmpfs)
 *    stops: /cluster says stopped_with_err, /readyz 503, it no longer acknowledges (with
 *    the other follower gone the leader cannot commit), and the cluster goes on without it.
 */

import test from 'ava';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import { mountTmpfs, umount } from '../snapshots/faults-support';
import { mulberry32 } from '../support/rng';
import { Cluster, LeaderLog, api, change, sleep, waitFor } from './harness';

const vectors = { size: 4, distance: 'Dot' };



test.serial('chaos: creates through random peers while peers (often the leader) are killed -9 and restarted lose nothing acknowledged', async (t) => {
  const seed = Number(process.env.CLUSTER_CHAOS_SEED ?? 7);
  const rounds = Number(process.env.CLUSTER_CHAOS_ROUNDS ?? 8);
  const random = mulberry32(seed);
  t.log(`seed ${seed}, ${rounds} rounds`);
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const leaders = new LeaderLog();
  const acknowledged = new Set<string>();
  const attempted = new Set<string>();
  let n = 0;
  for (let round = 0; round < rounds; round++) {
    // A few creates through random running peers; failures are allowed (no leader yet), acknowledgements are kept.
    for (let k = 0; k < 3; k++) {
      const live = c.running();
      const via = live[Math.floor(random() * live.length)];
      const name = `chaos-${n++}`;
      attempted.add(name);
      // As a client would: retry while there is no leader (503) or no answer in time, for up to 10 s.
      const until = Date.now() + 10_000;
      for (;;) {
        const r = await api(via.url, 'PUT', `/collections/${name}?timeout=3`, { vectors }, 10_000).catch(() => ({ status: 0, body: null }));
        if (r.status === 200) acknowledged.add(name);
        // 409 on a retry: an earlier attempt was applied without its answer reaching us.
        else t.true([0, 408, 409, 503].includes(r.status), `create ${name}: ${r.status} ${JSON.stringify(r.body)}`);
        await leaders.sample(c);
        if (r.status === 200 || r.status === 409 || Date.now() > until) break;
        await sleep(100);
      }
    }
    const leader = await c.leader();
    const victim = leader !== null && random() < 0.5 ? leader : Math.floor(random() * 3);
    await c.kill(victim, 'SIGKILL');
    await sleep(Math.floor(random() * 1500));
    await leaders.sample(c);
    await c.startPeer(victim);
  }
  await c.waitVoters(3);
  t.true(acknowledged.size >= attempted.size / 2, `${acknowledged.size} of ${attempted.size} creates acknowledged`);
  await waitFor('every peer agrees', async () => {
    const lists = await Promise.all([0, 1, 2].map(async (i) => ((await api(c.peers[i].url, 'GET', '/collections')).body.result.collections as Array<{ name: string }>).map((x) => x.name).sort().join()));
    return lists.every((l) => l === lists[0]);
  });
  const present = new Set(((await api(c.peers[0].url, 'GET', '/collections')).body.result.collections as Array<{ name: string }>).map((x) => x.name));
  for (const name of acknowledged) t.true(present.has(name), `acknowledged ${name} is missing`);
  for (const name of present) t.true(attempted.has(name), `${name} was never created`);
  // Every collection a peer lists opens on it (no half-made one).
  for (let i = 0; i < 3; i++) {
    for (const name of present) t.is((await api(c.peers[i].url, 'GET', `/collections/${name}`)).status, 200, `${name} on peer ${i}`);
  }
  await leaders.sample(c);
  t.deepEqual(leaders.problems, []);
  t.log(`${acknowledged.size} acknowledged, ${present.size - acknowledged.size} applied without an answer, ${attempted.size - present.size} not applied`);
});

test.serial('a follower whose consensus log cannot be written stops voting and acknowledging; the others go on', async (t) => {
  const c = await Cluster.prepare(3);
  const mnt = path.join(c.peers[2].dir, 'storage', 'raft');
  t.teardown(async () => {
    await c.destroy().catch(() => undefined);
    await umount(mnt).catch(() => undefined);
    await fs.rm(c.root, { recursive: true, force: true });
  });
  await c.startPeer(0);
  await c.startPeer(1, 0);
  await mountTmpfs(mnt, 256);
  await c.startPeer(2, 0);
  await c.waitVoters(3);
  // Make sure peer 2 follows (not leads): if it leads, restart it until another peer leads.
  for (let i = 0; i < 5 && (await c.leader()) === 2; i++) {
    await c.kill(2);
    await waitFor('another leader', async () => ((await c.leader([c.peers[0], c.peers[1]])) ?? -1) >= 0);
    await c.startPeer(2);
  }
  t.not(await c.leader(), 2);
  // Fill the tmpfs: the next record peer 2 appends fails with ENOSPC.
  await fs.writeFile(path.join(mnt, 'ballast'), Buffer.alloc(0));
  const free = async () => {
    const st = await fs.statfs(mnt);
    return st.bavail * st.bsize;
  };
  await fs.writeFile(path.join(mnt, 'ballast'), Buffer.alloc(Math.max(0, (await free()) - 64)));
  const leader = (await c.leader())!;
  // Records go into the log file's last page until it is full: create until peer 2 fails.
  let made = 0;
  const broken = await waitFor('peer 2 stopped', async () => {
    t.is((await change(c.peers[leader].url, 'PUT', `/collections/x${made++}`, { vectors })).status, 200);
    const info = await c.info(2);
    return info.consensus_thread_status.consensus_thread_status === 'stopped_with_err' ? info : null;
  }, 30_000, 10);
  t.log(`peer 2 stopped after ${made} creates`);
  t.regex(JSON.stringify(broken.consensus_thread_status), /ENOSPC|no space/i);
  t.is((await api(c.peers[2].url, 'GET', '/readyz')).status, 503);
  t.is((await api(c.peers[2].url, 'PUT', '/collections/y2', { vectors })).status, 500);
  // The other two still commit.
  t.is((await change(c.peers[leader].url, 'PUT', '/collections/y3', { vectors })).status, 200);
  // Without the healthy follower, the broken one does not acknowledge: nothing commits.
  const healthy = [0, 1].find((i) => i !== leader)!;
  await c.kill(healthy);
  const r = await api(c.peers[leader].url, 'PUT', '/collections/y4?timeout=2', { vectors }, 15_000);
  t.true(r.status === 408 || r.status === 503, `${r.status} ${JSON.stringify(r.body)}`);
  // It never votes either: with the healthy follower back, a leader among 0 and 1 serves.
  await c.startPeer(healthy);
  const now = await c.waitLeader(20_000, [c.peers[0], c.peers[1]]);
  t.not(now, 2);
  t.is((await change(c.peers[now].url, 'PUT', '/collections/y5', { vectors })).status, 200);
});
