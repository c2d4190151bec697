/**
 * Shard transfers under faults, on three real peers (test/cluster/harness.ts), for each
 * transfer method (transfer-support.ts, METHODS):
 *
 * - `kill -9` in the middle of a user transfer: of its source (a move), of its target (a
 *   replicate), of the consensus leader when it is neither;
 * - `kill -9` in the middle of an automatic recovery of a Dead replica: of its target,
 *   of its source, of the consensus leader when it is neither;
 * - a move and a replicate while the collection is written (upserts, deletes, payload
 *   updates, through every peer) and read.
 *
 * Every transfer must end cleanly: aborted (and, for a recovery, started again until the
 * replica is Active), or finished when the peer that died had no part in it. Throughout,
 * a monitor polls the replica states and fails the test if any shard is seen without an
 * Active replica. After: every acknowledged (wait=true) point is present through every
 * peer, none twice, and once every replica is Active the replicas' digests are identical.
 *
 * Faults are detected by waiting for the condition they cause (waitFor); the transfers
 * run long enough to be caught in the middle (tens of thousands of small points), and
 * each test starts its own cluster (test.serial: one at a time on the machine).
 */

import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import test, { type ExecutionContext } from 'ava';

import { Cluster } from './harness';
import {
  call,
  ActiveMonitor,
  METHODS,
  TEST_DEADLINE_MS,
  TRANSFER_DEADLINE_MS,
  Writer,
  waitSettledEverywhere,
  clusterOp,
  createCollection,
  errorOf,
  everyPeerSees,
  load,
  lostAndDuplicated,
  midTransfer,
  midTransferOrEnd,
  transferLogs,
  peerIds,
  range,
  restart,
  sameContent,
  shardReplicas,
  transferEnd,
  vec,
  view,
  WAIT_MS,
  waitFor,
  type Method,
} from './transfer-support';

/** Points of the transferred shard (and missed by a recovering replica): a transfer of them is still copying when a test acts on it, which takes milliseconds. */
const N = 10_000;
const NAME = 'f';
/** The first id of the points a recovery that was too quick to be seen loads before it is made again (deadThenRecovering). */
const PADDING = 5_000_000;

/** The shard folders of a collection on a peer's disk. */
async function shardFolders(c: Cluster, i: number, name: string): Promise<string[]> {
  const entries = await fs.readdir(path.join(c.peers[i].dir, 'storage', 'collections', name)).catch(() => [] as string[]);
  return entries.filter((e) => /^[0-9]+$/.test(e)).sort();
}

/** Starts three peers (recoveries by `method`) and their leader's index; the cluster goes at teardown. */
async function start(t: ExecutionContext, method: Method = 'stream_records'): Promise<{ c: Cluster; ids: string[]; leader: number }> {
  // Transfers paced (storage.performance.shard_transfer_max_mb_per_sec) so that a fast
  // machine does not finish one between two looks: a 10,000-point copy takes about 2 s.
  const c = await Cluster.start(3, { SERVICE__STORAGE__SHARD_TRANSFER_METHOD: method, SERVICE__STORAGE__PERFORMANCE__SHARD_TRANSFER_MAX_MB_PER_SEC: '0.5' });
  t.teardown(() => c.destroy());
  return { c, ids: await peerIds(c), leader: await c.waitLeader() };
}

/**
 * The end of a test: writes stop, the monitor saw an Active replica of every shard at
 * every poll, every acknowledged point is there through every peer (none twice), every
 * replica is Active and the replicas of each shard are identical.
 */
async function finalChecks(t: ExecutionContext, c: Cluster, w: Writer, m: ActiveMonitor, acked: readonly number[], shards: number, replicas: number): Promise<void> {
  await waitSettledEverywhere(c, NAME, TRANSFER_DEADLINE_MS);
  await w.more('writes go on at the end', 20);
  await w.stop();
  await m.stop();
  t.log(w.summary());
  t.log(`monitor: ${m.polls} polls; states seen: ${JSON.stringify([...m.history])}`);
  t.deepEqual(m.problems.slice(0, 5), [], 'every shard had an Active replica at every poll');
  for (const p of c.peers) {
    const { lost, duplicated } = await lostAndDuplicated(p.url, NAME, [...acked, ...w.acked]);
    t.deepEqual(lost.slice(0, 20), [], `through peer ${p.index}: ${lost.length} acknowledged points lost`);
    t.deepEqual(duplicated.slice(0, 20), [], `through peer ${p.index}: points listed twice`);
  }
  const n = await sameContent(t, c, NAME, shards);
  for (let s = 0; s < shards; s++) t.is(n.get(s), replicas, `shard ${s}: ${replicas} replicas`);
}

