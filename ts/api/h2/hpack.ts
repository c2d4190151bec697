/**
 * HPACK (RFC 7541) for Quiver's HTTP/2 connections (the public gRPC server's, and the
 * client peers call each other with): a full decoder (static and dynamic tables,
 * integers, literals, Huffman-coded strings, table size updates) and a small encoder
 * that writes only indexed static entries and literals "without indexing", so neither
 * end keeps a dynamic table of its own for the other to track.
 *
 * Owns: header block coding. Must never: know frames or streams.
 */

import { HUFFMAN_CODES, HUFFMAN_LENGTHS } from './huffman-table';

/** A header block that cannot be decoded: a connection error (COMPRESSION_ERROR). */
export class HpackError extends Error {}

/** The static table (RFC 7541 Appendix A), index 1..61. */
export const STATIC_TABLE: ReadonlyArray<readonly [string, string]> = [
  ['', ''],
  [':authority', ''],
  [':method', 'GET'],
  [':method', 'POST'],
  [':path', '/'],
  [':path', '/index.html'],
  [':scheme', 'http'],
  [':scheme', 'https'],
  [':status', '200'],
  [':status', '204'],
  [':status', '206'],
  [':status', '304'],
  [':status', '400'],
  [':status', '404'],
  [':status', '500'],
  ['accept-charset', ''],
  ['accept-encoding', 'gzip, deflate'],
  ['accept-language', ''],
  ['accept-ranges', ''],
  ['accept', ''],
  ['access-control-allow-origin', ''],
  ['age', ''],
  ['allow', ''],
  ['authorization', ''],
  ['cache-control', ''],
  ['content-disposition', ''],
  ['content-encoding', ''],
  ['content-language', ''],
  ['content-length', ''],
  ['content-location', ''],
  ['content-range', ''],
  ['content-type', ''],
  ['cookie', ''],
  ['date', ''],
  ['etag', ''],
  ['expect', ''],
  ['expires', ''],
  ['from', ''],
  ['host', ''],
  ['if-match', ''],
  ['if-modified-since', ''],
  ['if-none-match', ''],
  ['if-range', ''],
  ['if-unmodified-since', ''],
  ['last-modified', ''],
  ['link', ''],
  ['location', ''],
  ['max-forwards', ''],
  ['proxy-authenticate', ''],
  ['proxy-authorization', ''],
  ['range', ''],
  ['referer', ''],
  ['refresh', ''],
  ['retry-after', ''],
  ['server', ''],
  ['set-cookie', ''],
  ['strict-transport-security', ''],
  ['transfer-encoding', ''],
  ['user-agent', ''],
  ['vary', ''],
  ['via', ''],
  ['www-authenticate', ''],
];

// -- Huffman decoding: a binary tree in two arrays, built once. ------------------------
// Node i has children LEFT[i] (bit 0) and RIGHT[i] (bit 1); a leaf holds SYM[i] >= 0.

const TREE_MAX = 512;
const LEFT = new Int16Array(TREE_MAX).fill(-1);
const RIGHT = new Int16Array(TREE_MAX).fill(-1);
const SYM = new Int16Array(TREE_MAX).fill(-1);
{
  let nodes = 1;
  for (let sym = 0; sym < HUFFMAN_CODES.length; sym++) {
    const code = HUFFMAN_CODES[sym];
    const len = HUFFMAN_LENGTHS[sym];
    let node = 0;
    for (let bit = len - 1; bit >= 0; bit--) {
      const one = Math.floor(code / 2 ** bit) % 2 === 1;
      const next = one ? RIGHT : LEFT;
      if (next[node] < 0) next[node] = nodes++;
      node = next[node];
    }
    SYM[node] = sym;
  }
}

/** Decodes a Huffman-coded string (RFC 7541 5.2): padding must be at most 7 bits of the EOS prefix. */
export function huffmanDecode(buf: Buffer, start: number, end: number): string {
  const out: number[] = [];
  let node = 0;
  let depth = 0;
  let allOnes = true;
  for (let i = start; i < end; i++) {
    const byte = buf[i];
    for (let bit = 7; bit >= 0; bit--) {
      const one = (byte >> bit) & 1;
      node = one ? RIGHT[node] : LEFT[node];
      if (node < 0) throw new HpackError('invalid Huffman code');
      depth++;
      allOnes = allOnes && one === 1;
      const sym = SYM[node];
      if (sym >= 0) {
        if (sym === 256) throw new HpackError('EOS in a Huffman-coded string');
        out.push(sym);
        node = 0;
        depth = 0;
        allOnes = true;
      }
    }
  }
  if (depth > 7 || !allOnes) throw new HpackError('invalid Huffman padding');
  return Buffer.from(out).toString('latin1');
}

// -- Decoding ---------------------------------------------------------------------------

/** Header fields as decoded, in order; names are lower case as HTTP/2 requires. */
export type HeaderList = Array<[string, string]>;

/** A decoded block by name, the first value of each (gRPC metadata read by its readers). */
export function firstValues(fields: HeaderList): Map<string, string> {
  const m = new Map<string, string>();
  for (const [name, value] of fields) if (!m.has(name)) m.set(name, value);
  return m;
}

export class HpackDecoder {
  private readonly dynamic: Array<[string, string]> = [];
  private size = 0;
  /** The table's size limit now (the last size update, at most `maxSize`). */
  private limit: number;

