/**
 * The one Engine interface every backend implements (native addon, WASM).
 *
 * Owns: the shape of the engine as seen from TypeScript. Must never: import a
 * backend. Everything above `bindings/` talks to the engine through these types.
 *
 * Labels are the caller's u64 ids for vectors (the shard layer maps point ids onto
 * them). Vectors travel as one flat Float32Array of `n * dim` values. Every call that
 * does real work returns a Promise and runs off the event loop (napi async tasks for
 * the native backend, a worker thread for WASM).
 */

export type Distance = 'Cosine' | 'Dot' | 'Euclid' | 'Manhattan';

/**
 * Element type of stored vectors (the reference's `datatype`): float32 (4 bytes),
 * float16 (2 bytes, rounded to nearest) or uint8 (1 byte: values are truncated toward
 * zero and saturated to 0..255, queries too). A uint8 Cosine index keeps vectors as
 * given (they cannot be unit vectors) and computes the full cosine.
 */
export type Datatype = 'float32' | 'float16' | 'uint8';
export const DATATYPES: readonly Datatype[] = ['float32', 'float16', 'uint8'];

export type Quantization =
  | { kind: 'none' }
  | { kind: 'scalar'; quantile?: number }
  | { kind: 'binary' };

export interface IndexOptions {
  dim: number;
  distance: Distance;
  /** HNSW links per node on upper levels (level 0 has 2*m). Default 16. */
  m?: number;
  /** Candidate list size while building. Default 100. */
  efConstruct?: number;
  /** Below this many KiB of candidate vectors a filtered search scans exactly. Default 10000. */
  fullScanThresholdKb?: number;
  quantization?: Quantization;
  /** Seed of the level generator, for reproducible graphs. */
  seed?: number;
  /**
   * Flat index: vectors are stored but never linked into a graph, so `add` costs a copy
   * per vector and every search is an exact scan (as with `exact: true`; `ef` and
   * `oversampling` are ignored). For small write-heavy segments searched by scan until
   * their points move into a linked index (see `exportLive`). Saved with the index.
   * Default false.
   */
  flat?: boolean;
  /** Element type vectors are stored in. Default float32. Saved with the index. */
  datatype?: Datatype;
  /**
   * A multivector index: each label holds a list of vectors (`add` takes `counts`), and
   * a query (a list too, flat) scores points by MaxSim: the sum over the query's vectors
   * of the best similarity to any of the point's vectors. Cosine or Dot only; linked
   * into an HNSW graph by MaxSim unless `flat`. No quantization.
   */
  multivector?: boolean;
  /**
   * Quantized graph indexes, native backend: keep the f32 originals (rescoring and
   * linking read them) in this file, created empty and memory-mapped, instead of in
   * memory. Every `add` appends to it; `compact` writes a new file beside it; `save`
   * names it (it must sit in the directory the index is saved to) and the count of
   * vectors it covers, and `loadIndex` maps it again. The file is the caller's to
   * remove once no saved index names it. WASM refuses it (QUIVER_UNSUPPORTED: no mmap).
   */
  originalsPath?: string;
}

export interface SearchOptions {
  /** Number of results. */
  k: number;
  /** Candidate list size at query time; default efConstruct, never below k. */
  ef?: number;
  /** Exact brute-force search, ignoring the graph. */
  exact?: boolean;
  /** Only these labels may be returned (filtered search). */
  allow?: BigUint64Array;
  /**
   * Quantized search: keep k * oversampling candidates for rescoring (the beam widens to
   * that many). Unset: min(2k, ef) candidates, the beam unchanged (docs/engine.md).
   */
  oversampling?: number;
  /** Rescore quantized candidates on the original vectors. Default true. */
  rescore?: boolean;
  /** Search the original vectors even when the index is quantized. */
  ignoreQuantization?: boolean;
}

/**
 * A search scored by a rule over several examples instead of one query (the reference's
 * `best_score` / `sum_scores` recommend strategies, discovery and context). With s(e)
 * the similarity of a candidate to example e (the dot product for Dot and Cosine, the
 * negated squared distance for Euclid, the negated L1 distance for Manhattan), the
 * score, larger better and not post-processed as a distance is:
 * - best_score: with p the best positive and n the best negative similarity (-inf when
 *   there is none), sigmoid(p) when p > n, else -sigmoid(n);
 * - sum_scores: the positive similarities summed minus the negative ones summed;
 * - discover: per context pair +1, 0 or -1 as s(positive) is above, equal to or below
 *   s(negative), summed, plus sigmoid(s(target));
 * - context: per pair fast_sigmoid(min(s(positive) - s(negative) - 2^-23, 0)), summed;
 * where fast_sigmoid(x) = x / (1 + |x|) and sigmoid(x) = (fast_sigmoid(x) + 1) / 2.
 */
