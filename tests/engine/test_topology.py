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


def test_gpu_slot_leases_share_a_gpu_up_to_the_slot_count(tmp_path):
    held = [lease_gpus(1, total=2, lock_dir=str(tmp_path), slots=3, prefer=v) for v in range(6)]
    assert all(h is not None for h in held)
    assert sorted(h.gpus[0] for h in held) == [0, 0, 0, 1, 1, 1]  # place v: GPU v % 2
    assert [h.gpus[0] for h in held[:2]] == [0, 1]
    assert lease_gpus(1, total=2, lock_dir=str(tmp_path), slots=3) is None  # all six places taken
    held[4].release()
    again = lease_gpus(1, total=2, lock_dir=str(tmp_path), slots=3)
    assert again is not None and again.gpus == [0]
    with pytest.raises(ValueError):
        lease_gpus(2, total=2, lock_dir=str(tmp_path), slots=3)
    for h in held[:4] + held[5:] + [again]:
        h.release()


def test_pools_per_gpu_is_validated(monkeypatch):
    from fuzz.topology import pools_per_gpu

    monkeypatch.delenv("GEMM_RS_POOLS_PER_GPU", raising=False)
    assert pools_per_gpu() == 1
    monkeypatch.setenv("GEMM_RS_POOLS_PER_GPU", "4")
    assert pools_per_gpu() == 4
    for bad in ("0", "two"):
        monkeypatch.setenv("GEMM_RS_POOLS_PER_GPU", bad)
        with pytest.raises(ValueError):
            pools_per_gpu()


class Cfg:
    """The gate's command-line options, as pytest's config hands them to gate_matrix."""

    def __init__(self, **opts):
        self.opts = {"--topology": None, "--impl": None, "--world-sizes": None, **opts}

    def getoption(self, name):
        return self.opts[name]


def test_gate_matrix_per_host(monkeypatch):
    import fuzz.conftest as fc

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


def test_a_gpu_only_implementation_asked_for_on_a_cpu_host_is_a_failing_entry_not_dropped(monkeypatch):
    """--impl fused on a CPU-only host (or --topology cpu): one entry that fails with the reason, so the
    gate ends FAIL; never an empty matrix (pytest: no tests) and never a pass."""
    import fuzz.conftest as fc

    monkeypatch.setattr(fc, "available_topologies", lambda: ["cpu"])
    monkeypatch.setattr(fc, "gpu_count", lambda: 0)
    assert fc.gate_matrix(Cfg(**{"--impl": "fused,unfused", "--world-sizes": "2"})) == [
        ("fused", fc.UNRUNNABLE, 0), ("unfused", "cpu", 2)]
    with pytest.raises(pytest.fail.Exception, match="--impl fused cannot be gated here: the fused CuTe DSL kernel"):
        fc.get_pool("fused", fc.UNRUNNABLE, 0)
    monkeypatch.setattr(fc, "available_topologies", lambda: ["cpu", "shared-gpu"])
    assert fc.gate_matrix(Cfg(**{"--impl": "torch-async-tp", "--topology": "cpu"})) == [
        ("torch-async-tp", fc.UNRUNNABLE, 0)]
    assert ("fused", "shared-gpu", 2) in fc.gate_matrix(Cfg(**{"--impl": "fused"}))


def test_shared_gpu_pools_are_dealt_over_gpu_places_largest_w_first(monkeypatch):
    import fuzz.conftest as fc

    class Item:
        def __init__(self, gate):
            self.callspec = type("CallSpec", (), {"params": {"gate": gate}})()
            self.groups = []

        def add_marker(self, mark):
            self.groups += list(mark.args)

    gates = [(i, "shared-gpu", w) for i in ("fused", "unfused") for w in (1, 2, 4, 8)]
    gates += [("unfused", "cpu", 2), ("fused", "multi-gpu", 2)]
    monkeypatch.setattr(fc, "gpu_count", lambda: 1)
    for slots, expect in ((1, {"gpu-0"}), (4, {f"gpu-{k}" for k in range(4)})):
        monkeypatch.setenv("GEMM_RS_POOLS_PER_GPU", str(slots))
        items = [Item(g) for g in gates for _ in range(2)]  # two tests per combination
        fc.pytest_collection_modifyitems(None, items)
        by_gate = {}
        for it in items:
            by_gate.setdefault(it.callspec.params["gate"], []).extend(it.groups)
        assert by_gate[("unfused", "cpu", 2)] == []  # cpu tests spread freely
        assert by_gate[("fused", "multi-gpu", 2)] == ["multi-gpu"] * 2
        shared = {g: grp for g, grp in by_gate.items() if g[1] == "shared-gpu"}
        assert all(len(grp) == 2 and len(set(grp)) == 1 for grp in shared.values())  # one pool, one worker
        assert {grp[0] for grp in shared.values()} == expect
    assert by_gate[("fused", "shared-gpu", 8)] != by_gate[("unfused", "shared-gpu", 8)]  # the two W=8 pools apart


def test_gpu_ranks_share_a_host_wide_kernel_cache_by_default(monkeypatch, tmp_path):
    """The gate's GPU pools compile each kernel once per host (issue 17): a default cache directory for
    GPU topologies, the user's choice when set, ``none`` off; never on the cpu topology."""
    from kernel.fused.compile import kernel_cache_dir

    monkeypatch.delenv("GEMM_RS_KERNEL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    for topology in ("shared-gpu", "multi-gpu"):
        assert rank_env(topology)["GEMM_RS_KERNEL_CACHE_DIR"] == str(tmp_path / "gemm-rs" / "kernels")
    assert "GEMM_RS_KERNEL_CACHE_DIR" not in rank_env("cpu")
    monkeypatch.setenv("GEMM_RS_KERNEL_CACHE_DIR", "none")
    assert rank_env("shared-gpu")["GEMM_RS_KERNEL_CACHE_DIR"] == "none"
    assert kernel_cache_dir() is None
    monkeypatch.setenv("GEMM_RS_KERNEL_CACHE_DIR", str(tmp_path / "mine"))
    assert kernel_cache_dir() == str(tmp_path / "mine")
