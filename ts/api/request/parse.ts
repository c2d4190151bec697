/**
 * Readers for the parts of requests that many operations share, in the JSON form of
 * the reference's API (REST bodies and query strings; the gRPC API translates its
 * messages to this form): query parameters (`wait`, `ordering`, `timeout`,
 * `consistency`), point ids, vectors, filters and the `with_payload` / `with_vector`
 * selectors.
 *
 * Owns: turning JSON into the typed values the collection layer takes, with the
 * reference's status codes for bad input (400 for what does not deserialize, 422 for
 * what does but breaks a rule). Must never: look at stored data.
 */

import type { Access } from '../../auth/access';
import type { ParsedUrlQuery } from 'node:querystring';

import { BadInputError, FormatError, ValidationError } from '../../common/errors';
import { markMultivector } from '../../common/multivector';
import { QueryFormatError } from '../errors';
import { FilterError, validateFilter, type Filter } from '../../shard/filter';
import { MAX_ENGINE_COUNT } from '../../shard/limits';
import { normalizePointId, PointIdError, type PointKey } from '../../shard/id-tracker';
import { parsePath, PayloadError, validatePayload, type Payload, type WithPayload } from '../../shard/payload-store';
import type { NamedVectors } from '../../shard/operations';
import { DEFAULT_READ, type ReadOptions, type UpdateOptions, type WithVector } from '../../collection/replica';
import type { ShardKey, ShardSelector } from '../../collection/shard-keys';

export type Obj = Record<string, unknown>;

/**
 * What a route handler reads of a request: path parameters (percent-decoded), query
 * parameters and the parsed JSON body. A Koa context is one; so is what the direct
 * lane (direct.ts) builds, so a handler written against this serves both.
 */
export interface RequestInput {
  /** Optional in the type only because Koa's Context does not declare the router's params. */
  params?: Record<string, string>;
  query: ParsedUrlQuery;
  request: { body?: unknown };
  /** The caller's access as the guard decided it; absent when no guard ran (authentication off). */
  access?: Access;
}

/**
 * A query string (without `?`) as Koa's `ctx.query` holds it: URLSearchParams rules, a
 * repeated key as an array. The direct lane parses with this so both paths read the
 * same parameters (node:querystring differs: it keeps a second leading `?` in the key
 * and stops after 1000 keys).
 */
export function parseQueryString(text: string): ParsedUrlQuery {
  const out: ParsedUrlQuery = {};
  if (text === '') return out;
  const sp = new URLSearchParams(text);
  for (const key of sp.keys()) {
    const values = sp.getAll(key);
    // defineProperty: a key such as `__proto__` is a plain property, as in Koa.
    Object.defineProperty(out, key, { value: values.length <= 1 ? values[0] : values, writable: true, enumerable: true, configurable: true });
  }
  return out;
}

