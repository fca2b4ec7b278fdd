"""fp64 truth for one rank's shard, and the per-element magnitudes the tolerance budget needs.

From every rank's (x_r, w_r) (rebuilt locally, see :mod:`oracle.inputs`), for the rows of this rank's
shard:

* ``y``         = sum_r x_r @ w_r.T in fp64 (exact up to fp64 rounding, far below bf16's);
* ``abs_partials`` = sum_r |x_r @ w_r.T|    (scale of the per-rank partial roundings and of the sum);
* ``abs_products`` = sum_r |x_r| @ |w_r|.T  (scale of the fp32 accumulation error over K).

Rows are the shard's S rows; rows past M (padding) are NaN so no check can read them by accident.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .shards import shard_rows, valid_rows


@dataclass
class Truth:
    y: torch.Tensor             # (S, N) float64
    abs_partials: torch.Tensor  # (S, N) float64
    abs_products: torch.Tensor  # (S, N) float64
    n_valid: int                # rows of the shard that are real tokens
    row_offset: int             # global row of shard row 0 (= rank * S)
    K: int
    world_size: int


def shard_truth(inputs, rank: int, M: int, device: torch.device | str = "cpu") -> Truth:
    """Truth for ``rank``'s shard. ``inputs``: [(x_r, w_r) for r in range(W)], x_r with all M rows."""
    W = len(inputs)
    r0, n_valid = rank * shard_rows(M, W), valid_rows(M, W, rank)
    rows = [(x[r0 : r0 + n_valid], w) for x, w in inputs]
    return _truth_from_rows(rows, rank, M, W, device)


def seeded_shard_truth(seed: int, kind: str, rank: int, M: int, N: int, K: int, world_size: int,
                       device: torch.device | str = "cpu") -> Truth:
    """Truth for ``rank``'s shard, rebuilding only the shard's rows of every rank's x."""
    r0, n_valid = rank * shard_rows(M, world_size), valid_rows(M, world_size, rank)
    rows = seeded_rows(seed, kind, (r0, r0 + n_valid), M, N, K, world_size, _where(device))
    return _truth_from_rows(rows, rank, M, world_size, device)


def seeded_rows(seed: int, kind: str, rows: tuple[int, int], M: int, N: int, K: int,
                world_size: int, device: torch.device | str = "cpu") -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
    """((x_r[rows], w_r) for every rank r), rebuilt from the seed on ``device`` (where the truth is computed:
    W weights per call never pass through the host); cached for the next caller of the same call (the truth,
    then the rounding model of :mod:`properties.bias`). Read-only: the tensors are shared."""
    return _seeded_rows(seed, kind, rows, M, N, K, world_size, _where(device))


@functools.lru_cache(maxsize=2)
def _seeded_rows(seed, kind, rows, M, N, K, world_size, device: torch.device):
    from .inputs import make_x, shared_w

    return tuple((make_x(seed, r, M, K, world_size, kind, rows=rows, device=device),
                  shared_w(seed, r, N, K, world_size, kind, device=device))
                 for r in range(world_size))


def _where(device) -> torch.device:
    """``device`` as a torch.device with an index (a cache key: "cuda" and "cuda:0" are one device)."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def seeded_rows_truth(seed: int, kind: str, rows: tuple[int, int], M: int, N: int, K: int, world_size: int,
                      device: torch.device | str = "cpu") -> Truth:
    """Truth for the global rows ``rows = (start, stop)`` of Y alone (``row_offset`` = start, every row valid):
    for a check of a few rows of a result too large to hold a whole shard's truth."""
    start, stop = rows
    parts = seeded_rows(seed, kind, rows, M, N, K, world_size, device)
    y = torch.full((stop - start, N), float("nan"), dtype=torch.float64, device=device)
    ap, aq = torch.full_like(y, float("nan")), torch.full_like(y, float("nan"))
    _accumulate(parts, y, ap, aq, device)
    return Truth(y, ap, aq, stop - start, start, K, world_size)


def _truth_from_rows(rows, rank: int, M: int, W: int, device) -> Truth:
    S = shard_rows(M, W)
    r0, n_valid = rank * S, valid_rows(M, W, rank)
    N, K = rows[0][1].shape
    y = torch.full((S, N), float("nan"), dtype=torch.float64, device=device)
    ap = torch.full_like(y, float("nan"))
    aq = torch.full_like(y, float("nan"))
    if n_valid:
        _accumulate(rows, y[:n_valid], ap[:n_valid], aq[:n_valid], device)
    return Truth(y, ap, aq, n_valid, r0, K, W)


def _accumulate(rows, y, ap, aq, device) -> None:
    """y, ap, aq (views of the valid rows) = sum_r of p_r = x_r @ w_r.T, |p_r|, |x_r| @ |w_r|.T, in fp64."""
    y.zero_()
    ap.zero_()
    aq.zero_()
    for xs, w in rows:
        # to the device in bf16, widened there: a cross-device .to(dtype) widens on the host first (single
        # threaded in a rank), then moves four times the bytes
        xs = xs.to(device=device).to(torch.float64)
        wd = w.to(device=device).to(torch.float64)
        p = xs @ wd.T  # the one (rows x N) temporary, reused: W = 16 ranks share one GPU's memory
        y += p
        ap += p.abs_()
        aq += torch.mm(xs.abs(), wd.abs().T, out=p)
