/**
 * `POST /collections/{c}/cluster` on three real peers, beyond what transfers.test.ts
 * covers (replicate and move under a writer, drop_replica, last active replica, a target
 * that holds a replica, the single node):
 *
 * - refusals with the reference's status and message (unknown peer as source or target,
 *   unknown shard, a target that holds the replica (move), source and target the same
 *   peer, drop_replica of a peer without the replica, abort and restart of a transfer
 *   that does not exist, malformed bodies, two operations in one body, an unknown
 *   collection), each changing nothing: every peer's view and every replica's digest are
 *   the same after them;
 * - `create_sharding_key` and `drop_sharding_key` through this route, with their refusals;
 * - per transfer method, on a shard big enough that a transfer runs for a while: while it
 *   runs, a second transfer of the shard and drop_replica of its source or target are
 *   refused; `abort_transfer` in the middle of a replicate and of a move leaves the source
 *   Active with every acknowledged point and the new replica gone (also its folder);
 *   `restart_transfer` in the middle runs it again to the end, replicas identical.
 *
 * One cluster for the file (test.serial), one collection per test.
 */

import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import test, { type ExecutionContext } from 'ava';

import { Cluster, change } from './harness';
import {
  call,
  digests,
  METHODS,
  TEST_DEADLINE_MS,
  REQUEST_DEADLINE_MS,
  Writer,
  clusterOp,
  createCollection,
  everyPeerSees,
  errorOf,
  load,
  lostAndDuplicated,
  midTransfer,
  noTransfers,
  peerIds,
  placementOf,
  range,
  sameContent,
  shardReplicas,
  transferEnd,
  view,
  waitFor,
  type Answer,
} from './transfer-support';

/**
 * Points of the shard the abort and restart tests transfer: enough that a copy lasts a
 * good while on an idle machine (about 4 s with stream_records, 3 s with snapshot, 1 s of
 * WAL replay with wal_delta), many times what an abort takes.
 */
const BIG = 60_000;

let cluster: Cluster | null = null;
let ids: string[] = [];

test.before(async () => {
  // Transfers paced (storage.performance.shard_transfer_max_mb_per_sec) so that an abort or
  // a restart asked for in the middle of a copy reaches it on a fast machine too: the
  // 60,000-point copies take about 6 s.
  cluster = await Cluster.start(3, { SERVICE__STORAGE__PERFORMANCE__SHARD_TRANSFER_MAX_MB_PER_SEC: '1' });
  ids = await peerIds(cluster);
});

test.after.always(async () => {
  await cluster?.destroy();
});

function c(): Cluster {
  return cluster!;
}

/** A request that expects a refusal (no retry), through peer `i`. */
function post(i: number, name: string, body: unknown, q = ''): Promise<Answer> {
  return call(c().peers[i].url, 'POST', `/collections/${name}/cluster${q}`, body);
}

/** Every peer's view (replicas, transfers) and every replica's digest, to compare before and after refusals. */
async function snapshot(name: string, shards: number): Promise<string> {
  const views = await Promise.all([0, 1, 2].map(async (i) => placementOf(await view(c(), i, name))));
  const d = await digests(c(), name, shards);
  return JSON.stringify({ views, digests: [...d].map(([s, m]) => [s, [...m].sort()]) });
}

function refused(t: ExecutionContext, r: Answer, status: number, error: string | RegExp, what: string): void {
  t.is(r.status, status, `${what}: ${JSON.stringify(r.body)}`);
  if (typeof error === 'string') t.is(errorOf(r), error, what);
  else t.regex(errorOf(r), error, what);
}

