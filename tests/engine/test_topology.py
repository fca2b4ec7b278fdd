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
    assert env["_GEMM_RS_TOPOLOGY"] == topology


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
    # torchrun's agent forks the ranks: it must not initialise CUDA first (it asks through NVML)
    assert all(rank_env(t)["PYTORCH_NVML_BASED_CUDA_CHECK"] == "1" for t in ("cpu", "shared-gpu", "multi-gpu"))


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
    for h in held[:4] + held[5:] + [again]:
        h.release()


def test_multi_gpu_slot_leases_share_gpu_sets(tmp_path):
    """Several multi-gpu pools (W = 2) on one pair of GPUs, up to the slot count; on 4 GPUs, place v is slot
    v // 2 of the pair v % 2; slot 0 is the exclusive lease's lock."""
    held = [lease_gpus(2, total=2, lock_dir=str(tmp_path), slots=3, prefer=v) for v in range(3)]
    assert [h.gpus for h in held] == [[0, 1]] * 3
    assert lease_gpus(2, total=2, lock_dir=str(tmp_path), slots=3) is None  # every slot of the pair taken
    assert lease_gpus(1, total=2, lock_dir=str(tmp_path)) is None  # slot 0 holds the whole-GPU locks
    held[1].release()
    again = lease_gpus(2, total=2, lock_dir=str(tmp_path), slots=3)
    assert again is not None and again.gpus == [0, 1]
    for h in held[:1] + held[2:] + [again]:
        h.release()
    four = [lease_gpus(2, total=4, lock_dir=str(tmp_path / "four"), slots=2, prefer=v) for v in range(4)]
    assert [h.gpus for h in four] == [[0, 1], [2, 3], [0, 1], [2, 3]]
    assert lease_gpus(2, total=4, lock_dir=str(tmp_path / "four"), slots=2) is None
    assert lease_gpus(4, total=4, lock_dir=str(tmp_path / "four"), slots=2) is None  # W = 4: one set, taken
    for h in four:
        h.release()
    assert lease_gpus(3, total=2, lock_dir=str(tmp_path), slots=2) is None  # more GPUs than the host has


def test_pools_per_gpu_is_validated(monkeypatch):
    from fuzz.topology import pools_per_gpu

    assert pools_per_gpu("1") == 1
    assert pools_per_gpu("4") == 4
    for bad in ("0", "two"):
        with pytest.raises(ValueError):
            pools_per_gpu(bad)


def Cfg(**flags):  # noqa: N802 — the gate's settings from these flags alone (no environment)
    from fuzz.config import resolve

    return resolve({k.lstrip("-").replace("-", "_"): v for k, v in flags.items()}, environ={})


def test_gate_matrix_per_host(monkeypatch):
    import fuzz.conftest as fc

    monkeypatch.setattr(fc, "available_topologies", lambda: ["cpu"])
    monkeypatch.setattr(fc, "_has_hopper", lambda: False)
    assert fc.gate_matrix(Cfg()) == [("unfused", "cpu", w) for w in (1, 2, 3, 4, 8)]
    monkeypatch.setattr(fc, "available_topologies", lambda: ["cpu", "shared-gpu", "multi-gpu"])
    monkeypatch.setattr(fc, "_has_hopper", lambda: True)
    monkeypatch.setattr(fc, "gpu_count", lambda: 8)
    monkeypatch.setattr(fc, "_BUDGETS", {0: 25})  # an H200: 25 ranks of 5.5 GiB
    monkeypatch.setattr(fc, "_OVER_BUDGET", {})
    combos = fc.gate_matrix(Cfg())
    assert ("fused", "cpu", 2) not in combos  # the fused kernel needs a GPU
    assert {("fused", "shared-gpu", w) for w in (1, 2, 4, 8, 16)} <= set(combos)  # W = 16 where 16 ranks fit
    assert {("fused", "multi-gpu", w) for w in (2, 4, 8)} <= set(combos)
    assert ("fused", "multi-gpu", 1) not in combos and ("fused", "multi-gpu", 16) not in combos  # 8 GPUs
    assert not fc._OVER_BUDGET
    monkeypatch.setattr(fc, "_BUDGETS", {0: 14})  # an 80 GB GPU: 16 ranks do not fit
    # W = 16 stays in the matrix: each of its tests is a skip with the reason (the summary lists it), not left out
    assert {w for i, t, w in fc.gate_matrix(Cfg()) if t == "shared-gpu"} == {1, 2, 4, 8, 16}
    with pytest.raises(pytest.skip.Exception, match=r"shared-gpu W=16 not gated on this host: GPU 0 holds 14 ranks"
                                                    r".* at least 88 GiB"):
        fc.get_pool("fused", "shared-gpu", 16)
    assert set(fc._OVER_BUDGET) == {("fused", "shared-gpu", 16), ("unfused", "shared-gpu", 16)}
    # named in --world-sizes, W = 16 is tried here
    assert fc.gate_matrix(Cfg(**{"--impl": "fused", "--topology": "shared-gpu", "--world-sizes": "16"})) == [
        ("fused", "shared-gpu", 16)] and not fc._OVER_BUDGET
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
    monkeypatch.setattr(fc, "available_topologies", lambda count=None: ["cpu", "shared-gpu"])
    assert fc.gate_matrix(Cfg(**{"--impl": "torch-async-tp", "--topology": "cpu"})) == [
        ("torch-async-tp", fc.UNRUNNABLE, 0)]
    assert ("fused", "shared-gpu", 2) in fc.gate_matrix(Cfg(**{"--impl": "fused"}))


