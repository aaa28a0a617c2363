"""lisa-gateway's operational side: the sandbox's task/heartbeat/result
calls proxied to a real broker (results only after spans are durable),
pause/drain for weight updates, engine failover and discovery, restart
without reusing a span sequence number, metrics and health."""
import base64
import os
import json
import time

import openai
import pytest

from brokerlib import Client, claim, enqueue, task  # noqa: I100 (sets the path)
import lisa_pb2 as pb  # noqa: E402
from gwlib import http, mint  # noqa: E402


def attempt_of(client, **kw):
    rid = enqueue(client, [task("what is 6*7?", files=[pb.File(path="a.txt", content=b"\x00\x01data")], **kw)])[0]
    att = claim(client)[0]
    return rid, att.attempt


def chat(gw, tok, content="hi", **kw):
    c = openai.OpenAI(base_url=gw.url + "/v1", api_key=tok, max_retries=0, **kw)
    return c.chat.completions.create(model="lisa", messages=[{"role": "user", "content": content}])


@pytest.fixture
def stack(make_engine, make_gateway, make_broker, key):
    eng = make_engine(lambda p, b: ("The answer is 42.", "stop"))
    brk = make_broker()
    gw = make_gateway(engines=eng.url, broker=brk.ep["rpc"])
    c = Client(brk.ep["rpc"])
    yield eng, gw, brk, c
    c.close()


def test_task_heartbeat_result(stack, key):
    eng, gw, brk, c = stack
    rid, att = attempt_of(c)
    h = {"Authorization": "Bearer " + mint(key, rid, att)}
    st, _, body = http(gw.url + "/lisa/v1/task", "GET", None, h)
    assert st == 200, body
    t = json.loads(body)
    assert t["rollout_id"] == rid and t["attempt"] == att
    assert t["problem_statement"] == "what is 6*7?"
    f = t["files"][0]
    assert f["encoding"] == "base64" and base64.b64decode(f["content"]) == b"\x00\x01data"
    assert t["limits"]["time_left_ms"] > 0
    assert "42" not in json.dumps(t["extra_info"]) and "ground_truth" not in body.decode()
    st, _, body = http(gw.url + "/lisa/v1/heartbeat", "POST", {"note": "turn 1"}, h)
    assert st == 200 and json.loads(body)["lease_expiry_ms"] > time.time() * 1000
    for k in range(3):
        chat(gw, mint(key, rid, att), "q%d" % k)
    st, _, body = http(gw.url + "/lisa/v1/result", "POST",
                       {"answer": "42", "turns": 3, "end_reason": "submit"}, h)
    assert st == 200 and json.loads(body)["accepted"] is True, body
    # the agent retries results on transient errors: a repeat is accepted
    st, _, body = http(gw.url + "/lisa/v1/result", "POST",
                       {"answer": "42", "turns": 3, "end_reason": "submit"}, h)
    assert st == 200 and json.loads(body)["accepted"] is True
    rep = c.ok("query", pb.QueryReq(rollout_ids=[rid], with_attempts=True, with_spans=True))
    assert len(rep.spans) == 3  # every span was durable before the result
    a = rep.attempts[0]
    assert a.result.answer == "42" and a.result.turns == 3
    assert rep.rollouts[0].state in (pb.ROLLOUT_SCORING, pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED)
    # a token for an attempt the broker does not know gets the broker's 404
    st, _, body = http(gw.url + "/lisa/v1/task", "GET", None,
                       {"Authorization": "Bearer " + mint(key, "r-unknown", 1)})
    assert st == 404, body


