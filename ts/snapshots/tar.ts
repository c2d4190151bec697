/**
 * The streaming tar writer and the safe tar reader of snapshot archives (POSIX
 * ustar, with PAX extended headers for long or non-ASCII names and sizes of 8 GiB
 * or more).
 *
 * The writer takes its header blocks from node-tar (`tar`: its Header and Pax
 * classes, the encoders its own packer uses) and streams the rest itself: file
 * contents are read with fs.createReadStream into a Readable, with padding and the
 * end-of-archive marker, so snapshot creation keeps its backpressure and no
 * synchronous fs call is made.
 *
 * The reader is Quiver's own and meant for untrusted archives (uploaded or
 * downloaded snapshots); it accepts input in chunks of any size and makes no
 * synchronous fs call. It accepts only regular files and directories, and rejects
 * with a TarError: absolute names, `..` segments, backslashes, links, devices,
 * FIFOs and other entry types, names that would escape the destination, duplicate
 * names or a file and a directory of the same name, existing files or symlinks in
 * the destination, bad header checksums or magic, malformed numeric fields and PAX
 * records, truncated archives, and archives whose content exceeds `maxBytes` or
 * `maxEntries`. On failure what was already extracted stays in destDir: extract
 * into a fresh temporary directory and remove it when extractTar throws.
 *
 * Why the reader is not a library's parser: node-tar's Parser and tar-stream's
 * extract are more lenient than this, and neither hands over the raw header
 * block, so the missing checks cannot be added on top of them. Both pass over an
 * empty GNU long-link (`K`) header, a size field such as `0000000009z` and a
 * missing end-of-archive marker without an error; a malformed PAX record is
 * ignored (node-tar) or misread (tar-stream names the next file "x\n"); node-tar
 * accepts a header without ustar magic; an unknown entry type reaches the caller
 * without its type character.
 */

import { constants as fsConstants, createReadStream, promises as fsp } from 'fs';
import * as path from 'path';
import { Readable, Writable } from 'stream';
import { pipeline } from 'stream/promises';
import { Header, Pax } from 'tar';

export class TarError extends Error {
  /** The name of the entry the problem concerns, when there is one. */
  readonly entry: string | undefined;

  constructor(message: string, entry?: string) {
    super(entry === undefined ? `tar: ${message}` : `tar entry ${JSON.stringify(entry)}: ${message}`);
    this.name = 'TarError';
    this.entry = entry;
  }
}

export interface TarEntry {
  /** Archive name, relative, `/`-separated (a trailing `/` on directories is optional). */
  name: string;
  type: 'file' | 'directory';
  /** File contents streamed from this path (for type 'file'). */
  path?: string;
  /** With `path`: only the file's first `size` bytes are archived (a file still being appended to). */
  size?: number;
  /** File contents from memory (for type 'file'); used when `path` is absent. */
  data?: Buffer;
  /** Permission bits; defaults 0o644 for files, 0o755 for directories. */
  mode?: number;
  mtime?: Date;
}

export interface ExtractOptions {
  /** Upper bound on the total size of file contents (and of PAX/long-name metadata). */
  maxBytes?: number;
  /** Upper bound on the number of file and directory entries. */
  maxEntries?: number;
  /**
   * Called once a regular file is complete on disk (written and closed), with its
   * relative name, before the next entry is read. It must not throw; what it starts
   * is the caller's (the archive may still turn out invalid afterwards).
   */
  onFile?: (rel: string) => void;
  /**
   * Called with an input chunk once the reader holds no reference to it any more
   * (every byte of it consumed, and every write of its bytes completed): its memory
   * may then be reused for later input (see FileChunks). Chunks still held when
   * extractTar settles are not handed back.
   */
  release?: (chunk: Buffer) => void;
}

