"""A case on a TP layout (CONTRACT.md, "Groups"; ``Case.layout``, :mod:`fuzz.layouts`): the world split
into TP groups that run the case's family at once, ranks outside every group left alone, then every rank
on the world.

1. every world rank creates the layout's process groups (``dist.new_group``, the layout's order; kept for
   the pool's life) and its world instance of the case's shape (collective; kept, as every instance), and
   takes a snapshot of the state and red zones of every instance it holds on another group than the one
   it runs in (a rank outside every group: all of them, at least that world instance); then all ranks
   meet (on the harness's own gloo group);
2. each group runs the family on its own instances, as group rank ``members.index(world rank)`` of
   ``len(members)``, with inputs of its DP replica (another seed per group: a rank that reads another
   group's data sees other values); the oracle reduce-scatters over the same group; every check uses the
   group rank and size and carries ``group`` (its world ranks) and ``replica``;
3. all ranks meet again and check their snapshot: ``outside_rank_untouched`` on a rank outside every
   group, ``other_groups_untouched`` on a group's rank (its world instance and instances on other groups
   keep their bits while its group ran: a workspace or flag area shared between groups shows here);
4. every rank runs one verified call on the world instance of the case's shape (``world_after_layout``):
   on a group's ranks, a WORLD instance after (and beside) the subgroup instance; on an outside rank, a
   world call right after the groups ran.
"""

from __future__ import annotations

import kernel.errors as kerr
from properties.result import CheckResult
from properties.state import snapshot, state_unchanged

from ..case import Case
from ..layouts import describe, placement
from .context import RankContext, aligned_if_waived
from .verified import tag_checks, verified_call

#: the world call after a layout case draws inputs with this seed offset (no call of the groups uses it)
WORLD_SEED_OFFSET = 7_000_003


def run_layout(ctx: RankContext, case: Case, run_on_group, run_on_world) -> list[CheckResult]:
    """Steps 1-4 above. ``run_on_group(view)`` runs the case's family on a group view, ``run_on_world(view)``
    step 4 on the world view (:func:`world_call` through the family rules); each returns its checks."""
    layout = case.layout
    ctx.create_groups(layout)
    where = placement(layout, ctx.world_rank, ctx.pool_world_size)
    try:  # the world instance of step 4 exists before the groups run: an outside rank holds at least it
        ctx.world().impl(case)
    except kerr.UnsupportedConfigError:
        pass  # step 4 reports it
    mine = tuple(where[1]) if where is not None else None
    before = snapshot(ctx.held_impls(besides=mine))
    ctx.sync_world()
    checks: list[CheckResult] = []
    if where is not None:
        index, members = where
        checks += tag_checks(run_on_group(ctx.on_group(members, index)), group=members, replica=index)
    ctx.sync_world()
    after = snapshot(ctx.held_impls(besides=mine))
    if where is None:
        checks.append(state_unchanged(before, after, rank=ctx.world_rank, name="outside_rank_untouched",
                                      during=f"the groups of layout {describe(layout)} ran (this rank is in none)"))
    else:
        checks.append(state_unchanged(before, after, rank=ctx.world_rank, name="other_groups_untouched",
                                      during=f"group {where[1]} of layout {describe(layout)} ran (this rank's "
                                             f"instances on other groups, the world's included)"))
    return checks + run_on_world(ctx.world())


def world_call(ctx: RankContext, impl, case: Case) -> list[CheckResult]:
    """Step 4: one verified call on this rank's world instance of the case's shape (a family runner)."""
    M = aligned_if_waived(impl, case.ms[0], ctx.world_size, case.max_M)
    checks, _, _ = verified_call(ctx, impl, case, M, case.seed + WORLD_SEED_OFFSET, tag="world_after_layout",
                                 late=False, kind=case.call_kinds()[0])
    return checks
