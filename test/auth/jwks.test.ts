/**
 * Asymmetric JWTs against a live bin/quiver (ts/auth/jwks.ts, ts/auth/authenticate.ts):
 * every accepted algorithm (RS256/384/512, PS256, ES256/384, EdDSA) from a JWKS file and
 * from a JWKS URL served by a real HTTP server on 127.0.0.1 in this test; the RBAC claims
 * and value_exists as with HS256; and the refusals, each with today's status of a token
 * that is not valid (403, plain text): alg none, algorithm confusion (HS256 whose HMAC key
 * is the public key's bytes), unknown kid, an expired token, a retired key, a JWKS server
 * that is down, HS256 when turned off. Key rotation over the URL: a new kid published and
 * the old removed works from the first request with the new kid (none fails), the old key
 * is refused after that refresh. Fetches are bounded: many requests with unknown kids at
 * once cause one fetch. One server with gRPC checks the same refusals there.
 */

import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';

import test, { type ExecutionContext } from 'ava';
import { SignJWT, exportJWK, exportSPKI, generateKeyPair, type JWK, type KeyLike } from 'jose';

import { startQuiver, type RunningQuiver } from '../api/helpers';
import { codeName, startGrpcQuiver, type GrpcQuiver } from '../grpc/client';
import { waitFor } from '../support/wait';

const API_KEY = 'jwks-test-api-key-7d1e2f3a4b5c6d7e8f9a0b1c2d3e';
const ALGS = ['RS256', 'RS384', 'RS512', 'PS256', 'ES256', 'ES384', 'EdDSA'] as const;
type Alg = (typeof ALGS)[number];

interface Pair {
  kid: string;
  alg: Alg;
  privateKey: KeyLike;
  publicKey: KeyLike;
  jwk: JWK;
}

async function pair(alg: Alg, kid: string): Promise<Pair> {
  const { privateKey, publicKey } = await generateKeyPair(alg, alg === 'EdDSA' ? { crv: 'Ed25519' } : {});
  const jwk = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' };
  return { kid, alg, privateKey, publicKey, jwk };
}

const now = () => Math.floor(Date.now() / 1000);

async function sign(p: Pair, claims: Record<string, unknown>, opts: { exp?: number; kid?: string | null } = {}): Promise<string> {
  const header: Record<string, unknown> = { alg: p.alg, typ: 'JWT' };
  if (opts.kid !== null) header.kid = opts.kid ?? p.kid;
  return new SignJWT(claims)
    .setProtectedHeader(header as { alg: string })
    .setIssuedAt()
    .setExpirationTime(opts.exp ?? now() + 3600)
    .sign(p.privateKey);
}

interface Reply {
  status: number;
  type: string;
  text: string;
  json: any;
}

async function send(url: string, method: string, p: string, headers: Record<string, string> = {}, body?: unknown): Promise<Reply> {
  const h = { ...headers };
  if (body !== undefined) h['content-type'] = 'application/json';
  const res = await fetch(url + p, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(30_000) });
  const text = await res.text();
  let json: any = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, type: res.headers.get('content-type') ?? '', text, json };
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const b64url = (x: unknown) => Buffer.from(JSON.stringify(x)).toString('base64url');

function refused(t: ExecutionContext, r: Reply, status: 401 | 403, message: string | RegExp, what: string): void {
  t.is(r.status, status, `${what}: status (${r.text.slice(0, 200)})`);
  t.true(r.type.startsWith('text/plain'), `${what}: plain text, got ${r.type}`);
  if (typeof message === 'string') t.is(r.text, message, `${what}: body`);
  else t.regex(r.text, message, `${what}: body`);
}

const C = 'jw';
const CONFIG = { vectors: { size: 4, distance: 'Dot' } };
const tmpDirs: string[] = [];
const servers: Array<{ stop(): Promise<unknown> }> = [];
const httpServers: http.Server[] = [];