  /**
   * `maxSize`: the SETTINGS_HEADER_TABLE_SIZE this side announced; `maxListBytes`: the
   * most a decoded block may hold (names, values and 32 bytes per field, as
   * SETTINGS_MAX_HEADER_LIST_SIZE counts), so references to large table entries cannot
   * blow a small block up.
   */
  constructor(
    private readonly maxSize: number,
    private readonly maxListBytes = 64 * 1024,
  ) {
    this.limit = maxSize;
  }

  decode(block: Buffer): HeaderList {
    const out: HeaderList = [];
    const pos = { at: 0 };
    let first = true;
    let listBytes = 0;
    while (pos.at < block.length) {
      if (out.length > 0) {
        const [n, v] = out[out.length - 1];
        listBytes += n.length + v.length + 32;
        if (listBytes > this.maxListBytes) throw new HpackError(`header list above ${this.maxListBytes} bytes`);
      }
      const b = block[pos.at];
      if (b & 0x80) {
        out.push(this.entry(readInt(block, pos, 7)));
      } else if (b & 0x40) {
        const [name, value] = this.literal(block, pos, 6);
        out.push([name, value]);
        this.insert(name, value);
      } else if (b & 0x20) {
        if (!first && out.length > 0) throw new HpackError('dynamic table size update after a header field');
        const size = readInt(block, pos, 5);
        if (size > this.maxSize) throw new HpackError(`dynamic table size ${size} above the announced ${this.maxSize}`);
        this.evict(size);
        this.limit = size;
        continue;
      } else {
        // Literal without indexing (0000) or never indexed (0001): both have a 4-bit prefix.
        out.push(this.literal(block, pos, 4));
      }
      first = false;
    }
    if (out.length > 0) {
      const [n, v] = out[out.length - 1];
      if (listBytes + n.length + v.length + 32 > this.maxListBytes) throw new HpackError(`header list above ${this.maxListBytes} bytes`);
    }
    return out;
  }

  private entry(index: number): [string, string] {
    if (index === 0) throw new HpackError('header index 0');
    if (index < STATIC_TABLE.length) return STATIC_TABLE[index] as [string, string];
    const d = this.dynamic[index - STATIC_TABLE.length];
    if (d === undefined) throw new HpackError(`header index ${index} beyond the tables`);
    return d;
  }

  private literal(block: Buffer, pos: { at: number }, prefix: number): [string, string] {
    const index = readInt(block, pos, prefix);
    const name = index === 0 ? readString(block, pos) : this.entry(index)[0];
    return [name, readString(block, pos)];
  }

  private insert(name: string, value: string): void {
    const size = name.length + value.length + 32;
    this.evict(this.limit - size);
    if (size <= this.limit) {
      this.dynamic.unshift([name, value]);
      this.size += size;
    }
  }

  private evict(target: number): void {
    while (this.size > Math.max(0, target) && this.dynamic.length > 0) {
      const [n, v] = this.dynamic.pop()!;
      this.size -= n.length + v.length + 32;
    }
  }
}

function readInt(buf: Buffer, pos: { at: number }, prefix: number): number {
  if (pos.at >= buf.length) throw new HpackError('truncated integer');
  const mask = (1 << prefix) - 1;
  let value = buf[pos.at++] & mask;
  if (value < mask) return value;
  let shift = 0;
  for (;;) {
    if (pos.at >= buf.length) throw new HpackError('truncated integer');
    const b = buf[pos.at++];
    value += (b & 0x7f) * 2 ** shift;
    shift += 7;
    if (!(b & 0x80)) return value;
    if (shift > 28) throw new HpackError('integer too large');
  }
}

function readString(buf: Buffer, pos: { at: number }): string {
  if (pos.at >= buf.length) throw new HpackError('truncated string');
  const huffman = (buf[pos.at] & 0x80) !== 0;
  const len = readInt(buf, pos, 7);
  const end = pos.at + len;
  if (end > buf.length) throw new HpackError('truncated string');
  const s = huffman ? huffmanDecode(buf, pos.at, end) : buf.toString('latin1', pos.at, end);
  pos.at = end;
  return s;
}

// -- Encoding ---------------------------------------------------------------------------

function writeInt(out: number[], first: number, prefix: number, value: number): void {
  const mask = (1 << prefix) - 1;
  if (value < mask) {
    out.push(first | value);
    return;
  }
  out.push(first | mask);
  value -= mask;
  while (value >= 0x80) {
    out.push((value % 0x80) | 0x80);
    value = Math.floor(value / 0x80);
  }
  out.push(value);
}

function writeString(out: number[], s: string): void {
  const bytes = Buffer.from(s, 'latin1');
  writeInt(out, 0, 7, bytes.length);
  for (const b of bytes) out.push(b);
}

const STATIC_NAME = new Map<string, number>();
for (let i = STATIC_TABLE.length - 1; i >= 1; i--) STATIC_NAME.set(STATIC_TABLE[i][0], i);

/**
 * A header block of `fields`: `:status: 200` as its static entry, every other field a
 * literal without indexing (its name by static index where the table has it). Values
 * must be latin1 (gRPC's are ASCII, with `grpc-message` percent-encoded).
 */
export function encodeHeaders(fields: ReadonlyArray<readonly [string, string]>): Buffer {
  const out: number[] = [];
  for (const [name, value] of fields) {
    if (name === ':status' && value === '200') {
      out.push(0x88);
      continue;
    }
    const index = STATIC_NAME.get(name);
    if (index !== undefined) writeInt(out, 0x00, 4, index);
    else {
      out.push(0x00);
      writeString(out, name);
    }
    writeString(out, value);
  }
  return Buffer.from(out);
}
