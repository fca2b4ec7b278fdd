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
* the interleaved calls once more, on new inputs, launched back to back (:func:`back_to_back`: no wait, no oracle
  between them, the late rank's delay before each), then properties 1-6 of each (tags ``<instance>.burst<i>``):
  a forward pass's layers, one instance's call right after another's. The verified calls line the ranks up
  between any two calls, so an instance whose call overwrites data a late peer still reads for another
  instance's call (a buffer shared between instances whose flags are their own) was right in every one;
* ``other_instances_untouched``: across each call, every other live instance keeps the bits of its state
  tensors and red zones (a flag area, workspace or epoch shared between instances shows here);
* ``should_run_stable``: each instance's ``should_run`` answers at probed M (1, max_M and both sides of
  its crossover), taken when it was built (instance 0: when the case began), are the same at the end;
* ``memory_bounded`` (:func:`memory_probe`): instance 0, called once at M = min(max_M, 256), then at three
  smaller M and at that M again (results dropped), holds no more live tensor memory than after the first call,
  and on CUDA the caching allocator hands out no more bytes (blocks no Python tensor holds);
* ``released_on_close`` (:func:`close_released`): each of the case's own instances, closed (at a re-creation, and
  all of them at the end, in the order they were built) and dropped, leaves none of its state tensors alive.
