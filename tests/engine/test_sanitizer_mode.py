"""Sanitizer mode wiring, on CPU: the REPRO line and the pool key carry the sanitizer, summaries are
parsed (0 errors / N errors / missing summary), and the cases cover the GPU properties."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from fuzz import sanitize
from fuzz.case import Case, PoolSpec, repro_command
from fuzz.node import torchrun_command
from fuzz.sanitize import canary_heard, cases, summaries
from fuzz.status import Status


@pytest.fixture(autouse=True)
def _own_settings(own_settings):
    """``sanitize.main`` installs its flags as this process's settings: put back after each test (conftest)."""


def test_repro_line_carries_the_sanitizer():
    line = repro_command(Case("compute", seed=1, N=64, K=64, max_M=64), PoolSpec(sanitizer="racecheck"))
    assert line.endswith("--sanitizer racecheck")
    assert "--sanitizer" not in repro_command(Case("compute", seed=1, N=64, K=64, max_M=64), PoolSpec())


def test_sanitizer_is_part_of_the_pool_key():
    assert PoolSpec(sanitizer="memcheck").key() != PoolSpec().key()


def test_summaries_are_parsed(tmp_path):
    (tmp_path / "sanitizer-11.log").write_text("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n")
    (tmp_path / "sanitizer-12.log").write_text("========= Invalid __global__ write\n"
                                               "========= ERROR SUMMARY: 3 errors\n")
    (tmp_path / "sanitizer-13.log").write_text("========= COMPUTE-SANITIZER\n")
    race = "========= RACECHECK SUMMARY: {} hazards displayed (0 errors, {} warnings)\n"
    (tmp_path / "sanitizer-14.log").write_text(race.format(0, 0))
    (tmp_path / "sanitizer-15.log").write_text(race.format(2, 2))
    assert summaries(str(tmp_path)) == {"sanitizer-11.log": 0, "sanitizer-12.log": 3, "sanitizer-13.log": None,
                                        "sanitizer-14.log": 0, "sanitizer-15.log": 2}


#: racecheck's log of the ranks of ``python -m fuzz.sanitize --impl fused --world-sizes 1 --tool racecheck --paths
#: cluster --paths-only`` on one H200 (13th session): hazards in cuBLAS's kernels only.
H200_RACECHECK_LOG = """========= COMPUTE-SANITIZER
========= Error: Race reported between Read access at nvjet_sm90_tst_64x136_64x8_4x2_h_bz_TNT+0xa60
=========     and Write access at nvjet_sm90_tst_64x136_64x8_4x2_h_bz_TNT+0x3440 [448 hazards]
========= Error: Race reported between Read access at nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT+0xb30
=========     and Write access at nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT+0x2f60 [448 hazards]
========= Error: Race reported between Read access at nvjet_sm90_tst_64x136_64x8_4x2_h_bz_TNT+0xa60
=========     and Write access at nvjet_sm90_tst_64x136_64x8_4x2_h_bz_TNT+0x3440 [448 hazards]
========= RACECHECK SUMMARY: 3 hazards displayed (3 errors, 0 warnings)
"""


def test_racecheck_hazards_in_library_kernels_are_listed_not_counted(tmp_path):
    """cuBLAS's nvjet kernels' hazards (reported on an H200) do not make the implementation NOT CLEAN; one naming
    this project's kernel -- even beside a library kernel -- or one past the displayed reports still counts."""
    ours = "kernel_cutlass_kernel_kernelfusedgemm_rsHopperGemmRsBF16_object_at__CopyAtom_0"
    (tmp_path / "sanitizer-1.log").write_text(H200_RACECHECK_LOG)
    mixed = H200_RACECHECK_LOG.replace("Write access at nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT",
                                       f"Write access at {ours}")
    (tmp_path / "sanitizer-2.log").write_text(mixed)
    (tmp_path / "sanitizer-3.log").write_text(H200_RACECHECK_LOG.replace("(3 errors, 0 warnings)",
                                                                         "(3 errors, 2 warnings)"))
    library = []
    assert summaries(str(tmp_path), library) == {"sanitizer-1.log": 0, "sanitizer-2.log": 1, "sanitizer-3.log": 2}
    assert len(library) == 3 + 2 + 3
    assert library[0] == ("sanitizer-1.log: nvjet_sm90_tst_64x136_64x8_4x2_h_bz_TNT / "
                          "nvjet_sm90_tst_64x136_64x8_4x2_h_bz_TNT")
    assert not any(ours in h for h in library)


