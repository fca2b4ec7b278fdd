"""Hypothesis strategies for cases. They shrink toward the simple case: M=1 and boundary values first,
gaussian inputs, one call, no skew, seed 0, the first shape of the family.

They are built to reach each bug class in a handful of examples (the mutation meta-test, mutants/meta.py,
measures it): a multi-call case gives every call a different input kind (so few cases cover every kind,
and a NaN or a stale value left behind by one call meets different data in the next), may come back to
its first M (alternation: 1024, 129, 1024), and a bad-call case shrinks to "all" (every bad call of
BAD_CALLS on one instance) rather than leaving each bad call to chance."""

from __future__ import annotations

from hypothesis import strategies as st

from oracle.inputs import KINDS

from .bad_calls import BAD_CALLS
from .case import CAPACITY_BADS, Case
from .layouts import layouts_for

# (N, K) families: down-projection / attention-output shapes (hidden N, per-rank K slice), scaled to the
# machine. K is a multiple of 64 (the fused kernel's K tile); N includes non-multiples of 128.
SHAPES = {
    "cpu": [(64, 64), (128, 128), (192, 64), (256, 128), (224, 256)],
    # realistic N (hidden 7168 / 4096) with the per-rank K of TP 4..16; the per-case cost stays seconds,
    # also for the unfused path over gloo on shared-gpu (host-staged)
    "gpu": [(512, 256), (1024, 512), (1536, 704), (4096, 512), (7168, 1024)],
}
MAX_M = {"cpu": 8192, "gpu": 8192}


def machine(topology: str) -> str:
    return "cpu" if topology == "cpu" else "gpu"


def boundary_ms(world_size: int, max_M: int) -> list[int]:
    W = world_size
    cands = [1, W - 1, W, W + 1, 2 * W - 1, 127, 128, 129, 255, 256, 257, 1023, 1024, 1025, 4097, 8191,
             max_M - 1, max_M]
    out = []
    for m in cands:
        if 1 <= m <= max_M and m not in out:
            out.append(m)
    return out


def m_values(world_size: int, max_M: int) -> st.SearchStrategy[int]:
    return st.one_of(st.sampled_from(boundary_ms(world_size, max_M)), st.integers(1, max_M))


def ms_near(favoured, world_size: int, max_M: int, *, max_size: int) -> st.SearchStrategy[list[int]]:
    """1..max_size M values, each one of ``favoured`` (those within max_M) or any valid M."""
    return st.lists(st.one_of(st.sampled_from([m for m in favoured if m <= max_M]), m_values(world_size, max_M)),
                    min_size=1, max_size=max_size)


def shapes(topology: str) -> st.SearchStrategy[tuple[int, int]]:
    return st.sampled_from(SHAPES[machine(topology)])


def layouts(world_size: int) -> st.SearchStrategy[list[list[int]] | None]:
    """The world (shrinks to it) or one of the TP layouts of :func:`fuzz.layouts.layouts_for` (TP x DP
    partitions first; a non-contiguous group with ranks outside it last)."""
    choices = layouts_for(world_size)
    if not choices:
        return st.none()
    return st.one_of(st.none(), st.sampled_from(choices))


@st.composite
def compute_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None) -> Case:
    max_M = max_M or MAX_M[machine(topology)]
    N, K = draw(shapes(topology))
    ms = draw(st.lists(m_values(world_size, max_M), min_size=1, max_size=4))
    if len(ms) > 1 and draw(st.booleans()):
        ms.append(ms[0])  # come back to the first M after others: a result kept per shape is stale now
    kind = draw(st.sampled_from(KINDS))
    kinds = None
    if len(ms) > 1:
        # every call a different kind, the first one's being ``kind``; shrinks toward KINDS order
        others = draw(st.permutations([k for k in KINDS if k != kind]))
        kinds = [kind] + [others[i % len(others)] for i in range(len(ms) - 1)]
    out = draw(st.sampled_from(["guarded", "none"]))
    late_rank = draw(st.none() | st.integers(0, world_size - 1))
    # 100 ms: above any natural jitter of a loaded host, so a skew-dependent bug shows for sure
    delay_ms = draw(st.sampled_from([0, 5, 30, 100])) if late_rank is not None else 0
    seed = draw(st.integers(0, 2**31 - 1))
    layout = draw(layouts(world_size))
    if layout is not None and late_rank is not None:
        late_rank = min(late_rank, min(len(g) for g in layout) - 1)  # a group rank every group has
    return Case("compute", seed, N, K, max_M, ms, kind, out, repeat=2, late_rank=late_rank, delay_ms=delay_ms,
                kinds=kinds, layout=layout)


#: capacities of the instances family's own instances (several sizes: different workspaces, different
#: crossovers; small ones keep the CPU cost low)
INSTANCE_MAX_MS = (257, 1024, 4096)


