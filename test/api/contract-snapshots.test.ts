/**
 * Contract tests of snapshots against a real bin/quiver: collection snapshots, shard
 * snapshots and full-storage snapshots (create, list, download, delete, recover,
 * upload). Every JSON answer is validated against the reference's v1.18 OpenAPI
 * schemas and envelope (test/support/contract.ts); downloads are checked as
 * application/octet-stream whose bytes match the listed size and SHA-256; archives are
 * opened with the system `tar`, an implementation independent of Quiver's own.
 *
 * One server for the whole file; each test works on collections of its own. The
 * full-storage tests are serial (ava runs serial tests before the concurrent ones), so
 * they see exactly the collections that exist while they run.
 */

import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';

import test, { type ExecutionContext } from 'ava';

import { ContractClient, envelopeProblems, fillPattern, type Reply } from '../support/contract';
import { ALIASES, COLLECTION, COUNT, INDEX, POINTS, SCROLL } from '../support/routes';
import { DEADLINE_MS } from '../support/wait';

const run = promisify(execFile);

// Route patterns, spelled as the reference spec spells them.
const SNAPSHOTS = '/collections/{collection_name}/snapshots';
const SNAPSHOT = '/collections/{collection_name}/snapshots/{snapshot_name}';
const RECOVER = '/collections/{collection_name}/snapshots/recover';
const UPLOAD = '/collections/{collection_name}/snapshots/upload';
const SHARD_SNAPSHOTS = '/collections/{collection_name}/shards/{shard_id}/snapshots';
const SHARD_SNAPSHOT = '/collections/{collection_name}/shards/{shard_id}/snapshots/{snapshot_name}';
const SHARD_RECOVER = '/collections/{collection_name}/shards/{shard_id}/snapshots/recover';
const SHARD_UPLOAD = '/collections/{collection_name}/shards/{shard_id}/snapshots/upload';
const SHARD_STREAM = '/collections/{collection_name}/shards/{shard_id}/snapshot';
const FULL_SNAPSHOTS = '/snapshots';
const FULL_SNAPSHOT = '/snapshots/{snapshot_name}';

const TS = '\\d{4}-\\d{2}-\\d{2}-\\d{2}-\\d{2}-\\d{2}';
const HEX64 = /^[0-9a-f]{64}$/;
const notFound = (name: string) => `Not found: Collection \`${name}\` doesn't exist!`;

let api: ContractClient;
let snapshotsPath: string;

test.before(async () => {
  snapshotsPath = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-contract-snapshots-'));
  api = await ContractClient.start({ SERVICE__STORAGE__SNAPSHOTS_PATH: snapshotsPath });
});

test.after.always(async () => {
  await api?.stop();
  if (snapshotsPath) await fs.rm(snapshotsPath, { recursive: true, force: true });
});

// -- helpers ------------------------------------------------------------------------------------

interface Description {
  name: string;
  creation_time: string | null;
  size: number;
  checksum?: string;
}

interface Download {
  status: number;
  contentType: string;
  contentLength: string | null;
  disposition: string | null;
  bytes: Buffer;
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

/** GET of an octet-stream resource (a download): the raw bytes and the headers that matter. */
async function download(pattern: string, params: Record<string, string | number>): Promise<Download> {
  const res = await fetch(api.url + fillPattern(pattern, params));
  const bytes = Buffer.from(await res.arrayBuffer());
  return {
    status: res.status,
    contentType: res.headers.get('content-type') ?? '',
    contentLength: res.headers.get('content-length'),
    disposition: res.headers.get('content-disposition'),
    bytes,
  };
}

/** A download that must succeed: octet-stream, Content-Length equal to the listed size, bytes hashing to the listed checksum. */
async function downloadOk(t: ExecutionContext, pattern: string, params: Record<string, string | number>, d: Description): Promise<Buffer> {
  const r = await download(pattern, params);
  t.is(r.status, 200, `download ${fillPattern(pattern, params)}: ${r.bytes.toString('utf8', 0, 300)}`);
  t.regex(r.contentType, /^application\/octet-stream\b/, 'download content-type');
  t.is(r.contentLength, String(d.size), 'Content-Length equals the listed size');
  t.is(r.bytes.length, d.size, 'downloaded bytes equal the listed size');
  t.is(sha256(r.bytes), d.checksum ?? '(no checksum listed)', 'SHA-256 of the download equals the listed checksum');
  return r.bytes;
}

/** Checks a reply the ContractClient did not send itself (multipart uploads) against the spec. */
function checkReply(t: ExecutionContext, method: 'POST', pattern: string, r: Reply): void {
  const where = `${r.request} -> ${r.status}`;
  t.regex(r.contentType, /^application\/json\b/, `${where}: content-type`);
  t.not(r.body, undefined, `${where}: the body is not JSON: ${r.text.slice(0, 200)}`);
  const problems = [...envelopeProblems(r.status, r.body), ...api.openapi.validate(method, pattern, r.status, r.body)];
  t.deepEqual(problems, [], `${where}: the body does not match the reference spec: ${r.text.slice(0, 400)}`);
}

/** A multipart/form-data upload of `bytes` as the part `field` (default `snapshot`), validated against the spec. */
async function upload(
  t: ExecutionContext,
  pattern: string,
  params: Record<string, string | number>,
  bytes: Buffer | null,
  query: Record<string, string> = {},
  field = 'snapshot',
): Promise<Reply> {
  let p = fillPattern(pattern, params);
  const qs = new URLSearchParams(query).toString();
  if (qs) p += `?${qs}`;
  let body: FormData | string;
  const headers: Record<string, string> = {};
  if (bytes === null) {
    body = '{}';
    headers['content-type'] = 'application/json';
  } else {
    body = new FormData();
    body.append(field, new Blob([new Uint8Array(bytes)], { type: 'application/octet-stream' }), 'upload.snapshot');
  }
  const res = await fetch(api.url + p, { method: 'POST', body, headers });
  const text = await res.text();
  let json: unknown;
  try {
    json = text.length === 0 ? undefined : JSON.parse(text);
  } catch {
    json = undefined;
  }
  const r: Reply = { status: res.status, contentType: res.headers.get('content-type') ?? '', body: json, text, request: `POST ${p}` };
  checkReply(t, 'POST', pattern, r);
  return r;
}

/** The snapshot description must be what the reference reports: name pattern, size, SHA-256, creation time near now (UTC, no zone). */
function checkDescription(t: ExecutionContext, d: Description, nameRe: RegExp): void {
  t.regex(d.name, nameRe, 'snapshot name');
  t.true(Number.isInteger(d.size) && d.size > 0, `size ${d.size}`);
  t.regex(d.checksum ?? '', HEX64, 'checksum is a lowercase SHA-256');
  t.regex(d.creation_time ?? '', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$/, 'creation_time is YYYY-MM-DDTHH:MM:SS');
  const created = Date.parse(`${d.creation_time}Z`);
  t.true(Math.abs(created - Date.now()) < 5 * 60_000, `creation_time ${d.creation_time} is not near now (UTC)`);
  // The name's timestamp is the creation second (a second snapshot in the same second moves on).
  const m = /(\d{4})-(\d{2})-(\d{2})-(\d{2})-(\d{2})-(\d{2})\.snapshot$/.exec(d.name);
  t.truthy(m, 'name ends with the timestamp');
  if (m) {
    const named = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]);
    t.true(Math.abs(named - Date.now()) < 5 * 60_000, `the name's timestamp ${m[0]} is not near now (UTC)`);
  }
}

