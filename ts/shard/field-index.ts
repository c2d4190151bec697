/**
 * One payload index per field and type: hash indexes (keyword, text, bool, uuid),
 * sorted ones (integer, float, datetime) and geo, each answering the conditions its
 * type can (payload-index.ts's header lists which) with plan nodes.
 *
 * Owns: what each index stores per point and how it answers a condition, in memory or
 * (`on_disk: true`, every type) over a base file of index-disk.ts plus the changes since.
 * Must never: decide how conditions combine (payload-index.ts does).
 */

import { FieldCondition, GeoPoint, Match, canonicalUuid, haversineMeters, inGeoPolygon, parseDatetime, rawValues, EARTH_RADIUS_M } from './filter';
import { FieldSchema, isPlainObject } from './field-schema';
import { Bounds, Off, PathSegment, Posting, SortedKeys, boundsOf, dedupe, flatten, postingAdd, postingDelete, postingInto, postingSize, toOff } from './sorted-keys';
import { Node, andNode, countNode } from './index-plan';
import { IndexBase, IndexFileError, readDelta, writeBase, writeDelta, type BaseKind, type BaseValue, type DeltaState } from './index-disk';
import { fieldSchemaToJson } from './field-schema';

/** The files of an on-disk index (`on_disk: true`) that a checkpoint names. */
export interface IndexFiles {
  /** fieldSchemaToJson of the schema they were written for. */
  schema: unknown;
  base: string;
  delta: string;
  /**
   * Text indexes: the tokenizer's fingerprint the files were written under (text-index.ts
   * TOKENIZER_PIPELINE_VERSION); files of another one (or none, written before it was
   * recorded) are not opened, the index is rebuilt from the payloads.
   */
  tokenizer?: string;
}

/** A base file is rewritten at a checkpoint once this many changed points, plus an eighth of its records, are held in memory. */
const DELTA_MIN = 4096;

// ---------------------------------------------------------------------------------
// Field indexes

