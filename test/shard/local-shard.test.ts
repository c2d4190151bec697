/**
 * LocalShard against the native engine: writes, checkpoint + reopen, WAL replay
 * without a checkpoint, the optimizer's move into HNSW and its vacuum, and filters
 * through the payload indexes.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as path from 'node:path';
import pino from 'pino';

import { loadEngine } from '../../bindings';
import type { VectorSpec } from '../../ts/shard/vector-store';
import { IdTracker, normalizePointId } from '../../ts/shard/id-tracker';
import { LocalShard, keepFilter, type ShardState } from '../../ts/shard/local-shard';
import { PayloadStore } from '../../ts/shard/payload-store';
import { runAll } from '../../ts/shard/slices';
import { crc32c } from '../../ts/common/crc32c';
import { ShardUnavailableError } from '../../ts/common/errors';
import type { ShardOperation } from '../../ts/shard/operations';
import { parseFieldSchema } from '../../ts/shard/field-schema';
import { mulberry32 } from '../support/rng';
import { waitFor } from '../support/wait';
import { testSpec } from './spec';
import { scratchDirs } from '../support/scratch';

const logger = pino({ level: 'silent' });
const engine = loadEngine({ logger });
const DIM = 8;

const spec = (over: Partial<VectorSpec> = {}): VectorSpec => testSpec(DIM, over);

const tmp = scratchDirs('quiver-shard-');

async function open(dir: string, vs: VectorSpec = spec(), flushIntervalMs = 3_600_000): Promise<LocalShard> {
  return LocalShard.open({ dir, engine, vectors: [vs], walSegmentBytes: 1 << 20, flushIntervalMs, payloadIndexes: {}, logger });
}

const rnd = mulberry32(12345);

function vec(): Float32Array {
  return Float32Array.from({ length: DIM }, () => rnd());
}

function upsert(ids: number[], payload?: (i: number) => Record<string, unknown>): { op: ShardOperation; vectors: Map<number, Float32Array> } {
  const vectors = new Map<number, Float32Array>();
  const points = ids.map((i) => {
    const v = vec();
    vectors.set(i, v);
    return { id: normalizePointId(i), vectors: new Map([['', v]]), payload: payload ? (payload(i) as never) : null };
  });
  return { op: { kind: 'upsert', points }, vectors };
}

async function snapshot(shard: LocalShard): Promise<Map<string, { payload: unknown; vector: number[] }>> {
  const out = new Map<string, { payload: unknown; vector: number[] }>();
  for (const off of shard.matching(null)) {
    const e = shard.entryAt(off)!;
    const vs = await shard.vectorsOf(off, ['']);
    out.set(e.key.key, { payload: shard.payloadOf(off), vector: Array.from(vs.get('') ?? []) });
  }
  return out;
}

test('a checkpoint and a reopen keep every point, payload and vector', async (t) => {
  const dir = tmp();
  const shard = await open(dir);
  await shard.update(() => upsert([1, 2, 3, 4, 5], (i) => ({ n: i, tag: i % 2 ? 'odd' : 'even' })).op, true);
  await shard.update(() => ({ kind: 'delete', ids: [normalizePointId(2)] }), true);
  await shard.update(() => ({ kind: 'set_payload', ids: [normalizePointId(3)], payload: { extra: true }, key: null }), true);
  const before = await snapshot(shard);
  await shard.close();
  t.true(fs.existsSync(path.join(dir, 'checkpoint.json')));
  const again = await open(dir);
  t.deepEqual(await snapshot(again), before);
  t.is(again.pointCount, 4);
  await again.close();
});

test('without a checkpoint, reopening replays the WAL to the same state', async (t) => {
  const dir = tmp();
  const shard = await open(dir);
  for (let b = 0; b < 5; b++) await shard.update(() => upsert([b * 10, b * 10 + 1, 3], (i) => ({ b, i })).op, true);
  await shard.update(() => ({ kind: 'clear_payload', ids: [normalizePointId(3)] }), true);
  await shard.update(() => ({ kind: 'delete_payload', ids: [normalizePointId(10)], keys: ['b'] }), true);
  const before = await snapshot(shard);
  await shard.drop(); // closes the WAL, no checkpoint: like a crash after the fsync
  t.false(fs.existsSync(path.join(dir, 'checkpoint.json')));
  const again = await open(dir);
  t.deepEqual(await snapshot(again), before);
  t.is(again.lastSeq, 7n);
  await again.close();
});

test('the optimizer moves points into HNSW; search matches exact search; status goes back to green', async (t) => {
  const dir = tmp();
  // 8-d f32 = 32 bytes per vector: a 16 KiB threshold is 512 vectors.
  const shard = await open(dir, spec({ indexingThresholdKb: 16 }));
  const all = new Map<number, Float32Array>();
  for (let b = 0; b < 6; b++) {
    const ids = Array.from({ length: 300 }, (_, i) => b * 300 + i);
    const { op, vectors } = upsert(ids);
    for (const [k, v] of vectors) all.set(k, v);
    await shard.update(() => op, true);
  }
  await shard.waitOptimized();
  t.false(shard.optimizing());
  const store = shard.vectors.get('')!;
  t.true(store.indexedCount() >= 1536, `indexed ${store.indexedCount()}`);
  t.is(shard.pointCount, 1800);
  // Every point is found exactly once, by exact and by graph search.
  const q = vec();
  const exact = await shard.search('', { vector: q, k: 20, exact: true }, null);
  const graph = await shard.search('', { vector: q, k: 20, ef: 200 }, null);
  t.is(exact.length, 20);
  const overlap = graph.filter((h) => exact.some((e) => e.label === h.label)).length;
  t.true(overlap >= 18, `recall ${overlap}/20`);
  const brute = [...all.entries()]
    .map(([id, v]) => ({ id, d: Math.sqrt(v.reduce((s, x, i) => s + (x - q[i]) ** 2, 0)) }))
    .sort((a, b) => a.d - b.d)
    .slice(0, 20);
  t.deepEqual(
    exact.map((h) => Number(shard.entryAt(h.label)!.key.value)),
    brute.map((b) => b.id),
  );
  // Survives a reopen with the indexed file.
  await shard.close();
  const again = await open(dir, spec({ indexingThresholdKb: 16 }));
  t.is(again.vectors.get('')!.indexedCount(), store.indexedCount());
  const exact2 = await again.search('', { vector: q, k: 20, exact: true }, null);
  t.deepEqual(exact2.map((h) => h.label), exact.map((h) => h.label));
  await again.close();
});

test('deleting most indexed points triggers a vacuum that rebuilds the graph without them', async (t) => {
  const dir = tmp();
  const shard = await open(dir, spec({ indexingThresholdKb: 8, vacuumMinVectorNumber: 100 }));
  await shard.update(() => upsert(Array.from({ length: 600 }, (_, i) => i)).op, true);
  await shard.waitOptimized();
  const store = shard.vectors.get('')!;
  t.true(store.indexedCount() >= 256);
  const victims = Array.from({ length: 400 }, (_, i) => normalizePointId(i));
  await shard.update(() => ({ kind: 'delete', ids: victims }), true);
  await shard.waitOptimized();
  t.is(shard.pointCount, 200);
  const stats = store.indexedStats()!;
  t.is(stats.deleted, 0, 'the rebuilt graph has no deleted slots');
  t.is(stats.count, store.indexedCount());
  const q = vec();
  const hits = await shard.search('', { vector: q, k: 300, exact: true }, null);
  t.is(hits.length, 200);
  t.true(hits.every((h) => Number(shard.entryAt(h.label)!.key.value) >= 400));
  await shard.close();
});

test('writes during an index build keep the newest vector (no stale copies from the move)', async (t) => {
  const dir = tmp();
  const shard = await open(dir, spec({ indexingThresholdKb: 8 }));
  await shard.update(() => upsert(Array.from({ length: 2000 }, (_, i) => i)).op, true);
  // The move starts in the background; rewrite and delete points meanwhile.
  const latest = new Map<number, Float32Array>();
  for (let r = 0; r < 20; r++) {
    const ids = Array.from({ length: 50 }, (_, i) => (r * 97 + i * 13) % 2000);
    const { op, vectors } = upsert(ids);
    for (const [k, v] of vectors) latest.set(k, v);
    await shard.update(() => op, false);
  }
  await shard.update(() => ({ kind: 'delete', ids: [normalizePointId(5), normalizePointId(6)] }), true);
  latest.delete(5);
  latest.delete(6);
  await shard.waitOptimized();
  t.is(shard.pointCount, 1998);
  for (const [id, v] of latest) {
    const hits = await shard.search('', { vector: v, k: 1, ef: 400 }, null);
    t.is(Number(shard.entryAt(hits[0].label)!.key.value), id);
    t.true(hits[0].score < 1e-4);
  }
  const all = await shard.search('', { vector: vec(), k: 5000, exact: true }, null);
  t.is(all.length, 1998);
  t.is(new Set(all.map((h) => h.label)).size, 1998, 'each point once');
  await shard.close();
});

test('filters use payload indexes and agree with the unindexed result', async (t) => {
  const dir = tmp();
  const shard = await open(dir);
  await shard.update(() => upsert(Array.from({ length: 500 }, (_, i) => i), (i) => ({ n: i, color: ['red', 'green', 'blue'][i % 3] })).op, true);
  const filter = { must: [{ key: 'color', match: { value: 'red' } }, { key: 'n', range: { gte: 100, lt: 200 } }] };
  const before = shard.matching(filter).sort();
  await shard.createPayloadIndex('color', parseFieldSchema('keyword'));
  await shard.createPayloadIndex('n', parseFieldSchema('integer'));
  const after = shard.matching(filter).sort();
  t.deepEqual(after, before);
  t.is(after.length, 33);
  t.is(shard.count(filter), 33);
  const hits = await shard.search('', { vector: vec(), k: 100 }, filter);
  t.is(hits.length, 33);
  await shard.close();
});

test('an operation memory would refuse (a bad payload key) is rejected before the WAL: the shard keeps working and reopens', async (t) => {
  const dir = tmp();
  const shard = await open(dir);
  await shard.update(() => upsert([1], () => ({ a: [1] })).op, true);
  await t.throwsAsync(shard.update(() => ({ kind: 'set_payload', ids: [normalizePointId(1)], payload: { x: 1 }, key: 'a[0]' }), true));
  await t.throwsAsync(shard.update(() => ({ kind: 'delete_payload', ids: [normalizePointId(1)], keys: [''] }), true));
  const seq = await shard.update(() => ({ kind: 'set_payload', ids: [normalizePointId(1)], payload: { x: 1 }, key: null }), true);
  t.is(seq, 2n, 'the rejected operations took no sequence number');
  await shard.drop();
  const again = await open(dir);
  t.deepEqual(again.payloadOf(again.entry(normalizePointId(1))!.offset), { a: [1], x: 1 });
  await again.close();
});

test('a checkpoint taken while the optimizer holds a frozen index never overwrites a file the previous checkpoint names', async (t) => {
  const dir = tmp();
  const vs = spec({ indexingThresholdKb: 0 });
  const shard = await open(dir, vs);
  await shard.update(() => upsert(Array.from({ length: 3000 }, (_, i) => i)).op, true);
  await shard.checkpoint(); // saves the appendable index under this sequence number
  // Indexing switched on: the job freezes the appendable index at once; a checkpoint
  // queued right behind it has the same sequence number and a new, empty appendable.
  Object.assign(shard.vectors.get('')!.spec, { indexingThresholdKb: 8 });
  shard.kick();
  await shard.checkpoint();
  await shard.drop(); // no final checkpoint: like a kill -9 during the build
  const again = await open(dir, vs);
  const hits = await again.search('', { vector: vec(), k: 5000, exact: true }, null);
  t.is(hits.length, 3000, 'every vector is still there');
  await again.close();
});

/** The native engine, with a hook on `add` of graph (non-flat) indexes. */
function hookedEngine(onGraphAdd: (add: () => Promise<void>) => Promise<void>): typeof engine {
  return new Proxy(engine, {
    get(target, prop) {
      if (prop === 'createIndex') {
        return (opts: Parameters<typeof engine.createIndex>[0]) => {
          const idx = target.createIndex(opts);
          if (opts.flat) return idx;
          return new Proxy(idx, {
            get(ti, pi) {
              if (pi === 'add') return (l: BigUint64Array, v: Float32Array, th?: number) => onGraphAdd(() => ti.add(l, v, th));
              const f = (ti as unknown as Record<string | symbol, unknown>)[pi];
              return typeof f === 'function' ? f.bind(ti) : f;
            },
          });
        };
      }
      const f = (target as unknown as Record<string | symbol, unknown>)[prop];
      return typeof f === 'function' ? (f as (...a: unknown[]) => unknown).bind(target) : f;
    },
  });
}

