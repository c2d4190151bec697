/**
 * The multivector requests of the WASM worker (bindings/wasm-worker.ts routes every
 * `multi*` op here): quiver_core::multi compiled to WASM, its files written and read
 * with node:fs as the other index files are (bindings/wasm-storage.ts).
 *
 * Owns: the request shapes and running them in the worker. Must never: run on the
 * main thread.
 */

import type { IndexStats, SearchResult } from './engine';
import type { WasmFileModule } from './wasm-files-abi';
import { atomicWrite, readFile } from './wasm-storage';
import type { CheckedIndexOptions } from './validate';

export type MultiRequest =
  | { id: number; op: 'multiCreate'; args: { options: CheckedIndexOptions } }
  | { id: number; op: 'multiFree'; args: { handle: number } }
  | { id: number; op: 'multiAdd'; args: { handle: number; labels: BigUint64Array; vectors: Float32Array; counts: Uint32Array } }
  | { id: number; op: 'multiDelete'; args: { handle: number; labels: BigUint64Array } }
  | { id: number; op: 'multiSearch'; args: { handle: number; query: Float32Array; k: number; ef?: number; exact?: boolean; allow?: BigUint64Array } }
  | { id: number; op: 'multiGetVector'; args: { handle: number; label: bigint } }
  | { id: number; op: 'multiExportLive'; args: { handle: number } }
  | { id: number; op: 'multiExportLiveFrom'; args: { handle: number; from: number; maxCount: number } }
  | { id: number; op: 'multiCompact'; args: { handle: number } }
  | { id: number; op: 'multiSave'; args: { handle: number; path: string } }
  | { id: number; op: 'multiLoad'; args: { path: string; fd?: number } };

export function isMultiOp(op: string): boolean {
  return op.startsWith('multi');
}

type Out = { result: unknown; transfer: ArrayBuffer[] };

export interface MultiCreated {
  handle: number;
  stats: IndexStats;
}

export function multiOp(wasm: WasmFileModule, req: MultiRequest): Out {
  switch (req.op) {
    case 'multiCreate': {
      const h = wasm.multiNew(req.args.options);
      return { result: { handle: h, stats: wasm.multiStats(h) }, transfer: [] };
    }
    case 'multiFree':
      wasm.multiFree(req.args.handle);
      return { result: null, transfer: [] };
    case 'multiAdd': {
      const { handle, labels, vectors, counts } = req.args;
      wasm.multiAdd(handle, labels, vectors, counts);
      return { result: { stats: wasm.multiStats(handle) }, transfer: [] };
    }
    case 'multiDelete': {
      const count = wasm.multiDelete(req.args.handle, req.args.labels);
      return { result: { count, stats: wasm.multiStats(req.args.handle) }, transfer: [] };
    }
    case 'multiSearch': {
      const { handle, query, ...o } = req.args;
      const started = performance.now();
      const r = wasm.multiSearch(handle, query, o);
      const out: SearchResult = { ...r, computeUs: (performance.now() - started) * 1000 };
      return { result: out, transfer: [out.labels.buffer as ArrayBuffer, out.scores.buffer as ArrayBuffer] };
    }
    case 'multiGetVector': {
      const v = wasm.multiGetVector(req.args.handle, req.args.label);
      return { result: v, transfer: v ? [v.buffer as ArrayBuffer] : [] };
    }
    case 'multiExportLive': {
      const l = wasm.multiExportLive(req.args.handle);
      return { result: l, transfer: [l.labels.buffer, l.vectors.buffer, l.counts.buffer] as ArrayBuffer[] };
    }
    case 'multiExportLiveFrom': {
      const l = wasm.multiExportLiveFrom(req.args.handle, req.args.from, req.args.maxCount);
      return { result: l, transfer: [l.labels.buffer, l.vectors.buffer, l.counts.buffer] as ArrayBuffer[] };
    }
    case 'multiCompact':
      wasm.multiCompact(req.args.handle);
      return { result: { stats: wasm.multiStats(req.args.handle) }, transfer: [] };
    case 'multiSave':
      atomicWrite(req.args.path, wasm.multiToBytes(req.args.handle));
      return { result: null, transfer: [] };
    case 'multiLoad': {
      const h = wasm.multiFromFile(readFile(req.args.path, req.args.fd), req.args.path);
      return { result: { handle: h, stats: wasm.multiStats(h) }, transfer: [] };
    }
  }
}
