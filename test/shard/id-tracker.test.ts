/**
 * Id tracker (ts/shard/id-tracker.ts): id normalisation, offsets never reused,
 * versions never lowered, id/offset order, binary round trip, corruption detection,
 * and a seeded randomized run against a Map-based model. Replay a failure with
 * IDTRACKER_SEED=<seed>.
 */

import test from 'ava';

import {
  IdTracker,
  IdTrackerFormatError,
  PointIdError,
  PointKey,
  U64_MAX,
  compareKeys,
  normalizePointId,
  pointIdToJson,
} from '../../ts/shard/id-tracker';
import { crc32c } from '../../ts/common/crc32c';
import { mulberry32 } from '../support/rng';

const UUID_A = '550e8400-e29b-41d4-a716-446655440000';

// ---------------------------------------------------------------------------------
// Normalisation

test('integer ids: numbers and bigints up to 2^64 - 1', (t) => {
  t.deepEqual(normalizePointId(0), { kind: 'num', value: 0n, key: 'n:0' });
  t.deepEqual(normalizePointId(123), { kind: 'num', value: 123n, key: 'n:123' });
  t.is(normalizePointId(Number.MAX_SAFE_INTEGER).key, `n:${Number.MAX_SAFE_INTEGER}`);
  t.is(normalizePointId(U64_MAX).key, 'n:18446744073709551615');
  t.is(normalizePointId(0n).key, 'n:0');
  t.is(normalizePointId(5n).key, normalizePointId(5).key);
});

test('integer ids out of range or not integers are rejected', (t) => {
  const bad: unknown[] = [-1, -0.5, 1.5, NaN, Infinity, -Infinity, 2 ** 53, 1n << 64n, -1n, 1e300];
  for (const b of bad) {
    const e = t.throws(() => normalizePointId(b), { instanceOf: PointIdError }, String(b));
    t.truthy(e && e.message.startsWith('point id '), e?.message);
  }
  t.is(t.throws(() => normalizePointId(-1))?.message, 'point id -1 is not an unsigned integer or a UUID');
  t.regex(t.throws(() => normalizePointId(1n << 64n))?.message ?? '', /18446744073709551616n is not an unsigned 64-bit integer/);
});

test('UUID forms and case give one canonical key', (t) => {
  const forms = [
    UUID_A,
    UUID_A.toUpperCase(),
    '550E8400-e29b-41D4-A716-446655440000',
    UUID_A.replace(/-/g, ''),
    UUID_A.replace(/-/g, '').toUpperCase(),
  ];
  for (const f of forms) t.deepEqual(normalizePointId(f), { kind: 'uuid', value: UUID_A, key: `u:${UUID_A}` }, f);
});

test('garbage ids are rejected', (t) => {
  const bad: unknown[] = [
    '', '123', '0', 'abc', `${UUID_A}0`, UUID_A.slice(1), `{${UUID_A}}`, UUID_A.replace('5', 'g'),
    '550e8400e29b-41d4-a716-446655440000', ' ' + UUID_A, null, undefined, true, {}, [], [1], { id: 1 },
  ];
  for (const b of bad) t.throws(() => normalizePointId(b), { instanceOf: PointIdError }, JSON.stringify(b) ?? String(b));
  t.regex(t.throws(() => normalizePointId('123'))?.message ?? '', /"123" is not a UUID/);
});

test('pointIdToJson: safe numbers, big values as bigint, canonical UUID', (t) => {
  t.is(pointIdToJson(normalizePointId(7n)), 7);
  t.is(pointIdToJson(normalizePointId(Number.MAX_SAFE_INTEGER)), Number.MAX_SAFE_INTEGER);
  t.is(pointIdToJson(normalizePointId(BigInt(Number.MAX_SAFE_INTEGER) + 1n)), BigInt(Number.MAX_SAFE_INTEGER) + 1n);
  t.is(pointIdToJson(normalizePointId(U64_MAX)), U64_MAX);
  t.is(pointIdToJson(normalizePointId(UUID_A.toUpperCase())), UUID_A);
});

