"""One valid call with the full value property set: the checked call (:meth:`RankContext.call`: path,
result contract, out or freshness) plus, against the oracle and the fp64 truth,

1 within_tolerance, 2 oracle_within_tolerance, 4 nonfinite_pattern_matches, 3 bitwise_equal and
oracle_exact (exact inputs), 5 padded_rows_untouched (out= pre-filled with a sentinel), 6
guard_regions_untouched (red zones around out, after workspaces and flags) — numbered as in
:mod:`fuzz.case`. Used by every family that makes a valid call (compute, capacity's call after the
rejection, graph's eager call after the replays)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oracle.shards import shard_rows, valid_rows
from properties import (
    Guarded,
    bitwise_equal,
    guard_regions_untouched,
    nonfinite_pattern_matches,
    padded_rows_untouched,
    sentinel_like,
    within_tolerance,
)
from properties.result import CheckResult

from ..case import Case
from .context import RankContext


def verified_call(ctx: RankContext, impl, case: Case, M: int, seed: int, *, tag: str, late: bool,
                  kind: str | None = None):
    """One call at M (inputs of ``kind``, default the case's). Returns (checks, a copy of the result,
    (x, w, S, n_valid, row0))."""
    call = launch_call(ctx, impl, case, M, seed, tag=tag, late=late, kind=kind)
    ctx.sync()
    checks, y = check_call(ctx, impl, case, call)
    return checks, y, (call.x, call.w, call.S, call.n_valid, call.row0)


@dataclass
class LaunchedCall:
    """A valid call made and not yet checked (:func:`launch_call`): its operands, its out and what out held."""

    M: int
    seed: int
    kind: str
    tag: str
    x: torch.Tensor
    w: torch.Tensor
    S: int
    n_valid: int
    row0: int
    y: torch.Tensor
    out: torch.Tensor | None
    before: torch.Tensor | None
    guarded: Guarded | None


def launch_call(ctx: RankContext, impl, case: Case, M: int, seed: int, *, tag: str, late: bool,
                kind: str | None = None) -> LaunchedCall:
    """The call of :func:`verified_call` (the late rank's delay first, on its stream), no wait: calls launched one
    after another this way run back to back on the device (a rank may enter its next call while a peer still reads
    the last one's data), then :func:`check_call` each after one ``ctx.sync()``."""
    W, r = ctx.world_size, ctx.rank
    kind = kind or case.kind
    x, w = ctx.x(case, seed, M, kind), ctx.w(case, seed, kind)
    S, n_valid, row0 = shard_rows(M, W), valid_rows(M, W, r), r * shard_rows(M, W)
    guarded = None
    out = None
    if case.out == "guarded":
        guarded = Guarded(S, case.N, device=ctx.device)
        guarded.payload.copy_(sentinel_like((S, case.N), device=ctx.device))
        out = guarded.payload
    before = out.clone() if out is not None else None
    if late and case.late_rank == r and case.delay_ms > 0:
        ctx.delay(case.delay_ms)
    y = ctx.call(impl, x, w, out, tag=tag)
    return LaunchedCall(M, seed, kind, tag, x, w, S, n_valid, row0, y, out, before, guarded)


def check_call(ctx: RankContext, impl, case: Case, call: LaunchedCall) -> tuple[list[CheckResult], torch.Tensor]:
    """Properties 1-6 of a launched call whose work is done (the caller synced): against the oracle (a collective:
    every rank checks its calls in the same order) and the fp64 truth. Returns (checks, a copy of the result)."""
    r, y, n_valid, row0, out = ctx.rank, call.y, call.n_valid, call.row0, call.out
    ref = ctx.reference(call.x, call.w)
    truth = ctx.truth(case, call.seed, call.M, call.kind)
    checks = [
        within_tolerance(y, truth, rank=r),
        within_tolerance(ref, truth, rank=r, name="oracle_within_tolerance"),
        nonfinite_pattern_matches(y, ref, n_valid, rank=r, row_offset=row0),
    ]
    if call.kind == "exact":
        checks.append(bitwise_equal(y, ref, n_valid, rank=r, row_offset=row0))
        exact_truth = truth.y[:n_valid].to(torch.bfloat16)
        checks.append(bitwise_equal(ref, exact_truth, n_valid, rank=r, row_offset=row0, name="oracle_exact"))
    regions = {}
    if out is not None:
        checks.append(padded_rows_untouched(out, call.before, n_valid, rank=r, row_offset=row0))
        regions.update(call.guarded.regions())
    regions.update(impl.guard_regions())
    checks.append(guard_regions_untouched(regions, rank=r))
    checks[0].extra["digest"] = digest(y, n_valid)  # for differential runs across implementations
    tag_checks(checks, call=call.tag, M=call.M, kind=call.kind)
    return checks, y.clone()


def tag_checks(checks: list[CheckResult], **extra) -> list[CheckResult]:
    """Give every check these ``extra`` keys where it has none of its own."""
    for c in checks:
        for k, v in extra.items():
            c.extra.setdefault(k, v)
    return checks


def digest(y: torch.Tensor, n_valid: int) -> str:
    """A 64-bit fingerprint of the bits of the valid rows, computed where the data is: two results with
    the same digest are (up to a 2^-64 accident) bitwise identical. Hex string, JSON-safe."""
    if n_valid == 0:
        return "empty"
    words = y[:n_valid].contiguous().view(torch.int16).reshape(-1).to(torch.int64) & 0xFFFF
    idx = torch.arange(words.numel(), device=words.device, dtype=torch.int64)
    mixed = (words + 0x10001) * ((idx * 0x9E3779B1 + 0x7F4A7C15) | 1)  # wraps mod 2^64: fine
    return f"{int(mixed.sum()) & (2**64 - 1):016x}-{words.numel()}"
