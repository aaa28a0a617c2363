#!/usr/bin/env python3
"""A randomly initialised Qwen3 model directory, made by transformers.

Usage: python3 tests/gpu/make_random_qwen3.py OUTDIR [--shape 4b|tiny]
                                              [--tokenizer DIR]

Writes OUTDIR/config.json, OUTDIR/model*.safetensors (bf16, sharded with an
index for the 4B shape) and copies the tokenizer files from --tokenizer
(default: tests/fixtures/qwen3-tokenizer). The 4B shape is
Qwen3-4B-Instruct-2507's: 36 layers, hidden 2560, 32 query heads and 8
key/value heads of 128, MLP 9728, vocabulary 151936, tied embeddings.
The weights are transformers' own initialisation (normal, std 0.02) with a
fixed seed; no weights are downloaded.
"""
import argparse
import os
import shutil

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

SHAPES = {
    "4b": dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728,
               num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128,
               max_position_embeddings=262144, tie_word_embeddings=True),
    "tiny": dict(vocab_size=151936, hidden_size=128, intermediate_size=256,
                 num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32,
                 max_position_embeddings=32768, tie_word_embeddings=True),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="4b")
    ap.add_argument("--tokenizer", default=os.path.join(
        os.path.dirname(__file__), "..", "fixtures", "qwen3-tokenizer"))
    a = ap.parse_args()
    common = dict(rms_norm_eps=1e-6, attention_bias=False,
                  use_sliding_window=False, bos_token_id=151643,
                  eos_token_id=151645, torch_dtype="bfloat16")
    try:
        cfg = Qwen3Config(**SHAPES[a.shape], **common,
                          rope_parameters={"rope_type": "default",
                                           "rope_theta": 5000000.0})
    except TypeError:
        cfg = Qwen3Config(**SHAPES[a.shape], **common, rope_theta=5000000.0)
    torch.manual_seed(1)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(dev):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True,
                          max_shard_size="4GB")
    for f in os.listdir(a.tokenizer):
        src = os.path.join(a.tokenizer, f)
        if os.path.isfile(src) and f != "config.json":
            shutil.copy(src, os.path.join(a.out, f))
    n = sum(p.numel() for p in model.parameters())
    print(f"{a.out}: Qwen3 {a.shape}, {n / 1e9:.3f}B parameters, bf16")


if __name__ == "__main__":
    main()
