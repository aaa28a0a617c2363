"""The arithmetic word problems of the SmolLM2 learning run (examples/arith).

- make_arith.py is deterministic from its seed, its records are verl tasks
  whose answers are right (recomputed here from each problem's text), the
  validation problems are not among the training ones, and the committed
  data is what the generator writes with its defaults.
- lisa-reward's math rule (the real program) scores the answer file that
  the demonstrated command writes: the ground truth 1, another number 0.
- The demonstrations (the default family, expr) are bare arithmetic
  questions of the four operations ("What is 37 + 55?"), no word
  problem, with operands in the word problems' ranges; they carry the toy
  domain's system prompt and tools byte for byte as lisa-agent sends them
  for math_toy* tasks (common/include/lisa/lisa_toy.h), and their command
  lets bash compute the question's own expression into the answer file:
  run with bash in a scratch /testbed, it writes exactly the answer. The
  lookup family (an option) answers with a number of its question.
- scripts/smol-rl.sh refuses bad arguments before starting anything.
"""
import json
import os
import re
import subprocess
import sys

SRC = os.environ["LISA_SOURCE_DIR"]
BIN = os.path.join(os.environ["LISA_BINARY_DIR"], "bin")
GEN = os.path.join(SRC, "examples", "arith", "make_arith.py")
DATA = os.path.join(SRC, "examples", "arith", "data")


def gen(out, *args):
    subprocess.run([sys.executable, GEN, str(out), *args], check=True,
                   timeout=60, capture_output=True)
    return out


