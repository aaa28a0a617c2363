"""The local run (scripts/run.sh) end to end: broker (SQLite), reward
worker, gateway, controller (local bubblewrap backend, lisa-agent per
attempt) and the CPU trainer on the toy model and tasks, for a few steps.

Asserts that rollouts flow through the broker and get rewards, that the
trainer's checkpoints load back, that mean reward on the toy task rises
from the first steps to the last (fixed seeds, with a margin), that every
process the script started is gone afterwards, and that the run ends with
the plot.
"""
import json
import os
import re
import sqlite3
import subprocess
import time

import pytest

SRC = os.environ["LISA_SOURCE_DIR"]
BIN = os.path.join(os.environ["LISA_BINARY_DIR"], "bin")
STACK = ["lisa-broker", "lisa-reward", "lisa-gateway", "lisa-controller",
         "lisa-agent", "lisa-trainer", "lisa", "lisa-sft"]
STEPS = 10


def reward_of(rec):
    # docs/trainer-service.md: reward/mean over succeeded rollouts (null
    # when none succeeded)
    return float(rec.get("reward/mean") or 0.0)


def test_local_run_learns_the_toy_task(tmp_path):
    # About 8 minutes on 2 cores, and the toy reward does not rise reliably
    # yet (docs/local-run.md): opt in with LISA_E2E_LOCAL_RUN=1.
    if os.environ.get("LISA_E2E_LOCAL_RUN") != "1":
        pytest.skip("set LISA_E2E_LOCAL_RUN=1 to run the whole local stack")
    missing = [b for b in STACK if not os.access(f"{BIN}/{b}", os.X_OK)]
    if missing:
        pytest.skip("stack not built: " + ", ".join(missing))
    run = tmp_path / "run"
    env = dict(os.environ, LISA_BUILD_DIR=os.environ["LISA_BINARY_DIR"])
    t0 = time.time()
    p = subprocess.run(
        ["bash", os.path.join(SRC, "scripts", "run.sh"), "--no-build",
         "--out", str(run), "--steps", str(STEPS),
         "trainer.save_freq=6", "trainer.test_freq=0",
         "trainer.val_before_train=false", "data.seed=1"],
        cwd=SRC, env=env, capture_output=True, text=True, timeout=840)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    # Live progress: one line per step.
    assert len(re.findall(r"^step \d+ ", p.stdout, re.M)) >= STEPS, out
    # The plot.
    m = re.search(r"^plot: (.*\.svg)$", p.stdout, re.M)
    assert m and os.path.getsize(m.group(1)) > 1000, out[-2000:]

    # Every service the script started is gone.
    logs = run / "logs"
    for name in ("broker", "reward", "gateway", "controller", "trainer"):
        assert (logs / f"{name}.log").exists(), name
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True,
                        text=True).stdout
    assert str(run) not in ps, ps

    # Rollouts flowed through the broker and were scored.
    db = sqlite3.connect(run / "broker" / "broker.db")
    n, scored = db.execute(
        "SELECT count(*), count(reward) FROM rollouts").fetchone()
    db.close()
    recs = [json.loads(line) for line in
            (run / "trainer" / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
    train = [r for r in recs if r.get("kind") == "train"]
    assert len(train) >= STEPS
    assert scored >= STEPS * 4 * 4 * 0.9, (n, scored)  # batch 4 x n 4

    # Checkpoints load back: training resumes from one.
    ckpts = sorted(run.glob("trainer/global_step_*"),
                   key=lambda d: int(d.name.rsplit("_", 1)[1]))
    assert ckpts, list((run / "trainer").iterdir())
    last = ckpts[-1]
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (last / f).is_file(), f
    gen = tmp_path / "g"
    gen.mkdir()
    subprocess.run([f"{BIN}/lisa-toygen", "--out", str(gen), "--train", "1",
                    "--val", "1", "--sft", "6"], check=True, timeout=60)
    o = tmp_path / "o"
    o.mkdir()
    r = subprocess.run([f"{BIN}/lisa-sft", "--data", str(gen / "sft.jsonl"),
                        "--out", str(o), "--model", str(last), "--steps", "1",
                        "--batch", "2", "--lr", "1e-12", "--hold", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr

    # Mean reward rises: the last three steps against the first three.
    rewards = [reward_of(r) for r in train]
    first = sum(rewards[:3]) / 3
    last3 = sum(rewards[-3:]) / 3
    assert last3 > first + 0.1, (rewards, time.time() - t0)
