/**
 * ReplicaSet in a cluster, over fake replicas and a fake cluster link (no processes):
 * one clock tag per write to every replica that accepts writes, write_consistency_factor,
 * Dead marking of replicas that failed before the write answers, refusals before
 * anything is sent, ordering through a leader replica, read consistency over the
 * replica states, listeners.
 */

import test from 'ava';

import { BadInputError, QuiverError, ShardUnavailableError } from '../../ts/common/errors';
import type { ClusterLink, HeldClock, ShardTarget } from '../../ts/collection/cluster-link';
import { parseCreateCollection } from '../../ts/collection/config';
import { Collection } from '../../ts/collection/collection';
import type { PointRecord, ReadOptions, RetrieveRequest, UpdateOptions } from '../../ts/collection/replica';
import type { ReplicaOperation } from '../../ts/collection/replica-operation';
import { ReplicaSet } from '../../ts/collection/replica-set';
import type { ReplicaState } from '../../ts/collection/replica-state';
import type { ClockTag } from '../../ts/shard/clocks';
import { normalizePointId } from '../../ts/shard/id-tracker';
import { loadConfig } from '../../ts/config';
import pino from 'pino';
import { FakeReplica } from './fake-replica';

const config = loadConfig({ env: {} });

class TaggedFake extends FakeReplica {
  readonly tags: Array<ClockTag | undefined> = [];
  /** Runs when a retrieve reaches this replica, before it answers. */
  onRetrieve: (() => void) | null = null;
  override update(op: ReplicaOperation, opts: UpdateOptions, tag?: ClockTag): Promise<number> {
    this.tags.push(tag);
    return super.update(op, opts);
  }
  override retrieve(req: RetrieveRequest, opts: ReadOptions): Promise<PointRecord[]> {
    this.onRetrieve?.();
    return super.retrieve(req, opts);
  }
}

class FakeLink implements ClusterLink {
  readonly peer = '1';
  readonly remotes = new Map<string, TaggedFake>();
  readonly deactivated: string[][] = [];
  readonly forwarded: string[] = [];
  readonly down = new Set<string>();
  deactivateFails: Error | null = null;
  private tick = 0n;

  remote(_t: ShardTarget, peer: string): TaggedFake {
    let r = this.remotes.get(peer);
    if (!r) this.remotes.set(peer, (r = new TaggedFake(peer, false, Number(peer) * 1000)));
    return r;
  }
  /** Peers whose marking consensus cannot take now. */
  readonly deferring = new Set<string>();
  async deactivate(_t: ShardTarget, peers: readonly string[]): Promise<string[]> {
    this.deactivated.push([...peers]);
    if (this.deactivateFails) throw this.deactivateFails;
    return peers.filter((p) => this.deferring.has(p));
  }
  async forward(_t: ShardTarget, leader: string): Promise<number> {
    this.forwarded.push(leader);
    return 7;
  }
  alive(peer: string): boolean {
    return !this.down.has(peer);
  }
  clock(): HeldClock {
    this.tick++;
    return { clock: 1 << 20, tick: this.tick, release: () => undefined };
  }
  pendingDead(): readonly string[] {
    return [...this.deferring];
  }
  transferOut(): void {}
  transferGone(): void {}
  transferLost(): void {}
}

const WAIT: UpdateOptions = { wait: true, ordering: 'weak', timeout: null };
const ONE: ReadOptions = { consistency: { factor: 1 }, timeout: null };

function setOf(states: Record<string, ReplicaState>, wcf = 1): { set: ReplicaSet; local: TaggedFake; link: FakeLink } {
  const link = new FakeLink();
  const local = new TaggedFake('1', true);
  const params = parseCreateCollection({ vectors: { size: 2, distance: 'Dot' }, replication_factor: 3, write_consistency_factor: wcf }, config).params;
  const set = new ReplicaSet(0, 'c', '1', '1' in states ? [local] : [], states, { link, uuid: 'u', params: () => params });
  return { set, local, link };
}

const upsert = (id: number): ReplicaOperation => ({ kind: 'upsert', points: [{ id: normalizePointId(id), vectors: new Map([['', Float32Array.from([1, 0])]]), payload: { id } }] });

