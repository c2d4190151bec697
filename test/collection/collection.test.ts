/**
 * The collection over fake replicas (no shard on disk, no process): points reach the
 * shard their id hashes to, reads are merged across shards (top-k by score, scroll in
 * id order with paging, counts summed), queries resolve example ids through the
 * replicas, options reach the replica, and a failing or unreachable replica surfaces
 * as the right error kind, with a read falling over to another replica when the
 * failure is the replica's own.
 */

import test from 'ava';
import pino from 'pino';

import { Collection, type ClusterPlacement, type CollectionMeta } from '../../ts/collection/collection';
import { parseCreateCollection } from '../../ts/collection/config';
import { type QueryRequest } from '../../ts/collection/query';
import { compareIds, DEFAULT_READ, type PointId, type ReadOptions, type UpdateOptions } from '../../ts/collection/replica';
import { decodeReplicaOperation, encodeReplicaOperation, type ReplicaOperation } from '../../ts/collection/replica-operation';
import { ReplicaSet } from '../../ts/collection/replica-set';
import { acceptsWrites, isActive, REPLICA_STATES, servesReads, type ReplicaState } from '../../ts/collection/replica-state';
import { BadInputError, NotFoundError, NotImplementedError, ServiceError, ShardUnavailableError } from '../../ts/common/errors';
import { loadConfig } from '../../ts/config';
import { crc32c } from '../../ts/common/crc32c';
import { normalizePointId, type PointKey } from '../../ts/shard/id-tracker';
import type { PointWrite } from '../../ts/shard/operations';
import type { Payload } from '../../ts/shard/payload-store';
import { mulberry32 } from '../support/rng';
import { FakeReplica } from './fake-replica';

const logger = pino({ level: 'silent' });
const config = loadConfig({ env: {} });
const WAIT: UpdateOptions = { wait: true, ordering: 'weak', timeout: null };

function meta(shards: number, cluster?: ClusterPlacement): CollectionMeta {
  return { config: parseCreateCollection({ vectors: { size: 2, distance: 'Dot' }, shard_number: shards }, config), payload_schema: {}, cluster };
}

/** A collection whose shard i has the replicas `replicas[i]` (states from `cluster`, else all Active on a single node). */
function collection(replicas: FakeReplica[][], cluster?: ClusterPlacement): Collection {
  return Collection.overReplicas('c', meta(replicas.length, cluster), (name, peer) =>
    replicas.map((rs, i) => new ReplicaSet(i, name, peer, rs, cluster ? cluster.shards[i].replicas : null)),
  logger);
}

/** One local fake replica per shard. */
function sharded(n: number): { c: Collection; shards: FakeReplica[] } {
  const shards = Array.from({ length: n }, (_, i) => new FakeReplica('', true, 1000 * i));
  return { c: collection(shards.map((s) => [s])), shards };
}

/** A cluster placement on peer '1' with one shard whose replicas have `states`. */
function placement(states: Record<string, ReplicaState>): ClusterPlacement {
  return { uuid: 'u', peer: '1', shards: [{ id: 0, replicas: states }] };
}

const key = (id: number | string): PointKey => normalizePointId(id);
const point = (id: number | string, vector: number[], payload: Payload | null = null): PointWrite => ({
  id: key(id),
  vectors: new Map([['', Float32Array.from(vector)]]),
  payload,
});
const upsert = (points: PointWrite[]): ReplicaOperation => ({ kind: 'upsert', points });

function query(over: Partial<QueryRequest> & Pick<QueryRequest, 'query'>): QueryRequest {
  return { using: '', filter: null, limit: 10, offset: 0, scoreThreshold: null, withPayload: false, withVector: false, ...over };
}

/** Random points on three shards, and the same points as a flat list. */
async function filled(n: number, seed: number): Promise<{ c: Collection; shards: FakeReplica[]; all: PointWrite[] }> {
  const { c, shards } = sharded(3);
  const rnd = mulberry32(seed);
  const all = Array.from({ length: n }, (_, i) => point(i % 5 === 4 ? uuidOf(i) : i, [rnd() * 2 - 1, rnd() * 2 - 1], { n: i, even: i % 2 === 0 }));
  await c.update(upsert(all), WAIT);
  return { c, shards, all };
}

