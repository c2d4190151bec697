/**
 * One tiny gRPC server of the library comparison (bench/grpc-libs/run.ts): it serves
 * `qdrant.Points/Query` of the committed contract and does nothing but decode the request
 * and encode a fixed answer of 10 hits (ids, scores, versions; what a query with limit 10
 * answers), so what a call costs is the library's (HTTP/2 session, call objects, framing,
 * codec), not Quiver's.
 *
 *   node dist/bench/grpc-libs/server.js <lib> <port>
 *
 * Libraries:
 *  - `grpc-js`: @grpc/grpc-js with @grpc/proto-loader and the options of Quiver's server
 *    (ts/api/grpc/proto.ts), default server options: what Quiver's gRPC API runs on.
 *  - `grpc-js-nochannelz`: the same with `grpc.enable_channelz: 0` (grpc-js otherwise
 *    keeps per-call channelz counters).
 *  - `connect`: @connectrpc/connect-node (its gRPC protocol, over node:http2) with the
 *    @bufbuild/protobuf descriptors that ship in @qdrant/js-client-grpc (generated from
 *    the same v1.18 .proto files).
 *  - `h2`: node:http2 alone, framing by hand, the same proto-loader codec as grpc-js: the
 *    floor under both libraries (not a library choice: no metadata, deadlines or errors).
 *  - `quiver`: Quiver's own HTTP/2 transport (ts/api/grpc/h2/connection.ts, what the
 *    public API runs on since grpc-js was replaced there), the same proto-loader codec.
 *
 * Prints `listening <port>` once it serves.
 */
import * as http2 from 'http2';
import * as net from 'net';
import * as path from 'path';

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

import { Http2Connection } from '../../ts/api/grpc/h2/connection';
import { REPO_ROOT } from '../engine/common';

const HITS = 10;

/** The fixed answer, as proto-loader objects (keepCase, longs as strings). */
function answerObject(): object {
  return {
    result: Array.from({ length: HITS }, (_, i) => ({ id: { num: String(90_000 + i * 7) }, score: 0.95 - i * 0.01, version: '17' })),
    time: 0.000123,
  };
}

function loadQuery(): protoLoader.MethodDefinition<object, object> {
  const def = protoLoader.loadSync('qdrant.proto', {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: false,
    oneofs: true,
    includeDirs: [path.join(REPO_ROOT, 'proto', 'qdrant')],
  });
  return (def['qdrant.Points'] as protoLoader.ServiceDefinition).Query;
}

/** A request must carry its query vector (checks that decoding happened and was right). */
function checkRequest(r: { query?: { nearest?: { dense?: { data?: number[] } } } }): void {
  if ((r.query?.nearest?.dense?.data?.length ?? 0) === 0) throw new Error('a Query request without a dense query vector');
}

