/**
 * Faults under the replicated data path, on real peers (test/cluster/harness.ts): the
 * rows of SPEC 3.3b's "temporary single-node outage" table, a peer stopped (SIGSTOP)
 * under a writer with write_consistency_factor 1 and 2, a peer killed with RF 1 (its
 * shards fail clearly, the others work), conflicting writers with ordering medium and
 * strong (replicas end identical; strong refuses writes while its leader is down), and a
 * restarted writer whose new writes no replica skips (persisted writer clocks).
 *
 * Every outage is detected by waiting for the condition it causes; no test sleeps to let
 * something happen (the writers pace their loop only after a failure).
 */

import test, { type ExecutionContext } from 'ava';

import { Cluster, api, change, sleep, waitFor } from './harness';
import { allActive, allActiveEverywhere, digests, idsOnShard, scrollAll, shardOf, states } from './replicas';

const DIM = 4;

function vec(i: number): number[] {
  return [Math.sin(i), Math.cos(i), Math.sin(i * 0.7 + 1), Math.cos(i * 1.3 + 2)];
}

interface Pt {
  id: number;
  vector: number[];
  payload: Record<string, unknown>;
}

function pointsOf(ids: readonly number[], tag: string, seed = 0): Pt[] {
  return ids.map((id) => ({ id, vector: vec(id + seed), payload: { i: id, tag } }));
}

function range(from: number, n: number): number[] {
  return Array.from({ length: n }, (_, k) => from + k);
}

type Answer = { status: number; body: any };

async function upsert(url: string, name: string, pts: unknown[], q = 'wait=true'): Promise<Answer> {
  return api(url, 'PUT', `/collections/${name}/points?${q}`, { points: pts });
}

/** The error text of an answer (the envelope's status.error), or the body as text. */
function errorOf(r: Answer): string {
  return String(r.body?.status?.error ?? JSON.stringify(r.body));
}

/** A request that may not be answered at all (connection refused, aborted): null then. */
async function tryApi(url: string, method: string, route: string, body?: unknown, timeoutMs = 10_000): Promise<Answer | null> {
  return api(url, method, route, body, timeoutMs).catch(() => null);
}

/** Peer ids (as the API gives them) by peer index, from each running peer's GET /cluster. */
async function peerIds(c: Cluster): Promise<Map<number, string>> {
  const out = new Map<number, string>();
  for (const p of c.running()) out.set(p.index, String((await c.info(p.index)).peer_id));
  return out;
}

/** Shard id → the peer indexes holding a replica of it (each peer's local shards). */
async function placement(c: Cluster, name: string): Promise<Map<number, number[]>> {
  const out = new Map<number, number[]>();
  for (const p of c.running()) {
    const r = await api(p.url, 'GET', `/collections/${name}/cluster`);
    if (r.status !== 200) throw new Error(`collection cluster info: ${r.status} ${JSON.stringify(r.body)}`);
    for (const s of r.body.result.local_shards) out.set(s.shard_id, [...(out.get(s.shard_id) ?? []), p.index]);
  }
  return out;
}

/** Every shard has `replicas` replicas, all with the same content. */
async function sameDigests(t: ExecutionContext, c: Cluster, name: string, shards: number, replicas: number): Promise<void> {
  const d = await digests(c, name, shards);
  t.is(d.size, shards);
  for (const [shard, byPeer] of d) {
    t.is(byPeer.size, replicas, `shard ${shard} of ${name}: ${byPeer.size} replicas`);
    t.is(new Set(byPeer.values()).size, 1, `shard ${shard} of ${name}: replicas differ: ${JSON.stringify([...byPeer])}`);
  }
}

async function createCollection(c: Cluster, name: string, params: Record<string, unknown>): Promise<void> {
  const r = await change(c.peers[0].url, 'PUT', `/collections/${name}`, { vectors: { size: DIM, distance: 'Dot' }, ...params });
  if (r.status !== 200) throw new Error(`create ${name}: ${r.status} ${JSON.stringify(r.body)}`);
  await waitFor(`every peer has ${name}`, async () => (await Promise.all(c.running().map((p) => api(p.url, 'GET', `/collections/${name}`)))).every((r) => r.status === 200));
}

