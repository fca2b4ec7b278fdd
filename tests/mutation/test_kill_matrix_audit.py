"""The kill matrix's tooling, guarded against the plants of the 2026-12-06c audit (docs/evidence/
2026-12-06c-mutants-sanitize-audit/) that CI let through: ``--optimize both`` running one level, a -O0 driver
under a -O1 session read as a kill at -O1, a kill rate that counts non-kills, a combination whose setup failure did
not stop it, a GPU mutant's spec or class dropped from its matrix, a wrapper mutant that does not force the fused
path, a split-K fault build no longer run at W = 1, a kill session reading the project's example database. All fast,
on the CPU."""

from __future__ import annotations

import inspect
import json

import pytest

from fuzz import config
from mutants import meta
from tests.mutation.test_kill_matrix import FINE, RIGHT, _outcome
from tests.mutation.test_kill_matrix_verdicts import (  # noqa: F401 -- isolated_main: a fixture
    CORRECT,
    _at,
    _o,
    _Started,
    isolated_main,
    run_plugin_tests,
)


@pytest.mark.parametrize("flag, levels", [(None, (0, 1)), ("both", (0, 1)), ("0", (0,)), ("1", (1,))])
def test_optimize_both_runs_both_levels(isolated_main, flag, levels):  # noqa: F811 -- the imported fixture
    """``python -m mutants.meta`` (the nightly ``ci/kill-matrix``) runs -O0 and -O1 unless told one: a matrix at -O1
    only never runs the assert mutant where its assert is there (CapacityAsAssert at -O0)."""
    argv = ["--impl", "DroppedRankOddM"] + (["--optimize", flag] if flag else [])
    meta.main(argv)
    (call,) = isolated_main
    assert tuple(call[1]) == levels


def test_a_kill_by_a_minus_O0_driver_is_no_kill_at_minus_O1():
    """A -O1 session whose driver ran at -O0 (``driver_optimize`` 0: falsy, but a level) learned nothing at -O1."""
    target = meta.Target("CapacityAsAssert", "mutants.catalogue:M", (2,), "fail", expected=("capacity_rejected",))
    rows = [_at("passed", 1, 0, [1, 1], pool=1, checks=[RIGHT]),
            _at("failed", 2, 0, [1, 1], pool=1, checks=[{"name": "capacity_rejected", "passed": False,
                                                        "skipped": False}])]
    o = meta.classify(target, 1, "ci", rows, [_outcome("failed")], FINE)
    assert o.verdict == meta.Verdict.ERROR and not o.ok, o
    assert "asked for -O1" in o.detail and "driver ran at -O0" in o.detail, o.detail
    done = meta.SessionResult(0, False, 600, "", 1.0)
    control = meta.classify(CORRECT, 1, "ci", [_at("passed", 1, 0, [1, 1], pool=1, checks=[RIGHT],
                                                   test="fuzz/test_gemm_rs.py::test_compute[unfused-cpu-W2]")],
                            [_outcome("passed", test="fuzz/test_gemm_rs.py::test_compute[unfused-cpu-W2]")], done)
    assert control.verdict != meta.Verdict.PASSED and not control.ok, control


def test_the_kill_rate_counts_kills_only():
    """An ERROR (harness) or a race survivor is listed, never counted as killed in the rate the matrix prints."""
    outcomes = [_o("A", "fail", meta.Verdict.KILLED), _o("B", "fail", meta.Verdict.ERROR),
                _o("C", "fail", meta.Verdict.SURVIVED), _o("unfused (correct)", "pass", meta.Verdict.PASSED)]
    assert meta.kill_rate(outcomes) == (1, 3)
    assert "kill rate: 1/3" in meta.render(outcomes)


def test_a_setup_failure_stops_its_combination(tmp_path):
    """The plugin's point 2 for a failure outside the call: a test whose setup failed (a pool that did not start)
    stops its combination like a caught case, so a later test cannot turn that harness failure into a kill."""
    # the failing setup first
    proc, lines = run_plugin_tests(tmp_path, **{config.KILL_ORDER_ENV: json.dumps({"unfused": ["test_layers"]})})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert [ln["test"].split("::")[-1].split("[")[0] for ln in lines][0] == "test_layers", lines
    compute = [ln for ln in lines if "test_compute" in ln["test"] and ln["when"] == "setup"]
    assert [ln["outcome"] for ln in compute] == ["skipped"], lines
    assert "already caught by" in compute[0]["message"] and "test_layers" in compute[0]["message"], compute


