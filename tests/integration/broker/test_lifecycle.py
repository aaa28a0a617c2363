"""Drives every row of the broker's rollout state table against a real
broker process and real reward workers on loopback."""
import json
import os
import subprocess
import time

import pytest
import zmq

from brokerlib import (BIN, Client, RewardWorker, claim, enqueue, pb, rollout,
                       state_of, task, wait_state)


def complete(c, rid, attempt, answer="42", expected_spans=0):
    return c.call("attempt_complete", pb.AttemptCompleteReq(
        rollout_id=rid, attempt=attempt, expected_spans=expected_spans,
        result=pb.AttemptResult(answer=answer, turns=3, end_reason="submit")))


def events_of(sub, timeout=2.0):
    out = []
    while sub.poll(int(timeout * 1000)):
        topic, data = sub.recv_multipart()
        ev = pb.Event()
        ev.ParseFromString(data)
        out.append((topic.decode(), ev))
        timeout = 0.2
    return out


def test_happy_path_records_every_transition(broker, client):
    w = RewardWorker(broker.ep["workers"])
    w.start()
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(broker.ep["events"])
    time.sleep(0.2)  # slow joiner
    ids = enqueue(client, [task("2+40", truth="42", n=2)], step=3,
                  policy_version=0)
    assert len(ids) == 2
    got = claim(client, capacity=5)
    assert sorted(a.rollout.rollout_id for a in got) == sorted(ids)
    for a in got:
        assert a.attempt == 1 and a.token.startswith("v1.")
        assert a.rollout.state == pb.ROLLOUT_CLAIMED
        assert a.deadline_ms > time.time() * 1000
    rid = ids[0]
    client.ok("attempt_start", pb.AttemptStartReq(rollout_id=rid, attempt=1,
                                                  sandbox_id="sbx-1"))
    assert state_of(client, rid) == pb.ROLLOUT_RUNNING
    hb = client.ok("heartbeat", pb.HeartbeatReq(rollout_id=rid, attempt=1))
    assert not hb.cancel and hb.lease_expiry_ms > time.time() * 1000
    # the other one starts running through the agent's task fetch
    tv = client.ok("get_task", pb.GetTaskReq(rollout_id=ids[1], attempt=1)).task
    assert tv.problem_statement == "2+40"
    assert "ground_truth" not in tv.extra_info_json
    assert json.loads(tv.extra_info_json) == {"qa_type": "open"}
    assert state_of(client, ids[1]) == pb.ROLLOUT_RUNNING
    for i, r in enumerate(ids):
        rep = complete(client, r, 1, answer="42" if i == 0 else "41")
        assert rep.code == pb.CODE_OK, rep.error
    wr = client.ok("wait", pb.WaitReq(rollout_ids=ids, timeout_ms=5000))
    assert not wr.pending_ids
    rewards = {r.rollout_id: r.reward.value for r in wr.rollouts}
    assert rewards == {ids[0]: 1.0, ids[1]: 0.0}
    for r in wr.rollouts:
        assert r.state == pb.ROLLOUT_SUCCEEDED and r.reward.worker_id == "w1"
    q = rollout(client, rid, with_attempts=True, with_transitions=True)
    assert [a.state for a in q.attempts] == [pb.ATTEMPT_SUCCEEDED]
    assert q.attempts[0].sandbox_id == "sbx-1"
    assert q.attempts[0].result.answer == "42"
    steps = [(t.event, pb.RolloutState.Name(t.to_state)) for t in q.transitions]
    assert steps == [("enqueue", "ROLLOUT_QUEUED"), ("claim", "ROLLOUT_CLAIMED"),
                     ("start", "ROLLOUT_RUNNING"), ("complete", "ROLLOUT_SCORING"),
                     ("scored", "ROLLOUT_SUCCEEDED")]
    assert all(t.time_ms > 0 for t in q.transitions)
    evs = events_of(sub)
    seqs = [e.seq for _, e in evs]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    states = [e.rollout.state for t, e in evs if t == "rollout" and e.rollout.rollout_id == rid]
    assert states == [pb.ROLLOUT_QUEUED, pb.ROLLOUT_CLAIMED, pb.ROLLOUT_RUNNING,
                      pb.ROLLOUT_SCORING, pb.ROLLOUT_SUCCEEDED]
    w.stop()
    sub.close(0)


