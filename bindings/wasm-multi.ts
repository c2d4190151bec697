/**
 * The WASM backend's multivector index (IndexOptions.multivector): every call runs in
 * the engine worker (bindings/wasm-multi-ops.ts), inputs copied before they are
 * transferred, stats cached from the last finished call so `stats()` stays
 * synchronous. Behaves as bindings/native-multi.ts does, over the same core code.
 */

import type { Distance, IndexStats, LivePage, LiveVectors, RuleQuery, SearchOptions, SearchResult, VectorIndex } from './engine';
import { EngineError } from './errors';
import type { MultiCreated, MultiRequest } from './wasm-multi-ops';
import { checkLabel, checkLabels, checkPage, checkPath, checkSearchOptions, checkThreads, checkVectors } from './validate';

type Req = MultiRequest extends infer R ? (R extends { id: number } ? Omit<R, 'id'> : never) : never;

export interface MultiHost {
  call<T>(req: Req, transfer?: ArrayBuffer[]): Promise<T>;
}

export class WasmMultiVectorIndex implements VectorIndex {
  readonly dim: number;
  readonly distance: Distance;
  private readonly handle: Promise<number>;
  private cached: IndexStats;
  private closed = false;

  constructor(
    private readonly host: MultiHost,
    created: Promise<MultiCreated>,
    initial: IndexStats,
  ) {
    this.dim = initial.dim;
    this.distance = initial.distance;
    this.cached = initial;
    this.handle = created.then((r) => {
      this.cached = r.stats;
      return r.handle;
    });
    this.handle.catch(() => undefined);
  }

  private async with<T>(f: (handle: number) => Promise<T>): Promise<T> {
    if (this.closed) throw new EngineError('QUIVER_CLOSED', 'index is closed');
    return f(await this.handle);
  }

  add(labels: BigUint64Array, vectors: Float32Array, threads?: number, counts?: Uint32Array): Promise<void> {
    return this.with(async (handle) => {
      checkLabels(labels);
      checkVectors(vectors);
      checkThreads(threads);
      if (!(counts instanceof Uint32Array)) throw new EngineError('QUIVER_INVALID_ARGUMENT', 'a multivector index needs the number of vectors of each label (counts)');
      const l = labels.slice();
      const v = vectors.slice();
      const c = counts.slice();
      const r = await this.host.call<{ stats: IndexStats }>({ op: 'multiAdd', args: { handle, labels: l, vectors: v, counts: c } }, [
        l.buffer,
        v.buffer,
        c.buffer,
      ] as ArrayBuffer[]);
      this.cached = r.stats;
    });
  }

  delete(labels: BigUint64Array): Promise<number> {
    return this.with(async (handle) => {
      checkLabels(labels);
      const l = labels.slice();
      const r = await this.host.call<{ count: number; stats: IndexStats }>({ op: 'multiDelete', args: { handle, labels: l } }, [l.buffer as ArrayBuffer]);
      this.cached = r.stats;
      return r.count;
    });
  }

  search(query: Float32Array, options: SearchOptions): Promise<SearchResult> {
    return this.with((handle) => {
      checkVectors(query, 'query');
      checkSearchOptions(options);
      const q = query.slice();
      const allow = options.allow?.slice();
      const transfer = [q.buffer as ArrayBuffer];
      if (allow) transfer.push(allow.buffer as ArrayBuffer);
      return this.host.call<SearchResult>({ op: 'multiSearch', args: { handle, query: q, k: options.k, ef: options.ef, exact: options.exact, allow } }, transfer);
    });
  }

  /** Not offered: a flat batch cannot say where one query list ends (the shard sends list queries one by one). */
  searchBatch(_queries: Float32Array, _options: SearchOptions): Promise<SearchResult[]> {
    return Promise.reject(new EngineError('QUIVER_UNSUPPORTED', 'a multivector index answers one query list per search call'));
  }

  /** Not offered: the rules score one vector per example, and MaxSim scores lists (as on native). */
  searchRule(_query: RuleQuery, _options: SearchOptions): Promise<SearchResult> {
    return Promise.reject(new EngineError('QUIVER_UNSUPPORTED', 'a multivector index cannot search by best_score, sum_scores, discover or context'));
  }

  getVector(label: bigint): Promise<Float32Array | null> {
    return this.with((handle) => {
      checkLabel(label);
      return this.host.call<Float32Array | null>({ op: 'multiGetVector', args: { handle, label } });
    });
  }

  exportLive(): Promise<LiveVectors> {
    return this.with((handle) => this.host.call<LiveVectors>({ op: 'multiExportLive', args: { handle } }));
  }

  exportLiveFrom(from: number, maxCount: number): Promise<LivePage> {
    return this.with((handle) => {
      checkPage(from, maxCount);
      return this.host.call<LivePage>({ op: 'multiExportLiveFrom', args: { handle, from, maxCount } });
    });
  }

  async liveLabels(): Promise<BigUint64Array> {
    return (await this.exportLive()).labels;
  }

  compact(threads?: number): Promise<void> {
    return this.with(async (handle) => {
      checkThreads(threads);
      const r = await this.host.call<{ stats: IndexStats }>({ op: 'multiCompact', args: { handle } });
      this.cached = r.stats;
    });
  }

  stats(): IndexStats {
    if (this.closed) throw new EngineError('QUIVER_CLOSED', 'index is closed');
    return { ...this.cached, multivector: { ...this.cached.multivector! } };
  }

  save(path: string): Promise<void> {
    return this.with(async (handle) => {
      await this.host.call<null>({ op: 'multiSave', args: { handle, path: checkPath('path', path) } });
    });
  }

  moveOriginalsToMemory(): Promise<void> {
    return Promise.resolve();
  }

  moveOriginalsToDisk(_path: string): Promise<void> {
    return Promise.reject(new EngineError('QUIVER_INVALID_ARGUMENT', 'a multivector index keeps no originals apart (it is not quantized)'));
  }

  moveGraphToMemory(): Promise<void> {
    return Promise.resolve();
  }

  moveGraphToDisk(_path: string): Promise<void> {
    return Promise.reject(new EngineError('QUIVER_INVALID_ARGUMENT', 'a multivector index keeps its graph in memory'));
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.handle.then(
      (handle) => this.host.call({ op: 'multiFree', args: { handle } }).catch(() => undefined),
      () => undefined,
    );
  }
}
