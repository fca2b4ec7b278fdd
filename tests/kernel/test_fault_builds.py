"""Fault-injected builds of the fused GEMM-RS kernel (``faults=``, compile-time switches, OFF by default).

What is pinned here, without a GPU (CuTe DSL compiles sm_90a on the CPU):
  1. zero cost when off: the default build's PTX is byte-identical to ``faults=()`` compiled afresh and
     to a reference hash taken *before* the switches were added to the kernel source;
  2. each switch changes the PTX the way its bug class says (fewer peer loads, relaxed signal, ...);
  3. unknown fault names are rejected (``ValueError``), by the compile cache and by the wrapper;
  4. the mutant classes of ``mutants/kernel_faults.py`` load by spec and cover every switch;
  5. no build, faulted or not, contains ``multimem``.
Whether the suite *kills* each faulted build is the GPU mutation meta-test's job (Hopper, W >= 2).
"""

import hashlib
import importlib.metadata
import re

import pytest

from kernel.fused import cutlass_available
from kernel.fused.wrapper import KERNEL_FAULTS, FusedGemmRs, normalize_faults

needs_cutlass = pytest.mark.skipif(not cutlass_available(), reason="nvidia-cutlass-dsl is not installed")

N, K = 512, 256

# "Zero cost when off": sha256 of the PTX of the default build for (N=512, K=256, GemmConfig(), W=2,
# rank 0, sm_90a, spin timeout 60 s), captured from the kernel source *before* the fault switches were
# added (nvidia-cutlass-dsl 4.8.1). The PTX holds no path or timestamp (checked: it is the same across
# processes), so no normalisation is needed. If this fails and the toolchain did not change, the
# switches (or another edit) changed the default kernel: every switch must be a ``cutlass.const_expr``
# branch that traces to nothing when off. A toolchain upgrade legitimately changes it: re-capture.
REFERENCE_TOOLCHAIN = "4.8.1"
REFERENCE_SHA256_W2_R0 = "4364d31ca400280a3355e64ca3444986b4d8aa0e719d21720354977cb737fc7d"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _cutlass_version() -> str:
    try:
        return importlib.metadata.version("nvidia-cutlass-dsl")
    except importlib.metadata.PackageNotFoundError:
        return "?"


@pytest.fixture(scope="module")
def builds():
    """PTX per (W, rank, fault): the default ('') and each fault at W=2 rank 0; W=4 rank 3 for the
    switches whose effect scales with W."""
    if not cutlass_available():
        pytest.skip("nvidia-cutlass-dsl is not installed")
    from kernel.fused.compile import get_compiled_rs
    from kernel.fused.gemm import GemmConfig

    out = {}
    for W, r, faults in [(2, 0, ("",) + KERNEL_FAULTS), (4, 3, ("", "dropped_peer", "relaxed_signal"))]:
        for f in faults:
            out[(W, r, f)] = get_compiled_rs(N, K, GemmConfig(), W, r, faults=(f,) if f else ()).ptx
    return out


def _count(ptx: str, pattern: str) -> int:
    return len(re.findall(pattern, ptx))


LD_PEER = r"ld\.global\.v4\.b32"
ST_OUT = r"st\.global\.v4\.b32"
ST_RELEASE = r"st\.release\.sys\.global\.u32"
ST_RELAXED_SYS = r"st\.relaxed\.sys\.global\.u32"
ST_RELAXED_GPU = r"st\.relaxed\.gpu\.global\.u32"
LD_ACQUIRE = r"ld\.acquire\.sys\.global\.u32"
PROXY_FENCE = r"fence\.proxy\.async\.global"
STORE_COMPLETE = r"cp\.async\.bulk\.wait_group\s+0;"  # the write-complete wait before the signal


# --- zero cost when off ------------------------------------------------------------------------------------
@pytest.mark.kernel
@needs_cutlass
def test_default_build_is_byte_identical_to_explicit_no_faults(builds):
    from kernel.fused.compile import RsCompileKey, _compile_rs, get_compiled_rs
    from kernel.fused.gemm import GemmConfig

    default = get_compiled_rs(N, K, GemmConfig(), 2, 0)
    assert get_compiled_rs(N, K, GemmConfig(), 2, 0, faults=()) is default  # same cache key
    assert default.key.faults == frozenset()
    fresh = _compile_rs(RsCompileKey(N, K, GemmConfig(), 2, 0, faults=frozenset()))  # a second, separate compile
    assert fresh.ptx == default.ptx == builds[(2, 0, "")]