def test_the_ranks_and_the_canary_run_under_one_sanitizer_command():
    cmd = torchrun_command(sanitizer="racecheck", logdir="/tmp/x", nproc=2)
    tail = cmd[cmd.index("compute-sanitizer"):]
    assert tail[:tail.index(sys.executable)] == sanitize.sanitizer_command("racecheck", "/tmp/x/sanitizer-%p.log")
    assert "--tool=racecheck" in tail
    assert tail[-3:] == ["-u", "-m", "fuzz.rank_worker"]  # a new interpreter per rank, under the sanitizer


def test_without_a_sanitizer_torchrun_forks_the_ranks_from_its_agent():
    cmd = torchrun_command(sanitizer=None, logdir="/tmp/x", nproc=4)
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"] and "--start-method=fork" in cmd
    script = cmd[cmd.index("--run-path") + 1]
    assert cmd[-1] == script and script.endswith("fuzz/rank_main.py") and os.path.isfile(script)


CANARY_LOG = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at kernel_cutlass_race_canary_tensorptri32gmemalign16o1281_0+0x90
=========     and Read access at kernel_cutlass_race_canary_tensorptri32gmemalign16o1281_0+0xb0 [128 hazards]
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


@pytest.fixture
def fake_sanitizer(tmp_path, monkeypatch):
    """A ``compute-sanitizer`` on PATH that writes LOG (the fixture's ``write`` sets it) to its --log-file, then
    exits 0 without running the program."""
    log = tmp_path / "canned.log"
    exe = tmp_path / "compute-sanitizer"
    exe.write_text(f"#!{sys.executable}\nimport shutil, sys\n"
                   "dest = [a.split('=', 1)[1] for a in sys.argv if a.startswith('--log-file=')][0]\n"
                   f"shutil.copy({str(log)!r}, dest)\n")
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return log.write_text


def test_racecheck_needs_the_canary_heard(fake_sanitizer):
    """The canary's hazard reported: heard. Silence (a racecheck that sees nothing), or hazards only in other
    kernels: not heard, so the run cannot read CLEAN."""
    fake_sanitizer(CANARY_LOG)
    heard, said = canary_heard("racecheck")
    assert heard, said
    assert "race_canary" in said
    silent = "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    fake_sanitizer(silent)
    heard, said = canary_heard("racecheck")
    assert not heard and "not reported" in said
    fake_sanitizer(H200_RACECHECK_LOG)
    assert not canary_heard("racecheck")[0]