function uuidOf(i: number): string {
  return `00000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`;
}

test('points go to the shard their id hashes to (crc32c of the id over shard_number, the on-disk layout)', async (t) => {
  const { c, shards } = sharded(3);
  const ids: Array<number | string> = [...Array.from({ length: 30 }, (_, i) => i), uuidOf(7), '550e8400-e29b-41d4-a716-446655440000'];
  await c.update(upsert(ids.map((id) => point(id, [1, 0]))), WAIT);
  for (const id of ids) {
    const k = key(id);
    const want = crc32c(Buffer.from(k.key, 'utf8')) % 3;
    t.true(shards[want].points.has(k.key), `${id} on shard ${want}`);
  }
  // Pinned: stored shards depend on this function, so it must never change.
  t.deepEqual(shards[0].ids().filter((id) => typeof id === 'number').sort((a, b) => compareIds(a, b)), [0, 3, 11, 12, 15, 16, 17, 18, 27, 28, 29]);
  t.deepEqual(shards[1].ids().filter((id) => typeof id === 'number').sort((a, b) => compareIds(a, b)), [1, 2, 6, 7, 9, 10, 20, 21]);
  t.true(shards[1].points.has(key('550e8400-e29b-41d4-a716-446655440000').key));
  // Each shard got one operation with only its own points.
  for (const s of shards) {
    t.is(s.ops.length, 1);
    t.is((s.ops[0] as Extract<ReplicaOperation, { kind: 'upsert' }>).points.length, s.points.size);
  }
});

test('a write answers the highest operation id of its shards; an empty upsert still logs on the first shard', async (t) => {
  const { c, shards } = sharded(3);
  const res = await c.update(upsert([point(3, [1, 0]), point(1, [1, 0]), point(4, [1, 0])]), WAIT);
  t.deepEqual(res, { operation_id: 2001, status: 'completed' });
  const empty = await c.update(upsert([]), { ...WAIT, wait: false });
  t.deepEqual(empty, { operation_id: 2, status: 'acknowledged' });
  t.deepEqual(
    shards.map((s) => s.ops.length),
    [2, 1, 1],
  );
});

test('selectors travel unresolved: explicit ids split per shard, a filter goes to every shard; each replica resolves its own', async (t) => {
  const { c, shards, all } = await filled(40, 1);
  const byIds: ReplicaOperation = { kind: 'set_payload', select: { ids: [key(1), key(3), key(5)], filter: null }, payload: { tagged: true }, key: null };
  await c.update(byIds, WAIT);
  t.deepEqual(
    shards.map((s) => (s.ops[1] as Extract<ReplicaOperation, { select: unknown }>).select.ids?.map((k) => Number(k.value))),
    [[3], [1], [5]],
  );
  const byFilter: ReplicaOperation = { kind: 'delete', select: { ids: null, filter: { must: [{ key: 'even', match: { value: true } }] } } };
  await c.update(byFilter, WAIT);
  for (const s of shards) t.deepEqual(s.ops[2], byFilter);
  t.is(await c.count(null), all.length / 2);
});

test('an explicit id that no shard holds is a 404 before anything is written anywhere', async (t) => {
  const { c, shards } = await filled(10, 2);
  const before = shards.map((s) => s.ops.length);
  const err = await t.throwsAsync(c.update({ kind: 'clear_payload', select: { ids: [key(1), key(999), key(3)], filter: null } }, WAIT));
  t.true(err instanceof NotFoundError);
  t.is(err?.message, 'Not found: No point with id 999 found');
  t.deepEqual(
    shards.map((s) => s.ops.length),
    before,
  );
  // A vector that does not fit is refused before routing, too.
  const bad = await t.throwsAsync(c.update(upsert([point(1, [1, 0]), point(2, [1, 0, 0])]), WAIT));
  t.true(bad instanceof BadInputError);
  t.deepEqual(
    shards.map((s) => s.ops.length),
    before,
  );
});

