/**
 * The web dashboard at /dashboard, driven in headless Chromium (Debian's
 * /usr/bin/chromium through playwright-core) against the real server with an API key
 * and JWT access control on.
 *
 * Covers: the static routes (content types, no-cache, allow-list, open without a key,
 * nothing loaded from elsewhere), browsing collections and running a query with the key
 * typed into the page, and the #/jwt generator: a token built in the browser verifies
 * with the API key (jose), carries exactly the claims chosen in the form, and the server
 * grants and refuses what those claims say.
 */

import test from 'ava';
import type { ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import { decodeProtectedHeader, jwtVerify } from 'jose';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

import { REPO_ROOT, startQuiver, type RunningQuiver } from '../api/helpers';
import { DEADLINE_MS } from '../support/wait';

const CHROMIUM = '/usr/bin/chromium';
const API_KEY = 'dashboard-test-key-\u00e9-0123456789';
const A = 'dash_alpha';
const B = 'dash_beta';
/** State markers sit on elements that may be empty or hidden. */
const ATTACHED = { state: 'attached' } as const;

let node: RunningQuiver;
let browser: Browser;

async function call(method: string, url: string, body?: unknown, key: string | null = API_KEY): Promise<Response> {
  const headers: Record<string, string> = {};
  if (key !== null) headers['api-key'] = key;
  if (body !== undefined) headers['content-type'] = 'application/json';
  return fetch(node.url + url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
}

async function mustCall(method: string, url: string, body?: unknown): Promise<unknown> {
  const res = await call(method, url, body);
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${method} ${url} answered ${res.status}: ${text}`);
  return JSON.parse(text);
}

test.before(async () => {
  node = await startQuiver({ SERVICE__SERVICE__API_KEY: API_KEY, SERVICE__SERVICE__JWT_RBAC: 'true' });
  for (const [name, size] of [
    [A, 4],
    [B, 3],
  ] as const) {
    await mustCall('PUT', `/collections/${name}`, { vectors: { size, distance: 'Cosine' } });
  }
  await mustCall('PUT', `/collections/${A}/points?wait=true`, {
    points: [
      { id: 1, vector: [1, 0, 0, 0], payload: { city: 'Berlin', n: 1 } },
      { id: 2, vector: [0, 1, 0, 0], payload: { city: 'Paris', n: 2 } },
      { id: 3, vector: [0.9, 0.1, 0, 0], payload: { city: 'Rome', n: 3 } },
    ],
  });
  await mustCall('PUT', `/collections/${B}/points?wait=true`, {
    points: [{ id: 10, vector: [1, 2, 3], payload: { secret: true } }],
  });
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run does)`);
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});

test.after.always(async () => {
  if (browser !== undefined) await browser.close();
  if (node !== undefined) await node.stop();
});

interface Session {
  context: BrowserContext;
  page: Page;
  /** Every URL the page requested. */
  requests: string[];
  /** The api-key header of each API request, by URL path. */
  apiKeys: Array<{ path: string; key: string | undefined }>;
  pageErrors: string[];
}

async function openDashboard(hash = ''): Promise<Session> {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(DEADLINE_MS);
  const session: Session = { context, page, requests: [], apiKeys: [], pageErrors: [] };
  page.on('request', (req) => {
    session.requests.push(req.url());
    const url = new URL(req.url());
    if (!url.pathname.startsWith('/dashboard')) session.apiKeys.push({ path: url.pathname, key: req.headers()['api-key'] });
  });
  page.on('pageerror', (err) => session.pageErrors.push(String(err)));
  page.on('console', (msg) => {
    // HTTP errors the tests ask for (401, 403, 400) are logged by Chromium too.
    if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource: the server responded')) {
      session.pageErrors.push(msg.text());
    }
  });
  await page.goto(`${node.url}/dashboard${hash}`);
  await page.waitForSelector('body[data-ready="true"]', ATTACHED);
  return session;
}

async function enterKey(page: Page, key: string): Promise<void> {
  await page.getByTestId('api-key').fill(key);
  await page.getByTestId('api-key-save').click();
}

async function closeSession(t: ExecutionContext, s: Session): Promise<void> {
  await s.context.close();
  t.deepEqual(s.pageErrors, [], 'no script errors on the page');
  const foreign = s.requests.filter((u) => !u.startsWith(node.url + '/') && !u.startsWith('data:'));
  t.deepEqual(foreign, [], 'everything comes from Quiver itself');
}

