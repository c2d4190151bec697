/**
 * Crash safety at the WAL retention boundary: with 1 MB WAL segments and 1 MB of
 * retained history (SERVICE__STORAGE__WAL__WAL_CAPACITY_MB=1) and a checkpoint every
 * second, writers upsert with wait=true while checkpoints drop whole old segments;
 * the server is SIGKILLed right after it has dropped one (or a few acknowledged writes
 * later). Then, with the server down, the shard directory is checked: the WAL opens,
 * its oldest retained record is at or before the checkpoint's applied_seq + 1 (no gap
 * between history and replay), every retained record is there in order, carries this
 * node's clock tag, and each clock's ticks rise by one; at least 1 MB is kept. After a
 * restart every acknowledged write is present, and a write in flight at the kill is
 * there entirely or not at all.
 *
 * Every wait is for a condition (a segment dropped, a number of acknowledgements, the
 * process gone), never a fixed sleep. QUIVER_WALHIST_CYCLES (default 4) sets the
 * number of kills.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { loadEngine } from '../../bindings';
import type { ClockTag } from '../../ts/shard/clocks';
import { recordTag } from '../../ts/shard/operations';
import { startServer, type Server } from './server';
import { mulberry32 } from '../support/rng';
import { waitFor } from '../support/wait';

const CYCLES = Number(process.env.QUIVER_WALHIST_CYCLES ?? 4);
const COLLECTION = 'walhist';
const DIM = 64;
const BATCH = 40;
const WRITERS = 2;
const RETAIN = 1 << 20;
const ENV = { SERVICE__STORAGE__WAL__WAL_CAPACITY_MB: '1', SERVICE__LOG_LEVEL: 'INFO' };

const rng = mulberry32(0x5eed);
const engine = loadEngine({ logger: { info() {} } });

let storageDir = '';
let server: Server | undefined;
/** id -> the writer's sequence number n in its payload, for every acknowledged upsert. */
const acked = new Map<number, number>();
const nextId = [1, 1_000_001];

const shardDir = () => path.join(storageDir, 'storage', 'collections', COLLECTION, '0');
const walDir = () => path.join(shardDir(), 'wal');

async function ok(method: string, urlPath: string, body?: unknown): Promise<any> {
  const res = await fetch(`${server!.url}/${urlPath}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${method} /${urlPath} -> ${res.status}: ${text.slice(0, 500)}`);
  return (JSON.parse(text) as { result: unknown }).result;
}

/** First sequence numbers of the WAL segment files, oldest first. */
function segments(): bigint[] {
  return fs
    .readdirSync(walDir())
    .filter((n) => /^[0-9]{20}\.wal$/.test(n))
    .sort()
    .map((n) => BigInt(n.slice(0, 20)));
}

interface Writers {
  stop: { killed: boolean };
  done: Promise<void>;
  acks: () => number;
  /** Ids of the request each writer had in flight when it stopped (answered or not). */
  inFlight: number[][];
}

function startWriters(srv: Server): Writers {
  const stop = { killed: false };
  let count = 0;
  const inFlight: number[][] = [];
  const one = async (w: number) => {
    let n = 0;
    while (!stop.killed) {
      const ids = Array.from({ length: BATCH }, () => nextId[w]++);
      n++;
      const points = ids.map((id) => ({ id, vector: Array.from({ length: DIM }, () => rng() - 0.5), payload: { w, n } }));
      inFlight[w] = ids;
      let status = 0;
      try {
        const res = await fetch(`${srv.url}/collections/${COLLECTION}/points?wait=true`, {
          method: 'PUT',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ points }),
        });
        status = res.status;
        await res.text();
      } catch {
        return; // the server died with this request in flight
      }
      if (status !== 200) return;
      for (const id of ids) acked.set(id, n);
      inFlight[w] = [];
      count++;
    }
  };
  const done = Promise.all(Array.from({ length: WRITERS }, (_, w) => one(w))).then(() => undefined);
  return { stop, done, acks: () => count, inFlight };
}

/** With the server down: the retained WAL is contiguous up to the checkpoint and tagged by this node. */
async function checkRetainedHistory(): Promise<{ oldest: bigint; applied: bigint; last: bigint; bytes: number }> {
  const cp = JSON.parse(fs.readFileSync(path.join(shardDir(), 'checkpoint.json'), 'utf8')) as { applied_seq: string; clocks?: unknown[] };
  const applied = BigInt(cp.applied_seq);
  const segs = segments();
  const bytes = fs
    .readdirSync(walDir())
    .filter((n) => n.endsWith('.wal'))
    .reduce((s, n) => s + fs.statSync(path.join(walDir(), n)).size, 0);
  const peer = BigInt(fs.readFileSync(path.join(storageDir, 'storage', 'peer_id'), 'utf8').trim());
  const wal = await engine.openWal(walDir(), { segmentBytes: RETAIN });
  try {
    const oldest = wal.firstSeq();
    if (oldest !== segs[0]) throw new Error(`the WAL starts at ${oldest}, its first segment is named ${segs[0]}`);
    if (oldest > applied + 1n) throw new Error(`gap: the oldest retained record is ${oldest}, the checkpoint covers up to ${applied}`);
    const last = wal.lastSeq();
    if (last < applied) throw new Error(`the WAL ends at ${last}, before the checkpoint's ${applied}`);
    let expect = oldest;
    const ticks = new Map<number, bigint>();
    for (let at = oldest; at <= last; ) {
      const page = await wal.readFrom(at, 256);
      for (const r of page) {
        if (r.seq !== expect) throw new Error(`record ${r.seq} where ${expect} was expected`);
        expect++;
        const tag = recordTag(r.data) as ClockTag;
        if (tag === null || tag.peer !== peer) throw new Error(`record ${r.seq} is tagged ${JSON.stringify(tag && String(tag.peer))}, not by this node (${peer})`);
        const prev = ticks.get(tag.clock);
        if (prev !== undefined && tag.tick !== prev + 1n) throw new Error(`clock ${tag.clock}: tick ${tag.tick} after ${prev} (record ${r.seq})`);
        ticks.set(tag.clock, tag.tick);
      }
      at = page[page.length - 1].seq + 1n;
    }
    if (expect !== last + 1n) throw new Error(`read up to ${expect - 1n}, the WAL ends at ${last}`);
    return { oldest, applied, last, bytes };
  } finally {
    await wal.close();
  }
}

