"""The Hypothesis example database (fuzz/settings.py): a failure one (nightly/dev) run finds is the first
example the next run tries — the ``replay`` pass that CI runs before its derandomized ``ci`` pass —
and ``GEMM_RS_HYPOTHESIS_DB=none`` turns it off. Shown on a tiny property in a scratch project (the gate's
own tests use the same profiles)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CONFTEST = """
from fuzz import settings
settings.load()
"""

TEST = """
import os
from hypothesis import given, strategies as st

@given(st.integers(0, 10**9))
def test_small(x):
    with open(os.environ["TRIED"], "a") as f:
        f.write(f"{x}\\n")
    assert x < 1000
"""


def _run(tmp_path: Path, profile: str, db: str) -> list[int]:
    tried = tmp_path / f"tried-{profile}-{os.path.basename(db)}.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "HYPOTHESIS_"))}
    env.update(PYTHONPATH=f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}", HYPOTHESIS_PROFILE=profile,
               GEMM_RS_HYPOTHESIS_DB=db, TRIED=str(tried))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(tmp_path / "test_prop.py")], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the property fails in every run
    return [int(v) for v in tried.read_text().split()]


def test_a_failure_found_by_one_run_is_replayed_first_by_the_next(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_prop.py").write_text(TEST)
    db = str(tmp_path / "examples")
    first = _run(tmp_path, "dev", db)          # random search finds a failure and shrinks it to 1000
    assert 1000 in first and os.listdir(db)
    from fuzz.settings import stored_examples

    assert stored_examples(db) > 0 and stored_examples("none") == 0
    replay = _run(tmp_path, "replay", db)      # CI's first pass: only the stored failure, first
    assert replay[0] == 1000, replay[:5]
    again = _run(tmp_path, "nightly", db)      # the next random run also tries it first
    assert again[0] == 1000, again[:5]
    ci = _run(tmp_path, "ci", db)              # derandomized: no database, a search of its own
    assert ci[0] != 1000, ci[:5]
