/**
 * The native backend: the Engine interface over the napi-rs addon (crates/quiver-node).
 *
 * Owns: loading the addon, checking JavaScript argument types, and adapting the
 * addon's shapes (BigUint64Array of sequence numbers, flat option objects) to the
 * Engine types. Must never: hold the event loop for long — every addon call that
 * does real work returns a Promise resolved from the libuv thread pool, except the
 * search fast path below (searches measured cheaper than the hop, within a per-turn
 * budget, run inline; see FastPath).
 *
 * Note: long builds occupy one libuv pool thread (the build itself uses its own
 * threads), as does fs I/O; raise UV_THREADPOOL_SIZE if many run at once.
 */

import type {
  Distance,
  Engine,
  IndexOptions,
  IndexStats,
  LiveVectors,
  LivePage,
  RuleQuery,
  SearchOptions,
  SearchResult,
  SparseIndex,
  SparseIndexOptions,
  VectorIndex,
  Wal,
  WalOpenReport,
  WalOptions,
  WalRecord,
} from './engine';
import { concurrent } from './demand';
import { EngineError, invalidArgument, normaliseError } from './errors';
import { createNativeSparse, loadNativeSparse, type SparseAddon } from './sparse-native';
import { MULTI_MAGIC, NativeMultiVectorIndex, type AddonMultiIndex } from './native-multi';
import {
  checkCount,
  checkIndexOptions,
  checkLabel,
  checkLabels,
  checkPage,
  checkPath,
  checkRuleQuery,
  checkSearchOptions,
  checkSparseOptions,
  checkThreads,
  checkVectors,
} from './validate';

// ---- The addon's own surface (mirrors crates/quiver-node/src/lib.rs) ----

interface AddonSearchOptions {
  k: number;
  ef?: number;
  exact?: boolean;
  allow?: BigUint64Array;
  oversampling?: number;
  rescore?: boolean;
  ignoreQuantization?: boolean;
}

interface AddonIndex {
  readonly dim: number;
  readonly distance: string;
  readonly closed: boolean;
  add(labels: BigUint64Array, vectors: Float32Array, threads?: number): Promise<void>;
  delete(labels: BigUint64Array): Promise<number>;
  /** The hits packed in one ArrayBuffer (`unpackHits`). */
  search(query: Float32Array, options: AddonSearchOptions): Promise<ArrayBuffer>;
  /** Synchronous search; null (nothing searched) while a writer holds the index. */
  searchNow(query: Float32Array, options: AddonSearchOptions): ArrayBuffer | null;
  searchBatch(queries: Float32Array, options: AddonSearchOptions): Promise<SearchResult[]>;
  searchRule(rule: string, positives: number, examples: Float32Array, options: AddonSearchOptions): Promise<ArrayBuffer>;
  getVector(label: bigint): Promise<Float32Array | null>;
  exportLive(): Promise<LiveVectors>;
  exportLiveFrom(from: number, maxCount: number): Promise<LivePage>;
  liveLabels(): Promise<BigUint64Array>;
  compact(threads?: number): Promise<void>;
  save(path: string): Promise<void>;
  moveOriginalsToDisk(path: string): Promise<void>;
  moveOriginalsToMemory(): Promise<void>;
  moveGraphToDisk(path: string): Promise<void>;
  moveGraphToMemory(): Promise<void>;
  stats(): Omit<IndexStats, 'distance' | 'quantization' | 'datatype'> & { distance: string; quantization: string; datatype: string };
  close(): void;
}

interface AddonWalReport {
  firstSeq: bigint;
  lastSeq: bigint;
  truncatedBytes: number;
  truncatedFile?: string | null;
  truncatedOffset?: number | null;
}

interface AddonWal {
  readonly report: AddonWalReport;
  append(records: Buffer[], sync?: boolean): Promise<BigUint64Array>;
  sync(): Promise<void>;
  readFrom(seq: bigint, maxRecords?: number): Promise<WalRecord[]>;
  truncateBefore(seq: bigint, keepBytes?: number): Promise<void>;
  firstSeq(): bigint;
  lastSeq(): bigint;
  close(): Promise<void>;
}

