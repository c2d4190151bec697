/**
 * LabelSet (ts/shard/label-set.ts): answers exactly as a Set<bigint> would, in its
 * dense form, its sparse form and across the switches between them. A seeded
 * randomized run against a Set model; replay a failure with LABELSET_SEED=<seed>.
 */

import test from 'ava';

import { LabelSet } from '../../ts/shard/label-set';
import { mulberry32 } from '../support/rng';

const sorted = (it: Iterable<bigint>) => [...it].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

function same(t: import('ava').ExecutionContext, s: LabelSet, model: Set<bigint>, what: string): void {
  t.is(s.size, model.size, `${what}: size`);
  t.deepEqual(sorted(s), sorted(model), `${what}: members`);
}

test('dense labels: add, has, delete, size, iteration in ascending order', (t) => {
  const s = new LabelSet();
  t.is(s.size, 0);
  t.false(s.has(0n));
  for (const l of [5n, 0n, 3n, 5n, 1000n]) s.add(l);
  t.is(s.size, 4);
  t.deepEqual([...s], [0n, 3n, 5n, 1000n]);
  t.true(s.has(1000n));
  t.false(s.has(1001n));
  t.false(s.has(4n));
  t.true(s.delete(3n));
  t.false(s.delete(3n));
  t.false(s.delete(1n << 40n));
  t.deepEqual([...s], [0n, 5n, 1000n]);
  s.clear();
  t.is(s.size, 0);
  t.deepEqual([...s], []);
});

test('sparse labels, labels from 2^53 on, and a copy that does not share state', (t) => {
  const s = new LabelSet([1n << 40n, 7n, (1n << 64n) - 1n, 1n << 53n, (1n << 53n) - 1n]);
  t.is(s.size, 5);
  t.true(s.has((1n << 64n) - 1n));
  t.true(s.has(1n << 53n));
  t.true(s.has((1n << 53n) - 1n));
  t.false(s.has((1n << 53n) + 1n));
  t.deepEqual(sorted(s), [7n, (1n << 53n) - 1n, 1n << 53n, 1n << 40n, (1n << 64n) - 1n].sort((a, b) => (a < b ? -1 : 1)));
  const c = new LabelSet(s);
  c.delete(7n);
  c.add(8n);
  t.true(s.has(7n));
  t.false(s.has(8n));
  t.true(c.has(8n) && !c.has(7n) && c.size === 5);
  const d = new LabelSet([3n, 9n]);
  const e = new LabelSet(d);
  e.add(4n);
  t.false(d.has(4n));
  t.is(d.size, 2);
});

test('labels added in no particular order turn the set sparse, then dense again, always answering as a Set', (t) => {
  // A graph's labels come in slot order: a high label first makes the set sparse; once
  // enough arrive it is dense again. Every step is checked against the model.
  const s = new LabelSet();
  const model = new Set<bigint>();
  const n = 200_000;
  for (let i = n - 1; i >= 0; i -= 3) {
    s.add(BigInt(i));
    model.add(BigInt(i));
  }
  same(t, s, model, 'descending adds');
  for (let i = 0; i < n; i += 7) {
    t.is(s.delete(BigInt(i)), model.delete(BigInt(i)));
  }
  same(t, s, model, 'after deletes');
});

test('randomized: 100k operations against a Set<bigint> model', (t) => {
  const seed = process.env.LABELSET_SEED ? Number(process.env.LABELSET_SEED) : 0x1abe1;
  const rnd = mulberry32(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  const s = new LabelSet();
  const model = new Set<bigint>();
  // Phases with different label ranges drive the set between its forms: dense, growing,
  // sparse, and at the end with labels from 2^53 on.
  const ranges = [1000, 100_000, 5_000_000, 2000, 1e12];
  for (let op = 0; op < 100_000; op++) {
    const phase = Math.floor(op / 20_000);
    const l = phase === 4 && int(50) === 0 ? (1n << 60n) + BigInt(int(100)) : BigInt(int(ranges[phase]));
    switch (int(4)) {
      case 0:
      case 1:
        s.add(l);
        model.add(l);
        break;
      case 2:
        if (s.delete(l) !== model.delete(l)) return t.fail(`seed ${seed} op ${op}: delete(${l})`);
        break;
      default:
        if (s.has(l) !== model.has(l)) return t.fail(`seed ${seed} op ${op}: has(${l})`);
    }
    if (s.size !== model.size) return t.fail(`seed ${seed} op ${op}: size ${s.size}, model ${model.size}`);
    if (op % 20_000 === 19_999) same(t, s, model, `seed ${seed} after op ${op}`);
  }
  same(t, s, model, `seed ${seed} at the end`);
});
