/**
 * JavaScript-side argument checks shared by both backends.
 *
 * Owns: checks of JavaScript *types* (a BigUint64Array where labels go, an integer
 * where a count goes) and the TypeScript-side defaults that the engine has no
 * opinion on. Must never: re-implement the engine's own rules (dimension, k >= 1,
 * finite values, parameter ranges): those come from quiver-core so both backends
 * fail the same way with the same code.
 */

import type { Datatype, Distance, IndexOptions, RuleQuery, SearchOptions, SparseBatch, SparseIndexOptions, SparseSearchOptions } from './engine';
import { DATATYPES, SCORE_RULES } from './engine';
import { invalidArgument } from './errors';

export const DISTANCES: readonly Distance[] = ['Cosine', 'Dot', 'Euclid', 'Manhattan'];

/**
 * Scalar quantization keeps this quantile of values when the caller gives none: 1, the
 * whole range, as the reference does (the engine's `DEFAULT_SCALAR_QUANTILE`).
 */
export const DEFAULT_SCALAR_QUANTILE = 1;

const MAX_U32 = 0xffff_ffff;

export function checkLabels(labels: unknown, name = 'labels'): asserts labels is BigUint64Array {
  if (!(labels instanceof BigUint64Array)) {
    throw invalidArgument(`${name} must be a BigUint64Array`);
  }
}

export function checkVectors(vectors: unknown, name = 'vectors'): asserts vectors is Float32Array {
  if (!(vectors instanceof Float32Array)) {
    throw invalidArgument(`${name} must be a Float32Array`);
  }
}

export function checkLabel(label: unknown): asserts label is bigint {
  if (typeof label !== 'bigint' || label < 0n || label > 0xffff_ffff_ffff_ffffn) {
    throw invalidArgument('label must be a bigint in 0..2^64-1');
  }
}

/** A non-negative integer that fits the engine's u32 parameters. */
export function checkCount(name: string, value: unknown, max = MAX_U32): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > max) {
    throw invalidArgument(`${name} must be an integer in 0..${max}, got ${String(value)}`);
  }
  return value;
}

export function checkPath(name: string, value: unknown): string {
  if (typeof value !== 'string' || value.length === 0) {
    throw invalidArgument(`${name} must be a non-empty string`);
  }
  return value;
}

/** Index options with JavaScript types checked; absent tuning values stay absent. */
export interface CheckedIndexOptions {
  dim: number;
  distance: Distance;
  m?: number;
  efConstruct?: number;
  fullScanThresholdKb?: number;
  quantization: 'none' | 'scalar' | 'binary';
  quantile?: number;
  seed?: number;
  flat: boolean;
  datatype: Datatype;
  multivector: boolean;
  originalsPath?: string;
}

export function checkIndexOptions(options: IndexOptions): CheckedIndexOptions {
  if (typeof options !== 'object' || options === null) {
    throw invalidArgument('index options must be an object');
  }
  if (!DISTANCES.includes(options.distance)) {
    throw invalidArgument(`distance must be one of ${DISTANCES.join(', ')}, got ${String(options.distance)}`);
  }
  const q = options.quantization ?? { kind: 'none' };
  if (typeof q !== 'object' || q === null || !['none', 'scalar', 'binary'].includes(q.kind)) {
    throw invalidArgument(`quantization.kind must be none, scalar or binary`);
  }
  let quantile: number | undefined;
  if (q.kind === 'scalar') {
    quantile = q.quantile ?? DEFAULT_SCALAR_QUANTILE;
    if (typeof quantile !== 'number') throw invalidArgument('quantization.quantile must be a number');
  }
  if (options.flat !== undefined && typeof options.flat !== 'boolean') {
    throw invalidArgument(`flat must be a boolean, got ${String(options.flat)}`);
  }
  if (options.multivector !== undefined && typeof options.multivector !== 'boolean') {
    throw invalidArgument(`multivector must be a boolean, got ${String(options.multivector)}`);
  }
  const datatype = options.datatype ?? 'float32';
  if (!DATATYPES.includes(datatype)) {
    throw invalidArgument(`datatype must be one of ${DATATYPES.join(', ')}, got ${String(options.datatype)}`);
  }
  const opt = (name: string, v: number | undefined) => (v === undefined ? undefined : checkCount(name, v));
  return {
    dim: checkCount('dim', options.dim),
    distance: options.distance,
    m: opt('m', options.m),
    efConstruct: opt('efConstruct', options.efConstruct),
    fullScanThresholdKb: opt('fullScanThresholdKb', options.fullScanThresholdKb),
    quantization: q.kind,
    quantile,
    seed: options.seed === undefined ? undefined : checkCount('seed', options.seed, Number.MAX_SAFE_INTEGER),
    flat: options.flat ?? false,
    datatype,
    multivector: options.multivector ?? false,
    ...(options.originalsPath !== undefined ? { originalsPath: checkPath('originalsPath', options.originalsPath) } : {}),
  };
}

