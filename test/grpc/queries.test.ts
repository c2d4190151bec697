/**
 * The formula, sample and MMR queries and the distance matrix through the public gRPC
 * API (qdrant.Points Query, SearchMatrixPairs, SearchMatrixOffsets) over a real
 * bin/quiver: each answer equals REST's answer to the same request on the same data
 * (random ones: checked for what holds whatever the draw, and the matrix over a filter
 * that the whole sample matches, so the pairs are the same set), and a refused formula
 * gets REST's status and words.
 */

import test, { type ExecutionContext } from 'ava';

import { mapToJson } from '../../ts/api/grpc/convert/value';
import { randomVector, rng } from '../support/vectors';
import { codeName, startGrpcQuiver, type GrpcQuiver, type QdrantGrpc } from './client';

let q: GrpcQuiver;
let g: QdrantGrpc;

type Json = Record<string, any>;
const C = 'gq';
const N = 60;
const DIM = 6;

const next = rng(77);
const data = Array.from({ length: N }, (_, i) => ({
  id: i + 1,
  vector: randomVector(next, DIM),
  payload: { i, kind: i % 3 === 0 ? 'a' : 'b', rank: (i * 7) % 13 },
}));
const qv = randomVector(next, DIM);

async function rest(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${q.server.url}${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? undefined : JSON.parse(text) };
}

async function restOk(t: ExecutionContext, method: string, path: string, body?: unknown): Promise<any> {
  const r = await rest(method, path, body);
  if (r.status !== 200) t.fail(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body?.result;
}

test.before(async (t) => {
  q = await startGrpcQuiver();
  g = q.client();
  await restOk(t, 'PUT', `/collections/${C}`, { vectors: { size: DIM, distance: 'Cosine' }, shard_number: 2 });
  await restOk(t, 'PUT', `/collections/${C}/points?wait=true`, { points: data });
});

test.after.always(async () => {
  await q?.stop();
});

const idOf = (p: Json) => (p.point_id_options === 'uuid' ? p.uuid : Number(p.num));
const scored = (ps: Json[]) => ps.map((p) => ({ id: idOf(p.id), score: p.score, payload: p.payload === undefined ? undefined : mapToJson(p.payload, 'payload') }));
const restScored = (ps: Json[]) => ps.map((p) => ({ id: p.id, score: Math.fround(p.score), payload: p.payload }));
const dense = (data: number[]) => ({ dense: { data } });
const prefetch = [{ query: { nearest: dense(qv) }, limit: '30', params: { exact: true } }];
const restPrefetch = [{ query: qv, limit: 30, params: { exact: true } }];

test('Query with a formula answers what REST answers', async (t) => {
  const expression = {
    sum: {
      sum: [
        { variable: '$score' },
        { mult: { mult: [{ constant: 0.5 }, { condition: { field: { key: 'kind', match: { keyword: 'a' } } } }] } },
        { lin_decay: { x: { variable: 'rank' }, target: { constant: 6 }, scale: 10 } },
        { div: { left: { variable: 'missing' }, right: { constant: 4 } } },
      ],
    },
  };
  const viaGrpc = await g.call('Points', 'Query', {
    collection_name: C,
    prefetch,
    query: { formula: { expression, defaults: { missing: { double_value: 2 } } } },
    limit: '10',
    with_payload: { enable: true },
  });
  const viaRest = await restOk(t, 'POST', `/collections/${C}/points/query`, {
    prefetch: restPrefetch,
    query: {
      formula: { sum: ['$score', { mult: [0.5, { key: 'kind', match: { value: 'a' } }] }, { lin_decay: { x: 'rank', target: 6, scale: 10 } }, { div: { left: 'missing', right: 4 } }] },
      defaults: { missing: 2 },
    },
    limit: 10,
    with_payload: true,
  });
  t.is(viaRest.points.length, 10);
  t.deepEqual(scored(viaGrpc.result), restScored(viaRest.points));
});

test('a refused formula answers INVALID_ARGUMENT with REST words', async (t) => {
  const req = { collection_name: C, prefetch, query: { formula: { expression: { sqrt: { neg: { constant: 4 } } } } } };
  const err = await g.fail('Points', 'Query', req);
  t.is(codeName(err.code), 'INVALID_ARGUMENT');
  const viaRest = await rest('POST', `/collections/${C}/points/query`, { prefetch: restPrefetch, query: { formula: { sqrt: { neg: 4 } } } });
  t.is(viaRest.status, 400);
  t.is(err.details, viaRest.body.status.error);
});

test('Query with nearest_with_mmr answers what REST answers', async (t) => {
  const viaGrpc = await g.call('Points', 'Query', {
    collection_name: C,
    query: { nearest_with_mmr: { nearest: dense(qv), mmr: { diversity: 0.6, candidates_limit: 25 } } },
    limit: '7',
    params: { exact: true },
  });
  const viaRest = await restOk(t, 'POST', `/collections/${C}/points/query`, { query: { nearest: qv, mmr: { diversity: 0.6, candidates_limit: 25 } }, limit: 7, params: { exact: true } });
  t.is(viaRest.points.length, 7);
  t.deepEqual(scored(viaGrpc.result), restScored(viaRest.points));
});

test('Query with sample: distinct random points under the filter', async (t) => {
  const viaGrpc = await g.call('Points', 'Query', {
    collection_name: C,
    query: { sample: 'Random' },
    filter: { must: [{ field: { key: 'kind', match: { keyword: 'a' } } }] },
    limit: '12',
    with_payload: { enable: true },
  });
  const hits = scored(viaGrpc.result);
  t.is(hits.length, 12);
  t.is(new Set(hits.map((h) => h.id)).size, 12);
  for (const h of hits) t.is(h.payload?.kind, 'a');
});

test('SearchMatrixPairs and SearchMatrixOffsets answer what REST answers', async (t) => {
  const ids = [2, 5, 9, 14, 20, 33, 41, 58];
  const filter = { must: [{ has_id: { has_id: ids.map((id) => ({ num: String(id) })) } }] };
  const restFilter = { must: [{ has_id: ids }] };
  const key = (p: { a: number; b: number; score: number }) => `${p.a}-${p.b}-${Math.fround(p.score).toFixed(6)}`;

  const pairs = await g.call('Points', 'SearchMatrixPairs', { collection_name: C, filter, sample: '8', limit: '3' });
  const restPairs = await restOk(t, 'POST', `/collections/${C}/points/search/matrix/pairs`, { filter: restFilter, sample: 8, limit: 3 });
  const viaGrpc = (pairs.result.pairs as Json[]).map((p) => ({ a: idOf(p.a), b: idOf(p.b), score: p.score }));
  t.is(viaGrpc.length, 24);
  t.deepEqual(viaGrpc.map(key).sort(), (restPairs.pairs as Array<{ a: number; b: number; score: number }>).map(key).sort());

  const off = await g.call('Points', 'SearchMatrixOffsets', { collection_name: C, filter, sample: '8', limit: '3' });
  const r = off.result;
  const gIds = (r.ids as Json[]).map(idOf);
  t.deepEqual([...gIds].sort((a, b) => a - b), ids);
  const asPairs = (r.scores as number[]).map((score, k) => ({ a: gIds[Number(r.offsets_row[k])], b: gIds[Number(r.offsets_col[k])], score }));
  t.deepEqual(asPairs.map(key).sort(), viaGrpc.map(key).sort());

  const err = await g.fail('Points', 'SearchMatrixPairs', { collection_name: C, sample: '1' });
  t.is(codeName(err.code), 'INVALID_ARGUMENT');
  t.regex(err.details, /sample/);
});
