/**
 * Facets and full-text indexes against a real bin/quiver, REST answers validated
 * against the reference's v1.18 OpenAPI schemas:
 *  - `POST /collections/{c}/facet` on keyword, integer, bool and uuid indexes of a
 *    collection with 3 shards, with and without filters and limits, against counting
 *    the points in the test; its errors (no index, bad limit); the gRPC Facet call
 *    gives the same hits;
 *  - a text index through REST: token matching with stopwords and the English stemmer,
 *    phrases, refusal of languages Quiver lacks, and the index in payload_schema.
 */

import * as fs from 'fs/promises';
import * as os from 'os';
import * as path from 'path';
import test, { type ExecutionContext } from 'ava';

import { ContractClient } from '../support/contract';
import { freePort } from './helpers';
import { QdrantGrpc } from '../grpc/client';
import { COUNT, INDEX, POINTS } from '../support/routes';
import { mulberry32 } from '../support/rng';

const FACET = '/collections/{collection_name}/facet';

let api: ContractClient;
let grpcClient: QdrantGrpc;
let snapshotsPath: string;

test.before(async () => {
  const port = await freePort();
  snapshotsPath = await fs.mkdtemp(path.join(os.tmpdir(), 'quiver-facet-fulltext-'));
  api = await ContractClient.start({ SERVICE__SERVICE__GRPC_PORT: String(port), SERVICE__STORAGE__SNAPSHOTS_PATH: snapshotsPath });
  grpcClient = new QdrantGrpc(`127.0.0.1:${port}`);
});

test.after.always(async () => {
  grpcClient?.close();
  await api?.stop();
  if (snapshotsPath) await fs.rm(snapshotsPath, { recursive: true, force: true });
});

