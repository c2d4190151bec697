/**
 * The official JavaScript client (@qdrant/js-client-rest 1.18) drives a whole workflow
 * against a real `bin/quiver`: collections (unnamed and named vectors, hnsw and
 * quantization settings), payload indexes, every kind of point write, reads, every
 * search form, hybrid queries (dense + sparse with RRF, a ColBERT-style MaxSim re-rank,
 * both against hand computations in hybrid-fixture.ts), aliases, snapshots (collection,
 * shard and full-storage) and deletion.
 * Each step is one serial test that checks what the client hands back, not just that
 * it did not throw.
 *
 * The client is built with its default options, as a user builds it: its version check
 * reads `GET /` (the Qdrant API version Quiver implements) and must pass without a
 * warning. Everything the client prints with console.warn is collected and checked.
 */

import * as http from 'node:http';

import test from 'ava';
import type { ExecutionContext } from 'ava';
import { QdrantClient } from '@qdrant/js-client-rest';

import { startQuiver, type RunningQuiver } from '../api/helpers';
import * as fx from './hybrid-fixture';
import { waitFor } from '../support/wait';

const PLAIN = 'js_plain';
const NAMED = 'js_named';
const ALIAS = 'js_alias';
const HYBRID = 'js_hybrid';
const COLBERT = 'js_colbert';
const UUID_A = '550e8400-e29b-41d4-a716-446655440000';
// Written in upper case on purpose: the server must hand it back lower-case hyphenated.
const UUID_B = 'F47AC10B-58CC-4372-A567-0E02B2C3D479';
const UUID_B_NORM = UUID_B.toLowerCase();

let node: RunningQuiver;
let client: QdrantClient;

/** Turns the client's ApiError (status, body) into a message a failing test can show. */
async function call<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    const e = err as { status?: number; data?: unknown; message?: string };
    throw new Error(`${what} failed: status ${String(e.status)} ${JSON.stringify(e.data ?? e.message)}`);
  }
}

type Id = string | number;
const ids = (points: ReadonlyArray<{ id: Id }>): Id[] => points.map((p) => p.id);
const sortedIds = (points: ReadonlyArray<{ id: Id }>): string[] => points.map((p) => String(p.id)).sort();

function near(t: ExecutionContext, actual: number | undefined, expected: number, what: string, eps = 1e-3): void {
  t.true(typeof actual === 'number' && Math.abs(actual - expected) <= eps, `${what}: ${String(actual)} is not ≈ ${expected}`);
}

/** What the client printed with console.warn (its compatibility check warns there). */
const warnings: string[] = [];
const consoleWarn = console.warn;

test.before(async () => {
  node = await startQuiver();
  console.warn = (...args: unknown[]) => {
    warnings.push(args.map(String).join(' '));
  };
  // The constructor starts its version check in the background (GET /, then compare);
  // the after hook checks that nothing was printed by the end of the workflow.
  client = new QdrantClient({ url: node.url });
});

test.serial('the client with default options checks the server version and does not warn', async (t) => {
  // The check is real: against a server that reports another major version, it warns.
  const other = http.createServer((_req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ title: 'other', version: '0.1.0' }));
  });
  await new Promise<void>((r) => other.listen(0, '127.0.0.1', r));
  const port = (other.address() as { port: number }).port;
  new QdrantClient({ url: `http://127.0.0.1:${port}` });
  const aboutOther = (w: string) => /incompatible with server version 0\.1\.0/.test(w);
  await waitFor('the warning about server version 0.1.0', () => warnings.some(aboutOther));
  // Keep any other warning (one about Quiver would fail the after hook).
  const rest = warnings.filter((w) => !aboutOther(w));
  warnings.splice(0, warnings.length, ...rest);
  other.closeAllConnections();
  await new Promise<void>((r) => other.close(() => r()));

  // Quiver reports the API version it implements.
  t.is((await client.versionInfo()).version, '1.18.0');
});

test.after.always(async () => {
  console.warn = consoleWarn;
  if (node !== undefined) await node.stop();
});

test.after('the client printed no warning during the whole workflow', (t) => {
  t.deepEqual(warnings, []);
});

// -- collections --------------------------------------------------------------------------------

test.serial('createCollection: unnamed vector with hnsw_config, and named vectors with quantization', async (t) => {
  t.true(
    await call('createCollection plain', () =>
      client.createCollection(PLAIN, {
        vectors: { size: 4, distance: 'Dot' },
        hnsw_config: { m: 16, ef_construct: 100, full_scan_threshold: 10_000 },
        optimizers_config: { default_segment_number: 2 },
      }),
    ),
  );
  t.true(
    await call('createCollection named', () =>
      client.createCollection(NAMED, {
        vectors: {
          image: { size: 4, distance: 'Cosine' },
          text: { size: 2, distance: 'Euclid', hnsw_config: { m: 8 } },
        },
        hnsw_config: { m: 12, ef_construct: 64 },
        quantization_config: { scalar: { type: 'int8', quantile: 0.99, always_ram: true } },
      }),
    ),
  );
  // Creating an existing collection is refused.
  const err = await t.throwsAsync(() => client.createCollection(PLAIN, { vectors: { size: 4, distance: 'Dot' } }));
  t.is((err as unknown as { status: number }).status, 409);
});

test.serial('getCollections and collectionExists list what exists', async (t) => {
  const { collections } = await call('getCollections', () => client.getCollections());
  t.deepEqual(collections.map((c) => c.name).sort(), [NAMED, PLAIN]);
  t.deepEqual(await call('collectionExists', () => client.collectionExists(PLAIN)), { exists: true });
  t.deepEqual(await call('collectionExists', () => client.collectionExists('js_nope')), { exists: false });
});

