"""memory_bounded (properties/memory.py) and the instances family's memory probe: memory an implementation keeps
per M or per call fails, with the tensors named; views, dropped tensors and a replaced "last" tensor do not."""

from __future__ import annotations

import torch
from _in_process import failed_checks, run_on_one_cpu_rank

from fuzz.case import Case
from kernel.unfused import UnfusedGemmRs
from mutants.catalogue import ResultHistoryKept, WorkspacePerM
from properties.memory import live_tensors, memory_bounded

HELD: dict[str, torch.Tensor] = {}


def test_a_tensor_kept_between_the_snapshots_fails_and_is_named():
    HELD.clear()
    before = live_tensors()
    HELD["plan"] = torch.empty(37, 64, dtype=torch.bfloat16)
    check = memory_bounded(before, live_tensors(), during="one call", rank=3)
    HELD.clear()
    assert not check.passed and check.rank == 3 and check.n_wrong == 1
    assert "4736 bytes more live tensor memory after one call" in check.detail
    assert "(37, 64) bfloat16 cpu (4736 B)" in check.detail


def test_views_dropped_tensors_and_a_replaced_tensor_pass():
    HELD.clear()
    HELD["last"] = torch.zeros(16, 8)
    base = torch.zeros(64, 64)
    before = live_tensors()
    views = [base[:3], base[5:9].t(), base.view(-1)]  # no new storage
    scratch = torch.ones(128, 128)  # made and dropped
    del scratch
    HELD["last"] = torch.zeros(16, 8)  # replaced, not added to
    check = memory_bounded(before, live_tensors(), during="calls")
    assert check.passed and check.extra["grown"] == 0, check.detail
    assert views  # alive through the second snapshot
    HELD.clear()


def test_a_tensor_only_a_dropped_reference_cycle_holds_is_not_live():
    """A result the implementation dropped inside a reference cycle (a plan that refers to itself) is garbage, not
    memory kept: the snapshot collects before it counts."""
    import gc

    class Plan:
        def __init__(self):
            self.buffer = torch.empty(37, 64, dtype=torch.bfloat16)
            self.me = self  # a cycle: only a collection frees it

    enabled = gc.isenabled()
    gc.disable()  # no automatic collection between the drop and the snapshot
    try:
        before = live_tensors()
        Plan()  # made and dropped
        check = memory_bounded(before, live_tensors(), during="one call")
    finally:
        if enabled:
            gc.enable()
    assert check.passed and check.extra["grown"] == 0, check.detail


def test_a_slack_lets_that_much_through_and_not_a_byte_more():
    HELD.clear()
    before = live_tensors()
    HELD["small"] = torch.zeros(4, dtype=torch.int32)  # 16 bytes
    after = live_tensors()
    HELD.clear()
    assert memory_bounded(before, after, during="x", slack_bytes=16).passed
    assert not memory_bounded(before, after, during="x", slack_bytes=15).passed


def test_device_memory_no_python_tensor_holds_fails_at_the_same_slack():
    """On CUDA the probe also passes what the caching allocator handed out more: a block a C++-side cache keeps
    (no Python tensor grew) fails the check; none, or within the slack, passes; off CUDA (None) nothing is said."""
    HELD.clear()
    before = live_tensors()
    after = live_tensors()
    leak = memory_bounded(before, after, during="calls", rank=1, device_grown=512)
    assert not leak.passed and leak.n_wrong == 1 and leak.extra["device_bytes_grown"] == 512
    assert "caching allocator handed out 512 bytes more after calls" in leak.detail
    assert "live Python tensors grew +0 bytes" in leak.detail
    ok = memory_bounded(before, after, during="calls", device_grown=0)
    assert ok.passed and "device allocator +0 bytes" in ok.detail
    assert memory_bounded(before, after, during="calls", device_grown=-4096).passed  # a cache trimmed
    assert memory_bounded(before, after, during="x", slack_bytes=512, device_grown=512).passed
    assert not memory_bounded(before, after, during="x", slack_bytes=511, device_grown=512).passed
    off = memory_bounded(before, after, during="calls")
    assert off.passed and "device_bytes_grown" not in off.extra and "device allocator" not in off.detail


INSTANCES = Case("instances", 5, 64, 64, 8192, [300, 5, 129, 1000], "exact", "guarded", repeat=1,
                 shapes=[[128, 128, 512]], order=[0, 1, 0, 1], recreate=None)


def test_the_instances_family_probes_memory_and_catches_a_plan_cache_and_a_result_history():
    ok = run_on_one_cpu_rank(UnfusedGemmRs, INSTANCES)
    probe = [c for c in ok if c.name == "memory_bounded"]
    assert len(probe) == 1 and probe[0].passed and not failed_checks(ok), [c.detail for c in failed_checks(ok)]
    assert probe[0].extra["M"] == [256, 255, 193, 129, 256]
    for leak in (WorkspacePerM, ResultHistoryKept):
        failed = failed_checks(run_on_one_cpu_rank(leak, INSTANCES))
        assert [c.name for c in failed] == ["memory_bounded"], (leak.__name__, [c.detail for c in failed])
        assert "bfloat16 cpu" in failed[0].detail and "keeps memory per call or per M" in failed[0].detail


def test_released_on_close_fails_while_something_keeps_a_state_tensor_and_passes_once_it_is_gone():
    from properties.memory import released_on_close, watch_release

    ws = torch.zeros(8, 8)
    watched = watch_release({"workspace": ws[:4], "shard": torch.zeros(2)})  # a view: its base is watched
    HELD["registry"] = ws
    del ws
    check = released_on_close(watched, what="instance 1", rank=0)
    assert not check.passed and check.extra["alive"] == ["workspace"] and "instance 1" in check.detail
    HELD.clear()
    assert released_on_close(watched, what="instance 1").passed
    nothing = released_on_close({}, what="instance 2")
    assert nothing.skipped and not nothing.passed and "declares no state tensors" in nothing.detail


def test_released_on_close_collects_an_instance_held_only_by_a_reference_cycle():
    """An instance that refers to itself (a bound method kept on it, a callback) goes only with a collection: the
    check collects before it looks, so a correct implementation written that way is not failed."""
    import gc

    from properties.memory import released_on_close, watch_release

    class Instance:
        def __init__(self):
            self.workspace = torch.zeros(8, 8)
            self.launch = self.run  # a cycle: instance -> bound method -> instance

        def run(self):
            return self.workspace

    instance = Instance()
    watched = watch_release({"workspace": instance.workspace})
    enabled = gc.isenabled()
    gc.disable()  # no automatic collection between the drop and the check
    try:
        del instance
        assert watched["workspace"]() is not None  # only the cycle holds it now
        assert released_on_close(watched, what="instance 1").passed
    finally:
        if enabled:
            gc.enable()


def test_the_instances_family_checks_every_close_and_catches_a_workspace_registry():
    from mutants.catalogue import WorkspaceRegistry

    ok = run_on_one_cpu_rank(UnfusedGemmRs, INSTANCES)
    closes = [c for c in ok if c.name == "released_on_close"]
    assert len(closes) == 1 and closes[0].passed, [c.detail for c in closes]  # its one own instance, at the end
    failed = failed_checks(run_on_one_cpu_rank(WorkspaceRegistry, INSTANCES))
    assert [c.name for c in failed] == ["released_on_close"], [c.detail for c in failed]
    assert "workspace" in failed[0].extra["alive"]
