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


def test_a_gpu_fault_surfacing_after_a_cases_checks_is_that_cases_error(monkeypatch):
    """The rank waits for a case's queued GPU work before its result goes out: an asynchronous fault (illegal
    address, a kernel's spin-timeout trap) is reported with the case that caused it, not at the next CUDA call
    (the next case's, or the cache trim between cases that killed the rank)."""
    from types import SimpleNamespace

    import torch

    from fuzz import rank_worker
    from fuzz.case import Case

    case = Case("compute", seed=1, N=64, K=64, max_M=64, ms=[3])
    ran = []

    def run_case(ctx, c):
        ran.append(c)
        return ["its checks"]

    def faulted(device=None):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(torch.cuda, "synchronize", faulted)
    gpu = SimpleNamespace(device=torch.device("cuda", 0))
    checks, error = rank_worker.run_one(gpu, case.to_json(), run_case, lambda e: f"{type(e).__name__}: {e}")
    assert ran == [case] and checks == ["its checks"]
    assert error == "RuntimeError: CUDA error: an illegal memory access was encountered"
    cpu = SimpleNamespace(device=torch.device("cpu"))  # no device to wait for
    assert rank_worker.run_one(cpu, case.to_json(), run_case, str) == (["its checks"], None)

    def raising(ctx, c):
        raise ValueError("escaped")

    assert rank_worker.run_one(cpu, case.to_json(), raising, str) == ([], "escaped")
