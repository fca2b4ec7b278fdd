"""Every status that is not a pass fails what users read: ``check_case`` (the ``pytest fuzz/`` path) raises on a HANG
or an ERROR and skips -- never passes -- a SKIPPED case; ``fuzz.differential`` fails its verdict when an
implementation errs; a failure a re-run passed is recorded as the failure it was; and the campaign keeps a failing
replay pass's exit status when the main pass that follows it succeeds."""

from __future__ import annotations

import json

import pytest

import fuzz.campaign
import fuzz.gate
from fuzz.case import Case, PoolSpec
from fuzz.gate import FuzzFailure, check_case
from fuzz.pool import RankPool
from fuzz.record import case_row
from fuzz.status import Reproducibility, Status
from fuzz.summary import confirmed_failures, failure_records
from fuzz.verdict import confirm
from tests.ci.test_gate_report import _row, _write
from tests.engine.test_host_cannot_build import SMALL, _fresh_memory  # noqa: F401 -- an autouse fixture
from tests.engine.test_verdict import _check, _msg
from tests.engine.test_verdict import _report as _verdict_report

#: an implementation no rank can import: every case is a harness ERROR (an exception escaped run_case)
MISSING = "tests.engine.planted_impls:DoesNotExist"


@pytest.fixture
def recorded(monkeypatch) -> list:
    """The reports ``check_case`` records (none written to a report folder)."""
    reports: list = []
    monkeypatch.setattr(fuzz.gate, "record", lambda report, test_id="": reports.append(report))
    return reports


def _check_on(impl: str, case: Case, deadline: float | None = None, may_skip: bool = False):
    """``check_case`` on a fresh pool; a skip fails the test unless ``may_skip`` (a skip raised here would skip the
    test itself -- ``pytest.raises(FuzzFailure)`` lets it through -- and a case that must fail would read skipped)."""
    pool = RankPool(PoolSpec(impl=impl, world_size=2))
    try:
        check_case(pool, case, deadline=deadline)
    except pytest.skip.Exception as exc:
        if not may_skip:
            pytest.fail(f"check_case skipped the case instead of failing it: {exc}")
        raise
    finally:
        pool.close()


# --- P4: a HANG, DIED or ERROR case fails check_case, not only a FAILED one ---------------------------------------

def test_check_case_raises_on_a_hang(recorded, monkeypatch):
    monkeypatch.setattr(fuzz.gate, "CONFIRM_FAILURES", False)  # one hang is the point; no re-run on a fresh pool
    with pytest.raises(FuzzFailure) as info:
        _check_on("mutants.catalogue:HangOnM", Case("compute", ms=[77], **SMALL), deadline=2)
    assert info.value.report.status == Status.HANG
    assert [r.status for r in recorded] == [Status.HANG]


def test_check_case_raises_on_a_dead_rank(recorded, monkeypatch):
    monkeypatch.setattr(fuzz.gate, "CONFIRM_FAILURES", False)
    with pytest.raises(FuzzFailure) as info:
        _check_on("mutants.catalogue:CrashOnM", Case("compute", ms=[66], **SMALL), deadline=60)
    assert info.value.report.status == Status.DIED
    assert [r.status for r in recorded] == [Status.DIED]


def test_check_case_raises_on_a_harness_error(recorded):
    with pytest.raises(FuzzFailure) as info:
        _check_on(MISSING, Case("compute", ms=[3], **SMALL))
    assert info.value.report.status == Status.ERROR
    assert "harness error" in str(info.value)
    assert [r.status for r in recorded] == [Status.ERROR]


def test_a_harness_error_kills_the_pool_and_the_next_case_starts_a_fresh_one():
    """An exception that escaped run_case on a rank may leave its peers blocked in a collective: like any case that
    fails the gate, the pool is killed after it (stacks and logs collected), never handed the next case."""
    pool = RankPool(PoolSpec(impl=MISSING, world_size=2))
    try:
        report = pool.run(Case("compute", ms=[3], **SMALL))
        assert report.status == Status.ERROR and not pool.alive and pool.starts == 1
        pool.run(Case("compute", ms=[4], **SMALL))
        assert pool.starts == 2
    finally:
        pool.close()


