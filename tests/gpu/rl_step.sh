#!/usr/bin/env bash
# One synchronous RL step with a Qwen3-4B-shaped model (random weights)
# through the whole stack, with the trainer on the GPU: the real broker,
# reward worker, gateway, controller (local bubblewrap sandboxes running
# lisa-agent) and `lisa-trainer --backend cuda`, started by scripts/run.sh
# on the recipe's own records (tests/fixtures/seed-samples) and the real
# Qwen3 tokenizer. Checks the step's metrics: every rollout scored, the
# update applied (policy version 0 -> 1), the engine's sampled log-probs
# consistent with the trainer's recomputation at the same weights, and a
# checkpoint that names the step. A random model earns no reward, so every
# advantage is zero; the small entropy bonus keeps the gradient non-zero.
#   tests/gpu/rl_step.sh BINDIR [MODELDIR]
# BINDIR holds the cuda preset's programs (build/cuda/bin or a bundle's
# bin/). MODELDIR defaults to a fresh 4B-shaped model made by
# tests/gpu/make_random_qwen3.py (needs torch + transformers). Settings:
#   LISA_RL_SHAPE=4b|tiny      shape of the model made here (default 4b)
#   LISA_SANDBOX_LIBDIR=DIR    library folder the agent needs inside the
#                              sandbox (a folder under /usr, which the
#                              sandboxes see read-only)
#   LISA_BWRAP=PATH            bubblewrap to use (default: bwrap on PATH)
#   LISA_RL_WORK=DIR           keep the run folder there (default: a
#                              temporary folder)
#   LISA_RL_RANKS=N            trainer ranks, one GPU each (default 1;
#                              lisa-trainer launches the others itself)
#   LISA_RL_PROMPTS=N          prompts of the step, two rollouts each
#                              (default 2, or one per rank from 3 ranks)
#   LISA_RL_EXTRA="K=V ..."    more run settings (for example
#                              trainer.log_level=debug)
#   LISA_RL_LONG=N             one prompt whose problem statement is N
#                              tokens (e.g. 59000: a 60k-token first turn
#                              that the next turns grow towards 64k), two
#                              rollouts sharing its cached blocks, the
#                              context and micro-batches at 65,536
set -euo pipefail
bin=$(cd "${1:?usage: rl_step.sh BINDIR [MODELDIR]}" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${LISA_RL_WORK:-$(mktemp -d)}
mkdir -p "$work"
trap 'rm -rf "$work/model"' EXIT
model=${2:-}
if [ -z "$model" ]; then
  model=$work/model
  t0=$(date +%s)
  python3 "$root/tests/gpu/make_random_qwen3.py" "$model" \
    --shape "${LISA_RL_SHAPE:-4b}"
  echo "model made in $(($(date +%s) - t0)) s"
fi
if [ -n "${LISA_SANDBOX_LIBDIR:-}" ]; then
  export LISA_CTL_SANDBOX_CMD="LD_LIBRARY_PATH=$LISA_SANDBOX_LIBDIR exec /run/lisa/lisa-agent"
fi
run=$work/run
ranks=${LISA_RL_RANKS:-1}
# with several ranks, micro-batches small enough that each rank gets some
micro=16384
[ "$ranks" -gt 1 ] && micro=2048
# two prompts x two rollouts; from three ranks on one prompt per rank, so
# every rank gets micro-batches and every engine gets calls
prompts=2
[ "$ranks" -gt 2 ] && prompts=$ranks
prompts=${LISA_RL_PROMPTS:-$prompts}
data=$root/tests/fixtures/seed-samples/verl_records_excerpt.json
context=8192
per_call=96
if [ -n "${LISA_RL_LONG:-}" ]; then
  # a record whose statement is LISA_RL_LONG tokens of the real tokenizer
  data=$work/long.json
  python3 - "$root/tests/fixtures/qwen3-tokenizer/tokenizer.json" \
    "$LISA_RL_LONG" "$data" <<'PY'
import json, sys
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
want, words, i = int(sys.argv[2]), [], 0
text = ""
while True:
    chunk = " ".join(f"Entry {i + k} records the value {(i + k) * 7919 % 10007}."
                     for k in range(500))
    i += 500
    if len(tok.encode(text + " " + chunk).ids) > want:
        break
    text = (text + " " + chunk).strip()
while len(tok.encode(text).ids) < want:
    text += f" Entry {i} records the value {i * 7919 % 10007}."
    i += 1
stmt = text + "\n\nWhat is the value of entry 17? Write it to /testbed/answer.txt."
rec = {"prompt": [{"content": "placeholder", "role": "user"}],
       "reward_model": {"ground_truth": str(17 * 7919 % 10007),
                        "style": "llm_in_sandbox"},
       "data_source": "math_mini",
       "extra_info": {"id": "long_0", "domain": "math_mini",
                      "problem_statement": stmt,
                      "ground_truth": str(17 * 7919 % 10007)}}
json.dump([rec], open(sys.argv[3], "w"))
print(f"long record: {len(tok.encode(stmt).ids)} tokens of statement")
PY
  prompts=1
  context=65536
  per_call=256
  micro=65536
fi
t0=$(date +%s)
LISA_BUILD_DIR=$(dirname "$bin") bash "$root/scripts/run.sh" --no-build \
  --backend cuda --bwrap "${LISA_BWRAP:-bwrap}" --model "$model" \
  --train-data "$data" \
  --val-data "" --out "$run" --steps 1 \
  data.train_batch_size="$prompts" actor_rollout_ref.rollout.n=2 \
  actor_rollout_ref.rollout.max_turns=3 \
  actor_rollout_ref.rollout.max_tokens_per_call=$per_call \
  actor_rollout_ref.rollout.max_context_tokens=$context \
  actor_rollout_ref.actor.optim.lr=1e-6 \
  actor_rollout_ref.actor.entropy_coeff=0.001 \
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$micro \
  trainer.n_gpus_per_node="$ranks" \
  trainer.val_before_train=false trainer.save_freq=1 \
  trainer.save_dtype=bf16 trainer.failed_rollouts=zero \
  trainer.step_timeout=8m ${LISA_RL_EXTRA:-}
echo "stack run took $(($(date +%s) - t0)) s"
python3 - "$run" "$ranks" "$prompts" <<'PY'
import json, os, re, sys
run, ranks, prompts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = [json.loads(l) for l in open(os.path.join(run, "trainer", "metrics.jsonl"))]
train = [l for l in lines if l.get("kind") == "train"]
assert len(train) == 1, lines
m = train[0]
show = ["rollouts/total", "rollouts/succeeded", "reward/mean", "batch/sequences",
        "batch/tokens", "batch/response_tokens", "rollout/logp_diff_mean",
        "rollout/logp_diff_max", "actor/grad_norm", "actor/entropy",
        "policy_version", "policy_version_after", "time/rollout_s",
        "time/train_s", "time/step_s"]
for k in show:
    print(f"  {k:28s} {m.get(k)}")
assert m["rollouts/total"] == 2 * prompts, m
assert m["batch/sequences"] >= 2 * prompts and m["batch/response_tokens"] > 0, m
assert m.get("update/skipped") == 0, m
assert m["policy_version"] == 0 and m["policy_version_after"] == 1, m
# bf16 engine vs bf16 training forward over the same weights
assert m["rollout/logp_diff_mean"] < 0.05, m
assert m["actor/grad_norm"] > 0, m
ck = os.path.join(run, "trainer", "global_step_1")
assert os.path.isdir(ck), os.listdir(os.path.join(run, "trainer"))
if ranks > 1:
    log = open(os.path.join(run, "logs", "trainer.log")).read()
    assert f"group: all {ranks} ranks joined" in log, log[-3000:]
    for r in range(1, ranks):
        assert f"train: done (rank {r})" in log, log[-3000:]
    served = re.findall(r"engine: (\S+) stopped after (\d+) requests", log)
    print("  engines (id, requests):", served)
    assert len(served) == ranks, served
    assert all(int(n) > 0 for _, n in served), served
    assert m["actor/micro_batches"] >= ranks, m
if os.environ.get("LISA_RL_LONG"):
    # the longest trajectory trained, and the second sample's prompt from
    # the first one's cached blocks
    assert m["batch/tokens"] >= 2 * int(os.environ["LISA_RL_LONG"]), m
    assert m.get("engine/cached_tokens", 0) >= int(os.environ["LISA_RL_LONG"]), m
    print(f"  long: {m['batch/tokens']} tokens trained, "
          f"{m.get('engine/cached_tokens')} prompt tokens from the cache")
print("1 passed, 0 failed")
PY
