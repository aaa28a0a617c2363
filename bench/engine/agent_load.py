#!/usr/bin/env python3
"""An agent-shaped load against a generation engine's /v1/completions.

C conversations run at once, each T turns: the first prompt is P random
token ids; every turn samples G tokens (no stop tokens, so exactly G), then
O observation tokens are appended and the whole history is sent again, as
an agent's gateway does. A call answered 429 is retried after its
Retry-After; any other non-200 answer is an error.

Usage:
  agent_load.py URL[,URL...] --rows 'C,T,P,G,O;...' [--vocab N] [--json OUT]
                [--label NAME] [--rates RATES.json --shape 4b]

With several engines (one per GPU), conversation c is served by engine
c mod E for all its turns, as the gateway keeps an attempt on one engine;
the counters are summed over the engines, the calls each engine answered
are listed, and the bound is that of the busiest engine's share (every
engine on its own device, at the measured rates of one).

Prints, per row: wall time, sampled tokens/s, the cached share of the
prompt tokens and of the re-sent history, turn latency p50/p99/max,
when the first conversation ended (against the wall time: the spread of
the ends shows conversations left behind), errors,
429s, peak device memory (nvidia-smi, when present), the engine's own
counters over the row (from GET /healthz before and after: steps,
positions computed and recomputed after preemptions, against the new
positions the row must compute at least; preemptions and the most of one
sequence; KV blocks evicted from the prefix cache; the backend's time in
pure decode steps and in steps with prompt tokens) and, with --rates
(the same run's measured matrix rate and memory read rate), the bound:
the new tokens' products and attention at the matrix rate plus every
decode step's weight and KV reads at the memory rate, and the ratio of the
wall time to it. Only the Python standard library is used.
"""
import argparse
import http.client
import json
import random
import subprocess
import threading
import time
import urllib.parse

# Qwen3-4B's shape: what the bound counts.
SHAPES = {
    "4b": dict(layers=36, hidden=2560, heads=32, kv_heads=8, head_dim=128,
               mlp=9728, vocab=151936),
}


def shape_numbers(s):
    h, L = s["hidden"], s["layers"]
    qkv = h * (s["heads"] + 2 * s["kv_heads"]) * s["head_dim"]
    o = s["heads"] * s["head_dim"] * h
    mlp = 3 * h * s["mlp"]
    layer_params = qkv + o + mlp
    # bf16 bytes a decode step reads: every layer, the norms aside, and the
    # LM head (tied to the embedding: read once as the head)
    weight_bytes = 2 * (L * layer_params + s["vocab"] * h)
    kv_bytes_per_token = L * 2 * s["kv_heads"] * s["head_dim"] * 2
    flops_per_token = 2 * L * layer_params  # products of one new token
    return weight_bytes, kv_bytes_per_token, flops_per_token


class Engine:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port or 80
        # a turn may wait long for room under cache pressure: the engine's
        # engine.queue_timeout (10 min) bounds it, not the client
        self.timeout = 3600

    def health(self):
        """The engine's /healthz counters, or {} when it does not answer."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            c.request("GET", "/healthz")
            r = c.getresponse()
            return json.loads(r.read()) if r.status == 200 else {}
        except (OSError, http.client.HTTPException, ValueError):
            return {}
        finally:
            c.close()

    def complete(self, prompt, max_tokens, seed, deadline):
        body = json.dumps({"prompt": prompt, "max_tokens": max_tokens,
                           "temperature": 1.0, "seed": seed,
                           "stop_token_ids": []})
        n429 = 0
        while True:
            c = http.client.HTTPConnection(self.host, self.port,
                                           timeout=self.timeout)
            try:
                c.request("POST", "/v1/completions", body,
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
                status, retry = r.status, r.getheader("Retry-After")
            except (OSError, http.client.HTTPException) as e:
                return {"status": -1, "error": str(e), "n429": n429}
            finally:
                c.close()
            if status == 429 and time.time() < deadline:
                n429 += 1
                time.sleep(float(retry or 1))
                continue
            if status != 200:
                return {"status": status, "error": data[:300].decode(
                    "utf-8", "replace"), "n429": n429}
            j = json.loads(data)
            ch = j["choices"][0]
            u = j.get("usage", {})
            cached = (u.get("prompt_tokens_details") or {}).get(
                "cached_tokens", 0)
            return {"status": 200, "ids": ch["token_ids"], "cached": cached,
                    "n429": n429}


class MemPoll(threading.Thread):
    """Peak device memory in use (MiB) from nvidia-smi, every 0.2 s."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.stop = 0, False

    def run(self):
        while not self.stop:
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=memory.used",
                     "--format=csv,noheader,nounits"], capture_output=True,
                    text=True, timeout=5).stdout.split()
                if out:
                    self.peak = max(self.peak, max(int(x) for x in out))
            except (OSError, ValueError, subprocess.SubprocessError):
                return
            time.sleep(0.2)


