/**
 * Section `drain` of npm run bench:cluster: the drain of a peer (`bin/quiver drain`,
 * `POST /cluster/peer/{id}/drain`) under a live writer. 3 peers, one collection of
 * `points` (300,000) x `dim` (128) points, `shards` (6) shards with replication_factor 1
 * (so each peer holds a third of the points), indexing_threshold 0 (no HNSW graph is
 * built: the figures are the transfers', as in the `transfers` section). A writer
 * upserts fresh ids without a break (batches of `batch`, wait=true, through the two
 * peers that stay, in turn) while `bin/quiver drain --url <the drained peer>` runs
 * (`--method` from `--drain-method`, default none: the peers' stream_records), as
 * the Helm chart's preStop hook does; the drain is timed from the command's start to its
 * exit. Afterwards: the drained peer holds no replica (seen by every peer), every shard
 * has one Active replica, the exact count equals the points loaded plus those
 * acknowledged, and every acknowledged id is found by scrolling the whole collection.
 */

import { execFile } from 'node:child_process';
import * as path from 'node:path';

import { Cluster, api, sleep, waitFor } from '../../test/cluster/harness';
import { RawClient } from '../rest/client';
import { round } from './common';
import { body, createCollection, load, peerIds, viewOf } from './transfers';

export interface DrainOptions {
  points: number;
  dim: number;
  shards: number;
  batch: number;
  /** `--method` of the drain (null: the peers' default, stream_records). */
  method: string | null;
}

export interface DrainResult {
  params: DrainOptions & { loadSeconds: number };
  drainedPeer: string;
  shardsOnIt: number;
  pointsOnIt: number;
  drainSeconds: number;
  exitCode: number;
  output: string[];
  writes: { acked: number; failed: number; failures: Record<string, number>; pointsPerSecDuring: number };
  after: { replicasOnDrained: number; shardsWithActiveReplica: number; count: number; expected: number; scrolled: number; lost: number; lostExamples: number[]; duplicated: number };
  ok: boolean;
}

const REPO = path.join(__dirname, '..', '..', '..');

function runDrain(url: string, method: string | null): Promise<{ code: number; out: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [path.join(REPO, 'bin', 'quiver'), 'drain', '--url', url, '--timeout', '3600', ...(method === null ? [] : ['--method', method])], { maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : -1, out: stdout + stderr });
    });
  });
}

