/**
 * The replicated data path on real peers (test/cluster/harness.ts): point writes and
 * reads through every peer of a 3-peer cluster with shards on other peers, write and read
 * consistency, replicas marked Dead when their peer fails and brought back by recovery,
 * identical replica content after it.
 */

import test from 'ava';

import { spec } from '../support/contract';
import { Cluster, api, change, waitFor } from './harness';
import { allActive, digests, scrollAll, states } from './replicas';

const DIM = 4;

function vec(i: number): number[] {
  return [Math.sin(i), Math.cos(i), Math.sin(i * 0.7 + 1), Math.cos(i * 1.3 + 2)];
}

function points(from: number, n: number, tag = 'a'): Array<{ id: number; vector: number[]; payload: { i: number; tag: string } }> {
  return Array.from({ length: n }, (_, k) => ({ id: from + k, vector: vec(from + k), payload: { i: from + k, tag } }));
}

async function upsert(url: string, name: string, pts: unknown[], q = 'wait=true'): Promise<{ status: number; body: any }> {
  return api(url, 'PUT', `/collections/${name}/points?${q}`, { points: pts });
}

test.serial('3 peers, 3 shards, RF 2: writes through every peer; count, scroll, retrieve and query agree through every peer with consistency=all', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const created = await change(c.peers[0].url, 'PUT', '/collections/r', { vectors: { size: DIM, distance: 'Cosine' }, shard_number: 3, replication_factor: 2 });
  t.is(created.status, 200, JSON.stringify(created.body));
  await waitFor('every peer has the collection', async () => (await Promise.all(c.peers.map((p) => api(p.url, 'GET', '/collections/r')))).every((r) => r.status === 200));
  for (let i = 0; i < 3; i++) {
    const r = await upsert(c.peers[i].url, 'r', points(i * 100, 100));
    t.is(r.status, 200, JSON.stringify(r.body));
    t.is(r.body.result.status, 'completed');
  }
  for (let i = 0; i < 3; i++) {
    const url = c.peers[i].url;
    for (const q of ['', '?consistency=all', '?consistency=majority', '?consistency=2']) {
      const n = await api(url, 'POST', `/collections/r/points/count${q}`, { exact: true });
      t.is(n.status, 200, JSON.stringify(n.body));
      t.is(n.body.result.count, 300, `count through peer ${i} ${q}`);
    }
    const all = await scrollAll(url, 'r', '?consistency=all');
    t.deepEqual(
      all.map((p) => p.id),
      Array.from({ length: 300 }, (_, k) => k),
    );
    const got = await api(url, 'POST', '/collections/r/points?consistency=all', { ids: [5, 150, 299, 1000], with_payload: true });
    t.is(got.status, 200, JSON.stringify(got.body));
    t.deepEqual(
      got.body.result.map((p: any) => [p.id, p.payload.i]),
      [
        [5, 5],
        [150, 150],
        [299, 299],
      ],
    );
    const hits = await api(url, 'POST', '/collections/r/points/query?consistency=all', { query: vec(42), limit: 3 });
    t.is(hits.status, 200, JSON.stringify(hits.body));
    t.is(hits.body.result.points[0].id, 42);
    // Hybrid: each prefetch is gathered from every shard (some on other peers) before the
    // fusion; re-scoring reaches the remote replicas as an ordinary search over the candidates.
    const alone = async (v: number[]) => (await api(url, 'POST', '/collections/r/points/query?consistency=all', { query: v, limit: 20 })).body.result.points as Array<{ id: number; score: number }>;
    const [la, lb] = [await alone(vec(42)), await alone(vec(7))];
    const prefetch = [{ query: vec(42), limit: 20 }, { query: vec(7), limit: 20 }];
    const fused = await api(url, 'POST', '/collections/r/points/query?consistency=all', { prefetch, query: { fusion: 'rrf' }, limit: 8 });
    t.is(fused.status, 200, JSON.stringify(fused.body));
    const rrf = new Map<number, number>();
    for (const l of [la, lb]) l.forEach((h, rank) => rrf.set(h.id, Math.fround((rrf.get(h.id) ?? 0) + Math.fround(1 / (rank + 2)))));
    const want = [...rrf].sort((a, b) => b[1] - a[1] || a[0] - b[0]).slice(0, 8);
    t.deepEqual(fused.body.result.points.map((h: any) => [h.id, h.score]), want, `rrf through peer ${i}`);
    const rescored = await api(url, 'POST', '/collections/r/points/query', { prefetch, query: vec(150), limit: 5 });
    t.is(rescored.status, 200, JSON.stringify(rescored.body));
    const cos = (a: number[], b: number[]) => a.reduce((s, x, k) => s + x * b[k], 0) / Math.hypot(...a) / Math.hypot(...b);
    const cands = [...new Set([...la, ...lb].map((h) => h.id))].map((id) => ({ id, score: cos(vec(id), vec(150)) })).sort((a, b) => b.score - a.score);
    t.deepEqual(rescored.body.result.points.map((h: any) => h.id), cands.slice(0, 5).map((h) => h.id), `re-score through peer ${i}`);
  }
  // The cluster as every peer shows it: GET /cluster/telemetry (the reference's shape), metrics per replica state.
  const tel = await api(c.peers[2].url, 'GET', '/cluster/telemetry');
  t.is(tel.status, 200, JSON.stringify(tel.body));
  t.deepEqual(spec().validate('GET', '/cluster/telemetry', tel.status, tel.body), []);
  t.deepEqual(
    tel.body.result.collections.r.shards.map((s: any) => s.replicas.length),
    [2, 2, 2],
  );
  t.is(Object.keys(tel.body.result.cluster.peers).length, 3);
  t.true(Object.values(tel.body.result.cluster.peers).every((p: any) => p.responsive && p.details.term >= 1));
  const metrics = String((await api(c.peers[1].url, 'GET', '/metrics')).body);
  t.regex(metrics, /^cluster_replicas\{state="Active"\} 6$/m);
  t.regex(metrics, /^cluster_replicas\{state="Dead"\} 0$/m);
  t.regex(metrics, /^cluster_p2p_calls\{method="Update",outcome="ok"\} [1-9]/m);

  // Deletes by filter reach every replica.
  const del = await api(c.peers[1].url, 'POST', '/collections/r/points/delete?wait=true', { filter: { must: [{ key: 'i', range: { lt: 50 } }] } });
  t.is(del.status, 200, JSON.stringify(del.body));
  for (let i = 0; i < 3; i++) {
    const n = await api(c.peers[i].url, 'POST', '/collections/r/points/count?consistency=all', { exact: true });
    t.is(n.body.result.count, 250);
  }

  // A conditional upsert (update_filter i >= 55) through another peer: every replica
  // evaluates it on its own points and all come out the same (the rule applied by hand:
  // 40..49 are new and inserted, 50..54 stay, 55..59 are rewritten).
  const cond = await api(c.peers[2].url, 'PUT', '/collections/r/points?wait=true', {
    points: points(40, 20).map((p) => ({ ...p, payload: { i: 1000 + p.id, tag: 'c' } })),
    update_filter: { must: [{ key: 'i', range: { gte: 55 } }] },
  });
  t.is(cond.status, 200, JSON.stringify(cond.body));
  const expected = Array.from({ length: 20 }, (_, k) => 40 + k).map((id) => [id, id < 50 || id >= 55 ? 1000 + id : id]);
  for (let i = 0; i < 3; i++) {
    const got = await api(c.peers[i].url, 'POST', '/collections/r/points?consistency=all', { ids: expected.map(([id]) => id), with_payload: true });
    t.deepEqual(got.body.result.map((p: any) => [p.id, p.payload.i]), expected, `through peer ${i}`);
  }
  t.true(await identical(c, 'r', 3, 2), 'every shard\'s replicas hold the same content');
});

