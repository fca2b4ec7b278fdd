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
3. A combination's tests run in the order ``$_GEMM_RS_KILL_ORDER`` gives for its implementation (JSON:
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
    from fuzz.config import KILL_ORDER_ENV

    first = json.loads(os.environ.get(KILL_ORDER_ENV) or "{}")

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
    from fuzz.config import current

    root = current().report_dir
    if root:
        message = failure_message(report) if report.failed or report.skipped else ""
        line = {"test": item.nodeid, "gate": list(gate), "when": report.when, "outcome": report.outcome,
                "duration": report.duration, "message": message}
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(os.path.join(root, f"outcomes-{worker}.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
    return report


def failure_message(report) -> str:
    """What a failed (or skipped) test raised, in one line: pytest's crash line (the exception and its message)
    where the report has one, else the first telling line of its text (:func:`first_line`)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = (getattr(crash, "message", "") or "").strip()
    if message:
        return message.splitlines()[0][:300]
    return first_line(str(report.longrepr or ""))


def first_line(text: str) -> str:
    """The telling line of a failure's text: among pytest's exception lines (``E   ...``) first -- a long
    traceback also lists the source of the failing function, whose other ``raise SomeError(...)`` lines are not
    what was raised (a kill matrix ERROR once named a pool check that had not failed) -- then any line."""
    lines = text.splitlines()
    raised = [ln[1:].strip() for ln in lines if ln.startswith("E ")]
    for group in (raised, [ln.strip() for ln in lines]):
        for ln in group:
            if ln.startswith(("GEMM-RS fuzz case", "Failed:", "Skipped:")) or "Error" in ln:
                return ln[:300]
    if raised:
        return raised[0][:300]
    return text.strip().splitlines()[-1][:300] if text.strip() else ""
