/**
 * The gRPC side of the REST benchmark: clients of the public gRPC API (qdrant.Points,
 * qdrant.Qdrant; the committed contract proto/qdrant/, loaded with @grpc/proto-loader
 * and the server's options).
 *
 * As the REST client sends prebuilt JSON Buffers, these send prebuilt message bytes:
 * each request is encoded once before the timing (`encodeQuery`, `encodeUpsert`).
 * Answers are decoded in the timed loop with the contract's own deserializer (decode +
 * toObject, as any client of proto-loader does), as the REST client runs JSON.parse on
 * each answer. Two transports:
 *
 *  - `grpc-js`: @grpc/grpc-js `Client.makeUnaryRequest` with an identity serializer:
 *    what a Node application uses.
 *  - `h2`: node:http2 directly, one stream per call (POST, `content-type:
 *    application/grpc`, `te: trailers`, the 5-byte length prefix and the message; the
 *    answer's message and its `grpc-status` trailer read off the stream). The same gRPC
 *    exchange without grpc-js's client stack (channel, load balancer, call and filter
 *    objects), the counterpart of the REST benchmark's raw HTTP/1.1 client: client and
 *    server share two cores, so a client's CPU is taken from the server.
 *
 * Channels: `shared` sends every call of a run over one channel (one HTTP/2 connection,
 * the calls in flight as concurrent streams); `per-worker` gives each of the c calls in
 * flight its own connection (for grpc-js a channel with a local subchannel pool, since
 * grpc-js otherwise shares one connection among channels to the same target), as the
 * REST client keeps one keep-alive connection per request in flight.
 */
import * as http2 from 'http2';
import * as net from 'net';
import * as path from 'path';

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

import { REPO_ROOT } from '../engine/common';

export type ChannelMode = 'shared' | 'per-worker';
export type GrpcLib = 'grpc-js' | 'h2';
/** A gRPC client configuration of the benchmark, `<lib>:<channels>` (e.g. `h2:per-worker`). */
export type GrpcVariant = `${GrpcLib}:${ChannelMode}`;
export const GRPC_VARIANTS: GrpcVariant[] = ['grpc-js:per-worker', 'grpc-js:shared', 'h2:per-worker', 'h2:shared'];

export function variantParts(v: GrpcVariant): { lib: GrpcLib; channels: ChannelMode } {
  const [lib, channels] = v.split(':') as [GrpcLib, ChannelMode];
  return { lib, channels };
}

const LOADER: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [path.join(REPO_ROOT, 'proto', 'qdrant')],
};

type Method = protoLoader.MethodDefinition<object, object>;

let contract: { query: Method; upsert: Method; health: Method } | null = null;

function methods() {
  if (contract === null) {
    const def = protoLoader.loadSync('qdrant.proto', LOADER);
    const svc = (name: string) => def[name] as protoLoader.ServiceDefinition;
    contract = {
      query: svc('qdrant.Points').Query,
      upsert: svc('qdrant.Points').Upsert,
      health: svc('qdrant.Qdrant').HealthCheck,
    };
  }
  return contract;
}

const identity = (b: Buffer) => b;

/** QueryPoints `{collection_name, query: {nearest: {dense: {data}}}, limit, params: {hnsw_ef}}`, encoded. */
export function encodeQuery(collection: string, vector: Float32Array, limit: number, ef: number): Buffer {
  return methods().query.requestSerialize({
    collection_name: collection,
    query: { nearest: { dense: { data: Array.from(vector) } } },
    limit,
    params: { hnsw_ef: ef },
  });
}

/** UpsertPoints with `wait: true` of the points `ids[at..end)` (integer ids, dense vectors), encoded. */
export function encodeUpsert(collection: string, base: Float32Array, dim: number, at: number, end: number): Buffer {
  const points: object[] = [];
  for (let i = at; i < end; i++) {
    points.push({ id: { num: i }, vectors: { vector: { dense: { data: Array.from(base.subarray(i * dim, (i + 1) * dim)) } } } });
  }
  return methods().upsert.requestSerialize({ collection_name: collection, wait: true, points });
}

export function encodeHealth(): Buffer {
  return methods().health.requestSerialize({});
}

interface ScoredPointMsg {
  id?: { num?: string; uuid?: string };
}

