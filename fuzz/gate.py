"""The check every fuzz test makes: run a case on a pool, record it, and fail with the full report
(every failed check, stacks of hung ranks, the REPRO line) unless it passed."""

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
        pytest.skip(report.note.strip())
    if not report.passed:
        raise FuzzFailure(report)
