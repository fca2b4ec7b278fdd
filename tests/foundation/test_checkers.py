"""Every checker in properties/ (issue 2, item 1): passes on a correct result, fails on a planted wrong
one, and the failure's rendering locates it (counts, index, global row, rank). ``raise_if_failed``
raises PropertyViolation on failure and returns on pass; a skipped result is never ``passed``."""

from __future__ import annotations

import pytest
import torch

from kernel.errors import CapacityError, GemmRsInputError, ShapeError
from kernel.unfused import UnfusedGemmRs
from oracle import all_rank_inputs, shard_truth
from properties import (
    SENTINEL,
    CheckResult,
    Guarded,
    PropertyViolation,
    bitwise_equal,
    fresh_per_call,
    guard_regions_untouched,
    nonfinite_pattern_matches,
    padded_rows_untouched,
    rejected_cleanly,
    repeatable,
    sentinel_like,
    skipped,
    within_tolerance,
)
from properties.padding import NO_PADDING_ROWS

M, N, K, W = 16, 32, 64, 2
RANK = 1  # shard rows 8..15: global row = 8 + local row


def _truth(kind="gaussian", seed=1):
    inputs = all_rank_inputs(seed, M, N, K, W, kind)
    return shard_truth(inputs, RANK, M)


def _flip_bit(t: torch.Tensor, idx) -> torch.Tensor:
    t = t.clone()
    t.view(torch.int16)[idx] ^= 1
    return t


def _assert_pass_and_raise_protocol(res: CheckResult):
    assert res.passed and bool(res) and not res.skipped, res.render()
    assert res.raise_if_failed() is res
    assert ": ok" in res.render()


def _assert_fails(res: CheckResult, *needles: str):
    assert not res.passed and not bool(res), res.render()
    text = res.render()
    assert "FAILED" in text
    for needle in needles:
        assert needle in text, f"{needle!r} not in:\n{text}"
    with pytest.raises(PropertyViolation) as info:
        res.raise_if_failed()
    assert info.value.result is res
    assert str(info.value) == text
    assert isinstance(info.value, AssertionError)  # pytest shows it as a failure
    return text


# --- within_tolerance ---------------------------------------------------------------------------


def test_within_tolerance_passes_on_correctly_rounded_truth():
    truth = _truth()
    res = within_tolerance(truth.y.bfloat16(), truth, rank=RANK)
    _assert_pass_and_raise_protocol(res)
    assert res.total == 8 * N and res.n_wrong == 0
    assert 0 < res.extra["max_error_over_budget"] <= 1


def test_within_tolerance_locates_one_wrong_element():
    truth = _truth()
    bad = truth.y.bfloat16()
    bad[5, 7] = float(truth.y[5, 7]) + 1.0
    res = within_tolerance(bad, truth, rank=RANK)
    _assert_fails(
        res, "rank 1", "Mismatched elements: 1 / 256", "at index (5, 7)", "(global row 13)", "allowed"
    )
    assert res.n_wrong == 1 and res.worst_index == (5, 7) and res.worst_row == 13
    assert res.worst_error > res.allowed


def test_within_tolerance_counts_nan_as_wrong():
    truth = _truth()
    bad = truth.y.bfloat16()
    bad[2, 3] = float("nan")
    bad[6, 1] = float("inf")
    res = within_tolerance(bad, truth, rank=RANK)
    _assert_fails(res, "Mismatched elements: 2 / 256", "Non-finite: 1 NaN, 1 Inf")
    assert res.worst_index in {(2, 3), (6, 1)}


def test_within_tolerance_ignores_padding_rows():
    # M=13, W=2: S=7, rank 1 has 6 valid rows; the 7th row is padding and never read
    inputs = all_rank_inputs(1, 13, N, K, W)
    truth = shard_truth(inputs, 1, 13)
    got = torch.nan_to_num(truth.y, nan=0.0).bfloat16()
    got[6:] = float("nan")
    assert truth.n_valid == 6
    _assert_pass_and_raise_protocol(within_tolerance(got, truth, rank=1))


