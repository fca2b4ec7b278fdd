"""The REPRO line every failure ends with (fuzz/case.py ``repro_command``) reruns exactly that case: the
interpreter's optimize level, the implementation, topology, world size, sanitizer, node count, the case and the
cases the failing pool ran before it -- read back by ``fuzz.repro``'s own argument parser (its pool faked)."""

from __future__ import annotations

import os
import shlex
import sys
import types

import pytest

from fuzz import config
from fuzz import repro as repro_mod
from fuzz.case import Case, PoolSpec, decode_history, repro_command
from fuzz.report import CaseReport
from fuzz.status import Status

CASE = Case("compute", seed=7, N=64, K=64, max_M=96, ms=[5, 96])
EARLIER = Case("graph", seed=3, N=64, K=128, max_M=32, ms=[1])


@pytest.mark.parametrize("optimize, prefix", [(0, "python -m fuzz.repro "), (1, "python -O -m fuzz.repro "),
                                              (2, "python -O -m fuzz.repro ")])
def test_the_line_runs_python_at_the_pools_optimize_level(optimize, prefix):
    # the ranks' optimize level is the driver's (fuzz.repro passes sys.flags.optimize on): an -O failure -- an
    # assert that vanished -- must be rerun under -O, or the REPRO line passes
    assert repro_command(CASE, PoolSpec(optimize=optimize)).startswith(prefix)


@pytest.mark.parametrize("history", [[], [EARLIER], [EARLIER, CASE]])
def test_the_history_is_on_the_line_whatever_its_length(history):
    line = repro_command(CASE, PoolSpec(), history)
    words = shlex.split(line)
    if not history:
        assert "--history" not in words
    else:
        assert decode_history(words[words.index("--history") + 1]) == history


def test_fuzz_repro_reads_back_every_part_of_the_line(monkeypatch):
    # (fuzz.repro gives its pool this interpreter's optimize level: the line's own "-O" is the test above)
    spec = PoolSpec(impl="mutants.catalogue:HangOnM", topology="shared-gpu", world_size=4, optimize=sys.flags.optimize,
                    sanitizer="memcheck", nnodes=2)
    line = repro_command(CASE, spec, [EARLIER])
    runs = _fake_pools(monkeypatch, [Status.PASSED])
    monkeypatch.setattr(config, "_CURRENT", config._CURRENT)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # config.install exports its settings
    words = shlex.split(line)
    assert repro_mod.main(words[words.index("fuzz.repro") + 1:]) == 0
    (got_spec, got_case, _, got_replay), = runs
    assert got_spec == spec and got_case == CASE and got_replay == [EARLIER]


def _fake_pools(monkeypatch, statuses: list[Status]) -> list:
    """``fuzz.repro``'s pools faked (nothing recorded): the n-th run ends ``statuses[n]``. The runs, as (spec,
    case, deadline, replay), are appended to the list returned."""
    runs = []

    class FakePool:
        def __init__(self, spec, gpus=None):
            self.spec = spec

        def run(self, case, deadline=None, replay=None):
            runs.append((self.spec, case, deadline, replay))
            return CaseReport(case=case, spec=self.spec, status=statuses[len(runs) - 1])

        def close(self):
            pass

    monkeypatch.setattr(repro_mod, "RankPool", FakePool)
    monkeypatch.setattr(repro_mod, "record", lambda *a, **k: None)
    return runs


def _run_repro(monkeypatch, argv: list[str], statuses: list[Status], optimize: int | None = None):
    """``fuzz.repro``'s main on ``argv`` with its pools faked (:func:`_fake_pools`). Returns (exit status, the runs
    as (spec, case, deadline, replay)); ``optimize``: the interpreter's level as fuzz.repro reads it."""
    runs = _fake_pools(monkeypatch, statuses)
    if optimize is not None:
        monkeypatch.setattr(repro_mod, "sys", types.SimpleNamespace(flags=types.SimpleNamespace(optimize=optimize)))
    return repro_mod.main(argv + ["--case", CASE.to_json()]), runs


@pytest.mark.parametrize("optimize", [0, 1, 2])
def test_fuzz_repro_runs_its_ranks_at_its_own_optimize_level(monkeypatch, own_settings, optimize):
    # the REPRO line of an -O failure says "python -O": the ranks must run at -O too, or a vanished assert is back
    rc, runs = _run_repro(monkeypatch, ["--impl", "unfused", "--world-sizes", "2"], [Status.PASSED], optimize)
    assert rc == 0 and [spec.optimize for spec, *_ in runs] == [optimize]


@pytest.mark.parametrize("statuses", [[Status.FAILED, Status.PASSED, Status.PASSED, Status.PASSED],
                                      [Status.PASSED, Status.PASSED, Status.PASSED, Status.HANG],
                                      [Status.PASSED, Status.SKIPPED, Status.PASSED, Status.PASSED]])
def test_fuzz_repro_exits_0_only_when_every_implementation_and_world_size_passed(monkeypatch, own_settings, statuses):
    rc, runs = _run_repro(monkeypatch, ["--impl", "unfused,mutants.catalogue:HangOnM", "--world-sizes", "2,4"],
                          statuses)
    assert [(spec.impl, spec.world_size) for spec, *_ in runs] == [
        ("unfused", 2), ("unfused", 4), ("mutants.catalogue:HangOnM", 2), ("mutants.catalogue:HangOnM", 4)]
    assert rc == 1


@pytest.mark.parametrize("status", list(Status))
def test_fuzz_repro_prints_the_case_s_own_status(monkeypatch, own_settings, capsys, status):
    # a skipped case is no pass, a hang no plain failure: the verdict line says which
    rc, _ = _run_repro(monkeypatch, ["--world-sizes", "2"], [status])
    assert f"verdict: {status.upper()}" in capsys.readouterr().out.splitlines()
    assert rc == (0 if status == Status.PASSED else 1)


def test_fuzz_repro_gives_its_pool_the_case_deadline_asked(monkeypatch, own_settings):
    _, runs = _run_repro(monkeypatch, ["--world-sizes", "2", "--case-deadline", "7"], [Status.PASSED])
    assert [deadline for _, _, deadline, _ in runs] == [7.0]