// -- user transfers ---------------------------------------------------------------------------

for (const method of METHODS) {
  test.serial(`${method}: kill -9 of the source of a move in the middle: the move is aborted, the other replica stays Active, the killed source comes back and recovers`, async (t) => {
    t.timeout(TEST_DEADLINE_MS);
    const { c, ids, leader } = await start(t, method);
    await createCollection(c, NAME, { shard_number: 1, replication_factor: 2 });
    const holders = Object.keys(await shardReplicas(c, 0, NAME, 0)).map((id) => ids.indexOf(id));
    // The source: a replica holder that is not the leader (this test kills a source, not the leader).
    const s = holders.find((i) => i !== leader)!;
    const k = holders.find((i) => i !== s)!;
    const r = [0, 1, 2].find((i) => !holders.includes(i))!;
    await load(c.peers[k].url, NAME, range(0, N));
    const w = new Writer(t, () => c.peers[k].url, NAME, 1_000_000, 10, 20);
    const m = new ActiveMonitor(t, c, NAME, 1, () => [k, r, s]);

    // The move, seen in the middle of its copy on its source. One that ends between two
    // looks (a loaded machine; a wal_delta sends its operations in batches of 256) is
    // moved back to the source and made again.
    for (let attempt = 1; ; attempt++) {
      const mv = await clusterOp(c, k, NAME, { move_shard: { shard_id: 0, from_peer_id: Number(ids[s]), to_peer_id: Number(ids[r]), method } });
      t.is(mv.status, 200, JSON.stringify(mv.body));
      const listed = await waitFor(
        'the move listed on its source, or ended',
        async () => {
          if ((await view(c, s, NAME)).shard_transfers.some((x) => x.shard_id === 0 && String(x.to) === ids[r])) return 'listed' as const;
          const reps = await shardReplicas(c, s, NAME, 0);
          return reps[ids[r]] === 'Active' && reps[ids[s]] === undefined ? ('ended' as const) : null;
        },
        WAIT_MS,
        10,
      );
      if (listed === 'listed' && (await midTransferOrEnd(c, s, NAME, 0, ids[r])) !== null) break;
      if (attempt >= 5) throw new Error(`the move ended before it was seen copying, ${attempt} times`);
      t.log(`attempt ${attempt}: the move ended before it was seen copying; moved back and made again`);
      await everyPeerSees(c, NAME, 0, { [ids[k]]: 'Active', [ids[r]]: 'Active' }, [k, r, s]);
      const back = await clusterOp(c, k, NAME, { move_shard: { shard_id: 0, from_peer_id: Number(ids[r]), to_peer_id: Number(ids[s]), method } });
      t.is(back.status, 200, JSON.stringify(back.body));
      await transferEnd(c, k, NAME, 0, ids[s]);
      await everyPeerSees(c, NAME, 0, { [ids[k]]: 'Active', [ids[s]]: 'Active' }, [k, r, s]);
    }
    await c.kill(s);
    // Aborted: the new replica goes, the killed source is Dead, the other replica Active.
    await transferEnd(c, k, NAME, 0, ids[r]);
    await everyPeerSees(c, NAME, 0, { [ids[k]]: 'Active', [ids[s]]: 'Dead' }, [k, r]);
    await waitFor('the aborted move\'s replica folder gone', async () => (await shardFolders(c, r, NAME)).length === 0);
    await w.more('writes go on without the source', 20);

    await restart(c, s);
    await finalChecks(t, c, w, m, range(0, N), 1, 2);
    t.deepEqual(await shardReplicas(c, r, NAME, 0), { [ids[k]]: 'Active', [ids[s]]: 'Active' });
  });

  test.serial(`${method}: kill -9 of the target of a replicate in the middle: aborted, the source stays Active; the restarted target drops what it had, a new replicate to it runs to the end`, async (t) => {
    t.timeout(TEST_DEADLINE_MS);
    const { c, ids, leader } = await start(t, method);
    await createCollection(c, NAME, { shard_number: 1, replication_factor: 1 });
    const s = ids.indexOf(Object.keys(await shardReplicas(c, 0, NAME, 0))[0]);
    // The target: a peer without the replica that is not the leader; the writer goes through the third.
    const r = [0, 1, 2].find((i) => i !== s && i !== leader)!;
    const k = [0, 1, 2].find((i) => i !== s && i !== r)!;
    await load(c.peers[s].url, NAME, range(0, N));
    const w = new Writer(t, () => c.peers[k].url, NAME, 1_000_000, 10, 20);
    const m = new ActiveMonitor(t, c, NAME, 1, () => [k, s, r]);

    const rep = await clusterOp(c, k, NAME, { replicate_shard: { shard_id: 0, from_peer_id: Number(ids[s]), to_peer_id: Number(ids[r]), method } });
    t.is(rep.status, 200, JSON.stringify(rep.body));
    await midTransfer(c, s, NAME, 0, ids[r]);
    await c.kill(r);
    await transferEnd(c, s, NAME, 0, ids[r]);
    // Aborted: the new replica is gone.
    await everyPeerSees(c, NAME, 0, { [ids[s]]: 'Active' }, [s, k]);
    await w.more('writes go on without the target', 20);

    // The target comes back: the partial replica it held goes (no replica in the cluster state).
    await restart(c, r);
    await everyPeerSees(c, NAME, 0, { [ids[s]]: 'Active' });
    await waitFor('the restarted target dropped its partial replica\'s folder', async () => (await shardFolders(c, r, NAME)).length === 0);
    const again = await clusterOp(c, k, NAME, { replicate_shard: { shard_id: 0, from_peer_id: Number(ids[s]), to_peer_id: Number(ids[r]), method } });
    t.is(again.status, 200, JSON.stringify(again.body));
    const end2 = await transferEnd(c, k, NAME, 0, ids[r]);
    if (JSON.stringify(end2) !== JSON.stringify({ [ids[s]]: 'Active', [ids[r]]: 'Active' })) t.log(transferLogs(c));
    t.deepEqual(end2, { [ids[s]]: 'Active', [ids[r]]: 'Active' }, 'the second replicate ran to its end');
    await finalChecks(t, c, w, m, range(0, N), 1, 2);
  });

  test.serial(`${method}: kill -9 of the consensus leader (neither source nor target) in the middle of a replicate: the transfer ends (finished or aborted), the cluster goes on; after the leader's restart every replica is Active and identical`, async (t) => {
    t.timeout(TEST_DEADLINE_MS);
    const { c, ids, leader } = await start(t, method);
    await createCollection(c, NAME, { shard_number: 1, replication_factor: 1 });
    let s = ids.indexOf(Object.keys(await shardReplicas(c, 0, NAME, 0))[0]);
    const [p, q] = [0, 1, 2].filter((i) => i !== leader);
    if (s === leader) {
      // Off the leader while it is empty: source and target are the two other peers.
      t.is((await clusterOp(c, p, NAME, { move_shard: { shard_id: 0, from_peer_id: Number(ids[s]), to_peer_id: Number(ids[p]) } })).status, 200);
      t.deepEqual(await transferEnd(c, p, NAME, 0, ids[p]), { [ids[p]]: 'Active' });
      await everyPeerSees(c, NAME, 0, { [ids[p]]: 'Active' });
      s = p;
    }
    const r = s === p ? q : p;
    await load(c.peers[s].url, NAME, range(0, N));
    const w = new Writer(t, () => c.peers[s].url, NAME, 1_000_000, 10, 20);
    const m = new ActiveMonitor(t, c, NAME, 1, () => [s, r, leader]);

    const rep = await clusterOp(c, r, NAME, { replicate_shard: { shard_id: 0, from_peer_id: Number(ids[s]), to_peer_id: Number(ids[r]), method } });
    t.is(rep.status, 200, JSON.stringify(rep.body));
    await midTransfer(c, s, NAME, 0, ids[r]);
    const still = await c.leader();
    if (still !== leader) t.log(`the leader changed before the kill (${leader} → ${still}); killing peer ${leader}, which is neither source nor target`);
    await c.kill(leader);
    const end = await transferEnd(c, s, NAME, 0, ids[r]);
    t.log(`the transfer ended: ${JSON.stringify(end)}`);
    const finished = JSON.stringify(end) === JSON.stringify({ [ids[s]]: 'Active', [ids[r]]: 'Active' });
    t.true(finished || JSON.stringify(end) === JSON.stringify({ [ids[s]]: 'Active' }), `finished or aborted: ${JSON.stringify(end)}`);
    await c.waitLeader(WAIT_MS, [c.peers[s], c.peers[r]]);
    await w.more('writes go on without the old leader', 20);

    await restart(c, leader);
    await finalChecks(t, c, w, m, range(0, N), 1, finished ? 2 : 1);
  });
}

