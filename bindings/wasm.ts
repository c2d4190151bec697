/**
 * The WASM backend: the Engine interface over crates/quiver-wasm, run inside a
 * worker thread.
 *
 * Owns: compiling the module (once, on the main thread — cheap, and it lets
 * `createIndex` validate options synchronously with the engine's own rules), the
 * worker that runs every real call, request ids and the Promises they resolve, and a
 * per-index cache of stats refreshed by every mutating call (so `stats()` can stay
 * synchronous). Must never: run a build, a search or file I/O on the main thread.
 * Durable operations (save, loadIndex, openWal, sparse files) run in the worker too:
 * the engine's Rust code encodes and decodes the bytes, the worker writes and reads
 * them with node:fs (bindings/wasm-storage.ts), so files are those of the native
 * backend. Not here: moveOriginalsToDisk and `originalsPath` (they map a file; wasm32
 * has no mmap: QUIVER_UNSUPPORTED). An index file whose originals a native node kept
 * in a mapped side file loads with them read into memory.
 *
 * Inputs are copied before they are transferred to the worker, so callers keep their
 * arrays. The worker is unref'd while idle, so it never keeps a process alive.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
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
  WalOptions,
} from './engine';
import { SCORE_RULES } from './engine';
import { WasmSparseIndex } from './sparse-wasm';
import { WasmWal } from './wasm-wal';
import { MULTI_MAGIC } from './native-multi';
import { EngineError, invalidArgument, isEngineErrorCode } from './errors';
import type { WasmSearchArgs } from './wasm-abi';
import { WasmFileModule } from './wasm-files-abi';
import { WasmMultiVectorIndex } from './wasm-multi';
import type { MultiCreated } from './wasm-multi-ops';
import type { WorkerRequest, WorkerResponse } from './wasm-worker';
import {
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
  CheckedIndexOptions,
} from './validate';

function unsupported(what: string): EngineError {
  return new EngineError('QUIVER_UNSUPPORTED', `${what}: not available on the WASM engine backend; it needs the native addon (crates/quiver-node)`);
}

type Pending = { resolve: (v: unknown) => void; reject: (e: unknown) => void };
type Request = WorkerRequest extends infer R ? (R extends { id: number } ? Omit<R, 'id'> : never) : never;

/** One worker thread and the requests in flight to it. */
class WorkerHost {
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private failure: Error | null = null;

  constructor(module: WebAssembly.Module) {
    this.worker = new Worker(path.join(__dirname, 'wasm-worker.js'), { workerData: { module } });
    this.worker.unref();
    this.worker.on('message', (res: WorkerResponse) => this.settle(res));
    this.worker.on('error', (err) => this.fail(err));
    this.worker.on('exit', (code) => this.fail(new Error(`wasm engine worker exited with code ${code}`)));
  }

  private settle(res: WorkerResponse): void {
    const p = this.pending.get(res.id);
    if (!p) return;
    this.pending.delete(res.id);
    if (this.pending.size === 0) this.worker.unref();
    if (res.ok) {
      p.resolve(res.result);
    } else {
      const { code, message } = res.error;
      p.reject(isEngineErrorCode(code) ? new EngineError(code, message) : new Error(message));
    }
  }

  private fail(err: Error): void {
    this.failure = err;
    for (const p of this.pending.values()) {
      p.reject(new EngineError('QUIVER_CLOSED', `wasm engine worker failed: ${err.message}`));
    }
    this.pending.clear();
  }

  call<T>(req: Request, transfer: ArrayBuffer[] = []): Promise<T> {
    if (this.failure) {
      return Promise.reject(new EngineError('QUIVER_CLOSED', `wasm engine worker failed: ${this.failure.message}`));
    }
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      // Referenced while a reply is due, so `await` on it keeps the process alive.
      if (this.pending.size === 1) this.worker.ref();
      this.worker.postMessage({ id, ...req }, transfer);
    });
  }

  terminate(): Promise<number> {
    return this.worker.terminate();
  }
}

/** A private copy of a typed array, ready to be transferred. */
function copy<T extends Float32Array | BigUint64Array>(a: T): T {
  return a.slice() as T;
}

class WasmVectorIndex implements VectorIndex {
  readonly dim: number;
  readonly distance: Distance;
  private readonly handle: Promise<number>;
  private cached: IndexStats;
  private closed = false;

  /** `created` is the worker's reply to a create (or load) request. */
  constructor(
    private readonly host: WorkerHost,
    created: Promise<{ handle: number; stats: IndexStats }>,
    initial: IndexStats,
  ) {
    this.dim = initial.dim;
    this.distance = initial.distance;
    this.cached = initial;
    this.handle = created.then((r) => {
      this.cached = r.stats;
      return r.handle;
    });
    // Failures surface on the first call that awaits the handle.
    this.handle.catch(() => undefined);
  }

  /** Awaits the handle, then runs `f`; rejects with QUIVER_CLOSED after close(). */
  private async with<T>(f: (handle: number) => Promise<T>): Promise<T> {
    if (this.closed) throw new EngineError('QUIVER_CLOSED', 'index is closed');
    return f(await this.handle);
  }

