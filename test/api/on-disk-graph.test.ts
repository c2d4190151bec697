/**
 * `hnsw_config.on_disk: true` through a real bin/quiver: the HNSW index's level-0 links
 * in a memory-mapped graph file (`graph-<n>-<hex>.links`), for an f32 vector (vectors
 * in memory, links from the map) and for an int8 vector whose originals are on disk
 * too (set per vector), each next to an in-memory twin with the same data and settings.
 * `GET /collections/{c}` shows on_disk true; searches answer exactly as the twin does;
 * acknowledged writes survive kill -9; a snapshot recovers with the graph file, on this
 * node and on a node running the WASM engine (which reads the file into memory); PATCH
 * flips on_disk both ways (and a restart after); a multivector refuses it with a 400.
 */

import test, { type ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { startServer, type Server } from '../crash/server';
import { spec } from '../support/contract';
import { waitFor } from '../support/wait';
import { mulberry32 } from '../support/rng';
import { call, cleanUp, filesUnder, green, ok, recoverCopy, sameIdsCloseScores } from './helpers';

type Json = Record<string, any>;

const DIM = 16;
const rnd = mulberry32(2027);
const vec = () => Array.from({ length: DIM }, () => Math.round((rnd() * 2 - 1) * 1000) / 1000);
const points = Array.from({ length: 900 }, (_, i) => ({ id: i + 1, vector: vec(), payload: { i } }));
const queries = Array.from({ length: 8 }, () => vec());

// A graph from 4 KiB on; one build thread, so twins build the same graph.
const common = { optimizers_config: { indexing_threshold: 4, flush_interval_sec: 1 } };
const graph = { m: 8, ef_construct: 64, max_indexing_threads: 1 };
const configs: Record<string, Json> = {
  // f32 vectors in memory, the graph on disk (collection-level hnsw_config).
  gdisk: { vectors: { size: DIM, distance: 'Cosine' }, hnsw_config: { ...graph, on_disk: true }, ...common },
  gmem: { vectors: { size: DIM, distance: 'Cosine' }, hnsw_config: { ...graph, on_disk: false }, ...common },
  // int8 with the originals on disk and the graph on disk (per-vector hnsw_config override).
  qdisk: {
    vectors: { size: DIM, distance: 'Cosine', on_disk: true, hnsw_config: { on_disk: true } },
    hnsw_config: graph,
    quantization_config: { scalar: { type: 'int8', always_ram: true } },
    ...common,
  },
  qmem: { vectors: { size: DIM, distance: 'Cosine' }, hnsw_config: graph, quantization_config: { scalar: { type: 'int8', always_ram: true } }, ...common },
};

/** Every search shape whose answer the twins must share (graph walks, filtered, exact). */
async function answers(t: ExecutionContext, server: Server, c: string): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const q of queries) {
    for (const params of [{ hnsw_ef: 64 }, { hnsw_ef: 16 }, { exact: true }]) {
      const r = await ok(t, server, 'POST', `/collections/${c}/points/query`, { query: q, limit: 10, params });
      out.push(r.points.map((p: Json) => [p.id, p.score]));
    }
    const f = await ok(t, server, 'POST', `/collections/${c}/points/query`, { query: q, limit: 10, params: { hnsw_ef: 64 }, filter: { must: [{ key: 'i', range: { gte: 100 } }] } });
    out.push(f.points.map((p: Json) => [p.id, p.score]));
  }
  return out;
}

/** Graph files under `root` whose path has a directory named `collection`. */
function graphFiles(root: string, collection?: string): string[] {
  const out = filesUnder(root, /^graph-.*\.links$/);
  return collection === undefined ? out : out.filter((f) => f.split(path.sep).includes(collection));
}

