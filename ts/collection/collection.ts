/**
 * A collection: its configuration and its shards, each a ReplicaSet (replica-set.ts)
 * of replicas reached through the Replica interface (replica.ts): today this peer's
 * LocalReplica; remote replicas arrive with the distributed issue's next part.
 *
 * Owns: routing points to shards (a hash of the point id over shard_number),
 * splitting writes per shard, fanning reads out and merging the shaped records they
 * return (top-k by score, scroll order by id, counts summed), resolving queries
 * (example ids to vectors, recommendations, batches), and the checks that make a
 * rejected write change nothing (every point validated, explicit ids checked to
 * exist) before any shard logs anything. Must never: parse HTTP bodies (ts/api does),
 * know the storage root layout (ts/storage does), or reach into a replica's shard for
 * point reads and writes (management of this peer's own data — info, configuration,
 * indexes, checkpoints, snapshots — uses its LocalShard directly).
 */

import * as path from 'node:path';
import type { Logger } from 'pino';

import type { Engine } from '../../bindings/engine';
import { BadInputError, NotFoundError, snapshotLoadError } from '../common/errors';
import { type Filter } from '../shard/filter';
import { crc32c } from '../common/crc32c';
import { type PointKey } from '../shard/id-tracker';
import { swapDirectory } from '../common/files';
import { LocalShard } from '../shard/local-shard';
import { sameFieldSchema, type FieldSchema } from '../shard/field-schema';
import type { Payload, WithPayload } from '../shard/payload-store';
import { higherIsBetter } from '../shard/vector-store';
import type { VectorSpec } from '../shard/vector-store';
import { type CollectionConfig, vectorSpecs } from './config';
import { LocalReplica } from './local-replica';
import { exampleIds, recommendVector, type Example, type QueryRequest } from './query';
import {
  compareIds,
  DEFAULT_READ,
  type OrderedScrollRequest,
  type PointId,
  type PointRecord,
  type ReadOptions,
  type ScoredRecord,
  type ScrollRequest,
  type SearchRequest,
  type UpdateOptions,
  type WithVector,
} from './replica';
import { isSelected, type ReplicaOperation } from './replica-operation';
import { ReplicaSet, type ReplicaSetCluster } from './replica-set';
import type { ClusterLink, ShardTarget } from './cluster-link';
import type { ReplicaState } from './replica-state';

export type { OrderBy, ReadOptions, ScrollRequest, SearchRequest, UpdateOptions, WithVector } from './replica';
export { keyToJson } from './replica';
export type { ReplicaOperation, Selector } from './replica-operation';
export type { ReplicaState } from './replica-state';

export interface UpdateResult {
  operation_id: number;
  status: 'acknowledged' | 'completed';
}

/** A point as the API returns it; `payload` and `vector` are left out when not asked for, as the reference does. */
export interface RecordOut {
  id: number | string;
  payload?: Payload;
  vector?: number[] | Record<string, number[]>;
}

/** A scored point as the API returns it (the records replicas return are in this shape already). */
export type ScoredOut = ScoredRecord;

/** The local replica's peer id on a single node (no placement: the id is never compared). */
const STANDALONE_PEER = '';

/** Where a collection's shards live in a cluster (absent on a single node: every shard is local). */
export interface ClusterPlacement {
  /** Chosen at creation through consensus: tells a re-created collection of the same name from the old one. */
  uuid: string;
  /** This peer's id. */
  peer: string;
  /** Per shard: peer id → replica state. */
  shards: Array<{ id: number; replicas: Record<string, ReplicaState> }>;
  /** Transfers in progress: `from` streams shard `shard` to `to` (absent: none). */
  transfers?: Array<{ shard: number; from: string; to: string }>;
}

export interface CollectionMeta {
  config: CollectionConfig;
  /** Payload indexes by field. */
  payload_schema: Record<string, FieldSchema>;
  cluster?: ClusterPlacement;
}

/** A record as the API shows it: the version stays with the collection. */
function recordOut(r: PointRecord): RecordOut {
  const out: RecordOut = { id: r.id };
  if (r.payload !== undefined) out.payload = r.payload;
  if (r.vector !== undefined) out.vector = r.vector;
  return out;
}

