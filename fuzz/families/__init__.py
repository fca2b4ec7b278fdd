"""What a rank does with one case: the families (see :mod:`fuzz.case` for the verification model).

A family is one module with ``run(ctx, impl, case) -> list[CheckResult]`` and one entry in
:data:`FAMILIES`. Every valid implementation call goes through ``ctx.call`` (:mod:`.calls`: path, result
contract, freshness, a raising call), every invalid one through ``properties.rejected_cleanly``
(:mod:`.bad_call`).

Every rank runs the same sequence of collectives (implementation calls, oracle calls) in the same order,
so a correct implementation never deadlocks here; a broken one that does is caught by the driver's
watchdog. What :func:`run_case` returns is this rank's verdict material; it raises only for a harness
error (an unknown family, a bug here), which the engine reports as ERROR.
"""

from __future__ import annotations

import dataclasses

import kernel.errors as kerr
from properties import main_path_available, skipped
from properties.result import CheckResult

from ..case import Case
from . import bad_call, capacity, compute, dispatch, graph, groups, instances, streams
from .calls import raised_by_call
from .context import RankContext, describe_exception, waiver

#: family name (Case.family) -> runner
FAMILIES = {
    "compute": compute.run,
    "capacity": capacity.run,
    "bad_call": bad_call.run,
    "graph": graph.run,
    "instances": instances.run,
    "dispatch": dispatch.run,
    "streams": streams.run,
}

#: out= clauses reported as skipped where the implementation waives out= (the case runs with out=None)
OUT_CLAUSES = ("returns_out", "padded_rows_untouched")
#: families whose calls pass out= when the case says so
OUT_FAMILIES = ("compute", "capacity", "graph", "instances", "streams")

__all__ = ["FAMILIES", "RankContext", "describe_exception", "run_case"]


def run_case(ctx: RankContext, case: Case) -> list[CheckResult]:
    """All checks of ``case`` on this rank.

    * the implementation's construction raising UnsupportedConfigError: one skipped check with the reason
      (the whole family is skipped, never passed);
    * the host cannot build the implementation's main path: one failed ``main_path_available`` check;
    * a valid call raising: the checks so far and a failed ``call_raised`` (the family stops there);
    * ``case.layout``: the family on each TP group of the layout at once, then a world call
      (:mod:`.groups`)."""
    runner = FAMILIES.get(case.family)
    if runner is None:
        raise ValueError(f"unknown case family {case.family!r}: one of {sorted(FAMILIES)}")
    calls = ctx.begin_case()
    if case.layout is None:
        checks = run_family(ctx, case, runner)
    else:
        checks = groups.run_layout(ctx, case, lambda view: run_family(view, case, runner),
                                   lambda world: run_family(world, case, groups.world_call))
    return checks + calls.checks + calls.finish()


def run_family(ctx: RankContext, case: Case, runner) -> list[CheckResult]:
    """``runner(ctx, impl, case)`` on ``ctx``'s group with its long-lived instance of the case's shape, the
    rules of :func:`run_case` applied."""
    try:
        impl = ctx.impl(case)
    except kerr.UnsupportedConfigError as exc:
        return [skipped("unsupported_config", f"construction raised {type(exc).__name__}: {exc}", rank=ctx.rank)]
    available = main_path_available(impl.main_path_support(), main_path=impl.main_path, rank=ctx.rank)
    if not available.passed:  # (a pass is not reported: a case whose checks were all skipped stays skipped)
        return [available]
    notes = []
    reason = waiver(impl, "out_param")
    if reason and case.out == "guarded" and case.family in OUT_FAMILIES:
        # No out= to check: run the case with out=None and report the out= clauses as skipped.
        case = dataclasses.replace(case, out="none")
        notes += [skipped(name, f"waived by the implementation: {reason}", rank=ctx.rank) for name in OUT_CLAUSES]
    try:
        checks = runner(ctx, impl, case)
    except Exception as exc:
        if not raised_by_call(exc):
            raise
        checks = []  # the failed call_raised check is in the ledger
    return notes + checks
