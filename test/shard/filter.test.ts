/**
 * Filter evaluation (ts/shard/filter.ts): hand-checked cases for every condition type,
 * validation errors that name the bad part, and a randomized comparison of
 * compileFilter against a naive reference evaluator written here (raw JSON filters,
 * recursion, nothing pre-parsed). Replay a failure with FILTER_SEED=<seed>.
 */

import test from 'ava';

import {
  Filter,
  FilterError,
  PointId,
  compileFilter,
  filterKeys,
  matches,
  parseDatetime,
  validateFilter,
} from '../../ts/shard/filter';
import { mulberry32 } from '../support/rng';

type P = Record<string, unknown> | null;

function m(filter: unknown, payload: P, id: PointId = 1): boolean {
  return matches(validateFilter(filter), id, payload);
}
function fc(key: string, cond: Record<string, unknown>): unknown {
  return { must: [{ key, ...cond }] };
}

// ---------------------------------------------------------------------------------
// match

test('match value: strings, integers, bools, type-strict, arrays, missing, null', (t) => {
  const f = fc('color', { match: { value: 'red' } });
  t.true(m(f, { color: 'red' }));
  t.false(m(f, { color: 'Red' }));
  t.true(m(f, { color: ['blue', 'red'] }));
  t.false(m(f, { color: [] }));
  t.false(m(f, { color: null }));
  t.false(m(f, {}));
  t.false(m(f, null));
  t.true(m(fc('n', { match: { value: 3 } }), { n: 3 }));
  t.true(m(fc('n', { match: { value: 3 } }), { n: 3.0 }));
  t.false(m(fc('n', { match: { value: 3 } }), { n: 3.5 }));
  t.false(m(fc('n', { match: { value: 3 } }), { n: '3' }));
  t.false(m(fc('s', { match: { value: '3' } }), { s: 3 }));
  t.true(m(fc('b', { match: { value: true } }), { b: [false, true] }));
  t.false(m(fc('b', { match: { value: true } }), { b: 1 }));
  // arrays of arrays are flattened
  t.true(m(fc('n', { match: { value: 4 } }), { n: [[1, [4]], 2] }));
});

test('match any', (t) => {
  const f = fc('color', { match: { any: ['red', 'green'] } });
  t.true(m(f, { color: 'green' }));
  t.true(m(f, { color: ['black', 'red'] }));
  t.false(m(f, { color: ['black'] }));
  t.false(m(f, {}));
  t.false(m(f, { color: null }));
  t.true(m(fc('n', { match: { any: [1, 2] } }), { n: [5, 2] }));
  t.false(m(fc('n', { match: { any: [1, 2] } }), { n: '1' }));
  t.false(m(fc('n', { match: { any: [] } }), { n: 1 }));
});

test('match except: at least one non-null value outside the list; missing/null/[] match', (t) => {
  const f = fc('color', { match: { except: ['red', 'green'] } });
  t.true(m(f, { color: 'blue' }));
  t.false(m(f, { color: 'red' }));
  t.false(m(f, { color: ['red', 'green'] }));
  t.true(m(f, { color: ['red', 'blue'] }));
  t.true(m(f, {}), 'missing key: nothing it holds is excluded');
  t.true(m(f, { color: null }));
  t.true(m(f, { color: [] }));
  t.true(m(f, { color: [null] }));
  t.false(m(f, { color: [null, 'red'] }));
  t.true(m(f, { color: 5 }), 'a value of another type is not in the list');
  t.true(m(f, { color: true }));
  t.true(m(fc('n', { match: { except: [1] } }), { n: [1, 2] }));
  t.false(m(fc('n', { match: { except: [1] } }), { n: [1, 1] }));
  // except inside must_not = "all values are in the list (and there is one)"
  t.true(m({ must_not: [{ key: 'n', match: { except: [1, 2] } }] }, { n: [1, 2] }));
});

test('match text / phrase / text_any: case-sensitive substring', (t) => {
  t.true(m(fc('d', { match: { text: 'quick brown' } }), { d: 'the quick brown fox' }));
  t.false(m(fc('d', { match: { text: 'Quick' } }), { d: 'the quick brown fox' }));
  t.true(m(fc('d', { match: { text: 'fox' } }), { d: ['cat', 'firefox'] }));
  t.false(m(fc('d', { match: { text: '1' } }), { d: 1 }));
  t.true(m(fc('d', { match: { phrase: 'brown fox' } }), { d: 'the quick brown fox' }));
  t.false(m(fc('d', { match: { phrase: 'fox brown' } }), { d: 'the quick brown fox' }));
  t.true(m(fc('d', { match: { text_any: 'zebra fox' } }), { d: 'the quick brown fox' }));
  t.false(m(fc('d', { match: { text_any: 'zebra lion' } }), { d: 'the quick brown fox' }));
  t.false(m(fc('d', { match: { text_any: '   ' } }), { d: 'the quick brown fox' }));
  t.false(m(fc('d', { match: { text: 'x' } }), {}));
});

// ---------------------------------------------------------------------------------
// range, datetime

