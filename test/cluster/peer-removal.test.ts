/**
 * Peer removal and recovery from node loss (SPEC 3.3b, 3.2, 4.3), on real peers
 * (test/cluster/harness.ts):
 *
 * - `DELETE /cluster/peer/{id}` is refused with the reference's 400 while the peer holds
 *   replicas; forced, its replicas and the transfers it takes part in go, a shard whose
 *   only replica it held stays in the state without replicas and answers 503, and the
 *   other shards serve reads and writes;
 * - an unrecoverable peer is replaced: killed for good, removed with force, an empty new
 *   peer joins, its shards are replicated onto it, and every acknowledged point is on
 *   every replica with identical digests;
 * - a 2-peer cluster that lost a peer says at once that consensus has no quorum (503,
 *   naming the missing peer) instead of waiting out a timeout, whichever of the two was
 *   the leader; it works again once the peer is back.
 *
 * Failed peers fewer than the replication factor (reads, searches and writes go on; a
 * restarted peer is brought up to date) are covered by replication-faults.test.ts.
 */

import test, { type ExecutionContext } from 'ava';

import { Cluster, api, change, sleep, waitFor } from './harness';
import { allActive, digests, idsOnShard, scrollAll, shardOf, states } from './replicas';

const DIM = 4;
const VECTORS = { size: DIM, distance: 'Dot' };

type Answer = { status: number; body: any };

function vec(i: number): number[] {
  return [Math.sin(i), Math.cos(i), Math.sin(i * 0.7 + 1), Math.cos(i * 1.3 + 2)];
}

function pointsOf(ids: readonly number[]): Array<{ id: number; vector: number[]; payload: { i: number } }> {
  return ids.map((id) => ({ id, vector: vec(id), payload: { i: id } }));
}

function range(from: number, n: number): number[] {
  return Array.from({ length: n }, (_, k) => from + k);
}

function errorOf(r: Answer): string {
  return String(r.body?.status?.error ?? JSON.stringify(r.body));
}

/** Peer id (as the API gives it) of each peer index, from each running peer's GET /cluster. */
async function peerIds(c: Cluster): Promise<string[]> {
  const out: string[] = [];
  for (const p of c.running()) out[p.index] = String((await c.info(p.index)).peer_id);
  return out;
}

async function createCollection(c: Cluster, via: number, name: string, params: Record<string, unknown>): Promise<void> {
  const r = await change(c.peers[via].url, 'PUT', `/collections/${name}`, { vectors: VECTORS, ...params });
  if (r.status !== 200) throw new Error(`create ${name}: ${r.status} ${JSON.stringify(r.body)}`);
  await waitFor(`every peer has ${name}`, async () => (await Promise.all(c.running().map((p) => api(p.url, 'GET', `/collections/${name}`)))).every((x) => x.status === 200));
}

async function upsert(url: string, name: string, ids: readonly number[]): Promise<Answer> {
  return api(url, 'PUT', `/collections/${name}/points?wait=true`, { points: pointsOf(ids) });
}

/** Shard id → peer id → state, as peer `i` sees the collection (every shard of it, with or without replicas). */
async function shardMap(c: Cluster, i: number, name: string): Promise<Map<number, Record<string, string>>> {
  const st = await states(c, i, name);
  const out = new Map<number, Record<string, string>>();
  for (const [key, state] of Object.entries(st)) {
    const [shard, peer] = key.split('/');
    out.set(Number(shard), { ...(out.get(Number(shard)) ?? {}), [peer]: state });
  }
  return out;
}

/** Writes batches of new points through one peer (wait=true) until stopped; keeps the acknowledged ids. */
class Writer {
  readonly acked: number[] = [];
  readonly failures: string[] = [];
  private stopped = false;
  private readonly done: Promise<void>;

  constructor(t: ExecutionContext, url: string, name: string, firstId: number, batch = 10) {
    t.teardown(() => this.stop());
    this.done = (async () => {
      for (let b = 0; !this.stopped; b++) {
        const ids = range(firstId + b * batch, batch);
        const r = await upsert(url, name, ids).catch((err: unknown) => ({ status: 0, body: String(err) }));
        if (r.status === 200) {
          this.acked.push(...ids);
        } else {
          this.failures.push(`${r.status} ${errorOf(r)}`);
          await sleep(100); // pacing after a failure, not a wait for a condition
        }
      }
    })();
  }

