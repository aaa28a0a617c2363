"""`sandbox.network=packages` on the `local` backend, every service real
and only the model scripted: the controller binds the gateway's package
proxy into a bubblewrap sandbox, the agent relays 127.0.0.1:3128 in the
sandbox to it with its attempt token, and the model's own command runs a
real `pip install` of a small wheel (built here) from a package index
served on loopback by Python's http.server, then imports it. From the
same sandbox a host not on the allow list is refused (403) and nothing
is reachable directly; the gateway logs each fetch with the attempt, and
the system prompt says which mode the run is in."""
import base64
import hashlib
import os
import subprocess
import tempfile
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from brokerlib import task
from stacklib import pb, scripted, tokenizer, wait_for

PKG = "lisa-tiny-pkg"
MOD = "lisa_tiny_pkg"
MAGIC = "tiny-package-4127"


def build_wheel(folder):
    """A pure-Python wheel of MOD (PEP 427 layout, RECORD with hashes)."""
    name = f"{MOD}-0.1-py3-none-any.whl"
    dist = f"{MOD}-0.1.dist-info"
    files = {
        f"{MOD}/__init__.py": f"MAGIC = {MAGIC!r}\n".encode(),
        f"{dist}/METADATA": (f"Metadata-Version: 2.1\nName: {PKG}\n"
                             "Version: 0.1\n").encode(),
        f"{dist}/WHEEL": (b"Wheel-Version: 1.0\nGenerator: lisa-test\n"
                          b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(
            hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = os.path.join(folder, name)
    with zipfile.ZipFile(path, "w") as z:
        for p, data in files.items():
            z.writestr(p, data)
    return name, hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def index(tmp_path):
    """A PEP 503 simple index with one project, on 127.0.0.1."""
    root = tmp_path / "index"
    (root / "packages").mkdir(parents=True)
    (root / "simple" / PKG).mkdir(parents=True)
    whl, sha = build_wheel(str(root / "packages"))
    (root / "simple" / "index.html").write_text(
        f'<html><body><a href="{PKG}/">{PKG}</a></body></html>\n')
    (root / "simple" / PKG / "index.html").write_text(
        f'<html><body><a href="../../packages/{whl}#sha256={sha}">{whl}</a>'
        "</body></html>\n")
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def run_probe(make_stack, port, max_bytes):
    """One attempt whose first command is the probe; the model's view of
    its output, every prompt, the gateway's proxy lines and the rollout."""
    probe = (
        "python3 -m pip install --no-cache-dir --disable-pip-version-check "
        f"--target /testbed/site --index-url http://127.0.0.1:{port}/simple "
        f"{PKG} 2>&1 | tail -n 2; "
        f"PYTHONPATH=/testbed/site python3 -c 'import {MOD}; "
        f"print(\"imported\", {MOD}.MAGIC)'; "
        "curl -s -o /dev/null -w 'other-host=%{http_code}\\n' "
        f"http://127.0.0.2:{port}/simple/; "
        f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && "
        "echo DIRECT-OPEN; "
        "(exec 3<>/dev/tcp/1.1.1.1/80) 2>/dev/null && echo NET-OPEN; "
        "echo END")
    script = scripted(("execute_bash", {"command": probe}),
                      ("execute_bash", {"command": "echo done > answer.txt"}),
                      ("submit", {}))
    # The proxy's socket in a folder the sandboxes' users may traverse
    # (bubblewrap binds it as that user).
    sockdir = tempfile.mkdtemp(prefix="lisa-proxy-")
    os.chmod(sockdir, 0o711)
    psock = os.path.join(sockdir, "proxy.sock")
    try:
        s = make_stack(script, gw_opts={
            "proxy-unix": psock, "proxy-allow": f"127.0.0.1:{port}",
            "proxy-max-requests": 50, "proxy-max-bytes": max_bytes})
        wait_for(lambda: os.path.exists(psock), what="proxy socket")
        (rid,) = s.enqueue([task("Install the tiny package.", truth="done")])
        s.controller(sandbox_network="packages", proxy_socket=psock)
        r, atts = s.wait_state(rid, [pb.ROLLOUT_SUCCEEDED,
                                     pb.ROLLOUT_FAILED], timeout=90)
        assert r.state == pb.ROLLOUT_SUCCEEDED, (atts, s.log())
        texts = [tokenizer().decode(b["prompt"], skip_special_tokens=False)
                 for b in s.engine.requests]
        obs = texts[1].rsplit("<tool_response>", 1)[1]
        assert "END" in obs, obs
        lines = [ln for ln in s.gateway.log_text().splitlines()
                 if "proxy: rollout=" in ln]
        return obs, texts, lines, rid
    finally:
        subprocess.run(["rm", "-rf", sockdir], check=False)


def test_pip_install_through_the_proxy_and_nothing_else(make_stack, index,
                                                        monkeypatch):
    monkeypatch.setenv("GW_LOG", "info")  # the proxy's fetch lines
    port = index
    obs, texts, lines, rid = run_probe(make_stack, port, "16MiB")
    # The prompt says which mode the run is in.
    assert "reaches only the package indexes" in texts[0], texts[0]
    assert "has no network access" not in texts[0]
    # pip installed the wheel through the proxy and it imports.
    assert f"imported {MAGIC}" in obs, obs
    # A host not on the allow list is refused by the proxy; nothing is
    # reachable without it (not the index, not the internet).
    assert "other-host=403" in obs, obs
    assert "DIRECT-OPEN" not in obs and "NET-OPEN" not in obs, obs
    # Every fetch is a log line of the gateway naming the attempt.
    assert any(f"rollout={rid} attempt=1 GET http://127.0.0.1:{port}"
               f"/simple/{PKG}/" in ln and "status=200" in ln
               for ln in lines), lines
    assert any(f"/packages/{MOD}-0.1-py3-none-any.whl" in ln and
               "status=200" in ln for ln in lines), lines
    assert any("http://127.0.0.2:" in ln and "outcome=forbidden" in ln
               for ln in lines), lines


def test_byte_cap_stops_the_install(make_stack, index, monkeypatch):
    monkeypatch.setenv("GW_LOG", "info")
    # 1 KiB: the project page fits, the wheel (over 1 KiB) does not.
    obs, _, lines, rid = run_probe(make_stack, index, "1KiB")
    assert "imported" not in obs, obs
    assert any(f"rollout={rid} attempt=1" in ln and
               ("outcome=byte_cap" in ln) for ln in lines), lines
