/**
 * Qdrant filters evaluated against one point (id + JSON payload). Pure: no storage,
 * no indexes. The shard layer calls `compileFilter` once per request and the returned
 * predicate once per candidate point that the payload indexes' plan (payload-index.ts)
 * left undecided; `filterKeys(filter)` names the fields a filter reads.
 *
 * Semantics (see also the test file, which pins each rule with hand-checked cases):
 *
 * Paths (`key`): segments separated by `.`; a segment may end in one or more `[]`.
 *  - Walking a segment through an array applies the segment to every element (arrays
 *    are flattened at any depth), so `a.b` on `{a: [{b: 1}, {b: 2}]}` yields 1 and 2.
 *  - `seg[]` explicitly expands the array found at `seg`; a non-array there yields
 *    nothing. `a[].b` is therefore the same as `a.b` when `a` is an array.
 *  - Index segments (`a[0]`) and quoted keys are NOT supported: the reference schema
 *    does not document them, so `validateFilter` rejects them with a FilterError.
 *  - The "raw values" of a key are the values found at the end of the path (an array
 *    there stays one value). The "flat values" are the raw values with every array
 *    expanded recursively. Conditions on values (match, range, geo) hold when ANY
 *    flat value satisfies them; null values satisfy none of them.
 *  - values_count counts raw values: null -> 0, array -> its length, anything else
 *    -> 1, summed over raw values; a missing key counts 0.
 *  - is_empty: true when no raw value is "non-empty" (missing key, null, `[]`).
 *    `[null]` is a one-element array: NOT empty (and values_count 1).
 *  - is_null: true when some raw value is exactly null. An array is never null, so
 *    `[null]` and `[]` are not null; a missing key is not null.
 *  - FieldCondition `is_empty: false` / `is_null: false` are the negations.
 *
 * match:
 *  - value: type-strict equality (string, integer, bool) with any flat value.
 *  - any: some flat value is in the list (type-strict; an empty list matches nothing).
 *  - except: the field has at least one non-null flat value that is NOT in the list
 *    (a value of another type, e.g. a bool or an object, is "not in the list"). A key
 *    that is missing or has no non-null values (null, [], [null]) MATCHES: nothing it
 *    holds is one of the excluded values.
 *  - text / phrase: case-sensitive substring of a string value (the reference's
 *    behaviour without a full-text index). text_any: the query is split on whitespace
 *    and any token being a substring counts (an all-whitespace query matches nothing).
 *    When the caller passes a `TextHook` (the shard does, from its full-text indexes:
 *    text-index.ts), a condition on a path with a text index is decided by the hook's
 *    predicate on the flat values instead (token matching).
 * range: numbers only (strings and bools never satisfy a numeric range). An empty
 *   range `{}` matches any number. A range whose bounds are strings is a datetime
 *   range: bounds and payload strings are parsed as RFC 3339 (also `YYYY-MM-DD`,
 *   `T` or space separator, optional seconds/fraction, `Z`/`±HH:MM`/`±HHMM`; no zone
 *   means UTC) to epoch milliseconds; unparsable payload strings never match.
 * geo: payload values that are objects with finite numeric `lat` and `lon`.
 *   geo_radius uses haversine with the mean Earth radius 6371008.8 m (inclusive);
 *   geo_bounding_box is inclusive, and wraps across the antimeridian when
 *   top_left.lon > bottom_right.lon; geo_polygon: inside the exterior ring and not
 *   inside any interior ring (even-odd ray casting in lon/lat; points exactly on an
 *   edge may fall either way).
 * has_id: unsigned integers and UUIDs (hyphenated or 32 hex digits, any case,
 *   compared in lowercase hyphenated form).
 * has_vector: evaluated through the optional third argument of the compiled predicate
 *   (`hasVector(name)`); without it the condition is false.
 * nested {key, filter}: the inner filter is evaluated against each object among the
 *   flat values at `key`, as if it were the payload; at least ONE element must satisfy
 *   the whole inner filter. has_id and has_vector are rejected inside nested filters.
 * Filter: must = all, should = at least one when non-empty (empty or absent: no
 *   constraint), must_not = none, min_should = at least min_count of its conditions
 *   (min_count 0 always holds). A clause may be a single condition instead of a list.
 * Several conditions in one FieldCondition (e.g. match and range) must all hold.
 */

import { MAX_NESTING_DEPTH } from './limits';

export type PointId = number | string;
export type ValueVariant = string | number | boolean;
export type AnyVariants = string[] | number[];