  async more(what: string, n: number): Promise<void> {
    const base = this.acked.length;
    await waitFor(what, () => this.acked.length >= base + n);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }
}

// -- forced removal ----------------------------------------------------------------------------

test.serial('DELETE /cluster/peer: refused (400) while the peer holds replicas; forced, its replicas and transfers go, a shard it alone held stays without replicas and answers 503, the rest serve reads and writes', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const ids = await peerIds(c);
  const leader = await c.waitLeader();
  // Not the leader: consensus keeps its leader through the removal (removing a leader is covered by the replacement test).
  const victim = [0, 1, 2].find((i) => i !== leader)!;
  const vid = ids[victim];
  const rest = [0, 1, 2].filter((i) => i !== victim);
  await createCollection(c, rest[0], 'solo', { shard_number: 3, replication_factor: 1 });
  await createCollection(c, rest[0], 'dup', { shard_number: 3, replication_factor: 2 });
  const initial = range(0, 300);
  t.is((await upsert(c.peers[rest[0]].url, 'solo', initial)).status, 200);
  t.is((await upsert(c.peers[rest[0]].url, 'dup', initial)).status, 200);

  const solo = await shardMap(c, rest[0], 'solo');
  const lost = [...solo].find(([, r]) => vid in r)![0];
  const kept = [...solo].filter(([s]) => s !== lost).map(([s]) => s);
  const dupBefore = await shardMap(c, rest[0], 'dup');
  t.is([...dupBefore.values()].filter((r) => vid in r).length, 2, 'the victim holds replicas of two shards of dup');

  // Refused while it holds replicas: the reference's status and words; nothing changes.
  const refused = await api(c.peers[rest[1]].url, 'DELETE', `/cluster/peer/${vid}`);
  t.is(refused.status, 400, JSON.stringify(refused.body));
  t.is(errorOf(refused), `Bad request: Cannot remove peer ${vid} as there are shards on it`);
  t.true(vid in (await c.info(rest[0])).peers);
  t.deepEqual(await shardMap(c, rest[0], 'solo'), solo);
  t.is((await api(c.peers[rest[0]].url, 'DELETE', '/cluster/peer/12345')).status, 404);

  // A transfer to the victim that cannot finish: the victim is stopped first. The removal
  // is proposed as soon as the transfer is in the state (the source would give it up once
  // it finds the victim down, seconds later).
  c.signal(victim, 'SIGSTOP');
  const [src] = Object.keys(solo.get(kept[0])!);
  const replicate = change(c.peers[leader].url, 'POST', '/collections/solo/cluster', { replicate_shard: { shard_id: kept[0], from_peer_id: Number(src), to_peer_id: Number(vid) } });
  await waitFor('the transfer to the stopped victim is in the state', async () => {
    const v = (await api(c.peers[leader].url, 'GET', '/collections/solo/cluster')).body.result;
    return v.shard_transfers.some((x: any) => x.shard_id === kept[0] && String(x.to) === vid);
  }, undefined, 10);
  const removed = await change(c.peers[leader].url, 'DELETE', `/cluster/peer/${vid}?force=true`);
  t.is(removed.status, 200, JSON.stringify(removed.body));
  t.is(removed.body.result, true);
  t.is((await replicate).status, 200);
  await c.kill(victim);

  // On both remaining peers: the peer, its replicas and the transfer are gone; the shard it alone held is still there, without replicas.
  await waitFor('the removal applied on both remaining peers', async () => {
    for (const i of rest) {
      if (vid in (await c.info(i)).peers) return false;
      for (const name of ['solo', 'dup']) {
        const v = (await api(c.peers[i].url, 'GET', `/collections/${name}/cluster`)).body.result;
        if (v.remote_shards.some((s: any) => String(s.peer_id) === vid) || v.shard_transfers.length > 0) return false;
      }
    }
    return true;
  });
  for (const i of rest) {
    const v = (await api(c.peers[i].url, 'GET', '/collections/solo/cluster')).body.result;
    t.is(v.shard_count, 3);
    t.deepEqual(v.shard_transfers, []);
    t.false([...v.local_shards, ...v.remote_shards].some((s: any) => s.shard_id === lost), `peer ${i}: no replica of shard ${lost}`);
    const after = await shardMap(c, i, 'solo');
    for (const s of kept) t.deepEqual(after.get(s), solo.get(s), `peer ${i}: shard ${s} as before (the aborted transfer's replica dropped)`);
    const tele = (await api(c.peers[i].url, 'GET', '/cluster/telemetry')).body.result;
    t.deepEqual(tele.collections.solo.shards.find((s: any) => s.id === lost), { id: lost, replicas: [] });
    const dup = await shardMap(c, i, 'dup');
    t.is(dup.size, 3);
    for (const [s, r] of dup) {
      t.false(vid in r);
      t.true(Object.values(r).length >= 1 && Object.values(r).every((x) => x === 'Active'), `dup shard ${s}: ${JSON.stringify(r)}`);
    }
  }

  // solo: what needs the lost shard answers a clear 503 and changes nothing; the other shards work.
  const url = c.peers[rest[0]].url;
  const onLost = initial.filter((id) => shardOf(id, 3) === lost).slice(0, 3);
  const onKept = initial.filter((id) => shardOf(id, 3) !== lost).slice(0, 3);
  const lostText = new RegExp(`shard ${lost} of collection \`solo\`.*no replica left.*recover the shard from a snapshot`);
  for (const r of [
    await api(url, 'POST', '/collections/solo/points/count', { exact: true }),
    await api(url, 'POST', '/collections/solo/points/scroll', { limit: 10 }),
    await api(url, 'POST', '/collections/solo/points/query', { query: vec(1), limit: 3 }),
    await api(url, 'POST', '/collections/solo/points', { ids: onLost }),
  ]) {
    t.is(r.status, 503, JSON.stringify(r.body));
    t.regex(errorOf(r), lostText);
  }
  const got = await api(url, 'POST', '/collections/solo/points', { ids: onKept });
  t.is(got.status, 200, JSON.stringify(got.body));
  t.deepEqual(got.body.result.map((p: any) => p.id).sort(), [...onKept].sort());
  const fresh = idsOnShard(lost, 3, 1, 10_000);
  const freshKept = idsOnShard(kept[0], 3, 1, 10_000);
  const mixed = await upsert(url, 'solo', [...fresh, ...freshKept]);
  t.is(mixed.status, 503, JSON.stringify(mixed.body));
  t.regex(errorOf(mixed), lostText);
  t.deepEqual((await api(url, 'POST', '/collections/solo/points', { ids: freshKept })).body.result, [], 'a refused write changes nothing');
  t.is((await upsert(url, 'solo', freshKept)).status, 200);
  for (const ordering of ['medium', 'strong']) {
    const r = await api(url, 'PUT', `/collections/solo/points?wait=true&ordering=${ordering}`, { points: pointsOf(fresh) });
    t.is(r.status, 503, `${ordering}: ${JSON.stringify(r.body)}`);
    t.regex(errorOf(r), lostText);
  }
  t.is((await api(url, 'GET', '/collections/solo')).status, 200);

  // dup: every point is there through both peers, and reads, searches and writes go on.
  for (const i of rest) {
    t.deepEqual((await scrollAll(c.peers[i].url, 'dup')).map((p) => p.id).sort((a, b) => a - b), initial);
    const q = await api(c.peers[i].url, 'POST', '/collections/dup/points/query', { query: vec(5), limit: 3 });
    t.is(q.status, 200, JSON.stringify(q.body));
    t.is(q.body.result.points.length, 3);
  }
  t.is((await upsert(c.peers[rest[1]].url, 'dup', range(1000, 50))).status, 200);
  const count = await api(c.peers[rest[0]].url, 'POST', '/collections/dup/points/count?consistency=all', { exact: true });
  t.is(count.body.result.count, 350);

  // Consensus goes on with the two peers left.
  t.is((await change(c.peers[rest[1]].url, 'PUT', '/collections/after-removal', { vectors: VECTORS })).status, 200);
});

