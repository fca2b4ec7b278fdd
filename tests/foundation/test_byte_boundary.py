"""Byte boundaries (issue 15, item 5), on the CPU at an emulated limit: the byte_boundary family checks the rows
at each boundary of the output and the workspace and passes the correct implementation; a 32-bit offset wrap
(``mutants.catalogue.OffsetWraps32``, its limit made small) fails it; a typed rejection is a clean answer. The
real sizes (2^31, 2^32 bytes) run nightly on a GPU (fuzz/test_gemm_rs.py::test_byte_boundaries)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _in_process import run_on_one_cpu_rank as _run
from hypothesis import HealthCheck, given, settings

from fuzz.case import Case
from fuzz.families.byte_boundary import boundary_windows
from fuzz.strategies import byte_boundary_cases
from kernel.errors import CapacityError
from kernel.unfused import UnfusedGemmRs
from mutants.catalogue import GPU_NIGHTLY_CATALOGUE, OffsetWraps32
from properties.padding import NO_PADDING_ROWS

CPU = torch.device("cpu")
LIMITS = [2**15, 2**16]  # emulated: rows * 64 * 2 bytes cross both by M = 600


class SmallWrap(OffsetWraps32):
    WRAP_BYTES = 2**16


class RefusesLargeMaxM(UnfusedGemmRs):
    def __init__(self, group=None, *, max_M, N, K, device=None):
        if max_M * N * 2 > 2**16:
            raise CapacityError(f"max_M={max_M}: the workspace would pass 2^16 bytes")
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)


def _case(kind, M=600):
    return Case("byte_boundary", seed=4, N=64, K=64, max_M=M, ms=[M], kind=kind, out="none", repeat=1,
                byte_limits=LIMITS)


def test_windows_hold_each_boundary_row_of_the_output_and_the_workspace():
    # W = 2, M = 1200: rank 1's shard starts at global row 600; 2^15 bytes are row 256, 2^16 row 512
    windows = boundary_windows(tuple(LIMITS), 64, 2, 1200, 1)
    rows = {r for a, b in windows for r in range(a, b)}
    assert {254, 256, 258, 510, 512, 514, 0, 599} <= rows  # local (output) boundary rows, first and last
    assert all(0 <= a < b <= 600 for a, b in windows)


def test_windows_hold_the_workspace_boundary_row_inside_a_later_ranks_shard():
    # 2^17 bytes into the W * S-row workspace: global row 1024, in rank 1's shard (rows 600..1199) its local row 424;
    # as a row of rank 1's own output (600 rows, 76800 bytes) it is past the end
    windows = boundary_windows((2**17,), 64, 2, 1200, 1)
    rows = {r for a, b in windows for r in range(a, b)}
    assert {422, 424, 426} <= rows and rows - {422, 423, 424, 425, 426} == {0, 1, 2, 597, 598, 599}, sorted(rows)


@pytest.mark.multiproc
def test_the_correct_implementation_passes_at_the_boundaries_on_a_later_rank(dist_helpers):
    # W = 2, M = 1200: rank 1's rows start at 600, where its truth must be taken
    worker = Path(__file__).resolve().parent / "_dims_workers.py"
    case = Case("byte_boundary", seed=4, N=64, K=64, max_M=1200, ms=[1200], kind="gaussian", out="none", repeat=1,
                byte_limits=[2**15, 2**17])
    verdicts = dist_helpers.run_ranks(worker, "layout_cases", 2, {"runs": [["unfused", case.to_json()]]}, timeout=120)
    for v in verdicts:
        (run,) = v["info"]["runs"]
        assert run["failed"] == [] and "within_tolerance" in run["passed"], (v["rank"], run)


def _full_shard(check) -> bool:
    """M = max_M, even, at W = 2: every shard full, so the padding checks are skipped (nothing could differ)."""
    return check.skipped and check.detail == NO_PADDING_ROWS


def test_the_correct_implementation_passes_at_the_boundaries():
    for kind in ("exact", "gaussian"):
        checks = _run(UnfusedGemmRs, _case(kind))
        assert checks and all(c.passed or _full_shard(c) for c in checks), [c.render() for c in checks if not c.passed]
        assert sum(c.name == "within_tolerance" for c in checks) >= 3


def test_a_wrapped_32_bit_offset_fails_the_rows_past_the_boundary():
    for kind in ("exact", "gaussian"):
        failed = [c for c in _run(SmallWrap, _case(kind)) if not c.passed and not c.skipped]
        assert failed and {c.name for c in failed} <= {"within_tolerance", "bitwise_equal"}
    below = _run(SmallWrap, _case("gaussian", M=500))  # 64000 bytes: below the wrap, nothing wrong
    assert all(c.passed or _full_shard(c) for c in below)


def test_a_typed_rejection_is_a_clean_answer():
    checks = _run(RefusesLargeMaxM, _case("gaussian"))
    assert [c.name for c in checks] == ["byte_boundary_rejected"] and checks[0].passed
    assert "CapacityError" in checks[0].detail


def test_drawn_cases_cross_the_limits_and_the_mutant_is_listed_for_the_gpu():
    seen = []

    @settings(max_examples=10, database=None, suppress_health_check=list(HealthCheck))
    @given(byte_boundary_cases(2, "shared-gpu"))
    def draw(case):
        seen.append(case)

    draw()
    assert all(c.max_M * c.N * 2 > 2**32 or c.max_M * c.N * 2 > 2**31 for c in seen)
    assert any(c.max_M * c.N * 2 > 2**32 for c in seen) and all(c.ms == [c.max_M] and c.max_M % 2 == 0 for c in seen)
    assert [s.name for s in GPU_NIGHTLY_CATALOGUE] == ["OffsetWraps32", "StagingOnDefaultDevice"]


class CallRaisesUntyped(UnfusedGemmRs):
    """The call at the large M raises an untyped error (an index computed past the buffer): no clean rejection."""

    def __call__(self, x, w, out=None):
        raise RuntimeError("illegal memory access at byte 2^31")


class ReportsNoPath(UnfusedGemmRs):
    """A call that reports no path of its own: ``last_path`` keeps what it held before the call (here: the main path,
    as after an earlier call); only a harness that clears it before the call sees that nothing was reported."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.last_path = self.main_path

    def __call__(self, x, w, out=None):
        before = self.last_path
        y = super().__call__(x, w, out=out)
        self.last_path = before
        return y


def test_an_untyped_error_of_the_call_is_a_failure_not_a_clean_rejection():
    checks = _run(CallRaisesUntyped, _case("gaussian"))
    failed = [c for c in checks if not c.passed and not c.skipped]
    assert [c.name for c in failed] == ["call_raised"], [c.render() for c in checks]
    assert "RuntimeError" in failed[0].detail and "byte_boundary_rejected" not in {c.name for c in checks}


def test_a_call_that_reports_no_path_fails_path_taken_whatever_the_instance_held_before():
    checks = _run(ReportsNoPath, _case("gaussian"))
    (path,) = [c for c in checks if c.name == "path_taken"]
    assert not path.passed and not path.skipped, path.render()
