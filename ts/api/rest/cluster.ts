/**
 * REST routes of the cluster: `GET /cluster`, `POST /cluster/recover`,
 * `DELETE /cluster/peer/{peer_id}` and `GET /collections/{name}/cluster`.
 *
 * Owns: their request and response shapes (ClusterStatus, CollectionClusterInfo of the
 * reference, each shard with its key under custom sharding). On a single node `/cluster` says `disabled` and the two cluster changes
 * answer 405, as the reference does. Must never: change consensus state itself
 * (MetadataConsensus and its driver do).
 */

import type { Context } from 'koa';

import type { ShardKey } from '../../collection/collection';
import type { MetadataConsensus } from '../../storage/metadata-consensus';
import type { Role } from '../../consensus/raft';
import type { TableOfContent } from '../../storage/toc';
import { ok } from '../envelope';
import { StandaloneModeError } from '../../common/errors';
import { QueryFormatError } from '../errors';
import { param, queryBool, readTimeout } from './parse';
import type { RouteTable } from './route';

const ROLE_NAMES: Record<Role, string> = { leader: 'Leader', follower: 'Follower', candidate: 'Candidate', preCandidate: 'PreCandidate' };

export function addClusterRoutes(routes: RouteTable, toc: TableOfContent, consensus: MetadataConsensus | null): void {
  routes.add('GET', '/cluster', (ctx: Context) => {
    if (consensus === null) {
      ok(ctx, { status: 'disabled' });
      return;
    }
    const s = consensus.status();
    ok(ctx, {
      status: 'enabled',
      peer_id: Number(s.peerId),
      peers: Object.fromEntries(Object.entries(s.peers).map(([id, uri]) => [id, { uri }])),
      raft_info: {
        term: s.term,
        commit: s.commit,
        pending_operations: consensus.pendingOperations(),
        leader: s.leader === null ? null : Number(s.leader),
        role: ROLE_NAMES[s.role],
        is_voter: s.isVoter,
      },
      consensus_thread_status: s.thread,
      message_send_failures: s.sendFailures,
    });
  });

  routes.add('POST', '/cluster/recover', async (ctx: Context) => {
    if (consensus === null) throw new StandaloneModeError();
    ok(ctx, await consensus.recover());
  });

  routes.add('DELETE', '/cluster/peer/{peer_id}', async (ctx: Context) => {
    const raw = param(ctx, 'peer_id');
    if (!/^[0-9]{1,20}$/.test(raw)) throw new QueryFormatError(`peer_id: ${JSON.stringify(raw)} is not an unsigned integer`);
    const force = queryBool(ctx, 'force', false);
    const timeout = readTimeout(ctx);
    if (consensus === null) throw new StandaloneModeError();
    ok(ctx, await consensus.removePeer(BigInt(raw).toString(), force, (timeout ?? 30) * 1000));
  });

  routes.add('GET', '/collections/{collection_name}/cluster', (ctx: Context) => {
    const c = toc.get(param(ctx, 'collection_name'));
    const localPeer = consensus?.peerId ?? toc.peerId.toString();
    const local_shards: Array<{ shard_id: number; shard_key?: ShardKey; points_count: number; state: string }> = [];
    const remote_shards: Array<{ shard_id: number; shard_key?: ShardKey; peer_id: number; state: string }> = [];
    for (const r of c.replicaSets()) {
      // Custom sharding: each shard names its key (left out with auto sharding, as the reference does).
      const key = c.shardKeyOf(r.shardId);
      const keyed = key === undefined ? {} : { shard_key: key };
      if (r.local !== null) local_shards.push({ shard_id: r.shardId, ...keyed, points_count: r.local.pointCount, state: r.replicas?.[localPeer] ?? 'Active' });
      for (const [peer, state] of Object.entries(r.replicas ?? {})) {
        if (peer !== localPeer) remote_shards.push({ shard_id: r.shardId, ...keyed, peer_id: Number(peer), state });
      }
    }
    ok(ctx, { peer_id: Number(localPeer), shard_count: c.replicaSets().length, local_shards, remote_shards, shard_transfers: [] });
  });
}
