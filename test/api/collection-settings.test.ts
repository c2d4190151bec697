/**
 * Collection and search settings of the reference that Quiver either serves for real or
 * refuses, never accepts and ignores, over REST and gRPC alike (one real bin/quiver with
 * both APIs on a storage directory that outlives restarts):
 *
 * - `metadata`: a JSON object kept with the collection config, shown in collection info
 *   (`config.metadata`, gRPC `CollectionConfig.metadata`), merged by an update as the
 *   reference merges it (each top-level key replaced, a null removes one), kept through
 *   a restart and a snapshot recovery.
 * - `strict_mode_config`: taken on create and update (merged field by field), shown by
 *   collection info over REST and gRPC, a bad value refused the same over both (its
 *   limits are tested in test/api/strict-mode.test.ts).
 * - `optimizers_config.prevent_unoptimized`, search `params`
 *   `indexed_only` and `acorn`: a value that would change behaviour is refused ("Wrong
 *   input: ... not supported by Quiver", INVALID_ARGUMENT with the same text over
 *   gRPC) and changes nothing; null, `false` and a disabled config are taken.
 *
 * Tests are serial and share the server.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import test, { type ExecutionContext } from 'ava';

import { mapToJson } from '../../ts/api/grpc/convert/value';
import { freePort, startServer, type Server } from '../crash/server';
import { spec } from '../support/contract';
import { codeName, QdrantGrpc, type CallError } from '../grpc/client';

let dir: string;
let server: Server;
let g: QdrantGrpc;

async function start(): Promise<void> {
  const grpcPort = await freePort();
  server = await startServer(dir, { SERVICE__SERVICE__GRPC_PORT: String(grpcPort), SERVICE__LOG_LEVEL: 'INFO' });
  g = new QdrantGrpc(`127.0.0.1:${grpcPort}`);
}

async function stop(): Promise<void> {
  g?.close();
  await server?.stop('SIGTERM');
}

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-settings-'));
  await start();
});

test.after.always(async () => {
  await stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

async function rest(method: string, p: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${server.url}${p}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? null : JSON.parse(text) };
}

async function restOk(t: ExecutionContext, method: string, p: string, body?: unknown): Promise<any> {
  const r = await rest(method, p, body);
  if (r.status !== 200) t.fail(`${method} ${p}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.result;
}

/** The collection's info over REST, checked against the reference's schema. */
async function info(t: ExecutionContext, name: string): Promise<any> {
  const r = await rest('GET', `/collections/${name}`);
  t.deepEqual(spec().validate('GET', '/collections/{collection_name}', r.status, r.body), [], `GET /collections/${name} against the reference's schema`);
  return r.body.result;
}

/** The collection's metadata over gRPC (Collections/Get), as JSON. */
async function grpcMetadata(name: string): Promise<unknown> {
  const r = await g.call('Collections', 'Get', { collection_name: name });
  const m = r.result.config.metadata;
  return m === undefined ? undefined : mapToJson(m, 'metadata');
}

/** A refusal of REST (400 "Wrong input: ...") and the gRPC twin of the same request: INVALID_ARGUMENT, the same text. */
function sameRefusal(t: ExecutionContext, r: { status: number; body: any }, err: CallError, detail: RegExp): void {
  t.is(r.status, 400, JSON.stringify(r.body));
  t.regex(r.body.status.error, detail);
  t.is(codeName(err.code), 'INVALID_ARGUMENT', err.details);
  t.is(err.details, r.body.status.error);
}

const VECTORS = { size: 2, distance: 'Dot' };
const GRPC_VECTORS = { params: { size: '2', distance: 'Dot' } };

// 2^64 and 1e300 are JSON numbers no integer type holds: doubles, both ways.
const META = { owner: 'search-team', version: 3, big: 1e300, huge: 2 ** 64, neg: -0.5, nested: { model: 'm1', dims: [2, 4] }, gone: 'soon' };

