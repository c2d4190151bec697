/**
 * Payload indexes (ts/shard/payload-index.ts): field schema parsing and its errors,
 * index maintenance on update / remove / re-create / drop, order_by iteration, and a
 * seeded randomized check that candidates() is always a superset of the filter.ts
 * predicate's matches (and exact after the predicate), also across random updates.
 * Replay a failure with PAYLOAD_INDEX_SEED=<seed>.
 */

import test from 'ava';

import { Filter, PointId, compileFilter, matches, parseDatetime, validateFilter } from '../../ts/shard/filter';
import { OrderByError, PayloadIndexes } from '../../ts/shard/payload-index';
import { FieldSchema, FieldSchemaError, fieldSchemaToJson, parseFieldSchema, sameFieldSchema } from '../../ts/shard/field-schema';
import { mulberry32 } from '../support/rng';

type P = Record<string, unknown> | null;

function build(points: P[], indexes: Record<string, unknown>): PayloadIndexes {
  const pi = new PayloadIndexes();
  for (const [field, schema] of Object.entries(indexes)) {
    pi.create(field, parseFieldSchema(schema), points.map((p, i) => [BigInt(i), p] as [bigint, P]));
  }
  return pi;
}
function cand(pi: PayloadIndexes, filter: unknown): number[] | null {
  const c = pi.candidates(validateFilter(filter));
  return c === null ? null : [...c].map(Number).sort((a, b) => a - b);
}
function must(key: string, cond: Record<string, unknown>): unknown {
  return { must: [{ key, ...cond }] };
}

// ---------------------------------------------------------------------------------
// field schemas

test('parseFieldSchema: type names and objects, normalised as the reference echoes them', (t) => {
  for (const ty of ['keyword', 'integer', 'float', 'geo', 'text', 'bool', 'datetime', 'uuid']) {
    t.deepEqual(parseFieldSchema(ty), { type: ty });
    t.is(fieldSchemaToJson(parseFieldSchema(ty)) as unknown, ty);
  }
  t.deepEqual(parseFieldSchema({ type: 'keyword' }), { type: 'keyword', params: { type: 'keyword' } });
  t.deepEqual(parseFieldSchema({ type: 'keyword', is_tenant: true, on_disk: null, prefix: false, whatever: 1 }).params, {
    type: 'keyword',
    is_tenant: true,
    prefix: false,
  });
  // integer lookup/range/is_principal and float/datetime is_principal are echoed as null
  t.deepEqual(parseFieldSchema({ type: 'integer', range: false, on_disk: true }).params, {
    type: 'integer',
    lookup: null,
    range: false,
    is_principal: null,
    on_disk: true,
  });
  t.deepEqual(parseFieldSchema({ type: 'float' }).params, { type: 'float', is_principal: null });
  t.deepEqual(parseFieldSchema({ type: 'datetime', is_principal: true, memory: 'cold' }).params, {
    type: 'datetime',
    is_principal: true,
    memory: 'cold',
  });
  t.deepEqual(parseFieldSchema({ type: 'uuid', is_tenant: false, enable_hnsw: false }).params, {
    type: 'uuid',
    is_tenant: false,
    enable_hnsw: false,
  });
  // text: tokenizer defaults to word; aliases resolved; stopword sets sorted and deduplicated
  t.deepEqual(parseFieldSchema({ type: 'text' }).params, { type: 'text', tokenizer: 'word' });
  t.deepEqual(
    parseFieldSchema({
      type: 'text',
      stemmer: { type: 'snowball', language: 'en' },
      enable_hnsw: true,
      lowercase: false,
      max_token_len: 20,
      min_token_len: 2,
      tokenizer: 'prefix',
      stopwords: { languages: ['fr', 'english', 'en'], custom: ['the', 'a', 'the'] },
      phrase_matching: true,
      ascii_folding: null,
    }).params,
    {
      type: 'text',
      tokenizer: 'prefix',
      min_token_len: 2,
      max_token_len: 20,
      lowercase: false,
      phrase_matching: true,
      stopwords: { languages: ['english', 'french'], custom: ['a', 'the'] },
      stemmer: { type: 'snowball', language: 'english' },
      enable_hnsw: true,
    },
  );
  t.deepEqual(parseFieldSchema({ type: 'text', stopwords: 'de', stemmer: { type: 'none' } }).params, {
    type: 'text',
    tokenizer: 'word',
    stopwords: 'german',
    stemmer: { type: 'none' },
  });
  // the persisted JSON parses back to the same schema
  for (const s of [
    { type: 'integer', lookup: true },
    { type: 'text', stopwords: { custom: ['x'] }, tokenizer: 'multilingual' },
    'geo',
  ]) {
    const a = parseFieldSchema(s);
    t.deepEqual(parseFieldSchema(fieldSchemaToJson(a)), a);
    t.true(sameFieldSchema(a, parseFieldSchema(fieldSchemaToJson(a))));
  }
  t.false(sameFieldSchema(parseFieldSchema('integer'), parseFieldSchema({ type: 'integer' })));
});