async function waitForList(page: Page): Promise<string[]> {
  await page.waitForSelector('#collections-list[data-loaded]', ATTACHED);
  return page.getByTestId('collection-item').evaluateAll((els) => els.map((e) => e.getAttribute('data-name') ?? ''));
}

/**
 * Clicks the Collections link and waits for the list view: the route runs on the
 * 'hashchange' event, after the click has returned, and clears the list's marker as it
 * starts the new load; until then the marker may still be the one an earlier load set.
 */
async function navToList(page: Page): Promise<void> {
  await page.getByTestId('nav-collections').click();
  await page.getByTestId('view-collections').waitFor({ state: 'visible' });
}

function rawGet(rawPath: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: node.port, method: 'GET', path: rawPath }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

function b64urlJson(segment: string): unknown {
  return JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'));
}

// ------------------------------------------------------------------ static files

test('the dashboard files are served with their types, no-cache, and without a key', async (t) => {
  const redirect = await fetch(`${node.url}/dashboard`, { redirect: 'manual' });
  t.is(redirect.status, 302);
  t.is(redirect.headers.get('location'), '/dashboard/');

  for (const [file, type] of [
    ['', /^text\/html; charset=utf-8$/],
    ['index.html', /^text\/html; charset=utf-8$/],
    ['app.js', /^text\/javascript; charset=utf-8$/],
    ['style.css', /^text\/css; charset=utf-8$/],
  ] as const) {
    const res = await fetch(`${node.url}/dashboard/${file}`);
    t.is(res.status, 200, file);
    t.regex(res.headers.get('content-type') ?? '', type, file);
    t.is(res.headers.get('cache-control'), 'no-cache', file);
    t.is(res.headers.get('x-content-type-options'), 'nosniff', file);
    const body = await res.text();
    const onDisk = fs.readFileSync(path.join(REPO_ROOT, 'web', 'dashboard', file || 'index.html'), 'utf8');
    t.is(body, onDisk, file);
    t.notRegex(body, /https?:\/\//, `${file || 'index.html'} names no external URL`);
  }
});

test('only the dashboard files are served: other names and traversal answer 404', async (t) => {
  for (const p of [
    '/dashboard/package.json',
    '/dashboard/..%2Fpackage.json',
    '/dashboard/..%2F..%2Fpackage.json',
    '/dashboard/%2e%2e',
    '/dashboard/../package.json',
    '/dashboard/web/dashboard/app.js',
    '/dashboard/app.js%00',
    '/dashboard/%2e%2e/package.json',
    '/dashboard/..\\package.json',
    '/dashboard//etc/passwd',
    '/dashboard/APP.JS',
    '/dashboard/.',
    '/dashboard/nope.js',
  ]) {
    // node:http sends the path as written (fetch would resolve the dot segments first).
    const res = await rawGet(p);
    t.is(res.status, 404, p);
    t.is(res.body, '', p);
  }
});

// ------------------------------------------------------------------ browsing

test('with the key typed in, the page lists both collections, shows one and runs a query', async (t) => {
  const s = await openDashboard();
  const { page } = s;
  t.is(page.url(), `${node.url}/dashboard/`, '/dashboard redirects to /dashboard/');

  // Without a key the listing is refused, and the page says so.
  await waitForList(page);
  await page.getByTestId('status').waitFor({ state: 'visible' });
  t.regex((await page.getByTestId('status').textContent()) ?? '', /401/);

  await enterKey(page, API_KEY);
  await page.waitForSelector('#collections-list[data-loaded="true"]', ATTACHED);
  t.deepEqual(await waitForList(page), [A, B]);
  t.is(await page.evaluate(() => sessionStorage.getItem('quiver.dashboard.apiKey')), API_KEY, 'key kept in sessionStorage');
  t.true(await page.getByTestId('status').isHidden());

  await page.locator(`[data-testid="collection-link"][data-name="${A}"]`).click();
  await page.waitForSelector('#collection-summary[data-loaded="true"]', ATTACHED);
  t.is(new URL(page.url()).hash, `#/collections/${A}`);
  t.is(await page.getByTestId('collection-name').textContent(), A);
  t.is(await page.getByTestId('summary-points').textContent(), '3');
  t.is(await page.getByTestId('summary-vectors').textContent(), '4 dims, Cosine');
  const info = JSON.parse((await page.getByTestId('collection-info').textContent()) ?? '{}') as { points_count?: number };
  t.is(info.points_count, 3);

  await page.getByTestId('query-vector').fill('[1, 0, 0, 0]');
  await page.getByTestId('query-limit').fill('2');
  await page.getByTestId('query-run').click();
  await page.waitForSelector('#query-results[data-state="done"]', ATTACHED);
  const rows = await page
    .getByTestId('query-result')
    .evaluateAll((els) => els.map((e) => ({ id: e.getAttribute('data-id'), score: Number(e.getAttribute('data-score')) })));
  t.deepEqual(
    rows.map((r) => r.id),
    ['1', '3'],
  );
  t.true(Math.abs(rows[0]!.score - 1) < 1e-5);
  const payloads = await page.getByTestId('result-payload').allTextContents();
  t.deepEqual(payloads.map((p) => JSON.parse(p) as unknown), [
    { city: 'Berlin', n: 1 },
    { city: 'Rome', n: 3 },
  ]);
  t.is(await page.getByTestId('query-count').textContent(), '2 points');

  // Without payload.
  await page.getByTestId('query-with-payload').uncheck();
  await page.getByTestId('query-run').click();
  await page.waitForSelector('#query-results[data-state="done"]', ATTACHED);
  t.deepEqual(await page.getByTestId('result-payload').allTextContents(), ['', '']);

  // A bad vector is reported by the page, a wrong-sized one by the server.
  await page.getByTestId('query-vector').fill('[1, 0,');
  await page.getByTestId('query-run').click();
  t.regex((await page.getByTestId('query-error').textContent()) ?? '', /not valid JSON/);
  await page.getByTestId('query-vector').fill('[1, 0]');
  await page.getByTestId('query-run').click();
  await page.waitForSelector('#query-results[data-state="error"]', ATTACHED);
  t.regex((await page.getByTestId('query-error').textContent()) ?? '', /^Query failed: 400/);

  // Back to the list through the nav.
  await navToList(page);
  t.deepEqual(await waitForList(page), [A, B]);

  // Every API call carried the key once it was typed (the first listing had none).
  const keyed = s.apiKeys.slice(1);
  t.true(keyed.length >= 5);
  t.deepEqual(
    keyed.filter((r) => r.key !== API_KEY),
    [],
  );
  t.is(s.apiKeys[0]!.key, undefined);
  await closeSession(t, s);
});

test('a wrong key is reported on the page; the key is forgotten on request', async (t) => {
  const s = await openDashboard();
  const { page } = s;
  await enterKey(page, 'not-the-key');
  // The page first loads without a key (also a 401), so wait for the state the assertion
  // reads: this load's failure, with its message shown.
  await page.waitForSelector('#collections-list[data-loaded="error"]', ATTACHED);
  await page.getByTestId('status').waitFor({ state: 'visible' });
  t.regex((await page.getByTestId('status').textContent()) ?? '', /401/);
  await page.getByTestId('api-key-clear').click();
  t.is(await page.evaluate(() => sessionStorage.getItem('quiver.dashboard.apiKey')), null);
  t.is(await page.getByTestId('api-key').inputValue(), '');
  await closeSession(t, s);
});

// ------------------------------------------------------------------ JWT generator

interface Claims {
  access?: unknown;
  exp?: number;
  sub?: string;
  value_exists?: unknown;
}

async function generate(page: Page): Promise<{ token: string; shown: Claims }> {
  await page.getByTestId('jwt-generate').click();
  await page.waitForSelector('#jwt-output[data-state="ready"]', ATTACHED);
  const token = await page.getByTestId('jwt-token').inputValue();
  const shown = JSON.parse((await page.getByTestId('jwt-claims').textContent()) ?? '{}') as Claims;
  // Generate again later only after clearing the state marker.
  await page.evaluate(() => document.getElementById('jwt-output')!.setAttribute('data-state', ''));
  return { token, shown };
}

async function verified(t: ExecutionContext, token: string): Promise<Claims> {
  t.regex(token, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/, 'three base64url segments, no padding');
  const [header] = token.split('.');
  t.deepEqual(b64urlJson(header!), { alg: 'HS256', typ: 'JWT' });
  t.deepEqual(decodeProtectedHeader(token), { alg: 'HS256', typ: 'JWT' });
  const { payload } = await jwtVerify(token, new TextEncoder().encode(API_KEY), { algorithms: ['HS256'] });
  return payload as Claims;
}

test('#/jwt makes a collection-scoped read token that the server honours', async (t) => {
  const s = await openDashboard('#/jwt');
  const { page } = s;
  t.is(new URL(page.url()).hash, '#/jwt', 'the fragment survives the /dashboard redirect');
  await page.getByTestId('view-jwt').waitFor({ state: 'visible' });

  // No key yet: the page refuses to sign.
  await page.getByTestId('jwt-generate').click();
  t.regex((await page.getByTestId('jwt-error').textContent()) ?? '', /API key/);

  await enterKey(page, API_KEY);
  await page.getByTestId('jwt-access-collections').check();
  const row = page.getByTestId('jwt-collection-row');
  t.is(await row.count(), 1, 'one row offered');
  await row.getByTestId('jwt-row-collection').fill(A);
  await row.getByTestId('jwt-row-access').selectOption('r');
  await page.getByTestId('jwt-exp-amount').fill('1');
  await page.getByTestId('jwt-exp-unit').selectOption('hours');

  const before = Math.floor(Date.now() / 1000);
  const { token, shown } = await generate(page);
  const after = Math.floor(Date.now() / 1000);

  const claims = await verified(t, token);
  t.deepEqual(Object.keys(claims).sort(), ['access', 'exp']);
  t.deepEqual(claims.access, [{ collection: A, access: 'r' }]);
  t.true(claims.exp! >= before + 3600 && claims.exp! <= after + 3600, `exp ${claims.exp} is one hour from now`);
  t.deepEqual(shown, claims, 'the page shows the claims it signed');
  t.regex((await page.getByTestId('jwt-expiry').textContent()) ?? '', /^Expires at \d{4}-/);

  // Copy button.
  await s.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: node.url });
  await page.getByTestId('jwt-copy').click();
  await page.waitForFunction(() => document.getElementById('jwt-copy-status')!.textContent !== '');
  t.is(await page.getByTestId('jwt-copy-status').textContent(), 'Copied.');
  t.is(await page.evaluate(() => navigator.clipboard.readText()), token);

  // The token against the API (needs the access-control middleware).
  const query = { query: [1, 0, 0, 0], limit: 1 };
  t.is((await call('GET', `/collections/${A}`, undefined, token)).status, 200, 'GET A with the token');
  const bearer = await fetch(`${node.url}/collections/${A}`, { headers: { authorization: `Bearer ${token}` } });
  t.is(bearer.status, 200, 'GET A with Authorization: Bearer');
  t.is((await call('POST', `/collections/${A}/points/query`, query, token)).status, 200, 'query A');
  const upsert = { points: [{ id: 99, vector: [0, 0, 1, 0] }] };
  t.is((await call('PUT', `/collections/${A}/points?wait=true`, upsert, token)).status, 403, 'upsert into A');
  t.is((await call('GET', `/collections/${B}`, undefined, token)).status, 403, 'GET B');
  t.is((await call('POST', `/collections/${B}/points/query`, { query: [1, 2, 3] }, token)).status, 403, 'query B');
  t.is((await call('GET', `/collections/${A}`, undefined, null)).status, 401, 'no token');
  const tampered = token.slice(0, -2) + (token.endsWith('AA') ? 'BB' : 'AA');
  // The reference answers a JWT whose signature does not match with 403.
  t.is((await call('GET', `/collections/${A}`, undefined, tampered)).status, 403, 'a tampered token');

  // The dashboard itself used with that token: the listing shows A only.
  await enterKey(page, token);
  await navToList(page);
  t.deepEqual(await waitForList(page), [A], 'the listing is filtered for the token');
  t.is(await page.getByTestId('status').isHidden(), true);

  // And the page will not sign with a JWT in the key field.
  await page.getByTestId('nav-jwt').click();
  await page.getByTestId('jwt-generate').click();
  t.regex((await page.getByTestId('jwt-error').textContent()) ?? '', /holds a JWT/);
  await closeSession(t, s);
});

