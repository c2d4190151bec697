/**
 * The call wrapper of the gRPC server (ts/api/grpc/server.ts), in process over a
 * GrpcApiServer with test methods: what a handler gets in its GrpcCallContext (the
 * caller's access, the deadline as timeoutMs, a signal aborted on the client's cancel
 * and at its deadline), RPCs absent from a service answering UNIMPLEMENTED naming them,
 * a method naming an access key the policy lacks refused at start, errors through the
 * status table, a request whose bytes cannot be decoded answered INVALID_ARGUMENT (not
 * grpc-js's INTERNAL) once the caller is authenticated, counted and audited, and close()
 * letting a call in flight finish.
 */

import test from 'ava';
import * as grpc from '@grpc/grpc-js';
import pino from 'pino';
import { Registry } from 'prom-client';

import type { AuditEvent, AuditLog } from '../../ts/auth/audit';
import { Authenticator } from '../../ts/auth/authenticate';
import { GrpcApiServer } from '../../ts/api/grpc/server';
import type { GrpcCallContext, GrpcService } from '../../ts/api/grpc/method';
import { loadConfig } from '../../ts/config';
import { NotFoundError } from '../../ts/common/errors';
import { freePort } from '../api/helpers';
import { waitFor } from '../support/wait';
import { codeName, QdrantGrpc } from './client';

const silent = pino({ level: 'silent' });

async function serve(services: Partial<Record<'qdrant.Collections' | 'qdrant.Qdrant', GrpcService>>, env: Record<string, string> = {}, audit: AuditLog | null = null) {
  const port = await freePort();
  const config = loadConfig({ env: { SERVICE__SERVICE__HOST: '127.0.0.1', SERVICE__SERVICE__GRPC_PORT: String(port), ...env } });
  const authn = new Authenticator({ apiKey: config.service.api_key, readOnlyKey: config.service.read_only_api_key, jwtRbac: config.service.jwt_rbac }, async () => 'no-collection');
  const registry = new Registry();
  const server = await GrpcApiServer.start(config, { logger: silent, authn, audit, registry, services }, null);
  const client = new QdrantGrpc(`127.0.0.1:${server.port}`);
  return { server, client, registry };
}

test('a handler gets the caller access, the deadline as timeoutMs, and a signal aborted at the deadline', async (t) => {
  let seen: GrpcCallContext | null = null;
  let abortedAfterMs = -1;
  const { server, client } = await serve({
    'qdrant.Collections': {
      Get: {
        access: 'GET /collections/{collection_name}',
        params: (r: { collection_name?: string }) => ({ collection_name: r.collection_name }),
        handle: async (_r, ctx) => {
          seen = ctx;
          const started = Date.now();
          await new Promise<void>((resolve) => ctx.signal.addEventListener('abort', () => resolve(), { once: true }));
          abortedAfterMs = Date.now() - started;
          return { time: 0 };
        },
      },
    },
  }, { SERVICE__SERVICE__API_KEY: 'k', SERVICE__SERVICE__READ_ONLY_API_KEY: 'ro' });
  try {
    const err = await client.fail('Collections', 'Get', { collection_name: 'c' }, { apiKey: 'ro', deadlineMs: 400 });
    t.is(codeName(err.code), 'DEADLINE_EXCEEDED');
    await waitFor('the handler to see its signal aborted', () => abortedAfterMs >= 0);
    const ctx = seen as unknown as GrpcCallContext;
    t.deepEqual(ctx.access, { kind: 'global', mode: 'r' });
    t.true(ctx.timeoutMs !== null && ctx.timeoutMs > 0 && ctx.timeoutMs <= 400, `timeoutMs ${ctx.timeoutMs}`);
    t.true(ctx.signal.aborted);
    t.true(abortedAfterMs >= 250 && abortedAfterMs < 5000, `aborted after ${abortedAfterMs} ms`);
  } finally {
    client.close();
    await server.close(1000);
  }
});

test('a client cancel aborts the signal; without a deadline timeoutMs is null', async (t) => {
  let ctx: GrpcCallContext | null = null;
  let aborted = false;
  const { server } = await serve({
    'qdrant.Collections': {
      List: {
        access: 'GET /collections',
        handle: async (_r, c) => {
          ctx = c;
          await new Promise<void>((resolve) => c.signal.addEventListener('abort', () => resolve(), { once: true }));
          aborted = true;
          return { time: 0 };
        },
      },
    },
  });
  const raw = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  try {
    const call = raw.makeUnaryRequest('/qdrant.Collections/List', () => Buffer.alloc(0), (b: Buffer) => b, {}, () => undefined);
    await waitFor('the handler to run', () => ctx !== null);
    t.is((ctx as unknown as GrpcCallContext).timeoutMs, null);
    t.deepEqual((ctx as unknown as GrpcCallContext).access, { kind: 'global', mode: 'm' }, 'auth off: manage');
    call.cancel();
    await waitFor('the cancel to abort the signal', () => aborted);
    t.pass();
  } finally {
    raw.close();
    await server.close(1000);
  }
});