const collectionName = (c: string) => new RegExp(`^${c}-\\d+-${TS}\\.snapshot$`);
const shardName = (c: string, id: number) => new RegExp(`^${c}-shard-${id}-${TS}\\.snapshot$`);
const fullName = new RegExp(`^full-snapshot-${TS}\\.snapshot$`);

const P = (collection_name: string) => ({ collection_name });
const PS = (collection_name: string, snapshot_name: string) => ({ collection_name, snapshot_name });
const SH = (collection_name: string, shard_id: number | string) => ({ collection_name, shard_id });
const SHS = (collection_name: string, shard_id: number | string, snapshot_name: string) => ({ collection_name, shard_id, snapshot_name });

/** A 2-shard collection with an unnamed 4-dim Dot vector, `n` points (payload {n: i, kind}) and a keyword index on `kind`. */
async function seeded(t: ExecutionContext, name: string, n = 20): Promise<void> {
  await api.ok(t, 'PUT', COLLECTION, { params: P(name), body: { vectors: { size: 4, distance: 'Dot' }, shard_number: 2 } });
  await api.ok(t, 'PUT', INDEX, { params: P(name), query: { wait: true }, body: { field_name: 'kind', field_schema: 'keyword' } });
  const points = Array.from({ length: n }, (_, k) => {
    const i = k + 1;
    return { id: i, vector: [i, i / 2, -i / 4, 1], payload: { n: i, kind: i % 2 === 0 ? 'even' : 'odd' } };
  });
  await api.ok(t, 'PUT', POINTS, { params: P(name), query: { wait: true }, body: { points } });
}

interface Contents {
  count: number;
  points: Array<{ id: unknown; payload: unknown; vector: unknown }>;
}

async function contents(t: ExecutionContext, name: string): Promise<Contents> {
  const count = (await api.ok(t, 'POST', COUNT, { params: P(name), body: { exact: true } }))?.count;
  const r = await api.ok(t, 'POST', SCROLL, { params: P(name), body: { limit: 10_000, with_payload: true, with_vector: true } });
  return { count, points: r?.points ?? [] };
}

async function createSnapshot(t: ExecutionContext, name: string): Promise<Description> {
  const d = (await api.ok(t, 'POST', SNAPSHOTS, { params: P(name) })) as Description;
  checkDescription(t, d, collectionName(name));
  return d;
}

async function listed(t: ExecutionContext, pattern: string, params: Record<string, string | number>): Promise<Description[]> {
  const r = await api.ok(t, 'GET', pattern, { params });
  t.true(Array.isArray(r), 'the list is an array');
  return (r ?? []) as Description[];
}