export type ScoreRule = 'best_score' | 'sum_scores' | 'discover' | 'context';
export const SCORE_RULES: readonly ScoreRule[] = ['best_score', 'sum_scores', 'discover', 'context'];

export interface RuleQuery {
  rule: ScoreRule;
  /**
   * The examples, flat (`n * dim` values): for best_score and sum_scores the
   * `positives` positive ones first, then the negative ones; for discover the target,
   * then each pair as (positive, negative); for context each pair.
   */
  examples: Float32Array;
  /** best_score and sum_scores: how many of the examples are positive; else 0. */
  positives: number;
}

export interface SearchResult {
  labels: BigUint64Array;
  /** Reference score semantics: Cosine/Dot larger is better, Euclid/Manhattan are distances. */
  scores: Float32Array;
  /**
   * Microseconds the engine spent on this query, measured where it ran (without the
   * hop to the worker thread and back, or the wait for a free one). Both backends set
   * it; the shard's search batcher sizes its batches by it.
   */
  computeUs?: number;
}

export interface IndexStats {
  dim: number;
  distance: Distance;
  /** Live (not deleted) vectors. */
  count: number;
  /** Slots including deleted ones not yet reclaimed by compact(). */
  slots: number;
  deleted: number;
  /** Bytes of the vectors the graph search scores (f32, or quantized codes). */
  vectorBytes: number;
  /** Bytes of f32 originals kept in memory for rescoring (quantized indexes only; 0 after moveOriginalsToDisk). */
  originalBytes: number;
  /** Bytes of f32 originals read from a mapped file (0 when they are in memory). */
  originalFileBytes?: number;
  /** Bytes held in memory for graph links (upper levels only once the level-0 links are mapped). */
  graphBytes: number;
  /** Bytes of level-0 links read from a mapped graph file (0 or absent: the graph is in memory). */
  graphFileBytes?: number;
  /** Everything the index holds in memory. */
  totalBytes: number;
  quantization: Quantization['kind'];
  /** Whether the index is flat (no graph; see IndexOptions.flat). */
  flat: boolean;
  /** Element type of the stored vectors (see IndexOptions.datatype). */
  datatype: Datatype;
  /** Multivector indexes: the vectors stored over all lists. */
  multivector?: { vectors: number };
}

/** Live labels and their stored vectors (`labels.length * dim` values), in slot order. */
export interface LiveVectors {
  labels: BigUint64Array;
  vectors: Float32Array;
  /** Multivector indexes: the number of vectors of each label (its list is that many rows of `vectors`). */
  counts?: Uint32Array;
}

/** One page of exportLive (see VectorIndex.exportLiveFrom). */
export interface LivePage extends LiveVectors {
  /** The slot the next page starts at. */
  next: number;
}

