/**
 * The cluster requests of the reference's API in their JSON form: shard keys
 * (CreateShardingKey, DropShardingKey), the cluster operations of
 * `POST /collections/{name}/cluster` (move, replicate, abort and restart a transfer, drop
 * a replica, create and drop a shard key; resharding and `replicate_points` are not
 * built), and the answer of `GET /collections/{name}/cluster` (CollectionClusterInfo).
 * REST and gRPC (UpdateCollectionClusterSetup, CreateShardKey, DeleteShardKey,
 * CollectionClusterInfo) both go through these.
 *
 * Owns: parsing those bodies, the one call a parsed cluster operation makes, and the
 * shape of the cluster info. Must never: check a change against the cluster (the
 * dispatcher and the state machine do) or know a transport.
 */

import type { ShardKey } from '../../collection/collection';
import { REPLICA_STATES, type ReplicaState } from '../../collection/replica-state';
import { BadInputError, BadRequestError, FormatError, NotImplementedError, ValidationError } from '../../common/errors';
import type { TransferInfo } from '../../storage/cluster-state';
import type { CreateShardKeyRequest, Dispatcher, ReplicaChange, TransferMethod } from '../../storage/dispatcher';
import type { MetadataConsensus } from '../../storage/metadata-consensus';
import type { TableOfContent } from '../../storage/toc';
import type { ReplicationView, TransferProgress } from '../../transfer/view';
import { shardKey, type Obj } from './parse';

/** `shards_number` / `replication_factor`: absent, or a u32 of at least 1 (the reference's NonZeroU32). */
function nonZero(x: unknown, field: string): number | null {
  if (x === undefined || x === null) return null;
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0 || x > 0xffff_ffff) {
    throw new FormatError(`${field}: expected an unsigned 32-bit integer, got ${JSON.stringify(x)}`);
  }
  if (x === 0) throw new FormatError(`${field}: invalid value: integer \`0\`, expected a nonzero u32`);
  return x;
}

/** A CreateShardingKey body (`PUT /collections/{name}/shards`, or `create_sharding_key` of a cluster operation). */
export function parseCreateShardKey(b: Obj): CreateShardKeyRequest {
  if (b.shard_key === undefined || b.shard_key === null) throw new FormatError('missing field `shard_key`');
  const key = shardKey(b.shard_key, 'shard_key');
  const shardsNumber = nonZero(b.shards_number, 'shards_number');
  // As for a collection's shard_number: Quiver opens at most 1024 shards at once.
  if (shardsNumber !== null && shardsNumber > 1024) throw new ValidationError(`shards_number: value ${shardsNumber} invalid, must be 1024 or smaller`);
  const replicationFactor = nonZero(b.replication_factor, 'replication_factor');
  let placement: string[] | null = null;
  if (b.placement !== undefined && b.placement !== null) {
    if (!Array.isArray(b.placement)) throw new FormatError('placement: expected an array of peer ids');
    placement = b.placement.map((p: unknown, i: number) => {
      if (typeof p !== 'number' || !Number.isSafeInteger(p) || p < 0) throw new FormatError(`placement[${i}]: expected a peer id (an unsigned integer), got ${JSON.stringify(p)}`);
      return String(p);
    });
  }
  if (b.initial_state !== undefined && b.initial_state !== null) {
    const s = b.initial_state;
    if (typeof s !== 'string' || !REPLICA_STATES.includes(s as ReplicaState)) {
      throw new FormatError(`initial_state: unknown variant ${JSON.stringify(s)}, expected one of ${REPLICA_STATES.map((x) => `\`${x}\``).join(', ')}`);
    }
    if (s !== 'Active' && s !== 'Partial') throw new BadRequestError(`Initial state cannot be ${s}, only Active or Partial are allowed`);
    // Partial shards wait for a transfer to fill them, and shard transfers are not built yet.
    if (s === 'Partial') throw new BadInputError('initial_state: `Partial` is not supported by Quiver yet (the replicas of a new shard key start Active); leave it out or use `Active`');
  }
  return { key, shardsNumber, replicationFactor, placement };
}

/** A DropShardingKey body (`POST /collections/{name}/shards/delete`); `where` names it inside a larger body. */
export function parseDropShardKey(b: Obj, where: string | null = null): ShardKey {
  if (b.shard_key === undefined || b.shard_key === null) throw new FormatError(`${where === null ? '' : `${where}: `}missing field \`shard_key\``);
  return shardKey(b.shard_key, where === null ? 'shard_key' : `${where}.shard_key`);
}

