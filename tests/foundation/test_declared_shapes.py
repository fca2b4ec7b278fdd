"""Shapes drawn from what an implementation declares (issue 15, item 1; CONTRACT.md "Shapes"), in process on
one CPU rank: ``supports(N, K)`` on the interface, the strategies' tail and model-size draws snapped to a
supported shape (or kept, for the ``unsupported_shape_handled`` check), shrinking toward small shapes; the
check fails an implementation that declares a shape unsupported yet runs it, or that accepts it without a
fallback; and the tail mutants fail on tail shapes and nowhere else."""

from __future__ import annotations

import pytest
import torch
from _in_process import run_on_one_cpu_rank as _run
from hypothesis import HealthCheck, find, given, settings

from fuzz.case import Case
from fuzz.families import RankContext
from fuzz.strategies import (
    BURST_DELAY_MS,
    DRAWN_DELAYS_MS,
    LATE_RANK_DELAY_MS,
    MODEL_SHAPES,
    SHAPES,
    TAIL_RANGES,
    all_shapes,
    back_to_back_cases,
    compute_cases,
    declared_support,
    late_rank_cases,
    model_shape_cases,
    model_shape_ms,
    nearest_supported,
    shapes,
    smallest_shape_cases,
    smallest_shape_ms,
)
from kernel.errors import ShapeError, UnsupportedConfigError
from kernel.fused import FusedGemmRs
from kernel.interface import Eligibility
from kernel.unfused import UnfusedGemmRs
from mutants.catalogue import (
    DeepKChunkTailDropped,
    GemvFlatResult,
    KBelowOneStepSkipped,
    KTailNeverLoaded,
    NTailNotReduced,
    WideNBlockUnwritten,
)

CPU = torch.device("cpu")
QUIET = settings(max_examples=60, database=None, derandomize=True, suppress_health_check=list(HealthCheck))


def test_supports_is_declared_on_the_class():
    assert UnfusedGemmRs.supports(1, 1) and UnfusedGemmRs.supports(7, 65)
    assert not UnfusedGemmRs.supports(0, 64) and "N=0" in UnfusedGemmRs.supports(0, 64).reason
    assert FusedGemmRs.supports(1000, 64) and FusedGemmRs.supports(2880, 1024)
    assert "K tile" in FusedGemmRs.supports(1024, 180).reason
    assert "multiple of 8" in FusedGemmRs.supports(1001, 64).reason
    assert declared_support("fused") == FusedGemmRs.supports
    assert declared_support("no.such.module:Impl") is all_shapes  # the ranks report the load error


def test_nearest_supported_moves_up_to_the_next_supported_shape():
    assert nearest_supported(FusedGemmRs.supports, 1001, 65) == (1008, 128)
    assert nearest_supported(UnfusedGemmRs.supports, 3, 5) == (3, 5)
    assert nearest_supported(lambda n, k: Eligibility(False, "never"), 3, 5) is None


@pytest.mark.parametrize("topology, impl", [("cpu", UnfusedGemmRs), ("shared-gpu", FusedGemmRs)])
def test_drawn_shapes_are_supported_tails_included_and_shrink_to_small_ones(topology, impl):
    seen = []

    @QUIET
    @given(shapes(topology, impl.supports))
    def draw(shape):
        seen.append(shape)

    draw()
    assert all(impl.supports(*s) for s in seen)
    assert any(K % 64 for _, K in seen) == (impl is UnfusedGemmRs)  # K tails only where supported
    assert any(N % 256 for N, _ in seen) and any(N < 128 for N, _ in seen)
    assert any(N % 2 for N, _ in seen) == (impl is UnfusedGemmRs)
    assert find(shapes(topology, impl.supports), lambda s: True) == SHAPES["cpu" if topology == "cpu" else "gpu"][0]
    N, K = find(shapes(topology, impl.supports), lambda s: s[0] % 256 and s not in SHAPES["gpu"] + SHAPES["cpu"])
    assert N < 256 and K <= 64  # the tail a failure shrinks to is small


def test_model_sizes_on_gpu_topologies_only_and_undeclared_shapes_kept_sometimes():
    gpu, cpu = [], []

    @QUIET
    @given(shapes("shared-gpu", FusedGemmRs.supports, unsupported=True), shapes("cpu", unsupported=True))
    def draw(g, c):
        gpu.append(g)
        cpu.append(c)

    draw()
    assert any(N in (2880, 4096, 5120, 7168, 8192) and N not in (4096, 7168) for N, _ in gpu)
    assert max(N for N, _ in cpu) <= 320
    assert any(not FusedGemmRs.supports(*s) for s in gpu) and any(FusedGemmRs.supports(*s) for s in gpu)


