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
    """Flaky: at M == 55 the result is doubled unless ``$_GEMM_RS_TEST_FLAKY_DIR/rank<r>`` exists; the
    first such call creates it. So a case at M == 55 fails once and passes when re-run on a fresh pool
    (the marker outlives the pool): the harness must label the failure ``flaky``."""

    name = "planted-wrong-on-first-run"

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if M != TRIGGER_M:
            return y
        marker = os.path.join(os.environ["_GEMM_RS_TEST_FLAKY_DIR"], f"rank{self.rank}")
        if os.path.exists(marker):
            return y
        with open(marker, "w") as f:
            f.write("failed once\n")
        return y.mul_(2)


def _node() -> int:
    """The node (torchrun agent) this rank runs under: 0 on the driver's host (fuzz/pool.py)."""
    from fuzz.config import NODE_ENV

    return int(os.environ.get(NODE_ENV, "0"))


class HangsOnRemoteNode(UnfusedGemmRs):
    """At M == 55 the ranks of every node but the driver's block forever before the collective (their
    peers on the driver's host then wait in it): the driver must report a HANG with the stacks of the
    ranks of both nodes."""

    name = "planted-hangs-on-remote-node"

    def _run(self, x, w, out, M):
        if M == TRIGGER_M and _node() != 0:
            import time

            while True:
                time.sleep(0.05)
        return super()._run(x, w, out, M)


class DiesOnRemoteNode(UnfusedGemmRs):
    """At M == 55 local rank 1 of every node but the driver's exits with code 17 (the others block in the
    collective): a DIED naming that rank and its exit code, from its node's torchrun."""

    name = "planted-dies-on-remote-node"

    def _run(self, x, w, out, M):
        if M == TRIGGER_M and _node() != 0 and int(os.environ.get("LOCAL_RANK", "0")) == 1:
            os._exit(17)
        return super()._run(x, w, out, M)


class WrongAfterThreeInstances(UnfusedGemmRs):
    """A bug that needs what the pool ran before: at M == 55 the result is doubled once this process has
    built three or more instances (state left by earlier cases, like a counter that drifts). A fresh pool
    passes the case alone; replaying the failing pool's history first must reproduce it."""

    name = "planted-wrong-after-three-instances"
    built = 0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        type(self).built += 1

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        if M == TRIGGER_M and type(self).built >= 3:
            y.mul_(2)
        return y


class NoMainPathOnThisHost(UnfusedGemmRs):
    """Its main path ("fast") cannot be built on any host (as the fused kernel where the CuTe DSL is not
    importable): every case fails ``main_path_available`` with the reason, whatever the example."""

    name = "planted-no-main-path"
    main_path = "fast"

    def main_path_support(self):
        from kernel.interface import Eligibility

        return Eligibility(False, "libfast is not importable (planted)")


#: What torch appends to every CUDA error's message (torch 2.11 on an H200), "device-side assertions" included.
TORCH_CUDA_ADVICE = ("Search for `cudaErrorLaunchFailure' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
                     "group__CUDART__TYPES.html for more information.\nCUDA kernel errors might be asynchronously "
                     "reported at some other API call, so the stacktrace below might be incorrect.\nFor debugging "
                     "consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable "
                     "device-side assertions.")


class _BrokenAfterTrigger(UnfusedGemmRs):
    """Correct until a call at M == 55 returned; ``broken`` from then on (each subclass breaks one method)."""

    broken = False

    def _run(self, x, w, out, M):
        y = super()._run(x, w, out, M)
        self.broken = self.broken or M == TRIGGER_M
        return y


class DeviceFaultAfterCall(_BrokenAfterTrigger):
    """A GPU fault surfacing after a call returned, as a kernel's trap or illegal address does at the harness's next
    wait: once a call at M == 55 returned, the harness's next question to the instance (``expected_path``, before
    the next call) raises the ``AcceleratorError`` torch raises for a CUDA error -- on every rank, outside the
    implementation's call. The case must fail with ``device_fault`` (the implementation's kernels faulted), never
    stand as a harness ERROR. ``MESSAGE`` in the class picks the error's text (a torch device-side assert: the
    harness's)."""

    name = "planted-device-fault-after-call"
    MESSAGE = "CUDA error: unspecified launch failure"

    def expected_path(self, x, w):
        if self.broken:
            import torch

            raise torch.AcceleratorError(f"{self.MESSAGE}\n{TORCH_CUDA_ADVICE}")
        return super().expected_path(x, w)


class TorchAssertAfterCall(DeviceFaultAfterCall):
    """:class:`DeviceFaultAfterCall` with the text of torch's own device-side assert: not a fault of the
    implementation's kernels -- but raised inside the implementation's ``expected_path``, so a query of its
    interface that raised (``call_raised``), never a ``device_fault``."""

    name = "planted-torch-assert-after-call"
    MESSAGE = "CUDA error: device-side assert triggered"


class RaisesInGuardRegions(_BrokenAfterTrigger):
    """Once a call at M == 55 returned, ``guard_regions()`` -- a query of the interface the harness's checks make
    -- raises on every rank: the implementation's failure (``call_raised`` naming the method), not a harness
    ERROR."""

    name = "planted-raises-in-guard-regions"

    def guard_regions(self):
        if self.broken:
            raise IndexError("planted: guard_regions() lost its table after M=55")
        return super().guard_regions()


#: The variables :class:`RaisesWithItsEnvironment` reports (fuzz.topology.MULTICAST_OFF's, the optimisation level).
#: ``_GEMM_RS_TEST_SPARE_ONLY``: set only where a warm spare was spawned, never in the pool's own environment.
REPORTED_ENV = ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "PYTHONOPTIMIZE",
                "_GEMM_RS_TEST_SPARE_ONLY")


class RaisesWithItsEnvironment(UnfusedGemmRs):
    """At M == 55 every rank raises, its message naming the rank's values of :data:`REPORTED_ENV` (``NAME=value``,
    ``NAME unset``): what the driver's environment became in a rank forked by torchrun's agent (a spare or not)."""

    name = "planted-raises-with-its-environment"

    def _run(self, x, w, out, M):
        if M == TRIGGER_M:
            seen = " ".join(f"{k}={os.environ[k]}" if k in os.environ else f"{k} unset" for k in REPORTED_ENV)
            raise RuntimeError(f"planted: rank {self.rank} environment: {seen} ;")
        return super()._run(x, w, out, M)