/**
 * Writes batches of new points through one peer (wait=true) until stopped, and keeps
 * which ids were acknowledged and the longest time without an acknowledgement (for the
 * log: durations are not asserted); after a failed write it paces itself a little (a
 * peer that refuses connections would otherwise be asked in a busy loop). Its requests
 * may take longer than the product's own deadlines, so a slow write shows its answer.
 */
class Writer {
  readonly acked: number[] = [];
  readonly failures: string[] = [];
  longestGapMs = 0;
  private stopped = false;
  private readonly done: Promise<void>;

  constructor(t: ExecutionContext, url: () => string, name: string, firstId: number, batch = 10, query = 'wait=true') {
    t.teardown(() => {
      if (!this.stopped) t.log(`writer failures: ${this.failures.slice(0, 5).join(' | ')}`);
      return this.stop();
    });
    this.done = (async () => {
      let lastAck = Date.now();
      for (let b = 0; !this.stopped; b++) {
        const ids = range(firstId + b * batch, batch);
        const r = await api(url(), 'PUT', `/collections/${name}/points?${query}`, { points: pointsOf(ids, 'w') }, 30_000).catch((err: unknown) => ({ status: 0, body: String(err) }));
        if (r.status === 200) {
          this.acked.push(...ids);
          this.longestGapMs = Math.max(this.longestGapMs, Date.now() - lastAck);
          lastAck = Date.now();
        } else {
          this.failures.push(`${r.status} ${errorOf(r)}`);
          await sleep(100);
        }
      }
    })();
  }

  /** What to log about it. */
  summary(): string {
    return `acknowledged ${this.acked.length} points, longest without an acknowledgement ${this.longestGapMs} ms, ${this.failures.length} writes failed${this.failures.length > 0 ? `: ${this.failures.slice(0, 3).join(' | ')}` : ''}`;
  }

  /** Waits until `n` more points than now are acknowledged. */
  async more(what: string, n: number, timeoutMs?: number): Promise<void> {
    const base = this.acked.length;
    await waitFor(what, () => this.acked.length >= base + n, timeoutMs);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }
}

/**
 * Waits until a whole-collection read answers through every running peer: right after a
 * peer restarts, another peer's pooled connections to it may still be waiting to
 * reconnect (cluster.p2p backoff, at most a second) and answer 503 meanwhile.
 */
async function readableEverywhere(c: Cluster, name: string): Promise<void> {
  for (const p of c.running()) {
    await waitFor(`a read of ${name} through peer ${p.index}`, async () => (await api(p.url, 'POST', `/collections/${name}/points/count`, { exact: true })).status === 200);
  }
}

/** The acknowledged ids missing from the collection as scrolled through `url`. */
async function lostIds(url: string, name: string, acked: readonly number[]): Promise<number[]> {
  // The points acknowledged before the scroll starts (a writer may still be adding to `acked`).
  const want = [...acked];
  const have = new Set((await scrollAll(url, name)).map((p) => p.id));
  return want.filter((id) => !have.has(id));
}

/** Whole-collection reads (count, scroll, query) through `url`: each answer, or null when none came. */
async function collectionReads(url: string, name: string): Promise<Array<Answer | null>> {
  return Promise.all([
    tryApi(url, 'POST', `/collections/${name}/points/count`, { exact: true }),
    tryApi(url, 'POST', `/collections/${name}/points/scroll`, { limit: 1000 }),
    tryApi(url, 'POST', `/collections/${name}/points/query`, { query: vec(3), limit: 5 }),
  ]);
}

// -- SPEC 3.3b, temporary single-node outage ------------------------------------------------

/** One peer of two left: once it knows there is no leader (check quorum), a collection operation answers 503 saying so. */
async function noCollectionOperations(t: ExecutionContext, c: Cluster): Promise<void> {
  await waitFor('the surviving peer knows the cluster has no leader', async () => (await c.info(0)).raft_info.leader === null);
  const created = await api(c.peers[0].url, 'PUT', '/collections/other', { vectors: { size: DIM, distance: 'Dot' } });
  t.is(created.status, 503, JSON.stringify(created.body));
  t.regex(errorOf(created), /no leader/);
}

