#!/bin/sh
# Runs before `npm pack`: the package carries compiled JavaScript and the prebuilt
# engine (the .wasm always, the native addon for this platform when it was built),
# so installing it needs neither tsc nor a Rust toolchain. Build them first
# (`make build`, or `npm run build:wasm` and `npm run build:addon`).
set -e
npx tsc -p tsconfig.json
WASM=crates/quiver-wasm/target/wasm32-unknown-unknown/release/quiver_wasm.wasm
if [ ! -f "$WASM" ]; then
  echo "prepack: $WASM is missing: run 'npm run build:wasm' (the package must carry the WASM engine)" >&2
  exit 1
fi
if ! ls crates/quiver-node/quiver.*.node >/dev/null 2>&1; then
  echo "prepack: no native addon built; the package will run on the WASM engine only" >&2
fi
