/**
 * File I/O of the WASM backend, run in its worker thread: index files and the WAL.
 *
 * Owns: writing engine files atomically and durably (temp file beside the target,
 * fsync, rename, fsync of the directory: fileio.rs's `atomic_write`), reading them
 * back, and the write-ahead log's files — segment names, opening with torn-tail
 * recovery, appends, rolls, group-committed fsyncs, reads, truncation and retention —
 * by the rules of crates/quiver-core/src/wal.rs, which this mirrors step for step. The
 * bytes (record encoding, CRCs, the checks that make a record bad, index images) all
 * come from quiver-core compiled to WASM (WasmFileModule), so a directory written by
 * either backend opens with the other.
 *
 * Must never: acknowledge an append that did not reach the file, report a sync that
 * did not fsync everything appended before it, keep working after a failed fsync,
 * cut records that something valid follows, delete the active segment, or close a
 * file descriptor an fsync in flight still uses.
 */

import * as fs from 'node:fs';
import * as path from 'node:path';
import { EngineError } from './errors';
import type { WasmFileModule } from './wasm-files-abi';

/** How an fs error becomes an engine error, as fileio.rs's `io_error` does. */
export function ioError(context: string, err: unknown): EngineError {
  const e = err as NodeJS.ErrnoException;
  const code = e.code === 'ENOENT' ? 'QUIVER_NOT_FOUND' : 'QUIVER_IO';
  return new EngineError(code, `${context}: ${e.message ?? String(err)}`);
}

function corrupt(message: string): EngineError {
  return new EngineError('QUIVER_CORRUPT', message);
}

/** fsync of a directory's entries (new, renamed or deleted files). */
export function syncDir(dir: string): void {
  let fd: number;
  try {
    fd = fs.openSync(dir, 'r');
  } catch (err) {
    throw ioError(`open directory ${dir}`, err);
  }
  try {
    fs.fsyncSync(fd);
  } catch (err) {
    throw ioError(`fsync directory ${dir}`, err);
  } finally {
    fs.closeSync(fd);
  }
}

function writeAll(fd: number, bytes: Uint8Array): void {
  let at = 0;
  while (at < bytes.length) at += fs.writeSync(fd, bytes, at, bytes.length - at);
}

let tempCounter = 0;

/**
 * Writes `bytes` to `file` atomically and durably: after it returns the file holds
 * exactly `bytes` even across a crash; after a throw (or a crash part-way) it holds
 * what it held before. Temp names follow fileio.rs (".<name>.tmp-<pid>-<n>").
 */
export function atomicWrite(file: string, bytes: Uint8Array): void {
  const dir = path.dirname(file) || '.';
  const base = path.basename(file);
  let tmp = '';
  let fd = -1;
  for (let i = 0; i < 64 && fd < 0; i++) {
    tmp = path.join(dir, `.${base}.tmp-${process.pid}-${tempCounter++}`);
    try {
      fd = fs.openSync(tmp, 'wx');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') continue;
      throw ioError(`create temp file ${tmp}`, err);
    }
  }
  if (fd < 0) throw new EngineError('QUIVER_IO', `could not create a temp file beside ${file}`);
  try {
    try {
      writeAll(fd, bytes);
    } catch (err) {
      throw ioError(`write ${tmp}`, err);
    }
    try {
      fs.fsyncSync(fd);
    } catch (err) {
      throw ioError(`fsync ${tmp}`, err);
    }
    fs.closeSync(fd);
    fd = -1;
    try {
      fs.renameSync(tmp, file);
    } catch (err) {
      throw ioError(`rename ${tmp} to ${file}`, err);
    }
    syncDir(dir);
  } catch (err) {
    if (fd >= 0) fs.closeSync(fd);
    fs.rmSync(tmp, { force: true });
    throw err;
  }
}

/** A whole file's bytes (through `fd`, open on it, when given); a missing file is QUIVER_NOT_FOUND. */
export function readFile(file: string, fd?: number): Buffer {
  try {
    return fs.readFileSync(fd ?? file);
  } catch (err) {
    throw ioError(`read ${file}`, err);
  }
}