def test_lease_expiry_retries_then_fails(make_broker):
    b = make_broker(lease_ms=1500, max_attempts=2)
    c = Client(b.ep["rpc"])
    rid = enqueue(c, [task()])[0]
    assert claim(c)[0].attempt == 1
    wait_state(c, rid, pb.ROLLOUT_QUEUED, timeout=10)
    q = rollout(c, rid, with_attempts=True)
    assert q.attempts[0].state == pb.ATTEMPT_FAILED
    assert q.attempts[0].failure_kind == pb.FAILURE_LEASE
    assert "lease expired" in q.attempts[0].reason
    # heartbeats keep the second attempt alive past several lease periods
    time.sleep(0.15)  # backoff
    a2 = claim(c)
    assert len(a2) == 1 and a2[0].attempt == 2
    for _ in range(6):
        hb = c.ok("heartbeat", pb.HeartbeatReq(rollout_id=rid, attempt=2))
        assert not hb.cancel
        time.sleep(0.3)
    assert state_of(c, rid) == pb.ROLLOUT_RUNNING
    # an old attempt's heartbeat is told to stop
    assert c.ok("heartbeat", pb.HeartbeatReq(rollout_id=rid, attempt=1)).cancel
    # then silence: no attempts left, so the rollout fails for good
    wait_state(c, rid, pb.ROLLOUT_FAILED, timeout=10)
    r = rollout(c, rid).rollouts[0]
    assert r.failure_kind == pb.FAILURE_LEASE and r.attempts == 2
    c.close()


def test_infra_failures_retry_with_backoff_and_agent_failure_is_terminal(make_broker):
    b = make_broker(max_attempts=3, backoff_ms=1500, backoff_max_ms=1500)
    c = Client(b.ep["rpc"])
    rid = enqueue(c, [task()])[0]
    claim(c)
    rep = c.ok("attempt_fail", pb.AttemptFailReq(rollout_id=rid, attempt=1,
                                                 kind=pb.FAILURE_SANDBOX,
                                                 reason="image pull failed"))
    assert rep.retried
    # the repeated report is answered the same way and changes nothing
    rep = c.ok("attempt_fail", pb.AttemptFailReq(rollout_id=rid, attempt=1,
                                                 kind=pb.FAILURE_SANDBOX,
                                                 reason="image pull failed"))
    assert rep.retried
    assert state_of(c, rid) == pb.ROLLOUT_QUEUED
    assert claim(c) == []  # backoff: not claimable yet
    end = time.time() + 10
    a = []
    while not a and time.time() < end:
        time.sleep(0.1)
        a = claim(c)
    assert a[0].attempt == 2
    rep = c.ok("attempt_fail", pb.AttemptFailReq(rollout_id=rid, attempt=2,
                                                 kind=pb.FAILURE_AGENT,
                                                 reason="agent crashed"))
    assert not rep.retried
    r = rollout(c, rid, with_attempts=True)
    assert r.rollouts[0].state == pb.ROLLOUT_FAILED
    assert r.rollouts[0].failure_kind == pb.FAILURE_AGENT
    assert r.rollouts[0].reason == "agent crashed"
    assert [a.failure_kind for a in r.attempts] == [pb.FAILURE_SANDBOX, pb.FAILURE_AGENT]
    c.close()


def test_retry_limit_ends_in_failed(make_broker):
    b = make_broker(max_attempts=3, backoff_ms=1, backoff_max_ms=1)
    c = Client(b.ep["rpc"])
    rid = enqueue(c, [task(max_attempts=2)])[0]
    for n in (1, 2):
        time.sleep(0.01)
        assert claim(c)[0].attempt == n
        rep = c.ok("attempt_fail", pb.AttemptFailReq(rollout_id=rid, attempt=n,
                                                     kind=pb.FAILURE_INFRA,
                                                     reason="node lost"))
        assert rep.retried == (n == 1)
    r = rollout(c, rid).rollouts[0]
    assert r.state == pb.ROLLOUT_FAILED and r.failure_kind == pb.FAILURE_INFRA
    assert r.max_attempts == 2 and r.attempts == 2
    c.close()


