/**
 * Payload indexes of one shard: in memory, rebuilt from the payloads at load (only the
 * schema is persisted, by the caller). Pure: no I/O.
 *
 * Field schemas (`parseFieldSchema`): what `PUT /collections/{c}/index` accepts in
 * `field_schema` — a type name (`keyword`, `integer`, `float`, `geo`, `text`, `bool`,
 * `datetime`, `uuid`) or an object `{type, ...params}` per the OpenAPI schemas of v1.18
 * and v1.19 (v1.19 adds `memory` everywhere and `prefix` on keyword, and the `{type:
 * "none"}` stemmer). As in the reference (serde, untagged), keys that the type does not
 * know are ignored and dropped; a known key with a wrong value, an unknown type, a
 * missing `type`, and integer `lookup: false` with `range: false` are FieldSchemaErrors.
 * The params are normalised the way the reference echoes them in `payload_schema`:
 * struct field order, language aliases resolved (`en` -> `english`), stopword sets
 * sorted and deduplicated, `tokenizer` always present (default `word`), and integer
 * `lookup`/`range`/`is_principal` and float/datetime `is_principal` present as null
 * when not given (those fields have no skip-if-none in the reference). The bare-string
 * form has no params. `fieldSchemaToJson` gives the form to persist; parseFieldSchema
 * accepts it back unchanged.
 *
 * What each index holds, per point, from the flat values at the field's key path
 * (filter.ts `rawValues`, arrays flattened, as the filter predicate sees them), one
 * entry per distinct value:
 *  - keyword, text: strings. bool: booleans. uuid: strings that are UUIDs, by their
 *    canonical lowercase hyphenated form (other strings are not indexed).
 *  - integer: every finite number (integers and, so that range candidates never miss
 *    what filter.ts's range accepts, non-integers too); `points` and order_by count
 *    and yield only the integers. float: every number.
 *  - datetime: strings that filter.ts `parseDatetime` accepts, as epoch milliseconds.
 *  - geo: objects with finite numeric `lat` and `lon`.
 * `schemaInfo()[field].points` is the number of points with at least one value of the
 * index's type (for integer: an integer).
 *
 * candidates(filter): a SUPERSET of the offsets the filter.ts predicate accepts, or
 * null when no index narrows the search. The caller checks the compiled predicate on
 * each candidate, so the result is exact. Answered from indexes:
 *  - `must` conditions (intersected), `should` when every branch is answered (union),
 *    `min_should` (a point must be in at least min_count - #unanswered branches of
 *    the answered branches' sets; min_count above the number of conditions: nothing
 *    matches), sub-filters, and `nested` (inner conditions on `<nested key>.<inner key>`
 *    paths: an inner condition true on one element implies a value at the combined
 *    path satisfies it). `must_not`, match `except`, values_count, is_empty, is_null,
 *    has_id and has_vector are never answered (the predicate decides them).
 *  - match value / any: keyword (strings), uuid (UUID strings, compared canonically,
 *    so a superset of filter.ts's exact string equality), bool, integer and float
 *    (integers; an equal-key range in the sorted keys). `any: []` and a `text_any`
 *    without tokens match nothing, with or without an index.
 *  - range with number bounds: integer, float (sorted keys + binary search). Range
 *    with datetime bounds: datetime, bounds parsed with parseDatetime as filter.ts does.
 *  - geo_radius / geo_bounding_box / geo_polygon: geo, by a binary search on latitude
 *    (radius: a padded band; polygon: the exterior ring's padded bounding box) and then
 *    the exact radius / box check (the polygon check is left to the predicate).
 *  - match text / phrase / text_any on a keyword or text index: filter.ts's semantics
 *    are a case-sensitive SUBSTRING test (the reference's full-text index matches
 *    tokens instead). A text index here therefore keeps whole string values like a
 *    keyword index and answers these conditions by scanning its distinct strings with
 *    the same substring test: a true superset (in fact exact), never a token lookup.
 *    Tokenizer, lowercase, stopwords, etc. are validated, stored and reported only.
 *  - Key paths: an index on path P answers a condition on path Q when they have the
 *    same segment names. `[]` only narrows (values(`a[].b`) ⊆ values(`a.b`)), so when
 *    P has a `[]` that Q lacks, the index adds the points where the bracket-free path
 *    reaches values that P does not (a non-array where P expands one), kept per index.
 *    So an index on `arr[].x` serves `nested {key: arr, filter: {key: x}}`.
 *
 * orderValues(field): for scroll `order_by`, the (offset, value) pairs of an integer
 * (unless created with `range: false`), float or datetime index in value order (ties by
 * offset; `desc` is the exact reverse), one pair per distinct value of a point, as the
 * reference streams its numeric index. Values: integers for integer indexes, numbers
 * for float, epoch MICROseconds for datetime (the reference's order_value), rounded to
 * the microsecond. `startFrom` (number in value units, or a datetime string taken as
 * its microsecond timestamp) starts at values >= it (asc) or <= it (desc). Without a
 * suitable index it throws OrderByError with the reference's 400 message. The returned
 * iterator throws if the indexes change while it is consumed.
 *
 * Integer `lookup: false` / `range: false` change nothing for candidates (the sorted
 * keys serve both); `range: false` does make order_by refuse the field, as in the
 * reference.
 *
 * Updates: `update(offset, payload)` replaces everything the point contributed (a
 * per-offset record of its indexed values makes removal cheap). Sorted keys take
 * changes into a small side buffer plus a stale set and are re-sorted from the records
 * when those grow past 256 + n/16 entries. Offsets are u64 bigints below 2^53.
 */

import {
  Condition,
  FieldCondition,
  Filter,
  FilterError,
  GeoPoint,
  Match,
  canonicalUuid,
  haversineMeters,
  parseDatetime,
  parseKey,
  rawValues,
  EARTH_RADIUS_M,
} from './filter';

// ---------------------------------------------------------------------------------
// Field schemas

export type PayloadSchemaType = 'keyword' | 'integer' | 'float' | 'geo' | 'text' | 'bool' | 'datetime' | 'uuid';

