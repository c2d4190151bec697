/**
 * DeadMarking (ts/api/p2p/dead-marking.ts) with its file of deferred markings
 * (ts/storage/pending-markings.ts), over a fake consensus: a marking consensus cannot
 * take is on disk before the write that waits on it goes on; a restarted peer takes it
 * up, waits until it applied consensus as far as when the marking was deferred (older
 * states, replayed first, say nothing of it), proposes it, then forgets it (the placement
 * that marks the replica Dead takes it back); a marking consensus refuses ends, and the
 * replica sets take the replica back; any other failure is tried again; a marking that
 * cannot be written fails the write and is still proposed.
 */

import test from 'ava';
import pino from 'pino';

import { DeadMarking, type DeadMarkingContext } from '../../ts/api/p2p/dead-marking';
import type { ReplicaState } from '../../ts/collection/replica-state';
import { BadInputError, ClusterUnavailableError, ServiceError, ShardUnavailableError } from '../../ts/common/errors';
import type { MetaOp } from '../../ts/storage/cluster-state';
import { PendingMarkings } from '../../ts/storage/pending-markings';
import { scratchDirs } from '../support/scratch';
import { waitFor } from '../support/wait';

const tmp = scratchDirs('quiver-dead-marking-');
const logger = pino({ level: 'silent' });
const target = { collection: 'c', uuid: 'u1', shard: 0 };

/** A fake consensus: replica states, an applied index, a leader or not, and what was proposed. */
function consensus(store: PendingMarkings | null) {
  const f = {
    states: { '1': 'Active', '2': 'Active' } as Record<string, ReplicaState>,
    applied: 10,
    /** Calls of appliedIndex() and replicas(): each background pass makes at least one. */
    appliedReads: 0,
    leader: false,
    refuse: null as Error | null,
    proposals: [] as MetaOp[],
    ended: [] as string[],
  };
  const ctx: DeadMarkingContext = {
    replicas: () => {
      f.appliedReads++;
      return f.states;
    },
    propose: async (op) => {
      if (!f.leader) throw new ClusterUnavailableError('no leader');
      if (f.refuse) throw f.refuse;
      f.proposals.push(op);
      if (op.op === 'setReplicaState') f.states = { ...f.states, [op.peer]: op.state };
      return null;
    },
    settled: async () => undefined,
    store,
    appliedIndex: () => {
      f.appliedReads++;
      return f.applied;
    },
    ended: (_t, peer) => f.ended.push(peer),
    logger,
  };
  return { f, ctx };
}

test('a deferred marking is on disk before the write goes on; after a restart it waits for consensus to apply as far as when it was deferred, then is proposed, forgotten and ended', async (t) => {
  const dir = tmp();
  const first = consensus(await PendingMarkings.open(dir));
  const m1 = new DeadMarking(first.ctx);
  t.teardown(() => m1.close());
  t.is(await m1.mark(target, '2', 'a write failed'), 'deferred');
  m1.close();
  t.deepEqual((await PendingMarkings.open(dir)).entries(), [{ target, peer: '2', reason: 'a write failed', appliedAt: 10 }]);

  // The restarted peer: it replays older entries first (there, peer 2 was Dead once).
  const store = await PendingMarkings.open(dir);
  const again = consensus(store);
  again.f.applied = 4;
  again.f.states = { '1': 'Active', '2': 'Dead' };
  again.f.leader = true;
  const m2 = new DeadMarking(again.ctx);
  t.teardown(() => m2.close());
  t.deepEqual(m2.pendingFor(target), ['2'], 'known from construction on (the first placement leaves it out)');
  m2.resume();
  await waitFor('the background looked three times (or dropped the marking)', () => again.f.appliedReads >= 3 || m2.pendingFor(target).length === 0);
  t.deepEqual(m2.pendingFor(target), ['2'], 'not dropped on a state applied before the marking was deferred');
  t.deepEqual(again.f.proposals, []);
  // Replay reaches the deferral: peer 2 is Active there, and the marking goes through.
  again.f.states = { '1': 'Active', '2': 'Active' };
  again.f.applied = 11;
  await waitFor('the marking proposed and taken', () => m2.pendingFor(target).length === 0);
  t.deepEqual(again.f.proposals, [{ op: 'setReplicaState', collection: 'c', shard: 0, peer: '2', state: 'Dead' }]);
  t.deepEqual(again.f.ended, [], 'taken: the placement that has it Dead takes it back, once applied here');
  await waitFor('the file no longer holds it', async () => (await PendingMarkings.open(dir)).entries().length === 0);
});

test('a marking that fails otherwise (consensus stopped) is proposed again; one consensus refuses ends (the replica sets take the replica back), and leaves the file', async (t) => {
  const dir = tmp();
  const seed = await PendingMarkings.open(dir);
  await seed.add({ target, peer: '2', reason: 'a write failed', appliedAt: 10 });
  const { f, ctx } = consensus(await PendingMarkings.open(dir));
  f.leader = true;
  f.refuse = new ServiceError('consensus stopped: the raft log could not be written');
  const m = new DeadMarking(ctx);
  t.teardown(() => m.close());
  m.resume();
  await waitFor('the background tried three times (or dropped the marking)', () => f.appliedReads >= 6 || m.pendingFor(target).length === 0);
  t.deepEqual(m.pendingFor(target), ['2'], 'kept');
  t.deepEqual(f.ended, []);
  f.refuse = new BadInputError('shard 0 of c must keep at least one active replica');
  await waitFor('the refused marking ended', () => f.ended.length === 1);
  t.deepEqual(f.ended, ['2']);
  t.deepEqual(m.pendingFor(target), []);
  await waitFor('the file no longer holds it', async () => (await PendingMarkings.open(dir)).entries().length === 0);
});

test('a deferred marking that cannot be written fails the write that waits on it, and is still proposed', async (t) => {
  const failing = { entries: () => [], add: async () => Promise.reject(new Error('ENOSPC: no space left on device')), remove: async () => undefined } as unknown as PendingMarkings;
  const { f, ctx } = consensus(failing);
  const m = new DeadMarking(ctx);
  t.teardown(() => m.close());
  await t.throwsAsync(m.mark(target, '2', 'a write failed'), { instanceOf: ShardUnavailableError, message: /could not be written to disk .*ENOSPC.*proposed again/ });
  t.deepEqual(m.pendingFor(target), ['2']);
  f.leader = true;
  await waitFor('the marking proposed once a leader takes it', () => f.proposals.length === 1 && m.pendingFor(target).length === 0);
  t.deepEqual(f.ended, []);
});
