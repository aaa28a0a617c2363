"""A Kubernetes API server stand-in (HTTP on 127.0.0.1) with the batch/v1
Job semantics lisa's k8s backend relies on:

- POST .../jobs: 201 with the stored Job (metadata.resourceVersion set);
  409 AlreadyExists (a Status object) when the name is taken; 422 when
  restartPolicy is not Never/OnFailure;
- GET .../jobs?labelSelector=k=v: a JobList whose metadata.resourceVersion
  is the store's current version;
- GET .../jobs?watch=1&resourceVersion=RV: newline-delimited JSON events
  (ADDED, MODIFIED, DELETED, BOOKMARK) after RV, streamed with chunked
  encoding until timeoutSeconds; when RV is older than the oldest version
  kept (compact()), an ERROR event carrying a 410 Expired Status, then the
  stream ends;
- DELETE .../jobs/NAME?propagationPolicy=Background: 200 and a DELETED
  event; the pod is killed (with the API default, orphan, it would keep
  running; the fake records which policy was asked for);
- pods: one per Job (label job-name), Running while the container runs,
  then containerStatuses[0].state.terminated {exitCode, reason};
  reason OOMKilled for a command starting with "oom:";
- activeDeadlineSeconds: the pod is killed and the Job gets condition
  Failed/DeadlineExceeded; exit 0 gives Complete, non-zero Failed
  (BackoffLimitExceeded with backoffLimit 0);
- requests need the bearer token in `token` (401 otherwise).

Containers run their command as local processes (exit codes are real).
"""
import http.server
import json
import os
import signal
import socketserver
import subprocess
import threading
import time
import urllib.parse