export const PAYLOAD_SCHEMA_TYPES: readonly PayloadSchemaType[] = [
  'keyword',
  'integer',
  'float',
  'geo',
  'text',
  'bool',
  'datetime',
  'uuid',
];

export interface FieldSchema {
  readonly type: PayloadSchemaType;
  /** The object form, normalised (header comment); absent for the bare type name. */
  readonly params?: Readonly<Record<string, unknown>>;
}

/** `PayloadIndexInfo` of the reference: one entry of CollectionInfo.payload_schema. */
export interface PayloadIndexInfo {
  data_type: PayloadSchemaType;
  params?: Record<string, unknown>;
  points: number;
}

export class FieldSchemaError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'FieldSchemaError';
  }
}

export class OrderByError extends Error {
  readonly key: string;
  constructor(key: string, message?: string) {
    super(
      message ??
        `No range index for \`order_by\` key: ${key}. Please create one to use \`order_by\`. ` +
          'Integer, float, and datetime payloads can have range indexes, see https://qdrant.tech/documentation/concepts/indexing/#payload-index.',
    );
    this.name = 'OrderByError';
    this.key = key;
  }
}

const LANGUAGES: readonly (readonly [string, string])[] = [
  ['arabic', 'ar'],
  ['azerbaijani', 'az'],
  ['basque', 'eu'],
  ['bengali', 'bn'],
  ['catalan', 'ca'],
  ['chinese', 'zh'],
  ['danish', 'da'],
  ['dutch', 'nl'],
  ['english', 'en'],
  ['finnish', 'fi'],
  ['french', 'fr'],
  ['german', 'de'],
  ['greek', 'el'],
  ['hebrew', 'he'],
  ['hinglish', 'hi-en'],
  ['hungarian', 'hu'],
  ['indonesian', 'id'],
  ['italian', 'it'],
  ['japanese', 'jp'],
  ['kazakh', 'kk'],
  ['nepali', 'ne'],
  ['norwegian', 'no'],
  ['portuguese', 'pt'],
  ['romanian', 'ro'],
  ['russian', 'ru'],
  ['slovene', 'sl'],
  ['spanish', 'es'],
  ['swedish', 'sv'],
  ['tajik', 'tg'],
  ['turkish', 'tr'],
];
const SNOWBALL_LANGUAGES: readonly (readonly [string, string])[] = [
  ['arabic', 'ar'],
  ['armenian', 'hy'],
  ['danish', 'da'],
  ['dutch', 'nl'],
  ['english', 'en'],
  ['finnish', 'fi'],
  ['french', 'fr'],
  ['german', 'de'],
  ['greek', 'el'],
  ['hungarian', 'hu'],
  ['italian', 'it'],
  ['norwegian', 'no'],
  ['portuguese', 'pt'],
  ['romanian', 'ro'],
  ['russian', 'ru'],
  ['spanish', 'es'],
  ['swedish', 'sv'],
  ['tamil', 'ta'],
  ['turkish', 'tr'],
];
const TOKENIZERS = ['prefix', 'whitespace', 'word', 'multilingual'];
const MEMORY = ['cold', 'cached', 'pinned'];

type ParamKind = 'bool' | 'uint' | 'memory' | 'tokenizer' | 'stopwords' | 'stemmer';
/** [name, kind, serialized as null when absent] in the reference's struct field order. */
type ParamSpec = readonly [string, ParamKind, boolean?];

const COMMON_TAIL: readonly ParamSpec[] = [
  ['on_disk', 'bool'],
  ['memory', 'memory'],
  ['enable_hnsw', 'bool'],
];
const PARAM_SPECS: Record<PayloadSchemaType, readonly ParamSpec[]> = {
  keyword: [['is_tenant', 'bool'], ...COMMON_TAIL, ['prefix', 'bool']],
  integer: [['lookup', 'bool', true], ['range', 'bool', true], ['is_principal', 'bool', true], ...COMMON_TAIL],
  float: [['is_principal', 'bool', true], ...COMMON_TAIL],
  geo: [...COMMON_TAIL],
  text: [
    ['tokenizer', 'tokenizer'],
    ['min_token_len', 'uint'],
    ['max_token_len', 'uint'],
    ['lowercase', 'bool'],
    ['ascii_folding', 'bool'],
    ['phrase_matching', 'bool'],
    ['stopwords', 'stopwords'],
    ['on_disk', 'bool'],
    ['memory', 'memory'],
    ['stemmer', 'stemmer'],
    ['enable_hnsw', 'bool'],
  ],
  bool: [...COMMON_TAIL],
  datetime: [['is_principal', 'bool', true], ...COMMON_TAIL],
  uuid: [['is_tenant', 'bool'], ...COMMON_TAIL],
};

function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'string') return `"${v}"`;
  return typeof v === 'object' ? 'an object' : `${typeof v} ${String(v)}`;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function language(v: unknown, table: readonly (readonly [string, string])[], path: string): string {
  if (typeof v === 'string') {
    for (const [name, alias] of table) if (v === name || v === alias) return name;
  }
  throw new FieldSchemaError(`${path}: unknown language ${describe(v)} (expected one of: ${table.map((l) => l[0]).join(', ')})`);
}

