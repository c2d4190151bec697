/**
 * Reads of a cluster's replicas that the replication tests share: every point of a
 * collection (scrolled), the replica states a peer sees, whether they are all Active,
 * and each replica's content digest; and which shard a point id goes to.
 */

import { crc32c } from '../../ts/common/crc32c';
import { api, type Cluster } from './harness';

/** The shard a numeric point id goes to (crc32c of its key over shard_number, as the collection routes it; the tests check it against the peers' digests). */
export function shardOf(id: number, shards: number): number {
  return crc32c(Buffer.from(`n:${id}`, 'utf8')) % shards;
}

/** `n` ids from `from` on that go to `shard`. */
export function idsOnShard(shard: number, shards: number, n: number, from = 0): number[] {
  const out: number[] = [];
  for (let id = from; out.length < n; id++) if (shardOf(id, shards) === shard) out.push(id);
  return out;
}

/** Every point of `name` through `url`, page by page (`q`: query parameters, e.g. `?consistency=all`). */
export async function scrollAll(url: string, name: string, q = ''): Promise<Array<{ id: number; payload: any }>> {
  const out: Array<{ id: number; payload: any }> = [];
  let offset: unknown = null;
  for (;;) {
    const r = await api(url, 'POST', `/collections/${name}/points/scroll${q}`, { limit: 500, offset, with_payload: true });
    if (r.status !== 200) throw new Error(`scroll: ${r.status} ${JSON.stringify(r.body)}`);
    out.push(...r.body.result.points);
    offset = r.body.result.next_page_offset;
    if (offset === null) return out;
  }
}

/** Per `shard/peer`: the replica state, as peer `i` sees the collection's cluster. */
export async function states(c: Cluster, i: number, name: string): Promise<Record<string, string>> {
  const r = await api(c.peers[i].url, 'GET', `/collections/${name}/cluster`, undefined, 3000);
  if (r.status !== 200) throw new Error(`collection cluster info: ${r.status} ${JSON.stringify(r.body)}`);
  const v = r.body.result;
  const out: Record<string, string> = {};
  for (const s of v.local_shards) out[`${s.shard_id}/${v.peer_id}`] = s.state;
  for (const s of v.remote_shards) out[`${s.shard_id}/${s.peer_id}`] = s.state;
  return out;
}

/** Whether peer `i` sees every replica of the collection Active (false when it does not answer). */
export async function allActive(c: Cluster, i: number, name: string): Promise<boolean> {
  const st = await states(c, i, name).catch(() => null);
  return st !== null && Object.values(st).length > 0 && Object.values(st).every((s) => s === 'Active');
}

/** Whether every running peer sees every replica of the collection Active (a read with `consistency=all` through any of them then finds every replica). */
export async function allActiveEverywhere(c: Cluster, name: string): Promise<boolean> {
  return (await Promise.all(c.running().map((p) => allActive(c, p.index, name)))).every(Boolean);
}

/** Per shard: the digest of every replica (peer id → `count:digest`), asked of the running peers that hold them. */
export async function digests(c: Cluster, name: string, shards: number): Promise<Map<number, Map<string, string>>> {
  const out = new Map<number, Map<string, string>>();
  for (const p of c.running()) {
    for (let s = 0; s < shards; s++) {
      const r = await api(p.url, 'GET', `/collections/${name}/shards/${s}/digest`);
      if (r.status !== 200) continue;
      const m = out.get(s) ?? new Map<string, string>();
      m.set(String(r.body.result.peer_id), `${r.body.result.points_count}:${r.body.result.digest}`);
      out.set(s, m);
    }
  }
  return out;
}

/** The value of a metric series of `/metrics` at `url` whose labels include `labels` (0 when absent). */
export async function metric(url: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? ([0-9.eE+-]+)$/.exec(line);
    if (m === null || !m[1].endsWith(name)) continue;
    const have = Object.fromEntries([...(m[2] ?? '').matchAll(/([a-zA-Z_]+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) sum += Number(m[3]);
  }
  return sum;
}
