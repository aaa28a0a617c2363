#!/usr/bin/env bash
# bench/trainer: lisa's CUDA trainer and the PyTorch peer (transformers +
# Liger kernels + cuDNN attention, torch_peer.py) on the same GPU in one
# run, then the ratios of every figure both print.
#   bench/trainer/run.sh BINDIR [--quick] [--decode-only] [--no-graphs]
# lisa runs trn_bench (4k and 16k, full steps at 4k and 16k, decode) and,
# unless --quick or --decode-only, trn_bench --long (32k and 64k with the
# optimizer state offloaded); the peer runs 4k to 64k, the same steps and
# decode. Needs python3 with torch and transformers on the GPU machine, and
# liger-kernel: either importable already, or its wheel in the folder named
# by LISA_PEER_WHEELS (the GPU machine has no network). Fetch the wheel
# where there is one and copy the folder over:
#   pip download liger-kernel==0.8.5 --no-deps -d DIR
# It is installed (pip --no-index --no-deps, or unpacked where python3 has
# no pip) into a temporary folder put on PYTHONPATH for this run only.
set -euo pipefail
bindir=${1:?usage: run.sh BINDIR [--quick] [--decode-only] [--no-graphs]}
shift || true
here=$(cd "$(dirname "$0")" && pwd)
long=1
for a in "$@"; do
  case $a in --quick | --decode-only) long=0 ;; esac
done

if [ -n "${LISA_PEER_WHEELS:-}" ]; then
  site=$(mktemp -d)
  trap 'rm -rf "$site"' EXIT
  if python3 -m pip --version > /dev/null 2>&1; then
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet \
      --disable-pip-version-check --no-index --no-deps \
      --find-links "$LISA_PEER_WHEELS" --target "$site" liger-kernel==0.8.5
  else # a pure-Python wheel is a zip of what pip would install
    whl=("$LISA_PEER_WHEELS"/liger_kernel-0.8.5-*.whl)
    [ -f "${whl[0]}" ] || { echo "no liger_kernel-0.8.5 wheel in $LISA_PEER_WHEELS" >&2; exit 1; }
    python3 -m zipfile -e "${whl[0]}" "$site"
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

ours=$("$bindir/trn_bench" "$@")
if [ "$long" = 1 ]; then
  ours+=$'\n'$("$bindir/trn_bench" --long | grep -v '^params ')
fi
echo "$ours" | sed 's/^/lisa   /'
peer=$(python3 "$here/torch_peer.py" 36 "$@" |
  grep -E '^(train|mfu|step|decode|peer)_')
echo "$peer" | sed 's/^/torch  /'
echo "ratios (lisa / torch):"
# every numeric figure both print (split times, plans and memory have no
# counterpart of the same name and print none)
while read -r name value _; do
  theirs=$(echo "$peer" | awk -v n="$name" '$1 == n {print $2}')
  case $value in '' | *[!0-9.]*) continue ;; esac
  case $theirs in '' | *[!0-9.]*) continue ;; esac
  awk -v n="$name" -v a="$value" -v b="$theirs" \
    'BEGIN { if (b > 0) printf "  %-18s %.2fx\n", n, a / b }'
done <<< "$ours"