function sortedUnique(xs: string[], order?: readonly (readonly [string, string])[]): string[] {
  const u = [...new Set(xs)];
  if (order) {
    const rank = new Map(order.map(([n], i) => [n, i]));
    return u.sort((a, b) => rank.get(a)! - rank.get(b)!);
  }
  // BTreeSet<String> order: by UTF-8 bytes
  return u.sort((a, b) => Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8')));
}

function parseParam(kind: ParamKind, v: unknown, path: string): unknown {
  switch (kind) {
    case 'bool':
      if (v === null || typeof v === 'boolean') return v;
      throw new FieldSchemaError(`${path}: expected a boolean or null, got ${describe(v)}`);
    case 'uint':
      if (v === null || (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0)) return v;
      throw new FieldSchemaError(`${path}: expected an unsigned integer or null, got ${describe(v)}`);
    case 'memory':
      if (v === null || (typeof v === 'string' && MEMORY.includes(v))) return v;
      throw new FieldSchemaError(`${path}: expected one of ${MEMORY.join(', ')} or null, got ${describe(v)}`);
    case 'tokenizer':
      if (typeof v === 'string' && TOKENIZERS.includes(v)) return v;
      throw new FieldSchemaError(`${path}: expected one of ${TOKENIZERS.join(', ')}, got ${describe(v)}`);
    case 'stopwords': {
      if (v === null || typeof v === 'string') return v === null ? null : language(v, LANGUAGES, path);
      if (!isPlainObject(v)) throw new FieldSchemaError(`${path}: expected a language or {languages, custom}, got ${describe(v)}`);
      const out: Record<string, unknown> = {};
      if (v.languages !== undefined && v.languages !== null) {
        if (!Array.isArray(v.languages)) {
          throw new FieldSchemaError(`${path}.languages: expected an array of languages, got ${describe(v.languages)}`);
        }
        out.languages = sortedUnique(
          v.languages.map((l, i) => language(l, LANGUAGES, `${path}.languages[${i}]`)),
          LANGUAGES,
        );
      }
      if (v.custom !== undefined && v.custom !== null) {
        if (!Array.isArray(v.custom)) throw new FieldSchemaError(`${path}.custom: expected an array of strings, got ${describe(v.custom)}`);
        v.custom.forEach((w, i) => {
          if (typeof w !== 'string') throw new FieldSchemaError(`${path}.custom[${i}]: expected a string, got ${describe(w)}`);
        });
        out.custom = sortedUnique(v.custom as string[]);
      }
      return out;
    }
    case 'stemmer': {
      if (v === null) return null;
      if (!isPlainObject(v)) throw new FieldSchemaError(`${path}: expected {type: "snowball", language} or {type: "none"}, got ${describe(v)}`);
      if (v.type === 'snowball') {
        if (v.language === undefined) throw new FieldSchemaError(`${path}.language: missing`);
        return { type: 'snowball', language: language(v.language, SNOWBALL_LANGUAGES, `${path}.language`) };
      }
      if (v.type === 'none') return { type: 'none' };
      throw new FieldSchemaError(`${path}.type: expected "snowball" or "none", got ${describe(v.type)}`);
    }
  }
}

function schemaType(v: unknown, path: string): PayloadSchemaType {
  if (typeof v === 'string' && (PAYLOAD_SCHEMA_TYPES as readonly string[]).includes(v)) return v as PayloadSchemaType;
  throw new FieldSchemaError(`${path}: unknown payload schema type ${describe(v)} (expected one of: ${PAYLOAD_SCHEMA_TYPES.join(', ')})`);
}

/**
 * Parses `field_schema` of a create-index request (header comment). null/undefined is
 * refused with the reference's message (it does not infer a type).
 */
export function parseFieldSchema(x: unknown): FieldSchema {
  if (x === undefined || x === null) {
    throw new FieldSchemaError("Can't auto-detect field type, please specify `field_schema` in the request");
  }
  if (typeof x === 'string') return { type: schemaType(x, 'field_schema') };
  if (!isPlainObject(x)) {
    throw new FieldSchemaError(`field_schema: expected a type name or an object with "type", got ${describe(x)}`);
  }
  if (x.type === undefined) throw new FieldSchemaError('field_schema.type: missing');
  const type = schemaType(x.type, 'field_schema.type');
  const params: Record<string, unknown> = { type };
  for (const [name, kind, nullWhenAbsent] of PARAM_SPECS[type]) {
    const v = x[name];
    if (v === undefined) {
      if (kind === 'tokenizer') params[name] = 'word';
      else if (nullWhenAbsent) params[name] = null;
      continue;
    }
    const p = parseParam(kind, v, `field_schema.${name}`);
    // Option<...> fields skipped when None: a null is dropped like an absent value
    if (p === null && !nullWhenAbsent) continue;
    params[name] = p;
  }
  if (type === 'integer' && params.lookup === false && params.range === false) {
    throw new FieldSchemaError("field_schema: the 'lookup' and 'range' capabilities can't be both disabled");
  }
  return { type, params };
}

/** The JSON to persist or echo: the type name, or the normalised params object. */
export function fieldSchemaToJson(s: FieldSchema): PayloadSchemaType | Record<string, unknown> {
  return s.params ? structuredClone(s.params as Record<string, unknown>) : s.type;
}

/** True when both schemas are the same (after normalisation). */
export function sameFieldSchema(a: FieldSchema, b: FieldSchema): boolean {
  return JSON.stringify(fieldSchemaToJson(a)) === JSON.stringify(fieldSchemaToJson(b));
}

// ---------------------------------------------------------------------------------
// Internals: offsets as numbers, postings, sorted keys

type Off = number;
type PathSegment = ReturnType<typeof parseKey>[number];

function toOff(offset: bigint | number): Off {
  const n = typeof offset === 'bigint' ? Number(offset) : offset;
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new RangeError(`payload index: offset must be a non-negative integer below 2^53, got ${String(offset)}`);
  }
  return n;
}

function flatten(values: unknown[], out: unknown[] = []): unknown[] {
  for (const v of values) {
    if (Array.isArray(v)) flatten(v, out);
    else out.push(v);
  }
  return out;
}

/** Distinct values in first-seen order (strings, booleans or finite numbers). */
function dedupe<T>(xs: T[]): T[] {
  if (xs.length > 32) return [...new Set(xs)];
  const out: T[] = [];
  for (const v of xs) if (!out.includes(v)) out.push(v);
  return out;
}

type Posting = Off | Set<Off>;

function postingAdd<K>(map: Map<K, Posting>, key: K, off: Off): void {
  const p = map.get(key);
  if (p === undefined) map.set(key, off);
  else if (typeof p === 'number') {
    if (p !== off) map.set(key, new Set([p, off]));
  } else p.add(off);
}

