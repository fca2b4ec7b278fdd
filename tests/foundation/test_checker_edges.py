"""Edges of the checkers the fourth planted-bug audit (34th session) found unpinned: the truth summed in fp64 (not
fp32), storages that overlap without sharing a start, an infinite result against the bias check, the exact inputs'
bound held against bf16's exact integers, the gathered bias model over every owner's rows, and a NaN reported as
the worst element."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from oracle import all_rank_inputs, exact_nnz, shard_truth
from oracle.inputs import EXACT_MAX_WORLD
from properties import fresh_result, within_tolerance
from properties.bias import no_systematic_bias, seeded_rounding_model
from properties.result_contract import shares_storage


def test_the_truth_is_summed_in_fp64():
    # 2^30 + 1 needs 31 bits: fp32 (24) rounds it to 2^30, fp64 keeps it
    x = torch.tensor([[2.0**30, 1.0]], dtype=torch.bfloat16)
    w = torch.tensor([[1.0, 1.0]], dtype=torch.bfloat16)
    truth = shard_truth([(x, w)], 0, 1)
    assert truth.y.dtype == torch.float64 and truth.y[0, 0].item() == 2.0**30 + 1


def test_storages_that_overlap_without_sharing_a_start_are_shared():
    base = torch.zeros(100, dtype=torch.float32)
    inner = torch.from_numpy(base.numpy()[10:20])  # its own storage, inside base's bytes
    assert inner.untyped_storage().data_ptr() != base.untyped_storage().data_ptr()
    assert shares_storage(inner, base) and shares_storage(base, inner)
    res = fresh_result(inner, {"workspace": base})
    assert not res.passed and "workspace" in res.render()
    apart = torch.from_numpy(np.zeros(10, dtype=np.float32))
    assert not shares_storage(apart, base) and fresh_result(apart, {"workspace": base}).passed


def test_adjacent_storages_are_not_shared():
    """Two allocations back to back (a caching allocator carves blocks of one segment: a result right after a
    workspace) share no byte: the end of one is the start of the other, not an overlap."""
    base = np.zeros(20, dtype=np.float32)
    first, second = torch.from_numpy(base[:10]), torch.from_numpy(base[10:])
    assert first.untyped_storage().data_ptr() + first.untyped_storage().nbytes() == second.untyped_storage().data_ptr()
    assert not shares_storage(first, second) and not shares_storage(second, first)
    assert fresh_result(second, {"workspace": first}).passed


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_an_infinite_result_where_the_truth_is_finite_fails_the_bias_check(value):
    model = seeded_rounding_model(3, "gaussian", 0, 64, 64, 64, 2)
    y = model.y.to(torch.bfloat16)
    y[3, 5] = value
    res = no_systematic_bias(y, model, rank=0)
    assert not res.passed and not res.skipped, res.render()


def test_the_exact_inputs_stay_within_bf16s_exact_integers_at_every_world_size():
    assert torch.tensor(256.0).bfloat16().item() == 256 and torch.tensor(257.0).bfloat16().item() != 257
    for W in range(1, EXACT_MAX_WORLD + 1):
        # one non-zero of |x| <= 2 times |w| <= 3 per rank and position: the W-rank sum of a row within 256
        assert W * exact_nnz(W) * 2 * 3 <= 256, W


def test_the_gathered_bias_model_covers_every_owners_rows():
    M, N, K, W = 64, 64, 64, 4
    gathered = seeded_rounding_model(3, "gaussian", None, M, N, K, W)
    per_rank = [seeded_rounding_model(3, "gaussian", r, M, N, K, W) for r in range(W)]
    for label, bound in gathered.systematic.items():
        total = sum(m.systematic[label] for m in per_rank)
        assert bound >= 0.999 * total, (label, bound, total)


def test_a_nan_is_reported_as_the_worst_element():
    inputs = all_rank_inputs(4, 8, 8, 16, 1, "gaussian")
    truth = shard_truth(inputs, 0, 8)
    y = truth.y.to(torch.bfloat16)
    y[6, 1] = y[6, 1] * 1.5 + 1  # a finite wrong value
    y[2, 3] = float("nan")
    res = within_tolerance(y, truth)
    assert not res.passed and tuple(res.worst_index) == (2, 3), res.render()
