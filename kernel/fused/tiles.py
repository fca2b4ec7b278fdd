"""Which tile configuration a call uses: a pure function of (M, N, W, protocol, SM count), so every rank of a
group, and every replay of a captured graph, picks the same one. Needs only the standard library.

Both protocols compile 128x256, 128x224 and 64x128 (one consumer warpgroup) tiles; a call uses the config
with the least estimated time (:func:`estimated_time`). Push: each config with the deep epilogue ring
(:data:`kernel.fused.config.PUSH_EPI_STAGES`), tiles counted shard by shard as the push kernel tiles them.
Pull (and the W = 1 GEMM): the 4-deep ring, tiles over the whole M x N (its partials are stored locally; the
reduction after the GEMM takes any tile). Until the 7th session pull had 128x256 and 128x128 tiles (128x128
when 128x256 filled less than half the SMs): at M = 256 (N = 7168) its 112 128x128 tiles ran the GEMM at
0.59x torch.mm (2xH200, 11-30), and M = 2048 took four waves of 128x256 tiles, the last 39% full.

A tile's time is bounded by its MMA work and by the bytes its mainloop loads (``(tile_m + tile_n) * K * 2``: A
and B k-tiles, from L2): at small M the loads dominate, so a tile's time is far from proportional to its area
(first H200 run, W = 1, N = 7168, K = 2048: a 64x128 tile took 12.8 us at M = 128, a 128x224 tile 22.7 us at M
= 512, 1.8x for 3.5x the area; 64x128 tiles in two waves at M = 256 ran at 0.68x torch.mm where one wave of
128x224 tiles fits). The estimate is the largest of: waves x tile MMA time, all tiles' bytes over the L2
bandwidth, waves x tile bytes over one SM's load bandwidth. K scales every term, so it does not enter the
choice.
"""

from __future__ import annotations

from .config import PUSH_EPI_STAGES, GemmConfig

#: Per-SM MMA throughput the cost model assumes (FLOP/s): two consumer warpgroups, and one (a 64-row tile).
SM_FLOPS_TWO_WARPGROUPS = 5.8e12
SM_FLOPS_ONE_WARPGROUP = 4.6e12
#: Load bandwidth of one SM (bytes/s) and of the whole L2 (bytes/s) the cost model assumes (fitted to the
#: first H200 run; ``bench/bench_gemm.py --all-tiles`` measures every config to refit them).
SM_LOAD_BYTES_S = 120e9
L2_BYTES_S = 8.5e12


def kernel_configs(protocol: str, sm_count: int, epi_stages: int | None = None) -> tuple[GemmConfig, ...]:
    """The tile configs an instance compiles, largest first. ``epi_stages`` overrides the configs'
    epilogue ring (the ``ring4`` measurement build)."""
    epi = epi_stages if epi_stages is not None else PUSH_EPI_STAGES if protocol == "push" else GemmConfig.epi_stages
    return (GemmConfig(sm_count=sm_count, epi_stages=epi), GemmConfig(tile_n=224, sm_count=sm_count, epi_stages=epi),
            GemmConfig(tile_m=64, consumer_warpgroups=1, tile_n=128, sm_count=sm_count, epi_stages=epi))


def tile_count(config: GemmConfig, M: int, N: int, world_size: int, shard_local: bool) -> int:
    """Tiles of one call: over M x N, or (``shard_local``, the push kernel) over each of the W shards."""
    rows = -(-M // world_size) if shard_local else M
    shards = world_size if shard_local else 1
    return shards * -(-rows // config.tile_m) * -(-N // config.tile_n)


def estimated_time(config: GemmConfig, M: int, N: int, world_size: int, shard_local: bool) -> float:
    """Seconds per unit of K of one call's GEMM with ``config`` (the cost model of both protocols)."""
    tiles = tile_count(config, M, N, world_size, shard_local)
    waves = -(-tiles // config.sm_count)
    flops = SM_FLOPS_TWO_WARPGROUPS if config.consumer_warpgroups == 2 else SM_FLOPS_ONE_WARPGROUP
    tile_bytes = 2 * (config.tile_m + config.tile_n)
    return max(waves * 2 * config.tile_m * config.tile_n / flops, tiles * tile_bytes / L2_BYTES_S,
               waves * tile_bytes / SM_LOAD_BYTES_S)


def pick_config(configs: tuple[GemmConfig, ...], M: int, N: int, world_size: int, protocol: str) -> int:
    """Index into ``configs`` (:func:`kernel_configs`) of the config a call with M rows uses (the first of
    equal estimates). Push tiles shard by shard (W > 1), pull over the whole M x N."""
    shard_local = protocol == "push" and world_size > 1
    times = [estimated_time(c, M, N, world_size, shard_local) for c in configs]
    return times.index(min(times))


__all__ = ["estimated_time", "kernel_configs", "pick_config", "tile_count"]
