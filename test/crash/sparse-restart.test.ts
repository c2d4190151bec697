/**
 * Sparse vectors survive the real server's restarts and travel in snapshots: after a
 * SIGKILL (WAL replay), after a clean stop (checkpoint files), and in a collection
 * snapshot recovered into a new collection, every query equals the brute-force scorer
 * (test/support/sparse.ts) over what was written.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { mulberry32 } from '../support/rng';
import { bruteForce, randomSparse, type Sparse } from '../support/sparse';
import { startServer, type Server } from './server';

async function call(url: string, method: string, p: string, body?: unknown): Promise<any> {
  const res = await fetch(url + p, { method, headers: body === undefined ? {} : { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  const json = (await res.json()) as { result?: unknown; status?: unknown };
  if (res.status !== 200) throw new Error(`${method} ${p}: ${res.status} ${JSON.stringify(json)}`);
  return json.result;
}

test('sparse vectors after kill -9, after a clean restart, and through a collection snapshot', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-sparse-restart-'));
  let server: Server | null = null;
  t.teardown(async () => {
    await server?.stop('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const r = mulberry32(7);
  const store = new Map<number, Sparse>();
  const c = 'sparse_restart';
  server = await startServer(dir);
  await call(server.url, 'PUT', `/collections/${c}`, { vectors: { d: { size: 2, distance: 'Dot' } }, sparse_vectors: { text: {} }, shard_number: 2 });
  const write = async (url: string, from: number, n: number) => {
    const points = [];
    for (let id = from; id < from + n; id++) {
      const v = randomSparse(r, 10, 100);
      store.set(id, v);
      points.push({ id, vector: { d: [1, 0], text: v } });
    }
    await call(url, 'PUT', `/collections/${c}/points?wait=true`, { points });
    const gone = [...store.keys()].filter(() => r() < 0.05);
    await call(url, 'POST', `/collections/${c}/points/delete?wait=true`, { points: gone });
    for (const id of gone) store.delete(id);
  };
  const check = async (url: string, coll: string, label: string) => {
    for (let i = 0; i < 15; i++) {
      const q = randomSparse(r, 5, 100);
      const got = await call(url, 'POST', `/collections/${coll}/points/query`, { query: q, using: 'text', limit: 10 });
      t.deepEqual(
        got.points.map((p: { id: number; score: number }) => ({ id: p.id, score: p.score })),
        bruteForce(store, q, 10),
        `${label}: query ${i}`,
      );
    }
  };
  await write(server.url, 1, 300);
  await check(server.url, c, 'before any restart');

  await server.stop('SIGKILL');
  server = await startServer(dir);
  await check(server.url, c, 'after kill -9 (WAL replay)');

  await write(server.url, 301, 200);
  await server.stop('SIGTERM');
  server = await startServer(dir);
  await check(server.url, c, 'after a clean restart (checkpoint)');
  const shardDir = path.join(dir, 'storage', 'collections', c, '0');
  t.true(fs.readdirSync(shardDir).some((f) => /^sparse-.*\.qsi$/.test(f)), 'the checkpoint wrote a sparse index file');

  const snap = await call(server.url, 'POST', `/collections/${c}/snapshots?wait=true`);
  await call(server.url, 'PUT', `/collections/${c}_copy/snapshots/recover`, { location: `${server.url}/collections/${c}/snapshots/${snap.name}`, priority: 'snapshot' });
  await check(server.url, `${c}_copy`, 'recovered from a snapshot');
});
