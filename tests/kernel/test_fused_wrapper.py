"""FusedGemmRs: eligibility and bad-call checks, the protocol switch, the tile choice and the measured
``should_run`` crossover everywhere (no GPU needed); on a Hopper GPU, the W == 1 fused path of both
protocols' tile configs against an fp64 truth with a derived bound.

Verification model of the GPU tests, each over M in MS, for the tile configs of both protocols (128x256,
128x224, 64x128; pull with the 4-deep epilogue ring, push with the deep one):
  1. every valid element within the derived bound of the fp64 truth (fp32 accumulate, bf16 out);
  2. the rows of the buffer past the ``out`` view keep their sentinel bit for bit;
  3. the same inputs give bitwise-identical outputs (and an alternating M sequence as well);
  4. the largest and the smallest tile config are among the cases;
  5. a call captured in a CUDA graph at one M, replayed with inputs changed in place and out poisoned,
     matches a fresh eager call bitwise;
  6. a kernel loaded from the host-wide cache (exported object file) computes bit for bit what the
     freshly compiled one does.
"""

import contextlib
import os
import subprocess
import sys
import warnings

import pytest
import torch

from kernel import (
    CapacityError,
    FusedPathUnavailable,
    load_implementation,
)
from kernel.fused import FusedGemmRs, FusedGemmRsPush, cutlass_available
from kernel.fused import wrapper as wrapper_mod

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
U_BF16 = 2.0**-8
U_FP32 = 2.0**-24


def _cpu_impl(**kw):
    return FusedGemmRs(max_M=256, N=64, K=128, device="cpu", **kw)


