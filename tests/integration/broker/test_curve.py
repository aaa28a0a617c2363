"""The authenticated bus: a real lisa-broker with CURVE on and a key set
made by `lisa keys`, spoken to over real ZeroMQ sockets (pyzmq CURVE).

A client without a listed key completes no handshake and gets nothing on
any socket; a client with a listed key may make only the requests of its
role, and gets CODE_UNAUTHORIZED (and no effect) for the others.
"""
import json
import os
import subprocess
import sys
import time

import pytest
import zmq
import zmq.auth

from brokerlib import (BROKER, ROLES, Broker, Client, RewardWorker, claim,
                       enqueue, make_keys, pb, state_of, task)

# Who may make which request: the policy of docs/deploy.md, written here
# independently of the broker's table. PolicyReq with set=true is the
# trainer's alone (checked separately below).
ALLOWED = {
    "enqueue": {"trainer", "operator"},
    "claim": {"controller"},
    "attempt_start": {"controller"},
    "heartbeat": {"controller", "gateway"},
    "attempt_complete": {"gateway"},
    "attempt_fail": {"controller"},
    "get_task": {"gateway"},
    "wait": {"trainer", "operator"},
    "query": {"controller", "gateway", "trainer", "operator"},
    "cancel": {"trainer", "operator"},
    "stats": set(ROLES),
    "policy": set(ROLES),
    "span_put": {"gateway"},
    "span_status": {"gateway"},
    "engine_register": {"trainer"},
    "engine_list": {"gateway", "trainer", "operator"},
    "export": {"operator"},
}


@pytest.fixture
def keys(tmp_path):
    return make_keys(tmp_path / "keys")


@pytest.fixture
def cbroker(tmp_path, keys):
    b = Broker(tmp_path / "data", keys=keys).start()
    yield b
    b.stop()


def test_usage_a_trainer_key_sets_the_policy(cbroker, keys):
    trainer = Client(cbroker.ep["rpc"], keys=keys, role="trainer")
    assert trainer.ok("policy", pb.PolicyReq(set=True, version=3)).version == 3
    op = Client(cbroker.ep["rpc"], keys=keys, role="operator")
    assert op.ok("stats", pb.StatsReq()).stats.policy_version == 3
    assert op.ok("policy", pb.PolicyReq()).version == 3


def test_key_set_layout_and_modes(keys):
    for role in ROLES:
        pub, sec = zmq.auth.load_certificate(
            os.path.join(keys, role + ".cert_secret"))
        assert pub and sec
        cpub, csec = zmq.auth.load_certificate(
            os.path.join(keys, "clients", role + ".cert"))
        assert cpub == pub and csec is None
        text = open(os.path.join(keys, "clients", role + ".cert")).read()
        assert 'role = "%s"' % role in text
        assert os.stat(os.path.join(keys, role + ".cert_secret")).st_mode & 0o077 == 0
    bpub, bsec = zmq.auth.load_certificate(os.path.join(keys, "broker.cert"))
    assert bpub and bsec is None
    assert os.stat(os.path.join(keys, "broker.cert_secret")).st_mode & 0o077 == 0
    # a second set has other keys
    other = make_keys(os.path.join(keys, "..", "keys2"))
    assert zmq.auth.load_certificate(os.path.join(other, "broker.cert"))[0] != bpub


def _request(body):
    req = pb.Request(version=1, request_id=1, caller="intruder")
    getattr(req, body).SetInParent()
    if body == "policy":
        req.policy.set = True
        req.policy.version = 10 ** 12
    return req


