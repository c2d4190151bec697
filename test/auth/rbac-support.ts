/**
 * The reference's access matrix (`rbac-table.md` in the shared reference folder) as
 * data, and the callers that walk it: shared by the REST walk
 * (test/auth/rbac-table.test.ts) and the gRPC one (test/grpc/rbac.test.ts).
 *
 * Owns: reading the table (a row per action: its REST endpoint, the cells of each
 * access level, and the gRPC method its gRPC column names), Quiver's decision for every
 * `?` cell, the callers (keys and JWTs) and what each should get on a row.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';

import { SignJWT } from 'jose';

import { REPO_ROOT } from '../api/helpers';
import { specPath } from '../support/openapi';

// -- the table ----------------------------------------------------------------------------

/** The shared reference folder, found the way the OpenAPI contract tests find it. */
export const REFERENCE_DIR = path.dirname(specPath(REPO_ROOT));
export const TABLE_FILE = path.join(REFERENCE_DIR, 'rbac-table.md');

export type Cell = 'Y' | '-' | '?';
export type Column = 'global r' | 'coll r' | 'coll rw' | 'coll prw' | 'manage';

export interface Row {
  action: string;
  method: string;
  /** Path pattern as the table spells it, e.g. /collections/{collection_name}/points. */
  pattern: string;
  cells: Record<Column, Cell>;
  /** The gRPC column says "no auth needed". */
  open: boolean;
  /** The public gRPC method the gRPC column names (`qdrant.Collections/Get`), or null. */
  grpc: string | null;
}

