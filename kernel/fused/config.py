"""Every limit and name of the fused kernel, defined once (a leaf module: it imports nothing of the package).

The kernels (:mod:`kernel.fused.gemm`, :mod:`kernel.fused.gemm_rs`, :mod:`kernel.fused.gemm_rs_push`), the
compile cache (:mod:`kernel.fused.compile`), the workspace (:mod:`kernel.fused.workspace`) and the host
wrapper (:mod:`kernel.fused.wrapper`) all read their constants here, so none of them imports another
for a number or a name.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- shapes and hardware ----------------------------------------------------------------------------
#: The K tile: one 128-byte swizzle row of bf16. K must be a multiple of it.
K_TILE = 64
#: N must be a multiple of this (16-byte rows for TMA).
N_ALIGN = 8
#: Compute capability the kernels are built for (Hopper, sm_90a).
SUPPORTED_CAPABILITY = (9, 0)
DEFAULT_ARCH = "sm_90a"
#: Shared memory a CTA may use on sm_90 (227 KiB).
SMEM_CAPACITY_SM90 = 227 * 1024
#: Group sizes of the fused path: 1 (the plain GEMM) and every W with 128 % W == 0 up to 16.
FUSED_WORLD_SIZES = (1, 2, 4, 8, 16)
MAX_WORLD_SIZE = max(FUSED_WORLD_SIZES)

#: Widths of the N tile the kernels are built for (wgmma n, 16-byte TMA rows, a whole number of
#: 32-column epilogue sub-tiles): 224 fills 132 SMs better than 256 for N = 7168 at some M.
TILE_N_CHOICES = (64, 112, 128, 192, 224, 256)
#: CTAs per cluster along M a tile config may use (:attr:`GemmConfig.cluster_m`).
CLUSTER_M_CHOICES = (1, 2)


#: TMA load L2 cache-policy operands (``.L2::cache_hint``; CUTLASS's ``CacheHintSm90``): evict normal / first / last.
#: (The CuTe DSL's loads carry the operand too, 0 unless a policy is given.) ``GemmConfig.l2_hints`` picks
#: ``(A's, B's)`` by name.
L2_EVICT_NORMAL = 0x1000000000000000
L2_EVICT_FIRST = 0x12F0000000000000
L2_EVICT_LAST = 0x14F0000000000000
L2_HINTS = {"normal": (L2_EVICT_NORMAL, L2_EVICT_NORMAL), "stream": (L2_EVICT_LAST, L2_EVICT_FIRST)}


@dataclass(frozen=True)
class GemmConfig:
    """Compile-time configuration of the kernels' tiles (:class:`kernel.fused.gemm.HopperGemmBF16`; hashable:
    part of the compile-cache key)."""

    tile_m: int = 128
    tile_n: int = 256
    tile_k: int = 64
    consumer_warpgroups: int = 2
    epi_tile_n: int = 32
    epi_stages: int = 4
    ab_stages: int = 0  # 0: as many as fit in shared memory
    group_n: int = 8  # raster group width, in column tiles
    sm_count: int = 132  # persistent CTAs (H200: 132 SMs)
    #: Split-K build (pull protocol and the W = 1 GEMM only): the K range of a tile is cut into P parts (P a launch
    #: argument, :data:`SPLIT_K_CHOICES`), each computed by its own work unit into an fp32 part; each unit then sums
    #: a column slice of its tile's parts in part order and stores it as the rank's bf16 partial (design record:
    #: kernel/fused/gemm_rs.py).
    split_k: bool = False
    #: L2 eviction priorities of the mainloop's TMA loads, a key of :data:`L2_HINTS` (``stream``: A evict-last,
    #: B evict-first: at small M the weights stream from HBM once), or "" (the DSL's operand 0).
    l2_hints: str = ""
    #: CTAs of a cluster along M (1 or 2; :data:`CLUSTER_M_CHOICES`): with 2, the two CTAs of a cluster run the two
    #: M tiles of one column tile and each TMA-loads half of the shared B (weight) k-tile, multicast into both CTAs'
    #: shared memory (an on-chip cluster multicast, ``.multicast::cluster``: no NVLink multicast object, no
    #: ``multimem``), so the weights cross L2 once per cluster instead of once per CTA.
    cluster_m: int = 1

    def validate(self) -> None:
        if self.tile_k != K_TILE:
            raise ValueError(f"tile_k must be {K_TILE} (one 128-byte swizzle row of bf16), got {self.tile_k}")
        if self.consumer_warpgroups not in (1, 2) or self.tile_m != 64 * self.consumer_warpgroups:
            raise ValueError("tile_m must be 64 * consumer_warpgroups, 1 or 2 of them (each consumer owns 64 rows)")
        if self.tile_n not in TILE_N_CHOICES:
            raise ValueError(f"tile_n must be one of {TILE_N_CHOICES}, got {self.tile_n}")
        if self.tile_n % self.epi_tile_n:
            raise ValueError("epi_tile_n must divide tile_n")
        if self.l2_hints and self.l2_hints not in L2_HINTS:
            raise ValueError(f"l2_hints must be one of {sorted(L2_HINTS)} or empty, got {self.l2_hints!r}")
        if self.group_n < 1 or self.sm_count < 1:
            raise ValueError("group_n and sm_count must be positive")
        if self.cluster_m not in CLUSTER_M_CHOICES:
            raise ValueError(f"cluster_m must be one of {CLUSTER_M_CHOICES}, got {self.cluster_m}")
        if self.cluster_m > 1 and (self.split_k or self.sm_count % self.cluster_m):
            raise ValueError("a clustered config (cluster_m > 1) takes no split-K, and its persistent grid (sm_count) "
                             "must be whole clusters")

    @property
    def label(self) -> str:
        """The tile's name in reports and paths: ``64x128``, ``64x128c2`` in clusters of two."""
        return f"{self.tile_m}x{self.tile_n}" + (f"c{self.cluster_m}" if self.cluster_m > 1 else "")

    def check_shape(self, N: int, K: int) -> None:
        """The shapes a kernel of this config takes: K a positive multiple of the K tile, N of 8 (16-byte rows
        for TMA)."""
        if int(K) <= 0 or int(K) % self.tile_k:
            raise ValueError(f"K={K} must be a positive multiple of {self.tile_k}")
        if int(N) <= 0 or int(N) % N_ALIGN:
            raise ValueError(f"N={N} must be a positive multiple of {N_ALIGN} (16-byte rows)")


