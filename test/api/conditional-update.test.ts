/**
 * Conditional writes through a real bin/quiver: `update_filter` and `update_mode` on
 * upserts (list and batch forms, and inside `points/batch`), `update_filter` on vector
 * updates, over REST and gRPC. Each request body is first checked against the v1.18
 * document's schema; the stored points afterwards are compared with the reference's rule
 * applied by hand to a model the test keeps (upsert: new points and the existing ones the
 * filter holds on; insert_only: new points only; update_only: existing points the filter
 * holds on). The state survives a kill -9 (the WAL holds the writes as resolved).
 *
 * Tests are serial and share the server.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import test, { type ExecutionContext } from 'ava';

import { freePort, startServer, type Server } from '../crash/server';
import { spec } from '../support/contract';
import { codeName, QdrantGrpc } from '../grpc/client';

let dir: string;
let server: Server;
let g: QdrantGrpc;

async function start(): Promise<void> {
  const grpcPort = await freePort();
  server = await startServer(dir, { SERVICE__SERVICE__GRPC_PORT: String(grpcPort), SERVICE__LOG_LEVEL: 'INFO' });
  g = new QdrantGrpc(`127.0.0.1:${grpcPort}`);
}

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-cond-'));
  await start();
});

test.after.always(async () => {
  g?.close();
  await server?.stop('SIGTERM');
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function rest(method: string, p: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${server.url}${p}`, { method, headers: body === undefined ? {} : { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text === '' ? null : JSON.parse(text) };
}

async function ok(t: ExecutionContext, method: string, p: string, body?: unknown): Promise<any> {
  const r = await rest(method, p, body);
  if (r.status !== 200) t.fail(`${method} ${p}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.result;
}

type Mode = 'upsert' | 'insert_only' | 'update_only';
interface Pt {
  v: number;
  vec: number[];
}

/** The model: id → payload value `v` and vector. */
const model = new Map<number, Pt>();
const passes = (p: Pt | undefined, minV: number | null) => p !== undefined && (minV === null || p.v >= minV);

/** The reference's rule, by hand: does a write of point `id` land? */
function lands(id: number, minV: number | null, mode: Mode): boolean {
  const existing = model.get(id);
  if (mode === 'insert_only') return existing === undefined;
  if (mode === 'update_only') return passes(existing, minV);
  return existing === undefined || passes(existing, minV);
}

function applyModel(points: Array<{ id: number } & Pt>, minV: number | null, mode: Mode): void {
  const land = points.filter((p) => lands(p.id, minV, mode));
  for (const p of land) model.set(p.id, { v: p.v, vec: p.vec });
}

async function checkStored(t: ExecutionContext, name: string, what: string): Promise<void> {
  const page = await ok(t, 'POST', `/collections/${name}/points/scroll`, { limit: 100, with_payload: true, with_vector: true });
  const got = page.points.map((p: { id: number; payload: { v: number }; vector: number[] }) => [p.id, p.payload.v, p.vector.map((x) => Math.round(x * 1000) / 1000)]);
  const want = [...model].sort((a, b) => a[0] - b[0]).map(([id, p]) => [id, p.v, p.vec]);
  t.deepEqual(got, want, what);
}

const filterGte = (v: number) => ({ must: [{ key: 'v', range: { gte: v } }] });
const pts = (ids: number[], base: number) => ids.map((id) => ({ id, v: base + id, vec: [id, base] }));
const asList = (ps: Array<{ id: number } & Pt>) => ps.map((p) => ({ id: p.id, vector: p.vec, payload: { v: p.v } }));

