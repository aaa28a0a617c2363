"""lisa-trainer serve: the generation endpoint on its own. Concurrent
requests are batched into one engine step yet each gets exactly what it
would get alone (same seed -> same ids and log-probs); stop tokens and
max_tokens end generations with the right finish_reason; bad requests are
400 with a reason; a full queue is 429; the engine registers with a real
broker and its record carries its URL and policy version; a random load
against a small cache keeps every answer whole and leaves no block held."""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pytest  # noqa: E402
from test_trainer_service import (Broker, SRC, TRAINER, lisa_client,  # noqa: E402
                                  model_dir, pb, post)


def serve(tmp_path, *extra, tokenizer=False):
    """Starts `serve` on the tiny model (with the Qwen3 tokenizer's
    tokenizer.json when `tokenizer`, for stop strings)."""
    out = str(tmp_path / "serve")
    log = open(tmp_path / "serve.log", "wb")
    model = model_dir(str(tmp_path))
    if tokenizer:
        shutil.copy(os.path.join(SRC, "tests", "fixtures", "qwen3-tokenizer",
                                 "tokenizer.json"), model)
    p = subprocess.Popen([TRAINER, "serve", "--model", model,
                          "--out", out, "--threads", "1"] + list(extra),
                         stdout=log, stderr=log)
    url_file = os.path.join(out, "engine.url")
    end = time.time() + 20
    while not os.path.exists(url_file):
        assert p.poll() is None, open(tmp_path / "serve.log").read()
        assert time.time() < end
        time.sleep(0.05)
    time.sleep(0.05)
    return p, open(url_file).read().strip()


def stop(p):
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == 0


def raw_post(url, body, timeout=60):
    """POSTs raw bytes; (status, parsed body or None, Retry-After)."""
    req = urllib.request.Request(url, data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read()), None
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            doc = json.loads(raw)
        except ValueError:
            doc = None
        return e.code, doc, e.headers.get("Retry-After")


def status_of(url, body):
    """POSTs body as JSON; (status, parsed body)."""
    st, doc, _ = raw_post(url, json.dumps(body).encode(), timeout=30)
    return st, doc


def test_batched_requests_match_single_requests(tmp_path):
    p, url = serve(tmp_path, "--broker", "")
    try:
        reqs = [{"prompt": list(range(1 + i, 6 + 2 * i)), "max_tokens": 12,
                 "temperature": 1.0, "seed": 100 + i, "logprobs": 1}
                for i in range(6)]
        alone = [post(url + "/v1/completions", r) for r in reqs]
        together = [None] * len(reqs)

        def go(i):
            together[i] = post(url + "/v1/completions", reqs[i])
        ts = [threading.Thread(target=go, args=(i,)) for i in range(len(reqs))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for a, b in zip(alone, together):
            ca, cb = a["choices"][0], b["choices"][0]
            assert ca["token_ids"] == cb["token_ids"]
            assert len(ca["token_ids"]) == 12 and ca["finish_reason"] == "length"
            for x, y in zip(ca["logprobs"]["token_logprobs"],
                            cb["logprobs"]["token_logprobs"]):
                assert x <= 0 and abs(x - y) < 1e-4
            assert a["policy_version"] == 0
        # different seeds give different samples
        assert len({tuple(a["choices"][0]["token_ids"]) for a in alone}) > 1
        # greedy is deterministic without a seed
        g1 = post(url + "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 5,
                                            "temperature": 0})
        g2 = post(url + "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 5,
                                            "temperature": 0})
        assert g1["choices"][0]["token_ids"] == g2["choices"][0]["token_ids"]
        # a stop token ends the generation and is included
        first = g1["choices"][0]["token_ids"][0]
        s = post(url + "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 5,
                                           "temperature": 0,
                                           "stop_token_ids": [first]})
        assert s["choices"][0]["token_ids"] == [first]
        assert s["choices"][0]["finish_reason"] == "stop"
        with urllib.request.urlopen(url + "/healthz", timeout=5) as r:
            h = json.loads(r.read())
        assert r.status == 200 and h["status"] == "ok"
    finally:
        stop(p)


