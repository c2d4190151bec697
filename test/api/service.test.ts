/**
 * The service shell, driven through the real process: what an operator and a Qdrant
 * client see before collections exist.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';

import { waitFor } from '../support/wait';
import { REPO_ROOT, runQuiver, startQuiver, type RunningQuiver } from './helpers';
import { NOT_IMPLEMENTED_ROUTES } from '../../ts/api/rest/not-implemented';

const COMMIT = 'abcdef0123456789abcdef0123456789abcdef01';
const VERSION = (JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string }).version;

let node: RunningQuiver;

test.before(async () => {
  node = await startQuiver({
    QUIVER_COMMIT: COMMIT,
    SERVICE__SERVICE__MAX_REQUEST_SIZE_MB: '1',
    SERVICE__SERVICE__ENABLE_CORS: 'true',
  });
});

test.after.always(async () => {
  if (node !== undefined) await node.stop();
});

test('GET / names the service, its version and its commit, without an envelope', async (t) => {
  const res = await fetch(`${node.url}/`);
  t.is(res.status, 200);
  t.deepEqual(await res.json(), { title: 'quiver - vector search engine', version: '1.18.0', quiver_version: VERSION, commit: COMMIT });
});

test('the health probes answer in plain text', async (t) => {
  for (const [probe, text] of [
    ['/healthz', 'healthz check passed'],
    ['/livez', 'healthz check passed'],
    ['/readyz', 'all shards are ready'],
  ]) {
    const res = await fetch(node.url + probe);
    t.is(res.status, 200, probe);
    t.regex(res.headers.get('content-type') ?? '', /^text\/plain/, probe);
    t.is(await res.text(), text, probe);
  }
});

test('a trailing slash reaches the same route', async (t) => {
  const res = await fetch(`${node.url}/healthz/`);
  t.is(res.status, 200);
  t.is(await res.text(), 'healthz check passed');
});

test('/metrics counts requests by route pattern, not by raw path', async (t) => {
  t.is((await fetch(`${node.url}/collections/metrics-probe`)).status, 404);
  t.is((await fetch(`${node.url}/livez`)).status, 200);
  const res = await fetch(`${node.url}/metrics`);
  t.is(res.status, 200);
  t.regex(res.headers.get('content-type') ?? '', /^text\/plain/);
  const text = await res.text();
  t.regex(text, /^rest_responses_total\{method="GET",endpoint="\/livez",status="200"\} [1-9]/m);
  t.regex(text, /^rest_responses_total\{method="GET",endpoint="\/collections\/\{collection_name\}",status="404"\} [1-9]/m);
  t.regex(text, /^rest_responses_duration_seconds_bucket\{.*endpoint="\/livez"/m);
  t.false(text.includes('metrics-probe'));
  // Default process metrics are there too.
  t.regex(text, /^process_cpu_user_seconds_total /m);
});

test('/telemetry reports this process and its request counts in the envelope', async (t) => {
  await fetch(`${node.url}/readyz`);
  const res = await fetch(`${node.url}/telemetry`);
  t.is(res.status, 200);
  const body = (await res.json()) as {
    result: {
      id: string;
      app: { name: string; version: string; quiver_version: string; startup: string };
      requests: { rest: Record<string, { count: number; avg_duration_micros: number }> };
    };
    status: string;
    time: number;
  };
  t.is(body.status, 'ok');
  t.is(typeof body.time, 'number');
  t.regex(body.result.id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  t.is(body.result.app.name, 'quiver');
  t.is(body.result.app.version, '1.18.0', 'the Qdrant API version, which the clients check');
  t.is(body.result.app.quiver_version, VERSION);
  t.false(Number.isNaN(Date.parse(body.result.app.startup)));
  const readyz = body.result.requests.rest['GET /readyz'];
  t.true(readyz.count >= 1);
  t.true(readyz.avg_duration_micros > 0);
});

test('the Qdrant routes that are not served answer 501 with the error envelope, naming why', async (t) => {
  // Every route of the reference's points API is served now; /quotas is the one left.
  t.deepEqual(NOT_IMPLEMENTED_ROUTES, [
    ['GET', '/quotas'],
    ['PUT', '/quotas'],
  ]);
  const res = await fetch(`${node.url}/quotas`);
  t.is(res.status, 501);
  const body = (await res.json()) as { status: { error: string }; time: number };
  t.regex(body.status.error, /^Not implemented: GET \/quotas: the node-wide resident-memory and disk quotas are not implemented in Quiver/);
  t.is(typeof body.time, 'number');
  // /quotas names why and what to use instead.
  const quotas = (await (await fetch(`${node.url}/quotas`, { method: 'PUT' })).json()) as { status: { error: string } };
  t.regex(quotas.status.error, /^Not implemented: PUT \/quotas: the node-wide resident-memory and disk quotas are not implemented in Quiver; per collection, strict_mode_config limits writes/);
});

test('an unknown route answers 404 with an empty body', async (t) => {
  const res = await fetch(`${node.url}/no/such/route`);
  t.is(res.status, 404);
  t.is(await res.text(), '');
  const wrongMethod = await fetch(`${node.url}/telemetry`, { method: 'DELETE' });
  t.is(wrongMethod.status, 404);
  t.is(await wrongMethod.text(), '');
});

test('malformed JSON answers 400 "Format error in JSON body"', async (t) => {
  const res = await fetch(`${node.url}/collections/books/points/search`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"vector": [0.1, ',
  });
  t.is(res.status, 400);
  const body = (await res.json()) as { status: { error: string } };
  t.true(body.status.error.startsWith('Format error in JSON body: '), body.status.error);
});

test('a body over service.max_request_size_mb answers 413 with the envelope', async (t) => {
  const big = JSON.stringify({ points: [{ id: 1, vector: [], payload: { blob: 'x'.repeat(1024 * 1024 + 10) } }] });
  const res = await fetch(`${node.url}/collections/books/points`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: big,
  });
  t.is(res.status, 413);
  const body = (await res.json()) as { status: { error: string } };
  t.regex(body.status.error, /^Payload too large: .*1 MB/);
  // The connection still serves the next request.
  t.is((await fetch(`${node.url}/healthz`)).status, 200);
});

test('CORS: a preflight is answered and the origin is reflected', async (t) => {
  const pre = await fetch(`${node.url}/collections/books/points`, {
    method: 'OPTIONS',
    headers: {
      Origin: 'http://dashboard.example',
      'Access-Control-Request-Method': 'PUT',
      'Access-Control-Request-Headers': 'api-key, content-type',
    },
  });
  t.true(pre.status === 200 || pre.status === 204, String(pre.status));
  t.is(pre.headers.get('access-control-allow-origin'), 'http://dashboard.example');
  t.regex(pre.headers.get('access-control-allow-methods') ?? '', /PUT/);
  t.regex(pre.headers.get('access-control-allow-headers') ?? '', /api-key/);

  const res = await fetch(`${node.url}/healthz`, { headers: { Origin: 'http://dashboard.example' } });
  t.is(res.headers.get('access-control-allow-origin'), 'http://dashboard.example');
});

test('every request gets one log line with method, path, status and duration', async (t) => {
  await fetch(`${node.url}/livez?probe=log-line`);
  // The answer can reach the client before the server's log line reaches us: wait for the line.
  const line = await waitFor('the request log line', () => node.logLines().find((l) => l.msg === 'request' && l.path === '/livez'));
  t.is(line?.method, 'GET');
  t.is(line?.status, 200);
  t.is(typeof line?.ms, 'number');
});

test('the start-up log holds the configuration with API keys redacted', async (t) => {
  const secret = 'do-not-log-me';
  const run = await startQuiver({ SERVICE__SERVICE__API_KEY: secret });
  try {
    const loaded = run.logLines().find((l) => l.msg === 'configuration loaded') as
      | { config: { service: { api_key: string } } }
      | undefined;
    t.is(loaded?.config.service.api_key, '***');
    t.false(JSON.stringify(run.logLines()).includes(secret));
  } finally {
    t.is(await run.stop(), 0);
  }
});

test('CLI: an unknown flag prints the usage and exits 2', async (t) => {
  const run = await runQuiver(['--bogus']);
  t.is(run.code, 2);
  t.regex(run.stderr, /unknown option --bogus/);
  t.regex(run.stderr, /Usage: quiver/);
});

test('CLI: a flag without its value prints the usage and exits 2', async (t) => {
  const run = await runQuiver(['--config-path']);
  t.is(run.code, 2);
  t.regex(run.stderr, /--config-path needs a value/);
  t.regex(run.stderr, /Usage: quiver/);
});

test('CLI: --help prints the usage and exits 0', async (t) => {
  const run = await runQuiver(['--help']);
  t.is(run.code, 0);
  t.regex(run.stdout, /--snapshot <path>:<collection>/);
});

test('CLI: --snapshot with a file that does not exist stops start-up with exit 1 and names it', async (t) => {
  const run = await runQuiver(['--snapshot', '/nonexistent/a.snapshot:b']);
  t.is(run.code, 1);
  t.regex(run.stderr, /--snapshot \/nonexistent\/a\.snapshot: no such file/);
  t.notRegex(run.stderr, /Usage/);
});

test('CLI: a peer URI that is not http(s)://host:port is a usage error, exit 2', async (t) => {
  const run = await runQuiver(['--uri', '10.0.0.1', '--bootstrap', 'ftp://10.0.0.2:6335']);
  t.is(run.code, 2);
  t.regex(run.stderr, /--uri expects a peer URI/);
  t.regex(run.stderr, /--bootstrap expects a peer URI/);
});

test('CLI: cluster flags without cluster.enabled stop start-up with exit 1 and say what to set', async (t) => {
  const run = await runQuiver(['--uri', 'http://127.0.0.1:6335']);
  t.is(run.code, 1);
  t.regex(run.stderr, /--uri and --bootstrap need cluster mode: set cluster\.enabled/);
});

test('CLI: invalid configuration lists the problem and exits 2', async (t) => {
  const run = await runQuiver([], { SERVICE__SERVICE__HTTP_PORT: 'not-a-port', SERVICE__LOG_LEVEL: 'LOUD' });
  t.is(run.code, 2);
  t.regex(run.stderr, /SERVICE__SERVICE__HTTP_PORT/);
  t.regex(run.stderr, /SERVICE__LOG_LEVEL/);
});

test('TLS without its certificate files: exit 1 with a message naming the missing file', async (t) => {
  const run = await runQuiver([], { SERVICE__SERVICE__ENABLE_TLS: 'true' });
  t.is(run.code, 1);
  t.regex(run.stderr, /tls\.cert file .*does not exist/);
});

test('SIGTERM lets a request in flight finish, refuses new connections, then exits 0', async (t) => {
  const run = await startQuiver();
  const created = await fetch(`${run.url}/collections/books`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ vectors: { size: 1, distance: 'Dot' } }),
  });
  t.is(created.status, 200);
  // A request whose body is still arriving when the signal comes. With Expect:
  // 100-continue the server says when it has the request (its headers read, the handler
  // waiting for the body): the signal is sent then, not after a guessed delay.
  const req = http.request(`${run.url}/collections/books/points?wait=true`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json', expect: '100-continue' },
  });
  const answer = new Promise<{ status: number; body: string }>((resolve, reject) => {
    req.on('response', (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
  });
  const serverHasIt = new Promise<void>((resolve, reject) => {
    req.once('continue', resolve);
    req.once('error', reject);
  });
  req.flushHeaders();
  await serverHasIt;
  req.write('{"points": [');
  const stopped = run.stop('SIGTERM');
  // The server logs this line and stops listening in one step: once it is there, new
  // connections are refused.
  await waitFor('the shutdown to begin', () => run.logLines().some((l) => l.msg === 'shutting down: no new connections, finishing requests in flight'));
  t.is(run.child.exitCode, null, 'the process waits for the request in flight');
  await t.throwsAsync(fetch(`${run.url}/healthz`), undefined, 'no new connections once shutting down');
  req.end('{"id": 1, "vector": [0.5]}]}');
  const { status, body } = await answer;
  t.is(status, 200, body);
  t.is((JSON.parse(body) as { result: { status: string } }).result.status, 'completed');
  t.is(await stopped, 0);
  t.truthy(run.logLines().find((l) => l.msg === 'shutdown complete'));
});
