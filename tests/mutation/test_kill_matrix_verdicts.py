"""The kill matrix's own verdicts, guarded against the bugs an audit planted in mutants/meta.py, the
stop-at-first-failure plugin and the catalogue that CI let through: a broken session read as a pass of the
control, an interrupted session as fine, a failed control or an empty matrix exiting 0, an unknown mutant name
shrugged off, a setup error lost by the plugin, a mutant or an expected check name gone missing from the
catalogue, a session that ran at another optimize level than asked. All fast, on the CPU, no rank pool."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys

import pytest

from fuzz import config
from fuzz import expected_checks as checks_module
from fuzz.status import Status
from kernel.unfused import UnfusedGemmRs
from mutants import catalogue, meta
from tests.mutation.test_kill_matrix import FINE, RIGHT, TEST, WRONG, _case, _classify, _outcome

CORRECT = meta.Target("unfused (correct)", "unfused", (2,), "pass")
CORRECT_TEST = "fuzz/test_gemm_rs.py::test_compute[unfused-cpu-W2]"

#: The broken sessions of test_kill_matrix's broken-session test, plus an interrupted one (pytest exit 2):
#: (session, outcome lines as (outcome, when, message), a piece of the detail)
BROKEN = [
    pytest.param(meta.SessionResult(None, True, 600, "", 1.0), [("passed", "call", "")], "ran past its 600s limit",
                 id="timed-out"),
    pytest.param(meta.SessionResult(2, False, 600, "KeyboardInterrupt", 1.0), [("passed", "call", "")],
                 "pytest exited 2", id="interrupted-rc2"),
    pytest.param(meta.SessionResult(3, False, 600, "INTERNALERROR", 1.0), [("failed", "call", "")],
                 "pytest exited 3", id="internal-error-rc3"),
    pytest.param(meta.SessionResult(4, False, 600, "usage", 1.0), [("failed", "call", "")], "pytest exited 4",
                 id="usage-rc4"),
    pytest.param(FINE, [("passed", "setup", ""), ("failed", "setup", "PoolError: pool did not start")],
                 "test failed without a failing case", id="setup-error"),
]


def _lines(spec, test):
    return [_outcome(outcome, test=test, when=when, message=message) for outcome, when, message in spec]


# --- P3 / P4: a broken session is never a pass of the control, nor fine for a mutant -------------------------


@pytest.mark.parametrize("session, lines, why", BROKEN)
def test_a_broken_session_fails_the_control(session, lines, why):
    """The correct implementation's cases all passed, but its session says nothing trustworthy: not PASSED."""
    o = _classify([_case("passed", 1, [RIGHT], test=CORRECT_TEST)], _lines(lines, CORRECT_TEST), CORRECT, session)
    assert o.verdict == meta.Verdict.FAILED and not o.ok, (o.verdict, o.detail)
    assert why in o.detail, o.detail
    assert "correct implementation: -O0 FAILED" in meta.render([o])


@pytest.mark.parametrize("session, lines, why", BROKEN)
def test_a_broken_session_is_an_error_for_a_mutant(session, lines, why):
    o = _classify([_case("passed", 1, [RIGHT])], _lines(lines, TEST), session=session)
    assert o.verdict == meta.Verdict.ERROR and not o.ok, (o.verdict, o.detail)
    assert why in o.detail, o.detail


@pytest.mark.parametrize("rc", [2, 3, 4, 5, -9, None])
def test_only_pytest_exit_0_and_1_are_a_finished_session(rc):
    session = meta.SessionResult(rc, False, 600, "", 1.0)
    o = _classify([_case("passed", 1, [RIGHT])], [_outcome("passed")], session=session)
    assert o.verdict == meta.Verdict.ERROR and f"pytest exited {rc}" in o.detail, o.detail
    c = _classify([_case("passed", 1, [RIGHT], test=CORRECT_TEST)], [_outcome("passed", test=CORRECT_TEST)], CORRECT,
                  session)
    assert c.verdict == meta.Verdict.FAILED and f"pytest exited {rc}" in c.detail, c.detail
    for fine in (0, 1):  # the same records after a finished session: a survivor, a pass
        done = meta.SessionResult(fine, False, 600, "", 1.0)
        assert _classify([_case("passed", 1, [RIGHT])], [_outcome("passed")], session=done).verdict == \
            meta.Verdict.SURVIVED
        assert _classify([_case("passed", 1, [RIGHT], test=CORRECT_TEST)], [_outcome("passed", test=CORRECT_TEST)],
                         CORRECT, done).verdict == meta.Verdict.PASSED


# --- P7 / P8: the exit status ------------------------------------------------------------------------------


