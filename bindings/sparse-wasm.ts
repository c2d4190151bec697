/**
 * The WASM backend's SparseIndex: every call runs in the engine's worker thread
 * (bindings/wasm-worker.ts, ops `sparse*`), inputs copied before they are transferred.
 * `save` writes the index's file from the worker (bindings/wasm-storage-ops.ts), the
 * bytes the native backend writes.
 */

import type { SearchResult, SparseBatch, SparseIndex, SparseIndexStats, SparseSearchOptions } from './engine';
import { EngineError } from './errors';
import type { WorkerRequest } from './wasm-worker';
import { checkLabels, checkPath, checkSparseBatch, checkSparseQuery, type CheckedSparseOptions } from './validate';

type SparseRequest = Extract<WorkerRequest, { op: `sparse${string}` | 'fileSaveSparse' }>;
type Req = SparseRequest extends infer R ? (R extends { id: number } ? Omit<R, 'id'> : never) : never;

/** What this class needs of the worker host in wasm.ts. */
export interface SparseHost {
  call<T>(req: Req, transfer?: ArrayBuffer[]): Promise<T>;
}

function copyBatch(b: SparseBatch): SparseBatch {
  return { labels: b.labels.slice(), offsets: b.offsets.slice(), indices: b.indices.slice(), values: b.values.slice() };
}

export class WasmSparseIndex implements SparseIndex {
  private readonly handle: Promise<number>;
  private closed = false;

  /** A new index with `options`, or (options null) the index the worker holds at `loaded`. */
  constructor(
    private readonly host: SparseHost,
    options: CheckedSparseOptions | null,
    loaded?: number,
  ) {
    this.handle = options ? host.call<number>({ op: 'sparseNew', args: options }) : Promise.resolve(loaded ?? -1);
    this.handle.catch(() => undefined);
  }

  private async with<T>(f: (handle: number) => Promise<T>): Promise<T> {
    if (this.closed) throw new EngineError('QUIVER_CLOSED', 'sparse index is closed');
    return f(await this.handle);
  }

  upsert(batch: SparseBatch): Promise<void> {
    return this.with(async (handle) => {
      checkSparseBatch(batch);
      const b = copyBatch(batch);
      await this.host.call<null>({ op: 'sparseUpsert', args: { handle, batch: b } }, [b.labels.buffer, b.offsets.buffer, b.indices.buffer, b.values.buffer] as ArrayBuffer[]);
    });
  }

  delete(labels: BigUint64Array): Promise<number> {
    return this.with((handle) => {
      checkLabels(labels);
      const l = labels.slice();
      return this.host.call<number>({ op: 'sparseDelete', args: { handle, labels: l } }, [l.buffer as ArrayBuffer]);
    });
  }

  search(indices: Uint32Array, values: Float32Array, options: SparseSearchOptions): Promise<SearchResult> {
    return this.with((handle) => {
      checkSparseQuery(indices, values, options);
      const i = indices.slice();
      const v = values.slice();
      const allow = options.allow?.slice();
      const transfer = [i.buffer, v.buffer] as ArrayBuffer[];
      if (allow) transfer.push(allow.buffer as ArrayBuffer);
      return this.host.call<SearchResult>(
        { op: 'sparseSearch', args: { handle, indices: i, values: v, options: { k: options.k, allow, idf: options.idf, exact: options.exact } } },
        transfer,
      );
    });
  }

  get(labels: BigUint64Array): Promise<SparseBatch> {
    return this.with((handle) => {
      checkLabels(labels);
      const l = labels.slice();
      return this.host.call<SparseBatch>({ op: 'sparseGet', args: { handle, labels: l } }, [l.buffer as ArrayBuffer]);
    });
  }

  labels(): Promise<BigUint64Array> {
    return this.with((handle) => this.host.call<BigUint64Array>({ op: 'sparseLabels', args: { handle } }));
  }

  stats(): Promise<SparseIndexStats> {
    return this.with((handle) => this.host.call<SparseIndexStats>({ op: 'sparseStats', args: { handle } }));
  }

  save(path: string): Promise<void> {
    return this.with(async (handle) => {
      await this.host.call<null>({ op: 'fileSaveSparse', args: { handle, path: checkPath('path', path) } });
    });
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.handle.then(
      (handle) => this.host.call({ op: 'sparseFree', args: { handle } }).catch(() => undefined),
      () => undefined,
    );
  }
}
