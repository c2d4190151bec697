/**
 * `qdrant.Filter` and its conditions (qdrant_common.proto) to the JSON filter of the
 * REST API, which `filter()` of ts/api/request/parse.ts then validates for both APIs.
 *
 * Owns: the mapping of every condition and match kind, timestamps to RFC 3339 strings,
 * unsigned 64-bit counts to numbers. Must never: decide whether a filter is valid (the
 * shared validator does), or evaluate one.
 */

import { FormatError } from '../../../common/errors';
import { MAX_NESTING_DEPTH } from '../../../shard/limits';
import { int64 } from './common';

type Long = string | number;

export interface PointIdMsg {
  point_id_options?: string;
  num?: Long;
  uuid?: string;
}

export interface GeoPointMsg {
  lon?: number;
  lat?: number;
}

export interface TimestampMsg {
  seconds?: Long;
  nanos?: number;
}

interface RangeMsg<T> {
  lt?: T;
  gt?: T;
  gte?: T;
  lte?: T;
}

interface MatchMsg {
  match_value?: string;
  keyword?: string;
  integer?: Long;
  boolean?: boolean;
  text?: string;
  keywords?: { strings?: string[] };
  integers?: { integers?: Long[] };
  except_integers?: { integers?: Long[] };
  except_keywords?: { strings?: string[] };
  phrase?: string;
  text_any?: string;
}

interface FieldConditionMsg {
  key?: string;
  match?: MatchMsg;
  range?: RangeMsg<number>;
  geo_bounding_box?: { top_left?: GeoPointMsg; bottom_right?: GeoPointMsg };
  geo_radius?: { center?: GeoPointMsg; radius?: number };
  values_count?: RangeMsg<Long>;
  geo_polygon?: { exterior?: { points?: GeoPointMsg[] }; interiors?: Array<{ points?: GeoPointMsg[] }> };
  datetime_range?: RangeMsg<TimestampMsg>;
  is_empty?: boolean;
  is_null?: boolean;
}

export interface ConditionMsg {
  condition_one_of?: string;
  field?: FieldConditionMsg;
  is_empty?: { key?: string };
  has_id?: { has_id?: PointIdMsg[] };
  filter?: FilterMsg;
  is_null?: { key?: string };
  nested?: { key?: string; filter?: FilterMsg };
  has_vector?: { has_vector?: string };
}

export interface FilterMsg {
  should?: ConditionMsg[];
  must?: ConditionMsg[];
  must_not?: ConditionMsg[];
  min_should?: { conditions?: ConditionMsg[]; min_count?: Long };
}

/**
 * A PointId to its JSON form: a number for `num` (as JSON.parse reads the decimal, so
 * an id past 2^53 - 1 gets the answer it gets over REST), a string for `uuid`;
 * undefined when neither is set, so the parser reports the id as missing.
 */
export function pointIdToJson(id: PointIdMsg | undefined): number | string | undefined {
  if (id === undefined || id === null) return undefined;
  if (id.point_id_options === 'num' || (id.point_id_options === undefined && id.num !== undefined)) return int64(id.num);
  if (id.point_id_options === 'uuid' || (id.point_id_options === undefined && id.uuid !== undefined)) return id.uuid ?? '';
  return undefined;
}

function pad(n: number, width: number): string {
  return String(n).padStart(width, '0');
}

/** A google.protobuf.Timestamp to RFC 3339 (UTC, with its nanoseconds). */
export function timestampToRfc3339(ts: TimestampMsg, field: string): string {
  const seconds = int64(ts.seconds);
  const nanos = ts.nanos ?? 0;
  const date = new Date(seconds * 1000);
  const year = date.getUTCFullYear();
  // Timestamp's own range: 0001-01-01 to 9999-12-31 (RFC 3339 has four-digit years).
  if (!Number.isSafeInteger(seconds) || Number.isNaN(date.getTime()) || year < 1 || year > 9999 || !Number.isInteger(nanos) || nanos < 0 || nanos > 999_999_999) {
    throw new FormatError(`${field}: timestamp (seconds ${String(ts.seconds ?? 0)}, nanos ${nanos}) is outside 0001-01-01 to 9999-12-31`);
  }
  const day = `${pad(year, 4)}-${pad(date.getUTCMonth() + 1, 2)}-${pad(date.getUTCDate(), 2)}`;
  const time = `${pad(date.getUTCHours(), 2)}:${pad(date.getUTCMinutes(), 2)}:${pad(date.getUTCSeconds(), 2)}`;
  return `${day}T${time}${nanos > 0 ? `.${pad(nanos, 9)}` : ''}Z`;
}

function geoPoint(p: GeoPointMsg | undefined): { lon: number; lat: number } | undefined {
  if (p === undefined || p === null) return undefined;
  return { lon: p.lon ?? 0, lat: p.lat ?? 0 };
}

function bounds<T, U>(r: RangeMsg<T>, f: (v: T) => U): Record<string, U> {
  const out: Record<string, U> = {};
  for (const k of ['lt', 'gt', 'gte', 'lte'] as const) {
    const v = r[k];
    if (v !== undefined && v !== null) out[k] = f(v);
  }
  return out;
}

