/**
 * The `formula` query of the query API in its JSON form (FormulaQuery: `formula` and
 * `defaults`), parsed into the typed expression of ts/collection/formula.ts.
 *
 * Owns: telling the expression's forms apart (a number, a variable name, an operation
 * object, else a filter condition), the variables' names (`$score`, `$score[i]`, payload
 * keys), the decay constants' checks, and a bound on the nesting (checked as it goes,
 * so deep input is refused, never overflows). Must never: evaluate anything.
 */

import { BadInputError, FormatError, ValidationError } from '../../common/errors';
import type { Mmr } from '../../collection/query';
import { MAX_MMR_CANDIDATES } from '../../collection/mmr';
import { decayLambda, MAX_FORMULA_DEPTH, scoreKey, type DecayKind, type Expr, type Formula } from '../../collection/formula';
import { FilterError, parseDatetime, parseKey, validateFilter } from '../../shard/filter';
import { isObj, type Obj } from './parse';

const OPERATIONS = ['mult', 'sum', 'neg', 'abs', 'sqrt', 'exp', 'log10', 'ln', 'div', 'pow', 'geo_distance', 'datetime', 'datetime_key', 'exp_decay', 'gauss_decay', 'lin_decay'] as const;

const SCORE_RE = /^\$score(?:\[(\d+)\])?$/;

/** `$score` → 0, `$score[i]` → i; any other `$` name is refused. */
function scoreIndex(name: string, field: string): number {
  const m = SCORE_RE.exec(name);
  if (m === null) {
    if (name.startsWith('$score')) throw new BadInputError(`${field}: Invalid reserved variable: ${name}`);
    throw new BadInputError(`${field}: Invalid reserved word: ${name}`);
  }
  const i = m[1] === undefined ? 0 : Number(m[1]);
  if (!Number.isSafeInteger(i)) throw new BadInputError(`${field}: Invalid reserved variable: ${name}`);
  return i;
}

function payloadKey(name: string, field: string): string {
  try {
    parseKey(name, field);
  } catch (e) {
    if (e instanceof FilterError) throw new BadInputError(`${field}: Invalid payload variable: ${JSON.stringify(name)} (${e.message})`);
    throw e;
  }
  return name;
}

function variable(name: string, field: string): Expr {
  if (name.startsWith('$')) return { score: scoreIndex(name, field) };
  return { payload: payloadKey(name, field) };
}

function f32(x: unknown, field: string): number {
  if (typeof x !== 'number' || !Number.isFinite(x)) throw new FormatError(`${field}: expected a number, got ${JSON.stringify(x)}`);
  const v = Math.fround(x);
  if (!Number.isFinite(v)) throw new FormatError(`${field}: ${x} is not a finite 32-bit float`);
  return v;
}

function datetimeSeconds(x: unknown, field: string): number {
  if (typeof x !== 'string') throw new FormatError(`${field}: expected an RFC 3339 datetime string`);
  const ms = parseDatetime(x);
  if (Number.isNaN(ms)) throw new BadInputError(`${field}: ${JSON.stringify(x)} is not a valid datetime`);
  return Math.floor(ms / 1000);
}

function list(x: unknown, field: string, depth: number): Expr[] {
  if (!Array.isArray(x)) throw new FormatError(`${field}: expected an array of expressions`);
  return x.map((e, i) => expression(e, `${field}[${i}]`, depth + 1));
}

function decay(kind: DecayKind, x: unknown, field: string, depth: number): Expr {
  if (!isObj(x)) throw new FormatError(`${field}: expected an object`);
  if (x.x === undefined) throw new FormatError(`${field}: missing field \`x\``);
  const midpoint = x.midpoint === undefined || x.midpoint === null ? 0.5 : f32(x.midpoint, `${field}.midpoint`);
  const scale = x.scale === undefined || x.scale === null ? 1 : f32(x.scale, `${field}.scale`);
  return {
    decay: {
      kind,
      x: expression(x.x, `${field}.x`, depth + 1),
      target: x.target === undefined || x.target === null ? null : expression(x.target, `${field}.target`, depth + 1),
      lambda: decayLambda(kind, midpoint, scale),
    },
  };
}

