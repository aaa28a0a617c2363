#!/usr/bin/env bash
# Regenerates the configuration reference in docs/deploy.md from the
# services' own config tables.
#
#   scripts/gen-config-docs.sh [--check] [BIN_DIR]
#
# BIN_DIR defaults to build/default/bin. For each service binary the
# section is its `--help-markdown` output when the binary has that mode
# (the Markdown writer of lisa_config), else its `--help` output verbatim
# (every service prints --help from its table: flag, environment variable,
# default, help). Binaries that are not built get a line saying so. The
# section lies between the BEGIN/END config-reference markers of
# docs/deploy.md; nothing else in the file changes.
# --check: change nothing; exit 1 when the section is out of date.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
check=0
bin="$root/build/default/bin"
for a in "$@"; do
  case "$a" in
    --check) check=1 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) bin=$a ;;
  esac
done
doc="$root/docs/deploy.md"
begin='<!-- BEGIN config-reference (scripts/gen-config-docs.sh) -->'
end='<!-- END config-reference -->'
grep -qF "$begin" "$doc" && grep -qF "$end" "$doc" || {
  echo "gen-config-docs: $doc has no config-reference markers" >&2
  exit 2
}

section=$(mktemp)
trap 'rm -f "$section" "$section.doc"' EXIT
{
  echo "$begin"
  echo
  for b in lisa-broker lisa-gateway lisa-controller lisa-reward \
    lisa-trainer lisa-agent; do
    echo "### $b"
    echo
    exe="$bin/$b"
    if [ ! -x "$exe" ]; then
      echo "_Not built when this section was generated._"
      echo
      continue
    fi
    if md=$("$exe" --help-markdown 2>/dev/null) && [ -n "$md" ] &&
      case "$md" in '#'* | '|'*) true ;; *) false ;; esac; then
      # Its own headings sit one level below this section's.
      printf '%s\n' "$md" | sed 's/^#/###/'
    else
      echo '```text'
      # Some print usage on stderr.
      { "$exe" --help 2>&1 || true; } | sed 's/[[:space:]]*$//'
      echo '```'
    fi
    echo
  done
  echo "$end"
} >"$section"

awk -v begin="$begin" -v end="$end" -v file="$section" '
  $0 == begin { while ((getline line < file) > 0) print line; skip = 1; next }
  $0 == end { skip = 0; next }
  !skip { print }
' "$doc" >"$section.doc"

if [ "$check" = 1 ]; then
  if ! cmp -s "$doc" "$section.doc"; then
    echo "gen-config-docs: the reference in docs/deploy.md is out of date" \
      "(run scripts/gen-config-docs.sh)" >&2
    diff -u "$doc" "$section.doc" | head -40 >&2 || true
    exit 1
  fi
  exit 0
fi
cp "$section.doc" "$doc"
