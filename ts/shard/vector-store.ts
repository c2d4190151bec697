/**
 * The vectors of one name in one shard, kept in up to three engine indexes:
 *
 *  - `appendable`: a flat index (no graph) that takes every write; adding is a copy,
 *    and it is searched by exact scan. Small collections live here only.
 *  - `frozen`: while the optimizer indexes, the former appendable index, read-only
 *    except for deletes, still searched exactly.
 *  - `indexed`: the HNSW index (quantized when configured) that the optimizer moves
 *    frozen points into, and rebuilds without deleted slots (vacuum).
 *
 * On-disk vectors (`on_disk: true`, or `memmap_threshold` exceeded; quantized vectors
 * on the native backend only): the `indexed` index keeps its f32 originals in a
 * memory-mapped file of the shard directory (`orig-<n>-<hex>.f32`), which every add
 * appends to; its codes and graph stay in memory. A rebuild (vacuum) writes a new
 * file. The flat indexes stay in memory: they are bounded by the indexing threshold.
 * A checkpoint's index file names the side file and the vectors it covers; the file
 * stays on disk while a checkpoint, a save or a live index uses it
 * (`savedFiles`/`liveFiles`), and a later save of a longer file never changes what an
 * earlier one covers (appends only). On WASM (no mmap) the originals stay in memory.
 *
 * On-disk graph (`hnsw_config.on_disk: true`, native only): once the optimizer has
 * built or grown the `indexed` index, a `place` job moves its level-0 links to a file
 * written once and memory-mapped read-only (`graph-<n>-<hex>.links`). The engine never
 * writes that file again: an add (the optimizer merging more points in) copies the
 * links back into memory, and the next `place` maps them to a new file; deletes keep
 * them mapped. A checkpoint names the graph file its saved index file names
 * (`savedGraph`), and keeps it until no checkpoint or live index uses it.
 *
 * A point is live in exactly one of them, except while a move copies frozen points
 * into `indexed`. Each index has the set of labels it serves (`labels`); a copy joins
 * the target's set only when the job ends, so searches ignore hits of an index that
 * are not in its set (copies in flight, or stale copies a failed job left behind).
 * Writes during a job that take a point out of the job's source are remembered in
 * `dirty`; the job deletes those from its result before it is swapped in.
 *
 * Owns: which index holds a point, the optimizer jobs, search merging, and the files
 * of a checkpoint. Must never: decide when a write is durable (the shard's WAL does)
 * or run a mutation outside `exclusive` that another mutation could race with.
 */

import * as path from 'node:path';
import * as fsp from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';

import * as os from 'node:os';

import type { Datatype, Distance, Engine, IndexOptions, IndexStats, Quantization, RuleQuery, ScoreRule, SearchOptions, SearchResult, VectorIndex } from '../../bindings/engine';
import { indexGraphFile } from '../../bindings/wasm-storage';

import { LabelSet } from './label-set';
import { OptimizationLog, segmentUuid, type OptimizationInfo, type PendingInfo, type SegmentInfo } from './optimization-log';
import { MAX_ENGINE_COUNT } from './limits';
import { countWork, watchGrowth } from '../common/work';
import { runSliced, type Steps } from './slices';

/** What an index of one named vector is built with. */
export interface VectorSpec {
  name: string;
  dim: number;
  distance: Distance;
  m: number;
  efConstruct: number;
  fullScanThresholdKb: number;
  quantization: Quantization;
  /** KiB of unindexed vectors above which the optimizer builds the HNSW index; 0 = never. */
  indexingThresholdKb: number;
  maxIndexingThreads: number;
  deletedThreshold: number;
  vacuumMinVectorNumber: number;
  /** Element type the engine stores the vectors in (default float32). */
  datatype?: Datatype;
  /**
   * Keep the HNSW index's f32 originals in a memory-mapped file (the reference's
   * `on_disk: true`); quantized vectors only (the collection layer refuses it without).
   */
  onDisk?: boolean;
  /** KiB of vectors above which the HNSW index's originals go to a mapped file as with onDisk (0/undefined: never). */
  memmapThresholdKb?: number;
  /**
   * Keep the HNSW index's level-0 links in a memory-mapped file (the reference's
   * `hnsw_config.on_disk: true`); graph indexes of single vectors, native backend.
   */
  graphOnDisk?: boolean;
  /**
   * Points hold lists of vectors (flat, rows of `dim`), scored by MaxSim. The store then
   * keeps one engine index that links points as they come (no graph when m is 0), and
   * the optimizer never moves them (indexingThresholdKb is 0).
   */
  multivector?: boolean;
}

/** Runs `fn` while no write of the shard runs (the shard's update lock). */
export type Exclusive = <T>(fn: () => Promise<T>) => Promise<T>;

export interface Hit {
  label: bigint;
  score: number;
}

export interface VectorSearch {
  vector: Float32Array;
  k: number;
  ef?: number;
  exact?: boolean;
  allow?: BigUint64Array;
  oversampling?: number;
  rescore?: boolean;
  ignoreQuantization?: boolean;
  /** Score by this rule over examples instead of nearness to `vector` (larger is better). */
  rule?: { rule: ScoreRule; positives: number; examples: Float32Array };
}

/** File names of the indexes a checkpoint holds, relative to the shard directory. */
export interface VectorFiles {
  appendable: string;
  frozen: string | null;
  indexed: string | null;
  /** The side file holding the indexed index's f32 originals, when they are mapped (absent: in the index file). */
  originals?: string | null;
  /** The file holding the indexed index's level-0 links, when they are mapped (absent: in the index file). */
  graph?: string | null;
}

/** Names of the side files of mapped originals this store creates. */
export const ORIGINALS_FILE_RE = /^orig-[0-9]{1,15}-[0-9a-f]{8}\.f32$/;

/** Names of the mapped graph files (level-0 links) this store creates, and those `compact` derives from them. */
export const GRAPH_FILE_RE = /^graph-[0-9]{1,15}-[0-9a-f]{8}(\.c[0-9]{1,15})?\.links$/;

/** Points moved into the HNSW index per engine call, so searches interleave with a move. */
const MOVE_CHUNK = 512;