# --- unsupported_shape_handled ------------------------------------------------------------------------------

class _NoKTails(UnfusedGemmRs):
    """Declares K % 64 == 0 only."""

    @classmethod
    def supports(cls, N, K):
        return Eligibility(K % 64 == 0, "" if K % 64 == 0 else f"K={K}: no K tail")


class DeclaresButRuns(_NoKTails):
    """Declares K tails unsupported, yet can_run says yes (the main path runs them)."""


class FallsBack(_NoKTails):
    main_path = "main"
    fallback_path = "unfused"

    def can_run(self, weight):
        return Eligibility(self.K % 64 == 0, f"K={self.K}: no K tail")


class RejectsWithoutFallback(_NoKTails):
    def can_run(self, weight):
        return Eligibility(self.K % 64 == 0, f"K={self.K}: no K tail")

    def validate(self, x, w, out):
        if self.K % 64:
            raise UnsupportedConfigError(f"K={self.K}: no K tail")
        return super().validate(x, w, out)


class RejectsWithAShapeError(RejectsWithoutFallback):
    """Rejects the undeclared shape, but with a shape error: not the typed error the contract names for it."""

    def validate(self, x, w, out):
        if self.K % 64:
            raise ShapeError(f"K={self.K}: no K tail")
        return super().validate(x, w, out)


class RejectsAfterZeroingW(RejectsWithoutFallback):
    """Rejects the undeclared shape with its typed error, after it zeroed the caller's weight."""

    def validate(self, x, w, out):
        w.zero_()
        return super().validate(x, w, out)


class AcceptsWithoutFallback(RejectsWithoutFallback):
    def validate(self, x, w, out):
        return UnfusedGemmRs.validate(self, x, w, out)


class RejectsAtConstruction(_NoKTails):
    def __init__(self, group=None, *, max_M, N, K, device=None):
        if K % 64:
            raise UnsupportedConfigError(f"K={K}: no K tail")
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)


def _verdict(checks, name="unsupported_shape_handled"):
    found = [c for c in checks if c.name == name]
    assert len(found) == 1, [c.name for c in checks]
    return found[0]


TAIL = Case("compute", seed=1, N=64, K=100, max_M=256, ms=[33], kind="exact")


@pytest.mark.parametrize("factory, passed, family_runs", [
    (DeclaresButRuns, False, False),
    (AcceptsWithoutFallback, False, False),
    (RejectsWithoutFallback, True, False),
    (RejectsWithAShapeError, False, False),
    (RejectsAfterZeroingW, False, False),
    (RejectsAtConstruction, True, False),
    (FallsBack, True, True),
])
def test_an_undeclared_shape_must_be_rejected_or_fall_back(factory, passed, family_runs):
    checks = _run(factory, TAIL)
    res = _verdict(checks)
    assert res.passed == passed and not res.skipped, res.render()
    assert any(c.name == "within_tolerance" for c in checks) == family_runs
    if family_runs:  # the fallback's calls are held to the fallback path and to the right values
        paths = {(c.extra["path"], c.extra["expected"]) for c in checks if c.name == "path_taken"}
        assert paths == {("unfused", "unfused")}
        assert all(c.passed or c.skipped for c in checks), [c.render() for c in checks if not c.passed]


def test_a_declared_shape_runs_the_family_without_the_check():
    checks = _run(RejectsWithoutFallback, Case("compute", seed=1, N=64, K=128, max_M=256, ms=[33], kind="exact"))
    assert not [c for c in checks if c.name == "unsupported_shape_handled"]
    assert all(c.passed or c.skipped for c in checks)


# --- the tail mutants ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mutant", [KTailNeverLoaded, NTailNotReduced])
def test_tail_mutants_compute_right_without_tails(mutant):
    x, w = torch.randn(33, 128).bfloat16(), torch.randn(256, 128).bfloat16()
    assert torch.equal(mutant(max_M=64, N=256, K=128)(x, w), UnfusedGemmRs(max_M=64, N=256, K=128)(x, w))