def test_restart_never_reuses_a_seq(stack, make_gateway, key):
    eng, gw, brk, c = stack
    rid, att = attempt_of(c)
    tok = mint(key, rid, att)
    oc = openai.OpenAI(base_url=gw.url + "/v1", api_key=tok, max_retries=0)
    msgs = [{"role": "user", "content": "one"}]
    r = oc.chat.completions.create(model="lisa", messages=msgs)
    msgs += [r.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "two"}]
    oc.chat.completions.create(model="lisa", messages=msgs)
    time.sleep(0.3)
    gw.stop()
    gw2 = make_gateway(engines=eng.url, broker=brk.ep["rpc"])
    msgs += [{"role": "assistant", "content": "The answer is 42."}, {"role": "user", "content": "three"}]
    openai.OpenAI(base_url=gw2.url + "/v1", api_key=tok, max_retries=0).chat.completions.create(
        model="lisa", messages=msgs)
    end = time.time() + 5
    while time.time() < end:
        spans = c.ok("query", pb.QueryReq(rollout_ids=[rid], with_spans=True)).spans
        if len(spans) == 3:
            break
        time.sleep(0.05)
    got = sorted((s.seq, s.prev_seq, s.segment) for s in spans)
    assert got == [(0, -1, 0), (1, 0, 0), (2, -1, 2)]


def test_pause_and_drain(make_engine, make_gateway, key):
    eng = make_engine(lambda p, b: ("ok", "stop"))
    gw = make_gateway(engines=eng.url, retry_after=3)
    tok = mint(key, "r-1", 1)
    admin = {"Authorization": "Bearer admin-secret"}
    assert http(gw.url + "/admin/pause", "POST", b"", {"Authorization": "Bearer wrong"})[0] == 401
    st, _, body = http(gw.url + "/admin/pause", "POST", b"", admin)
    assert st == 200 and json.loads(body)["paused"] is True
    st, hd, body = http(gw.url + "/v1/chat/completions", "POST",
                        {"messages": [{"role": "user", "content": "x"}]},
                        {"Authorization": "Bearer " + tok})
    assert st == 429 and hd["retry-after"] == "3"
    assert json.loads(body)["error"]["code"] == "engines_paused"
    st, _, body = http(gw.url + "/admin/drain", "GET", None, admin)
    assert json.loads(body) == {"paused": True, "inflight": 0}
    http(gw.url + "/admin/resume", "POST", b"", admin)
    assert chat(gw, tok).choices[0].message.content == "ok"


def test_engine_failover_and_health(make_engine, make_gateway, key):
    import socket
    # bound but never listening: connecting is refused, and no other test's
    # server can take the port while this one holds it
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = "http://127.0.0.1:%d" % s.getsockname()[1]
    eng = make_engine(lambda p, b: ("alive", "stop"))
    gw = make_gateway(engines="dead=%s,live=%s" % (dead, eng.url), fail_limit=1)
    for i in range(4):
        assert chat(gw, mint(key, "r-%d" % i, 1)).choices[0].message.content == "alive"
    s.close()
    m = http(gw.url + "/metrics")[2].decode()
    assert 'lisa_gateway_engine_up{engine="dead"} 0' in m
    assert 'lisa_gateway_engine_up{engine="live"} 1' in m
    st, _, body = http(gw.url + "/healthz")
    h = json.loads(body)
    assert st == 200 and h["engines"] == 2 and h["engines_up"] == 1


def test_an_engine_error_names_the_engines_reason(make_engine, make_gateway, key):
    """An engine refusing a call (a wrong key, say) is a 502 whose message
    carries the engine's own words; a busy engine is a 429 to retry."""
    eng = make_engine(lambda p, b: ("unused", "stop"), status=401)
    gw = make_gateway(engines=eng.url)
    with pytest.raises(openai.InternalServerError) as e:
        chat(gw, mint(key, "r-refused", 1))
    assert e.value.status_code == 502
    assert "answered 401: scripted failure" in str(e.value), str(e.value)
    eng.status = 503
    with pytest.raises(openai.RateLimitError) as e:
        chat(gw, mint(key, "r-busy", 1))
    assert e.value.status_code == 429


