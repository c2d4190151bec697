/**
 * Payload indexes of one shard: in memory, rebuilt from the payloads at load (only the
 * schema is persisted, by the caller); or, for an index created with `on_disk: true`
 * (any type), in files a checkpoint names and
 * that are opened at load (field-index.ts "on_disk", index-disk.ts). The only I/O is
 * theirs: synchronous positional reads of bounded pieces while a filter is planned, and
 * the writes of `moveToDisk` / `saveFiles` (under the shard's update lock).
 *
 * This file holds PayloadIndexes (the shard's set of indexes, candidates, order_by);
 * the parts it is made of sit beside it: field-schema.ts (schemas), field-index.ts
 * (one index per field and type), sorted-keys.ts (offsets, postings, sorted keys) and
 * index-plan.ts (combining candidate sets). This header describes them together.
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
 *    path satisfies it). `must_not`, match `except`, values_count, `is_empty` (true),
 *    `is_null: false` and has_id are never answered (the predicate decides them);
 *    `is_empty` (the condition form, outside `nested`) is answered as the complement
 *    among the shard's live points (`universe`) of the index's non-empty points;
 *    has_vector is answered from the shard's vector stores (`vectorPresence`). `is_null` and FieldCondition `is_empty: false` / `is_null: true` are
 *    answered by an index declared on exactly the condition's path (brackets
 *    included): every index keeps the points whose raw values there hold a null, and
 *    those holding a non-empty value (whatever its type).
 *  - match value / any: keyword (strings), uuid (UUID strings, compared canonically,
 *    so a superset of filter.ts's exact string equality), bool, integer and float
 *    (integers; an equal-key range in the sorted keys). `any: []` and a `text_any`
 *    without tokens match nothing, with or without an index.
 *  - range with number bounds: integer, float (sorted keys + binary search). Range
 *    with datetime bounds: datetime, bounds parsed with parseDatetime as filter.ts does.
 *  - geo_radius / geo_bounding_box: geo, by a binary search on latitude (radius: a
 *    padded band) and then the exact radius / box check. geo_polygon: geo, exactly,
 *    through the index's grid of 0.5-degree cells (cells inside the polygon taken whole,
 *    cells a ring edge meets tested point by point, holes included), or the exterior
 *    ring's padded bounding box over the latitude band when that is smaller (field-index.ts).
 *  - match text / phrase / text_any on a text index: token matching through its
 *    inverted index (text-index.ts has the tokenizers and the rules); the shard passes
 *    `textMatcher` to filter.ts so the predicate applies the same token rules. On a
 *    keyword index (or no index) they keep filter.ts's case-sensitive SUBSTRING
 *    meaning, which a keyword index answers by scanning its distinct strings.
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

import { Condition, FieldCondition, Filter, FilterError, Match, parseDatetime, parseKey } from './filter';
import { FieldSchema, FieldSchemaError, PayloadIndexInfo } from './field-schema';
import { PathSegment, toOff } from './sorted-keys';
import { EMPTY_NODE, Node, andNode, countNode } from './index-plan';
import { FieldIndex, NumIndex, makeIndex, type IndexFiles } from './field-index';
import { TextIndex } from './text-index';

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

/** A value of a facet: a keyword or UUID string, an integer, a bool. */
export type FacetValue = string | number | boolean;

