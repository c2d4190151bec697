/**
 * A typed view of the quiver-wasm C ABI (crates/quiver-wasm/src/lib.rs).
 *
 * Owns: copying arguments into the module's linear memory, calling one export,
 * copying results out, and turning a negative return into an EngineError built from
 * `quiver_last_error`. Must never: keep views of linear memory across calls (any
 * allocation may grow memory and detach them) or be used on the main thread for
 * anything but cheap calls (the worker does the heavy ones).
 */

import type { Datatype, Distance, EngineErrorCode, IndexStats, SparseBatch, SparseIndexStats } from './engine';
import { ENGINE_ERROR_CODES } from './engine';
import { EngineError } from './errors';
import type { CheckedIndexOptions } from './validate';

interface Exports {
  memory: WebAssembly.Memory;
  quiver_alloc(size: number): number;
  quiver_free(ptr: number, size: number): void;
  quiver_last_error(out: number): number;
  quiver_panic_message(out: number): void;
  quiver_kernel_name(out: number): void;
  quiver_index_new(
    dim: number,
    distance: number,
    m: number,
    efConstruct: number,
    fullScanThresholdKb: number,
    quant: number,
    quantile: number,
    hasSeed: number,
    seed: bigint,
    flags: number,
  ): number;
  quiver_index_free(handle: number): void;
  quiver_index_add(handle: number, labels: number, n: number, vectors: number, vectorsLen: number): number;
  quiver_index_delete(handle: number, labels: number, n: number): number;
  quiver_index_search(
    handle: number,
    query: number,
    queryLen: number,
    k: number,
    ef: number,
    oversampling: number,
    flags: number,
    hasAllow: number,
    allow: number,
    allowLen: number,
    outLabels: number,
    outScores: number,
    outCap: number,
  ): number;
  quiver_index_search_rule(
    handle: number,
    rule: number,
    positives: number,
    examples: number,
    examplesLen: number,
    k: number,
    ef: number,
    oversampling: number,
    flags: number,
    hasAllow: number,
    allow: number,
    allowLen: number,
    outLabels: number,
    outScores: number,
    outCap: number,
  ): number;
  quiver_index_get_vector(handle: number, label: bigint, out: number, cap: number): number;
  quiver_index_stats(handle: number, out: number): number;
  quiver_index_export_live(handle: number, outLabels: number, outVectors: number, cap: number): number;
  quiver_index_export_live_from(handle: number, from: number, maxCount: number, outLabels: number, outVectors: number, cap: number, outNext: number): number;
  quiver_index_compact(handle: number): number;
  quiver_index_to_bytes(handle: number, outLen: number): number;
  quiver_index_from_bytes(bytes: number, len: number): number;
  quiver_sparse_new(fullScanThreshold: number, datatype: number): number;
  quiver_sparse_free(handle: number): void;
  quiver_sparse_upsert(handle: number, labels: number, n: number, offsets: number, indices: number, values: number, entries: number): number;
  quiver_sparse_delete(handle: number, labels: number, n: number): number;
  quiver_sparse_search(
    handle: number,
    indices: number,
    values: number,
    len: number,
    k: number,
    flags: number,
    hasAllow: number,
    allow: number,
    allowLen: number,
    outLabels: number,
    outScores: number,
    outCap: number,
  ): number;
  quiver_sparse_lens(handle: number, labels: number, n: number, outLens: number): number;
  quiver_sparse_get(handle: number, labels: number, n: number, outIndices: number, outValues: number, cap: number): number;
  quiver_sparse_labels(handle: number, out: number, cap: number): number;
  quiver_sparse_stats(handle: number, out: number): number;
  quiver_sparse_to_bytes(handle: number, outLen: number): number;
  quiver_sparse_from_bytes(bytes: number, len: number): number;
}

const DISTANCE_CODES: readonly Distance[] = ['Cosine', 'Dot', 'Euclid', 'Manhattan'];
const QUANT_CODES = ['none', 'scalar', 'binary'] as const;
/** `quiver_last_error` numbers codes from 1 in ENGINE_ERROR_CODES order. */
const CODE_BY_NUMBER: readonly EngineErrorCode[] = ENGINE_ERROR_CODES;
/** The ABI's "use the engine default" value for optional u32 parameters. */
const DEFAULT_U32 = 0xffff_ffff;
/** `quiver_index_new` flags. */
const FLAG_FLAT = 1;
/** `quiver_index_new` flags of the stored element type (float32: neither). */
const FLAG_DATATYPE = { float32: 0, float16: 2, uint8: 4 } as const;
const DATATYPE_CODES = ['float32', 'float16', 'uint8'] as const;
/** f64 values `quiver_index_stats` writes. */
const STATS_VALUES = 12;