export interface Addon extends SparseAddon {
  NativeIndex: new (options: object) => AddonIndex;
  loadIndex(path: string): Promise<AddonIndex>;
  NativeMultiIndex: new (options: object) => AddonMultiIndex;
  loadMultiIndex(path: string): Promise<AddonMultiIndex>;
  openWal(dir: string, options?: { segmentBytes?: number; retentionBytes?: number }): Promise<AddonWal>;
  kernelName(): string;
  /** The form of search results (crates/quiver-node `search_layout`); absent in addons older than the packed form. */
  searchLayout?(): number;
}

/** The search result form this build reads (`unpackHits`). */
const SEARCH_LAYOUT = 1;

/** Loads the addon file; throws whatever `require` throws when it is missing or broken, and refuses one built from other sources. */
export function loadAddon(file: string): Addon {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const addon = require(file) as Addon;
  if (typeof addon.NativeIndex !== 'function' || typeof addon.kernelName !== 'function') {
    throw new Error(`${file} is not the Quiver addon`);
  }
  const layout = typeof addon.searchLayout === 'function' ? addon.searchLayout() : 0;
  if (layout !== SEARCH_LAYOUT) {
    throw new Error(`${file} answers searches in form ${layout}, this build reads form ${SEARCH_LAYOUT}: it was built from other sources (rebuild it: npm run build:addon)`);
  }
  return addon;
}

/** Runs an addon call, turning synchronous throws into rejections with normalised errors. */
function call<T>(f: () => Promise<T>): Promise<T> {
  // Not an async function: on the search path each await costs microtask turns.
  let p: Promise<T>;
  try {
    p = f();
  } catch (err) {
    return Promise.reject(normaliseError(err));
  }
  return p.then(undefined, (err: unknown) => {
    throw normaliseError(err);
  });
}

function sync<T>(f: () => T): T {
  try {
    return f();
  } catch (err) {
    throw normaliseError(err);
  }
}

function searchOptions(options: SearchOptions): AddonSearchOptions {
  checkSearchOptions(options);
  return {
    k: options.k,
    ef: options.ef,
    exact: options.exact,
    allow: options.allow,
    oversampling: options.oversampling,
    rescore: options.rescore,
    ignoreQuantization: options.ignoreQuantization,
  };
}

// ---- The search fast path ----
//
// An awaited search() costs the search plus the hop to a pool thread and back (napi
// async work, a thread wake-up on each side, the result copy): measured at tens of µs
// on this machine (bench/engine/percall.ts prints it), as much as a whole search at
// recall 0.95 on small sets. So a search whose measured cost is small runs inline on
// the event loop and its Promise is already resolved. Two bounds keep the loop free:
// - FAST_PATH_MAX_US: only searches whose estimated cost (the last dearer search, or a
//   running mean decaying from it), per index and per option set (k, ef, oversampling,
//   rescore), is below it run inline; the first searches of
//   an option set take the hop and teach the estimate (computeUs comes back either way);
// - TURN_BUDGET_US: inline searches of one event-loop turn together stop at this budget;
//   the next cheap search waits for the next turn (setImmediate) and runs inline there,
//   so timers and I/O run between turns. A loop of awaited searches resolves in
//   microtasks and would otherwise never yield. (It used to take the hop instead: on
//   GloVe-50 at ef 72, one caller then paid the hop on every third search while the
//   loop sat idle.)
// - Searches already on the pool: while any search of this process waits on the pool,
//   the next one takes the hop too. Concurrent callers (a server with several requests
//   in flight) then get the pool's threads searching while the event loop serves the
//   others, instead of every search serialised on the event loop; one caller awaiting
//   one search at a time never has one outstanding and keeps the inline path.
// - Concurrent clients (demand.ts, told by the API layers): while a server answers
//   several clients at once, searches take the hop. The event loop is then the scarce
//   thread (reading, parsing and answering the other clients' requests) and the pool
//   searches on another core: 100k points, ef 64, 8 connections on two cores answered
//   11.8-11.9k queries/s this way against 9.1-9.9k searching inline whenever the pool
//   was empty (wrk, side by side); one connection at a time is unchanged.
// Filtered (allow) and exact searches always take the hop: their cost depends on the
// filter and the index size, not on the option set.

