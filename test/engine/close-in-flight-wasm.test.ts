/**
 * close() while calls of the same WASM object are in flight: the same contract as the
 * native backend's (close-in-flight.test.ts). The WASM backend runs every call on one
 * worker thread in the order issued, so the calls issued before close() run before the
 * object is freed and answer. Calls issued after it reject as closed: an index's at
 * once (its closed flag), a WAL's in the worker, which takes them after the close.
 */

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import test from 'ava';

import { loadEngine } from '../../bindings/index';
import { labelsFrom, randomVectors, row, silentLogger } from './helpers';

const engine = loadEngine({ backend: 'wasm', logger: silentLogger });

test('a WASM dense index closes while searches are in flight', async (t) => {
  const dim = 32;
  const ix = engine.createIndex({ dim, distance: 'Cosine', m: 16, efConstruct: 64, seed: 3 });
  const data = randomVectors(2000, dim, 4);
  await ix.add(labelsFrom(0, 2000), data);
  const pending = Array.from({ length: 20 }, (_, i) => ix.search(row(data, dim, i), { k: 1, exact: true }));
  t.notThrows(() => ix.close());
  // Issued right after close(), while the calls before it are still in the worker.
  const late = ix.search(row(data, dim, 0), { k: 1 });
  const got = await Promise.all(pending);
  got.forEach((r, i) => t.is(r.labels[0], BigInt(i)));
  await t.throwsAsync(late, { code: 'QUIVER_CLOSED' });
  await t.throwsAsync(ix.search(row(data, dim, 0), { k: 1 }), { code: 'QUIVER_CLOSED' });
});

test('a WASM sparse index closes while searches are in flight', async (t) => {
  const ix = engine.createSparseIndex({ fullScanThreshold: 0 });
  const n = 500;
  const offsets = Uint32Array.from({ length: n + 1 }, (_, i) => i * 3);
  const indices = Uint32Array.from({ length: n * 3 }, (_, i) => (i * 7919) % 500);
  const values = Float32Array.from({ length: n * 3 }, (_, i) => 1 + (i % 5));
  await ix.upsert({ labels: labelsFrom(0, n), offsets, indices, values });
  const pending = Array.from({ length: 20 }, () => ix.search(Uint32Array.of(1, 2, 3), Float32Array.of(1, 1, 1), { k: 5 }));
  t.notThrows(() => ix.close());
  const late = ix.search(Uint32Array.of(1), Float32Array.of(1), { k: 5 });
  for (const r of await Promise.all(pending)) t.true(r.labels.length > 0);
  await t.throwsAsync(late, { code: 'QUIVER_CLOSED' });
  await t.throwsAsync(ix.search(Uint32Array.of(1), Float32Array.of(1), { k: 5 }), { code: 'QUIVER_CLOSED' });
});

test('a WASM WAL closes while appends are in flight', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-wasm-wal-close-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const wal = await engine.openWal(dir);
  const pending = Array.from({ length: 20 }, (_, i) => wal.append([Buffer.from(`record ${i}`)], true));
  const closing = wal.close();
  // Issued after close(): refused (by the worker, which takes it after the close).
  await t.throwsAsync(wal.append([Buffer.from('late')], true), { code: 'QUIVER_CLOSED' });
  await t.notThrowsAsync(closing);
  const seqs = (await Promise.all(pending)).flat();
  t.is(new Set(seqs.map(String)).size, 20);
  const again = await engine.openWal(dir);
  t.is((await again.readFrom(seqs[0])).length, 20);
  await again.close();
});