test('crc32c check value', (t) => {
  t.is(crc32c(new TextEncoder().encode('123456789')), 0xe3069283);
  t.is(crc32c(new Uint8Array(0)), 0);
});

// ---------------------------------------------------------------------------------
// Tracker behaviour

test('upsert assigns offsets from 0, keeps the offset of an existing id', (t) => {
  const tr = new IdTracker();
  t.is(tr.nextOffset, 0n);
  t.deepEqual(tr.upsert(10, 1), { offset: 0n, created: true, versionApplied: true });
  t.deepEqual(tr.upsert(UUID_A, 2), { offset: 1n, created: true, versionApplied: true });
  t.deepEqual(tr.upsert(10n, 3), { offset: 0n, created: false, versionApplied: true });
  t.deepEqual(tr.upsert(UUID_A.replace(/-/g, '').toUpperCase(), 4), { offset: 1n, created: false, versionApplied: true });
  t.is(tr.size, 2);
  t.is(tr.nextOffset, 2n);
  t.is(tr.offsetOf(10), 0n);
  t.is(tr.offsetOf(UUID_A), 1n);
  t.is(tr.offsetOf(11), null);
  t.deepEqual(tr.idOf(1n), normalizePointId(UUID_A));
  t.deepEqual(tr.idOf(0), normalizePointId(10));
  t.is(tr.idOf(2n), null);
  t.true(tr.has(10));
  t.false(tr.has(11));
});

test('delete frees the offset, which is never handed out again', (t) => {
  const tr = new IdTracker();
  tr.upsert(1, 1);
  tr.upsert(2, 2);
  t.is(tr.delete(1), 0n);
  t.is(tr.delete(1), null);
  t.is(tr.delete(99), null);
  t.is(tr.idOf(0n), null);
  t.is(tr.version(1), null);
  t.is(tr.size, 1);
  t.deepEqual(tr.upsert(1, 3), { offset: 2n, created: true, versionApplied: true });
  t.is(tr.delete(2), 1n);
  t.is(tr.delete(1), 2n);
  t.is(tr.size, 0);
  t.is(tr.nextOffset, 3n);
  t.is(tr.upsert(3, 4).offset, 3n);
});

test('versions are never lowered', (t) => {
  const tr = new IdTracker();
  tr.upsert(5, 10n);
  t.deepEqual(tr.upsert(5, 7), { offset: 0n, created: false, versionApplied: false });
  t.is(tr.version(5), 10n);
  t.false(tr.upsert(5, 10).versionApplied);
  t.is(tr.version(5), 10n);
  t.true(tr.upsert(5, U64_MAX).versionApplied);
  t.is(tr.version(5), U64_MAX);
  t.is(tr.version(6), null);
});

test('bad versions and bad ids change nothing', (t) => {
  const tr = new IdTracker();
  t.throws(() => tr.upsert(1, -1), { instanceOf: RangeError });
  t.throws(() => tr.upsert(1, 1.5), { instanceOf: RangeError });
  t.throws(() => tr.upsert(1, 1n << 64n), { instanceOf: RangeError });
  t.throws(() => tr.upsert(-1, 1), { instanceOf: PointIdError });
  t.throws(() => tr.delete('nope'), { instanceOf: PointIdError });
  t.throws(() => tr.offsetOf(1.5), { instanceOf: PointIdError });
  t.is(tr.size, 0);
  t.is(tr.nextOffset, 0n);
});

test('iteration: by offset, and by id in reference scroll order', (t) => {
  const tr = new IdTracker();
  const ids: unknown[] = [
    'ffffffff-ffff-ffff-ffff-ffffffffffff', 42, U64_MAX, UUID_A, 0,
    '00000000-0000-0000-0000-000000000001', 2n ** 53n + 1n, 'A0000000000000000000000000000000', 7,
  ];
  ids.forEach((id, i) => tr.upsert(id, i));
  t.deepEqual(
    tr.entriesByOffset().map((e) => e.offset),
    ids.map((_, i) => BigInt(i)),
  );
  t.deepEqual([...tr].map((e) => e.id.key), ids.map((id) => normalizePointId(id).key));
  t.deepEqual(
    tr.entriesById().map((e) => e.id.key),
    [
      'n:0', 'n:7', 'n:42', `n:${2n ** 53n + 1n}`, `n:${U64_MAX}`,
      'u:00000000-0000-0000-0000-000000000001', `u:${UUID_A}`,
      'u:a0000000-0000-0000-0000-000000000000', 'u:ffffffff-ffff-ffff-ffff-ffffffffffff',
    ],
  );
  t.true(compareKeys(normalizePointId(U64_MAX), normalizePointId('00000000000000000000000000000000')) < 0);
  t.is(compareKeys(normalizePointId(3), normalizePointId(3n)), 0);
});

