#!/usr/bin/env bash
# The one set-up path: installs what this machine lacks to build Quiver (`make run`)
# or to build and test it (`make test`, which `.ci/run` calls). Idempotent: every step
# checks first and skips what is already there, so a second run installs nothing.
#
#   scripts/setup.sh build   npm packages; Debian's rustc, cargo, wasm32 std and lld-14
#                            (the WASM fallback); a C++ compiler and make
#   scripts/setup.sh test    all of the above, plus chromium, openssl and the Python
#                            packages the suites use (qdrant-client, moto[server],
#                            schemathesis), helm and kubeconform (scripts/install-helm-tools.sh)
#   scripts/setup.sh bench   the build profile, plus the load generators the benchmarks
#                            drive (wrk, h2load from nghttp2-client, hyperfine) and pip;
#                            bench:engine installs its Python anchors itself
#                            (scripts/install-bench-anchors.sh) when they are missing
#
# Not root and something from Debian is missing: prints the exact command to run and
# exits 1 without changing anything.
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${1:-test}
case "$profile" in build|test|bench) ;; *) echo "usage: scripts/setup.sh build|test|bench" >&2; exit 2 ;; esac

# Versions of the Python packages the suites drive (pinned: a newer release must not
# change what the suites test without a commit saying so).
QDRANT_CLIENT_VERSION=1.18.0
MOTO_VERSION=5.2.1
SCHEMATHESIS_VERSION=3.39.16
HYPOTHESIS_SPEC='hypothesis<6.116'

# --- Debian packages ---------------------------------------------------------------
need_apt=()
[ -x /usr/bin/rustc ] && [ -x /usr/bin/cargo ] || need_apt+=(rustc cargo)
[ -d /usr/lib/rustlib/wasm32-unknown-unknown ] || need_apt+=(libstd-rust-dev-wasm32)
command -v wasm-ld-14 >/dev/null 2>&1 || [ -x /usr/lib/llvm-14/bin/wasm-ld ] || need_apt+=(lld-14)
command -v g++ >/dev/null 2>&1 || need_apt+=(g++)
command -v make >/dev/null 2>&1 || need_apt+=(make)
if [ "$profile" = test ]; then
  [ -x /usr/bin/chromium ] || need_apt+=(chromium)
  command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
  command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
  python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
fi
if [ "$profile" = bench ]; then
  command -v wrk >/dev/null 2>&1 || need_apt+=(wrk)
  command -v h2load >/dev/null 2>&1 || need_apt+=(nghttp2-client)
  command -v hyperfine >/dev/null 2>&1 || need_apt+=(hyperfine)
  command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
  python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing Debian packages: ${need_apt[*]}" >&2
    echo "setup: run as root:  apt-get update && apt-get install -y --no-install-recommends ${need_apt[*]}" >&2
    exit 1
  fi
  echo "== setup: apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

# --- npm packages ----------------------------------------------------------------------
# `npm install` rather than `npm ci`: npm 11 leaves the optional platform packages of
# @napi-rs/cli's lzma dependency out of the lock file and then refuses `npm ci`. The lock
# file still pins every version that is installed. The stamp records the lock file it
# installed, so a changed lock file installs again (npm may add entries to it as it installs, hence the sum is taken after).
lock_sum() { cat package.json package-lock.json | sha256sum | cut -c1-16; }
if [ "$(cat node_modules/.installed 2>/dev/null)" != "$(lock_sum)" ]; then
  echo "== setup: npm install"
  npm install --no-audit --no-fund
  lock_sum > node_modules/.installed
fi

# --- crates (quiver-core has none; the napi addon's come from crates.io) -----------------
if ! cargo metadata --offline --format-version 1 >/dev/null 2>&1; then
  echo "== setup: cargo fetch"
  cargo fetch
fi

[ "$profile" = test ] || exit 0

# --- Python packages -------------------------------------------------------------------
pip_missing=()
py_has() { # py_has <distribution> <version>
  python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null
}
py_has qdrant-client "$QDRANT_CLIENT_VERSION" || pip_missing+=("qdrant-client==$QDRANT_CLIENT_VERSION")
{ py_has moto "$MOTO_VERSION" && command -v moto_server >/dev/null 2>&1; } || pip_missing+=("moto[server]==$MOTO_VERSION")
py_has schemathesis "$SCHEMATHESIS_VERSION" || pip_missing+=("schemathesis==$SCHEMATHESIS_VERSION" "$HYPOTHESIS_SPEC")
if [ ${#pip_missing[@]} -gt 0 ]; then
  echo "== setup: pip install ${pip_missing[*]}"
  pip_install=(python3 -m pip install --disable-pip-version-check --no-input --quiet "${pip_missing[@]}")
  # A Debian python3 is "externally managed" and wants --break-system-packages.
  "${pip_install[@]}" 2>/dev/null || "${pip_install[@]}" --break-system-packages
  # pyenv puts new console scripts (moto_server) on PATH only after a rehash.
  command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi

# --- helm, kubeconform and the Kubernetes schemas (for test/helm/check.sh) --------------
./scripts/install-helm-tools.sh