def test_no_key_gets_nothing_on_any_socket(cbroker, keys, tmp_path):
    ctx = zmq.Context.instance()
    plain = ctx.socket(zmq.DEALER)
    plain.setsockopt(zmq.LINGER, 0)
    plain.connect(cbroker.ep["rpc"])
    # a well-formed CURVE key the broker does not list
    stranger = ctx.socket(zmq.DEALER)
    stranger.setsockopt(zmq.LINGER, 0)
    spub, ssec = zmq.curve_keypair()
    stranger.curve_publickey, stranger.curve_secretkey = spub, ssec
    stranger.curve_serverkey = zmq.auth.load_certificate(
        os.path.join(keys, "broker.cert"))[0]
    stranger.connect(cbroker.ep["rpc"])
    for s in (plain, stranger):
        # a refused peer may never get a connection to queue on: a send
        # that cannot be made is nothing sent either
        s.setsockopt(zmq.SNDTIMEO, 1000)
    for body in ALLOWED:
        data = _request(body).SerializeToString()
        for s in (plain, stranger):
            try:
                s.send_multipart([b"", data])
            except zmq.Again:
                pass
    assert not plain.poll(1500) and not stranger.poll(100)
    # and nothing happened: the policy version is still 0
    op = Client(cbroker.ep["rpc"], keys=keys, role="operator")
    assert op.ok("stats", pb.StatsReq()).stats.policy_version == 0
    # events: a plain subscriber hears nothing, a keyed one does
    sub_plain = ctx.socket(zmq.SUB)
    sub_plain.setsockopt(zmq.LINGER, 0)
    sub_plain.setsockopt(zmq.SUBSCRIBE, b"")
    sub_plain.connect(cbroker.ep["events"])
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    from brokerlib import curve_client
    curve_client(sub, keys, "controller")
    sub.connect(cbroker.ep["events"])
    time.sleep(0.5)  # let the subscriptions reach the PUB socket
    trainer = Client(cbroker.ep["rpc"], keys=keys, role="trainer")
    enqueue(trainer, [task("q1")], run="ev")
    assert sub.poll(5000)
    assert sub.recv_multipart()[0] == b"rollout"
    assert not sub_plain.poll(500)
    # a plain reward worker is not admitted: it is never a worker
    w = RewardWorker(cbroker.ep["workers"], worker_id="plain")
    w.start()
    time.sleep(0.5)
    assert op.ok("stats", pb.StatsReq()).stats.workers == 0
    w.stop()
    for s in (plain, stranger, sub_plain, sub):
        s.close(0)


@pytest.mark.parametrize("role", ROLES)
def test_other_roles_are_refused_every_request_they_may_not_make(
        cbroker, keys, role):
    c = Client(cbroker.ep["rpc"], keys=keys, role=role)
    refused = [b for b, who in ALLOWED.items() if role not in who]
    assert refused
    for body in refused:
        req = _request(body)
        c.send(req)
        rep = c.recv()
        assert rep.code == pb.CODE_UNAUTHORIZED, (role, body, rep.code, rep.error)
        assert role in rep.error and body in rep.error
    # PolicyReq set=true: the trainer's alone, whatever the version
    if role != "trainer":
        rep = c.call("policy", pb.PolicyReq(set=True, version=10 ** 12))
        assert rep.code == pb.CODE_UNAUTHORIZED, rep
        assert c.ok("policy", pb.PolicyReq()).version == 0
    # the requests it may make are not refused for its role
    for body in ALLOWED:
        if role in ALLOWED[body] and body != "policy":
            rep = c.call(body, getattr(_request(body), body))
            assert rep.code != pb.CODE_UNAUTHORIZED, (role, body, rep.error)


def test_claims_scores_and_spans_only_with_the_right_key(cbroker, keys):
    ep = cbroker.ep
    trainer = Client(ep["rpc"], keys=keys, role="trainer")
    rid = enqueue(trainer, [task("q", truth="42")], run="r")[0]
    # a gateway or an operator cannot claim: the rollout stays queued and
    # no attempt token leaves the broker
    for role in ("gateway", "operator", "reward", "trainer"):
        c = Client(ep["rpc"], keys=keys, role=role)
        rep = c.call("claim", pb.ClaimReq(controller_id="x", capacity=5))
        assert rep.code == pb.CODE_UNAUTHORIZED and not rep.claim.attempts
    assert state_of(trainer, rid) == pb.ROLLOUT_QUEUED
    ctl = Client(ep["rpc"], keys=keys, role="controller")
    got = claim(ctl)
    assert [a.rollout.rollout_id for a in got] == [rid] and got[0].token
    # a worker with a trainer's key is never registered and never sees the
    # ground truth; a worker with the reward key is and does
    fake = RewardWorker(ep["workers"], worker_id="fake", keys=keys,
                        role="trainer")
    fake.start()
    time.sleep(0.5)
    op = Client(ep["rpc"], keys=keys, role="operator")
    assert op.ok("stats", pb.StatsReq()).stats.workers == 0
    # spans: over RPC (the fast path) and over PUSH, only a gateway's count
    span = pb.Span(rollout_id=rid, attempt=1, seq=0, prev_seq=-1,
                   appended_ids=[1, 2], response_ids=[3],
                   response_logprobs=[-0.5])
    rep = trainer.call("span_put", pb.SpanPutReq(spans=[span]))
    assert rep.code == pb.CODE_UNAUTHORIZED
    ctx = zmq.Context.instance()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 1000)
    from brokerlib import curve_client
    curve_client(push, keys, "trainer")
    push.connect(ep["spans"])
    push.send(pb.SpanPush(version=1, span=span).SerializeToString())
    gw = Client(ep["rpc"], keys=keys, role="gateway")
    time.sleep(0.5)
    st = gw.ok("span_status", pb.SpanStatusReq(rollout_id=rid, attempt=1))
    assert st.count == 0, st
    assert gw.ok("span_put", pb.SpanPutReq(spans=[span])).stored == 1
    gw.ok("attempt_complete", pb.AttemptCompleteReq(
        rollout_id=rid, attempt=1, result=pb.AttemptResult(answer="42")))
    # a reward 1.0 can come only from the real worker
    w = RewardWorker(ep["workers"], worker_id="real", keys=keys)
    w.start()
    op.ok("wait", pb.WaitReq(rollout_ids=[rid], timeout_ms=10000))
    assert state_of(op, rid) == pb.ROLLOUT_SUCCEEDED
    assert not fake.received and len(w.received) == 1
    assert w.received[0].ground_truth == "42"
    assert op.ok("stats", pb.StatsReq()).stats.bad_frames >= 1
    fake.stop()
    w.stop()
    push.close(0)


