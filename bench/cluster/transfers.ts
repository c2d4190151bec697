/**
 * Shard transfers on real peers (sections `transfers`, `delta` and `moves` of
 * npm run bench:cluster):
 *
 * - `transfers`: throughput of each transfer method. 3 peers, one collection of
 *   `points` (1,000,000) x `dim` (128) points with a small payload, shard_number 1,
 *   replication_factor 1, `indexing_threshold: 0` (no HNSW graph is built: the figures
 *   are the transfer's, not an index build's); the shard is moved from peer to peer
 *   (`move_shard` with each method in turn, `reps` rounds, the order rotated every
 *   round). Timed from the request to the moment the target's replica is Active and no
 *   transfer is listed; points/s and MiB/s (vector bytes + payload JSON bytes / wall
 *   seconds). The moved replica's digest must equal the digest before the move.
 * - `delta`: the time to bring back a replica that missed `writes` (10,000) writes,
 *   per `storage.shard_transfer_method` (every peer started with it): 3 peers, one shard
 *   of `points` (500,000) with replication_factor 2; a peer holding a replica (not the
 *   leader) is killed (SIGKILL) or stopped (SIGSTOP); the writes go through the two
 *   others (batches of 100, wait=true); then it is started again (continued); timed
 *   from then until its replica is Active on every peer and until the replicas'
 *   digests agree. The methods alternate trial by trial.
 * - `moves`: every shard of a `points`-point collection (replication_factor 2,
 *   shard_number 3, 3 peers) is moved to the peer that lacks it, once per method, while
 *   a writer upserts continuously (wait=true: fresh ids and overwrites of existing ones
 *   with a new payload value). After each move the writer pauses (its requests in
 *   flight end) and the shard's replicas must have equal digests and the exact count
 *   must match what was acknowledged; after each method's round every point is scrolled:
 *   acknowledged points missing (lost), ids returned twice (duplicated), ids not holding
 *   their last acknowledged value, and the sum of the shards' point counts.
 */

import { Cluster, api, change, sleep, waitFor } from '../../test/cluster/harness';
import { RawClient, runConcurrent } from '../rest/client';
import { Rng, cpuOf, digests, divergent, median, round } from './common';

// -- data -----------------------------------------------------------------------------------

/** The vector of point `id` (seeded by the id: any point can be written again with the same vector). */
function vectorOf(id: number, dim: number, salt = 0): number[] {
  const r = new Rng((id * 2654435761 + salt * 97) >>> 0);
  const v = new Array<number>(dim);
  for (let k = 0; k < dim; k++) v[k] = Math.round((r.float() * 2 - 1) * 1e4) / 1e4;
  return v;
}

function payloadOf(id: number, v: number | null = null): Record<string, unknown> {
  return v === null ? { i: id, tag: `t${id % 100}` } : { i: id, tag: `t${id % 100}`, v };
}

/** Bytes of the payloads of ids [0, n) as JSON (what the throughput counts beside the vectors). */
function payloadBytes(n: number): number {
  let b = 0;
  for (let id = 0; id < n; id++) b += JSON.stringify(payloadOf(id)).length;
  return b;
}

export function body(ids: readonly number[], dim: number, values: ReadonlyMap<number, number> | null = null, salt = 0): Buffer {
  const parts = ids.map((id) => JSON.stringify({ id, vector: vectorOf(id, dim, salt), payload: payloadOf(id, values?.get(id) ?? null) }));
  return Buffer.from(`{"points":[${parts.join(',')}]}`);
}

/** Upserts ids [0, n) in batches of 1000 (wait=true), 3 in flight, through the peers in turn. */
export async function load(c: Cluster, name: string, n: number, dim: number): Promise<number> {
  const clients = c.peers.map((p) => new RawClient(p.url));
  const batches = Math.ceil(n / 1000);
  let retried = 0;
  try {
    const t = await runConcurrent(batches, 3, async (i) => {
      const ids = Array.from({ length: Math.min(1000, n - i * 1000) }, (_, k) => i * 1000 + k);
      const b = body(ids, dim);
      // An upsert is idempotent: a batch refused (a peer starved of CPU missed its health checks) is sent again.
      for (let attempt = 0; ; attempt++) {
        const r = await clients[(i + attempt) % clients.length].request('PUT', `/collections/${name}/points?wait=true`, b).catch((e: Error) => ({ status: 0, body: Buffer.from(e.message) }));
        if (r.status === 200) break;
        if (attempt >= 20) throw new Error(`load: ${r.status} ${r.body.toString().slice(0, 300)}`);
        retried++;
        await sleep(500);
      }
      if ((i + 1) % 100 === 0) process.stdout.write(`  loaded ${Math.min(n, (i + 1) * 1000)} points\r`);
    });
    console.log(`  loaded ${n} points in ${round(t.seconds, 1)} s (${Math.round(n / t.seconds)} points/s${retried ? `, ${retried} batches sent again` : ''})`);
    return t.seconds;
  } finally {
    for (const cl of clients) cl.close();
  }
}

