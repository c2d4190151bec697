/**
 * The direct lane (ts/api/rest/direct.ts) answers exactly as Koa does.
 *
 * Each app is built in process as ts/node.ts builds it (config with defaults, engine,
 * TableOfContent, Snapshots, buildRestApp) and served twice on 127.0.0.1:
 *   A: the lane in front of Koa, its fallback counting the requests that reach Koa;
 *   B: Koa alone (`app.callback()`);
 *   F: the HTTP front (front.ts) before A's stack, as a node serves.
 * Every case sends the same request (method, path and query, headers, raw body bytes)
 * to B and to A and F, and compares each with B: status, Content-Type, Content-Length (against the real
 * body length), the other response header names, the body (JSON apart from the
 * top-level `time`, which must be a number on both sides when Koa's has one; plain
 * text as is), the request log lines and the audit decisions. It also checks whether
 * the lane served the request or passed it on, so the test fails if the lane stops
 * serving a hot route or starts serving one it must leave to Koa.
 *
 * Three apps share one storage: the main one (no auth, CORS off, 1 MB body limit), one
 * with api keys and JWT, one with CORS on. Then a run of requests on one keep-alive
 * connection, and /metrics and /telemetry, which must count lane-served requests under
 * their route pattern.
 *
 * The query-string cases (a doubled `?`, over 1000 keys, a `#fragment`, a `#` in the
 * path) are the differences this test first found: the lane parsed with node:querystring
 * and served URLs holding `#`; it now parses as Koa does and leaves `#` to Koa.
 */

import * as http from 'node:http';

import test, { type ExecutionContext } from 'ava';
import { SignJWT } from 'jose';

import type { AuditEvent, AuditLog } from '../../ts/auth/audit';
import type { Config } from '../../ts/config/types';
import { mulberry32 } from '../support/rng';
import { DEADLINE_MS } from '../support/wait';
import { LaneHarness, type LanePair } from './lane-pair';

const API_KEY = 'direct-lane-test-api-key-7c1e5b9a3d2f4e6a8b0c';
const RO_KEY = 'direct-lane-test-read-only-key-1a2b3c4d';

const C = 'coll';
const ALIAS = 'coll-alias';
const NAMED = 'named';
const SPACED = 'my coll';
const OTHER = 'other';
const DIM = 8;

// ---- the apps -------------------------------------------------------------------------

let h: LaneHarness;

interface Served extends LanePair {
  /** The audit decisions (both servers share the app, so one list). */
  audit: AuditEvent[];
}

let main: Served;
let secured: Served;
let cors: Served;

async function serve(cfg: Config): Promise<Served> {
  const audit: AuditEvent[] = [];
  // decide() only calls record(); a list lets each case compare what both paths wrote.
  const auditLog = { enabled: true, record: (e: AuditEvent) => void audit.push(e) } as unknown as AuditLog;
  return Object.assign(await h.pair(cfg, { audit: auditLog }), { audit });
}

// ---- requests -------------------------------------------------------------------------

interface Req {
  method?: string;
  /** Path and query, sent as is. */
  path: string;
  /** Or a function giving them when the request is sent (tokens signed in test.before). */
  headers?: Record<string, string> | (() => Record<string, string>);
  /** JSON-encoded unless a string or Buffer (sent as is); absent: no body at all. */
  body?: unknown;
  /** Send the body in two chunks without a Content-Length. */
  chunked?: boolean;
}

interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  raw: Buffer;
  /** Whether the request went on a connection used before (keep-alive). */
  reused: boolean;
}

function rawBody(r: Req): Buffer | null {
  if (r.body === undefined) return null;
  if (Buffer.isBuffer(r.body)) return r.body;
  return Buffer.from(typeof r.body === 'string' ? r.body : JSON.stringify(r.body));
}

function send(port: number, r: Req, agent: http.Agent | false = false): Promise<Reply> {
  const body = rawBody(r);
  const headers: Record<string, string> = { ...(typeof r.headers === 'function' ? r.headers() : r.headers) };
  if (body !== null && !r.chunked) headers['content-length'] = String(body.length);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, method: r.method ?? 'POST', path: r.path, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, raw: Buffer.concat(chunks), reused: req.reusedSocket }));
      res.on('error', reject);
    });
    // A server answering before the whole body is sent (413, 401) may close while we write.
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'EPIPE' && err.code !== 'ECONNRESET') reject(err);
    });
    req.setTimeout(DEADLINE_MS, () => req.destroy(new Error(`no answer to ${r.method ?? 'POST'} ${r.path}`)));
    if (body !== null && r.chunked) {
      const half = body.length >> 1;
      req.write(body.subarray(0, half));
      req.end(body.subarray(half));
    } else req.end(body ?? undefined);
  });
}

/** A setup call through Koa (B) that must succeed. */
async function admin(method: string, p: string, body?: unknown, headers: Record<string, string> = {}): Promise<any> {
  const r = await send(main.portB, { method, path: p, body, headers: { 'content-type': 'application/json', ...headers } });
  if (r.status !== 200) throw new Error(`${method} ${p}: HTTP ${r.status} ${r.raw.toString().slice(0, 300)}`);
  return JSON.parse(r.raw.toString()).result;
}

// ---- comparing ------------------------------------------------------------------------