# --- P5: a SKIPPED case skips the test, never counts as passed ------------------------------------------------------

def test_check_case_skips_a_case_whose_every_check_was_skipped(recorded):
    with pytest.raises(pytest.skip.Exception, match="no CUDA graphs"):
        # topology cpu: every check of the graph family skips
        _check_on("unfused", Case("graph", ms=[3], **SMALL), may_skip=True)
    assert [r.status for r in recorded] == [Status.SKIPPED]


# --- P25: fuzz.differential fails its verdict when an implementation errs -------------------------------------------

def test_differential_fails_when_an_implementation_errs(capsys, monkeypatch, own_settings):
    import fuzz.differential

    monkeypatch.delenv("GEMM_RS_WORLD_SIZES", raising=False)
    rc = fuzz.differential.main(["--impl", f"unfused,{MISSING}", "--cases", "1", "--world-sizes", "2"])
    out = capsys.readouterr().out
    assert "error 1" in out, out[-2000:]  # its one case erred (compared with nobody)
    assert rc == 1 and "verdict: FAILED" in out, out[-2000:]


# --- P18: a failure a re-run passed (flaky) is recorded as the failure it was ----------------------------------------

def test_a_flaky_failure_is_recorded_as_failed_and_listed_among_failures():
    failing = _msg(_check("within_tolerance", passed=False, detail="3 rows wrong"))
    first = _verdict_report(Status.FAILED, "first", ranks={0: failing, 1: _msg(_check())})
    shown = confirm(first, _verdict_report(Status.PASSED, ranks={0: _msg(_check()), 1: _msg(_check())}))
    assert shown.reproducibility == Reproducibility.FLAKY and shown.rerun_status == Status.PASSED
    row = json.loads(json.dumps(case_row(shown, "fuzz/test_gemm_rs.py::test_compute")))  # as a record reads back
    assert row["status"] == "failed" and row["rerun_status"] == "passed" and row["reproducibility"] == "flaky"
    (listed,) = confirmed_failures([row])
    assert listed["status"] == "failed" and listed["reproducibility"] == "flaky"
    assert [r["status"] for r in failure_records([[row]])] == ["failed"]


# --- P20: the campaign keeps a failing replay pass's exit status -----------------------------------------------------

