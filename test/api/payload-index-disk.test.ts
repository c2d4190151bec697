/**
 * Payload indexes with `on_disk: true` through a real bin/quiver: two collections with
 * the same points, one with every index on disk and one with them in memory, answer
 * filtered scroll, count, query, facet and order_by alike (and as a filter applied by
 * hand); `GET /collections/{c}` shows the params as given (validated against the v1.18
 * document); the on-disk one keeps its answers across payload edits, a restart, a kill -9
 * after acknowledged writes, a snapshot round trip, and the index re-created with on_disk
 * flipped both ways; for every type, full-text and geo included. A malformed on_disk
 * is a 400 that changes nothing. A string with a lone UTF-16 surrogate (which UTF-8 index
 * files cannot hold) is refused at the body; a surrogate pair is indexed and found.
 */

import test, { type ExecutionContext } from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { haversineMeters } from '../../ts/shard/filter';
import { startServer, type Server } from '../crash/server';
import { spec } from '../support/contract';
import { call as callOn, ok as okOn } from './helpers';

type Json = Record<string, any>;

let dir: string;
let server: Server;

const N = 1500;
const COLOURS = ['red', 'green', 'blue', 'violet', 'black'];
const UUIDS = ['550e8400-e29b-41d4-a716-446655440000', 'f47ac10b-58cc-4372-a567-0e02b2c3d479', '6ba7b810-9dad-11d1-80b4-00c04fd430c8'];
const payloadOf = (i: number): Json => ({
  i,
  colour: i % 7 === 0 ? [COLOURS[i % 5], 'multi'] : COLOURS[i % 5],
  n: (i * 37) % 101,
  price: ((i * 13) % 400) / 4,
  when: new Date(Date.UTC(2024, 0, 1) + ((i * 7919) % 1000) * 3_600_000).toISOString(),
  flag: i % 3 === 0,
  u: UUIDS[i % 3],
  txt: i % 13 === 0 ? [`w${i % 7} first`, `w${i % 11} second`] : `w${i % 7} and W${i % 11}, ${i % 5 === 0 ? 'the quick fox' : 'a lazy dog'}`,
  loc: { lat: ((i * 7) % 170) - 85 + (i % 10) / 10, lon: ((i * 11) % 358) - 179 + (i % 4) / 8 },
  ...(i % 11 === 0 ? { n: null } : {}),
});
const points = Array.from({ length: N }, (_, i) => ({ id: i + 1, vector: [i % 7, 1, (i * 13) % 5, 2], payload: payloadOf(i) }));

const INDEXES: Record<string, Json> = {
  colour: { type: 'keyword', is_tenant: true },
  n: { type: 'integer' },
  price: { type: 'float' },
  when: { type: 'datetime' },
  flag: { type: 'bool' },
  u: { type: 'uuid' },
  txt: { type: 'text', phrase_matching: true },
  loc: { type: 'geo' },
};

// Calls to the server of the moment (the test restarts it).
const call = (method: string, p: string, body?: unknown) => callOn(server, method, p, body);
const ok = (t: ExecutionContext, method: string, p: string, body?: unknown) => okOn(t, server, method, p, body);

async function ids(t: ExecutionContext, c: string, filter: unknown): Promise<number[]> {
  const r = await ok(t, 'POST', `/collections/${c}/points/scroll`, { limit: 100_000, with_payload: false, filter });
  return r.points.map((p: Json) => p.id);
}

