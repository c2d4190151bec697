/**
 * The files of a payload index created with `on_disk: true` (field-index.ts keeps the
 * index; this file reads and writes its files).
 *
 * Owns: the base file (`fidx-<n>.base`: every point's indexed values, postings per
 * value or the sorted keys, as of one moment, never changed once written) and the
 * delta file (`fidx-<n>.delta`: what changed since the base, and the small sets every
 * index keeps in memory), their formats and reads. Must never: change or truncate a base
 * file once written (readers hold it open; a new one always gets a new name).
 *
 * Reads are synchronous positional reads (`fs.readSync`) of bounded pieces: a point's
 * values (two reads of a few bytes, through a small cache of 16 KiB blocks), a block of
 * 256 sorted keys for a binary search, and scans (postings of a value, a key range, the
 * forward table) in pieces of at most 64 KiB. This is what payload-disk.ts does for a
 * filter on an unindexed field (one payload per read): the filter predicate and the plan
 * of payload-index.ts are synchronous, and each piece costs microseconds from the page
 * cache. In memory: the header, the dictionary of distinct values (keyword, uuid, bool:
 * value -> where its posting lies; text: tokens; geo: grid cells) and/or every 256th
 * sorted key (integer, float, datetime; geo: latitudes), and the cache (at most 64 blocks).
 *
 * Kinds: `str` (keyword, uuid), `bool`, `num` (integer, float, datetime), `text` (values:
 * the point's tokens, postings by token, plus the point's text), `geo` (values: lat, lon
 * pairs as f64; sorted keys: one latitude per pair; postings by grid cell, the keys given
 * by field-index.ts: cells >= 0, -1 for points beyond the grid, -2 for a latitude past ±90°).
 *
 * Base file (little endian; typed arrays are written in the machine's order, which is
 * little endian on every platform Node supports): header of 96 bytes
 *   "QPIX", u16 version (1), u8 kind (0 strings, 1 booleans, 2 numbers, 3 text, 4 geo),
 *   u8 offset width (4 or 8), then f64 fields: offsets in the forward table (largest
 *   offset + 1), values, records (points with a value; text: with a text), distinct
 *   values (dictionary entries), and the byte positions of the forward table, the values,
 *   the postings (strings, booleans, text, geo), the sorted keys and their offsets
 *   (numbers, geo), the dictionary, and the texts (text) or the sorted keys' longitudes
 *   (geo; 0 for the other kinds);
 * forward table: u32 per offset 0..n (n + 1 entries), where the point's values start in
 * the values array (its values: [start[o], start[o + 1]));
 * values: per point in offset order, u32 dictionary ids (strings, booleans, text) or f64
 * (numbers; geo: lat, lon per value);
 * sorted (numbers, geo): f64 keys ascending (ties by offset), then their offsets, then
 * (geo) the f64 longitude of each latitude key;
 * postings (strings, booleans, text, geo): offsets grouped by dictionary id, each group
 * ascending;
 * texts (text): f64 byte start per offset 0..n (n + 1 entries; an offset without a
 * record has an empty text), then the UTF-8 texts one after the other;
 * dictionary: per id, u32 posting start, u32 count, then (strings, text) u32 byte length
 * and the UTF-8 bytes, (booleans) one byte, or (geo) the f64 cell key;
 * then u32 CRC32C of everything before it (checked when the file is opened).
 *
 * Delta file: the JSON text of `DeltaState`, then u32 CRC32C of it.
 */

import * as fs from 'node:fs';
import * as fsp from 'node:fs/promises';
import * as path from 'node:path';

import { CRC32C_INIT, crc32cFinish, crc32cUpdate } from '../common/crc32c';
import { writeFileAtomic } from '../common/files';
import type { Bounds, Off } from './sorted-keys';

export const FIELD_INDEX_FILE_RE = /^fidx-[0-9]{1,15}\.(base|delta)$/;

export type BaseKind = 'str' | 'bool' | 'num' | 'text' | 'geo';
export type BaseValue = string | boolean | number;

/** What an on-disk index keeps beside its base file, written at each checkpoint. */
export interface DeltaState {
  /** The field schema (fieldSchemaToJson) the files were built for. */
  schema: unknown;
  counted: number;
  entries: number;
  /** Offsets whose base record is outdated. */
  masked: number[];
  /** Current values of changed points (those with any), as the base stores them, and (text) the point's text. */
  records: Array<[number, BaseValue[]] | [number, BaseValue[], string]>;
  nulls: number[];
  other: number[];
  extra: number[] | null;
  /** Text indexes: the tokenizer's fingerprint the tokens were made under (text-index.ts TOKENIZER_PIPELINE_VERSION). */
  tokenizer?: string;
}