def test_a_failing_replay_pass_fails_the_campaign_when_the_main_pass_passes(tmp_path, monkeypatch, own_settings):
    passes: list[str] = []

    def run_pytest(cmd, env, root, log_path, time_limit):
        passes.append(env["HYPOTHESIS_PROFILE"])
        if env["HYPOTHESIS_PROFILE"] == "replay":
            return 1, False  # the stored example failed again
        _write(tmp_path, [_row()])  # the main pass: every case passed
        return 0, False

    monkeypatch.setattr(fuzz.campaign, "stored_examples", lambda: 1)
    monkeypatch.setattr(fuzz.campaign, "run_pytest", run_pytest)
    rc = fuzz.campaign.main(["--profile", "ci", "--impl", "unfused", "--topology", "cpu", "--report-dir",
                             str(tmp_path), "--pools-per-gpu", "1", "--progress-every", "60"])
    assert passes == ["replay", "ci"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pytest_exit_code"] == 1 and summary["verdict"] == "FAIL"
    assert rc == 1


def test_the_campaign_exits_1_when_its_verdict_fails_though_pytest_passed(tmp_path, monkeypatch, own_settings):
    """Every case skipped (each check waived): pytest exits 0 (skips), the summary's verdict is FAIL (nothing of the
    implementation passed) -- and the campaign's exit status is the verdict's, not pytest's."""
    skipped = [{"name": "within_tolerance", "passed": False, "skipped": True, "rank": 0, "detail": "waived"}]

    def run_pytest(cmd, env, root, log_path, time_limit):
        _write(tmp_path, [_row(status="skipped", checks=skipped)])
        return 0, False

    monkeypatch.setattr(fuzz.campaign, "stored_examples", lambda: 0)
    monkeypatch.setattr(fuzz.campaign, "run_pytest", run_pytest)
    rc = fuzz.campaign.main(["--profile", "ci", "--impl", "unfused", "--topology", "cpu", "--report-dir",
                             str(tmp_path), "--pools-per-gpu", "1", "--progress-every", "60"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["pytest_exit_code"] == 0 and summary["verdict"] == "FAIL"
    assert rc == 1


def test_the_campaign_hands_the_user_s_pytest_arguments_and_examples_to_every_pass(tmp_path, monkeypatch,
                                                                                  own_settings):
    """``ci/gate --profile smoke --examples 7 -k test_compute --hypothesis-seed=5``: the flags the campaign does not
    know go to pytest in the replay pass and the main pass alike (a seed, a selection), and ``--examples`` overrules
    the profile's 4."""
    passes: list[tuple[list[str], dict]] = []

    def run_pytest(cmd, env, root, log_path, time_limit):
        passes.append((cmd, env))
        _write(tmp_path, [_row()])
        return 0, False

    monkeypatch.setattr(fuzz.campaign, "stored_examples", lambda: 1)
    monkeypatch.setattr(fuzz.campaign, "run_pytest", run_pytest)
    rc = fuzz.campaign.main(["--profile", "smoke", "--examples", "7", "--impl", "unfused", "--topology", "cpu",
                             "--report-dir", str(tmp_path), "--pools-per-gpu", "1", "--progress-every", "60",
                             "-k", "test_compute", "--hypothesis-seed=5"])
    assert rc == 0 and [env["HYPOTHESIS_PROFILE"] for _, env in passes] == ["replay", "ci"]
    for cmd, env in passes:
        assert cmd[cmd.index("-k") + 1] == "test_compute" and "--hypothesis-seed=5" in cmd, cmd
        assert env["GEMM_RS_EXAMPLES"] == "7" and env["PYTHONOPTIMIZE"] == "1"


def test_a_campaign_across_nodes_runs_one_pytest_driver(tmp_path, monkeypatch, own_settings):
    """``--nnodes 2``: a pool across nodes listens on one control port, so pytest runs with ``-n 0`` whatever
    ``--jobs`` says (fuzz/conftest.py refuses xdist workers there: the campaign would fail before any case)."""
    cmds: list[list[str]] = []

    def run_pytest(cmd, env, root, log_path, time_limit):
        cmds.append(cmd)
        _write(tmp_path, [_row()])
        return 0, False

    monkeypatch.setattr(fuzz.campaign, "stored_examples", lambda: 0)
    monkeypatch.setattr(fuzz.campaign, "run_pytest", run_pytest)
    fuzz.campaign.main(["--profile", "ci", "--impl", "unfused", "--topology", "cpu", "--report-dir", str(tmp_path),
                        "--pools-per-gpu", "1", "--progress-every", "60", "--nnodes", "2", "--jobs", "4",
                        "--control-address", "127.0.0.1:29999"])
    (cmd,) = cmds
    assert cmd[cmd.index("-n") + 1] == "0", cmd


def test_a_case_skipped_because_of_its_example_is_redrawn_even_beside_other_skips(recorded):
    """Every check skipped, one of them because of this example (``per_example``: an M the implementation waives)
    and others for reasons of their own (a call left to repeat, no padding rows): the example is rejected and
    Hypothesis draws another -- never a skip of the whole test, which would drop its other examples."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.errors import Unsatisfiable

    from fuzz.report import CaseReport

    waived = _check("unaligned_m", passed=False, skipped=True, detail="M=3 waived", per_example=True)
    other = _check("repeatable", passed=False, skipped=True, detail="no call left to repeat")

    class StubPool:
        spec = PoolSpec()

        def run(self, case, deadline=None, *, fresh=False, replay=None):
            return CaseReport(case=case, spec=self.spec, status=Status.SKIPPED, note="every check was skipped",
                              ranks={0: _msg(waived, other), 1: _msg(other)})

    @settings(max_examples=3, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 1))
    def fuzz_test(_):
        check_case(StubPool(), Case("compute", ms=[3], **SMALL))

    try:
        with pytest.raises(Unsatisfiable):  # every example rejected
            fuzz_test()
    except pytest.skip.Exception as exc:  # (would skip this test too: fail it instead)
        pytest.fail(f"one example's waiver skipped the whole test: {exc}")
    assert recorded and all(r.status == Status.SKIPPED for r in recorded)
