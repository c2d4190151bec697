/**
 * Review of the API layers' reports to bindings/demand.ts (commit 9d2b8ca): each request
 * reports its start with its connection (`requestStarted`) and its end
 * (`requestFinished`), and the search fast path leaves the event loop while clients are
 * concurrent: requests overlap, or requests from two connections follow each other
 * within CONCURRENT_WINDOW_MS.
 *
 * The reports are counted by wrapping the module's two functions (the API layers call
 * them through bindings/index.ts, whose exports read the module's at each call), so
 * nothing here depends on timing:
 *  - every request started is finished, once: gRPC calls answered UNIMPLEMENTED,
 *    undecodable, past their deadline, cancelled by the client; REST requests down the
 *    direct lane and through Koa, including a client that leaves mid-body, a body that
 *    does not parse and an unknown route;
 *  - (a bug this review found) the gRPC server reported the connection's remote
 *    address, not the connection: every gRPC connection from one host (a client's
 *    channel pool, a load generator, clients behind one proxy) counted as one, so
 *    requests from two of them never looked concurrent and gRPC clients kept the inline
 *    path. GrpcRequest now names its connection.
 */

import * as http from 'node:http';
import * as http2 from 'node:http2';
import * as net from 'node:net';

import * as grpc from '@grpc/grpc-js';
import test from 'ava';
import pino from 'pino';
import { Registry } from 'prom-client';

import * as demand from '../../bindings/demand';
import { GrpcApiServer } from '../../ts/api/grpc/server';
import { p2pPackage } from '../../ts/api/p2p/grpc';
import { addPointsService, type PointsBackend } from '../../ts/api/p2p/points';
import type { GrpcService } from '../../ts/api/grpc/method';
import { Authenticator } from '../../ts/auth/authenticate';
import { loadConfig } from '../../ts/config';
import { waitFor } from '../support/wait';
import { freePort } from './helpers';
import { LaneHarness } from './lane-pair';

const silent = pino({ level: 'silent' });

/** What the API layers reported: the connection of each start, and the number of finishes. */
const reports = { connections: [] as unknown[], finished: 0 };
{
  const m = demand as unknown as { requestStarted: typeof demand.requestStarted; requestFinished: typeof demand.requestFinished };
  const started = m.requestStarted;
  const finished = m.requestFinished;
  m.requestStarted = (connection, now) => {
    reports.connections.push(connection);
    started(connection, now);
  };
  m.requestFinished = () => {
    reports.finished++;
    finished();
  };
}

/** Resolves once every request reported started was reported finished; fails if more finished than started. */
async function balanced(what: string): Promise<void> {
  await waitFor(`${what}: every request started is finished`, () => {
    if (reports.finished > reports.connections.length) throw new Error(`${reports.finished} finished, ${reports.connections.length} started`);
    return reports.finished === reports.connections.length;
  });
}

/** A gRPC call on `session`: the grpc-status it was answered with (null: none, the stream was reset). */
function h2call(session: http2.ClientHttp2Session, path: string, message: Buffer, headers: http2.OutgoingHttpHeaders = {}, cancel?: (req: http2.ClientHttp2Stream) => void): Promise<string | null> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers', ...headers });
    let status: string | null = null;
    req.on('response', (h) => (status = (h['grpc-status'] as string | undefined) ?? status));
    req.on('trailers', (h) => (status = (h['grpc-status'] as string | undefined) ?? status));
    req.on('data', () => undefined);
    req.on('end', () => resolve(status));
    req.on('close', () => resolve(status));
    req.on('error', reject);
    const prefix = Buffer.from([0, 0, 0, 0, 0]);
    prefix.writeUInt32BE(message.length, 1);
    req.end(Buffer.concat([prefix, message]));
    cancel?.(req);
  });
}

