/**
 * Randomized filters through the REST API against a brute-force evaluation.
 *
 * A collection of 2000 points (integer and UUID ids) with random payloads (integers,
 * floats, keywords, bools, nested objects, arrays of objects, datetimes in several
 * forms, geo points, and missing / null / [] / [null] / wrongly typed values) and
 * random vectors; payload indexes on some fields (keyword, integer, float, datetime,
 * bool, geo, on nested and `[]` paths, some created before the points are written and
 * some after). For each random filter (must / should / must_not / min_should, match
 * value / any / except / text, range, datetime range, has_id, is_empty, is_null,
 * values_count, nested, geo radius / box / polygon, keys like `a.b`, `a[].b`, `a[]`):
 *  - scroll (every page) returns exactly the matching ids, in id order;
 *  - count returns their number;
 *  - query with limit = all points and params.exact = true returns exactly those ids,
 *    with the cosine scores computed here, best first;
 *  - a non-exact (HNSW) query returns only matching points, with correct scores.
 * The brute force is test/filters/oracle.ts (written from the semantics documented in
 * ts/shard/filter.ts); filter.ts's own predicate is checked against it too, so a
 * failure says whether the semantics or the serving (indexes, REST) disagree.
 * Then the payloads are changed (set / overwrite / delete keys / clear, by ids and by
 * filter; deletes; re-upserts) and another round of filters runs, so index updates
 * are covered as well as index builds.
 *
 * QUIVER_FILTER_SEED picks the seed (printed on failure); QUIVER_FILTER_COUNT the
 * number of filters of the first round (default 300).
 */

import test, { type ExecutionContext } from 'ava';

import { startQuiver, type RunningQuiver } from '../api/helpers';
import { matches, validateFilter } from '../../ts/shard/filter';
import { datetimeMs, evaluate, flat, geoOf, rawValues, type Id, type Json, type Obj } from './oracle';
import { Rng, datetime, makeIds, randomFilter, randomPayload, randomVector, type FilterContext } from './generate';

const SEED = process.env.QUIVER_FILTER_SEED !== undefined ? Number(process.env.QUIVER_FILTER_SEED) : (Date.now() ^ (process.pid << 10)) >>> 0;
const FILTERS = Number(process.env.QUIVER_FILTER_COUNT ?? 300);
const FILTERS_AFTER_UPDATES = Math.ceil(FILTERS / 2);
const DIM = 16;
const INT_IDS = 1900;
const UUID_IDS = 100;
const C = 'filters';

const r = new Rng(SEED);

interface Point {
  id: Id;
  vector: number[];
  unit: number[];
  payload: Obj | null;
}
const points = new Map<string, Point>();
const keyOf = (id: Id) => (typeof id === 'number' ? `n${id}` : `u${id}`);

let node: RunningQuiver;

async function call(method: string, path: string, body?: unknown): Promise<any> {
  const res = await fetch(`${node.url}/${path}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${method} /${path} -> ${res.status}: ${text.slice(0, 1000)}\nrequest: ${JSON.stringify(body)?.slice(0, 2000)}`);
  return JSON.parse(text).result;
}

function unit(v: number[]): number[] {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / n);
}

