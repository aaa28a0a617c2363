"""The Python examples in clients/ against a real broker, run with the
system python (Debian's python3-zmq and python3-protobuf)."""
import json
import os
import subprocess
import sys
import time

from brokerlib import BIN, Client, RewardWorker, claim, pb

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
CLIENTS = os.path.join(SRC, "clients")
VERL = os.path.join(SRC, "tests", "fixtures", "seed-samples", "verl_records_excerpt.json")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def run(broker, script, *args, **kw):
    env = dict(os.environ, LISA_BROKER=broker.ep["rpc"],
               LISA_BROKER_EVENTS=broker.ep["events"], LISA_BINARY_DIR=BIN)
    return subprocess.run([PY, os.path.join(CLIENTS, script), *args], env=env,
                          capture_output=True, text=True, timeout=60, **kw)


def test_submit_watch_export(broker, tmp_path):
    env = dict(os.environ, LISA_BROKER=broker.ep["rpc"],
               LISA_BROKER_EVENTS=broker.ep["events"], LISA_BINARY_DIR=BIN)
    watcher = subprocess.Popen([PY, os.path.join(CLIENTS, "watch_events.py"),
                                "--count", "4", "--duration", "15"],
                               env=env, stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    p = run(broker, "submit_tasks.py", VERL, "--n", "2", "--run", "py", "--key", "k1")
    assert p.returncode == 0, p.stderr
    sub = json.loads(p.stdout)
    assert sub["tasks"] == 5 and len(sub["rollout_ids"]) == 10
    again = json.loads(run(broker, "submit_tasks.py", VERL, "--n", "2", "--run", "py",
                           "--key", "k1").stdout)
    assert again["rollout_ids"] == sub["rollout_ids"]  # idempotent resubmit
    events = [json.loads(l) for l in watcher.communicate(timeout=20)[0].splitlines()]
    assert len(events) == 4 and all(e["topic"] == "rollout" for e in events)
    assert events[0]["rollout"]["state"] == "ROLLOUT_QUEUED"
    # finish two rollouts through a reward worker
    w = RewardWorker(broker.ep["workers"])
    w.start()
    c = Client(broker.ep["rpc"])
    got = claim(c, capacity=2)
    for i, a in enumerate(got):
        rid = a.rollout.rollout_id
        c.ok("span_put", pb.SpanPutReq(spans=[pb.Span(
            rollout_id=rid, attempt=1, seq=0, prev_seq=-1, appended_ids=[1, 2],
            response_ids=[3, 4, 5], response_logprobs=[-0.5, -1.5, -2.5])]))
        c.ok("attempt_complete", pb.AttemptCompleteReq(
            rollout_id=rid, attempt=1, result=pb.AttemptResult(answer="70" if i == 0 else "x")))
    done = [a.rollout.rollout_id for a in got]
    c.ok("wait", pb.WaitReq(rollout_ids=done, timeout_ms=5000))
    out = tmp_path / "res.jsonl"
    p = run(broker, "export_results.py", "--run", "py", "-o", str(out), "--prune")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(l) for l in out.read_text().splitlines()]
    assert sorted(r["rollout_id"] for r in rows) == sorted(done)
    by = {r["rollout_id"]: r for r in rows}
    assert by[done[0]]["reward_value"] == 1.0 and by[done[1]]["reward_value"] == 0.0
    s = by[done[0]]["sequences"][0]
    assert s["token_ids"] == [1, 2, 3, 4, 5] and s["loss_mask"] == [0, 0, 1, 1, 1]
    assert s["logprobs"] == [0.0, 0.0, -0.5, -1.5, -2.5]
    st = c.ok("stats", pb.StatsReq(run_id="py")).stats
    assert st.succeeded == 0 and st.queued == 8  # the two exported ones were pruned
    # a clear error from a bad broker address within the deadline
    env2 = dict(env, LISA_BROKER="tcp://127.0.0.1:1", LISA_CLIENT_TIMEOUT="0.3")
    p = subprocess.run([PY, os.path.join(CLIENTS, "export_results.py")], env=env2,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    w.stop()
    c.close()
