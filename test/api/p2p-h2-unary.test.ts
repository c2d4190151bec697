/**
 * The client peers call each other's points service with (ts/api/p2p/h2-unary.ts on
 * Quiver's HTTP/2 client connection, ts/api/h2/client.ts), against a grpc-js server (what
 * peers serve the service with), on a test service whose messages are raw bytes:
 *  - messages larger than either side's flow-control window travel both ways intact;
 *  - a status other than OK comes back with its (percent-encoded) message and trailers;
 *  - a deadline the server does not meet fails the call as DEADLINE_EXCEEDED, and the
 *    server sees the call cancelled; cancel() and cancelAll() fail calls at once;
 *  - a peer that is down fails calls at once (not at their deadline), with the
 *    connection's error, and is reached again once it is back on the same port;
 *  - a server's limit on concurrent streams queues the calls beyond it;
 *  - a server shutting down gracefully (GOAWAY) finishes the calls it took, and the
 *    calls after it go to a new connection;
 *  - a small call opened behind large uploads on the same connection is not held up
 *    until they are sent (flow-control windows are shared in turn);
 *  - a server that answers before the whole request is sent (over its size limit) gets
 *    our half of the stream reset, and the connection goes on serving.
 */

import * as grpc from '@grpc/grpc-js';
import test from 'ava';

import { H2UnaryPool, type CallFailure, type UnaryMethod } from '../../ts/api/p2p/h2-unary';
import { waitFor } from '../support/wait';
import { freePort } from './helpers';

const same = (b: Buffer) => b;
const method = (name: string): UnaryMethod & grpc.MethodDefinition<Buffer, Buffer> => ({
  path: `/quiver.test.Bytes/${name}`,
  requestStream: false,
  responseStream: false,
  requestSerialize: same,
  requestDeserialize: same,
  responseSerialize: same,
  responseDeserialize: same,
}) as never;
const ECHO = method('Echo');
const FAIL = method('Fail');
const HANG = method('Hang');
const SLOW = method('Slow');
const SIZE = method('Size');

interface Served {
  server: grpc.Server;
  /** The requests of Hang calls the handler got, and of those the server saw cancelled. */
  arrived: Set<string>;
  cancelled: Set<string>;
  /** Slow calls held by the server: each answers when called. */
  slow: Array<() => void>;
}

async function serve(port: number, options: grpc.ServerOptions = {}): Promise<Served> {
  const s: Served = { server: new grpc.Server({ 'grpc.max_receive_message_length': 64 * 1024 * 1024, ...options }), arrived: new Set(), cancelled: new Set(), slow: [] };
  s.server.addService({ Echo: ECHO, Fail: FAIL, Hang: HANG, Slow: SLOW, Size: SIZE } as grpc.ServiceDefinition, {
    Size: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, Buffer.from(String(call.request.length))),
    // Answered when the test releases it.
    Slow: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => s.slow.push(() => cb(null, call.request)),
    Echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => cb(null, Buffer.concat([call.request, call.request])),
    Fail: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      const metadata = new grpc.Metadata();
      metadata.set('quiver-error-kind', 'not_found');
      cb({ code: grpc.status.NOT_FOUND, details: 'no point 7 — not here', metadata });
    },
    Hang: (call: grpc.ServerUnaryCall<Buffer, Buffer>) => {
      const tag = call.request.toString();
      s.arrived.add(tag);
      call.once('cancelled', () => s.cancelled.add(tag));
    },
  });
  await new Promise<void>((resolve, reject) => s.server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())));
  return s;
}

function call(pool: H2UnaryPool, m: UnaryMethod, req: Buffer, timeoutMs = 10_000): Promise<{ failure: CallFailure | null; answer?: Buffer; ms: number }> {
  const t0 = performance.now();
  return new Promise((resolve) => pool.call(m, req, timeoutMs, (failure, answer) => resolve({ failure, answer: answer as Buffer | undefined, ms: performance.now() - t0 })));
}

