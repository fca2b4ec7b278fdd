"""The byte_boundary family (issue 15, item 5; nightly, GPU): an instance built for a max_M whose workspace
or output, ``rows * N * 2`` bytes, crosses 2^31 and 2^32 bytes — where a 32-bit (signed or unsigned) byte or
element offset wraps — and one call at that M. It is rejected cleanly (construction or the call raising a
typed error: ``byte_boundary_rejected``) or computed right on the rows at each boundary of each buffer
(``within_tolerance``, ``bitwise_equal`` on exact inputs, on a few rows each side of the row holding byte
``L`` of this rank's output and of the all-rank workspace, plus the shard's first and last rows); every
accepted call also answers ``path_taken`` and ``result_contract``.

The truth is computed for those rows alone (:func:`oracle.truth.seeded_rows_truth`): a whole shard's fp64
truth would be four times the output. ``Case.byte_limits`` replaces (2^31, 2^32) — the CPU test of a planted
wrap (``mutants.catalogue.OffsetWraps32`` with a small emulated limit) runs at kilobytes.
"""

from __future__ import annotations

import torch

import kernel.errors as kerr
from oracle.shards import shard_rows, valid_rows
from oracle.truth import seeded_rows_truth
from properties import bitwise_equal, call_raised, path_taken, result_contract, within_tolerance
from properties.result import CheckResult

from .. import phases
from ..case import Case
from .context import RankContext

#: Byte offsets where a 32-bit offset wraps: signed (2^31) and unsigned (2^32).
BYTE_LIMITS = (2**31, 2**32)
#: Rows checked on each side of a boundary row.
WINDOW = 2
NAME = "byte_boundary_rejected"


def limits(case: Case) -> tuple[int, ...]:
    return tuple(case.byte_limits) if case.byte_limits else BYTE_LIMITS


def rejected(exc: BaseException, case: Case, where: str, *, rank: int) -> CheckResult:
    """A typed rejection (construction or the call): the clean answer for a size the implementation
    cannot serve."""
    return CheckResult(name=NAME, passed=True, rank=rank,
                       detail=f"max_M={case.max_M}, N={case.N}: {where} raised {type(exc).__name__}: {exc}",
                       extra={"max_M": case.max_M, "N": case.N, "handled": where})


def boundary_windows(limits_: tuple[int, ...], N: int, W: int, M: int, rank: int) -> list[tuple[int, int]]:
    """Row ranges, local to ``rank``'s shard, to check: WINDOW rows each side of the row holding byte L of the
    shard (the output) and of the W * S-row workspace (global rows), for each limit L, and the shard's first and
    last rows; merged, clipped to the valid rows."""
    S, n_valid = shard_rows(M, W), valid_rows(M, W, rank)
    r0 = rank * S
    marks = {0, n_valid - 1}
    for L in limits_:
        b = L // (2 * N)
        marks |= {b, b - r0}
    rows = sorted({m + d for m in marks for d in range(-WINDOW, WINDOW + 1) if 0 <= m + d < n_valid})
    windows: list[list[int]] = []
    for r in rows:
        if windows and r == windows[-1][1]:
            windows[-1][1] = r + 1
        else:
            windows.append([r, r + 1])
    return [(a, b) for a, b in windows]


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    r, W = ctx.rank, ctx.world_size
    M = case.ms[0]
    x, w = ctx.x(case, case.seed, M), ctx.w(case, case.seed)
    expected, reason = impl.expected_path(x, w)
    impl.last_path = None
    ctx.began("byte-boundary call", M, "direct: the call at an emulated byte limit")
    try:
        y = impl(x, w, out=None)
    except kerr.GemmRsError as exc:
        return [rejected(exc, case, "the call", rank=r)]
    except Exception as exc:  # noqa: BLE001 — any other exception of a valid call is the implementation's failure
        return [call_raised(exc, rank=r, what=f"byte-boundary call (M={M}, N={case.N})")]
    ctx.sync()
    S, r0 = shard_rows(M, W), r * shard_rows(M, W)
    contract = result_contract(y, shape=(S, case.N), device=impl.device, rank=r)
    checks = [path_taken(impl.last_path, expected, reason, rank=r), contract]
    if not contract.passed:
        return checks
    dev = ctx.device if ctx.device.type == "cuda" else "cpu"
    for lo, hi in boundary_windows(limits(case), case.N, W, M, r):
        with phases.phase("truth"):
            truth = seeded_rows_truth(ctx.input_seed(case.seed), case.kind, (r0 + lo, r0 + hi), M, case.N, case.K,
                                      W, device=dev)
        got = y[lo:hi]
        window = [within_tolerance(got, truth, rank=r)]
        if case.kind == "exact":
            window.append(bitwise_equal(got, truth.y.to(torch.bfloat16), hi - lo, rank=r, row_offset=r0 + lo))
        for res in window:
            res.extra.update(rows=[r0 + lo, r0 + hi], limits=list(limits(case)), M=M,
                             byte_offsets=[(r0 + lo) * 2 * case.N, (r0 + hi) * 2 * case.N])
        checks += window
    return checks