def test_within_tolerance_leaves_a_truth_past_bf16s_range_to_the_nonfinite_check():
    # 2^127 * 4 = 2^129: finite in fp64, past bf16's largest finite value (~2^128), so a correct result is +Inf there
    x = torch.tensor([[2.0**127, 1.0], [1.0, 1.0]], dtype=torch.bfloat16)
    w = torch.tensor([[4.0, 0.0], [1.0, 1.0]], dtype=torch.bfloat16)
    truth = shard_truth([(x, w)], 0, 2)
    got = truth.y.bfloat16()
    assert torch.isfinite(truth.y[0, 0]) and torch.isinf(got[0, 0])
    res = within_tolerance(got, truth, rank=0)
    _assert_pass_and_raise_protocol(res)
    assert res.total == 3  # the overflowing element has no budget: nonfinite_pattern_matches judges it


# --- bitwise_equal ------------------------------------------------------------------------------


def test_bitwise_equal_passes_on_exact_truth():
    truth = _truth("exact")
    _assert_pass_and_raise_protocol(
        bitwise_equal(truth.y.bfloat16(), truth.y, truth.n_valid, rank=RANK, row_offset=truth.row_offset)
    )


def test_bitwise_equal_locates_one_flipped_bit():
    truth = _truth("exact")
    bad = _flip_bit(truth.y.bfloat16(), (5, 7))
    res = bitwise_equal(bad, truth.y, truth.n_valid, rank=RANK, row_offset=truth.row_offset)
    _assert_fails(res, "rank 1", "Mismatched elements: 1 / 256", "at index (5, 7)", "(global row 13)")


def test_bitwise_equal_sees_signed_zero():
    res = bitwise_equal(torch.tensor([[0.0, -0.0]], dtype=torch.bfloat16), torch.zeros(1, 2), 1)
    _assert_fails(res, "Mismatched elements: 1 / 2", "at index (0, 1)")
    assert res.worst_error == float("inf")


@pytest.mark.parametrize("other", [0x7FC1, -0x40], ids=["payload", "sign"])
def test_bitwise_equal_sees_a_nan_s_payload_and_sign(other):
    """Bit for bit, NaNs too (repeatable's and fresh_per_call's comparisons): a NaN with another payload or sign is
    another result (only batch_invariant excuses that, across shapes)."""
    expected = torch.ones(2, 4, dtype=torch.bfloat16)
    expected.view(torch.int16)[1, 2] = 0x7FC0  # the quiet NaN
    actual = expected.clone()
    actual.view(torch.int16)[1, 2] = other
    _assert_fails(bitwise_equal(actual, expected, 2), "Mismatched elements: 1 / 8", "at index (1, 2)")
    _assert_fails(repeatable([expected, actual], 2), "call 1 differs from call 0")


def test_bitwise_equal_checks_only_valid_rows():
    a = torch.ones(4, 8, dtype=torch.bfloat16)
    b = a.clone()
    b[3] = 5
    _assert_pass_and_raise_protocol(bitwise_equal(a, b, 3))
    _assert_fails(bitwise_equal(a, b, 4), "Mismatched elements: 8 / 32")


# --- padded_rows_untouched ----------------------------------------------------------------------


def test_padded_rows_untouched_passes_when_only_valid_rows_written():
    out = sentinel_like((6, N))
    before = out.clone()
    out[:3] = 1.5
    _assert_pass_and_raise_protocol(padded_rows_untouched(out, before, 3, rank=0, row_offset=12))
    no_padding = padded_rows_untouched(out, before, 6, rank=0)  # nothing that could differ: skipped, not passed
    assert no_padding.skipped and not no_padding.passed and no_padding.detail == NO_PADDING_ROWS


def test_padded_rows_untouched_locates_a_write_into_padding():
    out = sentinel_like((6, N))
    before = out.clone()
    out[:3] = 1.5
    out[4, 5] = 0.0
    res = padded_rows_untouched(out, before, 3, rank=3, row_offset=12)
    _assert_fails(res, "rank 3", "Mismatched elements: 1 / 96", "at index (4, 5)", "(global row 16)")
    assert res.worst_expected == SENTINEL


def test_padded_rows_untouched_sees_a_zero_fill():
    out = sentinel_like((4, N))
    before = out.clone()
    out.zero_()
    res = padded_rows_untouched(out, before, 2, rank=1, row_offset=4)
    _assert_fails(res, f"Mismatched elements: {2 * N} / {2 * N}", "at index (2, 0)", "(global row 6)")


# --- Guarded / guard_regions_untouched ----------------------------------------------------------


def test_guarded_payload_is_an_ordinary_out_and_guards_pass():
    g = Guarded(4, N)
    assert g.payload.shape == (4, N) and g.payload.is_contiguous() and g.payload.dtype == torch.bfloat16
    g.payload.fill_(3.0)  # writing all of out is allowed
    res = g.check(rank=0)
    _assert_pass_and_raise_protocol(res)
    assert "2 guard regions intact" in res.render()


