/**
 * geo_polygon through the geo index's grid (ts/shard/field-index.ts): the candidates of
 * an indexed polygon filter are exactly the points a brute-force point-in-polygon
 * computed here accepts (exterior ring, holes), on random data, also after updates and
 * removals; and they are found without visiting points outside the polygon's box.
 * Replay with GEO_POLYGON_SEED=<seed>.
 */

import test from 'ava';

import { compileFilter, validateFilter } from '../../ts/shard/filter';
import { PayloadIndexes } from '../../ts/shard/payload-index';
import { parseFieldSchema } from '../../ts/shard/field-schema';
import { mulberry32 } from '../support/rng';

type Pt = { lat: number; lon: number };

/** Crossing-number test written for this test (planar lat/lon, as the reference's polygons). */
function inside(p: Pt, ring: Pt[]): boolean {
  let crossings = 0;
  for (let i = 0; i < ring.length - 1; i++) {
    const a = ring[i];
    const b = ring[i + 1];
    if ((a.lat <= p.lat && b.lat > p.lat) || (b.lat <= p.lat && a.lat > p.lat)) {
      const t = (p.lat - a.lat) / (b.lat - a.lat);
      if (p.lon < a.lon + t * (b.lon - a.lon)) crossings++;
    }
  }
  return crossings % 2 === 1;
}

/** A star-shaped ring around a centre (closed), radii in degrees. */
function star(rnd: () => number, c: Pt, rMin: number, rMax: number, n: number): Pt[] {
  const ring: Pt[] = [];
  for (let i = 0; i < n; i++) {
    const ang = (2 * Math.PI * i) / n;
    const r = rMin + rnd() * (rMax - rMin);
    ring.push({ lat: c.lat + r * Math.sin(ang), lon: c.lon + r * Math.cos(ang) });
  }
  ring.push({ ...ring[0] });
  return ring;
}

test('an indexed geo_polygon (with holes) selects exactly the brute-force matches, through updates', (t) => {
  const seed = Number(process.env.GEO_POLYGON_SEED ?? Date.now() % 1_000_000);
  t.log(`GEO_POLYGON_SEED=${seed}`);
  const rnd = mulberry32(seed);
  const n = 20_000;
  const size0 = n;
  const payloads: Array<Record<string, unknown> | null> = [];
  for (let i = 0; i < n; i++) {
    const pt = () => ({ lat: -80 + rnd() * 160, lon: -179 + rnd() * 358 });
    // some points hold two locations, some none
    const r = rnd();
    payloads.push(r < 0.05 ? null : r < 0.15 ? { loc: [pt(), pt()] } : { loc: pt() });
  }
  // values a geo index keeps although no polygon of valid points reaches them: latitudes
  // beyond ±90 and coordinates far outside the grid (each polygon tests them one by one)
  payloads.push({ loc: { lat: 95, lon: 10 } }, { loc: { lat: 1e12, lon: -1e12 } }, { loc: [{ lat: 2e9, lon: 0 }, { lat: 10, lon: 10 }] });
  const pi = new PayloadIndexes();
  pi.create('loc', parseFieldSchema('geo'), payloads.map((p, i) => [BigInt(i), p]));

  const check = (round: number) => {
    for (let k = 0; k < 12; k++) {
      if (k === 0) {
        // one polygon around the point (10, 10) that a far-away value shares with a near one
        const ext = [{ lat: 9, lon: 9 }, { lat: 9, lon: 11 }, { lat: 11, lon: 11 }, { lat: 11, lon: 9 }, { lat: 9, lon: 9 }];
        const got = [...pi.candidates(validateFilter({ must: [{ key: 'loc', geo_polygon: { exterior: { points: ext } } }] }))!].map(Number);
        t.true(got.includes(size0 + 2), 'a point with one far value and one inside is found');
        t.false(got.includes(size0 + 1), 'a far-away value is not inside');
      }
      const c = { lat: -60 + rnd() * 120, lon: -150 + rnd() * 300 };
      const size = k % 3 === 0 ? 20 : k % 3 === 1 ? 4 : 0.6;
      const ext = star(rnd, c, size * 0.4, size, 5 + Math.floor(rnd() * 10));
      const holes = k % 2 === 0 ? [star(rnd, c, size * 0.05, size * 0.25, 6)] : [];
      const filter = validateFilter({ must: [{ key: 'loc', geo_polygon: { exterior: { points: ext }, ...(holes.length > 0 ? { interiors: holes.map((h) => ({ points: h })) } : {}) } }] });
      const expected: number[] = [];
      payloads.forEach((p, i) => {
        if (p === null) return;
        const locs = (Array.isArray(p.loc) ? p.loc : [p.loc]) as Pt[];
        if (locs.some((l) => inside(l, ext) && !holes.some((h) => inside(l, h)))) expected.push(i);
      });
      const cands = pi.candidates(filter);
      t.not(cands, null, 'the geo index answers the polygon');
      const got = [...cands!].map(Number).sort((a, b) => a - b);
      t.deepEqual(got, expected, `round ${round}, polygon ${k}: candidates are exactly the matches`);
      // and the shard's predicate agrees on them
      const pred = compileFilter(filter);
      t.true(got.every((i) => pred(i, payloads[i] as never)), "every candidate passes the predicate");
    }
  };
  check(0);
  // updates: move, clear and re-add points
  for (let i = 0; i < 3000; i++) {
    const j = Math.floor(rnd() * n);
    payloads[j] = rnd() < 0.2 ? null : { loc: { lat: -80 + rnd() * 160, lon: -179 + rnd() * 358 } };
    pi.update(BigInt(j), payloads[j]);
  }
  check(1);
});

test('a polygon whose edge crosses the antimeridian is read planar, as the reference reads it', (t) => {
  // The reference tests (lon, lat) points with a planar point-in-polygon (its
  // PolygonWrapper::check_point: geo's Polygon::contains), with no antimeridian rule: a
  // ring from lon 170 to lon -170 spans the longitudes between them the long way round.
  const rnd = mulberry32(11);
  const payloads: Array<Record<string, unknown>> = [];
  for (let i = 0; i < 5000; i++) payloads.push({ loc: { lat: -20 + rnd() * 40, lon: -180 + rnd() * 360 } });
  const pi = new PayloadIndexes();
  pi.create('loc', parseFieldSchema('geo'), payloads.map((p, i) => [BigInt(i), p]));
  const ext = [{ lat: -5, lon: 170 }, { lat: -5, lon: -170 }, { lat: 5, lon: -170 }, { lat: 5, lon: 170 }, { lat: -5, lon: 170 }];
  const got = [...pi.candidates(validateFilter({ must: [{ key: 'loc', geo_polygon: { exterior: { points: ext } } }] }))!].map(Number).sort((a, b) => a - b);
  const expected = payloads.flatMap((p, i) => (inside(p.loc as Pt, ext) ? [i] : []));
  t.deepEqual(got, expected);
  // planar: the wide band between -170 and 170, not the 20 degrees across the antimeridian
  t.true(expected.every((i) => Math.abs((payloads[i].loc as Pt).lon) < 170));
  t.true(expected.length > 500);
});
