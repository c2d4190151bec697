/**
 * The number-heavy body reader (ts/api/rest/json-numbers.ts) against JSON.parse: for
 * every text it either gives JSON.parse's value exactly (every double to the last bit,
 * -0, key order, duplicate keys) or gives up (undefined); it never accepts text
 * JSON.parse refuses. Plus an upsert body larger than the reader's threshold through a
 * real server, read back as written.
 */

import test from 'ava';
import * as util from 'node:util';

import { parseJsonBody } from '../../ts/api/rest/body';
import { readJsonNumbers, type VectorPlaces } from '../../ts/api/rest/json-numbers';
import { FormatError } from '../../ts/common/errors';
import { ContractClient } from '../support/contract';
import { COLLECTION, COUNT, POINTS, QUERY, QUERY_BATCH, SCROLL, SEARCH, SEARCH_BATCH, VECTORS } from '../support/routes';

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
  // In arrays of 200 (past 256 numbers that need Number(), the reader leaves the body to JSON.parse).
  for (let i = 0; i < texts.length; i += 200) t.is(check(`[${texts.slice(i, i + 200).join(',')}]`), 'read');
  for (const s of texts.slice(0, 4000)) t.is(check(s), 'read', s);
});

test('numbers: a body with many numbers that need Number() (17 digits, exponents) is left to JSON.parse', (t) => {
  const long: string[] = [];
  for (let i = 1; long.length < 300; i++) {
    const s = String(Math.fround(Math.sin(i)));
    if (s.replace(/^-?0\./, '').length > 15) long.push(s);
  }
  t.is(check(`[${long.slice(0, 256).join(',')}]`), 'read');
  t.is(check(`[${long.join(',')}]`), 'gave up');
  t.is(check(`{"a":[${long.slice(0, 200).join(',')}],"b":[${Array.from({ length: 100 }, (_, i) => `${i}e-3`).join(',')}]}`), 'gave up');
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
  // so does every \u escape: a lone surrogate (body.ts refuses it after JSON.parse) never passes through the reader
  for (const text of ['["a\\ud800b"]', '{"k\\uDC00":1}', '["\\ud83d\\ude00"]', '["\\u00e9"]']) t.is(check(text), 'gave up', text);
});

