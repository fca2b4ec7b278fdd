"""Host wrapper of the fused kernel: ``FusedGemmRs``, the implementation named ``"fused"``.

W == 1: the fused operation *is* the GEMM (the shard is all M rows) and runs the CuTe DSL Hopper GEMM
(:mod:`kernel.fused.gemm`), or, where the cost model splits K (small M, long K), the pull kernel built for one
rank with split-K (:mod:`kernel.fused.gemm_rs`; its fp32 parts, ready words and epoch in a local
:class:`kernel.fused.workspace.SplitParts`, allocated at construction like the symmetric workspace). W in (2, 4,
8, 16): a fused GEMM + reduce-scatter kernel of the instance's
``protocol`` -- ``"pull"`` (:mod:`kernel.fused.gemm_rs`, the default, proven on the GPU), ``"push"``
(:mod:`kernel.fused.gemm_rs_push`, communication overlapped with the GEMM; :class:`FusedGemmRsPush`; its tile
order is chosen at construction: ``push_first`` where ranks share a GPU, ``interleaved`` otherwise) or
``"auto"`` (:class:`FusedGemmRsAuto`: per call, the protocol ``kernel/fused/crossover.json`` measured faster
at that M for this (N, K, W) -- a function of M fixed at construction (:mod:`kernel.fused.protocol_plan`), so
replays and ranks agree; both kernels share one workspace: the flag words and buffers mean the same to both,
and each call's ``done`` wait covers what the other protocol's previous call read or wrote) -- their
docstrings are the protocols' design records -- over a symmetric workspace
(:mod:`kernel.fused.workspace`) allocated *collectively at construction* -- every rank constructs its
instances in the same order -- with ``torch.distributed._symmetric_memory`` (works with a gloo group,
ranks sharing one GPU with ``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1``, and with NCCL, one GPU per
rank). Multicast is never used. Whatever ``can_run`` rejects goes to
:class:`kernel.unfused.UnfusedGemmRs` built with the same group, max_M, N, K and device, and
``last_path`` says ``"unfused"``; with ``force_fused=True`` such a call raises
:class:`kernel.errors.FusedPathUnavailable` instead, after the bad-call checks and before any work.

Per call: the base class checks (dtype, device, shapes, contiguity, 16-byte alignment, 1 <= M <= max_M) run first,
metadata only, ``if ...: raise``; then one kernel launch on the current torch stream. No host sync, no allocation
when ``out=`` is given, no host state that a CUDA-graph replay would not reproduce: the TMA descriptors are built at
launch from (pointer, M, rank) and live in the kernel parameters, and the cross-rank epoch lives on the device (the
kernel advances it). Kernels are compiled once per (config[, W, protocol]) and process, whatever the shape (N and K
are launch arguments), in the constructor -- the rank is a launch argument, so the ranks of a group share one
compile (one per host with ``GEMM_RS_KERNEL_CACHE_DIR``, see :mod:`kernel.fused.compile`) -- and serve every M. The
tile config of a call (:mod:`kernel.fused.tiles`) is a function of M only, so every rank picks the same one.

``should_run(x)``: M >= the crossover measured by ``bench/bench_gemm_rs.py`` for this (N, K, W, protocol)
(``kernel/fused/crossover.json``, :mod:`kernel.fused.crossover`), else the contract default 128.

``state_tensors()`` -> the partials and the flag words only this rank writes (a rejected call leaves
them bit-identical; words peers write into this rank's area change whenever peers run);
``guard_regions()`` -> red zones right after the partials and right after the flags, filled with a
fixed pattern at construction. ``close()`` waits for the device and the group (so no peer still reads
this rank's partials) and frees the workspace; it is collective like construction.

Requirements of the fused path: CUDA device of capability (9, 0) (Hopper, sm_90a); bf16, contiguous,
16-byte aligned operands; K % 64 == 0; N % 8 == 0; W in (1, 2, 4, 8, 16); nvidia-cutlass-dsl importable;
for W > 1 torch symmetric memory.
"""

from __future__ import annotations

import importlib.util
import time
import warnings

import torch

from ..checks import ALIGN_BYTES, mps_client
from ..errors import FusedPathUnavailable
from ..interface import Eligibility, GemmRsImplementation, KernelPath
from .config import (
    DEFAULT_PROTOCOL,
    DONE_BASE,
    EPOCH_WORD,
    FUSED_WORLD_SIZES,
    K_TILE,
    KERNEL_FAULTS,
    N_ALIGN,
    PUSH_EXPERIMENTS,
    PUSH_ORDERS,
    READY_BASE,
    SPIN_TIMEOUT_S,
    SPLIT_K_CROSS_RANK_FAULTS,
    SPLIT_K_FAULTS,
    SUPPORTED_CAPABILITY,
    GemmConfig,
    check_protocol,
    check_push_build,
    normalize_faults,
)
from .protocol_plan import ProtocolPlan

#: torch's own query of the current stream's raw handle (what its compiled kernels launch on; 0.2 us against 6.8 us
#: for ``torch.cuda.current_stream(device).cuda_stream``, which builds a Stream object: one H200 host, 27th session).
_RAW_STREAM = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def current_stream_handle(device: torch.device) -> int:
    """The raw handle of the current CUDA stream on ``device`` (a capture's stream under graph capture): torch's
    raw query where it has one and the device names its index, else ``torch.cuda.current_stream``."""
    if _RAW_STREAM is not None and device.index is not None:
        return _RAW_STREAM(device.index)
    return torch.cuda.current_stream(device).cuda_stream


def cutlass_available() -> bool:
    """Whether nvidia-cutlass-dsl can be imported (without importing it)."""
    return importlib.util.find_spec("cutlass") is not None and importlib.util.find_spec("cuda") is not None


# --- eligibility chain: each returns None or the reason the fused path cannot run -----------------
def check_cuda_device(device: torch.device) -> str | None:
    if device.type != "cuda":
        return f"device {device} is not a CUDA device"
    if not torch.cuda.is_available():
        return "torch.cuda is not available on this machine"
    return None