// -- cluster views ----------------------------------------------------------------------------

export interface TransferShown {
  shard_id: number;
  from: number;
  to: number;
  sync: boolean;
  method: string;
  comment?: string;
}

interface View {
  peer: string;
  /** shard → peer id → state */
  replicas: Map<number, Map<string, string>>;
  /** shard → points of this peer's replica */
  localPoints: Map<number, number>;
  transfers: TransferShown[];
}

export async function viewOf(url: string, name: string, timeoutMs = 5000): Promise<View> {
  const r = await api(url, 'GET', `/collections/${name}/cluster`, undefined, timeoutMs);
  if (r.status !== 200) throw new Error(`GET /collections/${name}/cluster: ${r.status} ${JSON.stringify(r.body)}`);
  const v = r.body.result;
  const replicas = new Map<number, Map<string, string>>();
  const localPoints = new Map<number, number>();
  const put = (shard: number, peer: string, state: string) => {
    if (!replicas.has(shard)) replicas.set(shard, new Map());
    replicas.get(shard)!.set(peer, state);
  };
  for (const s of v.local_shards) {
    put(s.shard_id, String(v.peer_id), s.state);
    localPoints.set(s.shard_id, s.points_count);
  }
  for (const s of v.remote_shards) put(s.shard_id, String(s.peer_id), s.state);
  return { peer: String(v.peer_id), replicas, localPoints, transfers: v.shard_transfers ?? [] };
}

export async function peerIds(c: Cluster): Promise<string[]> {
  return Promise.all(c.peers.map(async (p) => String((await c.info(p.index)).peer_id)));
}

/** Creates the collection and waits until every peer has it. */
export async function createCollection(c: Cluster, name: string, body: Record<string, unknown>): Promise<void> {
  const r = await change(c.peers[0].url, 'PUT', `/collections/${name}?timeout=60`, body, 70_000);
  if (r.status !== 200) throw new Error(`create ${name}: ${r.status} ${JSON.stringify(r.body)}`);
  await waitFor(`${name} on every peer`, async () => (await Promise.all(c.running().map((p) => api(p.url, 'GET', `/collections/${name}`)))).every((x) => x.status === 200), 60_000);
}

/** Whether every running peer sees every replica Active and no transfer. */
async function settled(c: Cluster, name: string): Promise<boolean> {
  const views = await Promise.all(c.running().map((p) => viewOf(p.url, name, 3000).catch(() => null)));
  return views.every((v) => v !== null && v.transfers.length === 0 && [...v.replicas.values()].every((m) => [...m.values()].every((s) => s === 'Active')));
}

async function shardDigest(url: string, name: string, shard: number): Promise<{ points: number; digest: string }> {
  const r = await api(url, 'GET', `/collections/${name}/shards/${shard}/digest`, undefined, 120_000);
  if (r.status !== 200) throw new Error(`digest of shard ${shard} through ${url}: ${r.status} ${JSON.stringify(r.body)}`);
  return { points: r.body.result.points_count, digest: r.body.result.digest };
}

/**
 * Moves `shard` from peer index `from` to `to` (`move_shard` naming `method`) and waits
 * until every peer sees it moved: `to` Active, `from` without it, no transfer listed.
 * A move the cluster aborts (the source's view lists no transfer and `to` holds no
 * replica) is asked again, up to 5 times; the reasons (the source's log line) are kept.
 * Times are of the last, successful, attempt.
 */