#: K parts a split-K call may use (:mod:`kernel.fused.tiles` picks one per M; never more than K's k-tiles).
SPLIT_K_CHOICES = (2, 3, 4)
#: Split-K configs are considered only up to this M (where the M x N tiles alone cannot fill the SMs); the
#: fp32 parts workspace is sized for the calls at or below it.
SPLIT_K_MAX_M = 512


# --- cross-rank protocol ----------------------------------------------------------------------------
#: ``pull``: every rank stores its partial tiles in its own workspace and, after its GEMM, reduces its
#: shard by loading all W partials through peer pointers (:mod:`kernel.fused.gemm_rs`; proven on the GPU).
#: ``push``: partials of peers' shards are pushed (TMA stores) into the owner's inbox during the GEMM,
#: own shard last, the W-way sum fused into the epilogue of the own tiles (:mod:`kernel.fused.gemm_rs_push`).
#: ``auto`` (the wrapper only): per call, the protocol the measured table of :mod:`kernel.fused.crossover`
#: says is faster at that M for this (N, K, W); one instance owns both kernels over one workspace (their
#: flags and buffers are compatible call after call: the design records' ``done`` and epoch rules).
KERNEL_PROTOCOLS = ("pull", "push")
PROTOCOLS = KERNEL_PROTOCOLS + ("auto",)
#: The protocol ``FusedGemmRs`` uses unless told otherwise: the one proven on the GPU. Kept at pull after the
#: first iteration's measurements (2xH200): push was 5-13 % faster than pull at every M at N = 7168, K = 2048,
#: but slower at N = 8192, K = 14336 for M = 128, 256 (100.5 / 177.6 vs 85.9 / 116.3 us) and 2048 .. 16384
#: (1-6 %): no protocol wins everywhere, which is what ``auto`` is for; the lead switches the default to auto
#: on GPU evidence (bench/gpu_kernel_check.sh: auto correct and at least as fast as the faster protocol).
DEFAULT_PROTOCOL = "pull"

#: Tile orders of the push kernel (:mod:`kernel.fused.push_order`). ``interleaved``: a lead of one wave of
#: pushes, then own tiles interleaved with the pushes (the transfer spread over the whole GEMM; for one GPU
#: per rank). ``push_first``: every push, then every own tile (for ranks time-slicing one GPU: a rank never
#: waits before all its pushes are out, so a call needs two rounds of time slices, not one per wave).
PUSH_ORDERS = ("interleaved", "push_first")
#: Epilogue ring of the push protocol's tile configs, in (tile_m x 32) sub-tiles: a whole 128x256 tile, so
#: that the consumer warps write a pushed tile into shared memory and go on with the next mainloop while the
#: TMA engine drains it over NVLink (the mainloop keeps 3 stages instead of 4 for it).
PUSH_EPI_STAGES = 8
#: Measurement-only builds of the push protocol (``bench/bench_gemm_rs.py``'s A/B columns; never a result):
#: name -> what it changes. ``no_mma`` is a compile-time switch of the kernel (part of the compile key); the
#: others are the wrapper's (launch arguments, tile configs).
PUSH_EXPERIMENTS = {
    "local_push": "every push goes into this rank's own inbox instead of the owner's (the launcher passes the "
                  "own workspace as every peer's): the same kernel with TMA stores at local speed; flags as "
                  "usual, the sums read stale inboxes",
    "no_mma": "no mainloop (no A/B loads, zero accumulators): the pushes, flags and sums alone",
    "ring4": "the push tile configs with a 4-deep epilogue ring and 4 mainloop stages (the first iteration's)",
}
KERNEL_EXPERIMENTS = ("no_mma",)

