/**
 * Formula queries of the query API (`{"formula": ..., "defaults": ...}`): a score computed
 * for each candidate of the query's prefetches from constants, the prefetches' scores,
 * payload values, filter conditions and arithmetic, as the reference defines them.
 *
 * Owns: the typed expression, the decay constants, and the evaluation of an expression
 * for one point (variables looked up in the point's payload, then in the defaults; an
 * operation that leaves the finite numbers is an error). Must never: parse a request
 * body (ts/api/request/formula.ts does) or read stored points (hybrid.ts gives the
 * evaluation the candidates' scores and payloads).
 */

import { BadInputError } from '../common/errors';
import { haversineMeters, matches, parseDatetime, parseKey, rawValues, type Filter, type GeoPoint } from '../shard/filter';
import type { Payload } from '../shard/payload-store';
import type { PointId } from './replica';

export type DecayKind = 'exp' | 'gauss' | 'lin';

/** A formula's expression, parsed: variables resolved to what they read, decays to their constant. */
export type Expr =
  | { constant: number }
  /** `$score` / `$score[i]`: the point's score in prefetch `i`. */
  | { score: number }
  /** A payload key holding a number. */
  | { payload: string }
  /** A filter condition (as a one-condition filter): 1 where it holds, else 0. */
  | { condition: Filter }
  | { geoDistance: { origin: GeoPoint; to: string } }
  /** A datetime constant, in seconds since the epoch. */
  | { datetime: number }
  /** A payload key holding an RFC 3339 datetime, read as seconds since the epoch. */
  | { datetimeKey: string }
  | { mult: Expr[] }
  | { sum: Expr[] }
  | { neg: Expr }
  | { abs: Expr }
  | { sqrt: Expr }
  | { exp: Expr }
  | { log10: Expr }
  | { ln: Expr }
  | { div: { left: Expr; right: Expr; byZeroDefault: number | null } }
  | { pow: { base: Expr; exponent: Expr } }
  | { decay: { kind: DecayKind; x: Expr; target: Expr | null; lambda: number } };

/** A formula query: its expression and the defaults of its variables (by variableKey). */
export interface Formula {
  expr: Expr;
  defaults: Map<string, unknown>;
}

/** The deepest expression a formula may hold (deeper: 400 before any work). */
export const MAX_FORMULA_DEPTH = 64;

/** The key of a variable in `defaults`: `$score[i]`, or the payload key as written. */
export function scoreKey(index: number): string {
  return `$score[${index}]`;
}

/**
 * The constant of a decay from its midpoint and scale, checked as the reference checks
 * them: lin needs a midpoint in [0, 1], exp and gauss one in (0, 1), every scale above 0.
 */
export function decayLambda(kind: DecayKind, midpoint: number, scale: number): number {
  if (kind === 'lin') {
    if (!(midpoint >= 0 && midpoint <= 1)) throw new BadInputError(`Linear decay midpoint should be in the range [0.0, 1.0], got ${midpoint}.`);
  } else if (!(midpoint > 0 && midpoint < 1)) throw new BadInputError(`Decay midpoint should be in the range (0.0, 1.0), got ${midpoint}.`);
  if (!(scale > 0)) throw new BadInputError(`Decay scale should be non-zero positive, got ${scale}.`);
  if (kind === 'lin') return (1 - midpoint) / scale;
  if (kind === 'exp') return Math.log(midpoint) / scale;
  return Math.log(midpoint) / (scale * scale);
}

/** What one point gives a formula: its id, its score in each prefetch (absent where it is not in one), its payload. */
export interface PointVars {
  id: PointId;
  scores: ReadonlyArray<number | undefined>;
  payload: Payload;
  /** Whether a condition of the formula holds for the point (absent: decided on `payload` here). */
  holds?: (condition: Filter) => boolean;
}

/** Whether the formula reads payload values (variables, geo distances, datetime keys). */
export function readsPayload(e: Expr): boolean {
  const stack: Expr[] = [e];
  while (stack.length > 0) {
    const x = stack.pop()!;
    if ('payload' in x || 'geoDistance' in x || 'datetimeKey' in x) return true;
    stack.push(...children(x));
  }
  return false;
}

/** The conditions of the formula, each once. */
export function conditionsOf(e: Expr): Filter[] {
  const out: Filter[] = [];
  const stack: Expr[] = [e];
  while (stack.length > 0) {
    const x = stack.pop()!;
    if ('condition' in x) out.push(x.condition);
    stack.push(...children(x));
  }
  return out;
}

function children(x: Expr): Expr[] {
  if ('mult' in x) return x.mult;
  if ('sum' in x) return x.sum;
  if ('neg' in x) return [x.neg];
  if ('abs' in x) return [x.abs];
  if ('sqrt' in x) return [x.sqrt];
  if ('exp' in x) return [x.exp];
  if ('log10' in x) return [x.log10];
  if ('ln' in x) return [x.ln];
  if ('div' in x) return [x.div.left, x.div.right];
  if ('pow' in x) return [x.pow.base, x.pow.exponent];
  if ('decay' in x) return x.decay.target === null ? [x.decay.x] : [x.decay.x, x.decay.target];
  return [];
}

function finite(v: number, what: () => string): number {
  if (Number.isFinite(v)) return v;
  throw new BadInputError(`The formula gave a non-finite number: ${what()} = ${v}`);
}