const OPERATIONS = ['move_shard', 'replicate_shard', 'abort_transfer', 'restart_transfer', 'drop_replica', 'create_sharding_key', 'drop_sharding_key', 'start_resharding', 'abort_resharding', 'replicate_points'];
const METHODS: readonly TransferMethod[] = ['stream_records', 'snapshot', 'wal_delta', 'resharding_stream_records'];

function obj(x: unknown, field: string): Obj {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) throw new FormatError(`${field}: expected an object`);
  return x as Obj;
}

function u32(o: Obj, field: string, where: string): number {
  const x = o[field];
  if (x === undefined || x === null) throw new FormatError(`${where}: missing field \`${field}\``);
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0 || x > 0xffff_ffff) throw new FormatError(`${where}.${field}: expected an unsigned 32-bit integer, got ${JSON.stringify(x)}`);
  return x;
}

function peer(o: Obj, field: string, where: string): string {
  const x = o[field];
  if (x === undefined || x === null) throw new FormatError(`${where}: missing field \`${field}\``);
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0) throw new FormatError(`${where}.${field}: expected a peer id (an unsigned integer), got ${JSON.stringify(x)}`);
  return String(x);
}

function method(o: Obj, where: string, required: boolean): TransferMethod | null {
  const m = o.method;
  if (m === undefined || m === null) {
    if (required) throw new FormatError(`${where}: missing field \`method\``);
    return null;
  }
  if (typeof m !== 'string' || !METHODS.includes(m as TransferMethod)) {
    throw new FormatError(`${where}.method: unknown variant ${JSON.stringify(m)}, expected one of ${METHODS.map((x) => `\`${x}\``).join(', ')}`);
  }
  return m as TransferMethod;
}

/** A cluster operation, parsed. */
export type ClusterChange = { replicas: ReplicaChange } | { createKey: CreateShardKeyRequest } | { dropKey: ShardKey };

/** The change a `POST /collections/{name}/cluster` body asks for (exactly one operation). */
export function parseClusterChange(b: Obj): ClusterChange {
  const keys = Object.keys(b);
  if (keys.length !== 1 || !OPERATIONS.includes(keys[0])) {
    throw new FormatError(`expected exactly one of ${OPERATIONS.map((x) => `\`${x}\``).join(', ')}`);
  }
  const op = keys[0];
  const o = obj(b[op], op);
  // A transfer to another shard id belongs to resharding, which is not built: refused rather than ignored.
  if (['move_shard', 'replicate_shard', 'abort_transfer', 'restart_transfer'].includes(op) && o.to_shard_id !== undefined && o.to_shard_id !== null) {
    throw new NotImplementedError(`${op}.to_shard_id: transfers between shard ids belong to resharding, which is not available in this version of Quiver`);
  }
  switch (op) {
    case 'move_shard':
    case 'replicate_shard':
      return { replicas: { kind: op === 'move_shard' ? 'move' : 'replicate', shard: u32(o, 'shard_id', op), from: peer(o, 'from_peer_id', op), to: peer(o, 'to_peer_id', op), method: method(o, op, false) } };
    case 'abort_transfer':
      return { replicas: { kind: 'abort', shard: u32(o, 'shard_id', op), from: peer(o, 'from_peer_id', op), to: peer(o, 'to_peer_id', op) } };
    case 'restart_transfer':
      return { replicas: { kind: 'restart', shard: u32(o, 'shard_id', op), from: peer(o, 'from_peer_id', op), to: peer(o, 'to_peer_id', op), method: method(o, op, true)! } };
    case 'drop_replica':
      return { replicas: { kind: 'drop_replica', shard: u32(o, 'shard_id', op), peer: peer(o, 'peer_id', op) } };
    case 'create_sharding_key':
      return { createKey: parseCreateShardKey(o) };
    case 'drop_sharding_key':
      return { dropKey: parseDropShardKey(o, 'drop_sharding_key') };
    default:
      throw new NotImplementedError(`\`${op}\` is not available in this version of Quiver (resharding is not built)`);
  }
}

/** Runs a parsed cluster operation through the dispatcher; its answer is the operation's `result`. */
export function runClusterChange(dispatcher: Dispatcher, collection: string, change: ClusterChange, timeoutS: number | null): Promise<boolean> {
  if ('replicas' in change) return dispatcher.changeReplicas(collection, change.replicas, timeoutS);
  if ('createKey' in change) return dispatcher.createShardKey(collection, change.createKey, timeoutS);
  return dispatcher.dropShardKey(collection, change.dropKey, timeoutS);
}