const has = (v: unknown, x: unknown) => (Array.isArray(v) ? v.includes(x) : v === x);
/** The word-tokenizer's lowercase tokens of each string of a text value. */
const texts = (v: unknown): string[][] => (Array.isArray(v) ? v : typeof v === 'string' ? [v] : []).map((s: string) => s.toLowerCase().match(/[\p{Alphabetic}\p{N}]+/gu) ?? []);
const hasToken = (v: unknown, w: string) => texts(v).some((ts) => ts.includes(w));
const hasRun = (v: unknown, q: string[]) => texts(v).some((ts) => ts.some((_, i) => q.every((w, j) => ts[i + j] === w)));
const geoIn = (p: Json, f: (g: { lat: number; lon: number }) => boolean) => p.loc !== undefined && f(p.loc);
const CASES: Array<[Json, (p: Json) => boolean]> = [
  [{ must: [{ key: 'colour', match: { value: 'red' } }] }, (p) => has(p.colour, 'red')],
  [{ must: [{ key: 'colour', match: { any: ['multi', 'violet'] } }, { key: 'flag', match: { value: true } }] }, (p) => (has(p.colour, 'multi') || has(p.colour, 'violet')) && p.flag === true],
  [{ must: [{ key: 'n', range: { gte: 20, lt: 40 } }] }, (p) => typeof p.n === 'number' && p.n >= 20 && p.n < 40],
  [{ must: [{ key: 'n', match: { value: 5 } }] }, (p) => p.n === 5],
  [{ must: [{ key: 'price', range: { gt: 50.5 } }, { key: 'u', match: { value: UUIDS[1] } }] }, (p) => p.price > 50.5 && p.u === UUIDS[1]],
  [{ must: [{ key: 'when', range: { gte: '2024-01-10T00:00:00Z', lt: '2024-01-20T00:00:00Z' } }] }, (p) => p.when >= '2024-01-10T00:00:00.000Z' && p.when < '2024-01-20T00:00:00.000Z'],
  [{ must: [{ is_null: { key: 'n' } }] }, (p) => p.n === null],
  [{ must: [{ is_empty: { key: 'n' } }], should: [{ key: 'colour', match: { value: 'blue' } }, { key: 'flag', match: { value: false } }] }, (p) => p.n === null && (has(p.colour, 'blue') || p.flag === false)],
  [{ must: [{ key: 'price', range: { lte: 10 } }], must_not: [{ key: 'colour', match: { value: 'green' } }] }, (p) => p.price <= 10 && !has(p.colour, 'green')],
  [{ must: [{ key: 'txt', match: { text: 'W3 w5' } }] }, (p) => hasToken(p.txt, 'w3') && hasToken(p.txt, 'w5')],
  [{ must: [{ key: 'txt', match: { text_any: 'w10 gold' } }, { key: 'flag', match: { value: true } }] }, (p) => (hasToken(p.txt, 'w10') || hasToken(p.txt, 'gold')) && p.flag === true],
  [{ must: [{ key: 'txt', match: { phrase: 'quick fox' } }, { key: 'n', range: { lt: 50 } }] }, (p) => hasRun(p.txt, ['quick', 'fox']) && typeof p.n === 'number' && p.n < 50],
  [{ must: [{ key: 'txt', match: { phrase: 'w2 first' } }] }, (p) => hasRun(p.txt, ['w2', 'first'])],
  [{ must: [{ key: 'loc', geo_radius: { center: { lat: 10, lon: 20 }, radius: 2_500_000 } }] }, (p) => geoIn(p, (g) => haversineMeters({ lat: 10, lon: 20 }, g) <= 2_500_000)],
  [
    { must: [{ key: 'loc', geo_bounding_box: { top_left: { lat: 40.03, lon: -60.03 }, bottom_right: { lat: -20.03, lon: 30.03 } } }], must_not: [{ key: 'flag', match: { value: true } }] },
    (p) => geoIn(p, (g) => g.lat <= 40.03 && g.lat >= -20.03 && g.lon >= -60.03 && g.lon <= 30.03) && p.flag !== true,
  ],
  [
    // (corners off the data's 0.1° / 0.125° steps: no point lies on an edge)
    {
      must: [
        {
          key: 'loc',
          geo_polygon: {
            exterior: { points: [{ lat: -50.05, lon: -100.06 }, { lat: -50.05, lon: 100.06 }, { lat: 50.05, lon: 100.06 }, { lat: 50.05, lon: -100.06 }, { lat: -50.05, lon: -100.06 }] },
            interiors: [{ points: [{ lat: -10.05, lon: -10.06 }, { lat: -10.05, lon: 10.06 }, { lat: 10.05, lon: 10.06 }, { lat: 10.05, lon: -10.06 }, { lat: -10.05, lon: -10.06 }] }],
          },
        },
      ],
    },
    (p) => geoIn(p, (g) => g.lat > -50.05 && g.lat < 50.05 && g.lon > -100.06 && g.lon < 100.06 && !(g.lat > -10.05 && g.lat < 10.05 && g.lon > -10.06 && g.lon < 10.06)),
  ],
];

