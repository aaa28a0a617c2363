#!/usr/bin/env bash
# Reward benchmark: lisa-reward-bench's figures per rule, then math-verify
# timed on the same math inputs in the same run, with the ratio and the
# agreement between the two. Usage: bench/reward/run.sh [BUILD_DIR] [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/default}
secs=${2:-1}
py=${LISA_PYTHON:-$build/../pyenv/bin/python}
dump=$(mktemp)
trap 'rm -f "$dump"' EXIT
out=$("$build/bin/lisa-reward-bench" --seconds "$secs" --dump "$dump")
echo "$out"
ours=$(echo "$out" | awk '$1 == "math_equiv" {print $2}')
if [ -x "$py" ] && "$py" -c 'import math_verify' 2>/dev/null; then
  read -r mv agree n < <("$py" "$root/bench/reward/math_verify_rate.py" \
    "$dump" "$build/bin/lisa-reward" 200 2>/dev/null)
  echo "math-verify  $mv scores/s/core on the same inputs ($n items)"
  awk -v a="$ours" -v b="$mv" 'BEGIN {printf "ratio        lisa-reward / math-verify = %.0fx\n", a / b}'
  echo "agreement    $agree of $n verdicts identical"
else
  echo "math-verify not installed: no ratio (scripts/pyenv.sh installs it)"
fi
