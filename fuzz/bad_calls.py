"""The bad-call table: every class of invalid call the contract says an implementation rejects with a
typed error, changing nothing (CONTRACT.md, "Capacity and bad input"). One table for the gate's
``bad_call`` and ``capacity`` families and for the unit tests (tests/foundation), so a class checked in
one place is checked in all.

Each entry makes its bad operands from a good call's (:class:`GoodCall`: x (M, K), w (N, K), out (S, N)
or None, max_M, the device), so a bad call differs from a valid one in exactly the way its name says.
Entries are applicable to every good call (every M, N, K, W, device), except where ``applies`` says not (a
row-strided out of one row is contiguous: a valid out).

:data:`BAD_CALLS` — wrong dtype, rank of tensor, shape, device, layout (non-contiguous, misaligned by
2 bytes; a row-strided out, a stride-0 expanded w), out overlapping an input. :data:`CAPACITY_CALLS` — M
out of 1..max_M. ``same_values``: the operands hold the good call's values, only the layout differs — an
implementation that accepts one violates the contract either way, and the gate also says whether its
result was right.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernel.errors import CapacityError, DeviceError, DTypeError, LayoutError, ShapeError
from properties.padding import sentinel_like


@dataclass(frozen=True)
class GoodCall:
    """A valid call's operands (out None when the implementation waives out=), and the M just past
    capacity that the implementation takes (max_M + 1, or the next multiple of W under an unaligned-M
    waiver)."""

    x: torch.Tensor
    w: torch.Tensor
    out: torch.Tensor | None
    max_M: int
    over_M: int

    @property
    def M(self) -> int:
        return int(self.x.shape[0])

    @property
    def K(self) -> int:
        return int(self.x.shape[1])

    @property
    def N(self) -> int:
        return int(self.w.shape[0])

    @property
    def device(self) -> torch.device:
        return self.x.device


@dataclass(frozen=True)
class BadCall:
    name: str
    what: str                                  # what the caller did wrong, for reports
    expected: tuple[type[Exception], ...]      # the typed error(s) the contract has it raise
    build: Callable[[GoodCall, int], tuple]    # (good, S) -> (x, w, out)
    needs_out: bool = False                    # meaningless without out= (skipped where out= is waived)
    same_values: bool = False                  # operands hold the good call's values, only the layout differs
    watch_x: bool = True                       # x can be copied to compare (not a 2^40-row expanded view)
    #: whether the entry is a bad call for this good call at all (a (1, N) out is contiguous whatever its row
    #: stride); where not, the family skips it for this example with the reason
    applies: Callable[[GoodCall, int], bool] = lambda g, S: True


def _elsewhere(t: torch.Tensor) -> torch.Tensor:
    """``t`` on the wrong device: meta for a CPU implementation, the CPU for a GPU one."""
    return t.to("meta") if t.device.type == "cpu" else t.cpu()


def _strided(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a view with column stride 2: non-contiguous for every shape."""
    buf = torch.zeros(t.shape[0], 2 * t.shape[1], dtype=t.dtype, device=t.device)
    buf[:, ::2] = t
    return buf[:, ::2]


