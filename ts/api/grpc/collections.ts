/**
 * `qdrant.Collections`: collections, aliases, cluster setup and shard keys over gRPC.
 * Each method turns its proto request into the JSON form of the same REST request,
 * runs the same parser (ts/api/request, ts/collection/config.ts through the dispatcher)
 * and the same table-of-collections or dispatcher call as the REST route, and turns the
 * answer into the proto response.
 *
 * Owns: those translations. Must never: decide anything the REST route does not.
 */

import { canSee } from '../../auth/access';
import type { Dispatcher } from '../../storage/dispatcher';
import type { MetadataConsensus } from '../../storage/metadata-consensus';
import type { ReplicationView } from '../../transfer/view';
import { parseClusterChange, parseCreateShardKey, parseDropShardKey, runClusterChange, collectionClusterInfo } from '../request/cluster';
import { collectionInfo, parseAliasActions } from '../request/collections';
import type { Obj } from '../request/parse';
import { collectionInfoProto, createCollectionBody, updateCollectionBody } from './collection-config';
import { int64Text, num, seconds, shardKeyOut, shardKeyToJson, snakeEnum, timeoutSeconds } from './convert/common';
import type { GrpcMethod, GrpcService } from './method';

type Msg = Record<string, any>;

/** The name a request carries (`collection_name` is not optional: absent is ""). */
const nameOf = (r: Msg): string => r.collection_name ?? '';
const byName = (r: Msg) => ({ collection_name: nameOf(r) });

/** CreateShardKey as its JSON form (CreateShardingKey); an empty `placement` means every peer (absent). */
function createShardKeyJson(k: Msg | undefined): Obj {
  const r = k ?? {};
  const out: Obj = {};
  if (r.shard_key !== undefined) out.shard_key = shardKeyToJson(r.shard_key, 'shard_key');
  if (r.shards_number !== undefined) out.shards_number = r.shards_number;
  if (r.replication_factor !== undefined) out.replication_factor = r.replication_factor;
  if (Array.isArray(r.placement) && r.placement.length > 0) out.placement = r.placement.map((p: string) => num(p));
  if (r.initial_state !== undefined) out.initial_state = r.initial_state;
  return out;
}

/** A shard transfer message (MoveShard, ReplicateShard, AbortShardTransfer, RestartTransfer) as its JSON form. */
function transferJson(t: Msg, withMethod: 'optional' | 'required' | 'none'): Obj {
  // Not optional in the proto: absent is 0.
  const out: Obj = { shard_id: t.shard_id ?? 0, from_peer_id: num(t.from_peer_id ?? '0'), to_peer_id: num(t.to_peer_id ?? '0') };
  if (t.to_shard_id !== undefined) out.to_shard_id = t.to_shard_id;
  if (withMethod === 'required') out.method = snakeEnum(t.method ?? 'StreamRecords');
  else if (withMethod === 'optional' && t.method !== undefined) out.method = snakeEnum(t.method);
  return out;
}

/** UpdateCollectionClusterSetupRequest's operation as the body of `POST /collections/{name}/cluster`. */
function clusterOperationBody(r: Msg): Obj {
  switch (r.operation) {
    case 'move_shard':
      return { move_shard: transferJson(r.move_shard, 'optional') };
    case 'replicate_shard':
      return { replicate_shard: transferJson(r.replicate_shard, 'optional') };
    case 'abort_transfer':
      return { abort_transfer: transferJson(r.abort_transfer, 'none') };
    case 'restart_transfer':
      return { restart_transfer: transferJson(r.restart_transfer, 'required') };
    case 'drop_replica':
      return { drop_replica: { shard_id: r.drop_replica.shard_id ?? 0, peer_id: num(r.drop_replica.peer_id ?? '0') } };
    case 'create_shard_key':
      return { create_sharding_key: createShardKeyJson(r.create_shard_key) };
    case 'delete_shard_key':
      return { drop_sharding_key: r.delete_shard_key.shard_key === undefined ? {} : { shard_key: shardKeyToJson(r.delete_shard_key.shard_key, 'drop_sharding_key.shard_key') } };
    case 'replicate_points':
      return { replicate_points: r.replicate_points };
    default:
      // No operation: the parser names the ones it expects.
      return {};
  }
}

export interface CollectionsDeps {
  dispatcher: Dispatcher;
  consensus: MetadataConsensus | null;
  replication: ReplicationView | null;
}

