"""State that must keep its bits while *something else* runs (CONTRACT.md, "Groups" and "Instances"):

* ``outside_rank_untouched`` — a rank outside every TP group of a case's layout holds instances of its
  own (workspaces, flags, red zones); while the groups run, none of their bytes change (a collective or a
  signal sent to the world where the group was meant, a peer table indexed by world rank, reaches it);
* ``other_instances_untouched`` — across a call on one instance, every other live instance of the rank
  keeps its state and red zones (a flag area, workspace or epoch shared between instances shows here).

:func:`snapshot` takes the bits of every instance's ``state_tensors()`` and ``guard_regions()``;
:func:`state_unchanged` compares a later snapshot with it and names what changed.
"""

from __future__ import annotations

import torch

from .rejection import differing
from .result import CheckResult


def snapshot(instances: dict[str, object]) -> dict[str, torch.Tensor]:
    """label -> a copy of every state tensor and guard region (current words) of each instance."""
    out: dict[str, torch.Tensor] = {}
    for label, impl in instances.items():
        for name, t in impl.state_tensors().items():
            out[f"{label}: {name}"] = t.detach().clone()
        for name, (now, _expected) in impl.guard_regions().items():
            out[f"{label}: guard '{name}'"] = now.detach().clone()
    return out


def state_unchanged(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], *, during: str, rank=None,
                    name: str) -> CheckResult:
    """Every tensor of ``before`` has the same bits in ``after`` (a label missing in ``after`` counts as
    changed: the state went away). ``during``: what ran in between, for the message."""
    differ = set(differing({label: (after[label], then) for label, then in before.items() if label in after}))
    changed = [label for label in before if label not in after or label in differ]
    if changed:
        return CheckResult(name=name, passed=False, rank=rank, total=len(before), n_wrong=len(changed),
                           extra={"changed": changed},
                           detail=f"{len(changed)} of {len(before)} state tensors changed during {during}: "
                                  f"{', '.join(changed[:6])}{' ...' if len(changed) > 6 else ''}")
    return CheckResult(name=name, passed=True, rank=rank, total=len(before),
                       detail=f"{len(before)} state tensors kept their bits during {during}")
