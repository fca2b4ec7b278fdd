"""``GemmRsImplementation.fresh_result``: the result of a call without ``out=`` -- padding rows +0.0 (CONTRACT.md,
"Result"), the valid rows not filled first (the call writes them; a whole-shard memset was ~10 % of a W = 1 call at
M = N = 8192 on one H200). The gate's ``fresh_padding_zero`` holds implementations to the first half; this holds
the helper to both, on every rank of a group, without a process group (rank and W set by hand)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernel.unfused import UnfusedGemmRs


class _Fills(TorchDispatchMode):
    """The ops a block dispatches that write a value into a tensor (zero_, fill_, zeros)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if any(k in name for k in ("zero", "fill", "full")):
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def _impl(W: int, rank: int, N: int = 16) -> UnfusedGemmRs:
    impl = UnfusedGemmRs(max_M=64, N=N, K=64, device="cpu")
    impl.world_size, impl.rank = W, rank  # shard arithmetic only: no collective runs here
    return impl


@pytest.mark.parametrize("W, M", [(1, 1), (1, 37), (2, 8), (4, 16)])
def test_a_rank_whose_rows_are_all_valid_gets_no_fill(W, M):
    for rank in range(W):
        with _Fills() as fills:
            out = _impl(W, rank).fresh_result(M)
        assert out.shape == (-(-M // W), 16) and out.dtype == torch.bfloat16 and out.is_contiguous()
        assert fills.ops == [], (W, M, rank, fills.ops)


@pytest.mark.parametrize("W, M", [(2, 7), (4, 5), (16, 129), (8, 3)])
def test_padding_rows_are_zero_and_only_they_are_filled(W, M):
    S = -(-M // W)
    for rank in range(W):
        impl = _impl(W, rank)
        n_valid = max(0, min(S, M - rank * S))
        for _ in range(3):  # the allocator hands back memory an earlier result held: poison what it may reuse
            torch.full((S, 16), float("nan"), dtype=torch.bfloat16)
        with _Fills() as fills:
            out = impl.fresh_result(M)
        pad = out[n_valid:]
        assert pad.view(torch.int16).eq(0).all(), (W, M, rank)  # +0.0: every bit zero
        assert (fills.ops == []) == (n_valid == S), (W, M, rank, fills.ops)


def test_an_implementation_s_negative_row_count_still_zeroes_the_whole_shard():
    """A subclass whose ``valid_rows`` goes negative (the planted ``EmptyRankNegativeRowCount``'s bug) must not make
    the helper slice from the end: the whole shard is padding then."""

    class Negative(UnfusedGemmRs):
        def valid_rows(self, M):
            return -1

    impl = Negative(max_M=64, N=16, K=64, device="cpu")
    out = impl.fresh_result(9)
    assert out.shape == (9, 16) and out.view(torch.int16).eq(0).all()
