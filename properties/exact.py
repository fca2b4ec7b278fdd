"""Bitwise equality in exact mode (inputs from ``oracle.inputs`` kind ``exact``): every partial and sum
is an integer of magnitude <= 256, exact in bf16, so implementation and oracle must agree bit for bit
on every valid row, and against the fp64 truth too. A wrong peer, a rank counted twice or a row
shifted by one changes an integer and cannot hide under any tolerance."""

from __future__ import annotations

import torch

from .result import in_row_blocks, no_valid_rows, worst_of


def bitwise_equal(actual: torch.Tensor, expected: torch.Tensor, n_valid: int, *, rank=None, row_offset=0,
                  name="bitwise_equal"):
    """Valid rows of ``actual`` and ``expected`` have identical bits (NaN payloads included); no rows to compare is a
    skip (:data:`properties.result.NO_VALID_ROWS`), not a pass. Compared in blocks of rows
    (:func:`~properties.result.in_row_blocks`)."""
    if n_valid <= 0:
        return no_valid_rows(name, rank)
    return in_row_blocks(lambda start, stop: _equal_rows(actual[start:stop], expected[start:stop], rank,
                                                         row_offset + start, name),
                         n_valid, actual[0].numel(), name, rank)


def _equal_rows(actual, expected, rank, row_offset, name):
    a = actual.detach()
    e = expected.detach().to(a.device)
    if a.dtype != e.dtype:
        e = e.to(a.dtype)
    if a.element_size() == 2:
        ab, eb = a.contiguous().view(torch.int16), e.contiguous().view(torch.int16)
    else:
        ab, eb = a.contiguous().view(torch.int32), e.contiguous().view(torch.int32)
    wrong = ab != eb
    err = (a.double() - e.double()).abs()
    err = torch.where(wrong & ~(err > 0), torch.full_like(err, float("inf")), err)  # bit-different, same value
    return worst_of(name, wrong, err, a, e, 0.0, rank=rank, row_offset=row_offset)