type Payload = Record<string, unknown>;
const UUIDS = ['0b1c7f1e-33a4-4c55-9d1a-0a4b5c6d7e8f', '6f9619ff-8b86-4011-b42d-00c04fc964ff', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'];

function index(t: ExecutionContext, c: string, field_name: string, field_schema: unknown) {
  return api.ok(t, 'PUT', INDEX, { params: { collection_name: c }, query: { wait: 'true' }, body: { field_name, field_schema } });
}

/** The test's own count: distinct values of the key's top-level value (arrays expanded) of the matching points. */
function countFacet(points: Payload[], key: string, keep: (p: Payload) => boolean, accept: (v: unknown) => boolean): Map<unknown, number> {
  const out = new Map<unknown, number>();
  for (const p of points) {
    if (!keep(p)) continue;
    const raw = p[key];
    const vals = new Set((Array.isArray(raw) ? raw : [raw]).filter(accept));
    for (const v of vals) out.set(v, (out.get(v) ?? 0) + 1);
  }
  return out;
}

function expectedHits(counts: Map<unknown, number>, limit: number): Array<{ value: unknown; count: number }> {
  return [...counts]
    .map(([value, count]) => ({ value, count }))
    .sort((a, b) => b.count - a.count || (typeof a.value === 'number' ? (a.value as number) - (b.value as number) : typeof a.value === 'boolean' ? Number(a.value) - Number(b.value) : Buffer.compare(Buffer.from(String(a.value)), Buffer.from(String(b.value)))))
    .slice(0, limit);
}

test('facet: keyword, integer, bool and uuid counts over 3 shards match counting, with filters and limits; gRPC agrees', async (t) => {
  const C = 'facets';
  await api.ok(t, 'PUT', '/collections/{collection_name}', { params: { collection_name: C }, body: { vectors: { size: 2, distance: 'Dot' }, shard_number: 3 } });
  const rnd = mulberry32(1919);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const CITIES = ['Berlin', 'London', 'Paris', 'Rome', 'Zürich', 'athens'];
  const points: Payload[] = [];
  for (let i = 0; i < 400; i++) {
    const p: Payload = {};
    const r = rnd();
    if (r < 0.7) p.city = pick(CITIES);
    else if (r < 0.85) p.city = [pick(CITIES), pick(CITIES), pick(CITIES)];
    else if (r < 0.9) p.city = 5;
    p.n = rnd() < 0.8 ? Math.floor(rnd() * 12) - 3 : rnd() < 0.5 ? [1, 2, 2.5] : 'x';
    if (rnd() < 0.9) p.flag = rnd() < 0.3;
    if (rnd() < 0.6) p.u = pick(UUIDS);
    points.push(p);
  }
  for (let i = 0; i < points.length; i += 100) {
    await api.ok(t, 'PUT', POINTS, {
      params: { collection_name: C },
      query: { wait: 'true' },
      body: { points: points.slice(i, i + 100).map((payload, j) => ({ id: i + j + 1, vector: [1, 0.5], payload })) },
    });
  }
  await index(t, C, 'city', 'keyword');
  await index(t, C, 'n', 'integer');
  await index(t, C, 'flag', 'bool');
  await index(t, C, 'u', 'uuid');

  const isStr = (v: unknown) => typeof v === 'string';
  const cases: Array<{ key: string; accept: (v: unknown) => boolean; filter?: unknown; keep?: (p: Payload) => boolean; limit?: number; exact?: boolean }> = [
    { key: 'city', accept: isStr },
    { key: 'city', accept: isStr, limit: 3, exact: true },
    { key: 'city', accept: isStr, limit: 100, filter: { must: [{ key: 'flag', match: { value: true } }] }, keep: (p) => p.flag === true },
    { key: 'n', accept: (v) => Number.isInteger(v), limit: 20 },
    { key: 'n', accept: (v) => Number.isInteger(v), limit: 5, filter: { must: [{ key: 'n', range: { gte: 0 } }] }, keep: (p) => [p.n].flat().some((v) => typeof v === 'number' && v >= 0) },
    { key: 'flag', accept: (v) => typeof v === 'boolean' },
    { key: 'u', accept: isStr, filter: { must_not: [{ key: 'city', match: { any: ['Rome', 'Paris'] } }] }, keep: (p) => ![p.city].flat().some((v) => v === 'Rome' || v === 'Paris') },
    { key: 'city', accept: isStr, filter: { must: [{ key: 'city', match: { value: 'nowhere' } }] }, keep: () => false },
  ];
  for (const c of cases) {
    const body: Record<string, unknown> = { key: c.key };
    if (c.filter) body.filter = c.filter;
    if (c.limit !== undefined) body.limit = c.limit;
    if (c.exact !== undefined) body.exact = c.exact;
    const res = await api.ok(t, 'POST', FACET, { params: { collection_name: C }, body });
    const want = expectedHits(countFacet(points, c.key, c.keep ?? (() => true), c.accept), c.limit ?? 10);
    t.deepEqual(res.hits, want, JSON.stringify(body));

    const g = await grpcClient.call('Points', 'Facet', {
      collection_name: C,
      key: c.key,
      ...(c.limit !== undefined ? { limit: String(c.limit) } : {}),
      ...(c.exact !== undefined ? { exact: c.exact } : {}),
      ...(c.filter ? { filter: grpcFilter(c.filter) } : {}),
    });
    // an empty repeated field is absent on the wire
    const viaGrpc = ((g.hits ?? []) as Array<{ value: Record<string, unknown>; count: string }>).map((h) => ({
      value: h.value.string_value ?? (h.value.integer_value !== undefined ? Number(h.value.integer_value) : h.value.bool_value),
      count: Number(h.count),
    }));
    t.deepEqual(viaGrpc, want, `gRPC ${JSON.stringify(body)}`);
  }
  t.true(cases.length > 0);
});

/** The few filter shapes the facet cases use, in the proto's form. */
function grpcFilter(f: unknown): unknown {
  const cond = (c: Record<string, any>) => {
    const m = c.match ?? {};
    const field: Record<string, unknown> = { key: c.key };
    if (m.value !== undefined) field.match = typeof m.value === 'boolean' ? { boolean: m.value } : typeof m.value === 'number' ? { integer: String(m.value) } : { keyword: m.value };
    if (m.any !== undefined) field.match = { keywords: { strings: m.any } };
    if (c.range) field.range = c.range;
    return { field };
  };
  const o = f as Record<string, any[]>;
  const out: Record<string, unknown> = {};
  for (const k of ['must', 'must_not', 'should']) if (o[k]) out[k] = o[k].map(cond);
  return out;
}

test('facet errors: no suitable index is a 400, limit 0 a 422, a missing key a 400; nothing is created', async (t) => {
  const C = 'facet_err';
  await api.ok(t, 'PUT', '/collections/{collection_name}', { params: { collection_name: C }, body: { vectors: { size: 2, distance: 'Dot' } } });
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: C }, query: { wait: 'true' }, body: { points: [{ id: 1, vector: [1, 0], payload: { a: 'x', f: 1.5, t: 'some text' } }] } });
  await index(t, C, 'f', 'float');
  await index(t, C, 't', 'text');
  for (const key of ['a', 'f', 't']) {
    await api.error(t, 400, 'POST', FACET, { params: { collection_name: C }, body: { key } }, new RegExp(`^Bad request: Index required but not found for "${key}"`));
  }
  await api.error(t, 422, 'POST', FACET, { params: { collection_name: C }, body: { key: 'a', limit: 0 } });
  await api.error(t, 400, 'POST', FACET, { params: { collection_name: C }, body: { limit: 3 } });
  await api.error(t, 404, 'POST', FACET, { params: { collection_name: 'no_such' }, body: { key: 'a' } });
  const err = await grpcClient.fail('Points', 'Facet', { collection_name: C, key: 'a' });
  t.is(err.code, 3, 'INVALID_ARGUMENT');
});

