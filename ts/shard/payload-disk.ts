/**
 * The shard's payload store for `on_disk_payload: true`: payload JSON text in an
 * append-only data file (`payload-<n>.dat`), and in memory only where each point's
 * current text lies (position and length, 12 bytes a point in typed arrays). Reads
 * parse the text on demand (`get`: a positional read of one payload; `getAsync` for
 * reads off the event loop). Payload-index values stay in memory, in the indexes, unless an
 * index is created with `on_disk: true` (index-disk.ts).
 *
 * Owns: the data file, its offset table, the index file a checkpoint names
 * (`payidx-<seq>-<n>.bin`), compaction. Must never: rewrite or truncate bytes a
 * durable checkpoint names while the file is in use.
 *
 * Writes (under the shard's update lock): every change appends the point's whole new
 * payload and moves its entry; the old text becomes garbage. Appends gather in a
 * buffer of up to APPEND_BUFFER bytes (reads of those payloads are served from it) and
 * go to the file when it fills and at each checkpoint. Nothing is fsynced per write:
 * the WAL holds every operation until a checkpoint covers it.
 *
 * Checkpoint (`save`, under the lock): compact when garbage exceeds the live bytes
 * (and COMPACT_MIN_GARBAGE); flush the buffer; fdatasync the data file; write the
 * index file (offset, position, length per point, CRC32C) atomically. The checkpoint
 * then names `{data, length, index}`: exactly the first `length` bytes of `data` are
 * part of it. Bytes appended later are not: after a crash, `open` cuts the file back
 * to `length` (before anything uses it) and the WAL replay writes them again. A
 * snapshot copies the first `length` bytes only (`ShardSnapshotFiles.sizes`).
 *
 * Compaction writes the live payloads, in file order, to a temp file, fsyncs it,
 * renames it to the next `payload-<n>.dat` and switches to it; the old file stays
 * (the previous checkpoint and pinned snapshots name it) until the shard's clean-up
 * removes it. A read in flight on the old file finishes before its descriptor closes.
 *
 * Index file (little endian): "QPDX", u16 version (1), u16 flags (0), u64 count, then
 * per entry: u64 offset, u64 position, u32 length; then u32 CRC32C of all before it.
 */

import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';
import { promisify } from 'node:util';

import { CRC32C_INIT, crc32cFinish, crc32cUpdate } from '../common/crc32c';
import { syncDir, writeFileAtomic } from '../common/files';
import { PayloadFormatError, PayloadStore, validatePayload, type Payload } from './payload-store';

const fdatasync = promisify(fs.fdatasync);
const fsync = promisify(fs.fsync);
const readAt = promisify(fs.read);
const writeAt = promisify(fs.write);
const closeFd = promisify(fs.close);

/** What a checkpoint names: the data file, how many of its bytes it covers, and the index file. */
export interface DiskPayloadRef {
  data: string;
  length: number;
  index: string;
}

export const PAYLOAD_DATA_RE = /^payload-([0-9]{1,15})\.dat$/;
export const PAYLOAD_INDEX_RE = /^payidx-[0-9]{1,20}-[0-9]{1,15}\.bin$/;

/** Appends are buffered up to this many bytes before they go to the file. */
const APPEND_BUFFER = 1 << 20;
/** Compaction runs only when the garbage is at least this large (and larger than the live bytes). */
const COMPACT_MIN_GARBAGE = 16 << 20;
/** Compaction reads and writes in pieces of about this size. */
const COPY_PIECE = 4 << 20;
const INDEX_MAGIC = Buffer.from('QPDX', 'latin1');
const INDEX_HEADER = 16;
const INDEX_ENTRY = 20;

/** A data file descriptor; closed once retired and no async read is using it. */
interface Handle {
  fd: number;
  readers: number;
  retired: boolean;
}

function release(h: Handle): void {
  if (h.retired && h.readers === 0) {
    h.readers = -1;
    void closeFd(h.fd).catch(() => undefined);
  }
}

