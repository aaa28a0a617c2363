#!/usr/bin/env bash
# Brings lisa up on Kubernetes, runs one training, and cleans up on exit or
# Ctrl+C.
#
#   scripts/k8s-launch.sh [--overlay local|production|multinode]
#                         [--recreate] [--no-build] [--keep] [--timeout S]
#
# local (default): a minikube cluster (started if it is not running;
#   deleted and made anew with --recreate), images built into the node
#   (`minikube image build`), the model folder mounted from the host at
#   /lisa-models on the node, the toy CPU training run.
# production / multinode: the current kubectl context; images must already
#   be in the registry the overlay names, and the lisa-models claim must
#   hold policy/ (Hugging Face folder) and data/train_verl.json.
#
# Steps: cleanup trap (EXIT, INT, TERM) -> cluster -> images -> the
# token-key Secret -> the bus's key Secrets -> services (everything but the trainer) -> wait for
# them to be ready -> the trainer Job -> follow it until Complete or
# Failed (or --timeout) -> cleanup: the trainer and sandbox Jobs are
# deleted, the mount is stopped, and for local the namespace too unless
# --keep.
#
# Environment: LISA_MODEL_DIR, LISA_TOKENIZER_DIR, LISA_TRAIN_DATA (local:
# what goes under /lisa-models; defaults: the toy fixtures),
# LISA_TOKEN_KEY_FILE (hex key; default: a new random one),
# LISA_KEYS_DIR (a CURVE key set from `lisa keys DIR`; default: the
# namespace's key Secrets when they exist, else a new set made with the
# `lisa` of LISA_BUILD_DIR (build/default) or PATH),
# MINIKUBE_CPUS / MINIKUBE_MEMORY (local; default 4 / 8192).
# Exit status: 0 the training Job completed; 1 it failed or timed out;
# 2 usage or a missing tool.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

overlay=local
recreate=0
build=1
keep=0
timeout_s=3600
while [ $# -gt 0 ]; do
  case "$1" in
    --overlay) overlay=$2; shift 2 ;;
    --recreate) recreate=1; shift ;;
    --no-build) build=0; shift ;;
    --keep) keep=1; shift ;;
    --timeout) timeout_s=$2; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "k8s-launch: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case "$overlay" in
  local) ns=lisa-local ;;
  production|multinode) ns=lisa ;;
  *) echo "k8s-launch: unknown overlay '$overlay'" >&2; exit 2 ;;
esac
dir="k8s/overlays/$overlay"

say() { printf 'k8s-launch: %s\n' "$*" >&2; }
need() {
  command -v "$1" >/dev/null 2>&1 || { say "$1 is not installed"; exit 2; }
}
need kubectl
[ "$overlay" = local ] && need minikube
kc() { kubectl -n "$ns" "$@"; }

work=$(mktemp -d)
mount_pid=""
logs_pid=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  say "cleaning up"
  if [ -n "$logs_pid" ]; then kill "$logs_pid" 2>/dev/null || true; fi
  kc delete job lisa-trainer --ignore-not-found --wait=false \
    >/dev/null 2>&1 || true
  # Sandbox Jobs and their pods (the API orphans pods unless told).
  kc delete jobs -l app.kubernetes.io/managed-by=lisa \
    --cascade=background --ignore-not-found --wait=false >/dev/null 2>&1 ||
    true
  if [ "$overlay" = local ] && [ "$keep" = 0 ]; then
    kubectl delete namespace "$ns" --ignore-not-found --wait=false \
      >/dev/null 2>&1 || true
  fi
  if [ -n "$mount_pid" ]; then kill "$mount_pid" 2>/dev/null || true; fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# 1. The cluster.
if [ "$overlay" = local ]; then
  if [ "$recreate" = 1 ]; then
    minikube delete >/dev/null 2>&1 || true
  fi
  if ! minikube status >/dev/null 2>&1; then
    say "starting minikube"
    minikube start --cpus="${MINIKUBE_CPUS:-4}" \
      --memory="${MINIKUBE_MEMORY:-8192}" --driver=docker
  fi
fi

# 2. Images.
if [ "$overlay" = local ] && [ "$build" = 1 ]; then
  say "building lisa:dev and lisa-sandbox:dev in the node"
  minikube image build -t lisa:dev -f docker/lisa.Dockerfile .
  minikube image build -t lisa-sandbox:dev -f docker/sandbox.Dockerfile .
fi

