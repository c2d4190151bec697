/**
 * Read consistency over fake replicas (no process): how many replicas each level asks
 * and waits for, falling over on a replica's own failure but not on a request fault,
 * the ShardUnavailableError when too few can answer, speculative fan-out (at once and after a
 * delay) with its timer cleared, and the resolution of several answers by point
 * version (newest wins, majority drops what few replicas hold, counts by min or median,
 * the next page of a scroll).
 */

import test from 'ava';

import {
  answersNeeded,
  fanOutOf,
  isReplicaFault,
  readConsistent,
  resolveAnyMatch,
  resolveCount,
  resolveRetrieve,
  resolveScroll,
  resolveScrollOrdered,
  resolveSearch,
  type FanOut,
} from '../../ts/collection/read-consistency';
import { isReplicaFault as fromReplicaSet } from '../../ts/collection/replica-set';
import { DEFAULT_READ, type OrderedRecord, type PointRecord, type ReadConsistency, type Replica, type RetrieveRequest, type ScoredRecord, type UpdateOptions } from '../../ts/collection/replica';
import { BadInputError, NotFoundError, ShardUnavailableError } from '../../ts/common/errors';
import { normalizePointId } from '../../ts/shard/id-tracker';
import type { Payload } from '../../ts/shard/payload-store';
import { waitFor } from '../support/wait';
import { FakeReplica } from './fake-replica';

const WAIT: UpdateOptions = { wait: true, ordering: 'weak', timeout: null };
const NONE: FanOut = { factor: 0, delayMs: 0 };
const WHERE = 'shard 2 of collection `c`';

/** `n` empty replicas of one shard, peers p1..pn, the first local. */
function replicas(n: number): FakeReplica[] {
  return Array.from({ length: n }, (_, i) => new FakeReplica(`p${i + 1}`, i === 0));
}

/** Upserts point `id` with `payload` on each of `to` (each upsert raises the point's version on that replica by one). */
async function put(to: FakeReplica[], id: number, payload: Payload): Promise<void> {
  for (const r of to) {
    await r.update({ kind: 'upsert', points: [{ id: normalizePointId(id), vectors: new Map([['', Float32Array.from([1, 0])]]), payload }] }, WAIT);
  }
}

const retrieveReq = (...ids: number[]): RetrieveRequest => ({ ids: ids.map(normalizePointId), withPayload: true, withVector: false });

/** Which replicas were asked, in order, and calls the test holds until it releases or fails them. */
class Gates {
  readonly asked: string[] = [];
  private readonly holding = new Set<string>();
  private readonly waiting = new Map<string, { go: () => void; fail: (err: Error) => void }>();

  constructor(...held: string[]) {
    for (const p of held) this.holding.add(p);
  }

  /** `read` of replica `r`, run at once unless `r` is held. */
  through<T>(r: Replica, read: () => Promise<T>): Promise<T> {
    this.asked.push(r.peer);
    if (!this.holding.has(r.peer)) return read();
    return new Promise<T>((resolve, reject) => {
      this.waiting.set(r.peer, { go: () => void read().then(resolve, reject), fail: reject });
    });
  }

  release(peer: string): void {
    this.waiting.get(peer)!.go();
  }

  fail(peer: string, err: Error): void {
    this.waiting.get(peer)!.fail(err);
  }
}

function retrieveFrom(rs: FakeReplica[], consistency: ReadConsistency, opts: { fanOut?: FanOut; gates?: Gates; count?: number; ids?: number[] } = {}) {
  const gates = opts.gates ?? new Gates();
  const req = retrieveReq(...(opts.ids ?? [1]));
  return readConsistent(rs, consistency, opts.fanOut ?? NONE, (r) => gates.through(r, () => r.retrieve(req, DEFAULT_READ)), resolveRetrieve, WHERE, opts.count);
}

/** Peers whose replica has been read from (writes that set a test up are left out). */
const peersCalled = (rs: FakeReplica[]) => rs.filter((r) => r.calls.some((c) => c.method !== 'update')).map((r) => r.peer);

// -- levels ---------------------------------------------------------------------------------