def test_deadline_ends_a_heartbeating_attempt(broker, client):
    rid = enqueue(client, [task(limits=pb.Limits(deadline_ms=1500))])[0]
    a = claim(client)[0]
    assert a.deadline_ms - time.time() * 1000 < 1600
    client.ok("attempt_start", pb.AttemptStartReq(rollout_id=rid, attempt=1))
    end = time.time() + 10
    while time.time() < end and state_of(client, rid) == pb.ROLLOUT_RUNNING:
        client.ok("heartbeat", pb.HeartbeatReq(rollout_id=rid, attempt=1))
        time.sleep(0.03)
    r = rollout(client, rid, with_attempts=True)
    assert r.rollouts[0].state == pb.ROLLOUT_FAILED
    assert r.rollouts[0].failure_kind == pb.FAILURE_DEADLINE
    assert "deadline passed" in r.rollouts[0].reason
    assert client.ok("heartbeat", pb.HeartbeatReq(rollout_id=rid, attempt=1)).cancel


def test_deadline_covers_claim_and_scoring(broker, client):
    # never started: the deadline runs from the claim
    r1 = enqueue(client, [task("a", limits=pb.Limits(deadline_ms=150))])[0]
    claim(client)
    wait_state(client, r1, pb.ROLLOUT_FAILED, timeout=5)
    # result posted but no reward worker: the deadline ends scoring too
    r2 = enqueue(client, [task("b", limits=pb.Limits(deadline_ms=2000))])[0]
    claim(client)
    assert complete(client, r2, 1).code == pb.CODE_OK
    assert state_of(client, r2) == pb.ROLLOUT_SCORING
    wait_state(client, r2, pb.ROLLOUT_FAILED, timeout=10)
    q = rollout(client, r2, with_transitions=True)
    assert q.rollouts[0].failure_kind == pb.FAILURE_DEADLINE
    assert q.transitions[-1].event == "deadline"
    assert q.transitions[-1].from_state == pb.ROLLOUT_SCORING


def test_reward_worker_dying_mid_request_is_redispatched(broker, client):
    dying = RewardWorker(broker.ep["workers"], worker_id="dying", die_on_request=True)
    dying.start()
    time.sleep(0.2)
    rid = enqueue(client, [task()])[0]
    claim(client)
    assert complete(client, rid, 1).code == pb.CODE_OK
    assert dying.dead.wait(3), "the dying worker never got the request"
    healthy = RewardWorker(broker.ep["workers"], worker_id="healthy")
    healthy.start()
    wr = client.ok("wait", pb.WaitReq(rollout_ids=[rid], timeout_ms=5000))
    r = wr.rollouts[0]
    assert r.state == pb.ROLLOUT_SUCCEEDED
    assert r.reward.worker_id == "healthy" and r.reward.value == 1.0
    assert len(dying.received) == 1 and dying.received[0].ground_truth == "42"
    assert client.ok("stats", pb.StatsReq()).stats.workers == 1
    healthy.stop()


def test_reward_invalid_fails_the_rollout(broker, client):
    w = RewardWorker(broker.ep["workers"])
    w.start()
    rid = enqueue(client, [task(source="unknown")])[0]
    claim(client)
    complete(client, rid, 1)
    wr = client.ok("wait", pb.WaitReq(rollout_ids=[rid], timeout_ms=5000))
    r = wr.rollouts[0]
    assert r.state == pb.ROLLOUT_FAILED and r.failure_kind == pb.FAILURE_REWARD
    assert "unknown data source" in r.reason
    w.stop()


def test_worker_serves_only_its_data_sources(broker, client):
    w = RewardWorker(broker.ep["workers"], worker_id="bio", sources=["biomed"])
    w.start()
    time.sleep(0.2)
    r_math = enqueue(client, [task("m", source="math_x")])[0]
    r_bio = enqueue(client, [task("b", source="biomed_mini")])[0]
    claim(client)
    complete(client, r_math, 1)
    complete(client, r_bio, 1)
    wait_state(client, r_bio, pb.ROLLOUT_SUCCEEDED)
    time.sleep(0.2)
    assert state_of(client, r_math) == pb.ROLLOUT_SCORING
    w.stop()