export interface WasmSearchArgs {
  k: number;
  ef?: number;
  exact?: boolean;
  allow?: BigUint64Array;
  oversampling?: number;
  rescore?: boolean;
  ignoreQuantization?: boolean;
}

export class WasmModule {
  protected readonly x: Exports;
  /** Set once the module has trapped; every later call fails. */
  private dead: string | null = null;

  constructor(module: WebAssembly.Module) {
    const instance = new WebAssembly.Instance(module, {});
    this.x = instance.exports as unknown as Exports;
  }

  private bytes(): Uint8Array {
    return new Uint8Array(this.x.memory.buffer);
  }

  protected alloc(size: number): number {
    const ptr = this.x.quiver_alloc(size);
    if (ptr === 0) throw new EngineError('QUIVER_INVALID_ARGUMENT', `wasm engine out of memory allocating ${size} bytes`);
    return ptr;
  }

  /** Copies a typed array into fresh linear memory; returns [ptr, bytes]. */
  protected put(data: ArrayBufferView): [number, number] {
    const size = data.byteLength;
    const ptr = this.alloc(size);
    this.bytes().set(new Uint8Array(data.buffer, data.byteOffset, size), ptr);
    return [ptr, size];
  }

  private pair(f: (out: number) => void): [number, number] {
    const out = this.alloc(8);
    try {
      f(out);
      const v = new Uint32Array(this.x.memory.buffer, out, 2);
      return [v[0], v[1]];
    } finally {
      this.x.quiver_free(out, 8);
    }
  }

  protected text(ptr: number, len: number): string {
    return Buffer.from(this.x.memory.buffer, ptr, len).toString('utf8');
  }

  /** Runs one export; a trap (engine panic) kills the module for good. */
  protected run<T>(f: () => T): T {
    if (this.dead !== null) throw new EngineError('QUIVER_CLOSED', `wasm engine is unusable after an abort: ${this.dead}`);
    try {
      return f();
    } catch (err) {
      if (err instanceof WebAssembly.RuntimeError) {
        let why = err.message;
        try {
          const [p, l] = this.pair((out) => this.x.quiver_panic_message(out));
          if (l > 0) why = this.text(p, l);
        } catch {
          // The module may be too broken even for that.
        }
        this.dead = why;
        throw new Error(`internal engine error (wasm abort): ${why}`);
      }
      throw err;
    }
  }

  protected check(ret: number): number {
    if (ret >= 0) return ret;
    let code: EngineErrorCode = 'QUIVER_INVALID_ARGUMENT';
    let message = 'unknown wasm engine error';
    const out = this.alloc(8);
    try {
      const n = this.x.quiver_last_error(out);
      const v = new Uint32Array(this.x.memory.buffer, out, 2);
      if (n >= 1 && n <= CODE_BY_NUMBER.length) code = CODE_BY_NUMBER[n - 1];
      if (n !== 0) message = this.text(v[0], v[1]);
    } finally {
      this.x.quiver_free(out, 8);
    }
    throw new EngineError(code, message);
  }

  kernelName(): string {
    return this.run(() => {
      const [p, l] = this.pair((out) => this.x.quiver_kernel_name(out));
      return this.text(p, l);
    });
  }

  create(o: CheckedIndexOptions): number {
    return this.run(() =>
      this.check(
        this.x.quiver_index_new(
          o.dim,
          DISTANCE_CODES.indexOf(o.distance),
          o.m ?? DEFAULT_U32,
          o.efConstruct ?? DEFAULT_U32,
          o.fullScanThresholdKb ?? DEFAULT_U32,
          QUANT_CODES.indexOf(o.quantization),
          o.quantile ?? 0,
          o.seed === undefined ? 0 : 1,
          BigInt(o.seed ?? 0),
          (o.flat ? FLAG_FLAT : 0) | FLAG_DATATYPE[o.datatype],
        ),
      ),
    );
  }

  free(handle: number): void {
    this.run(() => this.x.quiver_index_free(handle));
  }

  add(handle: number, labels: BigUint64Array, vectors: Float32Array): void {
    this.run(() => {
      const [lp, ls] = this.put(labels);
      const [vp, vs] = this.put(vectors);
      try {
        this.check(this.x.quiver_index_add(handle, lp, labels.length, vp, vectors.length));
      } finally {
        this.x.quiver_free(lp, ls);
        this.x.quiver_free(vp, vs);
      }
    });
  }

