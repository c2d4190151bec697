/**
 * The grouped similarity requests of `qdrant.Points` (SearchPointGroups,
 * RecommendPointGroups, QueryPointGroups; points.proto) to the JSON bodies of the same
 * REST requests (`/points/*\/groups`), and GroupsResult back.
 *
 * Owns: those translations. Must never: decide what a request means or whether it is
 * valid (ts/api/request/groups.ts does, for both APIs).
 */

import type { PointGroup } from '../../../collection/groups';
import { int64 } from './common';
import { put, retrievedPointOut, scoredPointOut, withPayloadToJson, withVectorsToJson, type WithPayloadMsg, type WithVectorsMsg } from './points';
import { queryPointsToJson, recommendPointsToJson, searchPointsToJson, type QueryPointsMsg, type RecommendPointsMsg, type SearchPointsMsg } from './query';

type Long = string | number;
type Json = Record<string, unknown>;

interface WithLookupMsg {
  collection?: string;
  with_payload?: WithPayloadMsg;
  with_vectors?: WithVectorsMsg;
}

interface GroupFieldsMsg {
  group_by?: string;
  group_size?: Long;
  with_lookup?: WithLookupMsg;
}

export type SearchPointGroupsMsg = SearchPointsMsg & GroupFieldsMsg;
export type RecommendPointGroupsMsg = RecommendPointsMsg & GroupFieldsMsg;
export type QueryPointGroupsMsg = QueryPointsMsg & GroupFieldsMsg;

function present<T>(x: T | undefined | null): x is T {
  return x !== undefined && x !== null;
}

/** The group fields; a proto3 scalar left at its default is absent on the wire, so `group_by` is then "" and `group_size` 0 (the parser refuses both as REST's does). */
function groupFields(r: GroupFieldsMsg, out: Json, sizeRequired: boolean): Json {
  out.group_by = r.group_by ?? '';
  if (present(r.group_size)) out.group_size = int64(r.group_size);
  else if (sizeRequired) out.group_size = 0;
  if (present(r.with_lookup)) {
    const l: Json = { collection: r.with_lookup.collection ?? '' };
    put(l, 'with_payload', withPayloadToJson(r.with_lookup.with_payload));
    put(l, 'with_vectors', withVectorsToJson(r.with_lookup.with_vectors));
    out.with_lookup = l;
  }
  return out;
}

/** SearchPointGroups to the body of `POST /points/search/groups`. */
export function searchGroupsToJson(r: SearchPointGroupsMsg): Json {
  return groupFields(r, searchPointsToJson(r), true);
}

/** RecommendPointGroups to the body of `POST /points/recommend/groups`. */
export function recommendGroupsToJson(r: RecommendPointGroupsMsg): Json {
  return groupFields(r, recommendPointsToJson(r), true);
}

/** QueryPointGroups to the body of `POST /points/query/groups` (`limit` and `group_size` optional there). */
export function queryGroupsToJson(r: QueryPointGroupsMsg): Json {
  return groupFields(r, queryPointsToJson(r), false);
}

/** A group value to GroupId: a string, an unsigned or a signed integer. */
function groupIdOut(id: string | number): Json {
  if (typeof id === 'string') return { string_value: id };
  return id >= 0 ? { unsigned_value: String(id) } : { integer_value: String(id) };
}

/** Groups to GroupsResult (the hits and lookups sit three messages deep in the response). */
export function groupsResultOut(groups: PointGroup[]): Json {
  return {
    groups: groups.map((g) => {
      const out: Json = { id: groupIdOut(g.id), hits: g.hits.map((h) => scoredPointOut(h, 3)) };
      if (g.lookup !== undefined) out.lookup = retrievedPointOut(g.lookup, 3);
      return out;
    }),
  };
}