async function eventually(what: string, probe: () => Promise<boolean>, timeoutMs = DEADLINE_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await probe()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what} did not happen within ${timeoutMs} ms`);
}

async function tempDir(prefix: string): Promise<string> {
  return fs.mkdtemp(path.join(os.tmpdir(), `quiver-contract-${prefix}-`));
}

/** Extracts a tar with the system `tar`; returns the entry names as `tar -t` lists them. */
async function untar(bytes: Buffer, dir: string): Promise<string[]> {
  const file = path.join(dir, 'archive.tar');
  await fs.writeFile(file, bytes);
  const listing = (await run('tar', ['-tf', file])).stdout.split('\n').filter((l) => l !== '');
  const out = path.join(dir, 'x');
  await fs.mkdir(out);
  await run('tar', ['-xf', file, '-C', out]);
  return listing;
}

const norm = (names: string[]) => names.map((n) => n.replace(/\/$/, '')).sort();

// -- full-storage snapshots (serial: they see every collection of the server) -------------------

test.serial('full snapshot of an empty storage: a tar holding only config.json with empty mappings', async (t) => {
  t.deepEqual((await api.ok(t, 'GET', '/collections'))?.collections, [], 'this runs first, on an empty storage');
  const d = (await api.ok(t, 'POST', FULL_SNAPSHOTS)) as Description;
  checkDescription(t, d, fullName);
  const bytes = await downloadOk(t, FULL_SNAPSHOT, { snapshot_name: d.name }, d);
  const dir = await tempDir('full-empty');
  try {
    t.deepEqual(norm(await untar(bytes, dir)), ['config.json']);
    const config = JSON.parse(await fs.readFile(path.join(dir, 'x', 'config.json'), 'utf8'));
    t.deepEqual(config, { collections_mapping: {}, collections_aliases: {} });
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
  t.true(await api.ok(t, 'DELETE', FULL_SNAPSHOT, { params: { snapshot_name: d.name } }));
});

test.serial('full snapshot: POST /snapshots → SnapshotDescription; GET lists it; download is a tar with config.json and one collection snapshot per collection', async (t) => {
  await seeded(t, 'full_a', 6);
  await api.ok(t, 'PUT', COLLECTION, { params: P('full_b'), body: { vectors: { img: { size: 2, distance: 'Euclid' } } } });
  await api.ok(t, 'POST', ALIASES, { body: { actions: [{ create_alias: { collection_name: 'full_a', alias_name: 'full_alias' } }] } });

  const d = (await api.ok(t, 'POST', FULL_SNAPSHOTS)) as Description;
  checkDescription(t, d, fullName);
  const list = await listed(t, FULL_SNAPSHOTS, {});
  t.deepEqual(list.find((x) => x.name === d.name), d, 'the list holds the same description');
  for (const x of list) checkDescription(t, x, fullName);
  // A full snapshot is not a collection snapshot: it is not listed under any collection.
  t.false((await listed(t, SNAPSHOTS, P('full_a'))).some((x) => x.name === d.name));

  const bytes = await downloadOk(t, FULL_SNAPSHOT, { snapshot_name: d.name }, d);
  const dir = await tempDir('full');
  try {
    const entries = await untar(bytes, dir);
    const config = JSON.parse(await fs.readFile(path.join(dir, 'x', 'config.json'), 'utf8')) as {
      collections_mapping: Record<string, string>;
      collections_aliases: Record<string, string>;
    };
    const collections = ((await api.ok(t, 'GET', '/collections'))?.collections ?? []).map((c: { name: string }) => c.name).sort();
    t.deepEqual(Object.keys(config.collections_mapping).sort(), collections, 'collections_mapping names every collection');
    t.is(config.collections_aliases.full_alias, 'full_a', 'collections_aliases holds the alias');
    t.deepEqual(norm(entries), norm(['config.json', ...Object.values(config.collections_mapping)]), 'the archive holds config.json and the inner snapshots only');
    for (const [collection, inner] of Object.entries(config.collections_mapping)) {
      t.regex(inner, collectionName(collection), `inner snapshot name of ${collection}`);
      const innerEntries = norm((await run('tar', ['-tf', path.join(dir, 'x', inner)])).stdout.split('\n').filter((l) => l !== ''));
      t.true(innerEntries.includes('config.json'), `${inner} holds config.json`);
      const manifest = JSON.parse((await run('tar', ['-xOf', path.join(dir, 'x', inner), 'snapshot.json'])).stdout) as { kind: string; collection: string };
      t.is(manifest.kind, 'collection', `${inner} is a collection snapshot`);
      t.is(manifest.collection, collection, `${inner} is a snapshot of ${collection}`);
    }
    // The 2-shard collection brings both shard folders.
    const innerA = norm((await run('tar', ['-tf', path.join(dir, 'x', config.collections_mapping.full_a)])).stdout.split('\n').filter((l) => l !== ''));
    t.true(innerA.includes('0') && innerA.includes('1'), `shard folders of full_a: ${innerA.join(' ')}`);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }

  t.true(await api.ok(t, 'DELETE', FULL_SNAPSHOT, { params: { snapshot_name: d.name } }));
  t.false((await listed(t, FULL_SNAPSHOTS, {})).some((x) => x.name === d.name));
  await api.error(t, 404, 'GET', FULL_SNAPSHOT, { params: { snapshot_name: d.name } });
  await api.error(t, 404, 'DELETE', FULL_SNAPSHOT, { params: { snapshot_name: d.name } });

  await api.ok(t, 'POST', ALIASES, { body: { actions: [{ delete_alias: { alias_name: 'full_alias' } }] } });
  await api.ok(t, 'DELETE', COLLECTION, { params: P('full_a') });
  await api.ok(t, 'DELETE', COLLECTION, { params: P('full_b') });
});

test.serial('full snapshot: wait=false → 202 {"status":"accepted"}, listed shortly; DELETE wait=false → 202, gone shortly', async (t) => {
  await seeded(t, 'full_async', 3);
  const before = new Set((await listed(t, FULL_SNAPSHOTS, {})).map((x) => x.name));
  const r = await api.call(t, 'POST', FULL_SNAPSHOTS, { query: { wait: false } });
  t.is(r.status, 202, r.text);
  t.is(r.body?.status, 'accepted');
  t.false('result' in (r.body ?? {}), '202 carries no result');
  let created: Description | undefined;
  await eventually('the full snapshot listed', async () => {
    created = (await listed(t, FULL_SNAPSHOTS, {})).find((x) => !before.has(x.name));
    return created !== undefined;
  });
  checkDescription(t, created!, fullName);
  const del = await api.call(t, 'DELETE', FULL_SNAPSHOT, { params: { snapshot_name: created!.name }, query: { wait: false } });
  t.is(del.status, 202, del.text);
  t.is(del.body?.status, 'accepted');
  await eventually('the full snapshot deleted', async () => !(await listed(t, FULL_SNAPSHOTS, {})).some((x) => x.name === created!.name));
  await api.ok(t, 'DELETE', COLLECTION, { params: P('full_async') });
});

test.serial('full snapshot: unknown or malformed names → 404', async (t) => {
  await api.error(t, 404, 'GET', FULL_SNAPSHOT, { params: { snapshot_name: 'full-snapshot-1999-01-01-00-00-00.snapshot' } });
  await api.error(t, 404, 'DELETE', FULL_SNAPSHOT, { params: { snapshot_name: 'nope.snapshot' } });
  // Path traversal in the name (the slash percent-encoded) is just an unknown snapshot.
  await api.error(t, 404, 'GET', FULL_SNAPSHOT, { params: { snapshot_name: '../storage' } });
  await api.error(t, 404, 'GET', FULL_SNAPSHOT, { params: { snapshot_name: '../../../etc/passwd' } });
});

// -- collection snapshots -----------------------------------------------------------------------

test('collection snapshot: create (wait default) → SnapshotDescription; listed; download matches size and SHA-256', async (t) => {
  await seeded(t, 'cs_basic');
  const d = await createSnapshot(t, 'cs_basic');
  const list = await listed(t, SNAPSHOTS, P('cs_basic'));
  t.deepEqual(list, [d], 'the list holds exactly the new snapshot, with the same description');

  const bytes = await downloadOk(t, SNAPSHOT, PS('cs_basic', d.name), d);
  const dir = await tempDir('cs');
  try {
    const entries = norm(await untar(bytes, dir));
    for (const e of ['snapshot.json', 'config.json', '0', '1']) t.true(entries.includes(e), `the archive holds ${e}: ${entries.join(' ')}`);
    const manifest = JSON.parse(await fs.readFile(path.join(dir, 'x', 'snapshot.json'), 'utf8')) as { kind: string; collection: string; shards: number[] };
    t.is(manifest.kind, 'collection');
    t.is(manifest.collection, 'cs_basic');
    t.deepEqual(manifest.shards, [0, 1]);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }

  // Two snapshots in a row get different names; the list has both, every entry valid.
  const d2 = await createSnapshot(t, 'cs_basic');
  t.not(d2.name, d.name);
  const list2 = await listed(t, SNAPSHOTS, P('cs_basic'));
  t.deepEqual(list2.map((x) => x.name).sort(), [d.name, d2.name].sort());
  for (const x of list2) checkDescription(t, x, collectionName('cs_basic'));
});

test('collection snapshot: concurrent creates get distinct names, each listed and downloadable with its own checksum', async (t) => {
  await seeded(t, 'cs_concurrent', 30);
  const made = (await Promise.all([1, 2, 3, 4].map(() => api.ok(t, 'POST', SNAPSHOTS, { params: P('cs_concurrent') })))) as Description[];
  t.is(new Set(made.map((d) => d.name)).size, 4, `names: ${made.map((d) => d.name).join(', ')}`);
  for (const d of made) checkDescription(t, d, collectionName('cs_concurrent'));
  const list = await listed(t, SNAPSHOTS, P('cs_concurrent'));
  t.deepEqual(list.map((x) => x.name).sort(), made.map((d) => d.name).sort());
  for (const d of made) await downloadOk(t, SNAPSHOT, PS('cs_concurrent', d.name), list.find((x) => x.name === d.name)!);
});

test('collection snapshot: an empty 3-shard collection round-trips (config, payload index, no points)', async (t) => {
  await api.ok(t, 'PUT', COLLECTION, { params: P('cs_empty'), body: { vectors: { v: { size: 3, distance: 'Cosine' } }, shard_number: 3 } });
  await api.ok(t, 'PUT', INDEX, { params: P('cs_empty'), query: { wait: true }, body: { field_name: 'n', field_schema: 'integer' } });
  const d = await createSnapshot(t, 'cs_empty');
  const location = `file://${path.join(snapshotsPath, 'cs_empty', d.name)}`;
  t.true(await api.ok(t, 'PUT', RECOVER, { params: P('cs_empty_copy'), body: { location, priority: 'snapshot' } }));
  const src = await api.ok(t, 'GET', COLLECTION, { params: P('cs_empty') });
  const copy = await api.ok(t, 'GET', COLLECTION, { params: P('cs_empty_copy') });
  t.deepEqual(copy?.config?.params, src?.config?.params);
  t.is(copy?.points_count, 0);
  t.is(copy?.payload_schema?.n?.data_type, 'integer');
  // It takes writes.
  await api.ok(t, 'PUT', POINTS, { params: P('cs_empty_copy'), query: { wait: true }, body: { points: [{ id: 1, vector: { v: [1, 0, 0] }, payload: { n: 1 } }] } });
  t.is((await contents(t, 'cs_empty_copy')).count, 1);
});