test('range on numbers, any element, bounds inclusive/exclusive, non-numbers ignored', (t) => {
  t.true(m(fc('n', { range: { gte: 1, lt: 3 } }), { n: 1 }));
  t.false(m(fc('n', { range: { gte: 1, lt: 3 } }), { n: 3 }));
  t.true(m(fc('n', { range: { gt: 1, lte: 3 } }), { n: 3 }));
  t.false(m(fc('n', { range: { gt: 1 } }), { n: 1 }));
  t.true(m(fc('n', { range: { gt: 10 } }), { n: [1, 20] }));
  t.false(m(fc('n', { range: { gt: 10 } }), { n: ['20', true, null] }));
  t.false(m(fc('n', { range: { gt: 10 } }), {}));
  t.true(m(fc('n', { range: {} }), { n: -1e300 }), 'empty range: any number');
  t.false(m(fc('n', { range: {} }), { n: 'x' }));
  t.true(m(fc('n', { range: { lt: 0.5, gt: null } }), { n: 0.25 }));
});

test('datetime range: RFC 3339 with and without zone (UTC assumed), date-only', (t) => {
  const f = fc('ts', { range: { gte: '2024-01-01T00:00:00Z', lt: '2024-01-02T00:00:00+00:00' } });
  t.true(m(f, { ts: '2024-01-01T12:00:00Z' }));
  t.true(m(f, { ts: '2024-01-01T12:00:00' }), 'no zone: UTC');
  t.true(m(f, { ts: '2024-01-01 12:00' }));
  t.true(m(f, { ts: '2024-01-01' }));
  t.false(m(f, { ts: '2024-01-02' }));
  t.true(m(f, { ts: '2024-01-02T01:00:00+02:00' }), '= 2024-01-01T23:00Z');
  t.false(m(f, { ts: '2024-01-01T23:30:00-01:00' }), '= 2024-01-02T00:30Z');
  t.true(m(f, { ts: ['1999-01-01T00:00:00Z', '2024-01-01T00:00:00.000Z'] }));
  t.false(m(f, { ts: 'not a date' }));
  t.false(m(f, { ts: 1704067200000 }), 'numbers are not datetimes');
  t.false(m(f, { ts: '2024-02-30' }));
  t.is(parseDatetime('1970-01-01T00:00:01.5Z'), 1500);
  t.is(parseDatetime('2024-03-01T00:00:00Z'), Date.UTC(2024, 2, 1));
  t.is(parseDatetime('0001-01-01T00:00:00Z'), -62135596800000);
  t.is(parseDatetime('2024-06-01T10:00:00+0530'), Date.UTC(2024, 5, 1, 4, 30));
  t.true(Number.isNaN(parseDatetime('2024-01-01Z')));
});

// ---------------------------------------------------------------------------------
// geo

const berlin = { lon: 13.405, lat: 52.52 };
const potsdam = { lon: 13.0645, lat: 52.3906 };
const paris = { lon: 2.3522, lat: 48.8566 };

test('geo radius (haversine, meters), arrays of points, bad points ignored', (t) => {
  // Berlin-Potsdam is about 26.8 km
  t.true(m(fc('loc', { geo_radius: { center: berlin, radius: 30000 } }), { loc: potsdam }));
  t.false(m(fc('loc', { geo_radius: { center: berlin, radius: 20000 } }), { loc: potsdam }));
  t.true(m(fc('loc', { geo_radius: { center: berlin, radius: 30000 } }), { loc: [paris, potsdam] }));
  t.false(m(fc('loc', { geo_radius: { center: berlin, radius: 1e7 } }), { loc: { lat: 'x', lon: 1 } }));
  t.false(m(fc('loc', { geo_radius: { center: berlin, radius: 1e7 } }), {}));
  t.true(m(fc('loc', { geo_radius: { center: berlin, radius: 0 } }), { loc: berlin }));
});

test('geo bounding box, inclusive, antimeridian wrap', (t) => {
  const box = { top_left: { lon: 10, lat: 55 }, bottom_right: { lon: 15, lat: 50 } };
  t.true(m(fc('loc', { geo_bounding_box: box }), { loc: berlin }));
  t.false(m(fc('loc', { geo_bounding_box: box }), { loc: paris }));
  t.true(m(fc('loc', { geo_bounding_box: box }), { loc: { lon: 10, lat: 50 } }));
  const wrap = { top_left: { lon: 170, lat: 10 }, bottom_right: { lon: -170, lat: -10 } };
  t.true(m(fc('loc', { geo_bounding_box: wrap }), { loc: { lon: 179, lat: 0 } }));
  t.true(m(fc('loc', { geo_bounding_box: wrap }), { loc: { lon: -175, lat: 0 } }));
  t.false(m(fc('loc', { geo_bounding_box: wrap }), { loc: { lon: 0, lat: 0 } }));
});

test('geo polygon with a hole', (t) => {
  const ring = (pts: number[][]) => ({ points: pts.map(([lon, lat]) => ({ lon, lat })) });
  const poly = {
    exterior: ring([[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]]),
    interiors: [ring([[4, 4], [6, 4], [6, 6], [4, 6], [4, 4]])],
  };
  t.true(m(fc('loc', { geo_polygon: poly }), { loc: { lon: 2, lat: 2 } }));
  t.false(m(fc('loc', { geo_polygon: poly }), { loc: { lon: 5, lat: 5 } }));
  t.false(m(fc('loc', { geo_polygon: poly }), { loc: { lon: 11, lat: 5 } }));
  t.true(m(fc('loc', { geo_polygon: poly }), { loc: [{ lon: 5, lat: 5 }, { lon: 8, lat: 9 }] }));
  t.true(m(fc('loc', { geo_polygon: { exterior: poly.exterior } }), { loc: { lon: 5, lat: 5 } }));
});

// ---------------------------------------------------------------------------------
// values_count, is_empty, is_null

