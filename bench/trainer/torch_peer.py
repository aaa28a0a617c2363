"""The PyTorch + transformers peer of bench/trainer, same shapes and
metrics: Qwen3-4B-shaped random model in bf16 with SDPA attention.

  train_tok_s_4k / _16k  forward+backward of one sequence with gradient
                          checkpointing (optimizer excluded), loss over the
                          log-probs of the next tokens
  decode_tok_s_b1 / _b64  model.generate, 128-token prompts, 128 sampled
                          new tokens per sequence
"""
import sys
import time

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def main():
    layers = int(sys.argv[1]) if len(sys.argv) > 1 else 36
    quick = "--quick" in sys.argv
    decode_only = "--decode-only" in sys.argv
    cfg = Qwen3Config(hidden_size=2560, intermediate_size=9728,
                      num_hidden_layers=layers, num_attention_heads=32,
                      num_key_value_heads=8, head_dim=128, vocab_size=151936,
                      max_position_embeddings=262144, rope_theta=5e6,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    model.gradient_checkpointing_enable()
    model.train()
    for T, tag in ((4096, "4k"), (16384, "16k")):
        if (quick and T > 4096) or decode_only:
            continue
        ids = torch.randint(0, 150000, (1, T), device="cuda")
        times = []
        for it in range(4 if not quick else 2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            logits = model(input_ids=ids).logits[0, :-1].float()
            lp = torch.log_softmax(logits, -1).gather(
                -1, ids[0, 1:, None]).squeeze(-1)
            (-lp.mean()).backward()
            torch.cuda.synchronize()
            if it > 0:
                times.append(time.perf_counter() - t0)
            del logits, lp
            model.zero_grad(set_to_none=True)
        print(f"train_tok_s_{tag} {T / med(times):.0f} tok/s", flush=True)
    model.eval()
    model.gradient_checkpointing_disable()
    for batch, tag in ((1, "b1"), (64, "b64")):
        ids = torch.randint(0, 150000, (batch, 128), device="cuda")
        best = 1e9
        for _ in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.no_grad():
                model.generate(ids, attention_mask=torch.ones_like(ids),
                               max_new_tokens=128, min_new_tokens=128,
                               do_sample=True, temperature=1.0, top_p=1.0,
                               top_k=0, eos_token_id=None, pad_token_id=0)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        print(f"decode_tok_s_{tag} {batch * 128 / best:.0f} tok/s",
              flush=True)


if __name__ == "__main__":
    main()
