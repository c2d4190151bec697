/**
 * One shard stored on this node: the engine WAL, the id tracker, the payload store and
 * payload indexes, and one VectorStore per named vector.
 *
 * Owns: the order and durability of writes, checkpoints and WAL replay, filters turned
 * into offset sets, and the shard's reads. Must never: know about peers, HTTP, or how
 * points are routed to shards.
 *
 * A write runs under the update lock: resolve (ids, existence checks; may throw and
 * then nothing happened) -> encode -> append to the WAL -> apply to memory. The lock is
 * released before the fsync, so concurrent writers share one fsync (group commit);
 * `wait=true` answers only after it. A checkpoint (every flush_interval_sec, and on
 * close) runs under the lock too, so what it saves is exactly the state after
 * `applied_seq`; replay after a crash applies the WAL records after it, in order.
 *
 * History: a checkpoint drops only WAL segments it covers, and only while the WAL keeps
 * at least `walRetainBytes` without them, so the newest operations stay readable
 * (`readHistory`) for replicas that missed them (wal_delta transfers). Every record
 * carries a clock tag (clocks.ts); the shard's clock map (highest tick applied per peer
 * and clock) is saved with each checkpoint and advanced by replay, and an operation
 * whose tag it has seen is skipped (`applyTagged`).
 *
 * Layout (see docs/storage.md):
 *   wal/                    engine WAL, one record per operation
 *   checkpoint.json         { applied_seq, state, vectors: { name: files }, clocks }, written last
 *   state-<seq>.bin         id tracker + payloads
 *   vec-<i>-<role>-<seq>.qvi engine index files
 *   orig-<n>-<hex>.f32      f32 originals of an indexed index kept in a mapped file (on_disk vectors)
 *   graph-<n>-<hex>.links   level-0 links of an indexed index kept in a mapped file (hnsw_config.on_disk)
 *   sparse-<i>-<seq>-<n>.qsi sparse (inverted) index files, one per sparse vector name
 */

import * as fs from 'node:fs/promises';
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import type { Logger } from 'pino';

import type { Engine, ScoreRule, VectorIndex, Wal } from '../../bindings/engine';
import { ruleScore } from './rule-score';
import { ShardUnavailableError } from '../common/errors';
import type { VectorSpec } from './vector-store';
import { ClockMap, ClockSet, clockKey, clockMapJsonProblem, clockTagProblem, isReplicatedClock, type ClockEntryJson, type ClockTag } from './clocks';
import { compileFilter, type Filter, type PointPredicate } from './filter';
import { CRC32C_INIT, crc32cFinish, crc32cUpdate } from '../common/crc32c';
import { countWork, countingPieces } from '../common/work';
import type { EveryField } from '../common/fields';
import { crc32cSteps, runSliced, type Steps } from './slices';
import { compareKeys, IdTracker, PointIdError, pointIdToJson, type PointKey, type TrackerEntry } from './id-tracker';
import { requiredIds } from './filter-ids';
import { byteRuns, decodeRecord, encodeOperation, recordTag, type NamedVectors, type ShardOperation, type SparseVec, type SparseVectors } from './operations';
import { PayloadIndexes, type FacetValue, type OrderOptions } from './payload-index';
import { type FieldSchema } from './field-schema';
import { PayloadError, PayloadStore, parsePath, validatePayload, type Payload } from './payload-store';
import { DiskPayloadStore, PAYLOAD_DATA_RE, PAYLOAD_INDEX_RE, type DiskPayloadRef } from './payload-disk';
import { FIELD_INDEX_FILE_RE } from './index-disk';
import type { IndexFiles } from './field-index';
import { LabelSet } from './label-set';
import { GRAPH_FILE_RE, ORIGINALS_FILE_RE, VectorStore, type Exclusive, type Hit, type VectorFiles, type VectorSearch } from './vector-store';
import { SPARSE_FILE_RE, SparseStore, type SparseSpec } from './sparse-store';
import { removeTempFiles, syncDir, writeFileAtomic } from '../common/files';

export interface ShardOptions {
  dir: string;
  engine: Engine;
  vectors: VectorSpec[];
  /** The sparse vectors of the collection (absent: none). */
  sparse?: SparseSpec[];
  walSegmentBytes: number;
  /**
   * WAL bytes a checkpoint leaves behind as history (whole segments are dropped only
   * while at least this much stays). Default: walSegmentBytes.
   */
  walRetainBytes?: number;
  /** The peer id this shard's own writes are tagged with (clock tags). Default 0. */
  peerId?: bigint;
  /** Milliseconds between checkpoints. */
  flushIntervalMs: number;
  payloadIndexes: Record<string, FieldSchema>;
  /** Payloads in a data file read on demand (`on_disk_payload`, payload-disk.ts) rather than in memory. */
  onDiskPayload?: boolean;
  logger: Logger;
  /** This shard's files already being read (a snapshot recovery starts that while it unpacks the rest): used as the checkpoint names them. */
  preloaded?: ShardPreload;
}

/**
 * A shard's files read ahead of its opening: `fileReady` is told of each file of the
 * shard folder as soon as it is complete on disk, and vector index files start loading
 * on the engine's threads at once; `startDecoding` then starts decoding the state
 * file on the main thread, in slices (not before: the slices would hold up the
 * writing of the rest of the archive, which needs the main thread for every piece).
 * The shard takes what its checkpoint names as it opens; `discard` frees what nobody
 * took (a recovery that failed, or files the checkpoint does not name).
 */
export class ShardPreload {
  private stateFile: string | null = null;
  private state: { file: string; decoding: Promise<ShardState> } | null = null;
  private readonly indexes = new Map<string, Promise<VectorIndex>>();

  constructor(
    private readonly engine: Engine,
    private readonly dir: string,
  ) {}

  fileReady(name: string): void {
    if (STATE_FILE_RE.test(name)) {
      this.stateFile ??= name;
    } else if (INDEX_FILE_RE.test(name) && !this.indexes.has(name)) {
      const loading = this.engine.loadIndex(path.join(this.dir, name));
      loading.catch(() => undefined);
      this.indexes.set(name, loading);
    }
  }

  startDecoding(): void {
    if (this.stateFile === null || this.state !== null) return;
    const decoding = decodeStateFile(path.join(this.dir, this.stateFile));
    // Awaited when the shard opens (a failure then fails the opening), else dropped.
    decoding.catch(() => undefined);
    this.state = { file: this.stateFile, decoding };
  }

  /** The decoded state file `file`, if it is the one being decoded (given once). */
  takeState(file: string): Promise<ShardState> | null {
    if (this.state?.file !== file) return null;
    const { decoding } = this.state;
    this.state = null;
    return decoding;
  }

  /** The loaded index file `file`, if it is being loaded (given once: the caller closes it). */
  takeIndex(file: string): Promise<VectorIndex> | null {
    const loading = this.indexes.get(file) ?? null;
    this.indexes.delete(file);
    return loading;
  }

  /** Closes the indexes nobody took, once they have loaded. */
  discard(): void {
    for (const loading of this.indexes.values()) void loading.then((index) => index.close(), () => undefined);
    this.indexes.clear();
    this.state = null;
    this.stateFile = null;
  }
}

/** A shard state file, decoded: what a shard is loaded from (with its vector indexes). */
export interface ShardState {
  tracker: IdTracker;
  payloads: PayloadStore;
  /** Per vector name, the labels that carry that vector (null in format 1 files, which do not say). */
  present: Map<string, BigUint64Array> | null;
}

export interface CheckpointFile {
  format: 1;
  /** Next index file number (file names are never reused; see VectorStore.save). */
  file_no?: number;
  applied_seq: string;
  state: string;
  vectors: Record<string, VectorFiles>;
  /** The clock map as of applied_seq (absent in checkpoints written before clock tags: empty). */
  clocks?: ClockEntryJson[];
  /**
   * The clock map this replica's data was restored with from a snapshot (absent: never
   * restored). Other replicas may hold ticks above it that the snapshot rolled back; see
   * historyStartFor.
   */
  restored_clocks?: ClockEntryJson[];
  /** Per sparse vector name, its index file (absent: no sparse vectors). */
  sparse?: Record<string, string>;
  /** Payloads on disk (on_disk_payload): the data file, the bytes of it covered, the index file. Absent: in the state file. */
  payloads?: DiskPayloadRef;
  /** Per payload index kept on disk (`on_disk: true`): its files as of applied_seq and the schema they were written for. */
  payload_indexes?: Record<string, IndexFiles>;
}

const STATE_MAGIC_V1 = 0x51535431; // "QST1": tracker + payloads
const STATE_MAGIC = 0x51535432; // "QST2": tracker + payloads + which labels carry each vector
const STATE_MAGIC_V3 = 0x51535433; // "QST3": the same, written as a stream with a trailing checksum

/** A point as a read returns it, before the API shapes it. */
export interface StoredPoint {
  key: PointKey;
  offset: bigint;
  version: bigint;
}

/** What `pinSnapshot` hands out: files in `dir`, plus checkpoint.json's content. */
export interface ShardSnapshotFiles {
  dir: string;
  checkpoint: Buffer;
  files: string[];
  /** Files of which only a first part belongs to the snapshot (an on-disk payload data file, appended to after the checkpoint): the bytes to copy. */
  sizes?: Record<string, number>;
  appliedSeq: bigint;
  /** When asked for: the point count and content digest (as `digest()`) of exactly the checkpoint's state. */
  content?: { points: number; digest: string };
  release(): Promise<void>;
}

/** One retained WAL record: its operation and clock tag (null for records written before tags). */
export interface HistoryRecord {
  seq: bigint;
  tag: ClockTag | null;
  op: ShardOperation;
}

/** What `applyTagged` did: applied (and logged at `seq`), or skipped as already seen (`tick` is the highest this shard has on that clock). */
export type TaggedApplyResult = { applied: true; seq: bigint } | { applied: false; tick: bigint };

/** The WAL no longer holds the records asked for: a checkpoint dropped them (history is kept only back to `oldestSeq`). */
export class HistoryGoneError extends Error {
  constructor(
    readonly fromSeq: bigint,
    readonly oldestSeq: bigint,
  ) {
    super(`WAL history from ${fromSeq} is gone: the oldest retained record is ${oldestSeq}`);
    this.name = 'HistoryGoneError';
  }
}

/** A request reached a shard that is closing (shutdown, collection deleted or being replaced by a snapshot): 503, retry. */
export class ShardClosedError extends ShardUnavailableError {
  constructor() {
    super('the shard is closed (shutting down, deleted, or being replaced by a snapshot recovery); retry the request');
  }
}