test('collection snapshot: wait=false → 202 {"status":"accepted"}, then listed shortly', async (t) => {
  await seeded(t, 'cs_async');
  const r = await api.call(t, 'POST', SNAPSHOTS, { params: P('cs_async'), query: { wait: false } });
  t.is(r.status, 202, r.text);
  t.is(r.body?.status, 'accepted');
  t.false('result' in (r.body ?? {}), '202 carries no result');
  let found: Description[] = [];
  await eventually('the snapshot listed', async () => {
    found = await listed(t, SNAPSHOTS, P('cs_async'));
    return found.length === 1;
  });
  checkDescription(t, found[0], collectionName('cs_async'));
  await downloadOk(t, SNAPSHOT, PS('cs_async', found[0].name), found[0]);
  // A bad wait value is a query format error.
  await api.error(t, 400, 'POST', SNAPSHOTS, { params: P('cs_async'), query: { wait: 'maybe' } });
});

test('collection snapshot: an alias names the collection (the snapshot carries the collection name)', async (t) => {
  await seeded(t, 'cs_aliased', 3);
  await api.ok(t, 'POST', ALIASES, { body: { actions: [{ create_alias: { collection_name: 'cs_aliased', alias_name: 'cs_aliased_alias' } }] } });
  const d = (await api.ok(t, 'POST', SNAPSHOTS, { params: P('cs_aliased_alias') })) as Description;
  checkDescription(t, d, collectionName('cs_aliased'));
  t.true((await listed(t, SNAPSHOTS, P('cs_aliased'))).some((x) => x.name === d.name));
  await api.ok(t, 'POST', ALIASES, { body: { actions: [{ delete_alias: { alias_name: 'cs_aliased_alias' } }] } });
});