test('answers needed: a factor clamped to [1, replicas], quorum half plus one, majority and all every replica', (t) => {
  const needed = (c: ReadConsistency, n: number) => answersNeeded(c, n);
  t.deepEqual(needed({ factor: 1 }, 3), { needed: 1, mode: 'all' });
  t.deepEqual(needed({ factor: 2 }, 3), { needed: 2, mode: 'all' });
  t.deepEqual(needed({ factor: 7 }, 3), { needed: 3, mode: 'all' });
  t.deepEqual(needed({ factor: 0 }, 3), { needed: 1, mode: 'all' });
  t.deepEqual(needed('quorum', 1), { needed: 1, mode: 'all' });
  t.deepEqual(needed('quorum', 3), { needed: 2, mode: 'all' });
  t.deepEqual(needed('quorum', 4), { needed: 3, mode: 'all' });
  t.deepEqual(needed('majority', 3), { needed: 3, mode: 'majority' });
  t.deepEqual(needed('all', 4), { needed: 4, mode: 'all' });
});

test('one replica and one answer: the call itself is returned (no wrapping, no timer, no resolution)', (t) => {
  const [r] = replicas(1);
  const p = Promise.resolve(42);
  const resolve = () => {
    throw new Error('resolve must not run');
  };
  t.is(readConsistent([r], { factor: 1 }, { factor: 3, delayMs: 5 }, () => p, resolve, WHERE), p);
  t.is(readConsistent([r], 'all', NONE, () => p, resolve, WHERE), p);
});

test('factor 1 asks this peer\'s replica only; factor 2 the first two, and the newer version of a point wins', async (t) => {
  const rs = replicas(3);
  await put(rs, 1, { v: 'old' });
  await put([rs[1]], 1, { v: 'new' });
  t.deepEqual((await retrieveFrom(rs, { factor: 1 })).map((p) => p.payload), [{ v: 'old' }]);
  t.deepEqual(peersCalled(rs), ['p1']);
  const two = await retrieveFrom(rs, { factor: 2 });
  t.deepEqual(two, [{ id: 1, version: 2, payload: { v: 'new' } }]);
  t.deepEqual(peersCalled(rs), ['p1', 'p2']);
});

test('quorum asks half plus one, all asks every replica', async (t) => {
  const rs = replicas(3);
  await put(rs, 1, { v: 1 });
  await retrieveFrom(rs, 'quorum');
  t.deepEqual(peersCalled(rs), ['p1', 'p2']);
  await retrieveFrom(rs, 'all');
  t.deepEqual(peersCalled(rs), ['p1', 'p2', 'p3']);
});

test('majority asks every replica and keeps only the points most of them hold; all keeps any', async (t) => {
  const rs = replicas(3);
  await put(rs, 1, { v: 1 });
  await put([rs[0]], 2, { v: 2 }); // a point only this peer has
  await put([rs[1], rs[2]], 3, { v: 3 });
  const majority = await retrieveFrom(rs, 'majority', { ids: [1, 2, 3] });
  t.deepEqual(majority.map((p) => p.id), [1, 3]);
  t.deepEqual(peersCalled(rs), ['p1', 'p2', 'p3']);
  t.deepEqual((await retrieveFrom(rs, 'all', { ids: [1, 2, 3] })).map((p) => p.id), [1, 2, 3]);
});

// -- failures -------------------------------------------------------------------------------

test('one replica down: the next unused one is asked instead', async (t) => {
  const rs = replicas(3);
  await put(rs, 1, { v: 1 });
  rs[0].failWith(new ShardUnavailableError('p1 is gone'));
  t.deepEqual((await retrieveFrom(rs, { factor: 1 })).map((p) => p.id), [1]);
  t.deepEqual(peersCalled(rs), ['p1', 'p2']);
  rs[1].failWith(new Error('connection reset'));
  t.deepEqual((await retrieveFrom(rs, { factor: 1 })).map((p) => p.id), [1], 'an error of no known kind is the replica\'s own too');
  t.deepEqual(peersCalled(rs), ['p1', 'p2', 'p3']);
});