export class LocalShard {
  private tracker = new IdTracker();
  private payloads: PayloadStore | DiskPayloadStore = new PayloadStore();
  readonly payloadIndex = new PayloadIndexes();
  readonly vectors = new Map<string, VectorStore>();
  /** One inverted index per sparse vector name. */
  readonly sparse = new Map<string, SparseStore>();
  private wal!: Wal;
  private walClosed = false;
  /** WAL calls outside the update lock in flight (fsyncs of wait=true writes, truncation); closeWal waits for them. */
  private readonly syncing = new Set<Promise<void>>();
  private appliedSeq = 0n;
  private checkpointSeq = 0n;
  /** Highest tick applied per (peer, clock): every record in the WAL up to appliedSeq advanced it. */
  private clockMap = new ClockMap();
  /** Clocks of this shard's own writer: one per operation in flight. */
  private readonly writerClocks = new ClockSet();
  private readonly peerId: bigint;
  private readonly walRetainBytes: number;
  /** Whether checkpoint.json exists (read at load, set by the first checkpoint). */
  private hasCheckpoint = false;
  /** A named vector was added or removed since the last checkpoint (the next one must be written). */
  private namesChanged = false;
  /** The highest number in a sparse index file name this shard wrote or loaded. */
  private sparseFileNo = 0;
  private lock: Promise<unknown> = Promise.resolve();
  private flushTimer: NodeJS.Timeout | null = null;
  private optimizeTimer: NodeJS.Timeout | null = null;
  private closed = false;
  /** Set as close() begins: no optimizer job starts after it. */
  private closing = false;
  private failed: Error | null = null;
  private checkpointing: Promise<void> | null = null;
  /** The checkpoint on disk (loaded or last written). */
  private current: CheckpointFile | null = null;
  /** The payloads moved between memory and disk since the last checkpoint (the next one must be written). */
  private payloadsMoved = false;
  /** The clock map at the last restore from a snapshot (markRestored), or null; `restoreFloorChanged` until a checkpoint holds it. */
  private restoreFloor: ClockMap | null = null;
  private restoreFloorChanged = false;
  /** The highest number in a payload data or index file name this shard wrote or loaded. */
  private payloadFileNo = 0;
  /** The highest number in an on-disk payload index file name (`fidx-<n>.*`) in the shard folder or written since. */
  private fieldIndexFileNo = 0;
  /** A payload index was created or dropped since the last checkpoint (the next one must be written). */
  private indexesChanged = false;
  /** Files held by snapshots being written: checkpoint clean-up leaves them alone. */
  private readonly pinned = new Map<string, number>();
  private readonly logger: Logger;

  private constructor(private readonly opts: ShardOptions) {
    this.logger = opts.logger;
    this.peerId = opts.peerId ?? 0n;
    this.walRetainBytes = opts.walRetainBytes ?? opts.walSegmentBytes;
    for (const spec of opts.vectors) this.vectors.set(spec.name, new VectorStore(opts.engine, spec, opts.logger, opts.dir));
    for (const spec of opts.sparse ?? []) this.sparse.set(spec.name, new SparseStore(opts.engine, spec));
    this.payloadIndex.vectorPresence = (name) => this.vectors.get(name)?.present ?? this.sparse.get(name)?.present ?? null;
    this.payloadIndex.universe = {
      size: () => this.tracker.size,
      offsets: () => [...this.tracker.unordered()].map((e) => e.offset),
    };
  }

  /** Opens (or creates) the shard in `opts.dir`: loads the checkpoint, then replays the WAL after it. */
  static async open(opts: ShardOptions): Promise<LocalShard> {
    const shard = new LocalShard(opts);
    if ((await fs.mkdir(opts.dir, { recursive: true })) !== undefined) await syncDir(path.dirname(opts.dir));
    await shard.load();
    shard.setFlushInterval(opts.flushIntervalMs);
    // Optimizer decisions that depend on time (leftover points after writes stop).
    shard.optimizeTimer = setInterval(() => shard.optimize(), 500);
    shard.optimizeTimer.unref();
    shard.optimize();
    return shard;
  }

  private async load(): Promise<void> {
    const started = Date.now();
    const leftovers = await removeTempFiles(this.opts.dir);
    if (leftovers > 0) this.logger.info({ dir: this.opts.dir, files: leftovers }, 'removed temp files of a write a crash interrupted');
    const cp = await readCheckpoint(this.opts.dir);
    if (cp) {
      const preloaded = this.opts.preloaded;
      const decoding = preloaded?.takeState(cp.state) ?? decodeStateFile(path.join(this.opts.dir, cp.state));
      // The vector indexes load on the engine's threads while the state is decoded here.
      const loads: Promise<void>[] = [];
      for (const [name, store] of this.vectors) {
        store.fileNo = cp.file_no ?? 0;
        const files = cp.vectors[name];
        if (files) loads.push(store.load(this.opts.dir, files, decoding.then((st) => runSliced(keepFilter(st, name))), (f) => preloaded?.takeIndex(f) ?? null));
      }
      for (const [name, store] of this.sparse) {
        const file = cp.sparse?.[name];
        if (file) loads.push(store.load(this.opts.dir, file));
      }
      for (const file of Object.values(cp.sparse ?? {})) this.sparseFileNo = Math.max(this.sparseFileNo, Number(/-([0-9]+)\.qsi$/.exec(file)?.[1] ?? 0));
      const settled = await Promise.allSettled([decoding, ...loads]);
      const failed = settled.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
      const { tracker, payloads } = await decoding;
      this.tracker = tracker;
      this.payloads = payloads;
      if (cp.payloads) {
        for (const f of [cp.payloads.data, cp.payloads.index]) this.payloadFileNo = Math.max(this.payloadFileNo, Number(/([0-9]+)\.(dat|bin)$/.exec(f)?.[1] ?? 0));
        this.payloads = await DiskPayloadStore.open(this.opts.dir, cp.payloads);
      }
      this.appliedSeq = BigInt(cp.applied_seq);
      this.checkpointSeq = this.appliedSeq;
      this.clockMap = ClockMap.fromJSON(cp.clocks ?? []);
      this.restoreFloor = cp.restored_clocks === undefined ? null : ClockMap.fromJSON(cp.restored_clocks);
      this.hasCheckpoint = true;
      this.current = cp;
    }
    await this.placePayloads(this.opts.onDiskPayload ?? false);
    for (const name of await fs.readdir(this.opts.dir)) {
      if (FIELD_INDEX_FILE_RE.test(name)) this.fieldIndexFileNo = Math.max(this.fieldIndexFileNo, Number(/([0-9]+)\./.exec(name)![1]));
    }
    for (const [field, schema] of Object.entries(this.opts.payloadIndexes)) {
      const files = cp?.payload_indexes?.[field];
      // files of another schema or tokenizer (text: text-index.ts TOKENIZER_PIPELINE_VERSION) are rebuilt
      if (indexOnDisk(schema) && files !== undefined && this.payloadIndex.filesFit(field, schema, files)) {
        await this.payloadIndex.open(field, schema, this.opts.dir, files);
      } else {
        this.payloadIndex.create(field, schema, this.payloadEntries());
        if (indexOnDisk(schema)) {
          await this.payloadIndex.moveToDisk(field, this.opts.dir, () => ++this.fieldIndexFileNo);
          this.indexesChanged = true;
        }
      }
    }
    this.wal = await this.opts.engine.openWal(path.join(this.opts.dir, 'wal'), { segmentBytes: this.opts.walSegmentBytes });
    const report = this.wal.report;
    if (report.truncatedBytes > 0) {
      this.logger.warn(
        { dir: this.opts.dir, bytes: report.truncatedBytes, file: report.truncatedFile, offset: report.truncatedOffset },
        'WAL had a torn tail (a write that was never acknowledged); cut it back',
      );
    }
    let replayed = 0;
    for (;;) {
      const records = await this.wal.readFrom(this.appliedSeq + 1n, 512);
      if (records.length === 0) break;
      for (const r of records) {
        const { op, tag } = decodeRecord(r.data);
        // Logged means seen, whether or not it applies (see logAndApply).
        if (tag) this.clockMap.advance(tag);
        try {
          await this.apply(op, r.seq);
        } catch (err) {
          // Only a record that input validation refuses fails the same way every
          // time (it failed when first applied, and the shard then took no more
          // writes); skip it. Anything else (engine, I/O) stops the start-up: skipping
          // it would drop an acknowledged write.
          if (!(err instanceof PayloadError || err instanceof PointIdError)) throw err;
          this.logger.error({ err, seq: String(r.seq), dir: this.opts.dir }, 'a WAL record that input validation refuses was skipped');
        }
        this.appliedSeq = r.seq;
        replayed++;
      }
    }
    this.logger.info(
      { dir: this.opts.dir, points: this.tracker.size, checkpoint: cp ? cp.applied_seq : null, replayed, ms: Date.now() - started },
      'shard loaded',
    );
  }

  /**
   * Moves the payloads to disk (a DiskPayloadStore) or into memory when they are not
   * where `onDisk` says (on_disk_payload changed, or a snapshot of the other kind was
   * recovered); the next checkpoint then records where they are. The caller holds the
   * update lock (or is loading).
   */
  private async placePayloads(onDisk: boolean): Promise<void> {
    const from = this.payloads;
    if (onDisk === from instanceof DiskPayloadStore) return;
    let to: PayloadStore | DiskPayloadStore;
    if (onDisk) {
      const disk = await DiskPayloadStore.create(this.opts.dir, ++this.payloadFileNo);
      try {
        for (const [offset, p] of from.entries()) disk.overwrite(offset, p as Payload);
      } catch (err) {
        disk.close();
        throw err;
      }
      to = disk;
    } else {
      const mem = new PayloadStore();
      for (const [offset, p] of from.entries()) mem.overwrite(offset, p as Payload);
      to = mem;
    }
    this.payloads = to;
    if (from instanceof DiskPayloadStore) from.close();
    this.payloadsMoved = true;
  }

  /** Keeps payloads on disk or in memory from now on (`on_disk_payload` changed): moved under the update lock, recorded by the next checkpoint. */
  async setPayloadOnDisk(onDisk: boolean): Promise<void> {
    this.usable();
    await this.exclusive(async () => {
      this.usable();
      await this.placePayloads(onDisk);
    });
  }

  /** Whether payloads are kept on disk (on_disk_payload). */
  get payloadsOnDisk(): boolean {
    return this.payloads instanceof DiskPayloadStore;
  }

  private *payloadEntries(): Iterable<[bigint, Payload | null]> {
    for (const e of this.tracker.unordered()) yield [e.offset, this.payloads.has(e.offset) ? (this.payloads.get(e.offset) as Payload) : null];
  }

  /** Runs `fn` alone among the shard's writes (and checkpoints). */
  readonly exclusive: Exclusive = <T>(fn: () => Promise<T>): Promise<T> => {
    const run = this.lock.then(fn, fn);
    this.lock = run.catch(() => undefined);
    return run;
  };

  private usable(): void {
    if (this.closed) throw new ShardClosedError();
    if (this.failed) throw this.failed;
  }

  /**
   * Resolves, logs and applies one operation. `resolve` runs under the update lock and
   * may throw (nothing is written then). Resolves with the operation's sequence number
   * once it is applied, and, when `wait`, durable.
   */
  async update(resolve: (shard: LocalShard) => ShardOperation, wait: boolean): Promise<bigint> {
    this.usable();
    // This writer's clock for the operation, held until it is done (durable, when
    // `wait`): operations in flight together get distinct clocks. Its tick is taken
    // under the lock, one past the highest the clock map holds, so each clock's ticks
    // are logged in order and without gaps.
    const clock = this.writerClocks.acquire();
    try {
      const { seq, synced } = await this.exclusive(async () => {
        this.usable();
        const op = resolve(this);
        checkOperation(op, this.vectors, this.sparse);
        return this.logAndApply(op, { peer: this.peerId, clock, tick: this.clockMap.tickOf(this.peerId, clock) + 1n }, wait);
      });
      if (synced) await synced;
      this.optimize();
      return seq;
    } finally {
      this.writerClocks.release(clock);
    }
  }