async function serveGrpcJs(port: number, channelz: boolean): Promise<void> {
  const query = loadQuery();
  const server = new grpc.Server(channelz ? {} : { 'grpc.enable_channelz': 0 });
  const answer = answerObject();
  const service = { Query: query } as unknown as grpc.ServiceDefinition;
  server.addService(service, {
    Query: (call: grpc.ServerUnaryCall<{ query?: { nearest?: { dense?: { data?: number[] } } } }, object>, cb: grpc.sendUnaryData<object>) => {
      try {
        checkRequest(call.request);
        cb(null, answer);
      } catch (e) {
        cb({ code: grpc.status.INVALID_ARGUMENT, details: String(e) });
      }
    },
  });
  await new Promise<number>((resolve, reject) => server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
}

interface GenModule {
  [k: string]: unknown;
}

async function serveConnect(port: number): Promise<void> {
  // The Points service descriptor is generated code of @qdrant/js-client-grpc that its
  // index does not re-export: loaded by file path (the package's "exports" hides it).
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { connectNodeAdapter } = require('@connectrpc/connect-node') as typeof import('@connectrpc/connect-node');
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const { create } = require('@bufbuild/protobuf') as typeof import('@bufbuild/protobuf');
  const dir = path.dirname(require.resolve('@qdrant/js-client-grpc'));
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const svc = require(path.join(dir, 'proto', 'points_service_pb.js')) as GenModule;
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const pb = require(path.join(dir, 'proto', 'points_pb.js')) as GenModule;
  const Points = svc.Points as import('@bufbuild/protobuf').DescService;
  const answerInit = {
    result: Array.from({ length: HITS }, (_, i) => ({ id: { pointIdOptions: { case: 'num' as const, value: BigInt(90_000 + i * 7) } }, score: 0.95 - i * 0.01, version: 17n })),
    time: 0.000123,
  };
  const QueryResponseSchema = pb.QueryResponseSchema as Parameters<typeof create>[0];
  const handler = connectNodeAdapter({
    grpc: true,
    grpcWeb: false,
    connect: false,
    routes: (router) => {
      router.service(Points, {
        // Typed loosely: the descriptor is loaded at run time, so TypeScript does not know its methods.
        query(req: { query?: { variant: { case?: string; value?: { variant?: { case?: string; value?: { data?: number[] } } } } } }) {
          const v = req.query?.variant;
          if (v?.case !== 'nearest' || v.value?.variant?.case !== 'dense' || (v.value.variant.value?.data?.length ?? 0) === 0) throw new Error('a Query request without a dense query vector');
          // A fresh message each call, as a handler building its answer would.
          return create(QueryResponseSchema, answerInit as never);
        },
      } as never);
    },
  });
  const server = http2.createServer(handler);
  await new Promise<void>((resolve, reject) => server.listen(port, '127.0.0.1', () => resolve()).once('error', reject));
}

async function serveH2(port: number): Promise<void> {
  const query = loadQuery();
  const answer = answerObject();
  const server = http2.createServer();
  server.on('stream', (stream, headers) => {
    if (headers[':path'] !== query.path) {
      stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '12', 'grpc-message': 'unimplemented' }, { endStream: true });
      return;
    }
    const chunks: Buffer[] = [];
    stream.on('data', (c: Buffer) => chunks.push(c));
    stream.on('end', () => {
      const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      try {
        if (body.length < 5 || body[0] !== 0) throw new Error('bad framing');
        checkRequest(query.requestDeserialize(body.subarray(5, 5 + body.readUInt32BE(1))) as never);
        const msg = query.responseSerialize(answer);
        const frame = Buffer.allocUnsafe(5 + msg.length);
        frame[0] = 0;
        frame.writeUInt32BE(msg.length, 1);
        msg.copy(frame, 5);
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.end(frame);
      } catch (e) {
        stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '3', 'grpc-message': encodeURIComponent(String(e)) }, { endStream: true });
      }
    });
  });
  await new Promise<void>((resolve, reject) => server.listen(port, '127.0.0.1', () => resolve()).once('error', reject));
}

async function serveQuiver(port: number): Promise<void> {
  const query = loadQuery();
  const answer = answerObject();
  const server = net.createServer((socket) => {
    new Http2Connection(
      socket,
      socket.remoteAddress ?? null,
      (req, call) => {
        if (req.path !== query.path) return call.fail(12, 'unimplemented');
        try {
          checkRequest(query.requestDeserialize(req.message) as never);
          call.ok(query.responseSerialize(answer));
        } catch (e) {
          call.fail(3, String(e));
        }
      },
      { maxMessageBytes: 32 * 1024 * 1024, refused: () => undefined, onError: () => undefined },
    );
  });
  await new Promise<void>((resolve, reject) => server.listen(port, '127.0.0.1', () => resolve()).once('error', reject));
}

export type ServerLib = 'grpc-js' | 'grpc-js-nochannelz' | 'connect' | 'h2' | 'quiver';
export const SERVER_LIBS: ServerLib[] = ['grpc-js', 'grpc-js-nochannelz', 'connect', 'h2', 'quiver'];

async function main(): Promise<void> {
  const [lib, portArg] = process.argv.slice(2);
  const port = Number(portArg);
  if (!Number.isInteger(port) || port <= 0) throw new Error('usage: server.js <lib> <port>');
  switch (lib as ServerLib) {
    case 'grpc-js':
      await serveGrpcJs(port, true);
      break;
    case 'grpc-js-nochannelz':
      await serveGrpcJs(port, false);
      break;
    case 'connect':
      await serveConnect(port);
      break;
    case 'h2':
      await serveH2(port);
      break;
    case 'quiver':
      await serveQuiver(port);
      break;
    default:
      throw new Error(`unknown library ${lib}: one of ${SERVER_LIBS.join(', ')}`);
  }
  console.log(`listening ${port}`);
}

if (require.main === module) {
  main().catch((e) => {
    console.error(e instanceof Error ? e.stack : e);
    process.exit(1);
  });
}
