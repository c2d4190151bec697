/**
 * The internal API between peers (`cluster.p2p.port`, default 6335): a gRPC server with
 * the service of `proto/p2p.proto`, and the clients a peer uses to reach the others.
 *
 * Owns: the wire (grpc-js, the .proto loaded at run time), connection settings (short
 * reconnect backoff so a restarted peer is reached again within a tick or two),
 * deadlines, the bounded in-flight queue per peer, the send-failure figures that
 * GET /cluster reports, and the one table between a PeerCallError's reason and its
 * gRPC status code. Must never: interpret Raft messages or consensus operations
 * (ts/consensus/driver.ts does), or block: every call is asynchronous.
 */

import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { Logger } from 'pino';

import { PeerCallError, type JoinRequest, type JoinResponse, type PeerCallReason, type PeerHandlers, type SendFailures } from '../../consensus/transport';

/** The gRPC status code of each reason a call between peers fails for, both ways. */
const STATUS_OF_REASON: Record<PeerCallReason, grpc.status> = {
  invalid_argument: grpc.status.INVALID_ARGUMENT,
  unavailable: grpc.status.UNAVAILABLE,
  not_leader: grpc.status.FAILED_PRECONDITION,
  internal: grpc.status.INTERNAL,
  timeout: grpc.status.DEADLINE_EXCEEDED,
};

/** The reason of a status code a call came back with; a code outside the table means the peer could not take the call. */
function reasonOfStatus(code: grpc.status): PeerCallReason {
  for (const [reason, status] of Object.entries(STATUS_OF_REASON)) if (status === code) return reason as PeerCallReason;
  return 'unavailable';
}

/** PEM material for TLS between peers (`cluster.p2p.enable_tls`): both sides present a certificate signed by `ca`. */
export interface P2PTls {
  cert: Buffer;
  key: Buffer;
  ca: Buffer;
}

interface RaftClient extends grpc.Client {
  Send(req: { message: Buffer }, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null) => void): grpc.ClientUnaryCall;
  Join(req: { peer_id: string; uri: string; port: number }, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: { peers: Record<string, string>; leader_id: string; uri: string }) => void): grpc.ClientUnaryCall;
  Propose(req: { operation: Buffer; conf_change: boolean }, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: { index: string; term: string }) => void): grpc.ClientUnaryCall;
  GetSnapshot(req: object, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: { snapshot: Buffer; leader_id: string }) => void): grpc.ClientUnaryCall;
  WhoIs(req: object, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: { peer_id: string; uri: string }) => void): grpc.ClientUnaryCall;
  WaitApplied(req: { index: string; timeout_ms: number }, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: { applied: boolean }) => void): grpc.ClientUnaryCall;
}

