/**
 * Vector datatypes in the engine, on both backends: float16 and uint8 indexes store
 * vectors in that type (memory per vector shrinks to a half and a quarter), read them
 * back as the reference converts them (uint8: truncate toward zero, saturate to 0..255;
 * float16: round to nearest), and score queries converted the same way. Scores are
 * checked against a brute force in this file; the native index survives save/load.
 */

import test, { ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import type { Backend, Datatype, Distance, IndexOptions, VectorIndex } from '../../bindings/engine';
import { loadEngine } from '../../bindings/index';
import { labelsFrom, randomVectors, silentLogger } from './helpers';

const BACKENDS: Backend[] = ['native', 'wasm'];

/** The reference's float-to-uint8 rule, written independently of the engine. */
function toU8(x: number): number {
  if (!(x > 0)) return 0;
  if (x >= 255) return 255;
  return Math.trunc(x);
}

/** Nearest float16 value (ties to even) through a DataView-free computation. */
function toF16(x: number): number {
  if (x === 0) return x;
  const a = Math.abs(x);
  const e = Math.max(Math.floor(Math.log2(a)), -14);
  const step = 2 ** (e - 10);
  let q = a / step;
  const f = Math.floor(q);
  const r = q - f;
  q = r > 0.5 || (r === 0.5 && f % 2 === 1) ? f + 1 : f;
  return Math.sign(x) * q * step;
}

function convert(dt: Datatype, distance: Distance, v: number[]): number[] {
  if (dt === 'uint8') return v.map(toU8);
  let w = v;
  if (distance === 'Cosine') {
    const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
    if (n > 0) w = v.map((x) => x / n);
  }
  return dt === 'float16' ? w.map((x) => toF16(Math.fround(x))) : w;
}

function score(distance: Distance, a: number[], b: number[]): number {
  let dot = 0;
  let na = 0;
  let nb = 0;
  let l2 = 0;
  let l1 = 0;
  for (let i = 0; i < a.length; i++) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
    l2 += (a[i] - b[i]) ** 2;
    l1 += Math.abs(a[i] - b[i]);
  }
  switch (distance) {
    case 'Dot':
      return dot;
    case 'Cosine':
      return na === 0 || nb === 0 ? 0 : dot / Math.sqrt(na * nb);
    case 'Euclid':
      return Math.sqrt(l2);
    case 'Manhattan':
      return l1;
  }
}

function rows(flat: Float32Array, dim: number): number[][] {
  const out: number[][] = [];
  for (let i = 0; i < flat.length; i += dim) out.push(Array.from(flat.subarray(i, i + dim)));
  return out;
}

