/**
 * Payload store (ts/shard/payload-store.ts): set / overwrite / delete / clear / remove
 * incl. nested and array paths, the with_payload projection, validation, the binary
 * round trip, corruption detection, and a seeded randomized run against a naive
 * JSON-clone model. Replay a failure with PAYLOAD_SEED=<seed>.
 */

import test from 'ava';

import {
  Payload,
  PayloadError,
  PayloadFormatError,
  PayloadStore,
  parsePath,
  select,
  validatePayload,
} from '../../ts/shard/payload-store';
import { mulberry32 } from '../support/rng';

function storeWith(p: Payload, offset = 1n): PayloadStore {
  const s = new PayloadStore();
  s.overwrite(offset, p);
  return s;
}

// ---------------------------------------------------------------------------------
// Operations

test('set merges top-level keys and keeps the others', (t) => {
  const s = storeWith({ a: 1, b: { c: 2 } });
  s.set(1n, { b: 3, d: [1, 2] });
  t.deepEqual(s.get(1n), { a: 1, b: 3, d: [1, 2] });
  s.set(2n, { x: 'y' });
  t.deepEqual(s.get(2n), { x: 'y' });
  t.is(s.size, 2);
});

test('set copies its input', (t) => {
  const input: Payload = { a: { b: 1 } };
  const s = new PayloadStore();
  s.set(1n, input);
  (input.a as Payload).b = 2;
  t.deepEqual(s.get(1n), { a: { b: 1 } });
});

test('set with a nested key merges into the object at the path, creating objects', (t) => {
  const s = storeWith({ a: { b: { old: 1, keep: 2 }, z: 0 }, top: 1 });
  s.set(1n, { old: 9, n: 3 }, 'a.b');
  t.deepEqual(s.get(1n), { a: { b: { old: 9, keep: 2, n: 3 }, z: 0 }, top: 1 });
  s.set(1n, { x: 1 }, 'p.q.r');
  t.deepEqual(s.get(1n).p, { q: { r: { x: 1 } } });
  s.set(1n, { y: 1 }, 'top'); // a scalar on the path is replaced by an object
  t.deepEqual(s.get(1n).top, { y: 1 });
  s.set(1n, { y: 2 }, 'nul.k');
  t.deepEqual(s.get(1n).nul, { k: { y: 2 } });
  const fresh = new PayloadStore();
  fresh.set(5n, { v: true }, 'a.b');
  t.deepEqual(fresh.get(5n), { a: { b: { v: true } } });
});

test('set with a key through arrays merges into each object element', (t) => {
  const s = storeWith({ arr: [{ k: 1 }, 7, { k: 2, m: {} }, [{ deep: 1 }]] });
  s.set(1n, { x: 1 }, 'arr[]');
  t.deepEqual(s.get(1n), { arr: [{ k: 1, x: 1 }, 7, { k: 2, m: {}, x: 1 }, [{ deep: 1, x: 1 }]] });
  s.set(1n, { y: 2 }, 'arr.m');
  t.deepEqual(s.get(1n).arr, [
    { k: 1, x: 1, m: { y: 2 } },
    7,
    { k: 2, m: { y: 2 }, x: 1 },
    [{ deep: 1, x: 1, m: { y: 2 } }],
  ]);
  // `name[]` on a non-array or missing value changes nothing
  const before = JSON.stringify(s.get(1n));
  s.set(1n, { z: 1 }, 'missing[]');
  s.set(1n, { z: 1 }, 'arr[].k[]');
  t.is(JSON.stringify(s.get(1n)), before);
});

test('overwrite replaces the whole payload', (t) => {
  const s = storeWith({ a: 1, b: 2 });
  s.overwrite(1n, { c: 3 });
  t.deepEqual(s.get(1n), { c: 3 });
});