test('hnsw_config.on_disk: shown, same answers as in memory (f32 and int8 with vectors on disk), kill -9, restart, snapshot, PATCH both ways', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-ondisk-graph-'));
  const wasmDir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-ondisk-graph-wasm-'));
  let server = await startServer(dir);
  let wasm: Server | null = null;
  cleanUp(t, [dir, wasmDir], () => [server, wasm]);

  // A multivector keeps its graph in memory: refused, naming the fix; nothing is created.
  const multi = await call(server, 'PUT', '/collections/mv', { vectors: { size: DIM, distance: 'Dot', multivector_config: { comparator: 'max_sim' } }, hnsw_config: { on_disk: true } });
  t.is(multi.status, 400, JSON.stringify(multi.body));
  t.regex(multi.body.status.error, /hnsw_config\.on_disk: true is not supported for multivectors.*set vectors\.hnsw_config\.on_disk to false/);
  t.is((await call(server, 'GET', '/collections/mv')).status, 404);

  for (const [c, cfg] of Object.entries(configs)) {
    await ok(t, server, 'PUT', `/collections/${c}`, cfg);
    for (let at = 0; at < points.length; at += 100) await ok(t, server, 'PUT', `/collections/${c}/points?wait=true`, { points: points.slice(at, at + 100) });
  }
  for (const c of Object.keys(configs)) await green(server, c);
  const info = await ok(t, server, 'GET', '/collections/gdisk');
  t.deepEqual(spec().validateSchema('CollectionInfo', info), []);
  t.is(info.config.hnsw_config.on_disk, true);
  t.is(info.indexed_vectors_count, points.length);
  const qinfo = await ok(t, server, 'GET', '/collections/qdisk');
  t.is(qinfo.config.params.vectors.hnsw_config.on_disk, true);
  t.is(qinfo.config.params.vectors.on_disk, true);
  t.is((await ok(t, server, 'GET', '/collections/gmem')).config.hnsw_config.on_disk, false);
  // Each merge into the graph maps it to a new file; the files no checkpoint names any more go at the next checkpoint.
  await waitFor('one graph file per on-disk collection, none for the twins', async () => graphFiles(dir, 'gdisk').length === 1 && graphFiles(dir, 'qdisk').length === 1 && graphFiles(dir).length === 2, 60_000);
  t.deepEqual(await answers(t, server, 'gdisk'), await answers(t, server, 'gmem'), 'f32: the same answers as the in-memory twin');
  t.deepEqual(await answers(t, server, 'qdisk'), await answers(t, server, 'qmem'), 'int8: the same answers as the in-memory twin');

  // kill -9 right after acknowledged writes: none is lost.
  const late = Array.from({ length: 60 }, (_, i) => ({ id: 5000 + i, vector: vec(), payload: { i: 5000 + i } }));
  for (const c of Object.keys(configs)) {
    await ok(t, server, 'PUT', `/collections/${c}/points?wait=true`, { points: late });
    await ok(t, server, 'POST', `/collections/${c}/points/delete?wait=true`, { points: [1, 2, 3] });
  }
  const scroll = async (s: Server, c: string) => (await ok(t, s, 'POST', `/collections/${c}/points/scroll`, { limit: 10_000, with_vector: true, with_payload: true })).points;
  const acknowledged = await scroll(server, 'gdisk');
  t.is(acknowledged.length, points.length + late.length - 3);
  await server.stop('SIGKILL');
  server = await startServer(dir);
  t.deepEqual(await scroll(server, 'gdisk'), acknowledged, 'after kill -9');
  t.deepEqual(await scroll(server, 'qdisk'), await scroll(server, 'qmem'));
  for (const c of Object.keys(configs)) await green(server, c);
  // The late points were merged into the graph (links copied back into memory, then mapped to a new file).
  t.is((await ok(t, server, 'GET', '/collections/gdisk')).indexed_vectors_count, acknowledged.length);
  await waitFor('one graph file per on-disk collection', async () => graphFiles(dir, 'gdisk').length === 1 && graphFiles(dir, 'qdisk').length === 1, 60_000);
  const want = await answers(t, server, 'gmem');
  const qwant = await answers(t, server, 'qmem');
  t.deepEqual(await answers(t, server, 'gdisk'), want, 'after kill -9 and the merge');
  t.deepEqual(await answers(t, server, 'qdisk'), qwant);

  // Restart (clean): the graph file is mapped again, not rebuilt.
  const before = graphFiles(dir, 'gdisk');
  await server.stop('SIGTERM');
  server = await startServer(dir);
  await green(server, 'gdisk');
  t.deepEqual(graphFiles(dir, 'gdisk'), before, 'the same graph file after a restart');
  t.deepEqual(await answers(t, server, 'gdisk'), want, 'after a restart');

  // Snapshot round trip: the recovered collection maps the graph file it carried.
  const snap = await ok(t, server, 'POST', '/collections/gdisk/snapshots?wait=true');
  const file = path.join(dir, 'snapshots', 'gdisk', snap.name);
  await ok(t, server, 'PUT', '/collections/grestored/snapshots/recover?wait=true', { location: `file://${file}`, priority: 'snapshot' });
  t.is((await ok(t, server, 'GET', '/collections/grestored')).config.hnsw_config.on_disk, true);
  t.is(graphFiles(dir, 'grestored').length, 1, 'the snapshot carried the graph file');
  t.deepEqual(await scroll(server, 'grestored'), acknowledged);
  t.deepEqual(await answers(t, server, 'grestored'), want, 'the recovered collection answers as before');
  // A WASM node recovers the same snapshot, reading the graph file into memory.
  wasm = await startServer(wasmDir, { QUIVER_ENGINE: 'wasm' });
  await recoverCopy(t, wasm, wasmDir, 'gwasm', file);
  t.is((await ok(t, wasm, 'GET', '/collections/gwasm')).config.hnsw_config.on_disk, true);
  t.deepEqual(await scroll(wasm, 'gwasm'), acknowledged);
  sameIdsCloseScores(t, await answers(t, wasm, 'gwasm'), want, 'the WASM engine serves the snapshot with the links read into memory');
  // Its next checkpoint holds the links itself: a restart of the WASM node needs no graph file.
  await waitFor('the WASM node drops the graph file', async () => graphFiles(wasmDir, 'gwasm').length === 0, 60_000);
  await wasm.stop('SIGTERM');
  wasm = await startServer(wasmDir, { QUIVER_ENGINE: 'wasm' });
  t.deepEqual(await scroll(wasm, 'gwasm'), acknowledged, 'the WASM node after a restart');
  await wasm.stop('SIGTERM');
  wasm = null;

  // PATCH: on_disk off moves the links into memory, on again into a new graph file.
  await ok(t, server, 'PATCH', '/collections/gdisk', { hnsw_config: { on_disk: false } });
  await green(server, 'gdisk');
  t.is((await ok(t, server, 'GET', '/collections/gdisk')).config.hnsw_config.on_disk, false);
  t.deepEqual(await answers(t, server, 'gdisk'), want);
  await waitFor('the unused graph file removed', async () => graphFiles(dir, 'gdisk').length === 0, 60_000);
  await ok(t, server, 'PATCH', '/collections/gdisk', { hnsw_config: { on_disk: true } });
  await green(server, 'gdisk');
  await waitFor('gdisk graph file back', async () => graphFiles(dir, 'gdisk').length === 1, 60_000);
  t.notDeepEqual(graphFiles(dir, 'gdisk'), before, 'a new file name');
  t.deepEqual(await answers(t, server, 'gdisk'), want);
  // Per vector: off for qdisk's vector, and its graph comes back into memory.
  await ok(t, server, 'PATCH', '/collections/qdisk', { vectors: { '': { hnsw_config: { on_disk: false } } } });
  await green(server, 'qdisk');
  t.is((await ok(t, server, 'GET', '/collections/qdisk')).config.params.vectors.hnsw_config.on_disk, false);
  await waitFor('qdisk graph file removed', async () => graphFiles(dir, 'qdisk').length === 0, 60_000);
  t.deepEqual(await answers(t, server, 'qdisk'), qwant);
  await server.stop('SIGTERM');
  server = await startServer(dir);
  t.is((await ok(t, server, 'GET', '/collections/gdisk')).config.hnsw_config.on_disk, true);
  t.deepEqual(await answers(t, server, 'gdisk'), want, 'after the flips and a restart');
  t.deepEqual(await answers(t, server, 'qdisk'), qwant);
});

