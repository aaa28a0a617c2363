"""The PyTorch peer of bench/trainer: the stack a practitioner trains a
Qwen3-4B-shaped model with on one GPU, measured in the same run as lisa's
trainer, with the same shapes and figure names (run.sh pairs them).

Stack: transformers with Liger kernels (liger-kernel 0.8.5,
apply_liger_kernel_to_qwen3 with rms_norm, rope, swiglu and
fused_linear_cross_entropy on, so the logits are never materialised
whole) and cuDNN attention (torch.nn.attention.sdpa_kernel with
SDPBackend.CUDNN_ATTENTION; the flash backend only when cuDNN refuses the
shape; peer_attention_<n>k says which ran). The model: random weights, 36
layers, hidden 2560, 32 query and 8 key/value heads of 128, intermediate
9728, vocabulary 151936, tied embeddings.

  train_tok_s_<n>k, mfu_<n>k (4k, 16k, 32k, 64k)  forward+backward of one
      sequence, bf16 weights, optimizer excluded, the loss the mean
      cross-entropy of the next tokens; without gradient checkpointing
      when it fits, else with it (an out-of-memory error empties the cache
      and the length is tried again with checkpointing):
      peer_recompute_<n>k off|on; peer_mem_<n>k the peak of allocated
      device memory
  step_tok_s_4k, step_tok_s_16k  full training steps: forward+backward,
      gradient clipping at 1.0 and torch.optim.AdamW(fused=True), with
      mixed precision as verl's FSDP actor runs by default (fp32
      parameters, bf16 compute): parameters, gradients and AdamW moments
      in fp32, forward and backward under torch.autocast(bfloat16);
      checkpointing as above (peer_step_recompute_<n>k)
  decode_tok_s_b1, decode_tok_s_b64  model.generate with a static cache
      (one per batch size, reset between calls), its decode step
      torch.compile'd with mode="reduce-overhead" (CUDA graphs), 128-token
      prompts, 128 sampled new tokens per sequence, best of three after a
      warm-up call that compiles and records; plain transformers (no
      Liger), in a child process; peer_decode_graphs_<b> says whether the
      compiled step ran and how many graphs inductor skipped

MFU as trn_bench counts it: (6 N + 6 L H D T) T / time against 989
TFLOP/s, N the layers' matrices plus the tied LM head (no norms, no
embedding). Timed figures are medians of three runs after a warm-up.

  python3 torch_peer.py [LAYERS] [--quick] [--train-only] [--decode-only]
                        [--lengths 4k,16k]   (forward+backward at these
                        lengths only, no full steps)
                        [--decode-shape B:P] (decoding alone, batch B
                        after P-token prompts: decode_tok_s_bB_pP and
                        decode_step_ms_bB_pP, the mean one-token step,
                        as trn_bench --batch B --prompt P prints it)
"""
import gc
import os
import subprocess
import sys
import time
from functools import partial

import torch

LIGER_VERSION = "0.8.5"
TRAIN_LENGTHS = ((4096, "4k"), (16384, "16k"), (32768, "32k"), (65536, "64k"))
STEP_LENGTHS = ((4096, "4k"), (16384, "16k"))
PEAK_FLOPS = 989e12
GIB = float(1 << 30)


