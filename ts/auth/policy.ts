/**
 * The access policy: what every REST operation needs, by method and route pattern
 * (the rows of the reference's access matrix, which test/auth/rbac-table.test.ts checks
 * row by row). RouteTable refuses to register a
 * route that has no entry here, so no route can be added without deciding its access.
 *
 * Owns: the table. Must never: check credentials (authenticate.ts) or decide between
 * an access and a requirement (access.ts).
 */

import type { Requirement } from './access';

const C = 'collection_name';
const open: Requirement = { scope: 'open' };
const listing: Requirement = { scope: 'listing' };
const globalRead: Requirement = { scope: 'global' };
const globalManage: Requirement = { scope: 'global', write: true, manage: true };
const read: Requirement = { scope: 'collection', param: C };
const write: Requirement = { scope: 'collection', param: C, write: true };
/** Collection extras (snapshots, cluster info): r and rw tokens, not prw. */
const extrasRead: Requirement = { scope: 'collection', param: C, extras: true };
/** Changing extras (payload indexes, named vectors, snapshots): rw tokens only. */
const extrasWrite: Requirement = { scope: 'collection', param: C, write: true, extras: true };

const TABLE: Record<string, Requirement> = {
  // service
  'GET /': open,
  'GET /healthz': open,
  'GET /livez': open,
  'GET /readyz': open,
  'GET /dashboard': open,
  'GET /dashboard/{file}': open,
  'GET /metrics': globalRead,
  'GET /telemetry': listing,
  'GET /issues': listing,
  'DELETE /issues': globalManage,
  'GET /quotas': globalRead,
  'PUT /quotas': globalManage,

  // collections and aliases
  'GET /collections': listing,
  'GET /collections/{collection_name}': read,
  'GET /collections/{collection_name}/exists': read,
  'PUT /collections/{collection_name}': globalManage,
  'PATCH /collections/{collection_name}': globalManage,
  'DELETE /collections/{collection_name}': globalManage,
  'GET /collections/{collection_name}/optimizations': read,
  'POST /collections/aliases': globalManage,
  'GET /aliases': listing,
  'GET /collections/{collection_name}/aliases': read,
  'PUT /collections/{collection_name}/index': extrasWrite,
  'DELETE /collections/{collection_name}/index/{field_name}': extrasWrite,
  'PUT /collections/{collection_name}/vectors/{vector_name}': extrasWrite,
  'DELETE /collections/{collection_name}/vectors/{vector_name}': extrasWrite,

  // points: reads
  'GET /collections/{collection_name}/points/{id}': read,
  'POST /collections/{collection_name}/points': read,
  'POST /collections/{collection_name}/points/scroll': read,
  'POST /collections/{collection_name}/points/count': read,
  'POST /collections/{collection_name}/points/query': read,
  'POST /collections/{collection_name}/points/query/batch': read,
  'POST /collections/{collection_name}/points/query/groups': read,
  'POST /collections/{collection_name}/points/search': read,
  'POST /collections/{collection_name}/points/search/batch': read,
  'POST /collections/{collection_name}/points/search/groups': read,
  'POST /collections/{collection_name}/points/search/matrix/pairs': read,
  'POST /collections/{collection_name}/points/search/matrix/offsets': read,
  'POST /collections/{collection_name}/points/recommend': read,
  'POST /collections/{collection_name}/points/recommend/batch': read,
  'POST /collections/{collection_name}/points/recommend/groups': read,
  'POST /collections/{collection_name}/points/discover': read,
  'POST /collections/{collection_name}/points/discover/batch': read,
  'POST /collections/{collection_name}/facet': read,

  // points: writes
  'PUT /collections/{collection_name}/points': write,
  'POST /collections/{collection_name}/points/delete': write,
  'POST /collections/{collection_name}/points/payload': write,
  'PUT /collections/{collection_name}/points/payload': write,
  'POST /collections/{collection_name}/points/payload/delete': write,
  'POST /collections/{collection_name}/points/payload/clear': write,
  'PUT /collections/{collection_name}/points/vectors': write,
  'POST /collections/{collection_name}/points/vectors/delete': write,
  'POST /collections/{collection_name}/points/batch': write,

  // collection snapshots (upload and recover need global manage, checked before the body is read)
  'GET /collections/{collection_name}/snapshots': extrasRead,
  'GET /collections/{collection_name}/snapshots/{snapshot_name}': extrasRead,
  'POST /collections/{collection_name}/snapshots': extrasWrite,
  'DELETE /collections/{collection_name}/snapshots/{snapshot_name}': extrasWrite,
  'PUT /collections/{collection_name}/snapshots/recover': globalManage,
  'POST /collections/{collection_name}/snapshots/upload': globalManage,

  // shards and shard snapshots
  'GET /collections/{collection_name}/shards': read,
  'PUT /collections/{collection_name}/shards': globalManage,
  'POST /collections/{collection_name}/shards/delete': globalManage,
  'GET /collections/{collection_name}/shards/{shard_id}/snapshots': extrasRead,
  'GET /collections/{collection_name}/shards/{shard_id}/snapshots/{snapshot_name}': extrasRead,
  'POST /collections/{collection_name}/shards/{shard_id}/snapshots': extrasWrite,
  'DELETE /collections/{collection_name}/shards/{shard_id}/snapshots/{snapshot_name}': extrasWrite,
  'GET /collections/{collection_name}/shards/{shard_id}/snapshot': extrasWrite,
  'PUT /collections/{collection_name}/shards/{shard_id}/snapshots/recover': globalManage,
  'POST /collections/{collection_name}/shards/{shard_id}/snapshots/upload': globalManage,

  // full-storage snapshots
  'GET /snapshots': globalRead,
  'GET /snapshots/{snapshot_name}': globalRead,
  'POST /snapshots': globalManage,
  'DELETE /snapshots/{snapshot_name}': globalManage,
  // Ours: snapshot jobs (wait=false creates and recoveries), read-only.
  'GET /snapshots/schedules': globalRead,
  'GET /snapshots/jobs': globalRead,
  'GET /snapshots/jobs/{job_id}': globalRead,

  // cluster
  'GET /cluster': globalRead,
  'GET /cluster/telemetry': listing,
  'POST /cluster/recover': globalManage,
  'DELETE /cluster/peer/{peer_id}': globalManage,
  // Ours: moving every replica off a peer before it is removed, and its status (ts/transfer/drain.ts).
  'POST /cluster/peer/{peer_id}/drain': globalManage,
  'GET /cluster/peer/{peer_id}/drain': globalRead,
  // Ours: a backup of every shard of the cluster (ts/snapshots/backup.ts).
  'POST /cluster/backup': globalManage,
  'GET /cluster/metadata/keys': globalRead,
  'GET /cluster/metadata/keys/{key}': globalRead,
  'PUT /cluster/metadata/keys/{key}': globalManage,
  'DELETE /cluster/metadata/keys/{key}': globalManage,
  'GET /collections/{collection_name}/cluster': extrasRead,
  // Ours: the digest of this peer's replica of a shard (checks that replicas agree).
  'GET /collections/{collection_name}/shards/{shard_id}/digest': extrasRead,
  'POST /collections/{collection_name}/cluster': { scope: 'global', write: true, manage: true, extras: true },
};

/** What `method pattern` needs; throws for a route with no entry (a programming error, caught at start-up). */
export function requirementOf(method: string, pattern: string): Requirement {
  const r = TABLE[`${method} ${pattern}`];
  if (r === undefined) throw new Error(`no access policy for ${method} ${pattern}: add it to ts/auth/policy.ts`);
  return r;
}