test.serial('3.3b, 1 node: while it is down every operation fails; after its restart every acknowledged point is there and everything works', async (t) => {
  const c = await Cluster.start(1);
  t.teardown(() => c.destroy());
  await createCollection(c, 'one', { shard_number: 2 });
  const w = new Writer(t, () => c.peers[0].url, 'one', 0);
  await w.more('some writes acknowledged', 50);
  await c.kill(0);
  await waitFor('a write failed', () => w.failures.length > 0);
  // Every kind of operation fails (no process answers).
  t.is(await tryApi(c.peers[0].url, 'PUT', '/collections/one/points?wait=true', { points: pointsOf([1], 'x') }), null);
  t.deepEqual(await collectionReads(c.peers[0].url, 'one'), [null, null, null]);
  t.is(await tryApi(c.peers[0].url, 'PUT', '/collections/other', { vectors: { size: DIM, distance: 'Dot' } }), null);

  await c.startPeer(0);
  await c.waitVoters(1);
  const n = w.acked.length;
  await w.more('writes go on after the restart', 30);
  await w.stop();
  t.true(n > 0);
  t.deepEqual(await lostIds(c.peers[0].url, 'one', w.acked), []);
  // At least the acknowledged ones: the write in flight at the kill may have been applied too.
  const count = await api(c.peers[0].url, 'POST', '/collections/one/points/count', { exact: true });
  t.true(count.body.result.count >= new Set(w.acked).size);
  const created = await change(c.peers[0].url, 'PUT', '/collections/other', { vectors: { size: DIM, distance: 'Dot' } });
  t.is(created.status, 200, JSON.stringify(created.body));
});

test.serial('3.3b, 2 nodes, shards not replicated: while one is down the operations that need its shard fail clearly (503), collection reads never answer from fewer shards, collection operations fail; after its restart every acknowledged point is there', async (t) => {
  const c = await Cluster.start(2);
  t.teardown(() => c.destroy());
  await createCollection(c, 'u', { shard_number: 2, replication_factor: 1 });
  const where = await placement(c, 'u');
  t.is(where.size, 2);
  const deadShard = [...where].find(([, peers]) => peers.includes(1))![0];
  t.deepEqual(where.get(deadShard), [1]);
  const onDead = idsOnShard(deadShard, 2, 5, 10_000);

  const w = new Writer(t, () => c.peers[0].url, 'u', 0);
  await w.more('some writes acknowledged', 50);
  await c.kill(1);
  // The writer's batches span both shards: they fail from now on.
  await waitFor('a write failed', () => w.failures.length > 0);
  await w.stop();

  const write = await upsert(c.peers[0].url, 'u', pointsOf(onDead, 'x'));
  t.is(write.status, 503, JSON.stringify(write.body));
  t.regex(errorOf(write), new RegExp(`shard ${deadShard} of collection \`u\``));
  const got = await api(c.peers[0].url, 'POST', '/collections/u/points', { ids: onDead, with_payload: true });
  t.is(got.status, 503, JSON.stringify(got.body));
  t.regex(errorOf(got), /cannot be reached|stopped answering|no replica/);
  t.log(`write: ${errorOf(write)}`);
  t.log(`read: ${errorOf(got)}`);
  for (const r of await collectionReads(c.peers[0].url, 'u')) {
    t.truthy(r, 'the surviving peer answers');
    t.is(r!.status, 503, `a read of the whole collection must not answer from one shard of two: ${JSON.stringify(r!.body).slice(0, 300)}`);
  }
  await noCollectionOperations(t, c);

  await c.startPeer(1);
  await c.waitVoters(2);
  await waitFor('the shard of the restarted peer answers writes', async () => (await upsert(c.peers[0].url, 'u', pointsOf(onDead, 'back'))).status === 200);
  await readableEverywhere(c, 'u');
  for (const p of c.peers) t.deepEqual(await lostIds(p.url, 'u', w.acked), [], `through peer ${p.index}`);
  const again = await change(c.peers[1].url, 'PUT', '/collections/other2', { vectors: { size: DIM, distance: 'Dot' } });
  t.is(again.status, 200, JSON.stringify(again.body));
  t.true(await allActive(c, 0, 'u'));
});