function parseTable(text: string): Row[] {
  const lines = text.split('\n').filter((l) => l.trim().startsWith('|'));
  const split = (l: string) => l.trim().replace(/^\|/, '').replace(/\|$/, '').split('|').map((c) => c.trim());
  const header = split(lines[0]);
  const col = (prefix: string) => {
    const i = header.findIndex((h) => h.startsWith(prefix));
    if (i < 0) throw new Error(`rbac-table.md: no column starting with ${JSON.stringify(prefix)} in ${JSON.stringify(header)}`);
    return i;
  };
  const idx = {
    action: col('action'),
    endpoint: col('REST endpoint'),
    'global r': col('global r'),
    'coll r': col('coll r'),
    'coll rw': col('coll rw'),
    'coll prw': col('coll prw'),
    manage: col('manage'),
    grpc: col('gRPC'),
  };
  const rows: Row[] = [];
  for (const line of lines.slice(1)) {
    const cells = split(line);
    if (cells.every((c) => /^:?-+:?$/.test(c))) continue; // the separator line
    const m = /^`([A-Z]+) ([^`]+)`$/.exec(cells[idx.endpoint]);
    if (!m) continue; // `(gRPC only)`
    const cell = (c: Column): Cell => {
      const v = cells[idx[c]];
      if (v !== 'Y' && v !== '-' && v !== '?') throw new Error(`rbac-table.md: ${cells[idx.action]}: unexpected cell ${JSON.stringify(v)} in ${c}`);
      return v;
    };
    rows.push({
      action: cells[idx.action],
      method: m[1],
      pattern: m[2],
      cells: { 'global r': cell('global r'), 'coll r': cell('coll r'), 'coll rw': cell('coll rw'), 'coll prw': cell('coll prw'), manage: cell('manage') },
      open: /no auth needed/i.test(cells[idx.grpc] ?? ''),
      grpc: /\bqdrant\.[A-Za-z]+\/[A-Za-z]+\b/.exec(cells[idx.grpc] ?? '')?.[0] ?? null,
    });
  }
  return rows;
}

export const ROWS = parseTable(fs.readFileSync(TABLE_FILE, 'utf8'));

/**
 * Quiver's decision for every `?` cell (all of them in the prw column), from
 * ts/auth/policy.ts: a prw token may read and write points of its collection and read
 * the collection itself, never touch "extras" (snapshots, payload indexes, named
 * vectors, collection cluster info), never do a global or manage operation, and the
 * listing endpoints are open to it with the answer filtered to its collection.
 */
export const PRW_DECISIONS: Record<string, { allowed: boolean; why: string }> = {
  list_collections: { allowed: true, why: 'listing, filtered to the token\'s collections' },
  get_collection: { allowed: true, why: 'collection read' },
  create_collection: { allowed: false, why: 'global manage' },
  delete_collection: { allowed: false, why: 'global manage' },
  update_collection_params: { allowed: false, why: 'global manage' },
  get_collection_cluster_info: { allowed: false, why: 'collection extras (cluster info) are not points access' },
  collection_exists: { allowed: true, why: 'collection read' },
  get_optimizations: { allowed: true, why: 'collection read' },
  replicate_shard_operation: { allowed: false, why: 'global manage' },
  create_default_shard_key_operation: { allowed: false, why: 'global manage' },
  create_custom_shard_key_operation: { allowed: false, why: 'global manage' },
  drop_shard_key_operation: { allowed: false, why: 'global manage' },
  move_shard_operation: { allowed: false, why: 'global manage' },
  abort_shard_transfer_operation: { allowed: false, why: 'global manage' },
  drop_shard_replica_operation: { allowed: false, why: 'global manage' },
  restart_transfer_operation: { allowed: false, why: 'global manage' },
  create_alias: { allowed: false, why: 'global manage' },
  rename_alias: { allowed: false, why: 'global manage' },
  delete_alias: { allowed: false, why: 'global manage' },
  list_collection_aliases: { allowed: true, why: 'collection read' },
  list_aliases: { allowed: true, why: 'listing, filtered to the token\'s collections' },
  create_default_shard_key: { allowed: false, why: 'global manage' },
  create_custom_shard_key: { allowed: false, why: 'global manage' },
  delete_shard_key: { allowed: false, why: 'global manage' },
  list_shard_keys: { allowed: true, why: 'collection read' },
  upload_collection_snapshot: { allowed: false, why: 'global manage' },
  recover_collection_snapshot: { allowed: false, why: 'global manage' },
  upload_shard_snapshot: { allowed: false, why: 'global manage' },
  recover_shard_snapshot: { allowed: false, why: 'global manage' },
  create_shard_snapshot: { allowed: false, why: 'collection extras write (snapshots)' },
  delete_shard_snapshot: { allowed: false, why: 'collection extras write (snapshots)' },
  download_shard_snapshot: { allowed: false, why: 'collection extras read (snapshots), like list_shard_snapshots which the table denies' },
  stream_shard_snapshot: { allowed: false, why: 'collection extras write (snapshots), as for rw-only create_shard_snapshot' },
  list_full_snapshots: { allowed: false, why: 'global read' },
  create_full_snapshot: { allowed: false, why: 'global manage' },
  delete_full_snapshot: { allowed: false, why: 'global manage' },
  download_full_snapshot: { allowed: false, why: 'global read' },
  get_cluster: { allowed: false, why: 'global read' },
  cluster_telemetry: { allowed: true, why: 'listing (filtered: a token scoped to some collections sees those only); 405 on this standalone node' },
  recover_raft_state: { allowed: false, why: 'global manage' },
  delete_peer: { allowed: false, why: 'global manage' },
  get_quotas: { allowed: false, why: 'global read' },
  update_quotas: { allowed: false, why: 'global manage' },
  get_point: { allowed: true, why: 'points read' },
  count_points: { allowed: true, why: 'points read' },
  query_points: { allowed: true, why: 'points read' },
  query_batch_points: { allowed: true, why: 'points read' },
  query_points_groups: { allowed: true, why: 'points read' },
  search_points_matrix_offsets: { allowed: true, why: 'points read' },
  search_points_matrix_pairs: { allowed: true, why: 'points read' },
  facet: { allowed: true, why: 'points read' },
  root: { allowed: true, why: 'open route' },
  readyz: { allowed: true, why: 'open route' },
  healthz: { allowed: true, why: 'open route' },
  livez: { allowed: true, why: 'open route' },
  telemetry: { allowed: true, why: 'listing, filtered to the token\'s collections' },
  metrics: { allowed: false, why: 'global read' },
  get_issues: { allowed: true, why: 'listing' },
  clear_issues: { allowed: false, why: 'global manage' },
  get_logger_config: { allowed: false, why: 'global read (not a route in Quiver: see NOT_ROUTED)' },
  update_logger_config: { allowed: false, why: 'global manage (not a route in Quiver: see NOT_ROUTED)' },
};

/**
 * Rows whose endpoint Quiver does not route at all (absent from the reference OpenAPI
 * documents v1.18 and v1.19 that Quiver implements; the table has them from the
 * reference's test suite). Every caller gets the plain 404 of an unknown route: no
 * access decision is made. NOTE (divergence, not counted as a bug): the reference's
 * auth middleware runs before routing, so it would answer 401 without credentials and
 * 403 to collection tokens there; Quiver's guard runs only on matched routes, so an
 * unauthenticated caller can tell unknown routes (404) from known ones (401).
 */
export const NOT_ROUTED = new Set(['GET /logger', 'POST /logger']);

// -- callers ------------------------------------------------------------------------------

export const API_KEY = 'rbac-api-key-0123456789abcdef0123456789abcdef';
export const RO_KEY = 'rbac-read-only-key-0123456789abcdef';
export const SECRET = new TextEncoder().encode(API_KEY);

export type Level = 'no credentials' | 'wrong key' | 'read-only key' | 'api key' | 'jwt m' | 'jwt r' | 'jwt coll r' | 'jwt coll rw' | 'jwt coll prw';
export const LEVELS: Level[] = ['no credentials', 'wrong key', 'read-only key', 'api key', 'jwt m', 'jwt r', 'jwt coll r', 'jwt coll rw', 'jwt coll prw'];
export const COLUMN: Record<Level, Column | null> = {
  'no credentials': null,
  'wrong key': null,
  'read-only key': 'global r',
  'api key': 'manage',
  'jwt m': 'manage',
  'jwt r': 'global r',
  'jwt coll r': 'coll r',
  'jwt coll rw': 'coll rw',
  'jwt coll prw': 'coll prw',
};

export async function sign(claims: Record<string, unknown>): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setIssuedAt().setExpirationTime('1h').sign(SECRET);
}

const tokenCache = new Map<string, string>();
export async function token(claims: Record<string, unknown>): Promise<string> {
  const key = JSON.stringify(claims);
  let t = tokenCache.get(key);
  if (t === undefined) {
    t = await sign(claims);
    tokenCache.set(key, t);
  }
  return t;
}

/** Headers of `level` for a request on `collection`. JWTs go as `Authorization: Bearer`, keys as `api-key`. */
export async function headersOf(level: Level, collection: string): Promise<Record<string, string>> {
  switch (level) {
    case 'no credentials':
      return {};
    case 'wrong key':
      return { 'api-key': 'not-the-key' };
    case 'read-only key':
      return { 'api-key': RO_KEY };
    case 'api key':
      return { 'api-key': API_KEY };
    case 'jwt m':
      return { authorization: `Bearer ${await token({ sub: 'm', access: 'm' })}` };
    case 'jwt r':
      return { authorization: `Bearer ${await token({ sub: 'r', access: 'r' })}` };
    case 'jwt coll r':
      return { authorization: `Bearer ${await token({ sub: 'cr', access: [{ collection, access: 'r' }] })}` };
    case 'jwt coll rw':
      return { authorization: `Bearer ${await token({ sub: 'crw', access: [{ collection, access: 'rw' }] })}` };
    case 'jwt coll prw':
      return { authorization: `Bearer ${await token({ sub: 'cprw', access: [{ collection, access: 'prw' }] })}` };
  }
}

/** What `level` should get on `row`: 'allow', 401 or 403. */
export function expected(row: Row, level: Level): { want: 'allow' | 401 | 403; note?: string } {
  if (row.open) return { want: 'allow' };
  const column = COLUMN[level];
  if (column === null) return { want: 401 };
  const cell = row.cells[column];
  if (cell === 'Y') return { want: 'allow' };
  if (cell === '-') return { want: 403 };
  const d = PRW_DECISIONS[row.action];
  if (d === undefined || column !== 'coll prw') throw new Error(`no decision written down for the ? cell of ${row.action} / ${column}`);
  return { want: d.allowed ? 'allow' : 403, note: `? cell ${row.action} / ${column}: Quiver ${d.allowed ? 'ALLOWS' : 'DENIES'} (${d.why})` };
}