def _operands(M, N=64, K=128, device="cpu", seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(M, K, generator=g).to(torch.bfloat16).to(device)
    w = torch.randn(N, K, generator=g).to(torch.bfloat16).to(device)
    return x, w


# --- no GPU needed -----------------------------------------------------------------------------------
def test_registry_names_fused():
    assert load_implementation("fused") is FusedGemmRs


def test_can_run_gives_a_reason_on_cpu():
    impl = _cpu_impl()
    _, w = _operands(1)
    ok = impl.can_run(w)
    assert not ok
    assert "not a CUDA device" in ok.reason


def test_check_chain_reasons():
    assert wrapper_mod.check_world_size(1) is None
    for W in (2, 4, 8, 16):
        assert wrapper_mod.check_world_size(W) is None
    for W in (3, 6, 32):
        assert "supports W in (1, 2, 4, 8, 16)" in wrapper_mod.check_world_size(W)
    assert "multiple of the kernel's K tile 64" in wrapper_mod.check_dims(64, 100)
    assert "multiple of 8" in wrapper_mod.check_dims(60, 128)
    assert wrapper_mod.check_dims(64, 128) is None
    assert "bfloat16" in wrapper_mod.check_weight(torch.zeros(64, 128), 64, 128, torch.device("cpu"))
    assert "contiguous" in wrapper_mod.check_weight(
        torch.zeros(128, 64, dtype=torch.bfloat16).t(), 64, 128, torch.device("cpu")
    )


def test_missing_cutlass_is_a_reason(monkeypatch):
    monkeypatch.setattr(wrapper_mod, "cutlass_available", lambda: False)
    assert "not importable" in wrapper_mod.check_cutlass()


def test_cpu_falls_back_to_unfused_and_says_so():
    impl = _cpu_impl()
    x, w = _operands(5)
    out = torch.full((5, 64), 7.0, dtype=torch.bfloat16)
    y = impl(x, w, out=out)
    assert y is out
    assert impl.last_path == "unfused"
    torch.testing.assert_close(y.float(), x.float() @ w.float().T, rtol=2 * U_BF16, atol=0.05)


def test_forced_fused_raises_where_can_run_is_false():
    impl = _cpu_impl(force_fused=True)
    x, w = _operands(5)
    with pytest.raises(FusedPathUnavailable, match="not a CUDA device"):
        impl(x, w)
    with pytest.raises(CapacityError):  # bad-call checks come first
        impl(*_operands(300))


@pytest.mark.parametrize("M", [0, 257, 10_000])
def test_out_of_range_m_raises_capacity_error(M):
    impl = _cpu_impl()
    x = torch.zeros(M, 128, dtype=torch.bfloat16)
    _, w = _operands(1)
    with pytest.raises(CapacityError):
        impl(x, w)
    assert impl.last_path is None


# Bad calls: tests/foundation/test_bad_call_table.py runs the one bad-call table (fuzz/bad_calls.py) on
# this wrapper's checks too.


def test_checks_survive_python_O():
    code = (
        "import torch\n"
        "from kernel import CapacityError, DTypeError\n"
        "from kernel.fused import FusedGemmRs\n"
        "impl = FusedGemmRs(max_M=16, N=64, K=128, device='cpu')\n"
        "w = torch.zeros(64, 128, dtype=torch.bfloat16)\n"
        "for M in (0, 17):\n"
        "    try:\n"
        "        impl(torch.zeros(M, 128, dtype=torch.bfloat16), w)\n"
        "    except CapacityError:\n"
        "        pass\n"
        "    else:\n"
        "        raise SystemExit(f'M={M} accepted under -O')\n"
        "try:\n"
        "    impl(torch.zeros(4, 128), w)\n"
        "except DTypeError:\n"
        "    print('ok')\n"
    )
    cmd = [sys.executable, "-O", "-c", code]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "ok"


def test_import_kernel_without_cutlass():
    code = (
        "import sys\n"
        "sys.modules['cutlass'] = None\n"
        "import kernel, kernel.fused\n"
        "impl = kernel.fused.FusedGemmRs(max_M=8, N=64, K=128)\n"
        "print(impl.can_run(__import__('torch').zeros(64, 128, dtype=__import__('torch').bfloat16)).ok)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip() == "False"


def test_protocol_is_validated_and_recorded():
    with pytest.raises(ValueError, match="unknown protocol"):
        _cpu_impl(protocol="pushy")
    impl = _cpu_impl(protocol="push")
    assert impl.protocol == "push" and impl.describe()["protocol"] == "push"
    assert _cpu_impl().protocol == "pull" == wrapper_mod.DEFAULT_PROTOCOL
    assert load_implementation("kernel.fused:FusedGemmRsPush") is FusedGemmRsPush


def test_push_implementation_never_falls_back():
    """``FusedGemmRsPush`` forces its own kernel: on a machine where it cannot run, a call raises instead of
    silently running (and passing as) the unfused implementation."""
    impl = FusedGemmRsPush(max_M=256, N=64, K=128, device="cpu")
    assert impl.force_fused and impl.protocol == "push" and impl.name == "fused-push"
    with pytest.raises(FusedPathUnavailable, match="not a CUDA device"):
        impl(*_operands(5))
    assert impl.last_path is None


def test_tile_choice_is_a_function_of_m_and_fills_the_sms():
    from kernel.fused.tiles import kernel_configs, pick_config, tile_count

    pull = kernel_configs("pull", 132)
    assert [(c.tile_m, c.tile_n, c.consumer_warpgroups, c.split_k, c.l2_hints, c.cluster_m) for c in pull] == [
        (128, 256, 2, False, "", 1), (128, 224, 2, False, "", 1), (128, 256, 2, True, "stream", 1),
        (128, 224, 2, True, "stream", 1), (64, 112, 1, False, "", 1), (64, 112, 1, False, "", 2),
        (64, 128, 1, False, "", 2), (64, 128, 1, False, "", 1)]
    assert [c.label for c in pull[4:]] == ["64x112", "64x112c2", "64x128c2", "64x128"]
    # pull tiles the whole M x N (W does not enter): 64-row tiles while 128-row ones leave SMs idle: 64x112 at M
    # <= 64 for N = 7168 (64 tiles, 64x128: 56; its clustered twin ties and comes second: no idle CTA), 64x128 in
    # clusters of two at M = 128 and 256 (the B k-tile crosses L2 once per two M tiles: 0.98x / 0.81x torch.mm on
    # one H200, 11th session, where 128x224 ran 0.54x / 0.63x), one wave of 128x224 at M = 2048 for N = 7168
    # (512 tiles in 4 full waves, not 448 in 4 waves the last 39% full), 128x256 from 4096. Without K no split-K
    # config is a candidate.
    chosen = {M: pick_config(pull, M, 7168, 2, "pull") for M in (1, 128, 256, 2048, 4096, 16384)}
    assert chosen == {1: 4, 128: 6, 256: 6, 2048: 1, 4096: 0, 16384: 0}
    assert all(pick_config(pull, M, 7168, 16, "pull") == chosen[M] for M in chosen)
    assert pick_config(pull, 1024, 8192, 2, "pull") == 0 and pick_config(pull, 1024, 512, 2, "pull") == 5
    # 64x112 where it fills more SMs in the same waves, never where its extra column tiles add a wave (N = 8192:
    # 74 column tiles, 2 x 74 > 132)
    assert pick_config(pull, 64, 8192, 2, "pull") == 4 and pick_config(pull, 128, 8192, 2, "pull") == 6
    # whole clusters: an odd number of M tiles counts an idle twin
    assert tile_count(pull[6], 129, 7168, 2, False) == 4 * 56 and tile_count(pull[7], 129, 7168, 2, False) == 3 * 56
    push = kernel_configs("push", 132)
    assert [(c.tile_m, c.tile_n, c.consumer_warpgroups) for c in push] == [(128, 256, 2), (128, 224, 2),
                                                                          (64, 128, 1)]
    assert tile_count(push[0], 2048, 7168, 2, True) == 2 * 8 * 28  # shard by shard
    assert tile_count(push[0], 129, 7168, 16, True) == 16 * 1 * 28  # ... a tile per shard even at S = 9
    chosen = {M: pick_config(push, M, 7168, 2, "push") for M in (128, 256, 2048, 8192)}
    # 64-row tiles when a shard is 64 rows; at M = 256 one wave of 128x224 tiles, not two of 64x128 (measured
    # 0.68x torch.mm on the first H200 run); 224-wide fill the last wave at 2048; 256-wide at 8192
    assert chosen == {128: 2, 256: 1, 2048: 1, 8192: 0}
    assert all(pick_config(push, M, 7168, 2, "push") == chosen[M] for M in chosen)  # deterministic
    assert pick_config(push, 8192, 8192, 2, "push") == 0  # 8192 = 32 x 256: no ragged 224-wide column


def test_split_k_is_chosen_where_the_tiles_alone_leave_sms_idle_and_k_is_long():
    """Split-K (pull, W = 1 too), where the first split-K run measured it fastest (one H200, 2026-12-01): 128x256
    in 2 K parts at M = 192 and 256, N = 8192, K = 14336 (0.85x torch.mm at 256, the best unsplit config 0.67x),
    128x224 in 2 parts at M = 256, N = 7168; not at M = 64 (the 64x112 tiles), not at M = 128 (the clustered 64x128
    tiles: 486 vs 398 TF/s at N = 8192, K = 14336 on one H200, 11th session), not at K = 2048 (the parts' phase
    costs more than the split saves); never above SPLIT_K_MAX_M, never with one k-tile, never for push."""
    from kernel.fused.config import SPLIT_K_MAX_M
    from kernel.fused.tiles import admissible_splits, kernel_configs, pick_config, pick_splits, split_workspace

    pull = kernel_configs("pull", 132)
    # the one statement of where P may run: the cost model's choice and a forced P are checked against it
    assert admissible_splits(pull[2], 128, 14336) == (2, 3, 4) and admissible_splits(pull[2], 128, 192) == (2, 3)
    assert admissible_splits(pull[2], SPLIT_K_MAX_M + 1, 14336) == () == admissible_splits(pull[0], 128, 14336)
    assert admissible_splits(pull[2], 128, None) == () == admissible_splits(pull[2], 128, 64)
    for M in range(1, SPLIT_K_MAX_M + 2, 37):
        assert pick_splits(pull[2], M, 8192, 2048, 2) in (admissible_splits(pull[2], M, 2048) or (0,))
    for W in (1, 2, 16):
        for M, N, K, expected in ((192, 8192, 14336, (256, True, 2)), (256, 8192, 14336, (256, True, 2)),
                                  (256, 7168, 14336, (224, True, 2)), (64, 8192, 14336, (112, False, 1)),
                                  (256, 7168, 2048, (128, False, 1)), (128, 8192, 2048, (128, False, 1)),
                                  (128, 8192, 14336, (128, False, 1))):
            c = pull[pick_config(pull, M, N, W, "pull", K)]
            assert (c.tile_n, c.split_k, pick_splits(c, M, N, K, W)) == expected, (M, N, K, W)
    for M in (SPLIT_K_MAX_M + 1, 2048, 16384):
        assert not pull[pick_config(pull, M, 8192, 2, "pull", 14336)].split_k
        assert pick_splits(pull[2], M, 8192, 14336, 2) == 0
    assert not any(pull[pick_config(pull, M, 8192, 2, "pull", 64)].split_k for M in range(1, 600, 7))
    assert pick_splits(pull[2], 128, 8192, 64, 2) == 0 and pick_splits(pull[2], 128, 8192, 128, 2) == 2
    assert pick_splits(pull[0], 128, 8192, 14336, 2) == 1  # not a split-K config
    # the parts workspace covers every split-K config at every M up to the limit (a forced launch fits too)
    part_bytes, units = split_workspace(pull, 8192, 8192, 14336, 2, "pull")
    assert units >= 4 * 32 and part_bytes >= 4 * 32 * 128 * 256 * 4
    assert split_workspace(pull, 100, 8192, 14336, 2, "pull")[1] < units  # sized by max_M
    assert split_workspace(pull, 8192, 8192, 64, 2, "pull") == (0, 0)  # one k-tile: never split
    assert split_workspace(kernel_configs("push", 132), 8192, 8192, 14336, 2, "push") == (0, 0)


def test_split_rows_and_workspace_by_segment_equal_their_m_by_m_definition():
    """split_rows and split_workspace ask the cost model once per 64-row segment (and per protocol plan M), not
    at every M: the same answers as M by M, for shapes that split and shapes that do not, max_M on and off the
    64-row grid, W 1..16, with and without an auto plan, clustered configs or not (an odd SM count)."""
    from kernel.fused.config import SPLIT_K_MAX_M
    from kernel.fused.protocol_plan import ProtocolPlan
    from kernel.fused.tiles import (
        admissible_splits,
        kernel_configs,
        pick_config,
        pick_splits,
        row_segments,
        split_rows,
        split_workspace,
        tile_count,
    )

    def rows_by_m(configs, max_M, N, K, W, plan):
        picked = [M for M in range(1, min(max_M, SPLIT_K_MAX_M) + 1)
                  if (plan is None or plan.for_m(M) == "pull")
                  and configs[pick_config(configs, M, N, W, "pull", K)].split_k]
        return (picked[0], picked[-1]) if picked else None

    def workspace_by_m(configs, max_M, N, K, W, every_p):
        need = (0, 0)
        for c in (c for c in configs if c.split_k):
            for M in range(1, min(max_M, SPLIT_K_MAX_M) + 1):
                p = pick_splits(c, M, N, K, W)
                p = max(admissible_splits(c, M, K)) if every_p and p else p
                units = tile_count(c, M, N, W, False) * p
                need = (max(need[0], units * c.tile_m * c.tile_n * 4), max(need[1], units))
        return need

    assert row_segments(130) == [(1, 64), (65, 128), (129, 130)]
    assert row_segments(64, breaks=(10, 64, 900)) == [(1, 9), (10, 63), (64, 64)] and row_segments(0) == []
    plans = (None, ProtocolPlan.of("auto", 4, {1: "push", 200: "pull", 390: "push"}),
             ProtocolPlan.of("auto", 4, {1: "pull", 130: "push", 131: "pull"}))
    splitting = 0
    for sm_count in (132, 131):
        pull = kernel_configs("pull", sm_count)
        for N, K in ((2560, 8192), (8192, 14336), (7168, 14336), (2304, 7168), (512, 256), (3072, 5632)):
            for W in (1, 2, 8, 16):
                for max_M in (1, 64, 129, 300, 512, 1000):
                    for plan in plans:
                        got = split_rows(pull, max_M, N, K, W, "pull", plan=plan)
                        assert got == rows_by_m(pull, max_M, N, K, W, plan), (sm_count, N, K, W, max_M, plan)
                        splitting += got is not None
                    for every_p in (False, True):
                        assert (split_workspace(pull, max_M, N, K, W, "pull", every_p=every_p)
                                == workspace_by_m(pull, max_M, N, K, W, every_p)), (sm_count, N, K, W, max_M)
    assert splitting >= 20  # the comparison saw shapes that split


def test_declared_paths_cover_every_tile_config_and_each_split():
    """The gate runs every declared path in every run (fuzz/test_gemm_rs.py::test_kernel_paths): for the fused
    kernel each tile config of its protocol is among them, every split-K config with each K-part count the
    path shapes reach, each path's call really picks its config, and the unfused implementation declares none."""
    from kernel.fused.tiles import kernel_configs, pick_config, pick_splits
    from kernel.unfused import UnfusedGemmRs

    for cls, protocol in ((FusedGemmRs, "pull"), (FusedGemmRsPush, "push")):
        configs = kernel_configs(protocol, 132)
        for W in (1, 2, 4, 8, 16):
            paths = cls.declared_paths(W)
            picked = {pick_config(configs, p.M, p.N, W, protocol, p.K) for p in paths}
            assert picked == set(range(len(configs))), (cls.__name__, W, paths)
            for p in paths:
                c = configs[pick_config(configs, p.M, p.N, W, protocol, p.K)]
                assert p.label.startswith(f"{protocol} {c.label}")
                assert ("split-K" in p.label) == c.split_k
                assert p.replay == (c.split_k or c.cluster_m > 1)  # device state of their own / a cluster launch
                if c.split_k:
                    assert p.label.endswith(f"P={pick_splits(c, p.M, p.N, p.K, W)}")
            assert len({p.label for p in paths}) == len(paths)
    assert len([p for p in FusedGemmRs.declared_paths(2) if "split-K" in p.label]) >= 2  # P = 3 on both
    assert len([p for p in FusedGemmRs.declared_paths(2) if "idle twin" in p.label]) == 2  # each clustered config
    assert FusedGemmRs.declared_paths(3) == () and UnfusedGemmRs.declared_paths(2) == ()


def test_every_declared_path_is_called_at_its_own_m_on_each_kind():
    """test_kernel_paths calls each path's own M on gaussian, cancellation and exact inputs: the cancel kind at the
    path's M is what shows split-K parts summed in bf16 (the ``bf16_parts`` build got through the ci gate on an
    H200 while the cancel call was the one at the other M, 22nd session)."""
    from fuzz.strategies import PATH_KINDS, path_cases

    assert set(PATH_KINDS) == {"gaussian", "cancel", "exact"}
    for W in (1, 2, 4, 8, 16):
        for i, path in enumerate(FusedGemmRs.declared_paths(W)):
            compute = path_cases(path, i)[0]
            at_path = [k for m, k in zip(compute.ms, compute.call_kinds()) if m == path.M]
            assert sorted(set(at_path)) == sorted(PATH_KINDS), (W, path, compute.ms, compute.call_kinds())
            assert any(m != path.M for m in compute.ms)  # a call of another M between them
            assert compute.call_kinds()[0] == "gaussian" and compute.ms[0] == path.M  # batch invariance's tokens


def test_batch_invariance_is_waived_only_where_calls_split(monkeypatch):
    """Split-K makes a token's bits depend on M (K parts summed in fp32 vs one chain): the default fused
    instance waives ``batch_invariant`` exactly when some M <= max_M splits, naming the range; an instance whose
    calls never split keeps it; ``FusedGemmRsBatchInvariant`` compiles no split-K config and keeps it always."""
    from types import SimpleNamespace

    from kernel.fused import FusedGemmRsBatchInvariant

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(multi_processor_count=132))

    def waived(cls, by_m=None, **shape):
        impl = cls(device="cpu", **shape)
        if by_m is not None:  # auto's table at W = 2 (a CPU instance without a group is W = 1: pull everywhere)
            from kernel.fused.protocol_plan import ProtocolPlan

            impl._plan = ProtocolPlan.of("auto", 2, by_m)
        impl.waived_clauses = {}  # the CPU fallback's waivers out of the way: the kernel's own decision
        impl._tile_configs = {}
        impl._waive_batch_invariance_where_split()
        reason = impl.waived_clauses.get("batch_invariant")
        configs = impl.tile_configs("pull")
        impl.close()
        return reason, configs

    reason, configs = waived(FusedGemmRs, max_M=8192, N=4096, K=14336)
    assert reason and "M = 257..512" in reason and any(c.split_k for c in configs)
    assert waived(FusedGemmRs, max_M=256, N=4096, K=14336)[0] is None  # its calls never reach the split rows
    assert waived(FusedGemmRs, max_M=8192, N=4096, K=8192)[0] is None  # clustered 64-row tiles, never a split
    assert waived(FusedGemmRs, max_M=8192, N=512, K=256)[0] is None
    reason, configs = waived(FusedGemmRsBatchInvariant, max_M=8192, N=4096, K=14336)
    assert reason is None and configs and not any(c.split_k for c in configs)
    assert not any("split-K" in p.label for p in FusedGemmRsBatchInvariant.declared_paths(2))
    assert FusedGemmRs(max_M=64, N=64, K=128, device="cpu", batch_invariant=True).batch_invariant
    # auto: only the M where it runs pull can split (push from 384 here: the waiver names 257..383)
    from kernel.fused import FusedGemmRsAuto

    reason, _ = waived(FusedGemmRsAuto, by_m={1: "pull", 384: "push"}, max_M=8192, N=4096, K=14336)
    assert reason and "M = 257..383" in reason
    assert waived(FusedGemmRsAuto, by_m={1: "push", 4096: "pull"}, max_M=8192, N=4096, K=14336)[0] is None


def test_split_parts_refuse_a_launch_past_their_capacity():
    import torch

    from kernel.fused.workspace import SplitParts

    parts = SplitParts(4 * 1024, 4, torch.device("cpu"), own_flags=True)
    parts.check_fits(4, 1024)
    for units, unit_bytes in ((5, 1024), (4, 1025)):
        with pytest.raises(ValueError, match="exceeds the parts workspace"):
            parts.check_fits(units, unit_bytes)
    assert parts.flags is not None and int(parts.ready.sum()) == 0
    assert torch.equal(parts.guard, parts.guard_expected)
    parts.close()
    assert parts.parts is None



@pytest.mark.parametrize("units", [1, 4, 37])
def test_split_parts_hold_a_part_word_and_a_slice_word_per_unit(units):
    """The split-K kernel raises unit u's part word at ``ready[u]`` and (W > 1) its slice word at ``ready[units + u]``
    (``slice_flags = part_flags + split_units * 4``, gemm_rs.py): the ready words are 2 x units, all zero at first; one
    word a unit would put every slice word of the second half past the tensor, into whatever the allocator put next."""
    import torch

    from kernel.fused.workspace import SplitParts

    for own_flags in (True, False):
        parts = SplitParts(units * 1024, units, torch.device("cpu"), own_flags=own_flags)
        assert parts.ready.dtype == torch.int32 and parts.ready.numel() == 2 * units
        assert int(parts.ready.abs().sum()) == 0
        parts.close()

def test_push_configs_have_the_deep_epilogue_ring_and_fit_in_shared_memory():
    pytest.importorskip("cutlass")
    from kernel.fused.config import PUSH_EPI_STAGES, SMEM_CAPACITY_SM90
    from kernel.fused.gemm import HopperGemmBF16
    from kernel.fused.tiles import kernel_configs

    for c in kernel_configs("push", 132):
        assert c.epi_stages == PUSH_EPI_STAGES
        assert c.epi_stages * c.epi_tile_n >= min(c.tile_n, 256)  # a whole tile (up to 256 wide) fits the ring
        ab = HopperGemmBF16(512, 256, c).ab_stage  # as many mainloop stages as fit (the constructor checks)
        stage, ring = (c.tile_m + c.tile_n) * c.tile_k * 2, c.tile_m * c.epi_tile_n * 2 * c.epi_stages
        assert ab >= 3 and ab * stage + ring + 1024 <= SMEM_CAPACITY_SM90, c
    assert all(c.epi_stages == 4 for c in kernel_configs("push", 132, epi_stages=4))  # the ring4 experiment
    assert all(c.epi_stages == 4 for c in kernel_configs("pull", 132))


def test_ranks_compile_their_configs_starting_at_different_ones(monkeypatch):
    """With the host-wide kernel cache, rank r compiles config ``r % count`` first (the ranks of a group
    compile different keys at once); the compiled tuple keeps the configs' order."""
    from kernel.fused import compile as compile_mod
    from kernel.fused.tiles import kernel_configs

    calls = []

    def fake(N, K, config, W, **kw):
        calls.append((config.tile_m, config.tile_n, kw["protocol"], kw["order"]))
        return config

    monkeypatch.setattr(compile_mod, "get_compiled_rs", fake)
    impl = FusedGemmRsPush(max_M=256, N=64, K=128, device="cpu")
    configs = kernel_configs("push", 132)
    impl._tile_configs, impl.world_size, impl.push_order = {"push": configs}, 4, "interleaved"
    for rank in range(4):
        impl.rank, impl._compiled, calls[:] = rank, None, []
        assert impl._compile() == {"push": configs}
        first = configs[rank % 3]
        assert calls[0] == (first.tile_m, first.tile_n, "push", "interleaved") and len(calls) == 3
    impl.close()


def test_auto_protocol_picks_the_measured_faster_kernel_per_m(tmp_path):
    """``protocol="auto"``: the protocol of the largest measured M <= M (the smallest measured below them
    all); only the protocols the table names are compiled; without a table, the default protocol alone."""
    from kernel.fused import FusedGemmRsAuto
    from kernel.fused.crossover import faster_protocol_by_m, measured_protocols, protocol_for, write_entries

    by_m = {128: "push", 256: "pull", 1024: "push"}
    assert [protocol_for(M, by_m) for M in (1, 128, 255, 256, 1023, 1024, 10**6)] == [
        "push", "push", "push", "pull", "pull", "push", "push"]
    assert faster_protocol_by_m({128: (2.0, 1.0), 256: (1.0, 1.5), 512: (1.0, 1.0)}) == {
        128: "push", 256: "pull", 512: "pull"}  # a tie keeps the proven protocol
    path = str(tmp_path / "crossover.json")
    write_entries([{"N": 64, "K": 128, "W": 2, "protocol": "push", "min_m": 128}], path,
                  protocols=[{"N": 64, "K": 128, "W": 2, "by_m": by_m}])
    assert measured_protocols(64, 128, 2, path) == by_m and measured_protocols(64, 128, 4, path) is None
    write_entries([], path)  # crossover entries written later keep the protocol entries
    assert measured_protocols(64, 128, 2, path) == by_m

    from kernel.fused.protocol_plan import ProtocolPlan

    impl = FusedGemmRsAuto(max_M=256, N=64, K=128, device="cpu")
    assert impl.protocol == "auto" and impl.name == "fused-auto" and impl.force_fused
    assert impl.kernel_protocols() == ("pull",)  # W == 1, nothing measured: the default alone
    impl.close()
    assert ProtocolPlan.of("auto", 2).kernel_protocols() == ("pull",)  # nothing measured for this shape
    assert ProtocolPlan.of("auto", 1, by_m).kernel_protocols() == ("pull",)  # W == 1: the plain GEMM
    plan = ProtocolPlan.of("auto", 2, by_m)
    assert plan.kernel_protocols() == ("pull", "push") and plan.table() == by_m
    assert [plan.for_m(M) for M in (1, 300, 2048)] == ["push", "pull", "push"]
    only_push = ProtocolPlan.of("auto", 2, {1: "push"})
    assert only_push.kernel_protocols() == ("push",) and only_push.for_m(5000) == "push"
    assert ProtocolPlan.of("push", 2).for_m(1) == "push" and ProtocolPlan.of("pull", 8).kernel_protocols() == ("pull",)
    impl = FusedGemmRsAuto(max_M=256, N=64, K=128, device="cpu", protocol_by_m={"1": "push", 300: "pull"})
    assert impl.describe()["protocol_by_m"] == {1: "push", 300: "pull"}  # the table given, as ints
    assert impl.call_protocol(299) == "pull"  # W == 1 on CPU: the plain GEMM's (default) protocol
    impl.close()
    for bad in ({128: "fast"}, {}, {0: "push"}):
        with pytest.raises(ValueError, match="protocol_by_m"):
            FusedGemmRsAuto(max_M=256, N=64, K=128, device="cpu", protocol_by_m=bad)
    with pytest.raises(ValueError, match="auto protocol's table"):
        FusedGemmRs(max_M=256, N=64, K=128, device="cpu", protocol_by_m={128: "push"})
    with pytest.raises(ValueError, match="other protocol"):
        FusedGemmRsAuto(max_M=256, N=64, K=128, device="cpu", faults=("dropped_peer",))


def test_push_order_is_push_first_where_ranks_share_a_gpu():
    from types import SimpleNamespace

    impl = FusedGemmRsPush(max_M=256, N=64, K=128, device="cpu")
    for shared, order in ((True, "push_first"), (False, "interleaved")):
        impl._workspace = SimpleNamespace(ranks_share_a_gpu=lambda shared=shared: shared)
        impl._choose_push_order()
        assert impl.push_order == order
    impl._push_order_request = "interleaved"  # forced
    impl._workspace = SimpleNamespace(ranks_share_a_gpu=lambda: True)
    impl._choose_push_order()
    assert impl.push_order == "interleaved"
    impl._workspace = None
    impl.close()


def test_crossover_table_roundtrip_and_lookup(tmp_path):
    from kernel.fused import crossover

    path = str(tmp_path / "crossover.json")
    assert crossover.load_table(path) == []
    assert crossover.measured_min_m(7168, 2048, 2, "push", 128, path) == 128  # no table: contract default
    crossover.write_entries([{"N": 7168, "K": 2048, "W": 2, "protocol": "push", "min_m": 256},
                             {"N": 8192, "K": 14336, "W": 2, "protocol": "push", "min_m": None}], path)
    assert crossover.measured_min_m(7168, 2048, 2, "push", 128, path) == 256
    assert crossover.measured_min_m(7168, 2048, 2, "pull", 128, path) == 128  # other protocol: default
    assert crossover.measured_min_m(8192, 14336, 2, "push", 128, path) == crossover.NEVER
    crossover.write_entries([{"N": 7168, "K": 2048, "W": 2, "protocol": "push", "min_m": 512}], path)
    assert crossover.measured_min_m(7168, 2048, 2, "push", 128, path) == 512  # replaced, not duplicated
    assert len(crossover.load_table(path)) == 2


def test_crossover_from_timings_needs_fused_faster_from_there_on():
    from kernel.fused.crossover import crossover_from_timings

    t = {128: (2.0, 1.0), 256: (1.0, 1.1), 512: (1.0, 0.9), 1024: (1.0, 2.0), 2048: (1.0, 3.0)}
    assert crossover_from_timings(t) == 1024  # 256 was faster, but 512 was not: the crossover is 1024
    assert crossover_from_timings({128: (0.5, 1.0), 256: (0.5, 1.0)}) == 128
    assert crossover_from_timings({128: (2.0, 1.0), 256: (2.0, 1.0)}) is None
    assert crossover_from_timings({128: (1.0, 1.0)}) is None  # a tie is not a win


def test_crossover_table_rejects_incomplete_entries(tmp_path):
    import json

    from kernel.fused import crossover

    path = tmp_path / "crossover.json"
    path.write_text(json.dumps({"entries": [{"N": 1, "K": 64, "W": 2, "min_m": 128}]}))
    with pytest.raises(ValueError, match="protocol"):
        crossover.load_table(str(path))


# --- GPU: the fused path --------------------------------------------------------------------------------
def _hopper():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


_GPU_MARKS = [
    pytest.mark.gpu,
    pytest.mark.hopper,
    pytest.mark.kernel,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(torch.cuda.is_available() and not _hopper(), reason="needs an sm_90 GPU"),
    pytest.mark.skipif(not cutlass_available(), reason="nvidia-cutlass-dsl is not installed"),
]


def on_hopper(fn):
    for mark in _GPU_MARKS:
        fn = mark(fn)
    return fn


MAX_M = 4096
MS = [1, 7, 64, 127, 128, 129, 255, 256, 448, 1000, 1025, 4096]
SHAPES = [(4096, 2048), (1000, 64)]  # (N, K): an aligned one, and ragged N with a single k-tile
#: pull (and so W = 1) also at a long K: split-K configs at M = 448 (128x256 in 3 K parts; since the clustered
#: 64-row tiles, 11th session, the one tested M that splits), the clustered 64x112 at 255 and 256
CASES = [(N, K, protocol) for protocol in ("pull", "push") for N, K in SHAPES] + [(2560, 8192, "pull")]
SENTINEL = -1234.0  # exactly representable in bf16


@pytest.fixture(scope="module", params=CASES, ids=lambda s: f"N{s[0]}_K{s[1]}_{s[2]}")
def gpu_impl(request):
    N, K, protocol = request.param
    return FusedGemmRs(max_M=MAX_M, N=N, K=K, device=torch.device("cuda", 0), force_fused=True, protocol=protocol)


def _within_bound(y, x, w):
    x64, w64 = x.double(), w.double()
    truth = x64 @ w64.T
    absdot = x64.abs() @ w64.abs().T
    bound = 2 * (U_BF16 * truth.abs() + x.shape[1] * U_FP32 * absdot) + 1e-30
    err = (y.double() - truth).abs()
    bad = err > bound
    if bad.any():
        i = int(bad.flatten().nonzero()[0])
        r, c = divmod(i, y.shape[1])
        return (
            f"{int(bad.sum())} / {bad.numel()} elements out of bound; first at ({r}, {c}): "
            f"got {float(y[r, c])}, truth {float(truth[r, c])}, allowed {float(bound[r, c])}"
        )
    return None


@on_hopper
@pytest.mark.parametrize("M", MS)
def test_fused_matches_fp64_truth(gpu_impl, M):
    N, K = gpu_impl.N, gpu_impl.K
    x, w = _operands(M, N, K, device="cuda", seed=M)
    buf = torch.full((M + 64, N), SENTINEL, dtype=torch.bfloat16, device="cuda")
    out = buf[:M]
    y = gpu_impl(x, w, out=out)
    torch.cuda.synchronize()
    assert y.data_ptr() == out.data_ptr()
    assert gpu_impl.last_path == "fused"
    msg = _within_bound(out, x, w)
    assert msg is None, f"M={M} N={N} K={K}: {msg}"
    assert torch.equal(buf[M:], torch.full_like(buf[M:], SENTINEL)), "rows past the out view were written"


@on_hopper
def test_fused_repeatable_and_alternating(gpu_impl):
    N, K = gpu_impl.N, gpu_impl.K
    ref = {}
    for M in (1024, 129, 4095, 129, 1, 1024):
        x, w = _operands(M, N, K, device="cuda", seed=M)
        y = gpu_impl(x, w)
        if M in ref:
            assert torch.equal(y, ref[M]), f"M={M} differs from its first call"
        ref[M] = y.clone()
    assert gpu_impl.last_path == "fused"


@on_hopper
def test_largest_and_smallest_tile_configs_are_exercised(gpu_impl):
    used = {gpu_impl.tile_config_index(M) for M in MS}
    assert len(used) >= 2 and gpu_impl.tile_config_index(4096) != gpu_impl.tile_config_index(1)
    split = {M for M in MS if gpu_impl.tile_configs()[gpu_impl.tile_config_index(M)].split_k}
    if gpu_impl.protocol == "pull" and gpu_impl.K >= 8192:  # a split-K config is among those the test runs
        assert split and gpu_impl.describe()["split_k_parts_bytes"] > 0, split
    else:
        assert not split


@on_hopper
@pytest.mark.parametrize("M", [128, 1000])
def test_fused_cuda_graph_replay(gpu_impl, M):
    N, K = gpu_impl.N, gpu_impl.K
    x, w = _operands(M, N, K, device="cuda", seed=1)
    out = torch.empty(M, N, dtype=torch.bfloat16, device="cuda")
    gpu_impl(x, w, out=out)  # warm up (compiled already) outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gpu_impl(x, w, out=out)
    for seed in (2, 3, 4):
        x2, w2 = _operands(M, N, K, device="cuda", seed=seed)
        x.copy_(x2)
        w.copy_(w2)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        fresh = gpu_impl(x2, w2)
        torch.cuda.synchronize()
        assert torch.equal(out, fresh), f"replay with seed {seed} differs from an eager call"
        assert _within_bound(out, x2, w2) is None
    y = gpu_impl(x, w)  # the next eager call still works
    assert _within_bound(y, x, w) is None


@on_hopper
def test_kernel_loaded_from_the_host_cache_runs_like_a_fresh_compile(tmp_path, monkeypatch):
    from kernel.fused import compile as compile_mod
    from kernel.fused.config import GemmConfig

    monkeypatch.setenv(compile_mod.KERNEL_CACHE_ENV, str(tmp_path))
    key = compile_mod.CompileKey(GemmConfig(tile_n=128))
    fresh = compile_mod._from_disk_or_compile(key, compile_mod._compile_gemm)  # compiles and stores
    loaded = compile_mod._load_entry(key, str(tmp_path / compile_mod.key_digest(key)))
    assert fresh.origin == "compiled" and loaded.origin == "disk"
    import cuda.bindings.driver as cuda

    M = 1000
    x, w = _operands(M, 1024, 256, device="cuda", seed=5)
    ys = [torch.full((M, 1024), SENTINEL, dtype=torch.bfloat16, device="cuda") for _ in range(2)]
    stream = cuda.CUstream(torch.cuda.current_stream().cuda_stream)
    for k, y in zip((fresh.bound(1024, 256), loaded.bound(1024, 256)), ys):
        k.launch(x.data_ptr(), w.data_ptr(), y.data_ptr(), M, stream)
    torch.cuda.synchronize()
    assert torch.equal(ys[0], ys[1]), "the loaded kernel differs from the fresh compile"
    assert _within_bound(ys[1], x, w) is None


def test_clustered_configs_only_where_every_cluster_of_the_grid_fits_at_once_on_every_rank():
    """The GEMM-RS kernels need their whole persistent grid co-resident (a CTA spinning on a sibling's flag must not
    hold the SM the sibling waits for): a cluster size is kept only where every rank's GPU runs sm_count / size such
    clusters at once (MIG, odd floor-sweeping, a failed occupancy query: 0), and the grid is the group's smallest
    SM count -- the tile config of a call must be the same on every rank."""
    from kernel.fused.wrapper import agreed_device_facts

    fits, short, failed = ({"sm_count": 132, "clusters": {2: n}} for n in (66, 65, 0))
    assert agreed_device_facts([fits]) == (132, frozenset({2}))
    assert agreed_device_facts([short]) == (132, frozenset())
    assert agreed_device_facts([fits, failed, fits]) == (132, frozenset())  # one rank's failed query: none anywhere
    assert agreed_device_facts([fits, {"sm_count": 114, "clusters": {2: 57}}]) == (114, frozenset({2}))
    assert agreed_device_facts([fits, {"sm_count": 132, "clusters": {}}]) == (132, frozenset())
    with pytest.raises(ValueError):
        agreed_device_facts([fits, {}])  # a CPU rank in a GPU group: no facts to agree on


def test_an_mps_client_compiles_no_clustered_config(monkeypatch):
    """Under MPS the cluster occupancy query answers for the whole GPU, not the client's SM share: one H200, 23rd
    session, 50 % share: 66 SMs, "33 two-CTA clusters", and the clustered grid was not co-resident (the kernels'
    trap; unclustered, the same case passed). An MPS client's facts carry no clusters (the query is not asked);
    anyone else's are as before; a host whose driver cannot say is not an MPS client."""
    from types import SimpleNamespace

    from kernel.fused.wrapper import agreed_device_facts, device_facts, mps_client

    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(multi_processor_count=66))
    monkeypatch.setattr(wrapper_mod, "max_active_clusters", lambda index, size: asked.append(size) or 33)
    cuda0 = torch.device("cuda", 0)
    monkeypatch.setattr(wrapper_mod, "mps_client", lambda index: True)
    client = device_facts(cuda0)
    assert client == {"sm_count": 66, "mps": True, "clusters": {2: 0}} and asked == []
    assert agreed_device_facts([client]) == (66, frozenset())
    monkeypatch.setattr(wrapper_mod, "mps_client", lambda index: False)
    own = device_facts(cuda0)
    assert own == {"sm_count": 66, "mps": False, "clusters": {2: 33}} and asked == [2]
    assert agreed_device_facts([own]) == (66, frozenset({2}))
    assert agreed_device_facts([own, client]) == (66, frozenset())  # one client in the group: none anywhere
    if not torch.cuda.is_available():
        assert mps_client(0) is None  # no driver to ask: no answer, not a "no"


