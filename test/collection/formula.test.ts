/**
 * The formula language without a server: the parser of ts/api/request/formula.ts and the
 * evaluation of ts/collection/formula.ts, against values worked out here by hand from the
 * reference's documented rules (defaults, the decays' midpoint at |x - target| = scale,
 * zero factors and numerators that end an evaluation early, non-finite results refused),
 * and the greedy choice of mmr.ts on a case small enough to follow.
 */

import test from 'ava';

import { formulaQuery } from '../../ts/api/request/formula';
import { evaluate, type PointVars } from '../../ts/collection/formula';
import { mmrSelect, nearestInSample } from '../../ts/collection/mmr';

const point = (payload: Record<string, unknown>, scores: Array<number | undefined> = [0.5]): PointVars => ({ id: 1, scores, payload: payload as PointVars['payload'] });
const value = (q: Record<string, unknown>, p: PointVars) => evaluate(formulaQuery(q), p);
const kindOf = (f: () => unknown) => {
  try {
    f();
    return 'none';
  } catch (e) {
    return `${(e as { kind?: string }).kind}: ${(e as Error).message}`;
  }
};

test('variables: $score and $score[i], with defaults; payload keys, one-value arrays, defaults', (t) => {
  const p = point({ a: 2, b: [3], c: { d: 4 } }, [0.5, undefined]);
  t.is(value({ formula: '$score' }, p), 0.5);
  t.is(value({ formula: '$score[0]' }, p), 0.5);
  t.is(value({ formula: '$score[1]' }, p), 0, 'absent from prefetch 1, no default: 0');
  t.is(value({ formula: '$score[1]', defaults: { '$score[1]': 7 } }, p), 7);
  t.is(value({ formula: '$score[1]', defaults: { '$score[1]': 'seven' } }, p), 0, 'a default that is not a number counts as none');
  t.is(value({ formula: '$score[3]', defaults: { '$score[3]': 2 } }, p), 2);
  t.is(value({ formula: { sum: ['a', 'b', 'c.d'] } }, p), 9);
  t.is(value({ formula: 'x', defaults: { x: 1.5 } }, p), 1.5);
  t.is(value({ formula: 'a', defaults: { a: 100 } }, p), 2, 'the payload wins over the default');
  t.regex(kindOf(() => value({ formula: 'x' }, p)), /^bad_input: .*"x".*no value was found/);
  t.regex(kindOf(() => value({ formula: 'x', defaults: { x: 'no' } }, p)), /^bad_input: .*"x".*not a number/);
});

test('operations, and where an evaluation ends early', (t) => {
  const p = point({ n: 4, zero: 0 });
  t.is(value({ formula: { neg: { abs: -3 } } }, p), -3);
  t.is(value({ formula: { pow: { base: 'n', exponent: 0.5 } } }, p), 2);
  t.is(value({ formula: { sqrt: 'n' } }, p), 2);
  t.is(value({ formula: { log10: 100 } }, p), 2);
  t.is(value({ formula: { ln: 1 } }, p), 0);
  t.is(value({ formula: { exp: 0 } }, p), 1);
  t.is(value({ formula: { div: { left: 'n', right: 8 } } }, p), 0.5);
  t.is(value({ formula: { div: { left: 'n', right: 'zero', by_zero_default: 9 } } }, p), 9);
  // A zero factor ends the product: the missing variable after it is never read.
  t.is(value({ formula: { mult: ['zero', 'missing'] } }, p), 0);
  t.regex(kindOf(() => value({ formula: { mult: ['missing', 'zero'] } }, p)), /no value was found/);
  // A zero numerator is 0 whatever the denominator.
  t.is(value({ formula: { div: { left: 'zero', right: 'missing' } } }, p), 0);
  t.regex(kindOf(() => value({ formula: { mult: [1e30, 1e30] } }, p)), /^bad_input: .*non-finite.*32-bit/, 'a product beyond the 32-bit range');
  for (const f of [{ div: { left: 1, right: 0 } }, { sqrt: -1 }, { ln: 0 }, { log10: -1 }, { exp: 1000 }, { pow: { base: -8, exponent: 0.5 } }]) {
    t.regex(kindOf(() => value({ formula: f }, p)), /^bad_input: .*non-finite/, JSON.stringify(f));
  }
});

