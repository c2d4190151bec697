/**
 * The translators of the Points service (ts/api/grpc/convert), in process: messages go
 * through the real codec of the committed contract (encoded, then decoded with the
 * server's loader options, so they have the shapes a handler gets: unset fields absent,
 * 64-bit integers as strings, a virtual field per oneof), are translated to the JSON form
 * of the REST request, and that JSON goes through the same parsers REST uses. Answers go
 * the other way and are decoded as a client decodes them.
 */

import test from 'ava';
import * as protoLoader from '@grpc/proto-loader';

import { filter as parseFilter, pointVectors } from '../../ts/api/request/parse';
import { parseQuery, parseRecommend, parseSearch, upsertPoints } from '../../ts/api/request/points';
import { createIndexBody } from '../../ts/api/request/payload-index';
import { fieldSchemaToJson } from '../../ts/api/grpc/convert/field-index';
import { filterToJson, timestampToRfc3339 } from '../../ts/api/grpc/convert/filter';
import {
  pointToJson,
  readQuery,
  retrievedPointOut,
  scoredPointOut,
  shardKeySelectorToJson,
  updateResultOut,
  vectorsToJson,
  writeQuery,
} from '../../ts/api/grpc/convert/points';
import { checkBatchItem, queryPointsToJson, recommendPointsToJson, searchPointsToJson } from '../../ts/api/grpc/convert/query';
import { jsonToMap, mapToJson } from '../../ts/api/grpc/convert/value';
import { QuiverError } from '../../ts/common/errors';
import { multivectorRows } from '../../ts/common/multivector';
import { MANAGE } from '../../ts/auth/access';
import { timeoutSeconds } from '../../ts/api/grpc/convert/common';
import { MAX_NESTING_DEPTH } from '../../ts/shard/limits';
import { PROTO_DIR } from './client';

const OPTIONS: protoLoader.Options = { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true, includeDirs: [PROTO_DIR] };
const def = protoLoader.loadSync('qdrant.proto', OPTIONS);
const points = def['qdrant.Points'] as unknown as Record<string, protoLoader.MethodDefinition<object, object>>;

/** `msg` as the server's handler receives it for `rpc`. */
function req(rpc: string, msg: object): any {
  const m = points[rpc];
  return m.requestDeserialize(m.requestSerialize(msg));
}

/** `msg` as a client decodes the answer of `rpc` (throws when it does not encode). */
function res(rpc: string, msg: object): any {
  const m = points[rpc];
  return m.responseDeserialize(m.responseSerialize(msg));
}

/** `kind: message` of the QuiverError `fn` throws. */
function kindOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (err instanceof QuiverError) return `${err.kind}: ${err.message}`;
    throw err;
  }
  throw new Error('no error');
}

test('payload values: JSON to Value and back keeps every kind; integers stay integers', (t) => {
  const payload = { s: 'x', i: 7, neg: -3, f: 1.5, big: 1e300, b: false, n: null, l: [1, 'a', [true]], o: { a: { b: [null, 0.25] } }, ['__proto__']: 1 };
  const wire = res('Get', { result: [{ id: { num: '1' }, payload: jsonToMap(JSON.parse(JSON.stringify(payload)), { depth: 2, what: 'payload' }) }] });
  t.is(wire.result[0].payload.i.kind, 'integer_value');
  t.is(wire.result[0].payload.f.kind, 'double_value');
  t.is(wire.result[0].payload.big.kind, 'double_value');
  t.is(wire.result[0].payload.n.kind, 'null_value');
  const back = mapToJson(wire.result[0].payload, 'payload');
  t.deepEqual(back, JSON.parse(JSON.stringify(payload)));
  t.true(Object.prototype.hasOwnProperty.call(back, '__proto__'), '__proto__ is a plain key');
});

test('payload numbers: an integer goes out as integer_value only when int64 holds it exactly; 1e300, 2^64, -0.5 are doubles', (t) => {
  const numbers: Record<string, number> = {
    big: 1e300,
    two64: 2 ** 64,
    two63: 2 ** 63,
    minus2_63: -(2 ** 63),
    two53: 2 ** 53,
    neg: -0.5,
    tiny: 5e-324,
    safe: Number.MAX_SAFE_INTEGER,
    minSafe: Number.MIN_SAFE_INTEGER,
    zero: 0,
  };
  const wire = res('Get', { result: [{ id: { num: '1' }, payload: jsonToMap(numbers, { depth: 2, what: 'payload' }) }] });
  const p = wire.result[0].payload;
  for (const k of ['big', 'two64', 'two63', 'minus2_63', 'two53', 'neg', 'tiny']) t.is(p[k].kind, 'double_value', k);
  for (const k of ['safe', 'minSafe', 'zero']) t.is(p[k].kind, 'integer_value', k);
  t.deepEqual(mapToJson(p, 'payload'), numbers, 'every number comes back exactly');
  // A bigint (never in a stored payload, but the type allows it) beyond int64 is a double too.
  const b = res('Get', { result: [{ id: { num: '1' }, payload: jsonToMap({ a: 2n ** 64n, b: -(2n ** 63n) }, { depth: 2, what: 'payload' }) }] }).result[0].payload;
  t.deepEqual([b.a.kind, b.a.double_value, b.b.kind, b.b.integer_value], ['double_value', 2 ** 64, 'integer_value', '-9223372036854775808']);
});

