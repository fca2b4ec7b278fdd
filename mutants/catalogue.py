"""The catalogue. Each class subclasses the correct unfused implementation and breaks one thing.

The docstring of each mutant names the real bug class of fused communication kernels it models.
:data:`CATALOGUE` lists the mutants the kill matrix runs (:mod:`mutants.meta`), each with the world sizes
it is run at and the properties expected to catch it: the kill matrix fails a mutant killed by none of them
(mutants.meta.Outcome.ok; a check wired to the wrong thing would otherwise hide behind another route to the
kill). ``HangOnM``, ``CrashOnM`` and ``PowerOfTwoGroupsOnly`` are fixtures of the engine's own tests
(tests/engine), not part of the matrix.

Every mutant keeps the collective schedule of the correct implementation on every rank (same
collectives, same order), unless breaking it *is* the bug: a mutant must be caught by a property, not
by an accident of the harness.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from kernel import collectives
from kernel.checks import check_m_in_range, check_operands, overlaps
from kernel.errors import ShapeError
from kernel.interface import Eligibility, KernelPath
from kernel.unfused import UnfusedGemmRs
from mutants import peer_styles

# --- shared pieces ---------------------------------------------------------------------------------


def _all_reduced_rows(impl: UnfusedGemmRs, x, w, M: int) -> torch.Tensor:
    """Every row of Y (W*S rows, zero padded), summed over the group: what a mutant that indexes the
    wrong rows reads from. All ranks call it (one all_reduce)."""
    S = impl.shard_rows(M)
    partials = torch.zeros(impl.world_size * S, impl.N, dtype=torch.bfloat16, device=impl.device)
    torch.mm(x, w.t(), out=partials[:M])
    if collectives.backend_of(impl.group) != "none" and impl.world_size > 1:
        dist.all_reduce(partials, group=impl.group)
    return partials


def _finish(impl: UnfusedGemmRs, out, shard: torch.Tensor, M: int) -> torch.Tensor:
    """The correct epilogue: valid rows of ``shard`` into ``out`` (allocated when None)."""
    S = impl.shard_rows(M)
    n_valid = impl.valid_rows(M)
    if out is None:
        out = torch.zeros(S, impl.N, dtype=torch.bfloat16, device=impl.device)
    out[:n_valid].copy_(shard[:n_valid])
    impl.last_path = "unfused"
    return out


# --- engine fixtures (tests/engine) -----------------------------------------------------------------


class DroppedRankOddM(UnfusedGemmRs):
    """Dropped peer on one shape class: for odd M > 1 the last rank's partial is never added (a flag
    wait that skips the slowest peer, a loop bound off by one)."""

    name = "mutant-dropped-rank-odd-m"

    def _run(self, x, w, out, M):
        if M > 1 and M % 2 == 1 and self.world_size > 1 and self.rank == self.world_size - 1:
            x = torch.zeros_like(x)
        return super()._run(x, w, out, M)


class HangOnM(UnfusedGemmRs):
    """A rank that never arrives (missed flag, wrong epoch): rank 0 blocks forever when M == 77."""

    name = "mutant-hang"

    def _run(self, x, w, out, M):
        if M == 77 and self.rank == 0:
            while True:
                time.sleep(0.05)
        return super()._run(x, w, out, M)


class CrashOnM(UnfusedGemmRs):
    """A rank dies mid-call (illegal address, abort): the last rank exits when M == 66."""

    name = "mutant-crash"

    def _run(self, x, w, out, M):
        if M == 66 and self.rank == self.world_size - 1:
            os._exit(17)
        return super()._run(x, w, out, M)


class PowerOfTwoGroupsOnly(UnfusedGemmRs):
    """Not a bug: an implementation that supports only W in {1, 2, 4, 8} and says so at construction.
    The gate must treat W=3 as a clean rejection, not a failure (engine self-test)."""

    name = "power-of-two-groups"
    supported_world_sizes = (1, 2, 4, 8)


# --- which rank's data ------------------------------------------------------------------------------


class DoubleCountedRank(UnfusedGemmRs):
    """A rank counted twice: the peer loop visits rank 0 twice (``for i in range(W + 1)`` over
    ``(r + i) % W``), so rank 0's partial enters the sum twice."""

    name = "mutant-double-counted-rank"

    def _run(self, x, w, out, M):
        if self.rank == 0:
            x = x * 2  # exact in bf16: the partial is exactly doubled
        return super()._run(x, w, out, M)


class ShardPermutation(UnfusedGemmRs):
    """Shards handed to the wrong rank: the epilogue stores peer (r + 1) % W's shard (a rank-to-peer
    mapping that uses the local rank where the group rank is meant, or a rotated peer table)."""

    name = "mutant-shard-permutation"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        full = _all_reduced_rows(self, x, w, M)
        src = (self.rank + 1) % self.world_size
        return _finish(self, out, full[src * S : (src + 1) * S], M)


class ShiftedRowAtShardBoundary(UnfusedGemmRs):
    """Off by one at a shard boundary: the first row of every shard but rank 0's is read from the row
    before it (the previous rank's last row) — a tile's row offset computed as ``r * S - 1``."""

    name = "mutant-shifted-row-at-boundary"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        full = _all_reduced_rows(self, x, w, M)
        shard = full[self.rank * S : (self.rank + 1) * S].clone()
        if self.rank > 0 and S > 0:
            shard[0] = full[self.rank * S - 1]
        return _finish(self, out, shard, M)


def _arrivals(impl) -> tuple[int, float]:
    """(the group rank that called last, seconds between the first and the last call): every rank's arrival time,
    all-gathered on the group (a world of one: itself, no skew)."""
    arrived = torch.full((impl.world_size,), time.time(), dtype=torch.float64)
    if impl.world_size > 1:
        dist.all_gather_into_tensor(arrived, torch.tensor([time.time()], dtype=torch.float64), group=impl.group)
    return int(torch.argmax(arrived)), float(arrived.max() - arrived.min())


class LateRankReadsStaleBuffer(UnfusedGemmRs):
    """A late rank's stale buffer is read: the peers poll a flag that was left set by the previous call
    (the epoch is not advanced), so when one rank arrives late (> 3 ms after the first) the others
    reduce its symmetric buffer as it was after the previous call. Without skew (< 20 ms: more than the
    ranks' natural jitter on a loaded CPU host) it is correct."""

    name = "mutant-late-rank-stale-buffer"
    SKEW_S = 0.020

    def _allocate(self) -> None:  # (the base's: normal tensors in any mode -- its bug is the stale buffer alone)
        super()._allocate()
        self._previous = torch.zeros_like(self._partials)  # what peers find in this rank's buffer

    def _run(self, x, w, out, M):
        late, skew = _arrivals(self)
        skewed = skew > self.SKEW_S
        S = self.shard_rows(M)
        rows = self.world_size * S
        partials = self._partials[:rows]
        torch.mm(x, w.t(), out=partials[:M])
        partials[M:].zero_()
        send = self._previous[:rows] if (skewed and self.rank == late) else partials
        shard = self._shard[:S]
        collectives.reduce_scatter(shard, send.clone(), self.group, self._staging)
        self._previous[:rows].copy_(partials)
        return _finish(self, out, shard, M)


class LateRankDroppedAfterTimeout(UnfusedGemmRs):
    """A late rank dropped after a timeout: the peers wait for a rank's partial at most 0.5 s (a spin that breaks
    out of its loop instead of trapping, a collective whose timeout error is swallowed -- the "fix" of a hang when
    one rank is late) and reduce without it, its rows counted as zeros. Every skew the draw gives (0-100 ms) is
    well inside the timeout: exact there."""

    name = "mutant-late-rank-dropped-after-timeout"
    TIMEOUT_S = 0.5

    def _run(self, x, w, out, M):
        late, skew = _arrivals(self)
        gave_up = skew > self.TIMEOUT_S
        S = self.shard_rows(M)
        partials = self._partials[: self.world_size * S]
        torch.mm(x, w.t(), out=partials[:M])
        partials[M:].zero_()
        if gave_up and self.rank == late:
            partials.zero_()  # what the peers summed in its place
        shard = self._shard[:S]
        collectives.reduce_scatter(shard, partials, self.group, self._staging)
        return _finish(self, out, shard, M)


# --- which rows are written ---------------------------------------------------------------------------


class PaddingRowsZeroed(UnfusedGemmRs):
    """Padding rows written with zeros: the epilogue stores the whole S-row tile without the row
    predicate ``r * S + i < M`` (the reduced padding rows are zero)."""

    name = "mutant-padding-zeroed"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        S = self.shard_rows(M)
        y[:S].copy_(self._shard[:S])
        return y


class EmptyRankNegativeRowCount(UnfusedGemmRs):
    """A rank's valid rows computed as ``min(S, M - r * S)`` without the clamp at 0: a rank with no valid row
    and S >= 2 (M = 5, W = 4: S = 2, rank 3 gets -1) stores ``out[:-1]``, its padding rows, from the
    reduced padding (zeros). With ``out=None`` the padding is zeros anyway; only M in W < M < about W^2
    reaches it."""

    name = "mutant-empty-rank-negative-rows"

    def valid_rows(self, M):
        S = self.shard_rows(M)
        return min(S, M - self.rank * S)


class PaddingRowsGarbage(UnfusedGemmRs):
    """Padding rows written with garbage: the masked rows of the tile are stored from a staging buffer
    that was never written for them (here: the workspace's tail, whatever it holds)."""

    name = "mutant-padding-garbage"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        S, n_valid = self.shard_rows(M), self.valid_rows(M)
        pad = S - n_valid
        if pad > 0:
            tail = self._ws.reshape(-1)[-pad * self.N :].view(pad, self.N)
            y[n_valid:S].copy_(tail)
        return y


class RowPastEndOfOut(UnfusedGemmRs):
    """One row written past the end of ``out``: the last tile's store is not predicated on S, so row S
    (one past the end) is written through out's storage — a red-zone write into whatever follows."""

    name = "mutant-row-past-out"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if out is None:
            return y
        storage = out.untyped_storage()
        offset = out.storage_offset() + out.numel()
        if (offset + self.N) * out.element_size() <= storage.nbytes():
            past = torch.empty(0, dtype=out.dtype, device=out.device).set_(storage, offset, (1, self.N))
            past.copy_(self._shard[:1])
        return y


class WorkspaceOverrun(UnfusedGemmRs):
    """A write past max_M into the workspace's guard: the padding-clear loop runs to ``<= W*S``
    instead of ``< W*S``, one row too far; at M near max_M that row is past the workspace."""

    name = "mutant-workspace-overrun"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        S = self.shard_rows(M)
        self._ws[self.world_size * S].zero_()
        return y


