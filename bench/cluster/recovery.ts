/**
 * Recovery of a peer that was down while points were written (section `recovery` of
 * npm run bench:cluster): 3 peers, a collection with replication_factor 2 and
 * shard_number 3 holding `base` points (128-d synthetic data); a follower of consensus
 * is killed (SIGKILL); for `downSeconds` the survivors take `writes` fresh points
 * (batches of 100, wait=true, evenly paced, alternating between the two); then the
 * peer is started again. Measured from the moment it is started: when it listens, when
 * its replicas' recovery transfers start (Partial), when every replica is Active on
 * every peer, and when every shard's replicas have the same content digest (every
 * replica answers GET /collections/{c}/shards/{id}/digest, which hashes all points,
 * so that figure includes the hashing). Every point written must be there at the end.
 */

import { Cluster, api, change, sleep, waitFor } from '../../test/cluster/harness';
import { RawClient, runConcurrent } from '../rest/client';
import { divergent, digests, replicaStates, round } from './common';
import { loadData, upsertBodies } from './data';

export interface RecoveryOptions {
  bases: number[];
  writes: number;
  downSeconds: number;
  shards: number;
  dataDir: string;
}

export interface RecoveryRow {
  base: number;
  writes: number;
  downSeconds: number;
  victim: string;
  writeFailures: number;
  failureMessages: Record<string, number>;
  deadBeforeRestart: string[];
  listeningMs: number;
  transferStartMs: number | null;
  allActiveMs: number | null;
  identicalMs: number | null;
  points: number | null;
  divergent: string[];
  lost: number;
}

function group(msg: string): string {
  return msg.replace(/\d+/g, 'N').slice(0, 300);
}