async function moveShard(
  c: Cluster,
  name: string,
  ids: readonly string[],
  shard: number,
  from: number,
  to: number,
  method: string,
): Promise<{ ms: number; acceptedMs: number; shown: string[]; aborts: string[] }> {
  const aborts: string[] = [];
  for (let attempt = 0; ; attempt++) {
    // Nothing else moving this shard (a recovery, an earlier attempt's end) before asking.
    await waitFor(`no transfer of shard ${shard}`, async () => !(await viewOf(c.peers[from].url, name, 3000)).transfers.some((t) => t.shard_id === shard), 600_000, 100);
    const shown = new Set<string>();
    const t0 = Date.now();
    const logged = c.peers[from].server!.logLines().length;
    const r = await change(c.peers[from].url, 'POST', `/collections/${name}/cluster?timeout=60`, { move_shard: { shard_id: shard, from_peer_id: Number(ids[from]), to_peer_id: Number(ids[to]), method } }, 70_000);
    if (r.status !== 200) throw new Error(`move_shard (${method}) of shard ${shard}: ${r.status} ${JSON.stringify(r.body)}`);
    const acceptedMs = Date.now() - t0;
    const outcome = await waitFor(
      `shard ${shard} moved to peer ${to} (${method})`,
      async () => {
        const views = await Promise.all(c.peers.map((p) => viewOf(p.url, name, 5000)));
        for (const x of views) for (const t of x.transfers) shown.add(t.method);
        const src = views[from].replicas.get(shard)!;
        if (!views[from].transfers.some((t) => t.shard_id === shard) && !src.has(ids[to])) return 'aborted';
        const moved = views.every((x) => {
          const reps = x.replicas.get(shard)!;
          return !x.transfers.some((t) => t.shard_id === shard) && reps.get(ids[to]) === 'Active' && !reps.has(ids[from]) && [...reps.values()].every((st) => st === 'Active');
        });
        return moved ? 'moved' : null;
      },
      1_800_000,
      100,
    );
    if (outcome === 'moved') return { ms: Date.now() - t0, acceptedMs, shown: [...shown].sort(), aborts };
    const why = c.peers[from]
      .server!.logLines()
      .slice(logged)
      .filter((l) => /shard transfer failed|abort/i.test(String(l.msg)))
      .map((l) => `${l.msg}: ${JSON.stringify((l.err as { message?: string } | undefined)?.message ?? l.err ?? '')}`.slice(0, 300));
    aborts.push(`attempt ${attempt + 1} aborted after ${Date.now() - t0} ms${why.length ? `: ${why.join(' | ')}` : ' (no reason logged by the source)'}`);
    console.log(`  move of shard ${shard} (${method}) ${aborts.at(-1)}; asking again`);
    if (attempt >= 4) throw new Error(`move_shard (${method}) of shard ${shard} aborted 5 times: ${aborts.join('; ')}`);
  }
}

const METHODS = ['stream_records', 'snapshot', 'wal_delta'] as const;

// -- 1. throughput per method -------------------------------------------------------------------

export interface ThroughputOptions {
  points: number;
  dim: number;
  methods: string[];
  reps: number;
}

export interface ThroughputRow {
  method: string;
  rep: number;
  from: string;
  to: string;
  /** Methods `GET /collections/{c}/cluster` listed while the transfer ran. */
  shownMethods: string[];
  /** Attempts the cluster aborted before this one (asked again). */
  aborts: string[];
  /** Request sent → the target's replica Active and no transfer listed (ms). */
  ms: number;
  /** Request sent → the answer (the transfer started in consensus) (ms). */
  acceptedMs: number;
  pointsPerSec: number;
  mibPerSec: number;
  cpuSourceSec: number;
  cpuTargetSec: number;
  digestKept: boolean;
}

export interface ThroughputResult {
  params: ThroughputOptions & { vectorBytes: number; payloadBytes: number; loadSeconds: number };
  rows: ThroughputRow[];
  summary: Array<{ method: string; n: number; medianMs: number; pointsPerSec: number; mibPerSec: number; shownMethods: string[] }>;
}