/** The value of payload key `key` for a point: its single value, several as an array, none as undefined. */
function payloadValue(payload: Payload, key: string): unknown {
  const values: unknown[] = [];
  for (const v of rawValues(payload, parseKey(key))) {
    if (Array.isArray(v)) values.push(...v);
    else values.push(v);
  }
  if (values.length === 0) return undefined;
  return values.length === 1 ? values[0] : values;
}

/** A payload variable converted by `convert`, from the payload, else from the defaults; an error when neither has a usable value. */
function variable<T>(f: Formula, p: PointVars, key: string, kind: string, convert: (v: unknown) => T | string): T {
  let v = payloadValue(p.payload, key);
  if (v === undefined || v === null) v = f.defaults.get(key);
  if (v === undefined) throw new BadInputError(`Expected a ${kind} in the variable ${JSON.stringify(key)} of the formula, but no value was found in the payload nor in the defaults`);
  const out = convert(v);
  if (typeof out === 'string') throw new BadInputError(`Expected a ${kind} in the variable ${JSON.stringify(key)} of the formula, but ${out}`);
  return out;
}

function asNumber(v: unknown): number | string {
  return typeof v === 'number' ? v : `the value ${JSON.stringify(v)} is not a number`;
}

function asGeo(v: unknown): GeoPoint | string {
  if (typeof v === 'object' && v !== null && !Array.isArray(v)) {
    const { lat, lon } = v as Record<string, unknown>;
    if (typeof lat === 'number' && typeof lon === 'number') return { lat, lon };
  }
  return `the value ${JSON.stringify(v)} is not a geo point`;
}

function asSeconds(v: unknown): number | string {
  if (typeof v !== 'string') return `the value ${JSON.stringify(v)} is not a string`;
  const ms = parseDatetime(v);
  return Number.isNaN(ms) ? `the value ${JSON.stringify(v)} is not a datetime` : Math.floor(ms / 1000);
}

/** The formula's score of one point (a 32-bit float, as the reference answers it; one beyond the 32-bit range is refused). */
export function evaluate(f: Formula, p: PointVars): number {
  const v = evalExpr(f, f.expr, p);
  return finite(Math.fround(v), () => `the score ${v} as a 32-bit float`);
}

function evalExpr(f: Formula, x: Expr, p: PointVars): number {
  if ('constant' in x) return x.constant;
  if ('score' in x) {
    const s = p.scores[x.score];
    if (s !== undefined) return s;
    const d = f.defaults.get(scoreKey(x.score));
    return typeof d === 'number' ? d : 0;
  }
  if ('payload' in x) return variable(f, p, x.payload, 'number', asNumber);
  if ('condition' in x) return (p.holds === undefined ? matches(x.condition, p.id, p.payload) : p.holds(x.condition)) ? 1 : 0;
  if ('geoDistance' in x) return haversineMeters(x.geoDistance.origin, variable(f, p, x.geoDistance.to, 'geo point', asGeo));
  if ('datetime' in x) return x.datetime;
  if ('datetimeKey' in x) return variable(f, p, x.datetimeKey, 'datetime', asSeconds);
  if ('mult' in x) {
    let product = 1;
    for (const e of x.mult) {
      const v = evalExpr(f, e, p);
      if (v === 0) return 0; // a zero factor ends the product: later factors are not evaluated
      product *= v;
    }
    return product;
  }
  if ('sum' in x) {
    let total = 0;
    for (const e of x.sum) total += evalExpr(f, e, p);
    return total;
  }
  if ('neg' in x) return -evalExpr(f, x.neg, p);
  if ('abs' in x) return Math.abs(evalExpr(f, x.abs, p));
  if ('sqrt' in x) {
    const v = evalExpr(f, x.sqrt, p);
    return finite(Math.sqrt(v), () => `sqrt(${v})`);
  }
  if ('exp' in x) {
    const v = evalExpr(f, x.exp, p);
    return finite(Math.exp(v), () => `exp(${v})`);
  }
  if ('log10' in x) {
    const v = evalExpr(f, x.log10, p);
    return finite(Math.log10(v), () => `log10(${v})`);
  }
  if ('ln' in x) {
    const v = evalExpr(f, x.ln, p);
    return finite(Math.log(v), () => `ln(${v})`);
  }
  if ('div' in x) {
    const left = evalExpr(f, x.div.left, p);
    if (left === 0) return 0; // a zero numerator is 0 whatever the denominator
    const right = evalExpr(f, x.div.right, p);
    if (right === 0 && x.div.byZeroDefault !== null) return x.div.byZeroDefault;
    return finite(left / right, () => `${left}/${right}`);
  }
  if ('pow' in x) {
    const base = evalExpr(f, x.pow.base, p);
    const exponent = evalExpr(f, x.pow.exponent, p);
    return finite(Math.pow(base, exponent), () => `${base}^${exponent}`);
  }
  const d = x.decay;
  const v = evalExpr(f, d.x, p);
  const target = d.target === null ? 0 : evalExpr(f, d.target, p);
  if (d.kind === 'exp') return Math.exp(d.lambda * Math.abs(v - target));
  if (d.kind === 'gauss') return Math.exp(d.lambda * (v - target) * (v - target));
  return Math.max(0, 1 - d.lambda * Math.abs(v - target));
}
