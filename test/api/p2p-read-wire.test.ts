/**
 * A search read between peers (encodeRead/decodeRead of ts/api/p2p/points.ts): every field
 * of SearchRequest travels and comes back the same; the query's own fields (its kind,
 * prefetches, lookup_from) do not travel; the bytes are the JSON peers of older builds
 * write and read (pinned here field by field, so a change of the wire shows).
 */
import test from 'ava';

import { decodeRead, encodeRead } from '../../ts/api/p2p/points';
import type { SearchRequest } from '../../ts/collection/replica';

const base64 = (xs: number[]) => Buffer.from(new Float32Array(xs).buffer).toString('base64');

test('a dense search with every option: each field travels, the query\'s own fields do not', (t) => {
  const req = {
    using: 'img',
    vector: new Float32Array([0.5, -1.25, 3]),
    filter: { must: [{ key: 'a', match: { value: 1 } }] },
    limit: 7,
    offset: 2,
    scoreThreshold: 0.3,
    hnswEf: 99,
    exact: true,
    quantization: { rescore: true, oversampling: 2 },
    withPayload: ['x'],
    withVector: true,
    exclude: [{ kind: 'num' as const, value: 5n }, { kind: 'uuid' as const, value: '550e8400-e29b-41d4-a716-446655440000' }],
    query: { kind: 'nearest', ids: [1n] },
    prefetch: [{ limit: 3 }],
    lookupFrom: { collection: 'other' },
  };
  const bytes = encodeRead('search', req);
  t.deepEqual(JSON.parse(bytes.toString('utf8')), {
    using: 'img',
    vector: base64([0.5, -1.25, 3]),
    filter: { must: [{ key: 'a', match: { value: 1 } }] },
    limit: 7,
    offset: 2,
    scoreThreshold: 0.3,
    hnswEf: 99,
    exact: true,
    quantization: { rescore: true, oversampling: 2 },
    withPayload: ['x'],
    withVector: true,
    exclude: [5, '550e8400-e29b-41d4-a716-446655440000'],
  });
  const back = decodeRead('search', bytes) as SearchRequest & Record<string, unknown>;
  t.deepEqual(Array.from(back.vector), [0.5, -1.25, 3]);
  t.deepEqual(back.exclude?.map(({ kind, value }) => ({ kind, value })), [{ kind: 'num', value: 5n }, { kind: 'uuid', value: '550e8400-e29b-41d4-a716-446655440000' }]);
  for (const k of ['using', 'filter', 'limit', 'offset', 'scoreThreshold', 'hnswEf', 'exact', 'quantization', 'withPayload', 'withVector'] as const) t.deepEqual(back[k], req[k], k);
  t.false('query' in back || 'prefetch' in back || 'lookupFrom' in back);
});

test('searches by a rule over dense examples, by a sparse vector and by a rule over sparse examples travel whole', (t) => {
  const ruled = { using: '', vector: new Float32Array(0), filter: null, limit: 3, offset: 0, scoreThreshold: null, withPayload: false, withVector: false, rule: { rule: 'context' as const, positives: 1, examples: new Float32Array([1, 2, 3, 4]) } };
  const bytes = encodeRead('search', ruled);
  t.deepEqual(JSON.parse(bytes.toString('utf8')).rule, { rule: 'context', positives: 1, examples: base64([1, 2, 3, 4]) });
  const r = decodeRead('search', bytes) as SearchRequest;
  t.is(r.rule?.rule, 'context');
  t.is(r.rule?.positives, 1);
  t.deepEqual(Array.from(r.rule!.examples), [1, 2, 3, 4]);

  const sparse = { using: 's', vector: new Float32Array(0), filter: null, limit: 3, offset: 0, scoreThreshold: null, withPayload: true, withVector: ['s'], sparse: { indices: new Uint32Array([1, 9]), values: new Float32Array([0.5, 2]) }, sparseRule: { rule: 'best_score' as const, positives: 1, examples: [{ indices: new Uint32Array([3]), values: new Float32Array([1]) }] } };
  const sb = encodeRead('search', sparse);
  t.deepEqual(JSON.parse(sb.toString('utf8')).sparseRule, { rule: 'best_score', positives: 1, examples: [{ indices: [3], values: [1] }] });
  const s = decodeRead('search', sb) as SearchRequest;
  t.deepEqual(Array.from(s.sparse!.indices), [1, 9]);
  t.deepEqual(Array.from(s.sparse!.values), [0.5, 2]);
  t.is(s.sparseRule?.rule, 'best_score');
  t.deepEqual(Array.from(s.sparseRule!.examples[0].indices), [3]);
});
