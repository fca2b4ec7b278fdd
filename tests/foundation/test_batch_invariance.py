"""Batch invariance (properties/batch_invariance.py; issue 15, item 4): the row maps and inputs the two
calls get, and the checker fed right and wrong results. The mutant PositionDependentRow is run on W = 2
gloo ranks in test_bias.py::test_numerics_mutants_w2_over_gloo (one process group for every numerics
mutant).

Verification model:
1. the row map is deterministic, the same on every rank, pairs distinct rows in range, swaps the first
   and last rows (first and last M tiles), keeps each token in its owner's shard or — cross_owner — not;
2. call B's inputs hold call A's tokens at the mapped rows and other tokens elsewhere, same weights;
3. a correct implementation passes, per rank and gathered; one flipped bit in one mapped row fails, with
   the token's rows and both M in the message;
4. exact inputs are never waived; other inputs are waived with the implementation's reason; a rank with
   no mapped token is skipped for this example, a result too small for the map is a harness error;
5. a reduction whose order depends on the shard's owner (a ring or gloo reduce-scatter at W >= 3) passes
   the per-rank map and fails the cross-owner map — on gaussian inputs; on exact inputs it passes both.
"""

from __future__ import annotations

import pytest
import torch

from kernel.unfused import UnfusedGemmRs
from oracle import all_rank_inputs
from oracle.inputs import exact_nnz
from properties.batch_invariance import RowMap, batch_invariant, invariance_inputs, row_map


def _owner(row: int, M: int, W: int) -> int:
    return row // -(-M // W)