test.serial('3.3b, 2 nodes, every shard on both: while one is down reads and searches go on through the other with every acknowledged point, collection operations fail; after its restart everything is there and the replicas agree', async (t) => {
  const c = await Cluster.start(2);
  t.teardown(() => c.destroy());
  await createCollection(c, 'b', { shard_number: 2, replication_factor: 2 });
  const w = new Writer(t, () => c.peers[0].url, 'b', 0);
  await w.more('some writes acknowledged', 200);
  // No write in flight at the kill (writes during the outage are the tests below).
  await w.stop();
  t.deepEqual(w.failures, []);
  await c.kill(1);
  await waitFor('the surviving peer finds the other down', async () => (await c.info(0)).raft_info.leader === null);
  const count = await api(c.peers[0].url, 'POST', '/collections/b/points/count', { exact: true });
  t.is(count.status, 200, JSON.stringify(count.body));
  t.is(count.body.result.count, w.acked.length);
  const hits = await api(c.peers[0].url, 'POST', '/collections/b/points/query', { query: vec(7), limit: 3 });
  t.is(hits.status, 200, JSON.stringify(hits.body));
  t.is(hits.body.result.points.length, 3);
  const got = await api(c.peers[0].url, 'POST', '/collections/b/points', { ids: w.acked.slice(0, 20), with_payload: true });
  t.is(got.status, 200, JSON.stringify(got.body));
  t.is(got.body.result.length, 20);
  t.deepEqual(await lostIds(c.peers[0].url, 'b', w.acked), []);
  await noCollectionOperations(t, c);

  await c.startPeer(1);
  await c.waitVoters(2);
  await waitFor('every replica Active', () => allActive(c, 1, 'b'));
  for (const p of c.peers) t.deepEqual(await lostIds(p.url, 'b', w.acked), [], `through peer ${p.index}`);
  t.is((await upsert(c.peers[1].url, 'b', pointsOf(range(5000, 10), 'after'))).status, 200);
  await sameDigests(t, c, 'b', 2, 2);
});

// With one peer of two down there is no majority to mark the failed replica Dead: the
// marking is deferred (proposed again in the background), the surviving peer leaves that
// replica out meanwhile, and the write is acknowledged.
test.serial('3.3b, 2 nodes, every shard on both: writes go on while one is down', async (t) => {
  const c = await Cluster.start(2);
  t.teardown(() => c.destroy());
  await createCollection(c, 'bw', { shard_number: 1, replication_factor: 2 });
  t.is((await upsert(c.peers[0].url, 'bw', pointsOf(range(0, 10), 'a'))).status, 200);
  await c.kill(1);
  await waitFor('the surviving peer finds the other down', async () => (await c.info(0)).raft_info.leader === null);
  let last: Answer | null = null;
  await waitFor(
    'a write acknowledged with one node of two down',
    async () => (last = await upsert(c.peers[0].url, 'bw', pointsOf(range(100, 10), 'b'))).status === 200,
    15_000,
  ).catch((err: unknown) => {
    throw new Error(`${String(err)}; last answer: ${last?.status} ${last ? errorOf(last) : ''}`);
  });
});

// The replica that missed writes while its peer was down is marked Dead once consensus has
// a majority again (the deferred marking), then recovered: both replicas end identical.
test.serial('3.3b, 2 nodes, every shard on both: a write while one is down does not leave the replicas apart after its restart', async (t) => {
  const c = await Cluster.start(2);
  t.teardown(() => c.destroy());
  await createCollection(c, 'bd', { shard_number: 1, replication_factor: 2 });
  t.is((await upsert(c.peers[0].url, 'bd', pointsOf(range(0, 10), 'a'))).status, 200);
  await c.kill(1);
  await waitFor('the surviving peer finds the other down', async () => (await c.info(0)).raft_info.leader === null);
  const r = await upsert(c.peers[0].url, 'bd', pointsOf(range(100, 10), 'b'));
  t.is(r.status, 200, `the write while one peer of two is down: ${r.status} ${errorOf(r)}`);
  await c.startPeer(1);
  await c.waitVoters(2);
  await waitFor(
    'both replicas Active with the same content',
    async () => {
      if (!(await allActive(c, 0, 'bd')) || !(await allActive(c, 1, 'bd'))) return false;
      const d = (await digests(c, 'bd', 1)).get(0);
      return d !== undefined && d.size === 2 && new Set(d.values()).size === 1;
    },
    20_000,
  );
  const counts = await Promise.all(c.peers.map(async (p) => (await api(p.url, 'POST', '/collections/bd/points/count', { exact: true })).body.result.count));
  t.is(counts[0], counts[1]);
});

