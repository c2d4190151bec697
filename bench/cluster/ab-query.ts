/**
 * `node dist/bench/cluster/ab-query.js --base <checkout> [--peers 2] [--n 100000] [--ef 64] [--rounds 8] [--seconds 4] [--concurrency 8] [--tag NAME]`
 *
 * The distributed query path of two builds side by side: a cluster of `peers` processes
 * of another built checkout (`--base`, started through its own test/cluster/harness) and
 * one of this checkout's, both on 127.0.0.1 at once. Each gets a collection of one shard
 * per peer (replication factor 1, Cosine, m=16, ef_construct=100) loaded with the first
 * `n` points of the synthetic 100k x 128-d set through peer 0 and indexed until green on
 * every peer. Then, per round, one wrk pass of `seconds` (c keep-alive connections to
 * peer 0, the 1000 query bodies of bench:rest in turn) against each cluster, the order
 * flipped every round, after a warm-up pass on each. Every query fans out: peer 0
 * searches its own shard and asks the others for theirs over the p2p points service.
 *
 * Reported per pass and as medians: queries/s, and each peer's CPU per query from /proc
 * (all threads). Writes bench/results/cluster-ab-query-<tag>.md.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { REPO_ROOT, parseArgs } from '../engine/common';
import { loadDataset } from '../engine/datasets';
import { findWrk, prepareWrk, runWrk } from '../rest/wrk';
import { checkFlags, flagValue, median, numFlag, procCpuSec, today } from './common';
import type { Cluster as ClusterT, api as apiT } from '../../test/cluster/harness';

const argv = process.argv.slice(2);
checkFlags(argv, ['base', 'peers', 'n', 'ef', 'rounds', 'seconds', 'concurrency', 'tag']);
const BASE = flagValue(argv, 'base');
const PEERS = numFlag(argv, 'peers', 2);
const N = numFlag(argv, 'n', 100_000);
const EF = numFlag(argv, 'ef', 64);
const ROUNDS = numFlag(argv, 'rounds', 8);
const SECONDS = numFlag(argv, 'seconds', 4);
const CONCURRENCY = numFlag(argv, 'concurrency', 8);
const TAG = flagValue(argv, 'tag') ?? today();

interface Pass {
  qps: number;
  /** CPU µs per query of each peer (all its threads). */
  cpuUs: number[];
}

interface Side {
  name: 'base' | 'this';
  cluster: ClusterT;
  url: string;
  pids: number[];
  passes: Pass[];
}

/** CPU seconds (all threads) of a peer's process; a peer that died fails the run. */
function cpuSeconds(pid: number): number {
  const c = procCpuSec(pid);
  if (c === null) throw new Error(`peer process ${pid} is gone`);
  return c;
}

