"""What one case run on a pool produced: every rank's result message, how the case ended, and what
reruns it. Built by :class:`fuzz.pool.RankPool`, judged by :mod:`fuzz.verdict`, rendered by
:mod:`fuzz.render`, recorded by :mod:`fuzz.record`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from .case import Case, PoolSpec, repro_command
from .status import Reproducibility, Status

#: The per-call check (fuzz.execute / fuzz.families) naming the path a call ran: ``extra["path"]`` (what
#: ran), ``extra["expected"]`` (what the contract says serves it), ``extra["reason"]`` (why a fallback is
#: legitimate; empty otherwise).
PATH_CHECK = "path_taken"


@dataclass
class CaseReport:
    case: Case
    spec: PoolSpec
    status: Status
    ranks: dict[int, dict] = field(default_factory=dict)   # rank -> its result message
    stacks: dict[int, str] = field(default_factory=dict)
    logs: dict[int, str] = field(default_factory=dict)
    seconds: float = 0.0
    note: str = ""
    #: set when a failing case was re-run once on a fresh pool (fuzz.verdict.confirm)
    reproducibility: Reproducibility | None = None
    rerun_status: Status | None = None
    #: the cases the pool ran before this one since it started (a failing report's; replayed before the
    #: case when it is confirmed or reproduced: a bug that needs what came before still reproduces)
    history: list[Case] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status == Status.PASSED

    def checks(self) -> Iterator[tuple[int, dict]]:
        for rank, msg in sorted(self.ranks.items()):
            for c in msg.get("checks", []):
                yield rank, c

    def failed_checks(self) -> list[dict]:
        return [c for _, c in self.checks() if not c["passed"] and not c["skipped"]]

    def skipped_checks(self) -> list[dict]:
        return [c for _, c in self.checks() if c["skipped"]]

    def property_names(self) -> set[str]:
        return {c["name"] for _, c in self.checks()}

    def errors(self) -> dict[int, str]:
        """rank -> the traceback of an exception that escaped ``run_case`` there (a harness error)."""
        return {r: m["error"] for r, m in sorted(self.ranks.items()) if m.get("error")}

    def paths(self) -> dict[int, list[dict]]:
        """rank -> per call: ``{"path", "expected", "reason"}`` from its ``path_taken`` checks."""
        out: dict[int, list[dict]] = {}
        for rank, c in self.checks():
            if c["name"] == PATH_CHECK and not c["skipped"]:
                extra = c.get("extra", {})
                out.setdefault(rank, []).append({"path": extra.get("path"), "expected": extra.get("expected"),
                                                 "reason": extra.get("reason") or ""})
        return out

    def repro(self) -> str:
        return repro_command(self.case, self.spec, self.history)

    def render(self, max_failures: int = 6) -> str:
        from .render import render_report

        return render_report(self, max_failures=max_failures)
