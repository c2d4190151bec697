/**
 * The Formula and Expression messages of points.proto (the `formula` query) to the JSON
 * form of REST's FormulaQuery, which `formulaQuery` of ts/api/request/formula.ts parses.
 *
 * Owns: the field-by-field translation, bounded in depth as the parser bounds it (so a
 * deep message is refused with the same words). Must never: check what the parser checks.
 */

import { BadInputError, FormatError } from '../../../common/errors';
import { MAX_FORMULA_DEPTH } from '../../../collection/formula';
import { conditionJson, type ConditionMsg, type GeoPointMsg } from './filter';
import { mapToJson, type ValueMap } from './value';

type Json = Record<string, unknown>;

interface DecayMsg {
  x?: ExpressionMsg;
  target?: ExpressionMsg | null;
  scale?: number | null;
  midpoint?: number | null;
}

export interface ExpressionMsg {
  variant?: string;
  constant?: number;
  variable?: string;
  condition?: ConditionMsg;
  geo_distance?: { origin?: GeoPointMsg; to?: string };
  datetime?: string;
  datetime_key?: string;
  mult?: { mult?: ExpressionMsg[] };
  sum?: { sum?: ExpressionMsg[] };
  div?: { left?: ExpressionMsg; right?: ExpressionMsg; by_zero_default?: number | null };
  neg?: ExpressionMsg;
  abs?: ExpressionMsg;
  sqrt?: ExpressionMsg;
  pow?: { base?: ExpressionMsg; exponent?: ExpressionMsg };
  exp?: ExpressionMsg;
  log10?: ExpressionMsg;
  ln?: ExpressionMsg;
  exp_decay?: DecayMsg;
  gauss_decay?: DecayMsg;
  lin_decay?: DecayMsg;
}

export interface FormulaMsg {
  expression?: ExpressionMsg;
  defaults?: ValueMap;
}

function present<T>(x: T | undefined | null): x is T {
  return x !== undefined && x !== null;
}

function decayToJson(d: DecayMsg | undefined, field: string, depth: number): Json {
  const m = d ?? {};
  const out: Json = { x: expressionToJson(m.x, `${field}.x`, depth + 1) };
  if (present(m.target)) out.target = expressionToJson(m.target, `${field}.target`, depth + 1);
  if (present(m.scale)) out.scale = m.scale;
  if (present(m.midpoint)) out.midpoint = m.midpoint;
  return out;
}

export function expressionToJson(e: ExpressionMsg | undefined, field: string, depth = 1): unknown {
  if (depth > MAX_FORMULA_DEPTH) throw new BadInputError(`${field}: the formula is nested deeper than ${MAX_FORMULA_DEPTH} levels, more than Quiver allows`);
  if (!present(e)) throw new FormatError(`${field}: missing expression`);
  const sub = (x: ExpressionMsg | undefined, at: string) => expressionToJson(x, at, depth + 1);
  const at = `${field}.${e.variant ?? ''}`;
  switch (e.variant) {
    case 'constant':
      return e.constant ?? 0;
    case 'variable':
      return e.variable ?? '';
    case 'condition':
      return conditionJson(e.condition ?? {}, at);
    case 'geo_distance': {
      const g = e.geo_distance ?? {};
      return { geo_distance: { origin: g.origin === undefined || g.origin === null ? undefined : { lat: g.origin.lat, lon: g.origin.lon }, to: g.to } };
    }
    case 'datetime':
      return { datetime: e.datetime ?? '' };
    case 'datetime_key':
      return { datetime_key: e.datetime_key ?? '' };
    case 'mult':
      return { mult: (e.mult?.mult ?? []).map((x, i) => sub(x, `${at}[${i}]`)) };
    case 'sum':
      return { sum: (e.sum?.sum ?? []).map((x, i) => sub(x, `${at}[${i}]`)) };
    case 'div': {
      const d = e.div ?? {};
      const out: Json = { left: sub(d.left, `${at}.left`), right: sub(d.right, `${at}.right`) };
      if (present(d.by_zero_default)) out.by_zero_default = d.by_zero_default;
      return { div: out };
    }
    case 'pow':
      return { pow: { base: sub(e.pow?.base, `${at}.base`), exponent: sub(e.pow?.exponent, `${at}.exponent`) } };
    case 'neg':
    case 'abs':
    case 'sqrt':
    case 'exp':
    case 'log10':
    case 'ln':
      return { [e.variant]: sub(e[e.variant], at) };
    case 'exp_decay':
    case 'gauss_decay':
    case 'lin_decay':
      return { [e.variant]: decayToJson(e[e.variant], at, depth) };
    default:
      throw new FormatError(`${field}: an Expression with none of its variants set`);
  }
}

/** A Formula to REST's FormulaQuery. */
export function formulaToJson(f: FormulaMsg | undefined, field: string): Json {
  const m = f ?? {};
  const out: Json = { formula: expressionToJson(m.expression, `${field}.formula`) };
  if (present(m.defaults) && Object.keys(m.defaults).length > 0) out.defaults = mapToJson(m.defaults, `${field}.defaults`);
  return out;
}