def test_engines_from_the_broker(make_engine, make_gateway, make_broker, key):
    eng = make_engine(lambda p, b: ("registered", "stop"))
    brk = make_broker()
    gw = make_gateway(broker=brk.ep["rpc"])
    c = Client(brk.ep["rpc"])
    rid, att = attempt_of(c)
    tok = mint(key, rid, att)
    st, _, body = http(gw.url + "/v1/chat/completions", "POST",
                       {"messages": [{"role": "user", "content": "x"}]},
                       {"Authorization": "Bearer " + tok})
    assert st == 503 and json.loads(body)["error"]["code"] == "no_engine"
    c.ok("engine_register", pb.EngineRegisterReq(
        engine=pb.Engine(engine_id="rank0", url=eng.url, up=True, policy_version=3), ttl_ms=60000))
    end = time.time() + 5
    while time.time() < end:
        st, _, body = http(gw.url + "/v1/chat/completions", "POST",
                           {"messages": [{"role": "user", "content": "x"}]},
                           {"Authorization": "Bearer " + tok})
        if st == 200:
            break
        time.sleep(0.1)
    assert st == 200 and json.loads(body)["choices"][0]["message"]["content"] == "registered"
    c.close()


def test_a_call_finding_no_engine_refreshes_the_list_at_once(
        make_engine, make_gateway, make_broker, key):
    # With a 30 s refresh, an engine that resumes after a weight update (or
    # joins) would be unused for up to 30 s; the failed call itself makes
    # the gateway list the engines again, so the caller's retry gets it.
    eng = make_engine(lambda p, b: ("resumed", "stop"))
    brk = make_broker()
    c = Client(brk.ep["rpc"])
    c.ok("engine_register", pb.EngineRegisterReq(
        engine=pb.Engine(engine_id="rank0", url=eng.url, up=True, paused=True,
                         policy_version=1), ttl_ms=60000))
    gw = make_gateway(broker=brk.ep["rpc"], engine_refresh="30s")
    rid, att = attempt_of(c)
    tok = mint(key, rid, att)
    body = {"messages": [{"role": "user", "content": "x"}]}
    hdr = {"Authorization": "Bearer " + tok}
    end = time.time() + 5
    while time.time() < end:  # the list at start-up: paused
        st, _, out = http(gw.url + "/v1/chat/completions", "POST", body, hdr)
        if st == 429:
            break
        time.sleep(0.05)
    assert st == 429 and json.loads(out)["error"]["code"] == "engines_paused"
    # That 429 sent the gateway's own list request; it must be answered
    # (paused) before the engine resumes, or its answer already shows the
    # engine resumed and the call below is served without asking again.
    time.sleep(1.0)
    c.ok("engine_register", pb.EngineRegisterReq(
        engine=pb.Engine(engine_id="rank0", url=eng.url, up=True, paused=False,
                         policy_version=2), ttl_ms=60000))
    t0 = time.time()
    st, _, out = http(gw.url + "/v1/chat/completions", "POST", body, hdr)
    assert st == 429  # this call still saw it paused, and asked again
    while st != 200 and time.time() - t0 < 5:
        time.sleep(0.25)  # the agent's first retry delay
        st, _, out = http(gw.url + "/v1/chat/completions", "POST", body, hdr)
    assert st == 200, out
    assert json.loads(out)["choices"][0]["message"]["content"] == "resumed"
    assert time.time() - t0 < 2, time.time() - t0
    c.close()


def test_metrics(make_engine, make_gateway, key):
    eng = make_engine(lambda p, b: ("four words right here", "stop"))
    gw = make_gateway(engines=eng.url)
    chat(gw, mint(key, "r-1", 1))
    http(gw.url + "/v1/chat/completions", "POST", b"{", {"Authorization": "Bearer x"})
    m = http(gw.url + "/metrics")[2].decode()
    assert 'lisa_gateway_requests_total{route="chat",code="200"} 1' in m
    assert 'lisa_gateway_requests_total{route="chat",code="401"} 1' in m
    assert 'lisa_gateway_auth_failures_total{reason="malformed"} 1' in m
    assert "lisa_gateway_request_seconds_bucket" in m
    assert "lisa_gateway_tokens_out_total 5" in m  # 4 words + <|im_end|>
    assert "lisa_gateway_active_attempts 1" in m