/** Response headers whose value or presence depends on the connection or the clock. */
const VOLATILE_HEADERS = new Set(['date', 'connection', 'keep-alive']);

/**
 * The log lines about requests written since `from` (those naming a method and a path:
 * the request line, an unexpected error), without what differs between any two requests
 * (clock, duration, process). Background lines (optimizer, flushes) are left out.
 */
function requestLines(from: number): Array<Record<string, unknown>> {
  return h.logLines
    .slice(from)
    .filter((l) => 'method' in l && 'path' in l)
    .map(({ time: _t, pid: _p, hostname: _h, ms: _ms, ...rest }) => rest);
}

/** The top-level `time` of an envelope as the last key of the raw JSON text. */
const RAW_TIME = /,?"time":-?[0-9][0-9.eE+-]*\}$/;

interface Case {
  name: string;
  req: Req;
  /** true: the lane must serve it; false: it must reach Koa; null: either (see the case). */
  lane: boolean | null;
  /** Whether the front answers it itself; by default what `lane` says, except for chunked bodies (node:http reads those), and a body over the limit (node:http's path answers 413). */
  front?: boolean;
  /** The status both must answer with. */
  status: number;
  /** More checks of Koa's answer (that the case tests what it says). */
  check?: (t: ExecutionContext, body: any, reply: Reply) => void;
}

async function compare(t: ExecutionContext, s: Served, c: Case): Promise<void> {
  const [log1, audit1] = [h.logLines.length, s.audit.length];
  const b = await send(s.portB, c.req);
  const [logB, auditB] = [requestLines(log1), s.audit.slice(audit1)];
  t.is(b.status, c.status, `Koa's status: ${b.raw.toString().slice(0, 400)}`);
  t.true(logB.some((l) => l.msg === 'request'), 'a request log line');
  if (s === secured) t.true(auditB.length > 0, 'an audit decision');
  for (const side of ['A', 'F'] as const) {
    const hits = s.koaHits;
    const served = s.front.served;
    const [log0, audit0] = [h.logLines.length, s.audit.length];
    const a = await send(side === 'A' ? s.portA : s.portF, c.req);
    const viaKoa = s.koaHits !== hits;
    const [logA, auditA] = [requestLines(log0), s.audit.slice(audit0)];
    const bText = b.raw.toString();
    const aText = a.raw.toString();
    const both = `\n  ${side === 'A' ? 'lane' : 'front'}/${side}: ${a.status} ${a.headers['content-type']} ${aText.slice(0, 400)}\n  koa/B:  ${b.status} ${b.headers['content-type']} ${bText.slice(0, 400)}`;

    if (c.lane !== null) t.is(!viaKoa, c.lane, c.lane ? `${side}: the lane must serve this request` : `${side}: this request must reach Koa`);
    const byFront = c.front ?? (c.lane === true && !c.req.chunked);
    if (side === 'F' && c.lane !== null) t.is(s.front.served - served, byFront ? 1 : 0, byFront ? 'the front must answer this request' : 'the front must pass this request on');
    t.is(a.status, b.status, `status${both}`);
    t.is(a.headers['content-type'], b.headers['content-type'], `Content-Type${both}`);
    for (const [name, r] of [
      [side, a],
      ['B', b],
    ] as const) {
      // Node sends none with a 204.
      if (r.status !== 204) t.not(r.headers['content-length'], undefined, `${name}: a Content-Length`);
      if (r.headers['content-length'] !== undefined) t.is(Number(r.headers['content-length']), r.raw.length, `${name}: Content-Length is the body's length`);
    }
    const names = (r: Reply) => Object.keys(r.headers).filter((h) => !VOLATILE_HEADERS.has(h)).sort();
    t.deepEqual(names(a), names(b), `header names${both}`);
    for (const h of names(b)) if (h !== 'content-length') t.is(a.headers[h], b.headers[h], `header ${h}${both}`);
    // The same connection headers (the request asked to close, agent: false).
    t.is(a.headers.connection, b.headers.connection, `Connection${both}`);
    t.is(a.headers['keep-alive'], b.headers['keep-alive'], `Keep-Alive${both}`);

    if ((b.headers['content-type'] ?? '').startsWith('application/json')) {
      const ja = JSON.parse(aText) as Record<string, unknown>;
      const jb = JSON.parse(bText) as Record<string, unknown>;
      if (typeof jb.time === 'number') t.is(typeof ja.time, 'number', `a numeric time${both}`);
      else t.false('time' in ja, `no time${both}`);
      const { time: _ta, ...restA } = ja;
      const { time: _tb, ...restB } = jb;
      t.deepEqual(restA, restB, `body${both}`);
      // The same bytes apart from the time (key order, spacing).
      t.is(aText.replace(RAW_TIME, '}'), bText.replace(RAW_TIME, '}'), `raw body${both}`);
      if (side === 'A') c.check?.(t, jb, b);
    } else {
      t.is(aText, bText, `body${both}`);
      if (side === 'A') c.check?.(t, bText, b);
    }
    t.deepEqual(logA, logB, `${side}: the same request log lines`);
    t.deepEqual(auditA, auditB, `${side}: the same audit decisions`);
  }
}

