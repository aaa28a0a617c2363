"""Helpers for the gateway's integration tests: a scripted generation engine
on loopback (token ids in, token ids out, every request recorded), attempt
tokens minted with the shared HMAC key, and a real lisa-gateway process."""
import base64
import hashlib
import hmac
import http.client as httpc
import json
import os
import signal
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tokenizers import Tokenizer

SRC = os.environ.get("LISA_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.environ.get("LISA_BINARY_DIR", os.getcwd())
GATEWAY = os.path.join(BIN, "bin", "lisa-gateway")
TOKDIR = os.path.join(SRC, "tests", "fixtures", "qwen3-tokenizer")

_TOK = None


def tokenizer():
    global _TOK
    if _TOK is None:
        _TOK = Tokenizer.from_file(os.path.join(TOKDIR, "tokenizer.json"))
    return _TOK


IM_END = 151645


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def mint(key, rollout_id, attempt, expiry_ms=None):
    """An attempt token in lisa's v1 format (see lisa_token.h)."""
    if expiry_ms is None:
        expiry_ms = int(time.time() * 1000) + 3600_000
    rid = rollout_id.encode()
    payload = (bytes([1]) + attempt.to_bytes(4, "big") +
               expiry_ms.to_bytes(8, "big") + bytes([len(rid)]) + rid)
    head = "v1." + b64url(payload)
    mac = hmac.new(key, head.encode(), hashlib.sha256).digest()
    return head + "." + b64url(mac)


class Engine:
    """A scripted engine: `script(prompt_ids, body)` returns (text, finish)
    or (ids, finish); the reply's ids are the text's ids plus <|im_end|>
    when finish is "stop". Logprobs are -(i+1)/1000 for token i of each
    reply, so a test can tell sampled logprobs apart."""

    def __init__(self, script, policy_version=7, status=200, delay=0.0,
                 cached=None):
        self.script = script
        self.cached = cached  # prompt -> cached_tokens to report, or None
        self.policy_version = policy_version
        self.status = status
        self.delay = delay
        self.requests = []   # request bodies (parsed)
        self.replies = []    # (ids, logprobs, finish) per answered request
        self.inflight = 0
        self.max_inflight = 0  # most requests open at once
        self.lock = threading.Lock()
        tokenizer()  # load before serving: the first call must not be slow
        eng = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200 if self.path == "/healthz" else 404, {"ok": True})

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(n))
                with eng.lock:
                    eng.inflight += 1
                    eng.max_inflight = max(eng.max_inflight, eng.inflight)
                if eng.delay:
                    time.sleep(eng.delay)
                with eng.lock:
                    eng.inflight -= 1
                if eng.status != 200:
                    self._send(eng.status, {"error": "scripted failure"})
                    return
                with eng.lock:
                    eng.requests.append(body)
                    out, finish = eng.script(list(body["prompt"]), body)
                if isinstance(out, str):
                    ids = tokenizer().encode(out, add_special_tokens=False).ids
                else:
                    ids = list(out)
                if finish == "stop":
                    ids = ids + [IM_END]
                lps = [-(i + 1) / 1000.0 for i in range(len(ids))]
                with eng.lock:
                    eng.replies.append((ids, lps, finish))
                reply = {
                    "id": "cmpl-x", "object": "text_completion",
                    "choices": [{"index": 0, "text": "", "token_ids": ids,
                                 "logprobs": {"token_logprobs": lps},
                                 "finish_reason": finish}],
                    "policy_version": eng.policy_version}
                if eng.cached is not None:  # as vLLM reports its prefix cache
                    reply["usage"] = {
                        "prompt_tokens": len(body["prompt"]),
                        "completion_tokens": len(ids),
                        "prompt_tokens_details": {
                            "cached_tokens": eng.cached(body["prompt"])}}
                self._send(200, reply)

        class S(ThreadingHTTPServer):
            request_queue_size = 1024

        self.server = S(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def tool_reply(name, args, text=""):
    call = "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"
    return (text + "\n" + call) if text else call


class Gateway:
    """One lisa-gateway process on 127.0.0.1 with an ephemeral port."""

    def __init__(self, workdir, key, engines="", broker="", **opts):
        self.workdir = str(workdir)
        os.makedirs(self.workdir, exist_ok=True)
        self.keyfile = os.path.join(self.workdir, "token.key")
        with open(self.keyfile, "w") as f:
            f.write(key.hex() + "\n")
        os.chmod(self.keyfile, 0o600)
        self.opts = {"engines": engines, "broker": broker,
                     "tokenizer": TOKDIR, "admin-key": "admin-secret",
                     "health-interval": "200ms", "engine-refresh": "200ms"}
        self.opts.update({k.replace("_", "-"): v for k, v in opts.items()})
        self.proc = None
        self.port = None

    def start(self, timeout=20.0):
        pf = os.path.join(self.workdir, "port")
        if os.path.exists(pf):
            os.unlink(pf)
        args = [GATEWAY, "--port", "0", "--port-file", pf,
                "--token-key", "file:" + self.keyfile]
        for k, v in self.opts.items():
            args += ["--" + k, str(v)]
        env = dict(os.environ, LISA_LOG_LEVEL=os.environ.get("GW_LOG", "warn"))
        self.log = open(os.path.join(self.workdir, "gateway.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log, env=env)
        end = time.time() + timeout
        while time.time() < end:
            if os.path.exists(pf):
                txt = open(pf).read().strip()
                if txt:
                    self.port = int(txt)
                    self.url = "http://127.0.0.1:%d" % self.port
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError("gateway exited with %d:\n%s" %
                                   (self.proc.returncode, self.log_text()))
            time.sleep(0.02)
        raise RuntimeError("gateway did not start")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc:
            self.log.close()
        return self.proc.returncode if self.proc else None

    def log_text(self):
        with open(os.path.join(self.workdir, "gateway.log"), "rb") as f:
            return f.read().decode(errors="replace")


def http(url, method="GET", body=None, headers=None, timeout=10.0):
    """A plain HTTP/1.1 request; returns (status, headers dict, body bytes)."""
    import http.client
    from urllib.parse import urlparse
    u = urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    c.request(method, u.path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    h = {k.lower(): v for k, v in r.getheaders()}
    c.close()
    return r.status, h, data


def raw_socket(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


class UnixHTTP(httpc.HTTPConnection):
    """HTTP over a unix socket, connecting as lisa-agent does: a full
    listen queue refuses a local connect with EAGAIN (nothing started),
    so the connect is tried again shortly until the timeout."""

    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        end = time.time() + self.timeout
        pause = 0.001
        while True:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(self.timeout)
            try:
                self.sock.connect(self.path)
                return
            except BlockingIOError:
                self.sock.close()
                if time.time() > end:
                    raise
                time.sleep(pause)
                pause = min(2 * pause, 0.064)
