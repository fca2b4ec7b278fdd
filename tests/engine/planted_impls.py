"""Implementations planted for the engine's own tests, loaded by the ranks as
``tests.engine.planted_impls:NAME`` (not part of the kill matrix: they test the harness, not the suite).

Each breaks one thing the harness must report as it is.
"""

from __future__ import annotations

import os

from kernel.unfused import UnfusedGemmRs

#: The M at which the planted behaviour triggers (every other M is correct).
TRIGGER_M = 55


class RaisesOnOneRank(UnfusedGemmRs):
    """At M == 55 rank 0 raises before the reduce-scatter, so its peers block in the collective it never
    joins. The driver must report rank 0's exception (type, message, traceback) within the grace period,
    with every rank's stacks, never a hang after the case deadline."""

    name = "planted-raises-on-one-rank"

    def _run(self, x, w, out, M):
        if M == TRIGGER_M and self.rank == 0:
            raise RuntimeError(f"planted failure: rank 0 raises at M={M} before the collective")
        return super()._run(x, w, out, M)


class WrongOnFirstRun(UnfusedGemmRs):
    """Flaky: at M == 55 the result is doubled unless ``$GEMM_RS_TEST_FLAKY_DIR/rank<r>`` exists; the
    first such call creates it. So a case at M == 55 fails once and passes when re-run on a fresh pool
    (the marker outlives the pool): the harness must label the failure ``flaky``."""

    name = "planted-wrong-on-first-run"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if M != TRIGGER_M:
            return y
        marker = os.path.join(os.environ["GEMM_RS_TEST_FLAKY_DIR"], f"rank{self.rank}")
        if os.path.exists(marker):
            return y
        with open(marker, "w") as f:
            f.write("failed once\n")
        return y.mul_(2)
