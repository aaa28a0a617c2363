"""A real Docker engine for the sandbox tests: scripts/docker-up.sh starts
a private dockerd (no bridge, no iptables) in build/docker-engine, the
engine the compose test uses, and imports the local Debian base image; the
sandbox image is then this build tree's lisa-agent on the runtime stage of
docker/sandbox.Dockerfile (docker/sandbox-prebuilt.Dockerfile), the stage
the compose test builds too, so that each reuses the other's layers.
`engine()` returns the socket path, or a reason why no engine can run
here."""
import json
import os
import shutil
import subprocess
import tempfile

from stacklib import AGENT

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.join(os.path.dirname(__file__), "..", "..", ".."))
IMAGE = "lisa-sandbox:test"
RUNTIME = "lisa-sandbox-runtime:e2e"  # the compose test's tag
BASE = "lisa-base:bookworm"
SKIP_ENV = "LISA_SKIP_DOCKER_TESTS"


def _docker(sock, *args, timeout=900, **kw):
    env = dict(os.environ, DOCKER_HOST="unix://" + sock, DOCKER_BUILDKIT="0")
    return subprocess.run(["docker", *args], env=env, timeout=timeout,
                          capture_output=True, text=True, **kw)


ENGINE_DIR = os.path.join(SRC, "build", "docker-engine")


def sanitized_build():
    """True in a sanitizer build tree: its lisa-agent needs the sanitizer
    runtime, which the image does not have."""
    cache = os.path.join(os.path.dirname(os.path.dirname(AGENT)),
                         "CMakeCache.txt")
    try:
        with open(cache, encoding="utf-8") as f:
            return "LISA_SANITIZE:BOOL=ON" in f.read()
    except OSError:
        return False


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
                   timeout=120)


def _build(sock, ctx, *args):
    b = _docker(sock, "build", "--network", "host", *args, ctx)
    if b.returncode != 0:
        return "the sandbox image did not build: " + \
            (b.stdout + b.stderr)[-1500:]
    return None


def engine():
    """(socket, None) with the sandbox image holding this tree's
    lisa-agent, or (None, why)."""
    d = ENGINE_DIR
    try:
        p = subprocess.run(
            ["bash", os.path.join(SRC, "scripts", "docker-up.sh"), "--dir", d,
             "--base", "--print-env"], capture_output=True, text=True,
            timeout=1200)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"docker-up.sh did not finish: {e}"
    if p.returncode != 0:
        return None, ("no Docker engine can be started here (docker-up.sh "
                      f"exit {p.returncode}): {p.stderr.strip()[-500:]}")
    sock = os.path.join(d, "docker.sock")
    # The Dockerfile starts FROM debian:bookworm-slim; in this private
    # engine that name is the locally made base, so nothing is pulled.
    _docker(sock, "tag", BASE, "debian:bookworm-slim")
    ctx = tempfile.mkdtemp(prefix="lisa-sbx-ctx-")
    try:
        os.mkdir(os.path.join(ctx, "bin"))
        shutil.copy(AGENT, os.path.join(ctx, "bin", "lisa-agent"))
        why = _build(sock, ctx, "-f",
                     os.path.join(SRC, "docker", "sandbox.Dockerfile"),
                     "--target", "runtime", "--build-arg", "BASE=" + BASE,
                     "-t", RUNTIME)
        # the agent layer again each time: it is this tree's binary
        why = why or _build(
            sock, ctx, "-f",
            os.path.join(SRC, "docker", "sandbox-prebuilt.Dockerfile"),
            "--build-arg", "RUNTIME=" + RUNTIME, "-t", IMAGE)
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    return (None, why) if why else (sock, None)


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