test('payload values: an answer refuses a value nested deeper than protobuf carries, naming the point, instead of failing in the encoder', (t) => {
  const nest = (levels: number, leaf: any = 1): any => {
    let v = leaf;
    for (let i = 0; i < levels; i++) v = i % 2 === 0 ? { a: v } : [v];
    return v;
  };
  // In a GetResponse the payload's values sit two messages deep: 49 levels of nesting fit, 50 do not.
  const ok = res('Get', { result: [retrievedPointOut({ id: 7, payload: { x: nest(49) } }, 1)] });
  t.deepEqual(mapToJson(ok.result[0].payload, 'payload'), { x: nest(49) });
  t.regex(kindOf(() => retrievedPointOut({ id: 7, payload: { x: nest(50) } }, 1)), /^bad_input: Wrong input: the payload of point 7 nests deeper than a gRPC answer can carry here .*100 levels.* 49 levels/);
  t.regex(kindOf(() => retrievedPointOut({ id: 7, payload: { x: nest(50, {}) } }, 1)), /^bad_input: .*point 7/);
  // One level more around it (a BatchResult of QueryBatch): 48 fit, 49 do not.
  const batch = res('QueryBatch', { result: [{ result: [scoredPointOut({ id: 8, version: 0, score: 1, payload: { x: nest(48) } }, 2)] }], time: 0 });
  t.deepEqual(mapToJson(batch.result[0].result[0].payload, 'payload'), { x: nest(48) });
  t.regex(kindOf(() => scoredPointOut({ id: 8, version: 0, score: 1, payload: { x: nest(49) } }, 2)), /^bad_input: .*point 8 .* 48 levels/);
});

test('payload values: zero and empty values that are not on the wire still arrive', (t) => {
  const r = req('Upsert', {
    collection_name: 'c',
    points: [{ id: { num: '0' }, vectors: { vector: { dense: { data: [0, 1] } } }, payload: { z: { integer_value: '0' }, e: { string_value: '' }, f: { bool_value: false }, d: { double_value: 0 }, s: { struct_value: {} }, l: { list_value: {} } } }],
  });
  const b = pointToJson(r.points[0], 'points[0]');
  t.deepEqual(b, { id: 0, vector: [0, 1], payload: { z: 0, e: '', f: false, d: 0, s: {}, l: [] } });
  t.deepEqual(upsertPoints({ points: [b] })[0].payload, { z: 0, e: '', f: false, d: 0, s: {}, l: [] });
});

test('payload values: nesting past the limit is refused before any recursive parser', (t) => {
  // The codec itself refuses messages nested past 100 levels (protobufjs's recursion
  // limit, as protoc's): a Value list takes two, so the translator's own bound is checked
  // on a message in the decoded shape, as a codec with a higher limit would hand it over.
  let v: object = { kind: 'string_value', string_value: 'leaf' };
  for (let i = 0; i < MAX_NESTING_DEPTH + 5; i++) v = { kind: 'list_value', list_value: { values: [v] } };
  t.regex(kindOf(() => mapToJson({ deep: v }, 'payload')), /^format: .*nest at most 127 levels/);
  t.throws(() => req('SetPayload', { collection_name: 'c', payload: { deep: v } }), { message: /maximum nesting depth exceeded/ });
  // A Value with no kind is an error, not a null.
  const empty = req('SetPayload', { collection_name: 'c', payload: { x: {} } });
  t.regex(kindOf(() => mapToJson(empty.payload, 'payload')), /^format: .*payload\.x: a Value with no kind set/);
});