def test_across_nodes_the_gate_runs_world_sizes_that_split_over_the_hosts(monkeypatch):
    import fuzz.conftest as fc

    monkeypatch.setattr(fc, "available_topologies", lambda: ["cpu", "shared-gpu", "multi-gpu"])
    monkeypatch.setattr(fc, "_has_hopper", lambda: False)
    monkeypatch.setattr(fc, "gpu_count", lambda: 4)
    combos = fc.gate_matrix(Cfg(**{"--nnodes": "2"}))
    assert {t for _, t, _ in combos} == {"cpu", "multi-gpu"}  # one shared GPU cannot span hosts
    assert {w for _, t, w in combos if t == "cpu"} == {2, 4, 8}
    assert {w for _, t, w in combos if t == "multi-gpu"} == {2, 4, 8}  # up to 4 GPUs on each of 2 hosts
    # a W named in --world-sizes that does not split over the hosts stays in the matrix: its pool fails saying so
    # (fuzz.pool.RankPool.start), never dropped unsaid
    assert fc.gate_matrix(Cfg(**{"--nnodes": "2", "--topology": "cpu", "--world-sizes": "2,3"})) == [
        ("unfused", "cpu", 2), ("unfused", "cpu", 3)]


def test_a_gpu_that_holds_exactly_w_ranks_gates_w(monkeypatch):
    """The rank budget is how many ranks a GPU holds (fuzz.topology.rank_budget): W = budget fits, only W > budget is
    a skip (a 94 GB H100 NVL holds 16 ranks of 5.5 GiB)."""
    import fuzz.conftest as fc

    monkeypatch.setattr(fc, "available_topologies", lambda: ["shared-gpu"])
    monkeypatch.setattr(fc, "_has_hopper", lambda: False)
    monkeypatch.setattr(fc, "_OVER_BUDGET", {})
    monkeypatch.setattr(fc, "_BUDGETS", {0: 16})
    assert {w for _, _, w in fc.gate_matrix(Cfg())} == {1, 2, 4, 8, 16} and fc._OVER_BUDGET == {}
    monkeypatch.setattr(fc, "_BUDGETS", {0: 15})
    assert set(fc.gate_matrix(Cfg())) == {("unfused", "shared-gpu", w) for w in (1, 2, 4, 8, 16)}
    assert set(fc._OVER_BUDGET) == {("unfused", "shared-gpu", 16)}


def test_the_topologies_of_a_host_follow_its_gpu_count():
    from fuzz.topology import available_topologies

    assert available_topologies(0) == ["cpu"]
    assert available_topologies(1) == ["cpu", "shared-gpu"]
    assert available_topologies(2) == available_topologies(8) == ["cpu", "shared-gpu", "multi-gpu"]


