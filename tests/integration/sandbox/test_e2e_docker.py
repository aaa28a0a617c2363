"""The end-to-end attempt of test_e2e_local.py on the `docker` backend
against a real Docker engine the test starts (scripts/docker-up.sh:
Debian's docker.io, no bridge, the gateway's unix socket bound into each
container with network mode none), with the sandbox image built from
docker/sandbox.Dockerfile on the locally made base. Then the faults that
matter for containers: the container killed, the controller killed (the
container outlives it and is adopted), a memory hog (OOM), and
test_limits_local's probes from inside a container: the agent unreadable
and untraceable, writes stopped at the disk limit, a fork bomb beside a
neighbour, the host's log of a container under its cap, 10,000
connections from a container beside another attempt's calls, a
container's invalid UTF-8 stored replaced and exported intact, and a
cancelled attempt's token refused while its container runs.

ctest label `docker` (scripts/test.sh's container step, with the compose
test). Set LISA_SKIP_DOCKER_TESTS=1 to skip; otherwise, where no engine
can be started or the image cannot be built, the tests fail and say why."""
import os
import signal
import threading
import time

import pytest
from brokerlib import task
from dockerlib import (IMAGE, SKIP_ENV, _docker, containers, engine,
                       engine_running, engine_stop, sanitized_build)
from stacklib import pb, scripted, tokenizer, wait_for

CTL = "ctl-sbx"

if os.environ.get(SKIP_ENV) == "1":
    pytestmark = pytest.mark.skip(
        reason=f"{SKIP_ENV}=1: the container tests are skipped")
elif sanitized_build():
    # The image carries this tree's lisa-agent, and a sanitizer binary
    # needs its runtime: the default tree runs these (scripts/test.sh).
    pytestmark = pytest.mark.skip(
        reason="sanitizer build tree: the container tests run from the "
        "default preset's tree")


@pytest.fixture(scope="module")
def docker_sock():
    """The engine for this module; stopped afterwards when this module
    started it (its data root, with the built image, stays for reuse)."""
    was_running = engine_running()
    sock, why = engine()
    if not sock:
        if not was_running and engine_running():
            engine_stop()
        pytest.fail(f"{why}; set {SKIP_ENV}=1 to skip the container tests",
                    pytrace=False)
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


def test_memory_hog_is_contained(make_stack, clean):
    s = make_stack(scripted(
        ("execute_bash",
         {"command": "python3 -c 'x = bytearray(1 << 30); print(len(x))'"}),
        ("submit", {})))
    lim = pb.Limits(memory_bytes=256 << 20, deadline_ms=25000)
    (hog,) = s.enqueue([task("task-hog", limits=lim)])
    docker_ctl(s, clean)
    r, atts = s.wait_state(hog, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=90)
    # The kernel's OOM killer acts on the container's cgroup: either the
    # command alone dies (the agent goes on and the rollout is scored) or
    # the container is marked OOM-killed (terminal OOM failure).
    assert (r.state == pb.ROLLOUT_SUCCEEDED or
            atts[-1].failure_kind == pb.FAILURE_OOM), atts
    wait_for(lambda: not containers(clean, CTL), what="containers removed")


def pids_of(sock, name):
    """Processes in container `name` now (the engine's count), 0 when
    gone."""
    p = _docker(sock, "stats", "--no-stream", "--format", "{{.PIDs}}", name,
                timeout=30)
    try:
        return int(p.stdout.strip())
    except ValueError:
        return 0


def test_fork_bomb_leaves_a_neighbour_unaffected(make_stack, clean):
    """test_limits_local's fork bomb in a container: it churns at its
    PidsLimit while a neighbour container forks and finishes as usual,
    and its own agent survives to post a result."""
    from test_limits_local import by_word, observations
    bomb_started = threading.Event()
    inner = by_word(
        bomb=["sleep 15 & s=$!; b(){ b|b& }; b; wait $s"],
        neighbour=["for i in $(seq 1 40); do /bin/true || "
                   "echo FORK-FAILED; done; sh -c 'echo forks-ok'"])

    def script(prompt, body):
        text = tokenizer().decode(prompt, skip_special_tokens=False)
        if "task-bomb" in text and "<tool_response>" not in text:
            bomb_started.set()
        return inner(prompt, body)
    s = make_stack(script)
    lim = pb.Limits(pids=64, deadline_ms=60000)
    (bomb,) = s.enqueue([task("task-bomb", limits=lim)])
    docker_ctl(s, clean, max_concurrency=2)
    assert bomb_started.wait(60)
    (name,) = containers(clean, CTL)
    wait_for(lambda: pids_of(clean, name) >= 48, timeout=10,
             what="bomb at its limit")
    live_until = time.time() + 10  # its command surely still runs
    (neighbour,) = s.enqueue([task("task-neighbour", limits=lim)])
    peak, peak_live = 0, 0
    while s.roll(neighbour)[0].state not in (pb.ROLLOUT_SUCCEEDED,
                                             pb.ROLLOUT_FAILED):
        n = pids_of(clean, name)
        peak = max(peak, n)
        if time.time() < live_until:
            peak_live = max(peak_live, n)
    r, atts = s.wait_state(neighbour, [pb.ROLLOUT_SUCCEEDED], timeout=5)
    assert len(atts) == 1, atts
    obs = observations(s, "task-neighbour")
    assert "forks-ok" in obs[0] and "FORK-FAILED" not in obs[0], obs[0]
    # The bomb was at its limit while the neighbour worked, and no more.
    print(f"fork bomb: {peak} processes at most (PidsLimit 64)")
    assert 48 <= peak_live and peak <= 64, (peak_live, peak)
    r, atts = s.wait_state(bomb, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=60)
    assert r.state == pb.ROLLOUT_SUCCEEDED, atts
    wait_for(lambda: not containers(clean, CTL), what="containers removed")


