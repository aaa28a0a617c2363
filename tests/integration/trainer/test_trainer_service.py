"""lisa-trainer end to end: a real lisa-broker, a real lisa-reward worker and
lisa-trainer with a tiny Qwen3 model; a scripted controller + agent claims
the rollouts through the broker RPC, calls the trainer's /v1/completions
itself (two turns with an observation between them), pushes the spans and
completes the attempts, so full training steps run: metrics lines appear,
the policy version bumps, checkpoints are written, load back (in
lisa-trainer serve, through trn_model_load) and resume. A second test kills
the broker in the middle of a step: the trainer must exit with a clear error
within its deadline."""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("LISA_SOURCE_DIR", os.path.join(HERE, "..", "..", ".."))
BIN = os.environ.get("LISA_BINARY_DIR", os.path.join(SRC, "build", "default"))
sys.path.insert(0, os.path.join(HERE, "..", "broker"))
sys.path.insert(0, os.path.join(SRC, "clients"))
os.environ.setdefault("LISA_BINARY_DIR", BIN)

import pytest  # noqa: E402
from brokerlib import Broker  # noqa: E402
import lisa_client  # noqa: E402
from lisa_client import pb  # noqa: E402

TRAINER = os.path.join(BIN, "bin", "lisa-trainer")
REWARD = os.path.join(BIN, "bin", "lisa-reward")
TINY = os.path.join(SRC, "tests", "fixtures", "qwen3-tiny", "tied")


def model_dir(tmp):
    d = os.path.join(tmp, "model")
    os.makedirs(d)
    for f in ("config.json", "model.safetensors", "generation_config.json"):
        shutil.copy(os.path.join(TINY, f), d)
    # a tokenizer file travels along with checkpoints
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"model_max_length": 256}, f)
    return d


def write_data(path, n, source="math_toy", jsonl=True):
    recs = []
    for i in range(n):
        recs.append({
            "prompt": [{"role": "user", "content": "placeholder"}],
            "data_source": source,
            "reward_model": {"ground_truth": "7", "style": "rule"},
            "extra_info": {"id": "q%d" % i,
                           "problem_statement": "What is 3 + 4? (%d)" % i,
                           "input_files": json.dumps({"notes.txt": "3 and 4"}),
                           "qa_type": "open"}})
    with open(path, "w") as f:
        if jsonl:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        else:
            json.dump(recs, f)
    return path


