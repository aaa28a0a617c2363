"""lisa's tokenizer against Hugging Face `tokenizers` (the oracle).

Each test sends a whole corpus through one `lisa tokenize --json` /
`lisa detokenize --json` process call and compares every item with the
Rust implementation loaded from the same tokenizer.json.
"""
import json
import os
import random
import subprocess
import unicodedata

import pytest
from tokenizers import Tokenizer

import corpus

SRC = os.environ.get("LISA_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..", ".."))
BIN = os.path.join(os.environ.get("LISA_BINARY_DIR",
                                  os.path.join(SRC, "build", "default")),
                   "bin", "lisa")
QWEN = os.path.join(SRC, "tests", "fixtures", "qwen3-tokenizer")
BYTE = os.path.join(SRC, "tests", "fixtures", "byte-tokenizer")


def run(args, stdin):
    p = subprocess.run([BIN] + args, input=stdin, capture_output=True,
                       timeout=120)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def lisa_encode(tdir, texts, special=True):
    args = ["tokenize", "--tokenizer", tdir, "--json"]
    if not special:
        args.append("--no-special")
    rc, out, err = run(args, json.dumps(texts).encode())
    assert rc == 0, err
    return json.loads(out)


def lisa_decode(tdir, id_lists, skip=False):
    args = ["detokenize", "--tokenizer", tdir, "--json"]
    if skip:
        args.append("--skip-special")
    rc, out, err = run(args, json.dumps(id_lists).encode())
    assert rc == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def qwen():
    return Tokenizer.from_file(os.path.join(QWEN, "tokenizer.json"))


@pytest.fixture(scope="module")
def qwen_nospecial():
    t = Tokenizer.from_file(os.path.join(QWEN, "tokenizer.json"))
    t.encode_special_tokens = True
    return t


def compare(texts, got, want):
    bad = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert len(got) == len(want)
    assert not bad, "%d mismatches, first: %r lisa=%r hf=%r" % (
        len(bad), bad[0][0][:200], bad[0][1][:40], bad[0][2][:40])


def test_known_ids(qwen):
    texts = ["Hello world", "<|im_start|>user\nhi<|im_end|>\n"]
    got = lisa_encode(QWEN, texts)
    assert got[0] == [9707, 1879]
    assert got[1] == [151644, 872, 198, 6023, 151645, 198]
    assert got == [e.ids for e in qwen.encode_batch(texts)]


def test_generated_corpus(qwen):
    texts = corpus.generated()
    want = [e.ids for e in qwen.encode_batch(texts,
                                             add_special_tokens=False)]
    compare(texts, lisa_encode(QWEN, texts), want)


def test_generated_corpus_special_as_text(qwen_nospecial):
    texts = corpus.generated(seed=99, n=400)
    want = [e.ids for e in qwen_nospecial.encode_batch(texts)]
    compare(texts, lisa_encode(QWEN, texts, special=False), want)


def test_every_code_point(qwen):
    # every BMP code point, a sample of the others (HF is slow on these)
    texts = corpus.per_codepoint(step=1, limit=0x10000)
    texts += corpus.per_codepoint(step=61, limit=0x110000)
    want = [e.ids for e in qwen.encode_batch(texts)]
    compare(texts, lisa_encode(QWEN, texts), want)


def test_seed_samples(qwen):
    texts = corpus.seed_samples(SRC)
    assert len(texts) > 50
    want = [e.ids for e in qwen.encode_batch(texts)]
    compare(texts, lisa_encode(QWEN, texts), want)


def test_round_trip_decode(qwen):
    texts = corpus.generated(seed=7, n=600) + corpus.seed_samples(SRC)
    ids = lisa_encode(QWEN, texts)
    got = lisa_decode(QWEN, ids)
    want = qwen.decode_batch(ids, skip_special_tokens=False)
    assert got == want
    # decoding what was encoded gives back the NFC text
    for t, g in zip(texts, got):
        assert g == unicodedata.normalize("NFC", t) or "\ufffd" in g or \
            any(c for c in t if unicodedata.category(c) == "Cn")