test('text index through REST: tokens, stopwords and the English stemmer, phrases; unknown languages refused', async (t) => {
  const C = 'fulltext';
  await api.ok(t, 'PUT', '/collections/{collection_name}', { params: { collection_name: C }, body: { vectors: { size: 2, distance: 'Dot' } } });
  const docs = ['The quick brown fox jumps', 'Quick thinking, brown FOXES!', 'a slow brown dog', 'jumping foxes are quick', 'brown quick fox'];
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: C },
    query: { wait: 'true' },
    body: { points: docs.map((body, i) => ({ id: i + 1, vector: [1, 0], payload: { body } })) },
  });
  const count = async (match: unknown) =>
    (await api.ok(t, 'POST', COUNT, { params: { collection_name: C }, body: { exact: true, filter: { must: [{ key: 'body', match }] } } })).count;
  // without an index: substrings of the whole query
  t.is(await count({ text: 'brown fox' }), 1);
  await api.error(t, 400, 'PUT', INDEX, { params: { collection_name: C }, body: { field_name: 'body', field_schema: { type: 'text', stopwords: 'german' } } }, /stopwords for language "german" are not implemented/);
  await api.error(
    t,
    400,
    'PUT',
    INDEX,
    { params: { collection_name: C }, body: { field_name: 'body', field_schema: { type: 'text', stemmer: { type: 'snowball', language: 'french' } } } },
    /snowball stemmer for "french"/,
  );
  const info0 = await api.ok(t, 'GET', '/collections/{collection_name}', { params: { collection_name: C } });
  t.deepEqual(info0.payload_schema, {}, 'a refused index is not created');

  const schema = { type: 'text', tokenizer: 'word', stopwords: 'english', stemmer: { type: 'snowball', language: 'english' }, phrase_matching: true };
  await index(t, C, 'body', schema);
  const info = await api.ok(t, 'GET', '/collections/{collection_name}', { params: { collection_name: C } });
  t.is(info.payload_schema.body.data_type, 'text');
  t.is(info.payload_schema.body.points, 5);
  t.like(info.payload_schema.body.params, { tokenizer: 'word', stopwords: 'english', phrase_matching: true, stemmer: { type: 'snowball', language: 'english' } });

  t.is(await count({ text: 'brown fox' }), 3, 'fox and foxes share a stem; order and case do not matter');
  t.is(await count({ text: 'the quick fox' }), 4, '"the" is a stopword');
  t.is(await count({ text: 'jump quickly' }), 2, 'jumps / jumping -> jump, quickly -> quick');
  t.is(await count({ text_any: 'dog jump' }), 3);
  t.is(await count({ phrase: 'brown fox' }), 2, 'adjacent, in order');
  t.is(await count({ phrase: 'fox brown' }), 0);

  // A snapshot carries the index: recovered into a fresh collection, the same token answers.
  const snap = await api.ok(t, 'POST', '/collections/{collection_name}/snapshots', { params: { collection_name: C }, query: { wait: 'true' } });
  t.true(await api.ok(t, 'DELETE', '/collections/{collection_name}', { params: { collection_name: C } }));
  const location = `file://${path.join(snapshotsPath, C, snap.name)}`;
  t.true(await api.ok(t, 'PUT', '/collections/{collection_name}/snapshots/recover', { params: { collection_name: C }, body: { location, priority: 'snapshot' } }));
  const after = await api.ok(t, 'GET', '/collections/{collection_name}', { params: { collection_name: C } });
  t.deepEqual(after.payload_schema.body, info.payload_schema.body);
  t.is(await count({ text: 'brown fox' }), 3);
  t.is(await count({ phrase: 'brown fox' }), 2);
});
