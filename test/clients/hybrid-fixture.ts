/**
 * The data and the hand computations of the two hybrid steps that both official
 * JavaScript clients drive (js-client.test.ts over REST, js-grpc-client.test.ts over gRPC):
 * dense + sparse prefetches fused by reciprocal rank fusion, and a ColBERT-style re-rank
 * (a dense prefetch, then a MaxSim multivector query over its candidates). The expected
 * answers are computed here from the vectors, independently of the server's code; the data
 * is chosen without tied scores, and `top` fails on a tie so a change to it cannot make the
 * expected order ambiguous.
 */

export type SparseMap = ReadonlyMap<number, number>;

const sparse = (entries: Array<[number, number]>): SparseMap => new Map(entries);

/** As the clients send a sparse vector: sorted indices and their values. */
export function sparseBody(v: SparseMap): { indices: number[]; values: number[] } {
  const sorted = [...v.entries()].sort((a, b) => a[0] - b[0]);
  return { indices: sorted.map(([i]) => i), values: sorted.map(([, w]) => w) };
}

export const dot = (a: readonly number[], b: readonly number[]): number => a.reduce((s, x, i) => s + x * b[i], 0);

export function sparseDot(a: SparseMap, b: SparseMap): number {
  let s = 0;
  for (const [i, w] of a) s += w * (b.get(i) ?? 0);
  return s;
}

const unit = (v: readonly number[]): number[] => {
  const n = Math.sqrt(dot(v, v));
  return v.map((x) => x / n);
};

/** ColBERT's late interaction with cosine: for each query vector its best cosine over the document's vectors, summed. */
export function maxSimCosine(query: readonly number[][], doc: readonly number[][]): number {
  return query.reduce((s, q) => s + Math.max(...doc.map((d) => dot(unit(q), unit(d)))), 0);
}

/** The ids of the `limit` best scores, best first; throws on a tie (the data must have none). */
export function top(scores: ReadonlyMap<number, number>, limit: number): number[] {
  const values = [...scores.values()];
  if (new Set(values).size !== values.length) throw new Error(`test data has tied scores: ${JSON.stringify([...scores])}`);
  return [...scores.keys()].sort((a, b) => scores.get(b)! - scores.get(a)!).slice(0, limit);
}

/**
 * Reciprocal rank fusion as the reference defines it: the point at position p (counted
 * from 0) of a list gets 1 / (p + k) from that list; a point sums what its lists give.
 * Best first, with no ties.
 */
export function rrfByHand(lists: number[][], k: number): Array<[number, number]> {
  const fused = new Map<number, number>();
  for (const list of lists) list.forEach((id, position) => fused.set(id, (fused.get(id) ?? 0) + 1 / (position + k)));
  return top(fused, fused.size).map((id) => [id, fused.get(id)!]);
}

/** Dense + sparse: a 4-d dot-product vector "dense" and a sparse vector "text"; point 6 has no sparse vector. */
export const HYBRID_DENSE = new Map<number, number[]>([
  [1, [0.9, 0.1, 0, 0]],
  [2, [0.2, 0.8, 0.1, 0]],
  [3, [0.5, 0.5, 0.5, 0]],
  [4, [0, 0.1, 0.9, 0.3]],
  [5, [0.1, 0, 0, 1.0]],
  [6, [0.7, 0.6, 0, 0]],
]);
export const HYBRID_SPARSE = new Map<number, SparseMap>([
  [1, sparse([[1, 0.5], [7, 0.2]])],
  [2, sparse([[3, 1.0], [7, 0.9]])],
  [3, sparse([[1, 0.1], [3, 0.3], [100, 2.0]])],
  [4, sparse([[7, 0.4], [42, 1.5]])],
  [5, sparse([[3, 0.05]])],
]);
export const HYBRID_QUERY_DENSE = [1, 0.3, 0.2, 0];
export const HYBRID_QUERY_SPARSE = sparse([[3, 0.5], [7, 1.0], [100, 0.3]]);
export const HYBRID_DENSE_LIMIT = 4;
export const HYBRID_SPARSE_LIMIT = 3;

/** Every point's dense score, and the sparse scores of the points the sparse query touches. */
export function hybridScores(): { dense: Map<number, number>; sparse: Map<number, number> } {
  const dense = new Map([...HYBRID_DENSE].map(([id, v]) => [id, dot(v, HYBRID_QUERY_DENSE)] as [number, number]));
  const sparseScores = new Map<number, number>();
  for (const [id, v] of HYBRID_SPARSE) {
    const s = sparseDot(HYBRID_QUERY_SPARSE, v);
    if (s !== 0) sparseScores.set(id, s);
  }
  return { dense, sparse: sparseScores };
}

/** ColBERT-style: a 4-d dot-product vector "dense" for retrieval, a 3-d cosine MaxSim multivector "colbert". */
export const COLBERT_DENSE = new Map<number, number[]>([
  [1, [1, 0, 0, 0.1]],
  [2, [0.8, 0.4, 0, 0]],
  [3, [0.6, 0, 0.5, 0]],
  [4, [0.1, 0.9, 0, 0]],
  [5, [0.7, 0.2, 0.2, 0.1]],
]);
export const COLBERT_MULTI = new Map<number, number[][]>([
  [1, [[1, 0, 0], [0, 1, 0]]],
  [2, [[0.5, 0.5, 0], [0, 0, 1], [1, 0.2, 0]]],
  [3, [[0, 1, 1], [1, 1, 0]]],
  [4, [[1, 0, 0.1], [0, 0.2, 1]]],
  [5, [[0.3, 1, 0], [0.9, 0, 0.4]]],
]);
export const COLBERT_QUERY_DENSE = [1, 0.2, 0.1, 0];
export const COLBERT_QUERY_MULTI = [[1, 0.1, 0], [0, 0.3, 1]];
/** The dense prefetch's limit: 4 candidates, which leave out point 4, the best by MaxSim over all points. */
export const COLBERT_CANDIDATES = 4;

export function colbertScores(): { dense: Map<number, number>; maxSim: Map<number, number> } {
  const dense = new Map([...COLBERT_DENSE].map(([id, v]) => [id, dot(v, COLBERT_QUERY_DENSE)] as [number, number]));
  const maxSim = new Map([...COLBERT_MULTI].map(([id, d]) => [id, maxSimCosine(COLBERT_QUERY_MULTI, d)] as [number, number]));
  const candidates = top(dense, COLBERT_CANDIDATES);
  if (candidates.includes(4) || top(maxSim, 1)[0] !== 4) throw new Error('test data: point 4 must be the MaxSim best and outside the dense candidates');
  return { dense, maxSim };
}

/** The normalised vectors a cosine multivector is stored as. */
export const normalised = (m: readonly number[][]): number[][] => m.map(unit);