class ApiServer:
    def __init__(self, token="k8s-token", namespace="lisa"):
        self.token = token
        self.ns = namespace
        self.cv = threading.Condition()
        self.rv = 100
        self.events = []        # (rv, type, job snapshot)
        self.oldest_rv = 100    # watches from before this get 410
        self.jobs = {}          # name -> {"obj", "proc", "deadline", "pod"}
        self.requests = []      # (method, path, body)
        self.deletes = []       # (name, propagationPolicy)
        self.srv = None
        self.stop_flag = False
        self.pending = False    # new Jobs wait (no pod) until release()

    def start(self):
        self.srv = _TCP(("127.0.0.1", 0), self.handler())
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        threading.Thread(target=self._reconcile, daemon=True).start()
        return self

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.srv.server_address[1]

    def close(self):
        self.stop_flag = True
        if self.srv:
            self.srv.shutdown()
            self.srv.server_close()
        with self.cv:
            for j in self.jobs.values():
                self._kill(j)

    def release(self):
        """Schedules every pending Job: its pod starts running."""
        with self.cv:
            for j in self.jobs.values():
                if j.get("held"):
                    j["held"] = False
                    self._run(j)
                    j["obj"]["status"]["active"] = 1
                    self._bump("MODIFIED", j["obj"])

    def _run(self, j):
        c = j["obj"]["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in c["env"]}
        env["PATH"] = "/usr/bin:/bin"
        j["proc"] = subprocess.Popen(
            c["command"], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True)

    def compact(self):
        """Forget history: watches from older versions get 410 Gone. The
        version moves on first, so even a watch that is caught up is
        behind the oldest version kept: its stream ends, and resuming it
        gets the 410."""
        with self.cv:
            self.rv += 1
            self.oldest_rv = self.rv
            self.events = []
            self.cv.notify_all()

    # -- store ----------------------------------------------------------
    def _bump(self, etype, job):
        self.rv += 1
        job["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, etype, json.loads(json.dumps(job))))
        self.cv.notify_all()

    def _kill(self, j):
        p = j.get("proc")
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def _finish(self, j, code, reason, cond, cond_reason):
        obj = j["obj"]
        j["pod"]["status"] = {"phase": "Succeeded" if code == 0 else "Failed",
                              "containerStatuses": [{"name": "agent", "state": {
                                  "terminated": {"exitCode": code,
                                                 "reason": reason}}}]}
        obj["status"] = {"active": 0,
                         "succeeded" if code == 0 else "failed": 1,
                         "conditions": [{"type": cond, "status": "True",
                                         "reason": cond_reason}]}
        self._bump("MODIFIED", obj)

    def _reconcile(self):
        while not self.stop_flag:
            with self.cv:
                for j in list(self.jobs.values()):
                    if j["done"]:
                        continue
                    p = j.get("proc")
                    if p is not None and p.poll() is not None:
                        j["done"] = True
                        code = p.returncode if p.returncode >= 0 else \
                            128 - p.returncode
                        self._finish(j, code, "Completed" if code == 0 else
                                     "Error", "Complete" if code == 0 else
                                     "Failed", "" if code == 0 else
                                     "BackoffLimitExceeded")
                    elif time.time() >= j["deadline"]:
                        self._kill(j)
                        j["done"] = True
                        self._finish(j, 137, "Error", "Failed",
                                     "DeadlineExceeded")
            time.sleep(0.02)

    def handler(self):
        api = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def status(self, code, reason, msg):
                self.send(code, {"kind": "Status", "apiVersion": "v1",
                                 "status": "Failure", "message": msg,
                                 "reason": reason, "code": code})

            def chunk(self, data):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def any(self, method):
                n = int(self.headers.get("Content-Length", "0") or 0)
                raw = self.rfile.read(n) if n else b""
                body = json.loads(raw) if raw else None
                api.requests.append((method, self.path, body))
                if self.headers.get("Authorization") != "Bearer " + api.token:
                    return self.status(401, "Unauthorized", "bad token")
                u = urllib.parse.urlsplit(self.path)
                q = {k: v[0] for k, v in urllib.parse.parse_qs(u.query).items()}
                jobs = f"/apis/batch/v1/namespaces/{api.ns}/jobs"
                pods = f"/api/v1/namespaces/{api.ns}/pods"
                if u.path == jobs and method == "POST":
                    return self.create(body)
                if u.path == jobs and method == "GET":
                    if q.get("watch") in ("1", "true"):
                        return self.watch(q)
                    return self.list_jobs(q)
                if u.path.startswith(jobs + "/") and method == "DELETE":
                    return self.delete(u.path[len(jobs) + 1:], q)
                if u.path == pods and method == "GET":
                    return self.list_pods(q)
                if u.path.startswith(pods + "/") and u.path.endswith("/log"):
                    name = u.path[len(pods) + 1:-4]
                    with api.cv:
                        for j in api.jobs.values():
                            if j["pod"]["metadata"]["name"] == name:
                                out = j.get("out", b"")
                                p = j.get("proc")
                                if p is not None and p.poll() is not None \
                                        and p.stdout:
                                    out = p.stdout.read() or b""
                                    j["out"] = out
                                data = out
                                self.send_response(200)
                                self.send_header("Content-Type", "text/plain")
                                self.send_header("Content-Length",
                                                 str(len(data)))
                                self.end_headers()
                                self.wfile.write(data)
                                return
                    return self.status(404, "NotFound", "no pod")
                return self.status(404, "NotFound", "no route " + u.path)

            def create(self, job):
                name = job["metadata"]["name"]
                tmpl = job["spec"]["template"]["spec"]
                if tmpl.get("restartPolicy") not in ("Never", "OnFailure"):
                    return self.status(422, "Invalid", "restartPolicy")
                with api.cv:
                    if name in api.jobs:
                        return self.status(409, "AlreadyExists",
                                           f'jobs.batch "{name}" already exists')
                    job.setdefault("status", {})["active"] = 1
                    c = tmpl["containers"][0]
                    env = {e["name"]: e["value"] for e in c["env"]}
                    env["PATH"] = "/usr/bin:/bin"
                    j = {"obj": job, "done": False,
                         "deadline": time.time() +
                         job["spec"]["activeDeadlineSeconds"],
                         "pod": {"metadata": {"name": name + "-x7k2p",
                                              "labels": {"job-name": name}},
                                 "status": {"phase": "Running"}}}
                    if api.pending:
                        job["status"]["active"] = 0
                        j["held"] = True
                        j["deadline"] = float("inf")
                        api.jobs[name] = j
                        api._bump("ADDED", job)
                    elif c["command"][-1].startswith("oom:"):
                        j["done"] = True
                        api.jobs[name] = j
                        api._bump("ADDED", job)
                        api._finish(j, 137, "OOMKilled", "Failed",
                                    "BackoffLimitExceeded")
                    else:
                        j["proc"] = subprocess.Popen(
                            c["command"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
                        api.jobs[name] = j
                        api._bump("ADDED", job)
                    return self.send(201, job)

            def matches(self, obj, q):
                sel = q.get("labelSelector")
                if not sel:
                    return True
                labels = obj["metadata"].get("labels", {})
                return all(labels.get(k) == v for k, v in
                           (s.split("=", 1) for s in sel.split(",")))

            def list_jobs(self, q):
                with api.cv:
                    items = [j["obj"] for j in api.jobs.values()
                             if self.matches(j["obj"], q)]
                    if "limit" in q:
                        items = items[:int(q["limit"])]
                    self.send(200, {"kind": "JobList", "apiVersion": "batch/v1",
                                    "metadata": {"resourceVersion": str(api.rv)},
                                    "items": items})

            def list_pods(self, q):
                with api.cv:
                    items = [j["pod"] for j in api.jobs.values()
                             if self.matches(j["pod"], q)]
                    self.send(200, {"kind": "PodList", "items": items})

            def delete(self, name, q):
                with api.cv:
                    j = api.jobs.pop(name, None)
                    if j is None:
                        return self.status(404, "NotFound",
                                           f'jobs.batch "{name}" not found')
                    api.deletes.append((name, q.get("propagationPolicy")))
                    if q.get("propagationPolicy") in ("Background",
                                                      "Foreground"):
                        api._kill(j)
                    api._bump("DELETED", j["obj"])
                    return self.send(200, {"kind": "Status",
                                           "status": "Success"})

            def watch(self, q):
                rv = int(q.get("resourceVersion") or 0)
                timeout = float(q.get("timeoutSeconds", "30"))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                end = time.time() + min(timeout, 30)
                try:
                    with api.cv:
                        if rv < api.oldest_rv:
                            err = {"type": "ERROR", "object": {
                                "kind": "Status", "status": "Failure",
                                "reason": "Expired", "code": 410,
                                "message": "too old resource version"}}
                            self.chunk(json.dumps(err).encode() + b"\n")
                            self.chunk(b"")
                            return
                    while time.time() < end and not api.stop_flag:
                        with api.cv:
                            if rv < api.oldest_rv:
                                break
                            out = [e for e in api.events if e[0] > rv]
                            if not out:
                                api.cv.wait(0.2)
                                continue
                        for erv, etype, obj in out:
                            if etype == "DELETED" or self.matches(obj, q):
                                self.chunk(json.dumps({"type": etype,
                                                       "object": obj}).encode()
                                           + b"\n")
                            rv = erv
                        if q.get("allowWatchBookmarks") == "true":
                            bm = {"type": "BOOKMARK", "object": {
                                "kind": "Job", "apiVersion": "batch/v1",
                                "metadata": {"resourceVersion": str(rv)}}}
                            self.chunk(json.dumps(bm).encode() + b"\n")
                    self.chunk(b"")
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self):
                self.any("GET")

            def do_POST(self):
                self.any("POST")

            def do_DELETE(self):
                self.any("DELETE")
        return H


class _TCP(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
