"""The mutation meta-test (issue 4): the fuzz suite must FAIL on every planted-bug implementation of
mutants/catalogue.py and PASS on the correct one, at the optimize level this test runs under (``.ci/run``
runs it in its PYTHONOPTIMIZE=1 pass, as users run the gate; ``./ci/test`` alone at the level it is given), plus
the capacity-as-assert mutant at the other level too (it must die under both: the one mutant whose bug depends on
the level). A mutant is KILLED only by
a failed property or the liveness watchdog; harness errors, broken sessions and timeouts are ERROR.

CI part: Hypothesis ``ci`` profile, each mutant at its catalogue world sizes (W=2), two runs in parallel
(~3-5 min per optimize level on 2 cores). Nightly part (``HYPOTHESIS_PROFILE=nightly`` or
``GEMM_RS_PROFILE=nightly``): the nightly profile, W = 2, 3, 4, both optimize levels. The same matrix
from a shell: ``python -m mutants.meta [--optimize 0|1|both] [--profile ci|nightly] [--only NAME]``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import os
import sys
from pathlib import Path

import pytest

from fuzz.config import current
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue, meta

REPO = Path(__file__).resolve().parents[2]
NIGHTLY = os.environ.get("HYPOTHESIS_PROFILE") == "nightly" or current().profile == "nightly"


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


def test_expected_properties_are_machine_readable():
    names = {"within_tolerance", "oracle_within_tolerance", "bitwise_equal", "nonfinite_pattern_matches",
             "padded_rows_untouched", "guard_regions_untouched", "repeatable", "fresh_per_call", "returns_out",
             "capacity_rejected", "bad_call_rejected", "inputs_changed_in_place", "no_systematic_bias",
             "batch_invariant", "hang", "died"}
    for s in catalogue.CATALOGUE:
        assert isinstance(s.expected, tuple) and s.expected, s.name
        assert all(e.isidentifier() for e in s.expected), s.name
    assert {e for s in catalogue.CATALOGUE for e in s.expected} & names  # the names of real checks
    with pytest.raises(TypeError):
        catalogue.MutantSpec("X", (2,), "within_tolerance (in words)")
    with pytest.raises(TypeError):
        catalogue.MutantSpec("X", (2,), ("within_tolerance",), tests="test_compute")
    import fuzz.test_gemm_rs as gate_tests

    for s in catalogue.CATALOGUE:  # a named test exists
        assert all(callable(getattr(gate_tests, t, None)) for t in s.tests), s.name


TEST = "fuzz/test_gemm_rs.py::test_compute[mutants.catalogue:M-cpu-W2]"
TARGET = meta.Target("M", "mutants.catalogue:M", (2,), "fail", expected=("within_tolerance",))
FINE = meta.SessionResult(returncode=1, timed_out=False, timeout=600, text="", wall_s=1.0)


def _case(status, t, checks=(), test=TEST, **more):
    return {"test": test, "status": status, "time": t, "repro": f"R{t}", "checks": list(checks), **more}


def _outcome(outcome, test=TEST, when="call", message=""):
    return {"test": test, "gate": ["mutants.catalogue:M", "cpu", 2], "when": when, "outcome": outcome,
            "duration": 2.0, "message": message}


def _classify(rows, lines, target=TARGET, session=FINE):
    return meta.classify(target, 0, "ci", rows, lines, session)


WRONG = {"name": "within_tolerance", "passed": False, "skipped": False}
RIGHT = {"name": "repeatable", "passed": True, "skipped": False}


def test_a_failed_property_is_a_kill_and_names_the_test_properties_and_examples():
    rows = [_case("passed", 1, [RIGHT]), _case("failed", 2, [RIGHT, WRONG, WRONG]),
            _case("failed", 3, [WRONG], reproducibility="reproducible")]
    o = _classify(rows, [_outcome("failed")])
    assert (o.verdict, o.test, o.caught_by, o.examples, o.repro, o.reproducibility) == (
        meta.Verdict.KILLED, "test_compute[W2]", ("within_tolerance",), 2, "R2", "reproducible")
    assert o.ok and o.as_expected is True
    other = _classify(rows, [_outcome("failed")], meta.Target("M", "mutants.catalogue:M", (2,), "fail",
                                                               expected=("padded_rows_untouched",)))
    assert other.verdict == meta.Verdict.KILLED and other.as_expected is False
    assert "MISMATCH M -O0: caught by within_tolerance, expected padded_rows_untouched" in meta.render([other])


def test_a_strict_row_killed_by_none_of_its_expected_properties_fails_the_matrix():
    rows = [_case("failed", 1, [WRONG])]
    strict = meta.Target("M", "mutants.catalogue:M", (2,), "fail", expected=("padded_rows_untouched",), strict=True)
    o = _classify(rows, [_outcome("failed")], strict)
    assert o.verdict == meta.Verdict.KILLED and o.as_expected is False and not o.ok
    text = meta.render([o])
    assert "MISMATCH M -O0: caught by within_tolerance, expected padded_rows_untouched (fails the matrix)" in text
    assert "1 of them fail the matrix" in text
    right = _classify(rows, [_outcome("failed")], dataclasses.replace(strict, expected=("within_tolerance", "hang")))
    assert right.ok and right.as_expected is True
    hint = _classify(rows, [_outcome("failed")], dataclasses.replace(strict, strict=False))  # the GPU's words
    assert hint.ok and hint.as_expected is False and "(fails the matrix)" not in meta.render([hint])


def test_the_cpu_catalogue_at_the_ci_profile_is_strict_and_the_others_are_not():
    cpu = [t for t in meta.targets(profile="ci") if t.must == "fail"]
    assert cpu and all(t.strict for t in cpu)
    assert not any(t.strict for t in meta.targets(profile="nightly"))  # random draws: listed, not failed
    gpu = [t for t in meta.targets(gpu=True) if t.must == "fail"]
    assert gpu and not any(t.strict for t in gpu)
    assert not any(t.strict for t in meta.targets(profile="ci") if t.must == "pass")


@pytest.mark.parametrize("status", ["hang", "died"])
def test_the_liveness_watchdog_kills(status):
    o = _classify([_case(status, 1)], [_outcome("failed")])
    assert o.verdict == meta.Verdict.KILLED and o.caught_by == (status,)


def test_a_harness_error_is_never_a_kill():
    row = _case("error", 1, errors={"0": "Traceback ...\nImportError: no module named nope"})
    o = _classify([row], [_outcome("failed")])
    assert o.verdict == meta.Verdict.ERROR and not o.ok
    assert "harness error in test_compute[W2]: rank 0 raised: ImportError: no module named nope" in o.detail
    assert "ERROR (harness, not a kill)" in meta.render([o])
    # a rank's error ends with its call trail (fuzz/families/calls.py): the exception is what the matrix shows
    trail = "calls this rank began in the case:\n  call0 M=800 group rank 0/2 expected path fused"
    row = _case("error", 1, errors={"0": f"Traceback ...\nRuntimeError: gloo timed out\n{trail}",
                                    "2": f"Traceback ...\nRuntimeError: gloo timed out\n{trail}"})
    o = _classify([row], [_outcome("failed")])
    assert o.detail == "harness error in test_compute[W2]: ranks [0, 2] raised: RuntimeError: gloo timed out"


def test_a_host_that_cannot_build_the_main_path_kills_nothing():
    host = {"name": "main_path_available", "passed": False, "skipped": False,
            "detail": "the main path 'fused' cannot be built on this host: nvidia-cutlass-dsl is not importable"}
    o = _classify([_case("failed", 1, [RIGHT, host])], [_outcome("failed")])
    assert o.verdict == meta.Verdict.ERROR and not o.ok
    assert "cannot build the implementation's main path" in o.detail and "not importable" in o.detail
    assert "ERROR (harness, not a kill)" in meta.render([o])
    beside = _classify([_case("failed", 1, [host, WRONG])], [_outcome("failed")])  # a real failure beside it
    assert beside.verdict == meta.Verdict.KILLED
    correct = meta.Target("fused (correct)", "fused", (2,), "pass")
    test = "fuzz/test_gemm_rs.py::test_compute[fused-cpu-W2]"
    assert _classify([_case("failed", 1, [host], test=test)], [_outcome("failed", test=test)],
                     correct).verdict == meta.Verdict.FAILED


@pytest.mark.parametrize("session, lines, why", [
    (meta.SessionResult(4, False, 600, "usage", 1.0), [_outcome("failed")], "pytest exited 4"),
    (meta.SessionResult(3, False, 600, "INTERNALERROR", 1.0), [_outcome("failed")], "pytest exited 3"),
    (meta.SessionResult(None, True, 600, "", 1.0), [_outcome("passed")], "ran past its 600s limit"),
    (FINE, [], "no test of this target ran"),
    (FINE, [_outcome("failed", when="setup", message="PoolError: pool did not start")],
     "test failed without a failing case: test_compute[W2]: error (PoolError: pool did not start)"),
])
def test_a_broken_session_is_an_error_not_a_kill_nor_a_survivor(session, lines, why):
    o = _classify([_case("passed", 1, [RIGHT])], lines, session=session)
    assert o.verdict == meta.Verdict.ERROR and why in o.detail, o.detail


def test_a_caught_case_whose_test_pytest_did_not_fail_is_an_error():
    o = _classify([_case("failed", 1, [WRONG])], [_outcome("passed")])
    assert o.verdict == meta.Verdict.ERROR and "but pytest did not fail" in o.detail


def test_survived_needs_a_passed_case_and_every_test_passed_or_skipped():
    o = _classify([_case("passed", 1, [RIGHT])], [_outcome("passed"), _outcome("skipped", test=TEST + "x")])
    assert o.verdict == meta.Verdict.SURVIVED and not o.ok
    nothing = _classify([_case("skipped", 1)], [_outcome("passed")])
    assert nothing.verdict == meta.Verdict.ERROR and "nothing checked" in nothing.detail


def test_the_correct_implementation_passes_only_when_everything_passed():
    correct = meta.Target("unfused (correct)", "unfused", (2,), "pass")
    test = "fuzz/test_gemm_rs.py::test_compute[unfused-cpu-W2]"
    ok = _classify([_case("passed", 1, [RIGHT], test=test)], [_outcome("passed", test=test)], correct,
                   meta.SessionResult(0, False, 600, "", 1.0))
    assert ok.verdict == meta.Verdict.PASSED and ok.ok
    bad = _classify([_case("failed", 1, [WRONG], test=test)], [_outcome("failed", test=test)], correct)
    assert bad.verdict == meta.Verdict.FAILED and not bad.ok


def test_records_of_other_targets_are_not_mixed_in():
    other = "fuzz/test_gemm_rs.py::test_compute[mutants.catalogue:MM-cpu-W2]"
    o = _classify([_case("failed", 1, [WRONG], test=other), _case("passed", 2, [RIGHT])],
                  [_outcome("failed", test=other), _outcome("passed")])
    assert o.verdict == meta.Verdict.SURVIVED and o.cases == 1


def test_a_mutant_s_expected_properties_pick_which_tests_run_first():
    order = meta.kill_order(meta.targets(["CapacityAsAssert", "WorkQueuedBeforeCheck", "DroppedRankOddM"]))
    assert order == {"mutants.catalogue:CapacityAsAssert": ["test_capacity"],
                     "mutants.catalogue:WorkQueuedBeforeCheck": ["test_capacity", "test_bad_call"],
                     "mutants.catalogue:DroppedRankOddM": ["test_compute"]}  # the correct one: file order
    # an implementation that declares kernel paths has them called first (a fixed call each: the cheapest catch)
    order = meta.kill_order(meta.targets(["RarePathKPartDropped"]))
    assert order == {"mutants.catalogue:RarePathKPartDropped": ["test_kernel_paths", "test_compute"]}
    # one that keeps a call counter has its two wrap cases first
    order = meta.kill_order(meta.targets(["EpochZeroReused"]))
    assert order == {"mutants.catalogue:EpochZeroReused": ["test_counter_wrap", "test_compute"]}
    # a row that names a fixed test has it run before its properties' tests
    order = meta.kill_order(meta.targets(["GemvFlatResult"]))
    assert order == {"mutants.catalogue:GemvFlatResult": ["test_smallest_shapes", "test_compute"]}


def test_sessions_share_the_work_and_keep_world_size_sets_apart():
    tgts = meta.targets(profile="ci")
    sessions = meta._sessions(tgts, "ci", 2)
    # the sessions carry the very targets (run_matrix keys its outcomes by their names and world sizes)
    assert sorted((t.name, t.world_sizes) for s in sessions for t in s) == sorted((t.name, t.world_sizes) for t in tgts)
    assert all(len({t.world_sizes for t in s}) == 1 for s in sessions)  # one set of W per session
    groups = {}
    for t in tgts:
        groups[t.world_sizes] = groups.get(t.world_sizes, 0) + 1
    # each set of W dealt over at most 2 jobs; W = 4 (one mutant, its row naming its fixed test): one session
    assert len(sessions) == sum(min(2, n) for ws, n in groups.items() if ws != (4,)) + 1
    # a control at each set of W, in the sessions of that set, running the same tests
    assert sorted(t.world_sizes for s in sessions for t in s if t.must == "pass") == [(2,), (4,)]
    (w4,) = [s for s in sessions if s[0].world_sizes == (4,)]
    assert {t.name for t in w4} == {"unfused (correct) W=4 (test_shard_boundaries only)", "EmptyRankNegativeRowCount"}
    assert {t.scope for t in w4} == {("test_shard_boundaries",)}
    assert meta.command(w4, 1)[-2:] == ["-k", "test_shard_boundaries"]
    assert all(t.scope == () for s in sessions if s is not w4 for t in s)  # W = 2: every test of fuzz/
    nightly = meta._sessions(meta.targets(profile="nightly"), "nightly", 2)
    assert all(len({t.world_sizes for t in s}) == 1 for s in nightly)
    assert all(t.scope == () for s in nightly for t in s)  # every mutant at every W: every test
    cmd = meta.command(sessions[0], 1)
    assert cmd[1] == "-O" and cmd[cmd.index("-n") + 1] == "0" and "mutants.stop_at_first_failure" in cmd


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


@pytest.mark.multiproc
def test_an_implementation_the_ranks_cannot_load_is_an_error_not_a_kill(record_property):
    """End to end: every case of a target whose module does not exist ends ERROR (a harness error on every
    rank), so the target is ERROR — the suite did not catch anything."""
    target = meta.Target("Missing", "tests.engine.planted_impls:DoesNotExist", (2,), "fail",
                         expected=("within_tolerance",))
    o = meta.run_one(target, sys.flags.optimize, "ci")
    record_property("outcome", repr(o))
    assert o.verdict == meta.Verdict.ERROR and not o.ok, meta.render([o])
    assert "harness error" in o.detail and "DoesNotExist" in o.detail, o.detail


@pytest.mark.slow
@pytest.mark.multiproc
@pytest.mark.skipif(not NIGHTLY, reason="nightly part: set HYPOTHESIS_PROFILE=nightly or GEMM_RS_PROFILE=nightly")
def test_kill_matrix_nightly(record_property):
    """Nightly profile, W = 2, 3, 4, both optimize levels."""
    outcomes = meta.run_matrix(meta.targets(profile="nightly"), (0, 1), "nightly", jobs=2)
    _check(outcomes, record_property)


def test_gpu_matrix_targets_the_fault_injected_builds_on_shared_gpu():
    """The fused kernel's fault builds and wrapper mutants against the fused control at each of their world-size
    sets; the unfused path's GPU-only mutants (its host staging) against the unfused control -- a kill next to a
    control of another implementation would say nothing about the harness on that implementation."""
    from mutants.catalogue import GPU_UNFUSED_CATALOGUE
    from mutants.dimension_faults import WRAPPER_CATALOGUE
    from mutants.kernel_faults import GPU_CATALOGUE
    from mutants.meta import command, targets

    tgts = targets(gpu=True)
    controls = [t for t in tgts if t.must == "pass"]
    mutants = [t for t in tgts if t.must == "fail"]
    fused = {s.impl for s in GPU_CATALOGUE + WRAPPER_CATALOGUE}
    for correct, impls in (("fused", fused), ("unfused", {s.impl for s in GPU_UNFUSED_CATALOGUE})):
        mine = [t for t in mutants if t.impl in impls]
        assert sorted(t.world_sizes for t in controls if t.impl == correct) == sorted({t.world_sizes for t in mine})
    assert {t.impl for t in controls} == {"fused", "unfused", "mutants.dimension_faults:FusedOnItsOwnStream"}
    (own,) = [t for t in controls if "FusedOnItsOwnStream" in t.impl]
    assert own.world_sizes == (2,) and own.topology == "shared-gpu" and own.must == "pass"
    assert not [t for t in targets(["FusedDroppedPeer"], gpu=True) if "OwnStream" in t.impl]  # asked for by name only
    assert [t.must for t in targets(["FusedOnItsOwnStream"], gpu=True)] == ["pass"]
    assert {t.impl for t in mutants} == fused | {s.impl for s in GPU_UNFUSED_CATALOGUE}
    assert "StagingOnDefaultDevice" in {t.name for t in mutants}
    only = targets(["FusedDroppedPeer"], gpu=True)  # one fused mutant: its control only
    assert {t.impl for t in only if t.must == "pass"} == {"fused"}
    assert all(t.topology == "shared-gpu" for t in tgts)
    assert all(t.expected for t in mutants)  # the GPU catalogue's words, read as property names
    cmd = command(mutants[:1], 1)
    assert cmd[cmd.index("--topology") + 1] == "shared-gpu" and "-O" in cmd


def test_a_gpu_race_survivor_is_named_not_killed_and_only_a_named_race_may_survive():
    """A fault build whose bug is a race ranks time-slicing one GPU rarely open may survive the GPU matrix without
    failing it -- listed SURVIVED, out of the kill rate's numerator, its static check named -- and only those: any
    other survivor, an ERROR or a failed control still fails it. Every race names a test of the pinned PTX checks
    that exists."""
    import re

    from mutants.kernel_faults import GPU_CATALOGUE

    raced = [s for s in GPU_CATALOGUE if s.race]
    assert {s.fault for s in raced} == {"relaxed_signal", "epoch_order_signed", "unordered_part_signal",
                                        "unwaited_slices", "consumer_fence_missing", "early_signal",
                                        "done_wait_skipped"}
    static = open(os.path.join(meta.REPO, "tests", "kernel", "test_fault_builds.py")).read()
    for s in raced:
        named = re.findall(r"\btest_\w+", s.race)
        assert named and all(f"def {t}(" in static for t in named), (s.name, named)
    import dataclasses

    tgts = {t.name: t for t in meta.targets(gpu=True)}
    assert tgts["FusedPushEarlySignal"].race and not tgts["FusedDroppedPeer"].race
    race_target = dataclasses.replace(TARGET, name="FusedPushEarlySignal", race=tgts["FusedPushEarlySignal"].race)
    survived = _classify([_case("passed", 1, [RIGHT])], [_outcome("passed")], race_target)
    plain = _classify([_case("passed", 1, [RIGHT])], [_outcome("passed")], TARGET)
    assert survived.verdict == plain.verdict == meta.Verdict.SURVIVED
    assert survived.ok and not plain.ok
    error = _classify([_case("error", 1, errors={"0": "Traceback ...\nValueError: x"})], [_outcome("failed")],
                      race_target)
    assert error.verdict == meta.Verdict.ERROR and not error.ok  # a race excuses survival only, never an error
    text = meta.render([survived, plain])
    assert "kill rate: 0/2" in text and "1 survived a race ranks time-slicing one GPU rarely open" in text
    assert "RACE FusedPushEarlySignal -O0: SURVIVED, not a kill -- " in text and "test_early_signal_raises" in text