export async function transferThroughput(o: ThroughputOptions): Promise<ThroughputResult> {
  console.log(`transfers: ${o.points} x ${o.dim}-d, shard_number 1, RF 1, 3 peers; methods ${o.methods.join(', ')}, ${o.reps} rounds`);
  const c = await Cluster.start(3, { SERVICE__TELEMETRY_DISABLED: 'true' });
  const name = 'xfer';
  const rows: ThroughputRow[] = [];
  try {
    await createCollection(c, name, { vectors: { size: o.dim, distance: 'Cosine' }, shard_number: 1, replication_factor: 1, optimizers_config: { indexing_threshold: 0 } });
    const loadSeconds = await load(c, name, o.points, o.dim);
    const ids = await peerIds(c);
    const vectorBytes = o.points * o.dim * 4;
    const pBytes = payloadBytes(o.points);
    let holder = ids.indexOf([...(await viewOf(c.peers[0].url, name)).replicas.get(0)!.keys()][0]);
    const before = await shardDigest(c.peers[holder].url, name, 0);
    if (before.points !== o.points) throw new Error(`the shard holds ${before.points} points, expected ${o.points}`);
    for (let rep = 0; rep < o.reps; rep++) {
      const order = o.methods.map((_, k) => o.methods[(k + rep) % o.methods.length]);
      for (const method of order) {
        const to = (holder + 1) % 3;
        const pids = [c.peers[holder].server!.pid, c.peers[to].server!.pid];
        const cpu0 = pids.map((p) => cpuOf([p]));
        const { ms, acceptedMs, shown, aborts } = await moveShard(c, name, ids, 0, holder, to, method);
        const cpu = pids.map((p, k) => round(cpuOf([p]) - cpu0[k], 1));
        const after = await shardDigest(c.peers[to].url, name, 0);
        const row: ThroughputRow = {
          method,
          rep,
          from: ids[holder],
          to: ids[to],
          shownMethods: shown,
          aborts,
          ms,
          acceptedMs,
          pointsPerSec: Math.round(o.points / (ms / 1000)),
          mibPerSec: round((vectorBytes + pBytes) / 2 ** 20 / (ms / 1000), 1),
          cpuSourceSec: cpu[0],
          cpuTargetSec: cpu[1],
          digestKept: after.points === before.points && after.digest === before.digest,
        };
        rows.push(row);
        console.log(
          `  ${method} (listed as ${row.shownMethods.join(', ') || 'nothing seen'}): peer ${holder} → ${to}: ${ms} ms, ${row.pointsPerSec} points/s, ${row.mibPerSec} MiB/s; CPU source ${row.cpuSourceSec} s, target ${row.cpuTargetSec} s; digest ${row.digestKept ? 'kept' : 'CHANGED'}`,
        );
        if (!row.digestKept) throw new Error(`the moved replica differs: ${JSON.stringify(before)} before, ${JSON.stringify(after)} after`);
        holder = to;
        // The source drops its replica after the finish; wait until every peer agrees before the next move.
        await waitFor('every peer sees the move', () => settled(c, name), 120_000, 100);
      }
    }
    const summary = o.methods.map((method) => {
      const mine = rows.filter((x) => x.method === method);
      const ms = median(mine.map((x) => x.ms));
      return {
        method,
        n: mine.length,
        medianMs: ms,
        pointsPerSec: Math.round(o.points / (ms / 1000)),
        mibPerSec: round((vectorBytes + pBytes) / 2 ** 20 / (ms / 1000), 1),
        shownMethods: [...new Set(mine.flatMap((x) => x.shownMethods))],
      };
    });
    return { params: { ...o, vectorBytes, payloadBytes: pBytes, loadSeconds: round(loadSeconds, 1) }, rows, summary };
  } finally {
    await c.destroy();
  }
}

// -- 2. bringing back a replica that missed writes ----------------------------------------------

export interface DeltaOptions {
  points: number;
  dim: number;
  writes: number;
  trials: number;
  methods: string[];
  fault: 'kill' | 'stop';
}

export interface DeltaRow {
  method: string;
  trial: number;
  victim: string;
  writeMs: number;
  writeFailures: number;
  stateBeforeBack: string;
  /** From the restart (kill) or SIGCONT (stop): listening again (kill only). */
  listeningMs: number | null;
  /** First time a transfer to the victim was seen listed. */
  transferSeenMs: number | null;
  shownMethods: string[];
  activeMs: number | null;
  /** When the digests were asked for in the comparison that found them equal. */
  identicalMs: number | null;
  /** How long that comparison took (both replicas hash every point). */
  digestMs: number | null;
  points: number | null;
  lost: number;
}

export interface DeltaResult {
  params: DeltaOptions;
  rows: DeltaRow[];
  summary: Array<{ method: string; n: number; activeMs: number; fromListeningMs: number | null; identicalMs: number; transferMs: number | null; shownMethods: string[] }>;
  ratio: { active: number | null; fromListening: number | null; transfer: number | null; identical: number | null };
}

