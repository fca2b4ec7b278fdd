"""The release gate: Hypothesis-generated cases on long-lived rank pools, for every (implementation,
topology, W) the host supports (see fuzz/conftest.py). Run it as users do:

    PYTHONOPTIMIZE=1 pytest -n auto fuzz/

Each test states its family; fuzz/case.py lists, numbered, the properties each family checks. A
failure prints every failed check (worst element, index, rank, budget), stacks of hung ranks, the
Hypothesis blob and one REPRO line that reruns the case.
"""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz.gate import check_case
from fuzz.settings import PROFILE, examples
from fuzz.strategies import (
    back_to_back_cases,
    bad_call_cases,
    byte_boundary_cases,
    capacity_cases,
    compute_cases,
    declared_counter_bits,
    declared_paths,
    declared_support,
    declared_waiver,
    dispatch_crossover_cases,
    graph_cases,
    late_rank_cases,
    layer_cases,
    model_shape_cases,
    path_cases,
    shard_boundary_cases,
    smallest_shape_cases,
    streams_cases,
    wrap_cases,
)

pytestmark = pytest.mark.multiproc


def _where(pool) -> tuple[int, str]:
    return pool.spec.world_size, pool.spec.topology


def _aligned(pool) -> bool:
    """Whether the fixed cases call only multiples of W: the implementation waives unaligned M (at W > 1)."""
    return bool(declared_waiver(pool.spec.impl, "unaligned_m")) and pool.spec.world_size > 1


def _supports(pool):
    """The shapes the implementation under test declares (kernel.interface: ``supports(N, K)``)."""
    return declared_support(pool.spec.impl)


def test_counter_wrap(pool):
    """The implementation's call counter across its wraps (2^31 and 2^32 calls), reached through the contract's
    ``advance_call_counter`` on a fresh instance: the calls before and after each boundary verified (values, exact
    bits, padding, guards) with one rank late, the advance and the crossing checked. Fixed cases, each failure
    prints its REPRO line; an implementation without a counter (``call_counter_bits`` None) is skipped."""
    if not declared_counter_bits(pool.spec.impl):
        pytest.skip(f"{pool.spec.impl} keeps no call counter the gate can advance (call_counter_bits is None)")
    for case in wrap_cases(*_where(pool), supports=_supports(pool)):
        check_case(pool, case)


def test_shard_boundaries(pool):
    """The M where the last ranks of the group run out of rows (W + 1, 2W + 1, ...: ranks with part of a shard
    or none, S >= 2) on the whole world, ``out=`` a guarded sentinel buffer, exact and gaussian inputs: padding
    rows, the empty ranks' rows and the guards checked on every call. A fixed case (the draw reaches these M
    about once a run); its failure prints its REPRO line."""
    world_size, _ = _where(pool)
    waived = declared_waiver(pool.spec.impl, "unaligned_m")
    if waived and world_size > 1:
        pytest.skip(f"every M of this test leaves ranks short of rows (not a multiple of W={world_size}): unaligned M "
                    f"waived by {pool.spec.impl}: {waived}")
    for case in shard_boundary_cases(*_where(pool), supports=_supports(pool)):
        check_case(pool, case)


def test_smallest_shapes(pool):
    """N = 1, K = 1 and both (beside the first listed shape): a GEMV fast path, a squeezed (S,) result, a row of
    fewer than 16 bytes. The whole world, ``out=`` a guarded sentinel buffer (none for N = K = 1: the call's own
    result), exact, non-finite and gaussian inputs, M = 2W + 1, 1, W + 1 (multiples of W for an implementation that
    waives unaligned M). A shape the implementation does not declare must be rejected with a typed error or take the
    fallback per can_run. Fixed cases (the draw's N and K start at 2); each failure prints its REPRO line."""
    world_size, topology = _where(pool)
    for case in smallest_shape_cases(world_size, topology, aligned=_aligned(pool)):
        check_case(pool, case)


def test_late_rank(pool):
    """One rank 2 s late (the draw's skews are 0-100 ms): a wait that gives up after a timeout and reduces without
    the late rank's rows (or with stale ones) passes every drawn case whose skew is inside its timeout. The whole
    world, the last rank late, one exact call at M = 2W + 1 into a guarded buffer. A fixed case; its failure prints
    its REPRO line."""
    world_size, topology = _where(pool)
    if world_size < 2:
        pytest.skip("W=1: no peer to be late for")
    for case in late_rank_cases(world_size, topology, supports=_supports(pool), aligned=_aligned(pool)):
        check_case(pool, case)