export interface VectorIndex {
  readonly dim: number;
  readonly distance: Distance;
  /**
   * Inserts or replaces vectors. Uses up to `threads` worker threads (default: all cores).
   * A multivector index needs `counts` (vectors per label); a plain index refuses it.
   */
  add(labels: BigUint64Array, vectors: Float32Array, threads?: number, counts?: Uint32Array): Promise<void>;
  /** Marks labels deleted; returns how many existed. */
  delete(labels: BigUint64Array): Promise<number>;
  search(query: Float32Array, options: SearchOptions): Promise<SearchResult>;
  /**
   * The best points by a rule over examples (see RuleQuery): the same graph walk,
   * fallbacks to the exact scan (flat, `exact`, small filters) and quantized rescoring
   * as `search`. Multivector indexes refuse it (QUIVER_UNSUPPORTED).
   */
  searchRule(query: RuleQuery, options: SearchOptions): Promise<SearchResult>;
  /** Several queries (flat, n * dim) in one call; one result per query. */
  searchBatch(queries: Float32Array, options: SearchOptions): Promise<SearchResult[]>;
  getVector(label: bigint): Promise<Float32Array | null>;
  /**
   * Every live (not deleted) label with its stored vector, as getVector returns it
   * (normalised for Cosine; the f32 original for quantized indexes), in slot order.
   * Adding them to a new index with the same options rebuilds this one's contents.
   * Searches keep running meanwhile (it only reads); writes wait for it.
   */
  exportLive(): Promise<LiveVectors>;
  /**
   * One page of exportLive: up to `maxCount` live labels (points, for a multivector
   * index) from slot `from` on, in slot order, and `next`, the slot the next page
   * starts at (the slot count once every slot is read; a page shorter than
   * `maxCount` is the last). Start at 0 and pass each page's `next`. Slots never move
   * or get reused while an index only sees deletes (a compact or an add can), so the
   * pages then return each label live throughout exactly once; one deleted before its
   * page is read is skipped. Holds the read lock for one page only. Refuses a
   * `maxCount` of 0 and a `from` past the slot count (QUIVER_INVALID_ARGUMENT).
   */
  exportLiveFrom(from: number, maxCount: number): Promise<LivePage>;
  /** The labels exportLive would return, without copying the vectors. */
  liveLabels(): Promise<BigUint64Array>;
  /** Rebuilds the graph without deleted slots. */
  compact(threads?: number): Promise<void>;
  stats(): IndexStats;
  /** Writes the index atomically (temp file, fsync, rename, fsync dir). Durable backends only. */
  save(path: string): Promise<void>;
  /**
   * Quantized indexes only: moves the f32 originals (used for rescoring) to a file that
   * is memory-mapped read-only, so only codes and graph stay in memory; from then on
   * the index behaves as one created with `originalsPath` (adds append to the file).
   * Native backend only (wasm32 has no mmap: QUIVER_UNSUPPORTED).
   */
  moveOriginalsToDisk(path: string): Promise<void>;
  /** Copies mapped originals back into memory (the file stays on disk); nothing to do when they are there. */
  moveOriginalsToMemory(): Promise<void>;
  /**
   * Graph indexes: moves the level-0 link lists (nearly all of the graph) to a file
   * written once and memory-mapped read-only (the reference's `hnsw_config.on_disk`);
   * searches read the links in place. The file is never written again: the next `add`
   * copies the links back into memory (the file stays for the caller to remove), a
   * delete keeps them mapped, `compact` writes a new file beside it, `save` names it
   * (it must sit in the directory the index is saved to) and `loadIndex` maps it.
   * Native backend only (wasm32 has no mmap: QUIVER_UNSUPPORTED); flat and multivector
   * indexes have no graph to move (QUIVER_INVALID_ARGUMENT).
   */
  moveGraphToDisk(path: string): Promise<void>;
  /** Copies mapped level-0 links back into memory (the file stays on disk); nothing to do when they are there. */
  moveGraphToMemory(): Promise<void>;
  /** Frees native memory now; later calls fail with QUIVER_CLOSED. */
  close(): void;
}

export interface WalOptions {
  /** Bytes per segment file before a new one starts. Default 32 MiB. */
  segmentBytes?: number;
  /** Keep at most this many bytes of closed segments; older ones are removed. 0 = keep all. */
  retentionBytes?: number;
}

export interface WalOpenReport {
  /** First and last sequence numbers present after open (0n, 0n when empty). */
  firstSeq: bigint;
  lastSeq: bigint;
  /** Bytes cut from a torn or corrupt tail, and where. */
  truncatedBytes: number;
  truncatedFile: string | null;
  truncatedOffset: number | null;
}

export interface WalRecord {
  seq: bigint;
  data: Buffer;
}

export interface Wal {
  readonly report: WalOpenReport;
  /** Appends records; resolves with the sequence number of each. Fsyncs when `sync`. */
  append(records: Buffer[], sync?: boolean): Promise<bigint[]>;
  /** Fsyncs everything appended so far (group commit: concurrent callers share one fsync). */
  sync(): Promise<void>;
  readFrom(seq: bigint, maxRecords?: number): Promise<WalRecord[]>;
  /**
   * Deletes whole segments whose records are all before `seq`, oldest first, but only
   * while the segments left still hold at least `keepBytes` (default 0): the log keeps
   * its newest `keepBytes` as history. The active segment is never deleted.
   */
  truncateBefore(seq: bigint, keepBytes?: number): Promise<void>;
  firstSeq(): bigint;
  lastSeq(): bigint;
  close(): Promise<void>;
}

export type Backend = 'native' | 'wasm';