export function isObj(x: unknown): x is Obj {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

export function body(ctx: RequestInput): Obj {
  const b = ctx.request.body;
  if (b === undefined) throw new FormatError('EOF while parsing a value at line 1 column 0');
  if (!isObj(b)) throw new FormatError('expected a JSON object');
  return b;
}

/** A body that may be absent (then `{}`). */
export function optionalBody(ctx: RequestInput): Obj {
  const b = ctx.request.body;
  if (b === undefined || b === null) return {};
  if (!isObj(b)) throw new FormatError('expected a JSON object');
  return b;
}

export function queryBool(ctx: Pick<RequestInput, 'query'>, name: string, dflt: boolean): boolean {
  const v = ctx.query[name];
  if (v === undefined) return dflt;
  if (v === 'true') return true;
  if (v === 'false') return false;
  throw new QueryFormatError(`${name}: provided string was not \`true\` or \`false\``);
}

/** `?wait=` (default false), `ordering` (default weak) and `timeout` of a write. */
export function writeParams(ctx: Pick<RequestInput, 'query'>): UpdateOptions {
  const ordering = ctx.query.ordering;
  if (ordering !== undefined && ordering !== 'weak' && ordering !== 'medium' && ordering !== 'strong') {
    throw new QueryFormatError(`ordering: unknown variant \`${String(ordering)}\`, expected one of \`weak\`, \`medium\`, \`strong\``);
  }
  const timeout = readTimeout(ctx);
  return { wait: queryBool(ctx, 'wait', false), ordering: ordering ?? 'weak', timeout };
}

/** `consistency` (default 1) and `timeout` of a read; without either, the shared DEFAULT_READ. */
export function readParams(ctx: Pick<RequestInput, 'query'>): ReadOptions {
  const c = ctx.query.consistency;
  if (c !== undefined && !['majority', 'quorum', 'all'].includes(String(c)) && !/^[1-9][0-9]*$/.test(String(c))) {
    throw new QueryFormatError(`consistency: expected a positive integer, \`majority\`, \`quorum\` or \`all\`, got \`${String(c)}\``);
  }
  const timeout = readTimeout(ctx);
  if (c === undefined && timeout === null) return DEFAULT_READ;
  const level = String(c ?? '1');
  return { consistency: level === 'majority' || level === 'quorum' || level === 'all' ? level : { factor: Number(level) }, timeout };
}

/** Checks `?timeout=` (seconds); every route that takes one accepts any value here. */
export function readTimeout(ctx: Pick<RequestInput, 'query'>): number | null {
  const t = ctx.query.timeout;
  if (t !== undefined && !/^[0-9]+$/.test(String(t))) throw new QueryFormatError(`timeout: invalid digit found in string`);
  if (t === undefined) return null;
  const n = Number(t);
  // 0 means "the default" rather than an immediate timeout.
  return n > 0 ? Math.min(n, 3600) : null;
}

export function pointId(x: unknown, field: string): PointKey {
  try {
    return normalizePointId(x);
  } catch (err) {
    if (err instanceof PointIdError) throw new FormatError(`${field}: ${err.message}`);
    throw err;
  }
}

export function pointIds(x: unknown, field: string): PointKey[] {
  if (!Array.isArray(x)) throw new FormatError(`${field}: expected an array of point ids`);
  return x.map((v, i) => pointId(v, `${field}[${i}]`));
}

export function filter(x: unknown, field = 'filter'): Filter | null {
  if (x === undefined || x === null) return null;
  try {
    return validateFilter(x);
  } catch (err) {
    if (err instanceof FilterError) throw new FormatError(`${field}: ${err.message}`);
    throw err;
  }
}

export function payload(x: unknown, field: string): Payload {
  if (!isObj(x)) throw new FormatError(`${field}: expected a JSON object`);
  try {
    validatePayload(x);
  } catch (err) {
    if (err instanceof PayloadError) throw new FormatError(`${field}: ${err.message}`);
    throw err;
  }
  return x as Payload;
}

/** A payload key path (`a.b`, `a[].b`); refused here, before anything is read or written, when it does not parse. */
export function keyPath(x: unknown, field: string): string {
  if (typeof x !== 'string') throw new FormatError(`${field}: expected a string`);
  try {
    parsePath(x);
  } catch (err) {
    if (err instanceof PayloadError) throw new FormatError(`${field}: ${err.message}`);
    throw err;
  }
  return x;
}

export function withPayload(x: unknown, dflt: boolean): WithPayload {
  if (x === undefined || x === null) return dflt;
  if (typeof x === 'boolean') return x;
  if (Array.isArray(x) && x.every((k) => typeof k === 'string')) {
    x.forEach((k, i) => keyPath(k, `with_payload[${i}]`));
    return x as string[];
  }
  if (isObj(x)) {
    const keys = Object.keys(x);
    if (keys.length === 1 && (keys[0] === 'include' || keys[0] === 'exclude') && Array.isArray(x[keys[0]]) && (x[keys[0]] as unknown[]).every((k) => typeof k === 'string')) {
      (x[keys[0]] as string[]).forEach((k, i) => keyPath(k, `with_payload.${keys[0]}[${i}]`));
      return x as WithPayload;
    }
  }
  throw new FormatError('with_payload: expected a boolean, an array of keys, {"include": [...]} or {"exclude": [...]}');
}

export function withVector(x: unknown, dflt: boolean): WithVector {
  if (x === undefined || x === null) return dflt;
  if (typeof x === 'boolean') return x;
  if (Array.isArray(x) && x.every((k) => typeof k === 'string')) return x as string[];
  throw new FormatError('with_vector: expected a boolean or an array of vector names');
}

/** An unsigned integer field: 400 when it is not one, 422 when it is outside `min..max`. */
export function uint(x: unknown, field: string, dflt: number, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  if (x === undefined || x === null) return dflt;
  if (typeof x !== 'number' || !Number.isSafeInteger(x) || x < 0) throw new FormatError(`${field}: expected an unsigned integer, got ${JSON.stringify(x)}`);
  if (x < min) throw new ValidationError(`${field}: value ${x} invalid, must be ${min} or larger`);
  if (x > max) throw new ValidationError(`${field}: value ${x} invalid, must be ${max} or smaller`);
  return x;
}

/** An unsigned integer that becomes an engine count (limit, offset, hnsw_ef): at most MAX_ENGINE_COUNT. */
export function engineCount(x: unknown, field: string, dflt: number, min = 0): number {
  return uint(x, field, dflt, min, MAX_ENGINE_COUNT);
}

/**
 * A dense vector: an array of finite numbers; or a multivector, an array of such arrays
 * of one length, flattened and marked with its row count (ts/common/multivector.ts).
 */
export function denseVector(x: unknown, field: string): Float32Array {
  // Read as float32 already by the REST body reader (ts/api/rest/json-numbers.ts): finite, not empty, its own copy.
  if (x instanceof Float32Array && x.length > 0) return x;
  refuseInference(x, field);
  if (!Array.isArray(x)) throw new FormatError(`${field}: expected an array of numbers`);
  if (x.length > 0 && Array.isArray(x[0])) return multiVector(x, field);
  const out = new Float32Array(x.length);
  for (let i = 0; i < x.length; i++) {
    const v = x[i];
    if (typeof v !== 'number') {
      if (Array.isArray(v)) throw new FormatError(`${field}: multivectors (arrays of arrays) are not supported by Quiver`);
      throw new FormatError(`${field}[${i}]: expected a number, got ${JSON.stringify(v)}`);
    }
    if (!Number.isFinite(v) || !Number.isFinite(Math.fround(v))) throw new FormatError(`${field}[${i}]: ${v} is not a finite 32-bit float`);
    out[i] = v;
  }
  if (out.length === 0) throw new ValidationError(`${field}: a vector needs at least one value`);
  return out;
}

function multiVector(x: unknown[], field: string): Float32Array {
  const dim = (x[0] as unknown[]).length;
  if (dim === 0) throw new BadInputError(`${field}[0]: a vector of a multivector needs at least one value`);
  const out = new Float32Array(x.length * dim);
  x.forEach((row, r) => {
    if (!Array.isArray(row)) throw new FormatError(`${field}[${r}]: expected an array of numbers (every element of a multivector is a vector)`);
    if (row.length !== dim) throw new BadInputError(`${field}: all vectors of a multivector must have the same dimension: ${field}[0] has ${dim}, ${field}[${r}] has ${row.length}`);
    out.set(denseVector(row, `${field}[${r}]`), r * dim);
  });
  return markMultivector(out, x.length);
}

/** A Document, Image or InferenceObject of the reference's API (a `model` and its input) where a vector belongs: refused by name. */
export function refuseInference(x: unknown, field: string): void {
  if (isObj(x) && 'model' in x && ('text' in x || 'image' in x || 'object' in x)) {
    throw new FormatError(`${field}: inference documents are not supported by Quiver; send vectors`);
  }
}

function isSparse(x: unknown): boolean {
  return isObj(x) && 'indices' in x && 'values' in x;
}

/**
 * The dense vectors of a point: a bare array is the unnamed vector, an object maps names
 * to arrays; its sparse vectors (`{indices, values}` under a name) are read by
 * `pointSparse` (sparse.ts). Multi-vectors are refused with a clear error.
 */
export function pointVectors(x: unknown, field: string): NamedVectors {
  const out: NamedVectors = new Map();
  if (Array.isArray(x) || x instanceof Float32Array) {
    out.set('', denseVector(x, field));
    return out;
  }
  if (isObj(x)) {
    if (isSparse(x)) throw new FormatError(`${field}: a sparse vector must be given under its name ({"name": {"indices": [...], "values": [...]}})`);
    // An inference document names a model; `text` alone may just be a vector name.
    refuseInference(x, field);
    for (const [name, v] of Object.entries(x)) {
      if (isObj(v) && 'indices' in v) continue;
      out.set(name, denseVector(v, `${field}.${name}`));
    }
    return out;
  }
  throw new FormatError(`${field}: expected an array of numbers or an object of named vectors`);
}

/** A shard key: a string, or an unsigned integer (at most 2^53 - 1, as integer point ids). */
export function shardKey(x: unknown, field: string): ShardKey {
  if (typeof x === 'string') return x;
  if (typeof x === 'number' && Number.isInteger(x) && x >= 0) {
    if (!Number.isSafeInteger(x)) throw new FormatError(`${field}: integer shard keys above 2^53 - 1 are not supported by Quiver`);
    return x;
  }
  throw new FormatError(`${field}: expected a shard key (a string or an unsigned integer), got ${JSON.stringify(x)}`);
}

/**
 * A `shard_key` selector (ShardKeySelector): one key, a list of keys, or
 * `{"target": key, "fallback": key}`; null when absent.
 */
export function shardKeySelector(x: unknown, field = 'shard_key'): ShardSelector | null {
  if (x === undefined || x === null) return null;
  if (Array.isArray(x)) return x.map((k, i) => shardKey(k, `${field}[${i}]`));
  if (isObj(x)) {
    if (x.target === undefined || x.target === null) throw new FormatError(`${field}: missing field \`target\``);
    if (x.fallback === undefined || x.fallback === null) throw new FormatError(`${field}: missing field \`fallback\``);
    return { target: shardKey(x.target, `${field}.target`), fallback: shardKey(x.fallback, `${field}.fallback`) };
  }
  return [shardKey(x, field)];
}

/** Rejects body keys that Quiver does not serve (instead of silently ignoring them). */
export function refuse(o: Obj, keys: Record<string, string>): void {
  for (const [k, why] of Object.entries(keys)) {
    if (o[k] !== undefined && o[k] !== null) throw new FormatError(`${k}: ${why}`);
  }
}

export function param(ctx: RequestInput, name: string): string {
  // The router (or the direct lane) has already percent-decoded path parameters.
  return String(ctx.params?.[name]);
}
