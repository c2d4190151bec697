/**
 * The pace of outgoing shard transfers (RateLimiter), on a clock the test moves by hand:
 * how long each piece waits, never a measured time.
 */

import test from 'ava';

import { RateLimiter, type Clock } from '../../ts/transfer/rate';

const MiB = 1024 * 1024;

/** A clock that only moves when a sleep is asked for (by exactly that much); it records the sleeps. */
function fakeClock(): Clock & { sleeps: number[]; at: number } {
  const c = {
    at: 1_000_000,
    sleeps: [] as number[],
    now: () => c.at,
    sleep: async (ms: number) => {
      c.sleeps.push(ms);
      c.at += ms;
    },
  };
  return c;
}

test('no limit: nothing waits', async (t) => {
  const clock = fakeClock();
  const r = new RateLimiter(null, clock);
  t.false(r.limited);
  await r.take(100 * MiB);
  t.deepEqual(clock.sleeps, []);
});

test('pieces sent back to back wait so the average is the limit, after one second of budget', async (t) => {
  const clock = fakeClock();
  const r = new RateLimiter(2, clock); // 2 MiB/s
  t.true(r.limited);
  for (let i = 0; i < 12; i++) await r.take(MiB / 2);
  // 6 MiB at 2 MiB/s is 3 s: the first 4 pieces (1 s of budget) go at once, each later one waits a quarter of a second.
  t.deepEqual(clock.sleeps, Array(8).fill(250));
  t.is(clock.at - 1_000_000, 2000);
});

test('time spent elsewhere counts: a sender slower than the limit never waits', async (t) => {
  const clock = fakeClock();
  const r = new RateLimiter(1, clock);
  for (let i = 0; i < 6; i++) {
    await r.take(MiB / 4); // 250 ms of budget
    clock.at += 300; // the send itself took longer
  }
  t.deepEqual(clock.sleeps, []);
});

test('a piece larger than the budget is paid for, not refused; idle time is kept for one second only', async (t) => {
  const clock = fakeClock();
  const r = new RateLimiter(1, clock);
  await r.take(3 * MiB);
  t.deepEqual(clock.sleeps, [2000], 'three seconds of sending, one of them from the budget');
  clock.at += 60_000; // a minute idle
  await r.take(MiB);
  await r.take(MiB);
  t.deepEqual(clock.sleeps, [2000, 1000], 'the idle minute left one second of budget, no more');
});

test('zero bytes cost nothing', async (t) => {
  const clock = fakeClock();
  const r = new RateLimiter(1, clock);
  await r.take(0);
  t.deepEqual(clock.sleeps, []);
});