export class IndexFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'IndexFileError';
  }
}

const MAGIC = Buffer.from('QPIX', 'latin1');
const HEADER = 96;
const BLOCK = 16384;
const MAX_BLOCKS = 64;
const PIECE = 65536;
/** One sorted key in this many is kept in memory. */
const SAMPLE = 256;
const KINDS: BaseKind[] = ['str', 'bool', 'num', 'text', 'geo'];

/** A growable typed array. */
class Grow<T extends Float64Array | Uint32Array> {
  n = 0;
  constructor(
    public a: T,
    private readonly make: (n: number) => T,
  ) {}
  push(x: number): void {
    if (this.n === this.a.length) {
      const b = this.make(Math.max(16, this.a.length * 2));
      b.set(this.a);
      this.a = b;
    }
    this.a[this.n++] = x;
  }
  get view(): T {
    return this.a.subarray(0, this.n) as T;
  }
}

const f64 = () => new Grow(new Float64Array(1024), (n) => new Float64Array(n));
const u32 = () => new Grow(new Uint32Array(1024), (n) => new Uint32Array(n));

function bytes(a: Float64Array | Uint32Array | Uint8Array): Buffer {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength);
}

/** Kinds whose values are dictionary ids (strings, booleans, text tokens) rather than f64. */
function idValued(kind: BaseKind): boolean {
  return kind === 'str' || kind === 'bool' || kind === 'text';
}

/** Kinds with postings and a dictionary. */
function posted(kind: BaseKind): boolean {
  return kind !== 'num';
}

/** Kinds with sorted keys. */
function keyed(kind: BaseKind): boolean {
  return kind === 'num' || kind === 'geo';
}

/**
 * Writes a base file. `eachRecord`: calls its argument with every point having values,
 * in ascending offset order (`aux`: the point's text, kind text only). `sorted` (num,
 * geo): every (key, offset) pair, ascending by key then offset. `keysOf` (geo): the
 * posting keys of a record's values (other kinds: the values themselves).
 */