class OutIgnored(UnfusedGemmRs):
    """``out=`` ignored: the wrapper allocates a fresh result and returns it (a caller that keeps
    ``out`` — a CUDA-graph static buffer, a preallocated activation — reads stale data)."""

    name = "mutant-out-ignored"

    def _run(self, x, w, out, M):
        return super()._run(x, w, None, M)


# --- capacity and bad calls -----------------------------------------------------------------------------


class CapacityAsAssert(UnfusedGemmRs):
    """The capacity check written as ``assert``: without -O an out-of-range M raises AssertionError (not
    the contract's CapacityError); under -O the check is gone and M > max_M runs past the workspace."""

    name = "mutant-capacity-assert"

    def validate(self, x, w, out):
        M = int(x.shape[0]) if isinstance(x, torch.Tensor) and x.dim() == 2 else -1
        # Deliberate planted bug: a bare assert (python -O removes it). The only one in the repo.
        assert 0 < M <= self.max_M, f"M={M} out of range"  # noqa: S101
        return check_operands(x, w, out, N=self.N, K=self.K, max_M=1 << 62, world_size=self.world_size,
                              device=self.device)

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        rows = self._partials.shape[0]
        if self.world_size * S <= rows:
            return super()._run(x, w, out, M)
        # Past capacity (only reachable under -O): the GEMM's tiles run on past the workspace — here a
        # scratch buffer holds the result and its first row past capacity lands in the guard.
        partials = torch.zeros(self.world_size * S, self.N, dtype=torch.bfloat16, device=self.device)
        torch.mm(x, w.t(), out=partials[:M])
        self._guard[0].copy_(partials[rows])
        shard = torch.empty(S, self.N, dtype=torch.bfloat16, device=self.device)
        collectives.reduce_scatter(shard, partials, self.group)
        return _finish(self, out, shard, M)


class ZeroMAccepted(UnfusedGemmRs):
    """M = 0 silently accepted: an early ``if M == 0: return`` fast path before the capacity check (the
    contract rejects M <= 0; a caller's empty batch bug goes unnoticed)."""

    name = "mutant-zero-m-accepted"

    def validate(self, x, w, out):
        if isinstance(x, torch.Tensor) and x.dim() == 2 and x.shape[0] == 0:
            return 0
        return super().validate(x, w, out)

    def _run(self, x, w, out, M):
        if M == 0:
            return out if out is not None else torch.empty(0, self.N, dtype=torch.bfloat16)
        return super()._run(x, w, out, M)


class WorkQueuedBeforeCheck(UnfusedGemmRs):
    """Work queued before the check: the prologue (clearing ``out``, resetting flags) is launched, then
    the host-side check raises — the rejected call is not side-effect free."""

    name = "mutant-work-before-check"

    def __call__(self, x, w, out=None):
        try:
            M = self.validate(x, w, out)
        except Exception:
            if isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16:
                out.zero_()
            raise
        return self._run(x, w, out, M)


class CollectiveBeforeCheck(UnfusedGemmRs):
    """Out checked last: x and w are validated, the GEMM and the cross-rank reduction run into temporaries,
    and only then is ``out`` checked. Nothing the caller holds changes, but the rejected call ran a
    collective: a rank whose ``out`` alone is bad pairs it with its peers' next collective (or hangs them)."""

    name = "mutant-collective-before-check"

    def __call__(self, x, w, out=None):
        M = check_operands(x, w, None, N=self.N, K=self.K, max_M=self.max_M, world_size=self.world_size,
                           device=self.device)
        partials = torch.zeros(self.world_size * self.shard_rows(M), self.N, dtype=torch.bfloat16,
                               device=self.device)
        torch.mm(x, w.t(), out=partials[:M])
        if self.world_size > 1:
            dist.all_reduce(partials, group=self.group)
        self.validate(x, w, out)
        return self._run(x, w, out, M)


class SlotCounterBeforeCheck(UnfusedGemmRs):
    """State stepped before the checks: the call counter that picks the double-buffered partials slot (``calls %
    2``: a call writes one slot while a late peer may still read the other) is advanced at the top of the call,
    before validation, so a rejected call advances it too. Every rank making the same bad call stays in step; one
    rank whose operand alone is bad does not: from its next call on it writes one slot and reads its peers' other,
    they read its other -- the previous call's partials, silently (peer reads emulated: every rank's two slots are
    all-gathered, each rank sums its peers' partials from the slot of its own counter)."""

    name = "mutant-slot-counter-before-check"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._calls = 0

    def _allocate(self) -> None:  # (the base's: normal tensors in any mode)
        super()._allocate()
        rows = self.world_size * self.shard_rows(self.max_M)
        self._slots = torch.zeros(2, rows, self.N, dtype=torch.bfloat16, device=self.device)

    def __call__(self, x, w, out=None):
        self._calls += 1  # the slot of this call, chosen first
        return super().__call__(x, w, out)

    def _run(self, x, w, out, M):
        S, W, r = self.shard_rows(M), self.world_size, self.rank
        slot = self._calls % 2
        mine = self._slots[slot, : W * S]
        self._gemm(x, w, mine[:M])
        mine[M:].zero_()
        both = self._slots[:, : W * S].contiguous()
        everyone = [both]
        if W > 1 and collectives.backend_of(self.group) != "none":  # a CPU mutant: gloo takes the tensors as they are
            everyone = [torch.empty_like(both) for _ in range(W)]
            dist.all_gather(everyone, both, group=self.group)
        shard = torch.zeros(S, self.N, dtype=torch.float32, device=self.device)
        for p in range(W):  # the peers' partials of this rank's rows, from the slot of this rank's counter
            shard += everyone[p][slot, r * S:(r + 1) * S].float()
        return _finish(self, out, shard.to(torch.bfloat16), M)


class RowStridedOutAccepted(UnfusedGemmRs):
    """A padded-row ``out`` (right shape, unit column stride, row stride > N) accepted and written as if its
    rows were dense: the epilogue computes row addresses from N, not from ``out.stride(0)``."""

    name = "mutant-row-strided-out"

    def validate(self, x, w, out):
        if isinstance(out, torch.Tensor) and out.dim() == 2 and out.stride(1) == 1 and not out.is_contiguous():
            M = super().validate(x, w, None)
            if tuple(out.shape) != (self.shard_rows(M), self.N):
                raise ShapeError(f"out is {tuple(out.shape)}, expected {(self.shard_rows(M), self.N)}")
            return M
        return super().validate(x, w, out)

    def _run(self, x, w, out, M):
        if out is None or out.is_contiguous():
            return super()._run(x, w, out, M)
        y = super()._run(x, w, None, M)
        torch.as_strided(out, out.shape, (out.shape[1], 1)).copy_(y)
        return out


class WrongDtypeAccepted(UnfusedGemmRs):
    """Wrong dtype accepted silently: fp16/fp32 inputs are cast to bf16 instead of rejected (the caller's
    precision bug — an fp32 master weight passed by mistake — is hidden)."""

    name = "mutant-wrong-dtype-accepted"

    def __call__(self, x, w, out=None):
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype != torch.bfloat16:
            x = x.to(torch.bfloat16)
        if isinstance(w, torch.Tensor) and w.is_floating_point() and w.dtype != torch.bfloat16:
            w = w.to(torch.bfloat16)
        return super().__call__(x, w, out)


class NonContiguousXReadWrongly(UnfusedGemmRs):
    """Non-contiguous x accepted and read as if row-major: the layout check is missing and the kernel's
    TMA descriptor assumes stride (K, 1), so a strided view is read from the wrong addresses."""

    name = "mutant-noncontiguous-x"

    def validate(self, x, w, out):
        if isinstance(x, torch.Tensor) and x.dim() == 2 and not x.is_contiguous():
            check_m_in_range(int(x.shape[0]), self.max_M)  # M first, as the correct checks do
            return super().validate(x.contiguous(), w, out)  # every check but the layout one
        return super().validate(x, w, out)

    def _run(self, x, w, out, M):
        if not x.is_contiguous():
            x = torch.as_strided(x, x.shape, (x.shape[1], 1))
        return super()._run(x, w, out, M)


class TransposedWeightAccepted(UnfusedGemmRs):
    """A transposed weight accepted when N == K: the layout is inferred from the shape alone, and
    ``w.mT`` of a square weight has the right shape; a ``.contiguous()`` hides the stride."""

    name = "mutant-transposed-weight-square"

    def __call__(self, x, w, out=None):
        if isinstance(w, torch.Tensor) and w.dim() == 2 and not w.is_contiguous() and tuple(w.shape) == (
            self.N, self.K
        ):
            w = w.contiguous()
        return super().__call__(x, w, out)


# --- behaviour over time ---------------------------------------------------------------------------------


class ShapeKeyedResultCache(UnfusedGemmRs):
    """A result cached per shape: a plan cache keyed by M also memoises the reduced shard, so the second
    call at an M (after alternating to another M and back) returns the first call's result."""

    name = "mutant-shape-keyed-cache"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._cache: dict[int, torch.Tensor] = {}

    def _run(self, x, w, out, M):
        hit = self._cache.get(M)
        if hit is None:
            S = self.shard_rows(M)
            y = super()._run(x, w, None, M)
            self._cache[M] = y[:S].clone()
            hit = self._cache[M]
        return _finish(self, out, hit, M)


class StaleAfterInplaceInputs(UnfusedGemmRs):
    """A graph-style replay that ignores in-place input changes: inputs are staged into the workspace
    only when their data pointers change (host-side state a CUDA-graph replay would not reproduce), so
    new values written into the same tensors are never seen."""

    name = "mutant-stale-inplace-inputs"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._staged: tuple | None = None

    def _allocate(self) -> None:  # (the base's: normal tensors in any mode -- its bug is the staleness alone)
        super()._allocate()
        self._x_stage = torch.zeros(self.max_M, self.K, dtype=torch.bfloat16, device=self.device)
        self._w_stage = torch.zeros(self.N, self.K, dtype=torch.bfloat16, device=self.device)

    def _run(self, x, w, out, M):
        key = (x.data_ptr(), w.data_ptr(), M)
        if key != self._staged:
            self._x_stage[:M].copy_(x)
            self._w_stage.copy_(w)
            self._staged = key
        return super()._run(self._x_stage[:M], self._w_stage, out, M)


class WeightBoundAtFirstCall(UnfusedGemmRs):
    """A weight descriptor built once: the first call's ``w`` is bound (a TMA descriptor or a pre-packed copy made
    at the first call, "the weights of a layer never change") and every later call reads it, whatever ``w`` it
    is given. Right for an engine that never swaps a layer's weight tensor; wrong the first time one does (a weight
    reload or an RL weight sync into new tensors), while in-place weight updates still read right."""

    name = "mutant-weight-bound-at-first-call"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._bound_w: torch.Tensor | None = None

    def _run(self, x, w, out, M):
        if self._bound_w is None:
            self._bound_w = w
        return super()._run(x, self._bound_w, out, M)


