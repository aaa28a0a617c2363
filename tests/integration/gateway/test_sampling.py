"""Sampling is the rollout's: a real lisa-gateway, a real lisa-broker and a
real engine (lisa-trainer serve on the toy model, models/toy). A rollout
enqueued with the run's sampling (Limits.sampling, as lisa-trainer sets it)
is sampled at the run's temperature whatever the agent (a real OpenAI
client) asks for: at the run's temperature 0 the reply is the engine's
greedy continuation of the span's prompt, the span records temperature 0,
and the override is counted. A rollout without run settings is sampled as
the agent asks, and its span records that."""
import json
import os
import signal
import subprocess
import time
import urllib.request

import openai
import pytest

from brokerlib import Client, claim, enqueue, task  # noqa: I100 (sets the path)
import lisa_pb2 as pb  # noqa: E402
from gwlib import BIN, SRC, http  # noqa: E402

TRAINER = os.path.join(BIN, "bin", "lisa-trainer")
TOY = os.path.join(SRC, "models", "toy")


@pytest.fixture
def toy_engine(tmp_path):
    out = tmp_path / "serve"
    log = open(tmp_path / "serve.log", "wb")
    p = subprocess.Popen([TRAINER, "serve", "--model", TOY, "--broker", "",
                          "--out", str(out), "--threads", "1"],
                         stdout=log, stderr=log)
    url_file = out / "engine.url"
    end = time.time() + 60
    while not url_file.exists():
        assert p.poll() is None, (tmp_path / "serve.log").read_text()
        assert time.time() < end, "the engine did not start"
        time.sleep(0.05)
    time.sleep(0.05)
    yield url_file.read_text().strip()
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def spans_of(c, rid, n, timeout=10.0):
    end = time.time() + timeout
    while True:
        rep = c.ok("query", pb.QueryReq(rollout_ids=[rid], with_spans=True))
        if len(rep.spans) >= n or time.time() > end:
            return sorted(rep.spans, key=lambda s: s.seq)
        time.sleep(0.05)


def overridden(gw):
    for line in http(gw.url + "/metrics")[2].decode().splitlines():
        if line.startswith("lisa_gateway_sampling_overridden_total"):
            return float(line.split()[-1])
    return 0.0


def ask(gw, token, temperature):
    oc = openai.OpenAI(base_url=gw.url + "/v1", api_key=token, max_retries=0)
    return oc.chat.completions.create(
        model="lisa", max_tokens=12, temperature=temperature, top_p=1.0,
        messages=[{"role": "system", "content": "You solve tasks with tools."},
                  {"role": "user", "content": "Add up 3 and 4."}])


def test_agent_asking_another_temperature_is_sampled_at_the_runs(
        toy_engine, make_gateway, make_broker, key, tmp_path):
    kf = tmp_path / "shared.key"
    kf.write_text(key.hex() + "\n")
    os.chmod(kf, 0o600)
    brk = make_broker(token_key=str(kf))
    gw = make_gateway(engines=toy_engine, broker=brk.ep["rpc"], tokenizer=TOY)
    c = Client(brk.ep["rpc"])
    run = pb.Sampling(temperature=0.0, top_p=1.0)  # validation: greedy
    rid = enqueue(c, [task("Add up 3 and 4.", limits=pb.Limits(sampling=run)),
                      task("Add up 5 and 6.")])
    atts = {a.rollout.rollout_id: a for a in claim(c)}
    assert len(atts) == 2
    greedy, free = atts[rid[0]], atts[rid[1]]

    # the task the agent fetches names the run's settings
    req = urllib.request.Request(gw.url + "/lisa/v1/task", headers={
        "Authorization": "Bearer " + greedy.token})
    with urllib.request.urlopen(req, timeout=10) as r:
        view = json.loads(r.read())
    assert view["limits"]["temperature"] == 0 and view["limits"]["top_p"] == 1

    # the agent asks for 1.8: the run's 0 is applied, and counted
    before = overridden(gw)
    out = ask(gw, greedy.token, 1.8)
    assert out.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert overridden(gw) == before + 1
    sp = spans_of(c, greedy.rollout.rollout_id, 1)
    assert len(sp) == 1 and sp[0].HasField("sampling")
    assert sp[0].sampling.temperature == 0.0 and sp[0].sampling.top_p == 1.0
    assert sp[0].sampling.top_k == 0
    # ... and the reply is the engine's greedy continuation of the prompt
    ids = list(sp[0].response_ids)
    assert ids
    body = json.dumps({"prompt": list(sp[0].appended_ids),
                       "max_tokens": len(ids), "temperature": 0,
                       "return_token_ids": True}).encode()
    with urllib.request.urlopen(urllib.request.Request(
            toy_engine + "/v1/completions", data=body,
            headers={"Content-Type": "application/json"}), timeout=30) as r:
        direct = json.loads(r.read())["choices"][0]["token_ids"]
    assert direct == ids
    # a second call of the attempt: still the run's, still greedy
    ask(gw, greedy.token, 0.9)
    sp = spans_of(c, greedy.rollout.rollout_id, 2)
    assert [s.sampling.temperature for s in sp] == [0.0, 0.0]

    # no run settings: the agent's request decides, and the span says so
    ask(gw, free.token, 1.5)
    sp = spans_of(c, free.rollout.rollout_id, 1)
    assert sp[0].sampling.temperature == pytest.approx(1.5)
    assert sp[0].sampling.top_p == 1.0
    assert overridden(gw) == before + 2
    c.close()
