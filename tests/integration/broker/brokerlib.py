"""Helpers for the broker's integration tests: start a real lisa-broker on
ephemeral loopback ports, talk to it over real ZeroMQ sockets, and run a
scripted reward worker."""
import os
import signal
import subprocess
import sys
import threading
import time

BIN = os.environ.get("LISA_BINARY_DIR", os.path.join(os.getcwd()))
sys.path.insert(0, os.path.join(BIN, "python"))

import lisa_pb2 as pb  # noqa: E402  (generated at build time)
import zmq  # noqa: E402

BROKER = os.path.join(BIN, "bin", "lisa-broker")
LISA = os.path.join(BIN, "bin", "lisa")
ROLES = ("controller", "gateway", "trainer", "reward", "operator")


def make_keys(directory):
    """A CURVE key set made by `lisa keys` (the launchers' way); returns
    the directory."""
    directory = str(directory)
    subprocess.run([LISA, "keys", directory], check=True,
                   stdout=subprocess.DEVNULL)
    return directory


def curve_client(sock, keys, role):
    """Makes sock a CURVE client with `role`'s key from the key set `keys`
    (nothing when keys is None)."""
    if keys is None:
        return
    import zmq.auth
    pub, sec = zmq.auth.load_certificate(
        os.path.join(keys, role + ".cert_secret"))
    srv, _ = zmq.auth.load_certificate(os.path.join(keys, "broker.cert"))
    sock.curve_publickey, sock.curve_secretkey = pub, sec
    sock.curve_serverkey = srv


