/**
 * The snapshot round trip that must hold, on real bin/quiver processes:
 *
 * A 2-shard collection with named vectors, payloads and payload indexes takes
 * `wait=true` upserts, payload updates, vector updates and deletes from several
 * concurrent writers while `POST /collections/{c}/snapshots` (and later `POST
 * /snapshots`) runs. A model keeps every point's history of states, what had been
 * acknowledged when the snapshot call was sent (the lower bound) and what had been sent
 * when its answer came (the upper bound). A recovered collection must hold, for every
 * point, exactly one state of its history between the two bounds: every write
 * acknowledged before the call is there, later ones may or may not be, and nothing is
 * torn (a vector of one write with the payload of another, a half-applied update).
 *
 * Recoveries: upload, file://, the server's own http download URL, `--snapshot` at
 * start-up (and its refusal of an existing collection without `--force_snapshot`),
 * `--storage-snapshot` (aliases included), and S3 (moto) by name. Each recovered
 * collection must take writes afterwards and come back the same after a restart.
 * Then the priority rules on one node, and a shard snapshot round trip.
 *
 * Tests are serial and share state (the snapshot files of the first one).
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';

import test, { type ExecutionContext } from 'ava';

import { BIN, freePort } from '../api/helpers';
import { mulberry32 } from '../support/rng';
import { createBucket, s3Client, s3Env, startMotoServer, type MotoServer } from '../support/s3';
import { IDLE_CONNECTION_SEC, START_DEADLINE_MS, waitFor } from '../support/wait';
import { crc32c } from '../../ts/common/crc32c';

// -- servers ------------------------------------------------------------------------------------

interface Node {
  dir: string;
  url: string;
  child: ChildProcess;
  output(): string;
  stop(): Promise<number | null>;
}

const started: Node[] = [];
const tempDirs: string[] = [];

function envFor(dir: string, port: number, extra: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('SERVICE__')) env[k] = v;
  return {
    ...env,
    SERVICE__SERVICE__HOST: '127.0.0.1',
    SERVICE__SERVICE__HTTP_PORT: String(port),
    SERVICE__SERVICE__GRPC_PORT: 'null',
    SERVICE__STORAGE__STORAGE_PATH: path.join(dir, 'storage'),
    SERVICE__STORAGE__SNAPSHOTS_PATH: path.join(dir, 'snapshots'),
    SERVICE__LOG_LEVEL: 'INFO',
    SERVICE__SERVICE__HTTP_KEEP_ALIVE_TIMEOUT_SEC: String(IDLE_CONNECTION_SEC),
    ...extra,
  };
}

/** Starts bin/quiver on `dir` (kept across restarts) with CLI `args`; resolves once it listens. */
async function launch(dir: string, args: string[] = [], extraEnv: Record<string, string> = {}, timeoutMs = START_DEADLINE_MS): Promise<Node> {
  const port = await freePort();
  const child = spawn(process.execPath, [BIN, ...args], { cwd: dir, env: envFor(dir, port, extraEnv), stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  // 'close', not 'exit': at 'exit' the last output may still be in the pipes.
  const exited = new Promise<number | null>((resolve) => child.once('close', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`quiver ${args.join(' ')} did not start within ${timeoutMs} ms: ${out.slice(-3000)}`));
    }, timeoutMs);
    const onData = () => {
      if (out.includes('"REST API listening"')) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`quiver ${args.join(' ')} exited with ${code} before listening: ${out.slice(-3000)}`));
    });
  });
  const node: Node = {
    dir,
    url: `http://127.0.0.1:${port}`,
    child,
    output: () => out,
    stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      return exited;
    },
  };
  started.push(node);
  return node;
}

