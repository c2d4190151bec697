/**
 * `npm run bench:snapshot-jobs [-- --points 1000000] [--dim 128] [--poll-ms 100] [--out bench/results/snapshot-jobs-<date>]`
 *
 * Progress of snapshot jobs at scale (ts/snapshots/jobs.ts). Starts a real server
 * (bench/rest/server.ts, log level INFO so the progress lines can be counted), loads N
 * random vectors through REST (`indexing_threshold: 0`: no HNSW graph, as
 * bench:snapshots), then:
 *
 *  1. create: `POST /collections/{c}/snapshots?wait=false`, the job polled every
 *     `--poll-ms` through `GET /snapshots/jobs/{id}` until it ends;
 *  2. recover: `PUT /collections/{c2}/snapshots/recover?wait=false` from that file
 *     (file://, priority snapshot), polled the same way.
 *
 * For each: the job's duration and phases (first and last time each was seen), the
 * largest age of the progress when read (now − `updated_at`) over all polls while the
 * job ran and over those of its byte phase (`writing` / `unpacking`), the largest gap
 * between two polls whose `bytes_done` differ within the byte phase, the number of
 * "snapshot job progress" log lines, whether `/metrics` showed the job while it ran, and
 * whether the final `bytes_done` (and `bytes_total`) equal the archive file's size.
 *
 * Must hold (issue 21): progress at least once a second (in every phase: pinning and
 * applying count their own units); final bytes = file size.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { REPO_ROOT, today } from '../engine/common';
import { RawClient, runConcurrent } from '../rest/client';
import { QuiverServer } from '../rest/server';

interface Options {
  points: number;
  dim: number;
  batch: number;
  concurrency: number;
  pollMs: number;
  out: string;
}

function parseOptions(argv: string[]): Options {
  const o: Options = { points: 1_000_000, dim: 128, batch: 1000, concurrency: 3, pollMs: 100, out: path.join(REPO_ROOT, 'bench', 'results', `snapshot-jobs-${today()}`) };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[++i];
    const n = Number(String(v).replace(/[_,]/g, ''));
    if (a === '--out') o.out = path.resolve(v);
    else if (a === '--points') o.points = n;
    else if (a === '--dim') o.dim = n;
    else if (a === '--batch') o.batch = n;
    else if (a === '--concurrency') o.concurrency = n;
    else if (a === '--poll-ms') o.pollMs = n;
    else throw new Error(`unknown option ${a}`);
    if (a !== '--out' && (!Number.isInteger(n) || n <= 0)) throw new Error(`${a}: expected a positive integer, got ${v}`);
  }
  return o;
}

function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function batchBody(b: number, o: Options, pool: string[]): Buffer {
  const rand = prng(0x5eed + b);
  const parts: string[] = [];
  const row: string[] = new Array(o.dim);
  for (let id = b * o.batch; id < Math.min(o.points, (b + 1) * o.batch); id++) {
    for (let j = 0; j < o.dim; j++) row[j] = pool[(rand() * 65536) & 65535];
    parts.push(`{"id":${id},"vector":[${row.join(',')}],"payload":{"i":${id},"tag":"t${id % 100}"}}`);
  }
  return Buffer.from(`{"points":[${parts.join(',')}]}`);
}

interface Sample {
  at: number;
  state: string;
  phase: string;
  bytes_done: number;
  bytes_total: number | null;
  updated_at: string;
  unit?: string | null;
  units_done?: number | null;
  rate_bytes_per_sec: number;
  eta_sec: number | null;
}

interface JobFigures {
  what: string;
  seconds: number;
  polls: number;
  /** Per phase: first and last time seen, the largest age of its progress when read, its unit and the last units seen. */
  phases: Record<string, { firstSec: number; lastSec: number; maxAgeMs: number; unit: string | null; units: number | null }>;
  /** Largest now − updated_at when read, over every poll while running / over the byte phase's polls. */
  maxAgeMsRunning: number;
  maxAgeMsBytePhase: number;
  /** Largest time between two polls with different bytes_done, within the byte phase. */
  maxGapMsBytePhase: number;
  progressLogLines: number;
  metricsSeenRunning: boolean;
  finalState: string;
  bytesDone: number;
  bytesTotal: number | null;
  fileSize: number;
  bytesEqualFile: boolean;
  rateMiBps: number;
  error: string | null;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function followJob(client: RawClient, server: QuiverServer, id: string, o: Options, bytePhase: string, what: string, fileOf: (last: any) => string, logLines: () => number): Promise<JobFigures> {
  const samples: Sample[] = [];
  const started = Date.now();
  const logsBefore = logLines();
  let metricsSeenRunning = false;
  let last: any;
  for (;;) {
    last = await client.json<any>('GET', `/snapshots/jobs/${id}`);
    samples.push({ at: Date.now(), ...last });
    if (last.state !== 'running') break;
    if (!metricsSeenRunning && samples.length % 10 === 0) {
      const m = await client.request('GET', '/metrics');
      metricsSeenRunning = m.body.toString('utf8').includes(`snapshot_job_bytes_done{job_id="${id}"`);
    }
    await sleep(o.pollMs);
  }
  const running = samples.filter((s) => s.state === 'running');
  const byte = running.filter((s) => s.phase === bytePhase);
  const phases: JobFigures['phases'] = {};
  for (const s of running) {
    const sec = (s.at - started) / 1000;
    phases[s.phase] ??= { firstSec: sec, lastSec: sec, maxAgeMs: 0, unit: null, units: null };
    const ph = phases[s.phase];
    ph.lastSec = sec;
    ph.maxAgeMs = Math.max(ph.maxAgeMs, s.at - Date.parse(s.updated_at));
    ph.unit = s.unit ?? null;
    ph.units = s.units_done ?? null;
  }
  let maxGap = 0;
  let lastChange = byte[0]?.at ?? 0;
  for (let i = 1; i < byte.length; i++) {
    if (byte[i].bytes_done !== byte[i - 1].bytes_done) {
      maxGap = Math.max(maxGap, byte[i].at - lastChange);
      lastChange = byte[i].at;
    }
  }
  const age = (s: Sample) => s.at - Date.parse(s.updated_at);
  const file = fileOf(last);
  const fileSize = fs.statSync(file).size;
  const seconds = (Date.parse(last.finished_at ?? new Date().toISOString()) - Date.parse(last.started_at)) / 1000;
  void server;
  return {
    what,
    seconds: +seconds.toFixed(2),
    polls: samples.length,
    phases,
    maxAgeMsRunning: Math.max(0, ...running.map(age)),
    maxAgeMsBytePhase: Math.max(0, ...byte.map(age)),
    maxGapMsBytePhase: maxGap,
    progressLogLines: logLines() - logsBefore,
    metricsSeenRunning,
    finalState: last.state,
    bytesDone: last.bytes_done,
    bytesTotal: last.bytes_total,
    fileSize,
    bytesEqualFile: last.bytes_done === fileSize && last.bytes_total === fileSize,
    rateMiBps: +(last.rate_bytes_per_sec / 1048576).toFixed(1),
    error: last.error,
  };
}

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2));
  console.log(`bench:snapshot-jobs: ${o.points.toLocaleString('en-US')} points × ${o.dim}-d, polls every ${o.pollMs} ms`);
  const server = await QuiverServer.start({ nodeArgs: [], keepStorage: false, env: { SERVICE__LOG_LEVEL: 'INFO' } });
  process.once('exit', () => server.killNow());
  // Count progress lines from the server's stdout (its own tail keeps only 40 lines).
  let progressLines = 0;
  const child = (server as unknown as { child: import('child_process').ChildProcess }).child;
  child.stdout?.on('data', (c: Buffer) => {
    progressLines += c.toString('utf8').split('snapshot job progress').length - 1;
  });
  const client = new RawClient(server.url);
  const c = 'bench_jobs';
  try {
    await client.json('PUT', `/collections/${c}`, { vectors: { size: o.dim, distance: 'Cosine' }, optimizers_config: { indexing_threshold: 0 } });
    const pool = Array.from({ length: 65536 }, (_, i) => (prng(42 + i)() * 2 - 1).toFixed(5));
    const loadStart = Date.now();
    await runConcurrent(Math.ceil(o.points / o.batch), o.concurrency, async (b) => {
      const r = await client.request('PUT', `/collections/${c}/points?wait=true`, batchBody(b, o, pool));
      if (r.status !== 200) throw new Error(`upsert: HTTP ${r.status}`);
    });
    const loadSec = (Date.now() - loadStart) / 1000;
    console.log(`  loaded in ${loadSec.toFixed(1)} s`);

    const start = async (method: string, p: string, body?: unknown) => {
      const r = await client.request(method, p, body === undefined ? undefined : Buffer.from(JSON.stringify(body)));
      if (r.status !== 202) throw new Error(`${method} ${p}: HTTP ${r.status} ${r.body.toString('utf8').slice(0, 300)}`);
      return (JSON.parse(r.body.toString('utf8')) as { job_id: string }).job_id;
    };
    const snapshotsDir = path.join(server.dir, 'snapshots');
    const createId = await start('POST', `/collections/${c}/snapshots?wait=false`);
    const create = await followJob(client, server, createId, o, 'writing', '1. create (wait=false)', (l) => path.join(snapshotsDir, c, l.result.name), () => progressLines);
    console.log(JSON.stringify(create));
    const createJob = await client.json<any>('GET', `/snapshots/jobs/${createId}`);
    const archive = path.join(snapshotsDir, c, createJob.result.name);
    const recoverId = await start('PUT', `/collections/${c}_recovered/snapshots/recover?wait=false`, { location: `file://${archive}`, priority: 'snapshot' });
    const recover = await followJob(client, server, recoverId, o, 'unpacking', '2. recover file:// (wait=false)', () => archive, () => progressLines);
    console.log(JSON.stringify(recover));
    const count = await client.json<{ count: number }>('POST', `/collections/${c}_recovered/points/count`, { exact: true });

    const rows = [create, recover];
    const holds = rows.every((r) => r.finalState === 'completed' && r.bytesEqualFile && r.maxAgeMsRunning <= 1000) && count.count === o.points;
    const md = [
      `# Snapshot jobs: progress at ${o.points.toLocaleString('en-US')} points (${today()})`,
      '',
      `\`npm run bench:snapshot-jobs -- --points ${o.points} --dim ${o.dim} --poll-ms ${o.pollMs}\`: ${o.points.toLocaleString('en-US')} points × ${o.dim}-d, Cosine, small payloads, no HNSW (indexing_threshold 0), loaded through REST in ${loadSec.toFixed(1)} s; jobs polled every ${o.pollMs} ms through \`GET /snapshots/jobs/{id}\`. Machine: ${os.cpus().length} cores, shared with other work (load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')} at the end).`,
      '',
      '| job | seconds | MiB/s | polls | phases seen (s from start: first–last; max progress age in ms; units counted) | max progress age while running (ms) | max progress age in its byte phase (ms) | max gap between byte changes (ms) | progress log lines | metrics showed it running | final bytes | file size | equal |',
      '|---|---|---|---|---|---|---|---|---|---|---|---|---|',
      ...rows.map(
        (r) =>
          `| ${r.what} | ${r.seconds} | ${r.rateMiBps} | ${r.polls} | ${Object.entries(r.phases)
            .map(([k, v]) => `${k} ${v.firstSec.toFixed(1)}–${v.lastSec.toFixed(1)} (age ≤ ${v.maxAgeMs} ms${v.unit === null ? '' : `; ${v.units?.toLocaleString('en-US')} ${v.unit}`})`)
            .join('; ')} | ${r.maxAgeMsRunning} | ${r.maxAgeMsBytePhase} | ${r.maxGapMsBytePhase} | ${r.progressLogLines} | ${r.metricsSeenRunning ? 'yes' : 'no'} | ${r.bytesDone} | ${r.fileSize} | ${r.bytesEqualFile ? 'yes' : '**no**'} |`,
      ),
      '',
      `Recovered collection: ${count.count.toLocaleString('en-US')} points (expected ${o.points.toLocaleString('en-US')}).`,
      '',
      `Must hold (progress at least once a second in every phase while the job runs, final bytes = file size, state completed): **${holds ? 'met' : 'not met'}**.`,
      '',
    ].join('\n');
    fs.mkdirSync(path.dirname(o.out), { recursive: true });
    fs.writeFileSync(`${o.out}.md`, md);
    fs.writeFileSync(`${o.out}.json`, JSON.stringify({ options: o, loadSec, rows, recoveredPoints: count.count, holds }, null, 2));
    console.log(md);
    console.log(`written: ${o.out}.md, ${o.out}.json`);
  } finally {
    client.close();
    await server.stop();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