// -- replacing an unrecoverable peer ---------------------------------------------------------------

test.serial('an unrecoverable peer is replaced: killed for good, removed with force, an empty new peer joins and gets its shards by replicate_shard; every acknowledged point is on every replica, digests identical', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const ids = await peerIds(c);
  // The leader is the one lost: the others elect a new one on the way.
  const victim = await c.waitLeader();
  const vid = ids[victim];
  const rest = [0, 1, 2].filter((i) => i !== victim);
  await createCollection(c, rest[0], 'r', { replication_factor: 2 });
  const shards = (await shardMap(c, rest[0], 'r')).size;
  t.is(shards, 3);
  const initial = range(0, 600);
  for (let b = 0; b < 6; b++) t.is((await upsert(c.peers[rest[b % 2]].url, 'r', initial.slice(b * 100, b * 100 + 100))).status, 200);

  const w = new Writer(t, c.peers[rest[0]].url, 'r', 100_000);
  await w.more('writes before the loss', 30);
  await c.kill(victim, 'SIGKILL');
  await w.more('writes go on after the loss', 30);
  // Two voters of three are left: while they elect a new leader a change is refused as
  // "no leader right now" (retry), never as a lost quorum. The change is idempotent, so
  // it is simply sent again until it is made.
  const refusals: string[] = [];
  await waitFor('a metadata change is made again after the leader\'s loss', async () => {
    const r = await api(c.peers[rest[1]].url, 'PATCH', '/collections/r', { optimizers_config: { indexing_threshold: 20_000 } });
    if (r.status === 200) return true;
    refusals.push(`${r.status} ${errorOf(r)}`);
    return false;
  });
  t.deepEqual(refusals.filter((e) => /quorum/.test(e)), [], 'an election is not reported as a lost quorum');
  await waitFor('the lost peer\'s replicas are Dead, seen from both others', async () => {
    for (const i of rest) {
      const m = await shardMap(c, i, 'r');
      const mine = [...m.values()].filter((r) => vid in r);
      if (mine.length === 0 || mine.some((r) => r[vid] !== 'Dead')) return false;
    }
    return true;
  });

  const refused = await change(c.peers[rest[0]].url, 'DELETE', `/cluster/peer/${vid}`);
  t.is(refused.status, 400);
  t.is(errorOf(refused), `Bad request: Cannot remove peer ${vid} as there are shards on it`);
  const removed = await change(c.peers[rest[0]].url, 'DELETE', `/cluster/peer/${vid}?force=true`);
  t.is(removed.status, 200, JSON.stringify(removed.body));
  await waitFor('both peers left see two peers and no replica on the lost one', async () => {
    for (const i of rest) {
      if (Object.keys((await c.info(i)).peers).length !== 2) return false;
      if ([...(await shardMap(c, i, 'r')).values()].some((r) => vid in r)) return false;
    }
    return true;
  });

  // An empty new peer joins through a survivor.
  const fresh = await c.addPeerSlot();
  await c.startPeer(fresh.index, rest[1]);
  await c.waitVoters(3);
  const nid = String((await c.info(fresh.index)).peer_id);
  t.not(nid, vid);
  await waitFor('the new peer has the collection', async () => (await api(fresh.url, 'GET', '/collections/r')).status === 200);

  // Every shard left with one replica is replicated from it onto the new peer.
  const before = await shardMap(c, rest[0], 'r');
  const single = [...before].filter(([, r]) => Object.keys(r).length === 1);
  t.true(single.length >= 1, 'the lost peer held replicas');
  for (const [s, r] of single) {
    const from = Object.keys(r)[0];
    t.is(r[from], 'Active');
    const rep = await change(c.peers[rest[1]].url, 'POST', '/collections/r/cluster', { replicate_shard: { shard_id: s, from_peer_id: Number(from), to_peer_id: Number(nid) } });
    t.is(rep.status, 200, JSON.stringify(rep.body));
  }
  await waitFor('every shard has two Active replicas, seen from every peer', async () => {
    for (const p of c.running()) {
      if (!(await allActive(c, p.index, 'r'))) return false;
      const m = await shardMap(c, p.index, 'r');
      if (m.size !== shards || [...m.values()].some((r) => Object.keys(r).length !== 2)) return false;
    }
    return true;
  });
  await w.more('writes go on after the replacement', 30);
  await w.stop();
  t.log(`writer: ${w.acked.length} points acknowledged, ${w.failures.length} writes failed${w.failures.length > 0 ? `: ${w.failures.slice(0, 3).join(' | ')}` : ''}`);

  const acked = [...initial, ...w.acked];
  for (const p of c.running()) {
    const have = new Set((await scrollAll(p.url, 'r')).map((x) => x.id));
    t.deepEqual(acked.filter((id) => !have.has(id)), [], `acknowledged points missing through peer ${p.index}`);
  }
  const d = await digests(c, 'r', shards);
  t.is(d.size, shards);
  for (const [s, byPeer] of d) {
    t.is(byPeer.size, 2, `shard ${s}: ${JSON.stringify([...byPeer])}`);
    t.is(new Set(byPeer.values()).size, 1, `shard ${s}: replicas differ: ${JSON.stringify([...byPeer])}`);
    t.false(byPeer.has(vid));
  }
  for (const [s] of single) t.true(d.get(s)!.has(nid), `shard ${s} has a replica on the new peer`);
  const count = await api(fresh.url, 'POST', '/collections/r/points/count?consistency=all', { exact: true });
  t.is(count.body.result.count, new Set(acked).size);
});

