"""The gate's report and verdict (docs/REPORT.md): a failed case makes the verdict FAIL and is listed
with its REPRO line, skipped checks are listed and never counted as passed, every combination gets its
time per case; and the campaign, end to end on CPU, exits 1 on a broken implementation."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fuzz.summary import summarise
from fuzz.topology import default_pools_per_gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _row(status="passed", W=2, seconds=1.0, checks=None, ms=(7,), impl="unfused", paths=None, **more):
    return {
        "time": 0.0, "test": f"fuzz/test_gemm_rs.py::test_compute[{impl}-cpu-W2]", "impl": impl,
        "topology": "cpu", "world_size": W, "optimize": 1, "driver_optimize": 1,
        "case": {"family": "compute", "seed": 1, "N": 64, "K": 64, "max_M": 256, "ms": list(ms), "kind": "exact"},
        "status": status, "seconds": seconds, "note": "", "paths": paths or {}, **more,
        "checks": checks if checks is not None else [
            {"name": "within_tolerance", "passed": status == "passed", "rank": 0,
             "extra": {"max_error_over_budget": 0.25}}],
        "rank_optimize": {"0": 1, "1": 1}, "errors": {}, "repro": f"python -O -m fuzz.repro --case {status}",
    }


def _write(tmp_path, rows):
    with open(tmp_path / "cases-gw0.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _junit(tmp_path, *testcases):
    """junit.xml with ``(name, inner XML)`` test cases of fuzz/test_gemm_rs.py."""
    body = "".join(f'<testcase classname="fuzz.test_gemm_rs" name="{name}">{inner}</testcase>'
                   for name, inner in testcases)
    (tmp_path / "junit.xml").write_text(f'<testsuites><testsuite name="pytest">{body}</testsuite></testsuites>')


def test_all_passed_is_pass_with_timing(tmp_path):
    _write(tmp_path, [_row(seconds=s) for s in (1.0, 2.0, 3.0, 10.0)])
    s = summarise(str(tmp_path), pytest_rc=0, seconds=20.0, profile="smoke")
    assert s["verdict"] == "PASS" and s["failed_cases"] == 0
    (t,) = s["timing"]
    assert (t["cases"], t["median_s"], t["max_s"], t["total_s"]) == (4, 3.0, 10.0, 16.0)
    cell = next(p for p in s["properties"] if p["property"] == "within_tolerance")
    assert cell["cases"] == 4 and cell["failures"] == 0 and cell["worst_over_budget"] == 0.25
    md = (tmp_path / "summary.md").read_text()
    assert "VERDICT: PASS" in md and "median s/case" in md
    assert json.loads((tmp_path / "summary.json").read_text())["schema"] == "gemm-rs-gate-summary/2"
    assert (tmp_path / "coverage.png").stat().st_size > 1000


def test_one_failed_case_fails_the_verdict_and_is_listed_with_its_repro(tmp_path):
    _write(tmp_path, [_row(), _row(status="failed", ms=(3,)), _row(status="hang", checks=[], ms=(5,))])
    s = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")  # even if pytest said 0
    assert s["verdict"] == "FAIL" and s["failed_cases"] == 2
    assert {f["repro"] for f in s["failures"]} == {"python -O -m fuzz.repro --case failed",
                                                   "python -O -m fuzz.repro --case hang"}
    assert any(p["property"] == "hang" and p["failures"] == 1 for p in s["properties"])
    md = (tmp_path / "summary.md").read_text()
    assert "VERDICT: FAIL" in md and "fuzz.repro --case failed" in md


def test_skipped_checks_are_listed_not_passed(tmp_path):
    checks = [{"name": "graph_replay", "passed": True, "skipped": True, "rank": 0, "detail": "no CUDA graphs on cpu"}]
    waived = [{"name": "unaligned_m", "passed": False, "skipped": True, "rank": 0,
               "detail": f"M={m} is not a multiple of W=2; waived"} for m in (3, 4097)]
    _write(tmp_path, [_row(checks=checks), _row(checks=waived)])
    s = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")
    assert s["skipped"] == [{"reason": "graph_replay: no CUDA graphs on cpu", "count": 1},
                            {"reason": "unaligned_m: M=<m> is not a multiple of W=2; waived", "count": 2}]
    assert not any(p["property"] == "graph_replay" for p in s["properties"])  # not counted as a passed case
    assert "no CUDA graphs on cpu" in (tmp_path / "summary.md").read_text()


def test_checks_no_case_made_are_listed_as_skipped_or_not_reached(tmp_path):
    from fuzz.expected_checks import CUDA_ONLY, EVERY_TOPOLOGY, expected_checks

    made = sorted(EVERY_TOPOLOGY - {"batch_invariant", "outside_rank_untouched", "other_groups_untouched"})
    checks = [{"name": n, "passed": True, "rank": 0} for n in made]
    waived = [{"name": "batch_invariant", "passed": False, "skipped": True, "rank": 0, "detail": "waived: gloo"}]
    gpu = _row(checks=checks + [{"name": n, "passed": True, "rank": 0} for n in sorted(CUDA_ONLY)])
    gpu["topology"] = "shared-gpu"
    _write(tmp_path, [_row(checks=checks), _row(checks=checks + waived), gpu])
    s = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")
    assert s["verdict"] == "PASS"  # information, not the verdict
    assert s["unmade"] == [
        {"impl": "unfused", "topology": "cpu", "skipped": ["batch_invariant"],
         "not_reached": ["other_groups_untouched", "outside_rank_untouched"]},
        {"impl": "unfused", "topology": "shared-gpu", "skipped": [],
         "not_reached": ["batch_invariant", "other_groups_untouched", "outside_rank_untouched"]}]
    md = (tmp_path / "summary.md").read_text()
    assert ("- unfused on cpu: skipped wherever reached (batch_invariant); NOT REACHED by any case "
            "(other_groups_untouched, outside_rank_untouched)") in md
    # a run that made every check lists none; the CUDA-only checks are expected on GPU topologies only
    assert expected_checks("cpu") == EVERY_TOPOLOGY and expected_checks("multi-gpu") == EVERY_TOPOLOGY | CUDA_ONLY
    _write(tmp_path, [_row(checks=[{"name": n, "passed": True, "rank": 0} for n in sorted(EVERY_TOPOLOGY)])])
    s = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")
    assert s["unmade"] == [] and "Checks no case made" not in (tmp_path / "summary.md").read_text()


def test_every_check_the_cuda_only_families_name_is_expected_where_cuda_runs():
    """The graph and streams families run only where CUDA does (on the CPU they skip whole, their checks unnamed): each
    check they name (``name="..."``) must be in ``CUDA_ONLY``, or a GPU run that never made it would not list it among
    the checks no case made -- a check that never runs is a silent pass."""
    import ast

    from fuzz.expected_checks import CUDA_ONLY

    for family in ("graph", "streams"):
        with open(os.path.join(ROOT, "fuzz", "families", f"{family}.py")) as f:
            tree = ast.parse(f.read())
        named = {kw.value.value for node in ast.walk(tree) if isinstance(node, ast.Call) for kw in node.keywords
                 if kw.arg == "name" and isinstance(kw.value, ast.Constant)}
        assert named and named <= CUDA_ONLY, (family, sorted(named - CUDA_ONLY))


def test_whole_tests_pytest_skipped_are_listed(tmp_path):
    _write(tmp_path, [_row()])
    skip = '<skipped type="pytest.skip" message="CUDA graphs need a GPU topology" />'
    _junit(tmp_path, ("test_graph_replay[unfused-cpu-W1]", skip), ("test_graph_replay[unfused-cpu-W2]", skip),
           ("test_compute[unfused-cpu-W1]", ""))
    s = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")
    assert {"reason": "test test_graph_replay: CUDA graphs need a GPU topology", "count": 2} in s["skipped"]
    assert "test test_graph_replay: CUDA graphs need a GPU topology" in (tmp_path / "summary.md").read_text()


def test_a_failure_rerun_on_a_fresh_pool_is_listed_once_with_its_label(tmp_path):
    first = _row(status="failed", ms=(3,))
    labelled = _row(status="failed", ms=(3,), reproducibility="reproducible", rerun_status="failed")
    flaky = _row(status="failed", ms=(9,), reproducibility="flaky", rerun_status="passed")
    _write(tmp_path, [_row(), first, labelled, _row(status="failed", ms=(9,)), flaky])
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    assert s["failed_cases"] == 2 and s["verdict"] == "FAIL"
    assert sorted((f["case"]["ms"][0], f["reproducibility"], f["rerun_status"]) for f in s["failures"]) == [
        (3, "reproducible", "failed"), (9, "flaky", "passed")]
    md = (tmp_path / "summary.md").read_text()
    assert "failed (reproducible, re-run failed)" in md and "failed (flaky, re-run passed)" in md


def _paths(*calls):
    return {"0": [{"path": p, "expected": e, "reason": r} for p, e, r in calls],
            "1": [{"path": p, "expected": e, "reason": r} for p, e, r in calls]}


def test_the_header_shows_each_implementation_s_path_mix_with_legitimate_fallbacks(tmp_path):
    fused = [_row(impl="fused", paths=_paths(("fused", "fused", ""))) for _ in range(7)]
    fused.append(_row(impl="fused", paths=_paths(("unfused", "unfused", "W=3 is not supported (2, 4, 8)"))))
    _write(tmp_path, fused + [_row(paths=_paths(("unfused", "unfused", ""), ("unfused", "unfused", "")))])
    s = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")
    mix = {m["impl"]: m for m in s["paths"]}
    assert mix["fused"]["paths"] == {"fused": 14, "unfused": 2} and mix["fused"]["unexpected"] == 0
    assert mix["fused"]["cases_without_path"] == mix["unfused"]["cases_without_path"] == 0
    assert mix["fused"]["fallbacks"] == [{"reason": "unfused: W=3 is not supported (2, 4, 8)", "count": 2}]
    md = (tmp_path / "summary.md").read_text()
    assert ("- fused: 88% fused path, 12% unfused (legitimate fallback: 2 x W=3 is not supported (2, 4, 8)) "
            "(16 calls)") in md
    assert "- unfused: 100% unfused path (4 calls)" in md
    assert s["verdict"] == "PASS"


def test_the_paths_taken_under_an_engine_s_defaults_are_shown_and_a_path_never_taken_there_is_named(tmp_path):
    engine = {"family": "compute", "seed": 1, "N": 64, "K": 64, "max_M": 256, "ms": [7], "kind": "exact",
              "defaults": "engine"}
    rows = [_row(impl="fused", paths=_paths(("fused", "fused", ""))),
            _row(impl="fused", paths=_paths(("unfused", "unfused", "N=1 is not supported"))),
            _row(impl="fused", paths=_paths(("fused", "fused", "")), case=engine)]
    _write(tmp_path, rows)
    (m,) = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")["paths"]
    assert m["engine_defaults"] == {"fused": 2}
    md = (tmp_path / "summary.md").read_text()
    assert "in cases under an engine's tensor defaults: 2 fused (never the unfused path there)" in md
    rows.append(_row(impl="fused", paths=_paths(("unfused", "unfused", "N=1 is not supported")), case=engine))
    _write(tmp_path, rows)
    (m,) = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")["paths"]
    assert m["engine_defaults"] == {"fused": 2, "unfused": 2}
    assert "never the" not in (tmp_path / "summary.md").read_text()


def test_a_silent_fallback_and_a_case_without_a_path_are_called_out(tmp_path):
    # counted: the passed case without a path only -- not those with one, not a failed case without one
    _write(tmp_path, [_row(impl="fused", paths=_paths(("unfused", "fused", ""))), _row(impl="fused"),
                      _row(impl="fused", paths=_paths(("fused", "fused", ""))), _row(impl="fused", status="failed")])
    (m,) = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")["paths"]
    assert m["unexpected"] == 2 and m["cases_without_path"] == 1
    md = (tmp_path / "summary.md").read_text()
    assert "2 call(s) ran a path the contract says does not serve them" in md
    assert "1 passed case(s) recorded no path" in md


def test_an_implementation_with_no_passed_case_fails_the_gate(tmp_path):
    skipped = [{"name": "unsupported_config", "passed": False, "skipped": True, "rank": 0, "detail": "W=2 unsupported"}]
    _write(tmp_path, [_row(), _row(impl="my:Impl", status="skipped", checks=skipped)])
    s = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")
    assert s["verdict"] == "FAIL" and s["unchecked_implementations"] == ["my:Impl"]
    assert "my:Impl: NOTHING CHECKED" in (tmp_path / "summary.md").read_text()


def test_a_test_whose_case_failed_is_not_listed_again_as_a_test_failure(tmp_path):
    """junit lists the pytest test of a failed case as failed too: the summary shows the case (with its repro), not
    the same failure again as a test that failed outside any case; a test that failed with no case still shows."""
    _write(tmp_path, [_row(status="failed"), _row(impl="fused")])
    _junit(tmp_path, ("test_compute[unfused-cpu-W2]", '<failure message="GEMM-RS fuzz case FAILED">x</failure>'),
           ("test_graph_replay[unfused-cpu-W2]", '<failure message="collection broke">y</failure>'))
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    assert [f["test"] for f in s["test_failures"]] == ["test_graph_replay[unfused-cpu-W2]"]
    assert s["verdict"] == "FAIL" and s["failed_cases"] == 1


def test_a_test_that_failed_before_any_case_is_listed_with_pytest_s_reason(tmp_path):
    _write(tmp_path, [_row()])
    _junit(tmp_path, ("test_compute[fused-unrunnable]",
                      '<failure message="--impl fused cannot be gated here: needs a GPU">details</failure>'))
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    assert s["test_failures"] == [{"test": "test_compute[fused-unrunnable]", "kind": "failure",
                                   "message": "--impl fused cannot be gated here: needs a GPU"}]
    assert "--impl fused cannot be gated here: needs a GPU" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("rc, rows", [(1, [_row()]), (0, []), (2, [_row()]), (3, [_row()]), (4, [_row()]),
                                      (5, [_row()])])
def test_pytest_failure_or_no_cases_is_fail(tmp_path, rc, rows):
    """Only pytest's exit 0 can pass: 2 (interrupted: a KeyboardInterrupt mid-run, the cases so far all passed),
    3 (internal error), 4 (usage), 5 (no tests) fail whatever the recorded cases say."""
    _write(tmp_path, rows)
    assert summarise(str(tmp_path), pytest_rc=rc, seconds=1.0, profile="ci")["verdict"] == "FAIL"


def test_progress_counts_cases_and_failures_from_the_records(tmp_path):
    from fuzz.campaign import _count_cases
    from fuzz.case import Case, PoolSpec
    from fuzz.record import case_row
    from fuzz.report import CaseReport
    from fuzz.status import Status

    rows = [case_row(CaseReport(Case("compute", seed=1, N=64, K=64, max_M=256), PoolSpec(), status))
            for status in (Status.PASSED, Status.FAILED, Status.SKIPPED, Status.HANG)]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (tmp_path / "cases-gw0.jsonl").write_text(text + text[:40])  # and a line still being written
    assert _count_cases(str(tmp_path)) == (4, 2)


def test_the_estimate_of_cases_to_come_is_read_from_the_session_s_collected_tests(tmp_path):
    from fuzz.campaign import expected_cases
    from fuzz.record import COLLECTED
    from fuzz.settings import examples_for

    env = {"HYPOTHESIS_PROFILE": "ci"}
    assert expected_cases(str(tmp_path), env) is None  # not collected yet
    ids = ["fuzz/test_gemm_rs.py::test_compute[unfused-cpu-W2]", "fuzz/test_gemm_rs.py::test_compute[unfused-cpu-W4]",
           "fuzz/test_gemm_rs.py::test_bad_call[unfused-cpu-W2]", "tests/other.py::test_not_a_gate_test"]
    (tmp_path / COLLECTED).write_text("\n".join(ids) + "\n")
    want = 2 * examples_for("test_compute", "ci") + examples_for("test_bad_call", "ci")
    assert want > 3 and expected_cases(str(tmp_path), env) == want
    assert expected_cases(str(tmp_path), dict(env, GEMM_RS_EXAMPLES="5")) == 15


def test_default_pools_per_gpu():
    assert [default_pools_per_gpu(c) for c in (1, 2, 8, 16, 128)] == [1, 1, 2, 4, 4]


def test_mps_client_ranks_are_in_the_environment_and_warned_of(tmp_path):
    """The ranks' MPS answers (``rank_mps``) reach the summary's environment (``mps_ranks``); where any rank was an
    MPS client the markdown says its failures may be another client's. cpu ranks (None) and records from before
    the field add no key; GPU ranks off MPS (False) are shown, with no warning."""
    from fuzz.summary import MPS_WARNING

    for rows, env, warned in (([_row(), _row(ms=(9,))], None, False),
                              ([_row(rank_mps={"0": None, "1": None})], None, False),
                              ([_row(rank_mps={"0": False, "1": False})], [False], False),
                              ([_row(rank_mps={"0": False, "1": False}),
                                _row(status="failed", ms=(3,), rank_mps={"0": True, "1": True})], [False, True], True)):
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        out.mkdir()
        _write(out, rows)
        s = summarise(str(out), pytest_rc=0, seconds=1.0, profile="ci")
        assert s["environment"].get("mps_ranks") == env, (rows, s["environment"])
        assert (MPS_WARNING in (out / "summary.md").read_text()) == warned, rows


@pytest.mark.multiproc
@pytest.mark.parametrize("impl, verdict, rc", [("unfused", "PASS", 0),
                                               ("mutants.catalogue:WrongDtypeAccepted", "FAIL", 1)])
def test_campaign_end_to_end_on_cpu(tmp_path, impl, verdict, rc):
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "fuzz.campaign", "--profile", "smoke", "--impl", impl, "--topology", "cpu",
         "--world-sizes", "2", "--report-dir", str(out), "--jobs", "0", "--progress-every", "5",
         # the mutant accepts bad calls: its campaign needs only the test that catches it (extra args go to pytest)
         *(["-k", "test_bad_call"] if verdict == "FAIL" else [])],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == rc, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"VERDICT: {verdict}" in proc.stdout
    # (the mutant's campaign runs test_bad_call alone: no compute case, so no coverage plot)
    for name in ("summary.md", "summary.json", "junit.xml", "pytest.log", *(["coverage.png"] * (verdict == "PASS"))):
        assert (out / name).exists(), name
    s = json.loads((out / "summary.json").read_text())
    assert s["verdict"] == verdict and s["cases"] > 0 and s["environment"]["optimize_ranks"] == [1]
    assert "mps_ranks" not in s["environment"]  # cpu ranks have no GPU to be an MPS client of
    if verdict == "FAIL":
        assert s["failures"] and all("fuzz.repro" in f["repro"] for f in s["failures"])
        # the failure Hypothesis reported was shrunk to the simplest bad call (every bad call at M=1 on the
        # smallest shape, seed 0), re-run on a fresh pool and came back
        (final,) = [f for f in s["failures"] if f["reproducibility"]]
        assert final["reproducibility"] == "reproducible" and final["rerun_status"] == "failed", final
        assert {k: final["case"][k] for k in ("family", "bad", "ms", "seed", "N", "K")} == {
            "family": "bad_call", "bad": "all", "ms": [1], "seed": 0, "N": 64, "K": 64}, final
        assert "(reproducible, re-run failed)" in (out / "summary.md").read_text()
    else:
        assert s["failed_cases"] == 0 and s["timing"][0]["world_size"] == 2
        # the smoke profile (derandomized: the same examples every run) reaches every check the CPU makes at W = 2
        assert s["unmade"] == [], s["unmade"]
        # the session wrote the tests it collected; the progress line's estimate came from them
        collected = (out / "collected.txt").read_text().splitlines()
        assert "fuzz/test_gemm_rs.py::test_compute[unfused-cpu-W2]" in collected, collected
        assert "left (of ~" in proc.stdout, proc.stdout[-3000:]


@pytest.mark.multiproc
def test_fused_asked_for_on_a_cpu_host_fails_the_gate_with_the_reason(tmp_path):
    """No GPU topology here: ``--impl fused`` must end FAIL saying why, never PASS and never "no tests"."""
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU topology: fused is gated on it")
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "fuzz.campaign", "--profile", "smoke", "--impl", "fused", "--report-dir", str(out),
         "--jobs", "0"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "VERDICT: FAIL" in proc.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["verdict"] == "FAIL" and s["cases"] == 0
    assert s["test_failures"] and all("--impl fused cannot be gated here" in f["message"] for f in s["test_failures"])
    assert "--impl fused cannot be gated here" in (out / "summary.md").read_text()


@pytest.mark.multiproc
def test_a_campaign_past_its_time_limit_still_reports_and_fails(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "fuzz.campaign", "--profile", "ci", "--impl", "unfused", "--topology", "cpu",
         "--world-sizes", "2", "--report-dir", str(out), "--jobs", "0", "--time-limit", "12"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "time limit of 12s reached" in proc.stdout and "VERDICT: FAIL" in proc.stdout
    s = json.loads((out / "summary.json").read_text())
    assert s["verdict"] == "FAIL" and s["interrupted"] == "time limit of 12s reached"
    assert s["failed_cases"] == 0  # nothing failed: it is the interruption that fails the gate


@pytest.mark.multiproc
def test_a_waived_m_redraws_the_example_instead_of_skipping_the_test(tmp_path):
    """An implementation that waives unaligned M: examples at unaligned M are recorded as skipped and
    redrawn; test_compute still makes its 4 checked examples (smoke) and passes — it is not skipped. (test_compute
    alone: the other tests' examples took this test from 20 to 55 s on a loaded 2-core CI machine.)"""
    out = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "fuzz.campaign", "--profile", "smoke", "--impl", "mutants.catalogue:UnalignedMRejected",
         "--topology", "cpu", "--world-sizes", "2", "--report-dir", str(out), "--jobs", "0", "-k", "test_compute"],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for f in out.glob("cases-*.jsonl") for line in f.read_text().splitlines()]
    compute = [r for r in rows if r["case"]["family"] == "compute"]
    assert sum(r["status"] == "passed" for r in compute) >= 4
    junit = (out / "junit.xml").read_text()
    assert 'name="test_compute[mutants.catalogue:UnalignedMRejected-cpu-W2]"' in junit
    assert "every check was skipped" not in junit  # no test was skipped for one waived example


