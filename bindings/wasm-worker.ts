/**
 * The worker thread that runs the wasm engine, so builds and searches never block
 * the main event loop.
 *
 * Owns: one instance of the wasm module (compiled once on the main thread and passed
 * in `workerData`), and answering `{id, op, args}` requests strictly in arrival
 * order with `{id, ok, result}` or `{id, ok: false, error: {code, message}}`.
 * Storage requests (`file*`, `wal*`) go to bindings/wasm-storage-ops.ts, which does
 * the file I/O with node:fs; a WAL fsync runs on the libuv pool, so requests behind it
 * keep being answered. Must never: hold requests back.
 */

import { parentPort, workerData } from 'node:worker_threads';
import type { Datatype, IndexStats, SparseBatch, SparseSearchOptions } from './engine';
import { EngineError } from './errors';
import type { WasmSearchArgs } from './wasm-abi';
import { WasmFileModule } from './wasm-files-abi';
import { isStorageOp, storageOp, type StorageRequest } from './wasm-storage-ops';
import { isMultiOp, multiOp, type MultiRequest } from './wasm-multi-ops';
import type { CheckedIndexOptions } from './validate';

export type WorkerRequest =
  | { id: number; op: 'create'; args: { options: CheckedIndexOptions } }
  | { id: number; op: 'free'; args: { handle: number } }
  | { id: number; op: 'add'; args: { handle: number; labels: BigUint64Array; vectors: Float32Array } }
  | { id: number; op: 'delete'; args: { handle: number; labels: BigUint64Array } }
  | { id: number; op: 'search'; args: { handle: number; queries: Float32Array; batch: boolean; options: WasmSearchArgs } }
  | { id: number; op: 'searchRule'; args: { handle: number; rule: number; positives: number; examples: Float32Array; options: WasmSearchArgs } }
  | { id: number; op: 'getVector'; args: { handle: number; label: bigint } }
  | { id: number; op: 'exportLive'; args: { handle: number } }
  | { id: number; op: 'exportLiveFrom'; args: { handle: number; from: number; maxCount: number } }
  | { id: number; op: 'compact'; args: { handle: number } }
  | { id: number; op: 'stats'; args: { handle: number } }
  | { id: number; op: 'toBytes'; args: { handle: number } }
  | { id: number; op: 'fromBytes'; args: { bytes: Uint8Array } }
  | { id: number; op: 'sparseNew'; args: { fullScanThreshold: number; datatype: Datatype } }
  | { id: number; op: 'sparseFree'; args: { handle: number } }
  | { id: number; op: 'sparseUpsert'; args: { handle: number; batch: SparseBatch } }
  | { id: number; op: 'sparseDelete'; args: { handle: number; labels: BigUint64Array } }
  | { id: number; op: 'sparseSearch'; args: { handle: number; indices: Uint32Array; values: Float32Array; options: SparseSearchOptions } }
  | { id: number; op: 'sparseGet'; args: { handle: number; labels: BigUint64Array } }
  | { id: number; op: 'sparseLabels'; args: { handle: number } }
  | { id: number; op: 'sparseStats'; args: { handle: number } }
  | StorageRequest
  | MultiRequest;

export type WorkerResponse =
  | { id: number; ok: true; result: unknown }
  | { id: number; ok: false; error: { code?: string; message: string } };

type SearchOut = { labels: BigUint64Array; scores: Float32Array; computeUs?: number };