/** At most this many bytes of vectors read from a job's source per engine call (see copyInto). */
const EXPORT_PAGE_BYTES = 8 << 20;

/**
 * Vectors read from a job's source per engine call: what fits EXPORT_PAGE_BYTES, at
 * most 8 chunks (2,730 of 768 dimensions, 4,096 of 128 or fewer), at least one.
 */
export function exportPageSize(dim: number): number {
  return Math.max(1, Math.min(MOVE_CHUNK * 8, Math.floor(EXPORT_PAGE_BYTES / (4 * Math.max(1, dim)))));
}

/** Larger-is-better for Cosine and Dot; Euclid and Manhattan scores are distances. */
export function higherIsBetter(distance: string): boolean {
  return distance === 'Cosine' || distance === 'Dot';
}

interface Tracked {
  index: VectorIndex;
  /**
   * Labels live in this index, as far as the shard is concerned (a move's copies
   * join at its end). Writes delete only from the indexes that hold a label, so a
   * write never waits for the write lock of a graph the optimizer is adding to
   * unless it rewrites a point that is in that graph.
   */
  labels: LabelSet;
  /** Bumped on every mutation: a checkpoint saves an index only when it changed. */
  gen: number;
  savedGen: number;
  savedFile: string | null;
  /** The side file (in the shard directory) the index maps its originals from, or null. */
  originals: string | null;
  /** The file (in the shard directory) the index maps its level-0 links from, or null (in memory). */
  graph: string | null;
  /** The graph file `savedFile` names (null: that save holds its links itself). */
  savedGraph: string | null;
}

function track(index: VectorIndex, originals: string | null = null, graph: string | null = null): Tracked {
  return { index, labels: new LabelSet(), gen: 1, savedGen: 0, savedFile: null, originals, graph, savedGraph: null };
}

/** The labels of `labels` that `t` holds, removed from its set. */
function takeHeld(t: Tracked, labels: BigUint64Array): BigUint64Array {
  const held: bigint[] = [];
  for (const l of labels) if (t.labels.delete(l)) held.push(l);
  return BigUint64Array.from(held);
}

/**
 * Adds to `into` (and `newer`) the labels of `labels` that `keep` accepts and `newer`
 * does not hold yet; returns the others. In steps, for runSliced.
 */
function* keptInto(into: LabelSet, labels: BigUint64Array, keep: (label: bigint) => boolean, newer: LabelSet | null): Steps<bigint[]> {
  const drop: bigint[] = [];
  for (let i = 0; i < labels.length; i++) {
    if ((i & 4095) === 4095) {
      countWork(4096);
      yield;
    }
    const l = labels[i];
    if (!keep(l) || (newer !== null && newer.has(l))) drop.push(l);
    else {
      newer?.add(l);
      into.add(l);
    }
  }
  return drop;
}

/** Thrown inside an optimizer job that close() or drop() stopped. */
class JobCancelled extends Error {
  constructor() {
    super('optimizer job cancelled');
  }
}

/**
 * Frees a retired index's native memory a little later, so searches already queued
 * for it (the batcher flushes on the next turn) still run.
 */
function retire(t: Tracked | null): void {
  if (!t) return;
  setTimeout(() => t.index.close(), 10_000).unref();
}

/** After this long without writes, leftover unindexed points join an existing HNSW index. */
const IDLE_MOVE_MS = 1000;

export class VectorStore {
  private appendable: Tracked;
  private frozen: Tracked | null = null;
  private indexed: Tracked | null = null;
  private dirty: Set<bigint> | null = null;
  private job: Promise<void> | null = null;
  private jobKind: 'index' | 'vacuum' | 'compact' | 'place' | null = null;
  /** Set when the graph parameters changed: the next vacuum rebuilds even without deletes. */
  private rebuildDue = false;
  /** Labels that hold a vector of this name (any index). */
  private presentSet = new LabelSet();
  private lastWrite = 0;
  private cancelled = false;
  /** The running job's target and the labels copied into it so far (see copyInto). */
  private jobTarget: Tracked | null = null;
  private jobCopied: Set<bigint> | null = null;
  /** After a failed job, no new one starts before this time (doubling back-off). */
  private retryAt = 0;
  private backoffMs = 0;
  /** Number for the next index file this store saves (never reused, see save()). */
  fileNo = 0;
  /** The running optimizer job and the last finished ones, as the optimizations route shows them. */
  private readonly log = new OptimizationLog();

  constructor(
    private readonly engine: Engine,
    readonly spec: VectorSpec,
    private readonly logger: Logger,
    /** The shard directory mapped originals live in (null: never on disk). */
    private readonly dir: string | null = null,
  ) {
    this.appendable = track(engine.createIndex(this.flatOptions()));
  }

  /** Logged once per store: on_disk asked for on a backend that cannot map files. */
  private warnedNoMap = false;
  private warnedNoGraphMap = false;

  /**
   * Whether the HNSW index should keep its level-0 links in a mapped file
   * (`hnsw_config.on_disk`): graph indexes of single vectors, native backend only (on
   * WASM the graph stays in memory, and that is logged once).
   */
  private wantGraphOnDisk(): boolean {
    const s = this.spec;
    if (this.dir === null || s.multivector || s.m === 0 || s.graphOnDisk !== true) return false;
    if (this.engine.backend !== 'native') {
      if (!this.warnedNoGraphMap) {
        this.warnedNoGraphMap = true;
        this.logger.warn({ vector: s.name, backend: this.engine.backend }, 'hnsw_config.on_disk asked for, but the WASM engine cannot map files: the graph stays in memory');
      }
      return false;
    }
    return true;
  }

  /** A fresh graph file name (never reused, like newOriginalsFile). */
  private newGraphFile(): string {
    const file = `graph-${this.fileNo++}-${randomBytes(4).toString('hex')}.links`;
    this.pendingFiles.add(file);
    return file;
  }