export async function drainBench(o: DrainOptions): Promise<DrainResult> {
  console.log(`drain: ${o.points} x ${o.dim}-d, ${o.shards} shards, RF 1, 3 peers; one peer drained under a live writer (method ${o.method ?? 'default'})`);
  const c = await Cluster.start(3, { SERVICE__TELEMETRY_DISABLED: 'true' });
  const name = 'drain';
  try {
    await createCollection(c, name, { vectors: { size: o.dim, distance: 'Cosine' }, shard_number: o.shards, replication_factor: 1, optimizers_config: { indexing_threshold: 0 } });
    const loadSeconds = await load(c, name, o.points, o.dim);
    const ids = await peerIds(c);
    // The peer to drain: one that is not the consensus leader (as a scale-in removes the highest ordinal, whoever leads).
    const leader = await c.waitLeader();
    const drained = [2, 1, 0].find((i) => i !== leader)!;
    const stay = [0, 1, 2].filter((i) => i !== drained);
    const v = await viewOf(c.peers[drained].url, name);
    const shardsOnIt = v.localPoints.size;
    const pointsOnIt = [...v.localPoints.values()].reduce((a, b) => a + b, 0);
    console.log(`  peer ${ids[drained]} holds ${shardsOnIt} shards, ${pointsOnIt} points (${round((100 * pointsOnIt) / o.points, 1)}%)`);

    // The writer.
    const clients = stay.map((i) => new RawClient(c.peers[i].url));
    const acked: number[] = [];
    const failures: Record<string, number> = {};
    let failed = 0;
    let stop = false;
    let next = o.points;
    const writer = (async () => {
      for (let b = 0; !stop; b++) {
        const batch = Array.from({ length: o.batch }, (_, k) => next + k);
        next += o.batch;
        const r = await clients[b % clients.length].request('PUT', `/collections/${name}/points?wait=true`, body(batch, o.dim)).catch((e: Error) => ({ status: 0, body: Buffer.from(e.message) }));
        if (r.status === 200) acked.push(...batch);
        else {
          failed++;
          const why = `${r.status} ${r.body.toString().slice(0, 120)}`;
          failures[why] = (failures[why] ?? 0) + 1;
          await sleep(50);
        }
      }
    })();
    await waitFor('the writer writes', () => acked.length >= 10 * o.batch, 60_000);
    const ackedBefore = acked.length;
    const t0 = Date.now();
    const { code, out } = await runDrain(c.peers[drained].url, o.method);
    const drainMs = Date.now() - t0;
    const ackedDuring = acked.length - ackedBefore;
    console.log(out.trim().split('\n').map((l) => `  ${l}`).join('\n'));
    console.log(`  drain: exit ${code} after ${round(drainMs / 1000, 1)} s; ${ackedDuring} points acknowledged meanwhile`);
    await waitFor('writes go on after the drain', () => acked.length >= ackedBefore + ackedDuring + 5 * o.batch, 60_000);
    stop = true;
    await writer;
    for (const cl of clients) cl.close();

    // Checks.
    const views = await Promise.all(c.peers.map((p) => viewOf(p.url, name)));
    let replicasOnDrained = 0;
    for (const x of views) for (const m of x.replicas.values()) if (m.has(ids[drained])) replicasOnDrained++;
    const byShard = views[stay[0]].replicas;
    const shardsWithActiveReplica = [...byShard.values()].filter((m) => [...m.values()].includes('Active')).length;
    const expected = o.points + acked.length;
    const cnt = await api(c.peers[stay[0]].url, 'POST', `/collections/${name}/points/count`, { exact: true }, 120_000);
    const count = cnt.body?.result?.count ?? -1;
    const seen = new Uint8Array(next);
    let scrolled = 0;
    let duplicated = 0;
    let offset: unknown = null;
    do {
      const r = await api(c.peers[stay[1]].url, 'POST', `/collections/${name}/points/scroll`, { limit: 10_000, offset, with_payload: false, with_vector: false }, 120_000);
      if (r.status !== 200) throw new Error(`scroll: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
      for (const p of r.body.result.points) {
        scrolled++;
        if (seen[p.id]) duplicated++;
        seen[p.id] = 1;
      }
      offset = r.body.result.next_page_offset;
    } while (offset !== null);
    const lostIds: number[] = [];
    for (let id = 0; id < o.points; id++) if (!seen[id]) lostIds.push(id);
    for (const id of acked) if (!seen[id]) lostIds.push(id);
    const result: DrainResult = {
      params: { ...o, loadSeconds: round(loadSeconds, 1) },
      drainedPeer: ids[drained],
      shardsOnIt,
      pointsOnIt,
      drainSeconds: round(drainMs / 1000, 2),
      exitCode: code,
      output: out.trim().split('\n'),
      writes: { acked: acked.length, failed, failures, pointsPerSecDuring: Math.round(ackedDuring / (drainMs / 1000)) },
      after: { replicasOnDrained, shardsWithActiveReplica, count, expected, scrolled, lost: lostIds.length, lostExamples: lostIds.slice(0, 10), duplicated },
      ok: false,
    };
    result.ok = code === 0 && replicasOnDrained === 0 && shardsWithActiveReplica === o.shards && count === expected && lostIds.length === 0 && duplicated === 0;
    console.log(`  after: ${JSON.stringify(result.after)}; ${result.ok ? 'all held' : 'FAILED'}`);
    return result;
  } finally {
    await c.destroy();
  }
}
