/**
 * The response validator itself: it accepts what the reference answers and reports,
 * with JSON paths, what the reference spec forbids. No server.
 */

import test from 'ava';

import { envelopeProblems, spec } from './contract';
import { jsonPath, toJsonSchema } from './openapi';

const QUERY = '/collections/{collection_name}/points/query';

test('the v1.18 spec documents the deprecated search and recommend routes', (t) => {
  const ops = spec().operations();
  for (const op of [
    'POST /collections/{collection_name}/points/search',
    'POST /collections/{collection_name}/points/search/batch',
    'POST /collections/{collection_name}/points/recommend',
    'POST /collections/{collection_name}/points/recommend/batch',
    'POST /collections/{collection_name}/points/query',
  ]) {
    t.true(ops.includes(op), op);
  }
});

test('a conforming query answer passes, nulls included', (t) => {
  const body = {
    result: {
      points: [
        { id: 1, version: 3, score: 0.5, payload: { a: 1 }, vector: [0.1, 0.2] },
        { id: '550e8400-e29b-41d4-a716-446655440000', version: 0, score: -1, payload: null, vector: null },
        { id: 2, version: 1, score: 1, vector: { img: [1, 2] }, order_value: 4 },
      ],
    },
    status: 'ok',
    time: 0.001,
  };
  t.deepEqual(spec().validate('POST', QUERY, 200, body), []);
  t.deepEqual(envelopeProblems(200, body), []);
});

test('a wrong answer is reported with the JSON path of each problem', (t) => {
  const body = {
    result: { points: [{ id: -1, version: 1, score: 0.5 }, { id: 'not-a-uuid', score: 'high' }, { id: 3, version: 1, score: 1, payload: 5 }] },
    status: 'ok',
    time: 0.001,
  };
  const problems = spec().validate('POST', QUERY, 200, body);
  const at = (path: string) => problems.some((p) => p.startsWith(`${path}: `));
  t.true(at('$.result.points[0].id'), problems.join('\n'));
  t.true(at('$.result.points[1].id'), problems.join('\n'));
  t.true(at('$.result.points[1]'), 'missing version');
  t.true(at('$.result.points[1].score'), problems.join('\n'));
  t.true(at('$.result.points[2].payload'), problems.join('\n'));
  t.false(at('$.result.points[0].score'));
});

test('errors are checked against ErrorResponse and the reference envelope', (t) => {
  const good = { status: { error: 'Not found: x' }, time: 0.1 };
  t.deepEqual(spec().validate('GET', '/collections/{collection_name}', 404, good), []);
  t.deepEqual(envelopeProblems(404, good), []);
  const bad = { status: { error: 5 }, time: 'soon' };
  const problems = spec().validate('GET', '/collections/{collection_name}', 404, bad);
  t.true(problems.some((p) => p.startsWith('$.status.error: ')), problems.join('\n'));
  t.true(problems.some((p) => p.startsWith('$.time: ')), problems.join('\n'));
  t.deepEqual(envelopeProblems(404, { status: 'ok', time: 1, result: true }).length, 2);
  t.deepEqual(envelopeProblems(200, { status: 'ok', time: 1 }), ['$.result: missing']);
});

test('UpdateResult: operation_id may be null, status is an enum', (t) => {
  const pattern = '/collections/{collection_name}/points';
  t.deepEqual(spec().validate('PUT', pattern, 200, { result: { operation_id: null, status: 'completed' }, status: 'ok', time: 0 }), []);
  const problems = spec().validate('PUT', pattern, 200, { result: { operation_id: 1.5, status: 'done' }, status: 'ok', time: 0 });
  t.true(problems.some((p) => p.startsWith('$.result.operation_id: ')), problems.join('\n'));
  t.true(problems.some((p) => p.startsWith('$.result.status: ')), problems.join('\n'));
});

test('OpenAPI nullable becomes a null type; a bare {nullable: true} is the null branch', (t) => {
  t.deepEqual(toJsonSchema({ type: 'integer', nullable: true, format: 'uint' }), { type: ['integer', 'null'], format: 'uint' });
  t.deepEqual(toJsonSchema({ anyOf: [{ $ref: '#/components/schemas/Payload' }, { nullable: true }] }), {
    anyOf: [{ $ref: 'qdrant-openapi-v1.18#/definitions/Payload' }, { type: 'null' }],
  });
  t.deepEqual(toJsonSchema({ type: 'string', enum: ['a'], nullable: true }), { type: ['string', 'null'], enum: ['a', null] });
  t.deepEqual(toJsonSchema({ type: 'object', properties: { nullable: { type: 'string' }, example: { type: 'integer' } } }), {
    type: 'object',
    properties: { nullable: { type: 'string' }, example: { type: 'integer' } },
  });
});

test('JSON paths', (t) => {
  t.is(jsonPath(''), '$');
  t.is(jsonPath('/result/points/0/id'), '$.result.points[0].id');
  t.is(jsonPath('/result/payload_schema/a~1b'), '$.result.payload_schema["a/b"]');
});

test('an unknown operation is an error, not a silent pass', (t) => {
  t.throws(() => spec().validate('GET', '/collections/{collection_name}/nothing', 200, {}), { message: /no path/ });
  t.throws(() => spec().validate('DELETE', '/collections/{collection_name}/points/query', 200, {}), { message: /no DELETE/ });
});