/** Frame header of an engine file (magic, version, reserved, payload length). */
const FRAME_HEADER_BYTES = 24;
/** Offset of an index payload's flags word (crates/quiver-core/src/hnsw/persist.rs). */
const INDEX_FLAGS_OFFSET = 4 + 1 + 4 + 4 + 8 + 1 + 4 + 8;
/** Index flag: the originals are in a side file the header names (`INDEX_FLAG_SIDE`). */
const INDEX_FLAG_SIDE = 1 << 16;

/**
 * The side file an index file names for its f32 originals (written by a native node
 * that kept them memory-mapped), and how many of its bytes the index reads; null when
 * the index holds them itself. Only the header is read here: the engine checks the
 * whole file (checksum, name, counts) when it parses it.
 */
export function indexSideFile(bytes: Uint8Array): { name: string; bytes: number } | null {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const at = FRAME_HEADER_BYTES + INDEX_FLAGS_OFFSET;
  if (b.length < at + 8 || b.toString('latin1', 0, 8) !== 'QVRINDEX' || b.readUInt32LE(8) < 2) return null;
  if ((b.readUInt32LE(at) & INDEX_FLAG_SIDE) === 0) return null;
  const len = b.readUInt32LE(at + 4);
  if (len === 0 || len > 1024 || b.length < at + 16 + len) throw corrupt('index file: side file name out of range');
  const name = b.toString('utf8', at + 8, at + 8 + len);
  const covered = b.readBigUInt64LE(at + 8 + len);
  const dim = BigInt(b.readUInt32LE(FRAME_HEADER_BYTES));
  const total = covered * dim * 4n;
  if (total > BigInt(Number.MAX_SAFE_INTEGER)) throw corrupt('index file: side file size out of range');
  // A name with directory parts is refused by the engine's parse; never read it here.
  if (name.includes('/') || name.includes('\\') || name === '.' || name === '..') throw corrupt(`index file: side file name ${JSON.stringify(name)} is not a plain file name`);
  return { name, bytes: Number(total) };
}

/** Index flag: the level-0 links are in a graph file the header names (`INDEX_FLAG_GRAPH`). */
const INDEX_FLAG_GRAPH = 1 << 17;

/**
 * The graph file an index file names for its level-0 links (written by a native node
 * with `hnsw_config.on_disk`), and how many of its bytes the index reads; null when the
 * index holds them itself. Only the header is read here, as in `indexSideFile`.
 */
export function indexGraphFile(bytes: Uint8Array): { name: string; bytes: number } | null {
  const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = FRAME_HEADER_BYTES + INDEX_FLAGS_OFFSET;
  if (b.length < at + 8 || b.toString('latin1', 0, 8) !== 'QVRINDEX' || b.readUInt32LE(8) < 2) return null;
  const flags = b.readUInt32LE(at);
  if ((flags & INDEX_FLAG_GRAPH) === 0) return null;
  at += 4;
  if ((flags & INDEX_FLAG_SIDE) !== 0) {
    if (b.length < at + 4) throw corrupt('index file: truncated header');
    at += 4 + b.readUInt32LE(at) + 8;
  }
  if (b.length < at + 4) throw corrupt('index file: truncated header');
  const len = b.readUInt32LE(at);
  if (len === 0 || len > 1024 || b.length < at + 12 + len) throw corrupt('index file: graph file name out of range');
  const name = b.toString('utf8', at + 4, at + 4 + len);
  const covered = b.readBigUInt64LE(at + 4 + len);
  const m = BigInt(b.readUInt32LE(FRAME_HEADER_BYTES + 5));
  const total = covered * (1n + 2n * m) * 4n;
  if (total > BigInt(Number.MAX_SAFE_INTEGER)) throw corrupt('index file: graph file size out of range');
  if (name.includes('/') || name.includes('\\') || name === '.' || name === '..') throw corrupt(`index file: graph file name ${JSON.stringify(name)} is not a plain file name`);
  return { name, bytes: Number(total) };
}