test('#/jwt: global access, minutes, sub and value_exists make exactly those claims', async (t) => {
  const s = await openDashboard('#/jwt');
  const { page } = s;
  await enterKey(page, API_KEY);

  // Global read, nothing else: the only claim is access.
  await page.getByTestId('jwt-access-r').check();
  let out = await generate(page);
  t.deepEqual(await verified(t, out.token), { access: 'r' });
  t.is(await page.getByTestId('jwt-expiry').textContent(), 'Never expires.');
  t.is((await call('GET', `/collections/${B}`, undefined, out.token)).status, 200, 'global read reads B');
  t.is((await call('PUT', `/collections/${B}/points?wait=true`, { points: [{ id: 11, vector: [1, 1, 1] }] }, out.token)).status, 403);

  // Global manage, 30 minutes, a subject, value_exists with a string and a number.
  await page.getByTestId('jwt-access-m').check();
  await page.getByTestId('jwt-exp-amount').fill('30');
  await page.getByTestId('jwt-exp-unit').selectOption('minutes');
  await page.getByTestId('jwt-sub').fill('alice');
  await page.getByTestId('jwt-ve-enabled').check();
  await page.getByTestId('jwt-ve-collection').fill(A);
  await page.getByTestId('jwt-ve-add-match').click();
  const matches = page.getByTestId('jwt-ve-match');
  t.is(await matches.count(), 2);
  await matches.nth(0).getByTestId('jwt-ve-key').fill('city');
  await matches.nth(0).getByTestId('jwt-ve-value').fill('Berlin');
  await matches.nth(1).getByTestId('jwt-ve-key').fill('n');
  await matches.nth(1).getByTestId('jwt-ve-value').fill('1');
  const now = Math.floor(Date.now() / 1000);
  out = await generate(page);
  const claims = await verified(t, out.token);
  t.true(Math.abs(claims.exp! - (now + 1800)) <= 5, 'exp 30 minutes from now');
  t.deepEqual(claims, {
    access: 'm',
    exp: claims.exp,
    sub: 'alice',
    value_exists: {
      collection: A,
      matches: [
        { key: 'city', value: 'Berlin' },
        { key: 'n', value: 1 },
      ],
    },
  });
  t.deepEqual(out.shown, claims);
  t.is((await call('GET', `/collections/${B}`, undefined, out.token)).status, 200, 'the matching point exists');

  // Several collection rows with the three access levels; an empty row is refused.
  await page.getByTestId('jwt-ve-enabled').uncheck();
  await page.getByTestId('jwt-exp-amount').fill('');
  await page.getByTestId('jwt-sub').fill('');
  await page.getByTestId('jwt-access-collections').check();
  await page.getByTestId('jwt-add-collection').click();
  await page.getByTestId('jwt-add-collection').click();
  const rows = page.getByTestId('jwt-collection-row');
  t.is(await rows.count(), 3);
  await rows.nth(0).getByTestId('jwt-row-collection').fill(A);
  await rows.nth(0).getByTestId('jwt-row-access').selectOption('rw');
  await rows.nth(1).getByTestId('jwt-row-collection').fill(B);
  await rows.nth(1).getByTestId('jwt-row-access').selectOption('prw');
  await page.getByTestId('jwt-generate').click();
  t.regex((await page.getByTestId('jwt-error').textContent()) ?? '', /collection name/);
  await rows.nth(2).getByTestId('jwt-row-remove').click();
  out = await generate(page);
  t.deepEqual(await verified(t, out.token), {
    access: [
      { collection: A, access: 'rw' },
      { collection: B, access: 'prw' },
    ],
  });
  await closeSession(t, s);
});