def test_k_tail_never_loaded_fails_on_a_k_tail():
    checks = _run(KTailNeverLoaded, Case("compute", seed=1, N=64, K=100, max_M=256, ms=[33]))
    failed = {c.name for c in checks if not c.passed and not c.skipped}
    assert "within_tolerance" in failed, [c.render() for c in checks]
    # (NTailNotReduced needs W >= 2: the kill matrix runs it at W = 2 on gloo ranks)


# --- the smallest shapes (21st session) ----------------------------------------------------------------------

def test_smallest_shape_cases_reach_n_1_and_k_1_with_and_without_out():
    for topology in ("cpu", "shared-gpu"):
        cases = smallest_shape_cases(4, topology)
        assert [(c.N, c.K) for c in cases][1:] == [(SHAPES["cpu" if topology == "cpu" else "gpu"][0][0], 1), (1, 1)]
        assert cases[0].N == 1 and {c.out for c in cases} == {"guarded", "none"}
        assert all(c.kinds == ["exact", "nonfinite", "gaussian"] and c.ms == [9, 1, 5] for c in cases)
        # (1, 1) under an engine's defaults: a fallback built at the first call is built there
        assert [c.defaults for c in cases] == [None, None, "engine"]
        assert [c.autograd for c in cases] == [None, None, "rotate"]  # and its first call under inference mode
    # the draw never reaches them: N and K start at 2
    assert all(lo >= 2 for ranges in TAIL_RANGES.values() for lo, _ in ranges)
    assert smallest_shape_ms(4, aligned=True) == [8, 4, 12]


@pytest.mark.parametrize("mutant, failing", [(GemvFlatResult, "result_contract"),
                                             (KBelowOneStepSkipped, "within_tolerance")])
def test_smallest_shape_mutants_fail_there_and_the_correct_one_passes(mutant, failing):
    for case in smallest_shape_cases(1):
        right = _run(UnfusedGemmRs, case)
        assert all(c.passed or c.skipped for c in right), [c.render() for c in right if not c.passed]
    failed = {c.name for case in smallest_shape_cases(1) for c in _run(mutant, case) if not c.passed and not c.skipped}
    assert failing in failed, failed
    # and both are right on the shapes the draw gives (N, K >= 2; K >= 16 for the k-step one)
    checks = _run(mutant, Case("compute", seed=3, N=64, K=64, max_M=256, ms=[33, 1], kind="exact", out="none"))
    assert all(c.passed or c.skipped for c in checks), [c.render() for c in checks if not c.passed]


# --- model sizes (23rd session) -----------------------------------------------------------------------------

def test_model_shape_cases_go_past_what_the_cpu_draw_reaches():
    cases = model_shape_cases(4)
    assert [(c.N, c.K) for c in cases] == list(MODEL_SHAPES) == [(7168, 448), (2880, 1440)]
    assert all(c.kinds == ["exact", "small", "gaussian"] and c.ms == [9, 1, 65] for c in cases)
    assert [c.out for c in cases] == ["guarded", "none"]
    assert model_shape_ms(4, aligned=True) == [8, 4, 32]
    # the cpu draw never reaches them: its listed shapes and tail ranges stay at 320, model sizes are GPU-only
    (n_lo, n_hi), (k_lo, k_hi) = TAIL_RANGES["cpu"]
    assert max(n_hi, k_hi, *(max(sh) for sh in SHAPES["cpu"])) <= 320
    assert max(N for N, _ in MODEL_SHAPES) > 4096 and max(K for _, K in MODEL_SHAPES) > 1024


@pytest.mark.parametrize("mutant, failing_shape", [(DeepKChunkTailDropped, (2880, 1440)),
                                                   (WideNBlockUnwritten, (7168, 448))])
def test_model_shape_mutants_fail_there_and_are_right_where_the_cpu_draw_goes(mutant, failing_shape):
    for case in model_shape_cases(1):
        right = _run(UnfusedGemmRs, case)
        assert all(c.passed or c.skipped for c in right), [c.render() for c in right if not c.passed]
        failed = {c.name for c in _run(mutant, case) if not c.passed and not c.skipped}
        if (case.N, case.K) == failing_shape:
            assert {"within_tolerance", "bitwise_equal"} <= failed, failed
        else:
            assert not failed, failed
    # right on the largest shapes the cpu draw gives, with and without out=
    checks = _run(mutant, Case("compute", seed=3, N=320, K=320, max_M=256, ms=[33, 1], kinds=["exact", "gaussian"],
                               out="guarded"))
    assert all(c.passed or c.skipped for c in checks), [c.render() for c in checks if not c.passed]


# --- a far-late rank (23rd session) -------------------------------------------------------------------------

