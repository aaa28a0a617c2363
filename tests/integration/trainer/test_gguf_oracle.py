"""The GGUF reader and `lisa convert` against the reference implementations.

The test writes small GGUF v3 files with the `gguf` package (llama.cpp's
own writer) from the tiny random models of tests/fixtures (llama-tiny:
LlamaForCausalLM, tied like SmolLM2; qwen2-tiny: q/k/v biases), naming and
permuting tensors as llama.cpp's converter does, in F32, F16, BF16, Q8_0,
Q4_0 and Q4_1. Then:

- every tensor lisa reads equals the gguf package's dequantization (with
  Llama's q/k row permutation undone), and the F32 file gives back the
  fixture's weights exactly;
- lisa's logits from the F32 file and from its converted directory equal
  transformers' logits of the fixture (tests/fixtures, computed by
  transformers in float32);
- where torch is installed, transformers' own GGUF loading gives the same
  weights as `lisa convert` and the same logits as lisa, for every type,
  and transformers loads the converted directory to the same logits;
- the tokenizer `lisa convert` writes tokenizes the corpus as transformers'
  GGUF tokenizer does (the Qwen3 vocabulary, written as GGUF).
"""
import json
import os
import subprocess
import sys
import unicodedata

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

SRC = os.environ.get("LISA_SOURCE_DIR", os.path.join(
    os.path.dirname(__file__), "..", "..", ".."))
BINDIR = os.environ.get("LISA_BINARY_DIR",
                        os.path.join(SRC, "build", "default"))
LISA = os.path.join(BINDIR, "bin", "lisa")
TOOL = os.path.join(BINDIR, "tests", "bin", "gguf_tool")
FIX = os.path.join(SRC, "tests", "fixtures")
sys.path.insert(0, os.path.join(SRC, "tests", "integration", "tokenizer"))

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
TYPES = {"F32": QT.F32, "F16": QT.F16, "BF16": QT.BF16, "Q8_0": QT.Q8_0,
         "Q4_0": QT.Q4_0, "Q4_1": QT.Q4_1}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".", 3)
    return f"blk.{parts[2]}.{LAYER[parts[3]]}"


