"""A pool's life at its edges (fuzz/pool.py, fuzz/rank_worker.py): ranks that never say hello fail the start
within its timeout and leave no process behind; a driver killed while a rank is stuck mid-case leaves no rank
behind (the ranks watch the driver's pid: nothing else ends a rank blocked in a collective)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from _orphans import gone, kill_the_driver

from fuzz import pool as pool_module
from fuzz.case import PoolSpec
from fuzz.pool import PoolError, RankPool

pytestmark = pytest.mark.multiproc




def test_ranks_that_never_say_hello_fail_the_start_within_its_timeout(monkeypatch):
    monkeypatch.setattr(pool_module, "START_TIMEOUT", 6.0)
    pool = RankPool(PoolSpec(impl="tests.engine.never_loads:Anything", world_size=2),
                    extra_env={"_GEMM_RS_TEST_NEVER_LOADS": "1"})
    launched = []
    real_launch = pool.local.launch
    monkeypatch.setattr(pool.local, "launch", lambda *a: (real_launch(*a), launched.append(pool.local.proc.pid)))
    raised: list[BaseException] = []

    def start() -> None:
        try:
            pool.start()
        except BaseException as exc:  # noqa: BLE001 -- judged below
            raised.append(exc)

    starter = threading.Thread(target=start, daemon=True)
    try:
        starter.start()
        starter.join(6.0 + 30)
        assert not starter.is_alive(), "the start outlived its 6 s timeout by 30 s (the timeout was not kept)"
        assert len(raised) == 1 and isinstance(raised[0], PoolError), raised
        assert "pool did not start within 6s" in str(raised[0]), raised[0]
        assert not pool.alive and pool.proc is None
        assert launched and gone(launched[0]), "torchrun outlived the failed start"
    finally:
        pool.close()  # (a start still waiting sees its torchrun gone and ends)
        starter.join(30)


def test_no_orphans_when_the_driver_is_killed_while_a_rank_is_stuck_mid_case():
    """Rank 0 of HangOnM loops forever at M = 77 and rank 1 waits for it in the reduce-scatter (gloo's 30 min
    timeout); the driver is SIGKILLed mid-case, so no ``stop`` and no closed channel is read by either: each rank's
    watch on the driver's pid (``_GEMM_RS_DRIVER_PID``) is what ends it."""
    script = (
        "import json, threading, time\n"
        "from fuzz.case import Case, PoolSpec\n"
        "from fuzz.pool import RankPool\n"
        "p = RankPool(PoolSpec(impl='mutants.catalogue:HangOnM', world_size=2)); p.start()\n"
        "case = Case('compute', ms=[77], seed=1, N=64, K=64, max_M=256)\n"
        "threading.Thread(target=p.run, args=(case, 600.0), daemon=True).start()\n"
        "time.sleep(3)\n"
        "print(json.dumps({'ranks': list(p.rank_pids().values()), 'launcher': p.proc.pid}), flush=True)\n"
        "time.sleep(600)\n"
    )
    left = kill_the_driver(script)
    assert not left, f"orphans after the driver died mid-case: {left}"


def test_a_rank_that_died_between_cases_is_not_blamed_on_the_next_case():
    """A rank killed after its case passed (its torchrun then exits): the pool is no longer alive, so the next case
    starts a fresh pool and passes there -- never a DIED of a case that had nothing to do with it."""
    from fuzz.case import Case

    small = dict(seed=1, N=64, K=64, max_M=256)
    pool = RankPool(PoolSpec(impl="unfused", world_size=2))
    try:
        assert pool.run(Case("compute", ms=[5], **small), deadline=60).passed
        victim = pool.rank_pids()[1]
        os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not pool.local.exited():
            time.sleep(0.1)
        assert pool.local.exited(), "torchrun did not exit after its rank died"
        assert not pool.alive
        report = pool.run(Case("compute", ms=[9], **small), deadline=60)
        assert report.passed, report.render()
        assert pool.starts == 2
    finally:
        pool.close()


def test_close_stops_the_ranks_politely_and_their_torchrun_exits_by_itself():
    """``close()`` sends ``stop``: every rank leaves its loop (its instances closed, its process group destroyed) and
    torchrun exits 0 within the grace period -- not killed after waiting it out (10 s per pool closed)."""
    pool = RankPool(PoolSpec(impl="unfused", world_size=2))
    try:
        pool.start()
        agent = pool.proc
        t0 = time.monotonic()
        pool.close(grace_s=10.0)
        assert agent.returncode == 0, f"torchrun was killed (exit {agent.returncode}): the ranks ignored stop"
        assert time.monotonic() - t0 < 10.0
    finally:
        pool.close()


def test_a_sanitizer_nodes_kill_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path):
    """fuzz/node.py ``LocalNode.kill`` under a sanitizer: SIGTERM first (so it can write what it found), then, while
    anything is still there after the wait, SIGKILL -- a process ignoring SIGTERM is gone all the same."""
    from fuzz.node import LocalNode

    node = LocalNode(0, str(tmp_path), sanitizer=True)
    node.proc = subprocess.Popen(
        [sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                               "print('ready', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True, start_new_session=True)
    proc = node.proc
    try:
        assert proc.stdout.readline().strip() == "ready"
        node.kill()
        assert proc.poll() == -signal.SIGKILL, f"still running or not killed: {proc.poll()}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
