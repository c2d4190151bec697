/**
 * What the shard transfer tests share (transfer-ops.test.ts, transfer-faults.test.ts):
 * the transfer methods under test, bulk loads, a peer's view of a collection's cluster
 * (replicas and `shard_transfers`), waiting until a transfer is in the middle of its run,
 * a writer that keeps what was acknowledged, and a monitor that polls replica states
 * and records every moment a shard had no Active replica.
 */

import type { ExecutionContext } from 'ava';

import { Cluster, api, change, sleep, waitFor as waitForAtMost } from './harness';

/**
 * The transfer methods each test runs with: `method` of move_shard, replicate_shard and
 * restart_transfer, and `storage.shard_transfer_method` for recoveries.
 */
export const METHODS = ['stream_records', 'snapshot', 'wal_delta'] as const;
export type Method = (typeof METHODS)[number];

export const DIM = 4;

export function vec(i: number, seed = 0): number[] {
  return [Math.sin(i + seed), Math.cos(i + seed), Math.sin(i * 0.7 + 1 + seed), Math.cos(i * 1.3 + 2)];
}

export function range(from: number, n: number): number[] {
  return Array.from({ length: n }, (_, k) => from + k);
}

export type Answer = { status: number; body: any };

/**
 * How long these tests let one request take before they give up on it: a bound for a
 * broken product, generous because the peers share two cores with the tests and their
 * writers, readers and monitors (and, in a check, with a CPU burner).
 */
export const REQUEST_DEADLINE_MS = 60_000;

/**
 * How long one of the long tests may take (ava's t.timeout; the project's ava timeout is
 * 2 minutes without a result): a bound for a broken product on a loaded machine, where
 * tests of about a minute may take several times that.
 */
export const TEST_DEADLINE_MS = 300_000;

/** How long a condition of these tests may take (a bound, not a measure): as REQUEST_DEADLINE_MS, longer than the harness's default. */
export const WAIT_MS = 120_000;

/** `waitFor` of test/support/wait.ts with WAIT_MS as the deadline. */
export function waitFor<T>(what: string, probe: () => T | null | undefined | false | Promise<T | null | undefined | false>, timeoutMs = WAIT_MS, everyMs = 50): Promise<T> {
  return waitForAtMost(what, probe, timeoutMs, everyMs);
}

/** Restarts a killed peer and waits until every peer counts it a voter and is ready. */
export async function restart(c: Cluster, i: number): Promise<void> {
  await c.startPeer(i);
  await c.waitVoters(c.peers.length, WAIT_MS);
}

/** A request (harness `api`) with REQUEST_DEADLINE_MS; a request that fails names its route. */
export async function call(url: string, method: string, route: string, body?: unknown, timeoutMs = REQUEST_DEADLINE_MS): Promise<Answer> {
  try {
    return await api(url, method, route, body, timeoutMs);
  } catch (err) {
    throw new Error(`${method} ${url}${route}: ${String(err)}`);
  }
}

/** The error text of an answer (the envelope's status.error), or the body as text. */
export function errorOf(r: Answer): string {
  return String(r.body?.status?.error ?? JSON.stringify(r.body));
}

/** Peer ids as the API gives them (strings), by peer index. */
export async function peerIds(c: Cluster): Promise<string[]> {
  return Promise.all(c.peers.map(async (p) => String((await c.info(p.index)).peer_id)));
}

export interface TransferView {
  shard_id: number;
  from: number;
  to: number;
  sync: boolean;
  method?: string;
  comment?: string;
}

export interface CollectionView {
  peer_id: number;
  shard_count: number;
  local_shards: Array<{ shard_id: number; points_count: number; state: string }>;
  remote_shards: Array<{ shard_id: number; peer_id: number; state: string }>;
  shard_transfers: TransferView[];
}