test('filters: every condition and match kind becomes the REST filter, and the shared validator takes it', (t) => {
  const r = req('Count', {
    collection_name: 'c',
    filter: {
      must: [
        { field: { key: 'city', match: { keyword: 'Berlin' } } },
        { field: { key: 'n', match: { integer: '0' } } },
        { field: { key: 'ok', match: { boolean: true } } },
        { field: { key: 'txt', match: { text: 'a b' } } },
        { field: { key: 'tag', match: { keywords: { strings: ['a', 'b'] } } } },
        { field: { key: 'n', match: { integers: { integers: ['1', '2'] } } } },
        { field: { key: 'n', match: { except_integers: { integers: ['3'] } } } },
        { field: { key: 'tag', match: { except_keywords: { strings: ['z'] } } } },
        { field: { key: 'txt', match: { phrase: 'a b' } } },
        { field: { key: 'txt', match: { text_any: 'a b' } } },
        { field: { key: 'price', range: { gte: 1.5, lt: 10 } } },
        { field: { key: 'at', datetime_range: { gt: { seconds: '1704067200', nanos: 5000000 } } } },
        { field: { key: 'loc', geo_radius: { center: { lat: 52.5 }, radius: 1000 } } },
        { field: { key: 'loc', geo_bounding_box: { top_left: { lon: 13, lat: 53 }, bottom_right: { lon: 14, lat: 52 } } } },
        {
          field: {
            key: 'loc',
            geo_polygon: { exterior: { points: [{ lon: 0, lat: 0 }, { lon: 1, lat: 0 }, { lon: 1, lat: 1 }, { lon: 0, lat: 0 }] }, interiors: [] },
          },
        },
        { field: { key: 'tags', values_count: { gte: '1' } } },
        { field: { key: 'x', is_empty: false } },
        { is_empty: { key: 'e' } },
        { is_null: { key: 'n' } },
        { has_id: { has_id: [{ num: '5' }, { uuid: '550e8400-e29b-41d4-a716-446655440000' }] } },
        { has_vector: { has_vector: 'image' } },
      ],
      should: [{ filter: { must_not: [{ field: { key: 'city', match: { keyword: 'Paris' } } }] } }],
      must_not: [{ nested: { key: 'items', filter: { must: [{ field: { key: 'qty', range: { gt: 0 } } }] } } }],
      min_should: { conditions: [{ field: { key: 'a', match: { integer: '1' } } }], min_count: '1' },
    },
  });
  const json = filterToJson(r.filter);
  t.deepEqual(json, {
    must: [
      { key: 'city', match: { value: 'Berlin' } },
      { key: 'n', match: { value: 0 } },
      { key: 'ok', match: { value: true } },
      { key: 'txt', match: { text: 'a b' } },
      { key: 'tag', match: { any: ['a', 'b'] } },
      { key: 'n', match: { any: [1, 2] } },
      { key: 'n', match: { except: [3] } },
      { key: 'tag', match: { except: ['z'] } },
      { key: 'txt', match: { phrase: 'a b' } },
      { key: 'txt', match: { text_any: 'a b' } },
      { key: 'price', range: { gte: 1.5, lt: 10 } },
      { key: 'at', range: { gt: '2024-01-01T00:00:00.005000000Z' } },
      // lon 0 is not on the wire at all: it still is 0.
      { key: 'loc', geo_radius: { center: { lon: 0, lat: 52.5 }, radius: 1000 } },
      { key: 'loc', geo_bounding_box: { top_left: { lon: 13, lat: 53 }, bottom_right: { lon: 14, lat: 52 } } },
      { key: 'loc', geo_polygon: { exterior: { points: [{ lon: 0, lat: 0 }, { lon: 1, lat: 0 }, { lon: 1, lat: 1 }, { lon: 0, lat: 0 }] }, interiors: [] } },
      { key: 'tags', values_count: { gte: 1 } },
      { key: 'x', is_empty: false },
      { is_empty: { key: 'e' } },
      { is_null: { key: 'n' } },
      { has_id: [5, '550e8400-e29b-41d4-a716-446655440000'] },
      { has_vector: 'image' },
    ],
    should: [{ must_not: [{ key: 'city', match: { value: 'Paris' } }] }],
    must_not: [{ nested: { key: 'items', filter: { must: [{ key: 'qty', range: { gt: 0 } }] } } }],
    min_should: { conditions: [{ key: 'a', match: { value: 1 } }], min_count: 1 },
  });
  t.truthy(parseFilter(json), 'the shared validator accepts it');
});

test('filters: a condition or match with nothing set, and filters nested too deep, are refused', (t) => {
  t.regex(kindOf(() => filterToJson(req('Count', { filter: { must: [{}] } }).filter)), /^format: .*filter\.must\[0\]: a Condition with none/);
  t.regex(kindOf(() => filterToJson(req('Count', { filter: { must: [{ field: { key: 'a', match: {} } }] } }).filter)), /^format: .*a Match with no value set/);
  let f: object = {};
  for (let i = 0; i < MAX_NESTING_DEPTH + 3; i++) f = { must: [{ condition_one_of: 'filter', filter: f }] };
  t.regex(kindOf(() => filterToJson(f)), /^format: .*filters may nest at most 127 levels deep/);
  // An empty filter is no constraint, as `{}` is over REST.
  t.deepEqual(filterToJson(req('Count', { filter: {} }).filter), {});
});

