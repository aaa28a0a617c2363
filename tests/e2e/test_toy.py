"""The toy task family and the toy model's warm start.

- lisa-toygen is deterministic, its records are verl-format with the right
  answers (recomputed here from each task's numbers file), and the four
  answers of a file differ, so only the right command earns the reward.
- Every warm-start trajectory runs a real command: run with bash, /testbed
  mapped to a scratch folder holding the task's files, it computes the
  ground truth, and writes it to the answer file exactly when the
  conversation is marked correct (else to another file: the
  demonstrator's habit); the share of correct ones follows --sft-correct.
- lisa-sft lowers the loss, saves a checkpoint, and the checkpoint loads
  back (training resumes from it).
- lisa-sft --backend cpu (the trainer's backend vtable, the code the GPU
  runs too) takes the default path's first step: the same loss and the
  same weights; its steps lower the loss and the held-out NLL; a bad
  backend name is refused.
- The committed warm-start model (models/toy) loads and, sampling at
  temperature 1 as the rollouts do, makes the right first tool call on
  some fresh tasks and not on all (the room RL has).
"""
import json
import os
import re
import struct
import subprocess
from array import array

import pytest

SRC = os.environ["LISA_SOURCE_DIR"]
BIN = os.path.join(os.environ["LISA_BINARY_DIR"], "bin")
TOKDIR = os.path.join(SRC, "tests", "fixtures", "byte-tokenizer")


def gen(out, *args):
    out.mkdir(exist_ok=True)
    subprocess.run([f"{BIN}/lisa-toygen", "--out", str(out), *args],
                   check=True, timeout=60)
    return out


FILE = "/testbed/documents/numbers.txt"
QUESTIONS = {
    f"How many numbers are in {FILE}?": len,
    f"Add up the numbers in {FILE}.": sum,
    f"What is the first number in {FILE}?": lambda v: v[0],
    f"What is the last number in {FILE}?": lambda v: v[-1],
}


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
    asked = set()
    for r in train + val:
        assert r["data_source"] == "math_toy"
        q = r["extra_info"]["problem_statement"]
        assert r["prompt"] == [{"role": "user", "content": q}]
        gt = r["reward_model"]["ground_truth"]
        files = r["extra_info"]["input_files"]
        assert list(files) == ["numbers.txt"]
        nums = [int(x) for x in files["numbers.txt"].split()]
        assert 3 <= len(nums) <= 12 and len(set(nums)) == len(nums)
        assert all(13 <= x <= 999 for x in nums)
        assert q in QUESTIONS, q
        asked.add(q)
        assert int(gt) == QUESTIONS[q](nums)
        # Only one of the four commands gives the ground truth.
        answers = [f(nums) for f in QUESTIONS.values()]
        assert answers.count(int(gt)) == 1
    assert asked == set(QUESTIONS)
    ids = [r["extra_info"]["id"] for r in train + val]
    assert len(set(ids)) == len(ids)