export function collectionsService({ dispatcher, consensus, replication }: CollectionsDeps): GrpcService {
  const toc = dispatcher.toc;
  const method = <Req extends Msg>(m: GrpcMethod<Req>): GrpcMethod<Req> => m;
  return {
    Get: method({
      access: 'GET /collections/{collection_name}',
      params: byName,
      async handle(r) {
        const started = process.hrtime.bigint();
        return { result: collectionInfoProto(collectionInfo(toc.get(nameOf(r)))), time: seconds(started) };
      },
    }),

    List: method({
      access: 'GET /collections',
      async handle(_r, ctx) {
        const started = process.hrtime.bigint();
        const collections = toc.names().filter((name) => canSee(ctx.access, name)).map((name) => ({ name }));
        return { collections, time: seconds(started) };
      },
    }),

    Create: method({
      access: 'PUT /collections/{collection_name}',
      params: byName,
      async handle(r, ctx) {
        const started = process.hrtime.bigint();
        const result = await dispatcher.createCollection(nameOf(r), createCollectionBody(r), timeoutSeconds(r.timeout, ctx));
        return { result, time: seconds(started) };
      },
    }),

    Update: method({
      access: 'PATCH /collections/{collection_name}',
      params: byName,
      async handle(r, ctx) {
        const started = process.hrtime.bigint();
        await dispatcher.updateCollection(nameOf(r), updateCollectionBody(r), timeoutSeconds(r.timeout, ctx));
        return { result: true, time: seconds(started) };
      },
    }),

    Delete: method({
      access: 'DELETE /collections/{collection_name}',
      params: byName,
      async handle(r, ctx) {
        const started = process.hrtime.bigint();
        const result = await dispatcher.deleteCollection(nameOf(r), timeoutSeconds(r.timeout, ctx));
        return { result, time: seconds(started) };
      },
    }),

    UpdateAliases: method({
      access: 'POST /collections/aliases',
      async handle(r, ctx) {
        const started = process.hrtime.bigint();
        // AliasOperations: the oneof's member is the JSON form's key.
        const actions = ((r.actions ?? []) as Msg[]).map((a) => (a.action === undefined ? {} : { [a.action]: a[a.action] }));
        await dispatcher.changeAliases(parseAliasActions({ actions }), timeoutSeconds(r.timeout, ctx));
        return { result: true, time: seconds(started) };
      },
    }),

    ListCollectionAliases: method({
      access: 'GET /collections/{collection_name}/aliases',
      params: byName,
      async handle(r) {
        const started = process.hrtime.bigint();
        const c = toc.get(nameOf(r));
        return { aliases: toc.listAliases(c.name), time: seconds(started) };
      },
    }),

    ListAliases: method({
      access: 'GET /aliases',
      async handle(_r, ctx) {
        const started = process.hrtime.bigint();
        return { aliases: toc.listAliases().filter((a) => canSee(ctx.access, a.collection_name)), time: seconds(started) };
      },
    }),

    CollectionClusterInfo: method({
      access: 'GET /collections/{collection_name}/cluster',
      params: byName,
      async handle(r) {
        const info = collectionClusterInfo(toc, consensus, replication, nameOf(r));
        const key = (k: Parameters<typeof shardKeyOut>[0] | undefined) => (k === undefined ? {} : { shard_key: shardKeyOut(k) });
        return {
          peer_id: int64Text(info.peer_id),
          shard_count: int64Text(info.shard_count),
          local_shards: info.local_shards.map((s) => ({ shard_id: s.shard_id, points_count: int64Text(s.points_count), state: s.state, ...key(s.shard_key) })),
          remote_shards: info.remote_shards.map((s) => ({ shard_id: s.shard_id, peer_id: int64Text(s.peer_id), state: s.state, ...key(s.shard_key) })),
          shard_transfers: info.shard_transfers.map((t) => ({ shard_id: t.shard_id, from: int64Text(t.from as number), to: int64Text(t.to as number), sync: t.sync })),
          resharding_operations: [],
        };
      },
    }),

    CollectionExists: method({
      access: 'GET /collections/{collection_name}/exists',
      params: byName,
      async handle(r) {
        const started = process.hrtime.bigint();
        return { result: { exists: toc.has(nameOf(r)) }, time: seconds(started) };
      },
    }),

    UpdateCollectionClusterSetup: method({
      access: 'POST /collections/{collection_name}/cluster',
      params: byName,
      async handle(r, ctx) {
        const timeout = timeoutSeconds(r.timeout, ctx);
        const change = parseClusterChange(clusterOperationBody(r));
        return { result: await runClusterChange(dispatcher, nameOf(r), change, timeout) };
      },
    }),

    CreateShardKey: method({
      access: 'PUT /collections/{collection_name}/shards',
      params: byName,
      async handle(r, ctx) {
        const timeout = timeoutSeconds(r.timeout, ctx);
        const req = parseCreateShardKey(createShardKeyJson(r.request));
        return { result: await dispatcher.createShardKey(nameOf(r), req, timeout) };
      },
    }),

    DeleteShardKey: method({
      access: 'POST /collections/{collection_name}/shards/delete',
      params: byName,
      async handle(r, ctx) {
        const timeout = timeoutSeconds(r.timeout, ctx);
        const k = (r.request as Msg | undefined)?.shard_key;
        const key = parseDropShardKey(k === undefined ? {} : { shard_key: shardKeyToJson(k, 'shard_key') });
        return { result: await dispatcher.dropShardKey(nameOf(r), key, timeout) };
      },
    }),

    ListShardKeys: method({
      access: 'GET /collections/{collection_name}/shards',
      params: byName,
      async handle(r) {
        const started = process.hrtime.bigint();
        const keys = toc.get(nameOf(r)).shardKeys() ?? [];
        return { shard_keys: keys.map((key) => ({ key: shardKeyOut(key) })), time: seconds(started) };
      },
    }),
  };
}
