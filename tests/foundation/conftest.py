"""Fixtures of the foundation tests. Helpers are loaded by file path under unique module names, so a
``_dist.py`` in another test folder can never shadow ours (test folders have no ``__init__.py``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def _load(name: str):
    unique = f"foundation{name}"
    if unique not in sys.modules:
        spec = importlib.util.spec_from_file_location(unique, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[unique] = module
        spec.loader.exec_module(module)
    return sys.modules[unique]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def run_ranks():
    """``run_ranks(func_name, W, params, timeout=...)``: run a function of ``_rank_workers.py`` on W gloo
    ranks; returns per-rank verdicts or raises with every rank's report."""
    dist_helpers = _load("_dist")
    worker = HERE / "_rank_workers.py"

    def run(func: str, world_size: int, params: dict, **kwargs):
        return dist_helpers.run_ranks(worker, func, world_size, params, **kwargs)

    return run


@pytest.fixture(scope="session")
def dist_helpers():
    return _load("_dist")
