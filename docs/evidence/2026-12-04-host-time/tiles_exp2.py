"""Experiment (27th session, not kept in the kernel's config set): 128x176 (41 column tiles at N = 7168: 656 tiles at
M = 2048, 4.97 waves on 132 SMs -- cuBLAS's 176x128 1x2 there) and 128x112 (256 tiles at M = 512: 1.94 waves --
cuBLAS's 112x128 2x1), each alone and in 2-CTA clusters along M, appended to pull's / the W = 1 GEMM's configs,
then bench_gemm --all-tiles (interleaved timing) at the N = 7168 points; then which cuBLAS kernel runs at
2048 x 7168 x 2048."""
import runpy
import sys
from dataclasses import replace

import kernel.fused.config as cfgmod
import kernel.fused.tiles as tiles

cfgmod.TILE_N_CHOICES = tuple(sorted(set(cfgmod.TILE_N_CHOICES) | {176}))
_base = tiles.kernel_configs


def kernel_configs(protocol, sm_count, epi_stages=None):
    configs = _base(protocol, sm_count, epi_stages)
    if protocol != "pull":
        return configs
    big = configs[0]
    a, b = replace(big, tile_n=176, epi_tile_n=16), replace(big, tile_n=112, epi_tile_n=16)
    return configs + (a, replace(a, cluster_m=2), b, replace(b, cluster_m=2))


tiles.kernel_configs = kernel_configs
sys.argv = ["bench_gemm.py", "--protocol", "pull", "--all-tiles", "--ms", "512,2048", "--ns", "7168",
            "--ks", "2048,14336"]
runpy.run_path("bench/bench_gemm.py", run_name="__main__")

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

x = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
w = torch.randn(7168, 2048, device="cuda", dtype=torch.bfloat16)
out = torch.empty(2048, 7168, device="cuda", dtype=torch.bfloat16)
torch.mm(x, w.T, out=out)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(20):
        torch.mm(x, w.T, out=out)
    torch.cuda.synchronize()
for e in prof.key_averages():
    if e.device_time_total > 0:
        print(f"2048x7168x2048 torch.mm: {e.key[:120]} {e.device_time_total / max(e.count, 1):.1f} us x{e.count}")