@pytest.fixture
def isolated_main(monkeypatch):
    """meta.main installs its settings (this process's config and environment) and a SIGTERM handler: undone."""
    monkeypatch.setattr(config, "_CURRENT", config._CURRENT)
    monkeypatch.setattr(meta.signal, "signal", lambda *a, **k: None)
    saved = dict(os.environ)
    ran = []

    def no_sessions(*a, **k):
        ran.append(a)
        return []

    monkeypatch.setattr(meta, "run_matrix", no_sessions)
    yield ran
    for k in set(os.environ) - set(saved):
        del os.environ[k]
    os.environ.update(saved)


def _o(name, must, verdict):
    return meta.Outcome(name, 0, "ci", must, verdict, "2")


def test_a_failed_control_fails_the_matrix_exit_status(isolated_main, monkeypatch, capsys):
    outcomes = [_o("DroppedRankOddM", "fail", meta.Verdict.KILLED),
                _o("unfused (correct)", "pass", meta.Verdict.FAILED)]
    monkeypatch.setattr(meta, "run_matrix", lambda *a, **k: outcomes)
    assert meta.main(["--impl", "DroppedRankOddM", "--optimize", "0"]) == 1
    assert "kill rate: 1/1" in capsys.readouterr().out  # every mutant killed, and still red
    outcomes[1] = _o("unfused (correct)", "pass", meta.Verdict.PASSED)
    assert meta.main(["--impl", "DroppedRankOddM", "--optimize", "0"]) == 0
    outcomes[1] = _o("unfused (correct)", "pass", meta.Verdict.ERROR)
    assert meta.main(["--impl", "DroppedRankOddM", "--optimize", "0"]) == 1


def test_an_unknown_mutant_name_is_an_error():
    with pytest.raises(SystemExit, match="unknown mutant"):
        meta.targets(["Typo"])
    with pytest.raises(SystemExit, match="unknown mutant"):
        meta.targets(["DroppedRankOddM", "DropedRankOddM"])
    with pytest.raises(SystemExit, match="unknown mutant"):
        meta.targets(["Typo"], gpu=True)


def test_an_unknown_name_on_the_command_line_is_not_a_green_matrix(isolated_main):
    try:
        rc = meta.main(["--impl", "Typo", "--optimize", "0"])
    except SystemExit as e:
        rc = e.code
    assert rc not in (0, None), rc
    assert not isolated_main  # no session started


def test_an_empty_matrix_is_an_error(isolated_main, capsys):
    assert meta.targets(["unfused"], include_correct=False) == []
    assert meta.main(["--impl", "unfused", "--no-correct", "--optimize", "0"]) != 0
    assert "nothing to run" in capsys.readouterr().err
    assert not isolated_main  # no session started for nothing


# --- P10: the plugin records a setup error ----------------------------------------------------------------

PLUGIN_TESTS = '''
import pytest

GATE = pytest.mark.parametrize("gate", [("unfused", "cpu", 2)], ids=["unfused-cpu-W2"])


@pytest.fixture
def pool():
    raise RuntimeError("PoolError: pool did not start")


@GATE
def test_compute(gate):
    pass


@GATE
def test_layers(gate, pool):
    pass
'''