function tmpDir(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-jwks-'));
  tmpDirs.push(d);
  return d;
}

/** Writes a JWKS file atomically (rename), as a deployment tool would. */
function writeJwks(file: string, keys: JWK[]): void {
  fs.writeFileSync(`${file}.tmp`, JSON.stringify({ keys }));
  fs.renameSync(`${file}.tmp`, file);
}

async function admin(url: string, method: string, p: string, body?: unknown): Promise<any> {
  const r = await send(url, method, p, { 'api-key': API_KEY }, body);
  if (r.status !== 200) throw new Error(`${method} ${p}: HTTP ${r.status} ${r.text.slice(0, 300)}`);
  return r.json.result;
}

async function seed(url: string): Promise<void> {
  await admin(url, 'PUT', `/collections/${C}`, CONFIG);
  await admin(url, 'PUT', '/collections/other', CONFIG);
  await admin(url, 'PUT', `/collections/${C}/points?wait=true`, {
    points: [
      { id: 1, vector: [1, 0, 0, 0], payload: { user: 'alice' } },
      { id: 2, vector: [0, 1, 0, 0], payload: { user: 'bob' } },
    ],
  });
}

/** A JWKS server on 127.0.0.1: serves `keys` with `cacheControl`, counts fetches, can answer 503. */
class JwksServer {
  keys: JWK[] = [];
  cacheControl: string | null = 'max-age=300';
  down = false;
  fetches = 0;
  url = '';
  private server = http.createServer((req, res) => {
    this.fetches++;
    if (this.down) {
      res.writeHead(503).end('down');
      return;
    }
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (this.cacheControl !== null) headers['cache-control'] = this.cacheControl;
    res.writeHead(200, headers).end(JSON.stringify({ keys: this.keys }));
  });
  stop(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeAllConnections();
    return closed;
  }
  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    httpServers.push(this.server);
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/.well-known/jwks.json`;
    return this;
  }
}

let keys: Record<Alg, Pair>;

test.before(async () => {
  keys = {} as Record<Alg, Pair>;
  for (const alg of ALGS) keys[alg] = await pair(alg, `k-${alg}`);
});

test.after.always(async () => {
  for (const s of servers) await s.stop().catch(() => undefined);
  for (const h of httpServers) {
    if (h.listening) h.close();
    h.closeAllConnections();
  }
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
});

test.serial('JWKS file: every algorithm is accepted; RBAC claims and value_exists apply as with HS256', async (t) => {
  const file = path.join(tmpDir(), 'jwks.json');
  writeJwks(file, ALGS.map((a) => keys[a].jwk));
  const q = await startQuiver({ SERVICE__SERVICE__API_KEY: API_KEY, SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_PATH: file });
  servers.push(q);
  await seed(q.url);
  for (const alg of ALGS) {
    const r = await send(q.url, 'GET', `/collections/${C}`, bearer(await sign(keys[alg], { sub: alg, access: 'r' })));
    t.is(r.status, 200, `${alg}: ${r.text.slice(0, 200)}`);
    const m = await send(q.url, 'PUT', '/collections/made_by_token', bearer(await sign(keys[alg], { sub: alg, access: 'm' })), CONFIG);
    t.is(m.status, 200, `${alg} manage: ${m.text.slice(0, 200)}`);
    await admin(q.url, 'DELETE', '/collections/made_by_token');
  }
  const rs = keys.RS256;
  // access "r": no writes.
  const reader = await sign(rs, { access: 'r' });
  const w = await send(q.url, 'PUT', `/collections/${C}/points?wait=true`, bearer(reader), { points: [{ id: 9, vector: [1, 1, 1, 1] }] });
  t.is(w.status, 403);
  t.is(w.json?.status?.error, 'Forbidden: Global manage access is required');
  // Per collection.
  const scoped = await sign(keys.ES256, { access: [{ collection: C, access: 'rw' }] });
  t.is((await send(q.url, 'PUT', `/collections/${C}/points?wait=true`, bearer(scoped), { points: [{ id: 9, vector: [1, 1, 1, 1] }] })).status, 200);
  const other = await send(q.url, 'GET', '/collections/other', bearer(scoped));
  t.is(other.status, 403);
  t.is(other.json?.status?.error, 'Forbidden: Access to collection other is required');
  // Invalid claims: 401 as with HS256.
  refused(t, await send(q.url, 'GET', `/collections/${C}`, bearer(await sign(rs, { access: 'x' }))), 401, 'Invalid JWT claims: access: expected "m", "r" or a list of {collection, access}, got "x"', 'bad access claim');
  // value_exists.
  const ve = await sign(keys.EdDSA, { access: 'r', value_exists: { collection: C, matches: [{ key: 'user', value: 'alice' }] } });
  t.is((await send(q.url, 'GET', `/collections/${C}`, bearer(ve))).status, 200);
  await admin(q.url, 'POST', `/collections/${C}/points/payload?wait=true`, { points: [1], payload: { user: 'alicia' } });
  refused(t, await send(q.url, 'GET', `/collections/${C}`, bearer(ve)), 401, 'Invalid JWT, stateful validation failed', 'value_exists after the change');
  // HS256 with the api key keeps working next to the JWKS.
  const hs = await new SignJWT({ access: 'r' }).setProtectedHeader({ alg: 'HS256' }).setExpirationTime('1h').sign(new TextEncoder().encode(API_KEY));
  t.is((await send(q.url, 'GET', `/collections/${C}`, bearer(hs))).status, 200, 'HS256 still accepted');
});

test.serial('JWKS file: alg none, algorithm confusion, unknown kid, expiry, a retired key: 403; a new key in the file works at once', async (t) => {
  const dir = tmpDir();
  const file = path.join(dir, 'jwks.json');
  const rs = keys.RS256;
  writeJwks(file, [rs.jwk]);
  const q = await startQuiver({ SERVICE__SERVICE__API_KEY: API_KEY, SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_PATH: file });
  servers.push(q);
  await seed(q.url);
  const get = (tok: string) => send(q.url, 'GET', `/collections/${C}`, bearer(tok));
  const accepted = 'Invalid JWT: only HS256, RS256, RS384, RS512, PS256, ES256, ES384, EdDSA tokens are accepted';

  // alg none, with the RS key's kid.
  const none = `${b64url({ alg: 'none', kid: rs.kid })}.${b64url({ access: 'm', exp: now() + 3600 })}.`;
  refused(t, await get(none), 403, accepted, 'alg none');
  // Algorithm confusion: HS256 whose HMAC key is the public key (PEM, and its JWK JSON).
  for (const [what, secret] of [['PEM', await exportSPKI(rs.publicKey as KeyLike)], ['JWK', JSON.stringify(rs.jwk)]] as const) {
    const tok = await new SignJWT({ access: 'm' }).setProtectedHeader({ alg: 'HS256', kid: rs.kid }).setExpirationTime('1h').sign(new TextEncoder().encode(secret));
    refused(t, await get(tok), 403, 'Invalid JWT: the signature does not match', `HS256 with the public key's ${what}`);
  }
  // An RS key's JWK claimed as ES256: no key of the set fits.
  const wrongAlg = await sign(keys.ES256, { access: 'r' }, { kid: rs.kid });
  refused(t, await get(wrongAlg), 403, 'Invalid JWT: no key of the JWKS matches the token (kid and alg)', 'ES256 token naming the RS256 kid');
  // Unknown kid, and a key that is not in the set at all.
  refused(t, await get(await sign(rs, { access: 'r' }, { kid: 'nobody' })), 403, 'Invalid JWT: no key of the JWKS matches the token (kid and alg)', 'unknown kid');
  refused(t, await get(await sign(keys.RS384, { access: 'r' })), 403, 'Invalid JWT: no key of the JWKS matches the token (kid and alg)', 'key not in the set');
  // Signed by another key under a known kid.
  const impostor = await pair('RS256', rs.kid);
  refused(t, await get(await sign(impostor, { access: 'm' })), 403, 'Invalid JWT: the signature does not match', 'known kid, other key');
  // Expiry, with the 30 s leeway.
  refused(t, await get(await sign(rs, { access: 'r' }, { exp: now() - 40 })), 403, 'Invalid JWT: the token has expired', 'expired 40 s ago');
  t.is((await get(await sign(rs, { access: 'r' }, { exp: now() - 20 }))).status, 200, 'expired 20 s ago: within the leeway');

  // Rotation in the file: the new key works at once (unknown kid looks at the file), the
  // old one (retired) is refused, even for a token accepted (and cached) before.
  const old = await sign(rs, { access: 'r' });
  t.is((await get(old)).status, 200);
  const next = await pair('ES384', 'k-next');
  writeJwks(file, [next.jwk]);
  t.is((await get(await sign(next, { access: 'r' }))).status, 200, 'the new key, right after the file changed');
  refused(t, await get(old), 403, 'Invalid JWT: no key of the JWKS matches the token (kid and alg)', 'retired key');
  // A broken file keeps the previous keys.
  fs.writeFileSync(file, '{"keys": [');
  // An unknown kid makes the server look at the file at once.
  refused(t, await get(await sign(next, { access: 'r' }, { kid: 'poke' })), 403, 'Invalid JWT: no key of the JWKS matches the token (kid and alg)', 'unknown kid, broken file');
  await waitFor('the broken file logged', () => q.logLines().some((l) => l.msg === 'JWKS file unusable: keeping the previous keys'));
  t.is((await get(await sign(next, { access: 'r' }))).status, 200, 'previous keys kept');
});