test('deleteKeys removes top-level, nested and array paths', (t) => {
  const s = storeWith({
    a: 1,
    b: { c: 2, d: { e: 3, f: 4 } },
    arr: [{ k: 1, j: 1 }, { j: 2 }, 5, [{ k: 3 }]],
    notArr: { k: 1 },
  });
  s.deleteKeys(1n, ['a', 'b.d.e', 'missing', 'b.c.zz', 'arr[].k', 'notArr[].k']);
  t.deepEqual(s.get(1n), { b: { c: 2, d: { f: 4 } }, arr: [{ j: 1 }, { j: 2 }, 5, [{}]], notArr: { k: 1 } });
  s.deleteKeys(1n, ['arr.j']);
  t.deepEqual(s.get(1n).arr, [{}, {}, 5, [{}]]);
  s.deleteKeys(1n, ['notArr[]', 'arr[]']);
  t.deepEqual(s.get(1n), { b: { c: 2, d: { f: 4 } }, notArr: { k: 1 } });
  s.deleteKeys(1n, ['b']);
  t.deepEqual(s.get(1n), { notArr: { k: 1 } });
  s.deleteKeys(9n, ['x']); // absent point: nothing created
  t.false(s.has(9n));
});

test('clear, remove, get of a missing point, iteration', (t) => {
  const s = storeWith({ a: 1 });
  s.overwrite(2n, { b: 2 });
  s.clear(1n);
  t.true(s.has(1n));
  t.deepEqual(s.get(1n), {});
  t.true(s.remove(1n));
  t.false(s.remove(1n));
  t.false(s.has(1n));
  t.deepEqual(s.get(1n), {});
  s.clear(3n);
  t.false(s.has(3n));
  t.deepEqual([...s], [[2n, { b: 2 }]]);
  t.deepEqual([...s.entries()], [[2n, { b: 2 }]]);
  t.is(s.size, 1);
});

test('__proto__ keys are stored as own data, not prototypes', (t) => {
  const p = JSON.parse('{"__proto__": {"x": 1}, "a": 1}');
  const s = new PayloadStore();
  s.set(1n, p);
  const got = s.get(1n);
  t.true(Object.prototype.hasOwnProperty.call(got, '__proto__'));
  t.is(Object.getPrototypeOf(got), Object.prototype);
  t.is(JSON.stringify(got), '{"__proto__":{"x":1},"a":1}');
  t.is((got as Record<string, unknown>).x, undefined);
  s.set(1n, { y: 2 }, '__proto__');
  t.is(JSON.stringify(s.get(1n)), '{"__proto__":{"x":1,"y":2},"a":1}');
  t.is(({} as Record<string, unknown>).y, undefined); // Object.prototype untouched
  const back = PayloadStore.fromBytes(s.toBytes());
  t.is(JSON.stringify(back.get(1n)), JSON.stringify(got));
});

// ---------------------------------------------------------------------------------
// Projection

const DOC: Payload = {
  a: { b: 1, c: 2 },
  city: 'London',
  arr: [{ k: 1, j: 2 }, 3, { j: 4 }],
  n: null,
};

test('select true/false/null', (t) => {
  const out = select(DOC, true)!;
  t.deepEqual(out, DOC);
  t.not(out, DOC);
  t.not(out.a, DOC.a);
  t.is(select(DOC, false), null);
  t.is(select(DOC, null), null);
  t.is(select(DOC, undefined), null);
});

