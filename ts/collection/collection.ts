/**
 * A collection: its configuration and its shards, each a ReplicaSet (replica-set.ts)
 * of replicas reached through the Replica interface (replica.ts): this peer's
 * LocalReplica, and in a cluster the other peers' replicas through the ClusterLink.
 *
 * Owns: routing points to shards (auto sharding: a hash of the point id over the
 * collection's shards; custom sharding: the request names shard keys, and the same hash
 * picks one of each key's shards, so a key's points never move when keys come and go),
 * creating and dropping the shards of a key, splitting writes per shard, fanning reads out and merging the shaped records they
 * return (top-k by score, scroll order by id, counts summed), resolving queries
 * (example ids to vectors, recommendations, batches), and the checks that make a
 * rejected write change nothing (every point validated, explicit ids checked to
 * exist) before any shard logs anything. Must never: parse HTTP bodies (ts/api does),
 * know the storage root layout (ts/storage does), or reach into a replica's shard for
 * point reads and writes (management of this peer's own data — info, configuration,
 * indexes, checkpoints, snapshots — uses its LocalShard directly).
 */

import { markMultivector, MAX_MULTIVECTOR_ROWS, multivectorRows } from '../common/multivector';
import * as path from 'node:path';
import type { Logger } from 'pino';

import type { Engine } from '../../bindings/engine';
import * as fs from 'node:fs/promises';

import { BadInputError, BadRequestError, NotFoundError, ShardUnavailableError, snapshotLoadError } from '../common/errors';
import { type Filter } from '../shard/filter';
import { crc32c } from '../common/crc32c';
import { normalizePointId, type PointKey } from '../shard/id-tracker';
import { swapDirectory, syncDir } from '../common/files';
import { LocalShard, type ShardPreload } from '../shard/local-shard';
import { sameFieldSchema, type FieldSchema } from '../shard/field-schema';
import type { Payload, WithPayload } from '../shard/payload-store';
import { higherIsBetter } from '../shard/vector-store';
import type { OptimizationInfo, PendingInfo, SegmentInfo } from '../shard/optimization-log';
import type { VectorSpec } from '../shard/vector-store';
import { type CollectionConfig, vectorSpecs } from './config';
import { StrictMode } from './strict-mode';
import { CollectionIssues } from './issues';
import { LocalReplica } from './local-replica';
import { exampleIds, recommendMultivector, recommendSparseVector, recommendVector, type Example, type LookupFrom, type QueryKind, type QueryRequest } from './query';
import { MAX_PREFETCH_COUNT, MAX_PREFETCH_DEPTH, prefetchShape, referencedIds, runHybrid, type HybridReads } from './hybrid';
import { examplesOf, rulePlan, ruleUnsupported, scoresNothing, searchRule, type RulePlan } from './scorers';
import { bothFilters } from './hybrid';
import { randomPick, vectorOf } from './query-kinds';
import { nearestInSample, type MatrixEntry } from './mmr';
import type { SparseVec } from '../shard/operations';
import { F16_MAX } from '../shard/sparse-store';
import { facetHits, type FacetHit, type FacetRequest } from './facet';
import { runGroups, type GroupReads, type GroupsRequest, type PointGroup, type ScoreOrder } from './groups';
import {
  compareIds,
  DEFAULT_READ,
  searchRequestOf,
  type OrderedScrollRequest,
  type PointId,
  type PointRecord,
  type ReadOptions,
  type ScoredRecord,
  type ScrollRequest,
  type SearchRequest,
  type UpdateOptions,
  type VectorsOut,
  type WithVector,
} from './replica';
import { sparseSpecs } from './sparse-config';
import { isSelected, type ReplicaOperation } from './replica-operation';
import { ReplicaSet, type ReplicaSetCluster } from './replica-set';
import type { ClusterLink, ShardTarget, TransferMethod } from './cluster-link';
import { isActive, servesReads, type ReplicaState } from './replica-state';
import {
  autoShardingRefusal,
  distinctKeys,
  firstOfEach,
  keyExistsError,
  keyId,
  keyMissingError,
  nextShardId,
  showKey,
  type ForKeys,
  type ShardKey,
  type ShardKeyEntry,
  type ShardSelector,
} from './shard-keys';

export type { OrderBy, ReadOptions, ScrollRequest, SearchRequest, UpdateOptions, WithVector } from './replica';
export { keyToJson } from './replica';
export type { ReplicaOperation, Selector } from './replica-operation';
export type { ReplicaState } from './replica-state';
export type { ForKeys, ShardKey, ShardKeyEntry, ShardSelector } from './shard-keys';

/** Other collections of the same storage, by name (for `lookup_from`); throws the reference's 404 for a missing one. */
export type CollectionLookup = (name: string) => Collection;

export interface UpdateResult {
  operation_id: number;
  status: 'acknowledged' | 'completed';
}

/**
 * A point as the API returns it; `payload` and `vector` are left out when not asked for,
 * `shard_key` when the point's shard has none (auto sharding), as the reference does.
 */
export interface RecordOut {
  id: number | string;
  payload?: Payload;
  vector?: VectorsOut;
  shard_key?: ShardKey;
}

/** A scored point as the API returns it (the records replicas return are in this shape already, but for the shard key). */
export type ScoredOut = ScoredRecord & { shard_key?: ShardKey };

/** A distance matrix request: how many points to sample, how many neighbours each, over which vector and filter. */
export interface MatrixRequest {
  filter: Filter | null;
  sample: number;
  limit: number;
  using: string;
}

/** The sampled ids (in the matrix's order) and each one's nearest others, by index into `ids`. */
export interface MatrixAnswer {
  ids: PointId[];
  entries: MatrixEntry[];
}

/** Ids read per scroll page when sampling at random. */
const SAMPLE_PAGE = 8192;

/** The local replica's peer id on a single node (no placement: the id is never compared). */
const STANDALONE_PEER = '';

/** The dense vector of a sparse search (unused). */
const NO_VECTOR = new Float32Array(0);

/** Where a collection's shards live in a cluster (absent on a single node: every shard is local). */
export interface ClusterPlacement {
  /** Chosen at creation through consensus: tells a re-created collection of the same name from the old one. */
  uuid: string;
  /** This peer's id. */
  peer: string;
  /** Per shard: peer id → replica state. */
  shards: Array<{ id: number; replicas: Record<string, ReplicaState> }>;
  /** Transfers in progress: `from` copies shard `shard` to `to` by `method` (absent: none; a method absent in placements saved before methods existed is stream_records). */
  transfers?: PlacedTransfer[];
}

export interface PlacedTransfer {
  shard: number;
  from: string;
  to: string;
  method?: TransferMethod;
  /** Tells this transfer from an earlier one between the same peers ('' in placements saved before ids). */
  id?: string;
}

/** The method of a placed transfer. */
export function methodOf(t: PlacedTransfer): TransferMethod {
  return t.method ?? 'stream_records';
}

export interface CollectionMeta {
  config: CollectionConfig;
  /** Payload indexes by field. */
  payload_schema: Record<string, FieldSchema>;
  cluster?: ClusterPlacement;
  /**
   * Custom sharding: the shard keys and their shards, in creation order (absent: none
   * yet). On a single node the table of collections keeps it; in a cluster the applier
   * copies it from the consensus state (whose shard placements carry their keys).
   */
  shard_keys?: ShardKeyEntry[];
  /** Custom sharding on a single node: the id the next key's first shard gets (ids are never reused). */
  next_shard_id?: number;
}

/** The shards a point id is routed over: all of an auto-sharded collection's, or one key's. */
interface Ring {
  key: ShardKey | null;
  sets: ReplicaSet[];
}

/** The shard ids a collection's meta describes: 0..shard_number-1 (auto), or the keys' shards (custom). */
function shardIdsOf(meta: CollectionMeta): number[] {
  if (meta.config.params.sharding_method === 'custom') return (meta.shard_keys ?? []).flatMap((e) => e.shards).sort((a, b) => a - b);
  return Array.from({ length: meta.config.params.shard_number }, (_, id) => id);
}

/** The replicas of shard `id` in a cluster placement (by id: a custom collection's ids do not start at 0). */
function replicasIn(placement: ClusterPlacement, id: number): Record<string, ReplicaState> | undefined {
  return placement.shards.find((s) => s.id === id)?.replicas;
}

/** Whether a shard has a replica that is a source of truth (every shard on a single node). */
function shardActive(set: ReplicaSet): boolean {
  const states = set.replicas;
  return states === null || Object.values(states).some(isActive);
}

/** A record as the API shows it: the version stays with the collection; the shard key (custom sharding) goes with it. */
function recordOut(r: PointRecord & { shard_key?: ShardKey }): RecordOut {
  const out: RecordOut = { id: r.id };
  if (r.payload !== undefined) out.payload = r.payload;
  if (r.vector !== undefined) out.vector = r.vector;
  if (r.shard_key !== undefined) out.shard_key = r.shard_key;
  return out;
}

/** Records by id text as the API shows them. */
function recordsOut(m: Map<string, PointRecord & { shard_key?: ShardKey }>): Map<string, RecordOut> {
  return new Map([...m].map(([k, r]) => [k, recordOut(r)]));
}

/** The text of a point id in messages. */
function idText(k: PointKey): string {
  return k.kind === 'num' ? k.value.toString() : k.value;
}

export class Collection {
  /** Shard id → its replica set, in id order. */
  private readonly shards = new Map<number, ReplicaSet>();
  /** Removals of replaced shard data still under way (swapDirectory's cleanup); close() and drop() wait for them. */
  private readonly cleanups = new Set<Promise<void>>();
  /** The hash rings: the one of an auto-sharded collection, or one per shard key (creation order). */
  private rings: Ring[] = [];
  /** Custom sharding: key id (shard-keys.ts keyId) → its ring, and shard id → its key. */
  private readonly ringByKey = new Map<string, Ring>();
  private readonly keyOfShard = new Map<number, ShardKey>();
  /** Set while the collection is being replaced (snapshot recovery): requests get 503 with this reason. */
  unavailable: string | null = null;
  private readonly specs: Map<string, VectorSpec>;
  /** Strict mode's checks of the requests this peer serves (strict-mode.ts); they read the configuration as it is now. */
  readonly strict: StrictMode;
  /** Performance advisories of this collection's reads (`GET /issues`). */
  readonly issues: CollectionIssues;

