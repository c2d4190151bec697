/**
 * OffsetTable (ts/shard/offset-table.ts): answers exactly as a Map<number, V> would,
 * dense (an array) and after it turns into a Map. A seeded randomized run against a
 * Map model; replay a failure with OFFSETTABLE_SEED=<seed>.
 */

import test from 'ava';

import { OffsetTable } from '../../ts/shard/offset-table';
import { mulberry32 } from '../support/rng';

function same(t: import('ava').ExecutionContext, table: OffsetTable<string>, model: Map<number, string>, what: string): void {
  t.is(table.size, model.size, `${what}: size`);
  const byKey = (a: [number, string], b: [number, string]) => a[0] - b[0];
  t.deepEqual([...table.entries()].sort(byKey), [...model.entries()].sort(byKey), `${what}: entries`);
  t.deepEqual([...table.keys()].sort((a, b) => a - b), [...model.keys()].sort((a, b) => a - b), `${what}: keys`);
  t.deepEqual([...table.values()].sort(), [...model.values()].sort(), `${what}: values`);
}

test('dense: set, get, has, delete, size; iteration in ascending order', (t) => {
  const table = new OffsetTable<string>();
  t.is(table.size, 0);
  t.is(table.get(0), undefined);
  table.set(3, 'c').set(0, 'a').set(10, 'j').set(3, 'C');
  t.is(table.size, 3);
  t.is(table.get(3), 'C');
  t.false(table.has(4));
  t.false(table.has(1e9));
  t.deepEqual([...table.entries()], [
    [0, 'a'],
    [3, 'C'],
    [10, 'j'],
  ]);
  t.true(table.delete(0));
  t.false(table.delete(0));
  t.false(table.delete(1e9));
  t.deepEqual([...table.keys()], [3, 10]);
  t.deepEqual([...table.values()], ['C', 'j']);
});

test('a key far past the others turns the table into a Map, which keeps every entry', (t) => {
  const table = new OffsetTable<string>();
  const model = new Map<number, string>();
  for (let i = 0; i < 1000; i += 2) {
    table.set(i, `v${i}`);
    model.set(i, `v${i}`);
  }
  table.set(2 ** 40, 'far');
  model.set(2 ** 40, 'far');
  same(t, table, model, 'after the far key');
  table.delete(4);
  model.delete(4);
  table.set(5, 'five');
  model.set(5, 'five');
  same(t, table, model, 'after more changes');
});

test('randomized: 100k operations against a Map model', (t) => {
  const seed = process.env.OFFSETTABLE_SEED ? Number(process.env.OFFSETTABLE_SEED) : 0x0ff5e7;
  const rnd = mulberry32(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  // Two tables: one whose keys stay dense, one that ends sparse.
  for (const ranges of [
    [100, 10_000, 50_000],
    [1000, 2_000_000, 2 ** 52],
  ]) {
    const table = new OffsetTable<string>();
    const model = new Map<number, string>();
    for (let op = 0; op < 50_000; op++) {
      const k = int(ranges[Math.min(2, Math.floor(op / 17_000))]);
      switch (int(4)) {
        case 0:
        case 1: {
          const v = `v${op}`;
          table.set(k, v);
          model.set(k, v);
          break;
        }
        case 2:
          if (table.delete(k) !== model.delete(k)) return t.fail(`seed ${seed} op ${op}: delete(${k})`);
          break;
        default:
          if (table.get(k) !== model.get(k) || table.has(k) !== model.has(k)) return t.fail(`seed ${seed} op ${op}: get(${k})`);
      }
      if (table.size !== model.size) return t.fail(`seed ${seed} op ${op}: size ${table.size}, model ${model.size}`);
    }
    same(t, table, model, `seed ${seed}, ranges ${ranges.join('/')}`);
  }
});