def test_each_failure_says_why_in_one_line(tmp_path):
    """The summary names what failed (issue 13: FAIL "with the reason"): the first failed check with its
    rank and detail; a case without a failed check (a hang) gives its note; skipped checks never count."""
    unbuildable = [{"name": "no_systematic_bias", "passed": False, "skipped": True, "rank": 0, "detail": "n/a"},
                   {"name": "main_path_available", "passed": False, "rank": 1,
                    "detail": "the main path 'fused' cannot be built on this host: nvidia-cutlass-dsl not installed"}]
    _write(tmp_path, [_row(status="failed", checks=unbuildable, ms=(3,)),
                      _row(status="hang", checks=[], ms=(5,), **{"note": "no result from rank(s) [1]\nstacks"})])
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    whys = {f["case"]["ms"][0]: f["why"] for f in s["failures"]}
    assert whys == {3: "main_path_available (rank 1): the main path 'fused' cannot be built on this host: "
                       "nvidia-cutlass-dsl not installed",
                    5: "no result from rank(s) [1] stacks"}
    md = (tmp_path / "summary.md").read_text()
    assert "  - why: main_path_available (rank 1): the main path 'fused' cannot be built on this host" in md


def test_a_hang_says_where_each_rank_was_stuck(tmp_path):
    """A HANG's one-line reason names each rank's innermost frame of the thread that answered the stack request
    (its record keeps every rank's whole stacks, native ones included where asked)."""
    stacks = {"0": 'Current thread 0x1 (most recent call first):\n  File "/x/threading.py", line 320 in wait\n'
                   '  File "/r/fuzz/rank_worker.py", line 40 in _stack_requests\n'
                   'Thread 0x2 (most recent call first):\n  File "/r/kernel/fused/wrapper.py", line 271 in _launch\n'
                   '  File "/r/fuzz/families/calls.py", line 80 in call\n  File "/r/fuzz/rank_worker.py", line 9 in '
                   '<module>\n',
              "1": "(no stack: the rank did not answer the stack signal — dead, or its handler was replaced)"}
    _write(tmp_path, [_row(status="hang", checks=[], ms=(5,), **{"note": "no result from rank(s) [0, 1]",
                                                                  "stacks": stacks})])
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    assert s["failures"][0]["why"] == ("no result from rank(s) [0, 1]; stuck at: rank 0 _launch (wrapper.py:271), "
                                       "rank 1 ?")