function main(): void {
  const port = parentPort;
  if (!port) throw new Error('wasm-worker.js must run in a worker thread');
  const wasm = new WasmFileModule((workerData as { module: WebAssembly.Module }).module);

  type Out = { result: unknown; transfer: ArrayBuffer[] };
  const handle = (req: WorkerRequest): Out | Promise<Out> => {
    if (isStorageOp(req.op)) return storageOp(wasm, req as StorageRequest, (h) => wasm.stats(h));
    if (isMultiOp(req.op)) return multiOp(wasm, req as MultiRequest);
    switch (req.op) {
      case 'create': {
        const h = wasm.create(req.args.options);
        return { result: { handle: h, stats: wasm.stats(h) }, transfer: [] };
      }
      case 'free':
        wasm.free(req.args.handle);
        return { result: null, transfer: [] };
      case 'add':
        wasm.add(req.args.handle, req.args.labels, req.args.vectors);
        return { result: { stats: wasm.stats(req.args.handle) }, transfer: [] };
      case 'delete': {
        const count = wasm.delete(req.args.handle, req.args.labels);
        return { result: { count, stats: wasm.stats(req.args.handle) }, transfer: [] };
      }
      case 'search': {
        const { handle: h, queries, batch, options } = req.args;
        const stats: IndexStats = wasm.stats(h);
        const results: SearchOut[] = [];
        const timed = (q: Float32Array): SearchOut => {
          const started = performance.now();
          const r = wasm.search(h, q, options, stats.count);
          return { ...r, computeUs: (performance.now() - started) * 1000 };
        };
        if (!batch) {
          results.push(timed(queries));
        } else {
          if (queries.length % stats.dim !== 0) {
            throw new EngineError(
              'QUIVER_DIMENSION_MISMATCH',
              `${queries.length} query values are not a multiple of dimension ${stats.dim}`,
            );
          }
          for (let off = 0; off < queries.length; off += stats.dim) {
            results.push(timed(queries.subarray(off, off + stats.dim)));
          }
        }
        const transfer = results.flatMap((r) => [r.labels.buffer as ArrayBuffer, r.scores.buffer as ArrayBuffer]);
        return { result: batch ? results : results[0], transfer };
      }
      case 'searchRule': {
        const { handle: h, rule, positives, examples, options } = req.args;
        const started = performance.now();
        const r = wasm.searchRule(h, rule, positives, examples, options, wasm.stats(h).count);
        const out: SearchOut = { ...r, computeUs: (performance.now() - started) * 1000 };
        return { result: out, transfer: [out.labels.buffer as ArrayBuffer, out.scores.buffer as ArrayBuffer] };
      }
      case 'getVector': {
        const dim = wasm.stats(req.args.handle).dim;
        const v = wasm.getVector(req.args.handle, req.args.label, dim);
        return { result: v, transfer: v ? [v.buffer as ArrayBuffer] : [] };
      }
      case 'exportLive': {
        const stats = wasm.stats(req.args.handle);
        const out = wasm.exportLive(req.args.handle, stats.count, stats.dim);
        return { result: out, transfer: [out.labels.buffer as ArrayBuffer, out.vectors.buffer as ArrayBuffer] };
      }
      case 'exportLiveFrom': {
        const { handle, from, maxCount } = req.args;
        const stats = wasm.stats(handle);
        const out = wasm.exportLiveFrom(handle, from, maxCount, Math.min(maxCount, stats.count), stats.dim);
        return { result: out, transfer: [out.labels.buffer as ArrayBuffer, out.vectors.buffer as ArrayBuffer] };
      }
      case 'compact':
        wasm.compact(req.args.handle);
        return { result: { stats: wasm.stats(req.args.handle) }, transfer: [] };
      case 'stats':
        return { result: wasm.stats(req.args.handle), transfer: [] };
      case 'toBytes': {
        const b = wasm.toBytes(req.args.handle);
        return { result: b, transfer: [b.buffer as ArrayBuffer] };
      }
      case 'fromBytes': {
        const h = wasm.fromBytes(req.args.bytes);
        return { result: { handle: h, stats: wasm.stats(h) }, transfer: [] };
      }
      case 'sparseNew':
        return { result: wasm.sparseNew(req.args.fullScanThreshold, req.args.datatype), transfer: [] };
      case 'sparseFree':
        wasm.sparseFree(req.args.handle);
        return { result: null, transfer: [] };
      case 'sparseUpsert':
        wasm.sparseUpsert(req.args.handle, req.args.batch);
        return { result: null, transfer: [] };
      case 'sparseDelete':
        return { result: wasm.sparseDelete(req.args.handle, req.args.labels), transfer: [] };
      case 'sparseSearch': {
        const { handle: h, indices, values, options } = req.args;
        const started = performance.now();
        const r = wasm.sparseSearch(h, indices, values, options, wasm.sparseStats(h).count);
        const out: SearchOut = { ...r, computeUs: (performance.now() - started) * 1000 };
        return { result: out, transfer: [out.labels.buffer as ArrayBuffer, out.scores.buffer as ArrayBuffer] };
      }
      case 'sparseGet': {
        const b = wasm.sparseGet(req.args.handle, req.args.labels);
        return { result: b, transfer: [b.labels.buffer, b.offsets.buffer, b.indices.buffer, b.values.buffer] as ArrayBuffer[] };
      }
      case 'sparseLabels': {
        const l = wasm.sparseLabels(req.args.handle);
        return { result: l, transfer: [l.buffer as ArrayBuffer] };
      }
      case 'sparseStats':
        return { result: wasm.sparseStats(req.args.handle), transfer: [] };
      default:
        throw new Error(`unknown wasm worker op ${(req as { op: string }).op}`);
    }
  };

  const reply = (req: WorkerRequest, out: Out | null, err: unknown): void => {
    if (out) {
      port.postMessage({ id: req.id, ok: true, result: out.result } satisfies WorkerResponse, out.transfer);
      return;
    }
    const e = err as { code?: unknown; message?: unknown };
    const response: WorkerResponse = {
      id: req.id,
      ok: false,
      error: { code: typeof e.code === 'string' ? e.code : undefined, message: String(e.message ?? err) },
    };
    port.postMessage(response);
  };

  port.on('message', (req: WorkerRequest) => {
    let out: Out | Promise<Out>;
    try {
      out = handle(req);
    } catch (err) {
      reply(req, null, err);
      return;
    }
    if (out instanceof Promise) {
      out.then(
        (o) => reply(req, o, null),
        (err) => reply(req, null, err),
      );
    } else {
      reply(req, out, null);
    }
  });
}

main();
