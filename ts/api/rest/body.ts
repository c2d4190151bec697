/**
 * JSON request bodies, read with a size limit.
 *
 * Owns: reading the body of a matched route, the `service.max_request_size_mb` limit
 * (413), the nesting limit (MAX_NESTING_DEPTH, serde_json's recursion limit), and the
 * reference's 400 "Format error in JSON body: ..." for JSON that does not parse, nests
 * too deep, or has a string (value or key) with a lone UTF-16 surrogate (a `\uD800`
 * escape without its pair: JSON.parse accepts it, serde_json does not, and such a
 * string cannot be written as UTF-8: an on-disk index or payload would hold U+FFFD
 * instead). Must never: read a body for a route that did not match (an unknown
 * path answers 404 whatever it was sent), keep more than the limit in memory, or hand
 * a body nested past the limit to JSON.parse (V8 parses any depth, but a 32 MB body of
 * brackets holds the event loop for half a minute and gigabytes of heap, and every
 * recursive walk after it would run out of stack).
 */

import type { IncomingMessage } from 'node:http';
import type { Context, Next } from 'koa';

import { FormatError } from '../../common/errors';
import { MAX_NESTING_DEPTH } from '../../shard/limits';
import { ClientClosedError, PayloadTooLargeError } from '../errors';
import { readJsonNumbers, type VectorPlaces } from './json-numbers';

declare module 'koa' {
  interface Request {
    /** The parsed JSON body; undefined when the request had none. */
    body?: unknown;
  }
}

const METHODS_WITH_BODY = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/**
 * Route middleware: parses a JSON body of at most `limitBytes` into `ctx.request.body`.
 * `places`: where the route's bodies hold dense vectors that may come as Float32Arrays
 * (readJsonNumbers; ts/api/request/parse.ts denseVector takes them).
 */
export function jsonBody(limitBytes: number, places: VectorPlaces = 'none') {
  return async function parseJsonBody(ctx: Context, next: Next): Promise<void> {
    if (METHODS_WITH_BODY.has(ctx.method)) ctx.request.body = await readJsonBody(ctx.req, limitBytes, places);
    await next();
  };
}

/** The request's JSON body (undefined when empty), read with the size limit: 413 over it, 400 when it does not parse. */
export async function readJsonBody(req: IncomingMessage, limitBytes: number, places: VectorPlaces = 'none'): Promise<unknown> {
  const raw = await readLimited(req, limitBytes);
  return raw.length === 0 ? undefined : parseJson(raw, places);
}

/**
 * From this size on, a body is read by readJsonNumbers first (JSON.parse when it gives
 * up): large bodies are upserts and batches, mostly vectors, where it is faster than
 * decoding the text and JSON.parse; small ones gain nothing from it, unless they hold
 * a query vector (`'queries'`): V8 spends most of a query body's parse converting its
 * 17-digit decimals to doubles, which the reader's float32 path does several times
 * faster.
 */
const NUMBERS_READER_BYTES = 16 * 1024;

/** A whole JSON body (non-empty) as readJsonBody parses it: 400 when it does not parse or nests too deep. */
export function parseJsonBody(raw: Buffer, places: VectorPlaces = 'none'): unknown {
  return parseJson(raw, places);
}

function parseJson(raw: Buffer, places: VectorPlaces): unknown {
  // The reader gives up on anything nested deeper than the limit, so what it reads needs no
  // depth check; and on every string with an escape, so what it reads has no lone surrogate.
  if (places === 'queries' || raw.length >= NUMBERS_READER_BYTES) {
    const v = readJsonNumbers(raw, places, MAX_NESTING_DEPTH);
    if (v !== undefined) return v;
  }
  const deep = nestedTooDeepAt(raw, MAX_NESTING_DEPTH);
  if (deep >= 0) {
    const { line, column } = lineColumn(raw, deep);
    throw new FormatError(`recursion limit exceeded at line ${line} column ${column}: arrays and objects may nest at most ${MAX_NESTING_DEPTH} levels deep`);
  }
  let value: unknown;
  try {
    value = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    // Not expected after the depth check, but a parser that runs out of stack is still the body's fault.
    if (err instanceof RangeError) throw new FormatError(`recursion limit exceeded: arrays and objects may nest at most ${MAX_NESTING_DEPTH} levels deep`);
    throw new FormatError(err instanceof Error ? err.message : String(err));
  }
  if (hasSurrogateEscape(raw)) {
    const bad = loneSurrogateString(value);
    if (bad !== null) {
      throw new FormatError(`lone surrogate in a \\u escape of string ${bad}: a high surrogate escape (\\uD800-\\uDBFF) must be followed by a low one (\\uDC00-\\uDFFF), and a low one must follow a high one`);
    }
  }
  return value;
}

