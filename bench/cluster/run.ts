/**
 * Cluster measurements with real peers on 127.0.0.1 (npm run bench:cluster). Sections
 * (all by default; `--only a,b` picks some):
 *
 * 1. `failover`: a 3-peer cluster; `--trials` times (default 20): kill -9 the leader,
 *    time until a surviving peer reports itself leader (polling /cluster every 20 ms),
 *    then until a collection create through a survivor succeeds; restart the killed peer
 *    and wait until it is ready. Every /cluster answer is recorded: two peers leading
 *    one term is a failure.
 * 2. `catchup`: a 3-peer cluster; kill -9 one follower; create `--collections` (200)
 *    collections over `--down-seconds` (60) while it is down; restart it; time until its
 *    /readyz answers 200 and it lists every collection.
 * 3. `replication`: upsert points/s with replication factors 1, 2, 3 on 3 peers against
 *    a single node; query QPS through one peer and spread over three; the cost of
 *    `consistency=all` on reads (bench/cluster/replication.ts).
 * 4. `recovery`: a peer down `--recovery-down` (60) seconds while `--recovery-writes`
 *    (10,000) points are written with RF 2, then restarted: time until its replicas
 *    are Active with identical content (bench/cluster/recovery.ts).
 * 5. `transfers`: points/s and MiB/s of a `move_shard` of a `--transfer-points`
 *    (1,000,000) x 128-d shard with each method of `--methods` (bench/cluster/transfers.ts).
 * 6. `delta`: the time to bring back a replica that missed `--delta-writes` (10,000)
 *    writes, per `storage.shard_transfer_method` (wal_delta against stream_records).
 * 7. `moves`: every shard of a `--moves-points` (1,000,000) collection moved once per
 *    method under a live writer: nothing lost or duplicated, equal digests.
 * 8. `drain`: a peer holding a third of a `--drain-points` (300,000) collection drained
 *    (`bin/quiver drain`) under a live writer: the time, and 0 acknowledged points lost
 *    (bench/cluster/drain.ts).
 * Sections 1-4 run by default; 5-8 only when named in `--only` (each loads up to a
 * million points).
 *
 * Writes bench/results/cluster-<tag>.{json,md} (tag: the date, `-quick` added when
 * `--points` is below 100,000; `<date>-transfers` when only sections 5-7 run, `-quick`
 * added when they load fewer points than by default); sections not run this time are kept from an existing
 * file of the same tag.
 */

import * as fs from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';

import { Cluster, api, sleep, waitFor, type ClusterInfo } from '../../test/cluster/harness';
import { boolFlag, checkFlags, sourceVersion, flagValue, listFlag, numFlag, round, stats, today, type Stats } from './common';
import { FULL_POINTS } from './data';
import { recovery, type RecoveryRow } from './recovery';
import { replication, type ReplicationResult } from './replication';
import { drainBench, type DrainResult } from './drain';
import { TRANSFER_METHODS, deltaRecovery, moves, transferThroughput, type DeltaResult, type MovesResult, type ThroughputResult } from './transfers';

const SECTIONS = ['failover', 'catchup', 'replication', 'recovery', 'transfers', 'delta', 'moves', 'drain'] as const;
const DEFAULT_SECTIONS = ['failover', 'catchup', 'replication', 'recovery'];
type Section = (typeof SECTIONS)[number];