/** A search estimated cheaper than this (µs) may run on the event loop. */
export const FAST_PATH_MAX_US = 200;
/** Inline search time (µs) allowed per event-loop turn, across all indexes. */
export const TURN_BUDGET_US = 300;
const EWMA_WEIGHT = 0.125;
const MAX_OPTION_SETS = 64;

let turnSpentUs = 0;
/** Searches of this process on the pool now (plain searches that took the hop). */
let onPool = 0;
/** Searches waiting for the next turn to run inline (at most one: see FastPath.route). */
let waiting = 0;
/** How the plain searches of this process ran so far (for tests and diagnostics). */
const paths = { inline: 0, nextTurn: 0, pool: 0 };
export function searchPaths(): { inline: number; nextTurn: number; pool: number } {
  return { ...paths };
}
let turnResetQueued = false;
function resetTurn(): void {
  turnSpentUs = 0;
  turnResetQueued = false;
}

/** Running cost estimates (µs) of one index's searches, keyed by option set. */
class FastPath {
  private readonly costUs = new Map<string, number>();

  static key(o: AddonSearchOptions): string | null {
    if (o.allow !== undefined || o.exact === true) return null;
    return `${o.k}|${o.ef}|${o.oversampling}|${o.rescore}|${o.ignoreQuantization}`;
  }

  /**
   * Where a search with this key runs: inline now; inline in the next turn, when it is
   * cheap enough but this turn's budget is spent (only once something was spent, so
   * the turn's reset is queued ahead of it) and no other search waits for that turn;
   * or on the pool. A second search over the budget means several are in flight at
   * once (Promise.all, a batch): those go to the pool, whose threads search in parallel.
   */
  route(key: string): 'now' | 'next-turn' | 'pool' {
    const est = this.costUs.get(key);
    if (onPool !== 0 || concurrent() || est === undefined || est >= FAST_PATH_MAX_US) return 'pool';
    // Nothing spent yet runs now whatever the estimate: waiting needs the turn's reset
    // queued ahead of it (FastPath.spend queues it), or it would wait turn after turn.
    if (turnSpentUs === 0 || turnSpentUs + est <= TURN_BUDGET_US) return 'now';
    return waiting === 0 ? 'next-turn' : 'pool';
  }

  learn(key: string, us: number | undefined): void {
    if (us === undefined || !Number.isFinite(us)) return;
    const prev = this.costUs.get(key);
    if (prev === undefined && this.costUs.size >= MAX_OPTION_SETS) this.costUs.clear();
    // Up at once, down slowly: a search dearer than the estimate (the index grew, the
    // machine is busy) sends the next ones to the pool until cheaper ones bring it down.
    this.costUs.set(key, prev === undefined || us > prev ? us : prev + EWMA_WEIGHT * (us - prev));
  }

  /** Charges an inline search to this turn's budget. */
  static spend(us: number): void {
    turnSpentUs += us;
    if (!turnResetQueued) {
      turnResetQueued = true;
      setImmediate(resetTurn);
    }
  }
}

/**
 * One query's hits as the addon packs them (crates/quiver-node `PackedHits`): n labels
 * (u64), n scores (f32), the engine's time in µs (f32), in one ArrayBuffer. Views over
 * it, made here: cheaper than the addon defining an object of two typed arrays.
 */
export function unpackHits(buf: ArrayBuffer): SearchResult {
  // loadAddon refuses an addon of another form; this keeps a wrong one from reading as no hits.
  if (!(buf instanceof ArrayBuffer) || buf.byteLength % 12 !== 4) throw new EngineError('QUIVER_CORRUPT', 'the engine addon answered a search in a form this build does not read');
  const n = (buf.byteLength - 4) / 12;
  return { labels: new BigUint64Array(buf, 0, n), scores: new Float32Array(buf, n * 8, n), computeUs: new Float32Array(buf, n * 12, 1)[0] };
}

