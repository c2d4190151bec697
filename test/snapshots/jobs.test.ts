/**
 * Snapshot jobs (ours: ts/snapshots/jobs.ts) against a live bin/quiver: `wait=false` on
 * collection, shard and full snapshot creation and on recovery answers the reference's
 * 202 `{"status": "accepted", "time"}` (no `result`) plus `job_id` and a `Location`;
 * `GET /snapshots/jobs[/{id}]` shows state, phase, bytes done and total, rate, ETA and
 * error; the final byte count equals the size of the archive file on disk; progress
 * reaches the API while the job writes (sampled) and the metrics; a failed recovery is a
 * failed job with its error; a job cut by a kill is failed after the restart, never
 * running; unknown ids are 404; the routes need global read.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import test from 'ava';

import { startQuiver, type RunningQuiver } from '../api/helpers';
import { waitFor } from '../support/wait';

const API_KEY = 'jobs-test-api-key-0123456789abcdef';
const DIM = 64;

let dir: string;
let storage: string;
let snapshotsPath: string;
let server: RunningQuiver;

const env = () => ({
  SERVICE__SERVICE__API_KEY: API_KEY,
  SERVICE__SERVICE__READ_ONLY_API_KEY: 'jobs-test-read-only',
  SERVICE__STORAGE__STORAGE_PATH: storage,
  SERVICE__STORAGE__SNAPSHOTS_PATH: snapshotsPath,
});

interface Reply {
  status: number;
  headers: Headers;
  json: any;
  text: string;
}

async function call(method: string, p: string, body?: unknown, key = API_KEY): Promise<Reply> {
  const res = await fetch(server.url + p, {
    method,
    headers: { 'api-key': key, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(120_000),
  });
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, headers: res.headers, json, text };
}

async function ok(method: string, p: string, body?: unknown): Promise<any> {
  const r = await call(method, p, body);
  if (r.status !== 200) throw new Error(`${method} ${p}: HTTP ${r.status} ${r.text.slice(0, 300)}`);
  return r.json.result;
}

/** A collection of `n` points with DIM-dimensional vectors (deterministic). */
async function fill(name: string, n: number, shards = 1): Promise<void> {
  await ok('PUT', `/collections/${name}`, { vectors: { size: DIM, distance: 'Cosine' }, shard_number: shards });
  let seed = 7;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648) - 0.5;
  for (let from = 0; from < n; from += 2000) {
    const points = [];
    for (let id = from; id < Math.min(n, from + 2000); id++) points.push({ id, vector: Array.from({ length: DIM }, rnd), payload: { n: id, tag: `t${id % 10}` } });
    await ok('PUT', `/collections/${name}/points?wait=true`, { points });
  }
}

/** Starts a job with wait=false: checks the 202 and returns the job id. */
async function startJob(t: import('ava').ExecutionContext, method: string, p: string, body?: unknown): Promise<string> {
  const r = await call(method, `${p}${p.includes('?') ? '&' : '?'}wait=false`, body);
  t.is(r.status, 202, r.text);
  t.is(r.json.status, 'accepted');
  t.is(typeof r.json.time, 'number');
  t.false('result' in r.json, 'the reference 202 has no result');
  t.regex(r.json.job_id, /^[0-9a-f-]{36}$/);
  t.is(r.headers.get('location'), `/snapshots/jobs/${r.json.job_id}`);
  return r.json.job_id as string;
}

/** Polls the job until it ends; returns its last view and the views seen while it ran. */
async function follow(id: string): Promise<{ last: any; samples: Array<{ at: number; view: any }> }> {
  const samples: Array<{ at: number; view: any }> = [];
  const last = await waitFor(
    `job ${id} to end`,
    async () => {
      const view = await ok('GET', `/snapshots/jobs/${id}`);
      samples.push({ at: Date.now(), view });
      return view.state === 'running' ? null : view;
    },
    120_000,
    20,
  );
  return { last, samples };
}

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-jobs-'));
  storage = path.join(dir, 'storage');
  snapshotsPath = path.join(dir, 'snapshots');
  server = await startQuiver(env());
  await fill('big', 60_000);
  await fill('sharded', 6_000, 3);
});