export async function deltaRecovery(o: DeltaOptions): Promise<DeltaResult> {
  console.log(`delta: ${o.points} x ${o.dim}-d, one shard, RF 2, 3 peers per method; ${o.writes} writes missed (${o.fault}), ${o.trials} trials per method (${o.methods.join(', ')})`);
  const name = 'delta';
  const rows: DeltaRow[] = [];
  // One cluster per method, every peer started with it, both up all along: a replica
  // rebuilt by one method is never the next trial's starting point for the other (a
  // replica filled by stream_records holds untagged records, which wal_delta cannot use).
  const clusters = new Map<string, { c: Cluster; ids: string[]; nextId: number; env: Record<string, string> }>();
  try {
    for (const method of o.methods) {
      const env = { SERVICE__TELEMETRY_DISABLED: 'true', SERVICE__STORAGE__SHARD_TRANSFER_METHOD: method };
      const c = await Cluster.start(3, env);
      clusters.set(method, { c, ids: [], nextId: o.points, env });
      await createCollection(c, name, { vectors: { size: o.dim, distance: 'Cosine' }, shard_number: 1, replication_factor: 2, optimizers_config: { indexing_threshold: 0 } });
      console.log(`  cluster for ${method}:`);
      await load(c, name, o.points, o.dim);
      clusters.get(method)!.ids = await peerIds(c);
    }
    for (let trial = 0; trial < o.trials; trial++) {
      const order = trial % 2 === 0 ? o.methods : [...o.methods].reverse();
      for (const method of order) {
        const k = clusters.get(method)!;
        const { c, ids } = k;
        await waitFor('all Active, no transfer', () => settled(c, name), 300_000, 200);
        const leader = await c.waitLeader();
        const holders = [...(await viewOf(c.peers[leader].url, name)).replicas.get(0)!.keys()].map((p) => ids.indexOf(p));
        const victim = holders.find((i) => i !== leader) ?? holders[0];
        const survivors = [0, 1, 2].filter((i) => i !== victim);
        if (o.fault === 'kill') await c.kill(victim, 'SIGKILL');
        else c.signal(victim, 'SIGSTOP');
        const w0 = Date.now();
        const first = k.nextId;
        let failures = 0;
        const clients = survivors.map((i) => new RawClient(c.peers[i].url));
        try {
          for (let b = 0; b < o.writes / 100; b++) {
            const batch = Array.from({ length: 100 }, (_, j) => first + b * 100 + j);
            for (let attempt = 0; ; attempt++) {
              const x = await clients[(b + attempt) % 2].request('PUT', `/collections/${name}/points?wait=true`, body(batch, o.dim)).catch(() => null);
              if (x?.status === 200) break;
              failures++;
              if (attempt > 50) throw new Error(`a write failed 50 times: ${x?.status} ${x?.body.toString().slice(0, 300)}`);
              await sleep(100);
            }
          }
        } finally {
          for (const cl of clients) cl.close();
        }
        k.nextId += o.writes;
        const writeMs = Date.now() - w0;
        // The victim's replica is Dead and no transfer to it is under way (a recovery the
        // leader started before it saw the peer down is aborted after 4 s) before it comes back.
        const stateBeforeBack = await waitFor(
          'the victim Dead, no transfer to it',
          async () => {
            const v = await viewOf(c.peers[survivors[0]].url, name);
            return v.replicas.get(0)?.get(ids[victim]) === 'Dead' && !v.transfers.some((t) => String(t.to) === ids[victim]) ? 'Dead' : null;
          },
          60_000,
          100,
        );
        const r0 = Date.now();
        let listeningMs: number | null = null;
        if (o.fault === 'kill') {
          await c.startPeer(victim, null, k.env);
          listeningMs = Date.now() - r0;
        } else c.signal(victim, 'SIGCONT');
        let transferSeenMs: number | null = null;
        let activeMs: number | null = null;
        let identicalMs: number | null = null;
        const shown = new Set<string>();
        const deadline = r0 + 600_000;
        while (Date.now() < deadline) {
          const views = await Promise.all(c.peers.map((p) => viewOf(p.url, name, 2000).catch(() => null)));
          for (const v of views) {
            for (const t of v?.transfers ?? []) {
              if (String(t.to) !== ids[victim]) continue;
              shown.add(t.method);
              transferSeenMs ??= Date.now() - r0;
            }
          }
          const all = views.every((v) => v !== null && v.transfers.length === 0 && [...v.replicas.get(0)!.values()].every((s) => s === 'Active'));
          if (all) {
            activeMs = Date.now() - r0;
            break;
          }
          await sleep(25);
        }
        let digestMs: number | null = null;
        if (activeMs !== null) {
          // The replicas' content is compared as it is when the digests are asked for:
          // `identicalMs` is that moment (the first comparison that found them equal);
          // hashing every point of both replicas takes `digestMs` more.
          await waitFor(
            'identical digests',
            async () => {
              const asked = Date.now();
              const d = await Promise.all(holders.map((i) => shardDigest(c.peers[i].url, name, 0)));
              if (!d.every((x) => x.points === d[0].points && x.digest === d[0].digest)) return false;
              identicalMs = asked - r0;
              digestMs = Date.now() - asked;
              return true;
            },
            120_000,
            100,
          ).catch(() => undefined);
        }
        const count = await api(c.peers[victim].url, 'GET', `/collections/${name}/cluster`).then((x) => x.body.result.local_shards[0]?.points_count ?? null, () => null);
        const row: DeltaRow = {
          method,
          trial,
          victim: ids[victim],
          writeMs,
          writeFailures: failures,
          stateBeforeBack,
          listeningMs,
          transferSeenMs,
          shownMethods: [...shown].sort(),
          activeMs,
          identicalMs,
          digestMs,
          points: count,
          lost: count === null ? -1 : Math.max(0, k.nextId - count),
        };
        rows.push(row);
        console.log(
          `  ${method} trial ${trial + 1}: ${o.writes} writes in ${writeMs} ms while peer ${victim} was ${o.fault === 'kill' ? 'down' : 'stopped'}; back: ${listeningMs === null ? '' : `listening ${listeningMs} ms, `}transfer seen ${transferSeenMs ?? '–'} ms (${row.shownMethods.join(', ') || 'none seen'}), Active ${activeMs ?? 'never'} ms, digests equal as of ${identicalMs ?? 'never'} ms (hashing took ${digestMs ?? '–'} ms); ${count} points on it`,
        );
        if (activeMs === null || identicalMs === null || row.lost !== 0) throw new Error(`delta: the replica did not come back whole: ${JSON.stringify(row)}`);
      }
    }
    const summary = o.methods.map((method) => {
      const mine = rows.filter((x) => x.method === method);
      const seen = mine.filter((x) => x.transferSeenMs !== null);
      return {
        method,
        n: mine.length,
        activeMs: median(mine.map((x) => x.activeMs!)),
        fromListeningMs: o.fault === 'kill' ? median(mine.map((x) => x.activeMs! - x.listeningMs!)) : null,
        identicalMs: median(mine.map((x) => x.identicalMs!)),
        transferMs: seen.length ? median(seen.map((x) => x.activeMs! - x.transferSeenMs!)) : null,
        shownMethods: [...new Set(mine.flatMap((x) => x.shownMethods))].sort(),
      };
    });
    const wal = summary.find((s) => s.method === 'wal_delta');
    const stream = summary.find((s) => s.method === 'stream_records');
    const r = (a: number | null | undefined, b: number | null | undefined) => (a && b ? round(a / b, 2) : null);
    const ratio = {
      active: r(stream?.activeMs, wal?.activeMs),
      fromListening: r(stream?.fromListeningMs, wal?.fromListeningMs),
      transfer: r(stream?.transferMs, wal?.transferMs),
      identical: r(stream?.identicalMs, wal?.identicalMs),
    };
    return { params: o, rows, summary, ratio };
  } finally {
    for (const { c } of clusters.values()) {
      for (const p of c.peers) if (p.server) c.signal(p.index, 'SIGCONT');
      await c.destroy();
    }
  }
}

