"""Which tile configuration a call uses: a pure function of (M, N, W, protocol, SM count), so every rank of a
group, and every replay of a captured graph, picks the same one. Needs only the standard library.

Pull protocol (proven on the GPU): 128x256 tiles, and 128x128 when 128x256 tiles would fill less than half
the SMs. Push protocol: among 128x256, 128x224 and 64x128 (one consumer warpgroup) the one with the least
estimated time, ``waves * tile area / efficiency`` (``waves = ceil(tiles / SMs)``, tiles counted shard by
shard as the push kernel tiles them; efficiency 1 with two consumer warpgroups, 0.8 with one): 224-wide
tiles fill the last wave better at N = 7168 for some M, 64-row tiles at small M.
"""

from __future__ import annotations

from .config import GemmConfig

#: Relative throughput of a tile config per SM (a 64-row tile keeps one consumer warpgroup busy, not two).
_ONE_WARPGROUP_EFFICIENCY = 0.8


def kernel_configs(protocol: str, sm_count: int) -> tuple[GemmConfig, ...]:
    """The tile configs an instance compiles, largest first."""
    if protocol == "pull":
        return GemmConfig(sm_count=sm_count), GemmConfig(tile_n=128, sm_count=sm_count)
    return (GemmConfig(sm_count=sm_count), GemmConfig(tile_n=224, sm_count=sm_count),
            GemmConfig(tile_m=64, consumer_warpgroups=1, tile_n=128, sm_count=sm_count))


def tile_count(config: GemmConfig, M: int, N: int, world_size: int, shard_local: bool) -> int:
    """Tiles of one call: over M x N, or (``shard_local``, the push kernel) over each of the W shards."""
    rows = -(-M // world_size) if shard_local else M
    shards = world_size if shard_local else 1
    return shards * -(-rows // config.tile_m) * -(-N // config.tile_n)


def pick_config(configs: tuple[GemmConfig, ...], M: int, N: int, world_size: int, protocol: str) -> int:
    """Index into ``configs`` (:func:`kernel_configs`) of the config a call with M rows uses."""
    if protocol == "pull":
        large = configs[0]
        return 1 if 2 * tile_count(large, M, N, 1, False) <= large.sm_count else 0
    shard_local = world_size > 1

    def cost(c: GemmConfig) -> float:
        waves = -(-tile_count(c, M, N, world_size, shard_local) // c.sm_count)
        efficiency = 1.0 if c.consumer_warpgroups == 2 else _ONE_WARPGROUP_EFFICIENCY
        return waves * c.tile_m * c.tile_n / efficiency

    costs = [cost(c) for c in configs]
    return costs.index(min(costs))


__all__ = ["kernel_configs", "pick_config", "tile_count"]