test.serial('a peer killed under a writer (RF 2): its replicas go Dead, writes go on, and after its restart recovery makes every replica Active with identical content', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const created = await change(c.peers[0].url, 'PUT', '/collections/f', { vectors: { size: DIM, distance: 'Dot' }, shard_number: 3, replication_factor: 2 });
  t.is(created.status, 200, JSON.stringify(created.body));
  await waitFor('every peer has the collection', async () => (await Promise.all(c.peers.map((p) => api(p.url, 'GET', '/collections/f')))).every((r) => r.status === 200));
  t.is((await upsert(c.peers[0].url, 'f', points(0, 300))).status, 200);

  // A writer through peer 0 while peer 2 is killed: every acknowledged batch must survive.
  const acked: number[] = [];
  let stop = false;
  let failures = 0;
  const writer = (async () => {
    for (let b = 0; !stop; b++) {
      const r = await upsert(c.peers[0].url, 'f', points(1000 + b * 10, 10, 'w')).catch(() => null);
      if (r?.status === 200) acked.push(b);
      else failures++;
    }
  })();
  await waitFor('some writes acknowledged', async () => acked.length >= 5);
  await c.kill(2);
  await waitFor('replicas of the killed peer marked Dead', async () => Object.values(await states(c, 0, 'f')).includes('Dead'));
  const before = acked.length;
  await waitFor('writes go on with a peer down', async () => acked.length >= before + 20);
  await c.startPeer(2);
  await waitFor('every replica Active again', () => allActive(c, 0, 'f'));
  const n = acked.length;
  await waitFor('writes go on after recovery', async () => acked.length >= n + 5);
  stop = true;
  await writer;
  t.log(`acknowledged ${acked.length} batches, ${failures} failed`);

  // Every acknowledged point is there, through every peer.
  const ids = new Set((await scrollAll(c.peers[1].url, 'f')).map((p) => p.id));
  const lost = acked.flatMap((b) => Array.from({ length: 10 }, (_, k) => 1000 + b * 10 + k)).filter((id) => !ids.has(id));
  t.deepEqual(lost, []);
  await waitFor('every replica Active', () => allActive(c, 1, 'f'));
  const d = await digests(c, 'f', 3);
  for (const [shard, byPeer] of d) {
    t.is(byPeer.size, 2, `shard ${shard} has two replicas`);
    t.is(new Set(byPeer.values()).size, 1, `shard ${shard}: replicas differ: ${JSON.stringify([...byPeer])}`);
  }
});