async function checkAll(t: ExecutionContext, c: string, model: Map<number, Json>, what: string): Promise<void> {
  for (const [filter, pred] of CASES) {
    const want = [...model].filter(([, p]) => pred(p)).map(([id]) => id).sort((a, b) => a - b);
    t.true(want.length > 0, `${JSON.stringify(filter)} matches something`);
    t.deepEqual(await ids(t, c, filter), want, `${what}: ${JSON.stringify(filter)}`);
    const n = await ok(t, 'POST', `/collections/${c}/points/count`, { filter, exact: true });
    t.is(n.count, want.length, `${what}: count ${JSON.stringify(filter)}`);
  }
  const ordered = await ok(t, 'POST', `/collections/${c}/points/scroll`, { limit: 10, order_by: { key: 'price', direction: 'desc' }, with_payload: ['price'] });
  const prices = [...model.values()].map((p) => p.price).sort((a, b) => b - a).slice(0, 10);
  t.deepEqual(ordered.points.map((p: Json) => p.payload.price), prices, `${what}: order_by`);
  const facet = await ok(t, 'POST', `/collections/${c}/facet`, { key: 'colour', exact: true, limit: 10 });
  const counts = new Map<string, number>();
  for (const p of model.values()) for (const v of Array.isArray(p.colour) ? p.colour : [p.colour]) counts.set(v, (counts.get(v) ?? 0) + 1);
  t.deepEqual(
    Object.fromEntries(facet.hits.map((h: Json) => [h.value, h.count])),
    Object.fromEntries(counts),
    `${what}: facet`,
  );
}

async function start(): Promise<Server> {
  return startServer(dir, {});
}

test.before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-fidx-api-'));
  server = await start();
});

