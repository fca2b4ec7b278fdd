"""The multi-process plumbing itself: a failing, a crashing and a hung rank all make the run fail,
with every rank's message (the hung one's stack included) — nothing passes or hangs silently."""

from __future__ import annotations

import time

import pytest


@pytest.mark.multiproc
def test_failed_crashed_and_hung_ranks_are_all_reported(run_ranks, dist_helpers):
    t0 = time.monotonic()
    with pytest.raises(dist_helpers.RankFailure) as info:
        # the hung rank is stopped `grace` seconds after its peers failed, long before `timeout`
        run_ranks("planted_rank_failures", 3, {"hang_s": 300}, timeout=240, grace=4)
    elapsed = time.monotonic() - t0
    msg = str(info.value)
    assert "rank 0/3: FAILED" in msg and "Mismatched elements: 1 / 4 at index (0, 1)" in msg
    assert "rank 1/3: FAILED" in msg and "planted exception on rank 1" in msg
    assert "rank 2/3: HUNG" in msg
    hung_report = msg.split("rank 2/3")[1]
    assert "in planted_rank_failures" in hung_report  # its stack, dumped before the kill
    assert elapsed < 120



def test_a_gpu_fault_surfacing_at_the_cases_end_fails_that_case_not_the_next(monkeypatch):
    """run_case waits for the case's queued GPU work before it returns: an asynchronous fault (illegal address, a
    kernel's spin-timeout trap) shows in this case -- not at the next CUDA call (the next case's, or the cache trim
    between cases that killed the rank). After the rank called the implementation it is the implementation's
    failure (a failed ``device_fault`` with the calls it began, properties/device_fault.py); before any call it
    escapes, the harness's error."""
    import torch

    from fuzz import families
    from fuzz.case import Case
    from fuzz.families.calls import CaseCalls
    from properties.result import CheckResult

    class Ctx:
        device, rank, waited = torch.device("cpu"), 0, 0

        def __init__(self, fault: bool, called: bool):
            self.fault, self.called = fault, called

        def begin_case(self):
            self.calls = CaseCalls(0, 2)
            if self.called:
                self.calls.trail.append("call0 M=3 group rank 0/2 expected path fused (kernel path pull 64x112)")
            return self.calls

        def sync(self):
            Ctx.waited += 1
            if self.fault == "assert":  # torch's own assert, raised in the harness: never the implementation's
                raise torch.AcceleratorError("CUDA error: device-side assert triggered")
            if self.fault:
                raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered\nCompile with "
                                             "`TORCH_USE_CUDA_DSA` to enable device-side assertions.")

        def held_impls(self):
            return {}

    ran = CheckResult(name="within_tolerance", passed=True, rank=0)
    monkeypatch.setattr(families, "run_family", lambda ctx, case, runner: [ran])
    case = Case("compute", seed=1, N=64, K=64, max_M=64, ms=[3])
    assert families.run_case(Ctx(fault=False, called=True), case) == [ran] and Ctx.waited == 1
    checks = families.run_case(Ctx(fault=True, called=True), case)
    assert [(c.name, c.passed) for c in checks] == [("within_tolerance", True), ("device_fault", False)]
    assert "illegal memory access" in checks[1].detail and "call0 M=3" in checks[1].detail
    with pytest.raises(torch.AcceleratorError, match="illegal memory access"):
        families.run_case(Ctx(fault=True, called=False), case)  # no call of the implementation yet: the harness's
    with pytest.raises(torch.AcceleratorError, match="device-side assert triggered"):
        families.run_case(Ctx(fault="assert", called=True), case)  # no frame of the implementation's: the harness's


def test_an_exception_is_the_implementations_when_it_passed_through_one_of_its_methods():
    """fuzz.families.calls.implementation_method: the innermost frame running a method of an implementation object
    (a GemmRsImplementation, or the factory's duck-typed class), never one of the harness's objects."""
    from fuzz.families.calls import implementation_method
    from kernel.unfused import UnfusedGemmRs

    class Duck:  # a factory's class without the interface's base class
        def guard_regions(self):
            raise KeyError("duck")

    class Harness:
        def check(self, impl):
            return impl.guard_regions()

    def raised(fn):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 -- what the harness would catch
            return exc
        raise AssertionError("nothing raised")

    exc = raised(lambda: Harness().check(Duck()))
    assert implementation_method(exc, Duck) == "Duck.guard_regions"
    assert implementation_method(exc, None) is None  # without the factory: no GemmRsImplementation in the frames
    unfused = UnfusedGemmRs.__new__(UnfusedGemmRs)  # no group needed: only its class is read
    assert implementation_method(raised(lambda: unfused.valid_rows(3)), None).startswith("UnfusedGemmRs.")
    assert implementation_method(raised(lambda: Harness().check(object())), None) is None