def test_score_no_connected_worker_serves_fails_with_a_reason(make_broker):
    # Workers are connected, none scores the data source: after the grace
    # the rollout fails with FAILURE_REWARD naming the source and what the
    # workers serve, rather than waiting for the whole deadline. A source a
    # worker joins for within the grace is scored, and with no worker
    # connected at all a score waits (workers may still come), and the
    # broker's log says why.
    b = make_broker(score_unroutable_ms=400)
    c = Client(b.ep["rpc"])
    r_none = enqueue(c, [task("n", source="math_x")])[0]
    claim(c)
    complete(c, r_none, 1)
    time.sleep(0.8)
    assert state_of(c, r_none) == pb.ROLLOUT_SCORING  # no worker at all yet
    # ... which the broker says in its log
    assert "no reward worker is connected: score jobs waiting: 1, for 0 s" \
        in b.log_text(), b.log_text()
    bio = RewardWorker(b.ep["workers"], worker_id="bio", sources=["biomed"])
    bio.start()
    time.sleep(0.2)
    r_if = enqueue(c, [task("i", source="instruct_follow_mini")])[0]
    r_late = enqueue(c, [task("l", source="long_context_mini")])[0]
    claim(c)
    complete(c, r_if, 1)
    complete(c, r_late, 1)
    time.sleep(0.1)
    qa = RewardWorker(b.ep["workers"], worker_id="qa",
                      sources=["long_context", "instruct_pretrain"])
    qa.start()
    wait_state(c, r_late, pb.ROLLOUT_SUCCEEDED)
    for rid, source in ((r_if, "instruct_follow_mini"), (r_none, "math_x")):
        wait_state(c, rid, pb.ROLLOUT_FAILED, timeout=5.0)
        q = rollout(c, rid).rollouts[0]
        assert q.failure_kind == pb.FAILURE_REWARD, q
        assert ("no reward worker scores data source '%s'" % source
                in q.reason), q.reason
        assert "connected workers serve: " in q.reason and "biomed" in q.reason
    # r_if waited until both workers were connected: both are named, once
    why = rollout(c, r_if).rollouts[0].reason
    served = why.split("serve: ")[1].rstrip(")").split(", ")
    assert sorted(served) == ["biomed", "instruct_pretrain", "long_context"], why
    # the loop keeps serving: a scorable rollout still succeeds
    r_ok = enqueue(c, [task("b", source="biomed_mini")])[0]
    claim(c)
    complete(c, r_ok, 1)
    wait_state(c, r_ok, pb.ROLLOUT_SUCCEEDED)
    bio.stop()
    qa.stop()
    c.close()


def test_real_reward_worker_scores_and_refuses_what_it_cannot(make_broker):
    # The real lisa-reward worker advertises the recipe's routes; a data
    # source outside them fails within the grace with the worker's routes in
    # the reason, the others are scored.
    exe = os.path.join(BIN, "bin", "lisa-reward")
    if not os.access(exe, os.X_OK):
        pytest.skip("lisa-reward not built")
    b = make_broker(score_unroutable_ms=300)
    w = subprocess.Popen([exe, "worker", "--broker", b.ep["workers"],
                          "--threads", "1", "--heartbeat-ms", "50",
                          "--log-level", "warn"])
    try:
        c = Client(b.ep["rpc"])
        r_math = enqueue(c, [task("m", truth="70", source="math_mini")])[0]
        r_if = enqueue(c, [task("i", source="astrology_mini",
                                truth='{"instruction_id_list": []}')])[0]
        claim(c)
        complete(c, r_math, 1, answer="so \\boxed{70}")
        complete(c, r_if, 1, answer="whatever")
        wait_state(c, r_math, pb.ROLLOUT_SUCCEEDED, timeout=10.0)
        assert rollout(c, r_math).rollouts[0].reward.value == 1.0
        wait_state(c, r_if, pb.ROLLOUT_FAILED, timeout=10.0)
        q = rollout(c, r_if).rollouts[0]
        assert q.failure_kind == pb.FAILURE_REWARD
        assert "'astrology_mini'" in q.reason, q.reason
        for route in ("math", "biomed", "instruct_pretrain", "long_context",
                      "instruct_follow"):
            assert route in q.reason.split("serve: ")[1], q.reason
        c.close()
    finally:
        w.terminate()
        w.wait(timeout=10)


