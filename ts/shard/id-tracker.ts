/**
 * Point id tracker of one shard (docs/storage.md, "Point ids and labels").
 *
 * The engine only knows u64 labels. The tracker maps each external point id to an
 * internal offset (a u64 taken from a per-shard counter that starts at 0 and is never
 * reused, not even after a delete) and keeps, per point, the version: the WAL sequence
 * number of the operation that last wrote it.
 *
 * Point ids
 *   - unsigned 64-bit integers: a JS number that is a non-negative safe integer, or a
 *     bigint in [0, 2^64 - 1];
 *   - UUIDs: a string, hyphenated (8-4-4-4-12) or 32 hex digits, any case. The
 *     canonical form is lowercase hyphenated.
 *   Decimal strings ("123") are NOT integer ids: as in the reference API, a string id
 *   must be a UUID. Anything else throws PointIdError.
 *
 * Order by id (entriesById, compareKeys) follows the reference's point id ordering
 * used by scroll: every integer id before every UUID, integers ascending, UUIDs
 * ascending by their 128-bit value (the same as comparing the canonical lowercase
 * strings, since every canonical UUID has the same layout).
 *
 * Versions and WAL replay: `upsert` never lowers a stored version (a lower or equal
 * version leaves it unchanged and reports `versionApplied: false`); whether a replayed
 * operation has to be applied at all is the caller's decision, made with `version(id)`.
 *
 * Persistence (`toBytes` / `IdTracker.fromBytes`), all integers little-endian:
 *   magic "QIDT" (4 bytes) | format version u16 (=1) | flags u16 (=0)
 *   | next offset u64 | entry count u64
 *   | entries, ascending by offset, each:
 *       tag u8 (0 = integer id, 1 = UUID) | id (u64, or 16 UUID bytes big-endian)
 *       | offset u64 | version u64
 *   | CRC32C (Castagnoli) u32 of every preceding byte.
 * The same content always gives the same bytes. Decoding checks everything (length,
 * checksum, tags, offset order, offsets below the counter, duplicate ids) and throws
 * IdTrackerFormatError before building anything, so a bad input never yields a
 * partially filled tracker.
 */

import { CRC32C_INIT, crc32cFinish, crc32cUpdate } from '../common/crc32c';
import { OffsetTable } from './offset-table';
import { countWork } from '../common/work';
import { crc32cSteps, runAll, type Steps } from './slices';

export const U64_MAX = (1n << 64n) - 1n;

/**
 * Offsets stay below 2^53, so each is also exactly a JS number: the tables keyed by
 * offset use numbers, which a Map hashes several times faster than bigints. (A
 * shard would need 2^53 inserts to reach it.)
 */
export const OFFSET_LIMIT = 1n << 53n;

export class PointIdError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PointIdError';
  }
}

export class IdTrackerFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'IdTrackerFormatError';
  }
}

/** A normalised point id. `key` is a stable string, usable as a Map key: `n:<decimal>` or `u:<uuid>`. */
export type PointKey =
  | { readonly kind: 'num'; readonly value: bigint; readonly key: string }
  | { readonly kind: 'uuid'; readonly value: string; readonly key: string };

const UUID_HYPHEN_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const UUID_SIMPLE_RE = /^[0-9a-fA-F]{32}$/;

function describe(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 60 ? `${v.slice(0, 60)}...` : v);
  if (typeof v === 'bigint') return `${v}n`;
  if (typeof v === 'number') return String(v);
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return `a value of type ${typeof v}`;
}

function numKey(value: bigint): PointKey {
  return { kind: 'num', value, key: `n:${value}` };
}

function uuidKey(canonical: string): PointKey {
  return { kind: 'uuid', value: canonical, key: `u:${canonical}` };
}

