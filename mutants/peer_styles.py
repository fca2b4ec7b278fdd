"""Peer-style implementations: GEMM-RS written the way other projects write it, not edits of ours.

The catalogue's mutants (:mod:`mutants.catalogue`) are one-line breaks of :class:`~kernel.unfused.UnfusedGemmRs`.
Peer code is built differently -- an all-reduce of the whole product and a slice (vLLM's fallback), an all-gather
of partials summed locally (TransformerEngine's userbuffers debug path), a ring of send/recv written by hand, an
all-to-all, a loop over row chunks (Flux, PyTorch async-TP), weight caches, lazily sized workspaces, module-level
tuners -- and fails differently. Each class here is one such implementation with ONE realistic bug, or none
(the controls: the gate must PASS them). The 2026-12-06 peer-style audit gated each
(docs/evidence/2026-12-06c-peer-style-audit/); those the gate let through were closed and added to the kill matrix
(mutants/catalogue.py's CATALOGUE imports them from here).

Each subclasses :class:`UnfusedGemmRs` only for its buffers' and waivers' bookkeeping (graph capture over gloo,
batch invariance where torch's own GEMM does not give it) and replaces ``_run`` with its own structure. Every class
keeps one collective schedule on every rank of a call unless breaking it is the bug.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from kernel import collectives
from kernel.checks import check_operands
from kernel.errors import CapacityError
from kernel.unfused import UnfusedGemmRs


def _distributed(impl) -> bool:
    return collectives.backend_of(impl.group) != "none" and impl.world_size > 1


def _padded_partial(impl, x, w, M: int) -> torch.Tensor:
    """This rank's (W*S, N) bf16 partial, rows M.. zero (a fresh tensor)."""
    S = impl.shard_rows(M)
    p = torch.zeros(impl.world_size * S, impl.N, dtype=torch.bfloat16, device=impl.device)
    impl._gemm(x, w, p[:M])
    return p


def _store(impl, out, shard: torch.Tensor, M: int) -> torch.Tensor:
    """Valid rows of ``shard`` into ``out`` (a fresh zeroed result when None)."""
    n_valid = impl.valid_rows(M)
    if out is None:
        out = impl.fresh_result(M)
    out[:n_valid].copy_(shard[:n_valid])
    impl.last_path = "unfused"
    return out


# --- controls: correct peer implementations ---------------------------------------------------------------------


class PeerAllReduceSlice(UnfusedGemmRs):
    """Correct (control). vLLM's non-custom fallback: all-reduce the whole zero-padded (W*S, N) product, then
    take this rank's S rows. W times the traffic, same values (the sum of every element is the reduce-scatter's)."""

    name = "peer-all-reduce-slice"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        p = _padded_partial(self, x, w, M)
        if _distributed(self):
            dist.all_reduce(p, group=self.group)
        return _store(self, out, p[self.rank * S:(self.rank + 1) * S], M)


class PeerAllGatherFp32Sum(UnfusedGemmRs):
    """Correct (control). TransformerEngine-style debug path: all-gather every rank's bf16 partial, then sum this
    rank's rows of them locally in fp32 in rank order 0..W-1 and round once to bf16."""

    name = "peer-all-gather-fp32-sum"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        p = _padded_partial(self, x, w, M)
        if _distributed(self):
            parts = [torch.empty_like(p) for _ in range(self.world_size)]
            dist.all_gather(parts, p, group=self.group)
        else:
            parts = [p]
        acc = torch.zeros(S, self.N, dtype=torch.float32, device=self.device)
        for part in parts:
            acc += part[self.rank * S:(self.rank + 1) * S].float()
        return _store(self, out, acc.to(torch.bfloat16), M)


