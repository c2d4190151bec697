/**
 * The reference's access matrix (`rbac-table.md`, read at test time from the shared
 * reference folder) walked against a live bin/quiver: for every row with a REST
 * endpoint and every kind of caller, one real request, which must be allowed (any
 * answer but 401/403; a 501 of a route not served yet counts as allowed) or denied with
 * exactly 403 (401 for no or a wrong credential).
 *
 * Callers: no credentials, a wrong key, the read-only key, the api key, and JWTs signed
 * with the api key: `access: "m"`, `access: "r"`, and `[{collection, access: r|rw|prw}]`
 * scoped to the collection named in the path (the main collection for routes without
 * one). Columns: read-only key and JWT "r" -> "global r"; api key and JWT "m" ->
 * "manage"; collection tokens -> "coll r" / "coll rw" / "coll prw". Rows whose gRPC
 * column says "no auth needed" are open: any caller, even none, is allowed.
 *
 * Cells marked `?` in the table (the prw column of most rows) take Quiver's decision
 * (ts/auth/policy.ts), written down in PRW_DECISIONS below with its reason, and logged.
 *
 * State: a main collection `rbac` (named vectors a and b, 20 points with payloads, a
 * keyword index on `city`), a collection, a shard and a full snapshot made at start.
 * Destructive rows work on the throwaway collection `rbac_tmp`, or on snapshots, index
 * fields, aliases and shard keys (of the custom-sharded collection `rbac_keys`) that their `before` hook (run with the api key before every single
 * request) creates again, so each request meets the same state. The api key's requests
 * must also succeed (2xx, or 501 for a route not served yet): the bodies are valid, so an
 * allowed request reaches its handler rather than failing for another reason.
 *
 * Then list filtering: a collection token sees its collections only in GET /collections,
 * GET /aliases and GET /telemetry.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import test, { type ExecutionContext } from 'ava';

import { startQuiver, type RunningQuiver } from '../api/helpers';
import { API_KEY, LEVELS, NOT_ROUTED, PRW_DECISIONS, RO_KEY, ROWS, TABLE_FILE, expected, headersOf, token, type Column, type Row } from './rbac-support';

// -- the server and its state -----------------------------------------------------------------

const MAIN = 'rbac';
const TMP = 'rbac_tmp';
const OTHER = 'rbac_other';
/** A custom-sharded collection: the shard key rows work on it (an auto-sharded one refuses keys). */
const KEYED = 'rbac_keys';
const COLLECTION_CONFIG = { vectors: { a: { size: 4, distance: 'Dot' }, b: { size: 4, distance: 'Dot' } } };

let server: RunningQuiver;
let snapshotsDir: string;
const tmpDirs: string[] = [];

interface Reply {
  status: number;
  type: string;
  text: string;
  json: any;
}

interface Request {
  method: string;
  path: string;
  headers?: Record<string, string>;
  body?: unknown;
  form?: FormData;
}

async function send(r: Request): Promise<Reply> {
  const headers: Record<string, string> = { ...(r.headers ?? {}) };
  let body: string | FormData | undefined;
  if (r.form !== undefined) body = r.form;
  else if (r.body !== undefined) {
    body = JSON.stringify(r.body);
    headers['content-type'] = 'application/json';
  }
  const res = await fetch(server.url + r.path, { method: r.method, headers, body, signal: AbortSignal.timeout(30_000) });
  const text = Buffer.from(await res.arrayBuffer()).toString('latin1');
  let json: any = null;
  if ((res.headers.get('content-type') ?? '').includes('json')) {
    try {
      json = JSON.parse(text);
    } catch {
      json = null;
    }
  }
  return { status: res.status, type: res.headers.get('content-type') ?? '', text, json };
}

/** A request with the api key that must succeed; its `result`. */
async function admin(method: string, p: string, body?: unknown): Promise<any> {
  const r = await send({ method, path: p, headers: { 'api-key': API_KEY }, body });
  if (r.status !== 200) throw new Error(`${method} ${p}: HTTP ${r.status} ${r.text.slice(0, 300)}`);
  return r.json?.result;
}