def post(url, body, timeout=30):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class Agent(threading.Thread):
    """Scripted controller + agent: claims attempts, runs two turns against
    the engine the broker lists, pushes the spans, completes the attempt
    with answer "7" for even group indices and "3" for odd ones."""

    running = []  # every agent started; the stack fixture stops them

    def __init__(self, rpc, fail_task=None, overlong_idx=None,
                 temperature=1.0):
        super().__init__(daemon=True)
        Agent.running.append(self)
        self.rpc = rpc
        # what the engine samples with and the spans record (as a
        # gateway records it); the run's default is 1.0
        self.temperature = temperature
        self.fail_task = fail_task  # index 1 of this task fails (agent)
        # rollouts of this group index end at the turn limit
        self.overlong_idx = overlong_idx
        self.stop = threading.Event()
        self.done = 0
        self.versions = set()
        self.errors = []

    def engine_url(self, b):
        rep = b.call("engine_list", pb.EngineListReq())
        urls = [e.url for e in rep.engine_list.engines if e.up and not e.paused]
        return urls[0] if urls else None

    def run(self):
        b = lisa_client.Broker(self.rpc, caller="test-agent", timeout=5)
        try:
            while not self.stop.is_set():
                url = self.engine_url(b)
                if not url:
                    time.sleep(0.05)
                    continue
                rep = b.call("claim", pb.ClaimReq(controller_id="ctl-test",
                                                  capacity=8))
                if not rep.claim.attempts:
                    time.sleep(0.05)
                    continue
                for a in rep.claim.attempts:
                    self.play_retry(b, url, a)
        except Exception as e:  # surfaced by the test
            self.errors.append(repr(e))
        finally:
            b.close()

    def play_retry(self, b, url, a):
        # an engine that just went away: look it up again (as a gateway
        # would); the attempt starts over on the live engine
        for _ in range(50):
            try:
                return self.play(b, url, a)
            except urllib.error.URLError:
                time.sleep(0.1)
                url = self.engine_url(b) or url
        return self.play(b, url, a)

    def play(self, b, url, a):
        rid, att = a.rollout.rollout_id, a.attempt
        idx = a.rollout.index_in_group
        b.call("attempt_start", pb.AttemptStartReq(rollout_id=rid, attempt=att,
                                                   sandbox_id="sb"))
        prompt = [1, 2, 3, 4, 5]
        spans, seq = [], []
        for turn in range(2):
            appended = prompt if turn == 0 else [9, 10, 11]
            full = seq + appended
            out = post(url + "/v1/completions", {
                "model": "lisa", "prompt": full, "max_tokens": 4,
                "logprobs": 1, "return_token_ids": True,
                "temperature": self.temperature,
                "stop_token_ids": [0]})
            ch = out["choices"][0]
            ids = ch["token_ids"]
            lps = ch["logprobs"]["token_logprobs"]
            assert len(ids) == len(lps) and all(x <= 0 for x in lps)
            self.versions.add(out["policy_version"])
            spans.append(pb.Span(
                rollout_id=rid, attempt=att, seq=turn,
                prev_seq=turn - 1, segment=0, appended_ids=appended,
                response_ids=ids, response_logprobs=lps,
                finish_reason=ch["finish_reason"],
                policy_version=out["policy_version"], engine_id="e",
                prompt_len=len(full),
                sampling=pb.Sampling(temperature=self.temperature,
                                     top_p=1.0)))
            seq = full + ids
        b.call("span_put", pb.SpanPutReq(spans=spans))
        if a.rollout.task_id == self.fail_task and idx == 1:
            b.call("attempt_fail", pb.AttemptFailReq(
                rollout_id=rid, attempt=att, kind=pb.FAILURE_AGENT,
                reason="scripted agent failure"))
            self.done += 1
            return
        b.call("attempt_complete", pb.AttemptCompleteReq(
            rollout_id=rid, attempt=att, expected_spans=2,
            result=pb.AttemptResult(
                answer="7" if idx % 2 == 0 else "3", turns=2,
                end_reason="turn_limit" if idx == self.overlong_idx
                else "submit")))
        self.done += 1


@pytest.fixture
def stack(tmp_path):
    procs = []
    br = Broker(tmp_path / "broker").start()
    rw = subprocess.Popen([REWARD, "worker", "--broker", br.ep["workers"],
                           "--log-level", "warn"],
                          stdout=subprocess.DEVNULL,
                          stderr=open(tmp_path / "reward.log", "wb"))
    procs.append(rw)
    yield br, procs
    # A test that failed early leaves its agent running; stopped here, it
    # cannot claim the next test's attempts (its broker may get the same
    # ephemeral port).
    while Agent.running:
        a = Agent.running.pop()
        a.stop.set()
        if a.is_alive():
            a.join(timeout=30)
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    br.stop()


def wait_trainer(p, agent, timeout):
    """Waits for the trainer to exit; fails at once if the agent broke."""
    end = time.time() + timeout
    while time.time() < end:
        if agent is not None:
            assert not agent.errors, agent.errors
        if p.poll() is not None:
            return p.returncode
        time.sleep(0.1)
    raise AssertionError("trainer still running after %ss" % timeout)


def trainer(args, log):
    return subprocess.Popen([TRAINER] + args, stdout=log, stderr=log)