test('values_count: array length, 1 for a scalar, 0 when missing or null', (t) => {
  const c = (vc: Record<string, number>, p: P) => m(fc('a', { values_count: vc }), p);
  t.true(c({ gte: 3 }, { a: [1, 2, 3] }));
  t.false(c({ gt: 3 }, { a: [1, 2, 3] }));
  t.true(c({ lte: 1, gte: 1 }, { a: 'x' }));
  t.true(c({ lt: 1 }, {}));
  t.true(c({ lt: 1 }, { a: null }));
  t.true(c({ lt: 1 }, { a: [] }));
  t.true(c({ gte: 1, lte: 1 }, { a: [null] }));
  t.true(c({ gte: 1, lte: 1 }, { a: { x: 1, y: 2 } }), 'an object is one value');
  // summed over the values reached through an array of objects
  t.true(m(fc('o.v', { values_count: { gte: 3, lte: 3 } }), { o: [{ v: [1, 2] }, { v: 3 }, { w: 1 }] }));
});

test('is_empty: missing, null, [] are empty; [null], 0, "" are not', (t) => {
  const e = (p: P) => m({ must: [{ is_empty: { key: 'a' } }] }, p);
  t.true(e({}));
  t.true(e(null));
  t.true(e({ a: null }));
  t.true(e({ a: [] }));
  t.false(e({ a: [null] }));
  t.false(e({ a: 0 }));
  t.false(e({ a: '' }));
  t.false(e({ a: {} }));
  // FieldCondition alternative syntax, and its negation
  t.true(m(fc('a', { is_empty: true }), { a: [] }));
  t.false(m(fc('a', { is_empty: false }), { a: [] }));
  t.true(m(fc('a', { is_empty: false }), { a: [1] }));
  // through arrays of objects: empty only if every reached value is empty
  t.true(e({ a: [{ x: 1 }] }) === false);
  t.true(m({ must: [{ is_empty: { key: 'o.v' } }] }, { o: [{ v: [] }, { v: null }, {}] }));
  t.false(m({ must: [{ is_empty: { key: 'o.v' } }] }, { o: [{ v: [] }, { v: 2 }] }));
});

test('is_null: exactly null; arrays (even [null]) and missing keys are not null', (t) => {
  const n = (p: P) => m({ must: [{ is_null: { key: 'a' } }] }, p);
  t.true(n({ a: null }));
  t.false(n({}));
  t.false(n({ a: [] }));
  t.false(n({ a: [null] }));
  t.false(n({ a: 0 }));
  t.true(m(fc('a', { is_null: true }), { a: null }));
  t.true(m(fc('a', { is_null: false }), { a: 1 }));
  t.true(m({ must: [{ is_null: { key: 'o.v' } }] }, { o: [{ v: 1 }, { v: null }] }));
});

// ---------------------------------------------------------------------------------
// has_id, has_vector

test('has_id: integers and UUIDs (case-insensitive, simple or hyphenated form)', (t) => {
  const u = '550e8400-e29b-41d4-a716-446655440000';
  const f = { must: [{ has_id: [1, 7, u.toUpperCase()] }] };
  t.true(m(f, {}, 7));
  t.false(m(f, {}, 8));
  t.true(m(f, {}, u));
  t.true(m(f, {}, u.replace(/-/g, '')));
  t.false(m(f, {}, '550e8400-e29b-41d4-a716-446655440001'));
  t.false(m(f, {}, '7'));
  t.false(m({ must: [{ has_id: [] }] }, {}, 1));
});

test('has_vector uses the optional callback', (t) => {
  const p = compileFilter(validateFilter({ must: [{ has_vector: 'image' }] }));
  t.true(p(1, {}, (n) => n === 'image'));
  t.false(p(1, {}, (n) => n === 'text'));
  t.false(p(1, {}));
});

// ---------------------------------------------------------------------------------
// paths and nested

test('key paths: dots, flattening through arrays, a[].b, a[]', (t) => {
  const payload = {
    country: { name: 'Germany', cities: [{ name: 'Berlin', pop: 3.7 }, { name: 'Bonn', pop: 0.3, tags: ['a', 'b'] }] },
    deep: [[{ x: 1 }], [{ x: 2 }]],
    scalar: 5,
  };
  t.true(m(fc('country.name', { match: { value: 'Germany' } }), payload));
  t.true(m(fc('country.cities.name', { match: { value: 'Bonn' } }), payload));
  t.true(m(fc('country.cities[].name', { match: { value: 'Bonn' } }), payload));
  t.true(m(fc('country.cities[].tags', { match: { value: 'b' } }), payload));
  t.true(m(fc('deep.x', { match: { value: 2 } }), payload), 'arrays of arrays are walked');
  t.false(m(fc('country.name.x', { match: { value: 'Germany' } }), payload));
  t.false(m(fc('scalar[]', { match: { value: 5 } }), payload), 'a[] on a non-array yields nothing');
  t.true(m(fc('scalar', { match: { value: 5 } }), payload));
  // values_count differs between `a` (one array value) and `a[]` (its elements)
  t.true(m(fc('arr', { values_count: { gte: 2, lte: 2 } }), { arr: [[1, 2, 3], 4] }));
  t.true(m(fc('arr[]', { values_count: { gte: 4, lte: 4 } }), { arr: [[1, 2, 3], 4] }));
  // keys that look like Object.prototype members are only own properties
  t.false(m({ must: [{ is_empty: { key: 'constructor' } }] }, { constructor: 1 }) === true);
  t.true(m({ must: [{ is_empty: { key: 'toString' } }] }, {}));
});

