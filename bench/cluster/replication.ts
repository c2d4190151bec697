/**
 * The replicated data path against a single node, in one run (section `replication` of
 * npm run bench:cluster):
 *
 *  - upsert points/s (batches as bench/rest: 1000 points, wait=true, `writers` requests
 *    in flight) into collections with replication_factor 1, 2 and 3 on one 3-peer
 *    cluster (shard_number 3; request i goes through peer i % 3) and into a single node
 *    (one process, cluster mode off) with 1 and with 3 shards (the latter separates the
 *    cost of sharding from the cost of the network). The points are upserted in `rounds`
 *    chunks; each round upserts its chunk into every configuration, in an order rotated
 *    every round, so drift in the machine's load hits all alike. Twice: first into
 *    collections that never build an HNSW index (indexing_threshold 0: the write path
 *    alone, no background index build competing for the cores), then into the
 *    collections queried afterwards (the server's default threshold: index builds run
 *    in the background meanwhile, as a client sees it), waiting between rounds until
 *    every collection is green on every peer.
 *  - query QPS at `concurrency` requests in flight (POST /points/query, limit 10,
 *    hnsw_ef `ef`), through one peer and spread over the three, against the single
 *    node, with recall@10 against the exact ground truth; passes interleaved (rep ->
 *    configuration, rotated), best and median of `reps`.
 *  - the cost of `consistency=all` against the default on query and retrieve (10 ids),
 *    spread over the peers, interleaved the same way; then a probe of whether a
 *    `consistency=all` read waits for every replica (one peer stopped with SIGSTOP).
 */

import { Cluster, api, change, waitFor } from '../../test/cluster/harness';
import { recallAtK } from '../engine/groundtruth';
import { coresAvailable } from '../engine/measure';
import { RawClient, runConcurrent } from '../rest/client';
import { QuiverServer } from '../rest/server';
import { Rng, cpuOf, median, round, stats } from './common';
import { loadData, queryBodies, upsertBodies } from './data';

export interface ReplicationOptions {
  points: number;
  queries: number;
  ef: number;
  batch: number;
  writers: number;
  rounds: number;
  reps: number;
  warmup: number;
  concurrency: number;
  rfs: number[];
  shards: number;
  settle: boolean;
  dataDir: string;
}

interface UpsertRow {
  config: string;
  points: number;
  seconds: number;
  pointsPerSec: number;
  roundsPointsPerSec: number[];
  p50Ms: number;
  p99Ms: number;
  serverCpuSec: number;
  serverCpuMsPer1000: number;
}

interface PassRow {
  config: string;
  kind: string;
  via: string;
  qps: number;
  medianQps: number;
  passes: number[];
  p50Ms: number;
  p99Ms: number;
  recall: number | null;
  serverCpuUsPerRequest: number;
  failures: number;
}

export interface ReplicationResult {
  params: ReplicationOptions & { dim: number; distance: string; collection: Record<string, unknown> };
  machine: { cores: number; loadStart: number[]; loadEnd: number[]; coresAvailableStart: number; coresAvailableEnd: number };
  /** Into collections with indexing_threshold 0 (no HNSW build): the write path alone. */
  upsertsNoIndex: UpsertRow[];
  /** Into the queried collections (default indexing threshold: index builds run meanwhile). */
  upserts: UpsertRow[];
  settleSeconds: number[];
  queries: PassRow[];
  consistency: PassRow[];
  consistencyAllProbe: Array<{ collection: string; via: string; stopped: string; consistency: string; status: number | string; ms: number }>;
  notes: string[];
}

interface Target {
  name: string;
  collection: string;
  clients: RawClient[];
  pids: () => number[];
  urls: string[];
}

const loadavg = async (): Promise<number[]> => (await import('node:os')).loadavg().map((x) => round(x, 2));

