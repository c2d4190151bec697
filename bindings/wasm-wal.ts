/**
 * The WASM backend's Wal: a handle to a log the engine worker holds open
 * (bindings/wasm-storage.ts does its file I/O there, by the rules of wal.rs).
 *
 * Owns: checking arguments as the native backend does, sending the `wal*` requests,
 * and the first/last sequence numbers as of the last finished call, so the getters
 * stay synchronous. Must never: touch a file itself.
 */

import type { Wal, WalOpenReport, WalOptions, WalRecord } from './engine';
import { EngineError, invalidArgument } from './errors';
import type { WalAppended, WalOpened } from './wasm-storage-ops';
import type { WalRead, WalState } from './wasm-storage';
import type { WorkerRequest } from './wasm-worker';
import { checkCount, checkLabel, checkPath } from './validate';

type WalRequest = Extract<WorkerRequest, { op: `wal${string}` }>;
type Req = WalRequest extends infer R ? (R extends { id: number } ? Omit<R, 'id'> : never) : never;

export interface WalHost {
  call<T>(req: Req, transfer?: ArrayBuffer[]): Promise<T>;
}

/** The most records one read returns when no maximum is given (the native default is usize::MAX). */
const ALL = 0xffff_ffff;

export class WasmWal implements Wal {
  readonly report: WalOpenReport;
  private state: WalState;
  private closed = false;

  private constructor(
    private readonly host: WalHost,
    private readonly id: number,
    opened: WalOpened,
  ) {
    this.report = { ...opened.report };
    this.state = { firstSeq: opened.report.firstSeq, lastSeq: opened.report.lastSeq };
  }

  static async open(host: WalHost, dir: string, options?: WalOptions): Promise<WasmWal> {
    const args = {
      dir: checkPath('dir', dir),
      segmentBytes: options?.segmentBytes === undefined ? undefined : checkCount('segmentBytes', options.segmentBytes, Number.MAX_SAFE_INTEGER),
      retentionBytes:
        options?.retentionBytes === undefined ? undefined : checkCount('retentionBytes', options.retentionBytes, Number.MAX_SAFE_INTEGER),
    };
    const opened = await host.call<WalOpened>({ op: 'walOpen', args });
    return new WasmWal(host, opened.wal, opened);
  }

  async append(records: Buffer[], sync?: boolean): Promise<bigint[]> {
    if (!Array.isArray(records) || !records.every((r) => r instanceof Uint8Array)) {
      throw invalidArgument('records must be an array of Buffers');
    }
    // One fresh buffer, transferred: small Buffers are views of a shared pool, which a
    // structured clone would copy whole.
    const lens = Uint32Array.from(records, (x) => x.length);
    const data = new Uint8Array(lens.reduce((a, n) => a + n, 0));
    let at = 0;
    for (const x of records) {
      data.set(x, at);
      at += x.length;
    }
    const r = await this.host.call<WalAppended>({ op: 'walAppend', args: { wal: this.id, data, lens, sync: sync === true } }, [
      data.buffer,
      lens.buffer,
    ]);
    this.state = { firstSeq: r.firstSeq, lastSeq: r.lastSeq };
    return records.map((_, i) => r.first + BigInt(i));
  }

  sync(): Promise<void> {
    return this.host.call<void>({ op: 'walSync', args: { wal: this.id } });
  }

  async readFrom(seq: bigint, maxRecords?: number): Promise<WalRecord[]> {
    checkLabel(seq);
    const max = maxRecords === undefined ? ALL : Math.min(ALL, checkCount('maxRecords', maxRecords, Number.MAX_SAFE_INTEGER));
    const r = await this.host.call<WalRead>({ op: 'walRead', args: { wal: this.id, seq, maxRecords: max } });
    return r.records.map(([b, s, off, len]) => ({ seq: s, data: Buffer.from(r.buffers[b], off, len) }));
  }

  async truncateBefore(seq: bigint, keepBytes?: number): Promise<void> {
    checkLabel(seq);
    const keep = keepBytes === undefined ? 0 : checkCount('keepBytes', keepBytes, Number.MAX_SAFE_INTEGER);
    this.state = await this.host.call<WalState>({ op: 'walTruncate', args: { wal: this.id, seq, keepBytes: keep } });
  }

  firstSeq(): bigint {
    this.checkOpen();
    return this.state.firstSeq;
  }

  lastSeq(): bigint {
    this.checkOpen();
    return this.state.lastSeq;
  }

  /** The getters refuse after close, as the native backend's do. */
  private checkOpen(): void {
    if (this.closed) throw new EngineError('QUIVER_CLOSED', 'WAL is closed');
  }

  async close(): Promise<void> {
    await this.host.call<null>({ op: 'walClose', args: { wal: this.id } });
    this.closed = true;
  }
}
