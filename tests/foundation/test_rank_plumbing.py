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
