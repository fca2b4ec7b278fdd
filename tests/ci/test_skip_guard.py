"""tests/skip_guard.py: a test of tests/ that skips for a reason no test there gives fails the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import skip_guard

ROOT = Path(__file__).resolve().parents[2]

PROBE = '''
import pytest

def test_runs():
    pass

@pytest.mark.skipif(True, reason="needs a CUDA GPU")
def test_gpu_only():
    pass

def test_a_case_the_code_under_test_skipped():
    with pytest.raises(RuntimeError):  # does not catch pytest's Skipped: the test is skipped, not failed
        pytest.skip("REPRODUCIBLE HANG: rank 1 gave no result")
'''


def _run(tmp_path: Path, body: str, *args: str) -> subprocess.CompletedProcess:
    held = tmp_path / "tests"
    held.mkdir()
    (held / "test_probe.py").write_text(body)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.skip_guard", "-p", "no:cacheprovider",
                           "-q", "--rootdir", str(tmp_path), *args, "tests/test_probe.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("jobs", [(), ("-n", "2")], ids=["no-xdist", "xdist"])
def test_a_skip_for_a_reason_no_test_gives_fails_the_run_and_is_named(tmp_path, jobs):
    r = _run(tmp_path, PROBE, *jobs)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "tests/test_probe.py::test_a_case_the_code_under_test_skipped: REPRODUCIBLE HANG" in r.stdout, r.stdout
    assert "test_gpu_only" not in r.stdout.split("skips no test of tests/ gives")[-1], r.stdout


def test_the_suites_own_reasons_pass(tmp_path):
    body = PROBE.replace('pytest.skip("REPRODUCIBLE HANG: rank 1 gave no result")',
                         'pytest.skip("nightly part: set HYPOTHESIS_PROFILE=nightly")')
    r = _run(tmp_path, body)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "2 skipped" in r.stdout and "skips no test of tests/ gives" not in r.stdout, r.stdout


def test_every_skip_reason_written_in_tests_is_one_the_guard_accepts():
    # a skip reason added to a test of tests/ (a skipif mark, pytest.skip) without a line in skip_guard.REASONS
    # would fail the run where that test skips: seen here first (this module's own probe reasons left out)
    written = set()
    for path in (ROOT / "tests").rglob("*.py"):
        if path.name == Path(__file__).name:
            continue
        text = path.read_text()
        for marker in ('reason="', 'reason=f"', 'pytest.skip("', 'pytest.skip(f"'):
            written.update(chunk.split('"', 1)[0] for chunk in text.split(marker)[1:])
    assert len(written) >= 8, f"the scan found {sorted(written)}: it is broken"
    refused = sorted(w for w in written if not skip_guard.REASONS.match(w))
    assert not refused, f"skip reasons tests/ gives that tests/skip_guard.py would fail: {refused}"