test.serial('a listener peer: its replicas turn Listener, get every write, and serve reads only when no other replica answers', async (t) => {
  const c = await Cluster.prepare(3);
  t.teardown(() => c.destroy());
  await c.startPeer(0);
  await c.startPeer(1, 0);
  await c.startPeer(2, 0, { SERVICE__STORAGE__NODE_TYPE: 'Listener' });
  await c.waitVoters(3);
  const listenerId = String((await c.info(2)).peer_id);
  const created = await change(c.peers[0].url, 'PUT', '/collections/l', { vectors: { size: DIM, distance: 'Cosine' }, shard_number: 2, replication_factor: 3 });
  t.is(created.status, 200, JSON.stringify(created.body));
  // Every peer's view (the listener peer reads its own replica while it still sees it Active).
  await waitFor('the listener peer\'s replicas are Listener, as every peer sees them', async () => {
    for (let i = 0; i < 3; i++) {
      const st = await states(c, i, 'l').catch(() => ({}) as Record<string, string>);
      if (Object.keys(st).length !== 6 || !Object.entries(st).every(([k, s]) => (k.endsWith(`/${listenerId}`) ? s === 'Listener' : s === 'Active'))) return false;
    }
    return true;
  });
  t.is((await upsert(c.peers[0].url, 'l', points(0, 100))).status, 200);
  const d = await digests(c, 'l', 2);
  for (const [shard, byPeer] of d) {
    t.is(byPeer.size, 3);
    t.is(new Set(byPeer.values()).size, 1, `shard ${shard}: the listener's replica differs`);
  }
  // Reads through the listener peer are answered by the other peers' replicas.
  const readsBefore = await p2pReads(c, 2);
  const n = await api(c.peers[2].url, 'POST', '/collections/l/points/count', { exact: true });
  t.is(n.body.result.count, 100);
  t.is(await p2pReads(c, 2), readsBefore + 2, 'one remote read per shard');
  // With every other peer gone, the listener answers.
  await c.kill(0);
  await c.kill(1);
  await waitFor('the listener answers reads alone', async () => (await api(c.peers[2].url, 'POST', '/collections/l/points/count', { exact: true })).body?.result?.count === 100);
});

