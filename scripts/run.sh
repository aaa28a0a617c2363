#!/usr/bin/env bash
# The main job: a whole lisa training run on this machine.
#
# Builds lisa, then starts the stack on 127.0.0.1 with every file under one
# run folder (runs/local-<time>/): the broker (SQLite store), one reward
# worker, the gateway (TCP port + a unix socket for the sandboxes), the
# controller with the local bubblewrap backend (it starts lisa-agent per
# rollout attempt), and the trainer on CPU (generation engine + GRPO). It
# prints one line per training step, stops everything it started on
# Ctrl+C, on any service's death or when training ends, and draws the
# curves with `lisa plot` (curves.svg, and curves.png where a converter is
# installed). Every service gets a parent-death signal
# (setpriv --pdeathsig KILL), so they end with this script however it
# ends, SIGKILL included; a service that dies is named with its exit
# status and the last lines of its log that are not its configuration.
#
#   scripts/run.sh                                   # the toy run
#   scripts/run.sh --model DIR --train-data FILE --val-data F1,DIR2 \
#       trainer.total_epochs=2 actor_rollout_ref.rollout.n=2
#   scripts/run.sh --recipe llm-in-sandbox --model DIR \
#       --train-data-dir data/instruct_pretrain \
#       --val-data-dir data/math_mini,data/biomed_mini --backend cuda
#
# key=value arguments are trainer settings (docs/trainer-service.md); they
# override the toy defaults below (toy run only) or the recipe's. See
# docs/local-run.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

usage() {
  cat <<'USAGE'
usage: scripts/run.sh [--recipe NAME|FILE] [--model DIR|NAME]
                      [--train-data FILE | --train-data-dir DIRS]
                      [--val-data FILES | --val-data-dir DIRS]
                      [--out DIR] [--no-build] [--steps N] [--check]
                      [--backend cpu|cuda] [--bwrap PATH]
                      [--packages HOSTS] [key=value ...]
  --recipe R         a trainer settings file: examples/recipes/R.conf
                     (llm-in-sandbox: the Agent Lightning example's
                     settings) or a path; key=value arguments override it
  --model DIR|NAME   Hugging Face model directory (default: models/toy),
                     or a published model's name, fetched into the model
                     cache once (smollm2-135m; scripts/fetch-model.sh)
  --train-data FILE  verl train file (default: examples/toy/data/train.json)
  --train-data-dir D comma-separated folders each holding train_verl.json
                     (upstream's layout)
  --val-data FILES   comma-separated files or directories
                     (default: examples/toy/data/val.json; "" for none)
  --val-data-dir D   comma-separated folders each holding test_verl.json
                     (--test-data-dir is the same)
  --out DIR          run folder (default: runs/local-<time>)
  --no-build         use the binaries already in build/default/bin
  --steps N          shorthand for trainer.total_training_steps=N
  --check            check the settings and the data (lisa-trainer check)
                     and exit; starts nothing
  --backend B        trainer backend: cpu (default) or cuda (a build with
                     CUDA; the cuda preset's build/cuda, or LISA_BUILD_DIR)
  --bwrap PATH       the bubblewrap the controller runs (default: bwrap
                     from PATH)
  --packages HOSTS   sandbox.network=packages: the sandboxes' pip and apt
                     reach these hosts (host[:port],...; e.g.
                     pypi.org,files.pythonhosted.org,deb.debian.org) through
                     the gateway's package proxy, and nothing else
  key=value          any trainer setting, e.g. trainer.total_epochs=2
                     actor_rollout_ref.rollout.n=2 data.train_batch_size=4
The toy run's settings (below) apply only to the toy model and toy data;
a recipe, or a model and data of your own, get the recipe's values and
lisa's (verl's) defaults.
USAGE
}

toy_model=models/toy
toy_train=examples/toy/data/train.json
toy_val=examples/toy/data/val.json
model=$toy_model
train=$toy_train
val=$toy_val
model_given=0
train_given=0
val_given=0
recipe=""
check=0
out=""
build=1
backend=cpu
bwrap=bwrap
packages=""
overrides=()
# data_dirs LIST FILE: each folder of the comma-separated LIST joined with
# FILE, comma-separated (upstream's --train-data-dir / --val-data-dir).
data_dirs() {
  local d list="" IFS=,
  for d in $1; do
    [ -n "$d" ] || continue
    d=${d%/}
    if [ ! -f "$d/$2" ]; then
      echo "run.sh: $d/$2 does not exist (a data folder holds $2;" \
        "docs/local-run.md says where the data comes from)" >&2
      exit 1
    fi
    list=${list:+$list,}$d/$2
  done
  [ -n "$list" ] || { echo "run.sh: no folder in '$1'" >&2; exit 2; }
  printf '%s' "$list"
}
while [ $# -gt 0 ]; do
  case "$1" in
    --recipe) recipe=${2:?}; shift 2 ;;
    --model) model=${2:?}; model_given=1; shift 2 ;;
    --train-data) train=${2:?}; train_given=1; shift 2 ;;
    --train-data-dir) train=$(data_dirs "${2:?}" train_verl.json)
      train_given=1; shift 2 ;;
    --val-data) val=${2?}; val_given=1; shift 2 ;;
    --val-data-dir|--test-data-dir) val=$(data_dirs "${2:?}" test_verl.json)
      val_given=1; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --no-build) build=0; shift ;;
    --steps) overrides+=("trainer.total_training_steps=${2:?}"); shift 2 ;;
    --check) check=1; shift ;;
    --backend) backend=${2:?}; shift 2 ;;
    --bwrap) bwrap=${2:?}; shift 2 ;;
    --packages) packages=${2:?}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *=*) overrides+=("$1"); shift ;;
    *) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