test.serial('gRPC: two connections from one host are reported as two connections; calls on one connection as one', async (t) => {
  const port = await freePort();
  const config = loadConfig({ env: { SERVICE__SERVICE__HOST: '127.0.0.1', SERVICE__SERVICE__GRPC_PORT: String(port) } });
  const authn = new Authenticator({ apiKey: null, readOnlyKey: null, jwtRbac: false }, async () => 'no-collection');
  const server = await GrpcApiServer.start(config, { logger: silent, authn, audit: null, registry: new Registry(), services: {} }, null);
  const a = http2.connect(`http://127.0.0.1:${server.port}`);
  const b = http2.connect(`http://127.0.0.1:${server.port}`);
  try {
    const from = reports.connections.length;
    // A path the contract lacks: answered UNIMPLEMENTED by the dispatcher, after its start is reported.
    t.is(await h2call(a, '/qdrant.Nothing/Here', Buffer.alloc(0)), '12');
    t.is(await h2call(b, '/qdrant.Nothing/Here', Buffer.alloc(0)), '12');
    t.is(await h2call(a, '/qdrant.Nothing/Here', Buffer.alloc(0)), '12');
    const [ca, cb, ca2] = reports.connections.slice(from);
    t.is(reports.connections.length - from, 3);
    t.not(ca, cb, 'two connections from 127.0.0.1 must not be reported as the same connection');
    t.is(ca, ca2, 'two calls on one connection are reported with the same connection');
    await balanced('gRPC UNIMPLEMENTED');
  } finally {
    a.close();
    b.close();
    await server.close(1000);
  }
});

test.serial('gRPC: every call started is finished once: unimplemented, undecodable, past its deadline, cancelled', async (t) => {
  let release: (() => void) | null = null;
  let entered = 0;
  const services: Partial<Record<'qdrant.Collections', GrpcService>> = {
    'qdrant.Collections': {
      // Waits until the test lets it go on (the deadline and cancel cases answer before it does).
      List: {
        access: 'GET /collections',
        handle: async () => {
          entered++;
          await new Promise<void>((r) => (release = r));
          return { collections: [], time: 0 };
        },
      },
    },
  };
  const port = await freePort();
  const config = loadConfig({ env: { SERVICE__SERVICE__HOST: '127.0.0.1', SERVICE__SERVICE__GRPC_PORT: String(port) } });
  const authn = new Authenticator({ apiKey: null, readOnlyKey: null, jwtRbac: false }, async () => 'no-collection');
  const server = await GrpcApiServer.start(config, { logger: silent, authn, audit: null, registry: new Registry(), services }, null);
  const session = http2.connect(`http://127.0.0.1:${server.port}`);
  try {
    const from = reports.connections.length;
    // In the contract, not served by this server: UNIMPLEMENTED.
    t.is(await h2call(session, '/qdrant.Collections/Get', Buffer.alloc(0)), '12');
    // Bytes that do not decode: INVALID_ARGUMENT.
    t.is(await h2call(session, '/qdrant.Collections/List', Buffer.from([0xff, 0xff, 0xff])), '3');
    // Past its deadline while the handler waits: DEADLINE_EXCEEDED now; finished once the handler ends.
    t.is(await h2call(session, '/qdrant.Collections/List', Buffer.alloc(0), { 'grpc-timeout': '50m' }), '4');
    t.is(reports.connections.length - from, 3);
    await waitFor('the handler holds the call', () => entered === 1);
    t.is(reports.finished, reports.connections.length - 1, 'the call past its deadline is still running');
    release!();
    await balanced('gRPC deadline');
    // Cancelled by the client (RST_STREAM) while the handler waits.
    const cancelled = h2call(session, '/qdrant.Collections/List', Buffer.alloc(0), {}, (req) => {
      void waitFor('the handler holds the cancelled call', () => entered === 2).then(() => req.close(http2.constants.NGHTTP2_CANCEL));
    });
    t.is(await cancelled, null);
    release!();
    await balanced('gRPC cancel');
  } finally {
    session.close();
    await server.close(1000);
  }
});

