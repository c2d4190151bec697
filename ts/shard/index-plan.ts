/**
 * The plan nodes `PayloadIndexes.candidates` combines: each a size estimate, a way to
 * materialise its offsets, and a membership test; `and` evaluates the smallest first,
 * `count` serves `should` and `min_should`.
 *
 * Owns: combining candidate sets. Must never: read payloads or indexes itself.
 */

import { Off } from './sorted-keys';

// ---------------------------------------------------------------------------------
// Index nodes (what candidates() combines)

export interface Node {
  /** Rough upper bound of the materialized size (drives evaluation order). */
  readonly est: number;
  /**
   * Evaluation priority in an `and`, above the size estimate: 2 for a match on a
   * keyword or uuid index created with `is_tenant: true` (the first narrowing step),
   * 1 for a range on an index created with `is_principal: true`; absent: 0.
   */
  readonly rank?: number;
  /** The field this node reads (the index's key), for `PayloadIndexes.planOrder`. */
  readonly field?: string;
  materialize(): Set<Off>;
  test(off: Off): boolean;
  /** An `and`'s parts in evaluation order. */
  readonly parts?: readonly Node[];
}

export const EMPTY_NODE: Node = { est: 0, materialize: () => new Set(), test: () => false };

/** Evaluation order of an `and`: by rank (tenant, then principal), then smallest estimate first. */
export function byPriority(a: Node, b: Node): number {
  return (b.rank ?? 0) - (a.rank ?? 0) || a.est - b.est;
}

export function andNode(parts: Node[]): Node {
  if (parts.length === 1) return parts[0];
  const sorted = [...parts].sort(byPriority);
  return {
    est: Math.min(...sorted.map((n) => n.est)),
    parts: sorted,
    materialize() {
      const first = sorted[0].materialize();
      if (sorted.length === 1 || first.size === 0) return first;
      const out = new Set<Off>();
      outer: for (const o of first) {
        for (let i = 1; i < sorted.length; i++) if (!sorted[i].test(o)) continue outer;
        out.add(o);
      }
      return out;
    },
    test: (o) => sorted.every((n) => n.test(o)),
  };
}

/** Offsets in at least `need` (>= 1) of the children. */
export function countNode(need: number, children: Node[]): Node {
  if (need === 1 && children.length === 1) return children[0];
  return {
    est: children.reduce((s, c) => s + c.est, 0),
    materialize() {
      if (need === 1) {
        const out = new Set<Off>();
        for (const c of children) for (const o of c.materialize()) out.add(o);
        return out;
      }
      const counts = new Map<Off, number>();
      for (const c of children) for (const o of c.materialize()) counts.set(o, (counts.get(o) ?? 0) + 1);
      const out = new Set<Off>();
      for (const [o, n] of counts) if (n >= need) out.add(o);
      return out;
    },
    test(o) {
      let n = 0;
      for (const c of children) if (c.test(o) && ++n >= need) return true;
      return false;
    },
  };
}