#: A cross-rank wait that sees no progress for this long executes ``trap`` (a CUDA error, not a hang).
SPIN_TIMEOUT_S = 60.0
#: Backoff of a spinning lane between two polls of a flag.
SPIN_SLEEP_NS = 64

# Flag area: u32 words in every rank's symmetric workspace (semantics in the kernels' design records).
EPOCH_WORD = 0  # calls this rank has completed (device-side epoch)
FINISHED_WORD = 1  # CTAs of the running call that are done
DEVICE_WORD = 2  # an id of this rank's GPU, written at construction (which ranks share a GPU; host-read only)
DONE_BASE = 32  # DONE_BASE + p: last epoch in which rank p finished reading (pull: our partials; push: its inbox)
READY_BASE = 64  # READY_BASE + src * slots + tile: epoch in which src's partial of tile is in place
if MAX_WORLD_SIZE > READY_BASE - DONE_BASE:
    raise RuntimeError("the done words of MAX_WORLD_SIZE ranks overlap the ready words")

# --- fault-injected builds --------------------------------------------------------------------------
#: Compile-time switches that plant one real bug class each (all OFF by default; the default build's
#: PTX is byte-identical to the build without them), for the GPU mutation meta-test
#: (``mutants/kernel_faults.py``). Name -> (protocol it applies to, the bug it plants).
FAULT_PROTOCOL = {
    # pull protocol (kernel.fused.gemm_rs)
    "dropped_peer": ("pull", "the reduction loads W-1 partials: the last rank's is never added"),
    "relaxed_signal": ("pull", "ready flag raised st.relaxed.sys right after the TMA store is issued (no wait, "
                               "no fence)"),
    "stale_epoch": ("pull", "the epoch word is never advanced: every call is epoch 1, last call's flags "
                            "satisfy waits"),
    "write_past_capacity": ("pull", "a row stored at partial row W*S: past the partials (guard A) when S == S_max"),
    "padding_written": ("pull", "out's padding rows (r*S + i >= M) are written (with zeros)"),
    "wrong_owner": ("pull", "rank r reduces the shard of (r+1) % W (waits on that owner's ready flags)"),
    "epoch_zero_used": ("pull", "the epoch is not skipped past 0 when it wraps (after 2^32 - 1 calls): every flag "
                                "word never written since the workspace was zeroed reads as signalled in that call"),
    "epoch_order_signed": ("pull", "the done words are compared with a signed `<` instead of the wrap-safe signed "
                                   "difference: once the epochs cross 2^31 a peer's done word of the previous "
                                   "epoch reads as reached (shared data overwritten while the peer reads it)"),
    "done_wait_skipped": ("pull", "no wait for the peers' done words before a call's first TMA store: a rank's "
                                  "next call overwrites its partials while a late peer may still read the last "
                                  "call's"),
    # split-K builds of the pull kernel (kernel.fused.gemm_rs, configs with split_k)
    "dropped_part": ("pull", "split-K: the combine adds K parts 0..P-2: the last part is never added"),
    "bf16_parts": ("pull", "split-K: each fp32 K part is rounded to bf16 before the combine adds it (the "
                           "reduced-precision split-K reduction the contract's error model excludes)"),
    "unordered_part_signal": ("pull", "split-K: a part's ready word is raised by one thread right after its own "
                                      "stores, without the barrier that orders the other threads' stores first"),
    "unwaited_slices": ("pull", "split-K, W > 1: a tile's last unit signals the owners without waiting for the "
                                "other units' slices of the tile (an owner can read columns not stored yet)"),
    # clustered builds of the pull kernel (kernel.fused.gemm, configs with cluster_m > 1)
    "cluster_local_release": ("pull", "clustered tiles: a stage's empty barrier counts this CTA's consumer warps only "
                                      "(not its twin's, which release to it too): a producer may refill a stage "
                                      "the twin is still reading"),
    "cluster_unaware_schedule": ("pull", "clustered tiles: the CTAs of a cluster take tiles of the plain raster "
                                         "(different column tiles) while each multicasts half of its B k-tile "
                                         "to both"),
    # push protocol (kernel.fused.gemm_rs_push)
    "consumer_fence_missing": ("push", "no fence.proxy.async between acquiring an owner's inbox-free flag and "
                                       "the TMA pushes into that inbox (async-proxy writes not ordered after "
                                       "the acquire)"),
    "early_signal": ("push", "ready raised right after the pushes are issued, before the remote TMA stores "
                             "completed (no wait_group 0, no proxy fence; release kept)"),
    "wrong_inbox_slot": ("push", "partials are pushed into the inbox slot of source (r+1) % W instead of r"),
    "own_partial_skipped": ("push", "the owner sums the W-1 inbox partials only: its own accumulator is "
                                    "never added"),
}
KERNEL_FAULTS = tuple(FAULT_PROTOCOL)
#: The faults that plant bugs in the split-K phase only (no effect on a build without ``split_k``); the only ones a
#: W == 1 split-K GEMM is built with, less :data:`SPLIT_K_CROSS_RANK_FAULTS`.
SPLIT_K_FAULTS = ("dropped_part", "bf16_parts", "unordered_part_signal", "unwaited_slices")
#: The faults that plant bugs in the clustered builds only (no effect without ``cluster_m`` > 1).
CLUSTER_FAULTS = ("cluster_local_release", "cluster_unaware_schedule")
#: Split-K faults in the signalling of the tile's owners: a W == 1 build has none (``ValueError``).
SPLIT_K_CROSS_RANK_FAULTS = ("unwaited_slices",)


