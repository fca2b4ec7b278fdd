"""Fault-injected builds of the fused CuTe DSL kernel: one real bug class planted per class, for the GPU
mutation meta-test (each must be killed by the suite on a Hopper GPU, W > 1).

Each class is :class:`kernel.fused.FusedGemmRs` compiled with one compile-time switch of
:data:`kernel.fused.config.KERNEL_FAULTS` on, for the protocol the switch belongs to (the switches are
described in the design records: pull, ``kernel/fused/gemm_rs.py``; push, ``kernel/fused/gemm_rs_push.py``);
loadable as ``--impl mutants.kernel_faults:NAME``. The fused path is
forced (``force_fused=True`` by default): a faulted build that silently fell back to the unfused
implementation would "survive" for the wrong reason, so where the kernel cannot run the call raises
:class:`kernel.errors.FusedPathUnavailable` instead. At W == 1 (plain GEMM, no cross-rank protocol)
the switches have no effect (but for the split-K ones: the W == 1 split-K GEMM is built with them): run
these at W >= 2, the split-K ones at W = 1 too.

Needs only torch to import (the kernel is compiled at construction, on a GPU machine).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.fused.config import FAULT_PROTOCOL, KERNEL_FAULTS
from kernel.fused.wrapper import FusedGemmRs


class _FaultedFused(FusedGemmRs):
    """A fused kernel with ``faults`` planted; the fused path is forced unless told otherwise."""

    def __init__(self, group=None, *, force_fused: bool = True, **kwargs):
        super().__init__(group, force_fused=force_fused, **kwargs)


class _FaultedFusedPush(_FaultedFused):
    """A push-protocol fused kernel with ``faults`` planted."""

    protocol = "push"


class FusedDroppedPeer(_FaultedFused):
    name = "fused-fault-dropped-peer"
    faults = ("dropped_peer",)


class FusedRelaxedSignal(_FaultedFused):
    name = "fused-fault-relaxed-signal"
    faults = ("relaxed_signal",)


class FusedStaleEpoch(_FaultedFused):
    name = "fused-fault-stale-epoch"
    faults = ("stale_epoch",)


class FusedWritePastCapacity(_FaultedFused):
    name = "fused-fault-write-past-capacity"
    faults = ("write_past_capacity",)


class FusedPaddingWritten(_FaultedFused):
    name = "fused-fault-padding-written"
    faults = ("padding_written",)


class FusedWrongOwner(_FaultedFused):
    name = "fused-fault-wrong-owner"
    faults = ("wrong_owner",)


class FusedEpochZeroUsed(_FaultedFused):
    name = "fused-fault-epoch-zero-used"
    faults = ("epoch_zero_used",)


class FusedEpochOrderSigned(_FaultedFused):
    name = "fused-fault-epoch-order-signed"
    faults = ("epoch_order_signed",)


class FusedDoneWaitSkipped(_FaultedFused):
    name = "fused-fault-done-wait-skipped"
    faults = ("done_wait_skipped",)


class FusedDroppedPart(_FaultedFused):
    name = "fused-fault-dropped-part"
    faults = ("dropped_part",)


class FusedBf16Parts(_FaultedFused):
    name = "fused-fault-bf16-parts"
    faults = ("bf16_parts",)


class FusedUnorderedPartSignal(_FaultedFused):
    name = "fused-fault-unordered-part-signal"
    faults = ("unordered_part_signal",)


class FusedUnwaitedSlices(_FaultedFused):
    name = "fused-fault-unwaited-slices"
    faults = ("unwaited_slices",)


class FusedClusterLocalRelease(_FaultedFused):
    name = "fused-fault-cluster-local-release"
    faults = ("cluster_local_release",)


class FusedClusterUnawareSchedule(_FaultedFused):
    name = "fused-fault-cluster-unaware-schedule"
    faults = ("cluster_unaware_schedule",)


class FusedPushConsumerFenceMissing(_FaultedFusedPush):
    name = "fused-push-fault-consumer-fence-missing"
    faults = ("consumer_fence_missing",)


class FusedPushEarlySignal(_FaultedFusedPush):
    name = "fused-push-fault-early-signal"
    faults = ("early_signal",)


class FusedPushWrongInboxSlot(_FaultedFusedPush):
    name = "fused-push-fault-wrong-inbox-slot"
    faults = ("wrong_inbox_slot",)


class FusedPushOwnPartialSkipped(_FaultedFusedPush):
    name = "fused-push-fault-own-partial-skipped"
    faults = ("own_partial_skipped",)


@dataclass(frozen=True)
class GpuMutantSpec:
    """One row of the GPU kill matrix: the class, its fault switch, the bug class it models, the world
    sizes to run it at, and the property expected to catch it (documentation; any failure kills)."""

    name: str
    fault: str
    bug_class: str
    expected: str
    world_sizes: tuple[int, ...] = (2,)
    tests: tuple[str, ...] = ()  # tests to run first in a kill session (as MutantSpec.tests)
    #: For a bug that is a race ranks time-slicing one GPU rarely open: why, and the static check of the pinned PTX
    #: that catches every such build (tests/kernel/test_fault_builds.py). Its survival on shared-gpu is listed,
    #: never counted as a kill, and does not fail the matrix (mutants.meta.Outcome.ok).
    race: str = ""

    @property
    def impl(self) -> str:
        return f"mutants.kernel_faults:{self.name}"


GPU_CATALOGUE: tuple[GpuMutantSpec, ...] = (
    GpuMutantSpec("FusedDroppedPeer", "dropped_peer",
                  "dropped rank: the reduction sums W-1 partials (rank W-1's is never added)",
                  "within_tolerance / bitwise_equal (exact mode)"),
    GpuMutantSpec("FusedRelaxedSignal", "relaxed_signal",
                  "signal before data: ready flag raised relaxed, before the partial's TMA store completed",
                  "within_tolerance (reducer reads a stale/unwritten partial; flaky by nature, run repeats)",
                  race=("the ready flag raised before the partial's TMA store completed: a peer reads it in that "
                        "window only when both kernels run at once: caught statically by "
                        "test_relaxed_signal_raises_ready_without_release_or_completion")),
    GpuMutantSpec("FusedStaleEpoch", "stale_epoch",
                  "stale epoch: the previous call's flags satisfy this call's waits",
                  "fresh_per_call / inputs_changed_in_place / alternation (2nd call onwards)"),
    GpuMutantSpec("FusedWritePastCapacity", "write_past_capacity",
                  "write past capacity: one row stored past the padded partial rows (guard A at S == S_max)",
                  "guard_regions_untouched (after partials; needs a call with ceil(M/W) == ceil(max_M/W))"),
    GpuMutantSpec("FusedPaddingWritten", "padding_written",
                  "padding rows written: out rows r*S+i >= M are stored (zeros)",
                  "padded_rows_untouched (M % W != 0)"),
    GpuMutantSpec("FusedWrongOwner", "wrong_owner",
                  "wrong owner: rank r reduces and returns the shard of rank (r+1) % W",
                  "within_tolerance / bitwise_equal (exact mode); padded_rows_untouched at tiny M"),
    GpuMutantSpec("FusedEpochZeroUsed", "epoch_zero_used",
                  "epoch wrap: after 2^32 - 1 calls the epoch is 0, which every flag word never written since the "
                  "workspace was zeroed holds: those waits are satisfied at once (a server's stale read after days)",
                  "within_tolerance / bitwise_equal in test_counter_wrap (the call at the wrap reads partials not "
                  "stored yet); only reachable through advance_call_counter"),
    GpuMutantSpec("FusedEpochOrderSigned", "epoch_order_signed",
                  "epoch order: done words compared with a signed < instead of the wrap-safe difference, wrong once "
                  "the epochs cross 2^31 (a rank overwrites its partials while a late peer still reads them)",
                  "within_tolerance in test_counter_wrap at the 2^31 boundary with a late rank; timing-dependent "
                  "(the overwrite races the peer's reads); caught statically by the pinned PTX",
                  race=("the overwrite of partials a late peer still reads, past 2^31 epochs: the late peer must "
                        "read in the window: caught statically by test_epoch_faults_change_the_wrap_handling_only")),
    GpuMutantSpec("FusedDoneWaitSkipped", "done_wait_skipped",
                  "write after read: no wait for the peers' done words before a call's first store, so a rank's next "
                  "call overwrites its partials while a late peer still reads the last call's",
                  "within_tolerance / bitwise_equal on calls made back to back (drawn bursts, the fixed back-to-back "
                  "case, the repeats), or device_fault: a peer's equality wait on a ready word the next call already "
                  "moved on spins into the kernels' 60 s trap (as the first GPU matrix with it killed it, in a drawn "
                  "compute case after 20 cases, 32nd session)",
                  tests=("test_back_to_back",),
                  race=("the overwrite of partials a peer still reads: the peer must read in the window, ranks "
                        "time-slicing one GPU: caught statically by test_done_wait_skipped_drops_the_done_spins")),
    GpuMutantSpec("FusedDroppedPart", "dropped_part",
                  "split-K: the combine adds K parts 0..P-2 (the last part of K is never added)",
                  "within_tolerance / bitwise_equal at M <= 512, K >= 128 (a split-K config); also at W = 1",
                  (1, 2)),
    GpuMutantSpec("FusedBf16Parts", "bf16_parts",
                  "split-K: each fp32 K part rounded to bf16 before the combine (reduced-precision split-K)",
                  "within_tolerance on the cancel kind (3-118x the budget), a split-K config; also at W = 1",
                  (1, 2)),
    GpuMutantSpec("FusedUnorderedPartSignal", "unordered_part_signal",
                  "split-K: a part's ready word raised by one thread after its own stores only (no barrier)",
                  "within_tolerance (the combine reads parts other threads have not stored yet: stale values of "
                  "the previous call); timing-dependent: survived the ci gate on an H200 (2026-12-01), caught "
                  "statically by the pinned split-K PTX (tests/kernel/test_fault_builds.py)",
                  (1, 2),
                  race=("a part's ready word raised before the other threads' stores landed: units running side "
                        "by side: caught statically by test_split_k_faults_change_what_their_bug_class_says")),
    GpuMutantSpec("FusedUnwaitedSlices", "unwaited_slices",
                  "split-K: a tile's owners signalled by its last unit before the other units' slices are stored",
                  "within_tolerance / fresh_per_call at W > 1 (the owner sums columns of the previous call); "
                  "timing-dependent: the slices are stored by units running side by side. Caught statically by "
                  "the pinned split-K PTX too (no slice-word spins)",
                  race=("owners signalled before the other units' slices were stored: units running side by side:"
                        " caught statically by test_split_k_faults_change_what_their_bug_class_says")),
    GpuMutantSpec("FusedClusterLocalRelease", "cluster_local_release",
                  "clustered tiles: a stage's empty barrier counts this CTA's consumer warps only; the twin's "
                  "releases complete extra phases, so a producer refills a stage the twin still reads",
                  "within_tolerance / bitwise_equal on a clustered path (test_kernel_paths: 64x112c2, 64x128c2); "
                  "seen on an H200 (2026-12-02): a CUDA error during the clustered paths instead, an ERROR of the "
                  "matrix, not a kill; caught statically by the clustered builds' barrier counts "
                  "(tests/kernel/test_fault_builds.py)"),
    GpuMutantSpec("FusedClusterUnawareSchedule", "cluster_unaware_schedule",
                  "clustered tiles: the twins take tiles of the plain raster (other column tiles) while each "
                  "multicasts half of its own B k-tile to both",
                  "within_tolerance / bitwise_equal on a clustered path (half of every B k-tile is the twin's "
                  "column tile)"),
    GpuMutantSpec("FusedPushConsumerFenceMissing", "consumer_fence_missing",
                  "push: no proxy fence between acquiring an owner's inbox-free flag and the TMA pushes into it",
                  "within_tolerance at a late owner (a push of call e+1 lands while the owner reads call e); "
                  "timing-dependent like relaxed_signal: may need nightly repeats to show",
                  race=("a push of call e+1 landing while a late owner reads call e: caught statically by "
                        "test_consumer_fence_missing_drops_the_fence_after_the_done_acquires")),
    GpuMutantSpec("FusedPushEarlySignal", "early_signal",
                  "push: ready raised right after the pushes are issued, before the remote stores completed",
                  "within_tolerance / bitwise_equal (owner sums a slot the push has not filled yet)",
                  race=("the owner reading a slot while the push into it is still in flight: caught statically by"
                        " test_early_signal_raises_ready_before_the_pushes_completed")),
    GpuMutantSpec("FusedPushWrongInboxSlot", "wrong_inbox_slot",
                  "push: partials land in the inbox slot of source (r+1) % W; the owner reads slot r (stale)",
                  "within_tolerance / bitwise_equal (exact mode), first call"),
    GpuMutantSpec("FusedPushOwnPartialSkipped", "own_partial_skipped",
                  "push: the owner sums its W-1 inbox partials without its own",
                  "within_tolerance / bitwise_equal (exact mode), first call"),
)

if {s.fault for s in GPU_CATALOGUE} != set(KERNEL_FAULTS):  # keep the matrix and the switches in step
    raise RuntimeError("GPU_CATALOGUE does not cover kernel.fused.config.KERNEL_FAULTS one-to-one")


def protocol_of(spec_: GpuMutantSpec) -> str:
    """The protocol of the kernel a GPU mutant plants its bug in."""
    return FAULT_PROTOCOL[spec_.fault][0]


def spec(name: str) -> GpuMutantSpec:
    for s in GPU_CATALOGUE:
        if s.name == name:
            return s
    raise KeyError(f"no GPU mutant {name!r}; one of {[s.name for s in GPU_CATALOGUE]}")


__all__ = [
    "GPU_CATALOGUE",
    "FusedBf16Parts",
    "FusedClusterLocalRelease",
    "FusedClusterUnawareSchedule",
    "FusedDroppedPart",
    "FusedDroppedPeer",
    "FusedPaddingWritten",
    "FusedPushConsumerFenceMissing",
    "FusedPushEarlySignal",
    "FusedPushOwnPartialSkipped",
    "FusedPushWrongInboxSlot",
    "FusedRelaxedSignal",
    "FusedStaleEpoch",
    "FusedUnorderedPartSignal",
    "FusedUnwaitedSlices",
    "FusedWritePastCapacity",
    "FusedWrongOwner",
    "GpuMutantSpec",
    "protocol_of",
    "spec",
]