def check_capability(device: torch.device) -> str | None:
    cap = torch.cuda.get_device_capability(device)
    if tuple(cap) != SUPPORTED_CAPABILITY:
        return f"compute capability {cap[0]}.{cap[1]}: the kernel needs sm_90a (Hopper, 9.0)"
    return None


def check_world_size(world_size: int) -> str | None:
    if world_size not in FUSED_WORLD_SIZES:
        return f"W={world_size}: the fused kernel supports W in {FUSED_WORLD_SIZES}"
    return None


def check_dims(N: int, K: int) -> str | None:
    if K % K_TILE:
        return f"K={K} is not a multiple of the kernel's K tile {K_TILE}"
    if N % N_ALIGN:
        return f"N={N} is not a multiple of {N_ALIGN} (16-byte rows for TMA)"
    return None


def check_cutlass() -> str | None:
    if not cutlass_available():
        return "nvidia-cutlass-dsl (cutlass, cuda-python) is not importable"
    return None


def check_symmetric_memory(world_size: int) -> str | None:
    if world_size == 1:
        return None
    try:
        from torch.distributed import _symmetric_memory  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        return f"torch symmetric memory is not importable ({exc})"
    return None


def check_weight(weight, N: int, K: int, device: torch.device) -> str | None:
    if not isinstance(weight, torch.Tensor):
        return f"weight is a {type(weight).__name__}, not a torch.Tensor"
    if weight.dtype != torch.bfloat16:
        return f"weight dtype {weight.dtype} is not torch.bfloat16"
    if tuple(weight.shape) != (N, K):
        return f"weight shape {tuple(weight.shape)} is not (N, K) = ({N}, {K})"
    if weight.device != device:
        return f"weight is on {weight.device}, the implementation on {device}"
    if not weight.is_contiguous():
        return "weight is not contiguous (pass the (N, K) nn.Linear weight, not W.mT)"
    if weight.data_ptr() % ALIGN_BYTES:
        return f"weight.data_ptr() is not {ALIGN_BYTES}-byte aligned"
    return None


#: (device, cluster size) -> how many such clusters the GPU runs at once: the answers :func:`max_active_clusters` got.
_ACTIVE_CLUSTERS: dict[tuple[int, int], int] = {}
#: Times a failed cluster occupancy query is asked again before this construction does without clusters.
CLUSTER_QUERY_TRIES = 3


def max_active_clusters(device_index: int, cluster_size: int) -> int:
    """How many clusters of ``cluster_size`` CTAs of one CTA per SM (all the shared memory) the GPU runs at once
    (``cuOccupancyMaxActiveClusters`` through the CuTe DSL's ``HardwareInfo``); 0, with a warning, where it cannot
    tell (then no clustered config is compiled: slower small-M calls, the same results). An answer is kept for the
    process (a property of the GPU; each query compiles and loads a dummy kernel after a device synchronize); a
    failure is not: it is asked again up to :data:`CLUSTER_QUERY_TRIES` times, and again at the next construction
    (a failure kept for good on one rank of a group made it pick other kernels than its peers for the same M until
    the group agreed on the facts, :func:`agreed_device_facts`)."""
    key = (device_index, cluster_size)
    if key in _ACTIVE_CLUSTERS:
        return _ACTIVE_CLUSTERS[key]
    failure = None
    for attempt in range(CLUSTER_QUERY_TRIES):
        try:
            from cutlass.utils import HardwareInfo

            with torch.cuda.device(device_index):
                torch.cuda.synchronize(device_index)  # the device's primary context current on this thread (the
                # query is a driver-API call: CUDA_ERROR_INVALID_CONTEXT before torch's first CUDA work otherwise)
                _ACTIVE_CLUSTERS[key] = int(HardwareInfo(device_id=device_index).get_max_active_clusters(cluster_size))
            return _ACTIVE_CLUSTERS[key]
        except Exception as exc:  # noqa: BLE001 -- an old driver or a failed query
            failure = exc
            time.sleep(0.05 * (attempt + 1))
    warnings.warn(f"cannot tell how many {cluster_size}-CTA clusters cuda:{device_index} runs at once "
                  f"({type(failure).__name__}: {failure}; asked {CLUSTER_QUERY_TRIES} times): this instance compiles "
                  "no clustered tile config, nor do its group's other ranks", RuntimeWarning, stacklevel=2)
    return 0


#: Cluster sizes of the tile configs (``kernel.fused.tiles.kernel_configs``: the clustered 64-row tiles are 2-CTA).
CLUSTER_SIZES = (2,)


def device_facts(device: torch.device) -> dict:
    """What this rank's tile-config choice reads from its GPU: its SM count and, per cluster size, how many such
    clusters run at once (:func:`max_active_clusters`). CPU: none. An MPS client (:func:`mps_client`) gets no
    clusters: the occupancy query answers for the whole GPU, not for the client's SM share, and the persistent
    grid of clusters it promised was not co-resident (one H200, 23rd session: 33 two-CTA clusters reported on a
    66-SM share at 50 %, the kernels' 60 s trap; unclustered, the same case passed). Its SM count is its share."""
    if device.type != "cuda":
        return {}
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count
    mps = mps_client(device.index or 0)
    return {"sm_count": int(sm_count), "mps": mps,
            "clusters": {size: 0 if mps else max_active_clusters(device.index or 0, size) for size in CLUSTER_SIZES}}


def agreed_device_facts(per_rank: list[dict]) -> tuple[int, frozenset]:
    """``(SM count, cluster sizes)`` every rank of a group compiles its tile configs for, from every rank's
    :func:`device_facts`: the smallest SM count (the persistent grid of each rank's kernels), and the cluster
    sizes whose persistent grid of that many CTAs is co-resident on **every** rank's GPU. The tile config of a
    call is a pure function of M and these: ranks that read different facts (a GPU with fewer SMs, a cluster
    occupancy query that failed on one rank -- it returns 0) would pick different kernels for one M, and the
    fused call would wait forever for peers that run another one (a HANG, or the kernels' spin-timeout trap)."""
    if not per_rank or any(not f for f in per_rank):
        raise ValueError(f"every rank's device facts are needed, got {per_rank}")
    sm_count = min(int(f["sm_count"]) for f in per_rank)
    sizes = frozenset(size for size in CLUSTER_SIZES
                      if all(int(f["clusters"].get(size, 0)) * size >= sm_count for f in per_rank))
    return sm_count, sizes


