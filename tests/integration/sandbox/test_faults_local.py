"""Faults on the `local` backend with every service real and only the
model scripted. Each ends in the attempt state the broker's contract
names, and no sandbox process outlives the test:
  - the agent killed mid-run: SANDBOX failure, retried, then succeeds;
  - the sandbox (bwrap) killed: the same;
  - the controller killed: its sandboxes die with it; a new controller
    reports the attempt (SANDBOX), the retry succeeds; a process of the
    sandbox with no parent-death signal of its own dies too;
  - a sandbox that never starts the agent: the lease runs out (LEASE),
    the stuck sandbox is removed, retried, then FAILED;
  - a fork bomb, a memory hog and an infinite-output command from the
    model: bounded by the sandbox's limits and the agent's caps; the
    agent survives, posts its result, and the rollout is scored."""
import os
import signal
import time

import pytest
from brokerlib import task
from stacklib import BIN, descendants, pb, scripted, tokenizer, wait_for

ASAN = "asan" in BIN


def agent_pids(ctl):
    """lisa-agent processes below the controller (inside our sandboxes)."""
    out = []
    for pid in descendants(ctl.pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read().startswith(b"/run/lisa/lisa-agent"):
                    out.append(pid)
        except OSError:
            pass
    return out


def all_gone(pids):
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    alive.append(pid)
        except OSError:
            pass
    return not alive


class Switch:
    """First attempt: the model runs a long command; once flipped, the
    model answers and submits."""

    def __init__(self):
        self.fast = False
        self.slow = scripted(("execute_bash", {"command": "sleep 60"}))
        self.good = scripted(
            ("execute_bash", {"command": "echo '\\boxed{42}' > answer.txt"}),
            ("submit", {}))

    def __call__(self, prompt, body):
        return (self.good if self.fast else self.slow)(prompt, body)


def check_retried_and_succeeded(s, rid, kind):
    r, atts = s.wait_state(rid, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=60)
    assert r.state == pb.ROLLOUT_SUCCEEDED, (r, atts)
    assert r.reward.value == 1.0
    assert len(atts) == 2
    assert atts[0].failure_kind == kind, atts[0]
    wait_for(lambda: not s.sandboxes(), what="sandboxes removed")


@pytest.mark.parametrize("victim", ["agent", "sandbox"])
def test_killed_agent_or_sandbox_is_retried(make_stack, victim):
    sw = Switch()
    s = make_stack(sw)
    (rid,) = s.enqueue([task("q")])
    ctl = s.controller()
    wait_for(lambda: len(s.engine.requests) >= 1, what="first model call")
    agents = wait_for(lambda: agent_pids(ctl), what="agent process")
    inside = descendants(ctl.pid)
    sw.fast = True
    if victim == "agent":
        os.kill(agents[0], signal.SIGKILL)
    else:  # the sandbox's top process, the controller's child
        top = [p for p in inside if p in descendants(ctl.pid)
               and os.path.exists(f"/proc/{p}")
               and int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1]
                       .split()[1]) == ctl.pid]
        os.kill(top[0], signal.SIGKILL)
    check_retried_and_succeeded(s, rid, pb.FAILURE_SANDBOX)
    wait_for(lambda: all_gone(inside), timeout=5, what="first sandbox gone")


def test_killed_controller_sandboxes_die_and_are_reported(make_stack):
    sw = Switch()
    s = make_stack(sw)
    (rid,) = s.enqueue([task("q")])
    ctl = s.controller()
    wait_for(lambda: len(s.engine.requests) >= 1, what="first model call")
    inside = descendants(ctl.pid)
    assert agent_pids(ctl)
    ctl.send_signal(signal.SIGKILL)
    ctl.wait()
    # Local sandboxes die with their controller.
    wait_for(lambda: all_gone(inside), timeout=5, what="sandbox died")
    sw.fast = True
    s.controller(log="ctl2.log")
    check_retried_and_succeeded(s, rid, pb.FAILURE_SANDBOX)
    assert "adopting" in s.log("ctl2.log")


def forking_bwrap(s):
    """A stand-in bwrap that forks a process with no parent-death signal
    (as bubblewrap's inner process is until late in its set-up). Both
    keep the script's path (in the stack's folder) in their command
    lines, so the fixture's check for processes left behind sees them."""
    fake = os.path.join(s.dir, "forking-bwrap")
    with open(fake, "w") as f:
        f.write('#!/bin/sh\n[ "$1" = child ] || "$0" child &\n'
                "while :; do sleep 1; done\n")
    os.chmod(fake, 0o755)
    return fake


def sandbox_pair(ctl):
    """The stand-in's two processes, below the controller."""
    def both():
        d = descendants(ctl.pid)
        return d if len(d) >= 2 else None
    return wait_for(both, what="the sandbox's two processes")


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_killed_controller_takes_the_sandboxs_unarmed_processes(make_stack):
    """bubblewrap's inner process arms its own parent-death signal only
    late in its set-up: a controller killed before then would leave it
    behind. The stand-in's forked process still dies with the controller,
    since each sandbox is a PID namespace of its own whose first process
    dies with it."""
    s = make_stack(scripted(("submit", {})))
    s.enqueue([task("q")])
    ctl = s.controller(bwrap=forking_bwrap(s))
    inside = sandbox_pair(ctl)
    try:
        status = open(f"/proc/{inside[0]}/status").read()
        assert "NSpid:\t%d\t1\n" % inside[0] in status, status
        ctl.send_signal(signal.SIGKILL)
        ctl.wait()
        wait_for(lambda: all_gone(inside), timeout=5,
                 what="the unarmed process died with the controller")
    finally:
        kill_all(inside)
    assert "no PID namespace" not in s.log()


