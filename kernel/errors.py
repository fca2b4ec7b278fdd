"""Typed errors of every GEMM-RS implementation.

Two tiers (CONTRACT.md, "Capacity and bad input"):

* user mistakes raise a subclass of :class:`GemmRsInputError` (a ``ValueError``) that says what to do;
* configurations an implementation does not support raise :class:`UnsupportedConfigError`.

All checks are ``if ...: raise`` so that ``python -O`` cannot remove them.
"""

from __future__ import annotations


class GemmRsError(Exception):
    """Base of every error raised on purpose by an implementation or the suite."""


class GemmRsInputError(GemmRsError, ValueError):
    """A bad call: wrong shape, dtype, device, layout or M. Nothing was queued, nothing changed."""


class CapacityError(GemmRsInputError):
    """M <= 0 or M > max_M: rejected before any GPU work is queued."""


class ShapeError(GemmRsInputError):
    """Tensor rank or shape mismatch between x, w and out."""


class DTypeError(GemmRsInputError, TypeError):
    """A tensor is not bf16."""


class DeviceError(GemmRsInputError):
    """A tensor is on the wrong device."""


class LayoutError(GemmRsInputError):
    """Non-contiguous or misaligned tensor."""


class UnsupportedConfigError(GemmRsError, ValueError):
    """The implementation does not support this group size, N, K or machine (see ``can_run``)."""


class SymmetricMemoryMismatch(GemmRsError, RuntimeError):
    """The ranks of a group cannot rendezvous symmetric memory together: their processes made different
    numbers of rendezvous before (torch numbers its store exchanges per process, not per group, so the
    rendezvous would wait forever) and a rank could not catch up (``kernel.fused.workspace.
    align_rendezvous_counts``). Raised on every rank of the group, instead of a hang."""


class FusedPathUnavailable(UnsupportedConfigError):
    """The fused path was forced where ``can_run`` says no."""
