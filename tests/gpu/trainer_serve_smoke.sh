#!/usr/bin/env bash
# The trainer service on the CUDA backend, end to end over HTTP: starts
# `lisa-trainer serve --backend cuda` and `--backend cpu` on the same tiny
# model, asks both for greedy completions of the same token-id prompt, and
# checks the engine's answer shape and that the two backends agree on the
# first tokens and their log-probabilities (bf16 vs fp32).
#   tests/gpu/trainer_serve_smoke.sh BINDIR MODELDIR
set -euo pipefail
bin=${1:?usage: trainer_serve_smoke.sh BINDIR MODELDIR}
model=${2:?usage: trainer_serve_smoke.sh BINDIR MODELDIR}
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for be in cuda cpu; do
  "$bin/lisa-trainer" serve --backend "$be" --model "$model" \
    --engine-listen 127.0.0.1:0 --out "$work/$be" \
    --broker tcp://127.0.0.1:1 >"$work/$be.log" 2>&1 &
  pids+=($!)
done
for be in cuda cpu; do
  for _ in $(seq 1 300); do
    [ -s "$work/$be/engine.url" ] && break
    sleep 0.1
  done
  [ -s "$work/$be/engine.url" ] || { cat "$work/$be.log"; echo "FAIL: $be engine did not start"; exit 1; }
done
body='{"prompt": [1, 5, 9, 200, 31, 7, 64, 3], "max_tokens": 8, "temperature": 0, "logprobs": 1}'
for be in cuda cpu; do
  url=$(cat "$work/$be/engine.url")
  python3 - "$url/v1/completions" "$body" >"$work/$be.json" <<'PY'
import sys, urllib.request
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(),
                             headers={"Content-Type": "application/json"})
sys.stdout.write(urllib.request.urlopen(req, timeout=60).read().decode())
PY
done
python3 - "$work/cuda.json" "$work/cpu.json" <<'PY'
import json, sys
g, c = (json.load(open(p)) for p in sys.argv[1:3])
cg, cc = g["choices"][0], c["choices"][0]
assert len(cg["token_ids"]) == len(cg["logprobs"]["token_logprobs"]) > 0, g
assert cg["finish_reason"] in ("stop", "length"), g
assert "policy_version" in g or "policy_version" in cg, g
same = 0
for a, b in zip(cg["token_ids"], cc["token_ids"]):
    if a != b:
        break
    same += 1
assert same >= 1, (cg["token_ids"], cc["token_ids"])
d = abs(cg["logprobs"]["token_logprobs"][0] - cc["logprobs"]["token_logprobs"][0])
assert d < 0.05, d
print(f"cuda {cg['token_ids']} cpu {cc['token_ids']}: {same} leading tokens agree, first logprob diff {d:.2e}")
print("1 passed, 0 failed")
PY
