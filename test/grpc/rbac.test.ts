/**
 * The reference's access matrix (`rbac-table.md`, read through test/auth/rbac-support.ts
 * as the REST walk reads it) over gRPC: for every row whose gRPC column names a method
 * of a service listed in SERVICES, and every kind of caller, one real call, which must
 * be allowed (any answer but UNAUTHENTICATED / PERMISSION_DENIED) or denied with exactly
 * UNAUTHENTICATED (no or a wrong credential, REST's 401, with its message) or
 * PERMISSION_DENIED "Forbidden: ..." (REST's 403). The api key's calls must succeed: the
 * requests are valid. A token that is not valid is PERMISSION_DENIED, as the reference.
 * The audit log records gRPC decisions with the call's path.
 *
 * Table-driven: a service joins by adding its name to SERVICES and a request per row
 * (keyed by the row's action) to CASES. A row whose REST route answers 501 may answer
 * the api key UNIMPLEMENTED (naming the feature), as the REST walk accepts the 501.
 *
 * State: a main collection `rbac` (named vectors a and b, 20 points), a throwaway
 * `rbac_tmp`, a custom-sharded `rbac_keys`; destructive rows restore their state with
 * the api key (over REST) before every call.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import test, { type ExecutionContext } from 'ava';
import { SignJWT } from 'jose';

import { API_KEY, LEVELS, RO_KEY, ROWS, expected, headersOf, token, type Level, type Row } from '../auth/rbac-support';
import { NOT_IMPLEMENTED_ROUTES } from '../../ts/api/rest/not-implemented';
import { waitFor } from '../support/wait';
import { codeName, startGrpcQuiver, type CallOptions, type GrpcQuiver, type QdrantGrpc, type ServiceKey } from './client';

/** The services whose rows this walk covers. */
const SERVICES: ServiceKey[] = ['Qdrant', 'Collections', 'Snapshots', 'Points'];

/**
 * Rows whose REST route answers 501 (ts/api/rest/not-implemented.ts): over gRPC their
 * method answers UNIMPLEMENTED once the caller passed the access check, which is what the
 * api key's call may get there (as the REST walk accepts the 501).
 */
const NOT_SERVED = new Set(NOT_IMPLEMENTED_ROUTES.map(([method, pattern]) => `${method} ${pattern}`));

const MAIN = 'rbac';
const TMP = 'rbac_tmp';
const KEYED = 'rbac_keys';
const VECTORS = { params_map: { map: { a: { size: '4', distance: 'Dot' }, b: { size: '4', distance: 'Dot' } } } };
const REST_CONFIG = { vectors: { a: { size: 4, distance: 'Dot' }, b: { size: 4, distance: 'Dot' } } };

let q: GrpcQuiver;
let client: QdrantGrpc;
let auditDir: string;