def test_pools_asked_at_two_optimize_levels_are_two_pools(monkeypatch):
    """``test_capacity_under_python_O`` asks a -O pool beside the driver's level: a pool is keyed by its level too
    (PoolSpec.key), or the -O0 pool would serve it (and a -O1 pool the -O0 tests). Nothing starts here."""
    import fuzz.conftest as fc

    monkeypatch.setattr(fc, "_POOLS", {})
    monkeypatch.setattr(fc, "_OVER_BUDGET", {})
    plain, optimized = fc.get_pool("unfused", "cpu", 2, optimize=0), fc.get_pool("unfused", "cpu", 2, optimize=1)
    assert plain is not optimized and (plain.spec.optimize, optimized.spec.optimize) == (0, 1)
    assert fc.get_pool("unfused", "cpu", 2, optimize=1) is optimized and not plain.alive and not optimized.alive


class _Item:
    """A collected gate test as fuzz/conftest.py sees it."""

    def __init__(self, gate, test):
        self.callspec = type("CallSpec", (), {"params": {"gate": gate}})()
        self.originalname = test
        self.groups = []

    def add_marker(self, mark):
        self.groups += list(mark.args)


TESTS = ("test_compute", "test_layers", "test_capacity", "test_bad_call", "test_graph_replay", "test_streams")


def test_gpu_tests_are_dealt_over_places_by_cost(monkeypatch):
    """Each GPU test (implementation, W, test) goes to one place; the places' estimated loads are balanced to
    within one test; with one place per GPU everything shares it; cpu tests are not grouped; multi-gpu tests
    get places of their own."""
    import fuzz.conftest as fc

    gates = [(i, "shared-gpu", w) for i in ("fused", "unfused") for w in (1, 2, 4, 8)]
    gates += [("unfused", "cpu", 2), ("fused", "multi-gpu", 2), ("unfused", "multi-gpu", 2)]
    for gpus, slots in ((1, 1), (1, 4), (2, 4)):
        monkeypatch.setattr(fc, "gpu_count", lambda gpus=gpus: gpus)
        monkeypatch.setattr(fc, "pools_per_gpu", lambda slots=slots: slots)
        items = [_Item(g, t) for g in gates for t in TESTS]
        fc.pytest_collection_modifyitems(None, items)
        assert all(it.groups == [] for it in items if it.callspec.params["gate"][1] == "cpu")
        assert all(len(it.groups) == 1 for it in items if it.callspec.params["gate"][1] != "cpu")
        shared = [it for it in items if it.callspec.params["gate"][1] == "shared-gpu"]
        assert {it.groups[0] for it in shared} == {f"gpu-{p}" for p in range(gpus * slots)}
        multi = {it.groups[0] for it in items if it.callspec.params["gate"][1] == "multi-gpu"}
        assert multi <= {f"multi-gpu-{p}" for p in range(fc.multi_gpu_places(gpus))}
        load: dict[str, float] = {}
        for it in shared:
            g = it.callspec.params["gate"]
            load[it.groups[0]] = load.get(it.groups[0], 0.0) + fc.unit_cost(it.originalname, g[2])
        biggest = max(fc.unit_cost(t, 8) for t in TESTS) + fc.POOL_START_S
        assert max(load.values()) - min(load.values()) <= biggest, load


def test_deal_splits_a_combination_only_when_that_finishes_sooner():
    from fuzz.conftest import POOL_START_S, deal

    small = {(i, w, t): 1.0 for i in ("fused", "unfused") for w in (2, 4) for t in TESTS}
    placed = deal(small, 4)  # four combinations of six cheap tests, four places: one place each
    assert len(set(placed.values())) == 4
    assert all(len({p for k, p in placed.items() if k[:2] == c}) == 1 for c in {k[:2] for k in small})
    big = {("fused", 2, "test_compute"): 10 * POOL_START_S, ("fused", 2, "test_layers"): 10 * POOL_START_S}
    assert len(set(deal(big, 2).values())) == 2
    assert deal(big, 2) == deal(dict(reversed(list(big.items()))), 2)  # deterministic, whatever the order