test.serial('getCollection reports the configuration it was created with', async (t) => {
  const plain = await call('getCollection plain', () => client.getCollection(PLAIN));
  t.is(plain.status, 'green');
  t.is(plain.points_count, 0);
  t.deepEqual(plain.config.params.vectors, { size: 4, distance: 'Dot' });
  t.is(plain.config.hnsw_config.m, 16);
  t.is(plain.config.hnsw_config.ef_construct, 100);
  t.is(plain.config.hnsw_config.full_scan_threshold, 10_000);
  t.is(plain.config.optimizer_config.default_segment_number, 2);
  t.falsy(plain.config.quantization_config);
  t.deepEqual(plain.payload_schema, {});

  const named = await call('getCollection named', () => client.getCollection(NAMED));
  const vectors = named.config.params.vectors as Record<string, { size: number; distance: string; hnsw_config?: { m?: number } }>;
  t.is(vectors.image.size, 4);
  t.is(vectors.image.distance, 'Cosine');
  t.is(vectors.text.size, 2);
  t.is(vectors.text.distance, 'Euclid');
  t.is(vectors.text.hnsw_config?.m, 8);
  t.is(named.config.hnsw_config.m, 12);
  t.is(named.config.hnsw_config.ef_construct, 64);
  t.deepEqual(named.config.quantization_config, { scalar: { type: 'int8', quantile: 0.99, always_ram: true } });

  const err = await t.throwsAsync(() => client.getCollection('js_nope'));
  t.is((err as unknown as { status: number }).status, 404);
});

test.serial('updateCollection changes optimizer and params settings', async (t) => {
  t.true(
    await call('updateCollection', () =>
      client.updateCollection(PLAIN, { optimizers_config: { indexing_threshold: 20_000 }, params: { on_disk_payload: false } }),
    ),
  );
  const info = await call('getCollection', () => client.getCollection(PLAIN));
  t.is(info.config.optimizer_config.indexing_threshold, 20_000);
  t.is(info.config.params.on_disk_payload, false);
});

test.serial('createPayloadIndex: keyword and integer indexes appear in payload_schema', async (t) => {
  const r1 = await call('createPayloadIndex city', () =>
    client.createPayloadIndex(PLAIN, { field_name: 'city', field_schema: 'keyword', wait: true }),
  );
  t.is(r1.status, 'completed');
  const r2 = await call('createPayloadIndex count', () =>
    client.createPayloadIndex(PLAIN, { field_name: 'count', field_schema: { type: 'integer', range: true, lookup: true }, wait: true }),
  );
  t.is(r2.status, 'completed');
  const info = await call('getCollection', () => client.getCollection(PLAIN));
  t.is(info.payload_schema.city?.data_type, 'keyword');
  t.is(info.payload_schema.count?.data_type, 'integer');
});

// -- writes -------------------------------------------------------------------------------------

test.serial('upsert: a points list and a batch, integer and UUID ids, wait=true', async (t) => {
  const r1 = await call('upsert points', () =>
    client.upsert(PLAIN, {
      wait: true,
      points: [
        { id: 1, vector: [1, 0, 0, 0], payload: { city: 'Berlin', count: 1, tags: ['a', 'b'], nested: { x: 1, y: 'z' } } },
        { id: 2, vector: [0, 1, 0, 0], payload: { city: 'London', count: 2, tags: ['b'] } },
        { id: 3, vector: [0, 0, 1, 0], payload: { city: 'Berlin', count: 3 } },
        { id: 4, vector: [0, 0, 0, 1], payload: { city: 'Paris', count: 4 } },
        { id: 5, vector: [0.9, 0.1, 0, 0], payload: { city: 'London', count: 5 } },
        { id: UUID_A, vector: [0.5, 0.5, 0, 0], payload: { city: 'Paris', count: 6 } },
      ],
    }),
  );
  t.is(r1.status, 'completed');
  t.is(typeof r1.operation_id, 'number');

  const r2 = await call('upsert batch', () =>
    client.upsert(PLAIN, {
      wait: true,
      batch: {
        ids: [7, 8, UUID_B],
        vectors: [
          [0, 0, 0.5, 0.5],
          [0.1, 0.1, 0.1, 0.1],
          [0, 0.2, 0, 0.8],
        ],
        payloads: [{ city: 'Rome', count: 7 }, { city: 'Rome', count: 8 }, { city: 'Oslo', count: 9 }],
      },
    }),
  );
  t.is(r2.status, 'completed');
  t.true((r2.operation_id ?? -1) > (r1.operation_id ?? -1));

  const r3 = await call('upsert named', () =>
    client.upsert(NAMED, {
      wait: true,
      points: [
        { id: 10, vector: { image: [1, 0, 0, 0], text: [0, 0] }, payload: { kind: 'cat' } },
        { id: 11, vector: { image: [0, 1, 0, 0], text: [1, 1] }, payload: { kind: 'dog' } },
        { id: 12, vector: { image: [1, 1, 0, 0] }, payload: { kind: 'cat' } },
        { id: 13, vector: { text: [3, 4] }, payload: { kind: 'bird' } },
      ],
    }),
  );
  t.is(r3.status, 'completed');

  // A vector of the wrong size is refused and writes nothing.
  const err = await t.throwsAsync(() => client.upsert(PLAIN, { wait: true, points: [{ id: 99, vector: [1, 2, 3] }] }));
  t.is((err as unknown as { status: number }).status, 400);

  const info = await call('getCollection', () => client.getCollection(PLAIN));
  t.is(info.points_count, 9);
  t.is((await call('getCollection', () => client.getCollection(NAMED))).points_count, 4);
});