test('two replicas down out of three: quorum cannot be met and the ShardUnavailableError names the shard, the counts and the first failure', async (t) => {
  const rs = replicas(3);
  await put(rs, 1, { v: 1 });
  rs[0].failWith(new ShardUnavailableError('p1 is gone'));
  rs[2].failWith(new Error('p3 timed out'));
  const err = await t.throwsAsync(retrieveFrom(rs, 'quorum'), { instanceOf: ShardUnavailableError });
  t.is(
    err!.message,
    'Shard temporarily unavailable: shard 2 of collection `c` does not have enough active replicas for read consistency `quorum`: ' +
      '1 of 2 needed answers; 2 of 3 replicas failed, the first with: Shard temporarily unavailable: p1 is gone',
  );
  // A factor of 1 still reads (p2 answers).
  t.deepEqual((await retrieveFrom(rs, { factor: 1 })).map((p) => p.id), [1]);
});

test('a request fault is thrown at once and no other replica is asked', async (t) => {
  const rs = replicas(3);
  rs[0].failWith(new BadInputError('bad filter'));
  await t.throwsAsync(retrieveFrom(rs, { factor: 1 }), { instanceOf: BadInputError, message: 'Wrong input: bad filter' });
  t.deepEqual(peersCalled(rs), ['p1']);
  rs[0].failWith(new NotFoundError('no such point'));
  await t.throwsAsync(retrieveFrom(rs, 'all'), { instanceOf: NotFoundError });
  t.true(isReplicaFault(new Error('x')));
  t.false(isReplicaFault(new BadInputError('x')));
  t.is(fromReplicaSet, isReplicaFault, 'replica-set re-exports the same function');
});

test('too few replicas for the level: a ShardUnavailableError (503) before any replica is asked', async (t) => {
  const rs = replicas(2);
  const err = await t.throwsAsync(retrieveFrom(rs, 'all', { count: 3 }), { instanceOf: ShardUnavailableError });
  t.is(
    err!.message,
    'Shard temporarily unavailable: shard 2 of collection `c` does not have enough active replicas for read consistency `all`: 0 of 3 needed answers; 2 of 3 replicas serve reads',
  );
  t.deepEqual(peersCalled(rs), []);
  await t.throwsAsync(retrieveFrom(rs, { factor: 3 }, { count: 3 }), { instanceOf: ShardUnavailableError, message: /read consistency `3`: 0 of 3 needed answers/ });
  await t.throwsAsync(retrieveFrom([], { factor: 1 }), { instanceOf: ShardUnavailableError, message: /0 of 1 needed answers; 0 of 0 replicas serve reads/ });
  // Quorum of three with two serving reads is still met.
  await put(rs, 1, { v: 1 });
  t.deepEqual((await retrieveFrom(rs, 'quorum', { count: 3 })).map((p) => p.id), [1]);
});

// -- fan-out --------------------------------------------------------------------------------

test('read_fan_out_factor asks extra replicas at once and the first answers win', async (t) => {
  const rs = replicas(3);
  await put([rs[0]], 1, { from: 'p1' });
  await put([rs[1], rs[1]], 1, { from: 'p2' }); // a newer version: it would win a resolution
  await put([rs[2]], 1, { from: 'p3' });
  const gates = new Gates('p1');
  const got = await retrieveFrom(rs, { factor: 1 }, { fanOut: { factor: 1, delayMs: 0 }, gates });
  t.deepEqual(got.map((p) => p.payload), [{ from: 'p2' }], 'the quick replica answered; the slow one is not waited for');
  t.deepEqual(gates.asked, ['p1', 'p2']);
  // The slow answer arriving, or failing, after the read settled changes nothing.
  gates.fail('p1', new Error('late'));

  const two = new Gates('p1');
  const both = await retrieveFrom(rs, { factor: 2 }, { fanOut: { factor: 1, delayMs: 0 }, gates: two });
  t.deepEqual(two.asked, ['p1', 'p2', 'p3']);
  t.deepEqual(both.map((p) => p.payload), [{ from: 'p2' }], 'p2 and p3 answered first; the newer (p2) wins');
  two.release('p1');
});

