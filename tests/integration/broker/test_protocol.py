"""Malformed frames, unknown message types, oversized payloads and the
span ingest path (duplicates, out of order, refused spans), against a real
broker: every bad input gets a clear error or is counted, and the broker
keeps serving."""
import time

import zmq

from brokerlib import Client, RewardWorker, claim, enqueue, pb, task, wait_state


def stats(c):
    return c.ok("stats", pb.StatsReq()).stats


def raw(c, frames, timeout=3.0):
    c.sock.send_multipart(frames)
    if not c.sock.poll(int(timeout * 1000)):
        raise TimeoutError
    fr = c.sock.recv_multipart()
    rep = pb.Reply()
    rep.ParseFromString(fr[-1])
    return fr, rep


def test_malformed_rpc_frames_get_error_replies(make_broker):
    b = make_broker(max_rpc_frame=65536)
    c = Client(b.ep["rpc"])
    _, rep = raw(c, [b"", b"\xff\xff\xff\xff garbage"])
    assert rep.code == pb.CODE_INVALID and "not a valid protobuf" in rep.error
    # a valid frame of another envelope type (SpanPush) has no Request body
    push = pb.SpanPush(version=1, span=pb.Span(rollout_id="r", attempt=1))
    _, rep = raw(c, [b"", push.SerializeToString()])
    assert rep.code == pb.CODE_UNSUPPORTED and "no body" in rep.error
    # another protocol version
    req = pb.Request(version=2, request_id=9, stats=pb.StatsReq())
    _, rep = raw(c, [b"", req.SerializeToString()])
    assert rep.code == pb.CODE_UNSUPPORTED and "version" in rep.error
    # a request with no body at all
    _, rep = raw(c, [b"", pb.Request(version=1, request_id=3).SerializeToString()])
    assert rep.code == pb.CODE_UNSUPPORTED
    # oversized: over the configured frame bound, refused with TOO_LARGE
    big = pb.Request(version=1, request_id=4, enqueue=pb.EnqueueReq(
        run_id="r", tasks=[task(text="x" * 70000)]))
    _, rep = raw(c, [b"", big.SerializeToString()])
    assert rep.code == pb.CODE_TOO_LARGE and "size limit" in rep.error
    # wrong frame shape: two payload frames after the delimiter
    fr, rep = raw(c, [b"", b"a", b"b"])
    assert rep.code == pb.CODE_INVALID and "expected frames" in rep.error
    # no delimiter (plain DEALER framing) is accepted, reply shaped the same way
    req = pb.Request(version=1, request_id=77, stats=pb.StatsReq())
    fr, rep = raw(c, [req.SerializeToString()])
    assert len(fr) == 1 and rep.code == pb.CODE_OK and rep.request_id == 77
    st = stats(c)
    assert st.bad_frames >= 6
    assert st.rpc_errors >= 6
    # bad arguments in well-formed requests
    for body, msg, code in [
        ("enqueue", pb.EnqueueReq(run_id="r"), pb.CODE_INVALID),
        ("enqueue", pb.EnqueueReq(run_id="bad id with spaces", tasks=[task()]), pb.CODE_INVALID),
        ("enqueue", pb.EnqueueReq(tasks=[task(n=5000)]), pb.CODE_TOO_LARGE),
        ("claim", pb.ClaimReq(capacity=1), pb.CODE_INVALID),
        ("query", pb.QueryReq(limit=5000), pb.CODE_INVALID),
        ("query", pb.QueryReq(rollout_ids=["nope"]), pb.CODE_NOT_FOUND),
        ("query", pb.QueryReq(with_spans=True), pb.CODE_INVALID),
        ("wait", pb.WaitReq(rollout_ids=["nope"], timeout_ms=10), pb.CODE_NOT_FOUND),
        ("wait", pb.WaitReq(rollout_ids=["nope"], timeout_ms=10**12), pb.CODE_INVALID),
        ("cancel", pb.CancelReq(), pb.CODE_INVALID),
        ("span_status", pb.SpanStatusReq(rollout_id="nope", attempt=1), pb.CODE_NOT_FOUND),
        ("engine_register", pb.EngineRegisterReq(engine=pb.Engine(engine_id="e", url="ftp://x")), pb.CODE_INVALID),
        ("heartbeat", pb.HeartbeatReq(rollout_id="", attempt=1), pb.CODE_INVALID),
        ("enqueue", pb.EnqueueReq(tasks=[pb.TaskSpec(files=[pb.File(path="../etc/passwd")])]), pb.CODE_INVALID),
    ]:
        rep = c.call(body, msg)
        assert rep.code == code, (body, msg, rep.code, rep.error)
        assert rep.error, (body, "an error needs a text")
    assert b.proc.poll() is None
    c.close()


