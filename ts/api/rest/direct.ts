/**
 * The direct lane: the hot read routes (query, search, recommend and their batch forms)
 * served straight from node:http, in front of Koa.
 *
 * Why: on the two-core machines we measure on, Koa's per-request machinery (context
 * objects, the middleware chain, the router, on-finished, the response delegation)
 * cost about as much main-thread time as the rest of a 100k-point query put together
 * (bench/results/rest-*.md). Similarity queries are what an application sends most, so
 * those routes skip it; everything else still goes through Koa.
 *
 * The answers are the same: a route is declared once (RouteTable.addDirect) with one
 * handler that both paths call, and the guard (ts/api/guard.ts `decide`), the body reader
 * (body.ts), the error mapping (errors.ts `errorAnswer`), the envelope and the request
 * log and metrics (stats.ts `requestDone`) are the same functions. test/api/direct.test.ts
 * sends the same requests both ways and compares status, headers and bodies.
 *
 * A request goes to Koa instead when anything would need its other middleware: a
 * method or path that is not exactly a direct route's (a trailing slash, a path
 * parameter that does not percent-decode, a `#` anywhere in the URL), or an `Origin`
 * header while CORS is on. Query parameters are parsed as Koa parses them.
 *
 * Owns: matching those requests and writing their answers. Must never: decide access,
 * parse a route's body fields or map errors itself (the shared functions do).
 */

import type { IncomingHttpHeaders, IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Logger } from 'pino';

import type { Requirement } from '../../auth/access';
import type { AuditLog } from '../../auth/audit';
import type { Authenticator } from '../../auth/authenticate';
import { requirementOf } from '../../auth/policy';
import { requestFinished, requestStarted } from '../../../bindings';
import { ClientClosedError, errorAnswer, retryAfterOf } from '../errors';
import { okText } from '../envelope';
import { decide } from '../guard';
import { parseJsonBody, readJsonBody } from './body';
import type { VectorPlaces } from './json-numbers';
import { parseQueryString, type RequestInput } from '../request/parse';
import type { HttpMethod } from './method';
import { clientConnection } from './connection';
import { requestDone, type RequestStats } from './stats';

/** A request the lane serves: its route, path parameters (decoded), path and raw query string. */
export interface DirectMatch {
  route: DirectRoute;
  params: Record<string, string>;
  path: string;
  query: string;
}

/** What the lane answers: status, Content-Type, body, and a Retry-After (seconds) or null. */
export interface DirectAnswer {
  status: number;
  type: string;
  text: string;
  retryAfter: number | null;
}

/** A route handler that both paths call: the `result` of the 200 envelope, or a throw. */
export type DirectHandler = (r: RequestInput) => Promise<unknown>;

export interface DirectRoute {
  method: HttpMethod;
  pattern: string;
  /** Path segments: a literal, or the name of a parameter (`{name}` in the pattern). */
  segments: Array<{ literal: string } | { param: string }>;
  /** Its access requirement, or null when the route is open or authentication is off. */
  need: Exclude<Requirement, { scope: 'open' }> | null;
  handler: DirectHandler;
  /** Where its bodies hold dense vectors read as Float32Arrays (json-numbers.ts). */
  places: VectorPlaces;
}

export interface DirectLaneOptions {
  logger: Logger;
  stats: RequestStats;
  bodyLimitBytes: number;
  authn: Authenticator;
  audit: AuditLog | null;
  /** service.enable_cors: requests with an Origin header then go through Koa's CORS middleware. */
  cors: boolean;
}

const JSON_TYPE = 'application/json; charset=utf-8';

function secondsSince(started: bigint): number {
  return Number(process.hrtime.bigint() - started) / 1e9;
}
const TEXT_TYPE = 'text/plain; charset=utf-8';

/** A string with its own storage (not a slice of a longer one). Exact for any string without lone surrogates, which URLs and their decoded parts never hold. */
function copied(s: string): string {
  return Buffer.from(s, 'utf8').toString('utf8');
}

/** Method-and-URL pairs whose match the lane keeps (all are dropped when it is full). */
const MATCH_CACHE_SIZE = 512;
/** Longer URLs are matched each time (the cache stays small). */
const MATCH_CACHE_URL = 256;