// -- automatic recovery -----------------------------------------------------------------------

/**
 * Makes the replica on `victim` Dead (killed; the writer's next write to it fails), loads
 * the points `missed` meanwhile (what a wal_delta recovery replays; the other methods
 * copy the whole shard), and restarts it: the leader's supervisor starts a recovery to
 * it. Returns the recovery's source (index), seen in the middle of its copy.
 *
 * A recovery that ends before it is seen copying (a fast machine copies a small shard
 * between two looks) is made again, with the shard grown meanwhile: each new attempt
 * loads N · 2^(attempt - 2) more points (ids from PADDING on, appended to `padding`, which
 * the caller adds to the points it checks), so the copy takes longer every time.
 */
async function deadThenRecovering(c: Cluster, ids: string[], victim: number, observer: number, w: Writer, missed: number[], padding: number[]): Promise<number> {
  for (let attempt = 1; ; attempt++) {
    await c.kill(victim);
    await waitFor(`the replica on peer ${victim} Dead`, async () => (await shardReplicas(c, observer, NAME, 0))[ids[victim]] === 'Dead');
    await load(c.peers[observer].url, NAME, missed, 'missed');
    if (attempt > 1) {
      const more = range(PADDING + padding.length, N * 2 ** (attempt - 2));
      await load(c.peers[observer].url, NAME, more, 'padding');
      padding.push(...more);
    }
    await w.more('writes go on while it is Dead', 20);
    await c.startPeer(victim);
    const t = await waitFor(
      `a recovery to peer ${victim} listed, or the replica Active again`,
      async () => {
        const v = await view(c, observer, NAME);
        const listed = v.shard_transfers.find((x) => String(x.to) === ids[victim]);
        if (listed !== undefined) return listed;
        return (await shardReplicas(c, observer, NAME, 0))[ids[victim]] === 'Active' ? ('ended' as const) : null;
      },
      WAIT_MS,
      10,
    );
    if (t !== 'ended') {
      const source = ids.indexOf(String(t.from));
      if ((await midTransferOrEnd(c, source, NAME, 0, ids[victim])) !== null) return source;
    }
    if (attempt >= 5) throw new Error(`the recovery to peer ${victim} ended before it was seen copying, ${attempt} times`);
    await waitFor('the recovered replica Active', async () => (await shardReplicas(c, observer, NAME, 0))[ids[victim]] === 'Active', TRANSFER_DEADLINE_MS);
  }
}