/** `GET /collections/{name}/cluster` through peer `i`. */
export async function view(c: Cluster, i: number, name: string): Promise<CollectionView> {
  const r = await call(c.peers[i].url, 'GET', `/collections/${name}/cluster`);
  if (r.status !== 200) throw new Error(`GET /collections/${name}/cluster on peer ${i}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.result as CollectionView;
}

/** Shard id → (peer id → state), from one view. */
export function replicasOf(v: CollectionView): Map<number, Map<string, string>> {
  const out = new Map<number, Map<string, string>>();
  const put = (shard: number, peer: string, st: string) => out.set(shard, (out.get(shard) ?? new Map<string, string>()).set(peer, st));
  for (const s of v.local_shards) put(s.shard_id, String(v.peer_id), s.state);
  for (const s of v.remote_shards) put(s.shard_id, String(s.peer_id), s.state);
  return out;
}

/** Peer id → state of the replicas of `shard`, as peer `i` sees them. */
export async function shardReplicas(c: Cluster, i: number, name: string, shard: number): Promise<Record<string, string>> {
  return Object.fromEntries(replicasOf(await view(c, i, name)).get(shard) ?? new Map<string, string>());
}

/** What the view of a collection says of replicas and transfers, without point counts (which a refused change does not touch either, but which writes do). */
export function placementOf(v: CollectionView): string {
  const replicas = [...replicasOf(v)].flatMap(([shard, m]) => [...m].map(([peer, st]) => `${shard}@${peer}:${st}`)).sort();
  const transfers = v.shard_transfers.map((t) => `${t.shard_id}:${t.from}->${t.to}`).sort();
  return JSON.stringify({ replicas, transfers });
}

/** `POST /collections/{name}/cluster` as a client that retries while there is no leader (harness `change`). */
export function clusterOp(c: Cluster, i: number, name: string, body: unknown, q = ''): Promise<Answer> {
  return change(c.peers[i].url, 'POST', `/collections/${name}/cluster${q}`, body, REQUEST_DEADLINE_MS);
}

export async function createCollection(c: Cluster, name: string, params: Record<string, unknown>): Promise<void> {
  const r = await change(c.running()[0].url, 'PUT', `/collections/${name}`, { vectors: { size: DIM, distance: 'Dot' }, ...params }, REQUEST_DEADLINE_MS);
  if (r.status !== 200) throw new Error(`create ${name}: ${r.status} ${JSON.stringify(r.body)}`);
  await waitFor(`every peer has ${name}`, async () => (await Promise.all(c.running().map((p) => call(p.url, 'GET', `/collections/${name}`)))).every((x) => x.status === 200));
}

/** Upserts points `ids` (payload `{i, tag}`) through `url`, `batch` per request (one WAL operation each, what wal_delta replays), wait=true. */
export async function load(url: string, name: string, ids: readonly number[], tag = 'base', batch = 500): Promise<void> {
  for (let k = 0; k < ids.length; k += batch) {
    const points = ids.slice(k, k + batch).map((id) => ({ id, vector: vec(id), payload: { i: id, tag } }));
    const r = await call(url, 'PUT', `/collections/${name}/points?wait=true`, { points });
    if (r.status !== 200) throw new Error(`load ${name}: ${r.status} ${JSON.stringify(r.body)}`);
  }
}

/** Points sent and total, from a source's progress comment ("Transferring records (k/n), ..."), or null. */
export function progressOf(t: TransferView): { sent: number; total: number } | null {
  const m = /\((\d+)\/(\d+)\)/.exec(t.comment ?? '');
  return m === null ? null : { sent: Number(m[1]), total: Number(m[2]) };
}

/**
 * Whether a source's progress comment says the transfer is copying: `stream_records`
 * has sent part of the points, not all; `wal_delta` has not sent every operation yet
 * (it sends up to 256 at a time, so a count of 0 is all a view may show of it);
 * `snapshot` is fetching and restoring its archive.
 */
export function copying(t: TransferView): boolean {
  const c = t.comment ?? '';
  if (c.startsWith('Transferring a snapshot')) return true;
  const p = progressOf(t);
  if (p === null) return false;
  if (c.startsWith('Transferring records')) return p.sent > 0 && p.sent < p.total;
  return c.startsWith('Transferring operations') && p.sent < p.total;
}

/**
 * Waits until peer `source` (index) drives the transfer of `shard` to peer id `to` and
 * is copying (see `copying`): the transfer is in the middle of its run.
 */
export async function midTransfer(c: Cluster, source: number, name: string, shard: number, to: string): Promise<TransferView> {
  return waitFor(
    `the transfer of shard ${shard} to peer ${to} in the middle of its copy (seen on its source, peer ${source})`,
    async () => {
      const v = await view(c, source, name);
      const t = v.shard_transfers.find((x) => x.shard_id === shard && String(x.to) === to);
      return t !== undefined && copying(t) ? t : null;
    },
    WAIT_MS,
    10,
  );
}

/**
 * Like midTransfer, but null when the transfer ends before it is seen copying (a small
 * shard's snapshot, or a short delta, on a loaded machine): the caller tries again.
 */
export async function midTransferOrEnd(c: Cluster, source: number, name: string, shard: number, to: string): Promise<TransferView | null> {
  const got = await waitFor(
    `the transfer of shard ${shard} to peer ${to} in the middle of its copy, or its end (seen on its source, peer ${source})`,
    async () => {
      const v = await view(c, source, name);
      const t = v.shard_transfers.find((x) => x.shard_id === shard && String(x.to) === to);
      if (t === undefined) return 'ended' as const;
      return copying(t) ? t : null;
    },
    WAIT_MS,
    10,
  );
  return got === 'ended' ? null : got;
}

/** Waits until no peer of `among` (indexes) lists a transfer of the collection. */
export async function noTransfers(c: Cluster, name: string, among: number[] = c.running().map((p) => p.index)): Promise<void> {
  await waitFor(`no transfer of ${name} listed on peers ${among.join(', ')}`, async () => {
    for (const i of among) if ((await view(c, i, name)).shard_transfers.length > 0) return false;
    return true;
  });
}

/** How long a transfer of the big shards of these tests may take on a loaded machine (a bound, not a measure). */
export const TRANSFER_DEADLINE_MS = 180_000;


/**
 * Waits until peer `i` lists no transfer of `shard` to peer id `to` any more, and gives
 * the shard's replicas as it sees them then: the end the transfer came to (finished:
 * the target Active; aborted: the target gone or Dead).
 */
export async function transferEnd(c: Cluster, i: number, name: string, shard: number, to: string, timeoutMs = TRANSFER_DEADLINE_MS): Promise<Record<string, string>> {
  await waitFor(
    `the transfer of shard ${shard} to peer ${to} ended (seen on peer ${i})`,
    async () => !(await view(c, i, name)).shard_transfers.some((t) => t.shard_id === shard && String(t.to) === to),
    timeoutMs,
    50,
  );
  return shardReplicas(c, i, name, shard);
}

/**
 * Waits until every running peer (or those of `among`) sees exactly `expected` (peer id
 * → state) as the replicas of `shard` and lists no transfer of it; on timeout the error
 * names what each peer saw last.
 */
export async function everyPeerSees(c: Cluster, name: string, shard: number, expected: Record<string, string>, among?: number[], timeoutMs?: number): Promise<void> {
  const want = JSON.stringify(Object.entries(expected).sort());
  const last = new Map<number, string>();
  try {
    await waitFor(
      `every peer sees the replicas of shard ${shard} of ${name} as ${want}`,
      async () => {
        let all = true;
        for (const i of among ?? c.running().map((p) => p.index)) {
          const v = await view(c, i, name);
          const got = JSON.stringify([...(replicasOf(v).get(shard) ?? new Map<string, string>())].sort());
          const moving = v.shard_transfers.filter((t) => t.shard_id === shard);
          last.set(i, `${got} transfers ${JSON.stringify(moving)}`);
          if (got !== want || moving.length > 0) all = false;
        }
        return all;
      },
      timeoutMs,
      100,
    );
  } catch (err) {
    throw new Error(`${String(err)}; last seen: ${[...last].map(([i, x]) => `peer ${i}: ${x}`).join('; ')}`);
  }
}

/** Waits until every running peer sees every replica of the collection Active and no transfer of it (`allActiveEverywhere` of replicas.ts is the one-look predicate without the transfers). */
export async function waitSettledEverywhere(c: Cluster, name: string, timeoutMs?: number): Promise<void> {
  await waitFor(
    `every replica of ${name} Active, seen from every running peer, no transfer`,
    async () => {
      for (const p of c.running()) {
        const v = await view(c, p.index, name);
        if (v.shard_transfers.length > 0) return false;
        for (const m of replicasOf(v).values()) for (const st of m.values()) if (st !== 'Active') return false;
      }
      return true;
    },
    timeoutMs,
    100,
  );
}

/** Every point of `name` through `url`, page by page. */
export async function scrollAll(url: string, name: string): Promise<Array<{ id: number; payload: any }>> {
  const out: Array<{ id: number; payload: any }> = [];
  let offset: unknown = null;
  do {
    const r = await call(url, 'POST', `/collections/${name}/points/scroll`, { limit: 1000, offset, with_payload: true });
    if (r.status !== 200) throw new Error(`scroll: ${r.status} ${JSON.stringify(r.body)}`);
    out.push(...r.body.result.points);
    offset = r.body.result.next_page_offset;
  } while (offset !== null);
  return out;
}

/** Per shard: the digest of every replica (peer id → `count:digest`), asked of the running peers that hold them. */
export async function digests(c: Cluster, name: string, shards: number): Promise<Map<number, Map<string, string>>> {
  const out = new Map<number, Map<string, string>>();
  for (const p of c.running()) {
    for (let s = 0; s < shards; s++) {
      const r = await call(p.url, 'GET', `/collections/${name}/shards/${s}/digest`);
      if (r.status !== 200) continue;
      out.set(s, (out.get(s) ?? new Map<string, string>()).set(String(r.body.result.peer_id), `${r.body.result.points_count}:${r.body.result.digest}`));
    }
  }
  return out;
}

/** Every shard's replicas (on running peers) have the same content; returns shard → replica count. */
export async function sameContent(t: ExecutionContext, c: Cluster, name: string, shards: number): Promise<Map<number, number>> {
  const d = await digests(c, name, shards);
  const out = new Map<number, number>();
  for (const [shard, byPeer] of d) {
    t.is(new Set(byPeer.values()).size, 1, `shard ${shard} of ${name}: replicas differ: ${JSON.stringify([...byPeer])}`);
    out.set(shard, byPeer.size);
  }
  return out;
}

/** The acknowledged ids missing from the collection (scrolled through `url`), and whether an id came twice. */
export async function lostAndDuplicated(url: string, name: string, acked: readonly number[]): Promise<{ lost: number[]; duplicated: number[] }> {
  const want = [...acked];
  const seen = new Map<number, number>();
  for (const p of await scrollAll(url, name)) seen.set(p.id, (seen.get(p.id) ?? 0) + 1);
  return { lost: want.filter((id) => !seen.has(id)), duplicated: [...seen].filter(([, n]) => n > 1).map(([id]) => id) };
}

/**
 * Writes batches of new points (wait=true) through the peer `url()` names until
 * stopped, and keeps the acknowledged ids. After a failed write it paces itself (a peer
 * that refuses connections would otherwise be asked in a busy loop); `pauseMs` between
 * writes shapes a lighter load (a transfer's source applies and forwards writes one at a
 * time, between its batches).
 */
export class Writer {
  readonly acked: number[] = [];
  readonly failures: string[] = [];
  private stopped = false;
  private readonly done: Promise<void>;

  constructor(t: ExecutionContext, url: () => string, name: string, firstId: number, batch = 10, pauseMs = 0) {
    t.teardown(() => this.stop());
    this.done = (async () => {
      for (let b = 0; !this.stopped; b++) {
        const ids = range(firstId + b * batch, batch);
        const points = ids.map((id) => ({ id, vector: vec(id), payload: { i: id, tag: 'w' } }));
        const r = await call(url(), 'PUT', `/collections/${name}/points?wait=true`, { points }).catch((err: unknown) => ({ status: 0, body: String(err) }));
        if (r.status === 200) {
          this.acked.push(...ids);
          if (pauseMs > 0) await sleep(pauseMs);
        } else {
          this.failures.push(`${r.status} ${errorOf(r)}`);
          await sleep(100);
        }
      }
    })();
  }

  summary(): string {
    return `acknowledged ${this.acked.length} points, ${this.failures.length} writes failed${this.failures.length > 0 ? `: ${this.failures.slice(0, 3).join(' | ')}` : ''}`;
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
 * Polls the replica states of a collection through the running peers (the first that
 * answers, in the order `order()` gives) until stopped, and records every poll in which
 * a shard had no Active replica, and the states each replica went through.
 */
export class ActiveMonitor {
  readonly problems: string[] = [];
  /** `shard/peer` → the states seen, in order, without repeats. */
  readonly history = new Map<string, string[]>();
  polls = 0;
  private stopped = false;
  private readonly done: Promise<void>;

  constructor(
    t: ExecutionContext,
    private readonly c: Cluster,
    private readonly name: string,
    private readonly shards: number,
    order: () => number[] = () => c.running().map((p) => p.index),
  ) {
    t.teardown(() => this.stop());
    this.done = (async () => {
      while (!this.stopped) {
        await this.poll(order());
        await sleep(25);
      }
    })();
  }

  private async poll(order: number[]): Promise<void> {
    for (const i of order) {
      if (this.c.peers[i].server === null) continue;
      let v: CollectionView;
      try {
        v = await view(this.c, i, this.name);
      } catch {
        continue;
      }
      this.polls++;
      const replicas = replicasOf(v);
      for (let s = 0; s < this.shards; s++) {
        const m = replicas.get(s) ?? new Map<string, string>();
        if (![...m.values()].includes('Active')) this.problems.push(`peer ${i} saw shard ${s} without an Active replica: ${JSON.stringify([...m])}`);
        for (const [peer, st] of m) {
          const h = this.history.get(`${s}/${peer}`) ?? [];
          if (h[h.length - 1] !== st) h.push(st);
          this.history.set(`${s}/${peer}`, h);
        }
      }
      return;
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.done;
  }
}

/** The log lines about transfers, aborts and peer health of every running peer (the last `n` of each), to explain a transfer that ended otherwise than a test expected. */
export function transferLogs(c: Cluster, n = 25): string {
  const out: string[] = [];
  for (const p of c.running()) {
    const lines = (p.server?.logLines() ?? []).filter((l) => /transfer|abort|health|answers again|Dead|switch/i.test(String(l.msg ?? '')));
    for (const l of lines.slice(-n)) {
      const { msg, time, level, err, ...rest } = l as Record<string, unknown>;
      out.push(`peer ${p.index} ${String(time ?? '')} ${String(level ?? '')} ${String(msg)} ${JSON.stringify(rest).slice(0, 300)}${err ? ` err=${JSON.stringify(err).slice(0, 300)}` : ''}`);
    }
  }
  return out.join('\n');
}