function postingDelete<K>(map: Map<K, Posting>, key: K, off: Off): void {
  const p = map.get(key);
  if (p === undefined) return;
  if (typeof p === 'number') {
    if (p === off) map.delete(key);
    return;
  }
  p.delete(off);
  if (p.size === 1) map.set(key, p.values().next().value as Off);
  else if (p.size === 0) map.delete(key);
}

function postingSize(p: Posting | undefined): number {
  return p === undefined ? 0 : typeof p === 'number' ? 1 : p.size;
}

function postingInto(p: Posting | undefined, out: Set<Off>): void {
  if (p === undefined) return;
  if (typeof p === 'number') out.add(p);
  else for (const o of p) out.add(o);
}

interface Bounds {
  lo: number;
  loIncl: boolean;
  hi: number;
  hiIncl: boolean;
}

/** Bounds of filter.ts's cmpBounds, with the test it applies. */
function boundsOf(r: { gt?: number | null; gte?: number | null; lt?: number | null; lte?: number | null }): {
  b: Bounds;
  test: (x: number) => boolean;
} {
  const { gt, gte, lt, lte } = r;
  let lo = -Infinity;
  let loIncl = true;
  if (gte != null && gte > lo) lo = gte;
  if (gt != null && (gt > lo || (gt === lo && loIncl))) {
    lo = gt;
    loIncl = false;
  }
  let hi = Infinity;
  let hiIncl = true;
  if (lte != null && lte < hi) hi = lte;
  if (lt != null && (lt < hi || (lt === hi && hiIncl))) {
    hi = lt;
    hiIncl = false;
  }
  const test = (x: number) =>
    (gt == null || x > gt) && (gte == null || x >= gte) && (lt == null || x < lt) && (lte == null || x <= lte);
  return { b: { lo, loIncl, hi, hiIncl }, test };
}

/**
 * (key, offset) pairs sorted by key then offset, with a side buffer: offsets whose
 * current keys are not in the sorted arrays (`delta`) and offsets whose entries in the
 * sorted arrays are outdated (`stale`). The owner rebuilds it from its records.
 */
class SortedKeys {
  private keys = new Float64Array(0);
  private ids = new Float64Array(0);
  private readonly stale = new Set<Off>();
  private readonly delta = new Map<Off, readonly number[]>();
  private deltaCount = 0;

  get dirty(): number {
    return this.stale.size + this.deltaCount;
  }

