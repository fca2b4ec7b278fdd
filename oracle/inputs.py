"""Deterministic per-rank inputs: every rank (and the driver) can rebuild any rank's (x_r, w_r) from
(seed, rank, M, N, K, W, kind) alone, so the fp64 truth needs no communication.

Kinds:

* ``gaussian``  — N(0, 1) activations, N(0, 1/K) weights (a realistic layer).
* ``exact``     — small integers, different on every rank, chosen so that every partial ``x_r @ w_r.T``,
  every partial sum over ranks in any order, and the total are integers of magnitude <= 256, hence
  exactly representable in bf16 (8 significant bits) and in fp32: equality with the oracle is
  bitwise, and a wrong peer, a double-counted rank or a shifted row cannot hide (nccl-tests'
  "verifiable" idea). Each row of x_r has at most ``nnz`` non-zeros in [-2, 2]; w_r entries are in
  [-3, 3]; ``nnz * 2 * 3 * W <= 256``.
* ``small``     — gaussian scaled by 2**-20 (a dropped rank must still show against the budget; a
  magic ``atol`` would hide it).
* ``large``     — gaussian scaled so results are ~2**100 (no overflow in bf16/fp32, range exercised).
* ``zeros``     — all zero.
* ``nonfinite`` — gaussian with a few NaN / +Inf / -Inf planted in x_r (rank-dependent positions).
* ``skewed``    — gaussian, but rank W-1's inputs scaled by 2**-12: its contribution is small
  against the other ranks' (exact mode, not tolerance, is what catches dropping it).
"""

from __future__ import annotations

import functools
import hashlib

import torch

KINDS = ("gaussian", "exact", "small", "large", "zeros", "nonfinite", "skewed")

EXACT_LIMIT = 256  # |integer| <= 256 is exact in bf16


def rank_seed(seed: int, rank: int, tag: str) -> int:
    digest = hashlib.blake2b(f"{seed}/{rank}/{tag}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _gen(seed: int, rank: int, tag: str) -> torch.Generator:
    return torch.Generator().manual_seed(rank_seed(seed, rank, tag))


EXACT_MAX_WORLD = EXACT_LIMIT // (2 * 3)  # one non-zero of |x| <= 2 times |w| <= 3 per rank


def exact_nnz(world_size: int) -> int:
    """Non-zeros per row of x_r so that the W-rank sum stays within EXACT_LIMIT."""
    if world_size > EXACT_MAX_WORLD:
        raise ValueError(f"exact inputs support W <= {EXACT_MAX_WORLD}, got {world_size}")
    return (EXACT_LIMIT // max(1, world_size)) // (2 * 3)


ROW_BLOCK = 64  # x is generated in blocks of rows, so any row range can be rebuilt alone


def make_inputs(
    seed: int, rank: int, M: int, N: int, K: int, world_size: int, kind: str = "gaussian"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_r, w_r) on the CPU, bf16, contiguous. Deterministic in all arguments."""
    return make_x(seed, rank, M, K, world_size, kind), make_w(seed, rank, N, K, world_size, kind)


def make_w(seed: int, rank: int, N: int, K: int, world_size: int, kind: str = "gaussian") -> torch.Tensor:
    """w_r (N, K) on the CPU, bf16. A fresh tensor each call (callers may write into it); the values are
    generated once per argument tuple and cached: the truth rebuilds every rank's w for every call."""
    return _make_w_cached(seed, rank, N, K, world_size, kind).clone()


def shared_w(seed: int, rank: int, N: int, K: int, world_size: int, kind: str = "gaussian") -> torch.Tensor:
    """w_r as :func:`make_w` builds it, without the copy: the cached tensor itself, which the caller must not
    write (the truth reads every rank's w for every call)."""
    return _make_w_cached(seed, rank, N, K, world_size, kind)


@functools.lru_cache(maxsize=16)
def _make_w_cached(seed: int, rank: int, N: int, K: int, world_size: int, kind: str) -> torch.Tensor:
    _check_kind(kind)
    gw = _gen(seed, rank, "w")
    if kind == "zeros":
        return torch.zeros(N, K, dtype=torch.bfloat16)
    if kind == "exact":
        return torch.randint(-3, 4, (N, K), generator=gw).to(torch.bfloat16)
    w = torch.randn(N, K, generator=gw, dtype=torch.float32) / K**0.5
    if kind == "small":
        w = w * 2.0**-10
    elif kind == "large":
        w = w * 2.0**50
    return w.to(torch.bfloat16).contiguous()


def make_x(seed: int, rank: int, M: int, K: int, world_size: int, kind: str = "gaussian",
           rows: tuple[int, int] | None = None) -> torch.Tensor:
    """Rows ``rows = (start, stop)`` (default all M) of x_r; any range gives the same values as the
    corresponding rows of the whole tensor."""
    _check_kind(kind)
    start, stop = rows if rows is not None else (0, M)
    start, stop = max(0, start), min(M, stop)
    n = max(0, stop - start)
    if kind == "zeros" or n == 0 or K == 0:
        return torch.zeros(n, K, dtype=torch.bfloat16)
    blocks = []
    for b in range(start // ROW_BLOCK, -(-stop // ROW_BLOCK)):
        b0, b1 = b * ROW_BLOCK, min(M, (b + 1) * ROW_BLOCK)
        blocks.append(_x_block(seed, rank, b, b1 - b0, K, world_size, kind))
    x = torch.cat(blocks)[start - (start // ROW_BLOCK) * ROW_BLOCK :][:n]
    if kind == "nonfinite":
        picks = torch.randint(0, M * K, (3,), generator=_gen(seed, rank, "nonfinite"))
        for value, flat in zip((float("nan"), float("inf"), float("-inf")), picks.tolist()):
            r, c = divmod(flat, K)
            if start <= r < stop:
                x[r - start, c] = value
    return x.contiguous()


def _x_block(seed, rank, b, rows, K, world_size, kind):
    g = _gen(seed, rank, f"x{b}")
    if kind == "exact":
        nnz = min(K, exact_nnz(world_size))
        x = torch.zeros(rows, K, dtype=torch.float32)
        cols = torch.randint(0, K, (rows, nnz), generator=g)  # repeats overwrite: still <= nnz non-zeros
        vals = torch.randint(1, 3, (rows, nnz), generator=g).float()
        vals *= torch.where(torch.rand(rows, nnz, generator=g) < 0.5, -1.0, 1.0)
        return x.scatter_(1, cols, vals).to(torch.bfloat16)
    x = torch.randn(rows, K, generator=g, dtype=torch.float32)
    if kind == "small":
        x = x * 2.0**-10
    elif kind == "large":
        x = x * 2.0**50
    elif kind == "skewed" and rank == world_size - 1:
        x = x * 2.0**-12
    return x.to(torch.bfloat16)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown input kind {kind!r}; one of {KINDS}")


def all_rank_inputs(seed, M, N, K, world_size, kind="gaussian"):
    """Every rank's (x_r, w_r), rebuilt locally."""
    return [make_inputs(seed, r, M, N, K, world_size, kind) for r in range(world_size)]
