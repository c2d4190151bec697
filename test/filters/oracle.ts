/**
 * A naive filter evaluator for the randomized REST filter tests: written from the
 * semantics documented at the top of ts/shard/filter.ts, deliberately without sharing
 * its code, and as plain as possible (no compilation, no indexes). The tests compare
 * the server with it, and it with filter.ts, so a disagreement says which side moved.
 */

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type Obj = { [k: string]: Json };
export type Id = number | string;

const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** `a.b[].c` -> [{name: a, expand: 0}, {name: b, expand: 1}, {name: c, expand: 0}]. */
function segments(key: string): Array<{ name: string; expand: number }> {
  return key.split('.').map((seg) => {
    let expand = 0;
    while (seg.endsWith('[]')) {
      seg = seg.slice(0, -2);
      expand++;
    }
    return { name: seg, expand };
  });
}

/** The values at the end of `key`: objects in arrays are walked through, `[]` expands. */
export function rawValues(payload: Json, key: string): Json[] {
  let cur: Json[] = [payload];
  for (const { name, expand } of segments(key)) {
    const next: Json[] = [];
    const take = (v: Json): void => {
      if (Array.isArray(v)) v.forEach(take);
      else if (isObj(v) && Object.prototype.hasOwnProperty.call(v, name)) next.push(v[name]);
    };
    cur.forEach(take);
    let out = next;
    for (let i = 0; i < expand; i++) out = out.flatMap((v) => (Array.isArray(v) ? v : []));
    cur = out;
  }
  return cur;
}

export function flat(values: Json[]): Json[] {
  const out: Json[] = [];
  const walk = (v: Json): void => {
    if (Array.isArray(v)) v.forEach(walk);
    else out.push(v);
  };
  values.forEach(walk);
  return out;
}

// -- datetimes ---------------------------------------------------------------------------

const DT = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?([Zz]|[+-]\d{2}:?\d{2})?)?$/;

/** Epoch milliseconds (with fractions) of an RFC 3339-like string; NaN when it is not one. */
export function datetimeMs(s: string): number {
  const m = DT.exec(s);
  if (!m) return NaN;
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const [h, mi, sec] = [Number(m[4] ?? 0), Number(m[5] ?? 0), Number(m[6] ?? 0)];
  if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 59) return NaN;
  const days = new Date(Date.UTC(y, mo, 0)).getUTCDate(); // last day of month `mo`
  if (d > days) return NaN;
  let ms = Date.UTC(y, mo - 1, d, h, mi, sec);
  if (m[7] !== undefined) ms += Number(`0.${m[7]}`) * 1000;
  const zone = m[8];
  if (zone !== undefined && zone !== 'Z' && zone !== 'z') {
    const digits = zone.slice(1).replace(':', '');
    const oh = Number(digits.slice(0, 2));
    const om = Number(digits.slice(2));
    if (oh > 23 || om > 59) return NaN;
    ms -= (zone[0] === '-' ? -1 : 1) * (oh * 60 + om) * 60_000;
  }
  return ms;
}

// -- geo ----------------------------------------------------------------------------------

export interface Geo {
  lat: number;
  lon: number;
}

export function geoOf(v: Json): Geo | null {
  if (!isObj(v)) return null;
  const { lat, lon } = v;
  return typeof lat === 'number' && typeof lon === 'number' && Number.isFinite(lat) && Number.isFinite(lon) ? { lat, lon } : null;
}

export function haversine(a: Geo, b: Geo): number {
  const r = Math.PI / 180;
  const s = Math.sin(((b.lat - a.lat) * r) / 2) ** 2 + Math.cos(a.lat * r) * Math.cos(b.lat * r) * Math.sin(((b.lon - a.lon) * r) / 2) ** 2;
  return 2 * 6371008.8 * Math.asin(Math.min(1, Math.sqrt(s)));
}

function insideRing(p: Geo, ring: Geo[]): boolean {
  let inside = false;
  for (let i = 0, j = ring.length - 1; i < ring.length; j = i++) {
    const a = ring[i];
    const b = ring[j];
    if (a.lat > p.lat !== b.lat > p.lat && p.lon < ((b.lon - a.lon) * (p.lat - a.lat)) / (b.lat - a.lat) + a.lon) inside = !inside;
  }
  return inside;
}

// -- evaluation ---------------------------------------------------------------------------

type Bounds = { gt?: number | string | null; gte?: number | string | null; lt?: number | string | null; lte?: number | string | null };

function within(x: number, b: Bounds, conv: (v: number | string) => number): boolean {
  if (b.gt != null && !(x > conv(b.gt))) return false;
  if (b.gte != null && !(x >= conv(b.gte))) return false;
  if (b.lt != null && !(x < conv(b.lt))) return false;
  if (b.lte != null && !(x <= conv(b.lte))) return false;
  return true;
}

