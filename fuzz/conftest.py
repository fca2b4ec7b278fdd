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
from fuzz.config import current
from fuzz.pool import RankPool, prepare_agent
from fuzz.record import record_collected
from fuzz.topology import (
    RANK_GPU_GIB,
    GpuLease,
    available_topologies,
    gpu_count,
    gpu_count_hint,
    lease_gpus,
    lease_ranks,
    pools_per_gpu,
    rank_budget,
)

#: Seconds a worker waits for a GPU another run on this host holds.
LEASE_WAIT_S = 1800.0

_POOLS: dict[tuple, RankPool] = {}
_LEASES: dict[str, object] = {}
#: pool key -> the rank tokens of its GPU that a shared-gpu pool holds while it lives (fuzz.topology.lease_ranks)
_RANK_LEASES: dict[tuple, object] = {}
#: GPU -> its rank budget (fuzz.topology.rank_budget), asked once per worker
_BUDGETS: dict[int, int] = {}
#: the shared-gpu place of the running test (pytest_runtest_setup), None outside a shared-gpu test
_RUNNING_PLACE: list = [None]


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
#: (impl, "shared-gpu", W) -> why the gate skips that default entry here: W ranks do not fit one GPU's memory
_OVER_BUDGET: dict[tuple, str] = {}


def pytest_configure(config):
    if nnodes() > 1 and getattr(config.option, "numprocesses", None) not in (None, 0):
        raise pytest.UsageError("a rank pool across nodes listens on one control port (--control-address): run "
                                "the gate with -n 0 (ci/gate does so by itself with --nnodes)")
    runs_tests = hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None) in (None, 0)
    if runs_tests and nnodes() == 1 and not config.option.collectonly:
        prepare_agent(sys.flags.optimize)  # the first pool's torchrun agent imports torch while we collect


def pytest_xdist_auto_num_workers(config):
    """``-n auto`` where only GPU topologies are gated: one xdist worker per place the GPU tests are dealt to
    (:func:`pytest_collection_modifyitems`: shared-gpu pools per GPU, multi-gpu places), not one per core. xdist
    would start the others, each importing torch and collecting, and shut them down idle -- while the ranks of the
    pools start on the same cores. With the cpu topology (its tests spread freely over workers), a pool across
    nodes (one driver, ``-n 0``) or a session with tests outside ``fuzz/`` (``ci/test``'s): None, xdist's own
    count."""
    here = os.path.dirname(os.path.abspath(__file__))
    base = str(config.invocation_params.dir)
    paths = [os.path.abspath(os.path.join(base, str(a).split("::")[0])) for a in config.args]
    if not paths or any(os.path.commonpath([here, p]) != here for p in paths):
        return None
    cfg = current()
    gpus_here = gpu_count_hint()  # (no `import torch` in the controller for this)
    topologies = cfg.csv("topology") or available_topologies(gpus_here)
    if "cpu" in topologies or nnodes(cfg) > 1:
        return None
    gpus = max(1, gpus_here)
    places = (gpus * pools_per_gpu() if "shared-gpu" in topologies else 0) + (
        multi_gpu_places(gpus) if "multi-gpu" in topologies else 0)
    return max(1, min(places, os.cpu_count() or 1))


def nnodes(cfg=None) -> int:
    return (cfg or current()).integer("nnodes") or 1


