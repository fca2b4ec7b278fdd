"""The mutation meta-test (issue 4): the fuzz suite must FAIL on every planted-bug implementation of
mutants/catalogue.py and PASS on the correct one, at the optimize level this test runs under (CI runs
the whole test suite twice: plain and PYTHONOPTIMIZE=1, so both levels are covered), plus the
capacity-as-assert mutant at the other level too (it must die under both).

CI part: Hypothesis ``ci`` profile, each mutant at its catalogue world sizes (W=2), two runs in parallel
(~3-5 min per optimize level on 2 cores). Nightly part (``HYPOTHESIS_PROFILE=nightly`` or
``GEMM_RS_MUTATION_NIGHTLY=1``): the nightly profile, W = 2, 3, 4, both optimize levels. The same matrix
from a shell: ``python -m mutants.meta [--optimize 0|1|both] [--profile ci|nightly] [--only NAME]``.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
from pathlib import Path

import pytest

from kernel.unfused import UnfusedGemmRs
from mutants import catalogue, meta

REPO = Path(__file__).resolve().parents[2]
NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly" or os.environ.get("GEMM_RS_MUTATION_NIGHTLY") == "1"


# --- the catalogue itself (fast) ------------------------------------------------------------------------

def test_catalogue_has_at_least_16_documented_mutants():
    names = [s.name for s in catalogue.CATALOGUE]
    assert len(names) >= 16 and len(set(names)) == len(names)
    for name in names:
        cls = getattr(catalogue, name)
        assert issubclass(cls, UnfusedGemmRs), name
        doc = inspect.getdoc(cls) or ""
        assert len(doc) > 60, f"{name}: the docstring must name the real bug class it models"
    for name in catalogue.ENGINE_FIXTURES:  # the engine's own tests load these by name
        assert issubclass(getattr(catalogue, name), UnfusedGemmRs)
        assert name not in names


def test_the_only_bare_assert_in_mutants_is_the_planted_one():
    hits = []
    for path in sorted((REPO / "mutants").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            hits += [(path.name, cls.name) for n in ast.walk(cls) if isinstance(n, ast.Assert)]
        top = sum(isinstance(n, ast.Assert) for n in ast.walk(tree))
        assert top == sum(1 for p, _ in hits if p == path.name), f"{path.name}: assert outside a mutant class"
    assert hits == [("catalogue.py", "CapacityAsAssert")]


def test_classify_takes_the_first_failing_case_record():
    rows = [
        {"test": "fuzz/test_gemm_rs.py::test_compute[m-cpu-W2]", "status": "passed", "checks": [], "time": 1},
        {"test": "fuzz/test_gemm_rs.py::test_compute[m-cpu-W2]", "status": "failed", "time": 2, "repro": "R",
         "checks": [{"name": "within_tolerance", "passed": True, "skipped": False},
                    {"name": "padded_rows_untouched", "passed": False, "skipped": False}]},
        {"test": "fuzz/test_gemm_rs.py::test_compute[m-cpu-W2]", "status": "failed", "time": 3, "checks": []},
    ]
    out = meta.Outcome("M", 0, "ci", "fail", "ERROR", "2", returncode=1)
    meta._classify(out, rows, "", timed_out=False)
    assert (out.verdict, out.test, out.caught_by, out.examples, out.repro) == (
        "KILLED", "test_compute[W2]", "padded_rows_untouched", 2, "R")
    survived = meta.Outcome("M", 0, "ci", "fail", "ERROR", "2", returncode=0)
    meta._classify(survived, rows[:1], "", timed_out=False)
    assert survived.verdict == "SURVIVED" and not survived.ok
    broken = meta.Outcome("M", 0, "ci", "fail", "ERROR", "2", returncode=4)
    meta._classify(broken, [], "collection error", timed_out=False)
    assert broken.verdict == "ERROR" and not broken.ok  # a harness failure is not a kill
    hung = meta.Outcome("M", 0, "ci", "fail", "ERROR", "2", returncode=1)
    meta._classify(hung, [dict(rows[0], status="hang")], "", timed_out=False)
    assert hung.caught_by == "hang" and hung.ok


# --- the matrix (multi-process) ---------------------------------------------------------------------------

def _check(outcomes, record_property) -> None:
    text = meta.render(outcomes)
    record_property("kill_matrix", text)
    print("\n" + text)
    killed, total = meta.kill_rate(outcomes)
    bad = [f"{o.name} -O{o.optimize}: {o.verdict}" for o in outcomes if not o.ok]
    assert not bad and killed == total, "the suite has no teeth here:\n" + "\n".join(bad) + "\n\n" + text


@pytest.mark.multiproc
def test_kill_matrix_ci(record_property):
    """Every mutant killed, the correct implementation green, at this process's optimize level."""
    outcomes = meta.run_matrix(meta.targets(profile="ci"), (sys.flags.optimize,), "ci", jobs=2)
    _check(outcomes, record_property)


@pytest.mark.multiproc
def test_capacity_assert_killed_at_the_other_optimize_level(record_property):
    """The assert-as-capacity-check mutant dies with and without -O (AssertionError is not
    CapacityError; under -O the check is gone)."""
    other = 1 - min(sys.flags.optimize, 1)
    target = next(t for t in meta.targets(["CapacityAsAssert"], include_correct=False))
    _check([meta.run_one(target, other, "ci")], record_property)


@pytest.mark.slow
@pytest.mark.multiproc
@pytest.mark.skipif(not NIGHTLY, reason="nightly part: set HYPOTHESIS_PROFILE=nightly or GEMM_RS_MUTATION_NIGHTLY=1")
def test_kill_matrix_nightly(record_property):
    """Nightly profile, W = 2, 3, 4, both optimize levels."""
    outcomes = meta.run_matrix(meta.targets(profile="nightly"), (0, 1), "nightly", jobs=2)
    _check(outcomes, record_property)


def test_gpu_matrix_targets_the_fault_injected_builds_on_shared_gpu():
    from mutants.dimension_faults import WRAPPER_CATALOGUE
    from mutants.kernel_faults import GPU_CATALOGUE
    from mutants.meta import command, targets

    tgts = targets(gpu=True)
    assert tgts[0].impl == "fused" and tgts[0].must == "pass"
    assert {t.impl for t in tgts[1:]} == {s.impl for s in GPU_CATALOGUE + WRAPPER_CATALOGUE}
    assert all(t.topology == "shared-gpu" for t in tgts)
    cmd = command(tgts[1], 1)
    assert cmd[cmd.index("--topology") + 1] == "shared-gpu" and "-O" in cmd
