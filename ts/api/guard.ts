/**
 * The access decision every API makes before running an operation: who is calling
 * (ts/auth/authenticate.ts), whether that caller may run an operation with the given
 * requirement (ts/auth/access.ts `check`), and the audit record of the decision.
 *
 * Owns: `decide`, the one implementation of that guard, and `makeAuthenticator`. REST (the Koa middleware and
 * the direct lane, ts/api/rest) and gRPC (ts/api/grpc/server.ts) call it, each turning
 * its outcome into its own answer (HTTP 401/403, gRPC UNAUTHENTICATED/PERMISSION_DENIED).
 * Must never: decide policy (ts/auth) or write an answer.
 */

import { check, type Access, type Requirement } from '../auth/access';
import type { AuditLog } from '../auth/audit';
import { AuthError, Authenticator } from '../auth/authenticate';
import { FileKeySource, UrlKeySource, type KeySetLog, type KeySource } from '../auth/jwks';
import { ForbiddenError } from '../common/errors';
import type { Config } from '../config/types';
import { validateFilter } from '../shard/filter';
import type { TableOfContent } from '../storage/toc';
import type { Collection } from '../collection/collection';

/** What a guard needs of a request (a Koa context, the direct lane's request, or a gRPC call). */
export interface GuardInput {
  headers: Record<string, string | string[] | undefined>;
  /** The HTTP method, or for gRPC the call's path (`/qdrant.Points/Upsert`). */
  method: string;
  path: string;
  params: Record<string, string | undefined>;
  address: string | null;
}

/**
 * A caller refused before any access check: `status` 401 (no or unknown credentials)
 * or 403 (a token that is not valid), and the text to answer with.
 */
export interface Unauthenticated {
  status: number;
  message: string;
}

/**
 * The access decision for one request to an operation that needs `req`: the caller's
 * access, or an Unauthenticated answer; throws ForbiddenError when the caller lacks
 * access. Every decision is written to the audit log.
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

/**
 * Other collections a request reads besides its own (`lookup_from`), by name or alias:
 * each must be readable by the caller (the reference's rule: a collection a request
 * looks up must be listed in the caller's token too), and exist.
 */
export function lookupCollections(toc: TableOfContent, access: Access | undefined): (name: string) => Collection {
  return (name) => {
    if (access !== undefined) check(access, name, {});
    return toc.get(name);
  };
}

/**
 * The JWKS of `config` (`service.jwt_jwks_path` or `jwt_jwks_url`, with `jwt_rbac`), or
 * null. A file that cannot be used throws `KeySetFileError` (start-up fails).
 */
export function openKeySource(config: Config, log: KeySetLog): KeySource | null {
  const s = config.service;
  if (!s.jwt_rbac) return null;
  if (s.jwt_jwks_path !== null) return new FileKeySource(s.jwt_jwks_path, log);
  if (s.jwt_jwks_url !== null) return new UrlKeySource(s.jwt_jwks_url, log);
  return null;
}

/**
 * The authenticator of `config`'s keys (one per node, shared by REST and gRPC); a
 * `value_exists` claim is looked up in `toc`; `keys` is the JWKS (see openKeySource).
 */
export function makeAuthenticator(config: Config, toc: TableOfContent, keys: KeySource | null = null): Authenticator {
  return new Authenticator(
    {
      apiKey: config.service.api_key,
      readOnlyKey: config.service.read_only_api_key,
      jwtRbac: config.service.jwt_rbac,
      allowHs256: config.service.jwt_allow_hs256,
      keys,
    },
    async (claim) => {
      if (!toc.has(claim.collection)) return 'no-collection';
      const filter = validateFilter({ must: claim.matches.map(({ key, value }) => ({ key, match: { value } })) });
      return (await toc.get(claim.collection).anyMatch(filter)) ? 'found' : 'no-match';
    },
  );
}
