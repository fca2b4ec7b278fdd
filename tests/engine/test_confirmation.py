"""A failing case is re-run once on a fresh pool and labelled reproducible or flaky (fuzz/gate.py): not
while Hypothesis searches and shrinks (remembered only), but when it replays its final failure; at once
outside Hypothesis."""

from __future__ import annotations

import pytest

from fuzz.case import Case, PoolSpec
from fuzz.gate import run_confirmed
from fuzz.pool import RankPool
from fuzz.status import Reproducibility, Status

pytestmark = pytest.mark.multiproc

SMALL = dict(seed=1, N=64, K=64, max_M=256)


def test_search_failures_are_not_rerun_and_the_final_replay_is_the_rerun_on_a_fresh_pool():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:DroppedRankOddM", world_size=2))
    case = Case("compute", ms=[3], **SMALL)
    try:
        searched, new = run_confirmed(pool, case, phase="search")
        assert new
        assert searched.status == Status.FAILED and searched.reproducibility is None
        assert pool.starts == 1 and not pool.alive  # killed after the failure, not re-run
        assert run_confirmed(pool, Case("compute", ms=[4], **SMALL), phase="search")[0].passed  # next example
        final, new = run_confirmed(pool, case, phase="final")
        assert new
        assert pool.starts == 3  # the final replay ran on a fresh pool, not the one the passing example used
        assert final.status == Status.FAILED and final.reproducibility == Reproducibility.REPRODUCIBLE
        assert final.rerun_status == Status.FAILED and final.repro() == searched.repro()
        assert "REPRODUCIBLE: re-run once on a fresh pool, the case failed again the same way" in final.render()
    finally:
        pool.close()


def test_kill_sessions_report_the_final_failure_as_found_without_another_pool(monkeypatch):
    import fuzz.gate

    monkeypatch.setattr(fuzz.gate, "CONFIRM_FAILURES", False)
    pool = RankPool(PoolSpec(impl="mutants.catalogue:DroppedRankOddM", world_size=2))
    case = Case("compute", ms=[3], **SMALL)
    try:
        searched, _ = run_confirmed(pool, case, phase="search")
        final, new = run_confirmed(pool, case, phase="final")
    finally:
        pool.close()
    assert final is searched and not new and final.reproducibility is None
    assert pool.starts == 1


def test_a_failure_that_passes_on_a_fresh_pool_is_labelled_flaky(tmp_path):
    pool = RankPool(PoolSpec(impl="tests.engine.planted_impls:WrongOnFirstRun", world_size=2),
                    extra_env={"GEMM_RS_TEST_FLAKY_DIR": str(tmp_path)})
    try:
        report, _ = run_confirmed(pool, Case("compute", ms=[55], **SMALL))
    finally:
        pool.close()
    assert pool.starts == 2
    assert report.status == Status.FAILED and report.reproducibility == Reproducibility.FLAKY, report.render()
    assert report.rerun_status == Status.PASSED
    assert {c["name"] for c in report.failed_checks()} >= {"within_tolerance"}
    assert "(FLAKY)" in report.render().splitlines()[0]