export async function writeBase(
  file: string,
  kind: BaseKind,
  eachRecord: (fn: (off: Off, vals: readonly BaseValue[], aux?: string) => void) => void,
  sorted: Iterable<readonly [number, Off] | readonly [number, Off, number]> | null,
  keysOf: ((vals: readonly BaseValue[]) => readonly BaseValue[]) | null = null,
): Promise<void> {
  const offs = f64();
  const starts = u32();
  const ids = u32();
  const nums = f64();
  // posting keys per record (as dictionary ids), when they are not the values
  const pks = u32();
  const pkStarts = u32();
  const auxParts: Buffer[] = [];
  const auxEnds = f64();
  let auxBytes = 0;
  const dict = new Map<BaseValue, number>();
  const dictKeys: BaseValue[] = [];
  const idOf = (v: BaseValue): number => {
    let id = dict.get(v);
    if (id === undefined) {
      id = dictKeys.length;
      dict.set(v, id);
      dictKeys.push(v);
    }
    return id;
  };
  let nVals = 0;
  eachRecord((off, vals, aux) => {
    offs.push(off);
    starts.push(nVals);
    for (const v of vals) {
      if (idValued(kind)) ids.push(idOf(v));
      else nums.push(v as number);
      nVals++;
    }
    if (keysOf !== null) {
      pkStarts.push(pks.n);
      for (const k of keysOf(vals)) pks.push(idOf(k));
    }
    if (kind === 'text') {
      const b = Buffer.from(aux ?? '', 'utf8');
      auxParts.push(b);
      auxBytes += b.length;
      auxEnds.push(auxBytes);
    }
  });
  const nRec = offs.n;
  const maxOff = nRec === 0 ? -1 : offs.a[nRec - 1];
  const nOffs = maxOff + 1;
  const offW = maxOff < 2 ** 32 ? 4 : 8;
  // forward table over 0..nOffs
  const fwd = new Uint32Array(nOffs + 1);
  // text: byte start of each offset's text in the text section (f64, nOffs + 1 entries)
  const auxFwd = kind === 'text' ? new Float64Array(nOffs + 1) : null;
  {
    let r = 0;
    for (let o = 0; o <= nOffs; o++) {
      while (r < nRec && offs.a[r] < o) r++;
      // values of the records before offset o (an offset without a record gets a count of 0)
      fwd[o] = r < nRec ? starts.a[r] : nVals;
      if (auxFwd !== null) auxFwd[o] = r === 0 ? 0 : auxEnds.a[r - 1];
    }
  }
  const offArray = (n: number) => (offW === 4 ? new Uint32Array(n) : new Float64Array(n));
  const pieces: Buffer[] = [];
  const header = Buffer.alloc(HEADER);
  MAGIC.copy(header, 0);
  header.writeUInt16LE(1, 4);
  header.writeUInt8(KINDS.indexOf(kind), 6);
  header.writeUInt8(offW, 7);
  let pos = HEADER;
  const fwdPos = pos;
  pos += fwd.byteLength;
  const valsPos = pos;
  const valsBuf = idValued(kind) ? bytes(ids.view) : bytes(nums.view);
  pos += valsBuf.length;
  let postPos = 0;
  let keysPos = 0;
  let idsPos = 0;
  let auxPos = 0;
  const sections: Buffer[] = [];
  if (keyed(kind)) {
    const nKeys = kind === 'geo' ? nVals / 2 : nVals;
    const keys = new Float64Array(nKeys);
    const sOff = offArray(nKeys);
    // geo: each latitude's longitude, in the same order (a band is tested without reading the values)
    const lons = kind === 'geo' ? new Float64Array(nKeys) : null;
    let n = 0;
    for (const pair of sorted ?? []) {
      if (n >= nKeys) throw new Error('index base: more sorted keys than values');
      keys[n] = pair[0];
      sOff[n] = pair[1];
      if (lons !== null) {
        if (pair.length < 3) throw new Error('index base: a geo latitude without its longitude');
        lons[n] = pair[2]!;
      }
      n++;
    }
    if (n !== nKeys) throw new Error(`index base: ${n} sorted keys for ${nKeys} values`);
    keysPos = pos;
    sections.push(bytes(keys));
    pos += keys.byteLength;
    idsPos = pos;
    sections.push(bytes(sOff));
    pos += sOff.byteLength;
    if (lons !== null) {
      auxPos = pos;
      sections.push(bytes(lons));
      pos += lons.byteLength;
    }
  }
  let dictBuf = Buffer.alloc(0);
  if (posted(kind)) {
    // the posting keys of record r: ids[starts[r]..] (values) or pks[pkStarts[r]..] (keysOf)
    const pk = keysOf !== null ? pks.view : ids.view;
    const pkStart = keysOf !== null ? pkStarts.a : starts.a;
    const pkEnd = (r: number) => (r + 1 < nRec ? pkStart[r + 1] : pk.length);
    const count = new Uint32Array(dictKeys.length);
    for (let i = 0; i < pk.length; i++) count[pk[i]]++;
    const at = new Uint32Array(dictKeys.length);
    for (let k = 1; k < dictKeys.length; k++) at[k] = at[k - 1] + count[k - 1];
    const postStart = at.slice();
    const post = offArray(pk.length);
    for (let r = 0; r < nRec; r++) {
      for (let i = pkStart[r]; i < pkEnd(r); i++) post[at[pk[i]]++] = offs.a[r];
    }
    postPos = pos;
    sections.push(bytes(post));
    pos += post.byteLength;
    const parts: Buffer[] = [];
    for (let k = 0; k < dictKeys.length; k++) {
      const head = Buffer.alloc(8);
      head.writeUInt32LE(postStart[k], 0);
      head.writeUInt32LE(count[k], 4);
      parts.push(head);
      if (kind === 'bool') parts.push(Buffer.from([dictKeys[k] === true ? 1 : 0]));
      else if (kind === 'geo') {
        const f = Buffer.alloc(8);
        f.writeDoubleLE(dictKeys[k] as number, 0);
        parts.push(f);
      } else {
        const s = Buffer.from(dictKeys[k] as string, 'utf8');
        const l = Buffer.alloc(4);
        l.writeUInt32LE(s.length, 0);
        parts.push(l, s);
      }
    }
    dictBuf = Buffer.concat(parts);
  }
  if (auxFwd !== null) {
    auxPos = pos;
    sections.push(bytes(auxFwd), Buffer.concat(auxParts, auxBytes));
    pos += auxFwd.byteLength + auxBytes;
  }
  const dictPos = pos;
  const fields = [nOffs, nVals, nRec, dictKeys.length, fwdPos, valsPos, postPos, keysPos, idsPos, dictPos, auxPos];
  fields.forEach((x, i) => header.writeDoubleLE(x, 8 + 8 * i));
  pieces.push(header, bytes(fwd), valsBuf, ...sections, dictBuf);
  let crc = CRC32C_INIT;
  for (const p of pieces) crc = crc32cUpdate(crc, p);
  const tail = Buffer.alloc(4);
  tail.writeUInt32LE(crc32cFinish(crc), 0);
  pieces.push(tail);
  await writeFileAtomic(file, pieces);
}

