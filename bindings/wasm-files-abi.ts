/**
 * The file-format exports of quiver-wasm (crates/quiver-wasm/src/files.rs) on top of
 * the engine's typed ABI view.
 *
 * Owns: calling the exports that encode WAL records, scan and decode segment images
 * and parse index files from bytes, and copying their outputs out of linear memory.
 * Must never: touch a file (bindings/wasm-storage.ts does, in the worker) or encode
 * or check a byte itself: the format is quiver-core's, the same code the native
 * backend runs.
 */

import type { Datatype, Distance, IndexStats } from './engine';
import { WasmModule } from './wasm-abi';
import type { CheckedIndexOptions } from './validate';

interface FileExports {
  quiver_multi_new(dim: number, distance: number, m: number, efConstruct: number, hasSeed: number, seed: bigint, flags: number): number;
  quiver_multi_free(handle: number): void;
  quiver_multi_add(handle: number, labels: number, n: number, vectors: number, vectorsLen: number, counts: number, countsLen: number): number;
  quiver_multi_delete(handle: number, labels: number, n: number): number;
  quiver_multi_search(
    handle: number,
    query: number,
    queryLen: number,
    k: number,
    ef: number,
    exact: number,
    hasAllow: number,
    allow: number,
    allowLen: number,
    outLen: number,
  ): number;
  quiver_multi_get_vector(handle: number, label: bigint, outLen: number): number;
  quiver_multi_export_live(handle: number, outLen: number): number;
  quiver_multi_export_live_from(handle: number, from: number, maxCount: number, outLen: number): number;
  quiver_multi_compact(handle: number): number;
  quiver_multi_stats(handle: number, out: number): number;
  quiver_multi_to_bytes(handle: number, outLen: number): number;
  quiver_multi_from_file_bytes(bytes: number, len: number, name: number, nameLen: number): number;
  quiver_wal_encode(firstSeq: bigint, data: number, dataLen: number, lens: number, n: number, outLen: number): number;
  quiver_wal_scan(bytes: number, len: number, firstSeq: bigint, outLen: number): number;
  quiver_wal_find_valid(bytes: number, len: number, expected: bigint, out: number): number;
  quiver_wal_decode(
    bytes: number,
    len: number,
    startSeq: bigint,
    wantFrom: bigint,
    maxRecords: number,
    base: bigint,
    name: number,
    nameLen: number,
    outLen: number,
  ): number;
  quiver_index_from_file_bytes(bytes: number, len: number, name: number, nameLen: number): number;
  quiver_index_from_file_bytes_side(bytes: number, len: number, name: number, nameLen: number, side: number, sideLen: number): number;
  quiver_index_from_file_bytes_graph(bytes: number, len: number, name: number, nameLen: number, side: number, sideLen: number, hasSide: number, graph: number, graphLen: number): number;
  quiver_sparse_from_file_bytes(bytes: number, len: number, name: number, nameLen: number): number;
  quiver_sparse_to_bytes(handle: number, outLen: number): number;
  quiver_last_error(out: number): number;
  quiver_free(ptr: number, size: number): void;
}

export interface SegmentScan {
  /** `firstSeq - 1n` when no record is valid. */
  lastSeq: bigint;
  validBytes: number;
  /** The first bad record: its offset and why it is bad. */
  bad: { offset: number; reason: string } | null;
  /** Sparse (seq, offset) pairs for seeking, ascending. */
  index: Array<[bigint, number]>;
}

const DISTANCES: readonly Distance[] = ['Cosine', 'Dot', 'Euclid', 'Manhattan'];
const DATATYPES: readonly Datatype[] = ['float32', 'float16', 'uint8'];
/** `quiver_multi_new` flags of the element type, as `quiver_index_new`'s. */
const MULTI_DATATYPE_FLAGS = { float32: 0, float16: 2, uint8: 4 } as const;
const DEFAULT_U32 = 0xffff_ffff;

/** Largest usize the wasm32 ABI takes (record counts are capped to it). */
const MAX_U32 = 0xffff_ffff;

export class WasmFileModule extends WasmModule {
  private get f(): FileExports {
    return this.x as unknown as FileExports;
  }