test('the top k across shards is the top k of all points, with offset, score threshold and exclusions', async (t) => {
  const { c, all } = await filled(60, 3);
  const q = [0.3, -0.8];
  const score = (p: PointWrite) => Math.fround(p.vectors.get('')![0] * q[0] + p.vectors.get('')![1] * q[1]);
  const ranked = [...all].sort((a, b) => score(b) - score(a));
  const idOf = (p: PointWrite): PointId => (p.id.kind === 'num' ? Number(p.id.value) : p.id.value);
  const vector = Float32Array.from(q);

  const top = await c.query(query({ query: { nearest: { vector } }, limit: 7 }));
  t.deepEqual(
    top.map((h) => h.id),
    ranked.slice(0, 7).map(idOf),
  );
  t.deepEqual(Object.keys(top[0]), ['id', 'version', 'score']);

  const paged = await c.query(query({ query: { nearest: { vector } }, limit: 5, offset: 9, withPayload: true }));
  t.deepEqual(
    paged.map((h) => h.id),
    ranked.slice(9, 14).map(idOf),
  );
  t.deepEqual(Object.keys(paged[0]), ['id', 'version', 'score', 'payload']);

  const threshold = score(ranked[11]);
  const above = await c.query(query({ query: { nearest: { vector } }, limit: 50, scoreThreshold: threshold }));
  t.deepEqual(
    above.map((h) => h.id),
    ranked.filter((p) => score(p) >= threshold).map(idOf),
  );

  // By id: the point itself is excluded, the others ranked by its vector.
  const anchor = ranked[20];
  const near = await c.query(query({ query: { nearest: { id: anchor.id } }, limit: 3 }));
  t.false(near.some((h) => h.id === idOf(anchor)));
  t.is(near.length, 3);
});

test('a recommendation resolves its example ids through the replicas and averages them', async (t) => {
  const { c } = sharded(3);
  await c.update(upsert([point(1, [1, 0]), point(2, [0, 1]), point(4, [-1, 0]), point(5, [0.9, 0.1]), point(6, [0.1, 0.9])]), WAIT);
  // avg(pos) = (0.5, 0.5); with negative (-1, 0): (0.5, 0.5) + ((0.5, 0.5) - (-1, 0)) = (2, 1).
  const hits = await c.query(query({ query: { recommend: { positive: [{ id: key(1) }, { id: key(2) }], negative: [{ vector: Float32Array.from([-1, 0]) }] } } }));
  t.deepEqual(
    hits.map((h) => h.id),
    [5, 6, 4],
  );
  t.true(Math.abs(hits[0].score - 1.9) < 1e-6);
  const missing = await t.throwsAsync(c.query(query({ query: { recommend: { positive: [{ id: key(77) }], negative: [] } } })));
  t.true(missing instanceof NotFoundError);
  t.is(missing?.message, 'Not found: No point with id 77 found');
});

test('scroll walks all shards in id order (integers, then UUIDs) page by page', async (t) => {
  const { c, all } = await filled(53, 4);
  const want = all.map((p) => (p.id.kind === 'num' ? Number(p.id.value) : p.id.value)).sort(compareIds);
  const seen: PointId[] = [];
  let offset: PointKey | null = null;
  for (let pages = 0; pages < 20; pages++) {
    const page = await c.scroll({ offset, limit: 7, filter: null, withPayload: false, withVector: false });
    seen.push(...page.points.map((p) => p.id));
    for (const p of page.points) t.deepEqual(Object.keys(p), ['id']);
    if (page.next_page_offset === null) break;
    offset = normalizePointId(page.next_page_offset);
  }
  t.deepEqual(seen, want);

  // A filter, and the payload as asked.
  const evens = await c.scroll({ offset: null, limit: 100, filter: { must: [{ key: 'even', match: { value: true } }] }, withPayload: ['n'], withVector: false });
  t.deepEqual(
    evens.points.map((p) => p.id),
    want.filter((id) => (typeof id === 'number' ? id : parseInt(id.slice(-12), 16)) % 2 === 0),
  );
  t.deepEqual(Object.keys(evens.points[0]), ['id', 'payload']);
  t.is(evens.next_page_offset, null);
});

