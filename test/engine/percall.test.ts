/**
 * The native backend's per-call search path (bindings/native.ts, FastPath): searches
 * measured cheaper than the hop run inline, within a per-turn budget. What must hold
 * whatever the timing: the same answers as the pool path, the event loop still turning
 * under a loop of awaited searches, and no inline search waiting for a writer's lock.
 * Speed is measured by bench/engine/percall.ts, not asserted here.
 */

import test from 'ava';

import type { SearchResult, VectorIndex } from '../../bindings/engine';
import { CONCURRENT_HOLD_MS, CONCURRENT_WINDOW_MS, concurrent, requestFinished, requestStarted } from '../../bindings/demand';
import { loadEngine } from '../../bindings/index';
import { searchPaths } from '../../bindings/native';
import { labelsFrom, randomVectors, row, silentLogger } from './helpers';

const engine = loadEngine({ backend: 'native', logger: silentLogger });

function hits(r: SearchResult): { labels: bigint[]; scores: number[] } {
  return { labels: Array.from(r.labels), scores: Array.from(r.scores) };
}

async function filled(n: number, dim: number, seed: number): Promise<{ ix: VectorIndex; data: Float32Array }> {
  const ix = engine.createIndex({ dim, distance: 'Cosine', m: 16, efConstruct: 64, seed: 7 });
  const data = randomVectors(n, dim, seed);
  await ix.add(labelsFrom(0, n), data);
  return { ix, data };
}

test.serial('repeated searches (pool first, inline once the cost is known) give the pool path answers', async (t) => {
  const dim = 24;
  const { ix, data } = await filled(2000, dim, 3);
  t.teardown(() => ix.close());
  const queries = randomVectors(50, dim, 4);
  const opts = { k: 10, ef: 32 };
  const pool = await ix.searchBatch(queries, opts);
  for (let pass = 0; pass < 3; pass++) {
    for (let i = 0; i < 50; i++) {
      const r = await ix.search(row(queries, dim, i), opts);
      t.deepEqual(hits(r), hits(pool[i]), `query ${i}, pass ${pass}`);
    }
  }
  // A vector finds itself first, on both paths.
  const self = await ix.search(row(data, dim, 17), { k: 1, ef: 32 });
  t.is(self.labels[0], 17n);
  // Errors still reject (not throw) on the path that runs inline.
  await t.throwsAsync(ix.search(new Float32Array(dim + 1), opts));
});

test.serial('a loop of awaited searches lets the event loop turn', async (t) => {
  const dim = 32;
  const { ix } = await filled(3000, dim, 5);
  t.teardown(() => ix.close());
  const q = randomVectors(1, dim, 6);
  const opts = { k: 10, ef: 64 };
  let turns = 0;
  let stop = false;
  const spin = () => {
    turns++;
    if (!stop) setImmediate(spin);
  };
  // Warm the cost estimate, then count turns only while the loop runs.
  for (let i = 0; i < 20; i++) await ix.search(q, opts);
  const n = 4000;
  const t0 = performance.now();
  setImmediate(spin);
  turns = 0;
  for (let i = 0; i < n; i++) await ix.search(q, opts);
  stop = true;
  const ms = performance.now() - t0;
  t.log(`${n} awaited searches in ${ms.toFixed(1)} ms, ${turns} event-loop turns`);
  // Inline searches stop at the per-turn budget (0.3 ms): a loop that never yielded
  // would show no turn at all until it ended.
  t.true(turns >= 2, `the event loop turned during the loop (${turns} turns)`);
});