const argv = process.argv.slice(2);
checkFlags(argv, [
  'only',
  'tag',
  'trials',
  'collections',
  'down-seconds',
  'points',
  'queries',
  'ef',
  'batch',
  'writers',
  'rounds',
  'reps',
  'warmup',
  'concurrency',
  'rfs',
  'shards',
  'settle',
  'recovery-down',
  'recovery-writes',
  'recovery-base',
  'data-dir',
  'methods',
  'transfer-points',
  'transfer-reps',
  'delta-points',
  'delta-writes',
  'delta-trials',
  'delta-fault',
  'moves-points',
  'moves-shards',
  'moves-batch',
  'drain-points',
  'drain-shards',
  'drain-batch',
  'drain-method',
  'dim',
]);
const ONLY = listFlag(argv, 'only', DEFAULT_SECTIONS) as Section[];
for (const s of ONLY) if (!(SECTIONS as readonly string[]).includes(s)) throw new Error(`--only: unknown section ${s} (known: ${SECTIONS.join(', ')})`);
const TRIALS = numFlag(argv, 'trials', 20);
const COLLECTIONS = numFlag(argv, 'collections', 200);
const DOWN_SECONDS = numFlag(argv, 'down-seconds', 60);
const POINTS = numFlag(argv, 'points', FULL_POINTS);
const REPO = path.join(__dirname, '..', '..', '..');
const TRANSFER_SECTIONS: readonly string[] = ['transfers', 'delta', 'moves', 'drain'];
/** The transfer sections (5-7) write their own file (cluster-<date>-transfers), `-quick` with fewer points than their defaults. */
const TRANSFERS_ONLY = ONLY.every((s) => TRANSFER_SECTIONS.includes(s));
const TRANSFERS_QUICK = numFlag(argv, 'transfer-points', 1_000_000) < 1_000_000 || numFlag(argv, 'moves-points', 1_000_000) < 1_000_000 || numFlag(argv, 'delta-points', 500_000) < 200_000 || numFlag(argv, 'drain-points', 300_000) < 300_000;
const TAG =
  flagValue(argv, 'tag') ?? (TRANSFERS_ONLY ? `${today()}-transfers${TRANSFERS_QUICK ? '-quick' : ''}` : `${today()}${POINTS < FULL_POINTS ? '-quick' : ''}`);
const vectors = { size: 4, distance: 'Cosine' };

const leaderByTerm = new Map<number, number>();
const twoLeaders: string[] = [];
function see(info: ClusterInfo): void {
  if (info.raft_info.role !== 'Leader') return;
  const seen = leaderByTerm.get(info.raft_info.term);
  if (seen !== undefined && seen !== info.peer_id) twoLeaders.push(`term ${info.raft_info.term}: ${seen} and ${info.peer_id}`);
  leaderByTerm.set(info.raft_info.term, info.peer_id);
}

interface FailoverResult {
  trials: number;
  election: Stats;
  changeAfterKill: Stats;
  restartedPeerReady: Stats;
  raw: { election: number[]; change: number[]; rejoin: number[] };
  twoLeadersInOneTerm: string[];
}

async function failover(): Promise<FailoverResult> {
  const c = await Cluster.start(3);
  const election: number[] = [];
  const change: number[] = [];
  const rejoin: number[] = [];
  try {
    for (let trial = 0; trial < TRIALS; trial++) {
      const old = await c.waitLeader();
      await c.kill(old, 'SIGKILL');
      const t0 = Date.now();
      const survivors = c.running();
      const next = await waitFor(
        'a new leader',
        async () => {
          const infos = await Promise.all(survivors.map((p) => c.info(p.index, 500).catch(() => null)));
          for (const i of infos) if (i) see(i);
          const leaders = infos.filter((i) => i?.raft_info.role === 'Leader');
          return leaders.length === 1 ? survivors[infos.indexOf(leaders[0])].index : null;
        },
        15_000,
        20,
      );
      const t1 = Date.now();
      election.push(t1 - t0);
      const via = survivors.find((p) => p.index !== next)!;
      await waitFor('a create through a follower', async () => (await api(via.url, 'PUT', `/collections/failover-${trial}?timeout=5`, { vectors })).status === 200, 15_000, 20);
      change.push(Date.now() - t0);
      const r0 = Date.now();
      await c.startPeer(old);
      await waitFor('the restarted peer ready', async () => (await api(c.peers[old].url, 'GET', '/readyz')).status === 200, 30_000, 20);
      rejoin.push(Date.now() - r0);
      console.log(`trial ${trial + 1}: leader elected ${election.at(-1)} ms, change ok ${change.at(-1)} ms after the kill; restarted peer ready in ${rejoin.at(-1)} ms`);
    }
  } finally {
    await c.destroy();
  }
  return { trials: TRIALS, election: stats(election), changeAfterKill: stats(change), restartedPeerReady: stats(rejoin), raw: { election, change, rejoin }, twoLeadersInOneTerm: twoLeaders };
}

interface CatchUpResult {
  created: number;
  downMs: number;
  readyMs: number;
  listedMs: number;
  createMsMedian: number;
}