def gate_matrix(cfg=None) -> list[tuple[str, str, int]]:
    """(implementation, topology, W) of every gate entry, from the settings (``cfg``, default this
    process's: fuzz/config.py)."""
    cfg = cfg or current()
    hosts = nnodes(cfg)
    topologies = cfg.csv("topology") or available_topologies()
    impls = cfg.csv("impl") or (["unfused", "fused"] if _has_hopper() else ["unfused"])
    sizes = cfg.csv("world_sizes")
    if hosts > 1:  # ranks of one pool on several hosts: not one shared GPU, and W a multiple of the hosts
        topologies = [t for t in topologies if t != "shared-gpu"]
    out = []
    _OVER_BUDGET.clear()
    for impl in impls:
        runnable = [t for t in topologies if not (impl in NEEDS_GPU and t == "cpu")]
        if not runnable:
            _UNRUNNABLE_WHY[impl] = (f"--impl {impl} cannot be gated here: {NEEDS_GPU[impl]}, and the topologies "
                                     f"to gate are {topologies} (GPUs on this host: {gpu_count()}). Nothing of "
                                     f"{impl} ran, so the gate fails; run it on a Hopper GPU host")
            out.append((impl, UNRUNNABLE, 0))
            continue
        for topo in runnable:
            ws = [int(w) for w in sizes] if sizes else ([1, 2, 3, 4, 8] if topo == "cpu" else [1, 2, 4, 8, 16])
            if topo == "multi-gpu" and not sizes:
                ws = [w for w in ws if 2 <= w <= gpu_count() * hosts]  # one GPU per rank; W=1 is shared-gpu's
            if topo == "shared-gpu" and not sizes:  # W = 16 (CONTRACT: "M=129, W=16") where a GPU holds 16 ranks;
                # elsewhere each of its tests is a skip that says so in the summary (never left out unsaid)
                for w in ws:
                    if w > gpu_budget(0):
                        _OVER_BUDGET[(impl, topo, w)] = over_budget_why(w, gpu_budget(0))
            if not sizes:
                ws = [w for w in ws if w % hosts == 0]
            for w in ws:
                out.append((impl, topo, w))
    return out


def _gate_id(impl: str, topology: str, world_size: int) -> str:
    """The test id part of one gate entry (the ``gate`` parameter's id)."""
    return f"{impl}-{topology}" if topology == UNRUNNABLE else f"{impl}-{topology}-W{world_size}"


def pytest_generate_tests(metafunc):
    if "gate" in metafunc.fixturenames:
        combos = gate_matrix()
        metafunc.parametrize("gate", combos, ids=[_gate_id(*c) for c in combos], scope="session")


#: The cost model that deals GPU tests over places (seconds; measured on one H200, ci profile, 2026-11-30:
#: median 0.8 s per case at W = 2, 1.2-1.7 s at W = 4, 8, and a GPU pool's start-up): only relative sizes matter.
#: A refit per test (a graph case costs ~3x a compute case) with pool start-ups growing with W was measured and not
#: kept: the W = 2, 4, 8 ci gate took 99.3 s and 91.0 s with its deal, 93.7 s (cold cache, same machine as the
#: 91.0) and 80-84 s with this one (2026-12-01, docs/evidence/2026-12-01-pull-tiles-w16/): no gain shown. Again in
#: the 9th session: per-test factors evened the places' case time (63-86 s) but the W = 2, 4, 8 gate took 119.5 s
#: for 312 cases (117.0 s for 303 with this one): the pools share one GPU, what one place sheds another's cases
#: take longer (docs/evidence/2026-12-01-split-k-slices/). Not kept.
CASE_S, CASE_S_PER_RANK, POOL_START_S = 0.6, 0.15, 8.0


def unit_cost(test_name: str, world_size: int) -> float:
    """Estimated seconds of one gate test (all its examples) on one (implementation, W) pool."""
    from fuzz.settings import FIXED_CASES, WEIGHTS, examples

    n = examples(test_name) if test_name in WEIGHTS else FIXED_CASES.get(test_name, 1)
    return n * (CASE_S + CASE_S_PER_RANK * world_size)