test.serial('one caller awaiting one search at a time waits for the next turn; many searches at once go to the pool', async (t) => {
  const dim = 32;
  const { ix } = await filled(3000, dim, 14);
  t.teardown(() => ix.close());
  const q = randomVectors(1, dim, 15);
  const opts = { k: 10, ef: 64 };
  for (let i = 0; i < 20; i++) await ix.search(q, opts); // learn the cost
  // One at a time: the turn budget (0.3 ms) runs out many times over 2000 searches, and
  // the search over it waits for the next turn instead of taking the hop.
  let before = searchPaths();
  for (let i = 0; i < 2000; i++) await ix.search(q, opts);
  let after = searchPaths();
  t.log(`one at a time: inline ${after.inline - before.inline}, next turn ${after.nextTurn - before.nextTurn}, pool ${after.pool - before.pool}`);
  // (Not "none took the pool": on a loaded machine a search measured dear sends the
  // next ones to the pool until cheaper ones bring the estimate down.) Twice or more:
  // the second needs the first's wait to have ended.
  const waited = after.nextTurn - before.nextTurn;
  t.true(waited >= 2, `searches waited for the next turn ${waited} times`);
  // 300 at once (a batch, Promise.all): past the budget, one waits for the next turn
  // and the others take the pool, whose threads search in parallel.
  await new Promise((r) => setImmediate(r)); // a fresh turn budget
  before = searchPaths();
  const all = await Promise.all(Array.from({ length: 300 }, () => ix.search(q, opts)));
  after = searchPaths();
  t.log(`300 at once: inline ${after.inline - before.inline}, next turn ${after.nextTurn - before.nextTurn}, pool ${after.pool - before.pool}`);
  t.true(after.pool > before.pool, 'searches issued together reach the pool');
  t.true(after.nextTurn - before.nextTurn <= 1, 'at most one search waits for the next turn');
  for (const r of all) t.is(r.labels.length, 10);
});

test.serial('searches issued at once answer for the query as it was when each was issued', async (t) => {
  const dim = 32;
  const { ix } = await filled(3000, dim, 11);
  t.teardown(() => ix.close());
  const n = 200;
  const queries = randomVectors(n, dim, 12);
  const opts = { k: 10, ef: 64 };
  const want = await ix.searchBatch(queries, opts);
  for (let i = 0; i < 20; i++) await ix.search(row(queries, dim, 0), opts); // inline from here on
  // One buffer, rewritten after every call: the first searches run inline, one waits
  // for the next turn once the turn's budget is spent, the rest take the hop, and each
  // must still search the vector it was given. Repeated until a round had a search
  // wait (on a loaded machine a search measured dear sends a round to the pool).
  let rounds = 0;
  for (let waited = 0; waited === 0; rounds++) {
    if (rounds >= 200) throw new Error('no round of 200 had a search wait for the next turn');
    await new Promise((r) => setImmediate(r)); // a fresh turn budget
    const before = searchPaths();
    const buf = new Float32Array(dim);
    const pending: Promise<SearchResult>[] = [];
    for (let i = 0; i < n; i++) {
      buf.set(row(queries, dim, i));
      pending.push(ix.search(buf, opts));
    }
    buf.fill(0);
    waited = searchPaths().nextTurn - before.nextTurn;
    t.true(waited <= 1);
    const got = await Promise.all(pending);
    for (let i = 0; i < n; i++) t.deepEqual(hits(got[i]), hits(want[i]), `query ${i}`);
  }
  t.log(`${rounds} round(s)`);
});

test.serial('a search waiting for the next turn when the index closes still answers', async (t) => {
  const dim = 32;
  const { ix } = await filled(3000, dim, 16);
  const n = 100;
  const queries = randomVectors(n, dim, 17);
  const opts = { k: 10, ef: 64 };
  const want = await ix.searchBatch(queries, opts);
  for (let i = 0; i < 20; i++) await ix.search(row(queries, dim, 0), opts); // inline from here on
  // Until a round has a search waiting (see the test above), then close with it waiting.
  for (let rounds = 0; ; rounds++) {
    if (rounds >= 200) throw new Error('no round of 200 had a search wait for the next turn');
    await new Promise((r) => setImmediate(r)); // a fresh turn budget
    const before = searchPaths();
    const pending = Array.from({ length: n }, (_, i) => ix.search(row(queries, dim, i), opts));
    const waiting = searchPaths().nextTurn - before.nextTurn === 1;
    if (waiting) ix.close();
    const got = await Promise.all(pending);
    for (let i = 0; i < n; i++) t.deepEqual(hits(got[i]), hits(want[i]), `query ${i}`);
    if (waiting) break;
  }
  await t.throwsAsync(ix.search(row(queries, dim, 0), opts), { code: 'QUIVER_CLOSED' });
});

