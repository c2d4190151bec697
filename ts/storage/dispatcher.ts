/**
 * Where a metadata change goes: straight to this node's storage (TableOfContent) on a
 * single node, or through consensus in a cluster (proposed on the leader, answered once
 * applied on this peer, so every peer then shows the same collections).
 *
 * Owns: the choice, the cluster defaults of a new collection (`shard_number` = number
 * of peers, placement of `replication_factor` replicas on distinct peers; a
 * custom-sharded collection starts with no shard), the placement of a new shard key's
 * shards, the early checks that give a refused change its clear error before
 * consensus, the consensus wait timeout (query `timeout`, seconds; default 30). Must
 * never: parse HTTP beyond the body it is handed, or apply a cluster change locally
 * without consensus.
 *
 * Shard keys on a single node: the reference answers "Distributed mode disabled" there;
 * Quiver creates and drops them in the table of collections instead (its only peer is
 * this node).
 */

import { randomInt, randomUUID } from 'node:crypto';

import { AlreadyExistsError, BadInputError, BadRequestError, NotFoundError } from '../common/errors';
import { addVectorName, applyCollectionUpdate, parseCreateCollection, removeVectorName, type NewVectorName } from '../collection/config';
import {
  autoShardingRefusal,
  emptyPlacementError,
  keyExistsError,
  keyId,
  keyMissingError,
  unknownPeerError,
  type ShardKey,
} from '../collection/shard-keys';
import type { Config } from '../config/types';
import type { FieldSchema } from '../shard/field-schema';
import { ClusterState, placeKeyShards, placeShards, type ClusterCollection } from './cluster-state';
import type { MetadataConsensus } from './metadata-consensus';
import { validateCollectionName, type AliasAction, type TableOfContent } from './toc';

export const DEFAULT_CONSENSUS_TIMEOUT_S = 30;

/** How a shard is copied between peers (`ShardTransferMethod`). */
export type TransferMethod = 'stream_records' | 'snapshot' | 'wal_delta' | 'resharding_stream_records';

/** A change of `POST /collections/{name}/cluster` that moves replicas, parsed. */
export type ReplicaChange =
  | { kind: 'move' | 'replicate'; shard: number; from: string; to: string; method: TransferMethod | null }
  | { kind: 'abort'; shard: number; from: string; to: string }
  | { kind: 'restart'; shard: number; from: string; to: string; method: TransferMethod }
  | { kind: 'drop_replica'; shard: number; peer: string };

/** A CreateShardingKey request, parsed. */
export interface CreateShardKeyRequest {
  key: ShardKey;
  /** Shards of the key (default: the collection's `shard_number`). */
  shardsNumber: number | null;
  /** Replicas of each shard (default: the collection's `replication_factor`). */
  replicationFactor: number | null;
  /** Peers to place the shards on (default: every peer). */
  placement: string[] | null;
}

/** A method asked for: the three the transfers run; `resharding_stream_records` belongs to resharding. */
function requireMethod(method: TransferMethod | null): asserts method is RunMethod | null {
  if (method === 'resharding_stream_records') throw new BadRequestError('transfer method `resharding_stream_records` is used by resharding only');
}

type RunMethod = Exclude<TransferMethod, 'resharding_stream_records'>;

export class Dispatcher {
  constructor(
    readonly toc: TableOfContent,
    readonly consensus: MetadataConsensus | null,
    private readonly config: Config,
  ) {}

  /** A collection (or alias) as the cluster state has it, or the reference's 404. */
  private clusterCollection(collection: string): { state: ClusterState; name: string; c: ClusterCollection } {
    const state = this.consensus!.clusterState;
    const name = state.resolve(collection);
    if (name === undefined) throw new NotFoundError(`Collection \`${collection}\` doesn't exist!`);
    return { state, name, c: state.collection(name)! };
  }

  private ms(timeoutS: number | null): number {
    return (timeoutS ?? DEFAULT_CONSENSUS_TIMEOUT_S) * 1000;
  }