  /**
   * Whether an HNSW index of `count` vectors should keep its originals in a mapped
   * file: `on_disk`, or more KiB than `memmap_threshold`; quantized, native only.
   */
  private wantOnDisk(count: number): boolean {
    const s = this.spec;
    if (this.dir === null || s.multivector || s.quantization.kind === 'none') return false;
    const t = s.memmapThresholdKb ?? 0;
    const want = s.onDisk === true || (t > 0 && (count * s.dim * 4) / 1024 >= t);
    if (want && this.engine.backend !== 'native') {
      if (!this.warnedNoMap) {
        this.warnedNoMap = true;
        this.logger.warn({ vector: s.name, backend: this.engine.backend }, 'on-disk vectors asked for, but the WASM engine cannot map files: the originals stay in memory');
      }
      return false;
    }
    return want;
  }

  /**
   * Side files created for an index that nothing names yet (a job's target before it
   * becomes `jobTarget`, a move to disk before `originals` is set): `liveFiles` keeps
   * them, so a clean-up between the file's creation and the index joining the store
   * cannot delete a file the index maps. Dropped when the job or the move ends.
   */
  private readonly pendingFiles = new Set<string>();

  /** A fresh side file name for mapped originals (never reused: the number grows, and a random part keeps stores apart). */
  private newOriginalsFile(): string {
    const file = `orig-${this.fileNo++}-${randomBytes(4).toString('hex')}.f32`;
    this.pendingFiles.add(file);
    return file;
  }

  /** A new HNSW index for `count` vectors, with its originals mapped when they should be. */
  private createGraph(count: number): Tracked {
    if (!this.wantOnDisk(count)) return track(this.engine.createIndex(this.graphOptions()));
    const file = this.newOriginalsFile();
    return track(this.engine.createIndex({ ...this.graphOptions(), originalsPath: path.join(this.dir!, file) }), file);
  }

  /** Whether the indexed index's originals are where the spec wants them (a PATCH of on_disk, memmap_threshold crossed). */
  private placementDue(): boolean {
    const t = this.indexed;
    if (t === null) return false;
    return this.wantOnDisk(t.labels.size) !== (t.originals !== null) || this.wantGraphOnDisk() !== (t.graph !== null);
  }

  /**
   * Moves the indexed index's originals and its level-0 links to new mapped files or
   * back into memory, as the spec wants them (under the update lock).
   */
  private async place(): Promise<void> {
    const t = this.indexed;
    if (t === null) return;
    if (this.wantOnDisk(t.labels.size)) {
      if (t.originals === null) {
        const file = this.newOriginalsFile();
        try {
          await t.index.moveOriginalsToDisk(path.join(this.dir!, file));
          t.originals = file;
          t.gen++;
        } finally {
          this.pendingFiles.delete(file);
        }
      }
    } else if (t.originals !== null) {
      await t.index.moveOriginalsToMemory();
      t.originals = null;
      t.gen++;
    }
    if (this.wantGraphOnDisk()) {
      if (t.graph === null) {
        const file = this.newGraphFile();
        try {
          await t.index.moveGraphToDisk(path.join(this.dir!, file));
          t.graph = file;
          t.gen++;
        } finally {
          this.pendingFiles.delete(file);
        }
      }
    } else if (t.graph !== null) {
      await t.index.moveGraphToMemory();
      t.graph = null;
      t.gen++;
    }
  }

  /** Side files the live indexes map (a running job's target too): they must stay on disk. */
  liveFiles(): string[] {
    const out: string[] = [];
    for (const t of [...this.all(), this.jobTarget]) {
      if (t && t.originals !== null) out.push(t.originals);
      if (t && t.graph !== null) out.push(t.graph);
    }
    out.push(...this.pendingFiles);
    return out;
  }

  /** Labels that hold a vector of this name (any index). */
  get present(): LabelSet {
    return this.presentSet;
  }

  private flatOptions(): IndexOptions {
    const s = this.spec;
    if (s.multivector) {
      return { dim: s.dim, distance: s.distance, multivector: true, flat: s.m === 0, m: Math.max(2, s.m), efConstruct: s.efConstruct, datatype: s.datatype };
    }
    return { dim: s.dim, distance: s.distance, flat: true, fullScanThresholdKb: s.fullScanThresholdKb, datatype: s.datatype };
  }

  private graphOptions(): IndexOptions {
    const s = this.spec;
    return {
      dim: s.dim,
      distance: s.distance,
      m: Math.max(2, s.m),
      efConstruct: s.efConstruct,
      fullScanThresholdKb: s.fullScanThresholdKb,
      quantization: s.quantization,
      datatype: s.datatype,
    };
  }

  /**
   * Threads an optimizer job builds with: the collection's max_indexing_threads, or
   * by default one core fewer than the machine has (at least one), so requests keep
   * a core while a graph is built in the background.
   */
  private threads(): number {
    return this.spec.maxIndexingThreads > 0 ? this.spec.maxIndexingThreads : Math.max(1, CPU_COUNT - 1);
  }

  /**
   * Writes or replaces vectors (call under the shard's update lock). A multivector
   * store takes `counts`, the rows of each label's list.
   */
  async upsert(labels: BigUint64Array, vectors: Float32Array, counts?: Uint32Array): Promise<void> {
    if (labels.length === 0) return;
    this.lastWrite = Date.now();
    const others = [this.frozen, this.indexed].filter((t): t is Tracked => t !== null);
    const deletes = others.map((t) => this.takeOut(t, labels));
    // The appendable index serves the labels from now on (a concurrent get() must
    // find the point somewhere while the add runs).
    for (const l of labels) {
      this.appendable.labels.add(l);
      this.present.add(l);
    }
    this.appendable.gen++;
    await Promise.all([this.appendable.index.add(labels, vectors, 1, counts), ...deletes]);
  }

  /**
   * Deletes from `t` the labels it holds; they become `dirty` for a running job (its
   * copy of them, if any, is stale).
   */
  private takeOut(t: Tracked, labels: BigUint64Array): Promise<unknown> {
    const held = takeHeld(t, labels);
    if (held.length === 0) return Promise.resolve();
    t.gen++;
    if (this.dirty) for (const l of held) this.dirty.add(l);
    return t.index.delete(held);
  }

