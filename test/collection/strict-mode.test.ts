/**
 * Strict mode's checks (ts/collection/strict-mode.ts) over a fake collection: each limit
 * of the v1.18 list hit and not hit, with the reference's texts (a strict-mode refusal is
 * "Bad request: <what>. Help: <solution>", a size limit "Bad request: Max ... reached!",
 * a rate limit "Rate limiting exceeded: ..."); nothing is checked while it is disabled;
 * the filter measures against counts made by hand; the token bucket over a fake clock.
 * The same checks through the servers' APIs: test/api/strict-mode.test.ts.
 */

import test from 'ava';

import { QuiverError } from '../../ts/common/errors';
import { conditionsCount, maxConditionSize, mergeStrictMode, parseStrictMode, RateLimiter, StrictMode, unindexedKey, type StrictModeConfig } from '../../ts/collection/strict-mode';
import type { FieldSchema } from '../../ts/shard/field-schema';
import type { Filter } from '../../ts/shard/filter';
import type { ReplicaOperation } from '../../ts/collection/replica-operation';
import { normalizePointId } from '../../ts/shard/id-tracker';

function gate(config: StrictModeConfig, opts: { schema?: Record<string, FieldSchema>; sizes?: { points: number; vectorBytes: number; payloadBytes: number }; rss?: number } = {}): StrictMode {
  return new StrictMode({
    config: () => config,
    payloadSchema: () => opts.schema ?? {},
    sizes: () => opts.sizes ?? { points: 0, vectorBytes: 0, payloadBytes: 0 },
    memory: () => ({ rss: opts.rss ?? 0, total: 1000 }),
  });
}

function refusal(t: import('ava').ExecutionContext, fn: () => void, kind: string, message: string): void {
  const err = t.throws(fn);
  t.true(err instanceof QuiverError, String(err));
  t.is((err as QuiverError<string>).kind, kind);
  t.is(err?.message, message);
}

const upsert = (n: number): ReplicaOperation => ({ kind: 'upsert', points: Array.from({ length: n }, (_, i) => ({ id: normalizePointId(i), vectors: new Map([['', new Float32Array([1, 0])]]), payload: null })) });
const F = (key: string, match: object): object => ({ key, match });

test('filter measures: conditions counted through nested filters and clauses, the largest any/except/has_id', (t) => {
  const f = {
    must: [F('a', { value: 1 }), { should: [F('b', { any: ['x', 'y', 'z'] }), { has_id: [1, 2, 3, 4] }] }],
    must_not: [{ nested: { key: 'n', filter: { must: [F('c', { except: [1, 2] }), F('d', { value: true })] } } }],
    min_should: { conditions: [F('e', { value: 'q' })], min_count: 1 },
  } as unknown as Filter;
  // a, b, has_id, c, d, e: six leaves.
  t.is(conditionsCount(f), 6);
  t.is(maxConditionSize(f), 4);
  t.is(conditionsCount({}), 0);
});

test('unindexed keys: the first key without an index of a serving type, with the types that would serve it', (t) => {
  const schema: Record<string, FieldSchema> = { city: { type: 'keyword' }, n: { type: 'integer' }, 'arr[].x': { type: 'float' } };
  t.is(unindexedKey({ must: [F('city', { value: 'Oslo' }) as never] }, schema), null);
  t.deepEqual(unindexedKey({ must: [F('city', { value: 3 }) as never] }, schema), { key: 'city', types: ['integer'] });
  t.deepEqual(unindexedKey({ should: [{ key: 'price', range: { gt: 1 } } as never] }, schema), { key: 'price', types: ['float', 'integer'] });
  t.deepEqual(unindexedKey({ must: [F('t', { text: 'hi' }) as never] }, schema), { key: 't', types: ['text'] });
  t.is(unindexedKey({ must: [{ nested: { key: 'arr', filter: { must: [{ key: 'x', range: { lt: 3 } }] } } } as never] }, schema), null);
  t.deepEqual(unindexedKey({ must: [{ nested: { key: 'arr', filter: { must: [F('y', { value: true })] } } } as never] }, schema), { key: 'arr[].y', types: ['bool'] });
  t.is(unindexedKey({ must: [{ has_id: [1] } as never] }, schema), null, 'has_id needs no index');
  t.deepEqual(unindexedKey({ must: [{ is_empty: { key: 'z' } } as never] }, schema)?.types, ['bool', 'datetime', 'float', 'geo', 'integer', 'keyword', 'text', 'uuid']);
});

test('parse and merge: the v1.18 fields, bounds, unknown fields refused; an update replaces only what it sets', (t) => {
  const c = parseStrictMode({ enabled: true, max_query_limit: 3, search_max_oversampling: 2.5, sparse_config: { s: { max_length: 4 } }, max_timeout: null });
  t.deepEqual(c, { enabled: true, max_query_limit: 3, search_max_oversampling: 2.5, sparse_config: { s: { max_length: 4 } } });
  t.throws(() => parseStrictMode({ max_query_limit: 0 }), { message: /must be 1 or larger/ });
  t.throws(() => parseStrictMode({ write_rate_limit: -1 }), { message: /expected an unsigned integer/ });
  t.throws(() => parseStrictMode({ enabled: 'yes' }), { message: /expected a boolean/ });
  t.throws(() => parseStrictMode({ nope: 1 }), { message: /unknown field `nope`/ });
  t.deepEqual(mergeStrictMode(c, parseStrictMode({ max_query_limit: 9, enabled: false })), { enabled: false, max_query_limit: 9, search_max_oversampling: 2.5, sparse_config: { s: { max_length: 4 } } });
});

