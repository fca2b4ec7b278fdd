"""The instances family (CONTRACT.md, "Instances"): several live instances per rank with different
(N, K, max_M) — a layer's attention output projection beside its MLP down projection — called in
interleaved order, then instances destroyed and re-created at other sizes while the others live on (the
allocator hands the new workspaces addresses the old ones had).

Instance 0 is the pool's long-lived instance of the case's (N, K, max_M); ``shapes`` lists the case's own
instances ([N, K, max_M], built in this order; construction and close are collective on the group, every
rank in the same order). Call i goes to instance ``order[i]`` at M = ``ms[i]`` (capped to that instance's
max_M), inputs of kind ``kinds[i]``. Then for each entry j of ``recreate`` the case's instance
``j % len(shapes)`` is closed and a new one built at ``recreate[j]``, and every live instance is called
once more. Checks:

* every call: a verified call (properties 1-6 of :mod:`fuzz.case`, with that instance's shape);
* ``other_instances_untouched``: across each call, every other live instance keeps the bits of its state
  tensors and red zones (a flag area, workspace or epoch shared between instances shows here);
* ``should_run_stable``: each instance's ``should_run`` answers at probed M (1, max_M and both sides of
  its crossover), taken when it was built (instance 0: when the case began), are the same at the end.
"""

from __future__ import annotations

import dataclasses

from properties.dispatch import should_run_stable
from properties.result import CheckResult
from properties.state import snapshot, state_unchanged

from ..case import Case
from .context import RankContext, aligned_if_waived, close_impl
from .crossover import crossover_neighbours, should_run_asker
from .verified import verified_call

RECREATE_SEED_OFFSET = 5_000_011


@dataclasses.dataclass
class Live:
    """One live instance of the case: its label, shape view of the case, and should_run answers at birth."""

    label: str
    impl: object
    case: Case
    own: bool                 # built by this case (closed by it); instance 0 is the pool's
    should_run: dict[int, bool]


def run(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    if not case.shapes:
        raise ValueError("an instances case needs shapes (the case's own instances)")
    order = case.order if case.order is not None else [i % (len(case.shapes) + 1) for i in range(len(case.ms))]
    if len(order) != len(case.ms) or any(not 0 <= i <= len(case.shapes) for i in order):
        raise ValueError(f"order {order} must give each call of ms {case.ms} an instance in 0..{len(case.shapes)}")
    live = [Live("instance 0", impl, case, False, probe_should_run(ctx, impl, case))]
    checks: list[CheckResult] = []
    try:
        for n, (N, K, max_M) in enumerate(case.shapes, start=1):
            live.append(build(ctx, case, f"instance {n}", N, K, max_M))
        kinds = case.call_kinds()
        for i, (M, which) in enumerate(zip(case.ms, order)):
            checks += checked_call(ctx, live, which, M, case.seed + i, kinds[i], tag=f"{live[which].label}.call{i}")
        for j, (N, K, max_M) in enumerate(case.recreate or []):
            slot = 1 + j % len(case.shapes)
            old = live[slot]
            close_impl(old.impl)
            live[slot] = build(ctx, case, f"{old.label} re-created {j}", N, K, max_M)
            for which in range(len(live)):
                seed = case.seed + RECREATE_SEED_OFFSET + 10 * j + which
                checks += checked_call(ctx, live, which, case.ms[0], seed, case.kind,
                                       tag=f"{live[which].label}.after_recreate{j}")
        for inst in live:
            probes = probe_should_run(ctx, inst.impl, inst.case, sorted(inst.should_run))
            checks.append(should_run_stable(inst.should_run, probes, rank=ctx.rank,
                                            what=f"{inst.label} (N={inst.case.N}, K={inst.case.K}, "
                                                 f"max_M={inst.case.max_M}), at birth and at the end"))
    finally:
        for inst in live:
            if inst.own:
                close_impl(inst.impl)
    return checks


def build(ctx: RankContext, case: Case, label: str, N: int, K: int, max_M: int) -> Live:
    shaped = dataclasses.replace(case, N=N, K=K, max_M=max_M)
    impl = ctx.new_impl(max_M, N, K)
    return Live(label, impl, shaped, True, probe_should_run(ctx, impl, shaped))


def checked_call(ctx: RankContext, live: list[Live], which: int, M: int, seed: int, kind: str, *,
                 tag: str) -> list[CheckResult]:
    """A verified call of ``live[which]`` and ``other_instances_untouched`` across it."""
    inst = live[which]
    M = aligned_if_waived(inst.impl, min(M, inst.case.max_M), ctx.world_size, inst.case.max_M)
    others = {o.label: o.impl for k, o in enumerate(live) if k != which}
    before = snapshot(others)
    checks, _, _ = verified_call(ctx, inst.impl, inst.case, M, seed, tag=tag, late=False, kind=kind)
    ctx.sync()
    untouched = state_unchanged(before, snapshot(others), rank=ctx.rank, name="other_instances_untouched",
                                during=f"a call of {inst.label} (N={inst.case.N}, K={inst.case.K}, M={M})")
    untouched.extra.update(call=tag, M=M)
    return checks + [untouched]


def probe_should_run(ctx: RankContext, impl, case: Case, ms: list[int] | None = None) -> dict[int, bool]:
    """``impl.should_run`` at ``ms`` (default: 1, max_M and both sides of its crossover)."""
    ask = should_run_asker(ctx.device, impl, case)
    if ms is None:
        ms = sorted({1, case.max_M, *crossover_neighbours(ask, case.max_M)})
    return {M: ask(M) for M in ms}
