/**
 * The public gRPC API (the reference's v1.18 contract, proto/qdrant/) on
 * `service.host`:`service.grpc_port`: its server and the wrapper every method runs in.
 *
 * The wrapper, for each call: authentication (`api-key` metadata, or `authorization:
 * Bearer <jwt>`) and the access check of the REST operation the method names, both
 * through ts/api/guard.ts `decide` (so the same policy table and the same audit
 * records; the audit's method and path are the call's path, `/qdrant.Points/Upsert`);
 * an AbortSignal aborted when the client cancels or its deadline passes; the answer or
 * the error's status through the one table (status.ts); and the call's metrics.
 * The transport is Quiver's own HTTP/2 server for unary calls (./h2, docs/grpc.md
 * "Transport"): this module gets each call's path, headers, message and deadline, and
 * answers it once.
 *
 * Refusals: no or unknown credentials answer UNAUTHENTICATED, a token that is not valid
 * PERMISSION_DENIED (as the reference), a caller without access PERMISSION_DENIED
 * "Forbidden: ...", a request whose bytes cannot be decoded (proto.ts
 * UndecodableRequest) INVALID_ARGUMENT "Wrong input: the request could not be decoded:
 * ..." once the caller is authenticated (counted, and audited, like any other call).
 *
 * TLS: with `service.enable_tls` the same certificate and key as HTTPS, and with
 * `service.verify_https_client_certificate` client certificates are demanded and
 * checked against `tls.ca_cert`. Messages are bounded by `service.max_request_size_mb`.
 *
 * Owns: binding, the wrapper, shutdown. Must never: hold query, write or snapshot logic
 * (the service modules translate onto the same calls as REST), or import ts/api/rest.
 */

import * as net from 'node:net';
import { status as Code } from '@grpc/grpc-js';
import * as tls from 'node:tls';

import type { Logger } from 'pino';
import type { Registry } from 'prom-client';

import { MANAGE, type Access, type Requirement } from '../../auth/access';
import type { AuditLog } from '../../auth/audit';
import type { Authenticator } from '../../auth/authenticate';
import { requirementOf } from '../../auth/policy';
import { BadInputError } from '../../common/errors';
import type { Config } from '../../config/types';
import { decide } from '../guard';
import { watchTlsFiles, type RestTlsMaterial } from '../tls';
import { Http2Connection, type GrpcCall, type GrpcRequest } from './h2/connection';
import type { GrpcCallContext, GrpcMethod, GrpcService } from './method';
import { requestFinished, requestStarted } from '../../../bindings';
import { GrpcMetrics } from './metrics';
import { serviceDefinitions, SERVICE_NAMES, UndecodableRequest, type ServiceName } from './proto';
import { codeName, grpcErrorAnswer } from './status';

export interface GrpcApiDeps {
  logger: Logger;
  authn: Authenticator;
  audit: AuditLog | null;
  /** The node's metric registry (the one `GET /metrics` serves). */
  registry: Registry;
  /** The methods served, by service; an RPC of the contract that is absent answers UNIMPLEMENTED. */
  services: Partial<Record<ServiceName, GrpcService>>;
}

/** What `start` could not do: the node turns it into a StartupError. */
export class GrpcStartError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'GrpcStartError';
  }
}

/** The answer to an RPC of the contract that this version does not serve. */
export function unimplementedMessage(path: string): string {
  return `Not implemented: ${path} is not available in this version of Quiver`;
}

/** The metadata the authenticator reads, as headers. */
function headersOf(headers: Map<string, string>): Record<string, string | undefined> {
  return { 'api-key': headers.get('api-key'), authorization: headers.get('authorization') };
}

/** The requirement of a method's REST operation ('METHOD /pattern'); throws at start for a key the policy does not have. */
function requirementOfKey(key: string): Requirement {
  const space = key.indexOf(' ');
  if (space < 0) throw new Error(`gRPC method access ${JSON.stringify(key)}: expected 'METHOD /pattern'`);
  return requirementOf(key.slice(0, space), key.slice(space + 1));
}

/** One method of the contract as served: its path, codec and handler. */
interface Route {
  path: string;
  deserialize: (bytes: Buffer) => unknown;
  serialize: (value: unknown) => Buffer;
  method: GrpcMethod | undefined;
  need: Requirement | null;
}

export class GrpcApiServer {
  private closing: Promise<void> | null = null;
  private readonly connections = new Set<Http2Connection>();

