"""The bad-call table (fuzz/bad_calls.py), in process on one CPU rank: it has every class the contract
names; each entry is rejected by our implementations (unfused, and the fused wrapper's checks) with its
typed error and nothing changed — through the gate's own helper, ``fuzz.families.bad_call.reject``; an
implementation that accepts one fails exactly that entry; the good call it is made from is accepted."""

from __future__ import annotations

import pytest
import torch

from fuzz.bad_calls import BAD_CALLS, CAPACITY_CALLS, GoodCall
from fuzz.case import CAPACITY_BADS
from fuzz.families import RankContext
from fuzz.families.bad_call import reject
from kernel.fused import FusedGemmRs
from kernel.unfused import UnfusedGemmRs
from mutants.catalogue import (
    AliasCheckByStart,
    NonContiguousXHandled,
    OutOverlappingWAccepted,
    RowStridedInputsReadDense,
)
from oracle import make_w, make_x
from properties import sentinel_like

#: every class the unit tests and the gate had before the table (issue 13, item 6), by name
REQUIRED = {
    "x_dtype", "w_dtype", "out_dtype", "x_1d", "x_3d", "w_3d", "w_rows", "w_cols", "k_mismatch", "w_transposed",
    "w_mT", "out_rows", "out_cols", "out_1d", "x_device", "w_device", "out_device", "x_noncontiguous",
    "w_noncontiguous", "out_noncontiguous", "x_misaligned", "w_misaligned", "out_misaligned", "out_overlaps_x",
    "out_overlaps_w", "x_misaligned_8", "w_misaligned_8", "out_misaligned_8",
}
MAX_M = 64


def _good(M, N, K, with_out=True):
    x, w = make_x(1, 0, M, K, 1, "gaussian"), make_w(1, 0, N, K, 1, "gaussian")
    return GoodCall(x, w, sentinel_like((M, N)) if with_out else None, MAX_M, MAX_M + 1)


def _reject(impl_cls, entry, good, **kw):
    ctx = RankContext(impl_cls, rank=0, world_size=1, device=torch.device("cpu"))
    impl = impl_cls(max_M=MAX_M, N=good.N, K=good.K, device="cpu")
    return reject(ctx, impl, entry, good, name="bad_call_rejected", **kw)


def test_the_table_has_every_class_and_the_capacity_cases():
    assert REQUIRED <= set(BAD_CALLS)
    assert tuple(CAPACITY_CALLS) == CAPACITY_BADS
    for entry in (*BAD_CALLS.values(), *CAPACITY_CALLS.values()):
        assert entry.expected and all(issubclass(e, ValueError) for e in entry.expected), entry.name
        assert entry.what, entry.name


@pytest.mark.parametrize("impl_cls", [UnfusedGemmRs, FusedGemmRs])
@pytest.mark.parametrize("M, N, K", [(5, 64, 128), (8, 64, 64)])  # N != K, and N == K (w.t() has w's shape)
def test_every_bad_call_is_rejected_cleanly_by_our_implementations(impl_cls, M, N, K):
    good = _good(M, N, K)
    impl = impl_cls(max_M=MAX_M, N=N, K=K, device="cpu")
    assert impl(good.x, good.w, out=good.out) is good.out  # the good call itself is fine
    failures = [res.render() for entry in (*BAD_CALLS.values(), *CAPACITY_CALLS.values())
                for res in [_reject(impl_cls, entry, good)] if not res.passed]
    assert not failures, "\n".join(failures)


def test_an_implementation_accepting_one_class_fails_exactly_that_entry():
    good = _good(5, 64, 128)
    failed = [name for name, entry in BAD_CALLS.items()
              if not _reject(OutOverlappingWAccepted, entry, good).passed]
    assert failed == ["out_overlaps_w", "out_inside_w"]
    res = _reject(OutOverlappingWAccepted, BAD_CALLS["out_overlaps_w"], good)
    assert "call was accepted; expected LayoutError" in res.detail and "w" in res.detail.split("changed: ")[1]


@pytest.mark.parametrize("mutant, entries", [
    # an aliasing check of start addresses: every partial overlap accepted, the exact ones still rejected
    (AliasCheckByStart, ["out_inside_x", "out_before_x", "out_inside_w"]),
    # a layout check of the column stride and alignment alone: packed-apart rows accepted
    (RowStridedInputsReadDense, ["x_row_strided", "w_row_strided"]),
])
def test_the_32nd_sessions_entries_each_fail_the_check_they_model(mutant, entries):
    """Entries added where the audit found the gate passing an implementation (32nd session): each fails the
    mutant that models its bug, only there, and a row-strided x read as dense is a WRONG result, not only a
    contract violation."""
    good = _good(5, 64, 128)
    failed = [name for name, entry in BAD_CALLS.items() if not _reject(mutant, entry, good).passed]
    assert failed == entries
    if mutant is RowStridedInputsReadDense:
        res = _reject(mutant, BAD_CALLS["x_row_strided"], good, judge=lambda y: (False, "rows from the padding"))
        assert res.extra["accepted_result_correct"] is False and "WRONG" in res.detail