recipe_file=""
if [ -n "$recipe" ]; then
  case "$recipe" in
    */*|*.conf) recipe_file=$recipe ;;
    *) recipe_file=examples/recipes/$recipe.conf ;;
  esac
  if [ ! -f "$recipe_file" ]; then
    echo "run.sh: no recipe $recipe_file (recipes: $(cd examples/recipes &&
      ls ./*.conf 2>/dev/null | sed 's|^./||; s|\.conf$||' | tr '\n' ' '))" >&2
    exit 2
  fi
  if [ $train_given = 0 ]; then
    echo "run.sh: --recipe $recipe needs its data: --train-data-dir DIR" \
      "(and --val-data-dir DIRS); see docs/local-run.md" >&2
    exit 2
  fi
  [ $val_given = 1 ] || val=""
fi

# The toy run's settings, sized for the toy task on two CPU cores: only
# for the toy model on the toy data without a recipe. A key given on the
# command line replaces its default.
toy=0
[ -z "$recipe" ] && [ "$model" = "$toy_model" ] && [ "$train" = "$toy_train" ] \
  && toy=1
defaults=()
if [ $toy = 1 ]; then
  defaults=(
    data.train_batch_size=4
    actor_rollout_ref.rollout.n=8
    trainer.total_training_steps=30
    trainer.save_freq=10
    trainer.test_freq=10
    trainer.val_before_train=true
    actor_rollout_ref.rollout.max_turns=4
    actor_rollout_ref.rollout.max_tokens_per_call=96
    actor_rollout_ref.rollout.max_context_tokens=2048
    actor_rollout_ref.rollout.val_kwargs.temperature=1.0
    actor_rollout_ref.rollout.val_kwargs.top_p=1.0
    actor_rollout_ref.actor.optim.lr=3e-4
    actor_rollout_ref.actor.optim.lr_warmup_steps=3
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=8192
    trainer.step_timeout=10m
  )
elif [ $model_given = 0 ] || [ $train_given = 0 ]; then
  echo "run.sh: give both --model and --train-data(-dir) (or neither, for" \
    "the toy run)" >&2
  exit 2
fi
settings=()
for d in "${defaults[@]+"${defaults[@]}"}"; do
  k=${d%%=*}
  given=0
  for o in "${overrides[@]+"${overrides[@]}"}"; do
    [ "${o%%=*}" = "$k" ] && given=1
  done
  [ $given = 1 ] || settings+=("$d")
done
settings+=("${overrides[@]+"${overrides[@]}"}")
config_args=()
[ -n "$recipe_file" ] && config_args=(--config "$recipe_file")
if [ $toy = 1 ]; then
  preset_name="the toy run's"
elif [ -n "$recipe_file" ]; then
  preset_name="recipe $recipe_file"
else
  preset_name="lisa's (verl's) defaults"
fi

# print_settings: what the trainer is given, where each comes from.
print_settings() {
  local kv
  echo "settings: $preset_name, then the command line's"
  if [ -n "$recipe_file" ]; then
    grep -Ev '^[[:space:]]*(#|$)' "$recipe_file" |
      sed 's/[[:space:]]*=[[:space:]]*/=/; s/^[[:space:]]*/  recipe    /'
  fi
  for kv in "${settings[@]+"${settings[@]}"}"; do
    echo "  given     $kv"
  done
  echo "  model     $model"
  echo "  train     $train"
  echo "  val       ${val:-(none)}"
}