export type Match =
  | { value: ValueVariant }
  | { text: string }
  | { text_any: string }
  | { phrase: string }
  | { any: AnyVariants }
  | { except: AnyVariants };

export interface RangeBounds<T> {
  lt?: T | null;
  gt?: T | null;
  gte?: T | null;
  lte?: T | null;
}
export type Range = RangeBounds<number>;
export type DatetimeRange = RangeBounds<string>;

export interface GeoPoint {
  lon: number;
  lat: number;
}
export interface GeoRadius {
  center: GeoPoint;
  radius: number;
}
export interface GeoBoundingBox {
  top_left: GeoPoint;
  bottom_right: GeoPoint;
}
export interface GeoLineString {
  points: GeoPoint[];
}
export interface GeoPolygon {
  exterior: GeoLineString;
  interiors?: GeoLineString[] | null;
}
export interface ValuesCount {
  lt?: number | null;
  gt?: number | null;
  gte?: number | null;
  lte?: number | null;
}

export interface FieldCondition {
  key: string;
  match?: Match | null;
  range?: Range | DatetimeRange | null;
  geo_radius?: GeoRadius | null;
  geo_bounding_box?: GeoBoundingBox | null;
  geo_polygon?: GeoPolygon | null;
  values_count?: ValuesCount | null;
  is_empty?: boolean | null;
  is_null?: boolean | null;
}
export interface IsEmptyCondition {
  is_empty: { key: string };
}
export interface IsNullCondition {
  is_null: { key: string };
}
export interface HasIdCondition {
  has_id: PointId[];
}
export interface HasVectorCondition {
  has_vector: string;
}
export interface NestedCondition {
  nested: { key: string; filter: Filter };
}
export interface MinShould {
  conditions: Condition[];
  min_count: number;
}
export type Condition =
  | FieldCondition
  | IsEmptyCondition
  | IsNullCondition
  | HasIdCondition
  | HasVectorCondition
  | NestedCondition
  | Filter;

/** The normalized filter returned by validateFilter: clauses are always lists. */
export interface Filter {
  must?: Condition[];
  should?: Condition[];
  must_not?: Condition[];
  min_should?: MinShould;
}

export type Payload = Record<string, unknown> | null;
export type PointPredicate = (id: PointId, payload: Payload, hasVector?: (name: string) => boolean) => boolean;

export class FilterError extends Error {
  readonly path: string;
  constructor(path: string, message: string) {
    super(path ? `${path}: ${message}` : message);
    this.name = 'FilterError';
    this.path = path;
  }
}

// ---------------------------------------------------------------------------------
// Paths

interface PathSegment {
  name: string;
  expand: number; // number of trailing `[]`
}

const SEGMENT_RE = /^([^.[\]]+)((?:\[\])*)$/;

export function parseKey(key: string, where = 'key'): PathSegment[] {
  if (typeof key !== 'string' || key.length === 0) throw new FilterError(where, 'expected a non-empty string');
  const out: PathSegment[] = [];
  for (const seg of key.split('.')) {
    const m = SEGMENT_RE.exec(seg);
    if (!m) {
      throw new FilterError(
        where,
        `unsupported key path "${key}" (segments are names optionally followed by [], array indexes and quoted keys are not supported)`,
      );
    }
    out.push({ name: m[1], expand: m[2].length / 2 });
  }
  return out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const hasOwn = Object.prototype.hasOwnProperty;

function collectKey(v: unknown, name: string, out: unknown[]): void {
  if (Array.isArray(v)) {
    for (const e of v) collectKey(e, name, out);
  } else if (isPlainObject(v) && hasOwn.call(v, name)) {
    out.push(v[name]);
  }
}

/** Raw values at the end of the path (see the header comment). */
export function rawValues(payload: unknown, path: PathSegment[]): unknown[] {
  let cur: unknown[] = [payload];
  for (const seg of path) {
    let next: unknown[] = [];
    for (const v of cur) collectKey(v, seg.name, next);
    for (let i = 0; i < seg.expand; i++) {
      const expanded: unknown[] = [];
      for (const v of next) if (Array.isArray(v)) for (const e of v) expanded.push(e);
      next = expanded;
    }
    cur = next;
    if (cur.length === 0) break;
  }
  return cur;
}

function flatten(values: unknown[], out: unknown[] = []): unknown[] {
  for (const v of values) {
    if (Array.isArray(v)) flatten(v, out);
    else out.push(v);
  }
  return out;
}

// ---------------------------------------------------------------------------------
// Datetimes

const DT_RE =
  /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(?:([Zz])|([+-])(\d{2}):?(\d{2}))?)?$/;

