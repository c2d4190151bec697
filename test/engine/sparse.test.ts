/**
 * The sparse index through both engine backends (native addon and WASM worker): exact
 * top-k against a brute-force scorer written here, with updates, deletes, allow-lists
 * and IDF; input checks; save/load and checksum on the durable backend.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import type { Backend, SparseBatch, SparseIndex } from '../../bindings/engine';
import { loadEngine } from '../../bindings/index';
import { rng, silentLogger } from './helpers';

type Doc = Map<number, number>;

function randomDoc(r: () => number, nnz: number, dims: number): Doc {
  const d: Doc = new Map();
  while (d.size < nnz) d.set(Math.floor(r() * r() * dims), Math.fround(Math.round(r() * 8 - 2) / 2));
  return d;
}

function batchOf(docs: Array<[bigint, Doc]>): SparseBatch {
  const offsets = [0];
  const indices: number[] = [];
  const values: number[] = [];
  for (const [, d] of docs) {
    // Unsorted on purpose: the engine sorts.
    for (const [i, v] of [...d].reverse()) {
      indices.push(i);
      values.push(v);
    }
    offsets.push(indices.length);
  }
  return {
    labels: BigUint64Array.from(docs.map(([l]) => l)),
    offsets: Uint32Array.from(offsets),
    indices: Uint32Array.from(indices),
    values: Float32Array.from(values),
  };
}

/** Documents sharing a dimension with q, by dot product (f64 sum, f32 result), ties by label. */
function brute(store: Map<bigint, Doc>, q: Doc, k: number, allow?: Set<bigint>, weight?: (dim: number) => number): Array<[bigint, number]> {
  const out: Array<[bigint, number]> = [];
  for (const [l, d] of store) {
    if (allow && !allow.has(l)) continue;
    let hit = false;
    let s = 0;
    for (const [i, w] of q) {
      const v = d.get(i);
      if (v === undefined) continue;
      hit = true;
      s += v * (weight ? Math.fround(w * weight(i)) : w);
    }
    if (hit) out.push([l, Math.fround(s)]);
  }
  out.sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  return out.slice(0, k);
}

async function search(ix: SparseIndex, q: Doc, k: number, allow?: Set<bigint>, idf = false, exact = false): Promise<Array<[bigint, number]>> {
  const r = await ix.search(Uint32Array.from(q.keys()), Float32Array.from(q.values()), {
    k,
    allow: allow ? BigUint64Array.from(allow) : undefined,
    idf,
    exact,
  });
  return Array.from(r.labels).map((l, i) => [l, r.scores[i]]);
}

/** `x` as float16 stores it: nearest half-precision value, ties to even, held at ±65504. */
function toF16(x: number): number {
  const a = Math.abs(x);
  if (a === 0) return 0;
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  if (2 ** (e + 1) <= a) e++;
  const step = e < -14 ? 2 ** -24 : 2 ** (e - 10);
  const q = a / step;
  const fl = Math.floor(q);
  const frac = q - fl;
  const r = Math.min((frac > 0.5 || (frac === 0.5 && fl % 2 === 1) ? fl + 1 : fl) * step, 65504);
  return x < 0 ? -r : r;
}

/** `x` as uint8 stores it: truncated toward zero, saturated to 0..=255. */
function toU8(x: number): number {
  return x <= 0 ? 0 : x >= 255 ? 255 : Math.trunc(x);
}

const CONVERT = { float32: (x: number) => x, float16: toF16, uint8: toU8 } as const;

const BACKENDS: Backend[] = ['native', 'wasm'];