// -- 3. every shard moved under a live writer -----------------------------------------------------

export interface MovesOptions {
  points: number;
  dim: number;
  shards: number;
  methods: string[];
  batch: number;
  overwrite: number;
}

export interface MoveRow {
  method: string;
  shard: number;
  from: string;
  to: string;
  shownMethods: string[];
  /** Attempts the cluster aborted before the one that moved it (asked again). */
  aborts: string[];
  ms: number;
  writesDuring: number;
  writeFailuresDuring: number;
  digestsEqual: boolean;
  countOk: boolean;
  count: number;
  expected: string;
}

export interface MoveCheck {
  method: string;
  via: number;
  scrolled: number;
  distinct: number;
  duplicated: number;
  lost: number;
  wrongValue: number;
  uncertain: number;
  shardPointsSum: number;
  lostExamples: string[];
}

export interface MovesResult {
  params: MovesOptions;
  moves: MoveRow[];
  checks: MoveCheck[];
  writes: { acked: number; failed: number; freshAcked: number; overwritesAcked: number; failures: Record<string, number> };
  ok: boolean;
}

/** A writer that upserts without a break: fresh ids above the loaded ones, or overwrites of loaded ids with a new payload value. */
class LiveWriter {
  readonly fresh = new Set<number>();
  /** Per id the last acknowledged payload value `v`. */
  readonly last = new Map<number, number>();
  /** Ids whose last write failed (either value may be there). */
  readonly uncertain = new Set<number>();
  acked = 0;
  failed = 0;
  freshAcked = 0;
  overwritesAcked = 0;
  readonly failures = new Map<string, number>();
  private stopping = false;
  private paused = false;
  private idle: (() => void) | null = null;
  private resumeGate: Promise<void> = Promise.resolve();
  private openResume: () => void = () => undefined;
  private done: Promise<void> = Promise.resolve();
  private next: number;
  private value = 0;
  private turn = 0;
  private readonly rng = new Rng(7);

