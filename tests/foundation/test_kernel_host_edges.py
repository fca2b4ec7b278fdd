"""Host logic of kernel/ at edges the gate's CPU draw does not reach (docs/evidence/2026-12-06b-kernel-cpu-audit/:
each test fails on a planted one-line bug that passed the fast tests and the CPU gate at W = 2, 3). Fast, in-process,
no process group: rank and W set by hand where the shard arithmetic is what is pinned."""

from __future__ import annotations

import pytest
import torch

from kernel import collectives
from kernel.checks import valid_rows
from kernel.interface import GemmRsImplementation
from kernel.unfused import UnfusedGemmRs
from oracle import reference_gemm_rs, shards


@pytest.mark.parametrize("W", [2, 3, 4, 5, 8, 16])
def test_valid_rows_is_never_negative_and_matches_the_oracle_s_layout(W):
    """A rank past the last token has no valid row (0, never negative: M = 5, W = 4 gives rank 3 two padding rows):
    ``valid_rows`` agrees with ``oracle.shards`` (the harness's own layout) for every M and rank."""
    for M in range(1, 4 * W + 2):
        for rank in range(W):
            assert valid_rows(M, W, rank) == shards.valid_rows(M, W, rank) >= 0, (M, W, rank)


def test_an_out_call_on_a_rank_with_no_valid_row_leaves_every_row_of_out():
    """M = 5, W = 4: rank 3's shard is two padding rows. With ``out=`` pre-filled by a sentinel, the call leaves it
    bit-for-bit (CONTRACT.md, "The operation"): a negative valid-row count slices ``out[:-1]`` and writes row 0. Rank
    and W by hand: with no process group the reduce-scatter is a copy of the first S rows (not zero), so a write shows.
    """
    impl = UnfusedGemmRs(max_M=64, N=16, K=32, device="cpu")
    impl.world_size, impl.rank = 4, 3
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 32, generator=g).bfloat16()
    w = torch.randn(16, 32, generator=g).bfloat16()
    sentinel = torch.full((2, 16), -7.25, dtype=torch.bfloat16)
    out = sentinel.clone()
    assert impl(x, w, out=out) is out
    assert torch.equal(out.view(torch.int16), sentinel.view(torch.int16))
    fresh = impl(x, w)
    assert fresh.shape == (2, 16) and not fresh.view(torch.int16).any()  # +0.0 padding in a fresh result


GEMMS = {"unfused": lambda x, w: UnfusedGemmRs(max_M=64, N=w.shape[0], K=w.shape[1], device="cpu")(x, w),
         "oracle": reference_gemm_rs}


@pytest.mark.parametrize("gemm", sorted(GEMMS))
@pytest.mark.parametrize("M, bad_row", [(33, 10), (34, 33)])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_non_finite_row_leaves_its_neighbours_exact(value, M, bad_row, gemm):
    """torch 2.13's CPU bf16 ``mm`` returns NaN in a finite row next to a NaN / Inf row at some K (33 here;
    docs/NUMERICS.md section 10), so the unfused GEMM and the oracle go through fp32 where x holds a non-finite value:
    every other row equals the fp32 product rounded once to bf16, bit for bit (W = 1: the result is the GEMM). A GEMM
    left in bf16 there passed the fast tests and the CPU gate at W = 2, 3; so did a check for non-finite values that
    skips x's last row (at M = 34 a NaN in row 33 makes row 32 NaN). An oracle left in bf16 there judges a right
    implementation wrong -- or, NaN against NaN, a wrong one right."""
    g = torch.Generator().manual_seed(0)
    N, K = 16, 33
    x = torch.randn(M, K, generator=g).bfloat16()
    w = torch.randn(N, K, generator=g).bfloat16()
    x[bad_row, 3] = value
    got = GEMMS[gemm](x, w)
    truth = (x.float() @ w.float().t()).bfloat16()
    rows = [i for i in range(M) if i != bad_row]
    assert bool(torch.isfinite(got[rows]).all()), "a finite row came back non-finite"
    assert torch.equal(got[rows].view(torch.int16), truth[rows].view(torch.int16))
    assert torch.equal(torch.isnan(got[bad_row]), torch.isnan(truth[bad_row]))


def test_a_cuda_device_is_capturable_only_on_nccl():
    """``is_capturable`` (the unfused path's ``graph_capture`` waiver): a CUDA device AND an NCCL group. A CUDA device
    with no process group or a gloo one stages through the host or syncs: not capturable, waived -- an ``or`` there
    claimed capture on shared-gpu's gloo groups. Queries of metadata: a CPU build can ask about a cuda device."""
    assert not collectives.is_capturable(None, torch.device("cuda", 0))
    assert not collectives.is_capturable(None, torch.device("cpu"))
    assert collectives.backend_of(None) == "none"


