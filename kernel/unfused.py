"""Unfused GEMM + reduce-scatter: the first real implementation, and the fused kernel's fallback.

Per call: ``partials[:M] = x @ w.T`` (torch GEMM, fp32 accumulate, bf16 out) into a workspace built for
max_M, rows ``M .. W*S`` zeroed, then one reduce-scatter of the ``W*S`` rows (NCCL or gloo) into a
shard buffer, then only this rank's valid rows copied into ``out``. Every check runs before the GEMM
(``if ...: raise``, so ``python -O`` keeps them); no allocation per call, so on NCCL the call is
CUDA-graph capturable.
"""

from __future__ import annotations

import contextlib

import torch

from . import collectives
from .interface import Eligibility, GemmRsImplementation

GUARD_ROWS = 2


def guard_words(n: int, device) -> torch.Tensor:
    """A fixed, irregular int16 pattern for red zones (not a plausible bf16 result row)."""
    idx = torch.arange(n, dtype=torch.int32, device="cpu")
    return ((idx * 40503 + 12345) % 65536 - 32768).to(torch.int16).to(device)


#: Above this K, torch's CPU bf16 ``mm`` computes a single row (M = 1) with another kernel than a batch
#: (last-bit differences; measured, docs/NUMERICS.md section 6).
CPU_MM_BATCH_INVARIANT_MAX_K = 1024


def batch_variance(device: torch.device, K: int, world_size: int = 1) -> str | None:
    """Why torch's GEMM and reduce-scatter do not give a token row the same bits at every M and row (the
    ``batch_invariant`` waiver), or None where they do (measured: CPU, K <= 1024, W <= 2). Only where measured:
    a mutant inherits the waiver, so an unconditional one would hide a position-dependent bug."""
    if world_size >= 3:
        return (f"W={world_size}: the reduce-scatter (gloo, NCCL ring) adds the W partials of an element in an "
                "order that depends on the buffer's size, so on M (measured: W = 8, M = 9 vs 8, same owner); "
                "two partials add in either order to the same bits")
    if device.type == "cuda":
        return "cuBLAS picks its kernel (split-K among them) by M: batch invariance is neither measured nor promised"
    if K > CPU_MM_BATCH_INVARIANT_MAX_K:
        return (f"K={K} > {CPU_MM_BATCH_INVARIANT_MAX_K}: torch's CPU bf16 mm computes M = 1 with another kernel "
                "than a batch (last-bit differences, docs/NUMERICS.md)")
    return None


@contextlib.contextmanager
def fp32_accumulation():
    """cuBLAS kept to the contract's fp32 accumulation for the GEMMs inside: torch lets cuBLAS reduce
    split-K partial sums of a bf16 GEMM in bf16 by default (``allow_bf16_reduced_precision_reduction``),
    an extra rounding per split that the contract does not allow (seen on an H200 at M = 2419, N = 744,
    K = 409: 1.1-1.3x the tolerance budget). The process-wide setting is restored on the way out; it is read
    by cuBLAS when a GEMM is issued (also inside a graph capture), so nothing queued later is affected."""
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_bf16_reduced_precision_reduction
    split_k = getattr(matmul, "allow_bf16_reduced_precision_reduction_split_k", True)
    matmul.allow_bf16_reduced_precision_reduction = False
    try:
        yield
    finally:
        matmul.allow_bf16_reduced_precision_reduction = before if split_k else (before, split_k)


class UnfusedGemmRs(GemmRsImplementation):
    name = "unfused"
    main_path = "unfused"  # also what every subclass runs (mutants, fixtures) unless it says otherwise

    def __init__(self, group=None, *, max_M: int, N: int, K: int, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        # Normal tensors whatever mode it is built in: an engine may build the layer (and the fused kernel then this,
        # its fallback) inside torch.inference_mode() -- its buffers were then inference tensors, and the next call
        # outside that mode raised at their first in-place write (CONTRACT "Autograd modes"; shown on the CPU in the
        # 30th session).
        with torch.inference_mode(False):
            self._allocate()
        waived = {}
        if not collectives.is_capturable(group, self.device):
            waived["graph_capture"] = (f"unfused over {collectives.backend_of(group)} on {self.device.type} "
                                       "stages through the host; not capturable")
        reason = batch_variance(self.device, self.K, self.world_size)
        if reason:
            waived["batch_invariant"] = reason
        if waived:
            self.waived_clauses = {**type(self).waived_clauses, **waived}

    @classmethod
    def supports_group(cls, world_size: int) -> Eligibility:
        """Every group size the class accepts (``supported_world_sizes``): its main path is its only path."""
        ok = world_size in cls.supported_world_sizes
        return Eligibility(ok, "" if ok else f"W={world_size} is not among the supported group sizes")

    def _allocate(self) -> None:
        """The workspace, its red zone, the shard and (a device tensor's reduce-scatter over gloo) the host
        staging."""
        s_max = self.shard_rows(self.max_M)
        rows = self.world_size * s_max
        # Workspace for max_M, followed by GUARD_ROWS red-zone rows (a write past capacity shows there).
        self._ws = torch.empty(rows + GUARD_ROWS, self.N, dtype=torch.bfloat16, device=self.device)
        self._partials = self._ws[:rows]
        self._guard = self._ws[rows:]
        self._guard_expected = guard_words(self._guard.numel(), self.device)
        self._guard.view(-1).view(torch.int16).copy_(self._guard_expected)
        self._shard = torch.empty(s_max, self.N, dtype=torch.bfloat16, device=self.device)
        self._staging = None
        if collectives.needs_host_staging(self.group, self.device):
            # On the host by name: an engine builds its layers under ``torch.device(cuda)`` (CONTRACT "Caller's
            # tensor defaults"), and a default device would put them on the GPU ("Only dense CPU tensors can be
            # pinned": the 30th session's unfused gate on one H100, every engine-defaults case).
            pin = torch.cuda.is_available()
            self._staging = (
                torch.empty(rows, self.N, dtype=torch.bfloat16, device="cpu", pin_memory=pin),
                torch.empty(s_max, self.N, dtype=torch.bfloat16, device="cpu", pin_memory=pin),
            )

    def state_tensors(self):
        return {"workspace": self._ws, "shard": self._shard}

    def guard_regions(self):
        return {"after workspace": (self._guard.reshape(-1).view(torch.int16), self._guard_expected)}

    def _gemm(self, x, w, partials: torch.Tensor) -> None:
        """partials (the workspace's first M rows) = x @ w.T, bf16 (torch GEMM, fp32 accumulate)."""
        if x.device.type == "cpu" and not bool(torch.isfinite(x).all()):
            # torch 2.13's CPU bf16 mm turns finite rows next to a NaN/Inf row into NaN (odd K, e.g. K = 5, 9,
            # 33; 11th session): through fp32 there (one rounding to bf16, as an fp32-accumulating GEMM)
            partials.copy_(torch.mm(x.float(), w.float().t()))
            return
        with fp32_accumulation():
            torch.mm(x, w.t(), out=partials)

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        partials = self._partials[: self.world_size * S]
        self._gemm(x, w, partials[:M])
        partials[M:].zero_()
        shard = self._shard[:S]
        collectives.reduce_scatter(shard, partials, self.group, self._staging)
        n_valid = self.valid_rows(M)
        if out is None:
            out = self.fresh_result(M)
        out[:n_valid].copy_(shard[:n_valid])
        self.last_path = "unfused"
        return out
