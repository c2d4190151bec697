/**
 * `qdrant.Value` / `qdrant.Struct` (json_with_int.proto: google.protobuf.Value with an
 * integer kind) to JSON and back, as proto-loader hands them over and takes them
 * (`keepCase`, longs as decimal strings, enums as names, unset fields absent, each oneof
 * named by its virtual field).
 *
 * The one translation of JSON values for the whole gRPC API: payloads in requests and
 * answers, inference options, collection metadata.
 *
 * Owns: that translation, bounded in depth both ways (a message nested deeper than a JSON
 * body may be is refused here, before any recursive parser sees it; a stored value nested
 * deeper than protobuf can carry in an answer is refused with a clear error rather than
 * failing in the encoder), a refusal of a Value with no kind set, and which numbers go out
 * as integers. Must never: validate payloads (ts/api/request/parse.ts does, for every API
 * alike).
 */

import { BadInputError, FormatError } from '../../../common/errors';
import { MAX_NESTING_DEPTH } from '../../../shard/limits';
import { int64 } from './common';

/** A `qdrant.Value` as decoded. */
export interface ValueMsg {
  kind?: string;
  null_value?: string | number;
  double_value?: number;
  integer_value?: string | number;
  string_value?: string;
  bool_value?: boolean;
  struct_value?: { fields?: Record<string, ValueMsg> };
  list_value?: { values?: ValueMsg[] };
}

/** A `map<string, Value>` as decoded (absent when empty). */
export type ValueMap = Record<string, ValueMsg> | undefined;

function tooDeep(field: string): FormatError {
  return new FormatError(`${field}: arrays and objects may nest at most ${MAX_NESTING_DEPTH} levels deep`);
}

/** One Value to JSON; `depth` counts the arrays and objects around it. */
export function valueToJson(v: ValueMsg | undefined, field: string, depth = 0): unknown {
  if (v === undefined || v === null) return null;
  switch (v.kind) {
    case 'null_value':
      return null;
    case 'double_value':
      return v.double_value ?? 0;
    case 'integer_value':
      return int64(v.integer_value);
    case 'string_value':
      return v.string_value ?? '';
    case 'bool_value':
      return v.bool_value ?? false;
    case 'struct_value':
      if (depth >= MAX_NESTING_DEPTH) throw tooDeep(field);
      return mapToJson(v.struct_value?.fields, field, depth + 1);
    case 'list_value': {
      if (depth >= MAX_NESTING_DEPTH) throw tooDeep(field);
      const values = v.list_value?.values ?? [];
      return values.map((x, i) => valueToJson(x, `${field}[${i}]`, depth + 1));
    }
    default:
      // "A producer of value is expected to set one of those variants, absence of any variant indicates an error."
      throw new FormatError(`${field}: a Value with no kind set`);
  }
}

/** A `map<string, Value>` (a payload, a Struct's fields) to a JSON object. */
export function mapToJson(m: ValueMap, field: string, depth = 0): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (m === undefined || m === null) return out;
  for (const [k, v] of Object.entries(m)) {
    // defineProperty: a key such as `__proto__` stays a plain property, as JSON.parse keeps it.
    Object.defineProperty(out, k, { value: valueToJson(v, `${field}.${k}`, depth), writable: true, enumerable: true, configurable: true });
  }
  return out;
}

/**
 * How deep protobuf messages may nest: the limit of protobufjs (which encodes our answers
 * and refuses to go deeper) and of the official clients' decoders alike.
 */
export const PROTO_MAX_DEPTH = 100;

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** Where a JSON value is written in an answer, for the error when it nests too deep to be carried. */
export interface ValueAt {
  /** How many messages enclose its Value (a payload's values in GetResponse: 2, the response and the RetrievedPoint). */
  depth: number;
  /** What it is, for the error ("the payload of point 7"). */
  what: string;
}

function tooDeepForProto(at: ValueAt): BadInputError {
  // The message levels of everything around the first Value, and two per level of nesting.
  const room = Math.max(0, Math.floor((PROTO_MAX_DEPTH - at.depth) / 2));
  return new BadInputError(
    `${at.what} nests deeper than a gRPC answer can carry here (protobuf messages nest at most ${PROTO_MAX_DEPTH} levels, which leaves ${room} levels of arrays and objects); read it over REST, or leave it out of the answer`,
  );
}

/**
 * A JSON value (as stored: finite numbers, no undefined) to a Value enclosed by
 * `at.depth` messages. A number is an `integer_value` only when it is an integer that
 * fits int64 and that a JSON reader keeps exact (a REST client reads `1` as an integer
 * too); any other number (1e300, 2^64, -0.5) is a `double_value`, so it always encodes.
 */
export function jsonToValue(x: unknown, at: ValueAt): ValueMsg {
  return toValue(x, at.depth, at);
}

/** jsonToValue for a Value at message depth `depth`, inside the value described by `at`. */
function toValue(x: unknown, depth: number, at: ValueAt): ValueMsg {
  if (depth > PROTO_MAX_DEPTH) throw tooDeepForProto(at);
  if (x === null || x === undefined) return { null_value: 'NULL_VALUE' };
  switch (typeof x) {
    case 'boolean':
      return { bool_value: x };
    case 'string':
      return { string_value: x };
    case 'number':
      return Number.isSafeInteger(x) ? { integer_value: String(x) } : { double_value: x };
    case 'bigint':
      return x >= INT64_MIN && x <= INT64_MAX ? { integer_value: x.toString() } : { double_value: Number(x) };
    case 'object': {
      // The ListValue or Struct is one level below this Value, its values two.
      if (depth + 1 > PROTO_MAX_DEPTH) throw tooDeepForProto(at);
      if (Array.isArray(x)) return { list_value: { values: x.map((v) => toValue(v, depth + 2, at)) } };
      return { struct_value: { fields: toMap(x as Record<string, unknown>, depth + 2, at) } };
    }
    default:
      return { null_value: 'NULL_VALUE' };
  }
}

/**
 * A JSON object to a `map<string, Value>` whose values sit at `at.depth` (a payload in a
 * RetrievedPoint of a GetResponse: 2). Throws a bad-input error naming `at.what` when a
 * value nests deeper than protobuf can carry there (JSON allows deeper: a REST body may
 * nest 127 levels).
 */
export function jsonToMap(o: Record<string, unknown> | null | undefined, at: ValueAt): Record<string, ValueMsg> {
  return toMap(o, at.depth, at);
}

function toMap(o: Record<string, unknown> | null | undefined, depth: number, at: ValueAt): Record<string, ValueMsg> {
  const out: Record<string, ValueMsg> = {};
  if (o === null || o === undefined) return out;
  for (const k of Object.keys(o)) {
    Object.defineProperty(out, k, { value: toValue(o[k], depth, at), writable: true, enumerable: true, configurable: true });
  }
  return out;
}
