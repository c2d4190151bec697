/**
 * ts/api/cli/idle-gc.ts: after a burst leaves the heap's old space mostly empty, the
 * idle collection runs once the process is quiet, compacts and gives the pages back;
 * it does not run while the process is busy; and a heap that grew but is mostly live
 * is collected without compaction.
 */
import test from 'ava';
import * as v8 from 'node:v8';

import { IdleGc, fullGc, type IdleGcEvent } from '../../ts/api/cli/idle-gc';
import { waitFor } from '../support/wait';

const oldSpace = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'old_space')!;

test.serial('after a burst, a quiet process gets a compacting collection that releases the old space', async (t) => {
  const gc = fullGc();
  if (!gc) return t.fail('gc is not reachable');
  const events: IdleGcEvent[] = [];
  const idle = new IdleGc(gc, (e) => events.push(e));
  idle.start();
  try {
    // A burst: 3M small objects, one in 20 kept (as a load leaves its id tables behind).
    const kept: Array<{ i: number; s: string }> = [];
    let burst: Array<{ i: number; s: string }> | null = [];
    for (let i = 0; i < 3_000_000; i++) {
      const o = { i, s: `x${i}` };
      burst.push(o);
      if (i % 20 === 0) kept.push(o);
    }
    burst = null;
    const before = v8.getHeapStatistics().total_heap_size;
    const e = await waitFor('the idle collection', () => events[0]);
    t.true(e.compacted);
    t.true(e.heapBefore >= before - (16 << 20), `heap before ${e.heapBefore}, seen ${before}`);
    const old = oldSpace();
    // Compacted: the old space is about its live size, far below the burst's high-water mark.
    t.true(old.space_size - old.space_used_size < 32 << 20, `old space ${old.space_size} for ${old.space_used_size} live`);
    t.true(e.heapAfter < e.heapBefore / 2, `heap ${e.heapBefore} -> ${e.heapAfter}`);
    t.is(kept.length, 150_000);
    t.is(kept[149_999].s, 'x2999980');
  } finally {
    idle.stop();
  }
});

test.serial('no collection while the process is busy; a mostly live heap is not compacted', async (t) => {
  const gc = fullGc();
  if (!gc) return t.fail('gc is not reachable');
  const events: IdleGcEvent[] = [];
  const idle = new IdleGc(gc, (e) => events.push(e));
  idle.start();
  try {
    // Grow the heap with objects that stay live, keeping the CPU busy for 3.5 s (the
    // module wants two quiet seconds): nothing may run meanwhile.
    const live: Array<{ i: number; s: string }> = [];
    const end = Date.now() + 3500;
    let i = 0;
    while (Date.now() < end) {
      for (let k = 0; k < 10_000; k++, i++) if (live.length < 2_000_000) live.push({ i, s: `y${i}` });
      await new Promise((r) => setImmediate(r));
    }
    t.is(events.length, 0, 'a collection ran while the process was busy');
    // Then quiet: a collection runs, without compaction (the old space is mostly live).
    const e = await waitFor('the idle collection', () => events[0]);
    t.false(e.compacted);
    t.is(live.length, 2_000_000);
  } finally {
    idle.stop();
  }
});
