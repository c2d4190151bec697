/**
 * Scheduled snapshots (ours: ts/snapshots/schedule.ts) against a live bin/quiver:
 * - every 2 s with keep_last 3: after 6 runs exactly 3 of the schedule's snapshots are
 *   listed (a snapshot made by hand is untouched), each recoverable with every point;
 * - max_age_sec: older ones go, the newest stays;
 * - a run that fails (its collection is gone) is logged, counted and retried with
 *   growing gaps (backoff), and deletes nothing; once the collection is back a run
 *   succeeds and retention resumes;
 * - a run missed while the node was down runs at start; the runs are jobs
 *   (origin "schedule") in GET /snapshots/jobs; metrics count them.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import test from 'ava';

import { startQuiver, type RunningQuiver } from '../api/helpers';
import { waitFor } from '../support/wait';

const tmp: string[] = [];
const running: RunningQuiver[] = [];

function dirs(): { storage: string; snaps: string } {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-schedule-'));
  tmp.push(d);
  return { storage: path.join(d, 'storage'), snaps: path.join(d, 'snapshots') };
}

async function start(d: { storage: string; snaps: string }, schedule: unknown[]): Promise<RunningQuiver> {
  const q = await startQuiver({
    SERVICE__STORAGE__STORAGE_PATH: d.storage,
    SERVICE__STORAGE__SNAPSHOTS_PATH: d.snaps,
    SERVICE__SNAPSHOTS__SCHEDULE: JSON.stringify(schedule),
  });
  running.push(q);
  return q;
}

async function call(q: RunningQuiver, method: string, p: string, body?: unknown): Promise<any> {
  const res = await fetch(q.url + p, { method, headers: body === undefined ? {} : { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${method} ${p}: HTTP ${res.status} ${text.slice(0, 300)}`);
  return JSON.parse(text).result;
}

async function fill(q: RunningQuiver, name: string, n: number): Promise<void> {
  await call(q, 'PUT', `/collections/${name}`, { vectors: { size: 4, distance: 'Dot' } });
  const points = Array.from({ length: n }, (_, i) => ({ id: i, vector: [i, 1, 2, 3], payload: { i } }));
  await call(q, 'PUT', `/collections/${name}/points?wait=true`, { points });
}

const scheduledJobs = async (q: RunningQuiver, collection: string | null) =>
  ((await call(q, 'GET', '/snapshots/jobs')).jobs as any[]).filter((j) => j.origin === 'schedule' && j.collection === collection).reverse();

test.after.always(async () => {
  for (const q of running) await q.stop().catch(() => undefined);
  for (const d of tmp) fs.rmSync(d, { recursive: true, force: true });
});

test('every 2 s, keep_last 3: exactly 3 of the schedule snapshots remain, each recoverable; a hand-made one is untouched', async (t) => {
  const d = dirs();
  const q = await start(d, [{ collection: 'c', interval_sec: 2, keep_last: 3 }]);
  await fill(q, 'c', 500);
  const manual = await call(q, 'POST', '/collections/c/snapshots');
  await waitFor('6 completed scheduled runs', async () => (await scheduledJobs(q, 'c')).filter((j) => j.state === 'completed').length >= 6, 60_000, 200);
  // Wait for the retention of the last run (the job ends before retention runs).
  await waitFor('retention after the last run', async () => (await call(q, 'GET', '/collections/c/snapshots')).length === 4, 10_000, 100);
  const listed = (await call(q, 'GET', '/collections/c/snapshots')).map((s: any) => s.name as string);
  t.true(listed.includes(manual.name), 'the snapshot made by hand is kept');
  const scheduled = listed.filter((n: string) => n !== manual.name);
  t.is(scheduled.length, 3);
  // They are the newest three the schedule made.
  const made = (await scheduledJobs(q, 'c')).filter((j) => j.state === 'completed').map((j) => j.result.name);
  for (const n of scheduled) t.true(made.slice(-4).includes(n), `${n} is one of the newest`);
  for (const [i, n] of scheduled.entries()) {
    await call(q, 'PUT', `/collections/r${i}/snapshots/recover`, { location: `file://${path.join(d.snaps, 'c', n)}`, priority: 'snapshot' });
    t.is((await call(q, 'POST', `/collections/r${i}/points/count`, { exact: true })).count, 500, `${n} recovers every point`);
  }
  const metrics = await (await fetch(`${q.url}/metrics`)).text();
  t.regex(metrics, /snapshot_schedule_runs_total\{schedule="collection:c",result="completed"\} ([6-9]|\d\d)/);
  t.regex(metrics, /snapshot_schedule_deleted_total\{schedule="collection:c"\} [1-9]/);
});

test('max_age_sec: older scheduled snapshots go, the newest always stays', async (t) => {
  const d = dirs();
  const q = await start(d, [{ collection: 'm', interval_sec: 1, max_age_sec: 3 }]);
  await fill(q, 'm', 50);
  await waitFor('6 completed runs', async () => (await scheduledJobs(q, 'm')).filter((j) => j.state === 'completed').length >= 6, 60_000, 200);
  await waitFor('old ones deleted', async () => {
    const jobs = (await scheduledJobs(q, 'm')).filter((j) => j.state === 'completed');
    const listed = new Set((await call(q, 'GET', '/collections/m/snapshots')).map((s: any) => s.name));
    // Every snapshot made more than 3 s (+ one run) ago is gone; the newest is listed.
    const old = jobs.filter((j) => Date.now() - Date.parse(j.finished_at) > 5_000);
    return old.length > 0 && old.every((j) => !listed.has(j.result.name)) && listed.has(jobs[jobs.length - 1].result.name);
  }, 30_000, 200);
  t.pass();
});

test('a failing run is retried with backoff and deletes nothing; the collection back, a run succeeds and retention resumes', async (t) => {
  const d = dirs();
  const q = await start(d, [{ collection: 'f', interval_sec: 1, keep_last: 1 }]);
  await fill(q, 'f', 20);
  await waitFor('a first snapshot', async () => (await scheduledJobs(q, 'f')).some((j) => j.state === 'completed'), 30_000, 100);
  const first = (await scheduledJobs(q, 'f')).find((j) => j.state === 'completed').result.name;
  const file = path.join(d.snaps, 'f', first);
  // The collection goes: runs fail.
  await call(q, 'DELETE', '/collections/f');
  await waitFor('4 failed runs', async () => (await scheduledJobs(q, 'f')).filter((j) => j.state === 'failed').length >= 4, 60_000, 200);
  const failed = (await scheduledJobs(q, 'f')).filter((j) => j.state === 'failed');
  const starts = failed.map((j) => Date.parse(j.started_at));
  const gaps = starts.slice(1).map((s, i) => s - starts[i]);
  t.log(`gaps between failed runs: ${gaps.join(', ')} ms`);
  // After the k-th failure the next run is due 1 s x 2^(k-1) after that run ended, so each gap
  // between starts is at least that: 1, 2, 4 s. A lower bound only, since a busy machine
  // delays runs (a ratio between observed gaps failed once, 1642 then 2003 ms); a fixed 1 s
  // retry would give gaps near 1 s and fail the 2 s and 4 s bounds.
  for (const [i, gap] of gaps.entries()) t.true(gap >= 1000 * 2 ** i - 50, `backoff grows: gap ${i + 1} is ${gap} ms, at least ${1000 * 2 ** i} expected (${gaps.join(', ')})`);
  t.regex(failed[failed.length - 1].error, /Collection `f` doesn't exist/);
  t.true(fs.existsSync(file), 'the last good snapshot was not deleted by failed runs');
  // The run's counter and log line follow the job's failed state: wait for them, do not race them.
  const counted = /snapshot_schedule_runs_total\{schedule="collection:f",result="failed"\} ([4-9]|\d\d)/;
  await waitFor('4 failed runs counted', async () => counted.test(await (await fetch(`${q.url}/metrics`)).text()), 30_000, 100);
  await waitFor('the retry logged', () => q.logLines().some((l) => l.msg === 'scheduled snapshot failed: retrying with backoff; no snapshot deleted'), 30_000, 100);
  // Back: the next retry succeeds; keep_last 1 then removes the older snapshot.
  await fill(q, 'f', 20);
  await waitFor('the old snapshot replaced', async () => !fs.existsSync(file) && (await call(q, 'GET', '/collections/f/snapshots')).length === 1, 60_000, 200);
});

test('a run missed while the node was down runs at start; full-storage schedules work', async (t) => {
  const d = dirs();
  const schedule = [{ collection: null, interval_sec: 3, keep_last: 2 }];
  let q = await start(d, schedule);
  await fill(q, 'a', 10);
  await waitFor('a first full snapshot', async () => (await scheduledJobs(q, null)).some((j) => j.state === 'completed'), 30_000, 100);
  const lastOk = Math.max(...(await scheduledJobs(q, null)).filter((j) => j.state === 'completed').map((j) => Date.parse(j.finished_at)));
  await q.stop();
  // Down past the next due time (lastOk + 3 s).
  await waitFor('the clock past the next due time', () => Date.now() > lastOk + 4_000, 20_000, 100);
  const restarted = Date.now();
  q = await start(d, schedule);
  const job = await waitFor('a scheduled run after the restart', async () => (await scheduledJobs(q, null)).find((j) => Date.parse(j.started_at) >= restarted), 20_000, 50);
  t.true(Date.parse(job.started_at) - restarted < 2_500, `ran at start: ${Date.parse(job.started_at) - restarted} ms after the restart`);
  t.true(q.logLines().some((l) => l.msg === 'scheduled snapshot missed while the node was down: running it now'));
  await waitFor('it completes', async () => (await call(q, 'GET', `/snapshots/jobs/${job.id}`)).state === 'completed', 30_000, 100);
  t.is((await call(q, 'GET', `/snapshots/jobs/${job.id}`)).kind, 'create_full_snapshot');
});

test('a schedule may name an alias: snapshots of its collection, retention in that collection\'s folder', async (t) => {
  const d = dirs();
  const q = await start(d, [{ collection: 'al', interval_sec: 1, keep_last: 1 }]);
  await fill(q, 'ca', 10);
  await call(q, 'POST', '/collections/aliases', { actions: [{ create_alias: { collection_name: 'ca', alias_name: 'al' } }] });
  await waitFor('3 completed runs', async () => (await scheduledJobs(q, 'al')).filter((j) => j.state === 'completed').length >= 3, 60_000, 100);
  await waitFor('retention keeps one', async () => (await call(q, 'GET', '/collections/ca/snapshots')).length === 1, 10_000, 100);
  t.is(fs.readdirSync(path.join(d.snaps, 'ca')).filter((n) => n.endsWith('.snapshot')).length, 1);
});