def test_a_group_with_an_mps_client_runs_no_fused_kernel():
    """Under MPS the persistent grid is not promised to be resident at once (one H200, 25th session: a full-grid
    call trapped with the clients' SMs budgeted, 4 x 32 of 132): a group any of whose ranks is an MPS client gets
    the reason -- the same on every rank, from the gathered facts -- and no group without one does."""
    from kernel.fused.wrapper import check_mps_clients

    own, client = {"sm_count": 132, "mps": False, "clusters": {2: 66}}, {"sm_count": 66, "mps": True, "clusters": {}}
    assert check_mps_clients([own]) is None and check_mps_clients([own, own, own]) is None
    assert check_mps_clients([own, {"sm_count": 132, "clusters": {2: 66}}]) is None  # facts from before the query
    reason = check_mps_clients([own, client, client])
    assert reason.startswith("group rank(s) [1, 2] are MPS clients:") and "not promised to be resident" in reason
    assert check_mps_clients([client]).startswith("group rank(s) [0] are MPS clients")


@pytest.mark.parametrize("force_fused", [False, True])
def test_an_mps_client_gets_the_fallback_and_says_why(monkeypatch, force_fused):
    """Construction as on a Hopper host (every host check passing) but as an MPS client: no kernel is compiled,
    ``can_run`` and ``main_path_support`` say why, a call runs the declared fallback (forced: raises) -- and a
    gate run under MPS fails every fused case through ``main_path_available`` instead of gating only the
    fallback."""
    built = []
    monkeypatch.setattr(wrapper_mod, "device_facts", lambda device: {"sm_count": 66, "mps": True, "clusters": {}})
    monkeypatch.setattr(wrapper_mod, "mps_client", lambda index: True)
    monkeypatch.setattr(FusedGemmRs, "_host_ineligibility", lambda self: None)
    monkeypatch.setattr(FusedGemmRs, "_config_ineligibility", lambda self: None)
    for step in ("_compile", "_allocate_split_parts", "_allocate_workspace"):
        monkeypatch.setattr(FusedGemmRs, step, lambda self, step=step: built.append(step))
    impl = _cpu_impl(force_fused=force_fused)
    x, w = _operands(5)
    ok = impl.can_run(w)
    assert not built and not ok and ok.reason.startswith("group rank(s) [0] are MPS clients")
    support = impl.main_path_support()
    assert not support and support.reason.startswith("this rank is an MPS client")
    if force_fused:
        with pytest.raises(FusedPathUnavailable, match="MPS clients"):
            impl(x, w)
    else:
        y = impl(x, w)
        assert impl.last_path == "unfused"
        torch.testing.assert_close(y.float(), x.float() @ w.float().T, rtol=2 * U_BF16, atol=0.05)
    impl.close()
    monkeypatch.setattr(wrapper_mod, "device_facts", lambda device: {"sm_count": 132, "mps": False, "clusters": {}})
    monkeypatch.setattr(wrapper_mod, "mps_client", lambda index: False)
    impl = _cpu_impl(force_fused=force_fused)  # no client: the fused path is built as before
    assert built == ["_allocate_split_parts", "_compile"] and impl.main_path_support()
    impl.close()


