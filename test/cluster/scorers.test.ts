/**
 * Queries scored by a rule over examples in a cluster of two real peers, with the
 * shards of one collection on both: discovery, context and the best_score / sum_scores
 * recommend strategies through either peer reach the remote shards over the replica
 * wire (the rule and its example vectors, dense or sparse, travel with the search), and the merged answer
 * equals the rule applied by hand to every point (Dot similarity; formulas as in
 * https://qdrant.tech/documentation/concepts/explore/), example ids left out.
 */

import test from 'ava';

import { mulberry32 } from '../support/rng';
import { Cluster } from './harness';
import { call, createCollection, peerIds, shardReplicas } from './transfer-support';

let cluster: Cluster | null = null;

test.before(async () => {
  cluster = await Cluster.start(2);
});

test.after.always(async () => {
  await cluster?.destroy();
});

const DIM = 6;
const sigmoid = (x: number) => 0.5 * (x / (1 + Math.abs(x)) + 1);

test('discover, context, best_score and sum_scores across peers equal the brute force', async (t) => {
  const c = cluster!;
  const name = 'scorers_cluster';
  await createCollection(c, name, { vectors: { size: DIM, distance: 'Dot' }, shard_number: 4, replication_factor: 1 });
  const holders = new Set<string>();
  for (let s = 0; s < 4; s++) for (const p of Object.keys(await shardReplicas(c, 0, name, s))) holders.add(p);
  t.deepEqual([...holders].sort(), (await peerIds(c)).sort(), 'both peers hold shards');

  const r = mulberry32(7);
  const data = new Map<number, number[]>();
  for (let id = 1; id <= 200; id++) data.set(id, Array.from({ length: DIM }, () => Math.fround(r() * 2 - 1)));
  const up = await call(c.peers[0].url, 'PUT', `/collections/${name}/points?wait=true`, { points: [...data].map(([id, vector]) => ({ id, vector })) });
  t.is(up.status, 200, JSON.stringify(up.body));

  const dot = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i], 0);
  const s = (id: number, v: number[]) => dot(data.get(id)!, v);
  const cases: Array<{ body: object; examples: number[]; score: (v: number[]) => number }> = [
    {
      body: { query: { discover: { target: 1, context: [{ positive: 2, negative: 3 }, { positive: 4, negative: 5 }] } } },
      examples: [1, 2, 3, 4, 5],
      score: (v) => Math.sign(s(2, v) - s(3, v)) + Math.sign(s(4, v) - s(5, v)) + sigmoid(s(1, v)),
    },
    {
      body: { query: { context: [{ positive: 6, negative: 7 }] } },
      examples: [6, 7],
      score: (v) => {
        const x = Math.min(s(6, v) - s(7, v) - 2 ** -23, 0);
        return x / (1 + Math.abs(x));
      },
    },
    {
      body: { query: { recommend: { positive: [8, 9], negative: [10], strategy: 'best_score' } } },
      examples: [8, 9, 10],
      score: (v) => {
        const p = Math.max(s(8, v), s(9, v));
        const n = s(10, v);
        return p > n ? sigmoid(p) : -sigmoid(n);
      },
    },
    {
      body: { query: { recommend: { positive: [11], negative: [12, 13], strategy: 'sum_scores' } } },
      examples: [11, 12, 13],
      score: (v) => s(11, v) - s(12, v) - s(13, v),
    },
  ];
  for (const k of cases) {
    const want = [...data]
      .filter(([id]) => !k.examples.includes(id))
      .map(([id, v]) => ({ id, score: k.score(v) }))
      .sort((a, b) => b.score - a.score || a.id - b.id)
      .slice(0, 6);
    for (const p of c.peers) {
      const got = await call(p.url, 'POST', `/collections/${name}/points/query`, { ...k.body, limit: 6, params: { exact: true } });
      t.is(got.status, 200, JSON.stringify(got.body));
      const pts = got.body.result.points as Array<{ id: number; score: number }>;
      t.is(pts.length, 6);
      pts.forEach((x, i) => t.true(Math.abs(x.score - want[i].score) < 1e-4 * Math.max(1, Math.abs(want[i].score)), `${JSON.stringify(k.body)} via peer ${p.index}, rank ${i}: ${x.score} vs ${want[i].score}`));
    }
  }
  // A query by a point id reaches remote shards too (its example ids never go on the wire).
  const near = await call(c.peers[0].url, 'POST', `/collections/${name}/points/query`, { query: 1, limit: 3, params: { exact: true } });
  t.is(near.status, 200, JSON.stringify(near.body));
  const wantNear = [...data].filter(([id]) => id !== 1).map(([id, v]) => ({ id, score: s(1, v) })).sort((a, b) => b.score - a.score || a.id - b.id).slice(0, 3);
  t.deepEqual(near.body.result.points.map((x: { id: number }) => x.id), wantNear.map((w) => w.id));
  // The legacy route too, through the second peer.
  const d = await call(c.peers[1].url, 'POST', `/collections/${name}/points/discover`, { target: 1, context: [{ positive: 2, negative: 3 }], limit: 3, params: { exact: true } });
  t.is(d.status, 200, JSON.stringify(d.body));
  t.is(d.body.result.length, 3);

  // Sparse examples (an exact scan on each replica) cross the wire too.
  const sname = 'scorers_sparse';
  await createCollection(c, sname, { vectors: { size: DIM, distance: 'Dot' }, sparse_vectors: { s: {} }, shard_number: 4, replication_factor: 1 });
  const sparse = new Map<number, Map<number, number>>();
  for (let id = 1; id <= 80; id++) sparse.set(id, new Map([[Math.floor(r() * 12), Math.fround(r())], [12 + Math.floor(r() * 12), Math.fround(r())]]));
  const wire = (m: Map<number, number>) => ({ indices: [...m.keys()], values: [...m.values()] });
  const sup = await call(c.peers[1].url, 'PUT', `/collections/${sname}/points?wait=true`, { points: [...sparse].map(([id, m]) => ({ id, vector: { '': data.get(id)!, s: wire(m) } })) });
  t.is(sup.status, 200, JSON.stringify(sup.body));
  const sdot = (a: Map<number, number>, b: Map<number, number>) => [...a].reduce((acc, [k2, v]) => acc + v * (b.get(k2) ?? 0), 0);
  const wantS = [...sparse]
    .filter(([id]) => id !== 1 && id !== 2)
    .map(([id, m]) => ({ id, score: sdot(sparse.get(1)!, m) - sdot(sparse.get(2)!, m) }))
    .sort((a, b) => b.score - a.score || a.id - b.id)
    .slice(0, 5);
  for (const p of c.peers) {
    const got = await call(p.url, 'POST', `/collections/${sname}/points/query`, { query: { recommend: { positive: [1], negative: [2], strategy: 'sum_scores' } }, using: 's', limit: 5 });
    t.is(got.status, 200, JSON.stringify(got.body));
    t.deepEqual(got.body.result.points.map((x: { id: number }) => x.id), wantS.map((w) => w.id), `sparse sum_scores via peer ${p.index}`);
  }
});
