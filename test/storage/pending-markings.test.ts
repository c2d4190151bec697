/**
 * The file of deferred Dead markings (ts/storage/pending-markings.ts): what was added is
 * there after a reopen, what was removed is not, a marking kept already is not written
 * again, and a file with an entry that is not a marking refuses to open.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as path from 'node:path';

import { PendingMarkings, markingKey } from '../../ts/storage/pending-markings';
import { scratchDirs } from '../support/scratch';

const tmp = scratchDirs('quiver-pending-markings-');
const target = (shard: number) => ({ collection: 'c', uuid: 'u1', shard });

test('markings added are there after a reopen; removed ones are not', async (t) => {
  const dir = tmp();
  const store = await PendingMarkings.open(dir);
  t.deepEqual(store.entries(), []);
  await store.add({ target: target(0), peer: '7', reason: 'a write failed', appliedAt: 12 });
  await store.add({ target: target(1), peer: '7', reason: 'a write failed', appliedAt: 12 });
  const again = await PendingMarkings.open(dir);
  t.deepEqual(again.entries().map((m) => markingKey(m.target, m.peer)).sort(), ['c/u1/0/7', 'c/u1/1/7']);
  await again.remove('c/u1/0/7');
  await again.remove('c/u1/9/9'); // not there: nothing to do
  t.deepEqual((await PendingMarkings.open(dir)).entries(), [{ target: target(1), peer: '7', reason: 'a write failed', appliedAt: 12 }]);
});

test('a marking kept already is not written again; a file with a bad entry refuses to open', async (t) => {
  const dir = tmp();
  const store = await PendingMarkings.open(dir);
  await store.add({ target: target(0), peer: '7', reason: 'first', appliedAt: 3 });
  const file = path.join(dir, 'pending_dead_markings.json');
  fs.utimesSync(file, new Date(0), new Date(0));
  await store.add({ target: target(0), peer: '7', reason: 'again', appliedAt: 4 });
  t.is(fs.statSync(file).mtimeMs, 0, 'not written again');
  await store.add({ target: target(2), peer: '7', reason: 'another', appliedAt: 5 });
  t.true(fs.statSync(file).mtimeMs > 0, 'a new marking is written');
  fs.writeFileSync(file, JSON.stringify({ markings: [{ target: { collection: 'c' }, peer: 7 }] }));
  await t.throwsAsync(PendingMarkings.open(dir), { message: /an entry is not a marking/ });
});