test('disabled (or enabled unset): no limit is checked', (t) => {
  for (const enabled of [false, undefined]) {
    const g = gate({ enabled, max_query_limit: 1, max_timeout: 1, upsert_max_batchsize: 1, search_allow_exact: false, max_points_count: 1 }, { sizes: { points: 5, vectorBytes: 0, payloadBytes: 0 } });
    t.notThrows(() => g.read({ limit: 100, exact: true }, 100));
    t.notThrows(() => g.write(upsert(10), 100));
    t.notThrows(() => g.timeout(100));
  }
});

test('read limits: limit, exact, hnsw_ef, oversampling, timeout, search batch size; each at the limit passes', (t) => {
  const g = gate({ enabled: true, max_query_limit: 5, search_allow_exact: false, search_max_hnsw_ef: 64, search_max_oversampling: 2, max_timeout: 10, search_max_batchsize: 3 });
  t.notThrows(() => g.read({ limit: 5, exact: false, hnswEf: 64, oversampling: 2 }, 10));
  refusal(t, () => g.read({ limit: 6 }, null), 'bad_request', 'Bad request: Limit exceeded 6 > 5 for "limit". Help: Reduce the "limit" parameter to or below 5.');
  refusal(t, () => g.read({ exact: true }, null), 'bad_request', 'Bad request: Exact search disabled!. Help: Set exact=false.');
  refusal(t, () => g.read({ hnswEf: 65 }, null), 'bad_request', 'Bad request: Limit exceeded 65 > 64 for "hnsw_ef". Help: Reduce the "hnsw_ef" parameter to or below 64.');
  refusal(t, () => g.read({ oversampling: 2.5 }, null), 'bad_request', 'Bad request: Limit exceeded 2.5 > 2 for "oversampling". Help: Reduce the "oversampling" parameter to or below 2.');
  refusal(t, () => g.read({}, 11), 'bad_request', 'Bad request: Limit exceeded 11 > 10 for "timeout". Help: Reduce the "timeout" parameter to or below 10.');
  refusal(t, () => g.timeout(11), 'bad_request', 'Bad request: Limit exceeded 11 > 10 for "timeout". Help: Reduce the "timeout" parameter to or below 10.');
  t.notThrows(() => g.searchBatch(3));
  refusal(t, () => g.searchBatch(4), 'bad_request', 'Bad request: Limit exceeded 4 > 3 for "search batch size". Help: Reduce the "search batch size" parameter to or below 3.');
});

test('filters: unindexed fields refused for reads and filtered writes by their own switch; condition count and size', (t) => {
  const schema: Record<string, FieldSchema> = { city: { type: 'keyword' } };
  const g = gate({ enabled: true, unindexed_filtering_retrieve: false, filter_max_conditions: 2, condition_max_size: 3 }, { schema });
  const unindexed = { must: [F('color', { value: 'red' })] } as unknown as Filter;
  refusal(t, () => g.read({ filter: unindexed }, null), 'bad_request', 'Bad request: Index required but not found for "color" of one of the following types: [keyword]. Help: Create an index for this key or use a different filter.');
  t.notThrows(() => g.read({ filter: { must: [F('city', { value: 'x' })] } as unknown as Filter }, null));
  // Writes follow unindexed_filtering_update (unset here): allowed.
  t.notThrows(() => g.write({ kind: 'delete', select: { ids: null, filter: unindexed } }, null));
  const gw = gate({ enabled: true, unindexed_filtering_update: false }, { schema });
  refusal(t, () => gw.write({ kind: 'clear_payload', select: { ids: null, filter: unindexed } }, null), 'bad_request', 'Bad request: Index required but not found for "color" of one of the following types: [keyword]. Help: Create an index for this key or use a different filter.');
  t.notThrows(() => gw.read({ filter: unindexed }, null));

  const three = { must: [F('city', { value: 'a' }), F('city', { value: 'b' }), F('city', { value: 'c' })] } as unknown as Filter;
  refusal(t, () => g.read({ filter: three }, null), 'bad_request', 'Bad request: Filter condition limit reached (3 > 2). Help: Reduce the amount of conditions of your filter.');
  t.notThrows(() => g.read({ filter: { must: [F('city', { any: ['a', 'b', 'c'] })] } as unknown as Filter }, null));
  refusal(t, () => g.read({ filter: { must: [F('city', { any: ['a', 'b', 'c', 'd'] })] } as unknown as Filter }, null), 'bad_request', 'Bad request: Condition size limit reached (4 > 3). Help: Reduce the size of your condition.');
});