  constructor(
    private readonly c: Cluster,
    private readonly name: string,
    private readonly base: number,
    private readonly dim: number,
    private readonly batch: number,
    private readonly overwrite: number,
  ) {
    this.next = base;
  }

  start(): void {
    this.done = this.loop();
  }

  private async loop(): Promise<void> {
    while (!this.stopping) {
      if (this.paused) {
        this.idle?.();
        await this.resumeGate;
        continue;
      }
      const over = this.rng.float() < this.overwrite;
      const ids: number[] = [];
      if (over) {
        const chosen = new Set<number>();
        while (chosen.size < this.batch) chosen.add(this.rng.int(0, this.base - 1));
        ids.push(...chosen);
      } else for (let k = 0; k < this.batch; k++) ids.push(this.next++);
      const v = ++this.value;
      const values = new Map(ids.map((id) => [id, v]));
      const peers = this.c.running();
      const url = peers[this.turn++ % peers.length].url;
      const r = await api(url, 'PUT', `/collections/${this.name}/points?wait=true`, JSON.parse(body(ids, this.dim, values, v).toString()), 60_000).catch((e: Error) => ({ status: 0, body: { status: { error: e.message } } }));
      if (r.status === 200) {
        this.acked++;
        if (over) this.overwritesAcked += ids.length;
        else this.freshAcked += ids.length;
        for (const id of ids) {
          if (!over) this.fresh.add(id);
          this.last.set(id, v);
          this.uncertain.delete(id);
        }
      } else {
        this.failed++;
        const k = `${r.status} ${String(r.body?.status?.error ?? JSON.stringify(r.body)).replace(/\d+/g, 'N').slice(0, 300)}`;
        this.failures.set(k, (this.failures.get(k) ?? 0) + 1);
        for (const id of ids) this.uncertain.add(id);
      }
    }
    this.idle?.();
  }

  /** Resolves once no write is in flight; none starts until resume(). */
  pause(): Promise<void> {
    this.paused = true;
    this.resumeGate = new Promise((r) => (this.openResume = r));
    return new Promise((r) => (this.idle = r));
  }

  resume(): void {
    this.paused = false;
    this.idle = null;
    this.openResume();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.resume();
    await this.done;
  }
}