function cases(group: string, served: () => Served, list: Case[]): void {
  for (const c of list) {
    const title = `${group}: ${c.name}`;
    test.serial(title, (t) => compare(t, served(), c));
  }
}

// ---- data -----------------------------------------------------------------------------

const random = mulberry32(20240611);
const vec = (n: number) => Array.from({ length: n }, () => Math.round((random() * 2 - 1) * 1000) / 1000);
const GROUPS = ['red', 'green', 'blue'];
const UUID = '5c56c793-69f3-4fbf-87e6-c4bf54c28c26';
const Q = vec(DIM);
const Q2 = vec(DIM);

test.before(async () => {
  h = await LaneHarness.open('quiver-direct-');
  main = await serve(h.config());
  secured = await serve(h.config({ SERVICE__SERVICE__API_KEY: API_KEY, SERVICE__SERVICE__READ_ONLY_API_KEY: RO_KEY, SERVICE__SERVICE__JWT_RBAC: 'true' }));
  cors = await serve(h.config({ SERVICE__SERVICE__ENABLE_CORS: 'true' }));

  await admin('PUT', `/collections/${C}`, { vectors: { size: DIM, distance: 'Cosine' } });
  const points = Array.from({ length: 50 }, (_, i) => ({
    id: i === 49 ? UUID : i + 1,
    vector: vec(DIM),
    payload: { i, group: GROUPS[i % 3], even: i % 2 === 0, price: Math.round(random() * 10000) / 100, tags: i % 5 === 0 ? ['five', 'x'] : ['x'], label: i % 4 === 0 ? `ünïcødé ✓ 🚀 ${i}` : `plain ${i}` },
  }));
  await admin('PUT', `/collections/${C}/points?wait=true`, { points });
  await admin('PUT', `/collections/${C}/index?wait=true`, { field_name: 'i', field_schema: 'integer' });
  await admin('POST', '/collections/aliases', { actions: [{ create_alias: { collection_name: C, alias_name: ALIAS } }] });

  await admin('PUT', `/collections/${NAMED}`, { vectors: { img: { size: 4, distance: 'Dot' }, txt: { size: DIM, distance: 'Euclid' } } });
  await admin('PUT', `/collections/${NAMED}/points?wait=true`, {
    points: Array.from({ length: 20 }, (_, i) => ({ id: i + 1, vector: { img: vec(4), txt: vec(DIM) }, payload: { i } })),
  });

  await admin('PUT', `/collections/${encodeURIComponent(SPACED)}`, { vectors: { size: DIM, distance: 'Cosine' } });
  await admin('PUT', `/collections/${encodeURIComponent(SPACED)}/points?wait=true`, {
    points: Array.from({ length: 10 }, (_, i) => ({ id: i + 1, vector: vec(DIM), payload: { i } })),
  });

  await admin('PUT', `/collections/${OTHER}`, { vectors: { size: DIM, distance: 'Cosine' } });
  await admin('PUT', `/collections/${OTHER}/points?wait=true`, { points: [{ id: 1, vector: vec(DIM), payload: { owner: 'bob' } }] });
  await signTokens();
});

test.after.always(async () => {
  await h?.close();
});

// ---- the main app: auth off, CORS off ---------------------------------------------------

const P = (collection: string, route: string, query = '') => `/collections/${encodeURIComponent(collection)}/points${route}${query}`;
const JSON_HEADERS = { 'content-type': 'application/json' };
const post = (p: string, body?: unknown, headers: Req['headers'] = JSON_HEADERS): Req => ({ method: 'POST', path: p, body, headers });

const points = (t: ExecutionContext, body: any, min = 1) => {
  const list = Array.isArray(body.result) ? body.result : body.result.points;
  t.true(list.length >= min, `at least ${min} points, got ${JSON.stringify(body).slice(0, 200)}`);
};
const errorIs = (re: RegExp) => (t: ExecutionContext, body: any) => t.regex(String(body?.status?.error), re);

const TOO_BIG = Buffer.from(JSON.stringify({ query: Q, limit: 3, filter: { must: [{ key: 'group', match: { any: Array.from({ length: 150_000 }, (_, i) => `g${i}`) } }] } }));