test.serial('3.3b, 3 nodes, shards on 2 of them: while one is down every request goes on, collection operations too; after its restart the replicas recover and agree', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  await createCollection(c, 'm', { shard_number: 3, replication_factor: 2 });
  // Stop the consensus leader when it is not the peer the writer goes through.
  const leader = await c.waitLeader();
  const victim = leader === 0 ? 2 : leader;
  const w = new Writer(t, () => c.peers[0].url, 'm', 0);
  await w.more('some writes acknowledged', 50);
  await c.kill(victim);
  await w.more('writes go on with one node of three down', 100, 20_000);
  for (const p of c.running()) {
    for (const r of await collectionReads(p.url, 'm')) t.is(r?.status, 200, JSON.stringify(r?.body));
    t.deepEqual(await lostIds(p.url, 'm', w.acked), [], `through peer ${p.index}`);
  }
  const created = await change(c.peers[0].url, 'PUT', '/collections/more', { vectors: { size: DIM, distance: 'Dot' }, shard_number: 2, replication_factor: 2 });
  t.is(created.status, 200, JSON.stringify(created.body));
  const more = c.running().find((p) => p.index !== 0)!;
  await waitFor('the new collection exists on a running peer', async () => (await api(more.url, 'GET', '/collections/more')).status === 200);

  await c.startPeer(victim);
  await c.waitVoters(3);
  await waitFor('every replica Active again', () => allActive(c, 0, 'm'));
  await w.more('writes go on after the restart', 30);
  await w.stop();
  t.log(w.summary());
  for (const p of c.peers) t.deepEqual(await lostIds(p.url, 'm', w.acked), [], `through peer ${p.index}`);
  await waitFor('every replica Active, as the restarted peer sees it', () => allActive(c, victim, 'm'));
  await sameDigests(t, c, 'm', 3, 2);
  await waitFor('the collection created meanwhile reaches the restarted peer', async () => (await api(c.peers[victim].url, 'GET', '/collections/more')).status === 200);
});

// -- a stopped peer (SIGSTOP) ------------------------------------------------------------------