  /**
   * Applies an operation that carries another writer's clock tag (a replica's write, or
   * a record of a wal_delta transfer). Skipped, with nothing logged, when this shard has
   * seen the tag (its tick is at or below the highest applied on that peer and clock),
   * so sending the same operations again changes nothing; otherwise logged with that
   * tag and applied like a local write. With `wait`, resolves once the operation (or,
   * when skipped, everything logged before) is durable.
   */
  async applyTagged(operation: ShardOperation | ((shard: LocalShard) => ShardOperation), tag: ClockTag, wait: boolean): Promise<TaggedApplyResult> {
    const problem = clockTagProblem(tag);
    if (problem !== null) throw new RangeError(`clock tag (${tag.peer}, ${tag.clock}, ${tag.tick}): ${problem}`);
    this.usable();
    let synced: Promise<void> | null = null;
    const result = await this.exclusive(async (): Promise<TaggedApplyResult> => {
      this.usable();
      if (this.clockMap.seen(tag)) return { applied: false, tick: this.clockMap.tickOf(tag.peer, tag.clock) };
      // A selector is resolved here, under the lock, as a local write's is.
      const op = typeof operation === 'function' ? operation(this) : operation;
      checkOperation(op, this.vectors, this.sparse);
      const logged = await this.logAndApply(op, { peer: tag.peer, clock: tag.clock, tick: tag.tick }, wait);
      synced = logged.synced;
      return { applied: true, seq: logged.seq };
    });
    // Skipped: everything logged before must be durable too.
    if (wait) await (synced ?? this.syncWal());
    if (result.applied) this.optimize();
    return result;
  }

  /**
   * Appends the tagged operation to the WAL and applies it (under the update lock). With
   * `sync`, the fsync that makes the record durable starts as soon as it is appended and
   * runs while memory takes the operation; `synced` settles when it is done (the caller
   * awaits it outside the lock, so concurrent writers still share fsyncs). Applying
   * still waits for the append: nothing reaches memory before it is logged.
   */
  private async logAndApply(op: ShardOperation, tag: ClockTag, sync: boolean): Promise<{ seq: bigint; synced: Promise<void> | null }> {
    const [s] = await this.wal.append([encodeOperation(op, tag)], false);
    // A logged tag counts as seen even if applying fails below: replay advances the map
    // for every record, applied or skipped, and must end where this run did.
    this.clockMap.advance(tag);
    const synced = sync ? this.syncWal() : null;
    // Awaited by the caller; if applying throws first, its outcome is still observed here.
    synced?.catch(() => undefined);
    try {
      await this.apply(op, s);
    } catch (err) {
      // The WAL holds an operation memory could not take: stop taking writes, so
      // nothing diverges further; a restart replays it.
      this.failed = new Error(`shard ${this.opts.dir} failed to apply operation ${s}: ${(err as Error).message}`);
      this.logger.error({ err, seq: String(s) }, 'applying a logged operation failed; the shard stops taking writes');
      throw err;
    }
    this.appliedSeq = s;
    return { seq: s, synced };
  }

  /**
   * Fsyncs the WAL for a `wait=true` write (outside the update lock: concurrent writers
   * share fsyncs). After closeWal the write is durable already (closing syncs).
   */
  private syncWal(): Promise<void> {
    if (this.walClosed) return Promise.resolve();
    return this.track(this.wal.sync());
  }

  /** Remembers a WAL call made outside the update lock until it settles (closeWal waits for it). */
  private track(p: Promise<void>): Promise<void> {
    this.syncing.add(p);
    const done = () => this.syncing.delete(p);
    p.then(done, done);
    return p;
  }

  /** Closes the WAL (under the update lock) once no fsync started here is still running on it. */
  private async closeWal(): Promise<void> {
    if (this.walClosed) return;
    this.walClosed = true;
    while (this.syncing.size > 0) await Promise.allSettled([...this.syncing]);
    await this.wal.close();
  }

  /** Applies an operation to memory (also used by replay; must be deterministic). */
  private async apply(op: ShardOperation, seq: bigint): Promise<void> {
    switch (op.kind) {
      case 'upsert': {
        const writes = new VectorWrites();
        const removeVec = new Map<string, bigint[]>();
        // A point written twice in one batch: the last one wins.
        const last = new Map<string, number>();
        op.points.forEach((p, i) => last.set(p.id.key, i));
        op.points.forEach((p, i) => {
          if (last.get(p.id.key) !== i) return;
          const { offset } = this.tracker.upsert(p.id, seq);
          if (p.payload && Object.keys(p.payload).length > 0) this.payloads.overwrite(offset, p.payload);
          else this.payloads.remove(offset);
          this.payloadIndex.update(offset, p.payload);
          for (const name of this.vectors.keys()) {
            const v = p.vectors.get(name);
            if (v) {
              writes.add(name, offset, v);
            } else {
              let r = removeVec.get(name);
              if (!r) removeVec.set(name, (r = []));
              r.push(offset);
            }
          }
        });
        await Promise.all([
          writes.apply(this.vectors),
          ...[...removeVec].map(([name, ls]) => this.vectors.get(name)!.delete(BigUint64Array.from(ls))),
          this.applySparse(op.points, true),
        ]);
        return;
      }
      case 'delete': {
        const offsets: bigint[] = [];
        for (const id of op.ids) {
          const off = this.tracker.delete(id);
          if (off === null) continue;
          offsets.push(off);
          this.payloads.remove(off);
          this.payloadIndex.update(off, null);
        }
        if (offsets.length > 0) {
          const labels = BigUint64Array.from(offsets);
          await Promise.all([...this.vectors.values(), ...this.sparse.values()].map((s) => s.delete(labels)));
        }
        return;
      }
      case 'set_payload':
      case 'overwrite_payload':
      case 'delete_payload':
      case 'clear_payload': {
        for (const id of op.ids) {
          if (!this.tracker.has(id)) continue;
          const { offset } = this.tracker.upsert(id, seq);
          if (op.kind === 'set_payload') this.payloads.set(offset, op.payload, op.key);
          else if (op.kind === 'overwrite_payload') this.payloads.overwrite(offset, op.payload);
          else if (op.kind === 'delete_payload') this.payloads.deleteKeys(offset, op.keys);
          else this.payloads.remove(offset);
          this.payloadIndex.update(offset, this.payloads.has(offset) ? (this.payloads.get(offset) as Payload) : null);
        }
        return;
      }
      case 'update_vectors': {
        const writes = new VectorWrites();
        for (const p of op.points) {
          if (!this.tracker.has(p.id)) continue;
          const { offset } = this.tracker.upsert(p.id, seq);
          for (const [name, v] of p.vectors) if (this.vectors.has(name)) writes.add(name, offset, v);
        }
        await Promise.all([writes.apply(this.vectors), this.applySparse(op.points.filter((p) => this.tracker.has(p.id)), false)]);
        return;
      }
      case 'delete_vectors': {
        const offsets: bigint[] = [];
        for (const id of op.ids) {
          if (!this.tracker.has(id)) continue;
          offsets.push(this.tracker.upsert(id, seq).offset);
        }
        const labels = BigUint64Array.from(offsets);
        await Promise.all(op.names.map((n) => (this.vectors.get(n) ?? this.sparse.get(n))?.delete(labels)));
        return;
      }
    }
  }

  /**
   * Writes the sparse vectors of points just applied (their ids are in the tracker):
   * each point's given sparse vectors, and for an upsert (`replace`) the removal of the
   * sparse vectors it does not carry.
   */
  private async applySparse(points: ReadonlyArray<{ id: PointKey; sparse?: SparseVectors }>, replace: boolean): Promise<void> {
    if (this.sparse.size === 0) return;
    await Promise.all(
      [...this.sparse].map(async ([name, store]) => {
        // By label, the last write of the batch: a vector, or null (an upsert without it).
        const last = new Map<bigint, SparseVec | null>();
        for (const p of points) {
          const offset = this.tracker.offsetOf(p.id);
          if (offset === null) continue;
          const v = p.sparse?.get(name);
          if (v) last.set(offset, v);
          else if (replace) last.set(offset, null);
        }
        const labels: bigint[] = [];
        const vecs: SparseVec[] = [];
        const drop: bigint[] = [];
        for (const [l, v] of last) {
          if (v === null) drop.push(l);
          else {
            labels.push(l);
            vecs.push(v);
          }
        }
        if (drop.length > 0) await store.delete(BigUint64Array.from(drop));
        await store.upsert(labels, vecs);
      }),
    );
  }

  /** Starts the optimizer jobs that are due (index build, vacuum). */
  private optimize(): void {
    if (this.closed || this.closing) return;
    for (const store of this.vectors.values()) {
      const job = store.maybeOptimize(this.exclusive);
      // When a job ends, another may be due (more points arrived meanwhile).
      job?.then(() => this.optimize());
    }
  }

  /** Checkpoints every `ms` milliseconds from now on (optimizers.flush_interval_sec). */
  setFlushInterval(ms: number): void {
    if (this.closing || this.closed) return;
    if (this.flushTimer) clearInterval(this.flushTimer);
    this.flushTimer = setInterval(() => {
      this.checkpoint().catch((err) => this.logger.error({ err, dir: this.opts.dir }, 'checkpoint failed; the WAL keeps every write'));
    }, ms);
    this.flushTimer.unref();
  }

  /** Re-checks whether optimizer work is due (after a configuration change). */
  kick(): void {
    this.optimize();
  }

  /** Whether every vector index is optimized (green) or work is pending or running (yellow). */
  optimizing(): boolean {
    for (const s of this.vectors.values()) if (s.pending()) return true;
    return false;
  }

  /** Vectors waiting to be indexed beyond the indexing threshold, over every vector (a transfer's target is keeping up while this stays small). */
  indexBacklog(): number {
    let n = 0;
    for (const s of this.vectors.values()) n += s.indexBacklog();
    return n;
  }

  /** Waits until no optimizer job runs or is due (tests, benchmarks, shutdown). */
  async waitOptimized(): Promise<void> {
    for (;;) {
      this.optimize();
      const stores = [...this.vectors.values()];
      if (!stores.some((s) => s.pending())) return;
      await Promise.all(stores.map((s) => s.idle()));
      if (stores.some((s) => s.pending() && !s.busy())) await new Promise((r) => setTimeout(r, 10));
    }
  }

  /**
   * Saves the state after `appliedSeq` (under the update lock), then drops the WAL
   * segments it covers that the retained history does not need. Skipped when nothing
   * changed since the last one.
   */
  checkpoint(): Promise<void> {
    if (this.closed && this.checkpointing === null) return Promise.resolve();
    this.checkpointing ??= this.doCheckpoint().finally(() => {
      this.checkpointing = null;
    });
    return this.checkpointing;
  }

