"""Helper of bench_tokenizer: writes the corpus, and measures HF tokenizers
on it (python; `encode` one text per call, and `encode_batch`, which uses
every core)."""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "tokenizer"))


def write_corpus(path):
    import corpus
    texts = corpus.seed_samples(ROOT) + corpus.generated(seed=42, n=3000)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(texts, f, ensure_ascii=False)


def measure(tokenizer, path, seconds):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(tokenizer, "tokenizer.json"))
    with open(path, encoding="utf-8") as f:
        texts = json.load(f)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    for name, run in (("encode", lambda: [tok.encode(t) for t in texts]),
                      ("encode_batch", lambda: tok.encode_batch(texts))):
        run()  # warm up (caches)
        t0 = time.perf_counter()
        rounds = 0
        while True:
            run()
            rounds += 1
            dt = time.perf_counter() - t0
            if dt >= seconds:
                break
        print("%s %.3f" % (name, nbytes * rounds / dt / 1e6))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--write-corpus")
    ap.add_argument("--tokenizer")
    ap.add_argument("--corpus")
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    if a.write_corpus:
        write_corpus(a.write_corpus)
    else:
        measure(a.tokenizer, a.corpus, a.seconds)
