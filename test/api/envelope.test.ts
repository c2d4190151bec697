/**
 * The 200 envelope's text (ts/api/envelope.ts okText) is JSON.stringify's, byte for byte,
 * for the answers it writes by hand (plain similarity query points) and for everything it
 * leaves to JSON.stringify; and the direct lane's kept route matches (ts/api/rest/direct.ts)
 * answer as a fresh match does.
 */
import test from 'ava';
import pino from 'pino';

import { okText } from '../../ts/api/envelope';
import { DirectLane } from '../../ts/api/rest/direct';
import type { RequestStats } from '../../ts/api/rest/stats';
import type { Authenticator } from '../../ts/auth/authenticate';
import { mulberry32 } from '../support/rng';

const same = (t: import('ava').ExecutionContext, result: unknown, time = 0.000123): void => {
  t.is(okText(result, time), JSON.stringify({ result, status: 'ok', time }));
};

test('plain query points: the hand-written text is JSON.stringify\'s', (t) => {
  const points = [
    { id: 1, version: 0, score: 0.9876543212890625 },
    { id: 18446744073709, version: 7, score: -0 },
    { id: '5c56c793-69f3-4fbf-87e6-c4bf54c28c26', version: 2, score: 1e-7 },
    { id: 'a "quoted" \\ id\n\u2028', version: 3, score: 1e21 },
    { id: 3, version: 9007199254740991, score: -123.5 },
  ];
  same(t, { points });
  same(t, points);
  same(t, { points: [] });
  same(t, []);
  same(t, { points }, 0);
  same(t, { points }, 1.5e-9);
});

test('anything else goes to JSON.stringify, with the same text', (t) => {
  const p = { id: 1, version: 2, score: 0.5 };
  const cases: unknown[] = [
    null,
    true,
    'text',
    42,
    { points: [p], extra: 1 },
    { other: [p] },
    { points: 'not a list' },
    { points: [p, null] },
    { points: [p, [1, 2, 3]] },
    { points: [{ ...p, payload: { a: 1 } }] },
    { points: [{ ...p, vector: [0.1, 0.2] }] },
    { points: [{ score: 0.5, id: 1, version: 2 }] },
    { points: [{ id: 1, score: 0.5, version: 2 }] },
    { points: [{ id: 1, version: 2 }] },
    { points: [{ id: 1, version: 2, score: NaN }] },
    { points: [{ id: 1, version: 2, score: Infinity }] },
    { points: [{ id: Infinity, version: 2, score: 0.5 }] },
    { points: [{ id: null, version: 2, score: 0.5 }] },
    { points: [{ id: 1, version: '2', score: 0.5 }] },
    { points: [{ id: 1, version: 2, score: 0.5, shard_key: 'k' }] },
    { points: [{ id: 1, version: 2, score: 0.5, order_value: 3 }] },
    [{ points: [p] }, { points: [] }],
    [[p]],
    { groups: [{ id: 1, hits: [p] }] },
    Object.assign(Object.create({ inherited: 1 }), { points: [p] }),
    { points: [Object.assign(Object.create({ extra: 1 }), p)] },
    { points: [new (class { id = 1; version = 2; score = 0.5; toJSON(): unknown { return 'mine'; } })()] },
    new (class { points = [p]; toJSON(): unknown { return 'mine'; } })(),
    // Inherited keys: JSON.stringify writes own keys only.
    Object.create({ points: [] }),
    [Object.create({ id: 1, version: 2, score: 0.5 })],
    [Object.assign(Object.create({ score: 0.5 }), { id: 1, version: 2 })],
    // A toJSON on the lists themselves.
    Object.assign([p], { toJSON: () => 'x' }),
    { points: Object.assign([p], { toJSON: () => 'x' }) },
  ];
  for (const c of cases) same(t, c);
  // A time that is not finite: JSON.stringify writes null.
  t.is(okText({ points: [p] }, NaN), JSON.stringify({ result: { points: [p] }, status: 'ok', time: NaN }));
});

test('what JSON.stringify refuses still throws (a BigInt id or version)', (t) => {
  t.throws(() => okText({ points: [{ id: 1n, version: 2, score: 0.5 }] }, 0), { instanceOf: TypeError });
  t.throws(() => okText([{ id: 1, version: 2n, score: 0.5 }], 0), { instanceOf: TypeError });
});

test('random plain answers: the same text', (t) => {
  const rnd = mulberry32(12345);
  for (let round = 0; round < 500; round++) {
    const n = Math.floor(rnd() * 20);
    const points = Array.from({ length: n }, () => ({
      id: rnd() < 0.2 ? `id-${Math.floor(rnd() * 1e6)}` : Math.floor(rnd() * 2 ** 53),
      version: Math.floor(rnd() * 1e9),
      score: Math.fround((rnd() - 0.5) * 10 ** Math.floor(rnd() * 40 - 20)),
    }));
    same(t, rnd() < 0.5 ? points : { points }, rnd());
  }
});

function lane(): DirectLane {
  return new DirectLane({
    logger: pino({ level: 'silent' }),
    stats: {} as RequestStats,
    bodyLimitBytes: 1 << 20,
    authn: { enabled: false } as Authenticator,
    audit: null,
    cors: false,
  });
}

test('a kept route match answers as a fresh one, and requests cannot change it', (t) => {
  const l = lane();
  const handler = async (): Promise<unknown> => null;
  l.add('POST', '/collections/{collection_name}/points/query', handler);
  const req = (url: string, method = 'POST') => ({ headers: {}, url, method });
  const first = l.match(req('/collections/a%20b/points/query?wait=true'));
  const again = l.match(req('/collections/a%20b/points/query?wait=true'));
  t.truthy(first);
  t.is(again, first);
  t.deepEqual({ ...again!, route: null }, { route: null, params: { collection_name: 'a b' }, path: '/collections/a%20b/points/query', query: 'wait=true' });
  t.throws(() => {
    (again!.params as Record<string, string>).collection_name = 'other';
  }, { instanceOf: TypeError });
  t.is(l.match(req('/collections/a%20b/points/query?wait=true'))?.params.collection_name, 'a b');
  // Misses are not kept (they would push the lane's own routes out), and answer null each time.
  t.is(l.match(req('/collections/a%20b/points/query', 'GET')), null);
  t.is(l.match(req('/collections/a%20b/points/query', 'GET')), null);
  t.is(l.match(req('/collections/%E0%A4%A/points/query')), null);
  t.is(l.match(req('/collections/x/points/query#frag')), null);
  // A route added later is found for a URL that missed before.
  t.is(l.match(req('/collections/x/points/search')), null);
  l.add('POST', '/collections/{collection_name}/points/search', handler);
  t.is(l.match(req('/collections/x/points/search'))?.params.collection_name, 'x');
  // Long URLs are matched each time, with the same answer.
  const long = `/collections/${'c'.repeat(300)}/points/query`;
  const a = l.match(req(long));
  const b = l.match(req(long));
  t.is(a?.params.collection_name, 'c'.repeat(300));
  t.deepEqual(b, a);
  // More distinct URLs than the cache keeps: every answer still right.
  for (let i = 0; i < 1500; i++) t.is(l.match(req(`/collections/c${i}/points/query`))?.params.collection_name, `c${i}`);
  t.is(l.match(req('/collections/c7/points/query'))?.params.collection_name, 'c7');
});