async function catchUp(): Promise<CatchUpResult> {
  const c = await Cluster.start(3);
  try {
    const leader = await c.waitLeader();
    const down = [0, 1, 2].find((i) => i !== leader)!;
    const via = [0, 1, 2].find((i) => i !== leader && i !== down)!;
    await c.kill(down, 'SIGKILL');
    const t0 = Date.now();
    const createMs: number[] = [];
    for (let i = 0; i < COLLECTIONS; i++) {
      const due = t0 + ((i + 1) * DOWN_SECONDS * 1000) / COLLECTIONS;
      const s = Date.now();
      const r = await api(c.peers[i % 2 === 0 ? leader : via].url, 'PUT', `/collections/c${i}`, { vectors });
      if (r.status !== 200) throw new Error(`create c${i}: ${r.status} ${JSON.stringify(r.body)}`);
      createMs.push(Date.now() - s);
      const wait = due - Date.now();
      if (wait > 0) await sleep(wait);
    }
    const downMs = Date.now() - t0;
    const r0 = Date.now();
    await c.startPeer(down);
    await waitFor('ready', async () => (await api(c.peers[down].url, 'GET', '/readyz')).status === 200, 60_000, 20);
    const readyMs = Date.now() - r0;
    await waitFor('every collection listed', async () => (await api(c.peers[down].url, 'GET', '/collections')).body.result.collections.length === COLLECTIONS, 60_000, 20);
    const listedMs = Date.now() - r0;
    return { created: COLLECTIONS, downMs, readyMs, listedMs, createMsMedian: stats(createMs).median };
  } finally {
    await c.destroy();
  }
}

interface SectionRun<T> {
  at: string;
  command: string;
  source: { commit: string; changed: string[] };
  result: T;
}

interface Results {
  tag: string;
  machine: { cpuModel: string; cores: number; memoryGiB: number; kernel: string; node: string };
  sections: {
    failover?: SectionRun<FailoverResult>;
    catchup?: SectionRun<CatchUpResult>;
    replication?: SectionRun<ReplicationResult>;
    recovery?: SectionRun<{ rows: RecoveryRow[]; requirementMs: number }>;
    transfers?: SectionRun<ThroughputResult>;
    delta?: SectionRun<DeltaResult>;
    moves?: SectionRun<MovesResult>;
    drain?: SectionRun<DrainResult>;
  };
}

const fmt = (x: number): string => x.toLocaleString('en-US');
const ratio = (a: number, b: number): string => (b > 0 ? `${(a / b).toFixed(2)}×` : '–');
const ran = (s: SectionRun<unknown>): string => `Run ${s.at}${s.source ? ` at commit ${s.source.commit}${s.source.changed.length ? ` (changed: ${s.source.changed.join(', ')})` : ''}` : ''}: \`${s.command}\``;

function upsertTable(rows: ReplicationResult['upserts']): string[] {
  const single = rows.find((u) => u.config === 'single node');
  return [
    '| configuration | points/s | vs single node | per round | p50 ms | p99 ms | server CPU ms / 1000 points |',
    '|---|---:|---:|---|---:|---:|---:|',
    ...rows.map((u) => `| ${u.config} | ${fmt(u.pointsPerSec)} | ${single ? ratio(u.pointsPerSec, single.pointsPerSec) : '–'} | ${u.roundsPointsPerSec.map(fmt).join(', ')} | ${u.p50Ms} | ${u.p99Ms} | ${fmt(u.serverCpuMsPer1000)} |`),
  ];
}

