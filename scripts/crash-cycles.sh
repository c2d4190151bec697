#!/usr/bin/env bash
# Runs the kill -9 crash test (test/crash/kill9.test.ts) with N cycles and prints a
# summary: acknowledged operations, lost points (must be 0), in-flight operations found
# applied / not applied, checkpoints and optimizer jobs the kills interrupted, replay
# sizes, time taken.
#   scripts/crash-cycles.sh [N]        N defaults to 200
# Environment: QUIVER_CRASH_SEED (operation generator seed), NO_BUILD=1 (skip tsc).
# Exits non-zero when the test fails.
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:-200}
case "$N" in ''|*[!0-9]*) echo "usage: $0 [cycles]" >&2; exit 2 ;; esac

if [ "${NO_BUILD:-0}" != 1 ]; then
  npx tsc -p tsconfig.json >/dev/null 2>&1 || echo "crash-cycles: tsc reported errors (JavaScript was still emitted)" >&2
fi
if [ ! -f dist/test/crash/kill9.test.js ]; then
  echo "crash-cycles: dist/test/crash/kill9.test.js is missing; build with 'make build'" >&2
  exit 1
fi

SUMMARY=$(mktemp "${TMPDIR:-/tmp}/quiver-crash-summary.XXXXXX.json")
LOG=$(mktemp "${TMPDIR:-/tmp}/quiver-crash-log.XXXXXX.txt")
start=$(date +%s)
QUIVER_CRASH_CYCLES="$N" QUIVER_CRASH_SUMMARY="$SUMMARY" \
  npx ava --verbose --timeout=5m dist/test/crash/kill9.test.js >"$LOG" 2>&1
rc=$?
end=$(date +%s)

grep -E '✘|failed|passed' "$LOG" | grep -v '^\s*ℹ' | tail -n 20
if [ -s "$SUMMARY" ]; then
  node -e '
    const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const secs = Number(process.argv[2]);
    const cycles = s.perCycle.length;
    const line = (k, v) => console.log(`${k.padEnd(34)} ${v}`);
    console.log("== kill -9 crash test summary");
    line("cycles run / asked", `${cycles} / ${s.cycles}`);
    line("seed", s.seed);
    line("wall time", `${secs} s (${(secs / Math.max(1, cycles)).toFixed(2)} s per cycle)`);
    line("acknowledged operations", `${s.ackedOps} (${s.ackedPointWrites} point writes)`);
    line("LOST POINTS", s.lostPoints);
    line("  of which wrong vector / payload", `${s.wrongVector} / ${s.wrongPayload}`);
    line("resurrected (deleted) points", s.resurrectedPoints);
    line("count / search mismatches", `${s.countMismatches} / ${s.searchMismatches}`);
    line("half-applied single requests", s.partialSingleOps);
    line("write errors (non-200 answers)", s.writeErrors);
    line("in flight at the kill", `${s.inFlightOps}: applied ${s.inFlightApplied}, not applied ${s.inFlightNotApplied}, /points/batch cut ${s.inFlightPartial}`);
    line("kill delay (ms)", `${s.killAfterMs.min}..${s.killAfterMs.max}`);
    line("checkpoints written before kills", `${s.checkpointsBeforeKill} (in ${s.killsWithCheckpointDuringRun} of ${cycles} runs)`);
    line("kills inside an atomic file write", `${s.killsDuringAtomicWrite} (temp files left in the shard dir: ${s.leftoverTempFiles})`);
    line("optimizer jobs before kills", s.optimizerJobsBeforeKill);
    line("restarts from a checkpoint", `${s.restartsFromCheckpoint} of ${cycles}`);
    line("WAL records replayed (total)", s.replayedRecords);
    line("torn WAL tails cut at restart", s.tornTails);
    line("restart time (ms)", `avg ${Math.round(s.restartMs.avg * s.cycles / Math.max(1, cycles))}, max ${s.restartMs.max}`);
    line("points at the end (max)", `${s.finalPoints} (${s.maxPoints})`);
    if (s.failures.length > 0) {
      console.log(`== first failures (${s.failures.length})`);
      for (const f of s.failures.slice(0, 20)) console.log(f);
    }
  ' "$SUMMARY" "$((end - start))"
else
  echo "crash-cycles: no summary was written; ava output:"
  tail -n 60 "$LOG"
fi
echo "full ava output: $LOG; summary JSON: $SUMMARY"
if [ "$rc" -eq 0 ]; then echo "crash-cycles: PASS"; else echo "crash-cycles: FAIL (ava exit $rc)"; fi
exit "$rc"