test('collection snapshot: DELETE → true; then not listed, download and delete → 404; DELETE wait=false → 202', async (t) => {
  await seeded(t, 'cs_delete', 4);
  const d = await createSnapshot(t, 'cs_delete');
  t.is(await api.ok(t, 'DELETE', SNAPSHOT, { params: PS('cs_delete', d.name) }), true);
  t.deepEqual(await listed(t, SNAPSHOTS, P('cs_delete')), []);
  await api.error(t, 404, 'GET', SNAPSHOT, { params: PS('cs_delete', d.name) }, /^Not found: /);
  await api.error(t, 404, 'DELETE', SNAPSHOT, { params: PS('cs_delete', d.name) }, /^Not found: /);

  const d2 = await createSnapshot(t, 'cs_delete');
  const r = await api.call(t, 'DELETE', SNAPSHOT, { params: PS('cs_delete', d2.name), query: { wait: false } });
  t.is(r.status, 202, r.text);
  t.is(r.body?.status, 'accepted');
  await eventually('the snapshot deleted', async () => (await listed(t, SNAPSHOTS, P('cs_delete'))).length === 0);
});

test('collection snapshot: unknown and malformed snapshot names → 404', async (t) => {
  await seeded(t, 'cs_names', 2);
  await api.error(t, 404, 'GET', SNAPSHOT, { params: PS('cs_names', 'cs_names-1-2000-01-01-00-00-00.snapshot') });
  await api.error(t, 404, 'DELETE', SNAPSHOT, { params: PS('cs_names', 'nope.snapshot') });
  // The slash is percent-encoded, so these reach the route as names (a bare `..` would be resolved by the URL parser).
  await api.error(t, 404, 'GET', SNAPSHOT, { params: PS('cs_names', '../cs_names') });
  await api.error(t, 404, 'DELETE', SNAPSHOT, { params: PS('cs_names', '../../storage') });
});

test('collection snapshot: a missing collection → 404 for create, list, download and delete', async (t) => {
  await api.error(t, 404, 'POST', SNAPSHOTS, { params: P('cs_missing') }, notFound('cs_missing'));
  await api.error(t, 404, 'POST', SNAPSHOTS, { params: P('cs_missing'), query: { wait: false } }, notFound('cs_missing'));
  await api.error(t, 404, 'GET', SNAPSHOTS, { params: P('cs_missing') }, notFound('cs_missing'));
  await api.error(t, 404, 'GET', SNAPSHOT, { params: PS('cs_missing', 'cs_missing-1-2000-01-01-00-00-00.snapshot') });
  await api.error(t, 404, 'DELETE', SNAPSHOT, { params: PS('cs_missing', 'cs_missing-1-2000-01-01-00-00-00.snapshot') });
});

test('collection snapshot: snapshots outlive their collection (listed, downloadable and recoverable after it is deleted)', async (t) => {
  await seeded(t, 'cs_outlive', 5);
  const before = await contents(t, 'cs_outlive');
  const d = await createSnapshot(t, 'cs_outlive');
  t.true(await api.ok(t, 'DELETE', COLLECTION, { params: P('cs_outlive') }));
  t.deepEqual(await listed(t, SNAPSHOTS, P('cs_outlive')), [d]);
  await downloadOk(t, SNAPSHOT, PS('cs_outlive', d.name), d);
  const location = `file://${path.join(snapshotsPath, 'cs_outlive', d.name)}`;
  t.true(await api.ok(t, 'PUT', RECOVER, { params: P('cs_outlive'), body: { location, priority: 'snapshot' } }));
  t.deepEqual(await contents(t, 'cs_outlive'), before);
});

// -- recover ------------------------------------------------------------------------------------

test('recover: body validation → 400 (missing or non-string location, bad priority, bad checksum type, malformed JSON)', async (t) => {
  await seeded(t, 'rc_valid', 3);
  const before = await contents(t, 'rc_valid');
  const p = P('rc_valid');
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: {} }, 'Format error in JSON body: missing field `location`');
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { priority: 'snapshot' } }, /missing field `location`/);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: 42 } }, /^Format error in JSON body: /);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: 'file:///x.snapshot', priority: 'bad' } }, /^Format error in JSON body: .*unknown variant `bad`/);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: 'file:///x.snapshot', priority: 7 } }, /^Format error in JSON body: /);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: 'file:///x.snapshot', checksum: 12 } }, /^Format error in JSON body: /);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, raw: '{"location": ' }, /^Format error in JSON body: /);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: 'file:///x.snapshot' }, query: { wait: 'perhaps' } });
  t.deepEqual(await contents(t, 'rc_valid'), before, 'a rejected recovery changes nothing');
});

test('recover: bad locations → 400 (no such file, outside the snapshots folder, relative file URI, unknown scheme, not a URL), nothing changes', async (t) => {
  await seeded(t, 'rc_loc', 3);
  const before = await contents(t, 'rc_loc');
  const p = P('rc_loc');
  const missing = path.join(snapshotsPath, 'rc_loc', 'missing.snapshot');
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: `file://${missing}`, priority: 'snapshot' } }, /^Bad request: Snapshot file .* does not exist/);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: 'file:///etc/passwd', priority: 'snapshot' } }, /^Bad request: /);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: 'file://relative/x.snapshot' } }, /^Bad request: .*absolute/);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: 'ftp://example.com/x.snapshot' } }, /^Bad request: /);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: 'not a url' } }, /^Bad request: /);
  // A recovery into a missing collection that fails creates nothing.
  await api.error(t, 400, 'PUT', RECOVER, { params: P('rc_loc_new'), body: { location: `file://${missing}`, priority: 'snapshot' } });
  t.false((await api.ok(t, 'GET', '/collections/{collection_name}/exists', { params: P('rc_loc_new') }))?.exists);
  t.deepEqual(await contents(t, 'rc_loc'), before);
});