const BLOCK = 512;
/** Metadata entries (PAX headers, GNU long names) larger than this are refused. */
const MAX_META = 1024 * 1024;
/** File data is read from disk in pieces of about this size when archiving. */
const WRITE_PIECE = 64 * 1024;
/**
 * Extracted file data is written in pieces of about this size (one writev of the
 * input chunks that make it up, no copy), while the next piece is gathered.
 */
const EXTRACT_PIECE = 4 * 1024 * 1024;
/** At most this many input chunks go into one writev (input in tiny chunks flushes earlier). */
const MAX_IOVECS = 256;

// ---------------------------------------------------------------- writing

export interface HeaderFields {
  name: string;
  type: 'file' | 'directory';
  size: number;
  mode: number;
  mtime: Date;
}

/**
 * The header blocks of one entry, encoded by node-tar as its own packer does: the
 * ustar header, preceded by a PAX extended header (path, size, mtime) when a field
 * does not fit ustar (a name that is not ASCII, a size of 8 GiB or more, whose
 * ustar size field then holds the GNU base-256 form) and for every name of 100
 * bytes or more: node-tar's split of such a name into ustar prefix and name drops a
 * directory's trailing `/` and gives a single long component the prefix `.`, so the
 * PAX path carries the name as given. Exported for tests.
 */
export function encodeHeader(fields: HeaderFields): Buffer {
  const archiveName = fields.type === 'directory' ? `${fields.name}/` : fields.name;
  // No mtime before 1970: node-tar would write it negative, which the reader refuses.
  const mtime = fields.mtime.getTime() < 0 ? new Date(0) : fields.mtime;
  const header = new Header({
    path: archiveName,
    type: fields.type === 'directory' ? 'Directory' : 'File',
    size: fields.size,
    mode: fields.mode & 0o7777,
    mtime,
    uid: 0,
    gid: 0,
  });
  const block = Buffer.alloc(BLOCK);
  const needPax = header.encode(block);
  if (!needPax && Buffer.byteLength(archiveName) < 100) return block;
  const pax = new Pax({ path: archiveName, size: fields.size, mtime }).encode();
  return Buffer.concat([pax, block]);
}

function padding(size: number): number {
  return (BLOCK - (size % BLOCK)) % BLOCK;
}

function cleanWriteName(name: string): string {
  const trimmed = name.replace(/\/+$/, '');
  const segments = trimmed.split('/');
  if (
    trimmed === '' ||
    trimmed.startsWith('/') ||
    trimmed.includes('\0') ||
    trimmed.includes('\\') ||
    segments.some((s) => s === '' || s === '.' || s === '..')
  ) {
    throw new TarError('name must be a relative path without empty, "." or ".." segments', name);
  }
  return trimmed;
}

async function* tarChunks(entries: AsyncIterable<TarEntry> | Iterable<TarEntry>): AsyncGenerator<Buffer> {
  const seen = new Set<string>();
  for await (const entry of entries) {
    const name = cleanWriteName(entry.name);
    if (seen.has(name)) throw new TarError('duplicate name', entry.name);
    seen.add(name);
    const mtime = entry.mtime ?? new Date();
    if (entry.type === 'directory') {
      yield encodeHeader({ name, type: 'directory', size: 0, mode: entry.mode ?? 0o755, mtime });
      continue;
    }
    if (entry.type !== 'file') throw new TarError(`unsupported entry type ${String(entry.type)}`, entry.name);
    const mode = entry.mode ?? 0o644;
    if (entry.path === undefined) {
      const data = entry.data ?? Buffer.alloc(0);
      yield encodeHeader({ name, type: 'file', size: data.length, mode, mtime });
      if (data.length > 0) yield data;
      if (padding(data.length) > 0) yield Buffer.alloc(padding(data.length));
      continue;
    }
    const stat = await fsp.stat(entry.path);
    if (!stat.isFile()) throw new TarError(`${entry.path} is not a regular file`, entry.name);
    if (entry.size !== undefined && entry.size > stat.size) throw new TarError(`file ${entry.path} has ${stat.size} bytes, ${entry.size} are to be archived`, entry.name);
    const size = entry.size ?? stat.size;
    yield encodeHeader({ name, type: 'file', size, mode, mtime: entry.mtime ?? stat.mtime });
    let written = 0;
    if (size > 0) {
      // `end` is inclusive: read exactly the size announced in the header.
      const stream = createReadStream(entry.path, { start: 0, end: size - 1, highWaterMark: WRITE_PIECE });
      for await (const chunk of stream) {
        written += (chunk as Buffer).length;
        yield chunk as Buffer;
      }
    }
    if (written !== size) throw new TarError(`file ${entry.path} shrank while archiving (${written} of ${size} bytes)`, entry.name);
    if (padding(size) > 0) yield Buffer.alloc(padding(size));
  }
  yield Buffer.alloc(2 * BLOCK);
}