test.serial('SIGSTOP of a peer under a writer (RF 2): writes go on, its replicas go Dead; with write_consistency_factor 2 its shards refuse writes (503) until recovery; after SIGCONT every replica is Active and identical, no acknowledged point lost', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  await createCollection(c, 's1', { shard_number: 3, replication_factor: 2, write_consistency_factor: 1 });
  await createCollection(c, 's2', { shard_number: 3, replication_factor: 2, write_consistency_factor: 2 });
  const ids = await peerIds(c);
  const leader = await c.waitLeader();
  const victim = leader === 0 ? 2 : leader;
  const victimId = ids.get(victim)!;
  const where = await placement(c, 's2');
  const hit = [...where].filter(([, peers]) => peers.includes(victim)).map(([s]) => s);
  const spared = [...where].filter(([, peers]) => !peers.includes(victim)).map(([s]) => s);
  t.is(hit.length, 2);
  t.is(spared.length, 1);

  const w = new Writer(t, () => c.peers[0].url, 's1', 0);
  await w.more('some writes acknowledged', 50);
  c.signal(victim, 'SIGSTOP');
  t.teardown(() => c.signal(victim, 'SIGCONT'));
  await w.more('writes go on with a peer stopped', 100, 20_000);
  const deadIn = async (name: string) => {
    const st = await states(c, 0, name);
    const mine = Object.entries(st).filter(([k]) => k.endsWith(`/${victimId}`));
    return mine.length === 2 && mine.every(([, s]) => s === 'Dead');
  };
  await waitFor('the stopped peer\'s replicas of s1 are Dead', () => deadIn('s1'));
  await waitFor('the stopped peer\'s replicas of s2 are Dead', () => deadIn('s2'));
  for (const s of hit) {
    const r = await upsert(c.peers[0].url, 's2', pointsOf(idsOnShard(s, 3, 5), 'x'));
    t.is(r.status, 503, JSON.stringify(r.body));
    // Refused before any replica is asked once this peer applied the Dead marking; while
    // it applies it, the write is tried and reaches only the live replica: 503 either way.
    t.regex(errorOf(r), new RegExp(`(shard ${s} of collection \`s2\` has 1 replica that accept writes|the write reached 1 of 2 replicas of shard ${s} of collection \`s2\`), fewer than write_consistency_factor 2`));
  }
  const ok = await upsert(c.peers[1 === victim ? 2 : 1].url, 's2', pointsOf(idsOnShard(spared[0], 3, 5), 'x'));
  t.is(ok.status, 200, JSON.stringify(ok.body));

  c.signal(victim, 'SIGCONT');
  await waitFor('every replica of s1 Active again', () => allActive(c, 0, 's1'));
  await waitFor('every replica of s2 Active again', () => allActive(c, 0, 's2'));
  for (const s of hit) {
    const r = await upsert(c.peers[0].url, 's2', pointsOf(idsOnShard(s, 3, 5), 'y'));
    t.is(r.status, 200, JSON.stringify(r.body));
  }
  await w.more('writes go on after SIGCONT', 30);
  await w.stop();
  t.log(w.summary());
  for (const p of c.peers) t.deepEqual(await lostIds(p.url, 's1', w.acked), [], `through peer ${p.index}`);
  for (const i of [victim, 0]) {
    await waitFor(`every replica Active as peer ${i} sees it`, async () => (await allActive(c, i, 's1')) && allActive(c, i, 's2'));
  }
  await sameDigests(t, c, 's1', 3, 2);
  await sameDigests(t, c, 's2', 3, 2);
});

test.serial('SIGSTOP: a write that starts after the stopped peer was found down, to its replica of another shard (not Dead yet), is not held until the call deadline', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  await createCollection(c, 'h', { shard_number: 3, replication_factor: 2 });
  const victim = 2;
  const where = await placement(c, 'h');
  const [a, b] = [...where].filter(([, peers]) => peers.includes(victim)).map(([s]) => s);
  t.true(a !== undefined && b !== undefined);
  t.is((await upsert(c.peers[0].url, 'h', pointsOf(range(0, 30), 'a'))).status, 200);
  c.signal(victim, 'SIGSTOP');
  t.teardown(() => c.signal(victim, 'SIGCONT'));
  // Shard a: its call to the stopped peer is cancelled when health checks find the peer
  // down, and the replica is marked Dead. Shard b's replica there stays Active until the
  // leader's supervisor marks it (3 s after the peer went down): a write to it now sends a
  // call that must be cancelled too, not left to its 60 s deadline.
  const first = await upsert(c.peers[0].url, 'h', pointsOf(idsOnShard(a, 3, 3, 1000), 'b'), 'wait=true');
  t.is(first.status, 200, JSON.stringify(first.body));
  const second = await api(c.peers[0].url, 'PUT', '/collections/h/points?wait=true', { points: pointsOf(idsOnShard(b, 3, 3, 1000), 'b') }, 20_000).catch((err: unknown) => ({
    status: 0,
    body: String(err),
  }));
  t.is(second.status, 200, JSON.stringify(second.body));
});

// -- RF 1: a killed peer's shards are unavailable, the others are not --------------------------