test.serial('retrieve: payload, vectors, UUID ids normalised, missing ids left out', async (t) => {
  const points = await call('retrieve', () =>
    client.retrieve(PLAIN, { ids: [1, UUID_B, 424242], with_payload: true, with_vector: true }),
  );
  t.deepEqual(sortedIds(points), ['1', UUID_B_NORM].sort());
  const p1 = points.find((p) => p.id === 1)!;
  t.deepEqual(p1.payload, { city: 'Berlin', count: 1, tags: ['a', 'b'], nested: { x: 1, y: 'z' } });
  t.deepEqual(p1.vector, [1, 0, 0, 0]);
  const pb = points.find((p) => p.id === UUID_B_NORM)!;
  t.deepEqual(pb.payload, { city: 'Oslo', count: 9 });

  const bare = await call('retrieve bare', () => client.retrieve(PLAIN, { ids: [2], with_payload: false, with_vector: false }));
  t.is(bare.length, 1);
  t.is(bare[0].id, 2);
  t.falsy(bare[0].payload);
  t.falsy(bare[0].vector);

  const named = await call('retrieve named', () => client.retrieve(NAMED, { ids: [11, 13], with_vector: ['text'] }));
  const byId = new Map(named.map((p) => [p.id, p]));
  t.deepEqual(byId.get(11)?.vector, { text: [1, 1] });
  t.deepEqual(byId.get(13)?.vector, { text: [3, 4] });
  t.deepEqual(byId.get(11)?.payload, { kind: 'dog' });
});

test.serial('setPayload, overwritePayload, deletePayload, clearPayload', async (t) => {
  let r = await call('setPayload', () => client.setPayload(PLAIN, { points: [1, 2], payload: { color: 'red' }, wait: true }));
  t.is(r.status, 'completed');
  r = await call('setPayload key', () => client.setPayload(PLAIN, { points: [1], payload: { w: 2 }, key: 'nested', wait: true }));
  t.is(r.status, 'completed');
  r = await call('setPayload filter', () =>
    client.setPayload(PLAIN, { filter: { must: [{ key: 'city', match: { value: 'Paris' } }] }, payload: { fr: true }, wait: true }),
  );
  t.is(r.status, 'completed');
  let [p1, p2] = await call('retrieve', () => client.retrieve(PLAIN, { ids: [1, 2] }));
  if (p1.id !== 1) [p1, p2] = [p2, p1];
  t.deepEqual(p1.payload, { city: 'Berlin', count: 1, tags: ['a', 'b'], nested: { x: 1, y: 'z', w: 2 }, color: 'red' });
  t.deepEqual(p2.payload, { city: 'London', count: 2, tags: ['b'], color: 'red' });
  const paris = await call('retrieve paris', () => client.retrieve(PLAIN, { ids: [4, UUID_A] }));
  t.true(paris.length === 2 && paris.every((p) => p.payload?.fr === true));

  r = await call('deletePayload', () => client.deletePayload(PLAIN, { points: [1], keys: ['color', 'nested.x'], wait: true }));
  t.is(r.status, 'completed');
  [p1] = await call('retrieve', () => client.retrieve(PLAIN, { ids: [1] }));
  t.deepEqual(p1.payload, { city: 'Berlin', count: 1, tags: ['a', 'b'], nested: { y: 'z', w: 2 } });

  r = await call('overwritePayload', () => client.overwritePayload(PLAIN, { points: [2], payload: { city: 'London', count: 2 }, wait: true }));
  t.is(r.status, 'completed');
  [p2] = await call('retrieve', () => client.retrieve(PLAIN, { ids: [2] }));
  t.deepEqual(p2.payload, { city: 'London', count: 2 });

  r = await call('clearPayload', () => client.clearPayload(NAMED, { points: [13], wait: true }));
  t.is(r.status, 'completed');
  const [p13] = await call('retrieve', () => client.retrieve(NAMED, { ids: [13] }));
  t.deepEqual(p13.payload ?? {}, {});
});

test.serial('updateVectors and deleteVectors on named vectors', async (t) => {
  let r = await call('updateVectors', () =>
    client.updateVectors(NAMED, { points: [{ id: 12, vector: { text: [6, 8] } }, { id: 13, vector: { image: [0, 0, 1, 0] } }], wait: true }),
  );
  t.is(r.status, 'completed');
  let pts = await call('retrieve', () => client.retrieve(NAMED, { ids: [12, 13], with_vector: true }));
  let byId = new Map(pts.map((p) => [p.id, p.vector as Record<string, number[]>]));
  t.deepEqual(byId.get(12)?.text, [6, 8]);
  // Cosine vectors are stored normalised: [1, 1, 0, 0] comes back as [1/√2, 1/√2, 0, 0].
  near(t, byId.get(12)?.image?.[0], Math.SQRT1_2, 'normalised image[0] of 12');
  t.deepEqual(byId.get(13)?.image, [0, 0, 1, 0]);
  t.deepEqual(byId.get(13)?.text, [3, 4]);

  r = await call('deleteVectors', () => client.deleteVectors(NAMED, { points: [12], vector: ['text'], wait: true }));
  t.is(r.status, 'completed');
  pts = await call('retrieve', () => client.retrieve(NAMED, { ids: [12], with_vector: true }));
  byId = new Map(pts.map((p) => [p.id, p.vector as Record<string, number[]>]));
  t.false('text' in (byId.get(12) ?? {}));
  t.true('image' in (byId.get(12) ?? {}));
});

test.serial('batchUpdate applies its operations in order', async (t) => {
  const results = await call('batchUpdate', () =>
    client.batchUpdate(PLAIN, {
      wait: true,
      operations: [
        { upsert: { points: [{ id: 20, vector: [0.2, 0.2, 0.2, 0.2], payload: { city: 'Tmp', count: 20 } }] } },
        { set_payload: { points: [20], payload: { extra: 1 } } },
        { overwrite_payload: { points: [20], payload: { city: 'Tmp2', count: 21 } } },
        { delete_payload: { points: [20], keys: ['count'] } },
        { update_vectors: { points: [{ id: 20, vector: [0, 0, 0, 2] }] } },
        { upsert: { points: [{ id: 21, vector: [1, 1, 1, 1], payload: { city: 'Gone' } }] } },
        { delete: { points: [21] } },
      ],
    }),
  );
  t.is(results.length, 7);
  t.true(results.every((r) => r.status === 'completed'));
  const pts = await call('retrieve', () => client.retrieve(PLAIN, { ids: [20, 21], with_vector: true }));
  t.deepEqual(ids(pts), [20]);
  t.deepEqual(pts[0].payload, { city: 'Tmp2' });
  t.deepEqual(pts[0].vector, [0, 0, 0, 2]);
  await call('delete 20', () => client.delete(PLAIN, { points: [20], wait: true }));
});