/**
 * The exact size of the archive tarStream writes for `entries` (files of `path` entries
 * as they are now: headers and padding as tarChunks writes them, end blocks included).
 */
export async function tarSize(entries: readonly TarEntry[]): Promise<number> {
  let total = 2 * BLOCK;
  for (const entry of entries) {
    const name = cleanWriteName(entry.name);
    if (entry.type === 'directory') {
      total += encodeHeader({ name, type: 'directory', size: 0, mode: entry.mode ?? 0o755, mtime: entry.mtime ?? new Date() }).length;
      continue;
    }
    const stat = entry.path === undefined ? null : await fsp.stat(entry.path);
    const size = stat === null ? (entry.data?.length ?? 0) : (entry.size ?? stat.size);
    total += encodeHeader({ name, type: 'file', size, mode: entry.mode ?? 0o644, mtime: entry.mtime ?? stat?.mtime ?? new Date() }).length + size + padding(size);
  }
  return total;
}

/** A Readable producing the tar archive of `entries`. */
export function tarStream(entries: AsyncIterable<TarEntry> | Iterable<TarEntry>): Readable {
  return Readable.from(tarChunks(entries), { objectMode: false });
}

/**
 * Writes the tar archive of `entries` to `out` with backpressure, ends `out`
 * and resolves once it has finished. On error `out` is destroyed.
 */
export async function packTar(entries: AsyncIterable<TarEntry> | Iterable<TarEntry>, out: Writable): Promise<void> {
  await pipeline(tarStream(entries), out);
}

// ---------------------------------------------------------------- reading

/**
 * A file read in chunks of `chunkSize` bytes into a few buffers used over and over, for
 * extractTar (`{ release: chunks.release }` hands them back once written): reading a
 * large archive allocates a handful of buffers instead of a fresh one per chunk. Fresh
 * ones cost twice: the kernel maps, faults in and zeroes each, and they are memory
 * outside the JS heap that is only freed by garbage collection, so V8 runs a full
 * collection after every 64 MiB or so of them (9 for a 570 MiB archive, each marking
 * the whole heap: with collections loaded that cost more CPU than the reading).
 * `onChunk` sees every chunk, in order, before it is handed on. A chunk handed back is
 * overwritten by a later read: whoever reads it must not keep it past its release.
 */
export class FileChunks {
  readonly stream: Readable;
  private readonly free: Buffer[] = [];
  private readonly owned = new WeakSet<ArrayBuffer>();

  constructor(
    file: string,
    private readonly chunkSize: number,
    onChunk?: (chunk: Buffer) => void,
  ) {
    this.stream = Readable.from(this.read(file, onChunk), { objectMode: true, highWaterMark: 1 });
  }

  /** Hands back a chunk this reader produced; its buffer serves a later read. */
  readonly release = (chunk: Buffer): void => {
    const ab = chunk.buffer as ArrayBuffer;
    if (this.owned.has(ab)) this.free.push(Buffer.from(ab, 0, this.chunkSize));
  };

