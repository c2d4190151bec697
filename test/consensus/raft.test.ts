/**
 * Raft core scenarios (ts/consensus/raft.ts), one rule at a time, on a controlled
 * cluster (test/consensus/cluster.ts): election and replication, pre-vote against a
 * rejoining partitioned peer, the check-quorum lease, learners (no campaign, no counted
 * vote, no counted acknowledgement), snapshot install to a lagging follower, a leader in
 * a minority that cannot commit, membership one change at a time, removal of the
 * leader, readiness, the driver order, and storage failures that stop a peer voting.
 */

import test from 'ava';

import { RaftNode } from '../../ts/consensus/raft';
import { MemoryRaftStorage, RaftStorage } from '../../ts/consensus/storage';
import { Message, RaftInvariantError, StorageError } from '../../ts/consensus/types';
import { mulberry32 } from '../support/rng';
import { Cluster } from './cluster';

const enc = new TextEncoder();

function threePeers(opts: Partial<ConstructorParameters<typeof Cluster>[0]> = {}): Cluster {
  const c = new Cluster({ voters: ['a', 'b', 'c'], ...opts });
  c.elect('a');
  return c;
}

test('three peers elect one leader, and a proposal is committed and applied everywhere', (t) => {
  const c = threePeers();
  t.deepEqual(c.leaders(), ['a']);
  const term = c.status('a').term;
  const r = c.propose('a', 'x=1');
  t.true(r.ok);
  c.deliver();
  c.tick(2); // a heartbeat carries the commit index to the followers
  for (const id of ['a', 'b', 'c']) {
    t.deepEqual(c.get(id).applied, ['bootstrap', `noop@${term}`, 'x=1'], id);
    t.is(c.status(id).leader, 'a');
  }
});

test('a follower refuses proposals and names the leader; a peer without a leader says so', (t) => {
  const c = new Cluster({ voters: ['a', 'b', 'c'] });
  const before = c.node('b').propose(enc.encode('early'));
  t.like(before, { ok: false, reason: 'notLeader', leader: null });
  c.elect('a');
  const r = c.node('b').propose(enc.encode('x'));
  t.like(r, { ok: false, reason: 'notLeader', leader: 'a' });
});

test('leader election happens by itself after the leader crashes (timeouts in ticks, jitter from the PRNG)', (t) => {
  const c = threePeers();
  const term = c.status('a').term;
  c.crash('a');
  c.tick(40, ['b', 'c']);
  const leaders = c.leaders();
  t.is(leaders.length, 1);
  t.not(leaders[0], 'a');
  t.true(c.status(leaders[0]).term > term);
});

test('pre-vote: a partitioned follower does not inflate its term, and rejoining does not disrupt the leader', (t) => {
  const c = threePeers();
  const term = c.status('a').term;
  c.isolate('c');
  c.tick(200); // twenty election timeouts alone
  t.is(c.status('c').term, term, 'pre-votes fail in a minority, so the term stays');
  t.true(['follower', 'preCandidate'].includes(c.status('c').role), 'never a candidate');
  t.false(c.sent.some((m) => m.from === 'c' && m.type === 'vote'));
  c.heal();
  c.propose('a', 'after-heal');
  c.tick(10);
  t.deepEqual(c.leaders(), ['a']);
  t.is(c.status('a').term, term, 'the leader was not deposed');
  t.is(c.get('c').applied.at(-1), 'after-heal');
});

test('without pre-vote the same partition deposes the leader (what pre-vote prevents)', (t) => {
  const c = threePeers({ node: { preVote: false } });
  const term = c.status('a').term;
  c.isolate('c');
  c.tick(200);
  t.true(c.status('c').term > term + 5, 'the isolated peer campaigned again and again');
  c.heal();
  c.tick(40);
  t.true(c.status('a').term > term, 'its higher term reached the leader and forced a new election');
});

test('check quorum: followers that hear from their leader ignore a vote request with a higher term', (t) => {
  const c = threePeers();
  const term = c.status('b').term;
  c.queue.push({ type: 'vote', from: 'c', to: 'b', term: term + 7, lastLogIndex: 100, lastLogTerm: term + 6 });
  const sentBefore = c.sent.length;
  c.deliver();
  t.is(c.status('b').term, term);
  t.is(c.status('b').leader, 'a');
  t.false(c.sent.slice(sentBefore).some((m) => m.type === 'voteResponse'));
});

