#!/usr/bin/env python3
"""The device's measured matrix rate and memory read rate (PyTorch), for the
engine benchmark's bound: bf16 products of 8192^3 (TFLOP/s) and a sum over
8 GiB of bf16 (GB/s read), medians of 10 timed runs after warm-up.

Usage: hw_rates.py OUT.json
"""
import json
import sys

import torch


def timed(fn, n=10):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    return sorted(ts)[len(ts) // 2]


def main():
    n = 8192
    x = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    t = timed(lambda: x @ y)
    tflops = 2 * n ** 3 / t / 1e12
    big = torch.ones(4 << 30, device="cuda", dtype=torch.bfloat16)
    tr = timed(lambda: big.sum())
    gbs = big.numel() * 2 / tr / 1e9
    r = {"matrix_tflops": tflops, "read_gbs": gbs,
         "device": torch.cuda.get_device_name()}
    json.dump(r, open(sys.argv[1], "w"))
    print(f"rates: {tflops:.0f} TFLOP/s bf16, {gbs:.0f} GB/s read ({r['device']})")


if __name__ == "__main__":
    main()
