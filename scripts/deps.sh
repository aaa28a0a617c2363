#!/usr/bin/env bash
# Install lisa's build and test dependencies from Debian packages.
# Idempotent: when every package is already present it returns in well under
# a second without touching the network.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git ca-certificates
  libzmq3-dev libczmq-dev
  libprotobuf-c-dev protobuf-c-compiler protobuf-compiler
  libcurl4-openssl-dev libmicrohttpd-dev libjansson-dev
  libsqlite3-dev sqlite3 libssl-dev libpcre2-dev libicu-dev libyaml-dev
  libcriterion-dev
  clang clang-format libclang-rt-14-dev
  python3 python3-zmq python3-protobuf python3-venv
  bubblewrap
  nginx librsvg2-bin
  redis-server
)
if [ "${LISA_DEPS_EXTRA:-}" != "" ]; then
  # shellcheck disable=SC2206
  PKGS+=(${LISA_DEPS_EXTRA})
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