def test_the_late_rank_case_is_far_past_every_drawn_skew():
    assert late_rank_cases(1) == []
    (case,) = late_rank_cases(4)
    assert case.late_rank == 3 and case.delay_ms == LATE_RANK_DELAY_MS >= 10 * max(DRAWN_DELAYS_MS)
    assert case.ms == [9] and case.kind == "exact" and case.out == "guarded" and case.layout is None
    assert late_rank_cases(4, aligned=True)[0].ms == [8]
    assert (case.N, case.K) == SHAPES["cpu"][0] and late_rank_cases(2, "shared-gpu")[0].N == SHAPES["gpu"][0][0]


def test_the_back_to_back_case_bursts_three_calls_behind_a_late_rank():
    assert back_to_back_cases(1) == []
    (case,) = back_to_back_cases(4)
    assert case.burst and case.late_rank == 3 and case.delay_ms == BURST_DELAY_MS > 0
    assert case.ms == [512, 385, 511] and len(set(case.ms)) == 3 and max(case.ms) <= case.max_M
    assert case.kind == "exact" and case.out == "guarded" and case.layout is None
    assert back_to_back_cases(4, aligned=True)[0].ms == [512, 384, 512]
    assert (case.N, case.K) == SHAPES["cpu"][-1] and back_to_back_cases(2, "shared-gpu")[0].N == SHAPES["gpu"][-1][0]


def test_the_compute_draw_makes_cases_with_and_without_a_burst():
    from hypothesis import find

    assert find(compute_cases(2), lambda c: c.burst).burst
    assert not find(compute_cases(2), lambda c: not c.burst).burst


# --- views (issue 15, item 2) -------------------------------------------------------------------------------

def test_offset_views_are_aligned_views_into_a_buffer_with_another_head():
    from fuzz.families.context import OFFSET_HEAD_VALUE, offset_view

    t = torch.randn(5, 24).bfloat16()
    v = offset_view(t, 4096, CPU)
    assert v.storage_offset() == 4096 and v.is_contiguous() and v.data_ptr() % 16 == 0 and torch.equal(v, t)
    assert v.untyped_storage().nbytes() > t.numel() * 2
    head = torch.empty(0, dtype=v.dtype).set_(v.untyped_storage(), 0, (8,), (1,))
    assert bool((head == OFFSET_HEAD_VALUE).all())
    assert offset_view(t, 0, CPU).storage_offset() == 0
    with pytest.raises(ValueError):
        offset_view(t, 3, CPU)


def test_offset_views_are_computed_right_and_a_kernel_reading_the_base_pointer_fails():
    from mutants.catalogue import StorageOffsetIgnored

    case = Case("compute", seed=2, N=64, K=64, max_M=256, ms=[40], offset=4096)
    good = _run(UnfusedGemmRs, case)
    assert all(c.passed or c.skipped for c in good), [c.render() for c in good if not c.passed]
    failed = {c.name for c in _run(StorageOffsetIgnored, case) if not c.passed and not c.skipped}
    assert "within_tolerance" in failed
    plain = _run(StorageOffsetIgnored, Case("compute", seed=2, N=64, K=64, max_M=256, ms=[40]))
    assert all(c.passed or c.skipped for c in plain)  # offset 0: nothing to get wrong


def test_strided_out_and_expanded_w_are_bad_calls_where_they_are_not_contiguous():
    from fuzz.bad_calls import BAD_CALLS, GoodCall
    from fuzz.families.bad_call import reject
    from properties import sentinel_like

    x, w = torch.randn(5, 64).bfloat16(), torch.randn(64, 64).bfloat16()
    good = GoodCall(x, w, sentinel_like((5, 64)), 64, 65)
    ctx = RankContext(UnfusedGemmRs, rank=0, world_size=1, device=CPU)
    for name in ("out_row_strided", "w_expanded"):
        entry = BAD_CALLS[name]
        assert entry.applies(good, 5)
        res = reject(ctx, UnfusedGemmRs(max_M=64, N=64, K=64), entry, good, name="bad_call_rejected")
        assert res.passed and res.extra["raised"] == "LayoutError", res.render()
    assert not BAD_CALLS["out_row_strided"].applies(good, 1)  # one row: contiguous, a valid out
    one_row = BAD_CALLS["out_row_strided"].build(GoodCall(x[:1], w, sentinel_like((1, 64)), 64, 65), 1)[2]
    assert one_row.is_contiguous()
