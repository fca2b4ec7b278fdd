"""The oracle, exactly as CONTRACT.md defines it: per rank a torch GEMM (fp32 accumulation) on x_r zero-padded
to W*S rows, then ``reduce_scatter_tensor`` over the group (NCCL across GPUs; gloo on CPU or when ranks share a GPU,
staged through host memory). Deliberately independent of kernel/: it allocates, it syncs, it shares
no buffer or helper with the implementations it judges."""

from __future__ import annotations

import torch
import torch.distributed as dist

from .shards import shard_rows

_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def reference_gemm_rs(x: torch.Tensor, w: torch.Tensor, group=None) -> torch.Tensor:
    """This rank's (ceil(M/W), N) bf16 shard of sum_r x_r @ w_r.T; padding rows are zero."""
    initialized = dist.is_available() and dist.is_initialized()
    W = dist.get_world_size(group) if initialized else 1
    M, N = x.shape[0], w.shape[0]
    S = shard_rows(M, W)
    padded = torch.zeros(W * S, x.shape[1], dtype=x.dtype, device=x.device)
    padded[:M] = x
    matmul = torch.backends.cuda.matmul  # fp32 accumulation, as CONTRACT.md defines the oracle: torch lets
    before = matmul.allow_bf16_reduced_precision_reduction  # cuBLAS add split-K partials in bf16 by default
    matmul.allow_bf16_reduced_precision_reduction = False
    try:
        if x.device.type == "cpu" and not bool(torch.isfinite(x).all()):
            # torch 2.13's CPU bf16 mm makes finite rows next to a non-finite row NaN (odd K): fp32, rounded once
            partial = (padded.float() @ w.float().T).to(torch.bfloat16)
        else:
            partial = padded @ w.T
    finally:
        matmul.allow_bf16_reduced_precision_reduction = before
    if W == 1:
        return partial.clone()
    staged = str(dist.get_backend(group)).lower() == "gloo" and partial.device.type != "cpu"
    src = partial.cpu() if staged else partial
    out = torch.empty(S, N, dtype=partial.dtype, device=src.device)
    _reduce_scatter(out, src, group=group)
    return out.to(x.device) if staged else out