cases('main', () => main, [
  // Similarity queries.
  { name: 'query by vector', req: post(P(C, '/query'), { query: Q, limit: 5 }), lane: true, status: 200, check: (t, b) => points(t, b, 5) },
  { name: 'query by point id', req: post(P(C, '/query'), { query: 7, limit: 4, with_payload: true }), lane: true, status: 200, check: (t, b) => points(t, b, 4) },
  { name: 'query by UUID point id', req: post(P(C, '/query'), { query: UUID, limit: 3 }), lane: true, status: 200, check: (t, b) => points(t, b, 3) },
  {
    name: 'query with a filter',
    req: post(P(C, '/query'), { query: Q, limit: 10, filter: { must: [{ key: 'group', match: { value: 'red' } }], must_not: [{ key: 'i', range: { gte: 30 } }] }, with_payload: true }),
    lane: true,
    status: 200,
    check: (t, b) => {
      points(t, b, 5);
      t.true(b.result.points.every((p: any) => p.payload.group === 'red' && p.payload.i < 30));
    },
  },
  {
    name: 'query with payload include and vector',
    req: post(P(C, '/query'), { query: Q, limit: 3, with_payload: { include: ['group', 'price'] }, with_vector: true }),
    lane: true,
    status: 200,
    check: (t, b) => t.deepEqual(Object.keys(b.result.points[0].payload).sort(), ['group', 'price']),
  },
  {
    name: 'query returning non-ASCII payload',
    req: post(P(C, '/query'), { query: Q, limit: 20, with_payload: ['label'], filter: { must: [{ key: 'label', match: { text: 'ünïcødé' } }] } }),
    lane: true,
    status: 200,
    check: (t, b) => t.true(b.result.points.some((p: any) => String(p.payload.label).includes('🚀'))),
  },
  { name: 'query with payload exclude', req: post(P(C, '/query'), { query: Q, limit: 3, with_payload: { exclude: ['tags'] } }), lane: true, status: 200, check: (t, b) => points(t, b, 3) },
  { name: 'query with a payload key list', req: post(P(C, '/query'), { query: Q, limit: 3, with_payload: ['i'] }), lane: true, status: 200 },
  { name: 'query with limit and offset', req: post(P(C, '/query'), { query: Q, limit: 4, offset: 6, with_payload: false }), lane: true, status: 200, check: (t, b) => points(t, b, 4) },
  { name: 'query with score_threshold', req: post(P(C, '/query'), { query: Q, limit: 50, score_threshold: 0.3 }), lane: true, status: 200 },
  { name: 'query with params (exact, hnsw_ef)', req: post(P(C, '/query'), { query: Q, limit: 5, params: { hnsw_ef: 64, exact: true } }), lane: true, status: 200 },
  { name: 'query recommend', req: post(P(C, '/query'), { query: { recommend: { positive: [1, 2], negative: [3] } }, limit: 5 }), lane: true, status: 200, check: (t, b) => points(t, b, 5) },
  { name: 'query without a query (scroll)', req: post(P(C, '/query'), { limit: 5, with_payload: true }), lane: true, status: 200, check: (t, b) => points(t, b, 5) },
  { name: 'query ordered by a payload index', req: post(P(C, '/query'), { query: { order_by: { key: 'i', direction: 'desc' } }, limit: 3 }), lane: true, status: 200 },
  { name: 'query on a named vector', req: post(P(NAMED, '/query'), { query: vec(4), using: 'img', limit: 5, with_vector: ['img'] }), lane: true, status: 200, check: (t, b) => points(t, b, 5) },
  { name: 'query on an unknown vector name', req: post(P(NAMED, '/query'), { query: vec(4), using: 'nope', limit: 5 }), lane: true, status: 400 },
  { name: 'query through an alias', req: post(P(ALIAS, '/query'), { query: Q, limit: 5 }), lane: true, status: 200, check: (t, b) => points(t, b, 5) },
  { name: 'query on a collection whose name holds a space', req: post(P(SPACED, '/query'), { query: Q, limit: 3 }), lane: true, status: 200, check: (t, b) => points(t, b, 3) },
  { name: 'query on a percent-encoded ordinary name', req: post('/collections/%63oll/points/query', { query: Q, limit: 3 }), lane: true, status: 200, check: (t, b) => points(t, b, 3) },
  { name: 'query/batch', req: post(P(C, '/query/batch'), { searches: [{ query: Q, limit: 3 }, { query: 5, limit: 2, filter: { must: [{ key: 'even', match: { value: true } }] } }] }), lane: true, status: 200 },
  { name: 'query/batch with an empty list', req: post(P(C, '/query/batch'), { searches: [] }), lane: true, status: 200 },
  { name: 'query/batch with a bad entry', req: post(P(C, '/query/batch'), { searches: [{ query: Q }, 3] }), lane: true, status: 400 },
  // Legacy search and recommend.
  { name: 'search', req: post(P(C, '/search'), { vector: Q, limit: 5, with_payload: true }), lane: true, status: 200, check: (t, b) => points(t, b, 5) },
  { name: 'search with filter, offset, threshold', req: post(P(C, '/search'), { vector: Q2, limit: 5, offset: 2, score_threshold: -0.5, filter: { should: [{ key: 'tags', match: { value: 'five' } }] } }), lane: true, status: 200 },
  { name: 'search on a named vector', req: post(P(NAMED, '/search'), { vector: { name: 'txt', vector: vec(DIM) }, limit: 3 }), lane: true, status: 200, check: (t, b) => points(t, b, 3) },
  { name: 'search without a vector', req: post(P(C, '/search'), { limit: 3 }), lane: true, status: 400 },
  { name: 'search/batch', req: post(P(C, '/search/batch'), { searches: [{ vector: Q, limit: 2 }, { vector: Q2, limit: 3, with_vector: true }] }), lane: true, status: 200 },
  { name: 'recommend', req: post(P(C, '/recommend'), { positive: [1, 4], negative: [9], limit: 5, with_payload: ['group'] }), lane: true, status: 200, check: (t, b) => points(t, b, 5) },
  { name: 'recommend by a missing point', req: post(P(C, '/recommend'), { positive: [100000], limit: 5 }), lane: true, status: 404 },
  { name: 'recommend/batch', req: post(P(C, '/recommend/batch'), { searches: [{ positive: [2], limit: 2 }, { positive: [3, UUID], limit: 3 }] }), lane: true, status: 200 },
  // Reads.
  { name: 'retrieve by ids', req: post(P(C, ''), { ids: [1, 2, UUID, 999], with_vector: true }), lane: true, status: 200, check: (t, b) => t.is(b.result.length, 3) },
  { name: 'retrieve without ids', req: post(P(C, ''), { with_payload: true }), lane: true, status: 400 },
  { name: 'scroll', req: post(P(C, '/scroll'), { limit: 7, with_payload: true }), lane: true, status: 200, check: (t, b) => t.is(b.result.points.length, 7) },
  { name: 'scroll from an offset with a filter', req: post(P(C, '/scroll'), { offset: 10, limit: 5, filter: { must: [{ key: 'even', match: { value: false } }] } }), lane: true, status: 200 },
  { name: 'scroll ordered by a payload index', req: post(P(C, '/scroll'), { limit: 4, order_by: { key: 'i', direction: 'desc', start_from: 40 } }), lane: true, status: 200 },
  { name: 'scroll ordered by a field without an index', req: post(P(C, '/scroll'), { order_by: 'price' }), lane: true, status: 400 },
  { name: 'count with a filter', req: post(P(C, '/count'), { filter: { must: [{ key: 'group', match: { value: 'blue' } }] }, exact: true }), lane: true, status: 200, check: (t, b) => t.is(b.result.count, 16) },
  { name: 'count without a body', req: { method: 'POST', path: P(C, '/count') }, lane: true, status: 200, check: (t, b) => t.is(b.result.count, 50) },
  { name: 'count with Content-Length 0', req: post(P(C, '/count'), ''), lane: true, status: 200 },
  { name: 'count with exact not a boolean', req: post(P(C, '/count'), { exact: 'yes' }), lane: true, status: 400 },
  // Query parameters.
  { name: '?consistency=majority&timeout=5', req: post(P(C, '/query', '?consistency=majority&timeout=5'), { query: Q, limit: 2 }), lane: true, status: 200 },
  { name: '?consistency=2', req: post(P(C, '/search', '?consistency=2'), { vector: Q, limit: 2 }), lane: true, status: 200 },
  { name: '?consistency=bogus', req: post(P(C, '/query', '?consistency=bogus'), { query: Q }), lane: true, status: 400, check: errorIs(/^Deserialize error in query parameters: /) },
  { name: '?timeout=x', req: post(P(C, '/scroll', '?timeout=x'), {}), lane: true, status: 400 },
  { name: 'a repeated ?timeout', req: post(P(C, '/count', '?timeout=1&timeout=2'), {}), lane: true, status: 400 },
  { name: 'an encoded query value (?consistency=%61ll)', req: post(P(C, '/query', '?consistency=%61ll'), { query: Q, limit: 1 }), lane: true, status: 200 },
  { name: 'a bad query value with a plus and an escape', req: post(P(C, '/query', '?consistency=a+b%2Bc%E0%A4%A'), { query: Q }), lane: true, status: 400 },
  { name: 'an empty query string', req: post(P(C, '/count', '?'), {}), lane: true, status: 200 },
  // Errors.
  { name: 'unknown collection', req: post(P('no-such-coll', '/query'), { query: Q }), lane: true, status: 404, check: errorIs(/^Not found: /) },
  { name: 'unknown collection on retrieve', req: post(P('no-such-coll', ''), { ids: [1] }), lane: true, status: 404 },
  { name: 'unknown collection with a non-ASCII name', req: post(P('café ☕', '/search'), { vector: Q }), lane: true, status: 404, check: errorIs(/café ☕/) },
  { name: 'invalid JSON', req: post(P(C, '/query'), '{"query": [1, 2,'), lane: true, status: 400, check: errorIs(/^Format error in JSON body: /) },
  { name: 'invalid JSON on an unknown collection (body read first)', req: post(P('no-such-coll', '/search'), '{oops'), lane: true, status: 400 },
  { name: 'empty body', req: post(P(C, '/query'), ''), lane: true, status: 400 },
  { name: 'no body at all', req: { method: 'POST', path: P(C, '/search') }, lane: true, status: 400 },
  { name: 'body that is a JSON array', req: post(P(C, '/query'), [Q]), lane: true, status: 400 },
  { name: 'body that is JSON null', req: post(P(C, '/count'), 'null'), lane: true, status: 400 },
  { name: 'body that is a JSON string', req: post(P(C, '/search'), '"x"'), lane: true, status: 400 },
  { name: 'wrong vector size', req: post(P(C, '/query'), { query: [1, 2, 3] }), lane: true, status: 400 },
  { name: 'wrong vector size on search', req: post(P(C, '/search'), { vector: [1, 2, 3], limit: 1 }), lane: true, status: 400 },
  { name: 'a string in the vector', req: post(P(C, '/query'), { query: [1, 2, 3, 4, 5, 6, 7, 'NaN'] }), lane: true, status: 400 },
  { name: 'NaN as a bare token', req: post(P(C, '/query'), '{"query": [1, 2, 3, 4, 5, 6, 7, NaN]}'), lane: true, status: 400, check: errorIs(/^Format error in JSON body: /) },
  { name: 'a number too large for a float', req: post(P(C, '/search'), `{"vector": [1, 2, 3, 4, 5, 6, 7, 1e400], "limit": 1}`), lane: true, status: 400 },
  { name: 'a negative limit', req: post(P(C, '/query'), { query: Q, limit: -1 }), lane: true, status: 400 },
  { name: 'prefetch without a query to merge them', req: post(P(C, '/query'), { prefetch: [{ query: Q }] }), lane: true, status: 400 },
  { name: 'a bad filter', req: post(P(C, '/scroll'), { filter: { must: [{ key: 'i', range: { gte: 'x' } }] } }), lane: true, status: 400 },
  { name: 'a body over the limit (declared length)', req: post(P(C, '/query'), TOO_BIG), lane: true, front: false, status: 413, check: errorIs(/^Payload too large: /) },
  { name: 'a body over the limit (chunked)', req: { ...post(P(C, '/query'), TOO_BIG), chunked: true }, lane: true, status: 413 },
  { name: 'a chunked body under the limit', req: { ...post(P(C, '/query'), { query: Q, limit: 2 }), chunked: true }, lane: true, status: 200 },
  // Longer than one socket read: not all of it is in the request's buffer when the lane looks.
  { name: 'a body with a Content-Length, longer than one socket read', req: post(P(C, '/query'), `${JSON.stringify({ query: Q, limit: 2 })}${' '.repeat(300_000)}`), lane: true, status: 200 },
  { name: 'a body sent as text/plain', req: post(P(C, '/query'), JSON.stringify({ query: Q, limit: 2 }), { 'content-type': 'text/plain' }), lane: true, status: 200 },
  { name: 'an Origin header while CORS is off', req: post(P(C, '/query'), { query: Q, limit: 2 }, { ...JSON_HEADERS, origin: 'https://example.com' }), lane: true, status: 200 },
  { name: 'an encoded slash in the name', req: post('/collections/co%2Fll/points/count', {}), lane: true, status: 404 },
  // What the lane leaves to Koa.
  { name: 'a trailing slash', req: post(`${P(C, '/query')}/`, { query: Q, limit: 3 }), lane: false, status: 200 },
  { name: 'a trailing slash on retrieve', req: post(`${P(C, '')}/`, { ids: [1] }), lane: false, status: 200 },
  { name: 'a malformed escape in the name', req: post('/collections/%E0%A4%A/points/query', { query: Q }), lane: false, status: 404 },
  { name: 'an empty collection segment', req: post('/collections//points/query', { query: Q }), lane: false, status: 404 },
  // Koa's GET /collections/{collection_name}/points/{id} takes it, with the id "query".
  { name: 'GET on a direct path', req: { method: 'GET', path: P(C, '/query') }, lane: false, status: 400 },
  { name: 'PUT on a direct path', req: { method: 'PUT', path: P(C, '/scroll'), body: {}, headers: JSON_HEADERS }, lane: false, status: 404 },
  { name: 'upper case in the path', req: post('/collections/coll/points/QUERY', { query: Q, limit: 2 }), lane: false, status: 200 },
  { name: 'a double slash', req: post('/collections/coll//points/query', { query: Q, limit: 2 }), lane: false, status: 404 },
  { name: 'a route the lane does not serve (GET a point)', req: { method: 'GET', path: P(C, '/7') }, lane: false, status: 200 },
  { name: 'a grouped search (search/groups)', req: post(P(C, '/search/groups'), { vector: Q, group_by: 'group', limit: 2, group_size: 2 }), lane: true, status: 200 },
  { name: 'a POST route the lane does not serve (delete points, refused)', req: post(P(C, '/delete'), {}), lane: false, status: 400 },
  { name: 'an unknown route under points', req: post(P(C, '/querx'), { query: Q }), lane: false, status: 404 },
  { name: 'an escape in a literal segment', req: post('/collections/coll/points/%71uery', { query: Q, limit: 2 }), lane: false, status: 404 },
  { name: 'a plus in the name (not a space in a path)', req: post('/collections/my+coll/points/count', {}), lane: true, status: 404 },
  // Query strings the two parsers read differently (ts/api/rest/direct.ts parses with
  // node:querystring, Koa 3 with URLSearchParams; Koa's path and query come from parseurl).
  {
    name: 'a query string starting with "??"',
    req: post(P(C, '/query', '??consistency=bogus'), { query: Q, limit: 2 }),
    lane: null,
    status: 400,
  },
  {
    name: 'a bad parameter after 1000 others',
    req: post(P(C, '/query', `?${Array.from({ length: 1000 }, (_, i) => `p${i}=1`).join('&')}&consistency=bogus`), { query: Q, limit: 2 }),
    lane: null,
    status: 400,
  },
  {
    name: 'a fragment after the query',
    req: post(P(C, '/query', '?timeout=5#frag'), { query: Q, limit: 2 }),
    lane: null,
    status: 200,
  },
  {
    name: 'a "#" in the collection segment',
    req: post('/collections/co#ll/points/query', { query: Q, limit: 2 }),
    lane: null,
    status: 404,
  },
  { name: 'a fragment after the path', req: post(`${P(C, '/query')}#frag`, { query: Q, limit: 2 }), lane: false, status: 200 },
]);

