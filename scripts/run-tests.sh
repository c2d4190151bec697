#!/usr/bin/env bash
# Runs every test suite, then prints one summary line over all of them:
#   "N passed, N failed"
# Suites: Rust unit tests of quiver-core (cargo test, Rust stable), the same tests
# and a wasm32 build on Debian's Rust 1.63 (scripts/check-msrv.sh), then the ava suites on the
# compiled TypeScript (TAP output). Exits non-zero when any suite fails or when a
# suite's output cannot be read (a crashed runner must not count as zero failures).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG_DIR=${TEST_LOG_DIR:-$(mktemp -d)}
passed=0
failed=0
status=0

run_cargo() {
  local log="$LOG_DIR/cargo.log"
  echo "== cargo test (quiver-core, release)"
  cargo test --release -p quiver-core 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f
  p=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
  f=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
  p=${p:-0}; f=${f:-0}
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "cargo test exited $rc without a failing test: counted as one failure"; fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$rc" -ne 0 ] && status=1
}

run_ava() {
  local log="$LOG_DIR/ava.log"
  echo "== ava (engine conformance, both backends)"
  npx ava --tap 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f
  p=$(grep -E '^# pass ' "$log" | tail -1 | awk '{print $3}')
  f=$(grep -E '^# fail ' "$log" | tail -1 | awk '{print $3}')
  p=${p:-0}; f=${f:-0}
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "ava exited $rc without a failing test: counted as one failure"; fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$rc" -ne 0 ] && status=1
}

run_msrv() {
  local log="$LOG_DIR/msrv.log"
  echo "== quiver-core on Rust 1.63 (host tests + wasm32 build)"
  ./scripts/check-msrv.sh 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f
  p=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) passed.*/\1/' | awk '{s+=$1} END {print s+0}')
  f=$(grep -E '^test result:' "$log" | sed -E 's/.* ([0-9]+) failed.*/\1/' | awk '{s+=$1} END {print s+0}')
  # The wasm32 build is one more check.
  if [ "$rc" -eq 0 ]; then p=$((p + 1)); elif [ "$f" -eq 0 ]; then f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$rc" -ne 0 ] && status=1
}

run_cargo
run_msrv
run_ava
echo "$passed passed, $failed failed"
exit $status
