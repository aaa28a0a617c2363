"""lisa-controller with the local (bubblewrap) backend against a real
lisa-broker: claims, concurrency cap, failure reports, deadlines,
cancellation, restart and reaping, backend outage, and one whole attempt
with the real lisa-agent talking to a scripted gateway over the unix
socket bound into the sandbox."""
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "broker"))
sys.path.insert(0, HERE)

from brokerlib import Broker, Client, enqueue, pb, rollout, task  # noqa: E402
import test_agent_loop as scripted  # noqa: E402

BIN = os.path.join(os.environ.get("LISA_BINARY_DIR", "build/default"), "bin")
CONTROLLER = os.path.join(BIN, "lisa-controller")


@pytest.fixture
def world(request):
    """A broker, a client, a world-readable scratch directory (sandboxes
    run as an unprivileged uid) and a way to start controllers."""
    scratch = tempfile.mkdtemp(prefix="lisa-ctl-")
    os.chmod(scratch, 0o755)
    opts = {"lease-ms": 20000, "max-attempts": 2, "backoff-ms": 10,
            "backoff-max-ms": 20}
    mark = request.node.get_closest_marker("broker_opts")
    if mark:
        opts.update({k.replace("_", "-"): v for k, v in mark.kwargs.items()})
    broker = Broker(os.path.join(scratch, "broker"), **opts).start()
    client = Client(broker.ep["rpc"])
    sock = os.path.join(scratch, "gw.sock")
    open(sock, "w").close()  # replaced by a real socket where needed
    procs = []

    def controller(cmd="exit 0", *, state=None, log="ctl.log", **opts):
        args = [CONTROLLER, "--controller-id=ctl-it",
                f"--broker-rpc={broker.ep['rpc']}",
                f"--broker-events={broker.ep['events']}",
                f"--state-dir={state or os.path.join(scratch, 'state')}",
                f"--gateway-socket={sock}", "--tick-ms=50",
                "--verify-ms=300", "--grace-ms=100", "--log-level=info",
                f"--agent={os.path.join(BIN, 'lisa-agent')}"]
        if cmd is not None:
            args.append(f"--sandbox-cmd={cmd}")
        if "asan" in BIN:
            # Sanitizer builds reserve terabytes of address space.
            opts.setdefault("memory_rlimit", 0)
        args += [f"--{k.replace('_', '-')}={v}" for k, v in opts.items()]
        out = open(os.path.join(scratch, log), "ab")
        p = subprocess.Popen(args, stdout=out, stderr=out)
        procs.append(p)
        return p

    def log(name="ctl.log"):
        with open(os.path.join(scratch, name), "rb") as f:
            return f.read().decode(errors="replace")

    w = type("World", (), {})()
    w.broker, w.client, w.scratch, w.sock = broker, client, scratch, sock
    w.controller, w.log = controller, log
    w.state = os.path.join(scratch, "state")
    yield w
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    client.close()
    broker.stop()
    # No sandbox of this test may outlive its controllers.
    leaked = wait_gone(scratch)
    subprocess.run(["rm", "-rf", scratch], check=False)
    assert not leaked, f"sandbox processes outlived the test: {leaked}"


