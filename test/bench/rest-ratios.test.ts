/**
 * The REST / in-process pairings of bench:rest: REST at one request in flight against the
 * engine at one outstanding call, and REST at its highest concurrency against every
 * engine concurrency above one (2: the pairing the targets were written against; 8: the
 * engine saturated). Only the report code runs.
 */
import test from 'ava';

import { parseRestArgs } from '../../bench/rest/options';
import { RestResults, anchorConcurrency, ratios } from '../../bench/rest/report';

function results(concurrency: number[], engineConcurrency: number[]): RestResults {
  const queries: Array<{ via: string; concurrency: number; ef: number; qps: number }> = [];
  for (const c of concurrency) queries.push({ via: 'wrk', concurrency: c, ef: 64, qps: 1000 * c });
  for (const c of engineConcurrency) queries.push({ via: 'engine', concurrency: c, ef: 64, qps: 500 * c });
  return { params: { concurrency, engineConcurrency, efs: [64] }, queries } as unknown as RestResults;
}

test('REST c=8 is paired with the engine at 2 and at 8 outstanding, c=1 with 1', (t) => {
  const rs = ratios(results([1, 8], [1, 2, 8])).map((x) => [x.client, x.restConcurrency, x.engineConcurrency, x.ratio]);
  t.deepEqual(rs, [
    ['wrk', 1, 1, 2],
    ['wrk', 8, 2, 8],
    ['wrk', 8, 8, 2],
  ]);
});

test('with one engine concurrency only, REST at its highest concurrency is paired with it', (t) => {
  t.deepEqual(ratios(results([8], [1])).map((x) => [x.restConcurrency, x.engineConcurrency]), [[8, 1]]);
  t.deepEqual(ratios(results([1], [1])).map((x) => [x.restConcurrency, x.engineConcurrency]), [[1, 1]]);
});

test('REST at one in flight is paired with the engine at one only; repeated concurrencies give one pair', (t) => {
  const pairs = (c: number[], e: number[]) => ratios(results(c, e)).map((x) => [x.restConcurrency, x.engineConcurrency]);
  t.deepEqual(pairs([1], [1, 2, 8]), [[1, 1]]);
  t.deepEqual(pairs([1], [2]), [[1, 2]]);
  t.deepEqual(pairs([1, 8], [8, 8]), [[8, 8]]);
  t.deepEqual(pairs([2, 8], [2]), [[8, 2]]);
});

test('the targets are judged against the engine with the fewest outstanding calls above one', (t) => {
  t.is(anchorConcurrency([1, 2, 8]), 2);
  t.is(anchorConcurrency([8, 4]), 4);
  t.is(anchorConcurrency([1]), 1);
});

test('engine passes last as long as a wrk pass unless --engine-pass-seconds says otherwise', (t) => {
  t.is(parseRestArgs([]).enginePassSeconds, null);
  t.is(parseRestArgs(['--engine-pass-seconds', '0']).enginePassSeconds, 0);
  t.is(parseRestArgs(['--engine-pass-seconds', '2.5']).enginePassSeconds, 2.5);
  for (const bad of ['-1', '61', 'x', '', ' ']) t.throws(() => parseRestArgs(['--engine-pass-seconds', bad]), { message: /--engine-pass-seconds/ });
});
