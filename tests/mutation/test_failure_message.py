"""The kill matrix's one-line reason for a test that failed without a failing case
(``mutants.stop_at_first_failure.failure_message``): what was raised, not another ``raise`` line of the failing
function's source that pytest's long traceback lists above it (23rd session: an ERROR on the H200 named the pool's
"W=2 does not split evenly over nodes" check, which had not failed)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from mutants.stop_at_first_failure import first_line

FAILING = '''
class PoolError(Exception):
    pass


def start(world, nnodes):
    if nnodes < 1 or world % nnodes:
        raise PoolError(f"W={world} does not split evenly over {nnodes} nodes")
    raise PoolError("0 of 1 node agent(s) dialled in within 60 s")


def test_start():
    start(2, 1)
'''

RECORDER = '''
import json, os
import pytest
from mutants.stop_at_first_failure import failure_message


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.failed:
        with open(os.environ["MESSAGE_FILE"], "a") as f:
            f.write(json.dumps(failure_message(report)) + "\\n")
    return report
'''


def test_the_message_is_what_was_raised_not_another_raise_line_of_the_source(tmp_path):
    (tmp_path / "test_failing.py").write_text(FAILING)
    (tmp_path / "conftest.py").write_text(RECORDER)
    out = tmp_path / "messages.jsonl"
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "MESSAGE_FILE": str(out), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=long",
                           str(tmp_path / "test_failing.py")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "does not split evenly" in proc.stdout  # the long traceback lists that raise line above the real one
    messages = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert len(messages) == 1
    assert "dialled in within 60 s" in messages[0] and "split evenly" not in messages[0]


def test_the_text_fallback_prefers_the_exception_lines():
    text = textwrap.dedent('''\
        def start(world, nnodes):
            if nnodes < 1 or world % nnodes:
                raise PoolError(f"W={world} does not split evenly")
        >       raise PoolError("0 of 1 node agent(s) dialled in")
        E       fuzz.pool.PoolError: 0 of 1 node agent(s) dialled in
        ''')
    assert first_line(text) == "fuzz.pool.PoolError: 0 of 1 node agent(s) dialled in"
    assert first_line("Skipped: no GPU") == "Skipped: no GPU"
    assert first_line("E   assert 1 == 2\nE    +  where 1 = f()") == "assert 1 == 2"
    assert first_line("") == ""