test('timestamps become RFC 3339 the filter parser reads; out of range is refused', (t) => {
  t.is(timestampToRfc3339({ seconds: '0' }, 'x'), '1970-01-01T00:00:00Z');
  t.is(timestampToRfc3339({ seconds: '-62135596800' }, 'x'), '0001-01-01T00:00:00Z');
  t.is(timestampToRfc3339({ seconds: '253402300799', nanos: 999999999 }, 'x'), '9999-12-31T23:59:59.999999999Z');
  t.regex(kindOf(() => timestampToRfc3339({ seconds: '253402300800' }, 'f')), /^format: .*f: timestamp .* outside/);
});

test('vectors: dense, named, and the deprecated forms older clients send', (t) => {
  const named = req('Upsert', {
    points: [
      { id: { num: '1' }, vectors: { vectors: { vectors: { image: { dense: { data: [1, 2] } }, text: { data: [3] } } } } },
      { id: { uuid: 'F47AC10B-58CC-4372-A567-0E02B2C3D479' }, vectors: { vector: { data: [0.5, 0.25] } } },
    ],
  });
  const b = named.points.map((p: object, i: number) => pointToJson(p, `points[${i}]`));
  t.deepEqual(b, [
    { id: 1, vector: { image: [1, 2], text: [3] } },
    { id: 'F47AC10B-58CC-4372-A567-0E02B2C3D479', vector: [0.5, 0.25] },
  ]);
  const parsed = upsertPoints({ points: b });
  t.is(parsed[1].id.key, parsed[1].id.key.toLowerCase(), 'the UUID is normalised by the shared parser');
  t.deepEqual([...parsed[0].vectors.keys()], ['image', 'text']);

  // Sparse, multi-vector and inference inputs reach the parser as REST sends them, and get REST's errors.
  const cases: Array<[object, RegExp]> = [
    [{ sparse: { indices: [1], values: [0.5] } }, /a sparse vector must be given under its name/],
    [{ data: [0.5], indices: { data: [1] } }, /a sparse vector must be given under its name/],
    [{ document: { text: 'hello', model: 'm' } }, /inference documents are not supported/],
    [{}, /a vector needs at least one value/],
  ];
  for (const [vector, pattern] of cases) {
    const r = req('Upsert', { points: [{ id: { num: '1' }, vectors: { vector } }] });
    const json = vectorsToJson(r.points[0].vectors, 'points[0].vector');
    t.regex(kindOf(() => pointVectors(json, 'points[0].vector')), pattern, JSON.stringify(vector));
  }
  // A multivector, in the current and the deprecated form, becomes REST's list of rows and parses to one flat list of 2 rows.
  for (const vector of [{ multi_dense: { vectors: [{ data: [1, 2] }, { data: [3, 4] }] } }, { data: [1, 2, 3, 4], vectors_count: 2 }]) {
    const json = vectorsToJson(req('Upsert', { points: [{ id: { num: '1' }, vectors: { vector } }] }).points[0].vectors, 'points[0].vector');
    const parsed = pointVectors(json, 'points[0].vector').get('')!;
    t.deepEqual([Array.from(parsed), multivectorRows(parsed)], [[1, 2, 3, 4], 2], JSON.stringify(vector));
  }
  t.deepEqual(vectorsToJson(req('Upsert', { points: [{ vectors: { vector: { data: [1, 2, 3, 4], vectors_count: 2 } } }] }).points[0].vectors, 'v'), [
    [1, 2],
    [3, 4],
  ]);
  // No vectors at all: the parser reports the field as missing, as for a REST point without `vector`.
  const none = pointToJson(req('Upsert', { points: [{ id: { num: '1' } }] }).points[0], 'points[0]');
  t.regex(kindOf(() => upsertPoints({ points: [none] })), /points\[0\]: missing field `vector`/);
});

test('point ids: num and uuid; an id past 2^53 - 1 gets the error REST gives for it', (t) => {
  const r = req('Upsert', { points: [{ id: { num: '18446744073709551615' }, vectors: { vector: { dense: { data: [1] } } } }] });
  t.is(r.points[0].id.num, '18446744073709551615', 'the codec keeps the id exact');
  const b = pointToJson(r.points[0], 'points[0]');
  const viaGrpc = kindOf(() => upsertPoints({ points: [b] }));
  const viaRest = kindOf(() => upsertPoints(JSON.parse('{"points":[{"id":18446744073709551615,"vector":[1]}]}')));
  t.is(viaGrpc, viaRest);
  t.regex(viaGrpc, /^format: .*beyond 2\^53 - 1/);
});