case "$backend" in
  cpu) preset=default ;;
  cuda) preset=cuda ;;
  *) echo "run.sh: --backend is cpu or cuda, not '$backend'" >&2; exit 2 ;;
esac
if [ $build = 1 ]; then
  bash scripts/deps.sh
  [ $preset = cuda ] && export PATH=$PATH:/usr/local/cuda/bin
  cmake --preset $preset >/dev/null
  cmake --build --preset $preset -j "$(nproc)"
fi
bin=${LISA_BUILD_DIR:-$root/build/$preset}/bin
missing=()
for b in lisa lisa-broker lisa-reward lisa-gateway lisa-controller lisa-agent \
         lisa-trainer; do
  [ -x "$bin/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "run.sh: not built: ${missing[*]} (in $bin)" >&2
  exit 1
fi
# --model NAME (no slash, no such folder): a published model fetched into
# the model cache and converted once (scripts/fetch-model.sh --list).
if [ ! -e "$model" ] && [ "${model#*/}" = "$model" ]; then
  model=$(LISA_BUILD_DIR=${bin%/bin} bash scripts/fetch-model.sh "$model")
fi
for f in "$model/config.json" ${train//,/ }; do
  [ -e "$f" ] || { echo "run.sh: $f does not exist" >&2; exit 1; }
done
print_settings
if [ $check = 1 ]; then
  val_args=()
  [ -n "$val" ] && val_args=(--val-data "$val")
  exec "$bin/lisa-trainer" check "${config_args[@]+"${config_args[@]}"}" \
    --model "$model" --train-data "$train" "${val_args[@]+"${val_args[@]}"}" \
    --backend "$backend" "${settings[@]+"${settings[@]}"}"
fi

stamp=$(date -u +%Y%m%d-%H%M%S)
run=${out:-runs/local-$stamp}
mkdir -p "$run/logs"
run=$(cd "$run" && pwd)
run_id=local-$stamp
echo "run folder: $run"

pids=()
names=()
stopping=0
stop_failed=0
stop_all() {
  stopping=1
  local i pid st killed
  # Stop in reverse start order: trainer, controller (it removes its
  # sandboxes), gateway, reward worker, broker. A service that ends its
  # stop with an error (a crash on the way out, a sanitizer's report) fails
  # the run: its log says why.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    pid=${pids[$i]}
    if ! kill -0 "$pid" 2>/dev/null; then # ended before (the trainer)
      wait "$pid" 2>/dev/null || true
      continue
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    killed=0
    if kill -0 "$pid" 2>/dev/null; then
      echo "run.sh: ${names[$i]} (pid $pid) ignored TERM; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
      killed=1
    fi
    st=0
    wait "$pid" 2>/dev/null || st=$?
    if [ "$killed" = 0 ] && [ "$st" -ne 0 ] && [ "$st" -ne 143 ]; then
      echo "run.sh: ${names[$i]} (pid $pid) ended with status $st while" \
        "stopping; last lines of its log:" >&2
      grep -v -E '^[^ ]+ [^ ]+ INFO config ' "$run/logs/${names[$i]}.log" |
        tail -n 12 >&2 || true
      stop_failed=1
    fi
  done
  pids=()
  names=()
  if [ -n "${sockdir:-}" ]; then
    rm -rf "$sockdir"
    sockdir=""
  fi
}
interrupted=0
trap 'stop_all' EXIT
trap 'interrupted=1; echo; echo "run.sh: interrupted, stopping"' INT TERM

# A service gets SIGKILL from the kernel when this script is gone without
# stopping it (a trap cannot run on SIGKILL). A clean stop (Ctrl+C, TERM,
# the end of training) is stop_all's, with this script alive. KILL, not
# TERM: a service stopping cleanly would wait on the broker, gone too;
# the broker loses nothing it acknowledged and the sandboxes die with the
# controller.
pdeath=()
if setpriv --help 2>/dev/null | grep -q -- --pdeathsig; then
  pdeath=(setpriv --pdeathsig KILL --)
else
  echo "run.sh: setpriv has no --pdeathsig (util-linux >= 2.33 has):" \
    "services outlive a killed run.sh" >&2
fi

# start NAME CMD...: runs CMD in the background, output in logs/NAME.log.
start() {
  local name=$1
  shift
  "${pdeath[@]}" "$@" >"$run/logs/$name.log" 2>&1 &
  pids+=($!)
  names+=("$name")
}

# died NAME PID: says how a service ended and shows the last lines of its
# log that matter: not its start-up configuration dump.
died() {
  local name=$1 pid=$2 st=0 log=$run/logs/$1.log lines
  wait "$pid" 2>/dev/null || st=$?
  if [ "$st" -gt 128 ]; then
    echo "run.sh: $name (pid $pid) was killed by signal $((st - 128))" \
      "(SIG$(kill -l $((st - 128)) 2>/dev/null || echo '?'))" >&2
  else
    echo "run.sh: $name (pid $pid) exited with status $st" >&2
  fi
  lines=$(grep -v -E '^[^ ]+ [^ ]+ INFO config ' "$log" 2>/dev/null |
    tail -n 20 || true)
  if [ -n "$lines" ]; then
    echo "run.sh: last lines of $log:" >&2
    printf '%s\n' "$lines" >&2
  else
    echo "run.sh: $log holds only its configuration: $name wrote nothing" \
      "after starting (killed from outside, or out of memory?)" >&2
  fi
}

# wait_file PATH SECONDS: waits for a file to appear (a service's ports).
wait_file() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ -s "$1" ] && return 0
    check_alive
    sleep 0.1
  done
  echo "run.sh: $1 did not appear within $2 s" >&2
  exit 1
}

