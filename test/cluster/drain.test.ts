/**
 * Draining a peer (`POST /cluster/peer/{id}/drain`, `bin/quiver drain`) on real peers:
 * a 3-peer cluster with a collection of 4 shards and 2 replicas each, a live writer
 * (wait=true upserts) through another peer, and the drain run by the command line
 * against the drained peer itself (as the Helm chart's preStop hook does). Afterwards
 * the peer holds no replica, every shard has its 2 Active replicas on the other peers
 * with the same content, and every acknowledged point is there (count and scroll); once
 * with stream_records, once with snapshot transfers (`--method`).
 * Also: the refusal when a shard has a replica on every peer (nothing changes), an
 * unknown peer, a drain asked again (nothing left: done at once), a peer that is down
 * (Dead replicas replaced), a drain whose driving peer is killed in its middle and is
 * resumed through another peer, access, and a single node.
 */

import { execFile } from 'node:child_process';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';

import test from 'ava';

import { REPO_ROOT, startServer } from '../crash/server';
import { Cluster } from './harness';
import {
  REQUEST_DEADLINE_MS,
  TEST_DEADLINE_MS,
  Writer,
  call,
  createCollection,
  errorOf,
  load,
  lostAndDuplicated,
  peerIds,
  placementOf,
  range,
  replicasOf,
  sameContent,
  view,
  waitFor,
} from './transfer-support';

function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(REPO_ROOT, 'bin', 'quiver'), 'drain', ...args], { env: { ...process.env, ...env }, timeout: TEST_DEADLINE_MS }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as any).code === 'number' ? (err as any).code : -1, stdout, stderr });
    });
  });
}

