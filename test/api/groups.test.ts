/**
 * Grouped queries (`/points/{search,recommend,query}/groups`) against a real bin/quiver,
 * every answer validated against the reference's v1.18 schemas (GroupsResult):
 *  - against the test's own brute-force grouping (test/support/groups.ts) of the exact
 *    ranking of every candidate, over 3 shards, random payloads with strings, integers,
 *    arrays (a point in several groups), values that put a point in no group (floats,
 *    bools, null, mixed arrays), nested keys (`meta.tag`, `meta[].tag`), filters, score
 *    thresholds, both score orders (Dot, Euclid), group sizes larger than most groups;
 *  - payload and vectors of the hits as asked; a hybrid query grouped;
 *  - `with_lookup` (a name, or with its own payload and vector selectors): group values
 *    that are point ids get the point, others none;
 *  - refusals with the reference's statuses, and strict mode (limit = groups × group
 *    size, the key's index);
 *  - the gRPC SearchGroups, RecommendGroups and QueryGroups give REST's groups.
 */

import test, { type ExecutionContext } from 'ava';

import { ContractClient } from '../support/contract';
import { bruteForceGroups, groupsShape, groupValues, type RankedPoint } from '../support/groups';
import { mulberry32 } from '../support/rng';
import { QdrantGrpc } from '../grpc/client';
import { freePort } from './helpers';

const COLLECTION = '/collections/{collection_name}';
const POINTS = '/collections/{collection_name}/points';
const QUERY = '/collections/{collection_name}/points/query';
const RECOMMEND = '/collections/{collection_name}/points/recommend';
const SEARCH_GROUPS = '/collections/{collection_name}/points/search/groups';
const RECOMMEND_GROUPS = '/collections/{collection_name}/points/recommend/groups';
const QUERY_GROUPS = '/collections/{collection_name}/points/query/groups';
const INDEX = '/collections/{collection_name}/index';

const C = 'grp';
const DIM = 4;
type Payload = Record<string, unknown>;

let api: ContractClient;
let grpcClient: QdrantGrpc;
const payloads = new Map<string, Payload>();
const ids: Array<number | string> = [];
let rnd = mulberry32(2718);

function vec(): number[] {
  return Array.from({ length: DIM }, () => Math.round((rnd() * 2 - 1) * 1000) / 1000);
}

function uuid(): string {
  const h = () => Math.floor(rnd() * 16).toString(16);
  const part = (n: number) => Array.from({ length: n }, h).join('');
  return `${part(8)}-${part(4)}-4${part(3)}-a${part(3)}-${part(12)}`;
}

test.before(async () => {
  const port = await freePort();
  api = await ContractClient.start({ SERVICE__SERVICE__GRPC_PORT: String(port) });
  grpcClient = new QdrantGrpc(`127.0.0.1:${port}`);
  const t = { deepEqual() {}, is() {}, fail(m: string) { throw new Error(m); } } as unknown as ExecutionContext;
  await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: C }, body: { vectors: { dot: { size: DIM, distance: 'Dot' }, l2: { size: DIM, distance: 'Euclid' } }, shard_number: 3 } });
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const G = ['a', 'b', 'c', 'd', 'e', 'f', -3, 0, 1, 2, 5, 8];
  const TAGS = ['x', 'y', 'z', 1, 2];
  const points = [];
  for (let i = 1; i <= 240; i++) {
    const id = i % 10 === 0 ? uuid() : i;
    const p: Payload = { n: Math.floor(rnd() * 10) };
    const r = rnd();
    if (r < 0.45) p.g = pick(G.slice(0, 6));
    else if (r < 0.65) p.g = pick(G.slice(6));
    else if (r < 0.8) p.g = Array.from({ length: 1 + Math.floor(rnd() * 3) }, () => pick(G));
    else if (r < 0.84) p.g = 1.5;
    else if (r < 0.87) p.g = true;
    else if (r < 0.9) p.g = null;
    else if (r < 0.93) p.g = [];
    else if (r < 0.95) p.g = ['a', 2.5];
    const m = rnd();
    if (m < 0.5) p.meta = { tag: pick(TAGS) };
    else if (m < 0.8) p.meta = [{ tag: pick(TAGS) }, { tag: pick(TAGS) }];
    payloads.set(String(id), p);
    ids.push(id);
    points.push({ id, vector: { dot: vec(), l2: vec() }, payload: p });
  }
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: C }, query: { wait: 'true' }, body: { points } });
});

