"""Batch invariance (CONTRACT, Numerics, added 2026-11-30): a token row's result does not depend on M
nor on where the row sits in the batch. An inference engine batches other requests' tokens around a
request's; if the bits of its output change with them, the same prompt gives different generations
depending on load.

Two calls of one implementation: call A at ``M_a`` and call B at ``M_b``, the same weights, and some of
A's token rows placed at other rows of B (:class:`RowMap`: ``rows_b[k]`` of B holds the token of
``rows_a[k]`` of A; every other row of B is another token). The check compares those rows of the two
results bit for bit — no tolerance:

* exact inputs (``oracle.inputs`` kind ``exact``): every partial and sum is an exact integer, so any
  summation order gives the same bits; a difference is a wrong value. Never waivable.
* other inputs: bitwise too, for an implementation whose reduction order depends on neither M nor the
  row's position (ours, :mod:`kernel.fused.gemm_rs`: fixed rank order 0..W-1 in fp32, fixed K order).
  Measured exceptions, to be waived with their reason (docs/NUMERICS.md): torch's CPU bf16 ``mm`` takes
  a different path at M = 1 for K > 1024 (~1e-4 of the elements differ in the last bit), and a ring or
  gloo reduce-scatter sums each shard in an order that starts at its owner, so for W >= 3 a token that
  lands in another rank's shard at another M differs in ~30-60% of its elements.

Per rank or gathered. :func:`invariance_inputs` builds the two calls' inputs from a seed; with
``cross_owner=False`` every token stays in the same rank's shard in both calls (each rank checks its own
shards, no communication: M- and position-dependence within a shard); with ``cross_owner=True`` tokens
also move to rows other ranks own (gather both results and check with ``rank=None``: the whole clause).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .result import CheckResult, skipped, worst_of

#: Tokens per rank that the row maps carry (first and last rows of a shard always among them).
TOKENS_PER_RANK = 4


@dataclass(frozen=True)
class RowMap:
    """``rows_b[k]`` of call B (at ``M_b``) holds the token of ``rows_a[k]`` of call A (at ``M_a``)."""

    M_a: int
    M_b: int
    rows_a: tuple[int, ...]
    rows_b: tuple[int, ...]

    def __post_init__(self):
        if len(self.rows_a) != len(self.rows_b):
            raise ValueError(f"row map pairs {len(self.rows_a)} rows of A with {len(self.rows_b)} of B")
        for rows, M, call in ((self.rows_a, self.M_a, "A"), (self.rows_b, self.M_b, "B")):
            if len(set(rows)) != len(rows) or any(not 0 <= r < M for r in rows):
                raise ValueError(f"rows of call {call} must be distinct rows of 0..{M - 1}, got {rows}")

    def visible(self, rank: int | None, world_size: int) -> list[tuple[int, int, int, int]]:
        """(local row in A's result, local row in B's result, global row in A, global row in B) for the
        pairs whose rows are both in ``rank``'s shards (``rank=None``: gathered results, every pair)."""
        if rank is None:
            return [(a, b, a, b) for a, b in zip(self.rows_a, self.rows_b)]
        lo_a, hi_a = _shard_rows(self.M_a, world_size, rank)
        lo_b, hi_b = _shard_rows(self.M_b, world_size, rank)
        return [(a - lo_a, b - lo_b, a, b) for a, b in zip(self.rows_a, self.rows_b)
                if lo_a <= a < hi_a and lo_b <= b < hi_b]