/** A transfer as ShardTransferInfo; the source peer adds its progress as the comment, as the reference does. */
function transferInfo(t: TransferInfo, progress: TransferProgress | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = { shard_id: t.shard, from: Number(t.from), to: Number(t.to), sync: t.kind !== 'move', method: t.method };
  if (progress !== undefined) {
    const seconds = (Date.now() - progress.startedAt) / 1000;
    const started = `started ${seconds.toFixed(0)}s ago`;
    if (progress.stage === 'indexing') {
      out.comment = `Waiting for the target to index the ${progress.pointsSent} records it received, ${started}`;
    } else if (progress.stage === 'queue') {
      out.comment = `Sending the operations queued during the copy, ${started}`;
    } else if (progress.stage === 'finishing') {
      out.comment = `Finishing, ${started}`;
    } else if (progress.method === 'snapshot') {
      out.comment = `Transferring a snapshot of ${progress.pointsTotal} records, ${started}`;
    } else {
      const rate = progress.pointsSent / Math.max(seconds, 0.001);
      const left = Math.max(0, progress.pointsTotal - progress.pointsSent);
      const eta = progress.pointsSent > 0 ? `${(left / rate).toFixed(2)}s` : 'unknown';
      const what = progress.method === 'wal_delta' ? 'operations' : 'records';
      out.comment = `Transferring ${what} (${progress.pointsSent}/${progress.pointsTotal}), ${started}, ETA: ${eta}`;
    }
  }
  return out;
}

/** The transfers of collection `name` as ShardTransferInfo (none on a single node). */
export function collectionTransfers(consensus: MetadataConsensus | null, replication: ReplicationView | null, name: string): Array<Record<string, unknown>> {
  if (consensus === null) return [];
  const progress = replication?.transfers() ?? [];
  return consensus.clusterState
    .transfers(name)
    .map((t) => transferInfo(t, progress.find((p) => p.collection === name && p.shard === t.shard && p.to === t.to && p.from === t.from)));
}

/** Local shard of a CollectionClusterInfo. */
export interface LocalShardInfo {
  shard_id: number;
  shard_key?: ShardKey;
  points_count: number;
  state: string;
}

/** Remote shard of a CollectionClusterInfo. */
export interface RemoteShardInfo {
  shard_id: number;
  shard_key?: ShardKey;
  peer_id: number;
  state: string;
}

/** CollectionClusterInfo, as `GET /collections/{name}/cluster` answers it. */
export interface CollectionClusterInfo {
  peer_id: number;
  shard_count: number;
  local_shards: LocalShardInfo[];
  remote_shards: RemoteShardInfo[];
  shard_transfers: Array<Record<string, unknown>>;
}

/** The shards of collection (or alias) `collection` on this peer and the others, and its transfers. */
export function collectionClusterInfo(toc: TableOfContent, consensus: MetadataConsensus | null, replication: ReplicationView | null, collection: string): CollectionClusterInfo {
  const transfersOf = (name: string) => collectionTransfers(consensus, replication, name);
  const c = toc.get(collection);
  const localPeer = consensus?.peerId ?? toc.peerId.toString();
  const local_shards: LocalShardInfo[] = [];
  const remote_shards: RemoteShardInfo[] = [];
  const placed = consensus?.clusterState.collection(c.name);
  if (consensus !== null && placed !== undefined) {
    // Replicas and transfers from one state of consensus, so they agree: the local
    // storage applies each change a moment later (a finished move's source drops its
    // data first), and a view mixing the two could show a target still Partial with
    // its transfer gone.
    const sets = new Map(c.replicaSets().map((r) => [r.shardId, r]));
    for (const s of placed.shards) {
      const keyed = s.shard_key === undefined ? {} : { shard_key: s.shard_key };
      for (const [peer, state] of Object.entries(s.replicas)) {
        if (peer === localPeer) local_shards.push({ shard_id: s.id, ...keyed, points_count: sets.get(s.id)?.local?.pointCount ?? 0, state });
        else remote_shards.push({ shard_id: s.id, ...keyed, peer_id: Number(peer), state });
      }
    }
    return { peer_id: Number(localPeer), shard_count: placed.shards.length, local_shards, remote_shards, shard_transfers: transfersOf(c.name) };
  }
  for (const r of c.replicaSets()) {
    // Custom sharding: each shard names its key (left out with auto sharding, as the reference does).
    const key = c.shardKeyOf(r.shardId);
    const keyed = key === undefined ? {} : { shard_key: key };
    if (r.local !== null) local_shards.push({ shard_id: r.shardId, ...keyed, points_count: r.local.pointCount, state: r.replicas?.[localPeer] ?? 'Active' });
    for (const [peer, state] of Object.entries(r.replicas ?? {})) {
      if (peer !== localPeer) remote_shards.push({ shard_id: r.shardId, ...keyed, peer_id: Number(peer), state });
    }
  }
  return { peer_id: Number(localPeer), shard_count: c.replicaSets().length, local_shards, remote_shards, shard_transfers: transfersOf(c.name) };
}
