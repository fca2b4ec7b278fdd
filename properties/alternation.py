"""Alternation: any sequence of valid M gives each result as if it were the first call. The caller
records, for each call of a sequence, the output and the output of a fresh call (a first call of a
fresh implementation, or the oracle in exact mode); every pair must be bitwise identical. A result
cached per shape, a stale workspace row or an epoch that is not advanced shows as a mismatch at the
call where it happens."""

from __future__ import annotations

from .exact import bitwise_equal
from .result import CheckResult


def fresh_per_call(sequence: list[tuple[int, object, object, int, int]], *, rank=None,
                   name="fresh_per_call") -> CheckResult:
    """``sequence``: [(M, output_in_sequence, fresh_output, n_valid, row_offset), ...]."""
    for i, (M, got, fresh, n_valid, row_offset) in enumerate(sequence):
        res = bitwise_equal(got, fresh, n_valid, rank=rank, row_offset=row_offset, name=name)
        if not res.passed:
            ms = [s[0] for s in sequence]
            res.detail = f"call {i} of the sequence (M={M}, sequence {ms}) differs from a fresh call"
            return res
    return CheckResult(name=name, passed=True, rank=rank, total=len(sequence),
                       detail=f"{len(sequence)} calls, each as fresh: M sequence {[s[0] for s in sequence]}")
