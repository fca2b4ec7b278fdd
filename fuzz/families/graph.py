"""The graph family (CUDA; CONTRACT.md, "Behaviour over time: CUDA graphs"): deep graphs, as an engine
replays them between eager steps. On the case's long-lived instance:

1. graph M values: ``ms`` plus both sides of one of the kernel's path switches (``path_switches(max_M)``,
   where the implementation has it: the M where the protocol, tile config or split-K parts change; the case's
   seed picks which, so a run's cases cover them all) and of ``should_run``'s crossover — found on every rank,
   the union taken (every rank captures the same graphs), at most ``MAX_GRAPHS``;
2. per M an eager warm-up call (compile, workspaces: outside any capture), then one graph captured on
   the default stream with its own x, w and ``out`` (the graph's own output where out= is waived);
3. ``repeat`` rounds (at least 3); in each, every graph is replayed once, in an order that rotates from
   round to round (graphs at different M interleaved), each replay with new inputs written in place and
   ``out`` poisoned first; round 1 replays on another stream than the capture's; after each round one
   eager verified call at another M on the same instance (eager calls between replays);
4. every replay: ``graph_replay`` (within tolerance of a fresh oracle), ``graph_replay_exact`` (exact
   inputs: bitwise), ``graph_replay_padding`` (untouched with out=, +0.0 for the graph's own output);
   ``extra`` says which graph (``graph_M``) and which replay;
5. each graph replayed :data:`IN_A_ROW` times in a row, as an engine's decode loop replays one graph: nothing
   between the replays but the new inputs written in place, ``out`` poisoned, the late rank's delay (on its
   stream) and the result copied out, all stream-ordered; one sync, then step 4's checks of each copy
   (``replay="in_a_row<i>"``; exact inputs against the exact truth). The rounds of step 3 put another graph or
   an eager call between two replays of a graph: a flag protocol whose replays repeat one epoch (a host-side
   counter baked into the graph) finds the flags of its own last replay raised and reads a late peer's
   partials before they are written -- only here;
6. an eager call after the graphs are gone still passes every per-call property (flags and epochs
   consistent).
"""

from __future__ import annotations

import torch

from oracle.shards import shard_rows, valid_rows
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
from .crossover import crossover_neighbours, should_run_asker
from .verified import verified_call

MIN_ROUNDS = 3
MAX_GRAPHS = 5
EAGER_SEED_OFFSET = 500
REPLAY_SEED_STRIDE = 1000
#: Step 5: replays of one graph in a row, and where their inputs' seeds start (within the graph's stride).
IN_A_ROW = 3
IN_A_ROW_SEED_OFFSET = 700


class Captured:
    """One captured call: its M, static inputs, output, and the graph."""

    def __init__(self, ctx: RankContext, impl, case: Case, M: int, index: int, out_waived: bool):
        self.M, self.index = M, index
        W, r = ctx.world_size, ctx.rank
        self.S, self.n_valid, self.row0 = shard_rows(M, W), valid_rows(M, W, r), r * shard_rows(M, W)
        seed = case.seed + index * REPLAY_SEED_STRIDE
        self.x, self.w = ctx.x(case, seed, M), ctx.w(case, seed)
        self.out_waived = out_waived
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # compile, workspaces: outside the capture
            ctx.call(impl, self.x, self.w, self.new_out(ctx, case), tag=f"graph{index}_warmup")
        torch.cuda.current_stream().wait_stream(side)
        ctx.sync()
        self.graph = torch.cuda.CUDAGraph()
        out = self.new_out(ctx, case)
        with ctx.capture(self.graph, tag=f"graph{index}_capture", M=M):
            y = ctx.call(impl, self.x, self.w, out, tag=f"graph{index}_capture", captured=True)
        self.out = y if out is None else out  # out= waived: the graph's own output, rewritten by every replay

    def new_out(self, ctx: RankContext, case: Case):
        return None if self.out_waived else sentinel_like((self.S, case.N), device=ctx.device)


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    r, W = ctx.rank, ctx.world_size
    if not ctx.on_cuda:
        return [skipped("graph_replay", f"topology {ctx.topology} has no CUDA graphs", rank=r)]
    waived = waiver(impl, "graph_capture")
    if waived:
        return [skipped("graph_replay", f"waived by the implementation: {waived}", rank=r)]
    checks: list[CheckResult] = []
    ms = graph_ms(ctx, impl, case)
    if ms[0] != case.ms[0]:
        checks.append(skipped("unaligned_m", f"graph at M={ms[0]} instead of M={case.ms[0]}: waived by the "
                              f"implementation: {waiver(impl, 'unaligned_m')}", rank=r, per_example=True))
    out_waived = bool(waiver(impl, "out_param"))
    graphs = [Captured(ctx, impl, case, M, i, out_waived) for i, M in enumerate(ms)]
    other = torch.cuda.Stream()
    for rnd in range(max(MIN_ROUNDS, case.repeat)):
        for k in range(len(graphs)):
            g = graphs[(rnd + k) % len(graphs)]
            checks += replay(ctx, case, g, rnd, stream=other if rnd == 1 else None)
        M_eager = aligned_if_waived(impl, ms[(rnd + 1) % len(ms)], W, case.max_M)
        eager, _, _ = verified_call(ctx, impl, case, M_eager, case.seed + EAGER_SEED_OFFSET + rnd,
                                    tag=f"eager_between_replays{rnd}", late=False)
        checks += eager
    checks += in_a_row(ctx, case, graphs)
    del graphs
    after, _, _ = verified_call(ctx, impl, case, ms[0], case.seed + 99, tag="eager_after_graph", late=False)
    return checks + after


