/**
 * The optimizer's copy step reads its source a page at a time (copyInto over
 * exportLiveFrom): an index job and a vacuum over several pages, with rewrites and
 * deletes landing between pages (before and after the pages that hold them), end
 * with the label set, stored vectors and search answers of a fresh twin that was
 * given only the final data. An instrumented engine records every export the store
 * asks for: the jobs never call the whole exportLive, and no page is larger than
 * `exportPageSize` (the memory bound, counted rather than timed).
 */

import test from 'ava';
import pino from 'pino';

import type { Engine, IndexOptions, LivePage, VectorIndex } from '../../bindings/engine';
import { loadEngine } from '../../bindings/index';
import { exportPageSize, VectorStore, type Exclusive } from '../../ts/shard/vector-store';
import { mulberry32 } from '../support/rng';
import { waitFor } from '../support/wait';
import { testSpec } from './spec';

const logger = pino({ level: 'silent' });
const DIM = 4;

interface Exports {
  whole: number;
  pages: number;
  largestAsked: number;
  largestPage: number;
  /** Called once when the page count reaches `at`. */
  onPage: { at: number; run: () => void } | null;
}

/** An engine whose indexes count the exports asked of them. */
function instrumented(engine: Engine, seen: Exports): Engine {
  return Object.assign(Object.create(engine) as Engine, {
    createIndex: (o: IndexOptions): VectorIndex => {
      const ix = engine.createIndex(o);
      const exportLive = ix.exportLive.bind(ix);
      const exportLiveFrom = ix.exportLiveFrom.bind(ix);
      ix.exportLive = () => {
        seen.whole++;
        return exportLive();
      };
      ix.exportLiveFrom = async (from: number, maxCount: number): Promise<LivePage> => {
        seen.pages++;
        seen.largestAsked = Math.max(seen.largestAsked, maxCount);
        const page = await exportLiveFrom(from, maxCount);
        seen.largestPage = Math.max(seen.largestPage, page.labels.length);
        if (seen.onPage && seen.pages === seen.onPage.at) {
          const hook = seen.onPage;
          seen.onPage = null;
          hook.run();
        }
        return page;
      };
      return ix;
    },
  });
}

function lock(): Exclusive {
  let chain: Promise<unknown> = Promise.resolve();
  return <T>(fn: () => Promise<T>): Promise<T> => {
    const r = chain.then(fn);
    chain = r.then(
      () => undefined,
      () => undefined,
    );
    return r;
  };
}

function vectorsFor(labels: number[], seed: number): Float32Array {
  const rnd = mulberry32(seed);
  return Float32Array.from({ length: labels.length * DIM }, () => rnd() * 2 - 1);
}

/** Runs due jobs until none is pending. */
async function settle(store: VectorStore, exclusive: Exclusive): Promise<void> {
  await waitFor('optimizer idle', async () => {
    const job = store.maybeOptimize(exclusive);
    if (job) await job;
    return !store.pending();
  }, 120_000);
}