def check_mps_clients(per_rank: list[dict]) -> str | None:
    """The reason the fused path cannot run where any rank of the group is an MPS client (:func:`device_facts`,
    gathered on the group so every rank answers alike): the persistent grid's deadlock freedom needs it resident
    at once (design record, ``gemm_rs.py``), and MPS does not promise that -- a share bounds how many SMs a client
    uses, not which; on one H200 full-grid calls hit the spin-timeout trap, which tears down every client of the
    server (25th session, docs/evidence/2026-12-04-mps-gate/). The unfused fallback serves such a group."""
    clients = [rank for rank, facts in enumerate(per_rank) if facts and facts.get("mps")]
    return f"group rank(s) {clients} are MPS clients: {MPS_REASON}" if clients else None


#: Why an MPS client gets no fused path (:func:`check_mps_clients`, :meth:`FusedGemmRs.main_path_support`).
MPS_REASON = ("the fused kernel's persistent grid is not promised to be resident at once under MPS (a deadlock, "
              "then a trap that ends every client of the server); run the ranks without MPS")


#: Where :meth:`FusedGemmRs.declared_paths` looks for a call of each tile config: (N, K) shapes and row counts,
#: cheapest first. The long-K ones are the smallest weights (24-41 MiB) whose calls take each split-K config and
#: number of K parts (since the clustered 64-row tiles, 11th session: P = 3 only, at M = 448 .. 511; a first choice
#: of 8192 x 8192 weights took 8-9 GiB per rank with the fp64 truth: W = 16 ran a GPU out of memory).
PATH_SHAPES = ((512, 256), (3584, 3584), (4096, 4608), (3072, 5632), (2304, 7168), (2560, 8192))
PATH_MS = (1, 64, 129, 255, 256, 257, 384, 448, 511, 1000, 2048, 4096, 8192)