  private constructor(
    private readonly server: net.Server,
    /** The port bound (the real one). */
    readonly port: number,
    private readonly stopReload: (() => void) | null,
  ) {}

  /** Binds `service.host`:`service.grpc_port` (which must not be null) and serves. Throws GrpcStartError when it cannot bind. */
  static async start(config: Config, deps: GrpcApiDeps, material: RestTlsMaterial | null): Promise<GrpcApiServer> {
    const port = config.service.grpc_port;
    if (port === null) throw new Error('service.grpc_port is null: gRPC is off');
    const maxMessageBytes = Math.floor(config.service.max_request_size_mb * 1024 * 1024);
    const metrics = new GrpcMetrics(deps.registry, config.service.metrics_prefix);
    const routes = new Map<string, Route>();
    const definitions = serviceDefinitions();
    for (const name of SERVICE_NAMES) {
      const definition = definitions[name];
      const methods = deps.services[name] ?? {};
      for (const rpc of Object.keys(methods)) {
        if (!(rpc in definition)) throw new Error(`${name} has no RPC ${rpc} in proto/qdrant`);
      }
      for (const [rpc, def] of Object.entries(definition)) {
        const method = methods[rpc];
        routes.set(def.path, {
          path: def.path,
          deserialize: def.requestDeserialize,
          serialize: def.responseSerialize as (value: unknown) => Buffer,
          method,
          need: method === undefined ? null : requirementOfKey(method.access),
        });
      }
    }
    const log = deps.logger.child({ api: 'grpc' });
    const handle = dispatcher(routes, deps, metrics);
    let self: GrpcApiServer | null = null;
    const serve = (socket: net.Socket) => {
      const conn = new Http2Connection(socket, socket.remoteAddress ?? null, handle, {
        maxMessageBytes,
        refused: (path, code) => metrics.observe(routes.has(path) ? path : 'unknown', codeName(code), 0),
        onError: (err) => log.debug({ err: err.message }, 'gRPC connection error'),
      });
      self?.connections.add(conn);
      socket.once('close', () => self?.connections.delete(conn));
    };

    let server: net.Server;
    let stopReload: (() => void) | null = null;
    if (material !== null) {
      const verify = config.service.verify_https_client_certificate;
      const secure = tls.createServer({
        cert: material.cert,
        key: material.key,
        ALPNProtocols: ['h2'],
        ...(verify ? { ca: material.ca ?? undefined, requestCert: true, rejectUnauthorized: true } : {}),
      });
      secure.on('secureConnection', (socket: tls.TLSSocket) => {
        // gRPC runs on HTTP/2 only: a client that did not choose it by ALPN is closed.
        if (socket.alpnProtocol !== 'h2') {
          socket.destroy();
          return;
        }
        serve(socket);
      });
      secure.on('tlsClientError', (err, socket) =>
        log.debug({ err: err.message, authorizationError: (socket as tls.TLSSocket).authorizationError, remoteAddress: socket.remoteAddress }, 'TLS handshake failed'),
      );
      stopReload = watchTlsFiles(config, log, material, (next) =>
        secure.setSecureContext({ cert: next.cert, key: next.key, ...(next.ca !== null ? { ca: next.ca } : {}) }),
      );
      server = secure;
    } else {
      server = net.createServer(serve);
    }
    const host = config.service.host;
    const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
    const bound = await new Promise<number>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve((server.address() as net.AddressInfo).port);
      });
    }).catch((err: Error) => {
      stopReload?.();
      server.close();
      throw new GrpcStartError(`the gRPC API cannot listen on ${address} (service.grpc_port): ${err.message}`);
    });
    server.on('error', (err) => log.error({ err }, 'gRPC server error'));
    if (material !== null) deps.logger.info({ ...material.facts, verifyClientCertificate: config.service.verify_https_client_certificate }, 'TLS enabled for the gRPC API');
    self = new GrpcApiServer(server, bound, stopReload);
    return self;
  }

  /** Stops accepting calls, lets calls in flight finish for up to `drainMs`, then cuts them. Safe to call twice. */
  close(drainMs: number): Promise<void> {
    this.stopReload?.();
    this.closing ??= new Promise<void>((resolve) => {
      this.server.close();
      const conns = [...this.connections];
      const timer = setTimeout(() => {
        for (const c of conns) c.destroy();
        resolve();
      }, drainMs);
      void Promise.all(conns.map((c) => c.shutdown())).then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
    return this.closing;
  }
}

/** The handler of every call: its route's method, or UNIMPLEMENTED for a method the contract has and this version does not serve, or a path the contract lacks. */
function dispatcher(routes: Map<string, Route>, deps: GrpcApiDeps, metrics: GrpcMetrics): (req: GrpcRequest, call: GrpcCall) => void {
  const { logger, authn, audit } = deps;
  return (req, call) => {
    const started = process.hrtime.bigint();
    // The connection, not the peer's address: connections from one host are clients of their own (demand.ts).
    requestStarted(req.connection);
    const route = routes.get(req.path);
    // Deadlines: the call's AbortSignal is made on first use (most handlers never read it);
    // a passed deadline answers DEADLINE_EXCEEDED at once, as the client expects.
    let aborter: AbortController | null = null;
    let ended: 'cancelled' | 'deadline' | null = null;
    let timer: NodeJS.Timeout | null = null;
    let finished = false;
    const deadline = req.deadline;
    const timeoutMs = deadline === null ? null : Math.max(0, deadline - Date.now());
    const pastDeadline = () => deadline !== null && Date.now() >= deadline;
    const finish = (code: Code, details: string | null, value?: unknown) => {
      if (finished) return;
      // A deadline that passed before its timer ran (a busy event loop) still decides.
      if (ended === null && pastDeadline()) end('deadline');
      finished = true;
      requestFinished();
      if (timer !== null) clearTimeout(timer);
      const counted = ended === 'deadline' ? Code.DEADLINE_EXCEEDED : ended === 'cancelled' ? Code.CANCELLED : code;
      metrics.observe(route === undefined ? 'unknown' : req.path, codeName(counted), Number(process.hrtime.bigint() - started) / 1e9);
      if (ended !== null) return; // answered (deadline) or cancelled already
      if (code !== Code.OK) {
        call.fail(code, details ?? '');
        return;
      }
      let bytes: Buffer;
      try {
        bytes = route!.serialize(value);
      } catch (err) {
        logger.error({ err, path: req.path }, 'a gRPC answer could not be encoded');
        call.fail(Code.INTERNAL, 'Service internal error: the answer could not be encoded');
        return;
      }
      call.ok(bytes);
    };
    const end = (why: 'cancelled' | 'deadline') => {
      if (ended !== null || finished) return;
      ended = why;
      aborter?.abort(why);
      if (why === 'deadline') call.fail(Code.DEADLINE_EXCEEDED, 'Deadline Exceeded');
    };
    if (timeoutMs !== null) timer = setTimeout(() => end('deadline'), timeoutMs);
    call.onCancel = () => end('cancelled');
    const signal = (): AbortSignal => {
      if (aborter === null) {
        if (ended === null && pastDeadline()) end('deadline');
        aborter = new AbortController();
        if (ended !== null) aborter.abort(ended);
      }
      return aborter.signal;
    };
    if (route === undefined || route.method === undefined || route.need === null) {
      finish(Code.UNIMPLEMENTED, unimplementedMessage(req.path));
      return;
    }
    const { method, need } = route;
    // The contract's deserializers never throw: they answer an UndecodableRequest (proto.ts).
    const request = route.deserialize(req.message);
    const undecodable = request instanceof UndecodableRequest ? request : null;
    void (async () => {
      try {
        let access: Access = MANAGE;
        if (need.scope !== 'open' && authn.enabled) {
          // A request that could not be decoded names no collection: its caller must be
          // known (any valid credentials), and the call is refused below whatever its access.
          const requirement: Requirement = undecodable !== null && need.scope === 'collection' ? { scope: 'listing' } : need;
          const decision = await decide(authn, audit, requirement, {
            headers: headersOf(req.headers),
            method: req.path,
            path: req.path,
            params: undecodable === null ? (method.params?.(request) ?? {}) : {},
            address: req.peer,
          });
          if (!('access' in decision)) {
            finish(decision.status === 401 ? Code.UNAUTHENTICATED : Code.PERMISSION_DENIED, decision.message);
            return;
          }
          access = decision.access;
        }
        if (undecodable !== null) throw new BadInputError(`the request could not be decoded: ${undecodable.reason}`);
        const ctx: GrpcCallContext = {
          access,
          get signal() {
            return signal();
          },
          timeoutMs,
        };
        const value = await method.handle(request, ctx);
        finish(Code.OK, null, value);
      } catch (err) {
        const answer = grpcErrorAnswer(err, logger, req.path);
        finish(answer.code, answer.details);
      }
    })();
  };
}
