/**
 * A collection: its configuration and its shards, each a ReplicaSet (today one local
 * replica; the distributed issues add remote ones behind the same interface).
 *
 * Owns: routing points to shards (a hash of the point id over shard_number),
 * splitting writes per shard, fanning reads out and merging them (top-k by score,
 * scroll order), and the checks that make a rejected write change nothing (every
 * point validated, explicit ids checked to exist) before any shard logs anything.
 * Must never: parse HTTP bodies (ts/api does) or know the storage root layout
 * (ts/storage does).
 */

import * as path from 'node:path';
import type { Logger } from 'pino';

import type { Engine } from '../../bindings/engine';
import { BadInputError, BadRequestError, NotFoundError, NotImplementedError, snapshotLoadError } from '../api/errors';
import { type Filter } from '../shard/filter';
import { compareKeys, crc32c, type PointKey } from '../shard/id-tracker';
import { swapDirectory } from '../shard/files';
import { MAX_ENGINE_COUNT } from '../shard/limits';
import { LocalShard, type StoredPoint } from '../shard/local-shard';
import type { NamedVectors, PointWrite, ShardOperation } from '../shard/operations';
import { OrderByError, sameFieldSchema, type FieldSchema } from '../shard/payload-index';
import { select, type Payload, type WithPayload } from '../shard/payload-store';
import { higherIsBetter, type Hit } from '../shard/vector-store';
import { type CollectionConfig, type VectorSpec, vectorSpecs } from './config';

export type WithVector = boolean | string[];

export interface UpdateResult {
  operation_id: number;
  status: 'acknowledged' | 'completed';
}

/** Points chosen by explicit ids or by a filter (ids may carry a filter too). */
export interface Selector {
  ids: PointKey[] | null;
  filter: Filter | null;
}

/** A point as the API returns it; `payload` and `vector` are left out when not asked for, as the reference does. */
export interface RecordOut {
  id: number | string;
  payload?: Payload;
  vector?: number[] | Record<string, number[]>;
}

export interface ScoredOut extends RecordOut {
  version: number;
  score: number;
}

export interface SearchRequest {
  using: string;
  vector: Float32Array;
  filter: Filter | null;
  limit: number;
  offset: number;
  scoreThreshold: number | null;
  hnswEf?: number;
  exact?: boolean;
  quantization?: { ignore?: boolean; rescore?: boolean; oversampling?: number };
  withPayload: WithPayload;
  withVector: WithVector;
  /** Points never returned (the examples of a recommendation, the point of a query by id). */
  exclude?: PointKey[];
}

export interface ScrollRequest {
  offset: PointKey | null;
  limit: number;
  filter: Filter | null;
  withPayload: WithPayload;
  withVector: WithVector;
}

export interface OrderBy {
  key: string;
  direction: 'asc' | 'desc';
  start_from: number | string | null;
}

/** Replica states (SPEC 3.1). */
export type ReplicaState = 'Active' | 'Dead' | 'Partial' | 'Initializing' | 'Listener';

/** Where a collection's shards live in a cluster (absent on a single node: every shard is local). */
export interface ClusterPlacement {
  /** Chosen at creation through consensus: tells a re-created collection of the same name from the old one. */
  uuid: string;
  /** This peer's id. */
  peer: string;
  /** Per shard: peer id → replica state. */
  shards: Array<{ id: number; replicas: Record<string, ReplicaState> }>;
}

export interface CollectionMeta {
  config: CollectionConfig;
  /** Payload indexes by field. */
  payload_schema: Record<string, FieldSchema>;
  cluster?: ClusterPlacement;
}

/**
 * One replica set per shard: the local replica when this peer holds one, and (in a
 * cluster) every replica's peer and state. Routing to replicas on other peers arrives
 * with the distributed issue's part 2; until then a point operation that needs one
 * answers 501 naming the shard and its peers.
 */
export class ReplicaSet {
  constructor(
    readonly shardId: number,
    /** Replaced when a shard snapshot is recovered (Collection.replaceShard); null when this peer holds no replica. */
    public local: LocalShard | null,
    /** Peer id → replica state (null on a single node). */
    public replicas: Record<string, ReplicaState> | null = null,
  ) {}