class FusedGemmRs(GemmRsImplementation):
    """The fused CuTe DSL implementation: GEMM at W == 1, GEMM + reduce-scatter at W in (2, 4, 8, 16)."""

    name = "fused"
    main_path = "fused"
    preload_modules = ("kernel.fused.compile",)  # the CuTe DSL (a few seconds of imports per process)
    fallback_path = "unfused"  # what can_run rejects runs UnfusedGemmRs (none with force_fused=True)
    #: the fallback's GEMM is torch's (``torch.mm``); the fused path launches its GEMM as a CuTe kernel and
    #: dispatches no GEMM op: a "fused" call that did ran the fallback (``path_taken``)
    fallback_ops = ("aten.mm", "aten.addmm")
    #: Fault-injected build (names from :data:`KERNEL_FAULTS`); empty: the real kernel. Subclasses in
    #: ``mutants/kernel_faults.py`` set it; the ``faults=`` argument overrides it.
    faults: tuple = ()
    #: Cross-rank protocol of the W > 1 kernel (:data:`kernel.fused.config.PROTOCOLS`); ``protocol=`` overrides.
    protocol: str = DEFAULT_PROTOCOL
    #: Batch invariance (a token's bits independent of M) kept at the cost of the split-K configs (never compiled
    #: nor picked); False: split-K where the cost model says so, and the clause waived for the instances whose
    #: calls can split (their M range named in the reason). ``batch_invariant=`` overrides.
    batch_invariant: bool = False

    def __init__(
        self,
        group=None,
        *,
        max_M: int,
        N: int,
        K: int,
        device=None,
        force_fused: bool = False,
        config=None,
        small_m_config=None,
        faults=None,
        protocol=None,
        push_order=None,
        experiment="",
        protocol_by_m=None,
        batch_invariant=None,
    ):
        # Checked first: a misspelt fault, protocol, order or experiment must not silently build the real
        # (default) kernel.
        self.protocol = check_protocol(type(self).protocol if protocol is None else protocol)
        self._faults = normalize_faults(type(self).faults if faults is None else faults, self.protocol)
        if self.protocol == "push":
            check_push_build(push_order or PUSH_ORDERS[0], experiment)
        elif experiment or (push_order is not None and self.protocol != "auto"):
            raise ValueError("push_order and experiment are push-protocol options")
        elif push_order is not None:
            check_push_build(push_order)
        self._plan = ProtocolPlan.of(self.protocol, 1, protocol_by_m)  # checked now; completed below
        self.batch_invariant = type(self).batch_invariant if batch_invariant is None else bool(batch_invariant)
        self._push_order_request = push_order
        self.push_order = None  # push, W > 1: the tile order, fixed at construction (see _choose_push_order)
        self.experiment = experiment
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        if experiment:  # a measurement-only build names its own path: its results are never the kernel's
            self.main_path = f"fused-{experiment}"
        self.force_fused = bool(force_fused)
        if self.force_fused:
            self.fallback_path = None
        self._config = config
        self._small_m_config = small_m_config
        self._tile_configs = {}  # protocol -> its tile configs (kernel_protocols())
        self._agreed_facts = None  # (SM count, cluster sizes) the tile configs are built for (_device_facts)
        self._group_facts = []  # every group rank's device_facts, gathered at construction (W = 1: this rank's)
        self._path_table = None  # (first M, kernel path name) pieces, worked out once (path_table)
        self._compiled = None  # protocol -> one compiled kernel per tile config, for every M and rank
        self._workspace = None
        self._split = None  # split-K parts (kernel.fused.workspace.SplitParts), where a split-K config can run
        self._choices = {}  # M -> (protocol, tile config index): fixed at construction, so worked out once per M
        self._split_choices = {}  # (config index, M) -> the split-K launch's (parts, ready words, K parts)
        self._slots = 0
        self._fallback = None
        self._config_reason = self._config_ineligibility()
        by_m = self._plan.table()
        if self._config_reason is None and self.protocol == "auto" and by_m is None:
            from .crossover import measured_protocols

            by_m = measured_protocols(self.N, self.K, self.world_size)
        self._plan = ProtocolPlan.of(self.protocol, self.world_size, by_m)
        if self._config_reason is None:
            from .crossover import measured_min_m

            default = self.should_run_min_m
            self.should_run_min_m = min(measured_min_m(self.N, self.K, self.world_size, p, default=default)
                                        for p in self.kernel_protocols())
            if self.world_size > 1:
                self._agree_device_facts()
            else:  # this rank's facts, asked once: the tile configs read them too (_device_facts)
                self._group_facts = [device_facts(self.device)]
                self._agreed_facts = agreed_device_facts(self._group_facts)
            self._config_reason = check_mps_clients(self._group_facts)
        if self._config_reason is None:
            # Normal tensors whatever mode it is built in (as UnfusedGemmRs's): built inside torch.inference_mode()
            # (an inference-mode main, a warm-up that builds its layers lazily), the workspace, flags and split-K
            # parts would be inference tensors, which no torch op may write in place outside that mode.
            with torch.inference_mode(False):
                if self.world_size > 1:
                    self._allocate_workspace()
                    self._choose_push_order()
                self._allocate_split_parts()
            self._compile()
        elif not self.force_fused:
            self._fallback_impl()  # built now: a later call may be under CUDA-graph capture

    # --- eligibility ----------------------------------------------------------------------------
    def main_path_support(self) -> Eligibility:
        """Whether this host can build the fused kernel at all: a CUDA device of capability 9.0,
        nvidia-cutlass-dsl importable, torch symmetric memory for W > 1, this process no MPS client (its group's
        fused path would never run: :func:`check_mps_clients`). Shapes and the group: ``can_run``."""
        reason = self._host_ineligibility()
        if reason is None and mps_client(self.device.index or 0):  # a gate run under MPS cannot gate the kernel
            reason = f"this rank is an MPS client: {MPS_REASON}"
        return Eligibility(reason is None, reason or "")

    def _host_ineligibility(self) -> str | None:
        for reason in (
            check_cuda_device(self.device),
            check_cutlass(),
            check_symmetric_memory(self.world_size),
        ):
            if reason is not None:
                return reason
        return check_capability(self.device)

    def _config_ineligibility(self) -> str | None:
        return (
            check_cuda_device(self.device)
            or check_world_size(self.world_size)
            or check_dims(self.N, self.K)
            or self._host_ineligibility()
        )

    @classmethod
    def supports(cls, N: int, K: int) -> Eligibility:
        """The fused kernel's shapes: K a multiple of the K tile (64: no K tail is loaded), N a multiple of 8
        (16-byte TMA rows); any N tail of its 256-, 224- and 128-wide tiles (a partial last N tile, e.g.
        N = 1000 in tests/kernel/test_fused_wrapper.py). Other shapes fall back to the unfused path."""
        reason = (f"N={N}, K={K}: both must be >= 1" if N < 1 or K < 1 else None) or check_dims(N, K)
        return Eligibility(reason is None, reason or "")

    @classmethod
    def supports_group(cls, world_size: int) -> Eligibility:
        """The group sizes the fused kernel runs (:data:`kernel.fused.config.FUSED_WORLD_SIZES`); a group of another
        size falls back to the unfused path."""
        reason = check_world_size(world_size)
        return Eligibility(reason is None, reason or "")

    @classmethod
    def declared_paths(cls, world_size: int) -> tuple:
        """One call per tile config of the class's protocol (``auto``: of the default one) at ``world_size``, as
        :func:`kernel.fused.tiles.pick_config` chooses on a 132-SM GPU (H100 SXM, H200): the largest, the
        224-wide, the split-K ones (one path per number of K parts: the k-tile ranges differ; replayed in a
        graph too: their part ready words are epoch-flagged device state of their own) and the 64-row tiles (the
        clustered ones also with an odd number of M tiles: an idle twin CTA in the last cluster; replayed in a graph
        too: the capture must keep the launch's cluster shape), each
        found in :data:`PATH_SHAPES` x :data:`PATH_MS`. Empty for a group size the kernel does not support."""
        from .config import GemmConfig
        from .tiles import kernel_configs, pick_config, pick_splits

        if check_world_size(world_size) is not None:
            return ()
        protocol = DEFAULT_PROTOCOL if cls.protocol == "auto" else cls.protocol
        configs = tuple(c for c in kernel_configs(protocol, GemmConfig.sm_count)
                        if not (c.split_k and cls.batch_invariant))
        found = {}
        for N, K in PATH_SHAPES:
            for M in PATH_MS:
                i = pick_config(configs, M, N, world_size, protocol, K)
                c = configs[i]
                parts = f" split-K P={pick_splits(c, M, N, K, world_size)}" if c.split_k else ""
                if c.cluster_m > 1 and -(-M // c.tile_m) % c.cluster_m:
                    parts = " idle twin"  # the last cluster's second CTA past M: loads zeros, stores nothing
                found.setdefault((i, parts), KernelPath(f"{protocol} {c.label}{parts}", N, K, M,
                                                        replay=c.split_k or c.cluster_m > 1))
        return tuple(found[key] for key in sorted(found))

    def can_run(self, weight: torch.Tensor) -> Eligibility:
        """Whether the fused kernel supports ``weight`` and the group here; the reason when not."""
        reason = self._config_reason or check_weight(weight, self.N, self.K, self.device)
        return Eligibility(reason is None, reason or "")

    # --- the call ---------------------------------------------------------------------------------
    def _run(self, x, w, out, M):
        reason = self._config_reason or check_weight(w, self.N, self.K, self.device)
        if reason is not None:
            if self.force_fused:
                raise FusedPathUnavailable(f"fused path forced but unavailable: {reason}")
            result = self._fallback_impl()._run(x, w, out, M)
            self.last_path = "unfused"
            return result
        if self._compiled is None:
            raise RuntimeError("FusedGemmRs used after close()")
        if out is None:  # a fresh result: its padding rows hold zeros (CONTRACT.md, "Result")
            out = self.fresh_result(M)
        self._launch(x, w, out, M)
        self.last_path = self.main_path
        return out

    def _launch(self, x, w, out, M) -> None:
        choice = self._choices.get(M)
        if choice is None:  # a pure function of M: worked out once per M (the cost model is ~50 us of Python)
            protocol = self.call_protocol(M)
            choice = self._choices[M] = (protocol, self.tile_config_index(M))
        self.launch_config(*choice, x, w, out, M)

    def launch_config(self, protocol: str, index: int, x, w, out, M: int, splits: int | None = None) -> None:
        """Queue the kernel of ``tile_configs(protocol)[index]`` for a call with M rows (no checks of x, w, out:
        the caller's; ``_launch`` passes the config the call picks, ``bench/bench_gemm.py --all-tiles`` forces
        each). A split-K config takes the K parts :func:`kernel.fused.tiles.pick_splits` gives it at M (or
        ``splits``, the benchmark's sweep); where it gives none, or the parts workspace is too small,
        ``ValueError`` before anything is queued."""
        compiled = self._compiled[protocol][index]
        config = self.tile_configs(protocol)[index]
        split = None
        if config.split_k and splits is not None:
            split = self._split_args(config, M, splits)
        elif config.split_k:
            split = self._split_choices.get((index, M))
            if split is None:
                split = self._split_choices[(index, M)] = self._split_args(config, M)
        stream = self._launch_stream(current_stream_handle(self.device))
        if self.world_size == 1:
            if split is None:
                compiled.launch(x.data_ptr(), w.data_ptr(), out.data_ptr(), M, stream)
            else:  # the split-K GEMM: its partial is the result (out), its flags are the parts' own
                compiled.launch(x.data_ptr(), w.data_ptr(), out.data_ptr(), [out.data_ptr()],
                                [self._split.flags.data_ptr()], M, 1, M, 0, stream, split)
            return
        ws = self._workspace
        partial_ptrs = ws.partial_ptrs
        if self.experiment == "local_push":  # every "peer's" inbox is our own: pushes at local speed
            partial_ptrs = [ws.partial_ptrs[self.rank]] * self.world_size
        compiled.launch(x.data_ptr(), w.data_ptr(), out.data_ptr(), partial_ptrs, ws.flag_ptrs, M, self._slots,
                        ws.layout.s_max, self.rank, stream, split)

    def _split_args(self, config, M: int, splits: int | None = None) -> tuple:
        """``(parts, part ready words, P)`` of a split-K launch with ``config`` at M rows (checked to fit); P from
        the cost model unless ``splits`` forces it (one of :data:`kernel.fused.config.SPLIT_K_CHOICES`)."""
        from .tiles import admissible_splits, pick_splits, tile_count

        if splits is None:
            splits = pick_splits(config, M, self.N, self.K, self.world_size)
        elif splits not in admissible_splits(config, M, self.K):
            raise ValueError(f"split-K with P={splits} cannot run at M={M}, K={self.K}")
        if splits == 0 or self._split is None:
            raise ValueError(f"the split-K config {config.label} cannot run at M={M}, K={self.K}")
        self._split.check_fits(tile_count(config, M, self.N, self.world_size, False) * splits,
                               config.tile_m * config.tile_n * 4)
        return self._split.parts.data_ptr(), self._split.ready.data_ptr(), splits

    def kernel_protocols(self) -> tuple:
        """The protocols of the kernels this instance compiles (:meth:`ProtocolPlan.kernel_protocols`)."""
        return self._plan.kernel_protocols()

    def call_protocol(self, M: int) -> str:
        """The protocol of the kernel a call with M rows runs: a pure function of M and of the plan fixed at
        construction (:class:`kernel.fused.protocol_plan.ProtocolPlan`), so every rank of a group and every
        replay of a captured graph runs the same kernel."""
        return self._plan.for_m(M)

    def tile_config_index(self, M: int) -> int:
        """Index into ``tile_configs(call_protocol(M))`` of the config a call with M rows uses: a pure function
        of M (and construction-time constants), so a graph replay takes the same path and every rank of a
        group picks the same tiles."""
        from .tiles import pick_config

        protocol = self.call_protocol(M)
        return pick_config(self.tile_configs(protocol), M, self.N, self.world_size, protocol, self.K)

    def call_path(self, M: int) -> tuple:
        """What a call with M rows runs: ``(protocol, tile config index, K parts)`` (K parts 1 but for split-K)."""
        from .tiles import pick_splits

        protocol = self.call_protocol(M)
        index = self.tile_config_index(M)
        config = self.tile_configs(protocol)[index]
        return protocol, index, pick_splits(config, M, self.N, self.K, self.world_size)

    def path_switches(self, max_M: int) -> tuple[int, ...]:
        """The M in 2..max_M whose call runs another kernel path (:meth:`call_path`) than M - 1's: where the
        protocol, the tile config or the K parts change (a graph captured on each side replays different kernels
        on one workspace). The cost model sees M only through tile counts (``ceil`` of M, or of ``ceil(M / W)``,
        over a multiple of 64 rows) and the split-K limit (a multiple of 64 too), the protocol plan through its
        table's Ms: the path is constant between those points, so only they are evaluated."""
        from .tiles import row_segments

        points = [M for M, _ in row_segments(max_M, [m for m, _ in self._plan.by_m])][1:]
        switches, before = [], self.call_path(1)
        for M in points:
            path = self.call_path(M)
            if path != before:
                switches.append(M)
            before = path
        return tuple(switches)

    def path_table(self) -> tuple[tuple[int, str], ...] | None:
        """The kernel a call of M rows runs, by M (:meth:`kernel.interface.GemmRsImplementation.path_table`):
        ``"<protocol> <tile config>"`` and `` P=<K parts>`` where split, from M = 1 and at every
        :meth:`path_switches` point. None where the fused path cannot run (every call takes the fallback)."""
        if self._config_reason is not None:
            return None
        if self._path_table is None:
            self._path_table = tuple((M, self.path_name(M)) for M in (1, *self.path_switches(self.max_M)))
        return self._path_table

    def path_name(self, M: int) -> str:
        """:meth:`call_path` of M rows by name: ``"pull 64x112c2"``, ``"pull 128x256 P=3"``."""
        protocol, index, parts = self.call_path(M)
        return f"{protocol} {self.tile_configs(protocol)[index].label}" + (f" P={parts}" if parts > 1 else "")

    def tile_configs(self, protocol: str | None = None) -> tuple:
        """The tile configs this instance compiles for ``protocol`` (default: its first kernel protocol),
        largest first; ``config=`` / ``small_m_config=`` replace the first and the last; the clustered ones left
        out where the GPU cannot run a whole persistent grid of such clusters at once (:func:`clusters_co_resident`).
        Fixed at the first use: a call only indexes it."""
        protocol = protocol or self.kernel_protocols()[0]
        if protocol not in self._tile_configs:
            from .tiles import kernel_configs

            sm_count, cluster_sizes = self._device_facts()
            configs = [c for c in kernel_configs(protocol, sm_count, 4 if self.experiment == "ring4" else None)
                       if not (c.split_k and self.batch_invariant)]
            # a clustered grid that would not all run at once on every rank of the group: none
            configs = [c for c in configs if c.cluster_m == 1 or c.cluster_m in cluster_sizes]
            if self._config is not None:
                configs[0] = self._config
            if self._small_m_config is not None:
                configs[-1] = self._small_m_config
            self._tile_configs[protocol] = tuple(configs)
        return self._tile_configs[protocol]

    def _device_facts(self) -> tuple[int, frozenset]:
        """``(SM count, cluster sizes)`` this instance's tile configs are built for: agreed by the group at
        construction (:meth:`_agree_device_facts`), else this rank's own (an instance without the fused path;
        W = 1)."""
        if self._agreed_facts is None:
            facts = device_facts(self.device)
            self._agreed_facts = agreed_device_facts([facts]) if facts else (GemmConfig.sm_count,
                                                                             frozenset(CLUSTER_SIZES))
        return self._agreed_facts

    def _agree_device_facts(self) -> None:
        """Every rank's :func:`device_facts`, gathered on the group (collective, like the construction), and
        the common ``(SM count, cluster sizes)`` kept (:func:`agreed_device_facts`); a rank whose own facts would
        have chosen other tile configs warns, naming the group's."""
        import torch.distributed as dist

        mine = device_facts(self.device)
        per_rank = [None] * self.world_size
        dist.all_gather_object(per_rank, mine, group=self.group)
        self._group_facts = per_rank
        self._agreed_facts = agreed_device_facts(per_rank)
        if agreed_device_facts([mine]) != self._agreed_facts:
            warnings.warn(f"rank {self.rank}: the group's GPUs differ in what the tile configs read (per group rank: "
                          f"{per_rank}); every rank builds for {self._agreed_facts[0]} SMs and cluster sizes "
                          f"{sorted(self._agreed_facts[1])}", RuntimeWarning, stacklevel=3)

    def _compile(self) -> dict:
        """Per kernel protocol, one compiled kernel per tile config. Each protocol's configs are compiled
        starting at index ``rank % count``: with the host-wide kernel cache the ranks of a group compile
        different configs at once and load the others (one compile per key and host), instead of queueing
        on the same key's lock."""
        if self._compiled is None:
            from .compile import get_compiled, get_compiled_rs, launch_stream

            # a launch's stream argument (kept here: an import statement per call was ~1.3 us of its host time)
            self._launch_stream = launch_stream

            compiled = {}
            for protocol in self.kernel_protocols():
                configs = self.tile_configs(protocol)
                if self.world_size == 1:
                    # the plain GEMM, or the split-K GEMM (a pull kernel of one rank, its split-K faults only)
                    split_faults = frozenset(f for f in self._faults
                                             if f in SPLIT_K_FAULTS and f not in SPLIT_K_CROSS_RANK_FAULTS)
                    build = lambda c, fs=split_faults: (  # noqa: E731
                        get_compiled_rs(self.N, self.K, c, 1, spin_timeout_s=SPIN_TIMEOUT_S, faults=fs)
                        if c.split_k else get_compiled(self.N, self.K, c))
                else:
                    push = protocol == "push"
                    build = lambda c, p=protocol, push=push: get_compiled_rs(  # noqa: E731
                        self.N, self.K, c, self.world_size, spin_timeout_s=SPIN_TIMEOUT_S, faults=self._faults,
                        protocol=p, order=self.push_order if push else None,
                        experiment=self.experiment if self.experiment == "no_mma" else "")
                n = len(configs)
                start = self.rank % n
                # a split-K config no call of this instance can pick (no parts workspace) is not compiled
                built = {i % n: build(configs[i % n]) if self._split is not None or not configs[i % n].split_k
                         else None for i in range(start, start + n)}
                compiled[protocol] = tuple(built[i] for i in range(n))
            self._compiled = compiled
        return self._compiled

    def _choose_push_order(self) -> None:
        """Push protocol: the tile order, the same on every rank (each reads every rank's device word):
        ``push_first`` when two ranks of the group share a GPU (they time-slice it: an interleaved order
        would make every rank wait for its peers' time slices once per wave), else ``interleaved`` (the
        transfer overlapped with the whole GEMM). ``push_order=`` forces one."""
        if "push" not in self.kernel_protocols():
            return
        if self._push_order_request is not None:
            self.push_order = self._push_order_request
        else:
            self.push_order = "push_first" if self._workspace.ranks_share_a_gpu() else "interleaved"

    def _allocate_split_parts(self) -> None:
        """The split-K parts workspace (local memory), if a split-K config of the pull protocol can run at some
        M <= max_M for this (N, K) (:func:`kernel.fused.tiles.split_workspace`)."""
        if "pull" not in self.kernel_protocols():
            return
        self._split = self._new_split_parts(every_p=False)
        self._waive_batch_invariance_where_split()

    def _new_split_parts(self, every_p: bool):
        """A parts workspace sized by :func:`kernel.fused.tiles.split_workspace` (``every_p``: for every K-part
        count, not only the cost model's), or None where no split-K call can run."""
        from .tiles import split_workspace
        from .workspace import SplitParts

        part_bytes, units = split_workspace(self.tile_configs("pull"), self.max_M, self.N, self.K, self.world_size,
                                            "pull", every_p=every_p)
        return SplitParts(part_bytes, units, self.device, own_flags=self.world_size == 1) if units else None

    def reserve_every_split(self) -> None:
        """Size the split-K parts workspace for every K-part count of every split-K config at every M <= max_M,
        not only the ones the cost model picks: ``bench/bench_gemm.py --all-tiles`` forces each (``launch_config``'s
        ``splits``). Between calls only (the launches' memoised parts pointers are dropped)."""
        if self._split is None:
            return
        old, self._split = self._split, self._new_split_parts(every_p=True)
        if self.world_size == 1:  # the W == 1 GEMM's epoch goes on from where it was (never back to a used one)
            self._split.flags.copy_(old.flags)
        old.close()
        self._split_choices.clear()

    def _waive_batch_invariance_where_split(self) -> None:
        """Waive ``batch_invariant`` (CONTRACT.md's clause; non-exact inputs only, exact results stay bitwise) for
        an instance whose calls at some M pick a split-K config: there a rank's partial is the fp32 sum of P K
        parts, elsewhere one fp32 chain over K, so a token's bits can depend on M. ``batch_invariant=True``
        instances have no split-K config and keep the clause."""
        from .tiles import split_rows

        if "pull" not in self.kernel_protocols():
            return
        rows = split_rows(self.tile_configs("pull"), self.max_M, self.N, self.K, self.world_size, "pull",
                          plan=self._plan)
        if rows is not None:
            self.waived_clauses = {**self.waived_clauses, "batch_invariant": (
                f"split-K at M = {rows[0]}..{rows[1]} for N={self.N}, K={self.K}: a rank's partial is the fp32 sum "
                f"of K parts there, one fp32 chain over K at other M, so a token's bits depend on M "
                f"(batch_invariant=True keeps the clause without split-K)")}

    def _allocate_workspace(self) -> None:
        from .workspace import SymmetricWorkspace, WorkspaceLayout, tile_slots

        tiles = [(c.tile_m, c.tile_n) for p in self.kernel_protocols() for c in self.tile_configs(p)]
        self._slots = tile_slots(self.max_M, self.N, tiles)
        layout = WorkspaceLayout(self.world_size, self.max_M, self.N, self._slots)
        self._workspace = SymmetricWorkspace(layout, self.group, self.device)
        if self._workspace.rank != self.rank:
            raise RuntimeError(f"symmetric memory rank {self._workspace.rank} != group rank {self.rank}")

    def _fallback_impl(self):
        if self._fallback is None:
            from ..unfused import UnfusedGemmRs

            self._fallback = UnfusedGemmRs(
                self.group, max_M=self.max_M, N=self.N, K=self.K, device=self.device
            )
            self.waived_clauses = dict(self._fallback.waived_clauses)
        return self._fallback

    # --- state the suite watches --------------------------------------------------------------------
    def state_tensors(self):
        """Everything in this rank's workspace that only this rank writes (a rejected call leaves it
        bit-identical): the epoch and finished words, the done word this rank signals into its own area,
        and per protocol -- pull: its partials and the ready words it signals into its own area; push: its
        own inbox slot (nobody writes it: the own partial is summed in registers); both (``auto``): the own
        ready words and the own inbox slot (peers push into the other slots). The other words and slots of
        its area are written by *peers* whenever their calls run (a peer may already be in its next call
        while this rank checks a rejected one), so they are not state this rank's call controls."""
        ws, sp = self._workspace, self._split
        if ws is None and sp is None:
            return self._fallback.state_tensors() if self._fallback is not None else {}
        state = {}
        if ws is not None:
            f, r, slots, s_max = ws.flags, self.rank, self._slots, ws.layout.s_max
            protocols = set(self.kernel_protocols())
            state = {
                "flags: epoch, finished": f[:2],
                "flags: own done": f[DONE_BASE + r : DONE_BASE + r + 1],
            }
            if "pull" in protocols:
                state["flags: own ready"] = f[READY_BASE + r * slots : READY_BASE + (r + 1) * slots]
            if protocols == {"pull"}:
                state["partials"] = ws.partials
            else:
                state["inbox: own slot"] = ws.partials[r * s_max : (r + 1) * s_max]
        if sp is not None:  # split-K: local buffers only this rank's kernel writes
            state["split-K parts"] = sp.parts
            state["split-K part ready words"] = sp.ready
            if sp.flags is not None:
                state["split-K flags (W = 1)"] = sp.flags
        return state

    # --- the call counter (CONTRACT.md, "Counters") ----------------------------------------------------------
    #: the device epoch word: u32, 0 skipped on wrap (:mod:`kernel.fused.rs_protocol`)
    call_counter_bits = 32

    def _epoch_flags(self):
        """The flag words holding this rank's epoch: the symmetric workspace's (W > 1), the W == 1 split-K GEMM's,
        or None (W == 1 without a split-K config: no epoch)."""
        if self._workspace is not None:
            return self._workspace.flags
        if self._split is not None and self._split.flags is not None:
            return self._split.flags
        return None

    def call_counter(self) -> int | None:
        f = self._epoch_flags()
        return None if f is None else int(f[EPOCH_WORD].item()) & 0xFFFFFFFF

    def advance_call_counter(self, calls: int) -> None:
        """Every epoch-valued word of this rank's flag area moves on by ``calls`` epochs of the epoch cycle
        (1 .. 2^32 - 1, 0 skipped): the epoch word and the done words always (they follow every completed call),
        the ready words of peers' and own partials and the split-K part and slice words only where non-zero
        (0 = never stored: a tile no call has touched keeps 0 through any number of calls -- the reason the epoch
        skips 0). Device sync and a group barrier before (no kernel of any rank still reads or signals) and after
        (no rank's next call starts before every rank's words moved on)."""
        calls = int(calls)
        if calls < 0:
            raise ValueError(f"calls must be >= 0, got {calls}")
        flags = self._epoch_flags()
        if flags is None or calls == 0:
            return
        self._group_quiet()
        follows_calls = [EPOCH_WORD] + list(range(DONE_BASE, DONE_BASE + self.world_size))
        idx = torch.tensor(follows_calls, dtype=torch.int64, device=flags.device)
        flags[idx] = _advanced_epochs(flags[idx], calls, keep_zero=False)
        if self._workspace is not None:
            ready = flags[READY_BASE:]
            ready.copy_(_advanced_epochs(ready, calls, keep_zero=True))
        if self._split is not None:
            self._split.ready.copy_(_advanced_epochs(self._split.ready, calls, keep_zero=True))
        self._group_quiet()

    def _group_quiet(self) -> None:
        """This rank's device work done, then a barrier of the group: no kernel of any rank still runs (collective)."""
        import torch.distributed as dist

        torch.cuda.synchronize(self.device)
        if dist.is_available() and dist.is_initialized():
            dist.barrier(group=self.group)

    def guard_regions(self):
        ws, sp = self._workspace, self._split
        if ws is None and sp is None:
            return self._fallback.guard_regions() if self._fallback is not None else {}
        regions = {}
        if ws is not None:
            regions["after partials"] = (ws.guard_a, ws.guard_a_expected)
            regions["after flags"] = (ws.guard_b, ws.guard_b_expected)
        if sp is not None:
            regions["after split-K parts"] = (sp.guard, sp.guard_expected)
        return regions

    def describe(self) -> dict:
        d = super().describe()
        d.update(fused_ok=self._config_reason is None, reason=self._config_reason or "", protocol=self.protocol)
        if self.protocol == "auto":
            d.update(kernel_protocols=list(self.kernel_protocols()), protocol_by_m=self._plan.table())
        if self.push_order is not None:
            d.update(push_order=self.push_order)
        if self.experiment:
            d.update(experiment=self.experiment)
        if self._faults:
            d.update(faults=sorted(self._faults))
        if self._split is not None:
            d.update(split_k_parts_bytes=self._split.capacity_bytes)
        if self._compiled is not None:
            kernels = [c for p in self._compiled for c in self._compiled[p] if c is not None]
            d.update(compile_seconds=[c.seconds for c in kernels], kernel_origin=[c.origin for c in kernels])
        return d

    def close(self) -> None:
        """Free the workspace once no peer can still read it: device sync, then a group barrier.

        Collective when a workspace exists (every rank closes its instances in the same order)."""
        if self._fallback is not None:
            self._fallback.close()
        if self._workspace is not None:
            self._group_quiet()
            self._workspace.close()
            self._workspace = None
        if self._split is not None:
            torch.cuda.synchronize(self.device)  # no queued kernel still writes the parts
            self._split.close()
            self._split = None
        self._choices.clear()
        self._split_choices.clear()
        self._compiled = None


def _advanced_epochs(words: torch.Tensor, calls: int, *, keep_zero: bool) -> torch.Tensor:
    """u32 epochs (in int32 words) ``calls`` steps on along the cycle 1 .. 2^32 - 1 (0 is skipped); with
    ``keep_zero`` a 0 word (never stored) stays 0, without it 0 counts as "no call yet" (the epoch after 0 is 1)."""
    cycle = (1 << 32) - 1
    v = words.to(torch.int64) & 0xFFFFFFFF
    moved = torch.remainder(v - 1 + calls, cycle) + 1
    if keep_zero:
        moved = torch.where(v == 0, v, moved)
    return torch.where(moved >= (1 << 31), moved - (1 << 32), moved).to(torch.int32)


class FusedGemmRsPush(FusedGemmRs):
    """The fused implementation with the push protocol (communication overlapped with the GEMM;
    :mod:`kernel.fused.gemm_rs_push`): ``--impl kernel.fused:FusedGemmRsPush``. The fused path is forced
    (``force_fused=True`` by default): a verdict on it must be a verdict on its own kernel, never on the
    unfused fallback."""

    name = "fused-push"
    protocol = "push"

    def __init__(self, group=None, *, force_fused: bool = True, **kwargs):
        super().__init__(group, force_fused=force_fused, **kwargs)


class FusedGemmRsBatchInvariant(FusedGemmRs):
    """The fused implementation without split-K (``batch_invariant=True``): a token's bits never depend on M, the
    contract's ``batch_invariant`` clause is kept for every shape (checked by the gate on every input kind).
    ``--impl kernel.fused:FusedGemmRsBatchInvariant``; the fused path is forced."""

    name = "fused-batch-invariant"
    batch_invariant = True

    def __init__(self, group=None, *, force_fused: bool = True, **kwargs):
        super().__init__(group, force_fused=force_fused, **kwargs)


class FusedGemmRsAuto(FusedGemmRs):
    """The fused implementation choosing the protocol per call (``protocol="auto"``): at each M the one the
    measured table of :mod:`kernel.fused.crossover` says is faster for this (N, K, W), both kernels over one
    workspace; the default protocol where nothing was measured. ``--impl kernel.fused:FusedGemmRsAuto``;
    the fused path is forced, as for :class:`FusedGemmRsPush`."""

    name = "fused-auto"
    protocol = "auto"

    def __init__(self, group=None, *, force_fused: bool = True, **kwargs):
        super().__init__(group, force_fused=force_fused, **kwargs)


__all__ = [
    "DEFAULT_PROTOCOL",
    "FUSED_WORLD_SIZES",
    "KERNEL_FAULTS",
    "K_TILE",
    "N_ALIGN",
    "PUSH_EXPERIMENTS",
    "PUSH_ORDERS",
    "SPIN_TIMEOUT_S",
    "SUPPORTED_CAPABILITY",
    "FusedGemmRs",
    "FusedGemmRsAuto",
    "FusedGemmRsBatchInvariant",
    "FusedGemmRsPush",
    "cutlass_available",
    "normalize_faults",
]
