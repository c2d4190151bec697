/**
 * The access check of every REST route, run after the route matched and before its
 * body is read (so an upload without manage access is refused unread).
 *
 * Authentication failures answer with a plain-text body, as the reference's
 * middleware does (401, or 403 for a token that is not valid); a caller that is known
 * but lacks access gets the JSON error envelope with 403 "Forbidden: ...". Every
 * decision is written to the audit log when one is configured.
 *
 * Owns: that middleware and `ctx.state.access`. Must never: decide policy (ts/auth).
 */

import type { Context, Middleware, Next } from 'koa';

import { MANAGE, check, type Access, type Requirement } from '../../auth/access';
import type { AuditLog } from '../../auth/audit';
import { AuthError, type Authenticator } from '../../auth/authenticate';
import { requirementOf } from '../../auth/policy';
import { ForbiddenError } from '../../common/errors';

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

/** What a guard needs of a request (a Koa context or the direct lane's request). */
export interface GuardInput {
  headers: Record<string, string | string[] | undefined>;
  method: string;
  path: string;
  params: Record<string, string | undefined>;
  address: string | null;
}

/** A caller refused before any access check: the plain-text answer (401, or 403 for a bad token). */
export interface Unauthenticated {
  status: number;
  message: string;
}

/**
 * The access decision for one request to a route that needs `req`: the caller's access,
 * or an Unauthenticated answer; throws ForbiddenError when the caller lacks access.
 * Every decision is written to the audit log. The one implementation of the guard: the
 * Koa middleware below and the direct lane (direct.ts) both call it.
 */
export async function decide(authn: Authenticator, audit: AuditLog | null, req: Exclude<Requirement, { scope: 'open' }>, r: GuardInput): Promise<{ access: Access } | Unauthenticated> {
  const collection = req.scope === 'collection' ? String(r.params[req.param]) : null;
  // The audit names the collection a request is about, global-scope ones too (create, delete, recover).
  const named = collection ?? r.params.collection_name ?? null;
  const record = (subject: string | null, allowed: boolean, reason: string | null) =>
    audit?.record({ subject, address: r.address, method: r.method, path: r.path, collection: named, allowed, reason });
  let caller;
  try {
    caller = await authn.authenticate(r.headers);
  } catch (err) {
    if (!(err instanceof AuthError)) throw err;
    record(null, false, err.message);
    return { status: err.reason === 'unauthenticated' ? 401 : 403, message: err.message };
  }
  if (req.scope !== 'listing') {
    try {
      check(caller.access, collection, req);
    } catch (err) {
      if (err instanceof ForbiddenError) record(caller.subject, false, err.detail);
      throw err;
    }
  }
  record(caller.subject, true, null);
  return { access: caller.access };
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