export class DiskPayloadStore {
  private handle: Handle;
  /** Bytes of the data file that are written (the buffer comes after them). */
  private flushed: number;
  private buffer = Buffer.allocUnsafe(APPEND_BUFFER);
  /** Where synchronous reads land (one at a time: each is parsed before the next). */
  private readBuffer = Buffer.allocUnsafe(1 << 16);
  private buffered = 0;
  /** Dense table: position and length per offset (length 0: no entry). */
  private pos = new Float64Array(1024);
  private len = new Uint32Array(1024);
  private count = 0;
  /** Offsets beyond the dense table (very sparse or above 2^53). */
  private readonly far = new Map<bigint, [number, number]>();
  /** Bytes of live payload text. */
  private live = 0;
  /** Something changed since the last save (a new index file is due). */
  private changed = true;
  private lastRef: DiskPayloadRef | null = null;
  /** Set when an fsync of the data file failed: no later checkpoint may trust it. */
  private syncFailed: Error | null = null;
  /** The data file was created or renamed and its directory entry is not yet fsynced. */
  private dirDirty: boolean;
  private readonly scratch = new PayloadStore();
  private closed = false;
  /** Garbage bytes from which compaction may run (COMPACT_MIN_GARBAGE; tests lower it). */
  compactMinGarbage = COMPACT_MIN_GARBAGE;

  private constructor(
    private readonly dir: string,
    private file: string,
    fd: number,
    length: number,
    dirDirty: boolean,
  ) {
    this.handle = { fd, readers: 0, retired: false };
    this.flushed = length;
    this.dirDirty = dirDirty;
  }

  /** A new, empty store writing to `payload-<fileNo>.dat` in `dir`. */
  static async create(dir: string, fileNo: number): Promise<DiskPayloadStore> {
    const file = `payload-${fileNo}.dat`;
    const fd = fs.openSync(path.join(dir, file), 'w+');
    return new DiskPayloadStore(dir, file, fd, 0, true);
  }

  /** The store a checkpoint names: the index file's entries over the first `ref.length` bytes of the data file. */
  static async open(dir: string, ref: DiskPayloadRef): Promise<DiskPayloadStore> {
    const entries = decodeIndex(await fsp.readFile(path.join(dir, ref.index)), ref.length);
    const full = path.join(dir, ref.data);
    const size = (await fsp.stat(full)).size;
    if (size < ref.length) throw new PayloadFormatError(`payload data file ${full} has ${size} bytes, the checkpoint names ${ref.length}`);
    const fd = fs.openSync(full, 'r+');
    // Bytes past the checkpoint's length are writes it does not cover (the WAL replays
    // them); nothing uses the file yet, so they are cut off before appends resume.
    if (size > ref.length) fs.ftruncateSync(fd, ref.length);
    const store = new DiskPayloadStore(dir, ref.data, fd, ref.length, false);
    for (let i = 0; i < entries.count; i++) store.put(entries.offsets[i], entries.pos[i], entries.len[i]);
    store.changed = false;
    store.lastRef = ref;
    return store;
  }

  /** The data file being appended to. */
  get dataFile(): string {
    return this.file;
  }

  /** The index file the last save wrote: a checkpoint that failed after it names it when retried (save returns it unchanged), so it must not be removed meanwhile. */
  get savedIndexFile(): string | null {
    return this.lastRef?.index ?? null;
  }

  get size(): number {
    return this.count + this.far.size;
  }

  /** Bytes of live payload text (strict mode's payload size). */
  get liveBytes(): number {
    return this.live;
  }

  /** Bytes in the data file (and buffer) that no entry points to. */
  get garbageBytes(): number {
    return this.flushed + this.buffered - this.live;
  }

  // -- the offset table --------------------------------------------------------------

  private slot(offset: bigint): [number, number] | null {
    if (offset < BigInt(this.len.length)) {
      const i = Number(offset);
      const l = this.len[i];
      if (l > 0) return [this.pos[i], l];
    }
    return this.far.get(offset) ?? null;
  }

  private put(offset: bigint, p: number, l: number): void {
    const old = this.slot(offset);
    if (old) this.live -= old[1];
    this.live += l;
    if (this.far.has(offset)) {
      this.far.set(offset, [p, l]);
      return;
    }
    const n = offset < Number.MAX_SAFE_INTEGER ? Number(offset) : -1;
    if (n >= 0 && n >= this.len.length && n < 4 * (this.count + 1) + 65536) {
      let cap = this.len.length;
      while (cap <= n) cap *= 2;
      const pos = new Float64Array(cap);
      pos.set(this.pos);
      const len = new Uint32Array(cap);
      len.set(this.len);
      this.pos = pos;
      this.len = len;
    }
    if (n >= 0 && n < this.len.length) {
      if (this.len[n] === 0) this.count++;
      this.pos[n] = p;
      this.len[n] = l;
    } else {
      this.far.set(offset, [p, l]);
    }
  }

