/**
 * Fault cycles under load (npm run bench:faults [-- --cycles 200 --seed 1]): 3 peers, one
 * collection (replication_factor `--rf` 2, shard_number `--shards` 3, `--dim`-d Dot
 * vectors), writers and readers running all the time, and `--cycles` cycles of one
 * fault each.
 *
 * Writers (`--writers`, wait=true, through the peers not under a fault, in turn; a peer
 * rejoins that rotation once its GET /readyz answers 200, as behind a load balancer): each
 * writes batches of `--batch` points, either fresh ids (its own range) or, with
 * probability `--overwrite`, ids it wrote before with a new payload value. It records
 * which ids were acknowledged, and per id the last acknowledged value and whether a
 * write of it failed after that (such an id may hold either value: a failed write may
 * or may not have been applied).
 *
 * Readers (`--readers`, default consistency, through the peers not under a fault):
 * queries and exact counts; answers and failures are counted, failures grouped by status
 * and message. A count below the number of points acknowledged before it was sent is
 * recorded as a stale count.
 *
 * A cycle picks a peer and an action at random (seeded by `--seed`): kill (SIGKILL, down
 * 1-5 s, started again), pause (SIGSTOP, SIGCONT after 1-5 s) or restart (SIGTERM, waits
 * for the exit, started again); then it waits until every peer sees every replica Active
 * without a break for `--settle-ms` (the time counted is when that streak began) before
 * the next cycle. A cycle that does not get there in `--cycle-timeout` seconds ends the
 * run as a hang.
 *
 * At the end: writers and readers stop, all Active again, then every point is scrolled
 * through every peer: every acknowledged id must be there (lost otherwise), and ids whose
 * last write was acknowledged must hold its value; every shard's replicas must have the
 * same digest (GET /collections/{c}/shards/{id}/digest). Results: bench/results/
 * faults-<tag>.{json,md} (written every 10 cycles too); peer logs in a temp directory
 * named in the report.
 *
 * `--mode transfer-kill` (`--trials` 50 per method of `--methods`, default `auto`; RF
 * `--rf` 1; `--preload` 60,000 points first): the same writers and readers, but each
 * trial moves a shard and kills (SIGKILL) the transfer's source or target (alternately)
 * at a random moment of it, then checks that every acknowledged point is there once,
 * that replicas agree, and (polled every 100 ms throughout) that every shard always has
 * an Active replica. Results: bench/results/faults-<date>-transfer-kill-<methods>.{json,md}.
 */

import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

import { Cluster, api, change, sleep, waitFor } from '../../test/cluster/harness';
import { Rng, boolFlag, sourceVersion, checkFlags, digests, divergent, flagValue, numFlag, replicaStates, round, stats, today, type Stats } from './common';

const argv = process.argv.slice(2);
checkFlags(argv, [
  'cycles',
  'seed',
  'rf',
  'shards',
  'dim',
  'writers',
  'readers',
  'batch',
  'overwrite',
  'write-pause-ms',
  'read-pause-ms',
  'fault-min-ms',
  'fault-max-ms',
  'settle-ms',
  'cycle-timeout',
  'actions',
  'tag',
  'keep-logs',
  'mode',
  'trials',
  'methods',
  'preload',
  'down-min-ms',
  'down-max-ms',
]);
const MODE = flagValue(argv, 'mode') ?? 'cycles';
if (MODE !== 'cycles' && MODE !== 'transfer-kill') throw new Error(`--mode: cycles or transfer-kill, got ${MODE}`);
const TRANSFER_KILL = MODE === 'transfer-kill';
const CYCLES = numFlag(argv, 'cycles', 200);
const TRIALS = numFlag(argv, 'trials', 50);
/** transfer-kill: the methods `move_shard` names, `auto` naming none (the default method). */
const METHODS = (flagValue(argv, 'methods') ?? 'auto').split(',');
for (const m of METHODS) if (!['auto', 'stream_records', 'snapshot', 'wal_delta'].includes(m)) throw new Error(`--methods: unknown method ${m}`);
/** transfer-kill: points loaded before the trials (so a transfer takes a while). */
const PRELOAD = numFlag(argv, 'preload', TRANSFER_KILL ? 60_000 : 0);
const DOWN_MIN_MS = numFlag(argv, 'down-min-ms', 1000);
const DOWN_MAX_MS = numFlag(argv, 'down-max-ms', 3000);
const SEED = numFlag(argv, 'seed', 1);
const RF = numFlag(argv, 'rf', TRANSFER_KILL ? 1 : 2);
const SHARDS = numFlag(argv, 'shards', 3);
const DIM = numFlag(argv, 'dim', 8);
const WRITERS = numFlag(argv, 'writers', 3);
const READERS = numFlag(argv, 'readers', 2);
const BATCH = numFlag(argv, 'batch', 10);
const OVERWRITE = numFlag(argv, 'overwrite', 0.7);
const WRITE_PAUSE_MS = numFlag(argv, 'write-pause-ms', 100);
const READ_PAUSE_MS = numFlag(argv, 'read-pause-ms', 50);
const FAULT_MIN_MS = numFlag(argv, 'fault-min-ms', 1000);
const FAULT_MAX_MS = numFlag(argv, 'fault-max-ms', 5000);
const SETTLE_MS = numFlag(argv, 'settle-ms', 1500);
const CYCLE_TIMEOUT_MS = numFlag(argv, 'cycle-timeout', 180) * 1000;
const ACTIONS = (flagValue(argv, 'actions') ?? 'kill,pause,restart').split(',') as Action[];
const KEEP_LOGS = boolFlag(argv, 'keep-logs', false);
const TAG =
  flagValue(argv, 'tag') ??
  (TRANSFER_KILL ? `${today()}-transfer-kill-${METHODS.join('-')}${TRIALS < 50 ? `-${TRIALS}trials` : ''}` : `${today()}${CYCLES < 200 ? `-${CYCLES}cycles` : ''}`);
const REPO = path.join(__dirname, '..', '..', '..');
const NAME = 'faults';
const SOURCE = sourceVersion();

type Action = 'kill' | 'pause' | 'restart';
for (const a of ACTIONS) if (!['kill', 'pause', 'restart'].includes(a)) throw new Error(`--actions: unknown action ${a}`);

// -- bookkeeping ------------------------------------------------------------------------------

/** A failure's group: status and message with numbers (ids, peers, times) replaced by N. */
function groupOf(status: number | string, message: string): string {
  return `${status} ${message.replace(/\d+(\.\d+)?/g, 'N').replace(/\s+/g, ' ').slice(0, 400)}`;
}

function bump(m: Map<string, number>, k: string, n = 1): void {
  m.set(k, (m.get(k) ?? 0) + n);
}

interface Reply {
  status: number | string;
  body: any;
  message: string;
}

