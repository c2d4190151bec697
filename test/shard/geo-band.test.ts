/**
 * The geo index's latitude-band scans (field-index.ts GeoIndex.geoNode over
 * sorted-keys.ts SortedKeys.collectPairs: each value's longitude kept beside its sorted
 * latitude), checked against the filter.ts predicate after every few updates, so that
 * the scans meet every state of the sorted keys: entries added since the last rebuild
 * (delta), outdated ones (stale), an offset removed and re-added between two rebuilds,
 * and rebuilds. Points hold one location, several (arrays, nested arrays), latitudes
 * past ±90° (the `oddLat` points) or no valid one; filters take edges from the current
 * values (a box edge or a radius exactly at a value), boxes wrap the antimeridian.
 * Three indexes see the same updates: one loaded in bulk, one built update by update,
 * and one over a base file (on_disk) plus the changes since, whose base is rewritten
 * midway. Replay a failure with GEO_BAND_SEED=<seed>.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { compileFilter, haversineMeters, parseKey, validateFilter, type Filter, type FieldCondition, type GeoPoint, type PointId } from '../../ts/shard/filter';
import { makeIndex, type FieldIndex } from '../../ts/shard/field-index';
import { parseFieldSchema } from '../../ts/shard/field-schema';
import { mulberry32 } from '../support/rng';

type P = Record<string, unknown> | null;

/** Places the points gather around: two across the antimeridian, one at a pole, one on the equator. */
const PLACES: [number, number][] = [
  [52.5, 13.4],
  [0, 179.8],
  [0.5, -179.7],
  [89.6, 40],
  [-89.7, -120],
  [0, 0],
  [-33.9, 151.2],
];

function gen(rnd: () => number) {
  const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const chance = (p: number) => rnd() < p;
  const clampLon = (x: number) => Math.max(-180, Math.min(180, x));
  const near = (): GeoPoint => {
    const [lat, lon] = pick(PLACES);
    return { lat: Math.max(-90, Math.min(90, lat + (rnd() - 0.5) * 3)), lon: clampLon(lon + (rnd() - 0.5) * 3) };
  };
  const location = (): unknown => {
    const r = rnd();
    if (r < 0.04) return { lat: 90 + rnd() * 8, lon: rnd() * 40 }; // past the pole: where (180 - lat, lon + 180) is
    if (r < 0.06) return { lat: -91 - rnd() * 5, lon: -rnd() * 40 };
    if (r < 0.07) return { lat: 1e7, lon: 1e7 };
    if (r < 0.08) return pick([{ lat: 'x', lon: 1 }, { lat: 3 }, 'here', 7, null]);
    return near();
  };
  /** A point's `loc`: one location, an array of several (duplicates too), nested, or none. */
  const payload = (): P => {
    const r = rnd();
    if (r < 0.03) return null;
    if (r < 0.06) return { other: 1 };
    if (r < 0.5) return { loc: location() };
    if (r < 0.9) {
      const xs = Array.from({ length: int(0, 4) }, location);
      if (xs.length > 0 && chance(0.2)) xs.push(xs[0]);
      return { loc: xs };
    }
    return { loc: [Array.from({ length: int(1, 3) }, location), location()] };
  };
  /** A geo condition on `loc`; `values` (the current valid locations) give exact edges. */
  const condition = (values: GeoPoint[]): Record<string, unknown> => {
    const at = (): GeoPoint => (values.length > 0 && chance(0.5) ? pick(values) : near());
    switch (int(0, 5)) {
      case 0:
      case 1: {
        const center = near();
        // a radius exactly at a value's distance (inclusive), or a round one
        const radius = values.length > 0 && chance(0.4) ? haversineMeters(center, pick(values)) : pick([0, 1000, 50_000, 200_000, 1_000_000, 4_000_000]);
        return { key: 'loc', geo_radius: { center, radius } };
      }
      case 2:
      case 3: {
        // edges on values' coordinates, or around a place; top_left.lon > bottom_right.lon wraps
        const a = at();
        const b = at();
        const d = pick([0.2, 1, 2.5]);
        const top = chance(0.5) ? Math.max(a.lat, b.lat) : Math.min(90, a.lat + d);
        const bottom = chance(0.5) ? Math.min(a.lat, b.lat) : Math.max(-90, a.lat - d);
        const left = chance(0.5) ? a.lon : clampLon(a.lon - d);
        const right = chance(0.5) ? b.lon : clampLon(a.lon + d);
        return { key: 'loc', geo_bounding_box: { top_left: { lat: top, lon: left }, bottom_right: { lat: bottom, lon: right } } };
      }
      case 4: {
        // the antimeridian box
        const top = pick([1, 2, 5]);
        return { key: 'loc', geo_bounding_box: { top_left: { lat: top, lon: 179 + rnd() }, bottom_right: { lat: -top, lon: -179 - rnd() } } };
      }
      default: {
        const c = at();
        const d = pick([0.4, 1.5, 4]);
        const lat = (x: number) => Math.max(-90, Math.min(90, x));
        const ring = [
          { lat: lat(c.lat - d), lon: clampLon(c.lon - d) },
          { lat: lat(c.lat - d), lon: clampLon(c.lon + d) },
          { lat: lat(c.lat + d), lon: clampLon(c.lon + d * 0.3) },
          { lat: lat(c.lat - d), lon: clampLon(c.lon - d) },
        ];
        return { key: 'loc', geo_polygon: { exterior: { points: ring } } };
      }
    }
  };
  return { payload, condition, int, chance };
}

