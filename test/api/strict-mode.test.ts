/**
 * Strict mode through a real bin/quiver (REST and gRPC, a storage directory that
 * outlives a restart): each limit of a collection's `strict_mode_config` hit (the
 * reference's status and text: 400 "Bad request: ...", 429 "Rate limiting exceeded: ..."
 * with Retry-After; INVALID_ARGUMENT / RESOURCE_EXHAUSTED with the same text over gRPC)
 * and not hit (the answer then checked against a computation in the test); a refused
 * write changes nothing; the configuration survives a restart and a snapshot recovery.
 * The checks one by one, with every text: test/collection/strict-mode.test.ts.
 *
 * Tests are serial and share the server.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import test, { type ExecutionContext } from 'ava';

import { freePort, startServer, type Server } from '../crash/server';
import { spec } from '../support/contract';
import { waitFor } from '../support/wait';
import { codeName, QdrantGrpc } from '../grpc/client';

let dir: string;
let server: Server;
let g: QdrantGrpc;

async function start(): Promise<void> {
  const grpcPort = await freePort();
  server = await startServer(dir, { SERVICE__SERVICE__GRPC_PORT: String(grpcPort), SERVICE__LOG_LEVEL: 'INFO' });
  g = new QdrantGrpc(`127.0.0.1:${grpcPort}`);
}

async function stop(): Promise<void> {
  g?.close();
  await server?.stop('SIGTERM');
}

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-strict-'));
  await start();
});

test.after.always(async () => {
  await stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

interface Answer {
  status: number;
  body: any;
  headers: Headers;
}

async function rest(method: string, p: string, body?: unknown): Promise<Answer> {
  const res = await fetch(`${server.url}${p}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === '' ? null : JSON.parse(text), headers: res.headers };
}

async function ok(t: ExecutionContext, method: string, p: string, body?: unknown): Promise<any> {
  const r = await rest(method, p, body);
  if (r.status !== 200) t.fail(`${method} ${p}: ${r.status} ${JSON.stringify(r.body)}`);
  return r.body.result;
}

async function refused(t: ExecutionContext, method: string, p: string, body: unknown, status: number, message: string | RegExp): Promise<Answer> {
  const r = await rest(method, p, body);
  t.is(r.status, status, `${method} ${p} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
  if (typeof message === 'string') t.is(r.body?.status?.error, message);
  else t.regex(String(r.body?.status?.error), message);
  return r;
}

const help = (what: string, name: string, limit: number) => `Bad request: Limit exceeded ${what} > ${limit} for "${name}". Help: Reduce the "${name}" parameter to or below ${limit}.`;

// Ten points on a line of directions; payload color (indexed later) and n (never indexed).
const POINTS = Array.from({ length: 10 }, (_, i) => ({ id: i + 1, vector: [Math.cos(i / 5), Math.sin(i / 5)], payload: { color: i % 2 === 0 ? 'red' : 'blue', n: i } }));
const dot = (a: number[], b: number[]) => a[0] * b[0] + a[1] * b[1];

const STRICT = {
  enabled: true,
  max_query_limit: 3,
  max_timeout: 5,
  unindexed_filtering_retrieve: false,
  unindexed_filtering_update: false,
  search_max_hnsw_ef: 16,
  search_allow_exact: false,
  search_max_oversampling: 2,
  upsert_max_batchsize: 5,
  search_max_batchsize: 2,
  filter_max_conditions: 2,
  condition_max_size: 2,
  max_payload_index_count: 1,
};

test.serial('query-side limits: each hit is a 400 with the reference text (INVALID_ARGUMENT over gRPC), each not hit answers as computed', async (t) => {
  await ok(t, 'PUT', '/collections/sm', { vectors: { size: 2, distance: 'Dot' }, strict_mode_config: STRICT });
  await ok(t, 'PUT', '/collections/sm/points?wait=true', { points: POINTS.slice(0, 5) });
  await ok(t, 'PUT', '/collections/sm/points?wait=true', { points: POINTS.slice(5) });

  const q = [0.6, 0.8];
  const expected = [...POINTS].sort((a, b) => dot(b.vector, q) - dot(a.vector, q)).slice(0, 3).map((p) => p.id);
  const got = await ok(t, 'POST', '/collections/sm/points/query', { query: q, limit: 3, params: { hnsw_ef: 16 } });
  t.deepEqual(got.points.map((p: { id: number }) => p.id), expected, 'at the limit: the top 3 by dot product');

  const r = await refused(t, 'POST', '/collections/sm/points/query', { query: q, limit: 4 }, 400, help('4', 'limit', 3));
  t.deepEqual(spec().validate('POST', '/collections/{collection_name}/points/query', r.status, r.body), [], 'the refusal against the reference schema');
  const err = await g.fail('Points', 'Query', { collection_name: 'sm', query: { nearest: { dense: { data: q } } }, limit: '4' });
  t.is(codeName(err.code), 'INVALID_ARGUMENT');
  t.is(err.details, r.body.status.error, 'the same text over gRPC');

  await refused(t, 'POST', '/collections/sm/points/search', { vector: q, limit: 2, params: { exact: true } }, 400, 'Bad request: Exact search disabled!. Help: Set exact=false.');
  await refused(t, 'POST', '/collections/sm/points/search', { vector: q, limit: 2, params: { hnsw_ef: 17 } }, 400, help('17', 'hnsw_ef', 16));
  await refused(t, 'POST', '/collections/sm/points/query', { query: q, limit: 2, params: { quantization: { oversampling: 2.5 } } }, 400, help('2.5', 'oversampling', 2));
  await refused(t, 'POST', '/collections/sm/points/query?timeout=6', { query: q, limit: 2 }, 400, help('6', 'timeout', 5));
  await ok(t, 'POST', '/collections/sm/points/query?timeout=5', { query: q, limit: 2 });
  await refused(t, 'POST', '/collections/sm/points/scroll', { limit: 4 }, 400, help('4', 'limit', 3));
  await refused(t, 'POST', '/collections/sm/points/search/batch', { searches: [1, 2, 3].map(() => ({ vector: q, limit: 1 })) }, 400, help('3', 'search batch size', 2));
  t.is((await ok(t, 'POST', '/collections/sm/points/search/batch', { searches: [1, 2].map(() => ({ vector: q, limit: 1 })) })).length, 2);

  // Counts are exact unless asked otherwise, as the reference's: refused while exact search is.
  await refused(t, 'POST', '/collections/sm/points/count', {}, 400, 'Bad request: Exact search disabled!. Help: Set exact=false.');
  t.is((await ok(t, 'POST', '/collections/sm/points/count', { exact: false })).count, 10);
});

test.serial('filters: unindexed fields refused until indexed, condition count and size; payload index count', async (t) => {
  const red = { must: [{ key: 'color', match: { value: 'red' } }] };
  const unindexed = 'Bad request: Index required but not found for "color" of one of the following types: [keyword]. Help: Create an index for this key or use a different filter.';
  await refused(t, 'POST', '/collections/sm/points/scroll', { filter: red, limit: 3 }, 400, unindexed);
  await refused(t, 'POST', '/collections/sm/points/delete?wait=true', { filter: red }, 400, unindexed);
  await ok(t, 'PUT', '/collections/sm/index?wait=true', { field_name: 'color', field_schema: 'keyword' });
  const page = await ok(t, 'POST', '/collections/sm/points/scroll', { filter: red, limit: 3 });
  t.deepEqual(page.points.map((p: { id: number }) => p.id), POINTS.filter((p) => p.payload.color === 'red').slice(0, 3).map((p) => p.id));
  await refused(t, 'PUT', '/collections/sm/index?wait=true', { field_name: 'n', field_schema: 'integer' }, 400, 'Bad request: Collection already has the maximum number of payload indices (1). Help: Please delete an existing index before creating a new one.');
  t.false('n' in (await ok(t, 'GET', '/collections/sm')).payload_schema, 'the refused index was not made');

  const three = { must: [{ key: 'color', match: { value: 'red' } }, { key: 'color', match: { value: 'blue' } }, { key: 'color', match: { value: 'x' } }] };
  await refused(t, 'POST', '/collections/sm/points/count', { filter: three, exact: false }, 400, 'Bad request: Filter condition limit reached (3 > 2). Help: Reduce the amount of conditions of your filter.');
  await refused(t, 'POST', '/collections/sm/points/count', { filter: { must: [{ key: 'color', match: { any: ['a', 'b', 'c'] } }] }, exact: false }, 400, 'Bad request: Condition size limit reached (3 > 2). Help: Reduce the size of your condition.');
  t.is((await ok(t, 'POST', '/collections/sm/points/count', { filter: { must: [{ key: 'color', match: { any: ['red', 'x'] } }] }, exact: false })).count, 5);
  // A filtered write on an unindexed field: refused, nothing deleted.
  await refused(t, 'POST', '/collections/sm/points/delete?wait=true', { filter: { must: [{ key: 'n', match: { value: 1 } }] } }, 400, /^Bad request: Index required but not found for "n" of one of the following types: \[integer\]/);
  t.is((await ok(t, 'POST', '/collections/sm/points/count', { exact: false })).count, 10);
});

test.serial('writes: batch size refused with nothing written; points count limit; disabling lifts every limit', async (t) => {
  const six = Array.from({ length: 6 }, (_, i) => ({ id: 100 + i, vector: [1, 0] }));
  await refused(t, 'PUT', '/collections/sm/points?wait=true', { points: six }, 400, help('6', 'upsert limit', 5));
  await refused(t, 'PUT', '/collections/sm/points/vectors?wait=true', { points: POINTS.slice(0, 6).map((p) => ({ id: p.id, vector: [1, 0] })) }, 400, help('6', 'update limit', 5));
  await refused(t, 'PUT', '/collections/sm/points?wait=true&timeout=9', { points: six.slice(0, 1) }, 400, help('9', 'timeout', 5));
  t.is((await ok(t, 'POST', '/collections/sm/points/count', { exact: false })).count, 10, 'nothing was written');

  await ok(t, 'PUT', '/collections/cap', { vectors: { size: 2, distance: 'Dot' }, strict_mode_config: { enabled: true, max_points_count: 3 } });
  await ok(t, 'PUT', '/collections/cap/points?wait=true', { points: POINTS.slice(0, 3) });
  // The count is an estimate refreshed now and then (as the reference's): wait for it to see the three points.
  await waitFor('the points count limit to apply', async () => (await rest('PUT', '/collections/cap/points?wait=true', { points: POINTS.slice(0, 1) })).status === 400);
  await refused(t, 'PUT', '/collections/cap/points?wait=true', { points: POINTS.slice(3, 4) }, 400, 'Bad request: Max points count limit of 3 reached!');
  t.is((await ok(t, 'POST', '/collections/cap/points/count', {})).count, 3);
  await ok(t, 'POST', '/collections/cap/points/delete?wait=true', { points: [1] });

  await ok(t, 'PATCH', '/collections/sm', { strict_mode_config: { enabled: false } });
  t.is((await ok(t, 'POST', '/collections/sm/points/query', { query: [1, 0], limit: 10, params: { exact: true } })).points.length, 10);
  t.deepEqual((await ok(t, 'GET', '/collections/sm')).config.strict_mode_config, { ...STRICT, enabled: false });
  await ok(t, 'PATCH', '/collections/sm', { strict_mode_config: { enabled: true } });
  await refused(t, 'POST', '/collections/sm/points/query', { query: [1, 0], limit: 4 }, 400, help('4', 'limit', 3));
});

test.serial('rate limits: 429 with the reference text and Retry-After over REST, RESOURCE_EXHAUSTED over gRPC', async (t) => {
  await ok(t, 'PUT', '/collections/rl', { vectors: { size: 2, distance: 'Dot' }, strict_mode_config: { enabled: true, write_rate_limit: 3, read_rate_limit: 2 } });
  await ok(t, 'PUT', '/collections/rl/points?wait=true', { points: POINTS.slice(0, 2) });
  // Two points cost two of the three write tokens a minute; two more do not fit.
  const w = await refused(t, 'PUT', '/collections/rl/points?wait=true', { points: POINTS.slice(2, 4) }, 429, /^Rate limiting exceeded: Write rate limit exceeded: Operation requires 2 tokens but only 1\.\d were available\. Retry after \d+s$/);
  t.regex(w.headers.get('retry-after') ?? '', /^\d+$/);
  await refused(t, 'PUT', '/collections/rl/points?wait=true', { points: POINTS.slice(0, 4) }, 429, 'Rate limiting exceeded: Write rate limit exceeded, request larger than rate limiter capacity, please try to split your request');

  await ok(t, 'POST', '/collections/rl/points', { ids: [1] });
  await ok(t, 'POST', '/collections/rl/points/query', { query: [1, 0], limit: 1 });
  await refused(t, 'POST', '/collections/rl/points/query', { query: [1, 0], limit: 1 }, 429, /^Rate limiting exceeded: Read rate limit exceeded: Operation requires 1 tokens but only 0\.\d were available/);
  const err = await g.fail('Points', 'Get', { collection_name: 'rl', ids: [{ num: '1' }] });
  t.is(codeName(err.code), 'RESOURCE_EXHAUSTED');
  t.regex(err.details, /^Rate limiting exceeded: Read rate limit exceeded/);
  t.is((await ok(t, 'GET', '/collections/rl')).points_count, 2, 'the refused writes wrote nothing');
});

test.serial('the configuration survives a restart and a snapshot recovery, and is enforced after both', async (t) => {
  const before = (await ok(t, 'GET', '/collections/sm')).config.strict_mode_config;
  await stop();
  await start();
  t.deepEqual((await ok(t, 'GET', '/collections/sm')).config.strict_mode_config, before);
  await refused(t, 'POST', '/collections/sm/points/query', { query: [1, 0], limit: 4 }, 400, help('4', 'limit', 3));

  const snap = await ok(t, 'POST', '/collections/sm/snapshots?wait=true');
  const location = `file://${path.join(dir, 'snapshots', 'sm', snap.name)}`;
  await ok(t, 'PUT', '/collections/sm_copy/snapshots/recover', { location });
  t.deepEqual((await ok(t, 'GET', '/collections/sm_copy')).config.strict_mode_config, before);
  await refused(t, 'POST', '/collections/sm_copy/points/query', { query: [1, 0], limit: 4 }, 400, help('4', 'limit', 3));
});
