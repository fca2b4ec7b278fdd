"""Shared timing for the benchmarks: CUDA-graph replays timed with events.

A ratio of two implementations is timed *interleaved* (:func:`interleaved_samples`): both graphs are captured
first, then each sample replays them one after the other, in A B / B A order on alternate samples. Timed one
after the other instead (all of A's samples, then all of B's), a drift of the GPU's clocks between the two
blocks -- a GPU at its power limit under a long dense GEMM clocks down -- lands on one side of the ratio only
(26th session, one H200: torch.mm alone swung 630-685 TF/s at 8192 x 7168 x 2048 across runs of one day).
"""

from __future__ import annotations

import statistics


def _capture(torch, calls):
    """One CUDA graph running every closure of ``calls`` once (after a warm-up outside capture), replayed once."""
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
    return graph


def _timed_replay(torch, graph, calls: int) -> float:
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    graph.replay()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3 / calls


def replay_order(names: list, sample: int) -> list:
    """The order of the graphs' replays in sample ``sample``: as given on even samples, reversed on odd ones
    (A B, B A, A B, ...), so that neither side always runs first after the other's heat."""
    return list(names) if sample % 2 == 0 else list(reversed(names))


def interleaved_samples(torch, named_calls: dict, samples: int, before_each=None) -> dict:
    """Capture each ``name -> calls`` as one CUDA graph, then take ``samples`` timings of every graph, the graphs
    replayed in turn (:func:`replay_order`); returns ``name -> [seconds per call of each replay]``.
    ``before_each`` (a barrier) runs before every timed replay."""
    graphs = {name: _capture(torch, calls) for name, calls in named_calls.items()}
    out = {name: [] for name in named_calls}
    for i in range(samples):
        for name in replay_order(list(named_calls), i):
            if before_each is not None:
                before_each()
            out[name].append(_timed_replay(torch, graphs[name], len(named_calls[name])))
    return out


def graph_samples(torch, calls, samples: int, before_each=None) -> list[float]:
    """Capture ``calls`` as one CUDA graph (after a warm-up outside capture); return ``samples`` timings
    of one replay, per call, in seconds. ``before_each`` (a barrier) runs before every timed replay."""
    return interleaved_samples(torch, {"": calls}, samples, before_each)[""]


def paired_ratios(numerator: list[float], denominator: list[float]) -> list[float]:
    """Sample-by-sample ratios of two interleaved series (sample i of each ran back to back)."""
    if len(numerator) != len(denominator) or not numerator:
        raise ValueError(f"paired series must be non-empty and of one length: {len(numerator)} vs {len(denominator)}")
    return [n / d for n, d in zip(numerator, denominator)]


def spread(values: list[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of ``values`` (at least one)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3
