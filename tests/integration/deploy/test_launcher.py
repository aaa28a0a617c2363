"""scripts/k8s-launch.sh: order of steps and cleanup on every way out.

No cluster is reachable here, so kubectl and minikube are stand-ins that
log their arguments and answer the few queries the launcher makes (the
trainer Job's conditions come from FAKE_JOB_STATE). The tests check the
launcher's own logic: the services are applied before the trainer and
waited for, the exit status follows the Job, and the cleanup (trainer and
sandbox Jobs, the namespace, the background mount) runs on success, on
failure and on Ctrl+C.
"""
import json
import os
import re
import signal
import subprocess
import time

import pytest

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                  "..", "..", "..")))
LAUNCH = os.path.join(SRC, "scripts", "k8s-launch.sh")

KUBECTL = r"""#!/bin/sh
echo "kubectl $*" >> "$FAKE_LOG"
case "$*" in
  *"get job lisa-trainer"*) printf '%s ' "$FAKE_JOB_STATE" ;;
  *"get secret lisa-curve-broker"*) exit 1 ;;
  *"create secret generic lisa-curve-"*)
    for a in "$@"; do
      case "$a" in --from-file=*) test -e "${a#--from-file=}" || exit 3 ;; esac
    done
    echo "kind: Secret" ;;
  *"--dry-run=client"*) echo "kind: Secret" ;;
  *"apply -f -"*) cat >/dev/null ;;
  *"logs -f"*) echo "trainer: step 1" ;;
esac
exit 0
"""
MINIKUBE = r"""#!/bin/sh
echo "minikube $*" >> "$FAKE_LOG"
case "$1" in
  mount) echo $$ > "$FAKE_MOUNT_PID"; exec sleep 600 ;;
esac
exit 0
"""


