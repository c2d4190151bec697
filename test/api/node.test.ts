/** startNode in process: the port it reports, its shutdown, and what it refuses to start with. */

import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';

import test from 'ava';
import pino from 'pino';

import { loadConfig } from '../../ts/config';
import { StartupError, startNode } from '../../ts/node';
import { freePort } from './helpers';

const silent = pino({ level: 'silent' });

// Every node gets its own storage: nodes of this file start concurrently, and one node's
// start-up removes the temp files it finds in its storage directory (another's peer_id write).
const dirs: string[] = [];
test.after.always(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true });
});

function config(overrides: Record<string, string> = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-node-test-'));
  dirs.push(dir);
  return loadConfig({
    env: {
      SERVICE__SERVICE__HOST: '127.0.0.1',
      SERVICE__SERVICE__GRPC_PORT: 'null',
      SERVICE__STORAGE__STORAGE_PATH: path.join(dir, 'storage'),
      SERVICE__STORAGE__SNAPSHOTS_PATH: path.join(dir, 'snapshots'),
      ...overrides,
    },
  });
}

test('port 0 binds a free port and reports it; close() stops it and is idempotent', async (t) => {
  const cfg = config();
  cfg.service.http_port = 0;
  const node = await startNode(cfg, silent, { info: { commit: null } });
  t.true(node.port > 0);
  const res = await fetch(`http://127.0.0.1:${node.port}/`);
  t.is(((await res.json()) as { commit: unknown }).commit, null);
  await Promise.all([node.close(), node.close()]);
  await t.throwsAsync(fetch(`http://127.0.0.1:${node.port}/healthz`));
});

test('enable_tls with a certificate file that does not exist stops start-up, naming the file', async (t) => {
  const cfg = config();
  cfg.service.http_port = 0;
  cfg.service.enable_tls = true;
  cfg.tls.cert = '/nonexistent/quiver-cert.pem';
  await t.throwsAsync(startNode(cfg, silent), { instanceOf: StartupError, message: /\/nonexistent\/quiver-cert\.pem/ });
});

test('a port already in use fails start-up', async (t) => {
  const cfg = config();
  cfg.service.http_port = 0;
  const first = await startNode(cfg, silent);
  try {
    const second = config();
    second.service.http_port = first.port;
    await t.throwsAsync(startNode(second, silent), { message: /EADDRINUSE/ });
  } finally {
    await first.close();
  }
});

test('service.metrics_prefix prefixes every metric name', async (t) => {
  const cfg = config({ SERVICE__SERVICE__METRICS_PREFIX: 'quiver_' });
  cfg.service.http_port = 0;
  const node = await startNode(cfg, silent);
  try {
    await fetch(`http://127.0.0.1:${node.port}/healthz`);
    const text = await (await fetch(`http://127.0.0.1:${node.port}/metrics`)).text();
    t.regex(text, /^quiver_rest_responses_total\{method="GET",endpoint="\/healthz",status="200"\} 1$/m);
    t.regex(text, /^quiver_process_cpu_user_seconds_total /m);
    t.notRegex(text, /^rest_responses_total/m);
  } finally {
    await node.close();
  }
});

test('a metrics_prefix Prometheus cannot use is refused at start', async (t) => {
  const cfg = config({ SERVICE__SERVICE__METRICS_PREFIX: 'my-app.' });
  cfg.service.http_port = 0;
  await t.throwsAsync(startNode(cfg, silent), { instanceOf: StartupError, message: /metrics_prefix/ });
});

test('the gRPC API listens on service.grpc_port beside REST, and close() stops both', async (t) => {
  const port = await freePort();
  const cfg = config({ SERVICE__SERVICE__GRPC_PORT: String(port) });
  cfg.service.http_port = 0;
  const node = await startNode(cfg, silent);
  t.is(node.grpcPort, port);
  const reachable = () =>
    new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
  t.true(await reachable());
  await node.close();
  t.false(await reachable());
});

test('a gRPC port already in use fails start-up, naming service.grpc_port, and leaves no REST port open', async (t) => {
  const blocker = net.createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const taken = (blocker.address() as net.AddressInfo).port;
  try {
    const cfg = config({ SERVICE__SERVICE__GRPC_PORT: String(taken) });
    cfg.service.http_port = await freePort();
    const err = await t.throwsAsync(startNode(cfg, silent), { instanceOf: StartupError });
    t.regex(err!.message, /gRPC API cannot listen on 127\.0\.0\.1:\d+ \(service\.grpc_port\)/);
    t.regex(err!.message, /EADDRINUSE|address already in use/i);
    await t.throwsAsync(fetch(`http://127.0.0.1:${cfg.service.http_port}/healthz`));
  } finally {
    blocker.close();
  }
});

test('grpc_port null turns gRPC off', async (t) => {
  const cfg = config();
  cfg.service.http_port = 0;
  const node = await startNode(cfg, silent);
  t.is(node.grpcPort, null);
  await node.close();
});
