/**
 * The WAL as history: clock tags on every record, the shard's clock map (saved with
 * checkpoints, rebuilt by replay), idempotent application of tagged operations,
 * retention of the newest WAL bytes past a checkpoint, and WALs written before clock
 * tags (a shard directory made by commit e100024, in fixtures/wal-v1).
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as path from 'node:path';
import pino from 'pino';

import { loadEngine } from '../../bindings';
import { ClockMap, ClockSet, REPLICATED_CLOCK_BASE, type ClockTag } from '../../ts/shard/clocks';
import { normalizePointId } from '../../ts/shard/id-tracker';
import { HistoryGoneError, LocalShard, checkpointProblem, type ShardOptions } from '../../ts/shard/local-shard';
import { OperationFormatError, decodeRecord, encodeOperation, recordTag, type ShardOperation } from '../../ts/shard/operations';
import { mulberry32 } from '../support/rng';
import { testSpec } from './spec';
import { scratchDirs } from '../support/scratch';

const logger = pino({ level: 'silent' });
const engine = loadEngine({ logger });
const DIM = 8;
const FIXTURE = path.resolve(__dirname, '..', '..', '..', 'test', 'shard', 'fixtures', 'wal-v1');

const tmp = scratchDirs('quiver-walhist-');

function open(dir: string, over: Partial<ShardOptions> = {}): Promise<LocalShard> {
  return LocalShard.open({ dir, engine, vectors: [testSpec(DIM)], walSegmentBytes: 1 << 20, flushIntervalMs: 3_600_000, payloadIndexes: {}, logger, ...over });
}

const rnd = mulberry32(777);
const vec = () => Float32Array.from({ length: DIM }, () => rnd());

function upsert(ids: number[], payload: Record<string, unknown> | null = null): ShardOperation {
  return { kind: 'upsert', points: ids.map((i) => ({ id: normalizePointId(i), vectors: new Map([['', vec()]]), payload: payload as never })) };
}

/** Every point with payload and vectors, keyed by id. */
async function state(shard: LocalShard, names = ['']): Promise<Record<string, { payload: unknown; vectors: Record<string, number[]> }>> {
  const out: Record<string, { payload: unknown; vectors: Record<string, number[]> }> = {};
  for (const off of shard.matching(null)) {
    const e = shard.entryAt(off)!;
    const vs = await shard.vectorsOf(off, names);
    out[e.key.key] = { payload: shard.payloadOf(off), vectors: Object.fromEntries([...vs].map(([n, v]) => [n, Array.from(v)])) };
  }
  return out;
}

async function allHistory(shard: LocalShard, from = shard.history().oldestSeq) {
  const out = [];
  for (;;) {
    const page = await shard.readHistory(from, 64);
    if (page.length === 0) return out;
    out.push(...page);
    from = page[page.length - 1].seq + 1n;
  }
}

const tagText = (t: ClockTag | null) => (t === null ? null : `${t.peer}/${t.clock}/${t.tick}`);

// -- record format ---------------------------------------------------------------------

test('a record carries its clock tag; a record in the format before tags decodes with no tag', (t) => {
  const op = upsert([1, 2], { a: 1 });
  const tag = { peer: (1n << 64n) - 1n, clock: 0xffff_ffff, tick: 123456789012345n };
  const rec = encodeOperation(op, tag);
  t.is(rec[0], 2);
  t.deepEqual(recordTag(rec), tag);
  const back = decodeRecord(rec);
  t.deepEqual(back.tag, tag);
  t.deepEqual(back.op, op);
  // Format 1, as the code before tags wrote it: format byte 1, then the same header and vectors.
  const v1 = Buffer.concat([Buffer.from([1]), rec.subarray(21)]);
  t.is(recordTag(v1), null);
  t.deepEqual(decodeRecord(v1).op, op);
  t.throws(() => decodeRecord(Buffer.concat([Buffer.from([3]), rec.subarray(1)])), { instanceOf: OperationFormatError });
  t.throws(() => recordTag(rec.subarray(0, 10)), { instanceOf: OperationFormatError });
});