/** A base file opened for reading (see the header comment). */
export class IndexBase {
  readonly kind: BaseKind;
  /** Points with at least one value. */
  readonly records: number;
  readonly values: number;
  /** Sorted keys (num: one per value; geo: one per point value, its latitude). */
  private readonly nSorted: number;
  private readonly offW: number;
  private readonly nOffs: number;
  private readonly fwdPos: number;
  private readonly valsPos: number;
  private readonly postPos: number;
  private readonly keysPos: number;
  private readonly idsPos: number;
  /** Text: where the texts' starts lie (the texts follow them); geo: the sorted keys' longitudes. */
  private readonly auxPos: number;
  /** Strings, booleans, text tokens, geo cells: key -> [posting start, count]. */
  private readonly dict = new Map<BaseValue, [number, number]>();
  private readonly byId: BaseValue[] = [];
  /** Numbers: every SAMPLE-th sorted key. */
  private sample: ReturnType<typeof Float64Array.from> = new Float64Array(0);
  private readonly cache = new Map<number, Buffer>();
  /** The block read or found last (most point lookups hit it again: candidates come in offset order). */
  private lastKey = -1;
  private lastBlock: Buffer | null = null;
  private readonly piece = Buffer.allocUnsafe(PIECE);
  private closed = false;

  private constructor(
    readonly file: string,
    private readonly fd: number,
    header: Buffer,
  ) {
    if (!header.subarray(0, 4).equals(MAGIC) || header.readUInt16LE(4) !== 1) throw new IndexFileError(`${file}: not a payload index base file`);
    const kind = KINDS[header.readUInt8(6)];
    if (kind === undefined) throw new IndexFileError(`${file}: unknown kind ${header.readUInt8(6)}`);
    this.kind = kind;
    this.offW = header.readUInt8(7);
    const f = (i: number) => header.readDoubleLE(8 + 8 * i);
    this.nOffs = f(0);
    this.values = f(1);
    this.records = f(2);
    this.fwdPos = f(4);
    this.valsPos = f(5);
    this.postPos = f(6);
    this.keysPos = f(7);
    this.idsPos = f(8);
    this.auxPos = f(10);
    this.nSorted = kind === 'geo' ? this.values / 2 : kind === 'num' ? this.values : 0;
  }