test('select include keeps nested structure', (t) => {
  t.deepEqual(select(DOC, ['a.b']), { a: { b: 1 } });
  t.deepEqual(select(DOC, { include: ['a.b', 'city'] }), { a: { b: 1 }, city: 'London' });
  t.deepEqual(select(DOC, ['a.b', 'a']), { a: { b: 1, c: 2 } });
  t.deepEqual(select(DOC, ['a', 'a.b']), { a: { b: 1, c: 2 } });
  t.deepEqual(select(DOC, ['a.zz', 'missing', 'city.x']), {});
  t.deepEqual(select(DOC, ['n']), { n: null });
  t.deepEqual(select(DOC, []), {});
  t.deepEqual(select(DOC, ['arr[].k']), { arr: [{ k: 1 }, {}] });
  t.deepEqual(select(DOC, ['arr.k', 'arr.j']), { arr: [{ k: 1, j: 2 }, { j: 4 }] });
  t.deepEqual(select(DOC, ['arr.k', 'arr']), { arr: [{ k: 1, j: 2 }, 3, { j: 4 }] });
  t.deepEqual(select(DOC, ['arr[]', 'a[]']), { arr: DOC.arr });
  const out = select(DOC, ['a'])!;
  t.not(out.a, DOC.a);
});

test('select exclude removes paths', (t) => {
  t.deepEqual(select(DOC, { exclude: ['a.b', 'arr[].j', 'n'] }), {
    a: { c: 2 },
    city: 'London',
    arr: [{ k: 1 }, 3, {}],
  });
  t.deepEqual(select(DOC, { exclude: [] }), DOC);
  t.deepEqual(DOC.a, { b: 1, c: 2 }); // input unchanged
  const s = storeWith(DOC, 4n);
  t.deepEqual(s.select(4n, { exclude: ['arr', 'a'] }), { city: 'London', n: null });
  t.deepEqual(s.select(5n, true), {});
});

test('select rejects malformed selectors and paths', (t) => {
  for (const bad of [{ include: 'a' }, { include: ['a'], exclude: ['b'] }, { other: [] }, 3, 'a', ['a[0]'], ['a..b'], [''], [1]]) {
    t.throws(() => select(DOC, bad as never), { instanceOf: PayloadError }, JSON.stringify(bad));
  }
});

// ---------------------------------------------------------------------------------
// Validation

test('validatePayload accepts JSON objects and rejects the rest', (t) => {
  t.notThrows(() => validatePayload({ a: [1, 'x', null, true, { b: -0.5 }], e: {} }));
  const cases: Array<[unknown, RegExp]> = [
    [null, /must be a JSON object, got null/],
    [[1], /got an array/],
    ['s', /got a string/],
    [3, /got 3/],
    [{ a: NaN }, /payload\.a is NaN: numbers must be finite/],
    [{ a: [1, Infinity] }, /payload\.a\[1\] is Infinity/],
    [{ a: { b: -Infinity } }, /payload\.a\.b/],
    [{ a: undefined }, /payload\.a is a undefined/],
    [{ a: 1n }, /bigint/],
    [{ a: () => 1 }, /function/],
    [{ a: new Date(0) }, /a Date/],
    [new Map(), /a Map/],
  ];
  for (const [v, re] of cases) {
    const e = t.throws(() => validatePayload(v), { instanceOf: PayloadError });
    t.regex(e!.message, re);
  }
  const cyc: Record<string, unknown> = {};
  cyc.self = cyc;
  t.throws(() => validatePayload(cyc), { instanceOf: PayloadError, message: /circular/ });
  // shared (non-circular) references are fine
  const shared = { x: 1 };
  t.notThrows(() => validatePayload({ a: shared, b: shared }));
});

test('a rejected operation changes nothing', (t) => {
  const s = storeWith({ a: 1 });
  t.throws(() => s.set(1n, { b: NaN }), { instanceOf: PayloadError });
  t.throws(() => s.set(1n, { b: 1 }, 'a[0]'), { instanceOf: PayloadError });
  t.throws(() => s.overwrite(1n, [] as never), { instanceOf: PayloadError });
  t.throws(() => s.deleteKeys(1n, ['a', 'b..c']), { instanceOf: PayloadError });
  t.throws(() => s.set(-1n, { b: 1 }), { instanceOf: PayloadError });
  t.throws(() => s.set(1 as never, { b: 1 }), { instanceOf: PayloadError });
  t.throws(() => s.set(2n, { b: 1 }, ''), { instanceOf: PayloadError });
  t.deepEqual(s.get(1n), { a: 1 });
  t.is(s.size, 1);
});