  private constructor(
    readonly name: string,
    readonly dir: string,
    readonly meta: CollectionMeta,
    /** Null for a collection over given replicas (tests): it opens no shard. */
    private readonly engine: Engine | null,
    private readonly logger: Logger,
    /** This node's peer id (storage/peer_id): what local writes are tagged with on a single node. */
    private readonly nodePeerId: bigint,
    /** The cluster around this peer (cluster mode), else null. */
    private readonly link: ClusterLink | null = null,
  ) {
    this.specs = new Map(vectorSpecs(meta.config).map((s) => [s.name, s]));
    this.issues = new CollectionIssues(name);
    this.strict = new StrictMode({
      readFilter: (f) => this.issues.observe(f, this.meta.payload_schema),
      config: () => this.meta.config.strict_mode_config,
      payloadSchema: () => this.meta.payload_schema,
      sizes: () => {
        const points = this.pointsCount();
        let dims = 0;
        for (const spec of this.specs.values()) dims += spec.dim;
        let payloadBytes = 0;
        for (const sh of this.present()) payloadBytes += sh.payloadBytes();
        return { points, vectorBytes: points * dims * 4, payloadBytes };
      },
    });
  }

  /** `preloaded`: shard state files already being decoded (a snapshot recovery), by shard id. */
  static async open(
    name: string,
    dir: string,
    meta: CollectionMeta,
    engine: Engine,
    logger: Logger,
    nodePeerId = 0n,
    link: ClusterLink | null = null,
    preloaded: ReadonlyMap<number, ShardPreload> = new Map(),
  ): Promise<Collection> {
    const c = new Collection(name, dir, meta, engine, logger.child({ collection: name }), nodePeerId, link);
    const placement = meta.cluster;
    const isLocal = (id: number) => placement === undefined || Object.prototype.hasOwnProperty.call(replicasIn(placement, id) ?? {}, placement.peer);
    const ids = shardIdsOf(meta);
    if (meta.config.params.sharding_method === 'custom') await c.removeStrayShards(ids);
    const opened = await Promise.allSettled(ids.map((id) => (isLocal(id) ? c.openShard(id, undefined, preloaded.get(id)) : Promise.resolve(null))));
    const failed = opened.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      // Close what did open, so a caller can move the directory back (snapshot recovery).
      await Promise.all(opened.map((r) => (r.status === 'fulfilled' ? r.value?.drop() : undefined)));
      throw failed.reason;
    }
    const peer = c.localPeer;
    opened.forEach((r, i) => {
      const id = ids[i];
      const shard = (r as PromiseFulfilledResult<LocalShard | null>).value;
      const set = new ReplicaSet(id, name, peer, shard === null ? [] : [new LocalReplica(peer, shard)], placement ? { ...(replicasIn(placement, id) ?? {}) } : null, c.replicaSetCluster());
      c.shards.set(id, set);
      if (placement) set.setStates(replicasIn(placement, id) ?? {}, peer, c.incomingOf(placement, id));
    });
    c.reroute();
    // Transfers this peer was the source of before it started again: their runs died with
    // the process (the target may hold part of the shard), so they are aborted, and the
    // supervisor starts them afresh.
    if (placement && link !== null) for (const t of c.outgoingTransfers()) link.transferLost(c.shardTarget(t.shard), t.to, t.id);
    return c;
  }

  /** What a replica set of this collection needs in cluster mode. */
  private replicaSetCluster(): ReplicaSetCluster | null {
    const placement = this.meta.cluster;
    if (this.link === null || placement === undefined) return null;
    return { link: this.link, uuid: placement.uuid, params: () => this.meta.config.params };
  }

  /** Peers receiving a transfer of shard `id`. */
  private incomingOf(placement: ClusterPlacement, id: number): string[] {
    return (placement.transfers ?? []).filter((t) => t.shard === id).map((t) => t.to);
  }

  /** Starts the transfers this peer is the source of, and stops those that ended (`before`: the transfers of the previous placement). */
  private driveTransfers(placement: ClusterPlacement, before: readonly PlacedTransfer[]): void {
    if (this.link === null) return;
    const now = placement.transfers ?? [];
    const key = (t: PlacedTransfer) => `${t.shard}/${t.from}/${t.to}/${t.id ?? ''}`;
    const current = new Set(now.map(key));
    for (const t of before) {
      if (t.from === placement.peer && !current.has(key(t))) this.link.transferGone(this.shardTarget(t.shard), t.to, t.id ?? '');
    }
    const known = new Set(before.map(key));
    for (const t of now) {
      if (t.from !== placement.peer || known.has(key(t))) continue;
      const source = this.shards.get(t.shard)?.localReplica;
      if (source) this.link.transferOut(this.shardTarget(t.shard), t.to, source, methodOf(t), t.id ?? '');
      else this.link.transferLost(this.shardTarget(t.shard), t.to, t.id ?? '');
    }
  }

  /** Transfers the placement applied here says this peer is the source of. */
  outgoingTransfers(): Array<{ shard: number; to: string; id: string }> {
    const placement = this.meta.cluster;
    if (placement === undefined) return [];
    return (placement.transfers ?? []).filter((t) => t.from === placement.peer).map((t) => ({ shard: t.shard, to: t.to, id: t.id ?? '' }));
  }

  /** How peers name shard `id` of this collection. */
  shardTarget(id: number): ShardTarget {
    return { collection: this.name, uuid: this.meta.cluster?.uuid ?? '', shard: id };
  }

  /** The replica set of shard `id`, or undefined. */
  replicaSetIfAny(id: number): ReplicaSet | undefined {
    return this.shards.get(id);
  }

  /** The replica set of shard `id`, or a 404. */
  replicaSet(id: number): ReplicaSet {
    const r = this.shards.get(id);
    if (!r) throw new NotFoundError(`Shard ${id} of ${this.name} does not exist`);
    return r;
  }

  /**
   * A collection over replica sets built by the caller (tests build them of fake
   * replicas): it has no directory and opens no shard, so only point reads and writes
   * (and what needs no local shard) work on it.
   */
  static overReplicas(name: string, meta: CollectionMeta, sets: (name: string, peer: string) => ReplicaSet[], logger: Logger): Collection {
    const c = new Collection(name, '', meta, null, logger.child({ collection: name }), 0n);
    for (const set of sets(name, c.localPeer)) c.shards.set(set.shardId, set);
    c.reroute();
    return c;
  }

  private get localPeer(): string {
    return this.meta.cluster?.peer ?? STANDALONE_PEER;
  }

  private openShard(id: number, dir = path.join(this.dir, String(id)), preloaded?: ShardPreload): Promise<LocalShard> {
    if (this.engine === null) throw new Error(`collection ${this.name} was built over given replicas and opens no shard`);
    const { config, payload_schema } = this.meta;
    // wal_capacity_mb is both the segment size and the history a checkpoint keeps (docs/storage.md).
    const walBytes = config.wal_config.wal_capacity_mb * 1024 * 1024;
    // In a cluster the peer id is the one consensus knows (cluster.peer_id may differ from storage/peer_id).
    const peer = this.meta.cluster?.peer;
    return LocalShard.open({
      dir,
      engine: this.engine,
      vectors: vectorSpecs(config),
      sparse: sparseSpecs(config.params.sparse_vectors),
      walSegmentBytes: walBytes,
      walRetainBytes: walBytes,
      peerId: peer !== undefined && /^[0-9]{1,20}$/.test(peer) && BigInt(peer) < 1n << 64n ? BigInt(peer) : this.nodePeerId,
      flushIntervalMs: config.optimizer_config.flush_interval_sec * 1000,
      payloadIndexes: payload_schema,
      onDiskPayload: config.params.on_disk_payload,
      logger: this.logger.child({ shard: id }),
      preloaded,
    });
  }

  /** Ids of the shards this peer holds a replica of (every shard on a single node): what its snapshots contain. */
  localShardIds(): number[] {
    return [...this.shards.values()].filter((r) => r.local !== null).map((r) => r.shardId);
  }

  /** The local replica of shard `id`, or a 404 naming it (503 when it lives on other peers only). */
  localShard(id: number): LocalShard {
    const r = this.shards.get(id);
    if (!r) throw new NotFoundError(`Shard ${id} of ${this.name} does not exist`);
    return r.localShard();
  }

  /** The replica sets in shard id order, for cluster views. */
  replicaSets(): readonly ReplicaSet[] {
    return [...this.shards.values()];
  }

  /** Custom sharding: the shard keys in creation order; null for an auto-sharded collection. */
  shardKeys(): ShardKey[] | null {
    return this.custom ? this.rings.map((r) => r.key as ShardKey) : null;
  }

  /** The shard key shard `id` belongs to (undefined with auto sharding). */
  shardKeyOf(id: number): ShardKey | undefined {
    return this.keyOfShard.get(id);
  }

  private get custom(): boolean {
    return this.meta.config.params.sharding_method === 'custom';
  }

  /**
   * Rebuilds the rings from the meta and the replica sets: one ring of every shard in id
   * order (auto sharding: the on-disk layout depends on it), or one per shard key with
   * that key's shards in the order they were created.
   */
  private reroute(): void {
    // Kept in id order, so iteration (fan-out, views, snapshots) is too.
    const sorted = [...this.shards.entries()].sort(([a], [b]) => a - b);
    this.shards.clear();
    for (const [id, set] of sorted) this.shards.set(id, set);
    this.ringByKey.clear();
    this.keyOfShard.clear();
    if (!this.custom) {
      this.rings = [{ key: null, sets: [...this.shards.values()] }];
      return;
    }
    this.rings = [];
    for (const e of this.meta.shard_keys ?? []) {
      const ring: Ring = { key: e.key, sets: [] };
      for (const id of e.shards) {
        const set = this.shards.get(id);
        if (set === undefined) throw new Error(`shard ${id} of key ${showKey(e.key)} of ${this.name} has no replica set`);
        ring.sets.push(set);
        this.keyOfShard.set(id, e.key);
      }
      this.rings.push(ring);
      this.ringByKey.set(keyId(e.key), ring);
    }
  }

  /**
   * Custom sharding: removes shard folders of no key, which a crash can leave (a key
   * whose shards were made but not yet recorded, or dropped but not yet deleted).
   */
  private async removeStrayShards(ids: readonly number[]): Promise<void> {
    const keep = new Set(ids.map(String));
    const entries = await fs.readdir(this.dir, { withFileTypes: true }).catch(() => []);
    for (const e of entries) {
      if (!e.isDirectory() || !/^[0-9]+$/.test(e.name) || keep.has(e.name)) continue;
      this.logger.warn({ shard: e.name }, 'removing the folder of a shard that belongs to no shard key (left by an interrupted key change)');
      await fs.rm(path.join(this.dir, e.name), { recursive: true, force: true });
    }
  }

  // -- shard keys (custom sharding) -------------------------------------------------------

  /**
   * Single node: creates `shardsNumber` shards for a new key, with ids no shard had
   * before, and opens them here. The caller persists the meta (TableOfContent); on a
   * failure nothing is left.
   */
  async createShardKey(key: ShardKey, shardsNumber: number): Promise<void> {
    if (!this.custom) throw autoShardingRefusal();
    if (this.ringByKey.has(keyId(key))) throw keyExistsError(key, this.name);
    const entries = this.meta.shard_keys ?? [];
    const first = nextShardId(entries, this.meta.next_shard_id);
    const ids = Array.from({ length: shardsNumber }, (_, i) => first + i);
    // The ids are fresh: a folder of one can only be a leftover of an interrupted change.
    await Promise.all(ids.map((id) => fs.rm(path.join(this.dir, String(id)), { recursive: true, force: true })));
    const opened = await Promise.allSettled(ids.map((id) => this.openShard(id)));
    const failed = opened.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      await Promise.all(opened.map((r) => (r.status === 'fulfilled' ? r.value.drop() : undefined)));
      await Promise.all(ids.map((id) => fs.rm(path.join(this.dir, String(id)), { recursive: true, force: true })));
      throw failed.reason;
    }
    const peer = this.localPeer;
    opened.forEach((r, i) => {
      const shard = (r as PromiseFulfilledResult<LocalShard>).value;
      this.shards.set(ids[i], new ReplicaSet(ids[i], this.name, peer, [new LocalReplica(peer, shard)], null));
    });
    this.meta.shard_keys = [...entries, { key, shards: ids }];
    this.meta.next_shard_id = first + shardsNumber;
    this.reroute();
    this.logger.info({ shardKey: key, shards: ids }, 'shard key created');
  }

  /**
   * Single node: takes a key's shards out of routing and out of the meta. `drop` then
   * deletes their data (once the caller persisted the meta); `undo` puts them back (when
   * it could not).
   */
  detachShardKey(key: ShardKey): { drop(): Promise<void>; undo(): void } {
    if (!this.custom) throw autoShardingRefusal();
    const before = this.meta.shard_keys ?? [];
    const entry = before.find((e) => keyId(e.key) === keyId(key));
    if (entry === undefined) throw keyMissingError(key, this.name);
    const sets = entry.shards.map((id) => this.shards.get(id)).filter((s): s is ReplicaSet => s !== undefined);
    for (const id of entry.shards) this.shards.delete(id);
    this.meta.shard_keys = before.filter((e) => e !== entry);
    this.reroute();
    return {
      drop: async () => {
        await Promise.all(sets.map((set) => this.dropLocal(set)));
        this.logger.info({ shardKey: key, shards: entry.shards }, 'shard key dropped');
      },
      undo: () => {
        for (const set of sets) this.shards.set(set.shardId, set);
        this.meta.shard_keys = before;
        this.reroute();
      },
    };
  }

  /**
   * Cluster mode: makes the keys and their shards exactly `entries` (applied from
   * consensus): a new key's shards get replica sets (with the states `placement` gives
   * them; applyPlacement then opens this peer's replicas), a dropped key's go with this
   * peer's data of them.
   */
  async applyShardKeys(entries: ShardKeyEntry[], placement: ClusterPlacement): Promise<void> {
    const wanted = new Set(entries.flatMap((e) => e.shards));
    const gone = [...this.shards.values()].filter((set) => !wanted.has(set.shardId));
    for (const set of gone) this.shards.delete(set.shardId);
    for (const id of wanted) {
      if (!this.shards.has(id)) this.shards.set(id, new ReplicaSet(id, this.name, placement.peer, [], { ...(replicasIn(placement, id) ?? {}) }, this.replicaSetCluster()));
    }
    this.meta.shard_keys = structuredClone(entries);
    this.reroute();
    for (const set of gone) await this.dropLocal(set);
  }

  /** Drops this peer's replica of a shard that is no longer part of the collection, and its folder. */
  private async dropLocal(set: ReplicaSet): Promise<void> {
    const local = set.local;
    if (local !== null) {
      set.setLocal(null);
      await local.drop();
    }
    if (this.dir === '') return;
    // Renamed away, then deleted: a crash midway leaves the shard's folder whole or gone,
    // never half deleted (a folder without its checkpoint but with a WAL cut by one does
    // not open: the node would not start again). The placement saying it is gone is
    // written after this; start-up removes `.dropped-*` leftovers (finishSwaps).
    const gone = path.join(this.dir, `.dropped-${set.shardId}-${process.pid}-${Date.now()}`);
    try {
      await fs.rename(path.join(this.dir, String(set.shardId)), gone);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    await syncDir(this.dir);
    await fs.rm(gone, { recursive: true, force: true });
  }

  /**
   * Opens or drops local replicas and records replica states to match a new placement
   * (applied from consensus). Data of a replica this peer no longer holds is deleted.
   */
  async applyPlacement(placement: ClusterPlacement): Promise<void> {
    const before = this.meta.cluster?.transfers ?? [];
    for (const r of this.shards.values()) {
      const replicas = replicasIn(placement, r.shardId) ?? {};
      const was = r.replicas?.[placement.peer];
      const wantLocal = Object.prototype.hasOwnProperty.call(replicas, placement.peer);
      const incoming = (placement.transfers ?? []).find((t) => t.shard === r.shardId && t.to === placement.peer);
      const previously = before.find((t) => t.shard === r.shardId && t.to === placement.peer);
      if (wantLocal && r.local !== null && incoming !== undefined && methodOf(incoming) === 'stream_records' && (was !== 'Partial' || previously === undefined || (previously.id ?? '') !== (incoming.id ?? '') || methodOf(previously) !== 'stream_records')) {
        // A stream_records transfer to this peer starts (or a wal_delta one switched to it):
        // its replica starts empty, before any write or batch of the transfer reaches it
        // (the source waits until this peer has applied it). The other methods keep the
        // replica: wal_delta adds what it lacks, snapshot replaces it whole.
        await this.dropLocal(r);
        this.logger.info({ shard: r.shardId, method: methodOf(incoming) }, 'replica emptied: a transfer to this peer starts');
      }
      if (wantLocal && r.local === null) {
        r.setLocal(new LocalReplica(placement.peer, await this.openShard(r.shardId)));
      } else if (!wantLocal && r.local !== null) {
        // The new states first: while this replica's data goes (a finished move's source),
        // reads and writes already go to the replicas that hold the shard now (a write that
        // starts here meanwhile reaches the move's target), not to the old ones less this.
        r.setStates(replicas, placement.peer, this.incomingOf(placement, r.shardId));
        await this.dropLocal(r);
      }
      r.setStates(replicas, placement.peer, this.incomingOf(placement, r.shardId));
    }
    // Taken only now: a transfer listed here has its run (driveTransfers, at once), and a
    // transfer's target says it is ready only once its replica was emptied above.
    this.meta.cluster = placement;
    this.driveTransfers(placement, before);
  }

  /**
   * Replaces shard `id`'s data with the shard directory `source` (an unpacked shard
   * snapshot on the same file system): closes the shard, swaps the directories, opens
   * the new data. If the new data does not open, the old directory is put back and
   * reopened, and the error is thrown: the shard is then exactly as it was. `restored`: a
   * snapshot recovery in a cluster, whose data may predate writes the other replicas
   * hold; the shard notes it (LocalShard.markRestored). Not for a snapshot transfer,
   * whose data is a live replica's.
   */
  async replaceShard(id: number, source: string, restored = false): Promise<void> {
    const r = this.shards.get(id);
    if (!r) throw new NotFoundError(`Shard ${id} of ${this.name} does not exist`);
    await r.localShard().close();
    const reopen = async () => r.setLocal(new LocalReplica(this.localPeer, await this.openShard(id)));
    try {
      const { cleanup } = await swapDirectory(this.dir, String(id), source, true, reopen);
      // The replaced data is removed after the answer (start-up finishes it after a crash).
      const removing = cleanup.catch((err: unknown) => this.logger.warn({ shard: id, err: String(err) }, 'could not remove the data a shard snapshot replaced; start-up removes it'));
      this.cleanups.add(removing);
      void removing.finally(() => this.cleanups.delete(removing));
    } catch (err) {
      await reopen();
      throw snapshotLoadError(err);
    }
    if (restored) {
      // Other replicas may hold writes the snapshot predates: a wal_delta from this one must
      // not take them for its own. The data is in place whatever happens here: a failed
      // checkpoint leaves the mark in memory, and the next checkpoint writes it.
      await r
        .localShard()
        .markRestored()
        .catch((err: unknown) => this.logger.warn({ shard: id, err: String(err) }, 'could not write the checkpoint that notes a restore from a snapshot; the next checkpoint writes it'));
    }
    this.logger.info({ shard: id }, 'shard replaced from a snapshot');
  }

  get config(): CollectionConfig {
    return this.meta.config;
  }

  /**
   * Takes a new configuration. Optimizer settings apply to the next optimizer
   * decision; when a vector's graph parameters (m, ef_construct, quantization)
   * changed, its HNSW index is rebuilt in the background (status yellow meanwhile),
   * as the reference does.
   */
  async updateConfig(next: CollectionConfig): Promise<void> {
    const sparseBefore = new Set(Object.keys(this.meta.config.params.sparse_vectors ?? {}));
    this.meta.config = next;
    // Named vectors added or removed (PUT/DELETE /collections/{name}/vectors/{vector_name}):
    // each local shard gets an empty store for a new one, or drops a removed one's store.
    const specs = vectorSpecs(next);
    const names = new Set(specs.map((s) => s.name));
    const added = specs.filter((s) => !this.specs.has(s.name));
    const removed = [...this.specs.keys()].filter((n) => !names.has(n));
    for (const n of removed) this.specs.delete(n);
    // Sparse names likewise: each local shard gets an empty inverted index or drops one.
    const sparseNext = sparseSpecs(next.params.sparse_vectors);
    const sparseAdded = sparseNext.filter((s) => !sparseBefore.has(s.name));
    const sparseRemoved = [...sparseBefore].filter((n) => !sparseNext.some((s) => s.name === n));
    if (added.length > 0 || removed.length > 0 || sparseAdded.length > 0 || sparseRemoved.length > 0) {
      await Promise.all(
        this.present().map((s) =>
          s.changeVectorNames(
            added.map((a) => ({ ...a })),
            removed,
            sparseAdded.map((a) => ({ ...a })),
            sparseRemoved,
          ),
        ),
      );
    }
    for (const spec of specs) {
      const before = this.specs.get(spec.name);
      const graphChanged =
        before !== undefined &&
        (before.m !== spec.m || before.efConstruct !== spec.efConstruct || JSON.stringify(before.quantization) !== JSON.stringify(spec.quantization));
      this.specs.set(spec.name, spec);
      for (const s of this.present()) {
        const store = s.vectors.get(spec.name);
        if (!store) continue;
        Object.assign(store.spec, spec);
        if (graphChanged) store.requestRebuild();
      }
    }
    // Sparse index settings (threshold, IDF) apply from the next search.
    for (const spec of sparseSpecs(next.params.sparse_vectors)) {
      for (const s of this.present()) {
        const store = s.sparse.get(spec.name);
        if (store) Object.assign(store.spec, spec);
      }
    }
    for (const s of this.present()) {
      s.setFlushInterval(next.optimizer_config.flush_interval_sec * 1000);
      s.kick();
    }
    // on_disk_payload: each shard moves its payloads to disk or into memory now.
    await Promise.all(this.present().map((s) => s.setPayloadOnDisk(next.params.on_disk_payload)));
  }

  /** The local replicas this peer holds (collection info, config changes, checkpoints, close). */
  private present(): LocalShard[] {
    const out: LocalShard[] = [];
    for (const r of this.shards.values()) {
      const local = r.local;
      if (local !== null) out.push(local);
    }
    return out;
  }

  /** The replica set of the ring's shard a point id hashes to (crc32c of the id's key text over the ring's shards). */
  private setOf(ring: Ring, key: PointKey): ReplicaSet {
    const n = ring.sets.length;
    return n === 1 ? ring.sets[0] : ring.sets[crc32c(Buffer.from(key.key, 'utf8')) % n];
  }

  /** Items grouped by the ring's shard of their id, in the order each shard first appears. */
  private byShard<T>(ring: Ring, items: readonly T[], idOf: (t: T) => PointKey): Map<ReplicaSet, T[]> {
    const groups = new Map<ReplicaSet, T[]>();
    for (const item of items) {
      const s = this.setOf(ring, idOf(item));
      let l = groups.get(s);
      if (!l) groups.set(s, (l = []));
      l.push(item);
    }
    return groups;
  }

  /** The dimension of a multivector's rows when `name` names a multivector, else null. */
  multivectorDim(name: string): number | null {
    const spec = this.vectorSpec(name);
    return spec.multivector ? spec.dim : null;
  }

  /** Whether `name` is one of the collection's sparse vectors. */
  isSparse(name: string): boolean {
    const sv = this.meta.config.params.sparse_vectors;
    return sv !== undefined && Object.prototype.hasOwnProperty.call(sv, name);
  }

  /** Throws the reference's 400 unless `name` is a sparse vector of the collection. */
  checkSparseName(name: string): void {
    if (this.isSparse(name)) return;
    if (this.specs.has(name)) throw new BadInputError(`Conversion between sparse and regular vectors failed: ${JSON.stringify(name)} is a dense vector`);
    throw new BadInputError(`Not existing vector name error: ${name}`);
  }

  vectorSpec(name: string): VectorSpec {
    const s = this.specs.get(name);
    if (!s) {
      if (this.isSparse(name)) throw new BadInputError(`Conversion between sparse and regular vectors failed: ${JSON.stringify(name)} is a sparse vector`);
      if (name === '') throw new BadInputError('Not existing vector name error: the collection has only named vectors; say which one with `using` or a named vector');
      throw new BadInputError(`Not existing vector name error: ${name}`);
    }
    return s;
  }

  vectorNames(): string[] {
    return [...this.specs.keys()];
  }

  /** Whether the collection has the unnamed vector only (vectors are then bare arrays). */
  get singleUnnamed(): boolean {
    return this.specs.size === 1 && this.specs.has('');
  }

  /** Throws the reference's 400 when a vector does not fit its named vector. */
  checkVector(name: string, v: Float32Array): void {
    const spec = this.vectorSpec(name);
    const rows = multivectorRows(v);
    if (rows !== null && !spec.multivector) {
      throw new BadInputError(`vector${name === '' ? '' : ` ${JSON.stringify(name)}`}: a list of vectors was given, but the vector is not a multivector (no multivector_config)`);
    }
    // A multivector's rows each have the vector's dimension; a plain vector is one row.
    if (rows !== null && rows > MAX_MULTIVECTOR_ROWS) {
      throw new BadInputError(`vector${name === '' ? '' : ` ${JSON.stringify(name)}`}: a multivector of ${rows} vectors; at most ${MAX_MULTIVECTOR_ROWS}`);
    }
    const inner = rows !== null ? v.length / rows : v.length;
    if (inner !== spec.dim) throw new BadInputError(`Vector dimension error: expected dim: ${spec.dim}, got ${inner}`);
    // float16 holds magnitudes up to 65504; larger ones would round to infinity (a
    // Cosine vector is normalised first, so it always fits). uint8 needs no check: it
    // truncates and saturates every value, as the reference does.
    if (spec.datatype === 'float16' && spec.distance !== 'Cosine') {
      for (let i = 0; i < v.length; i++) {
        if (Math.abs(v[i]) >= 65520) {
          throw new BadInputError(`vector${name === '' ? '' : ` ${JSON.stringify(name)}`}: value ${v[i]} at position ${i} is out of the float16 range (largest magnitude 65504)`);
        }
      }
    }
  }

  // -- writes -----------------------------------------------------------------------------

  /**
   * Applies one point operation: validates it, routes it to its shards (each gets the
   * points that hash to it, or the whole selector when it is a filter), checks that every
   * replica it needs can be reached and that explicit ids exist, and only then sends it.
   * With no points, the first shard still logs an empty operation, so every write has an
   * operation id. `shards` names the keys of a custom-sharded collection (each key gets
   * the whole operation); without any, an auto-sharded collection's shards take it.
   */
  async update(op: ReplicaOperation, opts: UpdateOptions, shards: ShardSelector | null = null): Promise<UpdateResult> {
    const mustExist = this.check(op);
    this.strict.write(op, opts.timeout);
    const rings = this.writeRings(shards);
    const plan = rings.flatMap((ring) => this.route(op, ring));
    // Refused before anything is sent when a shard has too few replicas that accept writes.
    let targets = plan.map(([set]) => set.writers());
    if (mustExist !== null) {
      for (const ring of rings) await this.requireExisting(mustExist, ring);
      // The placement may have changed during that read (a transfer ended: its target took
      // over, a move's source dropped its replica). A write sees a change only after its
      // first round started, so it goes to the replicas that accept writes now.
      targets = plan.map(([set]) => set.writers());
    }
    const ids = await Promise.all(plan.map(([set, shardOp], i) => set.update(shardOp, opts, targets[i])));
    let max = 0;
    for (const id of ids) if (id > max) max = id;
    return { operation_id: max, status: opts.wait ? 'completed' : 'acknowledged' };
  }

  /**
   * The operations of one batch request, in order, each with its own result. Every
   * vector of the batch is checked before the first operation runs.
   */
  async updateBatch(ops: ReadonlyArray<ForKeys<ReplicaOperation>>, opts: UpdateOptions): Promise<UpdateResult[]> {
    for (const { req: op } of ops) if (op.kind === 'upsert' || op.kind === 'update_vectors') this.checkVectors(op.points);
    const results: UpdateResult[] = [];
    for (const { req: op, shards } of ops) results.push(await this.update(op, opts, shards));
    return results;
  }

  private checkVectors(points: ReadonlyArray<{ vectors: Map<string, Float32Array>; sparse?: Map<string, SparseVec> }>): void {
    for (const p of points) {
      for (const [name, v] of p.vectors) this.checkVector(name, v);
      if (p.sparse) for (const [name, v] of p.sparse) this.checkSparse(name, v);
    }
  }

  /** Throws the reference's 400 unless `v` fits the sparse vector `name` (its datatype's range). */
  private checkSparse(name: string, v: SparseVec): void {
    this.checkSparseName(name);
    if (this.meta.config.params.sparse_vectors?.[name]?.index?.datatype !== 'float16') return;
    for (const x of v.values) {
      if (Math.abs(x) > F16_MAX) throw new BadInputError(`sparse vector ${JSON.stringify(name)}: value ${x} is out of the float16 range (±${F16_MAX})`);
    }
  }

  /** Validates `op` against the configuration; returns the explicit ids that must exist. */
  private check(op: ReplicaOperation): PointKey[] | null {
    switch (op.kind) {
      case 'upsert':
        this.checkVectors(op.points);
        return null;
      case 'update_vectors':
        for (const p of op.points) {
          if (p.vectors.size === 0 && (p.sparse?.size ?? 0) === 0) throw new BadInputError('each point of a vector update needs at least one vector');
          for (const [name, v] of p.vectors) this.checkVector(name, v);
          if (p.sparse) for (const [name, v] of p.sparse) this.checkSparse(name, v);
        }
        return op.points.map((p) => p.id);
      case 'delete':
        return null;
      case 'delete_vectors':
        for (const n of op.names) if (!this.isSparse(n)) this.vectorSpec(n);
        return op.select.ids;
      default:
        return op.select.ids;
    }
  }

  /** `op` split over the ring's shards: [replica set, that shard's operation], in the order shards first appear. */
  private route(op: ReplicaOperation, ring: Ring): Array<[ReplicaSet, ReplicaOperation]> {
    if (!isSelected(op)) {
      const groups = this.byShard(ring, op.points as Array<{ id: PointKey }>, (p) => p.id);
      if (groups.size === 0) return [[ring.sets[0], op]];
      return [...groups].map(([set, points]) => [set, { ...op, points } as ReplicaOperation]);
    }
    const { ids, filter } = op.select;
    // A filter alone: every shard resolves it under its own lock.
    if (ids === null) return ring.sets.map((set) => [set, op]);
    const groups = this.byShard(ring, ids, (id) => id);
    if (groups.size === 0) return [[ring.sets[0], op]];
    return [...groups].map(([set, group]) => [set, { ...op, select: { ids: group, filter } }]);
  }

  /** Throws 404 for the first explicit id that no shard of the ring holds. */
  private async requireExisting(ids: PointKey[], ring: Ring): Promise<void> {
    const found = await this.lookup(ids, false, false, DEFAULT_READ, [ring]);
    for (const id of ids) if (!found.has(idText(id))) throw new NotFoundError(`No point with id ${idText(id)} found`);
  }

  /**
   * The rings a write goes to, with the reference's refusals: no key for a
   * custom-sharded collection, an empty list, a key that does not exist (every key on an
   * auto-sharded collection). A target key with a fallback writes to the target while
   * every shard of it has an active replica, else to the fallback (and to the target too
   * while all of a shard's replicas are ActiveRead, so neither misses the write).
   */
  private writeRings(shards: ShardSelector | null): Ring[] {
    if (shards === null) {
      if (this.custom) throw new BadInputError('Shard key not specified');
      return this.rings;
    }
    if (isKeyList(shards)) {
      if (shards.length === 0) throw new BadInputError('Empty shard keys selection');
      return distinctKeys(shards).map((k) => {
        const ring = this.ringByKey.get(keyId(k));
        if (ring === undefined) throw new BadInputError(`Shard key ${showKey(k)} not found`);
        return ring;
      });
    }
    const { target, fallback } = shards;
    const t = this.ringByKey.get(keyId(target));
    const f = this.ringByKey.get(keyId(fallback));
    if (t !== undefined && t.sets.length > 0) {
      if (t.sets.every(shardActive)) return [t];
      if (f === undefined) throw noActiveKey(target, fallback);
      const readActive = t.sets.some((set) => set.replicas !== null && Object.values(set.replicas).every((st) => st === 'ActiveRead'));
      return readActive ? [t, f] : [f];
    }
    if (f !== undefined) return [f];
    throw noSuchKeys(target, fallback);
  }

  /**
   * The rings a read goes to: every one without keys (no shard at all for a
   * custom-sharded collection without keys), the named keys (a key that does not exist is
   * a 400), or a target key whose shards all serve reads, else its fallback.
   */
  private readRings(shards: ShardSelector | null): Ring[] {
    if (shards === null) return this.rings;
    if (isKeyList(shards)) {
      return distinctKeys(shards).map((k) => {
        const ring = this.ringByKey.get(keyId(k));
        if (ring === undefined) throw new BadRequestError(`Shard key ${showKey(k)} not found`);
        return ring;
      });
    }
    const { target, fallback } = shards;
    const t = this.ringByKey.get(keyId(target));
    const f = this.ringByKey.get(keyId(fallback));
    if (t !== undefined) {
      const serving = t.sets.length > 0 && t.sets.every((set) => set.replicas === null || Object.values(set.replicas).some(servesReads));
      if (serving) return [t];
      if (f !== undefined) return [f];
      throw noActiveKey(target, fallback);
    }
    if (f !== undefined) return [f];
    throw noSuchKeys(target, fallback);
  }

  /** The replica sets of the rings, in ring order. */
  private setsOf(rings: readonly Ring[]): ReplicaSet[] {
    return rings.length === 1 ? rings[0].sets : rings.flatMap((r) => r.sets);
  }

  /** Records of a shard, with its shard key when it has one (custom sharding), as the reference answers them. */
  private keyed<T extends object>(set: ReplicaSet, records: T[]): Array<T & { shard_key?: ShardKey }> {
    const key = this.keyOfShard.get(set.shardId);
    if (key === undefined) return records;
    return records.map((r) => ({ ...r, shard_key: key }));
  }

  // -- payload indexes (this peer's replicas; consensus applies them on every peer) -------

  async createPayloadIndex(field: string, schema: FieldSchema): Promise<void> {
    const existing = this.meta.payload_schema[field];
    // The reference does nothing when the same index is created again.
    if (existing && sameFieldSchema(existing, schema)) return;
    await Promise.all(this.present().map((s) => s.createPayloadIndex(field, schema)));
    this.meta.payload_schema[field] = schema;
  }

  async dropPayloadIndex(field: string): Promise<boolean> {
    const had = field in this.meta.payload_schema;
    await Promise.all(this.present().map((s) => s.dropPayloadIndex(field)));
    delete this.meta.payload_schema[field];
    return had;
  }

  // -- reads ------------------------------------------------------------------------------

  /** Throws the reference's 400 for a vector name that `with_vector` asks for and the collection lacks. */
  private checkWithVector(withVector: WithVector): void {
    if (Array.isArray(withVector)) for (const n of withVector) if (!this.isSparse(n)) this.vectorSpec(n);
  }

  /**
   * Checks that every replica set can serve a read before any is asked (a read that
   * cannot be served fails as a whole, with nothing left running).
   */
  private readable(sets: readonly ReplicaSet[]): readonly ReplicaSet[] {
    for (const s of sets) s.readers();
    return sets;
  }

  /**
   * Records of `ids` (distinct), each read from the shard it hashes to in every ring, by
   * id text; points that do not exist are absent. An id held under several keys is
   * answered once, by the first ring that has it (the reference answers it once too).
   */
  private async lookup(ids: PointKey[], withPayload: WithPayload, withVector: WithVector, opts: ReadOptions, rings: readonly Ring[]): Promise<Map<string, PointRecord & { shard_key?: ShardKey }>> {
    const asks: Array<[ReplicaSet, PointKey[]]> = rings.flatMap((ring) => [...this.byShard(ring, ids, (id) => id)]);
    this.readable(asks.map(([set]) => set));
    const parts = await Promise.all(asks.map(async ([set, group]) => this.keyed(set, await set.retrieve({ ids: distinct(group), withPayload, withVector }, opts))));
    const out = new Map<string, PointRecord & { shard_key?: ShardKey }>();
    for (const part of parts) for (const r of part) if (!out.has(String(r.id))) out.set(String(r.id), r);
    return out;
  }

  async retrieve(ids: PointKey[], withPayload: WithPayload, withVector: WithVector, opts: ReadOptions = DEFAULT_READ, shards: ShardSelector | null = null): Promise<RecordOut[]> {
    this.checkWithVector(withVector);
    this.strict.read({ cost: Math.max(1, ids.length) }, opts.timeout);
    const wanted = distinct(ids);
    if (wanted.length === 0) return [];
    const rings = this.readRings(shards);
    if (rings.length === 1 && rings[0].sets.length === 1) {
      const set = rings[0].sets[0];
      return this.keyed(set, await set.retrieve({ ids: wanted, withPayload, withVector }, opts)).map(recordOut);
    }
    const found = await this.lookup(wanted, withPayload, withVector, opts, rings);
    const out: RecordOut[] = [];
    for (const id of wanted) {
      const r = found.get(idText(id));
      if (r) out.push(recordOut(r));
    }
    return out;
  }

  async scroll(req: ScrollRequest, opts: ReadOptions = DEFAULT_READ, shards: ShardSelector | null = null): Promise<{ points: RecordOut[]; next_page_offset: PointId | null }> {
    this.strict.read({ limit: req.limit, filter: req.filter }, opts.timeout);
    return this.scrollPage(req, opts, shards);
  }

  private async scrollPage(req: ScrollRequest, opts: ReadOptions, shards: ShardSelector | null): Promise<{ points: RecordOut[]; next_page_offset: PointId | null }> {
    this.checkWithVector(req.withVector);
    const sets = this.readable(this.setsOf(this.readRings(shards)));
    if (sets.length === 1) {
      const page = await sets[0].scroll(req, opts);
      return { points: this.keyed(sets[0], page.points).map(recordOut), next_page_offset: page.next };
    }
    // Each shard returns its first `limit` points and the id after them: the page is the
    // first `limit` of all, the next offset the smallest id left over. An id under
    // several keys is listed once (its first key's point).
    const parts = await Promise.all(sets.map(async (s) => {
      const page = await s.scroll(req, opts);
      return { points: this.keyed(s, page.points), next: page.next };
    }));
    const all = dedupeSorted(parts.flatMap((p) => p.points).sort((a, b) => compareIds(a.id, b.id)), (a, b) => compareIds(a.id, b.id) === 0);
    let next: PointId | null = all.length > req.limit ? all[req.limit].id : null;
    for (const p of parts) if (p.next !== null && (next === null || compareIds(p.next, next) < 0)) next = p.next;
    return { points: all.slice(0, req.limit).map(recordOut), next_page_offset: next };
  }

  /** Scroll by payload value (`order_by`); there is no next page offset (use start_from). */
  async scrollOrdered(req: OrderedScrollRequest, opts: ReadOptions = DEFAULT_READ, shards: ShardSelector | null = null): Promise<{ points: Array<RecordOut & { order_value: number }>; next_page_offset: null }> {
    this.strict.read({ limit: req.limit, filter: req.filter }, opts.timeout);
    return this.scrollOrderedPage(req, opts, shards);
  }

  private async scrollOrderedPage(req: OrderedScrollRequest, opts: ReadOptions, shards: ShardSelector | null): Promise<{ points: Array<RecordOut & { order_value: number }>; next_page_offset: null }> {
    this.checkWithVector(req.withVector);
    const sets = this.readable(this.setsOf(this.readRings(shards)));
    const parts = await Promise.all(sets.map(async (s) => this.keyed(s, await s.scrollOrdered(req, opts))));
    let all = parts.flat();
    if (parts.length > 1) {
      all.sort(req.orderBy.direction === 'desc' ? (a, b) => b.orderValue - a.orderValue : (a, b) => a.orderValue - b.orderValue);
      // The same point (id and value) under several keys is listed once.
      if (this.custom) all = firstOfEach(all, (r) => `${r.orderValue} ${String(r.id)}`);
    }
    const points = all.slice(0, req.limit).map((r) => ({ ...recordOut(r), order_value: r.orderValue }));
    return { points, next_page_offset: null };
  }

  /** Whether any point matches `filter` (stops at the first). */
  async anyMatch(filter: Filter | null, opts: ReadOptions = DEFAULT_READ, shards: ShardSelector | null = null): Promise<boolean> {
    for (const s of this.readable(this.setsOf(this.readRings(shards)))) if (await s.anyMatch(filter, opts)) return true;
    return false;
  }

  /** Points matching `filter`; a point id under several keys counts once per key, as the reference counts. */
  async count(filter: Filter | null, opts: ReadOptions = DEFAULT_READ, shards: ShardSelector | null = null, exact = true): Promise<number> {
    this.strict.read({ filter, exact }, opts.timeout);
    const sets = this.readable(this.setsOf(this.readRings(shards)));
    if (sets.length === 1) return sets[0].count(filter, opts);
    const ns = await Promise.all(sets.map((s) => s.count(filter, opts)));
    return ns.reduce((a, b) => a + b, 0);
  }

  /**
   * Facet counts (`POST /collections/{c}/facet`): points per value of the payload index
   * on `req.key` among those matching `req.filter`, summed over the shards (a point id
   * under several shard keys counts once per key, as count does), ordered and cut by
   * facet.ts. Counts are exact whatever `exact` says (approximate counts are allowed to be exact).
   */
  async facet(req: FacetRequest, opts: ReadOptions = DEFAULT_READ, shards: ShardSelector | null = null): Promise<FacetHit[]> {
    const sets = this.readable(this.setsOf(this.readRings(shards)));
    const answers = await Promise.all(sets.map((s) => s.facet({ key: req.key, filter: req.filter }, opts)));
    return facetHits(answers, req.limit);
  }

  /**
   * One query of the query, search or recommend API: nearest points to a vector or a
   * stored point, a recommendation, or points with no vector (in id or payload order,
   * scored 0 as the reference does). Example ids are looked up under the same keys.
   */
  async query(req: QueryRequest, opts: ReadOptions = DEFAULT_READ, shards: ShardSelector | null = null, others: CollectionLookup | null = null): Promise<ScoredOut[]> {
    this.strict.read({ limit: req.limit, filter: req.filter, hnswEf: req.hnswEf, exact: req.exact, oversampling: req.quantization?.oversampling }, opts.timeout);
    return this.queryChecked(req, opts, shards, others);
  }

  /**
   * A grouped query (groups.ts runs its rounds through this collection's query, past
   * strict mode, which checks the request once here as the reference does: its limit
   * is groups × group size, and the key must have an index that answers `match` when
   * unindexed filtering is refused).
   */
  async queryGroups(req: GroupsRequest, opts: ReadOptions = DEFAULT_READ, shards: ShardSelector | null = null, others: CollectionLookup | null = null): Promise<PointGroup[]> {
    const q = req.query;
    this.strict.read({ limit: q.limit * req.groupSize, filter: q.filter, hnswEf: q.hnswEf, exact: q.exact, oversampling: q.quantization?.oversampling }, opts.timeout);
    this.strict.groupBy(req.groupBy);
    this.checkWithVector(q.withVector);
    const lookup = req.withLookup;
    let source: Collection | null = null;
    if (lookup !== null) {
      if (others === null) throw new BadInputError('with_lookup: looking up another collection is not available to this caller');
      source = others(lookup.collection);
      source.checkWithVector(lookup.withVector);
    }
    const rings = this.readRings(shards);
    const reads: GroupReads = {
      query: (r, o) => this.queryChecked(r, o, shards, others),
      records: async (ids, wp, wv, o) => recordsOut(await this.lookup(ids, wp, wv, o, rings)),
      lookup: async (ids, wp, wv, o) => recordsOut(await source!.lookup(ids, wp, wv, o, source!.readRings(null))),
    };
    return runGroups(reads, req, this.scoreOrder(q), opts);
  }

  /** Which scores of `q` are better (groups.ts orders groups and hits by it): fusions and formulas larger, by-payload order none, else the vector's distance. */
  private scoreOrder(q: QueryRequest): ScoreOrder {
    const kind = q.query as Record<string, unknown>;
    // A rule over examples (discover, context, the best_score / sum_scores strategies) is larger-better whatever the distance.
    if ('fusion' in kind || 'formula' in kind || rulePlan(q.query) !== null) return 'desc';
    if ('orderBy' in kind || 'none' in kind || 'sample' in kind) return null;
    if (this.isSparse(q.using)) return 'desc';
    return higherIsBetter(this.vectorSpec(q.using).distance) ? 'desc' : 'asc';
  }

  /** A query that strict mode has let through. */
  private async queryChecked(req: QueryRequest, opts: ReadOptions, shards: ShardSelector | null, others: CollectionLookup | null): Promise<ScoredOut[]> {
    const q = req.query;
    // The common case (a plain vector) goes straight to the search, with no await of its own.
    if ('nearest' in q && 'vector' in q.nearest && q.mmr === undefined && (req.prefetch === undefined || req.prefetch.length === 0)) {
      this.checkVector(req.using, q.nearest.vector);
      return this.search(searchRequestOf(req, q.nearest.vector), opts, this.readRings(shards));
    }
    if ('nearest' in q && 'sparse' in q.nearest && q.mmr === undefined) {
      return this.search(searchRequestOf(req, NO_VECTOR, { sparse: q.nearest.sparse }), opts, this.readRings(shards));
    }
    return this.queryOther(req, opts, shards, others);
  }

  private async queryOther(req: QueryRequest, opts: ReadOptions, shards: ShardSelector | null, others: CollectionLookup | null): Promise<ScoredOut[]> {
    const q = req.query;
    // Formula, sample and MMR work on gathered candidates, which the plan of hybrid.ts runs even without prefetches.
    if ((req.prefetch !== undefined && req.prefetch.length > 0) || 'formula' in q || 'sample' in q || ('nearest' in q && q.mmr !== undefined)) return this.queryHybrid(req, opts, shards, others);
    if ('fusion' in q) throw new BadInputError('cannot apply Fusion without prefetches');
    const shaping = { filter: req.filter, withPayload: req.withPayload, withVector: req.withVector };
    if ('none' in q) {
      const page = await this.scrollPage({ offset: null, limit: req.offset + req.limit, ...shaping }, opts, shards);
      return page.points.slice(req.offset).map((p) => ({ ...p, version: 0, score: 0 }));
    }
    if ('orderBy' in q) {
      const page = await this.scrollOrderedPage({ orderBy: q.orderBy, limit: req.offset + req.limit, ...shaping }, opts, shards);
      return page.points.slice(req.offset).map((p) => ({ ...p, version: 0, score: 0 }));
    }
    const rings = this.readRings(shards);
    const lookupFrom = req.lookupFrom ?? null;
    const exclude = referencedIds(req, this.name);
    const plan = rulePlan(q);
    if (plan !== null) return this.queryRule(req, plan, opts, shards, rings, others, exclude);
    if ('discover' in q || 'context' in q) throw new Error('a rule query without a plan'); // rulePlan covers both
    if (this.isSparse(req.using)) {
      // Nearest to a stored point's sparse vector, or a recommendation over sparse vectors.
      const examples = 'nearest' in q ? [q.nearest] : [...q.recommend.positive, ...q.recommend.negative];
      const vs = await this.sparseExamples(examples, req.using, opts, rings, lookupFrom, others);
      const sparse = 'nearest' in q ? vs[0] : recommendSparseVector(vs.slice(0, q.recommend.positive.length), vs.slice(q.recommend.positive.length));
      return this.search(searchRequestOf(req, NO_VECTOR, { sparse, exclude }), opts, rings);
    }
    if ('nearest' in q) {
      const [vector] = await this.exampleVectors([q.nearest], req.using, opts, rings, lookupFrom, others);
      return this.search(searchRequestOf(req, vector, { exclude }), opts, rings);
    }
    const { positive, negative } = q.recommend;
    const vs = await this.exampleVectors([...positive, ...negative], req.using, opts, rings, lookupFrom, others);
    const multi = this.multivectorDim(req.using);
    const vector = multi === null
      ? recommendVector(vs.slice(0, positive.length), vs.slice(positive.length))
      : recommendMultivector(vs.slice(0, positive.length), vs.slice(positive.length), multi);
    return this.search(searchRequestOf(req, vector, { exclude }), opts, rings);
  }

  /**
   * A query scored by a rule over its examples (scorers.ts): the example ids become
   * vectors (from `lookup_from` when given), then one search by the rule, which every
   * replica runs on its own points. A context query without pairs scores every point 0:
   * points in id order, as a query without a vector.
   */
  private async queryRule(req: QueryRequest, plan: RulePlan, opts: ReadOptions, shards: ShardSelector | null, rings: readonly Ring[], others: CollectionLookup | null, exclude: PointKey[]): Promise<ScoredOut[]> {
    this.checkRuleVector(req.using, plan);
    if (scoresNothing(plan)) {
      const page = await this.scrollPage({ offset: null, limit: req.offset + req.limit, filter: req.filter, withPayload: req.withPayload, withVector: req.withVector }, opts, shards);
      return page.points.slice(req.offset).map((p) => ({ ...p, version: 0, score: 0 }));
    }
    if (this.isSparse(req.using)) {
      // Sparse vectors: an exact scan by the rule on every replica (examples by id read from this collection or `lookup_from`'s).
      const examples = await this.sparseExamples(plan.examples, req.using, opts, rings, req.lookupFrom ?? null, others);
      return this.search(searchRequestOf(req, NO_VECTOR, { sparseRule: { rule: plan.rule, positives: plan.positives, examples }, exclude }), opts, rings);
    }
    const vs = await this.exampleVectors(plan.examples, req.using, opts, rings, req.lookupFrom ?? null, others);
    return this.search(searchRequestOf(req, NO_VECTOR, { rule: searchRule(plan, vs), exclude }), opts, rings);
  }

  /** A rule query runs over a dense vector of one row per point, or a sparse vector (by exact scan): multivector names are refused. */
  private checkRuleVector(using: string, plan: RulePlan): void {
    if (this.isSparse(using)) return;
    this.vectorSpec(using);
    if (this.multivectorDim(using) !== null) throw new BadInputError(ruleUnsupported(plan, `the multivector ${using === '' ? '(unnamed)' : JSON.stringify(using)}`));
  }

  /**
   * A query over the results of its prefetches (hybrid.ts plans and runs it through this
   * collection's ordinary reads). Its shape, vectors and lookups are checked before any
   * replica is asked.
   */
  private async queryHybrid(req: QueryRequest, opts: ReadOptions, shards: ShardSelector | null, others: CollectionLookup | null): Promise<ScoredOut[]> {
    const { depth, count } = prefetchShape(req.prefetch ?? []);
    if (depth > MAX_PREFETCH_DEPTH) throw new BadInputError(`prefetches depth ${depth} exceeds max depth ${MAX_PREFETCH_DEPTH}`);
    if (count > MAX_PREFETCH_COUNT) throw new BadInputError(`a query holds ${count} prefetches, more than the ${MAX_PREFETCH_COUNT} Quiver allows`);
    this.checkWithVector(req.withVector);
    const check = (query: QueryKind, using: string, lookupFrom: LookupFrom | null | undefined, prefetch: QueryRequest['prefetch']) => {
      const plan = rulePlan(query);
      if (plan !== null) this.checkRuleVector(using, plan);
      if (('nearest' in query || 'recommend' in query || plan !== null) && !this.isSparse(using)) {
        this.vectorSpec(using);
        const examples = examplesOf(query);
        for (const e of examples) {
          if ('vector' in e) this.checkVector(using, e.vector);
          else if (lookupFrom) this.lookupSource(lookupFrom, using, others);
        }
      }
      for (const p of prefetch ?? []) check(p.query, p.using, p.lookupFrom, p.prefetch);
    };
    check(req.query, req.using, req.lookupFrom, req.prefetch);
    const rings = this.readRings(shards);
    this.readable(this.setsOf(rings));
    const unscored = (p: RecordOut) => ({ ...p, version: 0, score: 0 });
    const reads: HybridReads<ScoredOut> = {
      search: (s) => this.search(s, opts, rings),
      ordered: async (orderBy, filter, limit, withPayload, withVector) =>
        (await this.scrollOrdered({ orderBy, limit, filter, withPayload, withVector }, opts, shards)).points.map(unscored),
      scroll: async (filter, limit, withPayload, withVector) => (await this.scroll({ offset: null, limit, filter, withPayload, withVector }, opts, shards)).points.map(unscored),
      vectors: (examples, using, lookupFrom) => this.exampleVectors(examples, using, opts, rings, lookupFrom, others),
      isSparse: (using) => this.isSparse(using),
      multivectorDim: (using) => this.multivectorDim(using),
      sparse: (examples, using, lookupFrom) => this.sparseExamples(examples, using, opts, rings, lookupFrom, others),
      sample: async (filter, limit) => (await this.sampleIds(filter, limit, opts, shards)).map((id) => ({ id, version: 0, score: 0 })),
      distance: (using) => this.vectorSpec(using).distance,
      matching: async (filter, limit) => (await this.scrollPage({ offset: null, limit, filter, withPayload: false, withVector: false }, opts, shards)).points.map((p) => p.id),
      shape: async (page, withPayload, withVector) => {
        const found = await this.lookup(page.map((p) => normalizePointId(p.id)), withPayload, withVector, opts, rings);
        const out: ScoredOut[] = [];
        for (const p of page) {
          const r = found.get(String(p.id));
          if (!r) continue;
          const o: ScoredOut & { order_value?: number } = { id: r.id, version: r.version, score: p.score };
          if (r.payload !== undefined) o.payload = r.payload;
          if (r.vector !== undefined) o.vector = r.vector;
          if (r.shard_key !== undefined) o.shard_key = r.shard_key;
          const ov = (p as { order_value?: number }).order_value;
          if (ov !== undefined) o.order_value = ov;
          out.push(o);
        }
        return out;
      },
    };
    return runHybrid(reads, req, referencedIds(req, this.name));
  }

  /**
   * Up to `limit` ids of points matching `filter`, chosen uniformly at random without
   * repeats: the matching ids are read in pages of id order through the ordinary scroll
   * (every shard, local or remote) and a reservoir keeps the sample, so the cost grows
   * with the number of matching points, not with `limit`.
   */
  private async sampleIds(filter: Filter | null, limit: number, opts: ReadOptions, shards: ShardSelector | null): Promise<PointId[]> {
    if (limit <= 0) return [];
    const reservoir: PointId[] = [];
    let seen = 0;
    let offset: PointId | null = null;
    do {
      const page: { points: RecordOut[]; next_page_offset: PointId | null } = await this.scrollPage(
        { offset: offset === null ? null : normalizePointId(offset), limit: SAMPLE_PAGE, filter, withPayload: false, withVector: false },
        opts,
        shards,
      );
      for (const p of page.points) {
        seen++;
        if (reservoir.length < limit) reservoir.push(p.id);
        else {
          const j = Math.floor(Math.random() * seen);
          if (j < limit) reservoir[j] = p.id;
        }
      }
      offset = page.next_page_offset;
    } while (offset !== null);
    return randomPick(reservoir, reservoir.length);
  }

  /**
   * The distance matrix of a sample (`/points/search/matrix/*`): `sample` random points
   * matching the filter that have the vector `using`, and for each its `limit` nearest
   * among the others of the sample, with the scores a search reports (matrix.ts).
   */
  async searchMatrix(req: MatrixRequest, opts: ReadOptions = DEFAULT_READ, shards: ShardSelector | null = null): Promise<MatrixAnswer> {
    this.strict.read({ limit: req.sample, filter: req.filter }, opts.timeout);
    if (this.isSparse(req.using)) throw new BadInputError('The distance matrix over sparse vectors is not supported by Quiver; it works on dense vectors and multivectors');
    const spec = this.vectorSpec(req.using);
    const rings = this.readRings(shards);
    // Drawn first without a has_vector condition (points lack a vector rarely, and the
    // condition costs a check per point); drawn again with it when some did lack it.
    let drawn = await this.sampleWithVectors(req.filter, req.sample, req.using, opts, shards, rings);
    if (drawn.short) drawn = await this.sampleWithVectors(bothFilters(req.filter, { must: [{ has_vector: req.using }] }), req.sample, req.using, opts, shards, rings);
    return { ids: drawn.ids, entries: nearestInSample(spec.distance, drawn.vectors, req.limit, this.multivectorDim(req.using)) };
  }

  /** A random sample of points matching `filter` with their `using` vectors; `short` when some sampled points had none. */
  private async sampleWithVectors(
    filter: Filter | null,
    n: number,
    using: string,
    opts: ReadOptions,
    shards: ShardSelector | null,
    rings: readonly Ring[],
  ): Promise<{ ids: PointId[]; vectors: Float32Array[]; short: boolean }> {
    const ids = await this.sampleIds(filter, n, opts, shards);
    if (ids.length === 0) return { ids: [], vectors: [], short: false };
    const found = await this.lookup(ids.map((id) => normalizePointId(id)), false, [using], opts, rings);
    const kept: PointId[] = [];
    const vectors: Float32Array[] = [];
    for (const id of ids) {
      const v = vectorOf(found.get(String(id))?.vector, using);
      if (v === null) continue;
      kept.push(id);
      vectors.push(v);
    }
    return { ids: kept, vectors, short: kept.length < ids.length };
  }

  /** The collection and vector name that `lookup_from` reads example ids from, checked to fit this collection's `using`. */
  private lookupSource(lookupFrom: LookupFrom, using: string, others: CollectionLookup | null): { source: Collection; name: string } {
    if (others === null) throw new BadInputError('lookup_from: looking up another collection is not available to this caller');
    const source = others(lookupFrom.collection);
    const name = lookupFrom.vector ?? using;
    const theirs = source.vectorSpec(name);
    const ours = this.vectorSpec(using);
    if (theirs.dim !== ours.dim) throw new BadInputError(`Vector dimension error: expected dim: ${ours.dim}, got ${theirs.dim} (vector ${JSON.stringify(name)} of collection \`${lookupFrom.collection}\`)`);
    return { source, name };
  }

  /** The queries of a batch request (each with its own shard keys), run together; the answer of each in order. */
  async queryBatch(reqs: ReadonlyArray<ForKeys<QueryRequest>>, opts: ReadOptions = DEFAULT_READ, others: CollectionLookup | null = null): Promise<ScoredOut[][]> {
    this.strict.searchBatch(reqs.length);
    return Promise.all(reqs.map((q) => this.query(q.req, opts, q.shards, others)));
  }

  /**
   * The sparse vectors of examples over the sparse vector `using`: as given, or a stored
   * point's (404 when there is no such point), read from `lookup_from`'s collection and
   * vector name when given, as exampleVectors does for dense vectors.
   */
  private async sparseExamples(examples: Example[], using: string, opts: ReadOptions, rings: readonly Ring[], lookupFrom: LookupFrom | null = null, others: CollectionLookup | null = null): Promise<SparseVec[]> {
    const ids = exampleIds(examples);
    let name = using;
    let found: Map<string, PointRecord> | null = null;
    if (ids.length > 0) {
      if (lookupFrom === null) found = await this.lookup(ids, false, [using], opts, rings);
      else {
        if (others === null) throw new BadInputError('lookup_from: looking up another collection is not available to this caller');
        const source = others(lookupFrom.collection);
        name = lookupFrom.vector ?? using;
        found = await source.lookupSparseVectors(ids, name, opts, lookupFrom.shards);
      }
    }
    return examples.map((e) => {
      if ('sparse' in e) return e.sparse;
      if ('vector' in e) throw new BadInputError(`Conversion between sparse and regular vectors failed: ${JSON.stringify(using)} is a sparse vector`);
      const text = idText(e.id);
      const r = found?.get(text);
      if (!r) throw new NotFoundError(`No point with id ${text} found`);
      const v = r.vector === undefined || Array.isArray(r.vector) ? undefined : r.vector[name];
      if (v === undefined || Array.isArray(v)) throw new BadInputError(`Point ${text} has no vector ${JSON.stringify(name)}`);
      return { indices: Uint32Array.from(v.indices), values: Float32Array.from(v.values) };
    });
  }

  /**
   * The vectors of examples: a vector as it is (checked against `using`), a point id as
   * that point's `using` vector (404 when there is no such point). Ids are read in one
   * read per shard; errors are reported in the examples' order.
   */
  private async exampleVectors(examples: Example[], using: string, opts: ReadOptions, rings: readonly Ring[], lookupFrom: LookupFrom | null = null, others: CollectionLookup | null = null): Promise<Float32Array[]> {
    this.vectorSpec(using);
    const ids = exampleIds(examples);
    let name = using;
    let found: Map<string, PointRecord> | null = null;
    if (ids.length > 0) {
      if (lookupFrom === null) found = await this.lookup(ids, false, [using], opts, rings);
      else {
        const src = this.lookupSource(lookupFrom, using, others);
        name = src.name;
        found = await src.source.lookupVectors(ids, name, opts, lookupFrom.shards);
      }
    }
    return examples.map((e) => {
      if ('vector' in e) {
        this.checkVector(using, e.vector);
        return e.vector;
      }
      if ('sparse' in e) throw new BadInputError(`Conversion between sparse and regular vectors failed: ${JSON.stringify(using)} is a dense vector`);
      const text = idText(e.id);
      const r = found?.get(text);
      if (!r) throw new NotFoundError(`No point with id ${text} found`);
      const v = r.vector === undefined ? undefined : Array.isArray(r.vector) ? r.vector : r.vector[name];
      if (!v || !Array.isArray(v)) throw new BadInputError(`Point ${text} has no vector ${name === '' ? '(unnamed)' : JSON.stringify(name)}`);
      // A multivector comes back as its rows: the query is the same list.
      if (v.length > 0 && Array.isArray(v[0])) return markMultivector(Float32Array.from((v as number[][]).flat()), v.length);
      return Float32Array.from(v as number[]);
    });
  }

  /** The `name` sparse vectors of points `ids` of this collection (for another collection's `lookup_from` over a sparse vector), by id text. */
  async lookupSparseVectors(ids: PointKey[], name: string, opts: ReadOptions, shards: ShardSelector | null): Promise<Map<string, PointRecord>> {
    this.checkSparseName(name);
    return this.lookup(distinct(ids), false, [name], opts, this.readRings(shards));
  }

  /** The `name` vectors of points `ids` of this collection (for another collection's `lookup_from`), by id text. */
  async lookupVectors(ids: PointKey[], name: string, opts: ReadOptions, shards: ShardSelector | null): Promise<Map<string, PointRecord>> {
    this.vectorSpec(name);
    return this.lookup(distinct(ids), false, [name], opts, this.readRings(shards));
  }

  /**
   * Nearest points to `req.vector` in the rings' shards. Validation throws before any
   * replica is asked. One shard answers the page itself; several each return their best
   * `offset + limit`, and the page is cut from their merge.
   */
  private search(req: SearchRequest, opts: ReadOptions, rings: readonly Ring[]): Promise<ScoredOut[]> {
    const spec = req.sparse !== undefined || req.sparseRule !== undefined ? null : this.vectorSpec(req.using);
    if (req.sparse !== undefined || req.sparseRule !== undefined) {
      this.checkSparseName(req.using);
    } else if (req.rule !== undefined) {
      const n = req.rule.examples.length;
      if (n === 0 || n % spec!.dim !== 0) throw new BadInputError(`Vector dimension error: the examples hold ${n} values, not a multiple of ${spec!.dim}`);
      if (!allFinite(req.rule.examples)) throw new BadInputError('an example vector has a non-finite value');
    } else {
      this.checkVector(req.using, req.vector);
      if (!allFinite(req.vector)) throw new BadInputError('query vector has a non-finite value');
    }
    if (req.limit + req.offset === 0 && (req.exclude === undefined || req.exclude.length === 0)) return Promise.resolve([]);
    this.checkWithVector(req.withVector);
    const sets = this.readable(this.setsOf(rings));
    // A rule's score is larger-better whatever the distance.
    const higher = spec === null || req.rule !== undefined || higherIsBetter(spec.distance);
    if (sets.length === 1) {
      const one = sets[0];
      return this.keyOfShard.has(one.shardId) ? one.search(req, opts, higher).then((rs) => this.keyed(one, rs)) : one.search(req, opts, higher);
    }
    return this.searchMerged(sets, req, higher, opts);
  }

  private async searchMerged(sets: readonly ReplicaSet[], req: SearchRequest, higher: boolean, opts: ReadOptions): Promise<ScoredOut[]> {
    const each = searchRequestOf(req, req.vector, req);
    each.offset = 0;
    each.limit = req.offset + req.limit;
    const parts = await Promise.all(sets.map(async (s) => this.keyed(s, await s.search(each, opts, higher))));
    // Ties in id order, as each shard orders them.
    const merged = parts.flat().sort(higher ? (a, b) => b.score - a.score || compareIds(a.id, b.id) : (a, b) => a.score - b.score || compareIds(a.id, b.id));
    // An id under several keys is listed once, at its best score (as the reference merges).
    const unique = this.custom ? firstOfEach(merged, (r) => String(r.id)) : merged;
    return unique.slice(req.offset, req.offset + req.limit);
  }

  // -- state --------------------------------------------------------------------------------

  pointsCount(): number {
    let n = 0;
    for (const s of this.present()) n += s.pointCount;
    return n;
  }

  indexedVectorsCount(): number {
    let n = 0;
    for (const s of this.present()) for (const v of s.vectors.values()) n += v.indexedCount();
    return n;
  }

  segmentsCount(): number {
    let n = 0;
    for (const s of this.present()) {
      let most = 0;
      for (const v of s.vectors.values()) most = Math.max(most, v.segmentCount());
      n += most;
    }
    return n;
  }

  /** The optimizer jobs of this peer's replicas (every vector of every shard): running, due next, untouched indexes, finished (newest first). */
  optimizations(): { running: OptimizationInfo[]; queued: PendingInfo[]; idle: SegmentInfo[]; completed: OptimizationInfo[] } {
    const out = { running: [] as OptimizationInfo[], queued: [] as PendingInfo[], idle: [] as SegmentInfo[], completed: [] as OptimizationInfo[] };
    for (const s of this.present()) {
      for (const v of s.vectors.values()) {
        const o = v.optimizations();
        if (o.running) out.running.push(o.running);
        if (o.queued) out.queued.push(o.queued);
        out.idle.push(...o.idle);
        out.completed.push(...o.completed);
      }
    }
    out.completed.sort((a, b) => String(b.progress.finished_at).localeCompare(String(a.progress.finished_at)));
    return out;
  }

  status(): 'green' | 'yellow' {
    return this.present().some((s) => s.optimizing()) ? 'yellow' : 'green';
  }

  payloadSchemaInfo(): Record<string, { data_type: string; params?: object; points: number }> {
    const out: Record<string, { data_type: string; params?: object; points: number }> = {};
    for (const s of this.present()) {
      for (const [field, info] of Object.entries(s.payloadIndex.schemaInfo())) {
        const prev = out[field];
        out[field] = prev ? { ...prev, points: prev.points + info.points } : { ...info };
      }
    }
    return out;
  }

  async waitOptimized(): Promise<void> {
    await Promise.all(this.present().map((s) => s.waitOptimized()));
  }

  async checkpoint(): Promise<void> {
    await Promise.all(this.present().map((s) => s.checkpoint()));
  }

  async close(): Promise<void> {
    await Promise.all([...this.present().map((s) => s.close()), ...this.cleanups]);
  }

  async drop(): Promise<void> {
    await Promise.all([...this.present().map((s) => s.drop()), ...this.cleanups]);
  }
}

