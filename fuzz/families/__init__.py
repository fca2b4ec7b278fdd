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
from properties import (
    call_raised,
    declared_claim,
    declared_config_served,
    guard_regions_untouched,
    main_path_available,
    skipped,
)
from properties.result import CheckResult

from ..case import Case
from . import (
    bad_call,
    byte_boundary,
    calls_only,
    capacity,
    compute,
    dispatch,
    graph,
    groups,
    instances,
    streams,
    support,
    wrap,
)
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
    "byte_boundary": byte_boundary.run,
    "wrap": wrap.run,
}
#: Families of the sanitizer mode alone (``python -m fuzz.sanitize --calls-only``): no strategy draws them, and
#: their cases carry no value checks of their own (the sanitizer's report is the verdict).
SANITIZER_FAMILIES = {"calls_only": calls_only.run}

#: Families only nightly GPU runs draw (fuzz/test_gemm_rs.py skips them elsewhere): GiB-sized cases.
NIGHTLY_ONLY = frozenset({"byte_boundary"})

#: out= clauses reported as skipped where the implementation waives out= (the case runs with out=None)
OUT_CLAUSES = ("returns_out", "padded_rows_untouched")
#: families whose calls pass out= when the case says so
OUT_FAMILIES = ("compute", "capacity", "graph", "instances", "streams", "wrap", "bad_call")

__all__ = ["FAMILIES", "NIGHTLY_ONLY", "SANITIZER_FAMILIES", "RankContext", "describe_exception", "run_case",
           "settled_guards"]


def run_case(ctx: RankContext, case: Case) -> list[CheckResult]:
    """All checks of ``case`` on this rank.

    * the implementation's construction raising UnsupportedConfigError: one skipped check with the reason
      (the whole family is skipped, never passed) — or, for an (N, K) its class declares unsupported
      (``supports``), a passed ``unsupported_shape_handled`` (:mod:`.support`: the typed rejection it owes);
    * an instance for an undeclared (N, K): ``unsupported_shape_handled`` first (can_run must say no; the
      calls take the fallback, or, with none, one call raises its typed error and the family does not run);
    * the implementation's construction raising anything else (a typed error such as
      ``SymmetricMemoryMismatch``, a ``RuntimeError`` from CUDA or torch): one failed ``call_raised`` check (the
      implementation failed on a configuration it accepts, not the harness);
    * the host cannot build the implementation's main path: one failed ``main_path_available`` check;
    * a valid call raising: the checks so far and a failed ``call_raised`` (the family stops there);
    * the GPU reporting a fault after the implementation's calls (an illegal address, a kernel's trap, surfacing
      at a later wait): the checks so far and a failed ``device_fault`` (the case stops there);
    * a method of the implementation raising (``guard_regions()``, ``expected_path()``, ... called by a check):
      the checks so far and a failed ``call_raised`` naming the method (the case stops there);
    * ``case.layout``: the family on each TP group of the layout at once, then a world call
      (:mod:`.groups`)."""
    runner = FAMILIES.get(case.family) or SANITIZER_FAMILIES.get(case.family)
    if runner is None:
        raise ValueError(f"unknown case family {case.family!r}: one of {sorted(FAMILIES) + sorted(SANITIZER_FAMILIES)}")
    calls = ctx.begin_case()
    if case.autograd is not None:
        calls.rotate_autograd(case.autograd)
    calls.defaults = case.defaults
    checks: list[CheckResult] = []
    try:
        if case.layout is None:
            checks = run_family(ctx, case, runner)
        else:
            checks = groups.run_layout(ctx, case, lambda view: run_family(view, case, runner),
                                       lambda world: run_family(world, case, groups.world_call))
        checks = checks + calls.checks + calls.finish()
        # The case's queued GPU work, waited for before its result goes out: a fault it caused asynchronously (an
        # illegal address, a kernel's spin-timeout trap) raises here, in this case. Unwaited, it surfaced at the
        # rank's next CUDA call -- the cache trim between cases killed the rank (12th session, one H200): the next
        # case read DIED, re-ran clean on a fresh pool as flaky, and the case that caused it stood as passed.
        ctx.sync()
    except Exception as exc:
        # the implementation's kernels faulted (properties/device_fault.py), or one of its methods raised (a query
        # of its interface: guard_regions(), expected_path(), ...): its failure, with the checks made before it
        # (the whole case's, when it surfaced at the final wait); nothing more to check
        fault = calls.device_fault(exc)  # (a failed CheckResult is falsy: no ``or`` between the two)
        if fault is None:
            fault = calls.raised_in_implementation(exc, getattr(ctx, "impl_factory", None))
        if fault is None:
            raise  # the harness broke: an ERROR of the case (fuzz/verdict.py)
        return (checks or calls.checks) + [fault]
    if any(not c.skipped and c.name != main_path_available.__name__ for c in checks):
        checks += settled_guards(ctx)  # only after a family that ran: a skipped case stays skipped
    return checks