test.serial('RF 1, a peer killed: reads and writes that need its shard fail with a clear 503, those of the other shards work, whole-collection reads fail; after its restart everything is there', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  await createCollection(c, 'r1', { shard_number: 3, replication_factor: 1 });
  const all = range(0, 300);
  t.is((await upsert(c.peers[0].url, 'r1', pointsOf(all, 'v1'))).status, 200);
  // The shard of each id as the test computes it is the one that holds it.
  const d = await digests(c, 'r1', 3);
  for (let s = 0; s < 3; s++) {
    const counts = [...(d.get(s)?.values() ?? [])].map((v) => Number(v.split(':')[0]));
    t.deepEqual(counts, [all.filter((id) => shardOf(id, 3) === s).length], `shard ${s}`);
  }
  const where = await placement(c, 'r1');
  const victim = 1;
  const lostShard = [...where].find(([, peers]) => peers.includes(victim))![0];
  t.deepEqual(where.get(lostShard), [victim]);
  const otherShards = [0, 1, 2].filter((s) => s !== lostShard);
  const onLost = all.filter((id) => shardOf(id, 3) === lostShard).slice(0, 5);
  const onOthers = otherShards.flatMap((s) => all.filter((id) => shardOf(id, 3) === s).slice(0, 3));

  await c.kill(victim);
  for (const i of [0, 2]) {
    const url = c.peers[i].url;
    const write = await upsert(url, 'r1', pointsOf(onLost, 'v2'));
    t.is(write.status, 503, JSON.stringify(write.body));
    t.regex(errorOf(write), new RegExp(`shard ${lostShard} of collection \`r1\``));
    const read = await api(url, 'POST', '/collections/r1/points', { ids: onLost, with_payload: true });
    t.is(read.status, 503, JSON.stringify(read.body));
    t.regex(errorOf(read), /peer \d+ (cannot be reached|stopped answering)/);
    if (i === 0) t.log(`write: ${errorOf(write)}`, `read: ${errorOf(read)}`);
    const mixed = await api(url, 'POST', '/collections/r1/points', { ids: [...onOthers, onLost[0]] });
    t.is(mixed.status, 503, 'a read that needs the lost shard fails even when other shards have points');
    for (const r of await collectionReads(url, 'r1')) t.is(r?.status, 503, `never an answer from fewer shards: ${JSON.stringify(r?.body).slice(0, 300)}`);

    const w2 = await upsert(url, 'r1', pointsOf(onOthers, `v2-${i}`));
    t.is(w2.status, 200, JSON.stringify(w2.body));
    const got = await api(url, 'POST', '/collections/r1/points', { ids: onOthers, with_payload: true });
    t.is(got.status, 200, JSON.stringify(got.body));
    t.deepEqual(
      got.body.result.map((p: any) => `${p.id}:${p.payload.tag}`).sort(),
      onOthers.map((id) => `${id}:v2-${i}`).sort(),
    );
    const filtered = await api(url, 'POST', '/collections/r1/points/query', { query: vec(onOthers[0]), limit: 1, filter: { must: [{ has_id: onOthers }] } });
    t.is(filtered.status, 503, 'a query goes to every shard, the lost one too');
  }

  await c.startPeer(victim);
  await c.waitVoters(3);
  await waitFor('the lost shard takes writes again', async () => (await upsert(c.peers[0].url, 'r1', pointsOf(onLost, 'v3'))).status === 200);
  await readableEverywhere(c, 'r1');
  for (const p of c.peers) {
    t.deepEqual(await lostIds(p.url, 'r1', all), [], `through peer ${p.index}`);
    const got = await api(p.url, 'POST', '/collections/r1/points', { ids: onLost, with_payload: true });
    t.deepEqual(
      got.body.result.map((x: any) => x.payload.tag),
      onLost.map(() => 'v3'),
    );
  }
  t.true(await allActive(c, 0, 'r1'));
});

// -- ordering -----------------------------------------------------------------------------------

/** Two writers through peers 0 and 1 writing the same ids with their own payloads and vectors, `rounds` batches each. */
async function conflictingWriters(c: Cluster, name: string, ordering: string, ids: number[], rounds: number): Promise<string[]> {
  const errors: string[] = [];
  await Promise.all(
    [0, 1].map(async (i) => {
      for (let n = 0; n < rounds; n++) {
        // Each batch: 10 of the ids, starting at a place that moves, so batches of the two writers overlap in varying ways.
        const batch = Array.from({ length: 10 }, (_, k) => ids[(n * 3 + k + i * 5) % ids.length]);
        const pts = batch.map((id) => ({ id, vector: vec(id * 31 + n * 7 + i * 1000), payload: { writer: i, n } }));
        const r = await upsert(c.peers[i].url, name, pts, `wait=true&ordering=${ordering}`);
        if (r.status !== 200) errors.push(`writer ${i}: ${r.status} ${errorOf(r)}`);
      }
    }),
  );
  return errors;
}

