/**
 * The shard's payload store: JSON payloads keyed by internal offset (u64 bigint from
 * the id tracker), the Qdrant payload operations and the `with_payload` projection.
 * Pure: no I/O; `toBytes`/`fromBytes` give the bytes the shard writes to payload.bin.
 *
 * Semantics (pinned by test/shard/payload-store.test.ts):
 *
 * Values: a payload is a plain JSON object at the top level. Values are null, booleans,
 * strings, finite numbers, arrays and plain objects; anything else (undefined, bigint,
 * NaN/Infinity, functions, Dates, Maps, cycles) is rejected with a PayloadError before
 * the store changes. The store deep-copies what it is given, so callers may reuse
 * their objects. Integers beyond 2^53 lose precision (JavaScript numbers).
 *
 * Paths (`key` of set, `keys` of delete, include/exclude of with_payload): segments
 * separated by `.`, each a name optionally followed by ONE `[]`. Array indexes
 * (`a[0]`), quoted keys and empty segments are rejected with a PayloadError.
 *  - Walking a path through an array applies the rest of the path to every element,
 *    at any depth (as in ts/shard/filter.ts); non-object elements are skipped. So
 *    `a.b` and `a[].b` are the same when `a` holds an array of objects.
 *  - `name[]` requires an array at `name`: if the value there is not an array, the
 *    path touches nothing.
 *
 * set(offset, payload, key?): without `key`, the top-level keys of `payload` replace
 * those of the stored payload, other keys are kept (a point without a payload gets
 * one). With `key` ("assigns payload to each point that satisfy this path of
 * property"), `payload` is merged the same way into the object at that path:
 *  - a missing, null or scalar value on the way (or at the end) is replaced by a new
 *    object, so `set({x:1}, "a.b")` on `{}` gives `{a:{b:{x:1}}}`;
 *  - an array on the way (or at the end) is never replaced: the merge applies to each
 *    of its object elements (non-object elements are left alone);
 *  - `name[]` merges into the object elements of the array at `name` only; a missing
 *    or non-array value there leaves the payload unchanged.
 * overwrite(offset, payload): replaces the whole payload.
 * deleteKeys(offset, keys): removes each path's last key where the path leads (in
 *   every array element for paths through arrays); `name[]` as the last segment
 *   removes `name` only when it holds an array. Missing paths are ignored.
 * clear(offset): the point keeps an empty payload `{}`. remove(offset): the point's
 *   entry is dropped. get(offset): the stored payload, or `{}` when the point has no
 *   entry (a fresh object each time for a missing point).
 * Operations on an offset without an entry: set/overwrite create it, deleteKeys and
 *   clear create nothing (an absent point already has the empty payload).
 *
 * select(payload, withPayload) — the `with_payload` projection of a response:
 *  - `true`: a deep copy of everything; `false`, null, undefined: `null` (the
 *    response's `payload: null`);
 *  - `[paths]` or `{include: [paths]}`: only those paths, nested structure kept:
 *    include `a.b` of `{a:{b:1,c:2}}` gives `{a:{b:1}}`. Through arrays the array
 *    keeps its object elements in order, each projected (possibly to `{}`), and drops
 *    non-object elements. A key appears only when its path matched something.
 *    An empty include list gives `{}`.
 *  - `{exclude: [paths]}`: a copy with those paths deleted (as deleteKeys).
 *  The result is always a fresh object (or null); the input is never modified.
 *
 * Bytes (little endian): "QPLD", u16 format version (1), u16 flags (0), u64 entry
 * count, then per entry in increasing offset order: u64 offset, u32 length, that many
 * bytes of UTF-8 JSON (key order as stored); then u32 CRC32C of everything before it.
 * fromBytes checks size, magic, checksum, version, flags, sorted unique offsets, that
 * every entry is a valid payload and that no byte is left over; it throws
 * PayloadFormatError and never returns a partially filled store.
 */

import { isAscii } from 'node:buffer';

import { CRC32C_INIT, crc32cFinish, crc32cUpdate } from '../common/crc32c';
import { OFFSET_LIMIT, concatChunks, type DecodeOptions } from './id-tracker';
import { MAX_NESTING_DEPTH } from './limits';
import { OffsetTable } from './offset-table';
import { countWork } from '../common/work';
import { crc32cSteps, runAll, type Steps } from './slices';

export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;
export interface JsonObject {
  [key: string]: JsonValue;
}
export type Payload = JsonObject;