@st.composite
def instances_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None) -> Case:
    """Several live instances (the pool's one of the case's shape, and 1-2 of the case's own at other
    (N, K, max_M)), calls interleaved over them, then 0-2 re-created at other sizes."""
    max_M = max_M or MAX_M[machine(topology)]
    catalogue = SHAPES[machine(topology)]
    N, K = draw(shapes(topology))
    others = [list(nk) for nk in catalogue if tuple(nk) != (N, K)]
    picked = draw(st.lists(st.sampled_from(others), min_size=1, max_size=2, unique_by=tuple))
    own = [[n, k, draw(st.sampled_from(INSTANCE_MAX_MS))] for n, k in picked]
    n_calls = draw(st.integers(len(own) + 1, len(own) + 3))
    ms = draw(st.lists(m_values(world_size, max_M), min_size=n_calls, max_size=n_calls))
    # every instance called at least once, in an interleaved order (the pool's instance first)
    order = draw(st.permutations([i % (len(own) + 1) for i in range(n_calls)]))
    recreate = draw(st.lists(st.sampled_from(catalogue).map(list), max_size=2))
    recreate = [[n, k, draw(st.sampled_from(INSTANCE_MAX_MS))] for n, k in recreate]
    kind = draw(st.sampled_from(KINDS))
    out = draw(st.sampled_from(["guarded", "none"]))
    return Case("instances", draw(st.integers(0, 2**31 - 1)), N, K, max_M, ms, kind, out, repeat=1,
                shapes=own, order=list(order), recreate=recreate or None, layout=draw(layouts(world_size)))


#: M values a layer meets around the contract's default should_run threshold (128); the family adds both
#: sides of the implementation's own crossover on the rank side
DISPATCH_MS = (1, 64, 127, 128, 129, 255, 256, 1024)


def _near_case(draw, family: str, favoured, *, max_size: int, outs: tuple[str, ...], world_size: int,
               topology: str, max_M: int | None) -> Case:
    """A ``family`` case of 1..max_size M values near ``favoured``, exact or gaussian inputs, on a drawn
    layout."""
    max_M = max_M or MAX_M[machine(topology)]
    N, K = draw(shapes(topology))
    ms = draw(ms_near(favoured, world_size, max_M, max_size=max_size))
    kind = draw(st.sampled_from(["exact", "gaussian"]))
    out = draw(st.sampled_from(outs))
    return Case(family, draw(st.integers(0, 2**31 - 1)), N, K, max_M, ms, kind, out, repeat=1,
                layout=draw(layouts(world_size)))


@st.composite
def dispatch_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None) -> Case:
    """A layer dispatching on should_run / can_run, M alternating across the threshold."""
    return _near_case(draw, "dispatch", DISPATCH_MS, max_size=3, outs=("none",), world_size=world_size,
                      topology=topology, max_M=max_M)


@st.composite
def layer_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None) -> Case:
    """Layers as an engine holds them: several live instances interleaved and re-created, or a layer's
    should_run / can_run dispatch."""
    family = draw(st.sampled_from(("instances", "dispatch")))
    return draw(FAMILY_STRATEGIES[family](world_size, topology, max_M))


@st.composite
def capacity_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None) -> Case:
    max_M = max_M or MAX_M[machine(topology)]
    N, K = draw(shapes(topology))
    bad = draw(st.sampled_from(CAPACITY_BADS))
    m_after = draw(m_values(world_size, min(max_M, 1024)))
    # "over" materialises max_M + 1 rows of x: keep max_M modest for it
    cap = draw(st.sampled_from([max_M, 257, 1024])) if bad == "over" else max_M
    return Case("capacity", draw(st.integers(0, 2**31 - 1)), N, K, cap, [min(m_after, cap)], bad=bad)


@st.composite
def bad_call_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None) -> Case:
    max_M = max_M or MAX_M[machine(topology)]
    N, K = draw(shapes(topology))
    bad = draw(st.sampled_from(["all", *sorted(BAD_CALLS)]))
    m = draw(m_values(world_size, min(max_M, 1024)))
    return Case("bad_call", draw(st.integers(0, 2**31 - 1)), N, K, max_M, [m], bad=bad)


@st.composite
def graph_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None) -> Case:
    """Deep graphs: 1-2 drawn M (the family adds both sides of the tile switch and of should_run's
    crossover), at least 3 rounds of replays."""
    max_M = max_M or MAX_M[machine(topology)]
    N, K = draw(shapes(topology))
    ms = draw(st.lists(m_values(world_size, max_M), min_size=1, max_size=2, unique=True))
    kind = draw(st.sampled_from(["gaussian", "exact"]))
    out = draw(st.sampled_from(["guarded", "none"]))
    return Case("graph", draw(st.integers(0, 2**31 - 1)), N, K, max_M, ms, kind, out, repeat=3,
                layout=draw(layouts(world_size)))


#: M of stream cases: large enough that the call's kernels outlast the caller's next steps
STREAM_MS = (1024, 2048, 4097, 8191)


@st.composite
def streams_cases(draw, world_size: int, topology: str = "cpu", max_M: int | None = None) -> Case:
    """Calls on a non-default stream beside a busy one, inputs overwritten and freed right after."""
    return _near_case(draw, "streams", STREAM_MS, max_size=2, outs=("guarded", "none"), world_size=world_size,
                      topology=topology, max_M=max_M)


FAMILY_STRATEGIES = {
    "compute": compute_cases,
    "capacity": capacity_cases,
    "bad_call": bad_call_cases,
    "graph": graph_cases,
    "instances": instances_cases,
    "dispatch": dispatch_cases,
    "streams": streams_cases,
}
