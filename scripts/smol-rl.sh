#!/usr/bin/env bash
# A pretrained model learns through the whole stack: SmolLM2-135M-Instruct
# (or another small chat model) on arithmetic word problems.
#
#   scripts/smol-rl.sh --model FILE.gguf|DIR [--backend cpu|cuda]
#                      [--out DIR] [--steps N] [--sft-steps N]
#                      [--val-problems N] [--sft-data FILE] [--gpu]
#                      [key=value ...]
#
# 1. A GGUF file is converted once (`lisa convert`, F32) into OUT/model.
# 2. Warm start: lisa-sft --backend BACKEND (the trainer's backend, so
#    --gpu trains it on the GPU) on examples/arith/data/sft.jsonl,
#    conversations of lisa-agent on bare arithmetic questions ("What is
#    37 + 55?") answered by one execute_bash call in which bash computes
#    the expression (`echo $((37 + 55)) > /testbed/answer.txt`), then
#    submit: they teach the tool-call format, the answer file and bash
#    arithmetic, not which operation a word problem asks for nor which of
#    its numbers to use, which RL has to learn from the reward
#    (--sft-steps 0 skips it; --sft-data FILE trains on other
#    demonstrations, e.g. make_arith.py's --sft-family lookup|count|mix).
# 3. scripts/run.sh --no-build with the warm-started model on
#    examples/arith/data/train.json, validating on the held-out problems
#    of val.json (the first --val-problems of its 64) before training,
#    every few steps and after the last: the broker, a reward worker (math rule), the gateway, the
#    controller with local bubblewrap sandboxes running lisa-agent, and
#    the trainer (GRPO).
# 4. Prints the validation reward of each evaluation, the training reward
#    of each step (and its standard deviation over steps) and the times;
#    the curve is OUT/run/curves.svg (run.sh's `lisa plot`), the metrics
#    OUT/run/trainer/metrics.jsonl and the TensorBoard events
#    OUT/run/trainer/tensorboard.
#
# The default sizes are the short CPU run's (a warm start of 20 steps x 4
# conversations, 2 prompts x 4 rollouts, 4 steps, 16 validation problems;
# docs/local-run.md says what two shared cores manage); --gpu picks the GPU
# machine's (a warm start of 20 steps x 8, 16 prompts x 8 rollouts a step,
# 40 steps, all 64 validation problems) and implies --backend cuda. The warm
# start runs on the same backend as the trainer. Programs come from
# LISA_BUILD_DIR/bin (default build/default, or build/cuda with --backend
# cuda), so a bundle of prebuilt programs (scripts/gpu-bundle.sh) runs it
# with LISA_BUILD_DIR=BUNDLE; nothing is built or downloaded here.
# LISA_BWRAP=PATH names the bubblewrap to use (default: bwrap on PATH),
# LISA_SANDBOX_LIBDIR=DIR a library folder the agent needs inside its
# sandbox (a folder under /usr; as tests/gpu/rl_step.sh). key=value
# arguments are trainer settings and override the ones below. Needs python3
# (its standard library) for the validation subset and the summary.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

model=""
backend=cpu
out=""
steps=""
sft_steps=""
val_n=""
sft_data=""
gpu=0
overrides=()
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model=${2:?}; shift 2 ;;
    --backend) backend=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --steps) steps=${2:?}; shift 2 ;;
    --sft-steps) sft_steps=${2:?}; shift 2 ;;
    --val-problems) val_n=${2:?}; shift 2 ;;
    --sft-data) sft_data=${2:?}; shift 2 ;;
    --gpu) gpu=1; backend=cuda; shift ;;
    -h|--help) usage; exit 0 ;;
    *=*) overrides+=("$1"); shift ;;
    *) echo "smol-rl.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "smol-rl.sh: --model FILE.gguf|DIR is needed" >&2
  exit 2; }
command -v python3 >/dev/null || { echo "smol-rl.sh: needs python3" >&2
  exit 1; }
[ -e "$model" ] || { echo "smol-rl.sh: $model does not exist" >&2; exit 1; }
case "$backend" in
  cpu) preset=default ;;
  cuda) preset=cuda ;;
  *) echo "smol-rl.sh: --backend is cpu or cuda" >&2; exit 2 ;;
esac
export LISA_BUILD_DIR=${LISA_BUILD_DIR:-$root/build/$preset}
bin=$LISA_BUILD_DIR/bin
for b in lisa lisa-sft lisa-trainer; do
  [ -x "$bin/$b" ] || { echo "smol-rl.sh: $bin/$b is not built" \
    "(cmake --build --preset $preset, or LISA_BUILD_DIR=BUNDLE)" >&2; exit 1; }
done
data=$root/examples/arith/data
sft_data=${sft_data:-$data/sft.jsonl}
[ -f "$sft_data" ] || { echo "smol-rl.sh: $sft_data does not exist" >&2
  exit 1; }
