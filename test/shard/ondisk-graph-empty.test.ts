/**
 * An indexed index with no slots (every point deleted, then vacuumed) whose graph the
 * optimizer mapped to a file: the mapping is 0 bytes. The store once decided whether a
 * loaded index maps its graph by the mapping's size, so after a restart it tracked no
 * graph file although the engine's index still mapped one and named it in every save;
 * a checkpoint taken before the optimizer's next add (here: the index job due at open
 * for the points left in the flat index, stopped by a shutdown before its first add)
 * wrote an index file naming the graph file while checkpoint.json did not, the clean-up
 * removed the file, and the next start could not load the shard. The store now reads
 * which graph file the index file names from its header.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as path from 'node:path';

import type { VectorSpec } from '../../ts/shard/vector-store';
import { normalizePointId } from '../../ts/shard/id-tracker';
import { indexGraphFile } from '../../bindings/wasm-storage';
import { batch, DIM, engine, filesMatching, open, range, tmp as tmpDir, write } from './ondisk-helpers';
import { testSpec } from './spec';

const spec = (over: Partial<VectorSpec> = {}): VectorSpec =>
  testSpec(DIM, { indexingThresholdKb: 4, m: 8, efConstruct: 64, deletedThreshold: 0.2, vacuumMinVectorNumber: 100, maxIndexingThreads: 1, graphOnDisk: true, ...over });

const checkpoint = (dir: string) => JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8'));

if (engine.backend === 'native') {
  test('graph on disk: an empty mapped graph keeps its file named across a restart and a checkpoint', async (t) => {
    const dir = tmpDir('quiver-review2-empty-graph-');
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    let shard = await open(dir, spec());
    await write([shard], () => batch(range(0, 600), 1));
    await shard.waitOptimized();
    // Every point deleted: the vacuum leaves an empty index, which `place` maps (0 bytes).
    await write([shard], () => ({ kind: 'delete', ids: range(0, 600).map((i) => normalizePointId(i)) }));
    await shard.waitOptimized();
    t.is(shard.vectors.get('')!.indexedStats()!.slots, 0);
    await shard.checkpoint();
    const graph = checkpoint(dir).vectors[''].graph;
    t.truthy(graph, 'the empty graph is mapped and named');
    t.deepEqual(filesMatching(dir, /^graph-.*\.links$/), [graph]);
    // Points left in the flat index (no index job now), saved by the closing checkpoint.
    shard.vectors.get('')!.spec.indexingThresholdKb = 0;
    await write([shard], () => batch(range(1000, 10), 2));
    await shard.close();

    // Restart: the index job for those points is due first; a shutdown stops it before its first add.
    shard = await open(dir, spec());
    await shard.close();
    const cp = checkpoint(dir);
    const named = indexGraphFile(fs.readFileSync(path.join(dir, cp.vectors[''].indexed)));
    const onDisk = filesMatching(dir, /^graph-.*\.links$/);
    t.log(`checkpoint names graph ${String(cp.vectors[''].graph)}; ${cp.vectors[''].indexed} names ${String(named?.name)}; graph files on disk: ${JSON.stringify(onDisk)}`);
    // The shard opens again (tried first, so its outcome is reported with the checks below).
    let reopened: Awaited<ReturnType<typeof open>> | null = null;
    let failure = '';
    try {
      reopened = await open(dir, spec());
    } catch (err) {
      failure = String((err as Error).message);
    }
    if (reopened !== null) await (reopened as Awaited<ReturnType<typeof open>>).close();
    t.is(failure, '', 'the shard opens after the restart');
    t.is(cp.vectors[''].graph ?? null, named?.name ?? null, 'checkpoint.json names the graph file its indexed index file names');
    if (named !== null) t.true(onDisk.includes(named.name), `${named.name}, named by ${cp.vectors[''].indexed}, is on disk`);
  });
} else {
  test('graph on disk needs the native engine', (t) => t.pass());
}
