"""The one checked call (fuzz/families/calls.py) and run_case's verdict rules, in process on one CPU rank
(W = 1, no process group): the correct implementation passes every per-call check; planted bugs fail the
check named for them; a valid call that raises is a failed check, a harness bug an exception; an
unsupported configuration is a skip and a host without the main path a failure — never a pass."""

from __future__ import annotations

import pytest
import torch
from _in_process import failed_checks as _failed
from _in_process import run_on_one_cpu_rank as _run

from fuzz.case import Case
from fuzz.families import FAMILIES
from fuzz.families.calls import conformed
from kernel.errors import SymmetricMemoryMismatch, UnsupportedConfigError
from kernel.fused import FusedGemmRs
from kernel.fused import wrapper as fused_wrapper
from kernel.interface import Eligibility, GemmRsImplementation
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue

CPU = torch.device("cpu")
BASE = dict(seed=3, N=64, K=64, max_M=512)


def _names(checks):
    return {c.name for c in checks}


def test_the_correct_implementation_passes_every_per_call_check():
    with_out = _run(UnfusedGemmRs, Case("compute", ms=[3, 129], kind="exact", **BASE))
    fresh = _run(UnfusedGemmRs, Case("compute", ms=[100, 5], out="none", **BASE))
    for checks in (with_out, fresh):
        assert not _failed(checks), [c.render() for c in _failed(checks)]
    assert {"path_taken", "result_contract", "returns_out", "earlier_results_unchanged"} <= _names(with_out)
    assert {"path_taken", "result_contract", "fresh_result", "fresh_padding_zero",
            "earlier_results_unchanged"} <= _names(fresh)
    paths = [c for c in fresh if c.name == "path_taken"]
    assert len(paths) == 6  # 2 calls, 1 repeat, 2 fresh instances, 1 in place: every call is accounted for
    assert {(c.extra["path"], c.extra["expected"], c.extra["reason"]) for c in paths} == {("unfused", "unfused", "")}
    per_call = [c for c in fresh if c.name in ("path_taken", "result_contract", "fresh_result", "fresh_padding_zero")]
    assert all("call" in c.extra and "M" in c.extra for c in per_call) and len(per_call) == 4 * 6


@pytest.mark.parametrize("mutant, check", [
    ("SilentFallback", "path_taken"),
    ("Fp32Result", "result_contract"),
    ("ResultAliasesWorkspace", "fresh_result"),
    ("ResultAliasesWorkspace", "earlier_results_unchanged"),
    ("NoValidRowsSkipsCollective", None),  # W = 1 has no empty rank: it must pass here (no false alarm)
])
def test_planted_bugs_fail_their_check(mutant, check):
    checks = _run(getattr(catalogue, mutant), Case("compute", ms=[5, 100], out="none", **BASE))
    if check is None:
        assert not _failed(checks), [c.render() for c in _failed(checks)]
    else:
        assert _failed(checks, check), f"{mutant} passed {check}"


class ResultInXBuffer(UnfusedGemmRs):
    """The result written over the caller's x once the GEMM has read it ("the activation buffer is free now")."""

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if out is None and x.numel() >= y.numel():
            y = x.view(-1)[: y.numel()].view(y.shape).copy_(y)
        return y


def test_a_result_in_the_caller_s_x_is_not_fresh():
    checks = _run(ResultInXBuffer, Case("compute", ms=[100], out="none", **BASE))
    bad = _failed(checks, "fresh_result")
    assert bad and "this call's x" in bad[0].detail, [c.render() for c in checks]
    assert _failed(checks, "inputs_untouched")


def test_a_silent_fallback_names_both_paths():
    checks = _run(catalogue.SilentFallback, Case("compute", ms=[5], **BASE))
    bad = _failed(checks, "path_taken")[0]
    assert bad.extra == {"path": "unfused", "expected": "fast", "reason": "", "call": "call0", "M": 5}


def test_a_result_that_breaks_the_contract_is_replaced_by_a_conforming_stand_in():
    y = torch.arange(6, dtype=torch.float32).view(2, 3)  # fp32, 2 rows where 3 are due
    stand_in = conformed(y, (3, 3), CPU)
    assert stand_in.dtype == torch.bfloat16 and stand_in.shape == (3, 3)
    assert torch.equal(stand_in[:2].float(), y)
    assert torch.isnan(stand_in[2]).all()
    assert torch.isnan(conformed(None, (2, 2), CPU)).all()


class RaisesOnM7(UnfusedGemmRs):
    """A valid call that raises (an implementation failure)."""

    def _run(self, x, w, out, M):
        if M == 7:
            raise RuntimeError("planted: launch failed at M=7")
        return super()._run(x, w, out, M)


def test_a_valid_call_that_raises_is_a_failed_check_not_an_error():
    checks = _run(RaisesOnM7, Case("compute", ms=[3, 7, 9], **BASE))
    raised = _failed(checks, "call_raised")
    assert len(raised) == 1
    assert raised[0].extra["raised"] == "RuntimeError" and raised[0].extra["M"] == 7
    assert "planted: launch failed at M=7" in raised[0].detail and "Traceback" in raised[0].detail
    assert "in _run" in raised[0].detail
    assert {"path_taken", "earlier_results_unchanged"} <= _names(checks)  # what ran before is still reported


def test_a_harness_error_propagates():
    with pytest.raises(ValueError, match="unknown case family"):
        _run(UnfusedGemmRs, Case("no_such_family", **BASE))
    with pytest.raises(ValueError, match="unknown bad call"):
        _run(UnfusedGemmRs, Case("bad_call", bad="no_such_bad_call", **BASE))