# Warm-start steps: on the CPU, 8 of 10 steps of 4 took the held-out NLL
# of the expr demonstrations to 0.11 (token accuracy 0.97) but left the
# tool's name unsure (p 0.07 for "execute" after `{"name": "`; greedy
# decoding named another tool on every word problem tried); 20 steps,
# whose schedule reaches the full lr, gave execute_bash with an expression
# of the problem's numbers on 10 of 12 (the operation right on 4): room
# for RL. On the GPU (batches twice as big) 20 steps of 8 were measured
# before a run whose validation reward rose from 0.36 to 1.00.
if [ $gpu = 1 ]; then
  sft_steps=${sft_steps:-20} sft_batch=8 val_n=${val_n:-64}
else
  sft_steps=${sft_steps:-20} sft_batch=4 val_n=${val_n:-16}
fi
out=${out:-runs/smol-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
threads=$(nproc)
t_start=$(date +%s)

# 1. the model as a directory (the gateway reads its tokenizer there)
if [ -f "$model" ]; then
  if [ ! -f "$out/model/config.json" ]; then
    "$bin/lisa" convert "$model" "$out/model" --dtype f32
  fi
  model=$out/model
fi

# 2. the warm start on the format
if [ "$sft_steps" -gt 0 ]; then
  if [ ! -f "$out/sft/config.json" ]; then
    t0=$(date +%s)
    mkdir -p "$out/sft"
    # --window 64: the system prompt and tools block (about 300 tokens,
    # the same in every conversation) are cut from the training sequences
    "$bin/lisa-sft" --backend "$backend" --data "$sft_data" \
      --model "$model" \
      --out "$out/sft" --steps "$sft_steps" --batch "$sft_batch" --lr 2e-4 \
      --window 64 --hold 16 --eval 8 --eval-every "$sft_steps" --seed 1 \
      --threads "$threads" 2>&1 | tee "$out/sft.log"
    echo "warm start: $(($(date +%s) - t0)) s"
  fi
  model=$out/sft
fi

# 3. RL through the whole stack, validating on the first val_n problems
python3 - "$data/val.json" "$val_n" "$out/val.json" <<'PY'
import json, sys
recs = json.load(open(sys.argv[1]))
n = int(sys.argv[2])
if not 1 <= n <= len(recs):
    sys.exit(f"smol-rl.sh: --val-problems is 1..{len(recs)}")
json.dump(recs[:n], open(sys.argv[3], "w"), indent=1)
PY
if [ $gpu = 1 ]; then
  sizes=(data.train_batch_size=16 actor_rollout_ref.rollout.n=8
    trainer.total_training_steps="${steps:-40}" trainer.test_freq=10)
else
  sizes=(data.train_batch_size=2 actor_rollout_ref.rollout.n=4
    trainer.total_training_steps="${steps:-4}" trainer.test_freq=4)
fi
settings=(
  "${sizes[@]}"
  trainer.val_before_train=true
  trainer.total_epochs=10
  trainer.save_freq=0
  "trainer.logger=[console,tensorboard]"
  algorithm.adv_estimator=grpo
  actor_rollout_ref.rollout.max_turns=4
  actor_rollout_ref.rollout.max_tokens_per_call=64
  actor_rollout_ref.rollout.max_context_tokens=1024
  actor_rollout_ref.rollout.temperature=1.0
  actor_rollout_ref.rollout.val_kwargs.temperature=0
  actor_rollout_ref.actor.optim.lr=1e-5
  actor_rollout_ref.actor.optim.lr_warmup_steps=2
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
  actor_rollout_ref.actor.use_kl_loss=false
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192
  trainer.failed_rollouts=zero
  trainer.step_timeout=10m
)
if [ -n "${LISA_SANDBOX_LIBDIR:-}" ]; then
  export LISA_CTL_SANDBOX_CMD="LD_LIBRARY_PATH=$LISA_SANDBOX_LIBDIR exec /run/lisa/lisa-agent"
fi
t0=$(date +%s)
rc=0
bash "$root/scripts/run.sh" --no-build --backend "$backend" --model "$model" \
  --bwrap "${LISA_BWRAP:-bwrap}" \
  --train-data "$data/train.json" --val-data "$out/val.json" \
  --out "$out/run" "${settings[@]}" "${overrides[@]+"${overrides[@]}"}" || rc=$?
t_rl=$(($(date +%s) - t0))

# 4. the summary
metrics=$out/run/trainer/metrics.jsonl
if [ -s "$metrics" ]; then
  python3 - "$metrics" <<'PY' | tee "$out/summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
val = [r for r in rows if r.get("kind") == "val"]
train = [r for r in rows if r.get("kind") == "train"]
for r in val:
    print(f"validation at step {r.get('step', 0):3}: reward "
          f"{r.get('val/reward/mean', r.get('val/reward', float('nan'))):.3f} "
          f"({r.get('val/rollouts', '?')} problems)")
rw = [r.get("reward/mean", float("nan")) for r in train]
print("training reward by step:", " ".join(f"{x:.2f}" for x in rw))
if len(rw) > 1:
    d = [b - a for a, b in zip(rw, rw[1:])]
    print(f"training reward: std over steps {statistics.pstdev(rw):.3f}, "
          f"std of step-to-step changes {statistics.pstdev(d):.3f}")
if train:
    print(f"step time: mean {statistics.mean(r.get('time/step_s', 0) for r in train):.1f} s")
PY
fi
echo "RL run: ${t_rl} s; everything: $(($(date +%s) - t_start)) s; in $out"
exit "$rc"
