/**
 * REST routes of the cluster: `GET /cluster`, `POST /cluster/recover`,
 * `DELETE /cluster/peer/{peer_id}` and `GET /collections/{name}/cluster`.
 *
 * Owns: their request and response shapes (ClusterStatus, CollectionClusterInfo of the
 * reference, each shard with its key under custom sharding). On a single node `/cluster` says `disabled` and the two cluster changes
 * answer 405, as the reference does. Must never: change consensus state itself
 * (MetadataConsensus and its driver do).
 */

import { canSee } from '../../auth/access';
import { accessOf } from './auth';
import type { Context } from 'koa';

import type { MetadataConsensus } from '../../storage/metadata-consensus';
import type { ReplicationView } from '../../transfer/view';
import type { Role } from '../../consensus/raft';
import type { TableOfContent } from '../../storage/toc';
import { ok } from '../envelope';
import { StandaloneModeError } from '../../common/errors';
import { QueryFormatError } from '../errors';
import { param, queryBool, readTimeout } from '../request/parse';
import { collectionClusterInfo, collectionTransfers } from '../request/cluster';
import type { RouteTable } from './route';

export const ROLE_NAMES: Record<Role, string> = { leader: 'Leader', follower: 'Follower', candidate: 'Candidate', preCandidate: 'PreCandidate' };

/** Replicas by state across every shard of every collection, as this peer's consensus state has them. */
export function replicaStateCounts(consensus: MetadataConsensus): Record<string, number> {
  const out: Record<string, number> = {};
  const state = consensus.clusterState;
  for (const name of state.collectionNames()) {
    for (const s of state.collection(name)!.shards) for (const st of Object.values(s.replicas)) out[st] = (out[st] ?? 0) + 1;
  }
  return out;
}

export function addClusterRoutes(routes: RouteTable, toc: TableOfContent, consensus: MetadataConsensus | null, replication: ReplicationView | null = null): void {
  const transfersOf = (name: string) => collectionTransfers(consensus, replication, name);

  // GET /cluster/telemetry: the cluster seen from this peer (other peers' details asked over p2p, `timeout` seconds at most).
  routes.add('GET', '/cluster/telemetry', async (ctx: Context) => {
    const timeout = readTimeout(ctx) ?? 60;
    const detailsRaw = ctx.query.details_level;
    if (detailsRaw !== undefined && (typeof detailsRaw !== 'string' || !/^[0-9]{1,9}$/.test(detailsRaw))) {
      throw new QueryFormatError(`details_level: ${JSON.stringify(detailsRaw)} is not an unsigned integer`);
    }
    if (consensus === null) throw new StandaloneModeError();
    const state = consensus.clusterState;
    const collections: Record<string, unknown> = {};
    // A listing route: a token scoped to some collections sees those only (as GET /collections).
    const access = accessOf(ctx);
    for (const name of state.collectionNames().filter((n) => canSee(access, n))) {
      const c = state.collection(name)!;
      collections[name] = {
        id: name,
        shards: c.shards.map((s) => ({ id: s.id, replicas: Object.entries(s.replicas).map(([peer, st]) => ({ peer_id: Number(peer), state: st })) })),
        shard_transfers: transfersOf(name),
      };
    }
    const peers: Record<string, unknown> = {};
    await Promise.all(
      Object.entries(state.peers).map(async ([peer, uri]) => {
        const details = replication === null ? null : await replication.peerDetails(peer, Math.min(timeout * 1000, 5000));
        peers[peer] = details === null ? { uri, responsive: false } : { uri, responsive: true, details };
      }),
    );
    ok(ctx, { collections, cluster: { enabled: true, number_of_peers: Object.keys(state.peers).length, peers } });
  });

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

  // Ours: the content digest of this peer's replica of one shard (replicas that agree have the same one).
  routes.add('GET', '/collections/{collection_name}/shards/{shard_id}/digest', async (ctx: Context) => {
    const c = toc.get(param(ctx, 'collection_name'));
    const raw = param(ctx, 'shard_id');
    if (!/^[0-9]{1,9}$/.test(raw)) throw new QueryFormatError(`shard_id: ${JSON.stringify(raw)} is not an unsigned integer`);
    const shard = Number(raw);
    const local = c.localShard(shard);
    const d = await local.digest();
    const wal = local.history();
    ok(ctx, {
      shard_id: shard,
      peer_id: Number(consensus?.peerId ?? toc.peerId.toString()),
      points_count: d.points,
      digest: d.digest,
      // The operations this replica's WAL still holds (what a wal_delta transfer from it can send).
      wal: { oldest: Number(wal.oldestSeq), last: Number(wal.lastSeq) },
    });
  });

  routes.add('GET', '/collections/{collection_name}/cluster', (ctx: Context) => {
    ok(ctx, collectionClusterInfo(toc, consensus, replication, param(ctx, 'collection_name')));
  });
}
