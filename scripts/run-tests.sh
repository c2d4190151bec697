#!/usr/bin/env bash
# Runs every test suite, then prints one summary line over all of them:
#   "N passed, N failed"
# Suites: Rust unit tests of quiver-core (cargo test, Rust stable, with the avx512
# feature the addon builds with), the same tests without it
# and a wasm32 build on Debian's Rust 1.63 (scripts/check-msrv.sh), then the ava suites on the
# compiled TypeScript (TAP output), then the official Python client's workflow against a
# real server, over REST and over gRPC (test/clients/python_client_workflow.py and its
# --grpc run, TAP-like; needs qdrant-client, which .ci/run installs with pip), then the API fuzz suite (test/fuzz/fuzz_api.py: schemathesis and
# hypothesis, pinned in scripts/setup.sh, drive every route of the reference's OpenAPI document
# against a real server with data; TAP), then the Helm chart check (test/helm/check.sh: helm lint,
# helm template, kubeconform; tools from scripts/install-helm-tools.sh). Exits non-zero when any suite fails or when a suite's output
# cannot be read (a crashed runner must not count as zero failures).
set -uo pipefail
cd "$(dirname "$0")/.."
# Each suite's output is kept in LOG_DIR: a temporary one (removed when every suite
# passed, kept and named on a failure) unless TEST_LOG_DIR names one.
LOG_DIR=${TEST_LOG_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/quiver-test-logs.XXXXXX")}
passed=0
failed=0
status=0

run_cargo() {
  local log="$LOG_DIR/cargo.log"
  # With the avx512 feature, as the addon builds it: the AVX-512 kernels sit behind it,
  # and their tests (against scalar and the single kernels) run only with it. The build
  # without the feature is tested by scripts/check-msrv.sh (Rust 1.63).
  echo "== cargo test (quiver-core, release, avx512 feature)"
  grep -qw avx512f /proc/cpuinfo 2>/dev/null || echo "   (this CPU has no AVX-512: the kernel tests cover the other kernel sets only)"
  cargo test --release -p quiver-core --features avx512 2>&1 | tee "$log"
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

# Runs a Python script (with its arguments) that prints TAP lines (see run_tap), bounded by `timeout` (a hung
# server must not hold the whole run). A missing interpreter is one failure.
run_python_tap() {
  local log=$1 what=$2 seconds=$3
  shift 3
  local py=${PYTHON:-python3}
  if ! command -v "$py" >/dev/null 2>&1; then
    echo "not ok 1 - $py not found: install Python 3, then scripts/setup.sh test (it pip-installs what $what needs)" | tee "$log"
    failed=$((failed + 1)); status=1
    return
  fi
  run_tap "$log" "$what" timeout "$seconds" "$py" "$@"
}

run_python_clients() {
  echo "== Python client (qdrant-client) workflow against bin/quiver, over REST"
  # Each client call also times out.
  run_python_tap "$LOG_DIR/python-clients.log" "python client workflow" 600 test/clients/python_client_workflow.py
  echo "== Python client (qdrant-client) workflow against bin/quiver, over gRPC (prefer_grpc=True)"
  run_python_tap "$LOG_DIR/python-clients-grpc.log" "python client workflow over gRPC" 600 test/clients/python_client_workflow.py --grpc
}

run_fuzz() {
  echo "== API fuzz suite (schemathesis, fixed seed) against bin/quiver"
  # About two minutes on two busy cores.
  run_python_tap "$LOG_DIR/fuzz.log" "the API fuzz suite" 600 test/fuzz/fuzz_api.py
}

# Runs a command whose output has TAP-like "ok N" / "not ok N" lines, and counts them.
# A command that exits non-zero without a failing line counts one failure; one that
# exits 0 without any line also counts one (it ran nothing).
run_tap() {
  local log=$1 what=$2
  shift 2
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local p f
  p=$(grep -cE '^ok [0-9]+' "$log")
  f=$(grep -cE '^not ok [0-9]+' "$log")
  p=${p:-0}; f=${f:-0}
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; echo "$what exited $rc without a failing step: counted as one failure"; fi
  if [ "$rc" -eq 0 ] && [ "$p" -eq 0 ]; then f=1; rc=1; echo "$what ran no step: counted as one failure"; fi
  passed=$((passed + p)); failed=$((failed + f))
  [ "$rc" -ne 0 ] && status=1
}

run_helm() {
  echo "== Helm chart (helm lint, helm template, kubeconform)"
  run_tap "$LOG_DIR/helm.log" "the Helm chart check" timeout 300 ./test/helm/check.sh
}

run_cargo
run_msrv
run_ava
run_python_clients
run_fuzz
run_helm
if [ -z "${TEST_LOG_DIR:-}" ]; then
  if [ "$status" -eq 0 ]; then rm -rf "$LOG_DIR"; else echo "the suites' output is kept in $LOG_DIR"; fi
fi
echo "$passed passed, $failed failed"
exit $status