  /** `underLock` runs after the checkpoint, still under the update lock (nothing written since). */
  private async doCheckpoint(underLock?: () => Promise<void>): Promise<void> {
    if (this.failed) return;
    const dir = this.opts.dir;
    const saved = await this.exclusive(async () => {
      const cp = await this.saveCheckpoint(dir);
      if (underLock) await underLock();
      return cp;
    });
    if (!saved) return;
    // Replay starts after applied_seq; older records stay as history while they fit in
    // walRetainBytes (whole segments, oldest first, so what stays is contiguous).
    if (!this.walClosed) await this.track(this.wal.truncateBefore(BigInt(saved.applied_seq) + 1n, this.walRetainBytes));
    // Under the update lock: a file a write or job is creating (a payload index's new
    // base, a side file) is named by its owner only after awaits; the lock keeps this
    // listing from falling between the two.
    await this.exclusive(() => this.removeUnusedFiles());
  }

  /**
   * Adds an empty store for each of `added` and drops the stores of `removed` (a named
   * vector created or deleted; `sparseAdded`/`sparseRemoved` likewise for sparse names),
   * then checkpoints: the WAL before the change is never
   * replayed into the new set of names (a re-created name must not get the old one's
   * vectors back).
   */
  async changeVectorNames(added: VectorSpec[], removed: string[], sparseAdded: SparseSpec[] = [], sparseRemoved: string[] = []): Promise<void> {
    // The dropped stores' optimizer jobs stop first, outside the update lock: a job takes
    // that lock after each chunk and when it stops, so waiting for it under the lock
    // would never end (as close() does it). A cancelled store starts no new job.
    await Promise.all(removed.map((name) => this.vectors.get(name)?.cancel()));
    await this.exclusive(async () => {
      for (const name of sparseRemoved) {
        const store = this.sparse.get(name);
        if (!store) continue;
        this.sparse.delete(name);
        store.close();
      }
      for (const spec of sparseAdded) {
        if (!this.sparse.has(spec.name)) this.sparse.set(spec.name, new SparseStore(this.opts.engine, spec));
      }
      for (const name of removed) {
        const store = this.vectors.get(name);
        if (!store) continue;
        await store.cancel();
        this.vectors.delete(name);
        store.closeIndexes();
      }
      // File numbers go on from the highest any store used: a new store's files must not
      // take a name a dropped store's files (still named by the checkpoint) have.
      const fileNo = Math.max(this.current?.file_no ?? 0, ...[...this.vectors.values()].map((v) => v.fileNo));
      for (const spec of added) {
        if (this.vectors.has(spec.name)) continue;
        const store = new VectorStore(this.opts.engine, spec, this.logger, this.opts.dir);
        store.fileNo = fileNo;
        this.vectors.set(spec.name, store);
      }
      this.namesChanged = true;
    });
    // One that was already running may have started before the change.
    await this.checkpoint();
    if (this.namesChanged) await this.checkpoint();
  }

  /** Writes a checkpoint of the state now (the caller holds the update lock); null when the last one is still current. */
  private async saveCheckpoint(dir: string): Promise<CheckpointFile | null> {
    const seq = this.appliedSeq;
    const vectorsChanged = this.namesChanged || [...this.vectors.values(), ...this.sparse.values()].some((s) => s.changedSinceSave());
    if (seq === this.checkpointSeq && !vectorsChanged && !this.payloadsMoved && !this.indexesChanged && !this.restoreFloorChanged && this.hasCheckpoint) return null;
    // The flags are cleared only once the checkpoint is written (below): one that fails
    // leaves them, so the retry writes a checkpoint even with no write since. Nothing sets
    // them meanwhile: they are set under the update lock, which the caller holds.
    const started = Date.now();
    await this.wal.sync();
    const vectors: Record<string, VectorFiles> = {};
    let i = 0;
    for (const [name, store] of this.vectors) vectors[name] = await store.save(dir, `vec-${i++}-`, seq);
    const state = `state-${seq}.bin`;
    // On-disk payloads: the data file is made durable and its index written first; the state file then holds none.
    const payloads = this.payloads instanceof DiskPayloadStore ? await this.payloads.save(seq, () => ++this.payloadFileNo) : null;
    await writeFileAtomic(path.join(dir, state), countingPieces(encodeState(this.tracker, payloads === null ? (this.payloads as PayloadStore) : new PayloadStore(), this.vectors)));
    const fileNo = Math.max(0, ...[...this.vectors.values()].map((v) => v.fileNo));
    const cp: CheckpointFile = { format: 1, file_no: fileNo, applied_seq: seq.toString(), state, vectors, clocks: this.clockMap.toJSON() };
    if (payloads !== null) cp.payloads = payloads;
    const floorWritten = this.restoreFloorChanged;
    if (this.restoreFloor !== null) cp.restored_clocks = this.restoreFloor.toJSON();
    const fieldIndexes = await this.payloadIndex.saveFiles(dir, () => ++this.fieldIndexFileNo);
    if (Object.keys(fieldIndexes).length > 0) cp.payload_indexes = fieldIndexes;
    if (this.sparse.size > 0) {
      const sparse: Record<string, string> = {};
      let j = 0;
      // Each checkpoint that writes sparse files numbers them anew: after a sparse name was
      // dropped or added, position j may belong to another name whose file must not be overwritten.
      const fileNo = ++this.sparseFileNo;
      for (const [name, store] of this.sparse) sparse[name] = await store.save(dir, `sparse-${j++}-`, seq, fileNo);
      cp.sparse = sparse;
    }
    await writeFileAtomic(path.join(dir, 'checkpoint.json'), Buffer.from(JSON.stringify(cp)));
    this.namesChanged = false;
    this.payloadsMoved = false;
    this.indexesChanged = false;
    if (floorWritten) this.restoreFloorChanged = false;
    this.checkpointSeq = seq;
    this.hasCheckpoint = true;
    this.current = cp;
    this.logger.debug({ dir, seq: String(seq), ms: Date.now() - started }, 'checkpoint written');
    return cp;
  }

  /** Removes state and index files that neither the current checkpoint nor a snapshot in progress uses. */
  private async removeUnusedFiles(): Promise<void> {
    const dir = this.opts.dir;
    const names = await fs.readdir(dir);
    // Decided after the listing: a checkpoint that finished meanwhile named its files in `current`.
    const keep = new Set(this.current ? checkpointFiles(this.current) : []);
    // The data file being appended to (a checkpoint may not name it yet: payloads just moved to disk).
    if (this.payloads instanceof DiskPayloadStore) {
      keep.add(this.payloads.dataFile);
      // A checkpoint that failed after saving payloads or vectors names these files when retried (the stores return them unchanged).
      const idx = this.payloads.savedIndexFile;
      if (idx !== null) keep.add(idx);
    }
    for (const store of this.vectors.values()) for (const f of [...store.savedFiles(), ...store.liveFiles()]) keep.add(f);
    // On-disk payload indexes: the base file in use (a checkpoint may not name it yet) and the files the last save wrote.
    for (const f of this.payloadIndex.files()) keep.add(f);
    await Promise.all(
      names
        .filter(
          (n) =>
            ((n.startsWith('state-') && n.endsWith('.bin')) || (n.startsWith('vec-') && n.endsWith('.qvi')) || ORIGINALS_FILE_RE.test(n) || GRAPH_FILE_RE.test(n) || SPARSE_FILE_RE.test(n) || PAYLOAD_DATA_RE.test(n) || PAYLOAD_INDEX_RE.test(n) || FIELD_INDEX_FILE_RE.test(n)) &&
            !keep.has(n) &&
            !this.pinned.has(n),
        )
        .map((n) => fs.rm(path.join(dir, n), { force: true })),
    );
  }

  /**
   * A consistent copy of the shard for a snapshot: a fresh checkpoint that holds every
   * write acknowledged before the call, and the files it names, which stay on disk
   * (later checkpoints leave them alone) until `release()`. The WAL is not part of
   * it: the checkpoint covers everything up to `appliedSeq`, and a restored shard
   * starts an empty WAL at `appliedSeq + 1` (`walSegmentName`).
   */
  async pinSnapshot(withContent = false): Promise<ShardSnapshotFiles> {
    this.usable();
    // A checkpoint already running may have taken the lock before a write that was
    // acknowledged before this call: wait for it, then start one of our own.
    while (this.checkpointing !== null) await this.checkpointing.catch(() => undefined);
    let cp: CheckpointFile | null = null;
    let content: ShardSnapshotFiles['content'];
    if (withContent) {
      // The checkpoint's files are pinned and its content read under the update lock,
      // right after it is written: the digest is of exactly its state (writes wait meanwhile).
      this.checkpointing = this.doCheckpoint(async () => {
        cp = this.current;
        if (cp === null) return;
        this.pin(checkpointFiles(cp));
        try {
          content = await this.digest();
        } catch (err) {
          this.unpin(checkpointFiles(cp));
          cp = null;
          throw err;
        }
      }).finally(() => {
        this.checkpointing = null;
      });
      await this.checkpointing;
      this.usable();
    } else {
      await this.checkpoint();
      this.usable();
      cp = this.current;
      if (cp !== null) this.pin(checkpointFiles(cp));
    }
    const taken = cp as CheckpointFile | null;
    if (taken === null) throw new Error(`shard ${this.opts.dir} has no checkpoint after checkpointing`);
    const files = checkpointFiles(taken);
    let released = false;
    const sizes: Record<string, number> = {};
    if (taken.payloads) sizes[taken.payloads.data] = taken.payloads.length;
    // Side files of mapped originals grow after the checkpoint (the optimizer appends):
    // the snapshot takes what they hold now, at least what the checkpoint covers (a
    // longer file's tail is ignored when the index loads).
    for (const f of Object.values(taken.vectors)) {
      if (f.originals) sizes[f.originals] = (await fs.stat(path.join(this.opts.dir, f.originals))).size;
    }
    return {
      dir: this.opts.dir,
      checkpoint: Buffer.from(JSON.stringify(taken)),
      files,
      ...(Object.keys(sizes).length > 0 ? { sizes } : {}),
      appliedSeq: BigInt(taken.applied_seq),
      ...(content !== undefined ? { content } : {}),
      release: async () => {
        if (released) return;
        released = true;
        this.unpin(files);
        // A checkpoint in progress cleans up after itself; one that has not begun its
        // write waits for the lock, so this clean-up never sees its new files
        // half-named (written, but not yet in checkpoint.json).
        if (this.closed || this.closing || this.checkpointing !== null) return;
        await this.exclusive(() => this.removeUnusedFiles()).catch((err: unknown) => this.logger.warn({ err }, 'removing files a snapshot held failed'));
      },
    };
  }

  private pin(files: readonly string[]): void {
    for (const f of files) this.pinned.set(f, (this.pinned.get(f) ?? 0) + 1);
  }

  private unpin(files: readonly string[]): void {
    for (const f of files) {
      const n = (this.pinned.get(f) ?? 1) - 1;
      if (n === 0) this.pinned.delete(f);
      else this.pinned.set(f, n);
    }
  }

