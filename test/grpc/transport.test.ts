/**
 * The gRPC API's own HTTP/2 transport (ts/api/grpc/h2): HPACK against the RFC 7541
 * examples, and, over real sockets with grpc-js and node:http2 clients, what the
 * official clients do not exercise every day: messages larger than the flow-control
 * windows both ways, many calls in flight on one connection, compressed requests, the
 * message size limit, requests that are not gRPC, and bytes that are not HTTP/2.
 */

import * as http2 from 'node:http2';
import * as net from 'node:net';

import test from 'ava';
import * as grpc from '@grpc/grpc-js';
import pino from 'pino';
import { Registry } from 'prom-client';

import { Authenticator } from '../../ts/auth/authenticate';
import { HpackDecoder, encodeHeaders, HpackError } from '../../ts/api/h2/hpack';
import { parseTimeout, percentEncode } from '../../ts/api/grpc/h2/connection';
import { GrpcApiServer } from '../../ts/api/grpc/server';
import type { GrpcService } from '../../ts/api/grpc/method';
import { loadConfig } from '../../ts/config';
import { freePort } from '../api/helpers';
import { codeName, QdrantGrpc } from './client';

const silent = pino({ level: 'silent' });

async function serve(services: Partial<Record<'qdrant.Collections', GrpcService>>, env: Record<string, string> = {}) {
  const port = await freePort();
  const config = loadConfig({ env: { SERVICE__SERVICE__HOST: '127.0.0.1', SERVICE__SERVICE__GRPC_PORT: String(port), ...env } });
  const authn = new Authenticator({ apiKey: null, readOnlyKey: null, jwtRbac: false }, async () => 'no-collection');
  const server = await GrpcApiServer.start(config, { logger: silent, authn, audit: null, registry: new Registry(), services }, null);
  return { server, target: `127.0.0.1:${server.port}` };
}

/** Collections/Create records the name it got; Collections/List answers `n` names of 100 bytes. */
function echoServices(seen: string[]): Partial<Record<'qdrant.Collections', GrpcService>> {
  return {
    'qdrant.Collections': {
      Create: {
        access: 'PUT /collections/{collection_name}',
        handle: async (r: { collection_name?: string }) => {
          seen.push(r.collection_name ?? '');
          return { result: true, time: 0 };
        },
      },
      List: {
        access: 'GET /collections',
        handle: async () => ({ collections: Array.from({ length: 60_000 }, (_, i) => ({ name: `${i}`.padStart(100, 'n') })), time: 0 }),
      },
    },
  };
}

test('HPACK: the RFC 7541 request examples decode, with and without Huffman coding, through the dynamic table', (t) => {
  const plain = new HpackDecoder(4096);
  t.deepEqual(plain.decode(Buffer.from('828684410f7777772e6578616d706c652e636f6d', 'hex')), [
    [':method', 'GET'],
    [':scheme', 'http'],
    [':path', '/'],
    [':authority', 'www.example.com'],
  ]);
  t.deepEqual(plain.decode(Buffer.from('828684be58086e6f2d6361636865', 'hex')).slice(3), [
    [':authority', 'www.example.com'],
    ['cache-control', 'no-cache'],
  ]);
  const huffman = new HpackDecoder(4096);
  t.deepEqual(huffman.decode(Buffer.from('828684418cf1e3c2e5f23a6ba0ab90f4ff', 'hex'))[3], [':authority', 'www.example.com']);
  t.deepEqual(huffman.decode(Buffer.from('828684be5886a8eb10649cbf', 'hex')).slice(3), [
    [':authority', 'www.example.com'],
    ['cache-control', 'no-cache'],
  ]);
  // What the encoder writes, the decoder reads back.
  const fields: Array<[string, string]> = [[':status', '200'], ['content-type', 'application/grpc'], ['grpc-status', '3'], ['grpc-message', 'x'.repeat(300)]];
  t.deepEqual(new HpackDecoder(4096).decode(encodeHeaders(fields)), fields);
  // A small block that names a large table entry many times is refused (the list limit).
  const bomb = new HpackDecoder(4096, 64 * 1024);
  const big = Buffer.concat([Buffer.from([0x40, 0x01, 0x78, 0x7f, 0xa1, 0x1e]), Buffer.alloc(4000, 0x61)]);
  t.throws(() => bomb.decode(Buffer.concat([big, Buffer.alloc(100, 0xbe)])), { instanceOf: HpackError, message: /header list above/ });
  // Broken blocks are errors, never a throw of another kind.
  for (const hex of ['80', 'ff', '41', '4185f1e3c2e5', 'c0', '3fe21f']) {
    t.throws(() => new HpackDecoder(4096).decode(Buffer.from(hex, 'hex')), { instanceOf: HpackError }, hex);
  }
});

test('grpc-timeout and grpc-message coding', (t) => {
  t.is(parseTimeout('100m'), 100);
  t.is(parseTimeout('2S'), 2000);
  t.is(parseTimeout('1H'), 3_600_000);
  t.is(parseTimeout('5000u'), 5);
  t.is(parseTimeout('123456789m'), null);
  t.is(parseTimeout('10x'), null);
  t.is(parseTimeout(undefined), null);
  t.is(percentEncode('Not found: `x`'), 'Not found: `x`');
  t.is(percentEncode('100% é\n'), '100%25 %C3%A9%0A');
});

