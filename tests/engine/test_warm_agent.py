"""A pool's torchrun agent from a spare (fuzz/warm_agent.py): the spare becomes the pool's agent with the pool's
environment, log and optimisation level; a spare that does not match, or died, is never used; a spare nobody
needs goes away by itself."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from fuzz import warm_agent
from fuzz.case import Case, PoolSpec
from fuzz.pool import RankPool, agent_env, rank_process_env

pytestmark = pytest.mark.multiproc

SMALL = dict(seed=1, N=64, K=64, max_M=256)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _env(optimize: int) -> dict[str, str]:
    return agent_env(*rank_process_env(PoolSpec(optimize=optimize), None, {}, ""))


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _wait_gone(proc: subprocess.Popen, timeout: float = 60.0) -> bool:
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


@pytest.fixture(autouse=True)
def _no_spares_left():
    warm_agent.discard_all()
    yield
    warm_agent.discard_all()


@pytest.mark.parametrize("optimize", [0, 1])
def test_pool_agent_is_the_spare_and_its_ranks_run_as_the_pool_says(optimize):
    warm_agent.spawn(_env(optimize), REPO)
    (spare,) = warm_agent._SPARES.values()
    pool = RankPool(PoolSpec(impl="unfused", world_size=2, optimize=optimize))
    try:
        report = pool.run(Case("compute", ms=[5, 64], **SMALL), deadline=120)
        assert report.passed, report.render()
        assert pool.proc is spare  # the spare is the agent: its pid is torchrun's
        with open(os.path.join(pool.logdir, "torchrun.log")) as f:
            assert f"the warm agent pid {spare.pid}" in f.read()
        assert {_ppid(pid) for pid in pool.rank_pids().values()} == {spare.pid}  # forked by it
        assert {m.get("optimize") for m in report.ranks.values()} == {optimize}
        # the next pool's agent is waiting already
        assert len(warm_agent._SPARES) == 1 and next(iter(warm_agent._SPARES.values())) is not spare
    finally:
        pool.close()


def test_spare_of_another_optimisation_level_is_not_used():
    warm_agent.spawn(_env(0), REPO)
    (spare,) = warm_agent._SPARES.values()
    pool = RankPool(PoolSpec(impl="unfused", world_size=2, optimize=1))
    try:
        report = pool.run(Case("compute", ms=[5], **SMALL), deadline=120)
        assert report.passed, report.render()
        assert pool.proc is not spare and spare.poll() is None  # still waiting for a pool of its own kind
        assert {m.get("optimize") for m in report.ranks.values()} == {1}
    finally:
        pool.close()


def test_dead_spare_is_not_used():
    warm_agent.spawn(_env(0), REPO)
    (spare,) = warm_agent._SPARES.values()
    spare.kill()
    spare.wait()
    pool = RankPool(PoolSpec(impl="unfused", world_size=2, optimize=0))
    try:
        report = pool.run(Case("compute", ms=[5], **SMALL), deadline=120)
        assert report.passed, report.render()
        assert pool.proc is not spare
    finally:
        pool.close()


def test_spare_key_is_the_import_time_environment():
    env = _env(1)
    key = warm_agent.spare_key(env, REPO)
    later = dict(env, _GEMM_RS_DRIVER="127.0.0.1:1", CUDA_VISIBLE_DEVICES="3",
                 TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES="1")
    assert warm_agent.spare_key(later, REPO) == key  # read after the order: not the spare's business
    for name, value in (("PYTHONOPTIMIZE", "2"), ("OMP_NUM_THREADS", "4"), ("PYTHONPATH", "/elsewhere"),
                        ("TORCH_LOGS", "+dynamo"), ("LD_PRELOAD", "/x.so")):
        assert warm_agent.spare_key(dict(env, **{name: value}), REPO) != key, name
    assert warm_agent.spare_key(env, "/tmp") != key
    assert warm_agent.launch([sys.executable, "-m", "fuzz.something_else"], env, REPO, None) is None


def test_spare_nobody_orders_exits_when_its_spawner_lets_go():
    warm_agent.spawn(_env(0), REPO)
    (spare,) = warm_agent._SPARES.values()
    spare.stdin.close()  # what the spawner's exit does to the pipe
    assert _wait_gone(spare), "a spare outlived the process that spawned it"
    time.sleep(0.1)
    assert not os.path.exists(spare.gemm_rs_log)
