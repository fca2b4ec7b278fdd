"""Differential mode: implementations that agree are reported as agreeing; one that differs on exact
inputs (where the sum is exact, so any difference is a bug) is named, with both REPRO lines."""

from __future__ import annotations

import pytest

from fuzz.case import Case, PoolSpec
from fuzz.differential import compare, render, sample_cases
from fuzz.pool import RankPool
from fuzz.report import CaseReport
from fuzz.status import Status

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


# --- compare() on built reports (no ranks): what it counts and whom it names ---------------------------------------

def _report(impl: str, status: str, digests: dict) -> CaseReport:
    """A report of CASES[0] whose ranks' within_tolerance checks carry ``digests``: (call, M, rank) -> (kind,
    digest)."""
    ranks: dict[int, dict] = {}
    for (call, M, rank), (kind, d) in digests.items():
        ranks.setdefault(rank, {"checks": []})["checks"] += [
            {"name": "within_tolerance", "passed": True, "skipped": False,
             "extra": {"call": call, "M": M, "kind": kind, "digest": d}},
            {"name": "result_contract", "passed": True, "skipped": False, "extra": {"digest": "not a result's"}}]
    return CaseReport(case=CASES[0], spec=PoolSpec(impl=impl, world_size=2), status=Status(status), ranks=ranks)


def test_compare_counts_each_call_and_rank_and_names_an_exact_disagreement_once():
    same = {("call0", 129, 0): ("exact", "a0"), ("call0", 129, 1): ("exact", "a1"),
            ("call1", 7, 0): ("gaussian", "g0"), ("call1", 7, 1): ("gaussian", "g1"),
            ("call2", 5, 0): ("exact", "e0")}
    # both ranks differ on each exact call (each call named once, not per rank); the gaussian call differs too
    # (counted only)
    differ = {k: (kind, d + "x") for k, (kind, d) in same.items()}
    summary = compare({"A": [_report("A", "passed", same), _report("A", "passed", same)],
                       "B": [_report("B", "passed", same), _report("B", "failed", differ)]})
    assert summary["pairs"][("A", "B")] == {"exact_same": 3, "exact_differ": 3, "other_same": 2, "other_differ": 2}
    assert [(d["k"], d["call"], d["impls"]) for d in summary["disagreements"]] == [
        (1, ("call0", 129), ("A", "B")), (1, ("call2", 5), ("A", "B"))]
    # each disagreement carries the REPRO line of both implementations, each naming its own
    assert all(sorted(d["repro"]) == ["A", "B"] and all(f"--impl {i} " in line for i, line in d["repro"].items())
               for d in summary["disagreements"])
    assert summary["statuses"] == {"A": {"passed": 2}, "B": {"passed": 1, "failed": 1}}


def test_compare_names_no_one_for_a_difference_on_rounded_inputs_only():
    exact = {("call0", 129, 0): ("exact", "a0")}
    rounded = {("call1", 7, 0): ("gaussian", "g0")}
    summary = compare({"A": [_report("A", "passed", {**exact, **rounded})],
                       "B": [_report("B", "passed", {**exact, ("call1", 7, 0): ("gaussian", "other bits")})]})
    assert summary["disagreements"] == []
    assert summary["pairs"][("A", "B")] == {"exact_same": 1, "exact_differ": 0, "other_same": 0, "other_differ": 1}


def test_compare_skips_a_case_one_implementation_could_not_run():
    digests = {("call0", 129, 0): ("exact", "a0")}
    summary = compare({"A": [_report("A", "passed", digests)], "B": [_report("B", "hang", {})]})
    assert summary["pairs"][("A", "B")] == {"exact_same": 0, "exact_differ": 0, "other_same": 0, "other_differ": 0}
    assert summary["disagreements"] == [] and summary["statuses"]["B"] == {"hang": 1}


def test_compare_compares_every_pair_of_three_implementations_not_only_neighbours():
    """A vs C is compared too: with B hung (compared with nobody), A and C differing on exact inputs is named."""
    a = {("call0", 129, 0): ("exact", "a0")}
    c = {("call0", 129, 0): ("exact", "other bits")}
    summary = compare({"A": [_report("A", "passed", a)], "B": [_report("B", "hang", {})],
                       "C": [_report("C", "passed", c)]})
    assert set(summary["pairs"]) == {("A", "B"), ("A", "C"), ("B", "C")}
    assert [d["impls"] for d in summary["disagreements"]] == [("A", "C")]


def test_the_command_passes_agreeing_implementations_and_fails_on_a_failure_or_a_disagreement(
        capsys, monkeypatch, own_settings):
    import fuzz.differential

    monkeypatch.delenv("GEMM_RS_WORLD_SIZES", raising=False)  # (CI's passes set it: here the default is the point)
    agreeing = ["--impl", "unfused,mutants.catalogue:PowerOfTwoGroupsOnly", "--cases", "2"]
    rc = fuzz.differential.main(agreeing)
    out = capsys.readouterr().out
    assert rc == 0 and "verdict: PASSED" in out and "W=2" in out, out[-2000:]  # W = 2 unless told
    rc = fuzz.differential.main(["--impl", "unfused,mutants.catalogue:OutputScaledSlightly", "--cases", "2",
                                 "--world-sizes", "2"])
    out = capsys.readouterr().out
    assert rc == 1 and "verdict: FAILED" in out and "failed 2" in out, out[-2000:]  # its cases failed
    real = fuzz.differential.compare

    def with_a_disagreement(results):  # every case passed, yet two results differ on exact inputs
        summary = real(results)
        a, b = list(results)
        summary["disagreements"].append({"k": 0, "case": "{}", "call": ("call0", 1), "impls": (a, b),
                                         "repro": {a: "python -m fuzz.repro a", b: "python -m fuzz.repro b"}})
        return summary

    monkeypatch.setattr(fuzz.differential, "compare", with_a_disagreement)
    rc = fuzz.differential.main(agreeing)
    out = capsys.readouterr().out
    assert rc == 1 and "verdict: FAILED" in out and "DISAGREE on exact inputs" in out, out[-2000:]
    with pytest.raises(SystemExit):
        fuzz.differential.main(["--impl", "unfused"])


def test_the_command_runs_every_world_size_asked_and_a_failure_at_an_earlier_one_fails_it(
        capsys, monkeypatch, own_settings):
    """``--world-sizes 2,3``: both run, and B failing its case at W = 2 fails the run though W = 3 passes (the
    verdict is over every W, not the last one's). Pools stubbed: each case ends as told, no ranks."""
    import fuzz.differential

    pools = []

    class StubPool:
        def __init__(self, spec):
            self.spec = spec
            pools.append((spec.impl, spec.world_size))

        def run(self, case):
            failing = self.spec.impl == "B" and self.spec.world_size == 2
            return _report(self.spec.impl, "failed" if failing else "passed", {})

        def close(self):
            pass

    monkeypatch.setattr(fuzz.differential, "RankPool", StubPool)
    monkeypatch.setattr(fuzz.differential, "sample_cases", lambda family, w, topology, n: CASES[:1])
    rc = fuzz.differential.main(["--impl", "A,B", "--world-sizes", "2,3", "--cases", "1"])
    out = capsys.readouterr().out
    assert pools == [("A", 2), ("B", 2), ("A", 3), ("B", 3)], out
    assert "W=2" in out and "W=3" in out
    assert rc == 1 and "verdict: FAILED" in out, out