  private async *read(file: string, onChunk?: (chunk: Buffer) => void): AsyncGenerator<Buffer> {
    const fh = await fsp.open(file, 'r');
    try {
      for (let position = 0; ; ) {
        let buf = this.free.pop();
        if (buf === undefined) {
          buf = Buffer.allocUnsafeSlow(this.chunkSize);
          this.owned.add(buf.buffer as ArrayBuffer);
        }
        const { bytesRead } = await fh.read(buf, 0, this.chunkSize, position);
        if (bytesRead === 0) return;
        position += bytesRead;
        const chunk = buf.subarray(0, bytesRead);
        onChunk?.(chunk);
        yield chunk;
      }
    } finally {
      await fh.close();
    }
  }
}

/** Pulls bytes from an async iterator of chunks of any size. */
class ByteSource {
  private chunks: Buffer[] = [];
  private head = 0; // offset into chunks[0]
  private available = 0;
  private ended = false;
  /** Input chunks fully consumed since the last `takeRetired` (their pieces may still be referenced). */
  private retired: Buffer[] = [];

  constructor(private readonly it: AsyncIterator<unknown>) {}

  private async pull(): Promise<boolean> {
    if (this.ended) return false;
    const r = await this.it.next();
    if (r.done) {
      this.ended = true;
      return false;
    }
    const v = r.value;
    const b = Buffer.isBuffer(v) ? v : typeof v === 'string' ? Buffer.from(v) : Buffer.from(v as Uint8Array);
    if (b.length > 0) {
      this.chunks.push(b);
      this.available += b.length;
    }
    return true;
  }

  /** Up to `max` bytes (at least 1) from the current chunk, or null at end of input. */
  async piece(max: number): Promise<Buffer | null> {
    while (this.available === 0) if (!(await this.pull())) return null;
    const first = this.chunks[0];
    const n = Math.min(max, first.length - this.head);
    const out = first.subarray(this.head, this.head + n);
    this.head += n;
    this.available -= n;
    if (this.head === first.length) {
      this.retired.push(this.chunks.shift()!);
      this.head = 0;
    }
    return out;
  }

  /** The chunks fully consumed since the last call. */
  takeRetired(): Buffer[] {
    const r = this.retired;
    this.retired = [];
    return r;
  }

  /** Exactly `n` bytes, or fewer if the input ends first. */
  async exact(n: number): Promise<Buffer> {
    const parts: Buffer[] = [];
    let got = 0;
    while (got < n) {
      const p = await this.piece(n - got);
      if (p === null) break;
      parts.push(p);
      got += p.length;
    }
    return parts.length === 1 ? parts[0] : Buffer.concat(parts, got);
  }

  /** Skips `n` bytes; returns how many were skipped. */
  async skip(n: number): Promise<number> {
    let got = 0;
    while (got < n) {
      const p = await this.piece(n - got);
      if (p === null) break;
      got += p.length;
    }
    return got;
  }

  async drain(): Promise<void> {
    this.chunks = [];
    this.available = 0;
    while (await this.pull()) {
      this.chunks = [];
      this.available = 0;
    }
  }
}

/** `bufs` without its first `skip` bytes (after a short writev). */
function remainder(bufs: Buffer[], skip: number): Buffer[] {
  const out: Buffer[] = [];
  for (const b of bufs) {
    if (skip >= b.length) {
      skip -= b.length;
      continue;
    }
    out.push(skip > 0 ? b.subarray(skip) : b);
    skip = 0;
  }
  return out;
}

function cString(block: Buffer, offset: number, length: number): string {
  const field = block.subarray(offset, offset + length);
  const nul = field.indexOf(0);
  return field.subarray(0, nul === -1 ? length : nul).toString('utf8');
}

