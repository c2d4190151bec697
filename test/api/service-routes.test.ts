/**
 * Service routes through a real bin/quiver:
 * - `GET /collections/{name}/optimizations`: the optimizer job a write sets off is
 *   reported with the reference's OptimizationsResponse (checked against the v1.18
 *   document), its progress counting the points it indexed, and the `with` parameters
 *   add the queued, completed and idle parts; a bad `with` is a 400.
 * - `GET /issues` / `DELETE /issues`: reads filtering on unindexed fields are recorded as
 *   the reference's UNINDEXED_FIELD advisories (with Quiver's count), cleared by DELETE.
 * - `/cluster/metadata/keys`: JSON values set, listed, read, deleted on a single node,
 *   kept through a restart (in a cluster: test/cluster/state.test.ts).
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

async function call(method: string, p: string, body?: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${server.url}${p}`, { method, headers: body === undefined ? {} : { 'content-type': 'application/json' }, body });
  return { status: res.status, body: await res.json() };
}

test.serial('cluster metadata keys: any JSON value per key, listed sorted, null when missing, deleted, kept through a restart', async (t) => {
  const values: Record<string, unknown> = { 'zeta': { nested: [1, 'two', null], deep: { x: 1.5 } }, 'alpha': 'text', 'mid key': 42, 'flag': false };
  for (const [k, v] of Object.entries(values)) {
    const r = await call('PUT', `/cluster/metadata/keys/${encodeURIComponent(k)}?wait=true`, JSON.stringify(v));
    t.is(r.status, 200, JSON.stringify(r.body));
    t.is(r.body.result, true);
  }
  t.deepEqual((await call('GET', '/cluster/metadata/keys')).body.result, Object.keys(values).sort());
  for (const [k, v] of Object.entries(values)) t.deepEqual((await call('GET', `/cluster/metadata/keys/${encodeURIComponent(k)}`)).body.result, v, k);
  t.is((await call('GET', '/cluster/metadata/keys/none')).body.result, null, 'a missing key is null');
  t.is((await call('DELETE', '/cluster/metadata/keys/alpha')).body.result, true);
  // Setting null removes too, as the reference's update does.
  await call('PUT', '/cluster/metadata/keys/flag', 'null');
  const left = Object.keys(values).filter((k) => k !== 'alpha' && k !== 'flag').sort();
  t.deepEqual((await call('GET', '/cluster/metadata/keys')).body.result, left);
  const bad = await call('PUT', '/cluster/metadata/keys/broken', '{"a": ');
  t.is(bad.status, 400);
  t.deepEqual((await call('GET', '/cluster/metadata/keys')).body.result, left, 'a bad body changes nothing');

  await server.stop('SIGTERM');
  server = await startServer(dir, { SERVICE__LOG_LEVEL: 'INFO' });
  t.deepEqual((await call('GET', '/cluster/metadata/keys')).body.result, left, 'after a restart');
  t.deepEqual((await call('GET', '/cluster/metadata/keys/zeta')).body.result, values.zeta);
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

test('unindexed fields used in filters become issues with the fix to apply; DELETE clears them', async (t) => {
  await send('PUT', '/collections/iss', { vectors: { size: 2, distance: 'Dot' } });
  await send('PUT', '/collections/iss/points?wait=true', { points: [1, 2, 3].map((id) => ({ id, vector: [1, id], payload: { color: id === 2 ? 'red' : 'blue', n: id } })) });
  const red = { must: [{ key: 'color', match: { value: 'red' } }] };
  await send('POST', '/collections/iss/points/scroll', { filter: red });
  await send('POST', '/collections/iss/points/query', { query: [1, 0], filter: red, limit: 2 });
  await send('POST', '/collections/iss/points/count', { filter: { must: [{ key: 'n', range: { gt: 1 } }] } });
  const r = await get('/issues');
  t.deepEqual(spec().validate('GET', '/issues', r.status, r.body), []);
  const issues = r.body.result.issues as Array<Record<string, any>>;
  t.deepEqual(issues.map((i) => i.id), ['UNINDEXED_FIELD/iss/color', 'UNINDEXED_FIELD/iss/n']);
  const color = issues[0];
  t.is(color.count, 2, 'two reads filtered on color');
  t.is(color.description, "Unindexed field 'color' might be slowing queries down in collection 'iss'");
  t.is(color.related_collection, 'iss');
  t.true(Number.isFinite(Date.parse(color.timestamp)));
  t.deepEqual(color.solution.immediate.action, { method: 'PUT', uri: '/collections/iss/index', headers: { 'content-type': 'application/json' }, body: { field_name: 'color', field_schema: 'keyword' } });
  // A range serves from a float or an integer index: a choice.
  t.deepEqual(issues[1].solution.immediate_choice.map((s: any) => s.action.body.field_schema), ['float', 'integer']);

  // The fix the issue names works: with the index, reads on color add nothing.
  const fix = color.solution.immediate.action;
  await send(fix.method, fix.uri + '?wait=true', fix.body);
  await send('POST', '/collections/iss/points/scroll', { filter: red });
  t.is((await get('/issues')).body.result.issues.find((i: any) => i.id === 'UNINDEXED_FIELD/iss/color').count, 2);

  const del = await fetch(`${server.url}/issues`, { method: 'DELETE' });
  t.is(del.status, 200);
  t.is(((await del.json()) as any).result, true);
  t.deepEqual((await get('/issues')).body.result.issues.filter((i: any) => i.related_collection === 'iss'), []);
});