  build(count: number, fill: (push: (key: number, id: Off) => void) => void): void {
    const k = new Float64Array(count);
    const d = new Float64Array(count);
    let n = 0;
    fill((key, id) => {
      k[n] = key;
      d[n] = id;
      n++;
    });
    const perm = new Uint32Array(n);
    let sorted = true;
    for (let i = 0; i < n; i++) {
      perm[i] = i;
      if (i > 0 && (k[i] < k[i - 1] || (k[i] === k[i - 1] && d[i] < d[i - 1]))) sorted = false;
    }
    if (!sorted) perm.sort((a, b) => k[a] - k[b] || d[a] - d[b]);
    const keys = new Float64Array(n);
    const ids = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      keys[i] = k[perm[i]];
      ids[i] = d[perm[i]];
    }
    this.keys = keys;
    this.ids = ids;
    this.stale.clear();
    this.delta.clear();
    this.deltaCount = 0;
  }

  /** `id` has no current entries here (never had, or removed since). */
  add(id: Off, keys: readonly number[]): void {
    if (keys.length === 0) return;
    this.delta.set(id, keys);
    this.deltaCount += keys.length;
  }

  /** Drops the current entries of `id` (the owner knows it had some). */
  remove(id: Off): void {
    const d = this.delta.get(id);
    if (d !== undefined) {
      this.delta.delete(id);
      this.deltaCount -= d.length;
    } else this.stale.add(id);
  }

  private lowerBound(x: number, incl: boolean): number {
    const keys = this.keys;
    let lo = 0;
    let hi = keys.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (keys[mid] < x || (!incl && keys[mid] === x)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Index one past the last key below (or at, when incl) x. */
  private upperBound(x: number, incl: boolean): number {
    const keys = this.keys;
    let lo = 0;
    let hi = keys.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (keys[mid] < x || (incl && keys[mid] === x)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  estimate(b: Bounds): number {
    const i = this.lowerBound(b.lo, b.loIncl);
    const j = this.upperBound(b.hi, b.hiIncl);
    return Math.max(0, j - i) + this.deltaCount;
  }

  /** Adds to `out` the offsets with a key in the bounds that passes `test`. */
  collect(b: Bounds, test: (key: number) => boolean, out: Set<Off>): void {
    const { keys, ids, stale } = this;
    const j = this.upperBound(b.hi, b.hiIncl);
    const checkStale = stale.size > 0;
    for (let i = this.lowerBound(b.lo, b.loIncl); i < j; i++) {
      const id = ids[i];
      if (checkStale && stale.has(id)) continue;
      if (test(keys[i])) out.add(id);
    }
    for (const [id, ks] of this.delta) {
      for (const k of ks) {
        if (test(k)) {
          out.add(id);
          break;
        }
      }
    }
  }

  /** (key, id) pairs in (key, id) order, or its reverse; from `start` on when given. */
  *iterate(desc: boolean, start: number | null, check: () => void): Generator<[number, Off]> {
    const { keys, ids, stale } = this;
    const pending: [number, Off][] = [];
    for (const [id, ks] of this.delta) {
      for (const k of ks) {
        if (start === null || (desc ? k <= start : k >= start)) pending.push([k, id]);
      }
    }
    pending.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    if (desc) pending.reverse();
    let p = 0;
    const before = (k: number, id: Off, q: [number, Off]) =>
      desc ? k > q[0] || (k === q[0] && id > q[1]) : k < q[0] || (k === q[0] && id < q[1]);
    if (!desc) {
      for (let i = start === null ? 0 : this.lowerBound(start, true); i < keys.length; i++) {
        const id = ids[i];
        if (stale.has(id)) continue;
        while (p < pending.length && !before(keys[i], id, pending[p])) {
          yield pending[p++];
          check();
        }
        yield [keys[i], id];
        check();
      }
    } else {
      for (let i = (start === null ? keys.length : this.upperBound(start, true)) - 1; i >= 0; i--) {
        const id = ids[i];
        if (stale.has(id)) continue;
        while (p < pending.length && !before(keys[i], id, pending[p])) {
          yield pending[p++];
          check();
        }
        yield [keys[i], id];
        check();
      }
    }
    while (p < pending.length) {
      yield pending[p++];
      check();
    }
  }
}

// ---------------------------------------------------------------------------------
// Index nodes (what candidates() combines)

interface Node {
  /** Rough upper bound of the materialized size (drives evaluation order). */
  readonly est: number;
  materialize(): Set<Off>;
  test(off: Off): boolean;
}

const EMPTY_NODE: Node = { est: 0, materialize: () => new Set(), test: () => false };

function andNode(parts: Node[]): Node {
  if (parts.length === 1) return parts[0];
  const sorted = [...parts].sort((a, b) => a.est - b.est);
  return {
    est: sorted[0].est,
    materialize() {
      const first = sorted[0].materialize();
      if (sorted.length === 1 || first.size === 0) return first;
      const out = new Set<Off>();
      outer: for (const o of first) {
        for (let i = 1; i < sorted.length; i++) if (!sorted[i].test(o)) continue outer;
        out.add(o);
      }
      return out;
    },
    test: (o) => sorted.every((n) => n.test(o)),
  };
}

/** Offsets in at least `need` (>= 1) of the children. */
function countNode(need: number, children: Node[]): Node {
  if (need === 1 && children.length === 1) return children[0];
  return {
    est: children.reduce((s, c) => s + c.est, 0),
    materialize() {
      if (need === 1) {
        const out = new Set<Off>();
        for (const c of children) for (const o of c.materialize()) out.add(o);
        return out;
      }
      const counts = new Map<Off, number>();
      for (const c of children) for (const o of c.materialize()) counts.set(o, (counts.get(o) ?? 0) + 1);
      const out = new Set<Off>();
      for (const [o, n] of counts) if (n >= need) out.add(o);
      return out;
    },
    test(o) {
      let n = 0;
      for (const c of children) if (c.test(o) && ++n >= need) return true;
      return false;
    },
  };
}

// ---------------------------------------------------------------------------------
// Field indexes

abstract class FieldIndex<V = unknown> {
  readonly records = new Map<Off, V[]>();
  /** Points whose bracket-free path reaches values the declared path does not. */
  readonly extra: Set<Off> | null;
  private readonly loose: PathSegment[] | null;
  counted = 0;
  entries = 0;
  protected loading = false;

  constructor(
    readonly field: string,
    readonly path: PathSegment[],
    readonly schema: FieldSchema,
  ) {
    const bracketed = path.some((s) => s.expand > 0);
    this.loose = bracketed ? path.map((s) => ({ name: s.name, expand: 0 })) : null;
    this.extra = bracketed ? new Set() : null;
  }

  /** Distinct typed values of one point from its flat values. */
  protected abstract extract(flat: unknown[]): V[];
  protected abstract isCounted(vals: V[]): boolean;
  protected abstract addEntries(off: Off, vals: V[]): void;
  protected abstract removeEntries(off: Off, vals: V[]): void;
  protected afterChange(): void {}
  protected finishLoad(): void {}
  protected sameValue(a: V, b: V): boolean {
    return a === b;
  }

  load(points: Iterable<[bigint, Record<string, unknown> | null]>): void {
    this.loading = true;
    try {
      for (const [offset, payload] of points) this.set(toOff(offset), payload);
    } finally {
      this.loading = false;
    }
    this.finishLoad();
  }

  set(off: Off, payload: Record<string, unknown> | null): void {
    const flat = payload == null ? [] : flatten(rawValues(payload, this.path));
    const vals = flat.length === 0 ? [] : this.extract(flat);
    const old = this.records.get(off);
    let same = false;
    if (old !== undefined) {
      same = old.length === vals.length && old.every((v, i) => this.sameValue(v, vals[i]));
      if (!same) {
        this.removeEntries(off, old);
        this.records.delete(off);
        this.entries -= old.length;
        if (this.isCounted(old)) this.counted--;
      }
    }
    if (!same && vals.length > 0) {
      this.records.set(off, vals);
      this.entries += vals.length;
      if (this.isCounted(vals)) this.counted++;
      this.addEntries(off, vals);
    }
    if (this.extra !== null) {
      const wide = payload == null ? 0 : flatten(rawValues(payload, this.loose!)).length;
      if (wide > flat.length) this.extra.add(off);
      else this.extra.delete(off);
    }
    if (!same && !this.loading) this.afterChange();
  }

  /** A node over this index's values passing `pred`; `wide` adds the extra points. */
  protected leaf(
    wide: boolean,
    pred: (v: V) => boolean,
    est: number,
    materialize: (out: Set<Off>) => void,
  ): Node {
    const extra = wide ? this.extra : null;
    const records = this.records;
    return {
      est: est + (extra ? extra.size : 0),
      materialize() {
        const out = new Set<Off>();
        materialize(out);
        if (extra) for (const o of extra) out.add(o);
        return out;
      },
      test(o) {
        const r = records.get(o);
        if (r !== undefined) for (const v of r) if (pred(v)) return true;
        return extra !== null && extra.has(o);
      },
    };
  }

  /** A node for match / range / geo of the condition, or null when not answerable here. */
  matchNode(_m: Match, _wide: boolean): Node | null {
    return null;
  }
  rangeNode(_r: NonNullable<FieldCondition['range']>, _wide: boolean): Node | null {
    return null;
  }
  geoNode(_c: FieldCondition, _wide: boolean): Node | null {
    return null;
  }
}

/** keyword, text, uuid, bool: distinct value -> offsets. */
class HashIndex<K extends string | boolean> extends FieldIndex<K> {
  readonly postings = new Map<K, Posting>();

  constructor(
    field: string,
    path: PathSegment[],
    schema: FieldSchema,
    private readonly key: (v: unknown) => K | null,
  ) {
    super(field, path, schema);
  }

  protected extract(flat: unknown[]): K[] {
    const out: K[] = [];
    for (const v of flat) {
      const k = this.key(v);
      if (k !== null) out.push(k);
    }
    return dedupe(out);
  }
  protected isCounted(vals: K[]): boolean {
    return vals.length > 0;
  }
  protected addEntries(off: Off, vals: K[]): void {
    for (const k of vals) postingAdd(this.postings, k, off);
  }
  protected removeEntries(off: Off, vals: K[]): void {
    for (const k of vals) postingDelete(this.postings, k, off);
  }

  /** Keys to look up for match value/any, or null when this index cannot answer. */
  private lookupKeys(m: Match): K[] | null {
    const wanted: unknown[] | null = 'value' in m ? [m.value] : 'any' in m ? m.any : null;
    if (wanted === null) return null;
    const out: K[] = [];
    for (const w of wanted) {
      const t = this.schema.type;
      if (t === 'bool' ? typeof w !== 'boolean' : typeof w !== 'string') return null;
      const k = this.key(w);
      if (k === null) return null; // e.g. a non-UUID string on a uuid index
      out.push(k);
    }
    return out;
  }

  matchNode(m: Match, wide: boolean): Node | null {
    const keys = this.lookupKeys(m);
    const postings = this.postings;
    if (keys !== null) {
      const set = new Set<K>(keys);
      let est = 0;
      for (const k of set) est += postingSize(postings.get(k));
      return this.leaf(wide, (v) => set.has(v), est, (out) => {
        for (const k of set) postingInto(postings.get(k), out);
      });
    }
    const t = this.schema.type;
    if (t !== 'keyword' && t !== 'text') return null;
    let sub: ((s: string) => boolean) | null = null;
    if ('text' in m) {
      const q = m.text;
      sub = (s) => s.includes(q);
    } else if ('phrase' in m) {
      const q = m.phrase;
      sub = (s) => s.includes(q);
    } else if ('text_any' in m) {
      const tokens = m.text_any.split(/\s+/).filter((x) => x.length > 0);
      sub = (s) => tokens.some((x) => s.includes(x));
    }
    if (sub === null) return null;
    const test = sub as (v: K) => boolean;
    return this.leaf(wide, test, this.records.size, (out) => {
      for (const [k, p] of postings) if (test(k)) postingInto(p, out);
    });
  }
}

/** integer, float, datetime: sorted numeric keys. */
/**
 * An index that keeps one sorted number per value (`sortKey`) for range scans:
 * entries go into `sorted` incrementally, and it is rebuilt in bulk after a load or
 * once enough incremental changes piled up.
 */
abstract class SortedIndex<V> extends FieldIndex<V> {
  readonly sorted = new SortedKeys();

  protected abstract sortKey(v: V): number;

  protected addEntries(off: Off, vals: V[]): void {
    if (!this.loading) this.sorted.add(off, vals.map((v) => this.sortKey(v)));
  }
  protected removeEntries(off: Off): void {
    if (!this.loading) this.sorted.remove(off);
  }
  protected finishLoad(): void {
    this.rebuild();
  }
  protected afterChange(): void {
    if (this.sorted.dirty > 256 + this.entries / 16) this.rebuild();
  }
  rebuild(): void {
    this.sorted.build(this.entries, (push) => {
      for (const [off, vals] of this.records) for (const v of vals) push(this.sortKey(v), off);
    });
  }
}

class NumIndex extends SortedIndex<number> {
  protected sortKey(v: number): number {
    return v;
  }

  protected extract(flat: unknown[]): number[] {
    const out: number[] = [];
    const dt = this.schema.type === 'datetime';
    for (const v of flat) {
      if (dt) {
        if (typeof v === 'string') {
          const ms = parseDatetime(v);
          if (!Number.isNaN(ms)) out.push(ms);
        }
      } else if (typeof v === 'number' && Number.isFinite(v)) out.push(v);
    }
    return dedupe(out);
  }
  protected isCounted(vals: number[]): boolean {
    return this.schema.type === 'integer' ? vals.some((v) => Number.isInteger(v)) : vals.length > 0;
  }

  private node(wide: boolean, r: { gt?: number | null; gte?: number | null; lt?: number | null; lte?: number | null }): Node {
    const { b, test } = boundsOf(r);
    const sorted = this.sorted;
    return this.leaf(wide, test, sorted.estimate(b), (out) => sorted.collect(b, test, out));
  }

  matchNode(m: Match, wide: boolean): Node | null {
    if (this.schema.type === 'datetime') return null;
    const wanted: unknown[] | null = 'value' in m ? [m.value] : 'any' in m ? m.any : null;
    if (wanted === null || wanted.some((w) => typeof w !== 'number')) return null;
    const nodes = (wanted as number[]).map((w) => this.node(wide, { gte: w, lte: w }));
    return nodes.length === 1 ? nodes[0] : countNode(1, nodes);
  }

  rangeNode(r: NonNullable<FieldCondition['range']>, wide: boolean): Node | null {
    const bounds = [r.gt, r.gte, r.lt, r.lte];
    const isDt = bounds.some((x) => typeof x === 'string');
    if (isDt !== (this.schema.type === 'datetime')) return null;
    if (!isDt) return this.node(wide, r as { gt?: number | null; gte?: number | null; lt?: number | null; lte?: number | null });
    const conv = (x: unknown) => (x == null ? null : parseDatetime(x as string));
    return this.node(wide, { gt: conv(r.gt), gte: conv(r.gte), lt: conv(r.lt), lte: conv(r.lte) });
  }

  hasRange(): boolean {
    const t = this.schema.type;
    if (t === 'integer') return this.schema.params?.range !== false;
    return t === 'float' || t === 'datetime';
  }
}

/** geo: points, with latitudes sorted for band searches. */
class GeoIndex extends SortedIndex<GeoPoint> {
  /** Points with a latitude outside [-90, 90] (the radius band does not bound them). */
  readonly oddLat = new Set<Off>();

  protected extract(flat: unknown[]): GeoPoint[] {
    const out: GeoPoint[] = [];
    for (const v of flat) {
      if (!isPlainObject(v)) continue;
      const { lat, lon } = v;
      if (typeof lat !== 'number' || typeof lon !== 'number' || !Number.isFinite(lat) || !Number.isFinite(lon)) continue;
      if (!out.some((p) => p.lat === lat && p.lon === lon)) out.push({ lat, lon });
    }
    return out;
  }
  protected isCounted(vals: GeoPoint[]): boolean {
    return vals.length > 0;
  }
  protected sameValue(a: GeoPoint, b: GeoPoint): boolean {
    return a.lat === b.lat && a.lon === b.lon;
  }
  protected sortKey(p: GeoPoint): number {
    return p.lat;
  }
  protected addEntries(off: Off, vals: GeoPoint[]): void {
    if (vals.some((p) => p.lat < -90 || p.lat > 90)) this.oddLat.add(off);
    super.addEntries(off, vals);
  }
  protected removeEntries(off: Off): void {
    this.oddLat.delete(off);
    super.removeEntries(off);
  }

  geoNode(c: FieldCondition, wide: boolean): Node | null {
    const parts: Node[] = [];
    const band = (lo: number, hi: number, pred: (p: GeoPoint) => boolean, odd: boolean): Node => {
      const b: Bounds = { lo, loIncl: true, hi, hiIncl: true };
      const records = this.records;
      const oddLat = this.oddLat;
      return this.leaf(wide, pred, this.sorted.estimate(b) + (odd ? oddLat.size : 0), (out) => {
        const inBand = new Set<Off>();
        this.sorted.collect(b, () => true, inBand);
        if (odd) for (const o of oddLat) inBand.add(o);
        for (const o of inBand) if (records.get(o)!.some(pred)) out.add(o);
      });
    };
    if (c.geo_radius) {
      const { center, radius } = c.geo_radius;
      const d = (radius / EARTH_RADIUS_M) * (180 / Math.PI) * (1 + 1e-9) + 1e-9;
      parts.push(band(center.lat - d, center.lat + d, (p) => haversineMeters(center, p) <= radius, true));
    }
    if (c.geo_bounding_box) {
      const { top_left: tl, bottom_right: br } = c.geo_bounding_box;
      const wraps = tl.lon > br.lon;
      const pred = (p: GeoPoint) => {
        if (p.lat > tl.lat || p.lat < br.lat) return false;
        return wraps ? p.lon >= tl.lon || p.lon <= br.lon : p.lon >= tl.lon && p.lon <= br.lon;
      };
      parts.push(band(br.lat, tl.lat, pred, false));
    }
    if (c.geo_polygon) {
      // superset: the exterior ring's bounding box, padded (the predicate does the ring test)
      const ring = c.geo_polygon.exterior.points;
      const eps = 1e-9;
      const minLat = Math.min(...ring.map((p) => p.lat)) - eps;
      const maxLat = Math.max(...ring.map((p) => p.lat)) + eps;
      const minLon = Math.min(...ring.map((p) => p.lon)) - eps;
      const maxLon = Math.max(...ring.map((p) => p.lon)) + eps;
      const pred = (p: GeoPoint) => p.lat >= minLat && p.lat <= maxLat && p.lon >= minLon && p.lon <= maxLon;
      parts.push(band(minLat, maxLat, pred, false));
    }
    return parts.length === 0 ? null : andNode(parts);
  }
}

function makeIndex(field: string, path: PathSegment[], schema: FieldSchema): FieldIndex {
  switch (schema.type) {
    case 'keyword':
    case 'text':
      return new HashIndex<string>(field, path, schema, (v) => (typeof v === 'string' ? v : null));
    case 'uuid':
      return new HashIndex<string>(field, path, schema, (v) => (typeof v === 'string' ? canonicalUuid(v) : null));
    case 'bool':
      return new HashIndex<boolean>(field, path, schema, (v) => (typeof v === 'boolean' ? v : null));
    case 'integer':
    case 'float':
    case 'datetime':
      return new NumIndex(field, path, schema);
    case 'geo':
      return new GeoIndex(field, path, schema);
  }
}

// ---------------------------------------------------------------------------------
// The shard's indexes

export interface OrderEntry {
  offset: bigint;
  /** integer / float: the payload number; datetime: epoch microseconds. */
  value: number;
}

export interface OrderOptions {
  direction?: 'asc' | 'desc' | null;
  /** First value (in value units; a string is a datetime, taken in microseconds). */
  startFrom?: number | string | null;
}

function namesKey(path: readonly PathSegment[]): string {
  return path.map((s) => s.name).join('.');
}

export class PayloadIndexes {
  private readonly byField = new Map<string, FieldIndex>();
  /** Indexes by their path's segment names (brackets dropped). */
  private readonly byNames = new Map<string, FieldIndex[]>();
  private changes = 0;

  /**
   * Builds the index on `field` (a key path such as `a.b` or `a[].b`) over the given
   * points, replacing an existing index on that field.
   */
  create(field: string, schema: FieldSchema, points: Iterable<[bigint, Record<string, unknown> | null]>): void {
    let path: PathSegment[];
    try {
      path = parseKey(field, 'field_name');
    } catch (e) {
      if (e instanceof FilterError) throw new FieldSchemaError(e.message);
      throw e;
    }
    const idx = makeIndex(field, path, schema);
    idx.load(points);
    this.drop(field);
    this.byField.set(field, idx);
    const nk = namesKey(path);
    const list = this.byNames.get(nk);
    if (list) list.push(idx);
    else this.byNames.set(nk, [idx]);
  }

  drop(field: string): boolean {
    const idx = this.byField.get(field);
    if (!idx) return false;
    this.byField.delete(field);
    const nk = namesKey(idx.path);
    const list = this.byNames.get(nk)!.filter((i) => i !== idx);
    if (list.length > 0) this.byNames.set(nk, list);
    else this.byNames.delete(nk);
    this.changes++;
    return true;
  }

  has(field: string): boolean {
    return this.byField.has(field);
  }

  fields(): string[] {
    return [...this.byField.keys()];
  }

  schemaOf(field: string): FieldSchema | undefined {
    return this.byField.get(field)?.schema;
  }

  /** The point at `offset` now has `payload` (null: the point was removed). */
  update(offset: bigint, payload: Record<string, unknown> | null): void {
    if (this.byField.size === 0) return;
    const off = toOff(offset);
    for (const idx of this.byField.values()) idx.set(off, payload);
    this.changes++;
  }

  /** CollectionInfo.payload_schema. */
  schemaInfo(): Record<string, PayloadIndexInfo> {
    const out: Record<string, PayloadIndexInfo> = {};
    for (const [field, idx] of this.byField) {
      out[field] = idx.schema.params
        ? { data_type: idx.schema.type, params: structuredClone(idx.schema.params as Record<string, unknown>), points: idx.counted }
        : { data_type: idx.schema.type, points: idx.counted };
    }
    return out;
  }

  /**
   * A superset of the offsets matching the (validated) filter, or null when no index
   * narrows the search (header comment).
   */
  candidates(filter: Filter): Set<bigint> | null {
    const node = this.filterNode(filter, []);
    if (node === null) return null;
    const out = new Set<bigint>();
    for (const o of node.materialize()) out.add(BigInt(o));
    return out;
  }

  /**
   * The offsets by value of the range index on `field` (header comment). Throws
   * OrderByError at once when there is none.
   */
  orderValues(field: string, opts: OrderOptions = {}): IterableIterator<OrderEntry> {
    const idx = this.byField.get(field);
    if (!(idx instanceof NumIndex) || !idx.hasRange()) throw new OrderByError(field);
    const desc = opts.direction === 'desc';
    const dt = idx.schema.type === 'datetime';
    const intsOnly = idx.schema.type === 'integer';
    let start: number | null = null;
    const sf = opts.startFrom;
    if (typeof sf === 'string') {
      const ms = parseDatetime(sf);
      if (Number.isNaN(ms)) throw new OrderByError(field, `order_by.start_from: invalid RFC 3339 datetime "${sf}"`);
      start = dt ? ms : toMicros(ms);
    } else if (typeof sf === 'number') {
      start = dt ? sf / 1000 : sf;
    }
    const at = this.changes;
    const check = () => {
      if (this.changes !== at) throw new Error('payload indexes changed while order_by values were being read');
    };
    const it = idx.sorted.iterate(desc, start, check);
    function* gen(): Generator<OrderEntry> {
      for (const [k, off] of it) {
        if (intsOnly && !Number.isInteger(k)) continue;
        yield { offset: BigInt(off), value: dt ? toMicros(k) : k };
      }
    }
    return gen();
  }

  // -------------------------------------------------------------------------------

  private filterNode(f: Filter, prefix: PathSegment[]): Node | null {
    const parts: Node[] = [];
    for (const c of list(f.must)) {
      const n = this.condNode(c, prefix);
      if (n !== null) parts.push(n);
    }
    const should = list(f.should);
    if (should.length > 0) {
      const nodes = should.map((c) => this.condNode(c, prefix));
      if (nodes.every((n) => n !== null)) parts.push(countNode(1, nodes as Node[]));
    }
    const ms = f.min_should;
    if (ms && ms.min_count > 0) {
      const conds = list(ms.conditions);
      if (ms.min_count > conds.length) return EMPTY_NODE;
      const nodes = conds.map((c) => this.condNode(c, prefix));
      const known = nodes.filter((n): n is Node => n !== null);
      const need = ms.min_count - (nodes.length - known.length);
      if (need > 0) parts.push(countNode(need, known));
    }
    if (parts.length === 0) return null;
    return andNode(parts);
  }

  private condNode(c: Condition, prefix: PathSegment[]): Node | null {
    if ('key' in c) return this.fieldNode(c, prefix);
    if ('nested' in c) return this.filterNode(c.nested.filter, [...prefix, ...parseKey(c.nested.key)]);
    if ('is_empty' in c || 'is_null' in c || 'has_id' in c || 'has_vector' in c) return null;
    return this.filterNode(c as Filter, prefix);
  }

  private fieldNode(c: FieldCondition, prefix: PathSegment[]): Node | null {
    const m = c.match;
    if (m && 'any' in m && m.any.length === 0) return EMPTY_NODE;
    if (m && 'text_any' in m && m.text_any.split(/\s+/).every((t) => t.length === 0)) return EMPTY_NODE;
    const path = [...prefix, ...parseKey(c.key)];
    const found = this.byNames.get(namesKey(path));
    if (!found) return null;
    // indexes whose path has no `[]` the query path lacks first: they need no extras
    const ranked = found
      .map((idx) => ({ idx, wide: idx.path.some((s, i) => s.expand > path[i].expand) }))
      .sort((a, b) => Number(a.wide) - Number(b.wide));
    const pick = (f: (idx: FieldIndex, wide: boolean) => Node | null): Node | null => {
      for (const { idx, wide } of ranked) {
        const n = f(idx, wide);
        if (n !== null) return n;
      }
      return null;
    };
    const parts: Node[] = [];
    if (m && !('except' in m)) {
      const n = pick((idx, wide) => idx.matchNode(m, wide));
      if (n) parts.push(n);
    }
    if (c.range) {
      const r = c.range;
      const n = pick((idx, wide) => idx.rangeNode(r, wide));
      if (n) parts.push(n);
    }
    if (c.geo_radius || c.geo_bounding_box || c.geo_polygon) {
      const n = pick((idx, wide) => idx.geoNode(c, wide));
      if (n) parts.push(n);
    }
    return parts.length === 0 ? null : andNode(parts);
  }
}

function list<T>(x: T[] | T | undefined | null): T[] {
  if (x === undefined || x === null) return [];
  return Array.isArray(x) ? x : [x];
}

function toMicros(ms: number): number {
  return Math.round(ms * 1000);
}