/** What the benchmark calls, over either transport. */
export interface GrpcBenchClient {
  readonly variant: GrpcVariant;
  /** Opens the connections of `lanes` calls in flight before a timed pass. */
  connect(lanes: number): Promise<void>;
  /** Points/Query with prebuilt bytes; the ids of the hits, in order. */
  query(bytes: Buffer, lane: number): Promise<number[]>;
  /** Points/Upsert with prebuilt bytes (wait=true); throws unless the status is Completed. */
  upsert(bytes: Buffer, lane: number): Promise<void>;
  /** Qdrant/HealthCheck: the floor of a gRPC call (the same server, wrapper and codec; no storage, no engine). */
  health(bytes: Buffer, lane: number): Promise<void>;
  close(): void;
}

export function makeGrpcClient(target: string, variant: GrpcVariant): GrpcBenchClient {
  const { lib, channels } = variantParts(variant);
  return lib === 'grpc-js' ? new GrpcJsClient(target, channels) : new H2GrpcClient(target, channels);
}

function queryIds(res: { result?: ScoredPointMsg[] }): number[] {
  return (res.result ?? []).map((p) => Number(p.id?.num));
}

function checkUpsert(res: { result?: { status?: string } }): void {
  if (res.result?.status !== 'Completed') throw new Error(`gRPC upsert with wait=true answered status ${String(res.result?.status)}`);
}

class GrpcJsClient implements GrpcBenchClient {
  readonly variant: GrpcVariant;
  private readonly shared: grpc.Client;
  private readonly lanes: grpc.Client[] = [];
  private readonly target: string;

  constructor(
    target: string,
    readonly mode: ChannelMode,
  ) {
    this.variant = `grpc-js:${mode}`;
    this.target = target;
    this.shared = this.channel(false);
  }

  private channel(own: boolean): grpc.Client {
    const options: grpc.ChannelOptions = {
      'grpc.max_receive_message_length': 256 * 1024 * 1024,
      'grpc.max_send_message_length': 256 * 1024 * 1024,
    };
    if (own) options['grpc.use_local_subchannel_pool'] = 1;
    return new grpc.Client(this.target, grpc.credentials.createInsecure(), options);
  }

  /** The channel of lane `lane` (calls in flight are numbered 0..c-1). */
  private clientFor(lane: number): grpc.Client {
    if (this.mode === 'shared') return this.shared;
    while (this.lanes.length <= lane) this.lanes.push(this.channel(true));
    return this.lanes[lane];
  }

  async connect(lanes: number): Promise<void> {
    const all = this.mode === 'shared' ? [this.shared] : Array.from({ length: lanes }, (_, i) => this.clientFor(i));
    await Promise.all(all.map((c) => new Promise<void>((resolve, reject) => c.waitForReady(Date.now() + 10_000, (e) => (e ? reject(e) : resolve())))));
  }

  private unary<Res>(path: string, bytes: Buffer, deserialize: (b: Buffer) => Res, lane: number): Promise<Res> {
    const client = this.clientFor(lane);
    return new Promise((resolve, reject) => {
      client.makeUnaryRequest(path, identity, deserialize, bytes, (err, res) => (err ? reject(err) : resolve(res as Res)));
    });
  }

  async query(bytes: Buffer, lane: number): Promise<number[]> {
    const m = methods().query;
    return queryIds(await this.unary(m.path, bytes, m.responseDeserialize as (b: Buffer) => { result?: ScoredPointMsg[] }, lane));
  }

  async upsert(bytes: Buffer, lane: number): Promise<void> {
    const m = methods().upsert;
    checkUpsert(await this.unary(m.path, bytes, m.responseDeserialize as (b: Buffer) => { result?: { status?: string } }, lane));
  }

  async health(bytes: Buffer, lane: number): Promise<void> {
    const m = methods().health;
    await this.unary(m.path, bytes, m.responseDeserialize as (b: Buffer) => object, lane);
  }

  close(): void {
    this.shared.close();
    for (const c of this.lanes) c.close();
    this.lanes.length = 0;
  }
}

/** A gRPC call failed (status other than OK, or a broken answer). */
export class GrpcCallError extends Error {
  constructor(
    readonly code: number,
    details: string,
  ) {
    super(`gRPC status ${code}: ${details}`);
  }
}

/**
 * gRPC unary calls over node:http2 directly, on one connection (`shared`) or one per
 * lane: one stream per call, the request a prebuilt message, the answer's message bytes
 * and its `grpc-status` read off the stream. Knows no service.
 */
