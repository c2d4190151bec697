/**
 * The data of the cluster benchmarks: the REST benchmark's synthetic set (bench/engine/
 * datasets.ts: 100k x 128-d Gaussian mixture, Cosine, 1000 queries, cached in
 * bench/data/), of which a prefix of `points` base vectors and `queries` queries is
 * used, with its exact ground truth; and request bodies built once, as Buffers.
 */

import type { Dataset, GroundTruth } from '../engine/common';
import { parseArgs } from '../engine/common';
import { loadDataset } from '../engine/datasets';
import { groundTruth, metricSpace, type MetricSpace } from '../engine/groundtruth';
import { vectorText } from './common';

export interface BenchData {
  ds: Dataset;
  space: MetricSpace;
  gt: GroundTruth | null;
}

export const FULL_POINTS = 100_000;
export const FULL_QUERIES = 1000;

export async function loadData(points: number, queries: number, dataDir: string, withGroundTruth: boolean): Promise<BenchData> {
  if (points > FULL_POINTS) throw new Error(`--points: at most ${FULL_POINTS} (the synthetic set's size), got ${points}`);
  if (queries > FULL_QUERIES) throw new Error(`--queries: at most ${FULL_QUERIES}, got ${queries}`);
  const eopts = parseArgs([]);
  eopts.dataDir = dataDir;
  const full = loadDataset('synthetic', eopts);
  if ('skipped' in full) throw new Error(`synthetic data set: ${full.skipped}`);
  const dim = full.dim;
  // The generator writes the base rows first: a prefix is the same data whatever `points` is.
  const ds: Dataset = { ...full, nBase: points, nQuery: queries, base: full.base.subarray(0, points * dim), queries: full.queries.subarray(0, queries * dim) };
  const space = metricSpace(ds);
  const gt = withGroundTruth ? await groundTruth(ds, space, 10, dataDir) : null;
  return { ds, space, gt };
}

/** `{"points":[{"id":i,"vector":[...]}, ...]}` for ids [from, to) in batches of `batch` (as bench/rest builds them), with `idOffset` added to each id. */
export function upsertBodies(ds: Dataset, from: number, to: number, batch: number, idOffset = 0): Buffer[] {
  const out: Buffer[] = [];
  for (let at = from; at < to; at += batch) {
    const end = Math.min(to, at + batch);
    const parts: string[] = [];
    for (let i = at; i < end; i++) parts.push(`{"id":${i + idOffset},"vector":${vectorText(ds.base, ds.dim, i)}}`);
    out.push(Buffer.from(`{"points":[${parts.join(',')}]}`));
  }
  return out;
}

/** Query bodies `{"query":[...],"limit":10,"params":{"hnsw_ef":ef}}`, one per query vector. */
export function queryBodies(ds: Dataset, ef: number): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < ds.nQuery; i++) out.push(Buffer.from(`{"query":${vectorText(ds.queries, ds.dim, i)},"limit":10,"params":{"hnsw_ef":${ef}}}`));
  return out;
}
