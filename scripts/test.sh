#!/usr/bin/env bash
# lisa's whole test suite, from a fresh Debian 12 machine:
#   1. installs the Debian packages it needs (scripts/deps.sh),
#   2. makes the test-only Python environment (scripts/pyenv.sh),
#   3. builds with the picky warnings as errors and runs every suite,
#   4. rebuilds under ASan+UBSan and runs every suite again,
#   5. checks formatting and runs the fuzz targets briefly.
# Set LISA_TEST_QUICK=1 to skip the sanitizer pass and the fuzzing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${LISA_JOBS:-$(nproc)}

bash scripts/deps.sh
py=$(bash scripts/pyenv.sh "$root/build/pyenv")

step() { printf '\n== %s\n' "$*"; }

step "format check"
bash scripts/format.sh --check

run_suite() { # preset
  local preset=$1
  step "build ($preset)"
  cmake --preset "$preset" -DLISA_PYTHON="$py" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  step "tests ($preset)"
  ctest --preset "$preset" -j "$jobs"
}

run_suite default
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  # The CUDA backend builds here; its tests need a GPU (scripts/gpu-test.sh).
  step "build (cuda, compile only)"
  PATH=$PATH:/usr/local/cuda/bin cmake --preset cuda -DLISA_TESTS=OFF >/dev/null
  PATH=$PATH:/usr/local/cuda/bin cmake --build --preset cuda -j "$jobs"
fi
if [ "${LISA_TEST_QUICK:-0}" != "1" ]; then
  run_suite asan
  step "fuzz (short runs)"
  bash scripts/fuzz.sh 20
fi
step "all tests passed"
