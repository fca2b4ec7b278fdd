"""The compute family: for each M of ``case.ms`` in order, on one long-lived instance, a verified call
(:func:`fuzz.families.verified.verified_call`: properties 1-6) and 10 no_systematic_bias on its shard, then
7 repeatable (``repeat`` calls at ms[0]), 8 fresh_per_call (each result == a fresh instance's first call at
that M), 11 batch_invariant (``batch_m``: ms[0]'s tokens again inside another batch, see
:func:`batch_invariance`) and 9 inputs_changed_in_place (see :func:`inputs_changed_in_place`); with
``case.burst`` the calls once more, back to back (:func:`back_to_back`). An M the implementation waives
(``unaligned_m``) is a per-example skip."""

from __future__ import annotations

import torch

from oracle.shards import shard_rows, valid_rows
from properties import bitwise_equal, fresh_per_call, repeatable, sentinel_like, skipped, within_tolerance
from properties.batch_invariance import batch_invariant, invariance_inputs
from properties.bias import no_systematic_bias
from properties.result import CheckResult

from ..case import Case
from .context import RankContext, aligned_if_waived, close_impl, waiver
from .verified import check_call, launch_call, verified_call

INPLACE_SEED_OFFSET = 1_000_003  # inputs written in place: a seed no call of a case uses
BURST_SEED_OFFSET = 2_000_003  # the back-to-back calls' inputs: new values, seeds no other call of a case uses


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    r = ctx.rank
    checks: list[CheckResult] = []
    sequence = []
    unaligned_waived = waiver(impl, "unaligned_m")
    for i, (M, kind) in enumerate(zip(case.ms, case.call_kinds())):
        seed = case.seed + i
        if unaligned_waived and M % ctx.world_size:
            checks.append(skipped("unaligned_m", f"M={M} is not a multiple of W={ctx.world_size}; waived by the "
                                  f"implementation: {unaligned_waived}", rank=r, per_example=True))
            continue
        call_checks, y, (x, w, S, n_valid, row0) = verified_call(ctx, impl, case, M, seed, tag=f"call{i}",
                                                                 late=True, kind=kind)
        checks += call_checks
        checks.append(systematic_bias(ctx, case, y, M, seed, kind, tag=f"call{i}"))
        if i == 0 and case.repeat > 1:
            outs = [y]
            for j in range(1, case.repeat):
                o = sentinel_like((S, case.N), device=ctx.device) if case.out == "guarded" else None
                outs.append(ctx.call(impl, x, w, o, tag=f"call0.repeat{j}").clone())
            ctx.sync()
            checks.append(repeatable(outs, n_valid, rank=r, row_offset=row0))
        if len(case.ms) > 1:
            fresh = ctx.fresh_impl(case)
            try:
                o = sentinel_like((S, case.N), device=ctx.device) if case.out == "guarded" else None
                yf = ctx.call(fresh, x, w, o, tag=f"call{i}.fresh_instance", hold=False).clone()
                ctx.sync()
            finally:
                close_impl(fresh)
            sequence.append((M, y, yf, n_valid, row0))
        if i == 0:
            # right after the first call: a call on other tensors in between would re-stage a pointer-keyed
            # cache and hide the very bug this looks for
            checks.append(inputs_changed_in_place(ctx, impl, case, x, w, M, seed + INPLACE_SEED_OFFSET, kind))
        if i == 0 and case.batch_m is not None:  # w now holds the in-place values: call A's weights again
            checks.append(batch_invariance(ctx, impl, case, y, ctx.w(case, seed, kind), M, seed, kind))
    if sequence:
        checks.append(fresh_per_call(sequence, rank=r))
    if case.burst:
        checks += back_to_back(ctx, impl, case)
    return checks


