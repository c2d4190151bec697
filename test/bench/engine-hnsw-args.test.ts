/**
 * `bench:engine`'s graph parameters (`--m`, `--ef-construct`, `--seed`) and its `ondisk768`
 * data set (the generator of `bench:ondisk`). Nothing is built or timed here.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import test from 'ava';

import { DEFAULT_HNSW, parseArgs } from '../../bench/engine/common';
import { datasetSizes, loadDataset } from '../../bench/engine/datasets';
import { makeData } from '../../bench/ondisk/data';

/** Same f32 bits (a byte comparison: deepEqual over millions of elements is slow). */
function sameBits(a: Float32Array, b: Float32Array): boolean {
  return a.length === b.length && Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));
}

test('--m, --ef-construct and --seed set the graph parameters; the defaults stay 16 / 100 / 42', (t) => {
  t.deepEqual(parseArgs([]).hnsw, { m: 16, efConstruct: 100, seed: 42 });
  t.deepEqual(DEFAULT_HNSW, { m: 16, efConstruct: 100, seed: 42 });
  t.deepEqual(parseArgs(['--m', '24', '--ef-construct', '200', '--seed', '7']).hnsw, { m: 24, efConstruct: 200, seed: 7 });
  t.deepEqual(parseArgs(['--ef-construct=300']).hnsw, { m: 16, efConstruct: 300, seed: 42 });
  // Parsing one run's flags leaves the defaults of the next alone.
  t.deepEqual(parseArgs([]).hnsw, { m: 16, efConstruct: 100, seed: 42 });
});

test('bad graph parameters and graph parameters with --scale are refused', (t) => {
  t.throws(() => parseArgs(['--m', '1']), { message: /--m must be an integer >= 2/ });
  t.throws(() => parseArgs(['--ef-construct', '3']), { message: /--ef-construct must be an integer >= 4/ });
  t.throws(() => parseArgs(['--ef-construct', '12.5']), { message: /--ef-construct/ });
  t.throws(() => parseArgs(['--seed', '-1']), { message: /--seed must be an integer >= 0/ });
  t.throws(() => parseArgs(['--m', 'x']), { message: /--m/ });
  t.throws(() => parseArgs(['--scale', '--ef-construct', '200']), { message: /--scale builds with M, ef_construct and seed fixed/ });
  t.throws(() => parseArgs(['--scale', '--seed', '1']), { message: /--scale builds with M, ef_construct and seed fixed/ });
});

test('ondisk768 runs only when named, and holds the vectors bench:ondisk generates', (t) => {
  t.false(parseArgs([]).datasets.includes('ondisk768'));
  t.deepEqual(parseArgs(['--datasets', 'ondisk768,synthetic']).datasets, ['ondisk768', 'synthetic']);
  t.throws(() => parseArgs(['--datasets', 'ondisk128']), { message: /unknown dataset ondisk128/ });
  t.deepEqual(datasetSizes('ondisk768', false), { nBase: 100_000, nQuery: 1000 });
  t.deepEqual(datasetSizes('ondisk768', true), { nBase: 20_000, nQuery: 200 });

  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ondisk768-'));
  try {
    const opts = { ...parseArgs(['--quick', '--datasets', 'ondisk768']), dataDir };
    const first = loadDataset('ondisk768', opts);
    if ('skipped' in first) return t.fail(first.skipped);
    const want = makeData(20_000, 200, 768);
    t.is(first.key, 'ondisk768');
    t.is(first.distance, 'Cosine');
    t.is(first.dim, 768);
    t.false(first.cached);
    t.true(sameBits(first.base, want.base));
    t.true(sameBits(first.queries, want.queries));
    // The anchors read the cache file: base rows, then query rows, f32 little-endian.
    t.is(fs.statSync(first.file as string).size, (20_000 + 200) * 768 * 4);
    const again = loadDataset('ondisk768', opts);
    if ('skipped' in again) return t.fail(again.skipped);
    t.true(again.cached);
    t.true(sameBits(again.base, want.base));
    t.true(sameBits(again.queries, want.queries));
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});