@pytest.fixture
def fake(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in (("kubectl", KUBECTL), ("minikube", MINIKUBE)):
        p = bindir / name
        p.write_text(text)
        p.chmod(0o755)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    env = dict(os.environ)
    env.update({
        "LISA_MODEL_DIR": str(model),
        "LISA_TOKENIZER_DIR": os.path.join(SRC, "tests", "fixtures",
                                           "qwen3-tokenizer"),
        "PATH": f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "FAKE_LOG": str(tmp_path / "log"),
        "FAKE_MOUNT_PID": str(tmp_path / "mount.pid"),
        "FAKE_JOB_STATE": "Complete",
        "LISA_BUILD_DIR": os.path.abspath(os.environ.get(
            "LISA_BINARY_DIR", os.path.join(SRC, "build", "default"))),
    })
    return env, tmp_path


def _log(tmp):
    p = tmp / "log"
    return p.read_text().splitlines() if p.exists() else []


def _index(lines, needle):
    for i, line in enumerate(lines):
        if needle in line:
            return i
    raise AssertionError(f"'{needle}' not run:\n" + "\n".join(lines))


def _mount_gone(tmp):
    pid = int((tmp / "mount.pid").read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return False


def _cleaned(lines):
    tail = lines[_index(lines, "apply -k k8s/overlays/local") + 1:]
    _index(tail, "delete job lisa-trainer")
    _index(tail, "delete jobs -l app.kubernetes.io/managed-by=lisa")
    _index(tail, "delete namespace lisa-local")


def test_usage_local_run_completes_and_cleans_up(fake):
    env, tmp = fake
    r = subprocess.run(["bash", LAUNCH], env=env, cwd=SRC,
                       capture_output=True, text=True, timeout=60)
    # The bus's keys: a Secret per role, the broker's pair and the clients'
    # public certificates, made before the services start.
    lines = _log(tmp)
    svc = _index(lines, "apply -k k8s/overlays/local -l")
    for name in ("broker", "clients", "controller", "gateway", "trainer",
                 "reward", "operator"):
        assert _index(lines, f"create secret generic lisa-curve-{name} ") < svc
    assert r.returncode == 0, r.stderr
    lines = _log(tmp)
    builds = [x for x in lines if x.startswith("minikube image build")]
    assert len(builds) == 2
    # Services first (without the trainer), ready, then the trainer.
    svc = _index(lines, "-l app.kubernetes.io/component!=trainer")
    ready = _index(lines, "rollout status deployment/lisa-controller")
    secret = _index(lines, "create secret generic lisa-token-key")
    everything = [i for i, x in enumerate(lines)
                  if x.endswith("apply -k k8s/overlays/local")]
    assert secret < svc < ready < everything[-1]
    _cleaned(lines)
    assert _mount_gone(tmp)
    assert "training completed" in r.stderr


def test_failed_job_exits_1_and_cleans_up(fake):
    env, tmp = fake
    env["FAKE_JOB_STATE"] = "Failed"
    r = subprocess.run(["bash", LAUNCH, "--no-build"], env=env, cwd=SRC,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    lines = _log(tmp)
    assert not [x for x in lines if "image build" in x]
    _cleaned(lines)
    assert _mount_gone(tmp)
    assert "training failed" in r.stderr


def test_ctrl_c_cleans_up(fake):
    env, tmp = fake
    env["FAKE_JOB_STATE"] = "Running"
    p = subprocess.Popen(["bash", LAUNCH, "--no-build"], env=env, cwd=SRC,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        end = time.monotonic() + 30
        while time.monotonic() < end and \
                not any("get job lisa-trainer" in x for x in _log(tmp)):
            time.sleep(0.1)
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl+C sends
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    _cleaned(_log(tmp))
    assert _mount_gone(tmp)


def test_bad_usage(fake):
    env, tmp = fake
    r = subprocess.run(["bash", LAUNCH, "--overlay", "staging"], env=env,
                       cwd=SRC, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "unknown overlay" in r.stderr
    r = subprocess.run(["bash", LAUNCH], cwd=SRC, capture_output=True,
                       text=True, timeout=30,
                       env=dict(env, LISA_MODEL_DIR=str(tmp / "nothing")))
    assert r.returncode == 2 and "set LISA_MODEL_DIR" in r.stderr
    env["PATH"] = "/nonexistent"
    r = subprocess.run(["/bin/bash", LAUNCH], env=env, cwd=SRC,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "kubectl is not installed" in r.stderr


# ---- scripts/run.sh: the local run's services end with it ----------------

RUN_SH = os.path.join(SRC, "scripts", "run.sh")
BUILD = os.path.abspath(os.environ.get("LISA_BINARY_DIR",
                                       os.path.join(SRC, "build", "default")))
SERVICES = ("lisa-broker", "lisa-reward", "lisa-gateway", "lisa-controller",
            "lisa-trainer")


def _procs():
    """pid -> (ppid, cmdline) of every live (non-zombie) process."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if rest[0] not in ("Z", "X"):
            out[int(pid)] = (int(rest[1]), cmd)
    return out


def _state(pid):
    """A process's state letter and parent pid, to tell an orphan (parent 1
    or a subreaper) from one still dying (state D)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return rest[0], int(rest[1])
    except OSError:
        return None


def _alive(pids):
    live = _procs()
    return [p for p in pids if p in live]


@pytest.fixture
def local_run(tmp_path, request):
    """Starts scripts/run.sh on the toy model with the built binaries (for
    one step, or the test's indirect parameter) and waits until every
    service runs; yields (process, stdout path, run folder). Whatever is
    left afterwards is killed by pid."""
    steps = str(getattr(request, "param", 1))
    if not os.access(os.path.join(BUILD, "bin", "lisa-trainer"), os.X_OK):
        pytest.fail(f"lisa is not built in {BUILD}")
    out = tmp_path / "out.txt"
    err = tmp_path / "err.txt"
    run = tmp_path / "run"
    env = dict(os.environ, LISA_BUILD_DIR=BUILD)
    with open(out, "w") as o, open(err, "w") as e:
        p = subprocess.Popen(["bash", RUN_SH, "--no-build", "--out", str(run),
                              "--steps", steps], cwd=SRC, env=env, stdout=o,
                             stderr=e, start_new_session=True)
    started = []
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and "logs: " not in out.read_text():
            assert p.poll() is None, err.read_text()
            time.sleep(0.1)
        assert "logs: " in out.read_text(), out.read_text()
        # a child may still be between its fork and its exec: wait until
        # every service runs as itself
        while True:
            kids = {pid: cmd for pid, (ppid, cmd) in _procs().items()
                    if ppid == p.pid}
            started = list(kids)
            if set(_service_pids(kids)) == set(SERVICES) or \
                    time.monotonic() > end + 30:
                break
            time.sleep(0.1)
        yield p, out, err, run, kids
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid in _alive(started):
            os.kill(pid, signal.SIGKILL)
        gw = [x for x in out.read_text().split() if "lisa-gw." in x]
        if gw:
            subprocess.run(["rm", "-rf", os.path.dirname(gw[0])], check=False)


def _service_pids(kids):
    got = {}
    for pid, cmd in kids.items():
        for name in SERVICES:
            if f"/bin/{name} " in cmd:
                got[name] = pid
    return got


def test_run_sh_killed_leaves_no_service_and_no_sandbox(local_run):
    p, out, err, run, kids = local_run
    svc = _service_pids(kids)
    assert set(svc) == set(SERVICES), kids
    sock = [x for x in out.read_text().split() if "lisa-gw." in x][0]
    os.kill(p.pid, signal.SIGKILL)  # no trap runs
    p.wait()
    end = time.monotonic() + 10
    while time.monotonic() < end and _alive(svc.values()):
        time.sleep(0.1)
    assert not _alive(svc.values()), \
        {n: pid for n, pid in svc.items() if _alive([pid])}
    # Nor any sandbox: each one's bubblewrap binds the gateway's socket.
    # They die with the controller (--die-with-parent), a signal the kernel
    # delivers when it has gone, so a moment after it.
    def sandboxes():
        return {pid: cmd for pid, (_, cmd) in _procs().items()
                if os.path.dirname(sock) in cmd or str(run) in cmd}
    # 30 s: a process killed while the machine is loaded (other tests run
    # fork bombs and memory limits beside this one) can take seconds to go
    end = time.monotonic() + 30
    while time.monotonic() < end and sandboxes():
        time.sleep(0.1)
    left = sandboxes()
    assert not left, {pid: (_state(pid), cmd) for pid, cmd in left.items()}


@pytest.mark.parametrize("local_run", [20], indirect=True)
def test_run_sh_bus_answers_only_the_runs_keys(local_run, tmp_path):
    """The local run's broker runs with CURVE on: the run's operator key
    gets answers; no key, or a key of another key set, gets none."""
    p, out, err, run, kids = local_run
    rpc = re.search(r"^broker: rpc (\S+),", out.read_text(), re.M).group(1)
    lisa = os.path.join(BUILD, "bin", "lisa")
    plain = {k: v for k, v in os.environ.items()
             if k not in ("LISA_CURVE_CERT", "LISA_BROKER_CERT")}
    other = str(tmp_path / "other-keys")
    subprocess.run([lisa, "keys", other], check=True, capture_output=True)

    def status(cert=None):
        env = dict(plain)
        if cert:
            env.update(LISA_CURVE_CERT=cert,
                       LISA_BROKER_CERT=str(run / "keys" / "broker.cert"))
        return subprocess.Popen([lisa, "status", "--broker", rpc, "--json"],
                                env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def result(proc):
        o, e = proc.communicate(timeout=60)
        return proc.returncode, o, e
    own = str(run / "keys" / "operator.cert_secret")
    rc, o, e = result(status(own))
    assert rc == 0 and json.loads(o), e
    # both refused ones wait out the CLI's timeout, side by side
    refused = [status(), status(os.path.join(other, "operator.cert_secret"))]
    for proc in refused:
        rc, o, e = result(proc)
        assert rc != 0 and "no answer" in e, (rc, o, e)
    # and the broker was there all along (the run is still training)
    assert p.poll() is None, out.read_text()
    rc, o, e = result(status(own))
    assert rc == 0 and json.loads(o), e


def test_run_sh_names_a_dead_service_and_its_last_words(local_run):
    p, out, err, run, kids = local_run
    svc = _service_pids(kids)
    os.kill(svc["lisa-gateway"], signal.SIGKILL)
    rc = p.wait(timeout=60)
    assert rc == 1, err.read_text()
    text = err.read_text()
    pid = svc["lisa-gateway"]
    assert f"gateway (pid {pid}) was killed by signal 9 (SIGKILL)" in text, \
        text
    # What follows is the log's substance, not the configuration dump.
    report = text.split("was killed by signal 9", 1)[1]
    assert " INFO config " not in report, report
    log = (run / "logs" / "gateway.log").read_text()
    assert " INFO config " in log  # the dump was there to leave out
    last = [x for x in log.splitlines() if " INFO config " not in x]
    if last:
        assert last[-1] in report, (last[-1], report)
    else:
        assert "holds only its configuration" in report, report
    # The script stopped the others before it exited.
    assert not _alive([v for k, v in svc.items() if k != "lisa-gateway"])


def test_run_sh_fails_when_a_service_fails_its_stop(tmp_path):
    """A service that ends its stop with an error (here the reward worker,
    wrapped to exit 3 after its clean stop; a crash on the way out or a
    sanitizer's report look the same) fails the run, named with its
    status and its log's last lines, although training finished."""
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    for name in os.listdir(os.path.join(BUILD, "bin")):
        os.symlink(os.path.join(BUILD, "bin", name), build / "bin" / name)
    real = os.path.join(BUILD, "bin", "lisa-reward")
    wrapper = build / "bin" / "lisa-reward"
    wrapper.unlink()
    wrapper.write_text(
        "#!/bin/bash\n"
        f"'{real}' \"$@\" &\n"
        "child=$!\n"
        "trap 'kill -TERM $child; wait $child; exit 3' TERM\n"
        "wait $child\n")
    wrapper.chmod(0o755)
    run = tmp_path / "run"
    p = subprocess.run(["bash", RUN_SH, "--no-build", "--out", str(run),
                        "--steps", "1"], cwd=SRC,
                       env=dict(os.environ, LISA_BUILD_DIR=str(build)),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 1, p.stdout[-2000:] + p.stderr[-2000:]
    assert re.search(r"^step 1 of 1 ", p.stdout, re.M), p.stdout[-2000:]
    assert re.search(r"run\.sh: reward \(pid \d+\) ended with status 3 while "
                     r"stopping", p.stderr), p.stderr[-2000:]
    # the others stopped cleanly: only the reward worker is named
    assert "gateway (pid" not in p.stderr, p.stderr[-2000:]