class PeerRingSendRecv(UnfusedGemmRs):
    """Correct (control). A ring reduce-scatter written by hand (the textbook NCCL ring): W - 1 steps; at step k
    rank r sends its running sum of chunk (r - k - 1) mod W to r + 1 and receives chunk (r - k - 2) mod W from r - 1,
    adding its own partial of it; after W - 1 steps it holds chunk r summed over the group. Sums kept in fp32 on the
    wire, one rounding at the end. Peers addressed by their global rank (``dist.get_global_rank``), as torch's
    point-to-point ops want."""

    name = "peer-ring-send-recv"

    def _peer(self, group_rank: int) -> int:
        return dist.get_global_rank(self.group, group_rank) if self.group is not None else group_rank

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        W, r = self.world_size, self.rank
        p = _padded_partial(self, x, w, M).float()
        chunk = lambda i: p[(i % W) * S:((i % W) + 1) * S]  # noqa: E731
        acc = chunk(r - 1).clone()
        if _distributed(self):
            nxt, prv = self._peer((r + 1) % W), self._peer((r - 1) % W)
            buf = torch.empty_like(acc)
            for k in range(W - 1):
                ops = [dist.P2POp(dist.isend, acc, nxt, group=self.group),
                       dist.P2POp(dist.irecv, buf, prv, group=self.group)]
                for req in dist.batch_isend_irecv(ops):
                    req.wait()
                acc = buf + chunk(r - k - 2)
        return _store(self, out, acc.to(torch.bfloat16), M)


class PeerBf16RingOrderAccumulate(UnfusedGemmRs):
    """Correct (control). All-gather of bf16 partials, then a bf16 running sum starting at the rank's own partial
    and going round the ring (r, r + 1, ..., r - 1), rounding after every add -- what a bf16 NCCL ring does, in an
    order that depends on the rank. CONTRACT.md allows bf16 partials; the derived tolerance must hold the W - 1
    intermediate roundings."""

    name = "peer-bf16-ring-order-accumulate"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        W, r = self.world_size, self.rank
        p = _padded_partial(self, x, w, M)
        parts = [p]
        if _distributed(self):
            parts = [torch.empty_like(p) for _ in range(W)]
            dist.all_gather(parts, p, group=self.group)
        rows = slice(r * S, (r + 1) * S)
        acc = parts[r][rows].clone()
        for k in range(1, W):
            acc += parts[(r + k) % W][rows]  # bf16 + bf16 -> bf16: one rounding per add
        return _store(self, out, acc, M)


# --- one realistic bug each --------------------------------------------------------------------------------------


class PeerRingGroupRankAsPeer(PeerRingSendRecv):
    """The hand-written ring addresses its neighbours by GROUP rank: ``dist.isend(buf, (rank + 1) % W,
    group=tp_group)`` where torch's point-to-point ops take the GLOBAL rank (``group_dst`` is the keyword for a
    group rank). On the world group and on a TP group starting at world rank 0 with contiguous ranks they coincide;
    on any other TP group the ring talks to the wrong process (an error, a hang or another group's data)."""

    name = "peer-ring-group-rank-as-peer"

    def _peer(self, group_rank: int) -> int:
        return group_rank  # the bug