  delete(handle: number, labels: BigUint64Array): number {
    return this.run(() => {
      const [lp, ls] = this.put(labels);
      try {
        return this.check(this.x.quiver_index_delete(handle, lp, labels.length));
      } finally {
        this.x.quiver_free(lp, ls);
      }
    });
  }

  /** `live` bounds the output buffers (results never exceed the live count). */
  search(handle: number, query: Float32Array, args: WasmSearchArgs, live: number): { labels: BigUint64Array; scores: Float32Array } {
    return this.run(() => {
      const cap = Math.max(1, Math.min(args.k, live));
      const [qp, qs] = this.put(query);
      const [ap, as] = args.allow ? this.put(args.allow) : [0, 0];
      const lp = this.alloc(cap * 8);
      const sp = this.alloc(cap * 4);
      try {
        const flags =
          (args.exact ? 1 : 0) |
          (args.rescore === false ? 0 : 2) |
          (args.ignoreQuantization ? 4 : 0) |
          (args.oversampling !== undefined ? 8 : 0);
        const n = this.check(
          this.x.quiver_index_search(
            handle,
            qp,
            query.length,
            args.k,
            args.ef ?? 0,
            args.oversampling ?? 0,
            flags,
            args.allow ? 1 : 0,
            ap,
            args.allow ? args.allow.length : 0,
            lp,
            sp,
            cap,
          ),
        );
        return {
          labels: new BigUint64Array(this.x.memory.buffer.slice(lp, lp + n * 8)),
          scores: new Float32Array(this.x.memory.buffer.slice(sp, sp + n * 4)),
        };
      } finally {
        this.x.quiver_free(qp, qs);
        if (args.allow) this.x.quiver_free(ap, as);
        this.x.quiver_free(lp, cap * 8);
        this.x.quiver_free(sp, cap * 4);
      }
    });
  }

  /** A search by rule (`rule` is the index of the rule in SCORE_RULES); `live` as in `search`. */
  searchRule(handle: number, rule: number, positives: number, examples: Float32Array, args: WasmSearchArgs, live: number): { labels: BigUint64Array; scores: Float32Array } {
    return this.run(() => {
      const cap = Math.max(1, Math.min(args.k, live));
      const [qp, qs] = this.put(examples);
      const [ap, as] = args.allow ? this.put(args.allow) : [0, 0];
      const lp = this.alloc(cap * 8);
      const sp = this.alloc(cap * 4);
      try {
        const flags =
          (args.exact ? 1 : 0) |
          (args.rescore === false ? 0 : 2) |
          (args.ignoreQuantization ? 4 : 0) |
          (args.oversampling !== undefined ? 8 : 0);
        const n = this.check(
          this.x.quiver_index_search_rule(
            handle,
            rule,
            positives,
            qp,
            examples.length,
            args.k,
            args.ef ?? 0,
            args.oversampling ?? 0,
            flags,
            args.allow ? 1 : 0,
            ap,
            args.allow ? args.allow.length : 0,
            lp,
            sp,
            cap,
          ),
        );
        return {
          labels: new BigUint64Array(this.x.memory.buffer.slice(lp, lp + n * 8)),
          scores: new Float32Array(this.x.memory.buffer.slice(sp, sp + n * 4)),
        };
      } finally {
        this.x.quiver_free(qp, qs);
        if (args.allow) this.x.quiver_free(ap, as);
        this.x.quiver_free(lp, cap * 8);
        this.x.quiver_free(sp, cap * 4);
      }
    });
  }

  getVector(handle: number, label: bigint, dim: number): Float32Array | null {
    return this.run(() => {
      const op = this.alloc(dim * 4);
      try {
        const n = this.check(this.x.quiver_index_get_vector(handle, label, op, dim));
        return n === 0 ? null : new Float32Array(this.x.memory.buffer.slice(op, op + n * 4));
      } finally {
        this.x.quiver_free(op, dim * 4);
      }
    });
  }

  stats(handle: number): IndexStats {
    return this.run(() => {
      const op = this.alloc(STATS_VALUES * 8);
      try {
        this.check(this.x.quiver_index_stats(handle, op));
        const v = new Float64Array(this.x.memory.buffer, op, STATS_VALUES);
        return {
          dim: v[0],
          distance: DISTANCE_CODES[v[1]],
          count: v[2],
          slots: v[3],
          deleted: v[4],
          vectorBytes: v[5],
          originalBytes: v[9],
          graphBytes: v[6],
          totalBytes: v[7],
          quantization: QUANT_CODES[v[8]],
          flat: v[10] === 1,
          datatype: DATATYPE_CODES[v[11]],
        };
      } finally {
        this.x.quiver_free(op, STATS_VALUES * 8);
      }
    });
  }

