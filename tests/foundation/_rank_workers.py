"""Functions that run on every rank of a gloo group started by ``_dist.run_ranks``.

Each takes ``(rank, world_size, **params)``, runs inside an initialised default process group and
returns ``(failures, info)``: a list of rendered failure messages (empty: this rank passed) and a
JSON-able dict for the parent. Every rank issues the same collectives in the same order, whatever
it finds, so a failure on one rank never leaves its peers waiting. Not a test module: no ``assert``.
"""

from __future__ import annotations

import torch

from fuzz.bad_calls import BAD_CALLS, CAPACITY_CALLS, GoodCall
from fuzz.families import RankContext
from fuzz.families.bad_call import reject
from kernel.checks import shard_rows, valid_rows
from kernel.unfused import UnfusedGemmRs
from oracle import all_rank_inputs, reference_gemm_rs, shard_truth
from properties import (
    Guarded,
    bitwise_equal,
    fresh_per_call,
    padded_rows_untouched,
    repeatable,
    sentinel_like,
    within_tolerance,
)
from properties.padding import NO_PADDING_ROWS
from properties.result import NO_VALID_ROWS


def _collect(failures: list[str], res, where: str) -> None:
    """A check that did not pass is a failure here -- a skip too, but where this rank has nothing to compare (the
    padding checks on a full shard, the value checks on a rank with no valid row)."""
    if res.passed or (res.skipped and res.detail in (NO_PADDING_ROWS, NO_VALID_ROWS)):
        return
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


def oracle_in_groups(rank: int, world_size: int, *, groups: list[list[int]], Ms: list[int], N: int, K: int,
                     seed: int):
    """The oracle on a process group of some of the world's ranks (a TP group beside others): each rank's shard is
    bitwise the truth of its own group's inputs (exact kind; each group draws its own, by its index), shaped for
    its group's size -- not the world's, nor another group's sum. info: this rank's group size and rows checked."""
    import torch.distributed as dist

    handles = [dist.new_group(g) for g in groups]  # every rank makes every group, in one order
    index = next(i for i, g in enumerate(groups) if rank in g)
    group, members = handles[index], groups[index]
    G, me = len(members), members.index(rank)
    failures, rows = [], {}
    for M in Ms:
        where = f"oracle in group {members} M={M} seed={seed + index}"
        inputs = all_rank_inputs(seed + index, M, N, K, G, "exact")
        y = reference_gemm_rs(*inputs[me], group)
        truth = shard_truth(inputs, me, M)
        if tuple(y.shape) != (shard_rows(M, G), N):
            failures.append(f"{where}: shape {tuple(y.shape)}, expected {(shard_rows(M, G), N)}")
            continue
        _collect(failures, bitwise_equal(y, truth.y, truth.n_valid, rank=me, row_offset=truth.row_offset), where)
        rows[str(M)] = truth.n_valid
    return failures, {"group_size": G, "rows": rows}


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


def bad_calls(impl, rank: int, *, N: int, K: int, max_M: int, seed: int) -> list[str]:
    """Every entry of the bad-call table (fuzz/bad_calls.py, the gate's own) raises its typed error and
    changes nothing watched, through the gate's helper (rank-local: a rejected call queues no collective)."""
    W = impl.world_size
    M = 2 * W + 1
    x, w = all_rank_inputs(seed, M, N, K, W, "gaussian")[rank]
    good = GoodCall(x, w, sentinel_like((shard_rows(M, W), N)), max_M, max_M + 1)
    ctx = RankContext(None, rank=rank, world_size=W, device=torch.device("cpu"))
    failures = []
    for entry in (*BAD_CALLS.values(), *CAPACITY_CALLS.values()):
        _collect(failures, reject(ctx, impl, entry, good, name="bad_call_rejected"), f"bad call '{entry.name}'")
    return failures


def planted_rank_failures(rank: int, world_size: int, *, hang_s: float):
    """For the plumbing's own test: rank 0 reports a failure, rank 1 raises, rank 2 hangs -- once every rank is
    up (a barrier first: without it, once on a loaded 2-core CI box, rank 0 had failed and its peers' grace run
    out while another rank's stack was still in ``init_process_group``, so rank 1 never got to raise)."""
    import torch.distributed as dist

    dist.barrier()
    if rank == 0:
        return ["planted failure on rank 0: Mismatched elements: 1 / 4 at index (0, 1)"], None
    if rank == 1:
        raise RuntimeError("planted exception on rank 1")
    if rank == 2:
        import time

        time.sleep(hang_s)
    return [], None


def rendezvous_agreement(rank: int, world_size: int, *, scenarios: list[dict]):
    """Each scenario: rank r's process has made ``made[r]`` rendezvous through the fused workspace, then the
    alignment before the next one, the one-rank catch-up rendezvous recorded instead of made (no CUDA here) and
    failing on rank ``solo_fails_on``. info: per scenario, what it raised on this rank (None: nothing), the
    catch-ups made and the count after."""
    import torch.distributed as dist

    from kernel.fused import workspace

    out = []
    for sc in scenarios:
        workspace._RENDEZVOUS_MADE[0] = sc["made"][rank]
        solo: list = []
        fails_here = sc.get("solo_fails_on") == rank

        def fake_solo_rendezvous(device, fails=fails_here, solo=solo):
            group = workspace._solo_group()  # the real one-rank group, made by this rank alone
            if dist.get_world_size(group) != 1 or dist.get_process_group_ranks(group) != [rank]:
                raise RuntimeError(f"the solo group is not this rank alone: {dist.get_process_group_ranks(group)}")
            if fails:
                raise RuntimeError("planted: the catch-up rendezvous failed")
            solo.append(device)

        workspace._solo_rendezvous = fake_solo_rendezvous
        try:
            workspace.align_rendezvous_counts(None, "cpu")
        except Exception as exc:  # noqa: BLE001 -- reported to the test, which judges it
            out.append({"raised": type(exc).__name__, "message": str(exc), "solo": len(solo)})
            continue
        out.append({"raised": None, "solo": len(solo), "after": workspace._RENDEZVOUS_MADE[0]})
    dist.barrier(group=dist.new_group(list(range(world_size))))  # the world's group numbering is intact
    return [], out
