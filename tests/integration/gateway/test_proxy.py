"""The gateway's package proxy (gw_proxy) against real clients: curl as
the forward-proxy client on the TCP listener (plain GET and a CONNECT
tunnel), raw requests on the unix-socket listener, and origins served on
loopback by Python's http.server. Hosts not on the allow list are refused
(403), a request without a valid attempt token is refused (407), the
per-attempt request and byte caps hold (429, a cut transfer), and every
fetch is a log line naming the attempt."""
import os
import re
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gwlib import mint

BIG = 200_000  # bytes of /big, over the byte cap below
BYTE_CAP = 100_000
REQ_CAP = 4


class Origin(BaseHTTPRequestHandler):
    """/small: a few bytes; /big: BIG bytes; /headers: the request's
    header names and Connection value, as the origin received them."""

    def do_GET(self):
        if self.path == "/small":
            body = b"hello from the index\n"
        elif self.path == "/big":
            body = b"x" * BIG
        elif self.path == "/headers":
            body = ("names=" + ",".join(sorted(k.lower() for k in
                                               self.headers.keys())) +
                    "\nconnection=" + self.headers.get("Connection", "") +
                    "\nhost=" + self.headers.get("Host", "") +
                    "\nline=" + self.requestline + "\n").encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def origin():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def proxied(make_gateway, origin, tmp_path, monkeypatch):
    """A gateway whose proxy listens on an ephemeral port (read back from
    its log, so no other process can take the port in between)."""
    monkeypatch.setenv("GW_LOG", "info")
    sock = str(tmp_path / "proxy.sock")
    gw = make_gateway(proxy_unix=sock, proxy_address="127.0.0.1",
                      proxy_port=0,
                      proxy_allow=f"127.0.0.1:{origin}",
                      proxy_max_requests=REQ_CAP,
                      proxy_max_bytes=BYTE_CAP, proxy_idle="5s")
    end = time.time() + 10
    m = None
    while time.time() < end:
        m = re.search(r"proxy: listening on unix:\S+, port (\d+)",
                      gw.log_text())
        if m and os.path.exists(sock):
            break
        time.sleep(0.02)
    assert m and int(m.group(1)) > 0, gw.log_text()
    return gw, int(m.group(1)), sock, origin


def curl(pport, url, token=None, tunnel=False):
    """curl through the proxy: (status of the proxy or origin, body)."""
    args = ["curl", "-s", "-o", "-", "-w", "\n%{http_code}",
            "--max-time", "10", "-x", f"http://127.0.0.1:{pport}"]
    if token:
        args += ["--proxy-header", f"Proxy-Authorization: Bearer {token}"]
    if tunnel:
        args.append("-p")
    args.append(url)
    r = subprocess.run(args, capture_output=True, timeout=20,
                       env={"PATH": os.environ["PATH"]})
    body, _, code = r.stdout.rpartition(b"\n")
    return int(code or b"0"), body


