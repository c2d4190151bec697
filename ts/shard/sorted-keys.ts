/**
 * The building blocks of payload indexes: point offsets as numbers, postings (one
 * offset or a set), numeric bounds, and SortedKeys (values in order, with a side buffer
 * of recent changes; see payload-index.ts's header, "Updates").
 *
 * Owns: those structures. Must never: know field types or filters.
 */

import { parseKey } from './filter';

// ---------------------------------------------------------------------------------
// Internals: offsets as numbers, postings, sorted keys

export type Off = number;
export type PathSegment = ReturnType<typeof parseKey>[number];

export function toOff(offset: bigint | number): Off {
  const n = typeof offset === 'bigint' ? Number(offset) : offset;
  if (!Number.isSafeInteger(n) || n < 0) {
    throw new RangeError(`payload index: offset must be a non-negative integer below 2^53, got ${String(offset)}`);
  }
  return n;
}

export function flatten(values: unknown[], out: unknown[] = []): unknown[] {
  for (const v of values) {
    if (Array.isArray(v)) flatten(v, out);
    else out.push(v);
  }
  return out;
}

/** Distinct values in first-seen order (strings, booleans or finite numbers). */
export function dedupe<T>(xs: T[]): T[] {
  if (xs.length > 32) return [...new Set(xs)];
  const out: T[] = [];
  for (const v of xs) if (!out.includes(v)) out.push(v);
  return out;
}

export type Posting = Off | Set<Off>;

export function postingAdd<K>(map: Map<K, Posting>, key: K, off: Off): void {
  const p = map.get(key);
  if (p === undefined) map.set(key, off);
  else if (typeof p === 'number') {
    if (p !== off) map.set(key, new Set([p, off]));
  } else p.add(off);
}

export function postingDelete<K>(map: Map<K, Posting>, key: K, off: Off): void {
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

export function postingSize(p: Posting | undefined): number {
  return p === undefined ? 0 : typeof p === 'number' ? 1 : p.size;
}

export function postingInto(p: Posting | undefined, out: Set<Off>): void {
  if (p === undefined) return;
  if (typeof p === 'number') out.add(p);
  else for (const o of p) out.add(o);
}

export interface Bounds {
  lo: number;
  loIncl: boolean;
  hi: number;
  hiIncl: boolean;
}

/** Bounds of filter.ts's cmpBounds, with the test it applies. */
export function boundsOf(r: { gt?: number | null; gte?: number | null; lt?: number | null; lte?: number | null }): {
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
 *
 * With `withAux`, every entry also carries a second number (geo: the longitude beside
 * the sorted latitude), so a band scan tests both without looking the offset's values up
 * (`collectPairs`).
 */
export class SortedKeys {
  private keys = new Float64Array(0);
  private ids = new Float64Array(0);
  private aux = new Float64Array(0);
  private readonly stale = new Set<Off>();
  private readonly delta = new Map<Off, readonly number[]>();
  private readonly deltaAux = new Map<Off, readonly number[]>();
  private deltaCount = 0;

  constructor(private readonly withAux = false) {}

  get dirty(): number {
    return this.stale.size + this.deltaCount;
  }

  build(count: number, fill: (push: (key: number, id: Off, aux?: number) => void) => void): void {
    const k = new Float64Array(count);
    const d = new Float64Array(count);
    const x = new Float64Array(this.withAux ? count : 0);
    let n = 0;
    fill((key, id, aux) => {
      k[n] = key;
      d[n] = id;
      if (this.withAux) x[n] = aux ?? NaN;
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
    const aux = new Float64Array(this.withAux ? n : 0);
    for (let i = 0; i < n; i++) {
      keys[i] = k[perm[i]];
      ids[i] = d[perm[i]];
      if (this.withAux) aux[i] = x[perm[i]];
    }
    this.keys = keys;
    this.ids = ids;
    this.aux = aux;
    this.stale.clear();
    this.delta.clear();
    this.deltaAux.clear();
    this.deltaCount = 0;
  }

  /** `id` has no current entries here (never had, or removed since); `aux[i]` goes with `keys[i]` (withAux). */
  add(id: Off, keys: readonly number[], aux?: readonly number[]): void {
    if (keys.length === 0) return;
    this.delta.set(id, keys);
    if (this.withAux) this.deltaAux.set(id, aux ?? keys.map(() => NaN));
    this.deltaCount += keys.length;
  }

  /** Drops the current entries of `id` (the owner knows it had some). */
  remove(id: Off): void {
    const d = this.delta.get(id);
    if (d !== undefined) {
      this.delta.delete(id);
      this.deltaAux.delete(id);
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

  /** Adds to `out` the offsets with a key in the bounds that passes `test` (which checks the changes' keys against the bounds too). */
  collect(b: Bounds, test: (key: number) => boolean, out: Set<Off>): void {
    this.collectPairs(b, test, out);
  }

  /** As collect, `test` also given each entry's second number (NaN without withAux). */
  collectPairs(b: Bounds, test: (key: number, aux: number) => boolean, out: Set<Off>): void {
    const { keys, ids, aux, stale } = this;
    const j = this.upperBound(b.hi, b.hiIncl);
    const checkStale = stale.size > 0;
    for (let i = this.lowerBound(b.lo, b.loIncl); i < j; i++) {
      const id = ids[i];
      if (checkStale && stale.has(id)) continue;
      if (test(keys[i], this.withAux ? aux[i] : NaN)) out.add(id);
    }
    for (const [id, ks] of this.delta) {
      const xs = this.deltaAux.get(id);
      for (let i = 0; i < ks.length; i++) {
        if (test(ks[i], xs === undefined ? NaN : xs[i])) {
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