export type WithPayload =
  | boolean
  | string[]
  | { include: string[] }
  | { exclude: string[] }
  | null
  | undefined;

export class PayloadError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PayloadError';
  }
}

export class PayloadFormatError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PayloadFormatError';
  }
}

const hasOwn = Object.prototype.hasOwnProperty;

function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Sets an own property, also for the key "__proto__" (which plain assignment would not). */
function put(o: JsonObject, k: string, v: JsonValue): void {
  if (k === '__proto__') Object.defineProperty(o, k, { value: v, enumerable: true, writable: true, configurable: true });
  else o[k] = v;
}

function getOwn(o: JsonObject, k: string): JsonValue | undefined {
  return hasOwn.call(o, k) ? o[k] : undefined;
}

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'number') return String(v);
  if (typeof v === 'object') {
    const c = Object.getPrototypeOf(v);
    return c && c !== Object.prototype && c.constructor ? `a ${c.constructor.name}` : 'an object';
  }
  return `a ${typeof v}`;
}

function checkValue(v: unknown, path: string, stack: object[]): void {
  switch (typeof v) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(v)) throw new PayloadError(`payload value at ${path} is ${v}: numbers must be finite`);
      return;
    case 'object':
      if (v === null) return;
      // `stack` holds the containers around `v`: past the limit the value is refused, so no payload runs this (or later walks) out of stack.
      if (stack.length >= MAX_NESTING_DEPTH) throw new PayloadError(`payload value at ${path} nests arrays and objects more than ${MAX_NESTING_DEPTH} levels deep`);
      if (stack.includes(v)) throw new PayloadError(`payload value at ${path} is circular`);
      stack.push(v);
      if (Array.isArray(v)) {
        for (let i = 0; i < v.length; i++) checkValue(v[i], `${path}[${i}]`, stack);
      } else {
        const proto = Object.getPrototypeOf(v);
        if (proto !== Object.prototype && proto !== null) {
          throw new PayloadError(`payload value at ${path} is ${describe(v)}, not a JSON value`);
        }
        for (const k of Object.keys(v)) checkValue((v as Record<string, unknown>)[k], `${path}.${k}`, stack);
      }
      stack.pop();
      return;
    default:
      throw new PayloadError(`payload value at ${path} is ${describe(v)}, not a JSON value`);
  }
}

/**
 * Whether `x`, a value JSON.parse returned, is a valid payload: an object, nested at
 * most MAX_NESTING_DEPTH deep (as checkValue counts), with finite numbers (JSON.parse
 * turns 1e999 into Infinity). Everything else JSON.parse gives is a JSON value.
 */
function parsedPayloadFine(x: unknown): boolean {
  return typeof x === 'object' && x !== null && !Array.isArray(x) && parsedFine(x, 0);
}

function parsedFine(v: unknown, enclosing: number): boolean {
  if (typeof v === 'number') return Number.isFinite(v);
  if (typeof v !== 'object' || v === null) return true;
  if (enclosing >= MAX_NESTING_DEPTH) return false;
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) if (!parsedFine(v[i], enclosing + 1)) return false;
    return true;
  }
  for (const k in v) if (!parsedFine((v as Record<string, unknown>)[k], enclosing + 1)) return false;
  return true;
}

/** Throws a PayloadError unless `x` is a JSON object whose values are all JSON values. */
export function validatePayload(x: unknown): asserts x is Payload {
  if (!isObject(x)) throw new PayloadError(`payload must be a JSON object, got ${describe(x)}`);
  checkValue(x, 'payload', []);
}

function clone(v: JsonValue): JsonValue {
  if (Array.isArray(v)) return v.map(clone);
  if (isObject(v)) return cloneObject(v);
  return v;
}

function cloneObject(o: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const k of Object.keys(o)) put(out, k, clone(o[k]));
  return out;
}

// ---------------------------------------------------------------------------------
// Paths

export interface PathSegment {
  name: string;
  array: boolean; // `name[]`
}

const SEGMENT_RE = /^([^.[\]]+)(\[\])?$/;

export function parsePath(path: string): PathSegment[] {
  if (typeof path !== 'string' || path.length === 0) {
    throw new PayloadError(`payload key must be a non-empty string, got ${path === '' ? 'an empty one' : describe(path)}`);
  }
  return path.split('.').map((seg) => {
    const m = SEGMENT_RE.exec(seg);
    if (!m) {
      throw new PayloadError(
        `unsupported payload key "${path}" (segments are names optionally followed by one [], array indexes and quoted keys are not supported)`,
      );
    }
    return { name: m[1], array: m[2] !== undefined };
  });
}

