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
                    extra_env={"_GEMM_RS_TEST_FLAKY_DIR": str(tmp_path)})
    try:
        report, _ = run_confirmed(pool, Case("compute", ms=[55], **SMALL))
    finally:
        pool.close()
    assert pool.starts == 2
    assert report.status == Status.FAILED and report.reproducibility == Reproducibility.FLAKY, report.render()
    assert report.rerun_status == Status.PASSED
    assert {c["name"] for c in report.failed_checks()} >= {"within_tolerance"}
    assert "(FLAKY)" in report.render().splitlines()[0]


def test_a_failure_that_needs_the_pools_history_reproduces_with_it():
    """Two passing cases build two instances; the third case (a third shape, M = 55) fails. Alone on a fresh
    pool it passes, so without the history the failure would be labelled flaky; the confirmation replays the
    failing pool's history first and reproduces it, and the REPRO line carries that history."""
    import subprocess
    import sys

    from fuzz.case import decode_history

    pool = RankPool(PoolSpec(impl="tests.engine.planted_impls:WrongAfterThreeInstances", world_size=2))
    earlier = [Case("compute", ms=[7], seed=1, N=64, K=64, max_M=128),
               Case("compute", ms=[9], seed=2, N=32, K=64, max_M=128)]
    case = Case("compute", ms=[55], seed=3, N=16, K=64, max_M=128)
    try:
        assert all(pool.run(c).passed for c in earlier)
        shown, _ = run_confirmed(pool, case)
        assert shown.status == Status.FAILED and shown.reproducibility == Reproducibility.REPRODUCIBLE
        assert "after replaying the 2 case(s) the pool had run before it" in shown.note
        assert decode_history(shown.repro().split("--history ")[1].split()[0]) == earlier
        assert pool.run(case, fresh=True).passed  # alone on a fresh pool it passes: the history is what fails it
    finally:
        pool.close()
    argv = shown.repro().split()
    proc = subprocess.run([sys.executable, "-m", "fuzz.repro", *argv[argv.index("--impl"):argv.index("--case")],
                           "--case", case.to_json(), "--history", argv[argv.index("--history") + 1]],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "verdict: FAILED" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_a_final_replay_forgets_the_search_failures_of_its_own_pool_only(monkeypatch):
    """Another test's remembered search failure (another pool spec, its final replay still to come) stays: its final
    replay reuses it (one fresh re-run) instead of running the case again first; this spec's stale ones go."""
    import fuzz.gate

    class FakePool:
        def __init__(self, impl):
            self.spec = PoolSpec(impl=impl, world_size=2)

        def run(self, case, **kwargs):
            return type("Passed", (), {"status": Status.PASSED, "history": None})()

    a, b = FakePool("mutants.catalogue:DroppedRankOddM"), FakePool("unfused")
    theirs = (a.spec.key(), Case("compute", ms=[3], **SMALL).to_json())
    stale = (b.spec.key(), Case("compute", ms=[5], **SMALL).to_json())
    monkeypatch.setattr(fuzz.gate, "_SEARCH_FAILURES", {theirs: "a's failure", stale: "b's shrunk-past failure"})
    report, new = run_confirmed(b, Case("compute", ms=[3], **SMALL), phase="final")
    assert new and report.status == Status.PASSED
    assert fuzz.gate._SEARCH_FAILURES == {theirs: "a's failure"}


class _StubPool:
    """A pool whose cases end as told, in turn (no ranks): what ``run_confirmed`` asks of it is recorded."""

    def __init__(self, *statuses: Status):
        self.spec, self.statuses, self.runs = PoolSpec(), list(statuses), []

    def run(self, case, deadline=None, *, fresh=False, replay=None):
        from fuzz.report import CaseReport

        self.runs.append({"fresh": fresh, "replay": replay})
        return CaseReport(case=case, spec=self.spec, status=self.statuses.pop(0), note="stub")


@pytest.mark.parametrize("status", [Status.HANG, Status.DIED, Status.ERROR])
def test_a_hang_a_death_and_a_harness_error_are_rerun_on_a_fresh_pool_and_labelled_like_a_failed_check(status):
    """Every status that fails the gate is confirmed, not only FAILED: a hang that does not come back is FLAKY (the
    host was loaded?), one that does is REPRODUCIBLE -- the label the reader needs for any failure."""
    case = Case("compute", ms=[3], **SMALL)
    for rerun, label in ((status, Reproducibility.REPRODUCIBLE), (Status.PASSED, Reproducibility.FLAKY)):
        pool = _StubPool(status, rerun)
        report, new = run_confirmed(pool, case)
        assert new and report.reproducibility == label and report.rerun_status == rerun
        assert report.status == status and [r["fresh"] for r in pool.runs] == [False, True]


def test_a_replayed_earlier_case_that_hangs_is_the_report_not_the_case_after_it():
    """Replaying a failing pool's history, an earlier case that does not pass -- a hang here, not only a failed check
    -- ends the replay and is what is reported (saying so): the pool it left was killed, so the case after it would
    run on a fresh pool without the history it needs and pass (a FLAKY label for a failure that came back)."""
    pool = RankPool(PoolSpec(impl="mutants.catalogue:HangOnM", world_size=2))
    try:
        report = pool.run(Case("compute", ms=[3], **SMALL), deadline=2, replay=[Case("compute", ms=[77], **SMALL)])
    finally:
        pool.close()
    assert report.status == Status.HANG and report.case.ms == [77], report.render()
    assert "replaying the failing pool's history: earlier case 1 of 1 did not pass" in report.note


def test_a_failing_report_carries_the_last_history_cases_the_pool_ran_not_its_first():
    """Past ``HISTORY_CASES`` cases on one pool, a failure's history (replayed by its confirmation and its REPRO line)
    is the cases just before it -- the state it may need -- not the pool's first ones."""
    from fuzz.pool import HISTORY_CASES

    pool = RankPool(PoolSpec(impl="mutants.catalogue:DroppedRankOddM", world_size=2))
    before = [Case("compute", ms=[2 * (i + 1)], repeat=1, **SMALL) for i in range(HISTORY_CASES + 2)]
    try:
        for case in before:
            assert pool.run(case).passed
        report = pool.run(Case("compute", ms=[3], **SMALL))
    finally:
        pool.close()
    assert report.status == Status.FAILED
    assert [c.ms for c in report.history] == [c.ms for c in before[-HISTORY_CASES:]]
