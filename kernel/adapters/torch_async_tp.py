"""PyTorch's async-TP ``torch.ops.symm_mem.fused_matmul_reduce_scatter`` behind the gate.

The op computes ``reduce_scatter(A @ B, "sum", scatter_dim=0)`` over a group with symmetric memory,
micro-pipelining the GEMM chunks with the exchange. Its contract differs from ours where stated in
``waived_clauses``; nothing else is adapted: the adapter passes x and w.T straight to the op and returns
what it returns, so every other clause (values, unaligned M, repeatability, graphs, group sizes) is the
op's own behaviour, recorded as it is.

What it is, by its source (torch/distributed/_symmetric_memory/__init__.py):
* it allocates its output (and its stacked partials) on every call: no ``out=``;
* it has no capacity: any M is "valid" for it, so there is no bound check to make;
* it divides M by the group size (``out_shape[0] //= W``): unaligned M is outside what it claims;
* it raises ValueError/RuntimeError from torch, not typed errors.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist

from ..interface import Eligibility, GemmRsImplementation


class TorchAsyncTpGemmRs(GemmRsImplementation):
    name = "torch-async-tp"
    main_path = "torch-async-tp"  # the op itself; it has no fallback
    waived_clauses = {
        "out_param": "fused_matmul_reduce_scatter allocates its own output; it has no out= to write into",
        "capacity_check": "the op has no capacity (no max_M): it allocates per call, so any M is valid for it",
        "typed_errors": "the op raises torch's ValueError/RuntimeError, not this suite's typed errors",
        "unaligned_m": "the op splits M evenly over the group (out_shape[0] //= W, like reduce_scatter_tensor): "
                       "M must be a multiple of W",
    }

    def __init__(self, group=None, *, max_M: int, N: int, K: int, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._group = group if group is not None else dist.group.WORLD
        self.group_name = self._group.group_name
        import torch.distributed._symmetric_memory as symm_mem

        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:  # required before torch 2.12, deprecated (no-op) after
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                enable(self.group_name)

    def main_path_support(self) -> Eligibility:
        """The op needs a CUDA device and torch's symmetric memory with the op registered."""
        if self.device.type != "cuda" or not torch.cuda.is_available():
            return Eligibility(False, f"device {self.device} is not a usable CUDA device")
        try:
            torch.ops.symm_mem.fused_matmul_reduce_scatter  # noqa: B018 — resolving the op is the check
        except (AttributeError, RuntimeError) as exc:
            return Eligibility(False, f"torch.ops.symm_mem.fused_matmul_reduce_scatter is not available ({exc})")
        return Eligibility(True)

    def validate(self, x, w, out) -> int:
        # Nothing of ours: what the op accepts or rejects is what is under test.
        return int(x.shape[0]) if isinstance(x, torch.Tensor) and x.dim() >= 1 else 0

    def _run(self, x, w, out, M):
        y = torch.ops.symm_mem.fused_matmul_reduce_scatter(x, w.t(), "sum", 0, self.group_name)
        self.last_path = "torch-async-tp"
        return y


class TorchAsyncTpUnalignedProbe(TorchAsyncTpGemmRs):
    """The same op without the ``unaligned_m`` waiver: what it really does with M not a multiple of W
    (``python -m fuzz.repro --impl kernel.adapters.torch_async_tp:TorchAsyncTpUnalignedProbe ...``)."""

    name = "torch-async-tp-unaligned-probe"
    waived_clauses = {k: v for k, v in TorchAsyncTpGemmRs.waived_clauses.items() if k != "unaligned_m"}
