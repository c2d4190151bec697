/**
 * Sparse vectors in request bodies: `{indices, values}` under a vector name (points,
 * vector updates, batches) or as a query (`query`, `nearest`, a legacy search's
 * NamedSparseVector).
 *
 * Owns: their checks with the reference's answers: a value that is not an unsigned
 * 32-bit index or a finite 32-bit float is a format error (400); indices and values of
 * different lengths, or an index given twice, fail validation (422, as the reference's
 * validator answers). Indices may come in any order (the index sorts them). Must never:
 * know the collection (the collection checks names against its configuration).
 */

import { FormatError, ValidationError } from '../../common/errors';
import type { SparseVec, SparseVectors } from '../../shard/operations';

type Obj = Record<string, unknown>;

function isObj(x: unknown): x is Obj {
  return typeof x === 'object' && x !== null && !Array.isArray(x);
}

/** Whether `x` has the shape of a sparse vector (an object with `indices`). */
export function looksSparse(x: unknown): x is Obj {
  return isObj(x) && 'indices' in x;
}

/** A checked sparse vector. */
export function sparseVector(x: unknown, field: string): SparseVec {
  if (!isObj(x)) throw new FormatError(`${field}: expected a sparse vector {"indices": [...], "values": [...]}`);
  if (!Array.isArray(x.indices)) throw new FormatError(x.indices === undefined ? `${field}: missing field \`indices\`` : `${field}.indices: expected an array of unsigned integers`);
  if (!Array.isArray(x.values)) throw new FormatError(x.values === undefined ? `${field}: missing field \`values\`` : `${field}.values: expected an array of numbers`);
  const indices = new Uint32Array(x.indices.length);
  x.indices.forEach((v: unknown, i: number) => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffff_ffff) {
      throw new FormatError(`${field}.indices[${i}]: expected an unsigned 32-bit integer, got ${JSON.stringify(v)}`);
    }
    indices[i] = v;
  });
  const values = new Float32Array(x.values.length);
  x.values.forEach((v: unknown, i: number) => {
    if (typeof v !== 'number') throw new FormatError(`${field}.values[${i}]: expected a number, got ${JSON.stringify(v)}`);
    if (!Number.isFinite(v) || !Number.isFinite(Math.fround(v))) throw new FormatError(`${field}.values[${i}]: ${v} is not a finite 32-bit float`);
    values[i] = v;
  });
  if (indices.length !== values.length) {
    throw new ValidationError(`${field}.values: must be the same length as indices (${indices.length} indices, ${values.length} values)`);
  }
  const seen = new Set<number>();
  for (const i of indices) {
    if (seen.has(i)) throw new ValidationError(`${field}.indices: must be unique (${i} is given twice)`);
    seen.add(i);
  }
  return { indices, values };
}

/** The sparse vectors among a point's named vectors (undefined when it has none). */
export function pointSparse(x: unknown, field: string): SparseVectors | undefined {
  if (!isObj(x) || x instanceof Float32Array || looksSparse(x)) return undefined;
  let out: SparseVectors | undefined;
  for (const [name, v] of Object.entries(x)) {
    if (!looksSparse(v)) continue;
    (out ??= new Map()).set(name, sparseVector(v, `${field}.${name}`));
  }
  return out;
}
