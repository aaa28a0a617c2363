#!/usr/bin/env bash
# lisa's whole test suite, from a fresh Debian 12 machine:
#   1. installs the Debian packages it needs (scripts/deps.sh),
#   2. makes the test-only Python environment (scripts/pyenv.sh),
#   3. builds with the picky warnings as errors and runs every suite, then
#      the local training runs through the whole stack one at a time
#      (ctest label `localrun`: the toy run, and two trainer ranks),
#   4. rebuilds under ASan+UBSan and runs every suite again,
#   5. checks formatting and function lengths (scripts/fnlen.sh) and runs
#      the fuzz targets briefly.
#   6. runs the compose stack's toy training on a private Docker engine,
#      then the docker sandbox backend's tests on it (ctest label `docker`:
#      engine, debootstrap base, images, runs, crashes, the probes from
#      inside containers).
# Set LISA_TEST_QUICK=1 to skip the sanitizer pass and the fuzzing, and
# LISA_SKIP_DOCKER_TESTS=1 to skip the container step (it needs root and
# Debian's mirrors; without them it fails rather than passing unseen).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
jobs=${LISA_JOBS:-$(nproc)}

bash scripts/deps.sh
py=$(bash scripts/pyenv.sh "$root/build/pyenv")

step() { printf '\n== %s\n' "$*"; }

step "format check"
bash scripts/format.sh --check
step "function length check (no product function over 150 lines)"
bash scripts/fnlen.sh

run_suite() { # preset
  local preset=$1
  step "build ($preset)"
  cmake --preset "$preset" -DLISA_PYTHON="$py" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  step "tests ($preset)"
  # The container test and the local training run run once each, as
  # their own steps below.
  ctest --preset "$preset" -j "$jobs" -LE 'docker|localrun'
}

run_suite default
step "local runs (scripts/run.sh on the toy task: the reward rises; two trainer ranks)"
t0=$(date +%s)
ctest --preset default -L localrun --output-on-failure
echo "local run: $(($(date +%s) - t0)) s"
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
if [ "${LISA_SKIP_DOCKER_TESTS:-0}" = "1" ]; then
  step "containers: SKIPPED (LISA_SKIP_DOCKER_TESTS=1)"
else
  step "containers (compose stack and docker sandboxes on a private Docker engine)"
  t0=$(date +%s)
  ctest --preset default -L docker --output-on-failure
  echo "containers: $(($(date +%s) - t0)) s; figures (s):" \
    "$(tr -d '\n ' <build/default/compose-e2e.json 2>/dev/null || echo none)"
fi
step "all tests passed"