function matchToJson(m: MatchMsg, field: string): Record<string, unknown> {
  switch (m.match_value) {
    case 'keyword':
      return { value: m.keyword ?? '' };
    case 'integer':
      return { value: int64(m.integer) };
    case 'boolean':
      return { value: m.boolean ?? false };
    case 'text':
      return { text: m.text ?? '' };
    case 'keywords':
      return { any: m.keywords?.strings ?? [] };
    case 'integers':
      return { any: (m.integers?.integers ?? []).map(int64) };
    case 'except_integers':
      return { except: (m.except_integers?.integers ?? []).map(int64) };
    case 'except_keywords':
      return { except: m.except_keywords?.strings ?? [] };
    case 'phrase':
      return { phrase: m.phrase ?? '' };
    case 'text_any':
      return { text_any: m.text_any ?? '' };
    default:
      throw new FormatError(`${field}: a Match with no value set`);
  }
}

function fieldToJson(c: FieldConditionMsg, field: string): Record<string, unknown> {
  const out: Record<string, unknown> = { key: c.key ?? '' };
  if (c.match !== undefined && c.match !== null) out.match = matchToJson(c.match, `${field}.match`);
  if (c.range !== undefined && c.range !== null) out.range = bounds(c.range, (v) => v);
  if (c.datetime_range !== undefined && c.datetime_range !== null) {
    if (out.range !== undefined) throw new FormatError(`${field}: \`range\` and \`datetime_range\` in one condition`);
    out.range = bounds(c.datetime_range, (v) => timestampToRfc3339(v, `${field}.datetime_range`));
  }
  if (c.geo_bounding_box !== undefined && c.geo_bounding_box !== null) {
    out.geo_bounding_box = { top_left: geoPoint(c.geo_bounding_box.top_left), bottom_right: geoPoint(c.geo_bounding_box.bottom_right) };
  }
  if (c.geo_radius !== undefined && c.geo_radius !== null) out.geo_radius = { center: geoPoint(c.geo_radius.center), radius: c.geo_radius.radius ?? 0 };
  if (c.geo_polygon !== undefined && c.geo_polygon !== null) {
    const line = (l: { points?: GeoPointMsg[] } | undefined) => ({ points: (l?.points ?? []).map(geoPoint) });
    out.geo_polygon = { exterior: line(c.geo_polygon.exterior), interiors: (c.geo_polygon.interiors ?? []).map(line) };
  }
  if (c.values_count !== undefined && c.values_count !== null) out.values_count = bounds(c.values_count, int64);
  if (c.is_empty !== undefined && c.is_empty !== null) out.is_empty = c.is_empty;
  if (c.is_null !== undefined && c.is_null !== null) out.is_null = c.is_null;
  return out;
}

function conditionToJson(c: ConditionMsg, field: string, depth: number): unknown {
  switch (c.condition_one_of) {
    case 'field':
      return fieldToJson(c.field ?? {}, `${field}.field`);
    case 'is_empty':
      return { is_empty: { key: c.is_empty?.key ?? '' } };
    case 'is_null':
      return { is_null: { key: c.is_null?.key ?? '' } };
    case 'has_id':
      return { has_id: (c.has_id?.has_id ?? []).map(pointIdToJson) };
    case 'has_vector':
      return { has_vector: c.has_vector?.has_vector ?? '' };
    case 'filter':
      return filterAt(c.filter ?? {}, `${field}.filter`, depth + 1);
    case 'nested':
      return { nested: { key: c.nested?.key ?? '', filter: filterAt(c.nested?.filter ?? {}, `${field}.nested.filter`, depth + 1) } };
    default:
      throw new FormatError(`${field}: a Condition with none of its conditions set`);
  }
}

function filterAt(f: FilterMsg, field: string, depth: number): Record<string, unknown> {
  // The bound and the words of the shared validator (validateFilter), checked here already so this walk stays bounded too.
  if (depth > MAX_NESTING_DEPTH) throw new FormatError(`${field}: filters may nest at most ${MAX_NESTING_DEPTH} levels deep`);
  const out: Record<string, unknown> = {};
  const list = (cs: ConditionMsg[] | undefined, name: string) => (cs ?? []).map((c, i) => conditionToJson(c, `${field}.${name}[${i}]`, depth));
  if (f.must !== undefined && f.must.length > 0) out.must = list(f.must, 'must');
  if (f.should !== undefined && f.should.length > 0) out.should = list(f.should, 'should');
  if (f.must_not !== undefined && f.must_not.length > 0) out.must_not = list(f.must_not, 'must_not');
  if (f.min_should !== undefined && f.min_should !== null) {
    out.min_should = { conditions: list(f.min_should.conditions, 'min_should.conditions'), min_count: int64(f.min_should.min_count) };
  }
  return out;
}

/** A Filter to the JSON filter, or undefined when the message is absent. */
export function filterToJson(f: FilterMsg | undefined | null, field = 'filter'): Record<string, unknown> | undefined {
  if (f === undefined || f === null) return undefined;
  return filterAt(f, field, 0);
}

/** One Condition to its JSON form (a formula's condition term). */
export function conditionJson(c: ConditionMsg, field: string): unknown {
  return conditionToJson(c, field, 0);
}
