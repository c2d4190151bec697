/**
 * Memory per point of each vector datatype (issue 18's bound: uint8 at most 0.3x
 * float32 for 128-d dense vectors), from the engine's own accounting (`stats()`:
 * vector storage, and everything the index holds with its label map and graph).
 *
 *   npx tsc -p bench/tsconfig.json && node dist/bench/engine/datatype-memory.js [points]
 *
 * Prints one line per datatype and layout (flat, HNSW m=16) and the uint8/float32 ratios.
 */

import type { Datatype } from '../../bindings/engine';
import { loadEngine } from '../../bindings/index';

const noop = (): void => undefined;
const silent: Record<string, unknown> = { info: noop, warn: noop, error: noop, debug: noop, trace: noop, fatal: noop };
silent.child = () => silent;

async function main(): Promise<void> {
  const n = Number(process.argv[2] ?? 100_000);
  const dim = 128;
  const engine = loadEngine({ backend: 'native', logger: silent as never });
  const vectors = new Float32Array(n * dim);
  // Values in 0..250 (integers and fractions): every type holds them without saturating.
  for (let i = 0; i < vectors.length; i++) vectors[i] = ((i * 2654435761) % 1000) / 4;
  const labels = new BigUint64Array(n);
  for (let i = 0; i < n; i++) labels[i] = BigInt(i);
  const total: Record<string, number> = {};
  const vector: Record<string, number> = {};
  for (const datatype of ['float32', 'float16', 'uint8'] as Datatype[]) {
    for (const flat of [true, false]) {
      const ix = engine.createIndex({ dim, distance: 'Dot', datatype, flat, m: 16 });
      await ix.add(labels, vectors);
      const s = ix.stats();
      const key = `${datatype} ${flat ? 'flat' : 'hnsw'}`;
      total[key] = s.totalBytes / n;
      vector[key] = s.vectorBytes / n;
      console.log(`${key.padEnd(14)} vector ${vector[key].toFixed(1)} B/point, total ${total[key].toFixed(1)} B/point`);
      ix.close();
    }
  }
  for (const layout of ['flat', 'hnsw']) {
    const v = vector[`uint8 ${layout}`] / vector[`float32 ${layout}`];
    const t = total[`uint8 ${layout}`] / total[`float32 ${layout}`];
    console.log(`uint8/float32 (${layout}): vector storage ${v.toFixed(3)}x, whole index ${t.toFixed(3)}x`);
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