  /** Stops timers and the optimizer's next jobs, writes a last checkpoint, closes the WAL. */
  private stopTimers(): void {
    if (this.flushTimer) clearInterval(this.flushTimer);
    if (this.optimizeTimer) clearInterval(this.optimizeTimer);
    this.flushTimer = null;
    this.optimizeTimer = null;
  }

  async close(): Promise<void> {
    if (this.closed || this.closing) return;
    this.closing = true;
    this.stopTimers();
    // A long index build would hold shutdown (and an orchestrator's grace period) for
    // its whole length: stop it; a frozen index resumes its move after the next start.
    await Promise.all([...this.vectors.values()].map((s) => s.cancel()));
    try {
      await this.checkpoint();
    } finally {
      this.closed = true;
      await this.exclusive(async () => {
        await this.closeWal();
      });
      for (const s of this.vectors.values()) s.closeIndexes();
      for (const s of this.sparse.values()) s.close();
      this.releaseMemory();
    }
  }

  /**
   * Lets go of the in-memory state once the shard is closed (everything is on disk):
   * a snapshot recovery opens the new data next, and the old one must not stay
   * reachable meanwhile (for a million points that is hundreds of MB). Reads of a
   * closed shard answer ShardClosedError (503), never this empty state.
   */
  private releaseMemory(): void {
    if (this.payloads instanceof DiskPayloadStore) this.payloads.close();
    this.payloadIndex.closeFiles();
    this.tracker = new IdTracker();
    this.payloads = new PayloadStore();
  }

  private readable(): void {
    if (this.closed) throw new ShardClosedError();
  }

  /** Closes without a checkpoint (the directory is about to be removed). */
  async drop(): Promise<void> {
    this.closing = true;
    this.stopTimers();
    this.closed = true;
    await Promise.all([...this.vectors.values()].map((s) => s.cancel()));
    await this.exclusive(async () => {
      await this.closeWal();
    });
    for (const s of this.vectors.values()) s.closeIndexes();
    for (const s of this.sparse.values()) s.close();
    this.releaseMemory();
  }

  // -- payload indexes ------------------------------------------------------------------

  /** Bytes of this shard's payloads as JSON text: strict mode's estimate of payload storage. */
  payloadBytes(): number {
    if (this.payloads instanceof DiskPayloadStore) return this.payloads.liveBytes;
    let n = 0;
    for (const [, p] of this.payloads.entries()) if (p !== null) n += Buffer.byteLength(JSON.stringify(p));
    return n;
  }

  async createPayloadIndex(field: string, schema: FieldSchema): Promise<void> {
    await this.exclusive(async () => {
      this.payloadIndex.create(field, schema, this.payloadEntries());
      // on_disk: built in memory, then written to a base file and dropped from memory
      if (indexOnDisk(schema)) await this.payloadIndex.moveToDisk(field, this.opts.dir, () => ++this.fieldIndexFileNo);
      this.indexesChanged = true;
    });
  }

  async dropPayloadIndex(field: string): Promise<void> {
    await this.exclusive(async () => {
      if (this.payloadIndex.drop(field)) this.indexesChanged = true;
    });
  }

  // -- reads ------------------------------------------------------------------------------

  get pointCount(): number {
    return this.tracker.size;
  }

  get lastSeq(): bigint {
    return this.appliedSeq;
  }

  // -- history (for wal_delta transfers) ---------------------------------------------------

  /** This shard's clock map: the highest tick applied per (peer, clock). */
  clocks(): ClockTag[] {
    this.readable();
    return this.clockMap.entries();
  }

  /** The highest tick applied on (peer, clock); 0n when none was. */
  clockTick(peer: bigint, clock: number): bigint {
    return this.clockMap.tickOf(peer, clock);
  }

  /**
   * Takes another replica's replicated clocks as seen: the end of a transfer's copy, whose
   * operations this replica applied as its own untagged writes, so that its clock map
   * never claims a write its data may lack (a copy cut short leaves the map as it was).
   * Not logged: a restart may forget it, which only makes this replica look further behind.
   */
  adoptClocks(tags: readonly ClockTag[]): void {
    this.usable();
    for (const t of tags) {
      if (clockTagProblem(t) !== null) throw new RangeError(`clock tag (${t.peer}, ${t.clock}, ${t.tick}) is not valid`);
      if (isReplicatedClock(t.clock)) this.clockMap.advance(t);
    }
  }

  /**
   * Notes that this replica's data was just restored from a snapshot (its clock map is
   * the snapshot's), and writes a checkpoint that keeps that: another replica may hold
   * ticks above it that the restore rolled back, which this replica's history never
   * had, so a wal_delta from here must prove that it applied the target's newest tick
   * of every clock above it (historyStartFor).
   */
  async markRestored(): Promise<void> {
    await this.exclusive(async () => {
      this.usable();
      this.restoreFloor = ClockMap.fromJSON(this.clockMap.toJSON());
      this.restoreFloorChanged = true;
    });
    // A checkpoint already running may have started before the floor was set.
    await this.checkpoint();
    if (this.restoreFloorChanged) await this.checkpoint();
  }

  /** Resolves once every operation applied so far is durable. */
  async sync(): Promise<void> {
    this.usable();
    await this.syncWal();
  }

  /**
   * The retained WAL: records `oldestSeq`..`lastSeq` can be read (none when oldestSeq
   * is lastSeq + 1). Replay after a restart starts after `checkpointSeq`; the records
   * before it are kept as history only.
   */
  history(): { oldestSeq: bigint; lastSeq: bigint; checkpointSeq: bigint } {
    this.readable();
    const first = this.wal.firstSeq();
    const last = this.wal.lastSeq();
    const lastSeq = last > 0n ? last : this.appliedSeq;
    return { oldestSeq: first > 0n ? first : lastSeq + 1n, lastSeq, checkpointSeq: this.checkpointSeq };
  }

  /**
   * Up to `max` retained records from `fromSeq` on, in order. HistoryGoneError when a
   * checkpoint has dropped `fromSeq` (also when one drops it during the read).
   */
  async readHistory(fromSeq: bigint, max = 512): Promise<HistoryRecord[]> {
    const records = await this.readRetained(fromSeq, max);
    return records.map((r) => ({ seq: r.seq, ...decodeRecord(r.data) }));
  }

  /**
   * Where a replica whose clock map is `seen` must start reading this shard's history
   * (`readHistory`) to get every operation it lacks: the first retained record with a
   * tick above what it has on that record's clock, or lastSeq + 1 when it lacks
   * nothing. Records it has among the later ones are skipped by its `applyTagged`.
   * Null when the retained history cannot prove it is enough: on some clock the
   * replica is behind and the oldest retained record of that clock is not the next
   * tick it needs (older ones were dropped), or untagged records (written before clock
   * tags) are retained, or, since this replica's data was restored from a snapshot, its
   * history does not hold their newest tick of a clock on which they are above the
   * snapshot's (markRestored).
   */
  async historyStartFor(seen: readonly ClockTag[]): Promise<bigint | null> {
    const theirs = new ClockMap();
    for (const t of seen) theirs.advance(t);
    // Replicated clocks only: this shard's own clocks tag untagged writes (the batches that
    // filled it, single-node writes), whose content its replicated clocks account for.
    const behind = new Set<string>();
    for (const t of this.clockMap.entries()) if (isReplicatedClock(t.clock) && theirs.tickOf(t.peer, t.clock) < t.tick) behind.add(clockKey(t.peer, t.clock));
    const { oldestSeq, lastSeq } = this.history();
    // Untagged records were all written before the first tagged one: the oldest tells.
    const oldest = oldestSeq <= lastSeq ? await this.readRetained(oldestSeq, 1) : [];
    if (oldest.length > 0 && recordTag(oldest[0].data) === null) return null;
    if (behind.size === 0) return lastSeq + 1n;
    // Since a restore from a snapshot, this replica's ticks of a clock above the snapshot's
    // are only those it applied itself: where they have a tick above the snapshot's, it
    // may be one the restore rolled back (ticks are never reused, so holding the very same
    // tick proves it is not). There, the retained history must hold their newest tick
    // before the next one counts as the start.
    const floor = this.restoreFloor;
    const mustHold = new Set<string>();
    if (floor !== null) {
      for (const t of theirs.entries()) {
        const k = clockKey(t.peer, t.clock);
        if (behind.has(k) && t.tick > floor.tickOf(t.peer, t.clock)) mustHold.add(k);
      }
    }
    // Records are in WAL order, so the first record found on any lagging clock is the start.
    let start: bigint | null = null;
    const reached = new Set<string>();
    for (let at = oldestSeq; at <= lastSeq && reached.size < behind.size; ) {
      const page = await this.readRetained(at, 512);
      if (page.length === 0) break;
      for (const r of page) {
        const tag = recordTag(r.data);
        if (tag === null) return null;
        const k = clockKey(tag.peer, tag.clock);
        if (!behind.has(k) || reached.has(k)) continue;
        const have = theirs.tickOf(tag.peer, tag.clock);
        if (tag.tick === have) mustHold.delete(k);
        if (tag.tick <= have) continue;
        if (mustHold.has(k)) return null;
        // The first retained record of this clock they lack. A clock's ticks rise
        // through the WAL, so if it is not the next tick they need, that one was in a
        // dropped segment (or never existed: a writer's gap; either way, unprovable).
        if (tag.tick !== have + 1n) return null;
        reached.add(k);
        start ??= r.seq;
      }
      at = page[page.length - 1].seq + 1n;
    }
    return reached.size < behind.size ? null : start;
  }

  /**
   * A record of the history as a wal_delta sends it: without the vectors of names this
   * shard has no store for any more (deleted since it was written), which a target that
   * also applied the deletion would refuse (checkVectors); the same object when it
   * carries none.
   */
  withCurrentNames(op: ShardOperation): ShardOperation {
    if (op.kind !== 'upsert' && op.kind !== 'update_vectors') return op;
    const gone = (p: { vectors: NamedVectors; sparse?: SparseVectors }) => [...p.vectors.keys()].some((n) => !this.vectors.has(n)) || (p.sparse !== undefined && [...p.sparse.keys()].some((n) => !this.sparse.has(n)));
    if (!op.points.some(gone)) return op;
    const keep = <T extends { vectors: NamedVectors; sparse?: SparseVectors }>(p: T): T => {
      const out: T = { ...p, vectors: new Map([...p.vectors].filter(([n]) => this.vectors.has(n))) };
      if (p.sparse !== undefined) out.sparse = new Map([...p.sparse].filter(([n]) => this.sparse.has(n)));
      return out;
    };
    return op.kind === 'upsert' ? { kind: 'upsert', points: op.points.map(keep) } : { kind: 'update_vectors', points: op.points.map(keep) };
  }