function daysFromCivil(y: number, m: number, d: number): number {
  y -= m <= 2 ? 1 : 0;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

/** RFC 3339-ish datetime to epoch milliseconds (fractional below 1 ms); NaN if invalid. */
export function parseDatetime(s: string): number {
  const m = DT_RE.exec(s);
  if (!m) return NaN;
  const y = +m[1];
  const mo = +m[2];
  const d = +m[3];
  const h = m[4] === undefined ? 0 : +m[4];
  const mi = m[5] === undefined ? 0 : +m[5];
  const sec = m[6] === undefined ? 0 : +m[6];
  if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59) return NaN;
  const leap = (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0;
  const dim = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][mo - 1];
  if (d > dim) return NaN;
  let offsetMin = 0;
  if (m[9] !== undefined) {
    const oh = +m[10];
    const om = +m[11];
    if (oh > 23 || om > 59) return NaN;
    offsetMin = (oh * 60 + om) * (m[9] === '-' ? -1 : 1);
  }
  const fracMs = m[7] === undefined ? 0 : Number((m[7] + '000000000').slice(0, 9)) / 1e6;
  return daysFromCivil(y, mo, d) * 86_400_000 + ((h * 60 + mi - offsetMin) * 60 + sec) * 1000 + fracMs;
}

// ---------------------------------------------------------------------------------
// Ids

const UUID_HYPHEN_RE = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const UUID_SIMPLE_RE = /^[0-9a-fA-F]{32}$/;

/** Canonical lowercase hyphenated UUID, or null when the string is not a UUID. */
export function canonicalUuid(s: string): string | null {
  if (UUID_HYPHEN_RE.test(s)) return s.toLowerCase();
  if (UUID_SIMPLE_RE.test(s)) {
    const l = s.toLowerCase();
    return `${l.slice(0, 8)}-${l.slice(8, 12)}-${l.slice(12, 16)}-${l.slice(16, 20)}-${l.slice(20)}`;
  }
  return null;
}

// ---------------------------------------------------------------------------------
// Geo

export const EARTH_RADIUS_M = 6371008.8;

export function haversineMeters(a: GeoPoint, b: GeoPoint): number {
  const toRad = Math.PI / 180;
  const dLat = (b.lat - a.lat) * toRad;
  const dLon = (b.lon - a.lon) * toRad;
  const s =
    Math.sin(dLat / 2) ** 2 + Math.cos(a.lat * toRad) * Math.cos(b.lat * toRad) * Math.sin(dLon / 2) ** 2;
  return 2 * EARTH_RADIUS_M * Math.asin(Math.min(1, Math.sqrt(s)));
}

function asGeoPoint(v: unknown): GeoPoint | null {
  if (!isPlainObject(v)) return null;
  const { lat, lon } = v;
  if (typeof lat !== 'number' || typeof lon !== 'number' || !Number.isFinite(lat) || !Number.isFinite(lon)) {
    return null;
  }
  return { lat, lon };
}

/** Whether `p` is inside the polygon's exterior ring and outside each of its holes (planar lat/lon, as the predicate below). */
export function inGeoPolygon(p: GeoPoint, poly: GeoPolygon): boolean {
  return inRing(p, poly.exterior.points) && !(poly.interiors ?? []).some((h) => inRing(p, h.points));
}

function inRing(p: GeoPoint, ring: GeoPoint[]): boolean {
  let inside = false;
  for (let i = 0, j = ring.length - 1; i < ring.length; j = i++) {
    const a = ring[i];
    const b = ring[j];
    if (a.lat > p.lat !== b.lat > p.lat) {
      const x = ((b.lon - a.lon) * (p.lat - a.lat)) / (b.lat - a.lat) + a.lon;
      if (p.lon < x) inside = !inside;
    }
  }
  return inside;
}

// ---------------------------------------------------------------------------------
// Validation

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `${typeof v}`;
}

function expectObject(v: unknown, path: string): Record<string, unknown> {
  if (!isPlainObject(v)) throw new FilterError(path, `expected an object, got ${describe(v)}`);
  return v;
}

function onlyKeys(o: Record<string, unknown>, allowed: readonly string[], path: string): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) {
      throw new FilterError(path, `unknown field "${k}" (expected one of: ${allowed.join(', ')})`);
    }
  }
}

