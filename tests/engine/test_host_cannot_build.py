"""A host that cannot build an implementation's main path (fuzz/gate.py, ``HostCannotBuild``): the first case that
shows it fails the test with the reason, and no other case runs for that pool spec -- not Hypothesis's further
examples, its shrinking or final replay, nor the next test -- each fails at once with the same report. A case with
any other failure beside it is a plain failure, searched and shrunk as ever."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fuzz.gate
from fuzz.case import Case, PoolSpec
from fuzz.gate import FuzzFailure, HostCannotBuild, check_case
from fuzz.pool import RankPool
from fuzz.report import CaseReport
from fuzz.status import Status
from fuzz.verdict import unbuildable

pytestmark = pytest.mark.multiproc

SMALL = dict(seed=1, N=64, K=64, max_M=256)
PLANTED = "tests.engine.planted_impls:NoMainPathOnThisHost"


@pytest.fixture(autouse=True)
def _fresh_memory(monkeypatch):
    monkeypatch.setattr(fuzz.gate, "_UNBUILDABLE", {})
    monkeypatch.setattr(fuzz.gate, "_SEARCH_FAILURES", {})


def _counting(pool: RankPool) -> list[Case]:
    ran: list[Case] = []
    real = pool.run

    def run(case, **kw):
        ran.append(case)
        return real(case, **kw)

    pool.run = run
    return ran


def test_one_case_shows_it_and_no_other_example_or_test_runs_one():
    pool = RankPool(PoolSpec(impl=PLANTED, world_size=2))
    ran = _counting(pool)
    tried = []

    @settings(max_examples=20, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(m=st.integers(1, 200))
    def fuzz_test(m):
        tried.append(m)
        check_case(pool, Case("compute", ms=[m], **SMALL), deadline=120)

    try:
        with pytest.raises(HostCannotBuild) as info:
            fuzz_test()
        assert len(ran) == 1 and pool.starts == 1  # the first example's case, on the pool's first start
        assert len(tried) > 1  # Hypothesis tried more (shrinking, the final replay): none of them ran a case
        text = str(info.value)
        assert "cannot be built on this host" in text and "libfast is not importable (planted)" in text
        assert "REPRO: python" in text and f"--impl {PLANTED}" in text
        # the next test on the same spec: fails at once, no case, no pool started
        other = RankPool(PoolSpec(impl=PLANTED, world_size=2))
        other_ran = _counting(other)
        with pytest.raises(HostCannotBuild, match="shown by an earlier compute case"):
            check_case(other, Case("graph", ms=[3], **SMALL))
        assert other_ran == [] and other.starts == 0
    finally:
        pool.close()


def _report(*failed_names, status=Status.FAILED, error=None):
    checks = [{"name": n, "passed": False, "skipped": False, "detail": "x", "extra": {}} for n in failed_names]
    ranks = {0: {"type": "result", "id": 0, "error": error, "checks": checks},
             1: {"type": "result", "id": 0, "error": None, "checks": checks[:1]}}
    return CaseReport(case=Case("compute", ms=[3], **SMALL), spec=PoolSpec(), status=status, ranks=ranks)


def test_only_a_failure_of_the_main_path_check_alone_is_the_hosts():
    assert unbuildable(_report("main_path_available"))
    assert not unbuildable(_report("main_path_available", "within_tolerance"))  # a real failure beside it
    assert not unbuildable(_report("within_tolerance"))
    assert not unbuildable(_report("main_path_available", status=Status.HANG))
    assert not unbuildable(_report("main_path_available", error="Traceback ...\nRuntimeError: x\n"))
    assert not unbuildable(_report(status=Status.FAILED))  # nothing failed: nothing to blame on the host
    beside_a_skip = _report("main_path_available")  # a check skipped with its reason is no failure beside it
    beside_a_skip.ranks[1]["checks"].append({"name": "batch_invariant", "passed": False, "skipped": True,
                                             "detail": "waived", "extra": {}})
    assert unbuildable(beside_a_skip)


def test_a_real_failure_is_still_an_ordinary_failure_and_remembered_nowhere():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:DroppedRankOddM", world_size=2))
    try:
        with pytest.raises(FuzzFailure) as info:
            check_case(pool, Case("compute", ms=[3], **SMALL), deadline=120)
        assert not isinstance(info.value, HostCannotBuild)
        assert fuzz.gate._UNBUILDABLE == {}
    finally:
        pool.close()
