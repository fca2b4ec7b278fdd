"""The benchmarks' timing (bench/_timing.py), with a fake ``torch.cuda`` that records what ran: two
implementations' graph replays interleave A B / B A, each sample goes to its own series, and a drift of the
GPU's speed over the run lands on both sides of a ratio instead of one."""

from __future__ import annotations

import contextlib

import pytest

from tests.bench_scripts import load_bench


def _timing():
    return load_bench("_timing")


class FakeCuda:
    """A GPU whose clock slows by ``drift`` per replay; a call named ``a`` costs ``cost[a]`` ms at the start."""

    def __init__(self, cost: dict, drift: float = 0.0):
        self.cost, self.drift, self.log, self.now, self.replays = cost, drift, [], 0.0, 0
        self.capturing = None
        fake = self

        class Graph:
            def __init__(self):
                self.calls = []

            def replay(self):
                fake.replays += 1
                for name in self.calls:
                    fake.log.append(name)
                    fake.now += fake.cost[name] * (1 + fake.drift * fake.replays)

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = fake.now

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return other.t - self.t

        self.CUDAGraph, self.Event = Graph, Event

    def Stream(self):  # noqa: N802 (torch's name)
        return type("S", (), {"wait_stream": lambda s, o: None})()

    def current_stream(self):
        return self.Stream()

    def stream(self, s):
        return contextlib.nullcontext()

    def synchronize(self):
        pass

    @contextlib.contextmanager
    def graph(self, g):
        self.capturing = g
        yield
        self.capturing = None

    def call(self, name):
        if self.capturing is not None:
            self.capturing.calls.append(name)
        else:  # warm-up, outside capture
            self.log.append("warm:" + name)


class FakeTorch:
    def __init__(self, cuda):
        self.cuda = cuda


def _calls(cuda, name, n):
    return [lambda: cuda.call(name)] * n


def test_replays_alternate_a_b_then_b_a_and_each_sample_goes_to_its_own_series():
    t = _timing()
    cuda = FakeCuda({"ours": 2.0, "mm": 3.0})
    out = t.interleaved_samples(FakeTorch(cuda), {"ours": _calls(cuda, "ours", 2), "mm": _calls(cuda, "mm", 2)}, 4)
    timed = [name for name in cuda.log if not name.startswith("warm:")]
    # capture replays (one each), then per sample A A / B B, then B B / A A, ...
    assert timed == ["ours"] * 2 + ["mm"] * 2 + (["ours"] * 2 + ["mm"] * 2 + ["mm"] * 2 + ["ours"] * 2) * 2
    assert out["ours"] == pytest.approx([2e-3] * 4) and out["mm"] == pytest.approx([3e-3] * 4)  # per call, seconds
    assert t.replay_order(["a", "b"], 0) == ["a", "b"] and t.replay_order(["a", "b"], 1) == ["b", "a"]


def test_a_drifting_clock_lands_on_both_sides_of_the_ratio():
    """Two equal implementations on a GPU slowing 1 % a replay: timed one block after the other, the second
    looks ~20 % slower; interleaved, their ratio stays within 2 %."""
    t = _timing()
    cuda = FakeCuda({"a": 1.0, "b": 1.0}, drift=0.01)
    torch = FakeTorch(cuda)
    first, second = t.graph_samples(torch, _calls(cuda, "a", 1), 20), t.graph_samples(torch, _calls(cuda, "b", 1), 20)
    blocked = sorted(second)[10] / sorted(first)[10]
    assert blocked > 1.15  # the bias interleaving removes (the fake must show it, or this test proves nothing)
    cuda = FakeCuda({"a": 1.0, "b": 1.0}, drift=0.01)
    out = t.interleaved_samples(FakeTorch(cuda), {"a": _calls(cuda, "a", 1), "b": _calls(cuda, "b", 1)}, 20)
    ratios = t.paired_ratios(out["b"], out["a"])
    assert all(abs(r - 1) < 0.02 for r in ratios)
    q1, q2, q3 = t.spread(ratios)
    assert q1 <= q2 <= q3 and abs(q2 - 1) < 0.01


def test_paired_ratios_refuse_series_of_different_lengths_and_spread_is_quartiles():
    t = _timing()
    with pytest.raises(ValueError):
        t.paired_ratios([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        t.paired_ratios([], [])
    assert t.paired_ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    assert t.spread([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)
    assert t.spread([7.0]) == (7.0, 7.0, 7.0)


def test_the_barrier_runs_right_before_every_timed_replay():
    """``before_each`` (the ranks' barrier) before each timed replay of each graph -- of graph_samples too -- so every
    rank's replay of a sample starts together (a collective is timed from its slowest rank's start)."""
    t = _timing()
    cuda = FakeCuda({"ours": 2.0, "mm": 3.0})
    out = t.interleaved_samples(FakeTorch(cuda), {"ours": _calls(cuda, "ours", 2), "mm": _calls(cuda, "mm", 2)}, 3,
                                before_each=lambda: cuda.log.append("barrier"))
    timed = [name for name in cuda.log if not name.startswith("warm:")][4:]  # after the capture replays
    b, o, m = ["barrier"], ["ours"] * 2, ["mm"] * 2
    assert timed == b + o + b + m + b + m + b + o + b + o + b + m, timed
    assert len(out["ours"]) == len(out["mm"]) == 3
    cuda = FakeCuda({"a": 1.0})
    t.graph_samples(FakeTorch(cuda), _calls(cuda, "a", 1), 3, before_each=lambda: cuda.log.append("barrier"))
    assert [n for n in cuda.log if not n.startswith("warm:")][1:] == ["barrier", "a"] * 3, cuda.log


@pytest.mark.parametrize("n", range(2, 10))
def test_spread_is_the_inclusive_quartiles_and_the_median_of_any_count(n):
    import statistics

    values = [float(v * v) for v in range(n)]
    q1, q2, q3 = _timing().spread(values)
    assert (q1, q2, q3) == pytest.approx(statistics.quantiles(values, n=4, method="inclusive"))
    assert q2 == pytest.approx(statistics.median(values))
    assert _timing().spread([1.0, 3.0]) == pytest.approx((1.5, 2.0, 2.5))


def test_a_sample_is_per_call_of_its_own_graph_whatever_the_other_graphs_hold():
    t = _timing()
    cuda = FakeCuda({"ours": 2.0, "mm": 3.0})
    out = t.interleaved_samples(FakeTorch(cuda), {"ours": _calls(cuda, "ours", 2), "mm": _calls(cuda, "mm", 5)}, 2)
    assert out["ours"] == pytest.approx([2e-3] * 2) and out["mm"] == pytest.approx([3e-3] * 2)
