"""The fused GEMM + reduce-scatter: PTX of the kernel (no GPU needed), the workspace layout, the wrapper's
W > 1 logic, and on a Hopper GPU the multi-rank protocol, through the suite's own harness: a rank pool
(``torchrun``, fuzz/pool.py) of W ranks on one GPU running cases of the gate's families on ``fused`` and its
push and auto variants (``tests/kernel/protocol_impls.py``), judged by the gate's properties (fuzz/case.py
lists them; the verdict is the case report's status).

What the PTX tests pin down (the design record in ``kernel/fused/gemm_rs.py``):
  1. no ``multimem`` instruction, for every supported W;
  2. flags: ``ld.acquire.sys`` waits, ``st.release.sys`` signals, the ``atom.acq_rel.gpu`` CTA counter,
     ``nanosleep`` backoff and the ``trap`` of the spin timeout;
  3. the partial tile is complete in global memory before the signal (``cp.async.bulk.wait_group 0``
     and ``fence.proxy.async.global``);
  4. peer loads are 16-byte ``ld.global.v4.b32`` (W of them unrolled per vector), results
     ``st.global.v4.b32``; no local memory, wgmma mainloop kept.
"""

import re
import sys

import pytest
import torch

from fuzz.case import Case, PoolSpec
from fuzz.pool import RankPool
from fuzz.status import Status
from fuzz.strategies import wrap_cases
from kernel.fused import cutlass_available
from kernel.fused import wrapper as wrapper_mod
from kernel.fused.workspace import (
    DONE_BASE,
    GUARD_BYTES,
    READY_BASE,
    WorkspaceLayout,
    guard_words,
    tile_slots,
)

needs_cutlass = pytest.mark.skipif(not cutlass_available(), reason="nvidia-cutlass-dsl is not installed")


@pytest.fixture(scope="module")
def rs_ptx():
    if not cutlass_available():
        pytest.skip("nvidia-cutlass-dsl is not installed")
    from kernel.fused.compile import get_compiled_rs
    from kernel.fused.gemm import GemmConfig

    return {
        (W, cfg.tile_n): get_compiled_rs(512, 256, cfg, W, W - 1).ptx
        for W in (2, 8)
        for cfg in (GemmConfig(), GemmConfig(tile_m=64, consumer_warpgroups=1, tile_n=128))
    }


@pytest.mark.kernel
@needs_cutlass
def test_rs_ptx_has_no_multimem(rs_ptx):
    for key, ptx in rs_ptx.items():
        assert "multimem" not in ptx, key
        assert ".target sm_90a" in ptx


@pytest.mark.kernel
@needs_cutlass
def test_rs_ptx_flag_ops(rs_ptx):
    for key, ptx in rs_ptx.items():
        assert "ld.acquire.sys.global.u32" in ptx, key
        assert "st.release.sys.global.u32" in ptx, key
        assert "atom.acq_rel.gpu.global.add.u32" in ptx, key
        assert "ld.relaxed.gpu.global.u32" in ptx and "st.relaxed.gpu.global.u32" in ptx, key
        assert "nanosleep.u32" in ptx and "trap;" in ptx, key
        assert "%globaltimer" in ptx, key


@pytest.mark.kernel
@needs_cutlass
def test_rs_ptx_store_complete_before_signal(rs_ptx):
    for key, ptx in rs_ptx.items():
        full_wait = re.search(r"cp\.async\.bulk\.wait_group\s+0;", ptx)
        assert full_wait, key
        fence = ptx.find("fence.proxy.async.global", full_wait.end())
        assert fence > 0, key
        assert ptx.find("st.release.sys.global.u32", fence) > 0, key


@pytest.mark.kernel
@needs_cutlass
def test_rs_ptx_peer_loads_unrolled_over_ranks(rs_ptx):
    for (W, _tile_n), ptx in rs_ptx.items():
        assert ptx.count("ld.global.v4.b32") == W
        assert "st.global.v4.b32" in ptx
        assert "wgmma.mma_async" in ptx
        assert ".local" not in ptx


