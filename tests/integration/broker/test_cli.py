"""The `lisa` subcommands against a real broker: submit the recipe's verl
records, follow them with status/rollouts/watch/show, and export them."""
import json
import os
import subprocess
import time

from brokerlib import BIN, Client, RewardWorker, claim, pb

LISA = os.path.join(BIN, "bin", "lisa")
SRC = os.environ.get("LISA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
VERL = os.path.join(SRC, "tests", "fixtures", "seed-samples", "verl_records_excerpt.json")
DEMO = os.path.join(SRC, "tests", "fixtures", "seed-samples", "benchmark_demo_data.json")


def lisa(broker, *args, check=True, timeout=30):
    env = dict(os.environ, LISA_BROKER=broker.ep["rpc"])
    p = subprocess.run([LISA, *args], env=env, capture_output=True, text=True,
                       timeout=timeout)
    if check:
        assert p.returncode == 0, (args, p.returncode, p.stderr)
    return p


def test_submit_verl_records_and_inspect(broker, tmp_path):
    with open(VERL) as f:
        records = json.load(f)
    out = json.loads(lisa(broker, "submit", VERL, "--n", "2", "--run", "cli",
                          "--step", "4", "--json").stdout)
    assert out["tasks"] == len(records) and len(out["rollout_ids"]) == 2 * len(records)
    st = json.loads(lisa(broker, "status", "--json", "--run", "cli").stdout)
    assert st["queued"] == 2 * len(records)
    rows = [json.loads(l) for l in lisa(broker, "rollouts", "--run", "cli",
                                        "--json", "--all", "--limit", "3").stdout.splitlines()]
    assert len(rows) == 2 * len(records)
    assert {r["step"] for r in rows} == {4}
    first = [r for r in rows if r["rollout_id"] == out["rollout_ids"][0]][0]
    assert first["data_source"] == records[0]["data_source"]
    assert first["task_id"] == records[0]["extra_info"]["id"]
    # the agent's view has the problem statement and no ground truth
    c = Client(broker.ep["rpc"])
    a = [x for x in claim(c, capacity=20) if x.rollout.rollout_id == first["rollout_id"]][0]
    tv = c.ok("get_task", pb.GetTaskReq(rollout_id=a.rollout.rollout_id, attempt=1)).task
    assert tv.problem_statement == records[0]["extra_info"]["problem_statement"]
    assert records[0]["reward_model"]["ground_truth"] not in tv.extra_info_json
    assert "ground_truth" not in tv.extra_info_json
    show = lisa(broker, "show", first["rollout_id"]).stdout
    assert "state     running" in show and "claim" in show and "get_task" in show
    # human table
    table = lisa(broker, "rollouts", "--run", "cli", "--state", "running").stdout
    assert first["rollout_id"] in table and "1 rollouts" in table
    # errors are clear and exit non-zero
    p = lisa(broker, "show", "r-missing", check=False)
    assert p.returncode == 1 and "unknown rollout 'r-missing'" in p.stderr
    p = lisa(broker, "submit", str(tmp_path / "nope.json"), check=False)
    assert p.returncode == 1 and "cannot read" in p.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "x"}\n{not json}\n')
    p = lisa(broker, "submit", str(bad), check=False)
    assert p.returncode == 1 and "line 2" in p.stderr
    c.close()


def test_submit_jsonl_with_input_files(broker, tmp_path):
    recs = [{"prompt": [{"role": "user", "content": "read the doc"}],
             "data_source": "long_context_mini",
             "reward_model": {"ground_truth": "B"},
             "extra_info": {"id": "lc-1", "qa_type": "mc",
                            "problem_statement": "Which industry?",
                            "input_files": json.dumps({"a.txt": "alpha", "b.txt": "beta"})}},
            {"prompt": "What is 2+3?", "data_source": "math_mini",
             "reward_model": {"ground_truth": 5}}]
    f = tmp_path / "tasks.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n\n")
    out = json.loads(lisa(broker, "submit", str(f), "--json", "--run", "j").stdout)
    assert out["tasks"] == 2
    c = Client(broker.ep["rpc"])
    claim(c, capacity=2)
    tv = c.ok("get_task", pb.GetTaskReq(rollout_id=out["rollout_ids"][0], attempt=1)).task
    assert {x.path: x.content for x in tv.files} == {"a.txt": b"alpha", "b.txt": b"beta"}
    assert json.loads(tv.extra_info_json) == {"id": "lc-1", "qa_type": "mc",
                                              "problem_statement": "Which industry?"}
    tv2 = c.ok("get_task", pb.GetTaskReq(rollout_id=out["rollout_ids"][1], attempt=1)).task
    assert tv2.problem_statement == "What is 2+3?"
    c.close()