function join(path: string, k: string): string {
  return path ? `${path}.${k}` : k;
}

function validateKey(v: unknown, path: string): string {
  if (typeof v !== 'string') throw new FilterError(path, `expected a string, got ${describe(v)}`);
  parseKey(v, path);
  return v;
}

function validateNumber(v: unknown, path: string): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) throw new FilterError(path, `expected a finite number, got ${describe(v)}`);
  return v;
}

function validateUint(v: unknown, path: string): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) {
    throw new FilterError(path, `expected an unsigned integer, got ${typeof v === 'number' ? v : describe(v)}`);
  }
  return v;
}

function validateGeoPoint(v: unknown, path: string): GeoPoint {
  const o = expectObject(v, path);
  onlyKeys(o, ['lon', 'lat'], path);
  if (o.lat === undefined) throw new FilterError(join(path, 'lat'), 'missing');
  if (o.lon === undefined) throw new FilterError(join(path, 'lon'), 'missing');
  const lat = validateNumber(o.lat, join(path, 'lat'));
  const lon = validateNumber(o.lon, join(path, 'lon'));
  if (lat < -90 || lat > 90) throw new FilterError(join(path, 'lat'), `latitude ${lat} is outside [-90, 90]`);
  if (lon < -180 || lon > 180) throw new FilterError(join(path, 'lon'), `longitude ${lon} is outside [-180, 180]`);
  return { lon, lat };
}

function validateLineString(v: unknown, path: string): GeoLineString {
  const o = expectObject(v, path);
  onlyKeys(o, ['points'], path);
  const pp = join(path, 'points');
  if (!Array.isArray(o.points)) throw new FilterError(pp, `expected an array, got ${describe(o.points)}`);
  const points = o.points.map((p, i) => validateGeoPoint(p, `${pp}[${i}]`));
  if (points.length < 4) throw new FilterError(pp, 'a polygon ring needs at least 4 points');
  const f = points[0];
  const l = points[points.length - 1];
  if (f.lat !== l.lat || f.lon !== l.lon) throw new FilterError(pp, 'the first and last points of a ring must be the same');
  return { points };
}

function validateAnyVariants(v: unknown, path: string): AnyVariants {
  if (!Array.isArray(v)) throw new FilterError(path, `expected an array, got ${describe(v)}`);
  if (v.length === 0) return [];
  if (typeof v[0] === 'string') {
    v.forEach((x, i) => {
      if (typeof x !== 'string') throw new FilterError(`${path}[${i}]`, 'expected a string (all values must have one type)');
    });
    return [...(v as string[])];
  }
  v.forEach((x, i) => {
    if (typeof x !== 'number' || !Number.isInteger(x)) {
      throw new FilterError(`${path}[${i}]`, `expected a string or an integer, got ${describe(x)}`);
    }
  });
  return [...(v as number[])];
}

function validateMatch(v: unknown, path: string): Match {
  const o = expectObject(v, path);
  const kinds = ['value', 'text', 'text_any', 'phrase', 'any', 'except'];
  onlyKeys(o, kinds, path);
  const present = kinds.filter((k) => o[k] !== undefined);
  if (present.length !== 1) throw new FilterError(path, `expected exactly one of: ${kinds.join(', ')}`);
  const k = present[0];
  const val = o[k];
  const p = join(path, k);
  switch (k) {
    case 'value':
      if (typeof val === 'string' || typeof val === 'boolean' || (typeof val === 'number' && Number.isInteger(val))) {
        return { value: val };
      }
      throw new FilterError(p, `expected a string, an integer or a boolean, got ${describe(val)}`);
    case 'text':
    case 'text_any':
    case 'phrase':
      if (typeof val !== 'string') throw new FilterError(p, `expected a string, got ${describe(val)}`);
      return { [k]: val } as Match;
    default:
      return { [k]: validateAnyVariants(val, p) } as Match;
  }
}

const BOUNDS = ['lt', 'gt', 'gte', 'lte'] as const;

function validateRange(v: unknown, path: string): Range | DatetimeRange {
  const o = expectObject(v, path);
  onlyKeys(o, BOUNDS, path);
  const set = BOUNDS.filter((b) => o[b] !== undefined && o[b] !== null);
  const strings = set.filter((b) => typeof o[b] === 'string');
  if (strings.length > 0 && strings.length !== set.length) {
    throw new FilterError(path, 'bounds must be all numbers (range) or all datetime strings (datetime range)');
  }
  const out: Record<string, number | string> = {};
  for (const b of set) {
    const p = join(path, b);
    if (strings.length > 0) {
      const s = o[b] as string;
      if (Number.isNaN(parseDatetime(s))) throw new FilterError(p, `invalid RFC 3339 datetime "${s}"`);
      out[b] = s;
    } else {
      out[b] = validateNumber(o[b], p);
    }
  }
  return out;
}

