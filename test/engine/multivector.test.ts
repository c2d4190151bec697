/**
 * The multivector index through the Engine interface, on both backends: lists added
 * with `counts`, MaxSim scores against a brute force here (with and without a graph),
 * upserts and deletes, exportLive, save and loadIndex (the file's magic picks the
 * loader, and a file saved by one backend loads in the other), and the clear
 * refusals: a missing `counts`, a flat query batch.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import type { VectorIndex } from '../../bindings/engine';
import { loadEngine } from '../../bindings/index';
import { labelsFrom, randomVectors, silentLogger } from './helpers';

const DIM = 6;

function maxSim(q: number[][], doc: number[][]): number {
  return q.reduce((s, qv) => s + Math.max(...doc.map((dv) => dv.reduce((a, x, i) => a + x * qv[i], 0))), 0);
}

function rows(flat: Float32Array, from: number, n: number): number[][] {
  return Array.from({ length: n }, (_, r) => Array.from(flat.subarray((from + r) * DIM, (from + r + 1) * DIM)));
}

for (const backend of ['native', 'wasm'] as const) test(`${backend}: MaxSim over lists matches a brute force, with and without a graph; upsert, delete, export, save and load`, async (t) => {
  const engine = loadEngine({ backend, logger: silentLogger });
  const other = loadEngine({ backend: backend === 'native' ? 'wasm' : 'native', logger: silentLogger });
  const n = 300;
  const counts = Uint32Array.from({ length: n }, (_, i) => 1 + (i % 4));
  const total = counts.reduce((a, b) => a + b, 0);
  const flat = randomVectors(total, DIM, 3);
  const docs: number[][][] = [];
  let at = 0;
  for (const c of counts) {
    docs.push(rows(flat, at, c));
    at += c;
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-mv-engine-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  for (const graph of [false, true]) {
    const ix: VectorIndex = engine.createIndex({ dim: DIM, distance: 'Dot', multivector: true, flat: !graph, m: 8, efConstruct: 64 });
    t.teardown(() => ix.close());
    await ix.add(labelsFrom(0, n), flat, undefined, counts);
    t.is(ix.stats().count, n);
    t.is(ix.stats().multivector?.vectors, total);
    const queries = randomVectors(8, DIM, 4);
    let found = 0;
    for (let qi = 0; qi < 4; qi++) {
      const q = rows(queries, qi * 2, 2);
      const want = docs.map((d, i) => ({ label: BigInt(i), s: maxSim(q, d) })).sort((a, b) => b.s - a.s).slice(0, 5);
      const qFlat = queries.subarray(qi * 2 * DIM, (qi * 2 + 2) * DIM);
      const exact = await ix.search(qFlat, { k: 5, exact: true });
      t.deepEqual(Array.from(exact.labels), want.map((w) => w.label));
      Array.from(exact.scores).forEach((s, i) => t.true(Math.abs(s - want[i].s) < 1e-4));
      const r = await ix.search(qFlat, { k: 5, ef: 64 });
      found += Array.from(r.labels).filter((l) => want.some((w) => w.label === l)).length;
    }
    t.true(found >= 18, `recall ${found}/20`);
    // Upsert label 0 with a new list, delete label 1.
    await ix.add(new BigUint64Array([0n]), new Float32Array(DIM * 2).fill(0.5), undefined, new Uint32Array([2]));
    t.is(await ix.delete(new BigUint64Array([1n, 9999n])), 1);
    t.deepEqual(Array.from((await ix.getVector(0n))!), new Array(DIM * 2).fill(0.5));
    t.is(await ix.getVector(1n), null);
    const live = await ix.exportLive();
    t.is(live.labels.length, n - 1);
    t.is(live.counts!.reduce((a, b) => a + b, 0) * DIM, live.vectors.length);
    // The file's magic makes loadIndex return a multivector index with the same answers.
    const file = path.join(dir, `m-${graph}.qvi`);
    await ix.save(file);
    const loaded = await engine.loadIndex(file);
    t.teardown(() => loaded.close());
    const q = queries.subarray(0, 2 * DIM);
    const [a, b] = [await loaded.search(q, { k: 5 }), await ix.search(q, { k: 5 })];
    t.deepEqual([Array.from(a.labels), Array.from(a.scores)], [Array.from(b.labels), Array.from(b.scores)]);
    t.is(loaded.stats().multivector?.vectors, ix.stats().multivector?.vectors);
    // The other backend loads the same file to the same answers, and saves the same bytes.
    const theirs = await other.loadIndex(file);
    t.teardown(() => theirs.close());
    const c = await theirs.search(q, { k: 5 });
    t.deepEqual([Array.from(c.labels), Array.from(c.scores)], [Array.from(b.labels), Array.from(b.scores)]);
    await theirs.save(`${file}.again`);
    t.true(fs.readFileSync(`${file}.again`).equals(fs.readFileSync(file)));
    // Refusals.
    const noCounts = await t.throwsAsync(ix.add(new BigUint64Array([5n]), new Float32Array(DIM)));
    t.is((noCounts as { code?: string }).code, 'QUIVER_INVALID_ARGUMENT');
    const batch = await t.throwsAsync(ix.searchBatch(queries, { k: 3 }));
    t.is((batch as { code?: string }).code, 'QUIVER_UNSUPPORTED');
    const badDim = await t.throwsAsync(ix.search(new Float32Array(DIM + 1), { k: 3 }));
    t.is((badDim as { code?: string }).code, 'QUIVER_DIMENSION_MISMATCH');
  }
  const plain = engine.createIndex({ dim: DIM, distance: 'Dot' });
  t.teardown(() => plain.close());
  const err = await t.throwsAsync(plain.add(new BigUint64Array([1n]), new Float32Array(DIM), undefined, new Uint32Array([1])));
  t.is((err as { code?: string }).code, 'QUIVER_INVALID_ARGUMENT');
  t.throws(() => engine.createIndex({ dim: DIM, distance: 'Euclid', multivector: true }), { message: /Cosine or Dot/ });
});