test.serial('metadata: kept with the config, shown in collection info, merged by an update; the same over gRPC', async (t) => {
  await restOk(t, 'PUT', '/collections/meta', { vectors: VECTORS, metadata: META });
  t.deepEqual((await info(t, 'meta')).config.metadata, META);
  t.deepEqual(await grpcMetadata('meta'), META, 'gRPC shows the same metadata, numbers exact');

  // An update merges: a key replaced, a key added, a null removes one; the others stay.
  await restOk(t, 'PATCH', '/collections/meta', { metadata: { version: 4, added: true, gone: null } });
  const merged = { owner: 'search-team', version: 4, big: 1e300, huge: 2 ** 64, neg: -0.5, nested: { model: 'm1', dims: [2, 4] }, added: true };
  t.deepEqual((await info(t, 'meta')).config.metadata, merged);
  // Null and an absent `metadata` change nothing; other settings leave it alone.
  await restOk(t, 'PATCH', '/collections/meta', { metadata: null, optimizers_config: { indexing_threshold: 1000 } });
  t.deepEqual((await info(t, 'meta')).config.metadata, merged);

  // gRPC Update merges the same way (a nested value replaces the whole top-level key).
  await g.call('Collections', 'Update', { collection_name: 'meta', metadata: { nested: { struct_value: { fields: { model: { string_value: 'm2' } } } }, added: { null_value: 'NULL_VALUE' } } });
  const afterGrpc = { owner: 'search-team', version: 4, big: 1e300, huge: 2 ** 64, neg: -0.5, nested: { model: 'm2' } };
  t.deepEqual((await info(t, 'meta')).config.metadata, afterGrpc);

  // gRPC Create takes it; a collection created without metadata shows none.
  await g.call('Collections', 'Create', { collection_name: 'meta_grpc', vectors_config: GRPC_VECTORS, metadata: { k: { integer_value: '7' }, d: { double_value: 1e300 } } });
  t.deepEqual((await info(t, 'meta_grpc')).config.metadata, { k: 7, d: 1e300 });
  await restOk(t, 'PUT', '/collections/plain', { vectors: VECTORS });
  t.false('metadata' in (await info(t, 'plain')).config, 'no metadata: no key, as the reference');
  t.is(await grpcMetadata('plain'), undefined);
  // With nothing stored, an update's object is kept as it is.
  await restOk(t, 'PATCH', '/collections/plain', { metadata: { first: 1 } });
  t.deepEqual((await info(t, 'plain')).config.metadata, { first: 1 });
});

test.serial('metadata: what is not a JSON object is refused and changes nothing', async (t) => {
  for (const bad of [[1, 2], 'text', 5]) {
    const r = await rest('PUT', '/collections/meta_bad', { vectors: VECTORS, metadata: bad });
    t.is(r.status, 400, JSON.stringify(r.body));
    t.regex(r.body.status.error, /^Format error in JSON body: metadata: expected an object/);
    const u = await rest('PATCH', '/collections/meta', { metadata: bad });
    t.is(u.status, 400, JSON.stringify(u.body));
  }
  t.is((await rest('GET', '/collections/meta_bad')).status, 404);
  // A Value with no kind set is an error over gRPC, not a null.
  const err = await g.fail('Collections', 'Create', { collection_name: 'meta_bad', vectors_config: GRPC_VECTORS, metadata: { x: {} } });
  t.is(codeName(err.code), 'INVALID_ARGUMENT');
  t.regex(err.details, /metadata\.x: a Value with no kind set/);
  t.is((await rest('GET', '/collections/meta_bad')).status, 404);
});

test.serial('metadata: kept through a restart and a snapshot recovery', async (t) => {
  const expected = (await info(t, 'meta')).config.metadata;
  await stop();
  await start();
  t.deepEqual((await info(t, 'meta')).config.metadata, expected, 'after a restart');
  t.deepEqual(await grpcMetadata('meta'), expected);

  const snap = await restOk(t, 'POST', '/collections/meta/snapshots?wait=true');
  const location = `file://${path.join(dir, 'snapshots', 'meta', snap.name)}`;
  await restOk(t, 'PUT', '/collections/meta_copy/snapshots/recover', { location, priority: 'snapshot' });
  t.deepEqual((await info(t, 'meta_copy')).config.metadata, expected, 'in the collection recovered from the snapshot');
});

