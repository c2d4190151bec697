/**
 * S3SnapshotStore (ts/snapshots/s3-store.ts) against a real S3-compatible server
 * (moto_server on 127.0.0.1): streamed multipart publish, list, describe, stream out,
 * local copy, delete, the folder layout, and the not-found and name checks. Fails (does
 * not skip) when moto_server cannot start.
 */

import test from 'ava';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { GetObjectCommand, HeadObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';

import { NotFoundError } from '../../ts/common/errors';
import { S3SnapshotStore } from '../../ts/snapshots/s3-store';
import { createBucket, s3Client, startMotoServer, S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY, type MotoServer } from '../support/s3';

const BUCKET = 'quiver-s3-store-test';

let moto: MotoServer | undefined;
let store: S3SnapshotStore;
let raw: S3Client;
let startError: Error | undefined;
const tempDirs: string[] = [];

test.before(async () => {
  try {
    moto = await startMotoServer();
    await createBucket(moto.endpoint, BUCKET);
  } catch (err) {
    startError = err as Error;
    return;
  }
  store = S3SnapshotStore.create({ bucket: BUCKET, region: S3_REGION, access_key: S3_ACCESS_KEY, secret_key: S3_SECRET_KEY, endpoint_url: moto.endpoint });
  raw = s3Client(moto.endpoint);
});

test.after.always(async () => {
  store?.close();
  raw?.destroy();
  await moto?.stop();
  for (const d of tempDirs) fs.rmSync(d, { recursive: true, force: true });
});

/** Fails the test with the reason when moto_server is not there. */
function needsServer(t: { fail(msg: string): void }): boolean {
  if (startError === undefined) return true;
  t.fail(`moto_server (a real S3-compatible server) is needed for this test and could not start: ${startError.message}`);
  return false;
}

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-s3-'));
  tempDirs.push(dir);
  return dir;
}