/** A request with the api key whose outcome does not matter (state restoring). */
async function adminTry(method: string, p: string, body?: unknown): Promise<number> {
  return (await send({ method, path: p, headers: { 'api-key': API_KEY }, body })).status;
}

async function ensureCollection(name: string): Promise<void> {
  const s = await adminTry('PUT', `/collections/${name}`, COLLECTION_CONFIG);
  if (s !== 200 && s !== 409) throw new Error(`PUT /collections/${name}: HTTP ${s}`);
}

const vec = (i: number) => [1 + (i % 3), 2, 3 - (i % 2), 0.5 * i];

async function fill(name: string): Promise<void> {
  const points = Array.from({ length: 20 }, (_, k) => {
    const id = k + 1;
    return { id, vector: { a: vec(id), b: vec(id + 7) }, payload: { city: `c${id % 3}`, n: id } };
  });
  await admin('PUT', `/collections/${name}/points?wait=true`, { points });
}

/** Names of snapshots made at start, for the download rows. */
const made: { collection: string; shard: string; full: string; collectionBytes: Buffer; shardBytes: Buffer } = {
  collection: '',
  shard: '',
  full: '',
  collectionBytes: Buffer.alloc(0),
  shardBytes: Buffer.alloc(0),
};

async function download(p: string): Promise<Buffer> {
  const res = await fetch(server.url + p, { headers: { 'api-key': API_KEY } });
  const b = Buffer.from(await res.arrayBuffer());
  if (res.status !== 200) throw new Error(`GET ${p}: HTTP ${res.status}`);
  return b;
}

async function listed(p: string): Promise<string[]> {
  return ((await admin('GET', p)) as Array<{ name: string }>).map((s) => s.name);
}

/**
 * A snapshot for a delete row: the one made for it before, while it is still there,
 * else a new one.
 */
const reserved = new Map<string, string>();
async function snapshotToDelete(listPath: string): Promise<string> {
  const have = reserved.get(listPath);
  if (have !== undefined && (await listed(listPath)).includes(have)) return have;
  const s = (await admin('POST', `${listPath}?wait=true`)) as { name: string };
  reserved.set(listPath, s.name);
  return s.name;
}

// -- one request per row ----------------------------------------------------------------------

interface Case {
  /** The collection in the path (the scope of collection tokens); MAIN by default. */
  collection?: string;
  /** Path (with query); given what `before` returned. */
  path: string | ((prep: any) => string);
  body?: unknown;
  /** A multipart body, built anew for every request. */
  form?: () => FormData;
  /** Run with the api key before every request of the row (restores the row's state). */
  before?: () => Promise<unknown>;
}

const P = `/collections/${MAIN}`;
const query = { query: [1, 0, 0, 1], using: 'a', limit: 3 };
const search = { vector: { name: 'a', vector: [1, 0, 0, 1] }, limit: 3 };
const recommend = { positive: [1], using: 'a', limit: 3 };
const transfer = { shard_id: 0, from_peer_id: 1, to_peer_id: 2 };

function uploadForm(bytes: () => Buffer): () => FormData {
  return () => {
    const form = new FormData();
    form.append('snapshot', new Blob([new Uint8Array(bytes())]), 'upload.snapshot');
    return form;
  };
}

