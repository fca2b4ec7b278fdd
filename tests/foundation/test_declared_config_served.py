"""``declared_config_served``: where an implementation's class declares that its main path serves a shape
(``supports(N, K)``) and a group size (``supports_group(W)``), a call the contract sends to the fallback -- ``can_run``
saying no -- or a construction raising UnsupportedConfigError is a failure, not a legitimate fallback or a skipped
family: the gate would otherwise pass a run in which the named path never ran. Where the class makes no group claim
(``supports_group`` None, the interface's default), nothing is held to it."""

from __future__ import annotations

import pytest
from _in_process import failed_checks, run_on_one_cpu_rank

from fuzz.case import Case
from kernel.errors import UnsupportedConfigError
from kernel.fused import FusedGemmRs
from kernel.interface import Eligibility, GemmRsImplementation
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue
from properties import declared_claim

BASE = dict(seed=5, N=64, K=64, max_M=256)


def test_a_fallback_on_a_declared_shape_and_group_fails_though_every_value_and_path_check_passes():
    mutant = catalogue.MainPathDeclinedOnViews
    checks = run_on_one_cpu_rank(mutant, Case("compute", ms=[3, 40], offset=8, **BASE))  # 16, not 32-byte aligned
    served = failed_checks(checks, "declared_config_served")
    assert served and "32-byte aligned" in served[0].detail and "supports(64, 64)" in served[0].detail, \
        [c.render() for c in checks]
    assert {c.name for c in failed_checks(checks)} == {"declared_config_served"}  # path_taken, values: all passed
    assert any(c.name == "path_taken" and c.passed and "legitimate fallback" in c.detail for c in checks)
    aligned = run_on_one_cpu_rank(mutant, Case("compute", ms=[3, 40], **BASE))  # plain tensors: the main path
    assert not failed_checks(aligned), [c.render() for c in failed_checks(aligned)]


def test_without_a_group_claim_the_same_fallback_is_a_legitimate_one():
    class NoGroupClaim(catalogue.MainPathDeclinedOnViews):
        @classmethod
        def supports_group(cls, world_size):
            return None

    checks = run_on_one_cpu_rank(NoGroupClaim, Case("compute", ms=[3, 40], offset=8, **BASE))
    assert not failed_checks(checks), [c.render() for c in failed_checks(checks)]


def test_a_construction_refusing_a_declared_configuration_fails_instead_of_skipping_the_family():
    class RefusesLargeCapacity(UnfusedGemmRs):
        name = "refuses-large-capacity"

        def __init__(self, group=None, *, max_M, N, K, device=None):
            if max_M > 128:
                raise UnsupportedConfigError(f"max_M={max_M} > 128")
            super().__init__(group, max_M=max_M, N=N, K=K, device=device)

    checks = run_on_one_cpu_rank(RefusesLargeCapacity, Case("compute", ms=[3], **BASE))
    assert [c.name for c in failed_checks(checks)] == ["declared_config_served"], [c.render() for c in checks]
    assert "max_M=256 > 128" in checks[0].detail

    class NoGroupClaim(RefusesLargeCapacity):
        @classmethod
        def supports_group(cls, world_size):
            return None

    skipped = run_on_one_cpu_rank(NoGroupClaim, Case("compute", ms=[3], **BASE))
    assert [c.name for c in skipped] == ["unsupported_config"] and skipped[0].skipped


def test_the_claims_of_the_two_implementations():
    assert declared_claim(UnfusedGemmRs, 1, 1, 3)  # every shape and group size
    assert declared_claim(catalogue.PowerOfTwoGroupsOnly, 64, 64, 3) is None  # W = 3 declared unsupported
    assert declared_claim(FusedGemmRs, 7168, 2048, 8)
    assert declared_claim(FusedGemmRs, 7168, 2047, 8) is None  # K not a multiple of the K tile: a real fallback
    assert declared_claim(FusedGemmRs, 7168, 2048, 3) is None  # a group size the kernel does not run
    assert FusedGemmRs.supports_group(16) and not FusedGemmRs.supports_group(32)


@pytest.mark.parametrize("W", [1, 2, 3, 16])
def test_the_interface_makes_no_group_claim_by_default(W):
    assert GemmRsImplementation.supports_group(W) is None  # an adapter written to the contract alone: no claim
    assert isinstance(UnfusedGemmRs.supports_group(W), Eligibility)
