"""The attention peer of trn_cuda_kernels_test --bench-attn: PyTorch's
scaled_dot_product_attention on the cuDNN backend
(torch.nn.attention.sdpa_kernel(SDPBackend.CUDNN_ATTENTION)) at the shapes
lisa's kernel is timed at: causal, 32 query heads and 8 key/value heads of
128, one sequence of 4k, 16k and 32k tokens, bf16.

Grouped-query attention through enable_gqa=True; where cuDNN refuses that,
K and V are expanded to the 32 query heads first (outside the timing) and
the line says so. Forward FLOPs counted as lisa counts them:
2 * 2 * T * T / 2 * H * D (causal); forward+backward as 3.5 times that
(the backward pass does 2.5 forwards' worth of products). Each figure is
the median of 7 batches of back-to-back calls timed with CUDA events after
3 warm-ups; a batch does about 20 TFLOP.

  python3 attn_peer.py [T...]
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

H, HK, D = 32, 8, 128


def timed(fn, flops):
    reps = max(1, int(2e13 / flops))
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(7):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3 / reps)
    times.sort()
    return times[3]


def inputs(T, gqa):
    g = torch.Generator(device="cuda").manual_seed(T)
    hk = HK if gqa else H

    def mk(h):
        return torch.randn(1, h, T, D, device="cuda", dtype=torch.bfloat16,
                           generator=g, requires_grad=True)

    return mk(H), mk(hk), mk(hk)


def attn(q, k, v, gqa):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                          enable_gqa=gqa)


def run(T):
    flops = 4.0 * T * T / 2 * D * H
    for gqa in (True, False):
        q, k, v = inputs(T, gqa)
        if not gqa:  # the same values as the grouped heads would see
            q0, k0, v0 = inputs(T, True)
            with torch.no_grad():
                k.copy_(k0.repeat_interleave(H // HK, dim=1))
                v.copy_(v0.repeat_interleave(H // HK, dim=1))
        dout = torch.randn_like(q)
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                with torch.no_grad():
                    tf = timed(lambda: attn(q, k, v, gqa), flops)

                def fb():
                    o = attn(q, k, v, gqa)
                    o.backward(dout)
                    q.grad = k.grad = v.grad = None

                tb = timed(fb, 3.5 * flops)
        except RuntimeError as e:
            if gqa:
                print(f"cudnn T={T}: enable_gqa refused ({str(e)[:80]}); "
                      "expanding K/V")
                continue
            raise
        how = "gqa" if gqa else "K/V expanded"
        print(f"cudnn attn T={T:<6d} fwd {tf * 1e3:8.3f} ms "
              f"{flops / tf / 1e12:6.1f} TFLOP/s | fwd+bwd {tb * 1e3:8.3f} ms "
              f"{3.5 * flops / tb / 1e12:6.1f} TFLOP/s ({how})", flush=True)
        return


def main():
    lengths = [int(a) for a in sys.argv[1:]] or [4096, 16384, 32768]
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}")
    print(f"-- cuDNN attention, causal, H={H} Hk={HK} D={D} --")
    for T in lengths:
        run(T)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