test('messages larger than the flow-control windows travel both ways; several calls share the pool', async (t) => {
  const port = await freePort();
  const s = await serve(port);
  const pool = new H2UnaryPool('127.0.0.1', port, null, 2);
  t.teardown(() => {
    pool.close();
    s.server.forceShutdown();
  });
  const big = Buffer.alloc(3 * 1024 * 1024 + 17);
  for (let i = 0; i < big.length; i++) big[i] = (i * 31 + 7) & 0xff;
  const [a, b, c] = await Promise.all([call(pool, ECHO, big), call(pool, ECHO, Buffer.from('x')), call(pool, ECHO, Buffer.alloc(0))]);
  t.is(a.failure, null);
  t.true(a.answer!.equals(Buffer.concat([big, big])));
  t.is(b.answer!.toString(), 'xx');
  t.is(c.answer!.length, 0);
});

test('a failed call brings back its status, its decoded message and its trailers', async (t) => {
  const port = await freePort();
  const s = await serve(port);
  const pool = new H2UnaryPool('127.0.0.1', port, null, 1);
  t.teardown(() => {
    pool.close();
    s.server.forceShutdown();
  });
  const r = await call(pool, FAIL, Buffer.from('?'));
  t.is(r.failure?.code, grpc.status.NOT_FOUND);
  t.is(r.failure?.details, 'no point 7 — not here');
  t.is(r.failure?.trailers?.get('quiver-error-kind'), 'not_found');
  t.is(r.answer, undefined);
});

test('deadline, cancel and cancelAll fail calls with their codes; the server sees them cancelled', async (t) => {
  const port = await freePort();
  const s = await serve(port);
  const pool = new H2UnaryPool('127.0.0.1', port, null, 2);
  t.teardown(() => {
    pool.close();
    s.server.forceShutdown();
  });
  const late = await call(pool, HANG, Buffer.from('a'), 300);
  t.is(late.failure?.code, grpc.status.DEADLINE_EXCEEDED);

  let cancelled: CallFailure | null = null;
  const handle = pool.call(HANG, Buffer.from('b'), 60_000, (f) => (cancelled = f));
  handle.cancel();
  t.is((cancelled as CallFailure | null)?.code, grpc.status.CANCELLED, 'cancel() settles the call at once');

  const pending = [call(pool, HANG, Buffer.from('c'), 60_000), call(pool, HANG, Buffer.from('d'), 60_000)];
  await waitFor('the server holds both calls', () => s.arrived.has('c') && s.arrived.has('d'));
  t.is(pool.cancelAll(), 2);
  const results = await Promise.all(pending);
  for (const r of results) t.is(r.failure?.code, grpc.status.CANCELLED);
  // (b was cancelled as it was sent: whether its handler ran at all is the server's business.)
  await waitFor('the server saw the calls cancelled', () => ['a', 'c', 'd'].every((x) => s.cancelled.has(x)), 10_000);
  t.is(pool.cancelAll(), 0, 'nothing left in flight');
});

test('a peer that is down fails calls at once with the connection error, and is reached again on the same port', async (t) => {
  const port = await freePort();
  const pool = new H2UnaryPool('127.0.0.1', port, null, 2);
  t.teardown(() => pool.close());
  const down = await call(pool, ECHO, Buffer.from('z'), 30_000);
  t.is(down.failure?.code, grpc.status.UNAVAILABLE);
  t.regex(down.failure!.details, /ECONNREFUSED/);
  t.true(down.ms < 15_000, `failed after ${down.ms} ms, not at its 30 s deadline`);

  let s = await serve(port);
  await waitFor('the restarted peer answers', async () => (await call(pool, ECHO, Buffer.from('u'))).failure === null, 10_000);
  const up = await call(pool, ECHO, Buffer.from('up'));
  t.is(up.answer?.toString(), 'upup');

  s.server.forceShutdown();
  await waitFor('calls fail once the peer is gone', async () => (await call(pool, ECHO, Buffer.from('g'), 30_000)).failure?.code === grpc.status.UNAVAILABLE, 10_000);
  s = await serve(port);
  t.teardown(() => s.server.forceShutdown());
  await waitFor('reached again', async () => (await call(pool, ECHO, Buffer.from('v'))).failure === null, 10_000);
});