@pytest.mark.parametrize("body,why", [
    ({"prompt": "text"}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": [1, 99999]}, "prompt[1]"),
    ({"prompt": [1], "max_tokens": 0}, "max_tokens"),
    ({"prompt": [1], "top_p": 0}, "top_p"),
    ({"prompt": [1], "n": 65}, "n must be in [1, 64]"),
    ({"prompt": [1], "n": 0}, "n must be in [1, 64]"),
    ({"prompt": [1], "stream": True}, "stream"),
    ({"prompt": [1] * 300}, "context"),
])
def test_bad_requests_are_400_with_a_reason(tmp_path, body, why):
    p, url = serve(tmp_path, "--broker", "")
    try:
        code, rep = status_of(url + "/v1/completions", body)
        assert code == 400
        assert why in rep["error"]["message"]
    finally:
        stop(p)


def test_n_choices_share_one_prefill(tmp_path):
    """n = 4 through the OpenAI client: four choices with their own seeds,
    reproducible, the prompt computed once (the forks share its blocks)."""
    import openai
    p, url = serve(tmp_path, "--broker", "", "engine.block_size=16")
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none",
                               max_retries=0)
        prompt = [(i * 7 + 3) % 60 for i in range(40)]

        def ask(n, temperature, seed):
            extra = {} if seed is None else {"seed": seed}
            r = client.completions.create(model="toy", prompt=[prompt], n=n,
                                          max_tokens=8, temperature=temperature,
                                          **extra)
            d = r.model_dump()
            assert [c["index"] for c in d["choices"]] == list(range(n))
            return d

        def health():
            with urllib.request.urlopen(url + "/healthz", timeout=5) as r:
                return json.loads(r.read())
        a = ask(4, 1.0, 11)
        h = health()
        ids = [tuple(c["token_ids"]) for c in a["choices"]]
        assert all(len(t) == 8 for t in ids)
        assert len(set(ids)) > 1  # each choice its own sample
        assert a["usage"]["prompt_tokens"] == 40
        assert a["usage"]["completion_tokens"] == 32
        assert a["usage"]["total_tokens"] == 72
        assert a["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        # computed once: the forks took the 2 full blocks of 16 before the
        # last prompt position's block and recomputed its 8 positions
        assert h["prompt_tokens"] == 40
        assert h["shared_tokens"] == 3 * 32
        assert h["tokens_prefilled"] == 40 + 3 * 8
        assert h["kv_blocks_used"] == 0 and h["inflight"] == 0
        # the same seed: the same choices (now from the prefix cache)
        b = ask(4, 1.0, 11)
        assert [tuple(c["token_ids"]) for c in b["choices"]] == ids
        for ca, cb in zip(a["choices"], b["choices"]):
            for x, y in zip(ca["logprobs"]["token_logprobs"],
                            cb["logprobs"]["token_logprobs"]):
                assert x <= 0 and abs(x - y) < 1e-4
        # choice 0 is what n = 1 samples with that seed
        one = ask(1, 1.0, 11)
        assert tuple(one["choices"][0]["token_ids"]) == ids[0]
        # greedy: every choice the same
        g = ask(3, 0.0, None)
        assert len({tuple(c["token_ids"]) for c in g["choices"]}) == 1
        assert health()["completed"] == 4
        with pytest.raises(openai.BadRequestError) as e:
            ask(65, 1.0, 1)
        assert "64" in str(e.value)
    finally:
        stop(p)


def test_full_queue_is_429(tmp_path):
    p, url = serve(tmp_path, "--broker", "", "engine.max_batch=1",
                   "engine.queue_max=1")
    try:
        codes = []
        lock = threading.Lock()

        def go():
            c, _ = status_of(url + "/v1/completions",
                             {"prompt": [1, 2], "max_tokens": 200,
                              "temperature": 1.0})
            with lock:
                codes.append(c)
        ts = [threading.Thread(target=go) for _ in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert 200 in codes and 429 in codes, codes
        assert set(codes) <= {200, 429}
    finally:
        stop(p)


def test_registers_with_the_broker(tmp_path):
    br = Broker(tmp_path / "broker").start()
    try:
        p, url = serve(tmp_path, "--broker", br.ep["rpc"], "--engine-id",
                       "eng-7", "engine.register_ttl=600ms")
        b = lisa_client.Broker(br.ep["rpc"], timeout=5)
        end = time.time() + 10
        found = None
        while time.time() < end and not found:
            es = b.call("engine_list", pb.EngineListReq()).engine_list.engines
            found = [e for e in es if e.engine_id == "eng-7"]
            time.sleep(0.05)
        assert found and found[0].url == url and found[0].up
        assert found[0].max_batch == 256 and not found[0].paused  # engine.max_seqs
        # renewed: still listed after several TTLs
        time.sleep(2.0)
        es = b.call("engine_list", pb.EngineListReq()).engine_list.engines
        assert [e for e in es if e.engine_id == "eng-7"]
        stop(p)
        # leaving deregisters at once (paused, 1 ms TTL)
        end = time.time() + 2
        while time.time() < end:
            es = b.call("engine_list", pb.EngineListReq()).engine_list.engines
            mine = [e for e in es if e.engine_id == "eng-7"]
            if not mine or mine[0].paused:
                break
            time.sleep(0.05)
        assert not mine or mine[0].paused
        b.close()
    finally:
        br.stop()


def test_agent_load_spreads_conversations_over_engines(tmp_path):
    """bench/engine's load generator against two real engines: each
    conversation keeps to one engine for all its turns, both engines
    serve, no call fails, and later turns find their history in their
    engine's prefix cache."""
    load = os.path.join(os.environ.get("LISA_SOURCE_DIR", os.path.join(
        HERE, "..", "..", "..")), "bench", "engine", "agent_load.py")
    procs, urls = [], []
    try:
        for name in ("a", "b"):
            d = tmp_path / name
            d.mkdir()
            p, url = serve(d, "--broker", "", "engine.block_size=4")
            procs.append(p)
            urls.append(url)
        out = tmp_path / "load.json"
        # 6 conversations x 3 turns: a 20-token prompt, 8 sampled tokens a
        # turn, 5 observation tokens between turns
        r = subprocess.run([sys.executable, load, ",".join(urls), "--rows",
                            "6,3,20,8,5", "--vocab", "512", "--json",
                            str(out)], capture_output=True, text=True,
                           timeout=240)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "calls per engine [9, 9]" in r.stdout, r.stdout
        (row,) = json.load(open(out))
        assert row["engines"] == 2 and row["calls"] == 18, row
        assert row["errors"] == 0, row["error_samples"]
        assert row["calls_per_engine"] == [9, 9]
        assert row["sampled"] == 18 * 8
        # the history re-sent at turns 2 and 3 comes from the cache (all
        # but the part of a block not yet full)
        assert row["history_cached"] > 0.6, row
        assert row["engine"]["tokens_generated"] == 18 * 8, row["engine"]
        for url in urls:  # each engine generated its own conversations'
            with urllib.request.urlopen(url + "/healthz", timeout=10) as h:
                assert json.loads(h.read())["tokens_generated"] == 9 * 8
    finally:
        for p in procs:
            stop(p)


def _check_answer(req, doc, vocab):
    """Every choice of a 200 answer is whole and within the request;
    returns how many ended on a stop."""
    ch = doc["choices"]
    assert len(ch) == req.get("n", 1)
    assert doc["usage"]["prompt_tokens"] == len(req["prompt"])
    assert 0 <= doc["usage"]["prompt_tokens_details"]["cached_tokens"] \
        <= len(req["prompt"])
    stops, total = set(req.get("stop_token_ids") or []), 0
    for i, c in enumerate(ch):
        ids, lps = c["token_ids"], c["logprobs"]["token_logprobs"]
        total += len(ids)
        assert c["index"] == i and 1 <= len(ids) <= req["max_tokens"]
        assert len(lps) == len(ids) and all(lp <= 1e-4 for lp in lps)
        assert all(0 <= t < vocab for t in ids)
        assert not stops.intersection(ids[:-1]), "a stop id inside the output"
        assert c["finish_reason"] in ("stop", "length")
        if c["finish_reason"] == "stop" and not req.get("stop"):
            assert ids[-1] in stops
    assert doc["usage"]["completion_tokens"] == total
    return sum(c["finish_reason"] == "stop" for c in ch)


def test_random_load_keeps_every_answer_whole(tmp_path):
    """Twelve callers for 15 s (or until 100 answers) against a cache of ten
    blocks: conversations that grow and restart, n up to 4, stop ids and
    strings, top-p/top-k, bad bodies. Every answer is whole, bad bodies are 400,
    load is 429 or waits, the cache is under enough pressure to preempt and
    evict, and once the load ends no block is left in use and the engine
    stops cleanly."""
    p, url = serve(tmp_path, "--broker", "", "engine.kv_memory=160KiB",
                   "engine.max_seqs=6", "engine.queue_max=8",
                   "engine.max_step_tokens=64", "engine.batch_wait=5ms",
                   tokenizer=True)
    vocab, ctx = 512, 256
    problems, codes, lock = [], {}, threading.Lock()
    bad_bodies = [b"{", b"[]", b'{"prompt":"x"}', b'{"prompt":[1,2],"n":0}',
                  b'{"prompt":[1],"max_tokens":-3}', b'{"prompt":[512]}',
                  json.dumps({"prompt": [1] * (ctx + 5)}).encode()]

    t0 = time.time()

    def going():
        """15 s, longer (up to 60 s) until 100 answers on a slow build."""
        t = time.time() - t0
        return t < 15 or (t < 60 and codes.get(200, 0) < 100)

    def caller(seed):
        rnd = random.Random(seed)
        hist = [rnd.randrange(vocab) for _ in range(rnd.randint(1, 60))]
        while going():
            if rnd.random() < 0.08:
                body = rnd.choice(bad_bodies)
                st, _, _ = raw_post(url + "/v1/completions", body)
                with lock:
                    codes[st] = codes.get(st, 0) + 1
                    if st != 400:
                        problems.append(("bad body answered", st, body))
                continue
            req = {"prompt": hist, "seed": rnd.randrange(1 << 30),
                   "max_tokens": rnd.choice([1, 4, 16, 48]),
                   "n": rnd.choice([1, 1, 2, 4]),
                   "temperature": rnd.choice([0, 0.7, 1.0])}
            if rnd.random() < 0.5:
                req["stop_token_ids"] = rnd.sample(range(vocab), 20)
            if rnd.random() < 0.5:
                req["top_p"], req["top_k"] = 0.9, 40
            if rnd.random() < 0.2:
                req["stop"] = [rnd.choice(["a", "e", "in", " t", "\n"])]
            st, doc, ra = raw_post(url + "/v1/completions",
                                    json.dumps(req).encode())
            with lock:
                codes[st] = codes.get(st, 0) + 1
            if st == 429:
                assert ra is not None
                time.sleep(0.05 * rnd.random())
                continue
            if st != 200:
                with lock:
                    problems.append(("status", st, doc, len(hist)))
                continue
            try:
                stopped = _check_answer(req, doc, vocab)
                if req.get("stop"):
                    with lock:
                        codes["stop string"] = codes.get("stop string",
                                                         0) + stopped
            except AssertionError as e:
                with lock:
                    problems.append(("answer", repr(e), req, doc))
                continue
            out = doc["choices"][0]["token_ids"]
            hist = hist + out + [rnd.randrange(vocab)
                                 for _ in range(rnd.randint(0, 30))]
            if rnd.random() < 0.15 or len(hist) > ctx - 60:
                hist = [rnd.randrange(vocab) for _ in range(rnd.randint(1, 60))]

    try:
        ts = [threading.Thread(target=caller, args=(i,)) for i in range(12)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not problems, problems[:5]
        assert codes.get(200, 0) >= 100 and codes.get(400, 0) > 0, codes
        with urllib.request.urlopen(url + "/healthz", timeout=10) as r:
            h = json.loads(r.read())
        assert h["preemptions"] > 0 and h["evictions"] > 0, h
        assert h["inflight"] == 0 and h["queued"] == 0, h
        assert h["kv_blocks_used"] == 0, h  # every reference given back
        assert codes.get("stop string", 0) > 0, codes  # they end outputs
        assert h["completed"] == codes[200], (h, codes)
        print("codes", codes, "preemptions", h["preemptions"], "evictions",
              h["evictions"], "holds", h["holds"])
    finally:
        stop(p)
