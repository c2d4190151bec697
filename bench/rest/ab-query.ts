/**
 * `node dist/bench/rest/ab-query.js --base <checkout> [--n 100000] [--efs 64,128] [--rounds 6] [--seconds 4] [--concurrency 8] [--snapshot-first] [--tag NAME]`
 *
 * The query path of two builds side by side, driven by wrk: the server of another built
 * checkout (`--base`) and this checkout's, each a single node started on a copy of one
 * storage directory (the first `n` points of the synthetic 100k x 128-d set, Cosine,
 * m=16, ef_construct=100, loaded once through this build's REST API and indexed until
 * green), so both search the same HNSW graph. Each round runs, per ef, one wrk pass of
 * `seconds` (c keep-alive connections, the 1000 query bodies of bench:rest in turn,
 * `{"query": [...], "limit": 10, "params": {"hnsw_ef": ef}}`) against each server, the
 * order flipped every round, after a warm-up pass on each.
 *
 * With `--snapshot-first`, each server takes a snapshot of the collection (wait=true)
 * before the passes: the query path of a node that has run a snapshot job.
 *
 * Reported per pass and as medians: queries/s, and the server's CPU per request from
 * /proc (main thread, all other threads), which on a machine shared with other work is
 * the load-robust figure (queries/s then depend on the CPU share the server gets).
 * Writes bench/results/ab-query-<tag>.md.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { REPO_ROOT, parseArgs, today } from '../engine/common';
import { loadDataset } from '../engine/datasets';
import { coresAvailable } from '../engine/measure';
import { makeClient } from './client';
import { QuiverServer, cpuDelta } from './server';
import { findWrk, prepareWrk, runWrk } from './wrk';

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? undefined : process.argv[i + 1];
}

const BASE = arg('base');
const N = Number(arg('n') ?? 100_000);
const EFS = (arg('efs') ?? '64,128').split(',').map(Number);
const ROUNDS = Number(arg('rounds') ?? 6);
const SECONDS = Number(arg('seconds') ?? 4);
const CONCURRENCY = Number(arg('concurrency') ?? 8);
const TAG = arg('tag') ?? today();
const SNAPSHOT_FIRST = process.argv.includes('--snapshot-first');
const QUERIES = 1000;

interface Pass {
  qps: number;
  mainUs: number;
  otherUs: number;
  wrkUs: number;
}

interface Side {
  name: 'base' | 'this';
  root: string;
  server: QuiverServer;
  passes: Map<number, Pass[]>;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

async function waitGreen(url: string, n: number): Promise<void> {
  const c = makeClient('raw', url, 1);
  try {
    for (;;) {
      const r = await c.json<{ status: string; points_count: number }>('GET', '/collections/bench');
      if (r.status === 'green' && r.points_count === n) return;
      await new Promise((res) => setTimeout(res, 250));
    }
  } finally {
    c.close();
  }
}

async function main(): Promise<void> {
  if (!BASE) throw new Error('--base <checkout> is required (a built checkout to compare with)');
  const wrk = findWrk();
  if ('missing' in wrk) throw new Error(wrk.missing);
  const eopts = parseArgs([]);
  const ds = loadDataset('synthetic', eopts);
  if ('skipped' in ds) throw new Error(`synthetic data set: ${ds.skipped}`);
  const dim = ds.dim;
  const loadAtStart = os.loadavg();
  const coresAtStart = await coresAvailable();

  // One storage, loaded and indexed once, copied for each server.
  const loader = await QuiverServer.start({ nodeArgs: [], keepStorage: true, env: {} });
  const t0 = performance.now();
  try {
    const c = makeClient('raw', loader.url, 1);
    await c.json('PUT', '/collections/bench', { vectors: { size: dim, distance: 'Cosine' }, hnsw_config: { m: 16, ef_construct: 100 } });
    for (let at = 0; at < N; at += 1000) {
      const points = [];
      for (let i = at; i < Math.min(N, at + 1000); i++) points.push({ id: i, vector: Array.from(ds.base.subarray(i * dim, (i + 1) * dim)) });
      await c.json('PUT', '/collections/bench/points?wait=true', { points });
    }
    c.close();
    await waitGreen(loader.url, N);
  } finally {
    await loader.stop();
  }
  const storage = path.join(loader.dir, 'storage');
  console.log(`loaded and indexed ${N} points in ${((performance.now() - t0) / 1000).toFixed(1)} s`);

  const files = new Map<number, { script: string; bodiesFile: string }>();
  for (const ef of EFS) {
    const bodies: Buffer[] = [];
    for (let i = 0; i < QUERIES; i++) bodies.push(Buffer.from(`{"query":${JSON.stringify(Array.from(ds.queries.subarray(i * dim, (i + 1) * dim)))},"limit":10,"params":{"hnsw_ef":${ef}}}`));
    files.set(ef, prepareWrk(path.join(loader.dir, 'wrk'), `ef${ef}`, bodies));
  }

  const sides: Side[] = [];
  try {
    for (const [name, root] of [
      ['base', path.resolve(BASE)],
      ['this', REPO_ROOT],
    ] as const) {
      const server = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: {}, root, storageFrom: storage });
      sides.push({ name, root, server, passes: new Map() });
      await waitGreen(server.url, N);
      if (SNAPSHOT_FIRST) {
        const c = makeClient('raw', server.url, 1);
        try {
          await c.json('POST', '/collections/bench/snapshots?wait=true');
        } finally {
          c.close();
        }
      }
    }
    const pass = (s: Side, ef: number, seconds: number) =>
      runWrk({ url: s.server.url, path: '/collections/bench/points/query', ...files.get(ef)!, connections: CONCURRENCY, seconds });
    for (const s of sides) for (const ef of EFS) await pass(s, ef, 2);
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? sides : [...sides].reverse();
      for (const ef of EFS) {
        for (const s of order) {
          const c0 = s.server.cpu();
          const w = await pass(s, ef, SECONDS);
          const d = cpuDelta(c0, s.server.cpu())!;
          const p: Pass = { qps: w.qps, mainUs: (d.mainSec * 1e6) / w.requests, otherUs: (d.otherSec * 1e6) / w.requests, wrkUs: (w.clientCpuSec * 1e6) / w.requests };
          if (!s.passes.has(ef)) s.passes.set(ef, []);
          s.passes.get(ef)!.push(p);
          console.log(`round ${round + 1} ef ${ef} ${s.name}: ${p.qps.toFixed(0)} q/s, server CPU µs/request main ${p.mainUs.toFixed(1)} other ${p.otherUs.toFixed(1)}, wrk ${p.wrkUs.toFixed(1)} (load ${os.loadavg()[0].toFixed(2)})`);
        }
      }
    }
  } finally {
    for (const s of sides) await s.server.stop();
    fs.rmSync(loader.dir, { recursive: true, force: true });
  }

  const [base, mine] = sides;
  const f = (x: number, d = 1) => x.toFixed(d);
  const rows: string[] = [];
  for (const ef of EFS) {
    const a = base.passes.get(ef)!;
    const b = mine.passes.get(ef)!;
    const m = (ps: Pass[], k: (p: Pass) => number) => median(ps.map(k));
    const row = (what: string, k: (p: Pass) => number, d: number) => `| ${ef} | ${what} | ${f(m(a, k), d)} | ${f(m(b, k), d)} | ${f(m(b, k) / m(a, k), 3)} |`;
    rows.push(row('queries/s', (p) => p.qps, 0));
    rows.push(row('server CPU µs/request, main thread', (p) => p.mainUs, 1));
    rows.push(row('server CPU µs/request, other threads', (p) => p.otherUs, 1));
    rows.push(row('server CPU µs/request, total', (p) => p.mainUs + p.otherUs, 1));
    rows.push(row('wrk CPU µs/request', (p) => p.wrkUs, 1));
  }
  const perPass = EFS.map((ef) => `- ef ${ef}: ` + base.passes.get(ef)!.map((p, i) => { const q = mine.passes.get(ef)![i]; return `${f(p.qps, 0)}/${f(q.qps, 0)} q/s, ${f(p.mainUs + p.otherUs)}/${f(q.mainUs + q.otherUs)} µs`; }).join('; ')).join('\n');
  const md = [
    `# Query path of two builds side by side, wrk (${TAG})`,
    '',
    `\`node dist/bench/rest/ab-query.js --base ${BASE} --n ${N} --efs ${EFS.join(',')} --rounds ${ROUNDS} --seconds ${SECONDS} --concurrency ${CONCURRENCY}${SNAPSHOT_FIRST ? ' --snapshot-first' : ''}\``,
    '',
    `${N.toLocaleString('en-US')} points of the synthetic set (128-d, Cosine, m=16, ef_construct=100), both servers on copies of one indexed storage${SNAPSHOT_FIRST ? ', each after taking a snapshot of the collection' : ''}; wrk -t1 -c${CONCURRENCY}, ${SECONDS} s per pass, the 1000 query bodies of bench:rest; passes alternate between the builds (order flipped every round). Machine: ${os.cpus().length} cores (${os.cpus()[0]?.model ?? 'unknown'}), shared with other work: load average ${loadAtStart.map((x) => x.toFixed(2)).join(' ')} at start, ${os.loadavg().map((x) => x.toFixed(2)).join(' ')} at end; cores this process could get ≈ ${coresAtStart.toFixed(2)} at start. Medians of ${ROUNDS} rounds; server CPU from /proc (main thread apart from all other threads: engine pool, V8 helpers).`,
    '',
    '| ef | measure | base | this | this / base |',
    '|---:|---|---:|---:|---:|',
    ...rows,
    '',
    'Per pass (base/this), queries/s and server CPU µs/request:',
    '',
    perPass,
    '',
  ].join('\n');
  console.log(md);
  const out = path.join(REPO_ROOT, 'bench', 'results', `ab-query-${TAG}.md`);
  fs.writeFileSync(out, md);
  console.log(`written ${path.relative(REPO_ROOT, out)}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
