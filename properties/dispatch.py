"""The dispatch a layer writes (CONTRACT.md, "Dispatch")::

    if op.should_run(x) and op.can_run(w): y = op(x, w)
    else:                                  y = reduce_scatter(x @ w.T)   # torch, over the same group

is only safe when every rank of the group takes the same branch (the two branches run different
collectives: ranks that disagree deadlock or pair the wrong collectives) and when an instance's answer for
an M does not move while other instances come and go (a decision kept at class level, or baked in from
another instance, sends a layer down the other branch). Both sides must then give the same shard.

* ``dispatch_agrees_across_ranks`` — for one call, every rank of the group gave the same answers
  (``should_run(x)``, ``can_run(w)``, the should_run crossover);
* ``kernel_paths_agree_across_ranks`` — every rank of the group holds the same path table (the code path a call
  of each M runs: the fused kernel's tile config and split), gathered when an instance is built;
* ``should_run_stable`` — an instance's ``should_run`` answer at each probed M is the one it gave before;
* ``dispatch_sides_agree`` — for the same inputs, the implementation's shard and the torch path's shard
  have the same shape and padding, and the same bits on the valid rows (exact inputs) or both lie within
  tolerance of the truth (checked by ``within_tolerance`` on each side).
"""

from __future__ import annotations

import torch

from .exact import bitwise_equal
from .result import CheckResult, skipped


def _fewer_than_two(answers: dict, name: str, what: str, rank) -> CheckResult | None:
    """Skipped where the group is one rank: agreement with no peer cannot fail, so it is not a pass (a ci run's drawn
    dispatch cases once all landed on TP groups of one rank, and a should_run that disagreed across ranks passed the
    run: the 30th session's ``ShouldRunOnLocalRows``). No answer at all is the harness's failure, not a skip."""
    if not answers:
        return CheckResult(name=name, passed=False, rank=rank, detail=f"{what}: no rank's answer was gathered")
    if len(answers) > 1:
        return None
    return skipped(name, f"{what}: a group of one rank ({next(iter(answers))}): no peer to disagree with", rank=rank,
                   per_example=True)


def dispatch_agrees_across_ranks(answers: dict[int, object], *, what: str, rank=None,
                                 name="dispatch_agrees_across_ranks") -> CheckResult:
    """``answers``: group rank -> the answer it gave for the same question ``what`` (e.g. "should_run at
    M=127"). Passes iff every rank gave the same; skipped for a group of one rank."""
    alone = _fewer_than_two(answers, name, what, rank)
    if alone is not None:
        return alone
    distinct = sorted({repr(a) for a in answers.values()})
    if len(distinct) == 1:
        return CheckResult(name=name, passed=True, rank=rank, total=len(answers),
                           detail=f"{what}: every rank answered {distinct[0]}")
    by_rank = ", ".join(f"rank {r}: {a!r}" for r, a in sorted(answers.items()))
    return CheckResult(name=name, passed=False, rank=rank, total=len(answers), n_wrong=len(distinct) - 1,
                       extra={"answers": {str(r): repr(a) for r, a in answers.items()}},
                       detail=f"{what}: ranks of one group answered differently ({by_rank}); a layer's ranks "
                              f"then take different branches (different collectives: a hang or mixed results)")


def kernel_paths_agree_across_ranks(tables: dict[int, object], *, what: str, rank=None,
                                    name="kernel_paths_agree_across_ranks") -> CheckResult:
    """``tables``: group rank -> the instance's ``path_table()`` on that rank (pieces ``(first M, path)``, or
    None: no claim). Passes iff every rank holds the same table; else names the first M where the ranks' paths
    differ and which rank runs what there: ranks that run different kernels for one call wait for each other's
    signals forever (a hang, or a kernel's spin-timeout trap) -- this says so at construction, for every M,
    before any call. Skipped for a group of one rank."""
    alone = _fewer_than_two(tables, name, what, rank)
    if alone is not None:
        return alone
    if len({repr(t) for t in tables.values()}) == 1:
        pieces = next(iter(tables.values()))
        return CheckResult(name=name, passed=True, rank=rank, total=len(tables),
                           detail=f"{what}: every rank holds the same path table "
                                  f"({len(pieces) if pieces else 0} pieces)")
    claims = {r: t for r, t in tables.items() if _well_formed(t)}
    if len(claims) < len(tables):  # a rank with no table, or with something else (a path_table that raised)
        where = "any M"
        by_rank = {r: ("a table" if r in claims else "no table" if t is None else str(t)) for r, t in tables.items()}
    else:
        points = sorted({int(M) for t in claims.values() for M, _ in t})
        where, by_rank = "?", {}
        for M in points:
            here = {r: path_at(t, M) for r, t in claims.items()}
            if len(set(here.values())) > 1:
                where, by_rank = f"M={M}", here
                break
        else:  # the same path everywhere, tables written differently (a repeated piece): the same claim
            return CheckResult(name=name, passed=True, rank=rank, total=len(tables),
                               detail=f"{what}: every rank runs the same path at every M")
    groups: dict[str, list[int]] = {}
    for r, p in sorted(by_rank.items()):
        groups.setdefault(p, []).append(r)
    text = "; ".join(f"rank(s) {rs}: {p}" for p, rs in groups.items())
    return CheckResult(name=name, passed=False, rank=rank, total=len(tables), n_wrong=len(groups) - 1,
                       extra={"tables": {str(r): repr(t) for r, t in tables.items()}, "first_difference": where},
                       detail=f"{what}: the ranks of one group run different code paths at {where} ({text}); "
                              f"calls there launch different kernels on different ranks, which wait for each "
                              f"other forever")


