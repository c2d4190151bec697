/**
 * `quiver drain`'s flags and its scale-in check (`--if-scaled-in`, the Helm chart's
 * preStop hook) against a fake Kubernetes API over HTTPS with a service account's token
 * and CA: a pod whose ordinal is not below the StatefulSet's desired replicas is scaled
 * in; a lower ordinal (a rolling restart) is not; a StatefulSet that is gone or scaled to
 * 0 is not; an API that refuses, or no service account, cannot tell (null: the hook
 * drains). The drain itself runs on real peers in test/cluster/drain.test.ts.
 */

import * as fs from 'node:fs';
import * as https from 'node:https';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';

import test from 'ava';

import { DrainError, DrainUsageError, drainPeer, parseDrainArgs, scaledIn } from '../../ts/api/cli/drain';
import { makePki } from '../support/pki';

test('flags: defaults, the key from the environment, refusals', (t) => {
  const d = parseDrainArgs([], {});
  t.deepEqual(d, { url: 'http://localhost:6333', peer: null, method: null, apiKey: null, timeoutS: 3600, ifScaledIn: false, remove: false, caCert: null, serverName: null, clientCert: null, clientKey: null, help: false });
  t.is(parseDrainArgs([], { SERVICE__SERVICE__API_KEY: 'k' }).apiKey, 'k');
  t.is(parseDrainArgs([], { QUIVER_API_KEY: 'q', SERVICE__SERVICE__API_KEY: 'k' }).apiKey, 'q');
  const a = parseDrainArgs(['--url=http://h:1/', '--peer', '0042', '--method', 'snapshot', '--api-key', 'x', '--timeout', '5', '--if-scaled-in', '--remove'], {});
  t.deepEqual(a, { url: 'http://h:1', peer: '42', method: 'snapshot', apiKey: 'x', timeoutS: 5, ifScaledIn: true, remove: true, caCert: null, serverName: null, clientCert: null, clientKey: null, help: false });
  t.throws(() => parseDrainArgs(['--remove=1'], {}), { instanceOf: DrainUsageError, message: /--remove takes no value/ });
  t.throws(() => parseDrainArgs(['--peer', 'p'], {}), { instanceOf: DrainUsageError, message: /--peer expects a peer id/ });
  t.throws(() => parseDrainArgs(['--method', 'resharding_stream_records'], {}), { instanceOf: DrainUsageError, message: /--method expects/ });
  t.throws(() => parseDrainArgs(['--timeout', '0'], {}), { instanceOf: DrainUsageError, message: /--timeout expects/ });
  t.throws(() => parseDrainArgs(['--url', 'ftp://x'], {}), { instanceOf: DrainUsageError, message: /--url expects/ });
  t.throws(() => parseDrainArgs(['--url'], {}), { instanceOf: DrainUsageError, message: /--url needs a value/ });
  t.throws(() => parseDrainArgs(['--bogus'], {}), { instanceOf: DrainUsageError, message: /unknown option --bogus/ });
  t.throws(() => parseDrainArgs(['--if-scaled-in=yes'], {}), { instanceOf: DrainUsageError, message: /takes no value/ });
});