export function checkSearchOptions(options: SearchOptions): void {
  if (typeof options !== 'object' || options === null) {
    throw invalidArgument('search options must be an object');
  }
  // k = 0 passes here on purpose: the engine rejects it with its own message.
  checkCount('k', options.k);
  if (options.ef !== undefined) checkCount('ef', options.ef);
  if (options.allow !== undefined) checkLabels(options.allow, 'allow');
  if (options.oversampling !== undefined && typeof options.oversampling !== 'number') {
    throw invalidArgument('oversampling must be a number');
  }
}

/** The arguments of exportLiveFrom (the engine refuses 0 and a `from` past its slots). */
export function checkPage(from: unknown, maxCount: unknown): void {
  checkCount('from', from);
  checkCount('maxCount', maxCount);
}

export function checkThreads(threads: unknown): number | undefined {
  return threads === undefined ? undefined : checkCount('threads', threads, 1024);
}

/** Checks a sparse batch's array types (the engine checks lengths, order and values). */
export function checkSparseBatch(b: SparseBatch): void {
  checkLabels(b.labels);
  if (!(b.offsets instanceof Uint32Array)) throw invalidArgument('offsets must be a Uint32Array');
  if (!(b.indices instanceof Uint32Array)) throw invalidArgument('indices must be a Uint32Array');
  checkVectors(b.values, 'values');
}

export function checkSparseQuery(indices: unknown, values: unknown, options: SparseSearchOptions): void {
  if (!(indices instanceof Uint32Array)) throw invalidArgument('indices must be a Uint32Array');
  checkVectors(values, 'values');
  checkCount('k', options.k);
  if (options.allow !== undefined) checkLabels(options.allow, 'allow');
}

export interface CheckedSparseOptions {
  fullScanThreshold: number;
  datatype: Datatype;
}

export function checkSparseOptions(options: SparseIndexOptions | undefined): CheckedSparseOptions {
  const fullScanThreshold = options?.fullScanThreshold === undefined ? 5000 : checkCount('fullScanThreshold', options.fullScanThreshold);
  const datatype = options?.datatype ?? 'float32';
  if (!DATATYPES.includes(datatype)) {
    throw invalidArgument(`datatype must be one of ${DATATYPES.join(', ')}, got ${String(options?.datatype)}`);
  }
  return { fullScanThreshold, datatype };
}

/** Checks a rule query's shape (the engine checks the counts against the rule). */
export function checkRuleQuery(q: RuleQuery): void {
  if (typeof q !== 'object' || q === null) throw invalidArgument('a rule query must be an object');
  if (!SCORE_RULES.includes(q.rule)) throw invalidArgument(`unknown rule ${JSON.stringify(q.rule)}`);
  checkVectors(q.examples, 'examples');
  checkCount('positives', q.positives);
}