for (const backend of BACKENDS) {
  const engine = () => loadEngine({ backend, logger: silentLogger });
  const index = (t: ExecutionContext, o: IndexOptions): VectorIndex => {
    const ix = engine().createIndex(o);
    t.teardown(() => ix.close());
    return ix;
  };

  test(`${backend}: uint8 vectors truncate and saturate, as stored and as queries`, async (t) => {
    for (const distance of ['Dot', 'Cosine', 'Euclid'] as Distance[]) {
      const ix = index(t, { dim: 4, distance, datatype: 'uint8', flat: true });
      await ix.add(new BigUint64Array([1n, 2n]), new Float32Array([-3, 3.9, 300, 254.999, 1, 2, 3, 4]));
      t.deepEqual(Array.from((await ix.getVector(1n))!), [0, 3, 255, 254], distance);
      t.deepEqual(Array.from((await ix.getVector(2n))!), [1, 2, 3, 4], distance);
      t.is(ix.stats().datatype, 'uint8');
      // The query [1.7, -1, 0.5, 2] is scored as [1, 0, 0, 2].
      const r = await ix.search(new Float32Array([1.7, -1, 0.5, 2]), { k: 2, exact: true });
      const q = [1, 0, 0, 2];
      const want = [
        [1n, score(distance, q, [0, 3, 255, 254])],
        [2n, score(distance, q, [1, 2, 3, 4])],
      ].sort((a, b) => (distance === 'Euclid' ? (a[1] as number) - (b[1] as number) : (b[1] as number) - (a[1] as number)));
      t.deepEqual(Array.from(r.labels), want.map((w) => w[0]), distance);
      Array.from(r.scores).forEach((s, i) => t.true(Math.abs(s - (want[i][1] as number)) < 1e-3, `${distance}: ${s} vs ${want[i][1]}`));
    }
  });

  test(`${backend}: float16 stores rounded values; out-of-range values are refused and change nothing`, async (t) => {
    const ix = index(t, { dim: 3, distance: 'Dot', datatype: 'float16', flat: true });
    await ix.add(new BigUint64Array([1n]), new Float32Array([0.1, -2.5, 1000.3]));
    t.deepEqual(Array.from((await ix.getVector(1n))!), [0.1, -2.5, 1000.3].map((x) => toF16(Math.fround(x))));
    const err = await t.throwsAsync(ix.add(new BigUint64Array([2n]), new Float32Array([1, 70000, 0])));
    t.is((err as { code?: string }).code, 'QUIVER_INVALID_ARGUMENT');
    t.is(ix.stats().count, 1);
  });

  for (const datatype of ['float16', 'uint8'] as Datatype[]) {
    test(`${backend}: ${datatype} graph and exact search score like a brute force over converted vectors`, async (t) => {
      const dim = 32;
      const n = 1500;
      const scale = datatype === 'uint8' ? 300 : 1;
      const data = randomVectors(n, dim, 21).map((x) => x * scale);
      const queries = randomVectors(10, dim, 22).map((x) => (datatype === 'uint8' ? Math.abs(x) * scale : x));
      for (const distance of ['Cosine', 'Dot', 'Euclid', 'Manhattan'] as Distance[]) {
        const ix = index(t, { dim, distance, datatype, m: 12, efConstruct: 100, seed: 3 });
        await ix.add(labelsFrom(0, n), data);
        const stored = rows(data, dim).map((v) => convert(datatype, distance, v));
        let found = 0;
        for (const q of rows(queries, dim)) {
          const cq = convert(datatype, distance, q);
          const truth = stored
            .map((v, i) => ({ label: BigInt(i), s: score(distance, cq, v) }))
            .sort((a, b) => (distance === 'Cosine' || distance === 'Dot' ? b.s - a.s : a.s - b.s))
            .slice(0, 10);
          const exact = await ix.search(new Float32Array(q), { k: 10, exact: true });
          Array.from(exact.scores).forEach((s, i) => t.true(Math.abs(s - truth[i].s) <= 1e-3 * Math.max(1, Math.abs(truth[i].s)), `${distance} ${s} vs ${truth[i].s}`));
          const graph = await ix.search(new Float32Array(q), { k: 10, ef: 200 });
          found += Array.from(graph.labels).filter((l) => truth.some((x) => x.label === l)).length;
        }
        t.true(found / 100 >= 0.9, `${distance} recall ${found / 100}`);
      }
    });
  }

  test(`${backend}: memory per vector: float16 is half and uint8 a quarter of float32 (128-d)`, async (t) => {
    const dim = 128;
    const n = 2000;
    const data = randomVectors(n, dim, 5).map((x) => Math.abs(x) * 100);
    const bytes: Record<string, { vector: number; total: number }> = {};
    for (const datatype of ['float32', 'float16', 'uint8'] as Datatype[]) {
      const ix = index(t, { dim, distance: 'Dot', datatype, flat: true });
      await ix.add(labelsFrom(0, n), data);
      const s = ix.stats();
      bytes[datatype] = { vector: s.vectorBytes / n, total: s.totalBytes / n };
    }
    t.is(bytes.float32.vector, dim * 4);
    t.is(bytes.float16.vector, dim * 2);
    t.is(bytes.uint8.vector, dim);
    // The bound (uint8 at most 0.3x float32 per point) on the vector storage.
    t.true(bytes.uint8.vector <= 0.3 * bytes.float32.vector, JSON.stringify(bytes));
    // Everything the flat index holds per point (vector, label map, slot header, ~46
    // bytes that do not depend on the datatype): 174 against 558 bytes, 0.31x.
    t.true(bytes.uint8.total <= 0.32 * bytes.float32.total, JSON.stringify(bytes));
  });

  if (backend === 'native') {
    test(`${backend}: typed indexes keep their datatype and vectors through save and loadIndex`, async (t) => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-dt-'));
      t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
      for (const datatype of ['float16', 'uint8'] as Datatype[]) {
        const ix = index(t, { dim: 8, distance: 'Cosine', datatype, m: 8 });
        await ix.add(labelsFrom(0, 300), randomVectors(300, 8, 4).map((x) => Math.abs(x) * 50));
        const file = path.join(dir, `${datatype}.qvi`);
        await ix.save(file);
        const loaded = await engine().loadIndex(file);
        t.teardown(() => loaded.close());
        t.deepEqual(loaded.stats(), ix.stats());
        t.deepEqual(await loaded.getVector(7n), await ix.getVector(7n));
        const q = randomVectors(1, 8, 9);
        const a = await loaded.search(q, { k: 5 });
        const b = await ix.search(q, { k: 5 });
        t.deepEqual([Array.from(a.labels), Array.from(a.scores)], [Array.from(b.labels), Array.from(b.scores)]);
      }
    });
  }
}