function parsePaths(paths: unknown, what: string): PathSegment[][] {
  if (!Array.isArray(paths)) throw new PayloadError(`${what} must be an array of strings, got ${describe(paths)}`);
  return paths.map((p) => parsePath(p as string));
}

/** Calls `f` on every object reached by walking `node` (arrays expanded at any depth). */
function eachObject(node: JsonValue | undefined, f: (o: JsonObject) => void): void {
  if (Array.isArray(node)) for (const e of node) eachObject(e, f);
  else if (isObject(node)) f(node);
}

function mergeInto(target: JsonObject, payload: JsonObject): void {
  for (const k of Object.keys(payload)) put(target, k, clone(payload[k]));
}

function setAt(node: JsonObject, segs: PathSegment[], i: number, payload: JsonObject): void {
  const seg = segs[i];
  const last = i === segs.length - 1;
  let child = getOwn(node, seg.name);
  if (seg.array) {
    if (!Array.isArray(child)) return;
  } else if (!isObject(child) && !Array.isArray(child)) {
    child = {};
    put(node, seg.name, child);
  }
  eachObject(child, (o) => (last ? mergeInto(o, payload) : setAt(o, segs, i + 1, payload)));
}

function deleteAt(node: JsonObject, segs: PathSegment[], i: number): void {
  const seg = segs[i];
  if (!hasOwn.call(node, seg.name)) return;
  const child = node[seg.name];
  if (seg.array && !Array.isArray(child)) return;
  if (i === segs.length - 1) {
    delete node[seg.name];
    return;
  }
  eachObject(child, (o) => deleteAt(o, segs, i + 1));
}

interface Projection {
  matched: boolean;
  value: JsonValue;
}

/** The part of `node` (an object or an array) that the path from `segs[i]` selects. */
function project(node: JsonValue, segs: PathSegment[], i: number): Projection {
  if (Array.isArray(node)) {
    const out: JsonValue[] = [];
    let matched = false;
    for (const e of node) {
      if (!isObject(e) && !Array.isArray(e)) continue;
      const p = project(e, segs, i);
      matched = matched || p.matched;
      out.push(p.value);
    }
    return { matched, value: out };
  }
  const out: JsonObject = {};
  if (!isObject(node)) return { matched: false, value: out };
  const seg = segs[i];
  if (!hasOwn.call(node, seg.name)) return { matched: false, value: out };
  const child = node[seg.name];
  if (seg.array && !Array.isArray(child)) return { matched: false, value: out };
  if (i === segs.length - 1) {
    put(out, seg.name, clone(child));
    return { matched: true, value: out };
  }
  if (!isObject(child) && !Array.isArray(child)) return { matched: false, value: out };
  const p = project(child, segs, i + 1);
  if (p.matched) put(out, seg.name, p.value);
  return { matched: p.matched, value: out };
}

/**
 * Merges two projections of the same value. A whole copy is a superset of any
 * projection; projected arrays of one source array have equal lengths, and a whole
 * copy of an array is never shorter than a projection of it.
 */
function mergeProjections(a: JsonValue, b: JsonValue): JsonValue {
  if (isObject(a) && isObject(b)) {
    for (const k of Object.keys(b)) put(a, k, hasOwn.call(a, k) ? mergeProjections(a[k], b[k]) : b[k]);
    return a;
  }
  if (Array.isArray(a) && Array.isArray(b)) {
    if (a.length !== b.length) return a.length > b.length ? a : b;
    for (let j = 0; j < a.length; j++) a[j] = mergeProjections(a[j], b[j]);
    return a;
  }
  return a;
}

function include(payload: JsonObject, paths: PathSegment[][]): JsonObject {
  let out: JsonObject = {};
  for (const segs of paths) {
    const p = project(payload, segs, 0);
    if (p.matched) out = mergeProjections(out, p.value) as JsonObject;
  }
  return out;
}