test('recover: an http location that answers 404 or cannot be reached → 400, nothing created', async (t) => {
  const p = P('rc_http_missing');
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: `${api.url}/collections/nope/snapshots/nope.snapshot`, priority: 'snapshot' } }, /^Bad request: .*404/);
  await api.error(t, 400, 'PUT', RECOVER, { params: p, body: { location: 'http://127.0.0.1:1/x.snapshot', priority: 'snapshot' } }, /^Bad request: /);
  t.false((await api.ok(t, 'GET', '/collections/{collection_name}/exists', { params: p }))?.exists);
});

test('recover: file:// with the right checksum → true and the data back; a wrong checksum → 400 Checksum mismatch', async (t) => {
  await seeded(t, 'rc_file', 8);
  const before = await contents(t, 'rc_file');
  const d = await createSnapshot(t, 'rc_file');
  const location = `file://${path.join(snapshotsPath, 'rc_file', d.name)}`;
  // Change the collection, then recover it.
  await api.ok(t, 'POST', '/collections/{collection_name}/points/delete', { params: P('rc_file'), query: { wait: true }, body: { points: [1, 2, 3] } });
  const wrong = '0'.repeat(64);
  await api.error(t, 400, 'PUT', RECOVER, { params: P('rc_file'), body: { location, priority: 'snapshot', checksum: wrong } }, /^Checksum mismatch: /);
  t.is((await contents(t, 'rc_file')).count, 5, 'a checksum mismatch changes nothing');
  t.is(await api.ok(t, 'PUT', RECOVER, { params: P('rc_file'), body: { location, priority: 'snapshot', checksum: d.checksum } }), true);
  t.deepEqual(await contents(t, 'rc_file'), before);
  // The payload index came back too.
  const info = await api.ok(t, 'GET', COLLECTION, { params: P('rc_file') });
  t.is(info?.payload_schema?.kind?.data_type, 'keyword');
  t.is(info?.config?.params?.shard_number, 2);
});

test('recover: wait=false → 202 {"status":"accepted"}, the collection appears shortly', async (t) => {
  await seeded(t, 'rc_async_src', 6);
  const before = await contents(t, 'rc_async_src');
  const d = await createSnapshot(t, 'rc_async_src');
  const location = `file://${path.join(snapshotsPath, 'rc_async_src', d.name)}`;
  const r = await api.call(t, 'PUT', RECOVER, { params: P('rc_async'), query: { wait: false }, body: { location, priority: 'snapshot' } });
  t.is(r.status, 202, r.text);
  t.is(r.body?.status, 'accepted');
  await eventually('the recovered collection', async () => {
    const c = await api.send('POST', COUNT, { params: P('rc_async'), body: { exact: true } });
    return c.status === 200 && c.body?.result?.count === before.count;
  });
  t.deepEqual(await contents(t, 'rc_async'), before);
});

test('recover: the default priority is replica (a new collection is created empty with the snapshot configuration)', async (t) => {
  await seeded(t, 'rc_default_src', 4);
  const d = await createSnapshot(t, 'rc_default_src');
  const location = `file://${path.join(snapshotsPath, 'rc_default_src', d.name)}`;
  t.true(await api.ok(t, 'PUT', RECOVER, { params: P('rc_default'), body: { location } }));
  const info = await api.ok(t, 'GET', COLLECTION, { params: P('rc_default') });
  t.is(info?.points_count, 0);
  t.deepEqual(info?.config?.params?.vectors, { size: 4, distance: 'Dot' });
  t.is(info?.config?.params?.shard_number, 2);
});

test('recover: a snapshot whose vectors differ from the existing collection → 400, nothing changes', async (t) => {
  await seeded(t, 'rc_mismatch_src', 3);
  const d = await createSnapshot(t, 'rc_mismatch_src');
  await api.ok(t, 'PUT', COLLECTION, { params: P('rc_mismatch'), body: { vectors: { size: 3, distance: 'Dot' }, shard_number: 2 } });
  const location = `file://${path.join(snapshotsPath, 'rc_mismatch_src', d.name)}`;
  await api.error(t, 400, 'PUT', RECOVER, { params: P('rc_mismatch'), body: { location, priority: 'snapshot' } }, /^Wrong input: .*not compatible/);
  const info = await api.ok(t, 'GET', COLLECTION, { params: P('rc_mismatch') });
  t.deepEqual(info?.config?.params?.vectors, { size: 3, distance: 'Dot' });
});

// -- upload -------------------------------------------------------------------------------------

test('upload: multipart part `snapshot` → true and the data back; checksum query checked; into a new collection', async (t) => {
  await seeded(t, 'up_src', 7);
  const before = await contents(t, 'up_src');
  const d = await createSnapshot(t, 'up_src');
  const bytes = await downloadOk(t, SNAPSHOT, PS('up_src', d.name), d);

  const r = await upload(t, UPLOAD, P('up_new'), bytes, { priority: 'snapshot' });
  t.is(r.status, 200, r.text);
  t.is(r.body?.result, true);
  t.deepEqual(await contents(t, 'up_new'), before);

  await api.ok(t, 'PUT', '/collections/{collection_name}/points/payload', { params: P('up_new'), query: { wait: true }, body: { points: [1], payload: { n: 100 } } });
  const bad = await upload(t, UPLOAD, P('up_new'), bytes, { priority: 'snapshot', checksum: 'f'.repeat(64) });
  t.is(bad.status, 400, bad.text);
  t.regex(bad.body?.status?.error ?? '', /^Checksum mismatch: /);
  t.not(JSON.stringify(await contents(t, 'up_new')), JSON.stringify(before), 'a checksum mismatch changes nothing');
  const good = await upload(t, UPLOAD, P('up_new'), bytes, { priority: 'snapshot', checksum: d.checksum! });
  t.is(good.status, 200, good.text);
  t.deepEqual(await contents(t, 'up_new'), before);

  const background = await upload(t, UPLOAD, P('up_async'), bytes, { priority: 'snapshot', wait: 'false' });
  t.is(background.status, 202, background.text);
  t.is(background.body?.status, 'accepted');
  await eventually('the uploaded collection', async () => {
    const c = await api.send('POST', COUNT, { params: P('up_async'), body: { exact: true } });
    return c.status === 200 && c.body?.result?.count === before.count;
  });
});