test.serial('a search issued while a build holds the index does not wait on the event loop', async (t) => {
  const dim = 64;
  const { ix } = await filled(500, dim, 8);
  t.teardown(() => ix.close());
  const q = randomVectors(1, dim, 9);
  const opts = { k: 10, ef: 32 };
  for (let i = 0; i < 20; i++) await ix.search(q, opts); // inline from here on
  const n = 20_000;
  let building = true;
  const t0 = performance.now();
  const build = ix.add(labelsFrom(1000, n), randomVectors(n, dim, 10), 1).then(() => {
    building = false;
  });
  // One search per millisecond while the build runs. A search that waited for the
  // build's write lock would hold the event loop until the build ended: the longest gap
  // between two turns would then be most of the build.
  const searches: Promise<SearchResult>[] = [];
  let last = performance.now();
  let maxGapMs = 0;
  while (building) {
    searches.push(ix.search(q, opts));
    await new Promise((r) => setTimeout(r, 1));
    const now = performance.now();
    maxGapMs = Math.max(maxGapMs, now - last);
    last = now;
  }
  await build;
  const buildMs = performance.now() - t0;
  const results = await Promise.all(searches);
  t.log(`build ${buildMs.toFixed(0)} ms, ${searches.length} searches issued during it, longest turn gap ${maxGapMs.toFixed(1)} ms`);
  t.true(maxGapMs < buildMs / 2, `longest turn gap ${maxGapMs.toFixed(1)} ms against a ${buildMs.toFixed(0)} ms build`);
  for (const r of results) t.is(r.labels.length, 10);
});

test.serial('concurrent clients (bindings/demand.ts): the count, the window and the hold', (t) => {
  // Times are given: nothing here depends on how fast the test runs.
  const a = { name: 'connection a' };
  const b = { name: 'connection b' };
  // Times long past: the hold they set is over for the real clock (the other tests).
  const base = -1e9;
  t.false(concurrent(base));
  // One connection, each request after the last answer: never concurrent.
  for (let i = 0; i < 5; i++) {
    requestStarted(a, base + i * 0.1);
    t.false(concurrent(base + i * 0.1 + 0.05));
    requestFinished();
  }
  // Another connection right after (0.5 ms): concurrent clients, held for CONCURRENT_HOLD_MS.
  requestStarted(b, base + 1);
  requestFinished();
  t.true(concurrent(base + 1 + CONCURRENT_HOLD_MS - 1));
  t.false(concurrent(base + 1 + CONCURRENT_HOLD_MS + 1));
  // Another connection after the window: one client at a time, not concurrent.
  const later = base + 1000;
  requestStarted(a, later);
  requestFinished();
  requestStarted(b, later + CONCURRENT_WINDOW_MS + 5);
  t.false(concurrent(later + CONCURRENT_WINDOW_MS + 6));
  requestFinished();
  // Overlapping requests (even on one connection: gRPC streams) are concurrent while they overlap and for the hold after.
  const over = base + 2000;
  requestStarted(a, over);
  requestStarted(a, over + 10);
  t.true(concurrent(over + 20));
  requestFinished();
  requestFinished();
  t.true(concurrent(over + 10 + CONCURRENT_HOLD_MS - 1));
  t.false(concurrent(over + 10 + CONCURRENT_HOLD_MS + 1));
  // More finishes than starts never go below zero.
  requestFinished();
  requestStarted(a, over + 5000);
  t.false(concurrent(over + 5000 + 0.1));
  requestFinished();
});

/** Whether `p` settles within a few microtask turns (an inline search does; one on the pool needs the event loop). */
async function settlesInMicrotasks(p: Promise<unknown>): Promise<boolean> {
  let settled = false;
  void p.then(
    () => (settled = true),
    () => (settled = true),
  );
  for (let i = 0; i < 5; i++) await Promise.resolve();
  const early = settled;
  await p;
  return early;
}

test.serial('while clients are concurrent, searches take the pool; alone, they run inline', async (t) => {
  const dim = 16;
  const { ix } = await filled(1000, dim, 12);
  t.teardown(() => ix.close());
  const q = randomVectors(1, dim, 13);
  const opts = { k: 5, ef: 16 };
  // Learn the cost, then a search alone runs inline (settled before the event loop turns).
  for (let i = 0; i < 10; i++) await ix.search(q, opts);
  await new Promise((r) => setImmediate(r)); // a fresh turn budget
  t.true(await settlesInMicrotasks(ix.search(q, opts)));
  // Two requests in flight: the search takes the pool.
  requestStarted('x');
  requestStarted('y');
  try {
    await new Promise((r) => setImmediate(r));
    t.false(await settlesInMicrotasks(ix.search(q, opts)));
  } finally {
    requestFinished();
    requestFinished();
  }
});