test.serial('HS256 turned off: the api key still authenticates but mints nothing; JWKS tokens work', async (t) => {
  const file = path.join(tmpDir(), 'jwks.json');
  writeJwks(file, [keys.PS256.jwk]);
  const q = await startQuiver({
    SERVICE__SERVICE__API_KEY: API_KEY,
    SERVICE__SERVICE__JWT_RBAC: 'true',
    SERVICE__SERVICE__JWT_ALLOW_HS256: 'false',
    SERVICE__SERVICE__JWT_JWKS_PATH: file,
  });
  servers.push(q);
  await seed(q.url);
  const hs = await new SignJWT({ access: 'm' }).setProtectedHeader({ alg: 'HS256' }).setExpirationTime('1h').sign(new TextEncoder().encode(API_KEY));
  const message = 'Invalid JWT: only RS256, RS384, RS512, PS256, ES256, ES384, EdDSA tokens are accepted';
  refused(t, await send(q.url, 'GET', `/collections/${C}`, bearer(hs)), 403, message, 'HS256 with the api key');
  t.is((await send(q.url, 'GET', `/collections/${C}`, bearer(await sign(keys.PS256, { access: 'r' })))).status, 200);
  t.is((await send(q.url, 'GET', `/collections/${C}`, { 'api-key': API_KEY })).status, 200, 'the key itself');
});

