/**
 * Crash safety (issue 3): writers with wait=true while the server is killed with
 * SIGKILL at random moments, then restarted on the same storage. Every acknowledged
 * write must be there after the restart, with its vector and payload; deleted points
 * must stay deleted; counts must agree.
 *
 * One storage directory for the whole run. Per cycle: (sometimes) a random pause so
 * the 1 s checkpoint timer and the optimizer fire at random phases, then 3 concurrent
 * writers, each owning a disjoint id range (so each id's history is one writer's
 * sequence of operations), run upserts (random batch sizes, overwrites, both body
 * forms, duplicate ids in a batch), payload set / set-at-key / overwrite / delete-keys
 * / clear, vector updates, deletes and /points/batch mixes, all with wait=true; the
 * server is SIGKILLed 10-400 ms after the writers start; it is restarted and checked
 * against the model of acknowledged operations. An operation that was in flight at the
 * kill may or may not have been applied (for /points/batch: any prefix of its
 * operations): its ids accept each of those states, and the state found is adopted.
 *
 * The collection uses flush_interval_sec 1 (checkpoints and WAL truncation during the
 * run), indexing_threshold 1 KB (the background move into HNSW runs constantly) and a
 * low vacuum threshold; it has two payload indexes, checked with filtered counts.
 *
 * QUIVER_CRASH_CYCLES (default 20) sets the number of kill cycles; QUIVER_CRASH_SEED
 * the seed of the operation generator (kill timing is real time, so a run is not
 * exactly reproducible); QUIVER_CRASH_SUMMARY a file to write the JSON summary to.
 */

import test from 'ava';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { startServer, type Server } from './server';
import { mulberry32 } from '../support/rng';

const CYCLES = Number(process.env.QUIVER_CRASH_CYCLES ?? 20);
const SEED = process.env.QUIVER_CRASH_SEED !== undefined ? Number(process.env.QUIVER_CRASH_SEED) : (Date.now() ^ (process.pid << 8)) >>> 0;
const COLLECTION = 'crash';
const DIM = 16;
const WRITERS = 3;
const IDS_PER_WRITER = 250;
const KILL_MIN_MS = 10;
const KILL_MAX_MS = 400;

// -- seeded randomness ------------------------------------------------------------------

const rng = mulberry32(SEED);
const int = (n: number) => Math.floor(rng() * n);
const between = (lo: number, hi: number) => lo + int(hi - lo + 1);
const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)];
function sample<T>(xs: readonly T[], n: number): T[] {
  const copy = [...xs];
  const out: T[] = [];
  while (out.length < n && copy.length > 0) out.push(copy.splice(int(copy.length), 1)[0]);
  return out;
}
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// -- the model ------------------------------------------------------------------------------

type Payload = Record<string, unknown>;
interface Point {
  /** The vector as written (float32-rounded); the server returns it normalised (Cosine). */
  vector: number[];
  payload: Payload;
}
type Slot = Point | null;

/** Acknowledged state of every id (absent = no point). */
const model = new Map<number, Point>();
/** Ids touched by an operation in flight at the kill: the states they may be in. */
const pending = new Map<number, Slot[]>();

function randomVector(): number[] {
  for (;;) {
    const v = Array.from({ length: DIM }, () => Math.fround(rng() * 2 - 1));
    if (v.some((x) => Math.abs(x) > 0.05)) return v;
  }
}

function normalised(v: number[]): number[] {
  const n = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  return v.map((x) => x / n);
}

let counter = 0;
function randomPayload(w: number): Payload | null {
  if (rng() < 0.12) return null;
  const p: Payload = { w, c: ++counter };
  if (rng() < 0.8) p.tag = `k${int(8)}`;
  if (rng() < 0.6) p.num = int(8000) / 8 - 500;
  if (rng() < 0.5) p.meta = { x: int(100), s: `s${int(1000)}` };
  if (rng() < 0.4) p.arr = Array.from({ length: int(5) }, () => int(50));
  if (rng() < 0.2) p.flag = rng() < 0.5;
  if (rng() < 0.1) p.nul = null;
  if (rng() < 0.05) p.text = 'ünïcødé ✓ "quoted" \\ back\nslash';
  return p;
}

function clone<T>(x: T): T {
  return JSON.parse(JSON.stringify(x)) as T;
}

