"""Which tile configuration a call uses: a pure function of (M, N, W, protocol, SM count), so every rank of a
group, and every replay of a captured graph, picks the same one. Needs only the standard library.

Both protocols compile 128x256, 128x224 and 64x128 (one consumer warpgroup) tiles, pull also 64x112 (where 64x128
leaves SMs idle that 64x112 fills in the same waves: N = 7168, M <= 64) and its split-K configs (below); a call uses
the config with the least estimated time (:func:`estimated_time`). Push: each config with the deep epilogue ring
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

Clusters (pull and the W = 1 GEMM; configs with ``cluster_m`` = 2): the 64-row tiles also run in clusters of two
CTAs along M, each TMA-loading half of the shared B k-tile and multicasting it to both: the L2 term counts B once
per cluster; the tile count is whole clusters (an odd last M tile gets an idle twin, clipped).

Split-K (pull and the W = 1 GEMM; configs with ``split_k``): where the M x N tiles are too few to fill the SMs
(M <= :data:`kernel.fused.config.SPLIT_K_MAX_M`), a config may cut K into P parts (P in
:data:`kernel.fused.config.SPLIT_K_CHOICES`, at most K's k-tiles): P times the work units, each 1/P of the MMA
and load time, the same L2 bytes in all, plus the parts' phase (:func:`split_phase_time`: each unit's fp32 part
stored, then each unit sums its 1/P column slice of the tile's P parts, and the waits). That phase does not
scale with K, so K enters the choice of split configs (:func:`pick_config`, :func:`pick_splits`), and only theirs.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from .config import K_TILE, PUSH_EPI_STAGES, SPLIT_K_CHOICES, SPLIT_K_MAX_M, GemmConfig

#: Per-SM MMA throughput the cost model assumes (FLOP/s): two consumer warpgroups, and one (a 64-row tile).
SM_FLOPS_TWO_WARPGROUPS = 5.8e12
SM_FLOPS_ONE_WARPGROUP = 4.6e12
#: Load bandwidth of one SM (bytes/s) and of the whole L2 (bytes/s) the cost model assumes (fitted to the
#: first H200 run; ``bench/bench_gemm.py --all-tiles`` measures every config to refit them). 10th session: L2 at
#: 10e12 fits the W = 1 tables of the 9th and 10th sessions better (chosen / best column 0.998 / 0.982 on average,
#: 0.992 / 0.976 now: it takes 64x128 over 128x224 at M = 256, K = 2048) but moves push's W = 2 choice at M = 256
#: against its own measurement (first H200 run): not changed without a push measurement.
SM_LOAD_BYTES_S = 120e9
L2_BYTES_S = 8.5e12
#: One SM's bandwidth for the split-K parts (plain 16-byte stores and L2 loads; bytes/s) and the fixed cost of
#: the parts' phase (the cross-CTA waits; s). First fitted (one H200, 2026-12-01, 8th session) when one CTA per tile
#: read all P parts back: 20-30 GB/s and 0-4 us picked configs within 1% of the best measured. Since the 9th
#: session each unit sums a 1/P slice of its tile (a wave of stores and a wave of loads per SM, whatever P):
#: refitted to ``bench/bench_gemm.py --protocol pull --all-tiles`` with every split-K P timed (one H200, 9th
#: session, M = 128..512, N = 7168 and 8192, K = 2048 and 14336): 10-30 GB/s with 2-8 us choose within 0.9% of
#: the best column on average (7.5% at worst: 64x128 at M = 256, K = 2048, where 128x224 is picked); the values
#: are the first fit's, which this range holds. The phase is not what bounds M = 128: the split kernels run there
#: at ~3.2 TB/s of weights from HBM, torch.mm at ~3.9 (``docs/DESIGN-splitk.md``).
SM_PART_BYTES_S = 15e9
SPLIT_PHASE_S = 2e-6


def kernel_configs(protocol: str, sm_count: int, epi_stages: int | None = None) -> tuple[GemmConfig, ...]:
    """The tile configs an instance compiles, largest first. ``epi_stages`` overrides the configs'
    epilogue ring (the ``ring4`` measurement build)."""
    epi = epi_stages if epi_stages is not None else PUSH_EPI_STAGES if protocol == "push" else GemmConfig.epi_stages
    big, wide = GemmConfig(sm_count=sm_count, epi_stages=epi), GemmConfig(tile_n=224, sm_count=sm_count, epi_stages=epi)
    small = GemmConfig(tile_m=64, consumer_warpgroups=1, tile_n=128, sm_count=sm_count, epi_stages=epi)
    if protocol == "pull":
        # the split-K builds (pull and the W = 1 GEMM), their TMA loads hinted: B evict-first (each weight is
        # streamed once), so the parts' fp32 stores stay in L2 for the sum (+2-4% at M = 128, one H200, 10th
        # session); and 64x112 tiles (128 of them at N = 7168, M <= 64, where 64x128 fill 112 SMs: torch.mm's
        # choice there). The 64x128 tiles stay last (``small_m_config=`` replaces them).
        # The 64-row tiles also in clusters of two along M (11th session): the two CTAs of a cluster share each B
        # k-tile, loaded half by each and multicast to both, so the weights cross L2 once per two M tiles (as
        # cuBLAS's 2-CTA clusters at M = 128); where the sm_count is no whole number of clusters, none. Of equal
        # estimates the first is taken: 64x112 before its clustered twin (no idle twin at M <= 64).
        narrow = GemmConfig(tile_m=64, consumer_warpgroups=1, tile_n=112, epi_tile_n=16, sm_count=sm_count,
                            epi_stages=epi)
        clustered = (replace(narrow, cluster_m=2), replace(small, cluster_m=2)) if sm_count % 2 == 0 else ()
        return (big, wide, replace(big, split_k=True, l2_hints="stream"),
                replace(wide, split_k=True, l2_hints="stream"), narrow) + clustered + (small,)
    return big, wide, small


def tile_count(config: GemmConfig, M: int, N: int, world_size: int, shard_local: bool) -> int:
    """Tiles of one call: over M x N, or (``shard_local``, the push kernel) over each of the W shards."""
    rows = -(-M // world_size) if shard_local else M
    shards = world_size if shard_local else 1
    m_tiles = -(-rows // config.tile_m)
    m_tiles = -(-m_tiles // config.cluster_m) * config.cluster_m  # whole clusters (an idle twin past M)
    return shards * m_tiles * -(-N // config.tile_n)


def estimated_time(config: GemmConfig, M: int, N: int, world_size: int, shard_local: bool, splits: int = 1,
                   K: int | None = None) -> float:
    """Seconds per unit of K of one call's GEMM with ``config`` (the cost model of both protocols); with
    ``splits`` > 1 (a split-K config) K parts, whose phase :func:`split_phase_time` is spread over ``K``."""
    tiles = tile_count(config, M, N, world_size, shard_local)
    waves = -(-tiles * splits // config.sm_count)
    flops = SM_FLOPS_TWO_WARPGROUPS if config.consumer_warpgroups == 2 else SM_FLOPS_ONE_WARPGROUP
    tile_bytes = 2 * (config.tile_m + config.tile_n)
    l2_tile_bytes = 2 * (config.tile_m + config.tile_n / config.cluster_m)  # a cluster's CTAs share the B k-tile
    gemm = max(waves * 2 * config.tile_m * config.tile_n / flops / splits, tiles * l2_tile_bytes / L2_BYTES_S,
               waves * tile_bytes / SM_LOAD_BYTES_S / splits)
    if splits == 1:
        return gemm
    if K is None:
        raise ValueError("a split-K estimate needs K (its parts' phase does not scale with K)")
    return gemm + split_phase_time(config, tiles, splits) / K


def split_phase_time(config: GemmConfig, tiles: int, splits: int) -> float:
    """Seconds of a split-K call's parts: every unit stores an fp32 tile, then reads its 1/P column slice of the
    tile's P parts back (per SM: a wave of stores and one of loads, a part's bytes each; in all: the L2 traffic),
    and the waits."""
    part = config.tile_m * config.tile_n * 4
    waves = -(-tiles * splits // config.sm_count)
    return max(2 * waves * part / SM_PART_BYTES_S, 2 * tiles * splits * part / L2_BYTES_S) + SPLIT_PHASE_S


def admissible_splits(config: GemmConfig, M: int, K: int | None) -> tuple[int, ...]:
    """The K part counts a split-K ``config`` may run with at M rows: those of
    :data:`kernel.fused.config.SPLIT_K_CHOICES` with at least one k-tile each; none where it must not run (not a
    split-K config, M > SPLIT_K_MAX_M, K unknown or one k-tile). The one statement of these conditions: the cost
    model chooses among them, a launch forcing P (``bench/bench_gemm.py --all-tiles``) is checked against them."""
    if not config.split_k or K is None or M > SPLIT_K_MAX_M:
        return ()
    return tuple(p for p in SPLIT_K_CHOICES if p <= K // K_TILE)


#: Memoised choices (pure functions of hashable arguments): an instance's construction asks for every M up to its
#: split-K range (``split_rows``, ``split_workspace``, ``path_switches``), ~40 ms of this model per instance before
#: (profile of a W = 2 gate rank, 12th session: 616k ``pick_splits`` calls in 120 instances).
CHOICE_CACHE = 1 << 16


@lru_cache(maxsize=CHOICE_CACHE)
def pick_splits(config: GemmConfig, M: int, N: int, K: int | None, world_size: int) -> int:
    """The K parts a call with M rows uses with ``config``: 1 for any config but split-K's, else the choice of
    :func:`admissible_splits` with the least estimate (the first of equal ones); 0 where a split-K config must not
    run."""
    if not config.split_k:
        return 1
    choices = admissible_splits(config, M, K)
    if not choices:
        return 0
    times = [estimated_time(config, M, N, world_size, False, p, K) for p in choices]
    return choices[times.index(min(times))]


@lru_cache(maxsize=CHOICE_CACHE)
def pick_config(configs: tuple[GemmConfig, ...], M: int, N: int, world_size: int, protocol: str,
                K: int | None = None) -> int:
    """Index into ``configs`` (:func:`kernel_configs`) of the config a call with M rows uses (the first of
    equal estimates). Push tiles shard by shard (W > 1), pull over the whole M x N; split-K configs only with K
    (:func:`pick_splits`)."""
    shard_local = protocol == "push" and world_size > 1
    times = []
    for c in configs:
        splits = pick_splits(c, M, N, K, world_size)
        times.append(float("inf") if splits == 0 else estimated_time(c, M, N, world_size, shard_local, splits, K))
    return times.index(min(times))


#: The cost model sees a pull call's M only through its tile counts, ``ceil(M / tile_m)`` with ``tile_m`` 64 or 128
#: (:class:`~kernel.fused.config.GemmConfig` admits no other), and through :data:`SPLIT_K_MAX_M` (a multiple of it):
#: a pull call's choice is the same for every M of ``64 k + 1 .. 64 (k + 1)``.
ROW_STEP = 64


def row_segments(last: int, breaks=()) -> list[tuple[int, int]]:
    """``[(first M, last M)]`` covering 1..``last``: split at every ``64 k + 1`` (:data:`ROW_STEP`) and at each M of
    ``breaks`` (where something else the caller asks about may change, e.g. a protocol plan's Ms)."""
    starts = sorted({1, *range(ROW_STEP + 1, last + 1, ROW_STEP), *(m for m in breaks if 1 <= m <= last)})
    return [(a, b - 1) for a, b in zip(starts, [*starts[1:], last + 1])] if last >= 1 else []


def split_rows(configs: tuple[GemmConfig, ...], max_M: int, N: int, K: int, world_size: int,
               protocol: str, plan=None) -> tuple[int, int] | None:
    """``(first M, last M)`` of the calls M <= max_M that pick a split-K config, or None when none does;
    ``plan`` (a :class:`~kernel.fused.protocol_plan.ProtocolPlan`): only the Ms it runs ``protocol`` at (``auto``
    picks a protocol per M). Evaluated once per :func:`row_segments` segment -- the choice is constant over each
    (:data:`ROW_STEP`; the plan changes only at its own Ms) -- not at every M: ~30 ms of an instance's
    construction before (W = 2 gate rank, one H200, 14th session). ``tests/kernel/test_fused_wrapper.py`` holds
    it to the M-by-M definition."""
    breaks = [m for m, _ in plan.by_m] if plan is not None else ()
    picked = [(a, b) for a, b in row_segments(min(max_M, SPLIT_K_MAX_M), breaks)
              if (plan is None or plan.for_m(a) == protocol)
              and configs[pick_config(configs, a, N, world_size, protocol, K)].split_k]
    return (picked[0][0], picked[-1][1]) if picked else None


def split_workspace(configs: tuple[GemmConfig, ...], max_M: int, N: int, K: int, world_size: int,
                    protocol: str, every_p: bool = False) -> tuple[int, int]:
    """``(bytes of fp32 parts, work units)`` the split-K calls of an instance may need: the most over every
    split-K config and every M <= min(max_M, SPLIT_K_MAX_M) with the K parts :func:`pick_splits` gives it (with
    ``every_p``, any P of :data:`SPLIT_K_CHOICES` K takes) -- not only the config a call picks, so that a launch
    forcing a config (``bench/bench_gemm.py --all-tiles``) fits too. (0, 0) when ``protocol`` has no split-K
    config or K one k-tile."""
    need_bytes = need_units = 0
    for c in configs:
        if not c.split_k or protocol != "pull":
            continue
        for M, _last in row_segments(min(max_M, SPLIT_K_MAX_M)):  # constant over each (ROW_STEP)
            splits = pick_splits(c, M, N, K, world_size)
            if every_p and splits:
                splits = max(admissible_splits(c, M, K))
            units = tile_count(c, M, N, world_size, False) * splits
            need_units = max(need_units, units)
            need_bytes = max(need_bytes, units * c.tile_m * c.tile_n * 4)
    return need_bytes, need_units


__all__ = ["ROW_STEP", "admissible_splits", "estimated_time", "kernel_configs", "pick_config", "pick_splits",
           "row_segments", "split_phase_time", "split_rows", "split_workspace", "tile_count"]
