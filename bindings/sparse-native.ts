/**
 * The native backend's SparseIndex over the addon's NativeSparseIndex
 * (crates/quiver-node/src/sparse.rs). Every call runs on the libuv pool.
 */

import type { SearchResult, SparseBatch, SparseIndex, SparseIndexStats, SparseSearchOptions } from './engine';
import { normaliseError } from './errors';
import { checkLabels, checkPath, checkSparseBatch, checkSparseQuery, type CheckedSparseOptions } from './validate';

export interface AddonSparseIndex {
  upsert(labels: BigUint64Array, offsets: Uint32Array, indices: Uint32Array, values: Float32Array): Promise<void>;
  delete(labels: BigUint64Array): Promise<number>;
  search(indices: Uint32Array, values: Float32Array, options: SparseSearchOptions): Promise<SearchResult>;
  get(labels: BigUint64Array): Promise<SparseBatch>;
  labels(): Promise<BigUint64Array>;
  save(path: string): Promise<void>;
  stats(): SparseIndexStats;
  close(): void;
}

export interface SparseAddon {
  NativeSparseIndex: new (fullScanThreshold: number, datatype: string) => AddonSparseIndex;
  loadSparseIndex(path: string): Promise<AddonSparseIndex>;
}

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

export class NativeSparseIndex implements SparseIndex {
  constructor(private readonly inner: AddonSparseIndex) {}

  upsert(b: SparseBatch): Promise<void> {
    return call(() => {
      checkSparseBatch(b);
      return this.inner.upsert(b.labels, b.offsets, b.indices, b.values);
    });
  }

  delete(labels: BigUint64Array): Promise<number> {
    return call(() => {
      checkLabels(labels);
      return this.inner.delete(labels);
    });
  }

  search(indices: Uint32Array, values: Float32Array, options: SparseSearchOptions): Promise<SearchResult> {
    return call(() => {
      checkSparseQuery(indices, values, options);
      return this.inner.search(indices, values, { k: options.k, allow: options.allow, idf: options.idf, exact: options.exact });
    });
  }

  get(labels: BigUint64Array): Promise<SparseBatch> {
    return call(() => {
      checkLabels(labels);
      return this.inner.get(labels);
    });
  }

  labels(): Promise<BigUint64Array> {
    return call(() => this.inner.labels());
  }

  stats(): Promise<SparseIndexStats> {
    return call(async () => this.inner.stats());
  }

  save(path: string): Promise<void> {
    return call(() => this.inner.save(checkPath('path', path)));
  }

  close(): void {
    this.inner.close();
  }
}

export function createNativeSparse(addon: SparseAddon, o: CheckedSparseOptions): SparseIndex {
  try {
    return new NativeSparseIndex(new addon.NativeSparseIndex(o.fullScanThreshold, o.datatype));
  } catch (err) {
    throw normaliseError(err);
  }
}

export function loadNativeSparse(addon: SparseAddon, path: string): Promise<SparseIndex> {
  return call(async () => new NativeSparseIndex(await addon.loadSparseIndex(checkPath('path', path))));
}
