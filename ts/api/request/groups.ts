/**
 * The grouped forms of the query, search and recommend APIs (`/points/*\/groups`) in
 * their JSON form: the body of the ungrouped request, parsed by its own parser, plus
 * `group_by`, `group_size`, `limit` (the number of groups) and `with_lookup`; and the
 * answer, `GroupsResult`.
 *
 * Owns: validation of the group fields. Must never: know a transport.
 */

import type { ForKeys } from '../../collection/collection';
import type { GroupsRequest, PointGroup, WithLookup } from '../../collection/groups';
import type { QueryRequest } from '../../collection/query';
import { FormatError } from '../../common/errors';
import { engineCount, isObj, keyPath, shardKeySelector, withPayload, withVector, type Obj } from './parse';
import { parseQuery, parseRecommend, parseSearch } from './points';

/** `with_lookup`: a collection name, or `{collection, with_payload (default true), with_vectors (default false)}`. */
function withLookup(x: unknown): WithLookup | null {
  if (x === undefined || x === null) return null;
  if (typeof x === 'string') return { collection: x, withPayload: true, withVector: false };
  if (!isObj(x)) throw new FormatError('with_lookup: expected a collection name or {"collection": ..., "with_payload": ..., "with_vectors": ...}');
  if (typeof x.collection !== 'string') throw new FormatError('with_lookup: missing field `collection`');
  try {
    return { collection: x.collection, withPayload: withPayload(x.with_payload, true), withVector: withVector(x.with_vectors, false) };
  } catch (err) {
    // The selectors' messages name them as the request's own: say whose they are.
    if (err instanceof FormatError) throw new FormatError(`with_lookup.${err.detail.replace(/^with_vector:/, 'with_vectors:')}`);
    throw err;
  }
}

/**
 * The group fields of a body over the parsed ungrouped query: `group_by` (a non-empty
 * key path: 400 otherwise), `group_size` (at least 1: 422 otherwise; required unless
 * `defaultSize` is given), with the offset dropped (grouped requests have none).
 */
function grouped(b: Obj, query: QueryRequest, defaultSize: number | null): ForKeys<GroupsRequest> {
  if (b.group_by === undefined || b.group_by === null) throw new FormatError('missing field `group_by`');
  const groupBy = keyPath(b.group_by, 'group_by');
  if ((b.group_size === undefined || b.group_size === null) && defaultSize === null) throw new FormatError('missing field `group_size`');
  const groupSize = engineCount(b.group_size, 'group_size', defaultSize ?? 0, 1);
  return { req: { query: { ...query, offset: 0 }, groupBy, groupSize, withLookup: withLookup(b.with_lookup) }, shards: shardKeySelector(b.shard_key) };
}

/** `SearchGroupsRequest`: a search body (`vector`, `limit` required) grouped. */
export function parseSearchGroups(b: Obj): ForKeys<GroupsRequest> {
  return grouped(b, parseSearch(b), null);
}

/** `RecommendGroupsRequest`: a recommend body (`limit` required) grouped. */
export function parseRecommendGroups(b: Obj): ForKeys<GroupsRequest> {
  return grouped(b, parseRecommend(b), null);
}

/** `QueryGroupsRequest`: a query body grouped; `limit` defaults to 10 groups, `group_size` to 3, as the reference's. */
export function parseQueryGroups(b: Obj): ForKeys<GroupsRequest> {
  return grouped(b, parseQuery(b), 3);
}

/** `GroupsResult`: each group's hits, value and looked-up point (when there is one). */
export function groupsResult(groups: PointGroup[]): { groups: Array<Record<string, unknown>> } {
  return {
    groups: groups.map((g) => {
      const out: Record<string, unknown> = { hits: g.hits, id: g.id };
      if (g.lookup !== undefined) out.lookup = g.lookup;
      return out;
    }),
  };
}