def test_broker_refuses_to_start_with_curve_on_and_no_keys(tmp_path):
    base = [BROKER, "--data", str(tmp_path / "d"), "--rpc", "tcp://127.0.0.1:*",
            "--spans", "tcp://127.0.0.1:*", "--events", "tcp://127.0.0.1:*",
            "--workers", "tcp://127.0.0.1:*"]
    p = subprocess.run(base, capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert "curve" in p.stderr and "lisa keys" in p.stderr
    p = subprocess.run(base + ["--curve", "maybe"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "curve must be" in p.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    keys = make_keys(tmp_path / "k")
    p = subprocess.run(base + ["--curve-cert",
                               os.path.join(keys, "broker.cert_secret"),
                               "--curve-clients", str(empty)],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0 and "no client certificate" in p.stderr


def test_clients_and_cli_take_the_operator_key(cbroker, keys, tmp_path):
    src = os.environ.get("LISA_SOURCE_DIR", os.path.join(
        os.path.dirname(__file__), "..", "..", ".."))
    clients = os.path.join(src, "clients")
    verl = os.path.join(src, "tests", "fixtures", "seed-samples",
                        "verl_records_excerpt.json")
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") \
        else sys.executable
    from brokerlib import BIN, LISA
    env = dict(os.environ, LISA_BROKER=cbroker.ep["rpc"],
               LISA_BROKER_EVENTS=cbroker.ep["events"], LISA_BINARY_DIR=BIN,
               LISA_CLIENT_TIMEOUT="2")
    op = os.path.join(keys, "operator.cert_secret")
    bc = os.path.join(keys, "broker.cert")

    def script(name, *args, extra=None):
        return subprocess.run([py, os.path.join(clients, name), *args],
                              env=dict(env, **(extra or {})),
                              capture_output=True, text=True, timeout=120)

    p = script("submit_tasks.py", verl, "--run", "k", "--key-file", op,
               "--broker-cert", bc)
    assert p.returncode == 0, p.stderr
    assert len(json.loads(p.stdout)["rollout_ids"]) == 5
    # the key from the environment, as the CLI takes it
    p = script("export_results.py", "--run", "k", "-o", str(tmp_path / "x"),
               extra={"LISA_CURVE_CERT": op, "LISA_BROKER_CERT": bc})
    assert p.returncode == 0, p.stderr
    # without a key: no answer at all
    p = script("submit_tasks.py", verl, "--run", "k2")
    assert p.returncode != 0 and "no reply" in p.stderr, p.stderr
    # another role's key (the gateway's) may not export
    p = script("export_results.py", "--run", "k", "--key-file",
               os.path.join(keys, "gateway.cert_secret"), "--broker-cert", bc)
    assert p.returncode != 0 and "CODE_UNAUTHORIZED" in p.stderr, p.stderr
    r = subprocess.run([LISA, "status", "--json", "--run", "k"],
                       env=dict(env, LISA_CURVE_CERT=op, LISA_BROKER_CERT=bc),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["queued"] == 5
    r = subprocess.run([LISA, "status", "--json"],
                       env=dict(env, LISA_CURVE_CERT=op), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "both" in r.stderr, r.stderr