  /** Calls an export that returns a new buffer (0 on failure) and its length; copies it out. */
  private buffer(call: (outLen: number) => number): Uint8Array {
    const lenp = this.alloc(4);
    try {
      const p = call(lenp);
      if (p === 0) this.check(-1);
      const len = new Uint32Array(this.x.memory.buffer, lenp, 1)[0];
      const out = new Uint8Array(this.x.memory.buffer.slice(p, p + len));
      this.f.quiver_free(p, len);
      return out;
    } finally {
      this.f.quiver_free(lenp, 4);
    }
  }

  private words(call: (outLen: number) => number): BigUint64Array {
    const b = this.buffer(call);
    return new BigUint64Array(b.buffer, b.byteOffset, b.byteLength / 8);
  }

  private lastMessage(): string {
    const out = this.alloc(8);
    try {
      this.f.quiver_last_error(out);
      const v = new Uint32Array(this.x.memory.buffer, out, 2);
      return this.text(v[0], v[1]);
    } finally {
      this.f.quiver_free(out, 8);
    }
  }

  /** The bytes that append records (record i: the next `lens[i]` bytes of `data`) numbered from `firstSeq`. */
  walEncode(firstSeq: bigint, data: Uint8Array, lens: Uint32Array): Uint8Array {
    return this.run(() => {
      const [dp, ds] = this.put(data);
      const [lp, ls] = this.put(lens);
      try {
        return this.buffer((outLen) => this.f.quiver_wal_encode(firstSeq, dp, data.length, lp, lens.length, outLen));
      } finally {
        this.f.quiver_free(dp, ds);
        this.f.quiver_free(lp, ls);
      }
    });
  }

  walScan(bytes: Uint8Array, firstSeq: bigint): SegmentScan {
    return this.run(() => {
      const [bp, bs] = this.put(bytes);
      try {
        const w = this.words((outLen) => this.f.quiver_wal_scan(bp, bytes.length, firstSeq, outLen));
        const badAt = w[2];
        const bad = badAt === 0xffff_ffff_ffff_ffffn ? null : { offset: Number(badAt), reason: this.lastMessage() };
        const index: Array<[bigint, number]> = [];
        for (let i = 0; i < Number(w[3]); i++) index.push([w[4 + 2 * i], Number(w[5 + 2 * i])]);
        return { lastSeq: w[0], validBytes: Number(w[1]), bad, index };
      } finally {
        this.f.quiver_free(bp, bs);
      }
    });
  }

  /** A valid record after the start of a damaged tail: [offset in `rest`, seq], or null. */
  walFindValid(rest: Uint8Array, expected: bigint): [number, bigint] | null {
    return this.run(() => {
      const [bp, bs] = this.put(rest);
      const out = this.alloc(16);
      try {
        if (this.f.quiver_wal_find_valid(bp, rest.length, expected, out) === 0) return null;
        const v = new BigUint64Array(this.x.memory.buffer, out, 2);
        return [Number(v[0]), v[1]];
      } finally {
        this.f.quiver_free(bp, bs);
        this.f.quiver_free(out, 16);
      }
    });
  }

  /** Records of a run of segment `name` read from byte `base`: [seq, offset in `bytes`, length] each. */
  walDecode(bytes: Uint8Array, startSeq: bigint, wantFrom: bigint, maxRecords: number, base: number, name: string): Array<[bigint, number, number]> {
    return this.run(() => {
      const [bp, bs] = this.put(bytes);
      const nameBytes = Buffer.from(name, 'utf8');
      const [np, ns] = this.put(nameBytes);
      try {
        const w = this.words((outLen) =>
          this.f.quiver_wal_decode(bp, bytes.length, startSeq, wantFrom, Math.min(maxRecords, MAX_U32), BigInt(base), np, nameBytes.length, outLen),
        );
        const out: Array<[bigint, number, number]> = [];
        for (let i = 0; i < Number(w[0]); i++) out.push([w[1 + 3 * i], Number(w[2 + 3 * i]), Number(w[3 + 3 * i])]);
        return out;
      } finally {
        this.f.quiver_free(bp, bs);
        this.f.quiver_free(np, ns);
      }
    });
  }