  /** Removes the vectors of these labels (call under the shard's update lock). */
  async delete(labels: BigUint64Array): Promise<void> {
    if (labels.length === 0) return;
    this.lastWrite = Date.now();
    const deletes = this.all().map((t) => this.takeOut(t, labels));
    for (const l of labels) this.present.delete(l);
    await Promise.all(deletes);
  }

  private all(): Tracked[] {
    return [this.appendable, this.frozen, this.indexed].filter((t): t is Tracked => t !== null);
  }

  /** The stored vector of a label (normalised for Cosine), or null. */
  async get(label: bigint): Promise<Float32Array | null> {
    if (!this.present.has(label)) return null;
    const holder = this.all().find((t) => t.labels.has(label));
    return holder ? holder.index.getVector(label) : null;
  }

  /** Best `k` hits over every index, best first, each label once. */
  async search(req: VectorSearch): Promise<Hit[]> {
    const dirty = this.dirty;
    const extra = dirty ? Math.min(dirty.size, 64) : 0;
    const opts: SearchOptions = {
      k: req.k,
      ef: req.ef,
      exact: req.exact,
      allow: req.allow,
      oversampling: req.oversampling,
      rescore: req.rescore,
      ignoreQuantization: req.ignoreQuantization,
    };
    const parts: Array<Promise<Hit[]>> = [];
    for (const t of [this.appendable, this.frozen, this.indexed]) {
      if (t === null || t.labels.size === 0) continue;
      parts.push(this.searchOne(t, req.vector, opts, t === this.indexed ? extra : 0, req.rule));
    }
    // One index (a green collection): no Promise.all on the hot path.
    if (parts.length === 1) return parts[0];
    const lists = await Promise.all(parts);
    return mergeHits(lists, req.rule !== undefined || higherIsBetter(this.spec.distance), req.k);
  }

  /**
   * The best hits of one index among the labels it serves. An index can hold entries
   * outside its label set (copies a running move made, stale ones until the move
   * purges them); when they crowd the served labels out of the engine's answer, ask
   * again for more, until enough served hits come back or the index has no more.
   */
  private async searchOne(t: Tracked, vector: Float32Array, opts: SearchOptions, extra: number, rule?: RuleQuery): Promise<Hit[]> {
    const want = Math.min(opts.k, t.labels.size);
    // The engine's k is a 32-bit count: asking again for more stops there.
    let k = Math.min(opts.k + extra, MAX_ENGINE_COUNT);
    for (;;) {
      const o = k === opts.k ? opts : { ...opts, k };
      // A multivector index answers each query list alone (no flat batches).
      const r = rule !== undefined ? await t.index.searchRule(rule, o) : this.spec.multivector ? await t.index.search(vector, o) : await batcher.search(t.index, vector, o);
      const hits: Hit[] = [];
      for (let i = 0; i < r.labels.length; i++) {
        const label = r.labels[i];
        if (t.labels.has(label)) hits.push({ label, score: r.scores[i] });
      }
      if (hits.length >= want || r.labels.length < k || k === MAX_ENGINE_COUNT) return hits.slice(0, opts.k);
      k = Math.min(k * 4, MAX_ENGINE_COUNT);
    }
  }

  /** Vectors in the graph index (the reference's indexed_vectors_count). */
  indexedCount(): number {
    return this.indexed ? this.indexed.labels.size : 0;
  }

  /**
   * Vectors the optimizer has yet to put into the HNSW index beyond what the indexing
   * threshold leaves in the flat index on purpose: 0 while a collection is below the
   * threshold, or when indexing is off.
   */
  indexBacklog(): number {
    const t = this.spec.indexingThresholdKb;
    if (t <= 0) return 0;
    const flat = this.appendable.labels.size;
    const frozen = this.frozen?.labels.size ?? 0;
    const thresholdVectors = Math.ceil((t * 1024) / (this.spec.dim * 4));
    return frozen + Math.max(0, flat - thresholdVectors);
  }

  /** Engine stats of the HNSW index, or null before it is first built. */
  indexedStats(): IndexStats | null {
    return this.indexed ? this.indexed.index.stats() : null;
  }

  /** Engine indexes in use (the reference's segments). */
  segmentCount(): number {
    return this.all().length;
  }

  busy(): boolean {
    return this.job !== null;
  }

  private appendableKb(): number {
    return (this.appendable.labels.size * this.spec.dim * 4) / 1024;
  }

  /** Whether an optimization is due (the collection reports yellow until it is done). */
  pending(): boolean {
    const leftover = this.spec.indexingThresholdKb > 0 && this.indexed !== null && this.appendable.labels.size > 0;
    return this.job !== null || this.frozen !== null || leftover || this.indexDue() || this.vacuumDue() || this.placementDue();
  }

  private indexDue(): boolean {
    const t = this.spec.indexingThresholdKb;
    if (t <= 0 || this.appendable.labels.size === 0) return false;
    return this.appendableKb() >= t || this.leftoverDue();
  }

  /**
   * Once an HNSW index exists, points left below the threshold in the flat index
   * are merged into it after IDLE_MOVE_MS without writes: each query scans the flat
   * index exactly, and adding a few thousand points to an existing graph is cheap.
   */
  private leftoverDue(): boolean {
    return this.indexed !== null && this.appendable.labels.size > 0 && Date.now() - this.lastWrite >= IDLE_MOVE_MS;
  }

  /** Rebuild the HNSW index with the current spec (after a change of m, ef_construct or quantization). */
  requestRebuild(): void {
    // Also during the first build: its target was made with the old settings.
    if (this.indexed || this.jobKind === 'index') this.rebuildDue = true;
  }

  private vacuumDue(): boolean {
    if (!this.indexed) return false;
    if (this.rebuildDue) return true;
    const s = this.indexed.index.stats();
    return s.slots >= this.spec.vacuumMinVectorNumber && s.slots > 0 && s.deleted / s.slots > this.spec.deletedThreshold;
  }

  /**
   * Whether the appendable index holds more deleted slots than live ones (points
   * rewritten many times in a collection too small to be indexed): copying the live
   * vectors of a flat index is cheap, so it is compacted in place.
   */
  private appendableVacuumDue(): boolean {
    const s = this.appendable.index.stats();
    return s.deleted >= 1024 && s.deleted > s.count;
  }