for (const method of METHODS) {
  test.serial(`${method}, recovery: kill -9 of its target, then of its source, in the middle: each time aborted and started again until every replica is Active and identical`, async (t) => {
    t.timeout(TEST_DEADLINE_MS);
    const { c, ids, leader } = await start(t, method);
    await createCollection(c, NAME, { shard_number: 1, replication_factor: 3 });
    const victim = [0, 1, 2].find((i) => i !== leader)!;
    const w0 = [0, 1, 2].find((i) => i !== leader && i !== victim)!;
    await load(c.peers[w0].url, NAME, range(0, N));
    const w = new Writer(t, () => c.peers[w0].url, NAME, 1_000_000, 10, 20);
    const m = new ActiveMonitor(t, c, NAME, 1, () => [w0, leader, victim]);
    const t0 = Date.now();

    // The target dies in the middle of its recovery: aborted, Dead again; restarted, recovered again.
    const missed = method === 'wal_delta' ? N : 0;
    const padding: number[] = [];
    await deadThenRecovering(c, ids, victim, w0, w, range(N, missed), padding);
    t.log(`${Date.now() - t0} ms: recovering`);
    await c.kill(victim);
    await transferEnd(c, w0, NAME, 0, ids[victim]);
    await waitFor('the recovery aborted: its target Dead', async () => (await shardReplicas(c, w0, NAME, 0))[ids[victim]] === 'Dead');
    await c.startPeer(victim);
    t.log(`${Date.now() - t0} ms: aborted`);
    await waitFor('the target recovered', async () => (await shardReplicas(c, w0, NAME, 0))[ids[victim]] === 'Active', TRANSFER_DEADLINE_MS);
    await c.waitVoters(3, WAIT_MS);

    // Dead again, and this time its recovery's source dies in the middle: aborted, then a
    // recovery from another Active replica.
    t.log(`${Date.now() - t0} ms: recovered`);
    const source = await deadThenRecovering(c, ids, victim, w0, w, range(N + missed, missed), padding);
    t.log(`${Date.now() - t0} ms: recovering again`);
    await c.kill(source);
    // The source stays down: the target can become Active again only by a recovery from the replica left.
    const keep = [0, 1, 2].find((i) => i !== source && i !== victim)!;
    await waitFor('the target recovered from the replica left', async () => (await shardReplicas(c, keep, NAME, 0))[ids[victim]] === 'Active', TRANSFER_DEADLINE_MS);
    t.log(`${Date.now() - t0} ms: recovered from the replica left`);
    t.is((await shardReplicas(c, keep, NAME, 0))[ids[source]], 'Dead', 'the killed source is Dead');
    await w.more('writes go on', 20);
    await restart(c, source);
    t.log(`${Date.now() - t0} ms: the source restarted`);
    await finalChecks(t, c, w, m, [...range(0, N + 2 * missed), ...padding], 1, 3);
    t.log(`${Date.now() - t0} ms: done`);
  });

  test.serial(`${method}, recovery: kill -9 of the consensus leader (neither source nor target) in the middle: the recovery ends, the replica becomes Active, all identical`, async (t) => {
    t.timeout(TEST_DEADLINE_MS);
    const { c, ids, leader } = await start(t, method);
    await createCollection(c, NAME, { shard_number: 1, replication_factor: 2 });
    const [a, b] = [0, 1, 2].filter((i) => i !== leader);
    const holders = Object.keys(await shardReplicas(c, a, NAME, 0)).map((id) => ids.indexOf(id));
    if (holders.includes(leader)) {
      // The leader's replica moves (empty) to the peer without one: the replicas are on a and b.
      const to = holders.includes(a) ? b : a;
      t.is((await clusterOp(c, a, NAME, { move_shard: { shard_id: 0, from_peer_id: Number(ids[leader]), to_peer_id: Number(ids[to]) } })).status, 200);
      await everyPeerSees(c, NAME, 0, { [ids[a]]: 'Active', [ids[b]]: 'Active' });
    }
    await load(c.peers[a].url, NAME, range(0, N));
    const w = new Writer(t, () => c.peers[a].url, NAME, 1_000_000, 10, 20);
    const m = new ActiveMonitor(t, c, NAME, 1, () => [a, b, leader]);

    const padding: number[] = [];
    const source = await deadThenRecovering(c, ids, b, a, w, range(N, method === 'wal_delta' ? N : 0), padding);
    t.is(source, a, 'the recovery\'s source is the other replica');
    await c.kill(leader);
    await waitFor('the replica recovered', async () => (await shardReplicas(c, a, NAME, 0))[ids[b]] === 'Active', TRANSFER_DEADLINE_MS);
    await c.waitLeader(WAIT_MS, [c.peers[a], c.peers[b]]);
    await w.more('writes go on without the old leader', 20);
    await restart(c, leader);
    await finalChecks(t, c, w, m, [...range(0, method === 'wal_delta' ? 2 * N : N), ...padding], 1, 2);
  });
}

