/**
 * requiredIds (ts/shard/filter-ids.ts): the has_id list a filter requires, which a shard
 * visits instead of every point. Only a list every match must be in counts: has_id under
 * should, must_not, min_should or a filter with any of those is no requirement.
 */

import test from 'ava';

import { validateFilter } from '../../ts/shard/filter';
import { requiredIds } from '../../ts/shard/filter-ids';

const ids = (f: object) => requiredIds(validateFilter(f));

test('a has_id in must (or in a must-only filter under must) is required; the shortest list wins', (t) => {
  t.deepEqual(ids({ must: [{ has_id: [1, 2, 3] }] }), [1, 2, 3]);
  t.deepEqual(ids({ must: [{ key: 'a', match: { value: 1 } }, { has_id: [4, 5] }] }), [4, 5]);
  t.deepEqual(ids({ must: [{ must: [{ has_id: [7] }] }, { has_id: [7, 8] }] }), [7]);
  t.deepEqual(ids({ must: [{ has_id: [] }] }), []);
});

test('has_id that does not bind every match is no requirement', (t) => {
  t.is(ids({ should: [{ has_id: [1] }] }), null);
  t.is(ids({ must_not: [{ has_id: [1] }] }), null);
  t.is(ids({ must: [{ should: [{ has_id: [1] }], must: [{ has_id: [2] }] }] }), null);
  t.is(ids({ must: [{ must: [{ has_id: [2] }], must_not: [{ key: 'a', match: { value: 1 } }] }] }), null);
  t.is(ids({ min_should: { conditions: [{ has_id: [1] }], min_count: 1 } }), null);
  t.is(ids({ must: [{ key: 'a', match: { value: 1 } }] }), null);
});
