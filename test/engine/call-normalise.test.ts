/**
 * Review of bindings/native.ts `call()` (commit 4d77fc6: a plain `.then` instead of an
 * async function). Through NativeEngine with a fake addon, it must still behave as the
 * async version did: never throw synchronously; a synchronous throw and a rejection of
 * the addon both become rejections; napi argument errors become QUIVER_INVALID_ARGUMENT;
 * anything else passes through as the same object; a resolved value is unchanged.
 */

import test from 'ava';

import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import type { Addon } from '../../bindings/native';
import { NativeEngine, loadAddon } from '../../bindings/native';
import { EngineError } from '../../bindings/errors';

function napiError(code: string, message: string): Error {
  return Object.assign(new Error(message), { code });
}

type Behaviour = () => Promise<unknown>;

function engineWith(search: Behaviour) {
  class FakeIndex {
    readonly dim = 2;
    readonly distance = 'Dot';
    readonly closed = false;
    search(): Promise<unknown> {
      return search();
    }
    searchBatch(): Promise<unknown> {
      return search();
    }
    close(): void {}
  }
  const addon = { NativeIndex: FakeIndex, kernelName: () => 'fake', loadIndex: async () => new FakeIndex(), openWal: async () => ({}) } as unknown as Addon;
  return new NativeEngine(addon).createIndex({ dim: 2, distance: 'Dot' });
}

const q = Float32Array.of(1, 2);

test('a synchronous napi argument error becomes a QUIVER_INVALID_ARGUMENT rejection, not a throw', async (t) => {
  const ix = engineWith(() => {
    throw napiError('InvalidArg', 'bad k');
  });
  let p: Promise<unknown> | undefined;
  t.notThrows(() => {
    p = ix.search(q, { k: 1 });
  });
  const err = await t.throwsAsync(p!);
  t.true(err instanceof EngineError);
  t.is((err as EngineError).code, 'QUIVER_INVALID_ARGUMENT');
  t.is(err!.message, 'bad k');
});

test('an asynchronous napi argument error is normalised too', async (t) => {
  const ix = engineWith(() => Promise.reject(napiError('NumberExpected', 'k: number expected')));
  const err = await t.throwsAsync(ix.searchBatch(Float32Array.of(1, 2, 3, 4), { k: 1 }));
  t.is((err as EngineError).code, 'QUIVER_INVALID_ARGUMENT');
});

test('other errors, thrown or rejected, pass through as the same object; non-Errors too', async (t) => {
  const closed = Object.assign(new Error('index is closed'), { code: 'QUIVER_CLOSED' });
  t.is(await t.throwsAsync(engineWith(() => Promise.reject(closed)).search(q, { k: 1 })), closed);
  t.is(await t.throwsAsync(engineWith(() => { throw closed; }).search(q, { k: 1 })), closed);
  const thrown: unknown = await engineWith(() => { throw 'a string'; }).search(q, { k: 1 }).then(
    () => 'resolved',
    (e: unknown) => e,
  );
  t.is(thrown, 'a string');
});

test('validation in the wrapper (before the addon) still rejects rather than throws', async (t) => {
  const ix = engineWith(async () => ({ labels: new BigUint64Array(), scores: new Float32Array() }));
  let p: Promise<unknown> | undefined;
  t.notThrows(() => {
    p = ix.search([1, 2] as unknown as Float32Array, { k: 1 });
  });
  const err = await t.throwsAsync(p!);
  t.is((err as EngineError).code, 'QUIVER_INVALID_ARGUMENT');
});

test('a resolved search comes back as its hits (the addon packs them in one ArrayBuffer); a batch unchanged', async (t) => {
  // The addon's layout: n u64 labels, n f32 scores, the engine's µs as f32.
  const buf = new ArrayBuffer(2 * 12 + 4);
  new BigUint64Array(buf, 0, 2).set([3n, 9n]);
  new Float32Array(buf, 16, 3).set([0.5, 0.25, 7]);
  const r = await engineWith(async () => buf).search(q, { k: 2 });
  t.deepEqual([Array.from(r.labels), Array.from(r.scores), r.computeUs], [[3n, 9n], [0.5, 0.25], 7]);
  const batch = [{ labels: BigUint64Array.of(3n), scores: Float32Array.of(0.5) }];
  t.is(await engineWith(async () => batch).searchBatch(Float32Array.of(1, 2), { k: 1 }), batch);
});

test('an addon answering searches in another form is refused at load; a result of another form is refused, never read as no hits', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-addon-form-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const old = path.join(dir, 'old.js');
  fs.writeFileSync(old, 'module.exports = { NativeIndex: function () {}, kernelName: () => "fake" };');
  t.throws(() => loadAddon(old), { message: /answers searches in form 0, this build reads form 1.*npm run build:addon/ });
  const other = path.join(dir, 'other.js');
  fs.writeFileSync(other, 'module.exports = { NativeIndex: function () {}, kernelName: () => "fake", searchLayout: () => 2 };');
  t.throws(() => loadAddon(other), { message: /form 2/ });
  const oldObject = { labels: BigUint64Array.of(3n), scores: Float32Array.of(0.5), computeUs: 1 };
  const err = await t.throwsAsync(engineWith(async () => oldObject).search(q, { k: 1 }));
  t.true(err instanceof EngineError);
  t.is((err as EngineError).code, 'QUIVER_CORRUPT');
});