def med(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def model_flops(layers, T):
    """Forward+backward model FLOPs of one sequence of T tokens, as
    trn_bench's s_flops: 6 N + 6 L H D T per token."""
    C, I, H, Hk, D, V = 2560, 9728, 32, 8, 128, 151936
    n_layer = C * (H + 2 * Hk) * D + H * D * C + 3 * C * I
    N = layers * n_layer + V * C  # + the LM head (tied)
    return (6 * N + 6 * layers * H * D * T) * T


def config(layers):
    from transformers import Qwen3Config

    return Qwen3Config(hidden_size=2560, intermediate_size=9728,
                       num_hidden_layers=layers, num_attention_heads=32,
                       num_key_value_heads=8, head_dim=128,
                       vocab_size=151936, max_position_embeddings=262144,
                       rope_theta=5e6, tie_word_embeddings=True,
                       attn_implementation="sdpa")


def new_model(layers, dtype):
    from transformers import Qwen3ForCausalLM

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(config(layers))
    return model.to(dtype)


def free_cuda():
    gc.collect()
    torch.cuda.empty_cache()


def attention_backends():
    """cuDNN first; flash only when cuDNN refuses."""
    from torch.nn.attention import SDPBackend

    return (("cudnn", SDPBackend.CUDNN_ATTENTION),
            ("flash", SDPBackend.FLASH_ATTENTION))


def set_checkpointing(model, on):
    """Every layer checkpointed (non-reentrant, as verl sets it) or
    none. Newer transformers name it activation checkpointing and keep
    gradient_checkpointing_* as deprecated aliases."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        if on:
            model.activation_checkpointing_enable(
                activation_checkpointing_kwargs=kwargs)
        else:
            model.activation_checkpointing_disable()
    elif on:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_disable()


def fwd_bwd(model, ids, backend, autocast):
    """One forward+backward; the attention backend holds through the
    backward pass too (checkpointing recomputes the forward there)."""
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(backend):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()


def timed(fn, reps):
    """Median seconds of reps calls of fn after one warm-up call."""
    times = []
    for it in range(reps + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        if it > 0:
            times.append(time.perf_counter() - t0)
    return med(times)


def measure(model, run, reset, reps, what):
    """Times run(backend) without gradient checkpointing, then, after an
    out-of-memory error, with it; cuDNN attention first, flash when cuDNN
    refuses. Returns (seconds, checkpointing, attention, peak bytes) or
    None when even checkpointing runs out of memory."""
    backends = attention_backends()
    for ckpt in (False, True):
        set_checkpointing(model, ckpt)
        for i, (name, backend) in enumerate(backends):
            failure = None
            torch.cuda.reset_peak_memory_stats()
            try:
                t = timed(lambda: run(backend), reps)
                return t, ckpt, name, torch.cuda.max_memory_allocated()
            except torch.cuda.OutOfMemoryError:
                failure = "out of memory"
            except RuntimeError as e:  # cuDNN refused the shape
                if i == len(backends) - 1:
                    raise
                failure = (str(e).strip().splitlines() or ["?"])[0]
            # out of the except block: its traceback no longer holds the
            # failed pass's tensors
            reset()
            free_cuda()
            mode = "with" if ckpt else "without"
            print(f"# {what}: {name} attention {mode} checkpointing: "
                  f"{failure}", file=sys.stderr, flush=True)
            if failure == "out of memory":
                break  # the other backend does not make it fit
    return None


def apply_liger():
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3
    except ImportError as e:
        sys.exit(f"torch_peer: liger-kernel is not importable ({e}); "
                 f"pip install liger-kernel=={LIGER_VERSION} (run.sh takes "
                 "the wheel from LISA_PEER_WHEELS)")
    # patches transformers' Qwen3 classes; models built after it use them
    apply_liger_kernel_to_qwen3(rope=True, rms_norm=True, swiglu=True,
                                cross_entropy=False,
                                fused_linear_cross_entropy=True)


def fwd_bwd_figures(layers, lengths, reps):
    """train_tok_s_ and mfu_ for each length: bf16 weights, no optimizer."""
    model = new_model(layers, torch.bfloat16)
    model.train()
    reset = partial(model.zero_grad, set_to_none=True)
    for T, tag in lengths:
        ids = torch.randint(0, 150000, (1, T), device="cuda")
        r = measure(model, partial(fwd_bwd, model, ids, autocast=False),
                    reset, reps, f"train {tag}")
        reset()
        free_cuda()
        if r is None:
            print(f"train_{tag} failed: out of memory with checkpointing",
                  flush=True)
            continue
        t, ckpt, attn, peak = r
        mfu = 100 * model_flops(layers, T) / t / PEAK_FLOPS
        print(f"train_tok_s_{tag} {T / t:.0f} tok/s")
        print(f"mfu_{tag} {mfu:.1f} %")
        print(f"peer_recompute_{tag} {'on' if ckpt else 'off'}")
        print(f"peer_attention_{tag} {attn}")
        print(f"peer_mem_{tag} {peak / GIB:.1f} GiB peak", flush=True)


def adamw_step(model, opt, params, ids, backend):
    opt.zero_grad(set_to_none=True)
    fwd_bwd(model, ids, backend, autocast=True)
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


def step_figures(layers, lengths, reps):
    """step_tok_s_ for each length: fp32 parameters, bf16 compute under
    autocast, gradient clipping and fused AdamW."""
    model = new_model(layers, torch.float32)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0, fused=True)
    reset = partial(opt.zero_grad, set_to_none=True)
    for T, tag in lengths:
        ids = torch.randint(0, 150000, (1, T), device="cuda")
        r = measure(model, partial(adamw_step, model, opt, params, ids),
                    reset, reps, f"step {tag}")
        reset()
        free_cuda()
        if r is None:
            print(f"step_{tag} failed: out of memory with checkpointing",
                  flush=True)
            continue
        t, ckpt, attn, peak = r
        print(f"step_tok_s_{tag} {T / t:.0f} tok/s")
        print(f"peer_step_recompute_{tag} {'on' if ckpt else 'off'}")
        print(f"peer_step_attention_{tag} {attn}")
        print(f"peer_step_mem_{tag} {peak / GIB:.1f} GiB peak", flush=True)


def train(layers, quick, lengths=None):
    from importlib.metadata import version

    apply_liger()
    print(f"peer_stack torch {torch.__version__} transformers "
          f"{version('transformers')} liger-kernel {version('liger-kernel')}",
          flush=True)
    reps = 1 if quick else 3
    # each model is gone when its function returns
    steps = not quick and lengths is None
    if lengths is None:
        lengths = TRAIN_LENGTHS[:1] if quick else TRAIN_LENGTHS
    fwd_bwd_figures(layers, lengths, reps)
    free_cuda()
    if steps:
        step_figures(layers, STEP_LENGTHS, reps)
        free_cuda()


def decode(layers, shapes=((1, 128), (64, 128))):
    from torch._dynamo.utils import counters
    from transformers import CompileConfig, StaticCache

    model = new_model(layers, torch.bfloat16)
    model.eval()
    compile_config = CompileConfig(mode="reduce-overhead", fullgraph=False,
                                   dynamic=False)
    for batch, prompt in shapes:
        tag = f"b{batch}" if prompt == 128 else f"b{batch}_p{prompt}"
        ids = torch.randint(0, 150000, (batch, prompt), device="cuda")
        # one cache for every call of this batch, reset in place: the
        # recorded graphs keep reading the same addresses (generate would
        # make a new cache each call, and the graphs would be recorded anew)
        cache = StaticCache(config=model.config, max_cache_len=prompt + 128)

        def generate(new=128):
            cache.reset()
            with torch.no_grad():
                model.generate(ids, attention_mask=torch.ones_like(ids),
                               max_new_tokens=new, min_new_tokens=new,
                               do_sample=True, temperature=1.0, top_p=1.0,
                               top_k=0, eos_token_id=None, pad_token_id=0,
                               past_key_values=cache,
                               compile_config=compile_config)

        def best_of(new):
            best = 1e9
            for _ in range(3):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                generate(new)
                torch.cuda.synchronize()
                best = min(best, time.perf_counter() - t0)
            return best

        skips = int(counters["inductor"]["cudagraph_skips"])
        generate()  # compiles the decode step and records its graphs
        best = best_of(128)
        skips = int(counters["inductor"]["cudagraph_skips"]) - skips
        compiled = getattr(model, "_compiled_call", None) is not None
        print(f"decode_tok_s_{tag} {batch * 128 / best:.0f} tok/s")
        print(f"peer_decode_graphs_{tag} "
              f"{'compiled' if compiled else 'eager'}, {skips} skipped",
              flush=True)
        if prompt != 128:  # the mean one-token step: less the prompt's
            first = best_of(1)
            print(f"decode_step_ms_{tag} {1e3 * (best - first) / 127:.3f} ms",
                  flush=True)


def main():
    args = sys.argv[1:]
    layers = int(args[0]) if args and args[0].isdigit() else 36
    quick = "--quick" in args
    if "--decode-shape" in args:  # B:P, one decode figure (and its step)
        i = args.index("--decode-shape")
        try:
            b, p = (int(x) for x in args[i + 1].split(":"))
        except (IndexError, ValueError):
            sys.exit("--decode-shape: BATCH:PROMPT, for example 8:2500")
        decode(layers, ((b, p),))
        return
    if "--decode-only" in args:
        decode(layers)
        return
    lengths = None
    if "--lengths" in args:
        i = args.index("--lengths")
        tags = args[i + 1].split(",") if i + 1 < len(args) else []
        lengths = tuple(x for x in TRAIN_LENGTHS if x[1] in tags)
        if not lengths or len(lengths) != len(tags):
            sys.exit("--lengths: a comma-separated list of "
                     + ", ".join(t for _, t in TRAIN_LENGTHS))
    train(layers, quick, lengths)
    if "--train-only" in args:
        return
    # the decode peer runs plain transformers: Liger's patches are
    # process-wide, so it gets a process of its own (this one's memory is
    # back in the driver's hands by now, bar its context)
    sys.stdout.flush()
    rc = subprocess.call([sys.executable, os.path.abspath(__file__),
                          str(layers), "--decode-only"])
    if rc != 0:
        sys.exit(rc)


if __name__ == "__main__":
    main()