# 3. Models (local): policy/ and data/ under one folder, mounted at
#    /lisa-models on the node for as long as this script runs.
if [ "$overlay" = local ]; then
  model=${LISA_MODEL_DIR:-tests/fixtures/qwen3-tiny/tied}
  tok=${LISA_TOKENIZER_DIR:-tests/fixtures/byte-tokenizer}
  data=${LISA_TRAIN_DATA:-tests/fixtures/seed-samples/verl_records_excerpt.json}
  [ -f "$model/config.json" ] ||
    { say "no model at '$model' (set LISA_MODEL_DIR)"; exit 2; }
  [ -f "$tok/tokenizer.json" ] ||
    { say "no tokenizer.json in '$tok' (set LISA_TOKENIZER_DIR)"; exit 2; }
  [ -f "$data" ] || { say "no training data '$data' (set LISA_TRAIN_DATA)"; exit 2; }
  models="$work/models"
  mkdir -p "$models/policy" "$models/data"
  cp -r "$model/." "$models/policy/"
  cp "$tok"/tokenizer*.json "$models/policy/"
  cp "$data" "$models/data/train_verl.json"
  chmod -R a+rX "$models"
  minikube mount "$models:/lisa-models" >"$work/mount.log" 2>&1 &
  mount_pid=$!
fi

# 4. Namespace and the attempt-token key.
if [ "$overlay" = local ]; then
  kubectl apply -f k8s/overlays/local/namespace.yaml >/dev/null
else
  kubectl apply -f k8s/overlays/production/services/namespace.yaml >/dev/null
fi
key=${LISA_TOKEN_KEY_FILE:-}
if [ -z "$key" ]; then
  key="$work/token.key"
  od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$key"
fi
kc create secret generic lisa-token-key --from-file=key="$key" \
  --dry-run=client -o yaml | kc apply -f - >/dev/null

# 4b. The bus's CURVE keys (docs/deploy.md): one Secret per role with its
#     secret certificate and the broker's public one; the broker's pair;
#     the public certificates the broker admits. Kept across launches (the
#     running services hold them) unless LISA_KEYS_DIR names a set.
keys=${LISA_KEYS_DIR:-}
if [ -n "$keys" ] || ! kc get secret lisa-curve-broker >/dev/null 2>&1; then
  if [ -z "$keys" ]; then
    lisa_bin=${LISA_BUILD_DIR:-build/default}/bin/lisa
    [ -x "$lisa_bin" ] || lisa_bin=$(command -v lisa || true)
    [ -n "$lisa_bin" ] ||
      { say "no lisa binary to make the bus's keys (build lisa, or set LISA_KEYS_DIR)"; exit 2; }
    keys="$work/keys"
    "$lisa_bin" keys "$keys" >/dev/null
  fi
  secret() {
    kc create secret generic "$@" --dry-run=client -o yaml |
      kc apply -f - >/dev/null
  }
  secret lisa-curve-broker --from-file="$keys/broker.cert_secret"
  secret lisa-curve-clients --from-file="$keys/clients"
  for role in controller gateway trainer reward operator; do
    secret "lisa-curve-$role" --from-file="$keys/$role.cert_secret" \
      --from-file="$keys/broker.cert"
  done
fi

# 5. Services (everything but the trainer), then wait for them.
say "applying $dir (services)"
kubectl apply -k "$dir" -l 'app.kubernetes.io/component!=trainer' \
  >/dev/null
kc rollout status statefulset/lisa-broker --timeout=300s
for d in lisa-gateway lisa-reward lisa-controller; do
  kc rollout status "deployment/$d" --timeout=300s
done

# 6. Train.
say "starting the trainer"
kubectl apply -k "$dir" >/dev/null
kc wait --for=condition=Ready pod -l app.kubernetes.io/name=lisa-trainer \
  --timeout=600s >/dev/null 2>&1 || true
kc logs -f job/lisa-trainer --all-containers --prefix >&2 &
logs_pid=$!
end=$((SECONDS + timeout_s))
while :; do
  done_=$(kc get job lisa-trainer \
    -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}')
  case " $done_ " in
    *" Complete "*) say "training completed"; exit 0 ;;
    *" Failed "*)
      say "training failed: $(kc get job lisa-trainer \
        -o jsonpath='{.status.conditions[?(@.type=="Failed")].message}')"
      exit 1 ;;
  esac
  if [ "$SECONDS" -ge "$end" ]; then
    say "training did not finish within ${timeout_s} s"
    exit 1
  fi
  sleep 5
done
