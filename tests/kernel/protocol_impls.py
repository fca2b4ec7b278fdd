"""The fused implementation in the protocol variants the GPU protocol test runs on the gate's harness, loaded
by the ranks as ``tests.kernel.protocol_impls:NAME`` (``tests/kernel/test_fused_rs.py``). Each forces what
the test must exercise and raises at construction if the instance did not take it, so a variant that silently
built something else is a failed case, never a pass of the wrong kernel.
"""

from __future__ import annotations

from kernel.fused import FusedGemmRsAuto, FusedGemmRsPush

#: Auto's table in the protocol test: the alternating Ms (129, 1000, 7, 8191, 1, 129, 4096, 1000) take
#: push, pull, push, push, push, push, push, pull -- both kernels, each after the other, on one workspace.
ALTERNATING_BY_M = {1: "push", 1000: "pull", 4096: "push"}


def _require(impl, attribute: str, expected) -> None:
    got = getattr(impl, attribute)
    if got != expected:
        raise RuntimeError(f"{type(impl).__name__}: {attribute} is {got!r}, the test needs {expected!r}")


class PushInterleaved(FusedGemmRsPush):
    """Push with the interleaved tile order forced (its waits for peers' time slices on a shared GPU)."""

    name = "fused-push-interleaved"

    def __init__(self, group=None, **kwargs):
        super().__init__(group, push_order="interleaved", **kwargs)
        if self.world_size > 1:
            _require(self, "push_order", "interleaved")


class PushChosenOnSharedGpu(FusedGemmRsPush):
    """Push with the order the wrapper chooses itself; on ranks sharing a GPU that must be ``push_first``."""

    name = "fused-push-chosen"

    def __init__(self, group=None, **kwargs):
        super().__init__(group, **kwargs)
        if self.world_size > 1:
            _require(self, "push_order", "push_first")


class AutoBothProtocols(FusedGemmRsAuto):
    """Auto with :data:`ALTERNATING_BY_M` at every shape (the measured table names two shapes only): push
    below M = 1000 and from M = 4096 on, pull in between -- both kernels on one workspace, in whatever order
    the calls' Ms come. ``--impl tests.kernel.protocol_impls:AutoBothProtocols`` is how the device check
    gates auto (bench/gpu_kernel_check.sh)."""

    name = "fused-auto-both"

    def __init__(self, group=None, **kwargs):
        super().__init__(group, protocol_by_m=ALTERNATING_BY_M, **kwargs)
        if self.world_size > 1 and set(self.kernel_protocols()) != {"pull", "push"}:
            raise RuntimeError(f"auto built {self.kernel_protocols()}, the test needs both protocols")


class AutoAlternatingOnSharedGpu(AutoBothProtocols):
    """:class:`AutoBothProtocols` on ranks sharing a GPU: its push kernel must use the ``push_first`` order."""

    name = "fused-auto-alternating"

    def __init__(self, group=None, **kwargs):
        super().__init__(group, **kwargs)
        if self.world_size > 1:
            _require(self, "push_order", "push_first")