  /** `live` and `dim` (from the stats) size the output buffers. */
  exportLive(handle: number, live: number, dim: number): { labels: BigUint64Array; vectors: Float32Array } {
    return this.run(() => {
      const lp = this.alloc(live * 8);
      const vp = this.alloc(live * dim * 4);
      try {
        const n = this.check(this.x.quiver_index_export_live(handle, lp, vp, live));
        return {
          labels: new BigUint64Array(this.x.memory.buffer.slice(lp, lp + n * 8)),
          vectors: new Float32Array(this.x.memory.buffer.slice(vp, vp + n * dim * 4)),
        };
      } finally {
        this.x.quiver_free(lp, live * 8);
        this.x.quiver_free(vp, live * dim * 4);
      }
    });
  }

  /** One page of exportLive; `cap` (at most `maxCount` and the live count) and `dim` size the output buffers. */
  exportLiveFrom(handle: number, from: number, maxCount: number, cap: number, dim: number): { labels: BigUint64Array; vectors: Float32Array; next: number } {
    return this.run(() => {
      const lp = this.alloc(cap * 8);
      const vp = this.alloc(cap * dim * 4);
      const np = this.alloc(4);
      try {
        const n = this.check(this.x.quiver_index_export_live_from(handle, from, maxCount, lp, vp, cap, np));
        return {
          labels: new BigUint64Array(this.x.memory.buffer.slice(lp, lp + n * 8)),
          vectors: new Float32Array(this.x.memory.buffer.slice(vp, vp + n * dim * 4)),
          next: new Uint32Array(this.x.memory.buffer, np, 1)[0],
        };
      } finally {
        this.x.quiver_free(lp, cap * 8);
        this.x.quiver_free(vp, cap * dim * 4);
        this.x.quiver_free(np, 4);
      }
    });
  }

  compact(handle: number): void {
    this.run(() => this.check(this.x.quiver_index_compact(handle)));
  }

  toBytes(handle: number): Uint8Array {
    return this.run(() => {
      const lenp = this.alloc(4);
      try {
        const p = this.x.quiver_index_to_bytes(handle, lenp);
        if (p === 0) this.check(-1);
        const len = new Uint32Array(this.x.memory.buffer, lenp, 1)[0];
        const out = new Uint8Array(this.x.memory.buffer.slice(p, p + len));
        this.x.quiver_free(p, len);
        return out;
      } finally {
        this.x.quiver_free(lenp, 4);
      }
    });
  }

  fromBytes(bytes: Uint8Array): number {
    return this.run(() => {
      const [p, s] = this.put(bytes);
      try {
        return this.check(this.x.quiver_index_from_bytes(p, bytes.length));
      } finally {
        this.x.quiver_free(p, s);
      }
    });
  }

  // ---- Sparse indexes (crates/quiver-wasm/src/sparse.rs) ----

  /** `datatype` is sent as its position in DATATYPE_CODES. */
  sparseNew(fullScanThreshold: number, datatype: Datatype): number {
    return this.run(() => this.check(this.x.quiver_sparse_new(fullScanThreshold, DATATYPE_CODES.indexOf(datatype))));
  }

  sparseFree(handle: number): void {
    this.run(() => this.x.quiver_sparse_free(handle));
  }

  sparseUpsert(handle: number, b: SparseBatch): void {
    this.run(() => {
      const bufs = [this.put(b.labels), this.put(b.offsets), this.put(b.indices), this.put(b.values)];
      try {
        if (b.offsets.length !== b.labels.length + 1) {
          throw new EngineError('QUIVER_INVALID_ARGUMENT', `sparse batch of ${b.labels.length} labels needs ${b.labels.length + 1} offsets, got ${b.offsets.length}`);
        }
        if (b.indices.length !== b.values.length) {
          throw new EngineError('QUIVER_INVALID_ARGUMENT', `sparse batch has ${b.indices.length} indices but ${b.values.length} values`);
        }
        this.check(this.x.quiver_sparse_upsert(handle, bufs[0][0], b.labels.length, bufs[1][0], bufs[2][0], bufs[3][0], b.indices.length));
      } finally {
        for (const [p, size] of bufs) this.x.quiver_free(p, size);
      }
    });
  }

