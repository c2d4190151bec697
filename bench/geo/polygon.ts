/**
 * geo_polygon filters over 200k points, side by side in one run: the scan (the filter
 * predicate on every point, what a shard does without a geo index) against the geo
 * index (grid candidates, each tested against the polygon). Same polygons, same answers
 * (checked). Run: npx tsc -p tsconfig.json && node dist/bench/geo/polygon.js
 */

import { compileFilter, validateFilter } from '../../ts/shard/filter';
import { PayloadIndexes } from '../../ts/shard/payload-index';
import { parseFieldSchema } from '../../ts/shard/field-schema';
import { mulberry32 } from '../../test/support/rng';

const N = Number(process.env.POINTS ?? 200_000);
const rnd = mulberry32(7);
const payloads = Array.from({ length: N }, () => ({ loc: { lat: -80 + rnd() * 160, lon: -179 + rnd() * 358 } }));
const pi = new PayloadIndexes();
pi.create('loc', parseFieldSchema('geo'), payloads.map((p, i) => [BigInt(i), p] as [bigint, Record<string, unknown>]));

function ring(c: { lat: number; lon: number }, r: number, n: number) {
  const pts = Array.from({ length: n }, (_, i) => ({ lat: c.lat + r * Math.sin((2 * Math.PI * i) / n) * (0.6 + 0.4 * ((i * 7) % 3) / 2), lon: c.lon + r * Math.cos((2 * Math.PI * i) / n) }));
  return [...pts, pts[0]];
}

for (const size of [1, 5, 20]) {
  const filters = Array.from({ length: 20 }, () => {
    const c = { lat: -50 + rnd() * 100, lon: -150 + rnd() * 300 };
    return validateFilter({ must: [{ key: 'loc', geo_polygon: { exterior: { points: ring(c, size, 12) }, interiors: [{ points: ring(c, size / 4, 8) }] } }] });
  });
  // Interleaved (scan, index, scan, index, ...) and repeated, medians per filter: a
  // shared machine's noise hits both sides alike.
  const scanCounts: number[] = [];
  const idxCounts: number[] = [];
  const scanT: number[] = [];
  const idxT: number[] = [];
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  for (const f of filters) {
    const pred = compileFilter(f);
    const s: number[] = [];
    const x: number[] = [];
    for (let rep = 0; rep < 5; rep++) {
      let t0 = process.hrtime.bigint();
      let n = 0;
      for (let i = 0; i < N; i++) if (pred(i, payloads[i])) n++;
      s.push(Number(process.hrtime.bigint() - t0) / 1e6);
      if (rep === 0) scanCounts.push(n);
      t0 = process.hrtime.bigint();
      n = 0;
      for (const o of pi.candidates(f)!) if (pred(Number(o), payloads[Number(o)])) n++;
      x.push(Number(process.hrtime.bigint() - t0) / 1e6);
      if (rep === 0) idxCounts.push(n);
    }
    scanT.push(median(s));
    idxT.push(median(x));
  }
  const scanMs = median(scanT);
  const idxMs = median(idxT);
  if (scanCounts.some((c, i) => c !== idxCounts[i])) throw new Error('the index and the scan disagree');
  const matched = scanCounts.reduce((a, b) => a + b, 0) / filters.length;
  console.log(`${N} points, polygon radius ${size}° with a hole, ${matched.toFixed(0)} matches on average: median per filter: scan ${scanMs.toFixed(2)} ms, geo index ${idxMs.toFixed(3)} ms (${(scanMs / idxMs).toFixed(0)}x)`);
}
