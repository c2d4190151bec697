/**
 * Conditional writes (`update_filter`, `update_mode`) in the replica operation
 * (ts/collection/replica-operation.ts): which points a replica writes, against the
 * reference's rule applied by hand in the test (upsert: new points and the existing ones
 * the filter holds on; insert_only: new points only; update_only: the existing ones the
 * filter holds on; a vector update: the existing ones the filter holds on), and the wire
 * form every replica decodes the same condition from.
 */

import test from 'ava';

import { decodeReplicaOperation, encodeReplicaOperation, resolveOperation, type ReplicaOperation, type Selector, type UpdateMode } from '../../ts/collection/replica-operation';
import { normalizePointId, pointIdToJson, type PointKey } from '../../ts/shard/id-tracker';
import type { Filter } from '../../ts/shard/filter';

// Stored points 1..6 with payload v = id; the filter is `v >= 4`.
const num = (k: PointKey) => Number(pointIdToJson(k));
const stored = new Map<number, number>([1, 2, 3, 4, 5, 6].map((i) => [i, i]));
const F: Filter = { must: [{ key: 'v', range: { gte: 4 } }] };
const holds = (id: number) => (stored.get(id) ?? -Infinity) >= 4;

/** The shard's resolution as the test models it: existing ids, and those where the filter holds. */
function resolve(sel: Selector): PointKey[] {
  return (sel.ids ?? []).filter((k) => stored.has(num(k)) && (sel.filter === null || holds(num(k))));
}

const key = (i: number) => normalizePointId(i);
const upsert = (ids: number[], filter: Filter | null, mode: UpdateMode): ReplicaOperation => ({
  kind: 'upsert',
  points: ids.map((i) => ({ id: key(i), vectors: new Map([['', new Float32Array([i, 0])]]), payload: { v: 100 + i } })),
  condition: { filter, mode },
});
const written = (op: ReplicaOperation) => {
  const r = resolveOperation(op, resolve);
  return (r as { points: Array<{ id: PointKey }> }).points.map((p) => num(p.id));
};

test('upsert with update_filter: new points and the existing points the filter holds on', (t) => {
  const ids = [1, 2, 3, 4, 5, 6, 7, 8];
  t.deepEqual(written(upsert(ids, F, 'upsert')), ids.filter((i) => !stored.has(i) || holds(i)));
  t.deepEqual(written(upsert(ids, F, 'upsert')), [4, 5, 6, 7, 8]);
});

test('insert_only writes new points only, whatever the filter; update_only the existing ones the filter holds on', (t) => {
  t.deepEqual(written(upsert([1, 5, 9], null, 'insert_only')), [9]);
  t.deepEqual(written(upsert([1, 5, 9], F, 'insert_only')), [9]);
  t.deepEqual(written(upsert([1, 5, 9], null, 'update_only')), [1, 5]);
  t.deepEqual(written(upsert([1, 5, 9], F, 'update_only')), [5]);
});

test('vector update with update_filter: the existing points the filter holds on', (t) => {
  const op: ReplicaOperation = { kind: 'update_vectors', points: [2, 4, 6].map((i) => ({ id: key(i), vectors: new Map([['', new Float32Array([0, i])]]) })), condition: { filter: F, mode: 'upsert' } };
  t.deepEqual(written(op), [4, 6]);
  const r = resolveOperation(op, resolve);
  t.false('condition' in r, 'the write a replica logs is a plain one');
});

test('a plain write is unchanged; a conditional one carries its filter and mode on the wire', (t) => {
  const plain: ReplicaOperation = { kind: 'upsert', points: [{ id: key(1), vectors: new Map([['', new Float32Array([1, 2])]]), payload: null }] };
  t.is(encodeReplicaOperation(plain)[1], 0, 'the plain shape as before');
  t.deepEqual(decodeReplicaOperation(encodeReplicaOperation(plain)), plain);
  for (const mode of ['upsert', 'insert_only', 'update_only'] as const) {
    const op = upsert([1, 7], F, mode);
    const back = decodeReplicaOperation(encodeReplicaOperation(op));
    t.deepEqual(back, op, mode);
    t.deepEqual(written(back), written(op), 'the decoded operation writes the same points');
  }
  const vec: ReplicaOperation = { kind: 'update_vectors', points: [{ id: key(4), vectors: new Map([['', new Float32Array([0, 1])]]) }], condition: { filter: F, mode: 'upsert' } };
  t.deepEqual(decodeReplicaOperation(encodeReplicaOperation(vec)), vec);
  const bad = encodeReplicaOperation(upsert([1], F, 'upsert'));
  const tampered = Buffer.from(bad.toString('latin1').replace('"upsert"', '"upsirt"'), 'latin1');
  t.throws(() => decodeReplicaOperation(tampered), { message: /unknown update mode/ });
});