test.after.always(async () => {
  await server?.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

test.serial('collection snapshot job: 202 with job_id; progress while writing; final bytes equal the file size', async (t) => {
  const id = await startJob(t, 'POST', '/collections/big/snapshots');
  const { last, samples } = await follow(id);
  t.is(last.state, 'completed', JSON.stringify(last));
  t.is(last.kind, 'create_collection_snapshot');
  t.is(last.collection, 'big');
  t.is(last.phase, 'done');
  t.is(last.error, null);
  t.is(last.eta_sec, 0);
  const file = path.join(snapshotsPath, 'big', last.result.name);
  const size = fs.statSync(file).size;
  t.is(last.bytes_done, size, 'bytes done = the archive file size');
  t.is(last.bytes_total, size, 'the total announced = the archive file size (exact tar size)');
  t.is(last.result.size, size);
  t.true(last.rate_bytes_per_sec > 0);
  t.is(typeof last.started_at, 'string');
  t.true(Date.parse(last.finished_at) >= Date.parse(last.started_at));
  // Listed as a snapshot, as a wait=true one would be.
  t.true((await ok('GET', '/collections/big/snapshots')).some((s: any) => s.name === last.result.name));
  // While running: phases seen are the documented ones; bytes never exceed the total
  // and never go back within a phase; the total of the writing phase is the final size.
  const running = samples.filter((s) => s.view.state === 'running');
  for (const s of running) {
    t.true(['starting', 'pinning', 'writing', 'storing'].includes(s.view.phase), s.view.phase);
    if (s.view.bytes_total !== null) t.true(s.view.bytes_done <= s.view.bytes_total);
    if (s.view.phase === 'writing') t.is(s.view.bytes_total, size);
  }
  for (let i = 1; i < running.length; i++) {
    if (running[i].view.phase === running[i - 1].view.phase) t.true(running[i].view.bytes_done >= running[i - 1].view.bytes_done);
  }
  // The API shows live progress: whenever read while writing, the progress is less than
  // a second old.
  const writing = running.filter((s) => s.view.phase === 'writing');
  for (const s of writing) t.true(s.at - Date.parse(s.view.updated_at) < 1000, `progress at most a second old when read (${s.at - Date.parse(s.view.updated_at)} ms)`);
  t.log(`${size} bytes; ${running.length} samples while running, ${writing.length} while writing; ${last.rate_bytes_per_sec} B/s`);
});

test.serial('shard and full snapshot jobs: completed, bytes equal the file size; the list shows newest first', async (t) => {
  const shard = await startJob(t, 'POST', '/collections/sharded/shards/1/snapshots');
  const full = await startJob(t, 'POST', '/snapshots');
  const s = (await follow(shard)).last;
  const f = (await follow(full)).last;
  t.is(s.state, 'completed', JSON.stringify(s));
  t.is(s.kind, 'create_shard_snapshot');
  t.is(s.origin, 'api');
  t.is(s.due, null, 'a shard snapshot the API asked for is no scheduled run');
  t.is(s.shard_id, 1);
  t.is(s.bytes_done, fs.statSync(path.join(snapshotsPath, 'sharded', 'shards', '1', s.result.name)).size);
  t.is(f.state, 'completed', JSON.stringify(f));
  t.is(f.kind, 'create_full_snapshot');
  t.is(f.collection, null);
  t.is(f.bytes_done, fs.statSync(path.join(snapshotsPath, f.result.name)).size);
  t.is(f.bytes_total, f.bytes_done);
  const list = (await ok('GET', '/snapshots/jobs')).jobs;
  t.true(list.length >= 3);
  const ids = list.map((j: any) => j.id);
  t.true(ids.indexOf(full) < ids.indexOf(shard), 'newest first');
  for (let i = 1; i < list.length; i++) t.true(Date.parse(list[i - 1].started_at) >= Date.parse(list[i].started_at));
});

test.serial('recovery jobs: from a file location (bytes = the archive), and a failed one with its error', async (t) => {
  const snap = await ok('POST', '/collections/sharded/snapshots');
  const file = path.join(snapshotsPath, 'sharded', snap.name);
  const id = await startJob(t, 'PUT', '/collections/sharded_copy/snapshots/recover', { location: `file://${file}`, priority: 'snapshot' });
  const { last, samples } = await follow(id);
  t.is(last.state, 'completed', JSON.stringify(last));
  t.is(last.kind, 'recover_collection_snapshot');
  t.is(last.result, true);
  t.is(last.bytes_done, fs.statSync(file).size);
  t.is(last.bytes_total, last.bytes_done);
  for (const s of samples.filter((x) => x.view.state === 'running')) t.true(['starting', 'unpacking', 'validating', 'applying'].includes(s.view.phase), s.view.phase);
  t.is((await ok('POST', '/collections/sharded_copy/points/count', { exact: true })).count, 6000);

  // A checksum that does not match: the job fails with the error a wait=true call gets.
  const bad = await startJob(t, 'PUT', '/collections/sharded_bad/snapshots/recover', { location: `file://${file}`, checksum: '0'.repeat(64) });
  const b = (await follow(bad)).last;
  t.is(b.state, 'failed');
  t.regex(b.error, /^Checksum mismatch: expected 0{64}, actual [0-9a-f]{64}$/);
  t.false((await ok('GET', '/collections/sharded_bad/exists')).exists, 'nothing recovered');
  // A location that does not exist.
  const gone = (await follow(await startJob(t, 'PUT', '/collections/x/snapshots/recover', { location: `file://${file}.missing` }))).last;
  t.is(gone.state, 'failed');
  t.regex(gone.error, /does not exist/);
  // Shard recovery as a job.
  const shardSnap = await ok('POST', '/collections/sharded/shards/2/snapshots');
  const sj = (await follow(await startJob(t, 'PUT', '/collections/sharded/shards/2/snapshots/recover', { location: `file://${path.join(snapshotsPath, 'sharded', 'shards', '2', shardSnap.name)}` }))).last;
  t.is(sj.state, 'completed', JSON.stringify(sj));
  t.is(sj.kind, 'recover_shard_snapshot');
  t.is(sj.shard_id, 2);
});

test.serial('metrics, logs, 404 for an unknown job, global read needed; bad requests are still refused before any job', async (t) => {
  // The running-jobs gauge is set on each progress tick, so it may still count the job the
  // previous test just saw end: wait for the tick.
  const metrics = await waitFor(
    'the snapshot_jobs_running gauge back at 0',
    async () => {
      const text = (await call('GET', '/metrics')).text;
      return /snapshot_jobs_running 0/.test(text) ? text : null;
    },
    30_000,
  );
  t.regex(metrics, /snapshot_jobs_finished_total\{kind="create_collection_snapshot",state="completed"\} [1-9]/);
  t.regex(metrics, /snapshot_jobs_finished_total\{kind="recover_collection_snapshot",state="failed"\} [1-9]/);
  t.regex(metrics, /snapshot_job_bytes_total\{kind="create_collection_snapshot"\} [1-9]/);
  t.regex(metrics, /snapshot_jobs_running 0/);
  t.true(server.logLines().some((l) => l.msg === 'snapshot job completed'));
  t.true(server.logLines().some((l) => l.msg === 'snapshot job failed'));
  const missing = await call('GET', '/snapshots/jobs/00000000-0000-0000-0000-000000000000');
  t.is(missing.status, 404);
  t.regex(missing.json.status.error, /Snapshot job 00000000-0000-0000-0000-000000000000 not found/);
  t.is((await call('GET', '/snapshots/jobs', undefined, 'jobs-test-read-only')).status, 200, 'the read-only key reads jobs');
  t.is((await call('GET', '/snapshots/jobs', undefined, 'wrong')).status, 401);
  // The runs of cluster-mode schedules: 405 on a single node (as the other cluster routes), read access first.
  t.is((await call('GET', '/snapshots/schedules', undefined, 'jobs-test-read-only')).status, 405);
  t.is((await call('GET', '/snapshots/schedules', undefined, 'wrong')).status, 401);
  // Refused at once, no job: an unknown collection, a missing location.
  const before = (await ok('GET', '/snapshots/jobs')).jobs.length;
  t.is((await call('POST', '/collections/nope/snapshots?wait=false')).status, 404);
  t.is((await call('PUT', '/collections/big/snapshots/recover?wait=false', {})).status, 400);
  t.is((await ok('GET', '/snapshots/jobs')).jobs.length, before);
});

test.serial('a job cut by a kill is failed after the restart, never running; finished jobs are kept', async (t) => {
  const done = (await ok('GET', '/snapshots/jobs')).jobs.filter((j: any) => j.state !== 'running').length;
  const r = await call('POST', '/collections/big/snapshots?wait=false');
  t.is(r.status, 202);
  const id = r.json.job_id;
  const view = await ok('GET', `/snapshots/jobs/${id}`);
  await server.stop('SIGKILL');
  server = await startQuiver(env());
  const after = await ok('GET', `/snapshots/jobs/${id}`);
  if (view.state === 'running') {
    t.is(after.state, 'failed', JSON.stringify(after));
    t.is(after.error, 'interrupted: the node stopped while the job ran');
    t.not(after.finished_at, null);
  } else {
    t.log('the job had ended before the kill');
    t.not(after.state, 'running');
  }
  const list = (await ok('GET', '/snapshots/jobs')).jobs;
  t.is(list.filter((j: any) => j.state === 'running').length, 0);
  t.is(list.length, done + 1, 'every earlier job survived the restart');
  // No partial snapshot is listed.
  const names = (await ok('GET', '/collections/big/snapshots')).map((s: any) => s.name);
  for (const n of names) t.true(fs.statSync(path.join(snapshotsPath, 'big', n)).size > 0);

  // A graceful stop while a job runs: recorded failed at the stop.
  const r2 = await call('POST', '/collections/big/snapshots?wait=false');
  const id2 = r2.json.job_id;
  const running = (await ok('GET', `/snapshots/jobs/${id2}`)).state === 'running';
  await server.stop('SIGTERM');
  server = await startQuiver(env());
  const after2 = await ok('GET', `/snapshots/jobs/${id2}`);
  t.not(after2.state, 'running');
  if (running && after2.state === 'failed') t.is(after2.error, 'interrupted: the node stopped while the job ran');
});