export abstract class FieldIndex<V = unknown> {
  /**
   * The points' indexed values: all of them in memory; with `on_disk` (a base file
   * open), only those of points changed since the base was written (`masked`).
   */
  readonly records = new Map<Off, V[]>();
  /** on_disk: the base file; null while every value is in `records`. */
  protected base: IndexBase | null = null;
  /** on_disk: offsets whose base record is outdated (what they have now is in `records`). */
  readonly masked = new Set<Off>();
  /** Base records among `masked`. */
  private maskedBase = 0;
  /** Values held in `records`. */
  protected recEntries = 0;
  /** on_disk: the files the last save wrote, and whether anything changed since. */
  private saved: { base: string; delta: string } | null = null;
  private dirty = true;
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
    let old = this.records.get(off);
    let fromBase = false;
    if (old === undefined && this.base !== null && !this.masked.has(off)) {
      old = this.baseValues(off);
      fromBase = old !== undefined;
    }
    this.dirty = true;
    let same = false;
    if (old !== undefined) {
      same = old.length === vals.length && old.every((v, i) => this.sameValue(v, vals[i]));
      if (!same) {
        if (fromBase) {
          // the base keeps its entries; masking the offset hides them
          this.masked.add(off);
          this.maskedBase++;
        } else {
          this.removeEntries(off, old);
          this.records.delete(off);
          this.recEntries -= old.length;
        }
        this.entries -= old.length;
        if (this.isCounted(old)) this.counted--;
      }
    }
    if (!same && vals.length > 0) {
      this.records.set(off, vals);
      this.recEntries += vals.length;
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

  /** The point's indexed values, or undefined when it has none. */
  valuesOf(off: Off): V[] | undefined {
    const r = this.records.get(off);
    if (r !== undefined || this.base === null || this.masked.has(off)) return r;
    return this.baseValues(off);
  }

  /** The point's values in the base file (masked or not), or undefined when it has none there. */
  private baseValues(off: Off): V[] | undefined {
    const vals = this.base!.valuesOf(off);
    return vals === undefined ? undefined : this.fromStored(vals, this.base!.auxOf(off));
  }

  /** Points with at least one indexed value. */
  get recordCount(): number {
    return this.records.size + (this.base === null ? 0 : this.base.records - this.maskedBase);
  }

  /** Calls `fn` with every point's values (on_disk: the base's in offset order, then the changed ones). */
  forEachRecord(fn: (off: Off, vals: V[]) => void): void {
    const base = this.base;
    if (base !== null) base.forEachRecord(this.masked, (o, vals, aux) => fn(o, this.fromStored(vals, aux)), base.kind === 'text');
    for (const [o, vals] of this.records) fn(o, vals);
  }

  /** Calls `fn` with every point that has values (without decoding them). */
  forEachOffset(fn: (off: Off) => void): void {
    if (this.base !== null) this.base.forEachRecord(this.masked, (o) => fn(o));
    for (const o of this.records.keys()) fn(o);
  }

  // -- on_disk ---------------------------------------------------------------------------------

  /** What the base file holds for this type, or null when this index cannot be kept on disk. */
  baseKind(): BaseKind | null {
    return null;
  }

  /** The fingerprint of what turns values into stored ones when more than the schema decides it (text: the tokenizer), else undefined. */
  tokenFingerprint(): string | undefined {
    return undefined;
  }

  get onDisk(): boolean {
    return this.base !== null;
  }

  /** Forgets `records` after they went into a new base (the type's own structures over them). */
  protected clearChanges(): void {}

  /** (sort key, offset) pairs of every value, ascending (num bases; geo: with each latitude's longitude). */
  protected sortedPairs(): Iterable<readonly [number, Off] | readonly [number, Off, number]> | null {
    return null;
  }

  /**
   * A point's values as the base and delta files hold them (`vals`; `aux`: its text,
   * text indexes only), and back. The default: the values themselves.
   */
  protected toStored(vals: V[]): { vals: BaseValue[]; aux?: string } {
    return { vals: vals as BaseValue[] };
  }
  protected fromStored(vals: BaseValue[], _aux: string | undefined): V[] {
    return vals as V[];
  }
  /** The posting keys of stored values when they are not the values themselves (geo: grid cells), else null. */
  protected storedKeys(): ((vals: readonly BaseValue[]) => readonly BaseValue[]) | null {
    return null;
  }

  /** Every record in offset order, stored form (the base's not masked, merged with `records`). */
  private eachRecordInOrder(fn: (off: Off, vals: readonly BaseValue[], aux?: string) => void): void {
    const changed = [...this.records.keys()].sort((a, b) => a - b);
    const mem = (o: Off) => {
      const st = this.toStored(this.records.get(o)!);
      fn(o, st.vals, st.aux);
    };
    let i = 0;
    const base = this.base;
    if (base !== null) {
      base.forEachRecord(
        this.masked,
        (off, vals, aux) => {
          while (i < changed.length && changed[i] < off) mem(changed[i++]);
          fn(off, vals, aux);
        },
        base.kind === 'text',
      );
    }
    for (; i < changed.length; i++) mem(changed[i]);
  }

  /**
   * Writes every value to a new base file `dir/file` and switches to it: `records`
   * empties (what it held is in the base now). The old base file is closed, not removed
   * (a checkpoint or snapshot may still name it). The caller holds the shard's update lock.
   */
  async writeBaseFile(dir: string, file: string): Promise<void> {
    const kind = this.baseKind();
    if (kind === null) throw new Error(`a ${this.schema.type} index cannot be kept on disk`);
    const full = `${dir}/${file}`;
    await writeBase(full, kind, (fn) => this.eachRecordInOrder(fn), this.sortedPairs(), this.storedKeys());
    const next = await IndexBase.open(dir, file);
    const old = this.base;
    this.base = next;
    this.records.clear();
    this.masked.clear();
    this.maskedBase = 0;
    this.recEntries = 0;
    this.clearChanges();
    this.dirty = true;
    old?.close();
  }

  /**
   * The files of this on-disk index as of now, for a checkpoint: the delta file (what
   * changed since the base, and the sets kept in memory) is written when anything
   * changed, and the base is rewritten first once the changes grew large. Returns the
   * last ones when nothing changed. The caller holds the shard's update lock.
   */
  async saveFiles(dir: string, nextName: () => number): Promise<IndexFiles> {
    if (this.base === null) throw new Error('saveFiles: the index is not on disk');
    const tokenizer = this.tokenFingerprint();
    if (!this.dirty && this.saved !== null) return { schema: fieldSchemaToJson(this.schema), ...this.saved, ...(tokenizer === undefined ? {} : { tokenizer }) };
    if (this.masked.size + this.records.size > DELTA_MIN + this.base.records / 8) await this.writeBaseFile(dir, `fidx-${nextName()}.base`);
    const delta = `fidx-${nextName()}.delta`;
    const state: DeltaState = {
      schema: fieldSchemaToJson(this.schema),
      counted: this.counted,
      entries: this.entries,
      masked: [...this.masked],
      records: [...this.records].map(([o, v]) => {
        const st = this.toStored(v);
        return st.aux === undefined ? [o, st.vals] : [o, st.vals, st.aux];
      }),
      nulls: [...this.nulls],
      other: [...this.otherNonEmpty],
      extra: this.extra === null ? null : [...this.extra],
      ...(tokenizer === undefined ? {} : { tokenizer }),
    };
    await writeDelta(`${dir}/${delta}`, state);
    this.saved = { base: this.base.file, delta };
    this.dirty = false;
    return { schema: state.schema, ...this.saved, ...(tokenizer === undefined ? {} : { tokenizer }) };
  }

  /**
   * Whether `files` were written for this index as it makes values now: the same schema
   * and tokenizer fingerprint (files that are not are rebuilt from the payloads instead).
   */
  filesFit(files: IndexFiles): boolean {
    return JSON.stringify(files.schema) === JSON.stringify(fieldSchemaToJson(this.schema)) && files.tokenizer === this.tokenFingerprint();
  }

  /** Opens the files a checkpoint names (an empty index, not yet loaded); files that do not fit (filesFit) are refused. */
  async openFiles(dir: string, files: IndexFiles): Promise<void> {
    if (!this.filesFit(files)) {
      throw new IndexFileError(`${files.base}: written for another ${this.schema.type} index (schema or tokenizer ${JSON.stringify(files.tokenizer ?? null)}, not ${JSON.stringify(this.tokenFingerprint() ?? null)})`);
    }
    const base = await IndexBase.open(dir, files.base);
    try {
      if (base.kind !== this.baseKind()) throw new Error(`${files.base} holds ${base.kind} values, not those of a ${this.schema.type} index`);
      const d = await readDelta(`${dir}/${files.delta}`);
      if (d.tokenizer !== this.tokenFingerprint()) throw new IndexFileError(`${files.delta}: written under tokenizer ${JSON.stringify(d.tokenizer ?? null)}, not ${JSON.stringify(this.tokenFingerprint() ?? null)}`);
      this.base = base;
      this.counted = d.counted;
      this.entries = d.entries;
      for (const o of d.masked) this.masked.add(o);
      this.loading = true;
      try {
        for (const [o, stored, aux] of d.records) {
          const vals = this.fromStored(stored, aux);
          this.records.set(o, vals);
          this.recEntries += vals.length;
          this.addEntries(o, vals);
        }
      } finally {
        this.loading = false;
      }
      for (const o of this.masked) if (base.valuesOf(o) !== undefined) this.maskedBase++;
      for (const o of d.nulls) this.nulls.add(o);
      for (const o of d.other) this.otherNonEmpty.add(o);
      if (this.extra !== null) for (const o of d.extra ?? []) this.extra.add(o);
      this.finishLoad();
      this.saved = { base: files.base, delta: files.delta };
      this.dirty = false;
    } catch (err) {
      this.base = null;
      base.close();
      throw err;
    }
  }

  /** The files this index uses or last saved (clean-up keeps them). */
  files(): string[] {
    const out = new Set<string>();
    if (this.base !== null) out.add(this.base.file);
    if (this.saved !== null) out.add(this.saved.base).add(this.saved.delta);
    return [...out];
  }

  /** Closes the base file (the index was dropped, replaced, or its shard closed). */
  closeFiles(): void {
    this.base?.close();
  }

  /** A node over this index's values passing `pred`; `wide` adds the extra points. */
  protected leaf(
    wide: boolean,
    pred: (v: V) => boolean,
    est: number,
    materialize: (out: Set<Off>) => void,
  ): Node {
    const extra = wide ? this.extra : null;
    return {
      est: est + (extra ? extra.size : 0),
      materialize() {
        const out = new Set<Off>();
        materialize(out);
        if (extra) for (const o of extra) out.add(o);
        return out;
      },
      test: (o) => {
        const r = this.valuesOf(o);
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
    const { otherNonEmpty } = this;
    return {
      est: this.recordCount + otherNonEmpty.size,
      materialize: () => {
        const out = new Set<Off>();
        this.forEachOffset((o) => out.add(o));
        for (const o of otherNonEmpty) out.add(o);
        return out;
      },
      test: (o) => otherNonEmpty.has(o) || this.valuesOf(o) !== undefined,
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
  baseKind(): BaseKind {
    return this.schema.type === 'bool' ? 'bool' : 'str';
  }
  protected clearChanges(): void {
    this.postings.clear();
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
    const base = this.base;
    const masked = this.masked;
    if (keys !== null) {
      const set = new Set<K>(keys);
      let est = 0;
      for (const k of set) est += postingSize(postings.get(k)) + (base === null ? 0 : base.postingCount(k));
      return this.leaf(wide, (v) => set.has(v), est, (out) => {
        for (const k of set) {
          postingInto(postings.get(k), out);
          base?.postingInto(k, masked, out);
        }
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
    return this.leaf(wide, test, this.recordCount, (out) => {
      for (const [k, p] of postings) if (test(k)) postingInto(p, out);
      if (base !== null) for (const k of base.keys()) if (test(k as K)) base.postingInto(k, masked, out);
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
  readonly sorted = new SortedKeys(this.sortAux !== undefined);

  protected abstract sortKey(v: V): number;
  /** A second number kept beside each sort key (geo: the longitude), or none. */
  protected sortAux?(v: V): number;

  protected addEntries(off: Off, vals: V[]): void {
    if (!this.loading) this.sorted.add(off, vals.map((v) => this.sortKey(v)), this.sortAux === undefined ? undefined : vals.map((v) => this.sortAux!(v)));
  }
  protected removeEntries(off: Off, _vals: V[]): void {
    if (!this.loading) this.sorted.remove(off);
  }
  protected finishLoad(): void {
    this.rebuild();
  }
  protected afterChange(): void {
    if (this.sorted.dirty > 256 + this.recEntries / 16) this.rebuild();
  }
  rebuild(): void {
    const aux = this.sortAux;
    this.sorted.build(this.recEntries, (push) => {
      for (const [off, vals] of this.records) for (const v of vals) push(this.sortKey(v), off, aux === undefined ? undefined : aux.call(this, v));
    });
  }
  protected clearChanges(): void {
    this.rebuild();
  }
  protected sortedPairs(): Iterable<readonly [number, Off] | readonly [number, Off, number]> {
    const mem = this.sorted.iterate(false, null, () => undefined);
    return this.base === null ? mem : mergePairs(this.base.iterate(false, null, this.masked), mem, false);
  }
  /** (key, offset) pairs in order (or reversed), from `start` on; `check` runs after each (order_by). */
  *iterateSorted(desc: boolean, start: number | null, check: () => void): Generator<[number, Off]> {
    if (this.base === null) {
      yield* this.sorted.iterate(desc, start, check);
      return;
    }
    for (const p of mergePairs(this.base.iterate(desc, start, this.masked), this.sorted.iterate(desc, start, () => undefined), desc)) {
      yield p;
      check();
    }
  }
}

/** Two (key, offset) streams in (key, offset) order (or both reversed) as one. */
function* mergePairs(a: Iterator<[number, Off]>, b: Iterator<[number, Off]>, desc: boolean): Generator<[number, Off]> {
  let x = a.next();
  let y = b.next();
  while (!x.done && !y.done) {
    const [ka, oa] = x.value;
    const [kb, ob] = y.value;
    const aFirst = desc ? ka > kb || (ka === kb && oa > ob) : ka < kb || (ka === kb && oa < ob);
    if (aFirst) {
      yield x.value;
      x = a.next();
    } else {
      yield y.value;
      y = b.next();
    }
  }
  for (; !x.done; x = a.next()) yield x.value;
  for (; !y.done; y = b.next()) yield y.value;
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

  baseKind(): BaseKind {
    return 'num';
  }

  private node(wide: boolean, r: { gt?: number | null; gte?: number | null; lt?: number | null; lte?: number | null }): Node {
    const { b, test } = boundsOf(r);
    const sorted = this.sorted;
    const base = this.base;
    const masked = this.masked;
    return this.leaf(wide, test, sorted.estimate(b) + (base === null ? 0 : base.estimate(b)), (out) => {
      sorted.collect(b, test, out);
      base?.collect(b, test, masked, out);
    });
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

/** Side of a cell of the geo grid, in degrees. */
const GEO_CELL = 0.5;
/** A polygon whose bounding box spans more cells than this is answered by the latitude band alone. */
const GEO_MAX_CELLS = 20_000;
/** Cell coordinates (floor(degrees / GEO_CELL)) within ±GEO_SPAN have a cell; other values go to `far`. */
const GEO_SPAN = 1 << 20;

/** The grid cell of one coordinate pair, or null outside the grid (values far beyond ±180°). */
function geoCellKey(a: number, o: number): number | null {
  if (Math.abs(a) >= GEO_SPAN || Math.abs(o) >= GEO_SPAN) return null;
  return (a + GEO_SPAN) * 2 * GEO_SPAN + (o + GEO_SPAN);
}

function geoCell(p: GeoPoint): number | null {
  return geoCellKey(Math.floor(p.lat / GEO_CELL), Math.floor(p.lon / GEO_CELL));
}

/** Posting keys of an on-disk geo base besides the cells (which are >= 0): the points outside the grid, those with a latitude outside [-90, 90]. */
const GEO_FAR_KEY = -1;
const GEO_ODD_KEY = -2;

/** The posting keys of a geo base record (flat lat, lon pairs): its cells, GEO_FAR_KEY, GEO_ODD_KEY. */
function geoStoredKeys(flat: readonly BaseValue[]): number[] {
  const out: number[] = [];
  let odd = false;
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const p = { lat: flat[i] as number, lon: flat[i + 1] as number };
    if (p.lat < -90 || p.lat > 90) odd = true;
    const k = geoCell(p) ?? GEO_FAR_KEY;
    if (!out.includes(k)) out.push(k);
  }
  if (odd) out.push(GEO_ODD_KEY);
  return out;
}

/** Whether the segment a-b meets the closed box [lat0, lat1] x [lon0, lon1] (Liang-Barsky clipping). */
function segmentMeetsBox(a: GeoPoint, b: GeoPoint, lat0: number, lat1: number, lon0: number, lon1: number): boolean {
  let t0 = 0;
  let t1 = 1;
  const ps = [-(b.lat - a.lat), b.lat - a.lat, -(b.lon - a.lon), b.lon - a.lon];
  const qs = [a.lat - lat0, lat1 - a.lat, a.lon - lon0, lon1 - a.lon];
  for (let i = 0; i < 4; i++) {
    const p = ps[i];
    const q = qs[i];
    if (p === 0) {
      if (q < 0) return false;
      continue;
    }
    const r = q / p;
    if (p < 0) {
      if (r > t1) return false;
      if (r > t0) t0 = r;
    } else {
      if (r < t0) return false;
      if (r < t1) t1 = r;
    }
  }
  return true;
}

/**
 * geo: points, with latitudes sorted for band searches (radius, bounding box, and the
 * polygon's box), and a grid of GEO_CELL-degree cells for polygons: the cells under the
 * polygon's bounding box are classified (no ring edge meets a cell, padded: all of it is
 * inside or outside, as its centre; else it is on the boundary) and only the points of
 * boundary cells are tested against the polygon (exterior ring, holes), so the node is
 * exact. The planner materialises whichever of band and grid is smaller.
 */
class GeoIndex extends SortedIndex<GeoPoint> {
  /** Points with a latitude outside [-90, 90] (the radius band does not bound them). */
  readonly oddLat = new Set<Off>();
  /** Cell (`geoCell`) -> the points with a value in it. */
  readonly cells = new Map<number, Set<Off>>();
  /** Points with a value outside the grid (tested by every polygon). */
  readonly far = new Set<Off>();

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
  protected sortAux(p: GeoPoint): number {
    return p.lon;
  }
  baseKind(): BaseKind {
    return 'geo';
  }
  protected toStored(vals: GeoPoint[]): { vals: BaseValue[] } {
    const out: number[] = [];
    for (const p of vals) out.push(p.lat, p.lon);
    return { vals: out };
  }
  protected fromStored(vals: BaseValue[]): GeoPoint[] {
    const out: GeoPoint[] = [];
    for (let i = 0; i + 1 < vals.length; i += 2) out.push({ lat: vals[i] as number, lon: vals[i + 1] as number });
    return out;
  }
  protected storedKeys(): (vals: readonly BaseValue[]) => readonly BaseValue[] {
    return geoStoredKeys;
  }
  /** (latitude, offset, longitude) of every value, by latitude then offset (what a geo base's sorted section holds). */
  protected sortedPairs(): Iterable<readonly [number, Off, number]> {
    const lat: number[] = [];
    const lon: number[] = [];
    const off: Off[] = [];
    this.forEachRecord((o, vals) => {
      for (const p of vals) {
        lat.push(p.lat);
        lon.push(p.lon);
        off.push(o);
      }
    });
    const order = Uint32Array.from({ length: lat.length }, (_, i) => i).sort((a, b) => lat[a] - lat[b] || off[a] - off[b]);
    return (function* () {
      for (const i of order) yield [lat[i], off[i], lon[i]] as const;
    })();
  }
  protected clearChanges(): void {
    this.cells.clear();
    this.far.clear();
    this.oddLat.clear();
    super.clearChanges();
  }
  /** Points (of the base, not masked, and of the changes) under posting `key` of the base / set `mem`: count, and into `out`. */
  private cellCount(mem: Set<Off> | undefined, key: number): number {
    return (mem?.size ?? 0) + (this.base === null ? 0 : this.base.postingCount(key));
  }
  private cellInto(mem: Set<Off> | undefined, key: number, out: Set<Off>): void {
    if (mem !== undefined) for (const o of mem) out.add(o);
    this.base?.postingInto(key, this.masked, out);
  }
  protected addEntries(off: Off, vals: GeoPoint[]): void {
    if (vals.some((p) => p.lat < -90 || p.lat > 90)) this.oddLat.add(off);
    for (const p of vals) {
      const k = geoCell(p);
      if (k === null) {
        this.far.add(off);
        continue;
      }
      let set = this.cells.get(k);
      if (set === undefined) this.cells.set(k, (set = new Set()));
      set.add(off);
    }
    super.addEntries(off, vals);
  }
  protected removeEntries(off: Off, vals: GeoPoint[]): void {
    this.oddLat.delete(off);
    this.far.delete(off);
    for (const p of vals) {
      const k = geoCell(p);
      const set = k === null ? undefined : this.cells.get(k);
      if (set === undefined) continue;
      set.delete(off);
      if (set.size === 0) this.cells.delete(k!);
    }
    super.removeEntries(off, vals);
  }

  /** The polygon's points through the grid, exact; null when its bounding box spans too many cells. */
  private polygonNode(poly: NonNullable<FieldCondition['geo_polygon']>, wide: boolean): Node | null {
    const rings = [poly.exterior.points, ...(poly.interiors ?? []).map((r) => r.points)];
    let minLat = Infinity;
    let maxLat = -Infinity;
    let minLon = Infinity;
    let maxLon = -Infinity;
    for (const p of poly.exterior.points) {
      minLat = Math.min(minLat, p.lat);
      maxLat = Math.max(maxLat, p.lat);
      minLon = Math.min(minLon, p.lon);
      maxLon = Math.max(maxLon, p.lon);
    }
    const la0 = Math.floor(minLat / GEO_CELL);
    const la1 = Math.floor(maxLat / GEO_CELL);
    const lo0 = Math.floor(minLon / GEO_CELL);
    const lo1 = Math.floor(maxLon / GEO_CELL);
    const width = lo1 - lo0 + 1;
    if ((la1 - la0 + 1) * width > GEO_MAX_CELLS) return null;
    // Boundary cells: those a ring edge meets (each cell padded, so a point on a cell's border counts).
    const eps = 1e-9;
    const boundary = new Uint8Array((la1 - la0 + 1) * width);
    for (const ring of rings) {
      for (let i = 0; i + 1 < ring.length; i++) {
        const a = ring[i];
        const b = ring[i + 1];
        const ea0 = Math.max(la0, Math.floor(Math.min(a.lat, b.lat) / GEO_CELL) - 1);
        const ea1 = Math.min(la1, Math.floor(Math.max(a.lat, b.lat) / GEO_CELL) + 1);
        const eo0 = Math.max(lo0, Math.floor(Math.min(a.lon, b.lon) / GEO_CELL) - 1);
        const eo1 = Math.min(lo1, Math.floor(Math.max(a.lon, b.lon) / GEO_CELL) + 1);
        for (let ca = ea0; ca <= ea1; ca++) {
          for (let co = eo0; co <= eo1; co++) {
            const idx = (ca - la0) * width + (co - lo0);
            if (boundary[idx] === 1) continue;
            if (segmentMeetsBox(a, b, ca * GEO_CELL - eps, (ca + 1) * GEO_CELL + eps, co * GEO_CELL - eps, (co + 1) * GEO_CELL + eps)) boundary[idx] = 1;
          }
        }
      }
    }
    // cells by key: those in memory (changed points) and, on disk, the base's
    const inside: number[] = [];
    const edge: number[] = [];
    let est = this.cellCount(this.far, GEO_FAR_KEY);
    for (let ca = la0; ca <= la1; ca++) {
      for (let co = lo0; co <= lo1; co++) {
        const key = geoCellKey(ca, co);
        if (key === null) continue;
        const n = this.cellCount(this.cells.get(key), key);
        if (n === 0) continue;
        if (boundary[(ca - la0) * width + (co - lo0)] === 1) {
          edge.push(key);
          est += n;
        } else if (inGeoPolygon({ lat: (ca + 0.5) * GEO_CELL, lon: (co + 0.5) * GEO_CELL }, poly)) {
          inside.push(key);
          est += n;
        }
      }
    }
    const pred = (p: GeoPoint) => inGeoPolygon(p, poly);
    return this.leaf(wide, pred, est, (out) => {
      for (const key of inside) this.cellInto(this.cells.get(key), key, out);
      const check = new Set<Off>();
      for (const key of edge) this.cellInto(this.cells.get(key), key, check);
      this.cellInto(this.far, GEO_FAR_KEY, check);
      for (const o of check) if (!out.has(o) && this.valuesOf(o)!.some(pred)) out.add(o);
    });
  }

  geoNode(c: FieldCondition, wide: boolean): Node | null {
    const parts: Node[] = [];
    const band = (lo: number, hi: number, pred: (p: GeoPoint) => boolean, odd: boolean): Node => {
      const b: Bounds = { lo, loIncl: true, hi, hiIncl: true };
      const base = this.base;
      const est = this.sorted.estimate(b) + (base === null ? 0 : base.estimate(b)) + (odd ? this.cellCount(this.oddLat, GEO_ODD_KEY) : 0);
      return this.leaf(wide, pred, est, (out) => {
        // the base's values in the band are tested on the (latitude, longitude) its sorted
        // section holds: a value passing `pred` lies in the band (unless its latitude is past
        // ±90°: those points, and the changed ones, are tested on all their values)
        base?.collect(b, (lat, lon) => pred({ lat, lon }), this.masked, out);
        // the changes (all values, without a base) likewise, with the longitude kept beside each sorted latitude
        this.sorted.collectPairs(b, (lat, lon) => pred({ lat, lon }), out);
        if (odd) {
          const check = new Set<Off>();
          this.cellInto(this.oddLat, GEO_ODD_KEY, check);
          for (const o of check) if (!out.has(o) && this.valuesOf(o)!.some(pred)) out.add(o);
        }
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
      // exact: the grid (when the polygon's box is not too large); and a superset, the
      // exterior ring's padded bounding box over the latitude band (the predicate does the
      // ring test): the planner materialises the smaller and tests the other's members
      const grid = this.polygonNode(c.geo_polygon, wide);
      if (grid !== null) parts.push(grid);
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
