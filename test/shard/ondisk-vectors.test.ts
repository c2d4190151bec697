/**
 * On-disk vectors in a shard (`on_disk: true` on a quantized vector): the HNSW index
 * keeps its f32 originals in a memory-mapped side file of the shard directory. Writes,
 * the optimizer (moves, vacuum), checkpoints, restarts and snapshot pins work with it,
 * the originals are never in memory (`originalBytes` 0), and searches answer exactly as
 * an in-memory shard with the same data does. Native backend (WASM has no mmap).
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as path from 'node:path';

import type { VectorSpec } from '../../ts/shard/vector-store';
import { normalizePointId } from '../../ts/shard/id-tracker';
import type { LocalShard } from '../../ts/shard/local-shard';
import { answers as answersOf, batch, DIM, engine, filesMatching, open, range, tmp as tmpDir, write } from './ondisk-helpers';
import { testSpec } from './spec';

const spec = (over: Partial<VectorSpec> = {}): VectorSpec =>
  testSpec(DIM, { quantization: { kind: 'scalar' }, indexingThresholdKb: 4, m: 8, efConstruct: 64, deletedThreshold: 0.2, vacuumMinVectorNumber: 100, ...over });

const tmp = () => tmpDir('quiver-ondisk-');
const origFiles = (dir: string) => filesMatching(dir, /^orig-.*\.f32$/);
const answers = (shard: LocalShard) => answersOf(shard, 99, [64]);

if (engine.backend === 'native') {
  test('on-disk originals: write, optimize, checkpoint, restart, more writes, delete, vacuum, restart', async (t) => {
    const dir = tmp();
    const memDir = tmp();
    t.teardown(() => {
      fs.rmSync(dir, { recursive: true, force: true });
      fs.rmSync(memDir, { recursive: true, force: true });
    });
    let disk = await open(dir, spec({ onDisk: true }));
    let mem = await open(memDir, spec());
    for (let b = 0; b < 6; b++) await write([disk, mem], () => batch(range(b * 100, 100), b));
    await Promise.all([disk.waitOptimized(), mem.waitOptimized()]);
    const stats = () => disk.vectors.get('')!.indexedStats()!;
    t.is(stats().count, 600);
    t.is(stats().originalBytes, 0, 'no originals in memory');
    t.is(stats().originalFileBytes, 600 * DIM * 4);
    t.true(mem.vectors.get('')!.indexedStats()!.originalBytes > 0);
    const files = origFiles(dir);
    t.is(files.length, 1);
    t.is(fs.statSync(path.join(dir, files[0])).size, 600 * DIM * 4);
    t.deepEqual(await answers(disk), await answers(mem), 'the same answers as in memory');

    // Checkpoint and restart: the index file names the side file; the load maps it.
    await disk.checkpoint();
    const cp = JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8'));
    t.is(cp.vectors[''].originals, files[0]);
    const before = await answers(disk);
    await disk.close();
    disk = await open(dir, spec({ onDisk: true }));
    t.is(stats().originalBytes, 0);
    t.deepEqual(await answers(disk), before);

    // More writes: the optimizer appends to the same file.
    for (let b = 6; b < 9; b++) await write([disk, mem], () => batch(range(b * 100, 100), b));
    await Promise.all([disk.waitOptimized(), mem.waitOptimized()]);
    t.deepEqual(origFiles(dir), files);
    t.is(stats().count, 900);
    t.is(stats().originalBytes, 0);
    t.true(fs.statSync(path.join(dir, files[0])).size >= 900 * DIM * 4);
    t.deepEqual(await answers(disk), await answers(mem));

    // Deletes past the threshold: the vacuum writes a new side file; the old one goes
    // once no checkpoint names it.
    const gone = range(0, 900).filter((i) => i % 3 === 0);
    await write([disk, mem], () => ({ kind: 'delete', ids: gone.map((i) => normalizePointId(i)) }));
    await Promise.all([disk.waitOptimized(), mem.waitOptimized()]);
    t.is(stats().deleted, 0, 'vacuumed');
    t.is(stats().originalBytes, 0);
    await disk.checkpoint();
    const after = origFiles(dir);
    t.is(after.length, 1);
    t.not(after[0], files[0]);
    t.is(fs.statSync(path.join(dir, after[0])).size, 600 * DIM * 4);
    t.deepEqual(await answers(disk), await answers(mem));
    const vectorOf = async (s: LocalShard, id: number) => (await s.vectorsOf(s.entry(normalizePointId(id))!.offset, ['']))!.get('')!;
    t.deepEqual(Array.from(await vectorOf(disk, 1)), Array.from(await vectorOf(mem, 1)));

    // A snapshot pin holds the side file, with the bytes the checkpoint covers at least.
    const pin = await disk.pinSnapshot();
    t.true(pin.files.includes(after[0]));
    t.true(pin.files.indexOf(after[0]) < pin.files.findIndex((f) => f.includes('-indexed-')), 'side file before the index file that names it');
    t.true((pin.sizes?.[after[0]] ?? 0) >= 600 * DIM * 4);
    await pin.release();

    const last = await answers(disk);
    await disk.close();
    disk = await open(dir, spec({ onDisk: true }));
    t.is(stats().originalBytes, 0);
    t.deepEqual(await answers(disk), last);
    t.is(disk.count(null), 600);
    await disk.close();
    await mem.close();
  });

  test('on_disk flipped either way moves the originals to and from a side file', async (t) => {
    const dir = tmp();
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const shard = await open(dir, spec());
    for (let b = 0; b < 4; b++) await shard.update(() => batch(range(b * 100, 100), 40 + b), true);
    await shard.waitOptimized();
    const store = shard.vectors.get('')!;
    t.true(store.indexedStats()!.originalBytes > 0);
    const inMemory = await answers(shard);
    store.spec.onDisk = true;
    shard.kick();
    await shard.waitOptimized();
    t.is(store.indexedStats()!.originalBytes, 0);
    t.is(origFiles(dir).length, 1);
    t.deepEqual(await answers(shard), inMemory);
    await shard.checkpoint();
    store.spec.onDisk = false;
    shard.kick();
    await shard.waitOptimized();
    t.is(store.indexedStats()!.originalBytes, 400 * DIM * 4);
    await shard.checkpoint();
    t.deepEqual(origFiles(dir), [], 'the side file goes once no checkpoint names it');
    t.deepEqual(await answers(shard), inMemory);
    // memmap_threshold: above it, the originals go to a side file as with on_disk.
    store.spec.memmapThresholdKb = 1;
    shard.kick();
    await shard.waitOptimized();
    t.is(store.indexedStats()!.originalBytes, 0);
    store.spec.memmapThresholdKb = 400 * DIM * 4; // far above: back into memory
    shard.kick();
    await shard.waitOptimized();
    t.true(store.indexedStats()!.originalBytes > 0);
    await shard.close();
  });

  test('a shard whose side file is shorter than its checkpoint needs fails to open with a clear error', async (t) => {
    const dir = tmp();
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const shard = await open(dir, spec({ onDisk: true }));
    for (let b = 0; b < 3; b++) await shard.update(() => batch(range(b * 100, 100), 70 + b), true);
    await shard.waitOptimized();
    await shard.close();
    const [file] = origFiles(dir);
    fs.truncateSync(path.join(dir, file), 100 * DIM * 4);
    const e = await t.throwsAsync(open(dir, spec({ onDisk: true })));
    t.regex(String(e?.message), /shorter than the index/);
  });
}

if (engine.backend !== 'native') test('on-disk vectors need the native engine (skipped on WASM)', (t) => t.pass());
