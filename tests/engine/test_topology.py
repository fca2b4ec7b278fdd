"""Topology wiring, checked on CPU: the environment each topology gives its ranks (multicast always off),
GPU leases that never overlap between workers, and which (implementation, topology, W) the gate picks."""

from __future__ import annotations

import pytest

from fuzz.topology import MULTICAST_OFF, TOPOLOGIES, lease_gpus, rank_env


@pytest.mark.parametrize("topology", TOPOLOGIES)
def test_every_topology_turns_multicast_off(topology):
    env = rank_env(topology, gpus=[3, 5])
    for key, value in MULTICAST_OFF.items():
        assert env[key] == value
    assert env["GEMM_RS_TOPOLOGY"] == topology


def test_topology_specific_environment():
    assert rank_env("cpu")["CUDA_VISIBLE_DEVICES"] == ""
    shared = rank_env("shared-gpu", gpus=[2])
    assert shared["CUDA_VISIBLE_DEVICES"] == "2" and shared["TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES"] == "1"
    assert rank_env("multi-gpu", gpus=[4, 5, 6, 7])["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    with pytest.raises(ValueError):
        rank_env("nvlink-multicast")


def test_multicast_off_even_if_the_caller_turned_it_on(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    assert rank_env("multi-gpu")["NCCL_NVLS_ENABLE"] == "0"


def test_gpu_leases_never_overlap(tmp_path):
    a = lease_gpus(2, total=8, lock_dir=str(tmp_path))
    b = lease_gpus(4, total=8, lock_dir=str(tmp_path))
    c = lease_gpus(4, total=8, lock_dir=str(tmp_path))  # only 2 left
    assert a is not None and b is not None and c is None
    assert not set(a.gpus) & set(b.gpus)
    a.release()
    d = lease_gpus(2, total=8, lock_dir=str(tmp_path), prefer=6)
    assert d is not None and not set(d.gpus) & set(b.gpus)
    assert lease_gpus(9, total=8, lock_dir=str(tmp_path)) is None
    b.release()
    d.release()


def test_gate_matrix_per_host(monkeypatch):
    import fuzz.conftest as fc

    class Cfg:
        def __init__(self, **opts):
            self.opts = {"--topology": None, "--impl": None, "--world-sizes": None, **opts}

        def getoption(self, name):
            return self.opts[name]

    monkeypatch.setattr(fc, "available_topologies", lambda: ["cpu"])
    monkeypatch.setattr(fc, "_has_hopper", lambda: False)
    assert fc.gate_matrix(Cfg()) == [("unfused", "cpu", w) for w in (1, 2, 3, 4, 8)]
    monkeypatch.setattr(fc, "available_topologies", lambda: ["cpu", "shared-gpu", "multi-gpu"])
    monkeypatch.setattr(fc, "_has_hopper", lambda: True)
    monkeypatch.setattr(fc, "gpu_count", lambda: 8)
    combos = fc.gate_matrix(Cfg())
    assert ("fused", "cpu", 2) not in combos  # the fused kernel needs a GPU
    assert {("fused", "shared-gpu", w) for w in (1, 2, 4, 8)} <= set(combos)
    assert {("fused", "multi-gpu", w) for w in (2, 4, 8)} <= set(combos)
    assert ("fused", "multi-gpu", 1) not in combos
    monkeypatch.setattr(fc, "gpu_count", lambda: 2)
    assert {w for i, t, w in fc.gate_matrix(Cfg()) if t == "multi-gpu"} == {2}
    assert fc.gate_matrix(Cfg(**{"--impl": "unfused", "--topology": "cpu", "--world-sizes": "2,3"})) == [
        ("unfused", "cpu", 2), ("unfused", "cpu", 3)]


@pytest.mark.multiproc
def test_separate_control_group_wiring_on_cpu():
    """multi-gpu ranks agree on verdicts over a separate gloo group (NCCL carries the data); the same
    wiring runs here with gloo standing in for NCCL."""
    from fuzz.case import Case, PoolSpec
    from fuzz.pool import RankPool

    pool = RankPool(PoolSpec(impl="unfused", world_size=3), extra_env={"GEMM_RS_SEPARATE_CTRL_GROUP": "1"})
    try:
        ok = pool.run(Case("compute", seed=2, N=64, K=64, max_M=256, ms=[7, 129], kind="exact"))
        assert ok.passed, ok.render()
        bad = RankPool(PoolSpec(impl="mutants.catalogue:DroppedRankOddM", world_size=3),
                       extra_env={"GEMM_RS_SEPARATE_CTRL_GROUP": "1"})
        try:
            failed = bad.run(Case("compute", seed=2, N=64, K=64, max_M=256, ms=[7]))
        finally:
            bad.close()
        assert failed.status == "failed"
        assert all(m["group_failed"] for m in failed.ranks.values())  # every rank learned the verdict
    finally:
        pool.close()
