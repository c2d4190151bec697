/**
 * Multivectors in flight: a point's or a query's list of vectors travels as one flat
 * Float32Array (rows of the vector's dimension, one after the other), as the WAL, the
 * replica wire and the engine carry it. The request parser marks the arrays it built
 * from a list of vectors, with the number of rows, so the collection can tell a
 * one-row list from a plain vector and check the rows against the configuration.
 *
 * Owns: that mark. Must never: import anything of Quiver.
 */

/** The most vectors one multivector may hold (the engine's limit, quiver_core::multi::MAX_VECTORS_PER_POINT). */
export const MAX_MULTIVECTOR_ROWS = 1 << 20;

const ROWS = new WeakMap<Float32Array, number>();

/** Marks `flat` as a list of `rows` vectors of equal length. */
export function markMultivector(flat: Float32Array, rows: number): Float32Array {
  ROWS.set(flat, rows);
  return flat;
}

/** The number of rows when `v` came from a list of vectors, else null (a plain vector). */
export function multivectorRows(v: Float32Array): number | null {
  return ROWS.get(v) ?? null;
}

/** A flat list of vectors of dimension `dim` as rows (what `with_vector` shows). */
export function splitRows(flat: Float32Array, dim: number): number[][] {
  const out: number[][] = [];
  for (let at = 0; at < flat.length; at += dim) out.push(Array.from(flat.subarray(at, at + dim)));
  return out;
}