// ---- authentication on ----------------------------------------------------------------

const key = (k: string) => ({ ...JSON_HEADERS, 'api-key': k });
const bearer = (token: string) => ({ ...JSON_HEADERS, authorization: `Bearer ${token}` });
/** The headers of a named token from `tokens`, read when the request is sent. */
const bearerOf = (name: string) => () => bearer(tokens[name]);

async function jwt(claims: Record<string, unknown>, opts: { secret?: string; exp?: number } = {}): Promise<string> {
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt()
    .setExpirationTime(opts.exp ?? Math.floor(Date.now() / 1000) + 3600)
    .sign(new TextEncoder().encode(opts.secret ?? API_KEY));
}

/** Tokens by name, signed in test.before; a case names its token (`bearerOf`), sent as it is then. */
const tokens: Record<string, string> = {};
async function signTokens(): Promise<void> {
  tokens.other = await jwt({ sub: 'only-other', access: [{ collection: OTHER, access: 'r' }] });
  tokens.coll = await jwt({ sub: 'coll-reader', access: [{ collection: C, access: 'r' }] });
  tokens.prw = await jwt({ sub: 'coll-prw', access: [{ collection: C, access: 'prw' }] });
  tokens.expired = await jwt({ sub: 'late' }, { exp: Math.floor(Date.now() / 1000) - 3600 });
  tokens.foreign = await jwt({ sub: 'forger' }, { secret: 'some-other-secret-key-0000000000000' });
  tokens.badClaim = await jwt({ sub: 'bad', access: 'x' });
  tokens.valueFound = await jwt({ sub: 'bob', value_exists: { collection: OTHER, matches: [{ key: 'owner', value: 'bob' }] } });
  tokens.valueMissing = await jwt({ sub: 'eve', value_exists: { collection: OTHER, matches: [{ key: 'owner', value: 'eve' }] } });
}