test('a search during a move into the serving graph ignores stale copies and still finds the live points', async (t) => {
  let hold: ((release: () => void) => void) | null = null;
  const eng = hookedEngine(async (add) => {
    await add();
    if (hold) {
      const h = hold;
      hold = null;
      await new Promise<void>((release) => h(release));
    }
  });
  const dir = tmp();
  const vs = spec({ indexingThresholdKb: 4 });
  const shard = await LocalShard.open({ dir, engine: eng, vectors: [vs], walSegmentBytes: 1 << 20, flushIntervalMs: 3_600_000, payloadIndexes: {}, logger });
  await shard.update(() => upsert(Array.from({ length: 600 }, (_, i) => i)).op, true);
  await shard.waitOptimized();
  const q = Float32Array.from({ length: DIM }, () => 0.5);
  const truth = (await shard.search('', { vector: q, k: 5, exact: true }, null)).map((h) => h.label);
  // 100 points right at the query (first chunk of the next move), 600 far away.
  const near = Array.from({ length: 100 }, (_, i) => ({ id: normalizePointId(1000 + i), vectors: new Map([['', Float32Array.from({ length: DIM }, () => 0.5 + rnd() * 1e-3)]]), payload: null }));
  const far = Array.from({ length: 600 }, (_, i) => ({ id: normalizePointId(1100 + i), vectors: new Map([['', Float32Array.from({ length: DIM }, () => 10 + rnd())]]), payload: null }));
  const held = new Promise<() => void>((r) => (hold = r));
  await shard.update(() => ({ kind: 'upsert', points: [...near, ...far] }), true);
  const release = await held; // the first chunk is in the graph; the move waits
  await shard.update(() => ({ kind: 'delete', ids: near.map((p) => p.id) }), true);
  const during = (await shard.search('', { vector: q, k: 5, exact: true }, null)).map((h) => h.label);
  t.deepEqual(during, truth);
  release();
  await shard.waitOptimized();
  t.deepEqual((await shard.search('', { vector: q, k: 5, exact: true }, null)).map((h) => h.label), truth);
  await shard.close();
});