test.serial('REST: every request started is finished once, down the direct lane and through Koa, a client leaving mid-body included', async (t) => {
  const h = await LaneHarness.open('quiver-demand-');
  const p = await h.pair(h.config());
  try {
    for (const port of [p.portA, p.portB]) {
      const from = reports.connections.length;
      const send = (method: string, path: string, body: string | null) =>
        new Promise<number>((resolve, reject) => {
          const req = http.request({ host: '127.0.0.1', port, method, path, headers: body === null ? {} : { 'content-type': 'application/json' } }, (res) => {
            res.resume();
            res.on('end', () => resolve(res.statusCode ?? 0));
          });
          req.on('error', reject);
          req.end(body ?? undefined);
        });
      t.is(await send('POST', '/collections/none/points/query', '{"query":[0.5,0.25]}'), 404);
      t.is(await send('POST', '/collections/none/points/query', '{"query":[0.5,'), 400);
      t.is(await send('GET', '/no/such/route', null), 404);
      await balanced(`REST on ${port === p.portA ? 'the lane' : 'Koa'}`);
      // A client that sends half its body and leaves.
      const sock = net.connect(port, '127.0.0.1');
      await new Promise<void>((r) => sock.once('connect', () => r()));
      sock.write('POST /collections/none/points/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"query":[0.5');
      const n = reports.connections.length;
      await waitFor('the half-sent request started', () => reports.connections.length > n);
      sock.destroy();
      await balanced(`REST client leaving mid-body on ${port === p.portA ? 'the lane' : 'Koa'}`);
      t.true(reports.connections.length - from >= 4);
    }
  } finally {
    await h.close();
  }
});

test.serial('p2p: reads are reported by calling host, finished once (answered, or given up by the caller); one caller on two connections is not concurrent, overlapping reads are', async (t) => {
  // A peer that knows no collection: every read waits for `settled` (the backend's
  // consensus catch-up), then is refused (the shard is not here).
  let gate: Promise<void> = Promise.resolve();
  let open: () => void = () => undefined;
  const hold = () => (gate = new Promise<void>((r) => (open = r)));
  // Each read looks the collection up twice, the second time after `settled`, then is answered at once.
  let lookups = 0;
  const backend = { toc: { peek: () => void lookups++ }, peer: '1', settled: () => gate, status: () => ({}) } as unknown as PointsBackend;
  const server = new grpc.Server();
  addPointsService(server, backend, silent);
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  type ReadClient = grpc.Client & { Read(req: object, meta: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null) => void): void };
  const Points = p2pPackage().Points as unknown as new (target: string, creds: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => ReadClient;
  // Each client on a connection of its own (grpc-js otherwise shares one per target), as a peer's pool of clients is.
  const client = () => new Points(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.use_local_subchannel_pool': 1 });
  const a = client();
  const b = client();
  const read = (c: ReadClient, opts: grpc.CallOptions = {}) =>
    new Promise<number>((resolve) => c.Read({ target: { collection: 'none', uuid: 'u', shard: 0 }, kind: 'search', request: Buffer.from('{}') }, new grpc.Metadata(), opts, (err) => resolve(err?.code ?? 0)));
  try {
    // Connect both, then let any earlier sign of concurrency lapse.
    await Promise.all([read(a), read(b)]);
    await balanced('p2p warm-up reads');
    await waitFor('no sign of concurrent clients left', () => !demand.concurrent());
    const from = reports.connections.length;
    // One caller, reads one after another, alternating connections (a peer's client pool does this).
    for (const c of [a, b, a, b]) t.is(await read(c), grpc.status.UNAVAILABLE);
    t.deepEqual(reports.connections.slice(from), ['p2p 127.0.0.1', 'p2p 127.0.0.1', 'p2p 127.0.0.1', 'p2p 127.0.0.1'], 'reported by calling host');
    t.false(demand.concurrent(), 'one caller on two connections is not concurrent clients');
    await balanced('p2p sequential reads');
    // Two reads in flight at once: concurrent.
    hold();
    const both = Promise.all([read(a), read(b)]);
    await waitFor('both reads started', () => reports.connections.length === from + 6);
    t.true(demand.concurrent(), 'overlapping reads are concurrent');
    open();
    t.deepEqual(await both, [grpc.status.UNAVAILABLE, grpc.status.UNAVAILABLE]);
    await balanced('p2p overlapping reads');
    // A read its caller gives up on (deadline) while it waits is finished then, once; its late end does not finish it again.
    hold();
    const before = lookups;
    t.is(await read(a, { deadline: Date.now() + 100 }), grpc.status.DEADLINE_EXCEEDED);
    await balanced('p2p read past its deadline');
    open();
    await waitFor('the read past its deadline reached its answer', () => lookups === before + 2);
    await balanced('p2p read past its deadline, after its handler ended');
  } finally {
    open();
    a.close();
    b.close();
    server.forceShutdown();
  }
});