// -- reads --------------------------------------------------------------------------------------

test.serial('scroll: all points in id order, pages with offset, filter, order_by', async (t) => {
  const all = await call('scroll', () => client.scroll(PLAIN, { limit: 100, with_payload: false }));
  // Integer ids first (ascending), then UUIDs.
  t.deepEqual(ids(all.points), [1, 2, 3, 4, 5, 7, 8, UUID_A, UUID_B_NORM]);
  t.is(all.next_page_offset ?? null, null);

  const page1 = await call('scroll page 1', () => client.scroll(PLAIN, { limit: 3 }));
  t.deepEqual(ids(page1.points), [1, 2, 3]);
  t.is(page1.next_page_offset, 4);
  t.deepEqual(page1.points[0].payload?.city, 'Berlin');
  const page2 = await call('scroll page 2', () => client.scroll(PLAIN, { limit: 3, offset: page1.next_page_offset! }));
  t.deepEqual(ids(page2.points), [4, 5, 7]);
  t.is(page2.next_page_offset, 8);

  const berlin = await call('scroll filter', () =>
    client.scroll(PLAIN, { filter: { must: [{ key: 'city', match: { value: 'Berlin' } }] }, with_payload: ['count'], limit: 10 }),
  );
  t.deepEqual(ids(berlin.points), [1, 3]);
  t.deepEqual(berlin.points.map((p) => p.payload), [{ count: 1 }, { count: 3 }]);

  const ranged = await call('scroll range', () =>
    client.scroll(PLAIN, {
      filter: { must: [{ key: 'count', range: { gte: 3, lt: 7 } }], must_not: [{ has_id: [UUID_A] }] },
      limit: 10,
    }),
  );
  t.deepEqual(ids(ranged.points), [3, 4, 5]);

  const desc = await call('scroll order_by', () =>
    client.scroll(PLAIN, { order_by: { key: 'count', direction: 'desc' }, limit: 4, with_payload: true }),
  );
  t.deepEqual(desc.points.map((p) => p.payload?.count), [9, 8, 7, 6]);
  t.deepEqual(ids(desc.points), [UUID_B_NORM, 8, 7, UUID_A]);
  const asc = await call('scroll order_by start_from', () =>
    client.scroll(PLAIN, { order_by: { key: 'count', start_from: 4 }, limit: 2 }),
  );
  t.deepEqual(ids(asc.points), [4, 5]);
});

test.serial('count: exact, with and without a filter', async (t) => {
  t.deepEqual(await call('count', () => client.count(PLAIN, { exact: true })), { count: 9 });
  t.deepEqual(
    await call('count filter', () =>
      client.count(PLAIN, { filter: { should: [{ key: 'city', match: { any: ['London', 'Rome'] } }] }, exact: true }),
    ),
    { count: 4 },
  );
  t.deepEqual(await call('count named', () => client.count(NAMED, {})), { count: 4 });
});

// -- search -------------------------------------------------------------------------------------

test.serial('query: by vector, by id, with filter, params, payload selectors and using', async (t) => {
  const byVector = await call('query vector', () => client.query(PLAIN, { query: [1, 0, 0, 0], limit: 3, with_payload: true }));
  t.deepEqual(ids(byVector.points), [1, 5, UUID_A]);
  near(t, byVector.points[0].score, 1, 'score of 1');
  near(t, byVector.points[1].score, 0.9, 'score of 5');
  near(t, byVector.points[2].score, 0.5, 'score of UUID_A');
  t.is(byVector.points[0].payload?.city, 'Berlin');
  t.falsy(byVector.points[0].vector);

  // A point id as the query: its own vector, and the point itself left out.
  const byId = await call('query id', () => client.query(PLAIN, { query: 1, limit: 2 }));
  t.deepEqual(ids(byId.points), [5, UUID_A]);

  const nearest = await call('query nearest', () =>
    client.query(PLAIN, {
      query: { nearest: [1, 0, 0, 0] },
      filter: { must: [{ key: 'city', match: { value: 'London' } }] },
      params: { hnsw_ef: 64, exact: true },
      with_payload: { include: ['city'] },
      with_vector: true,
      limit: 5,
    }),
  );
  t.deepEqual(ids(nearest.points), [5, 2]);
  t.deepEqual(nearest.points[0].payload, { city: 'London' });
  const v5 = nearest.points[0].vector as number[];
  near(t, v5[0], 0.9, 'vector of 5');

  const excluded = await call('query exclude', () =>
    client.query(PLAIN, { query: [1, 0, 0, 0], with_payload: { exclude: ['tags', 'nested', 'count'] }, limit: 1 }),
  );
  t.deepEqual(excluded.points[0].payload, { city: 'Berlin' });

  const threshold = await call('query score_threshold', () =>
    client.query(PLAIN, { query: [1, 0, 0, 0], score_threshold: 0.6, limit: 10 }),
  );
  t.deepEqual(ids(threshold.points), [1, 5]);

  const offset = await call('query offset', () => client.query(PLAIN, { query: [1, 0, 0, 0], offset: 1, limit: 2 }));
  t.deepEqual(ids(offset.points), [5, UUID_A]);

  const image = await call('query using image', () => client.query(NAMED, { query: [1, 0, 0, 0], using: 'image', limit: 2 }));
  t.deepEqual(ids(image.points), [10, 12]);
  near(t, image.points[0].score, 1, 'cosine 10');
  near(t, image.points[1].score, Math.SQRT1_2, 'cosine 12');

  const text = await call('query using text', () => client.query(NAMED, { query: [0, 0], using: 'text', limit: 10 }));
  // 12 has no text vector any more; Euclid scores are distances, nearest first.
  t.deepEqual(ids(text.points), [10, 11, 13]);
  near(t, text.points[1].score, Math.SQRT2, 'euclid 11');
  near(t, text.points[2].score, 5, 'euclid 13');

  const recommend = await call('query recommend', () =>
    client.query(PLAIN, { query: { recommend: { positive: [1], negative: [2] } }, limit: 2 }),
  );
  t.deepEqual(ids(recommend.points), [5, UUID_A]);

  const noVector = await call('query without vector', () =>
    client.query(PLAIN, { filter: { must: [{ key: 'city', match: { value: 'Rome' } }] }, limit: 10 }),
  );
  t.deepEqual(sortedIds(noVector.points), ['7', '8']);
});

