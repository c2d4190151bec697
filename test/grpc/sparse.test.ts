/**
 * Sparse vectors over the public gRPC API of a real bin/quiver: CreateCollection with a
 * SparseVectorConfig, CollectionInfo showing it as REST shows it, points upserted with
 * named sparse vectors, and a Query (nearest sparse, `using`) and a Search (a
 * NamedSparseVector: `sparse_indices` + `vector_name`) answering as REST does and as
 * the brute-force scorer says.
 */

import test from 'ava';

import { mulberry32 } from '../support/rng';
import { bruteForce, randomSparse, type Sparse } from '../support/sparse';
import { startGrpcQuiver, type GrpcQuiver, type QdrantGrpc } from './client';

let q: GrpcQuiver;
let c: QdrantGrpc;

test.before(async () => {
  q = await startGrpcQuiver();
  c = q.client();
});

test.after.always(async () => {
  await q?.stop();
});

async function rest(method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${q.server.url}${path}`, { method, headers: body === undefined ? {} : { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return ((await res.json()) as { result: unknown }).result;
}

test('sparse collections, points and queries over gRPC', async (t) => {
  const created = await c.call('Collections', 'Create', {
    collection_name: 'gs',
    vectors_config: { params_map: { map: { d: { size: '2', distance: 'Dot' } } } },
    sparse_vectors_config: { map: { text: { index: { full_scan_threshold: '50', datatype: 'Float16' }, modifier: 'None' }, bm: { modifier: 'Idf' } } },
  });
  t.is(created.result, true);
  const viaRest = await rest('GET', '/collections/gs');
  t.deepEqual(viaRest.config.params.sparse_vectors, { text: { index: { full_scan_threshold: 50, datatype: 'float16' }, modifier: 'none' }, bm: { modifier: 'idf' } });
  const { result: info } = await c.call('Collections', 'Get', { collection_name: 'gs' });
  const sv = info.config.params.sparse_vectors_config.map;
  t.is(sv.text.index.full_scan_threshold, '50');
  t.is(sv.text.index.datatype, 'Float16');
  t.is(sv.bm.modifier, 'Idf');

  const r = mulberry32(3);
  const store = new Map<number, Sparse>();
  const points = [];
  for (let id = 1; id <= 60; id++) {
    // Values that float16 holds exactly, so the brute force needs no rounding.
    const v = randomSparse(r, 8, 40);
    store.set(id, v);
    points.push({ id: { num: String(id) }, vectors: { vectors: { vectors: { d: { dense: { data: [1, 0] } }, text: { sparse: v } } } } });
  }
  const up = await c.call('Points', 'Upsert', { collection_name: 'gs', wait: true, points });
  t.is(up.result.status, 'Completed');

  const got = await c.call('Points', 'Get', { collection_name: 'gs', ids: [{ num: '5' }], with_vectors: { include: { names: ['text'] } } });
  const s5 = store.get(5)!;
  const order = s5.indices.map((d, i) => [d, s5.values[i]]).sort((a, b) => a[0] - b[0]);
  t.deepEqual(got.result[0].vectors.vectors.vectors.text.sparse, { indices: order.map((e) => e[0]), values: order.map((e) => e[1]) });

  for (let i = 0; i < 5; i++) {
    const qv = randomSparse(r, 5, 40);
    const want = bruteForce(store, qv, 7);
    const qr = await c.call('Points', 'Query', { collection_name: 'gs', query: { nearest: { sparse: qv } }, using: 'text', limit: '7' });
    t.deepEqual(qr.result.map((p: { id: { num: string }; score: number }) => ({ id: Number(p.id.num), score: p.score })), want);
    const sr = await c.call('Points', 'Search', { collection_name: 'gs', vector: qv.values, sparse_indices: { data: qv.indices }, vector_name: 'text', limit: '7' });
    t.deepEqual(sr.result.map((p: { id: { num: string }; score: number }) => ({ id: Number(p.id.num), score: p.score })), want);
    const viaRestQ = await rest('POST', '/collections/gs/points/query', { query: qv, using: 'text', limit: 7 });
    t.deepEqual(viaRestQ.points.map((p: { id: number; score: number }) => ({ id: p.id, score: p.score })), want);
  }
});