test('parsePath', (t) => {
  t.deepEqual(parsePath('a.b[].c'), [
    { name: 'a', array: false },
    { name: 'b', array: true },
    { name: 'c', array: false },
  ]);
  for (const bad of ['a[][]', 'a[0]', '.a', 'a.', 'a."b"x[', '[]']) {
    t.throws(() => parsePath(bad), { instanceOf: PayloadError }, bad);
  }
});

// ---------------------------------------------------------------------------------
// Bytes

function sample(): PayloadStore {
  const s = new PayloadStore();
  s.overwrite(7n, { b: 'héllo ✓', a: [1, 2.5, null, { x: true }] });
  s.overwrite(0n, {});
  s.overwrite((1n << 64n) - 1n, { big: 1e300, neg: -3 });
  s.overwrite(3n, { nested: { deep: { deeper: ['x'] } } });
  return s;
}

test('byte round trip is exact and deterministic', (t) => {
  const s = sample();
  const bytes = s.toBytes();
  const back = PayloadStore.fromBytes(bytes);
  t.is(back.size, s.size);
  for (const [o, p] of s) t.deepEqual(back.get(o), p);
  t.deepEqual(back.toBytes(), bytes);
  // insertion order of offsets does not matter
  const s2 = new PayloadStore();
  for (const o of [3n, (1n << 64n) - 1n, 0n, 7n]) s2.overwrite(o, s.get(o) as Payload);
  t.deepEqual(s2.toBytes(), bytes);
  const empty = PayloadStore.fromBytes(new PayloadStore().toBytes());
  t.is(empty.size, 0);
  // a subarray view with a non-zero byteOffset
  const padded = new Uint8Array(bytes.length + 5);
  padded.set(bytes, 3);
  t.is(PayloadStore.fromBytes(padded.subarray(3, 3 + bytes.length)).size, 4);
});

test('corrupt input is rejected: every byte flip and every truncation', (t) => {
  const bytes = sample().toBytes();
  for (let i = 0; i < bytes.length; i++) {
    for (const mask of [0x01, 0x80]) {
      const b = bytes.slice();
      b[i] ^= mask;
      t.throws(() => PayloadStore.fromBytes(b), { instanceOf: PayloadFormatError }, `flip at ${i}`);
    }
  }
  for (let n = 0; n < bytes.length; n++) {
    t.throws(() => PayloadStore.fromBytes(bytes.subarray(0, n)), { instanceOf: PayloadFormatError }, `length ${n}`);
  }
  const longer = new Uint8Array(bytes.length + 1);
  longer.set(bytes);
  t.throws(() => PayloadStore.fromBytes(longer), { instanceOf: PayloadFormatError });
  t.throws(() => PayloadStore.fromBytes('x' as never), { instanceOf: PayloadFormatError });
});