def test_watch_then_export_with_tokens_masks_logprobs(broker, tmp_path):
    env = dict(os.environ, LISA_BROKER=broker.ep["rpc"],
               LISA_BROKER_EVENTS=broker.ep["events"])
    watch = subprocess.Popen([LISA, "watch", "--json", "--count", "6",
                              "--duration-ms", "10000"], env=env,
                             stdout=subprocess.PIPE, text=True)
    time.sleep(0.4)  # let the subscription settle
    w = RewardWorker(broker.ep["workers"])
    w.start()
    out = json.loads(lisa(broker, "submit", DEMO, "--run", "exp", "--json").stdout)
    rid = out["rollout_ids"][0]
    c = Client(broker.ep["rpc"])
    claim(c, capacity=10)
    # two chat turns: span 1 continues span 0
    c.ok("span_put", pb.SpanPutReq(spans=[
        pb.Span(rollout_id=rid, attempt=1, seq=0, prev_seq=-1, appended_ids=[10, 11, 12],
                response_ids=[20, 21], response_logprobs=[-0.5, -0.25]),
        pb.Span(rollout_id=rid, attempt=1, seq=1, prev_seq=0, appended_ids=[30],
                response_ids=[40], response_logprobs=[-1.0])]))
    c.ok("attempt_complete", pb.AttemptCompleteReq(
        rollout_id=rid, attempt=1, result=pb.AttemptResult(answer="5")))
    c.ok("wait", pb.WaitReq(rollout_ids=[rid], timeout_ms=5000))
    events = [json.loads(l) for l in watch.communicate(timeout=15)[0].splitlines()]
    assert len(events) == 6
    assert [e["seq"] for e in events] == list(range(events[0]["seq"], events[0]["seq"] + 6))
    assert events[0]["rollout"]["state"] == "queued"
    # --json: the same objects as one JSON array document
    doc = json.loads(lisa(broker, "export", "--run", "exp", "--json").stdout)
    assert isinstance(doc, list) and [d["rollout_id"] for d in doc] == [rid]
    assert doc[0]["sequences"][0]["token_ids"] == [10, 11, 12, 20, 21, 30, 40]
    assert json.loads(lisa(broker, "export", "--run", "none", "--json").stdout) == []
    path = tmp_path / "out.jsonl"
    lisa(broker, "export", "--run", "exp", "-o", str(path), "--prune")
    lines = [json.loads(l) for l in path.read_text().splitlines()]
    assert [l["rollout_id"] for l in lines] == [rid]
    row = lines[0]
    assert row["state"] == "succeeded" and row["reward_value"] == 1.0
    assert row["answer"] == "5"
    seq = row["sequences"]
    assert len(seq) == 1
    assert seq[0]["token_ids"] == [10, 11, 12, 20, 21, 30, 40]
    assert seq[0]["loss_mask"] == [0, 0, 0, 1, 1, 0, 1]
    assert seq[0]["logprobs"] == [0, 0, 0, -0.5, -0.25, 0, -1.0]
    assert seq[0]["prompt_len"] == 3
    # pruned: gone from the broker
    p = lisa(broker, "show", rid, check=False)
    assert p.returncode == 1
    w.stop()
    c.close()


def test_export_refuses_broken_chains_like_the_trainer(broker):
    """A final attempt whose spans do not form whole chains (span 2 names
    span 1, which never arrived) is exported without sequences and with
    the reason, as the trainer refuses it; a whole multi-turn chain next to
    it comes out complete, with the first prompt's length."""
    c = Client(broker.ep["rpc"])
    rep = c.ok("enqueue", pb.EnqueueReq(run_id="chains", tasks=[
        pb.TaskSpec(task_id="t1", data_source="d", problem_statement="p", n=2)]))
    broken, whole = sorted(rep.rollout_ids)
    claim(c, capacity=10)

    def sp(rid, seq, prev, app, resp):
        return pb.Span(rollout_id=rid, attempt=1, seq=seq, prev_seq=prev,
                       appended_ids=app, response_ids=resp,
                       response_logprobs=[-0.5] * len(resp))

    c.ok("span_put", pb.SpanPutReq(spans=[
        sp(broken, 0, -1, [1, 2], [3]), sp(broken, 2, 1, [4], [5])]))
    turns = 40  # turn k appends [k] and samples [1000 + k]
    c.ok("span_put", pb.SpanPutReq(spans=[
        sp(whole, k, k - 1, [7, 8, 9] if k == 0 else [k], [1000 + k])
        for k in range(turns)]))
    for rid in (broken, whole):
        c.ok("attempt_fail", pb.AttemptFailReq(
            rollout_id=rid, attempt=1, kind=pb.FAILURE_AGENT, reason="done"))
    c.close()
    p = lisa(broker, "export", "--run", "chains")
    rows = {r["rollout_id"]: r for r in map(json.loads, p.stdout.splitlines())}
    assert set(rows) == {broken, whole}
    b = rows[broken]
    assert b["span_count"] == 2 and b["sequences"] == []
    assert "missing span 1" in b["sequence_error"], b
    assert "1 without sequences" in p.stderr, p.stderr
    w = rows[whole]
    assert "sequence_error" not in w and len(w["sequences"]) == 1
    seq = w["sequences"][0]
    expect = [7, 8, 9, 1000]
    for k in range(1, turns):
        expect += [k, 1000 + k]
    assert seq["token_ids"] == expect
    assert seq["loss_mask"] == [1 if t >= 1000 else 0 for t in expect]
    assert seq["prompt_len"] == 3 and seq["last_seq"] == turns - 1