  async createCollection(name: string, body: Record<string, unknown> | null, timeoutS: number | null): Promise<boolean> {
    if (this.consensus === null) {
      await this.toc.create(name, parseCreateCollection(body, this.config));
      return true;
    }
    validateCollectionName(name);
    const state = this.consensus.clusterState;
    const peers = Object.keys(state.peers).sort();
    const b = { ...(body ?? {}) };
    // Custom sharding: shard_number is the default per key, 1 unless given.
    if ((b.shard_number === undefined || b.shard_number === null) && b.sharding_method !== 'custom') b.shard_number = Math.max(1, peers.length);
    const config = parseCreateCollection(b, this.config);
    // Checked again when applied (another peer may create it meanwhile): these give the clear error early.
    if (state.collection(name)) throw new AlreadyExistsError(`Collection \`${name}\` already exists!`);
    if (Object.prototype.hasOwnProperty.call(state.aliases, name)) throw new BadInputError(`Can't create collection with name ${name}. Alias with the same name already exists`);
    const shards = config.params.sharding_method === 'custom' ? [] : placeShards(peers, config.params.shard_number, config.params.replication_factor, peers.length > 1 ? randomInt(peers.length) : 0);
    return (await this.consensus.propose({ op: 'createCollection', name, uuid: randomUUID(), config, shards, max_collections: this.config.storage.max_collections }, this.ms(timeoutS))) as boolean;
  }

  async updateCollection(name: string, patch: unknown, timeoutS: number | null): Promise<void> {
    if (this.consensus === null) {
      await this.toc.updateMeta(name, (c) => c.updateConfig(applyCollectionUpdate(c.config, patch).config));
      return;
    }
    const state = this.consensus.clusterState;
    const target = state.resolve(name);
    if (target === undefined) throw new NotFoundError(`Collection \`${name}\` doesn't exist!`);
    applyCollectionUpdate(state.collection(target)!.config, patch); // a bad body fails here, before consensus
    await this.consensus.propose({ op: 'updateCollection', name, patch }, this.ms(timeoutS));
  }

  /** Adds a named vector (dense or sparse) to a collection: its shards get an empty store for it. */
  async createVectorName(name: string, vector: string, params: NewVectorName, timeoutS: number | null): Promise<void> {
    if (this.consensus === null) {
      await this.toc.updateMeta(name, (c) => c.updateConfig(addVectorName(c.config, vector, params)));
      return;
    }
    const state = this.consensus.clusterState;
    const target = state.resolve(name);
    if (target === undefined) throw new NotFoundError(`Collection \`${name}\` doesn't exist!`);
    addVectorName(state.collection(target)!.config, vector, params); // a refusal comes here, before consensus
    const body = 'sparse' in params ? { sparse: params.sparse } : { params: params.dense };
    await this.consensus.propose({ op: 'createVectorName', collection: name, vector, ...body }, this.ms(timeoutS));
  }

  /** Removes a named vector from a collection and its points. */
  async deleteVectorName(name: string, vector: string, timeoutS: number | null): Promise<void> {
    if (this.consensus === null) {
      await this.toc.updateMeta(name, (c) => c.updateConfig(removeVectorName(c.config, vector)));
      return;
    }
    const state = this.consensus.clusterState;
    const target = state.resolve(name);
    if (target === undefined) throw new NotFoundError(`Collection \`${name}\` doesn't exist!`);
    removeVectorName(state.collection(target)!.config, vector);
    await this.consensus.propose({ op: 'deleteVectorName', collection: name, vector }, this.ms(timeoutS));
  }

  async deleteCollection(name: string, timeoutS: number | null): Promise<boolean> {
    if (this.consensus === null) return this.toc.delete(name);
    return (await this.consensus.propose({ op: 'deleteCollection', name }, this.ms(timeoutS))) as boolean;
  }

  async changeAliases(actions: AliasAction[], timeoutS: number | null): Promise<void> {
    if (this.consensus === null) return this.toc.updateAliases(actions);
    await this.consensus.propose({ op: 'changeAliases', actions }, this.ms(timeoutS));
  }

  /** The cluster metadata keys, sorted: the consensus state's in a cluster, this node's store on a single node. */
  clusterMetadataKeys(): string[] {
    return this.consensus === null ? this.toc.clusterMetadata.keys() : this.consensus.clusterState.metadataKeys();
  }