function validateValuesCount(v: unknown, path: string): ValuesCount {
  const o = expectObject(v, path);
  onlyKeys(o, BOUNDS, path);
  const out: ValuesCount = {};
  for (const b of BOUNDS) if (o[b] !== undefined && o[b] !== null) out[b] = validateUint(o[b], join(path, b));
  return out;
}

function validatePayloadField(v: unknown, path: string): { key: string } {
  const o = expectObject(v, path);
  onlyKeys(o, ['key'], path);
  return { key: validateKey(o.key, join(path, 'key')) };
}

const FIELD_KINDS = [
  'match',
  'range',
  'geo_radius',
  'geo_bounding_box',
  'geo_polygon',
  'values_count',
  'is_empty',
  'is_null',
] as const;

function validateFieldCondition(o: Record<string, unknown>, path: string): FieldCondition {
  onlyKeys(o, ['key', ...FIELD_KINDS], path);
  const out: FieldCondition = { key: validateKey(o.key, join(path, 'key')) };
  let n = 0;
  for (const k of FIELD_KINDS) {
    const v = o[k];
    if (v === undefined || v === null) continue;
    n++;
    const p = join(path, k);
    switch (k) {
      case 'match':
        out.match = validateMatch(v, p);
        break;
      case 'range':
        out.range = validateRange(v, p);
        break;
      case 'geo_radius': {
        const g = expectObject(v, p);
        onlyKeys(g, ['center', 'radius'], p);
        const radius = validateNumber(g.radius, join(p, 'radius'));
        if (radius < 0) throw new FilterError(join(p, 'radius'), 'must not be negative');
        out.geo_radius = { center: validateGeoPoint(g.center, join(p, 'center')), radius };
        break;
      }
      case 'geo_bounding_box': {
        const g = expectObject(v, p);
        onlyKeys(g, ['top_left', 'bottom_right'], p);
        out.geo_bounding_box = {
          top_left: validateGeoPoint(g.top_left, join(p, 'top_left')),
          bottom_right: validateGeoPoint(g.bottom_right, join(p, 'bottom_right')),
        };
        break;
      }
      case 'geo_polygon': {
        const g = expectObject(v, p);
        onlyKeys(g, ['exterior', 'interiors'], p);
        const poly: GeoPolygon = { exterior: validateLineString(g.exterior, join(p, 'exterior')) };
        if (g.interiors !== undefined && g.interiors !== null) {
          const ip = join(p, 'interiors');
          if (!Array.isArray(g.interiors)) throw new FilterError(ip, `expected an array, got ${describe(g.interiors)}`);
          poly.interiors = g.interiors.map((r, i) => validateLineString(r, `${ip}[${i}]`));
        }
        out.geo_polygon = poly;
        break;
      }
      case 'values_count':
        out.values_count = validateValuesCount(v, p);
        break;
      case 'is_empty':
      case 'is_null':
        if (typeof v !== 'boolean') throw new FilterError(p, `expected a boolean, got ${describe(v)}`);
        out[k] = v;
        break;
    }
  }
  if (n === 0) throw new FilterError(path, `a field condition needs at least one of: ${FIELD_KINDS.join(', ')}`);
  return out;
}

