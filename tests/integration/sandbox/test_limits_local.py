"""Limits of `local` sandboxes, tried from inside by the model's own
commands through the real lisa-agent, every service real and only the
model scripted:
  - the agent cannot be read or traced: no /proc/<pid>/mem, environ or
    fds of it, no strace/gdb/ptrace, no process_vm_readv, no nested user
    namespace; the agent is not even in the commands' PID namespace;
  - a gigabyte written to /dev/shm, /, /tmp or /testbed stops at the
    sandbox's disk limit (the root is read-only);
  - a fork bomb in one sandbox leaves a neighbour's rollout, running at
    the same time, unaffected (each sandbox has a uid of its own);
  - what the model writes towards the agent's output never grows the
    host's log of the attempt past its cap;
  - 10,000 connections opened from inside a sandbox to the gateway's
    socket leave another attempt's calls served promptly."""
import os
import threading
import time

from brokerlib import task
from stacklib import pb, scripted, tokenizer, wait_for


def observations(s, word):
    """The tool observations the model saw in the rollout whose problem
    holds `word`, in order."""
    best = []
    for body in s.engine.requests:
        text = tokenizer().decode(body["prompt"], skip_special_tokens=False)
        if word in text:
            obs = text.split("<tool_response>")[1:]
            if len(obs) > len(best):
                best = obs
    return best


def by_word(**commands):
    """A model that runs commands[word] (a list) for the rollout whose
    problem holds `word`, then answers and submits."""
    def script(prompt, body):
        text = tokenizer().decode(prompt, skip_special_tokens=False)
        word = next(w for w in commands if f"task-{w}" in text)
        steps = [("execute_bash", {"command": c}) for c in commands[word]]
        steps += [("execute_bash",
                   {"command": "echo '\\boxed{42}' > answer.txt"}),
                  ("submit", {})]
        return scripted(*steps)(prompt, body)
    return script


def done(s, rid, timeout=60):
    r, atts = s.wait_state(rid, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=timeout)
    assert r.state == pb.ROLLOUT_SUCCEEDED, \
        [(a.failure_kind, a.reason) for a in atts]
    assert len(atts) == 1, atts
    return r


PROBE = r"""
me=$$
for p in /proc/[0-9]*; do
  n=${p#/proc/}
  [ "$n" = "$me" ] || [ "$n" = self ] && continue
  c=$(cat $p/comm 2>/dev/null)
  head -c 1 $p/mem >/dev/null 2>&1 && echo "MEM-READ $n $c"
  grep -qa LISA_ATTEMPT_TOKEN $p/environ 2>/dev/null && echo "ENV-READ $n $c"
  ls $p/fd/ >/dev/null 2>&1 && echo "FD-LISTED $n $c"
done
echo "procs=$(ls /proc | grep -c '^[0-9][0-9]*$')"
echo "cmd-ppid=$(awk '/^PPid/ {print $2}' /proc/$$/status)"
timeout 5 strace -p 1 -e trace=none 2>&1 | head -n 2
timeout 5 gdb -q -batch -p 1 2>&1 | grep -i -m 2 -e ptrace -e attach
python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(16, 1, 0, 0)
print("ptrace-attach", r, os.strerror(ctypes.get_errno()))
buf = ctypes.create_string_buffer(8)
class iov(ctypes.Structure):
    _fields_ = [("b", ctypes.c_void_p), ("n", ctypes.c_size_t)]
a = iov(ctypes.addressof(buf), 8)
r = libc.process_vm_readv(1, ctypes.byref(a), 1, ctypes.byref(a), 1, 0)
print("vm-readv", r, os.strerror(ctypes.get_errno()))
'
unshare -Ur id 2>&1 | head -n 1
echo PROBED
"""