for (const backend of ['native', 'wasm'] as const) {
  test(`${backend}: an index job and a vacuum copy page by page, with writes between pages, and end like a fresh twin`, async (t) => {
    const base = loadEngine({ backend, logger });
    const seen: Exports = { whole: 0, pages: 0, largestAsked: 0, largestPage: 0, onPage: null };
    const spec = testSpec(DIM, { indexingThresholdKb: 4, deletedThreshold: 0.2, vacuumMinVectorNumber: 100 });
    const store = new VectorStore(instrumented(base, seen), spec, logger);
    t.teardown(() => store.closeIndexes());
    const exclusive = lock();
    const page = exportPageSize(DIM);
    const n = page * 4 + 1000;
    // The data the store should end with: label -> vector.
    const truth = new Map<number, Float32Array>();
    const upsert = async (labels: number[], seed: number) => {
      const v = vectorsFor(labels, seed);
      labels.forEach((l, i) => truth.set(l, v.subarray(i * DIM, (i + 1) * DIM)));
      await exclusive(() => store.upsert(BigUint64Array.from(labels, BigInt), v));
    };
    const remove = async (labels: number[]) => {
      for (const l of labels) truth.delete(l);
      await exclusive(() => store.delete(BigUint64Array.from(labels, BigInt)));
    };
    const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);
    for (let at = 0; at < n; at += 5000) await upsert(range(at, Math.min(5000, n - at)), at + 1);

    // Index job: after the second page, rewrite and delete points of pages already
    // copied and of pages not read yet (slots are in label order here).
    let midJob: Promise<void> | null = null;
    seen.onPage = {
      at: 2,
      run: () => {
        midJob = (async () => {
          await upsert([5, 6, 7, page * 3 + 1, page * 3 + 2], 900);
          await remove([8, 9, page * 3 + 3, page * 3 + 4, n - 1]);
        })();
      },
    };
    await settle(store, exclusive);
    t.truthy(midJob, 'writes ran during the index job');
    await midJob;
    await settle(store, exclusive);
    const afterIndex = seen.pages;
    t.true(afterIndex >= 5, `index job read ${afterIndex} pages`);

    // Vacuum: delete 30%, then writes between its pages too.
    await remove(range(0, n).filter((l) => l % 10 < 3 && truth.has(l)));
    t.true(store.pending(), 'a vacuum is due');
    midJob = null;
    seen.onPage = {
      at: afterIndex + 2,
      run: () => {
        midJob = (async () => {
          await upsert([21, 24, page * 3 + 5, n - 2], 901);
          await remove([25, 26, page * 3 + 6, page * 3 + 7]);
        })();
      },
    };
    await settle(store, exclusive);
    t.truthy(midJob, 'writes ran during the vacuum');
    await midJob;
    await settle(store, exclusive);
    const kinds = store.optimizations().completed.map((c) => c.optimizer);
    t.true(kinds.includes('indexing') && kinds.includes('vacuum'), kinds.join(','));
    t.true(seen.pages - afterIndex >= 4, `vacuum read ${seen.pages - afterIndex} pages`);

    // The memory bound: no whole export, no page above the page size.
    t.is(seen.whole, 0, 'the jobs never export everything at once');
    t.true(seen.largestAsked <= page && seen.largestPage <= page, `largest page asked ${seen.largestAsked}, returned ${seen.largestPage}, bound ${page}`);
    t.true(seen.largestPage * DIM * 4 <= 8 << 20);

    // A fresh twin given only the final data.
    const twin = new VectorStore(base, spec, logger);
    t.teardown(() => twin.closeIndexes());
    const twinLock = lock();
    const labels = [...truth.keys()].sort((a, b) => a - b);
    const flat = new Float32Array(labels.length * DIM);
    labels.forEach((l, i) => flat.set(truth.get(l)!, i * DIM));
    await twinLock(() => twin.upsert(BigUint64Array.from(labels, BigInt), flat));
    await settle(twin, twinLock);

    t.deepEqual([...store.present].sort((a, b) => (a < b ? -1 : 1)), labels.map(BigInt), 'label sets');
    // Nothing left in the flat index of either: every point is in the graph.
    t.deepEqual([store.indexedCount(), twin.indexedCount()], [labels.length, labels.length]);
    const stats = store.indexedStats()!;
    t.is(stats.count, store.indexedCount(), 'the graph holds exactly the labels it serves');
    for (const l of [0, 5, 6, 21, page * 3 + 1, page * 3 + 5, n - 2, labels[labels.length - 1]]) {
      const want = truth.get(l) ?? null;
      const got = await store.get(BigInt(l));
      t.deepEqual(got && Array.from(got), want && Array.from(want), `label ${l}`);
    }
    for (const gone of [8, 9, 25, page * 3 + 3, page * 3 + 6, n - 1, 10]) t.is(await store.get(BigInt(gone)), null, `label ${gone}`);
    const rnd = mulberry32(77);
    for (let q = 0; q < 20; q++) {
      const vector = Float32Array.from({ length: DIM }, () => rnd() * 2 - 1);
      const [a, b] = await Promise.all([store.search({ vector, k: 10, exact: true }), twin.search({ vector, k: 10, exact: true })]);
      t.deepEqual(a, b, `query ${q}`);
    }
  });
}