test.after.always(async () => {
  if (server) await server.stop('SIGTERM');
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test.serial('on-disk and in-memory payload indexes answer alike; restart, kill -9, snapshot, on_disk flipped', async (t) => {
  for (const [name, onDisk] of [['disk', true], ['mem', false]] as const) {
    await ok(t, 'PUT', `/collections/${name}`, { vectors: { size: 4, distance: 'Euclid' }, shard_number: 2, optimizers_config: { flush_interval_sec: 1 } });
    // half the points before the indexes (built from the payloads), half after (changes kept beside the base file)
    await ok(t, 'PUT', `/collections/${name}/points?wait=true`, { points: points.slice(0, N / 2) });
    for (const [field, schema] of Object.entries(INDEXES)) {
      await ok(t, 'PUT', `/collections/${name}/index?wait=true`, { field_name: field, field_schema: onDisk ? { ...schema, on_disk: true } : schema });
    }
    await ok(t, 'PUT', `/collections/${name}/points?wait=true`, { points: points.slice(N / 2) });
  }
  const info = await ok(t, 'GET', '/collections/disk');
  t.deepEqual(spec().validateSchema('CollectionInfo', info), []);
  t.deepEqual(info.payload_schema.colour.params, { type: 'keyword', is_tenant: true, on_disk: true });
  t.deepEqual(info.payload_schema.n.params, { type: 'integer', lookup: null, range: null, is_principal: null, on_disk: true });
  t.is(info.payload_schema.flag.params.on_disk, true);
  t.deepEqual(info.payload_schema.txt.params, { type: 'text', tokenizer: 'word', on_disk: true, phrase_matching: true });
  t.deepEqual(info.payload_schema.loc.params, { type: 'geo', on_disk: true });
  t.is(info.payload_schema.colour.points, N);
  const memInfo = await ok(t, 'GET', '/collections/mem');
  for (const f of Object.keys(INDEXES)) t.is(info.payload_schema[f].points, memInfo.payload_schema[f].points, f);

  const model = new Map(points.map((p) => [p.id, { ...p.payload }]));
  await checkAll(t, 'disk', model, 'loaded');
  await checkAll(t, 'mem', model, 'loaded (memory)');
  for (const [filter] of CASES) {
    const q = { query: [0, 1, 0, 2], filter, limit: 7 };
    t.deepEqual((await ok(t, 'POST', '/collections/disk/points/query', q)).points, (await ok(t, 'POST', '/collections/mem/points/query', q)).points);
  }

  // Payload edits.
  const edits: Array<[string, string, unknown, (m: Map<number, Json>) => void]> = [
    [
      'POST',
      'payload',
      { payload: { colour: 'gold', n: 1000, txt: 'gold quick fox', loc: { lat: 0.5, lon: 0.5 } }, points: [1, 2, 3] },
      (m) => [1, 2, 3].forEach((id) => Object.assign(m.get(id)!, { colour: 'gold', n: 1000, txt: 'gold quick fox', loc: { lat: 0.5, lon: 0.5 } })),
    ],
    ['PUT', 'payload', { payload: { i: -1, colour: 'red', n: 7, price: 1, when: '2024-01-15T00:00:00Z', flag: true, u: UUIDS[0] }, points: [10] }, (m) => m.set(10, { i: -1, colour: 'red', n: 7, price: 1, when: '2024-01-15T00:00:00.000Z', flag: true, u: UUIDS[0] })],
    ['POST', 'delete', { points: [14, 15] }, (m) => [14, 15].forEach((id) => m.delete(id))],
  ];
  for (const [method, op, body, apply] of edits) {
    for (const c of ['disk', 'mem']) await ok(t, method, `/collections/${c}/points/${op}?wait=true`, body);
    apply(model);
  }
  // The gold points and the replaced one are found through the indexes.
  t.deepEqual(await ids(t, 'disk', { must: [{ key: 'colour', match: { value: 'gold' } }] }), [1, 2, 3]);
  t.deepEqual(await ids(t, 'disk', { must: [{ key: 'txt', match: { text: 'gold' } }] }), [1, 2, 3]);
  t.deepEqual(await ids(t, 'disk', { must: [{ key: 'loc', geo_radius: { center: { lat: 0.5, lon: 0.5 }, radius: 1 } }] }), [1, 2, 3]);
  await checkAll(t, 'disk', model, 'after edits');

  // Restart (clean).
  await server.stop('SIGTERM');
  server = await start();
  await checkAll(t, 'disk', model, 'after a restart');
  // The on-disk collection's shards hold index files; the in-memory one's none.
  const fidx = (c: string) => {
    const found: string[] = [];
    const walk = (d: string) => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        if (e.isDirectory()) walk(path.join(d, e.name));
        else if (/^fidx-\d+\.(base|delta)$/.test(e.name) && d.includes(`${path.sep}${c}${path.sep}`)) found.push(e.name);
      }
    };
    walk(dir);
    return found;
  };
  t.true(fidx('disk').length >= 2 * 2 * Object.keys(INDEXES).length, 'a base and a delta file per index and shard');
  t.deepEqual(fidx('mem'), []);

  // kill -9 right after acknowledged writes.
  const late = { colour: 'late', n: 20, price: 99.5, flag: true, when: '2024-01-12T00:00:00.000Z', u: UUIDS[2], txt: 'w3 w5 late', loc: { lat: 12, lon: 21 } };
  await ok(t, 'PUT', '/collections/disk/points?wait=true', { points: [{ id: 5000, vector: [1, 1, 1, 1], payload: late }] });
  model.set(5000, { ...late });
  await ok(t, 'POST', '/collections/disk/points/payload?wait=true', { payload: { n: 21, txt: 'w10 w2 first', loc: { lat: 11, lon: 19 } }, points: [20] });
  Object.assign(model.get(20)!, { n: 21, txt: 'w10 w2 first', loc: { lat: 11, lon: 19 } });
  await server.stop('SIGKILL');
  server = await start();
  await checkAll(t, 'disk', model, 'after kill -9');

  // Snapshot round trip.
  const snap = await ok(t, 'POST', '/collections/disk/snapshots?wait=true');
  await ok(t, 'PUT', '/collections/disk/points?wait=true', { points: [{ id: 5001, vector: [1, 1, 1, 1], payload: { colour: 'after' } }] });
  const location = `file://${path.join(dir, 'snapshots', 'disk', snap.name)}`;
  await ok(t, 'PUT', '/collections/restored/snapshots/recover?wait=true', { location, priority: 'snapshot' });
  const restored = (await ok(t, 'GET', '/collections/restored')).payload_schema;
  for (const f of Object.keys(INDEXES)) t.is(restored[f].params.on_disk, true, `restored ${f}`);
  await checkAll(t, 'restored', model, 'restored from a snapshot');

  // on_disk flipped: the index re-created in memory, then on disk again; a restart after each.
  for (const onDisk of [false, true]) {
    for (const field of ['colour', 'price', 'txt', 'loc']) await ok(t, 'PUT', '/collections/restored/index?wait=true', { field_name: field, field_schema: { ...INDEXES[field], on_disk: onDisk } });
    const got = await ok(t, 'GET', '/collections/restored');
    for (const field of ['colour', 'txt', 'loc']) t.is(got.payload_schema[field].params.on_disk, onDisk, field);
    t.is(fidx('restored').length > 0, true);
    await checkAll(t, 'restored', model, `on_disk ${onDisk}`);
    await server.stop('SIGTERM');
    server = await start();
    await checkAll(t, 'restored', model, `on_disk ${onDisk}, restarted`);
  }
});