test('nested: one element must satisfy the whole inner filter (unlike flattened keys)', (t) => {
  const payload = {
    diet: [
      { food: 'meat', likes: false },
      { food: 'leaves', likes: true },
    ],
  };
  const flat = {
    must: [
      { key: 'diet[].food', match: { value: 'meat' } },
      { key: 'diet[].likes', match: { value: true } },
    ],
  };
  const nested = {
    must: [
      {
        nested: {
          key: 'diet',
          filter: {
            must: [
              { key: 'food', match: { value: 'meat' } },
              { key: 'likes', match: { value: true } },
            ],
          },
        },
      },
    ],
  };
  t.true(m(flat, payload), 'flattened: fields mix across elements');
  t.false(m(nested, payload), 'nested: no single element has both');
  t.true(m(nested, { diet: [{ food: 'meat', likes: true }] }));
  t.false(m(nested, {}));
  t.false(m(nested, { diet: ['meat', true] }), 'non-object elements never satisfy');
  // must_not inside nested is per element
  const nn = { must: [{ nested: { key: 'diet', filter: { must_not: [{ key: 'likes', match: { value: true } }] } } }] };
  t.true(m(nn, payload));
  t.false(m(nn, { diet: [{ likes: true }] }));
  // nested in nested, and nested key through an object
  const deep = {
    must: [
      {
        nested: {
          key: 'a.b',
          filter: { must: [{ nested: { key: 'c', filter: { must: [{ key: 'd', range: { gt: 1 } }] } } }] },
        },
      },
    ],
  };
  t.true(m(deep, { a: { b: [{ c: [{ d: 0 }, { d: 2 }] }] } }));
  t.false(m(deep, { a: { b: [{ c: [{ d: 0 }] }, { e: 5 }] } }));
});

// ---------------------------------------------------------------------------------
// boolean structure

test('must / should / must_not / min_should / sub-filters / single-condition clauses', (t) => {
  const red = { key: 'c', match: { value: 'red' } };
  const big = { key: 'n', range: { gt: 10 } };
  const one = { key: 'k', match: { value: 1 } };
  t.true(m({}, {}), 'empty filter matches everything');
  t.true(m({ must: [], should: [], must_not: [] }, {}), 'empty should is no constraint');
  t.true(m({ must: red }, { c: 'red' }), 'single condition instead of a list');
  t.true(m({ should: [red, big] }, { n: 11 }));
  t.false(m({ should: [red, big] }, { n: 1 }));
  t.false(m({ must_not: [red, big] }, { n: 11 }));
  t.true(m({ must_not: [red, big] }, { n: 1 }));
  t.true(m({ must: null, should: null }, {}));
  const ms = (k: number) => ({ min_should: { conditions: [red, big, one], min_count: k } });
  const p = { c: 'red', n: 11, k: 2 };
  t.true(m(ms(0), {}));
  t.true(m(ms(2), p));
  t.false(m(ms(3), p));
  t.true(m(ms(3), { ...p, k: 1 }));
  t.false(m({ min_should: { conditions: [], min_count: 1 } }, {}));
  // nested boolean filters as conditions
  t.true(m({ must: [{ should: [red, { must_not: [big] }] }] }, { n: 1 }));
  t.false(m({ must: [{ should: [red, { must_not: [big] }] }] }, { n: 20 }));
  // all clauses together
  const all = { must: [red], should: [big, one], must_not: [{ key: 'x', match: { any: [1] } }], min_should: { conditions: [big, one], min_count: 2 } };
  t.true(m(all, { c: 'red', n: 11, k: 1 }));
  t.false(m(all, { c: 'red', n: 11, k: 1, x: 1 }));
  t.false(m(all, { c: 'red', n: 11 }));
  // several conditions in one FieldCondition must all hold
  t.true(m(fc('n', { range: { gt: 1 }, values_count: { lt: 2 } }), { n: 5 }));
  t.false(m(fc('n', { range: { gt: 1 }, values_count: { lt: 2 } }), { n: [5, 6] }));
});

// ---------------------------------------------------------------------------------
// validation

function err(t: import('ava').ExecutionContext, filter: unknown, message: string | RegExp): void {
  const e = t.throws(() => validateFilter(filter), { instanceOf: FilterError });
  if (typeof message === 'string') t.is(e?.message, message);
  else t.regex(e?.message ?? '', message);
}

