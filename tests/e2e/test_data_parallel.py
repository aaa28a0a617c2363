"""Data parallel through the whole local stack: scripts/run.sh with
`trainer.n_gpus_per_node=2` on the CPU backend, so lisa-trainer launches
its second rank itself (docs/trainer-service.md, "Data parallel").

Asserts that both ranks join over the bootstrap socket, that both ranks'
engines serve the rollouts, that every step trains and the run ends with a
checkpoint and no process left, that both ranks resume from that
checkpoint (and train that step context-parallel: every trajectory split
between the two ranks); and that a rank killed in the middle of the
run ends the run at once with an error that names it, again with nothing
left behind.
"""
import os
import re
import signal
import subprocess
import time

import pytest

SRC = os.environ["LISA_SOURCE_DIR"]
BIN = os.path.join(os.environ["LISA_BINARY_DIR"], "bin")
STACK = ["lisa-broker", "lisa-reward", "lisa-gateway", "lisa-controller",
         "lisa-agent", "lisa-trainer", "lisa"]
FAST = ["trainer.test_freq=0", "trainer.val_before_train=false",
        "trainer.n_gpus_per_node=2", "trainer.threads=1"]


def need_stack():
    missing = [b for b in STACK if not os.access(f"{BIN}/{b}", os.X_OK)]
    if missing:
        pytest.skip("stack not built: " + ", ".join(missing))


def run_sh(out, *args):
    env = dict(os.environ, LISA_BUILD_DIR=os.environ["LISA_BINARY_DIR"])
    return ["bash", os.path.join(SRC, "scripts", "run.sh"), "--no-build",
            "--out", str(out), *args], env


def leftovers(run):
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True,
                        text=True).stdout
    return [line for line in ps.splitlines() if str(run) in line]


def test_two_ranks_train_through_the_stack(tmp_path):
    need_stack()
    run = tmp_path / "run"
    cmd, env = run_sh(run, "--steps", "3", "trainer.save_freq=3", *FAST)
    p = subprocess.run(cmd, cwd=SRC, env=env, capture_output=True, text=True,
                       timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert len(re.findall(r"^step \d+ of ", p.stdout, re.M)) == 3, out
    log = (run / "logs" / "trainer.log").read_text()
    assert "group: all 2 ranks joined" in log, log[-3000:]
    assert "lisa-trainer.r1 INFO group: rank 1 of 2 joined" in log
    # both engines generated
    served = re.findall(r"engine: (\S+) stopped after (\d+) requests", log)
    assert len(served) == 2, served
    assert all(int(n) > 0 for _, n in served), served
    assert any(e.endswith("-r1") for e, _ in served), served
    assert (run / "trainer" / "engine.url").is_file()
    assert (run / "trainer" / "engine-r1.url").is_file()
    assert (run / "trainer" / "global_step_3" / "model.safetensors").is_file()
    assert "train: done (rank 1)" in log
    assert not leftovers(run), leftovers(run)

    # Both ranks resume from the checkpoint and train one step more, each
    # trajectory over 8 tokens split between them.
    run2 = tmp_path / "run2"
    ckpt = run / "trainer" / "global_step_3"
    cmd, env = run_sh(run2, "--steps", "4", "trainer.save_freq=4",
                      f"trainer.resume={ckpt}",
                      "trainer.context_parallel_tokens=8", *FAST)
    p = subprocess.run(cmd, cwd=SRC, env=env, capture_output=True, text=True,
                       timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert re.findall(r"^step (\d+) of ", p.stdout, re.M) == ["4"], out
    metrics = (run2 / "trainer" / "metrics.jsonl").read_text()
    assert '"policy_version_after":4' in metrics.replace(" ", ""), metrics
    cp = re.findall(r'"actor/cp_micro_batches":\s*([0-9.]+)', metrics)
    mb = re.findall(r'"actor/micro_batches":\s*([0-9.]+)', metrics)
    assert cp and float(cp[-1]) > 0 and float(cp[-1]) == float(mb[-1]), \
        (cp, mb)
    log = (run2 / "logs" / "trainer.log").read_text()
    assert "train: done (rank 1)" in log, log[-3000:]
    assert (run2 / "trainer" / "global_step_4" / "optimizer.bin").is_file()
    assert not leftovers(run2), leftovers(run2)


def test_a_killed_rank_ends_the_run(tmp_path):
    need_stack()
    run = tmp_path / "run"
    cmd, env = run_sh(run, "--steps", "40", *FAST)
    p = subprocess.Popen(cmd, cwd=SRC, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        # wait for the first step, then kill rank 1
        for line in p.stdout:
            lines.append(line)
            if line.startswith("step 1 "):
                break
        log = (run / "logs" / "trainer.log").read_text()
        m = re.search(r"launched rank 1 as pid (\d+)", log)
        assert m, log[-3000:]
        t0 = time.time()
        os.kill(int(m.group(1)), signal.SIGKILL)
        rest, _ = p.communicate(timeout=240)
        lines.append(rest)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    took = time.time() - t0
    out = "".join(lines)
    assert p.returncode != 0, out[-3000:]
    assert took < 120, (took, out[-3000:])
    log = (run / "logs" / "trainer.log").read_text()
    assert re.search(r"a rank disconnected|a rank this process launched "
                     r"exited", log), log[-3000:]
    assert len(re.findall(r"^step \d+ of ", out, re.M)) < 40
    assert not leftovers(run), leftovers(run)


@pytest.mark.parametrize("args,why", [
    (["train", "trainer.n_gpus_per_node=0"], "at least 1"),
    (["train", "trainer.nnodes=2", "trainer.node_rank=2",
      "trainer.n_gpus_per_node=2"], "trainer.node_rank"),
    (["train", "trainer.world_size=3", "trainer.rank=3"], "bad rank 3"),
    (["train", "trainer.world_size=4", "trainer.nnodes=1",
      "trainer.n_gpus_per_node=2"], "is not trainer.nnodes"),
    (["train", "trainer.world_size=2", "trainer.rank=1"],
     "needs trainer.bootstrap"),
    (["serve", "trainer.n_gpus_per_node=2"], "data parallel is for train"),
])
def test_bad_rank_settings_are_refused(tmp_path, args, why):
    exe = f"{BIN}/lisa-trainer"
    if not os.access(exe, os.X_OK):
        pytest.skip("lisa-trainer not built")
    model = os.path.join(SRC, "models", "toy")
    data = os.path.join(SRC, "examples", "toy", "data", "train.json")
    p = subprocess.run([exe, args[0], "--model", model, "--train-data", data,
                        "--out", str(tmp_path), *args[1:]],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
    assert why in p.stderr, p.stderr[-2000:]