test('an RPC of the contract absent from the services answers UNIMPLEMENTED naming it; errors go through the status table; metrics count both', async (t) => {
  const { server, client, registry } = await serve({
    'qdrant.Collections': {
      Get: { access: 'GET /collections/{collection_name}', handle: async () => { throw new NotFoundError('Collection `x` doesn\'t exist!'); } },
    },
  });
  try {
    const un = await client.fail('Collections', 'Delete', { collection_name: 'x' });
    t.is(codeName(un.code), 'UNIMPLEMENTED');
    t.is(un.details, 'Not implemented: /qdrant.Collections/Delete is not available in this version of Quiver');
    const pts = await client.fail('Points', 'Count', { collection_name: 'x' });
    t.is(codeName(pts.code), 'UNIMPLEMENTED');
    t.regex(pts.details, /\/qdrant\.Points\/Count/);
    const nf = await client.fail('Collections', 'Get', { collection_name: 'x' });
    t.is(codeName(nf.code), 'NOT_FOUND');
    t.is(nf.details, 'Not found: Collection `x` doesn\'t exist!');
    const text = await registry.metrics();
    t.regex(text, /^grpc_responses_total\{method="\/qdrant\.Collections\/Delete",code="UNIMPLEMENTED"\} 1$/m);
    t.regex(text, /^grpc_responses_total\{method="\/qdrant\.Collections\/Get",code="NOT_FOUND"\} 1$/m);
  } finally {
    client.close();
    await server.close(1000);
  }
});

/** A unary call of `path` carrying `bytes` as they are (no encoding), with `metadata`; its status. */
function rawCall(port: number, path: string, bytes: Buffer, metadata: Record<string, string> = {}): Promise<grpc.StatusObject | grpc.ServiceError> {
  const raw = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(metadata)) md.set(k, v);
  return new Promise((resolve) => {
    raw.makeUnaryRequest(path, (b: Buffer) => b, (b: Buffer) => b, bytes, md, {}, (err) => {
      raw.close();
      resolve(err ?? { code: grpc.status.OK, details: '', metadata: new grpc.Metadata() });
    });
  });
}

test('bytes the decoder cannot read answer INVALID_ARGUMENT once the caller is known, never INTERNAL; counted and audited', async (t) => {
  const events: AuditEvent[] = [];
  const audit = { record: (e: AuditEvent) => void events.push(e) } as unknown as AuditLog;
  let handled = 0;
  const { server, client, registry } = await serve(
    {
      'qdrant.Collections': {
        Get: {
          access: 'GET /collections/{collection_name}',
          params: (r: { collection_name?: string }) => ({ collection_name: r.collection_name }),
          handle: async () => {
            handled++;
            return { time: 0 };
          },
        },
      },
    },
    { SERVICE__SERVICE__API_KEY: 'k', SERVICE__SERVICE__READ_ONLY_API_KEY: 'ro' },
    audit,
  );
  try {
    // Field 1 (collection_name), its length cut off in the middle of the varint.
    const truncated = Buffer.from([0x0a, 0x80]);
    const anonymous = await rawCall(server.port, '/qdrant.Collections/Get', truncated);
    t.is(codeName(anonymous.code), 'UNAUTHENTICATED', 'no credentials: refused before the bytes are looked at');
    const bad = await rawCall(server.port, '/qdrant.Collections/Get', truncated, { 'api-key': 'ro' });
    t.is(codeName(bad.code), 'INVALID_ARGUMENT', bad.details);
    t.regex(bad.details, /^Wrong input: the request could not be decoded: index out of range/);
    // An unknown field (15) of a wire type protobuf does not have (7).
    const wire = await rawCall(server.port, '/qdrant.Collections/Get', Buffer.from([0x7f]), { 'api-key': 'k' });
    t.is(codeName(wire.code), 'INVALID_ARGUMENT', wire.details);
    t.regex(wire.details, /^Wrong input: the request could not be decoded: invalid wire type 7/);
    t.is(handled, 0, 'the handler never ran');
    // The server goes on serving.
    await client.call('Collections', 'Get', { collection_name: 'c' }, { apiKey: 'k' });
    t.is(handled, 1);

    const text = await registry.metrics();
    t.regex(text, /^grpc_responses_total\{method="\/qdrant\.Collections\/Get",code="INVALID_ARGUMENT"\} 2$/m);
    t.regex(text, /^grpc_responses_total\{method="\/qdrant\.Collections\/Get",code="UNAUTHENTICATED"\} 1$/m);
    t.notRegex(text, /code="INTERNAL"/);
    const forGet = events.filter((e) => e.path === '/qdrant.Collections/Get');
    t.like(forGet[0], { subject: null, allowed: false, method: '/qdrant.Collections/Get' });
    t.like(forGet[1], { subject: 'read_only_api_key', allowed: true, collection: null, address: '127.0.0.1' });
    t.like(forGet[2], { subject: 'api_key', allowed: true, collection: null });
    t.like(forGet[3], { subject: 'api_key', allowed: true, collection: 'c' });
    t.is(forGet.length, 4);
  } finally {
    client.close();
    await server.close(1000);
  }
});