def test_back_to_back(pool):
    """Calls launched back to back (no wait, no oracle between them), the last rank 5 ms late before each: the
    gate's other calls each have the oracle's collective (which lines the ranks up) or a wait before the next, so a
    rank whose next call overwrites data a peer still reads (a done wait skipped, or passed early) was right
    almost everywhere else (the repeats, on the same inputs, aside). The
    whole world, M = 512, 385, 511 verified, then again on new inputs back to back, exact, guarded outs. A fixed
    case (the draw's compute cases make bursts too, mostly of few rows); its failure prints its REPRO line."""
    world_size, topology = _where(pool)
    if world_size < 2:
        pytest.skip("W=1: no peer reads this rank's data")
    for case in back_to_back_cases(world_size, topology, supports=_supports(pool), aligned=_aligned(pool)):
        check_case(pool, case)


def test_model_shapes(pool):
    """Model sizes (N = 7168, K = 448; N = 2880, K = 1440) on every topology: the cpu draw's N and K stay at
    320 and below, so a bug past a size (a partial last 1024-deep K chunk dropped, the last partial 4096-wide N
    block unwritten) hid from the CPU gate. The whole world, M = 2W + 1, 1, 65 (multiples of W for an implementation
    that waives unaligned M), exact, small and gaussian inputs, ``out=`` guarded (the last: none). Fixed cases;
    each failure prints its REPRO line; an undeclared shape is held to the support clause."""
    for case in model_shape_cases(pool.spec.world_size, aligned=_aligned(pool)):
        check_case(pool, case)


def test_dispatch_crossover(pool):
    """A layer dispatching on should_run / can_run on the whole world, M across the default threshold and every
    rank's own crossover: the ranks agree on each answer and the crossover, both sides give the same shard, under an
    engine's tensor defaults. The drawn dispatch cases draw TP layouts and are few in a run; this one always puts
    the whole world's ranks in one layer. A fixed case; its failure prints its REPRO line."""
    world_size, topology = _where(pool)
    for case in dispatch_crossover_cases(world_size, topology, supports=_supports(pool), aligned=_aligned(pool)):
        check_case(pool, case)


@settings(max_examples=examples("test_compute"))
@given(data=st.data())
def test_compute(pool, data):
    """Values (tolerance, exact, non-finite), padding, guards, repeatability, alternation, skew, TP layouts
    (subgroups, DP replicas, ranks outside the group); on every call the path taken and the result
    contract (dtype, shape, device, out= or a fresh result)."""
    case = data.draw(compute_cases(*_where(pool), supports=_supports(pool)), label="case")
    check_case(pool, case)


def test_kernel_paths(pool):
    """Every code path the implementation declares (``declared_paths``: for the fused kernel each tile config,
    the split-K builds per number of K parts) in every run, on cancellation, exact and gaussian inputs and in a
    replayed graph: a path only rare shapes select is never left to the draw. Not Hypothesis-driven: the
    calls are fixed, each failure prints its REPRO line."""
    world_size, _ = _where(pool)
    paths = declared_paths(pool.spec.impl, world_size)
    if not paths:
        pytest.skip(f"{pool.spec.impl} declares no kernel paths at W={world_size}")
    for i, path in enumerate(paths):
        for case in path_cases(path, i):
            check_case(pool, case)


@settings(max_examples=examples("test_layers"))
@given(data=st.data())
def test_layers(pool, data):
    """Layers as an engine holds them: several live instances (different N, K, max_M) called interleaved,
    destroyed and re-created, every instance's state checked; a layer dispatching on should_run / can_run
    (ranks agree, answers stable, both sides the same shard); on TP layouts too."""
    case = data.draw(layer_cases(*_where(pool), supports=_supports(pool)), label="case")
    check_case(pool, case)


@settings(max_examples=examples("test_capacity"))
@given(data=st.data())
def test_capacity(pool, data):
    """Out-of-range M rejected with CapacityError before any work, nothing changed, instance still works."""
    case = data.draw(capacity_cases(*_where(pool), supports=_supports(pool)), label="case")
    check_case(pool, case)


