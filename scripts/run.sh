#!/usr/bin/env bash
# The main job: set up and run lisa on this machine.
# Until the whole stack is assembled this builds everything and runs a smoke
# check of the binaries that exist.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash scripts/deps.sh
cmake --preset default >/dev/null
cmake --build --preset default -j "$(nproc)"
bin=build/default/bin
"$bin/lisa" version
