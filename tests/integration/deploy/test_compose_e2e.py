"""The compose stack against a real Docker engine (ctest label `docker`).

Runs by default (scripts/test.sh runs it as its own step); set
LISA_SKIP_DOCKER_TESTS=1 to skip it. When it runs and the engine cannot
start, or the base image cannot be made, the test fails and says why: it
never passes or skips silently.

scripts/docker-up.sh starts a private engine (`dockerd --bridge=none
--iptables=false`, data root, exec root, pid file and socket under
build/docker-engine) and imports the base image made with debootstrap (no
registry is needed). The images are built from this build tree's binaries
(docker/lisa-prebuilt.Dockerfile and docker/sandbox-prebuilt.Dockerfile on
the runtime stages of docker/lisa.Dockerfile and docker/sandbox.Dockerfile;
LISA_E2E_SANDBOX_IMAGE names a sandbox image already in the engine
instead). Every container uses host networking (compose/compose.host.yaml)
on ports picked free for this run, and every service listens on 127.0.0.1.

  test_usage_stack_comes_up_healthy   broker, reward workers (scaled),
                                      gateway and controller healthy; only
                                      the controller has the Docker socket
  test_sandboxes_are_hardened_and_reaped
                                      CLI-submitted tasks get hardened
                                      sandboxes that reach the gateway;
                                      every rollout ends, every sandbox is
                                      removed
  test_toy_training_run_completes     the toy run (models/toy on the toy
                                      tasks, 2 steps of 2 prompts x 2
                                      rollouts): rollouts flow through
                                      sandboxes, rewards are scored, the
                                      trainer writes metrics and a
                                      checkpoint and exits 0
  test_killing_every_service_mid_run  while the toy run trains (4 steps;
                                      another run follows if it ends
                                      first) the trainer, the broker, the
                                      gateway, the controller and a reward
                                      worker are killed in turn: each is
                                      restarted by its policy, every run
                                      completes or stops with an error
                                      line, what the broker acknowledged
                                      is still there
  test_default_bridge_stack_comes_up  the plain `compose up` files
                                      (bridge network, published ports),
                                      where the engine can make bridges

The stack fixture's teardown is the last check: `compose down` leaves no
container of the project and no sandbox. The engine is stopped by its PID
when this test started it. Timings go to $LISA_BINARY_DIR/compose-e2e.json.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                  "..", "..", "..")))
BLD = os.environ.get("LISA_BINARY_DIR", os.path.join(SRC, "build", "default"))
BIN = os.path.join(BLD, "bin")
ENGINE = os.path.join(SRC, "build", "docker-engine")
SERVICES = ["lisa-broker", "lisa-gateway", "lisa-controller", "lisa-reward",
            "lisa-trainer", "lisa-agent", "lisa"]
TAG = "e2e"
UID = 10001
SKIP_ENV = "LISA_SKIP_DOCKER_TESTS"
RUN_DEADLINE_S = float(os.environ.get("LISA_E2E_RUN_DEADLINE_S", "420"))
TERMINAL = {"succeeded", "failed", "cancelled"}
TIMES = {}

pytestmark = pytest.mark.skipif(
    os.environ.get(SKIP_ENV) == "1",
    reason=f"{SKIP_ENV}=1: the container tests are skipped")


def _sanitized_build():
    cache = os.path.join(BLD, "CMakeCache.txt")
    if not os.path.exists(cache):
        return False
    with open(cache, encoding="utf-8") as f:
        return "LISA_SANITIZE:BOOL=ON" in f.read()


if os.environ.get(SKIP_ENV) != "1" and _sanitized_build():
    # The images carry this tree's binaries, and sanitizer binaries need
    # their runtime: the default tree runs this test (scripts/test.sh).
    pytestmark = pytest.mark.skip(
        reason="sanitizer build tree: the container test runs from the "
        "default preset's tree")


def _note(key, value):
    TIMES[key] = round(value, 1) if isinstance(value, float) else value
    try:
        with open(os.path.join(BLD, "compose-e2e.json"), "w",
                  encoding="utf-8") as f:
            json.dump(TIMES, f, indent=1, sort_keys=True)
    except OSError:
        pass


def _run(cmd, env=None, timeout=600, check=True, **kw):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True,
                       timeout=timeout, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} -> {r.returncode}\n"
                             f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def _free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _engine_pid():
    try:
        with open(os.path.join(ENGINE, "dockerd.pid"), encoding="ascii") as f:
            pid = int(f.read().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


@pytest.fixture(scope="module")
def engine():
    """A running engine (started here unless one was) and its environment."""
    was_running = _engine_pid() is not None
    t0 = time.monotonic()
    r = subprocess.run(["bash", os.path.join(SRC, "scripts", "docker-up.sh"),
                        "--dir", ENGINE, "--base", "--print-env"],
                       capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        pytest.fail(f"the Docker engine or the base image is not available "
                    f"(scripts/docker-up.sh exit {r.returncode}: {why}); "
                    f"set {SKIP_ENV}=1 to skip the container tests\n"
                    f"{r.stderr[-3000:]}", pytrace=False)
    _note("engine_and_base_s", time.monotonic() - t0)
    env = dict(os.environ)
    env.update(line.split("=", 1) for line in r.stdout.split()
               if line.startswith("DOCKER_HOST="))
    env["DOCKER_BUILDKIT"] = "0"
    yield env
    if not was_running:
        _run(["bash", os.path.join(SRC, "scripts", "docker-up.sh"),
              "--dir", ENGINE, "--stop"], env=env, timeout=120)
        assert _engine_pid() is None


def _compose_cmd():
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return ["docker", "compose"]


@pytest.fixture(scope="module")
def images(engine, tmp_path_factory):
    missing = [b for b in SERVICES if not os.access(os.path.join(BIN, b),
                                                    os.X_OK)]
    assert not missing, f"not built in {BIN}: {', '.join(missing)}"
    ctx = tmp_path_factory.mktemp("ctx")
    os.mkdir(ctx / "bin")
    for b in SERVICES:
        _run(["strip", "--strip-unneeded", "-o", str(ctx / "bin" / b),
              os.path.join(BIN, b)])
    # Dockerfiles that say FROM debian:bookworm-slim find the local base.
    _run(["docker", "tag", "lisa-base:bookworm", "debian:bookworm-slim"],
         env=engine)

    def build(dockerfile, tag, *args):
        _run(["docker", "build", "--network", "host", *args,
              "-f", os.path.join(SRC, "docker", dockerfile), "-t", tag,
              str(ctx)], env=engine, timeout=1200)

    t0 = time.monotonic()
    build("lisa.Dockerfile", f"lisa-runtime:{TAG}", "--target", "runtime",
          "--build-arg", "BASE=lisa-base:bookworm")
    build("lisa-prebuilt.Dockerfile", f"lisa:{TAG}",
          "--build-arg", f"RUNTIME=lisa-runtime:{TAG}")
    _note("image_lisa_s", time.monotonic() - t0)
    t0 = time.monotonic()
    given = os.environ.get("LISA_E2E_SANDBOX_IMAGE")
    if given:
        _run(["docker", "tag", given, f"lisa-sandbox:{TAG}"], env=engine)
    else:
        build("sandbox.Dockerfile", f"lisa-sandbox-runtime:{TAG}",
              "--target", "runtime", "--build-arg", "BASE=lisa-base:bookworm")
        build("sandbox-prebuilt.Dockerfile", f"lisa-sandbox:{TAG}",
              "--build-arg", f"RUNTIME=lisa-sandbox-runtime:{TAG}")
    _note("image_sandbox_s", time.monotonic() - t0)
    # Non-root, and the binaries load in the final images.
    r = _run(["docker", "run", "--rm", "--network", "none", f"lisa:{TAG}",
              "sh", "-c", "id -u && lisa-broker --help >/dev/null && "
              "lisa-trainer train --help >/dev/null && echo ok"], env=engine)
    assert r.stdout.split() == [str(UID), "ok"], r.stdout
    r = _run(["docker", "run", "--rm", "--network", "none",
              "--entrypoint", "sh", f"lisa-sandbox:{TAG}", "-c",
              "id -u && python3 -c 'import numpy, sympy, scipy' && "
              "lisa-agent --help >/dev/null && echo ok"], env=engine)
    assert r.stdout.split() == ["65534", "ok"], r.stdout


class Stack:
    """One compose project on the private engine, host networking."""

    def __init__(self, engine, workdir, host=True):
        self.env = dict(engine)
        ports = _free_ports(6)
        # Made and handed to uid UID by the stack's `prepare` step.
        run_dir = os.path.join(workdir, "run")
        sock = engine["DOCKER_HOST"][len("unix://"):]
        self.project = f"lisae2e{'' if host else 'br'}{os.getpid()}"
        self.env.update({
            "COMPOSE_PROJECT_NAME": self.project,
            "COMPOSE_PROFILES": "cpu",
            # Its own id: sandboxes of other stacks on the engine are not its.
            "LISA_CTL_ID": f"ctl-{self.project}",
            "LISA_TAG": TAG,
            "LISA_UID": str(UID),
            "LISA_PORT_RPC": str(ports[0]),
            "LISA_PORT_SPANS": str(ports[1]),
            "LISA_PORT_EVENTS": str(ports[2]),
            "LISA_PORT_WORKERS": str(ports[3]),
            "LISA_PORT_GATEWAY": str(ports[4]),
            "LISA_PORT_TRAINER": str(ports[5]),
            "LISA_RUN_DIR": run_dir,
            "LISA_DOCKER_SOCK": sock,
            "LISA_DOCKER_GID": str(os.stat(sock).st_gid),
            # The toy run of scripts/run.sh, two small steps.
            "LISA_MODEL_DIR": os.path.join(SRC, "models", "toy"),
            "LISA_TOKENIZER_DIR": os.path.join(SRC, "models", "toy"),
            "LISA_TRAIN_DATA": os.path.join(SRC, "examples", "toy", "data",
                                            "train.json"),
            "LISA_TRAIN_CONFIG": os.path.join(SRC, "compose",
                                              "toy-trainer.conf"),
            "LISA_STEPS": "2",
            "LISA_BATCH": "2",
            "LISA_GROUP": "2",
            "LISA_REWARD_REPLICAS": "2",
            "LISA_SANDBOX_MAX": "4",
            "LISA_DEADLINE_MS": "120000",
        })
        self.rpc = f"tcp://127.0.0.1:{ports[0]}"
        # The bus's keys, as `lisa keys` makes them, readable by the
        # services' uid; the CLI here uses the operator's.
        keys = os.path.join(workdir, "keys")
        _run([os.path.join(BIN, "lisa"), "keys", keys])
        for d, _, files in os.walk(keys):
            for f in [d] + [os.path.join(d, x) for x in files]:
                if os.geteuid() == 0:
                    os.chown(f, UID, UID)
                else:
                    os.chmod(f, 0o755 if f == d else 0o644)
        self.env["LISA_KEYS_DIR"] = keys
        self.cli_env = dict(os.environ,
                            LISA_CURVE_CERT=os.path.join(
                                keys, "operator.cert_secret"),
                            LISA_BROKER_CERT=os.path.join(keys, "broker.cert"))
        files = ["compose.host.yaml"] if host else [
            "compose.override.yaml", "compose.broker-ports.yaml"]
        self.base = _compose_cmd() + [
            "-f", os.path.join(SRC, "compose", "compose.yaml")]
        for f in files:
            self.base += ["-f", os.path.join(SRC, "compose", f)]

    def compose(self, *args, timeout=300, check=True):
        return _run(self.base + list(args), env=self.env, timeout=timeout,
                    check=check)

    def docker(self, *args, timeout=120, check=True):
        return _run(["docker"] + list(args), env=self.env, timeout=timeout,
                    check=check)

    def containers(self, service=None, all_=True):
        cmd = ["ps", "-q", "--filter",
               f"label=com.docker.compose.project={self.project}"]
        if all_:
            cmd.insert(1, "-a")
        if service:
            cmd += ["--filter", f"label=com.docker.compose.service={service}"]
        return self.docker(*cmd).stdout.split()

    def inspect(self, cid):
        return json.loads(self.docker("inspect", cid).stdout)[0]

    def wait_healthy(self, services, deadline_s=120):
        end = time.monotonic() + deadline_s
        state = {}
        while time.monotonic() < end:
            state = {}
            for s in services:
                for cid in self.containers(s):
                    try:
                        st = self.inspect(cid)["State"]
                    except AssertionError:
                        continue  # a one-off removed between ps and inspect
                    state[f"{s}/{cid[:12]}"] = \
                        st.get("Health", {}).get("Status", st["Status"])
            if state and all(v in ("healthy", "running")
                             for v in state.values()) and \
                    all(self.containers(s) for s in services):
                return state
            time.sleep(1)
        raise AssertionError(f"not healthy in {deadline_s} s: {state}\n" +
                             self.logs())

    def sandboxes(self):
        r = self.docker("ps", "-aq", "--filter", "label=managed-by=lisa",
                        "--filter", f"label=lisa.controller=ctl-{self.project}")
        return r.stdout.split()

    def crash(self, service):
        """SIGKILLs the service's init process from outside: the container
        dies as in a crash, and its restart policy applies (unlike
        `docker kill`/`docker stop`)."""
        cid = self.containers(service, all_=False)[0]
        info = self.inspect(cid)
        pid = info["State"]["Pid"]
        restarts = info["RestartCount"]
        assert pid > 0, f"{service} is not running"
        os.kill(pid, signal.SIGKILL)
        return cid, restarts

    def wait_restarted(self, service, cid, restarts, deadline_s=90):
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            info = self.inspect(cid)
            if info["RestartCount"] > restarts and \
                    info["State"]["Status"] == "running":
                return
            time.sleep(0.5)
        raise AssertionError(f"{service} was not restarted\n" + self.logs())

    def logs(self, *services, tail="40"):
        return self.compose("logs", "--no-color", "--tail", tail, *services,
                            check=False, timeout=60).stdout[-8000:]

    def volume_files(self, volume, script):
        """Runs `script` (sh) over a named volume of the project, mounted
        read-only at /v, in a throwaway container without network."""
        return self.docker("run", "--rm", "--network", "none",
                           "-v", f"{self.project}_{volume}:/v:ro",
                           "--entrypoint", "sh", f"lisa:{TAG}", "-c",
                           script).stdout

    def down(self):
        t0 = time.monotonic()
        self.compose("down", "-v", "--remove-orphans", "--timeout", "20",
                     check=False, timeout=300)
        _note(f"compose_down_{self.project}_s", time.monotonic() - t0)
        left = {"containers": self.containers(), "sandboxes": self.sandboxes()}
        if left["containers"] or left["sandboxes"]:
            self.docker("rm", "-f", *left["containers"], *left["sandboxes"],
                        check=False)
        return left


@pytest.fixture(scope="module")
def stack(engine, images, tmp_path_factory):
    # A short folder: it holds the gateway's unix socket (108-byte limit).
    workdir = tmp_path_factory.mktemp("s")
    s = Stack(engine, str(workdir))
    t0 = time.monotonic()
    try:
        s.compose("up", "-d", "--no-build", "--scale", "reward=2",
                  "broker", "reward", "gateway", "controller", timeout=300)
        s.wait_healthy(["broker", "gateway", "controller", "reward"])
        _note("stack_up_s", time.monotonic() - t0)
        yield s
    finally:
        left = s.down()
        assert not left["containers"], \
            f"compose down left containers: {left['containers']}"
        assert not left["sandboxes"], \
            f"sandbox containers left behind: {left['sandboxes']}"


def _rollouts(stack, run=None):
    """The broker's rollouts (all runs, or one), one dict per rollout."""
    cmd = [os.path.join(BIN, "lisa"), "rollouts", "--broker", stack.rpc,
           "--json", "--limit", "1000"]
    cmd += ["--run", run] if run else ["--all"]
    r = _run(cmd, env=stack.cli_env, timeout=30)
    return [json.loads(line) for line in r.stdout.splitlines()
            if line.strip()]


