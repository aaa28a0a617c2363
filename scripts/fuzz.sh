#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each for N seconds
# (default 60). A crash, leak or sanitizer report fails the run.
set -euo pipefail
secs=${1:-60}
cd "$(dirname "$0")/.."
cmake --preset fuzz >/dev/null
# only the fuzz targets (and what they link), not every program
targets=$(ls tests/fuzz/fuzz_*.c | xargs -n1 basename | sed 's/\.c$//')
cmake --build --preset fuzz -j "${LISA_JOBS:-$(nproc)}" --target $targets trn_fuzz_checkpoint trn_fuzz_gguf trn_fuzz_engine_request
mkdir -p build/fuzz/corpus build/fuzz/artifacts
for bin in build/fuzz/tests/fuzz/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus=build/fuzz/corpus/$name
  mkdir -p "$corpus"
  seeds=tests/fuzz/seeds/$name
  log=build/fuzz/$name.log
  echo "fuzz: $name for ${secs}s"
  # the report of a failing input is kept whole; a passing run prints its
  # closing statistics
  if ! "$bin" -max_total_time="$secs" -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="build/fuzz/artifacts/$name-" \
    "$corpus" $( [ -d "$seeds" ] && echo "$seeds" ) >"$log" 2>&1; then
    tail -60 "$log"
    echo "FAIL: fuzz: $name: an input fails (saved under build/fuzz/artifacts/;" \
      "replay it: $bin FILE)"
    exit 1
  fi
  tail -4 "$log"
done
