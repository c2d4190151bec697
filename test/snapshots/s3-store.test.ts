/**
 * S3SnapshotStore against a real S3-compatible server (moto_server on 127.0.0.1):
 * multipart publish, list, describe, stream out, local copy, delete, and the
 * not-found and name checks; then the REST service configured with S3 storage.
 */

import test from 'ava';
import { createHash, randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { PutObjectCommand } from '@aws-sdk/client-s3';

import { NotFoundError } from '../../ts/api/errors';
import { S3SnapshotStore } from '../../ts/snapshots/s3-store';
import { startQuiver } from '../api/helpers';
import { createBucket, s3Client, s3Env, startMotoServer, S3_ACCESS_KEY, S3_REGION, S3_SECRET_KEY, type MotoServer } from '../support/s3';

let moto: MotoServer;
let store: S3SnapshotStore;
const BUCKET = 'quiver-test';

test.before(async () => {
  moto = await startMotoServer();
  await createBucket(moto.endpoint, BUCKET);
  store = S3SnapshotStore.create({ bucket: BUCKET, region: S3_REGION, access_key: S3_ACCESS_KEY, secret_key: S3_SECRET_KEY, endpoint_url: moto.endpoint });
});

test.after.always(async () => {
  await moto?.stop();
});

function tmpFile(bytes: Buffer): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-s3-'));
  const file = path.join(dir, 'a.snapshot.tmp');
  fs.writeFileSync(file, bytes);
  return file;
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

test.serial('put (multipart), list, describe, open, localCopy, delete', async (t) => {
  const data = randomBytes(20 * 1024 * 1024 + 123);
  const file = tmpFile(data);
  const d = await store.put('books', 'books-1-2026-01-01-00-00-00.snapshot', file, sha(data));
  t.false(fs.existsSync(file), 'the published temp file is consumed');
  t.is(d.size, data.length);
  t.is(d.checksum, sha(data));
  t.regex(d.creation_time ?? '', /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/);

  // Things that must not be listed: another folder below, a non-snapshot object.
  await s3Client(moto.endpoint).send(new PutObjectCommand({ Bucket: BUCKET, Key: 'books/shards/0/books-shard-0-x.snapshot', Body: 'x' }));
  await s3Client(moto.endpoint).send(new PutObjectCommand({ Bucket: BUCKET, Key: 'books/notes.txt', Body: 'x' }));
  const list = await store.list('books');
  t.deepEqual(list.map((x) => x.name), ['books-1-2026-01-01-00-00-00.snapshot']);
  t.deepEqual(list[0], d);
  t.deepEqual((await store.list('books/shards/0')).map((x) => x.name), ['books-shard-0-x.snapshot']);
  t.deepEqual(await store.list('nothing-here'), []);

  const { stream, size } = await store.open('books', d.name);
  t.is(size, data.length);
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(c as Buffer);
  t.is(sha(Buffer.concat(chunks)), sha(data));

  const tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-s3-copy-'));
  const copy = await store.localCopy('books', d.name, tmpDir);
  t.is(sha(fs.readFileSync(copy.file)), sha(data));
  await copy.cleanup();
  t.deepEqual(fs.readdirSync(tmpDir), []);

  await store.delete('books', d.name);
  t.deepEqual(await store.list('books'), []);
  await t.throwsAsync(store.describe('books', d.name), { instanceOf: NotFoundError });
  await t.throwsAsync(store.open('books', d.name), { instanceOf: NotFoundError });
  await t.throwsAsync(store.delete('books', d.name), { instanceOf: NotFoundError });
  await t.throwsAsync(store.localCopy('books', d.name, tmpDir), { instanceOf: NotFoundError });
  await t.throwsAsync(store.describe('books', '../x.snapshot'), { instanceOf: NotFoundError });
});

test.serial('the service with S3 snapshot storage: create, list, download, delete the collection, recover by name, identical points', async (t) => {
  const node = await startQuiver(s3Env(moto.endpoint, BUCKET));
  t.teardown(() => node.stop());
  const call = async (method: string, p: string, body?: unknown) => {
    const res = await fetch(node.url + p, { method, headers: body === undefined ? {} : { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
    const json = (await res.json()) as { result?: any; status: any };
    return { status: res.status, json };
  };
  t.is((await call('PUT', '/collections/s3c', { vectors: { size: 3, distance: 'Euclid' }, shard_number: 2 })).status, 200);
  const points = Array.from({ length: 200 }, (_, i) => ({ id: i + 1, vector: [i, i / 2, 1 - i], payload: { i, tag: `t${i % 7}` } }));
  t.is((await call('PUT', '/collections/s3c/points?wait=true', { points })).status, 200);
  const created = await call('POST', '/collections/s3c/snapshots');
  t.is(created.status, 200, JSON.stringify(created.json));
  const desc = created.json.result as { name: string; size: number; checksum: string };
  const listed = await call('GET', '/collections/s3c/snapshots');
  t.deepEqual(listed.json.result.map((d: { name: string }) => d.name), [desc.name]);
  // The object is in the bucket, not on local disk.
  const head = await store.describe('s3c', desc.name);
  t.is(head.size, desc.size);
  const dl = await fetch(`${node.url}/collections/s3c/snapshots/${desc.name}`);
  t.is(dl.headers.get('content-length'), String(desc.size));
  t.is(sha(Buffer.from(await dl.arrayBuffer())), desc.checksum);

  t.is((await call('DELETE', '/collections/s3c')).status, 200);
  const rec = await call('PUT', '/collections/s3c/snapshots/recover', { location: `s3://${BUCKET}/s3c/${desc.name}`, priority: 'snapshot', checksum: desc.checksum });
  t.is(rec.status, 200, JSON.stringify(rec.json));
  const scroll = await call('POST', '/collections/s3c/points/scroll', { limit: 1000, with_vector: true, with_payload: true });
  t.deepEqual(
    scroll.json.result.points.map((p: { id: number; vector: number[]; payload: unknown }) => ({ id: p.id, vector: p.vector, payload: p.payload })),
    points,
  );
  // A key that is not there, and another bucket: clear 400s.
  t.is((await call('PUT', '/collections/s3c/snapshots/recover', { location: `s3://${BUCKET}/s3c/nope.snapshot` })).status, 400);
  t.is((await call('PUT', '/collections/s3c/snapshots/recover', { location: `s3://other-bucket/s3c/${desc.name}` })).status, 400);

  t.is((await call('DELETE', `/collections/s3c/snapshots/${desc.name}`)).status, 200);
  t.deepEqual((await call('GET', '/collections/s3c/snapshots')).json.result, []);
  t.is((await call('GET', `/collections/s3c/snapshots/${desc.name}`)).status, 404);
});
