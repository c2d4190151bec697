/**
 * The audit log on a live bin/quiver (audit.enabled, audit.dir): one JSON line per
 * access decision, allowed or denied, with subject (api_key, read_only_api_key,
 * jwt:<sub>, or null when the credentials were missing or not valid), client address,
 * method, path, collection, allowed and reason; routes open to everyone (/, /healthz,
 * /livez, /readyz) and unknown routes are not logged. The server is stopped before the
 * file is read: stopping flushes the log.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import test from 'ava';
import { SignJWT } from 'jose';

import { startQuiver } from '../api/helpers';

const API_KEY = 'audit-api-key-0123456789abcdef0123456789';
const RO_KEY = 'audit-read-only-key-0123456789';

async function jwt(claims: Record<string, unknown>, key = API_KEY): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).setExpirationTime('1h').sign(new TextEncoder().encode(key));
}

interface Expected {
  subject: string | null;
  method: string;
  path: string;
  collection: string | null;
  allowed: boolean;
  reason: string | null;
}

test('audit log: one line per access decision with subject, address, method, path, collection, allowed, reason; open routes not logged', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-audit-server-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const auditDir = path.join(dir, 'audit');
  const server = await startQuiver({
    SERVICE__SERVICE__API_KEY: API_KEY,
    SERVICE__SERVICE__READ_ONLY_API_KEY: RO_KEY,
    SERVICE__SERVICE__JWT_RBAC: 'true',
    SERVICE__AUDIT__ENABLED: 'true',
    SERVICE__AUDIT__DIR: auditDir,
  });
  const expected: Expected[] = [];
  const statuses: number[] = [];
  const call = async (method: string, p: string, headers: Record<string, string>, body: unknown, logged: Omit<Expected, 'method' | 'path'> | null) => {
    const h = { ...headers };
    if (body !== undefined) h['content-type'] = 'application/json';
    const res = await fetch(server.url + p, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
    await res.arrayBuffer();
    statuses.push(res.status);
    if (logged !== null) expected.push({ method, path: p.split('?')[0], ...logged });
    return res.status;
  };
  const alice = { authorization: `Bearer ${await jwt({ sub: 'alice', access: [{ collection: 'au', access: 'r' }] })}` };
  const config = { vectors: { size: 2, distance: 'Dot' } };
  try {
    // Open routes: no decision, no line (with or without credentials).
    t.is(await call('GET', '/healthz', {}, undefined, null), 200);
    t.is(await call('GET', '/', { 'api-key': API_KEY }, undefined, null), 200);
    t.is(await call('GET', '/readyz', {}, undefined, null), 200);
    t.is(await call('GET', '/livez', { 'api-key': 'wrong' }, undefined, null), 200);
    // An unknown route: no decision either.
    t.is(await call('GET', '/no/such/route', { 'api-key': API_KEY }, undefined, null), 404);

    t.is(await call('GET', '/collections', { 'api-key': API_KEY }, undefined, { subject: 'api_key', collection: null, allowed: true, reason: null }), 200);
    // Routes that need global access still record the collection their path names.
    t.is(await call('PUT', '/collections/au', { 'api-key': API_KEY }, config, { subject: 'api_key', collection: 'au', allowed: true, reason: null }), 200);
    t.is(
      await call('PUT', '/collections/au/points?wait=true', { 'api-key': API_KEY }, { points: [{ id: 1, vector: [1, 0] }] }, { subject: 'api_key', collection: 'au', allowed: true, reason: null }),
      200,
    );
    t.is(
      await call('PUT', '/collections/au/points?wait=true', { 'api-key': RO_KEY }, { points: [{ id: 2, vector: [0, 1] }] }, {
        subject: 'read_only_api_key',
        collection: 'au',
        allowed: false,
        reason: 'Global manage access is required',
      }),
      403,
    );
    t.is(await call('POST', '/collections/au/points/scroll', { 'api-key': RO_KEY }, {}, { subject: 'read_only_api_key', collection: 'au', allowed: true, reason: null }), 200);
    t.is(
      await call('GET', '/collections/au', {}, undefined, { subject: null, collection: 'au', allowed: false, reason: 'Must provide an API key or an Authorization bearer token' }),
      401,
    );
    t.is(await call('GET', '/collections/au', { 'api-key': 'wrong' }, undefined, { subject: null, collection: 'au', allowed: false, reason: 'Invalid API key or JWT' }), 401);
    t.is(await call('GET', '/collections/au', alice, undefined, { subject: 'jwt:alice', collection: 'au', allowed: true, reason: null }), 200);
    t.is(await call('GET', '/collections/other', alice, undefined, { subject: 'jwt:alice', collection: 'other', allowed: false, reason: 'Access to collection other is required' }), 403);
    t.is(
      await call('PUT', '/collections/au/points', alice, { points: [] }, { subject: 'jwt:alice', collection: 'au', allowed: false, reason: 'Write access to collection au is required' }),
      403,
    );
    t.is(await call('GET', '/telemetry', alice, undefined, { subject: 'jwt:alice', collection: null, allowed: true, reason: null }), 200);
    const forged = { authorization: `Bearer ${await jwt({ sub: 'mallory', access: 'm' }, 'not-the-api-key-but-long-enough-000')}` };
    t.is(
      await call('DELETE', '/collections/au', forged, undefined, { subject: null, collection: 'au', allowed: false, reason: 'Invalid JWT: the signature does not match' }),
      403,
    );
    // The address is the peer's: X-Forwarded-For is not trusted.
    t.is(await call('DELETE', '/collections/au', { 'api-key': RO_KEY, 'x-forwarded-for': '10.9.8.7' }, undefined, { subject: 'read_only_api_key', collection: 'au', allowed: false, reason: 'Global manage access is required' }), 403);
    // A token without sub.
    t.is(await call('GET', '/collections/au/exists', { authorization: `Bearer ${await jwt({ access: 'r' })}` }, undefined, { subject: 'jwt:', collection: 'au', allowed: true, reason: null }), 200);
    t.is(await call('GET', '/healthz', {}, undefined, null), 200);
  } finally {
    t.is(await server.stop(), 0, 'clean stop (flushes the audit log)');
  }

  const files = fs.readdirSync(auditDir).filter((f) => /^audit-\d{4}-\d{2}-\d{2}\.log$/.test(f)).sort();
  t.true(files.length >= 1 && files.length <= 2, `daily audit file(s): ${fs.readdirSync(auditDir)}`);
  const lines = files.flatMap((f) => fs.readFileSync(path.join(auditDir, f), 'utf8').split('\n').filter((l) => l !== ''));
  const records = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
  t.log(`${records.length} audit lines for ${statuses.length} requests (${expected.length} needing a decision)`);
  t.is(records.length, expected.length, `one line per decision:\n${lines.join('\n')}`);
  for (const [i, want] of expected.entries()) {
    const got = records[i];
    if (got === undefined) break;
    const what = `line ${i + 1} (${want.method} ${want.path})`;
    t.like(got, want, what);
    t.regex(String(got.address), /^(::ffff:)?127\.0\.0\.1$/, `${what}: address`);
    t.true(typeof got.time === 'string' && !Number.isNaN(Date.parse(got.time as string)), `${what}: time`);
  }
  t.false(records.some((r) => ['/', '/healthz', '/readyz', '/livez', '/no/such/route'].includes(String(r.path))), 'open and unknown routes are not logged');
  const aliceToken = alice.authorization.slice('Bearer '.length);
  t.false(lines.some((l) => l.includes(API_KEY) || l.includes(RO_KEY) || l.includes('wrong') || l.includes(aliceToken)), 'no credential in the log');
});
