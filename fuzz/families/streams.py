"""The streams family (CUDA topologies; CONTRACT.md, "Streams"): a call is ordered on the caller's current
stream like any torch op, and the caller may overwrite or free its inputs on that stream as soon as the
call returns. For each M of ``ms``, on the case's long-lived instance:

1. a third stream is kept busy (big matmuls: the GPU has other work, the call's kernels get fewer SMs);
2. on a new caller stream (not the default one) x and w are allocated and filled with NaN, the stream
   sleeps (``torch.cuda._sleep``), then the inputs' values are copied in from pinned host memory without
   blocking the host: they are there only when the stream gets past the sleep;
3. the call, on the caller stream, and right after it returns, without any sync, still on the caller
   stream: a copy of the result is taken, x and w are overwritten with garbage, deleted, and same-size
   tensors are allocated and filled with garbage (allocator churn: the caching allocator hands the freed
   blocks straight back to the same stream);
4. after a device sync, the copy must be the result of the inputs as they were at call time:
   ``stream_ordered_result`` (within tolerance of the truth), ``stream_ordered_exact`` (exact inputs:
   bitwise the oracle's), ``stream_ordered_padding`` (padding rows as the contract says), red zones.

An implementation that works on an internal stream without waiting for the caller's reads NaN inputs; one
whose caller stream does not wait for it hands back a result that is not there yet, or reads inputs
the caller has already overwritten. On the cpu topology the family is skipped with the reason.
"""

from __future__ import annotations

import torch

from oracle.shards import shard_rows, valid_rows
from properties import (
    Guarded,
    bitwise_equal,
    fresh_padding_zero,
    guard_regions_untouched,
    padded_rows_untouched,
    sentinel_like,
    skipped,
    within_tolerance,
)
from properties.result import CheckResult

from ..case import Case
from .context import RankContext, aligned_if_waived
from .verified import tag_checks

CALLER_SLEEP_MS = 20   # the caller stream's inputs land this late
BUSY_MATMULS = 6       # 4096^2 bf16 matmuls on the third stream
BUSY_DIM = 4096
CYCLES_PER_MS = 1.5e6  # torch.cuda._sleep counts cycles (~1.5 GHz)


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    if not ctx.on_cuda:
        return [skipped("stream_ordered_result", f"topology {ctx.topology} has no CUDA streams", rank=ctx.rank)]
    checks: list[CheckResult] = []
    for i, M in enumerate(case.ms):
        M = aligned_if_waived(impl, M, ctx.world_size, case.max_M)
        checks += tag_checks(one_call(ctx, impl, case, M, case.seed + i, tag=f"stream{i}"), call=f"stream{i}", M=M)
    return checks


def one_call(ctx: RankContext, impl, case: Case, M: int, seed: int, *, tag: str) -> list[CheckResult]:
    r, W = ctx.rank, ctx.world_size
    S, n_valid, row0 = shard_rows(M, W), valid_rows(M, W, r), r * shard_rows(M, W)
    x_host = ctx.x(case, seed, M).cpu().pin_memory()
    w_host = ctx.w(case, seed).cpu().pin_memory()
    ctx.sync()
    busy, caller = torch.cuda.Stream(ctx.device), torch.cuda.Stream(ctx.device)
    with torch.cuda.stream(busy):
        a = torch.randn(BUSY_DIM, BUSY_DIM, device=ctx.device, dtype=torch.bfloat16)
        for _ in range(BUSY_MATMULS):
            a = (a @ a).clamp_(-1, 1)
    guarded = None
    with torch.cuda.stream(caller):
        x = torch.full((M, case.K), float("nan"), dtype=torch.bfloat16, device=ctx.device)
        w = torch.full((case.N, case.K), float("nan"), dtype=torch.bfloat16, device=ctx.device)
        out = None
        if case.out == "guarded":
            guarded = Guarded(S, case.N, device=ctx.device)
            guarded.payload.copy_(sentinel_like((S, case.N), device=ctx.device))
            out = guarded.payload
        torch.cuda._sleep(int(CALLER_SLEEP_MS * CYCLES_PER_MS))
        x.copy_(x_host, non_blocking=True)
        w.copy_(w_host, non_blocking=True)
        y = ctx.call(impl, x, w, out, tag=tag)
        seen = y.clone()  # what the caller reads, on its stream, right after the call returns
        x.fill_(float("nan"))
        w.fill_(float("inf"))
        shape_x, shape_w = x.shape, w.shape
        del x, w
        churn = [torch.full(shape_x, -7.0, dtype=torch.bfloat16, device=ctx.device),
                 torch.full(shape_w, 5.0, dtype=torch.bfloat16, device=ctx.device)]
    torch.cuda.synchronize(ctx.device)
    del churn, a
    truth = ctx.truth(case, seed, M)
    ref = ctx.reference(ctx.x(case, seed, M), ctx.w(case, seed))
    checks = [within_tolerance(seen, truth, rank=r, name="stream_ordered_result")]
    if case.kind == "exact":
        checks.append(bitwise_equal(seen, ref, n_valid, rank=r, row_offset=row0, name="stream_ordered_exact"))
    if out is not None:
        sentinel = sentinel_like((S, case.N), device=ctx.device)
        checks.append(padded_rows_untouched(seen, sentinel, n_valid, rank=r, row_offset=row0,
                                            name="stream_ordered_padding"))
        checks.append(guard_regions_untouched({**guarded.regions(), **impl.guard_regions()}, rank=r))
    else:
        checks.append(fresh_padding_zero(seen, n_valid, rank=r, row_offset=row0, name="stream_ordered_padding"))
        checks.append(guard_regions_untouched(impl.guard_regions(), rank=r))
    return checks