test.serial('JWKS without any api key: only tokens authenticate; an unusable file stops start-up', async (t) => {
  const file = path.join(tmpDir(), 'jwks.json');
  writeJwks(file, [keys.ES256.jwk]);
  const q = await startQuiver({ SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_PATH: file });
  servers.push(q);
  refused(t, await send(q.url, 'GET', '/collections'), 401, 'Must provide an API key or an Authorization bearer token', 'no credentials');
  t.is((await send(q.url, 'PUT', `/collections/${C}`, bearer(await sign(keys.ES256, { access: 'm' })), CONFIG)).status, 200);
  await q.stop();

  const bad = path.join(tmpDir(), 'bad.json');
  fs.writeFileSync(bad, JSON.stringify({ keys: [{ ...keys.ES256.jwk, d: 'secret' }] }));
  const { runQuiver } = await import('../api/helpers');
  for (const [what, p, pattern] of [
    ['missing', path.join(tmpDir(), 'none.json'), /service\.jwt_jwks_path .*none\.json: cannot be read/],
    ['private key', bad, /holds a private key/],
  ] as const) {
    const run = await runQuiver([], { SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_PATH: p });
    t.not(run.code, 0, what);
    t.regex(run.stdout + run.stderr, pattern, what);
  }
});

test.serial('JWKS URL: rotation with no failed request, the old key refused after that refresh, bounded fetches, Cache-Control', async (t) => {
  const jwks = await new JwksServer().start();
  const a = await pair('RS256', 'rot-a');
  const b = await pair('ES256', 'rot-b');
  jwks.keys = [a.jwk];
  jwks.cacheControl = 'max-age=600';
  const q = await startQuiver({ SERVICE__SERVICE__API_KEY: API_KEY, SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_URL: jwks.url });
  servers.push(q);
  await seed(q.url);
  const get = (tok: string) => send(q.url, 'GET', `/collections/${C}`, bearer(tok));
  const oldTok = await sign(a, { access: 'r' });
  t.is((await get(oldTok)).status, 200);
  await waitFor('the first fetch', () => jwks.fetches >= 1);
  const before = jwks.fetches;
  for (let i = 0; i < 5; i++) t.is((await get(await sign(a, { access: 'r', i }))).status, 200);
  t.is(jwks.fetches, before, 'cached: max-age=600 means no fetch per request');

  // Rotation: b published, a removed. Every request with b's token succeeds, from the first.
  jwks.keys = [b.jwk];
  const newTok = await sign(b, { access: 'r' });
  const results = await Promise.all(Array.from({ length: 10 }, () => get(newTok)));
  t.deepEqual(
    results.map((r) => r.status),
    Array(10).fill(200),
    'no failed request for the new key',
  );
  t.is(jwks.fetches, before + 1, 'ten concurrent requests with the new kid: one fetch');
  // That refresh retired a: its token (verified and cached before) is refused now.
  refused(t, await get(oldTok), 403, 'Invalid JWT: no key of the JWKS matches the token (kid and alg)', 'old key after the refresh');

  // Bounded: a burst of unknown kids right after a fetch waits for one more fetch, shared.
  const burstStart = jwks.fetches;
  const started = Date.now();
  const burst = await Promise.all(Array.from({ length: 20 }, async (_, i) => get(await sign(b, { access: 'r' }, { kid: `junk-${i}` }))));
  for (const r of burst) refused(t, r, 403, 'Invalid JWT: no key of the JWKS matches the token (kid and alg)', 'unknown kid');
  t.true(jwks.fetches - burstStart <= 1, `20 unknown kids at once: ${jwks.fetches - burstStart} fetches`);
  t.log(`20 unknown kids: ${jwks.fetches - burstStart} fetch, answered in ${Date.now() - started} ms`);

  // Cache-Control no-store: the next request after the interval fetches again, and a
  // key removed then is refused at that refresh.
  const c = await pair('EdDSA', 'rot-c');
  jwks.keys = [b.jwk, c.jwk];
  jwks.cacheControl = 'no-store';
  t.is((await get(await sign(c, { access: 'r' }))).status, 200, 'c via unknown-kid fetch');
  const afterC = jwks.fetches;
  jwks.keys = [c.jwk];
  await waitFor('b refused after a refresh (no-store)', async () => (await get(newTok)).status === 403, 20_000, 200);
  t.true(jwks.fetches > afterC, 'a refresh happened');
  t.is((await get(await sign(c, { access: 'r' }))).status, 200);
});

