"""scripts/run.sh --recipe llm-in-sandbox through the whole stack (broker,
reward worker, gateway, controller with bubblewrap sandboxes, CPU trainer)
with the toy model and a tiny data tree in upstream's layout, shortened by
key=value overrides to a couple of steps (under 3 minutes on two cores):
the recipe's values reach the trainer, the run trains with mini-batches,
validates after its last step per data source, checkpoints; then
trainer.val_only validates the checkpoint alone and exits. It runs in the
local-run step (ctest label `localrun`)."""
import json
import os
import re
import subprocess

import pytest

from recipe_data import SRC, upstream_tree

BIN = os.path.join(os.environ["LISA_BINARY_DIR"], "bin")
STACK = ["lisa-broker", "lisa-reward", "lisa-gateway", "lisa-controller",
         "lisa-agent", "lisa-trainer", "lisa"]
SHORT = [
    "--steps", "2",
    "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    "actor_rollout_ref.rollout.max_turns=3",
    "actor_rollout_ref.rollout.max_tokens_per_call=64",
    "actor_rollout_ref.rollout.max_context_tokens=1024",
    "actor_rollout_ref.rollout.max_model_len=2048",
    "actor_rollout_ref.actor.optim.lr=1e-4",
    "trainer.test_freq=20", "trainer.save_freq=20",
    "trainer.step_timeout=5m",
]


def run_sh(*args, timeout=300):
    env = dict(os.environ, LISA_BUILD_DIR=os.environ["LISA_BINARY_DIR"])
    return subprocess.run(["bash", os.path.join(SRC, "scripts", "run.sh"),
                           "--no-build", *args], cwd=SRC, env=env,
                          capture_output=True, text=True, timeout=timeout)


def records(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def test_recipe_runs_end_to_end_and_val_only(tmp_path):
    missing = [b for b in STACK if not os.access(f"{BIN}/{b}", os.X_OK)]
    if missing:
        pytest.skip("stack not built: " + ", ".join(missing))
    tdir, vdirs = upstream_tree(str(tmp_path / "data"), n_train=8, n_val=2)
    run = tmp_path / "run"
    p = run_sh("--recipe", "llm-in-sandbox", "--model", "models/toy",
               "--train-data-dir", tdir, "--val-data-dir", vdirs,
               "--out", str(run), *SHORT)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "recipe examples/recipes/llm-in-sandbox.conf" in p.stdout
    log = (run / "logs" / "trainer.log").read_text()
    # the recipe's values, where the command line did not replace them
    assert "algorithm.adv_estimator = rloo" in log
    assert "actor_rollout_ref.actor.clip_ratio_high = 0.28" in log  # 0.28000…
    assert "actor_rollout_ref.actor.optim.lr = 0.0001" in log  # override
    assert "trainer.failed_rollouts = zero" in log
    assert "validation is greedy" in log
    recs = records(run / "trainer" / "metrics.jsonl")
    train = [r for r in recs if r.get("kind") == "train"]
    val = [r for r in recs if r.get("kind") == "val"]
    assert [r["step"] for r in train] == [1, 2], recs
    for r in train:
        assert r["rollouts/total"] == 4
        if r.get("update/skipped") == 0:
            assert r["actor/mini_batches"] == 2, r  # 1 prompt of 2 each
    # validation after the last step (test_freq 20 > 2), per data source
    assert [v["step"] for v in val] == [2], val
    for src in ("math_mini", "biomed_mini"):
        assert val[0]["val/reward/%s/count" % src] == 2, val[0]
    ckpt = run / "trainer" / "global_step_2"
    assert (ckpt / "model.safetensors").is_file()
    # TensorBoard under <project>/<experiment>
    tb = run / "trainer" / "tensorboard" / "llm-in-sandbox"
    assert tb.is_dir() and any(tb.iterdir()), list(
        (run / "trainer").iterdir())

    # the checkpoint, validated alone
    run2 = tmp_path / "val"
    p = run_sh("--recipe", "llm-in-sandbox", "--model", str(ckpt),
               "--train-data-dir", tdir, "--val-data-dir", vdirs,
               "--out", str(run2), *SHORT, "trainer.val_only=true")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    recs = records(run2 / "trainer" / "metrics.jsonl")
    assert [r["kind"] for r in recs] == ["val"], recs
    for src in ("math_mini", "biomed_mini"):
        assert recs[0]["val/reward/%s/count" % src] == 2
        assert "val/reward/%s/mean" % src in recs[0]
    assert not list((run2 / "trainer").glob("global_step_*"))
    assert not re.search(r"^step \d+ of ", p.stdout, re.M)
