/**
 * The cluster snapshot scheduler (ts/snapshots/cluster-schedule.ts) with real snapshot
 * jobs, and a consensus over a real ClusterState whose first finish proposal fails: a run whose finish consensus did not take (the proposal
 * failed) is recorded by proposing the finish again while the claim is this peer's, and
 * its slot is not snapshotted a second time (the claim is not taken for one a restart
 * left behind).
 */

import test from 'ava';
import pino from 'pino';

import { loadConfig } from '../../ts/config';
import { parseCreateCollection } from '../../ts/collection/config';
import { ClusterSnapshotScheduler, TAKEOVER_AFTER_MS, claimLeft, currentSlot } from '../../ts/snapshots/cluster-schedule';
import { SnapshotJobs } from '../../ts/snapshots/jobs';
import { ClusterState, placeShards, type MetaOp } from '../../ts/storage/cluster-state';
import { scratchDirs } from '../support/scratch';
import { waitFor } from '../support/wait';

const scratch = scratchDirs('quiver-cluster-schedule-');

const config = loadConfig({ configPath: null, env: {}, cwd: process.cwd() });

test('a finish consensus did not take is proposed again; the slot is snapshotted once', async (t) => {
  const st = new ClusterState();
  st.setPeerUri('1', 'http://a');
  t.true(st.apply({ op: 'createCollection', name: 'c', uuid: 'u', config: parseCreateCollection({ vectors: { size: 4, distance: 'Dot' } }, config), shards: placeShards(['1'], 1, 1, 0) }, null).ok);
  // An hour-long interval: one slot for the whole test.
  const schedule = { collection: 'c', interval_sec: 3600, cron: null, keep_last: 2, max_age_sec: null };
  const slot = currentSlot(schedule, Date.now());
  let finishes = 0;
  const consensus = {
    peerId: '1',
    clusterState: st,
    ready: () => true,
    async propose(op: MetaOp): Promise<unknown> {
      // The first finish: a proposal that timed out without being taken.
      if (op.op === 'finishScheduledRun' && ++finishes === 1) throw new Error('proposal timed out');
      const r = st.apply(op, null);
      if (!r.ok) throw r.error;
      return r.value;
    },
  };
  let snapshots = 0;
  const jobs = await SnapshotJobs.open(scratch(), pino({ level: 'silent' }));
  t.teardown(() => jobs.close());
  const s = ClusterSnapshotScheduler.start([schedule], {
    consensus: consensus as never,
    snapshots: { createShard: async () => ({ name: `c-shard-0-${++snapshots}.snapshot` }) } as never,
    jobs,
    logger: pino({ level: 'silent' }),
    metrics: null,
    alive: () => true,
    downFor: () => 0,
  });
  t.teardown(() => s.close());
  const rec = await waitFor('the run recorded done', () => {
    const r = st.scheduledShard('collection:c', 'c/0');
    return r?.state === 'done' ? r : null;
  });
  t.is(finishes, 2, 'the finish proposed again');
  t.is(snapshots, 1, 'one snapshot for the slot');
  t.deepEqual(jobs.list().map((j) => [j.state, j.due]), [['completed', new Date(slot).toISOString()]]);
  t.like(rec, { slot, peer: '1', made: [{ name: 'c-shard-0-1.snapshot', peer: '1' }] });
});

test('a claimed run is taken over once its holder has been down for TAKEOVER_AFTER_MS, not at its first missed checks', (t) => {
  const active = ['1', '2', '3'];
  // A holder that answers, or stopped answering only a moment ago (a loaded peer): its run stays its own.
  t.false(claimLeft('2', '1', true, active, 0));
  t.false(claimLeft('2', '1', true, active, 1500));
  t.false(claimLeft('2', '1', true, active, TAKEOVER_AFTER_MS - 1));
  // Down as long as the supervisor waits before marking it Dead: taken over.
  t.true(claimLeft('2', '1', true, active, TAKEOVER_AFTER_MS));
  // Gone from the cluster, or no Active replica of the shard any more: at once.
  t.true(claimLeft('2', '1', false, active, 0));
  t.true(claimLeft('2', '1', true, ['1', '3'], 0));
  // Its own claim, left by a restart: resumed at once.
  t.true(claimLeft('1', '1', true, active, 0));
});
