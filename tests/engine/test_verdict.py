"""The verdict rules (fuzz/verdict.py) on the ranks' result messages, the re-run label, and the rendered
report's order: each rule fed the result that must trip it."""

from __future__ import annotations

import json

import pytest

from fuzz.case import Case, PoolSpec
from fuzz.report import CaseReport
from fuzz.status import Reproducibility, Status
from fuzz.verdict import RAISED_CHECK, breaks_schedule, confirm, judge, settles_failure


def _check(name="within_tolerance", passed=True, skipped=False, detail="", **extra):
    return {"name": name, "passed": passed, "skipped": skipped, "rank": None, "total": 0, "n_wrong": 0, "n_nan": 0,
            "n_inf": 0, "worst_index": None, "worst_row": None, "worst_actual": None, "worst_expected": None,
            "worst_error": None, "allowed": None, "detail": detail, "extra": extra}


def _msg(*checks, error=None):
    return {"type": "result", "id": 0, "error": error, "checks": list(checks)}


OK = _msg(_check())
TRACEBACK = "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: harness broke\n"


def test_status_strings_are_the_records_strings():
    assert json.dumps({"status": Status.FAILED}) == '{"status": "failed"}'
    assert Status("hang") is Status.HANG and f"{Status.DIED}" == "died"
    assert {s for s in Status if s.ok} == {Status.PASSED, Status.SKIPPED}
    assert {s for s in Status if s.caught} == {Status.FAILED, Status.HANG, Status.DIED}
    assert Reproducibility("flaky") is Reproducibility.FLAKY


def test_every_rank_passed_is_passed():
    assert judge({0: OK, 1: OK}, 2) == (Status.PASSED, "")


def test_one_failed_check_on_one_rank_fails_the_case():
    assert judge({0: OK, 1: _msg(_check(), _check("padded_rows_untouched", passed=False))}, 2)[0] == Status.FAILED


def test_a_valid_call_that_raised_is_a_failure_of_the_implementation():
    raised = _msg(_check(RAISED_CHECK, passed=False, detail=TRACEBACK))
    assert breaks_schedule(raised) and not breaks_schedule(OK)
    assert judge({0: raised}, 2)[0] == Status.FAILED  # its peer never answered: still the failure


def test_a_device_fault_after_the_calls_is_a_failure_of_the_implementation_that_left_the_case():
    """A GPU fault surfacing after the implementation's calls (properties/device_fault.py) fails the case like a
    valid call that raised -- a kill, not the harness ERROR it was -- and may have left the peers mid-collective;
    with a peer that died the death is the finding (as for ``call_raised``)."""
    from fuzz.verdict import LEFT_MID_CASE
    from properties import DEVICE_FAULT

    assert DEVICE_FAULT in LEFT_MID_CASE and RAISED_CHECK in LEFT_MID_CASE
    fault = _msg(_check(), _check(DEVICE_FAULT, passed=False, detail="AcceleratorError: CUDA error: ..."))
    assert breaks_schedule(fault) and settles_failure(fault) == "raised"
    assert judge({0: fault, 1: OK}, 2) == (Status.FAILED, "")
    assert judge({0: fault}, 2, Status.HANG)[0] == Status.FAILED
    assert judge({0: fault}, 2, Status.DIED)[0] == Status.DIED


def test_a_device_fault_is_what_the_gpu_reports_never_a_torch_assert_or_a_harness_exception():
    import torch

    from properties import device_fault, is_device_fault
    from tests.engine.planted_impls import TORCH_CUDA_ADVICE  # "... to enable device-side assertions."

    assert is_device_fault(torch.AcceleratorError(f"CUDA error: unspecified launch failure\n{TORCH_CUDA_ADVICE}"))
    assert is_device_fault(RuntimeError(f"CUDA error: an illegal memory access was encountered\n{TORCH_CUDA_ADVICE}"))
    assert not is_device_fault(torch.AcceleratorError(f"CUDA error: device-side assert triggered\n"
                                                      f"{TORCH_CUDA_ADVICE}"))  # torch's ops
    assert not is_device_fault(RuntimeError("Expected all tensors to be on the same device"))
    assert not is_device_fault(ValueError("CUDA error: not a RuntimeError"))
    # the allocator running out (torch's OutOfMemoryError, "CUDA out of memory. ..."): not a fault the GPU reported;
    # the harness's own read-backs allocate too (16 ranks time-slicing one GPU ran out in the tolerance check)
    assert not is_device_fault(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
                                                      "total capacity of 79.19 GiB of which 1.06 GiB is free."))
    check = device_fault(torch.AcceleratorError("CUDA error: unspecified launch failure"), "calls: call0", rank=1)
    assert not check.passed and not check.skipped and check.rank == 1
    assert "unspecified launch failure" in check.detail and "calls: call0" in check.detail