test('read_fan_out_delay_ms asks one more replica when the first is slow', async (t) => {
  const rs = replicas(3);
  await put(rs, 1, { v: 1 });
  const gates = new Gates('p1', 'p2');
  const read = retrieveFrom(rs, { factor: 1 }, { fanOut: { factor: 0, delayMs: 5 }, gates });
  await waitFor('the second replica to be asked', () => gates.asked.length === 2);
  t.deepEqual(gates.asked, ['p1', 'p2']);
  gates.release('p2');
  t.deepEqual((await read).map((p) => p.id), [1]);
  t.deepEqual(peersCalled(rs), ['p2'], 'p1 never answered');
  t.deepEqual(gates.asked, ['p1', 'p2'], 'one more, not every replica');
  gates.release('p1');
});

test.serial('the delay timer is cleared when the read settles, whether it answers or fails', async (t) => {
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  const rs = replicas(3);
  await put(rs, 1, { v: 1 });
  const before = timers();
  const slow: FanOut = { factor: 0, delayMs: 600_000 };
  const read = retrieveFrom(rs, { factor: 1 }, { fanOut: slow });
  t.is(timers(), before + 1, 'the delay is armed while the read waits');
  t.deepEqual((await read).map((p) => p.id), [1]);
  t.is(timers(), before);
  t.deepEqual(peersCalled(rs), ['p1']);

  rs[0].failWith(new BadInputError('bad'));
  await t.throwsAsync(retrieveFrom(rs, { factor: 1 }, { fanOut: slow }), { instanceOf: BadInputError });
  t.is(timers(), before);
  rs[0].failWith(new Error('down'));
  rs[1].failWith(new Error('down'));
  rs[2].failWith(new Error('down'));
  await t.throwsAsync(retrieveFrom(rs, { factor: 1 }, { fanOut: slow }), { instanceOf: ShardUnavailableError, message: /3 of 3 replicas failed, the first with: down/ });
  t.is(timers(), before);
});

test('fan-out settings come from the collection params; unset ones ask no extra replica', (t) => {
  t.deepEqual(fanOutOf({}), { factor: 0, delayMs: 0 });
  t.deepEqual(fanOutOf({ read_fan_out_factor: 2, read_fan_out_delay_ms: 30 }), { factor: 2, delayMs: 30 });
});

// -- resolution -----------------------------------------------------------------------------

const rec = (id: number, version: number, payload: Payload = {}): PointRecord => ({ id, version, payload });
const hit = (id: number, version: number, score: number): ScoredRecord => ({ id, version, score });
const ord = (id: number, version: number, orderValue: number): OrderedRecord => ({ id, version, orderValue });

test('retrieve: the newest version of each point, in the first answer\'s order then new ids; majority drops minority points', (t) => {
  const answers = [
    [rec(3, 1, { a: 'old' }), rec(1, 5)],
    [rec(3, 2, { a: 'new' }), rec(2, 1)],
    [rec(1, 4), rec(3, 1, { a: 'old' })],
  ];
  t.deepEqual(resolveRetrieve(answers, 'all'), [rec(3, 2, { a: 'new' }), rec(1, 5), rec(2, 1)]);
  t.deepEqual(resolveRetrieve(answers, 'majority'), [rec(3, 2, { a: 'new' }), rec(1, 5)]);
  // Of two answers, a majority is both.
  t.deepEqual(resolveRetrieve([[rec(1, 1), rec(2, 1)], [rec(2, 1)]], 'majority'), [rec(2, 1)]);
});

test('search: the newest version\'s score, re-sorted in the distance\'s direction and cut to the limit', (t) => {
  const answers = [
    [hit(1, 1, 0.9), hit(2, 1, 0.8), hit(3, 1, 0.1)],
    [hit(2, 2, 0.95), hit(1, 1, 0.9), hit(4, 1, 0.5)],
  ];
  t.deepEqual(resolveSearch(3, true)(answers, 'all'), [hit(2, 2, 0.95), hit(1, 1, 0.9), hit(4, 1, 0.5)]);
  t.deepEqual(resolveSearch(2, false)(answers, 'all'), [hit(3, 1, 0.1), hit(4, 1, 0.5)], 'lower is better (Euclid, Manhattan)');
  t.deepEqual(resolveSearch(10, true)(answers, 'majority'), [hit(2, 2, 0.95), hit(1, 1, 0.9)]);
});