def _well_formed(table) -> bool:
    """Pieces ``(first M, path)`` (a tuple or list of pairs whose first M is an int)."""
    return isinstance(table, (tuple, list)) and all(
        isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], int) for p in table)


def path_at(table, M: int) -> str | None:
    """The path of ``table`` (pieces ``(first M, path)``) for M rows: the last piece starting at or before M."""
    found = None
    for first, path in table:
        if int(first) > M:
            break
        found = path
    return found


def should_run_stable(before: dict[int, bool], after: dict[int, bool], *, what: str, rank=None,
                      name="should_run_stable") -> CheckResult:
    """``before``/``after``: M -> ``should_run`` answer of one instance, taken at two times; every M of
    ``before`` must have the same answer ``after``."""
    moved = {M: (before[M], after.get(M)) for M in sorted(before) if after.get(M) != before[M]}
    if moved:
        text = ", ".join(f"M={M}: {a} then {b}" for M, (a, b) in list(moved.items())[:6])
        return CheckResult(name=name, passed=False, rank=rank, total=len(before), n_wrong=len(moved),
                           extra={"moved": {str(M): list(v) for M, v in moved.items()}},
                           detail=f"{what}: should_run changed its answer for the same M ({text}): it must be "
                                  f"a function of M and this instance only")
    return CheckResult(name=name, passed=True, rank=rank, total=len(before),
                       detail=f"{what}: should_run gave the same answer at {len(before)} probed M")


def dispatch_sides_agree(main: torch.Tensor, torch_side: torch.Tensor, n_valid: int, *, exact: bool, rank=None,
                         row_offset=0, name="dispatch_sides_agree") -> CheckResult:
    """The implementation's shard ``main`` and the torch path's shard ``torch_side`` for the same inputs:
    same shape, padding rows (``n_valid:``) bit-identical (both +0.0 for fresh results), and with exact
    inputs the same bits on the valid rows."""
    if tuple(main.shape) != tuple(torch_side.shape):
        return CheckResult(name=name, passed=False, rank=rank,
                           detail=f"the implementation's shard has shape {tuple(main.shape)}, the torch path's "
                                  f"{tuple(torch_side.shape)}: a layer's output changes shape across should_run")
    # Either comparison may have no rows on this rank (a full shard has no padding, an empty rank no valid row):
    # skipped there, never failed; the shapes are always compared.
    pad = bitwise_equal(main[n_valid:], torch_side[n_valid:], main.shape[0] - n_valid, rank=rank,
                        row_offset=row_offset + n_valid, name=name)
    if not pad.passed and not pad.skipped:
        pad.detail = "padding rows differ between the implementation's shard and the torch path's"
        return pad
    compared = ["shape"] + ([] if pad.skipped else [f"{main.shape[0] - n_valid} padding rows"])
    if exact:
        res = bitwise_equal(main, torch_side, n_valid, rank=rank, row_offset=row_offset, name=name)
        if not res.passed and not res.skipped:
            res.detail = "exact inputs: the implementation's shard and the torch path's differ in valid rows"
            return res
        compared += [] if res.skipped else [f"{n_valid} valid rows bit for bit"]
    else:
        compared.append("values: within_tolerance on each side")
    return CheckResult(name=name, passed=True, rank=rank, total=int(main.shape[0]),
                       detail="both sides agree: " + ", ".join(compared))
