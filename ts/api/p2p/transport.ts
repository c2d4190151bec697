/**
 * The consensus driver's transport (ts/consensus/transport.ts) over gRPC: this peer's
 * p2p server and its clients to the other peers (grpc.ts), set up from the configuration.
 *
 * Owns: the p2p settings (`service.host` and `cluster.p2p.port` to listen on,
 * `cluster.p2p.enable_tls` with the `tls.*` files, `cluster.grpc_timeout_ms`,
 * `cluster.connection_timeout_ms`, the message deadline and queue bound from
 * `cluster.consensus`), and the shutdown order: the server stops, then the clients close.
 * Must never: interpret what it carries, or start the server before the driver asks.
 */

import * as fs from 'node:fs/promises';
import type * as grpc from '@grpc/grpc-js';
import type { Logger } from 'pino';

import type { Config } from '../../config/types';
import type { JoinRequest, JoinResponse, PeerHandlers, PeerTransport, SendFailures } from '../../consensus/transport';
import { TlsSetupError } from '../tls';
import { P2PServer, PeerClients, type P2PTls } from './grpc';

export class GrpcTransport implements PeerTransport {
  private server: P2PServer | null = null;
  /** Services served beside Raft's (the points service), added before `serve`. */
  private extra: ((server: grpc.Server) => void) | null = null;

  private constructor(
    private readonly host: string,
    private readonly port: number,
    private readonly logger: Logger,
    private readonly tls: P2PTls | null,
    private readonly clients: PeerClients,
  ) {}

  /** Reads the TLS files (`cluster.p2p.enable_tls`); a missing one is a TlsSetupError. Listens only once `serve` is called. */
  static async open(config: Config, logger: Logger): Promise<GrpcTransport> {
    let tls: P2PTls | null = null;
    if (config.cluster.p2p.enable_tls) {
      try {
        const [cert, key, ca] = await Promise.all([config.tls.cert, config.tls.key, config.tls.ca_cert].map((f) => fs.readFile(f)));
        tls = { cert, key, ca };
      } catch (err) {
        throw new TlsSetupError(`cluster.p2p.enable_tls: cannot read tls.cert, tls.key or tls.ca_cert: ${(err as Error).message}`);
      }
    }
    const c = config.cluster;
    const clients = new PeerClients({
      callTimeoutMs: c.grpc_timeout_ms,
      connectTimeoutMs: c.connection_timeout_ms,
      messageTimeoutMs: Math.max(1000, c.consensus.tick_period_ms * 10),
      maxInFlight: c.consensus.max_message_queue_size,
      tls,
    });
    return new GrpcTransport(config.service.host, c.p2p.port, logger, tls, clients);
  }

  /** The TLS material peers use (null without cluster.p2p.enable_tls). */
  get p2pTls(): P2PTls | null {
    return this.tls;
  }

  /** Serves more services beside Raft's once `serve` starts the server. */
  addServices(add: (server: grpc.Server) => void): void {
    this.extra = add;
  }

  async serve(handlers: PeerHandlers): Promise<number> {
    try {
      this.server = await P2PServer.start(this.host, this.port, handlers, this.logger, this.tls, this.extra);
    } catch (err) {
      throw new Error(`cannot listen on ${this.host}:${this.port} (cluster.p2p.port): ${(err as Error).message}`);
    }
    return this.server.port;
  }

  send(uri: string, message: Uint8Array): void {
    this.clients.send(uri, message);
  }

  join(uri: string, req: JoinRequest, timeoutMs?: number): Promise<JoinResponse> {
    return this.clients.join(uri, req, timeoutMs);
  }

  propose(uri: string, operation: Uint8Array, confChange: boolean, timeoutMs?: number): Promise<{ index: number; term: number }> {
    return this.clients.propose(uri, operation, confChange, timeoutMs);
  }

  snapshot(uri: string): Promise<{ snapshot: Uint8Array; leaderId: string }> {
    return this.clients.snapshot(uri);
  }

  whoIs(uri: string, timeoutMs?: number): Promise<{ peerId: string; uri: string }> {
    return this.clients.whoIs(uri, timeoutMs);
  }

  waitApplied(uri: string, index: number, timeoutMs: number, term?: number): Promise<boolean> {
    return this.clients.waitApplied(uri, index, timeoutMs, term);
  }

  forget(uri: string): void {
    this.clients.forget(uri);
  }

  sendFailures(): Record<string, SendFailures> {
    return this.clients.sendFailures();
  }

  async close(): Promise<void> {
    await this.server?.close();
    this.clients.close();
  }
}
