"""How a case ended, and whether a failure came back when the case was run again.

One enum for every module that reads or writes a case's outcome (pool, verdict, gate, record, summary,
campaign, differential, sanitize, the kill matrix). The values are the strings the JSON records have
always held (docs/REPORT.md), so ``Status("failed")`` reads an old record and ``json.dumps`` writes the
same text.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    PASSED = "passed"    # every check ran on every rank and held
    FAILED = "failed"    # a check failed (including ``call_raised``: a valid call raised)
    SKIPPED = "skipped"  # every check was skipped, each with its reason (never counted as passed)
    HANG = "hang"        # a rank gave no result before the case deadline (the liveness watchdog)
    DIED = "died"        # a rank process exited mid-case
    ERROR = "error"      # the harness broke (an exception escaped run_case, nothing checked): not a verdict

    @property
    def ok(self) -> bool:
        """The case does not fail the gate."""
        return self in (Status.PASSED, Status.SKIPPED)

    @property
    def caught(self) -> bool:
        """The implementation was caught: a property failed it or the liveness watchdog did."""
        return self in (Status.FAILED, Status.HANG, Status.DIED)


class Reproducibility(StrEnum):
    """A failing case re-run once on a fresh pool: failed again, or passed."""

    REPRODUCIBLE = "reproducible"
    FLAKY = "flaky"
