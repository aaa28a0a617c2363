"""lisa-controller with the docker backend against a real lisa-broker and
a Docker Engine API stand-in (fake_docker.py) on a unix socket."""
import os
import signal
import sys
import time

import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "broker"))
sys.path.insert(0, HERE)

from brokerlib import enqueue, pb, task  # noqa: E402
from fake_docker import API, Engine  # noqa: E402
from test_controller_local import roll, wait_for, world  # noqa: E402,F401


@pytest.fixture
def engine(world):
    e = Engine(os.path.join(world.scratch, "docker.sock")).start()
    yield e
    e.close()


def docker_ctl(w, engine, cmd, **opts):
    return w.controller(cmd, backend="docker", docker_socket=engine.path,
                        image=engine.image, **opts)


def failed(w, rid):
    return lambda: (lambda r: r if r[0].state == pb.ROLLOUT_FAILED
                    else None)(roll(w, rid))


def test_container_spec_failure_report_and_cleanup(world, engine):
    w = world
    (rid,) = enqueue(w.client, [task("d1", limits=pb.Limits(
        memory_bytes=512 << 20, pids=99, cpu_millis=1500))])
    docker_ctl(w, engine, "echo working; echo last words; exit 5",
               runtime="runsc")
    r, atts = wait_for(failed(w, rid), what="failed")
    assert r.failure_kind == pb.FAILURE_AGENT
    assert "last words" in atts[0].reason  # from the multiplexed logs
    wait_for(lambda: not engine.containers, what="container removed")
    # Every call after /version carries the negotiated version.
    paths = [p for _, p, _ in engine.requests]
    assert paths[0] == "/version"
    assert all(p.startswith(f"/v{API}/") for p in paths[1:])
    create = [b for m, p, b in engine.requests if "/containers/create" in p][0]
    hc = create["HostConfig"]
    assert hc["NetworkMode"] == "none"
    assert hc["CapDrop"] == ["ALL"]
    assert any(o.startswith("no-new-privileges") for o in hc["SecurityOpt"])
    assert hc["Memory"] == 512 << 20 and hc["MemorySwap"] == hc["Memory"]
    assert hc["PidsLimit"] == 99
    assert hc["NanoCpus"] == 1_500_000_000
    assert hc["ReadonlyRootfs"] is True
    assert hc["Init"] is False  # the agent is pid 1 (token scrubbed)
    assert hc["AutoRemove"] is False and hc["Privileged"] is False
    assert "/testbed" in hc["Tmpfs"] and "size=" in hc["Tmpfs"]["/testbed"]
    # Every writable mount sized, together no more than the disk limit.
    sizes = [int(v.split("size=", 1)[1].split(",", 1)[0])
             for v in hc["Tmpfs"].values()] + [hc["ShmSize"]]
    assert len(sizes) == 3 and 0 < sum(sizes) <= (1 << 30), sizes
    assert hc["LogConfig"] == {"Type": "json-file",
                               "Config": {"max-size": "1m", "max-file": "1"}}
    assert hc["Binds"] == [f"{w.sock}:/run/lisa/gateway.sock"]
    assert hc["Runtime"] == "runsc"
    assert not any("docker.sock" in b for b in hc["Binds"])
    assert create["User"] == "65534:65534"
    assert create["Entrypoint"] == ["/bin/sh"]
    assert create["Cmd"] == ["-c", "echo working; echo last words; exit 5"]
    assert create["Labels"]["lisa.rollout"] == rid
    assert create["Labels"]["lisa.attempt"] == "1"
    assert create["Labels"]["lisa.controller"] == "ctl-it"
    env = dict(e.split("=", 1) for e in create["Env"])
    assert env["LISA_GATEWAY_SOCKET"] == "/run/lisa/gateway.sock"
    assert len(env["LISA_ATTEMPT_TOKEN"]) > 10


def test_oom_is_reported(world, engine):
    w = world
    (rid,) = enqueue(w.client, [task("d2")])
    docker_ctl(w, engine, "oom: allocate everything")
    r, _ = wait_for(failed(w, rid), what="failed")
    assert r.failure_kind == pb.FAILURE_OOM


def test_deadline_kills_the_container(world, engine):
    w = world
    (rid,) = enqueue(w.client, [task("d3", limits=pb.Limits(deadline_ms=1500))])
    docker_ctl(w, engine, "sleep 60")
    wait_for(lambda: engine.containers, what="container")
    r, _ = wait_for(failed(w, rid), what="failed")
    assert r.failure_kind == pb.FAILURE_DEADLINE
    wait_for(lambda: not engine.containers, what="container removed")


def test_engine_outage_pauses_then_resumes(world, engine):
    w = world
    engine.stop()
    (rid,) = enqueue(w.client, [task("d4")])
    docker_ctl(w, engine, "sleep 60")
    wait_for(lambda: "claiming paused" in w.log(), what="pause")
    time.sleep(0.5)
    assert roll(w, rid)[0].state == pb.ROLLOUT_QUEUED
    engine.start()
    wait_for(lambda: roll(w, rid)[0].state == pb.ROLLOUT_RUNNING,
             what="running after the engine came back")
    assert "available again" in w.log()
    assert len(engine.containers) == 1


def test_restart_adopts_running_containers(world, engine):
    w = world
    (rid,) = enqueue(w.client, [task("d5")])
    p = docker_ctl(w, engine, "sleep 60")
    wait_for(lambda: roll(w, rid)[0].state == pb.ROLLOUT_RUNNING,
             what="running")
    p.send_signal(signal.SIGKILL)
    p.wait()
    # Containers outlive the controller; the next one takes them over.
    assert len(engine.containers) == 1
    docker_ctl(w, engine, "sleep 60", log="ctl2.log")
    wait_for(lambda: "adopting" in w.log("ctl2.log"), what="adoption")
    time.sleep(0.5)
    assert roll(w, rid)[0].state == pb.ROLLOUT_RUNNING
    assert roll(w, rid)[0].attempts == 1
    w.client.ok("cancel", pb.CancelReq(rollout_ids=[rid]))
    wait_for(lambda: not engine.containers, what="container removed")