def live_with(text):
    """Pids of live (non-zombie) processes whose command line has text."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text.encode() in cmd and state not in ("Z", "X"):
            out.append(int(pid))
    return out


def wait_gone(text, timeout=3.0):
    end = time.time() + timeout
    while time.time() < end:
        left = live_with(text)
        if not left:
            return []
        time.sleep(0.05)
    return live_with(text)


def wait_for(pred, timeout=15.0, what="condition"):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def roll(w, rid):
    q = rollout(w.client, rid, with_attempts=True)
    return q.rollouts[0], list(q.attempts)


def sandboxes(w):
    if not os.path.isdir(w.state):
        return []
    return [f for f in os.listdir(w.state) if f.endswith(".state")]


def test_agent_failure_is_reported_terminal(world):
    w = world
    (rid,) = enqueue(w.client, [task("a")])
    w.controller("exit 5")
    r, atts = wait_for(lambda: (lambda r: r if r[0].state == pb.ROLLOUT_FAILED
                                else None)(roll(w, rid)), what="failed")
    assert r.failure_kind == pb.FAILURE_AGENT
    assert r.attempts == 1
    assert atts[0].sandbox_id.startswith("lisa-")
    assert "task malformed" in atts[0].reason
    wait_for(lambda: not sandboxes(w), what="sandbox removed")


def test_infra_failure_is_retried_as_a_new_attempt(world):
    w = world
    (rid,) = enqueue(w.client, [task("b")])
    w.controller("exit 3")
    r, atts = wait_for(lambda: (lambda r: r if r[0].state == pb.ROLLOUT_FAILED
                                else None)(roll(w, rid)), what="failed")
    assert r.attempts == 2  # max-attempts 2: retried once, then terminal
    assert all(a.failure_kind == pb.FAILURE_INFRA for a in atts)
    assert "gateway" in atts[0].reason


def test_concurrency_cap_and_all_claims_served(world):
    w = world
    ids = enqueue(w.client, [task("c", n=5)])
    w.controller("sleep 0.6; exit 5", max_concurrency=2, create_per_s=100)
    peak = 0
    end = time.time() + 30
    while time.time() < end:
        peak = max(peak, len(sandboxes(w)))
        if all(roll(w, r)[0].state == pb.ROLLOUT_FAILED for r in ids):
            break
        time.sleep(0.02)
    assert all(roll(w, r)[0].state == pb.ROLLOUT_FAILED for r in ids)
    assert peak == 2, f"peak {peak} sandboxes at once"


def test_creation_rate_limit(world):
    w = world
    ids = enqueue(w.client, [task("d", n=4)])
    t0 = time.time()
    w.controller("sleep 30", max_concurrency=10, create_per_s=2,
                 create_burst=1)
    wait_for(lambda: len(sandboxes(w)) == 4, what="4 sandboxes")
    # One at once, then 2 per second: the fourth needs about 1.5 s.
    assert time.time() - t0 >= 1.3
    w.client.ok("cancel", pb.CancelReq(rollout_ids=ids))
    wait_for(lambda: not sandboxes(w), what="sandboxes removed")


def test_deadline_kills_and_reports(world):
    w = world
    (rid,) = enqueue(w.client, [task("e", limits=pb.Limits(deadline_ms=1500))])
    w.controller("echo $$ > /testbed/pid; sleep 60")
    wait_for(lambda: sandboxes(w), what="sandbox")
    r, atts = wait_for(lambda: (lambda r: r if r[0].state == pb.ROLLOUT_FAILED
                                else None)(roll(w, rid)), what="failed")
    assert r.failure_kind == pb.FAILURE_DEADLINE
    wait_for(lambda: not sandboxes(w), what="sandbox removed")
    out = subprocess.run(["pgrep", "-u", "65534", "-f", "sleep 60"],
                         capture_output=True)
    assert out.returncode != 0, "the sandbox survived its deadline"


def test_cancel_stops_the_sandbox(world):
    w = world
    (rid,) = enqueue(w.client, [task("f")])
    w.controller("sleep 62")
    wait_for(lambda: roll(w, rid)[0].state == pb.ROLLOUT_RUNNING,
             what="running")
    assert len(sandboxes(w)) == 1
    t0 = time.time()
    w.client.ok("cancel", pb.CancelReq(rollout_ids=[rid], reason="op"))
    wait_for(lambda: not sandboxes(w), what="sandbox removed")
    assert time.time() - t0 < 3
    assert "stopping its sandbox" in w.log()
    assert roll(w, rid)[0].state == pb.ROLLOUT_CANCELLED


def test_restart_adopts_reports_and_reaps(world):
    w = world
    (rid,) = enqueue(w.client, [task("g")])
    p = w.controller("sleep 61")
    wait_for(lambda: roll(w, rid)[0].state == pb.ROLLOUT_RUNNING,
             what="running")
    # A stale label from long ago, as a crashed controller leaves it.
    os.makedirs(w.state, exist_ok=True)
    with open(os.path.join(w.state, "lisa-old-a1.state"), "w") as f:
        f.write("name=lisa-old-a1\ncontroller=ctl-it\nrun=r\nrollout=old\n"
                "attempt=1\ncreated_ms=1\ndeadline_ms=2\npid=999999\n"
                "pid_start=1\n")
    p.send_signal(signal.SIGKILL)  # --die-with-parent takes the sandbox
    p.wait()
    assert len(sandboxes(w)) == 2
    w.controller("sleep 61", log="ctl2.log")
    # The old label is reaped; the dead sandbox of the open attempt is
    # reported, and the broker retries the rollout as attempt 2.
    wait_for(lambda: roll(w, rid)[0].attempts == 2, what="attempt 2")
    r, atts = roll(w, rid)
    assert atts[0].failure_kind == pb.FAILURE_SANDBOX
    assert "nobody watched" in atts[0].reason
    assert not os.path.exists(os.path.join(w.state, "lisa-old-a1.state"))
    log = w.log("ctl2.log")
    assert "reaping lisa-old-a1" in log
    assert "adopting" in log


def test_backend_outage_pauses_claiming(world):
    w = world
    (rid,) = enqueue(w.client, [task("h")])
    w.controller("exit 0", bwrap="/nonexistent/bwrap")
    wait_for(lambda: "claiming paused" in w.log(), what="pause")
    time.sleep(1.0)
    assert roll(w, rid)[0].state == pb.ROLLOUT_QUEUED
    assert w.log().count("claiming paused") >= 2  # backoff, re-checked


def test_whole_attempt_with_the_real_agent(world):
    w = world
    os.unlink(w.sock)
    gw = scripted.Gateway(scripted.base_task(), [
        scripted.call("execute_bash",
                      {"command": "cat /proc/[0-9]*/environ 2>/dev/null | "
                                  "tr '\\0' '\\n' | grep -a TOKEN > "
                                  "/tmp/env.txt; cat /tmp/env.txt; "
                                  "echo pid1=$(cat /proc/1/comm); "
                                  "head -c 1 /proc/1/mem >/dev/null 2>&1 && "
                                  "echo MEM-READ; ls /proc/1/fd >/dev/null "
                                  "2>&1 && echo FD-LISTED; echo probed"}),
        scripted.call("execute_bash",
                      {"command": "cat documents/b.txt > answer.txt; "
                                  "(curl -s -m 2 http://1.1.1.1 || "
                                  "python3 -c 'import socket; "
                                  "socket.create_connection((\"1.1.1.1\", 80),"
                                  " 2)') && echo NET-OPEN >> answer.txt; "
                                  "true"}),
        scripted.call("submit", {})], token=None)
    seen = []

    class AnyToken(gw.handler()):
        def authorized(self):
            seen.append(self.headers.get("Authorization"))
            return True
    srv = scripted._Unix(w.sock, AnyToken)
    import threading
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    os.chmod(w.sock, 0o777)
    try:
        (rid,) = enqueue(w.client, [task("i")])
        w.controller(None)  # the real agent
        wait_for(lambda: gw.results, timeout=30, what="result")
        wait_for(lambda: not sandboxes(w), what="sandbox removed")
    finally:
        srv.shutdown()
    assert gw.results[0]["answer"] == "forty-two", gw.results
    # No process in the sandbox shows the token to the model's commands.
    token = seen[0].split(" ", 1)[1]
    obs = gw.chats[1][1]["messages"][-1]["content"]
    # pid 1 of the commands' namespace is the agent's jail init (a fork of
    # it); like the agent it is not dumpable: no environment, memory or
    # descriptors to read, not even the scrubbed variable.
    assert "pid1=lisa-agent" in obs, obs
    assert "probed" in obs, obs
    assert "LISA_ATTEMPT_TOKEN" not in obs, obs
    assert "MEM-READ" not in obs and "FD-LISTED" not in obs, obs
    assert token not in obs
    assert gw.results[0]["end_reason"] == "submit"
    assert seen and all(s and s.startswith("Bearer ") for s in seen)
    assert len(set(seen)) == 1
    # The agent exited 0: nothing to report, the attempt stays running
    # until the gateway's result reaches the broker.
    r, atts = roll(w, rid)
    assert r.state == pb.ROLLOUT_RUNNING
    assert atts[0].failure_kind == pb.FAILURE_NONE


def test_sandbox_output_is_capped_on_the_host(world):
    """20 MB of output from a sandbox: the host keeps at most log_bytes of
    it (the head and the last bytes), the rest is counted and dropped, and
    the failure report still quotes the sandbox's real last line."""
    w = world
    cap = 64 << 10
    (rid,) = enqueue(w.client, [task("flood")])
    biggest = [0]
    w.controller("head -c 20000000 /dev/zero | tr '\\0' x; echo; "
                 "echo LAST-WORDS-7; exit 3", log_bytes=cap)
    end = time.time() + 30
    while time.time() < end and roll(w, rid)[0].state != pb.ROLLOUT_FAILED:
        for f in sandboxes(w):
            try:
                size = os.path.getsize(os.path.join(w.state,
                                                    f[:-6] + ".log"))
            except OSError:
                continue
            biggest[0] = max(biggest[0], size)
        time.sleep(0.01)
    r, atts = roll(w, rid)
    assert r.state == pb.ROLLOUT_FAILED and len(atts) == 2, atts
    assert all("LAST-WORDS-7" in a.reason for a in atts), atts
    assert biggest[0] <= cap + 512, biggest[0]
    log = w.log()
    lines = [x for x in log.splitlines() if "dropped (controller.log_bytes)"
             in x]
    assert len(lines) == 2, log[-3000:]
    for line in lines:
        printed = int(line.split(" printed ", 1)[1].split()[0])
        dropped = int(line.split("; ", 1)[1].split()[0])
        assert printed >= 20000000, line
        assert printed - dropped == cap, line