const query = { query: Q, limit: 3 };
cases('auth', () => secured, [
  { name: 'no key', req: post(P(C, '/query'), query), lane: true, status: 401, check: (t, _b, r) => t.regex(r.headers['content-type'] ?? '', /^text\/plain/) },
  { name: 'no key with a body over the limit', req: post(P(C, '/query'), TOO_BIG), lane: true, front: false, status: 401 },
  { name: 'no key with invalid JSON', req: post(P(C, '/count'), '{'), lane: true, status: 401 },
  { name: 'wrong key', req: post(P(C, '/query'), query, key('not-the-key')), lane: true, status: 401 },
  { name: 'api key', req: post(P(C, '/query'), query, key(API_KEY)), lane: true, status: 200 },
  { name: 'api key as a bearer token', req: post(P(C, '/search'), { vector: Q, limit: 2 }, bearer(API_KEY)), lane: true, status: 200 },
  { name: 'api key with an unknown collection', req: post(P('no-such-coll', '/query'), query, key(API_KEY)), lane: true, status: 404 },
  { name: 'read-only key on query', req: post(P(C, '/query'), query, key(RO_KEY)), lane: true, status: 200 },
  { name: 'read-only key on retrieve, scroll and count', req: post(P(C, '/count'), {}, key(RO_KEY)), lane: true, status: 200 },
  { name: 'read-only key on recommend/batch', req: post(P(C, '/recommend/batch'), { searches: [{ positive: [1], limit: 2 }] }, key(RO_KEY)), lane: true, status: 200 },
  {
    name: 'JWT for another collection',
    req: post(P(C, '/query'), query, bearerOf('other')),
    lane: true,
    status: 403,
    check: (t, b) => t.is(b.status.error, `Forbidden: Access to collection ${C} is required`),
  },
  { name: 'JWT for the collection', req: post(P(C, '/query'), query, bearerOf('coll')), lane: true, status: 200 },
  { name: 'JWT for the collection, through its alias', req: post(P(ALIAS, '/query'), query, bearerOf('coll')), lane: true, status: 403 },
  { name: 'JWT with points-only access on scroll', req: post(P(C, '/scroll'), { limit: 2 }, bearerOf('prw')), lane: true, status: 200 },
  { name: 'JWT for another collection, invalid JSON body', req: post(P(C, '/query'), '{', bearerOf('other')), lane: true, status: 403 },
  { name: 'expired JWT', req: post(P(C, '/query'), query, bearerOf('expired')), lane: true, status: 403 },
  { name: 'JWT signed with another key', req: post(P(C, '/query'), query, bearerOf('foreign')), lane: true, status: 403 },
  { name: 'JWT with an invalid access claim', req: post(P(C, '/query'), query, bearerOf('badClaim')), lane: true, status: 401 },
  { name: 'JWT with a value_exists that matches', req: post(P(C, '/count'), {}, bearerOf('valueFound')), lane: true, status: 200 },
  { name: 'JWT with a value_exists that does not match', req: post(P(C, '/count'), {}, bearerOf('valueMissing')), lane: true, status: 401 },
  { name: 'a trailing slash without a key', req: post(`${P(C, '/query')}/`, query), lane: false, status: 401 },
  { name: 'a trailing slash with the read-only key', req: post(`${P(C, '/query')}/`, query, key(RO_KEY)), lane: false, status: 200 },
]);