export class DirectLane {
  private readonly routes: DirectRoute[] = [];
  private readonly matches = new Map<string, DirectMatch>();

  constructor(private readonly opts: DirectLaneOptions) {}

  add(method: HttpMethod, pattern: string, handler: DirectHandler, places: VectorPlaces = 'none'): void {
    const segments = pattern
      .split('/')
      .slice(1)
      .map((s) => {
        const m = /^\{([A-Za-z_][A-Za-z0-9_]*)\}$/.exec(s);
        return m ? { param: m[1] } : { literal: s };
      });
    const need = requirementOf(method, pattern);
    this.routes.push({ method, pattern, segments, need: need.scope === 'open' || !this.opts.authn.enabled ? null : need, handler, places });
    this.matches.clear();
  }

  /** A request listener that serves the direct routes and hands everything else to `fallback` (Koa). */
  listener(fallback: RequestListener): RequestListener {
    return (req, res) => {
      const hit = this.match(req);
      if (hit === null) fallback(req, res);
      else void this.serve(hit, req, res);
    };
  }

  /** The direct route `req` asks for, with its parameters; null when the lane leaves the request to Koa. */
  match(req: { headers: IncomingHttpHeaders; url?: string; method?: string }): DirectMatch | null {
    if (this.opts.cors && req.headers.origin !== undefined) return null;
    // The answer depends on the method and URL only: a client sends the same few over and
    // over, so it is kept (splitting and decoding the path took 0.8-0.9 µs of the event
    // loop per query, a kept match 0.25: bench/rest/envelope.ts). Kept matches and their
    // parameters are frozen: requests share them.
    const url = req.url ?? '';
    if (url.length > MATCH_CACHE_URL) return this.matchUncached(url, req.method);
    const key = `${req.method ?? ''} ${url}`;
    const known = this.matches.get(key);
    if (known !== undefined) return known;
    const hit = this.matchUncached(url, req.method);
    // Only the lane's own routes are kept: URLs left to Koa (a GET of each point id, say)
    // would push them out. What is kept is copied: a string cut from a request head can
    // hold the whole head (its credentials among it) for as long as it lives.
    if (hit === null) return null;
    const params: Record<string, string> = {};
    for (const [name, value] of Object.entries(hit.params)) params[name] = copied(value);
    const kept: DirectMatch = Object.freeze({ route: hit.route, params: Object.freeze(params), path: copied(hit.path), query: copied(hit.query) });
    if (this.matches.size >= MATCH_CACHE_SIZE) this.matches.clear();
    this.matches.set(copied(key), kept);
    return kept;
  }

  /** match() without the kept matches (and without the CORS check): bench/rest/envelope.ts compares the two. */
  matchUncached(url: string, method: string | undefined): DirectMatch | null {
    // A fragment (never sent by a browser, but a raw client can): Koa's URL parsing decides.
    if (url.includes('#')) return null;
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (path.charCodeAt(0) !== 47 /* '/' */) return null;
    const parts = path.split('/');
    for (const route of this.routes) {
      if (route.method !== method || route.segments.length !== parts.length - 1) continue;
      const params: Record<string, string> = {};
      let ok = true;
      for (let i = 0; i < route.segments.length && ok; i++) {
        const seg = route.segments[i];
        const part = parts[i + 1];
        if ('literal' in seg) ok = seg.literal === part;
        else if (part === '') ok = false;
        else {
          try {
            params[seg.param] = decodeURIComponent(part);
          } catch {
            return null; // Koa's router decides what a malformed escape means.
          }
        }
      }
      if (ok) return { route, params, path, query: q < 0 ? '' : url.slice(q + 1) };
    }
    return null;
  }

  private serve(hit: DirectMatch, req: IncomingMessage, res: ServerResponse): Promise<void> {
    return this.exchange(hit, req.headers, clientConnection(req.socket), req.socket.remoteAddress ?? null, () => this.body(req, hit.route.places), (a) => {
      if (res.destroyed || res.headersSent) return;
      res.on('error', this.onResponseError);
      res.writeHead(a.status, a.retryAfter === null ? { 'Content-Type': a.type, 'Content-Length': Buffer.byteLength(a.text) } : { 'Content-Type': a.type, 'Content-Length': Buffer.byteLength(a.text), 'Retry-After': String(a.retryAfter) });
      res.end(a.text);
    });
  }