const CASES: Record<string, Case> = {
  list_collections: { path: '/collections' },
  get_collection: { path: P },
  create_collection: {
    collection: TMP,
    path: `/collections/${TMP}`,
    body: COLLECTION_CONFIG,
    before: () => adminTry('DELETE', `/collections/${TMP}`),
  },
  delete_collection: { collection: TMP, path: `/collections/${TMP}`, before: () => ensureCollection(TMP) },
  update_collection_params: { path: P, body: { optimizers_config: { indexing_threshold: 20000 } } },
  get_collection_cluster_info: { path: `${P}/cluster` },
  collection_exists: { path: `${P}/exists` },
  get_optimizations: { path: `${P}/optimizations` },
  replicate_shard_operation: { path: `${P}/cluster`, body: { replicate_shard: transfer } },
  create_default_shard_key_operation: {
    collection: KEYED,
    path: `/collections/${KEYED}/cluster`,
    body: { create_sharding_key: { shard_key: 'k1' } },
    before: () => adminTry('POST', `/collections/${KEYED}/shards/delete`, { shard_key: 'k1' }),
  },
  create_custom_shard_key_operation: {
    collection: KEYED,
    path: `/collections/${KEYED}/cluster`,
    body: { create_sharding_key: { shard_key: 'k2', shards_number: 1, replication_factor: 1 } },
    before: () => adminTry('POST', `/collections/${KEYED}/shards/delete`, { shard_key: 'k2' }),
  },
  drop_shard_key_operation: {
    collection: KEYED,
    path: `/collections/${KEYED}/cluster`,
    body: { drop_sharding_key: { shard_key: 'k1' } },
    before: () => adminTry('PUT', `/collections/${KEYED}/shards`, { shard_key: 'k1' }),
  },
  move_shard_operation: { path: `${P}/cluster`, body: { move_shard: transfer } },
  abort_shard_transfer_operation: { path: `${P}/cluster`, body: { abort_transfer: transfer } },
  drop_shard_replica_operation: { path: `${P}/cluster`, body: { drop_replica: { shard_id: 0, peer_id: 1 } } },
  restart_transfer_operation: { path: `${P}/cluster`, body: { restart_transfer: { ...transfer, method: 'stream_records' } } },
  create_alias: {
    path: '/collections/aliases',
    body: { actions: [{ create_alias: { collection_name: MAIN, alias_name: 'rbac_a1' } }] },
    before: () => adminTry('POST', '/collections/aliases', { actions: [{ delete_alias: { alias_name: 'rbac_a1' } }] }),
  },
  rename_alias: {
    path: '/collections/aliases',
    body: { actions: [{ rename_alias: { old_alias_name: 'rbac_a2', new_alias_name: 'rbac_a3' } }] },
    before: async () => {
      await adminTry('POST', '/collections/aliases', { actions: [{ delete_alias: { alias_name: 'rbac_a3' } }] });
      await adminTry('POST', '/collections/aliases', { actions: [{ create_alias: { collection_name: MAIN, alias_name: 'rbac_a2' } }] });
    },
  },
  delete_alias: {
    path: '/collections/aliases',
    body: { actions: [{ delete_alias: { alias_name: 'rbac_a4' } }] },
    before: () => adminTry('POST', '/collections/aliases', { actions: [{ create_alias: { collection_name: MAIN, alias_name: 'rbac_a4' } }] }),
  },
  list_collection_aliases: { path: `${P}/aliases` },
  list_aliases: { path: '/aliases' },
  create_default_shard_key: {
    collection: KEYED,
    path: `/collections/${KEYED}/shards`,
    body: { shard_key: 'k1' },
    before: () => adminTry('POST', `/collections/${KEYED}/shards/delete`, { shard_key: 'k1' }),
  },
  create_custom_shard_key: {
    collection: KEYED,
    path: `/collections/${KEYED}/shards`,
    body: { shard_key: 'k2', shards_number: 1, replication_factor: 1 },
    before: () => adminTry('POST', `/collections/${KEYED}/shards/delete`, { shard_key: 'k2' }),
  },
  delete_shard_key: {
    collection: KEYED,
    path: `/collections/${KEYED}/shards/delete`,
    body: { shard_key: 'k1' },
    before: () => adminTry('PUT', `/collections/${KEYED}/shards`, { shard_key: 'k1' }),
  },
  list_shard_keys: { collection: KEYED, path: `/collections/${KEYED}/shards` },
  create_index: { path: `${P}/index?wait=true`, body: { field_name: 'n', field_schema: 'integer' } },
  delete_index: {
    path: `${P}/index/tmpf?wait=true`,
    before: () => admin('PUT', `${P}/index?wait=true`, { field_name: 'tmpf', field_schema: 'keyword' }),
  },
  // Each call finds the state it needs: `c` absent to create it, present to delete it.
  create_vector_name: { path: `${P}/vectors/c?wait=true`, body: { dense: { size: 4, distance: 'Dot' } }, before: () => adminTry('DELETE', `${P}/vectors/c?wait=true`) },
  delete_vector_name: { path: `${P}/vectors/c?wait=true`, before: () => adminTry('PUT', `${P}/vectors/c?wait=true`, { dense: { size: 4, distance: 'Dot' } }) },
  list_collection_snapshots: { path: `${P}/snapshots` },
  create_collection_snapshot: { path: `${P}/snapshots?wait=true` },
  delete_collection_snapshot: {
    path: (name: string) => `${P}/snapshots/${name}?wait=true`,
    before: () => snapshotToDelete(`${P}/snapshots`),
  },
  download_collection_snapshot: { path: () => `${P}/snapshots/${made.collection}` },
  upload_collection_snapshot: {
    collection: TMP,
    path: `/collections/${TMP}/snapshots/upload?wait=true&priority=snapshot`,
    form: uploadForm(() => made.collectionBytes),
  },
  recover_collection_snapshot: {
    collection: TMP,
    path: `/collections/${TMP}/snapshots/recover?wait=true`,
    body: undefined, // set once the snapshot exists (see the setup)
  },
  upload_shard_snapshot: {
    collection: TMP,
    path: `/collections/${TMP}/shards/0/snapshots/upload?wait=true&priority=snapshot`,
    form: uploadForm(() => made.shardBytes),
    before: () => ensureCollection(TMP),
  },
  recover_shard_snapshot: {
    collection: TMP,
    path: `/collections/${TMP}/shards/0/snapshots/recover?wait=true`,
    body: undefined, // set in the setup
    before: () => ensureCollection(TMP),
  },
  create_shard_snapshot: { path: `${P}/shards/0/snapshots?wait=true` },
  list_shard_snapshots: { path: `${P}/shards/0/snapshots` },
  delete_shard_snapshot: {
    path: (name: string) => `${P}/shards/0/snapshots/${name}?wait=true`,
    before: () => snapshotToDelete(`${P}/shards/0/snapshots`),
  },
  download_shard_snapshot: { path: () => `${P}/shards/0/snapshots/${made.shard}` },
  stream_shard_snapshot: { path: `${P}/shards/0/snapshot` },
  list_full_snapshots: { path: '/snapshots' },
  create_full_snapshot: { path: '/snapshots?wait=true' },
  delete_full_snapshot: { path: (name: string) => `/snapshots/${name}?wait=true`, before: () => snapshotToDelete('/snapshots') },
  download_full_snapshot: { path: () => `/snapshots/${made.full}` },
  get_cluster: { path: '/cluster' },
  cluster_telemetry: { path: '/cluster/telemetry' },
  recover_raft_state: { path: '/cluster/recover' },
  delete_peer: { path: '/cluster/peer/2' },
  get_quotas: { path: '/quotas' },
  update_quotas: { path: '/quotas', body: {} },
  get_point: { path: `${P}/points/1` },
  get_points: { path: `${P}/points`, body: { ids: [1, 2] } },
  upsert_points: { path: `${P}/points?wait=true`, body: { points: [{ id: 100, vector: { a: [1, 1, 1, 1], b: [2, 2, 2, 2] }, payload: { city: 'x' } }] } },
  update_points_batch: {
    path: `${P}/points/batch?wait=true`,
    body: { operations: [{ upsert: { points: [{ id: 101, vector: { a: [1, 2, 1, 2], b: [2, 1, 2, 1] } }] } }] },
  },
  delete_points: { path: `${P}/points/delete?wait=true`, body: { points: [100] } },
  update_vectors: { path: `${P}/points/vectors?wait=true`, body: { points: [{ id: 101, vector: { b: [3, 3, 3, 3] } }] } },
  delete_vectors: { path: `${P}/points/vectors/delete?wait=true`, body: { points: [101], vector: ['b'] } },
  set_payload: { path: `${P}/points/payload?wait=true`, body: { points: [3], payload: { extra: 1 } } },
  overwrite_payload: { path: `${P}/points/payload?wait=true`, body: { points: [101], payload: { city: 'c9' } } },
  delete_payload: { path: `${P}/points/payload/delete?wait=true`, body: { points: [3], keys: ['extra'] } },
  clear_payload: { path: `${P}/points/payload/clear?wait=true`, body: { points: [101] } },
  scroll_points: { path: `${P}/points/scroll`, body: { limit: 3, filter: { must: [{ key: 'city', match: { value: 'c1' } }] } } },
  search_points: { path: `${P}/points/search`, body: search },
  search_points_batch: { path: `${P}/points/search/batch`, body: { searches: [search, search] } },
  search_point_groups: { path: `${P}/points/search/groups`, body: { ...search, group_by: 'city', group_size: 1 } },
  recommend_points: { path: `${P}/points/recommend`, body: recommend },
  recommend_points_batch: { path: `${P}/points/recommend/batch`, body: { searches: [recommend] } },
  recommend_point_groups: { path: `${P}/points/recommend/groups`, body: { ...recommend, group_by: 'city', group_size: 1 } },
  discover_points: { path: `${P}/points/discover`, body: { target: 1, context: [{ positive: 2, negative: 3 }], using: 'a', limit: 3 } },
  discover_points_batch: { path: `${P}/points/discover/batch`, body: { searches: [{ target: 1, context: [{ positive: 2, negative: 3 }], using: 'a', limit: 3 }] } },
  count_points: { path: `${P}/points/count`, body: { exact: true, filter: { must: [{ key: 'city', match: { value: 'c2' } }] } } },
  query_points: { path: `${P}/points/query`, body: query },
  query_batch_points: { path: `${P}/points/query/batch`, body: { searches: [query, query] } },
  query_points_groups: { path: `${P}/points/query/groups`, body: { ...query, group_by: 'city', group_size: 1 } },
  search_points_matrix_offsets: { path: `${P}/points/search/matrix/offsets`, body: { sample: 5, limit: 2, using: 'a' } },
  search_points_matrix_pairs: { path: `${P}/points/search/matrix/pairs`, body: { sample: 5, limit: 2, using: 'a' } },
  facet: { path: `${P}/facet`, body: { key: 'city', limit: 5 } },
  root: { path: '/' },
  readyz: { path: '/readyz' },
  healthz: { path: '/healthz' },
  livez: { path: '/livez' },
  telemetry: { path: '/telemetry' },
  metrics: { path: '/metrics' },
  get_issues: { path: '/issues' },
  clear_issues: { path: '/issues' },
  get_logger_config: { path: '/logger' },
  update_logger_config: { path: '/logger', body: {} },
};