test('a learner does not campaign, is not asked for votes, and its vote does not count', (t) => {
  const c = new Cluster({ voters: ['a', 'b', 'c'], learners: ['l'] });
  // Isolated for a long time, a learner never campaigns.
  c.isolate('l');
  c.tick(200, ['l']);
  t.is(c.status('l').role, 'follower');
  t.is(c.status('l').term, 1);
  t.false(c.sent.some((m) => m.from === 'l' && (m.type === 'preVote' || m.type === 'vote')));
  c.heal();
  // A candidate asks the voters only.
  c.isolate('b');
  c.cutLink('a', 'c');
  c.node('a').campaign();
  c.drain('a');
  const asked = c.queue.filter((m) => m.type === 'preVote').map((m) => m.to).sort();
  t.deepEqual(asked, ['b', 'c']);
  // A granted answer from the learner is not counted: a stays pre-candidate.
  c.queue = [];
  c.node('a').step({ type: 'preVoteResponse', from: 'l', to: 'a', term: c.status('a').term + 1, granted: true });
  c.drain('a');
  t.is(c.status('a').role, 'preCandidate');
});

test('a learner does not count for commit: leader + learner cannot commit, one voter more can', (t) => {
  const c = new Cluster({ voters: ['a', 'b', 'c'], learners: ['l'] });
  c.elect('a');
  c.tick(3);
  const before = c.status('a').commit;
  c.cutLink('a', 'b');
  c.cutLink('a', 'c');
  const r = c.propose('a', 'needs-a-voter');
  t.true(r.ok);
  c.deliver();
  c.tick(3, ['a', 'l']);
  t.is(c.status('a').progress!.get('l')!.match, r.ok ? r.index : -1, 'the learner holds the entry');
  t.is(c.status('a').commit, before, 'but it is not committed');
  c.heal();
  c.tick(3);
  t.true(c.status('a').commit >= (r.ok ? r.index : Infinity));
  t.is(c.get('l').applied.at(-1), 'needs-a-voter');
});

test('a lagging follower behind the compaction point receives the snapshot, installs it and catches up', (t) => {
  const c = threePeers();
  c.isolate('c');
  for (let i = 0; i < 20; i++) c.propose('a', `v${i}`);
  c.deliver();
  c.tick(2, ['a', 'b']);
  c.compact('a');
  t.true(c.get('a').disk.firstIndex() > c.status('c').lastIndex + 1, 'the leader no longer holds what c needs');
  c.heal();
  c.tick(6);
  const snaps = c.sent.filter((m) => m.type === 'installSnapshot' && m.to === 'c');
  t.true(snaps.length >= 1, 'c was sent the snapshot');
  t.deepEqual(c.get('c').applied, c.get('a').applied);
  t.is(c.get('c').disk.snapshot().meta.index, c.get('a').disk.snapshot().meta.index, 'c persisted it');
  c.propose('a', 'after');
  c.tick(3);
  t.is(c.get('c').applied.at(-1), 'after');
});

test('a leader cut off in a minority cannot commit, steps down, and its entries are replaced', (t) => {
  const c = new Cluster({ voters: ['a', 'b', 'c', 'd', 'e'] });
  c.elect('a');
  c.tick(3);
  const applied = c.get('a').applied.length;
  c.partition(['a', 'b'], ['c', 'd', 'e']);
  const r = c.propose('a', 'lost');
  t.true(r.ok);
  c.tick(9, ['a', 'b']);
  t.is(c.get('a').applied.length, applied, 'two of five cannot commit');
  t.is(c.status('a').commit, c.status('c').commit);
  c.tick(12, ['a', 'b']);
  t.is(c.status('a').role, 'follower', 'check quorum: the leader stepped down');
  c.tick(40, ['c', 'd', 'e']);
  const [leader] = c.leaders();
  t.true(['c', 'd', 'e'].includes(leader));
  c.propose(leader, 'kept');
  c.tick(3);
  c.heal();
  c.tick(25);
  for (const id of ['a', 'b', 'c', 'd', 'e']) {
    t.false(c.get(id).applied.includes('lost'), id);
    t.is(c.get(id).applied.at(-1), 'kept', id);
  }
});