def test_a_combination_too_big_to_run_twice_on_a_gpu_stays_on_one_place():
    """Two W = 16 pools do not fit an H200's rank budget side by side: their tests are not split over places
    (one place would only wait for the other's tokens); smaller combinations still are."""
    from fuzz.conftest import deal, unit_cost, unsplittable

    units = {("fused", w, t): unit_cost(t, w) for w in (1, 16) for t in TESTS}
    whole = unsplittable(units, budget=25)
    assert whole == {("fused", 16)}
    assert unsplittable(units, budget=40) == frozenset() and unsplittable({}) == frozenset()
    split = deal(units, 4)
    kept = deal(units, 4, whole)
    assert len({p for k, p in split.items() if k[1] == 16}) > 1  # the model alone would split it
    assert len({p for k, p in kept.items() if k[1] == 16}) == 1


def test_the_grouping_hook_runs_before_xdists_own():
    """xdist's worker turns xdist_group marks into node-id suffixes in a hook registered after fuzz/conftest.py;
    ours must run first or the marks are ignored (every test then ran with a pool of its own)."""
    import fuzz.conftest as fc

    assert fc.pytest_collection_modifyitems.pytest_impl.get("tryfirst") is True


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


def test_rank_budget_is_the_gpus_memory_over_a_ranks_allowance():
    from fuzz.topology import RANK_GPU_GIB, rank_budget

    h200 = 143771 / 1024  # nvidia-smi's memory.total of an H200, GiB
    assert rank_budget(0, memory_gib=h200) == int(h200 // RANK_GPU_GIB) < 32  # two W = 16 pools: not at once
    assert rank_budget(0, memory_gib=h200) >= 16 + 8  # a W = 16 pool beside a W = 8 one
    assert rank_budget(0, memory_gib=1.0) == 1  # a pool bigger than the GPU still runs, alone
    assert rank_budget(0, memory_gib=16 * RANK_GPU_GIB) == 16


def test_rank_tokens_are_all_or_none_and_never_more_than_the_budget(tmp_path):
    """The pools beside each other on one GPU hold at most its budget of ranks (a W = 16 pool next to another
    one ran an H200 out of memory); a lease takes all its tokens or none, a pool larger than the budget takes
    all of them, and tokens come back when the lease is released."""
    from fuzz.topology import lease_ranks

    d = str(tmp_path)
    first = lease_ranks(0, 16, budget=27, lock_dir=d)
    assert first is not None and len(first._files) == 16
    assert lease_ranks(0, 16, budget=27, lock_dir=d) is None  # 11 left: none taken
    eight = lease_ranks(0, 8, budget=27, lock_dir=d)
    assert eight is not None
    assert lease_ranks(0, 4, budget=27, lock_dir=d) is None  # 3 left
    other_gpu = lease_ranks(1, 16, budget=27, lock_dir=d)  # each GPU has its own tokens
    assert other_gpu is not None
    first.release()
    again = lease_ranks(0, 16, budget=27, lock_dir=d)
    assert again is not None
    for lease in (again, eight, other_gpu):
        lease.release()
    alone = lease_ranks(0, 32, budget=27, lock_dir=d)  # more ranks than the budget: all 27, runs alone
    assert alone is not None and len(alone._files) == 27
    assert lease_ranks(0, 1, budget=27, lock_dir=d) is None
    alone.release()
    assert lease_ranks(0, 1, budget=27, lock_dir=d) is not None


def test_a_waiting_rank_lease_gets_its_tokens_when_another_pool_gives_them_back(tmp_path):
    """A leaser keeps the tokens it has while it waits for the rest (it holds the GPU's queue: no one else
    takes tokens meanwhile), and completes as soon as the other pool releases -- no deadlock, no starvation by
    smaller pools."""
    import threading

    from fuzz.topology import lease_ranks

    d = str(tmp_path)
    held = lease_ranks(0, 20, budget=27, lock_dir=d)
    got = {}
    waiter = threading.Thread(target=lambda: got.update(lease=lease_ranks(0, 16, budget=27, lock_dir=d,
                                                                          wait_s=30)))
    waiter.start()
    import time

    time.sleep(0.6)
    assert waiter.is_alive() and lease_ranks(0, 1, budget=27, lock_dir=d) is None  # the queue is taken
    held.release()
    waiter.join(timeout=10)
    assert not waiter.is_alive() and got["lease"] is not None and len(got["lease"]._files) == 16
    assert lease_ranks(0, 11, budget=27, lock_dir=d) is not None  # the queue is free again


def _fake_gpu_pools(monkeypatch, lock_dir: str, gpus: int, budget: int) -> list:
    """fuzz.conftest with fake pools (their world sizes recorded when closed), ``gpus`` GPUs of ``budget`` rank
    tokens each (lock files in ``lock_dir``), and empty pool and lease tables; returns the closed list."""
    import fuzz.conftest as fc
    from fuzz.topology import lease_ranks

    closed = []

    class FakePool:
        def __init__(self, spec, gpus=None):
            self.spec, self.gpus = spec, gpus

        def close(self):
            closed.append(self.spec.world_size)

    monkeypatch.setattr(fc, "RankPool", FakePool)
    monkeypatch.setattr(fc, "gpu_count", lambda: gpus)
    monkeypatch.setattr(fc, "pools_per_gpu", lambda: 2)
    monkeypatch.setattr(fc, "lease_gpus", lambda need, **k: type("L", (), {"gpus": list(range(need)),
                                                                         "release": lambda s: None})())
    monkeypatch.setattr(fc, "lease_ranks", lambda gpu, count, **k: lease_ranks(gpu, count, lock_dir=lock_dir,
                                                                                budget=budget))
    monkeypatch.setattr(fc, "_BUDGETS", dict.fromkeys(range(gpus), budget))
    for name in ("_POOLS", "_LEASES", "_RANK_LEASES"):
        monkeypatch.setattr(fc, name, {})
    return closed


def test_a_worker_holds_one_shared_gpu_pool_and_its_tokens_go_back_with_it(monkeypatch, tmp_path):
    """Before a shared-gpu pool starts, the worker's other shared-gpu pools close (a worker runs one test at a
    time) and their rank tokens go back; the new pool takes W tokens of its GPU."""
    import fuzz.conftest as fc
    from fuzz.topology import lease_ranks

    d = str(tmp_path)
    closed = _fake_gpu_pools(monkeypatch, d, gpus=1, budget=20)
    p16 = fc.get_pool("fused", "shared-gpu", 16, optimize=1)
    assert lease_ranks(0, 5, budget=20, lock_dir=d) is None  # 16 of 20 held
    p8 = fc.get_pool("fused", "shared-gpu", 8, optimize=1)
    assert closed == [16] and list(fc._POOLS.values()) == [p8] and p16 is not p8
    assert lease_ranks(0, 12, budget=20, lock_dir=d) is not None  # 8 held now, 12 free
    for key in list(fc._POOLS):
        fc.close_pool(key)
    assert closed == [16, 8] and fc._RANK_LEASES == {}


def test_gpu_memory_is_read_from_nvidia_smi_without_a_cuda_context(monkeypatch):
    import shutil
    import subprocess
    import types

    from fuzz.topology import gpu_memory_gib

    asked = []

    def fake_run(cmd, **kw):
        asked.append(cmd)
        return types.SimpleNamespace(returncode=0, stdout="143771\n")

    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(subprocess, "run", fake_run)
    assert gpu_memory_gib(3) == 143771 / 1024
    assert asked[0][-2:] == ["-i", "3"] and "--query-gpu=memory.total" in asked[0]


def test_a_multi_gpu_pool_takes_one_rank_token_of_each_of_its_gpus(monkeypatch, tmp_path):
    """A multi-gpu pool has one rank on each of its GPUs: it holds one token of each while it lives, so the
    shared-gpu pools beside it on those GPUs stay within the memory budget too."""
    import fuzz.conftest as fc
    from fuzz.topology import lease_ranks

    d = str(tmp_path)
    _fake_gpu_pools(monkeypatch, d, gpus=2, budget=3)
    fc.get_pool("fused", "multi-gpu", 2, optimize=1)
    for gpu in (0, 1):
        assert lease_ranks(gpu, 3, budget=3, lock_dir=d) is None  # one of the three is the pool's
        spare = lease_ranks(gpu, 2, budget=3, lock_dir=d)
        assert spare is not None
        spare.release()
    for key in list(fc._POOLS):
        fc.close_pool(key)
    assert all(lease_ranks(gpu, 3, budget=3, lock_dir=d) is not None for gpu in (0, 1))


def test_auto_workers_are_the_gpu_places_when_only_gpu_topologies_are_gated(monkeypatch):
    """``-n auto`` with only GPU topologies: one worker per place (idle workers would start, import torch and
    collect beside the ranks' start-up, then be shut down); with the cpu topology or across nodes, xdist's own."""
    import os
    from types import SimpleNamespace

    import fuzz.conftest as fc
    from fuzz import config as config_mod

    monkeypatch.setattr(fc, "gpu_count_hint", lambda: 2)
    monkeypatch.setattr(fc, "gpu_count", lambda: pytest.fail("the controller asked torch for the GPU count"))
    monkeypatch.setattr(fc, "pools_per_gpu", lambda: 4)
    monkeypatch.setattr(fc, "multi_gpu_places", lambda gpus: 4)
    monkeypatch.setattr(fc.os, "cpu_count", lambda: 32)

    here = os.path.dirname(os.path.abspath(fc.__file__))
    session = SimpleNamespace(args=["fuzz/test_gemm_rs.py::test_compute"],
                              invocation_params=SimpleNamespace(dir=os.path.dirname(here)))

    def workers(config=session, **flags):
        monkeypatch.setattr(config_mod, "_CURRENT", Cfg(**flags))
        return fc.pytest_xdist_auto_num_workers(config)

    assert workers(**{"--topology": "shared-gpu"}) == 8
    assert workers(**{"--topology": "shared-gpu,multi-gpu"}) == 12
    assert workers(**{"--topology": "multi-gpu"}) == 4
    assert workers(**{"--topology": "cpu,shared-gpu"}) is None
    assert workers(**{"--topology": "multi-gpu", "--nnodes": "2"}) is None
    monkeypatch.setattr(fc, "available_topologies", lambda count=None: ["cpu", "shared-gpu"])
    assert workers() is None  # the default on a GPU host gates cpu too
    monkeypatch.setattr(fc.os, "cpu_count", lambda: 6)
    assert workers(**{"--topology": "shared-gpu,multi-gpu"}) == 6  # never more than the cores
    whole = SimpleNamespace(args=["tests", "fuzz"], invocation_params=session.invocation_params)
    assert workers(whole, **{"--topology": "shared-gpu"}) is None  # ci/test's session: its CPU tests spread
    inside = SimpleNamespace(args=[here], invocation_params=SimpleNamespace(dir="/"))
    assert workers(inside, **{"--topology": "shared-gpu"}) == 6


def test_the_gpu_count_hint_asks_nvml_only_where_torch_would_say_the_same(monkeypatch):
    """The xdist controller sizes its workers from NVML's count (no ``import torch``: 2.2 s there on an H200
    host); where torch is loaded already, or ``CUDA_VISIBLE_DEVICES`` narrows what torch sees, or NVML is
    missing, it asks torch."""
    import sys

    from fuzz import topology

    monkeypatch.setattr(topology, "_nvml_device_count", lambda: 3)
    monkeypatch.setattr(topology, "gpu_count", lambda: 7)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert topology.gpu_count_hint() == 3
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert topology.gpu_count_hint() == 7
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setitem(sys.modules, "torch", object())
    assert topology.gpu_count_hint() == 7
    monkeypatch.delitem(sys.modules, "torch")
    monkeypatch.setattr(topology, "_nvml_device_count", lambda: None)
    assert topology.gpu_count_hint() == 7


def test_pools_starting_together_take_their_rank_tokens_one_after_the_other_at_once(tmp_path):
    """A GPU's queue lock is held for a moment by each leaser in turn: the next one gets it within a poll of
    :data:`fuzz.topology.QUEUE_POLL_S`, not a second later (the workers of a campaign start their pools
    together; each waited a whole second more than the one before)."""
    import threading
    import time

    from fuzz.topology import QUEUE_POLL_S, _lock, lease_ranks

    d = str(tmp_path)
    queue = _lock(d, "gpu0.rank-queue.lock")
    got = {}

    def lease():
        got["lease"] = lease_ranks(0, 4, budget=16, lock_dir=d, wait_s=30)
        got["at"] = time.monotonic()

    waiter = threading.Thread(target=lease)
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive()  # waiting for the queue
    released = time.monotonic()
    queue.close()  # (closing the file drops its lock)
    waiter.join(timeout=10)
    assert got["lease"] is not None and got["at"] - released < 0.25, got["at"] - released
    assert QUEUE_POLL_S <= 0.05