"""

from __future__ import annotations

import dataclasses

import torch

from properties.dispatch import should_run_stable
from properties.memory import live_tensors, memory_bounded, released_on_close, watch_release
from properties.result import CheckResult
from properties.state import snapshot, state_unchanged

from ..case import Case
from .context import RankContext, aligned_if_waived, close_impl
from .crossover import crossover_neighbours, should_run_asker
from .verified import check_call, launch_call, verified_call

RECREATE_SEED_OFFSET = 5_000_011
BURST_SEED_OFFSET = 3_000_017
MEMORY_SEED_OFFSET = 7_000_003
#: The largest M of the memory probe (:func:`memory_probe`): a buffer kept per M or per call is rows x N wherever
#: the rows are; larger M only make the probe's calls slower (CPU bf16 GEMMs).
MEMORY_PROBE_M = 256


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
        checks += back_to_back(ctx, live, case, order, kinds)
        for j, (N, K, max_M) in enumerate(case.recreate or []):
            slot = 1 + j % len(case.shapes)
            label = live[slot].label
            checks.append(close_released(ctx, live, slot))
            live[slot] = build(ctx, case, f"{label} re-created {j}", N, K, max_M)
            for which in range(len(live)):
                seed = case.seed + RECREATE_SEED_OFFSET + 10 * j + which
                checks += checked_call(ctx, live, which, case.ms[0], seed, case.kind,
                                       tag=f"{live[which].label}.after_recreate{j}")
        checks += [stable_should_run(ctx, inst) for inst in live]  # (no loop variable left holding an instance)
        checks.append(memory_probe(ctx, live[0]))
        for slot in range(1, len(live)):  # the case's own instances, in the order they were built (collective)
            checks.append(close_released(ctx, live, slot))
    finally:
        for inst in live:
            if inst is not None and inst.own:
                close_impl(inst.impl)
    return checks


def stable_should_run(ctx: RankContext, inst: Live) -> CheckResult:
    """``should_run_stable`` of ``inst``: its answers now against those taken when it was built."""
    probes = probe_should_run(ctx, inst.impl, inst.case, sorted(inst.should_run))
    return should_run_stable(inst.should_run, probes, rank=ctx.rank,
                             what=f"{inst.label} (N={inst.case.N}, K={inst.case.K}, max_M={inst.case.max_M}), at "
                                  "birth and at the end")


def close_released(ctx: RankContext, live: list, slot: int) -> CheckResult:
    """Close the case's own instance ``live[slot]``, drop it (``live[slot]`` becomes None) and check
    ``released_on_close``: none of the tensors that owned its state is alive any more."""
    inst = live[slot]
    watched = watch_release({**inst.impl.state_tensors(),
                             **{f"red zone '{n}'": now for n, (now, _) in inst.impl.guard_regions().items()}})
    what = f"{inst.label} (N={inst.case.N}, K={inst.case.K}, max_M={inst.case.max_M})"
    close_impl(inst.impl)
    live[slot] = None
    del inst
    check = released_on_close(watched, what=what, rank=ctx.rank)
    check.extra.setdefault("call", f"close of {what}")
    return check


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


def back_to_back(ctx: RankContext, live: list[Live], case: Case, order: list[int],
                 kinds: list[str]) -> list[CheckResult]:
    """The calls of ``ms`` to the instances of ``order`` again, each on inputs of its own seed, launched one after
    another with no wait and no oracle between them (the late rank's delay before each, on its stream), then one
    sync and properties 1-6 of each, in launch order."""
    launched = []
    for i, (M, which) in enumerate(zip(case.ms, order)):
        inst = live[which]
        M = aligned_if_waived(inst.impl, min(M, inst.case.max_M), ctx.world_size, inst.case.max_M)
        launched.append((inst, launch_call(ctx, inst.impl, inst.case, M, case.seed + BURST_SEED_OFFSET + i,
                                           tag=f"{inst.label}.burst{i}", late=True, kind=kinds[i])))
    ctx.sync()
    checks: list[CheckResult] = []
    for inst, call in launched:
        checks += check_call(ctx, inst.impl, inst.case, call)[0]
    return checks


def memory_probe(ctx: RankContext, inst: Live) -> CheckResult:
    """``memory_bounded`` on ``inst``: a call at its largest M (any first-call allocation happens there), a
    snapshot of the live tensors, calls at three smaller M each new to the probe and at the largest M again, each
    result dropped at once, a snapshot. The inputs are made before the first snapshot (views of them are sliced
    per call); the calls go to the implementation directly -- the harness's own call records would hold the
    results -- and every rank makes the same calls in the same order (each call is collective)."""
    c, W = inst.case, ctx.world_size
    top = aligned_if_waived(inst.impl, min(c.max_M, MEMORY_PROBE_M), W, c.max_M)
    smaller = {aligned_if_waived(inst.impl, m, W, c.max_M) for m in (top // 2 + 1, (3 * top) // 4 + 1, top - 1)}
    ms = [m for m in sorted(smaller, reverse=True) if 1 <= m < top] + [top]
    x = ctx.x(c, c.seed + MEMORY_SEED_OFFSET, top, "gaussian")
    w = ctx.w(c, c.seed + MEMORY_SEED_OFFSET, "gaussian")
    ctx.began(f"{inst.label}.memory_probe", top, "direct, result dropped")
    y = inst.impl(x, w)
    del y
    ctx.sync()
    before, device_before = live_tensors(), _device_bytes(ctx.device)
    for M in ms:
        ctx.began(f"{inst.label}.memory_probe", M, "direct, result dropped")
        y = inst.impl(x[:M], w)
        del y
    ctx.sync()
    after, device_after = live_tensors(), _device_bytes(ctx.device)
    check = memory_bounded(before, after, rank=ctx.rank,
                           during=f"calls of {inst.label} (N={c.N}, K={c.K}, max_M={c.max_M}) at M = "
                                  f"{', '.join(map(str, ms))} after one at M = {top}",
                           device_grown=None if device_before is None else device_after - device_before)
    check.extra.update(call=f"{inst.label}.memory_probe", M=[top, *ms])
    return check


def _device_bytes(device) -> int | None:
    """Bytes the CUDA caching allocator has handed out on ``device`` (None off CUDA)."""
    return int(torch.cuda.memory_allocated(device)) if device.type == "cuda" else None


def probe_should_run(ctx: RankContext, impl, case: Case, ms: list[int] | None = None) -> dict[int, bool]:
    """``impl.should_run`` at ``ms`` (default: 1, max_M and both sides of its crossover)."""
    ask = should_run_asker(ctx.device, impl, case)
    if ms is None:
        ms = sorted({1, case.max_M, *crossover_neighbours(ask, case.max_M)})
    return {M: ask(M) for M in ms}
