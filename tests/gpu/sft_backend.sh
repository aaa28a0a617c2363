#!/usr/bin/env bash
# lisa-sft's warm start on the CUDA backend against the CPU backend: both
# train the same tiny random Llama-family model (3 layers, hidden 128,
# head_dim 32; lisa-sft --config makes it from the seed, so both start
# from the same weights) for 10 steps on the same arithmetic
# demonstrations (examples/arith/make_arith.py, the byte tokenizer of
# tests/fixtures) with the same batches and learning rate, and the
# script compares what they print: the training loss at steps 1 and 10
# and the held-out NLL at steps 5 and 10 must agree within
# 0.05 + 2% of the CPU's value (the GPU computes in bf16, the CPU in
# fp32), and both must have lowered the loss (so the comparison is not of
# two models that did nothing). Also checks that the GPU's checkpoint has
# its weights and tokenizer files, and prints each backend's time.
#   tests/gpu/sft_backend.sh [BINDIR]
# BINDIR holds the cuda preset's programs (default $LISA_BUILD_DIR/bin,
# else build/cuda/bin; a bundle's bin/, whose lib/ beside it is put on
# LD_LIBRARY_PATH). Needs python3 (its standard library).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-${LISA_BUILD_DIR:-$root/build/cuda}/bin}
[ -x "$bin/lisa-sft" ] || { echo "FAIL: no $bin/lisa-sft" >&2; exit 1; }
if [ -d "$bin/../lib" ]; then
  lib=$(cd "$bin/../lib" && pwd)
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$root/examples/arith/make_arith.py" "$work/data" --train 1 --val 1 \
  --sft 48 --seed 3 >/dev/null
cat >"$work/config.json" <<'JSON'
{"model_type": "llama", "architectures": ["LlamaForCausalLM"],
 "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 3,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
 "vocab_size": 512, "max_position_embeddings": 4096,
 "rms_norm_eps": 1e-5, "rope_theta": 10000, "tie_word_embeddings": true}
JSON
for be in cuda cpu; do
  mkdir -p "$work/$be"
  t0=$(date +%s.%N)
  "$bin/lisa-sft" --backend "$be" --data "$work/data/sft.jsonl" \
    --config "$work/config.json" --tokenizer "$root/tests/fixtures/byte-tokenizer" \
    --out "$work/$be" --steps 10 --batch 4 --lr 3e-3 --window 48 --hold 8 \
    --eval 8 --eval-every 5 --seed 1 --threads 4 >"$work/$be.log" 2>&1 || {
    cat "$work/$be.log"; echo "FAIL: lisa-sft --backend $be"; exit 1; }
  echo "$be: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)") s for 10 steps"
done
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
  [ -s "$work/cuda/$f" ] || { echo "FAIL: the cuda checkpoint has no $f"; exit 1; }
done
python3 - "$work/cuda.log" "$work/cpu.log" <<'PY'
import re, sys
TOL_ABS, TOL_REL = 0.05, 0.02  # the GPU's bf16 against the CPU's fp32

def numbers(path):
    text = open(path).read()
    train = {int(s): float(v) for s, v in
             re.findall(r"^step (\d+) loss ([\d.]+)", text, re.M)}
    held = {int(s): float(v) for s, v in
            re.findall(r"^step (\d+) held-out NLL on \d+: ([\d.]+)", text,
                       re.M)}
    return text, train, held

gt, gtrain, gheld = numbers(sys.argv[1])
ct, ctrain, cheld = numbers(sys.argv[2])
ok = True
for what, g, c in (("loss", gtrain, ctrain), ("held-out NLL", gheld, cheld)):
    if not c or sorted(g) != sorted(c):
        print(f"FAIL: {what} at steps {sorted(g)} (cuda) and {sorted(c)} (cpu)")
        ok = False
        continue
    for s in sorted(c):
        d = abs(g[s] - c[s])
        bad = d > TOL_ABS + TOL_REL * abs(c[s])
        ok = ok and not bad
        print(f"{what} at step {s}: cuda {g[s]:.4f} cpu {c[s]:.4f} "
              f"diff {d:.4f}{'  FAIL' if bad else ''}")
for name, t in (("cuda", gtrain), ("cpu", ctrain)):
    if len(t) < 2 or not t[max(t)] < 0.9 * t[min(t)]:
        print(f"FAIL: {name} did not lower the loss: {t}")
        ok = False
if not ok:
    print(gt)
    print(ct)
    sys.exit(1)
print("1 passed, 0 failed")
PY