test.serial('ordering medium and strong (RF 3 on 3 peers): after two writers through different peers wrote the same ids hundreds of times, every replica of every shard is identical; with strong, writes answer 503 while the leader replica\'s peer is down, weak writes go on', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  await createCollection(c, 'o', { shard_number: 2, replication_factor: 3 });
  const ids = range(0, 40);
  for (const ordering of ['medium', 'strong']) {
    const errors = await conflictingWriters(c, 'o', ordering, ids, 150);
    t.deepEqual(errors, [], ordering);
    await sameDigests(t, c, 'o', 2, 3);
    const n = await api(c.peers[2].url, 'POST', '/collections/o/points/count', { exact: true });
    t.is(n.body.result.count, ids.length);
  }

  // The leader replica of strong ordering: the highest peer id among the shard's replicas (here every peer).
  const pids = await peerIds(c);
  const leader = [...pids].sort((a, b) => (BigInt(a[1]) > BigInt(b[1]) ? -1 : 1))[0];
  const via = c.peers[leader[0] === 0 ? 1 : 0].url;
  await c.kill(leader[0]);
  const strongAnswers: number[] = [];
  const refused = await waitFor('strong writes refused with the reason', async () => {
    const r = await upsert(via, 'o', pointsOf([1, 2, 3], 'strong'), 'wait=true&ordering=strong');
    strongAnswers.push(r.status);
    return r.status === 503 && new RegExp(`ordering=strong .*go through the replica on peer ${leader[1]}, which is (unreachable|Dead)`).test(errorOf(r)) ? r : null;
  });
  t.log(errorOf(refused));
  t.false(strongAnswers.includes(200), 'no strong write succeeds without its leader');
  const weak = await waitFor('weak writes go on', async () => ((await upsert(via, 'o', pointsOf([1, 2, 3], 'weak'), 'wait=true&ordering=weak')).status === 200 ? true : null));
  t.true(weak);
  const medium = await upsert(via, 'o', pointsOf([4, 5], 'medium'), 'wait=true&ordering=medium');
  t.is(medium.status, 200, JSON.stringify(medium.body));
  const again = await upsert(via, 'o', pointsOf([1, 2, 3], 'strong'), 'wait=true&ordering=strong');
  t.is(again.status, 503, JSON.stringify(again.body));
});

// -- writer clocks across a restart ---------------------------------------------------------------

test.serial('a writing peer killed and restarted: its new writes to the same ids reach every replica (writer clocks are not reused)', async (t) => {
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  await createCollection(c, 'k', { shard_number: 2, replication_factor: 3 });
  const a = 1;
  const ids = range(0, 100);
  const batches = Array.from({ length: 10 }, (_, b) => ids.slice(b * 10, b * 10 + 10));
  // Several rounds before the restart, fewer after: a writer that started its clocks over would only repeat ticks replicas have seen.
  for (let round = 0; round < 3; round++) {
    for (const b of batches) t.is((await upsert(c.peers[a].url, 'k', pointsOf(b, `old${round}`))).status, 200);
  }
  await c.kill(a);
  await c.startPeer(a);
  await c.waitVoters(3);
  await waitFor('every replica Active as every peer sees it', () => allActiveEverywhere(c, 'k'));
  for (const b of batches) {
    const r = await upsert(c.peers[a].url, 'k', pointsOf(b, 'new', 500));
    t.is(r.status, 200, JSON.stringify(r.body));
  }
  await sameDigests(t, c, 'k', 2, 3);
  for (const p of c.peers) {
    const got = await api(p.url, 'POST', '/collections/k/points?consistency=all', { ids, with_payload: true, with_vector: true });
    t.is(got.status, 200, JSON.stringify(got.body));
    const wrong = got.body.result.filter((x: any) => x.payload.tag !== 'new');
    t.deepEqual(
      wrong.map((x: any) => x.id),
      [],
      `through peer ${p.index}`,
    );
    t.is(got.body.result.length, ids.length);
  }
});
