/**
 * Payload index parameters that change the plan: a keyword or uuid index created with
 * `is_tenant: true` answers its match first (the first narrowing step), a range on an
 * integer, float or datetime index created with `is_principal: true` comes next, and
 * without them the smallest estimate goes first; the candidates are the same whatever
 * the order (checked against the filter applied to every point). `on_disk: true` is
 * accepted for keyword, integer, float, bool, datetime and uuid indexes (through REST and
 * gRPC) and refused for text and geo with 400 through REST and INVALID_ARGUMENT through
 * gRPC, changing nothing.
 */

import test from 'ava';

import { compileFilter, type Filter } from '../../ts/shard/filter';
import { parseFieldSchema } from '../../ts/shard/field-schema';
import { PayloadIndexes } from '../../ts/shard/payload-index';
import { codeName, startGrpcQuiver } from '../grpc/client';
import { spec } from '../support/contract';

type P = Record<string, unknown>;

const uuid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
const points: P[] = Array.from({ length: 2000 }, (_, i) => ({
  tenant: `t${i % 4}`,
  org: uuid(i % 5),
  n: i,
  price: (i % 97) * 0.5,
  at: new Date(Date.UTC(2026, 0, 1) + (i % 365) * 86_400_000).toISOString(),
  colour: i % 500 === 0 ? 'rare' : 'common',
}));

function indexes(flags: { tenant?: boolean; orgTenant?: boolean; principal?: boolean }): PayloadIndexes {
  const pi = new PayloadIndexes();
  const entries = () => points.map((p, i) => [BigInt(i), p] as [bigint, P]);
  pi.create('tenant', parseFieldSchema({ type: 'keyword', is_tenant: flags.tenant ?? false }), entries());
  pi.create('org', parseFieldSchema({ type: 'uuid', is_tenant: flags.orgTenant ?? false }), entries());
  pi.create('colour', parseFieldSchema('keyword'), entries());
  pi.create('n', parseFieldSchema({ type: 'integer', is_principal: flags.principal ?? false }), entries());
  pi.create('price', parseFieldSchema({ type: 'float', is_principal: false }), entries());
  pi.create('at', parseFieldSchema({ type: 'datetime', is_principal: flags.principal ?? false }), entries());
  return pi;
}

function brute(filter: Filter): bigint[] {
  const pred = compileFilter(filter);
  return points.flatMap((p, i) => (pred(i, p as never, () => false) ? [BigInt(i)] : []));
}

