"""The fuzz engine's own guarantees: a hang becomes a failure with every rank's stack, a dead rank is
reported (which rank, its exit code) and never hangs the driver, a rank's exception is reported as it is
even when it leaves its peers blocked, the pool restarts after every case that did not pass, kills only
its own processes, and no process outlives it; ports never collide."""

from __future__ import annotations

import os
import re
import threading
import time

import pytest
from _orphans import gone, kill_the_driver, wait_gone

from fuzz.case import Case, PoolSpec
from fuzz.pool import RankPool
from fuzz.status import Status

pytestmark = pytest.mark.multiproc

SMALL = dict(seed=1, N=64, K=64, max_M=256)




def _next_case_passes_on_a_fresh_pool(pool: RankPool) -> None:
    assert not pool.alive  # killed right after the case, not when the next one comes
    after = pool.run(Case("compute", ms=[5], **SMALL), deadline=60)
    assert after.passed, after.render()
    assert pool.starts == 2


def test_hang_reports_every_rank_stack_then_pool_restarts():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:HangOnM", world_size=2))
    try:
        t0 = time.monotonic()
        report = pool.run(Case("compute", ms=[77], **SMALL), deadline=4)
        assert report.status == Status.HANG
        # the caller's deadline, not the default (120 s): the stacks take seconds on top
        assert time.monotonic() - t0 < 4 + 50, f"a 4 s deadline took {time.monotonic() - t0:.0f} s"
        assert set(report.stacks) == {0, 1}
        assert "HangOnM" in report.stacks[0] or "catalogue.py" in report.stacks[0]
        assert "reduce_scatter" in report.stacks[1]  # rank 1 waits in the collective for rank 0
        text = report.render()
        assert "--- rank 0 stacks ---" in text and "REPRO: python -m fuzz.repro" in text
        _next_case_passes_on_a_fresh_pool(pool)
    finally:
        pool.close()


def test_rank_that_exits_mid_case_is_reported_and_pool_restarts():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:CrashOnM", world_size=3))
    try:
        t0 = time.monotonic()
        report = pool.run(Case("compute", ms=[66], **SMALL), deadline=60)
        assert time.monotonic() - t0 < 30, "driver waited on a dead rank"
        assert report.status == Status.DIED
        # torchrun's account, parsed: the last rank (2) exited with CrashOnM's code 17 -- or, where a peer blocked in
        # the collective with it crashed at once too (seen once in .ci/run, rank 1 SIGSEGV: 18th session), torchrun
        # names the first of the ranks it found dead together, by local rank; that one died of a signal
        died = re.findall(r"rank (\d+) died mid-case: exit code (-?\d+)", report.note)
        assert died, report.note
        assert all((int(r), int(code)) == (2, 17) or (int(r) != 2 and int(code) < 0) for r, code in died), report.note
        assert "rank(s) [2] closed their channel mid-case" in report.note, report.note  # ours: the rank that left
        assert pool.run(Case("compute", ms=[9], **SMALL), deadline=60).passed
        assert pool.starts == 2
    finally:
        pool.close()


def test_rank_killed_from_outside_mid_case_is_reported():
    pool = RankPool(PoolSpec(impl="unfused", world_size=2))
    try:
        pool.start()
        victim = pool.rank_pids()[1]
        killer = threading.Timer(1.5, lambda: os.kill(victim, 9))
        killer.start()
        # rank 0 is late by 5 s, so the case is still running when rank 1 is killed
        report = pool.run(Case("compute", ms=[4], late_rank=0, delay_ms=5000, **SMALL), deadline=60)
        killer.join()
        assert report.status == Status.DIED, report.render()
        assert "rank 1 died mid-case: exit code -9" in report.note, report.note
        # every rank's stacks, the dead one's saying it gave none (not left out: a reader sees where each rank was)
        assert set(report.stacks) == {0, 1}, report.stacks
        assert "no stack" in report.stacks[1], report.stacks[1]
    finally:
        pool.close()