test('membership: a new peer joins as a learner, catches up from a snapshot, then is promoted to voter; one change at a time', (t) => {
  const c = threePeers();
  c.propose('a', 'before-join');
  c.tick(2);
  c.compact('a');
  const add = c.node('a').proposeConfChange({ type: 'addLearner', peer: 'd', context: 'http://d:6335' });
  t.true(add.ok);
  const second = c.node('a').proposeConfChange({ type: 'promoteLearner', peer: 'd' });
  t.like(second, { ok: false, reason: 'confChangePending' });
  c.drain('a');
  c.add('d'); // starts empty
  c.tick(6);
  t.deepEqual(c.status('a').conf, { voters: ['a', 'b', 'c'], learners: ['d'] });
  t.false(c.status('d').isVoter);
  t.true(c.status('d').isLearner);
  t.deepEqual(c.get('d').applied, c.get('a').applied);
  const invalid = c.node('a').proposeConfChange({ type: 'promoteLearner', peer: 'b' });
  t.like(invalid, { ok: false, reason: 'invalidConfChange' });
  t.true(c.node('a').proposeConfChange({ type: 'promoteLearner', peer: 'd' }).ok);
  c.drain('a');
  c.tick(4);
  for (const id of ['a', 'b', 'c', 'd']) t.deepEqual(c.status(id).conf, { voters: ['a', 'b', 'c', 'd'], learners: [] }, id);
  // Four voters: a and d alone are not a majority any more.
  c.partition(['a', 'd'], ['b', 'c']);
  const r = c.propose('a', 'two-of-four');
  c.tick(4, ['a', 'd']);
  t.true(r.ok);
  t.false(c.get('a').applied.includes('two-of-four'));
});

test('removing a follower: it stops being asked for votes and acknowledgements', (t) => {
  const c = threePeers();
  c.tick(2);
  t.true(c.node('a').proposeConfChange({ type: 'removePeer', peer: 'c' }).ok);
  c.drain('a');
  c.tick(4);
  t.deepEqual(c.status('a').conf, { voters: ['a', 'b'], learners: [] });
  t.deepEqual(c.status('c').conf, { voters: ['a', 'b'], learners: [] }, 'the removed peer applied its removal too');
  c.isolate('c');
  c.propose('a', 'without-c');
  c.tick(3);
  t.is(c.get('b').applied.at(-1), 'without-c');
  t.like(c.node('a').proposeConfChange({ type: 'removePeer', peer: 'c' }), { ok: false, reason: 'invalidConfChange' });
});

test('a conditional removal the application refuses when applying it changes no membership on any peer; a refused removal of the leader lets it take proposals again', (t) => {
  const c = threePeers();
  c.tick(2);
  c.refuseChange = (e) => e.type === 'confChange' && e.change.type === 'removePeer' && e.change.conditional === true;
  t.true(c.node('a').proposeConfChange({ type: 'removePeer', peer: 'c', conditional: true }).ok);
  c.drain('a');
  c.tick(4);
  for (const id of ['a', 'b', 'c']) {
    t.deepEqual(c.status(id).conf, { voters: ['a', 'b', 'c'], learners: [] }, id);
    t.is(c.get(id).applied.at(-1), 'refused:removePeer:c', id);
  }
  // The leader removing itself: no proposals meanwhile, and again once the removal was refused.
  t.true(c.node('a').proposeConfChange({ type: 'removePeer', peer: 'a', conditional: true }).ok);
  t.like(c.node('a').propose(enc.encode('late')), { ok: false, reason: 'leaderLeaving' });
  c.drain('a');
  c.tick(4);
  t.deepEqual(c.leaders(), ['a']);
  t.true(c.status('a').isVoter);
  t.true(c.propose('a', 'after').ok);
  c.tick(3);
  for (const id of ['a', 'b', 'c']) t.is(c.get(id).applied.at(-1), 'after', id);
  // The same removal, not refused, goes.
  c.refuseChange = null;
  t.true(c.node('a').proposeConfChange({ type: 'removePeer', peer: 'c', conditional: true }).ok);
  c.drain('a');
  c.tick(4);
  t.deepEqual(c.status('b').conf, { voters: ['a', 'b'], learners: [] });
});

test('an unconditional membership change cannot be refused: advance() says so', (t) => {
  const c = threePeers();
  c.tick(2);
  c.refuseChange = () => true;
  t.true(c.node('a').proposeConfChange({ type: 'removePeer', peer: 'c' }).ok);
  t.throws(() => {
    c.drain('a');
    c.tick(4);
  }, { instanceOf: RaftInvariantError, message: /unconditional membership change/ });
});