@pytest.mark.parametrize("cols", [1, 7, 8, 64, 96, 7168])
def test_guarded_payload_is_16_but_not_32_byte_aligned(cols):
    """The contract's out= is 16-byte aligned, not more: the payload sits 16 bytes past a 32-byte boundary for every
    N (32nd session: for N % 8 == 0 it sat at a multiple of 32 bytes, so an epilogue rounding the pointer to its
    32-byte store width wrote every gate case right)."""
    g = Guarded(3, cols)
    assert g.buffer.data_ptr() % 64 == 0  # the allocator's alignment the offset builds on
    assert g.payload.data_ptr() % 16 == 0 and g.payload.data_ptr() % 32 == 16
    assert g.front_words >= g.g * cols  # still at least the guard rows before it


@pytest.mark.parametrize(
    ("where", "word", "region"), [("after", 0, "after out"), ("before", -1, "before out")]
)
def test_guarded_locates_a_write_one_past_out(where, word, region):
    g = Guarded(4, N)
    words = g.buffer.view(torch.int16)
    first = g.front_words
    pos = first + 4 * N + word if where == "after" else first + word  # one word past either end of out
    words[pos] = ~words[pos]
    res = g.check(rank=2)
    offset = 0 if where == "after" else first - 1
    size = g.g * N if where == "after" else first
    _assert_fails(
        res,
        "rank 2",
        f"region '{region}': 1 of {size} 16-bit words changed",
        f"at index ({offset},)",
    )
    assert "global row" not in res.render()


def test_guard_regions_untouched_on_plain_regions():
    now = torch.arange(8, dtype=torch.int16)
    ok = guard_regions_untouched({"flags": (now, now.clone())})
    _assert_pass_and_raise_protocol(ok)
    bad = now.clone()
    bad[6] = 0
    _assert_fails(
        guard_regions_untouched({"flags": (bad, now)}, rank=1), "region 'flags': 1 of 8", "at index (6,)"
    )
    from properties.guards import NO_GUARD_REGIONS

    none = guard_regions_untouched({}, rank=1)  # nothing to read: skipped, not "0 guard regions intact"
    assert none.skipped and not none.passed and none.detail == NO_GUARD_REGIONS, none.render()


# --- rejected_cleanly ---------------------------------------------------------------------------


def _impl():
    return UnfusedGemmRs(max_M=8, N=N, K=K)


def test_rejected_cleanly_passes_on_a_real_rejection():
    impl = _impl()
    x, w = torch.ones(9, K, dtype=torch.bfloat16), torch.ones(N, K, dtype=torch.bfloat16)
    out = sentinel_like((9, N))
    res = rejected_cleanly(
        lambda: impl(x, w, out=out), CapacityError, {"x": x, "w": w, "out": out, "workspace": impl._partials}
    )
    _assert_pass_and_raise_protocol(res)
    assert "raised CapacityError" in res.render() and res.extra["raised"] == "CapacityError"


def test_rejected_cleanly_fails_when_accepted():
    impl = _impl()
    x, w = torch.ones(4, K, dtype=torch.bfloat16), torch.ones(N, K, dtype=torch.bfloat16)
    out = sentinel_like((4, N))
    res = rejected_cleanly(lambda: impl(x, w, out=out), CapacityError, {"out": out})
    _assert_fails(res, "call was accepted; expected CapacityError", "changed: out")


def test_rejected_cleanly_fails_on_the_wrong_error_type():
    impl = _impl()
    x, w = torch.ones(9, K, dtype=torch.bfloat16), torch.ones(N, K, dtype=torch.bfloat16)
    res = rejected_cleanly(lambda: impl(x, w), ShapeError, {"x": x})
    _assert_fails(res, "raised CapacityError", "expected ShapeError")
    assert rejected_cleanly(lambda: impl(x, w), (ShapeError, GemmRsInputError), {"x": x}).passed


def test_rejected_cleanly_fails_when_the_rejection_changed_something():
    out = sentinel_like((2, 4))
    strided = sentinel_like((2, 8))[:, ::2]  # a non-contiguous watched tensor

    def partial_write_then_raise():
        out[1, 2] = 0.0
        strided[0, 1] = 0.0
        raise ShapeError("too late: already wrote")

    res = rejected_cleanly(partial_write_then_raise, ShapeError, {"out": out, "view": strided}, rank=5)
    _assert_fails(res, "rank 5", "Mismatched elements: 2 / 2", "changed: out, view")