  private async readRetained(fromSeq: bigint, max: number): Promise<Array<{ seq: bigint; data: Buffer }>> {
    this.readable();
    const { oldestSeq } = this.history();
    if (fromSeq < oldestSeq) throw new HistoryGoneError(fromSeq, oldestSeq);
    try {
      return await this.wal.readFrom(fromSeq, max);
    } catch (err) {
      if (this.closed) throw new ShardClosedError();
      if ((err as { code?: string }).code === 'QUIVER_NOT_FOUND') throw new HistoryGoneError(fromSeq, this.wal.firstSeq());
      throw err;
    }
  }

  has(key: PointKey): boolean {
    this.readable();
    return this.tracker.has(key);
  }

  entry(key: PointKey): StoredPoint | null {
    this.readable();
    const offset = this.tracker.offsetOf(key);
    if (offset === null) return null;
    const e = this.tracker.at(offset)!;
    return { key: e.id, offset, version: e.version };
  }

  /** The id and version of the point at `offset` as numbers, into `out`, when both are integers below 2^53; else false (use entryAt). See IdTracker.numbersAt. */
  numbersAt(offset: bigint, out: { id: number; version: number }): boolean {
    return this.tracker.numbersAt(offset, out);
  }

  entryAt(offset: bigint): StoredPoint | null {
    const e = this.tracker.at(offset);
    return e ? { key: e.id, offset, version: e.version } : null;
  }

  payloadOf(offset: bigint): Readonly<Payload> | null {
    return this.payloads.has(offset) ? this.payloads.get(offset) : null;
  }

  /** As payloadOf; on-disk payloads are read on the thread pool, off the event loop. */
  async payloadOfAsync(offset: bigint): Promise<Readonly<Payload> | null> {
    this.readable();
    if (this.payloads instanceof DiskPayloadStore) return this.payloads.getAsync(offset);
    return this.payloadOf(offset);
  }

  async vectorsOf(offset: bigint, names: string[]): Promise<NamedVectors> {
    if (this.closed) throw new ShardClosedError();
    const out: NamedVectors = new Map();
    try {
      for (const n of names) {
        const v = await this.vectors.get(n)?.get(offset);
        if (v) out.set(n, v);
      }
    } catch (err) {
      throw this.closed ? new ShardClosedError() : err;
    }
    return out;
  }

  /** The sparse vectors `names` of the point at `offset` (those it carries). */
  async sparseOf(offset: bigint, names: string[]): Promise<SparseVectors> {
    if (this.closed) throw new ShardClosedError();
    const out: SparseVectors = new Map();
    try {
      for (const n of names) {
        const v = await this.sparse.get(n)?.get(offset);
        if (v) out.set(n, v);
      }
    } catch (err) {
      throw this.closed ? new ShardClosedError() : err;
    }
    return out;
  }

  private predicate(filter: Filter): (e: TrackerEntry) => boolean {
    const pred: PointPredicate = compileFilter(filter, (names, m) => this.payloadIndex.textMatcher(names, m));
    return (e) =>
      pred(pointIdToJson(e.id) as number | string, this.payloads.has(e.offset) ? (this.payloads.get(e.offset) as Payload) : null, (name) =>
        (this.vectors.get(name) ?? this.sparse.get(name))?.present.has(e.offset) ?? false,
      );
  }

  /** Offsets of the points matching `filter` (all points when null), in no particular order. */
  matching(filter: Filter | null): bigint[] {
    const out: bigint[] = [];
    this.scan(filter, (off) => {
      out.push(off);
      return false;
    });
    return out;
  }

  /** Whether any point matches (stops at the first: a token's value_exists check on every request). */
  anyMatch(filter: Filter | null): boolean {
    let found = false;
    this.scan(filter, () => (found = true));
    return found;
  }

  /** Calls `visit` with the offset of each matching point until it returns true: payload indexes narrow the candidates, the predicate decides. */
  private scan(filter: Filter | null, visit: (offset: bigint) => boolean): void {
    this.readable();
    if (filter === null) {
      for (const e of this.tracker.unordered()) if (visit(e.offset)) return;
      return;
    }
    const test = this.predicate(filter);
    const ids = requiredIds(filter);
    if (ids !== null) {
      // A required has_id list: only those points can match (the predicate still decides).
      const seen = new Set<bigint>();
      for (const id of ids) {
        const off = this.tracker.offsetOf(id);
        if (off === null || seen.has(off)) continue;
        seen.add(off);
        const e = this.tracker.at(off);
        if (e && !e.removed && test(e) && visit(off)) return;
      }
      return;
    }
    const cands = this.payloadIndex.candidates(filter);
    if (cands !== null) {
      for (const off of cands) {
        const e = this.tracker.at(off);
        if (e && test(e) && visit(off)) return;
      }
    } else {
      for (const e of this.tracker.unordered()) if (test(e) && visit(e.offset)) return;
    }
  }

  /** Resolves explicit ids or a filter to the point keys present in this shard. */
  resolve(ids: PointKey[] | null, filter: Filter | null): PointKey[] {
    this.readable();
    if (ids !== null) {
      let keys = ids.filter((k) => this.tracker.has(k));
      if (filter !== null) {
        const test = this.predicate(filter);
        keys = keys.filter((k) => test(this.tracker.at(this.tracker.offsetOf(k)!)!));
      }
      return keys;
    }
    return this.matching(filter).map((o) => this.tracker.at(o)!.id);
  }

  /**
   * Up to `limit` points by the value of a range-indexed payload field (scroll and
   * query `order_by`); a point with several values appears once per value, as in the
   * reference. Throws OrderByError when the field has no range index.
   */
  ordered(key: string, opts: OrderOptions, filter: Filter | null, limit: number): Array<StoredPoint & { value: number }> {
    this.readable();
    const test = filter ? this.predicate(filter) : null;
    const out: Array<StoredPoint & { value: number }> = [];
    for (const { offset, value } of this.payloadIndex.orderValues(key, opts)) {
      if (out.length >= limit) break;
      const e = this.tracker.at(offset);
      if (!e || (test && !test(e))) continue;
      out.push({ key: e.id, offset, version: e.version, value });
    }
    return out;
  }

  count(filter: Filter | null): number {
    this.readable();
    return filter === null ? this.tracker.size : this.matching(filter).length;
  }

  /** Points per value of the payload index on `key` among those matching `filter` (PayloadIndexes.facet; FacetError without a suitable index). */
  facet(key: string, filter: Filter | null): Map<FacetValue, number> {
    this.readable();
    this.payloadIndex.facetCheck(key);
    return this.payloadIndex.facet(key, filter === null ? null : this.matching(filter));
  }

  /**
   * A digest of the shard's content: SHA-256 over every point in id order (its id, its
   * payload as JSON with keys sorted, and each named vector's f32 bytes), with the point
   * count. Two replicas with the same points, payloads and vectors have the same digest,
   * whatever order their writes arrived in. Versions are left out: each replica numbers
   * its own operations.
   */
  async digest(): Promise<{ points: number; digest: string }> {
    this.readable();
    const h = createHash('sha256');
    const names = [...this.vectors.keys()].sort();
    const sparseNames = [...this.sparse.keys()].sort();
    let n = 0;
    for (const e of this.tracker.sortedById()) {
      if (e.removed) continue;
      n++;
      h.update(`${e.id.kind}:${e.id.key}\n`);
      h.update(canonicalJson(this.payloadOf(e.offset) ?? null));
      const vs = await this.vectorsOf(e.offset, names);
      for (const name of names) {
        const v = vs.get(name);
        h.update(`\n${name}:`);
        if (v) h.update(Buffer.from(v.buffer, v.byteOffset, v.byteLength));
      }
      if (sparseNames.length > 0) {
        const ss = await this.sparseOf(e.offset, sparseNames);
        for (const name of sparseNames) {
          const v = ss.get(name);
          h.update(`\nsparse ${name}:`);
          if (v) {
            h.update(Buffer.from(v.indices.buffer, v.indices.byteOffset, v.indices.byteLength));
            h.update(Buffer.from(v.values.buffer, v.values.byteOffset, v.values.byteLength));
          }
        }
      }
      h.update('\n');
    }
    return { points: n, digest: h.digest('hex') };
  }