test('scroll: points in id order cut to the limit; the next offset is the smallest id beyond the page any answer shows', (t) => {
  const scroll = resolveScroll(2);
  // The union has more than the limit: the third id, unless an answer's next is smaller.
  t.deepEqual(scroll([{ points: [rec(1, 1), rec(2, 1)], next: 3 }, { points: [rec(1, 1), rec(4, 1)], next: 5 }], 'all'), {
    points: [rec(1, 1), rec(2, 1)],
    next: 3,
  });
  t.deepEqual(scroll([{ points: [rec(1, 1), rec(2, 1)], next: 9 }, { points: [rec(1, 1), rec(4, 1)], next: 5 }], 'all'), {
    points: [rec(1, 1), rec(2, 1)],
    next: 4,
  });
  // The union fits the page: the smallest next of the answers, or null.
  t.deepEqual(scroll([{ points: [rec(1, 1)], next: null }, { points: [rec(1, 2), rec(2, 1)], next: 7 }], 'all'), {
    points: [rec(1, 2), rec(2, 1)],
    next: 7,
  });
  t.deepEqual(scroll([{ points: [rec(1, 1)], next: null }, { points: [rec(1, 1)], next: null }], 'all'), { points: [rec(1, 1)], next: null });
  // UUIDs come after integers.
  const u = '00000000-0000-4000-8000-000000000001';
  t.deepEqual(resolveScroll(1)([{ points: [{ id: u, version: 1 }], next: null }, { points: [rec(8, 1)], next: u }], 'all'), { points: [rec(8, 1)], next: u });
  // Majority: a next at or before the page's last id (an answer whose page ended on dropped points) is not taken.
  const three = [
    { points: [rec(1, 1), rec(2, 1)], next: 3 },
    { points: [rec(1, 1), rec(3, 1)], next: 4 },
    { points: [rec(3, 1), rec(4, 1)], next: 5 },
  ];
  t.deepEqual(scroll(three, 'majority'), { points: [rec(1, 1), rec(3, 1)], next: 4 });
});

test('scroll by payload value: the newest version\'s value, sorted in the request\'s direction and cut', (t) => {
  const answers = [
    [ord(1, 1, 10), ord(2, 1, 20)],
    [ord(2, 2, 5), ord(3, 1, 30)],
  ];
  t.deepEqual(resolveScrollOrdered(2, 'asc')(answers, 'all'), [ord(2, 2, 5), ord(1, 1, 10)]);
  t.deepEqual(resolveScrollOrdered(2, 'desc')(answers, 'all'), [ord(3, 1, 30), ord(1, 1, 10)]);
  t.deepEqual(resolveScrollOrdered(5, 'asc')(answers, 'majority'), [ord(2, 2, 5)]);
});

test('count: the smallest (all) or the median (majority); any match: in any answer (all) or most (majority)', (t) => {
  t.is(resolveCount([7, 5, 9], 'all'), 5);
  t.is(resolveCount([7, 5, 9], 'majority'), 7);
  t.is(resolveCount([4, 1, 9, 6], 'majority'), 6);
  t.true(resolveAnyMatch([false, true, false], 'all'));
  t.false(resolveAnyMatch([false, true, false], 'majority'));
  t.true(resolveAnyMatch([true, true, false], 'majority'));
  t.false(resolveAnyMatch([true, false], 'majority'));
});

test('count and search through the executor: majority over three replicas', async (t) => {
  const rs = replicas(3);
  await put(rs, 1, { v: 1 });
  await put([rs[0], rs[1]], 2, { v: 2 });
  await put([rs[2]], 3, { v: 3 });
  const count = (c: ReadConsistency) => readConsistent(rs, c, NONE, (r) => r.count(null, DEFAULT_READ), resolveCount, WHERE);
  t.is(await count('all'), 2);
  t.is(await count('majority'), 2);
  t.is(await count({ factor: 1 }), 2);
  const req = { using: '', vector: Float32Array.from([1, 0]), filter: null, limit: 10, offset: 0, scoreThreshold: null, withPayload: false, withVector: false };
  const hits = await readConsistent(rs, 'majority', NONE, (r) => r.search(req, DEFAULT_READ), resolveSearch(10, true), WHERE);
  t.deepEqual(hits.map((h) => h.id).sort(), [1, 2]);
});