@pytest.mark.parametrize("N, K", [(0, 8), (8, 0), (0, 0), (-1, 8), (8, -3)])
def test_supports_declines_a_non_positive_n_or_k(N, K):
    """``supports(N, K)`` (the class query the gate draws shapes from): both N and K >= 1; one of them below is a
    shape no instance computes (construction raises), so declared unsupported, with the reason."""
    for cls in (GemmRsImplementation, UnfusedGemmRs):
        ok = cls.supports(N, K)
        assert not ok and "both must be >= 1" in ok.reason, (cls.__name__, N, K)
    assert UnfusedGemmRs.supports(1, 1)


def test_async_tp_needs_a_cuda_device_even_on_a_host_with_cuda(monkeypatch):
    """``main_path_support`` of the async-TP adapter: the instance's device must be CUDA *and* CUDA usable. On a GPU
    host an instance built for the CPU is still no path of the op's (an ``and`` there answered yes on such hosts; a
    CPU-only host cannot tell the two apart, so the host is made to say it has CUDA)."""
    from types import SimpleNamespace

    from kernel.adapters.torch_async_tp import TorchAsyncTpGemmRs

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    support = TorchAsyncTpGemmRs.main_path_support(SimpleNamespace(device=torch.device("cpu")))
    assert not support and "not a usable CUDA device" in support.reason


def test_async_tp_runs_on_the_group_it_was_built_for(monkeypatch):
    """The adapter passes the op its own group's name (a TP group of a subset of ranks), and enables symmetric
    memory for that group -- not the world's. No process group here: a stand-in group with a name, the enable call
    recorded."""
    from types import SimpleNamespace

    import torch.distributed._symmetric_memory as symm_mem

    from kernel.adapters.torch_async_tp import TorchAsyncTpGemmRs

    enabled = []
    monkeypatch.setattr(symm_mem, "enable_symm_mem_for_group", enabled.append, raising=False)
    impl = TorchAsyncTpGemmRs(SimpleNamespace(group_name="tp-1-of-2"), max_M=8, N=8, K=8)
    assert impl.group_name == "tp-1-of-2"
    assert enabled == ["tp-1-of-2"]


def test_the_typed_errors_keep_their_bases():
    """kernel/errors.py's hierarchy is what callers catch: every bad call a ``ValueError`` (CONTRACT.md, "Capacity and
    bad input"), a dtype also a ``TypeError``, an unsupported configuration a ``ValueError``, and the fused path forced
    where ``can_run`` says no an ``UnsupportedConfigError`` (an engine that falls back on that error catches this one
    too). Each a ``GemmRsError``."""
    from kernel import errors as e

    for cls in (e.CapacityError, e.ShapeError, e.DTypeError, e.DeviceError, e.LayoutError):
        assert issubclass(cls, e.GemmRsInputError) and issubclass(cls, ValueError), cls.__name__
    assert issubclass(e.DTypeError, TypeError)
    assert issubclass(e.UnsupportedConfigError, ValueError) and issubclass(e.UnsupportedConfigError, e.GemmRsError)
    assert issubclass(e.FusedPathUnavailable, e.UnsupportedConfigError)
    assert issubclass(e.SymmetricMemoryMismatch, e.GemmRsError) and issubclass(e.SymmetricMemoryMismatch, RuntimeError)
    assert not issubclass(e.UnsupportedConfigError, e.GemmRsInputError)  # a configuration is no bad call


@pytest.mark.parametrize("shape", ["M, K, 1", "1, K, K"])
def test_x_of_three_dimensions_is_a_shape_error_even_where_its_sizes_fit(shape):
    """x must be 2-D (the bad-call table's ``x_3d`` is (1, M, K), which the K check rejects too unless M == K): an x
    of (M, K, 1), or (1, M, K) with M == K, passes every size check a 2-D test does not make, and reached the GEMM,
    whose own error is no typed one."""
    from kernel.errors import ShapeError

    N, K = 8, 16
    w = torch.zeros(N, K, dtype=torch.bfloat16)
    x = torch.zeros(5, K, 1, dtype=torch.bfloat16) if shape == "M, K, 1" else torch.zeros(1, K, K, dtype=torch.bfloat16)
    with pytest.raises(ShapeError, match="x must be 2-D"):
        UnfusedGemmRs(max_M=32, N=N, K=K)(x, w)