def test_rejected_cleanly_fails_when_a_collective_ran_before_the_raise():
    import torch.distributed as dist

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        x = torch.ones(4, 8)

        def reduce_then_raise():
            dist.all_reduce(x.clone())  # a temporary: nothing watched changes
            raise ShapeError("out checked last")

        res = rejected_cleanly(reduce_then_raise, ShapeError, {"x": x}, rank=1)
        _assert_fails(res, "ran c10d.allreduce_", "before it raised", "hangs them")
        assert res.extra["collectives_before_raise"] == ["c10d.allreduce_.default"]

        def functional_reduce_then_raise():  # torch.distributed._functional_collectives: their own op namespace
            import torch.distributed._functional_collectives as fc

            fc.all_reduce(x, "sum", dist.group.WORLD).wait()
            raise ShapeError("out checked last")

        res = rejected_cleanly(functional_reduce_then_raise, ShapeError, {"x": x}, rank=1)
        _assert_fails(res, "ran _c10d_functional.all_reduce", "before it raised")
    finally:
        if created:
            dist.destroy_process_group()


def test_rejected_cleanly_no_work_fails_on_work_before_the_raise_and_allows_metadata():
    x = torch.ones(4, 8)

    def compute_then_raise():
        torch.mm(x, x.t())
        raise CapacityError("M checked after the GEMM")

    def metadata_then_raise():
        x[:2].t().contiguous().view(-1)  # a view of a view made contiguous: a copy -- work
        raise CapacityError("too late")

    def views_then_raise():
        x.stride(), x.is_contiguous(), x[1:].t(), torch.empty(3, 3), x.expand(2, 4, 8)
        raise CapacityError("M > max_M")

    _assert_fails(rejected_cleanly(compute_then_raise, CapacityError, {"x": x}, no_work=True),
                  "queued work before it raised: aten.mm.default")
    _assert_fails(rejected_cleanly(metadata_then_raise, CapacityError, {"x": x}, no_work=True),
                  "queued work before it raised: aten.clone")
    _assert_pass_and_raise_protocol(rejected_cleanly(views_then_raise, CapacityError, {"x": x}, no_work=True))
    # without no_work (a bad call), work on temporaries before the raise changes nothing and is allowed
    assert rejected_cleanly(compute_then_raise, CapacityError, {"x": x}).passed


def test_rejected_cleanly_no_work_counts_a_filled_allocation_as_work():
    """``torch.zeros`` / ``torch.full`` allocate *and* queue a fill kernel: work before an out-of-range M is
    rejected (only ``torch.empty`` and metadata are not)."""
    def zeros_then_raise():
        torch.zeros(4, 8)
        raise CapacityError("workspace cleared before M was checked")

    def full_then_raise():
        torch.full((4, 8), 1.0)
        raise CapacityError("workspace filled before M was checked")

    _assert_fails(rejected_cleanly(zeros_then_raise, CapacityError, {}, no_work=True),
                  "queued work before it raised: aten.zeros")
    _assert_fails(rejected_cleanly(full_then_raise, CapacityError, {}, no_work=True),
                  "queued work before it raised: aten.full")


def test_rejected_cleanly_does_not_count_the_ops_of_what_the_call_runs_in():
    """``around``: the context the call runs in (a CUDA-graph capture: its begin fills the generator's graph state,
    aten.fill_) is the harness's, not the call's; the call's own work still counts, and a raise there fails."""
    import contextlib

    x = torch.ones(4, 8)

    @contextlib.contextmanager
    def busy_context():
        torch.zeros(2).fill_(1.0)
        yield
        torch.zeros(2).fill_(2.0)

    def raise_first():
        raise CapacityError("M > max_M")

    def compute_then_raise():
        torch.mm(x, x.t())
        raise CapacityError("M checked after the GEMM")

    _assert_pass_and_raise_protocol(rejected_cleanly(raise_first, CapacityError, {"x": x}, no_work=True,
                                                     around=busy_context))
    _assert_fails(rejected_cleanly(compute_then_raise, CapacityError, {"x": x}, no_work=True, around=busy_context),
                  "queued work before it raised: aten.mm.default")

    class capture_that_fails:  # as torch.cuda.graph ends an invalidated capture: its end raises, whatever came
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            raise RuntimeError("operation not permitted when stream is capturing")

    _assert_fails(rejected_cleanly(raise_first, CapacityError, {"x": x}, no_work=True, around=capture_that_fails),
                  "raised RuntimeError")