def test_an_exception_escaping_run_case_is_a_harness_error_whatever_else_failed():
    status, why = judge({0: _msg(_check(passed=False)), 1: _msg(error=TRACEBACK)}, 2, Status.HANG)
    assert status == Status.ERROR and "rank(s) [1]" in why
    assert breaks_schedule(_msg(error=TRACEBACK))


def test_a_result_that_already_fails_the_case_starts_the_others_grace_period():
    assert settles_failure(_msg(error=TRACEBACK)) == "raised"
    assert settles_failure(_msg(_check(RAISED_CHECK, passed=False, detail=TRACEBACK))) == "raised"
    assert settles_failure(_msg(_check(), _check("padded_rows_untouched", passed=False))) == \
        "failed padded_rows_untouched"
    assert settles_failure(OK) is None
    assert settles_failure(_msg(_check("bitwise_equal", passed=False, skipped=True))) is None  # skipped: no verdict


def test_the_watchdog_decides_when_nothing_that_arrived_failed():
    assert judge({0: OK}, 2, Status.HANG)[0] == Status.HANG
    assert judge({}, 2, Status.DIED)[0] == Status.DIED
    assert judge({0: _msg(_check(passed=False))}, 2, Status.DIED)[0] == Status.FAILED
    # a peer's collective raising because a rank died is the death's consequence, not a second finding
    raised = _msg(_check(name="call_raised", passed=False, detail="RuntimeError: Connection closed by peer"))
    assert judge({0: raised}, 2, Status.DIED)[0] == Status.DIED
    assert judge({0: raised}, 2, None)[0] == Status.FAILED
    assert judge({0: raised, 1: _msg(_check(passed=False))}, 2, Status.DIED)[0] == Status.FAILED
    with pytest.raises(ValueError):
        judge({0: OK}, 1, Status.ERROR)


@pytest.mark.parametrize("ranks, why", [
    ({0: OK}, "no result from rank(s) [1]"),
    ({0: OK, 1: _msg()}, "rank(s) [1] ran no check"),
    ({}, "no result from rank(s) [0, 1]"),
])
def test_nothing_to_judge_by_is_an_error_never_a_pass(ranks, why):
    assert judge(ranks, 2) == (Status.ERROR, why)


def test_all_checks_skipped_is_skipped_with_the_reasons_and_one_real_check_is_not():
    skipped = _msg(_check("graph_replay", passed=False, skipped=True, detail="no CUDA graphs on cpu"))
    assert judge({0: skipped, 1: skipped}, 2) == (Status.SKIPPED, "every check was skipped: no CUDA graphs on cpu")
    assert judge({0: skipped, 1: OK}, 2)[0] == Status.PASSED


def _report(status, note="", ranks=None, seconds=1.0):
    case = Case("compute", seed=1, N=64, K=64, max_M=256, ms=[3])
    return CaseReport(case=case, spec=PoolSpec(), status=status, ranks=ranks or {}, note=note, seconds=seconds)


def test_a_failure_that_comes_back_is_reproducible_and_shows_the_rerun():
    first, rerun = _report(Status.FAILED, "first"), _report(Status.HANG, "rerun")
    shown = confirm(first, rerun)
    assert shown.reproducibility == Reproducibility.REPRODUCIBLE and shown.status == Status.HANG
    assert shown.rerun_status == Status.HANG and "rerun" in shown.note and "(first run: failed)" in shown.note
    assert shown.repro() == first.repro()


