/**
 * The distance matrix, formula, sample and MMR queries in a cluster of two real peers,
 * with the collection's shards on both: through either peer, the matrix of a sample that
 * spans both peers' shards equals pairwise scores computed here, a formula over a
 * prefetch equals its direct evaluation over the exact candidates, a sample covers
 * points of every shard without repeats, and MMR picks what it picks on one node.
 */

import test from 'ava';

import { normalize, randomVector, rng, score } from '../support/vectors';
import { Cluster } from './harness';
import { call, createCollection } from './transfer-support';

let cluster: Cluster | null = null;

test.before(async () => {
  cluster = await Cluster.start(2);
});

test.after.always(async () => {
  await cluster?.destroy();
});

const DIM = 5;
const N = 120;

test('matrix, formula, sample and mmr over shards on two peers', async (t) => {
  const c = cluster!;
  const name = 'queries_cluster';
  await createCollection(c, name, { vectors: { size: DIM, distance: 'Cosine' }, shard_number: 4, replication_factor: 1 });
  const next = rng(404);
  const points = Array.from({ length: N }, (_, i) => ({ id: i + 1, vector: randomVector(next, DIM), payload: { w: (i % 9) + 1 } }));
  const byId = new Map(points.map((p) => [p.id, p]));
  const up = await call(c.peers[0].url, 'PUT', `/collections/${name}/points?wait=true`, { points });
  t.is(up.status, 200, JSON.stringify(up.body));
  const qv = randomVector(next, DIM);
  const ranked = points.map((p) => ({ id: p.id, s: score('Cosine', qv, p.vector) })).sort((a, b) => b.s - a.s);

  for (const peer of c.peers) {
    // The matrix of a sample of 40 (points of all four shards, on both peers).
    const m = await call(peer.url, 'POST', `/collections/${name}/points/search/matrix/offsets`, { sample: 40, limit: 3 });
    t.is(m.status, 200, JSON.stringify(m.body));
    const { ids, offsets_row: rows, offsets_col: cols, scores } = m.body.result as { ids: number[]; offsets_row: number[]; offsets_col: number[]; scores: number[] };
    t.is(new Set(ids).size, 40);
    t.is(scores.length, 120);
    scores.forEach((s, k) => {
      const a = byId.get(ids[rows[k]])!.vector;
      const b = byId.get(ids[cols[k]])!.vector;
      t.true(Math.abs(s - score('Cosine', a, b)) < 1e-4);
    });
    for (let row = 0; row < ids.length; row++) {
      const best = ids.filter((_, j) => j !== row).map((id) => score('Cosine', byId.get(ids[row])!.vector, byId.get(id)!.vector)).sort((x, y) => y - x);
      const got = scores.filter((_, k) => rows[k] === row);
      got.forEach((s, k) => t.true(Math.abs(s - best[k]) < 1e-4, `row ${row}, neighbour ${k}`));
    }

    // A formula over a prefetch: $score × w, evaluated here over the exact top 30.
    const f = await call(peer.url, 'POST', `/collections/${name}/points/query`, {
      prefetch: { query: qv, limit: 30, params: { exact: true } },
      query: { formula: { mult: ['$score', 'w'] } },
      limit: 10,
    });
    t.is(f.status, 200, JSON.stringify(f.body));
    const expected = ranked.slice(0, 30).map((r) => ({ id: r.id, score: r.s * byId.get(r.id)!.payload.w })).sort((a, b) => b.score - a.score);
    const got = f.body.result.points as Array<{ id: number; score: number }>;
    t.deepEqual(got.map((p) => p.id), expected.slice(0, 10).map((e) => e.id));
    got.forEach((p, k) => t.true(Math.abs(p.score - expected[k].score) < 1e-4));

    // A sample of all points: every one once.
    const s = await call(peer.url, 'POST', `/collections/${name}/points/query`, { query: { sample: 'random' }, limit: N });
    t.is(s.status, 200, JSON.stringify(s.body));
    t.deepEqual((s.body.result.points as Array<{ id: number }>).map((p) => p.id).sort((a, b) => a - b), points.map((p) => p.id));

    // MMR with no diversity is the nearest list; with some it differs, and keeps search scores.
    const plain = await call(peer.url, 'POST', `/collections/${name}/points/query`, { query: { nearest: qv, mmr: { diversity: 0, candidates_limit: 20 } }, limit: 5, params: { exact: true } });
    t.deepEqual((plain.body.result.points as Array<{ id: number }>).map((p) => p.id), ranked.slice(0, 5).map((r) => r.id));
    const diverse = await call(peer.url, 'POST', `/collections/${name}/points/query`, { query: { nearest: qv, mmr: { diversity: 0.9, candidates_limit: 20 } }, limit: 5, params: { exact: true } });
    const picked = diverse.body.result.points as Array<{ id: number; score: number }>;
    t.is(picked.length, 5);
    for (const p of picked) {
      t.true(ranked.slice(0, 20).some((r) => r.id === p.id));
      t.true(Math.abs(p.score - dot(normalize(qv), normalize(byId.get(p.id)!.vector))) < 1e-4);
    }
  }
});

function dot(a: number[], b: number[]): number {
  return a.reduce((s, x, i) => s + x * b[i], 0);
}