  private fromFile(bytes: Uint8Array, name: string, call: (bp: number, len: number, np: number, nl: number) => number): number {
    return this.run(() => {
      const [bp, bs] = this.put(bytes);
      const nameBytes = Buffer.from(name, 'utf8');
      const [np, ns] = this.put(nameBytes);
      try {
        return this.check(call(bp, bytes.length, np, nameBytes.length));
      } finally {
        this.f.quiver_free(bp, bs);
        this.f.quiver_free(np, ns);
      }
    });
  }

  /** A dense index from the bytes of its file; errors name `name`. */
  indexFromFile(bytes: Uint8Array, name: string): number {
    return this.fromFile(bytes, name, (b, l, n, nl) => this.f.quiver_index_from_file_bytes(b, l, n, nl));
  }

  /**
   * A dense index from the bytes of its file and those of the side file holding its
   * originals (see `indexSideFile`), which it keeps in memory; errors name `name`.
   */
  indexFromFileWithSide(bytes: Uint8Array, name: string, side: Uint8Array): number {
    return this.run(() => {
      // (Linear memory for at least one byte: an empty index's side file is empty.)
      const [sp, ss] = this.put(side.length > 0 ? side : new Uint8Array(1));
      try {
        return this.fromFile(bytes, name, (b, l, n, nl) => this.f.quiver_index_from_file_bytes_side(b, l, n, nl, sp, side.length));
      } finally {
        this.f.quiver_free(sp, ss);
      }
    });
  }

  /**
   * A dense index from the bytes of its file and those of the graph file holding its
   * level-0 links (see `indexGraphFile`), and of the originals' side file when it names
   * one; all kept in memory. Errors name `name`.
   */
  indexFromFileWithGraph(bytes: Uint8Array, name: string, side: Uint8Array | null, graph: Uint8Array): number {
    return this.run(() => {
      const [sp, ss] = this.put(side !== null && side.length > 0 ? side : new Uint8Array(1));
      try {
        const [gp, gs] = this.put(graph.length > 0 ? graph : new Uint8Array(1));
        try {
          return this.fromFile(bytes, name, (b, l, n, nl) => this.f.quiver_index_from_file_bytes_graph(b, l, n, nl, sp, side?.length ?? 0, side !== null ? 1 : 0, gp, graph.length));
        } finally {
          this.f.quiver_free(gp, gs);
        }
      } finally {
        this.f.quiver_free(sp, ss);
      }
    });
  }

  /** A sparse index from the bytes of its file; errors name `name`. */
  sparseFromFile(bytes: Uint8Array, name: string): number {
    return this.fromFile(bytes, name, (b, l, n, nl) => this.f.quiver_sparse_from_file_bytes(b, l, n, nl));
  }

  // ---- Multivector indexes (crates/quiver-wasm/src/multi.rs) ----

  multiNew(o: CheckedIndexOptions): number {
    return this.run(() =>
      this.check(
        this.f.quiver_multi_new(
          o.dim,
          DISTANCES.indexOf(o.distance),
          o.m ?? DEFAULT_U32,
          o.efConstruct ?? DEFAULT_U32,
          o.seed === undefined ? 0 : 1,
          BigInt(o.seed ?? 0),
          (o.flat ? 1 : 0) | MULTI_DATATYPE_FLAGS[o.datatype],
        ),
      ),
    );
  }

  multiFree(handle: number): void {
    this.run(() => this.f.quiver_multi_free(handle));
  }

  multiAdd(handle: number, labels: BigUint64Array, vectors: Float32Array, counts: Uint32Array): void {
    this.run(() => {
      const bufs = [this.put(labels), this.put(vectors), this.put(counts)];
      try {
        this.check(this.f.quiver_multi_add(handle, bufs[0][0], labels.length, bufs[1][0], vectors.length, bufs[2][0], counts.length));
      } finally {
        for (const [p, n] of bufs) this.f.quiver_free(p, n);
      }
    });
  }

  multiDelete(handle: number, labels: BigUint64Array): number {
    return this.run(() => {
      const [lp, ls] = this.put(labels);
      try {
        return this.check(this.f.quiver_multi_delete(handle, lp, labels.length));
      } finally {
        this.f.quiver_free(lp, ls);
      }
    });
  }