def back_to_back(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    """The calls of ``case.ms`` once more (two at ms[0] where ms has one M), each on inputs of its own seed, launched
    back to back -- no wait, no oracle between them; the late rank's delay before each, on its stream -- then
    properties 1-6 of each after one ``ctx.sync()`` (tags ``burst<i>``). The family's other calls each have the
    oracle's collective (which lines the ranks up) or at least a wait before the next -- the repeats aside, on the
    same inputs -- so a rank whose next call overwrites the data a peer still reads (a done wait skipped or passed
    early) was right in all of them; only the two fixed counter-wrap cases made calls like these. Waived Ms
    (``unaligned_m``) are left out; fewer than two calls left is a skip with the reason."""
    W = ctx.world_size
    calls = list(zip(case.ms, case.call_kinds()))
    if len(calls) == 1:
        calls = calls * 2
    unaligned_waived = waiver(impl, "unaligned_m")
    calls = [(M, kind) for M, kind in calls if not (unaligned_waived and M % W)]
    if len(calls) < 2:
        return [skipped("back_to_back", f"fewer than two calls of M = {case.ms} left to run back to back (M not a "
                        f"multiple of W={W}, waived by the implementation: {unaligned_waived})", rank=ctx.rank,
                        per_example=True)]
    launched = [launch_call(ctx, impl, case, M, case.seed + BURST_SEED_OFFSET + i, tag=f"burst{i}", late=True,
                            kind=kind) for i, (M, kind) in enumerate(calls)]
    ctx.sync()
    checks: list[CheckResult] = []
    for call in launched:
        checks += check_call(ctx, impl, case, call)[0]
    return checks


#: Input kinds whose calls round nothing (every partial and sum representable in bf16): the bias check
#: could not fail on them, so it is skipped with this reason without building its model.
UNROUNDED_KINDS = {
    "exact": "exact inputs: every partial and sum is an integer representable in bf16, nothing is rounded "
             "(bitwise_equal judges them)",
    "zeros": "zero inputs: every result is exactly 0, nothing is rounded",
}


#: Input kinds outside the bias model's premises: skipped with the reason (the tolerance check judges them).
UNMODELLED_KINDS = {
    "cancel": "cancellation inputs: the fp32 running sum over K is ~2^8 times the partial, so a tensor core's "
              "truncation toward zero (a systematic error the contract allows) is not bounded by the rounding "
              "model's allowance, which assumes the running sum drifts to the partial",
}


def systematic_bias(ctx: RankContext, case: Case, y, M: int, seed: int, kind: str, *, tag: str) -> CheckResult:
    """Property 10: the call's shard carries no systematic error (:func:`properties.bias.no_systematic_bias`:
    mean signed error and mean error along the sign of the truth, against the fp64 truth). Skipped with the
    reason where it could not fail (nothing rounded, too few informative elements), never passed."""
    name = "no_systematic_bias"
    why = {**UNROUNDED_KINDS, **UNMODELLED_KINDS}.get(kind)
    if why:
        res = skipped(name, f"not applicable: {why}", rank=ctx.rank)
    else:
        res = no_systematic_bias(y, ctx.rounding_model(case, seed, M, kind), rank=ctx.rank, name=name)
    res.extra.update(call=tag, M=M, kind=kind)
    return res


def batch_invariance(ctx: RankContext, impl, case: Case, y_a, w, M_a: int, seed: int, kind: str) -> CheckResult:
    """Property 11: the tokens of the first call (at ``M_a``, result ``y_a``) placed at other rows of a call
    at ``case.batch_m`` among other tokens (:func:`properties.batch_invariance.invariance_inputs`; each token
    stays in its owner's shard) give the same bits there (:func:`properties.batch_invariance.batch_invariant`:
    no tolerance). Waivable on non-exact inputs (``batch_invariant`` clause); the waiver is the same on every
    rank, so every rank skips the call or none does."""
    r, W = ctx.rank, ctx.world_size
    name = "batch_invariant"
    M_b = aligned_if_waived(impl, case.batch_m, W, case.max_M)
    reason = waiver(impl, "batch_invariant")
    if reason and kind != "exact":
        res = skipped(name, f"waived by the implementation: {reason}", rank=r)
    else:
        inv = invariance_inputs(ctx.input_seed(seed), r, M_a, M_b, case.N, case.K, W, kind,  # the replica's tokens
                                device=ctx.device)
        out = sentinel_like((shard_rows(M_b, W), case.N), device=ctx.device) if case.out == "guarded" else None
        y_b = ctx.call(impl, inv.x_b, w, out, tag="batch")
        ctx.sync()
        res = batch_invariant(y_a, y_b, inv.row_map, rank=r, world_size=W, exact=kind == "exact", name=name)
    res.extra.update(call="batch", M=M_b, M_a=M_a, kind=kind)
    return res


def inputs_changed_in_place(ctx: RankContext, impl, case: Case, x, w, M: int, seed: int, kind: str) -> CheckResult:
    """Property 9: the same x and w tensors (same data pointers, same shapes) get new values in place,
    then one more call; its result must follow the new values (an implementation that stages inputs or
    caches results keyed by pointer — host state a graph replay would not reproduce — fails).

    The values are written through ``.data`` -- the tensors' version counters (``_version``) do not move, as after
    a write by a Triton or C++ kernel through the pointer, a receive into the buffer, or a freed input's memory
    handed to the next one: a cache keyed by ``(data_ptr, _version)`` ("an in-place update bumps the version, so a
    hit is always fresh") returns its stale entry here (peer-style audit, 2026-12-06: mutants
    ``PeerResultCacheByPtrVersion``, ``PeerWeightCacheByPtrVersion``). A ``copy_`` that moves the counter is the
    weaker case: every cache it makes miss, this one does too."""
    r, W = ctx.rank, ctx.world_size
    n_valid, row0 = valid_rows(M, W, r), r * shard_rows(M, W)
    x.data.copy_(ctx.x(case, seed, M, kind))
    w.data.copy_(ctx.w(case, seed, kind))
    out = sentinel_like((shard_rows(M, W), case.N), device=ctx.device) if case.out == "guarded" else None
    y = ctx.call(impl, x, w, out, tag="inplace")
    ctx.sync()
    truth = ctx.truth(case, seed, M, kind)
    name = "inputs_changed_in_place"
    if kind == "exact":
        res = bitwise_equal(y, truth.y[:n_valid].to(torch.bfloat16), n_valid, rank=r, row_offset=row0, name=name)
    else:
        res = within_tolerance(y, truth, rank=r, name=name)
    if not res.passed and not res.skipped:
        res.detail = (res.detail + "; " if res.detail else "") + (
            "after new values were written into the same x and w tensors, the result did not follow them")
    res.extra.update(call="inplace", M=M, kind=kind)
    return res
