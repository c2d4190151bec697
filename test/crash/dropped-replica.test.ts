/**
 * A replica's data is renamed away (`.dropped-*` in its collection's folder) before it
 * is deleted (Collection.dropLocal), so a kill -9 midway leaves the shard's folder whole
 * or gone, never half deleted. Found by bench:faults --mode transfer-kill: the source of
 * a move killed while it deleted its replica after the finish kept a shard folder with a
 * WAL but no checkpoint, which the placement on disk (written after) still listed; the
 * node could not start ("seq 1 is no longer in the log"). This test plants what such a
 * kill leaves now, a `.dropped-*` folder: start-up removes it and the node serves.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { api } from '../cluster/harness';
import { startServer } from './server';

test('start-up removes a replica folder a kill left renamed away for deletion, and serves', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-dropped-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  let s = await startServer(dir, {});
  t.is((await api(s.url, 'PUT', '/collections/c', { vectors: { size: 2, distance: 'Dot' } })).status, 200);
  t.is((await api(s.url, 'PUT', '/collections/c/points?wait=true', { points: [{ id: 1, vector: [1, 0] }] })).status, 200);
  await s.stop('SIGKILL');

  // What a kill between the rename and the end of the deletion leaves: a partly deleted copy.
  const collection = path.join(dir, 'storage', 'collections', 'c');
  const leftover = path.join(collection, '.dropped-0-123-456');
  fs.cpSync(path.join(collection, '0'), leftover, { recursive: true });
  fs.rmSync(path.join(leftover, 'checkpoint.json'), { force: true });

  s = await startServer(dir, {});
  t.teardown(() => s.stop('SIGKILL'));
  t.false(fs.existsSync(leftover), 'the leftover is removed at start-up');
  const r = await api(s.url, 'POST', '/collections/c/points/count', { exact: true });
  t.is(r.status, 200);
  t.is(r.body.result.count, 1);
});
