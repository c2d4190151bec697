/**
 * Sparse vectors in every byte form a write or a search travels in: the WAL record
 * (ts/shard/operations.ts), the replica wire (encodeReplicaOperation, which remote
 * replicas and transfers use) and a search request between peers (p2p encodeRead).
 * Records written before sparse vectors (no `s` in the header) still decode.
 */

import test from 'ava';

import { decodeReplicaOperation, encodeReplicaOperation } from '../../ts/collection/replica-operation';
import { decodeRead, encodeRead } from '../../ts/api/p2p/points';
import { normalizePointId } from '../../ts/shard/id-tracker';
import { decodeOperation, encodeOperation, type ShardOperation } from '../../ts/shard/operations';

const sv = (indices: number[], values: number[]) => ({ indices: Uint32Array.from(indices), values: Float32Array.from(values) });

const upsert: ShardOperation = {
  kind: 'upsert',
  points: [
    { id: normalizePointId(1), vectors: new Map([['d', Float32Array.of(1, 2)]]), payload: { a: 1 }, sparse: new Map([['text', sv([9, 2, 5], [0.5, -1, 2])], ['bm', sv([], [])]]) },
    { id: normalizePointId('550e8400-e29b-41d4-a716-446655440000'), vectors: new Map([['d', Float32Array.of(3, 4)]]), payload: null },
    { id: normalizePointId(3), vectors: new Map(), payload: null, sparse: new Map([['text', sv([1], [7])]]) },
  ],
};

const update: ShardOperation = {
  kind: 'update_vectors',
  points: [{ id: normalizePointId(1), vectors: new Map(), sparse: new Map([['text', sv([4, 3], [1, 2])]]) }],
};

test('the WAL record of an upsert and a vector update carries sparse vectors exactly', (t) => {
  for (const op of [upsert, update]) {
    const tag = { peer: 5n, clock: 1, tick: 9n };
    t.deepEqual(decodeOperation(encodeOperation(op, tag)), op);
    t.deepEqual(decodeOperation(encodeOperation(op, null)), op);
  }
});

test('a record without sparse vectors has no sparse field, as records written before them', (t) => {
  const plain: ShardOperation = { kind: 'upsert', points: [{ id: normalizePointId(2), vectors: new Map([['', Float32Array.of(1)]]), payload: null }] };
  const back = decodeOperation(encodeOperation(plain, null));
  t.deepEqual(back, plain);
  t.false('sparse' in (back as { points: object[] }).points[0]);
});

test('the replica wire carries sparse vectors, and a cut record is refused', (t) => {
  t.deepEqual(decodeReplicaOperation(encodeReplicaOperation(upsert)), upsert);
  t.deepEqual(decodeReplicaOperation(encodeReplicaOperation(update)), update);
  const bytes = encodeReplicaOperation(upsert);
  t.throws(() => decodeReplicaOperation(bytes.subarray(0, bytes.length - 4)), { message: /run past its end/ });
});

test('a sparse search request between peers keeps its query', (t) => {
  const req = { using: 'text', vector: new Float32Array(0), sparse: sv([3, 1], [0.25, 2]), filter: null, limit: 5, offset: 0, scoreThreshold: null, withPayload: false, withVector: false };
  const back = decodeRead('search', encodeRead('search', req)) as typeof req;
  t.deepEqual(back.sparse, req.sparse);
  t.is(back.using, 'text');
  const dense = { ...req, sparse: undefined, vector: Float32Array.of(1, 2) };
  t.is((decodeRead('search', encodeRead('search', dense)) as { sparse?: unknown }).sparse, undefined);
});
