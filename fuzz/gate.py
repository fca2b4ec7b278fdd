"""The check every fuzz test makes: run a case on a pool, record it, and fail with the full report (exceptions first,
every failed check, stacks, the REPRO line) unless it passed.

A case whose every check was skipped is recorded (with the reasons) and then:

* skipped because of this example (an M the implementation waives, ``per_example``): rejected, so Hypothesis draws
  another and the test still makes its number of *checked* examples — one waived M must not skip the whole test;
* skipped for the whole family (a waived clause: no capacity bound, no graphs): the test is skipped with the
  reason, never counted as passed.

A failing case is re-run once on a fresh pool and labelled reproducible or flaky (:func:`fuzz.verdict.confirm`); the
fresh pool first replays the cases the failing pool had run (its history, up to :data:`fuzz.pool.HISTORY_CASES`), so
a failure that needs what came before — state left by an earlier case, a counter that drifted — reproduces, and its
REPRO line replays the same history. Only the failure Hypothesis reports is re-run, not every failing example of the
search and the shrinking (that would double the cost of shrinking): those are recorded as they are (their pool is
killed and the next example starts a fresh one, nothing more). Hypothesis always replays its final, shrunk failure
once more (``is_final``) before reporting it; that replay *is* the re-run — on a fresh pool, judged against the
failure remembered from the search — so confirming costs no extra case, only the fresh pool. Outside Hypothesis (a
plain call) the re-run follows the failure at once.

A case that failed only because the host cannot build the implementation's main path (every failed check is
``main_path_available``: no cutlass, no GPU the path needs) is a fact of the host, not of the example: the test fails
with the reason, and every later example (Hypothesis's search and shrinking, its final replay) and every later test on
a pool of the same spec fails at once with it, without running a case or starting a pool (:class:`HostCannotBuild`):
each would fail the same way (a gate on a GPU host whose ranks could not import the CuTe DSL spent 8 minutes
failing 486 such cases, a fresh pool after each, before this: 18th session).
"""

from __future__ import annotations

import os

import pytest

from .case import Case
from .pool import RankPool
from .record import record
from .report import CaseReport
from .status import Status
from .verdict import confirm, unbuildable


class FuzzFailure(AssertionError):
    """A case failed; the message holds the exceptions, every failed check, stacks if a rank hung or was
    left blocked, whether the failure reproduced, and the REPRO line."""

    def __init__(self, report: CaseReport):
        super().__init__(report.render())
        self.report = report


#: (pool key, case JSON) -> the failing report of an example Hypothesis is still searching or shrinking
_SEARCH_FAILURES: dict[tuple, CaseReport] = {}
#: Re-run a failure on a fresh pool to label it. Kill sessions (mutants/stop_at_first_failure.py) turn it
#: off: a kill needs the first failure, not its confirmation; the final replay then reports that failure
#: as it was found (unlabelled) instead of starting one more pool per mutant.
CONFIRM_FAILURES = True
#: pool spec key -> the report of the case that showed this host cannot build that implementation's main path
_UNBUILDABLE: dict[tuple, CaseReport] = {}


def hypothesis_phase() -> str:
    """"none" outside a Hypothesis test, "final" in the replay of the failure it reports, else "search"."""
    from hypothesis.control import current_build_context, currently_in_test_context

    if not currently_in_test_context():
        return "none"
    return "final" if current_build_context().is_final else "search"


def run_confirmed(pool: RankPool, case: Case, deadline: float | None = None,
                  phase: str = "none") -> tuple[CaseReport, bool]:
    """Run ``case``; a failure is re-run once on a fresh pool and labelled, except while Hypothesis
    searches (``phase`` "search": remembered, and re-run when Hypothesis replays it as final).
    Returns the report to show and whether it is new (False: the remembered failure, recorded already)."""
    key = (pool.spec.key(), case.to_json())
    first = _SEARCH_FAILURES.pop(key, None) if phase == "final" else None
    if phase == "final":  # the search of this test is over: forget the examples it shrank past
        for stale in [k for k in _SEARCH_FAILURES if k[0] == key[0]]:
            del _SEARCH_FAILURES[stale]
    if first is not None and not CONFIRM_FAILURES:
        return first, False
    report = pool.run(case, deadline=deadline, fresh=first is not None,
                      replay=first.history if first is not None else None)
    if first is not None:
        return confirm(first, report), True
    if report.status.ok:
        return report, True
    if phase == "search":
        _SEARCH_FAILURES[key] = report
        return report, True
    if not CONFIRM_FAILURES:
        return report, True
    return confirm(report, pool.run(case, deadline=deadline, fresh=True, replay=report.history)), True


class HostCannotBuild(FuzzFailure):
    """The host cannot build the implementation's main path (:func:`unbuildable`): the first case that showed it,
    and every later example or test on a pool of the same spec, which fails with it without running a case."""

    def __init__(self, report: CaseReport, first: bool):
        AssertionError.__init__(self, (
            f"the main path of {report.spec.impl!r} cannot be built on this host"
            f"{'' if first else f' (shown by an earlier {report.case.family} case on this pool spec, REPRO below)'}:"
            f" every case of {report.spec.impl!r} on {report.spec.topology} W={report.spec.world_size} here fails "
            f"the same way, so none after it runs (a fact of the host, not of the example)\n{report.render()}"))
        self.report = report


def _fail_unbuildable(report: CaseReport, first: bool) -> None:
    raise HostCannotBuild(report, first)  # one raise site: Hypothesis sees one failure, however it was reached


def check_case(pool: RankPool, case: Case, deadline: float | None = None) -> None:
    known = _UNBUILDABLE.get(pool.spec.key())
    if known is not None:
        _fail_unbuildable(known, first=False)
    report, new = run_confirmed(pool, case, deadline, hypothesis_phase())
    if new:
        record(report, os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0])
    if unbuildable(report):
        _SEARCH_FAILURES.pop((pool.spec.key(), case.to_json()), None)
        _UNBUILDABLE[pool.spec.key()] = report
        _fail_unbuildable(report, first=True)  # the examples Hypothesis tries after it fail without a case
    if report.status == Status.SKIPPED:
        if any(c.get("extra", {}).get("per_example") for c in report.skipped_checks()):
            from hypothesis import reject

            reject()
        pytest.skip(report.note.strip())
    if not report.passed:
        raise FuzzFailure(report)
