/**
 * The API layers' request-duration histogram (ts/api/duration-histogram.ts) exports exactly
 * what prom-client's Histogram exports for the same observations: the text a scrape gets
 * and the JSON form, bucket edges included.
 */

import test from 'ava';
import { Histogram, Registry } from 'prom-client';

import { DurationHistogram } from '../../ts/api/duration-histogram';

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

function pair() {
  const theirs = new Registry();
  const ours = new Registry();
  const h = new Histogram({ name: 'x_seconds', help: 'help text', labelNames: ['method', 'endpoint', 'status'], buckets: BUCKETS, registers: [theirs] });
  const d = new DurationHistogram('x_seconds', 'help text', BUCKETS, ours);
  return { theirs, ours, h, d };
}

function observations(): Array<[Record<string, string>, number]> {
  const labels = [
    { method: 'POST', endpoint: '/collections/{collection_name}/points/query', status: '200' },
    { method: 'GET', endpoint: '/readyz', status: '200' },
    { method: 'PUT', endpoint: '/collections/{collection_name}', status: '400' },
  ];
  const out: Array<[Record<string, string>, number]> = [];
  let seed = 7;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
  for (let i = 0; i < 500; i++) out.push([labels[i % 3], rnd() ** 4 * 20]);
  // Exactly on the edges, and past the last one.
  for (const b of BUCKETS) out.push([labels[0], b]);
  out.push([labels[1], 0], [labels[1], 11], [labels[2], 1e-9]);
  return out;
}

test("the same text and JSON as prom-client's Histogram", async (t) => {
    const { theirs, ours, h, d } = pair();
    const series = new Map<string, ReturnType<DurationHistogram['series']>>();
    for (const [labels, v] of observations()) {
      h.observe(labels, v);
      const key = JSON.stringify(labels);
      if (!series.has(key)) series.set(key, d.series(labels));
      series.get(key)!.observe(v);
    }
    const text = await ours.metrics();
    t.is(text, await theirs.metrics());
    t.regex(text, /^x_seconds_bucket\{le="\+Inf",method="GET",endpoint="\/readyz",status="200"\} \d+$/m);
    t.deepEqual(await ours.getMetricsAsJSON(), await theirs.getMetricsAsJSON());
});

test('a series with no observation yet is not exported (as prom-client, which has none until then)', async (t) => {
  const { theirs, ours, d } = pair();
  d.series({ method: 'GET', endpoint: '/x', status: '200' });
  t.is(await ours.metrics(), await theirs.metrics());
});

test('reset (Registry.resetMetrics) empties every series; a non-finite duration is not counted', async (t) => {
  const { theirs, ours, h, d } = pair();
  const labels = { method: 'GET', endpoint: '/x', status: '200' };
  const s = d.series(labels);
  s.observe(0.002);
  h.observe(labels, 0.002);
  s.observe(Number.NaN);
  s.observe(Number.POSITIVE_INFINITY);
  t.is(await ours.metrics(), await theirs.metrics());
  ours.resetMetrics();
  theirs.resetMetrics();
  t.is(await ours.metrics(), await theirs.metrics());
  s.observe(0.3);
  h.observe(labels, 0.3);
  t.is(await ours.metrics(), await theirs.metrics());
});

test('one label set is one series, however often and in whatever key order it is asked for', async (t) => {
  const { theirs, ours, h, d } = pair();
  const a = d.series({ method: 'GET', endpoint: '/readyz', status: '200' });
  const b = d.series({ status: '200', endpoint: '/readyz', method: 'GET' });
  t.is(a, b);
  a.observe(0.002);
  b.observe(0.02);
  h.observe({ method: 'GET', endpoint: '/readyz', status: '200' }, 0.002);
  h.observe({ method: 'GET', endpoint: '/readyz', status: '200' }, 0.02);
  t.is(await ours.metrics(), await theirs.metrics());
  t.not(d.series({ method: 'GET', endpoint: '/readyz', status: '404' }), a);
});