/** One request; a transport failure becomes status `network` with its cause. */
async function call(url: string, method: string, route: string, body: unknown, timeoutMs: number): Promise<Reply> {
  try {
    const r = await api(url, method, route, body, timeoutMs);
    const message = r.status === 200 ? '' : String(r.body?.status?.error ?? (typeof r.body === 'string' ? r.body : JSON.stringify(r.body)));
    return { status: r.status, body: r.body, message };
  } catch (err) {
    const e = err as Error & { cause?: { code?: string; message?: string } };
    const cause = e.cause?.code ?? e.cause?.message ?? '';
    return { status: e.name === 'TimeoutError' ? 'client timeout' : 'network', body: null, message: `${e.message}${cause ? ` (${cause})` : ''}` };
  }
}

const rng = new Rng(SEED);
/** Vectors and payload values come from their own source, so the fault sequence of a seed does not depend on timing. */
const dataRng = new Rng(SEED * 7919 + 1);

const vec = (): number[] => Array.from({ length: DIM }, () => round(dataRng.float() * 2 - 1, 4));

// Writer state. `last`: per id the last acknowledged value; `uncertain`: ids whose last
// write failed (the value may be the failed one); `acked`: ids acknowledged at least once.
const acked = new Set<number>();
const last = new Map<number, number>();
const uncertain = new Set<number>();
const writes = { batchesAcked: 0, batchesFailed: 0, pointsAcked: 0, pointsFailed: 0, freshAcked: 0, overwritesAcked: 0, failures: new Map<string, number>(), byPhase: new Map<string, number>() };
const reads = { ok: new Map<string, number>(), failed: new Map<string, number>(), failures: new Map<string, number>(), byPhase: new Map<string, number>(), staleCounts: 0, staleExamples: [] as string[] };
/** What the cycle is doing when a request is sent: `during <action>` (the fault is on), `after <action>` (back, waiting for all Active), or `between cycles`. */
let phase = 'before the first cycle';

/** Peers that requests may go to (not under a fault, and ready). */
const available = new Set<number>([0, 1, 2]);
/** When each peer was last put back into rotation. */
const readySince = new Map<number, number>();
let stopping = false;
let rr = 0;
function pickPeer(): number {
  const ps = [...available];
  return ps[rr++ % ps.length];
}

async function writer(c: Cluster, w: number): Promise<void> {
  const mine: number[] = [];
  let nextFresh = 0;
  let value = 0;
  while (!stopping) {
    const overwrite = mine.length >= BATCH && dataRng.float() < OVERWRITE;
    const ids: number[] = [];
    if (overwrite) {
      const chosen = new Set<number>();
      while (chosen.size < BATCH) chosen.add(mine[dataRng.int(0, mine.length - 1)]);
      ids.push(...chosen);
    } else {
      for (let k = 0; k < BATCH; k++) ids.push(w * 1_000_000_000 + nextFresh++);
    }
    const v = ++value;
    const sentIn = phase;
    const points = ids.map((id) => ({ id, vector: vec(), payload: { w, v } }));
    const r = await call(c.peers[pickPeer()].url, 'PUT', `/collections/${NAME}/points?wait=true`, { points }, 60_000);
    if (r.status === 200 && r.body?.result?.status === 'completed') {
      writes.batchesAcked++;
      writes.pointsAcked += ids.length;
      if (overwrite) writes.overwritesAcked += ids.length;
      else writes.freshAcked += ids.length;
      for (const id of ids) {
        if (!acked.has(id)) mine.push(id);
        acked.add(id);
        last.set(id, v);
        uncertain.delete(id);
      }
    } else {
      writes.batchesFailed++;
      writes.pointsFailed += ids.length;
      bump(writes.failures, groupOf(r.status, r.status === 200 ? `answered status ${r.body?.result?.status}` : r.message));
      bump(writes.byPhase, sentIn);
      for (const id of ids) uncertain.add(id);
    }
    if (WRITE_PAUSE_MS > 0) await sleep(WRITE_PAUSE_MS);
  }
}

async function reader(c: Cluster): Promise<void> {
  while (!stopping) {
    const kind = dataRng.float() < 0.5 ? 'query' : 'count';
    const before = acked.size;
    const peer = pickPeer();
    const url = c.peers[peer].url;
    const sent = Date.now();
    const sentIn = phase;
    const r =
      kind === 'query'
        ? await call(url, 'POST', `/collections/${NAME}/points/query`, { query: vec(), limit: 10 }, 30_000)
        : await call(url, 'POST', `/collections/${NAME}/points/count`, { exact: true }, 30_000);
    if (r.status === 200) {
      bump(reads.ok, kind);
      if (kind === 'count' && r.body.result.count < before) {
        reads.staleCounts++;
        const since = readySince.get(peer);
        if (reads.staleExamples.length < 20) {
          reads.staleExamples.push(
            `cycle ${cycleNo}: count ${r.body.result.count} < ${before} acknowledged, through peer ${peer}${since === undefined ? ' (never faulted)' : `, sent ${sent - since} ms after it was back in rotation`}${lastFault ? `; last fault: ${lastFault}` : ''}`,
          );
        }
      }
    } else {
      bump(reads.failed, kind);
      bump(reads.failures, `${kind}: ${groupOf(r.status, r.message)}`);
      bump(reads.byPhase, sentIn);
    }
    if (READ_PAUSE_MS > 0) await sleep(READ_PAUSE_MS);
  }
}

// -- cycles -------------------------------------------------------------------------------------

interface CycleRow {
  cycle: number;
  peer: number;
  action: Action;
  faultMs: number;
  /** From the peer being back (started, or continued) until every replica was Active on every peer. */
  backToActiveMs: number;
  /** From the start of the fault. */
  faultToActiveMs: number;
  /** Replica states seen that were not Active during the wait (e.g. `Dead`, `Partial`). */
  seen: string[];
}

let cycleNo = 0;
let lastFault = '';
const cycles: CycleRow[] = [];
const hangs: string[] = [];

/** Waits until every peer sees every replica Active without a break for SETTLE_MS; returns when that streak began (or null on timeout) and states seen. */
async function waitAllActive(c: Cluster, timeoutMs: number): Promise<{ since: number | null; seen: Set<string>; lastViews: string }> {
  const deadline = Date.now() + timeoutMs;
  let since: number | null = null;
  const seen = new Set<string>();
  let lastViews = '';
  while (Date.now() < deadline) {
    const views = await Promise.all(c.peers.map((p) => (p.server ? replicaStates(p.url, NAME, 3000).catch((e: Error) => ({ error: e.message })) : Promise.resolve({ error: 'not running' }))));
    let all = true;
    for (const v of views) {
      if ('error' in v) {
        all = false;
        continue;
      }
      for (const s of Object.values(v)) {
        if (s !== 'Active') {
          all = false;
          seen.add(s as string);
        }
      }
    }
    lastViews = JSON.stringify(views);
    if (all) {
      since ??= Date.now();
      if (Date.now() - since >= SETTLE_MS) return { since, seen, lastViews };
    } else since = null;
    await sleep(200);
  }
  return { since: null, seen, lastViews };
}