  /** The job that is due now, if any. */
  private dueKind(): 'index' | 'vacuum' | 'compact' | 'place' | null {
    return this.frozen !== null || this.indexDue()
      ? 'index'
      : this.vacuumDue()
        ? 'vacuum'
        : this.placementDue()
          ? 'place'
          : this.appendableVacuumDue()
            ? 'compact'
            : null;
  }

  /** The reference's optimizer name of a job, and the engine indexes it reads (its segments). */
  private jobShape(kind: 'index' | 'vacuum' | 'compact' | 'place'): { optimizer: string; sources: Tracked[] } {
    const seg = (ts: Array<Tracked | null>) => ts.filter((t): t is Tracked => t !== null);
    if (kind === 'index') return { optimizer: 'indexing', sources: seg([this.frozen ?? this.appendable, this.indexed]) };
    if (kind === 'vacuum') return { optimizer: this.rebuildDue ? 'config_mismatch' : 'vacuum', sources: seg([this.indexed]) };
    if (kind === 'place') return { optimizer: 'config_mismatch', sources: seg([this.indexed]) };
    return { optimizer: 'vacuum', sources: [this.appendable] };
  }

  private segmentInfo(t: Tracked): SegmentInfo {
    return { uuid: segmentUuid(t), points_count: t.labels.size };
  }

  /**
   * This store's optimizations as the reference reports them: the running job, the one
   * due next (a store runs one job at a time), the indexes neither touches, and the last
   * finished jobs (newest first).
   */
  optimizations(): { running: OptimizationInfo | null; queued: PendingInfo | null; idle: SegmentInfo[]; completed: OptimizationInfo[] } {
    const running = this.log.running();
    let queued: PendingInfo | null = null;
    const busy = new Set(running?.segments.map((s) => s.uuid) ?? []);
    if (this.job === null) {
      const kind = this.dueKind();
      if (kind !== null) {
        const { optimizer, sources } = this.jobShape(kind);
        queued = { optimizer, segments: sources.map((t) => this.segmentInfo(t)) };
        for (const s of queued.segments) busy.add(s.uuid);
      }
    }
    const idle = this.all().filter((t) => !busy.has(segmentUuid(t))).map((t) => this.segmentInfo(t));
    return { running, queued, idle, completed: this.log.completed() };
  }

  /** Starts one optimization job when one is due and none runs; resolves when it ends. */
  maybeOptimize(exclusive: Exclusive): Promise<void> | null {
    if (this.job || this.cancelled || Date.now() < this.retryAt) return null;
    const kind = this.dueKind();
    if (!kind) return null;
    this.jobKind = kind;
    const shape = this.jobShape(kind);
    this.log.start(shape.optimizer, shape.sources.map((t) => this.segmentInfo(t)), kind === 'compact' || kind === 'place' ? 1 : (shape.sources[0]?.labels.size ?? 0));
    const run =
      kind === 'index'
        ? this.indexJob(exclusive)
        : kind === 'vacuum'
          ? this.vacuumJob(exclusive)
          : kind === 'place'
            ? exclusive(() => this.place())
            : exclusive(async () => {
                await this.appendable.index.compact(1);
                this.appendable.gen++;
              });
    this.job = run
      .then(() => {
        this.backoffMs = 0;
        this.log.end('done');
      })
      .catch((err) => {
        this.log.end(err instanceof JobCancelled ? { cancelled: 'stopped for shutdown' } : { error: String((err as Error)?.message ?? err) });
        if (err instanceof JobCancelled) this.logger.info({ vector: this.spec.name, job: kind }, 'optimizer job stopped for shutdown');
        else {
          this.backoffMs = Math.min(60_000, Math.max(1000, this.backoffMs * 2));
          this.retryAt = Date.now() + this.backoffMs;
          this.logger.error({ err, vector: this.spec.name, job: kind, retryInMs: this.backoffMs }, 'optimizer job failed; it will be retried');
        }
        return exclusive(async () => {
          const target = this.jobTarget;
          const copied = this.jobCopied;
          if (target !== null && target === this.indexed && copied !== null) {
            // Copies into the serving graph that never joined its label set: remove
            // them, so they cannot hide live points from searches or spread.
            const stray: bigint[] = [];
            for (const l of copied) if (!target.labels.has(l)) stray.push(l);
            if (stray.length > 0) {
              await target.index.delete(BigUint64Array.from(stray));
              target.gen++;
            }
          } else if (target !== null && target !== this.indexed) {
            target.index.close();
          }
          this.dirty = null;
        });
      })
      .finally(() => {
        this.job = null;
        this.jobKind = null;
        this.jobTarget = null;
        this.jobCopied = null;
        // The job's side file is named by the index that holds it now (or by nothing, if the job failed).
        this.pendingFiles.clear();
      });
    return this.job;
  }

  /** Waits for the running job, if any. */
  async idle(): Promise<void> {
    while (this.job) await this.job;
  }

  /**
   * Stops the running job at its next chunk (close, drop): what it copied so far is
   * discarded or, in a serving graph, not in its label set. A frozen index stays, so
   * the move resumes after the next start.
   */
  async cancel(): Promise<void> {
    this.cancelled = true;
    await this.idle();
  }

  /**
   * Frees every engine index now (the shard is closed or dropped: its reads answer 503).
   * Engine calls already queued hold their own reference and finish first, so nothing
   * is cut short; the memory goes as soon as they are done, not after a retirement delay
   * (a snapshot recovery loads the new data right after this). No backend's close
   * throws: the native one no longer refuses while calls are in flight.
   */
  closeIndexes(): void {
    for (const t of this.all()) t.index.close();
  }