test('scroll by payload value merges shards in value order', async (t) => {
  const { c } = await filled(30, 5);
  const asc = await c.scrollOrdered({ orderBy: { key: 'n', direction: 'asc', start_from: null }, limit: 8, filter: null, withPayload: false, withVector: false });
  t.deepEqual(
    asc.points.map((p) => p.order_value),
    [0, 1, 2, 3, 4, 5, 6, 7],
  );
  t.deepEqual(Object.keys(asc.points[0]), ['id', 'order_value']);
  const desc = await c.scrollOrdered({ orderBy: { key: 'n', direction: 'desc', start_from: null }, limit: 3, filter: null, withPayload: false, withVector: false });
  t.deepEqual(
    desc.points.map((p) => p.order_value),
    [29, 28, 27],
  );
});

test('count is summed over shards; retrieve keeps the order asked, once per id', async (t) => {
  const { c } = await filled(31, 6);
  t.is(await c.count(null), 31);
  t.is(await c.count({ must: [{ key: 'even', match: { value: true } }] }), 16);
  t.true(await c.anyMatch({ must: [{ key: 'n', match: { value: 30 } }] }));
  t.false(await c.anyMatch({ must: [{ key: 'n', match: { value: 31 } }] }));
  const recs = await c.retrieve([key(8), key(uuidOf(4)), key(999), key(1), key(8)], true, false);
  t.deepEqual(
    recs.map((r) => r.id),
    [8, uuidOf(4), 1],
  );
  t.deepEqual(recs[0], { id: 8, payload: { n: 8, even: true } });
});

test('write and read options reach the replica as the API gave them', async (t) => {
  const { c, shards } = sharded(1);
  const opts: UpdateOptions = { wait: false, ordering: 'strong', timeout: 7 };
  await c.update(upsert([point(1, [1, 0])]), opts);
  const read: ReadOptions = { consistency: 'majority', timeout: 3 };
  await c.query(query({ query: { nearest: { vector: Float32Array.from([1, 0]) } } }), read);
  await c.count(null, read);
  t.deepEqual(shards[0].calls, [
    { method: 'update', opts },
    { method: 'search', opts: read },
    { method: 'count', opts: read },
  ]);
  await c.retrieve([key(1)], false, false);
  t.is(shards[0].calls[3].opts, DEFAULT_READ);
});

test("a replica's own failure fails a read it alone serves, with its error kind; with another replica the read falls over", async (t) => {
  const down = new ShardUnavailableError('the shard is closed');
  const { c, shards } = sharded(2);
  await c.update(upsert([point(1, [1, 0]), point(4, [0, 1])]), WAIT);
  shards[1].failWith(down);
  const err = await t.throwsAsync(c.count(null));
  t.is(err, down);

  // Two replicas of one shard: this peer's fails, the other answers.
  const local = new FakeReplica('1', true);
  const other = new FakeReplica('2', false);
  const c2 = collection([[local, other]], placement({ '1': 'Active', '2': 'Active' }));
  await c2.update(upsert([point(1, [1, 0])]), WAIT);
  t.is(local.points.size, 1);
  t.is(other.points.size, 1);
  local.failWith(down);
  t.is(await c2.count(null), 1);
  t.deepEqual(
    other.calls.map((x) => x.method),
    ['update', 'count'],
  );

  // An error of the request itself is the same on every replica: not asked again.
  local.failWith(new BadInputError('bad filter'));
  const bad = await t.throwsAsync(c2.count(null));
  t.true(bad instanceof BadInputError);
  t.is(other.calls.length, 2);

  // Both failing: the preferred replica's error.
  local.failWith(down);
  other.failWith(new ServiceError('connection reset'));
  t.is(await t.throwsAsync(c2.count(null)), down);
});