function tmpFile(bytes: Buffer): string {
  const file = path.join(tempDir(), 'publish.tmp');
  fs.writeFileSync(file, bytes);
  return file;
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function putRaw(key: string, body: string | Buffer): Promise<void> {
  await raw.send(new PutObjectCommand({ Bucket: BUCKET, Key: key, Body: body }));
}

async function getRaw(key: string): Promise<string> {
  const res = await raw.send(new GetObjectCommand({ Bucket: BUCKET, Key: key }));
  return res.Body!.transformToString('utf8');
}

test('put (streamed multipart) → describe, list, open, localCopy → delete → 404s', async (t) => {
  if (!needsServer(t)) return;
  const data = randomBytes(20 * 1024 * 1024 + 123); // three 8 MiB parts
  const name = 'books-1-2026-01-01-00-00-00.snapshot';
  const file = tmpFile(data);
  const d = await store.put('books', name, file, sha(data));
  t.false(fs.existsSync(file), 'the published local file is consumed');
  t.is(d.name, name);
  t.is(d.size, data.length);
  t.is(d.checksum, sha(data));
  t.regex(d.creation_time ?? '', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/);

  // The layout: `<dir>/<name>` uploaded as a multipart object (ETag "<md5>-<parts>"),
  // `<dir>/<name>.checksum` holding the bare hex digest.
  const head = await raw.send(new HeadObjectCommand({ Bucket: BUCKET, Key: `books/${name}` }));
  t.regex(head.ETag ?? '', /-3"?$/, 'uploaded in 3 parts');
  t.is(await getRaw(`books/${name}.checksum`), sha(data));

  t.deepEqual(await store.describe('books', name), d);
  t.deepEqual(await store.list('books'), [d]);

  const { stream, size } = await store.open('books', name);
  t.is(size, data.length);
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  t.true(Buffer.concat(chunks).equals(data), 'streamed bytes equal');

  const copyDir = path.join(tempDir(), 'nested', 'tmp'); // created on demand
  const copy = await store.localCopy('books', name, copyDir);
  t.is(path.dirname(copy.file), copyDir);
  t.true(fs.readFileSync(copy.file).equals(data), 'local copy equal');
  await copy.cleanup();
  t.deepEqual(fs.readdirSync(copyDir), []);

  await store.delete('books', name);
  t.deepEqual(await store.list('books'), []);
  const gone = await raw.send(new HeadObjectCommand({ Bucket: BUCKET, Key: `books/${name}.checksum` })).then(
    () => false,
    () => true,
  );
  t.true(gone, 'the checksum object is deleted too');

  for (const op of [
    () => store.describe('books', name),
    () => store.open('books', name),
    () => store.delete('books', name),
    () => store.localCopy('books', name, copyDir),
  ]) {
    await t.throwsAsync(op, { instanceOf: NotFoundError, message: `Not found: Snapshot ${name} not found` });
  }
  t.deepEqual(fs.readdirSync(copyDir), [], 'no partial file left by a failed local copy');
});

test('list: one folder level, only *.snapshot, sorted, checksum only when valid; empty and missing folders', async (t) => {
  if (!needsServer(t)) return;
  const a = Buffer.from('snapshot a');
  const b = Buffer.from('snapshot b, a bit longer');
  // Put in reverse order: the listing is sorted by name.
  const db = await store.put('c', 'c-b.snapshot', tmpFile(b), sha(b));
  const da = await store.put('c', 'c-a.snapshot', tmpFile(a), sha(a));
  // Not snapshots of `c`: a shard snapshot below it, other objects, checksum objects.
  await store.put('c/shards/0', 'x.snapshot', tmpFile(a), sha(a));
  await putRaw('c/notes.txt', 'x');
  await putRaw('c/orphan.snapshot.checksum', sha(a));
  await putRaw('cc/c-z.snapshot', 'a sibling folder sharing the prefix');
  // Listed, without a checksum field: none, or not a hex SHA-256.
  await putRaw('c/c-c.snapshot', 'no checksum');
  await putRaw('c/c-d.snapshot', 'bad checksum');
  await putRaw('c/c-d.snapshot.checksum', 'not-a-sha');

  const list = await store.list('c');
  t.deepEqual(
    list.map((x) => x.name),
    ['c-a.snapshot', 'c-b.snapshot', 'c-c.snapshot', 'c-d.snapshot'],
  );
  t.deepEqual(list[0], da);
  t.deepEqual(list[1], db);
  t.is(list[2].size, 'no checksum'.length);
  t.false('checksum' in list[2]);
  t.false('checksum' in list[3]);
  t.false('checksum' in (await store.describe('c', 'c-c.snapshot')));

  t.deepEqual((await store.list('c/shards/0')).map((x) => x.name), ['x.snapshot']);
  t.deepEqual((await store.list('c/shards')).map((x) => x.name), []);
  t.deepEqual(await store.list('missing-folder'), []);
  t.deepEqual(await store.list('missing/shards/3'), []);
  // The orphan checksum's "snapshot" does not exist.
  await t.throwsAsync(store.describe('c', 'orphan.snapshot'), { instanceOf: NotFoundError });
});

test('the root folder: full-storage snapshots under bare keys', async (t) => {
  if (!needsServer(t)) return;
  const data = Buffer.from('full storage snapshot');
  const d = await store.put('', 'full-1.snapshot', tmpFile(data), sha(data));
  t.is(await getRaw('full-1.snapshot'), data.toString());
  t.is(await getRaw('full-1.snapshot.checksum'), sha(data));
  const names = (await store.list('')).map((x) => x.name);
  t.true(names.includes('full-1.snapshot'));
  t.true(names.every((n) => n.endsWith('.snapshot') && !n.includes('/')), `only root snapshots: ${names.join(', ')}`);
  t.deepEqual(await store.describe('', 'full-1.snapshot'), d);
  await store.delete('', 'full-1.snapshot');
  t.false((await store.list('')).some((x) => x.name === 'full-1.snapshot'));
});

test('names that are not plain file names are refused as not found', async (t) => {
  if (!needsServer(t)) return;
  await putRaw('n/sub/y.snapshot', 'y');
  for (const bad of ['sub/y.snapshot', '../n/sub/y.snapshot', '..', '.', '', 'a\\b.snapshot']) {
    await t.throwsAsync(store.describe('n', bad), { instanceOf: NotFoundError }, `describe ${bad}`);
    await t.throwsAsync(store.open('n', bad), { instanceOf: NotFoundError }, `open ${bad}`);
    await t.throwsAsync(store.delete('n', bad), { instanceOf: NotFoundError }, `delete ${bad}`);
    await t.throwsAsync(store.localCopy('n', bad, tempDir()), { instanceOf: NotFoundError }, `localCopy ${bad}`);
  }
  const file = tmpFile(Buffer.from('z'));
  await t.throwsAsync(store.put('n', 'sub/z.snapshot', file, sha(Buffer.from('z'))), { instanceOf: NotFoundError });
  t.false(fs.existsSync(file), 'the local file is removed on failure too');
  t.is(await getRaw('n/sub/y.snapshot'), 'y', 'nothing deleted through a bad name');
});

test('a failed upload propagates the S3 error, removes the local file and leaves nothing listed', async (t) => {
  if (!needsServer(t)) return;
  const other = S3SnapshotStore.create({ bucket: 'no-such-bucket', region: S3_REGION, access_key: S3_ACCESS_KEY, secret_key: S3_SECRET_KEY, endpoint_url: moto!.endpoint });
  t.teardown(() => other.close());
  const file = tmpFile(Buffer.from('data'));
  const err = await t.throwsAsync(other.put('x', 'x.snapshot', file, sha(Buffer.from('data'))));
  t.false(err instanceof NotFoundError, `not mapped to NotFoundError: ${err?.name}`);
  t.false(fs.existsSync(file));
  await t.throwsAsync(other.list('x'), undefined, 'listing a missing bucket is an error, not []');
});
