"""A record the broker holds that is not valid protobuf text (a reason with
bytes that are not UTF-8, written into its store behind its back, as an
older version or a disk fault could leave it): `lisa export`, the C RPC
client and the Python client fail loudly on it, at once, and never write
half of it."""
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from brokerlib import BIN, Client, claim, pb

SRC = os.environ.get("LISA_SOURCE_DIR",
                     os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))
sys.path.insert(0, os.path.join(SRC, "clients"))
LISA = os.path.join(BIN, "bin", "lisa")


def test_a_record_that_cannot_be_decoded_fails_loudly(make_broker):
    brk = make_broker()
    c = Client(brk.ep["rpc"])
    rep = c.ok("enqueue", pb.EnqueueReq(run_id="bad", tasks=[
        pb.TaskSpec(task_id="t", data_source="d", problem_statement="p", n=2)]))
    bad, good = sorted(rep.rollout_ids)
    claim(c, capacity=10)
    for rid in (bad, good):
        c.ok("attempt_fail", pb.AttemptFailReq(
            rollout_id=rid, attempt=1, kind=pb.FAILURE_AGENT, reason="done"))
    c.close()
    ok = subprocess.run([LISA, "export", "--run", "bad", "--broker", brk.ep["rpc"]],
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0 and len(ok.stdout.splitlines()) == 2, ok.stderr

    brk.stop()
    db = [f for f in os.listdir(brk.data_dir) if f.endswith((".db", ".sqlite"))]
    assert db, os.listdir(brk.data_dir)
    con = sqlite3.connect(os.path.join(brk.data_dir, db[0]))
    con.execute("UPDATE rollouts SET reason = CAST(X'626F6F6D20FF' AS TEXT)"
                " WHERE rollout_id = ?", (bad,))
    con.commit()
    con.close()
    brk.start()

    t0 = time.time()
    p = subprocess.run([LISA, "export", "--run", "bad", "--broker", brk.ep["rpc"]],
                       capture_output=True, timeout=30)
    assert p.returncode != 0, p
    assert b"not valid UTF-8" in p.stderr, p.stderr
    assert b"boom" not in p.stdout  # nothing of the record was written
    assert time.time() - t0 < 10  # at once, not after a timeout

    from lisa_client import Broker, UndecodableReply
    b = Broker(brk.ep["rpc"])
    t0 = time.time()
    with pytest.raises(UndecodableReply):
        b.call("query", pb.QueryReq(rollout_ids=[bad]), timeout=20)
    assert time.time() - t0 < 10
    # the other record still reads
    rep = b.call("query", pb.QueryReq(rollout_ids=[good]))
    assert rep.query.rollouts[0].reason == "done"