test('a method whose access key the policy does not have, or an RPC the contract lacks, is refused at start', async (t) => {
  await t.throwsAsync(serve({ 'qdrant.Collections': { Get: { access: 'GET /no/such/route', handle: async () => ({}) } } }), { message: /no access policy for GET \/no\/such\/route/ });
  await t.throwsAsync(serve({ 'qdrant.Collections': { Nope: { access: 'GET /collections', handle: async () => ({}) } } }), { message: /qdrant\.Collections has no RPC Nope/ });
});

test('close() lets a call in flight finish', async (t) => {
  let release: () => void = () => undefined;
  let started = false;
  const { server, client } = await serve({
    'qdrant.Collections': {
      List: {
        access: 'GET /collections',
        handle: async () => {
          started = true;
          await new Promise<void>((resolve) => (release = resolve));
          return { collections: [{ name: 'done' }], time: 0 };
        },
      },
    },
  });
  try {
    const pending = client.call('Collections', 'List', {});
    await waitFor('the call to start', () => started);
    const closing = server.close(10_000);
    release();
    t.deepEqual((await pending).collections, [{ name: 'done' }]);
    await closing;
  } finally {
    client.close();
  }
});

test('the signal is made when a handler first reads it: read after the deadline it is already aborted, and the call is counted as its reason, not OK', async (t) => {
  let release: () => void = () => undefined;
  let deadlineAt = Infinity;
  let seen: { aborted: boolean; reason: unknown } | null = null;
  const { server, client, registry } = await serve({
    'qdrant.Collections': {
      Get: {
        access: 'GET /collections/{collection_name}',
        handle: async (_r, ctx) => {
          deadlineAt = Date.now() + (ctx.timeoutMs ?? Infinity);
          // Waits without touching ctx.signal, then reads it once the server's deadline has passed.
          await new Promise<void>((resolve) => (release = resolve));
          seen = { aborted: ctx.signal.aborted, reason: ctx.signal.reason };
          return { time: 0 };
        },
      },
    },
  });
  try {
    const err = await client.fail('Collections', 'Get', { collection_name: 'c' }, { deadlineMs: 300 });
    t.is(codeName(err.code), 'DEADLINE_EXCEEDED');
    t.true(Number.isFinite(deadlineAt), 'the handler ran and got the deadline');
    // The server's deadline comes from the grpc-timeout it received, a little after the client's.
    await waitFor('the server-side deadline to pass', () => Date.now() > deadlineAt);
    release();
    await waitFor('the handler to read its signal', () => seen !== null);
    // Aborted already when first read. The client, at its own deadline (a little before the
    // server's), resets the stream: which of the two the server sees first names the reason.
    const s0 = seen as unknown as { aborted: boolean; reason: unknown };
    t.true(s0.aborted);
    t.true(s0.reason === 'deadline' || s0.reason === 'cancelled', `reason ${String(s0.reason)}`);
    const code = s0.reason === 'deadline' ? 'DEADLINE_EXCEEDED' : 'CANCELLED';
    const counted = new RegExp(`^grpc_responses_total\\{method="/qdrant\\.Collections/Get",code="${code}"\\} 1$`, 'm');
    await waitFor(`the call to be counted ${code}`, async () => counted.test(await registry.metrics()));
    t.notRegex(await registry.metrics(), /code="OK"/, 'not counted as answered');
  } finally {
    client.close();
    await server.close(1000);
  }
});

test('a signal first read before the client cancels is aborted by the cancel; a handler that never reads it answers as before', async (t) => {
  let gotSignal = false;
  let aborted = false;
  const { server, client } = await serve({
    'qdrant.Collections': {
      List: {
        access: 'GET /collections',
        handle: async (_r, ctx) => {
          const signal = ctx.signal;
          gotSignal = true;
          t.false(signal.aborted);
          await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve(), { once: true }));
          aborted = signal.reason === 'cancelled';
          return { time: 0 };
        },
      },
      CollectionExists: { access: 'GET /collections/{collection_name}/exists', handle: async () => ({ result: { exists: false }, time: 0 }) },
    },
  });
  const raw = new grpc.Client(`127.0.0.1:${server.port}`, grpc.credentials.createInsecure());
  try {
    t.deepEqual(await client.call('Collections', 'CollectionExists', { collection_name: 'x' }), { result: { exists: false }, time: 0 });
    const call = raw.makeUnaryRequest('/qdrant.Collections/List', () => Buffer.alloc(0), (b: Buffer) => b, {}, () => undefined);
    await waitFor('the handler to hold its signal', () => gotSignal);
    call.cancel();
    await waitFor('the cancel to abort the signal with reason cancelled', () => aborted);
    t.pass();
  } finally {
    raw.close();
    client.close();
    await server.close(1000);
  }
});