test('a write fails with the error of a replica that fails it', async (t) => {
  const local = new FakeReplica('1', true);
  const other = new FakeReplica('2', false).failWith(new ShardUnavailableError('busy'));
  const c = collection([[local, other]], placement({ '1': 'Active', '2': 'Active' }));
  const err = await t.throwsAsync(c.update(upsert([point(1, [1, 0])]), WAIT));
  t.true(err instanceof ShardUnavailableError);
});

test('replica states route: Dead and Recovery get nothing, Partial and Listener get writes only, ActiveRead both', async (t) => {
  const reps = { '1': new FakeReplica('1'), '2': new FakeReplica('2', false), '3': new FakeReplica('3', false), '4': new FakeReplica('4', false), '5': new FakeReplica('5', false) };
  const states: Record<string, ReplicaState> = { '1': 'Dead', '2': 'Partial', '3': 'Listener', '4': 'Recovery', '5': 'ActiveRead' };
  const c = collection([Object.values(reps)], placement(states));
  await c.update(upsert([point(1, [1, 0])]), WAIT);
  t.deepEqual(
    Object.values(reps).map((r) => r.points.size),
    [0, 1, 1, 0, 1],
  );
  t.is(await c.count(null), 1);
  t.deepEqual(
    Object.values(reps).map((r) => r.calls.filter((x) => x.method === 'count').length),
    [0, 0, 0, 0, 1],
  );
  t.deepEqual(
    REPLICA_STATES.filter(isActive),
    ['Active', 'ReshardingScaleDown'],
  );
  t.deepEqual(
    REPLICA_STATES.filter(servesReads),
    ['Active', 'ReshardingScaleDown', 'ActiveRead'],
  );
  t.deepEqual(
    REPLICA_STATES.filter((s) => !acceptsWrites(s)),
    ['Dead', 'PartialSnapshot', 'Recovery', 'ManualRecovery'],
  );
});

test('replica operations survive their encoding: upserts with vectors, selectors by ids, by filter, and both', (t) => {
  const ops: ReplicaOperation[] = [
    upsert([point(1, [0.25, -1], { a: 1 }), point(uuidOf(3), [3, 4])]),
    { kind: 'update_vectors', points: [{ id: key(2), vectors: new Map([['v', Float32Array.from([1, 2, 3])]]) }] },
    { kind: 'delete', select: { ids: [key(1), key(uuidOf(2))], filter: null } },
    { kind: 'set_payload', select: { ids: null, filter: { must: [{ key: 'a', match: { value: 1 } }] } }, payload: { b: [1, 2] }, key: 'x.y' },
    { kind: 'overwrite_payload', select: { ids: [], filter: null }, payload: {} },
    { kind: 'delete_payload', select: { ids: [key(5)], filter: { must_not: [{ key: 'a', match: { value: 2 } }] } }, keys: ['a', 'b'] },
    { kind: 'clear_payload', select: { ids: null, filter: null } },
    { kind: 'delete_vectors', select: { ids: [key(9)], filter: null }, names: ['', 'v'] },
  ];
  for (const op of ops) t.deepEqual(decodeReplicaOperation(encodeReplicaOperation(op)), op, op.kind);
});

test('a query of no vector lists points by id, scored 0; validation errors come before any replica is asked', async (t) => {
  const { c, shards } = await filled(12, 7);
  const listed = await c.query(query({ query: { none: true }, limit: 3, offset: 2, withPayload: ['n'] }));
  t.deepEqual(listed, [
    { id: 2, payload: { n: 2 }, version: 0, score: 0 },
    { id: 3, payload: { n: 3 }, version: 0, score: 0 },
    { id: 5, payload: { n: 5 }, version: 0, score: 0 },
  ]);
  const calls = shards.map((s) => s.calls.length);
  const bad = await t.throwsAsync(c.query(query({ query: { nearest: { vector: Float32Array.from([1, 2, 3]) } } })));
  t.is(bad?.message, 'Wrong input: Vector dimension error: expected dim: 2, got 3');
  const name = await t.throwsAsync(c.query(query({ query: { nearest: { vector: Float32Array.from([1, 2]) } }, withVector: ['nope'] })));
  t.is(name?.message, 'Wrong input: Not existing vector name error: nope');
  t.deepEqual(
    shards.map((s) => s.calls.length),
    calls,
  );
});

