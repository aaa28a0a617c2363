"""lisa-controller with the k8s backend against a real lisa-broker and a
Kubernetes API stand-in (fake_k8s.py) with recorded Job semantics."""
import os
import signal
import sys
import time

import pytest

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "broker"))
sys.path.insert(0, HERE)

from brokerlib import enqueue, pb, task  # noqa: E402
from fake_k8s import ApiServer  # noqa: E402
from test_controller_local import roll, wait_for, world  # noqa: E402,F401


@pytest.fixture
def api(world):
    a = ApiServer().start()
    with open(os.path.join(world.scratch, "token"), "w") as f:
        f.write(a.token + "\n")
    yield a
    a.close()


def k8s_ctl(w, api, cmd, **opts):
    return w.controller(cmd, backend="k8s", k8s_api=api.url,
                        k8s_namespace=api.ns,
                        k8s_token_file=os.path.join(w.scratch, "token"),
                        k8s_ca_file="", image="lisa-sandbox:test",
                        gateway_url="http://lisa-gateway:7180",
                        gateway_socket="", k8s_ttl_s=600, **opts)


def failed(w, rid):
    return lambda: (lambda r: r if r[0].state == pb.ROLLOUT_FAILED
                    else None)(roll(w, rid))


def test_job_spec_failure_report_and_background_delete(world, api):
    w = world
    (rid,) = enqueue(w.client, [task("k1", limits=pb.Limits(
        memory_bytes=1 << 30, cpu_millis=2000, disk_bytes=1 << 28))])
    k8s_ctl(w, api, "echo first; echo final words; exit 5")
    r, atts = wait_for(failed(w, rid), what="failed")
    assert r.failure_kind == pb.FAILURE_AGENT
    assert "final words" in atts[0].reason
    wait_for(lambda: not api.jobs, what="job deleted")
    assert api.deletes and all(p == "Background" for _, p in api.deletes)
    job = [b for m, p, b in api.requests if m == "POST"][0]
    assert job["metadata"]["name"] == atts[0].sandbox_id
    spec = job["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["ttlSecondsAfterFinished"] == 600
    assert 0 < spec["activeDeadlineSeconds"] <= 1801
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    c = pod["containers"][0]
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["limits"] == {"cpu": "2000m", "memory": str(1 << 30),
                                        "ephemeral-storage": str(1 << 28)}
    env = {e["name"]: e["value"] for e in c["env"]}
    assert env["LISA_GATEWAY_URL"] == "http://lisa-gateway:7180"
    assert len(env["LISA_ATTEMPT_TOKEN"]) > 10
    labels = job["metadata"]["labels"]
    assert labels["lisa/controller"] == "ctl-it"
    assert job["metadata"]["annotations"]["lisa/rollout-id"] == rid
    # The cache came from one LIST, then a WATCH from its version.
    gets = [p for m, p, _ in api.requests if m == "GET" and "/jobs?" in p]
    assert any("watch=1" in p and "resourceVersion=" in p and
               "allowWatchBookmarks=true" in p for p in gets)


def test_oom_is_reported(world, api):
    w = world
    (rid,) = enqueue(w.client, [task("k2")])
    k8s_ctl(w, api, "oom: allocate everything")
    r, _ = wait_for(failed(w, rid), what="oom failure")
    assert r.failure_kind == pb.FAILURE_OOM


def test_deadline_exceeded_job(world, api):
    w = world
    (rid,) = enqueue(w.client, [task("k4", limits=pb.Limits(deadline_ms=1200))])
    # A long grace: the Job's own activeDeadlineSeconds fires first.
    k8s_ctl(w, api, "sleep 60", grace_ms=20000)
    r, _ = wait_for(failed(w, rid), timeout=20, what="deadline")
    assert r.failure_kind == pb.FAILURE_DEADLINE


def test_watch_410_relists_and_cancel_deletes(world, api):
    w = world
    (rid,) = enqueue(w.client, [task("k5")])
    k8s_ctl(w, api, "sleep 60")
    wait_for(lambda: roll(w, rid)[0].state == pb.ROLLOUT_RUNNING,
             what="running")
    lists_before = sum(1 for m, p, _ in api.requests
                       if m == "GET" and "/jobs?labelSelector" in p)
    api.compact()  # the watch's version is gone: 410 inside the stream
    wait_for(lambda: sum(1 for m, p, _ in api.requests
                         if m == "GET" and "/jobs?labelSelector" in p)
             > lists_before, what="re-list after 410")
    assert "listing again" in w.log()
    w.client.ok("cancel", pb.CancelReq(rollout_ids=[rid]))
    wait_for(lambda: not api.jobs, what="job deleted")
    assert api.deletes[-1][1] == "Background"


def test_duplicate_create_is_taken_and_restart_adopts(world, api):
    w = world
    (rid,) = enqueue(w.client, [task("k6")])
    p = k8s_ctl(w, api, "sleep 60")
    wait_for(lambda: roll(w, rid)[0].state == pb.ROLLOUT_RUNNING,
             what="running")
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert len(api.jobs) == 1  # Jobs outlive the controller
    k8s_ctl(w, api, "sleep 60", log="ctl2.log")
    wait_for(lambda: "adopting" in w.log("ctl2.log"), what="adoption")
    time.sleep(0.5)
    assert roll(w, rid)[0].state == pb.ROLLOUT_RUNNING
    assert len(api.jobs) == 1


def test_bad_token_pauses_claims(world, api):
    w = world
    with open(os.path.join(w.scratch, "token"), "w") as f:
        f.write("wrong\n")
    (rid,) = enqueue(w.client, [task("k7")])
    k8s_ctl(w, api, "sleep 60")
    wait_for(lambda: "claiming paused" in w.log(), what="pause")
    time.sleep(0.5)
    assert roll(w, rid)[0].state == pb.ROLLOUT_QUEUED
    assert not api.jobs


@pytest.mark.broker_opts(lease_ms=1000)
def test_pending_sandbox_keeps_its_lease(world, api):
    w = world
    api.pending = True
    (rid,) = enqueue(w.client, [task("k8")])
    k8s_ctl(w, api, "sleep 60")
    wait_for(lambda: api.jobs, what="job")
    time.sleep(3.0)  # three leases long, the pod still unscheduled
    r, atts = roll(w, rid)
    assert r.attempts == 1 and atts[0].failure_kind == pb.FAILURE_NONE
    assert r.state in (pb.ROLLOUT_CLAIMED, pb.ROLLOUT_RUNNING)
    api.release()
    wait_for(lambda: any(j.get("proc") for j in api.jobs.values()),
             what="pod running")


def test_existing_job_of_the_attempt_is_taken_not_duplicated(world, api):
    """A create that answers 409 (the Job of this attempt exists, e.g. made
    before a crash) is taken as the attempt's sandbox."""
    import json
    import re
    import urllib.request
    w = world
    (rid,) = enqueue(w.client, [task("k9")])
    name = "lisa-" + re.sub(r"[^a-z0-9]", "-", rid.lower()) + "-a1"
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": name, "labels": {"lisa/controller": "ctl-it"},
                        "annotations": {"lisa/rollout-id": rid,
                                        "lisa/attempt": "1",
                                        "lisa/deadline-ms": "9999999999999"}},
           "spec": {"activeDeadlineSeconds": 600, "template": {"spec": {
               "restartPolicy": "Never",
               "containers": [{"name": "agent", "command": ["sleep", "60"],
                               "env": []}]}}}}
    req = urllib.request.Request(
        api.url + f"/apis/batch/v1/namespaces/{api.ns}/jobs",
        data=json.dumps(job).encode(), method="POST",
        headers={"Authorization": "Bearer " + api.token,
                 "Content-Type": "application/json"})
    assert urllib.request.urlopen(req).status == 201
    k8s_ctl(w, api, "sleep 60")
    wait_for(lambda: roll(w, rid)[0].state == pb.ROLLOUT_RUNNING,
             what="running")
    assert "already exists; taking it" in w.log()
    time.sleep(1.0)  # several ticks and cross-checks: nothing undoes it
    assert roll(w, rid)[0].state == pb.ROLLOUT_RUNNING
    assert roll(w, rid)[0].attempts == 1
    assert list(api.jobs) == [name]
    assert roll(w, rid)[1][0].sandbox_id == name