test.serial('queryBatch answers each query in order', async (t) => {
  const res = await call('queryBatch', () =>
    client.queryBatch(PLAIN, {
      searches: [
        { query: [0, 0, 0, 1], limit: 1 },
        { query: [0, 1, 0, 0], limit: 2, filter: { must_not: [{ key: 'city', match: { value: 'London' } }] } },
      ],
    }),
  );
  t.is(res.length, 2);
  t.deepEqual(ids(res[0].points), [4]);
  t.deepEqual(ids(res[1].points), [UUID_A, UUID_B_NORM]);
});

test.serial('query hybrid: two named dense prefetches fused by RRF (and RRF with k), re-scored, in a batch', async (t) => {
  // image (cosine) to [1, 0, 0, 0], 2 best: 10, 12; text (euclid) to [1, 1]: 11, 10, 13 (12 has no text vector now).
  const prefetch = [
    { query: [1, 0, 0, 0], using: 'image', limit: 2 },
    { query: [1, 1], using: 'text', limit: 3 },
  ];
  const rrf = await call('query rrf', () => client.query(NAMED, { prefetch, query: { fusion: 'rrf' }, limit: 10 }));
  // RRF, k = 2: 10 = 1/2 + 1/3, 11 = 1/2, 12 = 1/3, 13 = 1/4.
  t.deepEqual(ids(rrf.points), [10, 11, 12, 13]);
  [1 / 2 + 1 / 3, 1 / 2, 1 / 3, 1 / 4].forEach((s, i) => near(t, rrf.points[i].score, s, `rrf score ${i}`));
  const k = await call('query rrf k', () => client.query(NAMED, { prefetch, query: { rrf: { k: 5 } }, limit: 1, offset: 1, with_payload: true }));
  t.deepEqual(ids(k.points), [11]);
  near(t, k.points[0].score, 1 / 5, 'rrf k=5 score of 11');
  t.deepEqual(k.points[0].payload, { kind: 'dog' });
  // A dense query over the candidates re-scores only them: cosine to [0, 1, 2, 0].
  const re = await call('query re-score', () => client.query(NAMED, { prefetch, query: [0, 1, 2, 0], using: 'image', limit: 10 }));
  t.deepEqual(ids(re.points), [13, 11, 12, 10]);
  const batch = await call('queryBatch hybrid', () =>
    client.queryBatch(NAMED, { searches: [{ prefetch, query: { fusion: 'dbsf' }, limit: 1 }, { prefetch, query: { fusion: 'rrf' }, limit: 2 }] }),
  );
  t.deepEqual(ids(batch[1].points), [10, 11]);
  t.is(batch[0].points.length, 1);
  const err = await t.throwsAsync(() => client.query(NAMED, { prefetch, limit: 2 }));
  t.is((err as unknown as { status: number }).status, 400);
});

test.serial('hybrid search: dense + sparse prefetches fused by RRF, ids and scores against a hand computation', async (t) => {
  t.true(
    await call('createCollection', () =>
      client.createCollection(HYBRID, { vectors: { dense: { size: 4, distance: 'Dot' } }, sparse_vectors: { text: { index: { on_disk: false } } } }),
    ),
  );
  try {
    const info = await call('getCollection', () => client.getCollection(HYBRID));
    t.deepEqual(Object.keys(info.config.params.sparse_vectors ?? {}), ['text']);
    const points = [...fx.HYBRID_DENSE].map(([id, dense]) => {
      const sparse = fx.HYBRID_SPARSE.get(id);
      return { id, vector: sparse === undefined ? { dense } : { dense, text: fx.sparseBody(sparse) }, payload: { n: id } };
    });
    t.is((await call('upsert', () => client.upsert(HYBRID, { wait: true, points }))).status, 'completed');
    t.is((await call('count', () => client.count(HYBRID, { exact: true }))).count, 6);

    const scores = fx.hybridScores();
    const sparseQuery = fx.sparseBody(fx.HYBRID_QUERY_SPARSE);
    // Each prefetch alone: exact sparse scoring (6 has no sparse vector) and dense.
    const alone = await call('query sparse', () => client.query(HYBRID, { query: sparseQuery, using: 'text', limit: 10 }));
    t.deepEqual(ids(alone.points), fx.top(scores.sparse, 10));
    for (const p of alone.points) near(t, p.score, scores.sparse.get(p.id as number)!, `sparse score of ${p.id}`, 1e-5);
    const dense = await call('query dense', () => client.query(HYBRID, { query: fx.HYBRID_QUERY_DENSE, using: 'dense', limit: fx.HYBRID_DENSE_LIMIT }));
    t.deepEqual(ids(dense.points), fx.top(scores.dense, fx.HYBRID_DENSE_LIMIT));

    const prefetch = [
      { query: fx.HYBRID_QUERY_DENSE, using: 'dense', limit: fx.HYBRID_DENSE_LIMIT },
      { query: sparseQuery, using: 'text', limit: fx.HYBRID_SPARSE_LIMIT },
    ];
    const lists = [fx.top(scores.dense, fx.HYBRID_DENSE_LIMIT), fx.top(scores.sparse, fx.HYBRID_SPARSE_LIMIT)];
    for (const [query, k] of [[{ fusion: 'rrf' as const }, 2], [{ rrf: { k: 5 } }, 5]] as const) {
      const expected = fx.rrfByHand(lists, k);
      const r = await call(`query rrf k=${k}`, () => client.query(HYBRID, { prefetch, query, limit: 10, with_payload: true }));
      t.deepEqual(ids(r.points), expected.map(([id]) => id), `rrf k=${k} order`);
      expected.forEach(([id, s], i) => {
        near(t, r.points[i]?.score, s, `rrf k=${k} score of ${id}`, 1e-6);
        t.deepEqual(r.points[i]?.payload, { n: id });
      });
      const page = await call(`query rrf k=${k} page`, () => client.query(HYBRID, { prefetch, query, limit: 2, offset: 1 }));
      t.deepEqual(ids(page.points), expected.slice(1, 3).map(([id]) => id), `rrf k=${k} limit 2 offset 1`);
    }
    // In a batch, with a filter on the sparse prefetch.
    const filtered = [prefetch[0], { ...prefetch[1], filter: { must_not: [{ has_id: [4] }] } }];
    const batch = await call('queryBatch', () => client.queryBatch(HYBRID, { searches: [{ prefetch: filtered, query: { fusion: 'rrf' }, limit: 10 }] }));
    const expected = fx.rrfByHand([lists[0], fx.top(new Map([...scores.sparse].filter(([id]) => id !== 4)), fx.HYBRID_SPARSE_LIMIT)], 2);
    t.deepEqual(ids(batch[0].points), expected.map(([id]) => id));
    expected.forEach(([id, s], i) => near(t, batch[0].points[i]?.score, s, `batched rrf score of ${id}`, 1e-6));
  } finally {
    t.true(await call('deleteCollection', () => client.deleteCollection(HYBRID)));
  }
});

