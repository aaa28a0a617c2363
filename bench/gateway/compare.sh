#!/usr/bin/env bash
# Two builds of lisa-gateway in one run: gw_bench once per build and round
# (one gw_bench round each, the builds' order alternating between rounds),
# then each build's medians of the rounds: p50 added latency, requests/s
# and CPU per call, and the new/base ratios.
# Usage: bench/gateway/compare.sh BASE_BUILD NEW_BUILD [ROUNDS] [TURNS CONVS
#        AGENTS SECONDS]
# BASE_BUILD and NEW_BUILD are build folders (bin/lisa-gateway in each);
# gw_bench itself comes from NEW_BUILD/bench. Defaults: 3 rounds, gw_bench's
# 30 turns, 20 conversations, 8 agents, 5 seconds.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
base=$(cd "${1:?usage: compare.sh BASE_BUILD NEW_BUILD [ROUNDS]}" && pwd)
new=$(cd "${2:?usage: compare.sh BASE_BUILD NEW_BUILD [ROUNDS]}" && pwd)
rounds=${3:-3}
args=("${4:-30}" "${5:-20}" "${6:-8}" "${7:-5}" 1)
bench=$new/bench/gw_bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# shellcheck source=bench/compare_rounds.sh
. "$root/bench/compare_rounds.sh"

# one gw_bench round against build $2; its figures appended to $out/$1
one() {
  local log
  log=$(GW_BENCH_SOURCE_DIR=$root GW_BENCH_BINARY_DIR=$2 "$bench" "${args[@]}")
  echo "$log" | grep -E '^(round|gateway:)' | sed "s/^/$1: /" >&2
  echo "$log" | sed -nE 's/^gateway: added latency p50 ([0-9.]+) ms.*; ([0-9]+) req\/s.*CPU ([0-9]+) us per call.*/\1 \2 \3/p' \
    >>"$out/$1"
}

compare_rounds "$rounds"
printf '%-5s %14s %10s %14s\n' build 'p50 added ms' 'req/s' 'CPU us/call'
for b in base new; do
  printf '%-5s %14s %10s %14s\n' "$b" "$(median "$out/$b" 1)" \
    "$(median "$out/$b" 2)" "$(median "$out/$b" 3)"
done
awk -v b50="$(median "$out/base" 1)" -v n50="$(median "$out/new" 1)" \
  -v br="$(median "$out/base" 2)" -v nr="$(median "$out/new" 2)" \
  -v bc="$(median "$out/base" 3)" -v nc="$(median "$out/new" 3)" \
  'BEGIN { printf "new/base: p50 added %.3f, req/s %.3f, CPU per call %.3f\n",
           n50 / b50, nr / br, nc / bc }'