def test_bad_arguments_are_refused(tmp_path):
    for args in (["--sft-correct", "1.5"], ["--sft-correct", "x"],
                 ["--train", "-1"], ["--seed"], ["--what", "1"]):
        r = subprocess.run([f"{BIN}/lisa-toygen", "--out", str(tmp_path),
                            *args], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2 and "usage:" in r.stderr, args


def run_call(tmp_path, i, conv, call):
    tb = tmp_path / f"testbed{i}"
    (tb / "documents").mkdir(parents=True)
    for name, text in conv["files"].items():
        (tb / "documents" / name).write_text(text)
    cmd = call["arguments"]["command"].replace("/testbed", str(tb))
    subprocess.run(["bash", "-c", cmd], check=True, timeout=30)
    return {f.name: f.read_text().strip() for f in tb.glob("*.txt")}


def test_trajectories_run_real_commands(tmp_path):
    d = gen(tmp_path / "d", "--train", "1", "--val", "1", "--sft", "60")
    right = 0
    lines = (d / "sft.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
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
        got = run_call(tmp_path, i, conv, call)
        # The right command's output, in one file: the answer file
        # exactly when the conversation is marked correct.
        assert list(got.values()) == [conv["answer"]], (got, conv)
        assert ("answer.txt" in got) == conv["correct"], (got, conv)
        right += conv["correct"]
    # --sft-correct defaults to 0.4: 60 draws, far from 0 and from 60.
    assert 10 <= right <= 40, right
    # --sft-correct 1: a perfect demonstrator.
    e = gen(tmp_path / "e", "--train", "1", "--val", "1", "--sft", "12",
            "--sft-correct", "1")
    for i, line in enumerate((e / "sft.jsonl").read_text().splitlines()):
        conv = json.loads(line)
        assert conv["correct"] is True
        got = run_call(tmp_path, 100 + i, conv,
                       conv["messages"][2]["tool_calls"][0]["function"])
        assert got == {"answer.txt": conv["answer"]}


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


TINY = {"model_type": "qwen3", "hidden_size": 32, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 265,
        "max_position_embeddings": 2048, "tie_word_embeddings": True}


def weights(path):
    """Every F32 tensor of a safetensors file, as flat arrays."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", (name, t["dtype"])
        a, b = t["data_offsets"]
        out[name] = array("f", raw[8 + n + a:8 + n + b])
    return out


def test_sft_backend_takes_the_default_paths_step(tmp_path):
    d = gen(tmp_path / "d", "--train", "1", "--val", "1", "--sft", "40",
            "--seed", "3")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    common = ["--data", str(d / "sft.jsonl"), "--config", str(cfg),
              "--tokenizer", TOKDIR, "--steps", "30", "--batch", "4",
              "--lr", "2e-2", "--window", "48", "--hold", "4", "--eval", "2",
              "--eval-every", "10", "--threads", "1"]
    # One step each way from the same random model, batch and lr.
    logs, ws = {}, {}
    for name, extra in (("default", []), ("cpu", ["--backend", "cpu"])):
        out = tmp_path / name
        out.mkdir()
        logs[name] = sft(*common, "--out", str(out), "--stop", "1", *extra)
        ws[name] = weights(out / "model.safetensors")
    first = {k: float(re.search(r"^step 1 loss ([\d.]+)", v, re.M).group(1))
             for k, v in logs.items()}
    assert abs(first["default"] - first["cpu"]) < 1e-4, first
    assert "backend cpu" in logs["cpu"]
    # the starting weights: a step too small to move them
    (tmp_path / "init").mkdir()
    sft(*common, "--out", str(tmp_path / "init"), "--stop", "1", "--lr",
        "1e-30")
    init = weights(tmp_path / "init" / "model.safetensors")
    assert ws["default"].keys() == ws["cpu"].keys() == init.keys()
    diff = moved = 0.0
    for k, a in ws["default"].items():
        b, c = ws["cpu"][k], init[k]
        assert len(a) == len(b) == len(c), k
        diff = max(diff, max(abs(x - y) for x, y in zip(a, b)))
        moved = max(moved, max(abs(x - y) for x, y in zip(a, c)))
    # AdamW's first step moves weights by about lr / 20 (warmup): 1e-3
    assert moved > 5e-4, moved
    assert diff < 1e-6, (diff, moved)
    # Several steps lower the loss and the held-out NLL; the checkpoint
    # has the tokenizer files.
    out = tmp_path / "many"
    out.mkdir()
    log = sft(*common, "--out", str(out), "--backend", "cpu")
    losses = [float(x) for x in re.findall(r"^step \d+ loss ([\d.]+)", log,
                                           re.M)]
    assert len(losses) == 4, log
    assert losses[-1] < 0.65 * losses[0], log
    held = [float(x) for x in re.findall(r"held-out NLL on 2: ([\d.]+)", log)]
    assert len(held) == 4 and held[-1] < held[0], log
    for f in ("config.json", "model.safetensors", "tokenizer.json",
              "tokenizer_config.json"):
        assert (out / f).is_file(), f
    # The checkpoint loads back on the backend (--model).
    out2 = tmp_path / "again"
    out2.mkdir()
    log2 = sft("--data", str(d / "sft.jsonl"), "--model", str(out), "--out",
               str(out2), "--backend", "cpu", "--steps", "1", "--batch", "4",
               "--lr", "1e-9", "--window", "48", "--hold", "4", "--eval", "2",
               "--threads", "1")
    again = float(re.search(r"^step 1 loss ([\d.]+)", log2, re.M).group(1))
    assert again < 0.65 * losses[0], (again, losses)
    assert (out2 / "tokenizer.json").is_file()
    # Bad backends are refused with a clear error.
    r = subprocess.run([f"{BIN}/lisa-sft", *common, "--out", str(out2),
                        "--backend", "tpu"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "unknown backend 'tpu'" in r.stderr, r.stderr
    r = subprocess.run([f"{BIN}/lisa-sft", *common, "--out", str(out2),
                        "--backend", "cuda", "--steps", "1"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:  # a build without CUDA, or a machine without GPU
        assert ("backend cuda is not built into this binary" in r.stderr or
                "no usable CUDA device" in r.stderr), r.stderr


def test_committed_warm_start_solves_some_tasks(tmp_path):
    model = os.path.join(SRC, "models", "toy")
    if not os.path.isfile(os.path.join(model, "model.safetensors")):
        pytest.fail("models/toy has no model.safetensors")
    # Fresh tasks with the right first call as reference.
    d = gen(tmp_path / "d", "--train", "1", "--val", "1", "--sft", "21",
            "--seed", "99", "--sft-correct", "1")
    out = tmp_path / "o"
    out.mkdir()
    log = sft("--data", str(d / "sft.jsonl"), "--out", str(out), "--model",
              model, "--steps", "1", "--batch", "1", "--lr", "1e-12",
              "--hold", "20", "--eval", "20", "--eval-every", "1000",
              "--eval-temp", "1", "--threads", "2", timeout=280)
    rate = float(re.search(r"final first-turn match on 20 held out: "
                           r"([\d.]+)", log).group(1))
    # Sampling as the rollouts do, the warm start makes the exact right
    # call (right command, answer file) on some fresh tasks and not on all:
    # RL has room to improve it.
    assert 0.1 <= rate <= 0.8, log


def test_committed_tokenizer_matches_tokenizers(tmp_path):
    """models/toy's BPE tokenizer (examples/toy/make_tokenizer.py): lisa's
    tokenizer gives the ids the `tokenizers` package gives, on rendered
    toy conversations and on text the toy never shows, and decodes them
    back."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    model = os.path.join(SRC, "models", "toy")
    ref = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    hf = PreTrainedTokenizerFast.from_pretrained(model)
    d = gen(tmp_path / "d", "--train", "1", "--val", "1", "--sft", "12",
            "--seed", "5", "--sft-correct", "0.5")
    texts = []
    for line in (d / "sft.jsonl").read_text().splitlines():
        conv = json.loads(line)
        for m in conv["messages"]:
            if m.get("content") is None:
                m["content"] = ""
        texts.append(hf.apply_chat_template(conv["messages"],
                                            tools=conv["tools"],
                                            tokenize=False))
    texts += ["héllo wörld 123 ∑ 日本語 😀  \n\n  tabs\t\tx",
              "<|im_start|>user\nHow many?<|im_end|>\n<tool_call>",
              "".join(chr(c) for c in range(32, 127)) * 3]
    for t in texts:
        want = ref.encode(t).ids
        r = subprocess.run([f"{BIN}/lisa", "tokenize", "--tokenizer", model],
                           input=t.encode(), capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        got = json.loads(r.stdout)
        assert got == want, t[:80]
        r = subprocess.run([f"{BIN}/lisa", "detokenize", "--tokenizer",
                            model], input=json.dumps(got).encode(),
                           capture_output=True, timeout=60)
        assert r.returncode == 0 and r.stdout.decode() == t, t[:80]
    # The toy's conversations are far fewer tokens than bytes.
    conv = texts[0]
    assert len(ref.encode(conv).ids) * 3 < len(conv.encode())
