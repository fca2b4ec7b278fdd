"""The dispatch family (CONTRACT.md, "Dispatch"): the implementation inside a layer, as engines integrate
it (:class:`DispatchLayer`)::

    if op.should_run(x) and op.can_run(w): y = op(x, w)
    else:                                  y = reduce_scatter(x @ w.T)   # the torch path, same group

The layer runs at each M of ``ms`` and at both sides of ``should_run``'s crossover (every rank's: the M
sequence is the same on every rank), in that order (alternating across the threshold). At each M:

* ``dispatch_agrees_across_ranks``: every rank of the group gave the same ``should_run(x)``, ``can_run(w)``
  (and, once per case, the same crossover): a layer whose ranks disagree runs different collectives;
* ``should_run_stable``: the answer at an M the case asked before (M repeats) is the same;
* both sides on the same inputs, whichever the layer would take (a call that ignores ``should_run`` is
  still correct): the implementation's call (the checked call: the path it reports agrees with
  ``can_run``) within tolerance of the truth, and ``dispatch_sides_agree`` with the torch path's shard
  (same shape, same padding, same bits on valid rows with exact inputs);
* CUDA topologies where the implementation captures: the layer's forward captured per M of ``ms`` in a
  CUDA graph (the dispatch decided at capture, as a captured model does), replayed with new inputs and the
  output poisoned: ``dispatch_graph_replay`` (shard shape, within tolerance, bitwise the oracle's with exact
  inputs; the torch path captures only over NCCL, else skipped with the reason).
"""

from __future__ import annotations

import torch

from kernel import collectives
from oracle import reference_gemm_rs
from oracle.shards import shard_rows, valid_rows
from properties import bitwise_equal, skipped, within_tolerance
from properties.dispatch import dispatch_agrees_across_ranks, dispatch_sides_agree, should_run_stable
from properties.result import CheckResult

from ..case import Case
from .context import RankContext, aligned_if_waived, waiver
from .crossover import crossover_neighbours, should_run_asker
from .verified import tag_checks

GRAPH_SEED_OFFSET = 3_000_017