test('calls beyond the server\'s limit on concurrent streams wait for a stream, and all are answered', async (t) => {
  const port = await freePort();
  const s = await serve(port, { 'grpc.max_concurrent_streams': 2 });
  const pool = new H2UnaryPool('127.0.0.1', port, null, 1);
  t.teardown(() => {
    pool.close();
    s.server.forceShutdown();
  });
  t.is((await call(pool, ECHO, Buffer.from('w'))).failure, null, 'connected, the server\'s SETTINGS known');
  const calls = Array.from({ length: 6 }, (_, i) => call(pool, SLOW, Buffer.from(`s${i}`)));
  await waitFor('the server holds two calls', () => s.slow.length === 2);
  // Release the held calls one by one: each frees a stream for a waiting call.
  let released = 0;
  await waitFor('every call reached the server', () => {
    while (s.slow.length > 0) {
      s.slow.shift()!();
      released++;
    }
    return released === 6;
  });
  const answers = await Promise.all(calls);
  t.deepEqual(answers.map((a) => a.answer?.toString()), ['s0', 's1', 's2', 's3', 's4', 's5']);
});

test('a server shutting down gracefully finishes the calls it took; later calls reach its successor on a new connection', async (t) => {
  const port = await freePort();
  const s = await serve(port);
  const pool = new H2UnaryPool('127.0.0.1', port, null, 1);
  t.teardown(() => pool.close());
  const held = call(pool, SLOW, Buffer.from('held'));
  await waitFor('the server holds the call', () => s.slow.length === 1);
  const shutdown = new Promise<void>((resolve) => s.server.tryShutdown(() => resolve()));
  // The GOAWAY reaches the client: a new call fails as unavailable (not sent) or, once the successor is up, succeeds.
  await waitFor('new calls are no longer sent on the old connection', async () => (await call(pool, ECHO, Buffer.from('n'), 2000)).failure?.code === grpc.status.UNAVAILABLE);
  s.slow.shift()!();
  const r = await held;
  t.is(r.failure, null);
  t.is(r.answer?.toString(), 'held');
  await shutdown;
  const next = await serve(port);
  t.teardown(() => next.server.forceShutdown());
  await waitFor('the successor answers', async () => (await call(pool, ECHO, Buffer.from('q'))).answer?.toString() === 'qq');
});

test('a small call behind two large uploads on one connection is answered before either upload is', async (t) => {
  const port = await freePort();
  const s = await serve(port);
  const pool = new H2UnaryPool('127.0.0.1', port, null, 1);
  t.teardown(() => {
    pool.close();
    s.server.forceShutdown();
  });
  t.is((await call(pool, ECHO, Buffer.from('w'))).failure, null);
  const order: string[] = [];
  const sized = (name: string, bytes: number) => call(pool, SIZE, Buffer.alloc(bytes, 7)).then((r) => {
    order.push(name);
    return r;
  });
  const [a, b, small] = await Promise.all([sized('big a', 24 * 1024 * 1024), sized('big b', 24 * 1024 * 1024), sized('small', 10)]);
  t.is(a.answer?.toString(), String(24 * 1024 * 1024));
  t.is(b.answer?.toString(), String(24 * 1024 * 1024));
  t.is(small.answer?.toString(), '10');
  t.is(order[0], 'small', `answered in the order ${order.join(', ')}`);
});

test('a server that answers before the whole request is sent: the stream is reset, the connection goes on', async (t) => {
  const port = await freePort();
  const s = await serve(port, { 'grpc.max_receive_message_length': 1024 * 1024, 'grpc.max_concurrent_streams': 1 });
  const pool = new H2UnaryPool('127.0.0.1', port, null, 1);
  t.teardown(() => {
    pool.close();
    s.server.forceShutdown();
  });
  for (let i = 0; i < 3; i++) {
    const big = await call(pool, ECHO, Buffer.alloc(8 * 1024 * 1024, 1));
    t.is(big.failure?.code, grpc.status.RESOURCE_EXHAUSTED, big.failure?.details);
    const small = await call(pool, ECHO, Buffer.from('k'));
    t.is(small.failure, null, `after the early answer: ${small.failure?.details}`);
    t.is(small.answer?.toString(), 'kk');
  }
});
