/**
 * The official JavaScript gRPC client (@qdrant/js-client-grpc 1.18.0: @connectrpc/connect
 * over node:http2, messages from @bufbuild/protobuf descriptors generated from the
 * reference's .proto files) drives the workflow of js-client.test.ts (the REST client's)
 * against a real `bin/quiver` with its gRPC API on: collections with unnamed and named
 * vectors (hnsw and quantization settings), payload indexes, point writes, reads, every
 * search form the contract serves, hybrid queries (dense + sparse with RRF, a ColBERT-style
 * MaxSim re-rank), aliases, snapshots and deletion. Each step is one serial
 * test that checks what the client hands back, not just that it did not throw.
 *
 * The client is built as a user builds it, with its defaults: gzip on requests and
 * answers, and its version check (`qdrant.Qdrant/HealthCheck`, then compare) running in
 * the background, which must pass without a warning. Everything it prints with
 * console.warn is collected and checked.
 *
 * The gRPC contract has no snapshot recovery, download or shard snapshots (REST only, in
 * the reference as here): the snapshot step makes its snapshot over gRPC and recovers
 * from it through REST, which shows the gRPC-made snapshot is whole.
 */

import type { DescMessage, MessageInitShape } from '@bufbuild/protobuf';
import test from 'ava';
import type { ExecutionContext } from 'ava';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import {
  CollectionStatus,
  ConnectError,
  ConnectErrorCode,
  Direction,
  Distance,
  FieldType,
  Fusion,
  MultiVectorComparator,
  PayloadSchemaType,
  QdrantClient,
  QuantizationType,
  UpdateStatus,
  toDenseVector,
  toMultiDenseVector,
  ConditionSchema,
  FilterSchema,
  PointIdSchema,
  type PointId,
  type RetrievedPoint,
  type ScoredPoint,
  type SnapshotDescription,
  ValueSchema,
  type Value,
  type VectorsOutput,
} from '@qdrant/js-client-grpc';

import { PROTO_DIR, startGrpcQuiver, type GrpcQuiver } from '../grpc/client';
import { waitFor } from '../support/wait';
import * as fx from './hybrid-fixture';

const PLAIN = 'jsg_plain';
const NAMED = 'jsg_named';
const ALIAS = 'jsg_alias';
const HYBRID = 'jsg_hybrid';
const COLBERT = 'jsg_colbert';
const UUID_A = '550e8400-e29b-41d4-a716-446655440000';
// Written in upper case on purpose: the server must hand it back lower-case hyphenated.
const UUID_B = 'F47AC10B-58CC-4372-A567-0E02B2C3D479';
const UUID_B_NORM = UUID_B.toLowerCase();

let node: GrpcQuiver;
let client: QdrantClient;

// -- translation between plain JavaScript values and the client's messages ---------------------

type Id = string | number;
type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
// The client takes "init" shapes of its messages (no `$typeName`, fields optional).
type Init<S extends DescMessage> = MessageInitShape<S>;

function pid(id: Id): Init<typeof PointIdSchema> {
  return typeof id === 'number' ? { pointIdOptions: { case: 'num', value: BigInt(id) } } : { pointIdOptions: { case: 'uuid', value: id } };
}

function idOf(p: PointId | undefined): Id {
  const o = p?.pointIdOptions;
  if (o?.case === 'num') return Number(o.value);
  if (o?.case === 'uuid') return o.value;
  throw new Error(`no point id: ${String(p)}`);
}

function value(v: Json): Init<typeof ValueSchema> {
  if (v === null) return { kind: { case: 'nullValue', value: 0 } };
  if (typeof v === 'boolean') return { kind: { case: 'boolValue', value: v } };
  if (typeof v === 'number') return Number.isInteger(v) ? { kind: { case: 'integerValue', value: BigInt(v) } } : { kind: { case: 'doubleValue', value: v } };
  if (typeof v === 'string') return { kind: { case: 'stringValue', value: v } };
  if (Array.isArray(v)) return { kind: { case: 'listValue', value: { values: v.map(value) } } };
  return { kind: { case: 'structValue', value: { fields: payload(v) } } };
}

function payload(o: { [k: string]: Json }): Record<string, Init<typeof ValueSchema>> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, value(v)]));
}

function plain(v: Value): Json {
  const k = v.kind;
  switch (k.case) {
    case 'nullValue':
      return null;
    case 'integerValue':
      return Number(k.value);
    case 'listValue':
      return k.value.values.map(plain);
    case 'structValue':
      return plainMap(k.value.fields);
    case undefined:
      throw new Error('a Value without a kind');
    default:
      return k.value;
  }
}

function plainMap(m: { [k: string]: Value }): { [k: string]: Json } {
  return Object.fromEntries(Object.entries(m).map(([k, v]) => [k, plain(v)]));
}

/** A dense vector as Vectors (the `dense` member of Vector's oneof). */
const dense = (data: number[]) => ({ vectorsOptions: { case: 'vector' as const, value: { vector: { case: 'dense' as const, value: { data } } } } });
/** Named dense vectors. */
const named = (m: Record<string, number[]>) => ({
  vectorsOptions: {
    case: 'vectors' as const,
    value: { vectors: Object.fromEntries(Object.entries(m).map(([k, data]) => [k, { vector: { case: 'dense' as const, value: { data } } }])) },
  },
});

/** The unnamed vector of a point's VectorsOutput. */
function vectorOf(v: VectorsOutput | undefined): number[] | undefined {
  if (v?.vectorsOptions.case !== 'vector') return undefined;
  return toDenseVector(v.vectorsOptions.value)?.data;
}

/** The named vectors of a point's VectorsOutput. */
function namedOf(v: VectorsOutput | undefined): Record<string, number[]> {
  if (v?.vectorsOptions.case !== 'vectors') return {};
  const out: Record<string, number[]> = {};
  for (const [k, o] of Object.entries(v.vectorsOptions.value.vectors)) {
    const d = toDenseVector(o)?.data;
    if (d !== undefined) out[k] = d;
  }
  return out;
}

const ids = (points: ReadonlyArray<{ id?: PointId }>): Id[] => points.map((p) => idOf(p.id));
const sortedIds = (points: ReadonlyArray<{ id?: PointId }>): string[] => points.map((p) => String(idOf(p.id))).sort();
const byId = <P extends { id?: PointId }>(points: P[]) => new Map(points.map((p) => [idOf(p.id), p]));

const cond = {
  match: (key: string, v: string): Init<typeof ConditionSchema> => ({ conditionOneOf: { case: 'field', value: { key, match: { matchValue: { case: 'keyword', value: v } } } } }),
  any: (key: string, vs: string[]): Init<typeof ConditionSchema> => ({ conditionOneOf: { case: 'field', value: { key, match: { matchValue: { case: 'keywords', value: { strings: vs } } } } } }),
  range: (key: string, r: { gte?: number; gt?: number; lte?: number; lt?: number }): Init<typeof ConditionSchema> => ({ conditionOneOf: { case: 'field', value: { key, range: r } } }),
  hasId: (list: Id[]): Init<typeof ConditionSchema> => ({ conditionOneOf: { case: 'hasId', value: { hasId: list.map(pid) } } }),
};
const must = (...c: Array<Init<typeof ConditionSchema>>): Init<typeof FilterSchema> => ({ must: c });
const pointsSel = (list: Id[]) => ({ pointsSelectorOneOf: { case: 'points' as const, value: { ids: list.map(pid) } } });
const filterSel = (f: Init<typeof FilterSchema>) => ({ pointsSelectorOneOf: { case: 'filter' as const, value: f } });
const withPayload = (on: boolean) => ({ selectorOptions: { case: 'enable' as const, value: on } });
const withVectors = (on: boolean) => ({ selectorOptions: { case: 'enable' as const, value: on } });
const nearest = (data: number[]) => ({ variant: { case: 'nearest' as const, value: { variant: { case: 'dense' as const, value: { data } } } } });
const nearestSparse = (v: fx.SparseMap) => ({ variant: { case: 'nearest' as const, value: { variant: { case: 'sparse' as const, value: fx.sparseBody(v) } } } });
const nearestMulti = (m: number[][]) => ({ variant: { case: 'nearest' as const, value: { variant: { case: 'multiDense' as const, value: { vectors: m.map((data) => ({ data })) } } } } });
const nearestId = (id: Id) => ({ variant: { case: 'nearest' as const, value: { variant: { case: 'id' as const, value: pid(id) } } } });

