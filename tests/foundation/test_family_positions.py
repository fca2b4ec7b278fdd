"""Positional and conditional details of the families that other tests never pin (the planted-bug audit's survivors):
the last valid row compared bit for bit, ``last_path`` reset before every call, the case-end guard check made beside
a skipped check, the implementation's own red zones read after a call without ``out=``, every rank the lone bad
caller for some seed, and the capacity edge among the boundary Ms."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from _in_process import CPU, failed_checks, run_on_one_cpu_rank

from fuzz.bad_calls import BAD_CALLS
from fuzz.case import Case
from fuzz.families import bad_call
from fuzz.families.calls import CaseCalls
from fuzz.strategies import boundary_ms
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue
from properties.result import CheckResult

BASE = dict(seed=5, N=64, K=64, max_M=64)


class _LastRowLowBitFlipped(UnfusedGemmRs):
    """A test implementation wrong in one bit: the least significant bit of the first element of the last valid row
    (a tile's edge handled one row short)."""

    name = "test-last-row-low-bit"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        n_valid = self.valid_rows(M)
        if n_valid > 0:
            y[n_valid - 1 : n_valid, :1].view(torch.int16).bitwise_xor_(1)
        return y


def test_the_last_valid_row_is_compared_bit_for_bit():
    checks = run_on_one_cpu_rank(_LastRowLowBitFlipped, Case("compute", ms=[5], kind="exact", repeat=1, **BASE))
    bad = failed_checks(checks, "bitwise_equal")
    assert bad, [c.render() for c in checks if c.name == "bitwise_equal"]
    assert bad[0].worst_row == 4, bad[0].render()  # the last of the 5 valid rows


class _PathOnFirstCallOnly(UnfusedGemmRs):
    """A test implementation that reports its path on its first call only: later calls leave ``last_path`` as they
    found it."""

    name = "test-path-on-first-call-only"

    def _run(self, x, w, out, M):
        before = self.last_path
        y = super()._run(x, w, out, M)
        if getattr(self, "_called", False):
            self.last_path = before
        self._called = True
        return y


def test_a_call_that_reports_no_path_fails_path_taken_whatever_the_call_before_reported():
    impl = _PathOnFirstCallOnly(None, max_M=16, N=16, K=16, device=CPU)
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(5, 16, generator=g).bfloat16(), torch.randn(16, 16, generator=g).bfloat16()
    calls = CaseCalls(0, 1)
    calls.call(impl, x, w, tag="first")
    calls.call(impl, x, w, tag="second")
    calls.finish()
    paths = {c.extra["call"]: c for c in calls.checks if c.name == "path_taken"}
    assert paths["first"].passed, paths["first"].render()
    assert not paths["second"].passed, paths["second"].render()
    assert paths["second"].extra["path"] is None


class _GuardWrittenOnSecondCall(UnfusedGemmRs):
    """A test implementation that writes one word of its red zone on its second call: the repeat, a call the
    compute family checks no guard after, so only the case-end read sees it."""

    name = "test-guard-written-on-second-call"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        self._n_calls = getattr(self, "_n_calls", 0) + 1
        if self._n_calls == 2:
            self._guard.reshape(-1).view(torch.int16)[:1].bitwise_xor_(1)
        return y


def _case_end(checks) -> list[CheckResult]:
    return [c for c in checks if c.name == "guard_regions_untouched" and c.extra.get("when") == "case end"]


def test_the_case_end_guard_check_is_made_beside_a_skipped_check():
    # W = 1 with out= guarded: padded_rows_untouched is skipped (no padding rows); every other check ran
    case = Case("compute", ms=[5], kind="exact", repeat=2, **BASE)
    checks = run_on_one_cpu_rank(UnfusedGemmRs, case)
    assert any(c.skipped for c in checks) and any(not c.skipped for c in checks)
    ends = _case_end(checks)
    assert len(ends) == 1 and ends[0].passed, f"no case-end guard check among {sorted({c.name for c in checks})}"
    late = run_on_one_cpu_rank(_GuardWrittenOnSecondCall, case)
    per_call = [c for c in late if c.name == "guard_regions_untouched" and c.extra.get("when") != "case end"]
    assert per_call and all(c.passed for c in per_call)  # the write came after the only per-call guard read
    ends = _case_end(late)
    assert ends and not ends[0].passed, [c.render() for c in late if c.name == "guard_regions_untouched"]


def test_a_call_without_out_has_the_implementations_own_red_zones_checked():
    # WorkspaceOverrun writes the row past the workspace (its red zone) at M = max_M; no out= to guard
    checks = run_on_one_cpu_rank(catalogue.WorkspaceOverrun,
                                 Case("compute", ms=[BASE["max_M"]], out="none", repeat=1, **BASE))
    per_call = [c for c in checks if c.name == "guard_regions_untouched" and c.extra.get("when") != "case end"]
    assert per_call and not per_call[0].passed and not per_call[0].skipped, per_call[0].render()
    assert "after workspace" in per_call[0].detail, per_call[0].detail


class _Lone:
    """A group of W ranks seen from ``rank``: every rank rejected every entry cleanly (``gather``), no barrier."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size

    def gather(self, value):
        return {r: value for r in range(self.world_size)}

    def barrier(self):
        return None


@pytest.mark.parametrize("W", [2, 3, 4])
def test_every_rank_is_the_lone_bad_caller_for_some_seed(W, monkeypatch):
    made = []

    def reject(ctx, impl, entry, good, *, name, **kw):
        made.append(ctx.rank)
        return CheckResult(name=name, passed=True, rank=ctx.rank)

    def verified_call(ctx, impl, case, M, seed, **kw):
        return [CheckResult(name="within_tolerance", passed=True, rank=ctx.rank)], None, None

    monkeypatch.setattr(bad_call, "reject", reject)
    monkeypatch.setattr(bad_call, "verified_call", verified_call)
    good = SimpleNamespace(M=5)
    clean = [CheckResult(name="bad_call_rejected", passed=True, extra={"bad": b, "M": 5}) for b in BAD_CALLS]
    lone = set()
    for seed in range(W):
        made.clear()
        said = set()
        for r in range(W):
            out = bad_call.rejected_alone(_Lone(r, W), None, SimpleNamespace(seed=seed), clean, good)
            said |= {c.extra["alone"]["rank"] for c in out if "alone" in c.extra and isinstance(c.extra["alone"], dict)}
        assert len(made) == 1 and said == set(made), (seed, made, said)  # one rank alone, the one every rank names
        lone.add(made[0])
    assert lone == set(range(W)), f"W={W}: lone ranks over seeds 0..{W - 1}: {sorted(lone)}"


@pytest.mark.parametrize("W", range(1, 9))
@pytest.mark.parametrize("max_M", [1, 2, 9, 64, 128, 1000, 4096, 8192])
def test_the_boundary_ms_include_the_capacity_edge(W, max_M):
    ms = boundary_ms(W, max_M)
    assert {1, max_M} <= set(ms), (W, max_M, ms)
    for m in (W, max_M - 1):
        if 1 <= m <= max_M:
            assert m in ms, (W, max_M, m, ms)
    assert all(1 <= m <= max_M for m in ms) and len(ms) == len(set(ms)), ms
