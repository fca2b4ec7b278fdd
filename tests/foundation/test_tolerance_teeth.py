"""The derived tolerance has teeth (issue 2, item 2).

W=4 ranks, inputs of kind "small" (values ~2^-20): a result that drops one rank's partial must fail
within_tolerance, while both conforming computations — bf16 partials summed in bf16 (a bf16
reduce-scatter) and an fp32 sum rounded once — pass. A magic ``allclose(atol=4.0)`` passes the dropped
rank: that is why the budget is derived. And in exact mode a result off by a factor (1 + 2^-7) passes
the tolerance but fails bitwise_equal.
"""

from __future__ import annotations

import pytest
import torch

from oracle import all_rank_inputs, shard_truth
from properties import bitwise_equal, within_tolerance

W, M, N, K, SEED = 4, 24, 64, 128, 11
S = -(-M // W)


def _partials(inputs, rank):
    """Every rank's bf16 partial (fp32 accumulate, bf16 out) for ``rank``'s shard rows, and the fp32 ones."""
    rows = slice(rank * S, rank * S + S)
    bf16 = [x[rows] @ w.T for x, w in inputs]
    fp32 = [x[rows].float() @ w.float().T for x, w in inputs]
    return bf16, fp32


def _bf16_chain_sum(parts):
    acc = parts[0].clone()
    for p in parts[1:]:
        acc = acc + p  # bf16 + bf16 -> rounded to bf16 after every step
    return acc


@pytest.fixture(scope="module")
def small_inputs():
    return all_rank_inputs(SEED, M, N, K, W, "small")


@pytest.mark.parametrize("rank", range(W))
def test_conforming_results_pass(small_inputs, rank):
    truth = shard_truth(small_inputs, rank, M)
    bf16, fp32 = _partials(small_inputs, rank)
    assert bf16[0].dtype == torch.bfloat16
    oracle_style = _bf16_chain_sum(bf16)
    within_tolerance(oracle_style, truth, rank=rank).raise_if_failed()
    fp32_once = torch.stack([p.float() for p in bf16]).sum(0).bfloat16()
    within_tolerance(fp32_once, truth, rank=rank).raise_if_failed()
    fp32_unrounded_partials = torch.stack(fp32).sum(0).bfloat16()
    within_tolerance(fp32_unrounded_partials, truth, rank=rank).raise_if_failed()


@pytest.mark.parametrize("dropped", range(W))
def test_dropped_rank_fails_tolerance_but_passes_a_magic_atol(small_inputs, dropped):
    rank = 1
    truth = shard_truth(small_inputs, rank, M)
    bf16, _ = _partials(small_inputs, rank)
    kept = [p.float() for r, p in enumerate(bf16) if r != dropped]
    dropped_result = torch.stack(kept).sum(0).bfloat16()
    res = within_tolerance(dropped_result, truth, rank=rank)
    assert not res.passed, res.render()
    assert res.n_wrong > res.total // 2, res.render()  # not a borderline miss: most elements are off
    assert f"Mismatched elements: {res.n_wrong} / {S * N}" in res.render()
    # what a guessed tolerance would have said
    assert torch.allclose(dropped_result.double(), truth.y, atol=4.0)
    assert abs(truth.y).max() < 2.0**-10  # the values themselves are tiny


def test_off_by_one_part_in_128_passes_tolerance_but_fails_bitwise():
    inputs = all_rank_inputs(SEED, M, N, K, W, "exact")
    for rank in range(W):
        truth = shard_truth(inputs, rank, M)
        exact = truth.y.bfloat16()
        bitwise_equal(exact, truth.y, truth.n_valid, rank=rank).raise_if_failed()
        scaled = (truth.y * (1 + 2.0**-7)).bfloat16()
        res = bitwise_equal(scaled, truth.y, truth.n_valid, rank=rank, row_offset=truth.row_offset)
        assert not res.passed
        assert res.n_wrong == int((truth.y != 0).sum()), res.render()  # every non-zero element moved
        # the tolerance alone would not see it: 2^-7 relative is within the W-rank budget
        assert within_tolerance(scaled, truth, rank=rank).passed