/** JSON with object keys sorted, for order-insensitive payload comparison. */
function canon(x: unknown): string {
  if (Array.isArray(x)) return `[${x.map(canon).join(',')}]`;
  if (x !== null && typeof x === 'object') {
    return `{${Object.keys(x as object)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canon((x as Payload)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(x);
}

function sameVector(expectedRaw: number[], got: number[] | null | undefined): boolean {
  if (!Array.isArray(got) || got.length !== expectedRaw.length) return false;
  const e = normalised(expectedRaw);
  return e.every((x, i) => Math.abs(x - got[i]) <= 1e-5);
}

function sameSlot(expected: Slot, got: Slot): boolean {
  if (expected === null || got === null) return expected === got;
  return sameVector(expected.vector, got.vector) && canon(expected.payload) === canon(got.payload);
}

/** Model states compared with each other (both as written, not as the server returns them). */
function sameRaw(a: Slot, b: Slot): boolean {
  return canon(a) === canon(b);
}

function describeSlot(s: Slot): string {
  return s === null ? 'absent' : `{vector: [${normalised(s.vector).slice(0, 3).map((x) => x.toFixed(4)).join(', ')}, ...], payload: ${canon(s.payload)}}`;
}

// -- operations -------------------------------------------------------------------------------

/** A view of the model with the changes of the operation being built on top. */
class Overlay {
  readonly changes = new Map<number, Slot>();
  get(id: number): Slot {
    if (this.changes.has(id)) return this.changes.get(id)!;
    return model.get(id) ?? null;
  }
  set(id: number, s: Slot): void {
    this.changes.set(id, s);
  }
  existing(ids: number[]): number[] {
    return ids.filter((id) => this.get(id) !== null);
  }
}

interface Op {
  kind: string;
  method: 'PUT' | 'POST';
  path: string;
  body: unknown;
  /** Per touched id: its state before, and after each step (a /points/batch has several). */
  states: Map<number, Slot[]>;
  final: Map<number, Slot>;
}

/** One step (one logged operation) of a request: body fragment plus its model effect. */
interface Step {
  kind: string;
  body: Record<string, unknown>;
  apply(o: Overlay): void;
}

function upsertStep(ids: number[], w: number, form: 'points' | 'batch'): Step {
  const points = ids.map((id) => ({ id, vector: randomVector(), payload: randomPayload(w) }));
  const apply = (o: Overlay) => {
    for (const p of points) o.set(p.id, { vector: p.vector, payload: p.payload === null ? {} : clone(p.payload) });
  };
  if (form === 'batch') {
    return {
      kind: 'upsert(batch)',
      body: { batch: { ids: points.map((p) => p.id), vectors: points.map((p) => p.vector), payloads: points.map((p) => p.payload) } },
      apply,
    };
  }
  return { kind: 'upsert', body: { points }, apply };
}

function setPayloadStep(ids: number[]): Step {
  const payload: Payload = { tag: `k${int(8)}`, set: ++counter };
  if (rng() < 0.3) payload.num = null;
  return {
    kind: 'set_payload',
    body: { payload, points: ids },
    apply: (o) => {
      for (const id of ids) {
        const p = o.get(id)!;
        o.set(id, { vector: p.vector, payload: { ...clone(p.payload), ...clone(payload) } });
      }
    },
  };
}

function setPayloadAtKeyStep(ids: number[]): Step {
  const payload: Payload = { y: int(1000), z: `z${int(10)}` };
  return {
    kind: 'set_payload(key)',
    body: { payload, points: ids, key: 'meta' },
    apply: (o) => {
      for (const id of ids) {
        const p = o.get(id)!;
        const next = clone(p.payload);
        const meta = next.meta;
        // `meta` is only ever an object or absent/null here: merge into it, or create it.
        next.meta = meta !== null && typeof meta === 'object' && !Array.isArray(meta) ? { ...(meta as Payload), ...payload } : { ...payload };
        o.set(id, { vector: p.vector, payload: next });
      }
    },
  };
}

function overwritePayloadStep(ids: number[], w: number): Step {
  const payload = randomPayload(w) ?? {};
  return {
    kind: 'overwrite_payload',
    body: { payload, points: ids },
    apply: (o) => {
      for (const id of ids) o.set(id, { vector: o.get(id)!.vector, payload: clone(payload) });
    },
  };
}

function deletePayloadStep(ids: number[]): Step {
  const keys = sample(['tag', 'num', 'meta', 'arr', 'flag', 'nul', 'c', 'missing'], between(1, 3));
  return {
    kind: 'delete_payload',
    body: { keys, points: ids },
    apply: (o) => {
      for (const id of ids) {
        const p = o.get(id)!;
        const next = clone(p.payload);
        for (const k of keys) delete next[k];
        o.set(id, { vector: p.vector, payload: next });
      }
    },
  };
}

function clearPayloadStep(ids: number[]): Step {
  return {
    kind: 'clear_payload',
    body: { points: ids },
    apply: (o) => {
      for (const id of ids) o.set(id, { vector: o.get(id)!.vector, payload: {} });
    },
  };
}

function updateVectorsStep(ids: number[]): Step {
  const points = ids.map((id) => ({ id, vector: randomVector() }));
  return {
    kind: 'update_vectors',
    body: { points },
    apply: (o) => {
      for (const p of points) o.set(p.id, { vector: p.vector, payload: o.get(p.id)!.payload });
    },
  };
}

function deleteStep(ids: number[]): Step {
  return {
    kind: 'delete',
    body: { points: ids },
    apply: (o) => {
      for (const id of ids) o.set(id, null);
    },
  };
}

const ROUTES: Record<string, { method: 'PUT' | 'POST'; path: string; batchName: string }> = {
  upsert: { method: 'PUT', path: 'points', batchName: 'upsert' },
  'upsert(batch)': { method: 'PUT', path: 'points', batchName: 'upsert' },
  set_payload: { method: 'POST', path: 'points/payload', batchName: 'set_payload' },
  'set_payload(key)': { method: 'POST', path: 'points/payload', batchName: 'set_payload' },
  overwrite_payload: { method: 'PUT', path: 'points/payload', batchName: 'overwrite_payload' },
  delete_payload: { method: 'POST', path: 'points/payload/delete', batchName: 'delete_payload' },
  clear_payload: { method: 'POST', path: 'points/payload/clear', batchName: 'clear_payload' },
  update_vectors: { method: 'PUT', path: 'points/vectors', batchName: 'update_vectors' },
  delete: { method: 'POST', path: 'points/delete', batchName: 'delete' },
};

function batchSize(): number {
  const r = rng();
  if (r < 0.7) return between(1, 8);
  if (r < 0.95) return between(9, 40);
  return between(41, 120);
}

/** Picks the next step for writer `w` against the overlay `o` (ids of its own range only). */
function randomStep(w: number, o: Overlay): Step {
  const base = w * 10_000 + 1;
  const range = Array.from({ length: IDS_PER_WRITER }, (_, i) => base + i);
  const live = o.existing(range);
  const r = rng();
  const some = (n: number) => sample(live, Math.min(live.length, n));
  if (live.length === 0 || r < 0.42) {
    const n = batchSize();
    const ids: number[] = [];
    for (let i = 0; i < n; i++) ids.push(live.length > 0 && rng() < 0.5 ? pick(live) : pick(range));
    if (rng() < 0.05) ids.push(ids[0]); // the same id twice in one batch: the last one wins
    // The batch form takes unique ids only in the reference; keep it to unique ids.
    const unique = [...new Set(ids)];
    return rng() < 0.3 ? upsertStep(unique, w, 'batch') : upsertStep(ids, w, 'points');
  }
  if (r < 0.54) return setPayloadStep(some(between(1, 6)));
  if (r < 0.59) return setPayloadAtKeyStep(some(between(1, 4)));
  if (r < 0.64) return overwritePayloadStep(some(between(1, 4)), w);
  if (r < 0.69) return deletePayloadStep(some(between(1, 5)));
  if (r < 0.72) return clearPayloadStep(some(between(1, 3)));
  if (r < 0.8) return updateVectorsStep(some(between(1, 6)));
  const n = between(1, 10);
  const ids = [...new Set([...some(Math.ceil(n / 2)), ...Array.from({ length: n - Math.ceil(n / 2) }, () => pick(range))])];
  return deleteStep(ids);
}

function nextOp(w: number): Op {
  const o = new Overlay();
  const batch = rng() < 0.07;
  const steps: Step[] = [];
  const history: Array<Map<number, Slot>> = [];
  const n = batch ? between(2, 4) : 1;
  for (let i = 0; i < n; i++) {
    const step = randomStep(w, o);
    steps.push(step);
    step.apply(o);
    history.push(new Map(o.changes));
  }
  const states = new Map<number, Slot[]>();
  for (const id of o.changes.keys()) {
    const before = model.get(id) ?? null;
    states.set(id, [before, ...history.map((h) => (h.has(id) ? h.get(id)! : before))]);
  }
  const final = new Map(o.changes);
  if (!batch) {
    const route = ROUTES[steps[0].kind];
    return { kind: steps[0].kind, method: route.method, path: route.path, body: steps[0].body, states, final };
  }
  return {
    kind: `batch[${steps.map((s) => s.kind).join(',')}]`,
    method: 'POST',
    path: 'points/batch',
    body: { operations: steps.map((s) => ({ [ROUTES[s.kind].batchName]: s.body })) },
    states,
    final,
  };
}

// -- run state and statistics ----------------------------------------------------------------

interface CycleStats {
  cycle: number;
  pauseMs: number;
  killAfterMs: number;
  acked: number;
  inFlight: number;
  inFlightApplied: number;
  inFlightNotApplied: number;
  inFlightPartial: number;
  inFlightKinds: string[];
  checkpointsBeforeKill: number;
  optimizerJobsBeforeKill: number;
  /** New temporary files of an atomic write the kill interrupted (a checkpoint in progress). */
  tempFilesAfterKill: number;
  loadedFromCheckpoint: string | null;
  replayed: number;
  tornTail: boolean;
  points: number;
  restartMs: number;
  verifyMs: number;
  mismatches: string[];
}

const summary = {
  seed: SEED,
  cycles: CYCLES,
  storage: '',
  startedAt: new Date().toISOString(),
  elapsedMs: 0,
  ackedOps: 0,
  ackedPointWrites: 0,
  inFlightOps: 0,
  inFlightApplied: 0,
  inFlightNotApplied: 0,
  inFlightPartial: 0,
  /** In-flight requests other than /points/batch found half applied (one request is one logged operation). */
  partialSingleOps: 0,
  lostPoints: 0,
  resurrectedPoints: 0,
  wrongVector: 0,
  wrongPayload: 0,
  countMismatches: 0,
  searchMismatches: 0,
  writeErrors: 0,
  checkpointsBeforeKill: 0,
  killsWithCheckpointDuringRun: 0,
  optimizerJobsBeforeKill: 0,
  killsDuringAtomicWrite: 0,
  /** Temporary files of interrupted atomic writes still in the shard directory at the end. */
  leftoverTempFiles: 0,
  restartsFromCheckpoint: 0,
  replayedRecords: 0,
  tornTails: 0,
  maxPoints: 0,
  finalPoints: 0,
  killAfterMs: { min: Infinity, max: 0 },
  restartMs: { avg: 0, max: 0 },
  perCycle: [] as CycleStats[],
  failures: [] as string[],
};

let storageDir = '';
let server: Server | undefined;
const started = Date.now();

async function call(method: string, urlPath: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${server!.url}/${urlPath}`, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(60_000),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json };
}

