"""A small Python client for the lisa broker.

Needs only Debian's python3-zmq and python3-protobuf, plus lisa_pb2.py,
which the build generates from proto/lisa.proto into <build>/python/
(protoc --python_out). Point LISA_BINARY_DIR at the build directory, or put
that folder on PYTHONPATH.

    from lisa_client import Broker
    b = Broker("tcp://127.0.0.1:7100", key_file="keys/operator.cert_secret",
               broker_cert="keys/broker.cert")
    print(b.call("stats", pb.StatsReq()).stats.queued)

The broker speaks ZeroMQ CURVE and admits only listed keys: key_file is
this client's secret certificate (czmq zcert format, as `lisa keys` writes
it), broker_cert the broker's public one. They default to $LISA_CURVE_CERT
and $LISA_BROKER_CERT; with neither the socket is plain (a broker started
with curve = off).
"""
import os
import sys

try:
    import lisa_pb2 as pb
except ImportError:  # look in the build tree
    _here = os.path.dirname(os.path.abspath(__file__))
    for _d in (os.path.join(os.environ.get("LISA_BINARY_DIR", ""), "python"),
               os.path.join(_here, "..", "build", "default", "python")):
        if os.path.exists(os.path.join(_d, "lisa_pb2.py")):
            sys.path.insert(0, _d)
            break
    import lisa_pb2 as pb  # noqa: E402

import zmq  # noqa: E402
from google.protobuf.message import DecodeError  # noqa: E402
import zmq.auth  # noqa: E402

PROTOCOL_VERSION = 1

# Requests that may be sent again after a timeout (the broker answers a
# repeat without a second effect); see lisa_rpc.h for the same list.
IDEMPOTENT = {"attempt_start", "heartbeat", "attempt_complete", "attempt_fail",
              "get_task", "wait", "query", "cancel", "stats", "span_put",
              "span_status", "engine_register", "engine_list"}


class BrokerError(Exception):
    """The broker answered with a code other than CODE_OK."""

    def __init__(self, reply):
        self.code = reply.code
        self.reply = reply
        super().__init__("%s: %s" % (pb.Code.Name(reply.code), reply.error))


class UndecodableReply(Exception):
    """A reply that is not a valid Reply (a string that is not UTF-8, a
    truncated frame): the call fails at once instead of timing out."""
def curve_keys(key_file=None, broker_cert=None):
    """(public, secret, broker public) keys for a CURVE client, from the
    files given or $LISA_CURVE_CERT / $LISA_BROKER_CERT; None when neither
    is set (a plain bus)."""
    key_file = key_file or os.environ.get("LISA_CURVE_CERT") or None
    broker_cert = broker_cert or os.environ.get("LISA_BROKER_CERT") or None
    if not key_file and not broker_cert:
        return None
    if not key_file or not broker_cert:
        raise ValueError("CURVE needs both a key file (this client's secret "
                         "certificate) and the broker's public certificate")
    public, secret = zmq.auth.load_certificate(key_file)
    if not secret:
        raise ValueError("%s holds no secret key" % key_file)
    server, _ = zmq.auth.load_certificate(broker_cert)
    return public, secret, server


def apply_curve(sock, keys):
    """Makes sock a CURVE client with keys from curve_keys (before
    connecting); nothing for None."""
    if keys:
        sock.curve_publickey, sock.curve_secretkey, sock.curve_serverkey = keys


def broker_endpoint(flag=None):
    return flag or os.environ.get("LISA_BROKER") or "tcp://127.0.0.1:7100"


def events_endpoint(flag=None, broker=None):
    if flag or os.environ.get("LISA_BROKER_EVENTS"):
        return flag or os.environ["LISA_BROKER_EVENTS"]
    host, port = broker_endpoint(broker).rsplit(":", 1)
    return "%s:%d" % (host, int(port) + 2)


