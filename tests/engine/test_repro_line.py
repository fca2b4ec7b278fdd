"""The REPRO line every failure ends with (fuzz/case.py ``repro_command``) reruns exactly that case: the
interpreter's optimize level, the implementation, topology, world size, sanitizer, node count, the case and the
cases the failing pool ran before it -- read back by ``fuzz.repro``'s own argument parser (its pool faked)."""

from __future__ import annotations

import os
import shlex
import sys

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
    runs = []

    class FakePool:
        def __init__(self, spec, gpus=None):
            self.spec = spec

        def run(self, case, deadline=None, replay=None):
            runs.append((self.spec, case, replay))
            return CaseReport(case=case, spec=self.spec, status=Status.PASSED)

        def close(self):
            pass

    monkeypatch.setattr(repro_mod, "RankPool", FakePool)
    monkeypatch.setattr(repro_mod, "record", lambda *a, **k: None)
    monkeypatch.setattr(config, "_CURRENT", config._CURRENT)
    monkeypatch.setattr(os, "environ", dict(os.environ))  # config.install exports its settings
    words = shlex.split(line)
    assert repro_mod.main(words[words.index("fuzz.repro") + 1:]) == 0
    (got_spec, got_case, got_replay), = runs
    assert got_spec == spec and got_case == CASE and got_replay == [EARLIER]
