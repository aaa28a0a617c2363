#!/usr/bin/env bash
# Function length check over lisa's own C product code (clang-formatted:
# a definition's name starts a line, its body opens with "{" and closes
# with "}" at the start of a line). Lists every function longer than
# MAX lines (default 150), counted from its name to its closing brace, and
# fails if there is one. The trainer's CUDA sources (.cu, .cuh) count too:
# there a kernel's name may stand indented on the line after its
# "__global__ ... __launch_bounds__(...)" prefix. Tests, benchmarks and
# fuzz targets are not product code.
#   scripts/fnlen.sh [MAX]
set -euo pipefail
cd "$(dirname "$0")/.."
max=${1:-150}
mapfile -t files < <(git ls-files --cached --others --exclude-standard \
  '*.c' '*.cu' '*.cuh' |
  grep -Ev '^(tests|bench|examples)/|/fuzz')
[ ${#files[@]} -eq 0 ] && exit 0
awk -v max="$max" '
  FNR == 1 { name = ""; start = 0; body = 0; prev = "" }
  # a definition: an identifier and "(" at the start of a line, not a
  # declaration (";") nor a preprocessor line; in CUDA also indented after
  # a line that opens with the __global__ / __device__ / __launch_bounds__
  # prefixes
  !body && !/;[ \t]*$/ && !/^__launch_bounds__/ &&
      (/^[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/ ||
       (FILENAME ~ /\.cuh?$/ &&
        prev ~ /^((static[ \t]+)?__(global|device)__|__launch_bounds__)/ &&
        /^[ \t]+[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
    name = $0; sub(/^[ \t]+/, "", name); sub(/[ \t]*\(.*/, "", name)
    start = FNR; prev = $0; next
  }
  { prev = $0 }
  !body && start && /^\{/ { body = 1; next }
  !body && start && /;[ \t]*$/ { start = 0 }
  body && /^\}/ {
    n = FNR - start + 1
    if (n > max) { printf "%s:%d: %s is %d lines (max %d)\n", FILENAME, start, name, n, max; bad = 1 }
    body = 0; start = 0
  }
  END { exit bad }
' "${files[@]}"
