"""Planted bugs of the fused kernel's *host wrapper* in the dimensions of issue 14 (streams, CUDA graphs,
process groups): the kernel is the real one, the wrapper around it gets one real bug class each. GPU only
(a Hopper GPU, the shared-gpu topology); loadable as ``--impl mutants.dimension_faults:NAME`` and run by
the GPU kill matrix beside the kernel's fault builds::

    python -m mutants.meta --gpu [--optimize 0|1|both] [--only NAME]

Like :mod:`mutants.kernel_faults`, each forces the fused path (``force_fused=True``): a mutant that
silently fell back to the unfused implementation would survive for the wrong reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernel.checks import check_operands
from kernel.fused.wrapper import FusedGemmRs


class _WrapperFault(FusedGemmRs):
    def __init__(self, group=None, *, force_fused: bool = True, **kwargs):
        super().__init__(group, force_fused=force_fused, **kwargs)
        self._stream = None

    def _side_stream(self) -> torch.cuda.Stream:
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.device)
        return self._stream


class FusedOnItsOwnStream(_WrapperFault):
    """Not a bug: the control of the stream mutants -- the wrapper runs the kernel on its own stream the way the
    contract ("Streams") says: the side stream waits for the caller's, x, w and out are ``record_stream``-ed on it
    (eagerly; a capture keeps its memory anyway), the caller's stream waits for it. Must PASS the gate: a check
    that takes the allocator's bookkeeping for a write into the caller's memory, or a stream wait for a hazard,
    fails it."""

    name = "fused-wrapper-on-its-own-stream"

    def _launch(self, x, w, out, M):
        caller, side = torch.cuda.current_stream(self.device), self._side_stream()
        side.wait_stream(caller)
        with torch.cuda.stream(side):
            super()._launch(x, w, out, M)
        if not torch.cuda.is_current_stream_capturing():
            for t in (x, w, out):
                t.record_stream(side)
        caller.wait_stream(side)


class FusedSideStreamNoWait(_WrapperFault):
    """The call runs on the wrapper's own stream, which does not wait for the caller's stream: the kernel
    reads x and w before the caller's stream has written them (an input produced by the previous op, a
    copy still in flight). The caller's stream does wait for the result."""

    name = "fused-wrapper-side-stream-no-wait"

    def _launch(self, x, w, out, M):
        side = self._side_stream()  # the bug: no side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            super()._launch(x, w, out, M)
        torch.cuda.current_stream(self.device).wait_stream(side)


class FusedCallerDoesNotWait(_WrapperFault):
    """A result read before its producing stream finished: the wrapper runs the kernel on its own stream
    after that stream waited for the caller's, but the caller's stream never waits for it (and x, w, out
    are not ``record_stream``-ed): the caller reads ``out`` before the kernel wrote it, and its next writes
    into x and w (or the allocator's reuse of their memory) land while the kernel still reads them."""

    name = "fused-wrapper-caller-does-not-wait"

    def _launch(self, x, w, out, M):
        side = self._side_stream()
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            super()._launch(x, w, out, M)
        # the bug: no torch.cuda.current_stream().wait_stream(side)


class FusedEpochBakedAtCapture(_WrapperFault):
    """An epoch baked in at capture: the wrapper keeps the call count on the host and writes it into the
    device's epoch word before each launch ("the host knows the epoch"). Eagerly it is the value the kernel
    left there; captured in a CUDA graph, the fill replays the count of the capture, so every replay runs
    as the same epoch and the previous replay's ready flags satisfy this one's waits: peers' partials are
    read before they are written."""

    name = "fused-wrapper-epoch-baked-at-capture"

    def __init__(self, group=None, **kwargs):
        super().__init__(group, **kwargs)
        self._host_epoch = 0

    def _launch(self, x, w, out, M):
        if self._workspace is not None:
            from kernel.fused.config import EPOCH_WORD

            self._workspace.flags[EPOCH_WORD : EPOCH_WORD + 1].fill_(self._host_epoch)  # the bug
            self._host_epoch += 1
        super()._launch(x, w, out, M)


