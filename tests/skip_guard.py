"""The suite's own skips, held to the reasons its tests give (a pytest plugin, registered by the root conftest.py).

A test of ``tests/`` may skip only for a reason written in ``tests/``: no CUDA GPU, no sm_90 GPU, no CuTe DSL, another
toolchain than the pinned PTX's, the nightly part, no gdb, the host's set-up (:data:`REASONS`). Any other skip fails
the run, named with its reason. Without this, a skip the code under test raised inside a test went through as a skip:
the 39th session's verdict-path audit planted ``check_case`` turning a hung, dead or broken case into
``pytest.skip`` -- and the three tests written to catch exactly that were *skipped*, not failed
(``pytest.raises(FuzzFailure)`` does not catch pytest's ``Skipped``), the suite green. Those three now fail on a skip
themselves; this holds every other test of the suite to the same.

The gate's tests (``fuzz/``) skip for many reasons of their own (W = 1 has no peer, a family off this topology, ...),
each named in the gate's summary: they are not held here.
"""

from __future__ import annotations

import re

import pytest

#: Where the held tests live (test ids relative to the rootdir).
HELD = "tests/"

#: The reasons a test of ``tests/`` gives for a skip (``skipif`` marks, ``pytest.skip``, ``importorskip``).
REASONS = re.compile("|".join((
    r"needs a CUDA GPU",
    r"needs an sm_90 GPU",
    r"nvidia-cutlass-dsl is not installed",
    r"reference PTX hashes taken with nvidia-cutlass-dsl",
    r"nightly part: ",
    r"needs gdb",
    r"the repository does not lint clean now",
    r"checks the project's \.venv",
    r"this host runs the system python",
    r"this host has a GPU topology",
    r"could not import '",  # pytest.importorskip
)))


def skip_reason(report) -> str:
    """The reason of a skipped test's report (``longrepr``: ``(path, line, "Skipped: reason")``)."""
    longrepr = report.longrepr
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def unexpected(report) -> str | None:
    """The reason of a held test's skip that no test of ``tests/`` gives, else None."""
    if not report.skipped or hasattr(report, "wasxfail") or not report.nodeid.startswith(HELD):
        return None
    reason = skip_reason(report)
    return None if REASONS.match(reason) else reason


class SkipGuard:
    def __init__(self):
        self.found: list[tuple[str, str]] = []

    def pytest_runtest_logreport(self, report):
        reason = unexpected(report)
        if reason is not None:
            self.found.append((report.nodeid, reason))

    def pytest_terminal_summary(self, terminalreporter):
        if self.found:
            terminalreporter.section("skips no test of tests/ gives (tests/skip_guard.py): the run fails", red=True)
            for nodeid, reason in self.found:
                terminalreporter.line(f"{nodeid}: {reason}")

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        if self.found and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_configure(config):
    """Register the guard where the reports are judged: the xdist controller, or a run without xdist."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(SkipGuard(), "gemm-rs-skip-guard")
