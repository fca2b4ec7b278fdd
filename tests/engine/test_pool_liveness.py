"""The fuzz engine's own guarantees: a hang becomes a failure with every rank's stack, a dead rank is
reported and never hangs the driver, the pool restarts, no process outlives it, ports never collide."""

from __future__ import annotations

import os
import threading
import time

import pytest

from fuzz.case import Case, PoolSpec
from fuzz.pool import RankPool

pytestmark = pytest.mark.multiproc

SMALL = dict(seed=1, N=64, K=64, max_M=256)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"  # a zombie holds nothing
    except OSError:
        return True


def test_hang_reports_every_rank_stack_then_pool_restarts():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:HangOnM", world_size=2))
    try:
        report = pool.run(Case("compute", ms=[77], **SMALL), deadline=4)
        assert report.status == "hang"
        assert set(report.stacks) == {0, 1}
        assert "HangOnM" in report.stacks[0] or "catalogue.py" in report.stacks[0]
        assert "reduce_scatter" in report.stacks[1]  # rank 1 waits in the collective for rank 0
        text = report.render()
        assert "--- rank 0 stacks ---" in text and "REPRO: python -m fuzz.repro" in text
        assert not pool.alive
        after = pool.run(Case("compute", ms=[5], **SMALL), deadline=60)
        assert after.passed, after.render()
        assert pool.starts == 2
    finally:
        pool.close()


def test_rank_that_exits_mid_case_is_reported_and_pool_restarts():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:CrashOnM", world_size=3))
    try:
        t0 = time.monotonic()
        report = pool.run(Case("compute", ms=[66], **SMALL), deadline=60)
        assert time.monotonic() - t0 < 30, "driver waited on a dead rank"
        assert report.status == "died"
        assert "exitcode  : 17" in report.note or "exit code" in report.note
        assert pool.run(Case("compute", ms=[9], **SMALL), deadline=60).passed
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
        assert report.status == "died", report.render()
        assert "rank 1" in report.note or "torchrun" in report.note
    finally:
        pool.close()


def test_no_orphans_after_close():
    pool = RankPool(PoolSpec(impl="unfused", world_size=3))
    pool.start()
    pids = list(pool.rank_pids().values())
    launcher = pool.proc.pid
    assert pool.run(Case("compute", ms=[3], **SMALL)).passed
    pool.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(_gone(p) for p in pids + [launcher]):
        time.sleep(0.2)
    assert all(_gone(p) for p in pids + [launcher]), "rank or torchrun process outlived the pool"


def test_no_orphans_after_a_hang_kill():
    pool = RankPool(PoolSpec(impl="mutants.catalogue:HangOnM", world_size=2))
    try:
        pool.run(Case("compute", ms=[77], **SMALL), deadline=3)
        pids = list(pool.last_pids.values())
        assert pids
        time.sleep(0.5)
        assert all(_gone(p) for p in pids)
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
    import json
    import signal
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = (
        "import json, sys, time\n"
        "from fuzz.case import PoolSpec\n"
        "from fuzz.pool import RankPool\n"
        "p = RankPool(PoolSpec(impl='unfused', world_size=2)); p.start()\n"
        "print(json.dumps({'ranks': list(p.rank_pids().values()), 'launcher': p.proc.pid}), flush=True)\n"
        "time.sleep(600)\n"
    )
    driver = subprocess.Popen([sys.executable, "-c", script], cwd=repo, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": repo})
    try:
        pids = json.loads(driver.stdout.readline())
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=10)
        everything = pids["ranks"] + [pids["launcher"]]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(_gone(p) for p in everything):
            time.sleep(0.5)
        assert all(_gone(p) for p in everything), f"orphans after the driver died: {everything}"
    finally:
        if driver.poll() is None:
            driver.kill()