/** One expression at nesting `depth` (the formula itself is 1). */
export function expression(x: unknown, field: string, depth = 1): Expr {
  if (depth > MAX_FORMULA_DEPTH) throw new BadInputError(`${field}: the formula is nested deeper than ${MAX_FORMULA_DEPTH} levels, more than Quiver allows`);
  if (typeof x === 'number') return { constant: f32(x, field) };
  if (typeof x === 'string') return variable(x, field);
  if (!isObj(x)) throw new FormatError(`${field}: expected a number, a variable name, an operation or a condition`);
  const op = OPERATIONS.find((k) => k in x);
  if (op === undefined) return { condition: condition(x, field) };
  const arg = x[op];
  const at = `${field}.${op}`;
  switch (op) {
    case 'mult':
      return { mult: list(arg, at, depth) };
    case 'sum':
      return { sum: list(arg, at, depth) };
    case 'neg':
      return { neg: expression(arg, at, depth + 1) };
    case 'abs':
      return { abs: expression(arg, at, depth + 1) };
    case 'sqrt':
      return { sqrt: expression(arg, at, depth + 1) };
    case 'exp':
      return { exp: expression(arg, at, depth + 1) };
    case 'log10':
      return { log10: expression(arg, at, depth + 1) };
    case 'ln':
      return { ln: expression(arg, at, depth + 1) };
    case 'div': {
      if (!isObj(arg)) throw new FormatError(`${at}: expected an object with \`left\` and \`right\``);
      if (arg.left === undefined) throw new FormatError(`${at}: missing field \`left\``);
      if (arg.right === undefined) throw new FormatError(`${at}: missing field \`right\``);
      const byZeroDefault = arg.by_zero_default === undefined || arg.by_zero_default === null ? null : f32(arg.by_zero_default, `${at}.by_zero_default`);
      return { div: { left: expression(arg.left, `${at}.left`, depth + 1), right: expression(arg.right, `${at}.right`, depth + 1), byZeroDefault } };
    }
    case 'pow': {
      if (!isObj(arg)) throw new FormatError(`${at}: expected an object with \`base\` and \`exponent\``);
      if (arg.base === undefined) throw new FormatError(`${at}: missing field \`base\``);
      if (arg.exponent === undefined) throw new FormatError(`${at}: missing field \`exponent\``);
      return { pow: { base: expression(arg.base, `${at}.base`, depth + 1), exponent: expression(arg.exponent, `${at}.exponent`, depth + 1) } };
    }
    case 'geo_distance': {
      if (!isObj(arg)) throw new FormatError(`${at}: expected an object with \`origin\` and \`to\``);
      const o = arg.origin;
      if (!isObj(o) || typeof o.lat !== 'number' || typeof o.lon !== 'number') throw new FormatError(`${at}.origin: expected a geo point {"lat": ..., "lon": ...}`);
      if (!(o.lat >= -90 && o.lat <= 90)) throw new BadInputError(`${at}.origin.lat: ${o.lat} is out of range [-90, 90]`);
      if (!(o.lon >= -180 && o.lon <= 180)) throw new BadInputError(`${at}.origin.lon: ${o.lon} is out of range [-180, 180]`);
      if (typeof arg.to !== 'string') throw new FormatError(`${at}.to: expected a payload key`);
      return { geoDistance: { origin: { lat: o.lat, lon: o.lon }, to: payloadKey(arg.to, `${at}.to`) } };
    }
    case 'datetime':
      return { datetime: datetimeSeconds(arg, at) };
    case 'datetime_key':
      if (typeof arg !== 'string') throw new FormatError(`${at}: expected a payload key`);
      return { datetimeKey: payloadKey(arg, at) };
    case 'exp_decay':
      return decay('exp', arg, at, depth);
    case 'gauss_decay':
      return decay('gauss', arg, at, depth);
    case 'lin_decay':
      return decay('lin', arg, at, depth);
  }
}

/** A filter condition used as a term, checked as a filter's condition is. */
function condition(x: Obj, field: string): { must: NonNullable<ReturnType<typeof validateFilter>['must']> } {
  try {
    const f = validateFilter({ must: [x] });
    return { must: f.must ?? [] };
  } catch (e) {
    if (e instanceof FilterError) throw new BadInputError(`${field}: not an expression nor a valid condition: ${e.message}`);
    throw e;
  }
}

/** `{"formula": ..., "defaults": {...}}`: the formula query. */
export function formulaQuery(x: Obj, field = 'query'): Formula {
  if (x.formula === undefined || x.formula === null) throw new FormatError(`${field}: missing field \`formula\``);
  const expr = expression(x.formula, `${field}.formula`);
  const defaults = new Map<string, unknown>();
  if (x.defaults !== undefined && x.defaults !== null) {
    if (!isObj(x.defaults)) throw new FormatError(`${field}.defaults: expected an object`);
    for (const [name, v] of Object.entries(x.defaults)) {
      const at = `${field}.defaults.${name}`;
      if (name.startsWith('$')) defaults.set(scoreKey(scoreIndex(name, at)), v);
      else defaults.set(payloadKey(name, at), v);
    }
  }
  return { expr, defaults };
}

/** `mmr` of a nearest query: `diversity` in [0, 1] (default 0.5), `candidates_limit` up to 16384 (default: the limit). */
export function mmrOf(x: unknown, field = 'query.mmr'): Mmr {
  if (!isObj(x)) throw new FormatError(`${field}: expected an object`);
  let diversity = 0.5;
  if (x.diversity !== undefined && x.diversity !== null) {
    if (typeof x.diversity !== 'number') throw new FormatError(`${field}.diversity: expected a number`);
    if (!(x.diversity >= 0 && x.diversity <= 1)) throw new ValidationError(`${field}.diversity: value ${x.diversity} invalid, must be from 0 to 1`);
    diversity = Math.fround(x.diversity);
  }
  let candidatesLimit: number | null = null;
  if (x.candidates_limit !== undefined && x.candidates_limit !== null) {
    const c = x.candidates_limit;
    if (typeof c !== 'number' || !Number.isInteger(c) || c < 0) throw new FormatError(`${field}.candidates_limit: expected a non-negative integer`);
    if (c > MAX_MMR_CANDIDATES) throw new ValidationError(`${field}.candidates_limit: value ${c} invalid, must be ${MAX_MMR_CANDIDATES} or smaller`);
    candidatesLimit = c;
  }
  return { lambda: 1 - diversity, candidatesLimit };
}

/** `{"sample": "random"}`. */
export function sampleOf(x: unknown, field = 'query.sample'): 'random' {
  if (x !== 'random') throw new FormatError(`${field}: unknown variant ${JSON.stringify(x)}, expected \`random\``);
  return 'random';
}
