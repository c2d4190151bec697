/**
 * `GET /collections/{name}/optimizations` through a real bin/quiver: the optimizer job a
 * write sets off is reported with the reference's OptimizationsResponse (checked against
 * the v1.18 document), its progress counting the points it indexed, and the `with`
 * parameters add the queued, completed and idle parts; a bad `with` is a 400.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import test from 'ava';

import { startServer, type Server } from '../crash/server';
import { spec } from '../support/contract';
import { waitFor } from '../support/wait';

let dir: string;
let server: Server;

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-optim-'));
  server = await startServer(dir, { SERVICE__LOG_LEVEL: 'INFO' });
});

test.after.always(async () => {
  await server?.stop('SIGTERM');
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function get(p: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${server.url}${p}`);
  return { status: res.status, body: await res.json() };
}

async function send(method: string, p: string, body: unknown): Promise<void> {
  const res = await fetch(`${server.url}${p}`, { method, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`${method} ${p}: ${res.status} ${await res.text()}`);
}

test('the indexing job a write sets off is reported as completed with all its points; idle segments and summary after; bad parameters refused', async (t) => {
  // 4 dimensions: 16 bytes a vector; a 4 KiB threshold is 256 vectors, so 600 are indexed.
  await send('PUT', '/collections/o', { vectors: { size: 4, distance: 'Dot' }, optimizers_config: { indexing_threshold: 4 } });
  const empty = await get('/collections/o/optimizations');
  t.deepEqual(spec().validate('GET', '/collections/{collection_name}/optimizations', empty.status, empty.body), []);
  t.deepEqual(empty.body.result.running, []);
  t.false('queued' in empty.body.result, 'queued only with ?with=queued');

  const n = 600;
  const points = Array.from({ length: n }, (_, i) => ({ id: i + 1, vector: [1, i % 7, i % 5, 1] }));
  await send('PUT', '/collections/o/points?wait=true', { points });

  const done = await waitFor('the indexing job to complete', async () => {
    const r = await get('/collections/o/optimizations?with=queued,completed,idle_segments&completed_limit=5');
    const c = r.body.result.completed as Array<{ optimizer: string; status: unknown }>;
    return c.some((o) => o.optimizer === 'indexing' && o.status === 'done') && r.body.result.running.length === 0 ? r : null;
  });
  t.deepEqual(spec().validate('GET', '/collections/{collection_name}/optimizations', done.status, done.body), [], 'against the reference schema');
  const job = done.body.result.completed.find((o: { optimizer: string }) => o.optimizer === 'indexing');
  t.is(job.progress.total, n, 'the job moved every point');
  t.is(job.progress.done, n);
  t.is(job.progress.name, 'indexing');
  t.true(Date.parse(job.progress.finished_at) >= Date.parse(job.progress.started_at));
  t.is(job.segments.reduce((m: number, s: { points_count: number }) => m + s.points_count, 0), n, 'its source segments held the points');
  // After it: the HNSW index holds all the points, the new appendable none; nothing queued.
  const idle = done.body.result.idle_segments as Array<{ points_count: number }>;
  t.deepEqual(idle.map((s) => s.points_count).sort((a, b) => a - b), [0, n]);
  t.deepEqual(done.body.result.queued, []);
  t.deepEqual(done.body.result.summary, { queued_optimizations: 0, queued_segments: 0, queued_points: 0, idle_segments: 2 });

  const limited = await get('/collections/o/optimizations?with=completed&completed_limit=0');
  t.deepEqual(limited.body.result.completed, []);
  const bad = await get('/collections/o/optimizations?with=everything');
  t.is(bad.status, 400);
  t.regex(bad.body.status.error, /with: unknown variant `everything`/);
  t.is((await get('/collections/nope/optimizations')).status, 404);
});
