/**
 * Review of the direct lane (ts/api/rest/direct.ts): HTTP edge cases that
 * test/api/direct.test.ts does not send, each down the lane (A: lane in front of Koa),
 * through Koa alone (B) and through the HTTP front (F, front.ts, before A's stack),
 * comparing what the client gets and what the request log says.
 *
 * Passing cases (checked, the same on both paths): Expect: 100-continue, pipelined
 * requests in one write, a client aborting mid-body, a client going away mid-handler,
 * a handler throwing synchronously, HEAD and GET on a direct path.
 *
 * Two cases are bugs this review found, now fixed and kept as tests:
 *  - (both paths, body.ts readLimited) a client that went away while the guard was
 *    still deciding (an async authenticator: JWT verify, a value_exists lookup) left a
 *    request that never ended: readLimited attached its listeners to a request stream
 *    already destroyed. No log line, no metrics. readLimited now refuses a destroyed
 *    request at once.
 *  - (Koa path) an answer that JSON.stringify cannot encode (here a BigInt; in
 *    production a result over V8's string limit) answered Koa's 500 text/plain while
 *    the request log and metrics said 200. envelope.ts ok() now encodes inside the
 *    request, so both paths answer a 500 envelope and log 500.
 */

import * as net from 'node:net';

import test from 'ava';
import { Router } from '@koa/router';
import { SignJWT } from 'jose';

import type { RestApp } from '../../ts/api/rest/app';
import { RouteTable } from '../../ts/api/rest/route';
import { Authenticator } from '../../ts/auth/authenticate';
import type { Config } from '../../ts/config/types';
import { DEADLINE_MS, sleep, waitFor } from '../support/wait';
import { LaneHarness, type LanePair } from './lane-pair';

const KEY = 'direct-review-api-key-0123456789abcdef0123';

/**
 * A point where server code waits until the test lets it go on, and tells when it got
 * there: the cases of a client that leaves "while the handler runs" or "while the guard
 * decides" order the two events by these, not by timers racing each other.
 */
class Gate {
  private reached!: () => void;
  private release!: () => void;
  /** Resolves once the server code is waiting at the gate. */
  readonly entered = new Promise<void>((r) => (this.reached = r));
  private readonly opened = new Promise<void>((r) => (this.release = r));
  /** Called by the server code: waits until the test opens the gate. */
  pass(): Promise<void> {
    this.reached();
    return this.opened;
  }
  open(): void {
    this.release();
  }
}

/** The gate of the SLOW handler (null: it answers after 150 ms). */
let slowHandlerGate: Gate | null = null;
/** The gate of the value_exists lookup in the slow guard (null: it answers after 200 ms). */
let lookupGate: Gate | null = null;

let h: LaneHarness;
let plain: LanePair;
let slowAuth: LanePair;

/**
 * Extra direct routes for the review, declared with RouteTable.addDirect exactly as
 * points.ts declares its routes, on a router placed before the app's router. They
 * borrow the patterns (and access policy) of three routes the lane does not serve
 * (Koa serves them; every POST read is on the lane now), on a collection named "review".
 */
const SLOW = '/collections/review/points/payload/delete';
const THROW_SYNC = '/collections/review/points/payload/clear';
const BIGINT = '/collections/review/points/vectors/delete';
function addReviewRoutes(rest: RestApp, cfg: Config): void {
  const router = new Router();
  const routes = new RouteTable(router, cfg.service.max_request_size_mb * 1024 * 1024, () => null, rest.lane);
  routes.addDirect('POST', '/collections/{collection_name}/points/payload/delete', async () => {
    if (slowHandlerGate !== null) await slowHandlerGate.pass();
    else await sleep(150);
    return { slow: true };
  });
  routes.addDirect('POST', '/collections/{collection_name}/points/payload/clear', ((() => {
    throw new Error('thrown synchronously by a handler');
  }) as unknown) as () => Promise<unknown>);
  routes.addDirect('POST', '/collections/{collection_name}/points/vectors/delete', async () => ({ n: 1n }));
  // Before the app's router (the last two middleware are the app's router and the 404).
  const mw = (rest.app as unknown as { middleware: unknown[] }).middleware;
  mw.splice(mw.length - 2, 0, router.routes());
}

