/**
 * Bounds on request input, against a real bin/quiver: bodies nested deeper than the
 * reference's JSON parser allows (serde_json's recursion limit: 127 levels are served,
 * a 128th is refused), and numbers that would reach the engine past its 32-bit counts.
 * Each of these answered 500 "unexpected error" before (found by hand and by the fuzz
 * suite, test/fuzz/fuzz_api.py); each must be a 4xx with a message that names the
 * field or the limit, must change nothing, and must leave valid input as it was.
 * Both request paths are covered: the direct lane (query, scroll, count, search,
 * recommend) and Koa (upserts, payload writes, collection config).
 */

import test, { type ExecutionContext } from 'ava';

import { hasSurrogateEscape, nestedTooDeepAt } from '../../ts/api/rest/body';
import { FilterError, validateFilter } from '../../ts/shard/filter';
import { MAX_ENGINE_COUNT, MAX_NESTING_DEPTH } from '../../ts/shard/limits';
import { PayloadError, validatePayload } from '../../ts/shard/payload-store';
import { ContractClient } from '../support/contract';
import { COLLECTION, COUNT, DELETE, PAYLOAD, POINTS, QUERY, QUERY_BATCH, RECOMMEND, RECOMMEND_BATCH, SCROLL, SEARCH, SEARCH_BATCH } from '../support/routes';

let api: ContractClient;

test.before(async (t) => {
  api = await ContractClient.start();
  await api.ok(t, 'PUT', COLLECTION, { params: P, body: { vectors: { size: 4, distance: 'Dot' } } });
  await api.ok(t, 'PUT', COLLECTION, { params: W, body: { vectors: { size: 4, distance: 'Dot' } } });
  await api.ok(t, 'PUT', POINTS, {
    params: P,
    query: { wait: true },
    body: { points: [1, 2, 3, 4, 5].map((i) => ({ id: i, vector: [i, 1, 0, 0], payload: { n: i } })) },
  });
});

test.after.always(async () => {
  await api?.stop();
});

const P = { collection_name: 'bounds' };
/** Where the tests that write valid points do so (tests run concurrently; the searches read P). */
const W = { collection_name: 'bounds-writes' };
const TOO_DEEP = /^Format error in JSON body: recursion limit exceeded at line 1 column \d+: arrays and objects may nest at most 127 levels deep$/;
const tooLarge = (field: string, value: string) => `Validation error in JSON body: ${field}: value ${value} invalid, must be 4294967295 or smaller`;

/** Everything a write could change: every point with payload and vectors. */
async function contents(t: ExecutionContext): Promise<unknown> {
  return (await api.ok(t, 'POST', SCROLL, { params: P, body: { limit: 1000, with_payload: true, with_vector: true } }))?.points;
}

const deepFilter = (levels: number) => '{"filter":' + '{"must":'.repeat(levels) + '{}' + '}'.repeat(levels) + '}';
const deepArray = (levels: number) => '['.repeat(levels) + ']'.repeat(levels);

// -- nesting -------------------------------------------------------------------------------------

test('a filter nested 20,000 levels deep is 400 naming the limit, on the direct lane and through Koa', async (t) => {
  const before = await contents(t);
  const raw = deepFilter(20_000);
  await api.error(t, 400, 'POST', SCROLL, { params: P, raw }, TOO_DEEP);
  await api.error(t, 400, 'POST', COUNT, { params: P, raw }, TOO_DEEP);
  await api.error(t, 400, 'POST', QUERY, { params: P, raw }, TOO_DEEP);
  await api.error(t, 400, 'POST', DELETE, { params: P, query: { wait: true }, raw }, TOO_DEEP);
  t.deepEqual(await contents(t), before);
});

test('a payload holding an array nested 200,000 levels deep is 400 naming the limit and writes nothing', async (t) => {
  const before = await contents(t);
  const deep = deepArray(200_000);
  await api.error(t, 400, 'PUT', POINTS, { params: P, query: { wait: true }, raw: `{"points":[{"id":9,"vector":[1,0,0,0],"payload":{"a":${deep}}}]}` }, TOO_DEEP);
  await api.error(t, 400, 'POST', PAYLOAD, { params: P, query: { wait: true }, raw: `{"points":[1],"payload":{"a":${deep}}}` }, TOO_DEEP);
  t.deepEqual(await contents(t), before);
});