  /**
   * Copies the live vectors of `source` that `source.labels` serves into `target`;
   * returns the labels copied. When the target is the serving graph, copies that a
   * write made stale meanwhile are deleted after every chunk, so at most one chunk's
   * worth of writes can crowd live points out of a search's candidates.
   *
   * The source is read a page at a time (`exportPageSize`: a few thousand vectors, at
   * most EXPORT_PAGE_BYTES), never whole: a vacuum of an on-disk index would otherwise
   * copy every original into the heap at once. Paging by slot is sound because the
   * only writes the source can see while a job runs are deletes:
   *  - the source is the frozen index (index job) or the serving graph (vacuum); writes
   *    add only to the appendable index (`upsert`), which is neither (the index job
   *    swaps in a new appendable index under `exclusive` before it copies), and the
   *    job adds only to its target, which is never its source;
   *  - writes take points out of the source with `takeOut` (upsert, delete), an engine
   *    delete, which marks a slot deleted and moves none;
   *  - what moves or reuses slots (`compact`) or rewrites the originals (`place`) runs
   *    only as a job of its own, and one job runs at a time (`maybeOptimize`); `load`
   *    runs before the store is used, a failed job's clean-up after it ended.
   * So slots keep their place between pages, and each label the source still serves
   * when its page is read is copied once; one taken out before is skipped (it is not
   * in `source.labels` any more, nor live in the engine), one taken out after its page
   * is in `dirty` and purged as before. Were a compact to run anyway, the next page's
   * `from` past the slot count is refused by the engine and the job fails (retried),
   * rather than skipping or repeating points.
   */
  private async copyInto(target: Tracked, source: Tracked, what: string, exclusive: Exclusive): Promise<Set<bigint>> {
    const d = this.spec.dim;
    const page = exportPageSize(d);
    // Only labels leave the source's set while the job runs (see above): its size now bounds what is copied.
    const total = source.labels.size;
    this.jobTarget = target;
    const copied = (this.jobCopied = new Set<bigint>());
    const purged = new Set<bigint>();
    const serving = target === this.indexed;
    const started = Date.now();
    let chunks = 0;
    for (let from = 0; ; ) {
      if (this.cancelled) throw new JobCancelled();
      const exported = await source.index.exportLiveFrom(from, page);
      from = exported.next;
      // Only what the source serves: entries outside its label set (copies a failed job
      // left behind, points taken out since) must not spread.
      let labels = exported.labels;
      let vectors = exported.vectors;
      if (labels.some((l) => !source.labels.has(l))) {
        const keep: number[] = [];
        labels.forEach((l, i) => source.labels.has(l) && keep.push(i));
        const ls = new BigUint64Array(keep.length);
        const vs = new Float32Array(keep.length * d);
        keep.forEach((i, j) => {
          ls[j] = labels[i];
          vs.set(vectors.subarray(i * d, (i + 1) * d), j * d);
        });
        labels = ls;
        vectors = vs;
      }
      for (let at = 0; at < labels.length; at += MOVE_CHUNK) {
        if (this.cancelled) throw new JobCancelled();
        const end = Math.min(labels.length, at + MOVE_CHUNK);
        const chunk = labels.subarray(at, end);
        // Counted before the add: an add that fails part-way may have placed some.
        for (const l of chunk) copied.add(l);
        await target.index.add(chunk, vectors.subarray(at * d, end * d), this.threads());
        // The add copied mapped links back into memory (the engine never writes a mapped
        // graph file); the file stays while a save names it (savedGraph), and the next
        // `place` maps the grown graph to a new file. Cleared after the add resolves, so
        // a save that ran before it still finds its file kept.
        if (target.graph !== null) target.graph = null;
        this.log.progress(copied.size, Math.max(total, copied.size));
        if (serving) {
          await exclusive(async () => {
            const stale: bigint[] = [];
            for (const l of this.dirty ?? []) if (copied.has(l) && !purged.has(l)) stale.push(l);
            if (stale.length === 0) return;
            for (const l of stale) purged.add(l);
            await target.index.delete(BigUint64Array.from(stale));
          });
        }
        if (++chunks % 10 === 0) {
          this.logger.info({ vector: this.spec.name, job: what, done: copied.size, total, ms: Date.now() - started }, 'optimizer progress');
        }
      }
      // A short page is the last (the engine read every slot).
      if (exported.labels.length < page) break;
    }
    this.logger.info({ vector: this.spec.name, job: what, done: copied.size, total, ms: Date.now() - started }, 'optimizer progress');
    return copied;
  }

  /** Moves the appendable points into the HNSW index (building it the first time). */
  private async indexJob(exclusive: Exclusive): Promise<void> {
    await exclusive(async () => {
      if (!this.frozen) {
        this.frozen = this.appendable;
        this.appendable = track(this.engine.createIndex(this.flatOptions()));
      }
      this.dirty = new Set();
    });
    const frozen = this.frozen!;
    const fresh = this.indexed === null;
    const target = this.indexed ?? this.createGraph(frozen.labels.size);
    const copied = await this.copyInto(target, frozen, 'index', exclusive);
    await exclusive(async () => {
      target.gen++;
      const dirty = this.dirty ?? new Set<bigint>();
      const stale = BigUint64Array.from(dirty);
      if (stale.length > 0) await target.index.delete(stale);
      for (const l of copied) if (!dirty.has(l)) target.labels.add(l);
      if (fresh) this.indexed = target;
      retire(this.frozen);
      this.frozen = null;
      this.dirty = null;
    });
  }

  /** Rebuilds the HNSW index without its deleted slots (and with the current spec). */
  private async vacuumJob(exclusive: Exclusive): Promise<void> {
    await exclusive(async () => {
      this.dirty = new Set();
      this.rebuildDue = false;
    });
    const source = this.indexed!;
    const target = this.createGraph(source.labels.size);
    const copied = await this.copyInto(target, source, 'vacuum', exclusive);
    await exclusive(async () => {
      const dirty = this.dirty ?? new Set<bigint>();
      const stale = BigUint64Array.from(dirty);
      if (stale.length > 0) await target.index.delete(stale);
      // Labels rewritten meanwhile live in the appendable index now; the others are
      // still in the source, which is exactly what the target holds.
      for (const l of copied) if (!dirty.has(l) && source.labels.has(l)) target.labels.add(l);
      retire(this.indexed);
      this.indexed = target;
      this.dirty = null;
    });
  }

  // -- checkpoint ---------------------------------------------------------------------