def test_the_model_cannot_read_or_trace_the_agent(make_stack):
    s = make_stack(by_word(probe=[PROBE]))
    (rid,) = s.enqueue([task("task-probe")])
    s.controller()
    done(s, rid)
    (obs, *_) = observations(s, "task-probe")
    assert "PROBED" in obs, obs
    for word in ("MEM-READ", "ENV-READ", "FD-LISTED"):
        assert word not in obs, obs
    # The commands' own PID namespace: its init and the probe's processes,
    # and the command's parent (the agent) is outside it, so its PPid is 0
    # (in the agent's namespace it would be the agent, pid 1).
    assert int(obs.split("procs=", 1)[1].split()[0]) < 8, obs
    assert "cmd-ppid=0\n" in obs, obs
    assert "ptrace-attach -1 Operation not permitted" in obs, obs
    assert "vm-readv -1 Operation not permitted" in obs, obs
    assert "Operation not permitted" in obs.split("procs=", 1)[1], obs
    assert "uid=0" not in obs, obs  # no nested user namespace


FILL = r"""
for d in /dev/shm / /tmp /testbed; do
  head -c 1G /dev/zero > $d/big 2>/dev/null
  echo "fill $d $(stat -c %s $d/big 2>/dev/null || echo none)"
  rm -f $d/big
done
"""


def test_writes_stop_at_the_disk_limit(make_stack):
    s = make_stack(by_word(fill=[FILL]))
    disk = 64 << 20
    lim = pb.Limits(disk_bytes=disk, deadline_ms=40000)
    (rid,) = s.enqueue([task("task-fill", limits=lim)])
    s.controller()
    done(s, rid)
    (obs, *_) = observations(s, "task-fill")
    got = {}
    for line in obs.splitlines():
        if line.startswith("fill "):
            _, d, size = line.split()
            got[d] = size
    assert set(got) == {"/dev/shm", "/", "/tmp", "/testbed"}, obs
    assert got["/"] == "none", obs  # the root is read-only
    total = 0
    for d in ("/dev/shm", "/tmp", "/testbed"):
        assert got[d] != "none", obs
        total += int(got[d])
        assert int(got[d]) <= disk, (d, got[d])
    # Together the writable mounts hold no more than the disk limit.
    assert total <= disk, got
    assert int(got["/testbed"]) >= disk // 2, got


def uid_of(s, rid):
    """The host uid the controller gave the sandbox of rollout rid."""
    for line in s.log().splitlines():
        if "local: started" in line and f"for rollout {rid} " in line:
            return int(line.split("uid ", 1)[1].split(")", 1)[0])
    return None


def count_uid(uid):
    n = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        n += int(line.split()[1]) == uid
                        break
        except OSError:
            pass
    return n


def test_fork_bomb_leaves_a_neighbour_unaffected(make_stack):
    bomb_started = threading.Event()
    inner = by_word(
        # The bomb churns at its process limit while `sleep` (started
        # first) keeps the command, and so the bomb, going for 15 s.
        bomb=["sleep 15 & s=$!; b(){ b|b& }; b; wait $s"],
        # The neighbour forks for about two seconds, so that the bomb,
        # whose count churns below its limit, is looked at many times
        # while the neighbour works.
        neighbour=["for i in $(seq 1 200); do /bin/true || "
                   "echo FORK-FAILED; sleep 0.01; done; "
                   "sh -c 'echo forks-ok'"])

    def script(prompt, body):
        text = tokenizer().decode(prompt, skip_special_tokens=False)
        if "task-bomb" in text and "<tool_response>" not in text:
            bomb_started.set()
        return inner(prompt, body)
    s = make_stack(script)
    lim = pb.Limits(pids=64, deadline_ms=60000)
    (bomb,) = s.enqueue([task("task-bomb", limits=lim)])
    s.controller(max_concurrency=2)
    assert bomb_started.wait(20)
    uid = wait_for(lambda: uid_of(s, bomb), what="bomb's uid")
    # The bomb holds (about) every process its sandbox may have.
    wait_for(lambda: count_uid(uid) >= 48, timeout=10, what="bomb at limit")
    # while its command surely still runs (well inside the 15 s; the
    # bomb churns, so a look can find it below the limit)
    live_until = time.time() + 10
    (neighbour,) = s.enqueue([task("task-neighbour", limits=lim)])
    peak, peak_live = 0, 0
    while s.roll(neighbour)[0].state not in (pb.ROLLOUT_SUCCEEDED,
                                             pb.ROLLOUT_FAILED):
        n = count_uid(uid)
        peak = max(peak, n)
        if time.time() < live_until:
            peak_live = max(peak_live, n)
        time.sleep(0.01)
    done(s, neighbour)
    assert uid_of(s, neighbour) != uid
    obs = observations(s, "task-neighbour")
    assert "forks-ok" in obs[0] and "FORK-FAILED" not in obs[0], obs[0]
    # The bomb was at its limit while the neighbour started and worked,
    # and never above it.
    assert 48 <= peak_live and peak <= 64, (peak_live, peak)
    # Its own agent survived the bomb and posted a result.
    r, atts = s.wait_state(bomb, [pb.ROLLOUT_SUCCEEDED, pb.ROLLOUT_FAILED],
                           timeout=60)
    assert r.state == pb.ROLLOUT_SUCCEEDED, atts