async function scrollAll(url: string, name: string): Promise<{ ids: number[]; values: Map<number, unknown> }> {
  const ids: number[] = [];
  const values = new Map<number, unknown>();
  let offset: unknown = null;
  for (;;) {
    const r = await api(url, 'POST', `/collections/${name}/points/scroll`, { limit: 10_000, offset, with_payload: ['v'], with_vector: false }, 120_000);
    if (r.status !== 200) throw new Error(`scroll: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
    for (const p of r.body.result.points) {
      ids.push(Number(p.id));
      values.set(Number(p.id), p.payload?.v);
    }
    offset = r.body.result.next_page_offset;
    if (offset === null || offset === undefined) return { ids, values };
  }
}

export async function moves(o: MovesOptions): Promise<MovesResult> {
  console.log(`moves: ${o.points} x ${o.dim}-d, shard_number ${o.shards}, RF 2, 3 peers; every shard moved once per method (${o.methods.join(', ')}) under a live writer`);
  const c = await Cluster.start(3, { SERVICE__TELEMETRY_DISABLED: 'true' });
  const name = 'moves';
  const rows: MoveRow[] = [];
  const checks: MoveCheck[] = [];
  let w: LiveWriter | null = null;
  try {
    await createCollection(c, name, { vectors: { size: o.dim, distance: 'Cosine' }, shard_number: o.shards, replication_factor: 2, optimizers_config: { indexing_threshold: 0 } });
    await load(c, name, o.points, o.dim);
    const ids = await peerIds(c);
    w = new LiveWriter(c, name, o.points, o.dim, o.batch, o.overwrite);
    w.start();
    let via = 0;
    for (const [m, method] of o.methods.entries()) {
      for (let shard = 0; shard < o.shards; shard++) {
        const v = await viewOf(c.peers[0].url, name);
        const holders = [...v.replicas.get(shard)!.keys()];
        const to = ids.find((p) => !holders.includes(p))!;
        const from = holders[(m + shard) % holders.length];
        const acked0 = w.acked;
        const failed0 = w.failed;
        const { ms, shown, aborts } = await moveShard(c, name, ids, shard, ids.indexOf(from), ids.indexOf(to), method);
        const writesDuring = w.acked - acked0;
        const failuresDuring = w.failed - failed0;
        await w.pause();
        const d = divergent(await digests(c, name, o.shards), 2);
        const count = await api(c.peers[via++ % 3].url, 'POST', `/collections/${name}/points/count`, { exact: true }, 60_000);
        const n = count.body.result.count as number;
        // Fresh ids whose write failed may or may not be there.
        const uncertainFresh = [...w.uncertain].filter((id) => id >= o.points && !w!.fresh.has(id)).length;
        const lo = o.points + w.fresh.size;
        const row: MoveRow = {
          method,
          shard,
          from,
          to,
          shownMethods: shown,
          aborts,
          ms,
          writesDuring,
          writeFailuresDuring: failuresDuring,
          digestsEqual: d.length === 0,
          countOk: n >= lo && n <= lo + uncertainFresh,
          count: n,
          expected: uncertainFresh ? `${lo}..${lo + uncertainFresh}` : String(lo),
        };
        rows.push(row);
        console.log(
          `  ${method} (listed as ${row.shownMethods.join(', ') || 'nothing seen'}): shard ${shard} ${from} → ${to} in ${ms} ms, ${writesDuring} write batches acknowledged meanwhile (${failuresDuring} failed); digests ${row.digestsEqual ? 'equal' : `DIFFER: ${JSON.stringify(d)}`}; count ${n} (expected ${row.expected})`,
        );
        w.resume();
      }
      // After every shard was moved with this method: scroll everything.
      await w.pause();
      const through = via++ % 3;
      const s = await scrollAll(c.peers[through].url, name);
      const distinct = new Set(s.ids);
      let lost = 0;
      let wrong = 0;
      const examples: string[] = [];
      const expect = (id: number) => {
        if (!distinct.has(id)) {
          lost++;
          if (examples.length < 10) examples.push(`id ${id}`);
          return;
        }
        const v = w!.last.get(id);
        if (!w!.uncertain.has(id) && (s.values.get(id) ?? undefined) !== v) wrong++;
      };
      for (let id = 0; id < o.points; id++) expect(id);
      for (const id of w.fresh) expect(id);
      let shardSum = 0;
      for (const reps of (await digests(c, name, o.shards)).values()) shardSum += reps[0]?.points ?? 0;
      const check: MoveCheck = {
        method,
        via: through,
        scrolled: s.ids.length,
        distinct: distinct.size,
        duplicated: s.ids.length - distinct.size,
        lost,
        wrongValue: wrong,
        uncertain: w.uncertain.size,
        shardPointsSum: shardSum,
        lostExamples: examples,
      };
      checks.push(check);
      console.log(`  after the ${method} moves: scrolled ${check.scrolled} through peer ${through} (${check.distinct} distinct, ${check.duplicated} duplicated), ${lost} lost, ${wrong} wrong values; shards hold ${shardSum} points`);
      w.resume();
    }
    await w.stop();
    const ok = rows.every((x) => x.digestsEqual && x.countOk) && checks.every((x) => x.lost === 0 && x.duplicated === 0 && x.wrongValue === 0 && x.shardPointsSum === x.distinct);
    return {
      params: o,
      moves: rows,
      checks,
      writes: { acked: w.acked, failed: w.failed, freshAcked: w.freshAcked, overwritesAcked: w.overwritesAcked, failures: Object.fromEntries(w.failures) },
      ok,
    };
  } finally {
    await w?.stop();
    await c.destroy();
  }
}

export { METHODS as TRANSFER_METHODS };