  private drop(offset: bigint): boolean {
    if (offset < BigInt(this.len.length)) {
      const i = Number(offset);
      if (this.len[i] > 0) {
        this.live -= this.len[i];
        this.len[i] = 0;
        this.count--;
        return true;
      }
    }
    const f = this.far.get(offset);
    if (!f) return false;
    this.live -= f[1];
    this.far.delete(offset);
    return true;
  }

  /** Every entry as [offset, position, length], dense ones in offset order first. */
  private *slots(): IterableIterator<[bigint, number, number]> {
    for (let i = 0; i < this.len.length; i++) if (this.len[i] > 0) yield [BigInt(i), this.pos[i], this.len[i]];
    for (const [o, [p, l]] of this.far) yield [o, p, l];
  }

  // -- reads ---------------------------------------------------------------------------

  has(offset: bigint): boolean {
    return this.slot(offset) !== null;
  }

  /** The text at `p` (valid until the next read: sync reads share one buffer). */
  private text(p: number, l: number): Buffer {
    if (p >= this.flushed) return this.buffer.subarray(p - this.flushed, p - this.flushed + l);
    if (this.readBuffer.length < l) this.readBuffer = Buffer.allocUnsafe(Math.max(l, this.readBuffer.length * 2));
    const out = this.readBuffer.subarray(0, l);
    let got = 0;
    while (got < l) {
      const n = fs.readSync(this.handle.fd, out, got, l - got, p + got);
      if (n === 0) throw new PayloadFormatError(`payload data file ${this.file} ends at ${p + got}, a payload runs to ${p + l}`);
      got += n;
    }
    return out;
  }

  /** The point's payload, parsed from its stored text (a fresh object), or `{}` when it has none. */
  get(offset: bigint): Payload {
    const s = this.slot(offset);
    if (s === null) return {};
    return JSON.parse(this.text(s[0], s[1]).toString('utf8')) as Payload;
  }

  /** As `get`, with the file read on the thread pool (for payloads of retrieve and search answers). */
  async getAsync(offset: bigint): Promise<Payload | null> {
    const s = this.slot(offset);
    if (s === null) return null;
    const [p, l] = s;
    if (p >= this.flushed) return JSON.parse(this.text(p, l).toString('utf8')) as Payload;
    const h = this.handle;
    h.readers++;
    try {
      const out = Buffer.allocUnsafe(l);
      let got = 0;
      while (got < l) {
        const { bytesRead } = await readAt(h.fd, out, got, l - got, p + got);
        if (bytesRead === 0) throw new PayloadFormatError(`payload data file ${this.file} ends at ${p + got}, a payload runs to ${p + l}`);
        got += bytesRead;
      }
      return JSON.parse(out.toString('utf8')) as Payload;
    } finally {
      h.readers--;
      release(h);
    }
  }

  *entries(): IterableIterator<[bigint, Payload]> {
    for (const [o, p, l] of this.slots()) yield [o, JSON.parse(this.text(p, l).toString('utf8')) as Payload];
  }

  [Symbol.iterator](): IterableIterator<[bigint, Payload]> {
    return this.entries();
  }

  // -- writes --------------------------------------------------------------------------

  private append(offset: bigint, payload: Payload): void {
    if (this.closed) throw new Error('the payload store is closed');
    const json = JSON.stringify(payload);
    const l = Buffer.byteLength(json, 'utf8');
    if (this.buffered + l > this.buffer.length) this.flushBuffer();
    const p = this.flushed + this.buffered;
    if (l > this.buffer.length) {
      writeAllSync(this.handle.fd, Buffer.from(json, 'utf8'), this.flushed);
      this.flushed += l;
    } else {
      this.buffer.write(json, this.buffered, 'utf8');
      this.buffered += l;
    }
    this.put(offset, p, l);
    this.changed = true;
  }

  /** Writes the buffered appends to the file (no fsync). */
  private flushBuffer(): void {
    if (this.buffered === 0) return;
    writeAllSync(this.handle.fd, this.buffer.subarray(0, this.buffered), this.flushed);
    this.flushed += this.buffered;
    this.buffered = 0;
  }

  /** Runs a PayloadStore operation on the point's current payload and appends the result. */
  private change(offset: bigint, create: boolean, op: (s: PayloadStore) => void): void {
    const had = this.has(offset);
    if (!had && !create) return;
    const s = this.scratch;
    try {
      if (had) s.overwrite(0n, this.get(offset));
      op(s);
      if (s.has(0n)) this.append(offset, s.get(0n) as Payload);
    } finally {
      s.remove(0n);
    }
  }