def _wait_no_sandboxes(stack, deadline_s=60):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not stack.sandboxes():
            return
        time.sleep(1)
    raise AssertionError(f"sandboxes left: {stack.sandboxes()}")


def _wait_trainer(stack, deadline_s):
    """The trainer's exit code once it has exited for good (on-failure:3
    may restart it)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        cids = stack.containers("trainer")
        if cids:
            st = stack.inspect(cids[0])["State"]
            if st["Status"] == "exited" and not st["Restarting"]:
                time.sleep(3)
                st = stack.inspect(cids[0])["State"]
                if st["Status"] == "exited":
                    return st["ExitCode"]
        time.sleep(2)
    raise AssertionError(f"the training run did not end in {deadline_s} s\n"
                         + stack.logs("trainer", tail="80"))


def test_usage_stack_comes_up_healthy(stack):
    state = stack.wait_healthy(["broker", "gateway", "controller", "reward"])
    assert len(stack.containers("reward")) == 2, state
    # The broker answers RPC on the host network's loopback.
    r = _run([os.path.join(BIN, "lisa"), "status", "--broker", stack.rpc,
              "--json"], env=stack.cli_env, timeout=30)
    # Without the operator's key the broker answers nothing.
    r2 = _run([os.path.join(BIN, "lisa"), "status", "--broker", stack.rpc,
               "--json"], timeout=90, check=False)
    assert r2.returncode != 0 and "no answer" in r2.stderr, r2.stderr
    json.loads(r.stdout)
    for svc in ("broker", "gateway", "controller", "reward"):
        info = stack.inspect(stack.containers(svc)[0])
        binds = [m["Destination"] for m in info["Mounts"]]
        # Only the controller holds the Docker socket.
        assert ("/var/run/docker.sock" in binds) == (svc == "controller")
        assert info["Config"]["User"].split(":")[0] == str(UID)
        assert info["HostConfig"]["NetworkMode"] == "host"
        # No host pid namespace (the reward workers' ids are unique anyway).
        assert info["HostConfig"]["PidMode"] in ("", "private"), svc
        assert info["HostConfig"]["ReadonlyRootfs"] is True
    # Everything listens on the loopback only: nothing of the stack's ports
    # answers on another address of this machine.
    ips = _run(["hostname", "-I"], check=False).stdout.split() \
        if shutil.which("hostname") else []
    addrs = [a for a in ips if ":" not in a and not a.startswith("127.")]
    for addr in addrs[:1]:
        for key in ("LISA_PORT_RPC", "LISA_PORT_GATEWAY"):
            with socket.socket() as s:
                s.settimeout(1)
                assert s.connect_ex((addr, int(stack.env[key]))) != 0, \
                    f"{key} answers on {addr}"


def test_sandboxes_are_hardened_and_reaped(stack, tmp_path):
    """Without a trainer: tasks submitted by the CLI get sandboxes from the
    controller's docker backend; with no engine behind the gateway every
    attempt ends failed, and every sandbox is removed."""
    stack.wait_healthy(["broker", "gateway", "controller", "reward"])
    with open(os.path.join(SRC, "examples", "toy", "data", "val.json"),
              encoding="utf-8") as f:
        records = json.load(f)[:2]
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps(records), encoding="utf-8")
    run = f"sbx{os.getpid()}"
    _run([os.path.join(BIN, "lisa"), "submit", str(tasks), "--n", "2",
          "--run", run, "--max-attempts", "1", "--deadline-ms", "60000",
          "--broker", stack.rpc, "--json"], env=stack.cli_env, timeout=30)
    seen = None
    end = time.monotonic() + 90
    while time.monotonic() < end:
        ids = stack.sandboxes()
        if ids:
            try:
                seen = stack.inspect(ids[0])
                break
            except AssertionError:
                continue  # removed between ps and inspect
        time.sleep(0.2)
    assert seen, "the controller started no sandbox\n" + stack.logs()
    host = seen["HostConfig"]
    assert seen["Config"]["User"].split(":")[0] != "0"
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert host["Memory"] > 0 and host["PidsLimit"] > 0
    binds = host.get("Binds") or []
    assert [b for b in binds if b.startswith(stack.env["LISA_RUN_DIR"])], \
        binds
    assert not [b for b in binds if "docker.sock" in b]
    assert seen["Config"]["Labels"]["lisa.run"] == run
    # Every rollout ends (no engine: the agent's model call fails) ...
    end = time.monotonic() + 150
    rows = []
    while time.monotonic() < end:
        rows = _rollouts(stack, run)
        if len(rows) == 4 and all(r["state"] in TERMINAL for r in rows):
            break
        time.sleep(1)
    assert len(rows) == 4 and all(r["state"] in TERMINAL for r in rows), \
        rows
    # The agent started, reached the gateway through the socket and was
    # let in with its attempt token; only the missing engine stopped it.
    for r in rows:
        reason = (r.get("reason") or "").lower()
        for bad in ("misconfigured", "token", "unauthorized", "connect"):
            assert bad not in reason, \
                f"sandbox of {r['rollout_id']} failed early: {r['reason']}"
    # ... and no sandbox outlives its attempt.
    _wait_no_sandboxes(stack)


def _metrics(stack):
    text = stack.volume_files("checkpoints", "cat /v/metrics.jsonl")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_toy_training_run_completes(stack):
    stack.wait_healthy(["broker", "gateway", "controller", "reward"])
    before = {r["rollout_id"] for r in _rollouts(stack)}
    t0 = time.monotonic()
    stack.compose("up", "-d", "--no-build", "trainer")
    code = _wait_trainer(stack, RUN_DEADLINE_S)
    took = time.monotonic() - t0
    logs = stack.compose("logs", "--no-color", "trainer").stdout
    assert code == 0, f"trainer exit {code}\n{logs[-4000:]}"
    _note("toy_run_s", took)
    # Rollouts flowed through sandboxes and were scored.
    rows = [r for r in _rollouts(stack) if r["rollout_id"] not in before]
    assert len(rows) >= 8, rows  # 2 steps x 2 prompts x 2 rollouts
    assert all(r["state"] in TERMINAL for r in rows), rows
    scored = [r for r in rows if r["state"] == "succeeded"]
    assert scored, rows
    for r in scored:
        assert r["reward"] is not None, r
        assert r["reward"]["rule"], r
        # Default worker ids stay unique on the host's network.
        assert re.fullmatch(r"reward-.+-[0-9]+-[0-9a-f]{8}",
                            r["reward"]["worker_id"]), r
        assert r["attempts"] >= 1, r
    # The trainer's metrics: one line per step, rollouts counted.
    steps = [m for m in _metrics(stack) if m.get("kind") != "val"]
    assert [m["step"] for m in steps] == [1, 2], steps
    for m in steps:
        assert m["rollouts/total"] == 4, m
        assert "reward/mean" in m, m
    # The final checkpoint, complete.
    files = stack.volume_files(
        "checkpoints", "cat /v/latest_checkpointed_iteration.txt; "
        "ls /v/global_step_2").split()
    assert files[0] == "2", files
    assert "trainer_state.json" in files, files
    assert [f for f in files if f.endswith(".safetensors")], files
    # Every sandbox of the run was removed once its attempt ended.
    _wait_no_sandboxes(stack)


def _running_run(stack, ended):
    """Makes sure a training run is in progress: the trainer container is
    running. A run that has ended meanwhile (the toy run is short) has its
    exit code appended to `ended`, and the next run is started."""
    end = time.monotonic() + 60
    while time.monotonic() < end:
        st = stack.inspect(stack.containers("trainer")[0])["State"]
        if st["Status"] == "running":
            return
        if st["Status"] == "exited" and not st["Restarting"]:
            ended.append(st["ExitCode"])
            stack.compose("up", "-d", "--no-build", "trainer")
        time.sleep(0.5)
    raise AssertionError("the trainer does not run\n" +
                         stack.logs("trainer", tail="80"))


def test_killing_every_service_mid_run(stack):
    """While the toy run trains, each service is killed (SIGKILL of the
    container's init) in turn and must come back by its restart policy;
    a run that ends before every kill is done is followed by another, so
    each kill lands during a run. Every run completes, or the trainer
    stops with an error line naming the cause; every rollout the broker
    had acknowledged before its crash is still there, ended ones
    unchanged."""
    stack.wait_healthy(["broker", "gateway", "controller", "reward"])
    stack.compose("rm", "-f", "-s", "trainer", check=False)
    stack.env["LISA_STEPS"] = "4"  # room for several kills in one run
    t0 = time.monotonic()
    stack.compose("up", "-d", "--no-build", "trainer")
    # The run is under way once its first sandbox exists, or once it has
    # finished a step (its sandboxes can come and go between two looks:
    # a toy step's rollouts take under a second).
    def under_way():
        return stack.sandboxes() or "step 1 of" in stack.logs("trainer")
    end = time.monotonic() + 120
    while not under_way() and time.monotonic() < end:
        time.sleep(0.2)
    assert under_way(), "no sandbox started\n" + stack.logs()
    acked = {}
    ended = []
    for svc in ("trainer", "broker", "gateway", "controller", "reward"):
        _running_run(stack, ended)
        if svc == "broker":
            acked = {r["rollout_id"]: r for r in _rollouts(stack)}
        cid, restarts = stack.crash(svc)
        stack.wait_restarted(svc, cid, restarts)
        if svc != "trainer":  # a restarted trainer may finish before healthy
            stack.wait_healthy([svc])
        TIMES.setdefault("killed", []).append(svc)
    ended.append(_wait_trainer(stack, RUN_DEADLINE_S))
    _note("killed_runs_s", time.monotonic() - t0)
    _note("killed_runs_exit", ended)
    _note("killed_runs_trainer_restarts",
          stack.inspect(stack.containers("trainer")[0])["RestartCount"])
    logs = stack.compose("logs", "--no-color", "trainer").stdout
    if any(code != 0 for code in ended):
        # Stopping is allowed, silently failing is not.
        errors = [line for line in logs.splitlines()
                  if " error " in line.lower() or "level=error" in line]
        assert errors, f"exits {ended} without an error line\n{logs[-4000:]}"
    # What the broker acknowledged before it was killed is still there;
    # a rollout that had ended kept its end.
    after = {r["rollout_id"]: r for r in _rollouts(stack)}
    lost = sorted(set(acked) - set(after))
    assert not lost, f"acknowledged rollouts lost: {lost}"
    for rid, r in acked.items():
        if r["state"] in TERMINAL:
            a = after[rid]
            assert (a["state"], a["reward"]) == (r["state"], r["reward"]), \
                (r, a)
    _wait_no_sandboxes(stack, deadline_s=150)


def test_default_bridge_stack_comes_up(engine, images, tmp_path):
    """What a plain `docker compose up` in compose/ uses: compose.yaml and
    compose.override.yaml on a bridge network, the broker published on the
    host's loopback for the CLI."""
    s = Stack(engine, str(tmp_path), host=False)
    try:
        r = s.compose("up", "-d", "--no-build", "broker", "reward",
                      "gateway", "controller", timeout=300, check=False)
        if r.returncode != 0 and "network" in (r.stderr + r.stdout).lower() \
                and not s.containers("broker"):
            why = r.stderr.strip().splitlines()[-1]
            _note("bridge_stack", "skipped: " + why)
            pytest.skip("this engine cannot make bridge networks: " + why)
        assert r.returncode == 0, r.stderr[-3000:]
        s.wait_healthy(["broker", "gateway", "controller", "reward"])
        info = s.inspect(s.containers("broker")[0])
        assert info["HostConfig"]["NetworkMode"] != "host"
        r = _run([os.path.join(BIN, "lisa"), "status", "--broker", s.rpc,
                  "--json"], env=s.cli_env, timeout=30)
        json.loads(r.stdout)
        _note("bridge_stack", "healthy")
    finally:
        left = s.down()
        assert not left["containers"] and not left["sandboxes"], left