class ReductionFlagNotRestored(UnfusedGemmRs):
    """The fallback's fp32-accumulation guard without its ``finally``: it turns torch's process-wide
    ``allow_bf16_reduced_precision_reduction`` off for its own GEMM (the contract's fp32 accumulation) and never
    turns it back on. Its values are right; every other bf16 GEMM of the model runs without cuBLAS's
    reduced-precision split-K from then on (another speed, other bits)."""

    name = "mutant-reduction-flag-not-restored"

    def _gemm(self, x, w, partials):
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False  # the bug: never restored
        torch.mm(x, w.t(), out=partials)


class GradModeLeftOff(UnfusedGemmRs):
    """``torch.set_grad_enabled(False)`` at the top of the call ("no autograd in an inference kernel") where
    ``with torch.no_grad():`` was meant: the values are right, and the caller's process has grad mode off from
    its first call on -- a training step around the layer silently stops building graphs."""

    name = "mutant-grad-mode-left-off"

    def _run(self, x, w, out, M):
        torch.set_grad_enabled(False)  # the bug: a setter, not a context manager
        return super()._run(x, w, out, M)


class WorkspacePoisonDrawsRng(UnfusedGemmRs):
    """A debug poison of the shard buffer drawn with ``torch.rand`` before the collective overwrites it ("catch
    reads of unwritten rows"): the values are right, and each call advances the caller's random generator -- the
    model's dropout masks and sampling change with whether this layer ran."""

    name = "mutant-workspace-poison-draws-rng"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        self._shard[:S].copy_(torch.rand(S, self.N, device=self.device))  # the bug: the caller's generator
        return super()._run(x, w, out, M)


class MatmulPrecisionSetAtConstruction(UnfusedGemmRs):
    """``torch.set_float32_matmul_precision("high")`` in the constructor, for the speed of an fp32 helper GEMM: the
    bf16 values are right, and from the layer's construction on every fp32 matmul of the model runs in TF32."""

    name = "mutant-matmul-precision-set-at-construction"

    def __init__(self, group=None, **kwargs):
        super().__init__(group, **kwargs)
        torch.set_float32_matmul_precision("high")  # the bug: process-wide, for good


class WorkspaceAllocatedAtFirstCall(UnfusedGemmRs):
    """The partials' buffer allocated at the first call, not at construction ("no memory until the layer runs"):
    under ``torch.inference_mode()`` -- a server's warm-up -- it is an inference tensor, and the first call outside
    that mode (``torch.no_grad()`` evaluation, a training step) raises "Inplace update to inference tensor outside
    InferenceMode". Right in any one mode, and whenever the first call was not in inference mode."""

    name = "mutant-workspace-allocated-at-first-call"

    def _run(self, x, w, out, M):
        if not getattr(self, "_made", False):
            self._partials, self._made = torch.empty_like(self._partials), True  # the bug: in the first call's mode
        return super()._run(x, w, out, M)


class FallbackBuiltAtFirstCall(UnfusedGemmRs):
    """The buffers of the path for shapes the main kernel declines (N or K of 1: a GEMV) made at the first call that
    takes it -- a fallback built lazily -- in that call's autograd mode: after a warm-up under
    ``torch.inference_mode()`` they are inference tensors, and the next call outside it raises. Every shape the draw
    gives (N, K >= 2) takes the path built at construction; the fixed (1, 1) smallest-shape case, its modes rotated,
    reaches it in every run."""

    name = "mutant-fallback-built-at-first-call"

    def _run(self, x, w, out, M):
        if min(self.N, self.K) == 1 and not getattr(self, "_fallback_made", False):
            self._partials, self._fallback_made = torch.empty_like(self._partials), True  # the bug: in the call's mode
        return super()._run(x, w, out, M)


class MainPathDeclinedOnViews(UnfusedGemmRs):
    """A silent fallback behind a legitimate one: ``can_run`` checks the weight's alignment for the wrong vector width
    (``data_ptr() % 32`` where 16 bytes is the contract's), so a 16-byte aligned view of a larger buffer (a slice of a
    fused QKV / gate-up weight) runs the fallback. Every value right, and ``path_taken`` passes -- the contract sends
    a declined call to the fallback, and the summary's path mix names the reason -- while the class declares
    (``supports``, ``supports_group``) that its main path serves those shapes and groups: the verdict passed a run in
    which the named path did not run on views. ``declared_config_served`` fails it."""

    name = "mutant-main-path-declined-on-views"
    fallback_path = "unfused-fallback"

    def can_run(self, weight):
        if weight.data_ptr() % 32:  # the bug: 32 where 16 (ALIGN_BYTES) is the contract's
            return Eligibility(False, "weight.data_ptr() is not 32-byte aligned")
        return super().can_run(weight)

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)  # the same computation on either path
        if not self.can_run(w):
            self.last_path = self.fallback_path
        return y


class BuffersInCallersMode(UnfusedGemmRs):
    """Every buffer allocated in the constructor's caller's autograd mode (UnfusedGemmRs before the 30th session, and
    the fused kernel's workspace before the 31st): built inside ``torch.inference_mode()`` -- an inference-mode
    ``main``, a warm-up that builds its layers lazily -- the workspace and shard are inference tensors, and the first
    call outside that mode raises "Inplace update to inference tensor outside InferenceMode". Right whenever it is
    built outside inference mode, and for every call inside it."""

    name = "mutant-buffers-in-callers-mode"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._allocate()  # the bug: again, in the caller's mode


class FlagWordsInDefaultDtype(UnfusedGemmRs):
    """Flag words allocated with the default dtype and reinterpreted as int32 (``torch.zeros(W)`` where
    ``dtype=torch.int32`` was meant, then ``.view(torch.int32)``): 4-byte floats in every test of a process that keeps
    torch's fp32 default, so one word per rank; built under an engine's defaults (vLLM constructs its layers under
    ``set_default_torch_dtype(bf16)``) they are 2-byte bf16, half as many words, and the upper half of the ranks
    index past them (W = 1: two bytes are no int32 at all). Every value right under the fp32 default."""

    name = "mutant-flag-words-in-default-dtype"

    def _allocate(self) -> None:  # (the base's: normal tensors in any mode -- its bug is the dtype alone)
        super()._allocate()
        self._flag_store = torch.zeros(self.world_size, device=self.device)  # the bug: no dtype=torch.int32

    def _run(self, x, w, out, M):
        self._flag_store.view(torch.int32)[self.rank] += 1  # this rank's arrival count
        return super()._run(x, w, out, M)


class StagingOnDefaultDevice(UnfusedGemmRs):
    """The host staging of a device-tensor reduce-scatter over gloo allocated without naming the host
    (``torch.empty(..., pin_memory=True)``): where the default device is the host -- every process that keeps torch's
    default -- it is pinned host memory; built inside an engine's ``torch.device("cuda")`` (vLLM constructs its layers
    so) it is a GPU tensor, and pinning raises "Only dense CPU tensors can be pinned". The unfused path itself shipped
    this until the 30th session: the gate's engine-defaults cases found it on the first GPU run (one H100). GPU only
    (the CPU has no staging: ``GPU_NIGHTLY_CATALOGUE``); the lint tests/foundation/test_factories_name_device.py finds
    it in kernel/ on the CPU."""

    name = "mutant-staging-on-default-device"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        if self._staging is not None:
            host_in, host_out = self._staging
            self._staging = (torch.empty(host_in.shape, dtype=torch.bfloat16, pin_memory=True),  # the bug: no device
                             torch.empty(host_out.shape, dtype=torch.bfloat16, pin_memory=True))


class NondeterministicReduction(UnfusedGemmRs):
    """Bitwise nondeterminism: the cross-rank reduction differs from call to call (an autotuner or a
    timing-dependent path switching between a bf16 reduce of rounded partials and an fp32 reduce), so
    repeated calls on the same inputs differ in the last bit — each result within tolerance."""

    name = "mutant-nondeterministic-reduction"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._calls = 0

    def _run(self, x, w, out, M):
        self._calls += 1
        if self._calls % 2:
            return super()._run(x, w, out, M)
        S = self.shard_rows(M)
        partials = torch.zeros(self.world_size * S, self.N, dtype=torch.float32, device=self.device)
        torch.mm(x.float(), w.float().t(), out=partials[:M])
        shard = torch.empty(S, self.N, dtype=torch.float32, device=self.device)
        collectives.reduce_scatter(shard, partials, self.group)
        return _finish(self, out, shard.to(torch.bfloat16), M)


# --- numerics -------------------------------------------------------------------------------------------


class NaNSwallowed(UnfusedGemmRs):
    """NaN swallowed: the epilogue sanitises the result (``nan_to_num``, an fmax-style reduction that
    drops NaN), so a NaN from a bad input becomes a plausible 0."""

    name = "mutant-nan-swallowed"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        n_valid = self.valid_rows(M)
        y[:n_valid].copy_(torch.nan_to_num(y[:n_valid], nan=0.0, posinf=float("inf"), neginf=float("-inf")))
        return y


class NaNWeightSanitized(UnfusedGemmRs):
    """Weights sanitised when packed (``nan_to_num`` in the weight-prepack step): a NaN/Inf in w_r is lost,
    the result finite where the reference's is not. Non-finite values in x still propagate."""

    name = "mutant-nan-weight-sanitized"

    def _gemm(self, x, w, partials):
        super()._gemm(x, torch.nan_to_num(w, nan=0.0, posinf=0.0, neginf=0.0), partials)


class ZeroRowSkip(UnfusedGemmRs):
    """A sparsity shortcut: all-zero rows of x give zero rows of the partial without reading w, so
    ``0 * NaN`` (a NaN weight) comes out 0 instead of NaN."""

    name = "mutant-zero-row-skip"

    def _gemm(self, x, w, partials):
        super()._gemm(x, w, partials)
        partials[(x == 0).all(dim=1)] = 0


class NaNStickyInWorkspace(UnfusedGemmRs):
    """beta = 0 is not "ignore C": the GEMM epilogue computes ``alpha * x @ w.T + beta * C`` over the
    workspace with beta = 0, and 0 * NaN = NaN, 0 * Inf = NaN — a non-finite value left in the workspace
    by an earlier call poisons every later call whose rows overlap it (the classic BLAS beta=0 bug)."""

    name = "mutant-nan-sticky-workspace"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        partials = self._partials[: self.world_size * S]
        fresh = torch.mm(x, w.t())
        fresh.add_(partials[:M] * 0)  # beta * C with beta = 0
        partials[:M].copy_(fresh)
        partials[M:].zero_()
        shard = self._shard[:S]
        collectives.reduce_scatter(shard, partials, self.group, self._staging)
        return _finish(self, out, shard, M)