  add(labels: BigUint64Array, vectors: Float32Array, threads?: number, counts?: Uint32Array): Promise<void> {
    return this.with(async (handle) => {
      if (counts !== undefined) throw invalidArgument('counts are for multivector indexes; this index holds one vector per label');
      checkLabels(labels);
      checkVectors(vectors);
      checkThreads(threads); // the worker runs single-threaded whatever is asked
      const l = copy(labels);
      const v = copy(vectors);
      const r = await this.host.call<{ stats: IndexStats }>({ op: 'add', args: { handle, labels: l, vectors: v } }, [
        l.buffer as ArrayBuffer,
        v.buffer as ArrayBuffer,
      ]);
      this.cached = r.stats;
    });
  }

  delete(labels: BigUint64Array): Promise<number> {
    return this.with(async (handle) => {
      checkLabels(labels);
      const l = copy(labels);
      const r = await this.host.call<{ count: number; stats: IndexStats }>({ op: 'delete', args: { handle, labels: l } }, [
        l.buffer as ArrayBuffer,
      ]);
      this.cached = r.stats;
      return r.count;
    });
  }

  private query<T>(queries: Float32Array, options: SearchOptions, batch: boolean): Promise<T> {
    return this.with(async (handle) => {
      checkVectors(queries, batch ? 'queries' : 'query');
      checkSearchOptions(options);
      const q = copy(queries);
      const allow = options.allow ? copy(options.allow) : undefined;
      const args: WasmSearchArgs = {
        k: options.k,
        ef: options.ef,
        exact: options.exact,
        allow,
        oversampling: options.oversampling,
        rescore: options.rescore,
        ignoreQuantization: options.ignoreQuantization,
      };
      const transfer = [q.buffer as ArrayBuffer];
      if (allow) transfer.push(allow.buffer as ArrayBuffer);
      return this.host.call<T>({ op: 'search', args: { handle, queries: q, batch, options: args } }, transfer);
    });
  }

  search(query: Float32Array, options: SearchOptions): Promise<SearchResult> {
    return this.query<SearchResult>(query, options, false);
  }

  searchBatch(queries: Float32Array, options: SearchOptions): Promise<SearchResult[]> {
    return this.query<SearchResult[]>(queries, options, true);
  }

  searchRule(query: RuleQuery, options: SearchOptions): Promise<SearchResult> {
    return this.with(async (handle) => {
      checkRuleQuery(query);
      checkSearchOptions(options);
      const examples = copy(query.examples);
      const allow = options.allow ? copy(options.allow) : undefined;
      const args: WasmSearchArgs = {
        k: options.k,
        ef: options.ef,
        exact: options.exact,
        allow,
        oversampling: options.oversampling,
        rescore: options.rescore,
        ignoreQuantization: options.ignoreQuantization,
      };
      const transfer = [examples.buffer as ArrayBuffer];
      if (allow) transfer.push(allow.buffer as ArrayBuffer);
      const rule = SCORE_RULES.indexOf(query.rule);
      return this.host.call<SearchResult>({ op: 'searchRule', args: { handle, rule, positives: query.positives, examples, options: args } }, transfer);
    });
  }

  getVector(label: bigint): Promise<Float32Array | null> {
    return this.with((handle) => {
      checkLabel(label);
      return this.host.call<Float32Array | null>({ op: 'getVector', args: { handle, label } });
    });
  }

  exportLive(): Promise<LiveVectors> {
    return this.with((handle) => this.host.call<LiveVectors>({ op: 'exportLive', args: { handle } }));
  }

  exportLiveFrom(from: number, maxCount: number): Promise<LivePage> {
    return this.with((handle) => {
      checkPage(from, maxCount);
      return this.host.call<LivePage>({ op: 'exportLiveFrom', args: { handle, from, maxCount } });
    });
  }

  /** The export's labels (the worker holds no cheaper list). */
  async liveLabels(): Promise<BigUint64Array> {
    return (await this.exportLive()).labels;
  }

  compact(threads?: number): Promise<void> {
    return this.with(async (handle) => {
      checkThreads(threads);
      const r = await this.host.call<{ stats: IndexStats }>({ op: 'compact', args: { handle } });
      this.cached = r.stats;
    });
  }

  /** As of the last completed call through this object (the worker owns the truth). */
  stats(): IndexStats {
    if (this.closed) throw new EngineError('QUIVER_CLOSED', 'index is closed');
    return { ...this.cached };
  }

  save(path: string): Promise<void> {
    return this.with(async (handle) => {
      await this.host.call<null>({ op: 'fileSaveIndex', args: { handle, path: checkPath('path', path) } });
    });
  }

  moveOriginalsToDisk(path: string): Promise<void> {
    return Promise.reject(unsupported(`cannot map vectors from ${String(path)}`));
  }