check_alive() {
  local i
  [ "$interrupted" = 0 ] || exit 130
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then
      [ "${names[$i]}" = trainer ] && return 0
      died "${names[$i]}" "${pids[$i]}"
      exit 1
    fi
  done
}

# The attempt-token key the broker signs with and the gateway checks.
umask 077
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$run/token.key"
umask 022
# The bus's keys: a CURVE key pair per role, made for this run; the broker
# admits only these keys and lets each role make only its own requests
# (docs/deploy.md). Each service gets its own secret certificate and the
# broker's public one.
keys=$run/keys
"$bin/lisa" keys "$keys" >/dev/null

start broker "$bin/lisa-broker" --data "$run/broker" \
  --rpc 'tcp://127.0.0.1:*' --spans 'tcp://127.0.0.1:*' \
  --events 'tcp://127.0.0.1:*' --workers 'tcp://127.0.0.1:*' \
  --curve on --curve-cert "$keys/broker.cert_secret" \
  --curve-clients "$keys/clients" \
  --token-key "$run/token.key" --ports-file "$run/broker.ports"
wait_file "$run/broker.ports" 30
port_of() { sed -n "s/^$1=//p" "$run/broker.ports"; }
rpc=$(port_of rpc)
events=$(port_of events)
workers=$(port_of workers)
echo "broker: rpc $rpc, workers $workers"

start reward "$bin/lisa-reward" worker --broker "$workers" --threads 1 \
  --curve-cert "$keys/reward.cert_secret" --broker-cert "$keys/broker.cert"

