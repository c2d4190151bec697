/**
 * One payload index per field and type: hash indexes (keyword, text, bool, uuid),
 * sorted ones (integer, float, datetime) and geo, each answering the conditions its
 * type can (payload-index.ts's header lists which) with plan nodes.
 *
 * Owns: what each index stores per point and how it answers a condition. Must never:
 * decide how conditions combine (payload-index.ts does).
 */

import { FieldCondition, GeoPoint, Match, canonicalUuid, haversineMeters, parseDatetime, rawValues, EARTH_RADIUS_M } from './filter';
import { FieldSchema, isPlainObject } from './field-schema';
import { Bounds, Off, PathSegment, Posting, SortedKeys, boundsOf, dedupe, flatten, postingAdd, postingDelete, postingInto, postingSize, toOff } from './sorted-keys';
import { Node, andNode, countNode } from './index-plan';

// ---------------------------------------------------------------------------------
// Field indexes

export abstract class FieldIndex<V = unknown> {
  readonly records = new Map<Off, V[]>();
  /**
   * Points with a non-empty raw value at the path (anything but null and `[]`) but no
   * indexed value (e.g. a number under a keyword index): with the points of `records`,
   * the points for `is_empty: false`. Kept apart so that most indexes hold few here.
   */
  readonly otherNonEmpty = new Set<Off>();
  /** Points whose raw values at the path include null: `is_null`. */
  readonly nulls = new Set<Off>();
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
    const raw = payload == null ? [] : rawValues(payload, this.path);
    const nonEmpty = raw.some((v) => v !== null && !(Array.isArray(v) && v.length === 0));
    if (raw.includes(null)) this.nulls.add(off);
    else this.nulls.delete(off);
    const flat = raw.length === 0 ? [] : flatten(raw);
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
    if (nonEmpty && vals.length === 0) this.otherNonEmpty.add(off);
    else this.otherNonEmpty.delete(off);
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

  /** The points with a null at the path, as a node; valid only for a condition on exactly this index's path. */
  nullNode(): Node {
    const set = this.nulls;
    return { est: set.size, materialize: () => new Set(set), test: (o) => set.has(o) };
  }

  /** The points with a non-empty value at the path, as a node; valid only for a condition on exactly this index's path. */
  nonEmptyNode(): Node {
    const { records, otherNonEmpty } = this;
    return {
      est: records.size + otherNonEmpty.size,
      materialize() {
        const out = new Set<Off>(records.keys());
        for (const o of otherNonEmpty) out.add(o);
        return out;
      },
      test: (o) => records.has(o) || otherNonEmpty.has(o),
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

/** keyword, uuid, bool: distinct value -> offsets. */
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
    if (t !== 'keyword') return null;
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

export class NumIndex extends SortedIndex<number> {
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

export function makeIndex(field: string, path: PathSegment[], schema: FieldSchema): FieldIndex {
  switch (schema.type) {
    case 'keyword':
      return new HashIndex<string>(field, path, schema, (v) => (typeof v === 'string' ? v : null));
    case 'text':
      throw new Error('text indexes are built by text-index.ts (TextIndex)');
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