  /**
   * Points in scroll order starting at `from` (inclusive), at most `limit` + 1 (the
   * extra one is the next page offset).
   */
  scroll(from: PointKey | null, limit: number, filter: Filter | null, cmp: (a: PointKey, b: PointKey) => number): StoredPoint[] {
    this.readable();
    if (filter !== null) {
      // An indexed filter with few candidates (an eighth of the points at most, or few
      // enough that sorting them beats walking about (limit + 1) * points / est points in
      // id order): check and sort the candidates instead of testing points in id order.
      const est = this.payloadIndex.estimate(filter);
      const n = this.tracker.size;
      if (est !== null && (est * 8 <= n || est * est * 4 < (limit + 1) * n)) return this.scrollCandidates(from, limit, filter, cmp);
    }
    const sorted = this.tracker.sortedById();
    let lo = 0;
    if (from) {
      let hi = sorted.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if (cmp(sorted[mid].id, from) < 0) lo = mid + 1;
        else hi = mid;
      }
    }
    const test = filter ? this.predicate(filter) : null;
    const out: StoredPoint[] = [];
    for (let i = lo; i < sorted.length && out.length <= limit; i++) {
      const e = sorted[i];
      if (e.removed || (test && !test(e))) continue;
      out.push({ key: e.id, offset: e.offset, version: e.version });
    }
    return out;
  }

  /** Top points by dot product with a sparse query over sparse vector `name`, among those matching `filter`. */
  async searchSparse(name: string, query: SparseVec, k: number, filter: Filter | null): Promise<Hit[]> {
    if (this.closed) throw new ShardClosedError();
    try {
      const store = this.sparse.get(name);
      if (!store) return [];
      let allow: BigUint64Array | null = null;
      if (filter !== null) {
        const offs = this.matching(filter);
        if (offs.length === 0) return [];
        allow = BigUint64Array.from(offs);
      }
      // The engine breaks ties by label; the reference's order is by point id. Ask for
      // more until every hit tied with the k-th is in, then order ties by id.
      let want = k;
      let hits = await store.search(query, want, allow);
      if (hits.length < k || k === 0) return this.byScoreThenId(hits);
      const kth = hits[k - 1].score;
      while (hits.length === want && hits[want - 1].score === kth) {
        want = Math.min(want * 2, MAX_TIE_HITS);
        if (want === hits.length) break;
        hits = await store.search(query, want, allow);
      }
      return this.byScoreThenId(hits).slice(0, k);
    } catch (err) {
      throw this.closed ? new ShardClosedError() : err;
    }
  }

  /**
   * Top points by a rule over sparse examples (over sparse vector `name`, among those
   * matching `filter`), by exact scan: one exact search per example gives every point's
   * dot product with it (0 for a point sharing no dimension), and each point carrying
   * the vector is scored by the rule; ties by point id.
   */
  async searchSparseRule(name: string, rule: ScoreRule, positives: number, examples: SparseVec[], k: number, filter: Filter | null): Promise<Hit[]> {
    if (this.closed) throw new ShardClosedError();
    try {
      const store = this.sparse.get(name);
      if (!store || k === 0) return [];
      let allow: BigUint64Array | null = null;
      if (filter !== null) {
        const offs = this.matching(filter);
        if (offs.length === 0) return [];
        allow = BigUint64Array.from(offs);
      }
      const labels = allow === null ? [...store.present] : Array.from(allow).filter((l) => store.present.has(l));
      if (labels.length === 0) return [];
      const sims = new Map<bigint, Float64Array>();
      for (const l of labels) sims.set(l, new Float64Array(examples.length));
      for (let j = 0; j < examples.length; j++) {
        for (const h of await store.search(examples[j], labels.length, allow)) {
          const row = sims.get(h.label);
          if (row) row[j] = h.score;
        }
      }
      const hits: Hit[] = labels.map((label) => ({ label, score: ruleScore(rule, positives, sims.get(label)!) }));
      return this.byScoreThenId(hits).slice(0, k);
    } catch (err) {
      throw this.closed ? new ShardClosedError() : err;
    }
  }

  /** Hits sorted by score (larger first), ties by point id ascending. */
  private byScoreThenId(hits: Hit[]): Hit[] {
    const keys = new Map<bigint, PointKey | undefined>();
    for (const h of hits) keys.set(h.label, this.tracker.at(h.label)?.id);
    return hits.sort((a, b) => {
      if (a.score !== b.score) return b.score - a.score;
      const ka = keys.get(a.label);
      const kb = keys.get(b.label);
      return ka === undefined || kb === undefined ? 0 : compareKeys(ka, kb);
    });
  }

  private scrollCandidates(from: PointKey | null, limit: number, filter: Filter, cmp: (a: PointKey, b: PointKey) => number): StoredPoint[] {
    const test = this.predicate(filter);
    const hits: TrackerEntry[] = [];
    for (const off of this.payloadIndex.candidates(filter) ?? []) {
      const e = this.tracker.at(off);
      if (!e || e.removed || (from !== null && cmp(e.id, from) < 0) || !test(e)) continue;
      hits.push(e);
    }
    hits.sort((a, b) => cmp(a.id, b.id));
    return hits.slice(0, limit + 1).map((e) => ({ key: e.id, offset: e.offset, version: e.version }));
  }

  /** Nearest points by one named vector; `allow` null means no filter. */
  async search(name: string, req: Omit<VectorSearch, 'allow'>, filter: Filter | null): Promise<Hit[]> {
    if (this.closed) throw new ShardClosedError();
    try {
      const store = this.vectors.get(name);
      if (!store) return [];
      let allow: BigUint64Array | undefined;
      if (filter !== null) {
        const offs = this.matching(filter);
        if (offs.length === 0) return [];
        allow = BigUint64Array.from(offs);
      }
      // Built field by field, not as a spread with `allow` added: V8 gives each object a
      // spread and then extended a map of its own, and every later property read of it then
      // misses the inline caches (measured: about 3% of the event loop under query load).
      const opts: EveryField<VectorSearch> = {
        vector: req.vector,
        k: req.k,
        ef: req.ef,
        exact: req.exact,
        allow,
        oversampling: req.oversampling,
        rescore: req.rescore,
        ignoreQuantization: req.ignoreQuantization,
        rule: req.rule,
      };
      return await store.search(opts);
    } catch (err) {
      // The shard closed under the search (shutdown, delete, snapshot swap): retry later.
      throw this.closed ? new ShardClosedError() : err;
    }
  }
}

/**
 * What apply() would refuse, checked before the operation reaches the WAL (the API
 * checks all of it first; this keeps a record that memory cannot take out of the log
 * whatever the caller).
 */
function checkOperation(op: ShardOperation, stores: ReadonlyMap<string, VectorStore>, sparse: ReadonlyMap<string, SparseStore>): void {
  switch (op.kind) {
    case 'upsert':
      for (const p of op.points) if (p.payload) validatePayload(p.payload);
      checkVectors(op.points, stores, sparse);
      return;
    case 'update_vectors':
      checkVectors(op.points, stores, sparse);
      return;
    case 'set_payload':
      validatePayload(op.payload);
      if (op.key !== null) parsePath(op.key);
      return;
    case 'overwrite_payload':
      validatePayload(op.payload);
      return;
    case 'delete_payload':
      for (const k of op.keys) parsePath(k);
      return;
    default:
      return;
  }
}

/**
 * Refuses (before anything is logged) a vector the shard's store of that name would
 * refuse when applying, or a name it has no store for: the collection checks vectors
 * when a write starts, but a named vector deleted and re-created with another shape
 * meanwhile, or a peer whose consensus has not applied such a change yet, can send one.
 * Logged, a misfit would stop the shard and fail every replay; a name without a store
 * would be skipped when applied while the write's clock tick counts as seen, so a
 * replica whose consensus has yet to apply the name's creation would never get those
 * vectors (no recovery looks below a replica's ticks). Refused as this replica's fault
 * (ShardUnavailableError, 503): the writer marks a remote replica that refuses it Dead,
 * so it is recovered once it has the name rather than left without a write the others
 * took; a local write answers 503 and its client retries against the new config. (A
 * replica whose peer applied the name's deletion before the writer's did is recovered
 * needlessly then; nothing is lost.) WAL replay does not come here: a replayed record
 * of a name deleted since is skipped.
 */
function checkVectors(points: ReadonlyArray<{ vectors: NamedVectors; sparse?: SparseVectors }>, stores: ReadonlyMap<string, VectorStore>, sparse: ReadonlyMap<string, SparseStore>): void {
  for (const p of points) {
    if (p.sparse) {
      for (const name of p.sparse.keys()) {
        if (!sparse.has(name)) throw new ShardUnavailableError(`sparse vector ${JSON.stringify(name)}: this replica has no such vector; the collection's vectors changed while the write was under way (retry it)`);
      }
    }
    for (const [name, v] of p.vectors) {
      const spec = stores.get(name)?.spec;
      const label = name === '' ? 'vector' : `vector ${JSON.stringify(name)}`;
      if (spec === undefined) throw new ShardUnavailableError(`${label}: this replica has no such vector; the collection's vectors changed while the write was under way (retry it)`);
      const fits = spec.multivector ? v.length > 0 && v.length % spec.dim === 0 : v.length === spec.dim;
      if (!fits) throw new ShardUnavailableError(`${label}: ${v.length} values do not fit this replica's dimension ${spec.dim}${spec.multivector ? ' (a multivector)' : ''}; the vector's configuration changed while the write was under way (retry it)`);
      if (spec.datatype === 'float16' && spec.distance !== 'Cosine') {
        for (const x of v) if (!(Math.abs(x) < 65520)) throw new ShardUnavailableError(`${label}: value ${x} is out of this replica's float16 range; the vector's configuration changed while the write was under way (retry it)`);
      }
    }
  }
}

/** Vectors of one operation gathered per name, written to each VectorStore in one call. */
class VectorWrites {
  private readonly byName = new Map<string, { labels: bigint[]; vecs: Float32Array[] }>();

  add(name: string, label: bigint, vector: Float32Array): void {
    let e = this.byName.get(name);
    if (!e) this.byName.set(name, (e = { labels: [], vecs: [] }));
    e.labels.push(label);
    e.vecs.push(vector);
  }

  async apply(stores: Map<string, VectorStore>): Promise<void> {
    await Promise.all(
      [...this.byName].map(([name, e]) => {
        const store = stores.get(name)!;
        // A multivector store gets the rows of each point's list.
        const counts = store.spec.multivector ? Uint32Array.from(e.vecs, (v) => v.length / store.spec.dim) : undefined;
        return store.upsert(BigUint64Array.from(e.labels), concat(e.vecs), counts);
      }),
    );
  }
}

/** The vectors one after the other: a view when they already lie so in one buffer (a request body's arena), else a copy. */
function concat(vs: Float32Array[]): Float32Array {
  if (vs.length === 1) return vs[0];
  const runs = byteRuns(vs);
  if (runs.length === 1) return new Float32Array(runs[0].buffer, runs[0].byteOffset, runs[0].byteLength / 4);
  let n = 0;
  for (const v of vs) n += v.length;
  const out = new Float32Array(n);
  const bytes = new Uint8Array(out.buffer);
  let at = 0;
  for (const r of runs) {
    bytes.set(r, at);
    at += r.byteLength;
  }
  return out;
}

/** Most hits a sparse search gathers to order ties at the k-th score by id (the engine counts in 32 bits). */
const MAX_TIE_HITS = 0xffff_ffff;

const STATE_FILE_RE = /^state-[0-9]{1,20}\.bin$/;

/** Whether a payload index is kept on disk (`on_disk: true`). */
function indexOnDisk(schema: FieldSchema): boolean {
  return schema.params?.on_disk === true;
}
const INDEX_FILE_RE = /^vec-[0-9]{1,9}-(appendable|frozen|indexed)-[0-9]{1,20}-[0-9]{1,15}\.qvi$/;

/**
 * What is wrong with a parsed checkpoint.json, or null. File names must be ones this
 * code writes (no path separators: a crafted snapshot cannot name files elsewhere).
 */
export function checkpointProblem(cp: unknown): string | null {
  if (typeof cp !== 'object' || cp === null) return 'not an object';
  const c = cp as Partial<CheckpointFile>;
  if (c.format !== 1) return `unknown format ${JSON.stringify(c.format)}`;
  if (typeof c.applied_seq !== 'string' || !/^[0-9]{1,20}$/.test(c.applied_seq)) return 'applied_seq is not a sequence number';
  if (c.file_no !== undefined && (!Number.isSafeInteger(c.file_no) || c.file_no < 0)) return 'file_no is not a file number';
  if (c.clocks !== undefined) {
    const problem = clockMapJsonProblem(c.clocks);
    if (problem !== null) return problem;
  }
  if (c.restored_clocks !== undefined) {
    const problem = clockMapJsonProblem(c.restored_clocks);
    if (problem !== null) return `restored_clocks: ${problem}`;
  }
  if (typeof c.state !== 'string' || !STATE_FILE_RE.test(c.state)) return `state ${JSON.stringify(c.state)} is not a state file name`;
  if (typeof c.vectors !== 'object' || c.vectors === null) return 'vectors is not an object';
  for (const [name, f] of Object.entries(c.vectors)) {
    if (typeof f !== 'object' || f === null || typeof f.appendable !== 'string') return `vectors[${JSON.stringify(name)}] has no appendable index`;
    for (const [role, file] of Object.entries(f)) {
      if (role === 'originals') {
        if (file !== null && (typeof file !== 'string' || !ORIGINALS_FILE_RE.test(file))) return `${JSON.stringify(file)} is not an originals file name`;
        continue;
      }
      if (role === 'graph') {
        if (file !== null && (typeof file !== 'string' || !GRAPH_FILE_RE.test(file))) return `${JSON.stringify(file)} is not a graph file name`;
        continue;
      }
      if (!['appendable', 'frozen', 'indexed'].includes(role)) return `vectors[${JSON.stringify(name)}] has an unknown index role ${JSON.stringify(role)}`;
      if (file !== null && (typeof file !== 'string' || !INDEX_FILE_RE.test(file))) return `${JSON.stringify(file)} is not an index file name`;
    }
  }
  if (c.sparse !== undefined) {
    if (typeof c.sparse !== 'object' || c.sparse === null) return 'sparse is not an object';
    for (const file of Object.values(c.sparse)) {
      if (typeof file !== 'string' || !SPARSE_FILE_RE.test(file)) return `${JSON.stringify(file)} is not a sparse index file name`;
    }
  }
  if (c.payloads !== undefined) {
    const p = c.payloads as Partial<DiskPayloadRef> | null;
    if (typeof p !== 'object' || p === null) return 'payloads is not an object';
    if (typeof p.data !== 'string' || !PAYLOAD_DATA_RE.test(p.data)) return `${JSON.stringify(p.data)} is not a payload data file name`;
    if (typeof p.index !== 'string' || !PAYLOAD_INDEX_RE.test(p.index)) return `${JSON.stringify(p.index)} is not a payload index file name`;
    if (!Number.isSafeInteger(p.length) || (p.length as number) < 0) return 'payloads.length is not a byte count';
  }
  if (c.payload_indexes !== undefined) {
    if (typeof c.payload_indexes !== 'object' || c.payload_indexes === null) return 'payload_indexes is not an object';
    for (const [field, f] of Object.entries(c.payload_indexes)) {
      if (typeof f !== 'object' || f === null) return `payload_indexes[${JSON.stringify(field)}] is not an object`;
      for (const name of [f.base, f.delta]) {
        if (typeof name !== 'string' || !FIELD_INDEX_FILE_RE.test(name)) return `${JSON.stringify(name)} is not a payload index file name`;
      }
      if (f.tokenizer !== undefined && typeof f.tokenizer !== 'string') return `payload_indexes[${JSON.stringify(field)}].tokenizer is not a string`;
    }
  }
  return null;
}