def test_decode_random_ids(qwen):
    # arbitrary id runs split multi-byte characters: invalid UTF-8 must be
    # replaced exactly as HF does; specials skipped on request
    rng = random.Random(5)
    n = qwen.get_vocab_size(with_added_tokens=True)
    lists = [[rng.randrange(n) for _ in range(rng.randrange(0, 30))]
             for _ in range(2000)]
    lists += [[rng.randrange(150000, n) for _ in range(5)] for _ in range(50)]
    assert lisa_decode(QWEN, lists) == qwen.decode_batch(
        lists, skip_special_tokens=False)
    assert lisa_decode(QWEN, lists, skip=True) == qwen.decode_batch(
        lists, skip_special_tokens=True)


def test_byte_tokenizer_matches_hf():
    hf = Tokenizer.from_file(os.path.join(BYTE, "tokenizer.json"))
    assert hf.get_vocab_size(with_added_tokens=True) <= 300
    texts = corpus.generated(seed=3, n=300)
    want = [e.ids for e in hf.encode_batch(texts)]
    got = lisa_encode(BYTE, texts)
    compare(texts, got, want)
    assert lisa_decode(BYTE, got) == hf.decode_batch(
        got, skip_special_tokens=False)


def test_cli_errors():
    rc, _, err = run(["tokenize", "--tokenizer", QWEN], b"bad \xff utf8")
    assert rc == 1 and "UTF-8" in err
    rc, _, err = run(["detokenize", "--tokenizer", QWEN], b"[1, 2,")
    assert rc == 1 and "JSON" in err
    rc, _, err = run(["detokenize", "--tokenizer", QWEN], b"[999999]")
    assert rc == 1 and "unknown token id" in err
    rc, _, err = run(["detokenize", "--tokenizer", QWEN], b'["a"]')
    assert rc == 1
    rc, _, err = run(["tokenize", "--tokenizer", "/nonexistent"], b"x")
    assert rc == 1 and "cannot load" in err
    rc, out, _ = run(["tokenize", "--tokenizer", QWEN], b"Hello world")
    assert rc == 0 and json.loads(out) == [9707, 1879]
    rc, out, _ = run(["detokenize", "--tokenizer", QWEN], b"[9707, 1879]")
    assert rc == 0 and out == b"Hello world"


def test_added_token_flags(tmp_path):
    """lstrip / rstrip / single_word / normalized added tokens, on a copy
    of the byte-level tokenizer, against HF."""
    with open(os.path.join(BYTE, "tokenizer.json"), encoding="utf-8") as f:
        spec = json.load(f)
    extra = [("<mask>", dict(lstrip=True, special=True)),
             ("[end]", dict(rstrip=True, special=False)),
             ("word", dict(single_word=True, normalized=True)),
             ("caf\u00e9", dict(normalized=True)),
             ("<both>", dict(lstrip=True, rstrip=True, special=True))]
    next_id = max(t["id"] for t in spec["added_tokens"]) + 1
    for content, flags in extra:
        tok = {"id": next_id, "content": content, "single_word": False,
               "lstrip": False, "rstrip": False, "normalized": False,
               "special": False}
        tok.update(flags)
        spec["added_tokens"].append(tok)
        next_id += 1
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec),
                                             encoding="utf-8")
    hf = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    pieces = ["<mask>", "[end]", "word", "caf\u00e9", "cafe\u0301", "<both>",
              " ", "  ", "\t", "\n", "a", "swordfish", "word!", "x", "é",
              "\u3000", "<|im_end|>"]
    rng = random.Random(8)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randrange(1, 9)))
             for _ in range(1500)]
    want = [e.ids for e in hf.encode_batch(texts)]
    compare(texts, lisa_encode(str(tmp_path), texts), want)
