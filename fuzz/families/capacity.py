"""The capacity family: an out-of-range M (``bad``: a key of :data:`fuzz.bad_calls.CAPACITY_CALLS` —
"zero", "over", "huge") is rejected with CapacityError before any work (no op but views, metadata and empty
allocations: properties.rejection) and changes nothing, out's guard rows included (``capacity_rejected``);
on a GPU, the same call inside a CUDA-graph capture too (``capacity_rejected_in_capture``); then a valid call on
the same instance still passes every per-call property (the instance works after a rejected call)."""

from __future__ import annotations

from oracle.shards import shard_rows
from properties import Guarded, sentinel_like, skipped
from properties.result import CheckResult

from ..bad_calls import CAPACITY_CALLS, GoodCall
from ..case import Case
from .bad_call import reject
from .context import RankContext, aligned_if_waived, waiver
from .verified import verified_call

CAPTURED = "capacity_rejected_in_capture"


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    r, W = ctx.rank, ctx.world_size
    entry = CAPACITY_CALLS.get(case.bad)
    if entry is None:
        raise ValueError(f"unknown capacity case {case.bad!r}: one of {sorted(CAPACITY_CALLS)}")
    reason = waiver(impl, "capacity_check")
    if reason:
        return [skipped("capacity_rejected", f"waived by the implementation: {reason}", rank=r)]
    over_M = aligned_if_waived(impl, case.max_M + 1, W)
    # out sized for the M of the call where it can be (fuzz.bad_calls.CAPACITY_CALLS): M is the only thing
    # wrong, so an implementation that checks out's shape first is not failed for raising ShapeError
    rows = {"zero": 0, "over": shard_rows(over_M, W)}.get(case.bad, shard_rows(case.max_M, W))
    guarded = Guarded(rows, case.N, device=ctx.device)
    guarded.payload.copy_(sentinel_like(guarded.payload.shape, device=ctx.device))
    M_good = aligned_if_waived(impl, case.ms[0], W, case.max_M)
    good = GoodCall(ctx.x(case, case.seed, M_good), ctx.w(case, case.seed), guarded.payload, case.max_M, over_M)
    checks = [reject(ctx, impl, entry, good, name="capacity_rejected", watched={"out (with guards)": guarded.buffer},
                     no_work=True)]
    checks.append(captured_rejection(ctx, impl, entry, good, guarded))
    for res in checks:
        res.extra["bad"] = case.bad
    ctx.barrier()  # nobody's next call may touch a peer's state before that peer compared it
    after, _, _ = verified_call(ctx, impl, case, M_good, case.seed + 1, tag="after_reject", late=False)
    return [*checks, *after]


def captured_rejection(ctx: RankContext, impl, entry, good: GoodCall, guarded: Guarded) -> CheckResult:
    """The same out-of-range call inside a CUDA-graph capture (CONTRACT.md: rejected "under CUDA-graph capture,
    always"): a check skipped while capturing ("the warm-up checked it") is captured as a launch past the
    workspace, one that reads the device (``.item()``) raises the capture's error instead
    (``capacity_rejected_in_capture``). Skipped, with the reason, where there is no capture (no GPU) or the
    implementation waives graph capture."""
    if not ctx.on_cuda:
        return skipped(CAPTURED, f"topology {ctx.topology} has no CUDA graphs", rank=ctx.rank)
    waived = waiver(impl, "graph_capture")
    if waived:
        return skipped(CAPTURED, f"graph capture waived by the implementation: {waived}", rank=ctx.rank)
    return reject(ctx, impl, entry, good, name=CAPTURED, watched={"out (with guards)": guarded.buffer},
                  no_work=True, captured=True)
