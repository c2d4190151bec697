/**
 * CollectionIssues (ts/collection/issues.ts): the UNINDEXED_FIELD advisories that
 * filtered reads note. Their number is bounded: every read may name new keys.
 */

import test from 'ava';

import { CollectionIssues, MAX_ISSUES } from '../../ts/collection/issues';
import { validateFilter, type Filter } from '../../ts/shard/filter';

test('issues: one per unindexed key, counted; their number stays bounded however many keys reads name', (t) => {
  const issues = new CollectionIssues('c');
  const read = (key: string) => issues.observe(validateFilter({ must: [{ key, match: { value: 'x' } }] }) as Filter, {});
  read('a');
  read('a');
  t.is(issues.all().length, 1);
  t.is(issues.all()[0].count, 2);
  // A reader naming a new key on every request: memory must not grow with them.
  for (let i = 0; i < 20_000; i++) read(`k${i}-${'x'.repeat(200)}`);
  t.true(issues.all().length <= MAX_ISSUES, `${issues.all().length} issues kept`);
  // The ones already noted still count.
  read('a');
  t.is(issues.all().find((r) => r.id === 'UNINDEXED_FIELD/c/a')?.count, 3);
  issues.clear();
  read('b');
  t.deepEqual(issues.all().map((r) => r.id), ['UNINDEXED_FIELD/c/b']);
});