def test_the_group_agrees_on_the_tile_configs_at_construction(monkeypatch):
    """A rank whose own GPU facts would keep the clustered configs builds none when a peer's cannot run them (its
    occupancy query failed): the ranks' tile configs -- and so every call's kernel -- stay the same; the rank
    warns. Without the agreement the fused call at a clustered M waited for peers running another kernel (a
    W = 8 gate case on one H200 ended in the kernels' spin-timeout trap, 13th session)."""
    import torch.distributed as dist

    from kernel.fused import wrapper

    impl = FusedGemmRs(max_M=1024, N=4096, K=2048, device="cpu")  # a CPU instance launches nothing: every config
    assert [c.label for c in impl.tile_configs("pull") if c.cluster_m > 1] == ["64x112c2", "64x128c2"]
    impl.close()

    mine, peer = {"sm_count": 132, "clusters": {2: 66}}, {"sm_count": 132, "clusters": {2: 0}}
    monkeypatch.setattr(wrapper, "device_facts", lambda device: dict(mine))

    def all_gather_object(out, obj, group=None):
        out[:] = [obj, peer]

    monkeypatch.setattr(dist, "all_gather_object", all_gather_object)
    impl = FusedGemmRs(max_M=1024, N=4096, K=2048, device="cpu")
    impl.world_size = 2
    with pytest.warns(RuntimeWarning, match="every rank builds for 132 SMs and cluster sizes \\[\\]"):
        impl._agree_device_facts()
    configs = impl.tile_configs("pull")
    assert configs and all(c.cluster_m == 1 for c in configs) and configs[-1].label == "64x128"
    assert configs[impl.tile_config_index(128)].consumer_warpgroups == 1  # M = 128: 64-row tiles, unclustered
    impl.close()

    peer = dict(mine)  # the same facts everywhere: no warning, the clustered configs kept
    impl = FusedGemmRs(max_M=1024, N=4096, K=2048, device="cpu")
    impl.world_size = 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        impl._agree_device_facts()
    assert [c.label for c in impl.tile_configs("pull") if c.cluster_m > 1] == ["64x112c2", "64x128c2"]
    impl.close()


