"""The end-to-end attempt of test_e2e_local.py on the `docker` backend
against a real Docker engine the test starts (scripts/docker-up.sh:
Debian's docker.io, no bridge, the gateway's unix socket bound into each
container with network mode none), with the sandbox image built from
docker/sandbox.Dockerfile on the locally made base. Then the faults that
matter for containers: the container killed, the controller killed (the
container outlives it and is adopted), a memory hog (OOM) and a fork bomb
(pids limit). Opt-in (LISA_DOCKER_TESTS=1); skipped, saying why, where
no engine can be started."""
import os
import signal

import pytest
from brokerlib import task
from dockerlib import (IMAGE, _docker, containers, engine, engine_running,
                       engine_stop)
from stacklib import pb, scripted, wait_for

CTL = "ctl-sbx"

# Building the sandbox image takes minutes and needs Debian's mirrors:
# container tests are opt-in, as the compose tests are.
pytestmark = pytest.mark.skipif(
    os.environ.get("LISA_DOCKER_TESTS") != "1",
    reason="container tests are opt-in: set LISA_DOCKER_TESTS=1")


@pytest.fixture(scope="module")
def docker_sock():
    """The engine for this module; stopped afterwards when this module
    started it (its data root, with the built image, stays for reuse)."""
    was_running = engine_running()
    sock, why = engine()
    if not sock:
        if not was_running and engine_running():
            engine_stop()
        pytest.skip(why)
    yield sock
    if not was_running:
        engine_stop()


def docker_ctl(s, sock, **opts):
    return s.controller(backend="docker", docker_socket=sock, image=IMAGE,
                        gateway_socket=s.sock, **opts)


@pytest.fixture
def clean(docker_sock):
    yield docker_sock
    left = containers(docker_sock, CTL)
    if left:
        _docker(docker_sock, "rm", "-f", *left, timeout=60)
    assert not left, f"containers outlived the test: {left}"


def good():
    return scripted(
        ("execute_bash", {"command": "cat documents/q.txt; id -u; "
                                     "echo '\\boxed{42}' > answer.txt"}),
        ("submit", {}))


def test_attempt_end_to_end_on_docker(make_stack, clean):
    s = make_stack(good())
    t = task("What is 6*7?", files=[pb.File(path="q.txt",
                                            content=b"six times seven\n")])
    (rid,) = s.enqueue([t])
    docker_ctl(s, clean)
    r, atts = s.wait_state(rid, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=90)
    assert r.state == pb.ROLLOUT_SUCCEEDED, (atts, s.log()[-3000:])
    assert r.reward.value == 1.0
    assert len(s.engine.replies) == 2
    q = s.client.ok("query", pb.QueryReq(rollout_ids=[rid], with_spans=True))
    assert len(q.spans) == 2
    wait_for(lambda: not containers(clean, CTL), what="container removed")


def test_container_killed_is_retried(make_stack, clean):
    state = {"fast": False}
    slow = scripted(("execute_bash", {"command": "sleep 60"}))
    fast = good()
    s = make_stack(lambda p, b: (fast if state["fast"] else slow)(p, b))
    (rid,) = s.enqueue([task("q")])
    docker_ctl(s, clean)
    wait_for(lambda: s.engine.requests, timeout=60, what="first call")
    (name,) = containers(clean, CTL)
    state["fast"] = True
    _docker(clean, "kill", name, timeout=30)
    r, atts = s.wait_state(rid, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=90)
    assert r.state == pb.ROLLOUT_SUCCEEDED, atts
    assert atts[0].failure_kind == pb.FAILURE_SANDBOX, atts[0]
    wait_for(lambda: not containers(clean, CTL), what="containers removed")


