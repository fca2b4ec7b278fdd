"""Host wrapper of the fused kernel: ``FusedGemmRs``, the implementation named ``"fused"``.

W == 1: the fused operation *is* the GEMM (the shard is all M rows) and runs the CuTe DSL Hopper GEMM
(:mod:`kernel.fused.gemm`). W in (2, 4, 8): the fused GEMM + reduce-scatter kernel
(:mod:`kernel.fused.gemm_rs`, whose docstring is the protocol's design record) over a symmetric
workspace (:mod:`kernel.fused.workspace`) allocated *collectively at construction* -- every rank
constructs its instances in the same order -- with ``torch.distributed._symmetric_memory`` (works
with a gloo group, ranks sharing one GPU with ``TORCH_SYMM_MEM_ALLOW_OVERLAPPING_DEVICES=1``, and with
NCCL, one GPU per rank). Multicast is never used. Whatever ``can_run`` rejects goes to
:class:`kernel.unfused.UnfusedGemmRs` built with the same group, max_M, N, K and device, and
``last_path`` says ``"unfused"``; with ``force_fused=True`` such a call raises
:class:`kernel.errors.FusedPathUnavailable` instead, after the bad-call checks and before any work.

Per call: the base class checks (dtype, device, shapes, contiguity, 16-byte alignment, 1 <= M <= max_M)
run first, metadata only, ``if ...: raise``; then one kernel launch on the current torch stream.
No host sync, no allocation when ``out=`` is given, no host state that a CUDA-graph replay would not
reproduce: the TMA descriptors are built at launch from (pointer, M) and live in the kernel
parameters, and the cross-rank epoch lives on the device (the kernel advances it). Kernels are
compiled once per (N, K, config[, W, rank]) in the constructor and serve every M. Two tile configs:
128x256, and 128x128 for small M (:meth:`FusedGemmRs.uses_small_tiles`, a function of M only, so every
rank picks the same one).

``state_tensors()`` -> the partials and the flag words only this rank writes (a rejected call leaves
them bit-identical; words peers write into this rank's area change whenever peers run);
``guard_regions()`` -> red zones right after the partials and right after the flags, filled with a
fixed pattern at construction. ``close()`` waits for the device and the group (so no peer still reads
this rank's partials) and frees the workspace; it is collective like construction.

Requirements of the fused path: CUDA device of capability (9, 0) (Hopper, sm_90a); bf16, contiguous,
16-byte aligned operands; K % 64 == 0; N % 8 == 0; W in (1, 2, 4, 8); nvidia-cutlass-dsl importable;
for W > 1 torch symmetric memory.
"""

from __future__ import annotations

import importlib.util

import torch

from ..checks import ALIGN_BYTES
from ..errors import FusedPathUnavailable
from ..interface import Eligibility, GemmRsImplementation

K_TILE = 64
N_ALIGN = 8
SUPPORTED_CAPABILITY = (9, 0)
FUSED_WORLD_SIZES = (1, 2, 4, 8)
SPIN_TIMEOUT_S = 60.0  # a cross-rank wait that long traps (a CUDA error) instead of hanging

#: Fault-injected builds of the W > 1 kernel (compile-time switches, all OFF by default; the default
#: build's PTX is byte-identical to the build without them). Each plants one real bug class, for the
#: GPU mutation meta-test (``mutants/kernel_faults.py``); see :class:`kernel.fused.gemm_rs.HopperGemmRsBF16`.
KERNEL_FAULTS = (
    "dropped_peer",  # the reduction loads W-1 partials: the last rank's is never added
    "relaxed_signal",  # ready flag raised st.relaxed.sys right after the TMA store is issued (no wait, no fence)
    "stale_epoch",  # the epoch word is never advanced: every call is epoch 1, last call's flags satisfy waits
    "write_past_capacity",  # a row stored at partial row W*S: past the partials (guard A) when S == S_max
    "padding_written",  # out's padding rows (r*S + i >= M) are written (with zeros)
    "wrong_owner",  # rank r reduces the shard of (r+1) % W (waits on that owner's ready flags)
)


def normalize_faults(faults) -> frozenset:
    """``faults`` (names from :data:`KERNEL_FAULTS`; a str is one name) as a frozenset; unknown -> ValueError."""
    if faults is None:
        return frozenset()
    if isinstance(faults, str):
        faults = (faults,)
    names = frozenset(faults)
    unknown = sorted(str(f) for f in names if f not in KERNEL_FAULTS)
    if unknown:
        raise ValueError(f"unknown kernel fault(s) {unknown}: known are {list(KERNEL_FAULTS)}")
    return names


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