test.serial('refusals of POST /collections/{c}/cluster: the reference\'s status and message, nothing changes', async (t) => {
  const name = 'refusals';
  await createCollection(c(), name, { shard_number: 2, replication_factor: 2 });
  await load(c().peers[0].url, name, range(0, 300));
  const s0 = await shardReplicas(c(), 0, name, 0);
  const [a, b] = Object.keys(s0);
  const other = ids.find((p) => s0[p] === undefined)!; // the peer without a replica of shard 0
  t.truthy(a && b && other, JSON.stringify(s0));
  const before = await snapshot(name, 2);
  const NOPE = 987654321;

  // Unknown peers: the reference's 400 "Peer X does not exist", as target and as source.
  for (const op of ['move_shard', 'replicate_shard']) {
    refused(t, await post(1, name, { [op]: { shard_id: 0, from_peer_id: Number(a), to_peer_id: NOPE } }), 400, `Bad request: Peer ${NOPE} does not exist`, `${op} to an unknown peer`);
    refused(t, await post(1, name, { [op]: { shard_id: 0, from_peer_id: NOPE, to_peer_id: Number(other) } }), 400, `Bad request: Peer ${NOPE} does not exist`, `${op} from an unknown peer`);
    // Unknown shard: 400 "Shard N of C does not exist" (the reference checks the shard first).
    refused(t, await post(2, name, { [op]: { shard_id: 7, from_peer_id: Number(a), to_peer_id: Number(other) } }), 400, `Bad request: Shard 7 of ${name} does not exist`, `${op} of an unknown shard`);
    // Source and target the same peer; a source without a replica of the shard.
    refused(t, await post(0, name, { [op]: { shard_id: 0, from_peer_id: Number(a), to_peer_id: Number(a) } }), 400, /two different peers|already has a replica/, `${op} from a peer to itself`);
    refused(t, await post(0, name, { [op]: { shard_id: 0, from_peer_id: Number(other), to_peer_id: Number(a) } }), 400, /no active replica on peer|already has a replica/, `${op} from a peer without the replica`);
  }
  // A move to a peer that holds a replica already (transfers.test.ts covers replicate).
  refused(t, await post(0, name, { move_shard: { shard_id: 0, from_peer_id: Number(a), to_peer_id: Number(b) } }), 400, new RegExp(`already has a replica on peer ${b}`), 'move to a peer that holds the replica');
  // drop_replica: unknown shard, unknown peer, a peer without a replica of the shard.
  refused(t, await post(1, name, { drop_replica: { shard_id: 7, peer_id: Number(a) } }), 400, `Bad request: Shard 7 of ${name} does not exist`, 'drop_replica of an unknown shard');
  refused(t, await post(1, name, { drop_replica: { shard_id: 0, peer_id: NOPE } }), 400, `Bad request: Peer ${NOPE} does not exist`, 'drop_replica on an unknown peer');
  refused(t, await post(1, name, { drop_replica: { shard_id: 0, peer_id: Number(other) } }), 400, new RegExp(`no replica`), 'drop_replica on a peer without the replica');
  // abort_transfer and restart_transfer of a transfer that does not exist: 404.
  refused(t, await post(2, name, { abort_transfer: { shard_id: 0, from_peer_id: Number(a), to_peer_id: Number(other) } }), 404, /^Not found: /, 'abort of a transfer that does not exist');
  refused(t, await post(2, name, { restart_transfer: { shard_id: 0, from_peer_id: Number(a), to_peer_id: Number(other), method: 'stream_records' } }), 404, /^Not found: /, 'restart of a transfer that does not exist');
  // A method only resharding uses.
  refused(t, await post(0, name, { replicate_shard: { shard_id: 0, from_peer_id: Number(a), to_peer_id: Number(other), method: 'resharding_stream_records' } }), 400, /resharding/, 'replicate with the resharding method');
  // Shard keys of an auto-sharded collection.
  refused(t, await post(0, name, { create_sharding_key: { shard_key: 'k' } }), 400, 'Bad request: Shard Key cannot be created with Auto sharding method', 'create_sharding_key, auto sharding');
  refused(t, await post(0, name, { drop_sharding_key: { shard_key: 'k' } }), 400, /^Bad request: Shard Key cannot be/, 'drop_sharding_key, auto sharding');

  // Malformed bodies: 400 format errors.
  const valid = { shard_id: 0, from_peer_id: Number(a), to_peer_id: Number(other) };
  const malformed: Array<[string, unknown]> = [
    ['an empty object', {}],
    ['an array', [{ move_shard: valid }]],
    ['a string', 'move_shard'],
    ['null', null],
    ['an unknown operation', { teleport_shard: valid }],
    ['an operation that is not an object', { move_shard: null }],
    ['an operation that is a list', { replicate_shard: [valid] }],
    ['a missing from_peer_id', { move_shard: { shard_id: 0, to_peer_id: Number(other) } }],
    ['a missing shard_id', { replicate_shard: { from_peer_id: Number(a), to_peer_id: Number(other) } }],
    ['a negative shard_id', { move_shard: { ...valid, shard_id: -1 } }],
    ['a shard_id as a string', { move_shard: { ...valid, shard_id: '0' } }],
    ['a fractional peer id', { move_shard: { ...valid, to_peer_id: 1.5 } }],
    ['a peer id as a string', { replicate_shard: { ...valid, from_peer_id: a } }],
    ['an unknown method', { replicate_shard: { ...valid, method: 'teleport' } }],
    ['a method that is not a string', { move_shard: { ...valid, method: 1 } }],
    ['restart_transfer without method', { restart_transfer: valid }],
    ['abort_transfer without to_peer_id', { abort_transfer: { shard_id: 0, from_peer_id: Number(a) } }],
    ['drop_replica without peer_id', { drop_replica: { shard_id: 0 } }],
    ['drop_sharding_key without shard_key', { drop_sharding_key: {} }],
    // Two operations in one body, each valid on its own: neither happens.
    ['two operations', { replicate_shard: valid, drop_replica: { shard_id: 0, peer_id: Number(b) } }],
  ];
  for (const [what, body] of malformed) {
    const r = await post(0, name, body);
    t.is(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
    t.regex(errorOf(r), /^Format error in JSON body: /, what);
  }
  // A body that is not JSON; a bad timeout.
  const raw = await fetch(`${c().peers[1].url}/collections/${name}/cluster`, { method: 'POST', headers: { 'content-type': 'application/json', connection: 'close' }, body: '{"move_shard": {' });
  t.is(raw.status, 400);
  t.regex(String(((await raw.json()) as any).status.error), /^Format error in JSON body: /);
  refused(t, await post(1, name, { replicate_shard: valid }, '?timeout=soon'), 400, /timeout/, 'a timeout that is not a number');
  // An unknown collection: 404, before anything else.
  refused(t, await post(2, 'nowhere', { replicate_shard: valid }), 404, 'Not found: Collection `nowhere` doesn\'t exist!', 'an unknown collection');

  // Nothing changed: every peer's view of replicas and transfers, every replica's content.
  t.is(await snapshot(name, 2), before);
  t.is((await call(c().peers[0].url, 'POST', `/collections/${name}/points/count`, { exact: true })).body.result.count, 300);
});

test.serial('create_sharding_key and drop_sharding_key through POST /collections/{c}/cluster', async (t) => {
  const name = 'keyed';
  await createCollection(c(), name, { sharding_method: 'custom' });
  const keys = async (i: number) => (await call(c().peers[i].url, 'GET', `/collections/${name}/shards`)).body.result.shard_keys.map((k: { key: unknown }) => k.key);

  const made = await clusterOp(c(), 1, name, { create_sharding_key: { shard_key: 'north', shards_number: 1, replication_factor: 2, placement: [Number(ids[0]), Number(ids[2])] } });
  t.is(made.status, 200, JSON.stringify(made.body));
  t.is(made.body.result, true);
  const num = await clusterOp(c(), 2, name, { create_sharding_key: { shard_key: 7 } });
  t.is(num.status, 200, JSON.stringify(num.body));
  await waitFor('both keys on every peer', async () => (await Promise.all([0, 1, 2].map(keys))).every((k) => JSON.stringify(k) === JSON.stringify(['north', 7])));
  // The key's shard is on the two peers asked for, Active.
  await waitFor('the key\'s shard on peers 0 and 2', async () => {
    const v = await view(c(), 1, name);
    const north = v.remote_shards.filter((s) => (s as { shard_key?: unknown }).shard_key === 'north');
    return north.map((s) => `${s.peer_id}:${s.state}`).sort().join() === [`${ids[0]}:Active`, `${ids[2]}:Active`].sort().join();
  });
  // Points under a key are written and read through the peer that holds none of its replicas.
  const pts = range(0, 20).map((id) => ({ id, vector: [1, 0, 0, id], payload: { id } }));
  t.is((await call(c().peers[1].url, 'PUT', `/collections/${name}/points?wait=true`, { points: pts, shard_key: 'north' })).status, 200);
  const counted = await call(c().peers[1].url, 'POST', `/collections/${name}/points/count`, { exact: true, shard_key: 'north' });
  t.is(counted.body.result.count, 20);

  // Refusals: an existing key, an empty placement, an unknown peer, a key that does not exist; nothing changes.
  refused(t, await post(0, name, { create_sharding_key: { shard_key: 'north' } }), 400, `Bad request: Sharding key "north" already exists for collection ${name}`, 'an existing key');
  refused(t, await post(0, name, { create_sharding_key: { shard_key: 'south', placement: [] } }), 400, /placement cannot be empty/, 'an empty placement');
  refused(t, await post(0, name, { create_sharding_key: { shard_key: 'south', placement: [987654321] } }), 400, 'Bad request: Peer 987654321 does not exist', 'a placement on an unknown peer');
  refused(t, await post(0, name, { drop_sharding_key: { shard_key: 'south' } }), 400, `Bad request: Sharding key "south" does not exist for collection ${name}`, 'a key that does not exist');
  refused(t, await post(0, name, { create_sharding_key: { shard_key: 1.5 } }), 400, /^Format error in JSON body: /, 'a fractional key');
  t.deepEqual(await keys(0), ['north', 7]);

  // Drop: the key's shards go from every peer, its points with them.
  const dropped = await clusterOp(c(), 0, name, { drop_sharding_key: { shard_key: 'north' } });
  t.is(dropped.status, 200, JSON.stringify(dropped.body));
  await waitFor('the key gone from every peer', async () => (await Promise.all([0, 1, 2].map(keys))).every((k) => JSON.stringify(k) === '[7]'));
  await waitFor('no shard of the key left on any peer', async () => {
    for (let i = 0; i < 3; i++) {
      const v = await view(c(), i, name);
      if ([...v.local_shards, ...v.remote_shards].some((s) => (s as { shard_key?: unknown }).shard_key === 'north')) return false;
    }
    return true;
  });
  t.is((await call(c().peers[0].url, 'POST', `/collections/${name}/points/count`, { exact: true })).body.result.count, 0);
  refused(t, await post(1, name, { drop_sharding_key: { shard_key: 'north' } }), 400, /does not exist/, 'a key dropped already');
  t.is((await clusterOp(c(), 1, name, { drop_sharding_key: { shard_key: 7 } })).status, 200);
});

/** The shard folders of a collection on a peer's disk. */
async function shardFolders(i: number, name: string): Promise<string[]> {
  const entries = await fs.readdir(path.join(c().peers[i].dir, 'storage', 'collections', name)).catch(() => [] as string[]);
  return entries.filter((e) => /^[0-9]+$/.test(e)).sort();
}

for (const method of METHODS) {
  test.serial(`${method}: while a transfer runs a second one of the shard and drop_replica of its ends are refused; abort in the middle of a replicate and of a move, restart in the middle; no acknowledged point lost`, async (t) => {
    t.timeout(TEST_DEADLINE_MS);
    const name = `big_${method}`;
    await createCollection(c(), name, { shard_number: 1, replication_factor: 1 });
    const home = Object.keys(await shardReplicas(c(), 0, name, 0))[0];
    const h = ids.indexOf(home);
    const [x, y] = [0, 1, 2].filter((i) => i !== h);
    await load(c().peers[h].url, name, range(0, BIG));
    const baseDigest = (await digests(c(), name, 1)).get(0)!.get(home)!;
    // A writer through a peer without a replica, all along.
    const w = new Writer(t, () => c().peers[x].url, name, 1_000_000, 10, 20);

    // Replicate to x, refusals while it runs, abort in the middle.
    const rep = await clusterOp(c(), y, name, { replicate_shard: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(ids[x]), method } });
    t.is(rep.status, 200, JSON.stringify(rep.body));
    const running = await midTransfer(c(), h, name, 0, ids[x]);
    t.is(running.method, method);
    t.true(running.sync, 'a replicate keeps its source (sync)');
    t.is(running.from, Number(home));
    refused(t, await post(y, name, { replicate_shard: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(ids[y]), method } }), 400, /already being transferred/, 'a second transfer of the shard');
    refused(t, await post(y, name, { drop_replica: { shard_id: 0, peer_id: Number(ids[x]) } }), 400, /in a transfer/, 'drop_replica of the transfer\'s target');
    refused(t, await post(y, name, { drop_replica: { shard_id: 0, peer_id: Number(home) } }), 400, /in a transfer|last active replica/, 'drop_replica of the transfer\'s source');
    const abort = await clusterOp(c(), y, name, { abort_transfer: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(ids[x]) } });
    t.is(abort.status, 200, `the abort reaches the transfer while it runs: ${JSON.stringify(abort.body)}`);
    await noTransfers(c(), name);
    await everyPeerSees(c(), name, 0, { [home]: 'Active' });
    await waitFor('the aborted replica\'s folder gone', async () => (await shardFolders(x, name)).length === 0);
    refused(t, await post(y, name, { abort_transfer: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(ids[x]) } }), 404, /^Not found: /, 'an abort of the aborted transfer');

    // Move to y, abort in the middle: the source keeps its replica.
    await w.more('writes go on after the abort', 20);
    const mv = await clusterOp(c(), x, name, { move_shard: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(ids[y]), method } });
    t.is(mv.status, 200, JSON.stringify(mv.body));
    const moving = await midTransfer(c(), h, name, 0, ids[y]);
    t.false(moving.sync, 'a move drops its source at the end (not sync)');
    const abort2 = await clusterOp(c(), x, name, { abort_transfer: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(ids[y]) } });
    t.is(abort2.status, 200, `the abort reaches the move while it runs: ${JSON.stringify(abort2.body)}`);
    await noTransfers(c(), name);
    await everyPeerSees(c(), name, 0, { [home]: 'Active' });
    await waitFor('the aborted move\'s replica folder gone', async () => (await shardFolders(y, name)).length === 0);

    // Restart in the middle: the transfer runs again (with the method asked) and ends; both replicas identical.
    await w.more('writes go on after the second abort', 20);
    t.is((await clusterOp(c(), h, name, { replicate_shard: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(ids[y]), method } })).status, 200);
    await midTransfer(c(), h, name, 0, ids[y]);
    const restart = await clusterOp(c(), x, name, { restart_transfer: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(ids[y]), method } });
    t.is(restart.status, 200, `the restart reaches the transfer while it runs: ${JSON.stringify(restart.body)}`);
    // Listed again (with the method asked) on the peer that asked, which applied the restart before answering.
    const again = (await view(c(), x, name)).shard_transfers.find((tr) => String(tr.to) === ids[y]);
    t.is(again?.method, method, 'the restarted transfer is listed with the method asked');
    t.deepEqual(await transferEnd(c(), x, name, 0, ids[y]), { [home]: 'Active', [ids[y]]: 'Active' }, 'the restarted transfer ran to its end (not aborted)');
    await everyPeerSees(c(), name, 0, { [home]: 'Active', [ids[y]]: 'Active' });
    await w.more('writes go on after the restarted transfer', 20);
    await w.stop();
    t.log(w.summary());
    t.deepEqual(w.failures, [], 'no write failed: no fault was injected');

    const n = await sameContent(t, c(), name, 1);
    t.is(n.get(0), 2, 'two replicas');
    t.not((await digests(c(), name, 1)).get(0)!.get(home), baseDigest, 'the writer\'s points are in it');
    for (const i of [h, y]) {
      const { lost, duplicated } = await lostAndDuplicated(c().peers[i].url, name, [...range(0, BIG), ...w.acked]);
      t.deepEqual(lost, [], `peer ${i}: acknowledged points lost`);
      t.deepEqual(duplicated, []);
    }
    const count = await call(c().peers[x].url, 'POST', `/collections/${name}/points/count?consistency=all`, { exact: true });
    t.is(count.body.result.count, BIG + w.acked.length);
    // Left for the next tests: the collection's folders go with it.
    t.is((await change(c().peers[0].url, 'DELETE', `/collections/${name}`, undefined, REQUEST_DEADLINE_MS)).status, 200);
  });
}

