"""The graph family (CUDA): an eager warm-up call, then a call captured at ms[0] and replayed ``repeat``
times with inputs changed in place and out poisoned before every replay — every replay within tolerance
of a fresh oracle (``graph_replay``), bitwise in exact mode (``graph_replay_exact``), padding rows as the
contract says (``graph_replay_padding``: untouched with out=, +0.0 for the graph's own fresh result where
out= is waived); then an eager call after the graph still passes every per-call property."""

from __future__ import annotations

import torch

from kernel.checks import shard_rows, valid_rows
from oracle import reference_gemm_rs
from properties import (
    bitwise_equal,
    fresh_padding_zero,
    padded_rows_untouched,
    sentinel_like,
    skipped,
    within_tolerance,
)
from properties.result import CheckResult

from ..case import Case
from .context import RankContext, aligned_if_waived, waiver
from .verified import verified_call


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    r, W = ctx.rank, ctx.world_size
    if ctx.device.type != "cuda":
        return [skipped("graph_replay", f"topology {ctx.topology} has no CUDA graphs", rank=r)]
    waived = waiver(impl, "graph_capture")
    if waived:
        return [skipped("graph_replay", f"waived by the implementation: {waived}", rank=r)]
    M = aligned_if_waived(impl, case.ms[0], W, case.max_M)
    checks: list[CheckResult] = []
    if M != case.ms[0]:
        checks.append(skipped("unaligned_m", f"graph at M={M} instead of M={case.ms[0]}: waived by the "
                              f"implementation: {waiver(impl, 'unaligned_m')}", rank=r, per_example=True))
    out_waived = waiver(impl, "out_param")
    S, n_valid, row0 = shard_rows(M, W), valid_rows(M, W, r), r * shard_rows(M, W)
    x, w = ctx.x(case, case.seed, M), ctx.w(case, case.seed)

    def new_out():
        return None if out_waived else sentinel_like((S, case.N), device=ctx.device)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ctx.call(impl, x, w, new_out(), tag="graph_warmup")  # compile, workspaces: outside the capture
    torch.cuda.current_stream().wait_stream(side)
    ctx.sync()
    graph = torch.cuda.CUDAGraph()
    out = new_out()
    with torch.cuda.graph(graph):
        y = ctx.call(impl, x, w, out, tag="graph_capture", captured=True)
    if out is None:  # out= waived: the graph's own output (allocated at capture, rewritten by every replay)
        out = y
    for i in range(max(1, case.repeat)):
        seed = case.seed + 1 + i
        x.copy_(ctx.x(case, seed, M))
        w.copy_(ctx.w(case, seed))
        out.copy_(sentinel_like(out.shape, device=ctx.device))
        before = out.clone()
        graph.replay()
        ctx.sync()
        truth = ctx.truth(case, seed, M)
        ref = reference_gemm_rs(x, w, ctx.group)
        if out_waived:
            padding = fresh_padding_zero(out, n_valid, rank=r, row_offset=row0, name="graph_replay_padding")
        else:
            padding = padded_rows_untouched(out, before, n_valid, rank=r, row_offset=row0, name="graph_replay_padding")
        replay = [within_tolerance(out, truth, rank=r, name="graph_replay"), padding]
        if case.kind == "exact":
            replay.append(bitwise_equal(out, ref, n_valid, rank=r, row_offset=row0, name="graph_replay_exact"))
        for c in replay:
            c.extra["replay"] = i
        checks += replay
    del graph
    after, _, _ = verified_call(ctx, impl, case, M, case.seed + 99, tag="eager_after_graph", late=False)
    return checks + after