for (const backend of BACKENDS) {
  const engine = () => loadEngine({ backend, logger: silentLogger });

  test(`${backend}: sparse top-k equals brute force through upserts, replacements, deletes and filters`, async (t) => {
    const ix = engine().createSparseIndex({ fullScanThreshold: 40 });
    t.teardown(() => ix.close());
    const r = rng(11);
    const store = new Map<bigint, Doc>();
    for (let round = 0; round < 4; round++) {
      const docs: Array<[bigint, Doc]> = [];
      for (let i = 0; i < 300; i++) {
        const l = BigInt(Math.floor(r() * 900));
        const d = randomDoc(r, 1 + Math.floor(r() * 10), 150);
        docs.push([l, d]);
      }
      await ix.upsert(batchOf(docs));
      for (const [l, d] of docs) store.set(l, d);
      const gone = Array.from({ length: 60 }, () => BigInt(Math.floor(r() * 900)));
      const existed = new Set(gone.filter((l) => store.has(l))).size;
      t.is(await ix.delete(BigUint64Array.from(new Set(gone))), existed);
      for (const l of gone) store.delete(l);
      t.is((await ix.stats()).count, store.size);
      for (let qn = 0; qn < 25; qn++) {
        const q = randomDoc(r, 1 + Math.floor(r() * 8), 150);
        const k = 1 + Math.floor(r() * 15);
        t.deepEqual(await search(ix, q, k), brute(store, q, k));
        t.deepEqual(await search(ix, q, k, undefined, false, true), brute(store, q, k));
        const small = new Set(Array.from({ length: 20 }, () => BigInt(Math.floor(r() * 900))));
        t.deepEqual(await search(ix, q, k, small), brute(store, q, k, small));
        const large = new Set([...store.keys()].filter(() => r() < 0.5));
        t.deepEqual(await search(ix, q, k, large), brute(store, q, k, large));
      }
    }
    const some = [...store.keys()].slice(0, 5).concat([100000n]);
    const got = await ix.get(BigUint64Array.from(some));
    t.deepEqual(Array.from(got.labels), some.slice(0, 5));
    for (let i = 0; i < 5; i++) {
      const d = store.get(some[i])!;
      const idx = Array.from(got.indices.subarray(got.offsets[i], got.offsets[i + 1]));
      t.deepEqual(idx, [...d.keys()].sort((a, b) => a - b));
      t.deepEqual(Array.from(got.values.subarray(got.offsets[i], got.offsets[i + 1])), idx.map((x) => d.get(x)!));
    }
    t.deepEqual(Array.from(await ix.labels()), [...store.keys()].sort((a, b) => (a < b ? -1 : 1)));
  });

  for (const datatype of ['float16', 'uint8'] as const) {
    test(`${backend}: a ${datatype} sparse index stores converted values and scores them as brute force over them`, async (t) => {
      const ix = engine().createSparseIndex({ fullScanThreshold: 30, datatype });
      t.teardown(() => ix.close());
      const conv = CONVERT[datatype];
      const r = rng(23);
      const store = new Map<bigint, Doc>();
      for (let round = 0; round < 3; round++) {
        const docs: Array<[bigint, Doc]> = [];
        for (let i = 0; i < 250; i++) {
          const d: Doc = new Map();
          const nnz = 1 + Math.floor(r() * 10);
          // Fractions, negatives, values past 255 and past the float16 range.
          while (d.size < nnz) d.set(Math.floor(r() * r() * 120), Math.fround((r() - 0.2) * (r() < 0.05 ? 200000 : 400)));
          docs.push([BigInt(Math.floor(r() * 700)), d]);
        }
        await ix.upsert(batchOf(docs));
        for (const [l, d] of docs) store.set(l, new Map([...d].map(([i, v]) => [i, conv(v)])));
        for (const l of Array.from({ length: 40 }, () => BigInt(Math.floor(r() * 700)))) {
          await ix.delete(BigUint64Array.of(l));
          store.delete(l);
        }
        for (let qn = 0; qn < 20; qn++) {
          const q: Doc = new Map();
          const nq = 1 + Math.floor(r() * 6);
          while (q.size < nq) q.set(Math.floor(r() * r() * 120), Math.fround(r() * 4 - 1));
          const k = 1 + Math.floor(r() * 12);
          t.deepEqual(await search(ix, q, k), brute(store, q, k));
          t.deepEqual(await search(ix, q, k, undefined, false, true), brute(store, q, k));
          const allow = new Set([...store.keys()].filter(() => r() < 0.4));
          t.deepEqual(await search(ix, q, k, allow), brute(store, q, k, allow));
        }
      }
      const labels = [...store.keys()].sort((a, b) => (a < b ? -1 : 1));
      const got = await ix.get(BigUint64Array.from(labels));
      labels.forEach((l, i) => {
        const d = store.get(l)!;
        const idx = Array.from(got.indices.subarray(got.offsets[i], got.offsets[i + 1]));
        t.deepEqual(Array.from(got.values.subarray(got.offsets[i], got.offsets[i + 1])), idx.map((x) => d.get(x)!));
      });
      const stats = await ix.stats();
      t.is(stats.datatype, datatype);
      // The same documents at float32 take more memory: each entry is held twice (posting
      // list and forward copy), 4 bytes a value against 2 or 1 (less some capacity slack).
      const wide = engine().createSparseIndex({ fullScanThreshold: 30 });
      t.teardown(() => wide.close());
      await wide.upsert(got);
      const wideStats = await wide.stats();
      t.is(wideStats.datatype, 'float32');
      t.is(wideStats.entries, stats.entries);
      t.true(wideStats.totalBytes - stats.totalBytes >= stats.entries * (datatype === 'uint8' ? 4 : 2), `${wideStats.totalBytes} vs ${stats.totalBytes}`);
    });
  }

  test(`${backend}: an unknown sparse datatype is QUIVER_INVALID_ARGUMENT`, (t) => {
    const err = t.throws(() => engine().createSparseIndex({ datatype: 'int4' as never }));
    t.is((err as { code?: string }).code, 'QUIVER_INVALID_ARGUMENT');
  });

  test(`${backend}: IDF weighs query values by ln((N - n + 0.5) / (n + 0.5) + 1)`, async (t) => {
    const ix = engine().createSparseIndex();
    t.teardown(() => ix.close());
    const store = new Map<bigint, Doc>([
      [1n, new Map([[1, 1], [2, 1]])],
      [2n, new Map([[1, 1]])],
      [3n, new Map([[1, 2]])],
      [4n, new Map([[3, 1]])],
    ]);
    await ix.upsert(batchOf([...store]));
    const idf = (n: number, df: number) => Math.log((n - df + 0.5) / (df + 0.5) + 1);
    const q: Doc = new Map([[1, 1], [2, 1]]);
    const got = await search(ix, q, 10, undefined, true);
    // By hand: N = 4; dimension 1 is in 3 documents, dimension 2 in 1.
    const want: Array<[bigint, number]> = [
      [1n, idf(4, 3) + idf(4, 1)],
      [3n, 2 * idf(4, 3)],
      [2n, idf(4, 3)],
    ];
    t.is(got.length, 3);
    got.forEach(([l, s], i) => {
      t.is(l, want[i][0]);
      t.true(Math.abs(s - want[i][1]) < 1e-5, `${s} vs ${want[i][1]}`);
    });
  });

  test(`${backend}: bad sparse input is QUIVER_INVALID_ARGUMENT and changes nothing`, async (t) => {
    const ix = engine().createSparseIndex();
    t.teardown(() => ix.close());
    await ix.upsert(batchOf([[1n, new Map([[1, 1]])]]));
    const bad: SparseBatch[] = [
      { labels: BigUint64Array.of(2n, 3n), offsets: Uint32Array.of(0, 1, 3), indices: Uint32Array.of(1, 4, 4), values: Float32Array.of(1, 1, 1) },
      { labels: BigUint64Array.of(2n), offsets: Uint32Array.of(0, 1), indices: Uint32Array.of(1), values: Float32Array.of(NaN) },
      { labels: BigUint64Array.of(2n), offsets: Uint32Array.of(0, 2), indices: Uint32Array.of(1, 2), values: Float32Array.of(1) },
    ];
    for (const b of bad) {
      const err = await t.throwsAsync(ix.upsert(b));
      t.is((err as { code?: string }).code, 'QUIVER_INVALID_ARGUMENT', String(err));
    }
    t.is((await ix.stats()).count, 1);
    const err = await t.throwsAsync(ix.search(Uint32Array.of(1, 1), Float32Array.of(1, 1), { k: 1 }));
    t.is((err as { code?: string }).code, 'QUIVER_INVALID_ARGUMENT');
  });
}

