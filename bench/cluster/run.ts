/**
 * Cluster measurements with real peers on 127.0.0.1 (npm run bench:cluster):
 *
 * 1. Failover: a 3-peer cluster; `--trials` times (default 20): kill -9 the leader, time
 *    until a surviving peer reports itself leader (polling /cluster every 20 ms), then
 *    until a collection create through a survivor succeeds; restart the killed peer and
 *    wait until it is ready. Every /cluster answer is recorded: two peers leading one term
 *    is a failure.
 * 2. Catch-up: a 3-peer cluster; kill -9 one follower; create `--collections` (200)
 *    collections over `--down-seconds` (60) while it is down; restart it; time until its
 *    /readyz answers 200 and it lists every collection.
 *
 * Writes bench/results/cluster-<date>.{json,md}.
 */

import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import { Cluster, api, sleep, waitFor, type ClusterInfo } from '../../test/cluster/harness';

function arg(name: string, dflt: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? dflt : Number(process.argv[i + 1]);
}

const TRIALS = arg('trials', 20);
const COLLECTIONS = arg('collections', 200);
const DOWN_SECONDS = arg('down-seconds', 60);
const vectors = { size: 4, distance: 'Cosine' };

const leaderByTerm = new Map<number, number>();
const twoLeaders: string[] = [];
function see(info: ClusterInfo): void {
  if (info.raft_info.role !== 'Leader') return;
  const seen = leaderByTerm.get(info.raft_info.term);
  if (seen !== undefined && seen !== info.peer_id) twoLeaders.push(`term ${info.raft_info.term}: ${seen} and ${info.peer_id}`);
  leaderByTerm.set(info.raft_info.term, info.peer_id);
}

function stats(xs: number[]): { median: number; p90: number; worst: number; best: number } {
  const s = [...xs].sort((a, b) => a - b);
  const q = (p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))];
  return { median: s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2, p90: q(0.9), worst: s[s.length - 1], best: s[0] };
}

async function failover(): Promise<{ election: number[]; change: number[]; rejoin: number[] }> {
  const c = await Cluster.start(3);
  const election: number[] = [];
  const change: number[] = [];
  const rejoin: number[] = [];
  try {
    for (let trial = 0; trial < TRIALS; trial++) {
      const old = await c.waitLeader();
      await c.kill(old, 'SIGKILL');
      const t0 = Date.now();
      const survivors = c.running();
      const next = await waitFor(
        'a new leader',
        async () => {
          const infos = await Promise.all(survivors.map((p) => c.info(p.index, 500).catch(() => null)));
          for (const i of infos) if (i) see(i);
          const leaders = infos.filter((i) => i?.raft_info.role === 'Leader');
          return leaders.length === 1 ? survivors[infos.indexOf(leaders[0])].index : null;
        },
        15_000,
        20,
      );
      const t1 = Date.now();
      election.push(t1 - t0);
      const via = survivors.find((p) => p.index !== next)!;
      await waitFor('a create through a follower', async () => (await api(via.url, 'PUT', `/collections/failover-${trial}?timeout=5`, { vectors })).status === 200, 15_000, 20);
      change.push(Date.now() - t0);
      const r0 = Date.now();
      await c.startPeer(old);
      await waitFor('the restarted peer ready', async () => (await api(c.peers[old].url, 'GET', '/readyz')).status === 200, 30_000, 20);
      rejoin.push(Date.now() - r0);
      console.log(`trial ${trial + 1}: leader elected ${election.at(-1)} ms, change ok ${change.at(-1)} ms after the kill; restarted peer ready in ${rejoin.at(-1)} ms`);
    }
  } finally {
    await c.destroy();
  }
  return { election, change, rejoin };
}

async function catchUp(): Promise<{ created: number; downMs: number; readyMs: number; listedMs: number; createMsMedian: number }> {
  const c = await Cluster.start(3);
  try {
    const leader = await c.waitLeader();
    const down = [0, 1, 2].find((i) => i !== leader)!;
    const via = [0, 1, 2].find((i) => i !== leader && i !== down)!;
    await c.kill(down, 'SIGKILL');
    const t0 = Date.now();
    const createMs: number[] = [];
    for (let i = 0; i < COLLECTIONS; i++) {
      const due = t0 + ((i + 1) * DOWN_SECONDS * 1000) / COLLECTIONS;
      const s = Date.now();
      const r = await api(c.peers[i % 2 === 0 ? leader : via].url, 'PUT', `/collections/c${i}`, { vectors });
      if (r.status !== 200) throw new Error(`create c${i}: ${r.status} ${JSON.stringify(r.body)}`);
      createMs.push(Date.now() - s);
      const wait = due - Date.now();
      if (wait > 0) await sleep(wait);
    }
    const downMs = Date.now() - t0;
    const r0 = Date.now();
    await c.startPeer(down);
    await waitFor('ready', async () => (await api(c.peers[down].url, 'GET', '/readyz')).status === 200, 60_000, 20);
    const readyMs = Date.now() - r0;
    await waitFor('every collection listed', async () => (await api(c.peers[down].url, 'GET', '/collections')).body.result.collections.length === COLLECTIONS, 60_000, 20);
    const listedMs = Date.now() - r0;
    return { created: COLLECTIONS, downMs, readyMs, listedMs, createMsMedian: stats(createMs).median };
  } finally {
    await c.destroy();
  }
}

async function main(): Promise<void> {
  const f = await failover();
  const cu = await catchUp();
  const result = {
    date: new Date().toISOString(),
    trials: TRIALS,
    election: stats(f.election),
    changeAfterKill: stats(f.change),
    restartedPeerReady: stats(f.rejoin),
    raw: f,
    catchUp: cu,
    twoLeadersInOneTerm: twoLeaders,
  };
  console.log(JSON.stringify(result, null, 2));
  const day = result.date.slice(0, 10);
  const dir = path.join(__dirname, '..', '..', '..', 'bench', 'results');
  await fs.writeFile(path.join(dir, `cluster-${day}.json`), JSON.stringify(result, null, 2) + '\n');
  const md = [
    `# Cluster failover and catch-up (${day})`,
    '',
    'Command: `npm run bench:cluster` (3 peers on 127.0.0.1, tick 100 ms, election timeout 1-2 s).',
    '',
    `## kill -9 of the leader, ${TRIALS} trials`,
    '',
    '| measure | median ms | p90 ms | worst ms | best ms |',
    '|---|---:|---:|---:|---:|',
    `| new leader reported by a survivor | ${result.election.median} | ${result.election.p90} | ${result.election.worst} | ${result.election.best} |`,
    `| collection create through a follower succeeds | ${result.changeAfterKill.median} | ${result.changeAfterKill.p90} | ${result.changeAfterKill.worst} | ${result.changeAfterKill.best} |`,
    `| restarted peer answers /readyz 200 | ${result.restartedPeerReady.median} | ${result.restartedPeerReady.p90} | ${result.restartedPeerReady.worst} | ${result.restartedPeerReady.best} |`,
    '',
    `Two leaders in one term seen in any /cluster answer: ${twoLeaders.length === 0 ? 'none' : twoLeaders.join('; ')}.`,
    '',
    `## A follower down while ${cu.created} collections are created`,
    '',
    `Down for ${(cu.downMs / 1000).toFixed(1)} s (median create ${cu.createMsMedian} ms). After restart: /readyz 200 in ${cu.readyMs} ms; all ${cu.created} collections listed in ${cu.listedMs} ms.`,
    '',
  ].join('\n');
  await fs.writeFile(path.join(dir, `cluster-${day}.md`), md);
  if (twoLeaders.length > 0) process.exit(1);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