def deal(units: dict[tuple, float], places: int, whole: frozenset = frozenset()) -> dict[tuple, int]:
    """Place of each unit ``(impl, W, test) -> cost``: whole combinations (impl, W) first, the most expensive
    first, each to the least loaded place (its cost and one pool start-up); then, while it shortens the
    campaign, the most expensive test of the busiest place moves to the least busy one (a start-up counted
    there unless its combination already has a pool there) -- never a test of a combination in ``whole`` (its
    pools could not run side by side anyway: :func:`unsplittable`). Deterministic whatever the order of
    ``units``."""
    n = max(1, places)
    keys = sorted(units, key=lambda k: tuple(str(x) for x in k))
    combos: dict[tuple, list[tuple]] = {}
    for key in keys:
        combos.setdefault(key[:2], []).append(key)
    total = {c: sum(units[k] for k in ks) for c, ks in combos.items()}
    where: dict[tuple, int] = {}
    load = [0.0] * n
    for combo in sorted(combos, key=lambda c: (-total[c], tuple(str(x) for x in c))):
        p = min(range(n), key=lambda q: (load[q], q))
        load[p] += total[combo] + POOL_START_S
        where.update(dict.fromkeys(combos[combo], p))

    def place_load(p: int) -> float:
        on = [k for k in keys if where[k] == p]
        return sum(units[k] for k in on) + POOL_START_S * len({k[:2] for k in on})

    for _ in range(len(keys) * n):
        loads = [place_load(p) for p in range(n)]
        src = max(range(n), key=lambda q: (loads[q], -q))
        dst = min(range(n), key=lambda q: (loads[q], q))
        movable = sorted((k for k in keys if where[k] == src and k[:2] not in whole),
                         key=lambda k: (-units[k], tuple(str(x) for x in k)))
        for key in movable:
            where[key] = dst
            if max(place_load(src), place_load(dst)) < loads[src] - 1e-9:
                break
            where[key] = src
        else:
            break
    return where


def unsplittable(units: dict[tuple, float], budget: int | None = None) -> frozenset:
    """The shared-gpu combinations (impl, W) whose tests stay on one place: two pools of W ranks would not fit a
    GPU's rank budget side by side (:func:`fuzz.topology.rank_budget`; W = 16 on an H200), so splitting them
    would only make one place wait for the other's tokens."""
    if not units:
        return frozenset()
    budget = gpu_budget(0) if budget is None else budget
    return frozenset(k[:2] for k in units if 2 * k[1] > budget)


