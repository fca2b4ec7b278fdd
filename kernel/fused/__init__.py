"""The fused GEMM (+ reduce-scatter, part 2) CuTe DSL kernel for Hopper.

``import kernel.fused`` needs only torch: the CuTe DSL modules (``gemm``, ``compile``) import
nvidia-cutlass-dsl and are loaded on first use. :class:`FusedGemmRs` (``wrapper``) is the
implementation the suite loads as ``"fused"`` (pull protocol; :class:`FusedGemmRsPush`, loadable as
``kernel.fused:FusedGemmRsPush``, is the push protocol; :class:`FusedGemmRsAuto` picks per call the protocol
measured faster); on machines where the kernel cannot run it says why
(``can_run``) and falls back to the unfused implementation, recording ``last_path``.
"""

from __future__ import annotations

from .wrapper import FusedGemmRs, FusedGemmRsAuto, FusedGemmRsBatchInvariant, FusedGemmRsPush, cutlass_available

__all__ = ["FusedGemmRs", "FusedGemmRsAuto", "FusedGemmRsBatchInvariant", "FusedGemmRsPush", "cutlass_available"]