function validateCondition(v: unknown, path: string, inNested: boolean, depth: number): Condition {
  const o = expectObject(v, path);
  if (o.key !== undefined) return validateFieldCondition(o, path);
  if (o.is_empty !== undefined) {
    onlyKeys(o, ['is_empty'], path);
    return { is_empty: validatePayloadField(o.is_empty, join(path, 'is_empty')) };
  }
  if (o.is_null !== undefined) {
    onlyKeys(o, ['is_null'], path);
    return { is_null: validatePayloadField(o.is_null, join(path, 'is_null')) };
  }
  if (o.has_id !== undefined) {
    onlyKeys(o, ['has_id'], path);
    const p = join(path, 'has_id');
    if (inNested) throw new FilterError(p, 'has_id is not supported inside a nested filter');
    if (!Array.isArray(o.has_id)) throw new FilterError(p, `expected an array, got ${describe(o.has_id)}`);
    const ids = o.has_id.map((id, i) => {
      if (typeof id === 'string') {
        if (canonicalUuid(id) === null) throw new FilterError(`${p}[${i}]`, `"${id}" is not a UUID`);
        return id;
      }
      return validateUint(id, `${p}[${i}]`);
    });
    return { has_id: ids };
  }
  if (o.has_vector !== undefined) {
    onlyKeys(o, ['has_vector'], path);
    const p = join(path, 'has_vector');
    if (inNested) throw new FilterError(p, 'has_vector is not supported inside a nested filter');
    if (typeof o.has_vector !== 'string') throw new FilterError(p, `expected a string, got ${describe(o.has_vector)}`);
    return { has_vector: o.has_vector };
  }
  if (o.nested !== undefined) {
    onlyKeys(o, ['nested'], path);
    const p = join(path, 'nested');
    const n = expectObject(o.nested, p);
    onlyKeys(n, ['key', 'filter'], p);
    const key = validateKey(n.key, join(p, 'key'));
    return { nested: { key, filter: validateFilterAt(n.filter, join(p, 'filter'), true, depth + 1) } };
  }
  return validateFilterAt(o, path, inNested, depth + 1);
}

function validateClause(v: unknown, path: string, inNested: boolean, depth: number): Condition[] {
  if (Array.isArray(v)) return v.map((c, i) => validateCondition(c, `${path}[${i}]`, inNested, depth));
  return [validateCondition(v, path, inNested, depth)];
}

/** `depth` counts the filters around this one; past MAX_NESTING_DEPTH the filter is refused, so no input runs this (or the compiled predicate) out of stack. */
function validateFilterAt(v: unknown, path: string, inNested: boolean, depth: number): Filter {
  if (depth > MAX_NESTING_DEPTH) throw new FilterError(path, `filters may nest at most ${MAX_NESTING_DEPTH} levels deep`);
  const o = expectObject(v, path);
  onlyKeys(o, ['must', 'should', 'must_not', 'min_should'], path);
  const out: Filter = {};
  for (const k of ['must', 'should', 'must_not'] as const) {
    if (o[k] !== undefined && o[k] !== null) out[k] = validateClause(o[k], join(path, k), inNested, depth);
  }
  if (o.min_should !== undefined && o.min_should !== null) {
    const p = join(path, 'min_should');
    const ms = expectObject(o.min_should, p);
    onlyKeys(ms, ['conditions', 'min_count'], p);
    const cp = join(p, 'conditions');
    if (!Array.isArray(ms.conditions)) throw new FilterError(cp, `expected an array, got ${describe(ms.conditions)}`);
    out.min_should = {
      conditions: ms.conditions.map((c, i) => validateCondition(c, `${cp}[${i}]`, inNested, depth)),
      min_count: validateUint(ms.min_count, join(p, 'min_count')),
    };
  }
  return out;
}

/** Checks a filter from the wire and returns it normalized (clauses as lists, nulls dropped). */
export function validateFilter(filter: unknown): Filter {
  return validateFilterAt(filter, '', false, 1);
}

// ---------------------------------------------------------------------------------
// Compilation

type Pred = (id: PointId, payload: unknown, hasVector: ((name: string) => boolean) | undefined) => boolean;

/**
 * Decides text / text_any / phrase conditions on a path that has a full-text index:
 * `names` is the path's segment names joined by `.` (brackets dropped; inside `nested`
 * prefixed by the nested key's). Returns the predicate on the flat values, or null to
 * keep this file's substring meaning.
 */
export type TextHook = (names: string, m: Match) => ((flat: readonly unknown[]) => boolean) | null;

interface Ctx {
  readonly hook: TextHook | undefined;
  /** Segment names of the enclosing nested keys, each followed by `.`. */
  readonly prefix: string;
}

const TRUE: Pred = () => true;

function cmpBounds<T>(r: RangeBounds<T>, conv: (x: T) => number): (x: number) => boolean {
  const gt = r.gt == null ? null : conv(r.gt);
  const gte = r.gte == null ? null : conv(r.gte);
  const lt = r.lt == null ? null : conv(r.lt);
  const lte = r.lte == null ? null : conv(r.lte);
  return (x) =>
    (gt === null || x > gt) && (gte === null || x >= gte) && (lt === null || x < lt) && (lte === null || x <= lte);
}