class NativeVectorIndex implements VectorIndex {
  readonly dim: number;
  readonly distance: Distance;
  private readonly fast = new FastPath();
  /**
   * Searches issued before close() that wait for the next turn. close() starts them on
   * the pool first: a search issued before close() answers, as one that took the hop
   * at once does (the addon holds the index for it).
   */
  private readonly waitingStarts = new Set<(mayWait: boolean) => void>();

  constructor(private readonly inner: AddonIndex) {
    this.dim = inner.dim;
    this.distance = inner.distance as Distance;
  }

  add(labels: BigUint64Array, vectors: Float32Array, threads?: number, counts?: Uint32Array): Promise<void> {
    return call(() => {
      if (counts !== undefined) throw invalidArgument('counts are for multivector indexes; this index holds one vector per label');
      checkLabels(labels);
      checkVectors(vectors);
      return this.inner.add(labels, vectors, checkThreads(threads));
    });
  }

  delete(labels: BigUint64Array): Promise<number> {
    return call(() => {
      checkLabels(labels);
      return this.inner.delete(labels);
    });
  }

  search(query: Float32Array, options: SearchOptions): Promise<SearchResult> {
    let o: AddonSearchOptions;
    let key: string | null;
    try {
      checkVectors(query, 'query');
      o = searchOptions(options);
      key = FastPath.key(o);
    } catch (err) {
      return Promise.reject(normaliseError(err));
    }
    return this.searchChecked(query, o, key);
  }

  /** `mayWait`: false when close() starts a search that waited for the next turn. */
  private searchChecked(query: Float32Array, o: AddonSearchOptions, key: string | null, mayWait = true): Promise<SearchResult> {
    try {
      let route = key === null ? 'pool' : this.fast.route(key);
      if (route === 'next-turn' && !mayWait) route = 'pool';
      if (route === 'next-turn') {
        // The turn's inline budget is spent: the loop gets its turn (timers, I/O), and
        // the search runs inline after it, instead of paying the hop to the pool and
        // back while the loop has nothing else to do. The query is copied: the caller
        // may reuse its buffer once search() has returned.
        const copy = query.slice();
        waiting++;
        paths.nextTurn++;
        return new Promise((resolve) => {
          const start = (mayWaitAgain: boolean) => {
            if (!this.waitingStarts.delete(start)) return; // close() started it already
            waiting--;
            resolve(this.searchChecked(copy, o, key, mayWaitAgain));
          };
          this.waitingStarts.add(start);
          setImmediate(() => start(true));
        });
      }
      if (key !== null && route === 'now') {
        const t0 = performance.now();
        const packed = this.inner.searchNow(query, o);
        FastPath.spend((performance.now() - t0) * 1000);
        if (packed !== null) {
          paths.inline++;
          const now = unpackHits(packed);
          this.fast.learn(key, now.computeUs);
          // Resolved as it is: not through call()'s rejection handler, one Promise fewer.
          return Promise.resolve(now);
        }
      }
    } catch (err) {
      return Promise.reject(normaliseError(err));
    }
    if (key === null) return call(() => this.inner.search(query, o).then(unpackHits));
    const learnKey = key;
    return call(() => {
      const pending = this.inner.search(query, o);
      onPool++; // after the call: one that throws at once never reached the pool
      paths.pool++;
      return pending.then(
        (packed) => {
          onPool--;
          const r = unpackHits(packed);
          this.fast.learn(learnKey, r.computeUs);
          return r;
        },
        (err: unknown) => {
          onPool--;
          throw err;
        },
      );
    });
  }