const logDir = fs.mkdtempSync(path.join(os.tmpdir(), `quiver-faults-${TAG}-`));
const logStreams = [0, 1, 2].map((i) => fs.createWriteStream(path.join(logDir, `peer-${i}.log`), { flags: 'a' }));
function attachLog(c: Cluster, i: number, note: string): void {
  logStreams[i].write(`{"bench":"${note}","at":"${new Date().toISOString()}"}\n`);
  const s = c.peers[i].server;
  s?.child.stdout?.pipe(logStreams[i], { end: false });
  s?.child.stderr?.pipe(logStreams[i], { end: false });
}

async function startPeer(c: Cluster, i: number, bootstrap: number | null, note: string): Promise<void> {
  await c.startPeer(i, bootstrap);
  attachLog(c, i, note);
}

async function runCycle(c: Cluster): Promise<boolean> {
  cycleNo++;
  const peer = rng.int(0, 2);
  const action = rng.pick(ACTIONS);
  const faultMs = rng.int(FAULT_MIN_MS, FAULT_MAX_MS);
  const t0 = Date.now();
  lastFault = `${action} of peer ${peer}`;
  phase = `during a ${action}`;
  available.delete(peer);
  if (action === 'kill') {
    logStreams[peer].write(`{"bench":"cycle ${cycleNo}: SIGKILL"}\n`);
    await c.kill(peer, 'SIGKILL');
    await sleep(faultMs);
    await startPeer(c, peer, null, `cycle ${cycleNo}: started after SIGKILL`);
  } else if (action === 'pause') {
    logStreams[peer].write(`{"bench":"cycle ${cycleNo}: SIGSTOP for ${faultMs} ms"}\n`);
    c.signal(peer, 'SIGSTOP');
    await sleep(faultMs);
    c.signal(peer, 'SIGCONT');
  } else {
    logStreams[peer].write(`{"bench":"cycle ${cycleNo}: SIGTERM"}\n`);
    await c.kill(peer, 'SIGTERM');
    await startPeer(c, peer, null, `cycle ${cycleNo}: started after SIGTERM`);
  }
  const back = Date.now();
  phase = `after a ${action}, until all Active`;
  // Back in rotation once it says it is ready (consensus caught up), as a load balancer would.
  await waitFor(`peer ${peer} ready`, async () => (await call(c.peers[peer].url, 'GET', '/readyz', undefined, 2000)).status === 200, 120_000, 50).catch(() => {
    hangs.push(`cycle ${cycleNo} (${action} of peer ${peer}): GET /readyz not 200 within 120 s of the peer being back (put back into rotation anyway)`);
  });
  readySince.set(peer, Date.now());
  available.add(peer);
  const w = await waitAllActive(c, CYCLE_TIMEOUT_MS);
  if (w.since === null) {
    hangs.push(`cycle ${cycleNo} (${action} of peer ${peer}, ${Date.now() - t0} ms ago): not all replicas Active within ${CYCLE_TIMEOUT_MS / 1000} s; last views: ${w.lastViews.slice(0, 2000)}`);
    console.log(`cycle ${cycleNo}: ${action} peer ${peer}: NOT all Active within ${CYCLE_TIMEOUT_MS / 1000} s`);
    return false;
  }
  phase = 'between cycles';
  const row: CycleRow = { cycle: cycleNo, peer, action, faultMs: action === 'restart' ? back - t0 : faultMs, backToActiveMs: Math.max(0, w.since - back), faultToActiveMs: w.since - t0, seen: [...w.seen].sort() };
  cycles.push(row);
  console.log(
    `cycle ${cycleNo}: ${action} peer ${peer} (${row.faultMs} ms): all Active ${row.backToActiveMs} ms after it was back${row.seen.length ? ` (seen: ${row.seen.join(', ')})` : ''}; ` +
      `writes ${writes.batchesAcked} acked / ${writes.batchesFailed} failed batches, reads ${sum(reads.ok)} ok / ${sum(reads.failed)} failed, ${acked.size} ids`,
  );
  return true;
}

function sum(m: Map<string, number>): number {
  let s = 0;
  for (const v of m.values()) s += v;
  return s;
}

// -- final checks -------------------------------------------------------------------------------

interface Final {
  allActiveMs: number | null;
  perPeer: Array<{ peer: number; points: number | null; lost: number; wrongValue: number; examples: string[]; error?: string }>;
  divergent: string[];
  checkedValues: number;
  uncertainIds: number;
}

async function scrollAll(url: string): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  let offset: unknown = null;
  for (;;) {
    const r = await api(url, 'POST', `/collections/${NAME}/points/scroll`, { limit: 2000, offset, with_payload: true, with_vector: false }, 60_000);
    if (r.status !== 200) throw new Error(`scroll: ${r.status} ${JSON.stringify(r.body)}`);
    for (const p of r.body.result.points) out.set(Number(p.id), p.payload?.v);
    offset = r.body.result.next_page_offset;
    if (offset === null) return out;
  }
}

async function finalChecks(c: Cluster): Promise<Final> {
  const t0 = Date.now();
  const w = await waitAllActive(c, CYCLE_TIMEOUT_MS);
  const perPeer: Final['perPeer'] = [];
  for (const p of c.peers) {
    try {
      const got = await scrollAll(p.url);
      let lost = 0;
      let wrong = 0;
      const examples: string[] = [];
      for (const id of acked) {
        if (!got.has(id)) {
          lost++;
          if (examples.length < 10) examples.push(`id ${id} missing (last acknowledged value ${last.get(id)})`);
          continue;
        }
        if (!uncertain.has(id) && got.get(id) !== last.get(id)) {
          wrong++;
          if (examples.length < 10) examples.push(`id ${id}: value ${got.get(id)}, last acknowledged ${last.get(id)}`);
        }
      }
      perPeer.push({ peer: p.index, points: got.size, lost, wrongValue: wrong, examples });
    } catch (err) {
      perPeer.push({ peer: p.index, points: null, lost: -1, wrongValue: -1, examples: [], error: (err as Error).message });
    }
  }
  const d = divergent(await digests(c, NAME, SHARDS), RF).map((x) => `shard ${x.shard}: ${x.why}: ${x.replicas.map((r) => `peer ${r.peer} ${r.points} points ${r.digest.slice(0, 12)}`).join('; ')}`);
  let checked = 0;
  for (const id of acked) if (!uncertain.has(id)) checked++;
  return { allActiveMs: w.since === null ? null : w.since - t0, perPeer, divergent: d, checkedValues: checked, uncertainIds: [...uncertain].filter((id) => acked.has(id)).length };
}

// -- report -------------------------------------------------------------------------------------