test('query parameters: read consistency, write ordering, wait and timeout', (t) => {
  t.deepEqual(readQuery(req('Get', { read_consistency: { type: 'Majority' } }), 5), { consistency: 'majority', timeout: '5' });
  t.deepEqual(readQuery(req('Get', { read_consistency: { type: 'All' } }), null), { consistency: 'all' });
  t.deepEqual(readQuery(req('Get', { read_consistency: { factor: '2' } }), null), { consistency: '2' });
  t.deepEqual(readQuery(req('Get', { read_consistency: { factor: '0' } }), null), { consistency: '0' });
  t.deepEqual(readQuery(req('Get', {}), null), {});
  t.deepEqual(writeQuery(req('Upsert', { wait: true, ordering: { type: 'Strong' } }), 3), { wait: 'true', ordering: 'strong', timeout: '3' });
  // `ordering` with its default type (Weak) is not on the wire: still weak.
  t.deepEqual(writeQuery(req('Upsert', { wait: false, ordering: {} }), null), { wait: 'false', ordering: 'weak' });
  // The timeout a call gets: the request's, bounded by the client's deadline (the helper every service uses).
  const ctx = (timeoutMs: number | null) => ({ access: MANAGE, signal: new AbortController().signal, timeoutMs });
  t.is(timeoutSeconds(req('Get', { timeout: '5' }).timeout, ctx(null)), 5);
  t.is(timeoutSeconds(req('Get', { timeout: '5' }).timeout, ctx(2500)), 3);
  t.is(timeoutSeconds(req('Get', {}).timeout, ctx(null)), null);
});

test('shard key selectors: one key, several, a target with a fallback', (t) => {
  const sel = (s: object) => shardKeySelectorToJson(req('Get', { shard_key_selector: s }).shard_key_selector);
  t.is(sel({ shard_keys: [{ keyword: 'eu' }] }), 'eu');
  t.is(sel({ shard_keys: [{ number: '7' }] }), 7);
  t.deepEqual(sel({ shard_keys: [{ keyword: 'eu' }, { number: '7' }] }), ['eu', 7]);
  t.deepEqual(sel({ shard_keys: [{ keyword: 'eu' }], fallback: { keyword: 'default' } }), { target: 'eu', fallback: 'default' });
  t.regex(kindOf(() => sel({ shard_keys: [{ keyword: 'a' }, { keyword: 'b' }], fallback: { keyword: 'c' } })), /^format: .*exactly one target/);
  t.regex(kindOf(() => sel({ shard_keys: [{}] })), /^format: .*neither `keyword` nor `number`/);
});