async function p2pReads(c: Cluster, i: number): Promise<number> {
  const m = /^cluster_p2p_calls\{method="Read",outcome="ok"\} (\d+)$/m.exec(String((await api(c.peers[i].url, 'GET', '/metrics')).body));
  return m ? Number(m[1]) : 0;
}

/** Whether every shard's replicas (RF of them) have the same digest. */
async function identical(c: Cluster, name: string, shards: number, rf: number): Promise<boolean> {
  const d = await digests(c, name, shards);
  return [...d.values()].every((byPeer) => byPeer.size === rf && new Set(byPeer.values()).size === 1);
}

test.serial('a write right after the consensus leader is killed: its failed replica is marked Dead once a new leader takes it, and the leader back within seconds recovers identical content', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const created = await change(c.peers[0].url, 'PUT', '/collections/l', { vectors: { size: DIM, distance: 'Dot' }, shard_number: 3, replication_factor: 2 });
  t.is(created.status, 200, JSON.stringify(created.body));
  await waitFor('every peer has the collection', async () => (await Promise.all(c.peers.map((p) => api(p.url, 'GET', '/collections/l')))).every((r) => r.status === 200));
  const leader = await c.waitLeader();
  const via = [0, 1, 2].find((i) => i !== leader)!;
  await c.kill(leader);
  // Every shard gets some of these ids, so the killed peer's replicas miss some of them;
  // marking them Dead needs a leader, and the one known is gone until an election ends.
  const w = await upsert(c.peers[via].url, 'l', points(0, 30));
  t.is(w.status, 200, JSON.stringify(w.body));
  // Back at once, before the leader's supervisor could mark its replicas Dead for being down.
  await c.startPeer(leader);
  await waitFor('every replica Active with identical content', async () => (await allActive(c, via, 'l')) && (await allActive(c, leader, 'l')) && identical(c, 'l', 3, 2));
  const n = await api(c.peers[leader].url, 'POST', '/collections/l/points/count', { exact: true });
  t.is(n.body.result.count, 30);
});

test.serial('two of three peers down (no majority): a write answers 503 for the shard with no live replica; the replicas that missed it are marked Dead once consensus is back, and recovery makes the replicas identical', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const created = await change(c.peers[0].url, 'PUT', '/collections/m', { vectors: { size: DIM, distance: 'Dot' }, shard_number: 3, replication_factor: 2 });
  t.is(created.status, 200, JSON.stringify(created.body));
  await waitFor('every peer has the collection', async () => (await Promise.all(c.peers.map((p) => api(p.url, 'GET', '/collections/m')))).every((r) => r.status === 200));
  await c.kill(1);
  await c.kill(2);
  // Peer 0 applies the shards it holds (the other replicas cannot be marked Dead without a
  // majority: it leaves them out meanwhile); the shard on peers 1 and 2 has no live replica.
  const w = await api(c.peers[0].url, 'PUT', '/collections/m/points?wait=true', { points: points(0, 30) }, 60_000);
  t.is(w.status, 503, JSON.stringify(w.body));
  t.regex(String(w.body.status.error), /fewer than write_consistency_factor/);
  await c.startPeer(1);
  await c.startPeer(2);
  await waitFor('every replica Active with identical content', async () => (await allActive(c, 0, 'm')) && (await allActive(c, 1, 'm')) && (await allActive(c, 2, 'm')) && identical(c, 'm', 3, 2));
  // What peer 0 applied is on both replicas of its shards, whichever peer answers.
  const counts = await Promise.all(c.peers.map((p) => api(p.url, 'POST', '/collections/m/points/count', { exact: true })));
  t.is(new Set(counts.map((r) => r.body.result.count)).size, 1, JSON.stringify(counts.map((r) => r.body)));
});
