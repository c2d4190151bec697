/**
 * The rules of multi-example queries over per-example similarities, for the vectors the
 * engine's graph primitive does not walk (sparse vectors: an exact scan here). The same
 * formulas as the engine's `Rule` (crates/quiver-core/src/hnsw/rule.rs; the doc of
 * `RuleQuery` in bindings/engine.ts).
 *
 * Owns: folding similarities into a score. Must never: read stored vectors.
 */

import type { ScoreRule } from '../../bindings/engine';

const fastSigmoid = (x: number): number => x / (1 + Math.abs(x));
const scaledSigmoid = (x: number): number => 0.5 * (fastSigmoid(x) + 1);

/** f32 machine epsilon, the reference's margin of a context pair. */
const MARGIN = 2 ** -23;

/** The score by `rule` of a point whose similarity to example `j` is `sims[j]` (examples in the engine's order). */
export function ruleScore(rule: ScoreRule, positives: number, sims: ArrayLike<number>): number {
  const n = sims.length;
  switch (rule) {
    case 'best_score': {
      let pos = -Infinity;
      let neg = -Infinity;
      for (let j = 0; j < n; j++) {
        if (j < positives) pos = Math.max(pos, sims[j]);
        else neg = Math.max(neg, sims[j]);
      }
      return pos > neg ? scaledSigmoid(pos) : -scaledSigmoid(neg);
    }
    case 'sum_scores': {
      let s = 0;
      for (let j = 0; j < n; j++) s += j < positives ? sims[j] : -sims[j];
      return s;
    }
    case 'discover': {
      let rank = 0;
      for (let j = 1; j + 1 < n; j += 2) rank += Math.sign(sims[j] - sims[j + 1]);
      return rank + scaledSigmoid(sims[0]);
    }
    case 'context': {
      let s = 0;
      for (let j = 0; j + 1 < n; j += 2) s += fastSigmoid(Math.min(sims[j] - sims[j + 1] - MARGIN, 0));
      return s;
    }
  }
}