def tensor_bytes(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        f.read(n)
        return f.read()


def test_training_steps_with_real_broker_and_reward(stack, tmp_path):
    br, procs = stack
    model = model_dir(str(tmp_path))
    train = write_data(str(tmp_path / "train.jsonl"), 4)
    os.makedirs(tmp_path / "val")
    write_data(str(tmp_path / "val" / "test_verl.json"), 2,
               source="math_val", jsonl=False)
    out = str(tmp_path / "out")
    agent = Agent(br.ep["rpc"])
    agent.start()
    common = ["--broker", br.ep["rpc"], "--engine-listen", "127.0.0.1:0",
              "--out", out, "--threads", "1",
              "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
              "trainer.save_freq=1", "trainer.test_freq=2",
              "actor_rollout_ref.actor.optim.lr=1e-3",
              "algorithm.adv_estimator=grpo", "trainer.step_timeout=60s",
              "engine.max_len=128", "engine.register_ttl=1s",
              "trainer.experiment_name=run-t"]
    log = open(tmp_path / "trainer.log", "wb")
    p = trainer(["train", "--model", model, "--train-data", train,
                 "--val-data", str(tmp_path / "val"),
                 "trainer.total_training_steps=2"] + common, log)
    procs.append(p)
    rc = wait_trainer(p, agent, 150)
    text = open(tmp_path / "trainer.log").read()
    assert rc == 0, text[-3000:]

    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    tr = [m for m in lines if m["kind"] == "train"]
    va = [m for m in lines if m["kind"] == "val"]
    assert [m["step"] for m in tr] == [1, 2]
    for m in tr:
        assert m["rollouts/total"] == 4 and m["rollouts/succeeded"] == 4
        assert m["reward/math_toy/mean"] == pytest.approx(0.5)
        assert m["reward/mean"] == pytest.approx(0.5)
        assert m["advantage/max"] > 0 > m["advantage/min"]
        assert m["batch/sequences"] == 4 and m["batch/tokens"] > 0
        assert m["actor/grad_norm"] > 0 and m["update/skipped"] == 0
        # the engine's log-probs are the trainer's (same weights, T = 1)
        assert m["rollout/logp_diff_max"] < 1e-3, m
        assert m["time/rollout_s"] > 0 and m["time/train_s"] > 0
        # the engine over this step alone
        assert m["engine/step/prompt_tokens"] > 0, m
        assert 0 <= m["engine/step/cached_tokens"] <= m["engine/step/prompt_tokens"]
        assert 0 <= m["engine/step/prefix_hit_rate"] <= 1
        assert m["engine/step/decode_steps"] > 0 and m["engine/step/decode_ms"] > 0
        assert m["engine/step/mixed_steps"] > 0 and m["engine/step/mixed_ms"] > 0
    # the per-step counts add up to the engine's totals
    assert (tr[0]["engine/step/prompt_tokens"] + tr[1]["engine/step/prompt_tokens"]
            <= tr[1]["engine/prompt_tokens"])
    assert tr[1]["engine/step/prompt_tokens"] < tr[1]["engine/prompt_tokens"]
    assert tr[1]["policy_version_after"] == tr[0]["policy_version_after"] + 1
    assert len(va) == 1 and va[0]["step"] == 2
    assert "val/reward/math_val/mean" in va[0]
    # completions were sampled by two policies (before and after step 1)
    assert len(agent.versions) >= 2

    b = lisa_client.Broker(br.ep["rpc"], timeout=5)
    v = b.call("policy", pb.PolicyReq()).policy.version
    assert v == tr[1]["policy_version_after"] and v >= 2
    b.close()

    for step in (1, 2):
        d = os.path.join(out, "global_step_%d" % step)
        for f in ("config.json", "model.safetensors", "optimizer.bin",
                  "trainer_state.json", "tokenizer_config.json"):
            assert os.path.exists(os.path.join(d, f)), (d, f)
        st = json.load(open(os.path.join(d, "trainer_state.json")))
        assert st["global_step"] == step and st["run_id"] == "run-t"
    assert open(os.path.join(out, "latest_checkpointed_iteration.txt")).read().strip() == "2"
    assert tensor_bytes(os.path.join(out, "global_step_2", "model.safetensors")) != \
        tensor_bytes(os.path.join(model, "model.safetensors"))

    # the checkpoint loads back (trn_model_load) and serves
    slog = open(tmp_path / "serve.log", "wb")
    sout = str(tmp_path / "serve")
    s = trainer(["serve", "--model", os.path.join(out, "global_step_2"),
                 "--broker", "", "--out", sout, "--threads", "1"], slog)
    procs.append(s)
    url_file = os.path.join(sout, "engine.url")
    end = time.time() + 20
    while not os.path.exists(url_file) and time.time() < end:
        assert s.poll() is None, open(tmp_path / "serve.log").read()
        time.sleep(0.05)
    # written whole or not at all (the trainer renames it into place)
    url = open(url_file).read().strip()
    r = post(url + "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 3,
                                       "temperature": 0})
    assert len(r["choices"][0]["token_ids"]) == 3
    s.send_signal(signal.SIGTERM)
    assert s.wait(timeout=10) == 0

    # resume from step 2 and run a third step
    p = trainer(["train", "--resume", os.path.join(out, "global_step_2"),
                 "--train-data", train, "trainer.total_training_steps=3"]
                + common, log)
    procs.append(p)
    rc = wait_trainer(p, agent, 120)
    assert rc == 0, open(tmp_path / "trainer.log").read()[-3000:]
    agent.stop.set()
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    tr = [m for m in lines if m["kind"] == "train"]
    assert [m["step"] for m in tr] == [1, 2, 3]
    assert tr[2]["policy_version"] == tr[1]["policy_version_after"]
    assert os.path.exists(os.path.join(out, "global_step_3", "model.safetensors"))