test('a write goes to every replica that accepts writes with one clock tag; Dead and Recovery get nothing', async (t) => {
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Active', '3': 'Partial', '4': 'Dead', '5': 'Recovery', '6': 'Listener' });
  await set.update(upsert(1), WAIT);
  const got = [local, ...['2', '3', '6'].map((p) => link.remote({ collection: 'c', uuid: 'u', shard: 0 }, p))];
  for (const r of got) t.is(r.ops.length, 1, `peer ${r.peer}`);
  t.is(link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '4').ops.length, 0);
  t.is(link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '5').ops.length, 0);
  const tags = got.map((r) => r.tags[0]);
  t.truthy(tags[0]);
  for (const tag of tags) t.deepEqual(tag, tags[0]);
  t.is(tags[0]!.peer, 1n);
});

test('write_consistency_factor 1: a replica that fails is marked Dead before the write answers; if it cannot be marked, the write says its consistency is not guaranteed', async (t) => {
  const { set, link } = setOf({ '1': 'Active', '2': 'Active' });
  link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '2').failWith(new ShardUnavailableError('peer 2 cannot be reached'));
  await set.update(upsert(1), WAIT);
  t.deepEqual(link.deactivated, [['2']]);
  link.deactivateFails = new ShardUnavailableError('no leader');
  const err = await t.throwsAsync(set.update(upsert(2), WAIT), { instanceOf: ShardUnavailableError });
  t.regex(err!.message, /could not be marked Dead: the consistency of this write is not guaranteed/);
});

test('write_consistency_factor 2: one success of two fails the write as possibly partial, and the failed replica is still marked Dead', async (t) => {
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Active' }, 2);
  link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '2').failWith(new ShardUnavailableError('peer 2 cannot be reached'));
  const err = await t.throwsAsync(set.update(upsert(1), WAIT), { instanceOf: ShardUnavailableError });
  t.regex(err!.message, /reached 1 of 2 replicas .* fewer than write_consistency_factor 2; it may be partially applied \(retrying it is safe\)/);
  t.is(local.ops.length, 1);
  t.deepEqual(link.deactivated, [['2']]);
});

test('fewer replicas accepting writes than write_consistency_factor: refused before anything is sent', async (t) => {
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Dead' }, 2);
  const err = await t.throwsAsync(set.update(upsert(1), WAIT), { instanceOf: ShardUnavailableError });
  t.regex(err!.message, /has 1 replica that accept writes, fewer than write_consistency_factor 2 .* nothing was written/);
  t.is(local.ops.length, 0);
  t.is(link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '2').ops.length, 0);
});

test('a request fault on every replica is the request error, and marks nothing Dead', async (t) => {
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Active' });
  local.failWith(new BadInputError('bad'));
  link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '2').failWith(new BadInputError('bad'));
  await t.throwsAsync(set.update(upsert(1), WAIT), { instanceOf: BadInputError, message: 'Wrong input: bad' });
  t.deepEqual(link.deactivated, []);
});

test('a write that only non-active replicas took fails: no source of truth has it', async (t) => {
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Partial' });
  local.failWith(new ShardUnavailableError('disk'));
  const err = await t.throwsAsync(set.update(upsert(1), WAIT), { instanceOf: ShardUnavailableError });
  t.regex(err!.message, /reached 1 of 2 replicas .* \(none of them active\), and a write needs an active one/);
  t.deepEqual(link.deactivated, [['1']]);
});

test('ordering: strong goes through the highest peer id and is refused while it is down; medium through the highest live active one', async (t) => {
  const { set, link, local } = setOf({ '1': 'Active', '5': 'Active', '3': 'Active' });
  t.is(await set.update(upsert(1), { ...WAIT, ordering: 'strong' }), 7);
  t.deepEqual(link.forwarded, ['5']);
  link.down.add('5');
  await t.throwsAsync(set.update(upsert(1), { ...WAIT, ordering: 'strong' }), { instanceOf: ShardUnavailableError, message: /go through the replica on peer 5, which is unreachable/ });
  await set.update(upsert(1), { ...WAIT, ordering: 'medium' });
  t.deepEqual(link.forwarded, ['5', '3']);
  set.setStates({ '1': 'Active', '5': 'Dead', '3': 'Dead' }, '1');
  // This peer leads: it applies the write itself.
  await set.update(upsert(2), { ...WAIT, ordering: 'medium' });
  t.is(local.ops.length, 1);
  await t.throwsAsync(set.update(upsert(1), { ...WAIT, ordering: 'strong' }), { message: /which is Dead/ });
});