test('127 levels are served and a 128th is refused at its position, as serde_json counts them', async (t) => {
  // The body, points, the point and the payload are four levels; the array fills the rest.
  const upsert = (levels: number) => `{"points":[{"id":6,"vector":[6,0,0,0],"payload":{"a":${deepArray(levels)}}}]}`;
  await api.ok(t, 'PUT', POINTS, { params: W, query: { wait: true }, raw: upsert(MAX_NESTING_DEPTH - 4) });
  const stored = await api.ok(t, 'GET', '/collections/{collection_name}/points/{id}', { params: { ...W, id: 6 } });
  t.is(JSON.stringify(stored?.payload), `{"a":${deepArray(MAX_NESTING_DEPTH - 4)}}`);
  await api.error(t, 400, 'PUT', POINTS, { params: W, query: { wait: true }, raw: upsert(MAX_NESTING_DEPTH - 3) }, TOO_DEEP);
  await api.ok(t, 'POST', DELETE, { params: W, query: { wait: true }, body: { points: [6] } });
  // serde_json's own wording and position for 128 brackets on one line.
  await api.error(t, 400, 'POST', SCROLL, { params: W, raw: '['.repeat(128) }, 'Format error in JSON body: recursion limit exceeded at line 1 column 128: arrays and objects may nest at most 127 levels deep');
  await api.error(t, 400, 'POST', SCROLL, { params: W, raw: '\n\n  ' + '{"a":'.repeat(200) }, /at line 3 column 638: /);
});

test('brackets inside strings do not count as nesting', async (t) => {
  const text = '[{'.repeat(1000) + '\\"' + ']}'.repeat(1000);
  await api.ok(t, 'PUT', POINTS, { params: W, query: { wait: true }, raw: `{"points":[{"id":7,"vector":[7,0,0,0],"payload":{"s":"${text}"}}]}` });
  const stored = await api.ok(t, 'GET', '/collections/{collection_name}/points/{id}', { params: { ...W, id: 7 } });
  t.is(stored?.payload?.s, '[{'.repeat(1000) + '"' + ']}'.repeat(1000));
  await api.ok(t, 'POST', DELETE, { params: W, query: { wait: true }, body: { points: [7] } });
});

test('the depth scan: strings (with escaped quotes) are skipped, malformed input is left to JSON.parse', (t) => {
  const at = (s: string, max = 3) => nestedTooDeepAt(Buffer.from(s), max);
  t.is(at('[[[]]]'), -1);
  t.is(at('[[[[]]]]'), 3);
  t.is(at('{"a":{"b":[{"c":1}]}}'), 11);
  t.is(at('["[[[[[[", "\\"[[[[[", "\\\\", [[1]]]'), -1);
  t.is(at('["\\\\", [[[1]]]]'), 9);
  t.is(at('"[[[[[[[['), -1, 'an unterminated string is JSON.parse\'s to report');
  t.is(at(']]]][[[['), -1, 'unbalanced closers are JSON.parse\'s to report');
  t.is(at('[[[1]]] [[[[2]]]]'), 11);
});

// -- lone surrogates -------------------------------------------------------------------------------

const LONE = /^Format error in JSON body: lone surrogate in a \\u escape of string /;

test('a string or key with a lone surrogate escape is 400 on the direct lane and through Koa, and writes nothing; pairs are served', async (t) => {
  const before = await contents(t);
  const upsert = (payload: string) => `{"points":[{"id":8,"vector":[8,0,0,0],"payload":${payload}}]}`;
  for (const payload of ['{"s":"a\\ud800b"}', '{"s":"\\uDBFF"}', '{"s":"x\\udc00"}', '{"s":["ok","\\ude00\\ud83d"]}', '{"k\\uD800":1}', '{"n":{"\\udfff":[1]}}']) {
    await api.error(t, 400, 'PUT', POINTS, { params: P, query: { wait: true }, raw: upsert(payload) }, LONE);
  }
  await api.error(t, 400, 'POST', PAYLOAD, { params: P, query: { wait: true }, raw: '{"points":[1],"payload":{"s":"\\ud800"}}' }, LONE);
  const filter = '{"filter":{"must":[{"key":"s","match":{"value":"\\ud800"}}]}}';
  await api.error(t, 400, 'POST', SCROLL, { params: P, raw: filter }, LONE);
  await api.error(t, 400, 'POST', COUNT, { params: P, raw: filter }, LONE);
  t.deepEqual(await contents(t), before);
  // a pair (either case), and text that only looks like an escape (an escaped backslash), are served
  await api.ok(t, 'PUT', POINTS, { params: W, query: { wait: true }, raw: upsert('{"s":"\\ud83d\\uDE00","t":"\\\\ud800"}') });
  const stored = await api.ok(t, 'GET', '/collections/{collection_name}/points/{id}', { params: { ...W, id: 8 } });
  t.deepEqual(stored?.payload, { s: '\u{1F600}', t: '\\ud800' });
  await api.ok(t, 'POST', DELETE, { params: W, query: { wait: true }, body: { points: [8] } });
});

