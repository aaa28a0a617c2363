"""Controller benchmark: sandboxes started and finished per second, and
the time from claim to the agent's first gateway call, for the `local`
backend and (where an engine can run) the `docker` backend, every service
real and the model scripted (one turn: submit). For docker, a loop of
`docker run --rm` of the same image in the same run is the peer; the
ratio is printed. Usage: bench_controller.py [N_LOCAL] [N_DOCKER]."""
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(SRC, "tests", "integration", "sandbox"))

from stacklib import Stack, pb, scripted  # noqa: E402 (sets the path)
from brokerlib import task  # noqa: E402


def run(backend, n, conc, **ctl):
    s = Stack(scripted(("submit", {})), broker_opts={"lease-ms": 60000})
    try:
        ids = s.enqueue([task("bench", n=n)])
        t0 = time.time()
        if ctl.get("gateway_socket", "") is None:
            ctl["gateway_socket"] = s.sock
        proc = s.controller(backend=backend, max_concurrency=conc,
                     create_per_s=10000, create_burst=conc,
                     log_level="warn", tick_ms=10, **ctl)
        left = set(ids)
        while left and time.time() - t0 < 600:
            if proc.poll() is not None:
                sys.exit("controller exited:\n" + s.log()[-2000:])
            q = s.client.ok("query", pb.QueryReq(rollout_ids=list(left)))
            for r in q.rollouts:
                if r.state in (pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED):
                    left.discard(r.rollout_id)
            time.sleep(0.02)
        dt = time.time() - t0
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
        s.close()
        os.system(f"rm -rf {s.dir}")


def show(name, n, dt, ok, lat):
    lat = sorted(lat) or [0]
    print(f"{name:8s} {n} sandboxes ({ok} succeeded) in {dt:.2f} s: "
          f"{n / dt:.1f} sandboxes/s; claim -> first gateway call "
          f"p50 {statistics.median(lat):.0f} ms, "
          f"p95 {lat[int(len(lat) * 0.95) - 1 if len(lat) > 1 else 0]:.0f} ms")
    return n / dt


def main():
    n_local = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    n_docker = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    dt, ok, lat = run("local", n_local, 64)
    show("local", n_local, dt, ok, lat)
    if n_docker <= 0:
        return
    from dockerlib import IMAGE, engine, run_rm_loop
    sock, why = engine()
    if not sock:
        print(f"docker   skipped: {why}")
        return
    dt, ok, lat = run("docker", n_docker, 16, docker_socket=sock,
                      image=IMAGE, gateway_socket=None)
    ours = show("docker", n_docker, dt, ok, lat)
    t0 = time.time()
    run_rm_loop(sock, n_docker)
    peer = n_docker / (time.time() - t0)
    print(f"peer     `docker run --rm` loop of the same image: "
          f"{peer:.2f} containers/s")
    print(f"ratio    docker backend / docker run loop = {ours / peer:.1f}x")


if __name__ == "__main__":
    main()
