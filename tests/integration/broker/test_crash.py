"""SIGKILL the broker in the middle of a stream of acknowledged writes,
restart it, and check that every acknowledged write is there. Repeated at
random points; the seed is printed so a failure can be replayed with
LISA_CRASH_SEED."""
import os
import random
import struct
import time

import pytest

from brokerlib import Broker, Client, claim, enqueue, pb, task

ROUNDS = int(os.environ.get("LISA_CRASH_ROUNDS", "12"))


def span(rid, seq, n=64):
    return pb.Span(rollout_id=rid, attempt=1, seq=seq, prev_seq=seq - 1,
                   appended_ids=list(range(seq, seq + n)),
                   response_ids=list(range(1000, 1000 + n)),
                   response_logprobs=[-0.5] * n, policy_version=1)


class Ledger:
    """What the broker has acknowledged, by kind."""

    def __init__(self):
        self.rollouts = set()
        self.spans = {}  # rid -> set(seq)
        self.policy = 0
        self.cancelled = set()


def verify(c, led):
    ids = sorted(led.rollouts)
    for i in range(0, len(ids), 1000):
        rep = c.call("query", pb.QueryReq(rollout_ids=ids[i:i + 1000]))
        assert rep.code == pb.CODE_OK, "acknowledged rollout lost: " + rep.error
        for r in rep.query.rollouts:
            if r.rollout_id in led.cancelled:
                assert r.state == pb.ROLLOUT_CANCELLED, r.rollout_id
    for rid, seqs in led.spans.items():
        q = c.ok("query", pb.QueryReq(rollout_ids=[rid], with_spans=True))
        have = {s.seq for s in q.spans}
        lost = seqs - have
        assert not lost, "acknowledged spans of %s lost: %s" % (rid, sorted(lost)[:10])
        for s in q.spans:
            assert s == span(rid, s.seq), "span %s/%d came back changed" % (rid, s.seq)
    assert c.ok("policy", pb.PolicyReq()).version >= led.policy


def last_segment(data_dir):
    segs = sorted(f for f in os.listdir(data_dir / "spans") if f.endswith(".log"))
    assert segs, "no span log segment"
    return data_dir / "spans" / segs[-1]


def tear_tail(path, rng):
    """Appends what a crash in the middle of a record write leaves: a
    header whose payload is cut short, a record whose checksum does not
    match its bytes, or plain garbage. Returns the size before."""
    size = path.stat().st_size
    kind = rng.choice(["short", "badcrc", "garbage"])
    body = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
    if kind == "short":
        tail = struct.pack("<III", 0x4C53504E, len(body) + 500, 0) + body
    elif kind == "badcrc":
        tail = struct.pack("<III", 0x4C53504E, len(body), 12345) + body
    else:
        tail = body
    with open(path, "ab") as f:
        f.write(tail)
    return size


@pytest.mark.parametrize("sync", ["full", "normal"])
def test_sigkill_loses_no_acknowledged_write(tmp_path, sync):
    seed = int(os.environ.get("LISA_CRASH_SEED", str(int(time.time() * 1000) % 100000)))
    print("crash test seed", seed, "sync", sync)
    rng = random.Random(seed)
    b = Broker(tmp_path / "data", sync=sync, log_level="error").start()
    led = Ledger()
    total_acks = 0
    try:
        for rnd in range(ROUNDS):
            c = Client(b.ep["rpc"])
            # a fresh claimed attempt per round to hang spans on
            rid = enqueue(c, [task("span-holder-%d" % rnd)], run="crash")[0]
            while True:
                got = [a for a in claim(c, capacity=50, run="crash")
                       if a.rollout.rollout_id == rid]
                if got:
                    break
            led.rollouts.add(rid)
            led.spans[rid] = set()
            seq = 0
            pending = {}
            # kill at a random point, but only once this round has seen a
            # random number of acknowledgements (slow machines ack slowly)
            want_acks = rng.randint(1, 40)
            round_acks0 = total_acks
            kill_at = None
            give_up = time.time() + 30

            def take(rep):
                nonlocal total_acks
                kind, arg = pending.pop(rep.request_id)
                if rep.code != pb.CODE_OK:
                    return
                total_acks += 1
                if kind == "enqueue":
                    led.rollouts.update(rep.enqueue.rollout_ids)
                elif kind == "span":
                    led.spans[rid].update(arg)
                elif kind == "policy":
                    led.policy = max(led.policy, arg)
                elif kind == "cancel":
                    led.cancelled.update(arg)

            while kill_at is None or time.time() < kill_at:
                if kill_at is None and total_acks - round_acks0 >= want_acks:
                    kill_at = time.time() + rng.uniform(0.0, 0.2)
                assert time.time() < give_up, "the broker stopped acknowledging"
                while len(pending) < 24:
                    k = rng.random()
                    if k < 0.45:
                        req = c.request("enqueue", pb.EnqueueReq(
                            run_id="crash", tasks=[task("t%d" % seq, n=2)]))
                        pending[req.request_id] = ("enqueue", None)
                    elif k < 0.9:
                        seqs = [seq, seq + 1, seq + 2]
                        seq += 3
                        req = c.request("span_put", pb.SpanPutReq(
                            spans=[span(rid, s) for s in seqs]))
                        pending[req.request_id] = ("span", seqs)
                    elif k < 0.95 and led.rollouts - led.cancelled - {rid}:
                        victim = rng.choice(sorted(led.rollouts - led.cancelled - {rid}))
                        req = c.request("cancel", pb.CancelReq(rollout_ids=[victim]))
                        pending[req.request_id] = ("cancel", [victim])
                    else:
                        v = led.policy + 1 + len(pending)
                        req = c.request("policy", pb.PolicyReq(set=True, version=v))
                        pending[req.request_id] = ("policy", v)
                    c.send(req)
                while c.sock.poll(2):
                    take(c.recv())
            b.kill()
            # replies that reached our socket before the kill count as acks
            while c.sock.poll(50):
                take(c.recv())
            c.close()
            # a torn record at the span log's tail, as a crash in the
            # middle of a write leaves it: recovery must cut it off
            seg = last_segment(tmp_path / "data")
            before = tear_tail(seg, rng)
            b.start()
            assert seg.stat().st_size <= before, "torn tail not truncated"
            c = Client(b.ep["rpc"])
            verify(c, led)
            c.close()
        assert total_acks >= ROUNDS, "too few writes acknowledged to mean much"
        print("acknowledged writes:", total_acks, "rollouts:", len(led.rollouts),
              "spans:", sum(len(s) for s in led.spans.values()))
    finally:
        b.stop()
