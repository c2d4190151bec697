/**
 * Counting the work of steps that move no archive bytes (ts/common/work.ts) and how a
 * snapshot job shows it (ts/snapshots/jobs.ts: `unit`, `units_done`, `units_total`):
 * reports reach the counter of the step they run in, through awaits, and nowhere else;
 * pieces written count their bytes (the total is the file's size); a file another writer
 * grows through a temp file beside it is counted while it grows, and in full at the end;
 * a job's counted step shows its units and a new step clears them.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import test from 'ava';
import pino from 'pino';

import { writeFileAtomic } from '../../ts/common/files';
import { AsyncLocalStorage } from 'node:async_hooks';

import { countWork, counting, countingPieces, runCounting, runScoped, watchGrowth } from '../../ts/common/work';
import { SnapshotJobs, currentProgress } from '../../ts/snapshots/jobs';
import { waitFor } from '../support/wait';

test('reports reach the counter of the step they run in, through awaits', async (t) => {
  const got: number[] = [];
  countWork(5);
  t.false(counting());
  await runCounting((n) => got.push(n), async () => {
    t.true(counting());
    countWork(1);
    await new Promise((r) => setTimeout(r, 5));
    countWork(2);
    await Promise.all([1, 2].map(async (x) => countWork(x * 10)));
    countWork(0);
  });
  countWork(7);
  t.deepEqual(got, [1, 2, 10, 20]);
});

test('a scoped context is switched off only when its last run ends: an overlapping run keeps its store', async (t) => {
  const als = new AsyncLocalStorage<string>();
  let releaseFirst!: () => void;
  const firstHeld = new Promise<void>((r) => (releaseFirst = r));
  let releaseSecond!: () => void;
  const secondHeld = new Promise<void>((r) => (releaseSecond = r));
  const first = runScoped(als, 'first', async () => {
    await firstHeld;
    return als.getStore();
  });
  let seenAfterFirstEnded: string | undefined;
  const second = runScoped(als, 'second', async () => {
    await secondHeld;
    seenAfterFirstEnded = als.getStore();
  });
  releaseFirst();
  t.is(await first, 'first');
  releaseSecond();
  await second;
  t.is(seenAfterFirstEnded, 'second');
  // Both ended: the context is off (nothing outside a run sees a store), and a new run works.
  t.is(als.getStore(), undefined);
  t.is(await runScoped(als, 'third', async () => als.getStore()), 'third');
  // A run whose function throws at once ends too.
  await t.throwsAsync(runScoped(als, 'x', () => Promise.reject(new Error('boom'))), { message: 'boom' });
  t.is(await runScoped(als, 'fourth', async () => als.getStore()), 'fourth');
});

test('pieces written count their bytes; a file grown by another writer is counted while it grows and in full', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-work-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  let total = 0;
  await runCounting((n) => (total += n), () => writeFileAtomic(path.join(dir, 'state.bin'), countingPieces([Buffer.alloc(1000, 1), Buffer.alloc(24, 2), Buffer.alloc(0)])));
  t.is(total, fs.statSync(path.join(dir, 'state.bin')).size);
  t.is(total, 1024);

  // As the engine writes: a temp file beside the target grows, then is renamed to it.
  const seen: number[] = [];
  await runCounting((n) => seen.push(n), async () => {
    const target = path.join(dir, 'vec-0.qvi');
    const growth = watchGrowth(target, 20);
    const tmp = path.join(dir, '.vec-0.qvi.tmp-1-0');
    for (let i = 0; i < 5; i++) {
      fs.appendFileSync(tmp, Buffer.alloc(4096));
      const before = seen.length;
      await waitFor('the growth counted', () => seen.length > before, 5_000, 5);
    }
    fs.appendFileSync(tmp, Buffer.alloc(100));
    fs.renameSync(tmp, target);
    await growth.stop();
  });
  t.true(seen.length >= 5, `counted ${seen.length} times while growing`);
  t.is(seen.reduce((a, b) => a + b, 0), 5 * 4096 + 100);
  // Outside a counted step: nothing is watched.
  await watchGrowth(path.join(dir, 'other'), 10).stop();
});

test('a snapshot job shows the units of a counted step; a new step clears them', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-work-jobs-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const jobs = await SnapshotJobs.open(dir, pino({ level: 'silent' }));
  t.teardown(() => jobs.close());
  let view: any = null;
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const done = jobs.run('create_collection_snapshot', { collection: 'c' }, async () => {
    const p = currentProgress()!;
    p.phase('writing', 10);
    p.add(4);
    p.work('pinning', 'checkpoint bytes');
    await runCounting((n) => p.addUnits(n), async () => {
      countWork(300);
      countWork(200);
      await gate;
    });
    p.step('storing');
    return { name: 'x' };
  }, 'api');
  view = await waitFor('the counted step seen', () => {
    const v = jobs.list().find((j) => j.phase === 'pinning');
    return v !== undefined && v.units_done === 500 ? v : null;
  });
  t.like(view, { phase: 'pinning', unit: 'checkpoint bytes', units_done: 500, units_total: null, bytes_done: 4, bytes_total: 10 });
  release();
  const last = await done;
  t.like(last, { state: 'completed', unit: null, units_done: null, units_total: null });
});
