/**
 * The web dashboard: static files from `web/dashboard/` under `/dashboard`.
 *
 *   GET /dashboard          -> 302 to /dashboard/ (so the page's relative asset URLs
 *                              resolve under /dashboard/; the browser keeps any #fragment)
 *   GET /dashboard/         -> index.html
 *   GET /dashboard/<file>   -> one of the files in DASHBOARD_FILES, else 404
 *
 * The path normaliser in app.ts trims the trailing slash before routing, so `/dashboard`
 * and `/dashboard/` reach the same route; the raw URL tells them apart.
 *
 * Owns: which files are served and with which headers. Must never: serve a name that is
 * not in the fixed allow-list (no path is ever built from the request), or need
 * authentication (the auth layer leaves paths under /dashboard open; the page itself
 * sends the key the user types with each API call).
 */

import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Context } from 'koa';

import type { RouteTable } from './route';

/** Every file the dashboard is made of, with its content type. */
const DASHBOARD_FILES: ReadonlyMap<string, string> = new Map([
  ['index.html', 'text/html; charset=utf-8'],
  ['app.js', 'text/javascript; charset=utf-8'],
  ['style.css', 'text/css; charset=utf-8'],
]);

/**
 * Everything the page needs comes from this server: scripts and styles from /dashboard,
 * API calls to the same origin, no inline script, no framing by other sites.
 */
const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

export function addDashboardRoutes(routes: RouteTable, dir: string = dashboardDir()): void {
  routes.add('GET', '/dashboard', async (ctx: Context) => {
    const rawPath = ctx.originalUrl.split('?')[0] ?? '';
    if (rawPath !== '/dashboard/') {
      ctx.set('Cache-Control', 'no-cache');
      ctx.redirect('/dashboard/');
      return;
    }
    await sendFile(ctx, dir, 'index.html');
  });
  routes.add('GET', '/dashboard/{file}', async (ctx: Context) => {
    const name = (ctx.params as { file?: string }).file ?? '';
    await sendFile(ctx, dir, name);
  });
}

async function sendFile(ctx: Context, dir: string, name: string): Promise<void> {
  const type = DASHBOARD_FILES.get(name);
  if (type === undefined) return notFound(ctx);
  const file = path.join(dir, name);
  let size: number;
  try {
    const stat = await fs.promises.stat(file);
    if (!stat.isFile()) return notFound(ctx);
    size = stat.size;
  } catch {
    return notFound(ctx);
  }
  ctx.set('Cache-Control', 'no-cache');
  ctx.set('X-Content-Type-Options', 'nosniff');
  ctx.set('Content-Security-Policy', CONTENT_SECURITY_POLICY);
  ctx.set('Referrer-Policy', 'no-referrer');
  ctx.type = type;
  ctx.length = size;
  ctx.body = fs.createReadStream(file);
}

/** The same empty 404 as any unknown route. */
function notFound(ctx: Context): void {
  ctx.body = null;
  ctx.status = 404;
}

/** `web/dashboard` in the repository: the nearest folder above this module that holds package.json. */
export function dashboardDir(): string {
  let dir = __dirname;
  for (;;) {
    if (fs.existsSync(path.join(dir, 'package.json'))) return path.join(dir, 'web', 'dashboard');
    const parent = path.dirname(dir);
    if (parent === dir) return path.join(__dirname, 'web', 'dashboard');
    dir = parent;
  }
}
