"""What reaches a pool's ranks of the driver's environment (fuzz/pool.py: ``rank_process_env``, ``agent_env``; the
node agent's ``launch`` on other hosts): multicast stays off (CONTRACT.md) and the optimisation level is the pool's,
whatever the caller's environment says -- seen in the ranks themselves, forked by torchrun's agent (a warm spare or
a new process), and in the environment a node agent gives its torchrun."""

from __future__ import annotations

import pytest

from fuzz import warm_agent
from fuzz.case import Case, PoolSpec
from fuzz.pool import _REPO, RankPool, agent_env, rank_process_env
from fuzz.topology import MULTICAST_OFF
from tests.engine.planted_impls import TRIGGER_M

SMALL = dict(seed=1, N=64, K=64, max_M=256)
#: The caller's environment turned multicast on and asks for -O1: a pool at -O0 must overrule both.
CALLER = {"NCCL_NVLS_ENABLE": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "0", "NVSHMEM_DISABLE_NVLS": "0",
          "PYTHONOPTIMIZE": "1"}


def _caller(monkeypatch) -> None:
    for k, v in CALLER.items():
        monkeypatch.setenv(k, v)


def test_the_agents_environment_overrules_the_callers_multicast_and_optimisation(monkeypatch):
    _caller(monkeypatch)
    env = agent_env(*rank_process_env(PoolSpec(impl="unfused", world_size=2, optimize=0), None, {}, "h:1"))
    assert {k: env.get(k) for k in MULTICAST_OFF} == MULTICAST_OFF
    assert "PYTHONOPTIMIZE" not in env  # -O0: the caller's level is dropped, not inherited
    env1 = agent_env(*rank_process_env(PoolSpec(impl="unfused", world_size=2, optimize=1), None, {}, "h:1"))
    assert env1["PYTHONOPTIMIZE"] == "1" and env1["NCCL_NVLS_ENABLE"] == "0"


@pytest.mark.parametrize("var", sorted(MULTICAST_OFF))
def test_extra_env_cannot_turn_multicast_back_on(var):
    """A caller's explicit ``extra_env`` is the one way past the host environment: multicast is refused there too,
    while the same variable at its off value, and any other variable, pass through."""
    spec = PoolSpec(impl="unfused", world_size=2, optimize=0)
    with pytest.raises(ValueError, match=var):
        rank_process_env(spec, None, {var: CALLER[var]}, "h:1")
    add, _ = rank_process_env(spec, None, {var: MULTICAST_OFF[var], "OTHER_TOOL_SETTING": "x"}, "h:1")
    assert add[var] == MULTICAST_OFF[var] and add["OTHER_TOOL_SETTING"] == "x"


def test_a_node_agent_gives_its_torchrun_the_drivers_rank_environment_over_its_hosts(monkeypatch, tmp_path):
    """Another host's environment (its own NCCL_NVLS_ENABLE=1, PYTHONOPTIMIZE) never overrules what the driver
    sends: multicast off, the pool's optimisation level, the unset variables gone."""
    from fuzz import node_agent
    from fuzz.topology import rank_env

    _caller(monkeypatch)
    seen = {}
    monkeypatch.setattr(node_agent.LocalNode, "launch", lambda self, cmd, env, cwd: seen.update(env=env, cmd=cmd))
    agent = node_agent.NodeAgent("127.0.0.1:1")
    monkeypatch.setattr(agent, "logdir", str(tmp_path))
    add, unset = rank_process_env(PoolSpec(impl="unfused", world_size=4, optimize=0, nnodes=2), None, {}, "h:1")
    agent.launch({"node": 1, "env": dict(add, **rank_env("cpu", None)), "unset": list(unset), "nproc": 2,
                  "nnodes": 2, "rdzv_endpoint": "h:2", "run_id": "r", "sanitizer": None, "native_stacks": False})
    env = seen["env"]
    assert {k: env.get(k) for k in MULTICAST_OFF} == MULTICAST_OFF
    assert "PYTHONOPTIMIZE" not in env
    assert env["_GEMM_RS_NODE"] == "1"


@pytest.mark.multiproc
@pytest.mark.parametrize("warm", [True, False], ids=["spare-agent", "new-agent"])
def test_ranks_run_with_multicast_off_and_the_pools_optimisation_whatever_the_caller_set(monkeypatch, warm):
    """End to end: the driver's environment turns multicast on and says PYTHONOPTIMIZE=1; the ranks of a -O0 pool
    (forked by a warm spare, or by a torchrun agent started for the pool) see the three multicast-off variables
    and no PYTHONOPTIMIZE, and run at -O0. A spare's environment is the pool's alone: a variable the spare was
    started with and the pool's environment lacks does not reach the ranks (fuzz/warm_agent.py's ``serve``)."""
    from fuzz import config

    _caller(monkeypatch)
    monkeypatch.setattr(config, "_CURRENT", config.resolve({}, {"GEMM_RS_WARM_AGENTS": "1" if warm else "0"}))
    warm_agent.discard_all()
    spec = PoolSpec(impl="tests.engine.planted_impls:RaisesWithItsEnvironment", world_size=2, optimize=0)
    if warm:
        spare_env = agent_env(*rank_process_env(spec, None, {}, ""))
        warm_agent.spawn(dict(spare_env, _GEMM_RS_TEST_SPARE_ONLY="1"), _REPO)
    pool = RankPool(spec)
    try:
        report = pool.run(Case("compute", ms=[TRIGGER_M], **SMALL), deadline=120)
        text = report.render()
        assert report.status == "failed", text
        for r in (0, 1):
            line = next((ln for ln in text.splitlines() if f"planted: rank {r} environment:" in ln), None)
            assert line is not None, text
            for k, v in MULTICAST_OFF.items():
                assert f"{k}={v} " in line, line
            assert "PYTHONOPTIMIZE unset" in line and "_GEMM_RS_TEST_SPARE_ONLY unset" in line, line
        assert {m.get("optimize") for m in report.ranks.values()} == {0}
        if warm:
            with open(f"{pool.logdir}/torchrun.log") as f:
                assert "the warm agent pid" in f.read()
    finally:
        pool.close()
        warm_agent.discard_all()