def _shard_rows(M: int, world_size: int, rank: int) -> tuple[int, int]:
    S = -(-M // world_size)
    return rank * S, min(M, rank * S + S)


def row_map(seed: int, M_a: int, M_b: int, world_size: int, *, cross_owner: bool,
            tokens_per_rank: int = TOKENS_PER_RANK) -> RowMap:
    """A deterministic map (the same on every rank: it depends on neither rank nor kind). Each rank's or
    the whole batch's first row goes to the last row of B and the last to the first (the last, partial M
    tile and the first swap), the other tokens go to random rows."""
    from oracle.inputs import rank_seed

    g = torch.Generator().manual_seed(rank_seed(seed, 0, f"batch-invariance/{M_a}/{M_b}/{world_size}/{cross_owner}"))
    if cross_owner:
        ranges = [((0, M_a), (0, M_b), tokens_per_rank * world_size)]
    else:
        ranges = [(_shard_rows(M_a, world_size, r), _shard_rows(M_b, world_size, r), tokens_per_rank)
                  for r in range(world_size)]
    rows_a, rows_b = [], []
    for (lo_a, hi_a), (lo_b, hi_b), want in ranges:
        k = min(want, hi_a - lo_a, hi_b - lo_b)
        if k <= 0:
            continue
        a = _pick(g, lo_a, hi_a, k)        # ascending, first and last of the range included
        b = _pick(g, lo_b, hi_b, k)[::-1]  # descending: A's first row -> B's last, A's last -> B's first
        if k > 2:
            middle = torch.randperm(k - 2, generator=g).tolist()
            b = [b[0], *(b[1 + i] for i in middle), b[-1]]
        rows_a += a
        rows_b += b
    return RowMap(M_a, M_b, tuple(rows_a), tuple(rows_b))


def _pick(g: torch.Generator, lo: int, hi: int, k: int) -> list[int]:
    ends = [lo, hi - 1][:k] if hi - 1 > lo else [lo]
    inner = torch.randperm(max(0, hi - lo - 2), generator=g)[: k - len(ends)] + lo + 1
    return sorted(set(ends) | set(inner.tolist()))


@dataclass
class InvarianceInputs:
    """This rank's operands for the two calls, and the map that relates their rows."""

    x_a: torch.Tensor  # (M_a, K) bf16
    x_b: torch.Tensor  # (M_b, K) bf16
    w: torch.Tensor    # (N, K) bf16, the same for both calls
    row_map: RowMap


def invariance_inputs(seed: int, rank: int, M_a: int, M_b: int, N: int, K: int, world_size: int,
                      kind: str = "gaussian", *, cross_owner: bool = False, device="cpu") -> InvarianceInputs:
    """Call A gets the case's tokens (``oracle.inputs.make_x``); call B gets other tokens of the same kind
    with A's mapped tokens copied into their rows. Deterministic in every argument, so each rank (and the
    driver) rebuilds any rank's operands alone, on ``device``."""
    from oracle.inputs import make_w, make_x, rank_seed

    rm = row_map(seed, M_a, M_b, world_size, cross_owner=cross_owner)
    x_a = make_x(seed, rank, M_a, K, world_size, kind, device=device)
    other_tokens = rank_seed(seed, 0, "batch-invariance/other-tokens") & 0x7FFFFFFF
    x_b = make_x(other_tokens, rank, M_b, K, world_size, kind, device=device)
    if rm.rows_a:
        x_b[list(rm.rows_b)] = x_a[list(rm.rows_a)]
    return InvarianceInputs(x_a, x_b, make_w(seed, rank, N, K, world_size, kind, device=device), rm)


def batch_invariant(out_a: torch.Tensor, out_b: torch.Tensor, rm: RowMap, *, rank: int | None = None,
                    world_size: int = 1, exact: bool = False, waiver: str | None = None,
                    name: str = "batch_invariant") -> CheckResult:
    """The rows of ``out_b`` that hold A's tokens have the bits of the matching rows of ``out_a``.

    ``out_a``/``out_b``: this rank's (ceil(M/W), N) shards of the two calls, or with ``rank=None`` the
    gathered (M, N) results. ``exact``: the inputs were of kind ``exact`` (then no waiver applies).
    ``waiver``: the implementation's reason for not offering bitwise batch invariance on other inputs.
    """
    if waiver and not exact:
        return skipped(name, f"waived: {waiver}", rank)
    pairs = rm.visible(rank, world_size)
    if not pairs:
        return skipped(name, f"no mapped token lies in rank {rank}'s shard in both calls (M = {rm.M_a}, {rm.M_b})",
                       rank, per_example=True)
    local_a = [p[0] for p in pairs]
    local_b = [p[1] for p in pairs]
    for out, rows, call in ((out_a, local_a, "A"), (out_b, local_b, "B")):
        if out.dim() != 2 or max(rows) >= out.shape[0]:
            raise ValueError(f"result of call {call} has shape {tuple(out.shape)}: row {max(rows)} of the map "
                             f"is not in it (pass this rank's shard with rank=, or gathered results with rank=None)")
    a = out_a[local_a].detach()
    b = out_b[local_b].detach().to(a.device)
    # bit for bit, but a NaN is a NaN: its sign and payload follow the kernel the shape picked (seen: torch's CPU GEMM
    # at M = 1 and M = 127 gave the same NaN element different bits), and which elements are NaN is compared here
    wrong = (a.contiguous().view(torch.int16) != b.contiguous().view(torch.int16)) & ~(a.isnan() & b.isnan())
    err = (b.double() - a.double()).abs()
    err = torch.where(wrong & ~(err > 0), torch.full_like(err, float("inf")), err)  # same value, other bits
    res = worst_of(name, wrong, err, b, a, 0.0, rank=rank)
    per_token = wrong.sum(dim=1)
    res.extra.update({"tokens": len(pairs), "tokens_differing": int((per_token > 0).sum()), "exact": exact})
    if res.worst_index is not None:
        k, col = res.worst_index
        _, lb, ga, gb = pairs[k]
        res.worst_index = (lb, col)
        res.worst_row = gb
        mode = "exact inputs: a wrong value" if exact else "bitwise, no tolerance"
        res.detail = (f"{int((per_token > 0).sum())} of {len(pairs)} tokens differ ({mode}); worst: the token of "
                      f"row {ga} at M = {rm.M_a} is row {gb} at M = {rm.M_b}, {int(per_token[k])} of "
                      f"{a.shape[1]} elements differ")
        if res.passed:
            res.detail = f"{len(pairs)} tokens bitwise identical at M = {rm.M_a} and M = {rm.M_b}"
    return res
