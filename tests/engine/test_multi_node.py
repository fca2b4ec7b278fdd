"""A rank pool across two torchrun agents ("nodes"), on this one machine: the driver's node and one node
agent (``python -m fuzz.node_agent``, a subprocess), joined by torchrun's c10d rendezvous, cpu topology.
The guarantees hold across nodes: a passing case passes, a rank stuck on the other node is a HANG with the
stacks of every rank of both nodes, a rank dying there a DIED naming it and its exit code, and a closed
pool leaves nothing behind on either node."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from fuzz.case import Case, PoolSpec
from fuzz.network import PoolNetwork, free_port
from fuzz.pool import RankPool
from fuzz.status import Status

pytestmark = pytest.mark.multiproc

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = dict(seed=1, N=64, K=64, max_M=256)
PLANTED = "tests.engine.planted_impls:"


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@pytest.fixture
def agent_network():
    """A node agent dialling a control address of its own; the pool's network to give it."""
    address = f"127.0.0.1:{free_port()}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p)}
    agent = subprocess.Popen([sys.executable, "-m", "fuzz.node_agent", "--driver", address, "--idle-exit", "120"],
                             cwd=REPO, env=env, start_new_session=True)
    try:
        yield agent, PoolNetwork(address)
    finally:
        agent.terminate()
        agent.wait(timeout=30)


def _nothing_left(agent: subprocess.Popen, pids: list[int]) -> None:
    """Neither node keeps anything of the pool: no torchrun or rank under the agent, none of ``pids``."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (_descendants(agent.pid) or any(_alive(p) for p in pids)):
        time.sleep(0.2)
    assert _descendants(agent.pid) == [], "the node agent's torchrun or ranks outlived the pool"
    assert not [p for p in pids if _alive(p)], "a rank outlived the pool"
    assert agent.poll() is None, "the node agent should outlive the pool (it serves the next one)"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_hang_on_the_other_node_has_the_stacks_of_both_nodes_then_the_pool_restarts(agent_network):
    agent, network = agent_network
    pool = RankPool(PoolSpec(impl=PLANTED + "HangsOnRemoteNode", world_size=2, nnodes=2), network=network)
    try:
        ok = pool.run(Case("compute", ms=[5], kind="exact", **SMALL), deadline=60)
        assert ok.passed, ok.render()
        assert sorted(h["node"] for h in pool.hello.values()) == [0, 1]
        remote = next(r for r, h in pool.hello.items() if h["node"] == 1)
        report = pool.run(Case("compute", ms=[55], **SMALL), deadline=3)
        assert report.status == Status.HANG, report.render()
        assert set(report.stacks) == {0, 1}
        assert "HangsOnRemoteNode" in report.stacks[remote] or "planted_impls.py" in report.stacks[remote]
        assert "reduce_scatter" in report.stacks[1 - remote]  # the driver's node waits in the collective
        assert "--nnodes 2" in report.repro()
        assert not pool.alive  # killed on both nodes at once
        pids = list(pool.last_pids.values())
        assert len(pids) == 2
        again = pool.run(Case("compute", ms=[9], **SMALL), deadline=60)  # a fresh pool: the agent launches again
        assert again.passed, again.render()
        assert pool.starts == 2
        pids += list(pool.rank_pids().values())
    finally:
        pool.close()
    _nothing_left(agent, pids)


def test_four_ranks_on_two_nodes_pass_and_a_rank_dying_on_the_other_node_is_died(agent_network):
    agent, network = agent_network
    pool = RankPool(PoolSpec(impl=PLANTED + "DiesOnRemoteNode", world_size=4, nnodes=2), network=network)
    try:
        ok = pool.run(Case("compute", ms=[130], kind="exact", **SMALL), deadline=60)
        assert ok.passed, ok.render()
        assert sorted(h["node"] for h in pool.hello.values()) == [0, 0, 1, 1]
        pids = list(pool.rank_pids().values())
        victim = next(r for r, h in pool.hello.items() if h["node"] == 1 and r in pool.agents[0].pids
                      and _local_rank(pool, r) == 1)
        t0 = time.monotonic()
        report = pool.run(Case("compute", ms=[55], **SMALL), deadline=60)
        assert time.monotonic() - t0 < 30, "driver waited on a dead rank"
        assert report.status == Status.DIED, report.render()
        assert f"rank {victim} died mid-case: exit code 17" in report.note, report.note
        assert not pool.alive
    finally:
        pool.close()
    _nothing_left(agent, pids)


def _local_rank(pool: RankPool, rank: int) -> int:
    """Local rank of ``rank`` on its node: its place among that node's ranks (torchrun numbers them so)."""
    node = pool.hello[rank]["node"]
    return sorted(r for r, h in pool.hello.items() if h["node"] == node).index(rank)


def test_a_torchrun_that_exits_on_the_other_node_while_starting_fails_the_start_at_once(agent_network, monkeypatch):
    """The other node's ranks exit (code 5) before they say hello, so its torchrun exits; the driver's ranks wait in
    the process group's rendezvous for them. The node agent's word that its torchrun exited must end the start at
    once, naming it -- not the start timeout."""
    from fuzz import pool as pool_module
    from fuzz.pool import PoolError

    monkeypatch.setattr(pool_module, "START_TIMEOUT", 60.0)
    agent, network = agent_network
    pool = RankPool(PoolSpec(impl="tests.engine.never_loads:Anything", world_size=2, nnodes=2), network=network,
                    extra_env={"_GEMM_RS_TEST_EXIT_ON_NODE": "1"})
    try:
        t0 = time.monotonic()
        with pytest.raises(PoolError, match=r"torchrun on node 1 .* exited with \d+ while starting"):
            pool.start()
        assert time.monotonic() - t0 < 40, "the driver waited for the start timeout"
    finally:
        pool.close()
    _nothing_left(agent, [])