test('the surrogate escape scan: \\uD800 to \\uDFFF in either case, not an escaped backslash or other escapes', (t) => {
  const has = (s: string) => hasSurrogateEscape(Buffer.from(s));
  for (const s of ['"\\ud800"', '"\\uD83D\\uDE00"', '"\\udfff"', '"\\uDc00"', '"\\\\\\ud900"', '{"\\udb00":1}']) t.true(has(s), s);
  for (const s of ['"\\u00e9"', '"\\ud7ff"', '"\\ue000"', '"\\\\ud800"', '"\\\\\\\\ud800"', '"ud800"', '"\\n\\ud"', '"\\u0d80"', '"\u{1F600}"']) t.false(has(s), s);
});

/** The plain byte-by-byte depth scan the fast one must agree with. */
function naiveTooDeepAt(text: string, max: number): number {
  const raw = Buffer.from(text);
  let depth = 0;
  let inString = false;
  for (let i = 0; i < raw.length; i++) {
    const c = raw[i];
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return i;
    } else if (c === 0x5d || c === 0x7d) depth--;
  }
  return -1;
}

test('the depth scan finds the same place as a plain byte loop, in sparse bodies (vectors), dense ones (payloads) and random ones', (t) => {
  const tail = '['.repeat(130) + ']'.repeat(130);
  const sparse = '[' + '[1.2345678901234567,2.345678901234567,3.45678901234567],'.repeat(400) + tail + ']';
  const dense = '[' + '{"a":"[[","b":["x","y"]},'.repeat(400) + tail + ']';
  const mixed = '[' + '{"a":"[[","b":["x","y"]},'.repeat(300) + '[1.2345678901234567,2.345678901234567,3.45678901234567],'.repeat(300) + tail + ']';
  for (const text of [sparse, dense, mixed, sparse.replace(tail, '[]'), dense.replace(tail, '[]')]) {
    t.is(nestedTooDeepAt(Buffer.from(text), MAX_NESTING_DEPTH), naiveTooDeepAt(text, MAX_NESTING_DEPTH));
  }
  t.true(nestedTooDeepAt(Buffer.from(dense), MAX_NESTING_DEPTH) > 0);
  // Random documents of brackets, strings with escapes and numbers.
  const pieces = ['[', ']', '{', '}', '"a"', '"[\\"', '"\\"', '"x\\\"{"', '1.25', ',', ':', ' ', '"' + '{'.repeat(5) + '"'];
  let seed = 7;
  const rnd = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  for (let k = 0; k < 300; k++) {
    let text = '';
    const len = 50 + rnd(3000);
    for (let i = 0; i < len; i++) text += rnd(4) === 0 ? '[' : pieces[rnd(pieces.length)];
    for (const max of [3, 40, MAX_NESTING_DEPTH]) t.is(nestedTooDeepAt(Buffer.from(text), max), naiveTooDeepAt(text, max), `${max}: ${text.slice(0, 80)}`);
  }
});

test('the filter and payload validators refuse deep input themselves, without running out of stack', (t) => {
  let filter: Record<string, unknown> = {};
  for (let i = 0; i < 20_000; i++) filter = { must: filter };
  const fe = t.throws(() => validateFilter(filter), { instanceOf: FilterError });
  t.regex(fe?.message ?? '', /filters may nest at most 127 levels deep$/);
  let nested: Record<string, unknown> = {};
  for (let i = 0; i < MAX_NESTING_DEPTH - 1; i++) nested = { must: nested };
  t.notThrows(() => validateFilter(nested), '127 filters deep is still a filter');

  let value: unknown = [];
  for (let i = 0; i < 200_000; i++) value = [value];
  const pe = t.throws(() => validatePayload({ a: value }), { instanceOf: PayloadError });
  t.regex(pe?.message ?? '', /^payload value at payload\.a(\[0\])* nests arrays and objects more than 127 levels deep$/);
  let ok: unknown = [];
  for (let i = 0; i < MAX_NESTING_DEPTH - 2; i++) ok = [ok];
  t.notThrows(() => validatePayload({ a: ok }));
});

// -- numbers that reach the engine ---------------------------------------------------------------

const FIELDS: Array<[string, (v: number) => Record<string, unknown>, string]> = [
  ['limit', (v) => ({ limit: v }), 'limit'],
  ['offset', (v) => ({ offset: v }), 'offset'],
  ['hnsw_ef', (v) => ({ params: { hnsw_ef: v } }), 'params.hnsw_ef'],
  ['oversampling', (v) => ({ params: { quantization: { oversampling: v } } }), 'params.quantization.oversampling'],
];

