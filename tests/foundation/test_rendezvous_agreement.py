"""torch numbers its symmetric-memory rendezvous store exchanges per process, not per group: after an instance on
a subgroup that other ranks were not in, a later rendezvous spanning both would wait forever (HANGs on an H200,
every rank in ``rendezvous``). The fused workspace compares the group's counts first and raises a typed error on
every rank instead; the gate reports a typed construction error as the implementation's failure, not the
harness's."""

from __future__ import annotations

import pytest

import kernel.errors as kerr
from fuzz.case import Case

pytestmark = pytest.mark.multiproc


def test_equal_counts_pass_and_different_counts_raise_on_every_rank(run_ranks):
    same = run_ranks("rendezvous_agreement", 4, {"made": [3, 3, 3, 3]}, timeout=120)
    assert [v["info"]["raised"] for v in same] == [None] * 4
    apart = run_ranks("rendezvous_agreement", 4, {"made": [0, 1, 0, 1]}, timeout=120)  # ranks 1, 3 had a subgroup
    assert [v["info"]["raised"] for v in apart] == ["SymmetricMemoryMismatch"] * 4
    assert all("per group rank: [0, 1, 0, 1]" in v["info"]["message"] for v in apart)


def test_a_typed_construction_error_is_a_failed_check_not_a_harness_error():
    from _in_process import failed_checks, run_on_one_cpu_rank

    class Mismatched:
        def __init__(self, group=None, *, max_M, N, K, device):
            raise kerr.SymmetricMemoryMismatch("planted: counts differ")

    checks = run_on_one_cpu_rank(Mismatched, Case("compute", seed=1, N=64, K=64, max_M=64, ms=[3]))
    [raised] = failed_checks(checks, "call_raised")
    assert "building the instance (max_M=64, N=64, K=64)" in raised.detail
    assert "SymmetricMemoryMismatch: planted: counts differ" in raised.detail


def test_any_exception_of_the_constructor_is_the_implementations_failure():
    """A constructor that crashes on a configuration it does not refuse (RuntimeError from CUDA or torch, a
    KeyError of its own) fails the case with call_raised -- never an ERROR of the harness, which the kill matrix
    would not count."""
    from _in_process import failed_checks, run_on_one_cpu_rank

    class Crashes:
        def __init__(self, group=None, *, max_M, N, K, device):
            raise RuntimeError("planted: CUDA error: an illegal memory access was encountered")

    checks = run_on_one_cpu_rank(Crashes, Case("compute", seed=1, N=64, K=64, max_M=64, ms=[3]))
    [raised] = failed_checks(checks, "call_raised")
    assert "building the instance" in raised.detail and "RuntimeError: planted: CUDA error" in raised.detail