function pair(cfg: Config, authenticator?: Authenticator): Promise<LanePair> {
  return h.pair(cfg, authenticator ? { authenticator } : {}, (rest) => addReviewRoutes(rest, cfg));
}

test.before(async () => {
  h = await LaneHarness.open('quiver-direct-review-');
  plain = await pair(h.config());
  const secured = h.config({ SERVICE__SERVICE__API_KEY: KEY, SERVICE__SERVICE__JWT_RBAC: 'true' });
  // A value_exists claim is looked up in storage; here the lookup takes 200 ms (or waits at its gate).
  slowAuth = await pair(
    secured,
    new Authenticator({ apiKey: KEY, readOnlyKey: null, jwtRbac: true }, async () => {
      if (lookupGate !== null) await lookupGate.pass();
      else await sleep(200);
      return 'found';
    }),
  );
  // A collection for the real routes.
  const body = '{"vectors":{"size":4,"distance":"Euclid"}}';
  const r = await rawExchange(plain.portB, `PUT /collections/c HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`);
  if (!r.startsWith('HTTP/1.1 200')) throw new Error(`setup: ${r}`);
});

test.after.always(async () => {
  await h?.close();
});

/**
 * Writes `text` on a fresh connection and returns all the server sends until it closes.
 * `leave` makes the client go away first: after that many milliseconds, or once that
 * promise resolves. Without it, the wait for the close is bounded only for a server that
 * never closes.
 */
function rawExchange(port: number, text: string | string[], leave: number | Promise<unknown> = DEADLINE_MS): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const done = () => resolve(Buffer.concat(chunks).toString('latin1'));
    const goAway = () => {
      sock.destroy();
      done();
    };
    const timer = typeof leave === 'number' ? setTimeout(goAway, leave) : undefined;
    if (typeof leave !== 'number') void leave.then(goAway);
    sock.on('data', (c) => chunks.push(c));
    sock.on('error', reject);
    sock.on('close', () => {
      clearTimeout(timer);
      done();
    });
    sock.on('connect', async () => {
      for (const part of Array.isArray(text) ? text : [text]) {
        sock.write(part);
        await sleep(30);
      }
    });
  });
}

/** The response heads and bodies without what changes between requests (date, time). */
function normalise(raw: string): string {
  return raw
    .replace(/^Date: .*\r\n/gim, '')
    .replace(/^Keep-Alive: .*\r\n/gim, '')
    .replace(/"time":[-0-9.eE+]+/g, '"time":T')
    .replace(/^Content-Length: .*\r\n/gim, '')
    .replace(/^Connection: .*\r\n/gim, '');
}

function requestLogSince(from: number, p: string): Array<Record<string, unknown>> {
  return h.logLines.slice(from).filter((l) => l.msg === 'request' && l.path === p).map(({ method, path: lp, route, status }) => ({ method, path: lp, route, status }));
}