def start_a_step_nobody_claims(stack, tmp_path, rpc_timeout):
    """Starts a trainer whose first step's 4 rollouts stay queued (no
    controller) and returns it once the broker holds them."""
    br, procs = stack
    model = model_dir(str(tmp_path))
    train = write_data(str(tmp_path / "train.json"), 2, jsonl=False)
    log = open(tmp_path / "trainer.log", "wb")
    p = trainer(["train", "--model", model, "--train-data", train,
                 "--broker", br.ep["rpc"], "--out", str(tmp_path / "out"),
                 "--threads", "1", "data.train_batch_size=2",
                 "actor_rollout_ref.rollout.n=2", "trainer.step_timeout=5m",
                 "trainer.rpc_timeout=" + rpc_timeout], log)
    procs.append(p)
    b = lisa_client.Broker(br.ep["rpc"], timeout=5)
    end = time.time() + 30
    while time.time() < end:
        if b.call("stats", pb.StatsReq()).stats.stats.queued >= 4:
            break
        assert p.poll() is None, open(tmp_path / "trainer.log").read()
        time.sleep(0.05)
    b.close()
    time.sleep(0.5)
    return p


def test_broker_dies_mid_step(stack, tmp_path):
    p = start_a_step_nobody_claims(stack, tmp_path, "2s")
    stack[0].kill()
    t0 = time.time()
    rc = p.wait(timeout=30)
    took = time.time() - t0
    text = open(tmp_path / "trainer.log").read()
    assert rc == 2, text[-2000:]
    assert "did not answer" in text and "broker" in text
    # one wait chunk (5 s) plus the RPC timeout (2 s), with slack
    assert took < 15, took


def test_sigterm_while_waiting_on_a_dead_broker_exits_at_once(stack, tmp_path):
    # Ctrl-C of a local run signals every process at once: the broker is
    # gone while the trainer waits on its step's rollouts. The trainer must
    # not sit out the wait and its RPC timeout (here 5 s + 30 s) first.
    p = start_a_step_nobody_claims(stack, tmp_path, "30s")
    stack[0].kill()
    p.send_signal(signal.SIGTERM)
    t0 = time.time()
    rc = p.wait(timeout=40)
    took = time.time() - t0
    text = open(tmp_path / "trainer.log").read()
    assert rc != 0, text[-2000:]
    assert "stopped by signal" in text, text[-2000:]
    # the cancel gets 1 s, the engine's last registration 0.5 s
    assert took < 5, (took, text[-2000:])