test.after.always(async () => {
  grpcClient?.close();
  await api?.stop();
});

/** The exact ranking of every candidate of an ungrouped request (the brute force's input). */
async function ranking(t: ExecutionContext, pattern: string, body: Payload): Promise<RankedPoint[]> {
  const res = await api.ok(t, 'POST', pattern, { params: { collection_name: C }, body: { ...body, limit: 1000, with_payload: true, params: { exact: true } } });
  return (pattern === QUERY ? res.points : res) as RankedPoint[];
}

interface Case {
  name: string;
  pattern: string;
  ungrouped: string;
  body: Payload;
  key: string;
  limit: number;
  size: number;
}

function cases(): Case[] {
  rnd = mulberry32(31);
  const q = vec();
  return [
    { name: 'search, Dot, strings/ints/arrays', pattern: SEARCH_GROUPS, ungrouped: QUERY, body: { vector: { name: 'dot', vector: q } }, key: 'g', limit: 4, size: 3 },
    { name: 'search, Euclid, more groups asked than there are', pattern: SEARCH_GROUPS, ungrouped: QUERY, body: { vector: { name: 'l2', vector: q } }, key: 'g', limit: 40, size: 1 },
    { name: 'query, nested key with a filter', pattern: QUERY_GROUPS, ungrouped: QUERY, body: { query: q, using: 'dot', filter: { must: [{ key: 'n', range: { gte: 3 } }] } }, key: 'meta.tag', limit: 5, size: 2 },
    { name: 'query, [] key with a score threshold', pattern: QUERY_GROUPS, ungrouped: QUERY, body: { query: q, using: 'dot', score_threshold: 0 }, key: 'meta[].tag', limit: 3, size: 4 },
    { name: 'query, groups larger than most', pattern: QUERY_GROUPS, ungrouped: QUERY, body: { query: q, using: 'l2' }, key: 'g', limit: 3, size: 25 },
    { name: 'query, default limit and size', pattern: QUERY_GROUPS, ungrouped: QUERY, body: { query: q, using: 'dot' }, key: 'g', limit: 10, size: 3 },
    { name: 'recommend, positives and a negative', pattern: RECOMMEND_GROUPS, ungrouped: RECOMMEND, body: { positive: [ids[0], ids[9]], negative: [ids[4]], using: 'dot' }, key: 'g', limit: 6, size: 2 },
  ];
}

/** The body of the grouped request (the ranking's request has the ungrouped form: the query API for search). */
function groupedBody(c: Case, extra: Payload = {}): Payload {
  const b: Payload = { ...c.body, group_by: c.key, params: { exact: true }, ...extra };
  if (!(c.name.includes('default'))) {
    b.limit = c.limit;
    b.group_size = c.size;
  }
  return b;
}

function ungroupedBody(c: Case): Payload {
  if (c.pattern !== SEARCH_GROUPS) return c.body;
  const v = c.body.vector as { name: string; vector: number[] };
  return { query: v.vector, using: v.name };
}

test.serial('groups equal the brute-force grouping of the exact ranking, over 3 shards', async (t) => {
  for (const c of cases()) {
    const rank = await ranking(t, c.ungrouped, ungroupedBody(c));
    t.true(rank.length > 0, c.name);
    const want = bruteForceGroups(rank, c.key, c.limit, c.size);
    t.true(want.length > 0, c.name);
    const got = await api.ok(t, 'POST', c.pattern, { params: { collection_name: C }, body: groupedBody(c) });
    t.deepEqual(groupsShape(got.groups), want, c.name);
    // No payload or vector unless asked; a group's hits all hold its value.
    for (const g of got.groups) {
      for (const h of g.hits) {
        t.is(h.payload, undefined, c.name);
        t.is(h.vector, undefined, c.name);
        t.true(groupValues(payloads.get(String(h.id)), c.key)!.includes(g.id), `${c.name}: ${JSON.stringify(h.id)} in ${JSON.stringify(g.id)}`);
      }
    }
  }
  // The cases cover a point in several groups and a point in none.
  const rank = await ranking(t, QUERY, ungroupedBody(cases()[0]));
  t.true(rank.some((p) => (groupValues(p.payload, 'g') ?? []).length > 1));
  t.true(rank.some((p) => groupValues(p.payload, 'g') === null));
});