test('storage.hnsw_index.on_disk: true is a default: a multivector that states no on_disk keeps its graph in memory (shown), the dense vectors map theirs; asked for in the body, it is refused', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-ondisk-graph-default-'));
  const server = await startServer(dir, { SERVICE__STORAGE__HNSW_INDEX__ON_DISK: 'true' });
  cleanUp(t, [dir], () => [server]);
  const body = {
    vectors: { dense: { size: DIM, distance: 'Cosine' }, multi: { size: DIM, distance: 'Dot', multivector_config: { comparator: 'max_sim' } } },
    hnsw_config: graph,
    ...common,
  };
  await ok(t, server, 'PUT', '/collections/mixed', body);
  const info = await ok(t, server, 'GET', '/collections/mixed');
  t.is(info.config.hnsw_config.on_disk, true, 'the node default, as the collection shows it');
  t.is(info.config.params.vectors.multi.hnsw_config.on_disk, false, 'the multivector keeps its graph in memory, and says so');
  t.is(info.config.params.vectors.dense.hnsw_config?.on_disk, undefined, 'the dense vector takes the collection value');
  // Points in both vectors; the dense one's graph goes to a mapped file, the multivector's does not.
  await ok(t, server, 'PUT', '/collections/mixed/points?wait=true', {
    points: points.slice(0, 600).map((p) => ({ id: p.id, vector: { dense: p.vector, multi: [p.vector, vec()] } })),
  });
  await green(server, 'mixed');
  await waitFor('the dense vector graph file', () => graphFiles(dir, 'mixed').length > 0);
  const hits = await ok(t, server, 'POST', '/collections/mixed/points/query', { query: [queries[0], queries[1]], using: 'multi', limit: 5 });
  t.is(hits.points.length, 5);
  const dense = await ok(t, server, 'POST', '/collections/mixed/points/query', { query: queries[0], using: 'dense', limit: 5 });
  t.is(dense.points.length, 5);
  // A multivector that states on_disk: true, or a body that asks for it collection-wide: refused as before.
  const own = await call(server, 'PUT', '/collections/own', { vectors: { size: DIM, distance: 'Dot', multivector_config: { comparator: 'max_sim' }, hnsw_config: { on_disk: true } } });
  t.is(own.status, 400, JSON.stringify(own.body));
  const wide = await call(server, 'PUT', '/collections/wide', { vectors: { size: DIM, distance: 'Dot', multivector_config: { comparator: 'max_sim' } }, hnsw_config: { on_disk: true } });
  t.is(wide.status, 400, JSON.stringify(wide.body));
  t.regex(wide.body.status.error, /not supported for multivectors/);
  // A multivector added later takes the collection's hnsw_config (on_disk: true here, the node
  // default), and the add request cannot carry a hnsw_config of its own: refused, with a way that works.
  const late = { dense: { size: DIM, distance: 'Dot', multivector_config: { comparator: 'max_sim' } } };
  const add = await call(server, 'PUT', '/collections/mixed/vectors/late', late);
  t.is(add.status, 400, JSON.stringify(add.body));
  t.regex(add.body.status.error, /the collection's hnsw_config\.on_disk is true/);
  t.regex(add.body.status.error, /cannot set/);
  t.is((await ok(t, server, 'GET', '/collections/mixed')).config.params.vectors.late, undefined, 'the refusal changed nothing');
  // ... the way it names: the collection's on_disk false, add, then both back in one PATCH
  await ok(t, server, 'PATCH', '/collections/mixed', { hnsw_config: { on_disk: false } });
  await ok(t, server, 'PUT', '/collections/mixed/vectors/late', late);
  await ok(t, server, 'PATCH', '/collections/mixed', { hnsw_config: { on_disk: true }, vectors: { late: { hnsw_config: { on_disk: false } } } });
  const after = await ok(t, server, 'GET', '/collections/mixed');
  t.is(after.config.hnsw_config.on_disk, true);
  t.is(after.config.params.vectors.late.hnsw_config.on_disk, false);
});
