/**
 * Facets (`POST /collections/{c}/facet`): the request as the collection takes it, and
 * the merge of the shards' counts into the reference's answer: hits `{value, count}`
 * ordered by count descending, then by value ascending (strings by their UTF-8 bytes,
 * integers numerically, false before true), at most `limit` (default 10), zero counts
 * never listed.
 *
 * Owns: merging and ordering facet counts. Must never: count (replicas do).
 */

import type { Filter } from '../shard/filter';
import type { FacetCounts } from './replica';

export type FacetValue = string | number | boolean;

export interface FacetRequest {
  key: string;
  filter: Filter | null;
  /** At most this many hits (default 10). */
  limit: number;
  /** The reference may approximate when false; these counts are always exact. */
  exact: boolean;
}

export interface FacetHit {
  value: FacetValue;
  count: number;
}

function rank(v: FacetValue): number {
  return typeof v === 'string' ? 0 : typeof v === 'number' ? 1 : 2;
}

export function compareFacetValues(a: FacetValue, b: FacetValue): number {
  const ra = rank(a);
  const rb = rank(b);
  if (ra !== rb) return ra - rb;
  if (typeof a === 'string') return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b as string, 'utf8'));
  if (typeof a === 'number') return a - (b as number);
  return Number(a) - Number(b as boolean);
}

/** Sums the shards' counts per value and orders and cuts them (header comment). */
export function facetHits(answers: FacetCounts[], limit: number): FacetHit[] {
  const sum = new Map<FacetValue, number>();
  for (const a of answers) for (const [v, n] of a) sum.set(v, (sum.get(v) ?? 0) + n);
  const hits: FacetHit[] = [];
  for (const [value, count] of sum) if (count > 0) hits.push({ value, count });
  hits.sort((x, y) => y.count - x.count || compareFacetValues(x.value, y.value));
  return hits.slice(0, limit);
}
