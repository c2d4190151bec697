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

import * as grpc from '@grpc/grpc-js';
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
import type { GrpcCallContext, GrpcMethod, GrpcService } from './method';
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

/** The metadata the authenticator reads, as headers (first value of each key). */
function headersOf(metadata: grpc.Metadata): Record<string, string | undefined> {
  const out: Record<string, string | undefined> = {};
  for (const key of ['api-key', 'authorization']) {
    const v = metadata.get(key)[0];
    if (v !== undefined) out[key] = typeof v === 'string' ? v : v.toString('utf8');
  }
  return out;
}

/** The host of a grpc-js peer string (`ipv4:1.2.3.4:5`, `ipv6:[::1]:5`). */
function addressOf(peer: string): string | null {
  const s = peer.replace(/^ipv[46]:/, '');
  const m = /^\[([^\]]+)\]:\d+$/.exec(s) ?? /^([^:]+):\d+$/.exec(s);
  return m ? m[1] : null;
}

/** The requirement of a method's REST operation ('METHOD /pattern'); throws at start for a key the policy does not have. */
function requirementOfKey(key: string): Requirement {
  const space = key.indexOf(' ');
  if (space < 0) throw new Error(`gRPC method access ${JSON.stringify(key)}: expected 'METHOD /pattern'`);
  return requirementOf(key.slice(0, space), key.slice(space + 1));
}

type Unary = grpc.handleUnaryCall<unknown, unknown>;

type CaListener = grpc.experimental.CaCertificateUpdateListener;
type IdentityListener = grpc.experimental.IdentityCertificateUpdateListener;

/**
 * The certificate files (as loadRestTls read and checked them) for grpc-js: the server's
 * certificate and key, and the CA its clients' certificates must be signed by. `update`
 * hands a reloaded set to the server (new connections use it).
 */
class TlsFiles implements grpc.experimental.CertificateProvider {
  private readonly caListeners = new Set<CaListener>();
  private readonly identityListeners = new Set<IdentityListener>();

  constructor(private material: RestTlsMaterial) {}

  update(next: RestTlsMaterial): void {
    this.material = next;
    for (const l of this.caListeners) l(this.caUpdate());
    for (const l of this.identityListeners) l(this.identityUpdate());
  }

  private caUpdate() {
    return this.material.ca === null ? null : { caCertificate: this.material.ca };
  }

  private identityUpdate() {
    return { certificate: this.material.cert, privateKey: this.material.key };
  }

  // The first answer goes out after the listener is registered: grpc-js starts watching
  // the credentials only once the call that adds the listener returns.
  addCaCertificateListener(l: CaListener): void {
    this.caListeners.add(l);
    queueMicrotask(() => this.caListeners.has(l) && l(this.caUpdate()));
  }

  removeCaCertificateListener(l: CaListener): void {
    this.caListeners.delete(l);
  }

  addIdentityCertificateListener(l: IdentityListener): void {
    this.identityListeners.add(l);
    queueMicrotask(() => this.identityListeners.has(l) && l(this.identityUpdate()));
  }

  removeIdentityCertificateListener(l: IdentityListener): void {
    this.identityListeners.delete(l);
  }
}

export class GrpcApiServer {
  private closing: Promise<void> | null = null;

  private constructor(
    private readonly server: grpc.Server,
    /** The port bound (the real one). */
    readonly port: number,
    private readonly stopReload: (() => void) | null,
  ) {}

  /** Binds `service.host`:`service.grpc_port` (which must not be null) and serves. Throws GrpcStartError when it cannot bind. */
  static async start(config: Config, deps: GrpcApiDeps, tls: RestTlsMaterial | null): Promise<GrpcApiServer> {
    const port = config.service.grpc_port;
    if (port === null) throw new Error('service.grpc_port is null: gRPC is off');
    const limit = Math.floor(config.service.max_request_size_mb * 1024 * 1024);
    const server = new grpc.Server({ 'grpc.max_receive_message_length': limit });
    const metrics = new GrpcMetrics(deps.registry, config.service.metrics_prefix);
    const definitions = serviceDefinitions();
    for (const name of SERVICE_NAMES) {
      const definition = definitions[name];
      const methods = deps.services[name] ?? {};
      for (const rpc of Object.keys(methods)) {
        if (!(rpc in definition)) throw new Error(`${name} has no RPC ${rpc} in proto/qdrant`);
      }
      const impl: Record<string, Unary> = {};
      for (const [rpc, def] of Object.entries(definition)) {
        impl[rpc] = wrap(def.path, methods[rpc], deps, metrics);
      }
      server.addService(definition, impl);
    }

    let creds = grpc.ServerCredentials.createInsecure();
    let stopReload: (() => void) | null = null;
    if (tls !== null) {
      const verify = config.service.verify_https_client_certificate;
      const files = new TlsFiles(tls);
      // grpc-js 1.14 hands this function's first argument to the credentials' identity
      // slot and its second to the CA slot (the reverse of its declared names); the same
      // provider serves both, and the CA slot is null when client certificates are not
      // checked (no certificate is asked for). Pinned by test/grpc/tls.test.ts.
      creds = grpc.experimental.createCertificateProviderServerCredentials(files, verify ? files : (null as unknown as TlsFiles), verify);
      stopReload = watchTlsFiles(config, deps.logger.child({ api: 'grpc' }), tls, (next) => files.update(next));
    }
    const host = config.service.host;
    const address = `${host.includes(':') ? `[${host}]` : host}:${port}`;
    const bound = await new Promise<number>((resolve, reject) => {
      server.bindAsync(address, creds, (err, p) => (err ? reject(err) : resolve(p)));
    }).catch((err: Error) => {
      stopReload?.();
      server.forceShutdown();
      throw new GrpcStartError(`the gRPC API cannot listen on ${address} (service.grpc_port): ${err.message}`);
    });
    if (tls !== null) deps.logger.info({ ...tls.facts, verifyClientCertificate: config.service.verify_https_client_certificate }, 'TLS enabled for the gRPC API');
    return new GrpcApiServer(server, bound, stopReload);
  }