FLOOD = r"""
for f in /proc/[0-9]*/fd/1 /proc/[0-9]*/fd/2; do
  case $f in /proc/$$/*|/proc/self/*) continue ;; esac
  head -c 20000000 /dev/zero > $f 2>/dev/null && echo "WROTE $f"
done
echo FLOODED
"""


def test_the_host_log_of_an_attempt_stays_under_its_cap(make_stack):
    s = make_stack(by_word(flood=[FLOOD]))
    cap = 256 << 10
    biggest = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            if os.path.isdir(s.state):
                for f in os.listdir(s.state):
                    if f.endswith(".log"):
                        try:
                            size = os.path.getsize(os.path.join(s.state, f))
                        except OSError:
                            continue
                        biggest[0] = max(biggest[0], size)
            time.sleep(0.01)
    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        (rid,) = s.enqueue([task("task-flood")])
        s.controller(log_bytes=cap)
        done(s, rid)
    finally:
        stop.set()
        t.join()
    (obs, *_) = observations(s, "task-flood")
    assert "FLOODED" in obs, obs
    # The agent's output is out of the model's reach.
    assert "WROTE" not in obs, obs
    assert 0 < biggest[0] <= cap + 512, biggest[0]


CONN_FLOOD = r"""
cat > /tmp/flood.py <<'PY'
import os, socket, time
path = os.environ.get("LISA_GATEWAY_SOCKET", "/run/lisa/gateway.sock")
n, k = 10000, 5  # five processes: a sandbox's descriptor limit is 4096
call = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        b"Authorization: Bearer not-a-token\r\n"
        b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
kids = []
for j in range(k):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        ok = bad = 0
        held = []
        for i in range(j, n, k):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            try:
                s.connect(path)
                ok += 1
            except OSError:
                bad += 1
            try:
                if i % 10 == 0:
                    s.sendall(call)
                elif i % 10 == 1:
                    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHo")
            except OSError:
                pass  # displaced before it could write
            held.append(s)
        os.write(w, b"%d %d\n" % (ok, bad))
        time.sleep(4)  # hold them while the other attempt calls
        os._exit(0)
    os.close(w)
    kids.append((pid, r))
ok = bad = 0
for pid, r in kids:
    a, b = os.read(r, 64).split()
    ok, bad = ok + int(a), bad + int(b)
    os.waitpid(pid, 0)
print("conn-flood connected=%d failed=%d" % (ok, bad))
PY
python3 /tmp/flood.py
"""