class PeerAllToAllAlignedRows(UnfusedGemmRs):
    """An all-to-all reduce-scatter that pads M up to a multiple of 8 * W (an alignment its GEMM tile wants) and
    splits the padded rows evenly: S' = roundup(M, 8W) / W rows a rank. Right where M % (8W) == 0; otherwise its
    shard rows start at r * S' instead of r * ceil(M / W) and it returns S' rows."""

    name = "peer-all-to-all-aligned-rows"

    def _run(self, x, w, out, M):
        W = self.world_size
        m_pad = -(-M // (8 * W)) * (8 * W)
        S = m_pad // W  # the bug: not ceil(M / W)
        p = torch.zeros(m_pad, self.N, dtype=torch.bfloat16, device=self.device)
        self._gemm(x, w, p[:M])
        recv = torch.empty_like(p)
        if _distributed(self):
            dist.all_to_all_single(recv, p, group=self.group)
        else:
            recv.copy_(p)
        shard = recv.view(W, S, self.N).float().sum(0).to(torch.bfloat16)
        n_valid = max(0, min(S, M - self.rank * S))
        if out is None:
            out = torch.zeros(S, self.N, dtype=torch.bfloat16, device=self.device)
        out[:n_valid].copy_(shard[:n_valid])
        self.last_path = "unfused"
        return out


class PeerCachedOutput(UnfusedGemmRs):
    """An output buffer cached per shard size and returned across calls when ``out`` is None (a userbuffers-style
    persistent output): each call's values are right, but a result the caller still holds is overwritten by a later
    call of the same size."""

    name = "peer-cached-output"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._outs: dict[int, torch.Tensor] = {}

    def _run(self, x, w, out, M):
        if out is None:
            S = self.shard_rows(M)
            if S not in self._outs:
                self._outs[S] = torch.zeros(S, self.N, dtype=torch.bfloat16, device=self.device)
            out = self._outs[S]
        return super()._run(x, w, out, M)


class PeerWorkspaceSizedAtFirstCall(UnfusedGemmRs):
    """A workspace sized from the first call (``rows = roundup(W * S, 128)``, "no memory until the layer runs") and
    never grown: a later, larger M computes only the rows that fit (``torch.mm(x[:rows], ...)``) and the rest of the
    padded product stays zero -- rows lost, silently."""

    name = "peer-workspace-sized-at-first-call"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lazy: torch.Tensor | None = None

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        rows = self.world_size * S
        if self._lazy is None:
            self._lazy = torch.empty(-(-rows // 128) * 128, self.N, dtype=torch.bfloat16, device=self.device)
        fit = min(M, self._lazy.shape[0])
        p = torch.zeros(rows, self.N, dtype=torch.bfloat16, device=self.device)
        ws = self._lazy[:fit]
        self._gemm(x[:fit], w, ws)
        p[:fit].copy_(ws)
        shard = torch.empty(S, self.N, dtype=torch.bfloat16, device=self.device)
        collectives.reduce_scatter(shard, p, self.group)
        return _store(self, out, shard, M)


class PeerPadWrongDim(UnfusedGemmRs):
    """x padded per call with ``F.pad(x, (0, pad))`` to W * S rows -- but ``F.pad`` pads the LAST dimension first,
    so this pads K, not M (the row padding is ``(0, 0, 0, pad)``). Right where M % W == 0 (pad = 0); otherwise the
    GEMM fails on a (M, K + pad) x."""

    name = "peer-pad-wrong-dim"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        pad = self.world_size * S - M
        xp = F.pad(x, (0, pad))  # the bug: (0, 0, 0, pad)
        p = torch.mm(xp.float(), w.float().t()).to(torch.bfloat16)
        shard = torch.empty(S, self.N, dtype=torch.bfloat16, device=self.device)
        collectives.reduce_scatter(shard, p, self.group)
        return _store(self, out, shard, M)


class PeerOutCopyFullShard(UnfusedGemmRs):
    """``out.copy_(shard)``: the whole padded S-row shard copied into a caller's ``out`` (Flux's epilogue writes its
    full tile), so the caller's padding rows become the shard's zero rows."""

    name = "peer-out-copy-full-shard"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        p = _padded_partial(self, x, w, M)
        shard = torch.empty(S, self.N, dtype=torch.bfloat16, device=self.device)
        collectives.reduce_scatter(shard, p, self.group)
        self.last_path = "unfused"
        if out is None:
            return shard
        out.copy_(shard)  # the bug: padding rows written
        return out


class PeerFp16Compute(UnfusedGemmRs):
    """A GEMM run in fp16 ("the fp16 kernel is faster on this card"): x and w cast to fp16, the product cast back to
    bf16. fp16's range (65504) and subnormal floor (2^-24) are far short of bf16's: large values become Inf, small
    ones lose their bits or flush to zero."""

    name = "peer-fp16-compute"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        p = torch.zeros(self.world_size * S, self.N, dtype=torch.bfloat16, device=self.device)
        p[:M] = torch.mm(x.half().float(), w.half().float().t()).half().to(torch.bfloat16)
        shard = torch.empty(S, self.N, dtype=torch.bfloat16, device=self.device)
        collectives.reduce_scatter(shard, p, self.group)
        return _store(self, out, shard, M)


class PeerAverageThenScale(UnfusedGemmRs):
    """A mean-reduce reused as a sum (code shared with data-parallel gradient averaging): each partial divided by W
    in bf16, reduce-scattered, multiplied back by W. Exact for W a power of two (away from underflow); for W = 3
    every element takes two extra roundings."""

    name = "peer-average-then-scale"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        p = _padded_partial(self, x, w, M)
        p.div_(self.world_size)
        shard = torch.empty(S, self.N, dtype=torch.bfloat16, device=self.device)
        collectives.reduce_scatter(shard, p, self.group)
        shard.mul_(self.world_size)
        return _store(self, out, shard, M)


class PeerWeightCacheByDataPtr(UnfusedGemmRs):
    """A pre-packed (transposed, contiguous) weight cached by ``w.data_ptr()``: a weight updated in place (a
    checkpoint load, ``copy_`` of new values, a LoRA merge) keeps its address, so the stale packed copy is used."""

    name = "peer-weight-cache-by-data-ptr"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._packed: dict[int, torch.Tensor] = {}

    def _gemm(self, x, w, partials):
        key = w.data_ptr()
        if key not in self._packed:
            self._packed[key] = w.t().contiguous()
        wt = self._packed[key]
        partials.copy_(torch.mm(x.float(), wt.float()))


class PeerShouldRunGlobalTuner(UnfusedGemmRs):
    """should_run consults a module-level tuning result: every instance writes its tuned crossover (fewer rows pay
    for a larger N * K) into one global, so the layer built last decides every layer's dispatch."""

    name = "peer-should-run-global-tuner"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        global _TUNED_MIN_M
        _TUNED_MIN_M = max(1, 128 * 256 * 256 // max(1, self.N * self.K))

    def should_run(self, x):
        return int(x.shape[0]) >= _TUNED_MIN_M


_TUNED_MIN_M = 128


class PeerRuntimeErrorOnBadCall(UnfusedGemmRs):
    """TransformerEngine-style input checks: a shape, dtype or layout mismatch raises ``RuntimeError`` (what a C++
    ``TORCH_CHECK`` gives); only the capacity check raises a ``ValueError``. Rejected, nothing changed -- but not
    with the contract's typed error (``typed_errors`` not waived)."""

    name = "peer-runtime-error-on-bad-call"

    def validate(self, x, w, out):
        if isinstance(x, torch.Tensor) and x.dim() == 2:
            M = int(x.shape[0])
            if M <= 0 or M > self.max_M:
                raise CapacityError(f"M={M} outside 1..{self.max_M}")
        try:
            return check_operands(x, w, out, N=self.N, K=self.K, max_M=self.max_M,
                                  world_size=self.world_size, device=self.device)
        except CapacityError:
            raise
        except ValueError as e:  # the bug: re-raised as the C++ extension's error type
            raise RuntimeError(f"gemm_rs: {e}") from None


class PeerGemmBeforeOutCheck(UnfusedGemmRs):
    """The GEMM issued into the persistent workspace before ``out`` is checked (x and w are checked first, "out is
    only needed by the epilogue"): a call rejected for its ``out`` has already overwritten the workspace (on a GPU:
    queued work after a rejection). No collective runs before the check."""

    name = "peer-gemm-before-out-check"

    def validate(self, x, w, out):
        return check_operands(x, w, None, N=self.N, K=self.K, max_M=self.max_M,
                              world_size=self.world_size, device=self.device)

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        self._gemm(x, w, self._partials[:M])  # the bug: before out is checked
        check_operands(x, w, out, N=self.N, K=self.K, max_M=self.max_M,
                       world_size=self.world_size, device=self.device)
        self._partials[M:self.world_size * S].zero_()
        shard = self._shard[:S]
        collectives.reduce_scatter(shard, self._partials[:self.world_size * S], self.group, self._staging)
        return _store(self, out, shard, M)


_PROCESS_GROUP = None  # captured once, at the first construction, "like the module's init_tp()"


class PeerGroupCapturedOnce(UnfusedGemmRs):
    """The process group captured in a module global by the first instance ever built (an ``init_tp()`` pattern)
    and used by every later instance whatever group it was given: a process that builds layers for another TP
    group later (another layout, a re-created group) reduces over the first one."""

    name = "peer-group-captured-once"

    def __init__(self, group=None, **kwargs):
        global _PROCESS_GROUP
        if _PROCESS_GROUP is None:
            _PROCESS_GROUP = group if group is not None else dist.group.WORLD
        super().__init__(group, **kwargs)

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        p = _padded_partial(self, x, w, M)
        shard = torch.empty(S, self.N, dtype=torch.bfloat16, device=self.device)
        collectives.reduce_scatter(shard, p, _PROCESS_GROUP)  # the bug: not self.group
        return _store(self, out, shard, M)


class PeerChunkedRowsTailDropped(UnfusedGemmRs):
    """A pipelined reduce-scatter over chunks of the shard's rows (Flux / async-TP style: chunk c's reduce overlaps
    chunk c + 1's GEMM): ``for c in range(max(1, S // CHUNK))`` with chunk c covering rows ``c*CHUNK ..
    min((c+1)*CHUNK, S)`` -- the tail chunk of S % CHUNK rows is never reduced when S > CHUNK. Every rank runs the
    same chunks (S is the group's)."""

    name = "peer-chunked-rows-tail-dropped"
    CHUNK = 64

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        W = self.world_size
        p = _padded_partial(self, x, w, M).view(W, S, self.N)
        shard = torch.zeros(S, self.N, dtype=torch.bfloat16, device=self.device)
        n_chunks = max(1, S // self.CHUNK)  # the bug: floor, the tail chunk dropped
        for c in range(n_chunks):
            lo, hi = c * self.CHUNK, min((c + 1) * self.CHUNK, S)
            piece = p[:, lo:hi].reshape(W * (hi - lo), self.N).contiguous()
            collectives.reduce_scatter(shard[lo:hi], piece, self.group)
        return _store(self, out, shard, M)


class PeerFreshResultEmpty(UnfusedGemmRs):
    """Without ``out=``, the result allocated with ``torch.empty`` and only the valid rows written (``at::empty`` in
    a C++ op, "the padding rows are never read"): CONTRACT.md has a fresh result's padding rows +0.0."""

    name = "peer-fresh-result-empty"

    def fresh_result(self, M):
        return torch.empty(self.shard_rows(M), self.N, dtype=torch.bfloat16, device=self.device)


class PeerResultCacheByPtrVersion(UnfusedGemmRs):
    """A memoised forward (activation-recompute style): the last result kept with the key ``(x.data_ptr(),
    x._version, w.data_ptr(), w._version, M)`` -- in-place updates bump ``_version``, so "an in-place change can
    never hit". But a freed input whose memory the allocator hands to the next input, or a buffer written by a
    kernel that does not bump ``_version`` (a Triton or C++ op through its pointer, a receive into it), has the same
    key with new values: the old result is returned (a fresh copy of it)."""

    name = "peer-result-cache-by-ptr-version"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._memo: tuple | None = None

    def _run(self, x, w, out, M):
        key = (x.data_ptr(), x._version, w.data_ptr(), w._version, M)
        if self._memo is not None and self._memo[0] == key:
            shard = self._memo[1]
            self.last_path = "unfused"
            if out is None:
                return shard.clone()
            n = self.valid_rows(M)
            out[:n].copy_(shard[:n])
            return out
        y = super()._run(x, w, None, M)
        self._memo = (key, y.clone())
        if out is None:
            return y
        n = self.valid_rows(M)
        out[:n].copy_(y[:n])
        return out


class PeerWeightCacheByPtrVersion(UnfusedGemmRs):
    """The packed-weight cache of :class:`PeerWeightCacheByDataPtr` made "safe" with the version counter: key
    ``(w.data_ptr(), w._version)``. A weight written without a version bump (a checkpoint loaded by a C++/Triton
    kernel, a broadcast received into it) or a new weight at a freed one's address keeps the key: stale weights."""

    name = "peer-weight-cache-by-ptr-version"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._packed: dict[tuple, torch.Tensor] = {}

    def _gemm(self, x, w, partials):
        key = (w.data_ptr(), w._version)
        if key not in self._packed:
            self._packed.clear()
            self._packed[key] = w.t().contiguous()
        partials.copy_(torch.mm(x.float(), self._packed[key].float()))


_WORKSPACE_POOL: dict[int, torch.Tensor] = {}  # N -> workspace, shared by the layers of one hidden size


class PeerWorkspacePoolKeyedByN(UnfusedGemmRs):
    """A module-level workspace pool keyed by the hidden size N ("every layer of one model shares one buffer"),
    sized by the first instance of that N: a later instance of the same N built for a larger max_M slices past the
    pool's end (the slice is silently short) and its rows past the first instance's capacity are never computed."""

    name = "peer-workspace-pool-keyed-by-n"

    def _run(self, x, w, out, M):
        S = self.shard_rows(M)
        rows = self.world_size * S
        if self.N not in _WORKSPACE_POOL:
            _WORKSPACE_POOL[self.N] = torch.empty(self.world_size * self.shard_rows(self.max_M), self.N,
                                                  dtype=torch.bfloat16, device=self.device)
        pool = _WORKSPACE_POOL[self.N][:rows]  # the bug: short where an earlier layer of this N was smaller
        fit = min(M, pool.shape[0])
        self._gemm(x[:fit], w, pool[:fit])
        p = torch.zeros(rows, self.N, dtype=torch.bfloat16, device=self.device)
        p[:fit].copy_(pool[:fit])
        shard = torch.empty(S, self.N, dtype=torch.bfloat16, device=self.device)
        collectives.reduce_scatter(shard, p, self.group)
        return _store(self, out, shard, M)


#: The peers by name, each with what it is: "correct" (a control) or the bug class.
PEERS = {
    "PeerAllReduceSlice": "correct",
    "PeerAllGatherFp32Sum": "correct",
    "PeerRingSendRecv": "correct",
    "PeerBf16RingOrderAccumulate": "correct",
    "PeerRingGroupRankAsPeer": "group rank vs global rank",
    "PeerAllToAllAlignedRows": "shard layout (M rounded up)",
    "PeerCachedOutput": "result aliasing across calls",
    "PeerWorkspaceSizedAtFirstCall": "capacity: workspace from the first call",
    "PeerPadWrongDim": "padding of unaligned M",
    "PeerOutCopyFullShard": "padding rows written",
    "PeerFp16Compute": "dtype round trip",
    "PeerAverageThenScale": "numerics: extra roundings",
    "PeerWeightCacheByDataPtr": "stale weight cache",
    "PeerShouldRunGlobalTuner": "dispatch from a global",
    "PeerRuntimeErrorOnBadCall": "untyped errors",
    "PeerGemmBeforeOutCheck": "work before the checks",
    "PeerGroupCapturedOnce": "process group captured once",
    "PeerChunkedRowsTailDropped": "chunked pipeline tail",
    "PeerFreshResultEmpty": "fresh result's padding",
    "PeerResultCacheByPtrVersion": "stale result cache (pointer + version key)",
    "PeerWeightCacheByPtrVersion": "stale weight cache (pointer + version key)",
    "PeerWorkspacePoolKeyedByN": "workspace shared across instances",
}
