"""What an operator sees of a training run, through the real trainer (tiny
Qwen3 model, real lisa-broker and lisa-reward, the scripted agent of
test_trainer_service):

- trainer.logger=['console','tensorboard'] writes events.out.tfevents.*
  under <out>/tensorboard that TensorBoard's own reader (EventAccumulator)
  loads: the file version, and every number of every metrics.jsonl line
  as a scalar at its step, equal to the value as a float32; every frame's
  CRCs match TensorBoard's own masked CRC-32C.
- progress.log holds one rounded step line per step; progress.now (the
  live line) is gone once the run ends; the console logger puts the step
  lines in the trainer's log.
- an unknown logger is refused before any model is loaded.
"""
import json
import os
import re
import struct
import subprocess

from test_trainer_service import (TRAINER, Agent, model_dir, one_step,  # noqa: F401
                                  stack, write_data)

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

# verl's variable would move the event files (trainer.tensorboard_dir)
os.environ.pop("TENSORBOARD_DIR", None)


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def frames(path):
    """The payloads of a TFRecord file, each CRC checked by TensorBoard's
    own masked CRC-32C."""
    out = []
    with open(path, "rb") as f:
        while True:
            head = f.read(12)
            if not head:
                return out
            n, crc = struct.unpack("<QI", head)
            assert crc == masked_crc32c(head[:8])
            data = f.read(n)
            (dcrc,) = struct.unpack("<I", f.read(4))
            assert dcrc == masked_crc32c(data)
            out.append(data)


def test_tensorboard_events_and_progress_lines(stack, tmp_path):
    os.makedirs(tmp_path / "val")
    write_data(str(tmp_path / "val" / "val.json"), 2, source="math_val",
               jsonl=False)
    one_step(stack, tmp_path, Agent(stack[0].ep["rpc"]),
             "trainer.total_training_steps=2", "trainer.test_freq=2",
             "data.val_files=" + str(tmp_path / "val"),
             "trainer.logger=['console','tensorboard']")
    out = tmp_path / "out"
    lines = [json.loads(x) for x in open(out / "metrics.jsonl")]
    assert [(m["kind"], m["step"]) for m in lines] == [
        ("train", 1), ("train", 2), ("val", 2)]

    tb = out / "tensorboard"
    files = [f for f in os.listdir(tb) if f.startswith("events.out.tfevents.")]
    assert len(files) == 1, files
    # the version, then one event per metrics line
    assert len(frames(tb / files[0])) == 4

    acc = event_accumulator.EventAccumulator(
        str(tb), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    assert acc.file_version == 2.0
    tags = set(acc.Tags()["scalars"])
    want = {}
    for m in lines:
        for k, v in m.items():
            if k == "step" or isinstance(v, str) or v is None:
                continue
            # a validation line shares its step with the step's line: only
            # its own keys become scalars (one value per tag and step)
            if m["kind"] == "val" and not (k.startswith("val/") or
                                           k == "time/val_s"):
                continue
            want.setdefault(k, {})[m["step"]] = f32(float(v))
    assert tags == set(want), tags ^ set(want)
    assert {"reward/mean", "actor/entropy", "rollouts/total", "time/step_s",
            "val/reward/mean", "val/reward/math_val/mean"} <= tags
    for k, by_step in want.items():
        got = {e.step: e.value for e in acc.Scalars(k)}
        assert got == by_step, (k, got, by_step)

    # progress: the rounded step lines, no live line left behind
    plog = (out / "progress.log").read_text().splitlines()
    assert len(plog) == 3
    assert plog[2].startswith("step 2 validation: reward %.3f \u00b1%.3f  "
                              "rollouts 2 (%d failed)" % (
                                  lines[2]["val/reward/mean"],
                                  lines[2]["val/reward/std"],
                                  lines[2]["val/failed"])), plog[2]
    for m, line in zip(lines[:2], plog):
        assert line.startswith("step %d of 2  reward %.3f \u00b1%.3f  "
                               "rollouts %d/%d" % (
                                   m["step"], m["reward/mean"],
                                   m["reward/std"], m["rollouts/succeeded"],
                                   m["rollouts/total"])), line
        assert "entropy %.3g" % m["actor/entropy"] in line
        assert " step %.1fs (rollouts %.1fs, train %.1fs)" % (
            m["time/step_s"], m["time/rollout_s"], m["time/train_s"]) in line
        # no raw doubles
        assert not re.search(r"\d\.\d{5,}", line), line
    assert not (out / "progress.now").exists()
    log = (tmp_path / "trainer.log").read_text()
    assert all(line in log for line in plog)


def test_unknown_logger_is_refused(tmp_path):
    model = model_dir(str(tmp_path))
    train = write_data(str(tmp_path / "train.jsonl"), 2)
    r = subprocess.run([TRAINER, "train", "--model", model, "--train-data",
                        train, "trainer.logger=[console,swanlab]"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "trainer.logger" in r.stderr and "'swanlab'" in r.stderr
    assert "console and tensorboard" in r.stderr