/** The `with_payload` projection (see the header comment). */
export function select(payload: Payload, withPayload: WithPayload): Payload | null {
  if (withPayload === undefined || withPayload === null || withPayload === false) return null;
  if (withPayload === true) return cloneObject(payload);
  if (Array.isArray(withPayload)) return include(payload, parsePaths(withPayload, 'with_payload'));
  if (isObject(withPayload as unknown)) {
    const sel = withPayload as Record<string, unknown>;
    const keys = Object.keys(sel);
    if (keys.length === 1 && keys[0] === 'include') return include(payload, parsePaths(sel.include, 'with_payload.include'));
    if (keys.length === 1 && keys[0] === 'exclude') {
      const paths = parsePaths(sel.exclude, 'with_payload.exclude');
      const out = cloneObject(payload);
      for (const segs of paths) deleteAt(out, segs, 0);
      return out;
    }
  }
  throw new PayloadError(
    `with_payload must be a boolean, an array of keys, {include: [...]} or {exclude: [...]}, got ${describe(withPayload)}`,
  );
}

// ---------------------------------------------------------------------------------
// The store

const MAGIC = new Uint8Array([0x51, 0x50, 0x4c, 0x44]); // "QPLD"
const FORMAT_VERSION = 1;
const HEADER_LEN = 16;
const U64_MAX = (1n << 64n) - 1n;

function checkOffset(offset: bigint): void {
  if (typeof offset !== 'bigint' || offset < 0n || offset > U64_MAX) {
    throw new PayloadError(`offset must be a u64 bigint, got ${typeof offset === 'bigint' ? offset : describe(offset)}`);
  }
}

/** The map key of an offset: a number below OFFSET_LIMIT (what a shard's offsets always are; a Map hashes it fast), else the bigint. */
function k(offset: bigint): number | bigint {
  return offset < OFFSET_LIMIT ? Number(offset) : offset;
}

function* withBigintKeys(it: IterableIterator<[number | bigint, Payload]>): IterableIterator<[bigint, Readonly<Payload>]> {
  for (const [key, v] of it) yield [typeof key === 'number' ? BigInt(key) : key, v];
}

/** Payloads by map key (k()): an OffsetTable for the numbers, a Map for the rare bigints. */
class PayloadMap {
  private readonly table = new OffsetTable<Payload>();
  private big: Map<bigint, Payload> | null = null;

  get size(): number {
    return this.table.size + (this.big?.size ?? 0);
  }

  get(key: number | bigint): Payload | undefined {
    return typeof key === 'number' ? this.table.get(key) : this.big?.get(key);
  }

  has(key: number | bigint): boolean {
    return this.get(key) !== undefined;
  }

  set(key: number | bigint, v: Payload): void {
    if (typeof key === 'number') this.table.set(key, v);
    else (this.big ??= new Map()).set(key, v);
  }

  delete(key: number | bigint): boolean {
    return typeof key === 'number' ? this.table.delete(key) : (this.big?.delete(key) ?? false);
  }

  *keys(): IterableIterator<number | bigint> {
    yield* this.table.keys();
    if (this.big) yield* this.big.keys();
  }

  *entries(): IterableIterator<[number | bigint, Payload]> {
    yield* this.table.entries();
    if (this.big) yield* this.big.entries();
  }
}

/** Payload entries parsed per JSON.parse call when decoding (see decode). */
const PARSE_BATCH = 512;

export class PayloadStore {
  private readonly map = new PayloadMap();

  get size(): number {
    return this.map.size;
  }

  has(offset: bigint): boolean {
    return this.map.has(k(offset));
  }

  /** The stored payload (do not modify it), or a fresh `{}` for a point without one. */
  get(offset: bigint): Readonly<Payload> {
    return this.map.get(k(offset)) ?? {};
  }

  /** Merges `payload` into the point's payload, at `key` when given (header comment). */
  set(offset: bigint, payload: Payload, key?: string | null): void {
    checkOffset(offset);
    validatePayload(payload);
    const segs = key === undefined || key === null ? null : parsePath(key);
    let target = this.map.get(k(offset));
    if (target === undefined) {
      target = {};
      this.map.set(k(offset), target);
    }
    if (segs === null) mergeInto(target, payload);
    else setAt(target, segs, 0, payload);
  }

  overwrite(offset: bigint, payload: Payload): void {
    checkOffset(offset);
    validatePayload(payload);
    this.map.set(k(offset), cloneObject(payload));
  }

  deleteKeys(offset: bigint, keys: string[]): void {
    checkOffset(offset);
    const paths = parsePaths(keys, 'keys');
    const target = this.map.get(k(offset));
    if (target === undefined) return;
    for (const segs of paths) deleteAt(target, segs, 0);
  }

