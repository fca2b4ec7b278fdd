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
* ``nonfinite`` — gaussian with a few NaN / +Inf / -Inf planted in x_r (rank-dependent positions); one rank
  (``seed % W``) also has one NaN in w_r, and every rank one all-zero row of x_r (none of the planted values in
  it): ``0 * NaN`` is NaN, so a kernel that skips zero rows or sanitises its weights loses that NaN.
* ``skewed``    — gaussian, but rank W-1's inputs scaled by 2**-12: its contribution is small
  against the other ranks' (exact mode, not tolerance, is what catches dropping it).
* ``cancel``    — catastrophic cancellation along K: with h = K // 2, x's columns h..2h-1 repeat its columns
  0..h-1 (made positive), w's columns 0..h-1 are positive and its columns h..2h-1 are their negation plus a
  small term (2^-4 of the gaussian's): every product of the first half is positive, the second half takes
  the sum back down, so a K-prefix (a split-K part, a k-tile's running sum) is ~2^8 times the partial. A
  correct implementation accumulates in fp32 (error <= K u32 sum |x||w|, the budget's own term); one that
  rounds a K-part to bf16 -- split-K partials reduced in bf16 (cuBLAS's ``allow_bf16_reduced_precision_
  reduction``, a bf16 accumulator) -- errs by u16 times the prefix, many times the budget for K < 2^14,
  where on gaussian data the same rounding stays inside it.

How dense tensors are drawn (every kind but exact x and zeros): from one fixed table of L ~ 2^24 N(0, 1)
values (or, for exact weights, of integers in [-3, 3]), generated once per process from fixed seeds, 2^20
values at a time. A tensor of (seed, rank, tag) is the table read from an offset o that (seed, rank, tag)
hashes to, row after row (wrapping at the end), times a column of random signs and the kind's scale, rounded
to bf16: ``t[i, j] = bf16(table[(o + i * K + j) mod L] * s_j * scale)``, L a prime (rows do not repeat). So any
row range is rebuilt alone, and a tensor costs one copy and one multiply instead of a Gaussian draw per
element -- on the device where the tensor is used (``device=``): the rank's inputs and the truth's copy of
every rank's weights no longer pass through the host (the truth rebuilds W weights per call). Every step is
exact or one IEEE fp32 multiply and one bf16 rounding, so the host and any GPU build the same bits: a case
found on a GPU replays on the CPU.
"""

from __future__ import annotations

import functools
import hashlib

import torch

KINDS = ("gaussian", "exact", "small", "large", "zeros", "nonfinite", "skewed", "cancel")

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


#: Scales of the Gaussian kinds (module docstring): x and w of "small" and "large", the last rank's x of "skewed".
KIND_SCALE = {"small": 2.0**-10, "large": 2.0**50}
SKEWED_SCALE = 2.0**-12
#: The cancel kind's small term in w's second half, relative to the gaussian weights (module docstring).
CANCEL_DELTA = 2.0**-4

ROW_BLOCK = 64  # exact x is generated in blocks of rows, so any row range can be rebuilt alone


def make_inputs(
    seed: int, rank: int, M: int, N: int, K: int, world_size: int, kind: str = "gaussian", device="cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x_r, w_r) on ``device``, bf16, contiguous. Deterministic in all arguments, the same on every device."""
    return (make_x(seed, rank, M, K, world_size, kind, device=device),
            make_w(seed, rank, N, K, world_size, kind, device=device))


def make_w(seed: int, rank: int, N: int, K: int, world_size: int, kind: str = "gaussian",
           device="cpu") -> torch.Tensor:
    """w_r (N, K), bf16, on ``device``. A fresh tensor each call (callers may write into it)."""
    if torch.device(device).type == "cpu":
        return _make_w_cached(seed, rank, N, K, world_size, kind).clone()
    return _make_w(seed, rank, N, K, world_size, kind, device)


def shared_w(seed: int, rank: int, N: int, K: int, world_size: int, kind: str = "gaussian",
             device="cpu") -> torch.Tensor:
    """w_r as :func:`make_w` builds it, maybe without the copy (on the host: the cached tensor itself), which
    the caller must not write (the truth reads every rank's w for every call)."""
    if torch.device(device).type == "cpu":
        return _make_w_cached(seed, rank, N, K, world_size, kind)
    return _make_w(seed, rank, N, K, world_size, kind, device)


@functools.lru_cache(maxsize=16)
def _make_w_cached(seed: int, rank: int, N: int, K: int, world_size: int, kind: str) -> torch.Tensor:
    return _make_w(seed, rank, N, K, world_size, kind, "cpu")


def _make_w(seed: int, rank: int, N: int, K: int, world_size: int, kind: str, device) -> torch.Tensor:
    _check_kind(kind)
    if kind == "zeros":
        return torch.zeros(N, K, dtype=torch.bfloat16, device=device)
    if kind == "exact":
        return _dense("int", seed, rank, "w", (0, N), K, 1.0, device)
    scale = KIND_SCALE.get(kind, 1.0) / K**0.5
    w = _dense("gauss", seed, rank, "w", (0, N), K, scale, device)
    if kind == "nonfinite" and N * K and rank == seed % world_size:
        w.view(-1)[int(torch.randint(0, N * K, (1,), generator=_gen(seed, rank, "nonfinite-w")))] = float("nan")
    return _cancelling_w(w) if kind == "cancel" else w


def make_x(seed: int, rank: int, M: int, K: int, world_size: int, kind: str = "gaussian",
           rows: tuple[int, int] | None = None, device="cpu") -> torch.Tensor:
    """Rows ``rows = (start, stop)`` (default all M) of x_r, on ``device``; any range gives the same values as
    the corresponding rows of the whole tensor."""
    _check_kind(kind)
    start, stop = rows if rows is not None else (0, M)
    start, stop = max(0, start), min(M, stop)
    n = max(0, stop - start)
    if kind == "zeros" or n == 0 or K == 0:
        return torch.zeros(n, K, dtype=torch.bfloat16, device=device)
    if kind == "exact":
        x = _exact_x(seed, rank, M, K, world_size, start, stop, device)
    else:
        scale = KIND_SCALE.get(kind, 1.0)
        if kind == "skewed" and rank == world_size - 1:
            scale = SKEWED_SCALE
        x = _dense("gauss", seed, rank, "x", (start, stop), K, scale, device)
        if kind == "cancel":
            x = _cancelling_x(x)
    if kind == "nonfinite":
        picks = _nonfinite_picks(seed, rank, M, K)
        for value, flat in zip((float("nan"), float("inf"), float("-inf")), picks):
            r, c = divmod(flat, K)
            if start <= r < stop:
                x[r - start, c] = value
        z = zero_row(seed, rank, M, K, picks)
        if z is not None and start <= z < stop:
            x[z - start] = 0
    return x.contiguous()


def _nonfinite_picks(seed: int, rank: int, M: int, K: int) -> list[int]:
    """The flat indices of x_r where the nonfinite kind plants NaN, +Inf and -Inf (in this order)."""
    return torch.randint(0, M * K, (3,), generator=_gen(seed, rank, "nonfinite")).tolist()


def zero_row(seed: int, rank: int, M: int, K: int, picks: list[int] | None = None) -> int | None:
    """The nonfinite kind's all-zero row of x_r: a row none of the planted values (``picks``, drawn here when not
    given) is in (None where every row holds one)."""
    if picks is None:
        picks = _nonfinite_picks(seed, rank, M, K)
    taken = {flat // K for flat in picks}
    start = rank_seed(seed, rank, "nonfinite-zero-row") % M
    return next(((start + i) % M for i in range(M) if (start + i) % M not in taken), None)


def _cancelling_x(x: torch.Tensor) -> torch.Tensor:
    """The cancel kind's x from a gaussian one (row by row, so any row range gives the same rows): columns
    0..h-1 made positive and repeated as columns h..2h-1, h = K // 2 (an odd K keeps its last column)."""
    h = x.shape[1] // 2
    x[:, :h] = x[:, :h].abs()
    x[:, h : 2 * h] = x[:, :h]
    return x


def _cancelling_w(w: torch.Tensor) -> torch.Tensor:
    """The cancel kind's w from a gaussian one: columns 0..h-1 made positive (a), columns h..2h-1 become
    bf16(-a + CANCEL_DELTA * w[:, h:2h]) (one fp32 add, one bf16 rounding: the same bits on every device)."""
    h = w.shape[1] // 2
    a = w[:, :h].abs()
    w[:, h : 2 * h] = (w[:, h : 2 * h].float() * CANCEL_DELTA - a.float()).to(torch.bfloat16)
    w[:, :h] = a
    return w


def _exact_x(seed, rank, M, K, world_size, start, stop, device) -> torch.Tensor:
    """Rows [start, stop) of the exact kind's x: its non-zeros drawn on the host per block of ROW_BLOCK rows
    (a few per row), written into zeros on ``device``."""
    flat, vals = [], []
    for b in range(start // ROW_BLOCK, -(-stop // ROW_BLOCK)):
        b0, b1 = b * ROW_BLOCK, min(M, (b + 1) * ROW_BLOCK)
        where, values = _exact_x_block(seed, rank, b, b1 - b0, K, world_size)
        where = where + (b0 - start) * K
        keep = (where >= 0) & (where < (stop - start) * K)
        flat.append(where[keep])
        vals.append(values[keep])
    x = torch.zeros((stop - start) * K, dtype=torch.bfloat16, device=device)
    x[_to_device(torch.cat(flat), device)] = _to_device(torch.cat(vals).to(torch.bfloat16), device)  # distinct
    return x.view(stop - start, K)


def _exact_x_block(seed, rank, b, rows, K, world_size) -> tuple[torch.Tensor, torch.Tensor]:
    """The non-zeros of block ``b`` (``rows`` rows): (row-major flat places within the block, distinct; values).
    Each row draws ``nnz`` (column, value) pairs; a column drawn twice keeps its last value (<= nnz non-zeros)."""
    g = _gen(seed, rank, f"x{b}")
    nnz = min(K, exact_nnz(world_size))
    cols = torch.randint(0, K, (rows, nnz), generator=g)
    vals = torch.randint(1, 3, (rows, nnz), generator=g).float()
    vals *= torch.where(torch.rand(rows, nnz, generator=g) < 0.5, -1.0, 1.0)
    places = (torch.arange(rows)[:, None] * K + cols).flatten()
    distinct, which = torch.unique(places, return_inverse=True)
    last = torch.zeros(len(distinct), dtype=torch.long).scatter_reduce_(
        0, which, torch.arange(len(places)), "amax", include_self=False)
    return distinct, vals.flatten()[last]


#: The value table dense tensors are read from (module docstring), drawn TABLE_CHUNK values at a time. Its
#: length is a prime: a tensor's rows, read one after the other, meet the same values again only after
#: TABLE_LEN rows, whatever K (with 2^24, rows i and i + 2^24 / K of a power-of-two K would be equal, and a
#: row-aliasing bug -- a 32-bit byte offset that wraps -- would read an identical row).
TABLE_CHUNK = 1 << 20
TABLE_LEN = (1 << 24) - 3
#: Integers of the exact weights' table: |w| <= 3 (exact_nnz's bound).
EXACT_W_MAX = 3


@functools.cache
def _host_chunk(table: str, c: int) -> torch.Tensor:
    """Chunk ``c`` of a table ("gauss": N(0, 1); "int": integers in [-3, 3]), fp32 on the host, read-only."""
    g = torch.Generator().manual_seed(rank_seed(c, 0, f"table/{table}"))
    n = min(TABLE_CHUNK, TABLE_LEN - c * TABLE_CHUNK)
    if table == "int":
        return torch.randint(-EXACT_W_MAX, EXACT_W_MAX + 1, (n,), generator=g).to(torch.float32)
    return torch.randn(n, generator=g, dtype=torch.float32)


@functools.cache
def _device_table(table: str, device: torch.device) -> torch.Tensor:
    """The whole table on ``device`` (64 MiB, once per process and device). Complete before it is returned:
    it is read later on any stream, and a copy from pageable memory may still be in flight when ``to`` returns."""
    whole = torch.cat([_host_chunk(table, c) for c in range(-(-TABLE_LEN // TABLE_CHUNK))]).to(device)
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()
    return whole


def _window(table: str, start: int, count: int, device: torch.device) -> torch.Tensor:
    """``count`` values of ``table`` from ``start`` on (mod its length), fp32 on ``device``; may be a view of
    the table (read-only)."""
    start %= TABLE_LEN
    whole = _device_table(table, device) if device.type != "cpu" else None
    pieces = []
    while count > 0:
        if whole is not None:
            take = min(count, TABLE_LEN - start)
            pieces.append(whole[start : start + take])
        else:
            c, off = divmod(start, TABLE_CHUNK)
            chunk = _host_chunk(table, c)
            take = min(count, len(chunk) - off)
            pieces.append(chunk[off : off + take])
        start, count = (start + take) % TABLE_LEN, count - take
    if not pieces:
        return torch.empty(0, dtype=torch.float32, device=device)
    return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


def _dense(table: str, seed: int, rank: int, tag: str, rows: tuple[int, int], K: int, scale: float,
           device) -> torch.Tensor:
    """Rows [start, stop) of the (seed, rank, tag) tensor with K columns (module docstring), bf16 on ``device``."""
    device = torch.device(device)
    start, stop = rows
    offset = rank_seed(seed, rank, tag) % TABLE_LEN
    signs = torch.randint(0, 2, (K,), generator=_gen(seed, rank, f"{tag}/signs")).to(torch.float32) * 2 - 1
    column = _to_device(signs * scale, device)  # exact: +-scale, scale a power of two or 1/sqrt(K) as fp32
    step = max(1, TABLE_LEN // K)  # rows per piece: a tensor of 2^31 elements never holds 2^31 fp32 at once
    out = torch.empty(stop - start, K, dtype=torch.bfloat16, device=device)
    for r in range(start, stop, step):
        n = min(step, stop - r)
        out[r - start : r - start + n] = _window(table, offset + r * K, n * K, device).view(n, K) * column
    return out


def _to_device(host: torch.Tensor, device) -> torch.Tensor:
    """``host`` (a small tensor drawn on the host: signs, exact x's places and values) on ``device`` without
    waiting: a copy from pageable memory blocks the host until the stream's earlier work is done, and on a GPU
    that ranks time-slice each such wait is a turn of every process (seen: 8,000 of them, 32 s in one ci gate).
    From pinned memory the copy is queued on the current stream like a kernel (torch's pinned-memory cache keeps
    the buffer until the copy is done)."""
    device = torch.device(device)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown input kind {kind!r}; one of {KINDS}")


def all_rank_inputs(seed, M, N, K, world_size, kind="gaussian", device="cpu"):
    """Every rank's (x_r, w_r), rebuilt locally."""
    return [make_inputs(seed, r, M, N, K, world_size, kind, device) for r in range(world_size)]