async function ok(method: string, urlPath: string, body?: unknown): Promise<any> {
  const r = await call(method, urlPath, body);
  if (r.status !== 200) throw new Error(`${method} /${urlPath} -> ${r.status}: ${JSON.stringify(r.json)} (body ${JSON.stringify(body)?.slice(0, 500)})`);
  return r.json.result;
}

function countOf(lines: Array<Record<string, unknown>>, msg: string): number {
  return lines.filter((l) => l.msg === msg).length;
}

/** Names of the temporary files (interrupted atomic writes) in the shard directory. */
function tempFiles(): Set<string> {
  return new Set(fs.readdirSync(path.join(storageDir, 'storage', 'collections', COLLECTION, '0')).filter((n) => n.endsWith('.tmp')));
}

/** The last request each writer sent. */
const inFlightKind = new Map<number, string>();

/** Runs writer `w` (one request at a time) until the kill. */
async function writer(w: number, srv: Server, stop: { killed: boolean }, stats: CycleStats): Promise<void> {
  while (!stop.killed) {
    const op = nextOp(w);
    inFlightKind.set(w, op.kind);
    let status = 0;
    let text = '';
    try {
      const res = await fetch(`${srv.url}/collections/${COLLECTION}/${op.path}?wait=true`, {
        method: op.method,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(op.body),
      });
      status = res.status;
      text = await res.text();
    } catch {
      // No answer: the server died with the request in flight (or before it arrived).
      for (const [id, states] of op.states) pending.set(id, states);
      stats.inFlight++;
      stats.inFlightKinds.push(op.kind);
      return;
    }
    let parsed: any = null;
    try {
      parsed = JSON.parse(text);
    } catch {
      // fall through: not an acknowledgement
    }
    const result = parsed?.result;
    const acked = status === 200 && (op.path === 'points/batch' ? Array.isArray(result) && result.every((r: any) => r.status === 'completed') : result?.status === 'completed');
    if (!acked) {
      summary.writeErrors++;
      summary.failures.push(`cycle ${stats.cycle}: writer ${w} ${op.kind} answered ${status}: ${text.slice(0, 300)}`);
      // Treat it like an unanswered request so the check stays meaningful, and stop this writer.
      for (const [id, states] of op.states) pending.set(id, states);
      stats.inFlight++;
      return;
    }
    for (const [id, s] of op.final) {
      if (s === null) model.delete(id);
      else model.set(id, s);
    }
    stats.acked++;
    summary.ackedOps++;
    summary.ackedPointWrites += op.final.size;
  }
}