class OnlyEvenN(UnfusedGemmRs):
    def __init__(self, group=None, *, max_M, N, K, device=None):
        if N % 128:
            raise UnsupportedConfigError(f"N={N}: only multiples of 128")
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)


class OnlyEvenNNoGroupClaim(OnlyEvenN):
    supports_group = classmethod(lambda cls, world_size: None)  # the interface's default: no claim about groups


class OnlyEvenNDeclared(OnlyEvenN):
    @classmethod
    def supports(cls, N, K):
        return Eligibility(N % 128 == 0, f"N={N}: only multiples of 128")


def test_an_unsupported_config_at_construction_is_a_skip_with_its_reason():
    """Without a claim about its groups, a class's construction refusing a configuration skips the family (it may be
    the group it declines); where it claims the shape and the group (``supports``, ``supports_group``), the refusal
    fails ``declared_config_served``; where it declares the shape unsupported, the typed rejection is what it owes."""
    checks = _run(OnlyEvenNNoGroupClaim, Case("compute", ms=[3], **BASE))
    assert len(checks) == 1 and checks[0].skipped and not checks[0].passed
    assert "N=64: only multiples of 128" in checks[0].detail
    claimed = _run(OnlyEvenN, Case("compute", ms=[3], **BASE))
    assert [(c.name, c.passed) for c in claimed] == [("declared_config_served", False)]
    assert "N=64: only multiples of 128" in claimed[0].detail
    declared = _run(OnlyEvenNDeclared, Case("compute", ms=[3], **BASE))
    assert [(c.name, c.passed) for c in declared] == [("unsupported_shape_handled", True)]


class NoMainPathHere(UnfusedGemmRs):
    main_path = "fast"

    def main_path_support(self):
        return Eligibility(False, "libfast is not importable")


def test_a_host_without_the_main_path_fails_every_case_with_the_reason():
    for case in (Case("compute", ms=[3], **BASE), Case("bad_call", bad="x_dtype", **BASE),
                 Case("graph", ms=[3], **BASE)):
        checks = _run(NoMainPathHere, case)
        assert [c.name for c in checks] == ["main_path_available"]
        assert not checks[0].passed and "libfast is not importable" in checks[0].detail


def test_fused_on_a_host_without_cutlass_fails_main_path_available(monkeypatch):
    impl = FusedGemmRs(max_M=64, N=64, K=64, device="cpu")
    assert "not a CUDA device" in impl.main_path_support().reason
    monkeypatch.setattr(fused_wrapper, "check_cuda_device", lambda device: None)
    monkeypatch.setattr(fused_wrapper, "cutlass_available", lambda: False)
    support = impl.main_path_support()
    assert not support and "nvidia-cutlass-dsl" in support.reason and "not importable" in support.reason


def test_fused_declares_its_paths():
    impl = FusedGemmRs(max_M=64, N=64, K=64, device="cpu")
    w = torch.zeros(64, 64, dtype=torch.bfloat16)
    x = torch.zeros(3, 64, dtype=torch.bfloat16)
    assert (impl.main_path, impl.fallback_path) == ("fused", "unfused")
    path, reason = impl.expected_path(x, w)
    assert path == "unfused" and "not a CUDA device" in reason  # can_run says no: the declared fallback
    forced = FusedGemmRs(max_M=64, N=64, K=64, device="cpu", force_fused=True)
    assert forced.expected_path(x, w)[0] is None  # no fallback: no path serves it
    y = impl(x, w)
    assert impl.last_path == "unfused" and y.shape == (3, 64)


def test_main_path_defaults_to_the_name_and_is_inherited():
    assert UnfusedGemmRs.main_path == "unfused"
    assert catalogue.DoubleCountedRank.main_path == "unfused"  # a mutant runs (and reports) the unfused path

    class Named(GemmRsImplementation):
        name = "my-gemm-rs"

        def _run(self, x, w, out, M):
            raise NotImplementedError

    assert Named.main_path == "my-gemm-rs"


def test_every_family_has_a_strategy():
    from fuzz.strategies import FAMILY_STRATEGIES

    assert tuple(FAMILIES) == tuple(FAMILY_STRATEGIES)


class SymmetricMemoryRefused(UnfusedGemmRs):
    """A construction that raises a typed error other than UnsupportedConfigError (the peers' workspaces differ): the
    implementation failed on a configuration it accepts -- no claim about groups, so only the error's type decides."""

    supports_group = classmethod(lambda cls, world_size: None)

    def __init__(self, group=None, **kwargs):
        raise SymmetricMemoryMismatch("the peers' symmetric workspaces differ in size")


@pytest.mark.parametrize("family", ["compute", "capacity", "instances", "dispatch"])
def test_a_typed_error_other_than_unsupported_config_at_construction_fails_every_family(family):
    # neither a skip (UnsupportedConfigError's answer) nor the byte_boundary family's clean rejection
    case = Case(family, ms=[3], bad="over" if family == "capacity" else None,
                shapes=[[32, 64, 64]] if family == "instances" else None, **BASE)
    checks = _run(SymmetricMemoryRefused, case)
    assert [(c.name, c.passed, c.skipped) for c in checks] == [("call_raised", False, False)], \
        [c.render() for c in checks]
    assert "SymmetricMemoryMismatch" in checks[0].detail, checks[0].detail
