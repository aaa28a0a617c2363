"""lisa-agent end to end against a scripted gateway.

The gateway here is a real HTTP server on 127.0.0.1 (or a unix socket)
that speaks docs/agent-api.md: it hands out a task, records heartbeats and
the result, and plays the model by answering each chat completion with the
next scripted message (tool calls in OpenAI format). The agent binary runs
as it would in a sandbox, with LISA_TESTBED pointing at a temporary
directory.
"""
import http.server
import json
import os
import socket
import socketserver
import subprocess
import threading
import time

import pytest

BIN = os.path.join(os.environ.get("LISA_BINARY_DIR", "build/default"), "bin",
                   "lisa-agent")
TOKEN = "attempt-token-abc123"


def call(name, args, cid=None):
    """One assistant message with one tool call."""
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": cid or f"call_{name}_{time.monotonic_ns()}",
                            "type": "function",
                            "function": {"name": name,
                                         "arguments": json.dumps(args)}}]}


def text(content):
    return {"role": "assistant", "content": content}


class Gateway:
    """Scripted gateway state shared with the handler threads."""

    def __init__(self, task, script, *, cancel_after=None, chat_errors=0,
                 token=TOKEN, usage=True, cancel_when=None,
                 overflow_above=None):
        self.task = task
        self.script = list(script)
        self.cancel_after = cancel_after  # heartbeats before cancel=true
        self.cancel_when = cancel_when    # or: cancel once this is true
        self.chat_errors = chat_errors    # 503s before the first answer
        self.token = token
        self.usage = usage
        # Refuse calls asking more than this many tokens with
        # context_length_exceeded, as an engine near its context limit.
        self.overflow_above = overflow_above
        self.lock = threading.Lock()
        self.chats = []       # (headers, body) of every chat request
        self.heartbeats = []  # (monotonic time, note)
        self.results = []
        self.task_fetches = 0
        self.unauthorized = 0

    def handler(self):
        gw = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def address_string(self):
                return "local"

            def log_message(self, *a):
                pass

            def reply(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def authorized(self):
                if self.headers.get("Authorization") != f"Bearer {gw.token}":
                    with gw.lock:
                        gw.unauthorized += 1
                    self.reply(401, {"error": {"code": "unauthorized",
                                               "message": "bad token"}})
                    return False
                return True

            def body(self):
                n = int(self.headers.get("Content-Length", "0"))
                return json.loads(self.rfile.read(n) or b"{}")

            def do_GET(self):
                if not self.authorized():
                    return
                if self.path == "/lisa/v1/task":
                    with gw.lock:
                        gw.task_fetches += 1
                    self.reply(200, gw.task)
                else:
                    self.reply(404, {"error": {"code": "not_found",
                                               "message": self.path}})

            def do_POST(self):
                if not self.authorized():
                    return
                body = self.body()
                if self.path == "/lisa/v1/heartbeat":
                    with gw.lock:
                        gw.heartbeats.append((time.monotonic(),
                                              body.get("note")))
                        n = len(gw.heartbeats)
                    cancel = (gw.cancel_after is not None and
                              n > gw.cancel_after) or bool(
                                  gw.cancel_when and gw.cancel_when())
                    self.reply(200, {"lease_expiry_ms": 0, "cancel": cancel})
                elif self.path == "/lisa/v1/result":
                    with gw.lock:
                        gw.results.append(body)
                    self.reply(200, {"accepted": True})
                elif self.path == "/v1/chat/completions":
                    with gw.lock:
                        gw.chats.append((dict(self.headers), body))
                        if gw.chat_errors > 0:
                            gw.chat_errors -= 1
                            self.reply(503, {"error": {
                                "code": "unavailable",
                                "message": "engine restarting"}})
                            return
                        if (gw.overflow_above is not None and
                                body.get("max_tokens", 0) > gw.overflow_above):
                            self.reply(400, {"error": {
                                "code": "context_length_exceeded",
                                "type": "invalid_request_error",
                                "message": "prompt + max_tokens exceed "
                                           "the context"}})
                            return
                        msg = gw.script.pop(0) if gw.script else text("hmm")
                    chars = sum(len(json.dumps(m)) for m in body["messages"])
                    finish = "tool_calls" if msg.get("tool_calls") else "stop"
                    resp = {"id": "chatcmpl-1", "object": "chat.completion",
                            "model": body.get("model"),
                            "choices": [{"index": 0, "message": msg,
                                         "finish_reason": finish}]}
                    if gw.usage:
                        resp["usage"] = {"prompt_tokens": chars // 4,
                                         "completion_tokens": 10,
                                         "total_tokens": chars // 4 + 10}
                    self.reply(200, resp)
                else:
                    self.reply(404, {"error": {"code": "not_found",
                                               "message": self.path}})
        return H


class _TCP(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


class _Unix(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(gw, unix_path=None):
    if unix_path:
        srv = _Unix(unix_path, gw.handler())
    else:
        srv = _TCP(("127.0.0.1", 0), gw.handler())
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    return srv


def run_agent(srv, testbed, *, unix_path=None, token=TOKEN, extra=None,
              timeout=60):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
           "LISA_ATTEMPT_TOKEN": token,
           "LISA_TESTBED": str(testbed),
           "LISA_HEARTBEAT_MS": "100",
           "LISA_RESERVE_S": "0",
           "LISA_STARTUP_S": "5"}
    if unix_path:
        env["LISA_GATEWAY_SOCKET"] = unix_path
    else:
        env["LISA_GATEWAY_URL"] = f"http://127.0.0.1:{srv.server_address[1]}"
    env.update(extra or {})
    return subprocess.run([BIN], env=env, capture_output=True, text=True,
                          timeout=timeout)


def base_task(**limits):
    lim = {"max_turns": 10, "max_context_tokens": 60000,
           "max_tokens_per_call": 4000, "temperature": 1.0}
    lim.update(limits)
    return {"rollout_id": "r-000001", "attempt": 1, "task_id": "t-1",
            "data_source": "math_mini",
            "problem_statement": "What is 6 * 7? Use the documents.",
            "files": [{"path": "notes/a.txt", "content": "six times seven\n"},
                      {"path": "b.txt", "content": "Zm9ydHktdHdv",
                       "encoding": "base64"}],
            "extra_info": {"qa_type": "free-form"},
            "limits": lim}


def test_episode_end_to_end(tmp_path):
    tb = tmp_path / "testbed"
    script = [
        call("execute_bash",
             {"command": "ls documents/notes; cat documents/b.txt; "
                         "env > env.txt; sleep 0.6; "
                         "printf '%s\\n' '\\boxed{42}' > answer.txt"}, "c1"),
        call("str_replace_editor",
             {"command": "view", "path": str(tb / "documents/notes/a.txt")},
             "c2"),
        text("I think I am done."),
        call("submit", {}, "c4"),
    ]
    gw = Gateway(base_task(), script)
    srv = serve(gw)
    try:
        p = run_agent(srv, tb)
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr
    # The result: the answer file, the turns, how it ended.
    assert len(gw.results) == 1
    res = gw.results[0]
    assert res["answer"] == "\\boxed{42}\n"
    assert res["turns"] == 4
    assert res["end_reason"] == "submit"
    # Input files were placed, base64 decoded.
    assert (tb / "documents/notes/a.txt").read_text() == "six times seven\n"
    assert (tb / "documents/b.txt").read_text() == "forty-two"
    # The token never reaches the model's commands.
    assert TOKEN not in (tb / "env.txt").read_text()
    # Heartbeats flowed, also while the command ran.
    assert len(gw.heartbeats) >= 3
    assert any(n and n.startswith("turn") for _, n in gw.heartbeats)
    # The conversation the model saw.
    assert len(gw.chats) == 4
    hdrs = [h for h, _ in gw.chats]
    assert [h.get("X-Lisa-Turn") for h in hdrs] == ["1", "2", "3", "4"]
    first = gw.chats[0][1]
    assert [t["function"]["name"] for t in first["tools"]] == [
        "str_replace_editor", "execute_bash", "submit"]
    assert first["messages"][0]["role"] == "system"
    assert first["messages"][1]["role"] == "user"
    assert "What is 6 * 7?" in first["messages"][1]["content"]
    assert "\\boxed{}" in first["messages"][1]["content"]
    assert first["messages"][1]["content"].endswith("Steps Remaining: 10")
    assert first["temperature"] == 1.0
    assert first["max_tokens"] == 4000
    m2 = gw.chats[1][1]["messages"]
    assert m2[2]["role"] == "assistant"
    assert m2[2]["tool_calls"][0]["id"] == "c1"
    obs = m2[3]
    assert obs["role"] == "tool" and obs["tool_call_id"] == "c1"
    assert obs["content"].startswith("Exit code: 0\nExecution output of "
                                     "[execute_bash]:\n[STDOUT]\na.txt\n"
                                     "forty-two")
    assert obs["content"].endswith("Steps Remaining: 9")
    m3 = gw.chats[2][1]["messages"]
    assert "     1\tsix times seven" in m3[5]["content"]
    m4 = gw.chats[3][1]["messages"]
    assert m4[7]["role"] == "user"
    assert "MUST USE A FUNCTION CALL" in m4[7]["content"]
    assert m4[7]["content"].endswith("Steps Remaining: 7")


def test_turn_limit(tmp_path):
    gw = Gateway(base_task(max_turns=3),
                 [call("execute_bash", {"command": "echo 5 > answer.txt"})]
                 + [text("thinking")] * 5)
    srv = serve(gw)
    try:
        p = run_agent(srv, tmp_path / "tb")
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr
    assert gw.results == [{"answer": "5\n", "turns": 3,
                           "end_reason": "turn_limit",
                           "detail": "the turn limit was reached"}]
    last = gw.chats[-1][1]["messages"][-1]["content"]
    assert last.endswith("Please submit your answer NOW.")


def _live_with_cmdline(cmdline):
    """Host pids of live (non-zombie) processes whose argv is cmdline."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if f.read() != cmdline:
                    continue
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    out.append(int(pid))
        except OSError:
            pass
    return out


def test_cancel_kills_running_command(tmp_path):
    # The background command is found by its argv: where the agent may
    # make namespaces (root here) its commands have a PID namespace of
    # their own, and the pid they see is not the host's.
    secs = "30.%d" % (os.getpid() % 100000)
    argv = b"sleep\0" + secs.encode() + b"\0"
    pidfile = tmp_path / "tb" / "bg.pid"
    gw = Gateway(base_task(),
                 [call("execute_bash",
                       {"command": f"sleep {secs} & echo $! > bg.pid.tmp; "
                                   "mv bg.pid.tmp bg.pid; sleep 30"})],
                 cancel_when=pidfile.exists)
    srv = serve(gw)
    t0 = time.monotonic()
    try:
        p = run_agent(srv, tmp_path / "tb")
    finally:
        srv.shutdown()
    assert p.returncode == 9, p.stderr
    assert time.monotonic() - t0 < 10
    assert gw.results == []
    assert pidfile.exists()  # the background command had started
    for _ in range(100):
        if not _live_with_cmdline(argv):
            break
        time.sleep(0.02)
    else:
        pytest.fail("background command survived the cancellation")


def test_unix_socket_and_retry_on_503(tmp_path):
    path = str(tmp_path / "gw.sock")
    gw = Gateway(base_task(), [call("execute_bash",
                                    {"command": "echo A > answer.txt"}),
                               call("submit", {})], chat_errors=2)
    srv = serve(gw, unix_path=path)
    try:
        p = run_agent(srv, tmp_path / "tb", unix_path=path)
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr
    assert gw.results[0]["answer"] == "A\n"
    assert gw.results[0]["end_reason"] == "submit"
    # Two 503s, then the same turn again: retried with the same turn header.
    assert [h.get("X-Lisa-Turn") for h, _ in gw.chats] == ["1", "1", "1", "2"]


def test_bad_token_exits_unauthorized(tmp_path):
    gw = Gateway(base_task(), [])
    srv = serve(gw)
    try:
        p = run_agent(srv, tmp_path / "tb", token="wrong")
    finally:
        srv.shutdown()
    assert p.returncode == 4, p.stderr
    assert gw.unauthorized == 1
    assert "cannot fetch the task" in p.stderr


def test_unsafe_file_path_is_refused(tmp_path):
    task = base_task()
    task["files"].append({"path": "../escape.txt", "content": "x"})
    gw = Gateway(task, [])
    srv = serve(gw)
    try:
        p = run_agent(srv, tmp_path / "tb")
    finally:
        srv.shutdown()
    assert p.returncode == 5, p.stderr
    assert not (tmp_path / "escape.txt").exists()
    assert gw.results == [] and gw.chats == []


def test_context_budget_ends_episode(tmp_path):
    big = "x" * 4000
    gw = Gateway(base_task(max_context_tokens=1500),
                 [call("execute_bash", {"command": f"echo {big}"})] * 5,
                 usage=False)
    srv = serve(gw)
    try:
        p = run_agent(srv, tmp_path / "tb")
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr
    assert gw.results[0]["end_reason"] == "context"
    assert gw.results[0]["turns"] >= 1
    # max_tokens never asks for more than what is left of the budget.
    assert all(b["max_tokens"] < 1500 for _, b in gw.chats)


def test_context_overflow_shrinks_max_tokens_and_retries(tmp_path):
    # The engine refuses anything above 10,000 tokens: the agent halves
    # 40,000 -> 20,000 -> 10,000 and goes on, turn numbers unchanged.
    gw = Gateway(base_task(max_tokens_per_call=40000, max_context_tokens=100000),
                 [call("execute_bash", {"command": "echo hi"}),
                  call("submit", {})], overflow_above=10000)
    srv = serve(gw)
    try:
        p = run_agent(srv, tmp_path / "tb")
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr
    assert gw.results[0]["end_reason"] == "submit"
    asked = [(h.get("X-Lisa-Turn"), b["max_tokens"]) for h, b in gw.chats]
    assert asked == [("1", 40000), ("1", 20000), ("1", 10000),
                     ("2", 10000)], asked
    # The retried call carries the same history (no second steps note).
    assert gw.chats[0][1]["messages"] == gw.chats[2][1]["messages"]


def test_context_overflow_at_the_floor_ends_episode(tmp_path):
    # Below the 8,192 floor nothing is left to cut: the episode ends with
    # end_reason "context" after one shrink (12,000 -> 8,192).
    gw = Gateway(base_task(max_tokens_per_call=12000, max_context_tokens=100000),
                 [call("submit", {})], overflow_above=4000)
    srv = serve(gw)
    try:
        p = run_agent(srv, tmp_path / "tb")
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr
    assert gw.results[0]["end_reason"] == "context"
    assert [b["max_tokens"] for _, b in gw.chats] == [12000, 8192]


def test_deadline_ends_episode_and_caps_commands(tmp_path):
    gw = Gateway(base_task(time_left_ms=1500),
                 [call("execute_bash",
                       {"command": "echo 1 > answer.txt; sleep 20"})] * 3)
    srv = serve(gw)
    t0 = time.monotonic()
    try:
        p = run_agent(srv, tmp_path / "tb")
    finally:
        srv.shutdown()
    assert p.returncode == 0, p.stderr
    assert time.monotonic() - t0 < 8
    assert gw.results[0]["end_reason"] == "deadline"
    assert gw.results[0]["answer"] == "1\n"


def test_gateway_down_exits_with_gateway_code(tmp_path):
    # bound but never listening: connecting is refused, and no other test's
    # server can take the port while this one holds it
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    env = {"PATH": os.environ.get("PATH", ""),
           "LISA_GATEWAY_URL": f"http://127.0.0.1:{port}",
           "LISA_ATTEMPT_TOKEN": TOKEN, "LISA_TESTBED": str(tmp_path),
           "LISA_STARTUP_S": "2"}
    p = subprocess.run([BIN], env=env, capture_output=True, text=True,
                       timeout=30)
    s.close()
    assert p.returncode == 3, p.stderr
    assert "exit 3 (gateway)" in p.stderr


def test_missing_config_is_a_usage_error():
    p = subprocess.run([BIN], env={"PATH": os.environ.get("PATH", "")},
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 2
    assert "LISA_GATEWAY_URL" in p.stderr
