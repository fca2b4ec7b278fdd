"""The dispatch a layer writes (CONTRACT.md, "Dispatch")::

    if op.should_run(x) and op.can_run(w): y = op(x, w)
    else:                                  y = reduce_scatter(x @ w.T)   # torch, over the same group

is only safe when every rank of the group takes the same branch (the two branches run different
collectives: ranks that disagree deadlock or pair the wrong collectives) and when an instance's answer for
an M does not move while other instances come and go (a decision kept at class level, or baked in from
another instance, sends a layer down the other branch). Both sides must then give the same shard.

* ``dispatch_agrees_across_ranks`` — for one call, every rank of the group gave the same answers
  (``should_run(x)``, ``can_run(w)``, the should_run crossover);
* ``should_run_stable`` — an instance's ``should_run`` answer at each probed M is the one it gave before;
* ``dispatch_sides_agree`` — for the same inputs, the implementation's shard and the torch path's shard
  have the same shape and padding, and the same bits on the valid rows (exact inputs) or both lie within
  tolerance of the truth (checked by ``within_tolerance`` on each side).
"""

from __future__ import annotations

import torch

from .exact import bitwise_equal
from .result import CheckResult


def dispatch_agrees_across_ranks(answers: dict[int, object], *, what: str, rank=None,
                                 name="dispatch_agrees_across_ranks") -> CheckResult:
    """``answers``: group rank -> the answer it gave for the same question ``what`` (e.g. "should_run at
    M=127"). Passes iff every rank gave the same."""
    distinct = sorted({repr(a) for a in answers.values()})
    if len(distinct) == 1:
        return CheckResult(name=name, passed=True, rank=rank, total=len(answers),
                           detail=f"{what}: every rank answered {distinct[0]}")
    by_rank = ", ".join(f"rank {r}: {a!r}" for r, a in sorted(answers.items()))
    return CheckResult(name=name, passed=False, rank=rank, total=len(answers), n_wrong=len(distinct) - 1,
                       extra={"answers": {str(r): repr(a) for r, a in answers.items()}},
                       detail=f"{what}: ranks of one group answered differently ({by_rank}); a layer's ranks "
                              f"then take different branches (different collectives: a hang or mixed results)")


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
    pad = bitwise_equal(main[n_valid:], torch_side[n_valid:], main.shape[0] - n_valid, rank=rank,
                        row_offset=row_offset + n_valid, name=name)
    if not pad.passed:
        pad.detail = "padding rows differ between the implementation's shard and the torch path's"
        return pad
    if exact:
        res = bitwise_equal(main, torch_side, n_valid, rank=rank, row_offset=row_offset, name=name)
        if not res.passed:
            res.detail = "exact inputs: the implementation's shard and the torch path's differ in valid rows"
        return res
    return CheckResult(name=name, passed=True, rank=rank, total=int(main.shape[0]),
                       detail="same shape and padding on both sides (values: within_tolerance on each side)")