def permute(w, heads):
    """llama.cpp's converter: Llama's q/k rows, interleaved per head."""
    return (w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def unpermute(w, heads):
    return (w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def toy_tokenizer(vocab_size):
    """A byte-level BPE of vocab_size tokens: the 256 bytes, merges of
    letter pairs, and two ChatML control tokens."""
    bs = (list(range(ord("!"), ord("~") + 1)) +
          list(range(ord("\xa1"), ord("\xac") + 1)) +
          list(range(ord("\xae"), ord("\xff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_tok = {b: chr(c) for b, c in zip(bs, cs)}
    tokens = [byte_tok[b] for b in range(256)]
    merges = []
    letters = "etaoinshrdlucmfw"
    for a in letters:
        for b in letters:
            if len(tokens) >= vocab_size - 2:
                break
            merges.append(f"{a} {b}")
            tokens.append(a + b)
    while len(tokens) < vocab_size - 2:
        a, b = tokens[256 + len(merges) % 64], byte_tok[ord(" ")]
        merges.append(f"{b} {a}")
        tokens.append(b + a)
    tokens += ["<|im_start|>", "<|im_end|>"]
    types = [1] * (vocab_size - 2) + [3, 3]
    return tokens, types, merges


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] "
          "+ '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
          "{% endif %}")


def write_gguf(path, cfg, weights, arch, qtype, tok):
    """Writes weights (Hugging Face names) as llama.cpp would."""
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    theta = (cfg.get("rope_parameters") or {}).get(
        "rope_theta", cfg.get("rope_theta", 10000.0))
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_rope_freq_base(theta)
    w.add_vocab_size(cfg["vocab_size"])
    tokens, types, merges, pre = tok
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)
    stored = {}
    for hf, a in weights.items():
        if cfg.get("tie_word_embeddings") and hf == "lm_head.weight":
            continue
        a = a.astype(np.float32)
        if arch == "llama" and "q_proj" in hf:
            a = permute(a, heads)
        elif arch == "llama" and "k_proj" in hf:
            a = permute(a, kv)
        if a.ndim == 1 or qtype == QT.F32:
            w.add_tensor(gguf_name(hf), a)
            stored[hf] = (a, QT.F32)
        elif qtype == QT.F16:
            w.add_tensor(gguf_name(hf), a.astype(np.float16))
            stored[hf] = (a.astype(np.float16), QT.F16)
        else:
            q = gguf.quants.quantize(a, qtype)
            w.add_tensor(gguf_name(hf), q, raw_shape=q.shape, raw_dtype=qtype)
            stored[hf] = (q, qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return stored


def fixture(name):
    d = os.path.join(FIX, name)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    return d, cfg, load_file(os.path.join(d, "model.safetensors")), \
        load_file(os.path.join(d, "fixture.safetensors"))


def lisa_logits(model, ids):
    p = subprocess.run([TOOL, "logits", model], input=json.dumps(ids).encode(),
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    return np.array(json.loads(p.stdout), dtype=np.float32).reshape(len(ids), -1)


def lisa_tensor(path, hf):
    p = subprocess.run([TOOL, "tensor", path, hf], capture_output=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    return np.array(json.loads(p.stdout), dtype=np.float32)


def convert(path, out, dtype="f32"):
    p = subprocess.run([LISA, "convert", path, out, "--dtype", dtype],
                       capture_output=True, timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    return out


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


FAMILIES = [("llama-tiny/tied", "llama", "smollm"),
            ("qwen2-tiny/untied", "qwen2", "qwen2")]


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f[1])
def test_usage_f32_file_gives_transformers_logits(tmp_path, fam):
    """A GGUF of the fixture's weights: lisa's logits from the file and
    from `lisa convert`'s directory are transformers' logits."""
    name, arch, pre = fam
    d, cfg, weights, fx = fixture(name)
    tokens, types, merges = toy_tokenizer(cfg["vocab_size"])
    path = str(tmp_path / "m.gguf")
    write_gguf(path, cfg, weights, arch, QT.F32, (tokens, types, merges, pre))
    off = fx["seq_offsets"]
    ids = fx["tokens"][off[0]:off[1]].tolist()
    want = fx["logits"][off[0]:off[1]]
    assert rel(lisa_logits(path, ids), want) < 1e-5
    out = convert(path, str(tmp_path / "hf"))
    assert rel(lisa_logits(out, ids), want) < 1e-5
    got = load_file(os.path.join(out, "model.safetensors"))
    for hf, a in weights.items():
        if cfg.get("tie_word_embeddings") and hf == "lm_head.weight":
            continue
        np.testing.assert_array_equal(got[hf], a, err_msg=hf)
    with open(os.path.join(out, "config.json")) as f:
        c2 = json.load(f)
    assert c2["model_type"] == arch
    assert c2["tie_word_embeddings"] == cfg["tie_word_embeddings"]
    with open(os.path.join(out, "tokenizer_config.json")) as f:
        tc = json.load(f)
    assert tc["chat_template"] == CHATML
    assert tc["eos_token"] == "<|im_end|>"


@pytest.mark.parametrize("qname", sorted(TYPES))
def test_dequantization_matches_gguf_package(tmp_path, qname):
    d, cfg, weights, fx = fixture("llama-tiny/tied")
    tokens, types, merges = toy_tokenizer(cfg["vocab_size"])
    path = str(tmp_path / "m.gguf")
    stored = write_gguf(path, cfg, weights, "llama", TYPES[qname],
                        (tokens, types, merges, "smollm"))
    reader = gguf.GGUFReader(path)
    by_name = {t.name: t for t in reader.tensors}
    checked = 0
    for hf in ("model.layers.0.self_attn.q_proj.weight",
               "model.layers.1.self_attn.k_proj.weight",
               "model.layers.0.mlp.down_proj.weight",
               "model.embed_tokens.weight", "model.norm.weight"):
        t = by_name[gguf_name(hf)]
        want = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        want = want.reshape(weights[hf].shape)
        if "q_proj" in hf:
            want = unpermute(want, cfg["num_attention_heads"])
        elif "k_proj" in hf:
            want = unpermute(want, cfg["num_key_value_heads"])
        got = lisa_tensor(path, hf).reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-7, err_msg=hf)
        checked += 1
    assert checked == 5 and stored
    # a quantized model still computes close to the original
    off = fx["seq_offsets"]
    ids = fx["tokens"][off[0]:off[1]].tolist()
    err = rel(lisa_logits(path, ids), fx["logits"][off[0]:off[1]])
    bound = {"F32": 1e-5, "F16": 2e-3, "BF16": 2e-2, "Q8_0": 2e-2,
             "Q4_0": 0.3, "Q4_1": 0.3}[qname]
    assert err < bound, f"{qname}: logits off by {err}"


@pytest.mark.skipif(not HAVE_TORCH, reason="transformers' GGUF loading "
                    "needs torch")
@pytest.mark.parametrize("qname", sorted(TYPES))
@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f[1])
def test_transformers_gguf_loading_agrees(tmp_path, fam, qname):
    import torch
    from transformers import AutoModelForCausalLM
    name, arch, pre = fam
    d, cfg, weights, fx = fixture(name)
    tokens, types, merges = toy_tokenizer(cfg["vocab_size"])
    write_gguf(str(tmp_path / "m.gguf"), cfg, weights, arch, TYPES[qname],
               (tokens, types, merges, pre))
    model = AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file="m.gguf", dtype=torch.float32).eval()
    out = convert(str(tmp_path / "m.gguf"), str(tmp_path / "hf"))
    got = load_file(os.path.join(out, "model.safetensors"))
    ref = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    for hf, a in got.items():
        np.testing.assert_allclose(a, ref[hf], rtol=0, atol=1e-6,
                                   err_msg=hf)
    off = fx["seq_offsets"]
    ids = fx["tokens"][off[0]:off[1]].tolist()
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].numpy()
    assert rel(lisa_logits(str(tmp_path / "m.gguf"), ids), want) < 1e-5
    assert rel(lisa_logits(out, ids), want) < 1e-5
    # and transformers loads the converted directory to the same logits
    conv = AutoModelForCausalLM.from_pretrained(out,
                                                dtype=torch.float32).eval()
    with torch.no_grad():
        again = conv(torch.tensor([ids])).logits[0].numpy()
    assert rel(again, want) < 1e-5


def qwen_gguf_vocab():
    with open(os.path.join(FIX, "qwen3-tokenizer", "tokenizer.json")) as f:
        tj = json.load(f)
    vocab = tj["model"]["vocab"]
    n = max(max(vocab.values()),
            max(a["id"] for a in tj["added_tokens"])) + 1
    tokens, types = [None] * n, [1] * n
    for t, i in vocab.items():
        tokens[i] = t
    for a in tj["added_tokens"]:
        tokens[a["id"]] = a["content"]
        types[a["id"]] = 3 if a["special"] else 4
    merges = [m if isinstance(m, str) else " ".join(m)
              for m in tj["model"]["merges"]]
    return tokens, types, merges


def test_tokenizer_matches_transformers_gguf_tokenizer(tmp_path):
    """The Qwen3 vocabulary written as GGUF, converted back: lisa
    tokenizes the corpus as `tokenizers` does with the original
    tokenizer.json, and (with torch) as transformers' GGUF tokenizer."""
    from tokenizers import Tokenizer
    import corpus
    tokens, types, merges = qwen_gguf_vocab()
    V = len(tokens)
    cfg = {"num_hidden_layers": 1, "max_position_embeddings": 64,
           "hidden_size": 8, "intermediate_size": 16,
           "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 4, "rms_norm_eps": 1e-6, "vocab_size": V,
           "tie_word_embeddings": True}
    rng = np.random.default_rng(7)
    weights = {"model.embed_tokens.weight": rng.normal(size=(V, 8)) * 0.02,
               "model.norm.weight": np.ones(8)}
    for hf, shape in (("input_layernorm.weight", (8,)),
                      ("self_attn.q_proj.weight", (8, 8)),
                      ("self_attn.q_proj.bias", (8,)),
                      ("self_attn.k_proj.weight", (4, 8)),
                      ("self_attn.k_proj.bias", (4,)),
                      ("self_attn.v_proj.weight", (4, 8)),
                      ("self_attn.v_proj.bias", (4,)),
                      ("self_attn.o_proj.weight", (8, 8)),
                      ("post_attention_layernorm.weight", (8,)),
                      ("mlp.gate_proj.weight", (16, 8)),
                      ("mlp.up_proj.weight", (16, 8)),
                      ("mlp.down_proj.weight", (8, 16))):
        weights["model.layers.0." + hf] = rng.normal(size=shape) * 0.02
    path = str(tmp_path / "q.gguf")
    write_gguf(path, cfg, weights, "qwen2", QT.F16,
               (tokens, types, merges, "qwen2"))
    out = convert(path, str(tmp_path / "hf"))
    orig = Tokenizer.from_file(os.path.join(FIX, "qwen3-tokenizer",
                                            "tokenizer.json"))
    # GGUF keeps no normalizer (nor does transformers' GGUF tokenizer):
    # the original, which NFC-normalizes, is the oracle for NFC texts
    refs = [lambda t: (orig.encode(t, add_special_tokens=False).ids
                       if unicodedata.normalize("NFC", t) == t else None)]
    if HAVE_TORCH:
        import transformers
        tt = transformers.AutoTokenizer.from_pretrained(str(tmp_path),
                                                        gguf_file="q.gguf")
        refs.append(lambda t: tt.encode(t, add_special_tokens=False))
    texts = [t for t in corpus.generated(seed=99, n=400) if t]
    texts += corpus.CODE + corpus.MATH
    p = subprocess.run([LISA, "tokenize", "--tokenizer", out, "--json"],
                       input=json.dumps(texts).encode(), capture_output=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    got = json.loads(p.stdout)
    assert len(got) == len(texts) and len(texts) > 50
    assert sum(unicodedata.normalize("NFC", t) == t for t in texts) > 100
    for ref in refs:
        bad = [(t, g) for t, g in zip(texts, got)
               if ref(t) is not None and g != ref(t)]
        assert not bad, f"{len(bad)} texts differ, first: {bad[0][0]!r}"


@pytest.mark.skipif(not (HAVE_TORCH and os.environ.get("LISA_GGUF_FILE")),
                    reason="a real GGUF file (LISA_GGUF_FILE=path, e.g. "
                    "SmolLM2-135M-Instruct) and torch")
def test_real_file_logits_match_transformers(tmp_path):
    """On demand: a published GGUF file, lisa against transformers' own
    GGUF loading, from the file and from `lisa convert`'s directory, and
    the tokenizer on the corpus."""
    import shutil
    import torch
    import transformers
    import corpus
    src = os.environ["LISA_GGUF_FILE"]
    path = str(tmp_path / "m.gguf")
    shutil.copyfile(src, path)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(tmp_path), gguf_file="m.gguf", dtype=torch.float32).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path),
                                                     gguf_file="m.gguf")
    ids = tok.encode("The capital of France is Paris, and the capital of "
                     "Italy is", add_special_tokens=False)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].numpy()
    out = convert(path, str(tmp_path / "hf"), "f32")
    for m in (path, out):
        err = rel(lisa_logits(m, ids), want)
        assert err < 1e-4, f"{m}: logits off by {err}"
    texts = [t for t in corpus.generated(seed=99, n=200) if t]
    p = subprocess.run([LISA, "tokenize", "--tokenizer", out, "--json"],
                       input=json.dumps(texts).encode(), capture_output=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr.decode()
    got = json.loads(p.stdout)
    bad = [t for t, g in zip(texts, got)
           if g != tok.encode(t, add_special_tokens=False)]
    assert not bad, f"{len(bad)} texts differ, first: {bad[0]!r}"