test('removing the leader of two voters: it takes no more proposals, stands down once the removal applies, and the survivor is elected', (t) => {
  const c = new Cluster({ voters: ['a', 'b'] });
  c.elect('a');
  c.tick(2);
  t.true(c.node('a').proposeConfChange({ type: 'removePeer', peer: 'a' }).ok);
  t.like(c.node('a').propose(enc.encode('late')), { ok: false, reason: 'leaderLeaving' });
  // The heartbeat that would tell b the removal committed is lost.
  c.drain('a');
  c.deliver((m) => !(m.type === 'heartbeat' && m.from === 'a'));
  t.is(c.status('a').role, 'follower');
  t.false(c.status('a').isVoter);
  t.deepEqual(c.status('b').conf, { voters: ['a', 'b'], learners: [] }, 'b has not applied the removal');
  c.tick(40);
  t.deepEqual(c.leaders(), ['b']);
  t.deepEqual(c.status('b').conf, { voters: ['b'], learners: [] });
  t.true(c.propose('b', 'alone').ok);
  c.tick(1);
  t.is(c.get('b').applied.at(-1), 'alone');
});

test('readiness: a follower reports caught up only when it has applied what the leader committed', (t) => {
  const c = threePeers();
  c.tick(2);
  t.true(c.status('c').caughtUp);
  c.isolate('c');
  for (let i = 0; i < 5; i++) c.propose('a', `w${i}`);
  c.tick(2, ['a', 'b']);
  // c heard nothing of the new commits: it does not know it is behind. Let one heartbeat through.
  c.heal();
  c.queue = [];
  c.queue.push({ type: 'heartbeat', from: 'a', to: 'c', term: c.status('a').term, commit: 0, leaderCommit: c.status('a').commit });
  c.deliver((m) => m.to === 'c' && m.type === 'heartbeat');
  t.false(c.status('c').caughtUp);
  t.true(c.status('c').leaderCommit > c.status('c').applied);
  // Cut off for longer than an election timeout, it no longer claims to be caught up either.
  c.isolate('c');
  c.tick(10, ['c']);
  t.false(c.status('c').caughtUp);
  c.heal();
  c.tick(4);
  t.true(c.status('c').caughtUp);
  t.is(c.status('c').applied, c.status('a').commit);
});

test('a peer restarts from what it persisted: term, vote, log and snapshot', (t) => {
  const c = threePeers();
  c.propose('a', 'durable');
  c.tick(2);
  const st = c.status('b');
  c.crash('b');
  c.start('b');
  const again = c.status('b');
  t.is(again.term, st.term);
  t.is(again.vote, st.vote);
  t.is(again.lastIndex, st.lastIndex);
  t.is(again.commit, st.commit);
  t.is(c.get('b').applied.at(-1), 'durable', 'committed entries are applied again after the restart');
});

test('entries persisted without the hard state that followed them: the restarted peer takes the term of its log and does not vote in it', (t) => {
  const disk = MemoryRaftStorage.bootstrap({ voters: ['a', 'b', 'c'], learners: [] });
  disk.append([{ index: 2, term: 7, type: 'noop' }]); // hard state still says term 1
  const node = new RaftNode({ id: 'b', storage: disk, random: mulberry32(3) });
  t.is(node.status().term, 7);
  t.is(node.status().vote, 'b', 'it may have led term 7: its vote there counts as cast for itself');
  const rd = node.ready();
  t.deepEqual(rd.hardState, { term: 7, vote: 'b', commit: 1 });
  disk.setHardState(rd.hardState!);
  node.advance(rd);
  node.step({ type: 'vote', from: 'c', to: 'b', term: 7, lastLogIndex: 5, lastLogTerm: 7 });
  const refused = node.ready();
  t.like(refused.messages[0], { type: 'voteResponse', to: 'c', term: 7, granted: false });
  node.advance(refused);
  node.step({ type: 'vote', from: 'c', to: 'b', term: 8, lastLogIndex: 5, lastLogTerm: 7 });
  const granted = node.ready();
  t.like(granted.messages[0], { type: 'voteResponse', to: 'c', term: 8, granted: true });
});