  /**
   * Saves every index that changed since its last save under a fresh file name in
   * `dir` (call under the update lock). Returns the file names the checkpoint holds;
   * files not named there any more are removed by the shard after the checkpoint.
   */
  /** The files the last saves wrote (a retried checkpoint names them again: they must stay on disk). */
  savedFiles(): string[] {
    return this.all().flatMap((t) => [
      ...(t.savedFile === null ? [] : [t.savedFile]),
      ...(t.originals === null ? [] : [t.originals]),
      ...(t.savedGraph === null ? [] : [t.savedGraph]),
    ]);
  }

  async save(dir: string, prefix: string, seq: bigint): Promise<VectorFiles> {
    const saveOne = async (t: Tracked, role: string): Promise<string> => {
      if (t.savedFile !== null && t.savedGen === t.gen) return t.savedFile;
      const gen = t.gen;
      // The graph file the engine's save names: the index's mapping at the time of the
      // save, which is `t.graph` (an add that copies the links back into memory clears
      // it only after the engine has done so, and the save runs under the update lock).
      const graph = t.graph;
      // A name is never reused: optimizer jobs change indexes without a new sequence
      // number, and writing a name the current checkpoint holds would replace its data.
      // fileNo is persisted in checkpoint.json, so it also grows across restarts.
      const file = `${prefix}${role}-${seq}-${this.fileNo++}.qvi`;
      // The engine writes on its own thread: a counted step (a snapshot's pinning) sees the file grow.
      const growth = watchGrowth(path.join(dir, file));
      try {
        await t.index.save(path.join(dir, file));
      } finally {
        await growth.stop();
      }
      t.savedGen = gen;
      t.savedFile = file;
      t.savedGraph = graph;
      return file;
    };
    const out: VectorFiles = {
      appendable: await saveOne(this.appendable, 'appendable'),
      frozen: this.frozen ? await saveOne(this.frozen, 'frozen') : null,
      indexed: this.indexed ? await saveOne(this.indexed, 'indexed') : null,
    };
    if (this.indexed?.originals) out.originals = this.indexed.originals;
    if (this.indexed?.savedGraph) out.graph = this.indexed.savedGraph;
    return out;
  }

  /**
   * Loads the indexes a checkpoint names (on the engine's threads while the caller
   * works out `keep`; `preloaded` gives those already loading) and reconciles them
   * with the shard's state: an index keeps a label when `keep` says so (a live point
   * that the state lists as carrying this vector: a copy a move left in the graph of a
   * point whose vector was deleted meanwhile is not one) and no index before it (the
   * appendable one holds the newest copy, then frozen, then indexed) has kept it; the
   * others are deleted from it. If anything fails, the indexes loaded so far are
   * closed and the store is left as it was.
   */
  async load(
    dir: string,
    files: VectorFiles,
    keepOf: Promise<(label: bigint) => boolean>,
    preloaded: (file: string) => Promise<VectorIndex> | null = () => null,
  ): Promise<void> {
    const names = [files.appendable, files.frozen, files.indexed];
    // `keepOf` may fail (a corrupt state file) while the indexes still load: it is
    // awaited below, and must not count as unhandled meanwhile (that ends the process).
    keepOf.catch(() => undefined);
    // A preload that failed (an index file extracted before the side file it names)
    // is tried again now that every file is there.
    const open = (f: string) => {
      const pre = preloaded(f);
      return pre === null ? this.engine.loadIndex(path.join(dir, f)) : pre.catch(() => this.engine.loadIndex(path.join(dir, f)));
    };
    const opened = await Promise.allSettled(names.map((f) => (f ? open(f) : Promise.resolve(null))));
    // Whether the indexed index file maps the graph file the checkpoint names: read from
    // its header, not from the mapping's size (an empty index maps a file of 0 bytes).
    const graphNamed = files.graph && files.indexed && this.engine.backend === 'native' ? await graphFileNamed(path.join(dir, files.indexed)) : null;
    const loaded = opened.map((r) => (r.status === 'fulfilled' ? r.value : null));
    try {
      for (const r of opened) if (r.status === 'rejected') throw r.reason;
      const keep = await keepOf;
      const tracked = loaded.map((index, i) => {
        if (index === null) return null;
        // The side file the checkpoint names for the indexed index's mapped originals
        // (on WASM they were read into memory: the next save holds them itself).
        const mapped = i === 2 && files.originals && this.engine.backend === 'native' ? files.originals : null;
        // The graph file the checkpoint names, if the saved index maps it (a save that
        // raced an add may name one its index file no longer uses; it is kept anyway).
        const graph = i === 2 && files.graph && graphNamed === files.graph ? files.graph : null;
        const t = track(index, mapped, graph);
        t.savedGen = t.gen;
        t.savedFile = names[i];
        t.savedGraph = i === 2 && files.graph ? files.graph : null;
        if (i === 2 && files.originals && mapped === null) t.gen++;
        // Links a WASM node read into memory: the next save holds them itself.
        if (i === 2 && files.graph && graph === null) t.gen++;
        return t;
      });
      const present = await this.reconcile(tracked.filter((t): t is Tracked => t !== null), keep);
      // The empty index the constructor made (load runs before the store is used).
      this.appendable.index.close();
      this.appendable = tracked[0]!;
      this.frozen = tracked[1];
      this.indexed = tracked[2];
      this.presentSet = present;
    } catch (err) {
      for (const index of loaded) index?.close();
      throw err;
    }
  }

  /** Fills each index's labels (see load); returns the labels of all of them. */
  private async reconcile(all: Tracked[], keep: (label: bigint) => boolean): Promise<LabelSet> {
    // With one index, no label can be held twice: nothing earlier to check against.
    const newer = all.length > 1 ? new LabelSet() : null;
    for (const t of all) {
      const labels = await t.index.liveLabels();
      const drop = await runSliced(keptInto(t.labels, labels, keep, newer));
      if (drop.length > 0) {
        await t.index.delete(BigUint64Array.from(drop));
        t.gen++;
      }
    }
    return newer ?? new LabelSet(all[0]?.labels);
  }

  /** Whether an index changed since the last save (a checkpoint is due even without new writes). */
  changedSinceSave(): boolean {
    return this.all().some((t) => t.savedFile === null || t.savedGen !== t.gen);
  }
}