  remotePeers(localPeer: string | undefined): string[] {
    return this.replicas === null ? [] : Object.keys(this.replicas).filter((p) => p !== localPeer);
  }
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
    private readonly engine: Engine,
    private readonly logger: Logger,
  ) {
    this.specs = new Map(vectorSpecs(meta.config).map((s) => [s.name, s]));
  }

  static async open(name: string, dir: string, meta: CollectionMeta, engine: Engine, logger: Logger): Promise<Collection> {
    const c = new Collection(name, dir, meta, engine, logger.child({ collection: name }));
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
    opened.forEach((r, id) =>
      c.shards.push(new ReplicaSet(id, (r as PromiseFulfilledResult<LocalShard | null>).value, placement ? { ...placement.shards[id].replicas } : null)),
    );
    return c;
  }

  private openShard(id: number, dir = path.join(this.dir, String(id))): Promise<LocalShard> {
    const { config, payload_schema } = this.meta;
    return LocalShard.open({
      dir,
      engine: this.engine,
      vectors: vectorSpecs(config),
      walSegmentBytes: config.wal_config.wal_capacity_mb * 1024 * 1024,
      flushIntervalMs: config.optimizer_config.flush_interval_sec * 1000,
      payloadIndexes: payload_schema,
      logger: this.logger.child({ shard: id }),
    });
  }

  shardIds(): number[] {
    return this.shards.map((r) => r.shardId);
  }

  /** The local replica of shard `id`, or a 404 naming it (501 when it lives on other peers only). */
  localShard(id: number): LocalShard {
    const r = this.shards[id];
    if (!r) throw new NotFoundError(`Shard ${id} of ${this.name} does not exist`);
    return this.requireLocal(r, false);
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
    this.meta.cluster = placement;
    for (const r of this.shards) {
      const replicas = placement.shards[r.shardId]?.replicas ?? {};
      r.replicas = { ...replicas };
      const wantLocal = Object.prototype.hasOwnProperty.call(replicas, placement.peer);
      if (wantLocal && r.local === null) {
        r.local = await this.openShard(r.shardId);
      } else if (!wantLocal && r.local !== null) {
        const local = r.local;
        r.local = null;
        await local.drop();
        const fs = await import('node:fs/promises');
        await fs.rm(path.join(this.dir, String(r.shardId)), { recursive: true, force: true });
      }
    }
  }

  /**
   * The local replica of a replica set, for a read (`write` false) or a write. A write
   * needs every replica to be local (replicating to other peers is part 2 of the
   * distributed issue); a read needs a local replica.
   */
  private requireLocal(r: ReplicaSet, write: boolean): LocalShard {
    const remote = r.remotePeers(this.meta.cluster?.peer);
    if (r.local !== null && (!write || remote.length === 0)) return r.local;
    const where = remote.length > 0 ? `peer${remote.length > 1 ? 's' : ''} ${remote.join(', ')}` : 'no peer';
    throw new NotImplementedError(
      `shard ${r.shardId} of collection \`${this.name}\` has ${r.local === null ? 'no replica on this peer' : 'replicas on other peers'} ` +
        `(${where}); ${write ? 'writing to' : 'reading from'} replicas on other peers is not available in this version (distributed mode part 2)`,
    );
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
    await this.requireLocal(r, true).close();
    try {
      await swapDirectory(this.dir, String(id), source, true, async () => {
        r.local = await this.openShard(id);
      });
    } catch (err) {
      r.local = await this.openShard(id);
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

  /** Local replicas of every shard, for a read over the whole collection (501 when a shard lives elsewhere only). */
  private locals(): LocalShard[] {
    return this.shards.map((r) => this.requireLocal(r, false));
  }

  /** The local replicas this peer holds (collection info, config changes, checkpoints, close). */
  private present(): LocalShard[] {
    const out: LocalShard[] = [];
    for (const r of this.shards) if (r.local !== null) out.push(r.local);
    return out;
  }

  private shardOf(key: PointKey, write = true): LocalShard {
    const n = this.shards.length;
    const r = n === 1 ? this.shards[0] : this.shards[crc32c(Buffer.from(key.key, 'utf8')) % n];
    return this.requireLocal(r, write);
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

  private async write(
    perShard: Map<LocalShard, (s: LocalShard) => ShardOperation>,
    wait: boolean,
  ): Promise<UpdateResult> {
    const seqs = await Promise.all([...perShard].map(([shard, resolve]) => shard.update(resolve, wait)));
    let max = 0n;
    for (const s of seqs) if (s > max) max = s;
    return { operation_id: Number(max), status: wait ? 'completed' : 'acknowledged' };
  }

  /**
   * Items grouped by the shard of their point id, each group turned into that shard's
   * operation. With no items, the first shard still logs an empty operation, so every
   * write has an operation id.
   */
  private perShard<T>(items: T[], idOf: (t: T) => PointKey, make: (group: T[]) => (s: LocalShard) => ShardOperation): Map<LocalShard, (s: LocalShard) => ShardOperation> {
    const groups = new Map<LocalShard, T[]>();
    for (const item of items) {
      const s = this.shardOf(idOf(item));
      let l = groups.get(s);
      if (!l) groups.set(s, (l = []));
      l.push(item);
    }
    if (groups.size === 0) groups.set(this.requireLocal(this.shards[0], true), []);
    const ops = new Map<LocalShard, (s: LocalShard) => ShardOperation>();
    for (const [s, group] of groups) ops.set(s, make(group));
    return ops;
  }

  async upsert(points: PointWrite[], wait: boolean): Promise<UpdateResult> {
    for (const p of points) for (const [name, v] of p.vectors) this.checkVector(name, v);
    return this.write(this.perShard(points, (p) => p.id, (ps) => () => ({ kind: 'upsert', points: ps })), wait);
  }

  /** Throws 404 for the first explicit id that no shard holds. */
  private requireExisting(ids: PointKey[]): void {
    for (const id of ids) {
      if (!this.shardOf(id).has(id)) throw new NotFoundError(`No point with id ${id.kind === 'num' ? id.value.toString() : id.value} found`);
    }
  }

  /**
   * One operation per shard over the points `sel` chooses. With explicit ids each
   * shard gets its own ids; with a filter every shard resolves it under its lock.
   */
  private selected(sel: Selector, make: (ids: PointKey[]) => ShardOperation): Map<LocalShard, (s: LocalShard) => ShardOperation> {
    if (sel.ids !== null) return this.perShard(sel.ids, (id) => id, (ids) => (sh) => make(sh.resolve(ids, sel.filter)));
    const out = new Map<LocalShard, (s: LocalShard) => ShardOperation>();
    for (const s of this.shards.map((r) => this.requireLocal(r, true))) out.set(s, (sh) => make(sh.resolve(null, sel.filter)));
    return out;
  }

  deletePoints(sel: Selector, wait: boolean): Promise<UpdateResult> {
    return this.write(this.selected(sel, (ids) => ({ kind: 'delete', ids })), wait);
  }

  setPayload(sel: Selector, payload: Payload, key: string | null, wait: boolean): Promise<UpdateResult> {
    if (sel.ids) this.requireExisting(sel.ids);
    return this.write(this.selected(sel, (ids) => ({ kind: 'set_payload', ids, payload, key })), wait);
  }

  overwritePayload(sel: Selector, payload: Payload, wait: boolean): Promise<UpdateResult> {
    if (sel.ids) this.requireExisting(sel.ids);
    return this.write(this.selected(sel, (ids) => ({ kind: 'overwrite_payload', ids, payload })), wait);
  }

  deletePayload(sel: Selector, keys: string[], wait: boolean): Promise<UpdateResult> {
    if (sel.ids) this.requireExisting(sel.ids);
    return this.write(this.selected(sel, (ids) => ({ kind: 'delete_payload', ids, keys })), wait);
  }

  clearPayload(sel: Selector, wait: boolean): Promise<UpdateResult> {
    if (sel.ids) this.requireExisting(sel.ids);
    return this.write(this.selected(sel, (ids) => ({ kind: 'clear_payload', ids })), wait);
  }

  updateVectors(points: Array<{ id: PointKey; vectors: NamedVectors }>, wait: boolean): Promise<UpdateResult> {
    for (const p of points) {
      if (p.vectors.size === 0) throw new BadInputError('each point of a vector update needs at least one vector');
      for (const [name, v] of p.vectors) this.checkVector(name, v);
    }
    this.requireExisting(points.map((p) => p.id));
    return this.write(this.perShard(points, (p) => p.id, (ps) => () => ({ kind: 'update_vectors', points: ps })), wait);
  }

  deleteVectors(sel: Selector, names: string[], wait: boolean): Promise<UpdateResult> {
    for (const n of names) this.vectorSpec(n);
    if (sel.ids) this.requireExisting(sel.ids);
    return this.write(this.selected(sel, (ids) => ({ kind: 'delete_vectors', ids, names })), wait);
  }

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

  private withVectorNames(withVector: WithVector): string[] {
    if (withVector === true) return this.vectorNames();
    if (withVector === false) return [];
    for (const n of withVector) this.vectorSpec(n);
    return withVector;
  }

  /** Shapes a stored point as the API returns it. */
  private shapeBase(shard: LocalShard, p: StoredPoint, withPayload: WithPayload): RecordOut {
    const out: RecordOut = { id: keyToJson(p.key) };
    if (withPayload) {
      const payload = select((shard.payloadOf(p.offset) ?? {}) as Payload, withPayload);
      if (payload !== null) out.payload = payload;
    }
    return out;
  }

  private async shape(shard: LocalShard, p: StoredPoint, withPayload: WithPayload, names: string[]): Promise<RecordOut> {
    const out = this.shapeBase(shard, p, withPayload);
    if (names.length > 0) {
      const vs = await shard.vectorsOf(p.offset, names);
      if (this.singleUnnamed) {
        if (vs.has('')) out.vector = Array.from(vs.get('')!);
      } else {
        const o: Record<string, number[]> = {};
        for (const [n, v] of vs) o[n] = Array.from(v);
        out.vector = o;
      }
    }
    return out;
  }

  async retrieve(ids: PointKey[], withPayload: WithPayload, withVector: WithVector): Promise<RecordOut[]> {
    const names = this.withVectorNames(withVector);
    const out: RecordOut[] = [];
    const seen = new Set<string>();
    for (const id of ids) {
      if (seen.has(id.key)) continue;
      seen.add(id.key);
      const shard = this.shardOf(id, false);
      const p = shard.entry(id);
      if (p) out.push(await this.shape(shard, p, withPayload, names));
    }
    return out;
  }

  async scroll(req: ScrollRequest): Promise<{ points: RecordOut[]; next_page_offset: number | string | null }> {
    const names = this.withVectorNames(req.withVector);
    const parts = this.locals().map((s) => s.scroll(req.offset, req.limit, req.filter, compareKeys).map((p) => ({ s, p })));
    const all = parts.flat();
    if (parts.length > 1) all.sort((a, b) => compareKeys(a.p.key, b.p.key));
    const page = all.slice(0, req.limit);
    const next = all.length > req.limit ? keyToJson(all[req.limit].p.key) : null;
    const points = await Promise.all(page.map(({ s, p }) => this.shape(s, p, req.withPayload, names)));
    return { points, next_page_offset: next };
  }

  /** Scroll by payload value (`order_by`); there is no next page offset (use start_from). */
  async scrollOrdered(
    orderBy: OrderBy,
    req: Omit<ScrollRequest, 'offset'>,
  ): Promise<{ points: Array<RecordOut & { order_value: number }>; next_page_offset: null }> {
    const names = this.withVectorNames(req.withVector);
    const opts = { direction: orderBy.direction, startFrom: orderBy.start_from };
    let all: Array<{ s: LocalShard; p: StoredPoint & { value: number } }>;
    try {
      all = this.locals().flatMap((s) => s.ordered(orderBy.key, opts, req.filter, req.limit).map((p) => ({ s, p })));
    } catch (err) {
      if (err instanceof OrderByError) throw new BadRequestError(err.message);
      throw err;
    }
    if (this.shards.length > 1) all.sort(orderBy.direction === 'desc' ? (a, b) => b.p.value - a.p.value : (a, b) => a.p.value - b.p.value);
    const page = all.slice(0, req.limit);
    const points = await Promise.all(page.map(async ({ s, p }) => ({ ...(await this.shape(s, p, req.withPayload, names)), order_value: p.value })));
    return { points, next_page_offset: null };
  }

  /** Whether any point matches `filter` (stops at the first). */
  anyMatch(filter: Filter | null): boolean {
    return this.locals().some((s) => s.anyMatch(filter));
  }

  count(filter: Filter | null): number {
    let n = 0;
    for (const s of this.locals()) n += s.count(filter);
    return n;
  }

  /** The stored vector of a point (for queries by id and recommendations), or a 404. */
  async pointVector(id: PointKey, using: string): Promise<Float32Array> {
    this.vectorSpec(using);
    const shard = this.shardOf(id, false);
    const p = shard.entry(id);
    const idText = id.kind === 'num' ? id.value.toString() : id.value;
    if (!p) throw new NotFoundError(`No point with id ${idText} found`);
    const vs = await shard.vectorsOf(p.offset, [using]);
    const v = vs.get(using);
    if (!v) throw new BadInputError(`Point ${idText} has no vector ${using === '' ? '(unnamed)' : JSON.stringify(using)}`);
    return v;
  }

  async search(req: SearchRequest): Promise<ScoredOut[]> {
    const spec = this.vectorSpec(req.using);
    this.checkVector(req.using, req.vector);
    if (!req.vector.every((x) => Number.isFinite(x))) throw new BadInputError('query vector has a non-finite value');
    const excluded = new Set((req.exclude ?? []).map((k) => k.key));
    const want = req.limit + req.offset + excluded.size;
    if (want === 0) return [];
    const names = this.withVectorNames(req.withVector);
    const higher = higherIsBetter(spec.distance);
    const vs = {
      vector: req.vector,
      // limit and offset are each at most MAX_ENGINE_COUNT (the REST layer checks); their sum
      // can pass it, but no index holds more points than that, so the clamp changes no answer.
      k: Math.min(want, MAX_ENGINE_COUNT),
      ef: req.hnswEf,
      exact: req.exact,
      oversampling: req.quantization?.oversampling,
      rescore: req.quantization?.rescore,
      ignoreQuantization: req.quantization?.ignore,
    };
    const locals = this.locals();
    const perShard =
      locals.length === 1
        ? [(await locals[0].search(req.using, vs, req.filter)).map((h) => ({ s: locals[0], h }))]
        : await Promise.all(locals.map(async (s) => (await s.search(req.using, vs, req.filter)).map((h) => ({ s, h }))));
    let merged: Array<{ s: LocalShard; h: Hit }> = perShard.flat();
    if (perShard.length > 1) merged.sort(higher ? (a, b) => b.h.score - a.h.score : (a, b) => a.h.score - b.h.score);
    const t = req.scoreThreshold;
    merged = merged.filter(({ s, h }) => {
      if (t !== null && (higher ? h.score < t : h.score > t)) return false;
      if (excluded.size > 0) {
        const e = s.entryAt(h.label);
        if (!e || excluded.has(e.key.key)) return false;
      }
      return true;
    });
    const page = merged.slice(req.offset, req.offset + req.limit);
    const out: ScoredOut[] = [];
    for (const { s, h } of page) {
      const p = s.entryAt(h.label);
      if (!p) continue; // deleted while the search ran
      const rec = names.length > 0 ? await this.shape(s, p, req.withPayload, names) : this.shapeBase(s, p, req.withPayload);
      out.push({ id: rec.id, version: Number(p.version), score: h.score, ...(rec.payload !== undefined ? { payload: rec.payload } : {}), ...(rec.vector !== undefined ? { vector: rec.vector } : {}) });
    }
    return out;
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

export function keyToJson(k: PointKey): number | string {
  if (k.kind === 'uuid') return k.value;
  // Ids above 2^53 - 1 cannot be a JSON number a JS client reads exactly; they are
  // refused at the API (see README), so every stored integer id fits here.
  return Number(k.value);
}
