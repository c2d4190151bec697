#!/usr/bin/env bash
# Installs the two anchor libraries of `npm run bench:engine` (idempotent):
#   faiss-cpu  from PyPI (a wheel; faiss picks its SIMD variant at import);
#   hnswlib    from PyPI, built from its source distribution on this machine, with this
#              CPU's flags (-march=native).
# Not part of `make test` or .ci/run; bench:engine runs it when the modules are missing
# (unless --no-pip). Logs go to bench/data/anchors/ (gitignored).
#
# hnswlib's setup.py (0.8.0) puts `-O3 -march=native` on the compile line itself unless
# HNSWLIB_NO_NATIVE is set, and drops -march=native only when the compiler rejects it;
# we unset HNSWLIB_NO_NATIVE, pass -march=native in CFLAGS too, build verbosely
# and then check (a) that the build log shows -march=native on the compile line and
# (b) that the compiled extension holds instructions of the CPU's widest vector unit
# (zmm registers for AVX-512, ymm for AVX2), which a build without -march cannot emit.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
FAISS_VERSION=${FAISS_VERSION:-1.15.1}
HNSWLIB_VERSION=${HNSWLIB_VERSION:-0.8.0}
FORCE=${1:-}
LOGS=$PWD/bench/data/anchors
mkdir -p "$LOGS"

# The widest vector register class this CPU has: what a native build must contain.
widest_reg() {
  if grep -qw avx512f /proc/cpuinfo; then echo zmm
  elif grep -qw avx2 /proc/cpuinfo; then echo ymm
  else echo xmm; fi
}

# Prints the number of instructions naming the register class in the hnswlib extension.
native_instr_count() {
  local so
  so=$("$PYTHON" -c 'import hnswlib; print(hnswlib.__file__)' 2>/dev/null) || { echo 0; return; }
  objdump -d --no-show-raw-insn "$so" | grep -c "%$(widest_reg)" || true
}

if [ "$FORCE" != "--force" ] && "$PYTHON" -c "import faiss, sys; sys.exit(0 if faiss.__version__ == '$FAISS_VERSION' else 1)" 2>/dev/null; then
  echo "== faiss-cpu $FAISS_VERSION already installed"
else
  echo "== pip install faiss-cpu==$FAISS_VERSION"
  "$PYTHON" -m pip install --disable-pip-version-check "faiss-cpu==$FAISS_VERSION" 2>&1 | tee "$LOGS/faiss-install.log" | tail -n 2
fi
"$PYTHON" -c 'import faiss; print("   faiss", faiss.__version__, "compile options:", faiss.get_compile_options())'

REG=$(widest_reg)
have=$("$PYTHON" -c "import hnswlib, importlib.metadata as m; print(m.version('hnswlib'))" 2>/dev/null || true)
if [ "$FORCE" != "--force" ] && [ "$have" = "$HNSWLIB_VERSION" ] && [ "$(native_instr_count)" -gt 0 ] && grep -q -- '-march=native' "$LOGS/hnswlib-build.log" 2>/dev/null; then
  echo "== hnswlib $HNSWLIB_VERSION already built from source with -march=native"
else
  echo "== pip install --no-binary hnswlib hnswlib==$HNSWLIB_VERSION (compiled here, -march=native; log: bench/data/anchors/hnswlib-build.log)"
  unset HNSWLIB_NO_NATIVE
  # CFLAGS is appended to Python's own compile flags (CXXFLAGS would replace them and
  # drop -DNDEBUG), so the compile line keeps -DNDEBUG -O3 and gains -march=native.
  CFLAGS="-march=native" \
    "$PYTHON" -m pip install -v --disable-pip-version-check --no-cache-dir --force-reinstall --no-deps \
      --no-binary hnswlib "hnswlib==$HNSWLIB_VERSION" >"$LOGS/hnswlib-build.log" 2>&1 || {
        tail -n 30 "$LOGS/hnswlib-build.log"; exit 1; }
fi
so=$("$PYTHON" -c 'import hnswlib; print(hnswlib.__file__)')
n=$(native_instr_count)
march=$(grep -c -- '-march=native' "$LOGS/hnswlib-build.log" || true)
echo "   hnswlib $("$PYTHON" -c "import importlib.metadata as m; print(m.version('hnswlib'))") at $so"
echo "   compile lines with -march=native in the build log: $march; instructions on %$REG registers in the extension: $n"
if [ "$n" -eq 0 ] || [ "$march" -eq 0 ]; then
  echo "hnswlib was not built with this CPU's flags" >&2
  exit 1
fi
printf '{"so":"%s","reg":"%s","instructions":%s,"marchLines":%s}\n' "$so" "$REG" "$n" "$march" >"$LOGS/hnswlib-native.json"