test.serial('strict_mode_config: taken on create and update, merged, shown by REST and gRPC; a bad value is refused the same over both', async (t) => {
  await restOk(t, 'PUT', '/collections/strict_ok', { vectors: VECTORS, strict_mode_config: { enabled: true, max_query_limit: 10, search_max_oversampling: 1.5 } });
  t.deepEqual((await info(t, 'strict_ok')).config.strict_mode_config, { enabled: true, max_query_limit: 10, search_max_oversampling: 1.5 });
  // Each field set replaces the stored one; a null or absent field keeps it.
  await restOk(t, 'PATCH', '/collections/strict_ok', { strict_mode_config: { max_query_limit: null, upsert_max_batchsize: 5, multivector_config: { m: { max_vectors: 3 } } } });
  const merged = { enabled: true, max_query_limit: 10, search_max_oversampling: 1.5, upsert_max_batchsize: 5, multivector_config: { m: { max_vectors: 3 } } };
  t.deepEqual((await info(t, 'strict_ok')).config.strict_mode_config, merged);
  const shown = (await g.call('Collections', 'Get', { collection_name: 'strict_ok' })).result.config.strict_mode_config;
  t.is(shown.enabled, true);
  t.is(shown.max_query_limit, 10);
  t.is(String(shown.upsert_max_batchsize), '5');
  t.is(String(shown.multivector_config.multivector_config.m.max_vectors), '3');

  // gRPC Create and Update take the same settings (64-bit fields as text, per-vector maps wrapped).
  await g.call('Collections', 'Create', { collection_name: 'strict_grpc', vectors_config: GRPC_VECTORS, strict_mode_config: { enabled: true, upsert_max_batchsize: '7' } });
  await g.call('Collections', 'Update', { collection_name: 'strict_grpc', strict_mode_config: { max_timeout: 4, sparse_config: { sparse_config: { s: { max_length: '9' } } } } });
  t.deepEqual((await info(t, 'strict_grpc')).config.strict_mode_config, { enabled: true, max_timeout: 4, upsert_max_batchsize: 7, sparse_config: { s: { max_length: 9 } } });
  // Never set: absent, as the reference shows it.
  await restOk(t, 'PUT', '/collections/strict_none', { vectors: VECTORS });
  t.false('strict_mode_config' in (await info(t, 'strict_none')).config);

  const cases: Array<[object, object, RegExp]> = [
    [{ max_query_limit: 0 }, { max_query_limit: 0 }, /^Validation error in JSON body: strict_mode_config\.max_query_limit: value 0 invalid, must be 1 or larger/],
    [{ read_rate_limit: 0 }, { read_rate_limit: 0 }, /strict_mode_config\.read_rate_limit: value 0 invalid/],
    [{ max_resident_memory_percent: 101 }, { max_resident_memory_percent: 101 }, /strict_mode_config\.max_resident_memory_percent: value must be from 1 to 100/],
  ];
  for (const [json, proto, detail] of cases) {
    const r = await rest('PUT', '/collections/strict_bad', { vectors: VECTORS, strict_mode_config: json });
    const err = await g.fail('Collections', 'Create', { collection_name: 'strict_bad', vectors_config: GRPC_VECTORS, strict_mode_config: proto });
    t.is(r.status, r.body.status.error.startsWith('Validation') ? 422 : 400, JSON.stringify(r.body));
    t.regex(r.body.status.error, detail);
    t.is(codeName(err.code), 'INVALID_ARGUMENT', err.details);
    t.is(err.details, r.body.status.error);
    const u = await rest('PATCH', '/collections/strict_ok', { strict_mode_config: json, metadata: { changed: true } });
    t.is(u.body.status.error, r.body.status.error);
  }
  t.is((await rest('GET', '/collections/strict_bad')).status, 404, 'a refused create creates nothing');
  t.false('metadata' in (await info(t, 'strict_ok')).config, 'a refused update changes nothing');
  t.deepEqual((await info(t, 'strict_ok')).config.strict_mode_config, merged);
  const typed = await rest('PUT', '/collections/strict_bad', { vectors: VECTORS, strict_mode_config: [true] });
  t.is(typed.status, 400);
  t.regex(typed.body.status.error, /^Format error in JSON body: strict_mode_config: expected an object/);
  const unknown = await rest('PUT', '/collections/strict_bad', { vectors: VECTORS, strict_mode_config: { max_query_limits: 3 } });
  t.is(unknown.status, 400);
  t.regex(unknown.body.status.error, /unknown field `max_query_limits`/);
});

