"""The benchmark scripts under bench/ as modules (they are scripts, not a package): for the CPU tests of their
tables, timing and helpers."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str):
    """``bench/<name>.py`` loaded as a fresh module (its own ``sys.path`` set-up runs, as when it is run)."""
    spec = importlib.util.spec_from_file_location(f"bench_script_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
