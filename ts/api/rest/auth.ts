/**
 * The access check of every REST route, run after the route matched and before its
 * body is read (so an upload without manage access is refused unread).
 *
 * Authentication failures answer with a plain-text body, as the reference's
 * middleware does (401, or 403 for a token that is not valid); a caller that is known
 * but lacks access gets the JSON error envelope with 403 "Forbidden: ...". Every
 * decision is written to the audit log when one is configured.
 *
 * Owns: that middleware and `ctx.state.access`; the decision itself is ts/api/guard.ts
 * `decide`, shared with the direct lane and gRPC. Must never: decide policy (ts/auth).
 */

import type { Context, Middleware, Next } from 'koa';

import { MANAGE, type Access } from '../../auth/access';
import type { AuditLog } from '../../auth/audit';
import type { Authenticator } from '../../auth/authenticate';
import { requirementOf } from '../../auth/policy';
import { decide } from '../guard';

declare module 'koa' {
  interface DefaultState {
    /** What the caller may do (MANAGE when authentication is off). */
    access?: Access;
  }
}

/** The caller's access (set by the guard; manage when no guard ran). */
export function accessOf(ctx: Context): Access {
  return (ctx.state as { access?: Access }).access ?? MANAGE;
}

function clientAddress(ctx: Context): string | null {
  return ctx.req.socket.remoteAddress ?? null;
}

/** The guard middleware of one route, or null when the route is open to everyone. */
export function routeGuard(authn: Authenticator, audit: AuditLog | null, method: string, pattern: string): Middleware | null {
  const req = requirementOf(method, pattern);
  if (req.scope === 'open') return null;
  if (!authn.enabled) {
    return async function noAuth(ctx: Context, next: Next): Promise<void> {
      (ctx.state as { access?: Access }).access = MANAGE;
      await next();
    };
  }
  return async function guard(ctx: Context, next: Next): Promise<void> {
    const decision = await decide(authn, audit, req, {
      headers: ctx.headers,
      method: ctx.method,
      path: ctx.path,
      params: ctx.params as Record<string, string | undefined>,
      address: clientAddress(ctx),
    });
    if (!('access' in decision)) {
      ctx.status = decision.status;
      ctx.type = 'text/plain';
      ctx.body = decision.message;
      return;
    }
    (ctx.state as { access?: Access }).access = decision.access;
    await next();
  };
}
