#!/usr/bin/env bash
# bench/trainer: lisa's CUDA trainer and the PyTorch + transformers peer on
# the same GPU in one run, then the ratios. Needs a GPU machine with
# python3 + torch + transformers for the peer.
#   bench/trainer/run.sh BINDIR [--quick] [--decode-only] [--no-graphs]
set -euo pipefail
bindir=${1:?usage: run.sh BINDIR [--quick]}
shift || true
here=$(cd "$(dirname "$0")" && pwd)
ours=$("$bindir/trn_bench" "$@")
echo "$ours" | sed 's/^/lisa   /'
peer=$(python3 "$here/torch_peer.py" 36 "$@" 2>/dev/null | grep -E '^(train|decode)_')
echo "$peer" | sed 's/^/torch  /'
echo "ratios (lisa / torch):"
while read -r name value unit; do
  theirs=$(echo "$peer" | awk -v n="$name" '$1 == n {print $2}')
  if [ -n "$theirs" ]; then # figures without a peer (split times) print no ratio
    awk -v n="$name" -v a="$value" -v b="$theirs" \
      'BEGIN { printf "  %-18s %.2fx\n", n, a / b }'
  fi
done <<< "$(echo "$ours" | grep -E '^(train|decode)_')"
