/**
 * What the on-disk shard tests (ondisk-graph, ondisk-vectors) share: a shard on the
 * loaded engine, seeded batches of DIM-dimensional points, the same writes to twin
 * shards, their search answers, and the mapped files of a shard directory.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';

import { loadEngine } from '../../bindings';
import type { VectorSpec } from '../../ts/shard/vector-store';
import { normalizePointId } from '../../ts/shard/id-tracker';
import { LocalShard } from '../../ts/shard/local-shard';
import type { ShardOperation } from '../../ts/shard/operations';
import { mulberry32 } from '../support/rng';

const logger = pino({ level: 'silent' });
export const engine = loadEngine({ logger });
export const DIM = 16;

/** A new temporary directory named from `prefix`. */
export const tmp = (prefix: string): string => fs.mkdtempSync(path.join(os.tmpdir(), prefix));

export async function open(dir: string, vs: VectorSpec): Promise<LocalShard> {
  return LocalShard.open({ dir, engine, vectors: [vs], walSegmentBytes: 1 << 20, flushIntervalMs: 3_600_000, payloadIndexes: {}, logger });
}

/** An upsert of `ids` with vectors drawn from `seed`. */
export function batch(ids: number[], seed: number): ShardOperation {
  const rnd = mulberry32(seed);
  return {
    kind: 'upsert',
    points: ids.map((i) => ({ id: normalizePointId(i), vectors: new Map([['', Float32Array.from({ length: DIM }, () => rnd() * 2 - 1)]]), payload: null })),
  };
}

export const range = (from: number, n: number): number[] => Array.from({ length: n }, (_, i) => from + i);

/** The names of the files in `dir` that `pattern` matches, sorted. */
export const filesMatching = (dir: string, pattern: RegExp): string[] => fs.readdirSync(dir).filter((n) => pattern.test(n)).sort();

/** Top-10 (label, score) lists for 12 queries drawn from `seed`, one per query and `ef`. */
export async function answers(shard: LocalShard, seed: number, efs: number[]): Promise<Array<Array<[bigint, number]>>> {
  const rnd = mulberry32(seed);
  const out: Array<Array<[bigint, number]>> = [];
  for (let q = 0; q < 12; q++) {
    const vector = Float32Array.from({ length: DIM }, () => rnd() * 2 - 1);
    for (const ef of efs) out.push((await shard.search('', { vector, k: 10, ef }, null)).map((h) => [h.label, h.score]));
  }
  return out;
}

/** The same writes, in the same order, to every shard. */
export async function write(shards: LocalShard[], op: () => ShardOperation): Promise<void> {
  for (const s of shards) await s.update(op, true);
}
