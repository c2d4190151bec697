/**
 * The storage requests of the WASM worker: index and sparse files, and WAL handles.
 *
 * Owns: the request shapes of the durable operations and running them in the worker
 * (bindings/wasm-worker.ts routes every `file*` and `wal*` op here), with a table of
 * open logs by id. Must never: run on the main thread (fsyncs and reads block).
 */

import type { IndexStats } from './engine';
import { EngineError } from './errors';
import type { WasmFileModule } from './wasm-files-abi';
import * as path from 'node:path';

import { atomicWrite, indexGraphFile, indexSideFile, readFile, readPrefix, WorkerWal, type WalRead, type WalReport, type WalState } from './wasm-storage';

export type StorageRequest =
  | { id: number; op: 'fileSaveIndex'; args: { handle: number; path: string } }
  | { id: number; op: 'fileLoadIndex'; args: { path: string; fd?: number } }
  | { id: number; op: 'fileSaveSparse'; args: { handle: number; path: string } }
  | { id: number; op: 'fileLoadSparse'; args: { path: string } }
  | { id: number; op: 'walOpen'; args: { dir: string; segmentBytes?: number; retentionBytes?: number } }
  | { id: number; op: 'walAppend'; args: { wal: number; data: Uint8Array; lens: Uint32Array; sync: boolean } }
  | { id: number; op: 'walSync'; args: { wal: number } }
  | { id: number; op: 'walRead'; args: { wal: number; seq: bigint; maxRecords: number } }
  | { id: number; op: 'walTruncate'; args: { wal: number; seq: bigint; keepBytes: number } }
  | { id: number; op: 'walClose'; args: { wal: number } };

export type StorageOp = StorageRequest['op'];

export function isStorageOp(op: string): op is StorageOp {
  return op.startsWith('file') || op.startsWith('wal');
}

type Out = { result: unknown; transfer: ArrayBuffer[] };

const wals = new Map<number, WorkerWal>();
let nextWal = 1;

function wal(id: number): WorkerWal {
  const w = wals.get(id);
  if (!w) throw new EngineError('QUIVER_CLOSED', `wal handle ${id} is closed or unknown`);
  return w;
}

export interface WalOpened {
  wal: number;
  report: WalReport;
}

export interface WalAppended extends WalState {
  first: bigint;
}

export function storageOp(wasm: WasmFileModule, req: StorageRequest, stats: (handle: number) => IndexStats): Out | Promise<Out> {
  switch (req.op) {
    case 'fileSaveIndex':
      atomicWrite(req.args.path, wasm.toBytes(req.args.handle));
      return { result: null, transfer: [] };
    case 'fileLoadIndex': {
      const bytes = readFile(req.args.path, req.args.fd);
      // An index whose originals a native node kept in a mapped side file: wasm32 has
      // no mmap, so the file's bytes are read and the originals held in memory.
      const side = indexSideFile(bytes);
      // Likewise an index whose level-0 links a native node kept in a mapped graph file.
      const graph = indexGraphFile(bytes);
      const beside = (name: string, n: number) => readPrefix(path.join(path.dirname(req.args.path), name), n);
      const h =
        graph !== null
          ? wasm.indexFromFileWithGraph(bytes, req.args.path, side === null ? null : beside(side.name, side.bytes), beside(graph.name, graph.bytes))
          : side === null
            ? wasm.indexFromFile(bytes, req.args.path)
            : wasm.indexFromFileWithSide(bytes, req.args.path, beside(side.name, side.bytes));
      return { result: { handle: h, stats: stats(h) }, transfer: [] };
    }
    case 'fileSaveSparse':
      atomicWrite(req.args.path, wasm.sparseToBytes(req.args.handle));
      return { result: null, transfer: [] };
    case 'fileLoadSparse':
      return { result: wasm.sparseFromFile(readFile(req.args.path), req.args.path), transfer: [] };
    case 'walOpen': {
      const w = WorkerWal.open(wasm, req.args.dir, req.args.segmentBytes, req.args.retentionBytes);
      const id = nextWal++;
      wals.set(id, w);
      const opened: WalOpened = { wal: id, report: w.report };
      return { result: opened, transfer: [] };
    }
    case 'walAppend': {
      const w = wal(req.args.wal);
      const first = w.append(req.args.data, req.args.lens);
      const done = (): Out => {
        const r: WalAppended = { first, ...w.state() };
        return { result: r, transfer: [] };
      };
      return req.args.sync ? w.sync().then(done) : done();
    }
    case 'walSync':
      return wal(req.args.wal)
        .sync()
        .then(() => ({ result: null, transfer: [] }));
    case 'walRead': {
      const r: WalRead = wal(req.args.wal).readFrom(req.args.seq, req.args.maxRecords);
      return { result: r, transfer: r.buffers };
    }
    case 'walTruncate': {
      const w = wal(req.args.wal);
      w.truncateRetaining(req.args.seq, req.args.keepBytes);
      return { result: w.state(), transfer: [] };
    }
    case 'walClose': {
      const w = wal(req.args.wal);
      return w.close().then(() => {
        wals.delete(req.args.wal);
        return { result: null, transfer: [] };
      });
    }
  }
}