  searchBatch(queries: Float32Array, options: SearchOptions): Promise<SearchResult[]> {
    return call(() => {
      checkVectors(queries, 'queries');
      const o = searchOptions(options);
      const plain = FastPath.key(o) !== null;
      return this.inner.searchBatch(queries, o).then((r) => {
        // A batch runs on the pool: its plain searches count there (searchPaths), one per query.
        if (plain) paths.pool += r.length;
        return r;
      });
    });
  }

  searchRule(query: RuleQuery, options: SearchOptions): Promise<SearchResult> {
    return call(() => {
      checkRuleQuery(query);
      return this.inner.searchRule(query.rule, query.positives, query.examples, searchOptions(options)).then(unpackHits);
    });
  }

  getVector(label: bigint): Promise<Float32Array | null> {
    return call(() => {
      checkLabel(label);
      return this.inner.getVector(label);
    });
  }

  exportLive(): Promise<LiveVectors> {
    return call(() => this.inner.exportLive());
  }

  exportLiveFrom(from: number, maxCount: number): Promise<LivePage> {
    return call(() => {
      checkPage(from, maxCount);
      return this.inner.exportLiveFrom(from, maxCount);
    });
  }

  liveLabels(): Promise<BigUint64Array> {
    return call(() => this.inner.liveLabels());
  }

  compact(threads?: number): Promise<void> {
    return call(() => this.inner.compact(checkThreads(threads)));
  }

  stats(): IndexStats {
    const s = sync(() => this.inner.stats());
    return {
      dim: s.dim,
      distance: s.distance as Distance,
      count: s.count,
      slots: s.slots,
      deleted: s.deleted,
      vectorBytes: s.vectorBytes,
      originalBytes: s.originalBytes,
      originalFileBytes: s.originalFileBytes,
      graphBytes: s.graphBytes,
      graphFileBytes: s.graphFileBytes,
      totalBytes: s.totalBytes,
      quantization: s.quantization as IndexStats['quantization'],
      flat: s.flat,
      datatype: s.datatype as IndexStats['datatype'],
    };
  }

  save(path: string): Promise<void> {
    return call(() => this.inner.save(checkPath('path', path)));
  }

  moveOriginalsToDisk(path: string): Promise<void> {
    return call(() => this.inner.moveOriginalsToDisk(checkPath('path', path)));
  }

  moveOriginalsToMemory(): Promise<void> {
    return call(() => this.inner.moveOriginalsToMemory());
  }

  moveGraphToDisk(path: string): Promise<void> {
    return call(() => this.inner.moveGraphToDisk(checkPath('path', path)));
  }

  moveGraphToMemory(): Promise<void> {
    return call(() => this.inner.moveGraphToMemory());
  }

  close(): void {
    for (const start of [...this.waitingStarts]) start(false);
    this.inner.close();
  }
}

class NativeWalLog implements Wal {
  readonly report: WalOpenReport;
  /**
   * Calls issued and not settled. The addon's close is a pool job of its own, which
   * could run beside them and fail an append issued before close() (or one whose
   * records were written and whose fsync then found the log closed): close() waits
   * for these first, and calls issued after close() fail with QUIVER_CLOSED.
   */
  private readonly inFlight = new Set<Promise<unknown>>();
  private closing: Promise<void> | null = null;

  constructor(private readonly inner: AddonWal) {
    const r = inner.report;
    this.report = {
      firstSeq: r.firstSeq,
      lastSeq: r.lastSeq,
      truncatedBytes: r.truncatedBytes,
      truncatedFile: r.truncatedFile ?? null,
      truncatedOffset: r.truncatedOffset ?? null,
    };
  }

  /** Runs `f` as a call close() waits for; after close(), fails with QUIVER_CLOSED. */
  private tracked<T>(f: () => Promise<T>): Promise<T> {
    if (this.closing !== null) return Promise.reject(new EngineError('QUIVER_CLOSED', 'WAL is closed'));
    const p = call(f);
    this.inFlight.add(p);
    const done = () => {
      this.inFlight.delete(p);
    };
    p.then(done, done);
    return p;
  }

