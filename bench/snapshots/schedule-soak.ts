/**
 * `npm run bench:snapshot-schedule [-- --seconds 300] [--interval 10] [--keep 3] [--points 200000] [--dim 128] [--out bench/results/snapshot-schedule-<date>]`
 *
 * The issue-21 check of scheduled snapshots, on a real server (bench/rest/server.ts):
 *
 *  1. A schedule of collection `soak` every `--interval` s keeping the last `--keep`
 *     runs for `--seconds`. Then (after the retention of the last run): exactly `--keep`
 *     snapshots are listed, the newest ones the schedule made, and each recovers into a
 *     new collection with every point.
 *  2. The node is killed (SIGKILL) while a scheduled run is writing its archive, and
 *     started again on the same storage: no partial snapshot is listed (every listed name
 *     is one a completed run made, and the newest recovers with every point), the cut job
 *     shows failed, and the missed run runs at start.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { REPO_ROOT, today } from '../engine/common';
import { RawClient, runConcurrent } from '../rest/client';
import { QuiverServer } from '../rest/server';

interface Options {
  seconds: number;
  interval: number;
  keep: number;
  points: number;
  dim: number;
  out: string;
}

function parseOptions(argv: string[]): Options {
  const o: Options = { seconds: 300, interval: 10, keep: 3, points: 200_000, dim: 128, out: path.join(REPO_ROOT, 'bench', 'results', `snapshot-schedule-${today()}`) };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = argv[++i];
    if (a === '--out') {
      o.out = path.resolve(v);
      continue;
    }
    const n = Number(String(v).replace(/[_,]/g, ''));
    if (!Number.isInteger(n) || n <= 0) throw new Error(`${a}: expected a positive integer, got ${v}`);
    if (a === '--seconds') o.seconds = n;
    else if (a === '--interval') o.interval = n;
    else if (a === '--keep') o.keep = n;
    else if (a === '--points') o.points = n;
    else if (a === '--dim') o.dim = n;
    else throw new Error(`unknown option ${a}`);
  }
  return o;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitUntil<T>(what: string, probe: () => Promise<T | null | false>, timeoutMs: number, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(everyMs);
  }
}

function body(from: number, to: number, dim: number): Buffer {
  const parts: string[] = [];
  for (let id = from; id < to; id++) {
    const v = Array.from({ length: dim }, (_, j) => (((id * 31 + j * 17) % 1000) / 1000 - 0.5).toFixed(3));
    parts.push(`{"id":${id},"vector":[${v.join(',')}],"payload":{"i":${id}}}`);
  }
  return Buffer.from(`{"points":[${parts.join(',')}]}`);
}

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2));
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-schedule-soak-'));
  const storage = path.join(base, 'storage');
  const snaps = path.join(base, 'snapshots');
  const env = {
    SERVICE__LOG_LEVEL: 'INFO',
    SERVICE__STORAGE__STORAGE_PATH: storage,
    SERVICE__STORAGE__SNAPSHOTS_PATH: snaps,
    SERVICE__SNAPSHOTS__SCHEDULE: JSON.stringify([{ collection: 'soak', interval_sec: o.interval, keep_last: o.keep }]),
  };
  const lines: string[] = [];
  const say = (s: string) => {
    console.log(s);
    lines.push(s);
  };
  let server = await QuiverServer.start({ nodeArgs: [], keepStorage: true, env });
  let client = new RawClient(server.url);
  const json = <T>(method: string, p: string, b?: unknown) => client.json<T>(method, p, b);
  const scheduled = async () => (await json<{ jobs: any[] }>('GET', '/snapshots/jobs')).jobs.filter((j) => j.origin === 'schedule').reverse();
  const listed = async () => (await json<any[]>('GET', '/collections/soak/snapshots')).map((s) => s.name as string);
  const recoverable = async (name: string, into: string) => {
    await json('PUT', `/collections/${into}/snapshots/recover`, { location: `file://${path.join(snaps, 'soak', name)}`, priority: 'snapshot' });
    const n = (await json<{ count: number }>('POST', `/collections/${into}/points/count`, { exact: true })).count;
    await json('DELETE', `/collections/${into}`);
    return n;
  };
  const checks: Array<[string, boolean]> = [];
  try {
    await json('PUT', '/collections/soak', { vectors: { size: o.dim, distance: 'Cosine' }, optimizers_config: { indexing_threshold: 0 } });
    await runConcurrent(Math.ceil(o.points / 1000), 3, async (b) => {
      const r = await client.request('PUT', '/collections/soak/points?wait=true', body(b * 1000, Math.min(o.points, (b + 1) * 1000), o.dim));
      if (r.status !== 200) throw new Error(`upsert: HTTP ${r.status}`);
    });
    say(`schedule: soak every ${o.interval} s, keep_last ${o.keep}; ${o.points.toLocaleString('en-US')} points × ${o.dim}-d; running ${o.seconds} s`);
    const t0 = Date.now();
    while (Date.now() - t0 < o.seconds * 1000) await sleep(1000);
    // The run in progress at the end, and its retention.
    await waitUntil('no scheduled run in progress', async () => (await scheduled()).every((j) => j.state !== 'running'), 120_000);
    const jobs = await scheduled();
    const completed = jobs.filter((j) => j.state === 'completed');
    await waitUntil('retention of the last run', async () => (await listed()).length === o.keep, 30_000);
    const names = await listed();
    const newest = completed.slice(-o.keep).map((j) => j.result.name);
    say(`1. after ${o.seconds} s: ${completed.length} runs completed, ${jobs.length - completed.length} failed; listed ${names.length}: ${names.join(', ')}`);
    checks.push([`exactly ${o.keep} snapshots remain`, names.length === o.keep]);
    checks.push([`they are the newest ${o.keep} the schedule made`, names.every((n) => newest.includes(n))]);
    for (const [i, n] of names.entries()) {
      const count = await recoverable(n, `soak_r${i}`);
      say(`   ${n}: ${fs.statSync(path.join(snaps, 'soak', n)).size} bytes, recovered ${count} points`);
      checks.push([`${n} recovers every point`, count === o.points]);
    }

    // 2. Kill during a scheduled run's writing phase.
    const cut = await waitUntil('a scheduled run writing its archive', async () => (await scheduled()).find((j) => j.state === 'running' && j.phase === 'writing') ?? null, (o.interval + 30) * 1000, 20);
    server.killNow();
    await server.stop();
    say(`2. killed (SIGKILL) while job ${cut.id} was writing (${cut.bytes_done} of ${cut.bytes_total} bytes)`);
    const completedBefore = new Set(completed.map((j) => j.result.name));
    client.close();
    const restarted = Date.now();
    server = await QuiverServer.start({ nodeArgs: [], keepStorage: true, env });
    client = new RawClient(server.url);
    const after = await listed();
    const cutView = await json<any>('GET', `/snapshots/jobs/${cut.id}`);
    say(`   after the restart: listed ${after.join(', ')}; the cut job is ${cutView.state} (${cutView.error})`);
    // Names the schedule completed before the kill, plus any run made since the restart (the missed one).
    const sinceRestart = (await scheduled()).filter((j) => Date.parse(j.started_at) >= restarted);
    const madeSince = new Set(sinceRestart.filter((j) => j.state === 'completed').map((j) => j.result.name));
    checks.push(['no partial snapshot listed after the kill', after.every((n) => completedBefore.has(n) || madeSince.has(n))]);
    checks.push(['the cut job is failed, not running', cutView.state === 'failed']);
    const missed = await waitUntil('the missed run at start', async () => (await scheduled()).find((j) => Date.parse(j.started_at) >= restarted) ?? null, 30_000);
    say(`   missed run started ${Date.parse(missed.started_at) - restarted} ms after the restart`);
    checks.push(['the missed run ran at start (within 5 s)', Date.parse(missed.started_at) - restarted < 5_000]);
    const newestAfter = (await listed()).sort().slice(-1)[0];
    const n = await recoverable(newestAfter, 'soak_after');
    checks.push([`the newest listed after the restart (${newestAfter}) recovers every point`, n === o.points]);
  } finally {
    client.close();
    await server.stop();
    fs.rmSync(base, { recursive: true, force: true });
  }
  const ok = checks.every(([, v]) => v);
  const md = [
    `# Scheduled snapshots: ${o.seconds} s of a ${o.interval} s schedule keeping ${o.keep} (${today()})`,
    '',
    `\`npm run bench:snapshot-schedule -- --seconds ${o.seconds} --interval ${o.interval} --keep ${o.keep} --points ${o.points} --dim ${o.dim}\` on ${os.cpus().length} cores shared with other work (load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')} at the end).`,
    '',
    ...lines.map((l) => `    ${l}`),
    '',
    '| check | result |',
    '|---|---|',
    ...checks.map(([k, v]) => `| ${k} | ${v ? 'yes' : '**no**'} |`),
    '',
    `All held: **${ok ? 'yes' : 'no'}**.`,
    '',
  ].join('\n');
  fs.mkdirSync(path.dirname(o.out), { recursive: true });
  fs.writeFileSync(`${o.out}.md`, md);
  console.log(md);
  if (!ok) process.exitCode = 1;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