function parseNumber(block: Buffer, offset: number, length: number, what: string, entry: string | undefined): number {
  const field = block.subarray(offset, offset + length);
  if (field[0] & 0x80) {
    // GNU base-256: big-endian, high bit of the first byte is the marker.
    if (field[0] === 0xff) throw new TarError(`negative ${what} field`, entry);
    let v = field[0] & 0x7f;
    for (let i = 1; i < length; i++) {
      v = v * 256 + field[i];
      if (v > Number.MAX_SAFE_INTEGER) throw new TarError(`${what} field too large`, entry);
    }
    return v;
  }
  const text = field.toString('latin1').replace(/[\0 ]+$/, '').replace(/^ +/, '');
  if (text === '') return 0;
  if (!/^[0-7]+$/.test(text)) throw new TarError(`malformed ${what} field ${JSON.stringify(text)}`, entry);
  return parseInt(text, 8);
}

function verifyChecksum(block: Buffer, entry: string): void {
  const stored = parseNumber(block, 148, 8, 'checksum', entry);
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const b = i >= 148 && i < 156 ? 0x20 : block[i];
    unsigned += b;
    signed += b > 127 ? b - 256 : b;
  }
  if (stored !== unsigned && stored !== signed) {
    throw new TarError(`bad header checksum (stored ${stored}, computed ${unsigned})`, entry);
  }
}

function parsePax(data: Buffer, entry: string): Map<string, string> {
  const records = new Map<string, string>();
  let pos = 0;
  while (pos < data.length) {
    const space = data.indexOf(0x20, pos);
    if (space === -1) throw new TarError('malformed PAX record', entry);
    const lenText = data.toString('latin1', pos, space);
    if (!/^[0-9]+$/.test(lenText)) throw new TarError('malformed PAX record length', entry);
    const len = parseInt(lenText, 10);
    if (len <= space - pos + 1 || pos + len > data.length || data[pos + len - 1] !== 0x0a) {
      throw new TarError('malformed PAX record', entry);
    }
    const record = data.toString('utf8', space + 1, pos + len - 1);
    const eq = record.indexOf('=');
    if (eq <= 0) throw new TarError('malformed PAX record', entry);
    records.set(record.slice(0, eq), record.slice(eq + 1));
    pos += len;
  }
  return records;
}

/** The safe relative segments of an archive name, or a TarError. */
function safeSegments(name: string): string[] {
  if (name === '') throw new TarError('empty name', name);
  if (name.includes('\0')) throw new TarError('NUL byte in name', name);
  if (name.includes('\\')) throw new TarError('backslash in name', name);
  if (name.startsWith('/') || /^[A-Za-z]:/.test(name)) throw new TarError('absolute path', name);
  const segments = name.split('/').filter((s) => s !== '' && s !== '.');
  if (segments.some((s) => s === '..')) throw new TarError('".." segment in name', name);
  return segments;
}

const TYPE_NAMES: Record<string, string> = {
  '1': 'hard link',
  '2': 'symbolic link',
  '3': 'character device',
  '4': 'block device',
  '6': 'FIFO',
  '7': 'contiguous file',
  K: 'GNU long link name',
  S: 'GNU sparse file',
  M: 'GNU multi-volume continuation',
  V: 'GNU volume label',
  D: 'GNU dump directory',
};

/**
 * Extracts the tar archive read from `input` into `destDir` (created if
 * missing) and resolves with the names of the extracted entries in archive
 * order (directories with a trailing `/`). See the module comment for what
 * is refused.
 */