test('validation errors name the path of the bad part', (t) => {
  err(t, 5, /^expected an object/);
  err(t, { must: [{ key: 'a', match: { value: 1 } }, { key: 'b', range: 5 }] }, 'must[1].range: expected an object, got number');
  err(t, { must: [{ key: 'a', range: [] }] }, 'must[0].range: expected an object, got an array');
  err(t, { should: { key: 'a' } }, /^should: a field condition needs at least one of/);
  err(t, { must: [{ key: 'a', match: { value: 1.5 } }] }, /^must\[0\]\.match\.value: expected a string, an integer/);
  err(t, { must: [{ key: 'a', match: { value: 1, any: [1] } }] }, /^must\[0\]\.match: expected exactly one of/);
  err(t, { must: [{ key: 'a', match: { any: ['x', 1] } }] }, /^must\[0\]\.match\.any\[1\]: expected a string/);
  err(t, { must: [{ key: 'a', match: { colour: 'x' } }] }, /^must\[0\]\.match: unknown field "colour"/);
  err(t, { must: [{ key: 'a', range: { gt: 1, lt: '2020-01-01' } }] }, /^must\[0\]\.range: bounds must be all numbers/);
  err(t, { must: [{ key: 'a', range: { gt: '2020-13-01' } }] }, /^must\[0\]\.range\.gt: invalid RFC 3339 datetime/);
  err(t, { must: [{ key: 'a', range: { gt: Infinity } }] }, /^must\[0\]\.range\.gt: expected a finite number/);
  err(t, { must: [{ key: 'a', geo_radius: { center: { lon: 1, lat: 91 }, radius: 1 } }] }, /^must\[0\]\.geo_radius\.center\.lat: latitude 91/);
  err(t, { must: [{ key: 'a', geo_radius: { center: { lon: 1, lat: 1 } } }] }, /^must\[0\]\.geo_radius\.radius: expected a finite number/);
  err(t, { must: [{ key: 'a', geo_polygon: { exterior: { points: [{ lon: 0, lat: 0 }] } } }] }, /^must\[0\]\.geo_polygon\.exterior\.points: a polygon ring needs at least 4 points/);
  err(
    t,
    { must: [{ key: 'a', geo_polygon: { exterior: { points: [{ lon: 0, lat: 0 }, { lon: 1, lat: 0 }, { lon: 1, lat: 1 }, { lon: 0, lat: 1 }] } } }] },
    /first and last points of a ring must be the same/,
  );
  err(t, { must: [{ key: 'a', values_count: { gt: -1 } }] }, /^must\[0\]\.values_count\.gt: expected an unsigned integer/);
  err(t, { must: [{ key: 'a', is_empty: 'yes' }] }, /^must\[0\]\.is_empty: expected a boolean/);
  err(t, { must: [{ is_empty: { key: 5 } }] }, /^must\[0\]\.is_empty\.key: expected a string/);
  err(t, { must: [{ has_id: [1, -2] }] }, /^must\[0\]\.has_id\[1\]: expected an unsigned integer/);
  err(t, { must: [{ has_id: ['nope'] }] }, /^must\[0\]\.has_id\[0\]: "nope" is not a UUID/);
  err(t, { must: [{ key: 'a[0]', match: { value: 1 } }] }, /^must\[0\]\.key: unsupported key path "a\[0\]"/);
  err(t, { must: [{ key: '', match: { value: 1 } }] }, /^must\[0\]\.key: expected a non-empty string/);
  err(t, { must: [{ key: 'a..b', match: { value: 1 } }] }, /^must\[0\]\.key: unsupported key path/);
  err(t, { must: [{ nested: { key: 'a', filter: { must: [{ has_id: [1] }] } } }] }, 'must[0].nested.filter.must[0].has_id: has_id is not supported inside a nested filter');
  err(t, { must: [{ nested: { key: 'a', filter: { must: [{ key: 'b', range: 'x' }] } } }] }, 'must[0].nested.filter.must[0].range: expected an object, got string');
  err(t, { must: [{ nested: { key: 'a' } }] }, /^must\[0\]\.nested\.filter: expected an object/);
  err(t, { min_should: { conditions: [{ key: 'a', match: 3 }], min_count: 1 } }, /^min_should\.conditions\[0\]\.match: expected an object/);
  err(t, { min_should: { conditions: [] } }, /^min_should\.min_count: expected an unsigned integer/);
  err(t, { must: [{ should: [{ must_not: [{ key: 'a', match: { text: 1 } }] }] }] }, /^must\[0\]\.should\[0\]\.must_not\[0\]\.match\.text: expected a string/);
  err(t, { filter: [] }, /^unknown field "filter"/);
  err(t, { must: [{ must: [], bogus: 1 }] }, /^must\[0\]: unknown field "bogus"/);
});

test('validateFilter normalizes clauses to lists and drops nulls', (t) => {
  const f = validateFilter({ must: { key: 'a', match: { value: 1 }, range: null }, should: null });
  t.deepEqual(f, { must: [{ key: 'a', match: { value: 1 } }] });
});

test('filterKeys lists touched payload keys, nested keys prefixed', (t) => {
  const f = validateFilter({
    must: [{ key: 'a', match: { value: 1 } }, { has_id: [1] }, { is_empty: { key: 'b.c' } }],
    should: [{ must_not: [{ is_null: { key: 'd' } }] }, { key: 'a', range: { gt: 1 } }],
    min_should: { conditions: [{ nested: { key: 'arr', filter: { must: [{ key: 'x', match: { value: 1 } }] } } }], min_count: 1 },
  });
  t.deepEqual(filterKeys(f), ['a', 'b.c', 'd', 'arr', 'arr[].x']);
  t.deepEqual(filterKeys(validateFilter({})), []);
});

// ---------------------------------------------------------------------------------
// randomized comparison with a naive reference evaluator


type J = unknown;