def multi_gpu_places(gpus: int) -> int:
    """multi-gpu pools that may run side by side: :func:`~fuzz.topology.pools_per_gpu` per pair of GPUs (each
    leases a slot of its W GPUs for as long as it runs, :func:`~fuzz.topology.lease_gpus`; a pool needing
    more GPUs than are free waits for them). The gate's multi-gpu cases are correctness cases, not timings:
    like shared-gpu pools, several time-slice the same GPUs (cross-rank timings are the benchmarks' job)."""
    return max(1, gpus // 2) * pools_per_gpu()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """With xdist's ``--dist loadgroup`` (pyproject addopts), every test of one GPU place runs on one worker:
    each GPU test (implementation, W, test function) is dealt (:func:`deal`, by its estimated cost) to one
    of the host's shared-gpu places (GPUs x GEMM_RS_POOLS_PER_GPU, group ``gpu-<place>``) or multi-gpu places
    (:func:`multi_gpu_places`, group ``multi-gpu-<place>``); cpu-topology tests spread freely. A worker keeps
    one pool per combination while its tests run (they are adjacent: the ``gate`` parameter is
    session-scoped) and leases its place's GPU slot, or a multi-gpu pool's GPUs while that pool lives
    (fuzz/topology.py).

    ``tryfirst``: xdist's worker turns the ``xdist_group`` marks into node-id suffixes in its own hook,
    registered after this conftest when ``fuzz/`` is on the command line, so called before ours unless ours
    goes first -- the marks were then ignored and every test ran on any worker with a pool of its own, each
    leasing a place of its own (seen on 2xH200: 20 pools time-slicing one GPU, cases past their deadline)."""
    groups = place_groups({item: (*gate, item.originalname) for item in items if (gate := _gate_of(item))})
    for item, group in groups.items():
        item.add_marker(pytest.mark.xdist_group(group))


def place_groups(tests: dict) -> dict:
    """key -> the xdist group of its GPU place (``gpu-<place>`` / ``multi-gpu-<place>``), for the keys of ``tests``
    (key -> (impl, topology, W, test function)) on a GPU topology: each (impl, W, test) dealt by its estimated
    cost (:func:`deal`). The workers mark their items with it (:func:`pytest_collection_modifyitems`) and the
    controller's scheduler computes the same from the test ids (:func:`places_of_ids`)."""
    gpus = max(1, gpu_count())
    units: dict[str, dict[tuple, float]] = {"shared-gpu": {}, "multi-gpu": {}}
    for impl, topology, world_size, test in tests.values():
        if topology in units:
            units[topology][(impl, world_size, test)] = unit_cost(test, world_size)
    placed = {"shared-gpu": deal(units["shared-gpu"], gpus * pools_per_gpu(), unsplittable(units["shared-gpu"])),
              "multi-gpu": deal(units["multi-gpu"], multi_gpu_places(gpus))}
    out = {}
    for key, (impl, topology, world_size, test) in tests.items():
        if topology in units:
            place = placed[topology][(impl, world_size, test)]
            out[key] = f"multi-gpu-{place}" if topology == "multi-gpu" else f"gpu-{place}"
    return out


def places_of_ids(nodeids: list[str]) -> dict[str, str]:
    """test id -> its GPU place's group (:func:`place_groups`), read from the ids alone: for xdist's controller,
    which collects nothing -- the workers' ``xdist_group`` marks reach it only as ``@group`` id suffixes, which
    pytest 9 drops (tests/scheduling.py). The gate's parameter id is :func:`gate_matrix`'s (same settings)."""
    combos = {_gate_id(*c): c for c in gate_matrix()}
    tests = {}
    for nodeid in nodeids:
        path_names, _, params = nodeid.partition("[")
        combo = combos.get(params[:-1]) if params.endswith("]") else None
        if combo is not None and combo[1] != UNRUNNABLE:
            tests[nodeid] = (*combo, path_names.rsplit("::", 1)[-1])
    return place_groups(tests)


def over_budget_why(world_size: int, budget: int) -> str:
    """Why the default shared-gpu entry at ``world_size`` is skipped on a GPU that holds ``budget`` ranks."""
    return (f"shared-gpu W={world_size} not gated on this host: GPU 0 holds {budget} ranks of "
            f"{RANK_GPU_GIB} GiB (fuzz/topology.py RANK_GPU_GIB; W=16 ran out of memory on an 80 GiB H100, "
            f"2026-12-06); gate it on a GPU of at least {world_size * RANK_GPU_GIB:.0f} GiB, or name it in "
            f"--world-sizes to try it here")


def get_pool(impl: str, topology: str, world_size: int, optimize: int | None = None) -> RankPool:
    if topology == UNRUNNABLE:
        pytest.fail(_UNRUNNABLE_WHY.get(impl, f"--impl {impl} can run on none of this host's topologies"),
                    pytrace=False)
    if (impl, topology, world_size) in _OVER_BUDGET:
        pytest.skip(_OVER_BUDGET[(impl, topology, world_size)])
    spec = PoolSpec(impl=impl, topology=topology, world_size=world_size,
                    optimize=sys.flags.optimize if optimize is None else optimize, nnodes=nnodes())
    pool = _POOLS.get(spec.key())
    if pool is None:
        gpus = None
        if topology != "cpu":
            need = 1 if topology == "shared-gpu" else world_size // nnodes()
            if need > gpu_count():
                pytest.skip(f"{topology} at W={world_size} needs {need} GPU(s); this host has {gpu_count()}")
            shared = topology == "shared-gpu"
            prefer = _RUNNING_PLACE[0] if _RUNNING_PLACE[0] is not None else (world_size if shared else 0)
            lease = _LEASES.get(f"{topology}-{need}") or lease_gpus(
                need, wait_s=LEASE_WAIT_S, prefer=prefer, slots=pools_per_gpu())
            if lease is None:
                pytest.fail(f"no {need} free GPU(s) for {topology} within {LEASE_WAIT_S:.0f}s "
                            f"(held by another run on this host?)")
            _LEASES[f"{topology}-{need}"] = lease
            gpus = lease.gpus
        if gpus:
            _lease_rank_tokens(spec, gpus)
        pool = RankPool(spec, gpus=gpus)
        _POOLS[spec.key()] = pool
    return pool


def gpu_budget(gpu: int) -> int:
    """GPU ``gpu``'s rank budget (:func:`fuzz.topology.rank_budget`), asked once per process."""
    if gpu not in _BUDGETS:
        _BUDGETS[gpu] = rank_budget(gpu)
    return _BUDGETS[gpu]


def _lease_rank_tokens(spec: PoolSpec, gpus: list[int]) -> None:
    """Before a GPU pool starts, it takes rank tokens of its GPUs (:func:`fuzz.topology.lease_ranks`), waiting
    for pools of other workers to give them back, so the pools on a GPU never hold more ranks than its memory
    takes: a shared-gpu pool W tokens of its GPU, a multi-gpu pool one token of each of its GPUs on this host
    (one rank each), taken in GPU order (no two leasers wait for each other). This worker's other GPU pools
    close first: they are idle (a worker runs one test at a time), and a worker must never wait for tokens it
    holds itself."""
    shared = spec.topology == "shared-gpu"
    for key in [k for k in _POOLS if k[1] != "cpu"]:
        close_pool(key)
    leases = []
    for gpu in sorted(gpus):
        lease = lease_ranks(gpu, spec.world_size if shared else 1, budget=gpu_budget(gpu), wait_s=LEASE_WAIT_S)
        if lease is None:
            for held in leases:
                held.release()
            pytest.fail(f"no {spec.world_size if shared else 1} rank token(s) of GPU {gpu} (budget "
                        f"{gpu_budget(gpu)}) came free within {LEASE_WAIT_S:.0f}s (held by another run on this host?)")
        leases.append(lease)
    _RANK_LEASES[spec.key()] = GpuLease.joined(leases)


def close_pool(key: tuple) -> None:
    """Close this worker's pool ``key`` and give back the rank tokens it held."""
    pool = _POOLS.pop(key, None)
    try:
        if pool is not None:
            pool.close()
    finally:
        lease = _RANK_LEASES.pop(key, None)
        if lease is not None:
            lease.release()


@pytest.fixture(scope="session")
def pool_factory():
    yield get_pool
    for key in list(_POOLS):
        close_pool(key)
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
        close_pool(key)
    if gate[1] == "multi-gpu":  # its GPUs go back: another worker's multi-gpu pool may be waiting for them
        lease = _LEASES.pop(f"multi-gpu-{gate[2] // nnodes()}", None)
        if lease is not None:
            lease.release()


def pytest_runtest_setup(item):
    """The GPU place of the test about to run (its ``gpu-<place>`` or ``multi-gpu-<place>`` group): its pool
    leases that slot first."""
    mark = item.get_closest_marker("xdist_group")
    name = str(mark.args[0]) if mark is not None and mark.args else ""
    _RUNNING_PLACE[0] = int(name.rsplit("-", 1)[1]) if name.startswith(("gpu-", "multi-gpu-")) else None


def pytest_collection_finish(session):
    """The collected test ids go to the report folder (:func:`fuzz.record.record_collected`), for the campaign's
    estimate of the cases to come."""
    if session.items:  # (xdist's controller collects nothing: its workers do)
        record_collected([item.nodeid for item in session.items])


def pytest_sessionfinish(session):
    for key in list(_POOLS):
        close_pool(key)