// -- two peers, one lost -----------------------------------------------------------------------------

/**
 * With one peer of two down, every consensus operation through the survivor answers 503
 * saying that consensus has no quorum and naming the missing peer, not a timeout: each
 * is given `timeout=60` and the client waits longer, so an answer that waited the
 * timeout out would be a 408. Reads of the replicated collection go on.
 */
async function noQuorum(t: ExecutionContext, c: Cluster, survivor: number, lostId: string): Promise<void> {
  const url = c.peers[survivor].url;
  const noQuorumText = new RegExp(`no leader.*consensus has no quorum: 1 of 2 voters reachable from this peer, 2 needed \\(peer ${lostId} \\(http://127\\.0\\.0\\.1:\\d+/?\\) not heard from for \\d+ s\\).*a cluster of 2 voters needs both.*Recovering from node loss`);
  // Right after the loss the survivor may still lead, or still follow the lost leader, or
  // know no leader yet: each answer is a 503 (never a wait for the whole timeout) until
  // the survivor knows that no majority is reachable.
  const first = await waitFor('the survivor answers that consensus has no quorum', async () => {
    const r = await api(url, 'PUT', '/collections/other?timeout=60', { vectors: VECTORS }, 70_000);
    if (r.status !== 503) throw new Error(`${r.status} ${JSON.stringify(r.body)}`);
    return noQuorumText.test(errorOf(r)) ? r : false;
  });
  t.is(first.status, 503);
  t.log(`first answer: ${errorOf(first)}`);
  const ops: Array<[string, string, unknown]> = [
    ['PUT', '/collections/other2?timeout=60', { vectors: VECTORS }],
    ['POST', '/collections/two/cluster?timeout=60', { drop_replica: { shard_id: 0, peer_id: Number(lostId) } }],
    ['DELETE', `/cluster/peer/${lostId}?force=true&timeout=60`, undefined],
    ['PUT', '/collections/two/index?timeout=60', { field_name: 'i', field_schema: 'integer' }],
    ['POST', '/collections/aliases?timeout=60', { actions: [{ create_alias: { collection_name: 'two', alias_name: 'deux' } }] }],
    ['DELETE', '/collections/two?timeout=60', undefined],
  ];
  for (const [method, route, body] of ops) {
    const r = await api(url, method, route, body, 70_000);
    t.is(r.status, 503, `${method} ${route}: ${JSON.stringify(r.body)}`);
    t.regex(errorOf(r), noQuorumText, `${method} ${route}`);
  }
  const view = (await api(url, 'GET', '/collections')).body.result.collections.map((x: any) => x.name).sort();
  t.deepEqual(view, ['two'], 'nothing was created or deleted');
  // The data path does not need consensus: reads and writes of the replicated collection go
  // on, and a snapshot of it can be taken (the way out when the lost peer never comes back).
  const wrote = await upsert(url, 'two', range(1000, 10));
  t.is(wrote.status, 200, JSON.stringify(wrote.body));
  const count = await api(url, 'POST', '/collections/two/points/count', { exact: true });
  t.is(count.status, 200, JSON.stringify(count.body));
  t.is(count.body.result.count, 210);
  const snap = await api(url, 'POST', '/collections/two/snapshots', undefined, 60_000);
  t.is(snap.status, 200, JSON.stringify(snap.body));
  t.truthy(snap.body.result.name);
  t.is((await api(url, 'GET', '/readyz')).status, 503);
}

