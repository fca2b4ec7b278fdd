"""A rank's long-lived state for running cases: its group, device, implementation instances, inputs
rebuilt from a case's seed, synchronisation, and the one door every valid implementation call of a case
goes through (:meth:`RankContext.call`, see :mod:`fuzz.families.calls`)."""

from __future__ import annotations

import time
import traceback

import torch

from oracle import make_w, make_x, seeded_shard_truth

from ..case import Case
from .calls import CaseCalls


class RankContext:
    """Implementation instances are keyed by shape, so cases that follow each other in one pool alternate
    M on the same instance (as in serving)."""

    def __init__(self, impl_factory, *, rank: int, world_size: int, device: torch.device, group=None,
                 topology: str = "cpu"):
        self.impl_factory = impl_factory
        self.rank, self.world_size, self.device, self.group = rank, world_size, device, group
        self.topology = topology
        self._impls: dict[tuple, object] = {}
        self.calls: CaseCalls | None = None

    # instances ------------------------------------------------------------------------------
    def impl(self, case: Case):
        key = (case.max_M, case.N, case.K)
        if key not in self._impls:
            self._impls[key] = self.fresh_impl(case)
        return self._impls[key]

    def fresh_impl(self, case: Case):
        return self.impl_factory(self.group, max_M=case.max_M, N=case.N, K=case.K, device=self.device)

    def close(self) -> None:
        for impl in self._impls.values():
            close_impl(impl)
        self._impls.clear()

    # the checked call --------------------------------------------------------------------------
    def begin_case(self) -> CaseCalls:
        """A new ledger of this case's calls (results held, per-call checks)."""
        self.calls = CaseCalls(self.rank, self.world_size)
        return self.calls

    def call(self, impl, x, w, out=None, *, tag: str, captured: bool = False, hold: bool = True):
        """One valid call of ``impl`` through this case's ledger: returns the result (a conforming stand-in
        if the result broke the result contract) and records the per-call checks. See
        :meth:`fuzz.families.calls.CaseCalls.call`."""
        if self.calls is None:
            raise RuntimeError("RankContext.call outside a case (run_case begins one)")
        return self.calls.call(impl, x, w, out, tag=tag, captured=captured, hold=hold)

    # inputs ---------------------------------------------------------------------------------
    def x(self, case: Case, seed: int, M: int, kind: str | None = None) -> torch.Tensor:
        return offset_view(make_x(seed, self.rank, M, case.K, self.world_size, kind or case.kind), case.offset,
                           self.device)

    def w(self, case: Case, seed: int, kind: str | None = None) -> torch.Tensor:
        return offset_view(make_w(seed, self.rank, case.N, case.K, self.world_size, kind or case.kind),
                           case.offset, self.device)

    def truth(self, case: Case, seed: int, M: int, kind: str | None = None):
        dev = self.device if self.device.type == "cuda" else "cpu"
        return seeded_shard_truth(seed, kind or case.kind, self.rank, M, case.N, case.K, self.world_size,
                                  device=dev)

    def rounding_model(self, case: Case, seed: int, M: int, kind: str | None = None):
        """What :func:`properties.bias.no_systematic_bias` needs for this rank's shard of a call at M."""
        from properties.bias import seeded_rounding_model

        dev = self.device if self.device.type == "cuda" else "cpu"
        return seeded_rounding_model(seed, kind or case.kind, self.rank, M, case.N, case.K, self.world_size,
                                     device=dev)

    # synchronisation ----------------------------------------------------------------------------
    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        """All ranks here (e.g. after a rejected call's before/after comparison, before anyone's next
        call writes into peers' flag areas)."""
        self.sync()
        if torch.distributed.is_initialized() and self.world_size > 1:
            torch.distributed.barrier(group=self.group)

    def delay(self, delay_ms: int) -> None:
        """This rank arrives late by ``delay_ms`` (on the GPU stream where there is one)."""
        if self.device.type == "cuda":
            torch.cuda._sleep(int(delay_ms * 1.5e6))  # ~1.5 GHz: cycles for delay_ms on the GPU stream
        else:
            time.sleep(delay_ms / 1000)


#: The value the head of an offset view's buffer holds (before the view's storage offset): finite, unlike
#: any input row, so reading it instead of the operand gives a wrong value, not a NaN another check sees.
OFFSET_HEAD_VALUE = 3.0
#: Storage offsets must keep a view 16-byte aligned (the contract's alignment): multiples of 8 bf16 elements.
OFFSET_ALIGN = 8


def offset_view(t: torch.Tensor, offset: int, device) -> torch.Tensor:
    """``t`` on ``device``, as a contiguous view starting ``offset`` elements into a larger buffer (``offset``
    0: a plain tensor). The head holds OFFSET_HEAD_VALUE."""
    if not offset:
        return t.to(device)
    if offset % OFFSET_ALIGN or offset < 0:
        raise ValueError(f"offset {offset} must be a non-negative multiple of {OFFSET_ALIGN} (16-byte aligned views)")
    buf = torch.full((offset + t.numel(),), OFFSET_HEAD_VALUE, dtype=t.dtype, device=device)
    view = buf[offset:].view(t.shape)
    view.copy_(t)
    return view


def waiver(impl, clause: str) -> str | None:
    """The reason ``impl`` gives for not offering a contract clause (kernel.interface.CLAUSES), or None."""
    return getattr(impl, "waived_clauses", {}).get(clause)


def aligned_if_waived(impl, M: int, W: int, max_M: int | None = None) -> int:
    """M itself, or (for an implementation that waives unaligned M) the next multiple of W — the one below
    where that would pass ``max_M``: a bad call, a capacity case or a graph must be tested at an M the
    implementation takes, so a rejection is for what the case tests."""
    if not waiver(impl, "unaligned_m") or M % W == 0:
        return M
    up = M + (-M) % W
    return up if max_M is None or up <= max_M else M - M % W


def close_impl(impl) -> None:
    close = getattr(impl, "close", None)
    if close is not None:
        close()


def describe_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