test('Query: each kind of query becomes the REST body; what Quiver does not serve gets the REST error', (t) => {
  const body = (m: object) => queryPointsToJson(req('Query', { collection_name: 'c', ...m }));
  t.deepEqual(body({ query: { nearest: { dense: { data: [1, 0] } } }, limit: '3', using: 'image', with_payload: { enable: true }, with_vectors: { include: { names: ['image'] } } }), {
    query: { nearest: [1, 0] },
    using: 'image',
    limit: 3,
    with_payload: true,
    with_vector: ['image'],
  });
  t.deepEqual(body({ query: { nearest: { id: { num: '1' } } } }), { query: { nearest: 1 } });
  t.deepEqual(body({ query: { recommend: { positive: [{ id: { num: '1' } }], negative: [{ dense: { data: [0, 1] } }], strategy: 'BestScore' } } }), {
    query: { recommend: { positive: [1], negative: [[0, 1]], strategy: 'best_score' } },
  });
  t.deepEqual(body({ query: { order_by: { key: 'n', direction: 'Desc', start_from: { integer: '4' } } } }), { query: { order_by: { key: 'n', direction: 'desc', start_from: 4 } } });
  t.deepEqual(body({ params: { hnsw_ef: '64', exact: true, quantization: { rescore: true, oversampling: 2 } }, score_threshold: 0.5, offset: '2' }), {
    params: { hnsw_ef: 64, exact: true, quantization: { rescore: true, oversampling: 2 } },
    score_threshold: 0.5,
    offset: 2,
  });
  t.deepEqual(body({ query: { nearest: { multi_dense: { vectors: [{ data: [1, 0] }, { data: [0, 1] }] } } } }), { query: { nearest: [[1, 0], [0, 1]] } });
  t.truthy(parseQuery(body({ query: { nearest: { multi_dense: { vectors: [{ data: [1, 0] }, { data: [0, 1] }] } } } })));
  t.truthy(parseQuery(body({ query: { nearest: { dense: { data: [1, 0] } } }, filter: { must: [{ has_id: { has_id: [{ num: '1' }] } }] } })));
  // A sparse query reaches the parser as REST's `{indices, values}`.
  const sq = parseQuery(body({ query: { nearest: { sparse: { indices: [4, 1], values: [0.5, 1] } } }, using: 'text' }));
  t.deepEqual(sq.query, { nearest: { sparse: { indices: Uint32Array.of(4, 1), values: Float32Array.of(0.5, 1) } } });

  const refused: Array<[object, RegExp]> = [
    [{ query: { recommend: { strategy: 'SumScores' } } }, /^bad_request: .*At least one positive or negative vector ID required with this strategy/],
    [{ query: { discover: { context: { pairs: [] } } } }, /missing field `target`/],
    [{ query: { fusion: 'RRF' } }, /^bad_input: Wrong input: cannot apply Fusion without prefetches/],
    [{ query: { rrf: {} }, using: 'image', prefetch: [{ query: { nearest: { dense: { data: [1, 0] } } } }] }, /^bad_request: Bad request: Fusion queries cannot be combined with the 'using' field/],
    [{ query: { relevance_feedback: {} } }, /`relevance_feedback` queries are not supported/],
    [{ prefetch: [{ limit: '3' }] }, /^bad_request: Bad request: A query is needed to merge the prefetches/],
    [{ query: { rrf: { weights: [1, 2] } }, prefetch: [{ query: { nearest: { dense: { data: [1, 0] } } } }] }, /^bad_input: Wrong input: Number of weights in RRF should match number of pre-fetches: got 2, expected 1/],
    [{ query: { fusion: 'RRF' }, prefetch: [{ query: { fusion: 'DBSF' } }] }, /^bad_input: Wrong input: cannot apply Fusion without prefetches/],
    [{ query: { formula: { expression: { variant: 'variable', variable: '$score' } } } }, /^bad_request: .*formula .*needs at least one prefetch/],
    [{ query: { nearest_with_mmr: { nearest: { dense: { data: [1] } }, mmr: { diversity: 2 } } } }, /^validation: .*diversity/],
    [{ limit: '0' }, /^validation: .*limit: value 0 invalid/],
  ];
  for (const [m, pattern] of refused) t.regex(kindOf(() => parseQuery(body(m))), pattern, JSON.stringify(m));
});

test('Query: prefetches (nested), fusions and lookup_from become the REST body and parse', (t) => {
  const body = (m: object) => queryPointsToJson(req('Query', { collection_name: 'c', ...m }));
  const json = body({
    prefetch: [
      { query: { nearest: { dense: { data: [1, 0] } } }, using: 'a', limit: '20', score_threshold: 0.5, filter: { must: [{ has_id: { has_id: [{ num: '3' }] } }] }, params: { exact: true } },
      {
        prefetch: [{ query: { nearest: { id: { num: '7' } } }, using: 'b', lookup_from: { collection_name: 'other', vector_name: 'v' } }],
        query: { rrf: { k: 60, weights: [2] } },
        limit: '5',
      },
    ],
    query: { fusion: 'DBSF' },
    limit: '4',
  });
  t.deepEqual(json, {
    prefetch: [
      { query: { nearest: [1, 0] }, using: 'a', filter: { must: [{ has_id: [3] }] }, params: { exact: true }, score_threshold: 0.5, limit: 20 },
      { prefetch: [{ query: { nearest: 7 }, using: 'b', lookup_from: { collection: 'other', vector: 'v' } }], query: { rrf: { k: 60, weights: [2] } }, limit: 5 },
    ],
    query: { fusion: 'dbsf' },
    limit: 4,
  });
  const q = parseQuery(json);
  t.deepEqual(q.query, { fusion: { method: 'dbsf' } });
  t.is(q.prefetch?.length, 2);
  t.deepEqual(q.prefetch?.[1].query, { fusion: { method: 'rrf', k: 60, weights: [2] } });
  t.deepEqual(q.prefetch?.[1].prefetch[0].lookupFrom, { collection: 'other', vector: 'v', shards: null });
  t.deepEqual(parseQuery(body({ query: { rrf: {} }, prefetch: [{ query: { nearest: { dense: { data: [1, 0] } } } }] })).query, { fusion: { method: 'rrf', k: 2, weights: null } });
});

