/**
 * The HNSW graph on disk in a shard (`hnsw_config.on_disk`, spec `graphOnDisk`): the
 * indexed index's level-0 links in a memory-mapped graph file of the shard directory.
 * The optimizer maps them once the index is built; a merge of more points copies them
 * back into memory and maps the grown graph to a new file; deletes keep them mapped; a
 * vacuum's new index gets a new file; checkpoints name the file the saved index names,
 * snapshot pins hold it (before the index file), restarts map it again; the old files
 * go once nothing names them. Searches answer exactly as an in-memory shard with the
 * same data does. Native backend (WASM has no mmap).
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as path from 'node:path';

import type { VectorSpec } from '../../ts/shard/vector-store';
import { normalizePointId } from '../../ts/shard/id-tracker';
import type { LocalShard } from '../../ts/shard/local-shard';
import { answers as answersOf, batch, DIM, engine, filesMatching, open, range, tmp as tmpDir, write } from './ondisk-helpers';
import { testSpec } from './spec';

// One build thread: the two shards build the same graph.
const spec = (over: Partial<VectorSpec> = {}): VectorSpec =>
  testSpec(DIM, { indexingThresholdKb: 4, m: 8, efConstruct: 64, deletedThreshold: 0.2, vacuumMinVectorNumber: 100, maxIndexingThreads: 1, ...over });

const tmp = () => tmpDir('quiver-ondisk-graph-');
const graphFiles = (dir: string) => filesMatching(dir, /^graph-.*\.links$/);
const answers = (shard: LocalShard) => answersOf(shard, 7, [16, 64]);

if (engine.backend === 'native') {
  test('graph on disk: build, checkpoint, restart, merge (new file), delete, vacuum, pin, PATCH off, restart', async (t) => {
    const dir = tmp();
    const memDir = tmp();
    t.teardown(() => {
      fs.rmSync(dir, { recursive: true, force: true });
      fs.rmSync(memDir, { recursive: true, force: true });
    });
    let disk = await open(dir, spec({ graphOnDisk: true }));
    const mem = await open(memDir, spec());
    for (let b = 0; b < 6; b++) await write([disk, mem], () => batch(range(b * 100, 100), b));
    await Promise.all([disk.waitOptimized(), mem.waitOptimized()]);
    const stats = () => disk.vectors.get('')!.indexedStats()!;
    const links0 = (n: number) => n * (1 + 2 * 8) * 4;
    t.is(stats().count, 600);
    t.is(stats().graphFileBytes, links0(600), 'level-0 links mapped');
    t.is(stats().graphBytes, mem.vectors.get('')!.indexedStats()!.graphBytes - links0(600), 'not in memory');
    t.is(mem.vectors.get('')!.indexedStats()!.graphFileBytes, 0);
    // Each merge of a batch mapped the graph to a new file; those nothing names go at a checkpoint.
    await disk.checkpoint();
    const files = graphFiles(dir);
    t.is(files.length, 1);
    t.is(fs.statSync(path.join(dir, files[0])).size, links0(600));
    t.deepEqual(await answers(disk), await answers(mem), 'the same answers as in memory');

    // Checkpoint and restart: the checkpoint names the graph file; the load maps it.
    const cp = JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8'));
    t.is(cp.vectors[''].graph, files[0]);
    const before = await answers(disk);
    await disk.close();
    disk = await open(dir, spec({ graphOnDisk: true }));
    t.is(stats().graphFileBytes, links0(600));
    t.deepEqual(await answers(disk), before);

    // More writes: the merge copies the links into memory, and the grown graph goes to a
    // new file; the old one goes at the next checkpoint.
    for (let b = 6; b < 9; b++) await write([disk, mem], () => batch(range(b * 100, 100), b));
    await Promise.all([disk.waitOptimized(), mem.waitOptimized()]);
    t.is(stats().count, 900);
    t.is(stats().graphFileBytes, links0(900));
    await disk.checkpoint();
    const merged = graphFiles(dir);
    t.is(merged.length, 1);
    t.not(merged[0], files[0], 'a new file name');
    t.deepEqual(await answers(disk), await answers(mem));

    // Deletes keep the links mapped; past the threshold, the vacuum's new index gets a new file.
    const gone = range(0, 900).filter((i) => i % 3 === 0);
    await write([disk, mem], () => ({ kind: 'delete', ids: gone.map((i) => normalizePointId(i)) }));
    await Promise.all([disk.waitOptimized(), mem.waitOptimized()]);
    t.is(stats().deleted, 0, 'vacuumed');
    t.is(stats().graphFileBytes, links0(600));
    await disk.checkpoint();
    const after = graphFiles(dir);
    t.is(after.length, 1);
    t.not(after[0], merged[0]);
    t.deepEqual(await answers(disk), await answers(mem));

    // A snapshot pin holds the graph file, listed before the index file that names it.
    const pin = await disk.pinSnapshot();
    t.true(pin.files.includes(after[0]));
    t.true(pin.files.indexOf(after[0]) < pin.files.findIndex((f) => f.includes('-indexed-')));
    await pin.release();

    // Off: the links come back into memory; the file goes at the next checkpoint.
    const store = disk.vectors.get('')!;
    store.spec.graphOnDisk = false;
    disk.kick();
    await disk.waitOptimized();
    t.is(stats().graphFileBytes, 0);
    await disk.checkpoint();
    t.deepEqual(graphFiles(dir), []);
    t.is(JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8')).vectors[''].graph, undefined);
    const last = await answers(disk);
    t.deepEqual(last, await answers(mem));
    await disk.close();
    disk = await open(dir, spec({ graphOnDisk: true }));
    // Reopened with the setting on again: mapped to a new file once the optimizer runs.
    await disk.waitOptimized();
    t.is(stats().graphFileBytes, links0(600));
    t.is(graphFiles(dir).length, 1);
    t.deepEqual(await answers(disk), last);
    await disk.close();
    await mem.close();
  });
} else {
  test('graph on disk needs the native engine', (t) => t.pass());
}