@pytest.mark.parametrize("M_a, M_b, W", [(129, 256, 2), (1000, 37, 3), (5, 8, 4), (1, 64, 1)])
@pytest.mark.parametrize("cross_owner", [False, True])
def test_row_map_pairs_distinct_rows_first_and_last_swapped(M_a, M_b, W, cross_owner):
    rm = row_map(7, M_a, M_b, W, cross_owner=cross_owner)
    assert rm == row_map(7, M_a, M_b, W, cross_owner=cross_owner)  # no rank, no state: every rank agrees
    assert rm.rows_a and len(set(rm.rows_a)) == len(rm.rows_a) and len(set(rm.rows_b)) == len(rm.rows_b)
    assert all(0 <= a < M_a for a in rm.rows_a) and all(0 <= b < M_b for b in rm.rows_b)
    pairs = dict(zip(rm.rows_a, rm.rows_b))
    if cross_owner:
        assert pairs[0] == M_b - 1 and pairs[M_a - 1] == 0 or min(M_a, M_b) == 1
    else:
        assert all(_owner(a, M_a, W) == _owner(b, M_b, W) for a, b in pairs.items())
        S_a, S_b = -(-M_a // W), -(-M_b // W)
        for r in range(W):
            first_a, last_b = r * S_a, min(M_b, r * S_b + S_b) - 1
            if first_a < M_a and r * S_b < M_b and first_a + 1 < min(M_a, first_a + S_a):
                assert pairs[first_a] == last_b


def test_cross_owner_map_moves_tokens_to_other_ranks():
    rm = row_map(7, 129, 256, 4, cross_owner=True)
    moved = [(a, b) for a, b in zip(rm.rows_a, rm.rows_b) if _owner(a, 129, 4) != _owner(b, 256, 4)]
    assert len(moved) >= len(rm.rows_a) // 2
    with pytest.raises(ValueError):
        RowMap(4, 4, (0, 0), (1, 2))  # a row of A used twice


def test_a_rank_sees_the_pairs_it_owns_in_both_calls_and_no_other():
    """Per rank, a pair counts only where both its rows are the rank's (a cross-owner map's other pairs lie in
    another rank's shard of A or of B: their local rows would index another token, or wrap from the end)."""
    M_a, M_b, W = 129, 256, 4
    rm = row_map(7, M_a, M_b, W, cross_owner=True)
    S_a, S_b = -(-M_a // W), -(-M_b // W)
    seen = []
    for rank in range(W):
        for la, lb, ga, gb in rm.visible(rank, W):
            assert _owner(ga, M_a, W) == rank == _owner(gb, M_b, W)
            assert (la, lb) == (ga - rank * S_a, gb - rank * S_b) and 0 <= la < S_a and 0 <= lb < S_b
            seen.append((ga, gb))
    same = [(a, b) for a, b in zip(rm.rows_a, rm.rows_b) if _owner(a, M_a, W) == _owner(b, M_b, W)]
    assert sorted(seen) == sorted(same) and len(same) < len(rm.rows_a)


@pytest.mark.parametrize("kind", ["gaussian", "exact"])
def test_inputs_carry_the_same_tokens_at_the_mapped_rows(kind):
    W, N, K = 3, 64, 64
    for rank in range(W):
        inv = invariance_inputs(5, rank, 100, 40, N, K, W, kind, cross_owner=True)
        rows_a, rows_b = list(inv.row_map.rows_a), list(inv.row_map.rows_b)
        assert inv.x_a.shape == (100, K) and inv.x_b.shape == (40, K) and inv.w.shape == (N, K)
        assert torch.equal(inv.x_b[rows_b], inv.x_a[rows_a])
        others = [i for i in range(40) if i not in rows_b]
        assert not torch.equal(inv.x_b[others], inv.x_a[others])  # other tokens, not call A's rows
        assert torch.equal(inv.x_a, all_rank_inputs(5, 100, N, K, W, kind)[rank][0])  # the oracle's generator
        if kind == "exact":
            assert (inv.x_b != 0).sum(dim=1).max() <= exact_nnz(W)


def _unfused(M_a, M_b, kind="gaussian", N=256, K=128):
    inv = invariance_inputs(11, 0, M_a, M_b, N, K, 1, kind)
    impl = UnfusedGemmRs(None, max_M=max(M_a, M_b), N=N, K=K)
    return inv, impl(inv.x_a, inv.w), impl(inv.x_b, inv.w)


def test_correct_implementation_passes_and_one_flipped_bit_fails():
    inv, y_a, y_b = _unfused(129, 256)
    ok = batch_invariant(y_a, y_b, inv.row_map, rank=0, world_size=1)
    assert ok.passed and not ok.skipped, ok.render()
    assert ok.extra["tokens"] == len(inv.row_map.rows_a) and "bitwise identical at M = 129 and M = 256" in ok.detail
    a, b = inv.row_map.rows_a[-1], inv.row_map.rows_b[-1]  # the last row of A: in the partial M tile
    flipped = y_b.clone()
    flipped.view(torch.int16)[b, 17] ^= 1
    res = batch_invariant(y_a, flipped, inv.row_map, rank=0, world_size=1)
    assert not res.passed and res.n_wrong == 1 and res.worst_row == b and res.worst_index == (b, 17)
    assert f"the token of row {a} at M = 129 is row {b} at M = 256, 1 of 256 elements differ" in res.render()


def test_a_zero_s_sign_is_a_bit_that_differs():
    inv, y_a, y_b = _unfused(129, 256)
    a, b = inv.row_map.rows_a[0], inv.row_map.rows_b[0]
    y_a, y_b = y_a.clone(), y_b.clone()
    y_a[a, 9], y_b[b, 9] = 0.0, -0.0  # equal as numbers, other bits
    res = batch_invariant(y_a, y_b, inv.row_map, rank=0, world_size=1)
    assert not res.passed and res.n_wrong == 1 and res.worst_index == (b, 9), res.render()


def test_a_nan_is_a_nan_whatever_its_bits_but_not_a_number_nor_an_infinity():
    # torch's CPU GEMM gave one NaN element of a token other bits at M = 1 than at M = 127 (the 29th session's CI)
    inv, y_a, y_b = _unfused(129, 256)
    a, b = inv.row_map.rows_a[0], inv.row_map.rows_b[0]
    y_a, y_b = y_a.clone(), y_b.clone()
    y_a.view(torch.int16)[a, 3] = 0x7FC0  # the quiet NaN
    y_b.view(torch.int16)[b, 3] = -0x40  # 0xFFC0: its sign bit set
    y_a.view(torch.int16)[a, 5] = 0x7FC0  # the quiet NaN
    y_b.view(torch.int16)[b, 5] = 0x7FC1  # another payload
    assert y_a.view(torch.int16)[a, 3] != y_b.view(torch.int16)[b, 3]
    ok = batch_invariant(y_a, y_b, inv.row_map, rank=0, world_size=1)
    assert ok.passed, ok.render()
    for value in (1.0, float("inf")):  # a NaN against a number, or against an infinity: a different result
        other = y_b.clone()
        other[b, 3] = value
        res = batch_invariant(y_a, other, inv.row_map, rank=0, world_size=1)
        assert not res.passed and res.n_wrong == 1 and res.worst_index == (b, 3), res.render()
    infs = y_b.clone()
    y_inf = y_a.clone()
    y_inf[a, 7], infs[b, 7] = float("inf"), -float("inf")
    assert not batch_invariant(y_inf, infs, inv.row_map, rank=0, world_size=1).passed


def test_gathered_results_check_every_pair():
    inv, y_a, y_b = _unfused(300, 77)
    res = batch_invariant(y_a, y_b, inv.row_map)  # rank=None: gathered
    assert res.passed and res.extra["tokens"] == len(inv.row_map.rows_a)


def test_waiver_applies_to_non_exact_inputs_only():
    inv, y_a, y_b = _unfused(64, 8, kind="exact")
    wrong = y_b.clone()
    wrong[inv.row_map.rows_b[0]] += 1
    res = batch_invariant(y_a, wrong, inv.row_map, exact=True, waiver="order depends on M")
    assert not res.passed and not res.skipped and "exact inputs: a wrong value" in res.render()
    waived = batch_invariant(y_a, wrong, inv.row_map, exact=False, waiver="order depends on M")
    assert waived.skipped and not waived.passed and "waived: order depends on M" in waived.render()


def test_no_mapped_token_on_a_rank_is_skipped_and_a_short_result_is_an_error():
    rm = row_map(3, 1, 8, 2, cross_owner=False)  # M_a = 1: rank 1 has no row of call A
    res = batch_invariant(torch.zeros(1, 4), torch.zeros(4, 4), rm, rank=1, world_size=2)
    assert res.skipped and res.extra.get("per_example")
    with pytest.raises(ValueError, match="not in it"):
        batch_invariant(torch.zeros(1, 4), torch.zeros(1, 4), row_map(3, 8, 8, 1, cross_owner=False))


def _ring_reduce_scatter(partials: list[torch.Tensor], M: int) -> torch.Tensor:
    """Gathered result of a bf16 reduce-scatter whose chunk r is summed in the order r+1, r+2, ..., r
    (a ring, and what gloo does: docs/NUMERICS.md)."""
    W = len(partials)
    S = -(-M // W)
    out = torch.empty_like(partials[0])
    for r in range(W):
        rows = slice(r * S, min(M, r * S + S))
        acc = partials[(r + 1) % W][rows]
        for i in range(2, W + 1):
            acc = acc + partials[(r + i) % W][rows]  # bf16: rounded after every add
        out[rows] = acc
    return out


@pytest.mark.parametrize("kind", ["gaussian", "exact"])
def test_owner_dependent_reduction_order_fails_only_across_owners(kind):
    W, N, K, M_a, M_b = 3, 128, 64, 200, 129
    results = {}
    for cross_owner in (False, True):
        inv = [invariance_inputs(13, r, M_a, M_b, N, K, W, kind, cross_owner=cross_owner) for r in range(W)]
        y_a = _ring_reduce_scatter([i.x_a @ i.w.T for i in inv], M_a)
        y_b = _ring_reduce_scatter([i.x_b @ i.w.T for i in inv], M_b)
        rm = inv[0].row_map
        if not cross_owner:  # per rank, on each rank's shard
            S_a, S_b = -(-M_a // W), -(-M_b // W)
            per_rank = [batch_invariant(y_a[r * S_a : r * S_a + S_a], y_b[r * S_b : r * S_b + S_b], rm, rank=r,
                                        world_size=W, exact=kind == "exact") for r in range(W)]
            results[cross_owner] = per_rank
        else:
            results[cross_owner] = [batch_invariant(y_a, y_b, rm, exact=kind == "exact")]
    assert all(r.passed and not r.skipped for r in results[False]), [r.render() for r in results[False]]
    across = results[True][0]
    if kind == "exact":
        assert across.passed, across.render()
    else:
        assert not across.passed and across.extra["tokens_differing"] >= 1, across.render()


def test_unfused_waives_batch_invariance_only_where_measured():
    from kernel.interface import CLAUSES
    from kernel.unfused import CPU_MM_BATCH_INVARIANT_MAX_K, batch_variance

    assert "batch_invariant" in CLAUSES
    cpu = torch.device("cpu")
    assert batch_variance(cpu, CPU_MM_BATCH_INVARIANT_MAX_K) is None
    assert "K=1088" in batch_variance(cpu, 1088)
    assert "cuBLAS" in batch_variance(torch.device("cuda", 0), 64)
    assert batch_variance(cpu, 64, 2) is None and "W=3" in batch_variance(cpu, 64, 3)
    waived = UnfusedGemmRs(max_M=8, N=8, K=CPU_MM_BATCH_INVARIANT_MAX_K + 1).waived_clauses
    assert "K=1025" in waived["batch_invariant"]
    assert "batch_invariant" not in UnfusedGemmRs(max_M=8, N=8, K=64).waived_clauses
    assert "batch_invariant" not in UnfusedGemmRs.waived_clauses  # a mutant inherits no blanket waiver