def test_the_host_log_of_a_container_stays_under_its_cap(make_stack, clean):
    """A container that writes 20 MB to its own output (a sandbox whose
    entry point is not the agent): the engine's log of it on the host
    (json-file, at most 1 MiB, one file) never grows past the cap."""
    s = make_stack(good())
    (rid,) = s.enqueue([task("q", limits=pb.Limits(deadline_ms=30000))])
    # it waits first, so that its log is watched before it writes
    docker_ctl(s, clean, cmd="sleep 4; head -c 20000000 /dev/zero | "
               "tr '\\0' x; echo; echo LAST-WORDS-7; sleep 2")
    (name,) = wait_for(lambda: containers(clean, CTL), timeout=60,
                       what="container")
    path = _docker(clean, "inspect", "-f", "{{.LogPath}}", name,
                   timeout=30).stdout.strip()
    assert path, name
    biggest = 0
    # the log fills and is cut many times while 20 MB go by: sample its
    # size every millisecond for 0.2 s between the (slower) checks that
    # the container still runs, so a sample lands in every fill
    while containers(clean, CTL):
        for _ in range(200):
            try:
                biggest = max(biggest, os.path.getsize(path))
            except OSError:
                pass
            time.sleep(0.001)
    cap = 1 << 20
    print(f"container log on the host: at most {biggest} bytes (cap {cap})")
    # one json-file entry (a 16 KiB chunk, escaped) past the cap at most
    assert (256 << 10) < biggest <= cap + (64 << 10), biggest


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
    assert set(sizes) == {"/dev/shm", "/", "/tmp", "/testbed"}, obs
    assert sizes["/"] == "none", obs  # the root is read-only
    # each writable mount stops at its share of the disk: /testbed three
    # quarters, /tmp and /dev/shm an eighth each
    share = {"/dev/shm": disk // 8, "/tmp": disk // 8,
             "/testbed": disk - disk // 4}
    for d, most in share.items():
        assert sizes[d] != "none", obs
        assert most // 2 <= int(sizes[d]) <= most, (d, sizes[d], most)
    total = sum(int(sizes[d]) for d in share)
    assert total <= disk, sizes
    wait_for(lambda: not containers(clean, CTL), what="containers removed")


def test_connection_flood_from_a_container_leaves_another_attempt_served(
        make_stack, clean):
    """test_limits_local's flood of 10,000 connections, from a container
    through the gateway's socket bound into it."""
    from test_limits_local import flood_beside_another_attempt
    flood_beside_another_attempt(
        make_stack, lambda s: docker_ctl(s, clean, max_concurrency=1),
        "docker")
    wait_for(lambda: not containers(clean, CTL), what="container removed")


def test_invalid_utf8_from_a_container_is_stored_replaced_and_exported(
        make_stack, clean):
    """test_text_local's check in a container: its last output line is not
    UTF-8 and it dies; the failure reason quotes that line with the
    invalid bytes replaced (U+FFFD), the broker stores it, Python's
    protobuf reads it back and `lisa export` writes it intact."""
    import json
    import subprocess
    from stacklib import BIN
    s = make_stack(scripted(("submit", {})))
    (rid,) = s.enqueue([task("q")])
    docker_ctl(s, clean, cmd="printf 'boom \\377\\376 \\303( end\\n' >&2; "
               "exit 1")
    r, atts = s.wait_state(rid, pb.ROLLOUT_FAILED, timeout=90)
    want = "boom \ufffd\ufffd \ufffd( end"
    assert atts and all(want in a.reason for a in atts), \
        [a.reason for a in atts]
    assert want in r.reason, r.reason
    out = subprocess.run([os.path.join(BIN, "lisa"), "export", "--broker",
                          s.broker.ep["rpc"]], capture_output=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    recs = [json.loads(line) for line in
            out.stdout.decode("utf-8").splitlines() if line.strip()]
    mine = [x for x in recs if x["rollout_id"] == rid]
    assert len(mine) == 1 and want in mine[0]["reason"], recs
    wait_for(lambda: not containers(clean, CTL), what="containers removed")


def test_cancelled_attempt_token_refused_from_a_container(make_stack, clean):
    from test_e2e_local import cancelled_mid_attempt
    cancelled_mid_attempt(make_stack, lambda s: docker_ctl(s, clean))
    wait_for(lambda: not containers(clean, CTL), what="container removed")