// -- a transfer under reads and writes of every kind -------------------------------------------

/** A payload as JSON with its keys sorted. */
function sorted(x: Record<string, unknown> | undefined): string {
  return JSON.stringify(Object.entries(x ?? {}).sort(([a], [b]) => (a < b ? -1 : 1)));
}

interface Model {
  /** id → payload as acknowledged. */
  points: Map<number, Record<string, unknown>>;
  /** Ids whose last write was not acknowledged: their state is unknown. */
  uncertain: Set<number>;
}

/**
 * A 503 "Shard temporarily unavailable": what a client may get while a move ends (see
 * the test "reads and writes through every peer go on across the end of a move"); a
 * write that got it may have been applied or not (retrying it is safe).
 */
function transient(r: { status: number; body: any }): boolean {
  return r.status === 503 && /^Shard temporarily unavailable: /.test(errorOf(r));
}

/**
 * One client writing through every peer in turn (wait=true): new points, deletes of
 * points it wrote, payload updates of base points 1000.. (ids below 1000 are never
 * touched: the reader checks them), overwrites; the model keeps what was acknowledged.
 */
class Mutator {
  readonly model: Model;
  readonly failures: string[] = [];
  /** Writes that failed with a 503 (transient). */
  readonly unavailable: string[] = [];
  ops = 0;
  private stopped = false;
  private readonly done: Promise<void>;