test('the clock map keeps the highest tick per peer and clock; the clock set hands out distinct clocks', (t) => {
  const m = new ClockMap();
  t.true(m.advance({ peer: 5n, clock: 0, tick: 3n }));
  t.false(m.advance({ peer: 5n, clock: 0, tick: 2n }), 'an older tick does not move it back');
  t.true(m.advance({ peer: 5n, clock: 1, tick: 1n }));
  t.true(m.advance({ peer: 9n, clock: 0, tick: 10n }));
  t.true(m.seen({ peer: 5n, clock: 0, tick: 3n }));
  t.false(m.seen({ peer: 5n, clock: 0, tick: 4n }));
  t.false(m.seen({ peer: 6n, clock: 0, tick: 1n }), 'an unknown clock has seen nothing');
  t.is(m.tickOf(5n, 7), 0n);
  t.deepEqual(ClockMap.fromJSON(JSON.parse(JSON.stringify(m.toJSON()))).entries(), m.entries());
  t.deepEqual(m.toJSON(), [
    { peer: '5', clock: 0, tick: '3' },
    { peer: '5', clock: 1, tick: '1' },
    { peer: '9', clock: 0, tick: '10' },
  ]);

  // checkpoint.json keeps the map; a malformed one is refused like any other bad checkpoint.
  const cp = { format: 1, applied_seq: '3', state: 'state-3.bin', vectors: { '': { appendable: 'vec-0-appendable-3-0.qvi' } } };
  t.is(checkpointProblem({ ...cp, clocks: m.toJSON() }), null);
  t.is(checkpointProblem(cp), null, 'a checkpoint written before clock tags has none');
  t.regex(checkpointProblem({ ...cp, clocks: [{ peer: '5', clock: 0, tick: '0' }] }) ?? '', /tick/);
  t.regex(checkpointProblem({ ...cp, clocks: [{ peer: '-1', clock: 0, tick: '1' }] }) ?? '', /clocks entry/);
  t.regex(checkpointProblem({ ...cp, clocks: [{ peer: '1', clock: 2 ** 32, tick: '1' }] }) ?? '', /clock is not/);
  t.regex(checkpointProblem({ ...cp, clocks: {} }) ?? '', /not an array/);

  const set = new ClockSet();
  const a = set.acquire();
  const b = set.acquire();
  const c = set.acquire();
  t.deepEqual([a, b, c], [0, 1, 2]);
  set.release(b);
  t.is(set.acquire(), 1, 'a released clock is reused before a new one is made');
  t.is(set.acquire(), 3);
  t.is(set.size, 4);
});

// -- local writer -----------------------------------------------------------------------

test('local writes are tagged with the shard peer id and one clock per write in flight; the clock map survives replay and checkpoints, and ticks continue after a restart', async (t) => {
  const dir = tmp();
  let shard = await open(dir, { peerId: 7n });
  for (let i = 0; i < 3; i++) await shard.update(() => upsert([i]), true);
  t.deepEqual((await allHistory(shard)).map((r) => tagText(r.tag)), ['7/0/1', '7/0/2', '7/0/3']);

  // Four writes in flight at once take four clocks; each clock's ticks rise by one.
  await Promise.all([10, 11, 12, 13].map((i) => shard.update(() => upsert([i]), true)));
  await Promise.all([20, 21].map((i) => shard.update(() => upsert([i]), false)));
  const tags = (await allHistory(shard)).map((r) => r.tag!);
  t.deepEqual(new Set(tags.slice(3, 7).map((x) => x.clock)), new Set([0, 1, 2, 3]));
  const perClock = new Map<number, bigint[]>();
  for (const x of tags) perClock.set(x.clock, [...(perClock.get(x.clock) ?? []), x.tick]);
  for (const [c, ticks] of perClock) t.deepEqual(ticks, ticks.map((_, i) => BigInt(i + 1)), `clock ${c} ticks ${ticks.join(',')}`);
  const clocks = shard.clocks();
  t.deepEqual(
    clocks.map(tagText),
    [...perClock].sort((x, y) => x[0] - y[0]).map(([c, ticks]) => `7/${c}/${ticks[ticks.length - 1]}`),
  );

  // No checkpoint: replay rebuilds the map from the records.
  await shard.drop();
  shard = await open(dir, { peerId: 7n });
  t.deepEqual(shard.clocks(), clocks);
  const seq = await shard.update(() => upsert([30]), true);
  t.is(tagText((await shard.readHistory(seq, 1))[0].tag), `7/0/${perClock.get(0)!.length + 1}`, 'the writer continues its clock, never reusing a tick');

  // With a checkpoint: the map is in checkpoint.json, and nothing is replayed.
  const before = shard.clocks();
  await shard.close();
  const cp = JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8')) as { clocks: unknown };
  t.deepEqual(
    cp.clocks,
    before.map((x) => ({ peer: String(x.peer), clock: x.clock, tick: String(x.tick) })),
  );
  shard = await open(dir, { peerId: 7n });
  t.deepEqual(shard.clocks(), before);
  await shard.close();
});