// Filtered counts over the payload indexes (tag: keyword, c: integer) and an unindexed field.
const COUNT_CHECKS: Array<{ filter: unknown; test: (p: Payload) => boolean }> = [
  { filter: { must: [{ key: 'tag', match: { value: 'k3' } }] }, test: (p) => p.tag === 'k3' },
  {
    filter: { must: [{ key: 'w', match: { value: 1 } }], must_not: [{ key: 'tag', match: { any: ['k0', 'k1'] } }] },
    test: (p) => p.w === 1 && p.tag !== 'k0' && p.tag !== 'k1',
  },
  { filter: { must: [{ key: 'c', range: { gte: 0 } }] }, test: (p) => typeof p.c === 'number' },
  { filter: { should: [{ key: 'tag', match: { any: ['k5', 'k6'] } }, { is_empty: { key: 'tag' } }] }, test: (p) => p.tag === undefined || p.tag === 'k5' || p.tag === 'k6' },
];

function dot(a: number[], b: number[]): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/** Compares the restarted server with the model; adopts the states of in-flight operations. */
async function verify(label: string): Promise<string[]> {
  const problems: string[] = [];
  const observed = new Map<number, Point>();
  let offset: unknown = null;
  do {
    const page = await ok('POST', `collections/${COLLECTION}/points/scroll`, { limit: 300, offset, with_payload: true, with_vector: true });
    for (const p of page.points) observed.set(p.id, { vector: p.vector, payload: p.payload });
    offset = page.next_page_offset;
  } while (offset !== null && offset !== undefined);

  const ids = new Set<number>([...model.keys(), ...pending.keys(), ...observed.keys()]);
  for (const id of [...ids].sort((a, b) => a - b)) {
    const got: Slot = observed.get(id) ?? null;
    const cands = pending.get(id);
    if (cands) {
      const i = cands.findIndex((c) => sameSlot(c, got));
      if (i >= 0) {
        const c = cands[i];
        if (c === null) model.delete(id);
        else model.set(id, c);
        continue;
      }
      problems.push(`${label}: id ${id} (in flight at the kill) is ${describeSlot(got)}; allowed: ${cands.map(describeSlot).join(' | ')}`);
      tally(cands[0], got);
    } else {
      const want: Slot = model.get(id) ?? null;
      if (sameSlot(want, got)) continue;
      problems.push(`${label}: id ${id} is ${describeSlot(got)}; acknowledged: ${describeSlot(want)}`);
      tally(want, got);
    }
    // Adopt what the server has so one loss is reported once, not in every later cycle.
    if (got === null) model.delete(id);
    else model.set(id, got);
  }
  pending.clear();

  const count = (await ok('POST', `collections/${COLLECTION}/points/count`, { exact: true })).count;
  if (count !== model.size) problems.push(`${label}: count ${count}, expected ${model.size}`);
  const info = await ok('GET', `collections/${COLLECTION}`);
  if (info.points_count !== model.size) problems.push(`${label}: points_count ${info.points_count}, expected ${model.size}`);
  if (observed.size !== count) problems.push(`${label}: scroll saw ${observed.size} points, count says ${count}`);
  for (const { filter, test: pred } of COUNT_CHECKS) {
    const want = [...model.values()].filter((p) => pred(p.payload)).length;
    const got = (await ok('POST', `collections/${COLLECTION}/points/count`, { filter, exact: true })).count;
    if (got !== want) problems.push(`${label}: count with filter ${JSON.stringify(filter)} is ${got}, expected ${want}`);
  }
  const countProblems = problems.filter((p) => p.includes('count')).length;
  summary.countMismatches += countProblems;

  // Searches: the stored vectors are the ones the index finds, and no stale vector of an
  // overwritten or deleted point is returned.
  const live = [...model.entries()];
  let searchProblems = 0;
  for (const [id, p] of sample(live, 3)) {
    const res = await ok('POST', `collections/${COLLECTION}/points/query`, { query: p.vector, limit: 1, params: { exact: true } });
    const top = res.points[0];
    if (!top || top.id !== id || Math.abs(top.score - 1) > 1e-4) {
      problems.push(`${label}: exact query by the vector of ${id} returned ${JSON.stringify(top)}`);
      searchProblems++;
    }
  }
  for (let i = 0; i < 3 && live.length > 0; i++) {
    const q = randomVector();
    const qn = normalised(q);
    const res = await ok('POST', `collections/${COLLECTION}/points/query`, { query: q, limit: 10 });
    if (res.points.length !== Math.min(10, live.length)) {
      problems.push(`${label}: query returned ${res.points.length} points, expected ${Math.min(10, live.length)}`);
      searchProblems++;
    }
    for (const h of res.points) {
      const m = model.get(h.id);
      const want = m ? dot(qn, normalised(m.vector)) : NaN;
      if (!m || Math.abs(h.score - want) > 1e-4) {
        problems.push(`${label}: query hit ${h.id} score ${h.score}; ${m ? `expected ${want}` : 'the point does not exist'}`);
        searchProblems++;
      }
    }
  }
  summary.searchMismatches += searchProblems;
  return problems;
}