/** Cores of this machine (os.cpus() builds a list of every core's times: read it once). */
const CPU_COUNT = os.cpus().length;

/**
 * Engine work per batch the batcher aims at: batching pays a thread hop once for that
 * much search. Searches dearer than half of it go out one by one.
 */
const BATCH_TARGET_US = 30;
/** The most queries in one `searchBatch` call. */
const BATCH_MAX = 64;

interface BatchItem {
  q: Float32Array;
  resolve: (r: SearchResult) => void;
  reject: (e: unknown) => void;
}

/** A running mean of the engine time per query of one index in one mode (graph or exact); 0 before the first measure. */
interface Cost {
  perQueryUs: number;
}

/** What the batcher knows of one index: an id for the grouping key, and the cost of its graph and exact searches. */
interface IndexCosts {
  id: number;
  graph: Cost;
  exact: Cost;
}

/**
 * Sends unfiltered searches to the engine, batching them only when it pays.
 *
 * Each engine call is a hop to a worker thread and back (10-20 µs of the event loop and
 * tens of µs of latency on a small VM). For a small index that is more than the search
 * itself, so searches of one index that arrive in the same event-loop turn go out
 * together as `searchBatch` calls. For a larger index, a batch makes its queries wait
 * for each other on one thread, and the requests then move in lock step (the event loop
 * idles while the batch runs, the workers idle while it answers them) instead of
 * overlapping: 100k points at 8 requests in flight answered 5,764 queries/s batched and
 * 6,909 one by one (bench/rest, same run conditions).
 *
 * Even pairs cost more than they save once a search takes as long as the hop: 100k
 * points at ef 64 (about 55 µs a search) and 8 requests in flight answered 12.1-12.7k
 * queries/s in pairs (a target of 100 µs) and 13.4-14.5k one by one, with 8% less server
 * CPU per request (wrk, side by side, this machine).
 *
 * So batches hold about BATCH_TARGET_US of engine work, judged by the time the engine
 * reports for each query (`computeUs`, measured on the worker: the hop and the wait for
 * a free thread are not in it, so the estimate does not drift with load). A query that
 * costs that much alone goes straight to `search`, without waiting for the turn to end.
 * Graph and exact searches of one index are costed apart. An engine that reports no
 * time is batched as before.
 */
class SearchBatcher {
  private readonly pending = new Map<string, { index: VectorIndex; cost: Cost; opts: SearchOptions; items: BatchItem[] }>();
  private readonly costs = new WeakMap<VectorIndex, IndexCosts>();
  private nextId = 1;
  private scheduled = false;

  search(index: VectorIndex, q: Float32Array, opts: SearchOptions): Promise<SearchResult> {
    if (opts.allow !== undefined) return index.search(q, opts);
    let costs = this.costs.get(index);
    if (costs === undefined) this.costs.set(index, (costs = { id: this.nextId++, graph: { perQueryUs: 0 }, exact: { perQueryUs: 0 } }));
    const cost = opts.exact ? costs.exact : costs.graph;
    if (batchSize(cost) <= 1) return index.search(q, opts).then((r) => observe(cost, [r]));
    const key = `${costs.id}|${opts.k}|${opts.ef}|${opts.exact}|${opts.oversampling}|${opts.rescore}|${opts.ignoreQuantization}`;
    let group = this.pending.get(key);
    if (!group) this.pending.set(key, (group = { index, cost, opts, items: [] }));
    return new Promise((resolve, reject) => {
      group!.items.push({ q, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.scheduled = false;
    const groups = [...this.pending.values()];
    this.pending.clear();
    for (const { index, cost, opts, items } of groups) {
      const size = batchSize(cost);
      for (let at = 0; at < items.length; at += size) {
        const chunk = items.slice(at, at + size);
        if (chunk.length === 1) {
          index.search(chunk[0].q, opts).then((r) => observe(cost, [r])).then(chunk[0].resolve, chunk[0].reject);
          continue;
        }
        const dim = chunk[0].q.length;
        const flat = new Float32Array(chunk.length * dim);
        chunk.forEach((it, i) => flat.set(it.q, i * dim));
        index.searchBatch(flat, opts).then(
          (rs) => {
            observe(cost, rs);
            chunk.forEach((it, i) => it.resolve(rs[i]));
          },
          (err) => chunk.forEach((it) => it.reject(err)),
        );
      }
    }
  }
}

/** Queries per engine call for a cost of `perQueryUs` per query (unknown: batch fully). */
function batchSize(cost: Cost): number {
  if (!(cost.perQueryUs > 0)) return BATCH_MAX;
  return Math.max(1, Math.min(BATCH_MAX, Math.floor(BATCH_TARGET_US / cost.perQueryUs)));
}

/** Folds the engine times the results report into the running mean; returns the first result. */
function observe(cost: Cost, results: SearchResult[]): SearchResult {
  for (const r of results) {
    const us = r.computeUs;
    if (us === undefined || !Number.isFinite(us) || us < 0) continue;
    cost.perQueryUs = cost.perQueryUs > 0 ? cost.perQueryUs + (us - cost.perQueryUs) * 0.1 : Math.max(us, 0.001);
  }
  return results[0];
}

const batcher = new SearchBatcher();

/** Merges per-index hit lists (each sorted best first) into the best `k`, each label once. */
export function mergeHits(lists: Hit[][], higher: boolean, k: number): Hit[] {
  const all = lists.flat();
  all.sort(higher ? (a, b) => b.score - a.score : (a, b) => a.score - b.score);
  const seen = new Set<bigint>();
  const out: Hit[] = [];
  for (const h of all) {
    if (seen.has(h.label)) continue;
    seen.add(h.label);
    out.push(h);
    if (out.length === k) break;
  }
  return out;
}

/** The graph file an index file's header names for its level-0 links, or null (the index holds them). */
async function graphFileNamed(file: string): Promise<string | null> {
  const fh = await fsp.open(file, 'r');
  try {
    // The header, with at most two file names of at most 1024 bytes each, fits in 8 KiB.
    const buf = Buffer.alloc(8192);
    const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
    return indexGraphFile(buf.subarray(0, bytesRead))?.name ?? null;
  } finally {
    await fh.close();
  }
}
