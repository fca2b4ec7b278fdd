"""The element checks take a large shard in blocks of rows (properties/result.py, ``in_row_blocks`` and
``BLOCK_ELEMENTS``: 16 ranks time-slicing an 80 GB H100 ran out of memory in a whole-shard ``within_tolerance``) and
give the result the whole shard gives. ``within_tolerance``:
the same verdict, counts, worst element (its shard index and global row, values, budget) and tightest ratio --
for conforming results, a dropped rank, NaN and infinite elements, a wrong element in the last block alone, and
equal errors in two blocks (the first one is reported, as argmax over the whole shard does). ``bitwise_equal`` and
``nonfinite_pattern_matches`` the same, their counts of non-finite elements included."""

from __future__ import annotations

import math

import pytest
import torch

from oracle import all_rank_inputs, shard_truth
from properties import bitwise_equal, nonfinite_pattern_matches, result, tolerance, within_tolerance

W, M, N, K, SEED, RANK = 4, 40, 64, 128, 5, 1
S = -(-M // W)
FIELDS = ("passed", "skipped", "total", "n_wrong", "n_nan", "n_inf", "worst_index", "worst_row", "worst_actual",
          "worst_expected", "worst_error", "allowed")


@pytest.fixture(scope="module")
def case():
    inputs = all_rank_inputs(SEED, M, N, K, W, "gaussian")
    rows = slice(RANK * S, RANK * S + S)
    good = torch.stack([(x[rows].float() @ w.float().T) for x, w in inputs]).sum(0).bfloat16()
    dropped = torch.stack([(x[rows].float() @ w.float().T) for x, w in inputs[1:]]).sum(0).bfloat16()
    return shard_truth(inputs, RANK, M), good, dropped


def _results(good, dropped):
    def put(*cells):
        y = good.clone()
        for (r, c, v) in cells:
            y[r, c] = v
        return y

    return {
        "conforming": good,
        "dropped rank": dropped,
        "nan in a late row": put((S - 2, 3, float("nan"))),
        "inf and nan": put((2, 5, float("inf")), (S - 1, 7, float("nan"))),
        "wrong in the last block only": put((S - 1, N - 1, good[S - 1, N - 1].float() + 100.0)),
        "equal errors in two blocks": put((1, 4, good[1, 4].float() + 64.0), (S - 1, 4, good[S - 1, 4].float() + 64.0)),
    }


def _fields(res):
    out = {f: getattr(res, f) for f in FIELDS}
    out["over"] = res.extra.get("max_error_over_budget")
    return {k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}


def _small_wrong_beside_a_large_right():
    """The shard's row 0 scaled by 2^8 (every rank's x, exact in bf16), a conforming result but one wrong element
    in its last row whose error is smaller than row 0's right ones: the wrong one is the worst (a merge that took
    the largest error over every block would name a right one)."""
    inputs = [(x.clone(), w) for x, w in all_rank_inputs(SEED, M, N, K, W, "gaussian")]
    for x, _ in inputs:
        x[RANK * S] *= 256
    truth = shard_truth(inputs, RANK, M)
    rows = slice(RANK * S, RANK * S + S)
    y = torch.stack([(x[rows].float() @ w.float().T) for x, w in inputs]).sum(0).bfloat16()
    allowed = tolerance.budget(truth)
    col = int(allowed[S - 1].argmin())
    y[S - 1, col] = (truth.y[S - 1, col] + 2 * allowed[S - 1, col]).to(torch.bfloat16)
    err = (y.double() - truth.y[:S]).abs()
    assert allowed[S - 1, col] < err[S - 1, col] < err[0].max(), "the case needs a small wrong error, large right ones"
    return truth, y


@pytest.mark.parametrize("rows_per_block", [1, 2, 3])
@pytest.mark.parametrize("which", ["conforming", "dropped rank", "nan in a late row", "inf and nan",
                                   "wrong in the last block only", "equal errors in two blocks",
                                   "small wrong beside a large right"])
def test_blocks_give_the_whole_shards_result(case, monkeypatch, which, rows_per_block):
    truth, good, dropped = case
    if which == "small wrong beside a large right":
        truth, y = _small_wrong_beside_a_large_right()
    else:
        y = _results(good, dropped)[which]
    whole = within_tolerance(y, truth, rank=RANK)
    monkeypatch.setattr(result, "BLOCK_ELEMENTS", rows_per_block * N)
    blocked = within_tolerance(y, truth, rank=RANK)
    assert _fields(blocked) == _fields(whole)
    assert whole.passed == (which == "conforming")


def test_the_worst_element_is_named_by_its_shard_place_in_a_later_block(case, monkeypatch):
    truth, good, _ = case
    y = _results(good, None)["wrong in the last block only"]
    monkeypatch.setattr(result, "BLOCK_ELEMENTS", N)
    res = within_tolerance(y, truth, rank=RANK)
    assert not res.passed and res.n_wrong == 1 and res.total == S * N
    assert res.worst_index == (S - 1, N - 1) and res.worst_row == RANK * S + S - 1


@pytest.mark.parametrize("rows_per_block", [1, 3])
@pytest.mark.parametrize("which", ["conforming", "dropped rank", "nan in a late row", "inf and nan",
                                   "wrong in the last block only", "equal errors in two blocks"])
def test_bitwise_and_nonfinite_blocks_give_the_whole_shards_result(case, monkeypatch, which, rows_per_block):
    _, good, dropped = case
    y = _results(good, dropped)[which]
    expected = good.clone()
    expected[3, 2], expected[S - 1, 7] = float("-inf"), float("nan")  # the oracle's own non-finite elements
    checks = [lambda: bitwise_equal(y, good, S, rank=RANK, row_offset=RANK * S),
              lambda: nonfinite_pattern_matches(y, expected, S, rank=RANK, row_offset=RANK * S)]
    whole = [c() for c in checks]
    monkeypatch.setattr(result, "BLOCK_ELEMENTS", rows_per_block * N)
    blocked = [c() for c in checks]
    for w, b in zip(whole, blocked):
        assert _fields(b) == _fields(w) and b.extra == w.extra and b.detail == w.detail
    assert whole[0].passed == (which == "conforming") and not whole[1].passed
