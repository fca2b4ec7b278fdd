"""A broken implementation makes the engine fail with a REPRO line that, run as printed, reproduces the
failure. (That the gate shrinks a failure to the minimal case, re-runs it on a fresh pool and reports it
reproducible is checked end to end by tests/ci/test_gate_report.py::test_campaign_end_to_end_on_cpu:
shrinking here would start a fresh pool for every failing example.)"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

import pytest

from fuzz.case import Case, PoolSpec
from fuzz.pool import RankPool
from fuzz.status import Status

pytestmark = pytest.mark.multiproc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def broken_pool():
    # the pool runs at the driver's optimize level, as the gate's pools do, so the REPRO line says -O
    pool = RankPool(PoolSpec(impl="mutants.catalogue:DroppedRankOddM", world_size=2, optimize=sys.flags.optimize))
    yield pool
    pool.close()


def test_repro_line_reproduces_the_failure(broken_pool):
    report = broken_pool.run(Case("compute", seed=0, N=64, K=64, max_M=512, ms=[3]))
    assert report.status == Status.FAILED
    line = report.repro()
    assert line.startswith("python -O -m fuzz.repro " if sys.flags.optimize else "python -m fuzz.repro ")
    argv = shlex.split(line)
    argv[0] = sys.executable
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "within_tolerance" in proc.stdout and "FAILED" in proc.stdout
    assert line in proc.stdout  # the rerun prints the same repro line


def test_repro_of_a_passing_case_exits_zero():
    case = Case("compute", seed=5, N=64, K=64, max_M=512, ms=[3, 100], kind="exact")
    argv = [sys.executable, "-m", "fuzz.repro", "--world-size", "2", "--case", case.to_json()]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=180,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verdict: PASSED" in proc.stdout