function tally(want: Slot, got: Slot): void {
  if (want !== null && got === null) summary.lostPoints++;
  else if (want === null && got !== null) summary.resurrectedPoints++;
  else if (want !== null && got !== null) {
    if (!sameVector(want.vector, got.vector)) {
      summary.wrongVector++;
      summary.lostPoints++;
    } else {
      summary.wrongPayload++;
      summary.lostPoints++;
    }
  }
}

function writeSummary(): void {
  summary.elapsedMs = Date.now() - started;
  const file = process.env.QUIVER_CRASH_SUMMARY;
  if (file) fs.writeFileSync(file, JSON.stringify(summary, null, 2));
}

// -- the test ---------------------------------------------------------------------------------

test.before(async () => {
  storageDir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-crash-'));
  summary.storage = storageDir;
  server = await startServer(storageDir);
  await ok('PUT', `collections/${COLLECTION}`, {
    vectors: { size: DIM, distance: 'Cosine' },
    optimizers_config: { flush_interval_sec: 1, indexing_threshold: 1, deleted_threshold: 0.1, vacuum_min_vector_number: 100 },
    hnsw_config: { m: 8, ef_construct: 32 },
  });
  await ok('PUT', `collections/${COLLECTION}/index?wait=true`, { field_name: 'tag', field_schema: 'keyword' });
  await ok('PUT', `collections/${COLLECTION}/index?wait=true`, { field_name: 'c', field_schema: 'integer' });
});

