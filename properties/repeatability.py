"""Repeatable bit for bit: the same inputs give identical output bits call after call (a reduction whose
order varies between calls fails this even when every result is within tolerance)."""

from __future__ import annotations

import torch

from .exact import bitwise_equal
from .result import CheckResult


def repeatable(outputs: list[torch.Tensor], n_valid: int, *, rank=None, row_offset=0, name="repeatable") -> CheckResult:
    """Every output in ``outputs`` has the bits of the first one on the valid rows."""
    if len(outputs) < 2:
        return CheckResult(name=name, passed=False, rank=rank, detail="need at least two outputs to compare")
    for i, o in enumerate(outputs[1:], start=1):
        res = bitwise_equal(o, outputs[0], n_valid, rank=rank, row_offset=row_offset, name=name)
        if res.skipped:  # no valid rows: every comparison is empty
            return res
        if not res.passed:
            res.detail = f"call {i} differs from call 0"
            return res
    return CheckResult(name=name, passed=True, rank=rank, total=len(outputs),
                       detail=f"{len(outputs)} calls bitwise identical")
