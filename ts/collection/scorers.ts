/**
 * Queries scored by a rule over several examples: the `best_score` and `sum_scores`
 * recommend strategies, discovery and context (the engine's `searchRule`, whose doc in
 * bindings/engine.ts gives the formulas, the reference's).
 *
 * Owns: which query kinds are such rules, their examples in the engine's order, and the
 * rule a replica runs once the examples are vectors. Must never: read stored points
 * (the collection resolves example ids) or know a transport.
 */

import type { Example, QueryKind } from './query';
import type { SearchRule } from './replica';

/** A rule query before its examples are vectors: the examples in the engine's order. */
export interface RulePlan {
  rule: SearchRule['rule'];
  positives: number;
  examples: Example[];
}

/** The rule a query kind is scored by, or null for the kinds that are not rules (nearest, average_vector, ...). */
export function rulePlan(q: QueryKind): RulePlan | null {
  if ('recommend' in q && q.recommend.strategy !== undefined) {
    return { rule: q.recommend.strategy, positives: q.recommend.positive.length, examples: [...q.recommend.positive, ...q.recommend.negative] };
  }
  if ('discover' in q) {
    return { rule: 'discover', positives: 0, examples: [q.discover.target, ...q.discover.context.flatMap((p) => [p.positive, p.negative])] };
  }
  if ('context' in q) return { rule: 'context', positives: 0, examples: q.context.flatMap((p) => [p.positive, p.negative]) };
  return null;
}

/** The examples of any query kind that has some (for lookups and exclusions). */
export function examplesOf(q: QueryKind): Example[] {
  if ('nearest' in q) return [q.nearest];
  if ('recommend' in q) return [...q.recommend.positive, ...q.recommend.negative];
  const plan = rulePlan(q);
  return plan === null ? [] : plan.examples;
}

/** The rule a replica runs: the plan with its examples as one flat list of vectors. */
export function searchRule(plan: RulePlan, vectors: Float32Array[]): SearchRule {
  const dim = vectors.length === 0 ? 0 : vectors[0].length;
  const examples = new Float32Array(vectors.length * dim);
  vectors.forEach((v, i) => examples.set(v, i * dim));
  return { rule: plan.rule, positives: plan.positives, examples };
}

/** Whether a rule plan scores nothing (a context query without pairs: every point scores 0). */
export function scoresNothing(plan: RulePlan): boolean {
  return plan.rule === 'context' && plan.examples.length === 0;
}

/** The 400 text for a rule query over a vector it cannot score (`what`: "the sparse vector \"s\"", ...). */
export function ruleUnsupported(plan: RulePlan, what: string): string {
  const name = plan.rule === 'discover' ? 'Discovery' : plan.rule === 'context' ? 'Context' : `The \`${plan.rule}\` recommend strategy`;
  return `${name} queries over ${what} are not supported by Quiver; they are served over dense vectors with one vector per point`;
}