/** A predicate on one flat value. */
function compileMatch(m: Match): (v: unknown) => boolean {
  if ('value' in m) {
    const want = m.value;
    return (v) => v === want;
  }
  if ('text' in m) {
    const t = m.text;
    return (v) => typeof v === 'string' && v.includes(t);
  }
  if ('phrase' in m) {
    const t = m.phrase;
    return (v) => typeof v === 'string' && v.includes(t);
  }
  if ('text_any' in m) {
    const tokens = m.text_any.split(/\s+/).filter((t) => t.length > 0);
    return (v) => typeof v === 'string' && tokens.some((t) => v.includes(t));
  }
  if ('any' in m) {
    const set = new Set<unknown>(m.any);
    return (v) => (typeof v === 'string' || typeof v === 'number') && set.has(v);
  }
  throw new Error('unreachable');
}

function compileField(c: FieldCondition, ctx: Ctx): Pred {
  const path = parseKey(c.key);
  const checks: ((raw: unknown[]) => boolean)[] = [];
  const anyFlat = (p: (v: unknown) => boolean) => (raw: unknown[]) => flatten(raw).some(p);

  if (c.match) {
    const m = c.match;
    if ('except' in m) {
      const set = new Set<unknown>(m.except);
      checks.push((raw) => {
        const vals = flatten(raw).filter((v) => v !== null);
        return vals.length === 0 || vals.some((v) => !set.has(v));
      });
    } else {
      const text =
        ctx.hook !== undefined && ('text' in m || 'text_any' in m || 'phrase' in m)
          ? ctx.hook(ctx.prefix + path.map((seg) => seg.name).join('.'), m)
          : null;
      if (text !== null) checks.push((raw) => text(flatten(raw)));
      else checks.push(anyFlat(compileMatch(m)));
    }
  }
  if (c.range) {
    const r = c.range;
    const isDt = BOUNDS.some((b) => typeof r[b] === 'string');
    if (isDt) {
      const inR = cmpBounds(r as DatetimeRange, parseDatetime);
      checks.push(anyFlat((v) => typeof v === 'string' && inR(parseDatetime(v))));
    } else {
      const inR = cmpBounds(r as Range, (x) => x);
      checks.push(anyFlat((v) => typeof v === 'number' && inR(v)));
    }
  }
  if (c.geo_radius) {
    const { center, radius } = c.geo_radius;
    checks.push(
      anyFlat((v) => {
        const p = asGeoPoint(v);
        return p !== null && haversineMeters(center, p) <= radius;
      }),
    );
  }
  if (c.geo_bounding_box) {
    const { top_left: tl, bottom_right: br } = c.geo_bounding_box;
    const wraps = tl.lon > br.lon;
    checks.push(
      anyFlat((v) => {
        const p = asGeoPoint(v);
        if (p === null || p.lat > tl.lat || p.lat < br.lat) return false;
        return wraps ? p.lon >= tl.lon || p.lon <= br.lon : p.lon >= tl.lon && p.lon <= br.lon;
      }),
    );
  }
  if (c.geo_polygon) {
    const ext = c.geo_polygon.exterior.points;
    const holes = (c.geo_polygon.interiors ?? []).map((r) => r.points);
    checks.push(
      anyFlat((v) => {
        const p = asGeoPoint(v);
        return p !== null && inRing(p, ext) && !holes.some((h) => inRing(p, h));
      }),
    );
  }
  if (c.values_count) {
    const inR = cmpBounds(c.values_count, (x) => x);
    checks.push((raw) => inR(countValues(raw)));
  }
  if (c.is_empty != null) {
    const want = c.is_empty;
    checks.push((raw) => isEmptyRaw(raw) === want);
  }
  if (c.is_null != null) {
    const want = c.is_null;
    checks.push((raw) => raw.includes(null) === want);
  }
  return (_id, payload) => {
    const raw = rawValues(payload, path);
    for (const ch of checks) if (!ch(raw)) return false;
    return true;
  };
}

function countValues(raw: unknown[]): number {
  let n = 0;
  for (const v of raw) n += v === null ? 0 : Array.isArray(v) ? v.length : 1;
  return n;
}

function isEmptyRaw(raw: unknown[]): boolean {
  return raw.every((v) => v === null || (Array.isArray(v) && v.length === 0));
}