// -- the walk ---------------------------------------------------------------------------------

interface Outcome {
  allowed: boolean;
  status: number;
}

/** Every 403 message met, with the callers that got it (logged in the summary). */
const messages = new Map<string, Set<string>>();

const summary = { rows: 0, requests: 0, allowed: 0, denied401: 0, denied403: 0, notRouted: 0, undecided: [] as string[] };

test.before(async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-rbac-'));
  tmpDirs.push(dir);
  snapshotsDir = path.join(dir, 'snapshots');
  server = await startQuiver({
    SERVICE__SERVICE__API_KEY: API_KEY,
    SERVICE__SERVICE__READ_ONLY_API_KEY: RO_KEY,
    SERVICE__SERVICE__JWT_RBAC: 'true',
    SERVICE__STORAGE__SNAPSHOTS_PATH: snapshotsDir,
  });

  for (const name of [MAIN, TMP, OTHER]) {
    await ensureCollection(name);
    await fill(name);
  }
  await admin('PUT', `/collections/${KEYED}`, { ...COLLECTION_CONFIG, sharding_method: 'custom' });
  await admin('PUT', `${P}/index?wait=true`, { field_name: 'city', field_schema: 'keyword' });
  await admin('POST', '/collections/aliases', {
    actions: [
      { create_alias: { collection_name: MAIN, alias_name: 'rbac_alias' } },
      { create_alias: { collection_name: OTHER, alias_name: 'other_alias' } },
    ],
  });

  made.collection = ((await admin('POST', `${P}/snapshots?wait=true`)) as { name: string }).name;
  made.shard = ((await admin('POST', `${P}/shards/0/snapshots?wait=true`)) as { name: string }).name;
  made.full = ((await admin('POST', '/snapshots?wait=true')) as { name: string }).name;
  made.collectionBytes = await download(`${P}/snapshots/${made.collection}`);
  made.shardBytes = await download(`${P}/shards/0/snapshots/${made.shard}`);
  CASES.recover_collection_snapshot.body = { location: `file://${path.join(snapshotsDir, MAIN, made.collection)}`, priority: 'snapshot' };
  CASES.recover_shard_snapshot.body = { location: `file://${path.join(snapshotsDir, MAIN, 'shards', '0', made.shard)}`, priority: 'snapshot' };
});

