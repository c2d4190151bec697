/**
 * Two per-request costs of the direct lane on the event loop, each measured against what
 * it replaced, side by side in one process:
 *  - the 200 envelope of a plain query answer (ten points with id, version and score):
 *    okText against JSON.stringify of the same object;
 *  - the route match of a query URL: match() (kept matches) against matchUncached()
 *    (split, walk the routes, decode), each on a URL string made afresh per call, as the
 *    HTTP front makes it from the request head.
 * Rounds alternate the variants; the median of the rounds is printed, in ns per call.
 *
 *   node dist/bench/rest/envelope.js [--rounds 7] [--calls 200000]
 *
 * Prints only; nothing is written.
 */
import pino from 'pino';

import { okText } from '../../ts/api/envelope';
import { mulberry32, numberFlag } from '../engine/common';
import { DirectLane } from '../../ts/api/rest/direct';
import type { RequestStats } from '../../ts/api/rest/stats';
import type { Authenticator } from '../../ts/auth/authenticate';

function main(): void {
  const argv = process.argv.slice(2);
  const rounds = Math.floor(numberFlag(argv, '--rounds', 7, 1));
  const calls = Math.floor(numberFlag(argv, '--calls', 200_000, 1));

  const lane = new DirectLane({ logger: pino({ level: 'silent' }), stats: {} as RequestStats, bodyLimitBytes: 1 << 20, authn: { enabled: false } as Authenticator, audit: null, cors: false });
  const handler = async (): Promise<unknown> => null;
  for (const route of ['search', 'search/batch', 'recommend', 'recommend/batch', 'query', 'query/batch']) lane.add('POST', `/collections/{collection_name}/points/${route}`, handler);
  const head = Buffer.from('POST /collections/bench/points/query HTTP/1.1');
  const url = (): string => head.toString('latin1', 5, 36);

  const rnd = mulberry32(7);
  const points = Array.from({ length: 10 }, () => ({ id: Math.floor(rnd() * 100_000), version: Math.floor(rnd() * 1000), score: Math.fround(rnd()) }));
  const result = { points };
  if (okText(result, 0.000123) !== JSON.stringify({ result, status: 'ok', time: 0.000123 })) throw new Error('okText and JSON.stringify differ');

  let sink = 0;
  const variants: Array<[string, () => void]> = [
    ['envelope: JSON.stringify', () => void (sink += JSON.stringify({ result, status: 'ok', time: rnd() * 1e-4 }).length)],
    ['envelope: okText', () => void (sink += okText(result, rnd() * 1e-4).length)],
    ['route match: uncached', () => void (sink += lane.matchUncached(url(), 'POST') === null ? 0 : 1)],
    ['route match: kept', () => void (sink += lane.match({ headers: {}, url: url(), method: 'POST' }) === null ? 0 : 1)],
  ];
  const times = new Map<string, number[]>(variants.map(([n]) => [n, []]));
  for (let r = 0; r < rounds + 1; r++) {
    for (const [name, f] of variants) {
      const t0 = process.hrtime.bigint();
      for (let i = 0; i < calls; i++) f();
      const ns = Number(process.hrtime.bigint() - t0) / calls;
      if (r > 0) times.get(name)!.push(ns); // round 0 warms up
    }
  }
  const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1];
  for (const [name, xs] of times) console.log(`${name.padEnd(26)} ${median(xs).toFixed(0).padStart(6)} ns/call (rounds: ${xs.map((x) => x.toFixed(0)).join(', ')})`);
  if (sink === 0) console.log('');
}

main();
