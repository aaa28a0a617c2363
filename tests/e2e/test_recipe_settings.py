"""scripts/run.sh takes the Agent Lightning LLM-in-Sandbox example's launch
settings as they are: its verl_default_config as key=value arguments and
its --train-data-dir / --val-data-dir flags (upstream's folder layout),
with the toy model, checked by lisa-trainer check (--check) without
starting the stack. Each key the trainer only accepts with a note is
logged with that note; a value lisa cannot honour is refused saying what
lisa does instead; the toy run's settings stay with the toy run."""
import os
import subprocess

import pytest

from recipe_data import EXAMPLE, SRC, upstream_tree

BIN = os.path.join(os.environ["LISA_BINARY_DIR"], "bin")
RUN = os.path.join(SRC, "scripts", "run.sh")


def run_sh(*args):
    if not os.access(os.path.join(BIN, "lisa-trainer"), os.X_OK):
        pytest.skip("lisa-trainer not built")
    env = dict(os.environ, LISA_BUILD_DIR=os.environ["LISA_BINARY_DIR"])
    return subprocess.run(["bash", RUN, "--no-build", "--check", *args],
                          cwd=SRC, env=env, capture_output=True, text=True,
                          timeout=120)


def test_the_examples_launch_settings_are_accepted(tmp_path):
    tdir, vdirs = upstream_tree(str(tmp_path))
    p = run_sh("--model", "models/toy", "--train-data-dir", tdir,
               "--val-data-dir", vdirs, *EXAMPLE)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    assert "check: the settings and the data are good" in out
    # upstream's layout: the files the folders hold
    assert os.path.join(tdir, "train_verl.json") in out
    for d in vdirs.split(","):
        assert os.path.join(d, "test_verl.json") in out
    # every key accepted with a note says so; the folded ones say where
    for key in ("rollout.mode=async", "rollout.name=vllm",
                "enable_chunked_prefill=False", "enforce_eager=True",
                "fsdp_config.param_offload=True", "use_remove_padding=True",
                "critic_warmup=0", "ppo_micro_batch_size_per_gpu=1",
                "trace_aggregator.level=trajectory", "k8s.job_template_path"):
        assert key + "" in out and "accepted:" in out, key
    assert "engine.kv_memory=0.700000" in out
    assert "engine.max_len" in out
    assert "lisa has no wandb" in out
    assert "failed rollouts train with that score" in out
    assert "validation is greedy" in out
    # the trainer's dump shows what it will use
    assert "trainer.model = models/toy" in out
    assert "rollout.trajectory_timeout = 25m" in out  # 1,500 s
    assert "trainer.failed_rollouts = zero" in out
    # a toy-run setting is not slipped in
    assert "max_turns=4" not in out


def test_a_value_lisa_cannot_honour_is_refused(tmp_path):
    tdir, vdirs = upstream_tree(str(tmp_path))
    p = run_sh("--model", "models/toy", "--train-data-dir", tdir,
               "--val-data-dir", vdirs,
               "actor_rollout_ref.rollout.tensor_model_parallel_size=2")
    assert p.returncode != 0
    assert "tensor_model_parallel_size=2 is not supported" in p.stderr
    assert "trainer.n_gpus_per_node" in p.stderr


def test_toy_settings_only_for_the_toy_run(tmp_path):
    tdir, vdirs = upstream_tree(str(tmp_path))
    toy = run_sh()
    assert toy.returncode == 0, toy.stdout + toy.stderr
    assert "actor_rollout_ref.rollout.max_turns=4" in toy.stdout
    assert "the toy run's" in toy.stdout
    real = run_sh("--model", "models/toy", "--train-data-dir", tdir)
    assert real.returncode == 0, real.stdout + real.stderr
    assert "max_turns=4" not in real.stdout
    assert "lisa's (verl's) defaults" in real.stdout
    rec = run_sh("--recipe", "llm-in-sandbox", "--model", "models/toy",
                 "--train-data-dir", tdir, "--val-data-dir", vdirs)
    out = rec.stdout + rec.stderr
    assert rec.returncode == 0, out[-3000:]
    assert "recipe examples/recipes/llm-in-sandbox.conf" in rec.stdout
    assert "recipe    actor_rollout_ref.rollout.max_turns=30" in rec.stdout
    # the trainer read the file: its dump names it as the source
    assert "llm-in-sandbox.conf" in rec.stderr
    # a recipe without its data is refused with a pointer
    nodata = run_sh("--recipe", "llm-in-sandbox", "--model", "models/toy")
    assert nodata.returncode == 2 and "--train-data-dir" in nodata.stderr
    # a data folder without upstream's file is named
    bad = run_sh("--model", "models/toy", "--train-data-dir", str(tmp_path))
    assert bad.returncode != 0 and "train_verl.json" in bad.stderr
