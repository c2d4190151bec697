#!/usr/bin/env bash
# Checks that crates/quiver-core builds with Debian's Rust 1.63 (the toolchain of the
# WASM fallback), for the host and for wasm32, and passes its unit tests there.
# The crate is copied out of the workspace first: Debian's cargo cannot read the
# workspace's v4 lockfile, and quiver-core has no dependencies to lock.
set -euo pipefail
RUSTC=${DEBIAN_RUSTC:-/usr/bin/rustc}
CARGO=${DEBIAN_CARGO:-/usr/bin/cargo}
src="$(cd "$(dirname "$0")/.." && pwd)/crates/quiver-core"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$src/src" "$src/Cargo.toml" "$work/"
[ -d "$src/examples" ] && cp -r "$src/examples" "$work/"
printf '\n[workspace]\n' >> "$work/Cargo.toml"
cd "$work"
echo "== quiver-core with $($RUSTC --version): host build and tests"
RUSTC=$RUSTC $CARGO test --release --offline --lib 2>&1 | tail -3
echo "== quiver-core with $($RUSTC --version): wasm32-unknown-unknown build"
RUSTC=$RUSTC $CARGO build --release --offline --lib --target wasm32-unknown-unknown 2>&1 | tail -1