@pytest.mark.kernel
@needs_cutlass
def test_rs_kernel_rejects_bad_world():
    from kernel.fused.gemm import GemmConfig
    from kernel.fused.gemm_rs import HopperGemmRsBF16

    with pytest.raises(ValueError):
        HopperGemmRsBF16(512, 256, GemmConfig(), 1, 0)
    with pytest.raises(ValueError):
        HopperGemmRsBF16(512, 256, GemmConfig(), 4, 4)


# --- workspace layout (torch only) -----------------------------------------------------------------------
@pytest.mark.parametrize("W", [2, 4, 8])
@pytest.mark.parametrize("max_M,N", [(8192, 7168), (129, 1000), (1, 8)])
def test_workspace_layout_sections_disjoint_and_aligned(W, max_M, N):
    slots = tile_slots(max_M, N, [(128, 256), (128, 128)])
    L = WorkspaceLayout(W, max_M, N, slots)
    assert L.partial_rows >= max_M and L.partial_rows == W * L.s_max
    assert L.partials_bytes >= L.partial_rows * N * 2
    assert L.guard_a == L.partials_bytes  # red zone right after the partials
    assert L.flags_off == L.guard_a + GUARD_BYTES
    assert L.flag_words == READY_BASE + W * slots
    assert L.guard_b >= L.flags_off + L.flag_words * 4  # red zone right after the flags
    assert L.total == L.guard_b + GUARD_BYTES
    for off in (L.guard_a, L.flags_off, L.guard_b):
        assert off % 128 == 0


def test_tile_slots_cover_both_configs():
    assert tile_slots(8192, 7168, [(128, 256), (128, 128)]) == 64 * 56
    assert tile_slots(1, 8, [(128, 256), (128, 128)]) == 1
    assert W_FITS_DONE_AREA()


def W_FITS_DONE_AREA():
    return max(wrapper_mod.FUSED_WORLD_SIZES) <= DONE_BASE < READY_BASE


def test_guard_pattern_is_fixed_and_not_zero():
    a, b = guard_words(4096, "cpu", salt=1), guard_words(4096, "cpu", salt=1)
    assert torch.equal(a, b)
    assert int((a == 0).sum()) < 4
    assert not torch.equal(a, guard_words(4096, "cpu", salt=2))


def test_world_sizes_and_symmetric_memory_check():
    assert wrapper_mod.FUSED_WORLD_SIZES == (1, 2, 4, 8, 16)
    assert wrapper_mod.check_symmetric_memory(1) is None
    assert wrapper_mod.check_symmetric_memory(2) is None  # torch ships _symmetric_memory


def test_cpu_instance_has_no_workspace_and_falls_back():
    impl = wrapper_mod.FusedGemmRs(max_M=64, N=64, K=128, device="cpu")
    assert impl._workspace is None
    assert set(impl.guard_regions()) == {"after workspace"}  # the fallback's red zone
    impl.close()
    impl.close()  # idempotent