def test_cancel_in_every_open_state(broker, client):
    ids = enqueue(client, [task("x", n=4)], run="run-c")
    claim(client, capacity=3)  # ids 0..2 claimed, 3 stays queued (oldest first)
    claimed = [r for r in ids if state_of(client, r) == pb.ROLLOUT_CLAIMED]
    queued = [r for r in ids if state_of(client, r) == pb.ROLLOUT_QUEUED]
    assert len(claimed) == 3 and len(queued) == 1
    client.ok("attempt_start", pb.AttemptStartReq(rollout_id=claimed[1], attempt=1))
    complete(client, claimed[2], 1)  # scoring (no worker)
    rep = client.ok("cancel", pb.CancelReq(rollout_ids=[queued[0], claimed[0]],
                                           reason="operator"))
    assert rep.cancelled == 2
    rep = client.ok("cancel", pb.CancelReq(run_id="run-c"))
    assert rep.cancelled == 2
    for r in ids:
        assert state_of(client, r) == pb.ROLLOUT_CANCELLED
    hb = client.ok("heartbeat", pb.HeartbeatReq(rollout_id=claimed[1], attempt=1))
    assert hb.cancel
    q = rollout(client, claimed[0], with_attempts=True)
    assert q.attempts[0].state == pb.ATTEMPT_CANCELLED
    assert q.rollouts[0].reason == "operator"
    # cancelling again is not an error and changes nothing
    assert client.ok("cancel", pb.CancelReq(rollout_ids=ids)).cancelled == 0


def test_wait_times_out_with_a_clear_answer_and_the_loop_keeps_serving(broker, client):
    ids = enqueue(client, [task(n=3)])
    claim(client, capacity=1)
    cancelled = [r for r in ids if state_of(client, r) == pb.ROLLOUT_QUEUED][0]
    client.ok("cancel", pb.CancelReq(rollout_ids=[cancelled]))
    waiter = Client(broker.ep["rpc"])
    t0 = time.time()
    req = waiter.request("wait", pb.WaitReq(rollout_ids=ids, timeout_ms=400))
    waiter.send(req)
    # the broker answers other requests while the wait is held
    for _ in range(5):
        assert client.ok("stats", pb.StatsReq()).stats.queued == 1
    rep = waiter.recv(timeout=3)
    elapsed = time.time() - t0
    assert rep.request_id == req.request_id
    assert rep.code == pb.CODE_TIMEOUT
    assert "timed out after 400 ms: 2 of 3 rollouts still open" in rep.error
    assert sorted(rep.wait.pending_ids) == sorted(set(ids) - {cancelled})
    assert [r.rollout_id for r in rep.wait.rollouts] == [cancelled]
    assert 0.35 < elapsed < 10.0
    # a wait without a deadline is refused
    bad = client.call("wait", pb.WaitReq(rollout_ids=ids))
    assert bad.code == pb.CODE_INVALID and "timeout_ms is required" in bad.error
    waiter.close()


def test_wait_is_answered_when_the_last_rollout_ends(broker, client):
    ids = enqueue(client, [task(n=2)])
    waiter = Client(broker.ep["rpc"])
    req = waiter.request("wait", pb.WaitReq(rollout_ids=ids, timeout_ms=10000))
    waiter.send(req)
    time.sleep(0.1)
    client.ok("cancel", pb.CancelReq(rollout_ids=[ids[0]]))
    with pytest.raises(TimeoutError):
        waiter.recv(timeout=0.2)
    client.ok("cancel", pb.CancelReq(rollout_ids=[ids[1]]))
    rep = waiter.recv(timeout=2)
    assert rep.code == pb.CODE_OK and len(rep.wait.rollouts) == 2
    waiter.close()