# --- repeatable ---------------------------------------------------------------------------------


def test_repeatable_passes_on_identical_outputs():
    t = torch.randn(6, N).bfloat16()
    _assert_pass_and_raise_protocol(repeatable([t, t.clone(), t.clone()], 6))


def test_repeatable_locates_the_differing_call():
    t = torch.randn(6, N).bfloat16()
    res = repeatable([t, t.clone(), _flip_bit(t, (2, 3))], 6, rank=1, row_offset=6)
    _assert_fails(
        res, "call 2 differs from call 0", "Mismatched elements: 1 / 192", "at index (2, 3)", "(global row 8)"
    )


def test_repeatable_needs_two_outputs():
    res = repeatable([torch.zeros(2, 2)], 2)
    _assert_fails(res, "need at least two outputs")


# --- nonfinite_pattern_matches ------------------------------------------------------------------


def _nonfinite_expected():
    e = torch.randn(4, 8, dtype=torch.float64)
    e[1, 2], e[3, 4], e[0, 0] = float("nan"), float("inf"), float("-inf")
    return e


def test_nonfinite_pattern_matches_passes_on_same_pattern():
    e = _nonfinite_expected()
    res = nonfinite_pattern_matches(e.bfloat16(), e, 4)
    _assert_pass_and_raise_protocol(res)
    assert res.extra["expected_nonfinite"] == res.extra["actual_nonfinite"] == 3


def test_nonfinite_pattern_matches_locates_a_swallowed_nan():
    e = _nonfinite_expected()
    a = e.bfloat16()
    a[1, 2] = 0.0
    res = nonfinite_pattern_matches(a, e, 4, rank=2, row_offset=8)
    _assert_fails(
        res,
        "rank 2",
        "Mismatched elements: 1 / 32",
        "at index (1, 2)",
        "(global row 9)",
        "oracle has 3 non-finite elements, implementation 2",
    )


def test_nonfinite_pattern_matches_distinguishes_inf_signs_and_invented_nans():
    e = _nonfinite_expected()
    a = e.bfloat16()
    a[3, 4] = float("-inf")
    a[2, 6] = float("nan")
    res = nonfinite_pattern_matches(a, e, 4)
    _assert_fails(res, "Mismatched elements: 2 / 32", "implementation 4")


# --- fresh_per_call -----------------------------------------------------------------------------


def _sequence(planted_at=None):
    seq = []
    for i, m in enumerate([129, 1, 1024, 129]):
        fresh = torch.randn(3, 8).bfloat16()
        got = _flip_bit(fresh, (1, 4)) if i == planted_at else fresh.clone()
        seq.append((m, got, fresh, 3, 3 * i))
    return seq


def test_fresh_per_call_passes_when_every_call_is_as_fresh():
    res = fresh_per_call(_sequence())
    _assert_pass_and_raise_protocol(res)
    assert "[129, 1, 1024, 129]" in res.render()


def test_fresh_per_call_locates_the_stale_call():
    res = fresh_per_call(_sequence(planted_at=3), rank=0)
    _assert_fails(
        res,
        "call 3 of the sequence (M=129, sequence [129, 1, 1024, 129]) differs from a fresh call",
        "Mismatched elements: 1 / 24",
        "at index (1, 4)",
        "(global row 10)",
    )


def test_fresh_per_call_locates_a_stale_first_call():
    """The sequence's first call is compared like every other (its fresh twin is another first call of a fresh
    implementation: a workspace primed wrong at construction shows only there)."""
    res = fresh_per_call(_sequence(planted_at=0), rank=0)
    _assert_fails(res, "call 0 of the sequence (M=129, sequence [129, 1, 1024, 129]) differs from a fresh call",
                  "at index (1, 4)", "(global row 1)")


# --- skipped ------------------------------------------------------------------------------------


def test_skipped_is_never_passed():
    res = skipped("graph_replay", "waived: gloo on CPU is not capturable", rank=1)
    assert res.skipped and not res.passed and not bool(res)
    assert res.render() == "[graph_replay] rank 1: SKIPPED — waived: gloo on CPU is not capturable"
    assert res.raise_if_failed() is res  # skipped is not a failure either
    assert res.to_json()["skipped"] is True