  constructor(t: ExecutionContext, c: Cluster, base: number) {
    const model: Model = { points: new Map(range(0, base).map((id): [number, Record<string, unknown>] => [id, { i: id, tag: 'base' }])), uncertain: new Set() };
    this.model = model;
    t.teardown(() => this.stop());
    this.done = (async () => {
      let next = 1_000_000;
      for (let k = 0; !this.stopped; k++) {
        const url = c.peers[k % 3].url;
        const mine = [...model.points.keys()].filter((id) => id >= 1000 && !model.uncertain.has(id));
        const pick = (n: number) => Array.from({ length: n }, () => mine[Math.floor(Math.random() * mine.length)]).filter((x, i, a) => a.indexOf(x) === i);
        let ids: number[];
        let req: [string, string, unknown];
        let apply: () => void;
        switch (k % 4) {
          case 0: {
            ids = range(next, 10);
            next += 10;
            const pts = ids.map((id) => ({ id, vector: vec(id), payload: { i: id, tag: 'new' } }));
            req = ['PUT', 'points', { points: pts }];
            apply = () => ids.forEach((id) => model.points.set(id, { i: id, tag: 'new' }));
            break;
          }
          case 1: {
            ids = pick(4);
            req = ['POST', 'points/delete', { points: ids }];
            apply = () => ids.forEach((id) => model.points.delete(id));
            break;
          }
          case 2: {
            ids = pick(8);
            req = ['POST', 'points/payload', { payload: { v: k }, points: ids }];
            apply = () => ids.forEach((id) => model.points.set(id, { ...model.points.get(id)!, v: k }));
            break;
          }
          default: {
            ids = pick(5);
            const pts = ids.map((id) => ({ id, vector: vec(id, k), payload: { i: id, tag: 'over', k } }));
            req = ['PUT', 'points', { points: pts }];
            apply = () => ids.forEach((id) => model.points.set(id, { i: id, tag: 'over', k }));
          }
        }
        const r = await call(url, req[0], `/collections/${NAME}/${req[1]}?wait=true`, req[2]).catch((err: unknown) => ({ status: 0, body: String(err) }));
        this.ops++;
        if (r.status === 200) {
          apply();
        } else {
          (transient(r) ? this.unavailable : this.failures).push(`${req[0]} ${req[1]} via peer ${k % 3}: ${r.status} ${errorOf(r)}`);
          ids.forEach((id) => model.uncertain.add(id));
        }
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }
}

/** Reads through every peer in turn until stopped: an answer must hold every untouched base point (retrieve), count at least them, find 10 (query); 503s are counted apart. */
class Reader {
  readonly problems: string[] = [];
  readonly unavailable: string[] = [];
  reads = 0;
  private stopped = false;
  private readonly done: Promise<void>;

  constructor(t: ExecutionContext, c: Cluster) {
    t.teardown(() => this.stop());
    this.done = (async () => {
      for (let k = 0; !this.stopped; k++) {
        const url = c.peers[k % 3].url;
        const ids = Array.from({ length: 50 }, (_, j) => (k * 50 + j) % 1000);
        const [got, count, found] = await Promise.all([
          call(url, 'POST', `/collections/${NAME}/points`, { ids, with_payload: true }),
          call(url, 'POST', `/collections/${NAME}/points/count`, { exact: true }),
          call(url, 'POST', `/collections/${NAME}/points/query`, { query: vec(k), limit: 10 }),
        ]).catch((err: unknown) => [{ status: 0, body: String(err) }, null, null] as Array<{ status: number; body: any } | null>);
        this.reads++;
        const check = (what: string, r: { status: number; body: any } | null, right: (body: any) => boolean) => {
          if (r === null) return;
          if (transient(r)) this.unavailable.push(`${what} via peer ${k % 3}: ${errorOf(r)}`);
          else if (r.status !== 200 || !right(r.body)) this.problems.push(`${what} via peer ${k % 3}: ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`);
        };
        check('retrieve', got, (b) => b.result.length === ids.length);
        check('count', count, (b) => b.result.count >= 1000);
        check('query', found, (b) => b.result.points.length === 10);
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }
}

for (const method of METHODS) {
  test.serial(`${method}: a move and a replicate while the collection is written (upserts, deletes, payload updates, through every peer) and read: no acknowledged change lost, nothing twice, replicas identical`, async (t) => {
    t.timeout(TEST_DEADLINE_MS);
    const { c, ids } = await start(t, method);
    await createCollection(c, NAME, { shard_number: 2, replication_factor: 1 });
    const base = 5000;
    await load(c.peers[0].url, NAME, range(0, base));
    const where = await Promise.all([0, 1].map(async (s) => ids.indexOf(Object.keys(await shardReplicas(c, 0, NAME, s))[0])));
    const spare = [0, 1, 2].find((i) => !where.includes(i))!;
    const m = new ActiveMonitor(t, c, NAME, 2);
    const mut = new Mutator(t, c, base);
    const rd = new Reader(t, c);
    await waitFor('writes and reads under way', () => mut.ops >= 20 && rd.reads >= 5);

    // Shard 0 moves to the spare peer; shard 1 gets a second replica there.
    const mv = await clusterOp(c, 0, NAME, { move_shard: { shard_id: 0, from_peer_id: Number(ids[where[0]]), to_peer_id: Number(ids[spare]), method } });
    t.is(mv.status, 200, JSON.stringify(mv.body));
    t.deepEqual(await transferEnd(c, 0, NAME, 0, ids[spare]), { [ids[spare]]: 'Active' }, 'the move ran to its end');
    const ops = mut.ops;
    await waitFor('writes go on after the move', () => mut.ops >= ops + 20);
    const rep = await clusterOp(c, 1, NAME, { replicate_shard: { shard_id: 1, from_peer_id: Number(ids[where[1]]), to_peer_id: Number(ids[spare]), method } });
    t.is(rep.status, 200, JSON.stringify(rep.body));
    t.deepEqual(await transferEnd(c, 1, NAME, 1, ids[spare]), { [ids[where[1]]]: 'Active', [ids[spare]]: 'Active' }, 'the replicate ran to its end');
    const ops2 = mut.ops;
    await waitFor('writes go on after the replicate', () => mut.ops >= ops2 + 20);
    await mut.stop();
    await rd.stop();
    await m.stop();
    t.log(`${mut.ops} writes, ${mut.failures.length} failed, ${mut.unavailable.length} unavailable (503); ${rd.reads} rounds of reads, ${rd.unavailable.length} reads unavailable (503); ${m.polls} state polls`);
    for (const x of [...mut.unavailable, ...rd.unavailable].slice(0, 3)) t.log(`  503: ${x}`);
    t.deepEqual(mut.failures.slice(0, 5), [], 'no write failed but with a 503');
    t.deepEqual(rd.problems.slice(0, 5), [], 'every read answered (but 503s) with every untouched point');
    t.deepEqual(m.problems.slice(0, 5), []);

    await waitSettledEverywhere(c, NAME);
    // Every peer shows exactly the acknowledged state: the same ids (none lost, none
    // extra, none twice) with the acknowledged payloads.
    const want = new Map([...mut.model.points].filter(([id]) => !mut.model.uncertain.has(id)));
    for (const p of c.peers) {
      const seen = new Map<number, Record<string, unknown>>();
      const twice: number[] = [];
      let offset: unknown = null;
      do {
        const r = await call(p.url, 'POST', `/collections/${NAME}/points/scroll`, { limit: 1000, offset, with_payload: true });
        t.is(r.status, 200);
        for (const pt of r.body.result.points) {
          if (seen.has(pt.id)) twice.push(pt.id);
          seen.set(pt.id, pt.payload);
        }
        offset = r.body.result.next_page_offset;
      } while (offset !== null);
      const lost = [...want.keys()].filter((id) => !seen.has(id));
      const extra = [...seen.keys()].filter((id) => !want.has(id) && !mut.model.uncertain.has(id));
      const wrong = [...want].filter(([id, pl]) => seen.has(id) && sorted(seen.get(id)) !== sorted(pl)).map(([id]) => id);
      t.deepEqual(lost.slice(0, 10), [], `through peer ${p.index}: ${lost.length} acknowledged points lost`);
      t.deepEqual(extra.slice(0, 10), [], `through peer ${p.index}: ${extra.length} points that should not be there (deleted, or never written)`);
      t.deepEqual(twice.slice(0, 10), [], `through peer ${p.index}: points listed twice`);
      t.deepEqual(wrong.slice(0, 10), [], `through peer ${p.index}: ${wrong.length} points with a payload other than the acknowledged one`);
      const count = await call(p.url, 'POST', `/collections/${NAME}/points/count`, { exact: true });
      t.is(count.body.result.count, seen.size);
    }
    const n = await sameContent(t, c, NAME, 2);
    t.is(n.get(0), 1);
    t.is(n.get(1), 2);
  });
}

// -- the end of a move -------------------------------------------------------------------------

// A known limit, found by these tests (README, docs/replication.md "Limits, known"): when a
// move ends, its source drops its replica as soon as it applies the finish, while other
// peers, one consensus apply behind, may still send the shard's reads and writes there for
// a few tens of milliseconds: those answer 503 ("peer X holds no replica of shard 0", "the
// write reached 0 of 1 replicas ..."; retrying is safe). What must hold, and is checked:
// no acknowledged write is lost or doubled, every failure is such a 503 (never a 500 or a
// wrong answer), and requests succeed again through every peer right after each move.
{
  test.serial('reads and writes through every peer across the end of a move: nothing acknowledged lost, failures only brief 503s (a known limit, see the comment above)', async (t) => {
    t.timeout(TEST_DEADLINE_MS);
    const { c, ids } = await start(t);
    await createCollection(c, NAME, { shard_number: 1, replication_factor: 1 });
    await load(c.peers[0].url, NAME, range(0, 2000));
    let stop = false;
    const failures: string[] = [];
    const acked: number[] = [];
    const loops = [0, 1, 2].flatMap((i) => [
      (async () => {
        for (let b = 0; !stop; b++) {
          const id = 100_000 * (i + 1) + b;
          const r = await call(c.peers[i].url, 'PUT', `/collections/${NAME}/points?wait=true`, { points: [{ id, vector: vec(id), payload: { i: id } }] });
          if (r.status === 200) acked.push(id);
          else failures.push(`${r.status} write via peer ${i}: ${errorOf(r)}`);
        }
      })(),
      (async () => {
        while (!stop) {
          const r = await call(c.peers[i].url, 'POST', `/collections/${NAME}/points/count`, { exact: true });
          if (r.status !== 200) failures.push(`${r.status} read via peer ${i}: ${errorOf(r)}`);
        }
      })(),
    ]);
    t.teardown(async () => {
      stop = true;
      await Promise.all(loops);
    });
    for (let k = 0; k < 6; k++) {
      const method = METHODS[k % METHODS.length];
      const home = Object.keys(await shardReplicas(c, 0, NAME, 0))[0];
      const dest = ids[(ids.indexOf(home) + 1) % 3];
      const before = failures.length;
      const mv = await clusterOp(c, k % 3, NAME, { move_shard: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(dest), method } });
      t.is(mv.status, 200, JSON.stringify(mv.body));
      await everyPeerSees(c, NAME, 0, { [dest]: 'Active' });
      const n = acked.length;
      await waitFor('writes go on after the move', () => acked.length >= n + 10);
      t.log(`move ${k + 1} (${method}, peer ${ids.indexOf(home)} → ${ids.indexOf(dest)}): ${failures.length - before} requests failed`);
    }
    stop = true;
    await Promise.all(loops);
    const distinct = [...new Set(failures.map((f) => f.replace(/[0-9]{6,}/g, 'N')))];
    t.log(`${failures.length} requests failed across 6 moves: ${distinct.join(' | ')}`);
    t.deepEqual(
      distinct.filter((f) => !f.startsWith('503 ')),
      [],
      'every failure is a 503',
    );
    const { lost, duplicated } = await lostAndDuplicated(c.peers[0].url, NAME, acked);
    t.deepEqual(lost, []);
    t.deepEqual(duplicated, []);
  });
}