def _row_strided(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values in a view of the right shape whose rows are 8 elements (16 bytes) apart more than
    contiguous rows: every row 16-byte aligned, non-contiguous for two rows or more."""
    buf = torch.zeros(t.shape[0], t.shape[1] + 8, dtype=t.dtype, device=t.device)
    buf[:, : t.shape[1]] = t
    return buf[:, : t.shape[1]]


def _expanded(t: torch.Tensor) -> torch.Tensor:
    """``t``'s first row expanded over its rows: stride 0 (one row of memory read N times, as a broadcast
    weight would be); non-contiguous for two rows or more."""
    return t[:1].expand(t.shape[0], t.shape[1])


def _misaligned(t: torch.Tensor, by: int = 2) -> torch.Tensor:
    """``t``'s values in a contiguous view starting ``by`` bytes (even, below 16) past a 16-byte boundary."""
    buf = torch.zeros(t.numel() + 8, dtype=t.dtype, device=t.device)
    view = buf[by // 2 : by // 2 + t.numel()].view(t.shape)
    view.copy_(t)
    return view


def _transposed_buffer(t: torch.Tensor) -> torch.Tensor:
    """``t``'s values as ``W.mT`` of a row-major (K, N) tensor: shape (N, K), strides (1, N)."""
    return t.t().contiguous().t()


#: Elements (16 bytes of bf16) by which a partly overlapping out and operand are apart: both stay 16-byte aligned,
#: so an implementation's alignment check cannot reject the call in place of its overlap check.
OVERLAP_SHIFT = 8


def _out_overlapping(t: torch.Tensor, S: int, N: int, shift: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(a copy of ``t``, an (S, N) out) in one buffer: out starts where the copy starts (``shift`` 0), ``shift``
    elements after it (> 0: out starts inside the operand, overlapping its tail) or before it (< 0: the operand
    starts inside out). A check that compares start addresses only passes the last two."""
    lead_t, lead_out = max(-shift, 0), max(shift, 0)
    buf = torch.zeros(max(lead_t + t.numel(), lead_out + S * N), dtype=t.dtype, device=t.device)
    copy = buf[lead_t : lead_t + t.numel()].view(t.shape)
    copy.copy_(t)
    return copy, buf[lead_out : lead_out + S * N].view(S, N)


def _overlaps_x(g: GoodCall, S: int, shift: int = 0):
    x, out = _out_overlapping(g.x, S, g.N, shift)
    return x, g.w, out


def _overlaps_w(g: GoodCall, S: int, shift: int = 0):
    w, out = _out_overlapping(g.w, S, g.N, shift)
    return g.x, w, out


def _partly_overlapping(t: torch.Tensor, S: int, N: int) -> bool:
    """Whether an out :data:`OVERLAP_SHIFT` elements from ``t`` (either way) still overlaps it."""
    return t.numel() > OVERLAP_SHIFT and S * N > OVERLAP_SHIFT


def _entries(*rows) -> dict[str, BadCall]:
    return {row.name: row for row in rows}


BAD_CALLS: dict[str, BadCall] = _entries(
    # dtype
    BadCall("x_dtype", "x is fp16", (DTypeError,), lambda g, S: (g.x.half(), g.w, g.out)),
    BadCall("w_dtype", "w is fp32 (a master weight)", (DTypeError,), lambda g, S: (g.x, g.w.float(), g.out)),
    BadCall("out_dtype", "out is fp32", (DTypeError,),
            lambda g, S: (g.x, g.w, torch.zeros(S, g.N, dtype=torch.float32, device=g.device)), needs_out=True),
    # rank of tensor and shape
    BadCall("x_1d", "x is 1-D", (ShapeError,), lambda g, S: (g.x.reshape(-1), g.w, g.out)),
    BadCall("x_3d", "x is 3-D (1, M, K)", (ShapeError,), lambda g, S: (g.x.reshape(1, g.M, g.K), g.w, g.out)),
    BadCall("w_3d", "w is 3-D (1, N, K)", (ShapeError,), lambda g, S: (g.x, g.w.reshape(1, g.N, g.K), g.out)),
    BadCall("w_rows", "w is (N+1, K)", (ShapeError,), lambda g, S: (g.x, torch.cat([g.w, g.w[:1]]), g.out)),
    BadCall("w_cols", "w is (N, 2K)", (ShapeError,), lambda g, S: (g.x, torch.cat([g.w, g.w], 1), g.out)),
    BadCall("k_mismatch", "x is (M, 2K), w is (N, K)", (ShapeError,),
            lambda g, S: (torch.cat([g.x, g.x], 1), g.w, g.out)),
    # w passed as (K, N): a (K, N) view is caught by its layout or its shape, whichever is checked first
    BadCall("w_transposed", "w passed as (K, N): w.t()", (ShapeError, LayoutError),
            lambda g, S: (g.x, g.w.t(), g.out)),
    BadCall("out_rows", "out is (S+1, N)", (ShapeError,),
            lambda g, S: (g.x, g.w, sentinel_like((S + 1, g.N), device=g.device)), needs_out=True),
    BadCall("out_cols", "out is (S, N+1)", (ShapeError,),
            lambda g, S: (g.x, g.w, sentinel_like((S, g.N + 1), device=g.device)), needs_out=True),
    BadCall("out_1d", "out is 1-D (S*N,)", (ShapeError,),
            lambda g, S: (g.x, g.w, sentinel_like((S * g.N,), device=g.device)), needs_out=True),
    # device
    BadCall("x_device", "x on another device", (DeviceError,), lambda g, S: (_elsewhere(g.x), g.w, g.out)),
    BadCall("w_device", "w on another device", (DeviceError,), lambda g, S: (g.x, _elsewhere(g.w), g.out)),
    BadCall("out_device", "out on another device", (DeviceError,),
            lambda g, S: (g.x, g.w, _elsewhere(g.out)), needs_out=True),
    # layout: non-contiguous
    BadCall("x_noncontiguous", "x non-contiguous (column stride 2)", (LayoutError,),
            lambda g, S: (_strided(g.x), g.w, g.out), same_values=True),
    BadCall("w_noncontiguous", "w non-contiguous (column stride 2)", (LayoutError,),
            lambda g, S: (g.x, _strided(g.w), g.out), same_values=True),
    BadCall("w_mT", "w = W.mT of a row-major (K, N) tensor", (LayoutError,),
            lambda g, S: (g.x, _transposed_buffer(g.w), g.out), same_values=True),
    BadCall("out_noncontiguous", "out non-contiguous (column stride 2)", (LayoutError,),
            lambda g, S: (g.x, g.w, _strided(g.out)), needs_out=True, same_values=True),
    # row-strided x and w: rows dense, 16-byte aligned, padded apart (a slice of a fused QKV buffer, ``qkv[:, :K]``):
    # a layout check of the column stride and the alignment alone accepts them, a kernel reading dense rows then
    # reads the padding (a bad call from two rows on: one row is contiguous)
    BadCall("x_row_strided", "x of the right shape with padded rows (row stride K + 8)", (LayoutError,),
            lambda g, S: (_row_strided(g.x), g.w, g.out), same_values=True, applies=lambda g, S: g.M >= 2),
    BadCall("w_row_strided", "w of the right shape with padded rows (row stride K + 8)", (LayoutError,),
            lambda g, S: (g.x, _row_strided(g.w), g.out), same_values=True, applies=lambda g, S: g.N >= 2),
    # layout: views the contract rejects (CONTRACT.md, "Capacity and bad input": strided out, expanded w)
    BadCall("out_row_strided", "out of the right shape with padded rows (row stride N + 8)", (LayoutError,),
            lambda g, S: (g.x, g.w, _row_strided(g.out)), needs_out=True, same_values=True,
            applies=lambda g, S: S >= 2),
    BadCall("w_expanded", "w a stride-0 view: its first row expanded over N rows", (LayoutError,),
            lambda g, S: (g.x, _expanded(g.w), g.out), applies=lambda g, S: g.N >= 2),
    # layout: misaligned (2 bytes past a 16-byte boundary)
    BadCall("x_misaligned", "x 2 bytes past a 16-byte boundary", (LayoutError,),
            lambda g, S: (_misaligned(g.x), g.w, g.out), same_values=True),
    BadCall("w_misaligned", "w 2 bytes past a 16-byte boundary", (LayoutError,),
            lambda g, S: (g.x, _misaligned(g.w), g.out), same_values=True),
    BadCall("out_misaligned", "out 2 bytes past a 16-byte boundary", (LayoutError,),
            lambda g, S: (g.x, g.w, _misaligned(g.out)), needs_out=True, same_values=True),
    # 8 bytes past: 8-byte aligned, which a check of 8 (or 4, 2) bytes accepts where the contract asks 16 (TMA's)
    BadCall("x_misaligned_8", "x 8 bytes past a 16-byte boundary (8-byte aligned)", (LayoutError,),
            lambda g, S: (_misaligned(g.x, 8), g.w, g.out), same_values=True),
    BadCall("w_misaligned_8", "w 8 bytes past a 16-byte boundary (8-byte aligned)", (LayoutError,),
            lambda g, S: (g.x, _misaligned(g.w, 8), g.out), same_values=True),
    BadCall("out_misaligned_8", "out 8 bytes past a 16-byte boundary (8-byte aligned)", (LayoutError,),
            lambda g, S: (g.x, g.w, _misaligned(g.out, 8)), needs_out=True, same_values=True),
    # aliasing
    BadCall("out_overlaps_x", "out overlaps x", (LayoutError,), _overlaps_x, needs_out=True),
    BadCall("out_overlaps_w", "out overlaps w", (LayoutError,), _overlaps_w, needs_out=True),
    # partly: one starts 16 bytes inside the other (a check of the start addresses alone passes them)
    BadCall("out_inside_x", "out starts 16 bytes inside x (overlapping its tail)", (LayoutError,),
            lambda g, S: _overlaps_x(g, S, OVERLAP_SHIFT), needs_out=True,
            applies=lambda g, S: _partly_overlapping(g.x, S, g.N)),
    BadCall("out_before_x", "out starts 16 bytes before x (x begins inside it)", (LayoutError,),
            lambda g, S: _overlaps_x(g, S, -OVERLAP_SHIFT), needs_out=True,
            applies=lambda g, S: _partly_overlapping(g.x, S, g.N)),
    BadCall("out_inside_w", "out starts 16 bytes inside w (overlapping its tail)", (LayoutError,),
            lambda g, S: _overlaps_w(g, S, OVERLAP_SHIFT), needs_out=True,
            applies=lambda g, S: _partly_overlapping(g.w, S, g.N)),
)

#: The capacity calls. Their out (the capacity family's) is sized for the call's own M where one can be: 0 rows
#: for M = 0, S(max_M + 1) for max_M + 1, so M is the only thing wrong. Not for M = 2^40, an expanded (stride 0)
#: x whose out cannot exist: an implementation that checks layouts or shapes before M rejects it with that typed
#: error, which the contract allows (a ValueError subclass; any check order).
CAPACITY_CALLS: dict[str, BadCall] = _entries(
    BadCall("zero", "M = 0", (CapacityError,), lambda g, S: (g.x[:0], g.w, g.out)),
    BadCall("over", "M just past max_M", (CapacityError,),
            lambda g, S: (g.x.repeat(-(-g.over_M // g.M), 1)[: g.over_M], g.w, g.out)),
    BadCall("huge", "M = 2^40 (an expanded view: nothing materialised)", (CapacityError, LayoutError, ShapeError),
            lambda g, S: (torch.zeros(1, g.K, dtype=g.x.dtype, device=g.device).expand(1 << 40, g.K), g.w, g.out),
            watch_x=False),
)
