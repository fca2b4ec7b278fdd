"""Case records for the gate's report: when --report-dir (GEMM_RS_REPORT_DIR) is set, every case report is appended as
one JSON line to ``$GEMM_RS_REPORT_DIR/cases-<worker>.jsonl`` (one file per xdist worker, no locking).
The fields are listed in docs/REPORT.md."""

from __future__ import annotations

import json
import os
import sys
import time

from .config import current
from .phases import slowest_rank
from .report import CaseReport


def case_row(report: CaseReport, test_id: str = "") -> dict:
    return {
        "time": time.time(),
        "test": test_id,
        "impl": report.spec.impl,
        "topology": report.spec.topology,
        "world_size": report.spec.world_size,
        "optimize": report.spec.optimize,
        "driver_optimize": sys.flags.optimize,
        "case": json.loads(report.case.to_json()),
        "status": report.status,
        "reproducibility": report.reproducibility,
        "rerun_status": report.rerun_status,
        "seconds": report.seconds,
        "phases": slowest_rank(report.ranks),
        "note": report.note,
        "checks": [dict(c, rank=r) for r, c in report.checks()],
        "paths": {str(r): calls for r, calls in report.paths().items()},
        "rank_optimize": {str(r): m.get("optimize") for r, m in report.ranks.items()},
        "rank_mps": {str(r): m.get("mps") for r, m in report.ranks.items()},
        "errors": {str(r): tb for r, tb in report.errors().items()},
        "stacks": {str(r): text for r, text in (report.stacks or {}).items()},
        "logs": {str(r): text for r, text in (report.logs or {}).items() if text.strip()},
        "repro": report.repro(),
    }


def record(report: CaseReport, test_id: str = "") -> None:
    root = current().report_dir
    if not root:
        return
    os.makedirs(root, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(os.path.join(root, f"cases-{worker}.jsonl"), "a") as f:
        f.write(json.dumps(case_row(report, test_id), allow_nan=True) + "\n")


#: The test ids a gate session collected (after -k and deselection), one per line, in its report folder: the
#: campaign's progress line reads its estimate of the cases to come from it (fuzz.campaign.expected_cases).
COLLECTED = "collected.txt"


def record_collected(test_ids: list[str]) -> None:
    """Write :data:`COLLECTED` (every xdist worker collects the same tests: whichever writes last, whole)."""
    root = current().report_dir
    if not root:
        return
    os.makedirs(root, exist_ok=True)
    tmp = os.path.join(root, f".{COLLECTED}.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write("".join(t + "\n" for t in test_ids))
    os.replace(tmp, os.path.join(root, COLLECTED))
