/**
 * WAL records of upserts whose vectors are views of shared buffers (the request body
 * reader's arenas, ts/api/rest/json-numbers.ts): the same bytes as with vectors of
 * their own, whether the views lie back to back, with gaps, out of order or in several
 * buffers; byteRuns merges exactly the chunks that follow each other in one buffer.
 */

import test from 'ava';

import { normalizePointId } from '../../ts/shard/id-tracker';
import { byteRuns, decodeOperation, encodeOperation, type ShardOperation } from '../../ts/shard/operations';

function upsertOf(vectors: Array<Map<string, Float32Array>>): ShardOperation {
  return { kind: 'upsert', points: vectors.map((v, i) => ({ id: normalizePointId(i + 1), vectors: v, payload: i % 2 ? { i } : null })) };
}

/** The same operation with every vector copied into an array of its own. */
function copied(op: ShardOperation): ShardOperation {
  if (op.kind !== 'upsert') throw new Error('upsert only');
  return { kind: 'upsert', points: op.points.map((p) => ({ ...p, vectors: new Map([...p.vectors].map(([n, v]) => [n, Float32Array.from(v)])) })) };
}

test('vectors that are views of shared buffers encode to the same record as their copies', (t) => {
  const arena = Float32Array.from({ length: 64 }, (_, i) => i * 0.5 - 3);
  const other = Float32Array.from({ length: 16 }, (_, i) => -i);
  const layouts: Array<Array<Map<string, Float32Array>>> = [
    // Back to back.
    [0, 4, 8, 12].map((o) => new Map([['', arena.subarray(o, o + 4)]])),
    // With gaps, and out of order.
    [20, 8, 0, 30].map((o) => new Map([['', arena.subarray(o, o + 4)]])),
    // Two buffers, and two names interleaved (each name's vectors go together in the record).
    [0, 4, 8].map((o) => new Map([['a', arena.subarray(o, o + 4)], ['b', other.subarray(o, o + 4)]])),
    // Different lengths (a multivector-like longer list) back to back.
    [new Map([['', arena.subarray(0, 4)]]), new Map([['', arena.subarray(4, 12)]]), new Map([['', arena.subarray(12, 16)]])],
  ];
  for (const vectors of layouts) {
    const op = upsertOf(vectors);
    const tag = { peer: 3n, clock: 0, tick: 7n };
    const rec = encodeOperation(op, tag);
    t.deepEqual(rec, encodeOperation(copied(op), tag));
    t.deepEqual(decodeOperation(rec), copied(op));
  }
});

test('byteRuns merges only chunks that follow each other in one buffer', (t) => {
  const a = new Float32Array(32);
  const b = new Uint32Array(8);
  const runs = byteRuns([a.subarray(0, 4), a.subarray(4, 8), a.subarray(10, 12), b.subarray(0, 2), b.subarray(2, 4), a.subarray(12, 14), a.subarray(0, 2)]);
  t.deepEqual(
    runs.map((r) => [r.buffer === a.buffer ? 'a' : 'b', r.byteOffset, r.byteLength]),
    [['a', 0, 32], ['a', 40, 8], ['b', 0, 16], ['a', 48, 8], ['a', 0, 8]],
  );
  t.deepEqual(byteRuns([]), []);
});