test('native: a saved sparse index loads back identical, and a flipped byte is QUIVER_CORRUPT', async (t) => {
  const e = loadEngine({ backend: 'native', logger: silentLogger });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-sparse-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const r = rng(5);
  const ix = e.createSparseIndex({ fullScanThreshold: 123 });
  const docs: Array<[bigint, Doc]> = Array.from({ length: 200 }, (_, i) => [BigInt(i * 7), randomDoc(r, 6, 80)]);
  await ix.upsert(batchOf(docs));
  const file = path.join(dir, 's.qsi');
  await ix.save(file);
  const back = await e.loadSparseIndex(file);
  t.deepEqual(await back.stats(), await ix.stats());
  const q = randomDoc(r, 5, 80);
  t.deepEqual(await search(back, q, 20), await search(ix, q, 20));
  const bytes = fs.readFileSync(file);
  bytes[Math.floor(bytes.length / 2)] ^= 0x10;
  fs.writeFileSync(file, bytes);
  const err = await t.throwsAsync(e.loadSparseIndex(file));
  t.is((err as { code?: string }).code, 'QUIVER_CORRUPT');
  ix.close();
  back.close();
});

test('native: a saved uint8 sparse index loads back as uint8 with the same values', async (t) => {
  const e = loadEngine({ backend: 'native', logger: silentLogger });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-sparse-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const ix = e.createSparseIndex({ datatype: 'uint8' });
  t.teardown(() => ix.close());
  await ix.upsert(batchOf([[1n, new Map([[1, 3.9], [2, -3], [3, 300]])], [2n, new Map([[1, 7.5]])]]));
  const file = path.join(dir, 's.qsi');
  await ix.save(file);
  const back = await e.loadSparseIndex(file);
  t.teardown(() => back.close());
  t.is((await back.stats()).datatype, 'uint8');
  const got = await back.get(BigUint64Array.of(1n, 2n));
  t.deepEqual(Array.from(got.indices), [1, 2, 3, 1]);
  t.deepEqual(Array.from(got.values), [3, 0, 255, 7]);
  t.deepEqual(await search(back, new Map([[1, 1], [3, 0.5]]), 5), [[1n, 130.5], [2n, 7]]);
});
