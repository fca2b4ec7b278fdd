"""Differential mode: implementations that agree are reported as agreeing; one that differs on exact
inputs (where the sum is exact, so any difference is a bug) is named, with both REPRO lines."""

from __future__ import annotations

import pytest

from fuzz.case import Case, PoolSpec
from fuzz.differential import compare, render, sample_cases
from fuzz.pool import RankPool

pytestmark = pytest.mark.multiproc

CASES = [
    Case("compute", seed=11, N=64, K=64, max_M=512, ms=[129, 7], kinds=["exact", "gaussian"]),
    Case("compute", seed=12, N=128, K=128, max_M=512, ms=[5], kind="exact"),
]


def _run(impls):
    results = {}
    for impl in impls:
        pool = RankPool(PoolSpec(impl=impl, world_size=2))
        try:
            results[impl] = [pool.run(c) for c in CASES]
        finally:
            pool.close()
    return compare(results)


def test_identical_implementations_agree_bitwise():
    summary = _run(["unfused", "mutants.catalogue:PowerOfTwoGroupsOnly"])
    pair = summary["pairs"][("unfused", "mutants.catalogue:PowerOfTwoGroupsOnly")]
    assert summary["disagreements"] == []
    assert pair["exact_same"] == 2 * 2 and pair["exact_differ"] == 0  # 2 exact calls x 2 ranks
    assert pair["other_same"] + pair["other_differ"] == 2  # the gaussian call, 2 ranks


def test_an_implementation_that_differs_on_exact_inputs_is_named():
    summary = _run(["unfused", "mutants.catalogue:OutputScaledSlightly"])
    assert summary["disagreements"], render(summary)
    d = summary["disagreements"][0]
    assert d["impls"] == ("unfused", "mutants.catalogue:OutputScaledSlightly")
    assert all(line.startswith("python") and "fuzz.repro" in line for line in d["repro"].values())
    assert "DISAGREE on exact inputs" in render(summary)


def test_cases_are_the_same_on_every_run():
    a = sample_cases("compute", 2, "cpu", 5)
    b = sample_cases("compute", 2, "cpu", 5)
    assert [c.to_json() for c in a] == [c.to_json() for c in b] and len(a) == 5


def test_an_implementation_the_host_cannot_build_fails_the_run_after_one_case(capsys, monkeypatch, own_settings):
    import fuzz.differential

    ran: dict[str, int] = {}
    real = RankPool.run

    def counting(self, case, **kw):
        ran[self.spec.impl] = ran.get(self.spec.impl, 0) + 1
        return real(self, case, **kw)

    monkeypatch.setattr(RankPool, "run", counting)
    planted = "tests.engine.planted_impls:NoMainPathOnThisHost"
    rc = fuzz.differential.main(["--impl", f"unfused,{planted}", "--world-sizes", "2", "--cases", "3"])
    out = capsys.readouterr().out
    assert rc == 1 and "verdict: FAILED" in out
    assert ran == {"unfused": 3, planted: 1}  # one case showed it; none of the others ran
    assert f"CANNOT BUILD {planted}" in out and "libfast is not importable (planted)" in out and "REPRO: python" in out