function markdown(r: Results): string {
  const out: string[] = [`# Cluster benchmarks (${r.tag})`, ''];
  out.push(
    `Machine: ${r.machine.cores} cores (${r.machine.cpuModel}), ${r.machine.memoryGiB} GiB, Linux ${r.machine.kernel}, Node ${r.machine.node}. ` +
      'Every peer, the single node and the client run on this one machine, which is shared with other work: figures are noisy; compare the ratios of configurations measured interleaved in one run rather than absolute numbers.',
    '',
  );
  const f = r.sections.failover;
  if (f) {
    const x = f.result;
    out.push(
      `## kill -9 of the leader, ${x.trials} trials`,
      '',
      `${ran(f)} (3 peers on 127.0.0.1, tick 100 ms, election timeout 1-2 s).`,
      '',
      '| measure | median ms | p90 ms | worst ms | best ms |',
      '|---|---:|---:|---:|---:|',
      `| new leader reported by a survivor | ${x.election.median} | ${x.election.p90} | ${x.election.worst} | ${x.election.best} |`,
      `| collection create through a follower succeeds | ${x.changeAfterKill.median} | ${x.changeAfterKill.p90} | ${x.changeAfterKill.worst} | ${x.changeAfterKill.best} |`,
      `| restarted peer answers /readyz 200 | ${x.restartedPeerReady.median} | ${x.restartedPeerReady.p90} | ${x.restartedPeerReady.worst} | ${x.restartedPeerReady.best} |`,
      '',
      `Two leaders in one term seen in any /cluster answer: ${x.twoLeadersInOneTerm.length === 0 ? 'none' : x.twoLeadersInOneTerm.join('; ')}.`,
      '',
    );
  }
  const cu = r.sections.catchup;
  if (cu) {
    const x = cu.result;
    out.push(
      `## A follower down while ${x.created} collections are created`,
      '',
      `${ran(cu)}.`,
      '',
      `Down for ${(x.downMs / 1000).toFixed(1)} s (median create ${x.createMsMedian} ms). After restart: /readyz 200 in ${x.readyMs} ms; all ${x.created} collections listed in ${x.listedMs} ms.`,
      '',
    );
  }
  const rep = r.sections.replication;
  if (rep) {
    const x = rep.result;
    const p = x.params;
    out.push(
      '## Replication: writes and reads with replication factor 1, 2, 3 against a single node',
      '',
      `${ran(rep)}. Data: the REST benchmark's synthetic set (bench/engine/datasets.ts), first ${fmt(p.points)} points × ${p.dim}-d, ${p.distance}, m 16, ef_construct 100. ` +
        `Cluster: 3 peers, one collection per replication factor (shard_number ${p.shards}, write_consistency_factor 1, ordering weak); single node: one process, cluster mode off. ` +
        `Load average ${x.machine.loadStart.join(' ')} at the start, ${x.machine.loadEnd.join(' ')} at the end; cores this process could get: ${x.machine.coresAvailableStart} at the start, ${x.machine.coresAvailableEnd} at the end (of ${x.machine.cores}).`,
      '',
      `### Upsert (batches of ${p.batch}, wait=true, ${p.writers} requests in flight; cluster: request i through peer i mod 3)`,
      '',
      `${p.rounds} rounds of ${fmt(Math.ceil(p.points / p.rounds))} points; each round upserts its chunk into every configuration, the order rotated every round. ` +
        'Server CPU: all processes of the configuration (the 3 peers hold every RF collection, so a window also catches background work of the others). ' +
        '"single node, 3 shards" is one process with shard_number 3: what sharding alone costs, without a network.',
      '',
      '**The write path alone** (collections with `indexing_threshold: 0`: no HNSW build runs, nothing competes in the background):',
      '',
      ...upsertTable(x.upsertsNoIndex ?? []),
      '',
      `**Into the collections queried below** (the server's default indexing threshold: HNSW builds run in the background while points arrive, as a client sees it${p.settle ? '; every collection green on every peer before each round' : ''}):`,
      '',
      ...upsertTable(x.upserts),
      '',
      `Waiting for green: ${x.settleSeconds.map((s) => `${s} s`).join(', ')}.`,
      '',
      `### Query (${fmt(p.queries)} queries, limit 10, hnsw_ef ${p.ef}, ${p.concurrency} in flight; best of ${p.reps} interleaved passes after ${p.warmup} warm-up passes)`,
      '',
      '| configuration | through | QPS (best) | median | vs single node | p50 ms | p99 ms | recall@10 | server CPU µs / query | passes |',
      '|---|---|---:|---:|---:|---:|---:|---:|---:|---|',
    );
    const sq = x.queries.find((q) => q.config === 'single node')!;
    for (const q of x.queries) {
      out.push(`| ${q.config} | ${q.via} | ${fmt(q.qps)} | ${fmt(q.medianQps)} | ${ratio(q.qps, sq.qps)} | ${q.p50Ms} | ${q.p99Ms} | ${q.recall ?? '–'} | ${fmt(q.serverCpuUsPerRequest)} | ${q.passes.map(fmt).join(', ')}${q.failures ? ` (${q.failures} failed)` : ''} |`);
    }
    out.push(
      '',
      `### consistency=all against the default (spread over 3 peers, ${p.concurrency} in flight; retrieve: 10 random ids, with_payload)`,
      '',
      '| configuration | read | default QPS | consistency=all QPS | all / default | default p50 ms | all p50 ms | server CPU µs default / all |',
      '|---|---|---:|---:|---:|---:|---:|---|',
    );
    for (const d of x.consistency.filter((c) => c.via === 'default')) {
      const a = x.consistency.find((c) => c.config === d.config && c.kind === d.kind && c.via === 'consistency=all')!;
      out.push(`| ${d.config} | ${d.kind} | ${fmt(d.qps)} | ${fmt(a.qps)} | ${ratio(a.qps, d.qps)} | ${d.p50Ms} | ${a.p50Ms} | ${fmt(d.serverCpuUsPerRequest)} / ${fmt(a.serverCpuUsPerRequest)} |`);
    }
    if (x.consistencyAllProbe.length > 0) {
      out.push('', 'Probe: does a read with `consistency=all` ask every replica?', '');
      for (const pr of x.consistencyAllProbe) out.push(`- query on \`${pr.collection}\` through ${pr.via} with \`consistency=${pr.consistency}&timeout=2\` while ${pr.stopped}: ${pr.status} after ${pr.ms} ms`);
    }
    for (const n of x.notes) out.push('', `**Note:** ${n}`);
    out.push('');
  }
  const rc = r.sections.recovery;
  if (rc) {
    out.push(
      '## Recovery of a peer that was down while points were written (RF 2)',
      '',
      `${ran(rc)}. 3 peers, one collection (128-d synthetic, RF 2, shard_number 3) holding \`base\` points; a follower of consensus is killed (SIGKILL); ` +
        'while it is down the survivors take the writes (batches of 100, wait=true, evenly paced, alternating between the two); then it is started again. ' +
        `Times from the restart (process spawned). The issue asks for all replicas Active with identical content within ${rc.result.requirementMs / 1000} s.`,
      '',
      '| base points | written while down | down s | failed write attempts (retried) | listening ms | transfer started ms | all Active ms | identical digests ms | points after | lost | divergent |',
      '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
      ...rc.result.rows.map(
        (w) =>
          `| ${fmt(w.base)} | ${fmt(w.writes)} | ${w.downSeconds} | ${w.writeFailures} | ${w.listeningMs} | ${w.transferStartMs ?? '–'} | ${w.allActiveMs ?? 'never'} | ${w.identicalMs ?? 'never'} | ${w.points === null ? '–' : fmt(w.points)} | ${w.lost} | ${w.divergent.length ? w.divergent.join('; ') : 'none'} |`,
      ),
      '',
    );
    for (const w of rc.result.rows) {
      const msgs = Object.entries(w.failureMessages);
      if (msgs.length) out.push(`Failed write attempts with base ${fmt(w.base)}: ${msgs.map(([m, n]) => `${n} × \`${m}\``).join('; ')}.`, '');
    }
  }
  const tr = r.sections.transfers;
  if (tr) {
    const x = tr.result;
    const p = x.params;
    out.push(
      '## Shard transfer throughput per method',
      '',
      `${ran(tr)}. 3 peers, one collection of ${fmt(p.points)} points × ${p.dim}-d (Cosine) with a payload \`{"i": id, "tag": "t<id % 100>"}\`, shard_number 1, replication_factor 1, ` +
        '`optimizers_config.indexing_threshold: 0` (no HNSW graph is built anywhere: the figures are the transfer, not an index build). ' +
        `The shard is moved (\`move_shard\` with the method named) to the next peer, ${p.reps} round(s), the order of the methods rotated each round. ` +
        `Timed from the request until the target's replica is Active and no transfer is listed. MiB/s: (vector bytes ${fmt(p.vectorBytes)} + payload JSON bytes ${fmt(p.payloadBytes)}) / wall seconds. ` +
        'The moved replica must have the digest the shard had before the first move.',
      '',
      '| method asked | listed as | moves | median s | points/s | MiB/s |',
      '|---|---|---:|---:|---:|---:|',
      ...x.summary.map((m) => `| ${m.method} | ${m.shownMethods.join(', ') || '–'} | ${m.n} | ${(m.medianMs / 1000).toFixed(1)} | ${fmt(m.pointsPerSec)} | ${m.mibPerSec} |`),
      '',
      '| method | round | from → to | accepted ms | done ms | points/s | MiB/s | CPU s source / target | digest kept | aborted attempts before |',
      '|---|---:|---|---:|---:|---:|---:|---|---|---:|',
      ...x.rows.map((w) => `| ${w.method} | ${w.rep + 1} | ${w.from} → ${w.to} | ${w.acceptedMs} | ${w.ms} | ${fmt(w.pointsPerSec)} | ${w.mibPerSec} | ${w.cpuSourceSec} / ${w.cpuTargetSec} | ${w.digestKept ? 'yes' : 'NO'} | ${w.aborts?.length ?? 0} |`),
      '',
    );
    for (const w of x.rows) for (const a of w.aborts ?? []) out.push(`- ${w.method}, round ${w.rep + 1}: ${a}`);
    if (x.rows.some((w) => w.aborts?.length)) out.push('');
  }
  const de = r.sections.delta;
  if (de) {
    const x = de.result;
    const p = x.params;
    out.push(
      `## Bringing back a replica that missed ${fmt(p.writes)} writes: wal_delta against stream_records`,
      '',
      `${ran(de)}. Per method its own cluster of 3 peers, every peer started with \`storage.shard_transfer_method\` set to it (both clusters up all along, the trials alternating between them), ` +
        `one shard of ${fmt(p.points)} points × ${p.dim}-d, replication_factor 2, indexing_threshold 0. ` +
        `A peer holding a replica (not the consensus leader) is ${p.fault === 'kill' ? 'killed (SIGKILL)' : 'stopped (SIGSTOP)'}; ${fmt(p.writes)} fresh points are written through the two others (batches of 100, wait=true); ` +
        `once its replica is Dead (and no transfer to it is listed) it is ${p.fault === 'kill' ? 'started again' : 'continued (SIGCONT)'}. Times from then${p.fault === 'kill' ? ' (the process spawned; "from listening": from its REST port answering)' : ''}: ` +
        'the transfer to it first listed, its replica Active on every peer (no transfer listed), and the two replicas\' digests equal (the moment the digests were asked for in the first comparison that found them equal; hashing every point of both replicas then took the time in the last column).',
      '',
      '| method | trials | listed as | median → Active ms | from listening ms | transfer ms (listed → Active) | → digests equal (as of) ms |',
      '|---|---:|---|---:|---:|---:|---:|',
      ...x.summary.map((m) => `| ${m.method} | ${m.n} | ${m.shownMethods.join(', ') || '–'} | ${m.activeMs} | ${m.fromListeningMs ?? '–'} | ${m.transferMs ?? '–'} | ${m.identicalMs} |`),
      '',
      `Ratio stream_records / wal_delta (medians): **${x.ratio.active ?? '–'}×** to Active${x.ratio.fromListening ? `, ${x.ratio.fromListening}× from listening` : ''}, ${x.ratio.transfer ?? '–'}× for the transfer itself, ${x.ratio.identical ?? '–'}× to equal digests (the issue asks for wal_delta at least 5× faster).`,
      '',
      '| method | trial | writes ms | failed writes (retried) | state before back | listening ms | transfer listed ms | Active ms | digests equal as of ms | points on it | hashing ms |',
      '|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|',
      ...x.rows.map((w) => `| ${w.method} | ${w.trial + 1} | ${w.writeMs} | ${w.writeFailures} | ${w.stateBeforeBack} | ${w.listeningMs ?? '–'} | ${w.transferSeenMs ?? '–'} | ${w.activeMs ?? 'never'} | ${w.identicalMs ?? 'never'} | ${w.points === null ? '–' : fmt(w.points)} | ${w.digestMs ?? '–'} |`),
      '',
    );
  }
  const mv = r.sections.moves;
  if (mv) {
    const x = mv.result;
    const p = x.params;
    out.push(
      '## Every shard moved under a live writer, per method',
      '',
      `${ran(mv)}. 3 peers, one collection of ${fmt(p.points)} points × ${p.dim}-d, shard_number ${p.shards}, replication_factor 2, indexing_threshold 0. ` +
        `A writer upserts without a break (batches of ${p.batch}, wait=true, through the peers in turn): fresh ids, or (${Math.round(p.overwrite * 100)}%) loaded ids again with a new payload value. ` +
        'Each shard is moved (`move_shard`, the method named) from one of its peers to the one that lacks it; once every peer sees it moved, the writer pauses (its request in flight ends), ' +
        "the shard's replicas must have equal digests and the exact count must equal the points acknowledged; after each method's round every point is scrolled through one peer.",
      '',
      `Result: **${x.ok ? 'all held' : 'FAILED'}**. Writes: ${fmt(x.writes.acked)} batches acknowledged (${fmt(x.writes.freshAcked)} fresh points, ${fmt(x.writes.overwritesAcked)} overwrites), ${fmt(x.writes.failed)} failed${Object.keys(x.writes.failures).length ? ` (${Object.entries(x.writes.failures).map(([m, n]) => `${n} × \`${m}\``).join('; ')})` : ''}.`,
      '',
      '| method asked | listed as | shard | from → to | s | write batches acknowledged during | failed | digests equal | exact count (expected) | aborted attempts before |',
      '|---|---|---:|---|---:|---:|---:|---|---|---:|',
      ...x.moves.map((w) => `| ${w.method} | ${w.shownMethods.join(', ') || '–'} | ${w.shard} | ${w.from} → ${w.to} | ${(w.ms / 1000).toFixed(1)} | ${w.writesDuring} | ${w.writeFailuresDuring} | ${w.digestsEqual ? 'yes' : 'NO'} | ${fmt(w.count)} (${w.expected})${w.countOk ? '' : ' WRONG'} | ${w.aborts?.length ?? 0} |`),
      '',
      ...x.moves.flatMap((w) => (w.aborts ?? []).map((a) => `- ${w.method}, shard ${w.shard}: ${a}`)),
      ...(x.moves.some((w) => w.aborts?.length) ? [''] : []),
      '| after the moves with | scrolled through peer | points returned | distinct | duplicated | lost | wrong value | sum of shard counts |',
      '|---|---:|---:|---:|---:|---:|---:|---:|',
      ...x.checks.map((k) => `| ${k.method} | ${k.via} | ${fmt(k.scrolled)} | ${fmt(k.distinct)} | ${k.duplicated} | ${k.lost}${k.lostExamples.length ? ` (${k.lostExamples.join(', ')})` : ''} | ${k.wrongValue} | ${fmt(k.shardPointsSum)} |`),
      '',
    );
  }
  const dr = r.sections.drain;
  if (dr) {
    const x = dr.result;
    const p = x.params;
    out.push(
      '## Draining a peer under a live writer',
      '',
      `${ran(dr)}. 3 peers, one collection of ${fmt(p.points)} points × ${p.dim}-d, shard_number ${p.shards}, replication_factor 1, indexing_threshold 0 (loaded in ${p.loadSeconds} s). ` +
        `A writer upserts fresh ids without a break (batches of ${p.batch}, wait=true, through the two peers that stay) while \`bin/quiver drain --url <drained peer>${p.method ? ` --method ${p.method}` : ''}\` runs (the Helm chart's preStop hook; transfer method ${p.method ?? 'the default, stream_records'}); timed from the command's start to its exit.`,
      '',
      `Result: **${x.ok ? 'all held' : 'FAILED'}**. Peer ${x.drainedPeer} held ${x.shardsOnIt} shards, ${fmt(x.pointsOnIt)} points (${((100 * x.pointsOnIt) / p.points).toFixed(1)}% of the loaded points); ` +
        `**drained in ${x.drainSeconds} s** (exit ${x.exitCode}). Writes: ${fmt(x.writes.acked)} points acknowledged in all, ${fmt(x.writes.pointsPerSecDuring)} points/s during the drain, ${x.writes.failed} writes failed` +
        `${Object.keys(x.writes.failures).length ? ` (${Object.entries(x.writes.failures).map(([m, n]) => `${n} × \`${m}\``).join('; ')})` : ''}.`,
      '',
      '| replicas left on the drained peer | shards with an Active replica | exact count (expected) | scrolled | lost | duplicated |',
      '|---:|---:|---|---:|---:|---:|',
      `| ${x.after.replicasOnDrained} | ${x.after.shardsWithActiveReplica} of ${p.shards} | ${fmt(x.after.count)} (${fmt(x.after.expected)}) | ${fmt(x.after.scrolled)} | ${x.after.lost}${x.after.lostExamples.length ? ` (${x.after.lostExamples.join(', ')})` : ''} | ${x.after.duplicated} |`,
      '',
      'The command\'s output:',
      '',
      '```',
      ...x.output,
      '```',
      '',
    );
  }
  return out.join('\n');
}