// -- tagged operations from other replicas -----------------------------------------------

test('applyTagged skips operations it has seen: a replica sent the same history twice ends in the same state, and its WAL does not grow', async (t) => {
  const srcDir = tmp();
  const dstDir = tmp();
  const src = await open(srcDir, { peerId: 1n });
  let dst = await open(dstDir, { peerId: 2n });
  for (let i = 0; i < 6; i++) await src.update(() => upsert([i, i + 100], { i }), true);
  await Promise.all([200, 201, 202].map((i) => src.update(() => upsert([i]), true)));
  await src.update(() => ({ kind: 'delete', ids: [normalizePointId(100)] }), true);
  await src.update(() => ({ kind: 'set_payload', ids: [normalizePointId(1)], payload: { x: true }, key: null }), true);
  const history = await allHistory(src);

  const send = async (records: typeof history) => {
    const out = [];
    for (const r of records) out.push(await dst.applyTagged(r.op, r.tag!, true));
    return out;
  };
  t.true((await send(history)).every((r) => r.applied));
  t.deepEqual(await state(dst), await state(src));
  t.deepEqual(dst.clocks(), src.clocks());
  const walEnd = dst.history().lastSeq;

  // Again: every operation is skipped, nothing is logged, the state is the same.
  const again = await send(history);
  t.true(again.every((r) => !r.applied));
  t.deepEqual(again[0], { applied: false, tick: src.clocks().find((c) => c.clock === 0)!.tick }, 'a skip reports the highest tick seen on that clock');
  t.is(dst.history().lastSeq, walEnd);
  t.deepEqual(await state(dst), await state(src));

  // Overlap: the tail of the old history plus new operations; only the new ones apply.
  await src.update(() => upsert([300]), true);
  await src.update(() => ({ kind: 'clear_payload', ids: [normalizePointId(2)] }), true);
  const more = await allHistory(src, history[history.length - 3].seq);
  t.deepEqual(
    (await send(more)).map((r) => r.applied),
    [false, false, false, true, true],
  );
  t.deepEqual(await state(dst), await state(src));

  // The seen ticks survive a restart with and without a checkpoint.
  await dst.drop();
  dst = await open(dstDir, { peerId: 2n });
  t.true((await send(more)).every((r) => !r.applied), 'after replay');
  await dst.close();
  dst = await open(dstDir, { peerId: 2n });
  t.true((await send(history)).every((r) => !r.applied), 'after a checkpoint');
  t.deepEqual(await state(dst), await state(src));

  // The receiver's own writes use its own peer id, so they never collide with the sender's.
  const own = await dst.update(() => upsert([400]), true);
  t.is(tagText((await dst.readHistory(own, 1))[0].tag), '2/0/1');
  await t.throwsAsync(dst.applyTagged(upsert([1]), { peer: 1n, clock: 0, tick: 0n }, true), { instanceOf: RangeError });
  await src.close();
  await dst.close();
});

test('a shard\'s own clocks (untagged writes, transfer batches) are not history another replica is behind on; adopted clocks count', async (t) => {
  const srcDir = tmp();
  const dstDir = tmp();
  const src = await open(srcDir, { peerId: 1n });
  const dst = await open(dstDir, { peerId: 2n });
  const write = writer(5n);
  // The source was filled by untagged batches (its own clocks), then got replicated writes.
  await src.update(() => upsert([1, 2, 3], { v: 0 }), true);
  await write(src, upsert([1], { v: 1 }), true);
  t.true(src.clocks().some((c) => c.clock < REPLICATED_CLOCK_BASE), 'the untagged batch took a local clock');
  // A replica that holds the same data and adopted the source's replicated clocks lacks nothing.
  await dst.update(() => upsert([1, 2, 3], { v: 0 }), true);
  await dst.applyTagged(upsert([1], { v: 1 }), { peer: 5n, clock: REPLICATED_CLOCK_BASE, tick: 1n }, true);
  t.is(await src.historyStartFor(dst.clocks()), src.history().lastSeq + 1n);
  // A replica with nothing of the replicated writes starts at the first one.
  t.is(await src.historyStartFor([]), 2n);
  // adoptClocks takes replicated clocks only.
  const fresh = await open(tmp(), { peerId: 3n });
  fresh.adoptClocks([...src.clocks()]);
  t.deepEqual(fresh.clocks(), src.clocks().filter((c) => c.clock >= REPLICATED_CLOCK_BASE));
  for (const s of [src, dst, fresh]) await s.close();
});