def flood_beside_another_attempt(make_stack, start, where):
    """A command in a sandbox (its controller started by start(stack))
    opens 10,000 connections to the gateway's socket as the sandbox sees
    it (/run/lisa/gateway.sock), from five processes (a sandbox may hold 4096 descriptors each): most idle,
    some trickling headers, some calls with a made-up token. Another
    attempt (claimed by the test) calls the same gateway socket meanwhile,
    until the flooding attempt has ended, and every call is served,
    promptly. The flood may cost its own attempt its next model call (in
    runs here its agent's calls right after the command were cut, broken
    pipe, while the gateway closed the flood's connections): that attempt
    then fails, and is not retried here."""
    from brokerlib import claim
    from gwlib import UnixHTTP, mint
    from test_edges import metric
    import json

    flood_started = threading.Event()
    inner = by_word(connflood=[CONN_FLOOD])

    def script(prompt, body):
        text = tokenizer().decode(prompt, skip_special_tokens=False)
        if "task-connflood" not in text:
            return "ok", "stop"  # the other attempt's calls
        if "<tool_response>" not in text:
            flood_started.set()
        return inner(prompt, body)
    s = make_stack(script, broker_opts={"lease-ms": 600000,
                                        "max-attempts": 1},
                   gw_opts={"max-connections": 2048,
                            "request-timeout": "20s"})
    # The other attempt: claimed before any controller runs, so that its
    # token is the test's to use.
    (other,) = s.enqueue([task("task-other")])
    (att,) = claim(s.client)
    tok = mint(s.key, other, att.attempt)
    (rid,) = s.enqueue([task("task-connflood",
                             limits=pb.Limits(deadline_ms=90000))])
    start(s)
    assert flood_started.wait(60)

    req = json.dumps({"messages": [{"role": "user", "content": "x"}]})
    times = []

    def one():
        t = time.time()
        c = UnixHTTP(s.sock, timeout=30)
        c.request("POST", "/v1/chat/completions", body=req,
                  headers={"Authorization": "Bearer " + tok,
                           "Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        c.close()
        assert r.status == 200, r.status
        times.append(time.time() - t)

    def ended():
        return s.roll(rid)[0].state in (pb.ROLLOUT_SUCCEEDED,
                                        pb.ROLLOUT_FAILED)
    gw = s.gateway
    # calls while the flood builds up, is held and is torn down, until
    # the flooding attempt has ended
    wait_for(lambda: metric(gw, "lisa_gateway_http_connections_open") > 100,
             timeout=30, what="flood under way")
    t0 = time.time()
    while len(times) < 20 or len(times) % 10 or not ended():
        one()
        assert time.time() - t0 < 120, "the flooding attempt did not end"
    flood_s = time.time() - t0
    evicted = metric(gw, "lisa_gateway_http_refusals", '{reason="evicted"}')
    refused = metric(gw, "lisa_gateway_http_refusals", '{reason="refused"}')
    median = sorted(times)[len(times) // 2]
    r, atts = s.roll(rid)
    obs = observations(s, "task-connflood")
    counts = [ln for ln in "".join(obs).splitlines()
              if ln.startswith("conn-flood ")]
    print("flood of 10000 connections from a %s sandbox (%.1fs; its "
          "attempt %s, %s): the other attempt's %d calls: median %.3fs, "
          "slowest %.3fs; evicted %d, refused %d" % (
              where, flood_s, pb.RolloutState.Name(r.state),
              counts[0] if counts else "no count",
              len(times), median, max(times), evicted, refused))
    # the flood reached the gateway: it displaced more than a whole
    # connection table (2048) of connections (how many of the 10,000 get
    # past the socket's listen queue depends on how fast the gateway
    # accepts, that is on the machine's load: 4,000 to 7,700 were
    # displaced in runs here)
    assert evicted + refused > 2048, (evicted, refused)
    if counts:  # the command's own count, when its agent could post it
        got = dict(kv.split("=") for kv in counts[0].split()[1:])
        assert int(got["connected"]) + int(got["failed"]) == 10000, got
    assert median < 2.0 and max(times) < 10.0, (median, max(times))
    s.client.ok("cancel", pb.CancelReq(rollout_ids=[other]))


def test_connection_flood_from_a_sandbox_leaves_another_attempt_served(
        make_stack):
    flood_beside_another_attempt(
        make_stack, lambda s: s.controller(max_concurrency=1), "local")