test.after.always(async () => {
  await server?.stop();
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

test.serial('the table parses: every REST row has a request, every ? cell a decision', (t) => {
  t.true(ROWS.length >= 80, `only ${ROWS.length} REST rows in ${TABLE_FILE}`);
  for (const row of ROWS) {
    t.truthy(CASES[row.action], `no request for row ${row.action} (${row.method} ${row.pattern})`);
    for (const c of Object.keys(row.cells) as Column[]) {
      if (row.cells[c] === '?' && !row.open) {
        t.is(c, 'coll prw', `a ? outside the prw column: ${row.action} / ${c}`);
        t.truthy(PRW_DECISIONS[row.action], `no decision for the ? cell of ${row.action}`);
      }
    }
  }
});

async function runRow(t: ExecutionContext, row: Row): Promise<void> {
  const c = CASES[row.action];
  if (c === undefined) {
    t.fail(`no request for row ${row.action}`);
    return;
  }
  const collection = c.collection ?? MAIN;
  const routeKey = `${row.method} ${row.pattern}`;
  summary.rows++;
  const problems: string[] = [];
  const seen: string[] = [];
  for (const level of LEVELS) {
    const prep = c.before ? await c.before() : undefined;
    const p = typeof c.path === 'function' ? c.path(prep) : c.path;
    const r = await send({ method: row.method, path: p, headers: await headersOf(level, collection), body: c.body, form: c.form?.() });
    summary.requests++;
    seen.push(`${level}=${r.status}`);
    if (NOT_ROUTED.has(routeKey)) {
      summary.notRouted++;
      if (r.status !== 404) problems.push(`${level}: ${routeKey} is not a Quiver route, expected the unknown-route 404, got ${r.status}`);
      continue;
    }
    const { want, note } = expected(row, level);
    if (note !== undefined) {
      t.log(note);
      if (!summary.undecided.includes(note)) summary.undecided.push(note);
    }
    if (want === 'allow') {
      if (r.status === 401 || r.status === 403) problems.push(`${level}: expected allowed, got ${r.status} ${r.text.slice(0, 200)}`);
      else summary.allowed++;
      // The api key's request must really succeed: the row's request is valid.
      // (Cluster changes on this standalone node answer the reference's 405 "standalone mode",
      // collection cluster changes its 400 "Distributed mode disabled".)
      const standalone =
        (r.status === 405 && r.json?.status?.error === 'Quiver is running in standalone mode') ||
        (r.status === 400 && r.json?.status?.error === 'Bad request: Distributed mode disabled');
      if (level === 'api key' && !(r.status >= 200 && r.status < 300) && r.status !== 501 && !standalone) {
        problems.push(`${level}: the api key's request failed with ${r.status} ${r.text.slice(0, 200)} (the row's request is not valid)`);
      }
      continue;
    }
    if (r.status !== want) {
      problems.push(`${level}: expected ${want}, got ${r.status} ${r.text.slice(0, 200)}`);
      continue;
    }
    if (want === 401) {
      summary.denied401++;
      // Authentication failures answer in plain text, as the reference's middleware does.
      if (!r.type.startsWith('text/plain')) problems.push(`${level}: a 401 should be text/plain, got ${r.type}`);
      const msg = level === 'no credentials' ? 'Must provide an API key or an Authorization bearer token' : 'Invalid API key or JWT';
      if (r.text !== msg) problems.push(`${level}: 401 body ${JSON.stringify(r.text)}, expected ${JSON.stringify(msg)}`);
    } else {
      summary.denied403++;
      // A known caller without access: the JSON error envelope, "Forbidden: ...".
      const error = r.json?.status?.error;
      if (typeof error !== 'string' || !error.startsWith('Forbidden: ')) {
        problems.push(`${level}: a 403 should carry the envelope with "Forbidden: ...", got ${r.type} ${r.text.slice(0, 200)}`);
        continue;
      }
      // The reference's message where the table pins the reason down.
      let msg: string | null = null;
      if (level === 'read-only key' || level === 'jwt r') msg = 'Forbidden: Global manage access is required';
      else if (level === 'jwt coll r' && row.cells['coll rw'] === 'Y') msg = `Forbidden: Write access to collection ${collection} is required`;
      else if (level === 'jwt coll prw' && row.cells['coll rw'] === 'Y') msg = `Forbidden: Only points access is allowed for collection ${collection}`;
      if (msg !== null && error !== msg) problems.push(`${level}: 403 ${JSON.stringify(error)}, expected ${JSON.stringify(msg)}`);
      const shape = error.replace(/collection \S+ is/, 'collection <c> is').replace(/collection \S+$/, 'collection <c>');
      const seenFor = messages.get(shape) ?? new Set<string>();
      seenFor.add(level);
      messages.set(shape, seenFor);
    }
  }
  t.log(`${row.action}: ${seen.join(' ')}`);
  t.deepEqual(problems, [], `${row.action} (${routeKey})`);
}

for (const row of ROWS) {
  test.serial(`${row.action}: ${row.method} ${row.pattern}`, (t) => runRow(t, row));
}

// -- listings filtered for collection tokens -----------------------------------------------------

test.serial('listings: a collection token sees only its collections in /collections, /aliases, /telemetry', async (t) => {
  const as = async (p: string, h: Record<string, string>) => {
    const r = await send({ method: 'GET', path: p, headers: h });
    t.is(r.status, 200, `GET ${p}: ${r.text.slice(0, 200)}`);
    return r.json.result;
  };
  const names = (res: any) => (res.collections as Array<{ name: string }>).map((c) => c.name).sort();
  const aliasesOf = (res: any) => (res.aliases as Array<{ alias_name: string; collection_name: string }>).map((a) => `${a.alias_name}->${a.collection_name}`).sort();
  const telemetryIds = (res: any) => (res.collections.collections as Array<{ id: string }>).map((c) => c.id).sort();

  const all = names(await as('/collections', { 'api-key': API_KEY }));
  t.true(all.includes(MAIN) && all.includes(OTHER), `the api key sees every collection: ${all}`);
  t.deepEqual(names(await as('/collections', { 'api-key': RO_KEY })), all, 'the read-only key sees every collection');
  const allAliases = aliasesOf(await as('/aliases', { 'api-key': API_KEY }));
  t.true(allAliases.includes(`rbac_alias->${MAIN}`) && allAliases.includes(`other_alias->${OTHER}`), `${allAliases}`);
  t.deepEqual(aliasesOf(await as('/aliases', { 'api-key': RO_KEY })), allAliases);
  t.deepEqual(telemetryIds(await as('/telemetry', { 'api-key': RO_KEY })), all);

  for (const mode of ['r', 'rw', 'prw']) {
    const h = { authorization: `Bearer ${await token({ access: [{ collection: MAIN, access: mode }] })}` };
    t.deepEqual(names(await as('/collections', h)), [MAIN], `${mode} token on ${MAIN}: GET /collections`);
    const al = aliasesOf(await as('/aliases', h));
    t.true(al.length > 0 && al.every((a) => a.endsWith(`->${MAIN}`)), `${mode} token on ${MAIN}: GET /aliases ${al}`);
    const tel = await as('/telemetry', h);
    t.deepEqual(telemetryIds(tel), [MAIN], `${mode} token on ${MAIN}: /telemetry collections`);
    t.is(tel.collections.number_of_collections, 1, `${mode} token: /telemetry number_of_collections`);
  }
  const both = { authorization: `Bearer ${await token({ access: [{ collection: MAIN, access: 'r' }, { collection: OTHER, access: 'rw' }] })}` };
  t.deepEqual(names(await as('/collections', both)), [MAIN, OTHER].sort());
  t.deepEqual(aliasesOf(await as('/aliases', both)).filter((a) => a.startsWith('other_alias') || a.startsWith('rbac_alias')), [`other_alias->${OTHER}`, `rbac_alias->${MAIN}`]);
  t.deepEqual(telemetryIds(await as('/telemetry', both)), [MAIN, OTHER].sort());
  // A token for a collection that does not exist sees nothing (and is not refused).
  const none = { authorization: `Bearer ${await token({ access: [{ collection: 'nope', access: 'rw' }] })}` };
  t.deepEqual(names(await as('/collections', none)), []);
  t.deepEqual(aliasesOf(await as('/aliases', none)), []);
  t.deepEqual(telemetryIds(await as('/telemetry', none)), []);
});

test.serial('no way around the scope: crafted snapshot names do not reach another collection\'s snapshots; aliases', async (t) => {
  const otherSnap = ((await admin('POST', `/collections/${OTHER}/snapshots?wait=true`)) as { name: string }).name;
  const h = await headersOf('jwt coll r', MAIN);
  for (const p of [
    `${P}/snapshots/..%2F${OTHER}%2F${otherSnap}`,
    `${P}/snapshots/..%2F..%2F${OTHER}%2F${otherSnap}`,
    `${P}/shards/0/snapshots/..%2F..%2F..%2F${OTHER}%2F${otherSnap}`,
    `${P}/snapshots/..%5C${OTHER}%5C${otherSnap}`,
  ]) {
    const r = await send({ method: 'GET', path: p, headers: h });
    t.not(r.status, 200, `GET ${p} with a token for ${MAIN}`);
    t.false(r.text.length > 1000, 'no archive came back');
  }
  const own = await send({ method: 'GET', path: `/collections/${OTHER}/snapshots/${otherSnap}`, headers: h });
  t.is(own.status, 403, 'the direct path is refused');
  // Aliases: access is decided on the name in the path, not on what it resolves to.
  const viaAlias = await send({ method: 'POST', path: '/collections/rbac_alias/points/scroll', headers: h, body: {} });
  t.is(viaAlias.status, 403, `a token for ${MAIN} through its alias rbac_alias: ${viaAlias.text.slice(0, 200)}`);
  const aliasToken = await headersOf('jwt coll r', 'other_alias');
  const aliasScoped = await send({ method: 'POST', path: '/collections/other_alias/points/scroll', headers: aliasToken, body: {} });
  // A token naming an alias reaches the collection behind it (the name in the path is what is checked).
  t.log(`a token scoped to the alias other_alias, scrolling /collections/other_alias: ${aliasScoped.status}`);
  const aliasScopedDirect = await send({ method: 'POST', path: `/collections/${OTHER}/points/scroll`, headers: aliasToken, body: {} });
  t.is(aliasScopedDirect.status, 403, 'but not the collection under its own name');
});

test.serial('summary', (t) => {
  const levels = LEVELS.length;
  t.log(`rbac table: ${ROWS.length} REST rows x ${levels} callers = ${summary.requests} requests checked over ${summary.rows} rows`);
  t.log(`allowed ${summary.allowed}, denied 401 ${summary.denied401}, denied 403 ${summary.denied403}, not routed (404) ${summary.notRouted}`);
  t.log(`? cells decided by Quiver's policy (${summary.undecided.length}):`);
  for (const n of summary.undecided) t.log(`  ${n}`);
  t.log('403 messages met:');
  for (const [m, levels] of messages) t.log(`  ${m}  <- ${[...levels].join(', ')}`);
  t.is(summary.rows, ROWS.length);
  t.is(summary.requests, ROWS.length * levels);
});