test.serial('storage.performance.shard_transfer_max_mb_per_sec paces a transfer: a copy of about 4 MiB at 1 MiB/s cannot end before 2 s have passed', async (t) => {
  t.timeout(TEST_DEADLINE_MS);
  const name = 'paced';
  await createCollection(c(), name, { shard_number: 1, replication_factor: 1 });
  const home = Object.keys(await shardReplicas(c(), 0, name, 0))[0];
  const h = ids.indexOf(home);
  const to = [0, 1, 2].find((i) => i !== h)!;
  const n = 40_000; // about 100 bytes each as the source counts them (vector, payload, overhead)
  await load(c().peers[h].url, name, range(0, n));
  const t0 = Date.now();
  const rep = await clusterOp(c(), h, name, { replicate_shard: { shard_id: 0, from_peer_id: Number(home), to_peer_id: Number(ids[to]), method: 'stream_records' } });
  t.is(rep.status, 200, JSON.stringify(rep.body));
  t.deepEqual(await transferEnd(c(), h, name, 0, ids[to]), { [home]: 'Active', [ids[to]]: 'Active' });
  const ms = Date.now() - t0;
  t.log(`${n} points replicated in ${ms} ms at 1 MiB/s`);
  // ≈ 3.9 MiB: one second of it from the initial budget, the rest at the pace (≈ 2.9 s).
  t.true(ms >= 2000, `the copy was paced: ${ms} ms`);
  t.is((await change(c().peers[0].url, 'DELETE', `/collections/${name}`, undefined, REQUEST_DEADLINE_MS)).status, 200);
});