// -- retention --------------------------------------------------------------------------

function walBytes(dir: string): number[] {
  const wal = path.join(dir, 'wal');
  return fs
    .readdirSync(wal)
    .filter((n) => n.endsWith('.wal'))
    .sort()
    .map((n) => fs.statSync(path.join(wal, n)).size);
}

/** Replicated writes as a writer peer makes them: each lane is one of its clocks, ticking from 1. */
function writer(peer: bigint): (shard: LocalShard, op: ShardOperation, wait: boolean, lane?: number) => Promise<bigint> {
  const ticks = new Map<number, bigint>();
  return async (shard, op, wait, lane = 0) => {
    const clock = REPLICATED_CLOCK_BASE + lane;
    const tick = (ticks.get(clock) ?? 0n) + 1n;
    ticks.set(clock, tick);
    const r = await shard.applyTagged(op, { peer, clock, tick }, wait);
    if (!r.applied) throw new Error('a new tick was skipped');
    return r.seq;
  };
}

test('a checkpoint keeps the newest walRetainBytes of the WAL as history; replay after a restart starts after the checkpoint', async (t) => {
  const dir = tmp();
  const opts = { peerId: 3n, walSegmentBytes: 4096, walRetainBytes: 16_384 };
  let shard = await open(dir, opts);
  const write = writer(7n);
  const marks: Array<{ seq: bigint; clocks: ClockTag[] }> = [];
  for (let i = 0; i < 300; i++) {
    const seq = await write(shard, upsert([i % 50, 1000 + i], { i }), i % 10 === 0);
    if (i % 50 === 0) marks.push({ seq, clocks: shard.clocks() });
  }
  await shard.checkpoint();
  const h = shard.history();
  t.is(h.checkpointSeq, 300n);
  t.true(h.oldestSeq > 1n, `old segments were dropped (oldest ${h.oldestSeq})`);
  const sizes = walBytes(dir);
  const kept = sizes.reduce((a, b) => a + b, 0);
  t.true(kept >= 16_384, `kept ${kept} bytes`);
  t.true(kept - sizes[0] < 16_384, 'no more whole segments than needed');
  const records = await allHistory(shard);
  t.is(records[0].seq, h.oldestSeq);
  t.is(records[records.length - 1].seq, 300n);
  records.forEach((r, i) => t.is(r.seq, h.oldestSeq + BigInt(i)));
  await t.throwsAsync(shard.readHistory(h.oldestSeq - 1n), { instanceOf: HistoryGoneError });

  // Where a replica that has seen up to a mark must start: right after the mark, while
  // the history still reaches back there; null once it does not; the end when it lacks nothing.
  const retained = marks.filter((m) => m.seq >= h.oldestSeq);
  const dropped = marks.filter((m) => m.seq + 1n < h.oldestSeq);
  t.true(retained.length > 0 && dropped.length > 0);
  for (const m of retained) t.is(await shard.historyStartFor(m.clocks), m.seq + 1n);
  for (const m of dropped) t.is(await shard.historyStartFor(m.clocks), null);
  t.is(await shard.historyStartFor([]), null, 'a replica with nothing needs history that is gone');
  t.is(await shard.historyStartFor(shard.clocks()), h.lastSeq + 1n);

  // Writes after the checkpoint, then a crash (no checkpoint): only they are replayed.
  for (let i = 0; i < 7; i++) await shard.update(() => upsert([2000 + i]), true);
  const before = await state(shard);
  await shard.drop();
  const lines: Array<Record<string, unknown>> = [];
  const capture = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
  shard = await open(dir, { ...opts, logger: capture });
  t.is(lines.find((l) => l.msg === 'shard loaded')?.replayed, 7);
  t.deepEqual(await state(shard), before);
  t.is(shard.history().oldestSeq, h.oldestSeq, 'the history is still there after the restart');
  await shard.close();
});