def test_invalid_transitions_and_unknown_ids_get_clear_errors(broker, client):
    rid = enqueue(client, [task()])[0]
    rep = complete(client, rid, 1)  # no attempt yet
    assert rep.code == pb.CODE_NOT_FOUND and "has no attempt 1" in rep.error
    rep = client.call("attempt_start", pb.AttemptStartReq(rollout_id="r-nope", attempt=1))
    assert rep.code == pb.CODE_NOT_FOUND and "unknown rollout 'r-nope'" in rep.error
    claim(client)
    client.ok("attempt_fail", pb.AttemptFailReq(rollout_id=rid, attempt=1,
                                                kind=pb.FAILURE_INFRA, reason="x"))
    time.sleep(0.05)
    claim(client)
    rep = client.call("attempt_start", pb.AttemptStartReq(rollout_id=rid, attempt=1))
    assert rep.code == pb.CODE_CONFLICT and "attempt 1" in rep.error and "over" in rep.error
    assert complete(client, rid, 2).code == pb.CODE_OK
    assert complete(client, rid, 2).code == pb.CODE_OK  # repeated: accepted once
    rep = client.call("attempt_start", pb.AttemptStartReq(rollout_id=rid, attempt=2))
    assert rep.code == pb.CODE_CONFLICT and "scoring" in rep.error
    rep = client.call("attempt_fail", pb.AttemptFailReq(rollout_id=rid, attempt=2,
                                                        kind=pb.FAILURE_NONE))
    assert rep.code == pb.CODE_INVALID
    rep = client.call("claim", pb.ClaimReq(controller_id="c", capacity=0))
    assert rep.code == pb.CODE_INVALID
    rep = client.call("get_task", pb.GetTaskReq(rollout_id=rid, attempt=2))
    assert rep.code == pb.CODE_CONFLICT
    st = client.ok("stats", pb.StatsReq()).stats
    assert st.rpc_errors >= 7


def test_enqueue_is_atomic_and_idempotent_with_a_key(broker, client):
    a = enqueue(client, [task(n=2), task("b")], idempotency_key="step-7")
    b = enqueue(client, [task(n=2), task("b")], idempotency_key="step-7")
    assert a == b and len(a) == 3
    bad = client.call("enqueue", pb.EnqueueReq(run_id="r", tasks=[
        task("ok"), task("bad", extra_info_json="[1,2]")]))
    assert bad.code == pb.CODE_INVALID and "task 1" in bad.error
    st = client.ok("stats", pb.StatsReq()).stats
    assert st.queued == 3  # nothing of the refused batch was stored


def test_policy_version_and_engines(make_broker):
    b = make_broker()
    c = Client(b.ep["rpc"])
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(b.ep["events"])
    time.sleep(0.2)
    assert c.ok("policy", pb.PolicyReq()).version == 0
    assert c.ok("policy", pb.PolicyReq(set=True, version=1)).version == 1
    rep = c.call("policy", pb.PolicyReq(set=True, version=1))
    assert rep.code == pb.CODE_CONFLICT
    c.ok("engine_register", pb.EngineRegisterReq(
        engine=pb.Engine(engine_id="rank0", url="http://127.0.0.1:7200",
                         policy_version=1, up=True), ttl_ms=1000))
    engines = c.ok("engine_list", pb.EngineListReq()).engines
    assert [e.engine_id for e in engines] == ["rank0"]
    time.sleep(1.3)
    assert list(c.ok("engine_list", pb.EngineListReq()).engines) == []
    evs = events_of(sub)
    kinds = [(t, e.WhichOneof("body")) for t, e in evs]
    assert kinds == [("policy", "policy"), ("engine", "engine"), ("engine", "engine")]
    assert evs[1][1].engine.engine.up and not evs[2][1].engine.engine.up
    assert [e.seq for _, e in evs] == [evs[0][1].seq + i for i in range(3)]
    b.kill()
    b.start()
    c2 = Client(b.ep["rpc"])
    assert c2.ok("policy", pb.PolicyReq()).version == 1  # durable
    assert c2.ok("stats", pb.StatsReq()).stats.event_seq == evs[-1][1].seq
    c.close()
    c2.close()
    sub.close(0)