  set(offset: bigint, payload: Payload, key?: string | null): void {
    this.change(offset, true, (s) => s.set(0n, payload, key));
  }

  overwrite(offset: bigint, payload: Payload): void {
    validatePayload(payload);
    this.append(offset, payload);
  }

  deleteKeys(offset: bigint, keys: string[]): void {
    this.change(offset, false, (s) => s.deleteKeys(0n, keys));
  }

  clear(offset: bigint): void {
    if (this.has(offset)) this.append(offset, {});
  }

  remove(offset: bigint): boolean {
    const had = this.drop(offset);
    if (had) this.changed = true;
    return had;
  }

  // -- checkpoints ---------------------------------------------------------------------

  /**
   * Makes the current state durable for a checkpoint at `seq` (the caller holds the
   * update lock) and returns what the checkpoint names. `nextFileNo` numbers a
   * compacted data file (and the index file).
   */
  async save(seq: bigint, nextFileNo: () => number): Promise<DiskPayloadRef> {
    if (!this.changed && this.lastRef !== null && this.buffered === 0 && !this.dirDirty) return this.lastRef;
    if (this.garbageBytes >= this.compactMinGarbage && this.garbageBytes > this.live) await this.compact(nextFileNo());
    if (this.syncFailed !== null) throw this.syncFailed;
    this.flushBuffer();
    try {
      await fdatasync(this.handle.fd);
    } catch (err) {
      // After a failed fsync Linux may drop the dirty pages and report success on a retry:
      // the data file is never trusted again (checkpoints keep failing, the WAL keeps every record).
      this.syncFailed = err instanceof Error ? err : new Error(String(err));
      throw err;
    }
    if (this.dirDirty) {
      await syncDir(this.dir);
      this.dirDirty = false;
    }
    const index = `payidx-${seq}-${nextFileNo()}.bin`;
    await writeFileAtomic(path.join(this.dir, index), this.encodeIndex());
    this.changed = false;
    this.lastRef = { data: this.file, length: this.flushed, index };
    return this.lastRef;
  }

  private *encodeIndex(): Generator<Uint8Array> {
    const head = Buffer.alloc(INDEX_HEADER);
    INDEX_MAGIC.copy(head, 0);
    head.writeUInt16LE(1, 4);
    head.writeUInt16LE(0, 6);
    head.writeBigUInt64LE(BigInt(this.size), 8);
    let crc = crc32cUpdate(CRC32C_INIT, head);
    yield head;
    const per = 1 << 14;
    let piece = Buffer.allocUnsafe(per * INDEX_ENTRY);
    let n = 0;
    for (const [o, p, l] of this.slots()) {
      piece.writeBigUInt64LE(o, n * INDEX_ENTRY);
      piece.writeBigUInt64LE(BigInt(p), n * INDEX_ENTRY + 8);
      piece.writeUInt32LE(l, n * INDEX_ENTRY + 16);
      if (++n === per) {
        crc = crc32cUpdate(crc, piece);
        yield piece;
        piece = Buffer.allocUnsafe(per * INDEX_ENTRY);
        n = 0;
      }
    }
    if (n > 0) {
      const last = piece.subarray(0, n * INDEX_ENTRY);
      crc = crc32cUpdate(crc, last);
      yield last;
    }
    const tail = Buffer.alloc(4);
    tail.writeUInt32LE(crc32cFinish(crc), 0);
    yield tail;
  }