  /** Stops accepting calls, lets calls in flight finish for up to `drainMs`, then cuts them. Safe to call twice. */
  close(drainMs: number): Promise<void> {
    this.stopReload?.();
    this.closing ??= new Promise<void>((resolve) => {
      const timer = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, drainMs);
      this.server.tryShutdown(() => {
        clearTimeout(timer);
        resolve();
      });
    });
    return this.closing;
  }
}

/** The handler grpc-js runs for one RPC: `method`, or UNIMPLEMENTED when absent. */
function wrap(path: string, method: GrpcMethod | undefined, deps: GrpcApiDeps, metrics: GrpcMetrics): Unary {
  const { logger, authn, audit } = deps;
  const need = method === undefined ? null : requirementOfKey(method.access);
  return (call, callback) => {
    const started = process.hrtime.bigint();
    // The context's signal is made on first use: most handlers never read it, and an
    // AbortController (with a deadline timer) per call costs every call. Until then the
    // call only records why it ended early.
    let aborter: AbortController | null = null;
    let ended: 'cancelled' | 'deadline' | null = null;
    let timer: NodeJS.Timeout | null = null;
    let finished = false;
    const deadline = call.getDeadline();
    const deadlineMs = deadline instanceof Date ? deadline.getTime() : deadline;
    const timeoutMs = Number.isFinite(deadlineMs) ? Math.max(0, deadlineMs - Date.now()) : null;
    const pastDeadline = () => timeoutMs !== null && Date.now() >= deadlineMs;
    const end = (why: 'cancelled' | 'deadline') => {
      if (ended !== null) return;
      ended = why;
      aborter?.abort(why);
    };
    const signal = (): AbortSignal => {
      if (aborter === null) {
        aborter = new AbortController();
        if (ended === null && pastDeadline()) ended = 'deadline';
        if (ended !== null) aborter.abort(ended);
        else if (timeoutMs !== null && !finished) timer = setTimeout(() => end('deadline'), Math.max(0, deadlineMs - Date.now()));
      }
      return aborter.signal;
    };
    const finish = (code: grpc.status, details: string | null, value?: unknown) => {
      if (finished) return;
      finished = true;
      if (timer !== null) clearTimeout(timer);
      // A call the client cancelled, or whose deadline passed, is counted as such (grpc-js
      // has already answered it).
      if (ended === null && pastDeadline()) ended = 'deadline';
      const counted = ended === 'deadline' ? grpc.status.DEADLINE_EXCEEDED : ended === 'cancelled' ? grpc.status.CANCELLED : code;
      metrics.observe(path, codeName(counted), Number(process.hrtime.bigint() - started) / 1e9);
      if (code === grpc.status.OK) callback(null, value);
      else callback({ code, details: details ?? '' });
    };
    if (method === undefined || need === null) {
      finish(grpc.status.UNIMPLEMENTED, unimplementedMessage(path));
      return;
    }
    // 'cancelled' may also follow grpc-js's own answer to a passed deadline: named by the clock.
    call.on('cancelled', () => end(pastDeadline() ? 'deadline' : 'cancelled'));
    const undecodable = call.request instanceof UndecodableRequest ? call.request : null;
    void (async () => {
      try {
        let access: Access = MANAGE;
        if (need.scope !== 'open' && authn.enabled) {
          // A request that could not be decoded names no collection: its caller must be
          // known (any valid credentials), and the call is refused below whatever its access.
          const requirement: typeof need = undecodable !== null && need.scope === 'collection' ? { scope: 'listing' } : need;
          const decision = await decide(authn, audit, requirement, {
            headers: headersOf(call.metadata),
            method: path,
            path,
            params: undecodable === null ? (method.params?.(call.request) ?? {}) : {},
            address: addressOf(call.getPeer()),
          });
          if (!('access' in decision)) {
            finish(decision.status === 401 ? grpc.status.UNAUTHENTICATED : grpc.status.PERMISSION_DENIED, decision.message);
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
        const value = await method.handle(call.request, ctx);
        finish(grpc.status.OK, null, value);
      } catch (err) {
        const answer = grpcErrorAnswer(err, logger, path);
        finish(answer.code, answer.details);
      }
    })();
  };
}