def test_export_then_prune(broker, client):
    w = RewardWorker(broker.ep["workers"])
    w.start()
    ids = enqueue(client, [task(n=2)], run="exp")
    open_id = enqueue(client, [task("open")], run="exp")[0]
    got = claim(client, capacity=2)
    for a in got:
        rid = a.rollout.rollout_id
        client.ok("span_put", pb.SpanPutReq(spans=[pb.Span(
            rollout_id=rid, attempt=1, seq=0, prev_seq=-1, appended_ids=[1, 2, 3],
            response_ids=[4, 5], response_logprobs=[-0.1, -0.2])]))
        complete(client, rid, 1)
    client.ok("wait", pb.WaitReq(rollout_ids=ids, timeout_ms=5000))
    ex = client.ok("export", pb.ExportReq(run_id="exp", limit=10))
    assert sorted(r.rollout_id for r in ex.rollouts) == sorted(ids)
    assert open_id not in [r.rollout_id for r in ex.rollouts]
    assert len(ex.spans) == 2 and list(ex.spans[0].response_ids) == [4, 5]
    assert len(ex.attempts) == 2
    page = client.ok("export", pb.ExportReq(run_id="exp", limit=1))
    assert len(page.rollouts) == 1 and page.next_after
    pr = client.ok("export", pb.ExportReq(run_id="exp", limit=10, prune=True))
    assert len(pr.rollouts) == 2
    for r in ids:
        assert client.call("query", pb.QueryReq(rollout_ids=[r])).code == pb.CODE_NOT_FOUND
    st = client.ok("stats", pb.StatsReq(run_id="exp")).stats
    assert st.succeeded == 0 and st.queued == 1 and st.spans == 0
    w.stop()


def test_prune_deletes_span_log_segments_nothing_names(make_broker):
    """Span bytes live in segment files; once an export prunes every
    rollout whose spans a sealed segment holds (and that is durable), the
    segment file goes. Spans of rollouts kept stay readable."""
    b = make_broker(span_segment="4KiB")
    c = Client(b.ep["rpc"])
    w = RewardWorker(b.ep["workers"])
    w.start()
    done = enqueue(c, [task("p%d" % i) for i in range(3)], run="seg")
    keep = enqueue(c, [task("keep")], run="keep")[0]
    claim(c, capacity=10)

    def spans(rid, first, n):
        return [pb.Span(rollout_id=rid, attempt=1, seq=s, prev_seq=s - 1,
                        appended_ids=list(range(s, s + 200)),
                        response_ids=list(range(300)),
                        response_logprobs=[-0.5] * 300) for s in range(first, first + n)]
    for rid in done:  # ~2.6 KB a span: one or two spans a segment
        c.ok("span_put", pb.SpanPutReq(spans=spans(rid, 0, 4)))
    c.ok("span_put", pb.SpanPutReq(spans=spans(keep, 0, 2)))
    for rid in done:
        complete(c, rid, 1)
    c.ok("wait", pb.WaitReq(rollout_ids=done, timeout_ms=5000))
    seg_dir = os.path.join(b.data_dir, "spans")
    before = sorted(os.listdir(seg_dir))
    assert len(before) >= 6, before
    assert len(c.ok("export", pb.ExportReq(run_id="seg", limit=10, prune=True)).rollouts) == 3
    # the next durable batch lets the broker delete what nothing names
    end = time.time() + 5
    while time.time() < end:
        c.ok("heartbeat", pb.HeartbeatReq(rollout_id=keep, attempt=1))
        after = sorted(os.listdir(seg_dir))
        if len(after) <= 3:
            break
        time.sleep(0.05)
    assert len(after) <= 3, (before, after)
    q = c.ok("query", pb.QueryReq(rollout_ids=[keep], with_spans=True))
    assert [s for s in q.spans] == spans(keep, 0, 2)
    # and after a restart as well
    b.stop()
    b.start()
    c2 = Client(b.ep["rpc"])
    q = c2.ok("query", pb.QueryReq(rollout_ids=[keep], with_spans=True))
    assert [s for s in q.spans] == spans(keep, 0, 2)
    c2.close()
    c.close()
    w.stop()


