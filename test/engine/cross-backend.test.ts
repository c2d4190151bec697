/**
 * Files written by one engine backend open with the other, byte for byte: index
 * files (dense, flat, quantized, sparse) and WAL directories (several segments, a
 * torn tail). The WASM backend does its file I/O in TypeScript around the same Rust
 * format code the native backend runs; these tests hold the two to one format.
 */

import test, { ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import type { Backend, Engine, IndexOptions } from '../../bindings/engine';
import { loadEngine } from '../../bindings/index';
import { labelsFrom, randomVectors, silentLogger } from './helpers';

const engine = (b: Backend): Engine => loadEngine({ backend: b, logger: silentLogger });

function tmpDir(t: ExecutionContext, name: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `quiver-x-${name}-`));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

const PAIRS: Array<[Backend, Backend]> = [
  ['native', 'wasm'],
  ['wasm', 'native'],
];

const KINDS: Array<[string, IndexOptions]> = [
  ['hnsw', { dim: 12, distance: 'Cosine', m: 8, seed: 3 }],
  ['scalar', { dim: 12, distance: 'Euclid', quantization: { kind: 'scalar' }, seed: 4 }],
  ['flat float16', { dim: 12, distance: 'Dot', flat: true, datatype: 'float16' }],
];

for (const [writer, reader] of PAIRS) {
  for (const [kind, options] of KINDS) {
    test(`${kind} index written by ${writer} loads in ${reader}, answers alike and saves the same bytes`, async (t) => {
      const dir = tmpDir(t, 'ix');
      const a = path.join(dir, 'a.qvx');
      const b = path.join(dir, 'b.qvx');
      const ix = engine(writer).createIndex(options);
      t.teardown(() => ix.close());
      await ix.add(labelsFrom(1, 600), randomVectors(600, 12, 21));
      await ix.delete(labelsFrom(1, 40));
      await ix.save(a);
      const loaded = await engine(reader).loadIndex(a);
      t.teardown(() => loaded.close());
      t.like(loaded.stats(), { count: 560, deleted: 40, flat: options.flat === true, datatype: options.datatype ?? 'float32' });
      const queries = randomVectors(10, 12, 22);
      const mine = await ix.searchBatch(queries, { k: 10 });
      const theirs = await loaded.searchBatch(queries, { k: 10 });
      t.deepEqual(
        theirs.map((r) => Array.from(r.labels)),
        mine.map((r) => Array.from(r.labels)),
      );
      t.deepEqual(await loaded.exportLive(), await ix.exportLive());
      await loaded.save(b);
      t.true(fs.readFileSync(b).equals(fs.readFileSync(a)), 'the reader saves the very bytes it loaded');
    });
  }

  test(`sparse index written by ${writer} loads in ${reader} and saves the same bytes`, async (t) => {
    const dir = tmpDir(t, 'sp');
    const a = path.join(dir, 'a.qsp');
    const b = path.join(dir, 'b.qsp');
    const sp = engine(writer).createSparseIndex({ datatype: 'float16' });
    t.teardown(() => sp.close());
    await sp.upsert({
      labels: new BigUint64Array([3n, 1n, 2n]),
      offsets: new Uint32Array([0, 2, 3, 6]),
      indices: new Uint32Array([7, 2, 5, 1, 9, 4]),
      values: new Float32Array([0.5, 1.5, -2, 3, 0.25, 8]),
    });
    await sp.save(a);
    const loaded = await engine(reader).loadSparseIndex(a);
    t.teardown(() => loaded.close());
    t.deepEqual(await loaded.get(new BigUint64Array([1n, 2n, 3n])), await sp.get(new BigUint64Array([1n, 2n, 3n])));
    const q = await loaded.search(new Uint32Array([2, 9]), new Float32Array([1, 1]), { k: 3 });
    t.deepEqual(Array.from(q.labels), [3n, 2n]);
    await loaded.save(b);
    t.true(fs.readFileSync(b).equals(fs.readFileSync(a)));
  });

  test(`WAL written by ${writer} (several segments, torn tail) opens in ${reader}`, async (t) => {
    const dir = tmpDir(t, 'wal');
    const records = Array.from({ length: 50 }, (_, i) => Buffer.from(`rec-${i}-${'z'.repeat(i % 13)}`));
    const w = await engine(writer).openWal(dir, { segmentBytes: 200 });
    for (let i = 0; i < records.length; i += 5) await w.append(records.slice(i, i + 5), i % 10 === 0);
    await w.sync();
    await w.close();
    const segments = fs.readdirSync(dir).filter((f) => f.endsWith('.wal')).sort();
    t.true(segments.length > 3, `${segments.length} segments`);
    const last = segments[segments.length - 1];
    fs.appendFileSync(path.join(dir, last), Buffer.from([40, 0, 0, 0, 1, 2, 3]));
    const r = await engine(reader).openWal(dir, { segmentBytes: 200 });
    t.like(r.report, { firstSeq: 1n, lastSeq: 50n, truncatedBytes: 7, truncatedFile: last });
    t.deepEqual(
      (await r.readFrom(1n)).map((x) => x.data.toString()),
      records.map((x) => x.toString()),
    );
    t.deepEqual(
      (await r.readFrom(23n, 4)).map((x) => x.seq),
      [23n, 24n, 25n, 26n],
    );
    const [next] = await r.append([Buffer.from('after')], true);
    t.is(next, 51n);
    await r.truncateBefore(30n);
    const first = r.firstSeq();
    t.true(first > 1n && first <= 30n);
    await r.close();
    // And back: the first backend reads what the second appended and cut.
    const again = await engine(writer).openWal(dir, { segmentBytes: 200 });
    t.is(again.lastSeq(), 51n);
    t.is(again.firstSeq(), first);
    t.is((await again.readFrom(51n))[0].data.toString(), 'after');
    await again.close();
  });
}

test('the same appends make byte-identical WAL segments on both backends', async (t) => {
  const dirs: Record<Backend, string> = { native: tmpDir(t, 'wn'), wasm: tmpDir(t, 'ww') };
  for (const b of ['native', 'wasm'] as Backend[]) {
    const w = await engine(b).openWal(dirs[b], { segmentBytes: 300 });
    for (let i = 0; i < 30; i++) await w.append([Buffer.from(`record ${i}`), Buffer.alloc(i * 3, i)], i % 4 === 0);
    await w.close();
  }
  const names = fs.readdirSync(dirs.native).sort();
  t.deepEqual(fs.readdirSync(dirs.wasm).sort(), names);
  for (const n of names) t.true(fs.readFileSync(path.join(dirs.wasm, n)).equals(fs.readFileSync(path.join(dirs.native, n))), n);
});

test('a WAL with damage before its tail is refused by both backends alike', async (t) => {
  const dir = tmpDir(t, 'dmg');
  const w = await engine('native').openWal(dir);
  await w.append([Buffer.from('one'), Buffer.from('two'), Buffer.from('three')], true);
  await w.close();
  const [seg] = fs.readdirSync(dir);
  const bytes = fs.readFileSync(path.join(dir, seg));
  bytes[20] ^= 0xff; // inside the first record's data: valid records follow
  fs.writeFileSync(path.join(dir, seg), bytes);
  const errs: string[] = [];
  for (const b of ['native', 'wasm'] as Backend[]) {
    const err = await t.throwsAsync(engine(b).openWal(dir));
    t.is((err as { code?: string }).code, 'QUIVER_CORRUPT');
    errs.push(err!.message);
  }
  t.is(errs[1], errs[0], 'the same diagnosis');
  t.true(fs.readFileSync(path.join(dir, seg)).equals(bytes), 'nothing was cut');
});