/** The state and index files a checkpoint names. */
export function checkpointFiles(cp: CheckpointFile): string[] {
  const out = [cp.state];
  // Side files of mapped originals before the index files that name them: a snapshot
  // archive has them in this order, so a recovery's preload finds the side file there.
  for (const f of Object.values(cp.vectors)) if (f.originals) out.push(f.originals);
  for (const f of Object.values(cp.vectors)) if (f.graph) out.push(f.graph);
  for (const f of Object.values(cp.vectors)) for (const n of [f.appendable, f.frozen, f.indexed]) if (n) out.push(n);
  for (const f of Object.values(cp.sparse ?? {})) out.push(f);
  if (cp.payloads) out.push(cp.payloads.data, cp.payloads.index);
  for (const f of Object.values(cp.payload_indexes ?? {})) out.push(f.base, f.delta);
  return out;
}

/** The name of a WAL segment file whose first record is `firstSeq` (an empty one continues the numbering there). */
export function walSegmentName(firstSeq: bigint): string {
  return `${firstSeq.toString().padStart(20, '0')}.wal`;
}

async function readCheckpoint(dir: string): Promise<CheckpointFile | null> {
  let raw: string;
  try {
    raw = await fs.readFile(path.join(dir, 'checkpoint.json'), 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  const cp = JSON.parse(raw) as CheckpointFile;
  const problem = checkpointProblem(cp);
  if (problem !== null) throw new Error(`${path.join(dir, 'checkpoint.json')} is not a valid Quiver checkpoint: ${problem}`);
  return cp;
}

/**
 * `magic u32 | crc32c u32 | tracker length u32 | tracker | payloads length u32 |
 * payloads | vector count u32 | per vector: name length u32, name, label count u32,
 * labels u64...` (tracker and payloads carry their own checksums too). The label
 * lists say which points carry each named vector. Version 1 files (no lengths after
 * the tracker, no label lists) still load.
 */
/**
 * State file, version 3 ("QST3"), written as a stream of pieces (for a million points
 * the tracker and payloads are tens of MB; nothing that size is built in memory):
 * `magic u32 | tracker length u32 | tracker | vector count u32 | per vector: name
 * length u32, name, label count u32, labels u64... | payloads (to the trailer) |
 * crc32c u32 of everything before it`. The tracker and payloads carry their own
 * checksums too. Versions 1 and 2 (checksum in the header) still load.
 */
function* encodeState(tracker: IdTracker, payloads: PayloadStore, vectors: Map<string, VectorStore>): Generator<Uint8Array> {
  let crc = CRC32C_INIT;
  const emit = (b: Uint8Array): Uint8Array => {
    crc = crc32cUpdate(crc, b);
    return b;
  };
  const u32 = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n, 0);
    return b;
  };
  yield emit(u32(STATE_MAGIC_V3));
  yield emit(u32(tracker.byteLength()));
  for (const c of tracker.toChunks()) yield emit(c);
  yield emit(u32(vectors.size));
  for (const [name, v] of vectors) {
    const n = Buffer.from(name, 'utf8');
    yield emit(u32(n.length));
    yield emit(n);
    yield emit(u32(v.present.size));
    const labels = new BigUint64Array(Math.min(v.present.size, 65536));
    let k = 0;
    for (const l of v.present) {
      labels[k++] = l;
      if (k === labels.length) {
        yield emit(new Uint8Array(labels.buffer.slice(0)));
        k = 0;
      }
    }
    if (k > 0) yield emit(new Uint8Array(labels.buffer.slice(0, k * 8)));
  }
  for (const c of payloads.toChunks()) yield emit(c);
  yield u32(crc32cFinish(crc));
}

/** Reads and decodes a shard state file (in slices: the event loop keeps turning). */
export async function decodeStateFile(file: string): Promise<ShardState> {
  const buf = await fs.readFile(file);
  return runSliced(decodeState(buf, path.basename(file)));
}

/** A copy of `n` little-endian u64 at `buf[at..]`, as an array (whatever the alignment). */
function u64Array(buf: Buffer, at: number, n: number): BigUint64Array {
  const out = new BigUint64Array(n);
  if (LITTLE_ENDIAN) new Uint8Array(out.buffer).set(buf.subarray(at, at + n * 8));
  else for (let j = 0; j < n; j++) out[j] = buf.readBigUInt64LE(at + j * 8);
  return out;
}

const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

/** The per-vector label lists of a state file at `buf[at..limit)`; returns them and where they end. */
function decodePresent(buf: Buffer, at: number, limit: number, name: string): { present: Map<string, BigUint64Array>; at: number } {
  const truncated = () => new Error(`${name}: truncated`);
  if (at + 4 > limit) throw truncated();
  const count = buf.readUInt32LE(at);
  at += 4;
  const present = new Map<string, BigUint64Array>();
  for (let i = 0; i < count; i++) {
    if (at + 4 > limit) throw truncated();
    const nlen = buf.readUInt32LE(at);
    if (at + 4 + nlen + 4 > limit) throw truncated();
    const vname = buf.toString('utf8', at + 4, at + 4 + nlen);
    at += 4 + nlen;
    const n = buf.readUInt32LE(at);
    at += 4;
    if (at + n * 8 > limit) throw truncated();
    present.set(vname, u64Array(buf, at, n));
    at += n * 8;
  }
  return { present, at };
}

function* decodeStateV3(buf: Buffer, name: string): Steps<ShardState> {
  const truncated = () => new Error(`${name}: truncated`);
  const end = buf.length - 4;
  if ((yield* crc32cSteps(buf, 0, end)) !== buf.readUInt32LE(end)) throw new Error(`${name}: checksum mismatch (the file is corrupt)`);
  // The file's checksum covers the tracker's and the payloads' own: they are not computed again.
  const covered = { checksumCovered: true };
  let at = 4;
  const tlen = buf.readUInt32LE(at);
  at += 4;
  if (at + tlen + 4 > end) throw truncated();
  const tracker = yield* IdTracker.decode(buf.subarray(at, at + tlen), covered);
  at += tlen;
  const lists = decodePresent(buf, at, end, name);
  const payloads = yield* PayloadStore.decode(buf.subarray(lists.at, end), covered);
  return { tracker, payloads, present: lists.present };
}

function* decodeState(buf: Buffer, name: string): Steps<ShardState> {
  const magic = buf.length >= 12 ? buf.readUInt32LE(0) : 0;
  if (magic === STATE_MAGIC_V3) return yield* decodeStateV3(buf, name);
  if (magic !== STATE_MAGIC && magic !== STATE_MAGIC_V1) throw new Error(`${name}: not a Quiver shard state file`);
  if ((yield* crc32cSteps(buf, 8)) !== buf.readUInt32LE(4)) throw new Error(`${name}: checksum mismatch (the file is corrupt)`);
  const truncated = () => new Error(`${name}: truncated`);
  const tlen = buf.readUInt32LE(8);
  if (12 + tlen > buf.length) throw truncated();
  const tracker = yield* IdTracker.decode(buf.subarray(12, 12 + tlen));
  if (magic === STATE_MAGIC_V1) return { tracker, payloads: yield* PayloadStore.decode(buf.subarray(12 + tlen)), present: null };
  let at = 12 + tlen;
  if (at + 4 > buf.length) throw truncated();
  const plen = buf.readUInt32LE(at);
  if (at + 4 + plen + 4 > buf.length) throw truncated();
  const payloads = yield* PayloadStore.decode(buf.subarray(at + 4, at + 4 + plen));
  at += 4 + plen;
  const lists = decodePresent(buf, at, buf.length, name);
  if (lists.at !== buf.length) throw new Error(`${name}: ${buf.length - lists.at} unexpected bytes at the end`);
  return { tracker, payloads, present: lists.present };
}

/**
 * Which labels the indexes of vector `name` keep at load (VectorStore.load): those of
 * live points, and of these only the ones the state lists as carrying the vector
 * when it lists them (format 1 files do not). When the offsets are dense enough, one
 * byte per offset answers; otherwise the tracker and a set of the listed labels do.
 * In steps (runSliced). Exported for tests.
 */
export function* keepFilter(state: ShardState, name: string): Steps<(label: bigint) => boolean> {
  const { tracker } = state;
  const listed = state.present?.get(name) ?? null;
  if (listed === null) return (l) => tracker.at(l) !== undefined;
  const limit = Number(tracker.nextOffset);
  if (limit <= Math.max(1 << 20, 8 * tracker.size)) {
    // 1: a live offset; 2: a live offset the state lists for this vector.
    const marks = new Uint8Array(limit);
    let n = 0;
    for (const o of tracker.offsetNumbers()) {
      marks[o] = 1;
      if ((++n & 65535) === 0) {
        countWork(65536);
        yield;
      }
    }
    countWork(n & 65535);
    for (let i = 0; i < listed.length; i++) {
      if ((i & 65535) === 65535) {
        countWork(65536);
        yield;
      }
      const l = listed[i];
      if (l < limit) {
        const o = Number(l);
        if (marks[o] === 1) marks[o] = 2;
      }
    }
    return (l) => l < limit && marks[Number(l)] === 2;
  }
  const set = new LabelSet();
  for (let i = 0; i < listed.length; i++) {
    if ((i & 65535) === 65535) {
      countWork(65536);
      yield;
    }
    set.add(listed[i]);
  }
  return (l) => set.has(l) && tracker.at(l) !== undefined;
}

/** JSON with object keys sorted at every level (the same value always gives the same text). */
function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}