test('decays: 1 at the target, the midpoint at one scale away', (t) => {
  const p = point({ x: 13 });
  for (const kind of ['exp_decay', 'gauss_decay', 'lin_decay']) {
    t.is(value({ formula: { [kind]: { x: 'x', target: 13, scale: 5, midpoint: 0.25 } } }, p), 1, kind);
    const mid = value({ formula: { [kind]: { x: 'x', target: 8, scale: 5, midpoint: 0.25 } } }, p);
    t.true(Math.abs(mid - 0.25) < 1e-6, `${kind}: ${mid}`);
    const mid2 = value({ formula: { [kind]: { x: 'x', target: 18, scale: 5, midpoint: 0.25 } } }, p);
    t.true(Math.abs(mid2 - 0.25) < 1e-6, `${kind} is symmetric: ${mid2}`);
  }
  // Defaults: target 0, scale 1, midpoint 0.5; lin reaches 0 at twice the scale and stays there.
  t.is(value({ formula: { lin_decay: { x: 1 } } }, p), 0.5);
  t.is(value({ formula: { lin_decay: { x: 30 } } }, p), 0);
  t.is(value({ formula: { exp_decay: { x: 2 } } }, p), 0.25);
  t.is(value({ formula: { gauss_decay: { x: 2 } } }, p), Math.fround(0.5 ** 4));
  t.is(value({ formula: { lin_decay: { x: 1, midpoint: 0 } } }, p), 0, 'lin takes a midpoint of 0');
  t.regex(kindOf(() => formulaQuery({ formula: { exp_decay: { x: 1, midpoint: 0 } } })), /^bad_input: .*midpoint/);
  t.regex(kindOf(() => formulaQuery({ formula: { gauss_decay: { x: 1, scale: -1 } } })), /^bad_input: .*scale/);
});

test('datetimes are seconds since the epoch; geo distances are meters', (t) => {
  const p = point({ at: '2026-01-02T00:00:00Z', loc: { lat: 0, lon: 1 } });
  t.is(value({ formula: { datetime: '1970-01-01T00:01:00Z' } }, p), 60);
  t.is(value({ formula: { sum: [{ datetime_key: 'at' }, { neg: { datetime: '2026-01-01T00:00:00Z' } }] } }, p), 86400);
  const d = value({ formula: { geo_distance: { origin: { lat: 0, lon: 0 }, to: 'loc' } } }, p);
  t.true(Math.abs(d - (6371008.8 * Math.PI) / 180) < 1, `one degree of the equator: ${d}`);
  t.regex(kindOf(() => value({ formula: { datetime_key: 'loc' } }, p)), /^bad_input: .*datetime/);
});

test('conditions are 1 where they hold, else 0', (t) => {
  const p = point({ tag: 'x', n: 5 });
  t.is(value({ formula: { key: 'tag', match: { value: 'x' } } }, p), 1);
  t.is(value({ formula: { key: 'n', range: { gt: 5 } } }, p), 0);
  t.is(value({ formula: { must_not: [{ key: 'tag', match: { value: 'y' } }] } }, p), 1);
});

test('the parser refuses what the reference refuses, with a bound on nesting', (t) => {
  t.regex(kindOf(() => formulaQuery({})), /^format: .*missing field `formula`/);
  t.regex(kindOf(() => formulaQuery({ formula: '$nope' })), /^bad_input: .*reserved word/);
  t.regex(kindOf(() => formulaQuery({ formula: '$score[x]' })), /^bad_input: .*reserved variable/);
  t.regex(kindOf(() => formulaQuery({ formula: true })), /^format: /);
  t.regex(kindOf(() => formulaQuery({ formula: { div: { left: 1 } } })), /^format: .*`right`/);
  t.regex(kindOf(() => formulaQuery({ formula: { key: 'a', nope: 1 } })), /^bad_input: .*condition/);
  let deep: unknown = 1;
  for (let i = 0; i < 64; i++) deep = { neg: deep };
  t.regex(kindOf(() => formulaQuery({ formula: deep })), /nested deeper than 64/);
  deep = 1;
  for (let i = 0; i < 63; i++) deep = { neg: deep };
  t.is(kindOf(() => formulaQuery({ formula: deep })), 'none');
});

test('mmr: the most relevant first, then the best trade-off against those chosen', (t) => {
  // Dot product. Relevance to q = (1, 0): a 0.9, b 0.85, c 0.5. b is nearly a copy of a.
  const q = Float32Array.of(1, 0);
  const a = Float32Array.of(0.9, 0.1);
  const b = Float32Array.of(0.85, 0.12);
  const c = Float32Array.of(0.5, -0.8);
  // λ = 1: relevance only.
  t.deepEqual(mmrSelect('Dot', q, [a, b, c], 1, 3), [0, 1, 2]);
  // λ = 0.5 after a: b scores 0.5·0.85 − 0.5·(0.765 + 0.012) = 0.0365; c scores 0.5·0.5 − 0.5·(0.45 − 0.08) = 0.065.
  t.deepEqual(mmrSelect('Dot', q, [a, b, c], 0.5, 2), [0, 2]);
  t.deepEqual(mmrSelect('Dot', q, [a, b, c], 0.5, 0), []);
});

test('the matrix of a sample: each point\'s nearest others, with the scores a search reports', (t) => {
  const vs = [Float32Array.of(0, 0), Float32Array.of(3, 4), Float32Array.of(0, 1)];
  t.deepEqual(nearestInSample('Euclid', vs, 1), [
    { row: 0, col: 2, score: 1 },
    { row: 1, col: 2, score: Math.fround(Math.sqrt(18)) },
    { row: 2, col: 0, score: 1 },
  ]);
  t.deepEqual(nearestInSample('Manhattan', vs, 2).filter((e) => e.row === 1), [
    { row: 1, col: 2, score: 6 },
    { row: 1, col: 0, score: 7 },
  ]);
});
