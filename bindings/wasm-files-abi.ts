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

import { WasmModule } from './wasm-abi';

interface FileExports {
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

  /** A sparse index from the bytes of its file; errors name `name`. */
  sparseFromFile(bytes: Uint8Array, name: string): number {
    return this.fromFile(bytes, name, (b, l, n, nl) => this.f.quiver_sparse_from_file_bytes(b, l, n, nl));
  }

  /** The bytes of a sparse index's file. */
  sparseToBytes(handle: number): Uint8Array {
    return this.run(() => this.buffer((outLen) => this.f.quiver_sparse_to_bytes(handle, outLen)));
  }
}