  /**
   * Copies the live payloads, in file order, to `payload-<fileNo>.dat` (through a temp
   * file, fsynced, then renamed) and switches to it. Reads keep using the old file
   * until the switch; no write runs meanwhile (the caller holds the update lock).
   */
  private async compact(fileNo: number): Promise<void> {
    this.flushBuffer();
    const all = [...this.slots()].sort((a, b) => a[1] - b[1]);
    const name = `payload-${fileNo}.dat`;
    const tmp = path.join(this.dir, `.${name}.compact.tmp`);
    const out = fs.openSync(tmp, 'w');
    const newPos = new Float64Array(all.length);
    let w = 0;
    try {
      let i = 0;
      while (i < all.length) {
        // One piece: consecutive entries up to about COPY_PIECE bytes, read in one go
        // per run of adjacent entries.
        const piece = Buffer.allocUnsafe(Math.max(COPY_PIECE, all[i][2]));
        let used = 0;
        while (i < all.length && used + all[i][2] <= piece.length) {
          let j = i;
          let runEnd = all[i][1] + all[i][2];
          while (j + 1 < all.length && all[j + 1][1] === runEnd && used + (runEnd - all[i][1]) + all[j + 1][2] <= piece.length) {
            j++;
            runEnd += all[j][2];
          }
          const runStart = all[i][1];
          const runLen = runEnd - runStart;
          let got = 0;
          while (got < runLen) {
            const { bytesRead } = await readAt(this.handle.fd, piece, used + got, runLen - got, runStart + got);
            if (bytesRead === 0) throw new PayloadFormatError(`payload data file ${this.file} ends at ${runStart + got} during compaction`);
            got += bytesRead;
          }
          for (let k = i; k <= j; k++) newPos[k] = w + used + (all[k][1] - runStart);
          used += runLen;
          i = j + 1;
        }
        let put = 0;
        while (put < used) put += (await writeAt(out, piece, put, used - put, w + put)).bytesWritten;
        w += used;
      }
      await fsync(out);
    } catch (err) {
      fs.closeSync(out);
      await fsp.rm(tmp, { force: true });
      throw err;
    }
    fs.closeSync(out);
    await fsp.rename(tmp, path.join(this.dir, name));
    const fd = fs.openSync(path.join(this.dir, name), 'r+');
    const old = this.handle;
    this.handle = { fd, readers: 0, retired: false };
    old.retired = true;
    release(old);
    this.file = name;
    this.flushed = w;
    this.dirDirty = true;
    for (let k = 0; k < all.length; k++) this.put(all[k][0], newPos[k], all[k][2]);
    this.changed = true;
  }

  /** Closes the data file (once reads in flight end). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.handle.retired = true;
    release(this.handle);
  }
}

function writeAllSync(fd: number, data: Buffer, at: number): void {
  let put = 0;
  while (put < data.length) put += fs.writeSync(fd, data, put, data.length - put, at + put);
}

/**
 * Checks the files a checkpoint names for on-disk payloads as open() does (the index
 * file's header, CRC32C and entries within `ref.length`; the data file at least
 * `ref.length` bytes), without opening a store: a snapshot recovery refuses a damaged
 * snapshot with it before anything is replaced. Throws PayloadFormatError.
 */
export async function checkPayloadFiles(dir: string, ref: DiskPayloadRef): Promise<void> {
  decodeIndex(await fsp.readFile(path.join(dir, ref.index)), ref.length);
  const size = (await fsp.stat(path.join(dir, ref.data))).size;
  if (size < ref.length) throw new PayloadFormatError(`payload data file ${ref.data} has ${size} bytes, the checkpoint names ${ref.length}`);
}

/** An index file's entries, checked against the data length they may refer to. */
function decodeIndex(buf: Buffer, dataLength: number): { count: number; offsets: bigint[]; pos: number[]; len: number[] } {
  const fail = (msg: string): never => {
    throw new PayloadFormatError(`payload index file is corrupt: ${msg}`);
  };
  if (buf.length < INDEX_HEADER + 4) fail(`truncated (${buf.length} bytes)`);
  if (!buf.subarray(0, 4).equals(INDEX_MAGIC)) fail('bad magic (not a payload index file)');
  const end = buf.length - 4;
  if (buf.readUInt32LE(end) !== crc32cFinish(crc32cUpdate(CRC32C_INIT, buf.subarray(0, end)))) fail('checksum mismatch or truncated data');
  if (buf.readUInt16LE(4) !== 1) fail(`unsupported version ${buf.readUInt16LE(4)}`);
  if (buf.readUInt16LE(6) !== 0) fail(`unknown flags ${buf.readUInt16LE(6)}`);
  const count = Number(buf.readBigUInt64LE(8));
  if (count * INDEX_ENTRY !== end - INDEX_HEADER) fail(`entry count ${count} does not fit the data`);
  const offsets: bigint[] = new Array<bigint>(count);
  const pos: number[] = new Array<number>(count);
  const len: number[] = new Array<number>(count);
  for (let i = 0; i < count; i++) {
    const at = INDEX_HEADER + i * INDEX_ENTRY;
    offsets[i] = buf.readBigUInt64LE(at);
    pos[i] = Number(buf.readBigUInt64LE(at + 8));
    len[i] = buf.readUInt32LE(at + 16);
    if (len[i] < 2 || pos[i] + len[i] > dataLength) fail(`entry ${i} (offset ${offsets[i]}) lies outside the data (${pos[i]}+${len[i]} of ${dataLength})`);
  }
  return { count, offsets, pos, len };
}