// ---- CORS on --------------------------------------------------------------------------

const ORIGIN = { ...JSON_HEADERS, origin: 'https://app.example.com' };
cases('cors', () => cors, [
  {
    name: 'a query with an Origin header goes to Koa',
    req: post(P(C, '/query'), query, ORIGIN),
    lane: false,
    status: 200,
    check: (t, _b, r) => {
      t.is(r.headers['access-control-allow-origin'], 'https://app.example.com');
      t.regex(String(r.headers.vary), /Origin/);
    },
  },
  { name: 'an error with an Origin header', req: post(P(C, '/query'), '{', ORIGIN), lane: false, status: 400, check: (t, _b, r) => t.is(r.headers['access-control-allow-origin'], 'https://app.example.com') },
  { name: 'an empty Origin header goes to Koa', req: post(P(C, '/count'), {}, { ...JSON_HEADERS, origin: '' }), lane: false, status: 200 },
  {
    name: 'a preflight on a direct path',
    req: { method: 'OPTIONS', path: P(C, '/query'), headers: { origin: 'https://app.example.com', 'access-control-request-method': 'POST' } },
    lane: false,
    status: 204,
  },
  { name: 'a query without Origin is served by the lane', req: post(P(C, '/query'), query), lane: true, status: 200, check: (t, _b, r) => t.is(r.headers['access-control-allow-origin'], undefined) },
  { name: 'scroll without Origin is served by the lane', req: post(P(C, '/scroll'), { limit: 3 }), lane: true, status: 200 },
]);