for (const method of ['stream_records', 'snapshot'] as const) {
test.serial(`drain a peer of a 3-peer cluster under a live writer (${method}): no replica left on it, 0 acknowledged points lost`, async (t) => {
  t.timeout(TEST_DEADLINE_MS * 2);
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const ids = await peerIds(c);
  const drained = 2;
  const other = [0, 1];

  // Refused when a shard has a replica on every peer: nothing is changed.
  await createCollection(c, 'full', { shard_number: 1, replication_factor: 3 });
  await createCollection(c, 'd', { shard_number: 4, replication_factor: 2 });
  const before = placementOf(await view(c, 0, 'd'));
  const refused = await call(c.peers[0].url, 'POST', `/cluster/peer/${ids[drained]}/drain`);
  t.is(refused.status, 400, JSON.stringify(refused.body));
  t.regex(errorOf(refused), /cannot drain peer \d+, nothing was changed: shard 0 of full has a replica on every other peer/);
  t.is(placementOf(await view(c, 0, 'd')), before);
  t.is((await call(c.peers[0].url, 'GET', `/cluster/peer/${ids[drained]}/drain`)).body.result.state, 'idle');
  const byCli = await cli(['--url', c.peers[drained].url]);
  t.is(byCli.code, 1, byCli.stdout + byCli.stderr);
  t.regex(byCli.stderr, /refused: 400 .*shard 0 of full has a replica on every other peer/);
  // An unknown peer, a bad id.
  t.is((await call(c.peers[0].url, 'POST', '/cluster/peer/424242/drain')).status, 404);
  t.is((await call(c.peers[0].url, 'GET', '/cluster/peer/424242/drain')).status, 404);
  t.is((await call(c.peers[0].url, 'GET', '/cluster/peer/x1/drain')).status, 400);
  const badMethod = await call(c.peers[0].url, 'POST', `/cluster/peer/${ids[drained]}/drain?method=resharding_stream_records`);
  t.is(badMethod.status, 400);
  t.regex(errorOf(badMethod), /method: expected one of `stream_records`, `snapshot`, `wal_delta`/);
  t.is((await call(c.peers[0].url, 'DELETE', '/collections/full?wait=true')).status, 200);
  await waitFor('full is gone everywhere', async () => (await Promise.all(c.peers.map((p) => call(p.url, 'GET', '/collections/full')))).every((r) => r.status === 404));

  await load(c.peers[0].url, 'd', range(0, 4000));
  const held = [...replicasOf(await view(c, 0, 'd'))].filter(([, m]) => m.has(ids[drained])).length;
  t.true(held >= 2, `peer ${ids[drained]} holds ${held} replicas`);

  const writer = new Writer(t, () => c.peers[0].url, 'd', 1_000_000, 10);
  await writer.more('the writer writes', 30);

  // The command line against the drained peer itself, no --peer: the chart's preStop hook.
  const out = await cli(['--url', c.peers[drained].url, '--timeout', '600', '--method', method]);
  t.is(out.code, 0, out.stdout + out.stderr);
  t.regex(out.stdout, /drained: it holds no replica \(\d+ moved/);
  t.log(out.stdout.trim().split('\n').slice(-3).join('\n'));
  await writer.more('writes go on after the drain', 30);
  await writer.stop();
  t.log(writer.summary());

  const st = (await call(c.peers[drained].url, 'GET', `/cluster/peer/${ids[drained]}/drain`)).body.result;
  t.is(st.state, 'done');
  t.is(st.method, method);
  t.deepEqual(st.remaining, []);
  t.is(st.shards_moved, held);
  for (const i of [0, 1, 2]) {
    const m = replicasOf(await view(c, i, 'd'));
    t.is(m.size, 4);
    for (const [shard, reps] of m) {
      t.false(reps.has(ids[drained]), `peer ${i} sees shard ${shard} still on the drained peer`);
      t.deepEqual([...reps.keys()].sort(), other.map((k) => ids[k]).sort(), `shard ${shard} seen by peer ${i}`);
      for (const s of reps.values()) t.is(s, 'Active');
    }
  }
  // The drained peer keeps no local shard.
  t.deepEqual((await view(c, drained, 'd')).local_shards, []);
  const counts = await sameContent(t, c, 'd', 4);
  for (const n of counts.values()) t.is(n, 2);

  const acked = [...range(0, 4000), ...writer.acked];
  for (const i of other) {
    const { lost, duplicated } = await lostAndDuplicated(c.peers[i].url, 'd', acked);
    t.deepEqual(lost, [], `lost through peer ${i}`);
    t.deepEqual(duplicated, []);
    const count = await call(c.peers[i].url, 'POST', '/collections/d/points/count', { exact: true });
    t.is(count.body.result.count, acked.length);
  }

  // Asked again: nothing left, done at once (idempotent).
  const again = await call(c.peers[0].url, 'POST', `/cluster/peer/${ids[drained]}/drain?wait=true&timeout=30`);
  t.is(again.status, 200, JSON.stringify(again.body));
  t.is(again.body.result.state, 'done');
  t.is(again.body.result.shards_moved, 0);
  // The drained peer can now be removed without force.
  const removed = await call(c.peers[0].url, 'DELETE', `/cluster/peer/${ids[drained]}`, undefined, REQUEST_DEADLINE_MS);
  t.is(removed.status, 200, JSON.stringify(removed.body));
});
}

test.serial('drain a peer that is down: its Dead replicas are replaced from the active ones, then dropped', async (t) => {
  t.timeout(TEST_DEADLINE_MS);
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const ids = await peerIds(c);
  await createCollection(c, 'd', { shard_number: 4, replication_factor: 2 });
  await load(c.peers[0].url, 'd', range(0, 2000));
  const leader = await c.waitLeader();
  const down = [2, 1, 0].find((i) => i !== leader)!;
  const up = [0, 1, 2].filter((i) => i !== down);
  const held = [...replicasOf(await view(c, up[0], 'd'))].filter(([, m]) => m.has(ids[down])).map(([s]) => s);
  await c.kill(down);
  await waitFor('the replicas on the peer that is down are Dead', async () => {
    const m = replicasOf(await view(c, up[0], 'd'));
    return held.every((s) => m.get(s)?.get(ids[down]) === 'Dead');
  });
  const r = await call(c.peers[up[0]].url, 'POST', `/cluster/peer/${ids[down]}/drain?wait=true&timeout=200`, undefined, 210_000);
  t.is(r.status, 200, JSON.stringify(r.body));
  t.is(r.body.result.state, 'done', JSON.stringify(r.body.result));
  t.is(r.body.result.shards_moved, held.length);
  for (const i of up) {
    const m = replicasOf(await view(c, i, 'd'));
    for (const [shard, reps] of m) {
      t.deepEqual([...reps.keys()].sort(), up.map((k) => ids[k]).sort(), `shard ${shard} seen by peer ${i}`);
      for (const s of reps.values()) t.is(s, 'Active');
    }
  }
  await sameContent(t, c, 'd', 4);
  const { lost } = await lostAndDuplicated(c.peers[up[1]].url, 'd', range(0, 2000));
  t.deepEqual(lost, []);
});

test.serial('a drain whose driving peer dies is resumed by asking another peer: it continues from what is left', async (t) => {
  t.timeout(TEST_DEADLINE_MS);
  // Paced transfers, so the drain is seen in its middle.
  const c = await Cluster.start(3, { SERVICE__STORAGE__PERFORMANCE__SHARD_TRANSFER_MAX_MB_PER_SEC: '0.1' });
  t.teardown(() => c.destroy());
  const ids = await peerIds(c);
  await createCollection(c, 'r', { shard_number: 6, replication_factor: 1 });
  await load(c.peers[0].url, 'r', range(0, 30_000));
  const [driver, other, drained] = [0, 1, 2];
  const held = [...replicasOf(await view(c, other, 'r'))].filter(([, m]) => m.has(ids[drained])).length;
  t.true(held >= 2, `the drained peer holds ${held} shards`);
  const started = await call(c.peers[driver].url, 'POST', `/cluster/peer/${ids[drained]}/drain`);
  t.is(started.status, 200, JSON.stringify(started.body));
  t.is(started.body.result.state, 'running');
  // Asked again while it runs: the same drain, not a second one.
  const joined = await call(c.peers[driver].url, 'POST', `/cluster/peer/${ids[drained]}/drain`);
  t.is(joined.body.result.started_at, started.body.result.started_at);
  const mid = await waitFor('the drain in its middle: a transfer running', async () => {
    const st = (await call(c.peers[driver].url, 'GET', `/cluster/peer/${ids[drained]}/drain`)).body.result;
    return st.state === 'running' && st.transfers.length > 0 ? st : null;
  }, 120_000, 20);
  t.log(`killed the driving peer with ${mid.remaining.length} shards left, transfers ${JSON.stringify(mid.transfers)}`);
  await c.kill(driver);
  // Another peer knows no drain of it, and continues it from what consensus says is left.
  const resumed = await call(c.peers[other].url, 'POST', `/cluster/peer/${ids[drained]}/drain?wait=true&timeout=240`, undefined, 250_000);
  t.is(resumed.status, 200, JSON.stringify(resumed.body));
  t.is(resumed.body.result.state, 'done', JSON.stringify(resumed.body.result));
  t.true(resumed.body.result.shards_moved >= 1 && resumed.body.result.shards_moved <= mid.remaining.length);
  await c.startPeer(driver);
  await c.waitVoters(3, 120_000);
  for (const i of [0, 1, 2]) {
    await waitFor(`peer ${i} sees no replica on the drained peer`, async () => [...replicasOf(await view(c, i, 'r')).values()].every((m) => !m.has(ids[drained]) && [...m.values()].every((st) => st === 'Active')));
  }
  // Through the drained peer (it reads every shard remotely now), once its links to the restarted peer are back.
  const { lost, duplicated } = await waitFor('a scroll through the drained peer answers', () => lostAndDuplicated(c.peers[drained].url, 'r', range(0, 30_000)).catch(() => null));
  t.deepEqual(lost, []);
  t.deepEqual(duplicated, []);
});

test.serial('drain with removal (bin/quiver drain --remove against the drained peer, as the preStop hook on a scale-in): the peer leaves the cluster, every point is there', async (t) => {
  t.timeout(TEST_DEADLINE_MS);
  const c = await Cluster.start(3);
  t.teardown(() => c.destroy());
  const ids = await peerIds(c);
  await createCollection(c, 'x', { shard_number: 3, replication_factor: 2 });
  await load(c.peers[0].url, 'x', range(0, 3000));
  const drained = 2;
  const rest = [0, 1];
  const writer = new Writer(t, () => c.peers[0].url, 'x', 1_000_000, 10);
  await writer.more('the writer writes', 20);
  const out = await cli(['--url', c.peers[drained].url, '--timeout', '300', '--remove']);
  t.is(out.code, 0, out.stdout + out.stderr);
  t.regex(out.stdout, /drained: it holds no replica \(\d+ moved, [0-9.]+ s\); removed from the cluster/);
  await writer.more('writes go on after the removal', 20);
  await writer.stop();
  // The drained peer shows its drain, removal included.
  const st = (await call(c.peers[drained].url, 'GET', `/cluster/peer/${ids[drained]}/drain`)).body.result;
  t.like(st, { state: 'done', remove: true, removed: true, remaining: [] });
  for (const i of rest) {
    await waitFor(`peer ${i} no longer lists the removed peer`, async () => !Object.keys((await c.info(i)).peers).includes(ids[drained]));
    const m = replicasOf(await view(c, i, 'x'));
    for (const [shard, reps] of m) t.deepEqual([...reps.keys()].sort(), rest.map((k) => ids[k]).sort(), `shard ${shard} seen by peer ${i}`);
  }
  const acked = [...range(0, 3000), ...writer.acked];
  for (const i of rest) {
    const { lost, duplicated } = await lostAndDuplicated(c.peers[i].url, 'x', acked);
    t.deepEqual(lost, [], `lost through peer ${i}`);
    t.deepEqual(duplicated, []);
  }
  // Asked again (a retried hook): nothing to do, the answer says it was removed.
  const again = await call(c.peers[drained].url, 'POST', `/cluster/peer/${ids[drained]}/drain?remove=true&wait=true&timeout=30`);
  t.is(again.status, 200, JSON.stringify(again.body));
  t.like(again.body.result, { state: 'done', removed: true });
  // The same drain, not a second one (the drained peer's own state may still list it: it need not apply its removal).
  t.is(again.body.result.started_at, st.started_at);
  t.like((await call(c.peers[drained].url, 'GET', `/cluster/peer/${ids[drained]}/drain`)).body.result, { state: 'done', removed: true, started_at: st.started_at });
  // Through the others it is an unknown peer now.
  t.is((await call(c.peers[0].url, 'POST', `/cluster/peer/${ids[drained]}/drain?remove=true`)).status, 404);
  t.is((await call(c.peers[0].url, 'POST', `/cluster/peer/${ids[0]}/drain?remove=maybe`)).status, 400);
});

async function keyed(url: string, method: string, route: string, key: string | null): Promise<number> {
  const res = await fetch(url + route, { method, headers: key === null ? {} : { 'api-key': key } });
  await res.arrayBuffer();
  return res.status;
}

test.serial('drain on a single node: 405; access: manage for POST, read for GET; the command line says there is nothing to drain', async (t) => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-drain-'));
  const s = await startServer(dir, { SERVICE__SERVICE__API_KEY: 'mgr', SERVICE__SERVICE__READ_ONLY_API_KEY: 'ro' });
  t.teardown(async () => {
    await s.stop('SIGKILL');
    await fs.rm(dir, { recursive: true, force: true });
  });
  t.is(await keyed(s.url, 'POST', '/cluster/peer/1/drain', null), 401);
  t.is(await keyed(s.url, 'POST', '/cluster/peer/1/drain', 'ro'), 403);
  t.is(await keyed(s.url, 'POST', '/cluster/peer/1/drain', 'mgr'), 405);
  t.is(await keyed(s.url, 'GET', '/cluster/peer/1/drain', 'ro'), 405);
  t.is(await keyed(s.url, 'GET', '/cluster/peer/1/drain', null), 401);
  const out = await cli(['--url', s.url, '--api-key', 'mgr']);
  t.is(out.code, 1);
  t.regex(out.stderr, /not part of a cluster/);
  // The key comes from the pod's environment when not given.
  const fromEnv = await cli(['--url', s.url], { SERVICE__SERVICE__API_KEY: 'mgr' });
  t.regex(fromEnv.stderr, /not part of a cluster/);
  const noKey = await cli(['--url', s.url], { SERVICE__SERVICE__API_KEY: '', QUIVER_API_KEY: '' });
  t.regex(noKey.stderr, /GET \/cluster: 401/);
  const usage = await cli(['--peer', 'abc']);
  t.is(usage.code, 2);
  t.regex(usage.stderr, /--peer expects a peer id/);
});