  /** The originals of a WASM index are always in memory (an index loaded from a side file read it whole). */
  moveOriginalsToMemory(): Promise<void> {
    return Promise.resolve();
  }

  moveGraphToDisk(path: string): Promise<void> {
    return Promise.reject(unsupported(`cannot map the graph to ${String(path)}`));
  }

  /** The graph of a WASM index is always in memory. */
  moveGraphToMemory(): Promise<void> {
    return Promise.resolve();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.handle.then(
      (handle) => this.host.call({ op: 'free', args: { handle } }).catch(() => undefined),
      () => undefined,
    );
  }
}

/** Reads and compiles the module; throws when the file is missing or not valid wasm. */
export function compileWasm(file: string): WebAssembly.Module {
  return new WebAssembly.Module(fs.readFileSync(file));
}

export class WasmEngine implements Engine {
  readonly backend = 'wasm' as const;
  readonly durable = true;
  readonly kernels: string;
  /** Main-thread instance, used only for cheap synchronous calls (kernel name, option checks). */
  private readonly local: WasmFileModule;
  private host: WorkerHost | null = null;

  constructor(private readonly module: WebAssembly.Module) {
    this.local = new WasmFileModule(module);
    this.kernels = this.local.kernelName();
  }

  private worker(): WorkerHost {
    if (!this.host) this.host = new WorkerHost(this.module);
    return this.host;
  }

  createIndex(options: IndexOptions): VectorIndex {
    const o = checkIndexOptions(options);
    if (o.originalsPath !== undefined) throw unsupported(`cannot keep vectors in the mapped file ${o.originalsPath}: wasm32 has no memory-mapped files`);
    if (o.multivector) return this.createMulti(o);
    // Let the engine judge the options now, so bad ones throw here as they do natively.
    const probe = this.local.create(o);
    let initial: IndexStats;
    try {
      initial = this.local.stats(probe);
    } finally {
      this.local.free(probe);
    }
    const host = this.worker();
    return new WasmVectorIndex(host, host.call({ op: 'create', args: { options: o } }), initial);
  }

  /** A multivector index: options judged by the engine now (a probe on this thread), built in the worker. */
  private createMulti(o: CheckedIndexOptions): VectorIndex {
    if (o.quantization !== 'none') throw new EngineError('QUIVER_UNSUPPORTED', 'multivector indexes are not quantized');
    const probe = this.local.multiNew(o);
    let initial: IndexStats;
    try {
      initial = this.local.multiStats(probe);
    } finally {
      this.local.multiFree(probe);
    }
    const host = this.worker();
    return new WasmMultiVectorIndex(host, host.call<MultiCreated>({ op: 'multiCreate', args: { options: o } }), initial);
  }

  /**
   * Opens the file at once and hands the worker its descriptor (threads share them):
   * the load reads what was there at the call even if the file is renamed or its
   * directory moved meanwhile (a snapshot recovery preloads files it then moves), as
   * the native backend's load, which opens at once on the libuv pool, does.
   */
  async loadIndex(path: string): Promise<VectorIndex> {
    const file = checkPath('path', path);
    const host = this.worker();
    let fh: fs.promises.FileHandle | null = null;
    try {
      fh = await fs.promises.open(file, 'r');
    } catch {
      // The worker's read reports why, with the engine's error code (NOT_FOUND, IO).
    }
    try {
      const fd = fh?.fd;
      if (fh !== null && (await startsWith(fh, MULTI_MAGIC))) {
        const m = await host.call<MultiCreated>({ op: 'multiLoad', args: { path: file, fd } });
        return new WasmMultiVectorIndex(host, Promise.resolve(m), m.stats);
      }
      const loaded = await host.call<{ handle: number; stats: IndexStats }>({ op: 'fileLoadIndex', args: { path: file, fd } });
      return new WasmVectorIndex(host, Promise.resolve(loaded), loaded.stats);
    } finally {
      await fh?.close();
    }
  }

  openWal(dir: string, options?: WalOptions): Promise<Wal> {
    return WasmWal.open(this.worker(), dir, options);
  }

  createSparseIndex(options?: SparseIndexOptions): SparseIndex {
    return new WasmSparseIndex(this.worker(), checkSparseOptions(options));
  }

  async loadSparseIndex(path: string): Promise<SparseIndex> {
    const file = checkPath('path', path);
    const host = this.worker();
    const handle = await host.call<number>({ op: 'fileLoadSparse', args: { path: file } });
    return new WasmSparseIndex(host, null, handle);
  }

  /** Stops the worker; indexes created by this engine become unusable. */
  async shutdown(): Promise<void> {
    const host = this.host;
    this.host = null;
    if (host) await host.terminate();
  }
}

/** Whether the open file starts with `magic`. */
async function startsWith(fh: fs.promises.FileHandle, magic: string): Promise<boolean> {
  const buf = Buffer.alloc(magic.length);
  const { bytesRead } = await fh.read(buf, 0, magic.length, 0);
  return bytesRead === magic.length && buf.toString('latin1') === magic;
}
