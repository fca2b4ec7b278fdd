"""Shared timing for the benchmarks: CUDA-graph replays timed with events."""

from __future__ import annotations


def graph_samples(torch, calls, samples: int, before_each=None) -> list[float]:
    """Capture ``calls`` as one CUDA graph (after a warm-up outside capture); return ``samples`` timings
    of one replay, per call, in seconds. ``before_each`` (a barrier) runs before every timed replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    graph.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        if before_each is not None:
            before_each()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / len(calls))
    return out