  clear(offset: bigint): void {
    checkOffset(offset);
    if (this.map.has(k(offset))) this.map.set(k(offset), {});
  }

  /** Drops the point's entry; returns whether it had one. */
  remove(offset: bigint): boolean {
    return this.map.delete(k(offset));
  }

  select(offset: bigint, withPayload: WithPayload): Payload | null {
    return select(this.get(offset) as Payload, withPayload);
  }

  /** Entries in ascending offset order (in insertion order if the offsets have become very sparse; offsets from 2^53 on last). */
  entries(): IterableIterator<[bigint, Readonly<Payload>]> {
    return withBigintKeys(this.map.entries());
  }

  [Symbol.iterator](): IterableIterator<[bigint, Readonly<Payload>]> {
    return this.entries();
  }

  /** The serialised payloads (see toBytes) in pieces of about `pieceBytes`: nothing the size of the whole is built. */
  *toChunks(pieceBytes = 1 << 20): Generator<Uint8Array> {
    const offsets = new BigUint64Array(this.map.size);
    let n = 0;
    let sorted = true;
    for (const key of this.map.keys()) {
      const o = typeof key === 'number' ? BigInt(key) : key;
      if (n > 0 && o < offsets[n - 1]) sorted = false;
      offsets[n++] = o;
    }
    if (!sorted) offsets.sort();
    const head = new Uint8Array(HEADER_LEN);
    const hv = new DataView(head.buffer);
    head.set(MAGIC, 0);
    hv.setUint16(4, FORMAT_VERSION, true);
    hv.setUint16(6, 0, true);
    hv.setBigUint64(8, BigInt(offsets.length), true);
    let crc = crc32cUpdate(CRC32C_INIT, head);
    yield head;
    let piece = Buffer.allocUnsafe(pieceBytes);
    let p = 0;
    const flush = (): Uint8Array => {
      const out = Uint8Array.prototype.slice.call(piece, 0, p) as Uint8Array;
      crc = crc32cUpdate(crc, out);
      p = 0;
      return out;
    };
    for (const o of offsets) {
      const body = JSON.stringify(this.map.get(k(o)));
      const len = Buffer.byteLength(body, 'utf8');
      if (p + 12 + len > piece.length) {
        if (p > 0) yield flush();
        if (12 + len > piece.length) piece = Buffer.allocUnsafe(12 + len);
      }
      piece.writeBigUInt64LE(o, p);
      piece.writeUInt32LE(len, p + 8);
      piece.write(body, p + 12, 'utf8');
      p += 12 + len;
    }
    if (p > 0) yield flush();
    const tail = new Uint8Array(4);
    new DataView(tail.buffer).setUint32(0, crc32cFinish(crc), true);
    yield tail;
  }

  toBytes(): Uint8Array {
    return concatChunks(this.toChunks());
  }

  static fromBytes(input: Uint8Array): PayloadStore {
    return runAll(PayloadStore.decode(input));
  }