  multiSearch(handle: number, query: Float32Array, o: { k: number; ef?: number; exact?: boolean; allow?: BigUint64Array }): { labels: BigUint64Array; scores: Float32Array } {
    return this.run(() => {
      const [qp, qs] = this.put(query);
      const [ap, as] = o.allow ? this.put(o.allow) : [0, 0];
      try {
        const b = this.buffer((outLen) =>
          this.f.quiver_multi_search(handle, qp, query.length, o.k, o.ef ?? 0, o.exact ? 1 : 0, o.allow ? 1 : 0, ap, o.allow ? o.allow.length : 0, outLen),
        );
        const n = b.length / 12;
        return { labels: new BigUint64Array(b.buffer.slice(0, n * 8)), scores: new Float32Array(b.buffer.slice(n * 8, n * 12)) };
      } finally {
        this.f.quiver_free(qp, qs);
        if (o.allow) this.f.quiver_free(ap, as);
      }
    });
  }

  multiGetVector(handle: number, label: bigint): Float32Array | null {
    return this.run(() => {
      const b = this.buffer((outLen) => this.f.quiver_multi_get_vector(handle, label, outLen));
      if (new Uint32Array(b.buffer, 0, 1)[0] === 0) return null;
      return new Float32Array(b.buffer.slice(4));
    });
  }

  multiExportLive(handle: number): { labels: BigUint64Array; vectors: Float32Array; counts: Uint32Array } {
    return this.run(() => {
      const b = this.buffer((outLen) => this.f.quiver_multi_export_live(handle, outLen));
      const n = Number(new BigUint64Array(b.buffer, 0, 1)[0]);
      return {
        labels: new BigUint64Array(b.buffer.slice(8, 8 + n * 8)),
        counts: new Uint32Array(b.buffer.slice(8 + n * 8, 8 + n * 12)),
        vectors: new Float32Array(b.buffer.slice(8 + n * 12)),
      };
    });
  }

  /** One page of multiExportLive: the same layout after the next slot (u64). */
  multiExportLiveFrom(handle: number, from: number, maxCount: number): { labels: BigUint64Array; vectors: Float32Array; counts: Uint32Array; next: number } {
    return this.run(() => {
      const b = this.buffer((outLen) => this.f.quiver_multi_export_live_from(handle, from, maxCount, outLen));
      const [next, count] = new BigUint64Array(b.buffer, 0, 2);
      const n = Number(count);
      return {
        labels: new BigUint64Array(b.buffer.slice(16, 16 + n * 8)),
        counts: new Uint32Array(b.buffer.slice(16 + n * 8, 16 + n * 12)),
        vectors: new Float32Array(b.buffer.slice(16 + n * 12)),
        next: Number(next),
      };
    });
  }

  multiCompact(handle: number): void {
    this.run(() => this.check(this.f.quiver_multi_compact(handle)));
  }

  multiStats(handle: number): IndexStats {
    return this.run(() => {
      const op = this.alloc(11 * 8);
      try {
        this.check(this.f.quiver_multi_stats(handle, op));
        const v = new Float64Array(this.x.memory.buffer, op, 11);
        return {
          dim: v[0],
          distance: DISTANCES[v[1]],
          count: v[2],
          slots: v[3],
          deleted: v[4],
          vectorBytes: v[6],
          originalBytes: 0,
          graphBytes: v[7],
          totalBytes: v[8],
          quantization: 'none',
          flat: v[9] === 1,
          datatype: DATATYPES[v[10]],
          multivector: { vectors: v[5] },
        };
      } finally {
        this.f.quiver_free(op, 11 * 8);
      }
    });
  }

  multiToBytes(handle: number): Uint8Array {
    return this.run(() => this.buffer((outLen) => this.f.quiver_multi_to_bytes(handle, outLen)));
  }

  multiFromFile(bytes: Uint8Array, name: string): number {
    return this.fromFile(bytes, name, (b, l, n, nl) => this.f.quiver_multi_from_file_bytes(b, l, n, nl));
  }

  /** The bytes of a sparse index's file. */
  sparseToBytes(handle: number): Uint8Array {
    return this.run(() => this.buffer((outLen) => this.f.quiver_sparse_to_bytes(handle, outLen)));
  }
}