class SmallTilesSkipped(UnfusedGemmRs):
    """Values below a threshold dropped: a sparsity shortcut skips a rank's 64x64 partial tile whose
    max |value| is below 2^-10 (meant for all-zero tiles, lossy for small activations)."""

    name = "mutant-small-tiles-skipped"
    TILE = 64
    THRESHOLD = 2.0**-10

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        partials = self._partials[: self.world_size * S]
        torch.mm(x, w.t(), out=partials[:M])
        partials[M:].zero_()
        for r0 in range(0, M, self.TILE):
            for c0 in range(0, self.N, self.TILE):
                tile = partials[r0 : r0 + self.TILE, c0 : c0 + self.TILE]
                if float(tile.abs().max()) < self.THRESHOLD:  # NaN compares False: kept
                    tile.zero_()
        shard = self._shard[:S]
        collectives.reduce_scatter(shard, partials, self.group, self._staging)
        return _finish(self, out, shard, M)


class OutputScaledSlightly(UnfusedGemmRs):
    """Output scaled by (1 + 2^-7): a wrong epilogue scale (alpha from a stale fp8/bf16 scale tensor),
    small enough to hide inside a loose tolerance; exact mode sees every integer change."""

    name = "mutant-output-scaled"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        n_valid = self.valid_rows(M)
        y[:n_valid].copy_((y[:n_valid].float() * (1.0 + 2.0**-7)).to(torch.bfloat16))
        return y


class NoValidRowsSkipsCollective(UnfusedGemmRs):
    """A rank with no valid row returns early (``if n_valid == 0: return out``) without joining the
    reduce-scatter: its peers wait for it or pair with its next collective — a hang or a wrong result
    whenever M < (W - 1) * S + 1 leaves the last rank empty (M=1 at W=2)."""

    name = "mutant-no-rows-skips-collective"

    def _run(self, x, w, out, M):
        if self.valid_rows(M) == 0:
            S = self.shard_rows(M)
            return out if out is not None else torch.zeros(S, self.N, dtype=torch.bfloat16, device=self.device)
        return super()._run(x, w, out, M)


# --- path and result (issue 13) ------------------------------------------------------------------------


class SilentFallback(UnfusedGemmRs):
    """A silent fallback: the wrapper sends small M (< 128) to its unfused fallback without ``can_run``
    saying so, and reports it honestly in ``last_path`` — a gate that only compares values passes it, and
    has then gated the fallback, not the kernel it names (issue 13: fused on a host without the CuTe DSL
    bundle passed the gate on the unfused path)."""

    name = "mutant-silent-fallback"
    main_path = "fast"
    fallback_path = "unfused"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        self.last_path = "unfused" if M < self.should_run_min_m else "fast"
        return y


class LyingFallback(UnfusedGemmRs):
    """A silent fallback that lies: the "fast" main path (here a batched GEMM, ``torch.bmm``) sends small M (< 128)
    to its fallback, a plain ``torch.mm`` one, and still reports ``last_path = "fast"`` -- values right, the path
    report a lie (a wrapper whose except-clause calls the fallback after the kernel failed to build or launch and
    keeps the main path's name). ``fallback_ops`` declares ``aten.mm`` as what only the fallback runs: the gate's
    ``path_taken`` sees it dispatched under the main path's name. Without the declaration nothing could tell."""

    name = "mutant-lying-fallback"
    main_path = "fast"
    fallback_path = "unfused"
    fallback_ops = ("aten.mm",)

    def _gemm(self, x, w, partials):
        if x.shape[0] < self.should_run_min_m:
            return super()._gemm(x, w, partials)  # the fallback's torch.mm
        partials.copy_(torch.bmm(x.unsqueeze(0), w.t().unsqueeze(0))[0])  # the main path's own GEMM

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        self.last_path = "fast"  # the lie: whichever GEMM ran
        return y


class Fp32Result(UnfusedGemmRs):
    """The result's dtype follows the accumulator: without ``out=`` the epilogue allocates its output in
    fp32 (values right, bf16 contract broken: the caller's next op silently runs in fp32 or fails)."""

    name = "mutant-fp32-result"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        return y if out is not None else y.float()


class ShortResult(UnfusedGemmRs):
    """A short result: without ``out=`` only the rank's valid rows are returned (``min(S, M - r*S)`` rows
    instead of ``S = ceil(M/W)``), so shards of one call differ in shape across ranks and a caller that
    concatenates or indexes by ``r*S`` reads the wrong rows."""

    name = "mutant-short-result"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        return y if out is not None else y[: self.valid_rows(M)].clone()


class ResultAliasesWorkspace(UnfusedGemmRs):
    """The result aliases internal state: without ``out=`` the call returns a view of its reduce-scatter
    shard buffer instead of a fresh tensor (saves an allocation and a copy); the caller's result is
    overwritten by the next call."""

    name = "mutant-result-aliases-workspace"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if out is not None:
            return y
        S = self.shard_rows(M)
        self._shard[self.valid_rows(M) : S].zero_()  # padding rows zero, as a fresh result's
        return self._shard[:S]


class OutOverlappingWAccepted(UnfusedGemmRs):
    """The aliasing check compares ``out`` with the activation only: an ``out`` that overlaps the weight
    is accepted, and the epilogue's store overwrites the weight (the next layer, or the next call, reads
    a corrupted weight)."""

    name = "mutant-out-overlapping-w-accepted"

    def validate(self, x, w, out):
        if isinstance(out, torch.Tensor) and isinstance(w, torch.Tensor) and overlaps(out, w):
            w = torch.empty_like(w)  # every check of w, on a stand-in that does not overlap out
        return super().validate(x, w, out)


class AliasCheckByStart(UnfusedGemmRs):
    """The aliasing check compares start addresses only (``out.data_ptr() in (x.data_ptr(), w.data_ptr())``): an
    ``out`` that begins inside x or w, or an operand that begins inside ``out`` (two slices of one packed buffer,
    16 bytes apart), is accepted, and the epilogue's store overwrites the caller's activations or weights."""

    name = "mutant-alias-check-by-start"

    def validate(self, x, w, out):
        if isinstance(out, torch.Tensor) and out.dim() == 2:
            if isinstance(x, torch.Tensor) and overlaps(out, x) and out.data_ptr() != x.data_ptr():
                x = torch.empty_like(x)  # every check of x, on a stand-in that does not overlap out
            if isinstance(w, torch.Tensor) and overlaps(out, w) and out.data_ptr() != w.data_ptr():
                w = torch.empty_like(w)
        return super().validate(x, w, out)


def _dense_rows(t: torch.Tensor) -> bool:
    """A 2-D view whose rows are dense (unit column stride) and at least a row apart: the layouts a check of the
    column stride alone (a "TMA-legal" check: last stride 1, row stride a multiple of 16 bytes) accepts."""
    return (isinstance(t, torch.Tensor) and t.dim() == 2 and t.shape[0] >= 2 and t.stride(1) == 1
            and t.stride(0) >= t.shape[1])


def _aligned_stand_in(t):
    """An 8-byte (not 16-byte) aligned tensor stood in for by a fresh, aligned copy; anything else as it is."""
    return t.clone() if isinstance(t, torch.Tensor) and t.numel() and t.data_ptr() % 16 == 8 else t


class AlignmentCheckedFor8(UnfusedGemmRs):
    """The alignment check of 8 bytes (``data_ptr() % 8``, an ``int64``-vector width) where the contract and the
    fused kernel's TMA descriptors need 16: an operand 8 bytes past a 16-byte boundary -- a slice of a packed buffer
    at an odd multiple of 4 elements -- is accepted and handed to a kernel that cannot address it (on the GPU an
    illegal-address fault or a misread; here the values happen to be right). Operands 2 bytes off still fail."""

    name = "mutant-alignment-checked-for-8"

    def validate(self, x, w, out):
        return super().validate(_aligned_stand_in(x), _aligned_stand_in(w), _aligned_stand_in(out))


class RowStridedInputsReadDense(UnfusedGemmRs):
    """Row-strided x or w accepted and read as dense: the layout check tests the column stride and the alignment
    (what a TMA descriptor needs: unit last stride, 16-byte rows), not that rows are packed; the launch then passes
    the data pointer with the row stride the kernel was compiled for (K), so x = ``qkv[:, :K]`` -- a slice of a fused
    projection's output, rows K + 8 apart -- is read from the wrong addresses from its second row on."""

    name = "mutant-row-strided-inputs-read-dense"

    def validate(self, x, w, out):
        x = x.contiguous() if _dense_rows(x) else x  # every other check of the operand, on a packed copy
        w = w.contiguous() if _dense_rows(w) else w
        return super().validate(x, w, out)

    def _run(self, x, w, out, M):
        x = torch.as_strided(x, x.shape, (x.shape[1], 1)) if not x.is_contiguous() else x
        w = torch.as_strided(w, w.shape, (w.shape[1], 1)) if not w.is_contiguous() else w
        return super()._run(x, w, out, M)


class OutPointerRoundedTo32(UnfusedGemmRs):
    """The output pointer rounded down to the store width: an epilogue of 32-byte vector stores that takes
    ``out_ptr & ~31`` (a kernel written for outputs the allocator hands out, 256-byte aligned) where the contract
    asks 16: an ``out`` 16 bytes past a 32-byte boundary -- a slice of a larger buffer, a guarded payload -- gets
    its rows 8 elements early: the 16 bytes before it overwritten, its last 8 elements never written."""

    name = "mutant-out-pointer-rounded-to-32"

    def _run(self, x, w, out, M):
        if out is None or out.data_ptr() % 32 == 0 or out.storage_offset() < 8:
            return super()._run(x, w, out, M)
        y = super()._run(x, w, out.clone(), M)  # the rows as the kernel computed them
        n = self.valid_rows(M)
        early = torch.as_strided(out, (n * self.N,), (1,), out.storage_offset() - 8)
        early.copy_(y[:n].reshape(-1))
        return out


# --- groups, instances, dispatch (issue 14) ----------------------------------------------------------------


class GlobalRankAsGroupRank(UnfusedGemmRs):
    """The global rank used where the group rank is meant: ``self.rank = dist.get_rank()`` (the world
    rank) instead of ``dist.get_rank(group)``. On the world group they coincide; on a TP group that does not
    start at world rank 0 (DP > 1, or ranks 1 and 3 of 4) the shard offset and the valid-row count are
    computed for another rank (torch's own reduce-scatter is right; what the wrapper does with it is not)."""

    name = "mutant-global-rank-as-group-rank"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        if dist.is_available() and dist.is_initialized():
            self.rank = dist.get_rank()