const Q = '{"query":[1,2,3,4],"limit":2}';
const post = (p: string, body: string, extra = '') => `POST ${p} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

/** What the lane (A), Koa (B) and the HTTP front (F) answer to `text`, normalised. */
async function allRaw(p: LanePair, text: string | string[]): Promise<[string, string, string]> {
  const a = await rawExchange(p.portA, text);
  const b = await rawExchange(p.portB, text);
  const f = await rawExchange(p.portF, text);
  return [normalise(a), normalise(b), normalise(f)];
}

/** The request's log line, once there is one: the server may log after the client has gone. */
async function loggedSince(from: number, p: string): Promise<Array<Record<string, unknown>>> {
  await waitFor(`a request log line for ${p}`, () => requestLogSince(from, p).length > 0);
  return requestLogSince(from, p);
}

/**
 * Sends `text` on `port` and leaves once the server code waits at `gate`; then waits
 * until the server has seen the client go (its connection closed), and only then opens
 * the gate. Returns the request's log line(s).
 */
async function leaveAtGate(gate: Gate, port: number, text: string, p: string): Promise<Array<Record<string, unknown>>> {
  const log0 = h.logLines.length;
  try {
    await rawExchange(port, text, gate.entered);
    await waitFor('the server to see the client go', async () => (await h.openConnections(port)) === 0);
  } finally {
    gate.open(); // also when the wait failed: the server code must not wait for ever
  }
  return loggedSince(log0, p);
}

// ---- checked and the same on both paths ----------------------------------------------

test.serial('Expect: 100-continue answers alike', async (t) => {
  const head = `POST /collections/c/points/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Q.length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`;
  const [a, b, f] = await allRaw(plain, [head, Q]);
  t.regex(b, /^HTTP\/1\.1 100 Continue/);
  t.is(a, b);
  t.is(f, b);
});

test.serial('three pipelined requests in one write answer alike and in order', async (t) => {
  const text =
    post('/collections/c/points/query', Q) +
    post('/collections/c/points/count', '{') +
    post('/collections/c/points/scroll', '{"limit":1}', 'Connection: close\r\n');
  const hits = plain.koaHits;
  const served = plain.front.served;
  const [a, b, f] = await allRaw(plain, text);
  t.is(plain.koaHits, hits, 'the lane served all three');
  t.is(plain.front.served - served, 3, 'the front answered all three');
  t.deepEqual(b.match(/HTTP\/1\.1 [0-9]+/g), ['HTTP/1.1 200', 'HTTP/1.1 400', 'HTTP/1.1 200']);
  t.is(a, b);
  t.is(f, b);
});

test.serial('a client aborting mid-body: same answer (none) and same log line', async (t) => {
  const partial = `POST /collections/c/points/query HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"query":`;
  const log0 = h.logLines.length;
  await rawExchange(plain.portA, partial, 100);
  const logA = await loggedSince(log0, '/collections/c/points/query');
  const log1 = h.logLines.length;
  await rawExchange(plain.portB, partial, 100);
  const logB = await loggedSince(log1, '/collections/c/points/query');
  const log2 = h.logLines.length;
  await rawExchange(plain.portF, partial, 100);
  const logF = await loggedSince(log2, '/collections/c/points/query');
  t.is(logB.length, 1);
  t.deepEqual(logA, logB);
  t.deepEqual(logF, logB);
  t.is(logB[0].status, 499, 'a client gone mid-body is logged as 499 (client closed), not a 500');
  t.log(`both log ${JSON.stringify(logB[0])}`);
});

test.serial('a client going away while the handler runs: same log line on both paths', async (t) => {
  const [logA, logB, logF] = [[] as Array<Record<string, unknown>>, [] as Array<Record<string, unknown>>, [] as Array<Record<string, unknown>>];
  for (const [port, log] of [
    [plain.portA, logA],
    [plain.portB, logB],
    [plain.portF, logF],
  ] as const) {
    slowHandlerGate = new Gate();
    try {
      log.push(...(await leaveAtGate(slowHandlerGate, port, post(SLOW, '{}'), SLOW)));
    } finally {
      slowHandlerGate = null;
    }
  }
  t.is(logB.length, 1);
  t.deepEqual(logA, logB);
  t.deepEqual(logF, logB);
  t.log(`all log ${JSON.stringify(logB[0])} for a client that went away`);
});

test.serial('a handler throwing synchronously: a 500 envelope on both paths', async (t) => {
  const [a, b, f] = await allRaw(plain, post(THROW_SYNC, '{}', 'Connection: close\r\n'));
  t.regex(b, /^HTTP\/1\.1 500/);
  t.is(a, b);
  t.is(f, b);
});

test.serial('HEAD and GET on a direct path go to Koa', async (t) => {
  const hits = plain.koaHits;
  const [a, b, f] = await allRaw(plain, 'HEAD /collections/c/points/query HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  t.is(plain.koaHits, hits + 2);
  t.is(a, b);
  t.is(f, b);
});

test.serial('control for the next case: the same request with a slow guard, client waiting, ends on both paths', async (t) => {
  const token = await valueExistsToken();
  const req = post('/collections/c/points/query', Q, `Authorization: Bearer ${token}\r\nConnection: close\r\n`);
  for (const port of [slowAuth.portA, slowAuth.portB, slowAuth.portF]) {
    const log0 = h.logLines.length;
    const raw = await rawExchange(port, req);
    t.regex(raw, /^HTTP\/1\.1 200/);
    t.is(requestLogSince(log0, '/collections/c/points/query').length, 1);
  }
});

function valueExistsToken(): Promise<string> {
  return new SignJWT({ sub: 'bob', value_exists: { collection: 'c', matches: [{ key: 'owner', value: 'bob' }] } })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt()
    .setExpirationTime(Math.floor(Date.now() / 1000) + 3600)
    .sign(new TextEncoder().encode(KEY));
}

// ---- bugs ----------------------------------------------------------------------------

// Was a bug (body.ts readLimited, both paths): the guard awaits the authenticator before
// the body is read. A client that goes away meanwhile destroys the request stream
// ('aborted' and 'close' fire with no one listening); readLimited then waited for events
// that never came: no log line, no metric. It now refuses a destroyed request at once.
test.serial('a client gone while an async guard decides still ends its request: a log line and metrics (lane and Koa)', async (t) => {
  const token = await valueExistsToken();
  const req = post('/collections/c/points/query', Q, `Authorization: Bearer ${token}\r\n`);
  for (const [name, port] of [
    ['lane', slowAuth.portA],
    ['koa', slowAuth.portB],
    ['front', slowAuth.portF],
  ] as const) {
    // The whole request is sent; the client gives up while the lookup waits at its gate.
    lookupGate = new Gate();
    let lines: Array<Record<string, unknown>>;
    try {
      lines = await leaveAtGate(lookupGate, port, req, '/collections/c/points/query');
    } catch (err) {
      t.fail(`${name}: the request should end (a log line, metrics), got none: ${(err as Error).message}`);
      continue;
    } finally {
      lookupGate = null;
    }
    t.is(lines.length, 1, `${name}: one log line`);
    t.is(lines[0]?.status, 499, `${name}: logged as 499 (client closed)`);
  }
});

// Was a bug (Koa path): an answer JSON.stringify cannot encode. Koa stringified in its
// respond() after the middleware, so the request log had already written and counted a
// 200 while the client got Koa's default 500 "Internal Server Error" as text/plain. In
// production the trigger is a result over V8's string limit (a scroll or retrieve of
// many large vectors or payloads: RangeError: Invalid string length). envelope.ts ok()
// now encodes inside the middleware chain, as the lane does.
test.serial('an unencodable answer is a logged 500 envelope on both paths', async (t) => {
  const log0 = h.logLines.length;
  const a = normalise(await rawExchange(plain.portA, post(BIGINT, '{}', 'Connection: close\r\n')));
  const logA = requestLogSince(log0, BIGINT);
  const log1 = h.logLines.length;
  const b = normalise(await rawExchange(plain.portB, post(BIGINT, '{}', 'Connection: close\r\n')));
  const logB = requestLogSince(log1, BIGINT);
  const log2 = h.logLines.length;
  const f = normalise(await rawExchange(plain.portF, post(BIGINT, '{}', 'Connection: close\r\n')));
  const logF = requestLogSince(log2, BIGINT);
  t.is(f, b, 'the same answer from the front');
  t.deepEqual(logF, logB, 'the same log line from the front');
  t.log(`lane: ${a.replace(/\r\n/g, ' | ')} log ${JSON.stringify(logA)}`);
  t.log(`koa:  ${b.replace(/\r\n/g, ' | ')} log ${JSON.stringify(logB)}`);
  t.is(a, b, 'the same answer');
  t.deepEqual(logA, logB, 'the same log line');
  t.is(logB[0]?.status, 500, 'Koa logs the status it sent');
});