def test_completions_passthrough(make_engine, make_gateway, key):
    eng = make_engine(lambda p, b: ("raw", "length"))
    gw = make_gateway(engines=eng.url)
    st, _, body = http(gw.url + "/v1/completions", "POST",
                       {"prompt": [1, 2, 3], "max_tokens": 4},
                       {"Authorization": "Bearer " + mint(key, "r-1", 1)})
    assert st == 200 and json.loads(body)["choices"][0]["finish_reason"] == "length"
    assert eng.requests[-1]["prompt"] == [1, 2, 3]


def test_retried_turn_gets_the_same_answer_and_no_second_span(stack, key):
    eng, gw, brk, c = stack
    rid, att = attempt_of(c)
    h = {"Authorization": "Bearer " + mint(key, rid, att), "X-Lisa-Turn": "1"}
    body = {"messages": [{"role": "user", "content": "hi"}]}
    a = http(gw.url + "/v1/chat/completions", "POST", body, h)
    b = http(gw.url + "/v1/chat/completions", "POST", body, h)
    assert a[0] == b[0] == 200 and a[2] == b[2]
    assert len(eng.requests) == 1
    h["X-Lisa-Turn"] = "2"
    body["messages"] += [json.loads(a[2])["choices"][0]["message"],
                         {"role": "user", "content": "more"}]
    assert http(gw.url + "/v1/chat/completions", "POST", body, h)[0] == 200
    time.sleep(0.3)
    spans = c.ok("query", pb.QueryReq(rollout_ids=[rid], with_spans=True)).spans
    assert sorted((s.seq, s.prev_seq) for s in spans) == [(0, -1), (1, 0)]


def test_spans_resent_across_a_broker_restart(make_engine, make_gateway, make_broker, key, tmp_path):
    from brokerlib import Broker
    eng = make_engine(lambda p, b: ("step", "stop"))
    # the first broker takes an ephemeral port; its restart binds the same
    brk = Broker(tmp_path / "brkdata").start()
    rpc = brk.ep["rpc"]
    try:
        c = Client(rpc)
        rid, att = attempt_of(c)
        c.close()
        gw = make_gateway(engines=eng.url, broker=rpc,
                          rpc_timeout="500ms", result_wait="20s")
        tok = mint(key, rid, att)
        oc = openai.OpenAI(base_url=gw.url + "/v1", api_key=tok, max_retries=0)
        msgs = [{"role": "user", "content": "one"}]
        r = oc.chat.completions.create(model="lisa", messages=msgs)
        brk.kill()  # SIGKILL: the broker is gone, the agent keeps working
        for k in range(2):
            msgs += [r.choices[0].message.model_dump(exclude_none=True),
                     {"role": "user", "content": "more %d" % k}]
            r = oc.chat.completions.create(model="lisa", messages=msgs)
        m = http(gw.url + "/metrics")[2].decode()
        assert "lisa_gateway_spans_pending" in m
        brk = Broker(tmp_path / "brkdata", rpc=rpc).start()
        # the result is forwarded only once all three spans are durable
        st, _, body = http(gw.url + "/lisa/v1/result", "POST",
                           {"answer": "x", "turns": 3, "end_reason": "submit"},
                           {"Authorization": "Bearer " + tok}, timeout=30)
        assert st == 200, body
        c = Client(brk.ep["rpc"])
        spans = c.ok("query", pb.QueryReq(rollout_ids=[rid], with_spans=True)).spans
        c.close()
        assert sorted((s.seq, s.prev_seq) for s in spans) == [(0, -1), (1, 0), (2, 1)]
    finally:
        brk.stop()


