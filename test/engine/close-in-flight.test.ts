/**
 * close() while calls of the same engine object are still in flight, on both backends.
 * What must hold: close() returns, the calls already issued answer, and calls issued
 * after it reject as closed, also right after it while the earlier ones still run.
 *
 * Native: napi-rs refuses a `&mut self` call while another call's borrow of the object
 * is active, so a close taking `&mut self` threw ("cannot be borrowed mutably") instead
 * of closing, and a caller that closed from a timer (vector-store.ts `retire`) would
 * have thrown from it. The addon now holds the object's data for the calls in flight,
 * and the WAL's close waits for them (NativeWalLog).
 * WASM: every call runs on one worker thread in the order issued, so the calls issued
 * before close() run before the object is freed. An index refuses later calls at once
 * (its closed flag); a WAL's are refused by the worker, which takes them after the close.
 */

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import test from 'ava';

import { loadEngine } from '../../bindings/index';
import type { Backend } from '../../bindings/engine';
import { labelsFrom, randomVectors, row, silentLogger } from './helpers';

for (const backend of ['native', 'wasm'] as Backend[]) {
  const engine = loadEngine({ backend, logger: silentLogger });

  test(`${backend}: a dense index closes while exact searches are in flight`, async (t) => {
    const dim = 32;
    const ix = engine.createIndex({ dim, distance: 'Cosine', m: 16, efConstruct: 64, seed: 3 });
    const data = randomVectors(3000, dim, 4);
    await ix.add(labelsFrom(0, 3000), data);
    // Exact searches always take the pool (native).
    const pending = Array.from({ length: 20 }, (_, i) => ix.search(row(data, dim, i), { k: 1, exact: true }));
    t.notThrows(() => ix.close());
    const late = ix.search(row(data, dim, 0), { k: 1 });
    const got = await Promise.all(pending);
    got.forEach((r, i) => t.is(r.labels[0], BigInt(i)));
    await t.throwsAsync(late, { code: 'QUIVER_CLOSED' });
    await t.throwsAsync(ix.search(row(data, dim, 0), { k: 1 }), { code: 'QUIVER_CLOSED' });
  });

  test(`${backend}: a multivector index closes while searches are in flight`, async (t) => {
    const dim = 16;
    const ix = engine.createIndex({ dim, distance: 'Dot', multivector: true, flat: true });
    const n = 500;
    const counts = Uint32Array.from({ length: n }, (_, i) => 1 + (i % 3));
    const total = counts.reduce((a, b) => a + b, 0);
    await ix.add(labelsFrom(0, n), randomVectors(total, dim, 5), undefined, counts);
    const q = randomVectors(2, dim, 6);
    const pending = Array.from({ length: 20 }, () => ix.search(q, { k: 5 }));
    t.notThrows(() => ix.close());
    const late = ix.search(q, { k: 5 });
    for (const r of await Promise.all(pending)) t.is(r.labels.length, 5);
    await t.throwsAsync(late, { code: 'QUIVER_CLOSED' });
    await t.throwsAsync(ix.search(q, { k: 5 }), { code: 'QUIVER_CLOSED' });
  });

  test(`${backend}: a sparse index closes while searches are in flight`, async (t) => {
    const ix = engine.createSparseIndex({ fullScanThreshold: 0 });
    const n = 2000;
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

  test(`${backend}: a WAL closes while appends are in flight`, async (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), `quiver-wal-close-${backend}-`));
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const wal = await engine.openWal(dir);
    const pending = Array.from({ length: 20 }, (_, i) => wal.append([Buffer.from(`record ${i}`)], true));
    const closing = wal.close();
    // Issued after close(): refused, even before the log has closed.
    await t.throwsAsync(wal.append([Buffer.from('late')], true), { code: 'QUIVER_CLOSED' });
    await t.notThrowsAsync(closing);
    // Issued before it: every one answers (close waits for them).
    const seqs = (await Promise.all(pending)).flat();
    t.is(new Set(seqs.map(String)).size, 20);
    const again = await engine.openWal(dir);
    t.is((await again.readFrom(seqs[0])).length, 20);
    await again.close();
  });
}