async function main(): Promise<void> {
  const dir = path.join(REPO, 'bench', 'results');
  const jsonPath = path.join(dir, `cluster-${TAG}.json`);
  const mdPath = path.join(dir, `cluster-${TAG}.md`);
  let results: Results = {
    tag: TAG,
    machine: { cpuModel: os.cpus()[0]?.model ?? 'unknown', cores: os.cpus().length, memoryGiB: round(os.totalmem() / 2 ** 30, 1), kernel: os.release(), node: process.version },
    sections: {},
  };
  try {
    const old = JSON.parse(await fs.readFile(jsonPath, 'utf8')) as Results;
    if (old.sections) results = { ...results, sections: old.sections };
  } catch {
    // no earlier file of this tag
  }
  const command = `npm run bench:cluster${argv.length ? ` -- ${argv.join(' ')}` : ''}`;
  const source = sourceVersion();
  const ranNow = new Set<string>();
  const save = async () => {
    // Sections another run of the same tag saved meanwhile are kept (runs of different sections may overlap).
    try {
      const now = JSON.parse(await fs.readFile(jsonPath, 'utf8')) as Results;
      const mine = results.sections as Record<string, unknown>;
      results = { ...results, sections: { ...now.sections, ...Object.fromEntries(Object.entries(mine).filter(([k]) => ranNow.has(k))) } };
    } catch {
      // no file yet
    }
    await fs.writeFile(jsonPath, JSON.stringify(results, null, 2) + '\n');
    await fs.writeFile(mdPath, markdown(results) + '\n');
  };
  let failed = false;
  const dataDir = path.resolve(flagValue(argv, 'data-dir') ?? path.join(REPO, 'bench', 'data'));
  for (const s of SECTIONS) {
    if (!ONLY.includes(s)) continue;
    const at = new Date().toISOString();
    if (s === 'failover') results.sections.failover = { at, command, source, result: await failover() };
    if (s === 'catchup') results.sections.catchup = { at, command, source, result: await catchUp() };
    if (s === 'replication') {
      const result = await replication({
        points: POINTS,
        queries: numFlag(argv, 'queries', POINTS < FULL_POINTS ? 200 : 1000),
        ef: numFlag(argv, 'ef', 64),
        batch: numFlag(argv, 'batch', 1000),
        writers: numFlag(argv, 'writers', 3),
        rounds: numFlag(argv, 'rounds', 4),
        reps: numFlag(argv, 'reps', 3),
        warmup: numFlag(argv, 'warmup', 2),
        concurrency: numFlag(argv, 'concurrency', 8),
        rfs: listFlag(argv, 'rfs', ['1', '2', '3']).map(Number),
        shards: numFlag(argv, 'shards', 3),
        settle: boolFlag(argv, 'settle', true),
        dataDir,
      });
      results.sections.replication = { at, command, source, result };
    }
    if (s === 'recovery') {
      const writes = numFlag(argv, 'recovery-writes', 10_000);
      const rows = await recovery({
        // Empty, and holding POINTS in the end (the data set has 100,000 points).
        bases: listFlag(argv, 'recovery-base', ['0', String(Math.max(0, POINTS - writes))]).map(Number),
        writes,
        downSeconds: numFlag(argv, 'recovery-down', 60),
        shards: numFlag(argv, 'shards', 3),
        dataDir,
      });
      results.sections.recovery = { at, command, source, result: { rows, requirementMs: 30_000 } };
    }
    const methods = listFlag(argv, 'methods', TRANSFER_METHODS);
    const dim = numFlag(argv, 'dim', 128);
    if (s === 'transfers') {
      const result = await transferThroughput({ points: numFlag(argv, 'transfer-points', 1_000_000), dim, methods, reps: numFlag(argv, 'transfer-reps', 2) });
      results.sections.transfers = { at, command, source, result };
    }
    if (s === 'delta') {
      const fault = flagValue(argv, 'delta-fault') ?? 'kill';
      if (fault !== 'kill' && fault !== 'stop') throw new Error(`--delta-fault: kill or stop, got ${fault}`);
      const result = await deltaRecovery({
        points: numFlag(argv, 'delta-points', 500_000),
        dim,
        writes: numFlag(argv, 'delta-writes', 10_000),
        trials: numFlag(argv, 'delta-trials', 3),
        methods: listFlag(argv, 'methods', ['wal_delta', 'stream_records']),
        fault,
      });
      results.sections.delta = { at, command, source, result };
    }
    if (s === 'moves') {
      const result = await moves({ points: numFlag(argv, 'moves-points', 1_000_000), dim, shards: numFlag(argv, 'moves-shards', 3), methods, batch: numFlag(argv, 'moves-batch', 100), overwrite: 0.3 });
      results.sections.moves = { at, command, source, result };
      if (!result.ok) failed = true;
    }
    if (s === 'drain') {
      const result = await drainBench({ points: numFlag(argv, 'drain-points', 300_000), dim, shards: numFlag(argv, 'drain-shards', 6), batch: numFlag(argv, 'drain-batch', 100), method: flagValue(argv, 'drain-method') ?? null });
      results.sections.drain = { at, command, source, result };
      if (!result.ok) failed = true;
    }
    ranNow.add(s);
    await save();
  }
  console.log(markdown(results));
  console.log(`wrote ${path.relative(process.cwd(), jsonPath)} and ${path.relative(process.cwd(), mdPath)}`);
  if (twoLeaders.length > 0 || failed) process.exit(1);
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
