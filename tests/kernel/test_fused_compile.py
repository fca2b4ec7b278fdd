"""The fused GEMM kernel compiles for sm_90a without a GPU, once per (N, K, config), and its PTX uses
the Hopper paths (wgmma, TMA) and never ``multimem``."""

import os
import subprocess
import sys

import pytest

from kernel.fused import cutlass_available

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(not cutlass_available(), reason="nvidia-cutlass-dsl is not installed"),
]

MAIN = (7168, 2048)  # (N, K): the anchor shape of the benchmark
RAGGED_N = (1000, 64)  # N not a multiple of the N tile, a single k-tile


@pytest.fixture(scope="module")
def compile_mod():
    from kernel.fused import compile as compile_mod

    return compile_mod


@pytest.fixture(scope="module")
def main_kernel(compile_mod):
    return compile_mod.get_compiled(*MAIN)


@pytest.fixture(scope="module")
def ragged_kernel(compile_mod):
    return compile_mod.get_compiled(*RAGGED_N)


def test_ptx_uses_wgmma_and_tma_and_no_multimem(main_kernel):
    ptx = main_kernel.ptx
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async" in ptx
    assert "cp.async.bulk.tensor" in ptx  # TMA loads and stores
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx  # the TMA store epilogue
    assert "mbarrier" in ptx
    assert "setmaxnreg" in ptx
    assert "multimem" not in ptx


def test_ptx_has_no_local_memory(main_kernel):
    assert ".local" not in main_kernel.ptx


def test_ragged_n_compiles(ragged_kernel):
    assert "wgmma.mma_async" in ragged_kernel.ptx
    assert "multimem" not in ragged_kernel.ptx


def test_compile_once_reuse_for_every_m(compile_mod, main_kernel):
    before = compile_mod.compile_stats()
    again = [compile_mod.get_compiled(*MAIN) for _M in (1, 7, 129, 8192)]
    after = compile_mod.compile_stats()
    assert all(k is main_kernel for k in again)
    assert after["misses"] == before["misses"]
    assert after["hits"] == before["hits"] + 4


def test_compile_stats_record_seconds(compile_mod, main_kernel):
    stats = compile_mod.compile_stats()["configs"]
    key = (main_kernel.key.N, main_kernel.key.K, main_kernel.key.config, main_kernel.key.arch)
    assert stats[key]["seconds"] > 0
    assert stats[key]["ab_stage"] >= 3


def test_unsupported_shapes_are_rejected_before_compiling():
    from kernel.fused.gemm import GemmConfig, HopperGemmBF16

    with pytest.raises(ValueError, match="multiple of 64"):
        HopperGemmBF16(1024, 100)
    with pytest.raises(ValueError, match="multiple of 8"):
        HopperGemmBF16(1001, 128)
    with pytest.raises(ValueError):
        HopperGemmBF16(1024, 128, GemmConfig(ab_stages=9))


def test_compiles_in_a_fresh_process_with_arch_env():
    code = (
        "import os; os.environ['CUTE_DSL_ARCH'] = 'sm_90a'\n"
        "import cutlass\n"
        "from kernel.fused.compile import get_compiled\n"
        "k = get_compiled(256, 128)\n"
        "print('wgmma' in k.ptx, 'multimem' in k.ptx)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["True", "False"]


def test_small_m_config_compiles(compile_mod):
    from kernel.fused.gemm import GemmConfig

    k = compile_mod.get_compiled(*MAIN, GemmConfig(tile_n=128))
    assert "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16" in k.ptx
    assert "multimem" not in k.ptx
    assert ".local" not in k.ptx
    assert k.ab_stage >= 5
