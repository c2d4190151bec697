/**
 * Scheduled snapshots in cluster mode (ts/snapshots/cluster-schedule.ts) on a real
 * 3-peer cluster: one schedule (every 4 s, keep_last 2) of a collection of 3 shards with
 * 2 replicas each. Each run snapshots each shard exactly once, by one peer: among the
 * completed scheduled jobs of all peers, per shard, no two are for the same run (the job's
 * `due`), every run seen claimed through consensus has one, by its claimant, and the names
 * all differ; each snapshot sits in the store of the peer consensus names. Retention holds per shard across peers (2 kept, the others deleted
 * from their peer's store). A peer killed: the runs go on, by the other peers; and the
 * claim rules of the state machine (first claim wins, take-over only of the holder,
 * retention moves names to `deleting`) without processes.
 */

import test from 'ava';

import { ClusterState } from '../../ts/storage/cluster-state';
import { Cluster } from './harness';
import { TEST_DEADLINE_MS, call, createCollection, load, peerIds, range, waitFor } from './transfer-support';

interface Run {
  slot: number;
  peer: string;
  state: string;
  made: Array<{ name: string; peer: string; at: number }>;
  deleting: Array<{ name: string; peer: string }>;
}

const SCHEDULE = 'collection:s';

async function runs(url: string): Promise<Record<string, Run>> {
  const r = await call(url, 'GET', '/snapshots/schedules');
  if (r.status !== 200) throw new Error(`GET /snapshots/schedules: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.result.schedules[SCHEDULE] ?? {};
}

test('claims: the first claim of a slot wins, a take-over only of the holder, a finish drops what retention chose', (t) => {
  const st = new ClusterState();
  st.setPeerUri('1', 'http://a');
  st.setPeerUri('2', 'http://b');
  const claim = (peer: string, slot: number, takeover_of?: string) => st.apply({ op: 'claimScheduledRun', schedule: 'k', key: 'c/0', slot, peer, ...(takeover_of ? { takeover_of } : {}) }, null);
  t.true(claim('1', 1000).ok);
  const second = claim('2', 1000);
  t.false(second.ok);
  t.regex((second as { error: Error }).error.message, /is claimed by peer 1/);
  t.false(claim('2', 1000, '3').ok, 'a take-over of a peer that does not hold the claim');
  t.true(claim('2', 1000, '1').ok, 'a take-over of the holder');
  t.like(st.scheduledShard('k', 'c/0'), { slot: 1000, peer: '2', state: 'claimed' });
  t.true(claim('2', 1000, '2').ok, 'a peer resuming its own claim after a restart');
  // The first claimant finishing late: recorded, not the run's state.
  t.like(st.apply({ op: 'finishScheduledRun', schedule: 'k', key: 'c/0', slot: 1000, peer: '1', made: { name: 'late', peer: '1', at: 5 }, drop: [] }, null), { ok: true, value: false });
  t.like(st.apply({ op: 'finishScheduledRun', schedule: 'k', key: 'c/0', slot: 1000, peer: '2', made: { name: 'a', peer: '2', at: 6 }, drop: ['late'] }, null), { ok: true, value: true });
  t.like(st.scheduledShard('k', 'c/0'), { state: 'done', made: [{ name: 'a' }], deleting: [{ name: 'late', peer: '1' }] });
  // A finish proposed again (its first proposal timed out but was taken), and a late one already recorded: nothing added twice.
  t.like(st.apply({ op: 'finishScheduledRun', schedule: 'k', key: 'c/0', slot: 1000, peer: '2', made: { name: 'a', peer: '2', at: 6 }, drop: ['late'] }, null), { ok: true, value: false });
  t.like(st.apply({ op: 'finishScheduledRun', schedule: 'k', key: 'c/0', slot: 1000, peer: '1', made: { name: 'late', peer: '1', at: 5 }, drop: [] }, null), { ok: true, value: false });
  t.deepEqual(st.scheduledShard('k', 'c/0')!.made.map((m) => m.name), ['a']);
  t.deepEqual(st.scheduledShard('k', 'c/0')!.deleting.map((m) => m.name), ['late']);
  t.false(claim('1', 1000).ok, 'a done run is not run again');
  t.true(claim('1', 2000).ok, 'the next slot');
  t.like(st.apply({ op: 'finishScheduledRun', schedule: 'k', key: 'c/0', slot: 2000, peer: '1', made: null, drop: ['a'] }, null), { ok: true, value: true });
  t.like(st.scheduledShard('k', 'c/0'), { state: 'failed', made: [{ name: 'a' }] }, 'a failed run deletes nothing');
  t.true(claim('2', 2000).ok, 'a failed run may be claimed again');
  t.like(st.apply({ op: 'forgetScheduledSnapshot', schedule: 'k', key: 'c/0', name: 'late', peer: '1' }, null), { ok: true, value: true });
  t.deepEqual(st.scheduledShard('k', 'c/0')!.deleting, []);
  t.false(claim('9', 3000).ok, 'an unknown peer');
  // In the consensus snapshot.
  t.deepEqual(ClusterState.decode(st.encode()).scheduledAll(), st.scheduledAll());
});

test.serial('every 4 s, keep_last 2, 3 shards x 2 replicas on 3 peers: each shard once per run by one peer, retention per shard, a peer killed and the runs go on', async (t) => {
  t.timeout(TEST_DEADLINE_MS * 2);
  const c = await Cluster.start(3, { SERVICE__SNAPSHOTS__SCHEDULE: '[{collection: s, interval_sec: 4, keep_last: 2}]' });
  t.teardown(() => c.destroy());
  const ids = await peerIds(c);
  const keys = ['s/0', 's/1', 's/2'];

  // Every run done by one peer: seen through consensus, counted in every peer's jobs.
  // `done`: slots whose run consensus recorded done. `claimed`: every slot seen claimed or
  // done. A run that overruns into the next slot is superseded before it shows as done (it
  // still finishes and makes its snapshot), so the runs that made snapshots include claimed
  // slots that never showed as done.
  const done = new Map<string, Map<number, string>>(keys.map((k) => [k, new Map()]));
  const claimed = new Map<string, Map<number, string>>(keys.map((k) => [k, new Map()]));
  const watch = async (url: string) => {
    for (const [k, r] of Object.entries(await runs(url))) {
      if (r.state === 'done') done.get(k)?.set(r.slot, r.peer);
      if (r.state === 'done' || r.state === 'claimed') claimed.get(k)?.set(r.slot, r.peer);
    }
  };
  const poller = setInterval(() => void watch(c.running()[0].url).catch(() => undefined), 300);
  t.teardown(() => clearInterval(poller));
  await createCollection(c, 's', { shard_number: 3, replication_factor: 2 });
  await load(c.peers[0].url, 's', range(0, 3000));
  await waitFor('three runs of every shard', () => keys.every((k) => done.get(k)!.size >= 3), 60_000);

  // Let the runs in progress end, then stop comparing at a quiet moment: right after a slot's runs are done.
  const quiet = await waitFor('every shard done for the current slot', async () => {
    const r = await runs(c.peers[0].url);
    const slot = Math.floor(Date.now() / 4000) * 4000;
    return keys.every((k) => r[k]?.state === 'done' && r[k].slot === slot) ? r : null;
  }, 30_000, 100);
  // The scheduled jobs of every peer up to the quiet slots, once none of them still runs
  // (a run claimed late can end after its slot shows done elsewhere); later runs ignored.
  const upTo = Math.max(...keys.map((k) => quiet[k].slot));
  const all = await waitFor('the scheduled runs up to the quiet slot ended on every peer', async () => {
    const jobs = (await Promise.all(c.peers.map((p) => call(p.url, 'GET', '/snapshots/jobs')))).flatMap((r, i) =>
      (r.body.result.jobs as any[]).filter((j) => j.origin === 'schedule' && j.kind === 'create_shard_snapshot' && Date.parse(j.due) <= upTo).map((j) => ({ ...j, peer: ids[i] })),
    );
    return jobs.some((j) => j.state === 'running') ? null : jobs.filter((j) => j.state === 'completed');
  }, 30_000, 200);
  for (const [i, k] of keys.entries()) {
    const mine = all.filter((j) => j.shard_id === i && Date.parse(j.due) <= quiet[k].slot);
    const names = mine.map((j) => j.result.name);
    t.is(new Set(names).size, names.length, `shard ${k}: every snapshot a different one`);
    t.true(mine.length >= 3, `shard ${k}: ${mine.length} completed runs`);
    t.is(quiet[k].made.length, 2, `shard ${k}: keep_last 2 in consensus`);
    for (const m of quiet[k].made) t.true(mine.some((j) => j.result.name === m.name && j.peer === m.peer), `shard ${k}: ${m.name} was made by peer ${m.peer}`);
    // Exactly one snapshot per run, by one peer: each completed job names the run (slot) it
    // was for, and no run has two. Every run the poller saw claimed or done (watched since
    // before the collection existed) has its snapshot, by the peer consensus named. A claim
    // can also be applied and superseded by the next slot's between two polls (a late claim
    // of the previous slot, granted just before the new slot's): its job is counted by its
    // slot all the same, so none is missed and none counted twice.
    const dues = mine.map((j) => j.due as string);
    t.true(dues.every((d) => Date.parse(d) % 4000 === 0), `shard ${k}: every job names a run of the schedule: ${JSON.stringify(dues)}`);
    t.is(new Set(dues).size, dues.length, `shard ${k}: one snapshot per run (${JSON.stringify(mine.map((j) => [j.peer, j.due, j.started_at]))})`);
    const seen = new Map([...claimed.get(k)!].filter(([slot]) => slot <= quiet[k].slot));
    seen.set(quiet[k].slot, quiet[k].peer);
    for (const [slot, peer] of seen) {
      const by = mine.filter((j) => Date.parse(j.due) === slot).map((j) => j.peer);
      t.deepEqual(by, [peer], `shard ${k}: the run due ${new Date(slot).toISOString()} made its snapshot on peer ${peer}`);
    }
  }
  // Retention per shard, across the peers' stores: the 2 kept, the others deleted.
  await waitFor('retention deleted what it dropped', async () => Object.values(await runs(c.peers[0].url)).every((r) => r.deleting.length === 0), 30_000);
  const now = await runs(c.peers[0].url);
  for (const [i, k] of keys.entries()) {
    const listed = (await Promise.all(c.peers.map(async (p, pi) => (((await call(p.url, 'GET', `/collections/s/shards/${i}/snapshots`)).body.result ?? []) as any[]).map((d) => ({ name: d.name, peer: ids[pi] }))))).flat();
    const kept = now[k].made.map((m) => ({ name: m.name, peer: m.peer }));
    // A run finishing between the two reads adds one and may drop one: compare to the state read just before.
    t.true(listed.length >= 2 && listed.length <= 3, `shard ${k}: ${listed.length} listed ${JSON.stringify(listed)}`);
    for (const m of kept) t.true(listed.some((l) => l.name === m.name && l.peer === m.peer), `shard ${k}: ${m.name} kept on peer ${m.peer}`);
  }

  // The peer that made shard 0's last run killed: every shard still gets its runs, by the two others.
  const victim = ids.indexOf(quiet['s/0'].peer);
  await c.kill(victim);
  const killedAt = Date.now();
  await waitFor('two more runs of every shard after the kill, by the others', async () => {
    const r = await runs(c.running()[0].url);
    return keys.every((k) => {
      const runsAfter = [...done.get(k)!].filter(([slot]) => slot > killedAt);
      return runsAfter.length >= 2 && r[k].state === 'done';
    });
  }, 60_000);
  for (const k of keys) for (const [slot, peer] of done.get(k)!) if (slot > killedAt) t.not(peer, ids[victim], `shard ${k} run ${new Date(slot).toISOString()}`);
});
