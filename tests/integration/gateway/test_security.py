"""lisa-gateway refuses bad tokens, cross-rollout access, garbage and huge
bodies, ambiguous HTTP framing and slow clients with clear OpenAI-shaped errors, and keeps serving
everyone else meanwhile."""
import json
import socket
import threading
import time

import openai
import pytest

from gwlib import http, mint


@pytest.fixture
def gw(make_engine, make_gateway):
    eng = make_engine(lambda p, b: ("fine", "stop"))
    return make_gateway(engines=eng.url, max_body="64KiB", request_timeout="1s")


def chat(gw, token, body=None, raw=None, headers=None):
    h = {"Content-Type": "application/json"}
    if token is not None:
        h["Authorization"] = "Bearer " + token
    h.update(headers or {})
    if body is None and raw is None:
        body = {"messages": [{"role": "user", "content": "hi"}]}
    st, hd, data = http(gw.url + "/v1/chat/completions", "POST",
                        raw if raw is not None else json.dumps(body).encode(), h)
    return st, hd, json.loads(data) if data else None


def assert_error(resp, status, type_=None, code=None):
    st, _, body = resp
    assert st == status, (st, body)
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"]
    if type_:
        assert err["type"] == type_
    if code:
        assert err["code"] == code


def test_tokens(gw, key):
    assert_error(chat(gw, None), 401, "authentication_error", "invalid_api_key")
    assert_error(chat(gw, "garbage"), 401, "authentication_error")
    assert_error(chat(gw, mint(b"k" * 32, "r-1", 1)), 401, "authentication_error")
    expired = mint(key, "r-1", 1, expiry_ms=int(time.time() * 1000) - 1000)
    assert_error(chat(gw, expired), 401, "authentication_error", "token_expired")
    good = mint(key, "r-1", 1)
    tampered = good[:-2] + ("A" if good[-2] != "A" else "B") + good[-1]
    assert_error(chat(gw, tampered), 401)
    assert chat(gw, good)[0] == 200
    # the openai client sees an AuthenticationError
    c = openai.OpenAI(base_url=gw.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        c.chat.completions.create(model="lisa", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.AuthenticationError):
        c.models.list()
    assert [m.id for m in openai.OpenAI(base_url=gw.url + "/v1", api_key=good).models.list()] == ["lisa"]


def test_cross_rollout_refused(gw, key):
    tok = mint(key, "r-1", 1)
    h = {"Authorization": "Bearer " + tok}
    for path in ("/lisa/v1/heartbeat", "/lisa/v1/result"):
        st, _, body = http(gw.url + path, "POST", {"rollout_id": "r-2"}, h)
        assert st == 403 and json.loads(body)["error"]["code"] == "wrong_rollout"
        st, _, body = http(gw.url + path, "POST", {"rollout_id": "r-1", "attempt": 2}, h)
        assert st == 403


def test_garbage_bodies(gw, key):
    tok = mint(key, "r-1", 1)
    assert_error(chat(gw, tok, raw=b"{not json"), 400, "invalid_request_error")
    assert_error(chat(gw, tok, raw=b"\xff\xfe\x00garbage"), 400)
    assert_error(chat(gw, tok, raw=b""), 400)
    assert_error(chat(gw, tok, raw=b"[]"), 400)
    st, _, body = chat(gw, tok, {"messages": [{"role": "user", "content": "x"}], "evil": 1})
    assert st == 400 and body["error"]["param"] == "evil"
    st, _, body = chat(gw, tok, {"messages": [{"role": "user", "content": "x"}], "n": 3})
    assert st == 400 and body["error"]["param"] == "n"
    assert_error(chat(gw, tok, {"messages": [{"role": "root", "content": "x"}]}), 400)
    st, _, _ = http(gw.url + "/v1/chat/completions", "GET", None,
                    {"Authorization": "Bearer " + tok})
    assert st == 405
    assert http(gw.url + "/nope")[0] == 404
    assert chat(gw, tok)[0] == 200


def test_huge_body_refused(gw, key):
    tok = mint(key, "r-1", 1)
    big = json.dumps({"messages": [{"role": "user", "content": "x" * 200_000}]}).encode()
    st, _, body = chat(gw, tok, raw=big)
    assert st == 413
    assert "error" in json.loads(body) if isinstance(body, bytes) else body["error"]
    assert chat(gw, tok)[0] == 200


def _raw_answer(gw, data):
    """Sends `data` on a fresh connection; returns (status, the answer's
    bytes, whether the gateway closed the connection after it)."""
    from gwlib import raw_socket
    s = raw_socket(gw.port)
    s.sendall(data)
    got = b""
    closed = False
    s.settimeout(5)
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            got += chunk
    except socket.timeout:
        pass
    s.close()
    status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/1.") else 0
    return status, got, closed


def test_ambiguous_framing_is_400_and_big_chunked_body_413(make_engine, make_gateway,
                                                           key):
    """The gateway binary over raw sockets: a body end that could be read
    two ways is 400 bad_framing and the connection closes; a chunked body
    over gateway.max_body is 413; none of them reaches the engine."""
    eng = make_engine(lambda p, b: ("fine", "stop"))
    gw = make_gateway(engines=eng.url, max_body="64KiB")
    tok = mint(key, "r-1", 1).encode()
    head = (b"POST /v1/completions HTTP/1.1\r\nHost: a\r\n"
            b"Authorization: Bearer " + tok + b"\r\n"
            b"Content-Type: application/json\r\n")
    body = b'{"prompt":[1],"max_tokens":1}'
    n = str(len(body)).encode()
    chunked = hex(len(body))[2:].encode() + b"\r\n" + body + b"\r\n0\r\n\r\n"
    bad = [
        b"Content-Length: " + n + b"\r\nContent-Length: " + n + b"\r\n\r\n" + body,
        b"Content-Length: " + n + b"\r\ncontent-length: 99\r\n\r\n" + body,
        b"Content-Length: " + n + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
        b"Transfer-Encoding: chunked\r\nContent-Length: " + n + b"\r\n\r\n" + chunked,
        b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked,
        b"Transfer-Encoding: gzip, chunked\r\n\r\n" + chunked,
    ]
    for i, case in enumerate(bad):
        st, got, closed = _raw_answer(gw, head + case)
        assert st == 400 and b"bad_framing" in got, (i, got)
        assert closed, (i, got)
    # a signed length: refused by libmicrohttpd's own parser (its page)
    st, got, closed = _raw_answer(
        gw, head + b"Content-Length: +" + n + b"\r\n\r\n" + body)
    assert st == 400 and closed, got
    big = b"".join(b"8000\r\n" + b"z" * 0x8000 + b"\r\n" for _ in range(4))
    st, got, closed = _raw_answer(
        gw, head + b"Transfer-Encoding: chunked\r\n\r\n" + big + b"0\r\n\r\n")
    assert st == 413, got
    assert not eng.requests, eng.requests
    # the same call, framed soundly either way, is served
    for case in (b"Content-Length: " + n + b"\r\nConnection: close\r\n\r\n" + body,
                 b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunked):
        st, got, _ = _raw_answer(gw, head + case)
        assert st == 200, got
    assert len(eng.requests) == 2


def test_slow_loris_cut_while_others_served(gw, key):
    tok = mint(key, "r-1", 1)
    slow = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 100\r\n\r\n{\"mess")
        slow.append(s)
    t0 = time.time()
    # others are served while the slow ones dangle
    for _ in range(5):
        assert chat(gw, tok)[0] == 200
    assert time.time() - t0 < 1.0
    # every slow connection is cut within the request timeout (+ slack)
    for s in slow:
        s.settimeout(5)
        data = b""
        try:
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        assert time.time() - t0 < 5.0
        s.close()
    assert chat(gw, tok)[0] == 200


def test_concurrent_attempts_one_loop(make_engine, make_gateway, key):
    eng = make_engine(lambda p, b: ("slow reply", "stop"), delay=0.3)
    gw = make_gateway(engines=eng.url)
    results = []

    def agent(i):
        c = openai.OpenAI(base_url=gw.url + "/v1", api_key=mint(key, "r-%d" % i, 1),
                          max_retries=0, timeout=30)
        r = c.chat.completions.create(model="lisa", messages=[{"role": "user", "content": "go %d" % i}])
        results.append(r.choices[0].message.content)

    ts = [threading.Thread(target=agent, args=(i,)) for i in range(64)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert results == ["slow reply"] * 64
    # the calls overlapped inside the gateway's one loop
    assert eng.max_inflight >= 8


def test_same_attempt_twice_at_once_is_429(make_engine, make_gateway, key):
    eng = make_engine(lambda p, b: ("slow", "stop"), delay=0.5)
    gw = make_gateway(engines=eng.url)
    tok = mint(key, "r-1", 1)
    out = []
    ts = [threading.Thread(target=lambda: out.append(chat(gw, tok)[0])) for _ in range(2)]
    for t in ts:
        t.start()
        time.sleep(0.1)
    for t in ts:
        t.join()
    assert sorted(out) == [200, 429]


def test_a_thousand_open_calls(make_engine, make_gateway, key):
    """1000 agents each wait on a slow engine at the same time; the gateway
    holds them all on its one loop (no thread per call) and answers all."""
    import asyncio
    eng = make_engine(lambda p, b: ("done", "stop"), delay=2.0)
    gw = make_gateway(engines=eng.url)
    n = 1000

    async def one(i):
        r, w = await asyncio.open_connection("127.0.0.1", gw.port)
        body = json.dumps({"messages": [{"role": "user", "content": "x%d" % i}]}).encode()
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Authorization: Bearer " + mint(key, "r-%d" % i, 1).encode() +
                b"\r\nContent-Type: application/json\r\nContent-Length: " +
                str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
        await w.drain()
        data = await asyncio.wait_for(r.read(), 120)
        w.close()
        return data.split(b" ", 2)[1]

    async def main():
        return await asyncio.gather(*(one(i) for i in range(n)))

    codes = asyncio.run(main())
    assert codes.count(b"200") == n, set(codes)
    assert eng.max_inflight >= 200
    # the gateway process stayed small in threads
    with open("/proc/%d/status" % gw.proc.pid) as f:
        threads = int([l for l in f if l.startswith("Threads:")][0].split()[1])
    assert threads < 16


def test_stop_with_calls_in_flight(make_engine, make_gateway, key):
    """SIGTERM while calls wait on the engine: each gets 503 or a closed
    connection, the gateway exits 0 and (under ASan) leaks nothing."""
    eng = make_engine(lambda p, b: ("late", "stop"), delay=3.0)
    gw = make_gateway(engines=eng.url)
    out = []

    def one(i):
        try:
            out.append(chat(gw, mint(key, "r-%d" % i, 1))[0])
        except Exception:  # the connection closed during shutdown
            out.append("closed")

    ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    time.sleep(1.0)
    assert gw.stop() == 0
    for t in ts:
        t.join()
    assert len(out) == 4 and set(out) <= {503, "closed"}, out
    log = gw.log_text()
    assert "LeakSanitizer" not in log and "AddressSanitizer" not in log, log


def test_stop_with_broker_calls_in_flight(make_gateway, key):
    """SIGTERM while agent and chat calls wait on a broker that answers
    only the attempt's check (a ROUTER that then reads and keeps silent):
    each call's broker
    request ends with the gateway, answering 503 or closing, and the
    gateway exits 0. The broker calls used to be ended after the agent API
    and chat modules were freed, and their callbacks ran in freed memory."""
    from brokerlib import pb  # the generated messages (brokerlib sets the path)
    import zmq
    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    gw = make_gateway(broker="tcp://127.0.0.1:%d" % port, rpc_timeout="60s")
    out = []

    def one(path, method, body):
        h = {"Authorization": "Bearer " + mint(key, "r-silent", 1)}
        try:
            out.append(http(gw.url + path, method, body, h, timeout=20)[0])
        except Exception:  # the connection closed during shutdown
            out.append("closed")

    calls = [("/lisa/v1/task", "GET", None), ("/lisa/v1/heartbeat", "POST", {}),
             ("/lisa/v1/result", "POST", {"answer": "1", "turns": 1, "end_reason": "submit"}),
             ("/v1/chat/completions", "POST",
              {"model": "m", "messages": [{"role": "user", "content": "hi"}]})]
    ts = [threading.Thread(target=one, args=c) for c in calls]
    for t in ts:
        t.start()
    seen = set()  # the request kinds the broker heard and left unanswered
    end = time.time() + 10
    while len(seen) < 4 and time.time() < end:
        if not silent.poll(200):
            continue
        frames = silent.recv_multipart()
        req = pb.Request()
        req.ParseFromString(frames[-1])
        kind = req.WhichOneof("body")
        if kind == "query":  # the attempt's check: it is running
            rep = pb.Reply(version=1, request_id=req.request_id, code=pb.CODE_OK)
            rep.query.rollouts.add(rollout_id="r-silent", state=pb.ROLLOUT_RUNNING,
                                   attempts=1)
            silent.send_multipart(frames[:-1] + [rep.SerializeToString()])
        elif kind != "engine_list":
            seen.add(kind)
    assert len(seen) >= 4 and not out, (seen, out, gw.log_text())
    rc = gw.stop()
    for t in ts:
        t.join()
    silent.close(0)
    ctx.term()
    assert rc == 0, gw.log_text()
    assert len(out) == 4 and set(out) <= {503, "closed"}, out
    log = gw.log_text()
    assert "LeakSanitizer" not in log and "AddressSanitizer" not in log, log