test('structurally bad data with a valid checksum is rejected', async (t) => {
  const { crc32c } = await import('../../ts/common/crc32c');
  const enc = new TextEncoder();
  const build = (entries: Array<[bigint, string]>, version = 1, countDelta = 0n): Uint8Array => {
    const bodies = entries.map(([, j]) => enc.encode(j));
    let len = 20;
    for (const b of bodies) len += 12 + b.length;
    const out = new Uint8Array(len);
    const v = new DataView(out.buffer);
    out.set([0x51, 0x50, 0x4c, 0x44]);
    v.setUint16(4, version, true);
    v.setBigUint64(8, BigInt(entries.length) + countDelta, true);
    let p = 16;
    entries.forEach(([o], i) => {
      v.setBigUint64(p, o, true);
      v.setUint32(p + 8, bodies[i].length, true);
      out.set(bodies[i], p + 12);
      p += 12 + bodies[i].length;
    });
    v.setUint32(p, crc32c(out, 0, p), true);
    return out;
  };
  t.is(PayloadStore.fromBytes(build([[1n, '{"a":1}'], [2n, '{}']])).size, 2);
  const bad: Array<[Uint8Array, RegExp]> = [
    [build([[2n, '{}'], [1n, '{}']]), /not above/],
    [build([[1n, '{}'], [1n, '{}']]), /not above/],
    [build([[1n, '[1]']]), /must be a JSON object/],
    [build([[1n, '{"a":']]), /entry 0/],
    [build([[1n, '{}']], 2), /format version 2/],
    [build([[1n, '{}']], 1, 1n), /entry|fit/],
    [build([[1n, '{}'], [2n, '{}']], 1, -1n), /unexpected bytes/],
    [build([[1n, '{"a":1e999}']]), /finite/],
  ];
  for (const [b, re] of bad) {
    const e = t.throws(() => PayloadStore.fromBytes(b), { instanceOf: PayloadFormatError });
    t.regex(e!.message, re);
  }
});

// ---------------------------------------------------------------------------------
// Randomized comparison with a naive model

type J = any; // eslint-disable-line @typescript-eslint/no-explicit-any


const deep = (v: J): J => JSON.parse(JSON.stringify(v));
const isObj = (v: J): boolean => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Naive model: each operation rebuilds the payload from a JSON deep copy. */
class Model {
  m = new Map<string, J>();

  static forEachObj(v: J, f: (o: J) => void): void {
    if (Array.isArray(v)) v.forEach((e) => Model.forEachObj(e, f));
    else if (isObj(v)) f(v);
  }

  static setPath(o: J, path: string[], payload: J): void {
    const [head, ...rest] = path;
    const arr = head.endsWith('[]');
    const name = arr ? head.slice(0, -2) : head;
    if (arr && !Array.isArray(o[name])) return;
    if (!arr && !isObj(o[name]) && !Array.isArray(o[name])) o[name] = {};
    Model.forEachObj(o[name], (c) => {
      if (rest.length === 0) Object.assign(c, deep(payload));
      else Model.setPath(c, rest, payload);
    });
  }

  static delPath(o: J, path: string[]): void {
    const [head, ...rest] = path;
    const arr = head.endsWith('[]');
    const name = arr ? head.slice(0, -2) : head;
    if (!(name in o)) return;
    if (arr && !Array.isArray(o[name])) return;
    if (rest.length === 0) delete o[name];
    else Model.forEachObj(o[name], (c) => Model.delPath(c, rest));
  }

  set(k: bigint, payload: J, key?: string): void {
    const cur = deep(this.m.get(String(k)) ?? {});
    if (key === undefined) Object.assign(cur, deep(payload));
    else Model.setPath(cur, key.split('.'), payload);
    this.m.set(String(k), cur);
  }
  overwrite(k: bigint, p: J): void {
    this.m.set(String(k), deep(p));
  }
  del(k: bigint, keys: string[]): void {
    if (!this.m.has(String(k))) return;
    const cur = deep(this.m.get(String(k)));
    for (const key of keys) Model.delPath(cur, key.split('.'));
    this.m.set(String(k), cur);
  }
  clear(k: bigint): void {
    if (this.m.has(String(k))) this.m.set(String(k), {});
  }
  remove(k: bigint): void {
    this.m.delete(String(k));
  }
}