test.serial('ColBERT-style re-rank: a dense prefetch, then a multivector (max_sim, hnsw m=0) query over its candidates, against MaxSim by hand', async (t) => {
  t.true(
    await call('createCollection', () =>
      client.createCollection(COLBERT, {
        vectors: {
          dense: { size: 4, distance: 'Dot' },
          colbert: { size: 3, distance: 'Cosine', multivector_config: { comparator: 'max_sim' }, hnsw_config: { m: 0 } },
        },
      }),
    ),
  );
  try {
    const info = await call('getCollection', () => client.getCollection(COLBERT));
    const params = (info.config.params.vectors as Record<string, { multivector_config?: { comparator: string } | null; hnsw_config?: { m?: number | null } | null }>).colbert;
    t.is(params.multivector_config?.comparator, 'max_sim');
    t.is(params.hnsw_config?.m, 0);
    const points = [...fx.COLBERT_DENSE].map(([id, dense]) => ({ id, vector: { dense, colbert: fx.COLBERT_MULTI.get(id)! } }));
    t.is((await call('upsert', () => client.upsert(COLBERT, { wait: true, points }))).status, 'completed');
    const [got] = await call('retrieve', () => client.retrieve(COLBERT, { ids: [2], with_vector: ['colbert'] }));
    const stored = (got.vector as Record<string, number[][]>).colbert;
    const want = fx.normalised(fx.COLBERT_MULTI.get(2)!);
    t.is(stored.length, 3, 'a multivector comes back as its 3 vectors');
    want.forEach((v, i) => v.forEach((x, j) => near(t, stored[i]?.[j], x, `stored multivector [${i}][${j}] (cosine: normalised)`, 1e-5)));

    const scores = fx.colbertScores();
    // The multivector alone (no graph: an exact scan) finds 4 best.
    const alone = await call('query multivector', () => client.query(COLBERT, { query: fx.COLBERT_QUERY_MULTI, using: 'colbert', limit: 2 }));
    t.deepEqual(ids(alone.points), fx.top(scores.maxSim, 2));
    for (const p of alone.points) near(t, p.score, scores.maxSim.get(p.id as number)!, `MaxSim of ${p.id}`, 1e-5);
    // Re-rank: only the dense prefetch's candidates (4 is not among them), ordered by MaxSim.
    const candidates = fx.top(scores.dense, fx.COLBERT_CANDIDATES);
    const expected = fx.top(new Map(candidates.map((id) => [id, scores.maxSim.get(id)!])), 3);
    const r = await call('query re-rank', () =>
      client.query(COLBERT, {
        prefetch: { query: fx.COLBERT_QUERY_DENSE, using: 'dense', limit: fx.COLBERT_CANDIDATES },
        query: fx.COLBERT_QUERY_MULTI,
        using: 'colbert',
        limit: 3,
      }),
    );
    t.deepEqual(ids(r.points), expected);
    for (const p of r.points) near(t, p.score, scores.maxSim.get(p.id as number)!, `re-rank MaxSim of ${p.id}`, 1e-5);
  } finally {
    t.true(await call('deleteCollection', () => client.deleteCollection(COLBERT)));
  }
});

test.serial('search and searchBatch (the older API)', async (t) => {
  const res = await call('search', () =>
    client.search(PLAIN, { vector: [0, 0, 1, 0], limit: 2, with_payload: true, filter: { must: [{ key: 'count', range: { lte: 7 } }] } }),
  );
  t.deepEqual(ids(res), [3, 7]);
  near(t, res[0].score, 1, 'score of 3');
  near(t, res[1].score, 0.5, 'score of 7');
  t.deepEqual(res[0].payload, { city: 'Berlin', count: 3 });

  const named = await call('search named', () => client.search(NAMED, { vector: { name: 'image', vector: [0, 1, 0, 0] }, limit: 1 }));
  t.deepEqual(ids(named), [11]);

  const batch = await call('searchBatch', () =>
    client.searchBatch(PLAIN, {
      searches: [
        { vector: [1, 0, 0, 0], limit: 1 },
        { vector: [0, 0, 0, 1], limit: 2, with_payload: ['city'] },
      ],
    }),
  );
  t.is(batch.length, 2);
  t.deepEqual(ids(batch[0]), [1]);
  t.deepEqual(ids(batch[1]), [4, UUID_B_NORM]);
  t.deepEqual(batch[1][0].payload, { city: 'Paris' });
});