function report(final: Final | null, startedAt: string, elapsedS: number): { json: unknown; md: string } {
  const back = stats(cycles.map((x) => x.backToActiveMs));
  const fromFault = stats(cycles.map((x) => x.faultToActiveMs));
  const byAction = new Map<Action, Stats>();
  for (const a of ACTIONS) byAction.set(a, stats(cycles.filter((x) => x.action === a).map((x) => x.backToActiveMs)));
  const worst = [...cycles].sort((a, b) => b.backToActiveMs - a.backToActiveMs).slice(0, 5);
  const lost = final ? Math.max(...final.perPeer.map((p) => p.lost)) : null;
  const wrong = final ? Math.max(...final.perPeer.map((p) => p.wrongValue)) : null;
  const json = {
    tag: TAG,
    source: SOURCE,
    startedAt,
    elapsedSeconds: round(elapsedS, 0),
    params: { cycles: CYCLES, seed: SEED, rf: RF, shards: SHARDS, dim: DIM, writers: WRITERS, readers: READERS, batch: BATCH, overwrite: OVERWRITE, writePauseMs: WRITE_PAUSE_MS, readPauseMs: READ_PAUSE_MS, faultMs: [FAULT_MIN_MS, FAULT_MAX_MS], settleMs: SETTLE_MS, actions: ACTIONS },
    machine: { cores: os.cpus().length, loadAverage: os.loadavg().map((x) => round(x, 2)) },
    cyclesDone: cycles.length,
    writes: { ...writes, failures: Object.fromEntries(writes.failures), byPhase: Object.fromEntries(writes.byPhase), idsAcknowledged: acked.size },
    reads: { ok: Object.fromEntries(reads.ok), failed: Object.fromEntries(reads.failed), failures: Object.fromEntries(reads.failures), byPhase: Object.fromEntries(reads.byPhase), staleCounts: reads.staleCounts, staleExamples: reads.staleExamples },
    backToAllActiveMs: back,
    faultToAllActiveMs: fromFault,
    byAction: Object.fromEntries(byAction),
    hangs,
    final,
    logDir: KEEP_LOGS || hangs.length || (final && (lost || wrong || final.divergent.length)) ? logDir : null,
    cycles,
  };
  const f = (x: number) => x.toLocaleString('en-US');
  const md: string[] = [
    `# Fault cycles under load (${TAG})`,
    '',
    `Command: \`npm run bench:faults${argv.length ? ` -- ${argv.join(' ')}` : ''}\` at commit ${SOURCE.commit}${SOURCE.changed.length ? ` (changed: ${SOURCE.changed.join(', ')})` : ''}; started ${startedAt}, ${round(elapsedS / 60, 1)} min. ` +
      `3 peers on 127.0.0.1 (one shared ${os.cpus().length}-core machine, load average at the end ${os.loadavg().map((x) => round(x, 2)).join(' ')}), one collection: RF ${RF}, shard_number ${SHARDS}, ${DIM}-d Dot vectors. ` +
      `${WRITERS} writers (batches of ${BATCH}, wait=true, ${Math.round(OVERWRITE * 100)}% overwrites of their own acknowledged ids with a new payload value, ${WRITE_PAUSE_MS} ms between batches) and ${READERS} readers (query or exact count, default consistency, ${READ_PAUSE_MS} ms between requests), all through the peers not under a fault, in turn (a peer rejoins the rotation once GET /readyz answers 200). ` +
      `Each cycle: a random peer is killed (SIGKILL, started again after ${FAULT_MIN_MS / 1000}-${FAULT_MAX_MS / 1000} s), paused (SIGSTOP, SIGCONT after ${FAULT_MIN_MS / 1000}-${FAULT_MAX_MS / 1000} s) or restarted (SIGTERM, then started); the next cycle starts once every peer sees every replica Active for ${SETTLE_MS} ms without a break. Seed ${SEED}.`,
    '',
    '## Summary',
    '',
    '| measure | value |',
    '|---|---|',
    `| cycles done | ${cycles.length} of ${CYCLES} (${ACTIONS.map((a) => `${a} ${cycles.filter((x) => x.action === a).length}`).join(', ')}) |`,
    `| hangs (not all Active within ${CYCLE_TIMEOUT_MS / 1000} s) | ${hangs.length} |`,
    `| write batches acknowledged / failed | ${f(writes.batchesAcked)} / ${f(writes.batchesFailed)} |`,
    `| points acknowledged (fresh + overwrites) / in failed batches | ${f(writes.pointsAcked)} (${f(writes.freshAcked)} + ${f(writes.overwritesAcked)}) / ${f(writes.pointsFailed)} |`,
    `| distinct ids acknowledged | ${f(acked.size)} |`,
    `| reads ok / failed | ${[...new Set([...reads.ok.keys(), ...reads.failed.keys()])].map((k) => `${k} ${f(reads.ok.get(k) ?? 0)} / ${f(reads.failed.get(k) ?? 0)}`).join('; ')} |`,
    `| counts below the points acknowledged before the request | ${f(reads.staleCounts)} |`,
    `| time to all Active after the peer was back, ms: median / p90 / max | ${back.median} / ${back.p90} / ${back.worst} |`,
    `| time to all Active from the start of the fault, ms: median / p90 / max | ${fromFault.median} / ${fromFault.p90} / ${fromFault.worst} |`,
    ...ACTIONS.map((a) => `| ... after ${a}, from back: median / max ms | ${byAction.get(a)!.median} / ${byAction.get(a)!.worst} |`),
    `| acknowledged points lost (worst peer) | ${lost ?? '–'} |`,
    `| ids with a value other than their last acknowledged one (of ${final ? f(final.checkedValues) : '–'} checked; ${final ? f(final.uncertainIds) : '–'} ids left out: a failed write came after their last acknowledged one) | ${wrong ?? '–'} |`,
    `| divergent shards (replica digests differ) | ${final ? final.divergent.length : '–'} |`,
    '',
  ];
  if (final) {
    md.push('## Final check', '', `All Active ${final.allActiveMs ?? 'never'} ms after the writers stopped.`, '', '| scrolled through | points | lost | wrong value | examples |', '|---|---:|---:|---:|---|');
    for (const p of final.perPeer) md.push(`| peer ${p.peer} | ${p.points ?? p.error} | ${p.lost} | ${p.wrongValue} | ${p.examples.join('; ')} |`);
    if (final.divergent.length) md.push('', 'Divergent:', '', ...final.divergent.map((d) => `- ${d}`));
    md.push('');
  }
  md.push('## Failed writes, by status and message (numbers replaced by N)', '');
  if (writes.failures.size === 0) md.push('none');
  for (const [k, n] of [...writes.failures].sort((a, b) => b[1] - a[1])) md.push(`- ${n} × \`${k}\``);
  if (writes.byPhase.size) md.push('', `Sent ${[...writes.byPhase].map(([k, n]) => `${k}: ${n}`).join('; ')}.`);
  md.push('', '## Failed reads, by status and message', '');
  if (reads.failures.size === 0) md.push('none');
  for (const [k, n] of [...reads.failures].sort((a, b) => b[1] - a[1])) md.push(`- ${n} × \`${k}\``);
  if (reads.byPhase.size) md.push('', `Sent ${[...reads.byPhase].map(([k, n]) => `${k}: ${n}`).join('; ')}.`);
  if (reads.staleExamples.length) md.push('', 'Stale counts (examples):', '', ...reads.staleExamples.map((s) => `- ${s}`));
  md.push('', '## Slowest cycles', '', '| cycle | action | peer | fault ms | back → all Active ms | states seen |', '|---:|---|---:|---:|---:|---|');
  for (const x of worst) md.push(`| ${x.cycle} | ${x.action} | ${x.peer} | ${x.faultMs} | ${x.backToActiveMs} | ${x.seen.join(', ')} |`);
  if (hangs.length) md.push('', '## Hangs', '', ...hangs.map((h) => `- ${h}`));
  if (json.logDir) md.push('', `Peer logs: \`${json.logDir}\` (kept for this run).`);
  md.push('');
  return { json, md: md.join('\n') };
}

