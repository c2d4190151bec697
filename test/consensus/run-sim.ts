/**
 * Long simulation runs outside ava: node dist/test/consensus/run-sim.js [runs] [firstSeed]
 * (RAFT_SIM_RUNS / RAFT_SIM_FIRST_SEED work too). Prints progress, a summary, and every
 * failing seed with its problem; exits 1 when any seed failed. Replay one seed with its
 * trace: RAFT_SIM_SEED=<seed> npx ava dist/test/consensus/simulation.test.js
 */

import { SimFailure, SimReport, runSeed } from './sim';

const runs = Number(process.argv[2] ?? process.env.RAFT_SIM_RUNS ?? 2000);
const first = Number(process.argv[3] ?? process.env.RAFT_SIM_FIRST_SEED ?? 1);
const started = Date.now();
const failures: SimFailure[] = [];
const totals = { ticks: 0, steps: 0, leaders: 0, committed: 0, crashes: 0, midReadyCrashes: 0, snapshotsInstalled: 0, confChangesApplied: 0, messagesSent: 0, messagesDropped: 0 };
let maxLiveness = 0;
for (let i = 0; i < runs; i++) {
  const seed = first + i;
  let r: SimReport;
  try {
    r = runSeed(seed);
  } catch (e) {
    if (!(e instanceof SimFailure)) throw e;
    failures.push(e);
    console.log(`FAIL ${e.message.split('\n')[0]}`);
    continue;
  }
  for (const k of Object.keys(totals) as (keyof typeof totals)[]) totals[k] += r[k];
  maxLiveness = Math.max(maxLiveness, r.livenessTicks / r.params.electionTicks);
  if ((i + 1) % 1000 === 0) console.log(`${i + 1} runs, ${failures.length} failed, ${((Date.now() - started) / 1000).toFixed(1)} s`);
}
const secs = (Date.now() - started) / 1000;
console.log(JSON.stringify({ runs, firstSeed: first, failed: failures.length, seconds: Number(secs.toFixed(1)), totals, worstLivenessInElectionTimeouts: Number(maxLiveness.toFixed(2)) }));
for (const f of failures) console.log(`failing seed ${f.seed}: ${f.problem.split('\n')[0]}`);
process.exit(failures.length > 0 ? 1 : 0);