test('writes: batch size, points count, vector and payload bytes, resident memory; deletes pass the size limits', (t) => {
  const g = gate({ enabled: true, upsert_max_batchsize: 2 });
  t.notThrows(() => g.write(upsert(2), null));
  refusal(t, () => g.write(upsert(3), null), 'bad_request', 'Bad request: Limit exceeded 3 > 2 for "upsert limit". Help: Reduce the "upsert limit" parameter to or below 2.');
  refusal(t, () => g.write({ kind: 'update_vectors', points: (upsert(3) as unknown as { points: never[] }).points }, null), 'bad_request', 'Bad request: Limit exceeded 3 > 2 for "update limit". Help: Reduce the "update limit" parameter to or below 2.');

  const sized = (points: number, vectorBytes: number, payloadBytes: number) => gate({ enabled: true, max_points_count: 10, max_collection_vector_size_bytes: 2 * 1024 * 1024, max_collection_payload_size_bytes: 1024 * 1024 }, { sizes: { points, vectorBytes, payloadBytes } });
  t.notThrows(() => sized(9, 2 * 1024 * 1024 - 1, 1024 * 1024 - 1).write(upsert(1), null));
  refusal(t, () => sized(10, 0, 0).write(upsert(1), null), 'bad_request', 'Bad request: Max points count limit of 10 reached!');
  refusal(t, () => sized(0, 2 * 1024 * 1024, 0).write(upsert(1), null), 'bad_request', 'Bad request: Max vector storage size limit of 2MB reached!');
  refusal(t, () => sized(0, 0, 1024 * 1024).write(upsert(1), null), 'bad_request', 'Bad request: Max payload storage size limit of 1MB reached!');
  t.notThrows(() => sized(10, 2 * 1024 * 1024, 1024 * 1024).write({ kind: 'delete', select: { ids: [normalizePointId(1)], filter: null } }, null), 'a delete frees room: never refused by size');
  refusal(t, () => gate({ enabled: true, max_collection_vector_size_bytes: 1500 }, { sizes: { points: 0, vectorBytes: 1500, payloadBytes: 0 } }).write(upsert(1), null), 'bad_request', 'Bad request: Max vector storage size limit of 0.0014305115MB reached!');

  // Resident memory: 600 of 1000 bytes is 60%.
  t.notThrows(() => gate({ enabled: true, max_resident_memory_percent: 61 }, { rss: 600 }).write(upsert(1), null));
  refusal(t, () => gate({ enabled: true, max_resident_memory_percent: 60 }, { rss: 600 }).write(upsert(1), null), 'bad_request', 'Bad request: Resident memory usage is at 60% of total memory, exceeding the configured limit of 60%. Help: Reduce memory usage (e.g. delete points or drop collections), or raise `max_resident_memory_percent` in the strict mode config of this collection.');
  t.notThrows(() => gate({ enabled: true, max_resident_memory_percent: 60 }, { rss: 600 }).write({ kind: 'delete', select: { ids: [normalizePointId(1)], filter: null } }, null), 'deletes still run');
});

test('payload index count: a new index past the limit is refused, an existing field may be indexed again', (t) => {
  const g = gate({ enabled: true, max_payload_index_count: 1 }, { schema: { a: { type: 'keyword' } } });
  t.notThrows(() => g.payloadIndex('a'));
  refusal(t, () => g.payloadIndex('b'), 'bad_request', 'Bad request: Collection already has the maximum number of payload indices (1). Help: Please delete an existing index before creating a new one.');
  t.notThrows(() => gate({ enabled: true, max_payload_index_count: 2 }, { schema: { a: { type: 'keyword' } } }).payloadIndex('b'));
});

test('rate limits: a full bucket of the per-minute count, refilled evenly; the reference texts and Retry-After', (t) => {
  let now = 0;
  const r = new RateLimiter(60, () => now);
  r.consume(59, 'Read');
  r.consume(1, 'Read');
  const err = t.throws(() => r.consume(2, 'Read'));
  t.is(err?.message, 'Rate limiting exceeded: Read rate limit exceeded: Operation requires 2 tokens but only 0.0 were available. Retry after 2s');
  t.is((err as unknown as { retryAfter: number }).retryAfter, 2);
  now = 2000; // one token a second
  t.notThrows(() => r.consume(2, 'Read'));
  t.throws(() => r.consume(61, 'Write'), { message: 'Rate limiting exceeded: Write rate limit exceeded, request larger than rate limiter capacity, please try to split your request' });

  // Through the gate: a write of n points costs n; a read 1 plus its filter's conditions.
  const g = gate({ enabled: true, write_rate_limit: 3, read_rate_limit: 2 });
  g.write(upsert(3), null);
  const w = t.throws(() => g.write(upsert(1), null));
  t.is((w as QuiverError<string>).kind, 'rate_limited');
  t.regex(w!.message, /^Rate limiting exceeded: Write rate limit exceeded: Operation requires 1 tokens but only 0\.0 were available\. Retry after 20s$/);
  g.read({ filter: { must: [F('a', { value: 1 })] } as unknown as Filter }, null);
  t.throws(() => g.read({}, null), { message: /^Rate limiting exceeded: Read rate limit exceeded/ });
});