function cosine(a: number[], b: number[]): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/** Scroll order: integer ids ascending, then UUIDs (canonical form, as strings). */
function idOrder(a: Id, b: Id): number {
  if (typeof a === 'number') return typeof b === 'number' ? a - b : -1;
  if (typeof b === 'number') return 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

function context(): FilterContext {
  const datetimes: string[] = [];
  const numbers: number[] = [];
  for (const p of points.values()) {
    const pl = p.payload;
    if (!pl) continue;
    if (typeof pl.dt === 'string' && !Number.isNaN(datetimeMs(pl.dt)) && datetimes.length < 300) datetimes.push(pl.dt);
    for (const k of ['int', 'float']) if (typeof pl[k] === 'number' && numbers.length < 300) numbers.push(pl[k] as number);
  }
  return { ids: [...points.values()].map((p) => p.id), datetimes, numbers };
}

async function upsert(batch: Point[], uppercaseUuids = false): Promise<void> {
  await call('PUT', `collections/${C}/points?wait=true`, {
    points: batch.map((p) => ({
      id: uppercaseUuids && typeof p.id === 'string' ? p.id.toUpperCase() : p.id,
      vector: p.vector,
      payload: p.payload,
    })),
  });
  for (const p of batch) points.set(keyOf(p.id), p);
}

function newPoint(id: Id): Point {
  const vector = randomVector(r, DIM);
  return { id, vector, unit: unit(vector), payload: randomPayload(r) };
}

const INDEXES_BEFORE: Array<[string, unknown]> = [
  ['kw', 'keyword'],
  ['int', 'integer'],
  ['dt', 'datetime'],
  ['arr[].x', 'integer'],
  ['geo', 'geo'],
  ['mixed', 'keyword'],
];
const INDEXES_AFTER: Array<[string, unknown]> = [
  ['float', 'float'],
  ['flag', 'bool'],
  ['nested.a', { type: 'integer', lookup: true, range: true }],
  ['arr[].y', 'keyword'],
  ['tags', 'keyword'],
  ['nested.c.d', 'float'],
  ['text', 'keyword'],
];

async function waitGreen(): Promise<void> {
  const until = Date.now() + 60_000;
  for (;;) {
    const info = await call('GET', `collections/${C}`);
    if (info.status === 'green') return;
    if (Date.now() > until) throw new Error(`collection still ${info.status} after 60 s`);
    await new Promise((res) => setTimeout(res, 50));
  }
}

test.before(async () => {
  node = await startQuiver();
  await call('PUT', `collections/${C}`, {
    vectors: { size: DIM, distance: 'Cosine' },
    // Small thresholds: the HNSW index is built (2000 x 64 B > 20 KB), and filtered
    // searches above ~160 candidates (10 KB) go through the graph rather than a scan.
    hnsw_config: { m: 16, ef_construct: 100, full_scan_threshold: 10 },
    optimizers_config: { indexing_threshold: 20 },
  });
  for (const [field_name, field_schema] of INDEXES_BEFORE.slice(0, 5)) {
    await call('PUT', `collections/${C}/index?wait=true`, { field_name, field_schema });
  }
  const ids = makeIds(r, INT_IDS, UUID_IDS);
  const all = ids.map(newPoint);
  for (let i = 0; i < all.length; i += 250) await upsert(all.slice(i, i + 250), i === 0);
  for (const [field_name, field_schema] of INDEXES_AFTER.slice(0, 6)) {
    await call('PUT', `collections/${C}/index?wait=true`, { field_name, field_schema });
  }
  await waitGreen();
});

test.after.always(async () => {
  if (node !== undefined) await node.stop();
});

interface Stats {
  filters: number;
  emptyResults: number;
  allResults: number;
  matchedTotal: number;
  approxHits: number;
  approxWanted: number;
  requests: number;
}

function newStats(): Stats {
  return { filters: 0, emptyResults: 0, allResults: 0, matchedTotal: 0, approxHits: 0, approxWanted: 0, requests: 0 };
}

function fail(t: ExecutionContext, i: number, filter: Json, what: string): never {
  t.fail(`seed ${SEED}, filter #${i}: ${what}\nfilter: ${JSON.stringify(filter)}`);
  throw new Error('stop');
}

function diff(want: Id[], got: Id[]): string {
  const w = new Set(want.map(keyOf));
  const g = new Set(got.map(keyOf));
  const missing = want.filter((id) => !g.has(keyOf(id)));
  const extra = got.filter((id) => !w.has(keyOf(id)));
  return `expected ${want.length}, got ${got.length}; missing ${JSON.stringify(missing.slice(0, 10))}${missing.length > 10 ? '...' : ''}, unexpected ${JSON.stringify(extra.slice(0, 10))}${extra.length > 10 ? '...' : ''}`;
}

function describePoint(id: Id): string {
  const p = points.get(keyOf(id));
  return p ? `${JSON.stringify(id)}: ${JSON.stringify(p.payload)}` : `${JSON.stringify(id)}: (no such point)`;
}

/** Checks one filter through scroll, count, exact and approximate query. */
async function checkFilter(t: ExecutionContext, i: number, filter: Obj, stats: Stats): Promise<void> {
  const all = [...points.values()];
  const want = all.filter((p) => evaluate(filter, p.id, p.payload));
  const wantIds = want.map((p) => p.id).sort(idOrder);

  // The oracle against filter.ts's predicate (the semantics the server implements).
  const validated = validateFilter(filter);
  const byFilterTs = all.filter((p) => matches(validated, p.id, p.payload as Record<string, unknown> | null)).map((p) => p.id).sort(idOrder);
  if (byFilterTs.length !== wantIds.length || byFilterTs.some((id, k) => keyOf(id) !== keyOf(wantIds[k]))) {
    const w = new Set(wantIds.map(keyOf));
    const odd = [...byFilterTs.filter((id) => !w.has(keyOf(id))), ...wantIds.filter((id) => !new Set(byFilterTs.map(keyOf)).has(keyOf(id)))];
    fail(t, i, filter, `the test's oracle and ts/shard/filter.ts disagree (oracle ${wantIds.length}, filter.ts ${byFilterTs.length}); e.g. ${odd.slice(0, 3).map(describePoint).join('; ')}`);
  }

  stats.filters++;
  stats.matchedTotal += wantIds.length;
  if (wantIds.length === 0) stats.emptyResults++;
  if (wantIds.length === all.length) stats.allResults++;

  // scroll, every page
  const limit = r.chance(0.15) ? 5 + r.int(60) : r.pick([100 + r.int(400), 1000, 2500]);
  const got: Id[] = [];
  let offset: Id | null = null;
  let pages = 0;
  do {
    const page: any = await call('POST', `collections/${C}/points/scroll`, { filter, limit, offset, with_payload: false });
    stats.requests++;
    if (page.points.length > limit) fail(t, i, filter, `scroll page of ${page.points.length} > limit ${limit}`);
    for (const p of page.points) got.push(p.id);
    offset = page.next_page_offset;
    if (++pages > all.length + 2) fail(t, i, filter, 'scroll does not end');
  } while (offset !== null);
  const sameIds = (a: Id[], b: Id[]) => a.length === b.length && a.every((id, k) => keyOf(id) === keyOf(b[k]));
  if (!sameIds([...got].sort(idOrder), wantIds)) {
    fail(t, i, filter, `scroll (limit ${limit}): ${diff(wantIds, got)}; e.g. ${diffExamples(wantIds, got)}`);
  }
  if (!sameIds(got, wantIds)) fail(t, i, filter, `scroll returned the right ids in the wrong order`);

  // count
  const count = (await call('POST', `collections/${C}/points/count`, { filter, exact: true })).count;
  stats.requests++;
  if (count !== wantIds.length) fail(t, i, filter, `count ${count}, expected ${wantIds.length}`);

  // exact query: all matching points, scored here by brute force
  const q = randomVector(r, DIM);
  const qu = unit(q);
  const exact: any = await call('POST', `collections/${C}/points/query`, { query: q, filter, limit: all.length + 10, params: { exact: true } });
  stats.requests++;
  const exactIds: Id[] = exact.points.map((p: any) => p.id);
  if (!sameIds([...exactIds].sort(idOrder), wantIds)) fail(t, i, filter, `exact query: ${diff(wantIds, exactIds)}; e.g. ${diffExamples(wantIds, exactIds)}`);
  let prev = Infinity;
  for (const h of exact.points) {
    const p = points.get(keyOf(h.id))!;
    const s = cosine(qu, p.unit);
    if (Math.abs(h.score - s) > 1e-4) fail(t, i, filter, `exact query: point ${JSON.stringify(h.id)} scored ${h.score}, brute force ${s}`);
    if (h.score > prev + 1e-6) fail(t, i, filter, 'exact query: results are not best first');
    prev = h.score;
  }

  // approximate query: everything returned must match, with its true score
  const k = r.pick([1, 5, 10, 50]);
  const approx: any = await call('POST', `collections/${C}/points/query`, { query: q, filter, limit: k, params: r.chance(0.5) ? { hnsw_ef: r.pick([16, 64, 128]) } : undefined });
  stats.requests++;
  const wantSet = new Set(wantIds.map(keyOf));
  for (const h of approx.points) {
    if (!wantSet.has(keyOf(h.id))) fail(t, i, filter, `approximate query returned ${describePoint(h.id)}, which does not match`);
    const s = cosine(qu, points.get(keyOf(h.id))!.unit);
    if (Math.abs(h.score - s) > 1e-4) fail(t, i, filter, `approximate query: point ${JSON.stringify(h.id)} scored ${h.score}, brute force ${s}`);
  }
  if (approx.points.length > Math.min(k, wantIds.length)) fail(t, i, filter, `approximate query returned ${approx.points.length} points for limit ${k}`);
  const top = new Set(exactIds.slice(0, k).map(keyOf));
  stats.approxWanted += Math.min(k, wantIds.length);
  stats.approxHits += approx.points.filter((h: any) => top.has(keyOf(h.id))).length;
}

function diffExamples(want: Id[], got: Id[]): string {
  const w = new Set(want.map(keyOf));
  const g = new Set(got.map(keyOf));
  const ex = [...want.filter((id) => !g.has(keyOf(id))).slice(0, 2), ...got.filter((id) => !w.has(keyOf(id))).slice(0, 2)];
  return ex.map(describePoint).join('; ');
}

function canon(x: unknown): string {
  if (Array.isArray(x)) return `[${x.map(canon).join(',')}]`;
  if (x !== null && typeof x === 'object') {
    return `{${Object.keys(x)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canon((x as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(x);
}

/** The server holds exactly the points and payloads the test's model has (so filter failures are about filters). */
async function checkStoredPayloads(t: ExecutionContext): Promise<void> {
  const seen = new Map<string, unknown>();
  let offset: Id | null = null;
  do {
    const page: any = await call('POST', `collections/${C}/points/scroll`, { limit: 1000, offset, with_payload: true });
    for (const p of page.points) seen.set(keyOf(p.id), p.payload);
    offset = page.next_page_offset;
  } while (offset !== null);
  t.is(seen.size, points.size, `seed ${SEED}: number of stored points`);
  let bad = 0;
  for (const [k, p] of points) {
    if (canon(seen.get(k)) !== canon(p.payload ?? {})) {
      if (bad++ < 3) t.fail(`seed ${SEED}: point ${JSON.stringify(p.id)} has payload ${JSON.stringify(seen.get(k))}, the model says ${JSON.stringify(p.payload)}`);
    }
  }
  t.is(bad, 0, `seed ${SEED}: points whose stored payload differs from the model`);
}

const INDEXED_TYPE: Record<string, (v: Json) => boolean> = {
  keyword: (v) => typeof v === 'string',
  text: (v) => typeof v === 'string',
  integer: (v) => Number.isInteger(v),
  float: (v) => typeof v === 'number',
  bool: (v) => typeof v === 'boolean',
  datetime: (v) => typeof v === 'string' && !Number.isNaN(datetimeMs(v)),
  geo: (v) => geoOf(v) !== null,
};

/** payload_schema: every index we created, with the number of points holding a value of its type. */
async function checkPayloadSchema(t: ExecutionContext, created: string[]): Promise<void> {
  const info = await call('GET', `collections/${C}`);
  const schema = info.payload_schema as Record<string, { data_type: string; points: number }>;
  t.deepEqual(Object.keys(schema).sort(), [...new Set(created)].sort(), 'payload_schema lists the created indexes');
  for (const [field, s] of Object.entries(schema)) {
    const pred = INDEXED_TYPE[s.data_type];
    if (!pred) continue;
    const want = [...points.values()].filter((p) => flat(rawValues(p.payload ?? {}, field)).some(pred)).length;
    t.is(s.points, want, `seed ${SEED}: payload_schema.${field} (${s.data_type}) counts ${s.points} points, expected ${want}`);
  }
}

async function round(t: ExecutionContext, n: number, label: string): Promise<void> {
  const ctx = context();
  const stats = newStats();
  const started = Date.now();
  for (let i = 0; i < n; i++) {
    const filter = randomFilter(r, ctx);
    try {
      await checkFilter(t, i, filter, stats);
    } catch (err) {
      if ((err as Error).message !== 'stop') t.fail(`seed ${SEED}, filter #${i}: ${(err as Error).stack}\nfilter: ${JSON.stringify(filter)}`);
      return;
    }
  }
  const recall = stats.approxWanted === 0 ? 1 : stats.approxHits / stats.approxWanted;
  t.log(
    `${label}: seed ${SEED}; ${stats.filters} filters over ${points.size} points in ${Date.now() - started} ms (${stats.requests} requests); ` +
      `${stats.emptyResults} matched nothing, ${stats.allResults} matched everything, ${(stats.matchedTotal / Math.max(1, stats.filters)).toFixed(0)} matches on average; ` +
      `approximate query recall vs exact ${(recall * 100).toFixed(1)}%`,
  );
  t.pass();
}