def test_the_token_the_broker_issues_opens_the_gateway(make_engine, make_gateway, make_broker, key, tmp_path):
    kf = tmp_path / "shared.key"
    kf.write_text(key.hex() + "\n")
    os.chmod(kf, 0o600)
    eng = make_engine(lambda p, b: ("ok", "stop"))
    brk = make_broker(token_key=str(kf))
    gw = make_gateway(engines=eng.url, broker=brk.ep["rpc"])
    c = Client(brk.ep["rpc"])
    rid = enqueue(c, [task("q")])[0]
    att = claim(c)[0]
    c.close()
    h = {"Authorization": "Bearer " + att.token}
    st, _, body = http(gw.url + "/lisa/v1/task", "GET", None, h)
    assert st == 200 and json.loads(body)["rollout_id"] == rid
    assert chat(gw, att.token).choices[0].message.content == "ok"


def test_cached_tokens_reach_the_agent_and_metrics(make_engine, make_gateway, key):
    # the engine reports its prefix-cache hits as vLLM does; the agent gets
    # them in usage.prompt_tokens_details, /metrics counts them
    eng = make_engine(lambda p, b: ("cached", "stop"),
                      cached=lambda prompt: len(prompt) - 3)
    plain = make_engine(lambda p, b: ("plain", "stop"))
    gw = make_gateway(engines=eng.url)
    hdr = {"Authorization": "Bearer " + mint(key, "r-cache", 1)}
    st, _, body = http(gw.url + "/v1/chat/completions", "POST",
                       {"messages": [{"role": "user", "content": "x"}]}, hdr)
    assert st == 200, body
    usage = json.loads(body)["usage"]
    n = len(eng.requests[0]["prompt"])
    assert usage["prompt_tokens"] == n
    assert usage["prompt_tokens_details"] == {"cached_tokens": n - 3}
    # streamed with usage: the same numbers
    st, _, body = http(gw.url + "/v1/chat/completions", "POST",
                       {"messages": [{"role": "user", "content": "y"}], "stream": True,
                        "stream_options": {"include_usage": True}},
                       {"Authorization": "Bearer " + mint(key, "r-cache", 2)})
    chunks = [json.loads(line[6:]) for line in body.decode().split("\n")
              if line.startswith("data: {")]
    su = [ch["usage"] for ch in chunks if ch.get("usage")][-1]
    m2 = len(eng.requests[1]["prompt"])
    assert su["prompt_tokens_details"]["cached_tokens"] == m2 - 3
    st, _, text = http(gw.url + "/metrics")
    text = text.decode()

    def value(name):
        for line in text.split("\n"):
            if line.startswith(name + " "):
                return float(line.split()[1])
        raise AssertionError(name + " missing")
    assert value("lisa_gateway_cached_tokens_total") == n - 3 + m2 - 3
    assert value("lisa_gateway_answered_prompt_tokens_total") == n + m2
    assert abs(value("lisa_gateway_prefix_cache_hit_rate") -
               (n + m2 - 6) / (n + m2)) < 1e-6
    # an engine that does not report it: 0
    gw2 = make_gateway(engines=plain.url)
    st, _, body = http(gw2.url + "/v1/chat/completions", "POST",
                       {"messages": [{"role": "user", "content": "x"}]},
                       {"Authorization": "Bearer " + mint(key, "r-cache", 3)})
    assert json.loads(body)["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def _served_by(engines, before):
    """The engine whose request count grew since `before`."""
    grew = [i for i, e in enumerate(engines) if len(e.requests) > before[i]]
    assert len(grew) == 1, grew
    return grew[0]


def _group_attempts(c, n_groups, n):
    """n_groups prompts of n rollouts each, claimed: [(group, rid, att)]."""
    rids = enqueue(c, [task("q%d" % g, task_id="t-g%d" % g, n=n)
                       for g in range(n_groups)])
    atts = {a.rollout.rollout_id: a.attempt for a in claim(c, capacity=100)}
    rep = c.ok("query", pb.QueryReq(rollout_ids=rids))
    group = {r.rollout_id: r.group_id for r in rep.rollouts}
    return [(group[r], r, atts[r]) for r in rids]


def _fetch_task(gw, key, rid, att):
    st, _, body = http(gw.url + "/lisa/v1/task", "GET", None,
                       {"Authorization": "Bearer " + mint(key, rid, att)})
    assert st == 200, body


def _chat_once(gw, key, rid, att):
    tok = mint(key, rid, att)
    st, _, body = http(gw.url + "/v1/chat/completions", "POST",
                       {"messages": [{"role": "user", "content": "go"}]},
                       {"Authorization": "Bearer " + tok})
    assert st == 200, body


def _fetch_task_and_chat(gw, key, rid, att):
    _fetch_task(gw, key, rid, att)
    _chat_once(gw, key, rid, att)


def test_a_groups_attempts_share_an_engine(make_engine, make_gateway, make_broker, key):
    # the n rollouts of one prompt go to one engine (its prefix cache holds
    # the prompt), learned from the task reply; least loaded would spread
    # them over both engines
    engines = [make_engine(lambda p, b: ("e%d" % i, "stop")) for i in range(2)]
    brk = make_broker()
    gw = make_gateway(engines="e0=%s,e1=%s" % (engines[0].url, engines[1].url),
                      broker=brk.ep["rpc"])
    c = Client(brk.ep["rpc"])
    atts = _group_attempts(c, 2, 4)
    groups = sorted({g for g, _, _ in atts})
    order = ([a for a in atts if a[0] == groups[0]][:2] +
             [a for a in atts if a[0] == groups[1]][:2] +
             [a for a in atts if a[0] == groups[0]][2:] +
             [a for a in atts if a[0] == groups[1]][2:])
    placed = {}
    for g, rid, att in order:
        before = [len(e.requests) for e in engines]
        _fetch_task_and_chat(gw, key, rid, att)
        placed.setdefault(g, set()).add(_served_by(engines, before))
    assert all(len(v) == 1 for v in placed.values()), placed
    c.close()


def test_a_group_leaves_an_engine_at_its_batch(make_engine, make_gateway, make_broker, key):
    # engines advertise max_batch 1: a group's second attempt, started while
    # the first one's call runs, goes to the other engine; the later ones,
    # one at a time, go home again
    import threading
    engines = [make_engine(lambda p, b: ("slow", "stop"), delay=1.5)
               for _ in range(2)]
    brk = make_broker()
    c = Client(brk.ep["rpc"])
    for i, e in enumerate(engines):
        c.ok("engine_register", pb.EngineRegisterReq(
            engine=pb.Engine(engine_id="rank%d" % i, url=e.url, up=True,
                             policy_version=1, max_batch=1), ttl_ms=60000))
    gw = make_gateway(broker=brk.ep["rpc"])
    end = time.time() + 5
    while time.time() < end:
        st, _, body = http(gw.url + "/healthz")
        if json.loads(body)["engines"] == 2:
            break
        time.sleep(0.05)
    atts = _group_attempts(c, 1, 5)
    for _, rid, att in atts:  # the gateway learns the group
        _fetch_task(gw, key, rid, att)
    before = [len(e.requests) for e in engines]
    first = threading.Thread(target=_chat_once,
                             args=(gw, key, atts[0][1], atts[0][2]))
    first.start()
    end = time.time() + 5
    while time.time() < end and not any(e.inflight for e in engines):
        time.sleep(0.01)
    home = [i for i, e in enumerate(engines) if e.inflight][0]
    _chat_once(gw, key, atts[1][1], atts[1][2])
    first.join()
    assert len(engines[home].requests) == before[home] + 1
    assert len(engines[1 - home].requests) == before[1 - home] + 1
    for _, rid, att in atts[2:]:  # one at a time: home every time
        before = [len(e.requests) for e in engines]
        _chat_once(gw, key, rid, att)
        assert _served_by(engines, before) == home
    c.close()