test('upload: bad requests → 400 (not multipart, no `snapshot` part, bad priority, not a snapshot), nothing created', async (t) => {
  await seeded(t, 'up_bad_src', 2);
  const d = await createSnapshot(t, 'up_bad_src');
  const bytes = await downloadOk(t, SNAPSHOT, PS('up_bad_src', d.name), d);
  const p = P('up_bad');
  let r = await upload(t, UPLOAD, p, null);
  t.is(r.status, 400, r.text);
  r = await upload(t, UPLOAD, p, bytes, {}, 'file');
  t.is(r.status, 400, r.text);
  t.regex(r.body?.status?.error ?? '', /snapshot/);
  r = await upload(t, UPLOAD, p, bytes, { priority: 'sometimes' });
  t.is(r.status, 400, r.text);
  t.regex(r.body?.status?.error ?? '', /priority/);
  r = await upload(t, UPLOAD, p, Buffer.from('this is not a tar archive'.repeat(40)), { priority: 'snapshot' });
  t.is(r.status, 400, r.text);
  t.false((await api.ok(t, 'GET', '/collections/{collection_name}/exists', { params: p }))?.exists, 'no collection was created');
});

// -- shard snapshots ----------------------------------------------------------------------------

test('shard snapshot: create → SnapshotDescription named {collection}-shard-{id}-{ts}; list; download; delete', async (t) => {
  await seeded(t, 'sh_basic', 10);
  for (const id of [0, 1]) {
    const d = (await api.ok(t, 'POST', SHARD_SNAPSHOTS, { params: SH('sh_basic', id) })) as Description;
    checkDescription(t, d, shardName('sh_basic', id));
    t.deepEqual(await listed(t, SHARD_SNAPSHOTS, SH('sh_basic', id)), [d]);
    const bytes = await downloadOk(t, SHARD_SNAPSHOT, SHS('sh_basic', id, d.name), d);
    const dir = await tempDir('shard');
    try {
      const entries = norm(await untar(bytes, dir));
      t.true(entries.includes(String(id)), `shard folder ${id}: ${entries.join(' ')}`);
      t.false(entries.includes(String(1 - id)), 'only the one shard');
      const manifest = JSON.parse(await fs.readFile(path.join(dir, 'x', 'snapshot.json'), 'utf8')) as { kind: string; shards: number[] };
      t.is(manifest.kind, 'shard');
      t.deepEqual(manifest.shards, [id]);
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  }
  // Shard snapshots are not collection snapshots.
  t.deepEqual(await listed(t, SNAPSHOTS, P('sh_basic')), []);

  const [d0] = await listed(t, SHARD_SNAPSHOTS, SH('sh_basic', 0));
  // The other shard does not see it.
  await api.error(t, 404, 'GET', SHARD_SNAPSHOT, { params: SHS('sh_basic', 1, d0.name) });
  t.is(await api.ok(t, 'DELETE', SHARD_SNAPSHOT, { params: SHS('sh_basic', 0, d0.name) }), true);
  t.deepEqual(await listed(t, SHARD_SNAPSHOTS, SH('sh_basic', 0)), []);
  await api.error(t, 404, 'GET', SHARD_SNAPSHOT, { params: SHS('sh_basic', 0, d0.name) });
  await api.error(t, 404, 'DELETE', SHARD_SNAPSHOT, { params: SHS('sh_basic', 0, d0.name) });

  // wait=false: 202, then listed; DELETE wait=false: 202, then gone.
  const r = await api.call(t, 'POST', SHARD_SNAPSHOTS, { params: SH('sh_basic', 0), query: { wait: false } });
  t.is(r.status, 202, r.text);
  t.is(r.body?.status, 'accepted');
  let found: Description[] = [];
  await eventually('the shard snapshot listed', async () => (found = await listed(t, SHARD_SNAPSHOTS, SH('sh_basic', 0))).length === 1);
  const del = await api.call(t, 'DELETE', SHARD_SNAPSHOT, { params: SHS('sh_basic', 0, found[0].name), query: { wait: false } });
  t.is(del.status, 202, del.text);
  await eventually('the shard snapshot deleted', async () => (await listed(t, SHARD_SNAPSHOTS, SH('sh_basic', 0))).length === 0);
});

test('shard snapshot: GET .../shards/{id}/snapshot streams a fresh shard snapshot as octet-stream', async (t) => {
  await seeded(t, 'sh_stream', 10);
  const r = await download(SHARD_STREAM, SH('sh_stream', 1));
  t.is(r.status, 200, r.bytes.toString('utf8', 0, 300));
  t.regex(r.contentType, /^application\/octet-stream\b/);
  const dir = await tempDir('stream');
  try {
    const entries = norm(await untar(r.bytes, dir));
    t.true(entries.includes('snapshot.json') && entries.includes('1'), entries.join(' '));
    const manifest = JSON.parse(await fs.readFile(path.join(dir, 'x', 'snapshot.json'), 'utf8')) as { kind: string; shards: number[] };
    t.deepEqual([manifest.kind, manifest.shards], ['shard', [1]]);
  } finally {
    await fs.rm(dir, { recursive: true, force: true });
  }
  // Nothing is stored.
  t.deepEqual(await listed(t, SHARD_SNAPSHOTS, SH('sh_stream', 1)), []);
  // The streamed archive is a valid shard snapshot: it uploads back into the shard.
  const up = await upload(t, SHARD_UPLOAD, SH('sh_stream', 1), r.bytes, { priority: 'snapshot' });
  t.is(up.status, 200, up.text);
  t.is(up.body?.result, true);
  t.is((await contents(t, 'sh_stream')).count, 10);
});

test('shard snapshot: an unknown shard id or collection → 404 on every shard route; a non-numeric id → 400', async (t) => {
  await seeded(t, 'sh_unknown', 2);
  const name = 'sh_unknown-shard-7-2000-01-01-00-00-00.snapshot';
  const body = { location: 'file:///nowhere.snapshot', priority: 'snapshot' };
  for (const [coll, id, msg] of [
    ['sh_unknown', 7, /^Not found: /],
    ['sh_missing', 0, new RegExp(`^${notFound('sh_missing').replace(/[`!]/g, (c) => `\\${c}`)}$`)],
  ] as Array<[string, number, RegExp]>) {
    await api.error(t, 404, 'POST', SHARD_SNAPSHOTS, { params: SH(coll, id) }, msg);
    await api.error(t, 404, 'GET', SHARD_SNAPSHOTS, { params: SH(coll, id) }, msg);
    await api.error(t, 404, 'GET', SHARD_SNAPSHOT, { params: SHS(coll, id, name) }, msg);
    await api.error(t, 404, 'DELETE', SHARD_SNAPSHOT, { params: SHS(coll, id, name) }, msg);
    await api.error(t, 404, 'PUT', SHARD_RECOVER, { params: SH(coll, id), body }, msg);
    await api.error(t, 404, 'GET', SHARD_STREAM, { params: SH(coll, id) }, msg);
    const up = await upload(t, SHARD_UPLOAD, SH(coll, id), Buffer.from('x'), { priority: 'snapshot' });
    t.is(up.status, 404, up.text);
  }
  await api.error(t, 400, 'POST', SHARD_SNAPSHOTS, { params: SH('sh_unknown', 'abc') });
  await api.error(t, 400, 'GET', SHARD_SNAPSHOTS, { params: SH('sh_unknown', '-1') });
});

test('shard snapshot: recover by file:// and by bare path (priority snapshot) → true; body validation → 400; another shard\'s snapshot → 400', async (t) => {
  await seeded(t, 'sh_recover', 16);
  const before = await contents(t, 'sh_recover');
  const d1 = (await api.ok(t, 'POST', SHARD_SNAPSHOTS, { params: SH('sh_recover', 1) })) as Description;
  const d0 = (await api.ok(t, 'POST', SHARD_SNAPSHOTS, { params: SH('sh_recover', 0) })) as Description;
  const file1 = path.join(snapshotsPath, 'sh_recover', 'shards', '1', d1.name);
  const file0 = path.join(snapshotsPath, 'sh_recover', 'shards', '0', d0.name);

  // Change every point, then bring shard 1 back by file:// and shard 0 by bare path.
  const all = before.points.map((p) => p.id);
  await api.ok(t, 'POST', '/collections/{collection_name}/points/payload', { params: P('sh_recover'), query: { wait: true }, body: { points: all, payload: { changed: true } } });
  const sp = SH('sh_recover', 1);
  await api.error(t, 400, 'PUT', SHARD_RECOVER, { params: sp, body: {} }, /missing field `location`/);
  await api.error(t, 400, 'PUT', SHARD_RECOVER, { params: sp, body: { location: `file://${file1}`, priority: 'bad' } }, /unknown variant `bad`/);
  await api.error(t, 400, 'PUT', SHARD_RECOVER, { params: sp, body: { location: `file://${file1}`, checksum: '1'.repeat(64), priority: 'snapshot' } }, /^Checksum mismatch: /);
  // Shard 0's snapshot does not go into shard 1.
  await api.error(t, 400, 'PUT', SHARD_RECOVER, { params: sp, body: { location: `file://${file0}`, priority: 'snapshot' } });
  // A collection snapshot is not a shard snapshot.
  const dc = await createSnapshot(t, 'sh_recover');
  await api.error(t, 400, 'PUT', SHARD_RECOVER, { params: sp, body: { location: `file://${path.join(snapshotsPath, 'sh_recover', dc.name)}`, priority: 'snapshot' } });

  t.is(await api.ok(t, 'PUT', SHARD_RECOVER, { params: sp, body: { location: `file://${file1}`, priority: 'snapshot', checksum: d1.checksum } }), true);
  t.is(await api.ok(t, 'PUT', SHARD_RECOVER, { params: SH('sh_recover', 0), body: { location: file0, priority: 'snapshot' } }), true);
  t.deepEqual(await contents(t, 'sh_recover'), before);

  // Upload of a shard snapshot (multipart), and the same 400 for the wrong shard.
  const bytes1 = await downloadOk(t, SHARD_SNAPSHOT, SHS('sh_recover', 1, d1.name), d1);
  const bytes0 = await downloadOk(t, SHARD_SNAPSHOT, SHS('sh_recover', 0, d0.name), d0);
  await api.ok(t, 'POST', '/collections/{collection_name}/points/payload', { params: P('sh_recover'), query: { wait: true }, body: { points: all, payload: { changed: 2 } } });
  let r = await upload(t, SHARD_UPLOAD, sp, bytes0, { priority: 'snapshot' });
  t.is(r.status, 400, r.text);
  r = await upload(t, SHARD_UPLOAD, sp, bytes1, { priority: 'nope' });
  t.is(r.status, 400, r.text);
  r = await upload(t, SHARD_UPLOAD, sp, bytes1, { priority: 'snapshot', checksum: d1.checksum! });
  t.is(r.status, 200, r.text);
  t.is(r.body?.result, true);
  r = await upload(t, SHARD_UPLOAD, SH('sh_recover', 0), bytes0, { priority: 'snapshot', wait: 'false' });
  t.is(r.status, 202, r.text);
  // While the background recovery swaps the shard, reads answer 503 (retry): poll without asserting.
  await eventually('shard 0 recovered', async () => {
    const r = await api.send('POST', SCROLL, { params: P('sh_recover'), body: { limit: 10_000, with_payload: true, with_vector: true } });
    if (r.status === 503) return false;
    return r.status === 200 && JSON.stringify(r.body?.result?.points ?? []) === JSON.stringify(before.points);
  });
  t.deepEqual(await contents(t, 'sh_recover'), before);
  t.pass();
});