test.serial('random filters: scroll, count, exact and approximate query agree with brute force', async (t) => {
  t.timeout(180_000);
  await checkPayloadSchema(t, [...INDEXES_BEFORE.slice(0, 5), ...INDEXES_AFTER.slice(0, 6)].map(([f]) => f));
  await round(t, FILTERS, 'round 1');
});

test.serial('random filters after payload updates, deletes, re-upserts and more indexes', async (t) => {
  t.timeout(180_000);
  const ids = [...points.values()].map((p) => p.id);
  const existing = () => [...points.values()].map((p) => p.id);
  const setP = (id: Id, payload: Obj | null) => {
    const p = points.get(keyOf(id))!;
    points.set(keyOf(id), { ...p, payload });
  };

  // set_payload by ids
  for (let j = 0; j < 5; j++) {
    const sel = r.sample(existing(), 40);
    const payload: Obj = { kw: r.pick(['red', 'blue', 'orange']), int: r.between(-20, 20), dt: datetime(r), touched: j };
    if (r.chance(0.5)) payload.tags = [r.pick(['red', 'white']), 'orange'];
    await call('POST', `collections/${C}/points/payload?wait=true`, { payload, points: sel });
    for (const id of sel) setP(id, { ...(points.get(keyOf(id))!.payload ?? {}), ...payload });
  }
  // set_payload by filter (the server resolves the filter; the model uses the oracle)
  for (let j = 0; j < 3; j++) {
    const filter = randomFilter(r, context());
    const payload: Obj = { by_filter: j, flag: r.chance(0.5) };
    await call('POST', `collections/${C}/points/payload?wait=true`, { payload, filter });
    for (const p of [...points.values()]) if (evaluate(filter, p.id, p.payload)) setP(p.id, { ...(p.payload ?? {}), ...payload });
  }
  // overwrite_payload, delete keys (also nested paths), clear
  for (const id of r.sample(existing(), 60)) {
    const payload = randomPayload(r) ?? {};
    await call('PUT', `collections/${C}/points/payload?wait=true`, { payload, points: [id] });
    setP(id, payload);
  }
  {
    const sel = r.sample(existing(), 80);
    await call('POST', `collections/${C}/points/payload/delete?wait=true`, { keys: ['dt', 'geo', 'tags'], points: sel });
    for (const id of sel) {
      const pl = { ...(points.get(keyOf(id))!.payload ?? {}) };
      delete pl.dt;
      delete pl.geo;
      delete pl.tags;
      setP(id, pl);
    }
  }
  {
    const sel = r.sample(existing(), 30);
    await call('POST', `collections/${C}/points/payload/clear?wait=true`, { points: sel });
    for (const id of sel) setP(id, {});
  }
  // deletes by ids and by filter
  {
    const sel = r.sample(existing(), 120);
    await call('POST', `collections/${C}/points/delete?wait=true`, { points: sel });
    for (const id of sel) points.delete(keyOf(id));
    const filter = { must: [{ key: 'kw', match: { value: 'black' } }, { key: 'int', range: { gte: 10 } }] };
    await call('POST', `collections/${C}/points/delete?wait=true`, { filter });
    for (const p of [...points.values()]) if (evaluate(filter, p.id, p.payload)) points.delete(keyOf(p.id));
  }
  // re-upserts: some deleted ids come back, some live ones get new vectors and payloads
  {
    const back = r.sample(ids.filter((id) => !points.has(keyOf(id))), 60);
    const again = r.sample(existing(), 90);
    await upsert([...back, ...again].map(newPoint));
  }
  // more indexes, built over the changed payloads
  for (const [field_name, field_schema] of [...INDEXES_AFTER.slice(6), ...INDEXES_BEFORE.slice(5)]) {
    await call('PUT', `collections/${C}/index?wait=true`, { field_name, field_schema });
  }
  await waitGreen();
  await checkStoredPayloads(t);
  await checkPayloadSchema(t, [...INDEXES_BEFORE, ...INDEXES_AFTER].map(([f]) => f));
  await round(t, FILTERS_AFTER_UPDATES, 'round 2');
});