def test_controller_killed_container_is_adopted(make_stack, clean):
    s = make_stack(scripted(
        ("execute_bash", {"command": "sleep 3; "
                                     "echo '\\boxed{42}' > answer.txt"}),
        ("submit", {})))
    (rid,) = s.enqueue([task("q")])
    ctl = docker_ctl(s, clean)
    wait_for(lambda: s.engine.requests, timeout=60, what="first call")
    ctl.send_signal(signal.SIGKILL)
    ctl.wait()
    assert containers(clean, CTL)  # containers outlive their controller
    docker_ctl(s, clean, log="ctl2.log")
    r, atts = s.wait_state(rid, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=90)
    assert r.state == pb.ROLLOUT_SUCCEEDED, atts
    assert len(atts) == 1  # the same attempt finished
    assert "adopting" in s.log("ctl2.log")
    wait_for(lambda: not containers(clean, CTL), what="container removed")


def test_memory_hog_and_fork_bomb_are_contained(make_stack, clean):
    def script(prompt, body):
        from stacklib import tokenizer
        text = tokenizer().decode(prompt, skip_special_tokens=False)
        cmd = "b(){ b|b& }; b" if "task-bomb" in text else \
            "python3 -c 'x = bytearray(1 << 30); print(len(x))'"
        k = text.count("<tool_response>")
        if k == 0:
            return scripted(("execute_bash", {"command": cmd}))(prompt, body)
        return scripted(None, ("submit", {}))(prompt, body)
    s = make_stack(script)
    lim = pb.Limits(memory_bytes=256 << 20, pids=64, deadline_ms=25000)
    hog, bomb = s.enqueue([task("task-hog", limits=lim),
                           task("task-bomb", limits=lim)])
    docker_ctl(s, clean)
    r, atts = s.wait_state(hog, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=90)
    # The kernel's OOM killer acts on the container's cgroup: either the
    # command alone dies (the agent goes on and the rollout is scored) or
    # the container is marked OOM-killed (terminal OOM failure).
    assert (r.state == pb.ROLLOUT_SUCCEEDED or
            atts[-1].failure_kind == pb.FAILURE_OOM), atts
    r, atts = s.wait_state(bomb, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=90)
    assert r.state == pb.ROLLOUT_SUCCEEDED, atts  # the bomb hit PidsLimit
    wait_for(lambda: not containers(clean, CTL), what="containers removed")


def test_agent_unreadable_and_disk_bounded_in_a_container(make_stack, clean):
    """test_limits_local's probes in a container: the agent shares the
    commands' PID namespace here (the container has no capability to make
    one), yet its memory, environment and descriptors stay unreadable,
    ptrace and process_vm_readv are refused, no user namespace is made,
    and the writable mounts stop at the disk limit (the root is
    read-only)."""
    from test_limits_local import FILL, PROBE, by_word, observations
    s = make_stack(by_word(probe=[PROBE], fill=[FILL]))
    disk = 64 << 20
    lim = pb.Limits(disk_bytes=disk, deadline_ms=60000)
    probe, fill = s.enqueue([task("task-probe", limits=lim),
                             task("task-fill", limits=lim)])
    docker_ctl(s, clean)
    for rid in (probe, fill):
        r, atts = s.wait_state(rid, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                               timeout=120)
        assert r.state == pb.ROLLOUT_SUCCEEDED, atts
    (obs, *_) = observations(s, "task-probe")
    assert "PROBED" in obs, obs
    for word in ("MEM-READ", "ENV-READ", "FD-LISTED"):
        assert word not in obs, obs
    assert "ptrace-attach -1 Operation not permitted" in obs, obs
    assert "vm-readv -1 Operation not permitted" in obs, obs
    (obs, *_) = observations(s, "task-fill")
    sizes = {ln.split()[1]: ln.split()[2] for ln in obs.splitlines()
             if ln.startswith("fill ")}
    assert sizes.get("/") == "none", obs
    total = sum(int(sizes[d]) for d in ("/dev/shm", "/tmp", "/testbed"))
    assert 0 < total <= disk, sizes
    wait_for(lambda: not containers(clean, CTL), what="containers removed")