async function twoPeers(t: ExecutionContext): Promise<{ c: Cluster; ids: string[]; leader: number }> {
  const c = await Cluster.start(2);
  t.teardown(() => c.destroy());
  const ids = await peerIds(c);
  await createCollection(c, 0, 'two', { shard_number: 2, replication_factor: 2 });
  t.is((await upsert(c.peers[0].url, 'two', range(0, 200))).status, 200);
  return { c, ids, leader: await c.waitLeader() };
}

/** The lost peer comes back (with its storage): consensus works again. */
async function back(t: ExecutionContext, c: Cluster, lost: number): Promise<void> {
  await c.startPeer(lost);
  await c.waitLeader();
  await c.waitVoters(2);
  for (const p of c.running()) {
    t.is((await change(p.url, 'PUT', `/collections/back-${p.index}`, { vectors: VECTORS })).status, 200);
  }
  // Both peers end with the same collections (a change proposed before the loss and
  // answered "was not committed" is then either applied on both or on neither).
  await waitFor('both peers have the same collections, both new ones among them', async () => {
    const lists = await Promise.all(c.running().map(async (p) => (await api(p.url, 'GET', '/collections')).body.result.collections.map((x: any) => x.name).sort().join()));
    return lists[0].includes('back-0') && lists[0].includes('back-1') && lists.every((l) => l === lists[0]);
  });
  // The replicas that missed the writes made meanwhile are marked Dead (the deferred
  // marking) and recovered: every replica Active, both of each shard identical.
  await waitFor('every replica of two Active again, both replicas of each shard identical', async () => {
    if (!(await Promise.all(c.running().map((p) => allActive(c, p.index, 'two')))).every(Boolean)) return false;
    const d = await digests(c, 'two', 2);
    return d.size === 2 && [...d.values()].every((byPeer) => byPeer.size === 2 && new Set(byPeer.values()).size === 1);
  });
  const count = await api(c.peers[lost].url, 'POST', '/collections/two/points/count?consistency=all', { exact: true });
  t.is(count.body.result.count, 210);
}

test.serial('two peers, the follower lost: the leader says at once that consensus has no quorum (503), for every consensus operation; works again once the peer is back', async (t) => {
  const { c, ids, leader } = await twoPeers(t);
  const lost = 1 - leader;
  await c.kill(lost, 'SIGKILL');
  await noQuorum(t, c, leader, ids[lost]);
  // A new peer cannot join through it either, and says why.
  const extra = await c.addPeerSlot();
  const joined = await c.startPeer(extra.index, leader, { SERVICE__CLUSTER__CONSENSUS__BOOTSTRAP_TIMEOUT_SEC: '3' }).then(
    () => null,
    (err: Error) => err.message,
  );
  t.not(joined, null, 'the join is refused');
  t.regex(joined ?? '', /could not join the cluster[\s\S]*consensus has no quorum: 1 of 2 voters reachable/);
  await back(t, c, lost);
});

test.serial('two peers, the leader lost: the follower says that consensus has no quorum (503) instead of a timeout; works again once the peer is back', async (t) => {
  const { c, ids, leader } = await twoPeers(t);
  const survivor = 1 - leader;
  await c.kill(leader, 'SIGKILL');
  await noQuorum(t, c, survivor, ids[leader]);
  await back(t, c, leader);
});