test.serial('REST upserts: update_filter and each update_mode write what the rule says, list and batch forms', async (t) => {
  await ok(t, 'PUT', '/collections/c', { vectors: { size: 2, distance: 'Euclid' } });
  const first = pts([1, 2, 3, 4, 5, 6], 0);
  await ok(t, 'PUT', '/collections/c/points?wait=true', { points: asList(first) });
  applyModel(first, null, 'upsert');

  const steps: Array<{ ids: number[]; minV: number | null; mode: Mode; batch?: boolean }> = [
    { ids: [1, 2, 3, 4, 5, 6, 7, 8], minV: 4, mode: 'upsert' },
    { ids: [1, 5, 9], minV: 4, mode: 'insert_only' },
    { ids: [2, 5, 8, 10], minV: 106, mode: 'update_only' },
    { ids: [1, 3, 11], minV: null, mode: 'update_only', batch: true },
    { ids: [3, 12], minV: 3, mode: 'upsert', batch: true },
  ];
  for (const [i, s] of steps.entries()) {
    const write = pts(s.ids, 100 * (i + 1));
    const cond: Record<string, unknown> = { update_mode: s.mode };
    if (s.minV !== null) cond.update_filter = filterGte(s.minV);
    const body = s.batch
      ? { batch: { ids: write.map((p) => p.id), vectors: write.map((p) => p.vec), payloads: write.map((p) => ({ v: p.v })) }, ...cond }
      : { points: asList(write), ...cond };
    t.deepEqual(spec().validateSchema('PointInsertOperations', body), [], 'the body is one the v1.18 document allows');
    await ok(t, 'PUT', '/collections/c/points?wait=true', body);
    applyModel(write, s.minV, s.mode);
    await checkStored(t, 'c', `step ${i}: ${s.mode} ${s.minV}`);
  }

  const bad = await rest('PUT', '/collections/c/points?wait=true', { points: asList(pts([1], 0)), update_mode: 'replace' });
  t.is(bad.status, 400);
  t.regex(bad.body.status.error, /update_mode: unknown variant "replace", expected one of `upsert`, `insert_only`, `update_only`/);
  await checkStored(t, 'c', 'a refused body changes nothing');
});

test.serial('vector updates with update_filter, and both kinds inside points/batch', async (t) => {
  const body = { points: [2, 4, 7].map((id) => ({ id, vector: [-id, -1] })), update_filter: filterGte(200) };
  t.deepEqual(spec().validateSchema('UpdateVectors', body), [], 'the body is one the v1.18 document allows');
  await ok(t, 'PUT', '/collections/c/points/vectors?wait=true', body);
  for (const id of [2, 4, 7]) {
    const p = model.get(id)!;
    if (p.v >= 200) p.vec = [-id, -1];
  }
  await checkStored(t, 'c', 'only the points the filter holds on got the new vector');

  const ops = [
    { upsert: { points: asList(pts([1, 13], 700)), update_filter: filterGte(300), update_mode: 'upsert' } },
    { update_vectors: { points: [{ id: 1, vector: [9, 9] }, { id: 3, vector: [9, 9] }], update_filter: filterGte(400) } },
  ];
  t.deepEqual(spec().validateSchema('UpdateOperations', { operations: ops }), []);
  await ok(t, 'POST', '/collections/c/points/batch?wait=true', { operations: ops });
  applyModel(pts([1, 13], 700), 300, 'upsert');
  for (const id of [1, 3]) if (model.get(id)!.v >= 400) model.get(id)!.vec = [9, 9];
  await checkStored(t, 'c', 'after the batch');
});

test.serial('gRPC Upsert and UpdateVectors carry update_filter and update_mode; the state survives a crash', async (t) => {
  const write = pts([1, 2, 14], 800);
  await g.call('Points', 'Upsert', {
    collection_name: 'c',
    wait: true,
    points: write.map((p) => ({ id: { num: String(p.id) }, vectors: { vector: { data: p.vec } }, payload: { v: { integer_value: String(p.v) } } })),
    update_filter: { must: [{ field: { key: 'v', range: { gte: 500 } } }] },
    update_mode: 'UpdateOnly',
  });
  applyModel(write, 500, 'update_only');
  await checkStored(t, 'c', 'after the gRPC upsert');
  await g.call('Points', 'UpdateVectors', {
    collection_name: 'c',
    wait: true,
    points: [3, 13].map((id) => ({ id: { num: String(id) }, vectors: { vector: { data: [id, id] } } })),
    update_filter: { must: [{ field: { key: 'v', range: { gte: 700 } } }] },
  });
  for (const id of [3, 13]) if (model.get(id)!.v >= 700) model.get(id)!.vec = [id, id];
  await checkStored(t, 'c', 'after the gRPC vector update');
  const err = await g.fail('Points', 'Upsert', { collection_name: 'c', points: [], update_filter: { must: [{ field: { key: 'v' } }] } });
  t.is(codeName(err.code), 'INVALID_ARGUMENT');

  // A kill -9: the state comes back from the WAL, which holds the writes as each was resolved.
  g.close();
  await server.stop('SIGKILL');
  await start();
  await checkStored(t, 'c', 'after a crash and restart');
});