test.serial('recommend: positive and negative examples, by id and by vector', async (t) => {
  const res = await call('recommend', () => client.recommend(PLAIN, { positive: [1], negative: [2], limit: 2, with_payload: true }));
  // average_vector: 2*[1,0,0,0] - [0,1,0,0] = [2,-1,0,0]; the examples themselves are left out.
  t.deepEqual(ids(res), [5, UUID_A]);
  near(t, res[0].score, 1.7, 'score of 5');
  t.is(res[0].payload?.city, 'London');

  const byVector = await call('recommend vector', () => client.recommend(PLAIN, { positive: [[0, 0, 1, 0]], limit: 1 }));
  t.deepEqual(ids(byVector), [3]);

  const named = await call('recommend using', () => client.recommend(NAMED, { positive: [10], using: 'image', limit: 1 }));
  t.deepEqual(ids(named), [12]);
});

// -- deletes, aliases ---------------------------------------------------------------------------

test.serial('delete points by id and by filter', async (t) => {
  let r = await call('delete ids', () => client.delete(PLAIN, { points: [8, UUID_B], wait: true }));
  t.is(r.status, 'completed');
  r = await call('delete filter', () =>
    client.delete(PLAIN, { filter: { must: [{ key: 'city', match: { value: 'Paris' } }] }, wait: true }),
  );
  t.is(r.status, 'completed');
  const all = await call('scroll', () => client.scroll(PLAIN, { limit: 100, with_payload: false }));
  t.deepEqual(ids(all.points), [1, 2, 3, 5, 7]);
  t.deepEqual(await call('count', () => client.count(PLAIN, { exact: true })), { count: 5 });
});

test.serial('aliases: create, list, use, rename, delete', async (t) => {
  t.true(
    await call('updateCollectionAliases create', () =>
      client.updateCollectionAliases({ actions: [{ create_alias: { collection_name: PLAIN, alias_name: ALIAS } }] }),
    ),
  );
  t.deepEqual(await call('getCollectionAliases', () => client.getCollectionAliases(PLAIN)), {
    aliases: [{ alias_name: ALIAS, collection_name: PLAIN }],
  });
  t.deepEqual((await call('getCollectionAliases named', () => client.getCollectionAliases(NAMED))).aliases, []);
  t.deepEqual(await call('getAliases', () => client.getAliases()), { aliases: [{ alias_name: ALIAS, collection_name: PLAIN }] });

  // The alias reaches the collection for reads and writes.
  const viaAlias = await call('query via alias', () => client.query(ALIAS, { query: [1, 0, 0, 0], limit: 1 }));
  t.deepEqual(ids(viaAlias.points), [1]);
  t.is((await call('getCollection via alias', () => client.getCollection(ALIAS))).points_count, 5);

  t.true(
    await call('rename alias', () =>
      client.updateCollectionAliases({
        actions: [{ rename_alias: { old_alias_name: ALIAS, new_alias_name: `${ALIAS}2` } }],
      }),
    ),
  );
  t.deepEqual((await call('getAliases', () => client.getAliases())).aliases, [{ alias_name: `${ALIAS}2`, collection_name: PLAIN }]);
  t.true(
    await call('delete alias', () => client.updateCollectionAliases({ actions: [{ delete_alias: { alias_name: `${ALIAS}2` } }] })),
  );
  t.deepEqual((await call('getAliases', () => client.getAliases())).aliases, []);
});

// -- snapshots ----------------------------------------------------------------------------------

const SNAP = 'js_snap';
const TS_RE = '\\d{4}-\\d{2}-\\d{2}-\\d{2}-\\d{2}-\\d{2}';

async function snapPoints(name: string): Promise<string> {
  const res = await call(`scroll ${name}`, () => client.scroll(name, { limit: 100, with_payload: true, with_vector: true }));
  return JSON.stringify(res.points);
}

test.serial('snapshots: createSnapshot, listSnapshots, recoverSnapshot (priority snapshot, replica, checksum), deleteSnapshot', async (t) => {
  t.true(await call('createCollection', () => client.createCollection(SNAP, { vectors: { size: 4, distance: 'Dot' }, shard_number: 2 })));
  await call('createPayloadIndex', () => client.createPayloadIndex(SNAP, { field_name: 'g', field_schema: 'keyword', wait: true }));
  await call('upsert', () =>
    client.upsert(SNAP, { wait: true, points: Array.from({ length: 10 }, (_, i) => ({ id: i + 1, vector: [i, 1, 0, -i], payload: { g: i % 2 ? 'odd' : 'even', i } })) }),
  );
  const before = await snapPoints(SNAP);

  const d = await call('createSnapshot', () => client.createSnapshot(SNAP));
  t.truthy(d);
  t.regex(d!.name, new RegExp(`^${SNAP}-\\d+-${TS_RE}\\.snapshot$`));
  t.true(d!.size > 0);
  t.regex(d!.checksum ?? '', /^[0-9a-f]{64}$/);
  t.regex(d!.creation_time ?? '', /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$/);
  t.deepEqual(await call('listSnapshots', () => client.listSnapshots(SNAP)), [d!]);

  // wait=false: the server answers 202 {"status":"accepted"} as the reference does; this client
  // accepts only 200/201 and turns the 202 into an "Unexpected Response" error (it does the same
  // against the reference), though the snapshot is made. The snapshot appears shortly.
  const accepted = await t.throwsAsync(() => client.createSnapshot(SNAP, { wait: false }));
  t.regex(accepted?.message ?? '', /Unexpected Response: 202 \(Accepted\)[\s\S]*"status": "accepted"/);
  await waitFor('the wait=false snapshot listed', async () => (await client.listSnapshots(SNAP)).length >= 2).catch(() => undefined);
  const both = await call('listSnapshots', () => client.listSnapshots(SNAP));
  t.is(both.length, 2);

  // Change the collection, then recover it from the server's own download URL.
  await call('delete', () => client.delete(SNAP, { points: [1, 2, 3], wait: true }));
  const location = `${node.url}/collections/${SNAP}/snapshots/${d!.name}`;
  const wrong = await t.throwsAsync(() => client.recoverSnapshot(SNAP, { location, priority: 'snapshot', checksum: '0'.repeat(64) }));
  t.is((wrong as unknown as { status: number }).status, 400);
  t.is((await call('count', () => client.count(SNAP, { exact: true }))).count, 7, 'a checksum mismatch changes nothing');
  t.true(await call('recoverSnapshot', () => client.recoverSnapshot(SNAP, { location, priority: 'snapshot', checksum: d!.checksum })));
  t.is(await snapPoints(SNAP), before);
  const info = await call('getCollection', () => client.getCollection(SNAP));
  t.is(info.payload_schema.g?.data_type, 'keyword');
  t.is(info.config.params.shard_number, 2);

  // Into new collections: priority snapshot brings the data, replica only the configuration.
  t.true(await call('recoverSnapshot copy', () => client.recoverSnapshot(`${SNAP}_copy`, { location, priority: 'snapshot' })));
  t.is(await snapPoints(`${SNAP}_copy`), before);
  t.true(await call('recoverSnapshot replica', () => client.recoverSnapshot(`${SNAP}_replica`, { location, priority: 'replica' })));
  const replica = await call('getCollection replica', () => client.getCollection(`${SNAP}_replica`));
  t.is(replica.points_count, 0);
  t.deepEqual(replica.config.params.vectors, { size: 4, distance: 'Dot' });

  for (const s of both) t.true(await call('deleteSnapshot', () => client.deleteSnapshot(SNAP, s.name)));
  t.deepEqual(await call('listSnapshots', () => client.listSnapshots(SNAP)), []);
  const gone = await t.throwsAsync(() => client.deleteSnapshot(SNAP, d!.name));
  t.is((gone as unknown as { status: number }).status, 404);
  const missing = await t.throwsAsync(() => client.createSnapshot('js_nope'));
  t.is((missing as unknown as { status: number }).status, 404);
});