test.after.always(async () => {
  if (server) await server.stop('SIGTERM');
  writeSummary();
  const failed = summary.lostPoints + summary.resurrectedPoints + summary.countMismatches + summary.searchMismatches + summary.writeErrors + summary.partialSingleOps > 0;
  if (!failed && storageDir) fs.rmSync(storageDir, { recursive: true, force: true });
  else if (storageDir) console.log(`crash test: storage kept at ${storageDir} (seed ${SEED})`);
});

for (let cycle = 1; cycle <= CYCLES; cycle++) {
  test.serial(`kill -9 cycle ${cycle}/${CYCLES}`, async (t) => {
    t.timeout(60_000);
    if (!server) t.fail('no server running (an earlier cycle failed to restart it)');
    const stats: CycleStats = {
      cycle,
      pauseMs: 0,
      killAfterMs: between(KILL_MIN_MS, KILL_MAX_MS),
      acked: 0,
      inFlight: 0,
      inFlightApplied: 0,
      inFlightNotApplied: 0,
      inFlightPartial: 0,
      inFlightKinds: [],
      checkpointsBeforeKill: 0,
      optimizerJobsBeforeKill: 0,
      tempFilesAfterKill: 0,
      loadedFromCheckpoint: null,
      replayed: 0,
      tornTail: false,
      points: 0,
      restartMs: 0,
      verifyMs: 0,
      mismatches: [],
    };
    // Most cycles wait first, so the kill lands at a random phase of the 1 s
    // checkpoint timer and of the optimizer's jobs.
    if (rng() < 0.6) {
      stats.pauseMs = int(2000);
      await sleep(stats.pauseMs);
    }
    const srv = server!;
    const tempBefore = tempFiles();
    const stop = { killed: false };
    const writers = Array.from({ length: WRITERS }, (_, w) => writer(w, srv, stop, stats));
    await sleep(stats.killAfterMs);
    stop.killed = true;
    const [code, signal] = await srv.stop('SIGKILL');
    await Promise.all(writers);
    t.is(
      signal,
      'SIGKILL',
      `the server ended with ${code ?? signal} before the kill; stderr: ${srv.stderr().slice(-2000)}; last log lines: ${srv
        .logLines()
        .slice(-8)
        .map((l) => JSON.stringify(l))
        .join('\n')}`,
    );
    const tempAfter = tempFiles();
    stats.tempFilesAfterKill = [...tempAfter].filter((n) => !tempBefore.has(n)).length;
    summary.leftoverTempFiles = tempAfter.size;
    const before = srv.logLines();
    stats.checkpointsBeforeKill = countOf(before, 'checkpoint written');
    stats.optimizerJobsBeforeKill = countOf(before, 'optimizer progress');
    server = undefined;

    // Which in-flight states count as "applied": compare after the restart.
    const inFlight = new Map(pending);

    const t0 = Date.now();
    server = await startServer(storageDir);
    stats.restartMs = Date.now() - t0;
    const after = server.logLines();
    const loaded = after.find((l) => l.msg === 'shard loaded');
    stats.loadedFromCheckpoint = (loaded?.checkpoint as string | null) ?? null;
    stats.replayed = Number(loaded?.replayed ?? 0);
    stats.tornTail = after.some((l) => typeof l.msg === 'string' && l.msg.startsWith('WAL had a torn tail'));

    const t1 = Date.now();
    const problems = await verify(`cycle ${cycle}`);
    stats.verifyMs = Date.now() - t1;
    stats.points = model.size;

    // Classify each in-flight request by what the restart kept of it: applied (every id
    // shows the final state), not applied (every id shows the prior state), or partial
    // (a /points/batch cut between its operations). Ids whose state the request does not
    // change count as both.
    for (const [w, ids] of inFlightRequests(inFlight)) {
      let applied = true;
      let notApplied = true;
      for (const id of ids) {
        const cands = inFlight.get(id)!;
        const now = model.get(id) ?? null;
        applied &&= sameRaw(cands[cands.length - 1], now);
        notApplied &&= sameRaw(cands[0], now);
      }
      if (applied && !notApplied) stats.inFlightApplied++;
      else if (notApplied && !applied) stats.inFlightNotApplied++;
      else if (!applied && !notApplied) {
        stats.inFlightPartial++;
        const kind = inFlightKind.get(w) ?? '?';
        if (!kind.startsWith('batch[')) {
          summary.partialSingleOps++;
          problems.push(`cycle ${cycle}: writer ${w}'s ${kind} (in flight at the kill) was applied to some of its points only`);
        }
      }
    }

    summary.inFlightOps += stats.inFlight;
    summary.inFlightApplied += stats.inFlightApplied;
    summary.inFlightNotApplied += stats.inFlightNotApplied;
    summary.inFlightPartial += stats.inFlightPartial;
    summary.checkpointsBeforeKill += stats.checkpointsBeforeKill;
    if (stats.checkpointsBeforeKill > 0) summary.killsWithCheckpointDuringRun++;
    summary.optimizerJobsBeforeKill += stats.optimizerJobsBeforeKill;
    if (stats.tempFilesAfterKill > 0) summary.killsDuringAtomicWrite++;
    if (stats.loadedFromCheckpoint !== null) summary.restartsFromCheckpoint++;
    summary.replayedRecords += stats.replayed;
    if (stats.tornTail) summary.tornTails++;
    summary.maxPoints = Math.max(summary.maxPoints, model.size);
    summary.finalPoints = model.size;
    summary.killAfterMs.min = Math.min(summary.killAfterMs.min, stats.killAfterMs);
    summary.killAfterMs.max = Math.max(summary.killAfterMs.max, stats.killAfterMs);
    summary.restartMs.max = Math.max(summary.restartMs.max, stats.restartMs);
    summary.restartMs.avg += stats.restartMs / CYCLES;
    summary.perCycle.push(stats);
    stats.mismatches = problems;
    for (const p of problems) summary.failures.push(p);
    writeSummary();

    t.log(
      `pause ${stats.pauseMs} ms, kill after ${stats.killAfterMs} ms: ${stats.acked} acked, ${stats.inFlight} in flight ` +
        `(applied ${stats.inFlightApplied}, not ${stats.inFlightNotApplied}, partial ${stats.inFlightPartial}); ` +
        `checkpoints ${stats.checkpointsBeforeKill}${stats.tempFilesAfterKill > 0 ? ' (killed mid-write)' : ''}, optimizer jobs ${stats.optimizerJobsBeforeKill}; restart ${stats.restartMs} ms ` +
        `(checkpoint ${stats.loadedFromCheckpoint}, replayed ${stats.replayed}${stats.tornTail ? ', torn tail' : ''}); ${model.size} points`,
    );
    t.deepEqual(problems, [], `seed ${SEED}, storage ${storageDir}`);
    t.is(summary.writeErrors, 0, summary.failures.join('\n'));
  });
}