class CollectiveOnWorldGroup(UnfusedGemmRs):
    """A collective on the default (world) group where the TP group is meant: the cross-rank sum is an
    ``all_reduce`` with no ``group=`` argument, then this rank's rows are taken. On the world group it is
    right; with several TP groups (DP replicas) every replica's partials are summed into every other's,
    and with ranks outside the group the collective waits for them (a hang)."""

    name = "mutant-collective-on-world-group"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        partials = torch.zeros(self.world_size * S, self.N, dtype=torch.bfloat16, device=self.device)
        torch.mm(x, w.t(), out=partials[:M])
        if collectives.backend_of(self.group) != "none" and dist.get_world_size() > 1:
            dist.all_reduce(partials)  # the bug: the default group, not self.group
        return _finish(self, out, partials[self.rank * S : (self.rank + 1) * S], M)


class CapacityAtClassLevel(UnfusedGemmRs):
    """Per-instance state kept at class level: the capacity lives in a mutable class attribute (a ``plan``
    dict shared by every instance, the classic mutable-default bug), so the instance built last sets
    every instance's max_M — a layer built for 8192 tokens then rejects a valid call after a smaller
    layer was built (and a smaller one accepts calls past its workspace)."""

    name = "mutant-capacity-at-class-level"
    _plan: dict = {}  # the bug: one dict for every instance

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._plan["max_M"] = self.max_M

    def validate(self, x, w, out):
        return check_operands(x, w, out, N=self.N, K=self.K, max_M=self._plan["max_M"],
                              world_size=self.world_size, device=self.device)


class WorkspacePerM(UnfusedGemmRs):
    """A leak: each new M gets a partials buffer of its own, kept in a plan cache keyed by M (a plan cache that
    memoises its buffers). Every result is right; the memory grows with every batch size an engine sees."""

    name = "mutant-workspace-per-m"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._plans: dict[int, torch.Tensor] = {}

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        plan = self._plans.get(M)
        if plan is None:
            plan = self._plans[M] = torch.empty(self.world_size * S, self.N, dtype=torch.bfloat16, device=self.device)
        self._gemm(x, w, plan[:M])
        plan[M:].zero_()
        shard = self._shard[:S]
        collectives.reduce_scatter(shard, plan, self.group, self._staging)
        return _finish(self, out, shard, M)


class ResultHistoryKept(UnfusedGemmRs):
    """A leak: a copy of every result is kept "for debugging" (a history never trimmed). Every result is right;
    the memory grows with every call."""

    name = "mutant-result-history-kept"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._history: list[torch.Tensor] = []

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        self._history.append(y.detach().clone())
        return y


#: WorkspaceRegistry's registry: every workspace any instance of it ever built.
_WORKSPACES: list[torch.Tensor] = []


class WorkspaceRegistry(UnfusedGemmRs):
    """A leak: every workspace is also kept in a module-level registry (for a debug dump), never removed, so
    ``close()`` and dropping the instance free nothing -- an engine that rebuilds its layers runs out of memory."""

    name = "mutant-workspace-registry"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        _WORKSPACES.append(self._ws)


class InputRescaledInPlace(UnfusedGemmRs):
    """The caller's activations scaled in place and scaled back (``x *= 3`` for a fused per-token scale, then
    ``x /= 3``): the result is right, but bf16 rounding leaves some of the caller's x a unit in the last place
    off -- the residual stream the next layer reads."""

    name = "mutant-input-rescaled-in-place"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        x.mul_(3).div_(3)
        return y


class XPaddedInPlace(UnfusedGemmRs):
    """x padded to the group's W * S rows in place where its storage has room (a packed activation buffer):
    the rows after x -- the caller's next tensor -- zeroed and x's storage read as the zero-padded operand, no
    copy. The result is right and x itself unchanged; its neighbours are not."""

    name = "mutant-x-padded-in-place"

    def _run(self, x, w, out, M):
        rows = self.world_size * self.shard_rows(M)
        room = x.untyped_storage().nbytes() // x.element_size() - x.storage_offset()
        if rows > M and room >= rows * self.K:
            torch.as_strided(x, (rows, self.K), (self.K, 1))[M:].zero_()
        return super()._run(x, w, out, M)


class XPaddedInPlaceRestored(UnfusedGemmRs):
    """:class:`XPaddedInPlace` tidied up: the rows after x (the caller's next tensor in a packed buffer) are saved,
    zeroed to pad x to W * S rows in place, and put back once the result is made. Every byte the caller reads after
    the call is as it was; while the call ran, its next tensor held zeros -- a reader on another stream, or the
    next layer's kernel already queued behind a late collective, sees them."""

    name = "mutant-x-padded-in-place-restored"

    def _run(self, x, w, out, M):
        rows = self.world_size * self.shard_rows(M)
        room = x.untyped_storage().nbytes() // x.element_size() - x.storage_offset()
        if rows <= M or room < rows * self.K:
            return super()._run(x, w, out, M)
        tail = torch.as_strided(x, (rows, self.K), (self.K, 1))[M:]
        saved = tail.clone()
        tail.zero_()
        try:
            return super()._run(x, w, out, M)
        finally:
            tail.copy_(saved)


class InputScaledAndUnscaled(UnfusedGemmRs):
    """A per-tensor scale folded into the caller's activations in place and undone after the call (``x *= 2**-4``
    to keep a low-precision intermediate in range, then ``x *= 2**4``): powers of two, so x gets back its exact bits
    (no value here is near bf16's subnormals), and the result is right -- but while the call ran, x held other
    values: the caller's residual stream, read on another stream, was scaled."""

    name = "mutant-input-scaled-and-unscaled"
    SCALE = 2.0**-4

    def _run(self, x, w, out, M):
        x.mul_(self.SCALE)
        try:
            y = super()._run(x, w, out, M)
            y[: self.valid_rows(M)].mul_(1 / self.SCALE)
            return y
        finally:
            x.mul_(1 / self.SCALE)


