"""Padding rows untouched: a caller that passes ``out=`` pre-filled with a sentinel finds the sentinel
bit for bit in every row ``r*S + i >= M`` afterwards (CONTRACT.md). Also used for the valid-rows-only
rule of any view: rows past ``n_valid`` must equal what was there before the call."""

from __future__ import annotations

import torch

from .result import CheckResult, skipped, worst_of

#: The reason a padding check is skipped on a rank whose shard is full (W = 1, or M a multiple of W): nothing there
#: could differ. Tests tell this skip from any other by it.
NO_PADDING_ROWS = "no padding rows on this rank (its shard is full)"
SENTINEL = float.fromhex("0x1.5p+99")  # bf16-exact, never a plausible GEMM result of our inputs


def sentinel_like(shape, device="cpu") -> torch.Tensor:
    return torch.full(shape, SENTINEL, dtype=torch.bfloat16, device=device)


def padded_rows_untouched(out: torch.Tensor, before: torch.Tensor, n_valid: int, *, rank=None, row_offset=0,
                          name="padded_rows_untouched") -> CheckResult:
    """Rows ``n_valid:`` of ``out`` equal ``before`` bit for bit (``before``: a copy taken before the call)."""
    a = out[n_valid:].detach().contiguous()
    b = before[n_valid:].detach().contiguous()
    if a.numel() == 0:  # nothing that could differ: not a pass (W = 1, or M a multiple of W: every shard full)
        return skipped(name, NO_PADDING_ROWS, rank=rank, per_example=True)
    changed = a.view(torch.int16) != b.view(torch.int16)
    zero = torch.zeros((), dtype=torch.float64, device=a.device)
    err = torch.where(changed, (a.double() - b.double()).abs().nan_to_num(float("inf")), zero)
    err = torch.where(changed & ~(err > 0), torch.full_like(err, float("inf")), err)
    res = worst_of(name, changed, err, a, b, 0.0, rank=rank, row_offset=row_offset + n_valid)
    if res.worst_index is not None:  # index into out, not into its padding slice
        res.worst_index = (res.worst_index[0] + n_valid, *res.worst_index[1:])
    return res
