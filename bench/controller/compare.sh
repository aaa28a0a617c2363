#!/usr/bin/env bash
# Two builds of the controller in one run: bench_controller.py's local
# backend once per build and round (one round each, the builds' order
# alternating between rounds), then each build's medians of the rounds:
# sandboxes/s and the p50 and p95 of claim -> first gateway call, and the
# new/base ratios. Each build runs with the harness of its own source tree
# (CMAKE_HOME_DIRECTORY in its CMakeCache.txt), so two commits whose test
# harnesses differ compare as they are. Run as bench_controller.py is
# (root: sandboxes drop to an unprivileged uid).
# Usage: bench/controller/compare.sh BASE_BUILD NEW_BUILD [ROUNDS] [N_LOCAL]
# Defaults: 5 rounds of 200 sandboxes. LISA_PYTHON names the interpreter
# (default: NEW_BUILD/../pyenv/bin/python).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base=$(cd "${1:?usage: compare.sh BASE_BUILD NEW_BUILD [ROUNDS] [N_LOCAL]}" && pwd)
new=$(cd "${2:?usage: compare.sh BASE_BUILD NEW_BUILD [ROUNDS] [N_LOCAL]}" && pwd)
rounds=${3:-5}
n=${4:-200}
py=${LISA_PYTHON:-$new/../pyenv/bin/python}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# shellcheck source=bench/compare_rounds.sh
. "$root/bench/compare_rounds.sh"

# the source tree build $1 was configured from
src() {
  sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$1/CMakeCache.txt"
}

# one local round against build $2; its figures appended to $out/$1
one() {
  local s log
  s=$(src "$2")
  log=$(LISA_SOURCE_DIR=$s LISA_BINARY_DIR=$2 \
    "$py" "$s/bench/controller/bench_controller.py" "$n" 0 1)
  echo "$log" | grep -E '^(local|load)' | sed "s/^/$1: /" >&2
  echo "$log" | sed -nE 's/^local .* ([0-9.]+) sandboxes\/s; .* p50 ([0-9]+) ms, p95 ([0-9]+) ms/\1 \2 \3/p' \
    >>"$out/$1"
}

compare_rounds "$rounds"
printf '%-5s %12s %10s %10s\n' build 'sandboxes/s' 'p50 ms' 'p95 ms'
for b in base new; do
  printf '%-5s %12s %10s %10s\n' "$b" "$(median "$out/$b" 1)" \
    "$(median "$out/$b" 2)" "$(median "$out/$b" 3)"
done
awk -v br="$(median "$out/base" 1)" -v nr="$(median "$out/new" 1)" \
  -v b50="$(median "$out/base" 2)" -v n50="$(median "$out/new" 2)" \
  'BEGIN { printf "new/base: sandboxes/s %.3f, p50 claim -> first call %.3f\n",
           nr / br, (b50 > 0 ? n50 / b50 : 0) }'