def unix_request(sock, head):
    """Sends one request head on the unix listener; the whole answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock)
    s.sendall(head)
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    s.close()
    return out


def test_get_through_the_proxy_names_the_attempt(proxied, key):
    gw, pport, sock, oport = proxied
    tok = mint(key, "r-proxy-get", 2)
    code, body = curl(pport, f"http://127.0.0.1:{oport}/small", tok)
    assert code == 200 and body == b"hello from the index\n", body
    # The same through the unix socket the sandboxes use.
    ans = unix_request(sock, (
        f"GET http://127.0.0.1:{oport}/headers HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{oport}\r\nProxy-Authorization: Bearer {tok}\r\n"
        "Proxy-Connection: keep-alive\r\nX-Kept: yes\r\n\r\n").encode())
    assert ans.startswith(b"HTTP/1.0 200") or ans.startswith(b"HTTP/1.1 200")
    # The origin got the origin-form line, the end-to-end headers and
    # none of the proxy's (the token never leaves the gateway).
    assert b"line=GET /headers HTTP/1.1" in ans, ans
    assert b"proxy-" not in ans.split(b"names=")[1].split(b"\n")[0], ans
    assert b"x-kept" in ans and b"connection=close" in ans, ans
    assert f"host=127.0.0.1:{oport}".encode() in ans
    # One log line a fetch, naming the attempt, the target and the bytes.
    time.sleep(0.2)
    lines = [ln for ln in gw.log_text().splitlines() if "proxy: rollout=" in ln]
    assert any("rollout=r-proxy-get attempt=2 GET " in ln and
               f"http://127.0.0.1:{oport}/small" in ln and
               "outcome=done status=200" in ln for ln in lines), lines
    assert len([ln for ln in lines if "r-proxy-get" in ln]) == 2, lines


def test_connect_tunnel(proxied, key):
    _, pport, _, oport = proxied
    tok = mint(key, "r-proxy-tunnel", 1)
    code, body = curl(pport, f"http://127.0.0.1:{oport}/small", tok,
                      tunnel=True)
    assert code == 200 and body == b"hello from the index\n"


def test_hosts_not_allowed_are_refused(proxied, key):
    gw, pport, sock, oport = proxied
    tok = mint(key, "r-proxy-deny", 1)
    # Another loopback address, another port, a name: all off the list.
    for url in (f"http://127.0.0.2:{oport}/small",
                f"http://127.0.0.1:{pport}/small",
                "http://example.org/"):
        code, body = curl(pport, url, tok)
        assert code == 403 and b"allow list" in body, (url, code, body)
    code, _ = curl(pport, f"https://127.0.0.2:{oport}/", tok)
    assert code in (0, 403)  # curl reports CONNECT's 403 as a failure
    ans = unix_request(sock, (
        f"CONNECT 127.0.0.2:{oport} HTTP/1.1\r\n"
        f"Proxy-Authorization: Bearer {tok}\r\n\r\n").encode())
    assert ans.startswith(b"HTTP/1.1 403"), ans
    lines = [ln for ln in gw.log_text().splitlines() if "r-proxy-deny" in ln]
    assert lines and all("outcome=forbidden" in ln for ln in lines), lines


def test_token_required_and_only_proxy_methods(proxied, key):
    _, pport, sock, oport = proxied
    code, _ = curl(pport, f"http://127.0.0.1:{oport}/small")
    assert code == 407
    code, _ = curl(pport, f"http://127.0.0.1:{oport}/small", "v1.bad.token")
    assert code == 407
    other = mint(os.urandom(32), "r-proxy-forged", 1)
    code, _ = curl(pport, f"http://127.0.0.1:{oport}/small", other)
    assert code == 407
    tok = mint(key, "r-proxy-methods", 1)
    for head, want in (
            (f"POST http://127.0.0.1:{oport}/small HTTP/1.1\r\n", b" 405 "),
            ("GET /small HTTP/1.1\r\n", b" 400 "),
            (f"GET http://u@127.0.0.1:{oport}/small HTTP/1.1\r\n", b" 400 ")):
        ans = unix_request(sock, (head + "Proxy-Authorization: Bearer " +
                                  tok + "\r\n\r\n").encode())
        assert want in ans.split(b"\r\n")[0], (head, ans)
    ans = unix_request(sock, b"GET http://127.0.0.1/ HTTP/1.1\r\nX: " +
                       b"a" * 20000 + b"\r\n\r\n")
    assert b" 431 " in ans.split(b"\r\n")[0], ans[:100]


def test_byte_and_request_caps(proxied, key):
    gw, pport, _, oport = proxied
    tok = mint(key, "r-proxy-bytes", 1)
    # /big passes the attempt's byte cap: the transfer is cut short.
    code, body = curl(pport, f"http://127.0.0.1:{oport}/big", tok)
    assert len(body) < BIG, (code, len(body))
    # Past the cap, every request of the attempt is refused...
    code, body = curl(pport, f"http://127.0.0.1:{oport}/small", tok)
    assert code == 429 and b"bytes" in body, body
    # ...while another attempt is not affected; it has REQ_CAP requests.
    tok2 = mint(key, "r-proxy-requests", 1)
    for _ in range(REQ_CAP):
        code, _ = curl(pport, f"http://127.0.0.1:{oport}/small", tok2)
        assert code == 200
    code, body = curl(pport, f"http://127.0.0.1:{oport}/small", tok2)
    assert code == 429 and b"requests" in body, body
    time.sleep(0.2)
    log = gw.log_text()
    assert "rollout=r-proxy-bytes attempt=1 GET" in log
    assert "outcome=byte_cap" in log and "outcome=request_cap" in log
    from gwlib import http
    _, _, metrics = http(gw.url + "/metrics")
    assert b'lisa_gateway_proxy_requests_total{outcome="byte_cap"}' in \
        metrics, metrics
