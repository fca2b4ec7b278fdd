"""The host checks every implementation of ours runs before any work (kernel/checks.py, kernel/interface.py), at
the edges the bad-call table does not draw: a row count that is not an int, capacity before everything else about
x, an operand that is not a tensor, empty views in the overlap test, a non-positive size at construction. Each test
but the empty views' fails on a flip of the condition it pins (docs/evidence/2026-12-05-ambient-state/: the flips
that survived tests/foundation); torch gives an empty tensor data_ptr 0, so ``overlaps``' empty-tensor guard changes
no result a CPU can show."""

from __future__ import annotations

import pytest
import torch

from kernel.checks import check_m_in_range, check_operands, overlaps
from kernel.errors import CapacityError, UnsupportedConfigError
from kernel.unfused import UnfusedGemmRs

CPU = torch.device("cpu")


@pytest.mark.parametrize("M", [True, 3.0, "3", None])
def test_a_row_count_that_is_not_an_int_is_a_capacity_error(M):
    """A bool (an int to Python), a float that compares in range, a string: each a CapacityError naming its type."""
    with pytest.raises(CapacityError, match=f"M must be an int, got {type(M).__name__}"):
        check_m_in_range(M, 8)
    check_m_in_range(8, 8)
    with pytest.raises(CapacityError, match="outside 1..max_M=8"):
        check_m_in_range(9, 8)


@pytest.mark.parametrize("bad", ["dtype", "strided"])
def test_capacity_is_checked_before_anything_else_about_x(bad):
    """CONTRACT.md: an out-of-range M is a CapacityError whatever else is wrong with x (a wrong dtype, a column
    stride) -- the capacity error is the one a caller's batch splitting handles."""
    x = torch.zeros(9, 16, dtype=torch.float32 if bad == "dtype" else torch.bfloat16)
    if bad == "strided":
        x = torch.zeros(9, 32, dtype=torch.bfloat16)[:, ::2]
    w = torch.zeros(8, 16, dtype=torch.bfloat16)
    with pytest.raises(CapacityError):
        check_operands(x, w, None, N=8, K=16, max_M=8, world_size=1, device=CPU)


@pytest.mark.parametrize("x", [None, [[1.0, 2.0]], torch.zeros(4, dtype=torch.bfloat16)])
def test_an_operand_that_is_no_2d_tensor_is_a_typed_error(x):
    w = torch.zeros(8, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError) as info:  # the contract's bad-call errors are ValueError subclasses
        check_operands(x, w, None, N=8, K=16, max_M=8, world_size=1, device=CPU)
    assert not isinstance(info.value, CapacityError) and "x" in str(info.value)


def test_an_empty_view_overlaps_nothing():
    b = torch.zeros(8)
    assert overlaps(b[2:5], b[4:6]) and not overlaps(b[2:4], b[4:6])
    assert not overlaps(b[3:3], b) and not overlaps(b, b[3:3])  # no bytes: inside b's span, still no overlap


@pytest.mark.parametrize("sizes", [(0, 8, 8), (8, 0, 8), (8, 8, 0), (-1, 8, 8)])
def test_a_non_positive_size_is_rejected_at_construction(sizes):
    max_M, N, K = sizes
    with pytest.raises(UnsupportedConfigError, match="must be positive"):
        UnfusedGemmRs(max_M=max_M, N=N, K=K)


def test_should_run_is_m_at_least_the_threshold():
    """CONTRACT.md: ``should_run(x)`` -- default ``M >= 128``; the threshold itself is in (a layer's dispatch
    agrees with the one the implementation measured, not one row off)."""
    impl = UnfusedGemmRs(max_M=512, N=8, K=8)
    assert impl.should_run_min_m == 128
    assert [impl.should_run(torch.zeros(m, 8, dtype=torch.bfloat16)) for m in (1, 127, 128, 129)] == \
        [False, False, True, True]


def test_an_operand_on_another_device_of_the_same_type_is_a_device_error():
    """The device check compares the whole device, index included: x on cuda:1 for an instance on cuda:0 is a
    DeviceError (a check of the device type alone accepts it and hands a kernel another GPU's pointer). The CPU has
    one device of its type; meta tensors carry the index where ``torch.device("meta", 1)`` names one."""
    from kernel.checks import check_bf16_2d
    from kernel.errors import DeviceError

    t = torch.empty(2, 8, dtype=torch.bfloat16, device="meta")
    with pytest.raises(DeviceError, match="is on meta, this implementation runs on meta:1"):
        check_bf16_2d("x", t, torch.device("meta", 1))


@pytest.mark.parametrize("k_x", [8, 15, 17, 32])
def test_x_with_another_k_than_the_weight_is_a_shape_error(k_x):
    """CONTRACT.md "Capacity and bad input": a shape mismatch of x against w raises ``ShapeError`` before any work,
    x narrower than K as well as wider (the bad-call table draws only x of 2K columns): a check of one direction
    hands the narrower x to the GEMM, whose own size error is no typed error."""
    from kernel.errors import ShapeError

    N, K = 8, 16
    x = torch.zeros(3, k_x, dtype=torch.bfloat16)
    w = torch.zeros(N, K, dtype=torch.bfloat16)
    with pytest.raises(ShapeError, match=f"x has K={k_x}"):
        check_operands(x, w, None, N=N, K=K, max_M=8, world_size=1, device=CPU)
    with pytest.raises(ShapeError, match=f"x has K={k_x}"):
        UnfusedGemmRs(max_M=8, N=N, K=K)(x, w)
    assert check_operands(torch.zeros(3, K, dtype=torch.bfloat16), w, None, N=N, K=K, max_M=8, world_size=1,
                          device=CPU) == 3
