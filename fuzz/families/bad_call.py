"""The bad_call family: an invalid call of the bad-call table (:data:`fuzz.bad_calls.BAD_CALLS`; ``bad``
names one, or "all" for every one in turn on the same instance) raises its typed error and changes
nothing (``bad_call_rejected``). An accepted bad call whose operands hold a good call's values also says
whether its result was right (``extra["accepted_result_correct"]``). At W > 1, then one rank makes one of the
calls every rank rejected cleanly again, alone, and all make a valid call after (:func:`rejected_alone`)."""

from __future__ import annotations

import contextlib
import warnings

import torch

from oracle.shards import shard_rows
from properties import rejected_cleanly, sentinel_like, skipped, within_tolerance
from properties.result import CheckResult

from ..bad_calls import BAD_CALLS, BadCall, GoodCall
from ..case import Case
from .context import RankContext, aligned_if_waived, waiver
from .verified import verified_call

#: The valid call after a rank's lone bad call: inputs of a seed no other call of a case uses.
ALONE_SEED_OFFSET = 3_000_017


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    if case.bad == "all":
        entries = list(BAD_CALLS.values())
    elif case.bad in BAD_CALLS:
        entries = [BAD_CALLS[case.bad]]
    else:
        raise ValueError(f"unknown bad call {case.bad!r}: one of {sorted(BAD_CALLS)} or 'all'")
    W = ctx.world_size
    out_waived = waiver(impl, "out_param")
    goods: dict[int, GoodCall] = {}

    def good_at(M: int) -> GoodCall:
        if M not in goods:
            out = None if out_waived else sentinel_like((shard_rows(M, W), case.N), device=ctx.device)
            goods[M] = GoodCall(ctx.x(case, case.seed, M), ctx.w(case, case.seed), out, case.max_M,
                                aligned_if_waived(impl, case.max_M + 1, W))
        return goods[M]

    drawn = aligned_if_waived(impl, case.ms[0], W, case.max_M)
    # an entry that is no bad call at the drawn M (a padded-row out needs S >= 2 rows) runs at the smallest M
    # where it is one: 2W + 1 (S = 3), not skipped
    wider = aligned_if_waived(impl, min(case.max_M, 2 * W + 1), W, case.max_M)
    checks = []
    for entry in entries:
        M = drawn
        if not entry.applies(good_at(M), shard_rows(M, W)):
            M = wider
        if out_waived and entry.needs_out:
            res = skipped("bad_call_rejected", f"{entry.name}: waived by the implementation: {out_waived}",
                          rank=ctx.rank)
        elif not entry.applies(good_at(M), shard_rows(M, W)):
            res = skipped("bad_call_rejected", f"{entry.name}: not a bad call at M={drawn} nor {M}, N={case.N}, "
                          f"W={W} ({entry.what}: a valid layout here)", rank=ctx.rank, per_example=True)
        else:
            judge = (lambda y, M=M: judge_accepted(ctx, case, M, y)) if entry.same_values else None
            res = reject(ctx, impl, entry, good_at(M), name="bad_call_rejected", judge=judge)
        res.extra.update(bad=entry.name, M=M)
        checks.append(res)
    if W > 1:
        checks += rejected_alone(ctx, impl, case, checks, good_at(drawn))
    return checks