const LOWER_D = 0x64;
const UPPER_D = 0x44;

/**
 * Whether the raw body has a `\u` escape of a surrogate (`\uD8..` to `\uDF..`, either
 * case): the only way a parsed string can hold a lone surrogate, since decoding UTF-8
 * never yields one. A few memchr calls (a backslash escaping a backslash is skipped, so
 * `\\ud800`, text and no escape, does not count).
 */
export function hasSurrogateEscape(raw: Buffer): boolean {
  for (let i = raw.indexOf(BACKSLASH); i >= 0 && i + 3 < raw.length; i = raw.indexOf(BACKSLASH, i + 1)) {
    if (raw[i + 1] !== 0x75 /* u */) {
      i++; // the escaped character (a backslash too) starts nothing
      continue;
    }
    const d = raw[i + 2];
    const h = raw[i + 3] | 0x20; // lowercase for letters
    if ((d === LOWER_D || d === UPPER_D) && ((h >= 0x38 && h <= 0x39) || (h >= 0x61 && h <= 0x66))) return true;
  }
  return false;
}

/** A string for an error message: JSON-quoted (a lone surrogate shows as its escape), its first 40 characters. */
function quoted(s: string): string {
  return s.length > 40 ? `${JSON.stringify(s.slice(0, 40))}...` : JSON.stringify(s);
}

function wellFormed(s: string): boolean {
  return (s as unknown as { isWellFormed(): boolean }).isWellFormed();
}

/** The first string (value or key) of a parsed body holding a lone surrogate, JSON-quoted (escapes shown), or null. */
function loneSurrogateString(root: unknown): string | null {
  const stack: unknown[] = [root];
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === 'string') {
      if (!wellFormed(v)) return quoted(v);
    } else if (Array.isArray(v)) {
      for (const x of v) stack.push(x);
    } else if (v !== null && typeof v === 'object' && !ArrayBuffer.isView(v)) {
      for (const [k, x] of Object.entries(v)) {
        if (!wellFormed(k)) return quoted(k);
        stack.push(x);
      }
    }
  }
  return null;
}

const OPEN_ARRAY = 0x5b; // [
const OPEN_OBJECT = 0x7b; // {
const CLOSE_ARRAY = 0x5d; // ]
const CLOSE_OBJECT = 0x7d; // }
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
/** The bytes the depth scan acts on, in the order of `next` in jumpScan: two openers, two closers, the quote. */
const STRUCTURAL = [OPEN_ARRAY, OPEN_OBJECT, CLOSE_ARRAY, CLOSE_OBJECT, QUOTE] as const;
/** Per byte: 0 nothing, 1 opens, 2 closes, 3 starts a string. */
const BYTE_CLASS = new Uint8Array(256);
BYTE_CLASS[OPEN_ARRAY] = BYTE_CLASS[OPEN_OBJECT] = 1;
BYTE_CLASS[CLOSE_ARRAY] = BYTE_CLASS[CLOSE_OBJECT] = 2;
BYTE_CLASS[QUOTE] = 3;
/** Fewer bytes than this per structural byte, and a byte loop beats a memchr per structural byte. */
const DENSE_BYTES = 32;

/**
 * The offset of the first `[` or `{` (outside strings) that opens level `max + 1`, or
 * -1. Iterative and O(bytes), and nearly free for what the hot routes get: a body with
 * at most `max` opening brackets cannot nest deeper, and counting them is a few native
 * memchr calls. Other bodies (batches, upserts) are scanned by jumping from one
 * structural byte to the next with memchr, which skips vectors and numbers natively,
 * and by a byte loop where structural bytes are dense (payloads). Malformed JSON is left
 * to JSON.parse.
 */