/** The first `bytes` bytes of `file` (a longer file's tail is not read; a shorter one is returned whole, and the engine refuses it). */
export function readPrefix(file: string, bytes: number): Buffer {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (err) {
    throw ioError(`read ${file}`, err);
  }
  try {
    const out = Buffer.alloc(bytes);
    let at = 0;
    while (at < bytes) {
      const n = fs.readSync(fd, out, at, bytes - at, at);
      if (n === 0) break;
      at += n;
    }
    return at === bytes ? out : out.subarray(0, at);
  } catch (err) {
    throw ioError(`read ${file}`, err);
  } finally {
    fs.closeSync(fd);
  }
}

// ---- The write-ahead log ----

const SEGMENT_RE = /^(\d{20})\.wal$/;
const U64_MAX = 0xffff_ffff_ffff_ffffn;

function segmentName(firstSeq: bigint): string {
  return `${firstSeq.toString().padStart(20, '0')}.wal`;
}

function parseSegmentName(name: string): bigint | null {
  const m = SEGMENT_RE.exec(name);
  if (!m) return null;
  const v = BigInt(m[1]);
  return v > U64_MAX ? null : v;
}

const INDEX_STRIDE_BYTES = 64 * 1024;
const MAX_RECORD_BYTES = 1 << 30;
const RECORD_HEADER_BYTES = 16;

interface Segment {
  firstSeq: bigint;
  /** firstSeq - 1 while empty. */
  lastSeq: bigint;
  /** Bytes of complete, acknowledged records. */
  bytes: number;
  name: string;
  path: string;
  index: Array<[bigint, number]>;
}

function newSegment(dir: string, firstSeq: bigint): Segment {
  const name = segmentName(firstSeq);
  return { firstSeq, lastSeq: firstSeq - 1n, bytes: 0, name, path: path.join(dir, name), index: [] };
}

function noteRecord(s: Segment, seq: bigint, offset: number): void {
  const last = s.index[s.index.length - 1];
  if (!last || offset >= last[1] + INDEX_STRIDE_BYTES) s.index.push([seq, offset]);
}

export interface WalState {
  firstSeq: bigint;
  lastSeq: bigint;
}

export interface WalReport extends WalState {
  truncatedBytes: number;
  truncatedFile: string | null;
  truncatedOffset: number | null;
}

/** Records read, as views into `buffers` (transferred to the caller): [buffer index, seq, offset, length]. */
export interface WalRead {
  buffers: ArrayBuffer[];
  records: Array<[number, bigint, number, number]>;
}

export class WorkerWal {
  private segments: Segment[] = [];
  private active = -1;
  private nextSeq = 1n;
  private totalBytes = 0;
  private closed = false;
  private failure: string | null = null;
  private syncedSeq = 0n;
  private writtenSeq = 0n;
  private syncing: Promise<void> | null = null;
  /** Descriptors of closed segments, closed once no fsync is in flight. */
  private retired: number[] = [];
  readonly report: WalReport;

  private constructor(
    private readonly wasm: WasmFileModule,
    readonly dir: string,
    private readonly segmentBytes: number,
    private readonly retentionBytes: number,
  ) {
    this.report = { firstSeq: 0n, lastSeq: 0n, truncatedBytes: 0, truncatedFile: null, truncatedOffset: null };
  }

  /** Opens (creating if needed) the log in `dir`, recovering a torn tail as wal.rs does. */
  static open(wasm: WasmFileModule, dir: string, segmentBytes = 32 << 20, retentionBytes = 0): WorkerWal {
    if (segmentBytes === 0) throw new EngineError('QUIVER_INVALID_ARGUMENT', 'wal segment_bytes must be at least 1');
    const wal = new WorkerWal(wasm, dir, segmentBytes, retentionBytes);
    wal.recover();
    return wal;
  }

