/**
 * `on_disk: true` dense vectors through a real bin/quiver: a quantized (int8)
 * collection whose HNSW index keeps its f32 originals in a memory-mapped side file,
 * next to an in-memory twin with the same data and settings. `GET /collections/{c}`
 * shows on_disk true; searches (default rescoring, explicit oversampling, no
 * rescoring, exact) answer exactly as the twin does; acknowledged writes survive
 * kill -9; a snapshot recovers with the side file, on this node and on a node running
 * the WASM engine (which reads the file into memory); PATCH flips on_disk both ways;
 * without quantization on_disk is refused with a 400 that names the fix.
 */

import test, { type ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { startServer, type Server } from '../crash/server';
import { spec } from '../support/contract';
import { mulberry32 } from '../support/rng';
import { call, cleanUp, filesUnder, green, ok, recoverCopy, sameIdsCloseScores } from './helpers';

type Json = Record<string, any>;

const DIM = 16;
const rnd = mulberry32(2026);
const vec = () => Array.from({ length: DIM }, () => Math.round((rnd() * 2 - 1) * 1000) / 1000);
const points = Array.from({ length: 900 }, (_, i) => ({ id: i + 1, vector: vec(), payload: { i } }));
const queries = Array.from({ length: 10 }, () => vec());

const config = (onDisk: boolean) => ({
  vectors: { size: DIM, distance: 'Cosine', on_disk: onDisk },
  quantization_config: { scalar: { type: 'int8', always_ram: true } },
  // A graph from 4 KiB on; one build thread, so both twins build the same graph.
  hnsw_config: { m: 8, ef_construct: 64, max_indexing_threads: 1 },
  optimizers_config: { indexing_threshold: 4, flush_interval_sec: 1 },
});

/** Every search shape whose answer the twins must share. */
async function answers(t: ExecutionContext, server: Server, c: string): Promise<unknown[]> {
  const out: unknown[] = [];
  for (const q of queries) {
    for (const params of [{ hnsw_ef: 64 }, { hnsw_ef: 64, quantization: { oversampling: 3 } }, { hnsw_ef: 64, quantization: { rescore: false } }, { exact: true }]) {
      const r = await ok(t, server, 'POST', `/collections/${c}/points/query`, { query: q, limit: 10, params });
      out.push(r.points.map((p: Json) => [p.id, p.score]));
    }
  }
  return out;
}

const sideFiles = (root: string): string[] => filesUnder(root, /^orig-.*\.f32$/);

test('on_disk vectors: shown, same answers as in memory, kill -9, snapshot on both engines, PATCH both ways, refused without quantization', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-ondisk-vec-'));
  const wasmDir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-ondisk-vec-wasm-'));
  let server = await startServer(dir);
  let wasm: Server | null = null;
  cleanUp(t, [dir, wasmDir], () => [server, wasm]);

  // Refused without quantization, naming the fix; nothing is created.
  const refused = await call(server, 'PUT', '/collections/plain', { vectors: { size: DIM, distance: 'Cosine', on_disk: true } });
  t.is(refused.status, 400);
  t.regex(refused.body.status.error, /vectors\.on_disk: true needs quantization in Quiver.*set quantization_config/);
  t.is((await call(server, 'GET', '/collections/plain')).status, 404);

  for (const [c, onDisk] of [['vdisk', true], ['vmem', false]] as const) {
    await ok(t, server, 'PUT', `/collections/${c}`, config(onDisk));
    for (let at = 0; at < points.length; at += 100) await ok(t, server, 'PUT', `/collections/${c}/points?wait=true`, { points: points.slice(at, at + 100) });
    await green(server, c);
  }
  const info = await ok(t, server, 'GET', '/collections/vdisk');
  t.deepEqual(spec().validateSchema('CollectionInfo', info), []);
  t.is(info.config.params.vectors.on_disk, true);
  t.is((await ok(t, server, 'GET', '/collections/vmem')).config.params.vectors.on_disk, false);
  t.is(info.indexed_vectors_count, points.length);
  t.is(sideFiles(dir).length, 1, 'one side file: the on-disk collection');
  const want = await answers(t, server, 'vmem');
  t.deepEqual(await answers(t, server, 'vdisk'), want, 'the same answers as the in-memory twin');

  // kill -9 right after acknowledged writes: none is lost.
  const late = Array.from({ length: 60 }, (_, i) => ({ id: 5000 + i, vector: vec(), payload: { late: i } }));
  for (const c of ['vdisk', 'vmem']) {
    await ok(t, server, 'PUT', `/collections/${c}/points?wait=true`, { points: late });
    await ok(t, server, 'POST', `/collections/${c}/points/delete?wait=true`, { points: [1, 2, 3] });
  }
  const scroll = async (s: Server, c: string) => (await ok(t, s, 'POST', `/collections/${c}/points/scroll`, { limit: 10_000, with_vector: true, with_payload: true })).points;
  const acknowledged = await scroll(server, 'vdisk');
  t.is(acknowledged.length, points.length + late.length - 3);
  await server.stop('SIGKILL');
  server = await startServer(dir);
  t.deepEqual(await scroll(server, 'vdisk'), acknowledged, 'after kill -9');
  t.deepEqual(await scroll(server, 'vdisk'), await scroll(server, 'vmem'));
  await green(server, 'vdisk');
  await green(server, 'vmem');
  const afterKill = await answers(t, server, 'vmem');
  t.deepEqual(await answers(t, server, 'vdisk'), afterKill);

  // Snapshot round trip, on this node and on one running the WASM engine.
  const snap = await ok(t, server, 'POST', '/collections/vdisk/snapshots?wait=true');
  const file = path.join(dir, 'snapshots', 'vdisk', snap.name);
  await ok(t, server, 'PUT', '/collections/vrestored/snapshots/recover?wait=true', { location: `file://${file}`, priority: 'snapshot' });
  t.is((await ok(t, server, 'GET', '/collections/vrestored')).config.params.vectors.on_disk, true);
  t.deepEqual(await scroll(server, 'vrestored'), acknowledged);
  t.deepEqual(await answers(t, server, 'vrestored'), afterKill, 'the recovered collection answers as before');
  wasm = await startServer(wasmDir, { QUIVER_ENGINE: 'wasm' });
  await recoverCopy(t, wasm, wasmDir, 'vwasm', file);
  t.is((await ok(t, wasm, 'GET', '/collections/vwasm')).config.params.vectors.on_disk, true);
  t.deepEqual(await scroll(wasm, 'vwasm'), acknowledged);
  // The same points; scores to the last bits of the other engine's kernels.
  sameIdsCloseScores(t, await answers(t, wasm, 'vwasm'), afterKill, 'the WASM engine serves the snapshot with the originals read into memory');

  // PATCH: on_disk off moves the originals into memory, on again into a new side file.
  t.true(sideFiles(dir).some((f) => f.split(path.sep).includes('vdisk')), 'the side file is in the collection directory');
  await ok(t, server, 'PATCH', '/collections/vdisk', { vectors: { '': { on_disk: false } } });
  await green(server, 'vdisk');
  t.is((await ok(t, server, 'GET', '/collections/vdisk')).config.params.vectors.on_disk, false);
  t.deepEqual(await answers(t, server, 'vdisk'), afterKill);
  await ok(t, server, 'PATCH', '/collections/vdisk', { vectors: { '': { on_disk: true } } });
  await green(server, 'vdisk');
  t.deepEqual(await answers(t, server, 'vdisk'), afterKill);
  await server.stop('SIGTERM');
  server = await startServer(dir);
  t.is((await ok(t, server, 'GET', '/collections/vdisk')).config.params.vectors.on_disk, true);
  t.deepEqual(await answers(t, server, 'vdisk'), afterKill, 'after the flips and a restart');
  // Removing the quantization of an on-disk vector is refused: it would leave on_disk without it.
  const unq = await call(server, 'PATCH', '/collections/vdisk', { quantization_config: 'Disabled' });
  t.is(unq.status, 400, JSON.stringify(unq.body));
});