@pytest.mark.kernel
@needs_cutlass
@pytest.mark.skipif(_cutlass_version() != REFERENCE_TOOLCHAIN,
                    reason=f"reference PTX hash taken with nvidia-cutlass-dsl {REFERENCE_TOOLCHAIN}")
def test_default_build_matches_pre_switch_reference(builds):
    assert _sha(builds[(2, 0, "")]) == REFERENCE_SHA256_W2_R0


# The W == 1 GEMM's PTX (N=512, K=256, GemmConfig()), pinned when the two kernels' shared set-up, producer
# warp and host set-up moved into HopperGemmBF16 helpers (same PTX before and after, both kernels, every
# fault build; then verified on an H200). A refactor of the shared code must keep both hashes.
REFERENCE_SHA256_GEMM_W1 = "90d72b209d1efa25112e870502c2014675e22cac615ee28d65b16501bf2a496f"


@pytest.mark.kernel
@needs_cutlass
@pytest.mark.skipif(_cutlass_version() != REFERENCE_TOOLCHAIN,
                    reason=f"reference PTX hash taken with nvidia-cutlass-dsl {REFERENCE_TOOLCHAIN}")
def test_plain_gemm_matches_its_reference():
    from kernel.fused.compile import get_compiled
    from kernel.fused.gemm import GemmConfig

    assert _sha(get_compiled(N, K, GemmConfig()).ptx) == REFERENCE_SHA256_GEMM_W1


# --- each switch changes the PTX the way its bug class says ----------------------------------------------
@pytest.mark.kernel
@needs_cutlass
def test_every_fault_differs_from_default_and_has_no_multimem(builds):
    for (W, r, f), ptx in builds.items():
        assert "multimem" not in ptx, (W, r, f)
        assert ".local" not in ptx, (W, r, f)
        assert "wgmma.mma_async" in ptx, (W, r, f)
        if f:
            assert ptx != builds[(W, r, "")], (W, r, f)
            assert _sha(ptx) != _sha(builds[(W, r, "")])


@pytest.mark.kernel
@needs_cutlass
def test_dropped_peer_loads_w_minus_1_partials(builds):
    for W, r in ((2, 0), (4, 3)):
        assert _count(builds[(W, r, "")], LD_PEER) == W
        assert _count(builds[(W, r, "dropped_peer")], LD_PEER) == W - 1


@pytest.mark.kernel
@needs_cutlass
def test_relaxed_signal_raises_ready_without_release_or_completion(builds):
    for W, r in ((2, 0), (4, 3)):
        base, bad = builds[(W, r, "")], builds[(W, r, "relaxed_signal")]
        # default: W ready signals + W done signals, all st.release.sys; faulted: only the W done ones
        assert _count(base, ST_RELEASE) == 2 * W and _count(base, ST_RELAXED_SYS) == 0
        assert _count(bad, ST_RELEASE) == W and _count(bad, ST_RELAXED_SYS) == W
        # the write-complete wait and one proxy fence (the pre-signal one) are gone
        assert _count(base, STORE_COMPLETE) == 1 and _count(bad, STORE_COMPLETE) == 0
        assert _count(bad, PROXY_FENCE) == _count(base, PROXY_FENCE) - 1
        assert _count(bad, LD_ACQUIRE) == _count(base, LD_ACQUIRE)  # the waits are intact


@pytest.mark.kernel
@needs_cutlass
def test_stale_epoch_never_writes_the_epoch_word(builds):
    base, bad = builds[(2, 0, "")], builds[(2, 0, "stale_epoch")]
    # default: st.relaxed.gpu of the finished reset and of the epoch; faulted: the reset only
    assert _count(base, ST_RELAXED_GPU) == 2
    assert _count(bad, ST_RELAXED_GPU) == 1
    assert _count(bad, ST_RELEASE) == _count(base, ST_RELEASE)


