"""A case run in this process on one CPU rank (no pool, no process group): what the foundation tests use to
see a family's checks directly. Imported by the test modules of this folder (pytest puts it on sys.path)."""

from __future__ import annotations

import torch

from fuzz.case import Case
from fuzz.families import RankContext, run_case

CPU = torch.device("cpu")


def run_on_one_cpu_rank(impl_factory, case: Case):
    """``run_case`` of ``case`` for ``impl_factory`` on rank 0 of 1, on the CPU; the context closed after."""
    ctx = RankContext(impl_factory, rank=0, world_size=1, device=CPU)
    try:
        return run_case(ctx, case)
    finally:
        ctx.close()


def failed_checks(checks, name=None):
    """The checks that failed (skipped ones never count), all or those named ``name``."""
    return [c for c in checks if not c.passed and not c.skipped and (name is None or c.name == name)]