test('a failing optimizer job backs off and leaves no stray copies in the serving graph', async (t) => {
  let failing = false;
  /** When each failing attempt added its copies (Date.now(), the clock the back-off reads). */
  const attempts: number[] = [];
  const eng = hookedEngine(async (add) => {
    await add();
    if (failing) {
      attempts.push(Date.now());
      throw new Error('injected engine failure');
    }
  });
  const dir = tmp();
  const shard = await LocalShard.open({ dir, engine: eng, vectors: [spec({ indexingThresholdKb: 4 })], walSegmentBytes: 1 << 20, flushIntervalMs: 3_600_000, payloadIndexes: {}, logger });
  await shard.update(() => upsert(Array.from({ length: 600 }, (_, i) => i)).op, true);
  await shard.waitOptimized();
  const store = shard.vectors.get('')!;
  failing = true;
  await shard.update(() => upsert(Array.from({ length: 300 }, (_, i) => 1000 + i)).op, true);
  // The job fails, is retried after its back-off and fails again; wait for the second
  // failure's clean-up (no job running), which leaves at least 2 s before the third try.
  await waitFor('a second failed attempt, cleaned up', () => attempts.length >= 2 && !store.busy());
  // The back-off is a property of the clock, not of the machine's speed: the retry came no
  // sooner than the first failure's 1 s back-off (later is allowed: a slow machine).
  t.true(attempts[1] - attempts[0] >= 1000, `the retry came ${attempts[1] - attempts[0]} ms after the first failure, before its 1 s back-off`);
  const stats = store.indexedStats()!;
  t.is(stats.count, store.indexedCount(), 'the graph holds only the points it serves');
  failing = false;
  await shard.waitOptimized();
  t.is(store.indexedCount(), 900);
  const all = await shard.search('', { vector: vec(), k: 2000, exact: true }, null);
  t.is(all.length, 900);
  await shard.close();
});