/** Reference: values at the end of a dotted path, naive recursion over the string. */
function refRaw(v: J, segs: string[]): J[] {
  if (segs.length === 0) return [v];
  if (Array.isArray(v)) return v.flatMap((e) => refRaw(e, segs));
  if (v === null || typeof v !== 'object') return [];
  const seg = segs[0];
  const name = seg.replace(/\[\]/g, '');
  const brackets = (seg.length - name.length) / 2;
  if (!Object.keys(v).includes(name)) return [];
  let vals: J[] = [(v as Record<string, J>)[name]];
  for (let i = 0; i < brackets; i++) vals = vals.flatMap((x) => (Array.isArray(x) ? x : []));
  return vals.flatMap((x) => refRaw(x, segs.slice(1)));
}
function refFlat(vals: J[]): J[] {
  return vals.flatMap((x) => (Array.isArray(x) ? refFlat(x) : [x]));
}
function refDate(s: string): number {
  let x = s.replace(' ', 'T');
  if (/^\d{4}-\d{2}-\d{2}$/.test(x)) x += 'T00:00:00';
  if (/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$/.test(x.replace(/(Z|[+-]\d{2}:\d{2})$/, ''))) x = x.replace(/^(.{16})/, '$1:00');
  if (!/(Z|[+-]\d{2}:\d{2})$/.test(x)) x += 'Z';
  return Date.parse(x);
}
function refInRange(r: Record<string, J>, x: number, conv: (b: J) => number): boolean {
  const ok = (k: string, f: (b: number) => boolean) => r[k] === undefined || r[k] === null || f(conv(r[k]));
  return ok('gt', (b) => x > b) && ok('gte', (b) => x >= b) && ok('lt', (b) => x < b) && ok('lte', (b) => x <= b);
}
function refGeo(v: J): { lat: number; lon: number } | null {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return null;
  const o = v as Record<string, J>;
  return typeof o.lat === 'number' && typeof o.lon === 'number' ? { lat: o.lat, lon: o.lon } : null;
}
function refDist(a: { lat: number; lon: number }, b: { lat: number; lon: number }): number {
  const r = Math.PI / 180;
  const h =
    (1 - Math.cos((b.lat - a.lat) * r)) / 2 + (Math.cos(a.lat * r) * Math.cos(b.lat * r) * (1 - Math.cos((b.lon - a.lon) * r))) / 2;
  return 2 * 6371008.8 * Math.atan2(Math.sqrt(h), Math.sqrt(1 - h));
}
/** Winding number (a different algorithm from the module's ray casting). */
function refInRing(p: { lat: number; lon: number }, ring: { lat: number; lon: number }[]): boolean {
  let wn = 0;
  for (let i = 0; i + 1 < ring.length; i++) {
    const a = ring[i];
    const b = ring[i + 1];
    const side = (b.lon - a.lon) * (p.lat - a.lat) - (p.lon - a.lon) * (b.lat - a.lat);
    if (a.lat <= p.lat) {
      if (b.lat > p.lat && side > 0) wn++;
    } else if (b.lat <= p.lat && side < 0) wn--;
  }
  return wn !== 0;
}
function refList(c: J): J[] {
  if (c === undefined || c === null) return [];
  return Array.isArray(c) ? c : [c];
}

function refFilter(f: Record<string, J>, id: PointId, payload: J): boolean {
  const must = refList(f.must);
  const should = refList(f.should);
  const mustNot = refList(f.must_not);
  if (!must.every((c) => refCond(c as Record<string, J>, id, payload))) return false;
  if (mustNot.some((c) => refCond(c as Record<string, J>, id, payload))) return false;
  if (should.length > 0 && !should.some((c) => refCond(c as Record<string, J>, id, payload))) return false;
  const ms = f.min_should as { conditions: J[]; min_count: number } | undefined | null;
  if (ms) {
    const n = ms.conditions.filter((c) => refCond(c as Record<string, J>, id, payload)).length;
    if (n < ms.min_count) return false;
  }
  return true;
}

function refCond(c: Record<string, J>, id: PointId, payload: J): boolean {
  if (typeof c.key === 'string') {
    const raw = refRaw(payload, c.key.split('.'));
    const flat = refFlat(raw);
    let ok = true;
    const mt = c.match as Record<string, J> | undefined;
    if (mt) {
      if ('value' in mt) ok &&= flat.some((v) => v === mt.value);
      if ('any' in mt) ok &&= flat.some((v) => (mt.any as J[]).includes(v));
      if ('except' in mt) {
        const nn = flat.filter((v) => v !== null);
        ok &&= nn.length === 0 || nn.some((v) => !(mt.except as J[]).includes(v));
      }
      if ('text' in mt) ok &&= flat.some((v) => typeof v === 'string' && v.indexOf(mt.text as string) >= 0);
      if ('phrase' in mt) ok &&= flat.some((v) => typeof v === 'string' && v.indexOf(mt.phrase as string) >= 0);
      if ('text_any' in mt) {
        const words = (mt.text_any as string).split(' ').filter((w) => w !== '');
        ok &&= flat.some((v) => typeof v === 'string' && words.some((w) => v.indexOf(w) >= 0));
      }
    }
    const rg = c.range as Record<string, J> | undefined;
    if (rg) {
      const dt = Object.values(rg).some((b) => typeof b === 'string');
      ok &&= dt
        ? flat.some((v) => typeof v === 'string' && !Number.isNaN(refDate(v)) && refInRange(rg, refDate(v), (b) => refDate(b as string)))
        : flat.some((v) => typeof v === 'number' && refInRange(rg, v, (b) => b as number));
    }
    const gr = c.geo_radius as { center: { lat: number; lon: number }; radius: number } | undefined;
    if (gr) ok &&= flat.some((v) => refGeo(v) !== null && refDist(gr.center, refGeo(v)!) <= gr.radius);
    const bb = c.geo_bounding_box as Record<string, { lat: number; lon: number }> | undefined;
    if (bb) {
      ok &&= flat.some((v) => {
        const p = refGeo(v);
        if (!p) return false;
        const latOk = p.lat <= bb.top_left.lat && p.lat >= bb.bottom_right.lat;
        const lonOk =
          bb.top_left.lon <= bb.bottom_right.lon
            ? p.lon >= bb.top_left.lon && p.lon <= bb.bottom_right.lon
            : p.lon >= bb.top_left.lon || p.lon <= bb.bottom_right.lon;
        return latOk && lonOk;
      });
    }
    const gp = c.geo_polygon as { exterior: { points: { lat: number; lon: number }[] }; interiors?: { points: { lat: number; lon: number }[] }[] } | undefined;
    if (gp) {
      ok &&= flat.some((v) => {
        const p = refGeo(v);
        return !!p && refInRing(p, gp.exterior.points) && !(gp.interiors ?? []).some((r) => refInRing(p, r.points));
      });
    }
    const vc = c.values_count as Record<string, J> | undefined;
    if (vc) {
      let n = 0;
      for (const v of raw) n += v === null ? 0 : Array.isArray(v) ? v.length : 1;
      ok &&= refInRange(vc, n, (b) => b as number);
    }
    const empty = raw.every((v) => v === null || (Array.isArray(v) && v.length === 0));
    if (typeof c.is_empty === 'boolean') ok &&= empty === c.is_empty;
    if (typeof c.is_null === 'boolean') ok &&= raw.some((v) => v === null) === c.is_null;
    return ok;
  }
  if (c.is_empty) {
    const raw = refRaw(payload, (c.is_empty as { key: string }).key.split('.'));
    return raw.every((v) => v === null || (Array.isArray(v) && v.length === 0));
  }
  if (c.is_null) return refRaw(payload, (c.is_null as { key: string }).key.split('.')).some((v) => v === null);
  if (c.has_id) {
    const norm = (x: J) => (typeof x === 'string' ? x.toLowerCase().replace(/-/g, '') : x);
    return (c.has_id as J[]).some((x) => norm(x) === norm(id));
  }
  if (c.nested) {
    const n = c.nested as { key: string; filter: Record<string, J> };
    return refFlat(refRaw(payload, n.key.split('.'))).some(
      (el) => el !== null && typeof el === 'object' && !Array.isArray(el) && refFilter(n.filter, id, el),
    );
  }
  return refFilter(c, id, payload);
}