def test_a_death_says_what_the_dead_rank_wrote_last(tmp_path):
    """A rank killed by a C++ abort (SIGABRT: ``terminate called after throwing ...``) leaves its reason in its own
    log, not in torchrun's: the record keeps the log tails and the one-line reason quotes the dead rank's last
    lines (warnings and blank lines left out)."""
    logs = {"7": "UserWarning: something harmless\n\nterminate called after throwing an instance of 'c10::Error'\n"
                 "  what():  CUDA driver error: invalid argument\n",
            "0": "rank 0 is fine\n"}
    note = "rank(s) [7] closed their channel mid-case (died)\nrank 7 died mid-case: exit code -6"
    _write(tmp_path, [_row(status="died", checks=[], ms=(5,), **{"note": note, "logs": logs})])
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    assert s["failures"][0]["why"] == (
        "rank 7 said: terminate called after throwing an instance of 'c10::Error' | what(): CUDA driver error: "
        "invalid argument; rank(s) [7] closed their channel mid-case (died) rank 7 died mid-case: exit code -6")


def test_a_cuda_error_is_quoted_not_the_advice_torch_appends_to_it(tmp_path):
    """torch follows every CUDA error with three lines of advice; the one-line reason must quote the error."""
    logs = {"6": "[rank6]: Traceback (most recent call last):\n"
                 "[rank6]: torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
                 "[rank6]: CUDA kernel errors might be asynchronously reported at some other API call, so the "
                 "stacktrace below might be incorrect.\n"
                 "[rank6]: For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                 "[rank6]: Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n[rank6]:\n"}
    note = "rank 6 died mid-case: exit code 1"
    _write(tmp_path, [_row(status="died", checks=[], ms=(5,), seconds=61.25, **{"note": note, "logs": logs})])
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    assert "- died after 61.2 s in fuzz/test_gemm_rs.py::test_compute" in s["markdown"]  # past the spin timeout
    why = s["failures"][0]["why"]
    assert why.startswith("rank 6 said: torch.AcceleratorError: CUDA error: an illegal memory access"), why
    assert "asynchronously" not in why and "DSA" not in why and "Traceback" not in why, why


def test_failures_jsonl_keeps_each_failure_whole_with_the_case_before_it(tmp_path):
    """The report's small file of failures: the whole failing rows (logs included), each with the case recorded
    before it on that pool (same worker, implementation, topology, W); passing rows left out."""
    rows = [_row(ms=(1,)), _row(W=4, ms=(2,)), _row(ms=(3,), seconds=2.5),
            _row(status="died", checks=[], ms=(4,), **{"note": "rank 1 died mid-case", "logs": {"1": "boom"}}),
            _row(W=4, status="failed", ms=(5,))]
    _write(tmp_path, rows)
    summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    got = [json.loads(line) for line in (tmp_path / "failures.jsonl").read_text().splitlines()]
    assert [g["case"]["ms"] for g in got] == [[4], [5]]
    assert got[0]["logs"] == {"1": "boom"} and got[0]["note"] == "rank 1 died mid-case"
    assert got[0]["previous_case"]["case"]["ms"] == [3] and got[0]["previous_case"]["seconds"] == 2.5
    assert got[1]["previous_case"]["case"]["ms"] == [2]  # W = 4's pool: its own previous case
    _write(tmp_path, rows[:3])
    summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")
    assert (tmp_path / "failures.jsonl").read_text() == ""


def test_the_case_record_keeps_the_log_tails_of_a_failure():
    from fuzz.case import Case, PoolSpec
    from fuzz.record import case_row
    from fuzz.report import CaseReport

    report = CaseReport(case=Case("compute", seed=1, N=64, K=64, max_M=64, ms=[3]),
                        spec=PoolSpec(impl="unfused", topology="cpu", world_size=2), status="died", ranks={},
                        note="rank 1 died mid-case: exit code -6", logs={0: "", 1: "what(): boom\n"})
    assert case_row(report)["logs"] == {"1": "what(): boom\n"}


#: Rank 0's error of the W = 8 trap on one H200 (13th session), as the rank sent it, its call trail appended.
H200_TRAP_ERROR = (
    'Traceback (most recent call last):\n  File "/work/main/fuzz/families/graph.py", line 61, in __init__\n'
    '    ctx.sync()\n  File "/opt/torch/.venv/lib/python3.12/site-packages/torch/cuda/__init__.py", line 1162, in '
    'synchronize\n    return torch._C._cuda_synchronize()\n           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n'
    "torch.AcceleratorError: CUDA error: unspecified launch failure\nSearch for `cudaErrorLaunchFailure' in "
    "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable "
    "device-side assertions.\n\n\ncalls this rank began in the case:\n"
    "  graph4_warmup M=193 group rank 0/8 expected path fused (kernel path pull 64x112c2)\n")


def test_an_error_says_what_the_ranks_raised_not_only_that_they_did(tmp_path):
    """A harness error's one-line reason quotes the exception each rank raised (ranks that raised the same, together),
    without torch's CUDA advice or the ranks' call trails; a rank that raised something else is named apart."""
    other = H200_TRAP_ERROR.replace("unspecified launch failure", "an illegal memory access was encountered")
    errors = {str(r): H200_TRAP_ERROR for r in range(6)} | {"7": other}
    note = "harness error: an exception escaped run_case on rank(s) [0, 1, 2, 3, 4, 5, 7]"
    row = _row(status="error", checks=[], ms=(5,), seconds=67.2, note=note)
    row["errors"] = errors
    _write(tmp_path, [row])
    why = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")["failures"][0]["why"]
    assert why.startswith("ranks [0, 1, 2, 3, 4, 5] raised: torch.AcceleratorError: CUDA error: unspecified launch "
                          "failure; rank 7 raised: torch.AcceleratorError: CUDA error: an illegal memory access"), why
    assert "Search for" not in why and "DSA" not in why and "kernel path" not in why and note in why, why


def test_a_property_counts_each_case_once_whatever_its_ranks_and_calls(tmp_path):
    """``cases`` of a property row is the cases that made the check, not its checks: every rank makes it, once per
    call (a W = 8 case of 4 calls would otherwise count 32 times and dwarf its single failure)."""
    def checks(failed_rank=None):
        return [{"name": "within_tolerance", "passed": r != failed_rank, "rank": r,
                 "extra": {"max_error_over_budget": 0.5}} for r in (0, 1) for _call in range(3)]

    _write(tmp_path, [_row(checks=checks()), _row(checks=checks(), ms=(9,)),
                      _row(status="failed", checks=checks(failed_rank=1)[:4], ms=(11,))])
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    (cell,) = [p for p in s["properties"] if p["property"] == "within_tolerance"]
    assert (cell["cases"], cell["failures"]) == (3, 1)


def test_a_property_failing_on_every_rank_and_call_of_a_case_counts_one_failing_case(tmp_path):
    """``failures`` beside ``cases`` counts failing cases (a dropped rank fails within_tolerance on every rank of
    every call: 1 case of 1, not 6 failures of 1 case)."""
    failing = [{"name": "within_tolerance", "passed": False, "rank": r} for r in (0, 1) for _call in range(3)]
    _write(tmp_path, [_row(), _row(status="failed", checks=failing, ms=(9,))])
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    (cell,) = [p for p in s["properties"] if p["property"] == "within_tolerance"]
    assert (cell["cases"], cell["failures"]) == (2, 1)
    assert "| unfused | cpu | 2 | within_tolerance | 2 | 1 | 0.250 |" in (tmp_path / "summary.md").read_text()


def test_a_hang_a_death_and_a_harness_error_each_have_their_row_in_the_property_table(tmp_path):
    _write(tmp_path, [_row(), *(_row(status=st, checks=[], ms=(m,), note=f"{st} here") for st, m in
                                (("hang", 3), ("died", 5), ("error", 7), ("error", 9)))])
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    rows = {p["property"]: (p["cases"], p["failures"]) for p in s["properties"]}
    assert rows["hang"] == (1, 1) and rows["died"] == (1, 1) and rows["error"] == (2, 2)
    md = (tmp_path / "summary.md").read_text()
    assert "| unfused | cpu | 2 | error | 2 | 2 | - |" in md


def test_a_flaky_failure_s_copy_is_counted_once_in_the_property_table(tmp_path):
    """A failure found while Hypothesis searched is recorded when it happens; re-run on a fresh pool and passing, it
    is recorded again as a labelled copy (the first run's report, flaky): the table counts that failure once. A
    reproducible failure's second record is the re-run's own report: another case that failed."""
    tolerance = [{"name": "within_tolerance", "passed": False, "rank": 0}]
    bitwise = [{"name": "bitwise_equal", "passed": False, "rank": 1}]
    _write(tmp_path, [_row(),
                      _row(status="failed", checks=tolerance, ms=(9,)),
                      _row(status="failed", checks=tolerance, ms=(9,), reproducibility="flaky", rerun_status="passed"),
                      _row(status="failed", checks=bitwise, ms=(3,)),
                      _row(status="failed", checks=bitwise, ms=(3,), reproducibility="reproducible",
                           rerun_status="failed")])
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    cells = {p["property"]: (p["cases"], p["failures"]) for p in s["properties"]}
    assert cells == {"within_tolerance": (2, 1), "bitwise_equal": (2, 2)}
    assert s["failed_cases"] == 2 and [t["cases"] for t in s["timing"]] == [4]


def test_an_interrupted_campaign_fails_whatever_pytest_s_exit_status(tmp_path):
    """The time limit's verdict is FAIL even where pytest's exit status says 0 (the limit fired as it ended: the
    cases recorded are all that ran, not all the campaign was to run)."""
    _write(tmp_path, [_row(), _row(ms=(3,))])
    s = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci", interrupted="time limit of 60s reached")
    assert s["verdict"] == "FAIL"
    assert "INTERRUPTED: time limit of 60s reached" in (tmp_path / "summary.md").read_text()


def test_a_test_that_failed_after_its_cases_passed_is_listed_with_pytest_s_reason(tmp_path):
    """A test whose every case passed can still fail (Hypothesis's flaky or health-check errors, a teardown that
    raised): no failing case says why, so the junit failure is listed; only the test of a failing case is not."""
    _write(tmp_path, [_row(), _row(status="failed", impl="fused")])
    _junit(tmp_path, ("test_compute[unfused-cpu-W2]", '<error message="hypothesis.errors.Flaky: Inconsistent results">'
                                                      'x</error>'),
           ("test_compute[fused-cpu-W2]", '<failure message="GEMM-RS fuzz case FAILED">y</failure>'))
    s = summarise(str(tmp_path), pytest_rc=1, seconds=1.0, profile="ci")
    assert s["test_failures"] == [{"test": "test_compute[unfused-cpu-W2]", "kind": "error",
                                   "message": "hypothesis.errors.Flaky: Inconsistent results"}]
    assert "- error in test_compute[unfused-cpu-W2]: hypothesis.errors.Flaky" in (tmp_path / "summary.md").read_text()


def _record_of(status, ranks, spec=None, **more):
    from fuzz.case import Case, PoolSpec
    from fuzz.record import case_row
    from fuzz.report import CaseReport

    spec = spec or PoolSpec(impl="unfused", topology="cpu", world_size=4, optimize=1)
    return case_row(CaseReport(case=Case("compute", seed=1, N=64, K=64, max_M=64, ms=[3]), spec=spec, status=status,
                               ranks=ranks, **more))


def test_the_case_record_names_each_check_by_the_world_rank_that_made_it():
    """A check carries its group rank (a TP layout's rank 1 of [2, 3] is world rank 3): the record and the one-line
    reason name the process, the world rank the stacks and logs are keyed by."""
    from fuzz.summary import failure_reason

    ranks = {2: {"checks": [{"name": "within_tolerance", "passed": True, "skipped": False, "rank": 0}]},
             3: {"checks": [{"name": "within_tolerance", "passed": False, "skipped": False, "rank": 1,
                             "detail": "3 of 64 elements past the budget"}]}}
    row = _record_of("failed", ranks)
    assert [(c["rank"], c["passed"]) for c in row["checks"]] == [(2, True), (3, False)]
    assert failure_reason(row) == "within_tolerance (rank 3): 3 of 64 elements past the budget"


def test_the_case_record_keeps_the_optimize_levels_the_driver_and_each_rank_ran_at():
    """What the kill matrix reads to reject a session at another -O level than asked (mutants.meta): the levels the
    processes ran at, not the pool's request."""
    from fuzz.case import PoolSpec
    from mutants.meta import _optimize_mismatch

    spec = PoolSpec(impl="unfused", topology="cpu", world_size=2, optimize=1 - sys.flags.optimize % 2)
    row = _record_of("passed", {0: {"checks": [], "optimize": spec.optimize}, 1: {"checks": [], "optimize": 2}},
                     spec=spec)
    assert row["optimize"] == spec.optimize and row["driver_optimize"] == sys.flags.optimize
    assert row["rank_optimize"] == {"0": spec.optimize, "1": 2}
    assert "ranks ['1'] ran at -O2" in _optimize_mismatch([row], spec.optimize)
    assert "the pytest driver ran at" in _optimize_mismatch([row], spec.optimize)


def test_the_case_record_keeps_every_ranks_stacks_of_a_hang():
    stacks = {0: 'Thread 0x1 (most recent call first):\n  File "/r/a.py", line 3 in wait\n',
              1: 'Thread 0x2 (most recent call first):\n  File "/r/b.py", line 9 in reduce_scatter\n'}
    row = _record_of("hang", {0: {"checks": []}}, stacks=stacks, note="no result from rank(s) [1]")
    assert row["stacks"] == {"0": stacks[0], "1": stacks[1]}


def test_an_unreadable_junit_xml_fails_the_gate(tmp_path):
    """junit.xml is where the report learns of a test that failed before any case: unreadable, that is unknown, so
    every case passed and pytest's exit 0 are not enough -- FAIL, with the reason listed."""
    _write(tmp_path, [_row()])
    (tmp_path / "junit.xml").write_text("<testsuites><testsuite name=")
    s = summarise(str(tmp_path), pytest_rc=0, seconds=1.0, profile="ci")
    assert s["verdict"] == "FAIL"
    assert s["test_failures"] == [{"test": "junit.xml", "kind": "error", "message": "junit.xml unreadable"}]