test('pinSnapshot: a fresh checkpoint holding every write acknowledged before the call; its files outlive later checkpoints until released; a copy of them opens to the same points and continues the WAL numbering', async (t) => {
  const dir = tmp();
  const shard = await open(dir, spec(), 3_600_000);
  for (let b = 0; b < 5; b++) await shard.update(() => upsert([b * 10, b * 10 + 1, b * 10 + 2]).op, true);
  // Writes keep coming while the snapshot is pinned.
  let stop = false;
  let next = 1000;
  const writer = (async () => {
    while (!stop) await shard.update(() => upsert([next++]).op, true);
  })();
  const acknowledgedBefore = shard.lastSeq;
  const pin = await shard.pinSnapshot();
  t.true(pin.appliedSeq >= acknowledgedBefore, 'the pinned checkpoint covers every write acknowledged before the call');
  // Copy what a snapshot would hold while writes and checkpoints go on.
  const copy = tmp();
  await shard.checkpoint();
  await shard.update(() => upsert([5000]).op, true);
  await shard.checkpoint();
  for (const f of pin.files) t.true(fs.existsSync(path.join(dir, f)), `${f} is still there while pinned`);
  fs.writeFileSync(path.join(copy, 'checkpoint.json'), pin.checkpoint);
  for (const f of pin.files) fs.copyFileSync(path.join(dir, f), path.join(copy, f));
  fs.mkdirSync(path.join(copy, 'wal'));
  fs.writeFileSync(path.join(copy, 'wal', `${(pin.appliedSeq + 1n).toString().padStart(20, '0')}.wal`), '');
  stop = true;
  await writer;
  await pin.release();
  const cp = JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8')) as { state: string; vectors: Record<string, Record<string, string | null>> };
  const named = new Set([cp.state, ...Object.values(cp.vectors).flatMap((v) => Object.values(v))]);
  const present = new Set(fs.readdirSync(dir));
  t.deepEqual(pin.files.filter((f) => present.has(f) && !named.has(f)), [], 'released files that the current checkpoint does not name are removed');
  t.false(present.has(pin.files[0]), 'the pinned state file is gone after release (later checkpoints replaced it)');
  await shard.close();

  const restored = await open(copy);
  t.is(restored.lastSeq, pin.appliedSeq);
  for (let b = 0; b < 5; b++) for (let k = 0; k < 3; k++) t.true(restored.has(normalizePointId(b * 10 + k)));
  t.false(restored.has(normalizePointId(5000)), 'a write after the pin is not in it');
  const seq = await restored.update(() => upsert([7777]).op, true);
  t.is(seq, pin.appliedSeq + 1n, 'the restored WAL continues after the checkpoint');
  await restored.close();
  const again = await open(copy);
  t.true(again.has(normalizePointId(7777)));
  await again.close();
});