class DispatchLayer:
    """A tensor-parallel down projection (or attention output projection) with sequence parallelism as an
    engine writes it: the implementation where it says it runs and pays, else torch's GEMM and the group's
    reduce-scatter of the zero-padded rows (:func:`oracle.reference_gemm_rs`, the contract's own shard)."""

    def __init__(self, op, group):
        self.op, self.group = op, group

    def uses_op(self, x: torch.Tensor, w: torch.Tensor) -> bool:
        return bool(self.op.should_run(x)) and bool(self.op.can_run(w))

    def torch_path(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return reference_gemm_rs(x, w, self.group)

    def forward(self, x: torch.Tensor, w: torch.Tensor, call_op) -> torch.Tensor:
        """``call_op(x, w)`` makes the implementation's call (the harness passes its checked call)."""
        return call_op(x, w) if self.uses_op(x, w) else self.torch_path(x, w)


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    r, W = ctx.rank, ctx.world_size
    layer = DispatchLayer(impl, ctx.group)
    crossings = ctx.gather(crossover_neighbours(should_run_asker(ctx.device, impl, case), case.max_M))
    checks = [dispatch_agrees_across_ranks(crossings, rank=r, what="should_run crossover [c-1, c]")]
    around = sorted({M for c in crossings.values() for M in c})
    seen: dict[int, bool] = {}
    for i, M in enumerate(list(case.ms) + around):
        M = aligned_if_waived(impl, M, W, case.max_M)
        checks += one_step(ctx, layer, case, M, case.seed + i, seen, tag=f"layer{i}")
    if ctx.on_cuda:
        for i, M in enumerate(dict.fromkeys(aligned_if_waived(impl, M, W, case.max_M) for M in case.ms)):
            checks += captured_step(ctx, layer, case, M, case.seed + GRAPH_SEED_OFFSET + i, tag=f"layer_graph{i}")
    return checks


def one_step(ctx: RankContext, layer: DispatchLayer, case: Case, M: int, seed: int, seen: dict[int, bool], *,
             tag: str) -> list[CheckResult]:
    r, W = ctx.rank, ctx.world_size
    x, w = ctx.x(case, seed, M), ctx.w(case, seed)
    n_valid, row0 = valid_rows(M, W, r), r * shard_rows(M, W)
    go, can = bool(layer.op.should_run(x)), bool(layer.op.can_run(w))
    answers = ctx.gather((go, can))
    checks = [dispatch_agrees_across_ranks(answers, rank=r, what=f"(should_run, can_run) at M={M}")]
    if M in seen:
        checks.append(should_run_stable({M: seen[M]}, {M: go}, rank=r, what="the same instance, asked again"))
    seen[M] = go
    y_op = ctx.call(layer.op, x, w, None, tag=f"{tag}.op").clone()  # the implementation's side, always
    ctx.sync()
    y_torch = layer.torch_path(x, w)
    truth = ctx.truth(case, seed, M)
    exact = case.kind == "exact"
    checks.append(within_tolerance(y_op, truth, rank=r))
    checks.append(dispatch_sides_agree(y_op, y_torch, n_valid, exact=exact, rank=r, row_offset=row0))
    return tag_checks(checks, call=tag, M=M, side="op" if go and can else "torch")


def captured_step(ctx: RankContext, layer: DispatchLayer, case: Case, M: int, seed: int, *,
                  tag: str) -> list[CheckResult]:
    """The layer's forward at M captured in a CUDA graph, replayed with new inputs written in place."""
    r, W = ctx.rank, ctx.world_size
    x, w = ctx.x(case, seed, M), ctx.w(case, seed)
    side = "op" if layer.uses_op(x, w) else "torch"
    reason = waiver(layer.op, "graph_capture") if side == "op" else (
        None if collectives.is_capturable(ctx.group, ctx.device)
        else f"the torch path over {collectives.backend_of(ctx.group)} on {ctx.device.type} is not capturable")
    if reason:
        return [skipped("dispatch_graph_replay", f"M={M} ({side} side): {reason}", rank=r)]

    def call_op(xx, ww):
        return ctx.call(layer.op, xx, ww, None, tag=f"{tag}.capture", captured=True)

    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        layer.forward(x, w, lambda xx, ww: ctx.call(layer.op, xx, ww, None, tag=f"{tag}.warmup"))
    torch.cuda.current_stream().wait_stream(warm)
    ctx.sync()
    graph = torch.cuda.CUDAGraph()
    if side == "op":  # only the implementation's call inside: a failed capture is its failure
        with ctx.capture(graph, tag=f"{tag}.capture", M=M):
            y = layer.forward(x, w, call_op)
    else:
        with torch.cuda.graph(graph):
            y = layer.forward(x, w, call_op)
    x.copy_(ctx.x(case, seed + 1, M))
    w.copy_(ctx.w(case, seed + 1))
    y.fill_(float("nan"))
    graph.replay()
    ctx.sync()
    truth = ctx.truth(case, seed + 1, M)
    ref = ctx.reference(x, w)
    res = layer_output(y, truth, ref, valid_rows(M, W, r), case.kind == "exact", r, r * shard_rows(M, W),
                       shard_rows(M, W), case.N, "dispatch_graph_replay")
    del graph
    return tag_checks([res], call=tag, M=M, side=side)


def layer_output(y, truth, ref, n_valid: int, exact: bool, rank: int, row0: int, S: int, N: int,
                 name: str) -> CheckResult:
    """The layer's output: shard shape, within tolerance of the truth, bitwise the oracle's (exact)."""
    if tuple(y.shape) != (S, N):
        return CheckResult(name=name, passed=False, rank=rank,
                           detail=f"the layer returned shape {tuple(y.shape)}, expected (ceil(M/W), N) = {(S, N)}")
    if exact:
        return bitwise_equal(y, ref, n_valid, rank=rank, row_offset=row0, name=name)
    return within_tolerance(y, truth, rank=rank, name=name)