def test_the_cluster_occupancy_query_keeps_answers_and_asks_again_after_a_failure(monkeypatch):
    """Each HardwareInfo query compiles and loads a dummy kernel after a device synchronize: an answer is kept per
    process and (device, cluster size), not asked at every construction; a failure is asked again (up to
    CLUSTER_QUERY_TRIES times), then answered 0 with a warning -- and not kept: the next construction asks again."""
    from types import ModuleType

    from kernel.fused import wrapper

    asked, failing = [], []

    class FakeHardwareInfo:
        def __init__(self, device_id):
            self.device_id = device_id

        def get_max_active_clusters(self, size):
            asked.append((self.device_id, size))
            if failing:
                failing.pop()
                raise RuntimeError("CUDA_ERROR_OUT_OF_MEMORY")
            return 66

    fake = ModuleType("cutlass.utils")
    fake.HardwareInfo = FakeHardwareInfo
    monkeypatch.setitem(sys.modules, "cutlass.utils", fake)
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda index=None: None)
    monkeypatch.setattr(wrapper.time, "sleep", lambda s: None)
    monkeypatch.setattr(wrapper, "_ACTIVE_CLUSTERS", {})
    assert [wrapper.max_active_clusters(0, 2) for _ in range(3)] == [66, 66, 66]
    assert wrapper.max_active_clusters(1, 2) == 66 and wrapper.max_active_clusters(0, 4) == 66
    assert asked == [(0, 2), (1, 2), (0, 4)]

    asked.clear()
    failing[:] = [1]  # one failure, then an answer: kept
    assert wrapper.max_active_clusters(2, 2) == 66 and asked == [(2, 2), (2, 2)]
    failing[:] = [1] * wrapper.CLUSTER_QUERY_TRIES  # every try fails: 0, a warning, nothing kept
    with pytest.warns(RuntimeWarning, match="CUDA_ERROR_OUT_OF_MEMORY; asked 3 times"):
        assert wrapper.max_active_clusters(3, 2) == 0
    assert (3, 2) not in wrapper._ACTIVE_CLUSTERS
    assert wrapper.max_active_clusters(3, 2) == 66  # the next construction's query