async function expectOk(r: { status: number; body: Buffer }, what: string): Promise<unknown> {
  const text = r.body.toString('utf8');
  if (r.status !== 200) throw new Error(`${what}: HTTP ${r.status} ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

/** Waits until GET /collections/{c} says green on every url. */
async function waitGreen(urls: string[], collection: string): Promise<void> {
  await waitFor(
    `${collection} green on every peer`,
    async () => {
      for (const u of urls) {
        const r = await api(u, 'GET', `/collections/${collection}`);
        if (r.status !== 200 || r.body.result.status !== 'green') return false;
      }
      return true;
    },
    3_600_000,
    200,
  );
}

export async function replication(o: ReplicationOptions): Promise<ReplicationResult> {
  const notes: string[] = [];
  const machine = { cores: (await import('node:os')).cpus().length, loadStart: await loadavg(), loadEnd: [] as number[], coresAvailableStart: round(await coresAvailable()), coresAvailableEnd: 0 };
  console.log(`replication: ${o.points} points x 128-d, RF ${o.rfs.join(',')} on 3 peers (shard_number ${o.shards}) vs a single node; load ${machine.loadStart.join(' ')}, cores available ≈ ${machine.coresAvailableStart}`);
  const { ds, space, gt } = await loadData(o.points, o.queries, o.dataDir, true);
  const collection = { vectors: { size: ds.dim, distance: 'Cosine' }, hnsw_config: { m: 16, ef_construct: 100 } };

  // Both sides log at INFO (the cluster harness waits for the INFO line "REST API listening"):
  // one log line per request on either side.
  const single = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: { SERVICE__LOG_LEVEL: 'INFO' } });
  const onExit = () => single.killNow();
  process.once('exit', onExit);
  const cluster = await Cluster.start(3, { SERVICE__TELEMETRY_DISABLED: 'true' });
  try {
    const peerUrls = cluster.peers.map((p) => p.url);
    const peerClients = peerUrls.map((u) => new RawClient(u));
    const singleClient = new RawClient(single.url);
    const pidsOfPeers = () => cluster.running().map((p) => p.server!.pid);
    /** The configurations, each a collection named `<prefix><name>`, created with `extra` on top of `collection`. */
    const makeTargets = async (prefix: string, extra: Record<string, unknown>): Promise<Target[]> => {
      const out: Target[] = [];
      for (const shards of [1, o.shards]) {
        const name = `${prefix}single${shards}`;
        const r = await api(single.url, 'PUT', `/collections/${name}`, { ...collection, ...extra, shard_number: shards });
        if (r.status !== 200) throw new Error(`create ${name} on the single node: ${r.status} ${JSON.stringify(r.body)}`);
        out.push({ name: shards === 1 ? 'single node' : `single node, ${shards} shards`, collection: name, clients: [singleClient], pids: () => [single.pid], urls: [single.url] });
      }
      for (const rf of o.rfs) {
        const name = `${prefix}rf${rf}`;
        const r = await change(peerUrls[0], 'PUT', `/collections/${name}`, { ...collection, ...extra, shard_number: o.shards, replication_factor: rf });
        if (r.status !== 200) throw new Error(`create ${name}: ${r.status} ${JSON.stringify(r.body)}`);
        await waitFor(`${name} on every peer`, async () => (await Promise.all(peerUrls.map((u) => api(u, 'GET', `/collections/${name}`)))).every((x) => x.status === 200));
        out.push({ name: `RF ${rf}`, collection: name, clients: peerClients, pids: pidsOfPeers, urls: peerUrls });
      }
      return out;
    };

    // -- upserts ------------------------------------------------------------------------------
    const bodies = upsertBodies(ds, 0, o.points, o.batch);
    const settleSeconds: number[] = [];
    /** Upserts every body into every target in `o.rounds` interleaved rounds; `settle`: wait for green on every peer after each round. */
    const upsertRounds = async (targets: Target[], settle: boolean): Promise<UpsertRow[]> => {
      const perRound = Math.ceil(bodies.length / o.rounds);
      const acc = new Map<string, { seconds: number; points: number; cpu: number; lat: number[]; rounds: number[] }>();
      for (const t of targets) acc.set(t.name, { seconds: 0, points: 0, cpu: 0, lat: [], rounds: [] });
      for (let round_ = 0; round_ < o.rounds; round_++) {
        const chunk = bodies.slice(round_ * perRound, (round_ + 1) * perRound);
        if (chunk.length === 0) break;
        const pts = Math.min(o.points, (round_ + 1) * perRound * o.batch) - round_ * perRound * o.batch;
        const order = targets.map((_, i) => targets[(i + round_) % targets.length]);
        const line: string[] = [];
        for (const t of order) {
          const path = `/collections/${t.collection}/points?wait=true`;
          const cpu0 = cpuOf(t.pids());
          const run = await runConcurrent(chunk.length, o.writers, async (i) => {
            // Request i goes through peer i % 3: the writers' requests are spread over the peers.
            const client = t.clients[i % t.clients.length];
            const r = await client.request('PUT', path, chunk[i]);
            const body = (await expectOk(r, `upsert into ${t.collection}`)) as { result: { status: string } };
            if (body.result.status !== 'completed') throw new Error(`upsert with wait=true answered ${body.result.status}`);
          });
          const a = acc.get(t.name)!;
          a.seconds += run.seconds;
          a.points += pts;
          a.cpu += cpuOf(t.pids()) - cpu0;
          a.lat.push(...Array.from(run.latUs, (x) => x / 1000));
          a.rounds.push(Math.round(pts / run.seconds));
          line.push(`${t.name} ${Math.round(pts / run.seconds)}`);
        }
        console.log(`    round ${round_ + 1}: points/s ${line.join(', ')}`);
        if (settle) {
          const s0 = Date.now();
          for (const t of targets) await waitGreen(t.urls, t.collection);
          settleSeconds.push(round((Date.now() - s0) / 1000, 1));
        }
      }
      for (const t of targets) {
        for (const u of t.urls) {
          const r = await api(u, 'POST', `/collections/${t.collection}/points/count`, { exact: true });
          if (r.status !== 200 || r.body.result.count !== o.points) throw new Error(`${t.collection} through ${u}: count ${JSON.stringify(r.body)} after upserting ${o.points}`);
        }
      }
      return targets.map((t) => {
        const a = acc.get(t.name)!;
        const lat = [...a.lat].sort((x, y) => x - y);
        const row: UpsertRow = {
          config: t.name,
          points: a.points,
          seconds: round(a.seconds),
          pointsPerSec: Math.round(a.points / a.seconds),
          roundsPointsPerSec: a.rounds,
          p50Ms: round(lat[Math.floor(lat.length * 0.5)] ?? NaN, 1),
          p99Ms: round(lat[Math.min(lat.length - 1, Math.floor(lat.length * 0.99))] ?? NaN, 1),
          serverCpuSec: round(a.cpu, 1),
          serverCpuMsPer1000: round((a.cpu * 1e6) / a.points, 0),
        };
        console.log(`    ${row.config}: ${row.pointsPerSec} points/s (rounds ${row.roundsPointsPerSec.join(', ')}), p50 ${row.p50Ms} ms, p99 ${row.p99Ms} ms, server CPU ${row.serverCpuMsPer1000} ms per 1000 points`);
        return row;
      });
    };

    // The write path alone: collections that never build an HNSW index (indexing_threshold 0),
    // so no background indexing competes with the timed windows; deleted afterwards.
    console.log(`  upsert, no indexing: ${bodies.length} requests of ${o.batch} points in ${o.rounds} rounds, ${o.writers} writers, wait=true`);
    const writeTargets = await makeTargets('w_', { optimizers_config: { indexing_threshold: 0 } });
    // Warm-up (untimed): the first batches into each, so V8 has compiled every request path
    // before the first timed round (these ids are written again, timed, in round 1).
    const warm = bodies.slice(0, Math.min(10, bodies.length));
    for (const t of writeTargets) {
      await runConcurrent(warm.length, o.writers, async (i) => {
        await expectOk(await t.clients[i % t.clients.length].request('PUT', `/collections/${t.collection}/points?wait=true`, warm[i]), `warm-up upsert into ${t.collection}`);
      });
    }
    const upsertsNoIndex = await upsertRounds(writeTargets, false);
    for (const t of writeTargets) {
      const r = t.urls.length === 1 ? await api(single.url, 'DELETE', `/collections/${t.collection}`) : await change(peerUrls[0], 'DELETE', `/collections/${t.collection}`);
      if (r.status !== 200) throw new Error(`delete ${t.collection}: ${r.status} ${JSON.stringify(r.body)}`);
    }
    // As a client sees it: the server's default indexing threshold (the HNSW index is built
    // in the background while points arrive); these collections are queried afterwards.
    console.log(`  upsert, default indexing: the same, into the collections queried afterwards${o.settle ? ' (waiting for green on every peer after each round)' : ''}`);
    const targets = await makeTargets('', {});
    const upserts = await upsertRounds(targets, o.settle);
    if (!o.settle) {
      const s0 = Date.now();
      for (const t of targets) await waitGreen(t.urls, t.collection);
      settleSeconds.push(round((Date.now() - s0) / 1000, 1));
    }

    // -- queries ------------------------------------------------------------------------------
    const qBodies = queryBodies(ds, o.ef);
    type Mode = { config: string; kind: string; via: string; path: string; bodies: Buffer[]; clients: RawClient[]; pids: () => number[]; recall: boolean };
    const queryModes: Mode[] = [];
    for (const t of targets) {
      const path = `/collections/${t.collection}/points/query`;
      if (t.clients.length === 1) queryModes.push({ config: t.name, kind: 'query', via: 'its one process', path, bodies: qBodies, clients: t.clients, pids: t.pids, recall: true });
      else {
        queryModes.push({ config: t.name, kind: 'query', via: 'peer 0', path, bodies: qBodies, clients: [t.clients[0]], pids: t.pids, recall: true });
        queryModes.push({ config: t.name, kind: 'query', via: 'spread over 3 peers', path, bodies: qBodies, clients: t.clients, pids: t.pids, recall: true });
      }
    }
    const queries = await interleaved(queryModes, o, space, gt);

    // -- consistency=all against the default ---------------------------------------------------
    const rng = new Rng(7);
    const retrieveBodies = Array.from({ length: o.queries }, () => Buffer.from(JSON.stringify({ ids: Array.from({ length: 10 }, () => rng.int(0, o.points - 1)), with_payload: true })));
    const cModes: Mode[] = [];
    for (const t of targets.filter((x) => x.clients.length > 1)) {
      for (const [kind, route, b] of [
        ['query', 'points/query', qBodies],
        ['retrieve', 'points', retrieveBodies],
      ] as const) {
        cModes.push({ config: t.name, kind: `${kind}`, via: 'default', path: `/collections/${t.collection}/${route}`, bodies: b, clients: t.clients, pids: t.pids, recall: kind === 'query' });
        cModes.push({ config: t.name, kind: `${kind}`, via: 'consistency=all', path: `/collections/${t.collection}/${route}?consistency=all`, bodies: b, clients: t.clients, pids: t.pids, recall: kind === 'query' });
      }
    }
    const consistency = await interleaved(cModes, o, space, gt);

    // -- does consistency=all wait for every replica? ------------------------------------------
    // With RF 3, peer 0 holds a replica of every shard: a default read never leaves it.
    // A read that asks every replica cannot be answered while another peer is stopped.
    const probe: ReplicationResult['consistencyAllProbe'] = [];
    const top = targets[targets.length - 1];
    if (o.rfs.includes(3)) {
      cluster.signal(2, 'SIGSTOP');
      try {
        for (const consistency of ['all', '3']) {
          const t0 = Date.now();
          const r = await api(peerUrls[0], 'POST', `/collections/${top.collection}/points/query?consistency=${consistency}&timeout=2`, JSON.parse(qBodies[0].toString()), 5000).catch((e: Error) => ({ status: `error: ${e.message}`, body: null }));
          probe.push({ collection: top.collection, via: 'peer 0', stopped: 'peer 2 (SIGSTOP)', consistency, status: r.status, ms: Date.now() - t0 });
        }
      } finally {
        cluster.signal(2, 'SIGCONT');
      }
      for (const p of probe) console.log(`  probe: query ${p.collection} through ${p.via} with consistency=${p.consistency} while ${p.stopped}: ${p.status} in ${p.ms} ms`);
      if (probe.some((p) => p.status === 200 && p.ms < 1000)) {
        notes.push(
          'A `consistency=all` (or `=3`) read with RF 3 through peer 0 answered 200 within milliseconds while peer 2 was stopped (SIGSTOP): the read did not ask every replica. ' +
            'Read consistency is parsed (ts/api/rest/parse.ts) but ReplicaSet.read (ts/collection/replica-set.ts) asks one replica whatever `consistency` says, so the consistency rows measure the default read path twice.',
        );
      }
    }

    machine.loadEnd = await loadavg();
    machine.coresAvailableEnd = round(await coresAvailable());
    for (const c of [singleClient, ...peerClients]) c.close();
    return {
      params: { ...o, dim: ds.dim, distance: ds.distance, collection },
      machine,
      upsertsNoIndex,
      upserts,
      settleSeconds,
      queries,
      consistency,
      consistencyAllProbe: probe,
      notes,
    };
  } finally {
    await single.stop(10_000).catch(() => undefined);
    process.off('exit', onExit);
    await cluster.destroy();
  }

  /** Passes of every mode, interleaved (rep -> mode, the order rotated each rep), after `warmup` untimed passes of each. */
  async function interleaved(
    modes: Array<{ config: string; kind: string; via: string; path: string; bodies: Buffer[]; clients: RawClient[]; pids: () => number[]; recall: boolean }>,
    opts: ReplicationOptions,
    sp: typeof space,
    truth: typeof gt,
  ): Promise<PassRow[]> {
    const n = opts.queries;
    const runPass = async (m: (typeof modes)[number]) => {
      const ids: number[][] = new Array(n);
      let failures = 0;
      const cpu0 = cpuOf(m.pids());
      const t = await runConcurrent(n, opts.concurrency, async (i) => {
        const client = m.clients[i % m.clients.length];
        const r = await client.request('POST', m.path, m.bodies[i]);
        if (r.status !== 200) {
          failures++;
          if (failures === 1) console.log(`    ${m.config} ${m.kind} ${m.via}: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 200)}`);
          return;
        }
        if (m.recall) ids[i] = (JSON.parse(r.body.toString('utf8')) as { result: { points: Array<{ id: number }> } }).result.points.map((p) => p.id);
      });
      return { qps: n / t.seconds, lat: Array.from(t.latUs, (x) => x / 1000).sort((a, b) => a - b), ids, failures, cpu: cpuOf(m.pids()) - cpu0 };
    };
    for (let w = 0; w < opts.warmup; w++) for (const m of modes) await runPass(m);
    const passes = new Map<(typeof modes)[number], Array<Awaited<ReturnType<typeof runPass>>>>();
    for (let rep = 0; rep < opts.reps; rep++) {
      for (let k = 0; k < modes.length; k++) {
        const m = modes[(k + rep) % modes.length];
        const p = await runPass(m);
        passes.set(m, [...(passes.get(m) ?? []), p]);
      }
    }
    const rows = modes.map((m) => {
      const ps = passes.get(m)!;
      const best = ps.reduce((a, b) => (b.qps > a.qps ? b : a));
      const failures = ps.reduce((s, p) => s + p.failures, 0);
      const row: PassRow = {
        config: m.config,
        kind: m.kind,
        via: m.via,
        qps: Math.round(best.qps),
        medianQps: Math.round(median(ps.map((p) => p.qps))),
        passes: ps.map((p) => Math.round(p.qps)),
        p50Ms: round(best.lat[Math.floor(best.lat.length * 0.5)], 2),
        p99Ms: round(best.lat[Math.min(best.lat.length - 1, Math.floor(best.lat.length * 0.99))], 2),
        recall: m.recall && truth && failures === 0 ? round(recallAtK(sp, truth, best.ids, 10), 4) : null,
        serverCpuUsPerRequest: Math.round((stats(ps.map((p) => p.cpu)).median * 1e6) / n),
        failures,
      };
      console.log(`    ${row.config} ${row.kind} ${row.via}: ${row.qps} QPS best (median ${row.medianQps}; passes ${row.passes.join(', ')}), p50 ${row.p50Ms} ms, p99 ${row.p99Ms} ms${row.recall === null ? '' : `, recall@10 ${row.recall}`}, server CPU ${row.serverCpuUsPerRequest} µs/request${failures ? `, ${failures} failed` : ''}`);
      return row;
    });
    return rows;
  }
}