test('read consistency counts the shard\'s replicas whatever their state: all fails with a Dead replica; a factor asks that many and the newest version wins', async (t) => {
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Active', '3': 'Dead' });
  const r2 = link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '2');
  await local.update(upsert(1), WAIT);
  await r2.update(upsert(1), WAIT);
  await r2.update({ kind: 'set_payload', select: { ids: [normalizePointId(1)], filter: null }, payload: { newer: true }, key: null }, WAIT);
  const all = await t.throwsAsync(set.count(null, { consistency: 'all', timeout: null }), { instanceOf: ShardUnavailableError });
  t.regex(all!.message, /does not have enough active replicas for read consistency `all`: 0 of 3 needed answers/);
  const got = await set.retrieve({ ids: [normalizePointId(1)], withPayload: true, withVector: false }, { consistency: { factor: 2 }, timeout: null });
  t.deepEqual(got[0].payload, { id: 1, newer: true });
  t.is(r2.calls.filter((c) => c.method === 'retrieve').length, 1);
  // The default asks one replica: this peer's.
  const before = r2.calls.length;
  t.is((await set.retrieve({ ids: [normalizePointId(1)], withPayload: true, withVector: false }, ONE)).length, 1);
  t.is(r2.calls.length, before);
});

test('a listener takes writes and serves reads only when no other replica can', async (t) => {
  const { set, local, link } = setOf({ '1': 'Listener', '2': 'Active' });
  const r2 = link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '2');
  await set.update(upsert(1), WAIT);
  t.is(local.ops.length, 1);
  t.is(r2.ops.length, 1);
  await set.count(null, ONE);
  t.is(local.calls.filter((c) => c.method === 'count').length, 0);
  t.is(r2.calls.filter((c) => c.method === 'count').length, 1);
  set.setStates({ '1': 'Listener', '2': 'Dead' }, '1');
  t.is(await set.count(null, ONE), 1);
  t.is(local.calls.filter((c) => c.method === 'count').length, 1);
});

test('a failed replica that consensus cannot mark Dead now (no majority) is left out by this peer, and the write goes on; it is back once consensus changes its state', async (t) => {
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Active' });
  const r2 = link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '2');
  r2.failWith(new ShardUnavailableError('peer 2 cannot be reached'));
  link.deferring.add('2');
  await set.update(upsert(1), WAIT);
  t.is(local.ops.length, 1);
  // Left out of writes and reads while consensus has it Active.
  await set.update(upsert(2), WAIT);
  t.is(r2.calls.filter((c) => c.method === 'update').length, 1);
  await set.count(null, { consistency: { factor: 1 }, timeout: null });
  t.is(r2.calls.filter((c) => c.method === 'count').length, 0);
  // Consensus marks it Dead, then a recovery makes it Active again: it takes writes again.
  set.setStates({ '1': 'Active', '2': 'Dead' }, '1');
  set.setStates({ '1': 'Active', '2': 'Active' }, '1');
  r2.failWith(null);
  await set.update(upsert(3), WAIT);
  t.is(r2.ops.length, 1);
});

