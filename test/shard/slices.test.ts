/**
 * Loading in slices (ts/shard/slices.ts): runSliced gives the event loop a turn
 * between slices, and the decoders a shard loads with (id tracker, payloads, the
 * state file's checksum) yield every few hundred entries, so a shard of a million
 * points never holds requests up for longer than a slice. Counted in steps and loop
 * turns, not in time.
 */

import test from 'ava';

import { crc32c } from '../../ts/common/crc32c';
import { IdTracker } from '../../ts/shard/id-tracker';
import { PayloadStore } from '../../ts/shard/payload-store';
import { crc32cSteps, runAll, runSliced, type Steps } from '../../ts/shard/slices';

/** Runs `steps` to the end by hand; returns the result and how often it yielded. */
function drive<T>(steps: Steps<T>): { value: T; yields: number } {
  let yields = 0;
  for (;;) {
    const r = steps.next();
    if (r.done) return { value: r.value, yields };
    yields++;
  }
}

test('runSliced: the event loop turns between slices (a slice of 0 ms: after every step)', async (t) => {
  function* work(): Steps<number> {
    let sum = 0;
    for (let i = 0; i < 10; i++) {
      sum += i;
      yield;
    }
    return sum;
  }
  let turns = 0;
  let running = true;
  const tick = () => {
    turns++;
    if (running) setImmediate(tick);
  };
  setImmediate(tick);
  const sum = await runSliced(work(), 0);
  running = false;
  t.is(sum, 45);
  t.true(turns >= 10, `the event loop turned ${turns} times during 10 steps`);
  t.is(runAll(work()), 45);
});

test('runSliced: a failing step rejects with its error', async (t) => {
  function* bad(): Steps<number> {
    yield;
    throw new Error('step failed');
  }
  await t.throwsAsync(runSliced(bad(), 0), { message: 'step failed' });
});

test('the id tracker decoder yields at least every 1024 entries and builds what fromBytes builds', (t) => {
  const tr = new IdTracker();
  for (let i = 0; i < 10_000; i++) tr.upsert(i * 3, BigInt(i + 1));
  tr.upsert('550e8400-e29b-41d4-a716-446655440000', 7n);
  const bytes = tr.toBytes();
  const { value, yields } = drive(IdTracker.decode(bytes));
  t.true(yields >= Math.floor(10_001 / 1024), `${yields} yields`);
  t.deepEqual(value.entriesByOffset(), IdTracker.fromBytes(bytes).entriesByOffset());
  t.deepEqual(value.entriesByOffset(), tr.entriesByOffset());
});

test('the payload decoder yields at least every 512 entries and builds what fromBytes builds', (t) => {
  const s = new PayloadStore();
  for (let i = 0; i < 5000; i++) s.overwrite(BigInt(i), { i, tag: `t${i % 7}`, nested: { a: [i, 'é', null] } });
  const bytes = s.toBytes();
  const { value, yields } = drive(PayloadStore.decode(bytes));
  t.true(yields >= Math.floor(5000 / 512), `${yields} yields`);
  t.deepEqual([...value.entries()], [...s.entries()]);
});

test('the checksum in steps is the checksum', (t) => {
  const bytes = new Uint8Array(3_000_001).map((_, i) => (i * 31 + 7) & 0xff);
  const { value, yields } = drive(crc32cSteps(bytes, 5, bytes.length - 3, 1 << 20));
  t.is(value, crc32c(bytes, 5, bytes.length - 3));
  t.is(yields, 3);
});
