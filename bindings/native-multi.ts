/**
 * The native multivector index (crates/quiver-node/src/multi.rs) as a `VectorIndex`:
 * each label holds a list of vectors (passed flat, with `counts`), scored against a list
 * of query vectors by MaxSim. What a plain index has and a list index has not
 * (quantization, flat batches of queries, originals on disk) fails clearly.
 *
 * Owns: adapting the addon's multivector class to the Engine types. Must never: run
 * engine work on the event loop.
 */

import type { Distance, IndexStats, LivePage, LiveVectors, RuleQuery, SearchOptions, SearchResult, VectorIndex } from './engine';
import { EngineError, normaliseError } from './errors';
import { checkLabel, checkLabels, checkPage, checkPath, checkSearchOptions, checkVectors } from './validate';

export interface AddonMultiIndex {
  readonly dim: number;
  readonly distance: string;
  add(labels: BigUint64Array, vectors: Float32Array, counts: Uint32Array): Promise<void>;
  delete(labels: BigUint64Array): Promise<number>;
  search(query: Float32Array, options: { k: number; ef?: number; exact?: boolean; allow?: BigUint64Array }): Promise<SearchResult>;
  getVector(label: bigint): Promise<Float32Array | null>;
  exportLive(): Promise<{ labels: BigUint64Array; vectors: Float32Array; counts: Uint32Array }>;
  exportLiveFrom(from: number, maxCount: number): Promise<{ labels: BigUint64Array; vectors: Float32Array; counts: Uint32Array; next: number }>;
  liveLabels(): Promise<BigUint64Array>;
  compact(): Promise<void>;
  save(path: string): Promise<void>;
  stats(): {
    dim: number;
    distance: string;
    count: number;
    slots: number;
    deleted: number;
    vectors: number;
    vectorBytes: number;
    graphBytes: number;
    totalBytes: number;
    flat: boolean;
    datatype: string;
  };
  close(): void;
}

/** The file magic of a multivector index (a plain index's is QVRINDEX). */
export const MULTI_MAGIC = 'QVRMULTI';

function call<T>(f: () => Promise<T>): Promise<T> {
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

export class NativeMultiVectorIndex implements VectorIndex {
  readonly dim: number;
  readonly distance: Distance;

  constructor(private readonly inner: AddonMultiIndex) {
    this.dim = inner.dim;
    this.distance = inner.distance as Distance;
  }

  add(labels: BigUint64Array, vectors: Float32Array, _threads?: number, counts?: Uint32Array): Promise<void> {
    return call(() => {
      checkLabels(labels);
      checkVectors(vectors);
      if (!(counts instanceof Uint32Array)) throw new EngineError('QUIVER_INVALID_ARGUMENT', 'a multivector index needs the number of vectors of each label (counts)');
      return this.inner.add(labels, vectors, counts);
    });
  }

  delete(labels: BigUint64Array): Promise<number> {
    return call(() => {
      checkLabels(labels);
      return this.inner.delete(labels);
    });
  }

  search(query: Float32Array, options: SearchOptions): Promise<SearchResult> {
    return call(() => {
      checkVectors(query, 'query');
      checkSearchOptions(options);
      return this.inner.search(query, { k: options.k, ef: options.ef, exact: options.exact, allow: options.allow });
    });
  }

  /** Not offered: a flat batch cannot say where one query list ends (the shard sends list queries one by one). */
  searchBatch(_queries: Float32Array, _options: SearchOptions): Promise<SearchResult[]> {
    return Promise.reject(new EngineError('QUIVER_UNSUPPORTED', 'a multivector index answers one query list per search call'));
  }

  /** Not offered: the rules score one vector per example, and MaxSim scores lists. */
  searchRule(_query: RuleQuery, _options: SearchOptions): Promise<SearchResult> {
    return Promise.reject(new EngineError('QUIVER_UNSUPPORTED', 'a multivector index cannot search by best_score, sum_scores, discover or context'));
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

  compact(): Promise<void> {
    return call(() => this.inner.compact());
  }

  stats(): IndexStats {
    let s: ReturnType<AddonMultiIndex['stats']>;
    try {
      s = this.inner.stats();
    } catch (err) {
      throw normaliseError(err);
    }
    return {
      dim: s.dim,
      distance: s.distance as Distance,
      count: s.count,
      slots: s.slots,
      deleted: s.deleted,
      vectorBytes: s.vectorBytes,
      originalBytes: 0,
      graphBytes: s.graphBytes,
      totalBytes: s.totalBytes,
      quantization: 'none',
      flat: s.flat,
      datatype: s.datatype as IndexStats['datatype'],
      multivector: { vectors: s.vectors },
    };
  }

  save(path: string): Promise<void> {
    return call(() => this.inner.save(checkPath('path', path)));
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
    this.inner.close();
  }
}