test('messages larger than the flow-control windows pass both ways, four at a time on one connection', async (t) => {
  const seen: string[] = [];
  const { server, target } = await serve(echoServices(seen));
  const client = new QdrantGrpc(target);
  try {
    const big = 'q'.repeat(6 * 1024 * 1024);
    const results = await Promise.all([0, 1, 2, 3].map((i) => client.call('Collections', 'Create', { collection_name: big + i })));
    t.true(results.every((r) => r.result === true));
    t.deepEqual(seen.map((s) => s.length).sort(), [0, 1, 2, 3].map(() => big.length + 1));
    const lists = await Promise.all([0, 1, 2, 3].map(() => client.call('Collections', 'List', {})));
    for (const l of lists) {
      t.is(l.collections.length, 60_000);
      t.is(l.collections[59_999].name, '59999'.padStart(100, 'n'));
    }
  } finally {
    client.close();
    await server.close(1000);
  }
});

test('300 calls in flight on one connection are all answered', async (t) => {
  const seen: string[] = [];
  const { server, target } = await serve(echoServices(seen));
  const client = new QdrantGrpc(target);
  try {
    const results = await Promise.all(Array.from({ length: 300 }, (_, i) => client.call('Collections', 'Create', { collection_name: `c${i}` })));
    t.is(results.length, 300);
    t.deepEqual([...seen].sort(), Array.from({ length: 300 }, (_, i) => `c${i}`).sort());
  } finally {
    client.close();
    await server.close(1000);
  }
});

test('a request above service.max_request_size_mb is RESOURCE_EXHAUSTED and the connection goes on; a gzip-compressed request is read', async (t) => {
  const seen: string[] = [];
  const { server, target } = await serve(echoServices(seen), { SERVICE__SERVICE__MAX_REQUEST_SIZE_MB: '1' });
  const client = new QdrantGrpc(target);
  const gzip = new grpc.Client(target, grpc.credentials.createInsecure(), { 'grpc.default_compression_algorithm': 2 });
  try {
    const err = await client.fail('Collections', 'Create', { collection_name: 'x'.repeat(2 * 1024 * 1024) });
    t.is(codeName(err.code), 'RESOURCE_EXHAUSTED');
    t.regex(err.details, /larger than max/);
    t.is((await client.call('Collections', 'Create', { collection_name: 'after' })).result, true);
    // CreateCollection{collection_name = 1: "zipped"}, compressed by the client.
    const message = Buffer.concat([Buffer.from([0x0a, 6]), Buffer.from('zipped')]);
    await new Promise<void>((resolve, reject) =>
      gzip.makeUnaryRequest('/qdrant.Collections/Create', (b: Buffer) => b, (b: Buffer) => b, message, (e) => (e ? reject(e) : resolve())),
    );
    t.deepEqual(seen, ['after', 'zipped']);
  } finally {
    client.close();
    gzip.close();
    await server.close(1000);
  }
});

/** One request on a node:http2 client: status, trailers and body. */
function h2request(target: string, headers: http2.OutgoingHttpHeaders, body: Buffer | null): Promise<{ status: number; trailers: http2.IncomingHttpHeaders; headers: http2.IncomingHttpHeaders }> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://${target}`);
    session.on('error', reject);
    const req = session.request(headers);
    let status = 0;
    let first: http2.IncomingHttpHeaders = {};
    let trailers: http2.IncomingHttpHeaders = {};
    req.on('response', (h) => {
      status = Number(h[':status']);
      first = h;
    });
    req.on('trailers', (h) => (trailers = h));
    req.on('data', () => undefined);
    req.on('end', () => {
      session.close();
      resolve({ status, trailers, headers: first });
    });
    req.on('error', reject);
    req.end(body ?? undefined);
  });
}

test('requests that are not gRPC get HTTP errors; a call without a message, or to a path the contract lacks, gets a gRPC status', async (t) => {
  const { server, target } = await serve(echoServices([]));
  try {
    t.is((await h2request(target, { ':method': 'POST', ':path': '/qdrant.Collections/List', 'content-type': 'application/json' }, Buffer.from('{}'))).status, 415);
    t.is((await h2request(target, { ':method': 'GET', ':path': '/qdrant.Collections/List' }, null)).status, 405);
    const empty = await h2request(target, { ':method': 'POST', ':path': '/qdrant.Collections/List', 'content-type': 'application/grpc', te: 'trailers' }, null);
    t.is(empty.status, 200);
    t.is(empty.headers['grpc-status'], String(grpc.status.INVALID_ARGUMENT));
    const unknown = await h2request(target, { ':method': 'POST', ':path': '/qdrant.Nothing/Here', 'content-type': 'application/grpc', te: 'trailers' }, Buffer.alloc(5));
    t.is(unknown.headers['grpc-status'], String(grpc.status.UNIMPLEMENTED));
    const ok = await h2request(target, { ':method': 'POST', ':path': '/qdrant.Collections/Create', 'content-type': 'application/grpc', te: 'trailers' }, Buffer.from([0, 0, 0, 0, 3, 0x0a, 1, 0x61]));
    t.is(ok.trailers['grpc-status'], '0');
  } finally {
    await server.close(1000);
  }
});

test('bytes that are not HTTP/2 close that connection only; an HTTP/1.1 request gets no answer', async (t) => {
  const seen: string[] = [];
  const { server, target } = await serve(echoServices(seen));
  const [host, port] = target.split(':');
  try {
    for (const garbage of ['GET / HTTP/1.1\r\nhost: x\r\n\r\n', 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\x09\x00\x00\x00\x00\x00abcd']) {
      const closed = await new Promise<boolean>((resolve) => {
        const s = net.connect(Number(port), host, () => s.write(garbage, 'latin1'));
        s.on('data', () => undefined);
        s.on('close', () => resolve(true));
        s.on('error', () => undefined);
      });
      t.true(closed);
    }
    const client = new QdrantGrpc(target);
    t.is((await client.call('Collections', 'Create', { collection_name: 'still' })).result, true);
    client.close();
  } finally {
    await server.close(1000);
  }
});
