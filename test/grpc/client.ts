/**
 * A gRPC client of the public API for the tests, built from the committed contract
 * (proto/qdrant/*.proto, loaded here with @grpc/proto-loader and the same options as the
 * server, so messages are plain objects with snake_case fields, 64-bit integers as
 * decimal strings, enums by name and a virtual field per oneof), and a way to start
 * bin/quiver with its gRPC API on.
 */

import * as path from 'node:path';

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

import { freePort, REPO_ROOT, startQuiver, type RunningQuiver } from '../api/helpers';

export const PROTO_DIR = path.join(REPO_ROOT, 'proto', 'qdrant');

const OPTIONS: protoLoader.Options = { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true, includeDirs: [PROTO_DIR] };

type ClientCtor = new (target: string, creds: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => grpc.Client;

let pkg: { Qdrant: ClientCtor; Collections: ClientCtor; Points: ClientCtor; Snapshots: ClientCtor } | null = null;

function qdrantPackage() {
  if (pkg === null) {
    const def = protoLoader.loadSync('qdrant.proto', OPTIONS);
    pkg = (grpc.loadPackageDefinition(def) as unknown as { qdrant: NonNullable<typeof pkg> }).qdrant;
  }
  return pkg;
}

export type ServiceKey = 'Qdrant' | 'Collections' | 'Points' | 'Snapshots';

/** The RPC names of a service, as in the .proto. */
export function rpcNames(service: ServiceKey): string[] {
  return Object.keys((qdrantPackage()[service] as unknown as { service: grpc.ServiceDefinition }).service);
}

export interface CallOptions {
  /** `api-key` metadata. */
  apiKey?: string;
  /** `authorization: Bearer <token>` metadata. */
  token?: string;
  /** Deadline, in milliseconds from now. */
  deadlineMs?: number;
  /** Other metadata. */
  metadata?: Record<string, string>;
}

export interface TlsOptions {
  /** CA certificate that signed the server's certificate. */
  ca: Buffer;
  /** Client certificate and key (when the server checks client certificates). */
  cert?: Buffer;
  key?: Buffer;
}

/** A failed call: its status code and message. */
export type CallError = grpc.ServiceError;

export class QdrantGrpc {
  private readonly clients: Record<ServiceKey, grpc.Client>;

  constructor(
    readonly target: string,
    tls: TlsOptions | null = null,
    /** Sent with every call unless the call says otherwise. */
    private readonly defaults: CallOptions = {},
  ) {
    const creds = tls === null ? grpc.credentials.createInsecure() : grpc.credentials.createSsl(tls.ca, tls.key ?? null, tls.cert ?? null);
    const p = qdrantPackage();
    const options: grpc.ChannelOptions = { 'grpc.max_receive_message_length': 256 * 1024 * 1024, 'grpc.max_send_message_length': 256 * 1024 * 1024 };
    this.clients = {
      Qdrant: new p.Qdrant(target, creds, options),
      Collections: new p.Collections(target, creds, options),
      Points: new p.Points(target, creds, options),
      Snapshots: new p.Snapshots(target, creds, options),
    };
  }

  /** Calls `service`/`rpc` with `req`; rejects with the CallError of a failed call. */
  call<Res = any>(service: ServiceKey, rpc: string, req: object = {}, opts: CallOptions = {}): Promise<Res> {
    const o = { ...this.defaults, ...opts };
    const md = new grpc.Metadata();
    if (o.apiKey !== undefined) md.set('api-key', o.apiKey);
    if (o.token !== undefined) md.set('authorization', `Bearer ${o.token}`);
    for (const [k, v] of Object.entries(o.metadata ?? {})) md.set(k, v);
    const callOpts: grpc.CallOptions = o.deadlineMs === undefined ? {} : { deadline: Date.now() + o.deadlineMs };
    const client = this.clients[service] as unknown as Record<string, (req: object, md: grpc.Metadata, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res: Res) => void) => void>;
    const fn = client[rpc];
    if (typeof fn !== 'function') throw new Error(`qdrant.${service} has no RPC ${rpc}`);
    return new Promise((resolve, reject) => {
      fn.call(client, req, md, callOpts, (err, res) => (err ? reject(err) : resolve(res)));
    });
  }

  /** The CallError of a call expected to fail (throws when it succeeds). */
  async fail(service: ServiceKey, rpc: string, req: object = {}, opts: CallOptions = {}): Promise<CallError> {
    let res: unknown;
    try {
      res = await this.call(service, rpc, req, opts);
    } catch (err) {
      if (typeof (err as CallError).code !== 'number') throw err;
      return err as CallError;
    }
    throw new Error(`qdrant.${service}/${rpc} succeeded where it should fail: ${JSON.stringify(res)}`);
  }

  close(): void {
    for (const c of Object.values(this.clients)) c.close();
  }
}

/** The name of a status code (`NOT_FOUND`), for readable assertions. */
export function codeName(code: number): string {
  return grpc.status[code] ?? String(code);
}

export interface GrpcQuiver {
  server: RunningQuiver;
  grpcPort: number;
  target: string;
  client(tls?: TlsOptions | null, defaults?: CallOptions): QdrantGrpc;
  stop(): Promise<number | null>;
}

/** Starts bin/quiver with its gRPC API on a free port (and `env` over the test defaults). */
export async function startGrpcQuiver(env: Record<string, string> = {}): Promise<GrpcQuiver> {
  const grpcPort = await freePort();
  const server = await startQuiver({ SERVICE__SERVICE__GRPC_PORT: String(grpcPort), ...env });
  const target = `127.0.0.1:${grpcPort}`;
  const clients: QdrantGrpc[] = [];
  return {
    server,
    grpcPort,
    target,
    client(tls = null, defaults = {}) {
      const c = new QdrantGrpc(target, tls, defaults);
      clients.push(c);
      return c;
    },
    async stop() {
      for (const c of clients) c.close();
      return server.stop();
    },
  };
}
