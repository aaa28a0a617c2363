"""Controller benchmark: sandboxes started and finished per second, and
the time from claim to the agent's first gateway call, for the `local`
backend and (where an engine can run) the `docker` backend, every service
real and the model scripted (one turn: submit, answered with token ids
worked out once, so the stand-in model costs next to nothing). The
controller runs with its default tick: exits and ended attempts wake it.
For docker, a loop of `docker run --rm` of the same image, measured in
the same round, is the peer; the ratio is printed. Each backend runs
ROUNDS rounds; the medians are printed last.
Usage: bench_controller.py [N_LOCAL] [N_DOCKER] [ROUNDS]."""
import os
import statistics
import sys
import time

import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(SRC, "tests", "integration", "sandbox"))

from stacklib import Stack, pb, tokenizer  # noqa: E402 (sets the path)
from brokerlib import task  # noqa: E402
from gwlib import tool_reply  # noqa: E402

DONE = (pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED)


def submit_script():
    """The model: every turn is the submit call, as fixed token ids."""
    ids = tokenizer().encode(tool_reply("submit", {}),
                             add_special_tokens=False).ids
    return lambda prompt, body: (list(ids), "stop")


def run(backend, n, conc, **ctl):
    s = Stack(submit_script(), broker_opts={"lease-ms": 60000})
    # A connection the gateway drops at the end is no news here.
    s.engine.server.handle_error = lambda request, address: None
    sub = zmq.Context.instance().socket(zmq.SUB)
    try:
        # The broker's event stream says when each rollout ends.
        sub.connect(s.broker.ep["events"])
        sub.setsockopt(zmq.SUBSCRIBE, b"rollout")
        time.sleep(0.3)
        ids = s.enqueue([task("bench", n=n)])
        if ctl.get("gateway_socket", "") is None:
            ctl["gateway_socket"] = s.sock
        t0 = time.time()
        proc = s.controller(backend=backend, max_concurrency=conc,
                            create_per_s=10000, create_burst=conc,
                            log_level="warn", tick_ms=200, **ctl)
        left = set(ids)
        while left and time.time() - t0 < 600:
            if proc.poll() is not None:
                sys.exit("controller exited:\n" + s.log()[-2000:])
            if not sub.poll(200):
                continue
            while sub.poll(0):
                _, body = sub.recv_multipart()
                ev = pb.Event.FromString(body)
                if ev.WhichOneof("body") == "rollout" and \
                        ev.rollout.state in DONE:
                    left.discard(ev.rollout.rollout_id)
        dt = time.time() - t0
        if backend == "docker":
            # Untimed: the controller removes what is left, so the next
            # round starts on an empty engine.
            from dockerlib import containers
            end = time.time() + 60
            while containers(ctl["docker_socket"], "ctl-sbx") and \
                    time.time() < end:
                time.sleep(0.2)
        q = s.client.ok("query", pb.QueryReq(rollout_ids=ids,
                                             with_attempts=True,
                                             with_spans=True))
        ok = sum(r.state == pb.ROLLOUT_SUCCEEDED for r in q.rollouts)
        claimed = {(a.rollout_id, a.attempt): a.claimed_ms
                   for a in q.attempts}
        lat = [sp.start_ms - claimed[(sp.rollout_id, sp.attempt)]
               for sp in q.spans if sp.seq == 0
               and (sp.rollout_id, sp.attempt) in claimed]
        return dt, ok, lat
    finally:
        sub.close(0)
        s.close()
        os.system(f"rm -rf {s.dir}")


def show(name, n, dt, ok, lat):
    lat = sorted(lat) or [0]
    print(f"{name:8s} {n} sandboxes ({ok} succeeded) in {dt:.2f} s: "
          f"{n / dt:.1f} sandboxes/s; claim -> first gateway call "
          f"p50 {statistics.median(lat):.0f} ms, "
          f"p95 {lat[int(len(lat) * 0.95) - 1 if len(lat) > 1 else 0]:.0f} ms",
          flush=True)
    return n / dt


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    n_local = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    n_docker = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    print(f"load average at start: {load()}", flush=True)
    local, summary = [], []
    for _ in range(rounds if n_local > 0 else 0):
        local.append(show("local", n_local, *run("local", n_local, 64)))
    if local:
        summary.append(f"local    median of {rounds}: "
                       f"{statistics.median(local):.1f} sandboxes/s")
    if n_docker > 0:
        from dockerlib import IMAGE, engine, run_rm_loop
        sock, why = engine()
        if not sock:
            print(f"docker   skipped: {why}")
        else:
            ratios, ours = [], []
            for _ in range(rounds):
                ours.append(show("docker", n_docker,
                                 *run("docker", n_docker, 16,
                                      docker_socket=sock, image=IMAGE,
                                      gateway_socket=None)))
                t0 = time.time()
                run_rm_loop(sock, n_docker)
                peer = n_docker / (time.time() - t0)
                print(f"peer     `docker run --rm` loop of the same image: "
                      f"{peer:.2f} containers/s", flush=True)
                ratios.append(ours[-1] / peer)
            summary.append(f"docker   median of {rounds}: "
                           f"{statistics.median(ours):.1f} sandboxes/s")
            summary.append(f"ratio    docker backend / docker run loop, "
                           f"median of {rounds}: "
                           f"{statistics.median(ratios):.1f}x")
    print("\n".join(summary))
    print(f"load average at end: {load()}")


if __name__ == "__main__":
    main()