test.serial('optimizers_config.prevent_unoptimized: false and null are taken, true is refused the same over REST and gRPC', async (t) => {
  await restOk(t, 'PUT', '/collections/pu_ok', { vectors: VECTORS, optimizers_config: { prevent_unoptimized: false } });
  await restOk(t, 'PATCH', '/collections/pu_ok', { optimizers_config: { prevent_unoptimized: null } });
  await g.call('Collections', 'Update', { collection_name: 'pu_ok', optimizers_config: { prevent_unoptimized: false } });
  const detail = /^Wrong input: optimizers_config\.prevent_unoptimized: .* not supported by Quiver/;
  sameRefusal(
    t,
    await rest('PUT', '/collections/pu_bad', { vectors: VECTORS, optimizers_config: { prevent_unoptimized: true } }),
    await g.fail('Collections', 'Create', { collection_name: 'pu_bad', vectors_config: GRPC_VECTORS, optimizers_config: { prevent_unoptimized: true } }),
    detail,
  );
  sameRefusal(
    t,
    await rest('PATCH', '/collections/pu_ok', { optimizers_config: { prevent_unoptimized: true, indexing_threshold: 777 } }),
    await g.fail('Collections', 'Update', { collection_name: 'pu_ok', optimizers_config: { prevent_unoptimized: true, indexing_threshold: '777' } }),
    detail,
  );
  t.is((await rest('GET', '/collections/pu_bad')).status, 404);
  t.not((await info(t, 'pu_ok')).config.optimizer_config.indexing_threshold, 777, 'a refused update changes nothing');
  const typed = await rest('PUT', '/collections/pu_bad', { vectors: VECTORS, optimizers_config: { prevent_unoptimized: 'yes' } });
  t.is(typed.status, 400);
  t.regex(typed.body.status.error, /^Format error in JSON body: optimizers_config\.prevent_unoptimized: expected a boolean/);
});

test.serial('search params indexed_only and acorn: off is taken, on is refused the same over REST and gRPC', async (t) => {
  await restOk(t, 'PUT', '/collections/sp', { vectors: VECTORS });
  await restOk(t, 'PUT', '/collections/sp/points?wait=true', { points: [{ id: 1, vector: [1, 0] }, { id: 2, vector: [0, 1] }] });
  const search = (params: object) => rest('POST', '/collections/sp/points/search', { vector: [1, 0], limit: 2, params });
  const query = (params: object) => rest('POST', '/collections/sp/points/query', { query: [1, 0], limit: 2, params });
  const grpcSearch = (params: object) => ({ collection_name: 'sp', vector: [1, 0], limit: '2', params });
  const grpcQuery = (params: object) => ({ collection_name: 'sp', query: { nearest: { dense: { data: [1, 0] } } }, limit: '2', params });

  for (const params of [{ indexed_only: false }, { indexed_only: null }, { acorn: null }, { acorn: { enable: false, max_selectivity: 0.4 } }, { acorn: {} }]) {
    t.is((await search(params)).status, 200, JSON.stringify(params));
    t.is((await query(params)).status, 200, JSON.stringify(params));
  }
  t.is((await g.call('Points', 'Search', grpcSearch({ indexed_only: false, acorn: { enable: false } }))).result.length, 2);
  t.is((await g.call('Points', 'Query', grpcQuery({ indexed_only: false, acorn: { enable: false, max_selectivity: 0.5 } }))).result.length, 2);

  const refused: Array<[object, RegExp]> = [
    [{ indexed_only: true }, /^Wrong input: params\.indexed_only: .*not supported by Quiver/],
    [{ acorn: { enable: true } }, /^Wrong input: params\.acorn\.enable: ACORN search is not supported by Quiver/],
  ];
  for (const [params, detail] of refused) {
    sameRefusal(t, await search(params), await g.fail('Points', 'Search', grpcSearch(params)), detail);
    sameRefusal(t, await query(params), await g.fail('Points', 'Query', grpcQuery(params)), detail);
    const rec = await rest('POST', '/collections/sp/points/recommend', { positive: [1], limit: 2, params });
    t.is(rec.status, 400);
    t.regex(rec.body.status.error, detail);
  }
  // Out of the reference's range or of the wrong type: its validation and format errors.
  const range = await search({ acorn: { max_selectivity: 1.5 } });
  t.is(range.status, 422, JSON.stringify(range.body));
  t.regex(range.body.status.error, /params\.acorn\.max_selectivity: value 1\.5 invalid, must be from 0 to 1/);
  for (const params of [{ indexed_only: 'yes' }, { acorn: true }, { acorn: { enable: 1 } }, { acorn: { max_selectivity: 'x' } }]) {
    const r = await search(params);
    t.is(r.status, 400, JSON.stringify(params));
    t.regex(r.body.status.error, /^Format error in JSON body: params\./);
  }
});