/** Turns the client's ConnectError into a message a failing test can show. */
async function call<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof ConnectError) throw new Error(`${what} failed: ${ConnectErrorCode[err.code]} ${err.rawMessage}`);
    throw err;
  }
}

/** The status code of a call that must fail (the test fails when it succeeds). */
async function codeOf(t: ExecutionContext, fn: () => Promise<unknown>): Promise<string> {
  const err = await t.throwsAsync(fn);
  t.true(err instanceof ConnectError, `a ConnectError, not ${String(err)}`);
  return ConnectErrorCode[(err as ConnectError).code];
}

function near(t: ExecutionContext, actual: number | undefined, expected: number, what: string, eps = 1e-3): void {
  t.true(typeof actual === 'number' && Math.abs(actual - expected) <= eps, `${what}: ${String(actual)} is not ≈ ${expected}`);
}

function completed(t: ExecutionContext, r: { result?: { status: UpdateStatus } }): void {
  t.is(r.result?.status, UpdateStatus.Completed);
}

const api = () => ({ collections: client.api('collections'), points: client.api('points'), snapshots: client.api('snapshots'), service: client.api('service') });

/** What the client printed with console.warn (its compatibility check warns there). */
const warnings: string[] = [];
const consoleWarn = console.warn;

test.before(async () => {
  node = await startGrpcQuiver();
  console.warn = (...args: unknown[]) => {
    warnings.push(args.map(String).join(' '));
  };
  // The constructor starts its version check in the background (HealthCheck, then
  // compare); the after hook checks that nothing was printed by the end of the workflow.
  client = new QdrantClient({ host: '127.0.0.1', port: node.grpcPort });
});

test.after.always(async () => {
  console.warn = consoleWarn;
  if (node !== undefined) await node.stop();
});

test.after('the client printed no warning during the whole workflow', (t) => {
  t.deepEqual(warnings, []);
});