test('Search and Recommend become the legacy REST bodies; an unset limit is 0 and refused as REST refuses it', (t) => {
  const s = searchPointsToJson(req('Search', { collection_name: 'c', vector: [1, 0], vector_name: 'image', limit: '2', with_payload: { include: { fields: ['a'] } } }));
  t.deepEqual(s, { vector: { name: 'image', vector: [1, 0] }, limit: 2, with_payload: { include: ['a'] } });
  t.truthy(parseSearch(s));
  t.regex(kindOf(() => parseSearch(searchPointsToJson(req('Search', { vector: [1] })))), /^validation: .*limit: value 0 invalid/);
  t.regex(kindOf(() => parseSearch(searchPointsToJson(req('Search', { vector: [1], sparse_indices: { data: [4] }, limit: '1' })))), /a sparse query names its vector/);
  const ss = parseSearch(searchPointsToJson(req('Search', { vector: [1], sparse_indices: { data: [4] }, vector_name: 'text', limit: '1' })));
  t.is(ss.using, 'text');
  t.deepEqual(ss.query, { nearest: { sparse: { indices: Uint32Array.of(4), values: Float32Array.of(1) } } });

  const r = recommendPointsToJson(req('Recommend', { positive: [{ num: '1' }], negative: [{ uuid: '550e8400-e29b-41d4-a716-446655440000' }], positive_vectors: [{ dense: { data: [0, 1] } }], limit: '3', using: 'text' }));
  t.deepEqual(r, { positive: [1, [0, 1]], negative: ['550e8400-e29b-41d4-a716-446655440000'], using: 'text', limit: 3 });
  t.truthy(parseRecommend(r));
  t.regex(kindOf(() => parseRecommend(recommendPointsToJson(req('Recommend', { limit: '3' })))), /^bad_input: .*At least one positive/);
});