def test_workspace_close_drops_every_view_of_the_buffer():
    """close() leaves no tensor of the symmetric buffer on the workspace (the guards' views included): the memory
    goes by reference counting at close, never in a later collector pass that may run inside a CUDA-graph capture
    (torch's symmetric-memory destructor aborts the process there: a gate DIED on an H200)."""
    import weakref

    from kernel.fused.workspace import SymmetricWorkspace, WorkspaceLayout

    L = WorkspaceLayout(2, 64, 64, 4)
    ws = object.__new__(SymmetricWorkspace)  # the CPU stands in for the symmetric allocation
    ws.layout, ws.handle = L, object()
    ws.buf = torch.zeros(L.total, dtype=torch.uint8)
    ws.partials = ws.buf[: L.partial_rows * L.N * 2].view(torch.bfloat16).view(L.partial_rows, L.N)
    ws.guard_a = ws.buf[L.guard_a : L.guard_a + GUARD_BYTES].view(torch.int16)
    ws.flags = ws.buf[L.flags_off : L.flags_off + L.flag_words * 4].view(torch.int32)
    ws.guard_b = ws.buf[L.guard_b : L.guard_b + GUARD_BYTES].view(torch.int16)
    ws.guard_a_expected = ws.guard_b_expected = guard_words(GUARD_BYTES // 2, "cpu")
    views = [weakref.ref(getattr(ws, n)) for n in ("buf", "partials", "guard_a", "flags", "guard_b")]
    ws.close()
    assert ws.handle is None
    assert [n for n, v in vars(ws).items() if isinstance(v, torch.Tensor)] == []
    assert [r() for r in views] == [None] * len(views)  # gone by reference counting, no collector pass


@pytest.mark.parametrize("ids,shared", [((7, 9, 11, 13), False), ((7, 9, 7, 13), True), ((5, 5, 5, 5), True),
                                        ((3, 8), False), ((3, 3), True)])
def test_ranks_share_a_gpu_where_any_two_ranks_device_words_are_equal(ids, shared):
    """``ranks_share_a_gpu`` (the push order's choice: ``push_first`` where ranks time-slice one GPU) reads every
    rank's device word through the peer mappings: true as soon as *two* ranks of the group run on one GPU (two of
    four sharing one is time-slicing too), not only when every rank does. A fake handle stands in for the peer
    mappings, serving each rank's words from a CPU tensor."""
    from types import SimpleNamespace

    from kernel.fused.config import DEVICE_WORD
    from kernel.fused.workspace import SymmetricWorkspace

    W = len(ids)
    L = WorkspaceLayout(W, 64, 64, 4)
    areas = []
    for device_id in ids:
        area = torch.zeros(L.total // 4, dtype=torch.int32)
        area[L.flags_off // 4 + DEVICE_WORD] = device_id
        areas.append(area)

    def get_buffer(rank, shape, dtype, offset):
        return areas[rank][offset : offset + 1].view(shape)

    ws = object.__new__(SymmetricWorkspace)  # the CPU stands in for the symmetric allocation
    ws.layout, ws.handle = L, SimpleNamespace(get_buffer=get_buffer)
    assert ws.ranks_share_a_gpu() is shared


# --- GPU: the protocol across ranks sharing one GPU, on the gate's harness ---------------------------------
def _hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def on_hopper_ranks(test):
    """The marks of a GPU test of ranks sharing a Hopper GPU (skipped, with the reason, elsewhere)."""
    for mark in (pytest.mark.gpu, pytest.mark.hopper, pytest.mark.kernel, pytest.mark.multiproc,
                 pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
                 pytest.mark.skipif(torch.cuda.is_available() and not _hopper(), reason="needs an sm_90 GPU"),
                 pytest.mark.skipif(not cutlass_available(), reason="nvidia-cutlass-dsl is not installed")):
        test = mark(test)
    return test


#: What the protocol must survive, as cases of the gate's families on one long-lived instance per shape:
#: an alternating sequence of M (tiny, unaligned, one row, max_M - 1) with exact (bitwise vs the oracle and
#: the integer truth) and gaussian inputs taking turns; out=None; a late first and last rank; a rejected
#: call (M > max_M) and every bad call leaving state bit-identical and the instance working; a CUDA graph
#: replayed with inputs changed in place and out poisoned, then an eager call (device-side epochs).
PROTOCOL = dict(N=512, K=256, max_M=8192)
SPLIT_SHAPE = dict(N=4096, K=14336, max_M=1024)
ALTERNATION = [129, 1000, 7, 8191, 1, 129, 4096, 1000]


def _turns(first: int) -> list[str]:
    return [("exact", "gaussian")[(i + first) % 2] for i in range(len(ALTERNATION))]


def protocol_cases(W: int) -> list[Case]:
    return [
        *(Case("compute", seed=10 + first, ms=ALTERNATION, kinds=_turns(first), **PROTOCOL) for first in (0, 1)),
        Case("compute", seed=50, ms=[1000], kind="exact", out="none", **PROTOCOL),
        *(Case("compute", seed=60 + r, ms=[1000, 129], kind="gaussian", late_rank=r, delay_ms=50, **PROTOCOL)
          for r in sorted({0, W - 1})),
        Case("capacity", seed=3, ms=[129], bad="over", **PROTOCOL),
        Case("bad_call", seed=4, ms=[1000], bad="all", **PROTOCOL),
        # issue 14's dimensions: instances beside this one interleaved and re-created, a layer's dispatch
        # across the should_run threshold, a call on a side stream with the inputs overwritten right after
        # (the other instances share the case's N and K: their own workspaces, no compile within the deadline)
        Case("instances", seed=80, ms=[1000, 129, 7], kind="exact", shapes=[[512, 256, 1024]], order=[0, 1, 0],
             recreate=[[512, 256, 4096]], **PROTOCOL),
        Case("dispatch", seed=85, ms=[127, 128, 1000], kind="exact", out="none", **PROTOCOL),
        Case("streams", seed=87, ms=[4096], kind="exact", **PROTOCOL),
        Case("graph", seed=70, ms=[1000], kind="exact", repeat=4, **PROTOCOL),
        Case("compute", seed=90, ms=[129], kind="exact", **PROTOCOL),  # eager, after the graph's replays
        # split-K (pull: M = 257 and 384 take 128x224 tiles in 2 K parts at N = 4096, K = 14336, 385 128x256 in
        # 2; 1000 does not split; since the clustered 64-row tiles, 11th session, K = 8192 never splits at N =
        # 4096): alternating with a non-split call, exact, gaussian and cancel inputs, then replayed in a graph
        Case("compute", seed=20, ms=[257, 1000, 385, 384, 257], kinds=["exact", "gaussian", "cancel", "cancel",
                                                                        "exact"], **SPLIT_SHAPE),
        Case("graph", seed=72, ms=[257], kind="exact", repeat=4, **SPLIT_SHAPE),
        # the counter's wraps (2^31, 2^32 calls) through the wrapper's advance_call_counter, per protocol
        *wrap_cases(W, "shared-gpu"),
    ]


def test_protocol_cases_are_valid_cases_of_the_gate():
    """Runs on CPU: the GPU test's cases are well-formed and cover what rs_worker.py used to check."""
    from fuzz.families import FAMILIES, NIGHTLY_ONLY

    for W in (2, 4, 8):
        cases = protocol_cases(W)
        assert {c.family for c in cases} == set(FAMILIES) - NIGHTLY_ONLY  # byte boundaries: GiB cases, nightly
        assert all(Case.from_json(c.to_json()) == c and len(c.call_kinds()) == len(c.ms) for c in cases)
        assert {c.late_rank for c in cases} == {None, 0, W - 1}
        assert sum(c.call_kinds().count("exact") for c in cases if c.ms == ALTERNATION) == len(ALTERNATION)


#: (implementation, W) of the GPU protocol test: pull (the default ``fused``); push with the interleaved order
#: forced (its waits under time-slicing) and with the order the wrapper chooses itself there (push_first: the
#: ranks share a GPU); auto with a table that alternates push and pull calls on one workspace
#: (tests/kernel/protocol_impls.py).
PROTOCOL_IMPLS = [
    ("fused", 2), ("fused", 4), ("fused", 8),
    ("tests.kernel.protocol_impls:PushInterleaved", 2), ("tests.kernel.protocol_impls:PushInterleaved", 4),
    ("tests.kernel.protocol_impls:PushChosenOnSharedGpu", 2), ("tests.kernel.protocol_impls:PushChosenOnSharedGpu", 8),
    ("tests.kernel.protocol_impls:AutoAlternatingOnSharedGpu", 2),
    ("tests.kernel.protocol_impls:AutoAlternatingOnSharedGpu", 4),
]
PROTOCOL_IDS = ["pull-W2", "pull-W4", "pull-W8", "push-interleaved-W2", "push-interleaved-W4", "push-chosen-W2",
                "push-chosen-W8", "auto-alternating-W2", "auto-alternating-W4"]


def test_protocol_impls_are_loadable_and_named():
    """Runs on CPU: every variant the GPU test names loads, and each forces what its name says (a CPU
    instance falls back, so the variants' own checks are exercised on the GPU only)."""
    from kernel.registry import load_implementation
    from tests.kernel import protocol_impls

    assert len(PROTOCOL_IDS) == len(PROTOCOL_IMPLS) == len(set(PROTOCOL_IDS))
    for impl, _W in PROTOCOL_IMPLS:
        cls = load_implementation(impl)
        assert cls.main_path == "fused"
    assert set(protocol_impls.ALTERNATING_BY_M.values()) == {"pull", "push"}
    from kernel.fused.crossover import protocol_for

    chosen = {protocol_for(M, protocol_impls.ALTERNATING_BY_M) for M in ALTERNATION}
    assert chosen == {"pull", "push"}  # the alternation really runs both kernels


def test_protocol_impl_check_fails_on_the_wrong_order():
    """The variants' construction check raises when the instance took something else."""
    from tests.kernel.protocol_impls import _require

    class Impl:
        push_order = "interleaved"

    _require(Impl(), "push_order", "interleaved")
    with pytest.raises(RuntimeError, match="push_first"):
        _require(Impl(), "push_order", "push_first")


@on_hopper_ranks
@pytest.mark.parametrize("impl,W", PROTOCOL_IMPLS, ids=PROTOCOL_IDS)
def test_fused_rs_shared_gpu(impl, W):
    pool = RankPool(PoolSpec(impl=impl, topology="shared-gpu", world_size=W, optimize=sys.flags.optimize))
    try:
        for i, case in enumerate(protocol_cases(W)):
            report = pool.run(case, deadline=600 if i == 0 else 200)  # the first case compiles the kernels
            assert report.status == Status.PASSED, report.render()
            if case.family in ("compute", "graph"):  # every call of the fused implementation took the fused path
                paths = {c["path"] for calls in report.paths().values() for c in calls}
                assert paths == {"fused"}, f"paths taken: {paths}\n{report.render()}"
    finally:
        pool.close()


@on_hopper_ranks
def test_fused_world_instance_after_a_subgroup_only_some_ranks_were_in():
    """torch numbers symmetric-memory rendezvous per process: after ranks 1 and 3 of 4 built an instance on their
    own group, a new WORLD instance hung in ``rendezvous`` (gate HANGs on an H200). The workspace's catch-up
    (``align_rendezvous_counts``) lets every later layout and world instance build and pass."""
    W = 4
    pool = RankPool(PoolSpec(impl="fused", topology="shared-gpu", world_size=W, optimize=sys.flags.optimize))
    cases = [
        Case("compute", seed=91, ms=[129], kind="exact", layout=[[1, 3]], **PROTOCOL),  # ranks 1, 3: one more
        Case("compute", seed=92, ms=[1000], kind="exact", N=256, K=256, max_M=4096),  # a new world instance
        Case("compute", seed=93, ms=[7], kind="exact", layout=[[0, 2], [1, 3]], N=256, K=512, max_M=2048),
        Case("compute", seed=94, ms=[4096], kind="exact", N=512, K=512, max_M=4096),
    ]
    try:
        for i, case in enumerate(cases):
            report = pool.run(case, deadline=600 if i == 0 else 300)
            assert report.status == Status.PASSED, report.render()
            paths = {c["path"] for calls in report.paths().values() for c in calls}
            assert paths == {"fused"}, f"paths taken: {paths}\n{report.render()}"
    finally:
        pool.close()
