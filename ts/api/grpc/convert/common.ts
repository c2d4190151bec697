/**
 * The small conversions every service module shares, between proto messages (as
 * @grpc/proto-loader gives and takes them: 64-bit integers as decimal strings, enums by
 * name, unset fields absent) and the JSON form of the reference's API that
 * ts/api/request parses: 64-bit integers, the consensus timeout of a call, shard keys,
 * timestamps, enum spellings, and the `time` of a response. (`qdrant.Value` has a module
 * of its own: ./value.ts, the one translation of payloads and other JSON values.)
 *
 * Owns: those conversions. Must never: validate beyond the conversion itself (the
 * JSON-form parsers do, with the same texts as REST).
 */

import type { ShardKey } from '../../../collection/shard-keys';
import { FormatError } from '../../../common/errors';
import type { GrpcCallContext } from '../method';

/** Seconds since `started` (process.hrtime.bigint()): the `time` of a response. */
export function seconds(started: bigint): number {
  return Number(process.hrtime.bigint() - started) / 1e9;
}

/**
 * A proto 64-bit integer (a decimal string) as the JSON number a REST body would hold:
 * exact up to 2^53 - 1, rounded beyond, as JSON.parse rounds it. Absent is 0 (the zero of
 * a field that is not `optional`).
 */
export function int64(x: string | number | undefined): number {
  return x === undefined ? 0 : Number(x);
}

/** As int64, but absent (or null) stays absent. */
export function num(x: string | number | undefined | null): number | undefined {
  if (x === undefined || x === null) return undefined;
  return typeof x === 'number' ? x : Number(x);
}

/** A JSON number as a proto 64-bit integer (a decimal string); absent stays absent. */
export function int64Text(x: number | null | undefined): string | undefined {
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

/** `qdrant.ShardKey` (its oneof `key`: a keyword or a number). */
export interface ShardKeyMsg {
  key?: string;
  keyword?: string;
  number?: string | number;
}

/** A `qdrant.ShardKey` in its JSON form (a string or a number); an empty message is refused as REST refuses a missing key. */
export function shardKeyToJson(k: ShardKeyMsg | undefined | null, field: string): string | number {
  if (k !== undefined && k !== null) {
    if (k.key === 'keyword' || (k.key === undefined && k.keyword !== undefined)) return k.keyword ?? '';
    if (k.key === 'number' || (k.key === undefined && k.number !== undefined)) return int64(k.number);
  }
  throw new FormatError(`${field}: a ShardKey with neither \`keyword\` nor \`number\` set`);
}

/** A shard key as a `qdrant.ShardKey`. */
export function shardKeyOut(k: ShardKey): ShardKeyMsg {
  return typeof k === 'string' ? { keyword: k } : { number: String(k) };
}

/** `YYYY-MM-DDTHH:MM:SS` (UTC, as snapshot descriptions have it) as a google.protobuf.Timestamp. */
export function timestampOf(text: string | null): { seconds: string; nanos: number } | undefined {
  if (text === null) return undefined;
  const ms = Date.parse(/[zZ]|[+-]\d\d:\d\d$/.test(text) ? text : `${text}Z`);
  if (!Number.isFinite(ms)) return undefined;
  return { seconds: String(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 };
}

/**
 * An enum name of the proto (`OneBit`, `Custom`) in the JSON form's spelling (`one_bit`,
 * `custom`). A value the contract does not name arrives as its number and is passed on
 * as it is, for the parser to refuse.
 */
export function snakeEnum<T extends string | number>(name: T): T extends number ? number : string;
export function snakeEnum(name: string | number): string | number {
  return typeof name === 'number' ? name : name.replace(/([a-z0-9])([A-Z])/g, '$1_$2').toLowerCase();
}

/** A JSON-form enum value (`one_bit`, `custom`) as the proto's name (`OneBit`, `Custom`). */
export function pascalEnum(name: string): string {
  return name
    .split('_')
    .map((p) => p.charAt(0).toUpperCase() + p.slice(1))
    .join('');
}
