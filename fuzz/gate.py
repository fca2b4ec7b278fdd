"""The check every fuzz test makes: run a case on a pool, record it, and fail with the full report
(every failed check, stacks of hung ranks, the REPRO line) unless it passed.

A case whose every check was skipped is recorded (with the reasons) and then:
* skipped because of this example (an M the implementation waives, ``per_example``): rejected, so
  Hypothesis draws another and the test still makes its number of *checked* examples — one waived M
  must not skip the whole test;
* skipped for the whole family (a waived clause: no capacity bound, no graphs): the test is skipped with
  the reason, never counted as passed."""

from __future__ import annotations

import os

import pytest

from .case import Case
from .pool import FuzzFailure, RankPool
from .record import record


def check_case(pool: RankPool, case: Case, deadline: float | None = None) -> None:
    report = pool.run(case, deadline=deadline)
    record(report, os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0])
    if report.status == "skipped":
        if any(c.get("extra", {}).get("per_example") for c in report.skipped_checks()):
            from hypothesis import reject

            reject()
        pytest.skip(report.note.strip())
    if not report.passed:
        raise FuzzFailure(report)
