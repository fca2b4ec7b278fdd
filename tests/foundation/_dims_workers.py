"""Rank functions for tests/foundation/test_dimensions.py (run by ``_dist.run_ranks`` on W gloo ranks):
cases on TP layouts through the gate's own ``run_case``, on a fresh RankContext per case. Not a test
module: no ``assert`` — each returns ``(failures, info)`` and the test judges ``info``."""

from __future__ import annotations

import itertools

import torch

from fuzz.case import Case
from fuzz.families import RankContext, run_case
from kernel.registry import load_implementation
from kernel.unfused import UnfusedGemmRs


class StateWrittenFromOutside(UnfusedGemmRs):
    """Fixture: an instance whose state changes while nothing of it runs on this rank (as a peer's remote
    write into a symmetric workspace would change it): every look at its state finds new bits."""

    name = "state-written-from-outside"
    _looks = itertools.count()

    def state_tensors(self):
        return {**super().state_tensors(), "flags": torch.full((4,), next(self._looks), dtype=torch.int32)}


def layout_cases(rank: int, world_size: int, *, runs: list[list]):
    """``runs``: [[impl spec, case json], ...]; each on a fresh RankContext. info: per run, this rank's
    failed and passed check names, and the (group, group rank) tags its checks carry."""
    out = []
    for spec, case_json in runs:
        factory = StateWrittenFromOutside if spec == "StateWrittenFromOutside" else load_implementation(spec)
        ctx = RankContext(factory, rank=rank, world_size=world_size, device=torch.device("cpu"))
        try:
            checks = run_case(ctx, Case.from_json(case_json))
        finally:
            ctx.close()
        out.append({
            "failed": sorted({c.name for c in checks if not c.passed and not c.skipped}),
            "passed": sorted({c.name for c in checks if c.passed}),
            "groups": sorted({(tuple(c.extra["group"]), c.rank) for c in checks if "group" in c.extra}),
        })
    return [], {"runs": out}