  append(records: Buffer[], sync?: boolean): Promise<bigint[]> {
    return this.tracked(async () => {
      if (!Array.isArray(records) || !records.every((r) => r instanceof Uint8Array)) {
        throw invalidArgument('records must be an array of Buffers');
      }
      const seqs = await this.inner.append(records, sync === true);
      return Array.from(seqs);
    });
  }

  sync(): Promise<void> {
    return this.tracked(() => this.inner.sync());
  }

  readFrom(seq: bigint, maxRecords?: number): Promise<WalRecord[]> {
    return this.tracked(() => {
      checkLabel(seq);
      return this.inner.readFrom(seq, maxRecords === undefined ? undefined : checkCount('maxRecords', maxRecords, Number.MAX_SAFE_INTEGER));
    });
  }

  truncateBefore(seq: bigint, keepBytes?: number): Promise<void> {
    return this.tracked(() => {
      checkLabel(seq);
      if (keepBytes === undefined) return this.inner.truncateBefore(seq);
      return this.inner.truncateBefore(seq, checkCount('keepBytes', keepBytes, Number.MAX_SAFE_INTEGER));
    });
  }

  firstSeq(): bigint {
    return sync(() => this.inner.firstSeq());
  }

  lastSeq(): bigint {
    return sync(() => this.inner.lastSeq());
  }

  close(): Promise<void> {
    if (this.closing === null) {
      const pending = [...this.inFlight];
      this.closing = Promise.allSettled(pending).then(() => call(() => this.inner.close()));
    }
    return this.closing;
  }
}

export class NativeEngine implements Engine {
  readonly backend = 'native' as const;
  readonly durable = true;
  readonly kernels: string;

  constructor(private readonly addon: Addon) {
    this.kernels = addon.kernelName();
  }

  searchPaths(): { inline: number; nextTurn: number; pool: number } {
    return searchPaths();
  }

  createIndex(options: IndexOptions): VectorIndex {
    const o = checkIndexOptions(options);
    if (o.multivector) return new NativeMultiVectorIndex(sync(() => new this.addon.NativeMultiIndex(o)));
    return new NativeVectorIndex(sync(() => new this.addon.NativeIndex(o)));
  }

  loadIndex(path: string): Promise<VectorIndex> {
    return call(async () => {
      const file = checkPath('path', path);
      // The file's magic says which kind of index it holds (a missing file fails in the engine, with its code).
      if (await hasMagic(file, MULTI_MAGIC)) return new NativeMultiVectorIndex(await this.addon.loadMultiIndex(file));
      return new NativeVectorIndex(await this.addon.loadIndex(file));
    });
  }

  openWal(dir: string, options?: WalOptions): Promise<Wal> {
    return call(async () => {
      const o = {
        segmentBytes: options?.segmentBytes === undefined ? undefined : checkCount('segmentBytes', options.segmentBytes, Number.MAX_SAFE_INTEGER),
        retentionBytes:
          options?.retentionBytes === undefined ? undefined : checkCount('retentionBytes', options.retentionBytes, Number.MAX_SAFE_INTEGER),
      };
      return new NativeWalLog(await this.addon.openWal(checkPath('dir', dir), o));
    });
  }

  createSparseIndex(options?: SparseIndexOptions): SparseIndex {
    return createNativeSparse(this.addon, checkSparseOptions(options));
  }

  loadSparseIndex(path: string): Promise<SparseIndex> {
    return loadNativeSparse(this.addon, path);
  }
}

/** Whether the file at `file` starts with `magic` (false when it cannot be read: the loader then reports why). */
async function hasMagic(file: string, magic: string): Promise<boolean> {
  const { open } = await import('node:fs/promises');
  let fh;
  try {
    fh = await open(file, 'r');
  } catch {
    return false;
  }
  try {
    const buf = Buffer.alloc(magic.length);
    const { bytesRead } = await fh.read(buf, 0, magic.length, 0);
    return bytesRead === magic.length && buf.toString('latin1') === magic;
  } finally {
    await fh.close();
  }
}
