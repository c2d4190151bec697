/**
 * What a caller may do (an Access) and what an operation needs (a Requirement), and
 * the one function that decides between them, with the reference's 403 messages.
 *
 * Access levels (SPEC 5.8): global manage (`m`, the api key), global read (`r`, the
 * read-only key), or a list of collections each with `r`, `rw` or `prw` (JWT only).
 * A requirement names a scope (global or one collection) and whether it writes,
 * manages, or touches collection "extras" (snapshots, payload indexes, cluster info),
 * which `prw` tokens may not.
 *
 * Owns: those types, parsing the `access` claim, `check()`. Must never: read headers
 * or tokens (authenticate.ts), or know routes (policy.ts).
 */

import { ForbiddenError } from '../common/errors';

export type CollectionMode = 'r' | 'rw' | 'prw';

export type Access = { kind: 'global'; mode: 'm' | 'r' } | { kind: 'collections'; modes: ReadonlyMap<string, CollectionMode> };

export const MANAGE: Access = { kind: 'global', mode: 'm' };
export const READ_ONLY: Access = { kind: 'global', mode: 'r' };

export interface Needs {
  write?: boolean;
  manage?: boolean;
  extras?: boolean;
}

/** What one operation needs. `collection` scopes name the path parameter holding the collection. */
export type Requirement =
  /** No credentials needed at all (health probes, `/`, the dashboard's files). */
  | { scope: 'open' }
  /** Any valid credentials; the answer is filtered to what the caller may see (collection and alias lists, telemetry). */
  | { scope: 'listing' }
  | ({ scope: 'global' } & Needs)
  | ({ scope: 'collection'; param: string } & Needs);

/** Throws the reference's 403 when `access` does not meet `needs` for `collection` (null: a global operation). */
export function check(access: Access, collection: string | null, needs: Needs): void {
  const { write = false, manage = false, extras = false } = needs;
  if (access.kind === 'global') {
    if (access.mode === 'r' && (write || manage)) throw new ForbiddenError('Global manage access is required');
    return;
  }
  if (collection === null) throw new ForbiddenError('Global access is required');
  const mode = access.modes.get(collection);
  if (mode === undefined) throw new ForbiddenError(`Access to collection ${collection} is required`);
  if (extras && mode === 'prw') throw new ForbiddenError(`Only points access is allowed for collection ${collection}`);
  if (write && mode === 'r') throw new ForbiddenError(`Write access to collection ${collection} is required`);
  if (manage) throw new ForbiddenError('Manage access for this operation is required');
}

/** Whether `access` may read collection `name` (for filtering lists). */
export function canSee(access: Access, name: string): boolean {
  return access.kind === 'global' || access.modes.has(name);
}

/** Why an `access` claim is not valid, or the Access it grants. An absent claim grants manage (SPEC 5.7). */
export function parseAccessClaim(x: unknown): Access | string {
  if (x === undefined) return MANAGE;
  if (x === 'm') return MANAGE;
  if (x === 'r') return READ_ONLY;
  if (!Array.isArray(x)) return `access: expected "m", "r" or a list of {collection, access}, got ${JSON.stringify(x)}`;
  const modes = new Map<string, CollectionMode>();
  for (const [i, item] of x.entries()) {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) return `access[${i}]: expected {collection, access}`;
    const { collection, access, payload, ...rest } = item as Record<string, unknown>;
    if (typeof collection !== 'string' || collection === '') return `access[${i}].collection: expected a collection name`;
    if (access !== 'r' && access !== 'rw' && access !== 'prw') return `access[${i}].access: expected "r", "rw" or "prw", got ${JSON.stringify(access)}`;
    if (payload !== undefined) return `access[${i}].payload: the payload constraint is deprecated and not accepted`;
    const unknown = Object.keys(rest);
    if (unknown.length > 0) return `access[${i}]: unknown field ${JSON.stringify(unknown[0])}`;
    if (modes.has(collection)) return `access[${i}].collection: ${collection} is listed twice`;
    modes.set(collection, access);
  }
  return { kind: 'collections', modes };
}