test('pinSnapshot with content: the point count and digest are of exactly the pinned checkpoint, while writes go on', async (t) => {
  const dir = tmp();
  const shard = await open(dir, spec(), 3_600_000);
  await shard.update(() => upsert([1, 2, 3], (i) => ({ n: i })).op, true);
  let stop = false;
  let next = 100;
  const writer = (async () => {
    while (!stop) await shard.update(() => upsert([next++], (i) => ({ n: i })).op, true);
  })();
  await waitFor('writes under way', () => next > 120);
  const pin = await shard.pinSnapshot(true);
  const at = next;
  await waitFor('writes go on after the pin', () => next > at + 20);
  stop = true;
  await writer;
  t.truthy(pin.content);
  t.notDeepEqual(await shard.digest(), pin.content, 'the shard moved on after the pin');
  const copy = tmp();
  fs.writeFileSync(path.join(copy, 'checkpoint.json'), pin.checkpoint);
  for (const f of pin.files) fs.copyFileSync(path.join(dir, f), path.join(copy, f));
  await pin.release();
  await shard.close();
  const restored = await open(copy);
  t.deepEqual(await restored.digest(), pin.content, 'the copy of the pinned files has the recorded count and digest');
  t.is(restored.pointCount, pin.content!.points);
  await restored.close();
});

