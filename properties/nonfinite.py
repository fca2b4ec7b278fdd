"""The NaN/+Inf/-Inf pattern of the valid rows matches the oracle's: same positions, same class.
A kernel that swallows a NaN (max-reduces it away, clamps it, zero-fills it) or invents one fails."""

from __future__ import annotations

import torch

from .result import in_row_blocks, no_valid_rows, worst_of


def _classes(t: torch.Tensor) -> torch.Tensor:
    """0 finite, 1 NaN, 2 +Inf, 3 -Inf."""
    c = torch.zeros(t.shape, dtype=torch.int8, device=t.device)
    c[torch.isnan(t)] = 1
    c[torch.isposinf(t)] = 2
    c[torch.isneginf(t)] = 3
    return c


def nonfinite_pattern_matches(actual: torch.Tensor, expected: torch.Tensor, n_valid: int, *, rank=None,
                              row_offset=0, name="nonfinite_pattern_matches"):
    if n_valid <= 0:  # no rows, no pattern: a skip, not a pass
        return no_valid_rows(name, rank)
    counts = ("expected_nonfinite", "actual_nonfinite")
    res = in_row_blocks(lambda start, stop: _pattern_rows(actual[start:stop], expected[start:stop], rank,
                                                          row_offset + start, name),
                        n_valid, actual[0].numel(), name, rank, extra_merge=dict.fromkeys(counts, sum))
    for k in counts:
        res.extra[k] = int(res.extra[k])
    if not res.passed:
        res.detail = (f"oracle has {res.extra['expected_nonfinite']} non-finite elements, "
                      f"implementation {res.extra['actual_nonfinite']}; class (finite/NaN/+Inf/-Inf) differs at "
                      f"{res.n_wrong}")
    return res


def _pattern_rows(actual, expected, rank, row_offset, name):
    a = actual.detach().double()
    e = expected.detach().to(a.device).double()
    ca, ce = _classes(a), _classes(e)
    wrong = ca != ce
    return worst_of(name, wrong, wrong.double(), a, e, None, rank=rank, row_offset=row_offset,
                    scalars={"expected_nonfinite": (ce != 0).sum(), "actual_nonfinite": (ca != 0).sum()})