def test_partial_overlaps_stay_16_byte_aligned_and_overlap():
    """The partly overlapping entries' operands are aligned (an alignment check cannot reject them in place of the
    overlap check) and really share bytes with out; the row-strided ones are dense rows, packed apart."""
    from kernel.checks import overlaps

    good = _good(5, 64, 128)
    for name in ("out_inside_x", "out_before_x", "out_inside_w"):
        x, w, out = BAD_CALLS[name].build(good, 5)
        operand = w if name.endswith("_w") else x
        assert overlaps(out, operand) and out.data_ptr() != operand.data_ptr(), name
        assert out.data_ptr() % 16 == 0 and operand.data_ptr() % 16 == 0, name
        assert torch.equal(operand, good.w if name.endswith("_w") else good.x), name
    for name, operand in (("x_row_strided", 0), ("w_row_strided", 1)):
        t = BAD_CALLS[name].build(good, 5)[operand]
        assert t.stride() == (t.shape[1] + 8, 1) and not t.is_contiguous(), name
        assert torch.equal(t, (good.x, good.w)[operand]), name


def test_an_accepted_same_values_call_is_judged():
    good = _good(5, 64, 128)
    verdicts = []
    res = _reject(NonContiguousXHandled, BAD_CALLS["x_noncontiguous"], good,
                  judge=lambda y: verdicts.append(y) or (True, ""))
    assert not res.passed and res.extra["accepted_result_correct"] is True and len(verdicts) == 1
    assert "its result is right" in res.detail


def test_entries_needing_out_are_marked():
    for name, entry in BAD_CALLS.items():
        assert entry.needs_out == name.startswith("out_"), name


def test_a_bad_call_is_in_the_cases_call_trail_so_a_gpu_fault_after_it_is_the_implementations():
    """A bad call the implementation accepts may launch its kernels on operands it cannot serve (a misaligned
    pointer): the call is in the rank's trail (RankContext.began), so a GPU fault surfacing after it is a
    ``device_fault`` of the implementation, not a harness ERROR for want of a trail. Outside a case, nothing."""
    good = _good(8, 64, 64)
    _reject(UnfusedGemmRs, BAD_CALLS["x_misaligned"], good)  # no ledger: records nothing, raises nothing
    ctx = RankContext(UnfusedGemmRs, rank=0, world_size=1, device=torch.device("cpu"))
    calls = ctx.begin_case()
    impl = UnfusedGemmRs(max_M=MAX_M, N=good.N, K=good.K, device="cpu")
    assert calls.device_fault(torch.AcceleratorError("CUDA error: misaligned address")) is None  # no call yet
    reject(ctx, impl, BAD_CALLS["x_misaligned"], good, name="bad_call_rejected")
    assert calls.trail == ["bad_call_rejected (x_misaligned) M=8 (a bad call: must be rejected)"]
    fault = calls.device_fault(torch.AcceleratorError("CUDA error: misaligned address"))
    assert fault is not None and fault.name == "device_fault" and not fault.passed


@pytest.mark.parametrize("impl_cls", [UnfusedGemmRs, FusedGemmRs])
def test_out_overlap_is_byte_exact_on_both_sides(impl_cls):
    """``out`` adjacent to x or w in one buffer is a good call; shifted one aligned step (16 bytes) into either, a
    LayoutError -- the spans the checks read once per call (``check_bf16_2d``) are each tensor's exact bytes."""
    from kernel.checks import spans_overlap
    from kernel.errors import LayoutError

    M, N, K = 5, 64, 128
    impl = impl_cls(max_M=MAX_M, N=N, K=K, device="cpu")
    buf = torch.zeros(M * K + M * N + N * K + 16, dtype=torch.bfloat16)
    x = buf[: M * K].view(M, K)
    out = buf[M * K: M * K + M * N].view(M, N)
    w = buf[M * K + M * N: M * K + M * N + N * K].view(N, K)
    assert impl(x, w, out=out) is out  # out touches x's end and w's start: no shared byte
    for first in (M * K - 8, M * K + 8):  # 8 bf16 = 16 bytes: still aligned, one step into x, then into w
        with pytest.raises(LayoutError, match="overlaps"):
            impl(x, w, out=buf[first: first + M * N].view(M, N))
    assert not spans_overlap((0, 16), (16, 32)) and spans_overlap((0, 17), (16, 32))
    assert spans_overlap((0, 64), (16, 32))  # one inside the other
    assert not spans_overlap(None, (0, 16)) and not spans_overlap((0, 16), None)



@pytest.mark.parametrize("which", ["x", "w", "out"])
def test_an_alignment_check_of_8_bytes_fails_the_8_byte_entries_only(which):
    """Operands 8 bytes past a 16-byte boundary: rejected by the contract's check, accepted by one of 8 bytes
    (``AlignmentCheckedFor8``), which still rejects the 2-byte entries -- the reason the table has both."""
    from mutants.catalogue import AlignmentCheckedFor8

    good = _good(8, 32, 48)
    assert _reject(UnfusedGemmRs, BAD_CALLS[f"{which}_misaligned_8"], good).passed
    assert _reject(AlignmentCheckedFor8, BAD_CALLS[f"{which}_misaligned"], good).passed
    check = _reject(AlignmentCheckedFor8, BAD_CALLS[f"{which}_misaligned_8"], good)
    assert not check.passed and not check.skipped, check.render()