def test_span_ingest_is_idempotent_and_tolerates_order(broker, client):
    rid = enqueue(client, [task()])[0]
    claim(client)
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 1000)
    push.connect(broker.ep["spans"])

    def span(seq, prev):
        return pb.Span(rollout_id=rid, attempt=1, seq=seq, prev_seq=prev,
                       appended_ids=[seq, seq + 1], response_ids=[7, 8, 9],
                       response_logprobs=[-0.5, -0.25, -0.125],
                       policy_version=0, finish_reason="tool_calls")

    for seq, prev in [(0, -1), (2, 1), (3, 2)]:
        push.send(pb.SpanPush(version=1, span=span(seq, prev)).SerializeToString())
    push.send(pb.SpanPush(version=1, span=span(2, 1)).SerializeToString())  # duplicate
    push.send(b"\x00\x01 not a span")
    bad = span(4, 3)
    del bad.response_logprobs[:]
    push.send(pb.SpanPush(version=1, span=bad).SerializeToString())
    push.send(pb.SpanPush(version=1, span=pb.Span(rollout_id="r-unknown", attempt=1))
              .SerializeToString())
    end = time.time() + 3
    while time.time() < end:
        st = client.ok("span_status", pb.SpanStatusReq(rollout_id=rid, attempt=1))
        if st.count == 3:
            break
        time.sleep(0.02)
    assert st.count == 3 and st.contiguous_seq == 0  # seq 1 is missing
    # the gap is filled over RPC; a repeat there is counted as a duplicate
    rep = client.ok("span_put", pb.SpanPutReq(spans=[span(1, 0), span(3, 2)]))
    assert rep.stored == 1 and rep.duplicates == 1
    st = client.ok("span_status", pb.SpanStatusReq(rollout_id=rid, attempt=1))
    assert st.count == 4 and st.contiguous_seq == 3
    q = client.ok("query", pb.QueryReq(rollout_ids=[rid], with_spans=True,
                                       with_attempts=True))
    assert [s.seq for s in q.spans] == [0, 1, 2, 3]
    assert list(q.spans[2].appended_ids) == [2, 3]
    assert q.attempts[0].span_count == 4
    s = stats(client)
    assert s.span_duplicates == 2 and s.spans_dropped == 3 and s.spans == 4
    # RPC puts are validated as a whole batch
    rep = client.call("span_put", pb.SpanPutReq(spans=[span(9, 8), bad]))
    assert rep.code == pb.CODE_INVALID and "logprobs" in rep.error
    assert client.ok("span_status", pb.SpanStatusReq(rollout_id=rid, attempt=1)).count == 4
    push.close()


def test_spans_for_an_ended_attempt_are_refused(broker, client):
    """A span for an attempt that failed, was cancelled, was retried or
    succeeded is refused (RPC: CODE_CONFLICT naming the attempt's state;
    PUSH: dropped), counted in spans_refused, and not stored; while the
    attempt is open (also in SCORING) spans are taken."""
    rids = enqueue(client, [task("a"), task("b"), task("c"), task("d")])
    assert len(claim(client)) == 4
    push = zmq.Context.instance().socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 1000)
    push.connect(broker.ep["spans"])

    def span(rid, seq, attempt=1):
        return pb.Span(rollout_id=rid, attempt=attempt, seq=seq,
                       prev_seq=seq - 1, appended_ids=[1, 2],
                       response_ids=[3], response_logprobs=[-0.5])

    def count(rid, attempt=1):
        return client.ok("span_status", pb.SpanStatusReq(
            rollout_id=rid, attempt=attempt)).count

    # span 0 of every attempt while it is open: the broker now knows each
    # attempt as open, and must notice when it ends
    assert client.ok("span_put", pb.SpanPutReq(
        spans=[span(r, 0) for r in rids])).stored == 4
    a, b, c, d = rids
    client.ok("attempt_fail", pb.AttemptFailReq(
        rollout_id=a, attempt=1, kind=pb.FAILURE_AGENT, reason="crashed"))
    client.ok("cancel", pb.CancelReq(rollout_ids=[b], reason="stop"))
    assert client.ok("attempt_fail", pb.AttemptFailReq(
        rollout_id=c, attempt=1, kind=pb.FAILURE_INFRA, reason="flaky")).retried
    client.ok("attempt_complete", pb.AttemptCompleteReq(
        rollout_id=d, attempt=1, result=pb.AttemptResult(answer="42")))
    # SCORING: the attempt is still open (no reward worker yet)
    assert client.ok("span_put", pb.SpanPutReq(spans=[span(d, 1)])).stored == 1
    before = stats(client)
    for rid, state in [(a, "failed"), (b, "cancelled"), (c, "failed")]:
        rep = client.call("span_put", pb.SpanPutReq(spans=[span(rid, 1)]))
        assert rep.code == pb.CODE_CONFLICT, (rep.code, rep.error)
        assert "refused" in rep.error and state in rep.error, rep.error
        assert "%s/1/1" % rid in rep.error
        assert count(rid) == 1
    # the whole put is refused when one span is for an ended attempt
    rep = client.call("span_put", pb.SpanPutReq(spans=[span(d, 2), span(a, 2)]))
    assert rep.code == pb.CODE_CONFLICT
    assert count(d) == 2
    # the retried rollout's new attempt takes spans
    assert wait_state(client, c, pb.ROLLOUT_QUEUED) == pb.ROLLOUT_QUEUED
    end = time.time() + 3
    got = []
    while not got and time.time() < end:  # after its backoff
        got = claim(client)
        time.sleep(0.02)
    assert [x.attempt for x in got] == [2]
    assert client.ok("span_put", pb.SpanPutReq(spans=[span(c, 0, 2)])).stored == 1
    # pushed spans for ended attempts are dropped and counted
    for rid in (a, b, c):
        push.send(pb.SpanPush(version=1, span=span(rid, 5)).SerializeToString())
    end = time.time() + 3
    while time.time() < end and stats(client).spans_refused < before.spans_refused + 7:
        time.sleep(0.02)
    s = stats(client)
    assert s.spans_refused == before.spans_refused + 7
    assert s.spans_dropped == before.spans_dropped + 3
    assert [count(r) for r in (a, b, c)] == [1, 1, 1]
    # once scored, the succeeded attempt refuses spans too
    w = RewardWorker(broker.ep["workers"])
    w.start()
    try:
        assert wait_state(client, d, pb.ROLLOUT_SUCCEEDED) == pb.ROLLOUT_SUCCEEDED
    finally:
        w.stop()
    rep = client.call("span_put", pb.SpanPutReq(spans=[span(d, 3)]))
    assert rep.code == pb.CODE_CONFLICT and "succeeded" in rep.error, rep.error
    assert count(d) == 2
    assert stats(client).spans_refused == before.spans_refused + 8
    push.close()


