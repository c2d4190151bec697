/**
 * qdrant.Snapshots over a real bin/quiver (gRPC on): collection snapshots (Create, List,
 * Delete) and full-storage snapshots (CreateFull, ListFull, DeleteFull), each answer
 * decoded with the contract's types and checked against what REST lists for the same
 * files, and the error kinds: NOT_FOUND (no such collection or snapshot, a name that
 * would leave the snapshot folder) with REST's message. Download, upload and recovery
 * are not part of the reference's gRPC contract.
 */

import test, { type ExecutionContext } from 'ava';

import { codeName, rpcNames, startGrpcQuiver, type CallError, type GrpcQuiver, type QdrantGrpc } from './client';

let q: GrpcQuiver;
let c: QdrantGrpc;

test.before(async () => {
  q = await startGrpcQuiver();
  c = q.client();
  await c.call('Collections', 'Create', { collection_name: 'snap', vectors_config: { params: { size: '2', distance: 'Dot' } } });
  const res = await fetch(`${q.server.url}/collections/snap/points?wait=true`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ points: [1, 2, 3].map((id) => ({ id, vector: [id, 0], payload: { n: id } })) }),
  });
  if (res.status !== 200) throw new Error(`upsert: ${res.status} ${await res.text()}`);
});

test.after.always(async () => {
  await q?.stop();
});

async function restGet(path: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${q.server.url}${path}`);
  return { status: res.status, body: await res.json() };
}

async function restDelete(path: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${q.server.url}${path}`, { method: 'DELETE' });
  return { status: res.status, body: await res.json() };
}

function notFoundAsRest(t: ExecutionContext, err: CallError, r: { status: number; body: any }): void {
  t.is(codeName(err.code), 'NOT_FOUND', err.details);
  t.is(r.status, 404);
  t.is(err.details, r.body.status.error);
}

/** A proto SnapshotDescription in REST's JSON form. */
function asRest(d: any): Record<string, unknown> {
  const iso = new Date(Number(d.creation_time.seconds) * 1000 + d.creation_time.nanos / 1e6).toISOString().slice(0, 19);
  return { name: d.name, creation_time: iso, size: Number(d.size), checksum: d.checksum };
}

test('the contract has exactly these six RPCs', (t) => {
  t.deepEqual(rpcNames('Snapshots').sort(), ['Create', 'CreateFull', 'Delete', 'DeleteFull', 'List', 'ListFull']);
});

test.serial('collection snapshots: Create, List, Delete as REST lists them', async (t) => {
  const before = Date.now();
  const created = await c.call('Snapshots', 'Create', { collection_name: 'snap' });
  const d = created.snapshot_description;
  t.is(typeof created.time, 'number');
  t.regex(d.name, /^snap-\d+-\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d\.snapshot$/);
  t.true(Number(d.size) > 0);
  t.regex(d.checksum, /^[0-9a-f]{64}$/);
  const at = Number(d.creation_time.seconds) * 1000;
  t.true(at >= before - 2000 && at <= Date.now() + 1000, `creation_time ${at} not near ${before}`);

  const listed = await c.call('Snapshots', 'List', { collection_name: 'snap' });
  const r = await restGet('/collections/snap/snapshots');
  t.deepEqual(listed.snapshot_descriptions.map(asRest), r.body.result);
  t.true(listed.snapshot_descriptions.some((x: any) => x.name === d.name));

  const deleted = await c.call('Snapshots', 'Delete', { collection_name: 'snap', snapshot_name: d.name });
  t.is(typeof deleted.time, 'number');
  t.false((await restGet('/collections/snap/snapshots')).body.result.some((x: any) => x.name === d.name));
  notFoundAsRest(t, await c.fail('Snapshots', 'Delete', { collection_name: 'snap', snapshot_name: d.name }), await restDelete(`/collections/snap/snapshots/${d.name}`));
});

test.serial('collection snapshots of a missing collection, or a name outside the folder: NOT_FOUND as REST', async (t) => {
  notFoundAsRest(t, await c.fail('Snapshots', 'Create', { collection_name: 'ghost' }), await (async () => {
    const res = await fetch(`${q.server.url}/collections/ghost/snapshots`, { method: 'POST' });
    return { status: res.status, body: await res.json() };
  })());
  notFoundAsRest(t, await c.fail('Snapshots', 'List', { collection_name: 'ghost' }), await restGet('/collections/ghost/snapshots'));
  notFoundAsRest(t, await c.fail('Snapshots', 'Delete', { collection_name: 'a/b', snapshot_name: 'x.snapshot' }), await restDelete('/collections/a%2Fb/snapshots/x.snapshot'));
  t.is(codeName((await c.fail('Snapshots', 'Delete', { collection_name: '..', snapshot_name: 'x.snapshot' })).code), 'NOT_FOUND');
  const err = await c.fail('Snapshots', 'Delete', { collection_name: 'snap', snapshot_name: '../../etc/passwd' });
  t.is(codeName(err.code), 'NOT_FOUND');
});

test.serial('full-storage snapshots: CreateFull, ListFull, DeleteFull as REST lists them', async (t) => {
  const created = await c.call('Snapshots', 'CreateFull', {});
  const d = created.snapshot_description;
  t.regex(d.name, /^full-snapshot-\d{4}-\d\d-\d\d-\d\d-\d\d-\d\d\.snapshot$/);
  t.true(Number(d.size) > 0);
  const listed = await c.call('Snapshots', 'ListFull', {});
  t.deepEqual(listed.snapshot_descriptions.map(asRest), (await restGet('/snapshots')).body.result);
  t.true(listed.snapshot_descriptions.some((x: any) => x.name === d.name));
  await c.call('Snapshots', 'DeleteFull', { snapshot_name: d.name });
  t.false((await restGet('/snapshots')).body.result.some((x: any) => x.name === d.name));
  notFoundAsRest(t, await c.fail('Snapshots', 'DeleteFull', { snapshot_name: d.name }), await restDelete(`/snapshots/${d.name}`));
  t.is(codeName((await c.fail('Snapshots', 'DeleteFull', {})).code), 'NOT_FOUND');
});
