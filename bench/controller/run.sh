#!/usr/bin/env bash
# Controller benchmark (bench_controller.py): local and docker sandboxes
# per second with every service real, the docker figure against a loop of
# `docker run --rm` of the same image, medians of ROUNDS rounds. Run by
# hand, as root (sandboxes drop to an unprivileged uid; the docker engine
# needs root). N_DOCKER=0 skips docker.
# Usage: bench/controller/run.sh [BUILD_DIR] [N_LOCAL] [N_DOCKER] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/default}" && pwd)
py=${LISA_PYTHON:-$build/../pyenv/bin/python}
export LISA_SOURCE_DIR=$root LISA_BINARY_DIR=$build
exec "$py" "$root/bench/controller/bench_controller.py" "${2:-200}" "${3:-20}" "${4:-3}"
