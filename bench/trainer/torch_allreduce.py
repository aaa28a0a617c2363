"""Peer measurement for bench/trainer: torch.distributed (NCCL) all-reduce
bus bandwidth on the same GPUs and buffer size as lisa's trn_dist.

    python3 torch_allreduce.py WORLD [MiB]
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, mib, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    n = mib * 1024 * 1024 // 4
    x = torch.zeros(n, dtype=torch.float32, device="cuda")
    best = 1e9
    for it in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        t = time.perf_counter() - t0
        if it > 0:
            best = min(best, t)
    if rank == 0:
        bw = 2.0 * (world - 1) / world * n * 4 / best / 1e9
        print(f"torch all-reduce {mib} MiB fp32: {best*1e3:.2f} ms, "
              f"bus bandwidth {bw:.1f} GB/s", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
    mp.spawn(run, args=(world, mib, 29512), nprocs=world, join=True)