test.serial('full-text and geo indexes take on_disk: true (an empty collection: the files hold nothing yet); a malformed on_disk is a 400 that changes nothing', async (t) => {
  await ok(t, 'PUT', '/collections/fresh', { vectors: { size: 4, distance: 'Dot' } });
  for (const schema of [{ type: 'text', on_disk: 'yes' }, { type: 'geo', on_disk: 1 }]) {
    const r = await call('PUT', '/collections/fresh/index?wait=true', { field_name: 'x', field_schema: schema });
    t.is(r.status, 400, JSON.stringify(r.body));
  }
  t.deepEqual((await ok(t, 'GET', '/collections/fresh')).payload_schema, {});
  await ok(t, 'PUT', '/collections/fresh/index?wait=true', { field_name: 'x', field_schema: { type: 'text', tokenizer: 'prefix', on_disk: true } });
  await ok(t, 'PUT', '/collections/fresh/index?wait=true', { field_name: 'g', field_schema: { type: 'geo', on_disk: true } });
  const info = await ok(t, 'GET', '/collections/fresh');
  t.deepEqual(spec().validateSchema('CollectionInfo', info), []);
  t.is(info.payload_schema.x.params.on_disk, true);
  t.is(info.payload_schema.g.params.on_disk, true);
  await ok(t, 'PUT', '/collections/fresh/points?wait=true', { points: [{ id: 1, vector: [1, 0, 0, 0], payload: { x: 'Prefixes', g: { lat: 1, lon: 1 } } }] });
  t.deepEqual(await ids(t, 'fresh', { must: [{ key: 'x', match: { text: 'pre' } }, { key: 'g', geo_radius: { center: { lat: 1, lon: 1 }, radius: 10 } }] }), [1]);
});