// -- transfer-kill mode ---------------------------------------------------------------------------
//
// `--mode transfer-kill`: instead of cycles of random faults, `--trials` trials per method
// of `--methods`: a shard is moved (`move_shard`, the method named; `auto` names none) to a
// peer that lacks it, and at a random moment of the transfer (a fraction u, drawn
// uniformly, of its time, estimated from the progress the source shows and an
// undisturbed move's timing) its source or its target (alternately) is killed (SIGKILL) and started again 1-3 s later. Then every peer
// must see every replica Active and no transfer; every point acknowledged so far must be
// there (scrolled through a peer in rotation), once; every shard's replicas must agree.
// Throughout, a poller asks a peer not under the fault every 100 ms whether every shard
// has an Active replica.

interface TransferTrial {
  trial: number;
  method: string;
  shard: number;
  from: number;
  to: number;
  victim: 'source' | 'target';
  victimPeer: number;
  /** The fraction of the transfer's time drawn for the kill, and the transfer's whole time as estimated at the kill. */
  at: number;
  estimateMs: number;
  delayMs: number;
  /** The transfer was still listed right before the kill (the kill hit it while it ran). */
  during: boolean;
  /** Its progress comment then. */
  progress: string | null;
  downMs: number;
  /** Where the shard's replica ended: on the target (the move finished) or still on the source. */
  outcome: 'moved' | 'stayed' | 'both' | 'neither';
  /** From the victim's restart until every peer saw every replica Active and no transfer (settle streak start). */
  settleMs: number | null;
  checkedIds: number;
  lost: number;
  duplicated: number;
  lostExamples: string[];
  divergent: string[];
}

const trials: TransferTrial[] = [];
/** Per method, an undisturbed move: ms from the request's answer to the copy's end (the comment no longer "Transferring ..."), and from there until it is no longer listed. */
const calibration: Record<string, { copyMs: number; tailMs: number }> = {};

/** The copy's progress in a transfer's comment, "(sent/total)", or null. */
function progressOf(comment: string | undefined): { sent: number; total: number } | null {
  const m = /\((\d+)\/(\d+)\)/.exec(comment ?? '');
  return m === null ? null : { sent: Number(m[1]), total: Number(m[2]) };
}

const copying = (comment: string | undefined): boolean => (comment ?? '').startsWith('Transferring');
const activePolls = { polls: 0, unanswered: 0, violations: [] as string[] };
/** Peer the poller must not ask (under a fault). */
let faulted: number | null = null;
let pollerStop = false;

interface ClusterView {
  replicas: Map<number, Map<string, string>>;
  transfers: Array<{ shard_id: number; from: number; to: number; method: string; comment?: string }>;
}

async function clusterView(url: string, timeoutMs = 3000): Promise<ClusterView> {
  const r = await api(url, 'GET', `/collections/${NAME}/cluster`, undefined, timeoutMs);
  if (r.status !== 200) throw new Error(`GET /collections/${NAME}/cluster: ${r.status} ${JSON.stringify(r.body)}`);
  const v = r.body.result;
  const replicas = new Map<number, Map<string, string>>();
  const put = (shard: number, peer: string, state: string) => {
    if (!replicas.has(shard)) replicas.set(shard, new Map());
    replicas.get(shard)!.set(peer, state);
  };
  for (const x of v.local_shards) put(x.shard_id, String(v.peer_id), x.state);
  for (const x of v.remote_shards) put(x.shard_id, String(x.peer_id), x.state);
  return { replicas, transfers: v.shard_transfers ?? [] };
}

/** Every 100 ms: does every shard have an Active replica, as a peer not under the fault sees it? */
async function activePoller(c: Cluster): Promise<void> {
  let turn = 0;
  while (!pollerStop) {
    const peers = [0, 1, 2].filter((i) => i !== faulted && c.peers[i].server !== null);
    const peer = peers[turn++ % peers.length];
    activePolls.polls++;
    const v = await clusterView(c.peers[peer].url, 2000).catch(() => null);
    if (v === null) activePolls.unanswered++;
    else {
      for (let shard = 0; shard < SHARDS; shard++) {
        const reps = v.replicas.get(shard);
        if (reps === undefined || ![...reps.values()].includes('Active')) {
          if (activePolls.violations.length < 50) activePolls.violations.push(`trial ${trials.length + 1}, through peer ${peer}: shard ${shard}: ${reps ? [...reps].map(([p, st]) => `${p} ${st}`).join(', ') : 'no replicas'}`);
          else activePolls.violations.push('…');
        }
      }
    }
    await sleep(100);
  }
}

/** Waits until every peer sees every replica Active and no transfer for SETTLE_MS; returns when that streak began, or null. */
async function waitSettled(c: Cluster, timeoutMs: number): Promise<number | null> {
  const deadline = Date.now() + timeoutMs;
  let since: number | null = null;
  while (Date.now() < deadline) {
    const views = await Promise.all(c.peers.map((p) => (p.server ? clusterView(p.url).catch(() => null) : Promise.resolve(null))));
    const ok = views.every((v) => v !== null && v.transfers.length === 0 && [...v.replicas.values()].every((m) => [...m.values()].every((st) => st === 'Active')));
    if (ok) {
      since ??= Date.now();
      if (Date.now() - since >= SETTLE_MS) return since;
    } else since = null;
    await sleep(200);
  }
  return null;
}