  sparseDelete(handle: number, labels: BigUint64Array): number {
    return this.run(() => {
      const [lp, ls] = this.put(labels);
      try {
        return this.check(this.x.quiver_sparse_delete(handle, lp, labels.length));
      } finally {
        this.x.quiver_free(lp, ls);
      }
    });
  }

  sparseSearch(
    handle: number,
    indices: Uint32Array,
    values: Float32Array,
    o: { k: number; allow?: BigUint64Array; idf?: boolean; exact?: boolean },
    live: number,
  ): { labels: BigUint64Array; scores: Float32Array } {
    return this.run(() => {
      if (indices.length !== values.length) {
        throw new EngineError('QUIVER_INVALID_ARGUMENT', `sparse vector has ${indices.length} indices but ${values.length} values`);
      }
      const cap = Math.max(1, Math.min(o.k, live));
      const [ip, is] = this.put(indices);
      const [vp, vs] = this.put(values);
      const [ap, as] = o.allow ? this.put(o.allow) : [0, 0];
      const lp = this.alloc(cap * 8);
      const sp = this.alloc(cap * 4);
      try {
        const flags = (o.idf ? 1 : 0) | (o.exact ? 2 : 0);
        const n = this.check(
          this.x.quiver_sparse_search(handle, ip, vp, indices.length, o.k, flags, o.allow ? 1 : 0, ap, o.allow ? o.allow.length : 0, lp, sp, cap),
        );
        return {
          labels: new BigUint64Array(this.x.memory.buffer.slice(lp, lp + n * 8)),
          scores: new Float32Array(this.x.memory.buffer.slice(sp, sp + n * 4)),
        };
      } finally {
        this.x.quiver_free(ip, is);
        this.x.quiver_free(vp, vs);
        if (o.allow) this.x.quiver_free(ap, as);
        this.x.quiver_free(lp, cap * 8);
        this.x.quiver_free(sp, cap * 4);
      }
    });
  }

  sparseGet(handle: number, labels: BigUint64Array): SparseBatch {
    return this.run(() => {
      const [lp, ls] = this.put(labels);
      const lensp = this.alloc(Math.max(1, labels.length) * 4);
      try {
        const total = this.check(this.x.quiver_sparse_lens(handle, lp, labels.length, lensp));
        const lens = new Uint32Array(this.x.memory.buffer.slice(lensp, lensp + labels.length * 4));
        const ip = this.alloc(Math.max(1, total) * 4);
        const vp = this.alloc(Math.max(1, total) * 4);
        try {
          const n = this.check(this.x.quiver_sparse_get(handle, lp, labels.length, ip, vp, total));
          const found: bigint[] = [];
          const offsets = [0];
          lens.forEach((len, i) => {
            if (len === 0xffff_ffff) return;
            found.push(labels[i]);
            offsets.push(offsets[offsets.length - 1] + len);
          });
          return {
            labels: BigUint64Array.from(found),
            offsets: Uint32Array.from(offsets),
            indices: new Uint32Array(this.x.memory.buffer.slice(ip, ip + n * 4)),
            values: new Float32Array(this.x.memory.buffer.slice(vp, vp + n * 4)),
          };
        } finally {
          this.x.quiver_free(ip, Math.max(1, total) * 4);
          this.x.quiver_free(vp, Math.max(1, total) * 4);
        }
      } finally {
        this.x.quiver_free(lp, ls);
        this.x.quiver_free(lensp, Math.max(1, labels.length) * 4);
      }
    });
  }

  sparseStats(handle: number): SparseIndexStats {
    return this.run(() => {
      const op = this.alloc(6 * 8);
      try {
        this.check(this.x.quiver_sparse_stats(handle, op));
        const v = new Float64Array(this.x.memory.buffer, op, 6);
        return { count: v[0], entries: v[1], dims: v[2], totalBytes: v[3], fullScanThreshold: v[4], datatype: DATATYPE_CODES[v[5]] };
      } finally {
        this.x.quiver_free(op, 6 * 8);
      }
    });
  }

  sparseLabels(handle: number): BigUint64Array {
    return this.run(() => {
      const count = this.sparseStats(handle).count;
      const op = this.alloc(Math.max(1, count) * 8);
      try {
        const n = this.check(this.x.quiver_sparse_labels(handle, op, count));
        return new BigUint64Array(this.x.memory.buffer.slice(op, op + n * 8));
      } finally {
        this.x.quiver_free(op, Math.max(1, count) * 8);
      }
    });
  }
}