# The gateway's unix socket lives in a folder of its own under /tmp that
# anyone may traverse: bubblewrap resolves it as the sandboxes' user, and
# the run folder may sit under a private directory.
sockdir=$(mktemp -d "${TMPDIR:-/tmp}/lisa-gw.XXXXXX")
chmod 711 "$sockdir"
sock=$sockdir/gateway.sock
# --packages: the package proxy's socket beside the gateway's (the gateway
# makes it connectable by the sandboxes' users).
proxy_gw=()
proxy_ctl=()
if [ -n "$packages" ]; then
  proxy_gw=(--proxy-unix "$sockdir/proxy.sock" --proxy-allow "$packages")
  proxy_ctl=(--sandbox-network packages --proxy-socket "$sockdir/proxy.sock")
fi
start gateway "$bin/lisa-gateway" --address 127.0.0.1 --port 0 \
  --port-file "$run/gateway.port" --unix "$sock" \
  --broker "$rpc" --events "$events" --token-key "file:$run/token.key" \
  --tokenizer "$model" \
  --curve-cert "$keys/gateway.cert_secret" --broker-cert "$keys/broker.cert" \
  "${proxy_gw[@]+"${proxy_gw[@]}"}"
wait_file "$run/gateway.port" 30
# The agents run as an unprivileged user inside their sandboxes; connecting
# to a unix socket needs write permission on it (every request still needs
# an attempt token).
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
chmod 666 "$sock"
echo "gateway: http://127.0.0.1:$(cat "$run/gateway.port"), $sock"

start controller "$bin/lisa-controller" --backend local \
  --broker-rpc "$rpc" --broker-events "$events" --run-id "$run_id" \
  --gateway-socket "$sock" --state-dir "$run/controller" \
  --agent "$bin/lisa-agent" --bwrap "$bwrap" \
  --curve-cert "$keys/controller.cert_secret" --broker-cert "$keys/broker.cert" \
  "${proxy_ctl[@]+"${proxy_ctl[@]}"}"

val_args=()
[ -n "$val" ] && val_args=(--val-data "$val")
start trainer "$bin/lisa-trainer" train \
  "${config_args[@]+"${config_args[@]}"}" --model "$model" \
  --train-data "$train" "${val_args[@]+"${val_args[@]}"}" --broker "$rpc" \
  --curve-cert "$keys/trainer.cert_secret" --broker-cert "$keys/broker.cert" \
  --engine-listen 127.0.0.1:0 --out "$run/trainer" --backend "$backend" \
  --run-id "$run_id" "${settings[@]+"${settings[@]}"}"
trainer_pid=${pids[${#pids[@]} - 1]}
echo "trainer: pid $trainer_pid (its log lists every setting it uses)"
echo "logs: $run/logs/"
echo "operator: LISA_BROKER=$rpc LISA_CURVE_CERT=$keys/operator.cert_secret" \
  "LISA_BROKER_CERT=$keys/broker.cert $bin/lisa status"

# Progress (scripts/progress.sh): the trainer's step lines, and on a
# terminal the running step's live line redrawn in place.
metrics=$run/trainer/metrics.jsonl
# shellcheck source=scripts/progress.sh
. "$root/scripts/progress.sh"
progress_init "$run/trainer"

rc=0
while [ "$interrupted" = 0 ] && kill -0 "$trainer_pid" 2>/dev/null; do
  check_alive
  progress
  sleep 2 || true
done
if [ "$interrupted" = 1 ]; then
  rc=130
else
  wait "$trainer_pid" || rc=$?
fi
progress
progress_end
stop_all
if [ "$rc" -ne 0 ] && [ "$rc" -ne 130 ]; then
  echo "run.sh: trainer exited with $rc; last lines of its log:" >&2
  grep -v -E '^[^ ]+ [^ ]+ INFO config ' "$run/logs/trainer.log" |
    tail -n 20 >&2 || true
fi
if [ -s "$metrics" ]; then
  # the SVG's path, then the PNG's where a converter made one
  if plots=$("$bin/lisa" plot "$metrics" -o "$run/curves.svg" \
    --title "lisa $run_id"); then
    printf '%s\n' "$plots" | while IFS= read -r f; do echo "plot: $f"; done
  else
    echo "run.sh: lisa plot failed; the metrics are in $metrics" >&2
  fi
fi
if [ "$rc" -eq 0 ] && [ "$stop_failed" = 1 ]; then
  rc=1
fi
exit "$rc"