/** Validates a point id and returns its canonical key; throws PointIdError otherwise. */
export function normalizePointId(id: unknown): PointKey {
  if (typeof id === 'number') {
    if (Number.isSafeInteger(id) && id >= 0) return numKey(BigInt(id));
    if (Number.isInteger(id) && id > 0) {
      throw new PointIdError(`point id ${id} is beyond 2^53 - 1; pass integers that large as a bigint`);
    }
    throw new PointIdError(`point id ${describe(id)} is not an unsigned integer or a UUID`);
  }
  if (typeof id === 'bigint') {
    if (id >= 0n && id <= U64_MAX) return numKey(id);
    throw new PointIdError(`point id ${describe(id)} is not an unsigned 64-bit integer`);
  }
  if (typeof id === 'string') {
    if (UUID_HYPHEN_RE.test(id)) return uuidKey(id.toLowerCase());
    if (UUID_SIMPLE_RE.test(id)) {
      const s = id.toLowerCase();
      return uuidKey(`${s.slice(0, 8)}-${s.slice(8, 12)}-${s.slice(12, 16)}-${s.slice(16, 20)}-${s.slice(20)}`);
    }
    throw new PointIdError(`point id ${describe(id)} is not a UUID (string ids must be UUIDs)`);
  }
  throw new PointIdError(`point id ${describe(id)} is not an unsigned integer or a UUID`);
}

/**
 * Wire form of a point id: integers as a JS number when they are at most
 * Number.MAX_SAFE_INTEGER, otherwise as a bigint (the reference sends u64 ids as JSON
 * numbers; the JSON writer must print that bigint as a bare number); UUIDs as the
 * canonical lowercase hyphenated string.
 */
export function pointIdToJson(key: PointKey): number | bigint | string {
  if (key.kind === 'uuid') return key.value;
  return key.value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(key.value) : key.value;
}

/** Reference point id order: integers ascending, then UUIDs ascending by 128-bit value. */
export function compareKeys(a: PointKey, b: PointKey): number {
  if (a.kind === 'num') {
    if (b.kind !== 'num') return -1;
    return a.value < b.value ? -1 : a.value > b.value ? 1 : 0;
  }
  if (b.kind === 'num') return 1;
  return a.value < b.value ? -1 : a.value > b.value ? 1 : 0;
}

function toKey(id: unknown): PointKey {
  if (typeof id === 'object' && id !== null && 'kind' in id && 'key' in id && 'value' in id) {
    const k = id as PointKey;
    // Re-validate: a PointKey built by hand must still be canonical.
    const n = normalizePointId(k.kind === 'num' ? k.value : k.value);
    if (n.key !== k.key || n.kind !== k.kind) throw new PointIdError(`point key ${describe(k.key)} is not canonical`);
    return n;
  }
  return normalizePointId(id);
}

function toU64(v: unknown, what: string): bigint {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return BigInt(v);
  if (typeof v === 'bigint' && v >= 0n && v <= U64_MAX) return v;
  throw new RangeError(`${what} ${describe(v)} is not an unsigned 64-bit integer`);
}

// ---------------------------------------------------------------------------------