class FusedGemmRs(GemmRsImplementation):
    """The fused CuTe DSL implementation: GEMM at W == 1, GEMM + reduce-scatter at W in (2, 4, 8)."""

    name = "fused"
    main_path = "fused"
    fallback_path = "unfused"  # what can_run rejects runs UnfusedGemmRs (none with force_fused=True)
    #: Fault-injected build (names from :data:`KERNEL_FAULTS`); empty: the real kernel. Subclasses in
    #: ``mutants/kernel_faults.py`` set it; the ``faults=`` argument overrides it.
    faults: tuple = ()

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
    ):
        # Checked first: a misspelt fault must not silently build the real kernel.
        self._faults = normalize_faults(type(self).faults if faults is None else faults)
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self.force_fused = bool(force_fused)
        if self.force_fused:
            self.fallback_path = None
        self._config = config
        self._small_m_config = small_m_config
        self._compiled = None  # (large, small): one compiled kernel per tile config, every M
        self._workspace = None
        self._slots = 0
        self._fallback = None
        self._config_reason = self._config_ineligibility()
        if self._config_reason is None:
            self._compile()
            if self.world_size > 1:
                self._allocate_workspace()
        elif not self.force_fused:
            self._fallback_impl()  # built now: a later call may be under CUDA-graph capture

    # --- eligibility ----------------------------------------------------------------------------
    def main_path_support(self) -> Eligibility:
        """Whether this host can build the fused kernel at all: a CUDA device of capability 9.0,
        nvidia-cutlass-dsl importable, torch symmetric memory for W > 1. Shapes and the group: ``can_run``."""
        reason = self._host_ineligibility()
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
            out = torch.zeros(self.shard_rows(M), self.N, dtype=torch.bfloat16, device=self.device)
        self._launch(x, w, out, M)
        self.last_path = "fused"
        return out

    def _launch(self, x, w, out, M) -> None:
        import cuda.bindings.driver as cuda

        large, small = self._compiled
        compiled = small if self.uses_small_tiles(M) else large
        stream = cuda.CUstream(torch.cuda.current_stream(self.device).cuda_stream)
        if self.world_size == 1:
            compiled.launch(x.data_ptr(), w.data_ptr(), out.data_ptr(), M, stream)
            return
        ws = self._workspace
        compiled.launch(
            x.data_ptr(), w.data_ptr(), out.data_ptr(), ws.partial_ptrs, ws.flag_ptrs, M, self._slots, stream
        )

    def uses_small_tiles(self, M: int) -> bool:
        """Small-M heuristic: 128x128 tiles when 128x256 tiles would fill less than half the SMs.

        A pure function of M (and construction-time constants), so a graph replay takes the same path
        and every rank of a group picks the same tiles."""
        large = self._compile()[0].key.config
        tiles = -(-M // large.tile_m) * -(-self.N // large.tile_n)
        return 2 * tiles <= large.sm_count

    def _configs(self):
        from .gemm import GemmConfig

        sm_count = torch.cuda.get_device_properties(self.device).multi_processor_count
        large = self._config or GemmConfig(sm_count=sm_count)
        small = self._small_m_config or GemmConfig(tile_n=128, sm_count=sm_count)
        return large, small

    def _compile(self):
        if self._compiled is None:
            from .compile import get_compiled, get_compiled_rs

            large, small = self._configs()
            if self.world_size == 1:
                self._compiled = (get_compiled(self.N, self.K, large), get_compiled(self.N, self.K, small))
            else:
                W, r = self.world_size, self.rank
                self._compiled = tuple(
                    get_compiled_rs(self.N, self.K, c, W, r, spin_timeout_s=SPIN_TIMEOUT_S, faults=self._faults)
                    for c in (large, small)
                )
        return self._compiled

    def _allocate_workspace(self) -> None:
        from .workspace import SymmetricWorkspace, WorkspaceLayout, tile_slots

        tiles = [(c.tile_m, c.tile_n) for c in self._configs()]
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
        """Everything in this rank's workspace that only this rank writes: the partials, the epoch and
        finished words, and the done/ready words this rank signals into its own area. The other
        ready/done words of its area are written by *peers* whenever their calls run (a peer may
        already be in its next call while this rank checks a rejected one), so they are not state
        this rank's call controls."""
        ws = self._workspace
        if ws is not None:
            from .workspace import DONE_BASE, READY_BASE

            f, r, slots = ws.flags, self.rank, self._slots
            return {
                "partials": ws.partials,
                "flags: epoch, finished": f[:2],
                "flags: own done": f[DONE_BASE + r : DONE_BASE + r + 1],
                "flags: own ready": f[READY_BASE + r * slots : READY_BASE + (r + 1) * slots],
            }
        if self._fallback is not None:
            return self._fallback.state_tensors()
        return {}

    def guard_regions(self):
        ws = self._workspace
        if ws is not None:
            return {
                "after partials": (ws.guard_a, ws.guard_a_expected),
                "after flags": (ws.guard_b, ws.guard_b_expected),
            }
        if self._fallback is not None:
            return self._fallback.guard_regions()
        return {}

    def describe(self) -> dict:
        d = super().describe()
        d.update(fused_ok=self._config_reason is None, reason=self._config_reason or "")
        if self._faults:
            d.update(faults=sorted(self._faults))
        if self._compiled is not None:
            d.update(compile_seconds=[c.seconds for c in self._compiled])
        return d

    def close(self) -> None:
        """Free the workspace once no peer can still read it: device sync, then a group barrier.

        Collective when a workspace exists (every rank closes its instances in the same order)."""
        if self._fallback is not None:
            self._fallback.close()
        if self._workspace is not None:
            import torch.distributed as dist

            torch.cuda.synchronize(self.device)
            if dist.is_available() and dist.is_initialized():
                dist.barrier(group=self.group)
            self._workspace.close()
            self._workspace = None
        self._compiled = None
