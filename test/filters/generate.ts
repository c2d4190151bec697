/**
 * Seeded generators for the randomized REST filter tests: payloads with every kind of
 * value the filters look at (and the awkward ones: missing, null, [], [null], wrong
 * types, arrays of objects, invalid datetimes and geo points), and random filters over
 * them. Values come from small vocabularies so that conditions often match.
 */

import type { Geo, Id, Json, Obj } from './oracle';

export class Rng {
  private a: number;
  constructor(seed: number) {
    this.a = seed >>> 0;
  }
  next(): number {
    this.a = (this.a + 0x6d2b79f5) >>> 0;
    let t = this.a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  between(lo: number, hi: number): number {
    return lo + this.int(hi - lo + 1);
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)];
  }
  sample<T>(xs: readonly T[], n: number): T[] {
    const c = [...xs];
    const out: T[] = [];
    while (out.length < n && c.length > 0) out.push(c.splice(this.int(c.length), 1)[0]);
    return out;
  }
  list<T>(lo: number, hi: number, gen: () => T): T[] {
    return Array.from({ length: this.between(lo, hi) }, gen);
  }
}

export const WORDS = ['red', 'green', 'blue', 'cyan', 'magenta', 'yellow', 'black', 'white'] as const;
const TEXT_WORDS = ['quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'Red', 'green-ish'];

// -- payloads -------------------------------------------------------------------------------

function uuidFrom(r: Rng): string {
  const hex = Array.from({ length: 32 }, () => '0123456789abcdef'[r.int(16)]).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-4${hex.slice(13, 16)}-a${hex.slice(17, 20)}-${hex.slice(20)}`;
}

export function makeIds(r: Rng, ints: number, uuids: number): Id[] {
  const set = new Set<number>();
  while (set.size < ints) set.add(r.int(ints * 3));
  const out: Id[] = [...set];
  for (let i = 0; i < uuids; i++) out.push(uuidFrom(r));
  return out;
}

export function randomUuid(r: Rng): string {
  return uuidFrom(r);
}

const pad = (n: number, w = 2) => String(n).padStart(w, '0');

/** A datetime string in 2020-2024 in one of the accepted forms (or, rarely, an invalid one). */
export function datetime(r: Rng, allowInvalid = true): string {
  if (allowInvalid && r.chance(0.04)) return r.pick(['yesterday', '2023-13-01T00:00:00Z', '2023-02-30', '2021-06-01T25:00:00Z', '']);
  const y = r.between(2020, 2024);
  const mo = r.between(1, 12);
  const d = r.between(1, 28);
  const h = r.between(0, 23);
  const mi = r.between(0, 59);
  const s = r.between(0, 59);
  const date = `${y}-${pad(mo)}-${pad(d)}`;
  switch (r.int(7)) {
    case 0:
      return date;
    case 1:
      return `${date}T${pad(h)}:${pad(mi)}:${pad(s)}Z`;
    case 2:
      return `${date}T${pad(h)}:${pad(mi)}:${pad(s)}.${pad(r.int(1000), 3)}Z`;
    case 3: {
      const off = r.between(-11, 12);
      return `${date}T${pad(h)}:${pad(mi)}:${pad(s)}${off < 0 ? '-' : '+'}${pad(Math.abs(off))}:${r.pick(['00', '30'])}`;
    }
    case 4:
      return `${date} ${pad(h)}:${pad(mi)}:${pad(s)}`;
    case 5:
      return `${date}T${pad(h)}:${pad(mi)}`;
    default:
      return `${date}T${pad(h)}:${pad(mi)}:${pad(s)}.${pad(r.int(1_000_000), 6)}+00:00`;
  }
}

export function geoPoint(r: Rng): Geo {
  // Clusters (so radius/box queries find something) plus points anywhere, and some near
  // the antimeridian.
  if (r.chance(0.6)) {
    const c = r.pick([
      { lat: 52.52, lon: 13.4 },
      { lat: 40.71, lon: -74.0 },
      { lat: -33.87, lon: 151.21 },
      { lat: 64.0, lon: 179.5 },
      { lat: -17.7, lon: -179.3 },
    ]);
    return { lat: +(c.lat + (r.next() - 0.5) * 6).toFixed(5), lon: +Math.max(-180, Math.min(180, c.lon + (r.next() - 0.5) * 6)).toFixed(5) };
  }
  return { lat: +((r.next() - 0.5) * 170).toFixed(5), lon: +((r.next() - 0.5) * 360).toFixed(5) };
}

/** Sets `key` on `p`: missing, null, [], [null], a list of values or one value. */
function field(r: Rng, p: Obj, key: string, gen: () => Json, listChance = 0.15): void {
  const x = r.next();
  if (x < 0.18) return;
  if (x < 0.23) p[key] = null;
  else if (x < 0.26) p[key] = [];
  else if (x < 0.27) p[key] = [null];
  else if (x < 0.27 + listChance) p[key] = r.list(1, 3, gen);
  else p[key] = gen();
}

export function intValue(r: Rng): Json {
  if (r.chance(0.05)) return r.between(-20, 20) + 0.5;
  if (r.chance(0.03)) return String(r.between(-20, 20));
  return r.between(-20, 20);
}

export function floatValue(r: Rng): number {
  return r.chance(0.1) ? r.between(-10, 10) : Math.round((r.next() - 0.5) * 2000) / 100;
}

export function word(r: Rng): string {
  if (r.chance(0.03)) return r.pick(['', 'Red', 'red ', 'reddish']);
  return r.pick(WORDS);
}

function mixedValue(r: Rng): Json {
  switch (r.int(9)) {
    case 0:
      return r.between(-5, 5);
    case 1:
      return floatValue(r);
    case 2:
      return r.pick(WORDS);
    case 3:
      return String(r.between(-5, 5));
    case 4:
      return r.chance(0.5);
    case 5:
      return null;
    case 6:
      return { x: r.between(0, 3) };
    case 7:
      return [r.between(-5, 5), r.pick(WORDS), r.chance(0.5)];
    default:
      return [];
  }
}

function arrElement(r: Rng): Json {
  if (r.chance(0.05)) return r.between(0, 10); // a non-object element: nested conditions skip it
  const e: Obj = {};
  if (r.chance(0.85)) e.x = r.chance(0.1) ? null : r.between(0, 10);
  if (r.chance(0.8)) e.y = r.pick(WORDS);
  if (r.chance(0.5)) e.z = r.list(0, 3, () => r.between(0, 10));
  return e;
}

function nestedValue(r: Rng): Obj {
  const n: Obj = {};
  if (r.chance(0.8)) n.a = r.chance(0.1) ? null : r.between(-10, 10);
  if (r.chance(0.7)) n.b = r.pick(WORDS);
  if (r.chance(0.6)) n.c = r.chance(0.1) ? [{ d: floatValue(r) }, { d: floatValue(r) }] : { d: floatValue(r) };
  return n;
}

export function randomPayload(r: Rng): Obj | null {
  if (r.chance(0.04)) return null;
  const p: Obj = {};
  field(r, p, 'int', () => intValue(r));
  field(r, p, 'float', () => floatValue(r));
  field(r, p, 'kw', () => word(r));
  field(r, p, 'flag', () => r.chance(0.5), 0.05);
  field(r, p, 'dt', () => datetime(r));
  field(r, p, 'geo', () => (r.chance(0.03) ? r.pick<Json>([{ lat: 'x', lon: 1 }, { lon: 5 }, 'berlin']) : (geoPoint(r) as unknown as Json)), 0.1);
  if (r.chance(0.8)) p.nested = r.chance(0.1) ? [nestedValue(r), nestedValue(r)] : r.chance(0.05) ? null : nestedValue(r);
  const a = r.next();
  if (a < 0.75) p.arr = r.list(0, 4, () => arrElement(r));
  else if (a < 0.8) p.arr = arrElement(r); // not an array: `arr[].x` finds nothing, `arr.x` does
  else if (a < 0.83) p.arr = null;
  const t = r.next();
  if (t < 0.7) p.tags = r.list(0, 5, () => r.pick(WORDS));
  else if (t < 0.8) p.tags = r.pick(WORDS);
  if (r.chance(0.7)) p.mixed = mixedValue(r);
  if (r.chance(0.4)) p.text = r.list(1, 4, () => r.pick(TEXT_WORDS)).join(' ');
  return p;
}

export function randomVector(r: Rng, dim: number): number[] {
  for (;;) {
    const v = Array.from({ length: dim }, () => Math.fround(r.next() * 2 - 1));
    if (v.some((x) => Math.abs(x) > 0.05)) return v;
  }
}

// -- filters ---------------------------------------------------------------------------------

type Kind = 'int' | 'float' | 'kw' | 'bool' | 'dt' | 'geo' | 'mixed' | 'text' | 'missing';
/** A key, what its values mostly are, and (for integers) their range. */
type KeySpec = [key: string, kind: Kind, lo?: number, hi?: number];

const TOP_KEYS: KeySpec[] = [
  ['int', 'int', -20, 20],
  ['float', 'float'],
  ['kw', 'kw'],
  ['flag', 'bool'],
  ['dt', 'dt'],
  ['geo', 'geo'],
  ['nested.a', 'int', -10, 10],
  ['nested.b', 'kw'],
  ['nested.c.d', 'float'],
  ['nested[].a', 'int', -10, 10],
  ['arr[].x', 'int', 0, 10],
  ['arr.x', 'int', 0, 10],
  ['arr[].y', 'kw'],
  ['arr[].z', 'int', 0, 10],
  ['arr[].z[]', 'int', 0, 10],
  ['tags', 'kw'],
  ['tags[]', 'kw'],
  ['mixed', 'mixed', -5, 5],
  ['text', 'text'],
  ['nothing', 'missing'],
  // twice as likely as the others: their conditions are the least common otherwise
  ['dt', 'dt'],
  ['geo', 'geo'],
];
const ARR_KEYS: KeySpec[] = [
  ['x', 'int', 0, 10],
  ['y', 'kw'],
  ['z', 'int', 0, 10],
  ['w', 'missing'],
];
const NESTED_KEYS: KeySpec[] = [
  ['a', 'int', -10, 10],
  ['b', 'kw'],
  ['c.d', 'float'],
];

export interface FilterContext {
  ids: Id[];
  /** Datetime strings found in payloads (range bounds on them test inclusive edges). */
  datetimes: string[];
  /** Numbers found in payloads, for the same reason. */
  numbers: number[];
}

function numberBound(r: Rng, ctx: FilterContext, spec: KeySpec): number {
  const [, kind, lo = -20, hi = 20] = spec;
  if (kind === 'int' && r.chance(0.3) && ctx.numbers.length > 0) return r.pick(ctx.numbers);
  return kind === 'float' ? floatValue(r) : r.between(lo - 1, hi + 1) + (r.chance(0.1) ? 0.5 : 0);
}

function bounds<T>(r: Rng, gen: () => T): Record<string, T> {
  const out: Record<string, T> = {};
  const n = r.next();
  if (n < 0.05) return out; // {}: any value of the type
  const lower = r.chance(0.7);
  const upper = !lower || r.chance(0.6);
  const a = gen();
  const b = gen();
  let lo = a;
  let hi = b;
  if (lower && upper && (typeof a === 'number' ? (a as number) > (b as number) : String(a) > String(b)) && r.chance(0.85)) [lo, hi] = [b, a];
  if (lower) out[r.chance(0.5) ? 'gt' : 'gte'] = lo;
  if (upper) out[r.chance(0.5) ? 'lt' : 'lte'] = hi;
  return out;
}

function matchFor(r: Rng, spec: KeySpec): Json {
  const [, kind, lo = -20, hi = 20] = spec;
  const scalar = (): Json => {
    switch (kind) {
      case 'int':
        return r.chance(0.05) ? r.pick(WORDS) : r.between(lo, hi);
      case 'float':
        return r.between(-10, 10);
      case 'kw':
        return r.chance(0.05) ? r.between(0, 5) : word(r);
      case 'text':
        return r.pick(TEXT_WORDS);
      case 'bool':
        return r.chance(0.5);
      case 'mixed':
        return r.pick<Json>([r.between(-5, 5), r.pick(WORDS), String(r.between(-5, 5)), r.chance(0.5)]);
      default:
        return r.pick<Json>([r.pick(WORDS), r.between(0, 5)]);
    }
  };
  const x = r.next();
  if (kind === 'bool' || x < 0.45) return { value: scalar() };
  const list = (): Json[] => {
    // `any`/`except` take all strings or all integers.
    const first = scalar();
    const wantString = typeof first === 'string';
    const gen = (): Json => (wantString ? (kind === 'int' ? String(r.between(lo, hi)) : kind === 'text' ? r.pick(TEXT_WORDS) : word(r)) : kind === 'kw' ? r.between(0, 5) : r.between(lo, hi));
    return [first, ...r.list(0, 3, gen)].filter((v) => typeof v === (wantString ? 'string' : 'number')).slice(0, r.chance(0.05) ? 0 : 5);
  };
  if (x < 0.7) return { any: list() };
  if ((kind === 'kw' || kind === 'text') && x < (kind === 'text' ? 0.95 : 0.8)) return { text: r.pick(['re', 'ee', 'b', 'own', 'lazy dog', 'x', 'Red', 'quick']) };
  return { except: list() };
}

function geoCondition(r: Rng, key: string): Obj {
  const x = r.next();
  const center = geoPoint(r);
  if (x < 0.45) return { key, geo_radius: { center: center as unknown as Json, radius: r.pick([1000, 50_000, 200_000, 400_000, 2_000_000, 8_000_000]) * (0.5 + r.next()) } };
  if (x < 0.85) {
    const dlat = 0.5 + r.next() * 20;
    const dlon = 0.5 + r.next() * 40;
    const top = Math.min(90, center.lat + dlat);
    const bottom = Math.max(-90, center.lat - dlat);
    let left = center.lon - dlon;
    let right = center.lon + dlon;
    // Wrap across the antimeridian the way a client writes such a box: left > right.
    if (left < -180) left += 360;
    if (right > 180) right -= 360;
    return { key, geo_bounding_box: { top_left: { lat: +top.toFixed(4), lon: +left.toFixed(4) }, bottom_right: { lat: +bottom.toFixed(4), lon: +right.toFixed(4) } } };
  }
  // A star-shaped polygon around the center (kept away from the poles and the antimeridian).
  const c = { lat: Math.max(-70, Math.min(70, center.lat)), lon: Math.max(-150, Math.min(150, center.lon)) };
  const ring = (scale: number): Json => {
    const n = r.between(4, 8);
    const angles = Array.from({ length: n }, () => r.next() * 2 * Math.PI).sort((a, b) => a - b);
    const pts = angles.map((a) => {
      const d = scale * (0.5 + r.next());
      return { lat: +(c.lat + d * Math.sin(a)).toFixed(4), lon: +(c.lon + d * 1.5 * Math.cos(a)).toFixed(4) };
    });
    pts.push({ ...pts[0] });
    return { points: pts };
  };
  const poly: Obj = { exterior: ring(8) };
  if (r.chance(0.4)) poly.interiors = [ring(1.5)];
  return { key, geo_polygon: poly };
}

function fieldCondition(r: Rng, ctx: FilterContext, spec: KeySpec): Obj {
  const [key, kind] = spec;
  let x = r.next();
  if (kind === 'geo' && x < 0.85) return geoCondition(r, key);
  if (kind === 'dt' && x < 0.85) {
    const gen = () => (r.chance(0.35) && ctx.datetimes.length > 0 ? r.pick(ctx.datetimes) : datetime(r, false));
    const b = bounds(r, gen);
    if (Object.keys(b).length === 0) b.gte = gen();
    return { key, range: b };
  }
  if (kind === 'geo' || kind === 'dt') x = r.next(); // the other conditions, on geo and datetime fields too
  if (x < 0.1) return { key, values_count: bounds(r, () => r.between(0, 4)) };
  if (x < 0.16) return { key, is_empty: r.chance(0.5) };
  if (x < 0.2) return { key, is_null: r.chance(0.5) };
  if ((kind === 'int' || kind === 'float' || kind === 'mixed') && x < 0.6) {
    const c: Obj = { key, range: bounds(r, () => numberBound(r, ctx, spec)) };
    if (r.chance(0.1)) c.match = matchFor(r, spec); // two conditions in one: both must hold
    return c;
  }
  if (x < (kind === 'geo' || kind === 'dt' ? 0.4 : 0.23) && kind !== 'bool') return { key, range: bounds(r, () => numberBound(r, ctx, ['', 'int'])) }; // a numeric range on non-numbers
  return { key, match: matchFor(r, spec) };
}

function hasId(r: Rng, ctx: FilterContext): Obj {
  const ids = r.sample(ctx.ids, r.between(0, 40)).map((id) => {
    if (typeof id === 'string') {
      const y = r.next();
      if (y < 0.2) return id.toUpperCase();
      if (y < 0.35) return id.replace(/-/g, '');
      return id;
    }
    return id;
  });
  if (r.chance(0.3)) ids.push(r.between(0, 10_000), randomUuid(r)); // ids that do not exist
  return { has_id: ids };
}

export function randomCondition(r: Rng, ctx: FilterContext, depth: number, keys: KeySpec[] = TOP_KEYS, inNested = false): Json {
  const x = r.next();
  if (x < 0.06) {
    const [key] = r.pick(keys);
    return r.chance(0.5) ? { is_empty: { key } } : { is_null: { key } };
  }
  if (!inNested && x < 0.12) return hasId(r, ctx);
  if (!inNested && depth < 2 && x < 0.2) {
    if (r.chance(0.7)) return { nested: { key: r.pick(['arr', 'arr[]']), filter: randomFilter(r, ctx, depth + 1, ARR_KEYS, true) } };
    return { nested: { key: 'nested', filter: randomFilter(r, ctx, depth + 1, NESTED_KEYS, true) } };
  }
  if (depth < 3 && x < 0.28) return randomFilter(r, ctx, depth + 1, keys, inNested);
  return fieldCondition(r, ctx, r.pick(keys));
}

export function randomFilter(r: Rng, ctx: FilterContext, depth = 0, keys: KeySpec[] = TOP_KEYS, inNested = false): Obj {
  const f: Obj = {};
  const clause = (): Json => {
    if (r.chance(0.1)) return randomCondition(r, ctx, depth, keys, inNested); // a single condition, not a list
    return r.list(depth === 0 ? 1 : 0, 2, () => randomCondition(r, ctx, depth, keys, inNested));
  };
  if (r.chance(0.55)) f.must = clause();
  if (r.chance(0.4)) f.should = r.chance(0.2) ? randomCondition(r, ctx, depth, keys, inNested) : r.list(1, 4, () => randomCondition(r, ctx, depth, keys, inNested));
  if (r.chance(0.3)) f.must_not = clause();
  if (r.chance(0.12)) {
    const conditions = r.list(1, 4, () => randomCondition(r, ctx, depth, keys, inNested));
    f.min_should = { conditions, min_count: r.between(0, conditions.length + (r.chance(0.1) ? 1 : 0)) };
  }
  if (Object.keys(f).length === 0 && depth === 0 && r.chance(0.9)) f.must = [randomCondition(r, ctx, depth, keys, inNested)];
  return f;
}
