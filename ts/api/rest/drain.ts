/**
 * Ours: draining a peer before it is removed (a StatefulSet scale-in, say).
 * `POST /cluster/peer/{peer_id}/drain` moves every replica off the peer through shard
 * transfers (`method`: the transfer method, default `storage.shard_transfer_method`, else
 * stream_records; `wait=true` answers once the drain ended, else at once; `timeout`
 * bounds the wait, after which the drain goes on and the answer says `running`;
 * `remove=true` then removes the peer from consensus, as the unforced
 * `DELETE /cluster/peer/{id}` does, refused while the peer holds a replica);
 * `GET /cluster/peer/{peer_id}/drain` shows it: the shards still on the peer, the
 * transfers of those shards, the drain's state. On a single node both answer 405, as
 * the reference's other cluster changes do.
 *
 * Owns: the routes and the answer's shape. Must never: plan or run the drain
 * (ts/transfer/drain.ts does).
 */

import type { Context } from 'koa';

import { StandaloneModeError } from '../../common/errors';
import type { MetadataConsensus } from '../../storage/metadata-consensus';
import { DRAIN_METHODS, type DrainMethod, type DrainStatus, type PeerDrainer } from '../../transfer/drain';
import type { ReplicationView } from '../../transfer/view';
import { ok } from '../envelope';
import { QueryFormatError } from '../errors';
import { collectionTransfers } from '../request/cluster';
import { param, queryBool, readTimeout } from '../request/parse';
import type { RouteTable } from './route';

function peerParam(ctx: Context): string {
  const raw = param(ctx, 'peer_id');
  if (!/^[0-9]{1,20}$/.test(raw)) throw new QueryFormatError(`peer_id: ${JSON.stringify(raw)} is not an unsigned integer`);
  return BigInt(raw).toString();
}

const iso = (ms: number | null): string | null => (ms === null ? null : new Date(ms).toISOString());

function answer(s: DrainStatus, consensus: MetadataConsensus, replication: ReplicationView | null): Record<string, unknown> {
  // The transfers with their progress comment when this peer is their source.
  const shown = new Map<string, Array<Record<string, unknown>>>();
  const infoOf = (collection: string) => {
    let list = shown.get(collection);
    if (list === undefined) shown.set(collection, (list = collectionTransfers(consensus, replication, collection)));
    return list;
  };
  return {
    peer_id: Number(s.peer),
    state: s.state,
    method: s.method,
    started_at: iso(s.startedAt),
    finished_at: iso(s.finishedAt),
    error: s.error,
    shards_moved: s.moved,
    remove: s.remove,
    removed: s.removed,
    remaining: s.remaining.map((r) => ({ collection: r.collection, shard_id: r.shard, state: r.state })),
    transfers: s.transfers.map((t) => {
      const info = infoOf(t.collection).find((x) => x.shard_id === t.shard && x.from === Number(t.from) && x.to === Number(t.to));
      return { collection: t.collection, shard_id: t.shard, from: Number(t.from), to: Number(t.to), method: t.method, ...(info?.comment === undefined ? {} : { comment: info.comment }) };
    }),
  };
}

export function addDrainRoutes(routes: RouteTable, consensus: MetadataConsensus | null, drainer: PeerDrainer | null, replication: ReplicationView | null): void {
  routes.add('POST', '/cluster/peer/{peer_id}/drain', async (ctx: Context) => {
    const peer = peerParam(ctx);
    const wait = queryBool(ctx, 'wait', false);
    const rawMethod = ctx.query.method;
    if (rawMethod !== undefined && (typeof rawMethod !== 'string' || !(DRAIN_METHODS as readonly string[]).includes(rawMethod))) {
      throw new QueryFormatError(`method: expected one of ${DRAIN_METHODS.map((m) => `\`${m}\``).join(', ')}, got ${JSON.stringify(rawMethod)}`);
    }
    const method = (rawMethod as DrainMethod | undefined) ?? null;
    const remove = queryBool(ctx, 'remove', false);
    const timeout = readTimeout(ctx);
    if (consensus === null || drainer === null) throw new StandaloneModeError();
    const { finished } = drainer.start(peer, method, remove);
    if (wait) {
      let timer: NodeJS.Timeout | undefined;
      const limit = timeout === null ? null : new Promise<void>((res) => (timer = setTimeout(res, timeout * 1000)));
      await (limit === null ? finished : Promise.race([finished, limit]));
      clearTimeout(timer);
    }
    ok(ctx, answer(drainer.status(peer), consensus, replication));
  });

  routes.add('GET', '/cluster/peer/{peer_id}/drain', (ctx: Context) => {
    const peer = peerParam(ctx);
    if (consensus === null || drainer === null) throw new StandaloneModeError();
    ok(ctx, answer(drainer.status(peer), consensus, replication));
  });
}
