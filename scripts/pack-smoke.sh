#!/bin/bash
# Packs Quiver (`npm pack`), installs the tarball into a fresh directory with npm,
# with PATH stripped to node, npm and a shell (no cargo, no rustc), and starts the
# installed bin/quiver twice: as installed (the native addon for linux-x64 is in the
# package when it was built) and with the addon removed, as on a platform it was not
# built for, where it must fall back to the packaged .wasm. Each time: upsert points,
# query them, check the backend /telemetry reports.
#
#   scripts/pack-smoke.sh            (needs the registry or npm's cache for the dependencies)
#
# test/api/pack.test.ts is the quick in-suite version (extracts the tarball and borrows
# this checkout's node_modules instead of installing).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/quiver-pack-smoke.XXXXXX")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
cd "$ROOT"
npm pack --pack-destination "$WORK" >/dev/null
TARBALL=$(ls "$WORK"/quiver-*.tgz)
echo "packed $(basename "$TARBALL") ($(du -h "$TARBALL" | cut -f1)): $(tar tzf "$TARBALL" | grep -cE '\.wasm$') .wasm, $(tar tzf "$TARBALL" | grep -cE '\.node$') .node"

mkdir -p "$WORK/bin" "$WORK/app"
for c in node sh bash env; do ln -s "$(command -v $c)" "$WORK/bin/$c"; done
ln -s "$(dirname "$(readlink -f "$(command -v npm)")")/npm-cli.js" "$WORK/bin/npm"
echo '{"name":"quiver-smoke","version":"1.0.0","private":true}' >"$WORK/app/package.json"
START=$(date +%s)
(cd "$WORK/app" && PATH="$WORK/bin" bash -c '! command -v cargo && ! command -v rustc && npm install --no-audit --no-fund --omit=dev "'"$TARBALL"'" >/dev/null')
echo "installed without cargo/rustc on PATH in $(( $(date +%s) - START )) s"
PKG="$WORK/app/node_modules/quiver"

run() { # $1 = label; starts the installed bin/quiver, upserts, queries
  local label=$1 port=$((20000 + RANDOM % 20000)) dir="$WORK/run-$1"
  mkdir -p "$dir"
  (cd "$dir" && PATH="$WORK/bin" QUIVER_ENGINE= SERVICE__SERVICE__HOST=127.0.0.1 SERVICE__SERVICE__HTTP_PORT=$port SERVICE__SERVICE__GRPC_PORT=null \
    SERVICE__STORAGE__STORAGE_PATH="$dir/storage" SERVICE__STORAGE__SNAPSHOTS_PATH="$dir/snapshots" \
    "$WORK/bin/node" "$PKG/bin/quiver" >"$dir/log" 2>&1) &
  local pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
  local u="http://127.0.0.1:$port"
  curl -sf -X PUT "$u/collections/c" -H 'content-type: application/json' -d '{"vectors":{"size":3,"distance":"Dot"}}' >/dev/null
  curl -sf -X PUT "$u/collections/c/points?wait=true" -H 'content-type: application/json' \
    -d '{"points":[{"id":1,"vector":[1,0,0]},{"id":2,"vector":[0,1,0]},{"id":3,"vector":[0,0,1]}]}' >/dev/null
  local top backend
  top=$(curl -sf -X POST "$u/collections/c/points/query" -H 'content-type: application/json' -d '{"query":[0,1,0.5],"limit":1}' | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).result.points[0].id))')
  backend=$(curl -sf "$u/telemetry" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).result.app.engine.backend))')
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo "$label: backend $backend, top hit $top; engine log: $(grep -o '"reason":"[^"]*"' "$dir/log" | head -1)"
  [ "$top" = 2 ] || { echo "FAIL: expected point 2" >&2; cat "$dir/log" >&2; exit 1; }
  [ "$backend" = "$2" ] || { echo "FAIL: expected backend $2" >&2; exit 1; }
}
if ls "$PKG"/crates/quiver-node/quiver.*.node >/dev/null 2>&1; then run as-installed native; fi
rm -f "$PKG"/crates/quiver-node/quiver.*.node
run without-addon wasm
echo "pack-smoke: PASS"