test('a sole voter that becomes leader and crashes before persisting its vote does not help elect a second leader of that term', (t) => {
  // a applied its own membership {a} (b's removal); b has not, and still counts {a, b}.
  const disk = MemoryRaftStorage.bootstrap({ voters: ['a'], learners: [] });
  const a = new RaftNode({ id: 'a', storage: disk, random: mulberry32(5) });
  a.campaign();
  t.is(a.status().role, 'leader');
  const term = a.status().term;
  const rd = a.ready();
  disk.append(rd.entries); // the crash comes before the hard state
  const restarted = new RaftNode({ id: 'a', storage: disk, random: mulberry32(6) });
  const rd2 = restarted.ready();
  disk.append(rd2.entries);
  if (rd2.hardState) disk.setHardState(rd2.hardState);
  restarted.advance(rd2);
  restarted.step({ type: 'vote', from: 'b', to: 'a', term, lastLogIndex: 99, lastLogTerm: term });
  const answer = restarted.ready().messages.find((m) => m.type === 'voteResponse');
  t.like(answer, { granted: false, term });
});

test('the driver order is asserted: advance() before persisting is refused, and so is a second ready()', (t) => {
  const disk = MemoryRaftStorage.bootstrap({ voters: ['a'], learners: [] });
  const node = new RaftNode({ id: 'a', storage: disk, random: mulberry32(1) });
  node.campaign();
  const rd = node.ready();
  t.is(rd.role, 'leader');
  t.true(rd.entries.length > 0);
  t.throws(() => node.ready(), { instanceOf: RaftInvariantError });
  t.throws(() => node.tick(), { instanceOf: RaftInvariantError });
  t.throws(() => node.advance(rd), { instanceOf: RaftInvariantError, message: /not persisted/ });
  // Hard state before entries is refused by the storage itself.
  const disk2 = MemoryRaftStorage.bootstrap({ voters: ['a'], learners: [] });
  t.throws(() => disk2.setHardState({ term: 2, vote: 'a', commit: 5 }), { instanceOf: RaftInvariantError, message: /persist entries before hard state/ });
});

test('a single voter commits its own proposals once they are persisted', (t) => {
  const disk = MemoryRaftStorage.bootstrap({ voters: ['a'], learners: [] });
  const node = new RaftNode({ id: 'a', storage: disk, random: mulberry32(1) });
  node.campaign();
  const applied: string[] = [];
  const run = () => {
    while (node.hasReady()) {
      const rd = node.ready();
      disk.append(rd.entries);
      if (rd.hardState) disk.setHardState(rd.hardState);
      for (const e of rd.committedEntries) if (e.type === 'normal') applied.push(new TextDecoder().decode(e.data));
      node.advance(rd);
    }
  };
  run();
  const r = node.propose(enc.encode('solo'));
  t.true(r.ok);
  run();
  t.deepEqual(applied, ['solo']);
  t.is(node.status().commit, r.ok ? r.index : -1);
});

/** A storage whose reads can be made to fail. */
class FlakyStorage implements RaftStorage {
  broken = false;
  constructor(readonly inner: MemoryRaftStorage) {}
  private check(): void {
    if (this.broken) throw new StorageError('failure', 'disk read failed');
  }
  initialState() {
    this.check();
    return this.inner.initialState();
  }
  firstIndex() {
    this.check();
    return this.inner.firstIndex();
  }
  lastIndex() {
    this.check();
    return this.inner.lastIndex();
  }
  term(i: number) {
    this.check();
    return this.inner.term(i);
  }
  entries(lo: number, hi: number) {
    this.check();
    return this.inner.entries(lo, hi);
  }
  snapshot() {
    this.check();
    return this.inner.snapshot();
  }
}

test('a storage failure stops the peer from voting, campaigning and taking proposals instead of guessing', (t) => {
  const flaky = new FlakyStorage(MemoryRaftStorage.bootstrap({ voters: ['a', 'b', 'c'], learners: [] }));
  const node = new RaftNode({ id: 'b', storage: flaky, random: mulberry32(2) });
  flaky.broken = true;
  const vote: Message = { type: 'vote', from: 'a', to: 'b', term: 5, lastLogIndex: 9, lastLogTerm: 4 };
  node.step(vote);
  const st = node.status();
  t.regex(st.storageFault ?? '', /disk read failed/);
  t.false(node.hasReady());
  const rd = node.ready();
  t.deepEqual(rd.messages, [], 'no vote granted or refused');
  node.advance(rd);
  for (let i = 0; i < 100; i++) node.tick();
  t.is(node.status().role, 'follower', 'never campaigns');
  t.like(node.propose(enc.encode('x')), { ok: false, reason: 'storageFault' });
});

