/**
 * Routes of the reference REST API that this version does not serve yet. Each answers
 * 501 with the error envelope, so a client learns the call exists but is not
 * available, instead of a bare 404 that looks like a wrong URL.
 *
 * Owns: the list of those routes. Must never: hold a route that is implemented (remove
 * it from here when its resource lands).
 */

import type { Context } from 'koa';

import { NotImplementedError } from '../../common/errors';
import type { HttpMethod, RouteTable } from './route';

/** Method and pattern, as the reference's OpenAPI spec spells them (plus its undocumented cluster metadata routes). */
export const NOT_IMPLEMENTED_ROUTES: ReadonlyArray<readonly [HttpMethod, string]> = [
  // collections
  // points
  // issues and quotas
  ['GET', '/quotas'],
  ['PUT', '/quotas'],
];

/**
 * Routes that are served, but some of whose operations answer 501 (the README lists
 * them): `POST /collections/{name}/cluster` with a resharding operation. Not registered here (their own module serves them); the API
 * fuzz suite reads this list too, to accept those 501s.
 */
export const PARTLY_IMPLEMENTED_ROUTES: ReadonlyArray<readonly [HttpMethod, string]> = [['POST', '/collections/{collection_name}/cluster']];

/** Routes whose 501 names a reason beyond "not yet" (what to use instead). */
const REASONS: Readonly<Record<string, string>> = {
  '/quotas':
    'the node-wide resident-memory and disk quotas are not implemented in Quiver; per collection, strict_mode_config limits writes (max_resident_memory_percent, max_points_count, max_collection_vector_size_bytes, max_collection_payload_size_bytes)',
};

export function addNotImplementedRoutes(routes: RouteTable): void {
  for (const [method, pattern] of NOT_IMPLEMENTED_ROUTES) {
    routes.add(method, pattern, (_ctx: Context) => {
      const reason = REASONS[pattern];
      throw new NotImplementedError(reason === undefined ? `${method} ${pattern} is not available in this version of Quiver yet` : `${method} ${pattern}: ${reason}`);
    });
  }
}
