/**
 * The vector spec the shard tests build on: a small Euclid index, no quantization,
 * no graph until a test sets `indexingThresholdKb`, one indexing thread.
 */

import type { VectorSpec } from '../../ts/shard/vector-store';

export function testSpec(dim: number, over: Partial<VectorSpec> = {}): VectorSpec {
  return {
    name: '',
    dim,
    distance: 'Euclid',
    m: 8,
    efConstruct: 64,
    fullScanThresholdKb: 1,
    quantization: { kind: 'none' },
    indexingThresholdKb: 0,
    maxIndexingThreads: 1,
    deletedThreshold: 0.2,
    vacuumMinVectorNumber: 100,
    ...over,
  };
}
