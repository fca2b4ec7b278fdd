"""Fuzz-suite plumbing: which (implementation, topology, W) combinations to gate, and one long-lived
rank pool per combination per xdist worker (GPUs leased to workers without overlap), closed when the
worker moves on to another combination.

An implementation named for gating (``--impl``, or ``fused`` implied by a Hopper host) that can run on
none of the host's topologies is not dropped: it becomes one entry per test, ``<impl>-unrunnable``,
that fails with the reason — the gate never passes an implementation it did not run."""

from __future__ import annotations

import os
import sys

import pytest

from fuzz.case import PoolSpec
from fuzz.pool import RankPool
from fuzz.topology import available_topologies, gpu_count, lease_gpus, pools_per_gpu

LEASE_WAIT_S = float(os.environ.get("GEMM_RS_GPU_LEASE_WAIT", "1800"))

_POOLS: dict[tuple, RankPool] = {}
_LEASES: dict[str, object] = {}
#: shared-gpu (impl, W) -> its place (GPU slot) number, set at collection
_PLACE: dict[tuple[str, int], int] = {}


def _csv(value):
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _has_hopper() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.get_device_capability(0) == (9, 0)
    except Exception:  # noqa: BLE001
        return False


#: Implementations that only run on a GPU topology, and why: never gated on the cpu topology.
NEEDS_GPU = {
    "fused": "the fused CuTe DSL kernel runs on a Hopper GPU (topology shared-gpu or multi-gpu)",
    "torch-async-tp": "PyTorch's async-TP op needs CUDA symmetric memory (topology shared-gpu or multi-gpu)",
}
#: The topology of a gate entry whose implementation can run on none of the host's topologies.
UNRUNNABLE = "unrunnable"
#: impl -> why it cannot be gated here (set by gate_matrix)
_UNRUNNABLE_WHY: dict[str, str] = {}


def gate_matrix(config) -> list[tuple[str, str, int]]:
    topologies = _csv(config.getoption("--topology")) or available_topologies()
    impls = _csv(config.getoption("--impl")) or (["unfused", "fused"] if _has_hopper() else ["unfused"])
    sizes = _csv(config.getoption("--world-sizes"))
    out = []
    for impl in impls:
        runnable = [t for t in topologies if not (impl in NEEDS_GPU and t == "cpu")]
        if not runnable:
            _UNRUNNABLE_WHY[impl] = (f"--impl {impl} cannot be gated here: {NEEDS_GPU[impl]}, and the topologies "
                                     f"to gate are {topologies} (GPUs on this host: {gpu_count()}). Nothing of "
                                     f"{impl} ran, so the gate fails; run it on a Hopper GPU host")
            out.append((impl, UNRUNNABLE, 0))
            continue
        for topo in runnable:
            ws = [int(w) for w in sizes] if sizes else ([1, 2, 3, 4, 8] if topo == "cpu" else [1, 2, 4, 8])
            if topo == "multi-gpu" and not sizes:
                ws = [w for w in ws if 2 <= w <= gpu_count()]  # one GPU per rank; W=1 is shared-gpu's
            for w in ws:
                out.append((impl, topo, w))
    return out


def pytest_generate_tests(metafunc):
    if "gate" in metafunc.fixturenames:
        combos = gate_matrix(metafunc.config)
        ids = [f"{i}-{t}" if t == UNRUNNABLE else f"{i}-{t}-W{w}" for i, t, w in combos]
        metafunc.parametrize("gate", combos, ids=ids, scope="session")


def pytest_collection_modifyitems(config, items):
    """With xdist's ``--dist loadgroup`` (pyproject addopts), every test of one GPU pool runs on one
    worker: shared-gpu combinations are dealt, largest W first, over the host's GPU places (GPUs x
    GEMM_RS_POOLS_PER_GPU) and form group ``gpu-<place>``; multi-gpu ones group ``multi-gpu``; cpu-topology
    tests spread freely. Workers then lease disjoint places (fuzz/topology.py)."""
    places = max(1, gpu_count()) * pools_per_gpu()
    shared = sorted({(c.params["gate"][0], c.params["gate"][2]) for c in
                     (getattr(i, "callspec", None) for i in items)
                     if c is not None and "gate" in c.params and c.params["gate"][1] == "shared-gpu"},
                    key=lambda iw: (-iw[1], iw[0]))
    _PLACE.clear()
    _PLACE.update({iw: n % places for n, iw in enumerate(shared)})
    for item in items:
        callspec = getattr(item, "callspec", None)
        gate = callspec.params.get("gate") if callspec else None
        if not gate or gate[1] in ("cpu", UNRUNNABLE):
            continue
        impl, topology, world_size = gate
        group = "multi-gpu" if topology == "multi-gpu" else f"gpu-{_PLACE[(impl, world_size)]}"
        item.add_marker(pytest.mark.xdist_group(group))


def get_pool(impl: str, topology: str, world_size: int, optimize: int | None = None) -> RankPool:
    if topology == UNRUNNABLE:
        pytest.fail(_UNRUNNABLE_WHY.get(impl, f"--impl {impl} can run on none of this host's topologies"),
                    pytrace=False)
    spec = PoolSpec(impl=impl, topology=topology, world_size=world_size,
                    optimize=sys.flags.optimize if optimize is None else optimize)
    pool = _POOLS.get(spec.key())
    if pool is None:
        gpus = None
        if topology != "cpu":
            need = 1 if topology == "shared-gpu" else world_size
            if need > gpu_count():
                pytest.skip(f"{topology} at W={world_size} needs {need} GPU(s); this host has {gpu_count()}")
            shared = topology == "shared-gpu"
            prefer = _PLACE.get((impl, world_size), world_size) if shared else 0
            lease = _LEASES.get(f"{topology}-{need}") or lease_gpus(
                need, wait_s=LEASE_WAIT_S, prefer=prefer, slots=pools_per_gpu() if shared else 1)
            if lease is None:
                pytest.fail(f"no {need} free GPU(s) for {topology} within {LEASE_WAIT_S:.0f}s "
                            f"(held by another run on this host?)")
            _LEASES[f"{topology}-{need}"] = lease
            gpus = lease.gpus
        pool = RankPool(spec, gpus=gpus)
        _POOLS[spec.key()] = pool
    return pool


@pytest.fixture(scope="session")
def pool_factory():
    yield get_pool
    for pool in _POOLS.values():
        pool.close()
    _POOLS.clear()
    for lease in _LEASES.values():
        lease.release()


@pytest.fixture
def pool(gate, pool_factory) -> RankPool:
    impl, topology, world_size = gate
    return pool_factory(impl, topology, world_size)


def _gate_of(item) -> tuple | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("gate") if callspec is not None else None


def pytest_runtest_teardown(item, nextitem):
    """Close a combination's pools once this worker's next test belongs to another one: a worker holds
    the rank processes of one combination at a time (a session over many implementations, such as the
    kill matrix, would otherwise keep every implementation's ranks alive to the end)."""
    gate = _gate_of(item)
    if gate is None or (nextitem is not None and _gate_of(nextitem) == gate):
        return
    for key in [k for k in _POOLS if k[:3] == tuple(gate)]:
        _POOLS.pop(key).close()


def pytest_sessionfinish(session):
    for pool in _POOLS.values():
        pool.close()
