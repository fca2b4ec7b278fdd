"""The verdict rules: the ranks' result messages (and what the liveness watchdog saw) -> one
:class:`~fuzz.status.Status`; a failing case re-run on a fresh pool -> reproducible or flaky.

The driver alone decides; ranks never agree on a verdict among themselves. In order:

1. an exception escaped ``run_case`` on some rank           -> ERROR  (the harness broke: nothing judged)
2. a check failed on some rank (``call_raised`` included:  -> FAILED (a property caught the implementation)
   a valid call raised; ``device_fault``: the GPU reported a
   fault after the implementation's calls)
3. the watchdog: a rank gave no result by the deadline      -> HANG; a rank process exited -> DIED
4. a rank gave no result, or ran no check                    -> ERROR  (nothing to judge it by)
5. every check skipped (each with its reason)                -> SKIPPED
6. otherwise                                                 -> PASSED

A rank whose exception (1, or a failed ``call_raised``) broke the collective schedule may leave its
peers blocked in a collective with it, and so may a rank whose check failed (it may have skipped a
collective): once a result settles the case as a failure, the pool waits only :data:`GRACE_S` for the others
(:func:`settles_failure`), collects every rank's stack and kills the pool; rule 1 or 2 still names the
exception or the failed check, not a hang.
"""

from __future__ import annotations

import dataclasses

from .report import CaseReport
from .status import Reproducibility, Status

#: The per-call check an implementation fails when a valid call raises (its traceback in ``detail``).
RAISED_CHECK = "call_raised"
#: The failed checks with which a rank left its case mid-way: a valid call raised, or the GPU reported a fault after
#: the implementation's calls (properties/device_fault.py).
LEFT_MID_CASE = (RAISED_CHECK, "device_fault")
#: The check every case of an implementation fails where the host cannot build its main path (properties/path.py).
HOST_CHECK = "main_path_available"
#: Seconds the driver waits for the other ranks once one rank's result made the case a failure.
GRACE_S = 5.0


def unbuildable(report: CaseReport) -> bool:
    """The case failed only because the host cannot build the implementation's main path: a plain FAILED (no hang,
    death or exception), every failed check on every rank :data:`HOST_CHECK`. A fact of the host, not of the case:
    every other case of that implementation on that pool spec fails the same way (fuzz/gate.py stops there)."""
    return report.status == Status.FAILED and not report.errors() and only_the_host_failed(report.failed_checks())


def only_the_host_failed(failed: list[dict]) -> bool:
    """``failed`` (the failed checks of a case, every rank's) are all :data:`HOST_CHECK`, and there is one."""
    return bool(failed) and all(c.get("name") == HOST_CHECK for c in failed)


def settles_failure(msg: dict) -> str | None:
    """Why a rank's result already makes its case a failure: "raised", or "failed <check>" (rule 1 or 2 stays the
    verdict whatever else arrives; an exception of another rank within the grace period makes it ERROR). The others
    then get :data:`GRACE_S` to report: a rank that failed may have left the collective schedule (skipped a
    collective, e.g. a rank with no rows returning early) and its peers blocked in it -- waiting out the case
    deadline would only delay the verdict."""
    if breaks_schedule(msg):
        return "raised"
    name = next((c["name"] for c in msg.get("checks", []) if not c["passed"] and not c["skipped"]), None)
    return f"failed {name}" if name else None


def breaks_schedule(msg: dict) -> bool:
    """A rank's result that may leave its peers stuck in a collective: it raised mid-case (an implementation call,
    or a fault the GPU reported after one: ``device_fault``)."""
    return bool(msg.get("error")) or any(c["name"] in LEFT_MID_CASE and not c["passed"] and not c["skipped"]
                                         for c in msg.get("checks", []))


def judge(ranks: dict[int, dict], world_size: int, liveness: Status | None = None) -> tuple[Status, str]:
    """The status of a case from the results that arrived (``ranks``: rank -> result message) and the
    watchdog's finding (HANG or DIED, else None); the second item says why when it is not obvious."""
    if liveness not in (None, Status.HANG, Status.DIED):
        raise ValueError(f"liveness is HANG, DIED or None, not {liveness!r}")
    errors = sorted(r for r, m in ranks.items() if m.get("error"))
    if errors:
        return Status.ERROR, f"harness error: an exception escaped run_case on rank(s) {errors}"
    checks = [c for m in ranks.values() for c in m.get("checks", [])]
    failed = [c for c in checks if not c["passed"] and not c["skipped"]]
    if failed and liveness == Status.DIED and all(c["name"] in LEFT_MID_CASE for c in failed):
        # peers whose collective raised because a rank died: the death is the finding, whoever reported first
        return liveness, ""
    if failed:
        return Status.FAILED, ""
    if liveness is not None:
        return liveness, ""
    missing = sorted(set(range(world_size)) - set(ranks))
    if missing:
        return Status.ERROR, f"no result from rank(s) {missing}"
    idle = sorted(r for r, m in ranks.items() if not m.get("checks"))
    if idle:
        return Status.ERROR, f"rank(s) {idle} ran no check"
    if all(c["skipped"] for c in checks):
        reasons = "; ".join(sorted({c["detail"] for c in checks}))
        return Status.SKIPPED, f"every check was skipped: {reasons}"
    return Status.PASSED, ""


def confirm(first: CaseReport, rerun: CaseReport) -> CaseReport:
    """A failing case (``first``) and its re-run on a fresh pool -> the report to show: the re-run when the
    failure came back (its REPRO line reproduced it), else the first failure; labelled either way."""
    if first.status.ok:
        raise ValueError(f"only a failing case is confirmed, not a {first.status} one")
    if rerun.status.ok:
        shown = dataclasses.replace(first, reproducibility=Reproducibility.FLAKY, rerun_status=rerun.status)
        after = f" after replaying the {len(first.history)} case(s) the pool had run before it" if first.history else ""
        shown.note = _join(shown.note, f"FLAKY: re-run once on a fresh pool{after}, the case {rerun.status} "
                                       f"({rerun.seconds:.2f}s); the first run's failure is shown")
        return shown
    shown = dataclasses.replace(rerun, reproducibility=Reproducibility.REPRODUCIBLE, rerun_status=rerun.status)
    again = "the same way" if rerun.status == first.status else f"as {rerun.status} (first run: {first.status})"
    after = (f" after replaying the {len(first.history)} case(s) the pool had run before it (the REPRO line "
             f"replays them too)") if first.history else ""
    shown.note = _join(f"REPRODUCIBLE: re-run once on a fresh pool{after}, the case failed again {again}",
                       rerun.note)
    return shown


def _join(*parts: str) -> str:
    return "\n".join(p for p in parts if p)
