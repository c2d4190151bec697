/**
 * The fusions of ts/collection/hybrid.ts on lists worked out by hand, and the plan run
 * over fake collection reads: which reads a nested query makes, with which filters and
 * limits, and how the top level cuts its page and shapes it.
 */

import test from 'ava';

import { dbsf, prefetchShape, rrf, runHybrid, type HybridReads, type Scored } from '../../ts/collection/hybrid';
import type { Prefetch, QueryRequest } from '../../ts/collection/query';
import type { SearchRequest } from '../../ts/collection/replica';
import type { Filter } from '../../ts/shard/filter';

const L = (...xs: Array<[number, number]>): Scored[] => xs.map(([id, score]) => ({ id, score }));
const close = (a: number, b: number) => Math.abs(a - b) < 1e-6;

test('RRF: 1 / (rank + k) summed over the lists, ranks from 0; only ranks count', (t) => {
  const out = rrf([L([2, 0.9], [1, 0.8]), L([1, 0.7], [2, 0.6], [3, 0.5]), L([5, 0.9], [3, 0.5], [1, 0.4])], 2, null);
  t.deepEqual(out.map((p) => p.id), [1, 2, 3, 5]);
  const want = [1 / 3 + 1 / 2 + 1 / 4, 1 / 2 + 1 / 3, 1 / 4 + 1 / 3, 1 / 2];
  out.forEach((p, i) => t.true(close(p.score, want[i]), `${p.id}: ${p.score}`));
  // k = 60, and weights: (rank + 1) / w + k - 1; a weight of 0 adds nothing.
  const w = rrf([L([1, 1], [2, 1]), L([2, 1], [1, 1])], 60, [3, 0]);
  t.deepEqual(w.map((p) => p.id), [1, 2]);
  t.true(close(w[0].score, 1 / (1 / 3 + 59)) && close(w[1].score, 1 / (2 / 3 + 59)));
  // Equal scores: by id.
  t.deepEqual(rrf([L([9, 1]), L([4, 1])], 2, null).map((p) => p.id), [4, 9]);
});

test('DBSF: (s - (mean - 3 sd)) / 6 sd per list with the sample sd, summed; one point or equal scores: 0.5', (t) => {
  // Scores 1, 2, 3: mean 2, sample sd 1, so the range is -1 .. 5.
  const out = dbsf([L([1, 1], [2, 2], [3, 3]), L([3, 7])]);
  const byId = new Map(out.map((p) => [p.id, p.score]));
  t.true(close(byId.get(1)!, 2 / 6) && close(byId.get(2)!, 3 / 6) && close(byId.get(3)!, 4 / 6 + 0.5));
  t.deepEqual(out.map((p) => p.id), [3, 2, 1]);
  t.deepEqual(dbsf([L([1, 4], [2, 4])]).map((p) => p.score), [0.5, 0.5]);
});

test('prefetchShape counts depth and prefetches at every level', (t) => {
  const leaf = (): Prefetch => ({ prefetch: [], query: { none: true }, using: '', filter: null, limit: 1, scoreThreshold: null, lookupFrom: null });
  t.deepEqual(prefetchShape([]), { depth: 0, count: 0 });
  t.deepEqual(prefetchShape([leaf(), { ...leaf(), prefetch: [leaf(), { ...leaf(), prefetch: [leaf()] }] }]), { depth: 3, count: 5 });
});

test('the plan: leaves get every filter above them and their limits; fusion cuts at the level limit; the top page is shaped last', async (t) => {
  const searches: Array<{ using: string; filter: Filter | null; limit: number }> = [];
  const lists: Record<string, Scored[]> = { a: L([1, 0.9], [2, 0.8], [3, 0.7]), b: L([3, 5], [4, 4], [1, 3]), c: L([7, 0.1], [3, 0.05]) };
  const reads: HybridReads<Scored & { shaped?: boolean }> = {
    search: async (s: SearchRequest) => {
      searches.push({ using: s.using, filter: s.filter, limit: s.limit });
      return lists[s.using].slice(0, s.limit);
    },
    ordered: async () => [],
    scroll: async () => [],
    vectors: async () => [],
    isSparse: () => false,
    multivectorDim: () => null,
    sparse: async () => [],
    shape: async (page) => page.map((p) => ({ ...p, shaped: true })),
    sample: async () => [],
    distance: () => 'Dot',
    matching: async () => [],
  };
  const f = (k: string): Filter => ({ must: [{ key: k, match: { value: 1 } }] });
  const leaf = (using: string, limit: number, filter: Filter | null = null): Prefetch => ({ prefetch: [], query: { nearest: { vector: new Float32Array([1]) } }, using, filter, limit, scoreThreshold: null, lookupFrom: null });
  const req: QueryRequest = {
    using: '',
    query: { fusion: { method: 'rrf', k: 2, weights: null } },
    prefetch: [{ ...leaf('', 2, f('mid')), query: { fusion: { method: 'rrf', k: 2, weights: null } }, prefetch: [leaf('a', 3, f('a')), leaf('b', 3)] }, leaf('c', 2)],
    filter: f('top'),
    limit: 2,
    offset: 1,
    scoreThreshold: null,
    withPayload: true,
    withVector: false,
  };
  const out = await runHybrid(reads, req, []);
  const byUsing = new Map(searches.map((s) => [s.using, s]));
  t.is(searches.length, 3);
  t.deepEqual(byUsing.get('a'), { using: 'a', limit: 3, filter: { must: [{ must: [f('top'), f('mid')] }, f('a')] } });
  t.deepEqual(byUsing.get('b'), { using: 'b', limit: 3, filter: { must: [f('top'), f('mid')] } });
  t.deepEqual(byUsing.get('c'), { using: 'c', limit: 2, filter: f('top') });
  // Inner: a = 1, 2, 3 and b = 3, 4, 1 fused: 1 and 3 tie at 1/2 + 1/4, then 2, 4; the level keeps 2: [1, 3].
  // Top: [1, 3] and c = [7, 3]: 3 = 1/3 + 1/3, 1 = 1/2, 7 = 1/2; page offset 1, limit 2: [1, 7].
  t.deepEqual(out.map((p) => p.id), [1, 7]);
  t.true(out.every((p) => p.shaped === true));
});