export function nestedTooDeepAt(raw: Buffer, max: number): number {
  return moreOpeningsThan(raw, max) ? jumpScan(raw, max) : -1;
}

function moreOpeningsThan(raw: Buffer, n: number): boolean {
  let count = 0;
  for (let i = raw.indexOf(OPEN_ARRAY); i >= 0; i = raw.indexOf(OPEN_ARRAY, i + 1)) if (++count > n) return true;
  for (let i = raw.indexOf(OPEN_OBJECT); i >= 0; i = raw.indexOf(OPEN_OBJECT, i + 1)) if (++count > n) return true;
  return false;
}

function jumpScan(raw: Buffer, max: number): number {
  const next = STRUCTURAL.map((b) => raw.indexOf(b));
  let depth = 0;
  for (let steps = 1; ; steps++) {
    let kind = -1;
    let at = raw.length;
    for (let j = 0; j < next.length; j++) {
      if (next[j] >= 0 && next[j] < at) {
        at = next[j];
        kind = j;
      }
    }
    if (kind < 0) return -1;
    let from = at + 1;
    if (kind === 4) {
      const end = stringEnd(raw, at);
      if (end < 0) return -1;
      from = end + 1;
    } else if (kind < 2) {
      if (++depth > max) return at;
    } else depth--;
    if (steps % 256 === 0 && from < steps * DENSE_BYTES) return byteScan(raw, max, from, depth);
    for (let j = 0; j < next.length; j++) if (next[j] >= 0 && next[j] < from) next[j] = raw.indexOf(STRUCTURAL[j], from);
  }
}

function byteScan(raw: Buffer, max: number, start: number, depth: number): number {
  for (let i = start; i < raw.length; i++) {
    const kind = BYTE_CLASS[raw[i]];
    if (kind === 0) continue;
    if (kind === 1) {
      if (++depth > max) return i;
    } else if (kind === 2) depth--;
    else {
      i = stringEnd(raw, i);
      if (i < 0) return -1;
    }
  }
  return -1;
}

/** The offset of the quote that closes the string opened at `open`, or -1. */
function stringEnd(raw: Buffer, open: number): number {
  for (let i = raw.indexOf(QUOTE, open + 1); i >= 0; i = raw.indexOf(QUOTE, i + 1)) {
    let backslashes = 0;
    for (let j = i - 1; raw[j] === BACKSLASH; j--) backslashes++;
    if (backslashes % 2 === 0) return i;
  }
  return -1;
}

/** 1-based line and column of a byte offset, as serde_json reports positions. */
function lineColumn(raw: Buffer, offset: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let i = raw.indexOf(0x0a); i >= 0 && i < offset; i = raw.indexOf(0x0a, i + 1)) {
    line++;
    lineStart = i + 1;
  }
  return { line, column: offset - lineStart + 1 };
}

function tooLarge(limitBytes: number): PayloadTooLargeError {
  const mb = limitBytes / (1024 * 1024);
  return new PayloadTooLargeError(`request body is larger than the limit of ${mb} MB (service.max_request_size_mb)`);
}

function readLimited(req: IncomingMessage, limitBytes: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  // Refuse before reading when the client says how much it will send.
  if (Number.isFinite(declared) && declared > limitBytes) {
    discard(req);
    return Promise.reject(tooLarge(limitBytes));
  }
  // The client left before the body was read (while an async guard decided): no
  // stream event will ever come, so answer now instead of waiting forever.
  if (req.destroyed) return Promise.reject(new ClientClosedError('the client went away before its body was read'));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let received = 0;
    const cleanup = () => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onError);
      req.off('aborted', onAborted);
    };
    const onData = (chunk: Buffer) => {
      received += chunk.length;
      if (received > limitBytes) {
        cleanup();
        discard(req);
        reject(tooLarge(limitBytes));
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      cleanup();
      resolve(Buffer.concat(chunks, received));
    };
    const onError = (err: Error) => {
      cleanup();
      reject(err);
    };
    const onAborted = () => {
      cleanup();
      reject(new ClientClosedError('the client went away while its body was being read'));
    };
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('error', onError);
    req.on('aborted', onAborted);
  });
}

/** Lets the rest of a refused body flow away unread, so the client can read the answer. */
function discard(req: IncomingMessage): void {
  req.on('error', () => {});
  req.resume();
}