PATTERNS = [
    (r"has (\d+) \w+ and gets (\d+) more\.", lambda a, b: a + b),
    (r"has (\d+) \w+ and gives away (\d+)\.", lambda a, b: a - b),
    (r"buys (\d+) bags with (\d+) \w+ in each bag\.", lambda a, b: a * b),
    (r"shares (\d+) \w+ equally among (\d+) friends\.", lambda a, b: a // b),
]


def solve(text):
    for pat, fn in PATTERNS:
        m = re.search(pat, text)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if "shares" in pat:
                assert a % b == 0, text
            return fn(a, b)
    raise AssertionError(f"no known problem shape: {text}")


def test_usage_records_are_verl_tasks_with_right_answers(tmp_path):
    a = gen(tmp_path / "a", "--train", "200", "--val", "40", "--sft", "20")
    b = gen(tmp_path / "b", "--train", "200", "--val", "40", "--sft", "20")
    for f in ("train.json", "val.json", "sft.jsonl"):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    c = gen(tmp_path / "c", "--train", "200", "--val", "40", "--seed", "2")
    assert (c / "val.json").read_bytes() != (a / "val.json").read_bytes()
    train = json.loads((a / "train.json").read_text())
    val = json.loads((a / "val.json").read_text())
    assert len(train) == 200 and len(val) == 40
    kinds = set()
    for r in train + val:
        assert r["data_source"] == "math_toy_arith"
        q = r["extra_info"]["problem_statement"]
        assert r["prompt"] == [{"role": "user", "content": q}]
        assert r["reward_model"]["ground_truth"] == str(solve(q))
        kinds.add(next(i for i, (p, _) in enumerate(PATTERNS)
                       if re.search(p, q)))
    assert kinds == {0, 1, 2, 3}
    seen = {r["extra_info"]["problem_statement"] for r in train}
    assert not seen & {r["extra_info"]["problem_statement"] for r in val}
    assert len(seen) == len(train)


def test_committed_data_is_the_generators(tmp_path):
    d = gen(tmp_path / "d")
    for f in ("train.json", "val.json", "sft.jsonl"):
        with open(os.path.join(DATA, f), "rb") as fh:
            assert fh.read() == (d / f).read_bytes(), f


def test_difficulty_knob_and_bad_arguments(tmp_path):
    small = gen(tmp_path / "s", "--max", "9", "--train", "30", "--val", "10")
    for r in json.loads((small / "train.json").read_text()):
        q = r["extra_info"]["problem_statement"]
        if "gets" in q or "gives away" in q:
            assert all(int(n) <= 9 for n in re.findall(r"\d+", q)), q
    bad = subprocess.run([sys.executable, GEN, str(tmp_path / "x"), "--max",
                          "2"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--max" in bad.stderr
    # more distinct problems asked for than the range holds
    few = subprocess.run([sys.executable, GEN, str(tmp_path / "y"), "--max",
                          "3", "--train", "100000"], capture_output=True,
                         text=True, timeout=120)
    assert few.returncode != 0 and "too few distinct" in few.stderr


def c_string(header, name):
    """The value of a #define of concatenated C string literals."""
    text = open(header).read()
    m = re.search(rf"#define {name}\s+((?:\\\s*|\"(?:[^\"\\]|\\.)*\"\s*)+)",
                  text)
    assert m, name
    parts = re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(1))
    return "".join(parts).encode().decode("unicode_escape")


EXPR = re.compile(r"What is (\d+) ([-+*/]) (\d+)\?")


def run_cmd(tmp_path, cmd):
    """The answer file a demonstrated command writes, run with bash in a
    scratch /testbed."""
    testbed = tmp_path / "testbed"
    testbed.mkdir(exist_ok=True)
    (testbed / "answer.txt").unlink(missing_ok=True)
    subprocess.run(["bash", "-c", cmd.replace("/testbed", str(testbed))],
                   check=True, timeout=10)
    return (testbed / "answer.txt").read_text()


def test_demonstrations_teach_the_format_and_bash_arithmetic(tmp_path):
    header = os.path.join(SRC, "common", "include", "lisa", "lisa_toy.h")
    system = c_string(header, "LISA_TOY_SYSTEM")
    tools = json.loads(c_string(header, "LISA_TOY_TOOLS"))
    with open(os.path.join(DATA, "sft.jsonl")) as f:
        demos = [json.loads(line) for line in f]
    assert len(demos) >= 100
    ops = set()
    for i, d in enumerate(demos):
        assert d["tools"] == tools
        m = d["messages"]
        assert [x["role"] for x in m] == ["system", "user", "assistant",
                                          "tool", "assistant"]
        assert m[0]["content"] == system
        q = m[1]["content"].rsplit("\nSteps Remaining:", 1)[0]
        # a bare expression: no word problem, no word of one
        assert not any(re.search(p, q) for p, _ in PATTERNS), q
        e = EXPR.fullmatch(q)
        assert e, q
        x, op, y = int(e.group(1)), e.group(2), int(e.group(3))
        ops.add(op)
        if op in "+-":  # the word problems' ranges (--max 50)
            assert 1 <= y <= 50 and 2 <= x <= 50, q
            assert op == "+" or y < x, q
        else:
            assert 2 <= y <= 12, q
            assert op == "/" or 2 <= x <= 12, q
        call = m[2]["tool_calls"][0]["function"]
        assert call["name"] == "execute_bash"
        assert m[4]["tool_calls"][0]["function"]["name"] == "submit"
        cmd = call["arguments"]["command"]
        # bash computes the question's expression; the answer is not
        # written out
        assert cmd == f"echo $(({x} {op} {y})) > /testbed/answer.txt", cmd
        if i < 60:
            want = {"+": x + y, "-": x - y, "*": x * y}.get(op)
            if op == "/":
                assert x % y == 0, q
                want = x // y
            assert run_cmd(tmp_path, cmd) == f"{want}\n", cmd
    assert ops == {"+", "-", "*", "/"}


def test_lookup_family_answers_with_a_number_of_its_question(tmp_path):
    d = gen(tmp_path / "l", "--train", "20", "--val", "5", "--sft", "30",
            "--sft-family", "lookup")
    demos = [json.loads(x) for x in (d / "sft.jsonl").read_text().splitlines()]
    assert len(demos) == 30
    for dm in demos:
        q = dm["messages"][1]["content"].rsplit("\nSteps Remaining:", 1)[0]
        place = re.search(r"How many \w+ does (\w+ \d+) hold\?", q).group(1)
        want = re.search(rf"{place} holds (\d+)", q, re.I).group(1)
        cmd = dm["messages"][2]["tool_calls"][0]["function"]["arguments"][
            "command"]
        assert run_cmd(tmp_path, cmd) == want + "\n"


def test_reward_rule_scores_the_answer_file():
    val = json.load(open(os.path.join(DATA, "val.json")))
    lines = []
    for r in val[:20]:
        gt = r["reward_model"]["ground_truth"]
        for answer in (gt + "\n", str(int(gt) + 1) + "\n"):
            lines.append(json.dumps({"data_source": r["data_source"],
                                     "answer": answer, "ground_truth": gt}))
    out = subprocess.run([f"{BIN}/lisa-reward", "score"],
                         input="\n".join(lines) + "\n", capture_output=True,
                         text=True, timeout=60, check=True)
    got = [json.loads(x)["reward"] for x in out.stdout.splitlines()]
    assert got == [1.0, 0.0] * 20


def test_script_refuses_bad_arguments():
    script = os.path.join(SRC, "scripts", "smol-rl.sh")
    for args, code, text in (([], 2, "--model"),
                             (["--model", "/nonexistent.gguf"], 1,
                              "does not exist"),
                             (["--model", GEN, "--backend", "tpu"], 2,
                              "cpu or cuda"),
                             (["--bogus"], 2, "unknown argument")):
        r = subprocess.run(["bash", script, *args], capture_output=True,
                           text=True, timeout=30)
        assert r.returncode == code, (args, r.stderr)
        assert text in r.stderr, (args, r.stderr)


def test_count_family_computes_its_answers(tmp_path):
    d = gen(tmp_path / "m", "--train", "20", "--val", "5", "--sft", "40",
            "--sft-family", "mix")
    demos = [json.loads(x) for x in (d / "sft.jsonl").read_text().splitlines()]
    counted = 0
    for dm in demos:
        q = dm["messages"][1]["content"].rsplit("\nSteps Remaining:", 1)[0]
        cmd = dm["messages"][2]["tool_calls"][0]["function"]["arguments"][
            "command"]
        if q.startswith("How many letters"):
            want = len(re.search(r"'(\w+)'", q).group(1))
        elif q.startswith("How many words"):
            want = len(re.search(r"'([\w ]+)'", q).group(1).split())
        else:
            continue
        counted += 1
        # the answer is computed by the command, never written out
        assert not re.search(rf"echo {want} ", cmd), cmd
        testbed = tmp_path / "tb"
        testbed.mkdir(exist_ok=True)
        subprocess.run(["bash", "-c", cmd.replace("/testbed", str(testbed))],
                       check=True, timeout=10)
        assert (testbed / "answer.txt").read_text() == f"{want}\n", cmd
    assert counted == 20