test('limit, offset, hnsw_ef and oversampling past the engine range are 422 naming the field, on every similarity route', async (t) => {
  for (const [, field, name] of FIELDS) {
    for (const value of [1e12, MAX_ENGINE_COUNT + 1]) {
      const extra = field(value);
      const expected = tooLarge(name, String(value));
      await api.error(t, 422, 'POST', QUERY, { params: P, body: { query: [1, 0, 0, 0], ...extra } }, expected);
      await api.error(t, 422, 'POST', QUERY, { params: P, body: { query: 1, ...extra } }, expected);
      await api.error(t, 422, 'POST', SEARCH, { params: P, body: { vector: [1, 0, 0, 0], limit: 3, ...extra } }, expected);
      await api.error(t, 422, 'POST', RECOMMEND, { params: P, body: { positive: [1], limit: 3, ...extra } }, expected);
      await api.error(t, 422, 'POST', QUERY_BATCH, { params: P, body: { searches: [{ query: [1, 0, 0, 0] }, { query: [1, 0, 0, 0], ...extra }] } }, expected);
      await api.error(t, 422, 'POST', SEARCH_BATCH, { params: P, body: { searches: [{ vector: [1, 0, 0, 0], limit: 3, ...extra }] } }, expected);
      await api.error(t, 422, 'POST', RECOMMEND_BATCH, { params: P, body: { searches: [{ positive: [2], limit: 3, ...extra }] } }, expected);
    }
  }
  await api.error(t, 422, 'POST', QUERY, { params: P, body: { query: [1, 0, 0, 0], params: { quantization: { oversampling: 1e300 } } } }, tooLarge('params.quantization.oversampling', '1e+300'));
});

test('the largest limit, offset and hnsw_ef are served, also together (their sum is past the engine range)', async (t) => {
  const top = await api.ok(t, 'POST', QUERY, { params: P, body: { query: [1, 0, 0, 0], limit: MAX_ENGINE_COUNT } });
  t.deepEqual(top?.points?.map((p: { id: number }) => p.id), [5, 4, 3, 2, 1]);
  const none = await api.ok(t, 'POST', QUERY, { params: P, body: { query: [1, 0, 0, 0], limit: MAX_ENGINE_COUNT, offset: MAX_ENGINE_COUNT } });
  t.deepEqual(none?.points, []);
  const ef = await api.ok(t, 'POST', SEARCH, { params: P, body: { vector: [1, 0, 0, 0], limit: 2, params: { hnsw_ef: MAX_ENGINE_COUNT, quantization: { oversampling: MAX_ENGINE_COUNT } } } });
  t.deepEqual(ef?.map((p: { id: number }) => p.id), [5, 4]);
  const rec = await api.ok(t, 'POST', RECOMMEND, { params: P, body: { positive: [5], limit: MAX_ENGINE_COUNT, offset: 1 } });
  t.deepEqual(rec?.map((p: { id: number }) => p.id), [3, 2, 1]);
  // Scroll never reaches the engine: a huge limit is served as the reference serves it.
  const page = await api.ok(t, 'POST', SCROLL, { params: P, body: { limit: 1e12 } });
  t.is(page?.points?.length, 5);
});

test('full_scan_threshold past the engine range is 422 on create and update, and changes nothing', async (t) => {
  const fresh = { collection_name: 'bounds-fst' };
  const expected = tooLarge('hnsw_config.full_scan_threshold', '1000000000000');
  await api.error(t, 422, 'PUT', COLLECTION, { params: fresh, body: { vectors: { size: 4, distance: 'Dot' }, hnsw_config: { full_scan_threshold: 1e12 } } }, expected);
  await api.error(t, 422, 'PUT', COLLECTION, { params: fresh, body: { vectors: { size: 4, distance: 'Dot', hnsw_config: { full_scan_threshold: 1e12 } } } }, tooLarge('vectors.hnsw_config.full_scan_threshold', '1000000000000'));
  t.false((await api.ok(t, 'GET', '/collections/{collection_name}/exists', { params: fresh }))?.exists);
  await api.error(t, 422, 'PATCH', COLLECTION, { params: P, body: { hnsw_config: { full_scan_threshold: 1e12 } } }, expected);
  t.like((await api.ok(t, 'GET', COLLECTION, { params: P }))?.config?.hnsw_config, { full_scan_threshold: 10000 });
  await api.ok(t, 'PUT', COLLECTION, { params: fresh, body: { vectors: { size: 4, distance: 'Dot' }, hnsw_config: { full_scan_threshold: MAX_ENGINE_COUNT } } });
  await api.ok(t, 'DELETE', COLLECTION, { params: fresh });
});
