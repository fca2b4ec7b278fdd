"""fuzz.sanitize's verdicts, on CPU: a sanitizer run that did not run, could not be read, or crashed never reads
CLEAN (a missing rank log, an unparsed summary, a crashed canary, one NOT CLEAN pool among several, no
compute-sanitizer on PATH, a case that was skipped)."""

from __future__ import annotations

import pytest

from fuzz import sanitize
from fuzz.status import Status
from tests.engine.test_sanitizer_mode import CANARY_LOG, fake_sanitizer  # noqa: F401 -- a fixture


@pytest.fixture(autouse=True)
def _own_settings(own_settings):
    """``sanitize.main`` installs its flags as this process's settings: put back after each test (conftest)."""


@pytest.fixture
def fake_pools(monkeypatch):
    """``sanitize.main`` with pools that run nothing: each case ends with ``status[0]``, each pool's sanitizer
    summaries are ``sums[W]``; compute-sanitizer is "on PATH". Returns (status, sums, the pools started)."""
    import shutil

    status, sums, started = [Status.PASSED], {}, []

    class FakePool:
        def __init__(self, spec):
            self.spec, self.logdir = spec, f"/fake/{spec.world_size}"
            started.append(spec)

        def run(self, case, deadline=None):
            return type("R", (), {"status": status[0], "render": lambda self: ""})()

        def close(self, grace_s=None):
            pass

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(sanitize, "RankPool", FakePool)
    monkeypatch.setattr(sanitize, "summaries", lambda logdir, library=None: sums[int(logdir.rsplit("/", 1)[1])])
    return status, sums, started


def _run(argv, capsys):
    rc = sanitize.main(["--impl", "unfused", *argv])
    return rc, capsys.readouterr().out


def test_a_pool_missing_a_ranks_sanitizer_log_is_not_clean(fake_pools, capsys):
    """P12: W = 2 with one sanitizer log (one rank's sanitizer never wrote its summary file): NOT CLEAN."""
    _, sums, _ = fake_pools
    sums[2] = {"sanitizer-1.log": 0}
    rc, out = _run(["--world-sizes", "2"], capsys)
    assert rc == 1 and "(unfused, shared-gpu, W=2): NOT CLEAN" in out, out
    assert ": CLEAN" not in out


def test_a_rank_whose_summary_could_not_be_read_is_not_clean(fake_pools, capsys):
    """P14: a log without a summary (None: the process did not finish) beside a clean one: NOT CLEAN."""
    _, sums, _ = fake_pools
    sums[2] = {"sanitizer-1.log": 0, "sanitizer-2.log": None}
    rc, out = _run(["--world-sizes", "2"], capsys)
    assert rc == 1 and "(unfused, shared-gpu, W=2): NOT CLEAN" in out, out
    assert "sanitizer-2.log: no ERROR SUMMARY" in out
    assert ": CLEAN" not in out


def test_any_not_clean_pool_fails_the_run_not_only_the_last(fake_pools, capsys):
    """P16: W = 2 NOT CLEAN, then W = 4 CLEAN: the exit status is 1 (every pool's verdict counts)."""
    _, sums, started = fake_pools
    sums[2] = {"sanitizer-1.log": 3, "sanitizer-2.log": 0}
    sums[4] = {f"sanitizer-{r}.log": 0 for r in range(4)}
    rc, out = _run(["--world-sizes", "2,4"], capsys)
    assert [s.world_size for s in started] == [2, 4]
    assert "(unfused, shared-gpu, W=2): NOT CLEAN" in out and "(unfused, shared-gpu, W=4): CLEAN" in out, out
    assert rc == 1


def test_skipped_cases_never_read_clean(fake_pools, capsys):
    """A case whose every check was skipped ran nothing under the sanitizer: the pool is not CLEAN (exit 1), even
    with every rank's sanitizer at 0 errors."""
    status, sums, _ = fake_pools
    status[0] = Status.SKIPPED
    sums[2] = {"sanitizer-1.log": 0, "sanitizer-2.log": 0}
    rc, out = _run(["--world-sizes", "2"], capsys)
    assert rc == 1, out
    assert ": CLEAN" not in out and "skipped" in out.splitlines()[-1], out