def rejected_alone(ctx: RankContext, impl, case: Case, checks: list[CheckResult], good: GoodCall) -> list[CheckResult]:
    """The contract's reason for "no collective before a rejection", tested as it happens in a server: one rank's
    operand alone is bad. Of the entries every rank rejected cleanly at the drawn M, the case's seed picks one and
    a group rank; that rank makes the bad call again while its peers make none (``bad_call_rejected_alone``: the
    typed error, nothing changed), then every rank lines up (a barrier) and makes one valid call
    (``after_alone``: properties 1-6). A handshake before the checks that no collective op shows -- a store
    rendezvous, a device-side barrier on symmetric memory -- leaves the lone rank waiting (a hang, with every
    rank's stack), and one that does not wait, or state stepped before the checks (a call counter, a buffer
    slot), puts the lone rank out of step with its peers: the valid call after is wrong or hangs. Made on every
    rank at once, as the entries above were, both pass. Skipped, with the reason, where no entry was rejected
    cleanly on every rank."""
    r, W = ctx.rank, ctx.world_size
    clean = [c.extra["bad"] for c in checks
             if c.name == "bad_call_rejected" and c.passed and not c.skipped and c.extra.get("M") == good.M]
    agreed = ctx.gather(clean)
    common = [name for name in BAD_CALLS if all(name in names for names in agreed.values())]
    if not common:
        return [skipped("bad_call_rejected_alone", f"no entry of the table every rank rejected cleanly at M={good.M} "
                        "(their own checks say why)", rank=r, per_example=True)]
    entry = BAD_CALLS[common[case.seed % len(common)]]
    lone = case.seed % W
    out = []
    if r == lone:
        res = reject(ctx, impl, entry, good, name="bad_call_rejected_alone")
        res.extra.update(bad=entry.name, M=good.M, alone=lone)
        if not res.passed:
            res.detail = f"made by group rank {lone} alone (its peers made no call): {res.detail}"
        out.append(res)
    ctx.barrier()
    call_checks, _, _ = verified_call(ctx, impl, case, good.M, case.seed + ALONE_SEED_OFFSET, tag="after_alone",
                                      late=False)
    for c in call_checks:
        c.extra.setdefault("alone", {"rank": lone, "bad": entry.name})
    return out + call_checks


def reject(ctx: RankContext, impl, entry: BadCall, good: GoodCall, *, name: str, judge=None,
           watched: dict[str, torch.Tensor] | None = None, no_work: bool = False,
           captured: bool = False) -> CheckResult:
    """Make ``entry``'s bad call from ``good`` and check it is rejected cleanly: its typed error (any
    exception where the implementation waives ``typed_errors``), nothing watched changed (w, the
    implementation's state tensors, the operands as passed, ``watched``), no collective ran before the raise
    (``no_work``: no work at all: properties.rejection). ``captured``: the call made inside a CUDA-graph capture
    (a graph of its own, dropped after): a check skipped or synchronising there shows. ``judge(y)`` -> (ok, why)
    says, for an accepted call, whether its result was right."""
    x, w, out = entry.build(good, shard_rows(good.M, ctx.world_size))
    expected = Exception if waiver(impl, "typed_errors") else entry.expected
    watch = {**impl.state_tensors(), **(watched or {})}
    for label, t in (("x", x if entry.watch_x else None), ("w", w), ("out", out)):
        if t is not None and t.device.type != "meta":
            watch[label] = t
    accepted: dict = {}

    def call():
        accepted["y"] = impl(x, w, out=out)

    ctx.began(f"{name} ({entry.name})", good.M, "a bad call: must be rejected")
    res = rejected_cleanly(call, expected, watch, rank=ctx.rank, name=name, no_work=no_work,
                           around=captured_call if captured else None)
    if "y" in accepted and judge is not None:
        ok, why = judge(accepted["y"])
        res.extra["accepted_result_correct"] = ok
        res.detail += ("; its result is right (the layout works; the contract still says reject)" if ok
                       else f"; its result is WRONG (silent corruption): {why}")
    if captured:
        res.extra["captured"] = True
    if not res.passed:
        res.detail = f"bad call {entry.name} ({entry.what}){' under CUDA-graph capture' if captured else ''}: " \
                     f"{res.detail}"
    return res


@contextlib.contextmanager
def captured_call():
    """A CUDA-graph capture of its own around a call that must raise before it queues anything: the graph is
    dropped after (empty when the call raised first: torch's warning about it is silenced)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*CUDA Graph is empty.*")
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            yield


def judge_accepted(ctx: RankContext, case: Case, M: int, y) -> tuple[bool, str]:
    """Whether an accepted same-values bad call's result is right (within tolerance of the truth)."""
    try:
        verdict = within_tolerance(y, ctx.truth(case, case.seed, M), rank=ctx.rank)
        return verdict.passed or verdict.skipped, verdict.detail  # skipped: no valid row here, nothing wrong
    except Exception as exc:  # noqa: BLE001 — a result of the wrong shape/type is itself the answer
        return False, f"{type(exc).__name__}: {exc}"