test('a body past the reader threshold with a lone surrogate escape is refused (400 Format error), its pair is read', (t) => {
  const vectors = Array.from({ length: 600 }, (_, i) => `{"id":${i},"vector":[0.5,0.25,0.125,1]}`).join(',');
  const body = (s: string) => Buffer.from(`{"points":[${vectors},{"id":999,"vector":[1,0,0,0],"payload":{"s":"${s}"}}]}`, 'utf8');
  t.true(body('x').length >= 16 * 1024, 'past the threshold');
  const err = t.throws(() => parseJsonBody(body('a\\ud800b')), { instanceOf: FormatError });
  t.regex(err!.message, /lone surrogate/);
  const ok = parseJsonBody(body('\\ud83d\\ude00')) as { points: Array<{ payload?: { s: string } }> };
  t.is(ok.points[600].payload!.s, '\u{1F600}');
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

// -- float32 vectors of point writes ------------------------------------------------------

/** The bits of a float32 array, so -0 and 0 (and every value) are compared exactly. */
function bits(v: Float32Array): number[] {
  return Array.from(new Uint32Array(v.buffer, v.byteOffset, v.length));
}

/**
 * Reads `text` in float32 mode and compares with JSON.parse: every Float32Array the
 * reader gives must be where JSON.parse has an array of numbers, holding Math.fround of
 * each (bit for bit); everything else must be JSON.parse's value. Returns how many
 * vectors came as Float32Arrays (-1: gave up).
 */
function checkF32(text: string, maxDepth = 127, places: VectorPlaces = 'point-writes'): number {
  const expected = JSON.parse(text) as unknown;
  const got = readJsonNumbers(Buffer.from(text, 'utf8'), places, maxDepth);
  if (got === undefined) return -1;
  let typed = 0;
  const walk = (g: unknown, e: unknown, at: string): void => {
    if (g instanceof Float32Array) {
      if (!Array.isArray(e) || !e.every((x) => typeof x === 'number')) throw new Error(`${at}: a Float32Array where JSON.parse has ${JSON.stringify(e)}`);
      const want = bits(Float32Array.from(e as number[]));
      if (!util.isDeepStrictEqual(bits(g), want)) throw new Error(`${at}: float32 values differ from Math.fround of JSON.parse's: ${JSON.stringify(e)}`);
      typed++;
      return;
    }
    if (Array.isArray(g)) {
      if (!Array.isArray(e) || g.length !== e.length) throw new Error(`${at}: differs from JSON.parse`);
      g.forEach((x, i) => walk(x, e[i], `${at}[${i}]`));
      return;
    }
    if (g !== null && typeof g === 'object') {
      if (e === null || typeof e !== 'object' || Array.isArray(e) || !util.isDeepStrictEqual(Object.keys(g), Object.keys(e))) throw new Error(`${at}: differs from JSON.parse`);
      for (const k of Object.keys(g)) walk((g as Record<string, unknown>)[k], (e as Record<string, unknown>)[k], `${at}.${k}`);
      return;
    }
    if (!Object.is(g, e)) throw new Error(`${at}: ${String(g)} differs from JSON.parse's ${String(e)}`);
  };
  walk(got, expected, '$');
  return typed;
}

function xorshift(seed: number): () => number {
  let x = seed;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x1_0000_0000;
  };
}

test('float32 vectors: Math.fround of JSON.parse, bit for bit, for decimals of every width', (t) => {
  const rnd = xorshift(777);
  const f = new Float32Array(1);
  // What clients send: float32 values as JSON.stringify writes them (up to 17 digits), fixed and precision forms, doubles.
  const forms: Array<(v: number, i: number) => string> = [
    (v) => {
      f[0] = v;
      return JSON.stringify(f[0]);
    },
    (v, i) => v.toFixed(i % 21),
    (v, i) => v.toPrecision(1 + (i % 21)),
    (v) => String(v),
  ];
  // One value per vector (a vector with an exponent form or more than 19 digits falls back to numbers as a whole).
  const rows: string[] = [];
  for (const form of forms) {
    for (let i = 0; i < 15000; i++) rows.push(`{"id":${rows.length},"vector":[${form((rnd() - 0.5) * 10 ** Math.floor(rnd() * 16 - 8), i)}]}`);
  }
  // In bodies of 200 vectors (past 256 numbers that need Number(), the reader leaves a body to JSON.parse).
  let typed = 0;
  for (let i = 0; i < rows.length; i += 200) typed += Math.max(0, checkF32(`{"points":[${rows.slice(i, i + 200).join(',')}]}`));
  t.true(typed > rows.length / 2, `${typed} of ${rows.length}`);
  // Float32 values written by JSON.stringify in the range vectors live in: all read as float32.
  const plain = Array.from({ length: 200 }, () => `{"id":1,"vector":[${Array.from({ length: 64 }, () => JSON.stringify(Math.fround((rnd() - 0.5) * 2))).join(',')}]}`);
  t.true(checkF32(`{"points":[${plain.join(',')}]}`) >= 199);
});

test('float32 vectors: decimals at and next to float32 halfway points round as the double does', (t) => {
  const rnd = xorshift(4242);
  const pair = new Float32Array(2);
  const words = new Uint32Array(pair.buffer);
  const texts: string[] = [];
  for (let i = 0; i < 20000; i++) {
    // A random normal float32 and the next one up; their midpoint is exact as a double.
    words[0] = (((rnd() * 0xfe) | 0) + 1) * 0x80_0000 + ((rnd() * 0x80_0000) | 0);
    if (words[0] >= 0x7f7f_ffff) continue;
    words[1] = words[0] + 1;
    const mid = (pair[0] + pair[1]) / 2;
    const ulp = pair[1] - pair[0];
    for (const d of [0, 1e-9, -1e-9, 1e-7, -1e-7]) {
      const x = mid + d * ulp;
      texts.push(String(x), x.toPrecision(17), x.toPrecision(18), x.toPrecision(19), x.toPrecision(16), String(-x));
    }
  }
  let typed = 0;
  let total = 0;
  for (let i = 0; i < texts.length; i += 200) {
    const chunk = texts.slice(i, i + 200).filter((s) => !s.includes('e'));
    if (chunk.length === 0) continue;
    total++;
    // One vector per value, so a declined value leaves the others typed.
    typed += Math.max(0, checkF32(`{"points":[${chunk.map((s, k) => `{"id":${k},"vector":[${s}]}`).join(',')}]}`));
  }
  t.true(total > 10);
  t.true(typed > 0);
});

test('float32 vectors: named vectors, the batch form, and the shapes that are read as numbers', (t) => {
  // 3.0000002384185791: a float32 written with 17 digits; 3.00000011920928955 (halfway between two floats) would be declined.
  const v = '[0.1,-0.25,3.0000002384185791,0,-0]';
  t.is(checkF32(`{"points":[{"id":1,"vector":${v}},{"id":2,"vector":{"a":${v},"b":${v},"s":{"indices":[1],"values":[0.5]}}}]}`), 3);
  t.is(checkF32(`{"batch":{"ids":[1,2],"vectors":[${v},${v}],"payloads":[{"a":[1.5]},null]}}`), 2);
  t.is(checkF32(`{"batch":{"ids":[1],"vectors":{"a":[${v}],"b":[[1,2]]}}}`), 2);
  // Declined: whitespace, exponents, out of float32's range, non-numbers, multivectors, empty; JSON.parse's numbers instead.
  for (const odd of ['[1, 2]', '[1e3,2]', '[1,2E-3]', '[1e39]', '[-3.5e38]', '[340282356779733661637539395458142568448]', '[1,"a"]', '[[1,2],[3,4]]', '[]', '[1,null]', '[ 1]', '[1 ]', '[0.5,1.5e-45]', '[3.00000011920928955]', '[0.12345678901234567890]']) {
    t.is(checkF32(`{"points":[{"id":1,"vector":${odd}}]}`), 0, odd);
  }
  // Characters next to the digits in the byte order (':' to '?', '/') end a run of digits: not JSON, so never accepted.
  for (const odd of ['0.1234567:9', '0.12345;789', '0.1234567?12345', '0.12/456789', '0.12345678901234>6', '0.1234567@']) {
    t.is(readJsonNumbers(Buffer.from(`{"points":[{"id":1,"vector":[0.5,${odd}]}]}`), 'point-writes', 127), undefined, odd);
  }
  // Runs of digits of every length around the eight-at-a-time steps.
  for (let k = 1; k <= 22; k++) {
    const typed = checkF32(`{"points":[{"id":1,"vector":[0.${'7'.repeat(k)},-0.${'0'.repeat(k % 5)}${'3'.repeat(k)},1${'9'.repeat(k % 12)}.5]}]}`);
    // Exact below 16 digits; beyond 19 digits (or 22 after the point) declined.
    t.is(typed, k <= 15 ? 1 : k >= 20 ? 0 : typed, String(k));
  }
  // Numbers anywhere else stay doubles: payloads, ids, filters, other keys.
  t.is(checkF32('{"points":[{"id":1,"vector":[0.5],"payload":{"v":[0.1,0.2],"x":0.30000000000000004}}],"vector":[0.1],"update_filter":{"must":[{"key":"a","range":{"gt":0.1}}]}}'), 1);
  t.is(checkF32('{"vector":[0.1],"points":[1,2,3]}'), 0);
  t.is(checkF32('[{"points":[{"vector":[0.1]}]}]'), 0);
  // Payloads under the vector key are not vectors.
  t.is(checkF32('{"points":[{"id":1,"payload":{"vector":[0.1]},"vector":[0.5]}]}'), 1);
  // Without float32 mode, the same body has no Float32Array.
  const plain = readJsonNumbers(Buffer.from(`{"points":[{"id":1,"vector":${v}}]}`)) as { points: Array<{ vector: unknown }> };
  t.true(Array.isArray(plain.points[0].vector));
});

test('float32 query vectors: the query, nearest and search vectors of query and search bodies and their batches; nothing else', (t) => {
  const q = (text: string) => checkF32(text, 127, 'queries');
  const v = '[0.1,-0.25,3.0000002384185791,0,-0,0.12345678901234568]';
  t.is(q(`{"query":${v},"limit":10,"params":{"hnsw_ef":64}}`), 1);
  t.is(q(`{"query":{"nearest":${v}},"using":"a"}`), 1);
  t.is(q(`{"query":{"nearest":${v},"mmr":{"diversity":0.5}}}`), 1);
  t.is(q(`{"vector":${v},"limit":3}`), 1);
  t.is(q(`{"vector":{"name":"a","vector":${v}},"limit":3}`), 1);
  t.is(q(`{"searches":[{"query":${v}},{"query":{"nearest":${v}}},{"query":7},{"query":{"recommend":{"positive":[${v}]}}}]}`), 2);
  t.is(q(`{"searches":[{"vector":${v}},{"vector":{"name":"b","vector":${v}}},{"vector":{"name":"s","vector":{"indices":[1],"values":[0.5]}}}]}`), 2);
  // Read as JSON.parse reads them: ids, sparse and multivector queries, recommend and
  // discover examples, prefetches, filters, thresholds, the forms the float32 path declines.
  for (const body of [
    '{"query":42}',
    '{"query":"5b1c8a3e-0000-4000-8000-000000000000"}',
    '{"query":{"indices":[1,2],"values":[0.5,0.25]},"using":"s"}',
    `{"query":[${v},${v}]}`,
    `{"query":{"recommend":{"positive":[${v}],"negative":[1]}}}`,
    `{"query":{"discover":{"target":${v},"context":[{"positive":${v},"negative":${v}}]}}}`,
    `{"prefetch":{"query":${v},"limit":5},"query":{"fusion":"rrf"}}`,
    '{"query":[1, 2]}',
    '{"query":[1e3,2]}',
    '{"query":[1e39]}',
    '{"query":[1,"a"]}',
    '{"query":[]}',
    '{"vector":{"name":"a","vector":[1,null]}}',
    `{"filter":{"must":[{"key":"a","range":{"gt":0.1}}]},"score_threshold":0.30000000000000004,"query":null}`,
  ]) {
    t.is(q(body), 0, body);
  }
  // Not an object at the top: as JSON.parse.
  t.is(q(`[${v}]`), 0);
});

test('float32 vectors: arenas are shared but every vector is its own view; the depth limit makes the reader give up', (t) => {
  const rows = Array.from({ length: 3000 }, (_, i) => `{"id":${i},"vector":[${Array.from({ length: 200 }, (_, k) => ((i * 7 + k) % 13) / 8 - 0.75).join(',')}]}`);
  const got = readJsonNumbers(Buffer.from(`{"points":[${rows.join(',')}]}`), 'point-writes', 127) as { points: Array<{ vector: Float32Array }> };
  t.is(got.points.length, 3000);
  for (let i = 0; i < 3000; i += 97) {
    const v = got.points[i].vector;
    t.true(v instanceof Float32Array);
    t.is(v.length, 200);
    t.is(v[1], Math.fround(((i * 7 + 1) % 13) / 8 - 0.75));
  }
  // Writing one vector leaves its neighbours alone.
  got.points[5].vector.fill(9);
  t.is(got.points[4].vector[199], Math.fround(((4 * 7 + 199) % 13) / 8 - 0.75));
  t.is(got.points[6].vector[0], Math.fround((6 * 7) % 13 / 8 - 0.75));
  // A vector declined where it crosses into a new arena (1 MiB = 262,144 floats: row 1310 spans 262,000..262,200): read as numbers, the rest as float32.
  const text = `{"points":[${rows.map((r, i) => (i === 1310 ? r.replace(/\]\}$/, ',1e-3]}') : r)).join(',')}]}`;
  const typed = checkF32(text);
  t.is(typed, 2999);
  const again = readJsonNumbers(Buffer.from(text), 'point-writes', 127) as { points: Array<{ vector: Float32Array | number[] }> };
  t.true(Array.isArray(again.points[1310].vector));
  t.is(again.points[1310].vector.length, 201);
  t.true(again.points[1311].vector instanceof Float32Array);
  // Depth: top object, points array, point object, vector array: 4 levels.
  const body = Buffer.from('{"points":[{"id":1,"vector":[0.5]}]}');
  t.truthy(readJsonNumbers(body, 'point-writes', 4));
  t.is(readJsonNumbers(body, 'point-writes', 3), undefined);
  t.is(readJsonNumbers(Buffer.from('[[[[1]]]]'), 'none', 3), undefined);
  t.truthy(readJsonNumbers(Buffer.from('[[[[1]]]]'), 'none', 4));
});

test('an upsert of full-precision float32 values (named, batch form, vector update) past the reader threshold, read back as sent; a value beyond float32 is refused as before', async (t) => {
  const api = await ContractClient.start();
  t.teardown(() => api.stop());
  const params = { collection_name: 'json_numbers_f32' };
  await api.ok(t, 'PUT', COLLECTION, { params, body: { vectors: { a: { size: 16, distance: 'Euclid' }, b: { size: 16, distance: 'Dot' } } } });
  const rnd = xorshift(99);
  const vec = () => Array.from(Float32Array.from({ length: 16 }, () => (rnd() - 0.5) * 4));
  const points = Array.from({ length: 300 }, (_, i) => ({ id: i, vector: { a: vec(), b: vec() }, payload: { i, w: [rnd(), rnd()] } }));
  t.true(Buffer.byteLength(JSON.stringify({ points })) > 16 * 1024);
  await api.ok(t, 'PUT', POINTS, { params, query: { wait: true }, body: { points } });
  const more = { ids: Array.from({ length: 300 }, (_, i) => 1000 + i), vectors: { a: points.map(vec), b: points.map(vec) } };
  await api.ok(t, 'PUT', POINTS, { params, query: { wait: true }, body: { batch: more } });
  const updated = points.slice(0, 200).map((p) => ({ id: p.id, vector: { b: vec() } }));
  await api.ok(t, 'PUT', VECTORS, { params, query: { wait: true }, body: { points: updated } });
  const got = (await api.ok(t, 'POST', SCROLL, { params, body: { limit: 1000, with_payload: true, with_vector: true } })) as {
    points: Array<{ id: number; vector: { a: number[]; b: number[] }; payload: Record<string, unknown> | null }>;
  };
  t.is(got.points.length, 600);
  for (const p of got.points) {
    if (p.id >= 1000) {
      t.deepEqual(p.vector.a, more.vectors.a[p.id - 1000]);
      t.deepEqual(p.vector.b, more.vectors.b[p.id - 1000]);
      continue;
    }
    t.deepEqual(p.vector.a, points[p.id].vector.a);
    t.deepEqual(p.vector.b, p.id < 200 ? updated[p.id].vector.b : points[p.id].vector.b);
    t.deepEqual(p.payload, points[p.id].payload);
  }
  // A value beyond float32's range: the same 400 as through JSON.parse, and nothing written.
  const bad = points.map((p, i) => ({ id: 5000 + i, vector: { a: i === 7 ? [...p.vector.a.slice(0, 15), 1e39] : p.vector.a, b: p.vector.b } }));
  await api.error(t, 400, 'PUT', POINTS, { params, query: { wait: true }, body: { points: bad } }, /points\[7\]\.vector\.a\[15\]: 1e\+39 is not a finite 32-bit float/);
  const count = (await api.ok(t, 'POST', COUNT, { params, body: { exact: true } })) as { count: number };
  t.is(count.count, 600);
});

test('query and search vectors read as float32 answer exactly as the same vectors read by JSON.parse; bad vectors are refused as before', async (t) => {
  const api = await ContractClient.start();
  t.teardown(() => api.stop());
  const params = { collection_name: 'json_numbers_query' };
  await api.ok(t, 'PUT', COLLECTION, { params, body: { vectors: { a: { size: 24, distance: 'Cosine' }, b: { size: 24, distance: 'Euclid' } } } });
  const rnd = xorshift(31337);
  // Full-precision float32 values, as a JS or numpy client writes them (up to 17 digits).
  const vec = () => Array.from(Float32Array.from({ length: 24 }, () => (rnd() - 0.5) * 3));
  const points = Array.from({ length: 400 }, (_, i) => ({ id: i, vector: { a: vec(), b: vec() } }));
  await api.ok(t, 'PUT', POINTS, { params, query: { wait: true }, body: { points } });
  // The same body twice: compact (the float32 reader takes the vectors) and with a space
  // after every comma (the reader declines, JSON.parse reads numbers): same answers, to the bit.
  const both = async (route: string, body: unknown) => {
    const compact = JSON.stringify(body);
    const spaced = compact.replace(/,/g, ', ');
    const a = await api.send('POST', route, { params, raw: compact });
    const b = await api.send('POST', route, { params, raw: spaced });
    t.is(a.status, b.status, `${route} ${compact.slice(0, 80)}`);
    const strip = (r: { body: unknown }) => ({ ...(r.body as Record<string, unknown>), time: 0 });
    t.deepEqual(strip(a), strip(b), `${route} ${compact.slice(0, 80)}`);
    return a;
  };
  for (let i = 0; i < 20; i++) {
    const q = vec();
    const r = await both(QUERY, { query: q, using: 'a', limit: 7, params: { hnsw_ef: 32 } });
    t.is(r.status, 200);
    t.is((r.body as { result: { points: unknown[] } }).result.points.length, 7);
    await both(QUERY, { query: { nearest: q }, using: 'b', limit: 5, with_vector: true });
    await both(SEARCH, { vector: { name: 'b', vector: q }, limit: 5, score_threshold: 1.5 });
    await both(QUERY_BATCH, { searches: [{ query: q, using: 'a', limit: 3 }, { query: { nearest: vec() }, using: 'b', limit: 2 }] });
    await both(SEARCH_BATCH, { searches: [{ vector: { name: 'a', vector: q }, limit: 3 }, { vector: { name: 'b', vector: vec() }, limit: 4, offset: 1 }] });
  }
  // Refused as before, with the same messages (a value beyond float32, a string, a wrong length).
  const big = vec();
  big[3] = 1e39;
  await api.error(t, 400, 'POST', QUERY, { params, body: { query: big, using: 'a' } }, /query\[3\]: 1e\+39 is not a finite 32-bit float/);
  await api.error(t, 400, 'POST', SEARCH, { params, raw: `{"vector":{"name":"a","vector":[0.5,"x"]},"limit":3}` }, /vector\.vector\[1\]: expected a number/);
  await api.error(t, 400, 'POST', QUERY, { params, body: { query: vec().slice(1), using: 'a' } }, /dimension|size|length/i);
});