type RaftClientCtor = new (target: string, creds: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => RaftClient;
type ServiceCtor = (new (target: string, creds: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => grpc.Client) & { service: grpc.ServiceDefinition };

interface P2PPackage {
  Raft: RaftClientCtor & { service: grpc.ServiceDefinition };
  Points: ServiceCtor;
  ShardSnapshots: ServiceCtor;
}

let loaded: P2PPackage | null = null;

/** The services of proto/p2p.proto, loaded once. */
export function p2pPackage(): P2PPackage {
  if (loaded) return loaded;
  const protoPath = path.join(repoRoot(), 'proto', 'p2p.proto');
  const def = protoLoader.loadSync(protoPath, { keepCase: true, longs: String, defaults: true });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { quiver: { p2p: P2PPackage } };
  loaded = pkg.quiver.p2p;
  return loaded;
}

function raftService(): { service: grpc.ServiceDefinition; Client: RaftClientCtor } {
  const p = p2pPackage();
  return { service: p.Raft.service, Client: p.Raft };
}

function repoRoot(): string {
  // ts/api/p2p (or dist/ts/api/p2p) → the folder holding proto/.
  const fs = require('node:fs') as typeof import('node:fs');
  let dir = __dirname;
  for (;;) {
    if (fs.existsSync(path.join(dir, 'proto', 'p2p.proto'))) return dir;
    const parent = path.dirname(dir);
    if (parent === dir) throw new Error('proto/p2p.proto not found above ' + __dirname);
    dir = parent;
  }
}

export const CHANNEL_OPTIONS: grpc.ChannelOptions = {
  // A peer that restarts is reached again quickly (the default backoff grows to 2 minutes).
  'grpc.initial_reconnect_backoff_ms': 100,
  'grpc.min_reconnect_backoff_ms': 100,
  'grpc.max_reconnect_backoff_ms': 1000,
  'grpc.max_receive_message_length': 256 * 1024 * 1024,
  'grpc.max_send_message_length': 256 * 1024 * 1024,
};

/** `http://host:port` → `host:port` (the scheme says whether TLS is used: https). */
export function grpcTarget(uri: string): { target: string; host: string; port: number; tls: boolean } {
  let u: URL;
  try {
    u = new URL(uri);
  } catch {
    throw new Error(`peer URI ${JSON.stringify(uri)} is not a URL (expected http://host:port)`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new Error(`peer URI ${JSON.stringify(uri)}: scheme must be http or https`);
  if (u.port === '') throw new Error(`peer URI ${JSON.stringify(uri)} has no port`);
  return { target: `${u.hostname}:${u.port}`, host: u.hostname.replace(/^\[(.*)\]$/, '$1'), port: Number(u.port), tls: u.protocol === 'https:' };
}

/** The host part of a grpc-js peer string (`ipv4:1.2.3.4:5`, `ipv6:[::1]:5`, `1.2.3.4:5`). */
export function hostOfPeer(peer: string): string | null {
  const s = peer.replace(/^ipv[46]:/, '');
  const m = /^\[([^\]]+)\]:\d+$/.exec(s) ?? /^([^:]+):\d+$/.exec(s);
  return m ? m[1] : null;
}

function errorToStatus(err: unknown): Partial<grpc.StatusObject> {
  if (err instanceof PeerCallError) return { code: STATUS_OF_REASON[err.reason], details: err.message };
  return { code: grpc.status.INTERNAL, details: err instanceof Error ? err.message : String(err) };
}

export class P2PServer {
  private constructor(
    private readonly server: grpc.Server,
    readonly port: number,
  ) {}

  /** `extra`: adds more services (the points service) before the server binds. */
  static async start(host: string, port: number, handlers: PeerHandlers, logger: Logger, tls: P2PTls | null = null, extra: ((server: grpc.Server) => void) | null = null): Promise<P2PServer> {
    const { service } = raftService();
    const server = new grpc.Server({ 'grpc.max_receive_message_length': 256 * 1024 * 1024 });
    extra?.(server);
    const unary =
      <Req, Res>(fn: (req: Req, call: grpc.ServerUnaryCall<Req, Res>) => Promise<Res> | Res) =>
      (call: grpc.ServerUnaryCall<Req, Res>, cb: grpc.sendUnaryData<Res>) => {
        Promise.resolve()
          .then(() => fn(call.request, call))
          .then(
            (res) => cb(null, res),
            (err: unknown) => {
              if (!(err instanceof PeerCallError)) logger.warn({ err }, 'p2p call failed');
              cb(errorToStatus(err));
            },
          );
      };
    server.addService(service, {
      Send: unary<{ message: Buffer }, object>((req) => {
        handlers.onMessage(req.message);
        return {};
      }),
      Join: unary<{ peer_id: string; uri: string; port: number }, object>(async (req, call) => {
        const res = await handlers.join({ peerId: req.peer_id, uri: req.uri, port: req.port }, hostOfPeer(call.getPeer()));
        return { peers: res.peers, leader_id: res.leaderId, uri: res.uri };
      }),
      Propose: unary<{ operation: Buffer; conf_change: boolean }, object>(async (req) => {
        const r = await handlers.propose(req.operation, req.conf_change);
        return { index: String(r.index), term: String(r.term) };
      }),
      GetSnapshot: unary<object, object>(async () => {
        const r = await handlers.snapshot();
        return { snapshot: Buffer.from(r.snapshot), leader_id: r.leaderId };
      }),
      WhoIs: unary<object, object>(() => {
        const r = handlers.whoIs();
        return { peer_id: r.peerId, uri: r.uri };
      }),
      WaitApplied: unary<{ index: string; timeout_ms: number; term?: string }, object>(async (req) => ({
        applied: await handlers.waitApplied(Number(req.index), Math.min(req.timeout_ms, 60_000), req.term === undefined || Number(req.term) === 0 ? null : Number(req.term)),
      })),
    });
    const bound = await new Promise<number>((resolve, reject) => {
      const creds = tls ? grpc.ServerCredentials.createSsl(tls.ca, [{ cert_chain: tls.cert, private_key: tls.key }], true) : grpc.ServerCredentials.createInsecure();
      server.bindAsync(`${host.includes(':') ? `[${host}]` : host}:${port}`, creds, (err, p) => (err ? reject(err) : resolve(p)));
    });
    return new P2PServer(server, bound);
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, 2000);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}

interface PeerChannel {
  client: RaftClient;
  inFlight: number;
}

/** Clients to other peers, one channel per URI, created on first use. */
export class PeerClients {
  private readonly channels = new Map<string, PeerChannel>();
  private readonly failures = new Map<string, SendFailures>();

  constructor(
    private readonly opts: { callTimeoutMs: number; connectTimeoutMs: number; messageTimeoutMs: number; maxInFlight: number; tls?: P2PTls | null },
  ) {}

  private channel(uri: string): PeerChannel {
    let ch = this.channels.get(uri);
    if (!ch) {
      const { Client } = raftService();
      const { target } = grpcTarget(uri);
      // With cluster.p2p.enable_tls every peer speaks TLS and presents its certificate, whatever the URI's scheme.
      const t = this.opts.tls;
      const creds = t ? grpc.credentials.createSsl(t.ca, t.key, t.cert) : grpc.credentials.createInsecure();
      ch = { client: new Client(target, creds, CHANNEL_OPTIONS), inFlight: 0 };
      this.channels.set(uri, ch);
    }
    return ch;
  }

  private fail(uri: string, err: unknown): void {
    const f = this.failures.get(uri) ?? { count: 0, latest_error: null, latest_error_timestamp: null };
    f.count++;
    f.latest_error = err instanceof Error ? err.message : String(err);
    f.latest_error_timestamp = new Date().toISOString();
    this.failures.set(uri, f);
  }

  /** Send failures by peer URI, for GET /cluster. */
  sendFailures(): Record<string, SendFailures> {
    return Object.fromEntries([...this.failures].map(([k, v]) => [k, { ...v }]));
  }

  /** Sends one Raft message; never throws. Dropped (and counted) when too many are in flight to that peer. */
  send(uri: string, message: Uint8Array): void {
    let ch: PeerChannel;
    try {
      ch = this.channel(uri);
    } catch (err) {
      this.fail(uri, err);
      return;
    }
    if (ch.inFlight >= this.opts.maxInFlight) {
      this.fail(uri, new Error(`more than ${this.opts.maxInFlight} messages in flight: dropped`));
      return;
    }
    ch.inFlight++;
    ch.client.Send({ message: Buffer.from(message.buffer, message.byteOffset, message.byteLength) }, { deadline: Date.now() + this.opts.messageTimeoutMs }, (err) => {
      ch.inFlight--;
      if (err) this.fail(uri, err);
    });
  }

  private call<T>(uri: string, fn: (c: RaftClient, opts: grpc.CallOptions, cb: (err: grpc.ServiceError | null, res?: T) => void) => void, timeoutMs = this.opts.callTimeoutMs): Promise<T> {
    return new Promise((resolve, reject) => {
      let ch: PeerChannel;
      try {
        ch = this.channel(uri);
      } catch (err) {
        reject(err);
        return;
      }
      fn(ch.client, { deadline: Date.now() + timeoutMs }, (err, res) => {
        if (err) reject(new PeerCallError(reasonOfStatus(err.code), `${uri}: ${err.details || err.message}`));
        else resolve(res as T);
      });
    });
  }

  async join(uri: string, req: JoinRequest, timeoutMs?: number): Promise<JoinResponse> {
    const res = await this.call<{ peers: Record<string, string>; leader_id: string; uri: string }>(uri, (c, o, cb) => c.Join({ peer_id: req.peerId, uri: req.uri, port: req.port }, o, cb), timeoutMs);
    return { peers: res.peers, leaderId: res.leader_id, uri: res.uri };
  }

  async propose(uri: string, operation: Uint8Array, confChange: boolean, timeoutMs?: number): Promise<{ index: number; term: number }> {
    const res = await this.call<{ index: string; term: string }>(uri, (c, o, cb) => c.Propose({ operation: Buffer.from(operation), conf_change: confChange }, o, cb), timeoutMs);
    return { index: Number(res.index), term: Number(res.term) };
  }

  async snapshot(uri: string): Promise<{ snapshot: Uint8Array; leaderId: string }> {
    const res = await this.call<{ snapshot: Buffer; leader_id: string }>(uri, (c, o, cb) => c.GetSnapshot({}, o, cb));
    return { snapshot: res.snapshot, leaderId: res.leader_id };
  }

  async whoIs(uri: string, timeoutMs?: number): Promise<{ peerId: string; uri: string }> {
    const res = await this.call<{ peer_id: string; uri: string }>(uri, (c, o, cb) => c.WhoIs({}, o, cb), timeoutMs);
    return { peerId: res.peer_id, uri: res.uri };
  }

  /** Whether the peer at `uri` applied entry `index` (of `term`, when given) within `timeoutMs` (false on any failure). */
  async waitApplied(uri: string, index: number, timeoutMs: number, term?: number): Promise<boolean> {
    try {
      const req = { index: String(index), timeout_ms: timeoutMs, ...(term === undefined ? {} : { term: String(term) }) };
      const res = await this.call<{ applied: boolean }>(uri, (c, o, cb) => c.WaitApplied(req, o, cb), timeoutMs + 500);
      return res.applied;
    } catch {
      return false;
    }
  }

  /** Closes the channel to a peer that left. */
  forget(uri: string): void {
    this.channels.get(uri)?.client.close();
    this.channels.delete(uri);
  }

  close(): void {
    for (const ch of this.channels.values()) ch.client.close();
    this.channels.clear();
  }
}