class FusedGlobalRankAtLaunch(_WrapperFault):
    """The global rank used where the group rank is meant, at the kernel launch: the wrapper passes
    ``dist.get_rank()`` (the world rank) as the kernel's rank argument. On the world group they coincide; on
    a TP group that does not start at world rank 0 the kernel reduces another rank's shard, or indexes
    peers past the group (W = 4: layouts 2 x 2 and {1, 3})."""

    name = "fused-wrapper-global-rank-at-launch"

    def __init__(self, group=None, **kwargs):
        super().__init__(group, **kwargs)
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            self.rank = dist.get_rank()  # the bug: after the workspace was built on the group rank


class FusedWorkspaceSharedAcrossGroups(_WrapperFault):
    """A symmetric workspace cached by shape, not by group: the first instance of a (max_M, N) allocates and
    rendezvouses it, every later instance of that shape reuses it, whatever its group (a module-level
    "workspace pool" keyed without the group). A TP group's instance then signals and reads through the peer
    pointers and flag area of another group's (or the world's) workspace. Needs TP groups of size >= 2
    (W = 4: layouts 2 x 2)."""

    name = "fused-wrapper-workspace-shared-across-groups"
    _shared: dict = {}

    def _allocate_workspace(self):
        key = (self.max_M, self.N)  # the bug: no group in the key
        hit = self._shared.get(key)
        if hit is None:
            super()._allocate_workspace()
            self._shared[key] = (self._workspace, self._slots)
        else:
            self._workspace, self._slots = hit

    def close(self):
        self._workspace = None  # shared: other instances still use it
        super().close()


class FusedRankDependentTiles(_WrapperFault):
    """Tile configs built from each rank's own GPU facts, not the group's: odd ranks build no clustered config (as
    a rank whose cluster occupancy query failed did; the W = 8 trap of the 13th session). At an M where the
    clustered and the plain tile sets choose different kernels the ranks launch different kernels, each spinning on
    flags the other never writes (the kernels' spin-timeout trap after 60 s); the path tables differ from
    construction on."""

    name = "fused-wrapper-rank-dependent-tiles"

    def _agree_device_facts(self):
        from kernel.fused.wrapper import agreed_device_facts, device_facts

        sm_count, sizes = agreed_device_facts([device_facts(self.device)])  # the bug: this rank's facts alone
        self._agreed_facts = (sm_count, frozenset() if self.rank % 2 else sizes)


class FusedCapacityUncheckedInCapture(_WrapperFault):
    """Host checks skipped while a CUDA graph is captured ("the eager warm-up checked the shapes", "a capture must
    stay cheap"): every other check runs, but an out-of-range M under capture is captured as a launch past the
    workspace instead of raising. Eager calls are rejected as they must be."""

    name = "fused-wrapper-capacity-unchecked-in-capture"

    def validate(self, x, w, out):
        if torch.cuda.is_current_stream_capturing():
            return check_operands(x, w, out, N=self.N, K=self.K, max_M=2**62, world_size=self.world_size,
                                  device=self.device)
        return super().validate(x, w, out)


class FusedLyingFallback(_WrapperFault):
    """The fallback run under the fused path's name: calls below 64 rows go to the unfused fallback (torch mm +
    reduce-scatter: "the kernel does not pay there"), and ``last_path`` still says "fused" -- values right, so
    only the path report could tell, and it lies. The gate sees the fallback's ``aten.mm`` dispatched in a call
    that reports the fused path (``fallback_ops``; ``path_taken``)."""

    name = "fused-wrapper-lying-fallback"
    LIE_BELOW_M = 64

    def _run(self, x, w, out, M):
        if M >= self.LIE_BELOW_M:
            return super()._run(x, w, out, M)
        result = self._fallback_impl()._run(x, w, out, M)
        self.last_path = self.main_path  # the lie
        return result


class FusedSideStreamLeftCurrent(_WrapperFault):
    """The wrapper's own stream made current for the launch with ``torch.cuda.set_stream`` and never given back
    (``with torch.cuda.stream(side):`` was meant): the side stream waits for the caller's, so the values are right,
    but every op of the caller's after the call runs on the wrapper's stream -- out of order with the caller's own
    stream, and outside the stream a CUDA graph capture records."""

    name = "fused-wrapper-side-stream-left-current"

    def _launch(self, x, w, out, M):
        side = self._side_stream()
        side.wait_stream(torch.cuda.current_stream(self.device))
        torch.cuda.set_stream(side)  # the bug: never set back
        super()._launch(x, w, out, M)


