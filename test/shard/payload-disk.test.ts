/**
 * On-disk payloads (on_disk_payload): the DiskPayloadStore against the in-memory
 * PayloadStore as the model under random operations, saves, reopens and compactions;
 * bytes after a checkpoint's length cut off at open (a crash); a LocalShard keeping
 * payloads on disk across checkpoints, WAL replay, filters on unindexed fields,
 * snapshots of a file still being appended to, and moves between memory and disk.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as path from 'node:path';
import pino from 'pino';

import { loadEngine } from '../../bindings';
import { normalizePointId, pointIdToJson } from '../../ts/shard/id-tracker';
import { LocalShard } from '../../ts/shard/local-shard';
import { DiskPayloadStore, type DiskPayloadRef } from '../../ts/shard/payload-disk';
import { PayloadStore, type Payload } from '../../ts/shard/payload-store';
import type { ShardOperation } from '../../ts/shard/operations';
import { mulberry32 } from '../support/rng';
import { testSpec } from './spec';
import { scratchDirs } from '../support/scratch';

const logger = pino({ level: 'silent' });
const engine = loadEngine({ logger });

const tmp = scratchDirs('quiver-paydisk-');

function contents(s: { entries(): IterableIterator<[bigint, Readonly<Payload>]> }): Map<string, Payload> {
  const all = [...s.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1));
  return new Map(all.map(([o, p]) => [String(o), JSON.parse(JSON.stringify(p)) as Payload]));
}

test('random operations, saves, reopens and compactions: the disk store always holds what the in-memory store holds', async (t) => {
  const dir = tmp();
  const rnd = mulberry32(7);
  const model = new PayloadStore();
  let disk = await DiskPayloadStore.create(dir, 1);
  disk.compactMinGarbage = 4096;
  let fileNo = 1;
  const next = () => ++fileNo;
  const offsets = [0n, 1n, 2n, 3n, 5n, 8n, 13n, 100_000n, 2n ** 60n];
  let compacted = 0;
  let ref: DiskPayloadRef | null = null;
  for (let step = 0; step < 3000; step++) {
    const o = offsets[Math.floor(rnd() * offsets.length)];
    const r = rnd();
    const value = { n: step, tag: `t${step % 5}`, nested: { a: [1, { b: step }], s: 'x'.repeat(Math.floor(rnd() * 300)) } };
    const at = rnd() < 0.5 ? 'nested' : null;
    for (const s of [model, disk]) {
      if (r < 0.3) s.overwrite(o, value);
      else if (r < 0.5) s.set(o, { extra: step }, at);
      else if (r < 0.6) s.deleteKeys(o, ['nested.a', 'tag']);
      else if (r < 0.7) s.clear(o);
      else if (r < 0.8) s.remove(o);
      else s.set(o, { only: 'new' });
    }
    if (step % 250 === 249) {
      const before = disk.dataFile;
      ref = await disk.save(BigInt(step), next);
      if (ref.data !== before) compacted++;
      if (step % 500 === 499) {
        disk.close();
        disk = await DiskPayloadStore.open(dir, ref);
        disk.compactMinGarbage = 4096;
      }
    }
    if (step % 97 === 0) t.deepEqual(contents(disk), contents(model), `step ${step}`);
  }
  t.deepEqual(contents(disk), contents(model));
  for (const o of offsets) {
    t.is(disk.has(o), model.has(o));
    t.deepEqual(await disk.getAsync(o), model.has(o) ? (JSON.parse(JSON.stringify(model.get(o))) as Payload) : null);
  }
  t.true(compacted > 0, 'compaction ran');
  t.true(disk.garbageBytes <= Math.max(disk.liveBytes, 4096) + 300 * 1024, 'compaction keeps garbage bounded');
  disk.close();
});

test('a crash after a save: bytes appended past the checkpoint length are cut off at open and the saved state comes back', async (t) => {
  const dir = tmp();
  const disk = await DiskPayloadStore.create(dir, 1);
  disk.overwrite(1n, { a: 1 });
  disk.overwrite(2n, { b: 2 });
  const ref = await disk.save(1n, () => 2);
  disk.overwrite(1n, { a: 'changed' });
  disk.overwrite(3n, { c: 3 });
  // Force the buffered appends to the file (a large payload flushes the buffer) without a save.
  disk.overwrite(4n, { big: 'y'.repeat(2 << 20) });
  t.true(fs.statSync(path.join(dir, ref.data)).size > ref.length);
  // No close: like kill -9.
  const again = await DiskPayloadStore.open(dir, ref);
  t.is(fs.statSync(path.join(dir, ref.data)).size, ref.length);
  t.deepEqual(again.get(1n), { a: 1 });
  t.deepEqual(again.get(2n), { b: 2 });
  t.false(again.has(3n));
  t.false(again.has(4n));
  again.overwrite(5n, { e: 5 });
  t.deepEqual(again.get(5n), { e: 5 });
  again.close();
  disk.close();
});

test('a damaged index file is refused at open', async (t) => {
  const dir = tmp();
  const disk = await DiskPayloadStore.create(dir, 1);
  disk.overwrite(1n, { a: 1 });
  const ref = await disk.save(1n, () => 2);
  disk.close();
  const file = path.join(dir, ref.index);
  const bytes = fs.readFileSync(file);
  bytes[20] ^= 0xff;
  fs.writeFileSync(file, bytes);
  await t.throwsAsync(DiskPayloadStore.open(dir, ref), { message: /checksum/ });
  await t.throwsAsync(DiskPayloadStore.open(dir, { ...ref, length: 1 }), { message: /payload index file is corrupt|bytes/ });
});

// -- a shard with on-disk payloads ---------------------------------------------------------

async function openShard(dir: string, onDiskPayload = true): Promise<LocalShard> {
  return LocalShard.open({ dir, engine, vectors: [testSpec(4)], walSegmentBytes: 1 << 20, flushIntervalMs: 3_600_000, payloadIndexes: {}, onDiskPayload, logger });
}

function upsert(ids: number[], payload: (i: number) => Payload): ShardOperation {
  return {
    kind: 'upsert',
    points: ids.map((i) => ({ id: normalizePointId(i), vectors: new Map([['', Float32Array.from([i, 1, 0, 0])]]), payload: payload(i) })),
  };
}

function payloads(shard: LocalShard): Map<string, unknown> {
  const out = new Map<string, unknown>();
  for (const off of shard.matching(null)) out.set(shard.entryAt(off)!.key.key, shard.payloadOf(off));
  return new Map([...out].sort((a, b) => (a[0] < b[0] ? -1 : 1)));
}

const doc = (i: number): Payload => ({ i, colour: ['red', 'green', 'blue'][i % 3], text: `point ${i} `.repeat(20) });

test('a shard with on-disk payloads: no payload in the state file, filters on unindexed fields, set/overwrite/delete, checkpoint, WAL replay after a crash', async (t) => {
  const dir = tmp();
  const shard = await openShard(dir);
  t.true(shard.payloadsOnDisk);
  await shard.update(() => upsert([...Array(200).keys()], doc), true);
  await shard.update(() => ({ kind: 'set_payload', ids: [normalizePointId(3)], payload: { colour: 'violet' }, key: null }), true);
  await shard.update(() => ({ kind: 'overwrite_payload', ids: [normalizePointId(4)], payload: { only: true } }), true);
  await shard.update(() => ({ kind: 'delete_payload', ids: [normalizePointId(5)], keys: ['text'] }), true);
  await shard.update(() => ({ kind: 'clear_payload', ids: [normalizePointId(6)] }), true);
  await shard.update(() => ({ kind: 'delete', ids: [normalizePointId(7)] }), true);
  const red = shard.matching({ must: [{ key: 'colour', match: { value: 'red' } }] } as never).map((o) => Number(pointIdToJson(shard.entryAt(o)!.key))).sort((a, b) => a - b);
  const expected = [...Array(200).keys()].filter((i) => i % 3 === 0 && i !== 3 && i !== 6).sort((a, b) => a - b);
  t.deepEqual(red, expected, 'a filter on an unindexed field reads the payloads from disk');
  t.deepEqual(shard.payloadOf(shard.entry(normalizePointId(3))!.offset), { ...doc(3), colour: 'violet' });
  t.deepEqual(shard.payloadOf(shard.entry(normalizePointId(4))!.offset), { only: true });
  t.deepEqual(await shard.payloadOfAsync(shard.entry(normalizePointId(5))!.offset), { i: 5, colour: 'blue' });
  t.is(shard.payloadOf(shard.entry(normalizePointId(6))!.offset), null);
  const before = payloads(shard);
  await shard.checkpoint();
  const cp = JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8')) as { state: string; payloads: DiskPayloadRef };
  t.regex(cp.payloads.data, /^payload-\d+\.dat$/);
  t.true(fs.statSync(path.join(dir, cp.state)).size < 200 * 100, 'the state file holds no payload text');
  // More writes after the checkpoint, acknowledged, then a crash (no final checkpoint).
  await shard.update(() => upsert([300, 301], doc), true);
  await shard.update(() => ({ kind: 'set_payload', ids: [normalizePointId(8)], payload: { late: 1 }, key: null }), true);
  const acknowledged = payloads(shard);
  t.notDeepEqual(acknowledged, before);
  await shard.drop();
  const again = await openShard(dir);
  t.deepEqual(payloads(again), acknowledged, 'the WAL replays the writes the checkpoint did not cover');
  await again.close();
  const third = await openShard(dir);
  t.deepEqual(payloads(third), acknowledged);
  await third.close();
});

test('on_disk_payload changed: the payloads move between memory and disk and every restart keeps them', async (t) => {
  const dir = tmp();
  const shard = await openShard(dir, false);
  t.false(shard.payloadsOnDisk);
  await shard.update(() => upsert([1, 2, 3], doc), true);
  const before = payloads(shard);
  await shard.setPayloadOnDisk(true);
  t.true(shard.payloadsOnDisk);
  t.deepEqual(payloads(shard), before);
  await shard.update(() => upsert([4], doc), true);
  const four = payloads(shard);
  await shard.close();
  // Opened with the other setting (a config change before a restart): moved at load.
  const mem = await openShard(dir, false);
  t.false(mem.payloadsOnDisk);
  t.deepEqual(payloads(mem), four);
  await mem.close();
  const cp = JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8')) as { payloads?: unknown };
  t.is(cp.payloads, undefined, 'an in-memory checkpoint names no payload file');
  t.deepEqual(
    fs.readdirSync(dir).filter((f) => /^payload-|^payidx-/.test(f)),
    [],
    'the payload files are removed once no checkpoint names them',
  );
  const disk = await openShard(dir, true);
  t.deepEqual(payloads(disk), four);
  await disk.close();
});

test('a checkpoint that fails after payloads moved to disk: the retry still records the move (the flag is cleared only once a checkpoint is written)', async (t) => {
  const dir = tmp();
  const shard = await openShard(dir, false);
  await shard.update(() => upsert([1, 2, 3], doc), true);
  await shard.checkpoint();
  const seq = (JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8')) as { applied_seq: string }).applied_seq;
  await shard.setPayloadOnDisk(true);
  // The fault: the payload index file the next checkpoint writes has a directory in its way (the rename fails).
  const dataNo = Number(/^payload-([0-9]+)\.dat$/.exec(fs.readdirSync(dir).find((f) => /^payload-[0-9]+\.dat$/.test(f))!)![1]);
  const blocker = path.join(dir, `payidx-${seq}-${dataNo + 1}.bin`);
  fs.mkdirSync(blocker);
  await t.throwsAsync(shard.checkpoint());
  fs.rmdirSync(blocker);
  // No write since: the same applied seq. The retry must still write the checkpoint that names the payload files.
  await shard.checkpoint();
  const cp = JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8')) as { applied_seq: string; payloads?: DiskPayloadRef };
  t.is(cp.applied_seq, seq);
  t.truthy(cp.payloads, 'the checkpoint records the payloads on disk');
  const before = payloads(shard);
  await shard.close();
  const again = await openShard(dir, true);
  t.true(again.payloadsOnDisk);
  t.deepEqual(payloads(again), before);
  await again.close();
});

test('a pinned snapshot of on-disk payloads copies the checkpoint length of a data file that writes keep appending to', async (t) => {
  const dir = tmp();
  const shard = await openShard(dir);
  await shard.update(() => upsert([1, 2, 3], doc), true);
  const pin = await shard.pinSnapshot();
  const cp = JSON.parse(pin.checkpoint.toString()) as { payloads: DiskPayloadRef };
  t.deepEqual(pin.sizes, { [cp.payloads.data]: cp.payloads.length });
  t.true(pin.files.includes(cp.payloads.data) && pin.files.includes(cp.payloads.index));
  const expected = payloads(shard);
  await shard.update(() => upsert([4, 5], doc), true);
  await shard.checkpoint();
  const copy = tmp();
  fs.writeFileSync(path.join(copy, 'checkpoint.json'), pin.checkpoint);
  for (const f of pin.files) {
    const data = fs.readFileSync(path.join(dir, f));
    fs.writeFileSync(path.join(copy, f), pin.sizes?.[f] !== undefined ? data.subarray(0, pin.sizes[f]) : data);
  }
  fs.mkdirSync(path.join(copy, 'wal'));
  fs.writeFileSync(path.join(copy, 'wal', `${(pin.appliedSeq + 1n).toString().padStart(20, '0')}.wal`), '');
  await pin.release();
  await shard.close();
  const restored = await openShard(copy);
  t.deepEqual(payloads(restored), expected);
  await restored.close();
});
