"""GEMM + tensor-parallel reduce-scatter implementations: the interface, the unfused implementation
(fallback) and the fused CuTe DSL Hopper kernel (``kernel.fused``, imported lazily: it needs
nvidia-cutlass-dsl)."""

from .checks import shard_rows, valid_rows
from .errors import (
    CapacityError,
    DeviceError,
    DTypeError,
    FusedPathUnavailable,
    GemmRsError,
    GemmRsInputError,
    LayoutError,
    ShapeError,
    UnsupportedConfigError,
)
from .interface import CLAUSES, Eligibility, GemmRsImplementation
from .registry import IMPLEMENTATIONS, load_implementation
from .unfused import UnfusedGemmRs

__all__ = [
    "CLAUSES",
    "CapacityError",
    "DTypeError",
    "DeviceError",
    "Eligibility",
    "FusedPathUnavailable",
    "GemmRsError",
    "GemmRsImplementation",
    "GemmRsInputError",
    "IMPLEMENTATIONS",
    "LayoutError",
    "ShapeError",
    "UnfusedGemmRs",
    "UnsupportedConfigError",
    "load_implementation",
    "shard_rows",
    "valid_rows",
]
