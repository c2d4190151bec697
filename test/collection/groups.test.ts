/**
 * The rounds of ts/collection/groups.ts over a fake collection whose query is an exact
 * ranking (a fixed score per point, ties by id) filtered by ts/shard/filter.ts: on many
 * random data sets (strings, integers, arrays with repeats, values that put a point in no
 * group, nested keys, missing keys) and sizes, the groups equal the test's brute-force
 * grouping of the ranking (test/support/groups.ts); and the value rules of groupIdsOf.
 */

import test from 'ava';

import { groupIdsOf, runGroups, type GroupReads, type GroupsRequest } from '../../ts/collection/groups';
import { DEFAULT_READ } from '../../ts/collection/replica';
import type { QueryRequest } from '../../ts/collection/query';
import { matches, parseKey } from '../../ts/shard/filter';
import { bruteForceGroups, groupsShape } from '../support/groups';
import { mulberry32 } from '../support/rng';

type Payload = Record<string, unknown>;

test('groupIdsOf: strings and integers, arrays expanded once, anything else puts the point in no group', (t) => {
  const at = (payload: Payload, key = 'k') => groupIdsOf(payload, parseKey(key));
  t.deepEqual(at({ k: 'a' }), ['a']);
  t.deepEqual(at({ k: -3 }), [-3]);
  t.deepEqual(at({ k: ['a', 1, 'a', 1] }), ['a', 1]);
  t.deepEqual(at({ k: [] }), []);
  t.deepEqual(at({}), []);
  for (const bad of [1.5, true, null, { x: 1 }, [['a']], ['a', 2.5], ['a', null]]) t.is(at({ k: bad }), null, JSON.stringify(bad));
  t.deepEqual(at({ m: [{ t: 'x' }, { t: ['y', 'x'] }, { u: 1 }] }, 'm.t'), ['x', 'y']);
  t.deepEqual(at({ m: [{ t: 'x' }, { t: 'y' }] }, 'm[].t'), ['x', 'y']);
  t.deepEqual(at({ m: { t: 'x' } }, 'm[].t'), [], '[] over a non-array yields nothing');
});

/** A fake collection: every point has a fixed score; the query filters, ranks and cuts. */
function fakeReads(points: Array<{ id: number; score: number; payload: Payload }>, calls: { n: number }): GroupReads {
  return {
    async query(req: QueryRequest) {
      calls.n++;
      const hits = points
        .filter((p) => req.filter === null || matches(req.filter, p.id, p.payload))
        .sort((a, b) => b.score - a.score || a.id - b.id)
        .slice(0, req.limit);
      const keys = req.withPayload as string[];
      return hits.map((p) => ({ id: p.id, version: 1, score: p.score, payload: Object.fromEntries(keys.filter((k) => k in p.payload).map((k) => [k, p.payload[k]])) as never }));
    },
    async records(ids) {
      return new Map(ids.map((k) => [k.value.toString(), { id: Number(k.value), payload: points.find((p) => p.id === Number(k.value))!.payload as never }]));
    },
    async lookup() {
      return new Map();
    },
  };
}

test('rounds over an exact ranking give the brute-force grouping, on 300 random data sets', async (t) => {
  const r = mulberry32(77);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)];
  let multiRound = 0;
  for (let run = 0; run < 300; run++) {
    const values = ['a', 'b', 'c', 'd', 0, 1, 2, -7].slice(0, 2 + Math.floor(r() * 7));
    const n = 5 + Math.floor(r() * 80);
    const points = Array.from({ length: n }, (_, i) => {
      const x = r();
      const g = x < 0.5 ? pick(values) : x < 0.75 ? Array.from({ length: 1 + Math.floor(r() * 3) }, () => pick(values)) : x < 0.85 ? pick([1.5, true, null, [], ['a', 0.5]]) : undefined;
      const payload: Payload = g === undefined ? {} : { g };
      if (r() < 0.7) payload.m = r() < 0.5 ? { t: pick(values) } : [{ t: pick(values) }, { t: pick(values) }];
      return { id: i + 1, score: Math.round(r() * 1000) / 1000, payload };
    });
    const key = pick(['g', 'm.t', 'm[].t']);
    const limit = 1 + Math.floor(r() * 6);
    const size = 1 + Math.floor(r() * 8);
    const query = { using: '', query: { none: true }, filter: null, limit, offset: 0, scoreThreshold: null, withPayload: true, withVector: false } as QueryRequest;
    const req: GroupsRequest = { query, groupBy: key, groupSize: size, withLookup: null };
    const calls = { n: 0 };
    const got = await runGroups(fakeReads(points, calls), req, 'desc', DEFAULT_READ);
    const ranking = [...points].sort((a, b) => b.score - a.score || a.id - b.id);
    t.deepEqual(groupsShape(got), bruteForceGroups(ranking, key, limit, size), `run ${run}: ${key} limit ${limit} size ${size}`);
    for (const g of got) for (const h of g.hits) t.deepEqual(h.payload, points[(h.id as number) - 1].payload);
    if (calls.n > 2) multiRound++;
  }
  t.true(multiRound > 30, `${multiRound} runs took more than two rounds`);
});
