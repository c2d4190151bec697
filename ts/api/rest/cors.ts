/**
 * Cross-origin requests, when `service.enable_cors` is on: any origin may call the API
 * (the origin is reflected), with any method the API uses and the headers clients send,
 * including `api-key`.
 *
 * Owns: the CORS response headers and the answer to preflight requests. Must never:
 * authenticate or refuse a request (auth is its own layer).
 */

import type { Context, Next } from 'koa';

const ALLOWED_METHODS = 'GET, POST, PUT, PATCH, DELETE, OPTIONS, HEAD';
const ALLOWED_HEADERS = 'content-type, api-key, authorization';
const PREFLIGHT_MAX_AGE_SECONDS = '3600';

export function corsMiddleware() {
  return async function cors(ctx: Context, next: Next): Promise<void> {
    const origin = ctx.get('Origin');
    if (origin === '') {
      await next();
      return;
    }
    ctx.vary('Origin');
    ctx.set('Access-Control-Allow-Origin', origin);
    const isPreflight = ctx.method === 'OPTIONS' && ctx.get('Access-Control-Request-Method') !== '';
    if (!isPreflight) {
      await next();
      return;
    }
    ctx.set('Access-Control-Allow-Methods', ALLOWED_METHODS);
    // Echo what the browser asks for (covers custom headers), else the usual ones.
    const requested = ctx.get('Access-Control-Request-Headers');
    ctx.set('Access-Control-Allow-Headers', requested !== '' ? requested : ALLOWED_HEADERS);
    ctx.set('Access-Control-Max-Age', PREFLIGHT_MAX_AGE_SECONDS);
    ctx.body = null;
    ctx.status = 204;
  };
}