def settled_guards(ctx: RankContext) -> list[CheckResult]:
    """Once the rank's GPU work for the case is done (:func:`run_case` waits first), the guard regions of every
    instance it holds once more: a write past a workspace that landed after the per-call checks read them (work
    left on another stream) shows in the case that made it -- later it would show in the next case, or never, when
    the instance is closed first. One check over every held instance's regions, read back at once: one wait for
    the device per case (a wait per instance, up to 16 held, cost a W = 2, 4, 8 gate on one H200 3x its case rate:
    13th session). No collective (a rank's result never waits for its peers): a peer's late write is the next
    case's finding."""
    regions = {f"{label}: {region}": words for label, impl in ctx.held_impls().items()
               for region, words in impl.guard_regions().items()}
    if not regions:
        return []
    check = guard_regions_untouched(regions, rank=ctx.rank)
    check.detail = f"at the case's end: {check.detail}"
    check.extra["when"] = "case end"
    return [check]


def run_family(ctx: RankContext, case: Case, runner) -> list[CheckResult]:
    """``runner(ctx, impl, case)`` on ``ctx``'s group with its long-lived instance of the case's shape, the
    rules of :func:`run_case` applied."""
    shape = support.declared(ctx.impl_factory, case.N, case.K)
    undeclared = shape is not None and not shape
    try:
        impl = ctx.impl(case)
    except Exception as exc:  # noqa: BLE001 -- what the implementation's own constructor raised
        if isinstance(exc, kerr.GemmRsError) and case.family == "byte_boundary":  # a size it cannot serve: clean
            return [byte_boundary.rejected(exc, case, "construction", rank=ctx.rank)]
        if not isinstance(exc, kerr.UnsupportedConfigError):  # it failed on a configuration it accepts
            return [call_raised(exc, rank=ctx.rank, what=f"building the instance (max_M={case.max_M}, N={case.N}, "
                                                         f"K={case.K}) on group {list(ctx.tp.members)}")]
        if undeclared:
            return [support.construction_rejected(exc, case, shape.reason, rank=ctx.rank)]
        claim = declared_claim(ctx.impl_factory, case.N, case.K, ctx.world_size)
        what = f"building the instance (max_M={case.max_M}, N={case.N}, K={case.K}) raised {type(exc).__name__}: {exc}"
        if claim:  # a refusal of what the class declares it serves: no skip of the family
            return [declared_config_served(claim, what, rank=ctx.rank)]
        return [skipped("unsupported_config", f"construction raised {type(exc).__name__}: {exc}", rank=ctx.rank)]
    available = main_path_available(impl.main_path_support(), main_path=impl.main_path, rank=ctx.rank)
    if not available.passed:  # (a pass is not reported: a case whose checks were all skipped stays skipped)
        return [available]
    notes = []
    if undeclared:
        handled, go_on = support.instance_handles(ctx, impl, case, shape.reason)
        notes.append(handled)
        if not go_on:
            return notes
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
