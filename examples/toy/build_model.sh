#!/usr/bin/env bash
# Rebuilds the toy model (models/toy/): a 2-layer Qwen3-shaped model with a
# small byte-level BPE tokenizer learned on the toy domain, warm-started by
# supervised fine-tuning on the trajectories of an imperfect demonstrator
# (lisa-toygen --sft: the right command, but its output written to the
# answer file only 40% of the time), rendered with
# the Qwen3 chat template exactly as the gateway renders them.
#
#   examples/toy/build_model.sh [OUT_DIR]     (default: models/toy)
#
# Also rewrites examples/toy/data/{train,val}.json. Needs the test
# environment's Python (scripts/pyenv.sh: tokenizers and transformers) for
# the tokenizer; about 4 minutes on two cores. Its log of the committed
# model is examples/toy/build_model.log.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${1:-models/toy}
bin=${LISA_BUILD_DIR:-$root/build/default}/bin
if [ ! -x "$bin/lisa-sft" ] || [ ! -x "$bin/lisa-toygen" ]; then
  cmake --preset default >/dev/null
  cmake --build --preset default -j "$(nproc)" --target lisa-sft lisa-toygen
fi
py=$(bash scripts/pyenv.sh "$root/build/pyenv")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin/lisa-toygen" --out examples/toy/data --train 256 --val 64 --seed 7
# The tokenizer learns its merges on conversations of every command.
mkdir -p "$tmp/corpus" "$tmp/tok" "$tmp/sft"
"$bin/lisa-toygen" --out "$tmp/corpus" --train 1 --val 1 --sft 2000 \
  --sft-correct 0.25 --seed 11
"$py" examples/toy/make_tokenizer.py "$tmp/corpus/sft.jsonl" "$tmp/tok" \
  --vocab 1024
# The model's vocabulary is the tokenizer's.
"$py" - "$tmp/tok" examples/toy/model_config.json "$tmp/config.json" <<'PY'
import json, sys
n = len(json.load(open(f"{sys.argv[1]}/tokenizer.json"))["model"]["vocab"])
n += len(json.load(open(f"{sys.argv[1]}/tokenizer.json"))["added_tokens"])
cfg = json.load(open(sys.argv[2]))
cfg["vocab_size"] = n
json.dump(cfg, open(sys.argv[3], "w"))
PY
"$bin/lisa-toygen" --out "$tmp/sft" --train 1 --val 1 --sft 4000 \
  --sft-correct 0.4 --seed 7
mkdir -p "$out"
"$bin/lisa-sft" --data "$tmp/sft/sft.jsonl" --out "$out" \
  --config "$tmp/config.json" --tokenizer "$tmp/tok" \
  --steps 300 --batch 8 --lr 4e-3 --window 4096 --full-every 1 \
  --hold 64 --eval 24 --eval-every 100 --seed 1 --threads 2
# Name the special tokens in config.json the way the tokenizer does.
"$py" - "$out" <<'PY'
import json, sys
d = sys.argv[1]
ids = {t["content"]: t["id"] for t in
       json.load(open(f"{d}/tokenizer.json"))["added_tokens"]}
cfg = json.load(open(f"{d}/config.json"))
cfg.update(bos_token_id=None, eos_token_id=ids["<|im_end|>"],
           pad_token_id=ids["<|endoftext|>"])
json.dump(cfg, open(f"{d}/config.json", "w"), indent=2)
PY