def normalize_faults(faults, protocol: str | None = None) -> frozenset:
    """``faults`` (names from :data:`KERNEL_FAULTS`; a str is one name) as a frozenset; unknown names, or
    (with ``protocol``) names of the other protocol's bug classes -> ``ValueError``."""
    if faults is None:
        return frozenset()
    if isinstance(faults, str):
        faults = (faults,)
    names = frozenset(faults)
    unknown = sorted(str(f) for f in names if f not in FAULT_PROTOCOL)
    if unknown:
        raise ValueError(f"unknown kernel fault(s) {unknown}: known are {list(KERNEL_FAULTS)}")
    if protocol is not None:
        check_protocol(protocol)
        other = sorted(f for f in names if FAULT_PROTOCOL[f][0] != protocol)
        if other:
            raise ValueError(f"kernel fault(s) {other} plant bugs of the other protocol, not of {protocol!r}")
    return names


def check_push_build(order: str, experiment: str = "") -> None:
    """``ValueError`` unless ``order`` is one of :data:`PUSH_ORDERS` and ``experiment`` is empty or one of
    :data:`PUSH_EXPERIMENTS`."""
    if order not in PUSH_ORDERS:
        raise ValueError(f"unknown push order {order!r}: one of {list(PUSH_ORDERS)}")
    if experiment and experiment not in PUSH_EXPERIMENTS:
        raise ValueError(f"unknown push experiment {experiment!r}: one of {list(PUSH_EXPERIMENTS)}")


def check_protocol(protocol: str, kernel: bool = False) -> str:
    """``protocol`` if it names one of :data:`PROTOCOLS` (``kernel``: of :data:`KERNEL_PROTOCOLS`, a kernel's
    own); else ``ValueError``."""
    known = KERNEL_PROTOCOLS if kernel else PROTOCOLS
    if protocol not in known:
        raise ValueError(f"unknown protocol {protocol!r}: one of {list(known)}")
    return protocol


__all__ = [
    "CLUSTER_FAULTS",
    "CLUSTER_M_CHOICES",
    "GemmConfig",
    "TILE_N_CHOICES",
    "DEFAULT_ARCH",
    "DEFAULT_PROTOCOL",
    "DEVICE_WORD",
    "DONE_BASE",
    "EPOCH_WORD",
    "FAULT_PROTOCOL",
    "FINISHED_WORD",
    "FUSED_WORLD_SIZES",
    "KERNEL_EXPERIMENTS",
    "KERNEL_FAULTS",
    "KERNEL_PROTOCOLS",
    "K_TILE",
    "MAX_WORLD_SIZE",
    "N_ALIGN",
    "PROTOCOLS",
    "PUSH_EPI_STAGES",
    "PUSH_EXPERIMENTS",
    "PUSH_ORDERS",
    "READY_BASE",
    "SMEM_CAPACITY_SM90",
    "SPLIT_K_CHOICES",
    "SPLIT_K_CROSS_RANK_FAULTS",
    "SPLIT_K_FAULTS",
    "SPLIT_K_MAX_M",
    "SPIN_SLEEP_NS",
    "SPIN_TIMEOUT_S",
    "SUPPORTED_CAPABILITY",
    "check_protocol",
    "check_push_build",
    "normalize_faults",
]
