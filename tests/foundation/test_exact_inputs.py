"""Exact-mode inputs justify bitwise equality (issue 2, item 3): for every W, per-rank inputs differ
across ranks, every partial, every running sum and the total are integers with |.| <= 256 — exactly
representable in bf16 — so any summation order gives the same bits, and dropping any rank changes
the result."""

from __future__ import annotations

import pytest
import torch

from oracle import all_rank_inputs, exact_nnz

M, N, K, SEED = 33, 24, 256, 3


def _is_int(t: torch.Tensor) -> bool:
    return bool((t == t.round()).all())


@pytest.mark.parametrize("W", [1, 2, 4, 8, 16])
def test_exact_inputs_sum_exactly_in_bf16(W):
    inputs = all_rank_inputs(SEED, M, N, K, W, "exact")
    xs = [x for x, _ in inputs]
    ws = [w for _, w in inputs]
    for r in range(W):
        assert xs[r].dtype == ws[r].dtype == torch.bfloat16
        assert _is_int(xs[r].double()) and _is_int(ws[r].double())
        assert int((xs[r] != 0).sum(1).max()) <= exact_nnz(W)
        for s in range(r):
            assert not torch.equal(xs[r], xs[s]), f"x of ranks {s} and {r} are equal"
            assert not torch.equal(ws[r], ws[s]), f"w of ranks {s} and {r} are equal"

    partials = [x.double() @ w.double().T for x, w in inputs]  # fp64: exact for these magnitudes
    total = torch.stack(partials).sum(0)
    abs_sum = torch.stack(partials).abs().sum(0)
    for p in partials:
        assert _is_int(p)
    assert _is_int(total)
    assert float(abs_sum.max()) <= 256  # bounds every running sum, in any order
    assert float(total.abs().max()) > 8  # not a degenerate all-zero case
    assert torch.equal(total.bfloat16().double(), total)  # the bf16-rounded total is the total

    # the computations the contract allows give exactly those bits
    bf16_partials = [x @ w.T for x, w in inputs]
    for p, p64 in zip(bf16_partials, partials):
        assert torch.equal(p.double(), p64)
    forward = bf16_partials[0].clone()
    for p in bf16_partials[1:]:
        forward = forward + p
    backward = bf16_partials[-1].clone()
    for p in reversed(bf16_partials[:-1]):
        backward = backward + p
    assert torch.equal(forward.double(), total) and torch.equal(backward.double(), total)

    # no rank can hide: dropping any one changes the result
    for r in range(W):
        assert not torch.equal(total - partials[r], total), f"dropping rank {r} changes nothing"