export async function extractTar(input: Readable, destDir: string, opts: ExtractOptions = {}): Promise<string[]> {
  const maxBytes = opts.maxBytes ?? Number.POSITIVE_INFINITY;
  const maxEntries = opts.maxEntries ?? Number.POSITIVE_INFINITY;
  await fsp.mkdir(path.resolve(destDir), { recursive: true });
  // The destination itself may be reached through a symlink; inside it nothing is followed.
  const root = await fsp.realpath(path.resolve(destDir));
  if (!(await fsp.stat(root)).isDirectory()) throw new TarError(`destination ${root} is not a directory`);

  const it = input[Symbol.asyncIterator]();
  const src = new ByteSource(it);
  const release = opts.release;
  /**
   * Hands back chunks whose bytes are all written: `retired` were fully consumed
   * before a write was issued, so each of their pieces went into that write or an
   * earlier one; they are released once that write has completed.
   */
  const releaseAll = (retired: Buffer[]): void => {
    if (release) for (const c of retired) release(c);
  };
  const extracted: string[] = [];
  const explicit = new Set<string>(); // names of entries in the archive
  const dirs = new Set<string>(['']); // directories known to be real (not symlinks)
  let totalBytes = 0;
  let entries = 0;

  const account = (size: number, entry: string): void => {
    totalBytes += size;
    if (totalBytes > maxBytes) {
      throw new TarError(`archive content exceeds the limit of ${maxBytes} bytes`, entry);
    }
  };

  const ensureDir = async (rel: string, entry: string): Promise<void> => {
    if (dirs.has(rel)) return;
    const parent = rel.includes('/') ? rel.slice(0, rel.lastIndexOf('/')) : '';
    await ensureDir(parent, entry);
    const abs = path.join(root, rel);
    try {
      await fsp.mkdir(abs);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const st = await fsp.lstat(abs);
      if (!st.isDirectory()) throw new TarError(`${rel} exists and is not a directory`, entry);
    }
    dirs.add(rel);
  };

  const readMeta = async (size: number, entry: string): Promise<Buffer> => {
    if (size > MAX_META) throw new TarError(`metadata entry of ${size} bytes is too large`, entry);
    account(size, entry);
    const data = Buffer.from(await src.exact(size));
    if (data.length < size) throw new TarError('truncated archive (metadata cut short)', entry);
    if ((await src.skip(padding(size))) < padding(size)) throw new TarError('truncated archive (padding cut short)', entry);
    return data;
  };

  try {
    let pax: Map<string, string> | null = null;
    let longName: string | null = null;
    for (;;) {
      // A copy: the input chunk it lies in may be reused once the entry's data is written.
      const block = Buffer.from(await src.exact(BLOCK));
      if (block.length === 0) throw new TarError('truncated archive (no end-of-archive marker)');
      if (block.length < BLOCK) throw new TarError('truncated archive (header cut short)');
      if (block.every((b) => b === 0)) {
        if (pax !== null || longName !== null) throw new TarError('end-of-archive marker after an extended header');
        break;
      }
      const rawName = cString(block, 0, 100);
      const magic = block.toString('latin1', 257, 263);
      const isUstar = magic === 'ustar\0';
      if (!isUstar && block.toString('latin1', 257, 265) !== 'ustar  \0') {
        throw new TarError('not a ustar header (bad magic)', rawName);
      }
      verifyChecksum(block, rawName);
      const prefix = isUstar ? cString(block, 345, 155) : '';
      const typeflag = block[156] === 0 ? '0' : String.fromCharCode(block[156]);
      let size = parseNumber(block, 124, 12, 'size', rawName);

      if (typeflag === 'x' || typeflag === 'g') {
        const data = await readMeta(size, rawName);
        const records = parsePax(data, rawName);
        // Global headers carry defaults this reader does not apply; they are skipped.
        if (typeflag === 'x') pax = records;
        continue;
      }
      if (typeflag === 'L') {
        const data = await readMeta(size, rawName);
        const nul = data.indexOf(0);
        longName = data.subarray(0, nul === -1 ? data.length : nul).toString('utf8');
        continue;
      }

      let name = prefix !== '' ? `${prefix}/${rawName}` : rawName;
      if (longName !== null) name = longName;
      if (pax?.has('path')) name = pax.get('path')!;
      if (pax?.has('size')) {
        const s = pax.get('size')!;
        if (!/^[0-9]+$/.test(s) || !Number.isSafeInteger(Number(s))) throw new TarError(`malformed PAX size ${JSON.stringify(s)}`, name);
        size = Number(s);
      }
      pax = null;
      longName = null;

      if (typeflag !== '0' && typeflag !== '5') {
        throw new TarError(`${TYPE_NAMES[typeflag] ?? `entry type ${JSON.stringify(typeflag)}`} not allowed`, name);
      }
      const segments = safeSegments(name);
      const rel = segments.join('/');
      const abs = path.resolve(root, ...segments);
      if (rel !== '' && !abs.startsWith(root + path.sep)) throw new TarError('path escapes the destination', name);
      if (rel === '' && typeflag === '0') throw new TarError('file entry names the destination itself', name);

      entries++;
      if (entries > maxEntries) throw new TarError(`archive has more than ${maxEntries} entries`, name);

      if (typeflag === '5') {
        if (size !== 0) throw new TarError('directory entry with data', name);
        if (rel === '') continue; // "./": the destination itself
        if (explicit.has(rel)) throw new TarError('duplicate name', name);
        explicit.add(rel);
        await ensureDir(rel, name);
        extracted.push(`${rel}/`);
        continue;
      }

      if (explicit.has(rel) || dirs.has(rel)) throw new TarError('duplicate name', name);
      account(size, name);
      explicit.add(rel);
      const parent = segments.slice(0, -1).join('/');
      await ensureDir(parent, name);
      // No execute, group or other write bits from an untrusted archive.
      const mode = parseNumber(block, 100, 8, 'mode', name) & 0o644;
      let fh: fsp.FileHandle;
      try {
        fh = await fsp.open(
          abs,
          fsConstants.O_WRONLY | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW,
          mode | 0o600,
        );
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new TarError('already exists in the destination', name);
        throw err;
      }
      // One write in flight while the next piece is gathered from the input; pieces
      // are written where they belong (positional writes), each as one writev.
      let inflight: Promise<void> | null = null;
      /** Input chunks to release once `inflight` has completed. */
      let inflightRetired: Buffer[] = [];
      let position = 0;
      const writePiece = async (bufs: Buffer[], bytes: number, at: number): Promise<void> => {
        let done = 0;
        while (done < bytes) {
          const { bytesWritten } = await fh.writev(done === 0 ? bufs : remainder(bufs, done), at + done);
          if (bytesWritten === 0) throw new Error(`short write to ${abs}`);
          done += bytesWritten;
        }
      };
      try {
        let remaining = size;
        let pending: Buffer[] = [];
        let pendingBytes = 0;
        while (remaining > 0) {
          const p = await src.piece(Math.min(remaining, EXTRACT_PIECE));
          if (p === null) throw new TarError(`truncated archive (${size - remaining} of ${size} bytes of data)`, name);
          remaining -= p.length;
          pending.push(p);
          pendingBytes += p.length;
          if (pendingBytes >= EXTRACT_PIECE || pending.length >= MAX_IOVECS || remaining === 0) {
            if (inflight !== null) {
              await inflight;
              releaseAll(inflightRetired);
            }
            inflightRetired = src.takeRetired();
            inflight = writePiece(pending, pendingBytes, position);
            // Until it is awaited, a failure is kept for that await (not unhandled).
            inflight.catch(() => undefined);
            position += pendingBytes;
            pending = [];
            pendingBytes = 0;
          }
        }
        if (inflight !== null) await inflight;
        inflight = null;
        releaseAll(inflightRetired);
        inflightRetired = [];
        const mtime = parseNumber(block, 136, 12, 'mtime', name);
        await fh.utimes(mtime, mtime);
      } finally {
        if (inflight !== null) await inflight.catch(() => undefined);
        await fh.close();
      }
      opts.onFile?.(rel);
      if ((await src.skip(padding(size))) < padding(size)) throw new TarError('truncated archive (padding cut short)', name);
      extracted.push(rel);
    }
    // Whatever follows the end-of-archive marker (the rest of the record) is ignored.
    await src.drain();
    return extracted;
  } catch (err) {
    await it.return?.();
    input.destroy();
    throw err;
  }
}
