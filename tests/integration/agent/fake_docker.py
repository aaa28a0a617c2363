"""A Docker Engine API stand-in on a unix socket, with the semantics lisa's
docker backend relies on (as documented for Engine API 1.4x):

- GET /version is unversioned; every other call must carry the negotiated
  /v<ApiVersion> prefix (an engine that is newer than its client refuses
  old versions, so a client must negotiate);
- POST /containers/create?name=N: 201 {Id, Warnings}; 409 when the name is
  taken; 404 when the image is unknown;
- POST /containers/{id}/start: 204, or 304 when already started;
- GET /containers/json?all=1&filters={"label":["k=v"]}: summaries with
  Names ("/" + name), Labels, State (created, running, exited);
- GET /containers/{id}/json: State {Status, Running, ExitCode, OOMKilled};
- GET /containers/{id}/logs: without a TTY the body is multiplexed, each
  chunk an 8-byte header (stream 1/2, three zero bytes, big-endian
  length) and its payload;
- DELETE /containers/{id}?force=1&v=1: kills and removes; 404 when gone.

"Containers" run their Cmd as local processes, so exit codes are real.
A command starting with "oom:" ends at once as an OOM kill (137).
"""
import http.server
import json
import os
import signal
import socketserver
import struct
import subprocess
import threading
import time
import urllib.parse

API = "1.45"


class Engine:
    def __init__(self, path, image="lisa-sandbox:test"):
        self.path = path
        self.image = image
        self.lock = threading.Lock()
        self.containers = {}  # name -> dict
        self.requests = []    # (method, path, body)
        self.srv = None
        self.next_id = 1

    # -- lifecycle of the fake ----------------------------------------
    def start(self):
        if os.path.exists(self.path):
            os.unlink(self.path)
        self.srv = _Unix(self.path, self.handler())
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return self

    def stop(self):
        if self.srv:
            self.srv.shutdown()
            self.srv.server_close()
            self.srv = None
        if os.path.exists(self.path):
            os.unlink(self.path)

    def close(self):
        self.stop()
        with self.lock:
            for c in self.containers.values():
                self._kill(c)

    # -- containers ---------------------------------------------------
    def _refresh(self, c):
        p = c.get("proc")
        if c["state"] == "running" and p is not None and p.poll() is not None:
            c["state"] = "exited"
            rc = p.returncode
            c["exit"] = rc if rc >= 0 else 128 - rc
            out, err = p.communicate()
            c["out"] += out
            c["err"] += err

    def _kill(self, c):
        p = c.get("proc")
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def find(self, ref):
        c = self.containers.get(ref)
        if c:
            return c
        for c in self.containers.values():
            if c["id"] == ref:
                return c
        return None

    def handler(self):
        eng = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def address_string(self):
                return "local"

            def log_message(self, *a):
                pass

            def send(self, code, obj=None, raw=None, ctype="application/json"):
                data = raw if raw is not None else (
                    json.dumps(obj).encode() if obj is not None else b"")
                self.send_response(code)
                if data:
                    self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def handle_any(self, method):
                n = int(self.headers.get("Content-Length", "0") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                u = urllib.parse.urlsplit(self.path)
                q = urllib.parse.parse_qs(u.query)
                with eng.lock:
                    eng.requests.append((method, self.path, body))
                if u.path == "/version" and method == "GET":
                    return self.send(200, {"ApiVersion": API,
                                           "MinAPIVersion": "1.24",
                                           "Version": "27.0.0"})
                prefix = "/v" + API
                if not u.path.startswith(prefix + "/"):
                    return self.send(400, {"message": "client version is "
                                           "too old or missing"})
                path = u.path[len(prefix):]
                with eng.lock:
                    return self.route(method, path, q, body)

            def route(self, method, path, q, body):
                parts = path.strip("/").split("/")
                if path == "/_ping":
                    return self.send(200, raw=b"OK", ctype="text/plain")
                if path == "/containers/create" and method == "POST":
                    name = q.get("name", [""])[0]
                    if name in eng.containers:
                        return self.send(409, {"message": "Conflict. The "
                                               "container name is in use"})
                    if body.get("Image") != eng.image:
                        return self.send(404, {"message": "No such image"})
                    cid = "%064x" % eng.next_id
                    eng.next_id += 1
                    eng.containers[name] = {"id": cid, "name": name,
                                            "spec": body, "state": "created",
                                            "exit": 0, "oom": False,
                                            "out": b"", "err": b""}
                    return self.send(201, {"Id": cid, "Warnings": []})
                if path == "/containers/json" and method == "GET":
                    flt = json.loads(q.get("filters", ["{}"])[0])
                    want = flt.get("label", [])
                    out = []
                    for c in eng.containers.values():
                        eng._refresh(c)
                        labels = c["spec"].get("Labels", {})
                        ok = all(labels.get(k) == v for k, v in
                                 (w.split("=", 1) for w in want))
                        if ok:
                            out.append({"Id": c["id"],
                                        "Names": ["/" + c["name"]],
                                        "Labels": labels,
                                        "State": c["state"],
                                        "Status": c["state"]})
                    return self.send(200, out)
                if len(parts) >= 2 and parts[0] == "containers":
                    c = eng.find(parts[1])
                    if c is None:
                        return self.send(404, {"message": "No such container"})
                    eng._refresh(c)
                    if method == "DELETE" and len(parts) == 2:
                        eng._kill(c)
                        del eng.containers[c["name"]]
                        return self.send(204)
                    if method == "POST" and parts[2:] == ["start"]:
                        if c["state"] != "created":
                            return self.send(304)
                        # Entrypoint + Cmd, as the engine runs them.
                        cmd = (c["spec"].get("Entrypoint") or []) + \
                            (c["spec"].get("Cmd") or [])
                        if cmd[-1].startswith("oom:"):
                            c["state"], c["exit"], c["oom"] = "exited", 137, True
                            return self.send(204)
                        env = dict(e.split("=", 1) for e in c["spec"]["Env"])
                        env["PATH"] = "/usr/bin:/bin"
                        c["proc"] = subprocess.Popen(
                            cmd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
                        c["state"] = "running"
                        return self.send(204)
                    if method == "GET" and parts[2:] == ["json"]:
                        return self.send(200, {"Id": c["id"], "State": {
                            "Status": c["state"],
                            "Running": c["state"] == "running",
                            "ExitCode": c["exit"], "OOMKilled": c["oom"]}})
                    if method == "GET" and parts[2:] == ["logs"]:
                        raw = b""
                        for stream, data in ((1, c["out"]), (2, c["err"])):
                            if data:
                                raw += struct.pack(">BxxxI", stream,
                                                   len(data)) + data
                        return self.send(200, raw=raw,
                                         ctype="application/vnd.docker."
                                               "multiplexed-stream")
                return self.send(404, {"message": "page not found"})

            def do_GET(self):
                self.handle_any("GET")

            def do_POST(self):
                self.handle_any("POST")

            def do_DELETE(self):
                self.handle_any("DELETE")
        return H


class _Unix(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