function sorted(xs: Iterable<bigint>): bigint[] {
  return [...xs].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

const tenantAndRare: Filter = { must: [{ key: 'colour', match: { value: 'rare' } }, { key: 'tenant', match: { value: 't0' } }] } as Filter;
const rangeAndRange: Filter = {
  must: [
    { key: 'price', range: { lt: 2 } },
    { key: 'n', range: { gte: 100, lt: 1500 } },
  ],
} as Filter;
const orgAndDate: Filter = {
  must: [
    { key: 'colour', match: { value: 'rare' } },
    { key: 'at', range: { gte: '2026-03-01T00:00:00Z' } },
    { key: 'org', match: { value: uuid(2) } },
  ],
} as Filter;

test('is_tenant: the tenant match is the first narrowing step, even when another condition is smaller', (t) => {
  t.deepEqual(indexes({}).planOrder(tenantAndRare), ['colour', 'tenant'], 'without the flag the smallest set (rare) goes first');
  t.deepEqual(indexes({ tenant: true }).planOrder(tenantAndRare), ['tenant', 'colour']);
  t.deepEqual(indexes({ orgTenant: true }).planOrder(orgAndDate)[0], 'org', 'a uuid index with is_tenant goes first');
  for (const flags of [{}, { tenant: true }, { orgTenant: true, principal: true }]) {
    const pi = indexes(flags);
    for (const f of [tenantAndRare, orgAndDate]) t.deepEqual(sorted(pi.candidates(f) ?? []).filter((o) => brute(f).includes(o)), brute(f), JSON.stringify(flags));
  }
});

test('is_principal: a range on the principal index is evaluated before other ranges, after a tenant match', (t) => {
  t.deepEqual(indexes({}).planOrder(rangeAndRange), ['price', 'n'], 'without the flag the smaller range goes first');
  t.deepEqual(indexes({ principal: true }).planOrder(rangeAndRange), ['n', 'price']);
  t.deepEqual(indexes({ principal: true, orgTenant: true }).planOrder(orgAndDate), ['org', 'at', 'colour']);
  for (const flags of [{}, { principal: true }]) {
    const pi = indexes(flags);
    const cands = pi.candidates(rangeAndRange)!;
    const want = brute(rangeAndRange);
    t.true(
      want.every((o) => cands.has(o)),
      'a superset of the matches',
    );
    t.is(pi.estimate(rangeAndRange), Math.min(...['price', 'n'].map((k) => pi.estimate({ must: [rangeAndRange.must![k === 'price' ? 0 : 1]] } as Filter)!)));
  }
});

test('payload index enable_hnsw: true and memory cold/cached are refused with 400 (REST) and INVALID_ARGUMENT (gRPC); enable_hnsw: false and memory: pinned are accepted', async (t) => {
  const q = await startGrpcQuiver();
  const g = q.client();
  try {
    const call = async (method: string, p: string, body?: unknown) => {
      const res = await fetch(`${q.server.url}${p}`, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      return { status: res.status, body: (await res.json()) as any };
    };
    t.is((await call('PUT', '/collections/h', { vectors: { size: 2, distance: 'Dot' } })).status, 200);
    for (const type of ['keyword', 'integer', 'float', 'geo', 'text', 'bool', 'datetime', 'uuid']) {
      const r = await call('PUT', '/collections/h/index?wait=true', { field_name: `h_${type}`, field_schema: { type, enable_hnsw: true } });
      t.is(r.status, 400, type);
      t.regex(r.body.status.error, /field_schema\.enable_hnsw: true is not supported: Quiver builds no payload-aware HNSW links/);
      t.deepEqual(spec().validate('PUT', '/collections/{collection_name}/index', 400, r.body), [], 'the error answer follows the contract');
    }
    for (const memory of ['cold', 'cached']) {
      const r = await call('PUT', '/collections/h/index?wait=true', { field_name: 'm', field_schema: { type: 'integer', memory } });
      t.is(r.status, 400, memory);
      t.regex(r.body.status.error, new RegExp(`field_schema\\.memory: "${memory}" is not supported`));
    }
    t.deepEqual((await call('GET', '/collections/h')).body.result.payload_schema, {}, 'a refused index changes nothing');
    t.is((await call('PUT', '/collections/h/index?wait=true', { field_name: 'k', field_schema: { type: 'keyword', enable_hnsw: false } })).status, 200);
    t.is((await call('PUT', '/collections/h/index?wait=true', { field_name: 'n', field_schema: { type: 'integer', memory: 'pinned' } })).status, 200);
    const err = await g.fail('Points', 'CreateFieldIndex', {
      collection_name: 'h',
      field_name: 'g',
      field_type: 'FieldTypeKeyword',
      field_index_params: { keyword_index_params: { enable_hnsw: true } },
    });
    t.is(codeName(err.code), 'INVALID_ARGUMENT');
    t.regex(err.details, /enable_hnsw: true is not supported/);
    t.deepEqual(Object.keys((await call('GET', '/collections/h')).body.result.payload_schema).sort(), ['k', 'n']);
  } finally {
    await q.stop();
  }
});

test('payload index on_disk: true is accepted for every type through REST and gRPC (CreateFieldIndex) and shown in payload_schema', async (t) => {
  const q = await startGrpcQuiver();
  const g = q.client();
  try {
    const call = async (method: string, p: string, body?: unknown) => {
      const res = await fetch(`${q.server.url}${p}`, { method, headers: { 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      return { status: res.status, body: (await res.json()) as any };
    };
    t.is((await call('PUT', '/collections/f', { vectors: { size: 2, distance: 'Dot' } })).status, 200);
    const types = ['keyword', 'integer', 'float', 'bool', 'datetime', 'uuid', 'geo', 'text'];
    for (const type of types) {
      const r = await call('PUT', '/collections/f/index?wait=true', { field_name: `f_${type}`, field_schema: { type, on_disk: true } });
      t.is(r.status, 200, `${type}: ${JSON.stringify(r.body)}`);
    }
    const ok = await call('PUT', '/collections/f/index?wait=true', { field_name: 'k', field_schema: { type: 'keyword', on_disk: false, is_tenant: true } });
    t.is(ok.status, 200);
    await g.call('Points', 'CreateFieldIndex', {
      collection_name: 'f',
      field_name: 'gg',
      field_type: 'FieldTypeGeo',
      field_index_params: { geo_index_params: { on_disk: true } },
    });
    await g.call('Points', 'CreateFieldIndex', {
      collection_name: 'f',
      field_name: 'tt',
      field_type: 'FieldTypeText',
      field_index_params: { text_index_params: { tokenizer: 'Word', on_disk: true } },
    });
    await g.call('Points', 'CreateFieldIndex', {
      collection_name: 'f',
      field_name: 'kk',
      field_type: 'FieldTypeKeyword',
      field_index_params: { keyword_index_params: { on_disk: true } },
    });
    const schema = (await call('GET', '/collections/f')).body.result.payload_schema;
    const onDisk = [...types.map((x) => `f_${x}`), 'gg', 'kk', 'tt'].sort();
    t.deepEqual(Object.keys(schema).sort(), [...onDisk, 'k'].sort());
    for (const f of onDisk) t.is(schema[f].params.on_disk, true, f);
  } finally {
    await q.stop();
  }
});