async function rest(method: string, p: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(q.server.url + p, {
    method,
    headers: { 'api-key': API_KEY, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text === '' ? null : JSON.parse(text) };
}

/** A REST request with the api key that must succeed; its `result`. */
async function admin(method: string, p: string, body?: unknown): Promise<any> {
  const r = await rest(method, p, body);
  if (r.status !== 200) throw new Error(`${method} ${p}: HTTP ${r.status} ${JSON.stringify(r.json)}`);
  return r.json.result;
}

async function ensureCollection(name: string): Promise<void> {
  const r = await rest('PUT', `/collections/${name}`, REST_CONFIG);
  if (r.status !== 200 && r.status !== 409) throw new Error(`PUT /collections/${name}: HTTP ${r.status}`);
}

interface Case {
  /** The collection the call names (the scope of collection tokens); MAIN by default. */
  collection?: string;
  /** The request; given what `before` returned. */
  request: object | ((prep: any) => object);
  /** Run with the api key before every call of the row (restores the row's state). */
  before?: () => Promise<unknown>;
}

const transfer = { shard_id: 0, from_peer_id: '1', to_peer_id: '2' };
const pid = (n: number) => ({ num: String(n) });
const ids = (...n: number[]) => ({ points: { ids: n.map(pid) } });
const dense = (data: number[]) => ({ dense: { data } });
const both = (a: number[], b: number[]) => ({ vectors: { vectors: { a: dense(a), b: dense(b) } } });
const search = { collection_name: MAIN, vector: [1, 2, 3, 4], vector_name: 'a', limit: '3' };
const recommend = { collection_name: MAIN, positive: [pid(1)], using: 'a', limit: '3' };
const query = { collection_name: MAIN, query: { nearest: dense([1, 2, 3, 4]) }, using: 'a', limit: '3' };
const aliases = (actions: object[]) => rest('POST', '/collections/aliases', { actions });
const dropKey = (k: string) => rest('POST', `/collections/${KEYED}/shards/delete`, { shard_key: k });

/** A request per row, by the row's action. */
const CASES: Record<string, Case> = {
  list_collections: { request: {} },
  get_collection: { request: { collection_name: MAIN } },
  create_collection: { collection: TMP, request: { collection_name: TMP, vectors_config: VECTORS }, before: () => rest('DELETE', `/collections/${TMP}`) },
  delete_collection: { collection: TMP, request: { collection_name: TMP }, before: () => ensureCollection(TMP) },
  update_collection_params: { request: { collection_name: MAIN, optimizers_config: { indexing_threshold: '20000' } } },
  get_collection_cluster_info: { request: { collection_name: MAIN } },
  collection_exists: { request: { collection_name: MAIN } },
  replicate_shard_operation: { request: { collection_name: MAIN, replicate_shard: transfer } },
  create_default_shard_key_operation: { collection: KEYED, request: { collection_name: KEYED, create_shard_key: { shard_key: { keyword: 'k1' } } }, before: () => dropKey('k1') },
  create_custom_shard_key_operation: {
    collection: KEYED,
    request: { collection_name: KEYED, create_shard_key: { shard_key: { keyword: 'k2' }, shards_number: 1, replication_factor: 1 } },
    before: () => dropKey('k2'),
  },
  drop_shard_key_operation: {
    collection: KEYED,
    request: { collection_name: KEYED, delete_shard_key: { shard_key: { keyword: 'k1' } } },
    before: () => rest('PUT', `/collections/${KEYED}/shards`, { shard_key: 'k1' }),
  },
  move_shard_operation: { request: { collection_name: MAIN, move_shard: transfer } },
  abort_shard_transfer_operation: { request: { collection_name: MAIN, abort_transfer: transfer } },
  drop_shard_replica_operation: { request: { collection_name: MAIN, drop_replica: { shard_id: 0, peer_id: '1' } } },
  restart_transfer_operation: { request: { collection_name: MAIN, restart_transfer: { ...transfer, method: 'StreamRecords' } } },
  create_alias: {
    request: { actions: [{ create_alias: { collection_name: MAIN, alias_name: 'rbac_a1' } }] },
    before: () => aliases([{ delete_alias: { alias_name: 'rbac_a1' } }]),
  },
  rename_alias: {
    request: { actions: [{ rename_alias: { old_alias_name: 'rbac_a2', new_alias_name: 'rbac_a3' } }] },
    before: async () => {
      await aliases([{ delete_alias: { alias_name: 'rbac_a3' } }]);
      await aliases([{ create_alias: { collection_name: MAIN, alias_name: 'rbac_a2' } }]);
    },
  },
  delete_alias: {
    request: { actions: [{ delete_alias: { alias_name: 'rbac_a4' } }] },
    before: () => aliases([{ create_alias: { collection_name: MAIN, alias_name: 'rbac_a4' } }]),
  },
  list_collection_aliases: { request: { collection_name: MAIN } },
  list_aliases: { request: {} },
  create_default_shard_key: { collection: KEYED, request: { collection_name: KEYED, request: { shard_key: { keyword: 'k1' } } }, before: () => dropKey('k1') },
  create_custom_shard_key: {
    collection: KEYED,
    request: { collection_name: KEYED, request: { shard_key: { keyword: 'k2' }, shards_number: 1, replication_factor: 1 } },
    before: () => dropKey('k2'),
  },
  delete_shard_key: {
    collection: KEYED,
    request: { collection_name: KEYED, request: { shard_key: { keyword: 'k1' } } },
    before: () => rest('PUT', `/collections/${KEYED}/shards`, { shard_key: 'k1' }),
  },
  list_shard_keys: { collection: KEYED, request: { collection_name: KEYED } },
  list_collection_snapshots: { request: { collection_name: MAIN } },
  create_collection_snapshot: { request: { collection_name: MAIN } },
  delete_collection_snapshot: {
    request: (name: string) => ({ collection_name: MAIN, snapshot_name: name }),
    before: async () => ((await admin('POST', `/collections/${MAIN}/snapshots?wait=true`)) as { name: string }).name,
  },
  list_full_snapshots: { request: {} },
  create_full_snapshot: { request: {} },
  delete_full_snapshot: {
    request: (name: string) => ({ snapshot_name: name }),
    before: async () => ((await admin('POST', '/snapshots?wait=true')) as { name: string }).name,
  },
  root: { request: {} },

  // qdrant.Points
  create_index: { request: { collection_name: MAIN, field_name: 'n', field_type: 'FieldTypeInteger', wait: true } },
  delete_index: {
    request: { collection_name: MAIN, field_name: 'tmp_field', wait: true },
    before: () => admin('PUT', `/collections/${MAIN}/index?wait=true`, { field_name: 'tmp_field', field_schema: 'keyword' }),
  },
  // Each call finds the state it needs: `c` absent to create it, present to delete it.
  create_vector_name: {
    request: { collection_name: MAIN, vector_name: 'c', dense_config: { size: '4', distance: 'Dot' }, wait: true },
    before: () => rest('DELETE', `/collections/${MAIN}/vectors/c?wait=true`),
  },
  delete_vector_name: {
    request: { collection_name: MAIN, vector_name: 'c', wait: true },
    before: () => rest('PUT', `/collections/${MAIN}/vectors/c?wait=true`, { dense: { size: 4, distance: 'Dot' } }),
  },
  get_points: { request: { collection_name: MAIN, ids: [pid(1), pid(2)] } },
  upsert_points: { request: { collection_name: MAIN, wait: true, points: [{ id: pid(100), vectors: both([1, 1, 1, 1], [2, 2, 2, 2]), payload: { n: { integer_value: '100' } } }] } },
  update_points_batch: {
    request: { collection_name: MAIN, wait: true, operations: [{ set_payload: { payload: { x: { integer_value: '1' } }, points_selector: ids(1) } }, { delete_points: { points: ids(101) } }] },
  },
  delete_points: { request: { collection_name: MAIN, wait: true, points: ids(101) } },
  update_vectors: { request: { collection_name: MAIN, wait: true, points: [{ id: pid(2), vectors: { vectors: { vectors: { a: dense([1, 2, 3, 1]) } } } }] } },
  delete_vectors: {
    request: { collection_name: MAIN, wait: true, points_selector: ids(100), vectors: { names: ['b'] } },
    before: () => admin('PUT', `/collections/${MAIN}/points?wait=true`, { points: [{ id: 100, vector: { a: [1, 1, 1, 1], b: [2, 2, 2, 2] } }] }),
  },
  set_payload: { request: { collection_name: MAIN, wait: true, payload: { x: { string_value: 'y' } }, points_selector: ids(3) } },
  overwrite_payload: { request: { collection_name: MAIN, wait: true, payload: { n: { integer_value: '3' } }, points_selector: ids(4) } },
  delete_payload: { request: { collection_name: MAIN, wait: true, keys: ['x'], points_selector: ids(3) } },
  clear_payload: { request: { collection_name: MAIN, wait: true, points: ids(100) } },
  scroll_points: { request: { collection_name: MAIN, limit: 5 } },
  search_points: { request: search },
  search_points_batch: { request: { collection_name: MAIN, search_points: [search] } },
  search_point_groups: { request: { ...search, group_by: 'n', group_size: 2 } },
  recommend_points: { request: recommend },
  recommend_points_batch: { request: { collection_name: MAIN, recommend_points: [recommend] } },
  recommend_point_groups: { request: { ...recommend, group_by: 'n', group_size: 2 } },
  discover_points: { request: { collection_name: MAIN, target: { single: { id: pid(1) } }, using: 'a', limit: '3' } },
  discover_points_batch: { request: { collection_name: MAIN, discover_points: [{ collection_name: MAIN, target: { single: { id: pid(1) } }, using: 'a', limit: '3' }] } },
  count_points: { request: { collection_name: MAIN, exact: true } },
  query_points: { request: query },
  query_batch_points: { request: { collection_name: MAIN, query_points: [query] } },
  query_points_groups: { request: { ...query, group_by: 'n' } },
  search_points_matrix_offsets: { request: { collection_name: MAIN, using: 'a' } },
  search_points_matrix_pairs: { request: { collection_name: MAIN, using: 'a' } },
  facet: { request: { collection_name: MAIN, key: 'n' } },
};

/** The rows this walk covers: a gRPC method of one of SERVICES. */
const GRPC_ROWS = ROWS.filter((r) => r.grpc !== null && SERVICES.includes(r.grpc.slice('qdrant.'.length, r.grpc.indexOf('/')) as ServiceKey));

/** REST headers of a caller as gRPC metadata. */
async function callOptions(level: Level, collection: string): Promise<CallOptions> {
  const h = await headersOf(level, collection);
  if (h['api-key'] !== undefined) return { apiKey: h['api-key'] };
  if (h.authorization !== undefined) return { token: h.authorization.replace(/^Bearer /, '') };
  return {};
}

test.before(async () => {
  auditDir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-grpc-rbac-audit-'));
  q = await startGrpcQuiver({
    SERVICE__SERVICE__API_KEY: API_KEY,
    SERVICE__SERVICE__READ_ONLY_API_KEY: RO_KEY,
    SERVICE__SERVICE__JWT_RBAC: 'true',
    SERVICE__AUDIT__ENABLED: 'true',
    SERVICE__AUDIT__DIR: auditDir,
  });
  client = q.client();
  for (const name of [MAIN, TMP]) await ensureCollection(name);
  await admin('PUT', `/collections/${MAIN}/points?wait=true`, {
    points: Array.from({ length: 20 }, (_, k) => ({ id: k + 1, vector: { a: [1, 2, 3, k], b: [k, 3, 2, 1] }, payload: { n: k } })),
  });
  await admin('PUT', `/collections/${KEYED}`, { ...REST_CONFIG, sharding_method: 'custom' });
});

test.after.always(async () => {
  await q?.stop();
  if (auditDir) fs.rmSync(auditDir, { recursive: true, force: true });
});

test.serial('the table names the methods of these services, and every one has a request', (t) => {
  t.true(GRPC_ROWS.length >= 60, `only ${GRPC_ROWS.length} rows with a gRPC method of ${SERVICES.join(', ')}`);
  for (const row of GRPC_ROWS) t.truthy(CASES[row.action], `no request for row ${row.action} (${row.grpc})`);
});

async function runRow(t: ExecutionContext, row: Row): Promise<void> {
  const c = CASES[row.action];
  if (c === undefined) {
    t.fail(`no request for row ${row.action}`);
    return;
  }
  const [service, rpc] = row.grpc!.slice('qdrant.'.length).split('/') as [ServiceKey, string];
  const collection = c.collection ?? MAIN;
  const problems: string[] = [];
  const seen: string[] = [];
  for (const level of LEVELS) {
    const prep = c.before ? await c.before() : undefined;
    const request = typeof c.request === 'function' ? c.request(prep) : c.request;
    let code = 'OK';
    let details = '';
    try {
      await client.call(service, rpc, request, await callOptions(level, collection));
    } catch (err) {
      code = codeName((err as { code: number }).code);
      details = (err as { details: string }).details;
    }
    seen.push(`${level}=${code}`);
    const { want, note } = expected(row, level);
    if (note !== undefined) t.log(note);
    if (want === 'allow') {
      if (code === 'UNAUTHENTICATED' || code === 'PERMISSION_DENIED') problems.push(`${level}: expected allowed, got ${code} ${details}`);
      // The api key's call must succeed (cluster changes on this single node answer REST's 400 "Distributed mode disabled").
      const standalone = code === 'INVALID_ARGUMENT' && details === 'Bad request: Distributed mode disabled';
      const notServed = code === 'UNIMPLEMENTED' && NOT_SERVED.has(`${row.method} ${row.pattern}`) && /^Not implemented: .* \(REST: /.test(details);
      if (level === 'api key' && code !== 'OK' && !standalone && !notServed) problems.push(`${level}: the api key's call failed with ${code} ${details} (the row's request is not valid)`);
      continue;
    }
    if (want === 401) {
      if (code !== 'UNAUTHENTICATED') problems.push(`${level}: expected UNAUTHENTICATED, got ${code} ${details}`);
      const msg = level === 'no credentials' ? 'Must provide an API key or an Authorization bearer token' : 'Invalid API key or JWT';
      if (details !== msg) problems.push(`${level}: message ${JSON.stringify(details)}, expected ${JSON.stringify(msg)}`);
      continue;
    }
    if (code !== 'PERMISSION_DENIED') {
      problems.push(`${level}: expected PERMISSION_DENIED, got ${code} ${details}`);
      continue;
    }
    if (!details.startsWith('Forbidden: ')) problems.push(`${level}: PERMISSION_DENIED should say "Forbidden: ...", got ${JSON.stringify(details)}`);
    let msg: string | null = null;
    if (level === 'read-only key' || level === 'jwt r') msg = 'Forbidden: Global manage access is required';
    else if (level === 'jwt coll r' && row.cells['coll rw'] === 'Y') msg = `Forbidden: Write access to collection ${collection} is required`;
    else if (level === 'jwt coll prw' && row.cells['coll rw'] === 'Y') msg = `Forbidden: Only points access is allowed for collection ${collection}`;
    if (msg !== null && details !== msg) problems.push(`${level}: ${JSON.stringify(details)}, expected ${JSON.stringify(msg)}`);
  }
  t.log(`${row.action} (${row.grpc}): ${seen.join(' ')}`);
  t.deepEqual(problems, [], `${row.action} (${row.grpc})`);
}

for (const row of GRPC_ROWS) {
  test.serial(`${row.action}: ${row.grpc}`, (t) => runRow(t, row));
}

test.serial('listings over gRPC: a collection token sees only its collections and their aliases', async (t) => {
  await admin('POST', '/collections/aliases', { actions: [{ create_alias: { collection_name: TMP, alias_name: 'tmp_alias' } }, { create_alias: { collection_name: MAIN, alias_name: 'main_alias' } }] });
  const tok = await token({ access: [{ collection: MAIN, access: 'r' }] });
  const names = (await client.call('Collections', 'List', {}, { token: tok })).collections.map((c: { name: string }) => c.name);
  t.deepEqual(names, [MAIN]);
  const al = (await client.call('Collections', 'ListAliases', {}, { token: tok })).aliases as Array<{ collection_name: string }>;
  t.true(al.length > 0 && al.every((a) => a.collection_name === MAIN), JSON.stringify(al));
  const all = (await client.call('Collections', 'List', {}, { apiKey: RO_KEY })).collections.map((c: { name: string }) => c.name).sort();
  t.true(all.includes(MAIN) && all.includes(TMP) && all.includes(KEYED), `${all}`);
});

test.serial('a token that is not valid is PERMISSION_DENIED; the api-key metadata wins over a bearer token', async (t) => {
  const forged = await new SignJWT({ access: 'm' }).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setExpirationTime('1h').sign(new TextEncoder().encode('not the api key'));
  const err = await client.fail('Collections', 'List', {}, { token: forged });
  t.is(codeName(err.code), 'PERMISSION_DENIED');
  const restAnswer = await fetch(`${q.server.url}/collections`, { headers: { authorization: `Bearer ${forged}` } });
  t.is(restAnswer.status, 403);
  t.is(err.details, await restAnswer.text());
  // The api key in `api-key` is used even beside a bearer token (as REST reads them).
  await t.notThrowsAsync(client.call('Collections', 'List', {}, { apiKey: API_KEY, token: forged }));
});

test.serial('the audit log records gRPC decisions with the call path', async (t) => {
  await client.fail('Collections', 'Delete', { collection_name: MAIN }, { apiKey: RO_KEY });
  const lines = await waitFor('the audit record of a refused gRPC Delete', () => {
      const files = fs.readdirSync(auditDir).filter((f) => !f.startsWith('.'));
      const events = files.flatMap((f) =>
        fs
          .readFileSync(path.join(auditDir, f), 'utf8')
          .split('\n')
          .filter((l) => l.startsWith('{'))
          .map((l) => JSON.parse(l) as Record<string, unknown>),
      );
      const found = events.filter((e) => e.path === '/qdrant.Collections/Delete' && e.allowed === false && e.subject === 'read_only_api_key' && e.collection === MAIN);
      return found.length > 0 ? found : null;
  });
  t.like(lines[0], { method: '/qdrant.Collections/Delete', path: '/qdrant.Collections/Delete', collection: MAIN, allowed: false, reason: 'Global manage access is required' });
  t.is(lines[0].address, '127.0.0.1');
});