def test_path_switches_are_every_m_where_the_kernel_path_changes(monkeypatch):
    """``path_switches`` (the graph family captures both sides of one per case) finds exactly the M where
    ``call_path`` differs from M - 1's, by brute force over every M: pull at W = 1 (tile configs, clusters,
    split-K parts) and an auto table switching protocols at M that are no multiple of 64."""
    from types import SimpleNamespace

    from kernel.fused.protocol_plan import ProtocolPlan

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(multi_processor_count=132))

    def brute(impl, max_M):
        return tuple(M for M in range(2, max_M + 1) if impl.call_path(M) != impl.call_path(M - 1))

    for N, K in ((7168, 14336), (8192, 2048), (2560, 8192), (512, 256)):
        impl = FusedGemmRs(max_M=2048, N=N, K=K, device="cpu")
        found = impl.path_switches(2048)
        assert found == brute(impl, 2048), (N, K)
        assert found and all(impl.call_path(M) != impl.call_path(M - 1) for M in found)
        impl.close()
    impl = FusedGemmRs(max_M=1024, N=4096, K=14336, device="cpu")
    assert any(impl.call_path(M)[2] > 1 for M in range(1, 600))  # a split-K stretch among the paths
    impl._plan = ProtocolPlan.of("auto", 2, {1: "pull", 200: "push", 701: "pull"})
    impl._tile_configs = {}
    found = impl.path_switches(1024)
    assert found == brute(impl, 1024) and 200 in found and 701 in found
    impl.close()


