#!/usr/bin/env bash
# Creates (or reuses) the Python environment the test suite uses for its
# reference implementations (tokenizers, transformers, math-verify, ...).
# The product itself never needs Python packages from PyPI.
# Usage: scripts/pyenv.sh DIR   -> prints the environment's python path.
set -euo pipefail
dir=${1:?usage: pyenv.sh DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
req="$root/tests/requirements.txt"
stamp="$dir/.req-stamp"
if [ ! -x "$dir/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$dir" >&2
fi
if [ ! -f "$stamp" ] || ! cmp -s "$req" "$stamp"; then
  "$dir/bin/python" -m pip install -q --disable-pip-version-check \
    -r "$req" >&2
  # lm-eval's IFEval checkers are the instruction-following oracle; the
  # package pulls torch, which the checkers do not need: installed alone
  "$dir/bin/python" -m pip install -q --disable-pip-version-check \
    --no-deps lm-eval==0.4.9 >&2
  cp "$req" "$stamp"
fi
echo "$dir/bin/python"