def run_plugin_tests(tmp_path, **env_extra: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """:data:`PLUGIN_TESTS` run by pytest with the kill sessions' plugin (``mutants.stop_at_first_failure``) in
    ``tmp_path`` (``env_extra`` added to its environment): the process and the outcome lines it recorded."""
    (tmp_path / "test_gated.py").write_text(PLUGIN_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report"
    report.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in meta._SCRUB and not k.startswith("PYTEST_")}
    env.update({"PYTHONPATH": meta.REPO, config.BY_NAME["report_dir"].env: str(report),
                config.BY_NAME["hypothesis_db"].env: "none", "HYPOTHESIS_PROFILE": "ci", **env_extra})
    env.pop("PYTHONOPTIMIZE", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
                           "mutants.stop_at_first_failure", "-c", str(tmp_path / "pytest.ini"), "--rootdir",
                           str(tmp_path), "test_gated.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    lines = [json.loads(ln) for ln in (report / "outcomes-main.jsonl").read_text().splitlines()]
    return proc, lines


def test_the_plugin_records_a_setup_error_and_the_control_then_fails(tmp_path):
    proc, lines = run_plugin_tests(tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    setup = [ln for ln in lines if ln["when"] == "setup" and "test_layers" in ln["test"]]
    assert [ln["outcome"] for ln in setup] == ["failed"], lines
    assert "pool did not start" in setup[0]["message"]
    assert any(ln["when"] == "call" and "test_compute" in ln["test"] and ln["outcome"] == "passed" for ln in lines)
    test_compute = next(ln["test"] for ln in lines if "test_compute" in ln["test"])
    session = meta.SessionResult(proc.returncode, False, 600, proc.stdout, 1.0)
    o = meta.classify(CORRECT, 0, "ci", [_case("passed", 1, [RIGHT], test=test_compute)], lines, session)
    assert o.verdict == meta.Verdict.FAILED and "test_layers[W2]: error" in o.detail, (o.verdict, o.detail)


# --- P19 / P20: the catalogue ---------------------------------------------------------------------------------


def test_every_mutant_class_of_the_catalogue_is_in_exactly_one_registry():
    """A MutantSpec deleted from CATALOGUE (its class left behind) would go unnoticed: every UnfusedGemmRs subclass
    defined in mutants.catalogue is a matrix row (CATALOGUE), an engine fixture (ENGINE_FIXTURES) or a mutant only
    a GPU kills (GPU_NIGHTLY_CATALOGUE, which holds GPU_UNFUSED_CATALOGUE); private bases (``_Name``) excepted."""
    registries = {"CATALOGUE": [s.name for s in catalogue.CATALOGUE],
                  "ENGINE_FIXTURES": list(catalogue.ENGINE_FIXTURES),
                  "GPU_NIGHTLY_CATALOGUE": [s.name for s in catalogue.GPU_NIGHTLY_CATALOGUE]}
    assert {s.name for s in catalogue.GPU_UNFUSED_CATALOGUE} <= set(registries["GPU_NIGHTLY_CATALOGUE"])
    classes = {name for name, c in vars(catalogue).items() if inspect.isclass(c) and issubclass(c, UnfusedGemmRs)
               and c.__module__ == catalogue.__name__ and not name.startswith("_")}
    assert len(classes) > 60
    where = {name: [r for r, names in registries.items() for n in names if n == name] for name in classes}
    assert {n: w for n, w in where.items() if len(w) != 1} == {}, "each class in exactly one registry"
    listed = [n for names in registries.values() for n in names]
    assert sorted(set(listed) - classes) == [], "a registry names a class the catalogue does not define"


def _known_check_names() -> set[str]:
    """Every check the gate makes (fuzz.expected_checks: the sets, and the names its docstring lists as made only
    where asked for and as failure-only) and the matrix's names for the liveness watchdog (meta._caught_by)."""
    listed = set(re.findall(r"``([a-z]+(?:_[a-z]+)+)``", checks_module.__doc__ or ""))
    assert {"call_raised", "main_path_available", "device_fault", "declared_config_served",
            "kernel_paths_agree_across_ranks"} <= listed
    watchdog = {meta._caught_by({"status": str(s)})[0] for s in Status if s.caught and s != Status.FAILED}
    assert watchdog == {"hang", "died"}
    return set(checks_module.expected_checks("shared-gpu")) | listed | watchdog


def test_every_expected_name_of_every_cpu_spec_is_a_known_check():
    """A misspelt expected name (``return_out``) never matches a catching property: every kill would read
    MISMATCH-free, or MISMATCH, for the wrong reason."""
    known = _known_check_names()
    from mutants.dimension_faults import WRAPPER_CATALOGUE

    specs = [*catalogue.CATALOGUE, *catalogue.GPU_NIGHTLY_CATALOGUE, *WRAPPER_CATALOGUE]
    bad = {s.name: sorted(set(s.expected) - known) for s in specs if set(s.expected) - known}
    assert bad == {}


def test_every_property_named_by_a_gpu_fault_build_s_words_is_known():
    """The GPU catalogue states its expected properties in words (meta._expected picks the snake_case names): each
    name is a known check, or names a test, a fault switch or a wrapper method -- and each row names a check."""
    from kernel.fused.wrapper import FusedGemmRs
    from mutants.kernel_faults import GPU_CATALOGUE

    known = _known_check_names()
    faults = {s.fault for s in GPU_CATALOGUE}
    for s in GPU_CATALOGUE:
        names = meta._expected(s.expected)
        assert set(names) & known, (s.name, names)
        other = [n for n in names if n not in known and not n.startswith("test_") and n not in faults
                 and not hasattr(FusedGemmRs, n)]
        assert other == [], (s.name, other)


# --- P34: a session at another optimize level than asked ------------------------------------------------------


def _at(status, t, driver, ranks, pool=None, checks=(), test=None):
    pool = driver if pool is None else pool
    return _case(status, t, list(checks), **({"test": test} if test else {}), optimize=pool, driver_optimize=driver,
                 rank_optimize={str(r): level for r, level in enumerate(ranks)})


CAPACITY = {"name": "capacity_rejected", "passed": False, "skipped": False}


def test_a_kill_at_another_optimize_level_than_asked_is_an_error():
    """CapacityAsAssert 'killed at -O0' by a session whose driver (a caller's PYTHONOPTIMIZE=1) ran at -O1."""
    target = meta.Target("CapacityAsAssert", "mutants.catalogue:M", (2,), "fail", expected=("capacity_rejected",))
    rows = [_at("passed", 1, 1, [1, 1], checks=[RIGHT]), _at("failed", 2, 1, [1, 1], checks=[CAPACITY])]
    asked0 = meta.classify(target, 0, "ci", rows, [_outcome("failed")], FINE)
    assert asked0.verdict == meta.Verdict.ERROR and not asked0.ok, asked0
    assert "asked for -O0" in asked0.detail and "driver ran at -O1" in asked0.detail, asked0.detail
    assert "ERROR (harness, not a kill)" in meta.render([asked0])
    asked1 = meta.classify(target, 1, "ci", rows, [_outcome("failed")], FINE)  # the level it ran at: a kill
    assert asked1.verdict == meta.Verdict.KILLED and asked1.caught_by == ("capacity_rejected",)
    # the ranks at another level than their pool (the driver right)
    ranks = [_at("failed", 2, 0, [0, 1], pool=0, checks=[WRONG])]
    o = meta.classify(target, 0, "ci", ranks, [_outcome("failed")], FINE)
    assert o.verdict == meta.Verdict.ERROR and "ranks ['1'] ran at -O1, their pool at -O0" in o.detail, o.detail


def test_the_control_at_another_optimize_level_is_never_a_pass():
    rows = [_at("passed", 1, 1, [1, 1], checks=[RIGHT], test=CORRECT_TEST)]
    done = meta.SessionResult(0, False, 600, "", 1.0)
    o = meta.classify(CORRECT, 0, "ci", rows, [_outcome("passed", test=CORRECT_TEST)], done)
    assert o.verdict != meta.Verdict.PASSED and not o.ok and "asked for -O0" in o.detail, o
    assert meta.classify(CORRECT, 1, "ci", rows, [_outcome("passed", test=CORRECT_TEST)], done).verdict == \
        meta.Verdict.PASSED


def test_a_pool_started_at_minus_O_on_purpose_is_no_mismatch():
    """test_capacity_under_python_O starts -O1 ranks under a -O0 driver: its pool's level is what they must run at."""
    test = "fuzz/test_gemm_rs.py::test_capacity_under_python_O[unfused-cpu-W2]"
    rows = [_at("passed", 1, 0, [0, 0], checks=[RIGHT], test=CORRECT_TEST),
            _at("passed", 2, 0, [1, 1], pool=1, checks=[RIGHT], test=test),
            _at("passed", 3, 0, [None, 0], checks=[RIGHT], test=CORRECT_TEST)]  # a rank that never reported
    done = meta.SessionResult(0, False, 600, "", 1.0)
    o = meta.classify(CORRECT, 0, "ci", rows, [_outcome("passed", test=CORRECT_TEST), _outcome("passed", test=test)],
                      done)
    assert o.verdict == meta.Verdict.PASSED, o.detail


class _Started(Exception):
    pass


@pytest.mark.parametrize("optimize", [0, 1])
def test_a_session_runs_at_the_level_asked_whatever_the_caller_s_PYTHONOPTIMIZE(optimize, monkeypatch, tmp_path):
    seen = {}

    def popen(cmd, **kw):
        seen.update(cmd=cmd, env=kw["env"])
        raise _Started

    monkeypatch.setenv("PYTHONOPTIMIZE", "1")
    monkeypatch.setattr(meta.tempfile, "mkdtemp", lambda **k: str(tmp_path))
    monkeypatch.setattr(meta.subprocess, "Popen", popen)
    with pytest.raises(_Started):
        meta.run_session([CORRECT], optimize)
    assert seen["env"].get("PYTHONOPTIMIZE") == ("1" if optimize else None)
    assert ("-O" in seen["cmd"][:2]) == bool(optimize)


def test_a_hang_of_the_control_fails_it_whether_or_not_pytest_failed_its_test():
    """A control's hang case (a false one at a short case deadline, say) is FAILED, never PASSED, whatever pytest said
    of its test; a mutant's is KILLED only where pytest failed that test, else ERROR ('but pytest did not fail')."""
    hang = _case("hang", 1, test=CORRECT_TEST)
    for outcome in ("failed", "passed"):
        o = _classify([hang], [_outcome(outcome, test=CORRECT_TEST)], CORRECT, FINE)
        assert o.verdict == meta.Verdict.FAILED and not o.ok and "hang" in o.detail, o.detail
        assert (outcome == "failed") == ("but pytest did not fail" not in o.detail), o.detail  # says which it was
    killed = _classify([_case("hang", 1)], [_outcome("failed")])
    assert killed.verdict == meta.Verdict.KILLED and killed.caught_by == ("hang",)
    lost = _classify([_case("hang", 1)], [_outcome("passed")])
    assert lost.verdict == meta.Verdict.ERROR and "hang case, but pytest did not fail" in lost.detail
