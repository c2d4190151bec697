/**
 * Snapshot faults that involve the disk and the process, on the real server:
 *
 *  4. disk full (ENOSPC, on small tmpfs mounts): creating a snapshot that does not fit
 *     the temp/snapshots file system, and recovering a snapshot that does not fit the
 *     storage file system. The request fails with an error envelope, nothing is listed,
 *     nothing is left on the small file system, the collection is as it was, and the
 *     service keeps serving (and succeeds once there is room).
 *  5. kill -9 while a snapshot is being written (collection and full-storage; the kill
 *     lands once a few MB of the archive are on disk): after a restart nothing is listed,
 *     no temp, `.tmp` or orphan `.checksum` file is left, and every acknowledged point is
 *     there; kill -9 while an uploaded snapshot is unpacked: the collection is as it was,
 *     no staging folder is left. Also leftovers of every kind laid out by hand.
 *  6. a crash in the middle of a recovery's swap, laid out on disk while the server is
 *     stopped (collection swap journal, shard `.replaced-*` folders): start-up puts the
 *     old data back when the new one never arrived, and keeps the new one when it did.
 *
 * The mounts need root; a failing mount fails the test (it is not skipped).
 * Cases run one at a time (they are heavy on a small machine).
 */

import test from 'ava';
import type { ExecutionContext } from 'ava';
import { createHash } from 'node:crypto';
import { watch } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as path from 'node:path';

import {
  api,
  collectionsDirEntries,
  createCollection,
  errorOf,
  exists,
  filesBelow,
  fingerprint,
  freeBytes,
  fullSnapshotNames,
  makePoints,
  mountTmpfs,
  restartNode,
  snapshotNames,
  startNode,
  tempDir,
  umount,
  upload,
  upsert,
  type Fingerprint,
  type Node,
  type Reply,
} from './faults-support';
import { waitFor } from '../support/wait';

/** Servers, mounts and folders to clean up, whatever happens. */
const cleanups: Array<() => Promise<void>> = [];

