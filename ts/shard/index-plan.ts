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
  materialize(): Set<Off>;
  test(off: Off): boolean;
}

export const EMPTY_NODE: Node = { est: 0, materialize: () => new Set(), test: () => false };

export function andNode(parts: Node[]): Node {
  if (parts.length === 1) return parts[0];
  const sorted = [...parts].sort((a, b) => a.est - b.est);
  return {
    est: sorted[0].est,
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