export class H2Channels {
  private readonly sessions: http2.ClientHttp2Session[] = [];
  private readonly authority: string;
  private readonly host: string;
  private readonly port: number;

  constructor(
    target: string,
    readonly mode: ChannelMode,
  ) {
    this.authority = `http://${target}`;
    const u = new URL(this.authority);
    this.host = u.hostname;
    this.port = Number(u.port);
  }

  private session(lane: number): http2.ClientHttp2Session {
    const i = this.mode === 'shared' ? 0 : lane;
    while (this.sessions.length <= i) {
      const s = http2.connect(this.authority, {
        settings: { enablePush: false },
        createConnection: () => net.connect({ host: this.host, port: this.port, noDelay: true }),
      });
      s.on('error', () => undefined);
      this.sessions.push(s);
    }
    const s = this.sessions[i];
    if (s.destroyed || s.closed) throw new Error(`HTTP/2 session ${i} to ${this.authority} is closed`);
    return s;
  }

  /** Opens the connections of `lanes` calls in flight. */
  async connect(lanes: number): Promise<void> {
    const n = this.mode === 'shared' ? 1 : lanes;
    await Promise.all(
      Array.from({ length: n }, (_, i) => {
        const s = this.session(i);
        return s.connecting ? new Promise<void>((resolve, reject) => s.once('connect', () => resolve()).once('error', reject)) : Promise.resolve();
      }),
    );
  }

  /** One unary call of `path` (`/package.Service/Method`): the answer's message bytes; rejects with a GrpcCallError unless the status is OK. */
  call(path: string, message: Buffer, lane: number): Promise<Buffer> {
    const frame = Buffer.allocUnsafe(5 + message.length);
    frame[0] = 0;
    frame.writeUInt32BE(message.length, 1);
    message.copy(frame, 5);
    return new Promise((resolve, reject) => {
      const stream = this.session(lane).request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers' }, { endStream: false });
      const chunks: Buffer[] = [];
      let status: number | null = null;
      let details = '';
      const take = (h: http2.IncomingHttpHeaders) => {
        const st = h['grpc-status'];
        if (st !== undefined) {
          status = Number(st);
          details = decodeURIComponent(String(h['grpc-message'] ?? ''));
        }
      };
      stream.on('response', take); // a trailers-only answer (an error) carries its status in the headers
      stream.on('trailers', take);
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('error', reject);
      stream.on('close', () => {
        if (status !== 0) {
          reject(new GrpcCallError(status ?? -1, status === null ? `stream closed without a grpc-status (rst code ${stream.rstCode})` : details));
          return;
        }
        const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
        if (body.length < 5 || body[0] !== 0 || body.readUInt32BE(1) !== body.length - 5) {
          reject(new GrpcCallError(-1, `unexpected answer framing (${body.length} bytes${body[0] ? ', compressed' : ''})`));
          return;
        }
        resolve(body.subarray(5));
      });
      stream.end(frame);
    });
  }

  close(): void {
    for (const s of this.sessions) s.close();
    this.sessions.length = 0;
  }
}

/** The benchmark's calls over H2Channels, answers decoded by the contract's deserializer. */
class H2GrpcClient implements GrpcBenchClient {
  readonly variant: GrpcVariant;
  private readonly channels: H2Channels;

  constructor(target: string, mode: ChannelMode) {
    this.variant = `h2:${mode}`;
    this.channels = new H2Channels(target, mode);
  }

  connect(lanes: number): Promise<void> {
    return this.channels.connect(lanes);
  }

  async query(bytes: Buffer, lane: number): Promise<number[]> {
    const m = methods().query;
    return queryIds((m.responseDeserialize as (b: Buffer) => { result?: ScoredPointMsg[] })(await this.channels.call(m.path, bytes, lane)));
  }

  async upsert(bytes: Buffer, lane: number): Promise<void> {
    const m = methods().upsert;
    checkUpsert((m.responseDeserialize as (b: Buffer) => { result?: { status?: string } })(await this.channels.call(m.path, bytes, lane)));
  }

  async health(bytes: Buffer, lane: number): Promise<void> {
    const m = methods().health;
    m.responseDeserialize(await this.channels.call(m.path, bytes, lane));
  }

  close(): void {
    this.channels.close();
  }
}
