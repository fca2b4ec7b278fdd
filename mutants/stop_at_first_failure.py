"""pytest plugin for kill sessions (``-p mutants.stop_at_first_failure``): one pytest session (one
process, ``-n 0``) runs the fuzz suite against many implementations (``--impl a,b,c``), one
(implementation, topology, W) combination after the other, and each of them stops at its first catch.

1. The active Hypothesis profile (``ci`` or ``nightly``: same examples, same derandomization) minus the
   shrink, target and explain phases: a kill needs the first failing example, not a minimal one
   (shrinking a multi-rank case costs tens to hundreds of cases, each on a fresh pool; a hang costs the
   case deadline each time). Nor a confirmed one: when Hypothesis replays that example as its final
   failure, the gate reports the failure it found instead of re-running it on one more fresh pool
   (``fuzz.gate.CONFIRM_FAILURES``).
2. A combination's first failing test stops it: its later tests are skipped ("already caught by ...")
   instead of ``-x`` stopping the whole session.
3. A combination's tests run in the order ``$GEMM_RS_KILL_ORDER`` gives for its implementation (JSON:
   impl -> test names to run first; the kill matrix puts first the tests of the properties the catalogue
   expects to catch it), the others after them in file order: the same tests, cheaper to the first catch
   (a mutant only bad calls catch does not wait for 52 passing compute and capacity cases first).
4. Every test's outcome is appended, as it happens, as one JSON line per phase to
   ``$GEMM_RS_REPORT_DIR/outcomes-<worker>.jsonl`` (test id, gate, phase, outcome, duration, message):
   the kill matrix reads it beside the case records, and it survives a session killed for time.
"""

from __future__ import annotations

import json
import os

import pytest

#: gate -> the test that caught it
_CAUGHT: dict[tuple, str] = {}


def pytest_configure(config):
    # After the root conftest loaded the profile, before the test modules are imported (their
    # @settings(...) take the loaded profile as parent at import).
    from hypothesis import Phase, settings

    from fuzz import gate
    from fuzz.settings import PROFILE

    name = f"{PROFILE}-stop-at-first-failure"
    settings.register_profile(name, parent=settings.get_profile(PROFILE),
                              phases=[Phase.explicit, Phase.reuse, Phase.generate])
    settings.load_profile(name)
    gate.CONFIRM_FAILURES = False


def _gate(item) -> tuple | None:
    callspec = getattr(item, "callspec", None)
    gate = callspec.params.get("gate") if callspec is not None else None
    return tuple(gate) if gate is not None else None


def pytest_collection_modifyitems(config, items):
    first = json.loads(os.environ.get("GEMM_RS_KILL_ORDER") or "{}")

    def rank(item) -> int:
        gate = _gate(item)
        wanted = first.get(gate[0], []) if gate else []
        name = getattr(item, "originalname", item.name)
        return wanted.index(name) if name in wanted else len(wanted)

    start = 0
    while start < len(items):  # reorder within each run of one combination's tests, keeping the runs
        end = start
        while end < len(items) and _gate(items[end]) == _gate(items[start]):
            end += 1
        items[start:end] = sorted(items[start:end], key=rank)
        start = end


def pytest_runtest_setup(item):
    gate = _gate(item)
    if gate in _CAUGHT:
        pytest.skip(f"stopped: {gate[0]} ({gate[1]}, W={gate[2]}) already caught by {_CAUGHT[gate]}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    gate = _gate(item)
    if gate is None:
        return report
    if report.failed:
        _CAUGHT.setdefault(gate, item.nodeid)
    root = os.environ.get("GEMM_RS_REPORT_DIR")
    if root:
        text = str(report.longrepr or "") if report.failed or report.skipped else ""
        line = {"test": item.nodeid, "gate": list(gate), "when": report.when, "outcome": report.outcome,
                "duration": report.duration, "message": _first_line(text)}
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(root, f"outcomes-{worker}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
    return report


def _first_line(text: str) -> str:
    for ln in text.splitlines():
        ln = ln.strip().removeprefix("E").strip()
        if ln.startswith(("GEMM-RS fuzz case", "Failed:", "Skipped:")) or "Error" in ln:
            return ln[:300]
    return text.strip().splitlines()[-1][:300] if text.strip() else ""