test('the page signs with WebCrypto here, and its fallback HMAC-SHA256 gives the same bytes', async (t) => {
  const s = await openDashboard();
  const same = await s.page.evaluate(async () => {
    const q = (window as unknown as { QuiverDashboard: Record<string, (...a: unknown[]) => unknown> }).QuiverDashboard;
    const enc = new TextEncoder();
    const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
    const results: boolean[] = [];
    for (const [key, msg] of [
      ['k', ''],
      ['k', 'The quick brown fox jumps over the lazy dog'],
      ['x'.repeat(64), 'y'.repeat(55)],
      ['z'.repeat(65), 'w'.repeat(64)],
      ['\u00e9\u4e2d', '\u{1F600}'.repeat(100)],
    ]) {
      const a = (await q.hmacSha256!(enc.encode(key), enc.encode(msg))) as Uint8Array;
      const b = q.hmacSha256Js!(enc.encode(key), enc.encode(msg)) as Uint8Array;
      results.push(hex(a) === hex(b));
    }
    return { results, subtle: typeof crypto.subtle === 'object' && isSecureContext };
  });
  t.true(same.subtle, '127.0.0.1 is a secure context, so WebCrypto is used');
  t.deepEqual(same.results, [true, true, true, true, true]);
  await closeSession(t, s);
});
