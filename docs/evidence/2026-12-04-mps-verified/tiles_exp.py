"""Experiment (not kept in the kernel's config set): four more 128-row tile configs appended to pull's / the W = 1
GEMM's -- 128x176 (epi 16: 41 column tiles at N = 7168, cuBLAS's 176x128 at M = 2048, K = 14336), 128x192, and
128x224 / 128x256 in 2-CTA clusters (cuBLAS's 1x2 / 2x1 clusters) -- then bench_gemm --all-tiles on them."""
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
    return configs + (replace(big, tile_n=176, epi_tile_n=16), replace(big, tile_n=192),
                      replace(big, tile_n=224, cluster_m=2), replace(big, tile_n=256, cluster_m=2))


tiles.kernel_configs = kernel_configs
sys.argv = ["bench_gemm.py", "--protocol", "pull", "--all-tiles", "--ms", "512,2048,8192", "--ns", "7168,8192",
            "--ks", "2048,14336"]
runpy.run_path(".kwt/bench/bench_gemm.py", run_name="__main__")