test('seeded random operations match the naive model', (t) => {
  const seed = Number(process.env.PAYLOAD_SEED ?? 20261122);
  const rnd = mulberry32(seed);
  const pick = <T>(xs: T[]): T => xs[Math.floor(rnd() * xs.length)];
  const names = ['a', 'b', 'm', 'arr', 'k', 'x'];
  const value = (depth: number): J => {
    const r = rnd();
    if (depth > 2 || r < 0.35) return pick([1, -2.5, 'txt', true, null, 0]);
    if (r < 0.7) {
      const o: J = {};
      const n = Math.floor(rnd() * 3);
      for (let i = 0; i < n; i++) o[pick(names)] = value(depth + 1);
      return o;
    }
    return Array.from({ length: Math.floor(rnd() * 3) }, () => value(depth + 1));
  };
  const payload = (): J => {
    const o: J = {};
    const n = Math.floor(rnd() * 4);
    for (let i = 0; i < n; i++) o[pick(names)] = value(0);
    return o;
  };
  const paths = ['a', 'm', 'm.k', 'm.k.x', 'arr', 'arr[]', 'arr.k', 'arr[].k', 'm.arr[].x', 'b[]', 'x.a.b'];
  const store = new PayloadStore();
  const model = new Model();
  const offsets = [0n, 1n, 2n, 3n, 4n, 5n, (1n << 64n) - 1n];
  for (let step = 0; step < 5000; step++) {
    const o = pick(offsets);
    const r = rnd();
    if (r < 0.3) {
      const p = payload();
      store.set(o, p);
      model.set(o, p);
    } else if (r < 0.5) {
      const p = payload();
      const key = pick(paths);
      store.set(o, p, key);
      model.set(o, p, key);
    } else if (r < 0.65) {
      const p = payload();
      store.overwrite(o, p);
      model.overwrite(o, p);
    } else if (r < 0.85) {
      const keys = [pick(paths), pick(paths)];
      store.deleteKeys(o, keys);
      model.del(o, keys);
    } else if (r < 0.93) {
      store.clear(o);
      model.clear(o);
    } else {
      store.remove(o);
      model.remove(o);
    }
    // compare this point, and its projections
    const exp = model.m.get(String(o));
    t.is(store.has(o), exp !== undefined, `seed ${seed} step ${step}`);
    const got = store.get(o) as Payload;
    if (JSON.stringify(got) !== JSON.stringify(exp ?? {})) {
      t.fail(`seed ${seed} step ${step}: ${JSON.stringify(got)} != ${JSON.stringify(exp)}`);
      return;
    }
    const ex = [pick(paths), pick(paths)];
    const exModel = deep(exp ?? {});
    for (const key of ex) Model.delPath(exModel, key.split('.'));
    t.is(JSON.stringify(select(got, { exclude: ex })), JSON.stringify(exModel));
    const top = [pick(names), pick(names)];
    const inc: J = {};
    for (const k of Object.keys(got)) if (top.includes(k)) inc[k] = got[k];
    t.deepEqual(select(got, top), inc);
    // include of a path, then exclude of everything else it kept, is consistent with get
    const ip = pick(paths);
    const projected = select(got, [ip])!;
    t.deepEqual(select(projected, [ip]), projected);
    if (step % 500 === 0) {
      const back = PayloadStore.fromBytes(store.toBytes());
      t.is(back.size, store.size);
      for (const [k, v] of store) t.is(JSON.stringify(back.get(k)), JSON.stringify(v));
    }
  }
  t.is(store.size, model.m.size);
});

test('toBytes writes entries in offset order even when the map is not (a payload removed and set again), in pieces as large as asked', (t) => {
  const s = new PayloadStore();
  for (let i = 1n; i <= 5n; i++) s.set(i, { i: Number(i) });
  s.remove(2n);
  s.set(2n, { i: 2, again: true });
  const bytes = s.toBytes();
  // The same bytes however the pieces are cut.
  const pieces = [...s.toChunks(16)];
  t.true(pieces.length > 3);
  t.deepEqual(Buffer.concat(pieces), Buffer.from(bytes));
  const back = PayloadStore.fromBytes(bytes);
  t.deepEqual([...back.entries()].map(([o]) => o), [1n, 2n, 3n, 4n, 5n]);
  t.deepEqual(back.get(2n), { i: 2, again: true });
});