/** Groups in-flight ids by the request they came from. */
function inFlightRequests(inFlight: Map<number, Slot[]>): Map<number, number[]> {
  // Each writer has at most one request in flight and owns its own id range.
  const byWriter = new Map<number, number[]>();
  for (const id of inFlight.keys()) {
    const w = Math.floor((id - 1) / 10_000);
    let l = byWriter.get(w);
    if (!l) byWriter.set(w, (l = []));
    l.push(id);
  }
  return byWriter;
}

test.serial('a clean shutdown (SIGTERM) and restart after the kills keeps everything', async (t) => {
  t.timeout(60_000);
  if (!server) t.fail('no server running');
  const [code] = await server!.stop('SIGTERM');
  t.is(code, 0, server!.stderr().slice(-2000));
  server = await startServer(storageDir);
  const loaded = server.logLines().find((l) => l.msg === 'shard loaded');
  t.is(Number(loaded?.replayed ?? -1), 0, 'a clean shutdown checkpoints everything: nothing to replay');
  const problems = await verify('after clean restart');
  summary.finalPoints = model.size;
  for (const p of problems) summary.failures.push(p);
  t.deepEqual(problems, []);
});

test.serial('summary: no acknowledged write lost over all cycles', (t) => {
  summary.elapsedMs = Date.now() - started;
  writeSummary();
  const { perCycle, failures, ...rest } = summary;
  void perCycle;
  t.log(JSON.stringify(rest));
  t.is(summary.lostPoints, 0, failures.slice(0, 20).join('\n'));
  t.is(summary.resurrectedPoints, 0);
  t.is(summary.countMismatches, 0);
  t.is(summary.searchMismatches, 0);
  t.is(summary.writeErrors, 0);
  t.is(summary.partialSingleOps, 0);
  t.true(summary.ackedOps > CYCLES, 'the writers got acknowledgements');
});
