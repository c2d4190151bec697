/**
 * Seeded simulation of the Raft core (test/consensus/sim.ts): lossy, duplicating,
 * reordering, partitioned network; crashes at any point of the driver loop and restarts
 * from persisted state; random proposals, membership changes and compaction. Election
 * safety, log matching, leader completeness and state-machine safety are checked after
 * every step, liveness at the end of every run.
 *
 *   RAFT_SIM_RUNS=<n>        how many seeded runs (default 2000; e.g. 100000 for a long run)
 *   RAFT_SIM_FIRST_SEED=<s>  first seed (default 1); runs use seeds s, s+1, ...
 *   RAFT_SIM_SEED=<s>        replay one seed, with its event trace in the test log
 *
 * A failing seed replays exactly (all randomness comes from it). Seeds that once failed
 * stay below as named regression cases, each with what it revealed.
 */

import test, { ExecutionContext } from 'ava';

import { SimFailure, SimReport, runSeed } from './sim';

const RUNS = Number(process.env.RAFT_SIM_RUNS ?? 2000);
const FIRST_SEED = Number(process.env.RAFT_SIM_FIRST_SEED ?? 1);
const REPLAY = process.env.RAFT_SIM_SEED;
const CHUNK = 250;
/** Seeds whose runs break when a Ready's messages are sent before it is persisted. */
const SEND_FIRST_SEEDS = [62, 601];

/** Runs one seed; on failure, replays it with tracing and fails the test with the trace tail. */
function check(t: ExecutionContext, seed: number): SimReport | null {
  try {
    return runSeed(seed);
  } catch (e) {
    if (!(e instanceof SimFailure)) throw e;
    let trace: readonly string[] = [];
    try {
      runSeed(seed, { trace: true });
    } catch (again) {
      if (again instanceof SimFailure) trace = again.trace;
    }
    t.fail(`${e.message}\nreplay: RAFT_SIM_SEED=${seed} npx ava dist/test/consensus/simulation.test.js\nlast events:\n${trace.slice(-80).join('\n')}`);
    return null;
  }
}

if (REPLAY !== undefined) {
  test(`replay of seed ${REPLAY}`, (t) => {
    const seed = Number(REPLAY);
    try {
      const r = runSeed(seed, { trace: true });
      t.log(JSON.stringify(r));
      t.pass();
    } catch (e) {
      if (!(e instanceof SimFailure)) throw e;
      t.log(e.trace.join('\n'));
      t.fail(e.message);
    }
  });
} else {
  for (let from = FIRST_SEED; from < FIRST_SEED + RUNS; from += CHUNK) {
    const to = Math.min(FIRST_SEED + RUNS, from + CHUNK);
    test(`seeded runs ${from}..${to - 1}: safety after every step, a leader and a final commit on every member after healing`, (t) => {
      let committed = 0;
      let leaders = 0;
      let crashes = 0;
      let snapshots = 0;
      let confChanges = 0;
      for (let seed = from; seed < to; seed++) {
        const r = check(t, seed);
        if (r === null) return;
        committed += r.committed;
        leaders += r.leaders;
        crashes += r.crashes;
        snapshots += r.snapshotsInstalled;
        confChanges += r.confChangesApplied;
      }
      t.log(`${to - from} runs: ${leaders} terms with a leader, ${committed} entries committed, ${crashes} crashes, ${snapshots} snapshots installed, ${confChanges} membership changes applied`);
      t.true(committed > 0 && leaders > 0);
    });
  }
}

test('a seed replays exactly', (t) => {
  for (const seed of [7, 4242]) t.deepEqual(runSeed(seed), runSeed(seed));
  t.notDeepEqual(runSeed(7), runSeed(8));
});

test('the checker notices a driver that sends messages before persisting them', (t) => {
  // An acknowledgement sent before its entries are durable outlives the crash that loses
  // them: the leader counts a copy that no longer exists. (Seeds found by running the
  // simulation with the broken driver; re-derive them after changing sim.ts.)
  for (const seed of SEND_FIRST_SEEDS) {
    t.notThrows(() => runSeed(seed), `seed ${seed} passes with the documented order`);
    const e = t.throws(() => runSeed(seed, { sendBeforePersisting: true }), { instanceOf: SimFailure });
    t.log(`seed ${seed} with messages sent first: ${e?.problem.split('\n')[0]}`);
  }
});

// ---------------------------------------------------------------------------------
// Regression cases: seeds that failed once, with what they revealed.

const REGRESSIONS: { seed: number; revealed: string }[] = [
  {
    seed: 2258,
    revealed:
      'a leader removed itself from a two-voter membership, applied the removal and stood down; the survivor had not heard that the ' +
      'removal committed, still counted the old membership and needed the ex-leader\'s vote, which the ex-leader refused because its ' +
      'log held entries proposed after the removal: no leader ever again. Fixed: a leader whose log holds its own removal takes no more ' +
      'proposals (so every voter that acknowledged the removal holds its whole log)',
  },
  { seed: 4101, revealed: 'the same deadlock as seed 2258, the survivor\'s log 27 entries behind the leaving leader' },
  { seed: 4132, revealed: 'the same deadlock as seed 2258, after the cluster grew to seven peers and shrank back to two voters' },
  { seed: 5723, revealed: 'the same deadlock as seed 2258, with a third voter removed just before' },
  {
    seed: 28478,
    revealed:
      'a learner 320 entries behind, sent one entry per message over a reordering network, had not caught up within the liveness ' +
      'bound: every early append was rejected as a gap and sent the leader back to probing. Fixed: a rejection whose hint matches the ' +
      'leader\'s log counts as an acknowledgement up to the hint, and a replicating follower is not reset to probing for a gap the ' +
      'leader has already sent (a lost append is resent by the no-progress timeout); the healed network of the liveness phase delivers ' +
      'each link in order',
  },
  { seed: 58918, revealed: 'the same slow catch-up as seed 28478, with a leader holding 590 uncommitted entries' },
  {
    seed: 92396,
    revealed:
      'two leaders of term 4: a sole voter became leader in memory and crashed before persisting anything, then voted for another ' +
      'peer in term 4. That leader had left no trace, so the checker now counts a leader once something of its term is durable; but ' +
      'it showed a real hole next to it: had the first entries been persisted without the hard state, the restart rule (term raised ' +
      'to the log\'s, vote cleared) let it vote in a term it may have led. Fixed: it counts its vote in that term as cast for itself',
  },
];
// Seeds 2258..5723 fail with the current sim.ts and raft.ts once the fix is reverted (the
// deadlock was first found as seeds 682, 852, 980 and 1496 of an earlier sim.ts). Seeds
// 28478 and 58918 failed in the 100,000-run long run at commit ae57706, where
// `RAFT_SIM_SEED=28478` replays the original failure; here they pass. Seed 92396 failed in
// the long run at commit 8e1f122.


for (const { seed, revealed } of REGRESSIONS) {
  test(`regression: seed ${seed}: ${revealed.slice(0, 90)}...`, (t) => {
    const r = check(t, seed);
    if (r !== null) t.true(r.committed > 0);
  });
}