/** Whether a selector is a list of keys (rather than a target with a fallback). */
function isKeyList(s: ShardSelector): s is readonly ShardKey[] {
  return Array.isArray(s);
}

function noSuchKeys(target: ShardKey, fallback: ShardKey): NotFoundError {
  return new NotFoundError(`Neither target shard key ${showKey(target)} nor fallback shard key ${showKey(fallback)} exist`);
}

function noActiveKey(target: ShardKey, fallback: ShardKey): ShardUnavailableError {
  return new ShardUnavailableError(`Neither target shard key ${showKey(target)} nor fallback shard key ${showKey(fallback)} have active replicas`);
}


/** A sorted list without the items equal to the one before them. */
function dedupeSorted<T>(xs: T[], same: (a: T, b: T) => boolean): T[] {
  return xs.filter((x, i) => i === 0 || !same(xs[i - 1], x));
}

/** `ids` without repeats, in first-seen order. */
function distinct(ids: PointKey[]): PointKey[] {
  if (ids.length < 2) return ids;
  const seen = new Set<string>();
  const out: PointKey[] = [];
  for (const id of ids) {
    if (seen.has(id.key)) continue;
    seen.add(id.key);
    out.push(id);
  }
  return out;
}

/** Whether every value is finite. A loop: `every` with a callback boxes each float of a Float32Array (a heap number per value, per query). */
function allFinite(v: Float32Array): boolean {
  for (let i = 0; i < v.length; i++) if (!Number.isFinite(v[i])) return false;
  return true;
}