def test_restart_recovers_scoring_and_leases(make_broker):
    b = make_broker(lease_ms=2000)
    c = Client(b.ep["rpc"])
    r_score, r_run = enqueue(c, [task(n=2)])
    claim(c, capacity=2)
    complete(c, r_score, 1)
    c.ok("attempt_start", pb.AttemptStartReq(rollout_id=r_run, attempt=1))
    b.kill()
    time.sleep(2.1)  # longer than the lease: downtime must not fail it
    b.start()
    c = Client(b.ep["rpc"])
    assert state_of(c, r_run) == pb.ROLLOUT_RUNNING
    assert not c.ok("heartbeat", pb.HeartbeatReq(rollout_id=r_run, attempt=1)).cancel
    w = RewardWorker(b.ep["workers"])
    w.start()
    wr = c.ok("wait", pb.WaitReq(rollout_ids=[r_score], timeout_ms=5000))
    assert wr.rollouts[0].state == pb.ROLLOUT_SUCCEEDED
    w.stop()
    c.close()


def test_rows_within_running_and_scoring(broker, client):
    """running + start / get_task / fail_retry, and scoring + heartbeat."""
    rid = enqueue(client, [task(max_attempts=3)])[0]
    claim(client)
    client.ok("attempt_start", pb.AttemptStartReq(rollout_id=rid, attempt=1,
                                                  sandbox_id="sbx-a"))
    # a repeated start (controller retry) keeps it running, records the id
    client.ok("attempt_start", pb.AttemptStartReq(rollout_id=rid, attempt=1,
                                                  sandbox_id="sbx-b"))
    tv = client.ok("get_task", pb.GetTaskReq(rollout_id=rid, attempt=1)).task
    assert tv.attempt == 1 and tv.deadline_ms > 0
    q = rollout(client, rid, with_attempts=True, with_transitions=True)
    assert q.rollouts[0].state == pb.ROLLOUT_RUNNING
    assert q.attempts[0].sandbox_id == "sbx-b"
    # neither the repeat nor the fetch is a state change: not recorded
    assert [t.event for t in q.transitions] == ["enqueue", "claim", "start"]
    rep = client.ok("attempt_fail", pb.AttemptFailReq(
        rollout_id=rid, attempt=1, kind=pb.FAILURE_INFRA, reason="node drained"))
    assert rep.retried
    q = rollout(client, rid, with_transitions=True)
    last = q.transitions[-1]
    assert (last.event, last.from_state, last.to_state) == (
        "fail_retry", pb.ROLLOUT_RUNNING, pb.ROLLOUT_QUEUED)
    assert "node drained" in q.rollouts[0].reason
    time.sleep(0.15)
    assert claim(client)[0].attempt == 2
    assert complete(client, rid, 2).code == pb.CODE_OK
    hb = client.ok("heartbeat", pb.HeartbeatReq(rollout_id=rid, attempt=2))
    assert not hb.cancel
    assert state_of(client, rid) == pb.ROLLOUT_SCORING


def test_reasons_are_bounded(broker, client):
    """A reason is stored text: at most 4096 bytes from any caller."""
    rid = client.ok("enqueue", pb.EnqueueReq(run_id="r", tasks=[task("q")])).rollout_ids[0]
    claim(client)
    rep = client.call("cancel", pb.CancelReq(rollout_ids=[rid], reason="x" * 4097))
    assert rep.code == pb.CODE_TOO_LARGE, rep
    rep = client.call("attempt_fail", pb.AttemptFailReq(
        rollout_id=rid, attempt=1, kind=pb.FAILURE_AGENT, reason="y" * 4097))
    assert rep.code == pb.CODE_TOO_LARGE, rep
    client.ok("cancel", pb.CancelReq(rollout_ids=[rid], reason="z" * 4096))
    assert rollout(client, rid).rollouts[0].reason.endswith("z" * 4096)