test('parseFieldSchema: unknown types and bad params are FieldSchemaErrors with clear messages', (t) => {
  const bad = (x: unknown, msg: RegExp) => {
    const e = t.throws(() => parseFieldSchema(x), { instanceOf: FieldSchemaError }, JSON.stringify(x));
    if (e) t.regex(e.message, msg, JSON.stringify(x));
  };
  bad(undefined, /Can't auto-detect field type, please specify `field_schema` in the request/);
  bad(null, /auto-detect/);
  bad('string', /unknown payload schema type "string" \(expected one of: keyword, integer/);
  bad('Keyword', /unknown payload schema type/);
  bad(5, /expected a type name or an object/);
  bad(['keyword'], /expected a type name or an object/);
  bad({}, /field_schema\.type: missing/);
  bad({ type: 'vector' }, /field_schema\.type: unknown payload schema type "vector"/);
  bad({ type: 'integer', lookup: 'yes' }, /field_schema\.lookup: expected a boolean or null/);
  bad({ type: 'integer', lookup: false, range: false }, /'lookup' and 'range' capabilities can't be both disabled/);
  bad({ type: 'keyword', on_disk: 1 }, /field_schema\.on_disk: expected a boolean/);
  bad({ type: 'float', memory: 'hot' }, /field_schema\.memory: expected one of cold, cached, pinned/);
  bad({ type: 'text', tokenizer: 'ngram' }, /field_schema\.tokenizer: expected one of prefix, whitespace, word, multilingual/);
  bad({ type: 'text', tokenizer: null }, /field_schema\.tokenizer/);
  bad({ type: 'text', min_token_len: -1 }, /field_schema\.min_token_len: expected an unsigned integer/);
  bad({ type: 'text', max_token_len: 2.5 }, /max_token_len/);
  bad({ type: 'text', stopwords: 'klingon' }, /field_schema\.stopwords: unknown language "klingon"/);
  bad({ type: 'text', stopwords: { languages: ['english', 'xx'] } }, /stopwords\.languages\[1\]: unknown language/);
  bad({ type: 'text', stopwords: { custom: [1] } }, /stopwords\.custom\[0\]: expected a string/);
  bad({ type: 'text', stemmer: { type: 'porter' } }, /stemmer\.type: expected "snowball" or "none"/);
  bad({ type: 'text', stemmer: { type: 'snowball' } }, /stemmer\.language: missing/);
  bad({ type: 'text', stemmer: { type: 'snowball', language: 'chinese' } }, /stemmer\.language: unknown language "chinese"/);
});

test('create refuses bad field paths with a FieldSchemaError', (t) => {
  const pi = new PayloadIndexes();
  t.throws(() => pi.create('a[0].b', parseFieldSchema('keyword'), []), { instanceOf: FieldSchemaError, message: /field_name/ });
  t.throws(() => pi.create('', parseFieldSchema('keyword'), []), { instanceOf: FieldSchemaError });
  t.deepEqual(pi.fields(), []);
});

// ---------------------------------------------------------------------------------
// schema info and maintenance

test('schemaInfo: data_type, params only for the object form, points with a value of the type', (t) => {
  const pts: P[] = [
    { k: 'a', n: 1, f: 1, d: '2024-01-01', u: '550E8400-E29B-41D4-A716-446655440000', b: true, g: { lat: 1, lon: 2 }, s: 'x y' },
    { k: ['a', 'b'], n: 1.5, f: 2.5, d: 'not a date', u: 'nope', b: [false], g: [{ lat: 1 }], s: 3 },
    { k: 5, n: [2, 'x'], f: '1', d: ['2024-01-01T10:00:00Z'], u: '550e8400e29b41d4a716446655440000', b: 'true', s: ['a'] },
    { k: [], n: null, f: [null, [3]] },
    null,
    {},
  ];
  const pi = build(pts, {
    k: 'keyword',
    n: { type: 'integer', lookup: false },
    f: 'float',
    d: 'datetime',
    u: 'uuid',
    b: 'bool',
    g: 'geo',
    s: { type: 'text' },
  });
  t.deepEqual(pi.schemaInfo(), {
    k: { data_type: 'keyword', points: 2 },
    n: { data_type: 'integer', params: { type: 'integer', lookup: false, range: null, is_principal: null }, points: 2 },
    f: { data_type: 'float', points: 3 },
    d: { data_type: 'datetime', points: 2 },
    u: { data_type: 'uuid', points: 2 },
    b: { data_type: 'bool', points: 2 },
    g: { data_type: 'geo', points: 1 },
    s: { data_type: 'text', params: { type: 'text', tokenizer: 'word' }, points: 2 },
  });
  t.deepEqual(pi.fields(), ['k', 'n', 'f', 'd', 'u', 'b', 'g', 's']);
  t.true(pi.has('g'));
  t.false(pi.has('zz'));
  t.deepEqual(pi.schemaOf('k'), { type: 'keyword' });
  // the returned info is a copy
  const info = pi.schemaInfo();
  (info.n.params as Record<string, unknown>).lookup = true;
  t.is((pi.schemaInfo().n.params as Record<string, unknown>).lookup, false);
});

test('update keeps every index in sync; remove, re-create and drop', (t) => {
  const pts: P[] = [{ c: 'red', n: 1 }, { c: 'blue', n: 2 }, { c: ['red', 'blue'], n: [3, 4] }];
  const pi = build(pts, { c: 'keyword', n: 'integer' });
  const red = must('c', { match: { value: 'red' } });
  const big = must('n', { range: { gte: 3 } });
  t.deepEqual(cand(pi, red), [0, 2]);
  t.deepEqual(cand(pi, big), [2]);

  pi.update(0n, { c: 'green', n: 10 });
  pi.update(1n, { c: 'red' });
  pi.update(3n, { c: ['red'], n: 3 }); // a new point
  t.deepEqual(cand(pi, red), [1, 2, 3]);
  t.deepEqual(cand(pi, big), [0, 2, 3]);
  t.deepEqual(cand(pi, must('c', { match: { value: 'green' } })), [0]);
  t.is(pi.schemaInfo().n.points, 3);

  pi.update(2n, null); // removed
  pi.update(99n, null); // unknown: nothing to do
  t.deepEqual(cand(pi, red), [1, 3]);
  t.deepEqual(cand(pi, big), [0, 3]);
  t.deepEqual(cand(pi, must('c', { match: { value: 'blue' } })), []);
  t.deepEqual(pi.schemaInfo(), { c: { data_type: 'keyword', points: 3 }, n: { data_type: 'integer', points: 2 } });

  // re-create with another type over the current payloads replaces the index
  const now: [bigint, P][] = [
    [0n, { c: 'green', n: 10 }],
    [1n, { c: 'red' }],
    [3n, { c: ['red'], n: 3 }],
  ];
  pi.create('n', parseFieldSchema('keyword'), now);
  t.is(cand(pi, big), null, 'a keyword index does not answer a numeric range');
  t.deepEqual(pi.schemaInfo().n, { data_type: 'keyword', points: 0 });
  pi.create('n', parseFieldSchema('float'), now);
  t.deepEqual(cand(pi, big), [0, 3]);

  t.true(pi.drop('c'));
  t.false(pi.drop('c'));
  t.false(pi.has('c'));
  t.is(cand(pi, red), null);
  pi.update(1n, { c: 'red', n: 100 });
  t.deepEqual(cand(pi, big), [0, 1, 3]);
  t.deepEqual(pi.fields(), ['n']);
});

test('an unchanged value does not disturb the index; many updates stay consistent', (t) => {
  const n = 3000;
  const pi = build(
    Array.from({ length: n }, (_, i) => ({ v: i % 100, w: `k${i % 7}` })),
    { v: 'integer', w: 'keyword' },
  );
  const model = new Map<number, number>(Array.from({ length: n }, (_, i) => [i, i % 100] as [number, number]));
  let x = 12345;
  const rnd = () => ((x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32);
  for (let step = 0; step < 5000; step++) {
    const off = Math.floor(rnd() * (n + 200));
    if (rnd() < 0.1) {
      pi.update(BigInt(off), null);
      model.delete(off);
    } else {
      const v = Math.floor(rnd() * 100);
      pi.update(BigInt(off), { v, w: 'k1' });
      model.set(off, v);
    }
  }
  const want = [...model].filter(([, v]) => v >= 40 && v < 45).map(([o]) => o).sort((a, b) => a - b);
  t.deepEqual(cand(pi, must('v', { range: { gte: 40, lt: 45 } })), want);
  const ordered = [...pi.orderValues('v')];
  const wantOrder = [...model].sort((a, b) => a[1] - b[1] || a[0] - b[0]);
  t.deepEqual(
    ordered.map((e) => [Number(e.offset), e.value]),
    wantOrder,
  );
});

// ---------------------------------------------------------------------------------
// candidates

test('candidates: null without a narrowing index, and the shape of what is answered', (t) => {
  const pts: P[] = [{ a: 'x', n: 1 }, { a: 'y', n: 2 }, { a: 'x', n: 3 }, { n: 4 }];
  const pi = build(pts, { a: 'keyword' });
  const x = { key: 'a', match: { value: 'x' } };
  const y = { key: 'a', match: { value: 'y' } };
  const unindexed = { key: 'n', range: { gt: 1 } };
  t.is(cand(pi, {}), null);
  t.is(cand(pi, { must: [unindexed] }), null);
  t.is(cand(pi, { must_not: [x] }), null, 'must_not is left to the predicate');
  t.is(cand(pi, must('a', { match: { except: ['x'] } })), null);
  t.deepEqual(cand(pi, must('a', { is_empty: false })), [0, 1, 2], 'is_empty: false from the index of that path');
  t.is(cand(pi, { must: [{ has_id: [1] }] }), null);
  t.is(cand(pi, must('a', { match: { value: 3 } })), null, 'a keyword index holds no numbers');
  t.deepEqual(cand(pi, { must: [x, unindexed] }), [0, 2]);
  t.deepEqual(cand(pi, { should: [x, y] }), [0, 1, 2]);
  t.is(cand(pi, { should: [x, unindexed] }), null, 'a should branch without an index can match anything');
  t.deepEqual(cand(pi, { must: [{ should: [x, y] }, x] }), [0, 2]);
  t.deepEqual(cand(pi, { min_should: { conditions: [x, y, unindexed], min_count: 2 } }), [0, 1, 2]);
  t.is(cand(pi, { min_should: { conditions: [x, unindexed, unindexed], min_count: 2 } }), null);
  t.deepEqual(cand(pi, { min_should: { conditions: [x, y], min_count: 2 } }), []);
  t.deepEqual(cand(pi, { min_should: { conditions: [x], min_count: 2 } }), []);
  t.is(cand(pi, { min_should: { conditions: [x], min_count: 0 } }), null);
  t.deepEqual(cand(pi, must('a', { match: { any: ['y', 'zz'] } })), [1]);
  t.deepEqual(cand(pi, must('n', { match: { any: [] } })), [], 'any [] matches nothing, index or not');
  t.deepEqual(cand(pi, must('n', { match: { text_any: '  ' } })), []);
  t.deepEqual(cand(pi, { must: [{ must: [x] }] }), [0, 2], 'sub-filters');
});

test('candidates: integer/float/datetime/bool/uuid semantics agree with filter.ts', (t) => {
  const U = '550e8400-e29b-41d4-a716-446655440000';
  const pts: P[] = [
    { i: 3, f: 3, d: '2024-01-01T00:00:00Z', b: true, u: U },
    { i: 3.5, f: [1, 2.5], d: '2024-01-01T02:00:00+02:00', b: [false, true], u: U.toUpperCase() },
    { i: [[7]], f: '3', d: '2024-01-02', b: 'true', u: U.replace(/-/g, '') },
    { i: '3', f: true, d: 20240101, b: 1, u: 'not-a-uuid' },
  ];
  const pi = build(pts, { i: 'integer', f: 'float', d: 'datetime', b: 'bool', u: 'uuid' });
  // integer index also answers ranges over non-integer numbers (filter.ts range accepts them)
  t.deepEqual(cand(pi, must('i', { range: { gt: 3, lt: 4 } })), [1]);
  t.deepEqual(cand(pi, must('i', { range: {} })), [0, 1, 2]);
  t.deepEqual(cand(pi, must('i', { match: { value: 3 } })), [0]);
  t.deepEqual(cand(pi, must('i', { match: { any: [7, 9] } })), [2]);
  t.is(cand(pi, must('i', { match: { value: '3' } })), null);
  t.is(cand(pi, must('i', { range: { gte: '2024-01-01' } })), null, 'datetime bounds are not numbers');
  t.deepEqual(cand(pi, must('f', { match: { value: 1 } })), [1], 'float index answers integer match by key');
  t.deepEqual(cand(pi, must('f', { range: { gte: 2.5, lte: 3 } })), [0, 1]);
  // datetime: 2024-01-01T02:00:00+02:00 is midnight UTC
  t.deepEqual(cand(pi, must('d', { range: { lte: '2024-01-01T00:00:00Z' } })), [0, 1]);
  t.deepEqual(cand(pi, must('d', { range: { gt: '2024-01-01T00:00:00Z' } })), [2]);
  t.is(cand(pi, must('d', { range: { gt: 0 } })), null);
  t.is(cand(pi, must('d', { match: { value: '2024-01-02' } })), null);
  t.deepEqual(cand(pi, must('b', { match: { value: true } })), [0, 1]);
  t.deepEqual(cand(pi, must('b', { match: { value: false } })), [1]);
  // uuid: canonical lookup is a superset of filter.ts's exact string equality
  const f = validateFilter(must('u', { match: { value: U } })) as Filter;
  const c = pi.candidates(f)!;
  t.deepEqual([...c].map(Number).sort(), [0, 1, 2]);
  t.deepEqual(
    [...c].filter((o) => matches(f, Number(o), pts[Number(o)])).map(Number),
    [0],
  );
  t.is(cand(pi, must('u', { match: { value: 'not-a-uuid' } })), null, 'non-UUID strings are not indexed');
});

test('candidates: keyword indexes answer text/phrase/text_any as filter.ts substrings; text indexes by tokens', (t) => {
  const pts: P[] = [{ s: 'dark red' }, { s: ['Red', 'blue'] }, { s: 'reddish' }, { s: 5 }, { s: 'green' }];
  const tx = build(pts, { s: 'text' });
  t.deepEqual(cand(tx, must('s', { match: { text: 'red' } })), [0, 1], 'text: tokens, lowercased');
  t.deepEqual(cand(tx, must('s', { match: { text: 'ed' } })), [], 'text: no substrings');
  t.deepEqual(cand(tx, must('s', { match: { text_any: 'blue  gree' } })), [1]);
  t.is(cand(tx, must('s', { match: { value: 'green' } })), null, 'text: equality is left to the predicate');
  for (const ty of ['keyword']) {
    const pi = build(pts, { s: ty });
    t.deepEqual(cand(pi, must('s', { match: { text: 'red' } })), [0, 2], ty);
    t.deepEqual(cand(pi, must('s', { match: { text: 'ed' } })), [0, 1, 2], `${ty}: substrings, not tokens`);
    t.deepEqual(cand(pi, must('s', { match: { phrase: 'k r' } })), [0], ty);
    t.deepEqual(cand(pi, must('s', { match: { text_any: 'blue  gree' } })), [1, 4], ty);
    t.deepEqual(cand(pi, must('s', { match: { value: 'green' } })), [4], ty);
  }
  t.is(cand(build(pts, { s: 'uuid' }), must('s', { match: { text: 'red' } })), null);
});

test('candidates: is_null and is_empty: false from an index on exactly that path, whatever the value types', (t) => {
  const pts: P[] = [{ a: null }, { a: [null, 'x'] }, { a: [] }, { a: 5 }, {}, { a: 'y' }, { a: [[]] }, null];
  const pi = build(pts, { a: 'keyword', 'b[].c': 'integer' });
  t.deepEqual(cand(pi, { must: [{ is_null: { key: 'a' } }] }), [0], 'an array holding null is not null (filter.ts)');
  t.deepEqual(cand(pi, must('a', { is_null: true })), [0]);
  t.deepEqual(cand(pi, must('a', { is_empty: false })), [1, 3, 5, 6], 'a number or [[]] is not empty, though the keyword index holds no value for it');
  t.is(cand(pi, must('a', { is_null: false })), null, 'a complement is left to the predicate');
  t.is(cand(pi, { must: [{ is_empty: { key: 'a' } }] }), null, 'is_empty needs the live points (universe)');
  t.is(cand(pi, { must: [{ is_null: { key: 'b.c' } }] }), null, 'only an index on the same path (brackets included)');
  pi.universe = { size: () => pts.length, offsets: () => pts.map((_, i) => BigInt(i)) };
  t.deepEqual(cand(pi, { must: [{ is_empty: { key: 'a' } }] }), [0, 2, 4, 7]);
  t.is(cand(pi, { must: [{ nested: { key: 'b', filter: { must: [{ is_empty: { key: 'c' } }] } } }] }), null, 'not inside nested');
  pi.update(3n, { a: null });
  pi.update(1n, null);
  t.deepEqual(cand(pi, { must: [{ is_null: { key: 'a' } }] }), [0, 3]);
  t.deepEqual(cand(pi, must('a', { is_empty: false, match: { value: 'y' } })), [5]);
});

test('candidates: has_vector from the shard\'s vector presence, when it is given', (t) => {
  const pts: P[] = [{ a: 'x' }, { a: 'y' }, { a: 'x' }, {}];
  const pi = build(pts, { a: 'keyword' });
  const hv = (name: string) => ({ must: [{ has_vector: name }] });
  t.is(cand(pi, hv('img')), null, 'without presence: left to the predicate');
  pi.vectorPresence = (name) => (name === 'img' ? new Set([0n, 1n]) : name === '' ? new Set([0n, 1n, 2n, 3n]) : null);
  t.deepEqual(cand(pi, hv('img')), [0, 1]);
  t.deepEqual(cand(pi, hv('nope')), [], 'a vector name the collection lacks: no point has it');
  t.deepEqual(cand(pi, { must: [{ has_vector: 'img' }, { key: 'a', match: { value: 'x' } }] }), [0]);
  t.is(cand(pi, { must_not: [{ has_vector: 'img' }] }), null);
});

test('candidates: geo radius, bounding box (antimeridian), polygon', (t) => {
  const pts: P[] = [
    { g: { lat: 52.52, lon: 13.405 } }, // Berlin
    { g: [{ lat: 48.8566, lon: 2.3522 }, { lat: 0, lon: 0 }] }, // Paris
    { g: { lat: 51.5072, lon: -0.1276 } }, // London
    { g: { lat: -17.7, lon: 179.9 } },
    { g: { lat: 120, lon: 13.4 } }, // a latitude out of range: filter.ts still evaluates it
    { g: { lat: 'x', lon: 1 } },
  ];
  const pi = build(pts, { g: 'geo' });
  t.deepEqual(cand(pi, must('g', { geo_radius: { center: { lat: 52.52, lon: 13.405 }, radius: 1000 } })), [0]);
  t.deepEqual(cand(pi, must('g', { geo_radius: { center: { lat: 50, lon: 5 }, radius: 700_000 } })), [0, 1, 2]);
  t.deepEqual(cand(pi, must('g', { geo_radius: { center: { lat: 50, lon: 5 }, radius: 600_000 } })), [1, 2]);
  // haversine puts {lat: 120, lon: 13.4} at {lat: 60, lon: -166.6}: outside any latitude band
  const odd = validateFilter(must('g', { geo_radius: { center: { lat: 60, lon: -166.6 }, radius: 1000 } })) as Filter;
  t.true(matches(odd, 4, pts[4]));
  t.deepEqual(cand(pi, odd), [4]);
  t.deepEqual(
    cand(pi, must('g', { geo_bounding_box: { top_left: { lat: 60, lon: -5 }, bottom_right: { lat: 45, lon: 10 } } })),
    [1, 2],
  );
  t.deepEqual(
    cand(pi, must('g', { geo_bounding_box: { top_left: { lat: 0, lon: 170 }, bottom_right: { lat: -20, lon: -170 } } })),
    [3],
  );
  const ring = [
    { lat: 40, lon: -10 },
    { lat: 40, lon: 20 },
    { lat: 60, lon: 20 },
    { lat: 60, lon: -10 },
    { lat: 40, lon: -10 },
  ];
  t.deepEqual(cand(pi, must('g', { geo_polygon: { exterior: { points: ring } } })), [0, 1, 2]);
  t.is(cand(pi, must('g', { match: { value: 'x' } })), null);
});

test('candidates: key paths with [] and nested conditions use the index, never missing a point', (t) => {
  const pts: P[] = [
    { arr: [{ x: 1, y: 'a' }, { x: 2, y: 'b' }] },
    { arr: { x: 1, y: 'b' } }, // not an array: arr[].x does not reach it, arr.x and nested do
    { arr: [[{ x: 1 }]] },
    { arr: [{ x: 3, y: 'a' }] },
  ];
  const pi = build(pts, { 'arr[].x': 'integer', 'arr.y': 'keyword' });
  const check = (filter: unknown, want: number[]) => {
    const f = validateFilter(filter) as Filter;
    const brute = pts.flatMap((p, i) => (matches(f, i, p) ? [i] : []));
    t.deepEqual(brute, want, `brute force of ${JSON.stringify(filter)}`);
    const c = cand(pi, filter);
    t.not(c, null, JSON.stringify(filter));
    t.true(want.every((i) => c!.includes(i)), `${JSON.stringify(filter)}: ${want} in ${c}`);
  };
  check(must('arr[].x', { match: { value: 1 } }), [0, 2]);
  check(must('arr.x', { match: { value: 1 } }), [0, 1, 2]);
  check({ must: [{ nested: { key: 'arr', filter: { must: [{ key: 'x', match: { value: 1 } }, { key: 'y', match: { value: 'b' } }] } } }] }, [1]);
  check({ must: [{ nested: { key: 'arr[]', filter: { must: [{ key: 'x', range: { gte: 2 } }] } } }] }, [0, 3]);
  check(must('arr[].y', { match: { value: 'a' } }), [0, 3]);
  t.deepEqual(cand(pi, must('arr[].x', { match: { value: 1 } })), [0, 2], 'no extras needed for the declared path');
  t.deepEqual(cand(pi, must('arr.x', { match: { value: 1 } })), [0, 1, 2], 'extras added for the wider path');
  // after updates the extras follow
  pi.update(1n, { arr: [{ x: 9 }] });
  pi.update(3n, { arr: { x: 1 } });
  t.deepEqual(cand(pi, must('arr.x', { match: { value: 1 } })), [0, 2, 3]);
});

// ---------------------------------------------------------------------------------
// order_by

test('orderValues: by value, ties by offset, desc the exact reverse, one entry per distinct value', (t) => {
  const pts: P[] = [{ n: 5 }, { n: [1, 9, 1] }, { n: 5 }, { n: 2.5 }, { n: 'x' }, {}, { n: [[3]] }];
  const pi = build(pts, { n: 'integer', f: 'float', d: 'datetime', k: 'keyword', r: { type: 'integer', range: false } });
  pi.create('f', parseFieldSchema('float'), pts.map((p, i) => [BigInt(i), p ? { f: p.n } : null] as [bigint, P]));
  const ints = [...pi.orderValues('n')].map((e) => [Number(e.offset), e.value]);
  t.deepEqual(ints, [[1, 1], [6, 3], [0, 5], [2, 5], [1, 9]], 'integer index: integers only');
  t.deepEqual([...pi.orderValues('n', { direction: 'desc' })].map((e) => [Number(e.offset), e.value]), [...ints].reverse());
  t.deepEqual(
    [...pi.orderValues('f')].map((e) => [Number(e.offset), e.value]),
    [[1, 1], [3, 2.5], [6, 3], [0, 5], [2, 5], [1, 9]],
  );
  t.deepEqual([...pi.orderValues('n', { startFrom: 5 })].map((e) => e.value), [5, 5, 9]);
  t.deepEqual([...pi.orderValues('n', { direction: 'desc', startFrom: 4.5 })].map((e) => e.value), [3, 1]);
  t.deepEqual([...pi.orderValues('n', { direction: 'asc', startFrom: 100 })], []);

  for (const field of ['k', 'r', 'missing']) {
    const e = t.throws(() => pi.orderValues(field), { instanceOf: OrderByError });
    t.is(
      e?.message,
      `No range index for \`order_by\` key: ${field}. Please create one to use \`order_by\`. Integer, float, and datetime payloads can have range indexes, see https://qdrant.tech/documentation/concepts/indexing/#payload-index.`,
    );
  }

  // the iterator refuses to continue after a change
  const it = pi.orderValues('n');
  t.truthy(it.next().value);
  pi.update(0n, { n: 0 });
  t.throws(() => it.next(), { message: /changed/ });
  t.deepEqual([...pi.orderValues('n')].map((e) => [Number(e.offset), e.value]).slice(0, 2), [[0, 0], [1, 1]]);
});

test('orderValues on datetime: epoch microseconds, startFrom as a datetime string', (t) => {
  const pts: P[] = [
    { d: '2024-01-01T00:00:00.000001Z' },
    { d: ['2023-06-01', 'nope', '2024-01-01T01:00:00+01:00'] },
    { d: '2025-01-01 10:00' },
  ];
  const pi = build(pts, { d: 'datetime' });
  const us = (s: string) => Math.round(parseDatetime(s) * 1000);
  t.deepEqual(
    [...pi.orderValues('d')].map((e) => [Number(e.offset), e.value]),
    [
      [1, us('2023-06-01')],
      [1, us('2024-01-01T00:00:00Z')],
      [0, 1704067200000001],
      [2, us('2025-01-01T10:00:00Z')],
    ],
  );
  t.deepEqual(
    [...pi.orderValues('d', { startFrom: '2024-01-01T00:00:00.000001Z' })].map((e) => Number(e.offset)),
    [0, 2],
  );
  t.deepEqual(
    [...pi.orderValues('d', { direction: 'desc', startFrom: us('2024-01-01T00:00:00Z') })].map((e) => Number(e.offset)),
    [1, 1],
  );
  t.throws(() => pi.orderValues('d', { startFrom: 'yesterday' }), { instanceOf: OrderByError, message: /start_from/ });
});

// ---------------------------------------------------------------------------------
// randomized: candidates ⊇ brute force, across updates


const UUIDS = [
  '550e8400-e29b-41d4-a716-446655440000',
  '550E8400-E29B-41D4-A716-446655440000',
  '6ba7b8109dad11d180b400c04fd430c8',
  'f47ac10b-58cc-4372-a567-0e02b2c3d479',
];
const WORDS = ['red', 'green', 'blue', 'light red', 'Red', 'dark blue', '', 'reddish'];
const DATES = [
  '2024-01-01',
  '2024-01-01T12:00:00Z',
  '2024-01-01T12:00:00',
  '2024-01-01 23:30',
  '2024-01-02T01:00:00+02:00',
  '2023-12-31T23:59:59.999Z',
  '2024-06-15T00:00:00Z',
  'not a date',
];

/** Index type by key with brackets dropped (and by nested inner key), for typedCond. */
const TYPED_KEYS: Record<string, string> = {
  kw: 'keyword',
  n: 'integer',
  f: 'float',
  b: 'bool',
  u: 'uuid',
  when: 'datetime',
  loc: 'geo',
  txt: 'text',
  'arr.x': 'integer',
  'arr.y': 'keyword',
  'arr.w': 'datetime',
  'obj.z': 'float',
  'obj.k': 'keyword',
  x: 'integer',
  y: 'keyword',
  w: 'datetime',
  z: 'float',
  k: 'keyword',
};

const RANDOM_INDEXES: Record<string, unknown> = {
  kw: 'keyword',
  n: 'integer',
  f: 'float',
  b: 'bool',
  u: 'uuid',
  when: 'datetime',
  loc: 'geo',
  txt: { type: 'text', tokenizer: 'word' },
  'arr[].x': { type: 'integer', lookup: false },
  'arr.y': 'keyword',
  'arr[].w': 'datetime',
  'obj.z': 'float',
  'obj[].k': 'keyword',
  mix: 'keyword',
  mix2: 'integer',
};

function gen(rnd: () => number) {
  const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const chance = (p: number) => rnd() < p;
  const geo = () => ({ lat: Math.round((rnd() * 60 - 30) * 1000) / 1000, lon: Math.round((rnd() * 60 - 30) * 1000) / 1000 });
  const scalar = (): unknown => {
    switch (int(0, 8)) {
      case 0:
      case 1:
        return int(-3, 8);
      case 2:
        return int(-20, 60) / 4;
      case 3:
        return pick(WORDS);
      case 4:
        return chance(0.5);
      case 5:
        return null;
      case 6:
        return pick(DATES);
      case 7:
        return pick(UUIDS);
      default:
        return geo();
    }
  };
  const some = <T>(f: () => T): T | T[] | T[][] =>
    chance(0.6) ? f() : chance(0.85) ? Array.from({ length: int(0, 3) }, f) : [Array.from({ length: int(0, 2) }, f)];
  const typed: Record<string, () => unknown> = {
    kw: () => (chance(0.9) ? pick(WORDS) : scalar()),
    n: () => (chance(0.8) ? int(-3, 8) : chance(0.5) ? int(-12, 32) / 4 : scalar()),
    f: () => (chance(0.85) ? int(-12, 32) / 4 : scalar()),
    b: () => (chance(0.85) ? chance(0.5) : scalar()),
    u: () => (chance(0.85) ? pick(UUIDS) : scalar()),
    when: () => (chance(0.9) ? pick(DATES) : scalar()),
    loc: () => (chance(0.9) ? geo() : scalar()),
    txt: () => (chance(0.9) ? pick(WORDS) : scalar()),
    mix: scalar,
    mix2: scalar,
  };
  const elem = (): unknown => {
    if (chance(0.1)) return scalar();
    const o: Record<string, unknown> = {};
    if (chance(0.7)) o.x = some(() => (chance(0.8) ? int(-3, 8) : scalar()));
    if (chance(0.6)) o.y = some(() => (chance(0.8) ? pick(WORDS) : scalar()));
    if (chance(0.4)) o.w = some(() => pick(DATES));
    return o;
  };
  const payload = (): Record<string, unknown> | null => {
    if (chance(0.03)) return null;
    const p: Record<string, unknown> = {};
    for (const k of Object.keys(typed)) if (chance(0.7)) p[k] = some(typed[k]);
    if (chance(0.7)) {
      const r = rnd();
      p.arr = r < 0.7 ? Array.from({ length: int(0, 3) }, elem) : r < 0.85 ? elem() : [Array.from({ length: int(0, 2) }, elem)];
    }
    if (chance(0.6)) {
      const o = () => ({ z: some(() => (chance(0.8) ? int(-12, 32) / 4 : scalar())), k: some(() => pick(WORDS)) });
      p.obj = chance(0.5) ? o() : Array.from({ length: int(0, 3) }, o);
    }
    return p;
  };

  const KEYS = ['kw', 'n', 'f', 'b', 'u', 'when', 'loc', 'txt', 'mix', 'mix2', 'arr.x', 'arr[].x', 'arr.y', 'arr[].y', 'arr[].w', 'arr.w', 'obj.z', 'obj[].z', 'obj.k', 'obj[].k', 'nothing'];
  const INNER = ['x', 'y', 'w', 'z', 'k'];
  const bounds = (f: () => unknown): Record<string, unknown> => {
    const r: Record<string, unknown> = {};
    for (const b of ['gt', 'gte', 'lt', 'lte']) if (chance(0.35)) r[b] = f();
    return r;
  };
  const anyList = (): unknown[] =>
    chance(0.5) ? [...new Set(Array.from({ length: int(0, 3) }, () => pick([...WORDS, ...UUIDS])))] : [...new Set(Array.from({ length: int(0, 3) }, () => int(-3, 8)))];
  const fieldCond = (keys: readonly string[]): Record<string, unknown> => {
    const key = pick(keys);
    switch (int(0, 14)) {
      case 0:
      case 1:
        return { key, match: { value: pick([pick(WORDS), pick(UUIDS), int(-3, 8), chance(0.5)]) } };
      case 2:
        return { key, match: { any: anyList() } };
      case 3:
        return { key, match: { except: anyList() } };
      case 4:
        return { key, match: pick([{ text: pick(['red', 'ed', 'blue', 'R', '']) }, { phrase: pick(['light red', 'k b']) }, { text_any: pick(['dark red', 'gre x', ' ']) }]) };
      case 5:
      case 6:
        return { key, range: bounds(() => int(-12, 36) / 4) };
      case 7:
        return { key, range: bounds(() => pick(DATES.filter((d) => d.length > 10 && !d.includes(' ')))) };
      case 8:
        return { key, geo_radius: { center: geo(), radius: rnd() * 3e6 } };
      case 9: {
        const a = geo();
        const b = geo();
        return {
          key,
          geo_bounding_box: {
            top_left: { lon: a.lon, lat: Math.max(a.lat, b.lat) },
            bottom_right: { lon: b.lon, lat: Math.min(a.lat, b.lat) },
          },
        };
      }
      case 10: {
        const cx = rnd() * 40 - 20;
        const cy = rnd() * 40 - 20;
        const s = 5 + rnd() * 15;
        const pts = [
          { lon: cx - s, lat: cy - s },
          { lon: cx + s, lat: cy - s * rnd() },
          { lon: cx + s * rnd(), lat: cy + s },
          { lon: cx - s, lat: cy + s * rnd() },
        ];
        return { key, geo_polygon: { exterior: { points: [...pts, pts[0]] } } };
      }
      case 11:
        return { key, values_count: bounds(() => int(0, 3)) };
      case 12:
        return chance(0.5) ? { key, is_empty: chance(0.5) } : chance(0.5) ? { is_null: { key } } : { is_empty: { key } };
      case 13:
        return { key, match: { value: int(-3, 8) }, range: bounds(() => int(-12, 36) / 4) };
      default:
        return { key, match: { value: pick(WORDS) } };
    }
  };
  /** A condition of the kind the index on `key` answers (when there is one). */
  const typedCond = (keys: readonly string[]): Record<string, unknown> => {
    const key = pick(keys);
    const kind = TYPED_KEYS[key.replace(/\[\]/g, '')] ?? TYPED_KEYS[key];
    switch (kind) {
      case 'keyword':
      case 'text':
        return chance(0.6)
          ? { key, match: chance(0.5) ? { value: pick(WORDS) } : { any: [...new Set([pick(WORDS), pick(WORDS)])] } }
          : { key, match: pick([{ text: pick(['red', 'ed', 'blue', 'R']) }, { phrase: 'k b' }, { text_any: 'dark gre' }]) };
      case 'integer':
        return chance(0.5) ? { key, match: chance(0.5) ? { value: int(-3, 8) } : { any: [int(-3, 8), int(-3, 8)] } } : { key, range: bounds(() => int(-12, 36) / 4) };
      case 'float':
        return { key, range: bounds(() => int(-12, 36) / 4) };
      case 'bool':
        return { key, match: { value: chance(0.5) } };
      case 'uuid':
        return { key, match: { value: pick(UUIDS) } };
      case 'datetime':
        return { key, range: bounds(() => pick(DATES.filter((d) => d.length > 10 && !d.includes(' ')))) };
      case 'geo':
        return { key, geo_radius: { center: geo(), radius: rnd() * 3e6 } };
      default:
        return fieldCond(keys);
    }
  };
  const filter = (depth: number, keys: readonly string[], inNested: boolean): Record<string, unknown> => {
    const cond = (): Record<string, unknown> => {
      const r = rnd();
      if (r < 0.35) return typedCond(keys);
      if (depth > 0 && r < 0.1) return filter(depth - 1, keys, inNested);
      if (depth > 0 && r < 0.22) return { nested: { key: pick(['arr', 'arr[]', 'obj', 'obj[]']), filter: filter(depth - 1, INNER, true) } };
      if (!inNested && r < 0.25) return { has_id: Array.from({ length: int(0, 3) }, () => int(0, 50)) };
      return fieldCond(keys);
    };
    const clause = () => Array.from({ length: int(0, 3) }, cond);
    const f: Record<string, unknown> = {};
    if (chance(0.85)) f.must = clause();
    if (chance(0.3)) f.should = clause();
    if (chance(0.2)) f.must_not = clause();
    if (chance(0.2)) f.min_should = { conditions: Array.from({ length: int(0, 4) }, cond), min_count: int(0, 3) };
    return f;
  };
  return { payload, filter: () => filter(2, KEYS, false) };
}

test('randomized: candidates are a superset of the filter.ts matches, also after updates', (t) => {
  const seed = process.env.PAYLOAD_INDEX_SEED ? Number(process.env.PAYLOAD_INDEX_SEED) : (Date.now() ^ (Math.random() * 2 ** 31)) >>> 0;
  t.log(`PAYLOAD_INDEX_SEED=${seed}`);
  const rnd = mulberry32(seed);
  const g = gen(rnd);
  const N = 1500;
  const payloads = new Map<number, P>();
  for (let i = 0; i < N; i++) payloads.set(i, g.payload());
  const pi = new PayloadIndexes();
  pi.universe = { size: () => payloads.size, offsets: () => [...payloads.keys()].map((o) => BigInt(o)) };
  for (const [field, schema] of Object.entries(RANDOM_INDEXES)) {
    pi.create(field, parseFieldSchema(schema), [...payloads].map(([o, p]) => [BigInt(o), p] as [bigint, P]));
  }
  let answered = 0;
  let total = 0;
  let candSum = 0;
  let matchSum = 0;
  for (let round = 0; round < 4; round++) {
    for (let fi = 0; fi < 120; fi++) {
      const raw = g.filter();
      const f = validateFilter(raw) as Filter;
      const pred = compileFilter(f, (n, m) => pi.textMatcher(n, m));
      const brute = new Set<number>();
      for (const [o, p] of payloads) if (pred(o as PointId, p)) brute.add(o);
      const c = pi.candidates(f);
      total++;
      if (c === null) continue;
      answered++;
      const cs = new Set([...c].map(Number));
      const missed = [...brute].filter((o) => !cs.has(o));
      if (missed.length > 0) {
        const o = missed[0];
        t.fail(`PAYLOAD_INDEX_SEED=${seed} round ${round} filter ${JSON.stringify(raw)} misses offset ${o} payload ${JSON.stringify(payloads.get(o))}`);
        return;
      }
      for (const o of cs) {
        if (!payloads.has(o)) {
          t.fail(`PAYLOAD_INDEX_SEED=${seed}: candidate ${o} is not a live point (filter ${JSON.stringify(raw)})`);
          return;
        }
      }
      const exact = [...cs].filter((o) => pred(o as PointId, payloads.get(o)!)).sort((a, b) => a - b);
      t.deepEqual(exact, [...brute].sort((a, b) => a - b));
      candSum += cs.size;
      matchSum += brute.size;
    }
    // random updates: new payloads, removals, new points
    for (let u = 0; u < 600; u++) {
      const o = Math.floor(rnd() * (N + 300));
      if (rnd() < 0.15) {
        payloads.delete(o);
        pi.update(BigInt(o), null);
      } else {
        const p = g.payload();
        payloads.set(o, p);
        pi.update(BigInt(o), p);
      }
    }
    // order_by agrees with a brute-force sort of the current payloads
    for (const [field, kind] of [['n', 'integer'], ['f', 'float'], ['when', 'datetime']] as const) {
      const want: [number, number][] = [];
      for (const [o, p] of payloads) {
        const vals = new Set<number>();
        const walk = (v: unknown) => {
          if (Array.isArray(v)) v.forEach(walk);
          else if (kind === 'datetime') {
            if (typeof v === 'string' && !Number.isNaN(parseDatetime(v))) vals.add(Math.round(parseDatetime(v) * 1000));
          } else if (typeof v === 'number' && (kind === 'float' || Number.isInteger(v))) vals.add(v);
        };
        if (p) walk(p[field]);
        for (const v of vals) want.push([o, v]);
      }
      want.sort((a, b) => a[1] - b[1] || a[0] - b[0]);
      t.deepEqual([...pi.orderValues(field)].map((e) => [Number(e.offset), e.value]), want, `order_by ${field}`);
      t.deepEqual([...pi.orderValues(field, { direction: 'desc' })].map((e) => [Number(e.offset), e.value]), want.reverse());
    }
  }
  // the index after all updates equals one built from scratch
  const fresh = new PayloadIndexes();
  for (const [field, schema] of Object.entries(RANDOM_INDEXES)) {
    fresh.create(field, parseFieldSchema(schema), [...payloads].map(([o, p]) => [BigInt(o), p] as [bigint, P]));
  }
  t.deepEqual(pi.schemaInfo(), fresh.schemaInfo());
  t.log(`${answered}/${total} filters narrowed by indexes; candidates ${candSum}, matches ${matchSum}`);
  t.true(answered > total / 3, 'most random filters should be answerable');
});