def test_the_path_table_names_every_kernel_a_call_can_run_by_m():
    """``path_table`` (gathered from every rank at construction by the gate): a piece at M = 1 and at every path
    switch, each named by protocol, tile config and K parts, and every M's ``path_name`` is its piece's; None
    where the fused path cannot run (a CPU instance: every call falls back)."""
    from properties.dispatch import path_at

    impl = FusedGemmRs(max_M=1024, N=2560, K=8192, device="cpu")
    assert impl.path_table() is None  # CPU: the fused path cannot run here
    impl._config_reason = None  # as on a GPU (the choices are host-side)
    table = impl.path_table()
    assert table[0][0] == 1 and [M for M, _ in table[1:]] == list(impl.path_switches(1024))
    assert all(path_at(table, M) == impl.path_name(M) for M in range(1, 1025))
    assert ("pull 64x112c2" in dict(table).values() and any(" P=3" in p for _, p in table)
            and all(p.startswith("pull ") for _, p in table))
    assert impl.path_table() is table  # worked out once
    impl._config_reason = "cpu"
    impl.close()


def test_the_launch_stream_is_the_current_streams_raw_handle(monkeypatch):
    """A launch goes on the current stream (a capture's under graph capture): torch's raw handle query for a
    device with an index, ``torch.cuda.current_stream`` otherwise -- and with no raw query in this torch."""
    from types import SimpleNamespace

    asked = []
    monkeypatch.setattr(wrapper_mod, "_RAW_STREAM", lambda index: asked.append(index) or 1000 + index)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: SimpleNamespace(cuda_stream=77))
    assert wrapper_mod.current_stream_handle(torch.device("cuda", 1)) == 1001 and asked == [1]
    assert wrapper_mod.current_stream_handle(torch.device("cuda")) == 77 and asked == [1]
    monkeypatch.setattr(wrapper_mod, "_RAW_STREAM", None)
    assert wrapper_mod.current_stream_handle(torch.device("cuda", 1)) == 77


def test_a_protocol_entry_naming_no_protocol_or_an_unknown_one_is_rejected(tmp_path):
    import json

    from kernel.fused.crossover import load_protocols

    path = tmp_path / "crossover.json"
    for by_m in ({}, {"128": "pull", "4096": "ring"}):
        path.write_text(json.dumps({"protocols": [{"N": 64, "K": 64, "W": 2, "by_m": by_m}]}))
        with pytest.raises(ValueError, match="names no protocol or unknown ones"):
            load_protocols(str(path))
    path.write_text(json.dumps({"protocols": [{"N": 64, "K": 64, "W": 2, "by_m": {"1": "pull", "4096": "push"}}]}))
    assert load_protocols(str(path))[0]["by_m"] == {"1": "pull", "4096": "push"}


@on_hopper
def test_built_under_inference_mode_its_state_serves_calls_in_every_mode():
    """An engine may build the layer inside ``torch.inference_mode()`` (an inference-mode ``main``, a warm-up that
    builds lazily): the split-K parts and their flags are made as normal tensors all the same, so calls under
    ``no_grad`` and grad, and the counter's advance (a torch-level in-place write), work after it."""
    N, K, M = 2560, 8192, 448  # 448: a split-K call (128x256 in 3 K parts, test_largest_and_smallest_...)
    with torch.inference_mode():
        impl = FusedGemmRs(max_M=1024, N=N, K=K, device=torch.device("cuda", 0), force_fused=True, protocol="pull")
    state = impl.state_tensors()
    assert state and not [name for name, t in state.items() if t.is_inference()], list(state)
    x, w = _operands(M, N, K, device="cuda", seed=11)
    want = None
    for mode in (torch.no_grad, torch.enable_grad, torch.inference_mode, torch.no_grad):
        with mode():
            y = impl(x, w)
        torch.cuda.synchronize()
        assert impl.last_path == "fused" and _within_bound(y, x, w) is None, mode
        want = y.clone() if want is None else want
        assert torch.equal(y, want), f"{mode.__name__}: differs from the first call"
    impl.advance_call_counter(3)
    assert torch.equal(impl(x, w), want)


def test_each_launch_runs_the_kernel_its_m_chooses(monkeypatch):
    """``_launch`` keeps the (protocol, tile config) of each M it worked out (the cost model is ~50 us of Python): the
    kernel queued for a call is the one ``call_protocol`` and ``tile_config_index`` give that M, over a sequence of M
    that come back and share shard sizes (a cache keyed by the shard rows, or by anything but M, runs another M's
    kernel -- a path ``path_table`` promised never runs, and the gate's path cases test a kernel the call never
    used; a lookup under another key than the store's, ``ceil(M / 64)``, ran M = 64's 64-row tiles at M = 4096 after
    a call at M = 64). The launch is recorded, not made (no GPU here); W = 2 set on a CPU instance for the planning."""
    from types import SimpleNamespace

    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: SimpleNamespace(multi_processor_count=132))
    impl = FusedGemmRs(max_M=4096, N=7168, K=2048, device="cpu")
    impl.world_size, impl._tile_configs, impl._choices = 2, {}, {}
    launched = []
    impl.launch_config = lambda protocol, index, x, w, out, M, splits=None: launched.append((M, protocol, index))
    # every M of the first tiles (largest first), then larger ones: a key that folds a large M onto a smaller M
    # (its shard rows, its 64-row tile count, ...) finds that M's choice already kept
    ms = [*range(129, 0, -1), 1024, 2048, 512, 1024, 4096, 2047, 2048, 64, 128, 127, 256, 4000]
    for M in ms:
        impl._launch(None, None, None, M)
    want = [(M, impl.call_protocol(M), impl.tile_config_index(M)) for M in ms]
    assert launched == want
    assert len({(p, i) for _, p, i in want}) >= 2  # the sequence crosses tile configs: a wrong key shows
    impl.close()


def test_the_weight_check_holds_views_to_16_byte_alignment_and_no_more():
    """``can_run``'s weight check (:func:`check_weight`) takes CONTRACT.md's alignment ("Shapes": every operand's
    data pointer 16-byte aligned, and need be no more): a weight view starting 2 or 8 bytes past a 16-byte boundary
    is declined with the reason -- an 8-byte check would hand the kernel's 16-byte TMA loads a misaligned weight --
    and views 16 and 32 bytes in are accepted."""
    N, K = 64, 128
    buf = torch.zeros(N * K + 64, dtype=torch.bfloat16)
    head = (-buf.data_ptr() % 32) // 2  # elements to a 32-byte boundary

    def view(byte_offset):
        start = head + byte_offset // 2
        return buf[start : start + N * K].view(N, K)

    cpu = torch.device("cpu")
    for off in (2, 8, 24):
        reason = wrapper_mod.check_weight(view(off), N, K, cpu)
        assert reason is not None and "aligned" in reason, off
    for off in (0, 16, 32):
        assert wrapper_mod.check_weight(view(off), N, K, cpu) is None, off


def test_the_weight_check_declines_a_weight_on_another_device_of_the_same_type():
    """A weight on another GPU than the instance's (cuda:1 against cuda:0: the same device type, another index) is
    not one the fused path can run: ``check_weight`` names the device, as for a CPU weight. A fake tensor stands
    for the cuda:1 weight (metadata only: no GPU here)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    N, K = 64, 128
    with FakeTensorMode(allow_non_fake_inputs=True):
        on_1 = torch.empty(N, K, dtype=torch.bfloat16, device="cuda:1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fake tensor's data_ptr() warns (it is 0: aligned)
        reason = wrapper_mod.check_weight(on_1, N, K, torch.device("cuda", 0))
        assert reason is not None and "cuda:1" in reason and "cuda:0" in reason
        assert wrapper_mod.check_weight(on_1, N, K, torch.device("cuda", 1)) is None
    cpu_w = torch.zeros(N, K, dtype=torch.bfloat16)
    assert "cpu" in wrapper_mod.check_weight(cpu_w, N, K, torch.device("cuda", 0))


def _fake_workspace_instance(monkeypatch, W, slots, rank=0, s_max=2):
    """A CPU instance given a W-rank flag area and partials in plain CPU tensors (no symmetric memory here), the
    group's quiet points made no-ops: the host side of the counter and of the state it watches, no GPU needed."""
    from types import SimpleNamespace

    from kernel.fused.config import READY_BASE

    monkeypatch.setattr(FusedGemmRs, "_group_quiet", lambda self: None)
    impl = _cpu_impl()
    impl.world_size, impl.rank, impl._slots = W, rank, slots
    flags = torch.zeros(READY_BASE + W * slots, dtype=torch.int32)
    partials = torch.zeros(W * s_max, impl.N, dtype=torch.bfloat16)
    impl._workspace = SimpleNamespace(flags=flags, partials=partials, layout=SimpleNamespace(s_max=s_max))
    return impl, flags


