/**
 * The ids a filter names as a required condition: a `has_id` among the top-level `must`
 * conditions (or nested `must`-only filters there). A point outside that list cannot
 * match, so a shard can visit those ids instead of every point — the candidates of a
 * hybrid query's re-scoring are such a list, and it is small.
 *
 * Owns: reading that list off a validated filter. Must never: decide a match (the
 * filter's predicate still checks every candidate).
 */

import type { Condition, Filter, PointId } from './filter';

/** The shortest `has_id` list the filter requires, or null when it requires none. */
export function requiredIds(filter: Filter): PointId[] | null {
  let best: PointId[] | null = null;
  const visit = (conds: Condition[] | undefined) => {
    for (const c of conds ?? []) {
      if ('has_id' in c) {
        if (best === null || c.has_id.length < best.length) best = c.has_id;
      } else if (isMustOnly(c)) visit(c.must);
    }
  };
  visit(filter.must);
  return best;
}

function isMustOnly(c: Condition): c is Filter & { must: Condition[] } {
  if (typeof c !== 'object' || c === null || !('must' in c) || !Array.isArray((c as Filter).must)) return false;
  const f = c as Filter;
  return (f.should === undefined || f.should.length === 0) && (f.must_not === undefined || f.must_not.length === 0) && f.min_should === undefined;
}
