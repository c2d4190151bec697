/**
 * `qdrant.Value` / `qdrant.Struct` (json_with_int.proto: google.protobuf.Value with an
 * integer kind) to JSON and back, as proto-loader hands them over and takes them
 * (`keepCase`, longs as decimal strings, enums as names, unset fields absent, each oneof
 * named by its virtual field).
 *
 * Owns: that translation, bounded in depth (a message nested deeper than a JSON body may
 * be is refused here, before any recursive parser sees it). Must never: validate
 * payloads (ts/api/request/parse.ts does, for every API alike).
 */

import { FormatError } from '../../../common/errors';
import { MAX_NESTING_DEPTH } from '../../../shard/limits';

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

/**
 * An int64 as proto-loader gives it (a decimal string) to the JSON number a REST body
 * would hold: exact up to 2^53 - 1, rounded beyond, as JSON.parse rounds it.
 */
export function int64(x: string | number | undefined): number {
  return x === undefined ? 0 : Number(x);
}

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

/** A JSON value (as stored: finite numbers, no undefined) to a Value. */
export function jsonToValue(x: unknown): ValueMsg {
  if (x === null || x === undefined) return { null_value: 'NULL_VALUE' };
  switch (typeof x) {
    case 'boolean':
      return { bool_value: x };
    case 'string':
      return { string_value: x };
    case 'number':
      // Integers a JSON reader keeps exact go out as integers (a REST client reads `1` as an integer too).
      return Number.isSafeInteger(x) ? { integer_value: String(x) } : { double_value: x };
    case 'bigint':
      return { integer_value: x.toString() };
    case 'object':
      if (Array.isArray(x)) return { list_value: { values: x.map(jsonToValue) } };
      return { struct_value: { fields: jsonToMap(x as Record<string, unknown>) } };
    default:
      return { null_value: 'NULL_VALUE' };
  }
}

/** A JSON object to a `map<string, Value>`. */
export function jsonToMap(o: Record<string, unknown> | null | undefined): Record<string, ValueMsg> {
  const out: Record<string, ValueMsg> = {};
  if (o === null || o === undefined) return out;
  for (const k of Object.keys(o)) {
    Object.defineProperty(out, k, { value: jsonToValue(o[k]), writable: true, enumerable: true, configurable: true });
  }
  return out;
}