def test_a_failure_that_does_not_come_back_is_flaky_and_still_a_failure():
    shown = confirm(_report(Status.FAILED, "first"), _report(Status.PASSED))
    assert shown.reproducibility == Reproducibility.FLAKY and shown.status == Status.FAILED
    assert shown.rerun_status == Status.PASSED and "FLAKY" in shown.note
    with pytest.raises(ValueError):
        confirm(_report(Status.PASSED), _report(Status.FAILED))


def test_the_rendered_report_puts_the_exception_first():
    raised = _check(RAISED_CHECK, passed=False, detail="Traceback ...\nRuntimeError: kernel launch failed")
    wrong = _check("within_tolerance", passed=False, detail="3 rows wrong")
    report = _report(Status.FAILED, "rank(s) [1] gave no result", ranks={0: _msg(raised, wrong)})
    report.stacks = {1: "File x.py in reduce_scatter"}
    text = confirm(report, _report(Status.FAILED, "again", ranks={0: _msg(raised, wrong)})).render()
    order = [text.index(s) for s in ("REPRODUCIBLE", "RuntimeError: kernel launch failed", "again", "3 rows wrong",
                                     "REPRO: python -m fuzz.repro")]
    assert order == sorted(order), text
    assert text.count("kernel launch failed") == 1  # the call_raised check is not repeated among failed checks
    harness = _report(Status.ERROR, ranks={1: _msg(error=TRACEBACK)}).render()
    assert "rank 1 raised (harness error, nothing judged):\nTraceback" in harness


def test_a_failure_whose_rerun_skipped_every_check_is_still_the_failure_labelled_flaky():
    """A re-run that skipped every check did not reproduce the failure, nor did it pass: the first failure is shown
    (FLAKY), never the re-run's SKIPPED -- ``check_case`` would skip the test and the failure would be lost."""
    skipped = _msg(_check("within_tolerance", passed=False, skipped=True, detail="waived"))
    shown = confirm(_report(Status.FAILED, "first"), _report(Status.SKIPPED, ranks={0: skipped, 1: skipped}))
    assert shown.status == Status.FAILED and shown.reproducibility == Reproducibility.FLAKY
    assert shown.rerun_status == Status.SKIPPED and "the case skipped" in shown.note


def test_the_report_shows_the_exception_and_the_log_tail_of_every_rank_not_only_the_first():
    """A harness error on rank 1 (rank 0 passed) and a log tail on each rank: each is in the rendered report and in
    the case record."""
    from fuzz.record import case_row

    report = _report(Status.ERROR, ranks={0: OK, 1: _msg(error=TRACEBACK)})
    report.logs = {0: "rank 0 wrote this", 1: "rank 1 wrote this last"}
    text = report.render()
    assert "rank 1 raised (harness error, nothing judged):\nTraceback" in text and "harness broke" in text
    assert "--- rank 0 log (tail) ---" in text and "--- rank 1 log (tail) ---\nrank 1 wrote this last" in text
    row = case_row(report)
    assert row["errors"] == {"1": TRACEBACK} and set(row["logs"]) == {"0", "1"}


def test_the_report_shows_max_failures_failed_checks_and_counts_the_rest():
    checks = [_check(f"check_{i}", passed=False, detail=f"failure number {i}") for i in range(4)]
    text = _report(Status.FAILED, ranks={0: _msg(*checks)}).render(max_failures=4)
    assert all(f"failure number {i}" in text for i in range(4)) and "more failed checks" not in text
    text = _report(Status.FAILED, ranks={0: _msg(*checks)}).render(max_failures=3)
    assert "failure number 2" in text and "failure number 3" not in text and "... and 1 more failed checks" in text


def test_a_failed_check_that_does_not_name_its_rank_is_rendered_with_the_rank_that_sent_it():
    from fuzz.render import render_check

    unnamed = _check("within_tolerance", passed=False, detail="3 rows wrong")  # "rank": None
    assert render_check(unnamed, rank=1).startswith("[within_tolerance] rank 1: FAILED")
    assert render_check(unnamed).startswith("[within_tolerance]: FAILED")
    text = _report(Status.FAILED, ranks={0: OK, 1: _msg(unnamed)}).render()
    assert "[within_tolerance] rank 1: FAILED\n3 rows wrong" in text, text