test.serial('snapshots: createShardSnapshot, listShardSnapshots, recoverShardFromSnapshot, deleteShardSnapshot', async (t) => {
  const before = await snapPoints(SNAP);
  const d = await call('createShardSnapshot', () => client.createShardSnapshot(SNAP, 1, { wait: true }));
  t.regex(d.name, new RegExp(`^${SNAP}-shard-1-${TS_RE}\\.snapshot$`));
  t.regex(d.checksum ?? '', /^[0-9a-f]{64}$/);
  t.deepEqual(await call('listShardSnapshots', () => client.listShardSnapshots(SNAP, 1)), [d]);
  t.deepEqual(await call('listShardSnapshots 0', () => client.listShardSnapshots(SNAP, 0)), []);

  // Change every point, then put shard 1 back: its points return, shard 0 keeps the change.
  await call('setPayload', () => client.setPayload(SNAP, { points: Array.from({ length: 10 }, (_, i) => i + 1), payload: { changed: true }, wait: true }));
  const location = `${node.url}/collections/${SNAP}/shards/1/snapshots/${d.name}`;
  t.true(await call('recoverShardFromSnapshot', () => client.recoverShardFromSnapshot(SNAP, 1, { location, priority: 'snapshot', checksum: d.checksum, wait: true })));
  const after = JSON.parse(await snapPoints(SNAP)) as Array<{ id: number; payload: Record<string, unknown> }>;
  const original = JSON.parse(before) as Array<{ id: number; payload: Record<string, unknown> }>;
  t.is(after.length, 10);
  const reverted = after.filter((p) => p.payload.changed === undefined).map((p) => p.id);
  const kept = after.filter((p) => p.payload.changed === true).map((p) => p.id);
  t.is(reverted.length + kept.length, 10);
  t.true(reverted.length > 0 && kept.length > 0, `one shard reverted (${reverted.join(',')}), the other kept the change (${kept.join(',')})`);
  for (const p of after.filter((x) => x.payload.changed === undefined)) t.deepEqual(p, original.find((o) => o.id === p.id));

  // A shard snapshot does not go into another shard.
  const wrong = await t.throwsAsync(() => client.recoverShardFromSnapshot(SNAP, 0, { location, priority: 'snapshot', wait: true }));
  t.is((wrong as unknown as { status: number }).status, 400);
  t.true(await call('deleteShardSnapshot', () => client.deleteShardSnapshot(SNAP, 1, d.name, { wait: true })));
  t.deepEqual(await call('listShardSnapshots', () => client.listShardSnapshots(SNAP, 1)), []);
  const unknown = await t.throwsAsync(() => client.listShardSnapshots(SNAP, 9));
  t.is((unknown as unknown as { status: number }).status, 404);
});

test.serial('snapshots: createFullSnapshot, listFullSnapshots, deleteFullSnapshot', async (t) => {
  const d = await call('createFullSnapshot', () => client.createFullSnapshot());
  t.regex(d.name, new RegExp(`^full-snapshot-${TS_RE}\\.snapshot$`));
  t.true(d.size > 0);
  t.regex(d.checksum ?? '', /^[0-9a-f]{64}$/);
  t.deepEqual(await call('listFullSnapshots', () => client.listFullSnapshots()), [d]);
  t.true(await call('deleteFullSnapshot', () => client.deleteFullSnapshot(d.name)));
  t.deepEqual(await call('listFullSnapshots', () => client.listFullSnapshots()), []);
  const gone = await t.throwsAsync(() => client.deleteFullSnapshot(d.name));
  t.is((gone as unknown as { status: number }).status, 404);

  for (const name of [SNAP, `${SNAP}_copy`, `${SNAP}_replica`]) t.true(await call(`deleteCollection ${name}`, () => client.deleteCollection(name)));
});

test.serial('deleteCollection removes both collections', async (t) => {
  t.true(await call('deleteCollection plain', () => client.deleteCollection(PLAIN)));
  t.true(await call('deleteCollection named', () => client.deleteCollection(NAMED)));
  t.false(await call('deleteCollection again', () => client.deleteCollection(PLAIN)));
  t.deepEqual((await call('getCollections', () => client.getCollections())).collections, []);
  t.deepEqual(await call('collectionExists', () => client.collectionExists(PLAIN)), { exists: false });
});
