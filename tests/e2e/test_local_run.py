"""The local run (scripts/run.sh) end to end: broker (SQLite), reward
worker, gateway, controller (local bubblewrap backend, lisa-agent per
attempt) and the CPU trainer on the toy model and tasks, for a few steps.

Asserts that the bus runs with CURVE on (a key set per run, every service
with its own key), that rollouts flow through the broker and get rewards,
that the trainer's checkpoints load back, that mean reward on the toy task rises
(validation before and after training, and the training rollouts of the
last steps against the first ones, with margins), that every process the
script started is gone afterwards, and that the run ends with the plot.
It runs alone, as its own step of scripts/test.sh (ctest label
`localrun`), about 4 minutes on two cores.
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
STEPS = 30
# Validation samples per task: with one, the mean of 64 rollouts at
# temperature 1 moves by about 0.06 from run to run, and a run that learned
# once failed the margin below (0.39 before, 0.36 after, while its training
# reward rose); four halve that spread.
VAL_N = 4


def reward_of(rec):
    # docs/trainer-service.md: reward/mean over succeeded rollouts (null
    # when none succeeded)
    return float(rec.get("reward/mean") or 0.0)


def test_local_run_learns_the_toy_task(tmp_path):
    missing = [b for b in STACK if not os.access(f"{BIN}/{b}", os.X_OK)]
    if missing:
        pytest.skip("stack not built: " + ", ".join(missing))
    run = tmp_path / "run"
    env = dict(os.environ, LISA_BUILD_DIR=os.environ["LISA_BINARY_DIR"])
    t0 = time.time()
    p = subprocess.run(
        ["bash", os.path.join(SRC, "scripts", "run.sh"), "--no-build",
         "--out", str(run), "--steps", str(STEPS),
         "trainer.save_freq=10", f"trainer.test_freq={STEPS}",
         f"actor_rollout_ref.rollout.val_kwargs.n={VAL_N}"],
        cwd=SRC, env=env, capture_output=True, text=True, timeout=840)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    # Live progress: one line per step.
    assert len(re.findall(r"^step \d+ of ", p.stdout, re.M)) >= STEPS, out
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

    # The bus ran with CURVE on: the broker admitted the run's key set and
    # no service was refused a request of its role.
    blog = (logs / "broker.log").read_text()
    assert "(curve on, 5 client keys)" in blog, blog[-2000:]
    assert "the key's role is" not in blog, blog[-2000:]
    keys = run / "keys"
    for f in ("broker.cert_secret", "broker.cert", "trainer.cert_secret",
              "clients/gateway.cert"):
        assert (keys / f).is_file(), f
    assert (keys / "trainer.cert_secret").stat().st_mode & 0o077 == 0

    # Rollouts flowed through the broker and were scored.
    db = sqlite3.connect(run / "broker" / "broker.db")
    n, scored = db.execute(
        "SELECT count(*), count(reward) FROM rollouts").fetchone()
    db.close()
    recs = [json.loads(line) for line in
            (run / "trainer" / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
    train = [r for r in recs if r.get("kind") == "train"]
    val = [r for r in recs if r.get("kind") == "val"]
    assert len(train) >= STEPS
    assert len(val) == 2, val  # before training and after the last step
    assert scored >= STEPS * 4 * 8 * 0.9, (n, scored)  # batch 4 x n 8

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

    # The learning rate warms up linearly over the first three updates
    # (the toy defaults: lr 3e-4, lr_warmup_steps 3), then stays.
    lrs = [float(r["actor/lr"]) for r in train if "actor/lr" in r]
    assert lrs[:4] == pytest.approx([1e-4, 2e-4, 3e-4, 3e-4]), lrs

    # Mean reward rises. Validation: the 64 val tasks, VAL_N rollouts each,
    # before training and after it (a failed rollout counts 0). Training: 32 rollouts a step, the last
    # five steps against the first three (every step draws the four kinds
    # of task alike, so steps are comparable).
    rewards = [reward_of(r) for r in train]
    first = sum(rewards[:3]) / 3
    last = sum(rewards[-5:]) / 5
    v0, v1 = (float(v["val/reward/mean"]) for v in (val[0], val[-1]))
    assert [int(v["val/rollouts"]) for v in val] == [64 * VAL_N] * 2, val
    why = (f"train rewards {[round(x, 3) for x in rewards]}; validation "
           f"{v0:.3f} -> {v1:.3f} (failed {[v['val/failed'] for v in val]}); "
           f"rollouts failed in training "
           f"{sum(int(r.get('rollouts/failed', 0)) for r in train)}; "
           f"{time.time() - t0:.0f} s")
    assert last > first + 0.15, why
    assert v1 > v0 + 0.1, why
