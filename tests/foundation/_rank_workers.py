"""Functions that run on every rank of a gloo group started by ``_dist.run_ranks``.

Each takes ``(rank, world_size, **params)``, runs inside an initialised default process group and
returns ``(failures, info)``: a list of rendered failure messages (empty: this rank passed) and a
JSON-able dict for the parent. Every rank issues the same collectives in the same order, whatever
it finds, so a failure on one rank never leaves its peers waiting. Not a test module: no ``assert``.
"""

from __future__ import annotations

import torch

from kernel.checks import shard_rows, valid_rows
from kernel.errors import CapacityError, DeviceError, DTypeError, LayoutError, ShapeError
from kernel.unfused import UnfusedGemmRs
from oracle import all_rank_inputs, reference_gemm_rs, shard_truth
from properties import (
    Guarded,
    bitwise_equal,
    fresh_per_call,
    padded_rows_untouched,
    rejected_cleanly,
    repeatable,
    sentinel_like,
    within_tolerance,
)


def _collect(failures: list[str], res, where: str) -> None:
    if not res.passed:
        failures.append(f"{where}: {res.render()}")


def oracle_vs_truth(rank: int, world_size: int, *, Ms: list[int], N: int, K: int, seed: int):
    """reference_gemm_rs is within the derived tolerance of the fp64 truth for every kind, and in exact
    mode bitwise equal to the truth rounded to bf16; padding rows of the reference are zero."""
    failures, n_valid_seen = [], {}
    for M in Ms:
        S = shard_rows(M, world_size)
        for kind in ("gaussian", "small", "exact"):
            where = f"oracle M={M} kind={kind} seed={seed}"
            inputs = all_rank_inputs(seed, M, N, K, world_size, kind)
            x, w = inputs[rank]
            y = reference_gemm_rs(x, w)
            truth = shard_truth(inputs, rank, M)
            n_valid_seen[str(M)] = truth.n_valid
            if tuple(y.shape) != (S, N) or y.dtype != torch.bfloat16:
                failures.append(f"{where}: shape {tuple(y.shape)} {y.dtype}, expected ({S}, {N}) bf16")
                continue
            if truth.n_valid != valid_rows(M, world_size, rank):
                failures.append(
                    f"{where}: truth.n_valid={truth.n_valid}, expected {valid_rows(M, world_size, rank)}"
                )
            _collect(failures, within_tolerance(y, truth, rank=rank), where)
            if kind == "exact":
                _collect(
                    failures,
                    bitwise_equal(y, truth.y, truth.n_valid, rank=rank, row_offset=truth.row_offset),
                    where + " (bitwise vs truth)",
                )
            if bool((y[truth.n_valid :] != 0).any()):
                failures.append(f"{where}: reference padding rows {truth.n_valid}..{S} are not zero")
    return failures, {"n_valid": n_valid_seen}


def unfused_vs_contract(rank: int, world_size: int, *, Ms: list[int], N: int, K: int, max_M: int, seed: int):
    """UnfusedGemmRs against the contract on a real gloo group: oracle bitwise, truth within tolerance
    (bitwise in exact mode), out= with sentinel padding and guard rows, repeatability, alternation, and
    every bad-call class rejected with its typed error and nothing changed."""
    failures = []
    impl = UnfusedGemmRs(None, max_M=max_M, N=N, K=K, device="cpu")
    if impl.world_size != world_size or impl.rank != rank:
        failures.append(
            f"impl sees W={impl.world_size} rank={impl.rank}, expected W={world_size} rank={rank}"
        )
    for M in Ms:
        S = shard_rows(M, world_size)
        for kind in ("gaussian", "exact"):
            where = f"unfused M={M} kind={kind} seed={seed}"
            inputs = all_rank_inputs(seed, M, N, K, world_size, kind)
            x, w = inputs[rank]
            truth = shard_truth(inputs, rank, M)
            n, r0 = truth.n_valid, truth.row_offset
            ref = reference_gemm_rs(x, w)
            y = impl(x, w)
            if tuple(y.shape) != (S, N) or y.dtype != torch.bfloat16:
                failures.append(f"{where}: shape {tuple(y.shape)} {y.dtype}, expected ({S}, {N}) bf16")
                continue
            if impl.last_path != "unfused":
                failures.append(f"{where}: last_path={impl.last_path!r}")
            _collect(failures, bitwise_equal(y, ref, n, rank=rank, row_offset=r0), where + " (vs oracle)")
            _collect(failures, within_tolerance(y, truth, rank=rank), where + " (vs truth)")
            if kind == "exact":
                _collect(
                    failures,
                    bitwise_equal(y, truth.y, n, rank=rank, row_offset=r0),
                    where + " (bitwise vs truth)",
                )
            # out= pre-filled with the sentinel, inside guard rows
            guarded = Guarded(S, N)
            guarded.payload.copy_(sentinel_like((S, N)))
            before = guarded.payload.clone()
            got = impl(x, w, out=guarded.payload)
            if got.data_ptr() != guarded.payload.data_ptr():
                failures.append(f"{where}: out= given but a different tensor was returned")
            _collect(
                failures,
                padded_rows_untouched(guarded.payload, before, n, rank=rank, row_offset=r0),
                where + " (out=)",
            )
            _collect(failures, guarded.check(rank=rank), where + " (out=)")
            _collect(
                failures,
                bitwise_equal(guarded.payload, ref, n, rank=rank, row_offset=r0),
                where + " (out= vs oracle)",
            )
            again = impl(x, w)
            _collect(failures, repeatable([y, got, again], n, rank=rank, row_offset=r0), where)

    # alternation in exact mode: each call as if it were the first
    sequence = []
    for M in [Ms[-1], 1, *Ms, Ms[-1], 1]:
        inputs = all_rank_inputs(seed + M, M, N, K, world_size, "exact")
        x, w = inputs[rank]
        got = impl(x, w)
        fresh = reference_gemm_rs(x, w)
        sequence.append((M, got, fresh, valid_rows(M, world_size, rank), rank * shard_rows(M, world_size)))
    _collect(failures, fresh_per_call(sequence, rank=rank), "unfused alternation")

    failures += bad_calls(impl, rank, N=N, K=K, max_M=max_M, seed=seed)
    return failures, {"waived": dict(impl.waived_clauses)}


