/**
 * The facet request of the reference's API in its JSON form: the body of `POST
 * /collections/{name}/facet` (FacetRequest: key, filter, limit >= 1 (default 10),
 * exact, shard_key), and the answer (FacetResponse: `{hits: [{value, count}]}`). The
 * gRPC `Facet` call is translated to this form first.
 *
 * Owns: checking a facet request. Must never: know a transport or count.
 */

import type { FacetHit, FacetRequest } from '../../collection/facet';
import type { ForKeys } from '../../collection/collection';
import { FormatError } from '../../common/errors';
import { filter, keyPath, shardKeySelector, uint, type Obj } from './parse';

export function parseFacet(b: Obj): ForKeys<FacetRequest> {
  if (b.key === undefined || b.key === null) throw new FormatError('missing field `key`');
  const key = keyPath(b.key, 'key');
  if (b.exact !== undefined && b.exact !== null && typeof b.exact !== 'boolean') throw new FormatError('exact: expected a boolean');
  return {
    req: { key, filter: filter(b.filter), limit: uint(b.limit, 'limit', 10, 1), exact: b.exact === true },
    shards: shardKeySelector(b.shard_key),
  };
}

/** FacetResponse. */
export function facetResponse(hits: FacetHit[]): { hits: FacetHit[] } {
  return { hits };
}
