"""Prompts as data: lisa-trainer pointed (agent.prompts) at a folder in
llm-in-sandbox's benchmark layout (<data source>/config.yaml) sends each
task the prompts upstream's runner would render from those files (PyYAML
and Python's str.format, as upstream renders them, are the oracle here):
the broker's task view holds them, and the real lisa-agent, fetching its
task through a real lisa-gateway, sends exactly them as its system and
first user message. A data source no folder covers keeps the agent's
built-in prompt; a set with a bad placeholder stops the trainer before it
starts, naming the file."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gateway"))

from test_trainer_service import BIN, TRAINER, model_dir, trainer  # noqa: E402
from brokerlib import Broker, Client, claim  # noqa: E402
import lisa_pb2 as pb  # noqa: E402
from gwlib import Engine, Gateway, tokenizer, tool_reply  # noqa: E402

AGENT = os.path.join(BIN, "bin", "lisa-agent")

# Our own texts, in upstream's layout and with its placeholders and
# escapes: a literal block (backslashes kept), {{ }} braces, directories.
MATH = r"""# Math benchmark (fixture)
dataset: "example/bench"
config: "math"
split: "test"

system_prompt: |-
  You are a careful solver of math problems.

  <TASK>
  Solve the problem with code in {working_dir}; inputs are in {input_dir}.
  </TASK>
  {command_docs}{demo}
  - Put the final answer inside \\boxed{{}} in {output_dir}/answer.txt.

instance_prompt: |-
  <problem>
  {problem_statement}
  </problem>

  Write the answer within \\boxed{{}} to {output_dir}/answer.txt.
  Working directory: {working_dir}

input_dir: "/testbed/documents"
output_dir: "/testbed"
working_dir: "/testbed"
"""

CHEM = """system_prompt: "Chemistry expert. Files: {input_dir}/"
instance_prompt: "Q: {problem_statement} (letter only, {{A..D}})"
"""


def upstream(path, problem):
    """The prompts as llm-in-sandbox's benchmark runner renders them."""
    cfg = yaml.safe_load(open(path))
    wd = cfg.get("working_dir", "/testbed")
    ind = cfg.get("input_dir", "/testbed/documents")
    od = cfg.get("output_dir", "/testbed")

    def dirs(t):
        return (t.replace("{working_dir}", wd).replace("{input_dir}", ind)
                .replace("{output_dir}", od))
    system = dirs(cfg["system_prompt"]).format(command_docs="", demo="")
    inst = cfg.get("instance_prompt", "")
    user = dirs(inst).format(problem_statement=problem) if inst else problem
    return system, user


def write_tasks(path):
    recs = []
    for i, (src, q) in enumerate([("math_mini", "What is {3 + 4}?"),
                                  ("chem", "Which gas is inert?"),
                                  ("biomed", "Which organ pumps blood?")]):
        recs.append({"prompt": [{"role": "user", "content": q}],
                     "data_source": src,
                     "reward_model": {"ground_truth": "7", "style": "rule"},
                     "extra_info": {"id": "p%d" % i, "problem_statement": q}})
    with open(path, "w") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")
    return path


def bench(tmp_path):
    d = tmp_path / "benchmark"
    (d / "math").mkdir(parents=True)
    (d / "chem").mkdir()
    (d / "math" / "config.yaml").write_text(MATH)
    (d / "chem" / "config.yaml").write_text(CHEM)
    return d


@pytest.fixture
def keyed_broker(tmp_path):
    """A broker whose attempt tokens a gateway can check (shared key)."""
    key = os.urandom(32)
    kf = tmp_path / "shared.key"
    kf.write_text(key.hex() + "\n")
    os.chmod(kf, 0o600)
    br = Broker(tmp_path / "broker", token_key=str(kf),
                lease_ms=120000).start()
    procs = []
    yield br, key, procs
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    br.stop()