@pytest.fixture
def exiting_sanitizer(fake_sanitizer, tmp_path):  # noqa: F811 -- the imported fixture
    """:func:`tests.engine.test_sanitizer_mode.fake_sanitizer` that exits with a given code after writing its log:
    ``write(log, exit_code)``."""
    exe = tmp_path / "compute-sanitizer"
    code = tmp_path / "exit-code"
    code.write_text("0")
    exe.write_text(exe.read_text() + f"sys.exit(int(open({str(code)!r}).read()))\n")

    def write(log: str, exit_code: int = 0) -> None:
        fake_sanitizer(log)
        code.write_text(str(exit_code))

    return write


def test_a_crashed_canary_is_not_heard_even_with_its_hazard_logged(exiting_sanitizer, capsys, monkeypatch):
    """P15: the canary's hazard in its log but the run exited 139 (a crash): not heard, the exit code named, and
    racecheck ends NOT CLEAN before any pool starts."""
    exiting_sanitizer(CANARY_LOG, 0)
    heard, said = sanitize.canary_heard("racecheck")
    assert heard, said  # the fake works: the same log, exit 0, is heard
    exiting_sanitizer(CANARY_LOG, 139)
    heard, said = sanitize.canary_heard("racecheck")
    assert not heard and "exit 139" in said, said

    def no_pool(spec):
        raise AssertionError("no pool may start once the canary went unheard")

    monkeypatch.setattr(sanitize, "RankPool", no_pool)
    assert sanitize.main(["--tool", "racecheck", "--world-sizes", "1"]) == 1
    out = capsys.readouterr().out
    assert "exit 139" in out and "NOT CLEAN" in out, out


def test_no_compute_sanitizer_on_path_is_not_clean(tmp_path, monkeypatch, capsys):
    """P60: compute-sanitizer not on PATH: nonzero, the missing tool named, no pool started."""
    def no_pool(spec):
        raise AssertionError("no pool may start without compute-sanitizer")

    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setattr(sanitize, "RankPool", no_pool)
    for tool in ("memcheck", "racecheck"):
        rc = sanitize.main(["--tool", tool, "--world-sizes", "2"])
        out = capsys.readouterr().out
        assert rc != 0 and "compute-sanitizer is not on PATH" in out, out
        assert "CLEAN" not in out.replace("NOT CLEAN", "")



def test_paths_asked_for_that_the_implementation_does_not_declare_are_no_clean_run(fake_pools, capsys):
    """``--paths split`` on an implementation with no such kernel path ran nothing asked for: exit 2 before any pool,
    never a skipped pool and an exit 0 from the verdicts of no pool at all."""
    _, sums, started = fake_pools
    sums[2] = {"sanitizer-1.log": 0, "sanitizer-2.log": 0}
    for paths in ("split", "cluster"):
        rc, out = _run(["--world-sizes", "2", "--paths", paths, "--paths-only"], capsys)
        assert rc == 2 and f"--paths {paths}: unfused declares no such kernel path at W=2" in out, out
        assert not started and "CLEAN" not in out


def test_a_failed_case_is_not_clean_even_with_every_sanitizer_at_0_errors(fake_pools, capsys, monkeypatch):
    """Every case ran (no cut, none skipped), each rank's sanitizer reported 0 errors, but a case FAILED (a wrong
    result, not the host): NOT CLEAN, exit 1 -- the verdict needs every case passed, not only the sanitizer's word."""
    status, sums, _ = fake_pools
    status[0] = Status.FAILED
    sums[2] = {"sanitizer-1.log": 0, "sanitizer-2.log": 0}
    monkeypatch.setattr(sanitize, "unbuildable", lambda report: False)
    rc, out = _run(["--world-sizes", "2"], capsys)
    assert rc == 1 and "(unfused, shared-gpu, W=2): NOT CLEAN" in out, out
    assert "CUT" not in out and ": CLEAN" not in out