test('a replica that missed writes catches up from the retained history (the wal_delta path)', async (t) => {
  const srcDir = tmp();
  const dstDir = tmp();
  const src = await open(srcDir, { peerId: 1n, walSegmentBytes: 2048, walRetainBytes: 8192 });
  const dst = await open(dstDir, { peerId: 2n });
  const forward = async (from: bigint) => {
    for (const r of await allHistory(src, from)) await dst.applyTagged(r.op, r.tag!, false);
  };
  const write = writer(9n);
  // Replicated for a while (writes arrive from two writers at once, so two clocks).
  for (let i = 0; i < 40; i++) await Promise.all([write(src, upsert([i], { i }), true, 0), write(src, upsert([500 + i]), true, 1)]);
  await forward(1n);
  t.deepEqual(await state(dst), await state(src));
  // Then the replica is away while more writes and checkpoints happen.
  for (let i = 0; i < 30; i++) {
    await write(src, upsert([i, 900 + i], { away: i }), true);
    if (i % 10 === 9) await src.checkpoint();
  }
  await write(src, { kind: 'delete', ids: [normalizePointId(3), normalizePointId(900)] }, true);
  const start = await src.historyStartFor(dst.clocks());
  t.is(start, 81n, 'right after the last operation the replica has');
  t.true(src.history().oldestSeq > 1n && src.history().oldestSeq <= start!, `history kept from ${src.history().oldestSeq}`);
  t.is(await src.historyStartFor([]), null, 'a new replica cannot catch up from it: its start is gone');
  await forward(start!);
  t.deepEqual(await state(dst), await state(src));
  t.deepEqual(dst.clocks(), src.clocks());
  await src.close();
  await dst.close();
});

test('after a restore from a snapshot, a replica that holds ticks the snapshot rolled back is not caught up from the history: the restored replica must hold the target\'s newest tick of a clock above the snapshot\'s', async (t) => {
  // The restored replica has the snapshot's clock map (tick 5); the other replica took
  // ticks 6..8 after the snapshot was taken, which the restore rolled back; then tick 9
  // reached the restored replica only. Its first record above the other's tick 8 is 9,
  // so the history looked enough, and the other replica would have kept 6..8 for good.
  const aDir = tmp();
  const a = await open(aDir, { peerId: 1n });
  const b = await open(tmp(), { peerId: 2n });
  const fresh = await open(tmp(), { peerId: 3n });
  const clock = REPLICATED_CLOCK_BASE;
  const tagged = (tick: number) => ({ peer: 9n, clock, tick: BigInt(tick) });
  for (let i = 1; i <= 5; i++) for (const s of [a, b]) await s.applyTagged(upsert([i]), tagged(i), true);
  for (let i = 6; i <= 8; i++) await b.applyTagged(upsert([i]), tagged(i), true);
  // The writes from 6 on on `a`: the snapshot's data (it stands for the restore here), then tick 9.
  await a.markRestored();
  const nine = await a.applyTagged(upsert([9]), tagged(9), true);
  t.true(nine.applied);
  t.is(await a.historyStartFor(b.clocks()), null, 'b holds tick 8, which a never had');
  // A replica caught up from `a` after the restore holds only ticks `a` applied: the history serves it.
  for (const r of await allHistory(a)) await fresh.applyTagged(r.op, r.tag!, true);
  t.deepEqual(fresh.clocks().map((c) => c.tick), [9n]);
  await a.applyTagged(upsert([10]), tagged(10), true);
  t.is(await a.historyStartFor(fresh.clocks()), a.history().lastSeq, 'right after tick 9, which a applied');
  // The mark survives a restart (it is in the checkpoint).
  await a.close();
  const again = await open(aDir, { peerId: 1n });
  t.is(await again.historyStartFor(b.clocks()), null);
  t.is(await again.historyStartFor(fresh.clocks()), again.history().lastSeq);
  for (const s of [again, b, fresh]) await s.close();
});