// ---------------------------------------------------------------------------------
// Persistence

function sample(): IdTracker {
  const tr = new IdTracker();
  tr.upsert(1, 1);
  tr.upsert(UUID_A, 2);
  tr.upsert(U64_MAX, 3);
  tr.upsert(2, 4);
  tr.upsert('ffffffff-ffff-ffff-ffff-fffffffffffe', 5);
  tr.delete(2);
  tr.upsert(1, 9);
  tr.delete(UUID_A);
  tr.upsert(3, 6);
  return tr;
}

function sameState(t: import('ava').ExecutionContext, a: IdTracker, b: IdTracker): void {
  t.is(a.size, b.size);
  t.is(a.nextOffset, b.nextOffset);
  t.deepEqual(a.entriesByOffset(), b.entriesByOffset());
}

test('round trip through bytes, including after deletes', (t) => {
  const tr = sample();
  const bytes = tr.toBytes();
  const back = IdTracker.fromBytes(bytes);
  sameState(t, tr, back);
  t.is(back.nextOffset, 6n);
  t.is(back.offsetOf(UUID_A), null);
  t.is(back.version(1), 9n);
  t.deepEqual(back.toBytes(), bytes);
  // New points after a reload still never reuse an offset.
  t.is(back.upsert(UUID_A, 10).offset, 6n);
  // Empty tracker, and a tracker emptied by deletes.
  sameState(t, new IdTracker(), IdTracker.fromBytes(new IdTracker().toBytes()));
  const emptied = new IdTracker();
  emptied.upsert(1, 1);
  emptied.delete(1);
  const e2 = IdTracker.fromBytes(emptied.toBytes());
  t.is(e2.size, 0);
  t.is(e2.nextOffset, 1n);
  // A Uint8Array view into a larger buffer decodes too.
  const padded = new Uint8Array(bytes.length + 10);
  padded.set(bytes, 5);
  sameState(t, tr, IdTracker.fromBytes(padded.subarray(5, 5 + bytes.length)));
});

test('output is deterministic for the same content', (t) => {
  const a = new IdTracker();
  const b = new IdTracker();
  a.upsert(1, 1);
  a.upsert(2, 2);
  b.upsert(1, 1);
  b.upsert(2, 2);
  t.deepEqual(a.toBytes(), b.toBytes());
  t.deepEqual(sample().toBytes(), sample().toBytes());
  t.is(Buffer.from(a.toBytes().subarray(0, 4)).toString('latin1'), 'QIDT');
});

test('corruption: every flipped byte and every truncation is detected', (t) => {
  const bytes = sample().toBytes();
  for (let i = 0; i < bytes.length; i++) {
    for (const mask of [0x01, 0x80, 0xff]) {
      const c = bytes.slice();
      c[i] ^= mask;
      t.throws(() => IdTracker.fromBytes(c), { instanceOf: IdTrackerFormatError }, `byte ${i} ^ ${mask}`);
    }
  }
  for (let n = 0; n < bytes.length; n++) {
    t.throws(() => IdTracker.fromBytes(bytes.subarray(0, n)), { instanceOf: IdTrackerFormatError }, `length ${n}`);
  }
  const longer = new Uint8Array(bytes.length + 1);
  longer.set(bytes);
  t.throws(() => IdTracker.fromBytes(longer), { instanceOf: IdTrackerFormatError });
  t.regex(t.throws(() => IdTracker.fromBytes(new Uint8Array(3)))?.message ?? '', /truncated/);
  t.throws(() => IdTracker.fromBytes('nope' as unknown as Uint8Array), { instanceOf: IdTrackerFormatError });
});