test('which labels a shard keeps at load: live and listed for the vector, with dense and with sparse offsets', (t) => {
  // A tracker with the given offsets (ids 1000 + i), from bytes as a state file holds it.
  const trackerWith = (offsets: bigint[], counter: bigint): IdTracker => {
    const n = offsets.length;
    const b = Buffer.alloc(24 + n * 25 + 4);
    b.write('QIDT', 0, 'latin1');
    b.writeUInt16LE(1, 4);
    b.writeBigUInt64LE(counter, 8);
    b.writeBigUInt64LE(BigInt(n), 16);
    offsets.forEach((o, i) => {
      const at = 24 + i * 25;
      b[at] = 0;
      b.writeBigUInt64LE(1000n + BigInt(i), at + 1);
      b.writeBigUInt64LE(o, at + 9);
      b.writeBigUInt64LE(1n, at + 17);
    });
    b.writeUInt32LE(crc32c(b, 0, b.length - 4), b.length - 4);
    return IdTracker.fromBytes(b);
  };
  for (const [what, offsets, counter] of [
    ['dense', [0n, 1n, 2n, 5n, 9n], 10n],
    ['sparse', [3n, 1n << 30n, (1n << 40n) + 7n, 1n << 52n], (1n << 52n) + 1n],
  ] as const) {
    const tracker = trackerWith([...offsets], counter);
    const listed = BigUint64Array.from([offsets[0], offsets[2], offsets[3], counter + 5n]);
    const state: ShardState = { tracker, payloads: new PayloadStore(), present: new Map([['', listed]]) };
    const keep = runAll(keepFilter(state, ''));
    t.deepEqual(
      offsets.map((o) => keep(o)),
      [true, false, true, true, false].slice(0, offsets.length),
      `${what}: live and listed`,
    );
    t.false(keep(counter + 5n), `${what}: listed but not live`);
    t.false(keep(counter + 1000n), `${what}: neither`);
    // A state that does not list the vector's labels (format 1, or another vector): every live label.
    const all = runAll(keepFilter(state, 'other'));
    t.true(offsets.every((o) => all(o)), `${what}: unlisted vector keeps every live label`);
    t.false(all(counter + 5n));
  }
});

test('a write whose vector no longer fits a re-created named vector is refused before it is logged: the shard keeps taking writes and reopens', async (t) => {
  // The collection checks vectors against its config when a write starts; a named vector
  // deleted and re-created with another dimension meanwhile (a write waiting on a read,
  // or a peer whose consensus has not applied the change yet) reaches the shard with the
  // old dimension. Logged and then refused by the engine, it stopped the shard, and every
  // replay failed the same way, so the shard never opened again.
  const dir = tmp();
  const d8 = spec({ name: 'd' });
  const shard = await LocalShard.open({ dir, engine, vectors: [d8], walSegmentBytes: 1 << 20, flushIntervalMs: 3_600_000, payloadIndexes: {}, logger });
  const v8 = () => Float32Array.from({ length: DIM }, () => rnd());
  await shard.update(() => ({ kind: 'upsert', points: [{ id: normalizePointId(1), vectors: new Map([['d', v8()]]), payload: null }] }), true);
  const d4 = spec({ name: 'd', dim: 4 });
  await shard.changeVectorNames([d4], ['d']);
  // Refused as this replica's fault: a writer marks a remote replica that refuses it Dead (then recovered).
  await t.throwsAsync(shard.update(() => ({ kind: 'upsert', points: [{ id: normalizePointId(2), vectors: new Map([['d', v8()]]), payload: null }] }), true), { instanceOf: ShardUnavailableError });
  await t.throwsAsync(shard.update(() => ({ kind: 'update_vectors', points: [{ id: normalizePointId(1), vectors: new Map([['d', v8()]]) }] }), true));
  await t.throwsAsync(shard.applyTagged({ kind: 'upsert', points: [{ id: normalizePointId(5), vectors: new Map([['d', v8()]]), payload: null }] }, { peer: 7n, clock: 0, tick: 1n }, true));
  // The shard still takes a write that fits.
  await shard.update(() => ({ kind: 'upsert', points: [{ id: normalizePointId(3), vectors: new Map([['d', Float32Array.of(1, 2, 3, 4)]]), payload: null }] }), true);
  t.is(shard.pointCount, 2);
  await shard.close();
  const again = await LocalShard.open({ dir, engine, vectors: [d4], walSegmentBytes: 1 << 20, flushIntervalMs: 3_600_000, payloadIndexes: {}, logger });
  t.is(again.pointCount, 2);
  const off = again.matching(null).find((o) => again.entryAt(o)!.key.key === normalizePointId(3).key)!;
  t.deepEqual(Array.from((await again.vectorsOf(off, ['d'])).get('d')!), [1, 2, 3, 4]);
  await again.close();
});
test('a write naming a vector this replica has no store for (its consensus has yet to apply the name\'s creation) is refused before it is logged, and its clock tick stays unseen: the same write applies once the name exists', async (t) => {
  // Skipped at apply, the vectors were lost on that replica while the tick counted as
  // seen, so no recovery (which starts above a replica's ticks) would ever bring them.
  const dir = tmp();
  const shard = await open(dir);
  const v2 = spec({ name: 'v2' });
  const tag = { peer: 7n, clock: 0, tick: 1n };
  const dense = { kind: 'upsert' as const, points: [{ id: normalizePointId(1), vectors: new Map([['', vec()], ['v2', vec()]]), payload: null }] };
  await t.throwsAsync(shard.applyTagged(dense, tag, true), { instanceOf: ShardUnavailableError, message: /vector "v2": this replica has no such vector/ });
  const sparse = { kind: 'update_vectors' as const, points: [{ id: normalizePointId(1), vectors: new Map(), sparse: new Map([['s', { indices: Uint32Array.of(3), values: Float32Array.of(0.5) }]]) }] };
  await t.throwsAsync(shard.update(() => sparse, true), { instanceOf: ShardUnavailableError, message: /sparse vector "s": this replica has no such vector/ });
  t.is(shard.pointCount, 0);
  await shard.changeVectorNames([v2], [], [{ name: 's', fullScanThreshold: 10_000, idf: false, datatype: 'float32' }]);
  const r = await shard.applyTagged(dense, tag, true);
  t.true(r.applied, 'the tick was not taken by the refused write');
  await shard.update(() => sparse, true);
  const off = shard.matching(null)[0];
  t.deepEqual(Array.from((await shard.vectorsOf(off, ['v2'])).get('v2')!), Array.from(dense.points[0].vectors.get('v2')!));
  t.deepEqual(Array.from((await shard.sparseOf(off, ['s'])).get('s')!.indices), [3]);
  await shard.close();
});