const UUIDS = ['550e8400-e29b-41d4-a716-446655440000', '6BA7B810-9DAD-11D1-80B4-00C04FD430C8', 'f47ac10b58cc4372a5670e02b2c3d479'];
const STRINGS = ['red', 'green', 'blue', 'light red', 'Red', 'dark blue', ''];
const DATES = [
  '2024-01-01',
  '2024-01-01T12:00:00Z',
  '2024-01-01T12:00:00',
  '2024-01-01 23:30',
  '2024-01-02T01:00:00+02:00',
  '2024-01-01T20:00:00.250-05:00',
  '2023-12-31T23:59:59.999Z',
  '2024-06-15T00:00:00Z',
];

function gen(rnd: () => number) {
  const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const chance = (p: number) => rnd() < p;
  const geo = () => ({ lon: Math.round((rnd() * 40 - 20) * 1000) / 1000 + 0.0001, lat: Math.round((rnd() * 40 - 20) * 1000) / 1000 + 0.0002 });

  const scalar = (): J => {
    switch (int(0, 7)) {
      case 0:
      case 1:
        return int(-2, 6);
      case 2:
        return int(-20, 60) / 4;
      case 3:
        return pick(STRINGS);
      case 4:
        return chance(0.5);
      case 5:
        return null;
      case 6:
        return pick(DATES);
      default:
        return geo();
    }
  };
  const value = (depth: number): J => {
    const r = rnd();
    if (depth <= 0 || r < 0.55) return scalar();
    if (r < 0.8) return Array.from({ length: int(0, 3) }, () => value(depth - 1));
    const o: Record<string, J> = {};
    for (const k of ['x', 'y', 'z']) if (chance(0.6)) o[k] = value(depth - 1);
    return o;
  };
  const payload = (): Record<string, J> | null => {
    if (chance(0.03)) return null;
    const p: Record<string, J> = {};
    for (const k of ['a', 'b', 'c', 'arr', 'loc', 'when']) {
      if (!chance(0.75)) continue;
      if (k === 'arr') p[k] = Array.from({ length: int(0, 3) }, () => (chance(0.85) ? value(2) : scalar()));
      else if (k === 'loc') p[k] = chance(0.5) ? geo() : Array.from({ length: int(0, 2) }, geo);
      else if (k === 'when') p[k] = chance(0.6) ? pick(DATES) : Array.from({ length: int(0, 2) }, () => pick(DATES));
      else p[k] = value(3);
    }
    return p;
  };

  const TOP_KEYS = ['a', 'b', 'c', 'a.x', 'b.y', 'arr', 'arr[]', 'arr.x', 'arr[].y', 'arr[].x.z', 'c[].x', 'loc', 'when', 'missing'];
  const INNER_KEYS = ['x', 'y', 'z', 'x.y', 'z[]', 'y.x'];
  const anyList = (): J[] =>
    chance(0.5) ? [...new Set(Array.from({ length: int(0, 3) }, () => pick(STRINGS)))] : [...new Set(Array.from({ length: int(0, 3) }, () => int(-2, 6)))];
  const bounds = (f: () => J): Record<string, J> => {
    const r: Record<string, J> = {};
    for (const b of ['gt', 'gte', 'lt', 'lte']) if (chance(0.35)) r[b] = f();
    return r;
  };
  const ring = (cx: number, cy: number, s: number) => {
    const n = int(3, 6);
    const pts = Array.from({ length: n }, (_, i) => {
      const ang = (2 * Math.PI * i) / n + rnd() * 0.5;
      const rad = s * (0.5 + rnd());
      return { lon: cx + rad * Math.cos(ang), lat: cy + rad * Math.sin(ang) };
    });
    return { points: [...pts, pts[0]] };
  };

  const fieldCond = (keys: readonly string[]): Record<string, J> => {
    const key = pick(keys);
    switch (int(0, 15)) {
      case 0:
        return { key, match: { value: pick([pick(STRINGS), int(-2, 6), chance(0.5)]) } };
      case 1:
        return { key, match: { any: anyList() } };
      case 2:
      case 3:
        return { key, match: { except: anyList() } };
      case 4:
        return { key, match: pick([{ text: pick(['red', 'blue', 'e', 'dark']) }, { phrase: pick(['light red', 'red']) }, { text_any: pick(['dark red', 'green x', ' ']) }]) };
      case 5:
      case 6:
        return { key, range: bounds(() => int(-8, 24) / 4) };
      case 7:
        return { key: chance(0.6) ? 'when' : key, range: bounds(() => pick(DATES.filter((d) => !d.includes(' ') && d.length > 10))) };
      case 8:
        return { key: chance(0.7) ? 'loc' : key, geo_radius: { center: geo(), radius: rnd() * 2e6 } };
      case 9: {
        const a = geo();
        const b = geo();
        const box = {
          top_left: { lon: a.lon, lat: Math.max(a.lat, b.lat) },
          bottom_right: { lon: b.lon, lat: Math.min(a.lat, b.lat) },
        };
        return { key: chance(0.7) ? 'loc' : key, geo_bounding_box: box };
      }
      case 10: {
        const cx = rnd() * 20 - 10;
        const cy = rnd() * 20 - 10;
        const poly: Record<string, J> = { exterior: ring(cx, cy, 12) };
        if (chance(0.5)) poly.interiors = [ring(cx, cy, 3)];
        return { key: chance(0.7) ? 'loc' : key, geo_polygon: poly };
      }
      case 11:
        return { key, values_count: bounds(() => int(0, 4)) };
      case 12:
        return chance(0.5) ? { key, is_empty: chance(0.7) } : { is_empty: { key } };
      case 13:
        return chance(0.5) ? { key, is_null: chance(0.7) } : { is_null: { key } };
      case 14:
        return { key, match: { value: int(-2, 6) }, range: bounds(() => int(-8, 24) / 4) };
      default:
        return { key, match: { value: pick(STRINGS) } };
    }
  };

  const filter = (depth: number, keys: readonly string[], inNested: boolean): Record<string, J> => {
    const cond = (): Record<string, J> => {
      const r = rnd();
      if (depth > 0 && r < 0.12) return filter(depth - 1, keys, inNested);
      if (depth > 0 && r < 0.22) {
        return { nested: { key: pick(['arr', 'arr[]', 'a', 'c', 'a.x']), filter: filter(depth - 1, INNER_KEYS, true) } };
      }
      if (!inNested && r < 0.28) {
        return { has_id: Array.from({ length: int(0, 3) }, () => (chance(0.6) ? int(0, 9) : pick(UUIDS))) };
      }
      return fieldCond(keys);
    };
    const clause = (): J => (chance(0.2) ? cond() : Array.from({ length: int(0, 3) }, cond));
    const f: Record<string, J> = {};
    if (chance(0.6)) f.must = clause();
    if (chance(0.4)) f.should = clause();
    if (chance(0.35)) f.must_not = clause();
    if (chance(0.25)) f.min_should = { conditions: Array.from({ length: int(0, 4) }, cond), min_count: int(0, 3) };
    return f;
  };

  const pointId = (): PointId => (chance(0.7) ? int(0, 9) : pick([...UUIDS, UUIDS[0].toUpperCase(), UUIDS[2].replace(/^(.{8})(.{4})(.{4})(.{4})/, '$1-$2-$3-$4-')]));
  return { payload, filter: () => filter(3, TOP_KEYS, false), pointId };
}

