"""The catalogue. Each class subclasses the correct unfused implementation and breaks one thing.

The docstring of each mutant names the real bug class it models; ``CATALOGUE`` lists them with the
property family expected to catch them (documentation, not a constraint: any failing property kills).
"""

from __future__ import annotations

import os
import time

import torch

from kernel.unfused import UnfusedGemmRs


class DroppedRankOddM(UnfusedGemmRs):
    """Dropped peer on one shape class: for odd M > 1 the last rank's partial is never added (a flag
    wait that skips the slowest peer, a loop bound off by one)."""

    name = "mutant-dropped-rank-odd-m"

    def _run(self, x, w, out, M):
        if M > 1 and M % 2 == 1 and self.world_size > 1 and self.rank == self.world_size - 1:
            x = torch.zeros_like(x)
        return super()._run(x, w, out, M)


class HangOnM(UnfusedGemmRs):
    """A rank that never arrives (missed flag, wrong epoch): rank 0 blocks forever when M == 77."""

    name = "mutant-hang"

    def _run(self, x, w, out, M):
        if M == 77 and self.rank == 0:
            while True:
                time.sleep(0.05)
        return super()._run(x, w, out, M)


class CrashOnM(UnfusedGemmRs):
    """A rank dies mid-call (illegal address, abort): the last rank exits when M == 66."""

    name = "mutant-crash"

    def _run(self, x, w, out, M):
        if M == 66 and self.rank == self.world_size - 1:
            os._exit(17)
        return super()._run(x, w, out, M)





class PowerOfTwoGroupsOnly(UnfusedGemmRs):
    """Not a bug: an implementation that supports only W in {1, 2, 4, 8} and says so at construction.
    The gate must treat W=3 as a clean rejection, not a failure (engine self-test)."""

    name = "power-of-two-groups"
    supported_world_sizes = (1, 2, 4, 8)