def test_reward_worker_protocol_errors(broker, client):
    ctx = zmq.Context.instance()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(broker.ep["workers"])
    # a heartbeat from a worker that never said READY is told to disconnect
    s.send(pb.WorkerMsg(version=1, heartbeat=pb.WorkerHeartbeat()).SerializeToString())
    assert s.poll(2000)
    m = pb.WorkerMsg()
    m.ParseFromString(s.recv_multipart()[-1])
    assert m.WhichOneof("body") == "disconnect"
    s.send(b"garbage")
    s.send(pb.WorkerMsg(version=1, ready=pb.WorkerReady(worker_id="x", capacity=1))
           .SerializeToString())
    # a reply for a job it never got is counted as stale
    s.send(pb.WorkerMsg(version=1, reply=pb.ScoreReply(job_id=12345)).SerializeToString())
    time.sleep(0.2)
    st = stats(client)
    assert st.workers == 1 and st.stale_scores == 1 and st.bad_frames >= 1
    # it heartbeats us while idle
    assert s.poll(1000)
    m.ParseFromString(s.recv_multipart()[-1])
    assert m.WhichOneof("body") == "heartbeat"
    s.send(pb.WorkerMsg(version=1, disconnect=pb.WorkerDisconnect(reason="bye"))
           .SerializeToString())
    time.sleep(0.1)
    assert stats(client).workers == 0
    s.close(0)


def test_query_final_attempt_returns_only_current_attempts(broker, client):
    """One QueryReq for a batch: with final_attempt each rollout's current
    attempt and its spans only (a retried rollout's first attempt is left
    out; a rollout never claimed has neither); without it, all of them."""
    a, b = enqueue(client, [task("a"), task("b")])
    c, = enqueue(client, [task("c")], run="never-claimed")
    rids = [a, b, c]
    assert len(claim(client, capacity=10, run="run-1")) == 2

    def span(rid, attempt, seq, tok):
        return pb.Span(rollout_id=rid, attempt=attempt, seq=seq,
                       prev_seq=seq - 1, appended_ids=[tok], response_ids=[tok + 1],
                       response_logprobs=[-0.5])

    client.ok("span_put", pb.SpanPutReq(spans=[span(a, 1, 0, 10), span(a, 1, 1, 12),
                                               span(b, 1, 0, 20)]))
    assert client.ok("attempt_fail", pb.AttemptFailReq(
        rollout_id=a, attempt=1, kind=pb.FAILURE_INFRA, reason="flaky")).retried
    end = time.time() + 3
    got = []
    while time.time() < end and not any(x.rollout.rollout_id == a for x in got):
        got = claim(client, capacity=10, run="run-1")
        time.sleep(0.02)
    assert [(x.rollout.rollout_id, x.attempt) for x in got] == [(a, 2)]
    client.ok("span_put", pb.SpanPutReq(spans=[span(a, 2, 0, 30)]))
    q = client.ok("query", pb.QueryReq(rollout_ids=rids, with_spans=True,
                                       with_attempts=True, final_attempt=True))
    assert [r.rollout_id for r in q.rollouts] == rids
    assert sorted((x.rollout_id, x.attempt) for x in q.attempts) == sorted([(a, 2), (b, 1)])
    assert sorted((s.rollout_id, s.attempt, s.seq) for s in q.spans) == \
        sorted([(a, 2, 0), (b, 1, 0)])
    assert [list(s.appended_ids) for s in q.spans if s.rollout_id == a] == [[30]]
    everything = client.ok("query", pb.QueryReq(rollout_ids=rids, with_spans=True,
                                                with_attempts=True))
    assert sorted((x.rollout_id, x.attempt) for x in everything.attempts) == \
        sorted([(a, 1), (a, 2), (b, 1)])
    assert len(everything.spans) == 4