# /healthz counters a row reports as the difference over the row
COUNTERS = ("steps", "computed", "recomputed", "preemptions", "evictions",
            "tokens_prefilled", "tokens_generated", "shed", "decode_steps",
            "decode_s", "mixed_steps", "mixed_s", "holds")


def health_all(engines):
    """The engines' /healthz counters, summed (a *_max figure: the
    largest)."""
    tot = {}
    for e in engines:
        for k, v in e.health().items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                tot[k] = max(tot.get(k, v), v) if k.endswith("_max") \
                    else tot.get(k, 0) + v
    return tot


def run_row(engines, C, T, P, G, O, vocab, seed=1):
    lat, res = [], []
    lock = threading.Lock()
    deadline = time.time() + 3600

    done = []  # when each conversation ended, from the start

    # ids from here up: clear of a real vocabulary's special tokens
    low = min(100, vocab // 2)

    def conv(c):
        # one generator a conversation: the same ids whatever the threads'
        # order, so runs compare
        rnd = random.Random(seed * 100003 + c)
        eng = engines[c % len(engines)]
        ids = [rnd.randrange(low, vocab) for _ in range(P)]
        hist = 0
        for t in range(T):
            t0 = time.time()
            r = eng.complete(ids, G, seed * 1000 + c * 100 + t, deadline)
            dt = time.time() - t0
            with lock:
                lat.append(dt)
                res.append(dict(r, prompt=len(ids), history=hist,
                                engine=c % len(engines)))
            if r["status"] != 200:
                break
            ids = ids + r["ids"]
            hist = len(ids)
            ids = ids + [rnd.randrange(low, vocab) for _ in range(O)]
        with lock:
            done.append(time.time() - start)

    h0 = health_all(engines)
    mp = MemPoll()
    mp.start()
    th = [threading.Thread(target=conv, args=(c,)) for c in range(C)]
    start = time.time()
    for x in th:
        x.start()
    for x in th:
        x.join()
    wall = time.time() - start
    mp.stop = True
    h1 = health_all(engines)
    engine = {k: h1[k] - h0.get(k, 0) for k in COUNTERS if k in h1}
    if "preempted_max" in h1:
        engine["preempted_max"] = h1["preempted_max"]
    # positions the row computes at least: each conversation's history
    # once, its last sampled token aside
    engine["needed"] = C * (P + T * G + (T - 1) * O - 1)
    ok = [r for r in res if r["status"] == 200]
    errs = [r for r in res if r["status"] != 200]
    sampled = sum(len(r["ids"]) for r in ok)
    prompt = sum(r["prompt"] for r in ok)
    hist = sum(r["history"] for r in ok)
    cached = sum(r["cached"] for r in ok)
    lat.sort()

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] if lat else 0.0

    return {
        "row": f"{C}x{T} P{P} G{G} O{O}", "C": C, "T": T, "P": P, "G": G,
        "O": O, "engines": len(engines),
        "calls_per_engine": [sum(1 for r in ok if r["engine"] == k)
                             for k in range(len(engines))],
        "calls": len(res), "ok": len(ok), "errors": len(errs),
        "error_samples": sorted({e["error"][:160] for e in errs})[:3],
        "n429": sum(r["n429"] for r in res), "wall_s": wall,
        "sampled": sampled, "tok_s": sampled / wall if wall else 0.0,
        "prompt_tokens": prompt, "history_tokens": hist,
        "cached_tokens": cached,
        "cached_share": cached / prompt if prompt else 0.0,
        "history_cached": cached / hist if hist else 0.0,
        "p50_s": pct(0.5), "p99_s": pct(0.99), "max_s": pct(1.0),
        # the spread of the conversations' ends: a starved conversation
        # ends long after the others
        "first_end_s": min(done) if done else 0.0,
        "peak_mib": mp.peak,
        "engine": engine,
    }


