/**
 * The number-heavy body reader (ts/api/rest/json-numbers.ts) against JSON.parse: for
 * every text it either gives JSON.parse's value exactly (every double to the last bit,
 * -0, key order, duplicate keys) or gives up (undefined); it never accepts text
 * JSON.parse refuses. Plus an upsert body larger than the reader's threshold through a
 * real server, read back as written.
 */

import test from 'ava';
import * as util from 'node:util';

import { readJsonNumbers } from '../../ts/api/rest/json-numbers';
import { ContractClient } from '../support/contract';
import { COLLECTION, POINTS, SCROLL } from '../support/routes';

/** Same value as JSON.parse, comparing numbers by Object.is (so -0 and 0 differ). */
function same(a: unknown, b: unknown): boolean {
  if (typeof a === 'number' || typeof b === 'number') return Object.is(a, b);
  if (Array.isArray(a)) return Array.isArray(b) && a.length === b.length && a.every((x, i) => same(x, b[i]));
  if (a !== null && typeof a === 'object') {
    if (b === null || typeof b !== 'object' || Array.isArray(b)) return false;
    if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
    const ka = Object.keys(a);
    const kb = Object.keys(b);
    return util.isDeepStrictEqual(ka, kb) && ka.every((k) => same((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
  }
  return a === b;
}

/** Checks one text: JSON.parse's value or a give-up when it parses, a give-up when it does not. */
function check(text: string): 'read' | 'gave up' {
  let expected: unknown;
  let parses = true;
  try {
    expected = JSON.parse(text);
  } catch {
    parses = false;
  }
  const got = readJsonNumbers(Buffer.from(text, 'utf8'));
  if (got === undefined) return 'gave up';
  if (!parses) throw new Error(`accepted text JSON.parse refuses: ${JSON.stringify(text)}`);
  if (!same(got, expected)) throw new Error(`differs from JSON.parse: ${JSON.stringify(text)}: ${String(got)} / ${String(expected)}`);
  return 'read';
}

test('numbers: the same doubles as JSON.parse, bit for bit', (t) => {
  const fixed = [
    '0', '-0', '0.0', '-0.0', '1', '-1', '0.1', '0.2', '0.3', '-0.00001', '123456789012345', '1234567890123456', '12345678901234567890',
    '9007199254740993', '0.1234567890123456789', '1.7976931348623157e308', '1e400', '-1e-400', '5e-324', '1E2', '1e+2', '1e-2', '0.000000000000000000000001',
    '3.4028235e38', '3.4028236e38', '123.456', '99999999999999.9', '0.9999999999999999', '1.0000000000000002', '4.35', '0.29', '1.15', '8.675309',
  ];
  for (const n of fixed) {
    t.is(check(n), 'read', n);
    t.is(check(`[${n}]`), 'read', n);
    t.is(check(`[1,${n}, ${n} ,${n}]`), 'read', n);
  }
  // Random decimals of every width, as clients write them (toFixed, toString, toPrecision).
  let x = 12345;
  const rnd = () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x1_0000_0000;
  };
  const texts: string[] = [];
  for (let i = 0; i < 20000; i++) {
    const v = (rnd() - 0.5) * 10 ** Math.floor(rnd() * 12 - 6);
    texts.push(v.toString(), v.toFixed(i % 20), v.toPrecision(1 + (i % 21)), Math.fround(v).toString());
  }
  t.is(check(`[${texts.join(',')}]`), 'read');
  for (const s of texts.slice(0, 4000)) t.is(check(s), 'read', s);
});

test('objects, strings and literals: as JSON.parse', (t) => {
  for (const text of [
    '{}', '[]', ' [ ] ', '\t{\n"a" :\r1 }\n', '{"a":1,"a":2}', '{"b":1,"a":2,"1":3}', '{"points":[{"id":1,"vector":[0.5,-1],"payload":{"s":"é ü 𝄞","t":true,"f":false,"n":null}}]}',
    '[[1,2],[3,[4,[5]]],"x",{"y":[]}]', '[1,"a",2]', '[1 , 2 ,3 ]', '[1,1e5,-2.5E-3,7]', '[1,\n2]', '[1.5,[2]]', '[3,{"a":1},4]', '[-0,0,-0.0,0.0]',
    '[0.12345678901234567,1]', '[1,null,true,false]', '[1 ]', '[1\t,2]', '["",""]', '{"":0}', 'true', 'null', '"text"',
  ]) {
    t.is(check(text), 'read', text);
  }
  // Escapes, __proto__ keys and lone invalid UTF-8 are left to JSON.parse.
  t.is(check('{"a\\n":1}'), 'gave up');
  t.is(check('{"__proto__":{"x":1}}'), 'gave up');
});

test('text JSON.parse refuses is never accepted', (t) => {
  for (const text of [
    '', ' ', '[', ']', '[1,]', '[,1]', '[1 2]', '{"a":1,}', '{"a" 1}', '{a:1}', "{'a':1}", '01', '-', '-a', '1.', '.5', '1e', '1e+', '+1', '0x10', 'NaN', 'Infinity', '-Infinity',
    '[1]x', '[1] [2]', 'tru', 'nul', 'falsey', '"abc', '"a\u0001b"', '[1,2', '{"a":[1,2}', '[1,2 3]', '[1,2,]', '[1.e3]', '[1.5.5]', '[--1]', '[1,2}', '\uFEFF[1]', '[1e5.5]', '[00]', '[-01]', '[1,-]',
  ]) {
    t.notThrows(() => check(text), JSON.stringify(text));
  }
  t.is(readJsonNumbers(Buffer.from([0x5b, 0xff, 0x5d])), undefined);
});

test('an upsert body past the reader threshold: every vector and payload read back as sent', async (t) => {
  const api = await ContractClient.start();
  t.teardown(() => api.stop());
  const params = { collection_name: 'json_numbers' };
  await api.ok(t, 'PUT', COLLECTION, { params, body: { vectors: { size: 8, distance: 'Euclid' } } });
  const points = Array.from({ length: 400 }, (_, i) => ({
    id: i,
    vector: Array.from({ length: 8 }, (_, k) => Number((Math.sin(i * 8 + k) * 3).toFixed(6))),
    payload: { i, s: `p${i}`, f: i / 7, nested: { a: [i, -i, 0.25], neg: -0 } },
  }));
  const body = { points };
  t.true(Buffer.byteLength(JSON.stringify(body)) > 16 * 1024);
  await api.ok(t, 'PUT', POINTS, { params, query: { wait: true }, body });
  const got = (await api.ok(t, 'POST', SCROLL, { params, body: { limit: 400, with_payload: true, with_vector: true } })) as {
    points: Array<{ id: number; vector: number[]; payload: Record<string, unknown> }>;
  };
  t.is(got.points.length, 400);
  for (const p of got.points) {
    const sent = points[p.id];
    t.deepEqual(p.vector, Array.from(Float32Array.from(sent.vector)));
    t.deepEqual(p.payload, JSON.parse(JSON.stringify(sent.payload)));
  }
});