  /**
   * fromBytes in steps (see slices.ts), for a loader that keeps the event loop
   * turning. Entries are parsed a batch at a time: their texts, each of which must
   * be a JSON object (`{...}`), are joined into one JSON array, decoded as strict
   * UTF-8 and parsed at once, which must give exactly one value per entry. (The
   * checksum guards against damage; a crafted file whose texts only parse joined
   * could at most move payloads between its own points, each still a valid one.)
   * The store is built as entries pass their checks; one that fails is thrown away.
   */
  static *decode(input: Uint8Array, opts: DecodeOptions = {}): Steps<PayloadStore> {
    const fail = (msg: string): never => {
      throw new PayloadFormatError(`payload data is corrupt: ${msg}`);
    };
    if (!(input instanceof Uint8Array)) throw new PayloadFormatError('payload data is not a byte array');
    const bytes = input;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    if (bytes.length < HEADER_LEN + 4) fail(`truncated (${bytes.length} bytes, header needs ${HEADER_LEN + 4})`);
    for (let i = 0; i < 4; i++) if (bytes[i] !== MAGIC[i]) fail('bad magic (not a payload file)');
    const end = bytes.length - 4;
    if (!opts.checksumCovered) {
      const stored = view.getUint32(end, true);
      const actual = yield* crc32cSteps(bytes, 0, end);
      if (stored !== actual) fail(`checksum mismatch (stored ${stored >>> 0}, computed ${actual >>> 0}) or truncated data`);
    }
    const fmt = view.getUint16(4, true);
    if (fmt !== FORMAT_VERSION) fail(`unsupported format version ${fmt} (expected ${FORMAT_VERSION})`);
    if (view.getUint16(6, true) !== 0) fail(`unknown flags ${view.getUint16(6, true)}`);
    const count = view.getBigUint64(8, true);
    if (count > BigInt(Math.floor((end - HEADER_LEN) / 12))) fail(`entry count ${count} does not fit the data`);
    const dec = new TextDecoder('utf-8', { fatal: true });
    const store = new PayloadStore();
    const n = Number(count);
    // One batch: where each text starts and ends, and the offsets.
    const starts = new Uint32Array(PARSE_BATCH);
    const ends = new Uint32Array(PARSE_BATCH);
    const offsets: Array<number | bigint> = new Array<number | bigint>(PARSE_BATCH);
    let joined = Buffer.allocUnsafe(1 << 16);
    let p = HEADER_LEN;
    // The previous offset: a number while offsets are below OFFSET_LIMIT, then a bigint.
    let prevNum = -1;
    let prevBig: bigint | null = null;
    for (let first = 0; first < n; first += PARSE_BATCH) {
      const m = Math.min(PARSE_BATCH, n - first);
      let textBytes = 0;
      for (let j = 0; j < m; j++) {
        const i = first + j;
        if (p + 12 > end) fail(`entry ${i} is truncated`);
        const hi = view.getUint32(p + 4, true);
        const offset = hi < 0x200000 ? hi * 4294967296 + view.getUint32(p, true) : view.getBigUint64(p, true);
        const len = view.getUint32(p + 8, true);
        p += 12;
        if (typeof offset === 'number') {
          if (prevBig !== null || offset <= prevNum) fail(`entry ${i}: offset ${offset} is not above the previous one`);
          prevNum = offset;
        } else {
          if (prevBig !== null && offset <= prevBig) fail(`entry ${i}: offset ${offset} is not above the previous one`);
          prevBig = offset;
        }
        if (len > end - p) fail(`entry ${i}: length ${len} runs past the data`);
        if (len < 2 || bytes[p] !== 0x7b || bytes[p + len - 1] !== 0x7d) fail(`entry ${i} (offset ${offset}): payload must be a JSON object`);
        offsets[j] = offset;
        starts[j] = p;
        ends[j] = p + len;
        textBytes += len;
        p += len;
      }
      // "[" text "," text ... "]"
      const total = textBytes + m + 1;
      if (joined.length < total) joined = Buffer.allocUnsafe(Math.max(total, joined.length * 2));
      let w = 0;
      joined[w++] = 0x5b;
      for (let j = 0; j < m; j++) {
        if (j > 0) joined[w++] = 0x2c;
        joined.set(bytes.subarray(starts[j], ends[j]), w);
        w += ends[j] - starts[j];
      }
      joined[w++] = 0x5d;
      let values: unknown;
      try {
        const text = joined.subarray(0, w);
        // ASCII (most payloads) is valid UTF-8 and becomes a string without decoding.
        values = JSON.parse(isAscii(text) ? text.toString('latin1') : dec.decode(text));
      } catch (e) {
        // Which entry: the first that does not decode and parse on its own.
        for (let j = 0; j < m; j++) {
          try {
            JSON.parse(dec.decode(bytes.subarray(starts[j], ends[j])));
          } catch (e2) {
            return fail(`entry ${first + j} (offset ${offsets[j]}): ${(e2 as Error).message}`);
          }
        }
        return fail(`entries ${first} to ${first + m - 1}: ${(e as Error).message}`);
      }
      if (!Array.isArray(values) || values.length !== m) return fail(`entries ${first} to ${first + m - 1} do not parse as ${m} JSON objects`);
      for (let j = 0; j < m; j++) {
        // What JSON.parse gives is a JSON value but for depth and overflowing numbers:
        // checked quickly, and validatePayload says what is wrong if anything is.
        if (!parsedPayloadFine(values[j])) {
          try {
            validatePayload(values[j]);
          } catch (e) {
            return fail(`entry ${first + j} (offset ${offsets[j]}): ${(e as Error).message}`);
          }
        }
        store.map.set(offsets[j], values[j] as Payload);
      }
      countWork(m);
      yield;
    }
    if (p !== end) fail(`${end - p} unexpected bytes after the last entry`);
    return store;
  }
}
