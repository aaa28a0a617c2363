"""scripts/k8s-launch.sh: order of steps and cleanup on every way out.

No cluster is reachable here, so kubectl and minikube are stand-ins that
log their arguments and answer the few queries the launcher makes (the
trainer Job's conditions come from FAKE_JOB_STATE). The tests check the
launcher's own logic: the services are applied before the trainer and
waited for, the exit status follows the Job, and the cleanup (trainer and
sandbox Jobs, the namespace, the background mount) runs on success, on
failure and on Ctrl+C.
"""
import os
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