@pytest.mark.kernel
@needs_cutlass
@pytest.mark.parametrize("fault", ["write_past_capacity", "padding_written"])
def test_stray_row_faults_add_one_store_path(builds, fault):
    base, bad = builds[(2, 0, "")], builds[(2, 0, fault)]
    assert _count(base, ST_OUT) == 1
    assert _count(bad, ST_OUT) == 2  # the extra (zero-row) store loop
    assert _count(bad, LD_PEER) == _count(base, LD_PEER)


@pytest.mark.kernel
@needs_cutlass
def test_wrong_owner_same_instructions_other_addresses(builds):
    base, bad = builds[(2, 0, "")], builds[(2, 0, "wrong_owner")]
    assert bad != base
    for pattern in (LD_PEER, ST_OUT, ST_RELEASE, LD_ACQUIRE, ST_RELAXED_GPU, PROXY_FENCE):
        assert _count(bad, pattern) == _count(base, pattern), pattern


@pytest.mark.kernel
@needs_cutlass
def test_faults_are_part_of_the_cache_key(builds):
    from kernel.fused.compile import get_compiled_rs
    from kernel.fused.gemm import GemmConfig

    a = get_compiled_rs(N, K, GemmConfig(), 2, 0, faults=("dropped_peer",))
    b = get_compiled_rs(N, K, GemmConfig(), 2, 0, faults="dropped_peer")
    assert a is b and a.key.faults == frozenset({"dropped_peer"})
    assert a is not get_compiled_rs(N, K, GemmConfig(), 2, 0)


# --- validation (no compile) -------------------------------------------------------------------------------
@pytest.mark.kernel
def test_fault_names_are_validated():
    assert normalize_faults(()) == frozenset() == normalize_faults(None)
    assert normalize_faults(["stale_epoch", "stale_epoch"]) == frozenset({"stale_epoch"})
    with pytest.raises(ValueError, match="unknown kernel fault"):
        normalize_faults(("dropped_peers",))
    with pytest.raises(ValueError, match="unknown kernel fault"):
        FusedGemmRs(max_M=64, N=64, K=128, device="cpu", faults=("no_such_fault",))
    impl = FusedGemmRs(max_M=64, N=64, K=128, device="cpu", faults=("wrong_owner",))
    assert impl._faults == frozenset({"wrong_owner"})
    impl.close()


@pytest.mark.kernel
@needs_cutlass
def test_compile_cache_rejects_unknown_faults():
    from kernel.fused.compile import get_compiled_rs
    from kernel.fused.gemm import GemmConfig
    from kernel.fused.gemm_rs import HopperGemmRsBF16

    with pytest.raises(ValueError, match="unknown kernel fault"):
        get_compiled_rs(N, K, GemmConfig(), 2, 0, faults=("bogus",))
    with pytest.raises(ValueError, match="unknown kernel fault"):
        HopperGemmRsBF16(N, K, GemmConfig(), 2, 0, faults=("bogus",))


@pytest.mark.kernel
def test_mutant_classes_load_by_spec_and_cover_every_fault():
    from kernel.registry import load_implementation
    from mutants import kernel_faults

    assert {s.fault for s in kernel_faults.GPU_CATALOGUE} == set(KERNEL_FAULTS)
    assert len(kernel_faults.GPU_CATALOGUE) == len(KERNEL_FAULTS)
    for s in kernel_faults.GPU_CATALOGUE:
        cls = load_implementation(s.impl)
        assert cls is getattr(kernel_faults, s.name)
        assert issubclass(cls, FusedGemmRs)
        assert tuple(cls.faults) == (s.fault,)
        assert cls.name != FusedGemmRs.name and s.bug_class and s.expected
    assert FusedGemmRs.faults == ()


@pytest.mark.kernel
def test_mutant_class_forces_the_fused_path_on_cpu():
    import torch

    from kernel.errors import FusedPathUnavailable
    from mutants.kernel_faults import FusedDroppedPeer

    impl = FusedDroppedPeer(max_M=64, N=64, K=128, device="cpu")
    assert impl._faults == frozenset({"dropped_peer"}) and impl.force_fused
    x = torch.zeros(8, 128, dtype=torch.bfloat16)
    w = torch.zeros(64, 128, dtype=torch.bfloat16)
    with pytest.raises(FusedPathUnavailable):
        impl(x, w)
    impl.close()