test.serial('hits carry payload and vectors as asked', async (t) => {
  const c = cases()[0];
  const got = await api.ok(t, 'POST', c.pattern, { params: { collection_name: C }, body: groupedBody(c, { with_payload: true, with_vector: ['l2'] }) });
  t.true(got.groups.length > 0);
  for (const g of got.groups) {
    for (const h of g.hits) {
      t.deepEqual(h.payload, payloads.get(String(h.id)));
      t.deepEqual(Object.keys(h.vector), ['l2']);
    }
  }
  const some = await api.ok(t, 'POST', c.pattern, { params: { collection_name: C }, body: groupedBody(c, { with_payload: ['n'] }) });
  for (const g of some.groups) for (const h of g.hits) t.deepEqual(h.payload, { n: payloads.get(String(h.id))!.n });
});

test.serial('a hybrid query grouped: groups and hits in score order, every hit in its group', async (t) => {
  rnd = mulberry32(5);
  const body = {
    prefetch: [
      { query: vec(), using: 'dot', limit: 20 },
      { query: vec(), using: 'l2', limit: 20 },
    ],
    query: { fusion: 'rrf' },
    group_by: 'g',
    group_size: 2,
    limit: 4,
    with_payload: true,
  };
  const got = await api.ok(t, 'POST', QUERY_GROUPS, { params: { collection_name: C }, body });
  t.true(got.groups.length > 0 && got.groups.length <= 4);
  const best = got.groups.map((g: { hits: RankedPoint[] }) => g.hits[0].score);
  t.deepEqual(best, [...best].sort((a, b) => b - a));
  for (const g of got.groups) {
    t.true(g.hits.length <= 2);
    for (const h of g.hits) t.true(groupValues(h.payload, 'g')!.includes(g.id));
  }
});

test.serial('with_lookup: group values that are point ids get that point of the other collection', async (t) => {
  const main = 'grp_lk';
  const docs = 'grp_lk_docs';
  const U = '6f9619ff-8b86-4011-b42d-00c04fc964ff';
  await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: main }, body: { vectors: { size: 2, distance: 'Dot' }, shard_number: 2 } });
  await api.ok(t, 'PUT', COLLECTION, { params: { collection_name: docs }, body: { vectors: { size: 2, distance: 'Dot' } } });
  const values = [1, 2, 5, -1, 'abc', U, U.toUpperCase()];
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: main },
    query: { wait: 'true' },
    body: { points: values.map((doc, i) => ({ id: i + 1, vector: [1 - i / 10, 0], payload: { doc } })) },
  });
  await api.ok(t, 'PUT', POINTS, {
    params: { collection_name: docs },
    query: { wait: 'true' },
    body: { points: [1, 5, U].map((id) => ({ id, vector: [0.5, 0.5], payload: { title: `doc ${id}`, body: 'text' } })) },
  });
  const got = await api.ok(t, 'POST', QUERY_GROUPS, { params: { collection_name: main }, body: { query: [1, 0], group_by: 'doc', limit: 10, group_size: 1, with_lookup: docs } });
  t.deepEqual(
    got.groups.map((g: { id: unknown; lookup?: unknown }) => [g.id, g.lookup ?? null]),
    [
      [1, { id: 1, payload: { title: 'doc 1', body: 'text' } }],
      [2, null],
      [5, { id: 5, payload: { title: 'doc 5', body: 'text' } }],
      [-1, null],
      ['abc', null],
      [U, { id: U, payload: { title: `doc ${U}`, body: 'text' } }],
      [U.toUpperCase(), { id: U, payload: { title: `doc ${U}`, body: 'text' } }],
    ],
  );
  const sel = await api.ok(t, 'POST', SEARCH_GROUPS, {
    params: { collection_name: main },
    body: { vector: [1, 0], group_by: 'doc', limit: 1, group_size: 1, with_lookup: { collection: docs, with_payload: ['title'], with_vectors: true } },
  });
  t.deepEqual(sel.groups[0].lookup, { id: 1, payload: { title: 'doc 1' }, vector: [0.5, 0.5] });
  await api.error(t, 404, 'POST', QUERY_GROUPS, { params: { collection_name: main }, body: { query: [1, 0], group_by: 'doc', with_lookup: 'no_such' } });
});