def test_a_failed_check_of_a_rank_that_left_its_peer_in_a_collective_is_reported_within_the_grace_period():
    """The rank with no rows returns early without joining the reduce-scatter (a planted bug) and fails
    ``path_taken``; its peer blocks in the collective. The case is FAILED by that check within the grace period,
    with both ranks' stacks (the peer's in the collective), not after the 120 s deadline."""
    from fuzz.verdict import GRACE_S

    pool = RankPool(PoolSpec(impl="mutants.catalogue:NoValidRowsSkipsCollective", world_size=2))
    try:
        pool.start()
        t0 = time.monotonic()
        report = pool.run(Case("compute", ms=[1], **SMALL), deadline=120)
        assert time.monotonic() - t0 < GRACE_S + 20, "the driver waited for the blocked rank"
        assert report.status == Status.FAILED, report.render()
        failed = {c["name"] for r, c in report.checks() if r == 1 and not c["passed"] and not c["skipped"]}
        assert "path_taken" in failed, report.render()
        assert f"rank(s) [0] gave no result within {GRACE_S:g}s after rank 1 failed " in report.note, report.note
        assert set(report.stacks) == {0, 1} and "reduce_scatter" in report.stacks[0], report.stacks
    finally:
        pool.close()


def test_a_rank_exception_that_blocks_its_peer_is_reported_quickly_as_that_exception():
    """Rank 0 raises before the reduce-scatter rank 1 is blocked in: the driver reports rank 0's exception
    (type, message, traceback, before anything else) within the grace period, with both ranks' stacks
    (rank 1's in the collective), not a hang after the case deadline; the next case gets a fresh pool."""
    from fuzz.verdict import GRACE_S, RAISED_CHECK

    pool = RankPool(PoolSpec(impl="tests.engine.planted_impls:RaisesOnOneRank", world_size=2))
    try:
        pool.start()
        t0 = time.monotonic()
        report = pool.run(Case("compute", ms=[55], **SMALL), deadline=120)
        assert time.monotonic() - t0 < GRACE_S + 20, "the driver waited for the blocked rank"
        raised = [c for _, c in report.checks() if c["name"] == RAISED_CHECK and not c["passed"]]
        # an exception escaping run_case is a harness error; an implementation's valid call that raised,
        # caught by the family as a failed call_raised check, is a failure of the implementation
        assert report.status == (Status.FAILED if raised else Status.ERROR), report.render()
        text = report.render()
        exc = "RuntimeError: planted failure: rank 0 raises at M=55 before the collective"
        assert exc in text and "Traceback (most recent call last)" in text, text
        assert "planted_impls.py" in text  # where it was raised
        assert text.index(exc) < text.index("--- rank 0 stacks ---"), "the exception comes first"
        assert 1 not in report.ranks and f"rank(s) [1] gave no result within {GRACE_S:g}s after rank 0" in report.note
        assert set(report.stacks) == {0, 1} and "reduce_scatter" in report.stacks[1], report.stacks
        _next_case_passes_on_a_fresh_pool(pool)
    finally:
        pool.close()


@pytest.mark.parametrize("impl, check, text", [
    ("DeviceFaultAfterCall", "device_fault", "unspecified launch failure"),
    ("TorchAssertAfterCall", "call_raised", "the implementation's TorchAssertAfterCall.expected_path() raised"),
    ("RaisesInGuardRegions", "call_raised", "the implementation's RaisesInGuardRegions.guard_regions() raised")])
def test_a_gpu_fault_or_a_method_of_the_implementation_raising_after_the_calls_is_its_failure(impl, check, text):
    """A CUDA error surfacing after a call returned (outside the implementation's call: a kernel's trap at the
    harness's next wait) is the implementation's failure -- a failed ``device_fault`` check with the calls the rank
    began -- not a harness ERROR, which the kill matrix cannot count (the GPU wrapper mutant FusedGlobalRankAtLaunch
    stood as an ERROR on an H200, 22nd session); so is any exception out of a method of the implementation (a query
    of its interface: ``call_raised`` naming the method), torch's device-side assert text included (that one is
    never a ``device_fault``)."""
    pool = RankPool(PoolSpec(impl=f"tests.engine.planted_impls:{impl}", world_size=2))
    try:
        report = pool.run(Case("compute", ms=[55, 5], **SMALL), deadline=60)
        rendered = report.render()
        assert report.status == Status.FAILED, rendered
        failed = {(r, c["name"]) for r, c in report.checks() if not c["passed"] and not c["skipped"]}
        assert failed == {(0, check), (1, check)}, rendered
        assert text in rendered and "harness error" not in rendered, rendered
        _next_case_passes_on_a_fresh_pool(pool)
    finally:
        pool.close()