/** Runs bin/quiver on `dir` with `args` expecting it to stop by itself; kills it after `timeoutMs`. */
async function runToExit(dir: string, args: string[], timeoutMs = START_DEADLINE_MS): Promise<{ code: number | null; output: string; listened: boolean }> {
  const port = await freePort();
  const child = spawn(process.execPath, [BIN, ...args], { cwd: dir, env: envFor(dir, port, {}), stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (out += c.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  const code = await new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  clearTimeout(timer);
  return { code, output: out, listened: out.includes('"REST API listening"') };
}

async function tempDir(prefix: string): Promise<string> {
  const d = await fs.mkdtemp(path.join(os.tmpdir(), `quiver-roundtrip-${prefix}-`));
  tempDirs.push(d);
  return d;
}

// -- REST -----------------------------------------------------------------------------------------

interface Reply {
  status: number;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
  text: string;
}

async function call(url: string, method: string, p: string, body?: unknown): Promise<Reply> {
  const res = await fetch(url + p, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(60_000),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = JSON.parse(text);
  } catch {
    // a download
  }
  return { status: res.status, json, text };
}

/** A call that must answer 200; returns `result`. */
async function ok(url: string, method: string, p: string, body?: unknown): Promise<any> {
  const r = await call(url, method, p, body);
  if (r.status !== 200) throw new Error(`${method} ${p}: HTTP ${r.status} ${r.text.slice(0, 500)}`);
  return r.json.result;
}

async function downloadBytes(url: string, p: string): Promise<Buffer> {
  const res = await fetch(url + p, { signal: AbortSignal.timeout(60_000) });
  const bytes = Buffer.from(await res.arrayBuffer());
  if (res.status !== 200) throw new Error(`GET ${p}: HTTP ${res.status} ${bytes.toString('utf8', 0, 300)}`);
  return bytes;
}

async function uploadSnapshot(url: string, collection: string, bytes: Buffer, query: string): Promise<Reply> {
  const form = new FormData();
  form.append('snapshot', new Blob([new Uint8Array(bytes)]), 'upload.snapshot');
  const res = await fetch(`${url}/collections/${collection}/snapshots/upload?${query}`, { method: 'POST', body: form, signal: AbortSignal.timeout(60_000) });
  const text = await res.text();
  return { status: res.status, json: JSON.parse(text), text };
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

// -- points and the model -------------------------------------------------------------------------

type Vectors = { a: number[]; b?: number[] };
type State = null | { v: Vectors; p: Record<string, unknown> };
type Contents = Map<number, Exclude<State, null>>;

/** Keys sorted at every level, so equal states compare equal as strings. */
function canon(x: unknown): string {
  if (Array.isArray(x)) return `[${x.map(canon).join(',')}]`;
  if (x !== null && typeof x === 'object') {
    const o = x as Record<string, unknown>;
    return `{${Object.keys(o)
      .filter((k) => o[k] !== undefined)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canon(o[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(x);
}

const A_DIM = 16;
const B_DIM = 4;
const KINDS = ['red', 'green', 'blue', 'black'];

/** Vector components that float32 holds exactly (multiples of 1/4 in [-8, 8]). */
function vec(rnd: () => number, dim: number): number[] {
  return Array.from({ length: dim }, () => Math.round((rnd() * 2 - 1) * 32) / 4);
}

const NAMED_CONFIG = {
  vectors: { a: { size: A_DIM, distance: 'Dot' }, b: { size: B_DIM, distance: 'Euclid' } },
  shard_number: 2,
  // A short flush interval (checkpoints happen while the writers run) and a low indexing
  // threshold (graph builds run while the snapshots are taken).
  optimizers_config: { flush_interval_sec: 1, indexing_threshold: 20 },
};

/** Every point id's history of states, and what was acknowledged or sent at given moments. */
class Model {
  readonly hist = new Map<number, State[]>();
  /** Index in hist of the last acknowledged state of each id. */
  readonly acked = new Map<number, number>();
  writes = 0;

  state(id: number): State {
    const h = this.hist.get(id);
    return h ? h[h.length - 1] : null;
  }

  /** A write about to be sent: its states join the histories; resolves the ack later. */
  send(changes: Array<[number, State]>): () => void {
    const idx: Array<[number, number]> = [];
    for (const [id, s] of changes) {
      let h = this.hist.get(id);
      if (!h) {
        h = [null];
        this.hist.set(id, h);
        this.acked.set(id, 0);
      }
      h.push(s);
      idx.push([id, h.length - 1]);
    }
    return () => {
      this.writes++;
      for (const [id, i] of idx) this.acked.set(id, Math.max(this.acked.get(id)!, i));
    };
  }

  /** The acknowledged index of every id now. */
  ackedNow(): Map<number, number> {
    return new Map(this.acked);
  }

  /** The newest sent index of every id now. */
  sentNow(): Map<number, number> {
    return new Map([...this.hist].map(([id, h]) => [id, h.length - 1]));
  }

  /** The acknowledged state of every present point (the model when nothing is in flight). */
  current(): Contents {
    const out: Contents = new Map();
    for (const [id, h] of this.hist) {
      const s = h[this.acked.get(id)!];
      if (s !== null) out.set(id, s);
    }
    return out;
  }
}

interface Bounds {
  lower: Map<number, number>;
  upper: Map<number, number>;
}

async function upsertPoints(url: string, coll: string, points: Array<{ id: number; v: Vectors; p: Record<string, unknown> }>): Promise<void> {
  for (let i = 0; i < points.length; i += 500) {
    await ok(url, 'PUT', `/collections/${coll}/points?wait=true`, {
      points: points.slice(i, i + 500).map((x) => ({ id: x.id, vector: x.v, payload: x.p })),
    });
  }
}

/**
 * One writer: owns the ids `id % writers === w` in [1, maxId], and sends wait=true
 * writes to them one after another (so each id's history is a sequence) until `stop()`.
 */
async function writer(url: string, coll: string, model: Model, w: number, writers: number, maxId: number, seed: number, stop: () => boolean, failures: string[]): Promise<void> {
  const rnd = mulberry32(seed);
  const owned = Array.from({ length: Math.floor(maxId / writers) }, (_, k) => k * writers + w + 1).filter((id) => id <= maxId);
  const pick = (n: number, present: boolean | null) => {
    const pool = present === null ? owned : owned.filter((id) => (model.state(id) !== null) === present);
    const out = new Set<number>();
    for (let i = 0; i < n * 3 && out.size < n && pool.length > 0; i++) out.add(pool[Math.floor(rnd() * pool.length)]);
    return [...out];
  };
  let seq = 0;
  while (!stop()) {
    seq++;
    const op = rnd();
    let method = 'POST';
    let p: string;
    let body: unknown;
    let changes: Array<[number, State]>;
    if (op < 0.35) {
      const ids = pick(1 + Math.floor(rnd() * 4), null);
      const pts = ids.map((id) => {
        const v: Vectors = rnd() < 0.8 ? { a: vec(rnd, A_DIM), b: vec(rnd, B_DIM) } : { a: vec(rnd, A_DIM) };
        return { id, v, p: { w, seq, kind: KINDS[Math.floor(rnd() * KINDS.length)], num: Math.floor(rnd() * 1000), nested: { seq, tag: `t${seq % 5}` } } };
      });
      method = 'PUT';
      p = `/collections/${coll}/points?wait=true`;
      body = { points: pts.map((x) => ({ id: x.id, vector: x.v, payload: x.p })) };
      changes = pts.map((x) => [x.id, { v: x.v, p: x.p }]);
    } else if (op < 0.55) {
      const ids = pick(1 + Math.floor(rnd() * 3), true);
      const patch = { kind: KINDS[Math.floor(rnd() * KINDS.length)], set_seq: seq };
      p = `/collections/${coll}/points/payload?wait=true`;
      body = { points: ids, payload: patch };
      changes = ids.map((id) => {
        const s = model.state(id)!;
        return [id, { v: s.v, p: { ...s.p, ...patch } }];
      });
    } else if (op < 0.65) {
      const ids = pick(1 + Math.floor(rnd() * 2), true);
      const payload = { kind: KINDS[Math.floor(rnd() * KINDS.length)], over: seq, num: seq };
      p = `/collections/${coll}/points/payload?wait=true`;
      changes = ids.map((id) => [id, { v: model.state(id)!.v, p: payload }]);
      // PUT overwrites the payload.
      const r = await sendWrite(url, 'PUT', p, { points: ids, payload }, model, changes, failures);
      if (!r) return;
      continue;
    } else if (op < 0.72) {
      const ids = pick(1 + Math.floor(rnd() * 2), true);
      p = `/collections/${coll}/points/payload/delete?wait=true`;
      body = { points: ids, keys: ['nested', 'set_seq'] };
      changes = ids.map((id) => {
        const s = model.state(id)!;
        const np = { ...s.p };
        delete np.nested;
        delete np.set_seq;
        return [id, { v: s.v, p: np }];
      });
    } else if (op < 0.85) {
      const ids = pick(1 + Math.floor(rnd() * 2), true);
      const fresh = new Map(ids.map((id) => [id, vec(rnd, A_DIM)]));
      p = `/collections/${coll}/points/vectors?wait=true`;
      body = { points: ids.map((id) => ({ id, vector: { a: fresh.get(id) } })) };
      changes = ids.map((id) => {
        const s = model.state(id)!;
        return [id, { v: { ...s.v, a: fresh.get(id)! }, p: s.p }];
      });
      const r = await sendWrite(url, 'PUT', p, body, model, changes, failures);
      if (!r) return;
      continue;
    } else {
      const ids = pick(1 + Math.floor(rnd() * 2), true);
      p = `/collections/${coll}/points/delete?wait=true`;
      body = { points: ids };
      changes = ids.map((id) => [id, null]);
    }
    if (changes.length === 0) continue;
    if (!(await sendWrite(url, method, p, body, model, changes, failures))) return;
  }
}

async function sendWrite(url: string, method: string, p: string, body: unknown, model: Model, changes: Array<[number, State]>, failures: string[]): Promise<boolean> {
  if (changes.length === 0) return true;
  const ack = model.send(changes);
  const r = await call(url, method, p, body);
  if (r.status !== 200 || r.json?.result?.status !== 'completed') {
    failures.push(`${method} ${p} ${JSON.stringify(body).slice(0, 200)} -> ${r.status} ${r.text.slice(0, 300)}`);
    return false;
  }
  ack();
  return true;
}

/** Every point of `coll` with its vectors and payload. */
async function contentsOf(url: string, coll: string): Promise<Contents> {
  const out: Contents = new Map();
  let offset: unknown = null;
  for (;;) {
    const body: Record<string, unknown> = { limit: 2000, with_vector: true, with_payload: true };
    if (offset !== null) body.offset = offset;
    const r = await ok(url, 'POST', `/collections/${coll}/points/scroll`, body);
    for (const pt of r.points as Array<{ id: number; vector: Vectors | number[]; payload: Record<string, unknown> | null }>) {
      if (out.has(pt.id)) throw new Error(`scroll of ${coll} returned point ${pt.id} twice`);
      out.set(pt.id, { v: pt.vector as Vectors, p: pt.payload ?? {} });
    }
    offset = r.next_page_offset;
    if (offset === null || offset === undefined) break;
  }
  const count = (await ok(url, 'POST', `/collections/${coll}/points/count`, { exact: true })).count;
  if (count !== out.size) throw new Error(`count of ${coll} is ${count}, scroll returned ${out.size} points`);
  return out;
}

function sameContents(t: ExecutionContext, actual: Contents, expected: Contents, what: string): void {
  const missing = [...expected.keys()].filter((id) => !actual.has(id));
  const extra = [...actual.keys()].filter((id) => !expected.has(id));
  const differ = [...expected.keys()].filter((id) => actual.has(id) && canon(actual.get(id)) !== canon(expected.get(id)));
  t.deepEqual(
    { missing: missing.slice(0, 10), extra: extra.slice(0, 10), differ: differ.slice(0, 10).map((id) => ({ id, got: actual.get(id), want: expected.get(id) })) },
    { missing: [], extra: [], differ: [] },
    `${what}: ${missing.length} missing, ${extra.length} extra, ${differ.length} different points`,
  );
}

/**
 * The round-trip rule: for every id, the recovered state (absent counts) is one of its
 * states between the acknowledged index when the call was sent and the newest index
 * sent when the answer came. Ids the model never saw must be absent.
 */
function withinBounds(t: ExecutionContext, got: Contents, model: Model, b: Bounds, what: string): void {
  const problems: string[] = [];
  let newer = 0;
  for (const [id, h] of model.hist) {
    const lo = b.lower.get(id) ?? 0;
    const hi = b.upper.get(id) ?? 0;
    const actual = canon(got.get(id) ?? null);
    let found = -1;
    for (let k = hi; k >= lo; k--) {
      if (canon(h[k]) === actual) {
        found = k;
        break;
      }
    }
    if (found < 0) {
      const older = h.slice(0, lo).some((s) => canon(s) === actual);
      const later = h.slice(hi + 1).some((s) => canon(s) === actual);
      const why = older
        ? 'an OLDER state than the acknowledged one (a write acknowledged before the snapshot call is missing)'
        : later
          ? 'the state of a write sent after the snapshot call answered'
          : 'a state no write produced (torn or foreign)';
      problems.push(`point ${id}: ${why}; got ${actual.slice(0, 200)}, acknowledged ${canon(h[lo]).slice(0, 200)}`);
    } else if (found > lo) newer++;
  }
  for (const id of got.keys()) if (!model.hist.has(id)) problems.push(`point ${id}: never written`);
  t.deepEqual(problems.slice(0, 8), [], `${what}: ${problems.length} points break the round-trip rule`);
  t.log(`${what}: ${model.hist.size} ids checked, ${newer} hold a write that was in flight during the snapshot call`);
}

/** Checks the payload indexes came back and agree with the data (filtered counts). */
async function indexesWork(t: ExecutionContext, url: string, coll: string, got: Contents, what: string): Promise<void> {
  const info = await ok(url, 'GET', `/collections/${coll}`);
  t.is(info.payload_schema?.kind?.data_type, 'keyword', `${what}: keyword index on kind`);
  t.is(info.payload_schema?.num?.data_type, 'integer', `${what}: integer index on num`);
  t.is(info.config.params.shard_number, 2, `${what}: shard_number`);
  t.deepEqual(info.config.params.vectors, NAMED_CONFIG.vectors, `${what}: vectors`);
  for (const kind of KINDS) {
    const c = (await ok(url, 'POST', `/collections/${coll}/points/count`, { exact: true, filter: { must: [{ key: 'kind', match: { value: kind } }] } })).count;
    t.is(c, [...got.values()].filter((s) => s.p.kind === kind).length, `${what}: count of kind=${kind}`);
  }
  const ranged = (await ok(url, 'POST', `/collections/${coll}/points/count`, { exact: true, filter: { must: [{ key: 'num', range: { gte: 100, lt: 600 } }] } })).count;
  t.is(ranged, [...got.values()].filter((s) => typeof s.p.num === 'number' && s.p.num >= 100 && s.p.num < 600).length, `${what}: count of num in [100, 600)`);
  // Searches find points by their own vectors (the vector indexes agree with the data).
  const withB = [...got].filter(([, s]) => s.v.b !== undefined);
  for (let i = 0; i < withB.length; i += Math.max(1, Math.floor(withB.length / 5))) {
    const [id, s] = withB[i];
    const r = await ok(url, 'POST', `/collections/${coll}/points/query`, { query: s.v.b, using: 'b', limit: 1 });
    t.is(r.points[0]?.score, 0, `${what}: the nearest b vector to point ${id}'s own is at distance 0`);
  }
}

/** Writes to a recovered collection (an upsert, a payload update, a delete); returns the contents expected afterwards. */
async function writeAfter(url: string, coll: string, before: Contents): Promise<Contents> {
  const after: Contents = new Map([...before].map(([id, s]) => [id, { v: s.v, p: { ...s.p } }]));
  const fresh = { v: { a: Array.from({ length: A_DIM }, (_, i) => i / 4), b: [1, 2, 3, 4] }, p: { kind: 'red', num: 7, after: true } };
  await ok(url, 'PUT', `/collections/${coll}/points?wait=true`, { points: [{ id: 900_001, vector: fresh.v, payload: fresh.p }] });
  after.set(900_001, fresh);
  const ids = [...before.keys()].sort((x, y) => x - y);
  await ok(url, 'POST', `/collections/${coll}/points/payload?wait=true`, { points: [ids[0]], payload: { touched: 1 } });
  after.get(ids[0])!.p.touched = 1;
  await ok(url, 'POST', `/collections/${coll}/points/delete?wait=true`, { points: [ids[ids.length - 1]] });
  after.delete(ids[ids.length - 1]);
  return after;
}

// -- the shared scenario --------------------------------------------------------------------------

const COLL = 'rt';
const PLAIN = 'rt_plain';
const ALIAS = 'rt_alias';
const MAX_ID = 3500;
const INITIAL = 3000;
const WRITERS = 4;

let nodeA: Node;
let dirA: string;
let model: Model;
let boundsS: Bounds;
let boundsF: Bounds;
let snapS: { name: string; checksum: string; size: number };
let snapF: { name: string; checksum: string; size: number };
let fileS: string;
let fileF: string;
let plainContents: Contents;
/** The contents the first recovery produced; every other recovery from the same snapshot must equal it. */
let recovered: Contents | null = null;

test.after.always(async () => {
  await Promise.all(started.map((n) => n.stop()));
  await Promise.all(tempDirs.map((d) => fs.rm(d, { recursive: true, force: true })));
});

/** What each shard's checkpoint.json names as its applied_seq (null where there is none yet). */
async function checkpointSeqs(dir: string, coll: string): Promise<Array<unknown>> {
  const shards = path.join(dir, 'storage', 'collections', coll);
  return Promise.all(
    [0, 1].map(async (shard) => {
      try {
        return (JSON.parse(await fs.readFile(path.join(shards, String(shard), 'checkpoint.json'), 'utf8')) as { applied_seq: unknown }).applied_seq;
      } catch {
        return null;
      }
    }),
  );
}

/**
 * Runs the writers around `snapshotCall`; returns its answer and the bounds. The call is
 * sent once the writers are under way (acknowledged writes, and a checkpoint of every
 * shard taken since they started), and the writers stop only after more writes were
 * acknowledged after its answer: conditions, so a slow machine does not shrink the
 * scenario to a snapshot of an idle collection.
 */
async function underLoad(t: ExecutionContext, url: string, seed: number, snapshotCall: () => Promise<Reply>): Promise<{ reply: Reply; bounds: Bounds }> {
  let stopping = false;
  const failures: string[] = [];
  const checkpointsAtStart = await checkpointSeqs(dirA, COLL);
  const writesAtStart = model.writes;
  const writers = Array.from({ length: WRITERS }, (_, w) => writer(url, COLL, model, w, WRITERS, MAX_ID, seed * 100 + w, () => stopping, failures));
  await waitFor('writes acknowledged and a checkpoint of every shard while the writers run', async () => {
    if (failures.length > 0) return true;
    const seqs = await checkpointSeqs(dirA, COLL);
    return model.writes >= writesAtStart + 10 * WRITERS && seqs.every((seq, i) => seq !== null && seq !== checkpointsAtStart[i]);
  });
  const writesBefore = model.writes;
  const lower = model.ackedNow();
  const reply = await snapshotCall();
  const upper = model.sentNow();
  const writesDuring = model.writes - writesBefore;
  const writesAtReply = model.writes;
  await waitFor('writes acknowledged after the snapshot call answered', () => failures.length > 0 || model.writes >= writesAtReply + WRITERS);
  stopping = true;
  await Promise.all(writers);
  t.deepEqual(failures, [], 'every write was acknowledged');
  t.log(`${writesBefore} writes acknowledged before the snapshot call, ${writesDuring} while it ran, ${model.writes} in all`);
  return { reply, bounds: { lower, upper } };
}

test.serial('under concurrent wait=true writes: a collection snapshot and a full snapshot are created', async (t) => {
  dirA = await tempDir('a');
  nodeA = await launch(dirA);
  const url = nodeA.url;
  await ok(url, 'PUT', `/collections/${COLL}`, NAMED_CONFIG);
  await ok(url, 'PUT', `/collections/${COLL}/index?wait=true`, { field_name: 'kind', field_schema: 'keyword' });
  await ok(url, 'PUT', `/collections/${COLL}/index?wait=true`, { field_name: 'num', field_schema: 'integer' });

  model = new Model();
  const rnd = mulberry32(42);
  const initial = Array.from({ length: INITIAL }, (_, k) => {
    const id = k + 1;
    const v: Vectors = id % 7 === 0 ? { a: vec(rnd, A_DIM) } : { a: vec(rnd, A_DIM), b: vec(rnd, B_DIM) };
    return { id, v, p: { kind: KINDS[id % KINDS.length], num: id % 1000, nested: { id } } };
  });
  const ack = model.send(initial.map((x) => [x.id, { v: x.v, p: x.p }]));
  await upsertPoints(url, COLL, initial);
  ack();

  // A second collection (unnamed vectors) and an alias, for the full snapshot.
  await ok(url, 'PUT', `/collections/${PLAIN}`, { vectors: { size: 3, distance: 'Euclid' } });
  const plain = Array.from({ length: 30 }, (_, k) => ({ id: k + 1, vector: [k, k / 2, -k / 4], payload: { k } }));
  await ok(url, 'PUT', `/collections/${PLAIN}/points?wait=true`, { points: plain });
  await ok(url, 'POST', '/collections/aliases', { actions: [{ create_alias: { collection_name: COLL, alias_name: ALIAS } }] });
  plainContents = await contentsOf(url, PLAIN);

  const s = await underLoad(t, url, 1, async () => {
    const info = await ok(url, 'GET', `/collections/${COLL}`);
    t.log(`before the collection snapshot: status ${info.status}, ${info.indexed_vectors_count} indexed vectors of ${info.points_count} points`);
    return call(url, 'POST', `/collections/${COLL}/snapshots`);
  });
  t.is(s.reply.status, 200, s.reply.text);
  snapS = s.reply.json.result;
  boundsS = s.bounds;

  const f = await underLoad(t, url, 2, () => call(url, 'POST', '/snapshots'));
  t.is(f.reply.status, 200, f.reply.text);
  snapF = f.reply.json.result;
  boundsF = f.bounds;

  // Keep copies outside the server's folders for the start-up recoveries.
  const keep = await tempDir('files');
  fileS = path.join(keep, snapS.name);
  fileF = path.join(keep, snapF.name);
  const bytesS = await downloadBytes(url, `/collections/${COLL}/snapshots/${snapS.name}`);
  const bytesF = await downloadBytes(url, `/snapshots/${snapF.name}`);
  t.is(sha256(bytesS), snapS.checksum);
  t.is(sha256(bytesF), snapF.checksum);
  await fs.writeFile(fileS, bytesS);
  await fs.writeFile(fileF, bytesF);
});

test.serial('recover by upload, by file:// and by the server\'s own http URL (priority snapshot): the acknowledged writes, nothing torn; then writes and a restart', async (t) => {
  const url = nodeA.url;
  t.true(await ok(url, 'DELETE', `/collections/${COLL}`));
  t.is((await call(url, 'GET', `/collections/${COLL}`)).status, 404);

  // Upload.
  const bytes = await fs.readFile(fileS);
  const up = await uploadSnapshot(url, COLL, bytes, 'priority=snapshot');
  t.is(up.status, 200, up.text);
  const viaUpload = await contentsOf(url, COLL);
  withinBounds(t, viaUpload, model, boundsS, 'upload');
  await indexesWork(t, url, COLL, viaUpload, 'upload');
  recovered = viaUpload;

  // file:// (the stored snapshot, which outlived the deleted collection).
  const location = `file://${path.join(dirA, 'snapshots', COLL, snapS.name)}`;
  t.true(await ok(url, 'PUT', '/collections/rt_file/snapshots/recover', { location, priority: 'snapshot', checksum: snapS.checksum }));
  const viaFile = await contentsOf(url, 'rt_file');
  sameContents(t, viaFile, recovered, 'file:// recovery equals the upload recovery');
  await indexesWork(t, url, 'rt_file', viaFile, 'file://');

  // http: the server downloads its own snapshot.
  const httpLocation = `${url}/collections/${COLL}/snapshots/${snapS.name}`;
  t.true(await ok(url, 'PUT', '/collections/rt_http/snapshots/recover', { location: httpLocation, priority: 'snapshot' }));
  const viaHttp = await contentsOf(url, 'rt_http');
  sameContents(t, viaHttp, recovered, 'http recovery equals the upload recovery');
  await indexesWork(t, url, 'rt_http', viaHttp, 'http');

  // Writes afterwards, then a restart keeps everything.
  const expected = new Map<string, Contents>();
  for (const c of [COLL, 'rt_file', 'rt_http']) expected.set(c, await writeAfter(url, c, recovered));
  for (const [c, e] of expected) sameContents(t, await contentsOf(url, c), e, `${c} after writes`);
  t.is(await nodeA.stop(), 0);
  nodeA = await launch(dirA);
  for (const [c, e] of expected) {
    sameContents(t, await contentsOf(nodeA.url, c), e, `${c} after a restart`);
    await indexesWork(t, nodeA.url, c, e, `${c} after a restart`);
  }
  // The recovered collection keeps taking writes after the restart.
  await ok(nodeA.url, 'PUT', `/collections/${COLL}/points?wait=true`, { points: [{ id: 900_002, vector: { a: new Array(A_DIM).fill(0.5) }, payload: { kind: 'blue' } }] });
  t.is((await ok(nodeA.url, 'POST', `/collections/${COLL}/points/count`, { exact: true })).count, expected.get(COLL)!.size + 1);
});

test.serial('--snapshot <file>:<name> recovers at start-up; an existing collection without --force_snapshot stops start-up; with it, it is replaced', async (t) => {
  if (!recovered) return t.fail('the first recovery did not run');
  const dir = await tempDir('cli');
  // Repeatable, and split at the last colon (the path may hold one).
  const colonDir = path.join(dir, 'with:colon');
  await fs.mkdir(colonDir);
  await fs.copyFile(fileS, path.join(colonDir, 'copy.snapshot'));
  const node = await launch(dir, ['--snapshot', `${fileS}:cli_rt`, '--snapshot', `${path.join(colonDir, 'copy.snapshot')}:cli_colon`]);
  const got = await contentsOf(node.url, 'cli_rt');
  sameContents(t, got, recovered, '--snapshot recovery equals the upload recovery');
  sameContents(t, await contentsOf(node.url, 'cli_colon'), recovered, 'the second --snapshot (a path with a colon)');
  withinBounds(t, got, model, boundsS, '--snapshot');
  await indexesWork(t, node.url, 'cli_rt', got, '--snapshot');
  const after = await writeAfter(node.url, 'cli_rt', got);
  t.is(await node.stop(), 0);

  // A restart without the flag keeps the recovered collection and the writes.
  const again = await launch(dir);
  sameContents(t, await contentsOf(again.url, 'cli_rt'), after, 'after a restart');
  t.is(await again.stop(), 0);

  // The collection exists now: --snapshot without --force_snapshot refuses to start.
  const refused = await runToExit(dir, ['--snapshot', `${fileS}:cli_rt`]);
  t.not(refused.code, 0, 'exit code');
  t.false(refused.listened, 'it never served');
  t.regex(refused.output, /cli_rt/);
  t.regex(refused.output, /already exists/);
  t.regex(refused.output, /--force_snapshot/);

  // The refused start changed nothing.
  const unchanged = await launch(dir);
  sameContents(t, await contentsOf(unchanged.url, 'cli_rt'), after, 'after the refused start');
  t.is(await unchanged.stop(), 0);

  // With --force_snapshot the collection is replaced by the snapshot's data.
  const forced = await launch(dir, ['--snapshot', `${fileS}:cli_rt`, '--force_snapshot']);
  sameContents(t, await contentsOf(forced.url, 'cli_rt'), recovered, '--force_snapshot replaced the collection');
  t.is(await forced.stop(), 0);
  // A missing snapshot file stops start-up with a clear message.
  const missing = await runToExit(dir, ['--snapshot', `${path.join(dir, 'nope.snapshot')}:other`]);
  t.not(missing.code, 0);
  t.regex(missing.output, /nope\.snapshot/);
  // So does a snapshot of the wrong kind, either way round, and nothing is created.
  const fullAsCollection = await runToExit(dir, ['--snapshot', `${fileF}:other`]);
  t.not(fullAsCollection.code, 0);
  t.false(fullAsCollection.listened);
  t.regex(fullAsCollection.output, /snapshot/i);
  const collectionAsFull = await runToExit(dir, ['--storage-snapshot', fileS]);
  t.not(collectionAsFull.code, 0);
  t.false(collectionAsFull.listened);
  t.regex(collectionAsFull.output, /not a full-storage snapshot/);
  const after2 = await launch(dir);
  t.deepEqual((await ok(after2.url, 'GET', '/collections')).collections.map((c: { name: string }) => c.name).sort(), ['cli_colon', 'cli_rt']);
  t.is(await after2.stop(), 0);
});

test.serial('--storage-snapshot restores every collection and the aliases; the result takes writes and survives a restart', async (t) => {
  const dir = await tempDir('full');
  const node = await launch(dir, ['--storage-snapshot', fileF]);
  const collections = (await ok(node.url, 'GET', '/collections')).collections.map((c: { name: string }) => c.name).sort();
  t.deepEqual(collections, [COLL, PLAIN].sort());
  t.deepEqual((await ok(node.url, 'GET', '/aliases')).aliases, [{ alias_name: ALIAS, collection_name: COLL }]);
  const got = await contentsOf(node.url, COLL);
  withinBounds(t, got, model, boundsF, '--storage-snapshot');
  await indexesWork(t, node.url, COLL, got, '--storage-snapshot');
  sameContents(t, await contentsOf(node.url, PLAIN), plainContents, `${PLAIN} from the full snapshot`);
  // The alias reaches the restored collection.
  t.is((await ok(node.url, 'POST', `/collections/${ALIAS}/points/count`, { exact: true })).count, got.size);
  const after = await writeAfter(node.url, COLL, got);
  t.is(await node.stop(), 0);
  const again = await launch(dir);
  sameContents(t, await contentsOf(again.url, COLL), after, 'after a restart');
  t.deepEqual((await ok(again.url, 'GET', '/aliases')).aliases, [{ alias_name: ALIAS, collection_name: COLL }]);
  t.is(await again.stop(), 0);

  // The collections exist now: the full snapshot is refused without --force_snapshot, and replaces them with it.
  const refused = await runToExit(dir, ['--storage-snapshot', fileF]);
  t.not(refused.code, 0, 'exit code');
  t.false(refused.listened, 'it never served');
  t.regex(refused.output, /already exists/);
  t.regex(refused.output, /--force_snapshot/);
  const forced = await launch(dir, ['--storage-snapshot', fileF, '--force_snapshot']);
  sameContents(t, await contentsOf(forced.url, COLL), got, '--force_snapshot put the full snapshot back');
  sameContents(t, await contentsOf(forced.url, PLAIN), plainContents, `${PLAIN} after --force_snapshot`);
  t.deepEqual((await ok(forced.url, 'GET', '/aliases')).aliases, [{ alias_name: ALIAS, collection_name: COLL }]);
  t.is(await forced.stop(), 0);
});

test.serial('priorities on one node: replica creates a new collection empty with the snapshot config and leaves an existing one alone; snapshot and no_sync recover the data', async (t) => {
  const url = nodeA.url;
  const src = 'pr_src';
  await ok(url, 'PUT', `/collections/${src}`, { vectors: { size: 3, distance: 'Dot' }, shard_number: 2, hnsw_config: { m: 10 } });
  // Settings only an update sets travel in the snapshot's config too.
  await ok(url, 'PATCH', `/collections/${src}`, { params: { read_fan_out_factor: 1, read_fan_out_delay_ms: 40 } });
  await ok(url, 'PUT', `/collections/${src}/index?wait=true`, { field_name: 'g', field_schema: 'keyword' });
  const pts = Array.from({ length: 40 }, (_, k) => ({ id: k + 1, vector: [k, 1, -k / 2], payload: { g: k % 2 ? 'x' : 'y', k } }));
  await ok(url, 'PUT', `/collections/${src}/points?wait=true`, { points: pts });
  const data = await contentsOf(url, src);
  const snap = await ok(url, 'POST', `/collections/${src}/snapshots`);
  const location = `file://${path.join(dirA, 'snapshots', src, snap.name)}`;

  // replica into a new collection: it exists, with the snapshot's configuration, and no points.
  t.true(await ok(url, 'PUT', '/collections/pr_replica_new/snapshots/recover', { location, priority: 'replica' }));
  const info = await ok(url, 'GET', '/collections/pr_replica_new');
  const srcInfo = await ok(url, 'GET', `/collections/${src}`);
  t.is(info.points_count, 0);
  t.deepEqual(info.config.params, srcInfo.config.params, 'params from the snapshot');
  t.like(info.config.params, { read_fan_out_factor: 1, read_fan_out_delay_ms: 40 });
  t.is(info.config.hnsw_config.m, 10, 'hnsw_config from the snapshot');
  t.deepEqual(info.payload_schema?.g?.data_type, 'keyword', 'payload index from the snapshot');
  t.is((await contentsOf(url, 'pr_replica_new')).size, 0);

  // Changing the source after the snapshot gives an "existing collection" that differs from it.
  await ok(url, 'POST', `/collections/${src}/points/delete?wait=true`, { points: [1, 2, 3, 4, 5] });
  await ok(url, 'POST', `/collections/${src}/points/payload?wait=true`, { points: [10, 11], payload: { changed: true } });
  await ok(url, 'PUT', `/collections/${src}/points?wait=true`, { points: [{ id: 500, vector: [1, 1, 1], payload: { g: 'new' } }] });
  const changed = await contentsOf(url, src);

  // replica into an existing collection: unchanged.
  t.true(await ok(url, 'PUT', `/collections/${src}/snapshots/recover`, { location, priority: 'replica' }));
  sameContents(t, await contentsOf(url, src), changed, 'replica leaves the existing collection as it is');
  // The default priority is replica.
  t.true(await ok(url, 'PUT', `/collections/${src}/snapshots/recover`, { location }));
  sameContents(t, await contentsOf(url, src), changed, 'the default (replica) leaves the existing collection as it is');

  // snapshot: the snapshot's data replaces it.
  t.true(await ok(url, 'PUT', `/collections/${src}/snapshots/recover`, { location, priority: 'snapshot' }));
  sameContents(t, await contentsOf(url, src), data, 'snapshot priority recovers everything');

  // no_sync: the same as snapshot on one node, into an existing and into a new collection.
  await ok(url, 'POST', `/collections/${src}/points/delete?wait=true`, { points: [6, 7] });
  t.true(await ok(url, 'PUT', `/collections/${src}/snapshots/recover`, { location, priority: 'no_sync' }));
  sameContents(t, await contentsOf(url, src), data, 'no_sync recovers everything into an existing collection');
  t.true(await ok(url, 'PUT', '/collections/pr_nosync_new/snapshots/recover', { location, priority: 'no_sync' }));
  sameContents(t, await contentsOf(url, 'pr_nosync_new'), data, 'no_sync recovers everything into a new collection');
  // Upload takes the priority as a query parameter: replica into a new collection is empty there too.
  const bytes = await downloadBytes(url, `/collections/${src}/snapshots/${snap.name}`);
  const up = await uploadSnapshot(url, 'pr_upload_replica', bytes, 'priority=replica');
  t.is(up.status, 200, up.text);
  t.is((await ok(url, 'GET', '/collections/pr_upload_replica')).points_count, 0);
  const upNoSync = await uploadSnapshot(url, 'pr_upload_nosync', bytes, 'priority=no_sync');
  t.is(upNoSync.status, 200, upNoSync.text);
  sameContents(t, await contentsOf(url, 'pr_upload_nosync'), data, 'no_sync upload');
});

/** The shard (0 or 1) of a point id in a 2-shard collection, as the collection routes it (crc32c of the id key). */
function shardOfId(id: number): number {
  return crc32c(Buffer.from(`n:${id}`, 'utf8')) % 2;
}

test.serial('shard snapshot round trip: shard 1 comes back to its snapshot state, shard 0 is untouched; shard 0\'s snapshot into shard 1 → 400', async (t) => {
  const url = nodeA.url;
  const c = 'rt_shard';
  await ok(url, 'PUT', `/collections/${c}`, NAMED_CONFIG);
  await ok(url, 'PUT', `/collections/${c}/index?wait=true`, { field_name: 'kind', field_schema: 'keyword' });
  const rnd = mulberry32(7);
  const pts = Array.from({ length: 300 }, (_, k) => ({ id: k + 1, v: { a: vec(rnd, A_DIM), b: vec(rnd, B_DIM) } as Vectors, p: { kind: KINDS[k % 4], num: k } as Record<string, unknown> }));
  await upsertPoints(url, c, pts);
  const original = await contentsOf(url, c);
  const inShard = (s: number) => [...original.keys()].filter((id) => shardOfId(id) === s);
  t.true(inShard(0).length > 50 && inShard(1).length > 50, 'both shards hold points');

  const s1 = await ok(url, 'POST', `/collections/${c}/shards/1/snapshots`);
  const s0 = await ok(url, 'POST', `/collections/${c}/shards/0/snapshots`);

  // Change both shards: payloads of every point, some deletes in each, new points in each, new vectors.
  await ok(url, 'POST', `/collections/${c}/points/payload?wait=true`, { points: [...original.keys()], payload: { changed: 1 } });
  const gone = [...inShard(0).slice(0, 10), ...inShard(1).slice(0, 10)];
  await ok(url, 'POST', `/collections/${c}/points/delete?wait=true`, { points: gone });
  const added = Array.from({ length: 40 }, (_, k) => ({ id: 1000 + k, v: { a: vec(rnd, A_DIM) } as Vectors, p: { kind: 'added' } as Record<string, unknown> }));
  await upsertPoints(url, c, added);
  await ok(url, 'PUT', `/collections/${c}/points/vectors?wait=true`, { points: [...inShard(0).slice(20, 25), ...inShard(1).slice(20, 25)].map((id) => ({ id, vector: { b: [9, 9, 9, 9] } })) });
  const changed = await contentsOf(url, c);

  // Shard 0's snapshot does not go into shard 1; nothing changes.
  const wrong = await call(url, 'PUT', `/collections/${c}/shards/1/snapshots/recover`, {
    location: `file://${path.join(dirA, 'snapshots', c, 'shards', '0', s0.name)}`,
    priority: 'snapshot',
  });
  t.is(wrong.status, 400, wrong.text);
  sameContents(t, await contentsOf(url, c), changed, 'a refused shard recovery changes nothing');

  t.true(await ok(url, 'PUT', `/collections/${c}/shards/1/snapshots/recover`, {
    location: `file://${path.join(dirA, 'snapshots', c, 'shards', '1', s1.name)}`,
    priority: 'snapshot',
  }));
  const expected: Contents = new Map();
  for (const [id, s] of changed) if (shardOfId(id) === 0) expected.set(id, s);
  for (const [id, s] of original) if (shardOfId(id) === 1) expected.set(id, s);
  const got = await contentsOf(url, c);
  sameContents(t, got, expected, 'shard 1 at its snapshot state, shard 0 as changed');
  t.is((await ok(url, 'GET', `/collections/${c}`)).payload_schema?.kind?.data_type, 'keyword');
  const kindRed = (await ok(url, 'POST', `/collections/${c}/points/count`, { exact: true, filter: { must: [{ key: 'kind', match: { value: 'red' } }] } })).count;
  t.is(kindRed, [...expected.values()].filter((s) => s.p.kind === 'red').length, 'the payload index agrees with the recovered shard');

  // The recovered shard takes writes and survives a restart.
  await ok(url, 'PUT', `/collections/${c}/points?wait=true`, { points: [...inShard(1).slice(0, 3)].map((id) => ({ id, vector: { a: new Array(A_DIM).fill(1) }, payload: { kind: 'late' } })) });
  for (const id of inShard(1).slice(0, 3)) expected.set(id, { v: { a: new Array(A_DIM).fill(1) }, p: { kind: 'late' } });
  t.is(await nodeA.stop(), 0);
  nodeA = await launch(dirA);
  sameContents(t, await contentsOf(nodeA.url, c), expected, 'after a restart');
});

/**
 * Clients hammer a collection (upserts, scrolls, queries, exists, the collection list)
 * while `recover` runs; returns every answer that was neither 200 nor 503, and whether
 * the collection ever looked absent.
 */
async function raceRecovery(url: string, coll: string, recover: () => Promise<Reply>): Promise<{ reply: Reply; wrong: string[]; calls: number }> {
  let stop = false;
  let calls = 0;
  const wrong: string[] = [];
  const note = (what: string, r: Reply, absent = false) => {
    calls++;
    if ((r.status !== 200 && r.status !== 503) || absent) wrong.push(`${what} -> ${r.status} ${r.text.slice(0, 160)}`);
  };
  // Answers each client has had: the recovery starts once every one is running, and the
  // clients stop once every one has had an answer after the recovery's.
  const answers: number[] = [];
  const loop = async (fn: () => Promise<void>) => {
    const i = answers.push(0) - 1;
    while (!stop) {
      await fn();
      answers[i]++;
    }
  };
  let k = 0;
  const loops = [
    loop(async () => note('upsert', await call(url, 'PUT', `/collections/${coll}/points?wait=true`, { points: [{ id: 950_000 + (k++ % 20), vector: { a: new Array(A_DIM).fill(0.25) }, payload: { kind: 'race' } }] }))),
    loop(async () => note('scroll', await call(url, 'POST', `/collections/${coll}/points/scroll`, { limit: 2 }))),
    loop(async () => note('query', await call(url, 'POST', `/collections/${coll}/points/query`, { query: new Array(A_DIM).fill(1), using: 'a', limit: 2 }))),
    loop(async () => {
      const r = await call(url, 'GET', `/collections/${coll}/exists`);
      note('exists', r, r.status === 200 && r.json?.result?.exists !== true);
    }),
    loop(async () => {
      const r = await call(url, 'GET', '/collections');
      note('list', r, r.status === 200 && !(r.json?.result?.collections ?? []).some((c: { name: string }) => c.name === coll));
    }),
  ];
  await waitFor('every racing client answered', () => answers.every((n) => n > 0));
  const reply = await recover();
  const atReply = [...answers];
  await waitFor('every racing client answered after the recovery', () => answers.every((n, i) => n > atReply[i]));
  stop = true;
  await Promise.all(loops);
  return { reply, wrong, calls };
}

// Regression (found by this test): replaceCollection used to take the collection out of
// the table for the whole swap, so racing requests were told 404 "doesn't exist" and
// /exists answered false. It now stays listed and answers 503 until the swap is done.
test.serial('requests racing a priority=snapshot recovery into the existing collection are never told it does not exist (200 or 503 only)', async (t) => {
  if (!recovered) return t.fail('the first recovery did not run');
  const url = nodeA.url;
  const location = `file://${path.join(dirA, 'snapshots', COLL, snapS.name)}`;
  const wrong: string[] = [];
  let calls = 0;
  for (let round = 0; round < 2; round++) {
    const r = await raceRecovery(url, COLL, () => call(url, 'PUT', `/collections/${COLL}/snapshots/recover`, { location, priority: 'snapshot' }));
    t.is(r.reply.status, 200, r.reply.text);
    wrong.push(...r.wrong);
    calls += r.calls;
  }
  t.deepEqual(wrong.slice(0, 6), [], `${wrong.length} of ${calls} requests racing the recovery got a wrong answer`);
  // Whatever raced, the snapshot's points are back exactly (the racing writes use ids of their own).
  const got = await contentsOf(url, COLL);
  for (const id of got.keys()) if (id >= 950_000) got.delete(id);
  sameContents(t, got, recovered, 'the recovered collection after the race');
});

test.serial('requests racing a priority=snapshot shard recovery get 200 or 503 only', async (t) => {
  const url = nodeA.url;
  const c = 'rt_shard';
  const [s1] = await ok(url, 'GET', `/collections/${c}/shards/1/snapshots`);
  const location = `file://${path.join(dirA, 'snapshots', c, 'shards', '1', s1.name)}`;
  const r = await raceRecovery(url, c, () => call(url, 'PUT', `/collections/${c}/shards/1/snapshots/recover`, { location, priority: 'snapshot' }));
  t.is(r.reply.status, 200, r.reply.text);
  t.deepEqual(r.wrong.slice(0, 6), [], `${r.wrong.length} of ${r.calls} requests racing the shard recovery got a wrong answer`);
});

// -- S3 -----------------------------------------------------------------------------------------

test.serial('S3 snapshot storage (moto): create → listed from the bucket → download → delete the collection → recover by s3:// name and by file:// → identical; shard and full snapshots in the bucket; writes and a restart', async (t) => {
  let moto: MotoServer;
  try {
    moto = await startMotoServer();
  } catch (err) {
    t.fail(`moto_server is needed for this test: ${(err as Error).message}`);
    return;
  }
  try {
    const bucket = 'quiver-roundtrip';
    await createBucket(moto.endpoint, bucket);
    const dir = await tempDir('s3');
    const env = s3Env(moto.endpoint, bucket);
    let node = await launch(dir, [], env);
    const c = 's3_rt';
    await ok(node.url, 'PUT', `/collections/${c}`, NAMED_CONFIG);
    await ok(node.url, 'PUT', `/collections/${c}/index?wait=true`, { field_name: 'kind', field_schema: 'keyword' });
    await ok(node.url, 'PUT', `/collections/${c}/index?wait=true`, { field_name: 'num', field_schema: 'integer' });
    const rnd = mulberry32(99);
    await upsertPoints(
      node.url,
      c,
      Array.from({ length: 400 }, (_, k) => ({ id: k + 1, v: k % 5 ? { a: vec(rnd, A_DIM), b: vec(rnd, B_DIM) } : { a: vec(rnd, A_DIM) }, p: { kind: KINDS[k % 4], num: (k * 37) % 1000 } })),
    );
    const data = await contentsOf(node.url, c);

    const d = await ok(node.url, 'POST', `/collections/${c}/snapshots`);
    t.regex(d.name, new RegExp(`^${c}-\\d+-\\d{4}(-\\d{2}){5}\\.snapshot$`));
    const listed = await ok(node.url, 'GET', `/collections/${c}/snapshots`);
    t.deepEqual(listed.map((x: { name: string }) => x.name), [d.name]);
    t.is(listed[0].size, d.size);
    t.is(listed[0].checksum, d.checksum);
    // The object is in the bucket under <collection>/<name>, and nothing went to the local snapshots folder.
    const { ListObjectsV2Command } = await import('@aws-sdk/client-s3');
    const objects = await s3Client(moto.endpoint).send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `${c}/` }));
    const keys = (objects.Contents ?? []).map((o) => o.Key);
    t.true(keys.includes(`${c}/${d.name}`), `bucket keys: ${keys.join(', ')}`);
    t.is((objects.Contents ?? []).find((o) => o.Key === `${c}/${d.name}`)?.Size, d.size);
    const local = await fs.readdir(path.join(dir, 'snapshots', c)).catch(() => []);
    t.false(local.some((f) => f.endsWith('.snapshot')), `no local snapshot file: ${local.join(', ')}`);

    const bytes = await downloadBytes(node.url, `/collections/${c}/snapshots/${d.name}`);
    t.is(bytes.length, d.size);
    t.is(sha256(bytes), d.checksum);

    t.true(await ok(node.url, 'DELETE', `/collections/${c}`));
    t.true(await ok(node.url, 'PUT', `/collections/${c}/snapshots/recover`, { location: `s3://${bucket}/${c}/${d.name}`, priority: 'snapshot', checksum: d.checksum }));
    sameContents(t, await contentsOf(node.url, c), data, 's3:// recovery');
    const viaS3 = await contentsOf(node.url, c);
    await indexesWork(t, node.url, c, viaS3, 's3://');

    // A file:// location inside the snapshots path names the same object.
    t.true(await ok(node.url, 'PUT', '/collections/s3_rt_file/snapshots/recover', { location: `file://${path.join(dir, 'snapshots', c, d.name)}`, priority: 'snapshot' }));
    sameContents(t, await contentsOf(node.url, 's3_rt_file'), data, 'file:// recovery with S3 storage');

    // Shard snapshots and full snapshots live in the bucket too.
    const sh = await ok(node.url, 'POST', `/collections/${c}/shards/1/snapshots`);
    t.deepEqual((await ok(node.url, 'GET', `/collections/${c}/shards/1/snapshots`)).map((x: { name: string }) => x.name), [sh.name]);
    await ok(node.url, 'POST', `/collections/${c}/points/payload?wait=true`, { points: [...data.keys()], payload: { shard_test: 1 } });
    t.true(await ok(node.url, 'PUT', `/collections/${c}/shards/1/snapshots/recover`, { location: `s3://${bucket}/${c}/shards/1/${sh.name}`, priority: 'snapshot' }));
    const mixed = await contentsOf(node.url, c);
    t.is(mixed.size, data.size);
    for (const [id, st] of mixed) {
      const want = shardOfId(id) === 1 ? data.get(id) : { v: data.get(id)!.v, p: { ...data.get(id)!.p, shard_test: 1 } };
      if (canon(st) !== canon(want)) {
        t.fail(`point ${id} (shard ${shardOfId(id)}) after the S3 shard recovery: ${canon(st)}`);
        break;
      }
    }
    t.true(await ok(node.url, 'DELETE', `/collections/${c}/shards/1/snapshots/${sh.name}`));
    const full = await ok(node.url, 'POST', '/snapshots');
    t.deepEqual((await ok(node.url, 'GET', '/snapshots')).map((x: { name: string }) => x.name), [full.name]);
    const fullBytes = await downloadBytes(node.url, `/snapshots/${full.name}`);
    t.is(sha256(fullBytes), full.checksum);
    const rootObjects = await s3Client(moto.endpoint).send(new ListObjectsV2Command({ Bucket: bucket, Delimiter: '/' }));
    t.true((rootObjects.Contents ?? []).some((o) => o.Key === full.name), 'the full snapshot is at the bucket root');
    t.true(await ok(node.url, 'DELETE', `/snapshots/${full.name}`));
    t.deepEqual(await ok(node.url, 'GET', '/snapshots'), []);
    // Back to the snapshot's data for the checks below.
    t.true(await ok(node.url, 'PUT', `/collections/${c}/snapshots/recover`, { location: `s3://${bucket}/${c}/${d.name}`, priority: 'snapshot' }));
    sameContents(t, await contentsOf(node.url, c), data, 's3:// recovery again');

    // Another bucket is refused.
    const other = await call(node.url, 'PUT', '/collections/s3_other/snapshots/recover', { location: `s3://another-bucket/${c}/${d.name}`, priority: 'snapshot' });
    t.is(other.status, 400, other.text);

    // Writes, a restart (the snapshot still listed from the bucket), and delete.
    const after = await writeAfter(node.url, c, data);
    t.is(await node.stop(), 0);
    node = await launch(dir, [], env);
    sameContents(t, await contentsOf(node.url, c), after, 'after a restart');
    sameContents(t, await contentsOf(node.url, 's3_rt_file'), data, 's3_rt_file after a restart');
    t.deepEqual((await ok(node.url, 'GET', `/collections/${c}/snapshots`)).map((x: { name: string }) => x.name), [d.name]);
    t.true(await ok(node.url, 'DELETE', `/collections/${c}/snapshots/${d.name}`));
    const afterDelete = await s3Client(moto.endpoint).send(new ListObjectsV2Command({ Bucket: bucket, Prefix: `${c}/` }));
    t.deepEqual((afterDelete.Contents ?? []).map((o) => o.Key).filter((k) => k?.endsWith('.snapshot')), [], 'the object is gone from the bucket');
    t.deepEqual(await ok(node.url, 'GET', `/collections/${c}/snapshots`), []);
    t.is(await node.stop(), 0);
  } finally {
    await moto.stop();
  }
});