  private recover(): void {
    const dir = this.dir;
    let existed = false;
    try {
      existed = fs.statSync(dir).isDirectory();
    } catch {
      existed = false;
    }
    try {
      fs.mkdirSync(dir, { recursive: true });
    } catch (err) {
      throw ioError(`create wal directory ${dir}`, err);
    }
    if (!existed) {
      const parent = path.dirname(dir);
      if (parent) syncDir(parent);
    }
    let names: string[];
    try {
      names = fs.readdirSync(dir);
    } catch (err) {
      throw ioError(`list wal directory ${dir}`, err);
    }
    const firsts: bigint[] = [];
    for (const name of names) {
      const seq = parseSegmentName(name);
      if (seq === null) continue;
      if (seq === 0n) throw corrupt(`${path.join(dir, name)}: segment named for sequence number 0, which is never used`);
      firsts.push(seq);
    }
    firsts.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));

    const segments: Segment[] = [];
    firsts.forEach((first, i) => {
      const isLast = i + 1 === firsts.length;
      const prev = segments[segments.length - 1];
      const shown = path.join(dir, segmentName(first));
      if (prev && first !== prev.lastSeq + 1n) {
        throw corrupt(
          `${shown}: segment starts at seq ${first} but the previous segment ${prev.name} ends at seq ${prev.lastSeq} (missing or extra segment)`,
        );
      }
      const seg = newSegment(dir, first);
      const bytes = readFile(seg.path);
      const scan = this.wasm.walScan(bytes, first);
      seg.lastSeq = scan.lastSeq;
      seg.bytes = scan.validBytes;
      seg.index = scan.index;
      if (scan.bad) {
        const { offset, reason } = scan.bad;
        if (!isLast) {
          throw corrupt(
            `${seg.path}: corrupt record at byte offset ${offset}: ${reason}; this is not the last segment, so it cannot be a torn tail`,
          );
        }
        const found = this.wasm.walFindValid(bytes.subarray(offset), seg.lastSeq + 1n);
        if (found) {
          throw corrupt(
            `${seg.path}: corrupt record at byte offset ${offset}: ${reason}; a valid record (seq ${found[1]}) follows at byte offset ${offset + found[0]}, so this is not a torn tail`,
          );
        }
        let fd: number;
        try {
          fd = fs.openSync(seg.path, 'r+');
        } catch (err) {
          throw ioError(`open ${seg.path} to cut its torn tail`, err);
        }
        try {
          try {
            fs.ftruncateSync(fd, offset);
          } catch (err) {
            throw ioError(`truncate ${seg.path} to ${offset}`, err);
          }
          try {
            fs.fsyncSync(fd);
          } catch (err) {
            throw ioError(`fsync ${seg.path}`, err);
          }
        } finally {
          fs.closeSync(fd);
        }
        this.report.truncatedBytes = bytes.length - offset;
        this.report.truncatedFile = seg.name;
        this.report.truncatedOffset = offset;
      }
      segments.push(seg);
    });

    const created = segments.length === 0;
    if (created) segments.push(newSegment(dir, 1n));
    const activePath = segments[segments.length - 1].path;
    try {
      this.active = fs.openSync(activePath, created ? 'ax' : 'a');
    } catch (err) {
      throw ioError(`open ${activePath}`, err);
    }
    // What was just read may only be in the page cache (the previous process may have
    // died before syncing): make it durable, so all the log reports is on disk.
    try {
      fs.fdatasyncSync(this.active);
    } catch (err) {
      fs.closeSync(this.active);
      throw ioError(`fsync ${activePath}`, err);
    }
    syncDir(dir);

    this.segments = segments;
    this.nextSeq = segments[segments.length - 1].lastSeq + 1n;
    if (this.nextSeq > segments[0].firstSeq) {
      this.report.firstSeq = segments[0].firstSeq;
      this.report.lastSeq = this.nextSeq - 1n;
    }
    this.totalBytes = segments.reduce((s, x) => s + x.bytes, 0);
    this.syncedSeq = this.nextSeq - 1n;
    this.writtenSeq = this.nextSeq - 1n;
  }

  state(): WalState {
    const empty = this.nextSeq <= this.segments[0].firstSeq;
    return { firstSeq: empty ? 0n : this.segments[0].firstSeq, lastSeq: empty ? 0n : this.nextSeq - 1n };
  }

  private fail(msg: string): void {
    if (this.failure === null) this.failure = msg;
  }

  private checkUsable(): void {
    if (this.failure !== null) {
      throw new EngineError(
        'QUIVER_CLOSED',
        `wal ${this.dir} is unusable after an I/O failure (${this.failure}); reopen it to recover what is on disk`,
      );
    }
    if (this.closed) throw new EngineError('QUIVER_CLOSED', `wal ${this.dir} is closed`);
  }

  private activeSegment(): Segment {
    return this.segments[this.segments.length - 1];
  }

  /** Appends records (one write, one segment); returns the first sequence number. */
  /** Record i is the next `lens[i]` bytes of `data`. */
  append(data: Uint8Array, lens: Uint32Array): bigint {
    for (const l of lens) {
      if (l > MAX_RECORD_BYTES) {
        throw new EngineError('QUIVER_INVALID_ARGUMENT', `wal record of ${l} bytes exceeds the maximum of ${MAX_RECORD_BYTES} bytes`);
      }
    }
    this.checkUsable();
    if (lens.length === 0) return this.nextSeq;
    const seg0 = this.activeSegment();
    if (seg0.bytes >= this.segmentBytes && seg0.lastSeq >= seg0.firstSeq) this.roll();
    const first = this.nextSeq;
    const buf = this.wasm.walEncode(first, data, lens);
    const seg = this.activeSegment();
    const start = seg.bytes;
    try {
      writeAll(this.active, buf);
    } catch (err) {
      // Cut what reached the file so the next append starts on a record boundary; if
      // even that fails, the file's content is unknown and the log stops.
      try {
        fs.ftruncateSync(this.active, start);
      } catch (err2) {
        const msg = `write to ${seg.path} failed (${(err as Error).message}) and undoing the partial write failed (${(err2 as Error).message})`;
        this.fail(msg);
        throw new EngineError('QUIVER_IO', msg);
      }
      throw ioError(`append to ${seg.path}`, err);
    }
    let offset = start;
    lens.forEach((l, i) => {
      noteRecord(seg, first + BigInt(i), offset);
      offset += RECORD_HEADER_BYTES + l;
    });
    const n = BigInt(lens.length);
    seg.bytes = offset;
    seg.lastSeq = first + n - 1n;
    this.totalBytes += offset - start;
    this.nextSeq = first + n;
    this.writtenSeq = first + n - 1n;
    return first;
  }

  /** Closes the active segment (fsynced) and starts the next, then applies retention. */
  private roll(): void {
    const old = this.activeSegment().path;
    try {
      fs.fdatasyncSync(this.active);
    } catch (err) {
      const msg = `fsync ${old} while closing it: ${(err as Error).message}`;
      this.fail(msg);
      throw new EngineError('QUIVER_IO', msg);
    }
    const seg = newSegment(this.dir, this.nextSeq);
    let fd: number;
    try {
      fd = fs.openSync(seg.path, 'ax');
    } catch (err) {
      throw ioError(`create wal segment ${seg.path}`, err);
    }
    try {
      syncDir(this.dir);
    } catch (err) {
      fs.closeSync(fd);
      const msg = `fsync of wal directory after creating ${seg.name}: ${(err as Error).message}`;
      this.fail(msg);
      throw new EngineError('QUIVER_IO', msg);
    }
    this.segments.push(seg);
    this.retired.push(this.active);
    this.active = fd;
    this.closeRetired();
    this.applyRetention();
  }

  private closeRetired(): void {
    if (this.syncing) return;
    for (const fd of this.retired.splice(0)) fs.closeSync(fd);
  }

  private applyRetention(): void {
    if (this.retentionBytes === 0) return;
    const activeBytes = this.activeSegment().bytes;
    while (this.segments.length > 1 && this.totalBytes - activeBytes > this.retentionBytes) this.deleteOldest();
  }

  /** Deletes the oldest segment, then fsyncs the directory: what is left stays contiguous. */
  private deleteOldest(): void {
    const p = this.segments[0].path;
    try {
      fs.unlinkSync(p);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw ioError(`delete wal segment ${p}`, err);
    }
    const s = this.segments.shift()!;
    this.totalBytes -= s.bytes;
    syncDir(this.dir);
  }

  /** Makes every record appended before the call durable; concurrent callers share one fsync. */
  async sync(): Promise<void> {
    this.checkUsable();
    await this.syncTo(this.writtenSeq);
  }

  private async syncTo(target: bigint): Promise<void> {
    for (;;) {
      if (this.failure !== null) this.checkUsable();
      if (this.syncedSeq >= target) return;
      if (!this.syncing) break;
      await this.syncing.catch(() => undefined);
    }
    // The leader: one fsync for everyone waiting. What it covers is fixed before it
    // starts: everything written is in this file or in a segment fsynced at its roll.
    const fd = this.active;
    const covered = this.nextSeq - 1n;
    const shown = this.activeSegment().path;
    this.syncing = new Promise<void>((resolve, reject) => {
      fs.fdatasync(fd, (err) => {
        if (err) {
          const msg = `fsync ${shown} failed: ${err.message}`;
          this.fail(msg);
          reject(new EngineError('QUIVER_IO', msg));
        } else {
          if (covered > this.syncedSeq) this.syncedSeq = covered;
          resolve();
        }
      });
    });
    try {
      await this.syncing;
    } finally {
      this.syncing = null;
      this.closeRetired();
    }
  }

  /** Up to `maxRecords` records from `seq`; NOT_FOUND when `seq` was truncated away. */
  readFrom(seq: bigint, maxRecords: number): WalRead {
    if (seq === 0n) throw new EngineError('QUIVER_INVALID_ARGUMENT', 'wal sequence numbers start at 1');
    this.checkUsable();
    const first = this.segments[0].firstSeq;
    if (seq < first) {
      throw new EngineError(
        'QUIVER_NOT_FOUND',
        `wal ${this.dir}: seq ${seq} is no longer in the log (records before ${first} were truncated)`,
      );
    }
    const out: WalRead = { buffers: [], records: [] };
    if (seq >= this.nextSeq || maxRecords === 0) return out;
    let i = this.segments.findIndex((s) => s.firstSeq > seq);
    i = (i < 0 ? this.segments.length : i) - 1;
    for (let k = i; k < this.segments.length && out.records.length < maxRecords; k++) {
      const s = this.segments[k];
      if (s.lastSeq < s.firstSeq) continue;
      let startSeq = s.firstSeq;
      let startOffset = 0;
      if (k === i) {
        for (const [hs, ho] of s.index) {
          if (hs > seq) break;
          startSeq = hs;
          startOffset = ho;
        }
      }
      const len = s.bytes - startOffset;
      const buf = Buffer.allocUnsafeSlow(len);
      let fd: number;
      try {
        fd = fs.openSync(s.path, 'r');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
          throw new EngineError('QUIVER_NOT_FOUND', `${s.path}: segment was truncated away while being read`);
        }
        throw ioError(`open ${s.path}`, err);
      }
      try {
        let got = 0;
        while (got < len) {
          const n = fs.readSync(fd, buf, got, len - got, startOffset + got);
          if (n === 0) throw corrupt(`${s.path}: corrupt record at byte offset ${startOffset + got}: partial record header`);
          got += n;
        }
      } catch (err) {
        if (err instanceof EngineError) throw err;
        throw ioError(`read ${s.path}`, err);
      } finally {
        fs.closeSync(fd);
      }
      const recs = this.wasm.walDecode(buf, startSeq, seq, maxRecords - out.records.length, startOffset, s.path);
      const b = out.buffers.length;
      out.buffers.push(buf.buffer as ArrayBuffer);
      for (const [rs, off, l] of recs) out.records.push([b, rs, off, l]);
    }
    return out;
  }

  /** Deletes the oldest segments while all their records are before `seq` and the rest hold `keepBytes`. */
  truncateRetaining(seq: bigint, keepBytes: number): void {
    this.checkUsable();
    while (this.segments.length > 1 && this.segments[1].firstSeq <= seq && this.totalBytes - this.segments[0].bytes >= keepBytes) {
      this.deleteOldest();
    }
  }

  /** Syncs and closes; later calls fail with QUIVER_CLOSED. */
  async close(): Promise<void> {
    this.checkUsable();
    this.closed = true;
    try {
      await this.syncTo(this.writtenSeq);
    } finally {
      if (!this.syncing) {
        this.closeRetired();
        fs.closeSync(this.active);
      }
    }
  }
}
