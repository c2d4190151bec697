/**
 * Small translations between proto messages (as @grpc/proto-loader gives and takes
 * them: 64-bit integers as decimal strings, enums by name, unset fields absent) and the
 * JSON form of the reference's API that ts/api/request parses: integers, timeouts, JSON
 * values (`qdrant.Value`), shard keys, timestamps, and the `time` of a response.
 *
 * Owns: those conversions, shared by every service module. Must never: validate beyond
 * the conversion itself (the JSON-form parsers do, with the same texts as REST).
 */

import type { ShardKey } from '../../collection/shard-keys';
import { FormatError } from '../../common/errors';
import type { GrpcCallContext } from './method';

/** Seconds since `started` (process.hrtime.bigint()): the `time` of a response. */
export function seconds(started: bigint): number {
  return Number(process.hrtime.bigint() - started) / 1e9;
}

/** A proto 64-bit integer (a decimal string) as a JSON number; absent stays absent. */
export function num(x: string | number | undefined | null): number | undefined {
  if (x === undefined || x === null) return undefined;
  return typeof x === 'number' ? x : Number(x);
}

/** A JSON number as a proto 64-bit integer (a decimal string); absent stays absent. */
export function int64(x: number | null | undefined): string | undefined {
  if (x === undefined || x === null) return undefined;
  return String(x);
}

/**
 * The consensus wait of a metadata change, in seconds (as REST's `?timeout=`): the
 * request's `timeout` (0: the default; at most an hour), bounded by the client's
 * deadline when it set one.
 */
export function timeoutSeconds(timeout: string | number | undefined, ctx: GrpcCallContext): number | null {
  const t = num(timeout);
  let out = t === undefined || t <= 0 ? null : Math.min(t, 3600);
  if (ctx.timeoutMs !== null) {
    const byDeadline = Math.max(1, Math.ceil(ctx.timeoutMs / 1000));
    out = out === null ? byDeadline : Math.min(out, byDeadline);
  }
  return out;
}

/** `qdrant.Value`. */
export interface ProtoValue {
  null_value?: string;
  double_value?: number;
  integer_value?: string;
  string_value?: string;
  bool_value?: boolean;
  struct_value?: { fields?: Record<string, ProtoValue> };
  list_value?: { values?: ProtoValue[] };
  kind?: string;
}

/** A `qdrant.Value` as JSON. */
export function jsonOf(v: ProtoValue | undefined): unknown {
  if (v === undefined || v === null) return null;
  if (v.string_value !== undefined) return v.string_value;
  if (v.integer_value !== undefined) return Number(v.integer_value);
  if (v.double_value !== undefined) return v.double_value;
  if (v.bool_value !== undefined) return v.bool_value;
  if (v.struct_value !== undefined) return jsonObjectOf(v.struct_value.fields);
  if (v.list_value !== undefined) return (v.list_value.values ?? []).map(jsonOf);
  return null;
}

/** A map of `qdrant.Value`s (a Struct's fields, a payload) as a JSON object. */
export function jsonObjectOf(fields: Record<string, ProtoValue> | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields ?? {})) Object.defineProperty(out, k, { value: jsonOf(v), enumerable: true, writable: true, configurable: true });
  return out;
}

/** JSON as a `qdrant.Value` (integers as integer_value, other numbers as double_value). */
export function valueOf(x: unknown): ProtoValue {
  if (x === null || x === undefined) return { null_value: 'NULL_VALUE' };
  if (typeof x === 'string') return { string_value: x };
  if (typeof x === 'boolean') return { bool_value: x };
  if (typeof x === 'number') return Number.isInteger(x) ? { integer_value: String(x) } : { double_value: x };
  if (Array.isArray(x)) return { list_value: { values: x.map(valueOf) } };
  if (typeof x === 'object') return { struct_value: { fields: valueMapOf(x as Record<string, unknown>) } };
  return { null_value: 'NULL_VALUE' };
}

/** A JSON object as a map of `qdrant.Value`s. */
export function valueMapOf(o: Record<string, unknown>): Record<string, ProtoValue> {
  const out: Record<string, ProtoValue> = {};
  for (const [k, v] of Object.entries(o)) out[k] = valueOf(v);
  return out;
}

/** `qdrant.ShardKey`. */
export interface ProtoShardKey {
  keyword?: string;
  number?: string;
}

/** A `qdrant.ShardKey` in its JSON form (a string or a number); an empty message is refused as REST refuses a missing key. */
export function shardKeyJson(k: ProtoShardKey | undefined, field: string): string | number | undefined {
  if (k === undefined) return undefined;
  if (k.keyword !== undefined) return k.keyword;
  if (k.number !== undefined) return Number(k.number);
  throw new FormatError(`${field}: expected a shard key (a string or an unsigned integer), got an empty ShardKey`);
}

/** A shard key as a `qdrant.ShardKey`. */
export function protoShardKey(k: ShardKey): ProtoShardKey {
  return typeof k === 'string' ? { keyword: k } : { number: String(k) };
}

/** `YYYY-MM-DDTHH:MM:SS` (UTC, as snapshot descriptions have it) as a google.protobuf.Timestamp. */
export function timestampOf(text: string | null): { seconds: string; nanos: number } | undefined {
  if (text === null) return undefined;
  const ms = Date.parse(/[zZ]|[+-]\d\d:\d\d$/.test(text) ? text : `${text}Z`);
  if (!Number.isFinite(ms)) return undefined;
  return { seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 };
}

/** An enum name of the proto (`OneBit`, `Custom`) in the JSON form's spelling (`one_bit`, `custom`). */
export function snakeEnum(name: string): string {
  return name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();
}

/** A JSON-form enum value (`one_bit`, `custom`) as the proto's name (`OneBit`, `Custom`). */
export function pascalEnum(name: string): string {
  return name
    .split('_')
    .map((p) => p.charAt(0).toUpperCase() + p.slice(1))
    .join('');
}