export interface Engine {
  readonly backend: Backend;
  /** Whether this backend can persist (save/load, WAL). Both can (WASM through its worker's node:fs). */
  readonly durable: boolean;
  /** Name of the distance kernels in use, e.g. "avx2+fma", "simd128", "scalar". */
  readonly kernels: string;
  createIndex(options: IndexOptions): VectorIndex;
  loadIndex(path: string): Promise<VectorIndex>;
  openWal(dir: string, options?: WalOptions): Promise<Wal>;
  /** A new, empty sparse (inverted) index. */
  createSparseIndex(options?: SparseIndexOptions): SparseIndex;
  /** Reads a file written by SparseIndex.save. Durable backends only. */
  loadSparseIndex(path: string): Promise<SparseIndex>;
  /**
   * Where the plain (unfiltered, approximate) searches of this process's single-vector
   * indexes ran so far, for diagnostics and metrics: inline on the event loop or on the
   * pool (a batch's searches count there, one per query), and how often one waited for
   * the event loop's next turn first (it is then counted where it ran). The native
   * backend's per-call path (native.ts); multivector and rule searches are not counted.
   * Absent where there is no choice (WASM: every call runs on its worker).
   */
  searchPaths?(): { inline: number; nextTurn: number; pool: number };
}

/** Errors thrown by the engine carry one of these stable codes in `err.code`. */
export const ENGINE_ERROR_CODES = [
  'QUIVER_INVALID_ARGUMENT',
  'QUIVER_DIMENSION_MISMATCH',
  'QUIVER_NOT_FOUND',
  'QUIVER_IO',
  'QUIVER_CORRUPT',
  'QUIVER_UNSUPPORTED_FORMAT',
  'QUIVER_CLOSED',
  'QUIVER_UNSUPPORTED',
] as const;
export type EngineErrorCode = (typeof ENGINE_ERROR_CODES)[number];

// ---- Sparse vectors ----

/**
 * Sparse vectors, flat: vector `i` (of `labels[i]`) is entries `offsets[i]` to
 * `offsets[i + 1]` of `indices` (dimension ids) and `values`; `offsets` has one more
 * element than `labels` and starts at 0.
 */
export interface SparseBatch {
  labels: BigUint64Array;
  offsets: Uint32Array;
  indices: Uint32Array;
  values: Float32Array;
}

export interface SparseIndexOptions {
  /**
   * A filtered search whose allow-list holds fewer labels than this scores the allowed
   * documents directly instead of walking the posting lists. Default 5000.
   */
  fullScanThreshold?: number;
  /**
   * Element type of the stored values (default float32): float16 rounds to nearest
   * (magnitudes past 65504 held at ±65504), uint8 truncates toward zero and saturates
   * to 0..=255. Reads and scores use the stored values.
   */
  datatype?: Datatype;
}

export interface SparseSearchOptions {
  k: number;
  /** Only these labels may be returned. */
  allow?: BigUint64Array;
  /** Weigh each query value by its dimension's inverse document frequency in this index. */
  idf?: boolean;
  /** Score every (allowed) document from its stored vector; the same result, slower. */
  exact?: boolean;
}

export interface SparseIndexStats {
  count: number;
  /** Non-zero entries over all documents. */
  entries: number;
  /** Dimensions with at least one document. */
  dims: number;
  totalBytes: number;
  fullScanThreshold: number;
  datatype: Datatype;
}

/**
 * An inverted index of sparse vectors, labels as in VectorIndex. Search is exact: the
 * documents sharing at least one dimension with the query, by dot product (larger is
 * better), ties by label ascending. Indices of a vector may come in any order (they are
 * sorted); a repeated index, a length mismatch or a non-finite value is
 * QUIVER_INVALID_ARGUMENT and the whole call changes nothing.
 */
export interface SparseIndex {
  /** Inserts or replaces documents. */
  upsert(batch: SparseBatch): Promise<void>;
  /** Removes documents; resolves with how many existed. */
  delete(labels: BigUint64Array): Promise<number>;
  search(indices: Uint32Array, values: Float32Array, options: SparseSearchOptions): Promise<SearchResult>;
  /** The stored vectors of those of `labels` present (indices ascending), in the order asked. */
  get(labels: BigUint64Array): Promise<SparseBatch>;
  /** Every stored label, ascending. */
  labels(): Promise<BigUint64Array>;
  stats(): Promise<SparseIndexStats>;
  /** Writes the index atomically, checksummed. Durable backends only. */
  save(path: string): Promise<void>;
  close(): void;
}
