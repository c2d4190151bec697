/**
 * qdrant.Qdrant over a real bin/quiver: the health check answers the service's title,
 * the Qdrant API version and the commit, needs no credentials even with an api key
 * set, and is counted in the metrics by method and code; a call past its deadline.
 */

import test from 'ava';

import { codeName, startGrpcQuiver, type GrpcQuiver } from './client';

let q: GrpcQuiver;

test.before(async () => {
  q = await startGrpcQuiver({ SERVICE__SERVICE__API_KEY: 'secret', QUIVER_COMMIT: '0123456789abcdef0123456789abcdef01234567' });
});

test.after.always(async () => {
  await q?.stop();
});

test('HealthCheck answers the title, the API version and the commit, without credentials', async (t) => {
  const c = q.client();
  const reply = await c.call('Qdrant', 'HealthCheck', {});
  // `_commit` is the loader's virtual field of the proto3 `optional commit`.
  t.deepEqual(reply, { title: 'quiver - vector search engine', version: '1.18.0', commit: '0123456789abcdef0123456789abcdef01234567', _commit: 'commit' });
  // The same facts as REST `/`.
  const root = (await (await fetch(`${q.server.url}/`)).json()) as { title: string; version: string; commit: string };
  t.is(reply.title, root.title);
  t.is(reply.version, root.version);
  t.is(reply.commit, root.commit);
});

test('gRPC calls are counted in /metrics by method and code', async (t) => {
  const c = q.client();
  await c.call('Qdrant', 'HealthCheck', {});
  await c.call('Qdrant', 'HealthCheck', {});
  const denied = await c.fail('Collections', 'List', {});
  t.is(codeName(denied.code), 'UNAUTHENTICATED');
  const text = await (await fetch(`${q.server.url}/metrics`, { headers: { 'api-key': 'secret' } })).text();
  const count = (method: string, code: string) => {
    const m = new RegExp(`^grpc_responses_total\\{method="${method.replace(/\./g, '\\.')}",code="${code}"\\} (\\d+)$`, 'm').exec(text);
    return m === null ? 0 : Number(m[1]);
  };
  t.true(count('/qdrant.Qdrant/HealthCheck', 'OK') >= 2, text);
  t.is(count('/qdrant.Collections/List', 'UNAUTHENTICATED'), 1, text);
  t.regex(text, /^grpc_responses_duration_seconds_bucket\{le="[^"]+",method="\/qdrant\.Qdrant\/HealthCheck",code="OK"\} \d+$/m);
});