test.serial('refusals: the reference statuses, nothing else asked', async (t) => {
  const p = { collection_name: C };
  const q = { query: [1, 0, 0, 0], using: 'dot' };
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: q }, /missing field `group_by`/);
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: { ...q, group_by: '' } }, /^Format error in JSON body: group_by/);
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: { ...q, group_by: 7 } }, /group_by/);
  await api.error(t, 422, 'POST', QUERY_GROUPS, { params: p, body: { ...q, group_by: 'g', group_size: 0 } }, /group_size/);
  await api.error(t, 422, 'POST', QUERY_GROUPS, { params: p, body: { ...q, group_by: 'g', limit: 0 } }, /limit/);
  await api.error(t, 400, 'POST', SEARCH_GROUPS, { params: p, body: { vector: { name: 'dot', vector: [1, 0, 0, 0] }, group_by: 'g', limit: 2 } }, /missing field `group_size`/);
  await api.error(t, 400, 'POST', SEARCH_GROUPS, { params: p, body: { vector: { name: 'dot', vector: [1, 0, 0, 0] }, group_by: 'g', group_size: 2 } }, /missing field `limit`/);
  await api.error(t, 400, 'POST', RECOMMEND_GROUPS, { params: p, body: { using: 'dot', group_by: 'g', group_size: 2, limit: 2 } }, /positive/);
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: { ...q, group_by: 'g', with_lookup: 5 } }, /with_lookup/);
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: { ...q, group_by: 'g', with_lookup: { collection: C, with_payload: 'x' } } }, /with_lookup\.with_payload/);
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: { ...q, group_by: 'g', with_lookup: { collection: C, with_vectors: 3 } } }, /with_lookup\.with_vectors/);
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: { ...q, group_by: 'g', with_lookup: { collection: C, with_vectors: ['nope'] } } }, /nope/);
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: { ...q, group_by: 'g', with_vector: ['nope'] } });
  await api.error(t, 404, 'POST', QUERY_GROUPS, { params: { collection_name: 'no_such' }, body: { ...q, group_by: 'g' } });
  for (const [rpc, msg] of [
    ['QueryGroups', { collection_name: C, query: { nearest: { dense: { data: [1, 0, 0, 0] } } }, using: 'dot' }],
    ['SearchGroups', { collection_name: C, vector: [1, 0, 0, 0], vector_name: 'dot', group_by: 'g', limit: 2 }],
  ] as const) {
    const err = await grpcClient.fail('Points', rpc, msg);
    t.is(err.code, 3, `${rpc}: INVALID_ARGUMENT (${err.details})`);
  }
});

test.serial('strict mode: limit is groups x group size; the key needs an index that answers match', async (t) => {
  const S = 'grp_strict';
  await api.ok(t, 'PUT', COLLECTION, {
    params: { collection_name: S },
    body: { vectors: { size: 2, distance: 'Dot' }, strict_mode_config: { enabled: true, unindexed_filtering_retrieve: false, max_query_limit: 10 } },
  });
  await api.ok(t, 'PUT', POINTS, { params: { collection_name: S }, query: { wait: 'true' }, body: { points: [1, 2, 3].map((id) => ({ id, vector: [1, id], payload: { k: `v${id % 2}`, f: id / 2 } })) } });
  const body = (group_by: string, limit: number, group_size: number) => ({ query: [1, 0], group_by, limit, group_size });
  const p = { collection_name: S };
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: body('k', 2, 2) }, 'Bad request: Index required but not found for "k". Help: Create an index supporting `match` for this key.');
  await api.ok(t, 'PUT', INDEX, { params: p, query: { wait: 'true' }, body: { field_name: 'k', field_schema: 'keyword' } });
  await api.ok(t, 'PUT', INDEX, { params: p, query: { wait: 'true' }, body: { field_name: 'f', field_schema: 'float' } });
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: body('f', 2, 2) }, /^Bad request: Index of type "Float" found for "f"/);
  const ok = await api.ok(t, 'POST', QUERY_GROUPS, { params: p, body: body('k', 2, 5) });
  t.deepEqual(ok.groups.map((g: { id: string }) => g.id).sort(), ['v0', 'v1']);
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, body: body('k', 3, 4) }, /^Bad request: Limit exceeded 12 > 10 for "limit"/);
});

/** A gRPC group answer in REST's JSON shape (ids and scores). */
function fromGrpc(res: { result?: { groups?: Array<{ id: Record<string, string>; hits?: Array<{ id: { num?: string; uuid?: string }; score: number }> }> } }) {
  return (res.result?.groups ?? []).map((g) => ({
    id: g.id.string_value ?? Number(g.id.unsigned_value ?? g.id.integer_value),
    hits: (g.hits ?? []).map((h) => ({ id: h.id.uuid ?? Number(h.id.num), score: h.score })),
  }));
}