/** The valid locations of a payload's `loc` (what the index and the predicate read). */
function locations(p: P): GeoPoint[] {
  const out: GeoPoint[] = [];
  const walk = (v: unknown) => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v !== null && typeof v === 'object') {
      const { lat, lon } = v as Record<string, unknown>;
      if (typeof lat === 'number' && typeof lon === 'number' && Number.isFinite(lat) && Number.isFinite(lon)) out.push({ lat, lon });
    }
  };
  if (p !== null) walk(p.loc);
  return out;
}

function geoIndex(onDisk: boolean): FieldIndex {
  return makeIndex('loc', parseKey('loc'), parseFieldSchema({ type: 'geo', on_disk: onDisk }));
}

/** Changes since the last rebuild of the index's sorted latitudes (0 right after one). */
function dirty(idx: FieldIndex): number {
  return (idx as unknown as { sorted: { dirty: number } }).sorted.dirty;
}

test('randomized: geo radius, box and polygon candidates equal brute force after every few updates (changes, removals, re-adds, arrays), in memory and over a base file', async (t) => {
  const seed = process.env.GEO_BAND_SEED ? Number(process.env.GEO_BAND_SEED) : (Date.now() ^ (Math.random() * 2 ** 31)) >>> 0;
  t.log(`GEO_BAND_SEED=${seed}`);
  const rnd = mulberry32(seed);
  const g = gen(rnd);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-geo-band-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const N = 1500;
  const payloads = new Map<number, P>();
  for (let i = 0; i < N; i++) payloads.set(i, g.payload());
  const loaded = geoIndex(false);
  loaded.load([...payloads].map(([o, p]) => [BigInt(o), p] as [bigint, P]));
  const stepwise = geoIndex(false);
  for (const [o, p] of payloads) stepwise.set(o, p);
  const disk = geoIndex(true);
  disk.load([...payloads].map(([o, p]) => [BigInt(o), p] as [bigint, P]));
  await disk.writeBaseFile(dir, 'geo-1.base');
  const indexes: [string, FieldIndex][] = [
    ['loaded', loaded],
    ['stepwise', stepwise],
    ['disk', disk],
  ];
  const set = (o: number, p: P) => {
    if (p === null) payloads.delete(o);
    else payloads.set(o, p);
    for (const [, idx] of indexes) idx.set(o, p);
  };

  let queries = 0;
  let withChanges = 0;
  let rebuilds = 0;
  let lastDirty = dirty(loaded);
  let nonEmpty = 0;
  const STEPS = 2400;
  for (let step = 0; step < STEPS; step++) {
    const o = Math.floor(rnd() * (N + 200));
    const r = rnd();
    if (r < 0.35) set(o, g.payload());
    else if (r < 0.5) set(o, null);
    else if (r < 0.65) {
      // removed and put back between two rebuilds: the same values or new ones
      const p = payloads.get(o) ?? g.payload();
      set(o, null);
      set(o, g.chance(0.5) ? p : g.payload());
    } else if (r < 0.75) {
      // the same payload again (no change), or a copy of it
      const p = payloads.get(o);
      if (p !== undefined) set(o, g.chance(0.5) ? p : (JSON.parse(JSON.stringify(p)) as P));
    } else if (r < 0.9) {
      // one location of an array moved, one added or one dropped
      const p = payloads.get(o);
      const xs = p !== null && p !== undefined && Array.isArray(p.loc) ? [...(p.loc as unknown[])] : null;
      if (xs !== null && xs.length > 0) {
        const i = g.int(0, xs.length - 1);
        const q = g.int(0, 2);
        if (q === 0) xs[i] = g.payload()?.loc ?? null;
        else if (q === 1) xs.push(g.payload()?.loc ?? null);
        else xs.splice(i, 1);
        set(o, { ...p, loc: xs });
      } else set(o, g.payload());
    } else set(o, { loc: [] });

    const d = dirty(loaded);
    if (d < lastDirty) rebuilds++;
    lastDirty = d;
    if (!g.chance(0.3) && step !== STEPS - 1) continue;
    const values = [...payloads.values()].flatMap(locations).filter((p) => p.lat >= -90 && p.lat <= 90 && p.lon >= -180 && p.lon <= 180);
    for (let k = 0; k < 2; k++) {
      const raw = g.condition(values);
      const f = validateFilter({ must: [raw] }) as Filter;
      const cond = f.must![0] as FieldCondition;
      const pred = compileFilter(f);
      const brute: number[] = [];
      for (const [o2, p] of payloads) if (pred(o2 as PointId, p)) brute.push(o2);
      brute.sort((a, b) => a - b);
      if (brute.length > 0) nonEmpty++;
      queries++;
      if (d > 0) withChanges++;
      for (const [name, idx] of indexes) {
        const node = idx.geoNode(cond, false);
        if (node === null) {
          t.fail(`GEO_BAND_SEED=${seed} step ${step} ${name}: no node for ${JSON.stringify(raw)}`);
          return;
        }
        const got = [...node.materialize()].sort((a, b) => a - b);
        // radius and box bands are exact; a polygon's band is its ring's box, narrowed by the grid (exact) unless too large
        const exact = raw.geo_polygon === undefined ? got : got.filter((x) => pred(x as PointId, payloads.get(x) ?? null));
        if (JSON.stringify(exact) !== JSON.stringify(brute)) {
          const missed = brute.filter((x) => !got.includes(x));
          const extra = exact.filter((x) => !brute.includes(x));
          const show = (x: number | undefined) => (x === undefined ? '' : `${x}: ${JSON.stringify(payloads.get(x) ?? null)}`);
          t.fail(
            `GEO_BAND_SEED=${seed} step ${step} ${name} (${dirty(idx)} changes since the rebuild): ${JSON.stringify(raw)} misses ${missed.length} (${show(missed[0])}), has ${extra.length} more (${show(extra[0])})`,
          );
          return;
        }
        for (const x of got) {
          if (!payloads.has(x)) {
            t.fail(`GEO_BAND_SEED=${seed} step ${step} ${name}: candidate ${x} is not a live point`);
            return;
          }
        }
        // and the node's membership test agrees (what an `and` asks of the larger part)
        for (const x of brute) {
          if (!node.test(x)) {
            t.fail(`GEO_BAND_SEED=${seed} step ${step} ${name}: test(${x}) is false for a match of ${JSON.stringify(raw)}`);
            return;
          }
        }
      }
    }
    if (step === STEPS / 2) {
      // the changes merged into a new base file
      await disk.writeBaseFile(dir, 'geo-2.base');
    }
  }
  t.log(`${queries} filters (${nonEmpty} with matches, ${withChanges} with changes pending), ${rebuilds} rebuilds`);
  t.true(withChanges > queries / 2, 'most filters should meet changes since the last rebuild');
  t.true(rebuilds >= 2, 'the sorted latitudes should be rebuilt along the way');
  t.true(nonEmpty > queries / 4, 'many filters should match points');
});