def test_every_wrapper_mutant_class_is_a_gpu_matrix_row_or_control():
    """A WrapperMutantSpec deleted from WRAPPER_CATALOGUE (its class left behind) would leave the GPU matrix without
    it, unseen: every wrapper class of mutants.dimension_faults is a row or a GPU_EXTRA_CONTROLS control, once."""
    from mutants import dimension_faults

    classes = {name for name, c in vars(dimension_faults).items() if inspect.isclass(c)
               and issubclass(c, dimension_faults._WrapperFault) and not name.startswith("_")}
    listed = [s.name for s in dimension_faults.WRAPPER_CATALOGUE] + list(meta.GPU_EXTRA_CONTROLS)
    assert len(classes) >= 10
    assert sorted(listed) == sorted(classes)
    gpu = {t.name.split(" (")[0] for t in meta.targets(profile="ci", gpu=True)}
    assert classes <= gpu


@pytest.mark.parametrize("name", ["FusedOnItsOwnStream", "FusedSideStreamNoWait", "FusedCallerDoesNotWait"])
def test_wrapper_mutants_force_the_fused_path(name):
    """Like the kernel's fault builds (tests/kernel/test_fault_builds.py): a wrapper mutant that fell back to the
    unfused path where the fused one cannot run would survive for the wrong reason -- on a CPU it must raise
    (FusedLyingFallback's bug is that fallback: not here)."""
    import torch

    from kernel.errors import FusedPathUnavailable
    from mutants import dimension_faults

    impl = getattr(dimension_faults, name)(max_M=64, N=64, K=128, device="cpu")
    assert impl.force_fused
    with pytest.raises(FusedPathUnavailable):
        impl(torch.zeros(8, 128, dtype=torch.bfloat16), torch.zeros(64, 128, dtype=torch.bfloat16))
    impl.close()


def test_the_split_k_fault_builds_run_at_w_1_too():
    """The W == 1 split-K GEMM is built with the split-K switches (mutants.kernel_faults): those whose bug shows
    without peers run at W = 1 as well as 2, in both profiles (unwaited_slices' owners need W > 1)."""
    from kernel.fused.config import FAULT_PROTOCOL
    from mutants.kernel_faults import GPU_CATALOGUE

    split_k = {s.fault for s in GPU_CATALOGUE if FAULT_PROTOCOL[s.fault][1].startswith("split-K")}
    assert split_k == {"dropped_part", "bf16_parts", "unordered_part_signal", "unwaited_slices"}
    at_one = {s.fault for s in GPU_CATALOGUE if 1 in s.world_sizes}
    assert at_one == split_k - {"unwaited_slices"}
    for profile in ("ci", "nightly"):
        sizes = {w for t in meta.targets(["FusedDroppedPart"], profile, include_correct=False, gpu=True)
                 for w in t.world_sizes}
        assert {1, 2} <= sizes, profile


def test_a_kill_session_reads_and_writes_no_example_database(monkeypatch, tmp_path):
    """``GEMM_RS_HYPOTHESIS_DB=none`` in every kill session, whatever the caller set: a kill replayed from what an
    earlier run stored (Phase.reuse is on in kill sessions) is no kill of this suite's draws, and planted bugs'
    failing examples must not land in the project's database."""
    seen = {}

    def popen(cmd, **kw):
        seen.update(env=kw["env"])
        raise _Started

    db = config.BY_NAME["hypothesis_db"].env
    monkeypatch.setenv(db, str(tmp_path / "examples"))
    monkeypatch.setattr(meta.tempfile, "mkdtemp", lambda **k: str(tmp_path))
    monkeypatch.setattr(meta.subprocess, "Popen", popen)
    with pytest.raises(_Started):
        meta.run_session([CORRECT], 0)
    assert seen["env"][db] == "none"
    assert seen["env"]["HYPOTHESIS_PROFILE"] == "ci"