export async function recovery(o: RecoveryOptions): Promise<RecoveryRow[]> {
  const rows: RecoveryRow[] = [];
  const maxBase = Math.max(...o.bases);
  const { ds } = await loadData(Math.min(100_000, maxBase + o.writes), 0, o.dataDir, false);
  if (maxBase + o.writes > 100_000) throw new Error(`recovery: base ${maxBase} + writes ${o.writes} is more than the 100,000 points of the data set`);
  for (const base of o.bases) {
    console.log(`recovery: base ${base} points, a follower down ${o.downSeconds} s while ${o.writes} points are written (RF 2, shard_number ${o.shards})`);
    const c = await Cluster.start(3, { SERVICE__TELEMETRY_DISABLED: 'true' });
    try {
      const name = 'rec';
      const r = await change(c.peers[0].url, 'PUT', `/collections/${name}`, { vectors: { size: ds.dim, distance: 'Cosine' }, hnsw_config: { m: 16, ef_construct: 100 }, shard_number: o.shards, replication_factor: 2 });
      if (r.status !== 200) throw new Error(`create: ${r.status} ${JSON.stringify(r.body)}`);
      await waitFor('the collection on every peer', async () => (await Promise.all(c.peers.map((p) => api(p.url, 'GET', `/collections/${name}`)))).every((x) => x.status === 200));
      if (base > 0) {
        const clients = c.peers.map((p) => new RawClient(p.url));
        const bodies = upsertBodies(ds, 0, base, 1000);
        const t = await runConcurrent(bodies.length, 3, async (i) => {
          const x = await clients[i % 3].request('PUT', `/collections/${name}/points?wait=true`, bodies[i]);
          if (x.status !== 200) throw new Error(`base upsert: ${x.status} ${x.body.toString().slice(0, 300)}`);
        });
        for (const cl of clients) cl.close();
        console.log(`  base loaded in ${round(t.seconds, 1)} s`);
      }
      const leader = await c.waitLeader();
      const victim = [0, 1, 2].find((i) => i !== leader)!;
      const survivors = [0, 1, 2].filter((i) => i !== victim);
      const victimId = String((await c.info(victim)).peer_id);
      await c.kill(victim, 'SIGKILL');
      const t0 = Date.now();
      const bodies = upsertBodies(ds, base, base + o.writes, 100);
      let failures = 0;
      const messages: Record<string, number> = {};
      for (let i = 0; i < bodies.length; i++) {
        const due = t0 + (i * o.downSeconds * 1000) / bodies.length;
        const wait = due - Date.now();
        if (wait > 0) await sleep(wait);
        // Retried until acknowledged (an upsert is idempotent); failures are counted.
        for (let attempt = 0; ; attempt++) {
          const url = c.peers[survivors[(i + attempt) % 2]].url;
          const x = await api(url, 'PUT', `/collections/${name}/points?wait=true`, JSON.parse(bodies[i].toString()), 30_000).catch((e: Error) => ({ status: 0, body: { status: { error: e.message } } }));
          if (x.status === 200) break;
          failures++;
          const k = `${x.status} ${group(String(x.body?.status?.error ?? JSON.stringify(x.body)))}`;
          messages[k] = (messages[k] ?? 0) + 1;
          if (attempt > 20) throw new Error(`a write failed 20 times: ${k}`);
          await sleep(200);
        }
      }
      const left = t0 + o.downSeconds * 1000 - Date.now();
      if (left > 0) await sleep(left);
      const before = await replicaStates(c.peers[survivors[0]].url, name);
      const deadBeforeRestart = Object.entries(before)
        .filter(([k, s]) => k.endsWith(`/${victimId}`) && s !== 'Active')
        .map(([k, s]) => `${k}=${s}`);
      console.log(`  down ${round((Date.now() - t0) / 1000, 1)} s; ${o.writes} points written (${failures} failed attempts, retried); victim's replicas: ${deadBeforeRestart.join(', ') || 'still Active'}`);

      const r0 = Date.now();
      await c.startPeer(victim);
      const listeningMs = Date.now() - r0;
      let transferStartMs: number | null = null;
      let allActiveMs: number | null = null;
      let identicalMs: number | null = null;
      let diverged: string[] = [];
      const deadline = r0 + 300_000;
      while (Date.now() < deadline) {
        const views = await Promise.all(c.peers.map((p) => replicaStates(p.url, name, 2000).catch(() => null)));
        const all = views.every((v) => v !== null && Object.values(v).every((s) => s === 'Active'));
        if (transferStartMs === null && views.some((v) => v !== null && Object.entries(v).some(([k, s]) => k.endsWith(`/${victimId}`) && s === 'Partial'))) transferStartMs = Date.now() - r0;
        if (all) {
          allActiveMs ??= Date.now() - r0;
          const d = divergent(await digests(c, name, o.shards), 2);
          if (d.length === 0) {
            identicalMs = Date.now() - r0;
            diverged = [];
            break;
          }
          diverged = d.map((x) => `shard ${x.shard}: ${x.why}: ${x.replicas.map((y) => `peer ${y.peer} ${y.points} points ${y.digest.slice(0, 12)}`).join('; ')}`);
          // Active everywhere but different content: no write runs, so this is divergence unless it settles.
          if (Date.now() - r0 - allActiveMs > 10_000) break;
        } else allActiveMs = null;
        await sleep(100);
      }
      const count = await api(c.peers[victim].url, 'POST', `/collections/${name}/points/count`, { exact: true }).catch(() => null);
      const points = count?.status === 200 ? (count.body.result.count as number) : null;
      // Every point written is there (scroll through the restarted peer).
      const ids = new Set<number>();
      let offset: unknown = null;
      for (;;) {
        const s = await api(c.peers[victim].url, 'POST', `/collections/${name}/points/scroll`, { limit: 5000, offset, with_payload: false }, 60_000);
        if (s.status !== 200) throw new Error(`scroll: ${s.status} ${JSON.stringify(s.body)}`);
        for (const p of s.body.result.points) ids.add(p.id);
        offset = s.body.result.next_page_offset;
        if (offset === null) break;
      }
      let lost = 0;
      for (let i = 0; i < base + o.writes; i++) if (!ids.has(i)) lost++;
      const row: RecoveryRow = {
        base,
        writes: o.writes,
        downSeconds: o.downSeconds,
        victim: `peer ${victim} (id ${victimId}), a follower`,
        writeFailures: failures,
        failureMessages: messages,
        deadBeforeRestart,
        listeningMs,
        transferStartMs,
        allActiveMs,
        identicalMs,
        points,
        divergent: diverged,
        lost,
      };
      console.log(
        `  after restart: listening ${listeningMs} ms, transfer started ${transferStartMs ?? '–'} ms, all Active ${allActiveMs ?? 'never'} ms, identical digests ${identicalMs ?? 'never'} ms; ${points} points, ${lost} lost${diverged.length ? `; DIVERGENT: ${diverged.join(' | ')}` : ''}`,
      );
      rows.push(row);
    } finally {
      await c.destroy();
    }
  }
  return rows;
}