test.serial('the client with default options checks the server version over gRPC and does not warn', async (t) => {
  // The check is real: against a gRPC server of the same contract that reports another
  // major version, it warns.
  const def = protoLoader.loadSync('qdrant.proto', { keepCase: true, longs: String, enums: String, defaults: false, oneofs: true, includeDirs: [PROTO_DIR] });
  const other = new grpc.Server();
  other.addService(def['qdrant.Qdrant'] as grpc.ServiceDefinition, {
    HealthCheck: (_call: unknown, cb: grpc.sendUnaryData<object>) => cb(null, { title: 'other', version: '0.1.0' }),
  });
  const port = await new Promise<number>((resolve, reject) =>
    other.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  new QdrantClient({ host: '127.0.0.1', port });
  const aboutOther = (w: string) => /incompatible with server version 0\.1\.0/.test(w);
  await waitFor('the warning about server version 0.1.0', () => warnings.some(aboutOther));
  // Keep any other warning (one about Quiver would fail the after hook).
  const rest = warnings.filter((w) => !aboutOther(w));
  warnings.splice(0, warnings.length, ...rest);
  other.forceShutdown();

  // Quiver reports the API version it implements.
  const health = await call('healthCheck', () => api().service.healthCheck({}));
  t.is(health.version, '1.18.0');
  t.truthy(health.title);
});

// -- collections --------------------------------------------------------------------------------

test.serial('create: unnamed vector with hnsw_config, and named vectors with quantization', async (t) => {
  const { collections } = api();
  const plainRes = await call('create plain', () =>
    collections.create({
      collectionName: PLAIN,
      vectorsConfig: { config: { case: 'params', value: { size: 4n, distance: Distance.Dot } } },
      hnswConfig: { m: 16n, efConstruct: 100n, fullScanThreshold: 10_000n },
      optimizersConfig: { defaultSegmentNumber: 2n },
    }),
  );
  t.true(plainRes.result);
  t.true(plainRes.time > 0);
  const namedRes = await call('create named', () =>
    collections.create({
      collectionName: NAMED,
      vectorsConfig: {
        config: {
          case: 'paramsMap',
          value: {
            map: {
              image: { size: 4n, distance: Distance.Cosine },
              text: { size: 2n, distance: Distance.Euclid, hnswConfig: { m: 8n } },
            },
          },
        },
      },
      hnswConfig: { m: 12n, efConstruct: 64n },
      quantizationConfig: { quantization: { case: 'scalar', value: { type: QuantizationType.Int8, quantile: 0.99, alwaysRam: true } } },
    }),
  );
  t.true(namedRes.result);
  // Creating an existing collection is refused.
  t.is(
    await codeOf(t, () => collections.create({ collectionName: PLAIN, vectorsConfig: { config: { case: 'params', value: { size: 4n, distance: Distance.Dot } } } })),
    'AlreadyExists',
  );
  // So is a collection without vectors' size (the REST parser's validation, same status as there).
  t.is(await codeOf(t, () => collections.create({ collectionName: 'jsg_bad', vectorsConfig: { config: { case: 'params', value: { size: 0n, distance: Distance.Dot } } } })), 'InvalidArgument');
  t.false((await call('collectionExists bad', () => collections.collectionExists({ collectionName: 'jsg_bad' }))).result?.exists ?? true);
});

test.serial('list and collectionExists show what exists', async (t) => {
  const { collections } = api();
  const list = await call('list', () => collections.list({}));
  t.deepEqual(list.collections.map((c) => c.name).sort(), [NAMED, PLAIN]);
  t.true((await call('collectionExists', () => collections.collectionExists({ collectionName: PLAIN }))).result?.exists);
  t.false((await call('collectionExists', () => collections.collectionExists({ collectionName: 'jsg_nope' }))).result?.exists);
});

test.serial('get reports the configuration it was created with', async (t) => {
  const { collections } = api();
  const plainInfo = (await call('get plain', () => collections.get({ collectionName: PLAIN }))).result!;
  t.is(plainInfo.status, CollectionStatus.Green);
  t.is(plainInfo.pointsCount, 0n);
  const pv = plainInfo.config?.params?.vectorsConfig?.config;
  t.is(pv?.case, 'params');
  if (pv?.case === 'params') {
    t.is(pv.value.size, 4n);
    t.is(pv.value.distance, Distance.Dot);
  }
  t.is(plainInfo.config?.hnswConfig?.m, 16n);
  t.is(plainInfo.config?.hnswConfig?.efConstruct, 100n);
  t.is(plainInfo.config?.hnswConfig?.fullScanThreshold, 10_000n);
  t.is(plainInfo.config?.optimizerConfig?.defaultSegmentNumber, 2n);
  t.is(plainInfo.config?.quantizationConfig, undefined);
  t.deepEqual(Object.keys(plainInfo.payloadSchema), []);

  const namedInfo = (await call('get named', () => collections.get({ collectionName: NAMED }))).result!;
  const nv = namedInfo.config?.params?.vectorsConfig?.config;
  t.is(nv?.case, 'paramsMap');
  if (nv?.case === 'paramsMap') {
    t.is(nv.value.map.image?.size, 4n);
    t.is(nv.value.map.image?.distance, Distance.Cosine);
    t.is(nv.value.map.text?.size, 2n);
    t.is(nv.value.map.text?.distance, Distance.Euclid);
    t.is(nv.value.map.text?.hnswConfig?.m, 8n);
  }
  t.is(namedInfo.config?.hnswConfig?.m, 12n);
  t.is(namedInfo.config?.hnswConfig?.efConstruct, 64n);
  const q = namedInfo.config?.quantizationConfig?.quantization;
  t.is(q?.case, 'scalar');
  if (q?.case === 'scalar') {
    t.is(q.value.type, QuantizationType.Int8);
    near(t, q.value.quantile, 0.99, 'quantile', 1e-6);
    t.true(q.value.alwaysRam);
  }

  t.is(await codeOf(t, () => collections.get({ collectionName: 'jsg_nope' })), 'NotFound');
});

test.serial('update changes optimizer and params settings', async (t) => {
  const { collections } = api();
  const r = await call('update', () =>
    collections.update({ collectionName: PLAIN, optimizersConfig: { indexingThreshold: 20_000n }, params: { onDiskPayload: false } }),
  );
  t.true(r.result);
  const info = (await call('get', () => collections.get({ collectionName: PLAIN }))).result!;
  t.is(info.config?.optimizerConfig?.indexingThreshold, 20_000n);
  t.is(info.config?.params?.onDiskPayload, false);
  t.is(await codeOf(t, () => collections.update({ collectionName: 'jsg_nope', optimizersConfig: { indexingThreshold: 1n } })), 'NotFound');
});

test.serial('createFieldIndex: keyword and integer indexes appear in payload_schema; deleteFieldIndex removes one', async (t) => {
  const { collections, points } = api();
  completed(t, await call('createFieldIndex city', () => points.createFieldIndex({ collectionName: PLAIN, fieldName: 'city', fieldType: FieldType.FieldTypeKeyword, wait: true })));
  completed(
    t,
    await call('createFieldIndex count', () =>
      points.createFieldIndex({
        collectionName: PLAIN,
        fieldName: 'count',
        fieldType: FieldType.FieldTypeInteger,
        fieldIndexParams: { indexParams: { case: 'integerIndexParams', value: { range: true, lookup: true } } },
        wait: true,
      }),
    ),
  );
  completed(t, await call('createFieldIndex tmp', () => points.createFieldIndex({ collectionName: PLAIN, fieldName: 'tmp', fieldType: FieldType.FieldTypeBool, wait: true })));
  let info = (await call('get', () => collections.get({ collectionName: PLAIN }))).result!;
  t.is(info.payloadSchema.city?.dataType, PayloadSchemaType.Keyword);
  t.is(info.payloadSchema.count?.dataType, PayloadSchemaType.Integer);
  t.is(info.payloadSchema.tmp?.dataType, PayloadSchemaType.Bool);
  completed(t, await call('deleteFieldIndex tmp', () => points.deleteFieldIndex({ collectionName: PLAIN, fieldName: 'tmp', wait: true })));
  info = (await call('get', () => collections.get({ collectionName: PLAIN }))).result!;
  t.deepEqual(Object.keys(info.payloadSchema).sort(), ['city', 'count']);
});

// -- writes -------------------------------------------------------------------------------------

test.serial('upsert: integer and UUID ids, the dense and the older `data` vector forms, named vectors, wait=true', async (t) => {
  const { collections, points } = api();
  const r1 = await call('upsert', () =>
    points.upsert({
      collectionName: PLAIN,
      wait: true,
      points: [
        { id: pid(1), vectors: dense([1, 0, 0, 0]), payload: payload({ city: 'Berlin', count: 1, tags: ['a', 'b'], nested: { x: 1, y: 'z' } }) },
        { id: pid(2), vectors: dense([0, 1, 0, 0]), payload: payload({ city: 'London', count: 2, tags: ['b'] }) },
        { id: pid(3), vectors: dense([0, 0, 1, 0]), payload: payload({ city: 'Berlin', count: 3 }) },
        { id: pid(4), vectors: dense([0, 0, 0, 1]), payload: payload({ city: 'Paris', count: 4 }) },
        { id: pid(5), vectors: dense([0.9, 0.1, 0, 0]), payload: payload({ city: 'London', count: 5 }) },
        { id: pid(UUID_A), vectors: dense([0.5, 0.5, 0, 0]), payload: payload({ city: 'Paris', count: 6 }) },
      ],
    }),
  );
  completed(t, r1);
  t.is(typeof r1.result?.operationId, 'bigint');

  // The deprecated `Vector.data` field, as older clients send it.
  const old = (data: number[]) => ({ vectorsOptions: { case: 'vector' as const, value: { data } } });
  const r2 = await call('upsert data form', () =>
    points.upsert({
      collectionName: PLAIN,
      wait: true,
      points: [
        { id: pid(7), vectors: old([0, 0, 0.5, 0.5]), payload: payload({ city: 'Rome', count: 7 }) },
        { id: pid(8), vectors: old([0.1, 0.1, 0.1, 0.1]), payload: payload({ city: 'Rome', count: 8 }) },
        { id: pid(UUID_B), vectors: old([0, 0.2, 0, 0.8]), payload: payload({ city: 'Oslo', count: 9 }) },
      ],
    }),
  );
  completed(t, r2);
  t.true((r2.result?.operationId ?? -1n) > (r1.result?.operationId ?? -1n));

  completed(
    t,
    await call('upsert named', () =>
      points.upsert({
        collectionName: NAMED,
        wait: true,
        points: [
          { id: pid(10), vectors: named({ image: [1, 0, 0, 0], text: [0, 0] }), payload: payload({ kind: 'cat' }) },
          { id: pid(11), vectors: named({ image: [0, 1, 0, 0], text: [1, 1] }), payload: payload({ kind: 'dog' }) },
          { id: pid(12), vectors: named({ image: [1, 1, 0, 0] }), payload: payload({ kind: 'cat' }) },
          { id: pid(13), vectors: named({ text: [3, 4] }), payload: payload({ kind: 'bird' }) },
        ],
      }),
    ),
  );

  // A vector of the wrong size is refused and writes nothing.
  t.is(await codeOf(t, () => points.upsert({ collectionName: PLAIN, wait: true, points: [{ id: pid(99), vectors: dense([1, 2, 3]) }] })), 'InvalidArgument');
  // So is a write to a collection that does not exist.
  t.is(await codeOf(t, () => points.upsert({ collectionName: 'jsg_nope', wait: true, points: [{ id: pid(1), vectors: dense([1, 0, 0, 0]) }] })), 'NotFound');

  t.is((await call('get', () => collections.get({ collectionName: PLAIN }))).result?.pointsCount, 9n);
  t.is((await call('get', () => collections.get({ collectionName: NAMED }))).result?.pointsCount, 4n);
});

test.serial('get points: payload, vectors, UUID ids normalised, missing ids left out', async (t) => {
  const { points } = api();
  const res = (await call('get', () => points.get({ collectionName: PLAIN, ids: [pid(1), pid(UUID_B), pid(424242)], withPayload: withPayload(true), withVectors: withVectors(true) }))).result;
  t.deepEqual(sortedIds(res), ['1', UUID_B_NORM].sort());
  const m = byId(res);
  t.deepEqual(plainMap(m.get(1)!.payload), { city: 'Berlin', count: 1, tags: ['a', 'b'], nested: { x: 1, y: 'z' } });
  t.deepEqual(vectorOf(m.get(1)!.vectors), [1, 0, 0, 0]);
  t.deepEqual(plainMap(m.get(UUID_B_NORM)!.payload), { city: 'Oslo', count: 9 });
  const vb = vectorOf(m.get(UUID_B_NORM)!.vectors)!;
  near(t, vb[3], 0.8, 'vector of UUID_B');

  const bare = (await call('get bare', () => points.get({ collectionName: PLAIN, ids: [pid(2)], withPayload: withPayload(false), withVectors: withVectors(false) }))).result;
  t.deepEqual(ids(bare), [2]);
  t.deepEqual(bare[0].payload, {});
  t.is(bare[0].vectors, undefined);

  const namedRes = (
    await call('get named', () =>
      points.get({ collectionName: NAMED, ids: [pid(11), pid(13)], withVectors: { selectorOptions: { case: 'include', value: { names: ['text'] } } }, withPayload: withPayload(true) }),
    )
  ).result;
  const nm = byId(namedRes);
  t.deepEqual(namedOf(nm.get(11)?.vectors), { text: [1, 1] });
  t.deepEqual(namedOf(nm.get(13)?.vectors), { text: [3, 4] });
  t.deepEqual(plainMap(nm.get(11)!.payload), { kind: 'dog' });
  t.is(await codeOf(t, () => points.get({ collectionName: 'jsg_nope', ids: [pid(1)] })), 'NotFound');
});

async function getPoints(collection: string, list: Id[], vectors = false): Promise<Map<Id, RetrievedPoint>> {
  const res = await call('get', () => api().points.get({ collectionName: collection, ids: list.map(pid), withPayload: withPayload(true), withVectors: withVectors(vectors) }));
  return byId(res.result);
}

test.serial('setPayload, overwritePayload, deletePayload, clearPayload', async (t) => {
  const { points } = api();
  completed(t, await call('setPayload', () => points.setPayload({ collectionName: PLAIN, pointsSelector: pointsSel([1, 2]), payload: payload({ color: 'red' }), wait: true })));
  completed(t, await call('setPayload key', () => points.setPayload({ collectionName: PLAIN, pointsSelector: pointsSel([1]), payload: payload({ w: 2 }), key: 'nested', wait: true })));
  completed(
    t,
    await call('setPayload filter', () => points.setPayload({ collectionName: PLAIN, pointsSelector: filterSel(must(cond.match('city', 'Paris'))), payload: payload({ fr: true }), wait: true })),
  );
  let m = await getPoints(PLAIN, [1, 2, 4, UUID_A]);
  t.deepEqual(plainMap(m.get(1)!.payload), { city: 'Berlin', count: 1, tags: ['a', 'b'], nested: { x: 1, y: 'z', w: 2 }, color: 'red' });
  t.deepEqual(plainMap(m.get(2)!.payload), { city: 'London', count: 2, tags: ['b'], color: 'red' });
  t.true(m.get(4)?.payload.fr?.kind.value === true && m.get(UUID_A)?.payload.fr?.kind.value === true);

  completed(t, await call('deletePayload', () => points.deletePayload({ collectionName: PLAIN, pointsSelector: pointsSel([1]), keys: ['color', 'nested.x'], wait: true })));
  m = await getPoints(PLAIN, [1]);
  t.deepEqual(plainMap(m.get(1)!.payload), { city: 'Berlin', count: 1, tags: ['a', 'b'], nested: { y: 'z', w: 2 } });

  completed(t, await call('overwritePayload', () => points.overwritePayload({ collectionName: PLAIN, pointsSelector: pointsSel([2]), payload: payload({ city: 'London', count: 2 }), wait: true })));
  m = await getPoints(PLAIN, [2]);
  t.deepEqual(plainMap(m.get(2)!.payload), { city: 'London', count: 2 });

  completed(t, await call('clearPayload', () => points.clearPayload({ collectionName: NAMED, points: pointsSel([13]), wait: true })));
  m = await getPoints(NAMED, [13]);
  t.deepEqual(m.get(13)!.payload, {});
});

test.serial('updateVectors and deleteVectors on named vectors', async (t) => {
  const { points } = api();
  completed(
    t,
    await call('updateVectors', () =>
      points.updateVectors({ collectionName: NAMED, points: [{ id: pid(12), vectors: named({ text: [6, 8] }) }, { id: pid(13), vectors: named({ image: [0, 0, 1, 0] }) }], wait: true }),
    ),
  );
  let m = await getPoints(NAMED, [12, 13], true);
  const v12 = namedOf(m.get(12)?.vectors);
  t.deepEqual(v12.text, [6, 8]);
  // Cosine vectors are stored normalised: [1, 1, 0, 0] comes back as [1/√2, 1/√2, 0, 0].
  near(t, v12.image?.[0], Math.SQRT1_2, 'normalised image[0] of 12');
  t.deepEqual(namedOf(m.get(13)?.vectors), { image: [0, 0, 1, 0], text: [3, 4] });

  completed(t, await call('deleteVectors', () => points.deleteVectors({ collectionName: NAMED, pointsSelector: pointsSel([12]), vectors: { names: ['text'] }, wait: true })));
  m = await getPoints(NAMED, [12], true);
  t.deepEqual(Object.keys(namedOf(m.get(12)?.vectors)), ['image']);
});

test.serial('updateBatch applies its operations in order', async (t) => {
  const { points } = api();
  const res = await call('updateBatch', () =>
    points.updateBatch({
      collectionName: PLAIN,
      wait: true,
      operations: [
        { operation: { case: 'upsert', value: { points: [{ id: pid(20), vectors: dense([0.2, 0.2, 0.2, 0.2]), payload: payload({ city: 'Tmp', count: 20 }) }] } } },
        { operation: { case: 'setPayload', value: { pointsSelector: pointsSel([20]), payload: payload({ extra: 1 }) } } },
        { operation: { case: 'overwritePayload', value: { pointsSelector: pointsSel([20]), payload: payload({ city: 'Tmp2', count: 21 }) } } },
        { operation: { case: 'deletePayload', value: { pointsSelector: pointsSel([20]), keys: ['count'] } } },
        { operation: { case: 'updateVectors', value: { points: [{ id: pid(20), vectors: dense([0, 0, 0, 2]) }] } } },
        { operation: { case: 'upsert', value: { points: [{ id: pid(21), vectors: dense([1, 1, 1, 1]), payload: payload({ city: 'Gone' }) }] } } },
        { operation: { case: 'deletePoints', value: { points: pointsSel([21]) } } },
      ],
    }),
  );
  t.is(res.result.length, 7);
  t.true(res.result.every((r) => r.status === UpdateStatus.Completed));
  const m = await getPoints(PLAIN, [20, 21], true);
  t.deepEqual([...m.keys()], [20]);
  t.deepEqual(plainMap(m.get(20)!.payload), { city: 'Tmp2' });
  t.deepEqual(vectorOf(m.get(20)!.vectors), [0, 0, 0, 2]);
  completed(t, await call('delete 20', () => points.delete({ collectionName: PLAIN, points: pointsSel([20]), wait: true })));
});

// -- reads --------------------------------------------------------------------------------------

test.serial('scroll: all points in id order, pages with offset, filter, order_by', async (t) => {
  const { points } = api();
  const all = await call('scroll', () => points.scroll({ collectionName: PLAIN, limit: 100, withPayload: withPayload(false) }));
  // Integer ids first (ascending), then UUIDs.
  t.deepEqual(ids(all.result), [1, 2, 3, 4, 5, 7, 8, UUID_A, UUID_B_NORM]);
  t.is(all.nextPageOffset, undefined);

  const page1 = await call('scroll page 1', () => points.scroll({ collectionName: PLAIN, limit: 3, withPayload: withPayload(true) }));
  t.deepEqual(ids(page1.result), [1, 2, 3]);
  t.is(idOf(page1.nextPageOffset), 4);
  t.is(plain(page1.result[0].payload.city), 'Berlin');
  const page2 = await call('scroll page 2', () => points.scroll({ collectionName: PLAIN, limit: 3, offset: page1.nextPageOffset }));
  t.deepEqual(ids(page2.result), [4, 5, 7]);
  t.is(idOf(page2.nextPageOffset), 8);

  const berlin = await call('scroll filter', () =>
    points.scroll({ collectionName: PLAIN, filter: must(cond.match('city', 'Berlin')), withPayload: { selectorOptions: { case: 'include', value: { fields: ['count'] } } }, limit: 10 }),
  );
  t.deepEqual(ids(berlin.result), [1, 3]);
  t.deepEqual(berlin.result.map((p) => plainMap(p.payload)), [{ count: 1 }, { count: 3 }]);

  const ranged = await call('scroll range', () =>
    points.scroll({ collectionName: PLAIN, filter: { must: [cond.range('count', { gte: 3, lt: 7 })], mustNot: [cond.hasId([UUID_A])] }, limit: 10 }),
  );
  t.deepEqual(ids(ranged.result), [3, 4, 5]);

  const desc = await call('scroll order_by', () =>
    points.scroll({ collectionName: PLAIN, orderBy: { key: 'count', direction: Direction.Desc }, limit: 4, withPayload: withPayload(true) }),
  );
  t.deepEqual(desc.result.map((p) => plain(p.payload.count)), [9, 8, 7, 6]);
  t.deepEqual(ids(desc.result), [UUID_B_NORM, 8, 7, UUID_A]);
  const asc = await call('scroll order_by start_from', () =>
    points.scroll({ collectionName: PLAIN, orderBy: { key: 'count', startFrom: { value: { case: 'integer', value: 4n } } }, limit: 2 }),
  );
  t.deepEqual(ids(asc.result), [4, 5]);
  // Ordering by a field without a range index is refused, with REST's status.
  t.is(await codeOf(t, () => points.scroll({ collectionName: PLAIN, orderBy: { key: 'city' }, limit: 2 })), 'InvalidArgument');
});

test.serial('count: exact, with and without a filter', async (t) => {
  const { points } = api();
  t.is((await call('count', () => points.count({ collectionName: PLAIN, exact: true }))).result?.count, 9n);
  t.is((await call('count filter', () => points.count({ collectionName: PLAIN, filter: { should: [cond.any('city', ['London', 'Rome'])] }, exact: true }))).result?.count, 4n);
  t.is((await call('count named', () => points.count({ collectionName: NAMED }))).result?.count, 4n);
});

// -- search -------------------------------------------------------------------------------------

test.serial('query: by vector, by id, with filter, params, payload selectors and using', async (t) => {
  const { points } = api();
  const byVector = (await call('query vector', () => points.query({ collectionName: PLAIN, query: nearest([1, 0, 0, 0]), limit: 3n, withPayload: withPayload(true) }))).result;
  t.deepEqual(ids(byVector), [1, 5, UUID_A]);
  near(t, byVector[0].score, 1, 'score of 1');
  near(t, byVector[1].score, 0.9, 'score of 5');
  near(t, byVector[2].score, 0.5, 'score of UUID_A');
  t.is(plain(byVector[0].payload.city), 'Berlin');
  t.is(byVector[0].vectors, undefined);

  // A point id as the query: its own vector, and the point itself left out.
  const byIdRes = (await call('query id', () => points.query({ collectionName: PLAIN, query: nearestId(1), limit: 2n }))).result;
  t.deepEqual(ids(byIdRes), [5, UUID_A]);

  const near1 = (
    await call('query nearest', () =>
      points.query({
        collectionName: PLAIN,
        query: nearest([1, 0, 0, 0]),
        filter: must(cond.match('city', 'London')),
        params: { hnswEf: 64n, exact: true },
        withPayload: { selectorOptions: { case: 'include', value: { fields: ['city'] } } },
        withVectors: withVectors(true),
        limit: 5n,
      }),
    )
  ).result;
  t.deepEqual(ids(near1), [5, 2]);
  t.deepEqual(plainMap(near1[0].payload), { city: 'London' });
  near(t, vectorOf(near1[0].vectors)?.[0], 0.9, 'vector of 5');

  const excluded = (
    await call('query exclude', () =>
      points.query({ collectionName: PLAIN, query: nearest([1, 0, 0, 0]), withPayload: { selectorOptions: { case: 'exclude', value: { fields: ['tags', 'nested', 'count'] } } }, limit: 1n }),
    )
  ).result;
  t.deepEqual(plainMap(excluded[0].payload), { city: 'Berlin' });

  const threshold = (await call('query score_threshold', () => points.query({ collectionName: PLAIN, query: nearest([1, 0, 0, 0]), scoreThreshold: 0.6, limit: 10n }))).result;
  t.deepEqual(ids(threshold), [1, 5]);

  const offset = (await call('query offset', () => points.query({ collectionName: PLAIN, query: nearest([1, 0, 0, 0]), offset: 1n, limit: 2n }))).result;
  t.deepEqual(ids(offset), [5, UUID_A]);

  const image = (await call('query using image', () => points.query({ collectionName: NAMED, query: nearest([1, 0, 0, 0]), using: 'image', limit: 2n }))).result;
  t.deepEqual(ids(image), [10, 12]);
  near(t, image[0].score, 1, 'cosine 10');
  near(t, image[1].score, Math.SQRT1_2, 'cosine 12');

  const text = (await call('query using text', () => points.query({ collectionName: NAMED, query: nearest([0, 0]), using: 'text', limit: 10n }))).result;
  // 12 has no text vector any more; Euclid scores are distances, nearest first.
  t.deepEqual(ids(text), [10, 11, 13]);
  near(t, text[1].score, Math.SQRT2, 'euclid 11');
  near(t, text[2].score, 5, 'euclid 13');

  const recommend = (
    await call('query recommend', () =>
      points.query({
        collectionName: PLAIN,
        query: { variant: { case: 'recommend', value: { positive: [{ variant: { case: 'id', value: pid(1) } }], negative: [{ variant: { case: 'id', value: pid(2) } }] } } },
        limit: 2n,
      }),
    )
  ).result;
  t.deepEqual(ids(recommend), [5, UUID_A]);

  const noVector = (await call('query without vector', () => points.query({ collectionName: PLAIN, filter: must(cond.match('city', 'Rome')), limit: 10n }))).result;
  t.deepEqual(sortedIds(noVector), ['7', '8']);

  // A query vector of the wrong size: REST's 400, here INVALID_ARGUMENT.
  t.is(await codeOf(t, () => points.query({ collectionName: PLAIN, query: nearest([1, 0]), limit: 1n })), 'InvalidArgument');
  // A vector name the collection does not have.
  t.is(await codeOf(t, () => points.query({ collectionName: NAMED, query: nearest([1, 0, 0, 0]), using: 'audio', limit: 1n })), 'InvalidArgument');
});

test.serial('queryBatch answers each query in order', async (t) => {
  const res = await call('queryBatch', () =>
    api().points.queryBatch({
      collectionName: PLAIN,
      queryPoints: [
        { collectionName: PLAIN, query: nearest([0, 0, 0, 1]), limit: 1n },
        { collectionName: PLAIN, query: nearest([0, 1, 0, 0]), limit: 2n, filter: { mustNot: [cond.match('city', 'London')] } },
      ],
    }),
  );
  t.is(res.result.length, 2);
  t.deepEqual(ids(res.result[0].result), [4]);
  t.deepEqual(ids(res.result[1].result), [UUID_A, UUID_B_NORM]);
});

test.serial('query hybrid: two named dense prefetches fused by RRF (and RRF with k, DBSF), re-scored, in a batch', async (t) => {
  const { points } = api();
  // image (cosine) to [1, 0, 0, 0], 2 best: 10, 12; text (euclid) to [1, 1]: 11, 10, 13 (12 has no text vector now).
  const prefetch = [
    { query: nearest([1, 0, 0, 0]), using: 'image', limit: 2n },
    { query: nearest([1, 1]), using: 'text', limit: 3n },
  ];
  const rrf = (await call('query rrf', () => points.query({ collectionName: NAMED, prefetch, query: { variant: { case: 'fusion', value: Fusion.RRF } }, limit: 10n }))).result;
  // RRF, k = 2: 10 = 1/2 + 1/3, 11 = 1/2, 12 = 1/3, 13 = 1/4.
  t.deepEqual(ids(rrf), [10, 11, 12, 13]);
  [1 / 2 + 1 / 3, 1 / 2, 1 / 3, 1 / 4].forEach((s, i) => near(t, rrf[i].score, s, `rrf score ${i}`));
  const k = (await call('query rrf k', () => points.query({ collectionName: NAMED, prefetch, query: { variant: { case: 'rrf', value: { k: 5 } } }, limit: 1n, offset: 1n }))).result;
  t.deepEqual(ids(k), [11]);
  near(t, k[0].score, 1 / 5, 'rrf k=5 score of 11');
  const dbsf = (await call('query dbsf', () => points.query({ collectionName: NAMED, prefetch, query: { variant: { case: 'fusion', value: Fusion.DBSF } }, limit: 1n }))).result;
  t.deepEqual(ids(dbsf), [10]);
  // A dense query over the candidates re-scores only them: cosine to [0, 1, 2, 0].
  const re = (await call('query re-score', () => points.query({ collectionName: NAMED, prefetch, query: nearest([0, 1, 2, 0]), using: 'image', limit: 10n }))).result;
  t.deepEqual(ids(re), [13, 11, 12, 10]);
  const batch = await call('queryBatch hybrid', () =>
    points.queryBatch({ collectionName: NAMED, queryPoints: [{ collectionName: NAMED, prefetch, query: { variant: { case: 'fusion', value: Fusion.RRF } }, limit: 2n }] }),
  );
  t.deepEqual(ids(batch.result[0].result), [10, 11]);
  t.is(await codeOf(t, () => points.query({ collectionName: NAMED, prefetch, limit: 2n })), 'InvalidArgument');
});

test.serial('hybrid search: dense + sparse prefetches fused by RRF, ids and scores against a hand computation', async (t) => {
  const { collections, points } = api();
  const created = await call('create', () =>
    collections.create({
      collectionName: HYBRID,
      vectorsConfig: { config: { case: 'paramsMap', value: { map: { dense: { size: 4n, distance: Distance.Dot } } } } },
      sparseVectorsConfig: { map: { text: { index: { onDisk: false } } } },
    }),
  );
  t.true(created.result);
  try {
    const info = (await call('get', () => collections.get({ collectionName: HYBRID }))).result!;
    t.deepEqual(Object.keys(info.config?.params?.sparseVectorsConfig?.map ?? {}), ['text']);
    const upserted = await call('upsert', () =>
      points.upsert({
        collectionName: HYBRID,
        wait: true,
        points: [...fx.HYBRID_DENSE].map(([id, data]) => {
          const sparse = fx.HYBRID_SPARSE.get(id);
          const vectors: Record<string, { vector: { case: 'dense'; value: { data: number[] } } | { case: 'sparse'; value: { indices: number[]; values: number[] } } }> = {
            dense: { vector: { case: 'dense', value: { data } } },
          };
          if (sparse !== undefined) vectors.text = { vector: { case: 'sparse', value: fx.sparseBody(sparse) } };
          return { id: pid(id), vectors: { vectorsOptions: { case: 'vectors' as const, value: { vectors } } }, payload: payload({ n: id }) };
        }),
      }),
    );
    completed(t, upserted);
    t.is((await call('count', () => points.count({ collectionName: HYBRID, exact: true }))).result?.count, 6n);

    const scores = fx.hybridScores();
    // Each prefetch alone: exact sparse scoring (6 has no sparse vector) and dense.
    const alone = (await call('query sparse', () => points.query({ collectionName: HYBRID, query: nearestSparse(fx.HYBRID_QUERY_SPARSE), using: 'text', limit: 10n }))).result;
    t.deepEqual(ids(alone), fx.top(scores.sparse, 10));
    for (const p of alone) near(t, p.score, scores.sparse.get(idOf(p.id) as number)!, `sparse score of ${idOf(p.id)}`, 1e-5);
    const dense = (await call('query dense', () => points.query({ collectionName: HYBRID, query: nearest(fx.HYBRID_QUERY_DENSE), using: 'dense', limit: BigInt(fx.HYBRID_DENSE_LIMIT) }))).result;
    t.deepEqual(ids(dense), fx.top(scores.dense, fx.HYBRID_DENSE_LIMIT));

    const prefetch = [
      { query: nearest(fx.HYBRID_QUERY_DENSE), using: 'dense', limit: BigInt(fx.HYBRID_DENSE_LIMIT) },
      { query: nearestSparse(fx.HYBRID_QUERY_SPARSE), using: 'text', limit: BigInt(fx.HYBRID_SPARSE_LIMIT) },
    ];
    const lists = [fx.top(scores.dense, fx.HYBRID_DENSE_LIMIT), fx.top(scores.sparse, fx.HYBRID_SPARSE_LIMIT)];
    const fusions = [
      { query: { variant: { case: 'fusion' as const, value: Fusion.RRF } }, k: 2 },
      { query: { variant: { case: 'rrf' as const, value: { k: 5 } } }, k: 5 },
    ];
    for (const { query, k } of fusions) {
      const expected = fx.rrfByHand(lists, k);
      const r = (await call(`query rrf k=${k}`, () => points.query({ collectionName: HYBRID, prefetch, query, limit: 10n, withPayload: withPayload(true) }))).result;
      t.deepEqual(ids(r), expected.map(([id]) => id), `rrf k=${k} order`);
      expected.forEach(([id, s], i) => {
        near(t, r[i]?.score, s, `rrf k=${k} score of ${id}`, 1e-6);
        t.deepEqual(r[i] === undefined ? undefined : plainMap(r[i].payload), { n: id });
      });
      const page = (await call(`query rrf k=${k} page`, () => points.query({ collectionName: HYBRID, prefetch, query, limit: 2n, offset: 1n }))).result;
      t.deepEqual(ids(page), expected.slice(1, 3).map(([id]) => id), `rrf k=${k} limit 2 offset 1`);
    }
    // In a batch, with a filter on the sparse prefetch.
    const filtered = [prefetch[0], { ...prefetch[1], filter: { mustNot: [cond.hasId([4])] } }];
    const batch = await call('queryBatch', () =>
      points.queryBatch({ collectionName: HYBRID, queryPoints: [{ collectionName: HYBRID, prefetch: filtered, query: fusions[0].query, limit: 10n }] }),
    );
    const expected = fx.rrfByHand([lists[0], fx.top(new Map([...scores.sparse].filter(([id]) => id !== 4)), fx.HYBRID_SPARSE_LIMIT)], 2);
    t.deepEqual(ids(batch.result[0].result), expected.map(([id]) => id));
    expected.forEach(([id, s], i) => near(t, batch.result[0].result[i]?.score, s, `batched rrf score of ${id}`, 1e-6));
  } finally {
    t.true((await call('delete', () => collections.delete({ collectionName: HYBRID }))).result);
  }
});

test.serial('ColBERT-style re-rank: a dense prefetch, then a multivector (max_sim, hnsw m=0) query over its candidates, against MaxSim by hand', async (t) => {
  const { collections, points } = api();
  const created = await call('create', () =>
    collections.create({
      collectionName: COLBERT,
      vectorsConfig: {
        config: {
          case: 'paramsMap',
          value: {
            map: {
              dense: { size: 4n, distance: Distance.Dot },
              colbert: { size: 3n, distance: Distance.Cosine, multivectorConfig: { comparator: MultiVectorComparator.MaxSim }, hnswConfig: { m: 0n } },
            },
          },
        },
      },
    }),
  );
  t.true(created.result);
  try {
    const info = (await call('get', () => collections.get({ collectionName: COLBERT }))).result!;
    const vc = info.config?.params?.vectorsConfig?.config;
    t.is(vc?.case, 'paramsMap');
    if (vc?.case === 'paramsMap') {
      t.is(vc.value.map.colbert?.multivectorConfig?.comparator, MultiVectorComparator.MaxSim);
      t.is(vc.value.map.colbert?.hnswConfig?.m, 0n);
    }
    const upserted = await call('upsert', () =>
      points.upsert({
        collectionName: COLBERT,
        wait: true,
        points: [...fx.COLBERT_DENSE].map(([id, data]) => ({
          id: pid(id),
          vectors: {
            vectorsOptions: {
              case: 'vectors' as const,
              value: {
                vectors: {
                  dense: { vector: { case: 'dense' as const, value: { data } } },
                  colbert: { vector: { case: 'multiDense' as const, value: { vectors: fx.COLBERT_MULTI.get(id)!.map((v) => ({ data: v })) } } },
                },
              },
            },
          },
        })),
      }),
    );
    completed(t, upserted);
    const got = (
      await call('get points', () =>
        points.get({ collectionName: COLBERT, ids: [pid(2)], withVectors: { selectorOptions: { case: 'include', value: { names: ['colbert'] } } } }),
      )
    ).result;
    const out = got[0]?.vectors?.vectorsOptions;
    const stored = out?.case === 'vectors' && out.value.vectors.colbert !== undefined ? toMultiDenseVector(out.value.vectors.colbert)?.vectors.map((v) => v.data) : undefined;
    const want = fx.normalised(fx.COLBERT_MULTI.get(2)!);
    t.is(stored?.length, 3, 'a multivector comes back as its 3 vectors');
    want.forEach((v, i) => v.forEach((x, j) => near(t, stored?.[i]?.[j], x, `stored multivector [${i}][${j}] (cosine: normalised)`, 1e-5)));

    const scores = fx.colbertScores();
    // The multivector alone (no graph: an exact scan) finds 4 best.
    const alone = (await call('query multivector', () => points.query({ collectionName: COLBERT, query: nearestMulti(fx.COLBERT_QUERY_MULTI), using: 'colbert', limit: 2n }))).result;
    t.deepEqual(ids(alone), fx.top(scores.maxSim, 2));
    for (const p of alone) near(t, p.score, scores.maxSim.get(idOf(p.id) as number)!, `MaxSim of ${idOf(p.id)}`, 1e-5);
    // Re-rank: only the dense prefetch's candidates (4 is not among them), ordered by MaxSim.
    const candidates = fx.top(scores.dense, fx.COLBERT_CANDIDATES);
    const expected = fx.top(new Map(candidates.map((id) => [id, scores.maxSim.get(id)!])), 3);
    const r = (
      await call('query re-rank', () =>
        points.query({
          collectionName: COLBERT,
          prefetch: [{ query: nearest(fx.COLBERT_QUERY_DENSE), using: 'dense', limit: BigInt(fx.COLBERT_CANDIDATES) }],
          query: nearestMulti(fx.COLBERT_QUERY_MULTI),
          using: 'colbert',
          limit: 3n,
        }),
      )
    ).result;
    t.deepEqual(ids(r), expected);
    for (const p of r) near(t, p.score, scores.maxSim.get(idOf(p.id) as number)!, `re-rank MaxSim of ${idOf(p.id)}`, 1e-5);
  } finally {
    t.true((await call('delete', () => collections.delete({ collectionName: COLBERT }))).result);
  }
});

test.serial('search and searchBatch (the older API)', async (t) => {
  const { points } = api();
  const res = (
    await call('search', () =>
      points.search({ collectionName: PLAIN, vector: [0, 0, 1, 0], limit: 2n, withPayload: withPayload(true), filter: must(cond.range('count', { lte: 7 })) }),
    )
  ).result;
  t.deepEqual(ids(res), [3, 7]);
  near(t, res[0].score, 1, 'score of 3');
  near(t, res[1].score, 0.5, 'score of 7');
  t.deepEqual(plainMap(res[0].payload), { city: 'Berlin', count: 3 });

  const namedRes = (await call('search named', () => points.search({ collectionName: NAMED, vector: [0, 1, 0, 0], vectorName: 'image', limit: 1n }))).result;
  t.deepEqual(ids(namedRes), [11]);

  const batch = (
    await call('searchBatch', () =>
      points.searchBatch({
        collectionName: PLAIN,
        searchPoints: [
          { collectionName: PLAIN, vector: [1, 0, 0, 0], limit: 1n },
          { collectionName: PLAIN, vector: [0, 0, 0, 1], limit: 2n, withPayload: { selectorOptions: { case: 'include', value: { fields: ['city'] } } } },
        ],
      }),
    )
  ).result;
  t.is(batch.length, 2);
  t.deepEqual(ids(batch[0].result), [1]);
  t.deepEqual(ids(batch[1].result), [4, UUID_B_NORM]);
  t.deepEqual(plainMap(batch[1].result[0].payload), { city: 'Paris' });
});

test.serial('recommend: positive and negative examples, by id and by vector; recommendBatch', async (t) => {
  const { points } = api();
  const res: ScoredPoint[] = (
    await call('recommend', () => points.recommend({ collectionName: PLAIN, positive: [pid(1)], negative: [pid(2)], limit: 2n, withPayload: withPayload(true) }))
  ).result;
  // average_vector: 2*[1,0,0,0] - [0,1,0,0] = [2,-1,0,0]; the examples themselves are left out.
  t.deepEqual(ids(res), [5, UUID_A]);
  near(t, res[0].score, 1.7, 'score of 5');
  t.is(plain(res[0].payload.city), 'London');

  const byVector = (await call('recommend vector', () => points.recommend({ collectionName: PLAIN, positiveVectors: [{ data: [0, 0, 1, 0] }], limit: 1n }))).result;
  t.deepEqual(ids(byVector), [3]);

  const namedRes = (await call('recommend using', () => points.recommend({ collectionName: NAMED, positive: [pid(10)], using: 'image', limit: 1n }))).result;
  t.deepEqual(ids(namedRes), [12]);

  const batch = (
    await call('recommendBatch', () =>
      points.recommendBatch({
        collectionName: PLAIN,
        recommendPoints: [
          { collectionName: PLAIN, positive: [pid(1)], negative: [pid(2)], limit: 2n },
          { collectionName: PLAIN, positive: [pid(3)], limit: 1n },
        ],
      }),
    )
  ).result;
  t.deepEqual(batch.map((b) => ids(b.result)), [[5, UUID_A], [7]]);
  // A recommendation without examples is refused.
  t.is(await codeOf(t, () => points.recommend({ collectionName: PLAIN, limit: 1n })), 'InvalidArgument');
});

test.serial('searchGroups: the best hit of each city, best group first', async (t) => {
  const res = await call('searchGroups', () => api().points.searchGroups({ collectionName: PLAIN, vector: [1, 0, 0, 0], groupBy: 'city', limit: 2, groupSize: 1 }));
  const groups = res.result?.groups ?? [];
  t.is(groups.length, 2);
  const cities = groups.map((g) => (g.id?.kind.case === 'stringValue' ? g.id.kind.value : null));
  t.true(cities.every((c) => c !== null) && cities[0] !== cities[1], JSON.stringify(cities));
  t.true(groups.every((g) => g.hits.length === 1));
  t.true(groups[0].hits[0].score >= groups[1].hits[0].score);
});

// -- deletes, aliases ---------------------------------------------------------------------------

test.serial('delete points by id and by filter', async (t) => {
  const { points } = api();
  completed(t, await call('delete ids', () => points.delete({ collectionName: PLAIN, points: pointsSel([8, UUID_B]), wait: true })));
  completed(t, await call('delete filter', () => points.delete({ collectionName: PLAIN, points: filterSel(must(cond.match('city', 'Paris'))), wait: true })));
  const all = await call('scroll', () => points.scroll({ collectionName: PLAIN, limit: 100, withPayload: withPayload(false) }));
  t.deepEqual(ids(all.result), [1, 2, 3, 5, 7]);
  t.is((await call('count', () => points.count({ collectionName: PLAIN, exact: true }))).result?.count, 5n);
});

test.serial('aliases: create, list, use, rename, delete', async (t) => {
  const { collections, points } = api();
  t.true(
    (await call('updateAliases create', () => collections.updateAliases({ actions: [{ action: { case: 'createAlias', value: { collectionName: PLAIN, aliasName: ALIAS } } }] }))).result,
  );
  const aliasesOf = (list: Array<{ aliasName: string; collectionName: string }>) => list.map((a) => ({ alias_name: a.aliasName, collection_name: a.collectionName }));
  t.deepEqual(aliasesOf((await call('listCollectionAliases', () => collections.listCollectionAliases({ collectionName: PLAIN }))).aliases), [{ alias_name: ALIAS, collection_name: PLAIN }]);
  t.deepEqual((await call('listCollectionAliases named', () => collections.listCollectionAliases({ collectionName: NAMED }))).aliases, []);
  t.deepEqual(aliasesOf((await call('listAliases', () => collections.listAliases({}))).aliases), [{ alias_name: ALIAS, collection_name: PLAIN }]);

  // The alias reaches the collection for reads and writes.
  const viaAlias = (await call('query via alias', () => points.query({ collectionName: ALIAS, query: nearest([1, 0, 0, 0]), limit: 1n }))).result;
  t.deepEqual(ids(viaAlias), [1]);
  t.is((await call('get via alias', () => collections.get({ collectionName: ALIAS }))).result?.pointsCount, 5n);
  completed(t, await call('setPayload via alias', () => points.setPayload({ collectionName: ALIAS, pointsSelector: pointsSel([7]), payload: payload({ via: 'alias' }), wait: true })));
  t.is(plain((await getPoints(PLAIN, [7])).get(7)!.payload.via), 'alias');

  t.true(
    (await call('rename alias', () => collections.updateAliases({ actions: [{ action: { case: 'renameAlias', value: { oldAliasName: ALIAS, newAliasName: `${ALIAS}2` } } }] }))).result,
  );
  t.deepEqual(aliasesOf((await call('listAliases', () => collections.listAliases({}))).aliases), [{ alias_name: `${ALIAS}2`, collection_name: PLAIN }]);
  t.true((await call('delete alias', () => collections.updateAliases({ actions: [{ action: { case: 'deleteAlias', value: { aliasName: `${ALIAS}2` } } }] }))).result);
  t.deepEqual((await call('listAliases', () => collections.listAliases({}))).aliases, []);
  // An alias of a collection that does not exist is refused.
  t.is(
    await codeOf(t, () => collections.updateAliases({ actions: [{ action: { case: 'createAlias', value: { collectionName: 'jsg_nope', aliasName: 'jsg_x' } } }] })),
    'NotFound',
  );
});

// -- snapshots ----------------------------------------------------------------------------------

const SNAP = 'jsg_snap';
const TS_RE = '\\d{4}-\\d{2}-\\d{2}-\\d{2}-\\d{2}-\\d{2}';

async function snapPoints(name: string): Promise<string> {
  const res = await call(`scroll ${name}`, () => api().points.scroll({ collectionName: name, limit: 100, withPayload: withPayload(true), withVectors: withVectors(true) }));
  return JSON.stringify(res.result.map((p) => [idOf(p.id), plainMap(p.payload), vectorOf(p.vectors)]));
}

function checkDescription(t: ExecutionContext, d: SnapshotDescription | undefined, pattern: RegExp): asserts d is SnapshotDescription {
  t.truthy(d);
  t.regex(d!.name, pattern);
  t.true(d!.size > 0n);
  t.regex(d!.checksum ?? '', /^[0-9a-f]{64}$/);
  const secs = Number(d!.creationTime?.seconds ?? 0n);
  t.true(Math.abs(secs * 1000 - Date.now()) < 10 * 60_000, `creation time ${secs} is now`);
}

/** Recovers `collection` from `location` through REST (the gRPC contract has no recovery). */
async function recoverViaRest(collection: string, body: Record<string, unknown>): Promise<{ status: number; json: unknown }> {
  const res = await fetch(`${node.server.url}/collections/${collection}/snapshots/recover`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

test.serial('snapshots: create, list, delete over gRPC; the snapshot recovers through REST', async (t) => {
  const { collections, points, snapshots } = api();
  t.true(
    (
      await call('create', () =>
        collections.create({ collectionName: SNAP, vectorsConfig: { config: { case: 'params', value: { size: 4n, distance: Distance.Dot } } }, shardNumber: 2 }),
      )
    ).result,
  );
  await call('createFieldIndex', () => points.createFieldIndex({ collectionName: SNAP, fieldName: 'g', fieldType: FieldType.FieldTypeKeyword, wait: true }));
  await call('upsert', () =>
    points.upsert({
      collectionName: SNAP,
      wait: true,
      points: Array.from({ length: 10 }, (_, i) => ({ id: pid(i + 1), vectors: dense([i, 1, 0, -i]), payload: payload({ g: i % 2 ? 'odd' : 'even', i }) })),
    }),
  );
  const before = await snapPoints(SNAP);

  const d = (await call('snapshots.create', () => snapshots.create({ collectionName: SNAP }))).snapshotDescription;
  checkDescription(t, d, new RegExp(`^${SNAP}-\\d+-${TS_RE}\\.snapshot$`));
  const listed = (await call('snapshots.list', () => snapshots.list({ collectionName: SNAP }))).snapshotDescriptions;
  t.deepEqual(
    listed.map((x) => [x.name, x.size, x.checksum]),
    [[d.name, d.size, d.checksum]],
  );

  // Change the collection, then recover it from the server's own download URL.
  await call('delete', () => points.delete({ collectionName: SNAP, points: pointsSel([1, 2, 3]), wait: true }));
  t.is((await call('count', () => points.count({ collectionName: SNAP, exact: true }))).result?.count, 7n);
  const location = `${node.server.url}/collections/${SNAP}/snapshots/${d.name}`;
  const recovered = await recoverViaRest(SNAP, { location, priority: 'snapshot', checksum: d.checksum });
  t.is(recovered.status, 200, JSON.stringify(recovered.json));
  t.is(await snapPoints(SNAP), before);
  const info = (await call('get', () => collections.get({ collectionName: SNAP }))).result!;
  t.is(info.payloadSchema.g?.dataType, PayloadSchemaType.Keyword);
  t.is(info.config?.params?.shardNumber, 2);

  t.true((await call('snapshots.delete', () => snapshots.delete({ collectionName: SNAP, snapshotName: d.name }))).time >= 0);
  t.deepEqual((await call('snapshots.list', () => snapshots.list({ collectionName: SNAP }))).snapshotDescriptions, []);
  t.is(await codeOf(t, () => snapshots.delete({ collectionName: SNAP, snapshotName: d.name })), 'NotFound');
  t.is(await codeOf(t, () => snapshots.create({ collectionName: 'jsg_nope' })), 'NotFound');
  t.is(await codeOf(t, () => snapshots.list({ collectionName: 'jsg_nope' })), 'NotFound');
});

test.serial('snapshots: createFull, listFull, deleteFull', async (t) => {
  const { collections, snapshots } = api();
  const d = (await call('createFull', () => snapshots.createFull({}))).snapshotDescription;
  checkDescription(t, d, new RegExp(`^full-snapshot-${TS_RE}\\.snapshot$`));
  t.deepEqual(
    (await call('listFull', () => snapshots.listFull({}))).snapshotDescriptions.map((x) => [x.name, x.size, x.checksum]),
    [[d.name, d.size, d.checksum]],
  );
  // The full snapshot is served for download over REST, bytes as described.
  const res = await fetch(`${node.server.url}/snapshots/${d.name}`);
  t.is(res.status, 200);
  t.is(BigInt((await res.arrayBuffer()).byteLength), d.size);

  await call('deleteFull', () => snapshots.deleteFull({ snapshotName: d.name }));
  t.deepEqual((await call('listFull', () => snapshots.listFull({}))).snapshotDescriptions, []);
  t.is(await codeOf(t, () => snapshots.deleteFull({ snapshotName: d.name })), 'NotFound');

  t.true((await call(`delete ${SNAP}`, () => collections.delete({ collectionName: SNAP }))).result);
});

test.serial('delete removes both collections', async (t) => {
  const { collections } = api();
  t.true((await call('delete plain', () => collections.delete({ collectionName: PLAIN }))).result);
  t.true((await call('delete named', () => collections.delete({ collectionName: NAMED }))).result);
  t.false((await call('delete again', () => collections.delete({ collectionName: PLAIN }))).result);
  t.deepEqual((await call('list', () => collections.list({}))).collections, []);
  t.false((await call('collectionExists', () => collections.collectionExists({ collectionName: PLAIN }))).result?.exists);
});