test('the same seed gives the same election timeouts', (t) => {
  const run = (seed: number) => {
    const c = new Cluster({ voters: ['a', 'b', 'c'], seed });
    let ticks = 0;
    while (c.leaders().length === 0 && ticks < 100) {
      c.tick(1);
      ticks++;
    }
    return { ticks, leader: c.leaders()[0] };
  };
  t.deepEqual(run(11), run(11));
  t.deepEqual(run(12), run(12));
});

test('a follower that crashes between persisting entries and hard state comes back at most one membership change behind its log (else two leaders of one term)', (t) => {
  // {a,b,c} grows to {a,b,c,d,e} while b is cut off; then b receives all four changes at
  // once and crashes after persisting the entries but not the hard state (its persisted
  // commit is from before the first change). If it kept all four, it would restart
  // counting votes among {a,b,c} while c, d, e count among {a,b,c,d,e}: {a,b} and {c,d,e}
  // are both majorities and could each elect a leader in the same term.
  const c = new Cluster({ voters: ['a', 'b', 'c'] });
  c.elect('a');
  c.tick(2);
  c.isolate('b');
  const change = (cc: Parameters<RaftNode['proposeConfChange']>[0]) => {
    t.true(c.node('a').proposeConfChange(cc).ok, JSON.stringify(cc));
    c.drain('a');
    c.tick(3, ['a', 'c', 'd', 'e'].filter((id) => c.peers.has(id)));
  };
  change({ type: 'addLearner', peer: 'd' });
  c.add('d');
  c.tick(3, ['a', 'c', 'd']);
  change({ type: 'promoteLearner', peer: 'd' });
  change({ type: 'addLearner', peer: 'e' });
  c.add('e');
  c.tick(3, ['a', 'c', 'd', 'e']);
  change({ type: 'promoteLearner', peer: 'e' });
  t.deepEqual(c.status('a').conf.voters, ['a', 'b', 'c', 'd', 'e']);

  // b comes back; the append that carries the four changes arrives, and b crashes
  // having persisted that Ready's entries only.
  c.heal();
  c.partition(['b'], ['c', 'd', 'e']);
  let crashed = false;
  for (let i = 0; i < 20 && !crashed; i++) {
    c.node('a').tick();
    c.drain('a');
    while (c.queue.length > 0 && !crashed) {
      const m = c.queue.shift()!;
      if (m.to !== 'a' && m.to !== 'b') continue;
      if (m.from !== 'a' && m.from !== 'b') continue;
      c.node(m.to).step(m);
      if (m.to === 'b' && m.type === 'append' && m.entries.filter((e) => e.type === 'confChange').length >= 2) {
        const rd = c.node('b').ready();
        t.truthy(rd.hardState, 'the commit moved with this append');
        c.get('b').disk.append(rd.entries);
        c.crash('b');
        crashed = true;
      } else c.drain(m.to);
    }
  }
  t.true(crashed, 'b received the changes in one append');
  c.queue = [];
  c.start('b');

  // Everyone is cut off from everyone until the old leader a loses its quorum and stands down.
  for (const id of ['a', 'b', 'c', 'd', 'e']) c.isolate(id);
  c.tick(25, ['a']);
  t.is(c.status('a').role, 'follower');
  const leaderOfTerm = new Map<number, string>();
  const record = () => {
    for (const id of ['a', 'b', 'c', 'd', 'e']) {
      const st = c.status(id);
      if (st.role !== 'leader') continue;
      const known = leaderOfTerm.get(st.term);
      t.true(known === undefined || known === id, `two leaders of term ${st.term}: ${known} and ${id}`);
      leaderOfTerm.set(st.term, id);
    }
  };
  // Then {a,b} and {c,d,e} can each talk among themselves. b campaigns at once; c, d, e
  // campaign when their own timers run out.
  c.heal();
  c.partition(['a', 'b'], ['c', 'd', 'e']);
  c.elect('b');
  record();
  for (let i = 0; i < 60; i++) {
    c.tick(1, ['c', 'd', 'e']);
    record();
  }
  t.true(leaderOfTerm.size > 0);
});