test.serial('JWKS URL down: tokens are refused with 403 (from the start, and an unknown kid while down); known keys stay usable', async (t) => {
  const jwks = await new JwksServer().start();
  jwks.down = true;
  const k = await pair('ES384', 'down-k');
  jwks.keys = [k.jwk];
  const q = await startQuiver({ SERVICE__SERVICE__API_KEY: API_KEY, SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_URL: jwks.url });
  servers.push(q);
  await seed(q.url);
  const tok = await sign(k, { access: 'r' });
  refused(t, await send(q.url, 'GET', `/collections/${C}`, bearer(tok)), 403, /^Invalid JWT: the signing keys could not be fetched \(HTTP 503\)$/, 'server answering 503');
  t.is((await send(q.url, 'GET', `/collections/${C}`, { 'api-key': API_KEY })).status, 200, 'the api key is unaffected');
  jwks.down = false;
  await waitFor('the keys fetched once the server is back', async () => (await send(q.url, 'GET', `/collections/${C}`, bearer(tok))).status === 200, 20_000, 250);
  // Down again: the keys fetched stay usable; a new kid is refused.
  jwks.down = true;
  t.is((await send(q.url, 'GET', `/collections/${C}`, bearer(await sign(k, { access: 'r', n: 1 })))).status, 200);
  refused(t, await send(q.url, 'GET', `/collections/${C}`, bearer(await sign(k, { access: 'r' }, { kid: 'other' }))), 403, 'Invalid JWT: no key of the JWKS matches the token (kid and alg)', 'unknown kid while down');

  // A URL where nothing listens (this JWKS server closed).
  const dead = jwks.url;
  await jwks.stop();
  const q2 = await startQuiver({ SERVICE__SERVICE__API_KEY: API_KEY, SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_URL: dead });
  servers.push(q2);
  refused(t, await send(q2.url, 'GET', '/collections', bearer(tok)), 403, /^Invalid JWT: the signing keys could not be fetched \(/, 'nothing listening');
});

test.serial('over gRPC: a JWKS token is accepted; alg none, confusion, unknown kid and expiry are PERMISSION_DENIED', async (t) => {
  const file = path.join(tmpDir(), 'jwks.json');
  const rs = keys.RS512;
  writeJwks(file, [rs.jwk]);
  const q: GrpcQuiver = await startGrpcQuiver({ SERVICE__SERVICE__API_KEY: API_KEY, SERVICE__SERVICE__JWT_RBAC: 'true', SERVICE__SERVICE__JWT_JWKS_PATH: file });
  servers.push(q);
  await seed(q.server.url);
  const client = q.client();
  const ok = await client.call('Collections', 'Get', { collection_name: C }, { token: await sign(rs, { access: 'r' }) });
  t.truthy(ok.result);
  const none = `${b64url({ alg: 'none', kid: rs.kid })}.${b64url({ access: 'm' })}.`;
  const confusion = await new SignJWT({ access: 'm' }).setProtectedHeader({ alg: 'HS256', kid: rs.kid }).setExpirationTime('1h').sign(new TextEncoder().encode(await exportSPKI(rs.publicKey)));
  for (const [what, tok, message] of [
    ['alg none', none, 'Invalid JWT: only HS256, RS256, RS384, RS512, PS256, ES256, ES384, EdDSA tokens are accepted'],
    ['confusion', confusion, 'Invalid JWT: the signature does not match'],
    ['unknown kid', await sign(rs, { access: 'r' }, { kid: 'nope' }), 'Invalid JWT: no key of the JWKS matches the token (kid and alg)'],
    ['expired', await sign(rs, { access: 'r' }, { exp: now() - 60 }), 'Invalid JWT: the token has expired'],
  ] as const) {
    const err = await client.fail('Collections', 'Get', { collection_name: C }, { token: tok });
    t.is(codeName(err.code), 'PERMISSION_DENIED', what);
    t.true(err.details.includes(message), `${what}: ${err.details}`);
  }
});