test.serial('gRPC SearchGroups, RecommendGroups and QueryGroups give the REST groups', async (t) => {
  const [search, , nested, , , , recommend] = cases();
  const q = (search.body.vector as { vector: number[] }).vector;
  const rest = async (c: Case) => groupsShape((await api.ok(t, 'POST', c.pattern, { params: { collection_name: C }, body: groupedBody(c) })).groups);
  const exact = { exact: true };
  const s = await grpcClient.call('Points', 'SearchGroups', { collection_name: C, vector: q, vector_name: 'dot', group_by: 'g', limit: search.limit, group_size: search.size, params: exact });
  t.deepEqual(fromGrpc(s), await rest(search));
  const nq = nested.body.query as number[];
  const qg = await grpcClient.call('Points', 'QueryGroups', {
    collection_name: C,
    query: { nearest: { dense: { data: nq } } },
    using: 'dot',
    filter: { must: [{ field: { key: 'n', range: { gte: 3 } } }] },
    group_by: nested.key,
    limit: String(nested.limit),
    group_size: String(nested.size),
    params: exact,
  });
  t.deepEqual(fromGrpc(qg), await rest(nested));
  const pid = (id: number | string) => (typeof id === 'number' ? { num: String(id) } : { uuid: id });
  const r = await grpcClient.call('Points', 'RecommendGroups', {
    collection_name: C,
    positive: (recommend.body.positive as Array<number | string>).map(pid),
    negative: (recommend.body.negative as Array<number | string>).map(pid),
    using: 'dot',
    group_by: 'g',
    limit: recommend.limit,
    group_size: recommend.size,
    params: exact,
    with_payload: { enable: true },
  });
  t.deepEqual(fromGrpc(r), await rest(recommend));
  t.true((r.result.groups[0].hits[0].payload as Record<string, unknown>) !== undefined);
  // with_lookup over gRPC
  const lk = await grpcClient.call('Points', 'QueryGroups', { collection_name: 'grp_lk', query: { nearest: { dense: { data: [1, 0] } } }, group_by: 'doc', group_size: '1', with_lookup: { collection: 'grp_lk_docs' } });
  const first = lk.result.groups[0];
  t.is(first.id.unsigned_value, '1');
  t.is(Number(first.lookup.id.num), 1);
});

test.serial('custom sharding: shard_key selects the shards, hits carry their key; consistency and timeout are taken', async (t) => {
  const K = 'grp_keys';
  const p = { collection_name: K };
  await api.ok(t, 'PUT', COLLECTION, { params: p, body: { vectors: { size: 2, distance: 'Dot' }, sharding_method: 'custom' } });
  for (const shard_key of ['k1', 'k2']) await api.ok(t, 'PUT', '/collections/{collection_name}/shards', { params: p, body: { shard_key } });
  for (const [shard_key, base] of [['k1', 0], ['k2', 100]] as const) {
    await api.ok(t, 'PUT', POINTS, {
      params: p,
      query: { wait: 'true' },
      body: { shard_key, points: [1, 2, 3, 4].map((i) => ({ id: base + i, vector: [1 - i / 10 - base / 250, 0], payload: { g: i % 2 === 0 ? 'even' : 'odd' } })) },
    });
  }
  const all = await api.ok(t, 'POST', QUERY_GROUPS, { params: p, query: { consistency: 'majority', timeout: 5 }, body: { query: [1, 0], group_by: 'g', group_size: 2 } });
  t.deepEqual(
    all.groups.map((g: { id: string; hits: Array<{ id: number; shard_key: string }> }) => [g.id, g.hits.map((h) => [h.id, h.shard_key])]),
    [
      ['odd', [[1, 'k1'], [3, 'k1']]],
      ['even', [[2, 'k1'], [4, 'k1']]],
    ],
  );
  const k2 = await api.ok(t, 'POST', QUERY_GROUPS, { params: p, body: { query: [1, 0], group_by: 'g', group_size: 1, shard_key: 'k2' } });
  t.deepEqual(
    k2.groups.map((g: { id: string; hits: Array<{ id: number; shard_key: string }> }) => [g.id, g.hits.map((h) => [h.id, h.shard_key])]),
    [
      ['odd', [[101, 'k2']]],
      ['even', [[102, 'k2']]],
    ],
  );
  await api.error(t, 400, 'POST', QUERY_GROUPS, { params: p, query: { consistency: 'bogus' }, body: { query: [1, 0], group_by: 'g' } });
});