def bound(row, rates, shape):
    """Seconds the row's work takes at the measured rates (with several
    engines: the busiest one's conversations on its own device)."""
    W, kvb, fpt = shape_numbers(shape)
    s = shape
    C, T, P, G, O = row["C"], row["T"], row["P"], row["G"], row["O"]
    E = row.get("engines", 1)
    C = (C + E - 1) // E
    flops = 0.0
    read = 0.0
    for _ in range(C):
        ctx = 0
        for t in range(T):
            new = P if t == 0 else O + 1  # the observation and the last
            # sampled token, whose keys were never computed
            # attention of the new tokens: token k sees ctx + k + 1 keys
            seen = new * ctx + new * (new + 1) / 2.0
            flops += 4.0 * seen * s["head_dim"] * s["heads"] * s["layers"]
            flops += new * fpt
            ctx += new
            ctx += G - 1
    # decode: T*G steps of all C conversations together, each step reading
    # the weights once and every sequence's cache
    steps = T * G
    avg_ctx = P + (T - 1) * (G + O) / 2.0 + G / 2.0
    read = steps * (W + C * avg_ctx * kvb)
    flops += steps * C * fpt  # the decode tokens' products
    return flops / (rates["matrix_tflops"] * 1e12) + \
        read / (rates["read_gbs"] * 1e9)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url", help="an engine's URL, or several, comma-separated")
    ap.add_argument("--rows", required=True)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--json")
    ap.add_argument("--label", default="engine")
    ap.add_argument("--rates")
    ap.add_argument("--shape", default="4b")
    ap.add_argument("--seed", type=int, default=1,
                    help="row i's prompts come from seed + i: another seed "
                    "finds nothing of an earlier run in the engines' caches")
    a = ap.parse_args()
    engines = [Engine(u) for u in a.url.split(",") if u]
    rates = json.load(open(a.rates)) if a.rates else None
    out = []
    for i, spec in enumerate(a.rows.split(";")):
        C, T, P, G, O = (int(x) for x in spec.split(","))
        # a seed per row: no row finds another's prompts in the cache
        r = run_row(engines, C, T, P, G, O, a.vocab, seed=a.seed + i)
        r["label"] = a.label
        if rates:
            r["bound_s"] = bound(r, rates, SHAPES[a.shape])
            r["x_bound"] = r["wall_s"] / r["bound_s"]
        out.append(r)
        print(f"{a.label:8s} {r['row']:26s} wall {r['wall_s']:7.1f}s "
              f"{r['tok_s']:7.0f} tok/s cached {100 * r['cached_share']:5.1f}% "
              f"(history {100 * r['history_cached']:5.1f}%) "
              f"p50 {r['p50_s']:6.2f}s p99 {r['p99_s']:6.2f}s "
              f"max {r['max_s']:6.2f}s first end {r['first_end_s']:6.1f}s "
              f"errors {r['errors']}/{r['calls']} 429s {r['n429']} "
              f"peak {r['peak_mib'] / 1024:5.1f} GiB"
              + (f" calls per engine {r['calls_per_engine']}"
                 if len(engines) > 1 else "")
              + (f" bound {r['bound_s']:6.1f}s x{r['x_bound']:.2f}"
                 if rates else ""), flush=True)
        g = r["engine"]
        if "computed" in g:
            print(f"         engine: steps {g.get('steps', 0)} computed "
                  f"{g['computed']} for {g['needed']} needed "
                  f"(x{g['computed'] / max(1, g['needed']):.2f}), recomputed "
                  f"{g.get('recomputed', 0)}, preemptions "
                  f"{g.get('preemptions', 0)} (most of one sequence "
                  f"{g.get('preempted_max', 0)}), evictions "
                  f"{g.get('evictions', 0)}, new prompts held "
                  f"{g.get('holds', 0)} times", flush=True)
        if g.get("decode_steps") or g.get("mixed_steps"):
            ds, ms = g.get("decode_steps", 0), g.get("mixed_steps", 0)
            print(f"         backend: {ds} decode steps in "
                  f"{g.get('decode_s', 0):.2f}s "
                  f"({1e3 * g.get('decode_s', 0) / max(1, ds):.2f} ms each), "
                  f"{ms} steps with prompt tokens in {g.get('mixed_s', 0):.2f}s "
                  f"({1e3 * g.get('mixed_s', 0) / max(1, ms):.1f} ms each)",
                  flush=True)
        for e in r["error_samples"]:
            print(f"           error: {e}", flush=True)
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