def test_advancing_the_call_counter_moves_the_epoch_and_every_ranks_done_word(monkeypatch):
    """``advance_call_counter(calls)`` (CONTRACT.md "Counters": as if ``calls`` more calls had completed, every
    counter-valued flag word moved along, a word never written left as it is), on the host's flag area of a W = 4
    group: the epoch word and the done words of all W ranks follow the calls (0, "no call yet", counts as the epoch
    before 1), a non-zero ready word moves along, a zero one stays 0, and no other word changes. Expected words by
    stepping one call at a time along the epoch cycle 1 .. 2^32 - 1 (0 skipped: kernel/fused/rs_protocol.py)."""
    from kernel.fused.config import DEVICE_WORD, DONE_BASE, EPOCH_WORD, FINISHED_WORD, READY_BASE

    W, slots, top = 4, 3, (1 << 32) - 1
    impl, flags = _fake_workspace_instance(monkeypatch, W, slots)

    def put(i, u32):
        flags[i] = u32 - (1 << 32) if u32 >= 1 << 31 else u32

    follows = [EPOCH_WORD, *range(DONE_BASE, DONE_BASE + W)]
    for i, v in zip(follows, (top - 1, top - 1, top - 2, 0, top)):
        put(i, v)
    for j, v in enumerate((0, 7, top, 0, 1 << 31, (1 << 31) - 1, 0, 2, top - 1, 0, top - 3, 0)):
        put(READY_BASE + j, v)
    put(FINISHED_WORD, 9)  # the finished word, the device word and a spare word: not epochs
    put(DEVICE_WORD, 77)
    put(5, 1234)
    before = [int(v) & top for v in flags]

    def one_call(v):
        return 1 if v == top else v + 1

    calls = 3
    want = list(before)
    for i in range(len(want)):
        if i in follows or (i >= READY_BASE and want[i] != 0):
            for _ in range(calls):
                want[i] = one_call(want[i])
    impl.advance_call_counter(calls)
    assert [int(v) & top for v in flags] == want
    impl._workspace = None
    impl.close()


def test_the_state_a_rank_watches_is_its_own_words_of_the_flag_area(monkeypatch):
    """``state_tensors()`` (what a rejected call must leave bit-identical) of every rank of a W = 4 pull group: the
    epoch and finished words, the done word *this* rank signals and its own ready words, and the partials; not a
    peer's words (a peer writes those whenever it runs: a rejected call on this rank would seem to change them, and
    this rank's own words would go unwatched). Each word is told by a distinct value written into it."""
    from kernel.fused.config import DONE_BASE, EPOCH_WORD, FINISHED_WORD, READY_BASE

    W, slots = 4, 3
    for rank in range(W):
        impl, flags = _fake_workspace_instance(monkeypatch, W, slots, rank=rank)
        flags.copy_(torch.arange(flags.numel(), dtype=torch.int32))  # each word holds its own index
        state = impl.state_tensors()
        words = {name: t.tolist() for name, t in state.items() if name.startswith("flags")}
        assert words == {
            "flags: epoch, finished": [EPOCH_WORD, FINISHED_WORD],
            "flags: own done": [DONE_BASE + rank],
            "flags: own ready": list(range(READY_BASE + rank * slots, READY_BASE + (rank + 1) * slots)),
        }, rank
        assert state["partials"] is impl._workspace.partials
        impl._workspace = None
        impl.close()


def test_the_shipped_crossover_table_is_one_the_fused_kernel_can_use():
    """``kernel/fused/crossover.json`` as shipped -- read at construction only where the fused path can run (a GPU),
    so no CPU instance reads it: every crossover entry names a (N, K) the kernel declares (``supports``), a group size
    it serves, a kernel protocol, once each, and a ``min_m`` that is null or an M >= 1; every protocol entry a
    declared (N, K) and group size, once each, with a table the ``auto`` plan accepts (Ms >= 1 to kernel protocols:
    ``ProtocolPlan.of`` raises otherwise) -- a misspelt protocol would raise ``ValueError`` at every ``auto``
    construction of that shape on the GPU, an entry for an unserved W would silently keep the default threshold."""
    from kernel.fused import crossover
    from kernel.fused.config import FUSED_WORLD_SIZES, KERNEL_PROTOCOLS
    from kernel.fused.protocol_plan import ProtocolPlan

    entries, protocols = crossover.load_table(), crossover.load_protocols()
    assert entries and protocols
    keys = [(e["N"], e["K"], e["W"], e["protocol"]) for e in entries]
    assert len(set(keys)) == len(keys), keys
    for e, (N, K, W, protocol) in zip(entries, keys):
        assert FusedGemmRs.supports(N, K) and W in FUSED_WORLD_SIZES and protocol in KERNEL_PROTOCOLS, e
        assert e["min_m"] is None or (type(e["min_m"]) is int and e["min_m"] >= 1), e
    pkeys = [(e["N"], e["K"], e["W"]) for e in protocols]
    assert len(set(pkeys)) == len(pkeys), pkeys
    for e, (N, K, W) in zip(protocols, pkeys):
        assert FusedGemmRs.supports(N, K) and W in FUSED_WORLD_SIZES, e
        plan = ProtocolPlan.of("auto", W, e["by_m"])
        assert plan.table() == {int(m): p for m, p in e["by_m"].items()}


def test_an_auto_instance_runs_fused_from_the_first_measured_crossover_of_its_protocols(monkeypatch):
    """``should_run`` of an ``auto`` instance (both protocols' kernels, the protocol per M from the table): fused from
    the smallest M at which one of its protocols measured faster than the unfused path (``crossover.json``, per
    protocol), not from the largest -- between the two, one of its kernels pays. Built as on a W = 2 Hopper group
    (the host checks passing, the group's facts, the workspace and the compiles left out: the choice is host-side)
    for a shape the shipped table measures for both protocols."""
    import torch.distributed as dist

    from kernel.fused import FusedGemmRsAuto
    from kernel.fused.crossover import measured_min_m, measured_protocols

    N, K, W = 7168, 2048, 2
    assert measured_protocols(N, K, W) and {p for p in measured_protocols(N, K, W).values()} == {"pull", "push"}
    per_protocol = {p: measured_min_m(N, K, W, p, default=-1) for p in ("pull", "push")}
    assert -1 not in per_protocol.values() and len(set(per_protocol.values())) == 2  # both measured, and they differ
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: W)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(FusedGemmRs, "_config_ineligibility", lambda self: None)
    monkeypatch.setattr(FusedGemmRs, "_host_ineligibility", lambda self: None)

    def facts(self):
        self._group_facts = [{"sm_count": 132, "mps": False, "clusters": {2: 66}}] * W
        self._agreed_facts = (132, frozenset({2}))

    monkeypatch.setattr(FusedGemmRs, "_agree_device_facts", facts)
    for step in ("_compile", "_allocate_split_parts", "_allocate_workspace", "_choose_push_order"):
        monkeypatch.setattr(FusedGemmRs, step, lambda self: None)
    impl = FusedGemmRsAuto(max_M=4096, N=N, K=K)
    assert impl.kernel_protocols() == ("pull", "push")
    first = min(per_protocol.values())
    assert impl.should_run_min_m == first
    assert [impl.should_run(torch.empty(M, K, dtype=torch.bfloat16, device="meta")) for M in (first - 1, first)] == \
        [False, True]
    impl.close()


def test_a_declared_clustered_path_says_idle_twin_exactly_where_its_m_tiles_are_odd():
    """A clustered config runs its M tiles two by two: with an odd number of 64-row tiles (``ceil(M / tile_m)``) the
    last cluster's second CTA has no rows (an idle twin: loads zeros, stores nothing). The declared paths name it
    -- the gate runs and replays each declared path -- so the label says "idle twin" exactly for the paths whose M
    gives an odd tile count, and each clustered config is declared both with and without one."""
    from kernel.fused.tiles import kernel_configs, pick_config

    configs = kernel_configs("pull", 132)
    for W in (1, 2, 8):
        twins = {}
        for p in FusedGemmRs.declared_paths(W):
            c = configs[pick_config(configs, p.M, p.N, W, "pull", p.K)]
            if c.cluster_m == 1:
                continue
            odd = -(-p.M // c.tile_m) % 2 == 1
            assert ("idle twin" in p.label) == odd, (W, p)
            twins.setdefault(c.label, set()).add(odd)
        assert twins and all(seen == {True, False} for seen in twins.values()), (W, twins)
