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
]);
const CYCLES = numFlag(argv, 'cycles', 200);
const SEED = numFlag(argv, 'seed', 1);
const RF = numFlag(argv, 'rf', 2);
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
const TAG = flagValue(argv, 'tag') ?? `${today()}${CYCLES < 200 ? `-${CYCLES}cycles` : ''}`;
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

async function main(): Promise<void> {
  const startedAt = new Date().toISOString();
  const t0 = Date.now();
  const dir = path.join(REPO, 'bench', 'results');
  const write = (final: Final | null) => {
    const { json, md } = report(final, startedAt, (Date.now() - t0) / 1000);
    fs.writeFileSync(path.join(dir, `faults-${TAG}.json`), JSON.stringify(json, null, 2) + '\n');
    fs.writeFileSync(path.join(dir, `faults-${TAG}.md`), md);
    return md;
  };
  console.log(`fault cycles: ${CYCLES} cycles, seed ${SEED}, RF ${RF}, shard_number ${SHARDS}; peer logs in ${logDir}`);
  const c = await Cluster.prepare(3, { SERVICE__TELEMETRY_DISABLED: 'true' });
  let final: Final | null = null;
  try {
    await startPeer(c, 0, null, 'first start');
    for (let i = 1; i < 3; i++) await startPeer(c, i, 0, 'first start');
    await c.waitVoters(3);
    const r = await change(c.peers[0].url, 'PUT', `/collections/${NAME}`, { vectors: { size: DIM, distance: 'Dot' }, shard_number: SHARDS, replication_factor: RF });
    if (r.status !== 200) throw new Error(`create: ${r.status} ${JSON.stringify(r.body)}`);
    await waitFor('the collection on every peer', async () => (await Promise.all(c.peers.map((p) => api(p.url, 'GET', `/collections/${NAME}`)))).every((x) => x.status === 200));
    const workers = [...Array.from({ length: WRITERS }, (_, w) => writer(c, w)), ...Array.from({ length: READERS }, () => reader(c))];
    await waitFor('some writes acknowledged', async () => writes.batchesAcked >= WRITERS * 3, 60_000);
    for (let i = 0; i < CYCLES; i++) {
      if (!(await runCycle(c))) break;
      if (cycleNo % 10 === 0) write(null);
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
    const failed = hangs.length > 0 || final === null || final.divergent.length > 0 || final.perPeer.some((p) => p.lost !== 0 || p.wrongValue !== 0);
    if (!failed && !KEEP_LOGS) fs.rmSync(logDir, { recursive: true, force: true });
    else console.log(`peer logs kept in ${logDir}`);
    process.exitCode = failed ? 1 : 0;
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