class EpochStamped(UnfusedGemmRs):
    """Not a bug: the correct implementation with a flag protocol's call counter, emulated on the host -- a
    staging buffer of the shard in 64-row blocks, each with a ready word holding the epoch the block was last
    stored in; a call at epoch ``e`` treats a block whose word already reads ``e`` as signalled and reads the
    staged rows (the peers' data of a real protocol) without waiting. Epochs count calls mod 2^32 and skip 0
    (0: never stored), so a word never equals the running call's epoch before its store. It keeps the contract's
    counter clause (``call_counter_bits``, ``advance_call_counter``): the engine fixture the counter-wrap family
    passes on (tests/foundation/test_counter_wrap.py); :class:`EpochZeroReused` is its bug."""

    name = "fixture-epoch-stamped"
    call_counter_bits = 32
    skip_zero = True
    BLOCK_ROWS = 64

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        self._epoch = 0

    def _allocate(self) -> None:  # (the base's: normal tensors in any mode, CONTRACT "Autograd modes")
        super()._allocate()
        blocks = -(-self.shard_rows(self.max_M) // self.BLOCK_ROWS)
        self._staged = torch.zeros(blocks * self.BLOCK_ROWS, self.N, dtype=torch.bfloat16, device=self.device)
        self._ready = torch.zeros(blocks, dtype=torch.int64, device=self.device)

    def call_counter(self) -> int:
        return self._epoch

    def advance_call_counter(self, calls: int) -> None:
        cycle = (1 << 32) - 1
        self._epoch = (self._epoch - 1 + int(calls)) % cycle + 1 if calls else self._epoch
        self._ready = torch.where(self._ready == 0, self._ready, (self._ready - 1 + int(calls)) % cycle + 1)

    def _run(self, x, w, out, M):
        epoch = (self._epoch + 1) % (1 << 32)
        if epoch == 0 and self.skip_zero:
            epoch = 1
        y = super()._run(x, w, out, M)
        S, n = self.shard_rows(M), self.valid_rows(M)
        blocks = -(-S // self.BLOCK_ROWS)
        signalled = (self._ready[:blocks] == epoch).repeat_interleave(self.BLOCK_ROWS)[:n]
        if bool(signalled.any()):  # read without waiting: what the staging buffer held
            y[:n][signalled] = self._staged[:n][signalled]
        self._staged[:n].copy_(y[:n])
        self._ready[:blocks] = epoch
        self._epoch = epoch
        return y


class EpochZeroReused(EpochStamped):
    """Epoch wrap: the call counter is not skipped past 0 when it wraps after 2^32 - 1 calls, so the call at
    epoch 0 finds every ready word never stored since the workspace was zeroed already "signalled" and reads
    the staging buffer's stale rows (a server's silent wrong results after ~36 hours of 30-us calls).
    Reachable only through the contract's ``advance_call_counter`` (the counter-wrap family)."""

    name = "mutant-epoch-zero-reused"
    skip_zero = False


class ThresholdAtClassLevel(UnfusedGemmRs):
    """A per-shape should_run crossover (from a tuning table: it pays at fewer rows for a larger N x K)
    stored on the class instead of the instance: the layer built last sets every layer's threshold, so a
    layer's dispatch for the same M changes when another layer is built (``type(self).x = ...``)."""

    name = "mutant-threshold-at-class-level"

    def __init__(self, group=None, *, max_M, N, K, device=None):
        super().__init__(group, max_M=max_M, N=N, K=K, device=device)
        type(self).should_run_min_m = max(1, (1 << 20) // (self.N * self.K))  # the bug: type(self), not self


class ShouldRunOnLocalRows(UnfusedGemmRs):
    """should_run decided on the rank's own token count: ``valid_rows(M) * W >= threshold`` (the rows this
    rank returns, scaled up) instead of M. Where M is not a multiple of W the ranks near the threshold
    disagree (M = 127, W = 2: rank 0 says yes, rank 1 no), and a layer's ranks run different collectives."""

    name = "mutant-should-run-on-local-rows"

    def should_run(self, x):
        return self.valid_rows(int(x.shape[0])) * self.world_size >= self.should_run_min_m


class PathByLocalRows(UnfusedGemmRs):
    """A code path chosen from the rank's own rows instead of from M: the GEMM accumulates K in 64-wide chunks,
    each rounded to bf16 (a "small tile" path), once the rank's valid rows reach 64. Where M is not a multiple of
    W the ranks near the threshold run different paths for one call (M = 127, W = 2: rank 0 has 64 rows, rank 1
    63) -- in a fused kernel, different kernels that wait for each other's signals forever (the 13th session's
    W = 8 trap had this shape: one rank's tile configs built from facts its peers did not share). It states its
    path table honestly; the tables differ across ranks."""

    name = "mutant-path-by-local-rows"
    CHUNKED_ROWS = 64

    def path_table(self):
        first = next((M for M in range(1, self.max_M + 1) if self.valid_rows(M) >= self.CHUNKED_ROWS), None)
        return ((1, "one fp32 pass"),) + (((first, "bf16 K chunks"),) if first is not None else ())

    def _gemm(self, x, w, partials):
        if self.valid_rows(int(x.shape[0])) < self.CHUNKED_ROWS:
            return super()._gemm(x, w, partials)
        acc = torch.zeros(partials.shape, dtype=torch.float32, device=partials.device)
        for k0 in range(0, self.K, 64):
            acc += (x[:, k0:k0 + 64].float() @ w[:, k0:k0 + 64].float().t()).bfloat16().float()
        partials.copy_(acc)
        return None


class GemvFlatResult(UnfusedGemmRs):
    """A GEMV fast path for N = 1 (one output column: a matrix-vector product) that returns its shard flat, (S,)
    instead of (S, 1), when it allocates the result; into a caller's ``out`` it writes right."""

    name = "mutant-gemv-flat-result"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        return y.view(-1) if self.N == 1 and out is None else y


class KBelowOneStepSkipped(UnfusedGemmRs):
    """A main loop over k-steps of 16 (one MMA's K) that runs ``K // 16`` of them: a K below one step (K = 1 .. 15)
    runs none and the partials stay 0; every K from 16 up is right (a K tail of 16 or more is loaded)."""

    name = "mutant-k-below-one-step"
    K_STEP = 16

    def _gemm(self, x, w, partials):
        if self.K < self.K_STEP:
            partials.zero_()
            return None
        return super()._gemm(x, w, partials)


# --- peer-style implementations (2026-12-06 audit: mutants/peer_styles.py) ---------------------------------------
# Written the way other projects write GEMM-RS; those the gate let through are rows of the matrix, defined here (each
# matrix class lives in this module) as the peer module's class under the same name.


class PeerResultCacheByPtrVersion(peer_styles.PeerResultCacheByPtrVersion):
    """A memoised forward keyed by ``(x.data_ptr(), x._version, w.data_ptr(), w._version, M)``: stale where new
    values reach the same memory without a version bump (a Triton / C++ kernel or a receive writing through the
    pointer, a freed input's memory handed to the next). PASSED the smoke gate before the in-place check wrote
    past the version counters (:class:`mutants.peer_styles.PeerResultCacheByPtrVersion`)."""


# --- the matrix --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MutantSpec:
    """One row of the kill matrix: the mutant, the world sizes it runs at in CI (the nightly run adds
    more), and the properties expected to catch it (check names, or ``hang`` / ``died`` for the
    liveness watchdog): the matrix flags a kill by any other property as a mismatch (any failing
    property or the watchdog kills; a harness error never does)."""

    name: str
    world_sizes: tuple[int, ...]
    expected: tuple[str, ...]
    #: tests to run first in a kill session, before those of ``expected`` (mutants.meta.PROPERTY_TEST): a fixed
    #: test that reaches the bug where the expected property's usual test never draws it, or sooner. A world-size
    #: set whose every mutant names its tests runs only those (mutants.meta._sessions)
    tests: tuple[str, ...] = ()

    def __post_init__(self):
        if isinstance(self.expected, str) or not self.expected or \
                not all(isinstance(e, str) and e.isidentifier() for e in self.expected):
            raise TypeError(f"{self.name}: expected must be a non-empty tuple of property names, "
                            f"not {self.expected!r}")
        if isinstance(self.tests, str) or not all(isinstance(t, str) and t.startswith("test_") for t in self.tests):
            raise TypeError(f"{self.name}: tests must be a tuple of test names, not {self.tests!r}")

    @property
    def impl(self) -> str:
        return f"mutants.catalogue:{self.name}"


CATALOGUE: tuple[MutantSpec, ...] = (
    MutantSpec("DroppedRankOddM", (2,), ("within_tolerance",)),
    MutantSpec("DoubleCountedRank", (2,), ("within_tolerance",)),
    MutantSpec("ShardPermutation", (2,), ("within_tolerance",)),
    MutantSpec("ShiftedRowAtShardBoundary", (2,), ("within_tolerance",)),
    # (a loaded host's jitter past its 20 ms also trips it in the calls after the late one: in place, batch)
    MutantSpec("LateRankReadsStaleBuffer", (2,), ("within_tolerance", "fresh_per_call", "inputs_changed_in_place",
                                                  "batch_invariant")),
    MutantSpec("PaddingRowsZeroed", (2,), ("padded_rows_untouched",)),
    MutantSpec("PaddingRowsGarbage", (2,), ("padded_rows_untouched",)),
    MutantSpec("RowPastEndOfOut", (2,), ("guard_regions_untouched",)),
    MutantSpec("WorkspaceOverrun", (2,), ("guard_regions_untouched",)),
    MutantSpec("OutIgnored", (2,), ("returns_out",)),
    MutantSpec("CapacityAsAssert", (2,), ("capacity_rejected",)),
    MutantSpec("ZeroMAccepted", (2,), ("capacity_rejected",)),
    MutantSpec("WorkQueuedBeforeCheck", (2,), ("capacity_rejected", "bad_call_rejected")),
    MutantSpec("WrongDtypeAccepted", (2,), ("bad_call_rejected",)),
    MutantSpec("NonContiguousXReadWrongly", (2,), ("bad_call_rejected",)),
    MutantSpec("TransposedWeightAccepted", (2,), ("bad_call_rejected",)),
    MutantSpec("ShapeKeyedResultCache", (2,), ("within_tolerance", "fresh_per_call", "inputs_changed_in_place")),
    MutantSpec("StaleAfterInplaceInputs", (2,), ("inputs_changed_in_place",)),
    MutantSpec("NondeterministicReduction", (2,), ("repeatable",)),
    MutantSpec("NaNSwallowed", (2,), ("nonfinite_pattern_matches",)),
    MutantSpec("NaNStickyInWorkspace", (2,), ("nonfinite_pattern_matches", "fresh_per_call")),
    MutantSpec("NaNWeightSanitized", (2,), ("nonfinite_pattern_matches",)),
    MutantSpec("ZeroRowSkip", (2,), ("nonfinite_pattern_matches",)),
    MutantSpec("SmallTilesSkipped", (2,), ("within_tolerance",)),
    MutantSpec("OutputScaledSlightly", (2,), ("bitwise_equal", "within_tolerance")),
    MutantSpec("NoValidRowsSkipsCollective", (2,), ("hang", "within_tolerance", "path_taken")),
    MutantSpec("SilentFallback", (2,), ("path_taken",)),
    MutantSpec("LyingFallback", (2,), ("path_taken",)),
    MutantSpec("Fp32Result", (2,), ("result_contract",), tests=("test_smallest_shapes",)),
    MutantSpec("ShortResult", (2,), ("result_contract",), tests=("test_smallest_shapes",)),
    MutantSpec("ResultAliasesWorkspace", (2,), ("fresh_result", "earlier_results_unchanged"),
               tests=("test_smallest_shapes",)),
    MutantSpec("OutOverlappingWAccepted", (2,), ("bad_call_rejected",)),
    # numerics (issue 15): inside the tolerance and bitwise right on exact inputs
    MutantSpec("BiasedRounding", (2,), ("no_systematic_bias",)),
    MutantSpec("BiasedRoundingHalfAway", (2,), ("no_systematic_bias",)),
    MutantSpec("ScaleError", (2,), ("no_systematic_bias",)),
    MutantSpec("PositionDependentRow", (2,), ("batch_invariant",)),
    MutantSpec("SplitKPartialsInBf16", (2,), ("within_tolerance", "inputs_changed_in_place")),
    # shapes (issue 15): tails drawn where supports(N, K) says yes
    MutantSpec("KTailNeverLoaded", (2,), ("within_tolerance", "bitwise_equal")),
    MutantSpec("NTailNotReduced", (2,), ("within_tolerance", "bitwise_equal")),
    MutantSpec("StorageOffsetIgnored", (2,), ("within_tolerance", "bitwise_equal")),
    # kernel paths (8th session): a path only rare shapes select, declared and so called in every run
    MutantSpec("RarePathKPartDropped", (2,), ("within_tolerance", "batch_invariant", "inputs_changed_in_place")),
    # dimensions (issue 14): groups, instances, dispatch
    MutantSpec("GlobalRankAsGroupRank", (2,), ("within_tolerance", "padded_rows_untouched")),
    MutantSpec("CollectiveOnWorldGroup", (2,), ("within_tolerance", "hang")),
    MutantSpec("CapacityAtClassLevel", (2,), ("call_raised",)),
    MutantSpec("ThresholdAtClassLevel", (2,), ("should_run_stable",)),
    MutantSpec("ShouldRunOnLocalRows", (2,), ("dispatch_agrees_across_ranks",), tests=("test_dispatch_crossover",)),
    MutantSpec("PathByLocalRows", (2,), ("kernel_paths_agree_across_ranks",)),
    # memory (18th session): results right, memory kept per M or per call
    MutantSpec("WorkspacePerM", (2,), ("memory_bounded",)),
    MutantSpec("ResultHistoryKept", (2,), ("memory_bounded",)),
    MutantSpec("WorkspaceRegistry", (2,), ("released_on_close",)),
    # inputs (18th session): the caller's x changed by the call
    MutantSpec("InputRescaledInPlace", (2,), ("inputs_untouched", "repeatable")),
    MutantSpec("XPaddedInPlace", (2,), ("inputs_untouched",)),
    # written while the call ran, put back before it returned: seen in the call's ops, not in its end state
    MutantSpec("XPaddedInPlaceRestored", (2,), ("inputs_untouched",)),
    # planted-bug audit (33rd session): the table misaligned operands by 2 bytes only
    MutantSpec("AlignmentCheckedFor8", (2,), ("bad_call_rejected",)),
    MutantSpec("InputScaledAndUnscaled", (2,), ("inputs_untouched",)),
    # audit (20th session): a bad operand decided after a collective; a padded-row out written dense; the empty
    # rank's row count not clamped at 0
    MutantSpec("CollectiveBeforeCheck", (2,), ("bad_call_rejected", "capacity_rejected")),
    MutantSpec("RowStridedOutAccepted", (2,), ("bad_call_rejected",)),
    MutantSpec("EmptyRankNegativeRowCount", (4,), ("padded_rows_untouched",), tests=("test_shard_boundaries",)),
    # smallest shapes (21st session): N = 1, K = 1, fixed cases (the draw's N and K start at 2)
    MutantSpec("GemvFlatResult", (2,), ("result_contract",), tests=("test_smallest_shapes",)),
    MutantSpec("KBelowOneStepSkipped", (2,), ("within_tolerance", "bitwise_equal"), tests=("test_smallest_shapes",)),
    # model sizes (23rd session): right at every size the CPU draw reaches (N, K <= 320), wrong past 1024 / 4096
    MutantSpec("DeepKChunkTailDropped", (2,), ("within_tolerance", "bitwise_equal"), tests=("test_model_shapes",)),
    MutantSpec("WideNBlockUnwritten", (2,), ("within_tolerance", "bitwise_equal"), tests=("test_model_shapes",)),
    # a far-late rank (23rd session): exact at every drawn skew (<= 100 ms), its rows dropped past a 0.5 s timeout
    MutantSpec("LateRankDroppedAfterTimeout", (2,), ("within_tolerance", "bitwise_equal"), tests=("test_late_rank",)),
    # counters (19th session): right until the call counter wraps, reached through advance_call_counter
    MutantSpec("EpochZeroReused", (2,), ("within_tolerance", "bitwise_equal")),
    # weights (19th session): a weight swapped into a new tensor between calls
    MutantSpec("WeightBoundAtFirstCall", (2,), ("batch_invariant", "within_tolerance")),
    # the caller's process (28th session): values right, the caller's flags, grad mode or generator changed
    MutantSpec("ReductionFlagNotRestored", (2,), ("ambient_state_kept",)),
    MutantSpec("GradModeLeftOff", (2,), ("ambient_state_kept",)),
    MutantSpec("WorkspacePoisonDrawsRng", (2,), ("ambient_state_kept",)),
    MutantSpec("MatmulPrecisionSetAtConstruction", (2,), ("ambient_state_kept",)),
    # autograd modes (28th session): a lazily allocated workspace, an inference tensor after an inference-mode call
    MutantSpec("WorkspaceAllocatedAtFirstCall", (2,), ("call_raised",)),
    MutantSpec("FallbackBuiltAtFirstCall", (2,), ("call_raised",), tests=("test_smallest_shapes",)),
    MutantSpec("BuffersInCallersMode", (2,), ("call_raised",), tests=("test_smallest_shapes",)),
    # a silent fallback (31st session): can_run declines what the class declares its main path serves
    MutantSpec("MainPathDeclinedOnViews", (2,), ("declared_config_served",)),
    MutantSpec("FlagWordsInDefaultDtype", (2,), ("call_raised",)),
    # audit (32nd session): layouts the bad-call table did not make, a bad call on one rank alone, an out no guarded
    # payload put at 16 mod 32
    MutantSpec("AliasCheckByStart", (2,), ("bad_call_rejected",)),
    MutantSpec("RowStridedInputsReadDense", (2,), ("bad_call_rejected",)),
    MutantSpec("SlotCounterBeforeCheck", (2,), ("within_tolerance", "bitwise_equal"), tests=("test_bad_call",)),
    MutantSpec("OutPointerRoundedTo32", (2,), ("guard_regions_untouched", "within_tolerance", "bitwise_equal",
                                               "padded_rows_untouched")),
    # peer-style audit (2026-12-06): a result cache keyed by pointer and version counter, stale past a write that
    # does not bump the version (inputs_changed_in_place writes through .data)
    MutantSpec("PeerResultCacheByPtrVersion", (2,), ("inputs_changed_in_place",)),
)

#: Names loadable by ``--impl mutants.catalogue:NAME`` that are engine fixtures, not matrix rows.
ENGINE_FIXTURES = ("HangOnM", "CrashOnM", "PowerOfTwoGroupsOnly", "AdapterStyleNoOut", "UnalignedMRejected",
                   "NonContiguousXHandled", "EpochStamped")


def spec(name: str) -> MutantSpec:
    for s in CATALOGUE:
        if s.name == name:
            return s
    raise KeyError(f"no mutant {name!r} in the catalogue; one of {[s.name for s in CATALOGUE]}")


class AdapterStyleNoOut(UnfusedGemmRs):
    """Not a bug: an adapter-style implementation that waives out= and typed errors (like PyTorch's
    async-TP op) and has no capacity bound. The gate must skip those clauses with the reasons and check
    everything else (engine self-test of waivers)."""

    name = "adapter-style-no-out"
    waived_clauses = {
        "out_param": "allocates its own output",
        "capacity_check": "no capacity bound",
        "typed_errors": "raises the library's own errors",
    }

    def validate(self, x, w, out):
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.dtype != torch.bfloat16 or not x.is_contiguous():
            raise RuntimeError("library error: x must be a contiguous 2-D bf16 tensor")
        if x.device != self.device:
            raise RuntimeError("library error: wrong device")
        if x.data_ptr() % 16:
            raise RuntimeError("library error: misaligned x")
        if x.shape[1] != self.K:
            raise RuntimeError("library error: x and the weight differ in K")
        if not isinstance(w, torch.Tensor) or tuple(w.shape) != (self.N, self.K) or w.dtype != torch.bfloat16 \
                or not w.is_contiguous() or w.device != self.device or w.data_ptr() % 16:
            raise RuntimeError("library error: bad weight")
        return int(x.shape[0])

    def _run(self, x, w, out, M):
        return super()._run(x, w, None, M)


class UnalignedMRejected(UnfusedGemmRs):
    """Not a bug: supports only M divisible by W and says so (``unaligned_m`` waived); like a library op,
    it looks at M before anything else, so the gate must give it aligned M in every family (a bad call or
    a capacity case at unaligned M would otherwise be rejected for the wrong reason)."""

    name = "aligned-m-only"
    waived_clauses = {"unaligned_m": "the op splits M evenly across ranks"}

    def validate(self, x, w, out):
        if isinstance(x, torch.Tensor) and x.dim() == 2 and x.shape[0] % self.world_size:
            raise ShapeError(f"M={x.shape[0]} is not a multiple of W={self.world_size}")
        return super().validate(x, w, out)


class NonContiguousXHandled(UnfusedGemmRs):
    """A contract violation with right values: accepts a non-contiguous x (no layout check) and computes
    it correctly (like a library op that copies). The gate fails it and says the result was right."""

    name = "noncontiguous-x-handled"

    def validate(self, x, w, out):
        if isinstance(x, torch.Tensor) and x.dim() == 2 and not x.is_contiguous():
            return super().validate(x.contiguous(), w, out)
        return super().validate(x, w, out)

    def _run(self, x, w, out, M):
        return super()._run(x.contiguous(), w, out, M)


# --- numerics mutants (issue 15) ---------------------------------------------------------------------------
# Results that stay inside the per-element tolerance and, on exact inputs, bitwise right: only the
# statistical bias check (properties/bias.py) or batch invariance (properties/batch_invariance.py) sees them.

BF16_DROPPED_BITS = 16  # a bf16 is the upper half of a float32


def bf16_toward_zero(t32: torch.Tensor) -> torch.Tensor:
    """float32 -> bf16 by dropping the low 16 bits (``uint32 >> 16``: round toward zero)."""
    bits = t32.contiguous().view(torch.int32)
    kept = torch.bitwise_and(bits, -(1 << BF16_DROPPED_BITS))
    return _finite_or_rne(t32, kept.view(torch.float32))


def bf16_half_away(t32: torch.Tensor) -> torch.Tensor:
    """float32 -> bf16 by adding half a bf16 ulp to the magnitude, then dropping the low 16 bits
    (``(u + 0x8000) >> 16``: round to nearest, ties away from zero)."""
    bits = t32.contiguous().view(torch.int32)
    kept = torch.bitwise_and(bits + (1 << (BF16_DROPPED_BITS - 1)), -(1 << BF16_DROPPED_BITS))
    return _finite_or_rne(t32, kept.view(torch.float32))


def _finite_or_rne(t32: torch.Tensor, rounded32: torch.Tensor) -> torch.Tensor:
    """The biased conversion on finite values; NaN and Inf converted as torch does (a NaN's bits plus
    0x8000 could carry into the sign)."""
    return torch.where(torch.isfinite(t32), rounded32, t32).to(torch.bfloat16)


class _Fp32ReducedEpilogue(UnfusedGemmRs):
    """Shared shape of the numerics mutants: per-rank fp32 accumulators (or their bf16 roundings, which
    the contract allows), reduced in fp32 (one fp32 reduce-scatter, same schedule on every rank), then
    converted to bf16 by :meth:`_to_bf16` — the step each mutant gets wrong."""

    round_partials = False  # True: partials rounded to bf16 before the fp32 sum (as a bf16 reduce-scatter)

    def _fp32_shard(self, x, w, M: int) -> torch.Tensor:
        S = self.shard_rows(M)
        partials = torch.zeros(self.world_size * S, self.N, dtype=torch.float32, device=self.device)
        if self.round_partials:
            partials[:M] = torch.mm(x, w.t()).float()
        else:
            torch.mm(x.float(), w.float().t(), out=partials[:M])
        shard = torch.empty(S, self.N, dtype=torch.float32, device=self.device)
        collectives.reduce_scatter(shard, partials, self.group)
        return shard

    def _to_bf16(self, shard32: torch.Tensor) -> torch.Tensor:
        return shard32.to(torch.bfloat16)

    def _run(self, x, w, out, M):
        return _finish(self, out, self._to_bf16(self._fp32_shard(x, w, M)), M)


class BiasedRounding(_Fp32ReducedEpilogue):
    """Biased final rounding: the epilogue converts the fp32 result to bf16 by taking its upper 16 bits
    (``__float2bfloat16_rz``, a hand-written ``u >> 16``) instead of round-to-nearest-even. Every element
    stays within one ulp, so within the tolerance, and exact results are representable, so exact mode
    is bitwise right; but magnitudes shrink by half an ulp on average."""

    name = "mutant-biased-rounding"

    def _to_bf16(self, shard32):
        return bf16_toward_zero(shard32)


class BiasedRoundingHalfAway(_Fp32ReducedEpilogue):
    """Ties rounded away from zero: the epilogue converts with ``(u + 0x8000) >> 16`` (round half away,
    the schoolbook rounding) instead of half to even. Differs from RNE only on ties — frequent once
    bf16 partials are summed (two bf16 values of one binade sum to 9 significant bits), so from W = 2
    magnitudes grow by a quarter ulp on the tied elements."""

    name = "mutant-biased-rounding-half-away"
    round_partials = True

    def _to_bf16(self, shard32):
        return bf16_half_away(shard32)


class ScaleError(_Fp32ReducedEpilogue):
    """A scale off by 2^-9: the epilogue multiplies the fp32 result by alpha = 1 - 2^-9 before rounding
    (an alpha read from a stale or wrongly-rounded scale tensor). A quarter to half an ulp per element:
    inside the tolerance, and exact mode only sees it on results >= 128. Applied to the bf16 result
    instead, (1 - 2^-9) rounds back to the same bf16 number — a no-op, not a mutant."""

    name = "mutant-scale-error"
    SCALE = 1.0 - 2.0**-9

    def _to_bf16(self, shard32):
        return (shard32 * self.SCALE).to(torch.bfloat16)


class PositionDependentRow(UnfusedGemmRs):
    """A row's result depends on where it sits: rows of the last, partial M tile (M % 64 of them) go
    through a separate remainder epilogue that sums the ranks' fp32 partials and rounds once, while full
    tiles reduce bf16-rounded partials. Both are conforming numerics (within tolerance; bitwise right on
    exact inputs), but the same token gives different bits at M = 100 (row 70 in the remainder tile) and
    at M = 128 — what batch invariance forbids (a token's output must not depend on its batch). From
    W = 2: at W = 1 both paths round the same accumulator once."""

    name = "mutant-position-dependent-row"
    TILE = 64

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        tail0 = (M // self.TILE) * self.TILE
        if tail0 == M:
            return y  # no partial tile
        S = self.shard_rows(M)
        partials = torch.zeros(self.world_size * S, self.N, dtype=torch.float32, device=self.device)
        torch.mm(x[tail0:].float(), w.float().t(), out=partials[tail0:M])
        shard = torch.empty(S, self.N, dtype=torch.float32, device=self.device)
        collectives.reduce_scatter(shard, partials, self.group)  # every rank: M is the same on all
        r0, n_valid = self.rank * S, self.valid_rows(M)
        tail_rows = range(max(tail0 - r0, 0), n_valid)
        if len(tail_rows):
            y[tail_rows.start : tail_rows.stop].copy_(shard[tail_rows.start : tail_rows.stop].to(torch.bfloat16))
        return y


class SplitKPartialsInBf16(UnfusedGemmRs):
    """Split-K parts reduced in bf16: the GEMM splits K in two, and each part's fp32 partial is rounded to
    bf16 before the parts are added (cuBLAS's split-K under torch's default
    ``allow_bf16_reduced_precision_reduction``; a fused kernel's split-K workspace of bf16). One extra rounding
    per part of a K-prefix, not of the partial: on gaussian data it stays inside the tolerance at most shapes
    (the parts are no larger than the partial), on exact data nothing is rounded; the cancel input kind (a
    K-prefix ~2^8 times the partial) shows it."""

    name = "mutant-split-k-partials-in-bf16"

    def _gemm(self, x, w, partials):
        h = self.K // 2
        lo = torch.mm(x[:, :h].float(), w[:, :h].float().t()).to(torch.bfloat16)
        hi = torch.mm(x[:, h:].float(), w[:, h:].float().t()).to(torch.bfloat16)
        partials.copy_(lo.float() + hi.float())


# --- shape mutants (issue 15): tails the gate draws from supports(N, K) ----------------------------------------


class RarePathKPartDropped(UnfusedGemmRs):
    """A code path only rare shapes select is broken: like a split-K config the cost model picks only at long K
    and M in 193..256, this path drops the last quarter of K (a part never added). The implementation declares
    the path (``declared_paths``), as the fused kernel declares its tile configs: the gate's random draw seldom
    lands on it (K >= 288 and M in 193..256 on the CPU shapes), ``test_kernel_paths`` calls it in every run."""

    name = "mutant-rare-path-k-part-dropped"
    RARE_K = 288
    RARE_M = (193, 256)

    @classmethod
    def declared_paths(cls, world_size: int) -> tuple:
        return (KernelPath("rare path: K >= 288, M = 193..256", 64, 320, 200),)

    def _gemm(self, x, w, partials):
        if self.K >= self.RARE_K and self.RARE_M[0] <= x.shape[0] <= self.RARE_M[1]:
            kept = self.K - self.K // 4
            x, w = x[:, :kept], w[:, :kept]
        super()._gemm(x, w, partials)


class KTailNeverLoaded(UnfusedGemmRs):
    """K tail never loaded: the mainloop runs ``K // 64`` full K tiles and the last ``K % 64`` columns of x and
    w never reach the accumulator (a k-tile count rounded down, a TMA box whose partial last tile is dropped
    instead of zero-filled: ROCm/iris#21, flashinfer-ai/flashinfer#4358 class). Shapes with K % 64 == 0 — all
    the gate drew before issue 15 — are exact."""

    name = "mutant-k-tail-never-loaded"
    K_TILE = 64

    def _run(self, x, w, out, M):
        k_full = self.K - self.K % self.K_TILE
        if k_full != self.K:
            x = x.clone()
            x[:, k_full:] = 0  # the tail's products never summed (an allocation per call: a mutant may)
        return super()._run(x, w, out, M)


class NTailNotReduced(UnfusedGemmRs):
    """N tail not reduced: the epilogue's cross-rank sum walks full 256-wide N tiles, so the last ``N % 256``
    columns keep this rank's own partial instead of the sum over ranks (a tile loop bound rounded down in
    the reduce-scatter only: tenstorrent/tt-metal#25212 class). Invisible at W = 1 and for N % 256 == 0."""

    name = "mutant-n-tail-not-reduced"
    N_TILE = 256

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        n_full = self.N - self.N % self.N_TILE
        n_valid = self.valid_rows(M)
        if n_full != self.N and self.world_size > 1 and n_valid:
            r0 = self.rank * self.shard_rows(M)
            y[:n_valid, n_full:] = torch.mm(x[r0 : r0 + n_valid], w[n_full:].t())
        return y


# --- model sizes (23rd session) -------------------------------------------------------------------------------


class DeepKChunkTailDropped(UnfusedGemmRs):
    """Deep-K chunk tail dropped: K is walked in 1024-deep chunks (a split of the K loop for an fp32 staging buffer,
    a k-block of a CPU GEMM) and a partial last chunk is never summed -- past K = 1024 only, so every K the CPU
    draw reaches (<= 320) and every multiple of 1024 is exact: the model-size case K = 1440 loses 416 columns."""

    name = "mutant-deep-k-chunk-tail-dropped"
    K_CHUNK = 1024

    def _run(self, x, w, out, M):
        k_whole = self.K - self.K % self.K_CHUNK
        if self.K > self.K_CHUNK and k_whole != self.K:
            x = x.clone()
            x[:, k_whole:] = 0  # the last partial chunk's products never summed (an allocation per call: a mutant may)
        return super()._run(x, w, out, M)


class WideNBlockUnwritten(UnfusedGemmRs):
    """Wide-N block unwritten: the result is written in 4096-wide column blocks and a partial last block is never
    written (a block loop bound rounded down past the first block), so for N > 4096 the last ``N % 4096`` columns
    of each valid row are the fresh buffer's zeros or what ``out`` held. Every N the CPU draw reaches (<= 320) and
    every multiple of 4096 is exact: the model-size case N = 7168 leaves 3072 columns."""

    name = "mutant-wide-n-block-unwritten"
    N_BLOCK = 4096

    def _run(self, x, w, out, M):
        before = None if out is None else out.clone()
        y = super()._run(x, w, out, M)
        n_whole = self.N - self.N % self.N_BLOCK
        n_valid = self.valid_rows(M)
        if self.N > self.N_BLOCK and n_whole != self.N and n_valid:
            y[:n_valid, n_whole:] = 0 if before is None else before[:n_valid, n_whole:]
        return y


# --- views (issue 15) -----------------------------------------------------------------------------------------


class StorageOffsetIgnored(UnfusedGemmRs):
    """Storage offset ignored: the wrapper hands the kernel ``x.untyped_storage().data_ptr()`` (the base of
    the storage) instead of ``x.data_ptr()``, so an aligned view into a larger buffer — a slice of a fused QKV
    or gate/up activation, a packed batch — is read from the buffer's start. Every plain tensor the gate drew
    before issue 15 has offset 0 and is computed right."""

    name = "mutant-storage-offset-ignored"

    def _run(self, x, w, out, M):
        if x.storage_offset():
            x = torch.empty(0, dtype=x.dtype, device=x.device).set_(x.untyped_storage(), 0, x.shape, x.stride())
        return super()._run(x, w, out, M)


# --- byte boundaries (issue 15, item 5: nightly, GPU) --------------------------------------------------------


class OffsetWraps32(UnfusedGemmRs):
    """32-bit offset overflow: the GEMM's store offsets into the workspace are held in 32 bits, so the bytes of
    rows past ``WRAP_BYTES`` (2^31: a signed int offset) land at ``offset mod WRAP_BYTES`` — over the first rows
    — and the rows past it keep whatever the workspace held (an ``int`` row * ld product, a 32-bit TMA
    coordinate: the capacity bugs of kernels only ever run below 2 GiB). Emulated at the wrapper level: the
    product is written segment by segment, each 2^31-byte segment again at offset 0. Below the limit it is the
    correct implementation; it needs max_M * N * 2 > 2^31 bytes, so only the nightly GPU byte_boundary family
    reaches it (``GPU_NIGHTLY_CATALOGUE``); tests/foundation/test_byte_boundary.py kills it at a small emulated
    limit on the CPU."""

    name = "mutant-offset-wraps-32"
    WRAP_BYTES = 2**31

    def _gemm(self, x, w, partials):
        wrap = self.WRAP_BYTES // partials.element_size()
        if partials.numel() <= wrap:
            return super()._gemm(x, w, partials)
        product = torch.mm(x, w.t()).reshape(-1)
        flat = partials.reshape(-1)  # the workspace's first M rows: contiguous, a view
        for start in range(0, product.numel(), wrap):
            segment = product[start : start + wrap]
            flat[: segment.numel()].copy_(segment)
        return None


#: Mutants only the nightly GPU run reaches (not in the CPU kill matrix, where they would survive by
#: construction): run each with its command in README / the report, e.g.
#: ``python -m fuzz.repro --impl mutants.catalogue:OffsetWraps32 --topology shared-gpu --world-size 1 --case ...``
#: Mutants of the unfused path whose bug only a GPU shows, at the ci profile: ``ci/kill-matrix --gpu`` runs them on
#: shared-gpu against the unfused control (the fault builds and wrapper mutants of the fused kernel against the fused).
GPU_UNFUSED_CATALOGUE: tuple[MutantSpec, ...] = (
    MutantSpec("StagingOnDefaultDevice", (2,), ("call_raised",)),
)
#: Every mutant only a GPU kills: those of the ci profile above and the nightly byte-boundary one.
GPU_NIGHTLY_CATALOGUE: tuple[MutantSpec, ...] = (
    MutantSpec("OffsetWraps32", (1, 2), ("within_tolerance", "bitwise_equal")),
) + GPU_UNFUSED_CATALOGUE