test('batch items: the batch names the collection, consistency and timeout', (t) => {
  t.notThrows(() => checkBatchItem(req('Query', { collection_name: 'c' }), 'c', 'query_points[0]'));
  t.notThrows(() => checkBatchItem(req('Query', {}), 'c', 'query_points[0]'));
  t.regex(kindOf(() => checkBatchItem(req('Query', { collection_name: 'd' }), 'c', 'query_points[0]')), /differs from the batch's collection/);
  t.regex(kindOf(() => checkBatchItem(req('Query', { read_consistency: { type: 'All' } }), 'c', 'query_points[1]')), /query_points\[1\]\.read_consistency/);
  t.regex(kindOf(() => checkBatchItem(req('Search', { timeout: '3' }), 'c', 'search_points[0]')), /search_points\[0\]\.timeout/);
});

test('payload indexes: field types and index parameters become REST field schemas', (t) => {
  const schema = (m: object) => fieldSchemaToJson(req('CreateFieldIndex', { collection_name: 'c', field_name: 'f', ...m }));
  t.is(schema({ field_type: 'FieldTypeKeyword' }), 'keyword');
  t.is(schema({ field_type: 'FieldTypeDatetime' }), 'datetime');
  t.is(schema({}), undefined);
  t.deepEqual(schema({ field_type: 'FieldTypeInteger', field_index_params: { integer_index_params: { range: true, lookup: false } } }), { type: 'integer', range: true, lookup: false });
  t.deepEqual(schema({ field_index_params: { keyword_index_params: { is_tenant: true } } }), { type: 'keyword', is_tenant: true });
  t.deepEqual(
    schema({ field_index_params: { text_index_params: { tokenizer: 'Prefix', min_token_len: '2', lowercase: true, stopwords: { languages: ['english'] }, stemmer: { snowball: { language: 'english' } } } } }),
    { type: 'text', tokenizer: 'prefix', min_token_len: 2, lowercase: true, stopwords: { languages: ['english'], custom: [] }, stemmer: { type: 'snowball', language: 'english' } },
  );
  // Unknown (0) is what a client that chose no tokenizer sends: REST's default (word) applies.
  t.deepEqual(createIndexBody({ field_name: 'f', field_schema: schema({ field_index_params: { text_index_params: {} } }) }).schema.params?.tokenizer, 'word');
  t.regex(kindOf(() => schema({ field_type: 'FieldTypeFloat', field_index_params: { keyword_index_params: {} } })), /do not fit field_type/);
  t.regex(kindOf(() => createIndexBody({ field_name: 'f', field_schema: schema({}) })), /^bad_input: .*Can't auto-detect field type/);
  t.regex(kindOf(() => createIndexBody({ field_name: 'f', field_schema: schema({ field_index_params: { integer_index_params: { range: false, lookup: false } } }) })), /can't be both disabled/);
});

test('answers: records, scored points and update results encode and decode as a client reads them', (t) => {
  const rec = res('Scroll', {
    result: [
      retrievedPointOut({ id: 1, payload: { a: 1, b: 'x' }, vector: [1, 0.5] }, 1),
      retrievedPointOut({ id: '550e8400-e29b-41d4-a716-446655440000', vector: { image: [1], text: [2, 3] }, shard_key: 'eu' }, 1),
      retrievedPointOut({ id: 3, order_value: 2.5, shard_key: 4 }, 1),
      retrievedPointOut({ id: 4, order_value: 7 }, 1),
    ],
    next_page_offset: { num: '5' },
    time: 0.001,
  });
  t.deepEqual(rec.result[0].id, { num: '1', point_id_options: 'num' });
  t.deepEqual(rec.result[0].vectors.vector.dense.data, [1, 0.5]);
  t.deepEqual(mapToJson(rec.result[0].payload, 'p'), { a: 1, b: 'x' });
  t.is(rec.result[1].id.uuid, '550e8400-e29b-41d4-a716-446655440000');
  t.deepEqual(rec.result[1].vectors.vectors.vectors.text.dense.data, [2, 3]);
  t.is(rec.result[1].shard_key.keyword, 'eu');
  t.is(rec.result[1].payload, undefined, 'no payload asked for: none sent');
  t.deepEqual([rec.result[2].order_value.float, rec.result[2].shard_key.number], [2.5, '4']);
  t.is(rec.result[3].order_value.int, '7');
  t.is(rec.next_page_offset.num, '5');

  const scored = res('Query', { result: [scoredPointOut({ id: 2, version: 3, score: 0.75, payload: {} }, 1)], time: 0 });
  t.like(scored.result[0], { score: 0.75, version: '3' });
  t.deepEqual(res('Upsert', { result: updateResultOut({ operation_id: 12, status: 'completed' }), time: 0 }).result, { operation_id: '12', status: 'Completed', _operation_id: 'operation_id' });
  t.deepEqual(res('CreateFieldIndex', { result: updateResultOut({ operation_id: null, status: 'acknowledged' }), time: 0 }).result, { status: 'Acknowledged' });
});

test('Query: formula (every Expression variant), sample and nearest_with_mmr become the REST body and parse', (t) => {
  const body = (m: object) => queryPointsToJson(req('Query', { collection_name: 'c', prefetch: [{ query: { nearest: { dense: { data: [1, 0] } } } }], ...m }));
  const v = (variable: string) => ({ variable });
  const k = (constant: number) => ({ constant });
  const expression = {
    sum: {
      sum: [
        v('$score'),
        { mult: { mult: [k(0.5), { condition: { field: { key: 'tag', match: { keyword: 'x' } } } }] } },
        { div: { left: v('price'), right: k(2), by_zero_default: 1 } },
        { neg: { abs: { sqrt: { pow: { base: v('$score[1]'), exponent: k(2) } } } } },
        { exp: { log10: { ln: k(3) } } },
        { geo_distance: { origin: { lat: 1, lon: 2 }, to: 'loc' } },
        { exp_decay: { x: { datetime_key: 'at' }, target: { datetime: '2026-01-01T00:00:00Z' }, scale: 86400, midpoint: 0.5 } },
        { gauss_decay: { x: v('n') } },
        { lin_decay: { x: v('n'), target: k(3), scale: 2 } },
      ],
    },
  };
  const json = body({ query: { formula: { expression, defaults: { price: { double_value: 3 }, '$score[1]': { integer_value: '0' } } } } });
  t.deepEqual(json.query, {
    formula: {
      sum: [
        '$score',
        { mult: [0.5, { key: 'tag', match: { value: 'x' } }] },
        { div: { left: 'price', right: 2, by_zero_default: 1 } },
        { neg: { abs: { sqrt: { pow: { base: '$score[1]', exponent: 2 } } } } },
        { exp: { log10: { ln: 3 } } },
        { geo_distance: { origin: { lat: 1, lon: 2 }, to: 'loc' } },
        { exp_decay: { x: { datetime_key: 'at' }, target: { datetime: '2026-01-01T00:00:00Z' }, scale: 86400, midpoint: 0.5 } },
        { gauss_decay: { x: 'n' } },
        { lin_decay: { x: 'n', target: 3, scale: 2 } },
      ],
    },
    defaults: { price: 3, '$score[1]': 0 },
  });
  const q = parseQuery(json).query;
  t.true('formula' in q);
  t.deepEqual(parseQuery(body({ query: { sample: 'Random' } })).query, { sample: 'random' });
  const m = parseQuery(body({ query: { nearest_with_mmr: { nearest: { dense: { data: [1, 0] } }, mmr: { diversity: 0.25, candidates_limit: 40 } } } })).query;
  t.deepEqual(m, { nearest: { vector: Float32Array.of(1, 0) }, mmr: { lambda: 0.75, candidatesLimit: 40 } });
  // A formula nested deeper than the parser's bound is refused while it is translated.
  let deep: object = v('$score');
  for (let i = 0; i < 80; i++) deep = { neg: deep };
  t.regex(kindOf(() => body({ query: { formula: { expression: deep } } })), /^bad_input: .*nested deeper/);
});