test.serial('scale-in check against the Kubernetes API', async (t) => {
  const pki = await makePki();
  const sa = path.join(pki.dir, 'sa');
  fs.mkdirSync(sa);
  fs.writeFileSync(path.join(sa, 'token'), 'tok\n');
  fs.copyFileSync(pki.file('ca.pem'), path.join(sa, 'ca.crt'));
  let answer: { status: number; body: unknown } = { status: 200, body: { spec: { replicas: 2 } } };
  const seen: string[] = [];
  const server = https.createServer({ cert: pki.read('server-a.pem'), key: pki.read('server-a.key') }, (req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers.authorization}`);
    res.writeHead(answer.status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(answer.body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    server.close();
    fs.rmSync(pki.dir, { recursive: true, force: true });
  });
  const env = (host: string) => ({ HOSTNAME: host, STATEFULSET_NAME: 'rel-quiver', POD_NAMESPACE: 'ns', KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: String((server.address() as AddressInfo).port) });

  t.deepEqual(await scaledIn(env('rel-quiver-2'), sa), { scaledIn: true, reason: 'pod ordinal 2, StatefulSet rel-quiver wants 2 replicas' });
  t.is(seen[0], 'GET /apis/apps/v1/namespaces/ns/statefulsets/rel-quiver Bearer tok');
  t.is((await scaledIn(env('rel-quiver-1'), sa))?.scaledIn, false, 'a pod that stays (rolling restart)');
  answer = { status: 200, body: { spec: { replicas: 0 } } };
  t.is((await scaledIn(env('rel-quiver-1'), sa))?.scaledIn, false, 'scaled to 0: nowhere to drain to');
  answer = { status: 404, body: {} };
  t.is((await scaledIn(env('rel-quiver-2'), sa))?.scaledIn, false, 'StatefulSet gone (uninstall)');
  answer = { status: 403, body: {} };
  t.is(await scaledIn(env('rel-quiver-2'), sa), null, 'API refuses: cannot tell');
  t.is(await scaledIn({ ...env('rel-quiver-2'), STATEFULSET_NAME: '' }, sa), null, 'no StatefulSet name');
  t.is(await scaledIn(env('rel-quiver-2'), path.join(pki.dir, 'missing')), null, 'no service account');
  t.is(await scaledIn(env('quiver'), sa), null, 'not a StatefulSet pod name');
});

test.serial('HTTPS with the api key (the preStop hook of the chart with tls.enabled): the CA and the pod name checked while talking to 127.0.0.1; drain with removal', async (t) => {
  const pki = await makePki();
  const seen: string[] = [];
  const server = https.createServer({ cert: pki.read('server-dns.pem'), key: pki.read('server-dns.key') }, (req, res) => {
    seen.push(`${req.method} ${req.url} ${req.headers['api-key']}`);
    const reply = (status: number, result: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(status === 200 ? { result, status: 'ok', time: 0 } : { status: { error: 'Unauthorized' } }));
    };
    if (req.headers['api-key'] !== 'secret') return reply(401, null);
    if (req.method === 'GET' && req.url === '/cluster') return reply(200, { status: 'enabled', peer_id: 7 });
    if (req.method === 'POST' && req.url === '/cluster/peer/7/drain?remove=true') return reply(200, { state: 'done', remaining: [], transfers: [], shards_moved: 2, remove: true, removed: true });
    reply(404, null);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => {
    server.close();
    fs.rmSync(pki.dir, { recursive: true, force: true });
  });
  const url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const name = 'quiver-0.quiver-headless.ns.svc.cluster.local';
  const args = (extra: string[], env: NodeJS.ProcessEnv = { SERVICE__SERVICE__API_KEY: 'secret' }) => parseDrainArgs(['--url', url, '--remove', ...extra], env);
  const lines: string[] = [];
  await drainPeer(args(['--ca-cert', pki.file('ca.pem'), '--tls-server-name', name]), (l) => lines.push(l));
  t.regex(lines.at(-1)!, /peer 7 drained: it holds no replica \(2 moved, [0-9.]+ s\); removed from the cluster/);
  t.deepEqual(seen, ['GET /cluster secret', 'POST /cluster/peer/7/drain?remove=true secret']);
  // The certificate is for the pod's name, not 127.0.0.1; another CA does not sign it; no CA given: the system's do not.
  await t.throwsAsync(drainPeer(args(['--ca-cert', pki.file('ca.pem')]), () => undefined), { instanceOf: DrainError, message: /GET .*\/cluster: .*(IP: 127\.0\.0\.1 is not in the cert's list|does not match)/ });
  await t.throwsAsync(drainPeer(args(['--ca-cert', pki.file('ca2.pem'), '--tls-server-name', name]), () => undefined), { instanceOf: DrainError, message: /unable to verify|self.signed|certificate/ });
  await t.throwsAsync(drainPeer(args(['--tls-server-name', name]), () => undefined), { instanceOf: DrainError, message: /unable to verify|self.signed|certificate/ });
  await t.throwsAsync(drainPeer(args(['--ca-cert', pki.file('missing.pem'), '--tls-server-name', name]), () => undefined), { instanceOf: DrainError, message: /cannot read .*missing\.pem/ });
  // Without the key: the node's 401.
  await t.throwsAsync(drainPeer(args(['--ca-cert', pki.file('ca.pem'), '--tls-server-name', name], {}), () => undefined), { instanceOf: DrainError, message: /GET \/cluster: 401/ });
  t.throws(() => parseDrainArgs(['--ca-cert', 'x'], {}), { instanceOf: DrainUsageError, message: /need an https:\/\/ --url/ });
  t.throws(() => parseDrainArgs(['--url', url, '--client-cert', 'x'], {}), { instanceOf: DrainUsageError, message: /go together/ });
});
