"""`lisa-reward score` as specified: JSON lines in, one JSON line out per
input line in the same order, errors per line without stopping; the real
seed records of the recipe; and the LLM-judge route against a real
OpenAI-compatible HTTP endpoint run by the test."""

import http.server
import json
import os
import subprocess
import threading

import pytest

BIN = os.path.join(os.environ.get("LISA_BINARY_DIR", "build/default"), "bin",
                   "lisa-reward")
SRC = os.environ.get("LISA_SOURCE_DIR", ".")


def score(data: bytes, *args):
    p = subprocess.run([BIN, "score", *args], input=data, capture_output=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return [json.loads(x) for x in p.stdout.decode().splitlines()]


def line(**kw):
    return (json.dumps(kw) + "\n").encode()


def test_seed_records():
    path = os.path.join(SRC, "tests/fixtures/seed-samples/verl_records_excerpt.json")
    recs = json.load(open(path))
    answers = {"math_mini": "... the sum is \\boxed{%s}.",
               "biomed_mini": "Reasoning...\nThe answer is %s.",
               "physics_mini": "Thus $E = %s$ \\text{keV}"}
    data = b""
    for r in recs:
        gt = r["reward_model"]["ground_truth"]
        ans = answers.get(r["data_source"], "whatever") % (gt,) \
            if r["data_source"] in answers else "whatever"
        data += line(data_source=r["data_source"], answer=ans,
                     ground_truth=gt, extra_info=r["extra_info"])
    out = score(data)
    assert len(out) == len(recs)
    for r, o in zip(recs, out):
        if r["data_source"].startswith("instruct_follow"):
            # "whatever" has one unique word; the record asks for 160
            assert o["reward"] == 0.0 and o["rule"] == "ifeval_loose", o
            assert o["explanation"]["instructions"] == \
                ["count:unique_word_count"], o
        else:
            assert o["reward"] == 1.0, (r["data_source"], o)
            assert o["explanation"]["data_source"] == r["data_source"]


def test_order_errors_and_continue():
    good = [line(data_source="math", answer="\\boxed{%d}" % i,
                 ground_truth=str(i if i % 3 else i + 1)) for i in range(300)]
    bad = [b"not json\n", b"[1,2]\n", line(data_source="math"),
           line(data_source="nope", answer="1", ground_truth="1"),
           b'{"data_source":"math","answer":"\xff\xfe","ground_truth":"1"}\n',
           line(data_source="math", answer=5, ground_truth="5")]
    data, want = b"", []
    for i, g in enumerate(good):
        data += g
        want.append(0.0 if i % 3 == 0 else 1.0)
        if i % 50 == 7:
            b = bad[(i // 50) % len(bad)]
            data += b
            want.append(None)
    data += b"\n   \n"  # blank lines are skipped
    out = score(data)
    assert len(out) == len(want)
    for o, w in zip(out, want):
        if w is None:
            assert "error" in o and o["code"].startswith("CODE_"), o
            assert "reward" not in o
        else:
            assert o["reward"] == w and o["rule"] == "math_equiv", o


def test_each_error_kind():
    out = score(b"not json\n" + line(data_source="nope", answer="1",
                                      ground_truth="1") +
                b'{"data_source":"math","answer":"\xff","ground_truth":"1"}\n' +
                line(data_source="math", answer="1"))
    assert [o["code"] for o in out] == ["CODE_INVALID"] * 4
    assert "unknown data source" in out[1]["error"]


def test_empty_and_null_answers():
    out = score(line(data_source="math", answer="", ground_truth="0") +
                line(data_source="biomed", answer=None, ground_truth="A") +
                line(data_source="long_context", answer="   \n",
                     ground_truth="x") +
                line(data_source="chem", ground_truth="A"))
    assert [(o["reward"], o["rule"]) for o in out] == [(0.0, "empty")] * 4


def test_huge_line_then_continue():
    big = line(data_source="math", answer="1" * (5 << 20), ground_truth="1")
    out = score(big + line(data_source="math", answer="\\boxed{1}",
                           ground_truth="1"))
    assert out[0]["code"] == "CODE_TOO_LARGE"
    assert out[1]["reward"] == 1.0


def test_large_answer_bounded():
    # 1 MiB of braces, nested \boxed, a huge exponent: answered, not hung.
    out = score(line(data_source="math", answer="{" * ((1 << 20) - 64) + "\\boxed{2}",
                     ground_truth="2") +
                line(data_source="math", answer="\\boxed{" * 20000,
                     ground_truth="2") +
                line(data_source="math", answer="\\boxed{10^{10^{10^{10}}}}",
                     ground_truth="1") +
                line(data_source="instruct_pretrain", answer="word " * 200000,
                     ground_truth="word " * 2000,
                     extra_info={"qa_type": "free-form"}))
    assert out[0]["reward"] == 1.0
    assert out[1]["reward"] == 0.0
    assert out[2]["reward"] == 0.0
    assert out[3].get("rule") == "rouge_l", out[3]
    assert 0 < out[3]["reward"] < 0.1


def test_qa_routes():
    out = score(
        line(data_source="instruct_pretrain", answer="The answer is B",
             ground_truth="B", extra_info={"qa_type": "multiple choice"}) +
        line(data_source="instruct_pretrain", answer="A, C",
             ground_truth="A, B, C", extra_info={"qa_type": "multiple choice"}) +
        line(data_source="long_context_mini", answer="about \\boxed{12}",
             ground_truth="12") +
        line(data_source="long_context_mini", answer="The airline industry",
             ground_truth="Airline Industry (12)") +
        line(data_source="instruct_pretrain", answer="x",
             ground_truth="x", extra_info="not json"))
    assert (out[0]["reward"], out[0]["rule"]) == (1.0, "mc_letter")
    assert out[1]["rule"] == "mc_f1" and abs(out[1]["reward"] - 0.8) < 1e-12
    assert (out[2]["reward"], out[2]["rule"]) == (1.0, "open_equiv")
    assert out[3]["rule"] == "rouge_l" and 0.5 < out[3]["reward"] < 1
    assert out[4]["code"] == "CODE_INVALID"


class Judge(http.server.BaseHTTPRequestHandler):
    """OpenAI-compatible /chat/completions that grades by substring."""
    script = []  # statuses to return before succeeding
    seen = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Judge.seen.append((self.path, body, self.headers.get("Authorization")))
        if Judge.script:
            self.send_response(Judge.script.pop(0))
            self.end_headers()
            return
        prompt = body["messages"][0]["content"]
        cand = prompt.split("CANDIDATE ANSWER:")[1]
        verdict = "Thinking... INCORRECT? no. CORRECT" if "good" in cand \
            else "CORRECT? No: INCORRECT"
        reply = {"choices": [{"message": {"role": "assistant",
                                          "content": verdict}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


@pytest.fixture
def judge():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Judge)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    Judge.script, Judge.seen = [], []
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    srv.shutdown()


def test_judge_route(judge):
    args = ["--judge-url", judge, "--judge-sources", "physics,long_context",
            "--judge-model", "tiny-judge", "--judge-key", "sekret",
            "--judge-timeout-ms", "5000"]
    Judge.script = [500, 429]  # two retryable failures first
    out = score(line(data_source="physics_mini", answer="a good answer",
                     ground_truth="2.2",
                     extra_info={"problem_statement": "Compute E."}) +
                line(data_source="long_context", answer="a bad answer",
                     ground_truth="x") +
                line(data_source="math", answer="\\boxed{1}",
                     ground_truth="1"), *args, "--judge-retries", "2")
    assert (out[0]["reward"], out[0]["rule"]) == (1.0, "judge")
    assert out[0]["explanation"]["verdict"] == "CORRECT"
    assert (out[1]["reward"], out[1]["rule"]) == (0.0, "judge")
    assert out[2]["rule"] == "math_equiv"  # not a judged source
    path, body, auth = Judge.seen[-1]
    assert path == "/v1/chat/completions" and auth == "Bearer sekret"
    assert body["model"] == "tiny-judge" and body["temperature"] == 0.7
    assert len(Judge.seen) == 4  # 2 failures + 2 answers


def test_judge_unavailable(judge):
    Judge.script = [503] * 10
    out = score(line(data_source="physics", answer="good", ground_truth="1"),
                "--judge-url", judge, "--judge-sources", "physics",
                "--judge-retries", "1", "--judge-timeout-ms", "2000")
    assert out[0]["code"] == "CODE_UNAVAILABLE"
    assert len(Judge.seen) == 2  # bounded: first call + one retry
    # Nobody listening: refused quickly, bounded retries.
    out = score(line(data_source="physics", answer="good", ground_truth="1"),
                "--judge-url", "http://127.0.0.1:9/v1", "--judge-sources",
                "physics", "--judge-retries", "1", "--judge-timeout-ms", "500")
    assert out[0]["code"] == "CODE_UNAVAILABLE"


def _final_answer_file(traj):
    """Contents the agent last wrote to answer.txt in a site trajectory."""
    content = None
    for step in traj["steps"]:
        a = step.get("action") or {}
        p = a.get("parameters") or {}
        if a.get("function") == "str_replace_editor" and \
                p.get("command") == "create" and \
                p.get("path", "").endswith("answer.txt"):
            content = p["file_text"]
        cmd = p.get("command", "") if a.get("function") == "execute_bash" else ""
        if cmd.startswith("echo -e \"") and "answer.txt" in cmd:
            content = cmd[len("echo -e \""):cmd.rindex("\" >")].replace("\\n", "\n")
    return content


def test_real_trajectories():
    """The recipe's published trajectories, scored as the trainer would."""
    from rouge_score import rouge_scorer
    base = os.path.join(SRC, "tests/fixtures/seed-samples/site_trajectories")
    math_ans = _final_answer_file(json.load(open(os.path.join(base, "trajectory_math.json"))))
    lc_ans = _final_answer_file(json.load(open(os.path.join(base, "trajectory_longcontext.json"))))
    assert math_ans == "\\boxed{588}"
    lc_gt = "1. Airline Industry (12)\n2. Accommodation Industry (4)"
    out = score(line(data_source="math_mini", answer=math_ans, ground_truth="588") +
                line(data_source="math_mini", answer=math_ans, ground_truth="589") +
                line(data_source="long_context_mini", answer=lc_ans,
                     ground_truth=lc_gt, extra_info={"qa_type": "free-form"}))
    assert [o["reward"] for o in out[:2]] == [1.0, 0.0]
    want = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(
        lc_gt, lc_ans)["rougeL"].fmeasure
    assert out[2]["rule"] == "rouge_l"
    assert abs(out[2]["reward"] - want) < 1e-12 and 0.5 < want < 1
