"""Within the derived tolerance: |y - Y64| <= budget, element by element, against the fp64 truth.

The budget is derived from the rounding steps any conforming implementation may take (CONTRACT.md,
"Numerics"), never guessed. For one output element, with u16 = 2^-8 (bf16 unit roundoff, round to
nearest) and u32 = 2^-24:

1. per rank, the K-long dot product accumulates in fp32 in any order (tiles, split-K):
   |err| <= gamma_K * (|x_r| @ |w_r|.T),  gamma_K = K*u32 / (1 - K*u32)   (bf16 products are exact in fp32);
2. the partial may be rounded to bf16:            |err| <= u16 * |p_r|;
3. the W partials are summed, in fp32 or — as a bf16 reduce-scatter does — in bf16, in any order:
   every intermediate sum is bounded by sum_r |p_r|, so |err| <= (W - 1) * u16 * sum_r |p_r|;
4. the result is rounded to bf16:                 |err| <= u16 * |Y|.

Adding (first order):  budget = c * (u16 * (|Y64| + W * sum_r |p_r|) + gamma_K * sum_r |x_r| @ |w_r|.T) + tiny,
with c = 1 + 2^-6 to cover the second-order terms (O(u16^2) relative) and
tiny = (W + 2) * 2^-134 + K * 2^-150 for underflow (bf16/fp32 subnormal half-spacings).

The budget scales with the data: on small values (inputs ~2^-10) it is ~2^-8 of the values themselves,
so a dropped rank (error ~|p_r|) exceeds it by far, where a fixed ``atol`` would hide it
(tests/foundation/test_tolerance_teeth.py shows both). It cannot catch a dropped rank whose partial is
below the budget of the others' — that is what exact mode (:mod:`properties.exact`) is for.
Elements whose truth is not finite in bf16 are left to :mod:`properties.nonfinite`.
"""

from __future__ import annotations

import torch

from oracle.truth import Truth

from .result import in_row_blocks, no_valid_rows, skipped, worst_of

U_BF16 = 2.0**-8
U_FP32 = 2.0**-24
SECOND_ORDER = 1.0 + 2.0**-6
BF16_MAX = float(torch.finfo(torch.bfloat16).max)
#: Why ``within_tolerance`` is skipped where every valid element's truth is non-finite in bf16 (non-finite inputs):
#: no element has a budget, so nothing was compared; ``nonfinite_pattern_matches`` judges them.
NO_FINITE_TRUTH = ("every valid element's truth is non-finite in bf16 (nothing within a budget to compare): "
                   "nonfinite_pattern_matches judges them")


def budget(truth: Truth, rows: tuple[int, int] | None = None) -> torch.Tensor:
    """Per-element allowed |y - Y64| for the shard's valid rows (or the shard rows ``rows = (start, stop)`` of
    them), (rows, N) float64."""
    K, W = truth.K, truth.world_size
    start, stop = rows or (0, truth.n_valid)
    gamma_k = K * U_FP32 / (1.0 - K * U_FP32)
    tiny = (W + 2) * 2.0**-134 + K * 2.0**-150
    y, ap, aq = truth.y[start:stop], truth.abs_partials[start:stop], truth.abs_products[start:stop]
    return SECOND_ORDER * (U_BF16 * (y.abs() + W * ap) + gamma_k * aq) + tiny


def within_tolerance(actual: torch.Tensor, truth: Truth, *, rank: int | None = None, name="within_tolerance"):
    """Check the valid rows of ``actual`` (S, N) against the truth. Non-finite truths are skipped here; a rank with
    no valid row is a skip (:data:`properties.result.NO_VALID_ROWS`), not a pass. Checked in blocks of rows
    (:func:`~properties.result.in_row_blocks`: a whole large shard's fp64 temporaries ran 16 ranks of one GPU out of
    memory)."""
    n = truth.n_valid
    if n <= 0:
        return no_valid_rows(name, rank)
    res = in_row_blocks(lambda start, stop: _within_rows(actual, truth, start, stop, rank, name), n,
                        actual[0].numel(), name, rank, extra_merge={"max_error_over_budget": max})
    if res.total == 0:  # no finite truth on these rows (or no element at all): nothing was compared, so no pass
        return skipped(name, NO_FINITE_TRUTH, rank=rank, per_example=True)
    if not res.passed:
        over = float("inf") if res.allowed == 0 else res.worst_error / res.allowed
        res.extra["max_error_over_budget"] = over
    return res


def _within_rows(actual, truth: Truth, start: int, stop: int, rank, name):
    """The check on the valid shard rows ``start:stop``."""
    a = actual[start:stop].detach().to(torch.float64)  # checks run where the data is (GPU or CPU)
    y = truth.y[start:stop].to(a.device)
    allowed = budget(truth, (start, stop)).to(a.device)
    finite_truth = torch.isfinite(y) & (y.abs() <= BF16_MAX)
    err = (a - y).abs()
    err = torch.where(finite_truth, err, torch.zeros_like(err))
    # NaN error (actual NaN where truth finite) must count as wrong: compare with "not <=".
    wrong = ~(err <= allowed) & finite_truth
    # On a pass, the tightest element is reported: how close anyone came to the budget (read back with the
    # counts, one transfer).
    ratio = torch.where(finite_truth, err / allowed, torch.zeros_like(err))
    tightest = ratio.max() if ratio.numel() else torch.zeros((), dtype=torch.float64, device=a.device)
    return worst_of(name, wrong, err, a, y, allowed, rank=rank, row_offset=truth.row_offset + start,
                    total=finite_truth.sum(), scalars={"max_error_over_budget": tightest})