class Broker:
    """DEALER client with request ids and a deadline per call (Lazy Pirate:
    on a timeout the socket is recreated and idempotent requests are sent
    again, at most `tries` times)."""

    def __init__(self, endpoint=None, caller="py-client", timeout=10.0, tries=3,
                 key_file=None, broker_cert=None):
        self.endpoint = broker_endpoint(endpoint)
        self.keys = curve_keys(key_file, broker_cert)
        self.caller = caller
        self.timeout = float(os.environ.get("LISA_CLIENT_TIMEOUT", timeout))
        self.tries = tries
        self.ctx = zmq.Context.instance()
        self.sock = None
        self.next_id = 1
        self._connect()

    def _connect(self):
        if self.sock is not None:
            self.sock.close(0)
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        # A DEALER with no completed connection blocks in send (a broker
        # that refuses this client's key never completes one): bounded.
        self.sock.setsockopt(zmq.SNDTIMEO, max(1, int(self.timeout * 1000)))
        apply_curve(self.sock, self.keys)
        self.sock.connect(self.endpoint)

    def close(self):
        self.sock.close(0)

    def call(self, body, msg, timeout=None, check=True):
        """Sends Request.<body> = msg and returns the Reply."""
        timeout = self.timeout if timeout is None else timeout
        req = pb.Request(version=PROTOCOL_VERSION, request_id=self.next_id,
                         caller=self.caller)
        self.next_id += 1
        getattr(req, body).CopyFrom(msg)
        data = req.SerializeToString()
        idempotent = body in IDEMPOTENT or (
            body == "enqueue" and msg.idempotency_key) or (
            body == "policy" and not msg.set) or (body == "export" and not msg.prune)
        for attempt in range(self.tries if idempotent else 1):
            if attempt:
                self._connect()
            try:
                self.sock.send_multipart([b"", data])
            except zmq.Again:
                continue  # no connection within the timeout: no reply
            rep = self._wait(req.request_id, timeout)
            if rep is not None:
                if check and rep.code != pb.CODE_OK:
                    raise BrokerError(rep)
                return rep
        raise TimeoutError("no reply from %s to %s within %.1fs"
                           % (self.endpoint, body, timeout))

    def _wait(self, request_id, timeout):
        import time
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000) + 1):
                return None
            frames = self.sock.recv_multipart()
            rep = pb.Reply()
            try:
                rep.ParseFromString(frames[-1])
            except DecodeError as e:
                # e.g. a string that is not UTF-8: fail now, loudly, rather
                # than wait out the timeout or hand on half a record
                raise UndecodableReply(
                    "a reply from %s could not be decoded (%s); the broker "
                    "holds a record this client cannot read"
                    % (self.endpoint, e)) from e
            if rep.request_id == request_id:
                return rep


def subscribe(endpoint, topics=("",), key_file=None, broker_cert=None):
    """A SUB socket on the broker's events."""
    s = zmq.Context.instance().socket(zmq.SUB)
    s.setsockopt(zmq.LINGER, 0)
    apply_curve(s, curve_keys(key_file, broker_cert))
    for t in topics:
        s.setsockopt(zmq.SUBSCRIBE, t.encode())
    s.connect(endpoint)
    return s


def read_event(sock, timeout_ms):
    """(topic, Event) or None when nothing came within timeout_ms."""
    if not sock.poll(timeout_ms):
        return None
    topic, data = sock.recv_multipart()
    ev = pb.Event()
    ev.ParseFromString(data)
    return topic.decode(), ev


def sequences(spans):
    """Rebuilds token sequences from linearly stored spans: each span is
    its parent's sequence + appended ids (mask 0) + response ids (mask 1)."""
    built, parents = {}, set()
    for s in sorted(spans, key=lambda s: s.seq):
        ids, mask, lp, plen = [], [], [], 0
        if s.prev_seq >= 0 and s.prev_seq in built:
            ids, mask, lp, plen = [list(x) if isinstance(x, list) else x
                                   for x in built[s.prev_seq]]
            parents.add(s.prev_seq)
        ids = ids + list(s.appended_ids)
        mask = mask + [0] * len(s.appended_ids)
        lp = lp + [0.0] * len(s.appended_ids)
        if s.prev_seq < 0:
            plen = len(ids)
        ids += list(s.response_ids)
        mask += [1] * len(s.response_ids)
        lp += list(s.response_logprobs)
        built[s.seq] = (ids, mask, lp, plen)
    return [{"last_seq": k, "prompt_len": v[3], "token_ids": v[0],
             "loss_mask": v[1], "logprobs": v[2]}
            for k, v in sorted(built.items()) if k not in parents]
