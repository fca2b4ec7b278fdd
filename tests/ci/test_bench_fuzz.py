"""bench/bench_fuzz.py's host logic with a fake rank pool: a case's rank time is its slowest rank's, a shape's first
case (and the first after a non-pass, the pool restarted) is cold, the p90 is a nearest-rank percentile, the harness
share is the round trip less the rank time, and any status but passed (or no case at all) makes the exit status 1."""

from __future__ import annotations

import types

import pytest

from tests.bench_scripts import load_bench


@pytest.fixture
def bench():
    return load_bench("bench_fuzz")


class FakePool:
    """A pool whose cases pass (or not, by seed) with rank 1 the slowest (0.3 s against 0.1 s)."""

    failing_seeds: set = set()

    def __init__(self, spec, gpus=None):
        self.spec = spec

    def start(self):
        pass

    def close(self):
        pass

    def run(self, case):
        ok = case.seed not in self.failing_seeds
        return types.SimpleNamespace(status="passed" if ok else "failed", passed=ok,
                                     ranks={0: {"seconds": 0.1, "phases": {"calls": 0.05}},
                                            1: {"seconds": 0.3, "phases": {"calls": 0.2}}})


def test_a_case_s_rank_time_is_its_slowest_rank_s_and_cold_cases_are_marked(bench, monkeypatch):
    monkeypatch.setattr(bench, "RankPool", FakePool)
    monkeypatch.setattr(FakePool, "failing_seeds", {1})
    Case = bench.Case
    cases = [Case("compute", seed=i, N=64, K=64, max_M=8, ms=[4], kind="exact") for i in range(4)]
    cases[3] = Case("compute", seed=3, N=128, K=64, max_M=8, ms=[4], kind="exact")
    rows = []
    bench._run_pool(None, cases, None, rows)
    assert [r["rank"] for r in rows] == [0.3] * 4
    assert [r["phases"] for r in rows] == [{"calls": 0.2}] * 4
    # the first of its shape; a warm one that failed; the first after the restart; the first of a new shape
    assert [r["cold"] for r in rows] == [True, False, True, True]
    assert [r["status"] for r in rows] == ["passed", "failed", "passed", "passed"]


@pytest.mark.parametrize("xs, q, want", [
    (list(range(1, 11)), 0.9, 9), (list(range(1, 21)), 0.9, 18), (list(range(1, 8)), 0.9, 7), ([5.0], 0.9, 5.0),
    (list(range(1, 101)), 0.9, 90), (list(range(1, 11)), 0.5, 5),
])
def test_the_p90_is_a_nearest_rank_percentile(bench, xs, q, want):
    assert bench._pct(list(reversed(xs)), q) == want


def test_measure_splits_the_round_trip_into_rank_and_harness(bench, monkeypatch):
    monkeypatch.setattr(bench, "RankPool", FakePool)
    monkeypatch.setattr(bench, "_gpus", lambda topology, W, p: None)
    made = [{"status": "passed", "total": 2.0, "rank": 1.5, "cold": True, "phases": {"calls": 1.0}},
            {"status": "passed", "total": 0.5, "rank": 0.4, "cold": False, "phases": {"calls": 0.3}},
            {"status": "passed", "total": 0.7, "rank": 0.4, "cold": False, "phases": {"calls": 0.3}},
            {"status": "failed", "total": 0.9, "rank": 0.8, "cold": False, "phases": {"calls": 0.3}}]
    monkeypatch.setattr(bench, "_run_pool", lambda spec, cases, gpus, rows: rows.extend(made))
    r = bench.measure("unfused", "cpu", 2, 4, 1, 1)
    assert r["cases"] == 4 and r["cold"] == 2.0 and r["warm"] == 0.7 and r["rank"] == 0.4
    assert r["harness"] == pytest.approx(0.1) and r["warm_p90"] == 0.9
    assert r["statuses"] == {"passed": 3, "failed": 1}


def _result(statuses: dict, cases: int, errors=()) -> dict:
    nan = float("nan")
    return {"impl": "unfused", "topology": "cpu", "W": 2, "pools": 1, "cases": cases, "wall": 1.0, "start": nan,
            "cold": nan, "warm": nan, "warm_p90": nan, "rank": nan, "harness": nan, "per_min": 0.0,
            "statuses": statuses, "phases": {}, "errors": list(errors)}


@pytest.mark.parametrize("result, rc", [
    pytest.param(_result({"passed": 4}, 4), 0, id="all-passed"),
    pytest.param(_result({"passed": 3, "failed": 1}, 4), 1, id="one-failed"),
    pytest.param(_result({}, 0), 1, id="no-case"),
    pytest.param(_result({"passed": 4}, 4, ["RuntimeError: pool died"]), 1, id="error"),
])
def test_any_status_but_passed_fails_the_benchmark(bench, monkeypatch, result, rc):
    monkeypatch.setattr(bench, "measure", lambda *a: result)
    assert bench.main(["--cases", "4"]) == rc
