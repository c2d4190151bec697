/**
 * The in-memory geo index's band filters (geo_radius, geo_bounding_box) over 200k
 * points, this build against another built checkout side by side in one process:
 *
 *   npx tsc -p tsconfig.json && node dist/bench/geo/band.js [--base <checkout>] [--tag NAME]
 *
 * Both builds index the same points (some changed after the build, so the change set is
 * searched too) and answer the same 400 filters (500 km radii, 6-degree boxes); the
 * candidate sets must be equal. Rounds alternate between the builds; the median time per
 * filter of each is reported, and written to bench/results/geo-band-<tag>.md.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

import { mulberry32 } from '../../test/support/rng';

interface Build {
  name: string;
  index: { candidates(f: unknown): Set<bigint> | null; update(off: bigint, payload: Record<string, unknown> | null): void };
  validate: (f: unknown) => unknown;
  ms: number[];
}

function arg(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? undefined : process.argv[i + 1];
}

const ROOT = path.resolve(__dirname, '..', '..', '..');
const BASE = arg('base');
const TAG = arg('tag') ?? new Date().toISOString().slice(0, 10);
const N = 200_000;

function load(name: string, root: string, payloads: Array<Record<string, unknown>>): Build {
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { PayloadIndexes } = require(path.join(root, 'dist/ts/shard/payload-index'));
  const { parseFieldSchema } = require(path.join(root, 'dist/ts/shard/field-schema'));
  const { validateFilter } = require(path.join(root, 'dist/ts/shard/filter'));
  /* eslint-enable @typescript-eslint/no-require-imports */
  const index = new PayloadIndexes();
  index.create('loc', parseFieldSchema('geo'), payloads.map((p, i) => [BigInt(i), p]));
  return { name, index, validate: validateFilter, ms: [] };
}

function main(): void {
  const rnd = mulberry32(12345);
  const point = () => ({ loc: { lat: -80 + rnd() * 160, lon: -179 + rnd() * 358 } });
  const payloads = Array.from({ length: N }, point);
  const builds = [load('this', ROOT, payloads)];
  if (BASE) builds.unshift(load('base', path.resolve(BASE), payloads));
  // Changes after the build: the index's change set is part of every band.
  for (let i = 0; i < 200; i++) {
    const j = Math.floor(rnd() * N);
    payloads[j] = point();
    for (const b of builds) b.index.update(BigInt(j), payloads[j]);
  }
  const raw: unknown[] = [];
  for (let k = 0; k < 200; k++) {
    const c = { lat: -60 + rnd() * 120, lon: -150 + rnd() * 300 };
    raw.push({ must: [{ key: 'loc', geo_radius: { center: c, radius: 500_000 } }] });
    raw.push({ must: [{ key: 'loc', geo_bounding_box: { top_left: { lat: c.lat + 3, lon: c.lon - 3 }, bottom_right: { lat: c.lat - 3, lon: c.lon + 3 } } }] });
  }
  const filters = builds.map((b) => raw.map((f) => b.validate(f)));
  // Same answers first.
  let total = 0;
  for (let i = 0; i < raw.length; i++) {
    const sets = builds.map((b, k) => [...b.index.candidates(filters[k][i])!].sort((x, y) => (x < y ? -1 : 1)));
    if (sets.some((s) => s.join(',') !== sets[0].join(','))) throw new Error(`the builds' candidates differ for ${JSON.stringify(raw[i])}`);
    total += sets[0].length;
  }
  for (let round = 0; round < 7; round++) {
    const order = round % 2 === 0 ? builds.map((_, k) => k) : builds.map((_, k) => builds.length - 1 - k);
    for (const k of order) {
      const t0 = process.hrtime.bigint();
      for (const f of filters[k]) builds[k].index.candidates(f);
      builds[k].ms.push(Number(process.hrtime.bigint() - t0) / 1e6 / raw.length);
    }
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  const rows = builds.map((b) => `| ${b.name} | ${median(b.ms).toFixed(3)} | ${b.ms.map((x) => x.toFixed(3)).join(', ')} |`);
  const ratio = builds.length === 2 ? `\nthis / base: ${(median(builds[1].ms) / median(builds[0].ms)).toFixed(3)} of the time per filter.\n` : '';
  const md = [
    `# In-memory geo band filters (${TAG})`,
    '',
    `\`node dist/bench/geo/band.js${BASE ? ` --base ${BASE}` : ''} --tag ${TAG}\``,
    '',
    `${N.toLocaleString('en-US')} random points (one geo value each; 200 changed after the index was built), ${raw.length} filters (500 km geo_radius and 6-degree geo_bounding_box, 200 of each), ${total.toLocaleString('en-US')} candidates in all, equal for both builds. Time to compute a filter's candidates; median of 7 rounds, the builds alternating. Machine: ${os.cpus().length} cores, load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')} at the end.`,
    '',
    '| build | ms per filter (median) | each round |',
    '|---|---:|---|',
    ...rows,
    ratio,
  ].join('\n');
  console.log(md);
  const out = path.join(ROOT, 'bench', 'results', `geo-band-${TAG}.md`);
  fs.writeFileSync(out, md);
  console.log(`written ${path.relative(ROOT, out)}`);
}

main();
