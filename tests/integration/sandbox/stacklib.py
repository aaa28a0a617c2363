"""The whole attempt path on one machine, every piece real except the
model: lisa-broker, lisa-reward, lisa-gateway (TCP and a unix socket), a
scripted generation engine (gwlib.Engine: token ids in, token ids out,
the /v1/completions shape of docs/gateway.md) and lisa-controller with a
sandbox backend running the real lisa-agent."""
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "broker"))
sys.path.insert(0, os.path.join(HERE, "..", "gateway"))

from brokerlib import Broker, Client, enqueue, pb, rollout  # noqa: E402
from gwlib import Engine, Gateway, tokenizer, tool_reply  # noqa: E402,F401

BIN = os.path.join(os.environ.get("LISA_BINARY_DIR", "build/default"), "bin")
CONTROLLER = os.path.join(BIN, "lisa-controller")
REWARD = os.path.join(BIN, "lisa-reward")
AGENT = os.path.join(BIN, "lisa-agent")


def turn_of(prompt):
    """How many tool observations the prompt already holds."""
    return tokenizer().decode(prompt, skip_special_tokens=False).count(
        "<tool_response>")


def scripted(*replies):
    """An engine script answering turn k with replies[k] (a text, or a
    (tool name, arguments) pair); past the end it submits."""
    def script(prompt, body):
        k = turn_of(prompt)
        r = replies[k] if k < len(replies) else ("submit", {})
        if isinstance(r, tuple):
            return tool_reply(r[0], r[1]), "stop"
        return r, "stop"
    return script


def wait_for(pred, timeout=20.0, what="condition", step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


def live_with(text):
    """Pids of live (non-zombie) processes whose command line has text."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text.encode() in cmd and state not in ("Z", "X"):
            out.append(int(pid))
    return out


def descendants(root):
    """Live pids below root (by parent links in /proc)."""
    kids = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if rest[0] in ("Z", "X"):
            continue
        kids.setdefault(int(rest[1]), []).append(int(pid))
    out, todo = [], [root]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


class Stack:
    """Starts and stops the pieces; every process is ours, stopped by
    pid. `sandboxes()` lists the local backend's labels."""

    def __init__(self, script, *, broker_opts=None, gw_opts=None,
                 reward=True):
        self.dir = tempfile.mkdtemp(prefix="lisa-sbx-")
        os.chmod(self.dir, 0o755)  # sandboxes run as an unprivileged uid
        self.key = os.urandom(32)
        self.keyfile = os.path.join(self.dir, "token.key")
        with open(self.keyfile, "w") as f:
            f.write(self.key.hex() + "\n")
        os.chmod(self.keyfile, 0o600)
        opts = {"lease-ms": 30000, "max-attempts": 2, "backoff-ms": 10,
                "backoff-max-ms": 20, "token-key": self.keyfile}
        opts.update(broker_opts or {})
        self.broker = Broker(os.path.join(self.dir, "broker"), **opts).start()
        self.client = Client(self.broker.ep["rpc"])
        self.engine = Engine(script)
        self.sock = os.path.join(self.dir, "gw.sock")
        go = {"unix": self.sock, "result-wait": "5s",
              "events": self.broker.ep["events"]}
        go.update(gw_opts or {})
        self.gateway = Gateway(os.path.join(self.dir, "gw"), self.key,
                               engines=self.engine.url,
                               broker=self.broker.ep["rpc"], **go).start()
        wait_for(lambda: os.path.exists(self.sock), what="gateway socket")
        os.chmod(self.sock, 0o777)
        self.procs = []
        self.reward = None
        if reward:
            log = open(os.path.join(self.dir, "reward.log"), "ab")
            self.reward = subprocess.Popen(
                [REWARD, "worker", "--broker", self.broker.ep["workers"],
                 "--heartbeat-ms", "100", "--threads", "2",
                 "--log-level", "warn"], stdout=log, stderr=log)
            self.procs.append(self.reward)
        self.state = os.path.join(self.dir, "state")

    def controller(self, *, backend="local", log="ctl.log", cmd=None,
                   wrap=(), **opts):
        """wrap: a command the controller runs under (it execs it)."""
        args = [*wrap, CONTROLLER, "--controller-id=ctl-sbx",
                f"--backend={backend}",
                f"--broker-rpc={self.broker.ep['rpc']}",
                f"--broker-events={self.broker.ep['events']}",
                "--tick-ms=50", "--verify-ms=300", "--grace-ms=200",
                "--log-level=info", f"--agent={AGENT}"]
        if backend == "local":
            args += [f"--state-dir={self.state}",
                     f"--gateway-socket={self.sock}"]
            if "asan" in BIN:
                opts.setdefault("memory_rlimit", 0)
        if cmd is not None:
            args.append(f"--sandbox-cmd={cmd}")
        args += [f"--{k.replace('_', '-')}={v}" for k, v in opts.items()]
        out = open(os.path.join(self.dir, log), "ab")
        p = subprocess.Popen(args, stdout=out, stderr=out)
        self.procs.append(p)
        return p

    def log(self, name="ctl.log"):
        try:
            with open(os.path.join(self.dir, name), "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def sandboxes(self):
        if not os.path.isdir(self.state):
            return []
        return [f for f in os.listdir(self.state) if f.endswith(".state")]

    def roll(self, rid):
        q = rollout(self.client, rid, with_attempts=True)
        return q.rollouts[0], list(q.attempts)

    def wait_state(self, rid, states, timeout=40.0):
        if not isinstance(states, (list, tuple, set)):
            states = [states]
        return wait_for(lambda: (lambda r: r if r[0].state in states
                                 else None)(self.roll(rid)),
                        timeout=timeout,
                        what=" or ".join(pb.RolloutState.Name(s)
                                         for s in states))

    def enqueue(self, tasks, **kw):
        return enqueue(self.client, tasks, **kw)

    def stop_proc(self, p, sig=signal.SIGTERM):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def dump(self, tail=3000):
        """Prints the tail of every log of the stack."""
        logs = [os.path.join(self.dir, f) for f in sorted(os.listdir(self.dir))
                if f.endswith(".log")]
        logs.append(os.path.join(self.dir, "gw", "gateway.log"))
        logs.append(os.path.join(self.dir, "broker", "broker.log"))
        if os.path.isdir(self.state):
            logs += [os.path.join(self.state, f)
                     for f in sorted(os.listdir(self.state))
                     if f.endswith(".log")]
        for p in logs:
            try:
                with open(p, "rb") as f:
                    txt = f.read()[-tail:].decode(errors="replace")
            except OSError:
                continue
            print(f"===== {os.path.basename(p)}\n{txt}")

    def close(self):
        for p in reversed(self.procs):
            self.stop_proc(p)
        self.gateway.stop()
        self.engine.close()
        self.client.close()
        self.broker.stop()