class FusedScratchPerMOutsidePython(_WrapperFault):
    """Memory kept per M where no Python tensor holds it: at each new M the wrapper takes a scratch block straight
    from the caching allocator (``torch.cuda.caching_allocator_alloc``, as a C++ extension's per-shape plan cache
    does) and keeps only its address, never freed. Values are right; every new M leaves a block behind that no live
    tensor shows, so only the allocator's own count (``memory_bounded``'s ``device_grown``) can see it."""

    name = "fused-wrapper-scratch-per-m-outside-python"
    SCRATCH_BYTES_PER_ROW = 256

    def __init__(self, group=None, **kwargs):
        super().__init__(group, **kwargs)
        self._scratch: dict[int, int] = {}

    def _launch(self, x, w, out, M):
        if M not in self._scratch and not torch.cuda.is_current_stream_capturing():
            self._scratch[M] = torch.cuda.caching_allocator_alloc(  # the bug: kept per M, never freed
                M * self.SCRATCH_BYTES_PER_ROW, self.device, torch.cuda.current_stream(self.device))
        super()._launch(x, w, out, M)


@dataclass(frozen=True)
class WrapperMutantSpec:
    """One row of the GPU kill matrix for a wrapper-level mutant (same fields :mod:`mutants.meta` reads of
    a :class:`mutants.kernel_faults.GpuMutantSpec`)."""

    name: str
    bug_class: str
    expected: tuple[str, ...]
    world_sizes: tuple[int, ...] = (2,)
    tests: tuple[str, ...] = ()

    @property
    def impl(self) -> str:
        return f"mutants.dimension_faults:{self.name}"


WRAPPER_CATALOGUE: tuple[WrapperMutantSpec, ...] = (
    WrapperMutantSpec("FusedSideStreamNoWait", "kernel on an own stream that does not wait for the caller's",
                      ("stream_ordered_result", "stream_ordered_exact", "call_raised")),
    WrapperMutantSpec("FusedCallerDoesNotWait", "a result read before its producing stream finished",
                      ("stream_ordered_result", "stream_ordered_exact", "stream_ordered_padding",
                       "call_raised")),
    WrapperMutantSpec("FusedEpochBakedAtCapture", "an epoch baked in at capture (host call count)",
                      ("graph_replay", "graph_replay_exact", "dispatch_graph_replay")),
    WrapperMutantSpec("FusedGlobalRankAtLaunch", "the global rank used where the group rank is meant",
                      ("within_tolerance", "bitwise_equal", "padded_rows_untouched", "call_raised", "died",
                       "hang", "device_fault"), (4,)),
    # device_fault: how every GPU run caught it (2026-12-06, H100 and H200): an instance's launch through the
    # other group's peer pointers and flag area faults before any result can be compared
    WrapperMutantSpec("FusedWorkspaceSharedAcrossGroups", "a flag/signal area shared between TP groups",
                      ("other_groups_untouched", "within_tolerance", "bitwise_equal", "outside_rank_untouched",
                       "hang", "device_fault"), (4,)),
    WrapperMutantSpec("FusedCapacityUncheckedInCapture", "the capacity check skipped while a graph is captured",
                      ("capacity_rejected_in_capture",), tests=("test_capacity",)),
    WrapperMutantSpec("FusedLyingFallback", "the unfused fallback run under the fused path's name (last_path lies)",
                      ("path_taken",), tests=("test_compute",)),
    WrapperMutantSpec("FusedRankDependentTiles", "the ranks of a group choose different kernels for one M",
                      ("kernel_paths_agree_across_ranks", "call_raised", "hang", "died")),
    WrapperMutantSpec("FusedSideStreamLeftCurrent", "the wrapper's stream left current after the call",
                      ("ambient_state_kept", "call_raised"), tests=("test_compute",)),
    WrapperMutantSpec("FusedScratchPerMOutsidePython", "memory kept per M where no Python tensor holds it",
                      ("memory_bounded",), tests=("test_layers",)),
)


def spec(name: str) -> WrapperMutantSpec:
    for s in WRAPPER_CATALOGUE:
        if s.name == name:
            return s
    raise KeyError(f"no wrapper mutant {name!r}; one of {[s.name for s in WRAPPER_CATALOGUE]}")