test('randomized: compileFilter agrees with the naive reference evaluator', (t) => {
  const seed = process.env.FILTER_SEED ? Number(process.env.FILTER_SEED) : (Date.now() ^ (Math.random() * 2 ** 31)) >>> 0;
  t.log(`FILTER_SEED=${seed}`);
  const rnd = mulberry32(seed);
  const g = gen(rnd);
  const points = Array.from({ length: 2000 }, () => ({ id: g.pointId(), payload: g.payload() }));
  const filters = Array.from({ length: 300 }, () => g.filter());
  let checked = 0;
  let trues = 0;
  for (let fi = 0; fi < filters.length; fi++) {
    const raw = filters[fi];
    const compiled = compileFilter(validateFilter(raw) as Filter);
    for (const p of points) {
      const got = compiled(p.id, p.payload);
      const want = refFilter(raw, p.id, p.payload ?? {});
      if (got !== want) {
        t.fail(
          `FILTER_SEED=${seed}: filter #${fi} ${JSON.stringify(raw)} on id ${JSON.stringify(p.id)} payload ${JSON.stringify(p.payload)}: compiled ${got}, reference ${want}`,
        );
        return;
      }
      checked++;
      if (got) trues++;
    }
  }
  t.log(`${checked} pairs agree, ${trues} matched`);
  // the generator must exercise both outcomes
  t.true(trues > checked * 0.05 && trues < checked * 0.95, `matched ${trues} of ${checked}`);
});