function canonicalUuid(s: string): string | null {
  const h = s.replace(/-/g, '').toLowerCase();
  if (!/^[0-9a-f]{32}$/.test(h)) return null;
  if (s.includes('-') && !/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/.test(s)) return null;
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

function asList(x: unknown): unknown[] {
  if (x === undefined || x === null) return [];
  return Array.isArray(x) ? x : [x];
}

function fieldCondition(c: any, payload: Json): boolean {
  const raw = rawValues(payload, c.key);
  const vals = flat(raw);
  if (c.match != null) {
    const m = c.match;
    if ('value' in m) {
      if (!vals.some((v) => v === m.value)) return false;
    } else if ('any' in m) {
      if (!vals.some((v) => (typeof v === 'string' || typeof v === 'number') && (m.any as Json[]).includes(v))) return false;
    } else if ('except' in m) {
      const present = vals.filter((v) => v !== null);
      if (present.length > 0 && present.every((v) => (m.except as Json[]).includes(v))) return false;
    } else if ('text' in m || 'phrase' in m) {
      const t = m.text ?? m.phrase;
      if (!vals.some((v) => typeof v === 'string' && v.includes(t))) return false;
    } else if ('text_any' in m) {
      const tokens = String(m.text_any).split(/\s+/).filter(Boolean);
      if (!vals.some((v) => typeof v === 'string' && tokens.some((tk) => v.includes(tk)))) return false;
    } else throw new Error(`oracle: unknown match ${JSON.stringify(m)}`);
  }
  if (c.range != null) {
    const b = c.range as Bounds;
    const isDatetime = [b.gt, b.gte, b.lt, b.lte].some((x) => typeof x === 'string');
    if (isDatetime) {
      if (!vals.some((v) => typeof v === 'string' && within(datetimeMs(v), b, (x) => datetimeMs(String(x))))) return false;
    } else if (!vals.some((v) => typeof v === 'number' && within(v, b, Number))) return false;
  }
  if (c.geo_radius != null) {
    const { center, radius } = c.geo_radius;
    if (!vals.some((v) => {
      const g = geoOf(v);
      return g !== null && haversine(center, g) <= radius;
    })) return false;
  }
  if (c.geo_bounding_box != null) {
    const { top_left: tl, bottom_right: br } = c.geo_bounding_box;
    if (!vals.some((v) => {
      const g = geoOf(v);
      if (g === null || g.lat > tl.lat || g.lat < br.lat) return false;
      return tl.lon <= br.lon ? g.lon >= tl.lon && g.lon <= br.lon : g.lon >= tl.lon || g.lon <= br.lon;
    })) return false;
  }
  if (c.geo_polygon != null) {
    const ext: Geo[] = c.geo_polygon.exterior.points;
    const holes: Geo[][] = (c.geo_polygon.interiors ?? []).map((r: { points: Geo[] }) => r.points);
    if (!vals.some((v) => {
      const g = geoOf(v);
      return g !== null && insideRing(g, ext) && !holes.some((h) => insideRing(g, h));
    })) return false;
  }
  if (c.values_count != null) {
    let n = 0;
    for (const v of raw) n += v === null ? 0 : Array.isArray(v) ? v.length : 1;
    if (!within(n, c.values_count, Number)) return false;
  }
  if (c.is_empty != null && isEmpty(raw) !== c.is_empty) return false;
  if (c.is_null != null && raw.some((v) => v === null) !== c.is_null) return false;
  return true;
}

function isEmpty(raw: Json[]): boolean {
  return raw.every((v) => v === null || (Array.isArray(v) && v.length === 0));
}

function condition(c: any, id: Id, payload: Json): boolean {
  if ('key' in c) return fieldCondition(c, payload);
  if ('is_empty' in c) return isEmpty(rawValues(payload, c.is_empty.key));
  if ('is_null' in c) return rawValues(payload, c.is_null.key).some((v) => v === null);
  if ('has_id' in c) {
    return (c.has_id as Id[]).some((h) => (typeof h === 'number' ? h === id : typeof id === 'string' && canonicalUuid(h) === canonicalUuid(id)));
  }
  if ('nested' in c) {
    return flat(rawValues(payload, c.nested.key)).some((el) => isObj(el) && evaluate(c.nested.filter, id, el));
  }
  return evaluate(c, id, payload);
}

/** Whether the point (id, payload; null payload = none) satisfies the filter, per the documented semantics. */
export function evaluate(filter: any, id: Id, payload: Json): boolean {
  const p = payload ?? {};
  for (const c of asList(filter.must)) if (!condition(c, id, p)) return false;
  for (const c of asList(filter.must_not)) if (condition(c, id, p)) return false;
  const should = asList(filter.should);
  if (should.length > 0 && !should.some((c) => condition(c, id, p))) return false;
  if (filter.min_should != null) {
    const n = (filter.min_should.conditions as unknown[]).filter((c) => condition(c, id, p)).length;
    if (n < filter.min_should.min_count) return false;
  }
  return true;
}
