/**
 * The distance matrix requests of the reference's API in their JSON form: the body of
 * `POST /collections/{name}/points/search/matrix/pairs` and `.../offsets`
 * (SearchMatrixRequest: filter, sample >= 2 (default 10), limit >= 1 (default 3), using,
 * shard_key), and the two answers (SearchMatrixPairsResponse, SearchMatrixOffsetsResponse).
 * The gRPC SearchMatrixPairs and SearchMatrixOffsets calls are translated to this form first.
 *
 * Owns: checking a matrix request and shaping its answers. Must never: know a transport or compute.
 */

import type { ForKeys, MatrixAnswer, MatrixRequest } from '../../collection/collection';
import type { PointId } from '../../collection/replica';
import { BadInputError, FormatError } from '../../common/errors';
import { filter, shardKeySelector, uint, type Obj } from './parse';

/** Ours: the largest sample one matrix request may take (its cost grows with the square of the sample). */
export const MAX_MATRIX_SAMPLE = 4096;

export function parseMatrix(b: Obj): ForKeys<MatrixRequest> {
  if (b.using !== undefined && b.using !== null && typeof b.using !== 'string') throw new FormatError('using: expected a vector name');
  const sample = uint(b.sample, 'sample', 10, 2);
  if (sample > MAX_MATRIX_SAMPLE) throw new BadInputError(`sample: ${sample} points is more than the ${MAX_MATRIX_SAMPLE} Quiver takes in one distance matrix`);
  return {
    req: { filter: filter(b.filter), sample, limit: uint(b.limit, 'limit', 3, 1), using: typeof b.using === 'string' ? b.using : '' },
    shards: shardKeySelector(b.shard_key),
  };
}

/** SearchMatrixPairsResponse: for each sampled point in order, a pair with each of its nearest, best first. */
export function matrixPairs(a: MatrixAnswer): { pairs: Array<{ a: PointId; b: PointId; score: number }> } {
  return { pairs: a.entries.map((e) => ({ a: a.ids[e.row], b: a.ids[e.col], score: e.score })) };
}

/** SearchMatrixOffsetsResponse: the same entries as row and column indexes into `ids`. */
export function matrixOffsets(a: MatrixAnswer): { offsets_row: number[]; offsets_col: number[]; scores: number[]; ids: PointId[] } {
  return { offsets_row: a.entries.map((e) => e.row), offsets_col: a.entries.map((e) => e.col), scores: a.entries.map((e) => e.score), ids: a.ids };
}