def test_racecheck_ends_not_clean_without_the_canary_before_any_case(fake_sanitizer, capsys, monkeypatch):
    def no_pool(spec):
        raise AssertionError("no pool may start once the canary went unheard")

    monkeypatch.setattr(sanitize, "RankPool", no_pool)
    fake_sanitizer("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
    assert sanitize.main(["--tool", "racecheck", "--world-sizes", "1"]) == 1
    assert "NOT CLEAN (racecheck did not report the race canary's hazard" in capsys.readouterr().out


def test_sanitizer_cases_cover_the_gpu_properties():
    families = {c.family for c in cases()}
    assert families == {"compute", "capacity", "graph"}
    assert any(c.late_rank is not None for c in cases())
    assert any(M % 2 for c in cases() for M in c.ms)  # unaligned M


def test_sanitizer_paths_add_the_declared_split_k_paths():
    """``--paths split``: the gate's cases of every split-K path the fused kernel declares (a graph of each too);
    ``all`` adds the unsplit tile configs; an implementation without the query adds nothing."""
    small = cases()
    split = cases("fused", 2, "split")
    added = split[len(small):]
    assert split[:len(small)] == small and added
    assert {c.family for c in added} == {"compute", "graph"}
    assert len(cases("fused", 2, "all")) > len(split)
    assert len(cases("unfused", 2, "split")) == len(small)


def test_sanitizer_cluster_paths_and_paths_only():
    """``--paths cluster``: the clustered tiles' paths (their idle twins too, each replayed in a graph);
    ``paths_only`` drops the small cases (racecheck's time goes to the paths); the split paths are not among the
    clustered ones."""
    small = cases()
    cluster = cases("fused", 2, "cluster")
    added = cluster[len(small):]
    assert cluster[:len(small)] == small and {c.family for c in added} == {"compute", "graph"}
    assert len([c for c in added if c.family == "graph"]) == 4  # 64x112c2, 64x128c2, each with an idle twin
    assert cases("fused", 2, "cluster", paths_only=True) == added
    split = cases("fused", 2, "split", paths_only=True)
    assert split and not any(c in added for c in split)
    assert cases("unfused", 2, "cluster", paths_only=True) == []


def test_sanitizer_time_limit_never_reads_clean(monkeypatch, capsys):
    """A run cut by ``--time-limit`` ends CUT with exit 1, never CLEAN, even with every sanitizer at 0 errors."""
    import shutil

    from fuzz import sanitize
    from fuzz.status import Status

    class FakePool:
        logdir = "/nonexistent"

        def __init__(self, spec):
            self.spec = spec

        def run(self, case, deadline=None):
            return type("R", (), {"status": Status.PASSED, "render": lambda self: ""})()

        def close(self, grace_s=None):
            pass

    clock = iter([0.0, 0.0, 5.0, 100.0, 100.0, 100.0])
    monkeypatch.setattr(sanitize.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(sanitize, "RankPool", FakePool)
    clean = dict.fromkeys(("sanitizer-1.log", "sanitizer-2.log"), 0)
    monkeypatch.setattr(sanitize, "summaries", lambda logdir, library=None: clean)
    rc = sanitize.main(["--impl", "unfused", "--world-sizes", "2", "--time-limit", "10"])
    out = capsys.readouterr().out
    assert rc == 1 and "CUT (2 of 4 cases ran, no error in them)" in out and "CLEAN (" not in out
    assert "(unfused, shared-gpu, W=2)" in out


def test_a_host_that_cannot_build_the_main_path_is_not_clean_after_one_case(monkeypatch, capsys):
    """The first case failing only ``main_path_available`` ends the pool's run: NOT CLEAN, the reason, no more cases."""
    import shutil

    from fuzz import sanitize
    from fuzz.report import CaseReport
    from fuzz.status import Status

    check = {"name": "main_path_available", "passed": False, "skipped": False, "extra": {}, "rank": 0,
             "detail": "the main path 'fused' cannot be built on this host: planted"}
    ran = []

    class FakePool:
        logdir = "/nonexistent"

        def __init__(self, spec):
            self.spec = spec

        def run(self, case, deadline=None):
            ran.append(case)
            return CaseReport(case=case, spec=self.spec, status=Status.FAILED,
                              ranks={0: {"checks": [check]}, 1: {"checks": [check]}})

        def close(self, grace_s=None):
            pass

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(sanitize, "RankPool", FakePool)
    clean = dict.fromkeys(("sanitizer-1.log", "sanitizer-2.log"), 0)
    monkeypatch.setattr(sanitize, "summaries", lambda logdir, library=None: clean)
    rc = sanitize.main(["--impl", "unfused", "--world-sizes", "2"])
    out = capsys.readouterr().out
    assert rc == 1 and len(ran) == 1
    assert "CANNOT BUILD unfused" in out and "NOT CLEAN" in out and "planted" in out


def test_sanitize_takes_the_common_flags_and_runs_each_w(monkeypatch, capsys):
    """fuzz.sanitize spells --impl, --world-sizes, --topology, --case-deadline as every tool does
    (fuzz/config.py); several W run one pool each, and the exit status is 0 only if every pool is CLEAN."""
    import shutil

    from fuzz.status import Status

    started = []

    class FakePool:
        def __init__(self, spec):
            self.spec, self.logdir = spec, f"/fake/{spec.world_size}"
            started.append(spec)

        def run(self, case, deadline=None):
            assert deadline == 33.0
            return type("R", (), {"status": Status.PASSED, "render": lambda self: ""})()

        def close(self, grace_s=None):
            pass

    def sums(logdir, library=None):  # W = 4's second rank found an error
        w = int(logdir.rsplit("/", 1)[1])
        return {f"sanitizer-{r}.log": int(w == 4 and r == 1) for r in range(w)}

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(sanitize, "RankPool", FakePool)
    monkeypatch.setattr(sanitize, "summaries", sums)
    rc = sanitize.main(["--impl", "unfused", "--world-sizes", "2,4", "--case-deadline", "33",
                        "--topology", "multi-gpu"])
    out = capsys.readouterr().out
    assert [(s.impl, s.world_size, s.topology) for s in started] == [("unfused", 2, "multi-gpu"),
                                                                     ("unfused", 4, "multi-gpu")]
    assert rc == 1 and "(unfused, multi-gpu, W=2): CLEAN" in out and "(unfused, multi-gpu, W=4): NOT CLEAN" in out
    with pytest.raises(SystemExit):
        sanitize.main(["--topology", "cpu"])


def test_calls_only_cases_keep_each_paths_calls_once():
    """``--calls-only``: each declared path's compute case becomes one calls_only case of the same shape, Ms and
    kinds; its graph case (the same kernel) adds none; the small cases stay whole."""
    full = cases("fused", 2, "all", paths_only=True)
    calls = cases("fused", 2, "all", paths_only=True, calls_only=True)
    assert {c.family for c in calls} == {"calls_only"}
    computes = [c for c in full if c.family == "compute"]
    assert [(c.N, c.K, c.max_M, c.ms, c.kinds) for c in calls] == [(c.N, c.K, c.max_M, c.ms, c.kinds)
                                                                   for c in computes]
    assert cases("fused", 2, "all", calls_only=True)[:len(cases())] == cases()
    with pytest.raises(SystemExit):
        sanitize.main(["--calls-only"])  # needs --paths


@pytest.mark.multiproc
def test_the_calls_only_family_makes_the_calls_and_can_fail():
    """A calls_only case runs the implementation's calls with their own checks (path, result contract) and no
    oracle: it passes on the unfused implementation, fails where a call raises, and reports no value check."""
    from fuzz.pool import RankPool

    case = Case("calls_only", seed=5, N=64, K=64, max_M=256, ms=[3, 130, 3], kinds=["gaussian", "cancel", "exact"])
    pool = RankPool(PoolSpec(impl="unfused", world_size=1))  # one rank: the family's logic, cheaply
    try:
        report = pool.run(case)
    finally:
        pool.close()
    assert report.passed, report.render()
    names = report.property_names()
    assert "result_contract" in names and not names & {"within_tolerance", "bitwise_equal", "oracle_exact"}
    fallback = RankPool(PoolSpec(impl="mutants.catalogue:SilentFallback", world_size=1))
    try:
        bad = fallback.run(case)  # M = 3: its unfused fallback, not the path it names
    finally:
        fallback.close()
    failed = {c["name"] for _, c in bad.checks() if not c["passed"] and not c.get("skipped")}
    assert bad.status == Status.FAILED and "path_taken" in failed, bad.render()