/** Re-seals a body with a valid checksum, to reach the structural checks behind the CRC. */
function reseal(bytes: Uint8Array): Uint8Array {
  const out = bytes.slice();
  new DataView(out.buffer).setUint32(out.length - 4, crc32c(out, 0, out.length - 4), true);
  return out;
}

test('structural checks behind a valid checksum', (t) => {
  const tr = new IdTracker();
  tr.upsert(1, 1);
  tr.upsert(2, 2);
  const good = tr.toBytes();
  const dv = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, b.byteLength);
  const cases: [string, (b: Uint8Array) => void, RegExp][] = [
    ['magic', (b) => (b[0] = 0x58), /bad magic/],
    ['format version', (b) => dv(b).setUint16(4, 2, true), /format version 2/],
    ['flags', (b) => dv(b).setUint16(6, 1, true), /flags/],
    ['counter too low', (b) => dv(b).setBigUint64(8, 1n, true), /not below the counter/],
    ['count too high', (b) => dv(b).setBigUint64(16, 3n, true), /count|truncated/],
    ['count too low', (b) => dv(b).setBigUint64(16, 1n, true), /trailing bytes/],
    ['huge count', (b) => dv(b).setBigUint64(16, U64_MAX, true), /does not fit/],
    ['tag', (b) => (b[24] = 7), /unknown id tag 7/],
    ['duplicate id', (b) => dv(b).setBigUint64(24 + 25 + 1, 1n, true), /duplicate point id n:1/],
    ['offset order', (b) => dv(b).setBigUint64(24 + 25 + 9, 0n, true), /strictly ascending/],
  ];
  for (const [name, mutate, re] of cases) {
    const b = good.slice();
    mutate(b);
    const e = t.throws(() => IdTracker.fromBytes(reseal(b)), { instanceOf: IdTrackerFormatError }, name);
    t.regex(e?.message ?? '', re, name);
  }
});

// ---------------------------------------------------------------------------------
// Randomized comparison with a Map-based model