test('a replica that applied the write but could not take out the transfer target that missed it (write_unconfirmed, as another peer sends it): the write fails as not guaranteed, and that replica is not marked Dead', async (t) => {
  // The kind as it arrives over the wire: the class is lost, the kind travels.
  const unconfirmed = () => new QuiverError('write_unconfirmed', '', 'Write not confirmed: peer 2 applied the write, but the target of its transfer of shard 0 (peer 3) missed it and could not be marked Dead');
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Active' });
  link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '2').failWith(unconfirmed());
  const err = await t.throwsAsync(set.update(upsert(1), WAIT), { instanceOf: ShardUnavailableError });
  t.regex(err!.message, /applied on 2 replicas .* but a shard transfer's target that missed it could not be taken out of service: the consistency of this write is not guaranteed .*peer 3/);
  t.is(local.ops.length, 1);
  t.deepEqual(link.deactivated, [], 'the replica that holds the write is not at fault');
  // The only replica this peer writes to (a move's source during its forwarding grace, this peer's placement behind).
  const alone = setOf({ '2': 'Active' });
  alone.link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '2').failWith(unconfirmed());
  await t.throwsAsync(alone.set.update(upsert(1), WAIT), { instanceOf: ShardUnavailableError, message: /consistency of this write is not guaranteed/ });
  t.deepEqual(alone.link.deactivated, []);
});

test('a write that first checks its ids exist goes to the replicas that accept writes once that read is done: a move that ended during the read has its target take the write', async (t) => {
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Active' });
  const target = { collection: 'c', uuid: 'u', shard: 0 };
  const meta = { config: parseCreateCollection({ vectors: { size: 2, distance: 'Dot' }, replication_factor: 2 }, config), payload_schema: {}, cluster: { uuid: 'u', peer: '1', shards: [{ id: 0, replicas: { '1': 'Active' as const, '2': 'Active' as const } }] } };
  const c = Collection.overReplicas('c', meta, () => [set], pino({ level: 'silent' }));
  await c.update(upsert(1), WAIT);
  t.is(link.remote(target, '2').ops.length, 1);
  // While the write reads whether point 1 exists, the move of peer 2's replica to peer 3 ends.
  local.onRetrieve = () => {
    local.onRetrieve = null;
    set.setStates({ '1': 'Active', '3': 'Active' }, '1');
  };
  await c.update({ kind: 'set_payload', select: { ids: [normalizePointId(1)], filter: null }, payload: { a: 1 }, key: null }, WAIT);
  t.is(local.ops.length, 2);
  t.is(link.remote(target, '3').ops.length, 1, 'the move\'s target took the write');
  t.is(link.remote(target, '2').ops.length, 1, 'the dropped source got nothing more');
});

test('a marking deferred before this peer restarted leaves that replica out from the first placement on (later placements do not add it again), until the marking ends', async (t) => {
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Active' });
  const target = { collection: 'c', uuid: 'u', shard: 0 };
  link.deferring.add('2');
  set.setStates({ '1': 'Active', '2': 'Active' }, '1');
  await set.update(upsert(1), WAIT);
  t.is(local.ops.length, 1);
  t.is(link.remote(target, '2').ops.length, 0, 'left out');
  // The marking ends (refused: the replica sets take the replica back).
  link.deferring.delete('2');
  set.readmit('2');
  await set.update(upsert(2), WAIT);
  t.is(link.remote(target, '2').ops.length, 1);
  // A later placement does not leave it out again, even if a marking is pending meanwhile
  // (one deferred now is left out by the write that deferred it).
  link.deferring.add('2');
  set.setStates({ '1': 'Active', '2': 'Active' }, '1');
  await set.update(upsert(3), WAIT);
  t.is(link.remote(target, '2').ops.length, 2);
});

test('a replica whose deferred marking could not be written to disk is left out all the same: the write fails as not guaranteed, and later writes do not reach it above the one it missed', async (t) => {
  const { set, local, link } = setOf({ '1': 'Active', '2': 'Active' });
  const r2 = link.remote({ collection: 'c', uuid: 'u', shard: 0 }, '2');
  r2.failWith(new ShardUnavailableError('peer 2 cannot be reached'));
  link.deferring.add('2');
  link.deactivateFails = new ShardUnavailableError('the Dead marking of the replica on peer 2 could not be written to disk');
  await t.throwsAsync(set.update(upsert(1), WAIT), { instanceOf: ShardUnavailableError, message: /could not be marked Dead/ });
  r2.failWith(null);
  link.deactivateFails = null;
  await set.update(upsert(2), WAIT);
  t.is(local.ops.length, 2);
  t.is(r2.ops.length, 0, 'left out while its marking is pending');
});