def test_guard_pattern_is_fixed_irregular_and_seeded():
    from properties.guards import guard_pattern

    p = guard_pattern(4096, seed=7)
    assert p.dtype == torch.int16 and torch.equal(p, guard_pattern(4096, seed=7))
    assert not torch.equal(p, guard_pattern(4096, seed=8))
    assert bool((p[1:] != p[:-1]).all())  # no two neighbours equal: a fill with one value shows everywhere
    assert len(set(p.tolist())) > 4000 and int((p == 0).sum()) < 4


# --- a rank with no valid row: value checks skipped, never passed --------------------------------


def test_value_checks_on_a_rank_with_no_valid_row_are_skipped_not_passed():
    """M = 129 at W = 16 leaves rank 15 no row: nothing a value check could find wrong there, so a skip with its
    reason (counted apart from passes); one valid row is a real check again and fails on a wrong value."""
    import dataclasses

    from properties.dispatch import dispatch_sides_agree
    from properties.result import NO_VALID_ROWS

    y = torch.zeros(1, N, dtype=torch.bfloat16)
    wrong = torch.ones(1, N, dtype=torch.bfloat16)
    truth = _truth()
    empty = dataclasses.replace(truth, n_valid=0)
    vacuous = [within_tolerance(wrong, empty, rank=RANK), bitwise_equal(wrong, y, 0, rank=RANK),
               nonfinite_pattern_matches(torch.full_like(y, float("nan")), y, 0, rank=RANK),
               repeatable([wrong, y], 0, rank=RANK), fresh_per_call([(3, wrong, y, 0, 16)], rank=RANK)]
    for res in vacuous:
        assert res.skipped and not res.passed and res.detail == NO_VALID_ROWS, res.render()
        assert res.raise_if_failed() is res
    _assert_fails(bitwise_equal(wrong, y, 1), "Mismatched elements")
    _assert_fails(nonfinite_pattern_matches(torch.full_like(y, float("nan")), y, 1), "non-finite")
    # a sequence with one call that has rows here: compared (and caught) there
    _assert_fails(fresh_per_call([(3, wrong, y, 0, 16), (40, wrong, y, 1, 16)], rank=RANK), "call 1 of the sequence")
    assert fresh_per_call([(3, wrong, y, 0, 16), (40, y, y, 1, 16)], rank=RANK).total == 1
    # the two dispatch sides always compare their shapes: a pass with what it compared, or a failure
    both = dispatch_sides_agree(y, y.clone(), 0, exact=True, rank=RANK)
    assert both.passed and "1 padding rows" in both.detail and "valid rows" not in both.detail, both.render()
    _assert_fails(dispatch_sides_agree(y, wrong, 0, exact=True), "padding rows differ")
    _assert_fails(dispatch_sides_agree(wrong, y, 1, exact=True), "differ in valid rows")


def test_within_tolerance_leaves_a_nan_truth_to_the_nonfinite_check():
    """A NaN truth (a NaN input, or +Inf and -Inf partials) has a NaN budget: nothing to compare there, so the element
    is neither wrong nor counted -- whatever the result holds (nonfinite_pattern_matches judges it)."""
    import dataclasses

    truth = _truth()
    y = truth.y.clone()
    y[2, :3] = float("nan")
    nan_truth = dataclasses.replace(truth, y=y)
    got = y.bfloat16()
    got[2, 1] = 1.0  # the pattern check's to see, not this one's
    res = within_tolerance(got, nan_truth, rank=RANK)
    _assert_pass_and_raise_protocol(res)
    assert res.total == 8 * N - 3


def test_within_tolerance_with_no_finite_truth_is_skipped_and_one_finite_element_is_checked():
    """Non-finite inputs can make every valid element's truth Inf or NaN: no element has a budget, so the check
    compared nothing -- a skip (nonfinite_pattern_matches judges those), not a pass; one finite element is a
    check again."""
    import dataclasses

    from properties.tolerance import NO_FINITE_TRUTH

    truth = _truth()
    n = truth.n_valid
    infinite = dataclasses.replace(truth, y=torch.full_like(truth.y, float("inf")))
    wrong = torch.full((truth.y.shape[0], N), 3.0, dtype=torch.bfloat16)
    res = within_tolerance(wrong, infinite, rank=RANK)
    assert res.skipped and not res.passed and res.detail == NO_FINITE_TRUTH, res.render()
    one = infinite.y.clone()
    one[n - 1, 5] = 0.0
    _assert_fails(within_tolerance(wrong, dataclasses.replace(truth, y=one), rank=RANK), "Mismatched elements: 1 / 1")