/** A custom-sharded collection over fake replicas: `layout` maps each key to its shard ids (one local fake replica per shard). */
function keyedCollection(layout: Array<{ key: string | number; shards: number[] }>): { c: Collection; replicas: Map<number, FakeReplica> } {
  const replicas = new Map<number, FakeReplica>();
  for (const e of layout) for (const id of e.shards) replicas.set(id, new FakeReplica('', true, 1000 * id));
  const m: CollectionMeta = {
    config: parseCreateCollection({ vectors: { size: 2, distance: 'Dot' }, sharding_method: 'custom', shard_number: 1 }, config),
    payload_schema: {},
    shard_keys: layout,
  };
  const c = Collection.overReplicas('c', m, (name, peer) => [...replicas].map(([id, r]) => new ReplicaSet(id, name, peer, [r], null)), logger);
  return { c, replicas };
}

test('custom sharding: a key\'s points hash over that key\'s shards only (crc32c of the id over its shard count); other keys see nothing', async (t) => {
  const { c, replicas } = keyedCollection([
    { key: 'a', shards: [1, 2, 3] },
    { key: 9, shards: [4] },
  ]);
  const ids = Array.from({ length: 30 }, (_, i) => i);
  await c.update(upsert(ids.map((id) => point(id, [1, 0], { k: 'a' }))), WAIT, ['a']);
  for (const id of ids) {
    const want = 1 + (crc32c(Buffer.from(key(id).key, 'utf8')) % 3);
    t.true(replicas.get(want)!.points.has(key(id).key), `${id} on shard ${want}`);
  }
  t.is(replicas.get(4)!.points.size, 0);
  // The same ids under key 9: other points, on its own shard.
  await c.update(upsert(ids.slice(0, 5).map((id) => point(id, [0, 1], { k: 9 }))), WAIT, [9]);
  t.is(replicas.get(4)!.points.size, 5);
  t.is(await c.count(null), 35);
  t.is(await c.count(null, DEFAULT_READ, ['a']), 30);
  t.is(await c.count(null, DEFAULT_READ, { target: 'b', fallback: 9 }), 5);
  const [r] = await c.retrieve([key(3)], true, false, DEFAULT_READ, [9]);
  t.deepEqual(r, { id: 3, payload: { k: 9 }, shard_key: 9 });
  // A key list writes the operation under each key; a key that does not exist refuses it before anything is written.
  await c.update({ kind: 'set_payload', select: { ids: [key(1)], filter: null }, payload: { both: true }, key: null }, WAIT, ['a', 9, 'a']);
  t.is(await c.count({ must: [{ key: 'both', match: { value: true } }] }), 2);
  const before = [...replicas.values()].map((x) => x.ops.length);
  const err = await t.throwsAsync(c.update(upsert([point(50, [1, 0])]), WAIT, ['a', 'b']));
  t.is(err?.message, 'Wrong input: Shard key "b" not found');
  t.deepEqual([...replicas.values()].map((x) => x.ops.length), before);
  t.is((await t.throwsAsync(c.update(upsert([point(50, [1, 0])]), WAIT)))?.message, 'Wrong input: Shard key not specified');
  // Search over every key lists an id once, at its best score, with its key.
  const hits = await c.query(query({ query: { nearest: { vector: Float32Array.from([1, 0]) } }, limit: 100 }));
  t.is(hits.length, 30);
  t.true(hits.every((h) => h.shard_key === 'a'));
});