test.serial('hnsw_config.payload_m: 0 (no payload-aware links, what Quiver builds) is taken; a link count is refused on create, update and per vector over REST and gRPC', async (t) => {
  await restOk(t, 'PUT', '/collections/pm_ok', { vectors: VECTORS, hnsw_config: { payload_m: 0 } });
  sameRefusal(
    t,
    await rest('PUT', '/collections/pm_bad', { vectors: VECTORS, hnsw_config: { payload_m: 16 } }),
    await g.fail('Collections', 'Create', { collection_name: 'pm_bad', vectors_config: GRPC_VECTORS, hnsw_config: { payload_m: '16' } }),
    /^Wrong input: hnsw_config\.payload_m: 16 is not supported: Quiver builds no payload-aware HNSW links/,
  );
  const perVector = await rest('PUT', '/collections/pm_bad', { vectors: { v: { ...VECTORS, hnsw_config: { payload_m: 8 } } } });
  t.is(perVector.status, 400, JSON.stringify(perVector.body));
  t.regex(perVector.body.status.error, /vectors\.v\.hnsw_config\.payload_m: 8 is not supported/);
  t.is((await rest('GET', '/collections/pm_bad')).status, 404, 'refused creates change nothing');
  sameRefusal(
    t,
    await rest('PATCH', '/collections/pm_ok', { hnsw_config: { payload_m: 4 } }),
    await g.fail('Collections', 'Update', { collection_name: 'pm_ok', hnsw_config: { payload_m: '4' } }),
    /^Wrong input: hnsw_config\.payload_m: 4 is not supported/,
  );
  t.is((await rest('GET', '/collections/pm_ok')).body.result.config.hnsw_config.payload_m, 0, 'a refused update changes nothing');
});

test.serial('hnsw_config.inline_storage, wal_config.wal_retain_closed and params.quantization ignore/rescore: what would change nothing is taken, the rest refused the same over REST and gRPC', async (t) => {
  await restOk(t, 'PUT', '/collections/misc_ok', { vectors: VECTORS, hnsw_config: { inline_storage: false }, wal_config: { wal_retain_closed: null } });
  sameRefusal(
    t,
    await rest('PUT', '/collections/misc_bad', { vectors: VECTORS, hnsw_config: { inline_storage: true } }),
    await g.fail('Collections', 'Create', { collection_name: 'misc_bad', vectors_config: GRPC_VECTORS, hnsw_config: { inline_storage: true } }),
    /^Wrong input: hnsw_config\.inline_storage: .*not supported by Quiver/,
  );
  sameRefusal(
    t,
    await rest('PUT', '/collections/misc_bad', { vectors: VECTORS, wal_config: { wal_retain_closed: 3 } }),
    await g.fail('Collections', 'Create', { collection_name: 'misc_bad', vectors_config: GRPC_VECTORS, wal_config: { wal_retain_closed: '3' } }),
    /^Wrong input: wal_config\.wal_retain_closed: .*not supported/,
  );
  t.is((await rest('GET', '/collections/misc_bad')).status, 404, 'refused creates change nothing');
  await restOk(t, 'PUT', '/collections/misc_ok/points?wait=true', { points: [{ id: 1, vector: [1, 0] }] });
  const typed = await rest('POST', '/collections/misc_ok/points/search', { vector: [1, 0], limit: 1, params: { quantization: { rescore: 'no' } } });
  t.is(typed.status, 400, JSON.stringify(typed.body));
  t.regex(typed.body.status.error, /params\.quantization\.rescore: expected a boolean/);
  const fine = await rest('POST', '/collections/misc_ok/points/search', { vector: [1, 0], limit: 1, params: { quantization: { rescore: false, ignore: true } } });
  t.is(fine.status, 200, JSON.stringify(fine.body));
});
