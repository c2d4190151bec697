/**
 * What the dashboard's browser tests share: Chromium (Debian's /usr/bin/chromium through
 * playwright-core), a page session that records script errors and every URL asked for,
 * and the screenshots the run writes for docs/dashboard.md.
 */

import type { ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';

import { REPO_ROOT } from '../api/helpers';
import { DEADLINE_MS } from '../support/wait';

export const CHROMIUM = '/usr/bin/chromium';
/** State markers sit on elements that may be empty or hidden. */
export const ATTACHED = { state: 'attached' } as const;

export async function launchBrowser(): Promise<Browser> {
  if (!fs.existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: apt-get install chromium (.ci/run does)`);
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
}

export interface Session {
  context: BrowserContext;
  page: Page;
  base: string;
  /** Every URL the page requested. */
  requests: string[];
  pageErrors: string[];
}

/**
 * A new browser context on `base`/dashboard`hash`, with `key` (API key or JWT) put in
 * the page's key field when given, and the page's "ready" marker reached.
 */
export async function openDashboard(browser: Browser, base: string, hash = '', key: string | null = null): Promise<Session> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(DEADLINE_MS);
  const session: Session = { context, page, base, requests: [], pageErrors: [] };
  page.on('request', (req) => session.requests.push(req.url()));
  page.on('pageerror', (err) => session.pageErrors.push(String(err)));
  page.on('console', (msg) => {
    // HTTP errors the tests ask for (401, 403, 400, 501) are logged by Chromium too.
    if (msg.type() === 'error' && !msg.text().startsWith('Failed to load resource: the server responded')) {
      session.pageErrors.push(msg.text());
    }
  });
  if (key !== null) {
    // The key is kept in sessionStorage; set it before the page's script reads it.
    await context.addInitScript((k: string) => {
      if (!sessionStorage.getItem('quiver.dashboard.apiKey')) sessionStorage.setItem('quiver.dashboard.apiKey', k);
    }, key);
  }
  await page.goto(`${base}/dashboard/${hash}`);
  await page.waitForSelector('body[data-ready="true"]', ATTACHED);
  return session;
}

export async function closeSession(t: ExecutionContext, s: Session): Promise<void> {
  await s.context.close();
  t.deepEqual(s.pageErrors, [], 'no script errors on the page');
  const foreign = s.requests.filter((u) => !u.startsWith(s.base + '/') && !u.startsWith('data:') && !u.startsWith('blob:'));
  t.deepEqual(foreign, [], 'everything comes from Quiver itself');
}

/** Goes to `hash` and waits for `view` to show. */
export async function go(page: Page, hash: string, view: string): Promise<void> {
  await page.evaluate((h) => {
    location.hash = h;
  }, hash);
  await page.getByTestId(view).waitFor({ state: 'visible' });
}

/** Confirms the page's confirmation box, after checking what it says it will send. */
export async function confirm(page: Page, request: RegExp): Promise<string> {
  await page.getByTestId('confirm').waitFor({ state: 'visible' });
  const text = (await page.getByTestId('confirm-request').textContent()) ?? '';
  if (!request.test(text)) throw new Error(`the confirmation shows ${JSON.stringify(text)}, expected ${request}`);
  await page.getByTestId('confirm-ok').click();
  await page.getByTestId('confirm').waitFor({ state: 'hidden' });
  return text;
}

/** The elements that need a write access and are in sight. */
export async function visibleWriteControls(page: Page): Promise<string[]> {
  return page.locator('[data-need]').evaluateAll((els) =>
    els
      .filter((e) => {
        const r = (e as HTMLElement).getBoundingClientRect();
        return r.width > 0 && r.height > 0 && getComputedStyle(e).visibility !== 'hidden';
      })
      .map((e) => e.getAttribute('data-testid') ?? e.id),
  );
}

/**
 * Where screenshots go: docs/dashboard/ when QUIVER_DASHBOARD_SHOTS=1 (to refresh the
 * pictures of docs/dashboard.md), else a directory under the temp dir, so an ordinary
 * test run takes and writes them the same way without changing tracked files.
 */
export const SHOTS_DIR = process.env.QUIVER_DASHBOARD_SHOTS === '1' ? path.join(REPO_ROOT, 'docs', 'dashboard') : path.join(os.tmpdir(), 'quiver-dashboard-shots');

/**
 * A screenshot of the page (for docs/dashboard.md: SHOTS_DIR), written whole or not at all (a
 * temporary file renamed into place), so a run that stops half way leaves no torn PNG.
 * A read-only checkout (the docs cannot be written) is not a failure of the dashboard:
 * the picture is skipped.
 */
export async function shot(page: Page, name: string): Promise<void> {
  const png = await page.screenshot({ fullPage: true, animations: 'disabled', caret: 'hide' });
  try {
    fs.mkdirSync(SHOTS_DIR, { recursive: true });
    const tmp = path.join(SHOTS_DIR, `.${name}.${process.pid}.tmp`);
    fs.writeFileSync(tmp, png);
    fs.renameSync(tmp, path.join(SHOTS_DIR, `${name}.png`));
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EACCES' && code !== 'EROFS' && code !== 'EPERM') throw err;
  }
}
