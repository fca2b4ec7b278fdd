"""Eligibility and bad-call checks shared by every implementation.

Each ``check_*`` raises a typed error from :mod:`kernel.errors` with a message that says what to do,
or returns None. They touch only tensor metadata: no GPU work, no sync, so they are safe under CUDA
graph capture and run before anything is queued.
"""

from __future__ import annotations

import torch

from .errors import (
    CapacityError,
    DeviceError,
    DTypeError,
    LayoutError,
    ShapeError,
    UnsupportedConfigError,
)

ALIGN_BYTES = 16  # TMA and vectorised loads need 16-byte aligned rows and base pointers


def mps_client(device_index: int) -> bool | None:
    """Whether this process's contexts on the GPU are clients of an MPS server (``CU_DEVICE_ATTRIBUTE_MPS_ENABLED``);
    None where the driver cannot say (no ``cuda.bindings``, an old driver, no CUDA; falsy: the fused path's facts as
    before this query existed, and the gate's report shows no answer rather than a "no"). Asked by the
    fused wrapper (its path declines MPS: ``kernel.fused.wrapper.check_mps_clients``) and by the gate's ranks, whose
    failures under MPS say so (``fuzz.pool``). A device attribute read: no GPU work, safe under capture."""
    try:
        import cuda.bindings.driver as cuda

        err, dev = cuda.cuDeviceGet(device_index)
        if err != cuda.CUresult.CUDA_SUCCESS:
            return None
        err, value = cuda.cuDeviceGetAttribute(cuda.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MPS_ENABLED, dev)
        return bool(value) if err == cuda.CUresult.CUDA_SUCCESS else None
    except Exception:  # noqa: BLE001 -- no driver library, bindings without the attribute: the driver cannot say
        return None


def check_m_in_range(M: int, max_M: int) -> None:
    if not isinstance(M, int) or isinstance(M, bool):
        raise CapacityError(f"M must be an int, got {type(M).__name__}")
    if M <= 0 or M > max_M:
        raise CapacityError(
            f"M={M} is outside 1..max_M={max_M}; build the implementation with a larger max_M "
            f"or split the batch (no work was queued)"
        )


def check_world_size(world_size: int, supported: range | tuple[int, ...]) -> None:
    if world_size not in supported:
        raise UnsupportedConfigError(
            f"group size W={world_size} is not supported (supported: {_fmt_supported(supported)})"
        )


def _fmt_supported(supported) -> str:
    if isinstance(supported, range):
        return f"{supported.start}..{supported.stop - 1}"
    return ", ".join(str(s) for s in supported)


def check_bf16_2d(name: str, t, device: torch.device) -> tuple[int, int] | None:
    """A bf16, 2-D, row-major contiguous, 16-byte aligned tensor on ``device``, else the typed error; returns the
    byte span ``(first, end)`` it covers, None when it holds no element (for :func:`check_operands`'s overlap
    check, so that the tensor's metadata is read once per call)."""
    if not isinstance(t, torch.Tensor):
        raise ShapeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ShapeError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if t.dtype != torch.bfloat16:
        raise DTypeError(f"{name} must be torch.bfloat16, got {t.dtype}; cast with {name}.bfloat16()")
    if t.device != device:
        raise DeviceError(f"{name} is on {t.device}, this implementation runs on {device}")
    if not t.is_contiguous():
        raise LayoutError(
            f"{name} must be row-major contiguous (strides {t.stride()}); pass {name}.contiguous() "
            f"or, for a weight, W of shape (N, K) rather than W.mT"
        )
    n = t.numel()
    if not n:
        return None
    first = t.data_ptr()
    if first % ALIGN_BYTES:
        raise LayoutError(f"{name}.data_ptr() is not {ALIGN_BYTES}-byte aligned; pass a fresh tensor")
    return first, first + 2 * n  # bf16: two bytes an element


def check_operands(x, w, out, *, N: int, K: int, max_M: int, world_size: int, device: torch.device) -> int:
    """Validate one call; return M. Raises before any work."""
    # M first: an out-of-range M is a CapacityError whatever else is wrong with x (CONTRACT.md).
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        check_bf16_2d("x", x, device)
    check_m_in_range(int(x.shape[0]), max_M)
    x_span = check_bf16_2d("x", x, device)
    w_span = check_bf16_2d("w", w, device)
    if tuple(w.shape) != (N, K):
        raise ShapeError(f"w has shape {tuple(w.shape)}, expected (N, K) = ({N}, {K}) (nn.Linear layout)")
    if x.shape[1] != K:
        raise ShapeError(f"x has K={x.shape[1]}, w has K={K}; x must be (M, K)")
    M = int(x.shape[0])
    if out is not None:
        out_span = check_bf16_2d("out", out, device)
        S = shard_rows(M, world_size)
        if tuple(out.shape) != (S, N):
            raise ShapeError(f"out has shape {tuple(out.shape)}, expected (ceil(M/W), N) = ({S}, {N})")
        if spans_overlap(out_span, x_span) or spans_overlap(out_span, w_span):
            raise LayoutError("out overlaps an input; pass a separate buffer")
    return M


def spans_overlap(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    """Whether two byte spans ``(first, end)`` (None: no bytes) intersect: :func:`overlaps` of tensors on one device
    whose spans are known."""
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the bytes a and b span (first to last element) intersect."""
    if a.device != b.device or not a.numel() or not b.numel():
        return False
    return spans_overlap((a.data_ptr(), a.data_ptr() + a.numel() * a.element_size()),
                         (b.data_ptr(), b.data_ptr() + b.numel() * b.element_size()))


def shard_rows(M: int, world_size: int) -> int:
    """S = ceil(M / W): rows of every rank's output shard."""
    return -(-M // world_size)


def valid_rows(M: int, world_size: int, rank: int) -> int:
    """How many of rank's S shard rows are real tokens (the rest are padding, left untouched)."""
    S = shard_rows(M, world_size)
    return max(0, min(S, M - rank * S))