/** Every id acknowledged before the scroll starts must be returned, once. */
async function checkPresent(url: string): Promise<{ checked: number; lost: number; duplicated: number; examples: string[] }> {
  const expected = [...acked];
  const seen = new Map<number, number>();
  let offset: unknown = null;
  for (;;) {
    const r = await api(url, 'POST', `/collections/${NAME}/points/scroll`, { limit: 10_000, offset, with_payload: false, with_vector: false }, 120_000);
    if (r.status !== 200) throw new Error(`scroll: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
    for (const p of r.body.result.points) seen.set(Number(p.id), (seen.get(Number(p.id)) ?? 0) + 1);
    offset = r.body.result.next_page_offset;
    if (offset === null || offset === undefined) break;
  }
  let lost = 0;
  const examples: string[] = [];
  for (const id of expected) {
    if (!seen.has(id)) {
      lost++;
      if (examples.length < 10) examples.push(`id ${id}`);
    }
  }
  let duplicated = 0;
  for (const n of seen.values()) if (n > 1) duplicated += n - 1;
  return { checked: expected.length, lost, duplicated, examples };
}

async function preload(c: Cluster): Promise<void> {
  const base = 9_000_000_000;
  for (let at = 0; at < PRELOAD; at += 1000) {
    const ids = Array.from({ length: Math.min(1000, PRELOAD - at) }, (_, k) => base + at + k);
    const r = await call(c.peers[(at / 1000) % 3].url, 'PUT', `/collections/${NAME}/points?wait=true`, { points: ids.map((id) => ({ id, vector: vec(), payload: { w: -1, v: 0 } })) }, 120_000);
    if (r.status !== 200) throw new Error(`preload: ${r.status} ${r.message}`);
    for (const id of ids) {
      acked.add(id);
      last.set(id, 0);
    }
  }
}

async function moveOnce(c: Cluster, ids: string[], method: string, shard: number): Promise<{ from: number; to: number }> {
  const v = await clusterView(c.peers[[...available][0]].url);
  const holders = [...v.replicas.get(shard)!.keys()].map((p) => ids.indexOf(p));
  const lacking = [0, 1, 2].filter((i) => !holders.includes(i));
  const from = holders[rng.int(0, holders.length - 1)];
  const to = lacking[rng.int(0, lacking.length - 1)];
  const r = await change(c.peers[from].url, 'POST', `/collections/${NAME}/cluster?timeout=30`, { move_shard: { shard_id: shard, from_peer_id: Number(ids[from]), to_peer_id: Number(ids[to]), ...(method === 'auto' ? {} : { method }) } }, 40_000);
  if (r.status !== 200) throw new Error(`move_shard (${method}) of shard ${shard}: ${r.status} ${JSON.stringify(r.body)}`);
  return { from, to };
}

async function transferTrial(c: Cluster, ids: string[], method: string, n: number): Promise<boolean> {
  const shard = n % SHARDS;
  const victim: 'source' | 'target' = n % 2 === 0 ? 'source' : 'target';
  const expected = calibration[method];
  // The kill's moment: a fraction u, drawn uniformly, of the transfer's time from the
  // request's answer until it is no longer listed. That time is estimated as it goes,
  // so the machine's load does not push kills past the end: the copy's time from the
  // progress the source shows, "(sent/total)" (the undisturbed move's copy time when it
  // shows none, as a snapshot does), plus the undisturbed move's time after the copy
  // (queued writes, indexing, the finish).
  const u = rng.float();
  const downMs = rng.int(DOWN_MIN_MS, DOWN_MAX_MS);
  phase = `transfer-kill of the ${victim}`;
  const { from, to } = await moveOnce(c, ids, method, shard);
  const t0 = Date.now();
  let listed: ClusterView['transfers'][number] | undefined;
  let copyEnd: number | null = null;
  let estimate = expected.copyMs + expected.tailMs;
  for (;;) {
    // The source lists the transfer with its progress.
    const v = await clusterView(c.peers[from].url, 2000).catch(() => null);
    listed = v?.transfers.find((t) => t.shard_id === shard && String(t.to) === ids[to]);
    const e = Date.now() - t0;
    if (v !== null && listed === undefined) break;
    if (listed !== undefined) {
      const pr = progressOf(listed.comment);
      if (!copying(listed.comment)) copyEnd ??= e;
      const copy = copyEnd ?? (pr !== null && pr.sent > 0 ? (e * pr.total) / pr.sent : Math.max(expected.copyMs, e));
      estimate = copy + expected.tailMs;
    }
    if (e >= u * estimate || e >= 10 * (expected.copyMs + expected.tailMs)) break;
    await sleep(25);
  }
  const delayMs = Date.now() - t0;
  const victimPeer = victim === 'source' ? from : to;
  const watcher = [0, 1, 2].find((i) => i !== from && i !== to)!;
  faulted = victimPeer;
  available.delete(victimPeer);
  logStreams[victimPeer].write(`{"bench":"trial ${n + 1} (${method}): SIGKILL of the ${victim} of shard ${shard}'s move ${from} -> ${to}"}\n`);
  await c.kill(victimPeer, 'SIGKILL');
  await sleep(downMs);
  await startPeer(c, victimPeer, null, `trial ${n + 1}: started after SIGKILL`);
  const back = Date.now();
  faulted = null;
  await waitFor(`peer ${victimPeer} ready`, async () => (await call(c.peers[victimPeer].url, 'GET', '/readyz', undefined, 2000)).status === 200, 120_000, 50).catch(() => {
    hangs.push(`trial ${n + 1}: GET /readyz of peer ${victimPeer} not 200 within 120 s`);
  });
  readySince.set(victimPeer, Date.now());
  available.add(victimPeer);
  phase = 'after a transfer-kill, until all Active';
  const since = await waitSettled(c, CYCLE_TIMEOUT_MS);
  const row: TransferTrial = {
    trial: n + 1,
    method,
    shard,
    from,
    to,
    victim,
    victimPeer,
    at: round(u, 3),
    estimateMs: Math.round(estimate),
    delayMs,
    during: listed !== undefined,
    progress: listed?.comment ?? null,
    downMs,
    outcome: 'neither',
    settleMs: since === null ? null : Math.max(0, since - back),
    checkedIds: 0,
    lost: 0,
    duplicated: 0,
    lostExamples: [],
    divergent: [],
  };
  trials.push(row);
  if (since === null) {
    hangs.push(`trial ${n + 1} (${method}, ${victim} killed): not all Active with no transfer within ${CYCLE_TIMEOUT_MS / 1000} s`);
    console.log(`trial ${n + 1}: HANG`);
    return false;
  }
  phase = 'between trials';
  const v = await clusterView(c.peers[watcher].url);
  const reps = v.replicas.get(shard)!;
  row.outcome = reps.has(ids[to]) && reps.has(ids[from]) ? 'both' : reps.has(ids[to]) ? 'moved' : reps.has(ids[from]) ? 'stayed' : 'neither';
  const through = [0, 1, 2][n % 3];
  const present = await checkPresent(c.peers[through].url);
  row.checkedIds = present.checked;
  row.lost = present.lost;
  row.duplicated = present.duplicated;
  row.lostExamples = present.examples;
  if (RF > 1) row.divergent = divergent(await digests(c, NAME, SHARDS), RF).map((x) => `shard ${x.shard}: ${x.why}`);
  console.log(
    `trial ${n + 1} (${method}): shard ${shard} ${from} → ${to}, ${victim} (peer ${victimPeer}) killed at u=${row.at} of ~${row.estimateMs} ms, ${delayMs} ms after the request${row.during ? ` during the transfer (${row.progress ?? 'no progress shown'})` : ', after the transfer had ended'}, down ${downMs} ms; ` +
      `${row.outcome}; settled ${row.settleMs} ms after the restart; ${present.checked} ids checked through peer ${through}: ${present.lost} lost, ${present.duplicated} duplicated${row.divergent.length ? `; DIVERGENT ${row.divergent.join('; ')}` : ''}; ` +
      `writes ${writes.batchesAcked} acked / ${writes.batchesFailed} failed`,
  );
  return true;
}

async function runTransferKill(c: Cluster, save: (final: Final | null) => void): Promise<void> {
  const ids = await Promise.all(c.peers.map(async (p) => String((await c.info(p.index)).peer_id)));
  const poller = activePoller(c);
  try {
    let n = 0;
    for (const method of METHODS) {
      // An undisturbed move first: how long its copy and what follows take here.
      const moved = await moveOnce(c, ids, method, n % SHARDS);
      const t0 = Date.now();
      let copyMs: number | null = null;
      await waitFor(
        'the calibration transfer ends',
        async () => {
          const l = (await clusterView(c.peers[moved.from].url)).transfers.find((t) => t.shard_id === n % SHARDS);
          if (l !== undefined && !copying(l.comment)) copyMs ??= Date.now() - t0;
          return l === undefined;
        },
        CYCLE_TIMEOUT_MS,
        25,
      );
      const total = Date.now() - t0;
      calibration[method] = { copyMs: copyMs ?? total, tailMs: total - (copyMs ?? total) };
      if ((await waitSettled(c, CYCLE_TIMEOUT_MS)) === null) throw new Error(`the calibration move (${method}) did not settle`);
      console.log(`${method}: an undisturbed move: copy ${calibration[method].copyMs} ms, then ${calibration[method].tailMs} ms until it is no longer listed`);
      for (let k = 0; k < TRIALS; k++) {
        if (!(await transferTrial(c, ids, method, n++))) return;
        if (n % 5 === 0) save(null);
      }
    }
  } finally {
    pollerStop = true;
    await poller;
  }
}

function transferReport(final: Final | null, startedAt: string, elapsedS: number): { json: unknown; md: string } {
  const lostFinal = final ? Math.max(...final.perPeer.map((p) => p.lost)) : null;
  const wrongFinal = final ? Math.max(...final.perPeer.map((p) => p.wrongValue)) : null;
  const f = (x: number) => x.toLocaleString('en-US');
  const json = {
    tag: TAG,
    mode: MODE,
    source: SOURCE,
    startedAt,
    elapsedSeconds: round(elapsedS, 0),
    params: { trials: TRIALS, methods: METHODS, seed: SEED, rf: RF, shards: SHARDS, dim: DIM, preload: PRELOAD, writers: WRITERS, readers: READERS, batch: BATCH, overwrite: OVERWRITE, downMs: [DOWN_MIN_MS, DOWN_MAX_MS], settleMs: SETTLE_MS },
    machine: { cores: os.cpus().length, loadAverage: os.loadavg().map((x) => round(x, 2)) },
    calibrationMs: calibration,
    activePolls,
    writes: { ...writes, failures: Object.fromEntries(writes.failures), byPhase: Object.fromEntries(writes.byPhase), idsAcknowledged: acked.size },
    reads: { ok: Object.fromEntries(reads.ok), failed: Object.fromEntries(reads.failed), failures: Object.fromEntries(reads.failures), staleCounts: reads.staleCounts },
    hangs,
    final,
    logDir: KEEP_LOGS || hangs.length || trials.some((t) => t.lost || t.duplicated || t.divergent.length) || activePolls.violations.length || (final && (lostFinal || wrongFinal || final.divergent.length)) ? logDir : null,
    trials,
  };
  const md: string[] = [
    `# Kill -9 of a transfer's source or target (${TAG})`,
    '',
    `Command: \`npm run bench:faults${argv.length ? ` -- ${argv.join(' ')}` : ''}\` at commit ${SOURCE.commit}${SOURCE.changed.length ? ` (changed: ${SOURCE.changed.join(', ')})` : ''}; started ${startedAt}, ${round(elapsedS / 60, 1)} min. ` +
      `3 peers on 127.0.0.1 (one shared ${os.cpus().length}-core machine, load average at the end ${os.loadavg().map((x) => round(x, 2)).join(' ')}), one collection: RF ${RF}, shard_number ${SHARDS}, ${DIM}-d Dot vectors, ${f(PRELOAD)} points loaded first. ` +
      `${WRITERS} writers (batches of ${BATCH}, wait=true, ${Math.round(OVERWRITE * 100)}% overwrites, ${WRITE_PAUSE_MS} ms between batches) and ${READERS} readers run throughout, through the peers not under the fault. ` +
      `Each trial moves shard (trial mod ${SHARDS}) from a peer holding it to one lacking it (\`move_shard\`, the method named; \`auto\` names none: the default method), waits for a random moment of the transfer (a fraction u, drawn uniformly, of its time from the request's answer until it is no longer listed, estimated as it goes: the copy from the progress "(sent/total)" the source shows, or an undisturbed move's copy time when it shows none, plus an undisturbed move's time after its copy), ` +
      `then kills (SIGKILL) the source (odd trials) or the target (even trials), starts it again after ${DOWN_MIN_MS / 1000}-${DOWN_MAX_MS / 1000} s, and waits until every peer sees every replica Active and no transfer for ${SETTLE_MS} ms. ` +
      `Then every id acknowledged so far is looked for by a scroll through one peer (in rotation): missing = lost, returned twice = duplicated${RF > 1 ? "; every shard's replica digests must be equal" : ''}. ` +
      'Throughout, every 100 ms a peer not under the fault is asked whether every shard has an Active replica. Seed ' +
      `${SEED}.`,
    '',
    '## Summary',
    '',
    '| method | trials | kill during the transfer | source / target killed | move finished / aborted | settled after restart ms: median / max | ids checked (last trial) | lost | duplicated | divergent |',
    '|---|---:|---:|---|---|---|---:|---:|---:|---:|',
  ];
  for (const m of METHODS) {
    const t = trials.filter((x) => x.method === m);
    if (t.length === 0) continue;
    const st = stats(t.filter((x) => x.settleMs !== null).map((x) => x.settleMs!));
    md.push(
      `| ${m} (undisturbed: copy ${calibration[m].copyMs} ms + ${calibration[m].tailMs} ms) | ${t.length} | ${t.filter((x) => x.during).length} | ${t.filter((x) => x.victim === 'source').length} / ${t.filter((x) => x.victim === 'target').length} | ${t.filter((x) => x.outcome === 'moved').length} / ${t.filter((x) => x.outcome === 'stayed').length}${t.some((x) => x.outcome === 'both' || x.outcome === 'neither') ? ` (other: ${t.filter((x) => x.outcome === 'both' || x.outcome === 'neither').length})` : ''} | ${st.median} / ${st.worst} | ${f(t.at(-1)!.checkedIds)} | ${t.reduce((a, x) => a + x.lost, 0)} | ${t.reduce((a, x) => a + x.duplicated, 0)} | ${t.filter((x) => x.divergent.length).length} |`,
    );
  }
  md.push(
    '',
    '| measure | value |',
    '|---|---|',
    `| hangs (not settled within ${CYCLE_TIMEOUT_MS / 1000} s) | ${hangs.length} |`,
    `| polls of "every shard has an Active replica" / unanswered / shards without one | ${f(activePolls.polls)} / ${f(activePolls.unanswered)} / ${activePolls.violations.length} |`,
    `| write batches acknowledged / failed | ${f(writes.batchesAcked)} / ${f(writes.batchesFailed)} |`,
    `| distinct ids acknowledged (with the ${f(PRELOAD)} loaded) | ${f(acked.size)} |`,
    `| reads ok / failed | ${[...new Set([...reads.ok.keys(), ...reads.failed.keys()])].map((k) => `${k} ${f(reads.ok.get(k) ?? 0)} / ${f(reads.failed.get(k) ?? 0)}`).join('; ')} |`,
    `| final check: acknowledged points lost (worst peer) | ${lostFinal ?? '–'} |`,
    `| final check: ids with a value other than their last acknowledged one (of ${final ? f(final.checkedValues) : '–'}) | ${wrongFinal ?? '–'} |`,
    `| final check: divergent shards | ${final ? final.divergent.length : '–'} |`,
    '',
  );
  if (activePolls.violations.length) md.push('Shards seen without an Active replica:', '', ...activePolls.violations.slice(0, 20).map((v) => `- ${v}`), '');
  md.push('## Failed writes, by status and message (numbers replaced by N)', '');
  if (writes.failures.size === 0) md.push('none');
  for (const [k, n] of [...writes.failures].sort((a, b) => b[1] - a[1])) md.push(`- ${n} × \`${k}\``);
  md.push('', '## Failed reads', '');
  if (reads.failures.size === 0) md.push('none');
  for (const [k, n] of [...reads.failures].sort((a, b) => b[1] - a[1])) md.push(`- ${n} × \`${k}\``);
  md.push('', '## Trials', '', '| trial | method | shard | from → to | killed | u (of ~ms) | after ms | during (progress) | down ms | outcome | settled ms | lost | dup | divergent |', '|---:|---|---:|---|---|---|---:|---|---:|---|---:|---:|---:|---|');
  for (const t of trials) {
    md.push(
      `| ${t.trial} | ${t.method} | ${t.shard} | ${t.from} → ${t.to} | ${t.victim} (peer ${t.victimPeer}) | ${t.at} (${t.estimateMs}) | ${t.delayMs} | ${t.during ? `yes${t.progress ? ` (${t.progress.replace(/\|/g, '/')})` : ''}` : 'no'} | ${t.downMs} | ${t.outcome} | ${t.settleMs ?? 'never'} | ${t.lost}${t.lostExamples.length ? ` (${t.lostExamples.join(', ')})` : ''} | ${t.duplicated} | ${t.divergent.join('; ')} |`,
    );
  }
  if (hangs.length) md.push('', '## Hangs', '', ...hangs.map((h) => `- ${h}`));
  if (json.logDir) md.push('', `Peer logs: \`${json.logDir}\` (kept for this run).`);
  md.push('');
  return { json, md: md.join('\n') };
}

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  const t0 = Date.now();
  const dir = path.join(REPO, 'bench', 'results');
  const write = (final: Final | null) => {
    const { json, md } = (TRANSFER_KILL ? transferReport : report)(final, startedAt, (Date.now() - t0) / 1000);
    fs.writeFileSync(path.join(dir, `faults-${TAG}.json`), JSON.stringify(json, null, 2) + '\n');
    fs.writeFileSync(path.join(dir, `faults-${TAG}.md`), md);
    return md;
  };
  if (TRANSFER_KILL) console.log(`transfer kills: ${TRIALS} trials per method (${METHODS.join(', ')}), seed ${SEED}, RF ${RF}, shard_number ${SHARDS}, ${PRELOAD} points loaded first; peer logs in ${logDir}`);
  else console.log(`fault cycles: ${CYCLES} cycles, seed ${SEED}, RF ${RF}, shard_number ${SHARDS}; peer logs in ${logDir}`);
  const c = await Cluster.prepare(3, { SERVICE__TELEMETRY_DISABLED: 'true' });
  let final: Final | null = null;
  try {
    await startPeer(c, 0, null, 'first start');
    for (let i = 1; i < 3; i++) await startPeer(c, i, 0, 'first start');
    await c.waitVoters(3);
    const r = await change(c.peers[0].url, 'PUT', `/collections/${NAME}`, { vectors: { size: DIM, distance: 'Dot' }, shard_number: SHARDS, replication_factor: RF });
    if (r.status !== 200) throw new Error(`create: ${r.status} ${JSON.stringify(r.body)}`);
    await waitFor('the collection on every peer', async () => (await Promise.all(c.peers.map((p) => api(p.url, 'GET', `/collections/${NAME}`)))).every((x) => x.status === 200));
    if (PRELOAD > 0) await preload(c);
    const workers = [...Array.from({ length: WRITERS }, (_, w) => writer(c, w)), ...Array.from({ length: READERS }, () => reader(c))];
    await waitFor('some writes acknowledged', async () => writes.batchesAcked >= WRITERS * 3, 60_000);
    if (TRANSFER_KILL) await runTransferKill(c, write);
    else {
      for (let i = 0; i < CYCLES; i++) {
        if (!(await runCycle(c))) break;
        if (cycleNo % 10 === 0) write(null);
      }
    }
    stopping = true;
    await Promise.all(workers);
    final = await finalChecks(c);
  } finally {
    stopping = true;
    const md = write(final);
    console.log(md);
    for (const p of c.peers) if (p.server) c.signal(p.index, 'SIGCONT');
    await c.destroy();
    for (const s of logStreams) s.end();
    const failed =
      hangs.length > 0 ||
      final === null ||
      final.divergent.length > 0 ||
      final.perPeer.some((p) => p.lost !== 0 || p.wrongValue !== 0) ||
      trials.some((t) => t.lost !== 0 || t.duplicated !== 0 || t.divergent.length > 0) ||
      activePolls.violations.length > 0;
    if (!failed && !KEEP_LOGS) fs.rmSync(logDir, { recursive: true, force: true });
    else console.log(`peer logs kept in ${logDir}`);
    process.exitCode = failed ? 1 : 0;
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