def test_a_failed_case_restarts_the_pool_and_a_passed_one_keeps_it():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:DroppedRankOddM", world_size=2))
    try:
        assert pool.run(Case("compute", ms=[4], **SMALL)).status == Status.PASSED
        pids = pool.rank_pids()
        assert pool.alive and pool.starts == 1  # a passed case keeps the pool
        failed = pool.run(Case("compute", ms=[3], **SMALL))
        assert failed.status == Status.FAILED, failed.render()
        assert not pool.alive and pool.last_pids == pids  # killed at once, not at the next case
        assert pool.run(Case("compute", ms=[4], **SMALL)).passed
        assert pool.starts == 2 and set(pool.rank_pids().values()).isdisjoint(pids.values())
        # each start's line of where its time went (fuzz.pool.startup_line): every stage, in order
        assert len(pool.startups) == 2, pool.startups
        assert open(os.path.join(pool.logdir, "startup.txt")).read() == pool.startups[-1] + "\n"
        for line in pool.startups:
            m = re.fullmatch(r"W=2 started in ([0-9.]+) s: main ([0-9.]+), torch ([0-9.]+), impl ([0-9.]+), "
                             r"device ([0-9.]+), group ([0-9.]+) \(launched at [0-9.]+\)", line)
            assert m, line
            stages = [float(x) for x in m.groups()[1:]]
            assert stages == sorted(stages) and stages[-1] <= float(m.group(1)), line
    finally:
        pool.close()


def test_kill_signals_the_pinned_ranks_never_a_pid_reported_at_hello():
    """The pids ranks reported at hello may belong to someone else by the time the pool is killed. Pretend
    they do (an unrelated process of ours in its own session): kill() must reach the real ranks through
    the pidfds it opened at hello, and leave the unrelated process and its group alone."""
    import subprocess
    import sys

    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    pool = RankPool(PoolSpec(impl="unfused", world_size=2))
    try:
        pool.start()
        ranks = pool.rank_pids()
        for hello in pool.hello.values():
            hello["pid"] = bystander.pid  # what a pid-based kill would signal (and its group)
        pool.kill()
        assert wait_gone(list(ranks.values()), 10), "the real ranks survived the kill"
        assert bystander.poll() is None, "kill() signalled a process that is not the pool's"
    finally:
        pool.close()
        bystander.kill()
        bystander.wait()


def test_a_process_group_is_signalled_only_while_its_pinned_leader_lives():
    import signal
    import subprocess
    import sys

    from fuzz.pool import killpg_while_alive

    leader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    fd = os.pidfd_open(leader.pid)
    try:
        assert killpg_while_alive(fd, leader.pid, 0)  # alive: its group is signalled
        leader.kill()
        leader.wait()
        # exited and reaped: its pid may be anyone's now, so nothing is signalled
        assert not killpg_while_alive(fd, leader.pid, signal.SIGKILL)
    finally:
        os.close(fd)
        if leader.poll() is None:
            leader.kill()


def test_no_orphans_after_close():
    pool = RankPool(PoolSpec(impl="unfused", world_size=3))
    pool.start()
    pids = list(pool.rank_pids().values())
    launcher = pool.proc.pid
    assert pool.run(Case("compute", ms=[3], **SMALL)).passed
    pool.close()
    assert wait_gone(pids + [launcher], 10), "rank or torchrun process outlived the pool"


def test_no_orphans_after_a_hang_kill():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:HangOnM", world_size=2))
    try:
        pool.run(Case("compute", ms=[77], **SMALL), deadline=3)
        pids = list(pool.last_pids.values())
        assert pids
        time.sleep(0.5)
        assert all(gone(p) for p in pids)
    finally:
        pool.close()


def test_two_pools_at_once_do_not_collide():
    pools = [RankPool(PoolSpec(impl="unfused", world_size=2)) for _ in range(2)]
    try:
        threads = [threading.Thread(target=p.start) for p in pools]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for p in pools:
            assert p.alive
            assert p.run(Case("compute", ms=[129], kind="exact", **SMALL)).passed
    finally:
        for p in pools:
            p.close()


def test_unsupported_world_size_is_a_clean_rejection():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:PowerOfTwoGroupsOnly", world_size=3))
    try:
        report = pool.run(Case("compute", ms=[10], **SMALL))
        # A rejected configuration is a skip with its reason, never a passing check.
        assert not report.passed, report.render()
        assert report.status == "skipped", report.render()
        assert report.property_names() == {"unsupported_config"}
        assert "W=3" in report.render()
    finally:
        pool.close()


def test_ranks_report_their_optimize_level():
    pool = RankPool(PoolSpec(impl="unfused", world_size=2, optimize=1))
    try:
        report = pool.run(Case("capacity", ms=[3], bad="over", **SMALL))
        assert report.passed, report.render()
        assert {m["optimize"] for m in report.ranks.values()} == {1}
    finally:
        pool.close()