class Broker:
    """One lisa-broker process on 127.0.0.1 with its own data directory.

    With `keys` (a key set from make_keys) it runs with CURVE on; without,
    with curve = off, as the tests that are not about the bus's keys need."""

    def __init__(self, data_dir, keys=None, **opts):
        self.data_dir = str(data_dir)
        self.keys = keys
        self.opts = {
            "lease-ms": 5000,
            "tick-ms": 20,
            "worker-hb-ms": 100,
            "worker-liveness": 3,
            "backoff-ms": 20,
            "backoff-max-ms": 100,
            "log-level": "warn",
        }
        if keys:
            self.opts.update({
                "curve": "on",
                "curve-cert": os.path.join(keys, "broker.cert_secret"),
                "curve-clients": os.path.join(keys, "clients")})
        else:
            self.opts["curve"] = "off"
        self.opts.update({k.replace("_", "-"): v for k, v in opts.items()})
        self.proc = None
        self.ep = {}

    def start(self, timeout=10.0):
        ports = os.path.join(self.data_dir, "ports")
        os.makedirs(self.data_dir, exist_ok=True)
        if os.path.exists(ports):
            os.unlink(ports)
        args = [BROKER, "--data", self.data_dir, "--ports-file", ports,
                "--rpc", "tcp://127.0.0.1:*", "--spans", "tcp://127.0.0.1:*",
                "--events", "tcp://127.0.0.1:*",
                "--workers", "tcp://127.0.0.1:*"]
        for k, v in self.opts.items():
            args += ["--" + k, str(v)]
        self.log = open(os.path.join(self.data_dir, "broker.log"), "ab")
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=self.log)
        end = time.time() + timeout
        while time.time() < end:
            if os.path.exists(ports):
                with open(ports) as f:
                    self.ep = dict(l.strip().split("=", 1) for l in f if "=" in l)
                return self
            if self.proc.poll() is not None:
                raise RuntimeError("broker exited with %d" % self.proc.returncode)
            time.sleep(0.01)
        raise RuntimeError("broker did not start")

    def kill(self):
        """SIGKILL: the process gets no chance to flush anything."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.log.close()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
        return self.proc.returncode if self.proc else None

    def log_text(self):
        with open(os.path.join(self.data_dir, "broker.log"), "rb") as f:
            return f.read().decode(errors="replace")


class Client:
    """A DEALER client: one request id per call, replies matched by id."""

    def __init__(self, endpoint, ctx=None, keys=None, role=None):
        self.ctx = ctx or zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDTIMEO, 15000)  # fail, never hang
        curve_client(self.sock, keys, role)
        self.sock.connect(endpoint)
        self.next_id = 1

    def close(self):
        self.sock.close(0)

    def request(self, body, msg):
        req = pb.Request(version=1, request_id=self.next_id, caller="pytest")
        self.next_id += 1
        getattr(req, body).CopyFrom(msg)
        return req

    def send(self, req):
        self.sock.send_multipart([b"", req.SerializeToString()])

    def recv(self, timeout=15.0):
        if not self.sock.poll(int(timeout * 1000)):
            raise TimeoutError("no reply within %.1fs" % timeout)
        frames = self.sock.recv_multipart()
        assert frames[0] == b"" and len(frames) == 2, frames
        rep = pb.Reply()
        rep.ParseFromString(frames[1])
        return rep

    def call(self, body, msg, timeout=15.0):
        req = self.request(body, msg)
        self.send(req)
        while True:
            rep = self.recv(timeout)
            if rep.request_id == req.request_id:
                return rep

    def ok(self, body, msg, timeout=15.0):
        rep = self.call(body, msg, timeout)
        assert rep.code == pb.CODE_OK, (rep.code, rep.error)
        return getattr(rep, body)


def task(text="q", truth="42", n=1, source="math_test", **kw):
    extra = kw.pop("extra_info_json", '{"qa_type": "open", "ground_truth": "42"}')
    return pb.TaskSpec(task_id=kw.pop("task_id", "t-" + text),
                       data_source=source, problem_statement=text,
                       ground_truth=truth, extra_info_json=extra, n=n, **kw)


def enqueue(c, tasks, run="run-1", step=0, **kw):
    rep = c.ok("enqueue", pb.EnqueueReq(run_id=run, step=step, tasks=tasks, **kw))
    return list(rep.rollout_ids)


def claim(c, capacity=10, run=""):
    rep = c.ok("claim", pb.ClaimReq(controller_id="ctl-test", capacity=capacity,
                                    run_id=run))
    return list(rep.attempts)


def rollout(c, rid, **kw):
    rep = c.ok("query", pb.QueryReq(rollout_ids=[rid], **kw))
    return rep


def state_of(c, rid):
    return rollout(c, rid).rollouts[0].state


def wait_state(c, rid, states, timeout=5.0):
    if not isinstance(states, (list, tuple, set)):
        states = [states]
    end = time.time() + timeout
    while time.time() < end:
        s = state_of(c, rid)
        if s in states:
            return s
        time.sleep(0.01)
    raise AssertionError("rollout %s stuck in %s" % (rid, pb.RolloutState.Name(s)))


class RewardWorker(threading.Thread):
    """A scripted reward worker on a DEALER socket.

    Scores exact matches 1.0 (else 0.0), answers CODE_INVALID for data
    source 'unknown', and with die_on_request=True takes the first request
    and then goes silent (no reply, no heartbeats), as a crashed worker."""

    def __init__(self, endpoint, worker_id="w1", die_on_request=False,
                 hb_ms=100, capacity=4, sources=(), keys=None, role="reward"):
        super().__init__(daemon=True)
        self.endpoint = endpoint
        self.keys, self.role = keys, role
        self.worker_id = worker_id
        self.die_on_request = die_on_request
        self.hb_ms = hb_ms
        self.capacity = capacity
        self.sources = list(sources)
        self.stop_flag = threading.Event()
        self.received = []
        self.dead = threading.Event()
        self.disconnects = 0

    def run(self):
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        curve_client(s, self.keys, self.role)
        s.connect(self.endpoint)
        ready = pb.WorkerMsg(version=1, ready=pb.WorkerReady(
            worker_id=self.worker_id, capacity=self.capacity,
            data_sources=self.sources))
        s.send(ready.SerializeToString())
        next_hb = time.time() + self.hb_ms / 1000
        while not self.stop_flag.is_set():
            if s.poll(20):
                m = pb.WorkerMsg()
                m.ParseFromString(s.recv_multipart()[-1])
                kind = m.WhichOneof("body")
                if kind == "disconnect":
                    self.disconnects += 1
                if kind == "request":
                    r = m.request
                    self.received.append(r)
                    if self.die_on_request:
                        self.dead.set()
                        break
                    rep = pb.ScoreReply(job_id=r.job_id)
                    if r.data_source == "unknown":
                        rep.code = pb.CODE_INVALID
                        rep.error = "unknown data source 'unknown'"
                    else:
                        rep.code = pb.CODE_OK
                        rep.reward.value = 1.0 if r.answer.strip() == r.ground_truth else 0.0
                        rep.reward.rule = "exact"
                        rep.reward.extracted = r.answer.strip()
                    s.send(pb.WorkerMsg(version=1, reply=rep).SerializeToString())
            if time.time() >= next_hb:
                s.send(pb.WorkerMsg(version=1, heartbeat=pb.WorkerHeartbeat())
                       .SerializeToString())
                next_hb = time.time() + self.hb_ms / 1000
        s.close(0)

    def stop(self):
        self.stop_flag.set()
        self.join(5)