def graph_ms(ctx: RankContext, impl, case: Case) -> list[int]:
    """Step 1: the graphs' M values, the same on every rank (first: ms[0], aligned if waived)."""
    W = ctx.world_size
    mine = crossover_neighbours(should_run_asker(ctx.device, impl, case), case.max_M)
    switches = getattr(impl, "path_switches", None)  # where the fused kernel's path changes (where it runs)
    if callable(switches) and impl.can_run(ctx.w(case, case.seed)):
        found = switches(case.max_M)
        if found:  # one switch per case, by its seed: every switch across the cases of a run
            switch = found[case.seed % len(found)]
            mine += [switch - 1, switch]
    union = sorted({M for answer in ctx.gather(mine).values() for M in answer})
    wanted = [case.ms[0], *union, *case.ms[1:]]  # the drawn M, both sides of both switches, then the rest
    ms = list(dict.fromkeys(aligned_if_waived(impl, M, W, case.max_M) for M in wanted))
    return ms[:MAX_GRAPHS]


def replay(ctx: RankContext, case: Case, g: Captured, rnd: int, *, stream=None) -> list[CheckResult]:
    """New inputs into the graph's x and w, its out poisoned, one replay (on ``stream`` if given), checks."""
    seed = case.seed + g.index * REPLAY_SEED_STRIDE + 1 + rnd
    refill(ctx, case, g, seed)
    before = g.out.clone()
    if stream is None:
        g.graph.replay()
    else:
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            g.graph.replay()
        torch.cuda.current_stream().wait_stream(stream)
    ctx.sync()
    ref = ctx.reference(g.x, g.w) if case.kind == "exact" else None
    return judge(ctx, case, g, g.out, before, seed, ref, replay=rnd, on_other_stream=stream is not None)


def in_a_row(ctx: RankContext, case: Case, graphs: list[Captured]) -> list[CheckResult]:
    """Step 5: each graph :data:`IN_A_ROW` times in a row on the current stream (no host wait between: inputs
    refilled, ``out`` poisoned, the late rank's delay, the replay and a copy of the result are all queued), one
    sync, then each copy judged against its own inputs' truth."""
    late = case.late_rank == ctx.rank and case.delay_ms > 0
    checks: list[CheckResult] = []
    for g in graphs:
        made = []
        for i in range(IN_A_ROW):
            seed = case.seed + g.index * REPLAY_SEED_STRIDE + IN_A_ROW_SEED_OFFSET + i
            refill(ctx, case, g, seed)
            if late:
                ctx.delay(case.delay_ms)
            g.graph.replay()
            made.append((seed, g.out.clone()))
        ctx.sync()
        before = sentinel_like(g.out.shape, device=ctx.device)
        for i, (seed, y) in enumerate(made):
            checks += judge(ctx, case, g, y, before, seed, None, replay=f"in_a_row{i}", on_other_stream=False)
    return checks


def refill(ctx: RankContext, case: Case, g: Captured, seed: int) -> None:
    """The inputs of ``seed`` written into the graph's own x and w, its out poisoned (queued on the stream)."""
    g.x.copy_(ctx.x(case, seed, g.M))
    g.w.copy_(ctx.w(case, seed))
    g.out.copy_(sentinel_like(g.out.shape, device=ctx.device))


def judge(ctx: RankContext, case: Case, g: Captured, y, before, seed: int, ref, **extra) -> list[CheckResult]:
    """Step 4's checks of one replay's result ``y`` (out held ``before``): the truth of ``seed``'s inputs; exact
    inputs bitwise against the oracle ``ref`` where given, else against the exact truth."""
    r = ctx.rank
    truth = ctx.truth(case, seed, g.M)
    if g.out_waived:
        padding = fresh_padding_zero(y, g.n_valid, rank=r, row_offset=g.row0, name="graph_replay_padding")
    else:
        padding = padded_rows_untouched(y, before, g.n_valid, rank=r, row_offset=g.row0, name="graph_replay_padding")
    out = [within_tolerance(y, truth, rank=r, name="graph_replay"), padding]
    if case.kind == "exact":
        expected = ref if ref is not None else truth.y[: g.n_valid].to(torch.bfloat16)
        out.append(bitwise_equal(y, expected, g.n_valid, rank=r, row_offset=g.row0, name="graph_replay_exact"))
    for c in out:
        c.extra.update(graph_M=g.M, M=g.M, **extra)
    return out