  /** A cluster metadata key's value (null when it has none). */
  clusterMetadataValue(key: string): unknown {
    return this.consensus === null ? this.toc.clusterMetadata.get(key) : this.consensus.clusterState.metadataValue(key);
  }

  /**
   * Sets a cluster metadata key (null removes it): on a single node written to this
   * node's store, in a cluster proposed through consensus. Either way the answer comes
   * once the change is applied here (the reference's `wait=true`; with `wait=false` it
   * may answer earlier, which Quiver does not).
   */
  async setClusterMetadata(key: string, value: unknown, timeoutS: number | null): Promise<void> {
    if (this.consensus === null) return this.toc.clusterMetadata.set(key, value);
    await this.consensus.propose({ op: 'setClusterMetadata', key, value }, this.ms(timeoutS));
  }

  async createPayloadIndex(collection: string, field: string, schema: FieldSchema, timeoutS: number | null): Promise<void> {
    if (this.consensus === null) {
      return this.toc.updateMeta(collection, (c) => {
        c.strict.payloadIndex(field);
        return c.createPayloadIndex(field, schema);
      });
    }
    if (this.consensus.clusterState.resolve(collection) === undefined) throw new NotFoundError(`Collection \`${collection}\` doesn't exist!`);
    // Strict mode's index count, checked on the proposing peer as the reference checks it before consensus.
    if (this.toc.has(this.toc.resolveName(collection))) this.toc.get(collection).strict.payloadIndex(field);
    await this.consensus.propose({ op: 'createPayloadIndex', collection, field, schema }, this.ms(timeoutS));
  }

  async dropPayloadIndex(collection: string, field: string, timeoutS: number | null): Promise<void> {
    if (this.consensus === null) {
      return this.toc.updateMeta(collection, async (c) => {
        await c.dropPayloadIndex(field);
      });
    }
    if (this.consensus.clusterState.resolve(collection) === undefined) throw new NotFoundError(`Collection \`${collection}\` doesn't exist!`);
    await this.consensus.propose({ op: 'dropPayloadIndex', collection, field }, this.ms(timeoutS));
  }

  /**
   * Creates a shard key of a custom-sharded collection (`PUT /collections/{name}/shards`):
   * checks what can be checked here with the reference's errors (the state machine
   * checks again when it applies), places the shards, proposes.
   */
  async createShardKey(collection: string, req: CreateShardKeyRequest, timeoutS: number | null): Promise<boolean> {
    if (this.consensus === null) {
      const c = this.toc.get(collection);
      if (c.config.params.sharding_method !== 'custom') throw autoShardingRefusal();
      if ((c.shardKeys() ?? []).some((k) => keyId(k) === keyId(req.key))) throw keyExistsError(req.key, collection);
      if (req.placement !== null) {
        if (req.placement.length === 0) throw emptyPlacementError(req.key);
        const self = this.toc.peerId.toString();
        for (const p of req.placement) if (p !== self) throw unknownPeerError(p);
      }
      await this.toc.createShardKey(collection, req.key, req.shardsNumber ?? c.config.params.shard_number);
      return true;
    }
    const { state, name, c } = this.clusterCollection(collection);
    if (c.config.params.sharding_method !== 'custom') throw autoShardingRefusal();
    if (ClusterState.shardKeys(c).some((e) => keyId(e.key) === keyId(req.key))) throw keyExistsError(req.key, collection);
    let pool: string[];
    if (req.placement !== null) {
      if (req.placement.length === 0) throw emptyPlacementError(req.key);
      for (const p of req.placement) if (!Object.prototype.hasOwnProperty.call(state.peers, p)) throw unknownPeerError(p);
      pool = [...new Set(req.placement)];
    } else {
      pool = Object.keys(state.peers).sort();
    }
    const n = req.shardsNumber ?? c.config.params.shard_number;
    const rf = req.replicationFactor ?? c.config.params.replication_factor;
    const placement = placeKeyShards(pool, n, rf, pool.length > 1 ? randomInt(pool.length) : 0);
    return (await this.consensus.propose({ op: 'createShardKey', collection: name, key: req.key, placement }, this.ms(timeoutS))) as boolean;
  }