/** Joins pieces into one array of `length` bytes. */
export function concatChunks(chunks: Iterable<Uint8Array>, length?: number): Uint8Array {
  const parts = [...chunks];
  const out = new Uint8Array(length ?? parts.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of parts) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

// ---------------------------------------------------------------------------------

export interface TrackerEntry {
  readonly id: PointKey;
  readonly offset: bigint;
  readonly version: bigint;
  /** True for an entry of a removed point still in the scroll-order view (see sortedById). */
  readonly removed?: boolean;
}

/**
 * One tracked point. A million of them are built when a shard loads, so an entry is
 * one object of numbers where the values fit (offsets always do, see OFFSET_LIMIT;
 * ids and versions below 2^53 nearly always), and the bigint and PointKey forms
 * callers see are made when asked for (the PointKey is kept once made).
 */
class Entry implements TrackerEntry {
  constructor(
    /** The point id when it is an integer below 2^53, else -1 (then `key` is set from the start). */
    readonly num: number,
    private key: PointKey | null,
    /** The offset (below OFFSET_LIMIT). */
    readonly off: number,
    private ver: number | bigint,
    /** Set when the point is removed (the scroll-order cache drops it lazily). */
    public removed: boolean,
  ) {}

  get id(): PointKey {
    if (this.key === null) this.key = numKey(BigInt(this.num));
    return this.key;
  }

  get offset(): bigint {
    return BigInt(this.off);
  }

  get version(): bigint {
    return typeof this.ver === 'number' ? BigInt(this.ver) : this.ver;
  }

  /** The version as stored: a number below 2^53, else a bigint. */
  get versionValue(): number | bigint {
    return this.ver;
  }

  set version(v: bigint) {
    this.ver = v < OFFSET_LIMIT ? Number(v) : v;
  }
}

/** A safe integer id's number (the key of IdTracker.byNum), or -1 for an id kept by its string key. */
function numOf(key: PointKey): number {
  return key.kind === 'num' && key.value < OFFSET_LIMIT ? Number(key.value) : -1;
}

/** Scroll order of two entries (compareKeys), without making PointKeys for integer ids below 2^53. */
function compareEntries(a: Entry, b: Entry): number {
  if (a.num >= 0 && b.num >= 0) return a.num - b.num;
  return compareKeys(a.id, b.id);
}

export interface UpsertResult {
  /** The point's offset (kept for an existing point, fresh from the counter for a new one). */
  offset: bigint;
  /** True when the id was not tracked before this call. */
  created: boolean;
  /** True when the stored version is now `version` (new point, or a higher version). */
  versionApplied: boolean;
}

const MAGIC = [0x51, 0x49, 0x44, 0x54]; // "QIDT"
const FORMAT_VERSION = 1;
const HEADER_LEN = 4 + 2 + 2 + 8 + 8;
const NUM_ENTRY_LEN = 1 + 8 + 8 + 8;
const UUID_ENTRY_LEN = 1 + 16 + 8 + 8;
const TAG_NUM = 0;
const TAG_UUID = 1;

export interface DecodeOptions {
  /**
   * The bytes are part of a file whose own checksum, just verified, covers them (a
   * shard state file): the inner checksum is not computed a second time.
   */
  checksumCovered?: boolean;
}

export class IdTracker {
  /** Points with an integer id below 2^53, by that id as a number (an array while the ids are dense, else a Map: both far faster than a Map of strings). */
  private readonly byNum = new OffsetTable<Entry>();
  /** The other points (UUIDs, integers from 2^53 on), by PointKey.key. */
  private readonly byKey = new Map<string, Entry>();
  /** Keyed by the offset as a number (see OFFSET_LIMIT). */
  private readonly byOffset = new OffsetTable<Entry>();
  private counter = 0n;
  /**
   * Entries in scroll order. After writes it is brought up to date lazily: points
   * added since are sorted on their own and merged in, removed ones dropped, which
   * costs a linear pass instead of a full sort.
   */
  private byIdCache: Entry[] | null = null;
  private pendingAdds: Entry[] = [];
  private pendingRemovals = 0;
  private removedInCache = 0;

  /** Number of tracked points. */
  get size(): number {
    return this.byNum.size + this.byKey.size;
  }

  /** The offset the next new point will get. Never decreases. */
  get nextOffset(): bigint {
    return this.counter;
  }

  /**
   * Inserts or updates a point. An existing point keeps its offset; its version is
   * raised to `version` when higher and never lowered. A new point takes the next
   * offset from the counter.
   */
  upsert(id: unknown, version: bigint | number): UpsertResult {
    const key = toKey(id);
    const v = toU64(version, 'version');
    const num = numOf(key);
    const existing = this.find(key, num);
    if (existing) {
      const applied = v > existing.version;
      if (applied) existing.version = v;
      return { offset: existing.offset, created: false, versionApplied: applied };
    }
    if (this.counter >= OFFSET_LIMIT) throw new RangeError('id tracker offset counter exhausted');
    const entry = new Entry(num, num >= 0 ? null : key, Number(this.counter), 0, false);
    entry.version = v;
    this.counter += 1n;
    if (num >= 0) this.byNum.set(num, entry);
    else this.byKey.set(key.key, entry);
    this.byOffset.set(entry.off, entry);
    if (this.byIdCache !== null) {
      this.pendingAdds.push(entry);
      // Points added faster than anyone scrolls: a full sort at the next scroll is
      // cheaper than keeping them all (and the entries removed meanwhile) around.
      if (this.pendingAdds.length > this.byIdCache.length / 4 + 1024) this.dropScrollCache();
    }
    return { offset: entry.offset, created: true, versionApplied: true };
  }

  /** Removes a point; returns its freed offset (never handed out again), or null when unknown. */
  delete(id: unknown): bigint | null {
    const key = toKey(id);
    const num = numOf(key);
    const entry = this.find(key, num);
    if (!entry) return null;
    if (num >= 0) this.byNum.delete(num);
    else this.byKey.delete(key.key);
    this.byOffset.delete(entry.off);
    entry.removed = true;
    if (this.byIdCache !== null) this.pendingRemovals++;
    return entry.offset;
  }

  has(id: unknown): boolean {
    return this.find(toKey(id)) !== undefined;
  }

  private find(key: PointKey, num = numOf(key)): Entry | undefined {
    return num >= 0 ? this.byNum.get(num) : this.byKey.get(key.key);
  }

  offsetOf(id: unknown): bigint | null {
    return this.find(toKey(id))?.offset ?? null;
  }

  /** The point id stored at `offset`, or null when that offset is free. */
  idOf(offset: bigint | number): PointKey | null {
    const o = typeof offset === 'number' ? offset : offset < OFFSET_LIMIT ? Number(offset) : -1;
    return this.byOffset.get(o)?.id ?? null;
  }

  /** The stored version of a point, or null when unknown. */
  version(id: unknown): bigint | null {
    return this.find(toKey(id))?.version ?? null;
  }

  private dropScrollCache(): void {
    this.byIdCache = null;
    this.pendingAdds = [];
    this.pendingRemovals = 0;
    this.removedInCache = 0;
  }

  /**
   * The id and version of the live entry at `offset` as numbers, into `out`, when the id
   * is an integer below 2^53 and the version below 2^53 (nearly always); false otherwise
   * (no entry, a UUID, larger numbers: use at()). For the search answer's hot path, where
   * at() would make a PointKey and bigints for every hit.
   */
  numbersAt(offset: bigint, out: { id: number; version: number }): boolean {
    const e = offset < OFFSET_LIMIT ? this.byOffset.get(Number(offset)) : undefined;
    if (e === undefined || e.num < 0) return false;
    const v = e.versionValue;
    if (typeof v !== 'number') return false;
    out.id = e.num;
    out.version = v;
    return true;
  }

  /** The live entry at `offset` (read-only view; do not keep it across writes), or undefined. */
  at(offset: bigint): TrackerEntry | undefined {
    return offset < OFFSET_LIMIT ? this.byOffset.get(Number(offset)) : undefined;
  }

  /** The live offsets as numbers (see OFFSET_LIMIT), in no particular order. */
  offsetNumbers(): IterableIterator<number> {
    return this.byOffset.keys();
  }

  /** Live entries in no particular order (read-only views), without copying or sorting. */
  unordered(): IterableIterator<TrackerEntry> {
    return this.byOffset.values();
  }

  /**
   * Entries in scroll order. The entries are read-only views: a version read from
   * them is the current one. Entries of removed points may still be in it with
   * `removed` set: skip them.
   */
  sortedById(): readonly TrackerEntry[] {
    const cache = this.byIdCache;
    if (cache === null || this.pendingAdds.length > cache.length / 4) {
      const out = [...this.byNum.values(), ...this.byKey.values()];
      out.sort(compareEntries);
      this.byIdCache = out;
      this.removedInCache = 0;
    } else if (this.pendingAdds.length > 0 || this.pendingRemovals > 0) {
      const live = (e: Entry) => !e.removed;
      // Removed entries stay in the view (readers skip them) until they are a tenth of
      // it: dropping them is a pass over every entry, which costs more than the sort
      // of the additions (memory-bound on large trackers).
      let base = cache;
      this.removedInCache += this.pendingRemovals;
      if (this.removedInCache > cache.length / 10) {
        base = cache.filter(live);
        this.removedInCache = 0;
      }
      const adds = this.pendingAdds.filter(live).sort(compareEntries);
      // Each add finds its place by binary search; the runs between are copied whole.
      const out: Entry[] = adds.length === 0 ? base : [];
      let from = 0;
      for (const a of adds) {
        let lo = from;
        let hi = base.length;
        while (lo < hi) {
          const mid = (lo + hi) >>> 1;
          if (compareEntries(base[mid], a) < 0) lo = mid + 1;
          else hi = mid;
        }
        for (let i = from; i < lo; i++) out.push(base[i]);
        out.push(a);
        from = lo;
      }
      if (adds.length > 0) for (let i = from; i < base.length; i++) out.push(base[i]);
      this.byIdCache = out;
    }
    this.pendingAdds = [];
    this.pendingRemovals = 0;
    return this.byIdCache!;
  }

  /** Entries in ascending offset order. */
  entriesByOffset(): TrackerEntry[] {
    const out = [...this.byOffset.values()].map(snapshot);
    out.sort((a, b) => (a.offset < b.offset ? -1 : a.offset > b.offset ? 1 : 0));
    return out;
  }

  /** Entries in the reference scroll order (see compareKeys). */
  entriesById(): TrackerEntry[] {
    const entries = [...this.byNum.values(), ...this.byKey.values()];
    entries.sort(compareEntries);
    const out = entries.map(snapshot);
    return out;
  }

  /** Same as entriesByOffset. */
  [Symbol.iterator](): IterableIterator<TrackerEntry> {
    return this.entriesByOffset()[Symbol.iterator]();
  }

  /** Offsets in ascending order, without building an entry object per point. */
  private sortedOffsets(): BigUint64Array {
    const out = new BigUint64Array(this.byOffset.size);
    let i = 0;
    let sorted = true;
    for (const e of this.byOffset.values()) {
      if (i > 0 && e.offset < out[i - 1]) sorted = false;
      out[i++] = e.offset;
    }
    if (!sorted) out.sort();
    return out;
  }

  /** The serialised tracker (see toBytes) in pieces of about `pieceBytes`: nothing the size of the whole is built. */
  *toChunks(pieceBytes = 1 << 20): Generator<Uint8Array> {
    const offsets = this.sortedOffsets();
    const head = new Uint8Array(HEADER_LEN);
    const hv = new DataView(head.buffer);
    head.set(MAGIC, 0);
    hv.setUint16(4, FORMAT_VERSION, true);
    hv.setUint16(6, 0, true);
    hv.setBigUint64(8, this.counter, true);
    hv.setBigUint64(16, BigInt(offsets.length), true);
    let crc = crc32cUpdate(CRC32C_INIT, head);
    yield head;
    const piece = new Uint8Array(Math.max(pieceBytes, UUID_ENTRY_LEN));
    const view = new DataView(piece.buffer);
    let p = 0;
    const flush = (): Uint8Array => {
      const out = piece.slice(0, p);
      crc = crc32cUpdate(crc, out);
      p = 0;
      return out;
    };
    for (const o of offsets) {
      if (p + UUID_ENTRY_LEN > piece.length) yield flush();
      const e = this.byOffset.get(Number(o)) as Entry;
      if (e.num >= 0) {
        piece[p] = TAG_NUM;
        view.setUint32(p + 1, e.num % 4294967296, true);
        view.setUint32(p + 5, Math.floor(e.num / 4294967296), true);
        p += 9;
      } else if (e.id.kind === 'num') {
        piece[p] = TAG_NUM;
        view.setBigUint64(p + 1, e.id.value, true);
        p += 9;
      } else {
        piece[p] = TAG_UUID;
        const hex = e.id.value.replace(/-/g, '');
        for (let i = 0; i < 16; i++) piece[p + 1 + i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
        p += 17;
      }
      view.setUint32(p, e.off % 4294967296, true);
      view.setUint32(p + 4, Math.floor(e.off / 4294967296), true);
      view.setBigUint64(p + 8, e.version, true);
      p += 16;
    }
    if (p > 0) yield flush();
    const tail = new Uint8Array(4);
    new DataView(tail.buffer).setUint32(0, crc32cFinish(crc), true);
    yield tail;
  }

  /** Exact byte length of toBytes() (known without serialising). */
  byteLength(): number {
    let len = HEADER_LEN + 4;
    for (const e of this.byOffset.values()) len += e.num >= 0 || e.id.kind === 'num' ? NUM_ENTRY_LEN : UUID_ENTRY_LEN;
    return len;
  }

  toBytes(): Uint8Array {
    return concatChunks(this.toChunks(), this.byteLength());
  }

  static fromBytes(input: Uint8Array): IdTracker {
    return runAll(IdTracker.decode(input));
  }

  /**
   * fromBytes in steps (see slices.ts), for a loader that keeps the event loop
   * turning. The tracker is built as the entries are checked; one that fails a check
   * is thrown away, never returned.
   */
  static *decode(input: Uint8Array, opts: DecodeOptions = {}): Steps<IdTracker> {
    if (!(input instanceof Uint8Array)) throw new IdTrackerFormatError('id tracker data is not a byte array');
    const bytes = input;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const fail = (msg: string): never => {
      throw new IdTrackerFormatError(`id tracker data is corrupt: ${msg}`);
    };
    if (bytes.length < HEADER_LEN + 4) fail(`truncated (${bytes.length} bytes, header needs ${HEADER_LEN + 4})`);
    for (let i = 0; i < 4; i++) if (bytes[i] !== MAGIC[i]) fail('bad magic (not an id tracker file)');
    if (!opts.checksumCovered) {
      const stored = view.getUint32(bytes.length - 4, true);
      const actual = yield* crc32cSteps(bytes, 0, bytes.length - 4);
      if (stored !== actual) fail(`checksum mismatch (stored ${hex32(stored)}, computed ${hex32(actual)}) or truncated data`);
    }
    const fmt = view.getUint16(4, true);
    if (fmt !== FORMAT_VERSION) fail(`unsupported format version ${fmt} (expected ${FORMAT_VERSION})`);
    const flags = view.getUint16(6, true);
    if (flags !== 0) fail(`unknown flags ${flags}`);
    const counter = view.getBigUint64(8, true);
    const count = view.getBigUint64(16, true);
    const end = bytes.length - 4;
    if (count > BigInt(Math.floor((end - HEADER_LEN) / NUM_ENTRY_LEN))) fail(`entry count ${count} does not fit the data`);
    if (counter > OFFSET_LIMIT) fail(`next offset ${counter} is beyond 2^53`);

    const t = new IdTracker();
    t.counter = counter;
    const limit = Number(counter);
    let p = HEADER_LEN;
    let prevOffset = -1;
    const n = Number(count);
    for (let k = 0; k < n; k++) {
      if ((k & 1023) === 1023) {
        countWork(1024);
        yield;
      }
      if (p + 1 > end) fail(`truncated at entry ${k}`);
      const tag = bytes[p];
      let num = -1;
      let id: PointKey | null = null;
      if (tag === TAG_NUM) {
        if (p + NUM_ENTRY_LEN > end) fail(`truncated at entry ${k}`);
        const hi = view.getUint32(p + 5, true);
        if (hi < 0x200000) num = hi * 4294967296 + view.getUint32(p + 1, true);
        else id = numKey(view.getBigUint64(p + 1, true));
        p += 9;
      } else if (tag === TAG_UUID) {
        if (p + UUID_ENTRY_LEN > end) fail(`truncated at entry ${k}`);
        let h = '';
        for (let i = 0; i < 16; i++) h += bytes[p + 1 + i].toString(16).padStart(2, '0');
        id = uuidKey(`${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`);
        p += 17;
      } else {
        return fail(`unknown id tag ${tag} at entry ${k}`);
      }
      // Below the counter (checked above to be at most 2^53), so exact as a number.
      const o = view.getUint32(p + 4, true) * 4294967296 + view.getUint32(p, true);
      const vhi = view.getUint32(p + 12, true);
      const version = vhi < 0x200000 ? vhi * 4294967296 + view.getUint32(p + 8, true) : view.getBigUint64(p + 8, true);
      p += 16;
      if (o <= prevOffset) fail(`offsets not strictly ascending at entry ${k}`);
      if (o >= limit) fail(`offset ${view.getBigUint64(p - 16, true)} at entry ${k} is not below the counter ${counter}`);
      const entry = new Entry(num, id, o, version, false);
      if (num >= 0) {
        const before = t.byNum.size;
        t.byNum.set(num, entry);
        if (t.byNum.size === before) fail(`duplicate point id n:${num} at entry ${k}`);
      } else {
        const before = t.byKey.size;
        t.byKey.set(id!.key, entry);
        if (t.byKey.size === before) fail(`duplicate point id ${id!.key} at entry ${k}`);
      }
      t.byOffset.set(o, entry);
      prevOffset = o;
    }
    if (p !== end) fail(`${end - p} unexpected trailing bytes after ${count} entries`);
    return t;
  }
}

function snapshot(e: Entry): TrackerEntry {
  return { id: e.id, offset: e.offset, version: e.version };
}

function hex32(n: number): string {
  return `0x${n.toString(16).padStart(8, '0')}`;
}
