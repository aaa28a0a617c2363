#!/usr/bin/env bash
# Function length check over lisa's own C product code (clang-formatted:
# a definition's name starts a line, its body opens with "{" and closes
# with "}" at the start of a line). Lists every function longer than
# MAX lines (default 150), counted from its name to its closing brace, and
# fails if there is one. Tests, benchmarks and fuzz targets are not
# product code; the trainer's CUDA kernels (.cu) are left to their own
# review.
#   scripts/fnlen.sh [MAX]
set -euo pipefail
cd "$(dirname "$0")/.."
max=${1:-150}
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.c' |
  grep -Ev '^(tests|bench|examples)/|/fuzz')
[ ${#files[@]} -eq 0 ] && exit 0
awk -v max="$max" '
  FNR == 1 { name = ""; start = 0; body = 0 }
  # a definition: an identifier and "(" at the start of a line, not a
  # declaration (";") nor a preprocessor line
  !body && /^[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/ && !/;[ \t]*$/ {
    name = $0; sub(/[ \t]*\(.*/, "", name); start = FNR; next
  }
  !body && start && /^\{/ { body = 1; next }
  !body && start && /;[ \t]*$/ { start = 0 }
  body && /^\}/ {
    n = FNR - start + 1
    if (n > max) { printf "%s:%d: %s is %d lines (max %d)\n", FILENAME, start, name, n, max; bad = 1 }
    body = 0; start = 0
  }
  END { exit bad }
' "${files[@]}"