  /**
   * Moves, copies or drops replicas, or aborts or restarts a transfer, through
   * consensus (`POST /collections/{name}/cluster`). The state machine checks the change
   * when it applies it (an active source, a target without a replica, one transfer per
   * shard, never the last active replica); a transfer itself is driven by its source.
   */
  async changeReplicas(collection: string, change: ReplicaChange, timeoutS: number | null): Promise<boolean> {
    if (this.consensus === null) throw new BadRequestError('Distributed mode disabled');
    const { state, name, c } = this.clusterCollection(collection);
    const ms = this.ms(timeoutS);
    // The reference's early checks, in its order (the state machine checks again): the
    // shard, then the peers (400); a transfer to abort or restart must exist (404).
    const shardExists = (): void => {
      if (!c.shards.some((s) => s.id === change.shard)) throw new BadRequestError(`Shard ${change.shard} of ${name} does not exist`);
    };
    const peerExists = (p: string): void => {
      if (!Object.prototype.hasOwnProperty.call(state.peers, p)) throw unknownPeerError(p);
    };
    if (change.kind === 'drop_replica') {
      shardExists();
      peerExists(change.peer);
      return (await this.consensus.propose({ op: 'dropReplica', collection: name, shard: change.shard, peer: change.peer }, ms)) as boolean;
    }
    const existing = state.transfers(name).find((t) => t.shard === change.shard && t.from === change.from && t.to === change.to);
    if (change.kind === 'abort' || change.kind === 'restart') {
      if (existing === undefined) throw new NotFoundError(`Shard ${change.shard} of ${name} is not being transferred from peer ${change.from} to peer ${change.to}`);
    } else {
      shardExists();
      peerExists(change.to);
      peerExists(change.from);
    }
    if (change.kind !== 'abort') requireMethod(change.method);
    if (change.kind === 'abort') {
      return (await this.consensus.propose({ op: 'finishTransfer', collection: name, shard: change.shard, from: change.from, to: change.to, ok: false }, ms)) as boolean;
    }
    let kind: 'move' | 'replicate' | 'recovery';
    if (change.kind === 'restart') {
      // The transfer starts again from nothing: aborted, then started with the method asked.
      kind = existing!.kind;
      await this.consensus.propose({ op: 'finishTransfer', collection: name, shard: change.shard, from: change.from, to: change.to, ok: false }, ms);
    } else {
      kind = change.kind;
    }
    // No method asked: `storage.shard_transfer_method`, else stream_records. (wal_delta to a
    // new replica sends the source's whole WAL history when it still holds it from the
    // first operation, and otherwise goes on as stream_records, as the reference does.)
    const method: RunMethod = (change.method as RunMethod | null) ?? this.config.storage.shard_transfer_method ?? 'stream_records';
    const transfer = { shard: change.shard, from: change.from, to: change.to, method, kind, id: randomUUID() };
    return (await this.consensus.propose({ op: 'startTransfer', collection: name, transfer }, ms)) as boolean;
  }

  /** Drops a shard key and every point stored under it (`POST /collections/{name}/shards/delete`). */
  async dropShardKey(collection: string, key: ShardKey, timeoutS: number | null): Promise<boolean> {
    if (this.consensus === null) {
      const c = this.toc.get(collection);
      if (c.config.params.sharding_method !== 'custom') throw autoShardingRefusal();
      if (!(c.shardKeys() ?? []).some((k) => keyId(k) === keyId(key))) throw keyMissingError(key, collection);
      await this.toc.dropShardKey(collection, key);
      return true;
    }
    const { name, c } = this.clusterCollection(collection);
    if (c.config.params.sharding_method !== 'custom') throw autoShardingRefusal();
    if (!ClusterState.shardKeys(c).some((e) => keyId(e.key) === keyId(key))) throw keyMissingError(key, collection);
    return (await this.consensus.propose({ op: 'dropShardKey', collection: name, key }, this.ms(timeoutS))) as boolean;
  }
}