test('deleting a named vector while its optimizer job runs: the job stops and the shard keeps taking writes', async (t) => {
  // changeVectorNames cancelled the dropped store's job while holding the update lock;
  // a job takes that lock after every chunk and when it stops, so the two waited for
  // each other forever and every later write of the shard hung.
  const dir = tmp();
  const big = 64;
  const keep = spec({ name: 'keep' });
  const drop = testSpec(big, { name: 'drop', indexingThresholdKb: 1, m: 32, efConstruct: 400 });
  const shard = await LocalShard.open({ dir, engine, vectors: [keep, drop], walSegmentBytes: 1 << 22, flushIntervalMs: 3_600_000, payloadIndexes: {}, logger });
  const bigVec = () => Float32Array.from({ length: big }, () => rnd());
  for (let b = 0; b < 4; b++) {
    const points = Array.from({ length: 2000 }, (_, i) => ({ id: normalizePointId(b * 2000 + i), vectors: new Map([['keep', vec()], ['drop', bigVec()]]), payload: null }));
    await shard.update(() => ({ kind: 'upsert', points }), true);
  }
  const store = shard.vectors.get('drop')!;
  // The name must be dropped while a job runs. A job that ended before this point may have
  // indexed every point (nothing more is due), so instead of waiting for one, write more
  // until a write leaves one running: an applied write starts a due job at once.
  for (let b = 4; !store.busy(); b++) {
    if (b >= 40) throw new Error('no index job of the vector to drop was running after 40 batches');
    const points = Array.from({ length: 2000 }, (_, i) => ({ id: normalizePointId(b * 2000 + i), vectors: new Map([['keep', vec()], ['drop', bigVec()]]), payload: null }));
    await shard.update(() => ({ kind: 'upsert', points }), true);
  }
  let changed = false;
  const change = shard.changeVectorNames([], ['drop']).then(() => (changed = true));
  await waitFor('the named vector change is done', () => changed);
  await change;
  t.false(shard.vectors.has('drop'));
  let wrote = false;
  await shard.update(() => ({ kind: 'upsert', points: [{ id: normalizePointId(99_999), vectors: new Map([['keep', vec()]]), payload: null }] }), true).then(() => (wrote = true));
  t.true(wrote);
  await shard.close();
});