@settings(max_examples=examples("test_bad_call"))
@given(data=st.data())
def test_bad_call(pool, data):
    """Wrong dtype/shape/stride/device/alignment rejected with its typed error, nothing changed."""
    case = data.draw(bad_call_cases(*_where(pool), supports=_supports(pool)), label="case")
    check_case(pool, case)


@settings(max_examples=examples("test_graph_replay"))
@given(data=st.data())
def test_graph_replay(pool, data):
    """Deep CUDA graphs: several graphs at different M (both sides of the tile switch and of should_run)
    replayed in interleaved rounds, inputs changed in place and out poisoned before each replay, eager
    calls between rounds, one round on another stream."""
    if pool.spec.topology == "cpu":
        pytest.skip("CUDA graphs need a GPU topology (cpu topology gates the unfused path on gloo)")
    case = data.draw(graph_cases(*_where(pool), supports=_supports(pool)), label="case")
    check_case(pool, case)


@settings(max_examples=examples("test_streams"))
@given(data=st.data())
def test_streams(pool, data):
    """Calls on a non-default stream while another is busy; inputs overwritten and freed on the caller's
    stream right after the call returns: the result is that of the inputs at call time."""
    if pool.spec.topology == "cpu":
        pytest.skip("CUDA streams need a GPU topology (cpu topology gates the unfused path on gloo)")
    case = data.draw(streams_cases(*_where(pool), supports=_supports(pool)), label="case")
    check_case(pool, case)


@settings(max_examples=examples("test_capacity_under_python_O"))
@given(data=st.data())
def test_capacity_under_python_O(gate, pool_factory, data):
    """Out-of-range M in a pool started with ``python -O`` whatever the driver's level: the ranks report
    sys.flags.optimize, so this proves the checks survive -O."""
    impl, topology, world_size = gate
    if sys.flags.optimize:
        pytest.skip("the driver runs under -O: every pool of this run (test_capacity's too) already has -O ranks")
    pool = pool_factory(impl, topology, world_size, optimize=1)
    case = data.draw(capacity_cases(world_size, topology, supports=declared_support(impl)), label="case")
    check_case(pool, case)
    reported = {rank: hello.get("optimize") for rank, hello in pool.hello.items()}
    assert sorted(reported) == list(range(world_size)), f"ranks {sorted(reported)} reported their optimize level"
    assert set(reported.values()) == {1}, f"ranks ran with optimize levels {reported}, expected 1 on every rank"


#: Per-case deadline of a byte-boundary case (GiB of inputs, outputs and host staging per rank).
BYTE_BOUNDARY_DEADLINE_S = 600
#: byte_boundary cases hold about 3 * 2^32 bytes per rank (workspace, shard, output): on one GPU, W <= 2.
BYTE_BOUNDARY_MAX_W = 2


@settings(max_examples=examples("test_byte_boundaries"))
@given(data=st.data())
def test_byte_boundaries(pool, data):
    """Nightly, GPU: max_M * N * 2 bytes crossing 2^31 and 2^32 (32-bit offsets wrap there): rejected with a
    typed error or computed right on the rows at every boundary. ``HYPOTHESIS_PROFILE=nightly`` or
    ``GEMM_RS_BYTE_BOUNDARIES=1`` enables it."""
    if pool.spec.topology == "cpu":
        pytest.skip("byte boundaries need GPU memory (cases of ~3 * 2^32 bytes per rank); the CPU test of the "
                    "property runs at an emulated limit (tests/foundation/test_byte_boundary.py)")
    if PROFILE != "nightly" and os.environ.get("GEMM_RS_BYTE_BOUNDARIES") != "1":
        pytest.skip("nightly only (HYPOTHESIS_PROFILE=nightly or GEMM_RS_BYTE_BOUNDARIES=1)")
    if pool.spec.world_size > BYTE_BOUNDARY_MAX_W and pool.spec.topology == "shared-gpu":
        pytest.skip(f"W={pool.spec.world_size} ranks of ~3 * 2^32 bytes each do not fit one GPU")
    case = data.draw(byte_boundary_cases(*_where(pool), supports=_supports(pool)), label="case")
    check_case(pool, case, deadline=BYTE_BOUNDARY_DEADLINE_S)
