"""A case report as text, in the order a reader needs it:

1. one line: status, case, pool, time (and REPRODUCIBLE / FLAKY once the case was re-run);
2. exceptions first: a harness error's traceback, or an implementation's valid call that raised
   (``call_raised``), per rank, type, message and traceback;
3. the note (why the status, what the watchdog saw, the re-run);
4. every other failed check, located (worst element, index, rank, budget);
5. the stacks of every rank (hang, died, or peers left in a collective by a rank that raised), their
   log tails;
6. the REPRO line.
"""

from __future__ import annotations

from properties.result import CheckResult

from .report import CaseReport
from .verdict import RAISED_CHECK


def render_check(c: dict, rank: int | None = None) -> str:
    """A recorded check (``CheckResult.to_json``) rendered as the checker renders it; ``rank``: the rank
    that sent it, when the check itself does not say."""
    fields = {k: v for k, v in c.items() if k in CheckResult.__dataclass_fields__}
    fields["worst_index"] = tuple(c["worst_index"]) if c.get("worst_index") else None
    if fields.get("rank") is None:
        fields["rank"] = rank
    return CheckResult(**fields).render()


def render_report(report: CaseReport, max_failures: int = 6) -> str:
    spec = report.spec
    label = f" ({report.reproducibility.upper()})" if report.reproducibility else ""
    lines = [f"GEMM-RS fuzz case {report.status.upper()}{label}: {report.case.short()} "
             f"[impl={spec.impl} topology={spec.topology} W={spec.world_size} optimize={spec.optimize}] "
             f"in {report.seconds:.2f}s"]
    for rank, tb in report.errors().items():
        lines.append(f"rank {rank} raised (harness error, nothing judged):\n{tb.rstrip()}")
    failed = []
    for rank, c in report.checks():
        if c["passed"] or c["skipped"]:
            continue
        if c["name"] == RAISED_CHECK:
            lines.append(f"rank {rank}: a valid call raised ({RAISED_CHECK}):\n{c['detail'].rstrip()}")
        else:
            failed.append((rank, c))
    if report.note.strip():
        lines.append(report.note.strip())
    for i, (rank, c) in enumerate(failed):
        if i == max_failures:
            lines.append(f"... and {len(failed) - max_failures} more failed checks")
            break
        lines.append(render_check(c, rank))
    for rank, text in sorted(report.stacks.items()):
        lines.append(f"--- rank {rank} stacks ---\n{text.rstrip()}")
    for rank, text in sorted(report.logs.items()):
        if text.strip():
            lines.append(f"--- rank {rank} log (tail) ---\n{text.rstrip()}")
    lines.append(f"REPRO: {report.repro()}")
    return "\n".join(lines)