// ---- one connection ------------------------------------------------------------------

test.serial('requests following each other on one keep-alive connection answer as Koa does', async (t) => {
  const sequence: Req[] = [
    post(P(C, '/query'), { query: Q, limit: 2 }),
    post(P(C, '/query'), TOO_BIG),
    post(P(C, '/count'), '{'),
    post(`${P(C, '/query')}/`, { query: Q, limit: 2 }),
    post(P(C, '/scroll'), { limit: 2 }),
  ];
  const run = async (port: number) => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const out: Array<{ status: number; body: unknown; reused: boolean }> = [];
    try {
      for (const r of sequence) {
        const reply = await send(port, r, agent);
        const { time: _t, ...body } = JSON.parse(reply.raw.toString()) as Record<string, unknown>;
        out.push({ status: reply.status, body, reused: reply.reused });
      }
    } finally {
      agent.destroy();
    }
    return out;
  };
  const hits = main.koaHits;
  const a = await run(main.portA);
  t.is(main.koaHits, hits + 1, 'only the trailing-slash request reached Koa');
  const served = main.front.served;
  const f = await run(main.portF);
  t.is(main.koaHits, hits + 2, 'only the trailing-slash request reached Koa (front)');
  // The body over the limit goes to node:http (the lane's node path answers 413).
  t.is(main.front.served - served, 3, 'the front answered the query, the bad count and the scroll');
  const b = await run(main.portB);
  t.deepEqual(a, b);
  t.deepEqual(f, b);
  t.deepEqual(
    b.map((r) => r.status),
    [200, 413, 400, 200, 200],
  );
  // The `reused` flags compared above: after the refused body the connection is kept or
  // closed the same way on both paths.
  t.log(`connection reused: ${b.map((r) => r.reused).join(', ')}`);
});

// ---- metrics --------------------------------------------------------------------------

const QUERY_ROUTE = '/collections/{collection_name}/points/query';

async function metric(s: Served, status: number): Promise<number> {
  const r = await send(s.portB, { method: 'GET', path: '/metrics' });
  const text = r.raw.toString();
  const line = text.split('\n').find((l) => l.startsWith(`rest_responses_total{method="POST",endpoint="${QUERY_ROUTE}",status="${status}"} `));
  return line === undefined ? 0 : Number(line.split(' ').pop());
}

test.serial('/metrics and /telemetry count lane-served requests under their route pattern', async (t) => {
  const [ok0, missing0] = [await metric(main, 200), await metric(main, 404)];
  const telemetry = async () => {
    const r = await send(main.portB, { method: 'GET', path: '/telemetry' });
    return (JSON.parse(r.raw.toString()).result.requests.rest[`POST ${QUERY_ROUTE}`]?.count ?? 0) as number;
  };
  const tel0 = await telemetry();
  const hits = main.koaHits;
  const served = main.front.served;
  for (let i = 0; i < 5; i++) t.is((await send(i % 2 === 0 ? main.portA : main.portF, post(P(C, '/query'), { query: Q, limit: 1 }))).status, 200);
  t.is((await send(main.portF, post(P('metrics-probe-coll', '/query'), { query: Q }))).status, 404);
  t.is(main.koaHits, hits, 'the lane served them');
  t.is(main.front.served - served, 3, 'the front answered three of them');
  t.is(await metric(main, 200), ok0 + 5);
  t.is(await metric(main, 404), missing0 + 1);
  t.is(await telemetry(), tel0 + 6);
  const text = (await send(main.portB, { method: 'GET', path: '/metrics' })).raw.toString();
  t.regex(text, /^rest_responses_duration_seconds_bucket\{.*endpoint="\/collections\/\{collection_name\}\/points\/query".*status="200"/m);
  t.false(text.includes('metrics-probe-coll'), 'no raw path in the labels');
});