def test_run_pointed_at_upstream_layout_renders_its_prompts(keyed_broker,
                                                            tmp_path):
    br, key, procs = keyed_broker
    d = bench(tmp_path)
    data = write_tasks(str(tmp_path / "train.jsonl"))
    log = open(tmp_path / "trainer.log", "wb")
    p = trainer(["train", "--model", model_dir(str(tmp_path)), "--train-data",
                 data, "--broker", br.ep["rpc"], "--out",
                 str(tmp_path / "out"), "--threads", "1",
                 "data.train_batch_size=3", "actor_rollout_ref.rollout.n=1",
                 "agent.prompts=" + str(d), "trainer.step_timeout=60s",
                 "engine.max_len=128", "trainer.total_training_steps=1"], log)
    procs.append(p)
    c = Client(br.ep["rpc"])
    atts, end = [], time.time() + 60
    while len(atts) < 3:
        assert p.poll() is None, open(tmp_path / "trainer.log").read()[-3000:]
        assert time.time() < end, "the trainer enqueued nothing"
        atts += claim(c)
        time.sleep(0.05)
    by_src = {a.rollout.data_source: a for a in atts}

    # the broker's view of each task: upstream's rendering, exactly
    for src, f, q in [("chem", d / "chem" / "config.yaml",
                       "Which gas is inert?")]:
        a = by_src[src]
        v = c.ok("get_task", pb.GetTaskReq(rollout_id=a.rollout.rollout_id,
                                           attempt=a.attempt)).task
        assert (v.system_prompt, v.instance_prompt) == upstream(f, q)
    # a data source no folder covers: the agent's built-in prompt
    a = by_src["biomed"]
    v = c.ok("get_task", pb.GetTaskReq(rollout_id=a.rollout.rollout_id,
                                       attempt=a.attempt)).task
    assert v.system_prompt == "" and v.instance_prompt == ""

    # the real agent, through the real gateway, sends exactly them
    system, user = upstream(d / "math" / "config.yaml", "What is {3 + 4}?")
    assert "\\\\boxed{}" in system and "{3 + 4}" in user  # the escapes
    eng = Engine(lambda prompt, body: (tool_reply("submit", {}), "stop"))
    gw = Gateway(tmp_path / "gw", key, engines=eng.url,
                 broker=br.ep["rpc"]).start()
    try:
        tb = tmp_path / "testbed"
        tb.mkdir()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "LISA_GATEWAY_URL": gw.url,
               "LISA_ATTEMPT_TOKEN": by_src["math_mini"].token,
               "LISA_TESTBED": str(tb), "LISA_HEARTBEAT_MS": "200",
               "LISA_RESERVE_S": "0", "LISA_STARTUP_S": "5"}
        r = subprocess.run([AGENT], env=env, capture_output=True, text=True,
                           timeout=120)
        assert eng.requests, r.stderr[-3000:]
        text = tokenizer().decode(eng.requests[0]["prompt"],
                                  skip_special_tokens=False)
        assert text.startswith("<|im_start|>system\n" + system + "\n\n"), \
            text[:2000]
        # the first user message is the instance prompt (the agent adds
        # its turn budget after it)
        assert "<|im_start|>user\n" + user + "\n" in text, text[-2000:]
    finally:
        gw.stop()
        eng.close()
        c.close()


def test_bad_placeholder_stops_the_trainer(tmp_path):
    d = bench(tmp_path)
    (d / "chem" / "config.yaml").write_text(
        "system_prompt: 'Use {tools} here'\n")
    data = write_tasks(str(tmp_path / "train.jsonl"))
    r = subprocess.run([TRAINER, "train", "--model", model_dir(str(tmp_path)),
                        "--train-data", data, "agent.prompts=" + str(d)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "chem/config.yaml" in r.stderr and "{tools}" in r.stderr, r.stderr


def test_shipped_set_by_name(tmp_path):
    """agent.prompts=lisa: the set shipped with lisa (prompts/lisa, found
    beside the binary) loads, one file per data source of the recipe and
    the default, each rendering as upstream's runner would."""
    data = write_tasks(str(tmp_path / "train.jsonl"))
    r = subprocess.run([TRAINER, "check", "--model", model_dir(str(tmp_path)),
                        "--train-data", data, "agent.prompts=lisa"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    shipped = os.path.join(os.environ["LISA_SOURCE_DIR"], "prompts", "lisa")
    files = []
    for root, _, names in os.walk(shipped):
        files += [os.path.join(root, n) for n in names if n == "config.yaml"]
    assert len(files) >= 9
    assert "prompts: %d prompt file(s)" % len(files) in r.stdout + r.stderr
    for f in files:
        system, user = upstream(f, "Q")
        assert system and "{" not in system.replace("{}", ""), f
        assert user.startswith("Q"), f
