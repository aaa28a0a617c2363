#!/usr/bin/env bash
# The GPU test suite (needs an NVIDIA GPU, CUDA and NCCL): builds the `cuda`
# preset and runs every GPU test program; with several GPUs it also runs the
# data-parallel test on all of them (up to 8), with one on a communicator
# of one rank.
#   scripts/gpu-test.sh            build, then run
#   scripts/gpu-test.sh --no-build run what build/cuda/bin holds (or the
#                                  folder in LISA_GPU_BIN)
set -euo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
if [ "${1:-}" != "--no-build" ]; then
  bash scripts/deps.sh
  PATH=$PATH:/usr/local/cuda/bin cmake --preset cuda -DLISA_TESTS=OFF >/dev/null
  PATH=$PATH:/usr/local/cuda/bin cmake --build --preset cuda -j "$(nproc)"
fi
bin=${LISA_GPU_BIN:-build/cuda/bin}
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$gpus" -ge 1 ] || { echo "no GPU found"; exit 1; }
pass=0
fail=0
# Each program has LISA_GPU_TEST_TIMEOUT seconds (default 1800): a kernel
# that never finishes fails its program instead of hanging the suite.
run() {
  echo "== $*"
  if timeout "${LISA_GPU_TEST_TIMEOUT:-1800}" "$@"; then
    pass=$((pass + 1))
  else
    echo "FAILED (status $?): $*"
    fail=$((fail + 1))
  fi
}
run "$bin/trn_cuda_kernels_test"
run "$bin/trn_gpu_model_test"
# a 64k-token trajectory: one reduced layer against the CPU reference, then
# the 4B shape with the optimizer offloaded (a few minutes)
run "$bin/trn_gpu_model_test" --long
run "$bin/trn_gpu_gen_test"
if [ -x "$bin/lisa-trainer" ]; then
  run bash tests/gpu/trainer_serve_smoke.sh "$bin" tests/fixtures/qwen3-tiny/tied
fi
if [ -x "$bin/lisa-sft" ]; then
  run bash tests/gpu/sft_backend.sh "$bin"
fi
# One RL step of a Qwen3-4B-shaped model through the whole stack (needs
# torch + transformers to make the random model, bubblewrap, about 45 GB
# of disk for its checkpoint); LISA_GPU_RL_STEP=0 leaves it out.
if [ "${LISA_GPU_RL_STEP:-1}" != 0 ] && [ -x "$bin/lisa-controller" ] &&
   python3 -c 'import transformers' 2>/dev/null; then
  run bash tests/gpu/rl_step.sh "$bin"
fi
if [ "$gpus" -eq 1 ]; then
  # one rank over NCCL: the data-parallel and context-parallel code paths
  # (sharded state, gathers) with a communicator of one
  run "$bin/trn_dist_test" 1
fi
if [ "$gpus" -ge 2 ]; then
  world=$gpus
  [ "$world" -gt 8 ] && world=8
  run "$bin/trn_dist_test" "$world"
  # the same RL step with lisa-trainer launching one rank per GPU
  if [ "${LISA_GPU_RL_STEP:-1}" != 0 ] && [ -x "$bin/lisa-controller" ] &&
     python3 -c 'import transformers' 2>/dev/null; then
    run env LISA_RL_RANKS="$world" bash tests/gpu/rl_step.sh "$bin"
  fi
fi
echo
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