test.after.always(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

async function scratch(prefix: string): Promise<string> {
  const dir = await tempDir(prefix);
  cleanups.push(() => fs.rm(dir, { recursive: true, force: true }));
  return dir;
}

async function mount(dir: string, kb: number): Promise<void> {
  await mountTmpfs(dir, kb);
  cleanups.push(() => umount(dir));
}

async function start(dir: string, o: Parameters<typeof startNode>[1] = {}): Promise<Node> {
  const n = await startNode(dir, o);
  cleanups.push(() => n.server.stop('SIGKILL').then(() => undefined));
  return n;
}

async function restart(n: Node): Promise<Node> {
  const m = await restartNode(n);
  cleanups.push(() => m.server.stop('SIGKILL').then(() => undefined));
  return m;
}

function expectEnvelope(t: ExecutionContext, r: Reply, status: number | number[], includes: string | RegExp, what: string): string {
  const ok = Array.isArray(status) ? status.includes(r.status) : r.status === status;
  t.log(`${what}: ${r.status} ${r.text.slice(0, 200)}`);
  t.true(ok, `${what}: HTTP ${r.status} ${r.text.slice(0, 300)}`);
  let msg = '';
  try {
    msg = errorOf(r);
  } catch (err) {
    t.fail(`${what}: ${(err as Error).message}`);
    return '';
  }
  if (typeof includes === 'string') t.true(msg.includes(includes), `${what}: message ${JSON.stringify(msg)} lacks ${JSON.stringify(includes)}`);
  else t.regex(msg, includes, what);
  return msg;
}

function sameData(t: ExecutionContext, now: Fingerprint, before: Fingerprint, what: string): void {
  t.deepEqual(now.config, before.config, `${what}: config changed`);
  t.deepEqual(now.payloadSchema, before.payloadSchema, `${what}: payload schema changed`);
  t.is(now.count, before.count, `${what}: count changed`);
  t.is(now.points.length, before.points.length, `${what}: scrolled point count changed`);
  // Large collections: compare digests (a deepEqual diff of 40k points would be unreadable).
  const digest = (f: Fingerprint) => createHash('sha256').update(JSON.stringify(f.points)).digest('hex');
  if (before.points.length > 2000) t.is(digest(now), digest(before), `${what}: points (vectors/payloads) changed`);
  else t.deepEqual(now.points, before.points, `${what}: points (vectors/payloads) changed`);
}

/** A write and a read on `name` succeed (the point is deleted again afterwards). */
async function assertServing(t: ExecutionContext, n: Node, name: string, dim: number, what: string): Promise<void> {
  const id = 9_999_999;
  const vector = Array.from({ length: dim }, (_, i) => (i % 3) - 1 + 0.5);
  const w = await api(n.url, 'PUT', `/collections/${name}/points?wait=true`, { points: [{ id, vector, payload: { probe: what } }] });
  t.is(w.status, 200, `${what}: write: ${w.text.slice(0, 300)}`);
  const r = await api(n.url, 'POST', `/collections/${name}/points`, { ids: [id], with_payload: true });
  t.is(r.status, 200, `${what}: read: ${r.text.slice(0, 300)}`);
  t.deepEqual(r.json?.result?.[0]?.payload, { probe: what }, `${what}: read back`);
  const s = await api(n.url, 'POST', `/collections/${name}/points/search`, { vector, limit: 1 });
  t.is(s.status, 200, `${what}: search: ${s.text.slice(0, 300)}`);
  const d = await api(n.url, 'POST', `/collections/${name}/points/delete?wait=true`, { points: [id] });
  t.is(d.status, 200, `${what}: delete: ${d.text.slice(0, 300)}`);
}

/** Hidden entries (staging, swap journal, replaced folders) in storage/collections. */
async function hiddenInCollections(storage: string): Promise<string[]> {
  return (await collectionsDirEntries(storage)).filter((e) => e.startsWith('.'));
}

// -- 4. disk full ---------------------------------------------------------------------------------

test.serial('4a. ENOSPC while writing a snapshot (temp and snapshots on a tiny tmpfs): 500, nothing listed or left, still serving', async (t) => {
  t.timeout(90_000);
  const dir = await scratch('enospc-create');
  const mnt = path.join(dir, 'mnt');
  await mount(mnt, 512);
  const n = await start(dir, { snapshots: path.join(mnt, 'snapshots'), tempPath: path.join(mnt, 'tmp') });
  await createCollection(n.url, 'big', { vectors: { size: 64, distance: 'Cosine' } });
  await upsert(n.url, 'big', makePoints(1, 0, 4000, 64));
  await createCollection(n.url, 'small', { vectors: { size: 4, distance: 'Dot' } });
  await upsert(n.url, 'small', makePoints(2, 0, 5, 4));
  const before = await fingerprint(n.url, 'big');
  const smallBefore = await fingerprint(n.url, 'small');

  for (const attempt of [1, 2]) {
    const r = await api(n.url, 'POST', '/collections/big/snapshots');
    expectEnvelope(t, r, 500, 'No space left on device', `collection snapshot, attempt ${attempt}`);
    t.deepEqual(await snapshotNames(n.url, 'big'), [], 'a snapshot is listed');
    t.deepEqual(await filesBelow(mnt), [], 'files left on the tmpfs');
  }
  const full = await api(n.url, 'POST', '/snapshots');
  expectEnvelope(t, full, 500, 'No space left on device', 'full snapshot');
  t.deepEqual(await fullSnapshotNames(n.url), []);
  t.deepEqual(await filesBelow(mnt), [], 'files left on the tmpfs after the full snapshot');

  sameData(t, await fingerprint(n.url, 'big'), before, 'big after ENOSPC');
  sameData(t, await fingerprint(n.url, 'small'), smallBefore, 'small after ENOSPC');
  t.deepEqual(await collectionsDirEntries(n.storage), ['big', 'small']);
  await assertServing(t, n, 'big', 64, 'big after ENOSPC');

  // The space is all free again: a snapshot that fits is created and listed.
  const ok = await api(n.url, 'POST', '/collections/small/snapshots');
  t.is(ok.status, 200, ok.text);
  t.deepEqual(await snapshotNames(n.url, 'small'), [ok.json.result.name]);
  t.deepEqual(await filesBelow(path.join(mnt, 'tmp')), [], 'temp files left after a good snapshot');
  t.deepEqual(await snapshotNames(n.url, 'big'), []);
});

test.serial('4a\'. ENOSPC while publishing a snapshot (temp on disk, snapshots on a tiny tmpfs: cross-device copy): 500, nothing listed or left', async (t) => {
  t.timeout(90_000);
  const dir = await scratch('enospc-publish');
  const mnt = path.join(dir, 'mnt');
  await mount(mnt, 512);
  const n = await start(dir, { snapshots: path.join(mnt, 'snapshots'), tempPath: path.join(dir, 'tmp') });
  await createCollection(n.url, 'big', { vectors: { size: 64, distance: 'Cosine' } });
  await upsert(n.url, 'big', makePoints(3, 0, 4000, 64));
  const before = await fingerprint(n.url, 'big');

  const r = await api(n.url, 'POST', '/collections/big/snapshots');
  expectEnvelope(t, r, 500, 'No space left on device', 'collection snapshot');
  t.deepEqual(await snapshotNames(n.url, 'big'), [], 'a snapshot is listed');
  t.deepEqual(await filesBelow(mnt), [], 'files left on the snapshots tmpfs (partial copy, .tmp or .checksum)');
  t.deepEqual(await filesBelow(n.temp), [], 'files left in the temp folder');
  sameData(t, await fingerprint(n.url, 'big'), before, 'big after ENOSPC');
  t.deepEqual(await hiddenInCollections(n.storage), []);
  await assertServing(t, n, 'big', 64, 'big after ENOSPC');
});

test.serial('4b. ENOSPC while unpacking an uploaded snapshot on the storage file system: error, collection unchanged and serving, no staging left', async (t) => {
  t.timeout(90_000);
  const dir = await scratch('enospc-recover');
  const mnt = path.join(dir, 'mnt');
  await mount(mnt, 16 * 1024);
  const n = await start(dir, { storage: path.join(mnt, 'storage') });
  const cfg = { vectors: { size: 64, distance: 'Cosine' }, optimizers_config: { indexing_threshold: 0 } };
  await createCollection(n.url, 'small', cfg);
  await upsert(n.url, 'small', makePoints(4, 0, 20, 64));
  // A genuine snapshot of the same shape, bigger than the room left below.
  await createCollection(n.url, 'big', cfg);
  await upsert(n.url, 'big', makePoints(5, 1000, 4000, 64));
  const snap = await api(n.url, 'POST', '/collections/big/snapshots');
  t.is(snap.status, 200, snap.text);
  const snapFile = path.join(n.snapshots, 'big', snap.json.result.name as string);
  const archive = await fs.readFile(snapFile);
  await fs.rm(path.join(n.snapshots, 'big'), { recursive: true });
  t.is((await api(n.url, 'DELETE', '/collections/big')).status, 200);
  const before = await fingerprint(n.url, 'small');

  // Leave less room on the storage file system than the archive needs unpacked.
  const ballast = path.join(mnt, 'ballast');
  const room = Math.floor(archive.length / 3);
  const free = await freeBytes(mnt);
  t.true(free > archive.length, `the tmpfs should have room before the ballast (${free} free, archive ${archive.length})`);
  await fs.writeFile(ballast, Buffer.alloc(free - room));
  t.true((await freeBytes(mnt)) < archive.length / 2, `free ${await freeBytes(mnt)} bytes`);

  for (const priority of ['snapshot', 'no_sync']) {
    const r = await upload(n.url, 'small', archive, `priority=${priority}`);
    expectEnvelope(t, r, 500, 'No space left on device', `upload (${priority})`);
    sameData(t, await fingerprint(n.url, 'small'), before, `small after ENOSPC (${priority})`);
    t.deepEqual(await hiddenInCollections(n.storage), [], 'staging folder left in storage/collections');
    t.deepEqual(await collectionsDirEntries(n.storage), ['small']);
    t.deepEqual(await filesBelow(n.temp), [], 'the received upload was left in the temp folder');
    t.deepEqual(await snapshotNames(n.url, 'small'), []);
  }
  // And into a new collection name: nothing is created.
  const r = await upload(n.url, 'fresh', archive, 'priority=snapshot');
  expectEnvelope(t, r, 500, 'No space left on device', 'upload into a new collection');
  t.is((await api(n.url, 'GET', '/collections/fresh')).status, 404);
  t.deepEqual(await collectionsDirEntries(n.storage), ['small']);

  // Room again: the service writes, and the same upload now succeeds.
  await fs.rm(ballast);
  await assertServing(t, n, 'small', 64, 'small after ENOSPC');
  const good = await upload(n.url, 'small', archive, 'priority=snapshot');
  t.is(good.status, 200, good.text);
  const after = await fingerprint(n.url, 'small');
  t.is(after.count, 4000);
  // The replaced data and the swap journal are removed after the answer.
  await waitFor('the replaced data and the swap journal removed', async () => (await hiddenInCollections(n.storage)).length === 0);
  t.deepEqual(await filesBelow(n.temp), []);
});

// -- 5. kill -9 during snapshot creation ---------------------------------------------------------

/** Bytes in the files below `p` (a file or a folder); 0 when it is gone. */
async function bytesBelow(p: string): Promise<number> {
  const st = await fs.stat(p).catch(() => null);
  if (!st) return 0;
  if (!st.isDirectory()) return st.size;
  let total = 0;
  for (const f of await filesBelow(p)) total += (await fs.stat(path.join(p, f)).catch(() => ({ size: 0 }))).size;
  return total;
}

/**
 * Starts `request` and SIGKILLs the server once an entry of `folder` matching `match` holds
 * at least `minBytes` (so the kill lands in the middle of the work, not at its first byte).
 * `caught` is true when such an entry is still there after the process died, false when
 * the work finished first (the caller retries).
 */
async function killMidway(
  n: Node,
  folder: string,
  match: (name: string) => boolean,
  minBytes: number,
  request: () => Promise<Reply>,
): Promise<{ caught: boolean; reply: Reply | Error; left: string }> {
  await fs.mkdir(folder, { recursive: true });
  let killed = false;
  let checking = false;
  const check = async () => {
    if (killed || checking) return;
    checking = true;
    try {
      for (const f of (await fs.readdir(folder).catch(() => [] as string[])).filter(match)) {
        if (!killed && (await bytesBelow(path.join(folder, f))) >= minBytes) {
          killed = true;
          try {
            process.kill(n.server.pid, 'SIGKILL');
          } catch {
            // already gone
          }
        }
      }
    } finally {
      checking = false;
    }
  };
  // inotify wakes the check on changes in `folder`; a 2 ms poll covers changes below it.
  const watcher = watch(folder, () => void check());
  const timer = setInterval(() => void check(), 2);
  const reply = await request().catch((err: Error) => err);
  clearInterval(timer);
  watcher.close();
  if (!killed) return { caught: false, reply, left: '' };
  await n.server.exited;
  const left = (await fs.readdir(folder).catch(() => [] as string[])).filter(match);
  const described = await Promise.all(left.map(async (f) => `${f} (${await bytesBelow(path.join(folder, f))} bytes)`));
  return { caught: left.length > 0, reply, left: described.join(', ') };
}

test.serial('5a. kill -9 while a collection snapshot, a full snapshot, and a recovery are written: after restart nothing listed, nothing stray, every point there', async (t) => {
  t.timeout(180_000);
  const dir = await scratch('kill-create');
  // Temp under the snapshots folder (the default): <snapshots>/.quiver-tmp.
  let n = await start(dir);
  await createCollection(n.url, 'big', { vectors: { size: 128, distance: 'Cosine' }, optimizers_config: { indexing_threshold: 0 } });
  for (let i = 0; i < 40_000; i += 4000) await upsert(n.url, 'big', makePoints(100 + i, i, 4000, 128), 1000);
  await createCollection(n.url, 'small', { vectors: { size: 4, distance: 'Dot' } });
  await upsert(n.url, 'small', makePoints(7, 0, 10, 4));
  const before = await fingerprint(n.url, 'big');
  const smallBefore = await fingerprint(n.url, 'small');
  t.is(before.count, 40_000);

  const rounds: Array<[string, (n: Node) => Promise<Reply>]> = [
    ['collection snapshot', (m) => api(m.url, 'POST', '/collections/big/snapshots')],
    ['full snapshot', (m) => api(m.url, 'POST', '/snapshots')],
  ];
  for (const [what, request] of rounds) {
    let caught = false;
    for (let attempt = 1; attempt <= 4 && !caught; attempt++) {
      const got = await killMidway(n, n.temp, (f) => f.endsWith('.snapshot.tmp'), 4 << 20, () => request(n));
      caught = got.caught;
      if (!caught) {
        // The snapshot finished before the kill landed (or the kill came after): clean up and retry.
        t.log(`${what}: attempt ${attempt} did not catch the write (${got.reply instanceof Error ? got.reply.message : got.reply.status})`);
        if (n.server.child.exitCode === null && n.server.child.signalCode === null) {
          await n.server.stop('SIGKILL');
        }
        await fs.rm(n.snapshots, { recursive: true, force: true });
      } else {
        t.log(`${what}: killed during the write; left at the kill: ${got.left}`);
        t.true(got.reply instanceof Error, `${what}: the request should have failed with the connection`);
      }
      n = await restart(n);
    }
    t.true(caught, `${what}: could not kill the server while the snapshot was being written`);

    t.deepEqual(await snapshotNames(n.url, 'big'), [], `${what}: a collection snapshot is listed after the crash`);
    t.deepEqual(await fullSnapshotNames(n.url), [], `${what}: a full snapshot is listed after the crash`);
    t.deepEqual(await filesBelow(n.temp), [], `${what}: temp files left after the restart`);
    t.deepEqual(await filesBelow(n.snapshots), [], `${what}: files (.tmp, .checksum, partial snapshots) left in the snapshots folder`);
    t.deepEqual(await hiddenInCollections(n.storage), []);
    sameData(t, await fingerprint(n.url, 'big'), before, `${what}: big after the crash`);
    sameData(t, await fingerprint(n.url, 'small'), smallBefore, `${what}: small after the crash`);
  }

  // Snapshots work again after the crashes.
  const ok = await api(n.url, 'POST', '/collections/small/snapshots');
  t.is(ok.status, 200, ok.text);
  t.deepEqual(await snapshotNames(n.url, 'small'), [ok.json.result.name]);
  t.deepEqual(await filesBelow(n.temp), []);

  // kill -9 while an upload of big's snapshot is unpacked over `target`: after the restart
  // `target` is as it was (the swap was not reached) or, if the kill came after the swap
  // journal was written, wholly one or the other; nothing is left in storage/collections.
  const bigSnap = await api(n.url, 'POST', '/collections/big/snapshots');
  t.is(bigSnap.status, 200, bigSnap.text);
  const archive = await fs.readFile(path.join(n.snapshots, 'big', bigSnap.json.result.name as string));
  t.true(archive.length > 16 << 20, `big's snapshot has ${archive.length} bytes`);
  const resetTarget = async () => {
    if ((await api(n.url, 'GET', '/collections/target')).status === 200) t.is((await api(n.url, 'DELETE', '/collections/target')).status, 200);
    await createCollection(n.url, 'target', { vectors: { size: 128, distance: 'Cosine' }, optimizers_config: { indexing_threshold: 0 } });
    await upsert(n.url, 'target', makePoints(300, 500_000, 100, 128));
  };
  await resetTarget();
  const targetBefore = await fingerprint(n.url, 'target');
  const cols = path.join(n.storage, 'collections');
  let caught = false;
  let swapSeen = false;
  for (let attempt = 1; attempt <= 4 && !caught; attempt++) {
    const got = await killMidway(n, cols, (f) => f.startsWith('.recovering-'), 4 << 20, () => upload(n.url, 'target', archive, 'priority=snapshot'));
    caught = got.caught;
    swapSeen = (await fs.readdir(cols)).some((f) => f.startsWith('.swap-'));
    t.log(`recovery: attempt ${attempt}: ${caught ? `killed while unpacking; left: ${got.left}` : 'not caught'}${swapSeen ? ' (swap journal present)' : ''}`);
    if (!caught) {
      // The recovery got past the unpack before the kill (or was not killed): start again from the same `target`.
      if (n.server.child.exitCode === null && n.server.child.signalCode === null) await n.server.stop('SIGKILL');
      n = await restart(n);
      await resetTarget();
      await n.server.stop('SIGKILL');
    }
    n = await restart(n);
  }
  t.true(caught, 'could not kill the server while the snapshot was being unpacked');
  t.deepEqual(await hiddenInCollections(n.storage), [], 'staging or swap leftovers after the restart');
  t.deepEqual(await collectionsDirEntries(n.storage), ['big', 'small', 'target']);
  t.deepEqual(await filesBelow(n.temp), [], 'the received upload was left in the temp folder');
  const targetAfter = await fingerprint(n.url, 'target');
  if (swapSeen) t.true(targetAfter.count === targetBefore.count || targetAfter.count === before.count, `target has ${targetAfter.count} points`);
  else sameData(t, targetAfter, targetBefore, 'target after a kill during the unpack');
  sameData(t, await fingerprint(n.url, 'big'), before, 'big after the recovery crash');
  await assertServing(t, n, 'target', 128, 'target after the recovery crash');
});

test.serial('5b. start-up removes leftovers of interrupted snapshot work and keeps complete snapshots', async (t) => {
  t.timeout(90_000);
  const dir = await scratch('leftovers');
  let n = await start(dir, { tempPath: path.join(dir, 'tmp') });
  await createCollection(n.url, 'c', { vectors: { size: 4, distance: 'Dot' } });
  await upsert(n.url, 'c', makePoints(8, 0, 50, 4));
  const good = await api(n.url, 'POST', '/collections/c/snapshots');
  t.is(good.status, 200, good.text);
  const goodName = good.json.result.name as string;
  const before = await fingerprint(n.url, 'c');
  await n.server.stop('SIGTERM');

  const folder = path.join(n.snapshots, 'c');
  const orphan = 'c-1-2020-01-01-00-00-00.snapshot';
  await fs.writeFile(path.join(folder, `.${orphan}.4242.tmp`), 'partial snapshot copy');
  await fs.writeFile(path.join(folder, `.${orphan}.checksum.4242.tmp`), 'ab'.repeat(32));
  await fs.writeFile(path.join(folder, `${orphan}.checksum`), 'ab'.repeat(32)); // checksum published, snapshot not
  await fs.mkdir(path.join(n.snapshots, 'c', 'shards', '0'), { recursive: true });
  await fs.writeFile(path.join(n.snapshots, 'c', 'shards', '0', `.c-shard-0-x.snapshot.77.tmp`), 'x');
  await fs.writeFile(path.join(n.snapshots, `.full-snapshot-x.snapshot.99.tmp`), 'x');
  await fs.mkdir(n.temp, { recursive: true });
  for (const f of ['a.snapshot.tmp', 'b.upload.tmp', 'c.download.tmp']) await fs.writeFile(path.join(n.temp, f), 'partial');
  const staging = path.join(n.storage, 'collections', '.recovering-abc123');
  await fs.mkdir(path.join(staging, '0'), { recursive: true });
  await fs.writeFile(path.join(staging, 'config.json'), '{"partial":');

  n = await restart(n);
  t.deepEqual(await snapshotNames(n.url, 'c'), [goodName]);
  t.deepEqual(await filesBelow(n.snapshots), [`c/${goodName}`, `c/${goodName}.checksum`]);
  t.deepEqual(await filesBelow(n.temp), []);
  t.deepEqual(await collectionsDirEntries(n.storage), ['c']);
  sameData(t, await fingerprint(n.url, 'c'), before, 'c after the restart');
  // The kept snapshot is still a good one: it recovers (checksum checked).
  const sum = (await fs.readFile(path.join(folder, `${goodName}.checksum`), 'utf8')).trim();
  const rec = await api(n.url, 'PUT', '/collections/c2/snapshots/recover', { location: `file://${path.join(folder, goodName)}`, checksum: sum, priority: 'snapshot' });
  t.is(rec.status, 200, rec.text);
  sameData(t, await fingerprint(n.url, 'c2'), before, 'c2 recovered from the kept snapshot');
});

// -- 6. crash during the swap ----------------------------------------------------------------------

// The swap journal (ts/shard/files.ts swapDirectory): `.swap-<stamp>.json` = { live, old, committed }.
// Uncommitted: the new data had not opened yet, so start-up puts the old data back (or,
// for a new collection, removes the unchecked one). Committed: the new data stays.
const journal = (live: string, old: string | null, committed: boolean) => JSON.stringify({ live, old, committed });

test.serial('6a. crash during a collection swap: an unfinished swap puts the old collection back, a committed one keeps the new', async (t) => {
  t.timeout(90_000);
  const dir = await scratch('swap');
  let n = await start(dir);
  await createCollection(n.url, 'c', { vectors: { size: 8, distance: 'Euclid' }, shard_number: 2 });
  t.is((await api(n.url, 'PUT', '/collections/c/index?wait=true', { field_name: 'tag', field_schema: 'keyword' })).status, 200);
  await upsert(n.url, 'c', makePoints(9, 0, 500, 8));
  await createCollection(n.url, 'other', { vectors: { size: 4, distance: 'Dot' } });
  await upsert(n.url, 'other', makePoints(10, 0, 5, 4));
  const before = await fingerprint(n.url, 'c');
  const otherBefore = await fingerprint(n.url, 'other');
  await n.server.stop('SIGTERM');
  const cols = path.join(n.storage, 'collections');

  // (1) Killed after the old directory was moved away, before the new one arrived.
  await fs.writeFile(path.join(cols, '.swap-123-456.json'), journal('c', '.replaced-123-456', false));
  await fs.rename(path.join(cols, 'c'), path.join(cols, '.replaced-123-456'));
  await fs.mkdir(path.join(cols, '.recovering-xyz', '0'), { recursive: true });
  await fs.writeFile(path.join(cols, '.recovering-xyz', 'config.json'), '{}');
  n = await restart(n);
  t.deepEqual(await collectionsDirEntries(n.storage), ['c', 'other']);
  sameData(t, await fingerprint(n.url, 'c'), before, 'c put back from .replaced');
  sameData(t, await fingerprint(n.url, 'other'), otherBefore, 'other untouched');
  await assertServing(t, n, 'c', 8, 'c after the swap was undone');
  const served = await fingerprint(n.url, 'c');

  // (2) Killed while the new (bad) data was being opened: it is in place, the journal is
  // not committed: the old data goes back, the unchecked data is dropped.
  await n.server.stop('SIGTERM');
  await fs.cp(path.join(cols, 'c'), path.join(cols, '.replaced-777-888'), { recursive: true });
  await fs.writeFile(path.join(cols, '.swap-777-888.json'), journal('c', '.replaced-777-888', false));
  const cp0 = path.join(cols, 'c', '0', 'checkpoint.json');
  const state0 = JSON.parse(await fs.readFile(cp0, 'utf8')).state as string;
  await fs.writeFile(path.join(cols, 'c', '0', state0), 'corrupt');
  n = await restart(n);
  t.deepEqual(await collectionsDirEntries(n.storage), ['c', 'other']);
  sameData(t, await fingerprint(n.url, 'c'), served, 'c is the data from before the interrupted recovery');

  // (3) Killed after the new data opened (journal committed), before the old was removed: the new stays.
  await n.server.stop('SIGTERM');
  await fs.cp(path.join(cols, 'c'), path.join(cols, '.replaced-999-1'), { recursive: true });
  n = await restart(n);
  await upsert(n.url, 'c', makePoints(11, 10_000, 50, 8));
  const newer = await fingerprint(n.url, 'c');
  t.is(newer.count, served.count + 50);
  await n.server.stop('SIGTERM');
  await fs.cp(path.join(cols, 'c'), path.join(cols, '.replaced-999-2'), { recursive: true });
  await fs.writeFile(path.join(cols, '.swap-999-2.json'), journal('c', '.replaced-999-2', true));
  n = await restart(n);
  t.deepEqual(await collectionsDirEntries(n.storage), ['c', 'other']);
  sameData(t, await fingerprint(n.url, 'c'), newer, 'c keeps the new data');

  // (4) A new collection whose recovery was interrupted before its data opened is removed.
  await n.server.stop('SIGTERM');
  await fs.cp(path.join(cols, 'other'), path.join(cols, 'fresh'), { recursive: true });
  await fs.writeFile(path.join(cols, '.swap-5-5.json'), journal('fresh', null, false));
  n = await restart(n);
  t.deepEqual(await collectionsDirEntries(n.storage), ['c', 'other']);
  t.is((await api(n.url, 'GET', '/collections/fresh')).status, 404);

  // (5) Journals naming folders outside collections/, or not parsing, are ignored (and removed).
  await n.server.stop('SIGTERM');
  await fs.mkdir(path.join(dir, 'outside'));
  await fs.writeFile(path.join(cols, '.swap-1-1.json'), journal('evil', '../../outside', false));
  await fs.writeFile(path.join(cols, '.swap-1-2.json'), journal('../outside', null, false));
  await fs.writeFile(path.join(cols, '.swap-1-3.json'), '{"live":');
  n = await restart(n);
  t.deepEqual(await collectionsDirEntries(n.storage), ['c', 'other']);
  t.is((await api(n.url, 'GET', '/collections/evil')).status, 404);
  t.true(await exists(path.join(dir, 'outside')), 'the folder named by the bad journal is still there');
  sameData(t, await fingerprint(n.url, 'c'), newer, 'c after the bad journals');
});

test.serial('6b. crash during a shard swap: an unfinished swap puts the old shard back; a stale copy without a journal is dropped', async (t) => {
  t.timeout(90_000);
  const dir = await scratch('shard-swap');
  let n = await start(dir);
  await createCollection(n.url, 'c', { vectors: { size: 8, distance: 'Cosine' }, shard_number: 2 });
  await upsert(n.url, 'c', makePoints(12, 0, 400, 8));
  const before = await fingerprint(n.url, 'c');
  await n.server.stop('SIGTERM');

  const cdir = path.join(n.storage, 'collections', 'c');
  // Shard 0 moved away and the new one never arrived.
  await fs.writeFile(path.join(cdir, '.swap-1-2.json'), journal('0', '.replaced-1-2', false));
  await fs.rename(path.join(cdir, '0'), path.join(cdir, '.replaced-1-2'));
  // Shard 1: the new data is in place but had not opened (corrupt); the old one is beside it.
  await fs.cp(path.join(cdir, '1'), path.join(cdir, '.replaced-3-4'), { recursive: true });
  await fs.writeFile(path.join(cdir, '.swap-3-4.json'), journal('1', '.replaced-3-4', false));
  await fs.rm(path.join(cdir, '1', 'checkpoint.json'));
  // A stale copy with no journal (a swap that finished, killed before its clean-up).
  await fs.cp(path.join(cdir, '.replaced-3-4'), path.join(cdir, '.replaced-5-6'), { recursive: true });
  n = await restart(n);
  t.deepEqual((await fs.readdir(cdir)).sort(), ['0', '1', 'config.json']);
  sameData(t, await fingerprint(n.url, 'c'), before, 'c with both shards as before the interrupted recoveries');
  await assertServing(t, n, 'c', 8, 'c after the shard swaps were undone');
  t.deepEqual(await hiddenInCollections(n.storage), []);
});