def _misaligned(shape, fill: torch.Tensor | None = None) -> torch.Tensor:
    """A contiguous bf16 view starting at element 1 of a buffer: 2 bytes past a 16-byte boundary."""
    n = 1
    for d in shape:
        n *= d
    buf = torch.zeros(n + 8, dtype=torch.bfloat16)
    t = buf[1 : 1 + n].view(*shape)
    if fill is not None:
        t.copy_(fill)
    return t


def bad_calls(impl, rank: int, *, N: int, K: int, max_M: int, seed: int) -> list[str]:
    """Every bad-call class raises its typed error and changes nothing watched (rank-local: a rejected
    call queues no collective)."""
    W = impl.world_size
    M = 2 * W + 1
    S = shard_rows(M, W)
    x, w = all_rank_inputs(seed, M, N, K, W, "gaussian")[rank]
    out = sentinel_like((S, N))
    meta = torch.device("meta")
    x_big = all_rank_inputs(seed, M, N, 2 * K, W, "gaussian")[rank][0]
    aliasing_x = torch.zeros(max(M * K, S * N), dtype=torch.bfloat16)
    cases = [
        # (what, expected error, call arguments)
        ("x 1-D", ShapeError, (x.reshape(-1), w, None)),
        ("x 3-D", ShapeError, (x.reshape(1, M, K), w, None)),
        ("w 3-D", ShapeError, (x, w.reshape(1, N, K), None)),
        ("w (N+1, K)", ShapeError, (x, torch.zeros(N + 1, K, dtype=torch.bfloat16), None)),
        (
            "w (N, 2K) = w^T-like K mismatch",
            ShapeError,
            (x, torch.zeros(N, 2 * K, dtype=torch.bfloat16), None),
        ),
        ("x K != w K", ShapeError, (x_big, w, None)),
        ("w passed as (K, N)", ShapeError, (x, torch.zeros(K, N, dtype=torch.bfloat16), None)),
        ("out (S+1, N)", ShapeError, (x, w, sentinel_like((S + 1, N)))),
        ("out (S, N+1)", ShapeError, (x, w, sentinel_like((S, N + 1)))),
        ("out 1-D", ShapeError, (x, w, sentinel_like((S * N,)))),
        ("x fp32", DTypeError, (x.float(), w, None)),
        ("w fp16", DTypeError, (x, w.half(), None)),
        ("out fp32", DTypeError, (x, w, torch.zeros(S, N))),
        ("x on meta", DeviceError, (torch.empty(M, K, dtype=torch.bfloat16, device=meta), w, None)),
        ("w on meta", DeviceError, (x, torch.empty(N, K, dtype=torch.bfloat16, device=meta), None)),
        ("out on meta", DeviceError, (x, w, torch.empty(S, N, dtype=torch.bfloat16, device=meta))),
        ("x non-contiguous", LayoutError, (x_big[:, ::2], w, None)),
        ("w = W.mT of a (K, N) tensor", LayoutError, (x, w.t().contiguous().t(), None)),
        ("out non-contiguous", LayoutError, (x, w, sentinel_like((S, 2 * N))[:, ::2])),
        ("x misaligned", LayoutError, (_misaligned((M, K), x), w, None)),
        ("w misaligned", LayoutError, (x, _misaligned((N, K), w), None)),
        ("out misaligned", LayoutError, (x, w, _misaligned((S, N), out))),
        (
            "out overlaps x",
            LayoutError,
            (aliasing_x[: M * K].view(M, K).copy_(x), w, aliasing_x[: S * N].view(S, N)),
        ),
        ("M = 0", CapacityError, (x[:0], w, None)),
        ("M = max_M + 1", CapacityError, (torch.zeros(max_M + 1, K, dtype=torch.bfloat16), w, None)),
    ]
    failures = []
    for what, expected, (cx, cw, cout) in cases:
        watched = {"workspace partials": impl._partials, "workspace shard": impl._shard}
        for name, t in (("x", cx), ("w", cw), ("out", cout)):
            if t is not None and t.device.type != "meta":
                watched[name] = t
        res = rejected_cleanly(
            lambda cx=cx, cw=cw, cout=cout: impl(cx, cw, out=cout), expected, watched, rank=rank
        )
        _collect(failures, res, f"bad call '{what}'")
    return failures


def planted_rank_failures(rank: int, world_size: int, *, hang_s: float):
    """For the plumbing's own test: rank 0 reports a failure, rank 1 raises, rank 2 hangs."""
    if rank == 0:
        return ["planted failure on rank 0: Mismatched elements: 1 / 4 at index (0, 1)"], None
    if rank == 1:
        raise RuntimeError("planted exception on rank 1")
    if rank == 2:
        import time

        time.sleep(hang_s)
    return [], None
