"""The toy task family and the toy model's warm start.

- lisa-toygen is deterministic, its records are verl-format with the right
  answers (recomputed here), and every warm-start trajectory really solves
  its task: its bash command, run with /testbed mapped to a scratch
  folder holding the task's files, writes the ground truth.
- lisa-sft lowers the loss, saves a checkpoint, and the checkpoint loads
  back (training resumes from it).
- The committed warm-start model (models/toy) loads and reproduces the
  correct first tool call on a share of fresh tasks.
"""
import json
import os
import re
import subprocess

import pytest

SRC = os.environ["LISA_SOURCE_DIR"]
BIN = os.path.join(os.environ["LISA_BINARY_DIR"], "bin")
TOKDIR = os.path.join(SRC, "tests", "fixtures", "byte-tokenizer")


def gen(out, *args):
    out.mkdir(exist_ok=True)
    subprocess.run([f"{BIN}/lisa-toygen", "--out", str(out), *args],
                   check=True, timeout=60)
    return out


def arith(expr):
    """Left-to-right with * first, as bash's $(( )) does for these forms."""
    toks = re.findall(r"\d+|[-+*]", expr)
    vals, ops = [int(toks[0])], []
    for op, v in zip(toks[1::2], toks[2::2]):
        if op == "*":
            vals[-1] *= int(v)
        else:
            ops.append(op)
            vals.append(int(v))
    acc = vals[0]
    for op, v in zip(ops, vals[1:]):
        acc = acc + v if op == "+" else acc - v
    return acc


def test_usage_records_are_verl_tasks_with_right_answers(tmp_path):
    a = gen(tmp_path / "a", "--train", "40", "--val", "10", "--sft", "20")
    b = gen(tmp_path / "b", "--train", "40", "--val", "10", "--sft", "20")
    for f in ("train.json", "val.json", "sft.jsonl"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    c = gen(tmp_path / "c", "--train", "40", "--val", "10", "--seed", "8")
    assert (c / "train.json").read_bytes() != (a / "train.json").read_bytes()
    train = json.loads((a / "train.json").read_text())
    val = json.loads((a / "val.json").read_text())
    assert len(train) == 40 and len(val) == 10
    kinds = set()
    for r in train + val:
        assert r["data_source"] == "math_toy"
        q = r["extra_info"]["problem_statement"]
        assert r["prompt"] == [{"role": "user", "content": q}]
        gt = r["reward_model"]["ground_truth"]
        m = re.fullmatch(r"Compute ([-+*\d]+)\.", q)
        if m:
            kinds.add("arith")
            assert int(gt) == arith(m.group(1))
            assert r["extra_info"]["input_files"] == {}
            continue
        files = r["extra_info"]["input_files"]
        assert len(files) == 1
        m = re.fullmatch(r"Find the value of (\w+) in "
                         r"/testbed/documents/table.txt\.", q)
        if m:
            kinds.add("lookup")
            table = dict(line.split("=") for line in
                         files["table.txt"].split())
            assert table[m.group(1)] == gt
        elif q == "How many lines does /testbed/documents/notes.txt have?":
            kinds.add("count")
            assert int(gt) == len(files["notes.txt"].splitlines())
        else:
            assert q == "Add up the numbers in /testbed/documents/numbers.txt."
            kinds.add("sum")
            assert int(gt) == sum(map(int, files["numbers.txt"].split()))
    assert kinds == {"arith", "lookup", "count", "sum"}
    ids = [r["extra_info"]["id"] for r in train + val]
    assert len(set(ids)) == len(ids)


def test_trajectories_solve_their_tasks(tmp_path):
    d = gen(tmp_path / "d", "--train", "1", "--val", "1", "--sft", "40")
    for i, line in enumerate((d / "sft.jsonl").read_text().splitlines()):
        conv = json.loads(line)
        msgs = conv["messages"]
        assert [m["role"] for m in msgs] == ["system", "user", "assistant",
                                              "tool", "assistant"]
        # The toy domain's compact prompt, as lisa-agent sends it
        # (tests/unit/agent/agt_prompt_test.c holds the agent to it).
        assert msgs[0]["content"] == (
            "You solve tasks with tools. Write the answer to "
            "/testbed/answer.txt, then call submit.")
        assert [t["function"]["name"] for t in conv["tools"]] == [
            "execute_bash", "submit"]
        assert msgs[1]["content"].endswith("\nSteps Remaining: 4")
        call = msgs[2]["tool_calls"][0]["function"]
        assert call["name"] == "execute_bash"
        assert msgs[4]["tool_calls"][0]["function"]["name"] == "submit"
        tb = tmp_path / f"testbed{i}"
        (tb / "documents").mkdir(parents=True)
        for name, text in conv["files"].items():
            (tb / "documents" / name).write_text(text)
        cmd = call["arguments"]["command"].replace("/testbed", str(tb))
        subprocess.run(["bash", "-c", cmd], check=True, timeout=30)
        assert (tb / "answer.txt").read_text().strip() == conv["answer"]


def sft(*args, timeout=240):
    r = subprocess.run([f"{BIN}/lisa-sft", *args], capture_output=True,
                       text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_sft_lowers_loss_and_checkpoint_loads_back(tmp_path):
    d = gen(tmp_path / "d", "--train", "1", "--val", "1", "--sft", "40",
            "--seed", "3")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({
        "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 265,
        "max_position_embeddings": 2048, "tie_word_embeddings": True}))
    out = tmp_path / "ckpt"
    out.mkdir()
    log = sft("--data", str(d / "sft.jsonl"), "--out", str(out), "--config",
              str(cfg), "--tokenizer", TOKDIR, "--steps", "30", "--batch",
              "4", "--lr", "2e-2", "--window", "48", "--hold", "4", "--eval",
              "2", "--eval-every", "1000", "--threads", "1")
    losses = [float(x) for x in re.findall(r"^step \d+ loss ([\d.]+)", log,
                                           re.M)]
    assert len(losses) >= 3
    assert losses[-1] < 0.65 * losses[0], log
    for f in ("config.json", "model.safetensors", "tokenizer.json",
              "tokenizer_config.json"):
        assert (out / f).is_file(), f
    # Resuming from the checkpoint starts where training ended.
    out2 = tmp_path / "ckpt2"
    out2.mkdir()
    log2 = sft("--data", str(d / "sft.jsonl"), "--out", str(out2), "--model",
               str(out), "--steps", "1", "--batch", "4", "--lr", "1e-9",
               "--window", "48", "--hold", "4", "--eval", "2", "--threads",
               "1")
    first = float(re.search(r"^step 1 loss ([\d.]+)", log2, re.M).group(1))
    assert first < 0.65 * losses[0], (first, losses)


def test_committed_warm_start_solves_some_tasks(tmp_path):
    model = os.path.join(SRC, "models", "toy")
    if not os.path.isfile(os.path.join(model, "model.safetensors")):
        pytest.fail("models/toy has no model.safetensors")
    d = gen(tmp_path / "d", "--train", "1", "--val", "1", "--sft", "16",
            "--seed", "99")
    out = tmp_path / "o"
    out.mkdir()
    log = sft("--data", str(d / "sft.jsonl"), "--out", str(out), "--model",
              model, "--steps", "1", "--batch", "1", "--lr", "1e-12",
              "--hold", "15", "--eval", "15", "--eval-every", "1000",
              "--threads", "2", timeout=280)
    rate = float(re.search(r"final first-turn match on 15 held out: "
                           r"([\d.]+)", log).group(1))
    # Greedy decoding reproduces the exact tool call on some fresh tasks,
    # and not on all (RL has room to improve it).
    assert rate >= 0.1, log