  /**
   * Serves a request the HTTP front (front.ts) read off its socket `client`: `hit` from
   * match(), `raw` its whole body, or null when the client went away before sending it.
   * `write` gets the answer, once. As on the node:http path, a body is not read once the
   * client has gone (499, ClientClosedError), also when it had arrived whole.
   */
  serveParsed(hit: DirectMatch, headers: IncomingHttpHeaders, client: Socket, raw: Buffer | null, write: (a: DirectAnswer) => void): Promise<void> {
    const readBody = () => {
      if (raw === null || client.destroyed) throw new ClientClosedError(raw === null ? 'the client went away while its body was being read' : 'the client went away before its body was read');
      return raw.length === 0 ? undefined : parseJsonBody(raw, hit.route.places);
    };
    return this.exchange(hit, headers, client, client.remoteAddress ?? null, readBody, write);
  }

  /** One request on either path: the demand signal, the answer, its writing, the log line and metrics. */
  private async exchange(hit: DirectMatch, headers: IncomingHttpHeaders, connection: object, address: string | null, readBody: () => unknown, write: (a: DirectAnswer) => void): Promise<void> {
    const started = process.hrtime.bigint();
    const { route, path } = hit;
    requestStarted(connection);
    try {
      const a = await this.answer(route, hit.params, path, hit.query, headers, address, readBody, started);
      write(a);
      requestDone(this.opts.logger, this.opts.stats, route.method, path, route.pattern, a.status, secondsSince(started));
    } finally {
      requestFinished();
    }
  }

  private async answer(route: DirectRoute, params: Record<string, string>, path: string, query: string, headers: IncomingHttpHeaders, address: string | null, readBody: () => unknown, started: bigint): Promise<DirectAnswer> {
    const { logger } = this.opts;
    const method = route.method;
    try {
      const decision = route.need === null ? null : await decide(this.opts.authn, this.opts.audit, route.need, { headers, method, path, params, address });
      if (decision !== null && !('access' in decision)) return { status: decision.status, type: TEXT_TYPE, text: decision.message, retryAfter: null };
      const body = await readBody();
      const result = await route.handler({ params, query: query === '' ? {} : parseQueryString(query), request: { body }, access: decision?.access });
      return { status: 200, type: JSON_TYPE, text: okText(result, secondsSince(started)), retryAfter: null };
    } catch (err) {
      const answer = errorAnswer(err, logger, method, path);
      return { status: answer.status, type: JSON_TYPE, text: JSON.stringify({ status: { error: answer.message }, time: secondsSince(started) }), retryAfter: retryAfterOf(err) };
    }
  }

  /** One listener for every response's 'error' (a client gone mid-answer), instead of a closure per request. */
  private readonly onResponseError = (err: Error): void => this.opts.logger.warn({ err }, 'error while sending a response');

  /**
   * The JSON body, as readJsonBody reads it. A query body nearly always arrives in the
   * same TCP read as the request head: node:http pushes it into the request right after
   * emitting the request, in the same call, so one microtask later the whole body (as
   * many bytes as Content-Length says) sits in the request's buffer. It is then taken
   * from there in one read, with the same limit and parser, instead of through a Promise
   * and four stream listeners; the request is then resumed so its end flows as when it
   * is read by listeners. Anything else (a body still arriving, chunked, over the limit,
   * a request already read or gone) goes through readJsonBody.
   */
  private async body(req: IncomingMessage, places: VectorPlaces): Promise<unknown> {
    await undefined;
    const declared = Number(req.headers['content-length']);
    if (declared !== req.readableLength || declared > this.opts.bodyLimitBytes || req.readableFlowing !== null || req.destroyed || req.headers['transfer-encoding'] !== undefined) {
      return readJsonBody(req, this.opts.bodyLimitBytes, places);
    }
    const raw = declared === 0 ? null : (req.read() as Buffer | null);
    req.resume();
    return raw === null || raw.length === 0 ? undefined : parseJsonBody(raw, places);
  }
}
