"""Alternation: any sequence of valid M gives each result as if it were the first call. The caller
records, for each call of a sequence, the output and the output of a fresh call (a first call of a
fresh implementation, or the oracle in exact mode); every pair must be bitwise identical. A result
cached per shape, a stale workspace row or an epoch that is not advanced shows as a mismatch at the
call where it happens."""

from __future__ import annotations

from .exact import bitwise_equal
from .result import CheckResult, no_valid_rows


def fresh_per_call(sequence: list[tuple[int, object, object, int, int]], *, rank=None,
                   name="fresh_per_call") -> CheckResult:
    """``sequence``: [(M, output_in_sequence, fresh_output, n_valid, row_offset), ...]. Calls with no valid row on
    this rank compare nothing; with none that has one, the check is skipped."""
    compared = 0
    for i, (M, got, fresh, n_valid, row_offset) in enumerate(sequence):
        res = bitwise_equal(got, fresh, n_valid, rank=rank, row_offset=row_offset, name=name)
        if res.skipped:
            continue
        compared += 1
        if not res.passed:
            ms = [s[0] for s in sequence]
            res.detail = f"call {i} of the sequence (M={M}, sequence {ms}) differs from a fresh call"
            return res
    if not compared:
        return no_valid_rows(name, rank)
    return CheckResult(name=name, passed=True, rank=rank, total=compared,
                       detail=f"{compared} of {len(sequence)} calls with valid rows here, each as fresh: M sequence "
                              f"{[s[0] for s in sequence]}")