function compileCondition(c: Condition, ctx: Ctx): Pred {
  if ('key' in c) return compileField(c, ctx);
  if ('is_empty' in c) {
    const path = parseKey(c.is_empty.key);
    return (_id, payload) => isEmptyRaw(rawValues(payload, path));
  }
  if ('is_null' in c) {
    const path = parseKey(c.is_null.key);
    return (_id, payload) => rawValues(payload, path).includes(null);
  }
  if ('has_id' in c) {
    const nums = new Set<number>();
    const uuids = new Set<string>();
    for (const id of c.has_id) {
      if (typeof id === 'number') nums.add(id);
      else {
        const u = canonicalUuid(id);
        if (u !== null) uuids.add(u);
      }
    }
    return (id) => {
      if (typeof id === 'number') return nums.has(id);
      if (typeof id !== 'string') return false;
      const u = canonicalUuid(id);
      return u !== null && uuids.has(u);
    };
  }
  if ('has_vector' in c) {
    const name = c.has_vector;
    return (_id, _payload, hasVector) => (hasVector ? hasVector(name) : false);
  }
  if ('nested' in c) {
    const path = parseKey(c.nested.key);
    const inner = compileFilterTree(c.nested.filter, { hook: ctx.hook, prefix: ctx.prefix + path.map((seg) => seg.name).join('.') + '.' });
    return (id, payload, hv) => {
      for (const el of flatten(rawValues(payload, path))) {
        if (isPlainObject(el) && inner(id, el, hv)) return true;
      }
      return false;
    };
  }
  return compileFilterTree(c, ctx);
}

function compileFilterTree(f: Filter, ctx: Ctx): Pred {
  const cc = (c: Condition) => compileCondition(c, ctx);
  const must = (f.must ?? []).map(cc);
  const should = (f.should ?? []).map(cc);
  const mustNot = (f.must_not ?? []).map(cc);
  const ms = f.min_should ? { conds: f.min_should.conditions.map(cc), min: f.min_should.min_count } : null;
  if (must.length === 0 && should.length === 0 && mustNot.length === 0 && ms === null) return TRUE;
  return (id, payload, hv) => {
    for (const p of must) if (!p(id, payload, hv)) return false;
    for (const p of mustNot) if (p(id, payload, hv)) return false;
    if (should.length > 0) {
      let any = false;
      for (const p of should) {
        if (p(id, payload, hv)) {
          any = true;
          break;
        }
      }
      if (!any) return false;
    }
    if (ms !== null && ms.min > 0) {
      let n = 0;
      for (const p of ms.conds) {
        if (p(id, payload, hv) && ++n >= ms.min) break;
      }
      if (n < ms.min) return false;
    }
    return true;
  };
}

/**
 * Compiles a validated filter (the output of validateFilter) into a predicate. Key
 * paths, datetimes, id sets and geo shapes are parsed once here. `text` decides text
 * conditions on fields with a full-text index (TextHook).
 */
export function compileFilter(filter: Filter, text?: TextHook): PointPredicate {
  const p = compileFilterTree(filter, { hook: text, prefix: '' });
  return (id, payload, hasVector) => p(id, payload ?? {}, hasVector);
}

const compiledCache = new WeakMap<Filter, PointPredicate>();

/** One-off evaluation; compiles the filter (cached per filter object) and applies it. */
export function matches(filter: Filter, id: PointId, payload: Payload): boolean {
  let p = compiledCache.get(filter);
  if (p === undefined) {
    p = compileFilter(filter);
    compiledCache.set(filter, p);
  }
  return p(id, payload);
}

/**
 * Payload keys a filter reads, in first-seen order, without duplicates. A nested
 * condition contributes its own key and each inner key prefixed as `<key>[].<inner>`
 * (the form a payload index on the nested field would be declared under).
 */
export function filterKeys(filter: Filter): string[] {
  const out = new Set<string>();
  const walkFilter = (f: Filter, prefix: string) => {
    for (const c of [...(f.must ?? []), ...(f.should ?? []), ...(f.must_not ?? []), ...(f.min_should?.conditions ?? [])]) {
      walkCond(c, prefix);
    }
  };
  const walkCond = (c: Condition, prefix: string) => {
    if ('key' in c) out.add(prefix + c.key);
    else if ('is_empty' in c) out.add(prefix + c.is_empty.key);
    else if ('is_null' in c) out.add(prefix + c.is_null.key);
    else if ('nested' in c) {
      const k = prefix + c.nested.key;
      out.add(k);
      walkFilter(c.nested.filter, `${k.endsWith('[]') ? k : k + '[]'}.`);
    } else if ('has_id' in c || 'has_vector' in c) {
      // not payload keys
    } else walkFilter(c, prefix);
  };
  walkFilter(filter, '');
  return [...out];
}
