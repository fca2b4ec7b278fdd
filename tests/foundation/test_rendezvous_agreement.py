"""torch numbers its symmetric-memory rendezvous store exchanges per process, not per group: after an instance on
a subgroup that other ranks were not in, a later rendezvous spanning both would wait forever (HANGs on an H200,
every rank in ``rendezvous``). The fused workspace compares the group's counts first; a rank behind catches up
alone, and if it cannot, a typed error on every rank; the gate reports a typed construction error as the
implementation's failure, not the harness's."""

from __future__ import annotations

import pytest

import kernel.errors as kerr
from fuzz.case import Case

pytestmark = pytest.mark.multiproc


def test_counts_align_on_a_group_of_ones_own_or_raise_on_every_rank(run_ranks):
    """In one pool of 4 gloo ranks, in turn: equal counts make no catch-up; ranks 1 and 3 had a subgroup
    instance, so ranks 0 and 2 each make the missing rendezvous alone (on a one-rank group only they created)
    and every rank ends at the same count; uneven counts catch up by the difference, also where rank 0 is among
    the ranks ahead (a comparison of one rank's count with the most, not of the fewest, makes no catch-up there:
    the ranks behind then wait in the rendezvous forever); a rank whose catch-up fails makes every rank raise
    SymmetricMemoryMismatch (never a hang)."""
    scenarios = [{"made": [3, 3, 3, 3]}, {"made": [0, 1, 0, 1]}, {"made": [2, 5, 4, 5]},
                 {"made": [0, 1, 0, 1], "solo_fails_on": 2}, {"made": [5, 2, 4, 5]}]
    per_rank = [v["info"] for v in run_ranks("rendezvous_agreement", 4, {"scenarios": scenarios}, timeout=120)]
    same, apart, uneven, failed, rank0_ahead = ([r[i] for r in per_rank] for i in range(5))
    assert [(v["raised"], v["solo"], v["after"]) for v in same] == [(None, 0, 3)] * 4
    assert [(v["raised"], v["solo"], v["after"]) for v in apart] == [(None, 1, 1), (None, 0, 1), (None, 1, 1),
                                                                      (None, 0, 1)]
    assert [v["solo"] for v in uneven] == [3, 0, 1, 0] and {v["after"] for v in uneven} == {5}
    assert [v["raised"] for v in failed] == ["SymmetricMemoryMismatch"] * 4
    assert [(v["raised"], v["solo"], v["after"]) for v in rank0_ahead] == [(None, 0, 5), (None, 3, 5), (None, 1, 5),
                                                                            (None, 0, 5)]
    assert all("per group rank: [0, 1, 0, 1]" in v["message"] and "after: [1, 1, -1, 1]" in v["message"]
               for v in failed)
    assert "planted: the catch-up rendezvous failed" in failed[2]["message"]


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
