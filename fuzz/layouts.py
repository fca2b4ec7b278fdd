"""TP layouts: how one case splits the pool's world into tensor-parallel groups. Plain data (JSON in the
Case, so a REPRO line reruns it); no torch here, the driver's strategies import it.

A layout is a list of TP groups, each a sorted list of distinct world ranks, the groups disjoint. ``None``
is the whole world (one group of every rank: the default). A world rank in no group of the layout is
*outside* for the case: it stays in the world, holds its own instances, and must not be touched while the
groups run (see :mod:`fuzz.families.groups`). ``torch.distributed.new_group`` numbers a group's ranks in
world-rank order, so a world rank's group rank is its index in the sorted list; the group index in the
layout is its DP replica (inputs are drawn per replica: :func:`replica_seed`).

The layouts a world of W ranks draws (:func:`layouts_for`), as engines build them:

* TP x DP, contiguous: W / tp groups of tp consecutive ranks, for every tp dividing W with 1 < tp < W,
  and tp = 1 at W = 2 (W = 2: 2 x 1; W = 4: 2 x 2; W = 8: 2 x 4 and 4 x 2): each replica solves the whole
  problem, so a layout costs the CPU gate W / tp times a world case — groups of one rank only where W is 2;
* TP x DP, strided (DP-major numbering): groups {g, g + dp, g + 2 dp, ...} (W = 4: {0, 2}, {1, 3});
* one non-contiguous group that does not start at rank 0, the other ranks outside: the odd ranks
  (W = 4: {1, 3}; W = 2: {1}); for odd W, ranks 1..W-1 (W = 3: {1, 2}).
"""

from __future__ import annotations

Layout = list[list[int]]


def layouts_for(world_size: int) -> list[Layout]:
    """Every layout a world of ``world_size`` ranks draws besides the world itself (none for W = 1),
    full TP x DP partitions first (they keep every rank busy)."""
    W = world_size
    out: list[Layout] = []
    # tp = 1 (groups of one rank) only at W = 2: every replica does a whole problem alone, W times the
    # work of a world case, and groups of one are the least collective of all
    for tp in sorted((d for d in range(1, W) if W % d == 0 and (d > 1 or W == 2)), reverse=True):
        out.append([list(range(g * tp, (g + 1) * tp)) for g in range(W // tp)])
        dp = W // tp
        strided = [list(range(g, W, dp)) for g in range(dp)]
        if 1 < tp and strided not in out:
            out.append(strided)
    if W >= 2:
        odd = list(range(1, W, 2)) if W % 2 == 0 else list(range(1, W))
        if [odd] not in out:
            out.append([odd])
    return out


def check_layout(layout: Layout | None, world_size: int) -> None:
    """Raise ValueError unless ``layout`` is None or disjoint sorted groups of ranks in 0..W-1."""
    if layout is None:
        return
    if not isinstance(layout, list) or not layout:
        raise ValueError(f"layout must be a non-empty list of groups, got {layout!r}")
    seen: set[int] = set()
    for group in layout:
        if not isinstance(group, list) or not group or any(not isinstance(r, int) for r in group):
            raise ValueError(f"layout {layout}: each group is a non-empty list of world ranks, got {group!r}")
        if group != sorted(set(group)):
            raise ValueError(f"layout {layout}: group {group} must be sorted without repeats (group rank = "
                             f"position in world-rank order, as torch.distributed.new_group numbers it)")
        if group[0] < 0 or group[-1] >= world_size:
            raise ValueError(f"layout {layout}: group {group} has ranks outside the world 0..{world_size - 1}")
        if seen & set(group):
            raise ValueError(f"layout {layout}: groups overlap in ranks {sorted(seen & set(group))}")
        seen |= set(group)


def placement(layout: Layout | None, world_rank: int, world_size: int) -> tuple[int, list[int]] | None:
    """(group index, the group's world ranks) of ``world_rank`` in ``layout``; None when it is outside.
    The world layout (None) is one group of every rank."""
    if layout is None:
        return 0, list(range(world_size))
    for index, group in enumerate(layout):
        if world_rank in group:
            return index, list(group)
    return None


def outside_ranks(layout: Layout | None, world_size: int) -> list[int]:
    """World ranks in no group of ``layout``."""
    if layout is None:
        return []
    inside = {r for g in layout for r in g}
    return [r for r in range(world_size) if r not in inside]


def replica_seed(seed: int, index: int) -> int:
    """The input seed of DP replica (group) ``index``: the case seed for replica 0 (so a world case draws
    exactly what it always drew), a different seed for every other replica — a rank that reads another
    group's data then sees other values."""
    return seed if index == 0 else (seed + index * 0x9E3779B1) % (2**31)


def describe(layout: Layout | None) -> str:
    if layout is None:
        return "world"
    return "+".join("{" + ",".join(map(str, g)) + "}" for g in layout)