test('history written with a named vector deleted since goes to a replica without it: the deleted name is left out, the rest applies', async (t) => {
  // The wal_delta source sends withCurrentNames(record); a target that applied the
  // deletion refuses a name it has no store for, so the record as written would fail
  // every recovery across the deletion.
  const specs = [testSpec(DIM), testSpec(DIM, { name: 'img' })];
  const a = await open(tmp(), { peerId: 1n, vectors: specs });
  const b = await open(tmp(), { peerId: 2n, vectors: [testSpec(DIM)] });
  await a.update(() => ({ kind: 'upsert', points: [{ id: normalizePointId(1), vectors: new Map([['', vec()], ['img', vec()]]), payload: { a: 1 } }] }), true);
  await a.update(() => ({ kind: 'update_vectors', points: [{ id: normalizePointId(1), vectors: new Map([['img', vec()]]) }] }), true);
  await a.changeVectorNames([], ['img']);
  const history = await allHistory(a);
  t.is(history.length, 2);
  await t.throwsAsync(b.update(() => history[0].op, true), { message: /vector "img": this replica has no such vector/ });
  for (const r of history) await b.update(() => a.withCurrentNames(r.op), true);
  t.deepEqual(await state(b), await state(a));
  t.is(a.withCurrentNames(history[0].op) === history[0].op, false);
  const plain = upsert([2]);
  t.is(a.withCurrentNames(plain), plain, 'a record with only current names is sent as it is');
  for (const s of [a, b]) await s.close();
});

// -- WALs written before clock tags ------------------------------------------------------

test('a shard written before clock tags (commit e100024: untagged records, a checkpoint without clocks) opens, replays, and keeps its records as history', async (t) => {
  const dir = tmp();
  fs.cpSync(path.join(FIXTURE, 'shard'), dir, { recursive: true });
  const expected = JSON.parse(fs.readFileSync(path.join(FIXTURE, 'expected.json'), 'utf8')) as {
    lastSeq: string;
    points: Array<{ id: number | string; payload: unknown; vectors: Record<string, number[]> }>;
  };
  const want = Object.fromEntries(expected.points.map((p) => [normalizePointId(p.id as never).key, { payload: p.payload, vectors: p.vectors }]));
  const vectors = [testSpec(4, { name: 'a' }), testSpec(2, { name: 'b' })];
  const lines: Array<Record<string, unknown>> = [];
  const capture = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s) as Record<string, unknown>) });
  let shard = await open(dir, { vectors, peerId: 42n, logger: capture });
  t.is(lines.find((l) => l.msg === 'shard loaded')?.replayed, 8, 'the untagged records after the checkpoint were replayed');
  t.is(shard.lastSeq, BigInt(expected.lastSeq));
  t.deepEqual(await state(shard, ['a', 'b']), want);
  t.deepEqual(shard.clocks(), [], 'untagged records advance no clock');
  t.deepEqual(shard.history(), { oldestSeq: 1n, lastSeq: 11n, checkpointSeq: 3n });
  const old = await allHistory(shard);
  t.deepEqual(
    old.map((r) => [r.op.kind, r.tag]),
    [
      ['upsert', null],
      ['upsert', null],
      ['set_payload', null],
      ['delete', null],
      ['overwrite_payload', null],
      ['delete_payload', null],
      ['clear_payload', null],
      ['update_vectors', null],
      ['delete_vectors', null],
      ['set_payload', null],
      ['upsert', null],
    ],
  );
  t.is(await shard.historyStartFor([]), null, 'clocks cannot tell what untagged history holds');

  // New writes are tagged; a WAL holding both kinds replays (no checkpoint in between).
  const seq = await shard.update(() => ({ kind: 'upsert', points: [{ id: normalizePointId(8), vectors: new Map([['a', Float32Array.from([8, 8, 8, 8])]]), payload: { v: 2 } }] }), true);
  t.is(seq, 12n);
  t.is(tagText((await shard.readHistory(seq, 1))[0].tag), '42/0/1');
  const mixed = await state(shard, ['a', 'b']);
  await shard.drop();
  lines.length = 0;
  shard = await open(dir, { vectors, peerId: 42n, logger: capture });
  t.is(lines.find((l) => l.msg === 'shard loaded')?.replayed, 9);
  t.deepEqual(await state(shard, ['a', 'b']), mixed);
  t.deepEqual(shard.clocks().map(tagText), ['42/0/1']);
  await shard.close();
  shard = await open(dir, { vectors, peerId: 42n });
  t.deepEqual(await state(shard, ['a', 'b']), mixed);
  t.deepEqual(shard.clocks().map(tagText), ['42/0/1']);
  await shard.close();
});