def test_bad_data_is_a_clear_error(tmp_path):
    model = model_dir(str(tmp_path))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"data_source": "m", "reward_model": {"ground_truth": "1"},'
                   ' "extra_info": {"problem_statement": "x"}}\n'
                   '{"data_source": "m", "extra_info": {"problem_statement": "y"}}\n')
    r = subprocess.run([TRAINER, "train", "--model", model, "--train-data",
                        str(bad), "--broker", "tcp://127.0.0.1:9"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "bad.jsonl" in r.stderr and "record 1" in r.stderr
    assert "reward_model.ground_truth" in r.stderr


def one_step(stack, tmp_path, agent, *settings):
    """One training step of 2 prompts x 2 rollouts with `agent` playing
    the rollouts; returns the step's metrics line."""
    br, procs = stack
    model = model_dir(str(tmp_path))
    train = write_data(str(tmp_path / "train.jsonl"), 2)
    out = str(tmp_path / "out")
    agent.start()
    log = open(tmp_path / "trainer.log", "wb")
    p = trainer(["train", "--model", model, "--train-data", train,
                 "--broker", br.ep["rpc"], "--out", out, "--threads", "1",
                 "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
                 *settings, "trainer.step_timeout=60s", "engine.max_len=128"],
                log)
    procs.append(p)
    rc = wait_trainer(p, agent, 120)
    agent.stop.set()
    assert rc == 0, open(tmp_path / "trainer.log").read()[-3000:]
    return json.loads(open(os.path.join(out, "metrics.jsonl")).readline())


@pytest.mark.parametrize("policy,kept,dropped", [
    ("drop_group", 2, 1), ("mask", 3, 0), ("zero", 4, 0)])
def test_failed_rollout_policies(stack, tmp_path, policy, kept, dropped):
    m = one_step(stack, tmp_path, Agent(stack[0].ep["rpc"], fail_task="q0"),
                 "trainer.max_attempts=1", "trainer.failed_rollouts=" + policy)
    assert m["rollouts/failed"] == 1 and m["rollouts/succeeded"] == 3
    assert m["rollouts/kept"] == kept and m["groups/dropped"] == dropped
    # only succeeded rollouts count in the reward means
    assert m["reward/math_toy/count"] == 3
    assert m["update/skipped"] == 0


@pytest.mark.parametrize("policy", ["keep", "mask"])
def test_overlong_rollouts(stack, tmp_path, policy):
    """Rollouts that end at the turn limit (group index 1 here): `mask`
    takes their tokens out of the loss, their reward stays in the group."""
    m = one_step(stack, tmp_path, Agent(stack[0].ep["rpc"], overlong_idx=1),
                 "trainer.overlong_rollouts=" + policy)
    assert m["rollouts/overlong"] == 2 and m["rollouts/kept"] == 4
    # every response token is sampled; each rollout sampled up to 8
    sampled = m["batch/response_tokens"]
    if policy == "keep":
        assert m["actor/tokens"] == sampled
    else:
        assert 0 < m["actor/tokens"] < sampled
    # the rewards of all four count either way (two groups, "7" vs "3")
    assert m["reward/math_toy/count"] == 4


def test_bad_overlong_policy_is_refused(tmp_path):
    model = model_dir(str(tmp_path))
    train = write_data(str(tmp_path / "train.jsonl"), 2)
    r = subprocess.run([TRAINER, "train", "--model", model, "--train-data",
                        train, "trainer.overlong_rollouts=drop"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "trainer.overlong_rollouts" in r.stderr


def test_ppo_mini_batches_and_epochs(stack, tmp_path):
    """ppo_mini_batch_size 1 prompt of 2, ppo_epochs 2: four optimizer
    updates in one step, each on one group's two rollouts."""
    m = one_step(stack, tmp_path, Agent(stack[0].ep["rpc"]),
                 "actor_rollout_ref.actor.ppo_mini_batch_size=1",
                 "actor_rollout_ref.actor.ppo_epochs=2",
                 "actor_rollout_ref.actor.optim.lr=1e-2")
    assert m["actor/mini_batches"] == 2, m
    assert m["actor/updates"] == 4, m
    assert m["update/skipped"] == 0
    # the old log-probs were the trainer's: the first update's ratio is 1,
    # later ones moved, so the step's mean ppo_kl is not 0
    assert m["actor/ppo_kl"] != 0


def test_length_caps(stack, tmp_path):
    """data.max_response_length cuts every response; the batch still
    trains, on at most that many tokens a sequence."""
    m = one_step(stack, tmp_path, Agent(stack[0].ep["rpc"]),
                 "data.max_response_length=3")
    assert m["batch/truncated"] == 4, m
    assert 0 < m["actor/tokens"] <= 4 * 3, m


def test_agent_lightning_prompt_cap_drops(stack, tmp_path):
    """A prompt over trajectory_max_prompt_length drops the trajectory."""
    m = one_step(stack, tmp_path, Agent(stack[0].ep["rpc"]),
                 "agentlightning.trace_aggregator."
                 "trajectory_max_prompt_length=2")
    assert m["batch/dropped_long_prompt"] == 4, m
    assert m["batch/sequences"] == 0 and m["update/skipped"] == 1


def test_kl_in_reward_starts_at_zero(stack, tmp_path):
    """use_kl_in_reward loads the reference model; before any update the
    policy is the reference, so the penalty is 0 at its coefficient."""
    m = one_step(stack, tmp_path, Agent(stack[0].ep["rpc"]),
                 "algorithm.use_kl_in_reward=true",
                 "algorithm.kl_ctrl.type=adaptive",
                 "algorithm.kl_ctrl.kl_coef=0.05")
    assert m["actor/reward_kl_penalty"] == pytest.approx(0, abs=1e-6), m
    assert m["actor/reward_kl_penalty_coeff"] == pytest.approx(0.05)
    assert m["update/skipped"] == 0


def test_val_only_reports_each_source(stack, tmp_path):
    """trainer.val_only: no training data, one validation over two
    validation sets (upstream's layout: a test_verl.json per folder),
    per-source means, then exit 0."""
    br, procs = stack
    model = model_dir(str(tmp_path))
    for name, src in (("math_mini", "math_mini"), ("bio_mini", "biomed_mini")):
        os.makedirs(tmp_path / name)
        write_data(str(tmp_path / name / "test_verl.json"), 2, source=src,
                   jsonl=False)
    out = str(tmp_path / "out")
    agent = Agent(br.ep["rpc"])
    agent.start()
    log = open(tmp_path / "trainer.log", "wb")
    p = trainer(["train", "--model", model, "--val-data",
                 "%s,%s" % (tmp_path / "math_mini", tmp_path / "bio_mini"),
                 "--broker", br.ep["rpc"], "--out", out, "--threads", "1",
                 "trainer.val_only=true",
                 "actor_rollout_ref.rollout.val_kwargs.do_sample=false",
                 "trainer.step_timeout=60s", "engine.max_len=128"], log)
    procs.append(p)
    rc = wait_trainer(p, agent, 120)
    agent.stop.set()
    text = open(tmp_path / "trainer.log").read()
    assert rc == 0, text[-3000:]
    assert "greedy" in text  # do_sample=false: temperature 0
    lines = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    assert [m["kind"] for m in lines] == ["val"], lines
    v = lines[0]
    assert v["val/rollouts"] == 4
    for src in ("math_mini", "biomed_mini"):
        assert v["val/reward/%s/count" % src] == 2, v
        assert "val/reward/%s/mean" % src in v
    # nothing was trained: no checkpoint
    assert not [d for d in os.listdir(out) if d.startswith("global_step_")]


def test_spans_sampled_otherwise_are_refused(stack, tmp_path):
    """Spans that record another temperature than the run's (0.5 against
    actor_rollout_ref.rollout.temperature 1.0) are not trained on: every
    rollout is refused, counted, logged, and the step makes no update."""
    m = one_step(stack, tmp_path, Agent(stack[0].ep["rpc"], temperature=0.5))
    assert m["rollouts/succeeded"] == 4
    assert m["rollouts/sampling_refused"] == 4 and m["rollouts/kept"] == 0
    assert m["batch/sequences"] == 0 and m["update/skipped"] == 1
    log = open(tmp_path / "trainer.log").read()
    assert "refused from training: span 0 was sampled at temperature 0.5" \
        in log, log[-3000:]


def test_spans_sampled_as_the_run_are_trained(stack, tmp_path):
    """The same step with the run at 0.5: the spans match and train."""
    m = one_step(stack, tmp_path, Agent(stack[0].ep["rpc"], temperature=0.5),
                 "actor_rollout_ref.rollout.temperature=0.5")
    assert m["rollouts/sampling_refused"] == 0 and m["rollouts/kept"] == 4
    assert m["update/skipped"] == 0
