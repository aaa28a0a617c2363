#!/usr/bin/env bash
# Starts a private Docker engine for lisa's container tests, and makes the
# local base image the images build FROM when no registry is reachable.
#
#   scripts/docker-up.sh [--dir DIR] [--base] [--stop] [--print-env]
#
#   --dir DIR   engine folder (default build/docker-engine): data root,
#               exec root, socket DIR/docker.sock, pid file DIR/dockerd.pid,
#               log DIR/dockerd.log
#   --base      also make the base image lisa-base:bookworm (debootstrap of
#               Debian 12 minbase + `docker import`; the root-file-system
#               tarball is cached as build/docker-base/bookworm-minbase-slim.tar)
#   --stop      stop the engine this folder's pid file names, unmount what
#               it left mounted under DIR, and exit
#   --print-env print `DOCKER_HOST=...` on stdout once the engine answers
#
# The engine runs without a bridge and without iptables
# (`dockerd --bridge=none --iptables=false`), so every container uses host
# networking; it is started only when the pid file does not name a live
# dockerd already. Installs docker.io, debootstrap and docker-compose from
# Debian when they are missing (these are not part of scripts/deps.sh: only
# the container tests need them).
# Exit status: 0 engine up (and base image present with --base); 3 the
# engine could not start here (the message says why); other: error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/build/docker-engine"
want_base=0
stop=0
print_env=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift 2 ;;
    --base) want_base=1; shift ;;
    --stop) stop=1; shift ;;
    --print-env) print_env=1; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "docker-up: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"
log="$dir/dockerd.log"
export DOCKER_HOST="unix://$sock"

say() { echo "docker-up: $*" >&2; }

s_alive() { # true when the pid file names a live dockerd
  [ -f "$pidfile" ] || return 1
  local pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  [ -n "$pid" ] && [ -d "/proc/$pid" ] &&
    grep -q dockerd "/proc/$pid/cmdline" 2>/dev/null
}

if [ "$stop" = 1 ]; then
  if s_alive; then
    pid=$(cat "$pidfile")
    say "stopping dockerd (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 1 100); do
      [ -d "/proc/$pid" ] || break
      sleep 0.2
    done
    if [ -d "/proc/$pid" ]; then
      say "dockerd $pid did not stop in 20 s; killing it"
      kill -KILL "$pid" || true
    fi
  fi
  rm -f "$pidfile"
  # What the engine left mounted under its folder (network namespaces
  # under the exec root, overlay layers), deepest first.
  awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo |
    sort -r | while read -r m; do
      umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null ||
        say "cannot unmount $m"
    done
  exit 0
fi

s_install() { # installs the Debian packages the container tests need
  local pkgs=(docker.io debootstrap docker-compose) missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
      grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null
}

# The engine's own daemon lives in /usr/sbin (docker.io); the client may be
# any docker CLI on PATH.
s_install
dockerd_bin=$(command -v dockerd || echo /usr/sbin/dockerd)
if [ ! -x "$dockerd_bin" ]; then
  say "dockerd is not installed"
  exit 3
fi
if [ "$(id -u)" != 0 ]; then
  say "dockerd needs root here (no rootless setup); not starting it"
  exit 3
fi

if ! s_alive; then
  rm -f "$pidfile" "$sock"
  mkdir -p "$dir/data" "$dir/exec"
  say "starting dockerd in $dir"
  # setsid: the engine outlives this script; it is stopped by PID with
  # --stop (the tests do that in their teardown).
  setsid "$dockerd_bin" \
    --bridge=none --iptables=false --ip6tables=false --ip-masq=false \
    --data-root "$dir/data" --exec-root "$dir/exec" \
    --host "unix://$sock" --pidfile "$pidfile" \
    --containerd-namespace lisa --containerd-plugins-namespace lisa-plugins \
    --log-level warn </dev/null >"$log" 2>&1 &
  started=$!
  for _ in $(seq 1 150); do
    if docker version >/dev/null 2>&1; then break; fi
    if ! [ -d "/proc/$started" ]; then
      say "dockerd exited at start; last lines of $log:"
      tail -n 15 "$log" >&2
      rm -f "$pidfile"
      exit 3
    fi
    sleep 0.2
  done
  if ! docker version >/dev/null 2>&1; then
    say "dockerd did not answer within 30 s; last lines of $log:"
    tail -n 15 "$log" >&2
    kill -TERM "$started" 2>/dev/null || true
    exit 3
  fi
fi

if [ "$want_base" = 1 ] &&
  ! docker image inspect lisa-base:bookworm >/dev/null 2>&1; then
  cache="$root/build/docker-base"
  tarball="$cache/bookworm-minbase-slim.tar"
  mkdir -p "$cache"
  if [ ! -s "$tarball" ]; then
    mirror=${LISA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
    rootfs="$cache/rootfs"
    rm -rf "$rootfs"
    say "debootstrap bookworm (minbase) from $mirror"
    if ! debootstrap --variant=minbase bookworm "$rootfs" "$mirror" \
      >"$cache/debootstrap.log" 2>&1; then
      say "debootstrap failed; last lines of $cache/debootstrap.log:"
      tail -n 15 "$cache/debootstrap.log" >&2
      exit 1
    fi
    # Same shape as the slim images: no apt lists, no docs, no man pages,
    # no translations, and dpkg told to leave them out of later installs.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb \
      "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* \
      "$rootfs"/usr/share/locale/* "$rootfs"/usr/share/info/*
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/lisa-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
    tar -C "$rootfs" --numeric-owner -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  say "importing lisa-base:bookworm"
  docker import --change 'CMD ["/bin/bash"]' "$tarball" lisa-base:bookworm \
    >/dev/null
fi

if [ "$print_env" = 1 ]; then
  echo "DOCKER_HOST=$DOCKER_HOST"
fi
