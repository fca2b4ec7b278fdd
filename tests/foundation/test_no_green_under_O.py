"""No checker goes green under ``python -O`` (issue 2, item 6): a tiny pytest session, run in a
subprocess with PYTHONOPTIMIZE=1, feeds wrong results to within_tolerance(...).raise_if_failed() and
to bitwise_equal(...).raise_if_failed(); the session must fail with PropertyViolation. A third test
proves -O was really on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

GENERATED = textwrap.dedent("""
    import sys

    import torch

    from oracle import all_rank_inputs, shard_truth
    from properties import bitwise_equal, within_tolerance


    def test_optimize_is_on():
        if sys.flags.optimize < 1:
            raise RuntimeError(f"PYTHONOPTIMIZE not in effect: {sys.flags.optimize}")


    def test_wrong_result_within_tolerance():
        truth = shard_truth(all_rank_inputs(0, 8, 16, 32, 2, "small"), 0, 8)
        wrong = truth.y.bfloat16() * 2  # every element off by 100%
        within_tolerance(wrong, truth).raise_if_failed()


    def test_wrong_result_bitwise_equal():
        truth = shard_truth(all_rank_inputs(0, 8, 16, 32, 2, "exact"), 1, 8)
        wrong = truth.y.bfloat16()
        wrong[1, 2] += 1
        bitwise_equal(wrong, truth.y, truth.n_valid).raise_if_failed()
""")


def test_checkers_fail_under_pythonoptimize(tmp_path):
    (tmp_path / "test_generated_wrong_results.py").write_text(GENERATED)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHONPATH"))}
    env["PYTHONOPTIMIZE"] = "1"
    env["PYTHONPATH"] = REPO_ROOT
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--rootdir",
            str(tmp_path),
            str(tmp_path / "test_generated_wrong_results.py"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "PropertyViolation" in out, out
    assert "2 failed, 1 passed" in out, out
    assert "Mismatched elements: 1 / " in out and "at index (1, 2)" in out, out
