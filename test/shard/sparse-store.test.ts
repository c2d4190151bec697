/**
 * SparseStore (ts/shard/sparse-store.ts) on either engine backend: values stored in the
 * spec's datatype, and a checkpoint file of another datatype (as files written before
 * sparse indexes recorded one load: float32) converted on load and rewritten by the
 * next save.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { loadEngine } from '../../bindings/index';
import { SparseStore } from '../../ts/shard/sparse-store';
import { silentLogger } from '../engine/helpers';

// The backend QUIVER_ENGINE picks (native by default; test/backends runs this file on WASM too).
const engine = loadEngine({ logger: silentLogger });

test('a float32 checkpoint file loads into a uint8 store as uint8 values, and the next save rewrites it', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-sparse-store-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const wide = new SparseStore(engine, { name: 's', fullScanThreshold: 10, idf: false, datatype: 'float32' });
  t.teardown(() => wide.close());
  await wide.upsert([1n, 2n], [
    { indices: Uint32Array.of(1, 2, 3), values: Float32Array.of(3.9, -3, 300) },
    { indices: Uint32Array.of(2), values: Float32Array.of(7.5) },
  ]);
  const file = await wide.save(dir, 'sparse-0-', 5n, 1);

  const narrow = new SparseStore(engine, { name: 's', fullScanThreshold: 10, idf: false, datatype: 'uint8' });
  t.teardown(() => narrow.close());
  await narrow.load(dir, file);
  t.is((await narrow.stats()).datatype, 'uint8');
  t.deepEqual(Array.from((await narrow.get(1n))!.values), [3, 0, 255]);
  t.deepEqual(Array.from((await narrow.get(2n))!.values), [7]);
  const hits = await narrow.search({ indices: Uint32Array.of(2, 3), values: Float32Array.of(1, 0.5) }, 5, null);
  t.deepEqual(hits, [{ label: 1n, score: 127.5 }, { label: 2n, score: 7 }]);
  t.true(narrow.changedSinceSave());
  const rewritten = await narrow.save(dir, 'sparse-0-', 6n, 2);
  t.not(rewritten, file);
  const again = new SparseStore(engine, { name: 's', fullScanThreshold: 10, idf: false, datatype: 'uint8' });
  t.teardown(() => again.close());
  await again.load(dir, rewritten);
  t.false(again.changedSinceSave());
  t.deepEqual(Array.from((await again.get(1n))!.values), [3, 0, 255]);
});