test.serial('a lone surrogate escape in an upsert is 400 and changes nothing; a surrogate pair is found through on-disk keyword and text indexes', async (t) => {
  const raw = async (method: string, p: string, text: string) => {
    const res = await fetch(`${server.url}${p}`, { method, headers: { 'content-type': 'application/json' }, body: text });
    return { status: res.status, body: JSON.parse(await res.text()) };
  };
  await ok(t, 'PUT', '/collections/utf16', { vectors: { size: 4, distance: 'Dot' } });
  // the points first: the indexes are then built into base files from them
  const smile = '\\ud83d\\ude00';
  const r = await raw('PUT', '/collections/utf16/points?wait=true', `{"points":[
    {"id":1,"vector":[1,0,0,0],"payload":{"kw":"a${smile}b","txt":"smile ${smile} now"}},
    {"id":2,"vector":[0,1,0,0],"payload":{"kw":"a\\uFFFDb","txt":"smile \\uFFFD now"}},
    {"id":3,"vector":[0,0,1,0],"payload":{"kw":"plain","txt":"plain words"}}]}`);
  t.is(r.status, 200, JSON.stringify(r.body));
  await ok(t, 'PUT', '/collections/utf16/index?wait=true', { field_name: 'kw', field_schema: { type: 'keyword', on_disk: true } });
  await ok(t, 'PUT', '/collections/utf16/index?wait=true', { field_name: 'txt', field_schema: { type: 'text', tokenizer: 'whitespace', on_disk: true } });
  const all = async () => (await ok(t, 'POST', '/collections/utf16/points/scroll', { limit: 10, with_payload: true, with_vector: true })).points;
  const before = await all();
  for (const [method, p, text] of [
    ['PUT', '/collections/utf16/points?wait=true', '{"points":[{"id":4,"vector":[1,1,0,0],"payload":{"kw":"a\\ud83db"}}]}'],
    ['PUT', '/collections/utf16/points?wait=true', '{"points":[{"id":1,"vector":[1,0,0,0],"payload":{"kw":"\\ude00"}}]}'],
    ['POST', '/collections/utf16/points/payload?wait=true', '{"points":[3],"payload":{"txt":"lone \\ud800"}}'],
    ['PUT', '/collections/utf16/points/payload?wait=true', '{"points":[3],"payload":{"k\\udc00":"x"}}'],
  ] as const) {
    const res = await raw(method, p, text);
    t.is(res.status, 400, `${method} ${p} ${text}: ${JSON.stringify(res.body)}`);
    t.regex(res.body.status.error, /^Format error in JSON body: lone surrogate/);
  }
  t.deepEqual(await all(), before, 'nothing changed');
  t.is(before.find((p: Json) => p.id === 1).payload.kw, 'a\u{1F600}b');
  // the pair, sent as an escape pair and as UTF-8, finds point 1 only (not the U+FFFD one)
  for (const send of [(s: string) => s, (s: string) => s.replace('\u{1F600}', smile)]) {
    const filter = (cond: string) => raw('POST', '/collections/utf16/points/scroll', send(`{"limit":10,"with_payload":false,"filter":{"must":[${cond}]}}`));
    for (const cond of ['{"key":"kw","match":{"value":"a\u{1F600}b"}}', '{"key":"txt","match":{"text":"\u{1F600}"}}', '{"key":"kw","match":{"any":["a\u{1F600}b","zzz"]}}']) {
      const res = await filter(cond);
      t.is(res.status, 200, JSON.stringify(res.body));
      t.deepEqual(res.body.result.points.map((p: Json) => p.id), [1], send(cond));
    }
  }
});
