"""A real Docker engine for the sandbox tests: scripts/docker-up.sh starts
a private dockerd (no bridge, no iptables) under the build tree and
imports the local Debian base image; the sandbox image is then built from
docker/sandbox.Dockerfile on that base. `engine()` returns the socket path,
or a reason why no engine can run here."""
import json
import os
import subprocess

from stacklib import BIN

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.join(os.path.dirname(__file__), "..", "..", ".."))
IMAGE = "lisa-sandbox:test"
BASE = "lisa-base:bookworm"


def _docker(sock, *args, timeout=900, **kw):
    env = dict(os.environ, DOCKER_HOST="unix://" + sock)
    return subprocess.run(["docker", *args], env=env, timeout=timeout,
                          capture_output=True, text=True, **kw)


ENGINE_DIR = os.path.join(os.path.dirname(BIN), "docker-engine")


def engine_running():
    """True when docker-up.sh's pid file names a live dockerd."""
    try:
        with open(os.path.join(ENGINE_DIR, "dockerd.pid")) as f:
            pid = f.read().strip()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"dockerd" in f.read()
    except (OSError, ValueError):
        return False


def engine_stop():
    """Stops the engine docker-up.sh started (by its pid file)."""
    subprocess.run(["bash", os.path.join(SRC, "scripts", "docker-up.sh"),
                    "--dir", ENGINE_DIR, "--stop"], capture_output=True,
                   timeout=60)


def engine():
    """(socket, None) with the sandbox image present, or (None, why)."""
    d = ENGINE_DIR
    try:
        p = subprocess.run(
            ["bash", os.path.join(SRC, "scripts", "docker-up.sh"), "--dir", d,
             "--base", "--print-env"], capture_output=True, text=True,
            timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"docker-up.sh did not finish: {e}"
    if p.returncode != 0:
        return None, ("no Docker engine can be started here (docker-up.sh "
                      f"exit {p.returncode}): {p.stderr.strip()[-500:]}")
    sock = os.path.join(d, "docker.sock")
    if _docker(sock, "image", "inspect", IMAGE).returncode != 0:
        # The Dockerfile starts FROM debian:bookworm-slim; in this private
        # engine that name is the locally made base, so nothing is pulled.
        _docker(sock, "tag", BASE, "debian:bookworm-slim")
        b = _docker(sock, "build", "--network", "host", "-f",
                    os.path.join(SRC, "docker", "sandbox.Dockerfile"),
                    "-t", IMAGE, SRC)
        if b.returncode != 0:
            return None, ("the sandbox image did not build: " +
                          (b.stdout + b.stderr)[-1500:])
    return sock, None


def containers(sock, controller_id):
    """Names of every container (running or not) of this controller."""
    p = _docker(sock, "ps", "-a", "--filter",
                f"label=lisa.controller={controller_id}",
                "--format", "{{json .Names}}", timeout=30)
    return [json.loads(line) for line in p.stdout.split()]


def run_rm_loop(sock, n):
    """`docker run --rm` of the sandbox image n times, one after another
    (the peer the controller's start rate is compared with)."""
    for _ in range(n):
        _docker(sock, "run", "--rm", "--network", "none", "--entrypoint",
                "/bin/true", IMAGE, timeout=120)