async function main(): Promise<void> {
  if (!BASE) throw new Error('--base <checkout> is required (a built checkout to compare with)');
  if (PEERS < 2) throw new Error('--peers: at least 2 (the path measured is the fan-out to other peers)');
  const wrk = findWrk();
  if ('missing' in wrk) throw new Error(wrk.missing);
  const ds = loadDataset('synthetic', parseArgs([]));
  if ('skipped' in ds) throw new Error(`synthetic data set: ${ds.skipped}`);
  const dim = ds.dim;
  const loadAtStart = os.loadavg();

  const sides: Side[] = [];
  try {
    for (const [name, root] of [
      ['base', path.resolve(BASE)],
      ['this', REPO_ROOT],
    ] as const) {
      // Each build's own harness starts that build's server.
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      const h = require(path.join(root, 'dist', 'test', 'cluster', 'harness.js')) as { Cluster: typeof ClusterT; api: typeof apiT };
      // Started peer by peer (as Cluster.start does) after the side is listed, so a peer
      // that fails to start leaves nothing running past the clean-up below. The peers log
      // at INFO (the harness waits for the "REST API listening" line): a request log line
      // per query, which a single node benchmarked at WARN does not write.
      const cluster = await h.Cluster.prepare(PEERS);
      const side: Side = { name, cluster, url: cluster.peers[0].url, pids: [], passes: [] };
      sides.push(side);
      await cluster.startPeer(0);
      for (let i = 1; i < PEERS; i++) await cluster.startPeer(i, 0);
      await cluster.waitVoters(PEERS);
      side.pids = cluster.peers.map((p) => p.server!.pid);
      const create = await h.api(side.url, 'PUT', '/collections/bench', { vectors: { size: dim, distance: 'Cosine' }, shard_number: PEERS, replication_factor: 1, hnsw_config: { m: 16, ef_construct: 100 } }, 60_000);
      if (create.status !== 200) throw new Error(`create on ${name}: ${create.status} ${JSON.stringify(create.body)}`);
      for (let at = 0; at < N; at += 1000) {
        const points = [];
        for (let i = at; i < Math.min(N, at + 1000); i++) points.push({ id: i, vector: Array.from(ds.base.subarray(i * dim, (i + 1) * dim)) });
        const r = await h.api(side.url, 'PUT', '/collections/bench/points?wait=true', { points }, 60_000);
        if (r.status !== 200) throw new Error(`upsert on ${name}: ${r.status} ${JSON.stringify(r.body)}`);
      }
      const greenBy = Date.now() + 600_000;
      for (;;) {
        const states = await Promise.all(cluster.peers.map(async (p) => (await h.api(p.url, 'GET', '/collections/bench')).body.result.status as string));
        if (states.every((s) => s === 'green')) break;
        if (states.includes('red')) throw new Error(`${name}: the collection is red on a peer (${states.join(', ')})`);
        if (Date.now() > greenBy) throw new Error(`${name}: not green on every peer after 10 minutes (${states.join(', ')})`);
        await new Promise((r) => setTimeout(r, 250));
      }
      console.log(`${name}: ${PEERS} peers loaded and green`);
    }

    const bodies: Buffer[] = [];
    for (let i = 0; i < 1000; i++) bodies.push(Buffer.from(`{"query":${JSON.stringify(Array.from(ds.queries.subarray(i * dim, (i + 1) * dim)))},"limit":10,"params":{"hnsw_ef":${EF}}}`));
    const files = prepareWrk(path.join(sides[1].cluster.root, 'wrk'), `ef${EF}`, bodies);
    const pass = (s: Side, seconds: number) => runWrk({ url: s.url, path: '/collections/bench/points/query', ...files, connections: CONCURRENCY, seconds });
    for (const s of sides) await pass(s, 2);
    for (let round = 0; round < ROUNDS; round++) {
      for (const s of round % 2 === 0 ? sides : [...sides].reverse()) {
        const c0 = s.pids.map(cpuSeconds);
        const w = await pass(s, SECONDS);
        const c1 = s.pids.map(cpuSeconds);
        const p: Pass = { qps: w.qps, cpuUs: c1.map((c, i) => ((c - c0[i]) * 1e6) / w.requests) };
        s.passes.push(p);
        console.log(`round ${round + 1} ${s.name}: ${p.qps.toFixed(0)} q/s, CPU µs/query ${p.cpuUs.map((x, i) => `peer ${i} ${x.toFixed(1)}`).join(', ')} (load ${os.loadavg()[0].toFixed(2)})`);
      }
    }
  } finally {
    await Promise.allSettled(sides.map((s) => s.cluster.destroy()));
  }

  const [base, mine] = sides;
  const f = (x: number, d = 1) => x.toFixed(d);
  const m = (s: Side, k: (p: Pass) => number) => median(s.passes.map(k));
  const row = (what: string, k: (p: Pass) => number, d: number) => `| ${what} | ${f(m(base, k), d)} | ${f(m(mine, k), d)} | ${f(m(mine, k) / m(base, k), 3)} |`;
  const rows = [row('queries/s', (p) => p.qps, 0)];
  for (let i = 0; i < PEERS; i++) rows.push(row(`peer ${i} CPU µs/query (all threads)${i === 0 ? ', takes the requests' : ''}`, (p) => p.cpuUs[i], 1));
  const md = [
    `# Distributed query path of two builds side by side, wrk (${TAG})`,
    '',
    `\`node dist/bench/cluster/ab-query.js --base ${BASE} --peers ${PEERS} --n ${N} --ef ${EF} --rounds ${ROUNDS} --seconds ${SECONDS} --concurrency ${CONCURRENCY}\``,
    '',
    `${N.toLocaleString('en-US')} points of the synthetic set (128-d, Cosine, m=16, ef_construct=100) in ${PEERS} shards, one per peer, replication factor 1; each build a cluster of ${PEERS} processes on 127.0.0.1, both clusters up at once; wrk -t1 -c${CONCURRENCY} to peer 0, ${SECONDS} s per pass, the 1000 query bodies of bench:rest with hnsw_ef ${EF}; passes alternate between the builds (order flipped every round). Machine: ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown'}), every peer and wrk on them; the peers log at INFO (a request log line per query, as the test harness runs them); load average ${loadAtStart.map((x) => x.toFixed(2)).join(' ')} at start, ${os.loadavg().map((x) => x.toFixed(2)).join(' ')} at end. Medians of ${ROUNDS} rounds.`,
    '',
    '| measure | base | this | this / base |',
    '|---|---:|---:|---:|',
    ...rows,
    '',
    'Per pass (base/this), queries/s:',
    '',
    base.passes.map((p, i) => `${f(p.qps, 0)}/${f(mine.passes[i].qps, 0)}`).join(', '),
    '',
  ].join('\n');
  console.log(md);
  const out = path.join(REPO_ROOT, 'bench', 'results', `cluster-ab-query-${TAG}.md`);
  fs.writeFileSync(out, md);
  console.log(`written ${path.relative(REPO_ROOT, out)}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
