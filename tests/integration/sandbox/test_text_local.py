"""Clean text at the edges, with every service real: a sandbox whose last
output line is not UTF-8 fails its attempt; the controller's failure reason
quotes that line with the invalid bytes replaced (U+FFFD), the broker stores
it, Python's protobuf reads it back, and `lisa export` writes it intact."""
import json
import os
import subprocess

from brokerlib import task
from stacklib import BIN, pb, scripted, wait_for

LISA = os.path.join(BIN, "lisa")


def test_invalid_utf8_from_a_sandbox_is_stored_replaced_and_exported(make_stack):
    s = make_stack(scripted(("submit", {})))
    bad = os.path.join(s.dir, "bad-bwrap")
    with open(bad, "w") as f:
        # what a sandbox may print: bytes that are not UTF-8, then it dies
        f.write("#!/bin/sh\nprintf 'boom \\377\\376 \\303( end\\n' >&2\nexit 1\n")
    os.chmod(bad, 0o755)
    (rid,) = s.enqueue([task("q")])
    s.controller(bwrap=bad)
    r, atts = s.wait_state(rid, pb.ROLLOUT_FAILED, timeout=60)
    want = "boom \ufffd\ufffd \ufffd( end"
    # parsed by Python's protobuf, which refuses strings that are not UTF-8
    assert atts and all(want in a.reason for a in atts), [a.reason for a in atts]
    assert want in r.reason, r.reason
    out = subprocess.run([LISA, "export", "--broker", s.broker.ep["rpc"]],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    recs = [json.loads(line) for line in out.stdout.decode("utf-8").splitlines()
            if line.strip()]
    mine = [x for x in recs if x["rollout_id"] == rid]
    assert len(mine) == 1, recs
    assert want in mine[0]["reason"], mine[0]
    wait_for(lambda: not s.sandboxes(), what="sandboxes removed")
