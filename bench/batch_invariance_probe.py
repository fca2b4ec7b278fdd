"""Where the unfused path is not batch-invariant, measured on this host — the table in docs/NUMERICS.md.
A measurement, not a test.

    python bench/batch_invariance_probe.py

1. ``torch.mm`` in bf16 (the unfused GEMM): the same rows computed at M = 1 and inside a batch, and in
   batches of other M, per K: how many elements differ.
2. gloo ``reduce_scatter_tensor`` in bf16 (the unfused reduction and the oracle): every rank's partial
   has identical rows in every chunk, so an order-independent reduction gives every shard the same bits;
   how many elements of each shard differ from shard 0, per W.
"""

from __future__ import annotations

import os
import sys

import torch

KS = (64, 256, 1024, 1088, 1536, 2048, 4096)
WORLD_SIZES = (2, 3, 4, 8)


def mm_by_m(N: int = 512, rows: int = 256, seed: int = 0) -> list[str]:
    g = torch.Generator().manual_seed(seed)
    lines = ["| K | M = 1 vs batch (of rows x N) | M = 2, 3, 17, 100 vs batch |", "|---|---|---|"]
    for K in KS:
        w = torch.randn(N, K, generator=g).bfloat16()
        x = torch.randn(rows, K, generator=g).bfloat16()
        full = x @ w.T
        single = sum(int((x[i : i + 1].clone() @ w.T != full[i : i + 1]).sum()) for i in range(rows))
        other = sum(int((x[i : i + m].clone() @ w.T != full[i : i + m]).sum())
                    for m in (2, 3, 17, 100) for i in range(0, rows - m, 37))
        lines.append(f"| {K} | {single} of {rows * N} | {other} |")
    return lines


def _rs_rank(rank: int, W: int, port: int, queue) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=W)
    chunk = torch.randn(64, 64, generator=torch.Generator().manual_seed(100 + rank)).bfloat16()
    out = torch.empty(64, 64, dtype=torch.bfloat16)
    dist.reduce_scatter_tensor(out, chunk.repeat(W, 1))  # every chunk of this rank's input identical
    shards = [torch.empty_like(out) for _ in range(W)]
    dist.all_gather(shards, out)
    if rank == 0:
        queue.put([int((s.view(torch.int16) != shards[0].view(torch.int16)).sum()) for s in shards])
    dist.destroy_process_group()


def reduce_scatter_by_owner() -> list[str]:
    import torch.multiprocessing as mp

    lines = ["| W | elements of shards 0..W-1 that differ from shard 0 (of 4096) |", "|---|---|"]
    for W in WORLD_SIZES:
        queue = mp.get_context("spawn").SimpleQueue()
        mp.start_processes(_rs_rank, args=(W, 29800 + W, queue), nprocs=W, start_method="spawn")
        lines.append(f"| {W} | {queue.get()} |")
    return lines


def main() -> int:
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print("\n".join(mm_by_m()))
    print()
    print("\n".join(reduce_scatter_by_owner()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