/** The text of a point id in messages. */
function idText(k: PointKey): string {
  return k.kind === 'num' ? k.value.toString() : k.value;
}

export class Collection {
  private readonly shards: ReplicaSet[] = [];
  /** Set while the collection is being replaced (snapshot recovery): requests get 503 with this reason. */
  unavailable: string | null = null;
  private readonly specs: Map<string, VectorSpec>;

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
  }

  static async open(name: string, dir: string, meta: CollectionMeta, engine: Engine, logger: Logger, nodePeerId = 0n, link: ClusterLink | null = null): Promise<Collection> {
    const c = new Collection(name, dir, meta, engine, logger.child({ collection: name }), nodePeerId, link);
    const placement = meta.cluster;
    const isLocal = (id: number) => placement === undefined || Object.prototype.hasOwnProperty.call(placement.shards[id]?.replicas ?? {}, placement.peer);
    const opened = await Promise.allSettled(
      Array.from({ length: meta.config.params.shard_number }, (_, id) => (isLocal(id) ? c.openShard(id) : Promise.resolve(null))),
    );
    const failed = opened.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) {
      // Close what did open, so a caller can move the directory back (snapshot recovery).
      await Promise.all(opened.map((r) => (r.status === 'fulfilled' ? r.value?.drop() : undefined)));
      throw failed.reason;
    }
    const peer = c.localPeer;
    opened.forEach((r, id) => {
      const shard = (r as PromiseFulfilledResult<LocalShard | null>).value;
      const set = new ReplicaSet(id, name, peer, shard === null ? [] : [new LocalReplica(peer, shard)], placement ? { ...placement.shards[id].replicas } : null, c.replicaSetCluster());
      c.shards.push(set);
      if (placement) set.setStates(placement.shards[id].replicas, peer, c.incomingOf(placement, id));
    });
    if (placement) c.driveTransfers(placement, []);
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
  private driveTransfers(placement: ClusterPlacement, before: ReadonlyArray<{ shard: number; from: string; to: string }>): void {
    if (this.link === null) return;
    const now = placement.transfers ?? [];
    const key = (t: { shard: number; from: string; to: string }) => `${t.shard}/${t.from}/${t.to}`;
    const current = new Set(now.map(key));
    for (const t of before) {
      if (t.from === placement.peer && !current.has(key(t))) this.link.transferGone(this.shardTarget(t.shard), t.to);
    }
    for (const t of now) {
      if (t.from !== placement.peer) continue;
      const source = this.shards[t.shard]?.localReplica;
      if (source) this.link.transferOut(this.shardTarget(t.shard), t.to, source);
    }
  }

  /** How peers name shard `id` of this collection. */
  shardTarget(id: number): ShardTarget {
    return { collection: this.name, uuid: this.meta.cluster?.uuid ?? '', shard: id };
  }

  /** The replica set of shard `id`, or a 404. */
  replicaSet(id: number): ReplicaSet {
    const r = this.shards[id];
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
    c.shards.push(...sets(name, c.localPeer));
    return c;
  }

  private get localPeer(): string {
    return this.meta.cluster?.peer ?? STANDALONE_PEER;
  }

  private openShard(id: number, dir = path.join(this.dir, String(id))): Promise<LocalShard> {
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
      walSegmentBytes: walBytes,
      walRetainBytes: walBytes,
      peerId: peer !== undefined && /^[0-9]{1,20}$/.test(peer) && BigInt(peer) < 1n << 64n ? BigInt(peer) : this.nodePeerId,
      flushIntervalMs: config.optimizer_config.flush_interval_sec * 1000,
      payloadIndexes: payload_schema,
      logger: this.logger.child({ shard: id }),
    });
  }

  /** Ids of the shards this peer holds a replica of (every shard on a single node): what its snapshots contain. */
  localShardIds(): number[] {
    return this.shards.filter((r) => r.local !== null).map((r) => r.shardId);
  }

  /** The local replica of shard `id`, or a 404 naming it (501 when it lives on other peers only). */
  localShard(id: number): LocalShard {
    const r = this.shards[id];
    if (!r) throw new NotFoundError(`Shard ${id} of ${this.name} does not exist`);
    return r.localShard(false);
  }

  /** The replica sets, for cluster views. */
  replicaSets(): readonly ReplicaSet[] {
    return this.shards;
  }

  /**
   * Opens or drops local replicas and records replica states to match a new placement
   * (applied from consensus). Data of a replica this peer no longer holds is deleted.
   */
  async applyPlacement(placement: ClusterPlacement): Promise<void> {
    const before = this.meta.cluster?.transfers ?? [];
    this.meta.cluster = placement;
    for (const r of this.shards) {
      const replicas = placement.shards[r.shardId]?.replicas ?? {};
      const was = r.replicas?.[placement.peer];
      const wantLocal = Object.prototype.hasOwnProperty.call(replicas, placement.peer);
      const receiving = (placement.transfers ?? []).some((t) => t.shard === r.shardId && t.to === placement.peer);
      if (wantLocal && r.local !== null && receiving && was !== 'Partial') {
        // A transfer to this peer starts: its replica starts empty, before any write or
        // batch of the transfer reaches it (the source waits until this peer has applied it).
        await this.dropLocal(r);
        this.logger.info({ shard: r.shardId }, 'replica emptied: a transfer to this peer starts');
      }
      if (wantLocal && r.local === null) {
        r.setLocal(new LocalReplica(placement.peer, await this.openShard(r.shardId)));
      } else if (!wantLocal && r.local !== null) {
        await this.dropLocal(r);
      }
      r.setStates(replicas, placement.peer, this.incomingOf(placement, r.shardId));
    }
    this.driveTransfers(placement, before);
  }

  /** Closes this peer's replica of `r`'s shard and deletes its data. */
  private async dropLocal(r: ReplicaSet): Promise<void> {
    const local = r.local;
    if (local === null) return;
    r.setLocal(null);
    await local.drop();
    const fs = await import('node:fs/promises');
    await fs.rm(path.join(this.dir, String(r.shardId)), { recursive: true, force: true });
  }

  /**
   * Replaces shard `id`'s data with the shard directory `source` (an unpacked shard
   * snapshot on the same file system): closes the shard, swaps the directories, opens
   * the new data. If the new data does not open, the old directory is put back and
   * reopened, and the error is thrown: the shard is then exactly as it was.
   */
  async replaceShard(id: number, source: string): Promise<void> {
    const r = this.shards[id];
    if (!r) throw new NotFoundError(`Shard ${id} of ${this.name} does not exist`);
    await r.localShard(true).close();
    const reopen = async () => r.setLocal(new LocalReplica(this.localPeer, await this.openShard(id)));
    try {
      await swapDirectory(this.dir, String(id), source, true, reopen);
    } catch (err) {
      await reopen();
      throw snapshotLoadError(err);
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
  updateConfig(next: CollectionConfig): void {
    this.meta.config = next;
    for (const spec of vectorSpecs(next)) {
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
    for (const s of this.present()) {
      s.setFlushInterval(next.optimizer_config.flush_interval_sec * 1000);
      s.kick();
    }
  }

  /** The local replicas this peer holds (collection info, config changes, checkpoints, close). */
  private present(): LocalShard[] {
    const out: LocalShard[] = [];
    for (const r of this.shards) {
      const local = r.local;
      if (local !== null) out.push(local);
    }
    return out;
  }

  /** The replica set of the shard a point id hashes to. */
  private setOf(key: PointKey): ReplicaSet {
    const n = this.shards.length;
    return n === 1 ? this.shards[0] : this.shards[crc32c(Buffer.from(key.key, 'utf8')) % n];
  }

  /** Items grouped by the shard of their id, in the order each shard first appears. */
  private byShard<T>(items: readonly T[], idOf: (t: T) => PointKey): Map<ReplicaSet, T[]> {
    const groups = new Map<ReplicaSet, T[]>();
    for (const item of items) {
      const s = this.setOf(idOf(item));
      let l = groups.get(s);
      if (!l) groups.set(s, (l = []));
      l.push(item);
    }
    return groups;
  }

  vectorSpec(name: string): VectorSpec {
    const s = this.specs.get(name);
    if (!s) {
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
    if (v.length !== spec.dim) throw new BadInputError(`Vector dimension error: expected dim: ${spec.dim}, got ${v.length}`);
  }

  // -- writes -----------------------------------------------------------------------------

  /**
   * Applies one point operation: validates it, routes it to its shards (each gets the
   * points that hash to it, or the whole selector when it is a filter), checks that every
   * replica it needs can be reached and that explicit ids exist, and only then sends it.
   * With no points, the first shard still logs an empty operation, so every write has an
   * operation id.
   */
  async update(op: ReplicaOperation, opts: UpdateOptions): Promise<UpdateResult> {
    const mustExist = this.check(op);
    const plan = this.route(op);
    const targets = plan.map(([set]) => set.writers());
    if (mustExist !== null) await this.requireExisting(mustExist);
    const ids = await Promise.all(plan.map(([set, shardOp], i) => set.update(shardOp, opts, targets[i])));
    let max = 0;
    for (const id of ids) if (id > max) max = id;
    return { operation_id: max, status: opts.wait ? 'completed' : 'acknowledged' };
  }

  /**
   * The operations of one batch request, in order, each with its own result. Every
   * vector of the batch is checked before the first operation runs.
   */
  async updateBatch(ops: ReplicaOperation[], opts: UpdateOptions): Promise<UpdateResult[]> {
    for (const op of ops) if (op.kind === 'upsert' || op.kind === 'update_vectors') this.checkVectors(op.points);
    const results: UpdateResult[] = [];
    for (const op of ops) results.push(await this.update(op, opts));
    return results;
  }

  private checkVectors(points: ReadonlyArray<{ vectors: Map<string, Float32Array> }>): void {
    for (const p of points) for (const [name, v] of p.vectors) this.checkVector(name, v);
  }

  /** Validates `op` against the configuration; returns the explicit ids that must exist. */
  private check(op: ReplicaOperation): PointKey[] | null {
    switch (op.kind) {
      case 'upsert':
        this.checkVectors(op.points);
        return null;
      case 'update_vectors':
        for (const p of op.points) {
          if (p.vectors.size === 0) throw new BadInputError('each point of a vector update needs at least one vector');
          for (const [name, v] of p.vectors) this.checkVector(name, v);
        }
        return op.points.map((p) => p.id);
      case 'delete':
        return null;
      case 'delete_vectors':
        for (const n of op.names) this.vectorSpec(n);
        return op.select.ids;
      default:
        return op.select.ids;
    }
  }

  /** `op` split per shard: [replica set, that shard's operation], in the order shards first appear. */
  private route(op: ReplicaOperation): Array<[ReplicaSet, ReplicaOperation]> {
    if (!isSelected(op)) {
      const groups = this.byShard(op.points as Array<{ id: PointKey }>, (p) => p.id);
      if (groups.size === 0) return [[this.shards[0], op]];
      return [...groups].map(([set, points]) => [set, { ...op, points } as ReplicaOperation]);
    }
    const { ids, filter } = op.select;
    // A filter alone: every shard resolves it under its own lock.
    if (ids === null) return this.shards.map((set) => [set, op]);
    const groups = this.byShard(ids, (id) => id);
    if (groups.size === 0) return [[this.shards[0], op]];
    return [...groups].map(([set, group]) => [set, { ...op, select: { ids: group, filter } }]);
  }

  /** Throws 404 for the first explicit id that no shard holds. */
  private async requireExisting(ids: PointKey[]): Promise<void> {
    const found = await this.lookup(ids, false, false, DEFAULT_READ);
    for (const id of ids) if (!found.has(idText(id))) throw new NotFoundError(`No point with id ${idText(id)} found`);
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
    if (Array.isArray(withVector)) for (const n of withVector) this.vectorSpec(n);
  }

  /**
   * Checks that every replica set can serve a read before any is asked (a read that
   * cannot be served fails as a whole, with nothing left running).
   */
  private readable(sets: readonly ReplicaSet[]): readonly ReplicaSet[] {
    for (const s of sets) s.readers();
    return sets;
  }

  /** Records of `ids` (distinct), each read from its shard, by id text; points that do not exist are absent. */
  private async lookup(ids: PointKey[], withPayload: WithPayload, withVector: WithVector, opts: ReadOptions): Promise<Map<string, PointRecord>> {
    const groups = this.byShard(ids, (id) => id);
    this.readable([...groups.keys()]);
    const parts = await Promise.all([...groups].map(([set, group]) => set.retrieve({ ids: distinct(group), withPayload, withVector }, opts)));
    const out = new Map<string, PointRecord>();
    for (const part of parts) for (const r of part) out.set(String(r.id), r);
    return out;
  }

  async retrieve(ids: PointKey[], withPayload: WithPayload, withVector: WithVector, opts: ReadOptions = DEFAULT_READ): Promise<RecordOut[]> {
    this.checkWithVector(withVector);
    const wanted = distinct(ids);
    if (wanted.length === 0) return [];
    if (this.shards.length === 1) return (await this.shards[0].retrieve({ ids: wanted, withPayload, withVector }, opts)).map(recordOut);
    const found = await this.lookup(wanted, withPayload, withVector, opts);
    const out: RecordOut[] = [];
    for (const id of wanted) {
      const r = found.get(idText(id));
      if (r) out.push(recordOut(r));
    }
    return out;
  }

  async scroll(req: ScrollRequest, opts: ReadOptions = DEFAULT_READ): Promise<{ points: RecordOut[]; next_page_offset: PointId | null }> {
    this.checkWithVector(req.withVector);
    const sets = this.readable(this.shards);
    if (sets.length === 1) {
      const page = await sets[0].scroll(req, opts);
      return { points: page.points.map(recordOut), next_page_offset: page.next };
    }
    // Each shard returns its first `limit` points and the id after them: the page is the
    // first `limit` of all, the next offset the smallest id left over.
    const parts = await Promise.all(sets.map((s) => s.scroll(req, opts)));
    const all = parts.flatMap((p) => p.points).sort((a, b) => compareIds(a.id, b.id));
    let next: PointId | null = all.length > req.limit ? all[req.limit].id : null;
    for (const p of parts) if (p.next !== null && (next === null || compareIds(p.next, next) < 0)) next = p.next;
    return { points: all.slice(0, req.limit).map(recordOut), next_page_offset: next };
  }

  /** Scroll by payload value (`order_by`); there is no next page offset (use start_from). */
  async scrollOrdered(req: OrderedScrollRequest, opts: ReadOptions = DEFAULT_READ): Promise<{ points: Array<RecordOut & { order_value: number }>; next_page_offset: null }> {
    this.checkWithVector(req.withVector);
    const sets = this.readable(this.shards);
    const parts = await Promise.all(sets.map((s) => s.scrollOrdered(req, opts)));
    const all = parts.flat();
    if (parts.length > 1) all.sort(req.orderBy.direction === 'desc' ? (a, b) => b.orderValue - a.orderValue : (a, b) => a.orderValue - b.orderValue);
    const points = all.slice(0, req.limit).map((r) => ({ ...recordOut(r), order_value: r.orderValue }));
    return { points, next_page_offset: null };
  }

  /** Whether any point matches `filter` (stops at the first). */
  async anyMatch(filter: Filter | null, opts: ReadOptions = DEFAULT_READ): Promise<boolean> {
    for (const s of this.readable(this.shards)) if (await s.anyMatch(filter, opts)) return true;
    return false;
  }

  async count(filter: Filter | null, opts: ReadOptions = DEFAULT_READ): Promise<number> {
    const sets = this.readable(this.shards);
    if (sets.length === 1) return sets[0].count(filter, opts);
    const ns = await Promise.all(sets.map((s) => s.count(filter, opts)));
    return ns.reduce((a, b) => a + b, 0);
  }

  /**
   * One query of the query, search or recommend API: nearest points to a vector or a
   * stored point, a recommendation, or points with no vector (in id or payload order,
   * scored 0 as the reference does).
   */
  async query(req: QueryRequest, opts: ReadOptions = DEFAULT_READ): Promise<ScoredOut[]> {
    const q = req.query;
    // The common case (a plain vector) goes straight to the search, with no await of its own.
    if ('nearest' in q && 'vector' in q.nearest) {
      this.checkVector(req.using, q.nearest.vector);
      return this.search({ ...req, vector: q.nearest.vector }, opts);
    }
    return this.queryOther(req, opts);
  }

  private async queryOther(req: QueryRequest, opts: ReadOptions): Promise<ScoredOut[]> {
    const q = req.query;
    const shaping = { filter: req.filter, withPayload: req.withPayload, withVector: req.withVector };
    if ('none' in q) {
      const page = await this.scroll({ offset: null, limit: req.offset + req.limit, ...shaping }, opts);
      return page.points.slice(req.offset).map((p) => ({ ...p, version: 0, score: 0 }));
    }
    if ('orderBy' in q) {
      const page = await this.scrollOrdered({ orderBy: q.orderBy, limit: req.offset + req.limit, ...shaping }, opts);
      return page.points.slice(req.offset).map((p) => ({ ...p, version: 0, score: 0 }));
    }
    if ('nearest' in q) {
      const [vector] = await this.exampleVectors([q.nearest], req.using, opts);
      return this.search({ ...req, vector, exclude: exampleIds([q.nearest]) }, opts);
    }
    const { positive, negative } = q.recommend;
    const vs = await this.exampleVectors([...positive, ...negative], req.using, opts);
    const vector = recommendVector(vs.slice(0, positive.length), vs.slice(positive.length));
    return this.search({ ...req, vector, exclude: [...exampleIds(positive), ...exampleIds(negative)] }, opts);
  }

  /** The queries of a batch request, run together; the answer of each in order. */
  queryBatch(reqs: QueryRequest[], opts: ReadOptions = DEFAULT_READ): Promise<ScoredOut[][]> {
    return Promise.all(reqs.map((q) => this.query(q, opts)));
  }

  /**
   * The vectors of examples: a vector as it is (checked against `using`), a point id as
   * that point's `using` vector (404 when there is no such point). Ids are read in one
   * read per shard; errors are reported in the examples' order.
   */
  private async exampleVectors(examples: Example[], using: string, opts: ReadOptions): Promise<Float32Array[]> {
    this.vectorSpec(using);
    const ids = exampleIds(examples);
    const found = ids.length === 0 ? null : await this.lookup(ids, false, [using], opts);
    return examples.map((e) => {
      if ('vector' in e) {
        this.checkVector(using, e.vector);
        return e.vector;
      }
      const text = idText(e.id);
      const r = found?.get(text);
      if (!r) throw new NotFoundError(`No point with id ${text} found`);
      const v = r.vector === undefined ? undefined : Array.isArray(r.vector) ? r.vector : r.vector[using];
      if (!v) throw new BadInputError(`Point ${text} has no vector ${using === '' ? '(unnamed)' : JSON.stringify(using)}`);
      return Float32Array.from(v);
    });
  }

  /**
   * Nearest points to `req.vector`. Validation throws before any replica is asked. One
   * shard answers the page itself; several each return their best `offset + limit`, and
   * the page is cut from their merge.
   */
  private search(req: SearchRequest, opts: ReadOptions): Promise<ScoredOut[]> {
    const spec = this.vectorSpec(req.using);
    this.checkVector(req.using, req.vector);
    if (!req.vector.every((x) => Number.isFinite(x))) throw new BadInputError('query vector has a non-finite value');
    if (req.limit + req.offset === 0 && (req.exclude === undefined || req.exclude.length === 0)) return Promise.resolve([]);
    this.checkWithVector(req.withVector);
    const sets = this.readable(this.shards);
    const higher = higherIsBetter(spec.distance);
    if (sets.length === 1) return sets[0].search(req, opts, higher);
    return this.searchMerged(sets, req, higher, opts);
  }

  private async searchMerged(sets: readonly ReplicaSet[], req: SearchRequest, higher: boolean, opts: ReadOptions): Promise<ScoredOut[]> {
    const each = { ...req, offset: 0, limit: req.offset + req.limit };
    const parts = await Promise.all(sets.map((s) => s.search(each, opts, higher)));
    const merged = parts.flat().sort(higher ? (a, b) => b.score - a.score : (a, b) => a.score - b.score);
    return merged.slice(req.offset, req.offset + req.limit);
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
    await Promise.all(this.present().map((s) => s.close()));
  }

  async drop(): Promise<void> {
    await Promise.all(this.present().map((s) => s.drop()));
  }
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