test('randomized: 20k operations against a Map-based model', (t) => {
  const seed = process.env.IDTRACKER_SEED ? Number(process.env.IDTRACKER_SEED) : 0x1d7ac;
  const rnd = mulberry32(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  const hex = (n: number) => Array.from({ length: n }, () => '0123456789abcdefABCDEF'[int(22)]).join('');

  // A small pool of ids (so updates and re-inserts happen often), written in varying forms.
  const pool: (() => unknown)[] = [];
  for (let i = 0; i < 150; i++) {
    const v = int(4) === 0 ? U64_MAX - BigInt(int(1000)) : BigInt(int(1_000_000));
    pool.push(() => (v <= BigInt(Number.MAX_SAFE_INTEGER) && int(2) === 0 ? Number(v) : v));
  }
  for (let i = 0; i < 150; i++) {
    const h = hex(32);
    pool.push(() => {
      const s = int(2) === 0 ? h.toLowerCase() : h.toUpperCase();
      return int(2) === 0 ? s : `${s.slice(0, 8)}-${s.slice(8, 12)}-${s.slice(12, 16)}-${s.slice(16, 20)}-${s.slice(20)}`;
    });
  }

  const model = new Map<string, { id: PointKey; offset: bigint; version: bigint }>();
  let counter = 0n;
  let tr = new IdTracker();
  let seq = 0n;
  let mismatches = 0;
  const check = (cond: boolean, what: string) => {
    if (!cond && mismatches++ < 5) t.fail(`seed ${seed}: ${what}`);
  };

  for (let op = 0; op < 20_000; op++) {
    const raw = pool[int(pool.length)]();
    const key = normalizePointId(raw);
    const r = rnd();
    if (r < 0.55) {
      // Versions mostly increase, sometimes a stale replay.
      seq += 1n;
      const v = int(5) === 0 ? seq - BigInt(int(50)) : seq;
      const ver = v < 0n ? 0n : v;
      const got = tr.upsert(raw, ver);
      const m = model.get(key.key);
      if (m) {
        const applied = ver > m.version;
        if (applied) m.version = ver;
        check(got.offset === m.offset && !got.created && got.versionApplied === applied, `op ${op} upsert existing ${key.key}`);
      } else {
        model.set(key.key, { id: key, offset: counter, version: ver });
        check(got.offset === counter && got.created && got.versionApplied, `op ${op} upsert new ${key.key}`);
        counter += 1n;
      }
    } else if (r < 0.85) {
      const got = tr.delete(raw);
      const m = model.get(key.key);
      model.delete(key.key);
      check(got === (m ? m.offset : null), `op ${op} delete ${key.key}`);
    } else if (r < 0.99) {
      const m = model.get(key.key);
      check(tr.offsetOf(raw) === (m ? m.offset : null), `op ${op} offsetOf ${key.key}`);
      check(tr.version(raw) === (m ? m.version : null), `op ${op} version ${key.key}`);
      if (m) check(tr.idOf(m.offset)?.key === key.key, `op ${op} idOf ${m.offset}`);
    } else {
      tr = IdTracker.fromBytes(tr.toBytes());
    }
    check(tr.size === model.size && tr.nextOffset === counter, `op ${op} size/counter`);
  }

  // Final full comparison, in both orders, and through bytes.
  const expectByOffset = [...model.values()].sort((a, b) => (a.offset < b.offset ? -1 : 1));
  const expectById = [...model.values()].sort((a, b) => compareKeys(a.id, b.id));
  for (const x of [tr, IdTracker.fromBytes(tr.toBytes())]) {
    t.deepEqual(x.entriesByOffset(), expectByOffset);
    t.deepEqual(x.entriesById(), expectById);
    t.is(x.nextOffset, counter);
  }
  // Every offset handed out is unique: the counter equals the number of creations.
  t.true(counter >= BigInt(model.size));
  t.is(mismatches, 0);
});

test('sortedById stays in scroll order across interleaved adds, deletes and re-adds (incremental merge)', (t) => {
  const rnd = mulberry32(77);
  const tracker = new IdTracker();
  const uuid = () => [8, 4, 4, 4, 12].map((n) => Array.from({ length: n }, () => Math.floor(rnd() * 16).toString(16)).join('')).join('-');
  const ids: Array<number | string> = [];
  for (let round = 0; round < 200; round++) {
    const ops = 1 + Math.floor(rnd() * 40);
    for (let k = 0; k < ops; k++) {
      const r = rnd();
      if (r < 0.55 || ids.length === 0) {
        const id = rnd() < 0.8 ? Math.floor(rnd() * 5000) : uuid();
        tracker.upsert(id, round);
        ids.push(id);
      } else {
        tracker.delete(ids[Math.floor(rnd() * ids.length)]);
      }
    }
    const got = tracker
      .sortedById()
      .filter((e) => !e.removed)
      .map((e) => e.id.key);
    const want = tracker.entriesById().map((e) => e.id.key);
    t.deepEqual(got, want, `round ${round}`);
  }
});

// ---------------------------------------------------------------------------------
// numbersAt: the search answer's id and version without PointKeys or bigints

test('numbersAt gives an integer id and version as numbers, and refuses what at() must answer', (t) => {
  const tr = new IdTracker();
  const small = tr.upsert(7, 3).offset;
  const uuid = tr.upsert(UUID_A, 1).offset;
  const bigId = tr.upsert(2n ** 60n, 1).offset;
  const bigVersion = tr.upsert(8, 2n ** 60n).offset;
  const gone = tr.upsert(9, 1).offset;
  tr.delete(9);
  const out = { id: -1, version: -1 };
  t.true(tr.numbersAt(small, out));
  t.deepEqual(out, { id: 7, version: 3 });
  // Each refusal leaves `out` as it was.
  for (const off of [uuid, bigId, bigVersion, gone, 1000n, 2n ** 60n]) t.false(tr.numbersAt(off, out), String(off));
  t.deepEqual(out, { id: 7, version: 3 });
  // What it gives is what at() gives, as numbers.
  tr.upsert(7, 12);
  t.true(tr.numbersAt(small, out));
  t.deepEqual(out, { id: Number(tr.at(small)!.id.value), version: Number(tr.at(small)!.version) });
});