def test_no_orphans_when_the_driver_is_killed():
    """A driver killed with SIGKILL (no atexit, no close) leaves nothing behind: ranks watch its pid."""
    script = (
        "import json, sys, time\n"
        "from fuzz.case import PoolSpec\n"
        "from fuzz.pool import RankPool\n"
        "p = RankPool(PoolSpec(impl='unfused', world_size=2)); p.start()\n"
        "print(json.dumps({'ranks': list(p.rank_pids().values()), 'launcher': p.proc.pid}), flush=True)\n"
        "time.sleep(600)\n"
    )
    left = kill_the_driver(script)
    assert not left, f"orphans after the driver died: {left}"


def test_hang_has_native_stacks_when_asked(monkeypatch):
    """GEMM_RS_NATIVE_STACKS=on: a stuck rank's report also has its C/C++ frames (gdb, py-spy, or /proc's
    per-thread wait channels) -- what a HANG inside a kernel compile or a device sync needs."""
    from fuzz import config, native_stacks

    monkeypatch.setenv("GEMM_RS_NATIVE_STACKS", "on")
    monkeypatch.setattr(config, "_CURRENT", None)
    pool = RankPool(PoolSpec(impl="mutants.catalogue:HangOnM", world_size=2))
    try:
        assert pool.native_stacks
        report = pool.run(Case("compute", ms=[77], **SMALL), deadline=4)
        assert report.status == Status.HANG
        for r in (0, 1):
            text = report.stacks[r]
            assert f"--- native stacks of rank {r}" in text, text
            native = text.split(f"--- native stacks of rank {r}", 1)[1]
            if native_stacks._command(os.getpid()) is not None:
                assert any(line.lstrip().startswith("#") for line in native.splitlines()), native
            else:
                assert "wchan" in native, native
        assert "reduce_scatter" in report.stacks[1]  # the Python stack is still there
    finally:
        pool.close()


def test_native_stacks_setting_and_proc_fallback():
    from fuzz import native_stacks

    assert native_stacks.wanted(None, "shared-gpu") and native_stacks.wanted("auto", "multi-gpu")
    assert not native_stacks.wanted("auto", "cpu") and not native_stacks.wanted("off", "shared-gpu")
    assert native_stacks.wanted("on", "cpu")
    with pytest.raises(ValueError, match="auto, on or off"):
        native_stacks.wanted("yes", "cpu")
    text = native_stacks.proc_threads(os.getpid())
    assert f"pid {os.getpid()}" in text and "wchan" in text and "tid" in text
    assert "no /proc entry" in native_stacks.proc_threads(2 ** 30)


def test_a_failure_on_mps_client_ranks_says_so_a_pass_and_other_ranks_do_not():
    """Ranks say at hello whether they are MPS clients (``kernel.checks.mps_client``; cpu ranks: None). A failing
    case of a pool with MPS-client ranks names them and says to re-run without MPS (a fault in any client ends
    every client: the failure may be another case's); a passing case, and a failure without MPS, say nothing of it.
    The CPU has no MPS: the driver-side hellos are set as an MPS host's ranks would send them."""
    from fuzz.pool import mps_note

    assert mps_note({0: {"mps": False}, 1: {"mps": None}, 2: {}}) == ""
    assert mps_note({0: {"mps": False}, 1: {"mps": True}, 3: {"mps": True}}).startswith("ranks [1, 3] ran as MPS "
                                                                                         "clients")
    pool = RankPool(PoolSpec(impl="mutants.catalogue:DroppedRankOddM", world_size=2))
    try:
        plain = pool.run(Case("compute", ms=[7], kind="exact", **SMALL), deadline=60)
        assert plain.status == Status.FAILED and "MPS" not in plain.note, plain.render()
        pool.start()
        assert {r: hello["mps"] for r, hello in pool.hello.items()} == {0: None, 1: None}  # cpu ranks: no GPU
        for hello in pool.hello.values():
            hello["mps"] = True
        passed = pool.run(Case("compute", ms=[8], kind="exact", **SMALL), deadline=60)
        assert passed.passed and "MPS" not in passed.note, passed.render()
        failed = pool.run(Case("compute", ms=[7], kind="exact", **SMALL), deadline=60)
        assert failed.status == Status.FAILED, failed.render()
        assert "ranks [0, 1] ran as MPS clients" in failed.note and "MPS clients" in failed.render()
        assert all(msg.get("mps") is None for msg in failed.ranks.values())  # what the ranks themselves said
    finally:
        pool.close()
