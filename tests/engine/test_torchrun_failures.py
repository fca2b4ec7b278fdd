"""What the driver reads from torchrun's failure report: every rank that failed, with its exit code, the
root cause first. torchrun stamps failures to the second and breaks ties by local rank, so the rank that
really died first (exit code 17 below) can be listed under "Failures" while its neighbour, killed by the
reset connection (SIGSEGV), is named the root cause: a DIED must name both (CI saw exactly this text)."""

from __future__ import annotations

from fuzz.node import failures, first_failure

TWO_FAILED = """\
[W1130 22:46:27.5 torch/distributed/elastic/multiprocessing/api.py] Sending process 20133 closing signal SIGTERM
Traceback (most recent call last):
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
fuzz.rank_main FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-30_22:46:27
  host      : localhost
  rank      : 3 (local_rank: 1)
  exitcode  : 17 (pid: 20133)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_22:46:27
  host      : localhost
  rank      : 2 (local_rank: 0)
  exitcode  : -11 (pid: 20131)  (SIGSEGV)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 20131
============================================================
"""

ONE_FAILED = """\
fuzz.rank_main FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_22:46:27
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 123)
  error_file: <N/A>
"""


def test_every_failed_rank_is_named_root_cause_first():
    assert first_failure(TWO_FAILED) == (2, -11)
    assert failures(TWO_FAILED) == [(2, -11), (3, 17)]


def test_a_single_failure_is_the_root_cause_alone():
    assert failures(ONE_FAILED) == [(1, -9)]


def test_no_report_names_nobody():
    assert failures("torchrun exited cleanly\n") == []
    assert first_failure("") is None