  /** Opens `dir/file`, checking its CRC (read in pieces, off the event loop). */
  static async open(dir: string, file: string): Promise<IndexBase> {
    const full = path.join(dir, file);
    const fh = await fsp.open(full, 'r');
    let fd: number | null = null;
    try {
      const size = (await fh.stat()).size;
      if (size < HEADER + 4) throw new IndexFileError(`${full}: ${size} bytes is too short for a payload index base file`);
      const buf = Buffer.allocUnsafe(1 << 20);
      let crc = CRC32C_INIT;
      const header = Buffer.alloc(HEADER);
      // every SAMPLE-th sorted key (numbers) is taken while the file is read for its checksum
      let sample: ReturnType<typeof Float64Array.from> | null = null;
      let keysPos = 0;
      const straddling: number[] = [];
      let next = 0;
      for (let at = 0; at < size - 4; ) {
        const want = Math.min(buf.length, size - 4 - at);
        const { bytesRead } = await fh.read(buf, 0, want, at);
        if (bytesRead === 0) throw new IndexFileError(`${full}: ended early`);
        if (at === 0) {
          if (bytesRead < HEADER) throw new IndexFileError(`${full}: short header read`);
          buf.copy(header, 0, 0, HEADER);
          const k = KINDS[header.readUInt8(6)];
          if (k === 'num' || k === 'geo') {
            sample = new Float64Array(Math.ceil(header.readDoubleLE(8 + 8) / (k === 'geo' ? 2 : 1) / SAMPLE));
            keysPos = header.readDoubleLE(8 + 8 * 7);
          }
        }
        if (sample !== null) {
          for (; next < sample.length; next++) {
            const p = keysPos + next * SAMPLE * 8;
            if (p >= at + bytesRead) break;
            if (p + 8 <= at + bytesRead) sample[next] = buf.readDoubleLE(p - at);
            else straddling.push(next);
          }
        }
        crc = crc32cUpdate(crc, buf, 0, bytesRead);
        at += bytesRead;
      }
      const tail = Buffer.alloc(4);
      await fh.read(tail, 0, 4, size - 4);
      if (tail.readUInt32LE(0) !== crc32cFinish(crc)) throw new IndexFileError(`${full}: checksum mismatch`);
      const dictPos = header.readDoubleLE(8 + 8 * 9);
      const nKeys = header.readDoubleLE(8 + 8 * 3);
      const dictBuf = Buffer.allocUnsafe(size - 4 - dictPos);
      await fh.read(dictBuf, 0, dictBuf.length, dictPos);
      fd = fs.openSync(full, 'r');
      const base = new IndexBase(file, fd, header);
      let p = 0;
      for (let k = 0; k < nKeys; k++) {
        const start = dictBuf.readUInt32LE(p);
        const count = dictBuf.readUInt32LE(p + 4);
        p += 8;
        let v: BaseValue;
        if (base.kind === 'bool') {
          v = dictBuf[p] === 1;
          p += 1;
        } else if (base.kind === 'geo') {
          v = dictBuf.readDoubleLE(p);
          p += 8;
        } else {
          const l = dictBuf.readUInt32LE(p);
          v = dictBuf.toString('utf8', p + 4, p + 4 + l);
          p += 4 + l;
        }
        base.dict.set(v, [start, count]);
        base.byId.push(v);
      }
      if (sample !== null) {
        if (next < sample.length) throw new IndexFileError(`${full}: the sorted keys run past the end of the file`);
        const kb = Buffer.allocUnsafe(8);
        for (const i of straddling) {
          await fh.read(kb, 0, 8, keysPos + i * SAMPLE * 8);
          sample[i] = kb.readDoubleLE(0);
        }
        base.sample = sample;
      }
      return base;
    } catch (err) {
      if (fd !== null) fs.closeSync(fd);
      throw err;
    } finally {
      await fh.close();
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.cache.clear();
    this.lastKey = -1;
    this.lastBlock = null;
    fs.closeSync(this.fd);
  }

  private live(): void {
    if (this.closed) throw new IndexFileError(`${this.file}: the payload index file was replaced while it was being read; retry`);
  }

  /** `len` bytes at `pos` through the block cache (small reads). */
  private small(pos: number, len: number): Buffer {
    this.live();
    const first = Math.floor(pos / BLOCK);
    const last = Math.floor((pos + len - 1) / BLOCK);
    if (first === last) {
      const b = this.block(first);
      return b.subarray(pos - first * BLOCK, pos - first * BLOCK + len);
    }
    const out = Buffer.allocUnsafe(len);
    let got = 0;
    for (let k = first; k <= last; k++) {
      const b = this.block(k);
      const from = k === first ? pos - first * BLOCK : 0;
      const n = Math.min(b.length - from, len - got);
      b.copy(out, got, from, from + n);
      got += n;
    }
    return out;
  }

  /**
   * Block `k` (its bytes up to the end of the file), from the cache or read into the
   * buffer of the least recently used block: the view is valid until the next block read.
   */
  private block(k: number): Buffer {
    if (k === this.lastKey) return this.lastBlock!;
    const hit = this.cache.get(k);
    if (hit !== undefined) {
      this.cache.delete(k);
      this.cache.set(k, hit);
      this.lastKey = k;
      this.lastBlock = hit;
      return hit;
    }
    let buf: Buffer;
    if (this.cache.size >= MAX_BLOCKS) {
      const [oldest, old] = this.cache.entries().next().value as [number, Buffer];
      this.cache.delete(oldest);
      buf = Buffer.from(old.buffer, old.byteOffset, BLOCK);
    } else {
      // one allocation per block for the life of the file: no garbage per read
      buf = Buffer.alloc(BLOCK);
    }
    const n = readFull(this.fd, buf, 0, BLOCK, k * BLOCK);
    const b = buf.subarray(0, n);
    this.cache.set(k, b);
    this.lastKey = k;
    this.lastBlock = b;
    return b;
  }

  /** The u32 (or f64) at `pos`, through the block cache without a view when it lies in one block. */
  private u32At(pos: number): number {
    const k = Math.floor(pos / BLOCK);
    const at = pos - k * BLOCK;
    if (at + 4 <= BLOCK) return this.block(k).readUInt32LE(at);
    return this.small(pos, 4).readUInt32LE(0);
  }

  private f64At(pos: number): number {
    const k = Math.floor(pos / BLOCK);
    const at = pos - k * BLOCK;
    if (at + 8 <= BLOCK) return this.block(k).readDoubleLE(at);
    return this.small(pos, 8).readDoubleLE(0);
  }

  /**
   * Calls `fn` with pieces of `count` elements of `width` bytes from `pos`: (buffer,
   * index of its first element). The buffer is reused: valid during the call only.
   */
  private scan(pos: number, width: number, from: number, to: number, fn: (buf: Buffer, first: number, n: number) => void): void {
    const per = Math.floor(PIECE / width);
    for (let i = from; i < to; i += per) {
      this.live();
      const n = Math.min(per, to - i);
      const got = readFull(this.fd, this.piece, 0, n * width, pos + i * width);
      if (got < n * width) throw new IndexFileError(`${this.file}: ended early`);
      fn(this.piece, i, n);
    }
  }

  private off(buf: Buffer, i: number): Off {
    return this.offW === 4 ? buf.readUInt32LE(i * 4) : buf.readDoubleLE(i * 8);
  }

  private value(buf: Buffer, i: number): BaseValue {
    return idValued(this.kind) ? this.byId[buf.readUInt32LE(i * 4)] : buf.readDoubleLE(i * 8);
  }

  private get valW(): number {
    return idValued(this.kind) ? 4 : 8;
  }

  /** The point's values, or undefined when it has none here. */
  valuesOf(off: Off): BaseValue[] | undefined {
    if (off >= this.nOffs) return undefined;
    this.live();
    const s = this.u32At(this.fwdPos + off * 4);
    const n = this.u32At(this.fwdPos + off * 4 + 4) - s;
    // a text record may have no tokens (its text is what makes it a record)
    if (n === 0) return this.kind === 'text' && this.f64At(this.auxPos + off * 8 + 8) > this.f64At(this.auxPos + off * 8) ? [] : undefined;
    const out: BaseValue[] = [];
    if (!idValued(this.kind)) for (let i = 0; i < n; i++) out.push(this.f64At(this.valsPos + (s + i) * 8));
    else for (let i = 0; i < n; i++) out.push(this.byId[this.u32At(this.valsPos + (s + i) * 4)]);
    return out;
  }

  /** Text: the point's text (written with its record), or undefined when it has no record. */
  auxOf(off: Off): string | undefined {
    if (this.kind !== 'text' || off >= this.nOffs) return undefined;
    this.live();
    const a = this.f64At(this.auxPos + off * 8);
    const b = this.f64At(this.auxPos + off * 8 + 8);
    if (b === a) return undefined;
    const base = this.auxPos + (this.nOffs + 1) * 8;
    if (b - a <= PIECE) return this.small(base + a, b - a).toString('utf8');
    const buf = Buffer.allocUnsafe(b - a);
    if (readFull(this.fd, buf, 0, b - a, base + a) < b - a) throw new IndexFileError(`${this.file}: ended early`);
    return buf.toString('utf8');
  }

  /** Every record not in `skip`, in offset order (`withAux`, text: with its text). */
  forEachRecord(skip: ReadonlySet<Off>, fn: (off: Off, vals: BaseValue[], aux?: string) => void, withAux = false): void {
    const w = this.valW;
    const per = Math.floor(PIECE / 4) - 1;
    const starts = new Uint32Array(per + 1);
    for (let a = 0; a < this.nOffs; a += per) {
      const b = Math.min(this.nOffs, a + per);
      this.live();
      const sb = Buffer.allocUnsafe((b - a + 1) * 4);
      if (readFull(this.fd, sb, 0, sb.length, this.fwdPos + a * 4) < sb.length) throw new IndexFileError(`${this.file}: ended early`);
      for (let i = 0; i <= b - a; i++) starts[i] = sb.readUInt32LE(i * 4);
      const v0 = starts[0];
      const v1 = starts[b - a];
      let ab: Buffer | null = null;
      let ax: Float64Array | null = null;
      if (this.kind === 'text') {
        // the texts of offsets a..b: their starts (a record is an offset with a text), then their bytes
        const fb = Buffer.allocUnsafe((b - a + 1) * 8);
        if (readFull(this.fd, fb, 0, fb.length, this.auxPos + a * 8) < fb.length) throw new IndexFileError(`${this.file}: ended early`);
        ax = new Float64Array(b - a + 1);
        for (let i = 0; i <= b - a; i++) ax[i] = fb.readDoubleLE(i * 8);
        if (ax[b - a] === ax[0]) continue;
        if (withAux) {
          ab = Buffer.allocUnsafe(ax[b - a] - ax[0]);
          const at = this.auxPos + (this.nOffs + 1) * 8 + ax[0];
          if (readFull(this.fd, ab, 0, ab.length, at) < ab.length) throw new IndexFileError(`${this.file}: ended early`);
        }
      } else if (v1 === v0) continue;
      const vb = Buffer.allocUnsafe((v1 - v0) * w);
      if (readFull(this.fd, vb, 0, vb.length, this.valsPos + v0 * w) < vb.length) throw new IndexFileError(`${this.file}: ended early`);
      for (let i = 0; i < b - a; i++) {
        const s = starts[i];
        const e = starts[i + 1];
        if ((ax === null ? e === s : ax[i + 1] === ax[i]) || skip.has(a + i)) continue;
        const vals: BaseValue[] = [];
        for (let j = s; j < e; j++) vals.push(this.value(vb, j - v0));
        fn(a + i, vals, ab === null ? undefined : ab.toString('utf8', ax![i] - ax![0], ax![i + 1] - ax![0]));
      }
    }
  }

  // -- strings, booleans, text tokens, geo cells ---------------------------------------------

  /** Distinct posting keys. */
  keys(): IterableIterator<BaseValue> {
    return this.dict.keys();
  }

  postingCount(key: BaseValue): number {
    return this.dict.get(key)?.[1] ?? 0;
  }

  /** Adds the offsets having `key` (those not in `skip`) to `out`. */
  postingInto(key: BaseValue, skip: ReadonlySet<Off>, out: Set<Off>): void {
    const e = this.dict.get(key);
    if (e === undefined) return;
    const checkSkip = skip.size > 0;
    this.scan(this.postPos, this.offW, e[0], e[0] + e[1], (buf, _first, n) => {
      for (let i = 0; i < n; i++) {
        const o = this.off(buf, i);
        if (!checkSkip || !skip.has(o)) out.add(o);
      }
    });
  }

  /** Whether `off` is in the posting of `key` (a binary search: postings are ascending). */
  postingHas(key: BaseValue, off: Off): boolean {
    const e = this.dict.get(key);
    if (e === undefined) return false;
    let lo = e[0];
    let hi = e[0] + e[1];
    const w = this.offW;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const pos = this.postPos + mid * w;
      const o = w === 4 ? this.u32At(pos) : this.f64At(pos);
      if (o === off) return true;
      if (o < off) lo = mid + 1;
      else hi = mid;
    }
    return false;
  }

