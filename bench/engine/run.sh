#!/usr/bin/env bash
# The engine under an agent-shaped load, on a GPU, against the engine of an
# earlier build and against the bound from this run's measured rates:
#   bench/engine/run.sh BINDIR [BASE_BINDIR] [MODELDIR]
# BINDIR (and BASE_BINDIR, an earlier build to compare with) hold
# lisa-trainer (run with LD_LIBRARY_PATH set to their ../lib when they are
# gpu-bundle.sh folders). MODELDIR: a model directory (default: a random
# Qwen3-4B-shaped one, made with tests/gpu/make_random_qwen3.py, needs torch
# and transformers). LISA_ENGINE_ROWS (C,T,P,G,O;...) and
# LISA_ENGINE_BASE_ROWS choose the rows; LISA_ENGINE_OUT a folder for the
# JSON results; LISA_ENGINE_ARGS extra settings for the new engine,
# LISA_ENGINE_BASE_ARGS for the earlier one (the engine before the paged
# cache, d603b6b, reserves slots x length up front and allocates the
# training state in serve: on an 80 GB card build it with
# base-serve-only.patch and set LISA_BASE_SERVE_ONLY=1, which leaves out
# the gradient and AdamW buffers that generation never touches).
# LISA_ENGINE_GPUS=N (N > 1): N engines of the new build, one per GPU; the
# rows run on the first engine alone, then spread over all N (each
# conversation on one engine), and the scaling is printed (no base run).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${1:?usage: run.sh BINDIR [BASE_BINDIR] [MODELDIR]}
base=${2:-}
model=${3:-}
out=${LISA_ENGINE_OUT:-$(mktemp -d)}
mkdir -p "$out"
rows=${LISA_ENGINE_ROWS:-"16,8,1500,256,400;16,1,6700,256,0;8,8,1000,256,300;16,8,600,128,150;64,30,2000,256,400;256,1,4000,256,0"}
base_rows=${LISA_ENGINE_BASE_ROWS:-"16,8,1500,256,400;16,1,6700,256,0;8,8,1000,256,300;16,8,600,128,150"}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if [ -z "$model" ]; then
  model=$work/model
  python3 "$root/tests/gpu/make_random_qwen3.py" "$model" --shape 4b >/dev/null
fi
python3 "$here/hw_rates.py" "$out/rates.json"

serve() { # label bindir extra-settings...; sets $url and $pid
  local label=$1 dir=$2
  shift 2
  local lib vis=()
  lib=$(cd "$dir/.." && pwd)/lib
  # one engine per GPU when $gpu is set; otherwise the caller's devices (an
  # empty CUDA_VISIBLE_DEVICES would hide them all)
  [ -n "${gpu:-}" ] && vis=(CUDA_VISIBLE_DEVICES="$gpu")
  env "${vis[@]}" \
  LD_LIBRARY_PATH=$lib:${LD_LIBRARY_PATH:-} "$dir/lisa-trainer" serve \
    --backend cuda --model "$model" --engine-listen 127.0.0.1:0 \
    --out "$work/$label" --broker tcp://127.0.0.1:1 "$@" \
    >"$out/$label.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 1200); do
    [ -s "$work/$label/engine.url" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -s "$work/$label/engine.url" ] || {
    tail -20 "$out/$label.log"
    echo "FAIL: $label engine did not start"
    exit 1
  }
  url=$(cat "$work/$label/engine.url")
}

health() { # url file
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1] + "/healthz", timeout=10).read().decode())' "$1" >"$2" || true
}

load() { # label url[,url...] rows [agent_load options...]
  local label=$1 urls=$2 rws=$3
  shift 3
  python3 "$here/agent_load.py" "$urls" --rows "$rws" --label "$label" \
    --rates "$out/rates.json" --json "$out/$label.json" "$@"
}

gpus=${LISA_ENGINE_GPUS:-1}
if [ "$gpus" -gt 1 ]; then
  urls=()
  for i in $(seq 0 $((gpus - 1))); do
    # shellcheck disable=SC2086
    gpu=$i serve "gpu$i" "$bin" ${LISA_ENGINE_ARGS:-}
    urls+=("$url")
  done
  load one "${urls[0]}" "$rows"
  # other prompts than the first run's, which the first engine caches
  load spread "$(IFS=,; echo "${urls[*]}")" "$rows" --seed 1001
  python3 - "$out/one.json" "$out/spread.json" "$gpus" <<'PY'
import json, sys
one = {r["row"]: r for r in json.load(open(sys.argv[1]))}
spread = json.load(open(sys.argv[2]))
n = int(sys.argv[3])
print(f"\nrow                        1 engine s  {n} engines s  scaling  "
      f"(ideal {n}x)  errors  calls per engine")
for s in spread:
    o = one[s["row"]]
    print(f"{s['row']:26s} {o['wall_s']:10.1f} {s['wall_s']:12.1f} "
          f"{o['wall_s'] / s['wall_s']:8.2f}x {'':12s} "
          f"{o['errors']}/{s['errors']}  {s['calls_per_engine']}")
PY
  echo "results in $out"
  exit 0
fi

# shellcheck disable=SC2086
serve new "$bin" ${LISA_ENGINE_ARGS:-}
load new "$url" "$rows"
health "$url" "$out/new-health.json"
kill "$pid"
wait "$pid" 2>/dev/null || true
if [ -n "$base" ]; then
  # shellcheck disable=SC2086
  serve base "$base" ${LISA_ENGINE_BASE_ARGS:-}
  load base "$url" "$base_rows"
  health "$url" "$out/base-health.json"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  python3 - "$out/new.json" "$out/base.json" <<'PY'
import json, sys
new = {r["row"]: r for r in json.load(open(sys.argv[1]))}
base = {r["row"]: r for r in json.load(open(sys.argv[2]))}
print("\nrow                        new s  base s  speed-up  new/bound  errors new/base")
for k, b in base.items():
    n = new.get(k)
    if not n:
        continue
    print(f"{k:26s} {n['wall_s']:6.1f} {b['wall_s']:7.1f} {b['wall_s'] / n['wall_s']:8.2f}x"
          f" {n['x_bound']:9.2f}x  {n['errors']}/{b['errors']}")
PY
fi
echo "results in $out"