def test_sandboxes_start_without_the_right_to_pid_namespaces(make_stack):
    """A controller that may not make PID namespaces (no CAP_SYS_ADMIN)
    still starts its sandboxes, without one, and says what that loses."""
    s = make_stack(scripted(("submit", {})))
    s.enqueue([task("q")])
    ctl = s.controller(bwrap=forking_bwrap(s),
                       wrap=["setpriv", "--bounding-set", "-sys_admin", "--"])
    inside = sandbox_pair(ctl)
    try:
        assert wait_for(lambda: "no PID namespace" in s.log(),
                        what="the warning")
        status = open(f"/proc/{inside[0]}/status").read()
        assert "NSpid:\t%d\n" % inside[0] in status, status  # the host's
    finally:
        # stopped, not killed: it removes its sandboxes, process groups
        # and all (the fixture checks that nothing of them is left)
        ctl.terminate()
        ctl.wait()
        kill_all(inside)


def test_sandbox_that_never_starts_the_agent(make_stack):
    s = make_stack(scripted(("submit", {})),
                   broker_opts={"lease-ms": 1500})
    stuck = os.path.join(s.dir, "stuck-bwrap")
    with open(stuck, "w") as f:
        f.write("#!/bin/sh\nexec sleep 300\n")
    os.chmod(stuck, 0o755)
    (rid,) = s.enqueue([task("q")])
    ctl = s.controller(bwrap=stuck)
    r, atts = s.wait_state(rid, pb.ROLLOUT_FAILED, timeout=40)
    assert len(atts) == 2
    assert all(a.failure_kind == pb.FAILURE_LEASE for a in atts), atts
    assert not s.engine.requests  # no agent ever ran
    wait_for(lambda: not s.sandboxes(), what="stuck sandboxes removed")
    wait_for(lambda: not [p for p in descendants(ctl.pid)], timeout=5,
             what="no stuck process")


# The model's command in each sandbox, by the word in its problem text.
HOSTILE = {
    "forkbomb": "b(){ b|b& }; b",
    "memhog": "tail /dev/zero",
    # Gigabytes of output in 3 s; the agent keeps a bounded capture.
    "flood": "timeout 3 yes lisa",
}


def test_hostile_commands_are_bounded(make_stack):
    def script(prompt, body):
        text = tokenizer().decode(prompt, skip_special_tokens=False)
        which = next(k for k in HOSTILE if f"task-{k}" in text)
        k = text.count("<tool_response>")
        if k == 0:
            return scripted(("execute_bash",
                             {"command": HOSTILE[which]}))(prompt, body)
        if k == 1:
            return scripted(None, ("execute_bash", {
                "command": "echo '\\boxed{42}' > answer.txt"}))(prompt, body)
        return scripted(None, None, ("submit", {}))(prompt, body)
    s = make_stack(script)
    # 36 s deadline: the agent keeps 15 s to post its result, so a command
    # may run about 20 s. Each of these ends by itself well before: the
    # flood at 3 s, the hog at its memory limit, the bomb's shell at once
    # (or, when a fork meets the full process limit, after bash's retries,
    # at most 15 s). A command cut at the end of the agent's time would end
    # the attempt before the model saw its output, which is what is checked.
    lim = pb.Limits(deadline_ms=36000, pids=64, memory_bytes=512 << 20,
                    max_turns=6)
    kinds = list(HOSTILE) if not ASAN else ["forkbomb", "flood"]
    ids = s.enqueue([task(f"task-{k}", limits=lim) for k in kinds])
    # One at a time, so that each command ends within its time on a small
    # machine. (Each local sandbox has a uid of its own, so a fork
    # bomb no longer starves its neighbours: test_limits_local shows it.)
    ctl = s.controller(max_concurrency=1)
    inside = set()
    end = time.time() + 40 * len(kinds)
    while time.time() < end:
        inside.update(descendants(ctl.pid))
        states = [s.roll(r)[0].state for r in ids]
        if all(st in (pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED)
               for st in states):
            break
        time.sleep(0.1)
    for k, rid in zip(kinds, ids):
        r, atts = s.roll(rid)
        # The agent outlived the command and the rollout was scored: the
        # model got the bounded observation and then answered.
        assert r.state == pb.ROLLOUT_SUCCEEDED, (k, [(a.failure_kind, a.reason) for a in atts], s.log()[-3000:])
        assert len(atts) == 1, (k, atts)
    obs = {}
    for body in s.engine.requests:
        text = tokenizer().decode(body["prompt"], skip_special_tokens=False)
        if text.count("<tool_response>") == 1:
            which = next(k for k in HOSTILE if f"task-{k}" in text)
            obs[which] = text.rsplit("<tool_response>", 1)[1]
    assert set(obs) == set(kinds), {
        k: [(a.failure_kind, a.reason) for a in s.roll(rid)[1]]
        for k, rid in zip(kinds, ids)}
    # The flood's observation is cut to the agent's bound.
    assert len(obs["flood"]) < 64 << 10, len(obs["flood"])
    assert "lisa\nlisa\n" in obs["flood"]
    if "memhog" in obs:
        assert "memory" in obs["memhog"].lower(), obs["memhog"][:2000]
    wait_for(lambda: not s.sandboxes(), what="sandboxes removed")
    wait_for(lambda: all_gone(inside), timeout=10, what="hostile processes")