  // -- numbers, geo latitudes -----------------------------------------------------------------

  private key(i: number): number {
    return this.small(this.keysPos + i * 8, 8).readDoubleLE(0);
  }

  /** The first index whose key is not `before` (keys are ascending, `before` is monotone). */
  private boundary(before: (k: number) => boolean): number {
    const s = this.sample;
    let lo = 0;
    let hi = s.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (before(s[mid])) lo = mid + 1;
      else hi = mid;
    }
    // sample[lo - 1] is before (or lo = 0), sample[lo] is not: the boundary is in block lo - 1
    if (lo === 0) return 0;
    const from = (lo - 1) * SAMPLE + 1;
    const to = Math.min(lo * SAMPLE, this.nSorted);
    if (to <= from) return to;
    const kb = this.small(this.keysPos + from * 8, (to - from) * 8);
    for (let i = 0; i < to - from; i++) if (!before(kb.readDoubleLE(i * 8))) return from + i;
    return to;
  }

  private lower(x: number, incl: boolean): number {
    return this.boundary((k) => k < x || (!incl && k === x));
  }

  private upper(x: number, incl: boolean): number {
    return this.boundary((k) => k < x || (incl && k === x));
  }

  estimate(b: Bounds): number {
    return Math.max(0, this.upper(b.hi, b.hiIncl) - this.lower(b.lo, b.loIncl));
  }

  /**
   * Adds to `out` the offsets (not in `skip`) with a key in the bounds that passes `test`
   * (geo: with the key's longitude as the second argument; other kinds: NaN).
   */
  collect(b: Bounds, test: (k: number, lon: number) => boolean, skip: ReadonlySet<Off>, out: Set<Off>): void {
    const i = this.lower(b.lo, b.loIncl);
    const j = this.upper(b.hi, b.hiIncl);
    if (j <= i) return;
    const checkSkip = skip.size > 0;
    const per = Math.floor(PIECE / 8);
    const kb = Buffer.allocUnsafe(per * 8);
    const lb = this.kind === 'geo' ? Buffer.allocUnsafe(per * 8) : null;
    for (let a = i; a < j; a += per) {
      const n = Math.min(per, j - a);
      this.live();
      if (readFull(this.fd, kb, 0, n * 8, this.keysPos + a * 8) < n * 8) throw new IndexFileError(`${this.file}: ended early`);
      if (lb !== null && readFull(this.fd, lb, 0, n * 8, this.auxPos + a * 8) < n * 8) throw new IndexFileError(`${this.file}: ended early`);
      this.scan(this.idsPos, this.offW, a, a + n, (ib, _first, m) => {
        for (let t = 0; t < m; t++) {
          const o = this.off(ib, t);
          if (checkSkip && skip.has(o)) continue;
          if (test(kb.readDoubleLE(t * 8), lb === null ? NaN : lb.readDoubleLE(t * 8))) out.add(o);
        }
      });
    }
  }

  /** (key, offset) pairs ascending (or descending), from `start` on, skipping `skip`. */
  *iterate(desc: boolean, start: number | null, skip: ReadonlySet<Off>): Generator<[number, Off]> {
    const per = Math.floor(PIECE / 8);
    const kb = Buffer.allocUnsafe(per * 8);
    const ib = Buffer.allocUnsafe(per * this.offW);
    const read = (a: number, n: number) => {
      this.live();
      if (readFull(this.fd, kb, 0, n * 8, this.keysPos + a * 8) < n * 8) throw new IndexFileError(`${this.file}: ended early`);
      if (readFull(this.fd, ib, 0, n * this.offW, this.idsPos + a * this.offW) < n * this.offW) throw new IndexFileError(`${this.file}: ended early`);
    };
    if (!desc) {
      for (let a = start === null ? 0 : this.lower(start, true); a < this.nSorted; a += per) {
        const n = Math.min(per, this.nSorted - a);
        read(a, n);
        for (let t = 0; t < n; t++) {
          const o = this.off(ib, t);
          if (!skip.has(o)) yield [kb.readDoubleLE(t * 8), o];
        }
      }
    } else {
      for (let e = start === null ? this.nSorted : this.upper(start, true); e > 0; e -= per) {
        const a = Math.max(0, e - per);
        const n = e - a;
        read(a, n);
        for (let t = n - 1; t >= 0; t--) {
          const o = this.off(ib, t);
          if (!skip.has(o)) yield [kb.readDoubleLE(t * 8), o];
        }
      }
    }
  }

  /** Every (key, offset) pair ascending, not in `skip` (for writing the next base). */
  sortedPairs(skip: ReadonlySet<Off>): Generator<[number, Off]> {
    return this.iterate(false, null, skip);
  }
}

function readFull(fd: number, buf: Buffer, at: number, len: number, pos: number): number {
  let got = 0;
  while (got < len) {
    const n = fs.readSync(fd, buf, at + got, len - got, pos + got);
    if (n === 0) break;
    got += n;
  }
  return got;
}

export async function writeDelta(file: string, state: DeltaState): Promise<void> {
  const text = Buffer.from(JSON.stringify(state), 'utf8');
  const tail = Buffer.alloc(4);
  tail.writeUInt32LE(crc32cFinish(crc32cUpdate(CRC32C_INIT, text)), 0);
  await writeFileAtomic(file, [text, tail]);
}

export async function readDelta(file: string): Promise<DeltaState> {
  const raw = await fsp.readFile(file);
  if (raw.length < 4) throw new IndexFileError(`${file}: too short for a payload index delta file`);
  const text = raw.subarray(0, raw.length - 4);
  if (raw.readUInt32LE(raw.length - 4) !== crc32cFinish(crc32cUpdate(CRC32C_INIT, text))) throw new IndexFileError(`${file}: checksum mismatch`);
  return JSON.parse(text.toString('utf8')) as DeltaState;
}