test.before(async () => {
  storageDir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-walhist-crash-'));
  server = await startServer(storageDir, ENV);
  await ok('PUT', `collections/${COLLECTION}`, {
    vectors: { size: DIM, distance: 'Cosine' },
    optimizers_config: { flush_interval_sec: 1, indexing_threshold: 0 },
  });
  const info = await ok('GET', `collections/${COLLECTION}`);
  if (info.config.wal_config.wal_capacity_mb !== 1) throw new Error(`wal_capacity_mb is ${info.config.wal_config.wal_capacity_mb}, not 1`);
});

test.after.always(async () => {
  if (server) await server.stop('SIGTERM');
  if (storageDir) fs.rmSync(storageDir, { recursive: true, force: true });
});

for (let cycle = 1; cycle <= CYCLES; cycle++) {
  test.serial(`kill -9 at the retention boundary, cycle ${cycle}/${CYCLES}`, async (t) => {
    t.timeout(180_000);
    const srv = server!;
    const oldestAtStart = segments()[0];
    const writers = startWriters(srv);
    // Until a checkpoint has dropped a segment at the retention limit in this cycle,
    // then (every other cycle) a few more acknowledged writes, so the kill lands both
    // right after a drop and in between.
    await waitFor('a checkpoint that drops a WAL segment', () => segments()[0] > oldestAtStart, 60_000, 5);
    const extra = cycle % 2 === 0 ? 1 + Math.floor(rng() * 20) : 0;
    const target = writers.acks() + extra;
    await waitFor(`${extra} more acknowledged writes`, () => writers.acks() >= target, 60_000, 5);
    writers.stop.killed = true;
    const [, signal] = await srv.stop('SIGKILL');
    await writers.done;
    t.is(signal, 'SIGKILL');
    server = undefined;

    const h = await checkRetainedHistory();
    t.true(h.bytes >= RETAIN, `at least ${RETAIN} bytes of WAL kept (${h.bytes})`);
    t.log(`history ${h.oldest}..${h.last}, checkpoint ${h.applied}, ${h.bytes} WAL bytes; ${acked.size} points acknowledged`);

    server = await startServer(storageDir, ENV);
    const loaded = server.logLines().find((l) => l.msg === 'shard loaded');
    t.is(String(loaded?.checkpoint), String(h.applied));
    t.is(Number(loaded?.replayed), Number(h.last - h.applied), 'replay starts after the checkpoint, not at the oldest retained record');

    const seen = new Map<number, number>();
    let offset: unknown = null;
    do {
      const page = await ok('POST', `collections/${COLLECTION}/points/scroll`, { limit: 2000, offset, with_payload: true, with_vector: false });
      for (const p of page.points) seen.set(p.id, p.payload.n);
      offset = page.next_page_offset;
    } while (offset !== null && offset !== undefined);
    const missing = [...acked].filter(([id, n]) => seen.get(id) !== n).map(([id]) => id);
    t.deepEqual(missing.slice(0, 20), [], `${missing.length} acknowledged points missing or wrong`);
    for (const ids of writers.inFlight) {
      if (!ids || ids.length === 0) continue;
      const present = ids.filter((id) => seen.has(id)).length;
      t.true(present === 0 || present === ids.length, `a write in flight at the kill is all there or not at all (${present} of ${ids.length})`);
      if (present === ids.length) for (const id of ids) acked.set(id, seen.get(id)!);
    }
    t.is(seen.size, acked.size, 'no points other than the acknowledged ones and whole in-flight writes');
  });
}

test.serial('after the kills, a clean shutdown leaves contiguous tagged history and nothing to replay', async (t) => {
  t.timeout(60_000);
  const [code] = await server!.stop('SIGTERM');
  t.is(code, 0);
  server = undefined;
  const h = await checkRetainedHistory();
  t.is(h.applied, h.last, 'the shutdown checkpoint covers the whole WAL');
  server = await startServer(storageDir, ENV);
  t.is(Number(server.logLines().find((l) => l.msg === 'shard loaded')?.replayed), 0);
  t.is((await ok('POST', `collections/${COLLECTION}/points/count`, { exact: true })).count, acked.size);
});