/** A facet on a key without a keyword, integer (with lookup), bool or uuid index. */
export class FacetError extends Error {
  constructor(readonly key: string) {
    super(
      `Index required but not found for "${key}" of one of the following types: [keyword, integer, bool, uuid]. ` +
        'Help: Create an index for this key to use it in a facet request.',
    );
    this.name = 'FacetError';
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

/** The offsets that have a named vector (the shard's vector stores), for `has_vector`. */
export interface VectorPresence {
  readonly size: number;
  has(offset: bigint): boolean;
  [Symbol.iterator](): Iterator<bigint>;
}

/** An empty index of the schema's type. */
function newIndex(field: string, path: PathSegment[], schema: FieldSchema): FieldIndex {
  return schema.type === 'text' ? new TextIndex(field, path, schema) : makeIndex(field, path, schema);
}

export class PayloadIndexes {
  /**
   * Set by the shard: the points having vector `name` (null for a name the collection
   * lacks, which no point has). Without it has_vector is left to the predicate.
   */
  vectorPresence: ((name: string) => VectorPresence | null) | null = null;
  /** Set by the shard: its live points, for `is_empty` (a complement). Without it is_empty is left to the predicate. */
  universe: { size(): number; offsets(): Iterable<bigint> } | null = null;
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
    const idx = newIndex(field, path, schema);
    idx.load(points);
    this.register(field, idx);
  }

  private register(field: string, idx: FieldIndex): void {
    this.drop(field);
    this.byField.set(field, idx);
    const nk = namesKey(idx.path);
    const list = this.byNames.get(nk);
    if (list) list.push(idx);
    else this.byNames.set(nk, [idx]);
  }

  // -- on_disk indexes (field-index.ts, index-disk.ts) ---------------------------------------

  /**
   * Whether the files a checkpoint names for `field` can be opened for `schema`: written
   * for the same schema and (text) under the same tokenizer fingerprint. When not, the
   * caller rebuilds the index from the payloads.
   */
  filesFit(field: string, schema: FieldSchema, files: IndexFiles): boolean {
    return newIndex(field, parseKey(field, 'field_name'), schema).filesFit(files);
  }

  /** Opens the on-disk index on `field` from the files a checkpoint names (they were written for `schema`: filesFit). */
  async open(field: string, schema: FieldSchema, dir: string, files: IndexFiles): Promise<void> {
    const idx = newIndex(field, parseKey(field, 'field_name'), schema);
    await idx.openFiles(dir, files);
    this.register(field, idx);
    this.changes++;
  }

  /** Moves the index on `field` (built in memory) to a base file named `fidx-<name()>.base` in `dir`. */
  async moveToDisk(field: string, dir: string, name: () => number): Promise<void> {
    const idx = this.byField.get(field);
    if (!idx) throw new Error(`no payload index on ${field}`);
    await idx.writeBaseFile(dir, `fidx-${name()}.base`);
    this.changes++;
  }

  /** The files of every on-disk index as of now (a checkpoint names them; the caller holds the update lock). */
  async saveFiles(dir: string, name: () => number): Promise<Record<string, IndexFiles>> {
    const out: Record<string, IndexFiles> = {};
    for (const [field, idx] of this.byField) {
      if (!idx.onDisk) continue;
      const before = idx.files()[0];
      out[field] = await idx.saveFiles(dir, name);
      if (idx.files()[0] !== before) this.changes++;
    }
    return out;
  }

  /** Files the on-disk indexes use or last saved. */
  files(): string[] {
    const out: string[] = [];
    for (const idx of this.byField.values()) out.push(...idx.files());
    return out;
  }

  /** Closes every on-disk index's file (the shard closed). */
  closeFiles(): void {
    for (const idx of this.byField.values()) idx.closeFiles();
  }

  drop(field: string): boolean {
    const idx = this.byField.get(field);
    if (!idx) return false;
    idx.closeFiles();
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

  /**
   * filter.ts's TextHook: the token predicate of the full-text index on the path with
   * these segment names, or null (no text index there, or it does not answer `m`).
   */
  textMatcher(names: string, m: Match): ((flat: readonly unknown[]) => boolean) | null {
    for (const idx of this.byNames.get(names) ?? []) {
      if (idx instanceof TextIndex) return idx.matcher(m);
    }
    return null;
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

  /** Throws FacetError unless `key` has an index facets can count (keyword, integer with lookup, bool, uuid). */
  facetCheck(key: string): void {
    const idx = this.byField.get(key);
    const t = idx?.schema.type;
    const ok = t === 'keyword' || t === 'bool' || t === 'uuid' || (t === 'integer' && idx!.schema.params?.lookup !== false);
    if (!ok) throw new FacetError(key);
  }

  /**
   * Points per distinct value of the index on `key` (facetCheck first), among `offsets`
   * (null: every indexed point). A point with several values counts once for each; an
   * integer index counts only integers.
   */
  facet(key: string, offsets: Iterable<bigint> | null): Map<FacetValue, number> {
    this.facetCheck(key);
    const idx = this.byField.get(key)!;
    const ints = idx.schema.type === 'integer';
    const out = new Map<FacetValue, number>();
    const add = (vals: unknown[] | undefined) => {
      if (vals === undefined) return;
      for (const v of vals as FacetValue[]) {
        if (ints && !Number.isInteger(v)) continue;
        out.set(v, (out.get(v) ?? 0) + 1);
      }
    };
    if (offsets === null) idx.forEachRecord((_o, vals) => add(vals));
    else for (const o of offsets) add(idx.valuesOf(toOff(o)));
    return out;
  }

  /**
   * The fields whose indexes answer the filter's top-level `must` conditions, in the
   * order candidates() evaluates them (the first one is materialised, the others are
   * tested on its points): a tenant match first, then a principal range, then by
   * estimated size. Empty when no index narrows the search.
   */
  planOrder(filter: Filter): string[] {
    const node = this.filterNode(filter, []);
    if (node === null) return [];
    return (node.parts ?? [node]).map((n) => n.field ?? '');
  }

  /** The plan's size estimate of candidates(filter) without materialising it; null when no index narrows the search. */
  estimate(filter: Filter): number | null {
    return this.filterNode(filter, [])?.est ?? null;
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
    const it = idx.iterateSorted(desc, start, check);
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
    if ('is_null' in c) {
      const idx = this.exactIndex([...prefix, ...parseKey(c.is_null.key)]);
      return idx === null ? null : idx.nullNode();
    }
    if ('has_vector' in c && this.vectorPresence !== null) {
      const present = this.vectorPresence(c.has_vector);
      if (present === null) return EMPTY_NODE;
      return {
        est: present.size,
        materialize() {
          const out = new Set<number>();
          for (const o of present) out.add(Number(o));
          return out;
        },
        test: (o) => present.has(BigInt(o)),
      };
    }
    if ('is_empty' in c && prefix.length === 0 && this.universe !== null) {
      // top level only: inside `nested` an element can be empty while the point is not
      const idx = this.exactIndex(parseKey(c.is_empty.key));
      if (idx !== null) return emptyNode(idx, this.universe);
    }
    if ('is_empty' in c || 'has_id' in c || 'has_vector' in c) return null;
    return this.filterNode(c as Filter, prefix);
  }

  /** An index declared on exactly this path (brackets included), for is_null / is_empty: false. */
  private exactIndex(path: PathSegment[]): FieldIndex | null {
    for (const idx of this.byNames.get(namesKey(path)) ?? []) if (samePath(idx.path, path)) return idx;
    return null;
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
    // An index's is_tenant (match) or is_principal (range) raises the node's priority in an `and` (index-plan.ts).
    const pick = (f: (idx: FieldIndex, wide: boolean) => Node | null, flag?: 'is_tenant' | 'is_principal'): Node | null => {
      for (const { idx, wide } of ranked) {
        const n = f(idx, wide);
        if (n === null) continue;
        const rank = flag !== undefined && idx.schema.params?.[flag] === true ? (flag === 'is_tenant' ? 2 : 1) : 0;
        return { ...n, field: c.key, ...(rank > 0 ? { rank } : {}) };
      }
      return null;
    };
    const parts: Node[] = [];
    if (c.is_empty === false || c.is_null === true) {
      const idx = this.exactIndex(path);
      if (idx !== null) {
        if (c.is_empty === false) parts.push(idx.nonEmptyNode());
        if (c.is_null === true) parts.push(idx.nullNode());
      }
    }
    if (m && !('except' in m)) {
      // where a text index decides a text condition (filter.ts's hook), only text
      // indexes may narrow it: a keyword index's substring candidates are no superset of token matches
      const tokens = ('text' in m || 'text_any' in m || 'phrase' in m) && this.textMatcher(namesKey(path), m) !== null;
      const n = pick((idx, wide) => (tokens && !(idx instanceof TextIndex) ? null : idx.matchNode(m, wide)), 'is_tenant');
      if (n) parts.push(n);
    }
    if (c.range) {
      const r = c.range;
      const n = pick((idx, wide) => idx.rangeNode(r, wide), 'is_principal');
      if (n) parts.push(n);
    }
    if (c.geo_radius || c.geo_bounding_box || c.geo_polygon) {
      const n = pick((idx, wide) => idx.geoNode(c, wide));
      if (n) parts.push(n);
    }
    return parts.length === 0 ? null : andNode(parts);
  }
}

/** The live points with no non-empty value at the index's path (the complement of its nonEmptyNode). */
function emptyNode(idx: FieldIndex, universe: NonNullable<PayloadIndexes['universe']>): Node {
  const full = idx.nonEmptyNode();
  return {
    est: Math.max(0, universe.size() - full.est),
    materialize() {
      const out = new Set<number>();
      for (const o of universe.offsets()) {
        const n = Number(o);
        if (!full.test(n)) out.add(n);
      }
      return out;
    },
    test: (o) => !full.test(o),
  };
}

function samePath(a: readonly PathSegment[], b: readonly PathSegment[]): boolean {
  return a.length === b.length && a.every((s, i) => s.name === b[i].name && s.expand === b[i].expand);
}

function list<T>(x: T[] | T | undefined | null): T[] {
  if (x === undefined || x === null) return [];
  return Array.isArray(x) ? x : [x];
}

function toMicros(ms: number): number {
  return Math.round(ms * 1000);
}
