#!/usr/bin/env bash
# clang-format over lisa's own C and CUDA sources.
#   scripts/format.sh          rewrite files in place
#   scripts/format.sh --check  fail (listing files) if any would change
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.c' '*.h' '*.cu' '*.cuh' | grep -v '^tests/fixtures/')
[ ${#files[@]} -eq 0 ] && exit 0
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run --Werror "${files[@]}"
else
  clang-format -i "${files[@]}"
fi
