"""Host wrapper of the fused kernel: ``FusedGemmRs``, the implementation named ``"fused"``.

Part 1 (this file): at W == 1 the fused operation *is* the GEMM -- the shard is all M rows -- and runs
the CuTe DSL Hopper kernel (:mod:`kernel.fused.gemm`). For W > 1 (the reduce-scatter epilogue is
part 2) and whatever else ``can_run`` rejects, the call goes to :class:`kernel.unfused.UnfusedGemmRs`
built with the same group, max_M, N, K and device, and ``last_path`` says ``"unfused"``. With
``force_fused=True`` such a call raises :class:`kernel.errors.FusedPathUnavailable` instead, after the
bad-call checks and before any work is queued.

Per call: the base class checks (dtype, device, shapes, contiguity, 16-byte alignment, 1 <= M <= max_M)
run first, metadata only, ``if ...: raise``; then one kernel launch on the current torch stream.
No host sync, no allocation when ``out=`` is given, no host state that a CUDA-graph replay would not
reproduce (the TMA descriptors are built at launch from (pointer, M) and live in the kernel
parameters, which a graph captures by value). The kernel is compiled once per (N, K, config) --
eagerly in the constructor when the device can run it -- and serves every M. Two configs are built:
128x256 tiles, and 128x128 tiles for small M (when 128x256 tiles would fill less than half the SMs,
:meth:`FusedGemmRs.uses_small_tiles`); the choice depends on M only.

Requirements of the fused path: CUDA device of capability (9, 0) (Hopper, sm_90a); bf16, contiguous,
16-byte aligned operands; K % 64 == 0; N % 8 == 0; W == 1; nvidia-cutlass-dsl importable.
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
FUSED_WORLD_SIZES = (1,)


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
        return f"W={world_size}: the fused reduce-scatter epilogue is not implemented yet (part 2); W=1 only"
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
    """The fused CuTe DSL implementation (part 1: the W == 1 GEMM; W > 1 falls back to unfused)."""

    name = "fused"

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
    ):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self.force_fused = bool(force_fused)
        self._config = config
        self._small_m_config = small_m_config
        self._compiled = None  # (large, small): one compiled kernel per tile config, every M
        self._fallback = None
        self._config_reason = self._config_ineligibility()
        if self._config_reason is None:
            self._compile()
        elif not self.force_fused:
            self._fallback_impl()  # built now: a later call may be under CUDA-graph capture

    # --- eligibility ----------------------------------------------------------------------------
    def _config_ineligibility(self) -> str | None:
        for reason in (
            check_cuda_device(self.device),
            check_world_size(self.world_size),
            check_dims(self.N, self.K),
            check_cutlass(),
        ):
            if reason is not None:
                return reason
        return check_capability(self.device)

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
        if out is None:
            out = torch.empty(M, self.N, dtype=torch.bfloat16, device=self.device)
        self._launch(x, w, out, M)
        self.last_path = "fused"
        return out

    def _launch(self, x, w, out, M) -> None:
        import cuda.bindings.driver as cuda

        large, small = self._compile()
        compiled = small if self.uses_small_tiles(M) else large
        stream = cuda.CUstream(torch.cuda.current_stream(self.device).cuda_stream)
        compiled.launch(x.data_ptr(), w.data_ptr(), out.data_ptr(), M, stream)

    def uses_small_tiles(self, M: int) -> bool:
        """Small-M heuristic: 128x128 tiles when 128x256 tiles would fill less than half the SMs.

        A pure function of M (and construction-time constants), so a graph replay takes the same path."""
        large = self._compile()[0].key.config
        tiles = -(-M // large.tile_m) * -(-self.N // large.tile_n)
        return 2 * tiles <= large.sm_count

    def _compile(self):
        if self._compiled is None:
            from .compile import get_compiled
            from .gemm import GemmConfig

            sm_count = torch.cuda.get_device_properties(self.device).multi_processor_count
            large = self._config or GemmConfig(sm_count=sm_count)
            small = self._small_m_config or GemmConfig(tile_n=128, sm_count=sm_count)
            self._compiled = (get_compiled(self.N, self.K, large), get_compiled(self.N, self.K, small))
        return self._compiled

    def _fallback_impl(self):
        if self._fallback is None:
            from ..unfused import UnfusedGemmRs

            self._fallback = UnfusedGemmRs(
                self.group, max_M=self.max_M, N=self.N, K=self.K, device=self.device
            )
            self.waived_clauses = dict(self._fallback.waived_clauses)
        return self._fallback

    def describe(self) -> dict:
        d = super().describe()
        d.update(fused_ok=self._config_reason is None, reason=self._config_reason or "")
        if self._compiled is not None:
            d.update(compile_seconds=[c.seconds for c in self._compiled])
        return d

    def close(self) -> None:
        if self._fallback is not None:
            self._fallback.close()
        self._compiled = None
