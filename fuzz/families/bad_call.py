"""The bad_call family: an invalid call of the bad-call table (:data:`fuzz.bad_calls.BAD_CALLS`; ``bad``
names one, or "all" for every one in turn on the same instance) raises its typed error and changes
nothing (``bad_call_rejected``). An accepted bad call whose operands hold a good call's values also says
whether its result was right (``extra["accepted_result_correct"]``)."""

from __future__ import annotations

import contextlib
import warnings

import torch

from kernel.checks import shard_rows
from properties import rejected_cleanly, sentinel_like, skipped, within_tolerance
from properties.result import CheckResult

from ..bad_calls import BAD_CALLS, BadCall, GoodCall
from ..case import Case
from .context import RankContext, aligned_if_waived, waiver


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
    return checks


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
